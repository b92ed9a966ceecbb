"""The packed (Goto) path of the executor against numpy, with blocks small enough that
every problem has many block rows, column panels and K slices.

What exec_t.h's run_part does beyond a plain loop: A's block rows are packed once per K
slice and reused by every column panel of a thread's share (capped; past the cap the
share runs in chunks of block rows), B's panel of the next column panel and A's rows of
the next block are prefetched while kernels run, and the panels are packed in the
operands' own format when that family has kernels.  None of it may change a bit of the
result for any thread count.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

import autotune.runtime as rt
from autotune.runtime import loader

from .reference import assert_close, operand

DTYPES = (np.float32, np.float64)
TRANS = ((False, False), (False, True), (True, False), (True, True))


@pytest.fixture(scope="module")
def lib(built):
    runtime = rt.use_library(built.library)
    assert runtime is not None
    yield runtime
    runtime.lib.at_params_set(None)
    rt.set_num_threads(0)


def packed_params(runtime, blk_m: int, blk_n: int, blk_k: int) -> None:
    """Every problem packed but an untransposed A with at most 8 columns of C and a
    transposed one with at most 32, which never pack (plan.c, takes_packed_path), in
    blocks of at most blk_m x blk_n x blk_k, threads from any size."""
    p = loader.at_tune_params()
    assert runtime.lib.at_params_get(ctypes.byref(p)) == 0
    for d in range(2):
        p.pack_flops[d] = 0.0
        p.blk_m[d], p.blk_n[d], p.blk_k[d] = blk_m, blk_n, blk_k
    p.thread_flops = p.thread_seconds = 0.0
    assert runtime.lib.at_params_set(ctypes.byref(p)) == 0


def plan_info(runtime, dtype, layout, ta, tb, M, N, K, lda, ldb, ldc, threads):
    plan = runtime.lib.at_plan_create_ex(dtype, layout, ta, tb, M, N, K, lda, ldb, ldc, threads)
    assert plan
    info = loader.at_plan_info()
    runtime.lib.at_plan_get_info(plan, ctypes.byref(info))
    runtime.lib.at_plan_destroy(plan)
    return info




@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("order", ["F", "C"], ids=["col", "row"])
# 64 columns: a whole panel of B in format 1 has rows of 256 or 512 bytes, which get a
# cache line of padding (exec_t.h, at_panel_ld); 56 columns do not.
@pytest.mark.parametrize("blk_n", [56, 64])
def test_packed_matches_numpy(lib, dtype, ta, tb, order, blk_n):
    packed_params(lib, 40, blk_n, 24)
    rng = np.random.default_rng(hash((ta, tb, order, np.dtype(dtype).char)) % 2**32)
    # Odd sizes: last block rows and column panels narrower than the others (their
    # own tilings), a last K slice shorter than blk_k, one-row and one-column panels.
    for M, N, K in ((97, 83, 61), (130, 9, 50), (5, 140, 33), (81, 121, 24), (1, 60, 49)):
        A = operand(rng, *((K, M) if ta else (M, K)), dtype, order, pad=3)
        B = operand(rng, *((N, K) if tb else (K, N)), dtype, order, pad=5)
        C0 = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order=order)
        cases = ((1.0, 0.0), (1.0, 1.0), (-0.75, 2.5), (0.5, -1.0))
        for threads in (1, 2):
            rt.set_num_threads(threads)
            for alpha, beta in cases:
                # beta == 0 never reads C: NaN in C must not reach the result.
                C = np.full((M, N), np.nan, dtype=dtype, order=order) if beta == 0 else C0.copy(order=order)
                rt.gemm(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
                assert_close(C, A, B, C0, alpha, beta, ta, tb)
    layout = 1 if order == "C" else 0
    info = plan_info(lib, int(dtype == np.float64), layout, int(ta), int(tb), 97, 83, 61, 200, 200, 200, 2)
    assert info.path == 1 and info.blk_m <= 40 and info.blk_k == 24


@pytest.mark.parametrize("K,cap,slice_k", [(1024, 320, 256), (1000, 320, 256), (2048, 320, 296),
                                           (640, 320, 320), (300, 320, 300), (61, 24, 24), (50, 48, 50),
                                           (60, 48, 60), (61, 48, 32), (256, 208, 256), (261, 208, 131),
                                           (400, 320, 400), (401, 320, 201)])
def test_k_is_cut_into_slices_as_even_as_the_cap_allows(lib, K, cap, slice_k):
    """A last slice of K far shorter than the others reads and writes all of C for a
    sliver of the work: K is cut into as few slices as blk_k allows, of a multiple
    of 8 where that stays within the cap and shortens the last slice by at most 8
    per other slice, else exactly even, and the product stays right.  The cap is
    soft by a quarter: a K up to 5/4 of it is one slice (f64 256^3 under a cap of
    208 ran 3-5 % faster whole than as two slices of 128)."""
    packed_params(lib, 64, 64, cap)
    info = plan_info(lib, 0, 0, 0, 0, 70, 50, K, 70, K, 70, 1)
    assert info.path == 1 and info.blk_k == slice_k
    assert -(-K // slice_k) == (1 if 4 * K <= 5 * cap else -(-K // cap))
    rng = np.random.default_rng(K)
    A, B = operand(rng, 70, K, np.float32, "F"), operand(rng, K, 50, np.float32, "F")
    C = np.zeros((70, 50), np.float32, order="F")
    rt.gemm(A, B, C)
    assert_close(C, A, B, np.zeros_like(C), 1.0, 0.0, False, False)


def library_kernels(runtime):
    """(index, name, dtype, trans, mr, nr) of every kernel the library links."""
    out = []
    for i in range(runtime.lib.at_kernel_count()):
        k = loader.at_kernel_info()
        assert runtime.lib.at_kernel_get(i, ctypes.byref(k)) == 0
        out.append((i, k.name.decode(), k.dtype, (k.trans_a, k.trans_b), k.mr, k.nr))
    return out


def set_pack_kernel(runtime, dtype: int, value: int) -> int:
    p = loader.at_tune_params()
    assert runtime.lib.at_params_get(ctypes.byref(p)) == 0
    p.pack_kernel[dtype] = value
    return runtime.lib.at_params_set(ctypes.byref(p))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_the_measured_main_kernel_covers_the_packed_blocks(lib, dtype):
    """pack_kernel names the packed path's main kernel: its family's formats are
    packed and it covers the interior of every block, whatever the figures say; the
    product stays right.  A value naming no kernel of the dtype is refused."""
    dt = int(dtype == np.float64)
    packed_params(lib, 96, 96, 64)
    mine = [k for k in library_kernels(lib) if k[2] == dt and k[4] * k[5] >= 8]
    assert mine
    rng = np.random.default_rng(dt)
    # Two main kernels of other families and shapes: the largest of two transpositions.
    chosen = {}
    for k in sorted(mine, key=lambda k: -k[4] * k[5]):
        chosen.setdefault(k[3], k)
    for index, name, _, (ta, tb), mr, nr in list(chosen.values())[:2]:
        assert set_pack_kernel(lib, dt, index + 1) == 0
        M, N, K = 7 * mr + 3, 5 * nr + 1, 150
        plan = lib.lib.at_plan_create_ex(dt, 0, 0, 0, M, N, K, M, K, M, 1)
        assert plan
        info = loader.at_plan_info()
        lib.lib.at_plan_get_info(plan, ctypes.byref(info))
        steps = (loader.at_step * info.nsteps)()
        lib.lib.at_plan_steps(plan, steps, info.nsteps)
        lib.lib.at_plan_destroy(plan)
        assert info.path == 1 and info.kernel_trans == 2 * ta + tb, name
        covered = sum(s.mb * s.nb for s in steps if s.kernel == index)
        assert covered >= 0.5 * M * N, name
        A, B = operand(rng, M, K, dtype, "F"), operand(rng, K, N, dtype, "F")
        C = np.zeros((M, N), dtype, order="F")
        rt.gemm(A, B, C)
        assert_close(C, A, B, np.zeros_like(C), 1.0, 0.0, False, False)
    other_dtype = [k[0] + 1 for k in library_kernels(lib) if k[2] != dt][:1]
    for bad in (-1, lib.lib.at_kernel_count() + 1, *other_dtype):
        assert set_pack_kernel(lib, dt, bad) != 0
    assert set_pack_kernel(lib, dt, 0) == 0


def run_plan(runtime, threads, A, B, C, ta, tb, alpha, beta):
    """at_plan_execute on Fortran operands through a plan made for `threads` threads."""
    M, N = C.shape
    K = A.shape[0] if ta else A.shape[1]
    plan = runtime.lib.at_plan_create_ex(int(A.dtype == np.float64), 0, int(ta), int(tb), M, N, K,
                                         A.shape[0], B.shape[0], M, threads)
    assert plan
    info = loader.at_plan_info()
    runtime.lib.at_plan_get_info(plan, ctypes.byref(info))
    rc = runtime.lib.at_plan_execute(plan, alpha, A.ctypes.data, B.ctypes.data, beta, C.ctypes.data)
    runtime.lib.at_plan_destroy(plan)
    assert rc == 0 and info.path == 1
    return info.threads


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_packed_bitwise_identical_for_any_thread_count(lib, dtype):
    """Shares of 1, 2 and 3 threads own different block rows and column panels (so each
    packs and keeps a different subset of A's rows); the bits must not move."""
    packed_params(lib, 32, 48, 40)
    rng = np.random.default_rng(11)
    for ta, tb in TRANS:
        M, N, K = 150, 133, 97
        A = np.asfortranarray(rng.standard_normal((K, M) if ta else (M, K)).astype(dtype))
        B = np.asfortranarray(rng.standard_normal((N, K) if tb else (K, N)).astype(dtype))
        C0 = np.asfortranarray(rng.standard_normal((M, N)).astype(dtype))
        results, used = [], []
        for threads in (1, 2, 3):
            C = C0.copy(order="F")
            used.append(run_plan(lib, threads, A, B, C, ta, tb, 0.5, -1.25))
            results.append(C)
        assert used == [1, 2, 3]
        for C in results[1:]:
            assert C.tobytes(order="F") == results[0].tobytes(order="F")
        assert_close(results[0], A, B, C0, 0.5, -1.25, ta, tb)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs a host of two CPUs or more")
@pytest.mark.parametrize("ta,tb", TRANS, ids=["nn", "nt", "tn", "tt"])
def test_a_product_of_fewer_blocks_than_cores_is_cut_the_same_for_any_thread_count(lib, ta, tb):
    """Blocks are the unit of the thread split: one block of 96 x 200 left a second
    thread idle.  It is cut for the host's cores, so plans of 1 and 2 threads tile alike
    and compute the same bits."""
    packed_params(lib, 512, 512, 256)
    rng = np.random.default_rng(13)
    M, N, K = 96, 200, 70
    A = np.asfortranarray(rng.standard_normal((K, M) if ta else (M, K)))
    B = np.asfortranarray(rng.standard_normal((N, K) if tb else (K, N)))
    C0 = np.asfortranarray(rng.standard_normal((M, N)))
    infos = [plan_info(lib, 1, 0, int(ta), int(tb), M, N, K, A.shape[0], B.shape[0], M, t) for t in (1, 2)]
    assert infos[0].blk_m == infos[1].blk_m and infos[0].blk_n == infos[1].blk_n
    blocks = -(-M // infos[0].blk_m) * -(-N // infos[0].blk_n)
    assert blocks >= 2
    results = []
    for threads in (1, 2):
        C = C0.copy(order="F")
        run_plan(lib, threads, A, B, C, ta, tb, 1.5, 0.5)
        results.append(C)
    assert results[1].tobytes(order="F") == results[0].tobytes(order="F")
    assert_close(results[0], A, B, C0, 1.5, 0.5, ta, tb)


@pytest.mark.parametrize("ta", [False, True], ids=["n", "t"])
def test_rows_beyond_the_kept_panels_run_in_chunks(lib, ta):
    """More block rows than the kept panels hold (4 MiB: 2100 x 256 fp64 is 4.3 MB):
    the share runs in chunks of rows, re-packing B per chunk; same bits for 1 and 2 threads."""
    packed_params(lib, 48, 64, 256)
    rng = np.random.default_rng(12)
    M, N, K = 2100, 70, 300
    A = np.asfortranarray(rng.standard_normal((K, M) if ta else (M, K)))
    B = np.asfortranarray(rng.standard_normal((K, N)))
    results = []
    for threads in (1, 2):
        C = np.asfortranarray(np.full((M, N), np.nan))
        run_plan(lib, threads, A, B, C, ta, False, 1.0, 0.0)
        results.append(C)
    assert results[1].tobytes(order="F") == results[0].tobytes(order="F")
    assert_close(results[0], A, B, None, 1.0, 0.0, ta, False)


def team_stats(runtime) -> tuple[int, int]:
    teams, declined = ctypes.c_int64(), ctypes.c_int64()
    runtime.lib.at_team_stats(ctypes.byref(teams), ctypes.byref(declined))
    return teams.value, declined.value


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("order", ["F", "C"], ids=["col", "row"])
def test_a_team_packs_each_panel_of_b_once_and_changes_no_bit(lib, dtype, order):
    """Two and three threads at once share each panel of B (exec_t.h, team_part) and split
    the rows by bands, not blocks; every call must run as a team and give one thread's bits."""
    packed_params(lib, 40, 56, 24)
    rng = np.random.default_rng(13)
    calls = 0
    before = team_stats(lib)
    # Odd sizes: bands split across blocks, narrow last panels (B whole, not in bands, in
    # some formats), a K slice shorter than blk_k, fewer rows than threads.  Row-major
    # 2 x 60 x 49 tt is a column-major tt of 2 columns, which stays in place.
    for (M, N, K), (ta, tb) in zip(((97, 83, 61), (130, 9, 50), (9, 140, 33), (2, 60, 49), (161, 170, 75)),
                                   TRANS + ((False, False),)):
        packed = not (order == "C" and ta and tb)
        A = operand(rng, *((K, M) if ta else (M, K)), dtype, order, pad=3)
        B = operand(rng, *((N, K) if tb else (K, N)), dtype, order, pad=5)
        C0 = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order=order)
        results = []
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            C = C0.copy(order=order)
            rt.gemm(A, B, C, alpha=-0.75, beta=2.5, trans_a=ta, trans_b=tb)
            results.append(C)
            calls += threads > 1 and packed
        assert_close(results[0], A, B, C0, -0.75, 2.5, ta, tb)
        for C in results[1:]:
            assert C.tobytes(order="A") == results[0].tobytes(order="A")
    after = team_stats(lib)
    assert (after[0] - before[0], after[1] - before[1]) == (calls, 0)


def test_calls_that_find_the_pool_busy_run_without_a_team(lib):
    """Two application threads at once: one call has the pool, the other runs its shares
    on its own thread (a barrier there would wait for workers it does not have)."""
    import threading

    packed_params(lib, 40, 56, 24)
    rt.set_num_threads(2)
    rng = np.random.default_rng(14)
    A = np.asfortranarray(rng.standard_normal((300, 200)))
    B = np.asfortranarray(rng.standard_normal((200, 250)))
    want = np.empty((300, 250), order="F")
    rt.gemm(A, B, want)
    errors = []

    def work():
        for _ in range(20):
            C = np.full((300, 250), np.nan, order="F")
            rt.gemm(A, B, C)
            if C.tobytes(order="F") != want.tobytes(order="F"):
                errors.append("bits differ")

    before = team_stats(lib)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = team_stats(lib)
    assert not errors
    assert after[0] + after[1] - before[0] - before[1] == 60
