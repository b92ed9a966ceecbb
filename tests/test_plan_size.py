"""Plans and the plan cache in bounded memory (issue 26, "nothing grows without bound").

A no-pack plan lists a step per kernel call and a packed plan a record per block,
so a tall, thin C used to need a plan as large as C: 400 shapes near 2^20 x 1 x 1
held 1.6 GB in the 512-plan cache, and `autotune plan 8589934592 1 1` peaked at
14.7 GB.  Plans past a size are now made of chunks (plan.c), and the cache is
bounded in bytes (cache.c).  RSS is measured in fresh processes.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autotune
import autotune.runtime as rt
from autotune import plans
from autotune.runtime import loader

from .peak import PEAK_KIB
from .reference import assert_close, check_gemm

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lib(built):
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    yield runtime
    runtime.lib.at_params_set(None)
    rt.set_num_threads(0)


def run_python(code: str, library: Path, timeout: float = 120) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code, str(library)], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


RSS = "int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')"


def test_plan_cache_is_bounded_in_bytes(built):
    """60 tall, thin shapes near 2^20 x 1 x 1 (plans of ~4 MB each, kept by the
    cache as they came): the process grows by the cache's budget at most, not by
    the plans' sum (+600 MB for 120 shapes before the bound, +59 MB after)."""
    code = f"""
import os, sys, numpy as np
import autotune.runtime as rt
rt.use_library(sys.argv[1])
M = 1 << 20
A, B, C = np.ones((M, 1), np.float32), np.ones((1, 1), np.float32), np.empty((M, 1), np.float32)
rt.gemm(A[:16], B, C[:16])
before = {RSS}
for m in range(M - 60, M):
    rt.gemm(A[:m], B, C[:m])
    assert C[m - 1, 0] == 1.0
print(before, {RSS}, rt.cache_stats()[0])
"""
    before, after, created = map(int, run_python(code, built.library))
    assert created >= 60
    assert after - before < 100 << 20, f"RSS grew by {(after - before) >> 20} MB"


@pytest.mark.parametrize("M, N", [(8589934592, 1), (10**12, 1), (1, 10**12), (100000, 100000),
                                  (2**63 - 1, 1)])
def test_huge_plans_are_made_quickly_in_bounded_memory(built, M, N):
    """`autotune plan 8589934592 1 1` took 80 s and 14.7 GB; 10^12 x 1 ran past a
    minute.  Chunked plans are a few plans of bounded size, listed a window at a
    time; the counts still cover the whole product."""
    code = PEAK_KIB + f"""
import os, sys, time
import autotune.runtime as rt
from autotune import plans
rt.use_library(sys.argv[1])
start = time.perf_counter()
p = plans.plan({M}, {N}, 1)
print(time.perf_counter() - start, 1024 * peak_kib(), p.step_count,
      sum(calls for _, calls, _ in p.usage), sum(elements for _, _, elements in p.usage))
"""
    seconds, peak, steps, calls, elements = run_python(code, built.library)
    assert float(seconds) < 10
    assert int(peak) < 400 << 20, f"peak RSS {int(peak) >> 20} MB"
    assert int(steps) == int(calls) > 0
    assert int(elements) == M * N


def test_chunked_plans_cover_c_once(lib):
    """A chunked plan's steps, read back through the windowed API, tile C exactly:
    in each column of C the steps' row ranges follow one another from 0 to M."""
    for M, N, layout in ((2**20 + 37, 2, "col"), (2, 2**20 + 37, "row")):
        p = plans.plan(M, N, 5, layout=layout, max_steps=10**7)
        assert p.step_count == len(p.steps)
        i0, j0, mb, nb = (np.array([getattr(s, f) for s in p.steps]) for f in ("i0", "j0", "mb", "nb"))
        if layout == "row":  # C is 2 x M: look at it transposed
            i0, j0, mb, nb = j0, i0, nb, mb
        for j in range(min(M, N)):
            mine = (j0 <= j) & (j < j0 + nb)
            order = np.argsort(i0[mine])
            starts, ends = i0[mine][order], (i0 + mb)[mine][order]
            assert starts[0] == 0 and ends[-1] == max(M, N) and np.array_equal(starts[1:], ends[:-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_chunked_plans_compute_the_product(lib, dtype):
    """Tall (no-pack chunks, both layouts, every transposition), a batch through
    the strided path and a shared C, and packed chunks (small blocks force them
    on a moderate C) over two threads."""
    rng = np.random.default_rng(6)
    M, N, K = 2**19 + 37, 3, 3  # 1.6 million elements of C: two chunks
    for ta in (False, True):
        for tb in (False, True):
            for order in "CF":
                A = np.asarray(rng.standard_normal((K, M) if ta else (M, K)), dtype, order=order)
                B = np.asarray(rng.standard_normal((N, K) if tb else (K, N)), dtype, order=order)
                C0 = np.asarray(rng.standard_normal((M, N)), dtype, order=order)
                C = C0.copy(order=order)
                rt.gemm(A, B, C, alpha=0.5, beta=2.0, trans_a=ta, trans_b=tb)
                assert_close(C, A, B, C0, 0.5, 2.0, ta, tb)
    A = rng.standard_normal((3, M, K)).astype(dtype)
    B = rng.standard_normal((3, K, N)).astype(dtype)
    C = rt.gemm_batch(A, B)
    for i in range(3):
        assert_close(C[i], A[i], B[i], None, 1.0, 0.0, False, False)
    shared = np.zeros((M, N), dtype)
    rt.gemm_batch(A, B, np.lib.stride_tricks.as_strided(shared, (3, M, N), (0,) + shared.strides), beta=1.0)
    want = sum(A[i].astype(np.float64) @ B[i] for i in range(3))
    assert np.allclose(shared, want, rtol=1e-5, atol=1e-5)

    p = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(p)) == 0
    for d in range(2):
        p.pack_flops[d] = 0.0
        p.blk_m[d], p.blk_n[d], p.blk_k[d] = 8, 8, 16
    p.thread_flops = p.thread_seconds = 0.0
    assert lib.lib.at_params_set(ctypes.byref(p)) == 0
    rt.set_num_threads(2)
    try:
        M, N, K = 1100, 1300, 20  # 138 x 163 blocks of 8: chunks of 128 x 128 blocks
        made = plans.plan(M, N, K, dtype="f32" if dtype == np.float32 else "f64", max_steps=0)
        assert made.path == "packed"
        for ta, tb in ((False, False), (True, True), (False, True)):
            check_gemm(rt.gemm, rng, M, N, K, ta, tb, dtype, 1.5, -1.0)
    finally:
        lib.lib.at_params_set(None)
        rt.set_num_threads(0)


def test_clear_plan_cache_is_at_the_top_level(lib):
    A = np.ones((7, 5), np.float32)
    autotune.gemm(A, A.T)
    created = rt.cache_stats()[0]
    autotune.gemm(A, A.T)
    assert rt.cache_stats()[0] == created  # cached
    autotune.clear_plan_cache()
    autotune.gemm(A, A.T)
    assert rt.cache_stats()[0] == created + 1  # made again


def test_plan_sizes_beyond_int64_are_refused(built, tmp_path):
    with pytest.raises(plans.PlanError, match="M must be from 0 to 9223372036854775807"):
        plans.plan(2**63, 1, 1)
    env = dict(os.environ, AUTOTUNE_LIBRARY=str(built.library), AUTOTUNE_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "autotune", "plan", "9223372036854775808", "1", "1"],
                          env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert "'9223372036854775808' is not a whole number from 0 to 9223372036854775807" in done.stderr
    assert "-9223372036854775808" not in done.stdout + done.stderr


def test_the_plan_command_shows_a_huge_plan_quickly(built, tmp_path):
    """The issue's reproducer as written: `autotune plan 8589934592 1 1`."""
    import time

    env = dict(os.environ, AUTOTUNE_LIBRARY=str(built.library), AUTOTUNE_HOME=str(tmp_path))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autotune", "plan", "8589934592", "1", "1"], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - start < 30
    assert "C 8589934592 x 1" in done.stdout
