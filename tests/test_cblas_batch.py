"""cblas_?gemm_batch_strided and cblas_?gemm_batch (MKL's and OpenBLAS's batch
routines) against a float64 reference, through ctypes on the session library.

Operands live in flat buffers whose unused elements are NaN (a read outside an
operand poisons the result) and C's gaps hold a sentinel that must survive (a
write outside C is caught).  Shapes: 1, primes, around kernel sizes, zero dims;
leading dims equal to and far above the operand; both layouts, every
transposition; alpha/beta with beta = 0 over NaN, k = 0, NaN and Inf in A.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from .reference import assert_close

ROW, COL = 101, 102
NO, TR, CT = 111, 112, 113
SHAPES = [(1, 1, 1), (2, 3, 5), (7, 13, 11), (16, 6, 8), (17, 5, 33), (31, 37, 29), (64, 1, 65),
          (0, 4, 3), (4, 0, 3), (3, 4, 0), (1, 9, 1)]
SENTINEL = 7.0
DTYPES = {np.float32: ("s", ctypes.c_float), np.float64: ("d", ctypes.c_double)}


@pytest.fixture(scope="module")
def lib(built):
    return ctypes.CDLL(str(built.library))


def strided_fn(lib, dtype):
    prefix, ct = DTYPES[dtype]
    fn = getattr(lib, f"cblas_{prefix}gemm_batch_strided")
    I, P = ctypes.c_int, ctypes.c_void_p
    fn.restype = None
    fn.argtypes = [I, I, I, I, I, I, ct, P, I, I, P, I, I, ct, P, I, I, I]
    return fn


def grouped_fn(lib, dtype):
    prefix, _ = DTYPES[dtype]
    fn = getattr(lib, f"cblas_{prefix}gemm_batch")
    P = ctypes.c_void_p
    fn.restype = None
    fn.argtypes = [ctypes.c_int] + [P] * 13 + [ctypes.c_int, P]
    return fn


def stored_shape(rows, cols, trans):
    return (cols, rows) if trans else (rows, cols)


def min_ld(layout, rows, cols):
    return max(1, cols if layout == ROW else rows)


def indices(offset, r, c, ld, layout):
    """Flat indices of an r x c matrix at offset with leading dim ld in the layout's order."""
    i, j = np.arange(r)[:, None], np.arange(c)[None, :]
    return offset + (i * ld + j if layout == ROW else i + j * ld)


def place(flat, offset, X, ld, layout):
    flat[indices(offset, *X.shape, ld, layout)] = X


def read(flat, offset, r, c, ld, layout):
    idx = indices(offset, r, c, ld, layout)
    return flat[idx], idx


def span(layout, r, c, ld):
    return 0 if r == 0 or c == 0 else (ld * (r - 1) + c if layout == ROW else ld * (c - 1) + r)


class Batch:
    """One stored operand set: `count` items of shape r x c at stride apart in a NaN buffer."""

    def __init__(self, rng, dtype, layout, r, c, ld, stride, count, fill=np.nan, values=None):
        self.layout, self.r, self.c, self.ld, self.stride = layout, r, c, ld, stride
        n = stride * max(count - 1, 0) + span(layout, r, c, ld) + 1
        self.flat = np.full(n, fill, dtype=dtype)
        self.items = []
        for b in range(count):
            X = (rng.standard_normal((r, c)) if values is None else np.full((r, c), values)).astype(dtype)
            place(self.flat, b * stride, X, ld, layout)
            self.items.append(X)

    def addr(self, b=0):
        return self.flat.ctypes.data + b * self.stride * self.flat.itemsize

    def item(self, b):
        return read(self.flat, b * self.stride, self.r, self.c, self.ld, self.layout)


def make_problem(rng, dtype, layout, ta, tb, M, N, K, pad, batch, beta_zero):
    ar, ac = stored_shape(M, K, ta)
    br, bc = stored_shape(K, N, tb)
    lda, ldb, ldc = (min_ld(layout, ar, ac) + pad, min_ld(layout, br, bc) + pad,
                     min_ld(layout, M, N) + pad)
    A = Batch(rng, dtype, layout, ar, ac, lda, span(layout, ar, ac, lda) + 3, batch)
    B = Batch(rng, dtype, layout, br, bc, ldb, span(layout, br, bc, ldb) + 5, batch)
    # C items may not overlap, so their stride is at least ldc times the other dim, as MKL requires.
    C = Batch(rng, dtype, layout, M, N, ldc, ldc * (M if layout == ROW else N) + 2, batch, fill=SENTINEL,
              values=np.nan if beta_zero else None)
    return A, B, C


def check_result(A, B, C, C0_items, alpha, beta, ta, tb, batch):
    for b in range(batch):
        got, idx = C.item(b)
        c0 = None if beta == 0 else C0_items[b]
        assert_close(got, A.items[b], B.items[b], c0, alpha, beta, ta, tb)
    outside = np.ones(C.flat.size, bool)
    for b in range(batch):
        outside[C.item(b)[1].ravel()] = False
    assert np.all(C.flat[outside] == SENTINEL), "a write outside the C items"


CASES = list(itertools.product((COL, ROW), ((NO, NO), (NO, TR), (TR, NO), (CT, TR)), (0, 37)))


@pytest.mark.parametrize("dtype", list(DTYPES), ids=["s", "d"])
@pytest.mark.parametrize("layout, trans, pad", CASES,
                         ids=[f"{'row' if l == ROW else 'col'}-{a}{b}-pad{p}" for l, (a, b), p in CASES])
def test_batch_strided_matches_the_reference(lib, dtype, layout, trans, pad):
    fn = strided_fn(lib, dtype)
    ta, tb = (t != NO for t in trans)
    rng = np.random.default_rng(hash((layout, trans, pad)) % 2**32)
    for (M, N, K), (alpha, beta) in itertools.product(SHAPES, ((1.0, 0.0), (1.5, -0.75))):
        batch = 3
        A, B, C = make_problem(rng, dtype, layout, ta, tb, M, N, K, pad, batch, beta == 0)
        C0 = [x.copy() for x in C.items]
        fn(layout, trans[0], trans[1], M, N, K, alpha, A.addr(), A.ld, A.stride, B.addr(), B.ld,
           B.stride, beta, C.addr(), C.ld, C.stride, batch)
        check_result(A, B, C, C0, alpha, beta, ta, tb, batch)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=["s", "d"])
@pytest.mark.parametrize("layout", (COL, ROW), ids=["col", "row"])
def test_grouped_batch_matches_the_reference(lib, dtype, layout):
    """Three groups of different shapes, transpositions and scalars (one of size 0)
    in one call; each item's operands at their own addresses."""
    fn = grouped_fn(lib, dtype)
    rng = np.random.default_rng(5 + layout)
    groups = [((17, 5, 33), (NO, TR), 1.5, -0.75, 0, 2), ((7, 13, 11), (TR, NO), -1.0, 0.0, 37, 3),
              ((4, 4, 4), (NO, NO), 1.0, 1.0, 0, 0), ((31, 37, 29), (TR, TR), 0.5, 2.0, 5, 1)]
    made, ptr_a, ptr_b, ptr_c = [], [], [], []
    for (M, N, K), (xa, xb), alpha, beta, pad, size in groups:
        ta, tb = xa != NO, xb != NO
        A, B, C = make_problem(rng, dtype, layout, ta, tb, M, N, K, pad, size, beta == 0)
        made.append((A, B, C, [x.copy() for x in C.items], alpha, beta, ta, tb, size))
        ptr_a += [A.addr(b) for b in range(size)]
        ptr_b += [B.addr(b) for b in range(size)]
        ptr_c += [C.addr(b) for b in range(size)]

    def arr(ct, values):
        return (ct * len(values))(*values)

    ct = DTYPES[dtype][1]
    I, P = ctypes.c_int, ctypes.c_void_p
    fn(layout, arr(I, [g[1][0] for g in groups]), arr(I, [g[1][1] for g in groups]),
       arr(I, [g[0][0] for g in groups]), arr(I, [g[0][1] for g in groups]),
       arr(I, [g[0][2] for g in groups]), arr(ct, [g[2] for g in groups]), arr(P, ptr_a),
       arr(I, [m[0].ld for m in made]), arr(P, ptr_b), arr(I, [m[1].ld for m in made]),
       arr(ct, [g[3] for g in groups]), arr(P, ptr_c), arr(I, [m[2].ld for m in made]),
       len(groups), arr(I, [g[5] for g in groups]))
    for A, B, C, C0, alpha, beta, ta, tb, size in made:
        check_result(A, B, C, C0, alpha, beta, ta, tb, size)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=["s", "d"])
def test_batch_blas_semantics(lib, dtype):
    """NaN and Inf in A reach C; beta = 0 overwrites NaN in C; k = 0 scales C by
    beta; batch_size 0 touches nothing; a zero stride shares one A across the batch."""
    fn = strided_fn(lib, dtype)
    M = N = K = 6
    A = np.ones((3, K, M), dtype)  # column-major items: element (i, k) at [b, k, i]
    A[1, 2, 4] = np.nan
    A[2, 0, 1] = np.inf
    B = np.ones((3, N, K), dtype)
    C = np.full((3, N, M), np.nan, dtype)
    fn(COL, NO, NO, M, N, K, 1.0, A.ctypes.data, M, M * K, B.ctypes.data, K, K * N, 0.0,
       C.ctypes.data, M, M * N, 3)
    assert np.all(C[0] == K)
    assert np.all(np.isnan(C[1][:, 4])) and np.all(C[1][:, :4] == K) and np.all(C[1][:, 5] == K)
    assert np.all(np.isinf(C[2][:, 1])) and np.all(C[2][:, 0] == K)

    C = np.arange(3 * M * N, dtype=dtype).reshape(3, N, M)
    before = C.copy()
    fn(COL, NO, NO, M, N, 0, 1.0, A.ctypes.data, M, 0, B.ctypes.data, 1, 0, -2.0,
       C.ctypes.data, M, M * N, 3)
    assert np.array_equal(C, -2 * before)
    fn(COL, NO, NO, M, N, K, 1.0, A.ctypes.data, M, 0, B.ctypes.data, K, K * N, 3.0,
       C.ctypes.data, M, M * N, 0)
    assert np.array_equal(C, -2 * before)

    A0 = np.arange(M * K, dtype=dtype).reshape(K, M) / 10
    B = np.random.default_rng(3).standard_normal((3, N, K)).astype(dtype)
    C = np.zeros((3, N, M), dtype)
    fn(COL, NO, NO, M, N, K, 1.0, A0.ctypes.data, M, 0, B.ctypes.data, K, K * N, 0.0,
       C.ctypes.data, M, M * N, 3)
    for b in range(3):
        assert_close(C[b].T, A0.T, B[b].T, None, 1.0, 0.0, False, False)


BAD_STRIDED = [  # (argument overrides, parameter number MKL documents)
    ({"layout": 99}, 1), ({"ta": 7}, 2), ({"tb": 7}, 3), ({"m": -1}, 4), ({"n": -1}, 5),
    ({"k": -1}, 6), ({"lda": 3}, 9), ({"stridea": -1}, 10), ({"ldb": 4}, 12),
    ({"strideb": -1}, 13), ({"ldc": 3}, 16), ({"stridec": -1}, 17), ({"batch": -1}, 18),
]


@pytest.mark.parametrize("bad, pos", BAD_STRIDED, ids=[f"p{p}" for _, p in BAD_STRIDED])
def test_batch_strided_rejects_bad_arguments(lib, capfd, bad, pos):
    fn = strided_fn(lib, np.float64)
    M, N, K = 4, 5, 6
    A, B = np.ones(M * K * 2), np.ones(K * N * 2)
    C = np.full(M * N * 2, 3.0)
    args = dict(layout=COL, ta=NO, tb=NO, m=M, n=N, k=K, lda=M, stridea=M * K, ldb=K,
                strideb=K * N, ldc=M, stridec=M * N, batch=2)
    args.update(bad)
    fn(args["layout"], args["ta"], args["tb"], args["m"], args["n"], args["k"], 1.0, A.ctypes.data,
       args["lda"], args["stridea"], B.ctypes.data, args["ldb"], args["strideb"], 0.0, C.ctypes.data,
       args["ldc"], args["stridec"], args["batch"])
    err = capfd.readouterr().err
    assert f"Parameter {pos} to routine cblas_dgemm_batch_strided was incorrect" in err, err
    assert np.all(C == 3.0)


def test_grouped_batch_rejects_bad_arguments_before_computing(lib, capfd):
    """A bad second group is reported with MKL's numbering and the good first group
    is left uncomputed; a negative group size is parameter 16, a negative count 15."""
    fn = grouped_fn(lib, np.float32)
    I, P, F = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
    A, B, C = np.ones(16, np.float32), np.ones(16, np.float32), np.full(16, 3.0, np.float32)

    def call(lds, sizes, count=2):
        ptr = (P * 2)(C.ctypes.data, C.ctypes.data)
        fn(COL, (I * 2)(NO, NO), (I * 2)(NO, NO), (I * 2)(2, 2), (I * 2)(2, 2), (I * 2)(2, 2),
           (F * 2)(1, 1), (P * 2)(A.ctypes.data, A.ctypes.data), (I * 2)(*lds),
           (P * 2)(B.ctypes.data, B.ctypes.data), (I * 2)(2, 2), (F * 2)(0, 0), ptr,
           (I * 2)(2, 2), count, (I * 2)(*sizes))
        return capfd.readouterr().err

    assert "Parameter 9 to routine cblas_sgemm_batch was" in call((2, 1), (1, 1))
    assert "Parameter 16 to routine cblas_sgemm_batch was" in call((2, 2), (1, -1))
    assert "Parameter 15 to routine cblas_sgemm_batch was" in call((2, 2), (1, 1), count=-1)
    assert np.all(C == 3.0)
    assert call((2, 2), (1, 1), count=0) == "" and np.all(C == 3.0)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=["s", "d"])
def test_large_batches_split_over_threads_give_the_reference(lib, dtype):
    """Enough work for the executor to split the batch over two threads: every item
    still matches, in both routines (the grouped one through its pointer path)."""
    lib.at_set_num_threads(2)
    try:
        rng = np.random.default_rng(11)
        M, N, K, batch = 40, 36, 44, 96  # 1.2e7 flops, three times the default thread_flops
        A, B, C = make_problem(rng, dtype, COL, False, True, M, N, K, 3, batch, False)
        C0 = [x.copy() for x in C.items]
        strided_fn(lib, dtype)(COL, NO, TR, M, N, K, 0.5, A.addr(), A.ld, A.stride, B.addr(), B.ld,
                               B.stride, 2.0, C.addr(), C.ld, C.stride, batch)
        check_result(A, B, C, C0, 0.5, 2.0, False, True, batch)

        A, B, C = make_problem(rng, dtype, ROW, True, False, M, N, K, 0, batch, True)
        I, P, ct = ctypes.c_int, ctypes.c_void_p, DTYPES[dtype][1]
        ptrs = [(P * batch)(*[X.addr(b) for b in range(batch)]) for X in (A, B, C)]
        grouped_fn(lib, dtype)(ROW, (I * 1)(TR), (I * 1)(NO), (I * 1)(M), (I * 1)(N), (I * 1)(K),
                               (ct * 1)(1.0), ptrs[0], (I * 1)(A.ld), ptrs[1], (I * 1)(B.ld),
                               (ct * 1)(0.0), ptrs[2], (I * 1)(C.ld), 1, (I * 1)(batch))
        check_result(A, B, C, None, 1.0, 0.0, True, False, batch)
    finally:
        lib.at_set_num_threads(0)


# ---- items that share C (issue 26, item 1) -------------------------------------

SHARED = 64, 100  # 64 items of 100 x 100 x 100: 1.3e8 flops, split over two threads


def _ones_pointers(dtype, batch, n):
    A = np.ones((n, n), dtype)
    P = ctypes.c_void_p
    return A, (P * batch)(*[A.ctypes.data] * batch)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=["s", "d"])
def test_items_sharing_one_c_are_summed_in_item_order(lib, dtype):
    """Every batch entry, two threads, 64 all-ones products into the same C with
    beta = 1: each element is exactly 64 * 100, every run.  The items used to race
    on C's read-modify-write and lose products now and then (3,200 in one of 20
    runs here, 5,000 on an idle AVX-512 host), hence the rounds."""
    batch, n = SHARED
    rounds = 25
    prefix, ct = DTYPES[dtype]
    code = 0 if dtype == np.float32 else 1
    I, P, L, D = ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    A, ptrs = _ones_pointers(dtype, batch, n)
    fn = lib.at_gemm_batch_strided
    fn.argtypes = [I, I, I, I, L, L, L, D, P, L, L, P, L, L, D, P, L, L, L]
    lib.at_plan_create.restype = P
    lib.at_plan_create.argtypes = [I, I, I, I, L, L, L, L, L, L]
    lib.at_plan_execute_ptrs.argtypes = [P, L, D, P, P, D, P]
    lib.at_plan_destroy.argtypes = [P]

    def grouped(C):  # every C pointer the same
        grouped_fn(lib, dtype)(COL, (I * 1)(NO), (I * 1)(NO), (I * 1)(n), (I * 1)(n), (I * 1)(n),
                               (ct * 1)(1.0), ptrs, (I * 1)(n), ptrs, (I * 1)(n), (ct * 1)(1.0),
                               (P * batch)(*[C.ctypes.data] * batch), (I * 1)(n), 1, (I * 1)(batch))

    def cblas_strided(C):  # stridec = 0, accepted: one C for the whole batch
        strided_fn(lib, dtype)(ROW, NO, NO, n, n, n, 1.0, A.ctypes.data, n, 0, A.ctypes.data, n, 0,
                               1.0, C.ctypes.data, n, 0, batch)

    def at_strided(C):
        assert fn(code, 0, 0, 0, n, n, n, 1.0, A.ctypes.data, n, 0, A.ctypes.data, n, 0, 1.0,
                  C.ctypes.data, n, 0, batch) == 0

    def plan_ptrs(C):  # the pointer path under a plan of the caller's
        plan = lib.at_plan_create(code, 0, 0, 0, n, n, n, n, n, n)
        try:
            assert lib.at_plan_execute_ptrs(plan, batch, 1.0, ptrs, ptrs, 1.0,
                                            (P * batch)(*[C.ctypes.data] * batch)) == 0
        finally:
            lib.at_plan_destroy(plan)

    lib.at_set_num_threads(2)
    try:
        assert lib.at_get_num_threads() == 2
        for entry in (grouped, cblas_strided, at_strided, plan_ptrs):
            lows = []
            for _ in range(rounds):
                C = np.zeros((n, n), dtype)
                entry(C)
                lows.append(float(C.min()))
                assert np.all(C == C.flat[0])
            assert lows == [batch * n] * rounds, (entry.__name__, lows)
    finally:
        lib.at_set_num_threads(0)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=["s", "d"])
def test_items_overlapping_in_c_run_as_a_loop_would(lib, dtype):
    """stride_c = 1: each item's C is the previous one shifted by one element.  The
    result is the sequential loop's, exactly (integer-valued products)."""
    batch, n = 24, 60
    I, P, L, D = ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    fn = lib.at_gemm_batch_strided
    fn.argtypes = [I, I, I, I, L, L, L, D, P, L, L, P, L, L, D, P, L, L, L]
    rng = np.random.default_rng(4)
    A = rng.integers(-3, 4, (batch, n, n)).astype(dtype)
    B = rng.integers(-3, 4, (batch, n, n)).astype(dtype)
    flat = rng.integers(-3, 4, n * n + batch).astype(np.float64)
    want = flat.copy()
    for i in range(batch):  # column-major item i at offset i, ldc = n
        view = np.lib.stride_tricks.as_strided(want[i:], (n, n), (8, 8 * n))
        view[...] = A[i].T.astype(np.float64) @ B[i].T + view
    got = flat.astype(dtype)
    lib.at_set_num_threads(2)
    try:
        # Column-major A[i].T is the C-ordered A[i] read as stored.
        assert fn(0 if dtype == np.float32 else 1, 0, 0, 0, n, n, n, 1.0, A.ctypes.data, n, n * n,
                  B.ctypes.data, n, n * n, 1.0, got.ctypes.data, n, 1, batch) == 0
    finally:
        lib.at_set_num_threads(0)
    assert np.array_equal(got, want.astype(dtype))


@pytest.mark.parametrize("shared", [False, True], ids=["apart", "pairs"])
def test_shuffled_pointer_batches_are_judged_right(lib, shared):
    """C pointers in no order (the overlap test then buckets them): 64 distinct
    matrices run split over the threads; 32 matrices each named twice are summed
    into exactly, whatever the order."""
    batch, n = SHARED
    lib.at_set_num_threads(2)
    try:
        A, ptrs = _ones_pointers(np.float64, batch, n)
        stack = np.zeros((batch // 2 if shared else batch, n, n))
        rng = np.random.default_rng(3)
        which = rng.permutation(np.arange(batch) // 2 if shared else np.arange(batch))
        I, P, D = ctypes.c_int, ctypes.c_void_p, ctypes.c_double
        for _ in range(10):
            stack[...] = 0
            C = (P * batch)(*[stack[int(w)].ctypes.data for w in which])
            grouped_fn(lib, np.float64)(COL, (I * 1)(NO), (I * 1)(NO), (I * 1)(n), (I * 1)(n), (I * 1)(n),
                                        (D * 1)(1.0), ptrs, (I * 1)(n), ptrs, (I * 1)(n), (D * 1)(1.0), C,
                                        (I * 1)(n), 1, (I * 1)(batch))
            assert np.all(stack == (2 if shared else 1) * n)
    finally:
        lib.at_set_num_threads(0)
