"""libautotune preloaded in place of a system BLAS: a program that never heard of
autotune gets autotune's sgemm_ / cblas_dgemm and BLAS results."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
OPENBLAS = Path("/usr/lib/x86_64-linux-gnu/libopenblas.so")


@pytest.mark.skipif(not OPENBLAS.exists(), reason="needs a system BLAS to preload over: "
                    "libopenblas-dev (scripts/setup.sh --test installs it)")
def test_preloaded_library_replaces_the_system_blas(built, tmp_path):
    exe = tmp_path / "client"
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Werror", str(ROOT / "tests/c/preload_client.c"),
                    "-o", str(exe), "-lopenblas", "-lm", "-ldl"],
                   check=True, capture_output=True, text=True, timeout=120)
    alone = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert alone.returncode == 0 and "openblas" in alone.stdout, alone.stdout + alone.stderr

    env = {**os.environ, "LD_PRELOAD": str(built.library)}
    preloaded = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    assert preloaded.returncode == 0, preloaded.stdout + preloaded.stderr
    lines = dict(line.split(" ", 1) for line in preloaded.stdout.splitlines() if " " in line)
    assert lines["sgemm_"].endswith("libautotune.so") and lines["cblas_dgemm"].endswith("libautotune.so")
    assert preloaded.stdout.rstrip().endswith("ok")
