"""The reference BLAS testers (netlib's, as Debian ships them) with libautotune preloaded.

xblat3s/xblat3d test SGEMM/DGEMM through the Fortran interface and xscblat3/
xdcblat3 cblas_sgemm/cblas_dgemm in both layouts, each with its error exits:
wrong arguments must reach xerbla with the reference's parameter numbers.  The
shipped inputs stop at N = 9; ours widen N to 65 (the testers' NMAX) through
sizes above and below every kernel and block, and turn off the routines
libautotune does not provide.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

TESTERS = Path("/usr/lib/x86_64-linux-gnu/blas")
SIZES = (0, 1, 3, 7, 13, 16, 33, 47, 65)
CASES = [  # tester, shipped input, routine, summary file (None: stdout)
    ("xblat3s", "sblat3.in", "SGEMM", "sblat3.out"),
    ("xblat3d", "dblat3.in", "DGEMM", "dblat3.out"),
    ("xscblat3", "sin3", "cblas_sgemm", None),
    ("xdcblat3", "din3", "cblas_dgemm", None),
]

pytestmark = pytest.mark.skipif(not (TESTERS / "xblat3s").exists(),
                                reason="needs Debian's libblas-test (scripts/setup.sh --test installs it)")


def widened_input(shipped: Path, routine: str, sizes: tuple[int, ...] = SIZES) -> str:
    """The shipped input with N in ``sizes`` and every routine but ``routine`` turned off."""
    lines = []
    for line in shipped.read_text().splitlines():
        if "NUMBER OF VALUES OF N" in line:
            line = f"{len(sizes)}                 NUMBER OF VALUES OF N"
        elif "VALUES OF N" in line:
            line = " ".join(map(str, sizes)) + "  VALUES OF N"
        elif re.match(r"^(cblas_)?[sdSD][A-Z0-9a-z]+\s+[TF]\s", line):
            name = line.split()[0]
            line = re.sub(r"^(\S+\s+)[TF]", rf"\g<1>{'T' if name == routine else 'F'}", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def check_report(report: str, bound: str, done: subprocess.CompletedProcess, routine: str, library: Path) -> None:
    """The tester ran ``routine`` from ``library`` and it passed: its error exits
    and its computational tests (one per layout for cblas); ``bound`` is the
    dynamic loader's LD_DEBUG=bindings output."""
    assert done.returncode == 0, done.stderr[-2000:]
    # The routine really ran in libautotune, not in the reference BLAS behind it.
    symbol = routine.lower() + ("_" if not routine.startswith("cblas") else "")
    assert re.search(rf"to {re.escape(str(library))} .*`{symbol}'", bound), f"{symbol} not from libautotune"
    assert f"{routine} PASSED THE TESTS OF ERROR-EXITS" in " ".join(report.split()), report[-3000:]
    computational = re.findall(rf"{routine}\s+PASSED THE (?:[A-Z-]+\s+)?COMPUTATIONAL TESTS", report)
    assert len(computational) == (2 if routine.startswith("cblas") else 1), report[-3000:]
    assert "FAIL" not in report.upper(), report[-3000:]


@pytest.mark.parametrize("tester, shipped, routine, summary", CASES, ids=[c[0] for c in CASES])
def test_reference_tester_passes(built, tmp_path, tester, shipped, routine, summary):
    text = widened_input(TESTERS / shipped, routine)
    assert f"{routine} " in text and " 65 " in text + " "
    bindings = tmp_path / "bindings"
    env = {**os.environ, "LD_PRELOAD": str(built.library), "LD_DEBUG": "bindings",
           "LD_DEBUG_OUTPUT": str(bindings)}
    done = subprocess.run([str(TESTERS / tester)], input=text, capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    report = (tmp_path / summary).read_text() if summary else done.stdout
    bound = "".join(p.read_text() for p in tmp_path.glob("bindings*"))
    check_report(report, bound, done, routine, built.library)
