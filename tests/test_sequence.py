"""A long run of varied calls in one process, each checked: what one call leaves
behind (a cached plan, a thread's scratch, a packed panel) must never change
the next call's answer.

Single checks pass a fresh library; a wrong answer that depends on the calls
before it (a cache key missing a leading dimension, a panel reused after K
changed) only shows in a sequence.  The shapes are the adversarial ones:
1, primes, just below and above kernel and block sizes, K = 0 and 1, leading
dimensions far above the operand, both storage orders, every transposition,
alpha and beta in {0, 1, other}, and each shape called again with other leading
dimensions so that plans keyed on them are told apart.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune.toolchain import find_cc

import autotune.runtime as rt

from .reference import assert_close, operand

SIDES = (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 65)
DEPTHS = (0, 1, 1, 2, 3, 7, 16, 17, 64, 129)
PADS = (0, 0, 1, 3, 17, 1000)
SCALARS = ((1.0, 0.0), (1.0, 1.0), (-1.5, 0.0), (0.5, -2.0), (0.0, 1.0), (2.0, 0.5))


@pytest.fixture(scope="module")
def lib(built):
    runtime = rt.use_library(built.library)
    assert runtime is not None
    return runtime


def _call(rng, dtype, M, N, K, ta, tb, pads, orders, alpha, beta):
    A = operand(rng, *((K, M) if ta else (M, K)), dtype, orders[0], pads[0])
    B = operand(rng, *((N, K) if tb else (K, N)), dtype, orders[1], pads[1])
    C = operand(rng, M, N, dtype, orders[2], pads[2])
    if beta == 0:
        C[...] = np.nan  # BLAS: beta = 0 does not read C
    C0 = C.copy()
    got = rt.gemm(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
    assert got is C
    assert_close(C, A, B, np.nan_to_num(C0), alpha, beta, ta, tb)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_long_sequence_of_varied_calls_stays_right(lib, seed):
    rng = np.random.default_rng(seed)
    seen = []
    for call in range(700):
        if seen and call % 4 == 3:
            # The same product again with other leading dimensions and scalars.
            dtype, M, N, K, ta, tb = seen[int(rng.integers(len(seen)))]
        else:
            dtype = (np.float32, np.float64)[int(rng.integers(2))]
            M, N = (int(rng.choice(SIDES)) for _ in range(2))
            K = int(rng.choice(DEPTHS))
            ta, tb = (bool(rng.integers(2)) for _ in range(2))
            seen.append((dtype, M, N, K, ta, tb))
        pads = [int(rng.choice(PADS)) for _ in range(3)]
        orders = ["CF"[int(rng.integers(2))] for _ in range(3)]
        alpha, beta = SCALARS[int(rng.integers(len(SCALARS)))]
        try:
            _call(rng, dtype, M, N, K, ta, tb, pads, orders, alpha, beta)
        except AssertionError as exc:
            raise AssertionError(f"call {call}: {np.dtype(dtype).name} M={M} N={N} K={K} ta={ta} tb={tb} "
                                 f"pads={pads} orders={orders} alpha={alpha} beta={beta}: {exc}") from exc


def test_k_one_after_deeper_calls_of_the_same_block(lib):
    """The tester's failing kind of call: K = 1 with a leading dimension just
    above the operand, after calls that planned the same M x N deeper."""
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        for K in (64, 17, 1, 2, 1):
            _call(rng, dtype, 16, 16, K, False, False, (1, 1, 1), ("F", "F", "F"), 1.0, 0.0)


def test_a_c_program_s_long_sequence_through_every_entry(built, tmp_path):
    """tests/c/sequence.c on this CPU: the same kind of run through the C entries
    (cblas, Fortran, at_*, the strided batch), with aliased operands, bad calls
    that must reach xerbla, thread counts and the packed path forced for a third
    (tests/test_cpu_models.py runs it under other CPU models)."""
    exe = tmp_path / "sequence"
    lib = Path(built.library)
    subprocess.run([*find_cc(), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{lib.parent}",
                    str(Path(__file__).parent / "c" / "sequence.c"), f"-L{lib.parent}", "-l:libautotune.so",
                    f"-Wl,-rpath,{lib.parent}", "-pthread", "-lm", "-o", str(exe)], check=True)
    done = subprocess.run([str(exe), "--seed", "9", "--calls", "800"], capture_output=True, text=True, timeout=300)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert not [e for e in events if e["event"] == "fail"], events[:5]
    (summary,) = [e for e in events if e["event"] == "summary"]
    assert done.returncode == 0 and summary["failures"] == 0, done.stderr[-500:]
    assert min(summary[k] for k in ("cblas", "fortran", "at_typed", "at_gemm", "batch_strided")) > 50
    assert summary["bad_calls"] > 10 and summary["refused_steps"] == 0
    assert summary["cpu_check"] == 0 and summary["usable"] == summary["kernels"]
    assert set(summary["families"]) - {"edge"}, summary  # the library's kernels ran
