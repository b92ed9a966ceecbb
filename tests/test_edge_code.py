"""The portable edge code (kernels_src/runtime/edge_t.h), run alone: with
``edge_frac`` at 1 the planner prices every block at the peak on edge code, so
each step of these plans is one.  Its contract is the kernels': each element
one sum over p in order, alpha and beta applied after, C never read when beta
is 0.  On x86-64 the runtime's C has no fused multiply-add (the baseline it is
compiled for lacks one), so a numpy loop over p in the same dtype gives the
same bits, and the test asks for them: the code runs its rows and columns in
blocks of several chains, and a block that summed out of order would show
here.  Elsewhere the compiler may fuse them, and the rounding that saves is
allowed."""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

from autotune.params import PlannerParams
from autotune.runtime.loader import at_plan_info, at_step
from autotune.suite import LibraryRunner

DTYPES = {"f32": (0, np.float32), "f64": (1, np.float64)}
#: No FMA in x86-64's baseline: the runtime's multiply and add round separately, as numpy's.
EXACT = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(scope="module")
def runner(built):
    runner = LibraryRunner(built.library)
    yield runner
    runner.close()


def sequential(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha, beta) -> np.ndarray:
    """op(A) op(B) as the contract sums it, in the operands' dtype: 0, + a_p b_p for p in order."""
    dtype = a.dtype.type
    s = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
    for p in range(a.shape[1]):
        s = s + np.outer(a[:, p], b[p, :])  # each product rounded, then the sum
    out = dtype(alpha) * s
    return out if beta == 0 else out + dtype(beta) * c


def on_edge_code(runner: LibraryRunner, ta: bool, tb: bool, op_a: np.ndarray, op_b: np.ndarray,
                 c0: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """alpha op(A) op(B) + beta C0 through a plan of edge steps only, the operands
    stored with leading dimensions past the matrices (their padding is checked)."""
    (m, k), n = op_a.shape, op_b.shape[1]
    index = 0 if op_a.dtype == np.float32 else 1
    lda, ldb, ldc = (k if ta else m) + 3, (n if tb else k) + 2, m + 1
    # Column-major storage with padding rows: stored[:rows] is the matrix.
    a_store = np.zeros((lda, max(1, m if ta else k)), dtype=op_a.dtype, order="F")
    b_store = np.zeros((ldb, max(1, k if tb else n)), dtype=op_a.dtype, order="F")
    c_store = np.full((ldc, max(1, n)), np.nan if beta == 0 else 0.0, dtype=op_a.dtype, order="F")
    if ta:
        a_store[:k, :m] = op_a.T
    else:
        a_store[:m, :k] = op_a
    if tb:
        b_store[:n, :k] = op_b.T
    else:
        b_store[:k, :n] = op_b
    if beta != 0:
        c_store[:m, :n] = c0
    lib = runner.lib
    runner.set_params(PlannerParams().with_values("f32" if index == 0 else "f64", {"edge_frac": 1.0}))
    try:
        plan = lib.at_plan_create_ex(index, 0, int(ta), int(tb), m, n, k, lda, ldb, ldc, 1)
        assert plan, lib.at_last_error().decode()
        try:
            info = at_plan_info()
            lib.at_plan_get_info(plan, ctypes.byref(info))
            steps = (at_step * max(1, info.nsteps))()
            lib.at_plan_steps(plan, steps, info.nsteps)
            assert all(s.kernel < 0 for s in steps[:info.nsteps]), "a kernel took a block"
            rc = lib.at_plan_execute(plan, ctypes.c_double(alpha), a_store.ctypes.data, b_store.ctypes.data,
                                     ctypes.c_double(beta), c_store.ctypes.data)
            assert rc == 0
        finally:
            lib.at_plan_destroy(plan)
    finally:
        lib.at_params_set(None)  # back to the library's own parameters
    # The padding rows of C are untouched.
    assert np.isnan(c_store[m:, :n]).all() if beta == 0 else not c_store[m:, :n].any()
    return c_store[:m, :n]


# Rows and columns below, at and past the code's blocks of 4 x 2 and its rows of
# 4 columns; depths 0, 1 and past the unrolled ones.
SHAPES = [(1, 1, 1), (2, 2, 2), (3, 5, 7), (4, 2, 3), (4, 3, 1), (5, 7, 3), (7, 13, 9), (8, 4, 16),
          (9, 1, 5), (1, 9, 5), (6, 6, 0), (13, 11, 17)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn", "tt"])
def test_edge_code_sums_each_element_in_order(runner, dtype, trans) -> None:
    ta, tb = trans[0] == "t", trans[1] == "t"
    np_dtype = DTYPES[dtype][1]
    for number, (m, n, k) in enumerate(SHAPES):
        rng = np.random.default_rng(number)
        op_a, op_b, c0 = (rng.standard_normal(shape).astype(np_dtype) for shape in ((m, k), (k, n), (m, n)))
        for alpha, beta in ((1.0, 0.0), (-0.75, 0.5)):
            got = on_edge_code(runner, ta, tb, op_a, op_b, c0, alpha, beta)
            want = sequential(op_a, op_b, c0, alpha, beta)
            assert got.dtype == want.dtype
            where = f"{dtype} {trans} {m}x{n}x{k} beta={beta}"
            if EXACT:
                np.testing.assert_array_equal(got, want, err_msg=where)
            else:
                eps = np.finfo(want.dtype).eps
                np.testing.assert_allclose(got, want, rtol=4 * (k + 2) * eps, atol=4 * (k + 2) * eps, err_msg=where)


def test_edge_code_passes_nan_and_inf_through_as_blas(runner) -> None:
    """A NaN in A reaches its row of C, an Inf in B its column."""
    a = np.ones((6, 4))
    b = np.ones((4, 5))
    a[2, 1] = np.nan
    b[3, 4] = np.inf
    c = on_edge_code(runner, False, False, a, b, np.zeros((6, 5)), 1.0, 0.0)
    with np.errstate(invalid="ignore"):
        want = a @ b
    np.testing.assert_array_equal(c, want)
    assert np.isnan(c[2]).all() and np.isinf(c[[0, 1, 3, 4, 5], 4]).all()
