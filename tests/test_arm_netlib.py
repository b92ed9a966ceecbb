"""The reference BLAS testers on Arm: Debian's arm64 netlib testers under QEMU
with the aarch64 libautotune of `autotune install --target sme2 --quick` preloaded.

The same testers and widened inputs as tests/test_netlib.py (N up to 65, above
and below every kernel and ZA tile), run on the CPU models the one aarch64
library meets: SME2 at SVL 512 and at SVL 256 (each runs the kernel set made for
its vector length), a CPU without SME and one with SVE but no SME (both compute
with the NEON family and the portable edge code).  These testers found
a wrong answer that only a long sequence of calls showed (SGEMM('N','N',16,16,1,
..., LDA=17, LDB=2) after deeper calls of the same block, values near 1e9: a
cached plan's single-kernel shortcut called packed SME2 kernels on unpacked
operands); they are its regression test.

scripts/setup_arm.sh unpacks the testers and what they load (libblas3,
libgfortran5, libc6 for arm64) into <tools>/arm64-netlib, the sysroot QEMU reads
with -L.  One CPU model runs by default, the others with -m slow.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from autotune.home import tools_dir

from .test_netlib import CASES, SIZES, check_report, widened_input

SYSROOT = tools_dir() / "arm64-netlib"
#: The testers and their inputs.  QEMU opens the program itself on this machine,
#: without the -L prefix, so it is named by its path here.
TESTERS = SYSROOT / "usr" / "lib" / "aarch64-linux-gnu" / "blas"
#: Every run needs the run's cross-built install (minutes of emulation, shared by
#: the xdist workers), so all of them are in the slow suite (CI runs it).  QEMU
#: executes SME2 instructions far slower than NEON ones and the cblas testers cost
#: twice the Fortran ones (both layouts), so the SME2 models run a Fortran tester
#: each (every transposition) and the NEON-only and SVE-only models all four
#: (docs/arm.md has the times).
CPUS = ("cortex-a76", "max,sme256=on", "neoverse-v1", "max,sme512=on")
#: Each SME2 model runs one Fortran tester, the two precisions split between them:
#: both testers on both models took 8-9 minutes each under QEMU (2026-12-06, 2-core
#: Xeon VM), half of CI's slow stage.  SVL 256 and 512 carry different kernel sets
#: and f32 and f64 different tiles, so every set and every tile still runs.
SME2_TESTERS = {"max,sme256=on": "xblat3d", "max,sme512=on": "xblat3s"}
SME2_CPUS = tuple(SME2_TESTERS)
#: The SME2 models' sizes: still below, at and past one, two and four tiles of either
#: SVL, without 13 and 47, which carry over half of the flops of the calls (sum of
#: M N K over every triple: (125 / 185)^3 of it is left).
SME2_SIZES = tuple(n for n in SIZES if n not in (13, 47))
RUNS = [pytest.param(*case, cpu, id=f"{case[0]}-{cpu}")
        for cpu in CPUS for case in CASES
        if SME2_TESTERS.get(cpu, case[0]) == case[0]]

pytestmark = [
    pytest.mark.arm,
    pytest.mark.slow,
    pytest.mark.skipif(not (TESTERS / "xblat3s").exists(),
                       reason=f"needs Debian's arm64 netlib testers in {SYSROOT} (scripts/setup_arm.sh unpacks them)"),
]


@pytest.mark.parametrize("tester, shipped, routine, summary, cpu", RUNS)
def test_reference_tester_passes_on_arm(sme2_install, tmp_path, cpu, tester, shipped, routine, summary):
    target, library = sme2_install.target, sme2_install.library
    text = widened_input(TESTERS / shipped, routine, SME2_SIZES if cpu in SME2_CPUS else SIZES)
    assert f"{routine} " in text and " 65 " in text + " "
    bindings = tmp_path / "bindings"
    # QEMU maps the guest's paths into the sysroot first and falls back to this
    # machine's, so the library and the bindings file keep their own paths.
    runner = [target.runner[0], "-cpu", cpu, "-L", str(SYSROOT), "-E", f"LD_PRELOAD={library}",
              "-E", "LD_DEBUG=bindings", "-E", f"LD_DEBUG_OUTPUT={bindings}"]
    start = time.monotonic()
    done = subprocess.run([*runner, str(TESTERS / tester)], input=text,
                          capture_output=True, text=True, cwd=tmp_path, timeout=2400)
    print(f"{tester} on {cpu}: {time.monotonic() - start:.1f} s")
    report = (tmp_path / summary).read_text() if summary else done.stdout
    bound = "".join(p.read_text() for p in tmp_path.glob("bindings*"))
    check_report(report, bound, done, routine, library)


def test_the_library_carries_both_arm_families(sme2_install):
    """What makes the CPU models above differ: SME2 kernels for the SME2 CPUs,
    NEON for the others."""
    elf = sme2_install.library.read_bytes()[:20]
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64
    assert sme2_install.table.host.svl_bits == 512
    assert {r.spec.isa for r in sme2_install.table.selected()} == {"sme2", "neon"}
