"""The thread split (threads.c): its longest-processing-time order, and its charge for shared lines of C.

LPT takes the items by decreasing predicted time, ties by index.  threads.c
buckets them by time when a plan has few distinct times (a tiling repeats a
handful of block sizes) instead of sorting thousands of steps; the order must be
the one qsort gives with LPT's comparator, or plans would change with the
number of distinct times.  tests/c/lpt_check.c compares the two over random
item sets: few times, more than the buckets hold, ties, NaNs.

A candidate split is charged for each line of C two threads would write;
tests/c/shared_lines_check.c checks that this turns a split by rows inside a
line into one by columns, and leaves it where the lines are whole.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "kernels_src" / "runtime"


def _run_check(tmp_path: Path, name: str, *args: str) -> None:
    """Compile tests/c/<name>.c (which includes threads.c) and run it: it prints "ok"."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("needs a host C compiler (cc, gcc or clang)")
    out = tmp_path / name
    subprocess.run([cc, "-O2", "-std=c11", "-I", str(ROOT / "kernels_src" / "include"), "-I", str(RUNTIME),
                    str(ROOT / "tests" / "c" / f"{name}.c"), "-lm", "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    done = subprocess.run([str(out), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bucketed_lpt_order_is_qsorts(tmp_path: Path, seed: int):
    _run_check(tmp_path, "lpt_check", str(seed))


def test_a_split_that_shares_lines_of_c_loses_to_one_that_does_not(tmp_path: Path):
    _run_check(tmp_path, "shared_lines_check")
