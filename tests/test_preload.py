"""libautotune preloaded in place of a system BLAS: a program that never heard of
autotune gets autotune's sgemm_ / cblas_dgemm and BLAS results."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
OPENBLAS = Path("/usr/lib/x86_64-linux-gnu/libopenblas.so")


def run_client(source: str, blas: str, library: Path, tmp_path: Path
               ) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """tests/c/``source`` linked with ``blas``, run alone and with ``library`` preloaded."""
    exe = tmp_path / "client"
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Werror", str(ROOT / "tests" / "c" / source),
                    "-o", str(exe), blas, "-lm", "-ldl"],
                   check=True, capture_output=True, text=True, timeout=120)
    alone = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    env = {**os.environ, "LD_PRELOAD": str(library)}
    return alone, subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.skipif(not OPENBLAS.exists(), reason="needs a system BLAS to preload over: "
                    "libopenblas-dev (scripts/setup.sh --test installs it)")
def test_preloaded_library_replaces_the_system_blas(built, tmp_path):
    alone, preloaded = run_client("preload_client.c", "-lopenblas", built.library, tmp_path)
    assert alone.returncode == 0 and "openblas" in alone.stdout, alone.stdout + alone.stderr
    assert preloaded.returncode == 0, preloaded.stdout + preloaded.stderr
    lines = dict(line.split(" ", 1) for line in preloaded.stdout.splitlines() if " " in line)
    assert lines["sgemm_"].endswith("libautotune.so") and lines["cblas_dgemm"].endswith("libautotune.so")
    assert preloaded.stdout.rstrip().endswith("ok")


SYSTEM_BLAS = Path("/usr/lib/x86_64-linux-gnu/libblas.so")
SYSTEM_PYTHON = Path("/usr/bin/python3")


def counted_plans(stdout: str) -> int | None:
    """The client's "plans N" line: plan-cache lookups libautotune served (None: not loaded)."""
    for line in stdout.splitlines():
        if line.startswith("plans "):
            value = line.split()[1]
            return None if value == "none" else int(value)
    return None


@pytest.mark.skipif(not SYSTEM_BLAS.exists(), reason="needs the system BLAS's development link: "
                    "libblas-dev (scripts/setup.sh --test installs it)")
def test_a_program_linked_with_the_system_blas_runs_on_autotune_when_preloaded(built, tmp_path):
    alone, preloaded = run_client("system_blas_client.c", "-lblas", built.library, tmp_path)
    assert alone.returncode == 0 and alone.stdout.rstrip().endswith("ok"), alone.stdout + alone.stderr
    assert "libautotune" not in alone.stdout and counted_plans(alone.stdout) is None
    assert preloaded.returncode == 0 and preloaded.stdout.rstrip().endswith("ok"), preloaded.stdout + preloaded.stderr
    assert f"dgemm_ {built.library}" in preloaded.stdout
    # Both products (dgemm_ and sgemm_) went through libautotune's plan cache.
    assert counted_plans(preloaded.stdout) == 2, preloaded.stdout


def system_numpy() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    done = subprocess.run([str(SYSTEM_PYTHON), "-c", "import numpy"], capture_output=True,
                          env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    return done.returncode == 0


@pytest.mark.skipif(not system_numpy(), reason="needs Debian's python3-numpy (scripts/setup.sh --test installs it)")
def test_debian_numpy_runs_on_autotune_when_preloaded(built):
    """Debian's numpy calls cblas_?gemm of libblas.so.3; preloaded, those are
    libautotune's.  (pip's numpy cannot be reached so: docs/runtime.md#preloading.)"""
    client = str(ROOT / "tests/c/system_numpy_client.py")
    # The system python with nothing of this environment's Python: no PYTHONPATH or PYTHONHOME.
    env = {"PATH": os.environ.get("PATH", ""), "OPENBLAS_NUM_THREADS": "1"}
    alone = subprocess.run([str(SYSTEM_PYTHON), client], capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 0 and alone.stdout.rstrip().endswith("ok"), alone.stdout + alone.stderr
    assert "numpy /usr/lib/python3/" in alone.stdout and counted_plans(alone.stdout) is None

    preloaded = subprocess.run([str(SYSTEM_PYTHON), client], capture_output=True, text=True, timeout=120,
                               env={**env, "LD_PRELOAD": str(built.library)})
    assert preloaded.returncode == 0 and preloaded.stdout.rstrip().endswith("ok"), preloaded.stdout + preloaded.stderr
    # The client's 24 products (and its float64 references) went through libautotune.
    assert counted_plans(preloaded.stdout) >= 24, preloaded.stdout
