"""The no-pack path's copy of a few rows of A (plan.c, choose_copy_a; exec_t.h, run_copied).

With op(A) untransposed and at most 16 rows, the planner may copy op(A) into rows
along K and run the tn or tt kernels on the copy.  The session's library seldom
takes it (its nn kernels are good enough), so this module builds one whose nn and nt
families are a single 1x1 kernel: the copy then wins wherever it is allowed, and
every test first checks that the plan took it, so that none passes on the path in
place.  The copy lives on the stack up to 8 KiB and in a buffer past that; each
thread's share copies A for itself, and a batch copies per item.
"""

from __future__ import annotations

import numpy as np
import pytest

import autotune.runtime as rt
from autotune import plans

from .reference import assert_close, operand
from .untuned import build_untuned, small_selection

DTYPES = {"f32": np.float32, "f64": np.float64}


def _poor_in_place(specs):
    """small_selection, but nn and nt reduced to their 1x1 kernel."""
    return [s for s in small_selection(specs) if s.trans[0] == "t" or (s.mr, s.nr) == (1, 1)]


@pytest.fixture(scope="module")
def copying(tmp_path_factory, built):
    lib = build_untuned(tmp_path_factory.getbasetemp() / "copy-a-home", select=_poor_in_place)
    runtime = rt.use_library(lib.library)
    assert runtime is not None
    yield runtime
    rt.set_num_threads(0)
    rt.use_library(built.library)


def _plan(runtime, M, N, K, dtype, trans, layout="col", threads=1, **ld) -> plans.Plan:
    return plans.plan(M, N, K, dtype, trans, layout=layout, threads=threads, runtime=runtime, **ld)


def _assert_copied(p: plans.Plan) -> None:
    assert p.a_copied, plans.explain(p)
    assert p.path == "small"
    for s in p.steps:
        assert s.pack_a and not s.pack_b
        # The kernels read the copy: rows along K, the transposed format.
        assert s.kernel == "edge" or s.kernel.split("_")[3][0] == "t", s.kernel


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", ["nn", "nt"])
def test_few_rows_of_an_untransposed_a_are_copied(copying, dtype, trans):
    for M in range(2, 17):
        _assert_copied(_plan(copying, M, 256, 300, dtype, trans))
        if M > 2:
            _assert_copied(_plan(copying, M, 33, 64, dtype, trans))
    # A row-major caller's C^T = B^T A^T: its few columns are the copied rows.
    _assert_copied(_plan(copying, 40, 3, 50, dtype, trans[::-1], layout="row"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_copy_stays_within_its_bounds(copying, dtype):
    """Not for 17 rows, not for a transposed A (already rows along K), not past 1 MiB."""
    assert not _plan(copying, 17, 64, 64, dtype, "nn").a_copied
    assert not _plan(copying, 4, 64, 64, dtype, "tn").a_copied
    elem = np.dtype(DTYPES[dtype]).itemsize
    K = (1 << 20) // (16 * elem) + 64
    assert not _plan(copying, 16, 8, K, dtype, "nn").a_copied
    # The plan reports the copy's cost in its prediction.
    p = _plan(copying, 8, 64, 64, dtype, "nn")
    assert p.a_copied and p.predicted_seconds > 0


def _gemm_cases(rng, M, N, K, dtype, ta, tb, order, pad):
    A = operand(rng, *((K, M) if ta else (M, K)), dtype, order, pad=pad)
    B = operand(rng, *((N, K) if tb else (K, N)), dtype, order, pad=pad)
    C0 = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order=order)
    for alpha, beta in ((1.0, 0.0), (-0.5, 1.0), (2.0, -1.5)):
        # beta == 0 never reads C: NaN there must not reach the result.
        C = np.full((M, N), np.nan, dtype=dtype, order=order) if beta == 0 else C0.copy(order=order)
        rt.gemm(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
        assert_close(C, A, B, C0, alpha, beta, ta, tb)


# Rows 2..17 and primes; K around the kernels' vector widths, past the 8 KiB stack
# copy (4 x 1000 f32 is 16 KiB: a heap buffer) and along the 4 KiB row rounding.
SHAPES = [(M, N, K) for M in (2, 3, 4, 5, 7, 8, 11, 13, 15, 16, 17)
          for N, K in ((1, 1), (7, 5), (33, 16), (33, 17), (256, 1000), (5, 1024))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tb", [False, True], ids=["nn", "nt"])
@pytest.mark.parametrize("threads", [1, 2])
def test_copied_products_match_numpy(copying, dtype, tb, threads):
    rng = np.random.default_rng(threads * 2 + tb)
    rt.set_num_threads(threads)
    copied_bytes = []
    for M, N, K in SHAPES:
        p = _plan(copying, M, N, K, dtype, "n" + "nt"[tb], threads=threads)
        if p.a_copied:
            copied_bytes.append(M * K * np.dtype(DTYPES[dtype]).itemsize)
        # Column-major with A's leading dimension past its rows, so the copy reads
        # from a strided source; row-major is the same product with a few columns.
        _gemm_cases(rng, M, N, K, DTYPES[dtype], False, tb, "F", pad=3)
        _gemm_cases(rng, N, M, K, DTYPES[dtype], tb, False, "C", pad=0)
    # Both homes of the copy ran: the stack up to 8 KiB, a heap buffer past it.
    assert min(copied_bytes) < 8192 < max(copied_bytes), copied_bytes


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_batch_copies_each_item(copying, dtype):
    rng = np.random.default_rng(5)
    T = DTYPES[dtype]
    for M, N, K in ((3, 40, 70), (8, 9, 1000)):
        _assert_copied(_plan(copying, M, N, K, dtype, "nn"))
        for threads in (1, 2):
            rt.set_num_threads(threads)
            A = rng.standard_normal((6, M, K)).astype(T)
            B = rng.standard_normal((6, K, N)).astype(T)
            C0 = rng.standard_normal((6, M, N)).astype(T)
            C = rt.gemm_batch(A, B, C0.copy(), alpha=1.5, beta=0.5)
            for i in range(6):
                assert_close(C[i], A[i], B[i], C0[i], 1.5, 0.5, False, False)
            # One A shared by every item, and a sequence of differently shaped items.
            C = rt.gemm_batch(A[0], B)
            for i in range(6):
                assert_close(C[i], A[0], B[i], None, 1.0, 0.0, False, False)
            items = [(rng.standard_normal((m, K)).astype(T), rng.standard_normal((K, N)).astype(T))
                     for m in (2, 5, 16)]
            out = rt.gemm_batch([a for a, _ in items], [b for _, b in items])
            for (a, b), c in zip(items, out):
                assert_close(c, a, b, None, 1.0, 0.0, False, False)


def test_nan_and_inf_in_a_pass_through_the_copy(copying):
    A = np.ones((4, 64), dtype=np.float32, order="F")
    A[1, 10], A[2, 20] = np.nan, np.inf
    B = np.ones((64, 33), dtype=np.float32, order="F")
    _assert_copied(_plan(copying, 4, 33, 64, "f32", "nn"))
    C = np.zeros((4, 33), dtype=np.float32, order="F")
    rt.gemm(A, B, C)
    assert np.all(np.isnan(C[1])) and np.all(np.isposinf(C[2]))
    assert np.all(C[0] == 64) and np.all(C[3] == 64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_copied_plans_give_the_same_bits_on_any_thread_count(copying, dtype):
    """The copy is decided as for one thread: the kernels, and so the bits, are the
    same whatever the plan's threads."""
    rng = np.random.default_rng(11)
    T = DTYPES[dtype]
    for M, N, K in ((2, 256, 256), (5, 500, 50), (16, 97, 300)):
        kernels = {threads: sorted({s.kernel for s in _plan(copying, M, N, K, dtype, "nn", threads=threads).steps})
                   for threads in (1, 2, 4)}
        assert kernels[1] == kernels[2] == kernels[4]
        A = np.asfortranarray(rng.standard_normal((M, K)).astype(T))
        B = np.asfortranarray(rng.standard_normal((K, N)).astype(T))
        results = []
        for threads in (1, 2, 4):
            rt.set_num_threads(threads)
            _assert_copied(_plan(copying, M, N, K, dtype, "nn", threads=threads))
            C = np.zeros((M, N), dtype=T, order="F")
            rt.gemm(A, B, C)
            results.append(C)
        assert all(np.array_equal(results[0], r) for r in results[1:])
