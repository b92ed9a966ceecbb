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


def run_on_edge_code(runner: LibraryRunner, dtype: str, ta: bool, tb: bool, m: int, n: int, k: int,
                     alpha: float, beta: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """C = alpha op(A) op(B) + beta C through a plan of edge steps only, with leading
    dimensions past the matrices; (result, expected)."""
    index, np_dtype = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    op_a = rng.standard_normal((m, k)).astype(np_dtype)
    op_b = rng.standard_normal((k, n)).astype(np_dtype)
    c0 = rng.standard_normal((m, n)).astype(np_dtype)
    lda, ldb, ldc = (k if ta else m) + 3, (n if tb else k) + 2, m + 1
    # Column-major storage with padding rows: stored[:rows] is the matrix.
    a_store = np.zeros((lda, max(1, m if ta else k)), dtype=np_dtype, order="F")
    b_store = np.zeros((ldb, max(1, k if tb else n)), dtype=np_dtype, order="F")
    c_store = np.full((ldc, max(1, n)), np.nan if beta == 0 else 0.0, dtype=np_dtype, order="F")
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
    runner.set_params(PlannerParams().with_values(dtype, {"edge_frac": 1.0}))
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
        runner.lib.at_params_set(None)  # back to the library's own parameters
    # The padding rows of C are untouched.
    assert np.isnan(c_store[m:, :n]).all() if beta == 0 else not c_store[m:, :n].any()
    return c_store[:m, :n], sequential(op_a, op_b, c0, alpha, beta)


# Rows and columns below, at and past the code's blocks of 4 x 2 and its rows of
# 4 columns; depths 0, 1 and past the unrolled ones.
SHAPES = [(1, 1, 1), (2, 2, 2), (3, 5, 7), (4, 2, 3), (4, 3, 1), (5, 7, 3), (7, 13, 9), (8, 4, 16),
          (9, 1, 5), (1, 9, 5), (6, 6, 0), (13, 11, 17)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn", "tt"])
def test_edge_code_sums_each_element_in_order(runner, dtype, trans) -> None:
    ta, tb = trans[0] == "t", trans[1] == "t"
    for number, (m, n, k) in enumerate(SHAPES):
        for alpha, beta in ((1.0, 0.0), (-0.75, 0.5)):
            got, want = run_on_edge_code(runner, dtype, ta, tb, m, n, k, alpha, beta, seed=number)
            assert got.dtype == want.dtype
            where = f"{dtype} {trans} {m}x{n}x{k} beta={beta}"
            if EXACT:
                np.testing.assert_array_equal(got, want, err_msg=where)
            else:
                eps = np.finfo(want.dtype).eps
                np.testing.assert_allclose(got, want, rtol=4 * (k + 2) * eps, atol=4 * (k + 2) * eps, err_msg=where)


def test_edge_code_passes_nan_and_inf_through_as_blas(runner) -> None:
    """A NaN in A reaches its row of C, an Inf in B its column."""
    m, n, k = 6, 5, 4
    index, np_dtype = DTYPES["f64"]
    a = np.ones((m, k), order="F")
    b = np.ones((k, n), order="F")
    a[2, 1] = np.nan
    b[3, 4] = np.inf
    c = np.zeros((m, n), order="F")
    runner.set_params(PlannerParams().with_values("f64", {"edge_frac": 1.0}))
    try:
        plan = runner.lib.at_plan_create_ex(index, 0, 0, 0, m, n, k, m, k, m, 1)
        assert plan
        try:
            assert runner.lib.at_plan_execute(plan, ctypes.c_double(1.0), a.ctypes.data, b.ctypes.data,
                                              ctypes.c_double(0.0), c.ctypes.data) == 0
        finally:
            runner.lib.at_plan_destroy(plan)
    finally:
        runner.lib.at_params_set(None)  # back to the library's own parameters
    with np.errstate(invalid="ignore"):
        want = a @ b
    np.testing.assert_array_equal(c, want)
    assert np.isnan(c[2]).all() and np.isinf(c[[0, 1, 3, 4, 5], 4]).all()
