"""Small edges of the numpy API where the answer was silently wrong or the message
named the wrong thing (issue 26, "clear errors"): integer gemm with a fractional
alpha, byte-swapped operands, gemm_batch of a list and a stack, np.matrix."""

from __future__ import annotations

import numpy as np
import pytest

import autotune
import autotune.runtime as rt

from .reference import assert_close


@pytest.fixture(scope="module", autouse=True)
def library(built):
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    return runtime


@pytest.mark.filterwarnings("ignore:autotune")
def test_integer_gemm_with_a_fractional_alpha_computes_in_float_as_numpy():
    """0.5 * (A @ B) on integers is a float64 product in numpy; gemm used to
    truncate it to integers silently."""
    A = np.arange(6).reshape(2, 3)
    B = np.arange(6).reshape(3, 2)
    got = autotune.gemm(A, B, alpha=0.5)
    assert got.dtype == np.float64 and np.array_equal(got, 0.5 * (A @ B))
    exact = autotune.gemm(A, B, alpha=2.0)  # an integral alpha keeps integers exact
    assert exact.dtype == A.dtype and np.array_equal(exact, 2 * (A @ B))
    C = np.ones((2, 2), np.int64)
    with pytest.raises(TypeError, match="cannot hold"):
        autotune.gemm(A, B, C, alpha=0.5, beta=1.0)
    with pytest.raises(TypeError, match="cannot hold"):
        autotune.gemm(A, B, C, beta=0.5)
    assert np.all(C == 1)
    F = np.ones((2, 2))
    autotune.gemm(A, B, F, alpha=0.5, beta=1.0)
    assert np.array_equal(F, 0.5 * (A @ B) + 1)


@pytest.mark.parametrize("which", ["A", "B", "C", "all"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_byte_swapped_operands_are_all_taken(which, dtype):
    """A big-endian C was refused while big-endian A and B were accepted; each is
    now converted to the machine's order (C written back in its own)."""
    rng = np.random.default_rng(2)
    A = rng.standard_normal((5, 4)).astype(dtype)
    B = rng.standard_normal((4, 6)).astype(dtype)
    C0 = rng.standard_normal((5, 6)).astype(dtype)
    swapped = {name: X.astype(X.dtype.newbyteorder(">")) for name, X in (("A", A), ("B", B), ("C", C0))}
    ops = {"A": A, "B": B, "C": C0.copy()}
    for name in ("A", "B", "C"):
        if which in (name, "all"):
            ops[name] = swapped[name].copy()
    got = autotune.gemm(ops["A"], ops["B"], ops["C"], alpha=0.5, beta=2.0)
    assert got is ops["C"]
    assert_close(np.asarray(got, dtype), A, B, C0, 0.5, 2.0, False, False)
    for product in (autotune.gemm(ops["A"], ops["B"]), autotune.matmul(ops["A"], ops["B"]),
                    autotune.gemm_batch(ops["A"][None], ops["B"][None])[0]):
        assert product.dtype == np.dtype(dtype)  # native, as numpy's matmul gives
        assert_close(product, A, B, None, 1.0, 0.0, False, False)


def test_gemm_batch_of_a_list_and_a_stack_names_gemm_batch():
    As = [np.ones((2, 3))] * 2
    with pytest.raises(ValueError, match=r"^gemm_batch: item 0: inner dimensions differ"):
        autotune.gemm_batch(As, np.ones((2, 4, 3)))
    got = autotune.gemm_batch(As, np.ones((2, 3, 4)) * np.arange(2)[:, None, None])
    assert [g.shape for g in got] == [(2, 4), (2, 4)] and np.all(got[1] == 3) and np.all(got[0] == 0)
    with pytest.raises(ValueError, match=r"^gemm_batch: A, B and C must have the same number of items"):
        autotune.gemm_batch(As, np.ones((3, 3, 4)))
    with pytest.raises(ValueError, match=r"^gemm_batch: B must be"):
        autotune.gemm_batch(As, np.ones((1, 2, 3, 4)))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_matrix_operands_keep_their_type_as_in_numpy():
    m = np.matrix(np.arange(6.0).reshape(2, 3))
    a = np.arange(6.0).reshape(3, 2)
    for x, y in ((m, a), (a.T, m.T), (np.ones(2), m), (m, m.T)):
        got, want = autotune.matmul(x, y), np.matmul(x, y)
        assert type(got) is type(want) is np.matrix
        assert got.shape == want.shape and np.allclose(got, want)
