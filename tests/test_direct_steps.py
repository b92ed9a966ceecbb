"""A call's kernels straight from the plan (plan.c, choose_direct; at_internal.h,
AT_DIRECT_RUN).

A no-pack plan of at most 16 kernel steps over all of K keeps each step's kernel and
operand offsets, and a call runs them one after another, each from a line of its own,
instead of the executor's walk (the entries and a batch's items alike).  Here: which
plans keep that list (the rule written out again), and that a call through it computes
the product, bit for bit what the walk computes, in every layout and transposition,
with leading dimensions past the matrix, alpha == 0 and a C full of NaN.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

import autotune.runtime as rt
from autotune import plans

from .reference import assert_close, operand

DIRECT_STEPS = 16
LAYOUTS = {"col": 0, "row": 1}
SHAPES = [(n, n, n) for n in range(1, 25)] + [
    (5, 7, 3), (13, 33, 23), (35, 32, 64), (64, 3, 128), (9, 40, 2), (17, 5, 1), (2, 31, 7),
    (33, 17, 9), (48, 48, 1), (1, 29, 13), (29, 1, 13),
]


@pytest.fixture(autouse=True)
def lib(built):
    runtime = rt.use_library(built.library)
    rt.set_num_threads(1)
    yield runtime
    rt.set_num_threads(0)


def expected_direct(p: plans.Plan) -> int:
    """docs/runtime.md's rule: a small-path plan on one thread of at most 16 steps,
    every one a kernel (no edge code), A not copied, K not walked in slices and no SME2
    kernel."""
    if (p.path != "small" or p.threads != 1 or p.a_copied or p.blocks[2]
            or p.step_count > DIRECT_STEPS):
        return 0
    assert p.step_count == len(p.steps), "the rule looks at every step"
    if any(s.kernel == "edge" or "sme2" in s.kernel for s in p.steps):
        return 0
    return p.step_count


def test_which_plans_call_their_kernels_straight(lib):
    seen = {"list": 0, "walk": 0}
    for (M, N, K), dtype, trans, layout in itertools.product(
            SHAPES, ("f32", "f64"), ("nn", "tn", "nt"), ("col", "row")):
        p = plans.plan(M, N, K, dtype, trans, layout=layout, threads=1, max_steps=64,
                       runtime=lib)
        want = expected_direct(p)
        assert p.direct_steps == want, (p.title, layout, p.step_count, p.blocks)
        seen["list" if want > 1 else "walk"] += want != 1
    # Both sides of the rule are exercised: several steps in a row, and plans walked.
    assert seen["list"] > 50 and seen["walk"] > 20, seen


def test_explain_says_when_the_kernels_run_straight(lib):
    assert "called straight from the plan" in plans.explain(plans.plan(16, 16, 16, "f64", runtime=lib))
    large = plans.plan(400, 400, 400, "f64", threads=1, runtime=lib)
    assert large.direct_steps == 0 and "straight" not in plans.explain(large)


def _operands(rng, M, N, K, dtype, ta, tb, layout, pad):
    """op(A) M x K and op(B) K x N stored in ``layout`` with leading dimensions ``pad``
    past the matrix, and the leading dimensions the plan is made for."""
    order = "F" if layout == "col" else "C"
    A = operand(rng, *((K, M) if ta else (M, K)), dtype, order, pad)
    B = operand(rng, *((N, K) if tb else (K, N)), dtype, order, pad)
    lead = (lambda X: X.shape[0] + pad) if layout == "col" else (lambda X: X.shape[1] + pad)
    return A, B, (lead(A), lead(B), (M if layout == "col" else N) + pad)


def _c_store(M, N, ldc, layout, dtype, fill):
    """C with leading dimension ldc in ``layout``, filled with ``fill``, and its M x N view."""
    if layout == "col":
        store = np.asfortranarray(np.full((ldc, N), fill, dtype=dtype))
        return store, store[:M]
    store = np.full((M, ldc), fill, dtype=dtype)
    return store, store[:, :N]


def _walk(lib, plan, alpha, A, B, beta, C):
    """One product through the executor's walk: a batch of one item given by pointers
    takes run_one, which walks the steps."""
    P = ctypes.c_void_p * 1
    fn = lib.lib.at_plan_execute_ptrs
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, P, P, ctypes.c_double, P]
    assert fn(plan, 1, alpha, P(A.ctypes.data), P(B.ctypes.data), beta, P(C.ctypes.data)) == 0


# Shapes tried in turn for each case: the first few whose plan runs several kernels
# straight (which ones do depends on the library's kernels and edge code).
CANDIDATES = [(16, 16, 16), (8, 8, 8), (13, 13, 13), (9, 9, 9), (12, 8, 4), (6, 10, 7),
              (20, 20, 20), (4, 12, 5), (24, 24, 24), (5, 7, 3), (15, 6, 40)]


@pytest.mark.parametrize("dtype,trans,layout,pad", [
    (np.float64, "nn", "col", 0), (np.float64, "nn", "row", 3), (np.float64, "tn", "col", 2),
    (np.float32, "nt", "row", 0), (np.float32, "nn", "col", 5), (np.float32, "tt", "col", 1),
    (np.float64, "tt", "row", 4), (np.float32, "tn", "row", 7),
])
def test_straight_calls_compute_what_the_walk_does(lib, dtype, trans, layout, pad):
    ta, tb = trans[0] == "t", trans[1] == "t"
    code = 0 if dtype == np.float32 else 1
    rng = np.random.default_rng(pad * 10 + code)
    ran = 0
    for M, N, K in CANDIDATES:
        if ran == 3:
            break
        A, B, (lda, ldb, ldc) = _operands(rng, M, N, K, dtype, ta, tb, layout, pad)
        p = plans.plan(M, N, K, "f32" if code == 0 else "f64", trans, layout=layout, lda=lda,
                       ldb=ldb, ldc=ldc, threads=1, runtime=lib)
        if p.direct_steps < 2:
            continue
        ran += 1
        plan = lib.lib.at_plan_create_ex(code, LAYOUTS[layout], int(ta), int(tb), M, N, K,
                                         lda, ldb, ldc, 1)
        assert plan
        try:
            C0 = rng.standard_normal((M, N)).astype(dtype)
            for alpha, beta, nan_c in ((1.0, 0.0, True), (1.25, 0.5, False), (-0.75, 1.0, False)):
                stores = []
                for run in ("straight", "walk"):
                    store, C = _c_store(M, N, ldc, layout, dtype, np.nan if nan_c else 0)
                    if not nan_c:
                        C[...] = C0
                    if run == "straight":
                        assert lib.lib.at_plan_execute(plan, alpha, A.ctypes.data, B.ctypes.data,
                                                       beta, store.ctypes.data) == 0
                    else:
                        _walk(lib, plan, alpha, A, B, beta, store)
                    stores.append(store)
                    assert_close(C, A, B, None if nan_c else C0, alpha, beta, ta, tb)
                # Bit for bit, and the padding between columns (rows) of C untouched.
                assert stores[0].tobytes() == stores[1].tobytes(), (M, N, K, alpha, beta)
        finally:
            lib.lib.at_plan_destroy(plan)
    assert ran, "no candidate shape runs several kernels straight"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_alpha_zero_reads_neither_operand(lib, dtype):
    """alpha == 0 takes the executor (C = beta C), as the reference BLAS: a NaN in A or
    B never reaches C."""
    M, N, K = 16, 16, 16
    A = np.full((M, K), np.nan, dtype=dtype, order="F")
    B = np.full((K, N), np.inf, dtype=dtype, order="F")
    C = np.asfortranarray(np.arange(M * N, dtype=dtype).reshape(M, N))
    code = 0 if dtype == np.float32 else 1
    plan = lib.lib.at_plan_create_ex(code, 0, 0, 0, M, N, K, M, K, M, 1)
    try:
        assert lib.lib.at_plan_execute(plan, 0.0, A.ctypes.data, B.ctypes.data, 2.0,
                                       C.ctypes.data) == 0
    finally:
        lib.lib.at_plan_destroy(plan)
    np.testing.assert_array_equal(C, 2.0 * np.arange(M * N, dtype=dtype).reshape(M, N))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_entries_and_batches_through_the_list(lib, dtype):
    """gemm (the BLAS entries' path), gemm_batch (run_items) and one call per item agree
    bit for bit, and with the product, on shapes whose plans run their kernels straight."""
    rng = np.random.default_rng(3)
    ran = 0
    for M, N, K in CANDIDATES:
        p = plans.plan(M, N, K, "f32" if dtype == np.float32 else "f64", layout="row",
                       threads=1, runtime=lib)
        if p.direct_steps < 2:
            continue
        ran += 1
        A = rng.standard_normal((5, M, K)).astype(dtype)
        B = rng.standard_normal((5, K, N)).astype(dtype)
        batch = rt.gemm_batch(A, B)
        for i in range(5):
            one = rt.gemm(A[i], B[i])
            assert one.tobytes() == batch[i].tobytes()
            assert_close(one, A[i], B[i], None, 1.0, 0.0, False, False)
    assert ran, "no candidate shape runs several kernels straight"
