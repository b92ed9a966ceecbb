"""C that overlaps A, B or itself: numpy's answer or a clear error, never garbage.

numpy's ``matmul(A, B, out=B)`` is right because it detects the overlap and works
on a copy; gemm must do the same, through the C fast path and the Python paths,
with and without a library.
"""

from __future__ import annotations

import numpy as np
import pytest

import autotune.runtime as rt

from .reference import assert_close

DTYPES = (np.float32, np.float64)
TRANS = ((False, False), (False, True), (True, False), (True, True))


@pytest.fixture(params=["library", "numpy"])
def backend(request, built, monkeypatch):
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    if request.param == "numpy":
        rt.api.use(None)
        monkeypatch.setattr(rt, "gemm", rt.numpy_gemm)
    yield request.param
    rt.use_library(built.library)


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("n", [1, 7, 64])
def test_c_is_a_or_b(backend, dtype, ta, tb, n):
    rng = np.random.default_rng(n)
    for which in ("A", "B", "both"):
        X = rng.standard_normal((n, n)).astype(dtype)
        Y = rng.standard_normal((n, n)).astype(dtype)
        A, B = (X, X) if which == "both" else (X, Y)
        C = X if which in ("A", "both") else Y
        A0, B0, C0 = A.copy(), B.copy(), C.copy()
        got = rt.gemm(A, B, C, alpha=1.5, beta=0.5, trans_a=ta, trans_b=tb)
        assert got is C
        assert_close(C, A0, B0, C0, 1.5, 0.5, ta, tb)


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_c_overlaps_part_of_an_operand(backend, dtype):
    """C a window of the buffer A is a window of, shifted: they share some elements."""
    rng = np.random.default_rng(3)
    buf = rng.standard_normal((40, 60)).astype(dtype)
    for shift in (1, 5, 17):
        data = buf.copy()
        A = data[:20, :30]            # 20 x 30, ld 60
        B = rng.standard_normal((30, 25)).astype(dtype)
        C = data[shift:shift + 20, 3:28]
        A0, C0 = A.copy(), C.copy()
        rt.gemm(A, B, C, alpha=-1.0, beta=2.0)
        assert_close(C, A0, B, C0, -1.0, 2.0, False, False)


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_batch_c_overlapping_a_or_b_gives_numpys_answer(backend, dtype):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((6, 16, 16)).astype(dtype)
    B = rng.standard_normal((6, 16, 16)).astype(dtype)
    for C, A_, B_ in ((A, A, B), (B, A, B), (A, A, A)):
        A0, B0, C0 = A_.copy(), B_.copy(), C.copy()
        rt.gemm_batch(A_, B_, C, alpha=0.5, beta=1.0)
        for i in range(len(C)):
            assert_close(C[i], A0[i], B0[i], C0[i], 0.5, 1.0, False, False)
        A = rng.standard_normal((6, 16, 16)).astype(dtype)
        B = rng.standard_normal((6, 16, 16)).astype(dtype)


@pytest.mark.filterwarnings("ignore:autotune")
def test_batch_items_of_c_that_overlap_run_in_item_order(backend):
    """Items sharing C are computed one after another, as a loop of gemm calls:
    beta = 1 with a stride-0 C sums every product into it (issue 26)."""
    rng = np.random.default_rng(7)
    A = rng.integers(-3, 4, (4, 8, 8)).astype(np.float64)
    B = rng.integers(-3, 4, (4, 8, 8)).astype(np.float64)
    for stride in (0, 8):  # the same item; one row apart
        store = rng.integers(-3, 4, 100).astype(np.float64)
        want = store.copy()
        for i in range(4):
            view = np.lib.stride_tricks.as_strided(want[i * stride // 8:], (8, 8), (64, 8))
            view[...] = 0.5 * (A[i] @ B[i]) + view
        C = np.lib.stride_tricks.as_strided(store, (4, 8, 8), (stride, 64, 8))
        rt.gemm_batch(A, B, C, alpha=0.5, beta=1.0)
        assert np.array_equal(store, want)
    rt.set_num_threads(2)
    try:
        ones = np.ones((64, 100, 100))
        shared = np.zeros((100, 100))
        C = np.lib.stride_tricks.as_strided(shared, (64, 100, 100), (0, 800, 8))
        rt.gemm_batch(ones, ones, C, beta=1.0)
        assert np.all(shared == 6400), shared.min()
    finally:
        rt.set_num_threads(0)


@pytest.mark.filterwarnings("ignore:autotune")
def test_interleaved_items_that_do_not_overlap_are_computed(backend):
    """Items one element apart in memory, each strided by two: disjoint, so allowed."""
    rng = np.random.default_rng(11)
    A = rng.standard_normal((2, 5, 3))
    B = rng.standard_normal((2, 3, 4))
    store = np.full((5, 8), np.nan)
    C = np.lib.stride_tricks.as_strided(store, (2, 5, 4), (8, 64, 16))
    rt.gemm_batch(A, B, C)
    for i in range(2):
        assert_close(C[i], A[i], B[i], np.zeros((5, 4)), 1.0, 0.0, False, False)
