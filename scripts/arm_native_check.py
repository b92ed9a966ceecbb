"""Inside an aarch64 userland (scripts/check_arm_native.sh): the native install path.

Run with the project on PYTHONPATH and QEMU_CPU naming the emulated CPU; the
arguments are `--only` patterns.  Detection must see what QEMU_CPU gives (SME2
and its vector length, or none), `autotune install --quick` must build a table of
kernels this CPU runs and a library, and autotune.gemm must match numpy with it.
Exits non-zero, saying why, on the first thing that is wrong.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np


def expected(cpu: str) -> tuple[bool, int | None]:
    """(SME2 present, SVL bits or None when the model leaves it to QEMU) of a QEMU CPU model."""
    if cpu.startswith("max") and "sme=off" not in cpu:
        svl = re.search(r"sme(\d+)=on", cpu)
        return True, int(svl[1]) if svl else None
    return False, 0


def fail(message: str) -> None:
    print(f"arm_native_check: FAILED: {message}", flush=True)
    sys.exit(1)


def main(patterns: list[str]) -> None:
    from autotune import host, toolchain

    cpu = os.environ.get("QEMU_CPU", "max")
    start = time.monotonic()
    info = host.detect()
    isas = toolchain.native_isas(info)
    print(f"detected in {time.monotonic() - start:.0f} s: {info.arch} {info.cpu!r} svl={info.svl_bits} "
          f"isas={isas} compiler={info.compiler!r} emulator={info.emulator!r}", flush=True)
    has_sme2, svl = expected(cpu)
    if info.arch != "aarch64":
        fail(f"arch {info.arch}, not aarch64")
    if ("sme2" in isas) != has_sme2 or (has_sme2 and svl and info.svl_bits != svl):
        fail(f"QEMU_CPU={cpu} should give sme2={has_sme2} svl={svl}; detected {isas}, svl {info.svl_bits}")
    # This runs under qemu-aarch64 on an x86-64 kernel: detection must know it, or the
    # table would pass QEMU's timings off as an Arm CPU's.
    if cpu not in info.emulator:
        fail(f"the host was not detected as emulated by QEMU -cpu {cpu} (emulator={info.emulator!r})")

    cli = [sys.executable, "-m", "autotune"]
    start = time.monotonic()
    done = subprocess.run([*cli, "install", "--quick", *(a for p in patterns for a in ("--only", p))],
                          capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    print(f"install: {time.monotonic() - start:.0f} s", flush=True)
    if done.returncode != 0:
        fail(f"autotune install exited {done.returncode}")
    library = re.search(r"library: (\S+)", done.stderr + done.stdout)
    if not library or not os.path.exists(library[1]):
        fail("install printed no library, or it does not exist")

    shown = subprocess.run([*cli, "show", "--json"], capture_output=True, text=True)
    if shown.returncode != 0:
        fail(f"autotune show --json exited {shown.returncode}: {shown.stderr[-500:]}")
    table = json.loads(shown.stdout)
    if table["provenance"] != "emulated" or table["host"].get("emulator") != info.emulator:
        fail(f"the table says provenance {table['provenance']!r}, host emulator "
             f"{table['host'].get('emulator')!r}: timings under QEMU must not pass for measured ones")
    kernels = table["kernels"]
    families = {k["isa"] for k in kernels}
    print(f"table: {len(kernels)} kernels, families {sorted(families)}, provenance {table['provenance']}",
          flush=True)
    if not kernels or not families <= set(isas):
        fail(f"table families {sorted(families)} not within what this CPU runs ({isas})")
    # Every family the CPU has, for both precisions: a model whose SVL lacks one
    # precision's kernels in --only would prove less than it claims.
    pairs = {(k["isa"], k["dtype"]) for k in kernels}
    wanted = {(isa, dtype) for isa in ("sme2", "neon") if isa != "sme2" or has_sme2 for dtype in ("f32", "f64")}
    if pairs != wanted:
        fail(f"table has (family, dtype) {sorted(pairs)}; expected {sorted(wanted)}")
    if has_sme2 and {k["name"].rsplit("_vl", 1)[-1] for k in kernels if k["isa"] == "sme2"} != {str(info.svl_bits)}:
        fail(f"SME2 kernels of another SVL than the CPU's {info.svl_bits} in the table")
    if {k["status"] for k in kernels} != {"validated"}:
        fail(f"kernel statuses {sorted({k['status'] for k in kernels})}")

    import autotune
    from autotune.runtime import api

    start = time.monotonic()
    rng = np.random.default_rng(0)
    cases = 0
    for dtype in (np.float32, np.float64):
        for m, n, k in ((1, 1, 1), (7, 13, 5), (16, 16, 1), (33, 47, 65), (64, 64, 64), (65, 33, 17)):
            for ta in (False, True):
                for tb in (False, True):
                    A = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
                    B = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
                    C = rng.standard_normal((m, n)).astype(dtype)
                    want = 1.5 * (A.T if ta else A) @ (B.T if tb else B) - 0.5 * C
                    got = autotune.gemm(A, B, C.copy(), alpha=1.5, beta=-0.5, trans_a=ta, trans_b=tb)
                    tol = 1e-4 if dtype == np.float32 else 1e-11
                    if not np.allclose(got, want, rtol=tol, atol=tol * k):
                        fail(f"gemm {np.dtype(dtype).name} {m}x{n}x{k} ta={ta} tb={tb}: "
                             f"max error {np.max(np.abs(got - want))}")
                    cases += 1
    loaded = api.current()
    if loaded is None or str(loaded.path) != library[1] or loaded.fast is None:
        # Without its _atfast extension the library is loaded but gemm is numpy's.
        fail(f"autotune.gemm did not run on {library[1]} (loaded: {loaded})")
    print(f"gemm: {cases} products match numpy with {loaded.path} ({time.monotonic() - start:.0f} s)",
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
