"""Real clients nobody here wrote, on the preloaded library: Debian's scipy.linalg and
numpy.linalg test suites, under the system Python.

Each suite runs twice per BLAS configuration, without and with libautotune in
``LD_PRELOAD``, and must end with the same counts (passed, failed, skipped, ...).
Two configurations: the OpenBLAS alternative Debian installs (its LAPACK calls
OpenBLAS's own GEMM inside; scipy.linalg.blas and numpy's matmul reach ours), and
the reference LAPACK (``LD_LIBRARY_PATH`` to Debian's ``blas``/``lapack`` folders),
whose ``dgetrf``, ``dpotrf`` and friends call ``dgemm_``, which the preload makes
ours.  AUTOTUNE_RECORD proves that the library really computed: every shape it
planned is in the record.  Slow (minutes): CI's slow stage runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

SYSTEM_PYTHON = Path("/usr/bin/python3")
REFERENCE = ("/usr/lib/x86_64-linux-gnu/blas", "/usr/lib/x86_64-linux-gnu/lapack")
SUITES = ("scipy.linalg", "numpy.linalg")
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|warnings?)")


def _has(module: str) -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    done = subprocess.run([str(SYSTEM_PYTHON), "-c", f"import {module}, pytest"], capture_output=True,
                          env={"PATH": os.environ.get("PATH", "")}, timeout=120)
    return done.returncode == 0


def outcome(text: str) -> dict[str, int]:
    """The counts of pytest's closing line (warnings left out: they vary with the environment)."""
    lines = [ln for ln in text.splitlines() if OUTCOME.search(ln) and " in " in ln]
    assert lines, text[-3000:]
    counts = {word.rstrip("s") if word[-1] == "s" and word.startswith(("error", "warning")) else word: int(n)
              for n, word in OUTCOME.findall(lines[-1])}
    counts.pop("warning", None)
    return counts


def run_suite(suite: str, env: dict[str, str], tmp_path: Path) -> str:
    done = subprocess.run([str(SYSTEM_PYTHON), "-m", "pytest", "--pyargs", suite, "-q", "-p", "no:cacheprovider",
                           "-o", "addopts="],
                          capture_output=True, text=True, timeout=1500, env=env, cwd=tmp_path)
    return done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("blas", ["openblas", "reference"])
def test_debian_suites_give_the_same_outcome_on_the_preloaded_library(built, tmp_path, suite, blas):
    module = suite.split(".")[0]
    if not _has(module):
        pytest.skip(f"needs Debian's python3-{module} and python3-pytest (scripts/setup.sh --test installs them)")
    if blas == "reference" and not all(Path(d).is_dir() for d in REFERENCE):
        pytest.skip("needs Debian's reference BLAS and LAPACK (libblas3, liblapack3)")
    # The system Python with nothing of this environment's: no PYTHONPATH, no PYTHONHOME.
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    if blas == "reference":
        env["LD_LIBRARY_PATH"] = ":".join(REFERENCE)
    alone = outcome(run_suite(suite, env, tmp_path))
    record = tmp_path / "planned.jsonl"
    text = run_suite(suite, {**env, "LD_PRELOAD": str(built.library), "AUTOTUNE_RECORD": str(record)}, tmp_path)
    preloaded = outcome(text)
    # The same failures, errors and skips.  A test its authors expect to fail (xfail, for
    # the reference BLAS's rounding) may pass on ours: that counts as the same outcome.
    for kind in ("failed", "error", "skipped"):
        assert preloaded.get(kind, 0) == alone.get(kind, 0), (kind, alone, preloaded, text[-5000:])
    expected = ("passed", "xfailed", "xpassed")
    assert sum(preloaded.get(k, 0) for k in expected) == sum(alone.get(k, 0) for k in expected), (alone, preloaded)
    assert preloaded.get("passed", 0) >= alone.get("passed", 0), (alone, preloaded)
    assert alone.get("passed", 0) > 100
    planned = record.read_text().splitlines() if record.exists() else []
    assert len(planned) > 50, f"only {len(planned)} products reached libautotune"
