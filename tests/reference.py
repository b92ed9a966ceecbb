"""What the runtime tests compare against: the product in float64 with the kernel
validation's error bound, and operands stored in a chosen order with padding."""

from __future__ import annotations

import numpy as np


def reference(A, B, C, alpha, beta, ta, tb):
    """alpha op(A) op(B) + beta C in float64, and the sum of the terms' magnitudes."""
    opA = (A.T if ta else A).astype(np.float64)
    opB = (B.T if tb else B).astype(np.float64)
    out = alpha * (opA @ opB)
    bound = abs(alpha) * (np.abs(opA) @ np.abs(opB))
    if C is not None and beta != 0:
        out = out + beta * C.astype(np.float64)
        bound = bound + abs(beta) * np.abs(C.astype(np.float64))
    return out, bound


def assert_close(got, A, B, C0, alpha, beta, ta, tb):
    """Within c_K eps of the float64 product, c_K = 2 (K + 2) (the validation's bound)."""
    want, bound = reference(A, B, C0, alpha, beta, ta, tb)
    K = A.shape[0] if ta else A.shape[1]
    eps = np.finfo(got.dtype).eps
    tol = 2 * (K + 2) * eps * bound + np.finfo(got.dtype).tiny
    err = np.abs(got.astype(np.float64) - want)
    assert got.shape == want.shape
    assert np.all(err <= tol), f"max err {err.max()} vs tol {tol.max()} (K={K})"


def operand(rng, rows, cols, dtype, order="C", pad=0):
    """A rows x cols operand in `order`; pad > 0 makes it a view whose leading
    dimension exceeds its extent by pad."""
    if order == "C":
        return rng.standard_normal((rows, cols + pad)).astype(dtype)[:, :cols]
    return np.asfortranarray(rng.standard_normal((rows + pad, cols)).astype(dtype))[:rows, :]


def check_gemm(gemm, rng, M, N, K, ta, tb, dtype, alpha, beta):
    """Random op(A) (M x K), op(B) (K x N) and C, ``gemm(A, B, C, alpha=, beta=, trans_a=, trans_b=)``
    in place, and C against the reference."""
    A = rng.standard_normal((K, M) if ta else (M, K)).astype(dtype)
    B = rng.standard_normal((N, K) if tb else (K, N)).astype(dtype)
    C0 = rng.standard_normal((M, N)).astype(dtype)
    C = C0.copy()
    gemm(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
    assert_close(C, A, B, C0, alpha, beta, ta, tb)
