"""C programs built against an installed library: the pkg-config file the install
writes, `autotune show --paths` pointing at it, and the README's recipe run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.install import commit, library_dir
from autotune.pkgconfig import PC_NAME, pc_dir

from .test_table import make_table

ROOT = Path(__file__).resolve().parent.parent
PKG_CONFIG = shutil.which("pkg-config") or shutil.which("pkgconf")

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


def readme_recipe() -> tuple[str, str, str]:
    """(C program, shell commands, expected output) of the README's C section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## From C, C++ or Fortran", 1)[1].split("\n## ", 1)[0]
    program = re.search(r"```c\n(.*?)```", section, re.DOTALL).group(1)
    commands = re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)
    expected = re.search(r"prints: (.*?) \*/", program).group(1)
    return program, commands, expected


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
    """The README's program and commands, run by bash in an empty directory with an
    `autotune` command on PATH: the snippet cannot drift from what works."""
    program, commands, expected = readme_recipe()
    (tmp_path / "example.c").write_text(program)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "autotune"
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m autotune \"$@\"\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PKG_CONFIG_PATH")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", AUTOTUNE_HOME=str(private_home))
    done = subprocess.run(["bash", "-e", "-c", commands], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == expected, done.stdout
