"""C and Fortran programs built against an installed library: the pkg-config file the
install writes, `autotune show --paths` pointing at it, and the README's recipes run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.install import commit, library_dir
from autotune.pkgconfig import PC_NAME, pc_dir

from .reference import assert_close
from .test_table import make_table

ROOT = Path(__file__).resolve().parent.parent
PKG_CONFIG = shutil.which("pkg-config") or shutil.which("pkgconf")
GFORTRAN = shutil.which("gfortran")
needs_gfortran = pytest.mark.skipif(GFORTRAN is None, reason="needs gfortran (scripts/setup.sh --test installs it)")

pytestmark = pytest.mark.skipif(PKG_CONFIG is None, reason="needs pkg-config (scripts/setup.sh --test installs pkgconf)")


def autotune_cli(*args: str, home: Path) -> str:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          check=True, env=env, timeout=120).stdout


@pytest.fixture
def installed(built, private_home):
    """The session library committed into this test's home as an install commits one."""
    _, library = commit(make_table("host"), built, private_home)
    assert library == library_dir("host", private_home) / built.library.name
    return library


def readme_recipe(language: str = "c") -> tuple[str, str, str]:
    """(program, the shell commands after it, expected output) of the README's ``language`` recipe."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## From C, C++ or Fortran", 1)[1].split("\n## ", 1)[0]
    found = re.search(rf"```{language}\n(.*?)```\s*```sh\n(.*?)```", section, re.DOTALL)
    assert found, f"README has no {language} recipe"
    program, commands = found.groups()
    expected = re.search(r"prints: (.*?)(?: \*/)?$", program, re.MULTILINE).group(1)
    return program, commands, expected


def run_as_written(language: str, source: str, home: Path, tmp_path: Path) -> None:
    """The README's ``language`` program and commands, run by bash in an empty directory
    with an `autotune` command on PATH: the snippet cannot drift from what works."""
    program, commands, expected = readme_recipe(language)
    (tmp_path / source).write_text(program)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "autotune"
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m autotune \"$@\"\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PKG_CONFIG_PATH")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", AUTOTUNE_HOME=str(home))
    done = subprocess.run(["bash", "-e", "-c", commands], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == expected, done.stdout


def test_install_writes_a_pkg_config_file_that_show_paths_names(installed, private_home, tmp_path):
    pc = pc_dir(installed.parent) / PC_NAME
    assert pc.is_file()
    out = autotune_cli("show", "--paths", home=private_home)
    assert str(pc) in out and f"PKG_CONFIG_PATH={pc.parent}" in out.splitlines()
    env = {**os.environ, "PKG_CONFIG_PATH": str(pc.parent)}
    flags = subprocess.run([PKG_CONFIG, "--cflags", "--libs", "autotune"], capture_output=True, text=True,
                           check=True, env=env).stdout.split()
    assert f"-I{installed.parent}" in flags and f"-L{installed.parent}" in flags and "-lautotune" in flags
    assert (Path(flags[flags.index(f"-I{installed.parent}")][2:]) / "autotune.h").is_file()

    program, _, expected = readme_recipe()
    (tmp_path / "example.c").write_text(program)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "example.c", *flags, "-o", "example"], cwd=tmp_path,
                   check=True, capture_output=True, text=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    done = subprocess.run(["./example"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == expected, done.stdout + done.stderr
    # The rpath, not a search path, found the library: the installed copy.
    ldd = subprocess.run(["ldd", str(tmp_path / "example")], capture_output=True, text=True, env=env).stdout
    assert f"libautotune.so => {installed}" in ldd, ldd


def test_readme_c_recipe_runs_as_written(installed, private_home, tmp_path):
    run_as_written("c", "example.c", private_home, tmp_path)


@needs_gfortran
def test_readme_fortran_recipe_runs_as_written(installed, private_home, tmp_path):
    run_as_written("fortran", "example.f90", private_home, tmp_path)


# (M, N, K): one element, K = 0 (C = beta C), below and across the kernels' tiles,
# a GEMV-like column, and sizes that reach the blocked path.
FORTRAN_SHAPES = ((1, 1, 1), (4, 3, 0), (5, 7, 3), (13, 33, 23), (17, 1, 129), (87, 93, 56))


def _fortran_case(exe: Path, cwd: Path, env: dict[str, str], rng: np.random.Generator, dtype: type, ta: str, tb: str,
                  shape: tuple[int, int, int], alpha: float, beta: float) -> None:
    M, N, K = shape
    rows_a, cols_a = (K, M) if ta in "Tt" else (M, K)
    rows_b, cols_b = (N, K) if tb in "Tt" else (K, N)
    lda, ldb, ldc = rows_a + 3, rows_b + 1, M + 2  # every leading dimension past its rows
    # NaN in the rows past each matrix: a read of them shows in C.  With beta = 0,
    # C's input is NaN too, which BLAS must not read.
    A = np.full((lda, cols_a), np.nan, dtype)
    B = np.full((ldb, cols_b), np.nan, dtype)
    C = np.full((ldc, N), -7.0, dtype)  # the padding rows must come back as -7
    A[:rows_a] = rng.standard_normal((rows_a, cols_a))
    B[:rows_b] = rng.standard_normal((rows_b, cols_b))
    C[:M] = rng.standard_normal((M, N)) if beta != 0 else np.nan
    (cwd / "in.bin").write_bytes(A.tobytes("F") + B.tobytes("F") + C.tobytes("F"))
    prec = "S" if dtype is np.float32 else "D"
    case = f"{prec} {ta} {tb} {M} {N} {K} {lda} {ldb} {ldc} {alpha!r} {beta!r}\n"
    done = subprocess.run([str(exe)], input=case, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, case + done.stdout + done.stderr
    got = np.frombuffer((cwd / "out.bin").read_bytes(), dtype).reshape((ldc, N), order="F")
    assert np.all(got[M:] == -7.0), f"{case}: rows past M of C were written"
    C0 = None if beta == 0 else C[:M]
    assert_close(got[:M], A[:rows_a], B[:rows_b], C0, alpha, beta, ta in "Tt", tb in "Tt")


@needs_gfortran
def test_fortran_sgemm_dgemm_through_pkg_config(installed, tmp_path):
    """A Fortran program calling sgemm/dgemm, built with pkg-config's flags against the
    installed library, over every transposition (upper and lower case), both dtypes,
    padded leading dimensions and the beta = 0 case that must not read C."""
    pc = pc_dir(installed.parent)
    env = {**os.environ, "PKG_CONFIG_PATH": str(pc)}
    libs = subprocess.run([PKG_CONFIG, "--libs", "autotune"], capture_output=True, text=True, check=True,
                          env=env).stdout.split()
    exe = tmp_path / "gemm_check"
    subprocess.run([GFORTRAN, "-Wall", "-Werror", str(ROOT / "tests" / "fortran" / "gemm_check.f90"), *libs,
                    "-o", str(exe)], check=True, capture_output=True, text=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, env=env).stdout
    assert f"libautotune.so => {installed}" in ldd, ldd
    rng = np.random.default_rng(16)
    for dtype in (np.float32, np.float64):
        for ta, tb in (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"), ("n", "t"), ("t", "n")):
            for shape in FORTRAN_SHAPES:
                _fortran_case(exe, tmp_path, env, rng, dtype, ta, tb, shape, 1.0, 0.0)
            _fortran_case(exe, tmp_path, env, rng, dtype, ta, tb, (13, 33, 23), 1.5, -0.5)
