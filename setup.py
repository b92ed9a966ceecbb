"""autotune: install-time autotuned small and irregular GEMM."""

from setuptools import setup

setup(
    name="autotune",
    version="0.1.0",
    description="Install-time autotuning framework for GEMM micro-kernels and executing plans",
    python_requires=">=3.10",
    # kernels_src/ lives at the top of the repository (it is C, not Python) and is
    # shipped inside the package so a non-editable install finds it too.
    packages=[
        "autotune",
        "autotune.codegen",
        "autotune.plans",
        "autotune.runtime",
        "autotune.reports",
        "autotune.kernels_src",
    ],
    package_dir={"autotune.kernels_src": "kernels_src"},
    package_data={
        "autotune.kernels_src": ["*.c", "*.h", "*/*.c", "*/*.h", "*/*.S", "*/*.j2", "*/*.md"],
        "autotune.codegen": ["templates/*.j2"],
        "autotune.reports": ["templates/*", "static/*"],
    },
    install_requires=[
        "numpy>=1.24",
        "pandas>=2.0",
        "optuna>=3.4",
        "rich>=13.0",
        "platformdirs>=3.0",
        "jinja2>=3.1",
        "matplotlib>=3.7",
    ],
    extras_require={"test": ["pytest>=7", "hypothesis>=6"]},
    entry_points={"console_scripts": ["autotune = autotune.cli:main"]},
)
