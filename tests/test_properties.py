"""Property-based checks of the batch and matmul entry points against numpy (issue 26).

Random shapes (zero sizes included), dtypes, layouts (C and Fortran order,
transposed views, slices with a step: no unit stride), broadcasting, and aliasing
(``out`` or ``C`` overlapping an operand, items of C sharing memory), each result
compared with a float64 product within the kernels' validation bound,
2 (K + 2) eps times the sum of the terms' magnitudes (tests/reference.py).  The
example counts keep the module to a few seconds on a loaded 2-core machine.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune
import autotune.runtime as rt

DTYPES = (np.float32, np.float64)


@pytest.fixture(scope="module", autouse=True)
def library(built):
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    return runtime


def tolerance(bound: np.ndarray, K: int, dtype) -> np.ndarray:
    info = np.finfo(dtype)
    return 2 * (K + 2) * info.eps * bound + info.tiny


def assert_product(got, want64, bound, K, dtype):
    got = np.asarray(got)
    assert got.shape == want64.shape
    err = np.abs(got.astype(np.float64) - want64)
    assert np.all(err <= tolerance(bound, K, dtype)), f"max err {err.max()} (K={K})"


def stored(draw, rng, shape, dtype):
    """An array of `shape` laid out at random: C or F order, a transposed view of the
    other order, or a slice with a step (no unit stride in either dimension)."""
    how = draw(st.sampled_from(["C", "F", "T", "step"]))
    if how == "C":
        return rng.standard_normal(shape).astype(dtype)
    if how == "F":
        return np.asfortranarray(rng.standard_normal(shape).astype(dtype))
    if how == "T" and len(shape) >= 2:
        inner = shape[:-2] + (shape[-1], shape[-2])
        return np.swapaxes(rng.standard_normal(inner).astype(dtype), -1, -2)
    big = rng.standard_normal(tuple(2 * d + 1 for d in shape)).astype(dtype)
    return big[tuple(slice(1, 2 * d + 1, 2) for d in shape)]


@pytest.mark.filterwarnings("ignore:autotune")
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_gemm_batch_matches_numpy(data):
    draw = data.draw
    batch, M, N, K = draw(st.integers(1, 5)), draw(st.integers(0, 9)), draw(st.integers(0, 9)), draw(st.integers(0, 9))
    dtype = draw(st.sampled_from(DTYPES))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    alpha = draw(st.sampled_from([1.0, -0.5, 0.0, 2.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a_item = (K, M) if ta else (M, K)
    b_item = (N, K) if tb else (K, N)
    shared_a, shared_b = draw(st.booleans()), draw(st.booleans())
    A = stored(draw, rng, a_item if shared_a else (batch,) + a_item, dtype)
    B = stored(draw, rng, b_item if shared_b else (batch,) + b_item, dtype)
    if shared_a and shared_b:
        B = stored(draw, rng, (batch,) + b_item, dtype)
        shared_b = False
    opA = [(A if shared_a else A[i]).astype(np.float64) for i in range(batch)]
    opB = [(B if shared_b else B[i]).astype(np.float64) for i in range(batch)]
    opA = [x.T if ta else x for x in opA]
    opB = [x.T if tb else x for x in opB]
    mode = draw(st.sampled_from(["new", "C", "C-aliases-A", "shared-C"]))
    if mode == "C-aliases-A" and (shared_a or ta or (M, K) != (M, N)):
        mode = "C"
    if mode == "new":
        got = rt.gemm_batch(A, B, alpha=alpha, trans_a=ta, trans_b=tb)
        for i in range(batch):
            want = alpha * (opA[i] @ opB[i])
            bound = abs(alpha) * (np.abs(opA[i]) @ np.abs(opB[i]))
            assert_product(got[i], want, bound, K, dtype)
        return
    beta = draw(st.sampled_from([0.0, 1.0, -1.5]))
    if mode == "C":
        C = stored(draw, rng, (batch, M, N), dtype)
    elif mode == "C-aliases-A":
        C = A  # M x K items with K == N: C is A itself
    else:
        # Every item of C is one matrix: the products are summed into it in item order.
        base = stored(draw, rng, (M, N), dtype)
        C = np.lib.stride_tricks.as_strided(base, (batch, M, N), (0,) + base.strides)
    C0 = np.array(C, np.float64)
    got = rt.gemm_batch(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
    assert got is C
    if mode == "shared-C":
        want, bound = C0[0], np.abs(C0[0])
        for i in range(batch):
            want = alpha * (opA[i] @ opB[i]) + beta * want
            bound = abs(alpha) * (np.abs(opA[i]) @ np.abs(opB[i])) + abs(beta) * bound
        assert_product(C[0], want, bound, batch * (K + 2), dtype)
        return
    for i in range(batch):
        want = alpha * (opA[i] @ opB[i]) + beta * C0[i]
        bound = abs(alpha) * (np.abs(opA[i]) @ np.abs(opB[i])) + abs(beta) * np.abs(C0[i])
        assert_product(C[i], want, bound, K, dtype)


stack_dims = st.lists(st.integers(1, 3), min_size=0, max_size=3)


@pytest.mark.filterwarnings("ignore:autotune")
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_matmul_matches_numpy(data):
    draw = data.draw
    stack = draw(stack_dims)

    def operand_stack():
        tail = stack[len(stack) - draw(st.integers(0, len(stack))):]
        return tuple(1 if draw(st.booleans()) else d for d in tail)

    M, K, N = (draw(st.integers(0, 8)) for _ in range(3))
    da, db = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = stored(draw, rng, operand_stack() + (M, K), da)
    b = stored(draw, rng, operand_stack() + (K, N), db)
    if a.ndim == 2 and draw(st.booleans()):
        a = a[0] if M > 0 else a  # a 1-D left operand
    if b.ndim == 2 and draw(st.booleans()):
        b = b[:, 0] if N > 0 else b
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    dtype = np.result_type(a, b)
    alias = draw(st.sampled_from(["none", "a", "b", "window"]))
    target = a if alias == "a" else b
    if alias in ("a", "b") and target.shape == want.shape and target.dtype == dtype and target.ndim:
        out = target  # out is an operand: numpy's answer through a temporary
        got = autotune.matmul(a, b, out=out)
        assert got is out
    elif alias == "window" and want.ndim and want.size:
        # out and a are windows of one buffer, shifted by a few elements: they
        # share some elements, not all.
        shift = draw(st.integers(0, 3))
        size = max(a.size, want.size) + shift
        buffer = np.zeros(size, np.result_type(a.dtype, dtype))
        buffer[:a.size] = a.ravel()
        a = buffer[:a.size].reshape(a.shape)
        out = buffer[shift:shift + want.size].reshape(want.shape)
        got = autotune.matmul(a, b, out=out)
        assert got is out
    else:
        got = autotune.matmul(a, b)
    assert np.asarray(got).dtype == dtype
    assert_product(got, want, bound, K, dtype)
