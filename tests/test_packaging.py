"""The package as pip builds it: pyproject.toml lists every package, and the wheel carries
the C sources `autotune install` compiles and the benchmarks `autotune bench` runs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import autotune

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_of_the_tree_is_listed():
    config = project()["tool"]["setuptools"]
    listed, mapped = set(config["packages"]), config["package-dir"]
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "autotune").rglob("__init__.py")}
    assert tree <= listed, f"not in pyproject.toml's packages: {sorted(tree - listed)}"
    assert mapped == {"autotune.kernels_src": "kernels_src", "autotune.benchmarks": "benchmarks"}
    assert listed == tree | set(mapped)


def test_metadata_has_one_version_and_the_command():
    meta = project()["project"]
    assert "version" in meta["dynamic"]
    assert project()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "autotune.__version__"}
    assert meta["scripts"] == {"autotune": "autotune.cli:main"}
    assert meta["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert not (ROOT / "setup.py").exists()  # one description of the package


@pytest.mark.slow
def test_the_wheel_carries_the_sources_install_compiles(tmp_path):
    # pip fetches the build backend (setuptools) from the package index.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "-w", str(tmp_path), "--no-deps",
                            "-q"], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("autotune-*.whl")
    assert wheel.name.startswith(f"autotune-{autotune.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for directory, package, suffixes in ((ROOT / "kernels_src", "autotune/kernels_src", (".c", ".h", ".S", ".md")),
                                         (ROOT / "benchmarks", "autotune/benchmarks", (".py", ".c", ".h", ".md"))):
        for path in directory.rglob("*"):
            if path.suffix in suffixes and "__pycache__" not in path.parts:
                assert f"{package}/{path.relative_to(directory).as_posix()}" in names
    assert "autotune/reports/templates/report.html.j2" in names
    assert "autotune/py.typed" in names  # PEP 561: type checkers read the package's hints
    assert not any(n.startswith(("tests/", "benchmarks/", "kernels_src/")) for n in names)  # one import name
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "autotune = autotune.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    # Installed from the wheel (the dependencies are this interpreter's), away from the checkout.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    # --force-reinstall: an autotune of the same version outside the venv (a developer's editable
    # install) would otherwise count as installed; pip never touches one outside the venv.
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["AUTOTUNE_HOME"] = str(tmp_path / "home")
    # `bench dask --help` is parsed by autotune.benchmarks.dask_graph: the installed copy reaches it.
    for args in (["--help"], ["bench", "--help"], ["bench", "--list-peers"], ["bench", "dask", "--help"]):
        done = subprocess.run([str(venv / "bin" / "autotune"), *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import autotune.home as h, autotune.benchmarks as b; print(h.kernels_src()); "
                            "print(b.__file__)"], capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=120)
    kernels, bench = where.stdout.split()
    assert kernels.startswith(str(venv)) and (Path(kernels) / "runtime" / "pool.c").is_file()
    assert bench.startswith(str(venv))
