"""autotune.matmul against np.matmul: broadcasting, 1-D operands, dtypes, views, out=.

Every case runs through the library (the session's ``built``) and through the
numpy fallback; results are compared with float64 products within the kernel
validation's bound, 2 (K + 2) eps times the sum of the terms' magnitudes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotune
import autotune.runtime as rt


@pytest.fixture(params=["library", "numpy"], scope="module")
def backend(request, built):
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    if request.param == "numpy":
        rt.api.use(None)
        saved = rt.gemm, autotune.matmul
        rt.gemm, autotune.matmul = rt.numpy_gemm, rt.api.matmul_entry()
    yield request.param
    if request.param == "numpy":
        rt.gemm, autotune.matmul = saved
    rt.use_library(built.library)


def close(got, a, b):
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    K = a.shape[-1]
    dtype = np.result_type(a, b)
    assert np.shape(got) == want.shape
    assert np.asarray(got).dtype == dtype
    tol = 2 * (K + 2) * np.finfo(dtype).eps * bound + np.finfo(dtype).tiny
    assert np.all(np.abs(np.asarray(got, np.float64) - want) <= tol)


CASES = [
    ((5, 7), (7, 3)),
    ((7,), (7, 3)),           # vector @ matrix: the row dimension is removed
    ((5, 7), (7,)),           # matrix @ vector
    ((7,), (7,)),             # dot product: a scalar
    ((4, 5, 7), (7, 3)),      # stack @ shared matrix
    ((5, 7), (4, 7, 3)),
    ((1, 5, 7), (4, 7, 3)),   # a stack of one is shared by every item
    ((2, 1, 5, 7), (3, 7, 3)),  # different stack lengths, leading dims of 1
    ((7,), (2, 3, 7, 4)),
    ((2, 3, 5, 7), (7,)),
    ((0, 5, 7), (7, 3)),      # zero-sized dims
    ((5, 0), (0, 3)),         # K = 0: zeros
    ((0, 7), (7, 3)),
    ((3, 5, 7), (3, 7, 0)),
]


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.float64, np.float64),
                                    (np.float32, np.float64)], ids=["f32", "f64", "f32xf64"])
@pytest.mark.parametrize("sa,sb", CASES, ids=[f"{a}@{b}" for a, b in CASES])
def test_shapes_match_numpy(backend, sa, sb, dtypes):
    rng = np.random.default_rng(abs(hash((sa, sb))) % 2**32)
    a = rng.standard_normal(sa).astype(dtypes[0])
    b = rng.standard_normal(sb).astype(dtypes[1])
    got = autotune.matmul(a, b)
    close(got, a, b)
    assert type(got) is type(np.matmul(a, b))


stack_dims = st.lists(st.integers(1, 3), min_size=0, max_size=3)


@pytest.mark.filterwarnings("ignore:autotune")
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_broadcasts(backend, data):
    batch = data.draw(stack_dims)
    # Each operand keeps a suffix of the stack and may turn any dim into 1.
    def operand_stack():
        tail = batch[len(batch) - data.draw(st.integers(0, len(batch))):]
        return tuple(1 if data.draw(st.booleans()) else d for d in tail)
    M, K, N = (data.draw(st.integers(0, 9)) for _ in range(3))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a = rng.standard_normal(operand_stack() + (K, M)).astype(dtype)
    b = rng.standard_normal(operand_stack() + (N, K)).astype(dtype)
    # Transposed views: no unit stride in the expected orientation.
    a, b = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)
    if a.ndim == 2 and M > 0 and data.draw(st.booleans()):
        a = a[0]  # a 1-D left operand (a strided one: a row of a transposed view)
    close(autotune.matmul(a, b), a, b)


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_is_written_and_returned(backend, dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 6)).astype(dtype)
    b = rng.standard_normal((6, 5)).astype(dtype)
    out = np.full((3, 4, 5), np.nan, dtype)
    assert autotune.matmul(a, b, out=out) is out
    close(out, a, b)
    # A strided out (every other column of a wider array).
    wide = np.full((3, 4, 10), np.nan, dtype)
    autotune.matmul(a, b, out=wide[..., ::2])
    close(wide[..., ::2], a, b)
    assert np.isnan(wide[..., 1::2]).all()


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("sa,sb,other", [((6,), (6,), np.float64), ((6,), (6,), np.float32),
                                         ((4, 6), (6,), np.float64), ((6,), (6, 5), np.float32)])
def test_out_is_returned_for_vector_operands(backend, sa, sb, other):
    """np.matmul returns ``out`` itself, a 0-D array for vector . vector, never a scalar."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(other)
    want = np.matmul(a, b)
    out = np.full(want.shape, np.nan, want.dtype)
    got = autotune.matmul(a, b, out=out)
    assert got is out and isinstance(got, np.ndarray)
    close(out, a, b)
    assert type(autotune.matmul(a, b)) is type(want)  # without out: a scalar where numpy's is one


@pytest.mark.filterwarnings("ignore:autotune")
def test_out_aliasing_an_operand(backend):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 6, 6))
    b = rng.standard_normal((4, 6, 6))
    a0, b0 = a.copy(), b.copy()
    autotune.matmul(a, b, out=a)
    close(a, a0, b0)
    autotune.matmul(a0, b, out=b)
    close(b, a0, b0)
    # out is the transpose of an operand: every element read is also written.
    c = rng.standard_normal((6, 6))
    c0 = c.copy()
    autotune.matmul(c, c, out=c.T)
    close(c.T, c0, c0)


@pytest.mark.filterwarnings("ignore:autotune")
def test_out_of_another_float_dtype_is_cast(backend):
    a = np.ones((3, 4)); b = np.ones((4, 2))
    out = np.empty((3, 2), np.float32)
    autotune.matmul(a, b, out=out)
    assert (out == 4).all()


def test_out_errors_are_numpys(backend):
    a = np.ones((3, 4)); b = np.ones((4, 2))
    with pytest.raises(ValueError, match="shape"):
        autotune.matmul(a, b, out=np.empty((2, 3)))
    with pytest.raises(TypeError, match="same_kind"):
        autotune.matmul(a, b, out=np.empty((3, 2), np.int64))
    with pytest.raises(ValueError, match="core dimension"):
        autotune.matmul(a, np.ones((3, 2)))
    with pytest.raises(ValueError, match="broadcast"):
        autotune.matmul(np.ones((2, 3, 4)), np.ones((3, 4, 2)))
    with pytest.raises(ValueError, match="enough dimensions"):
        autotune.matmul(np.float64(2), b)
    with pytest.raises(TypeError, match="not numeric"):
        autotune.matmul(np.array([["a"]]), b[:1])


def test_integers_are_exact_through_numpy(backend):
    a = np.arange(12, dtype=np.int64).reshape(3, 4) * (2**40)
    b = np.arange(8, dtype=np.int64).reshape(4, 2)
    got = autotune.matmul(a, b)
    assert got.dtype == np.int64 and np.array_equal(got, np.matmul(a, b))
    assert np.array_equal(autotune.matmul(a > 5, b > 2), np.matmul(a > 5, b > 2))


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_batch_broadcasts_a_stack_of_one(backend, dtype):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 5, 4)).astype(dtype)
    b = rng.standard_normal((6, 4, 3)).astype(dtype)
    close(rt.gemm_batch(a, b), a, b)
    close(rt.gemm_batch(b.transpose(0, 2, 1), a.transpose(0, 2, 1)),
          b.transpose(0, 2, 1), a.transpose(0, 2, 1))


@pytest.mark.filterwarnings("ignore:autotune")
@pytest.mark.parametrize("sa, sb", [((60, 1, 8, 256), (1, 60, 256, 8)),
                                    ((6, 1, 10, 1, 8, 256), (1, 6, 1, 10, 256, 8)),
                                    ((60, 1, 256, 8), (60, 256, 8))])
def test_broadcast_stacks_are_not_materialised(backend, sa, sb):
    """A drop-in uses no more memory than np.matmul plus a constant (issue 26):
    (1000, 1, 8, 4096) x (1, 1000, 4096, 8) used to copy both broadcast stacks
    (122 GiB).  Here the copies would be 59 MB against a 0.9 MB result; the
    transposed case (no unit stride in a's items) may copy a once, at its size."""
    import tracemalloc

    rng = np.random.default_rng(5)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    if sa[-1] == 8:
        a = np.swapaxes(a, -1, -2)
    tracemalloc.start()
    try:
        got = autotune.matmul(a, b)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    allowed = got.nbytes + (a.nbytes if sa[-1] == 8 else 0) + (1 << 20)
    assert peak <= allowed, f"peak {peak / 1e6:.1f} MB, np.matmul's result is {got.nbytes / 1e6:.1f} MB"
    close(got, a, b)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.asmatrix
def test_two_float_matrices_take_one_c_call_and_nothing_else_does(built, monkeypatch):
    """autotune.matmul is the extension's entry: it computes the calls gemm computes as
    np.matmul would, and hands every other call, arguments as given, to api.matmul."""
    runtime = rt.use_library(built.library)
    assert autotune.matmul is runtime.fast.matmul is rt.matmul
    handed = []
    python = rt.api.matmul

    def spy(*args, **kwargs):
        handed.append((args, kwargs))
        return python(*args, **kwargs)

    monkeypatch.setattr(rt.api, "matmul", spy)
    rt.use_library(built.library)  # registers the spy as the entry's slow path
    fast = autotune.matmul
    rng = np.random.default_rng(11)
    a, b = rng.random((5, 7)).astype(np.float32), rng.random((7, 3)).astype(np.float32)
    out = np.empty((5, 3), np.float32)
    close(fast(a, b), a, b)
    close(fast(a, b, None), a, b)
    assert fast(a, b, out) is out and fast(a, b, out=out) is out
    close(out, a, b)
    close(fast(a.T.copy().T, b[:, ::-1]), a, b[:, ::-1])  # any unit stride, or gemm's own slow path
    assert not handed
    declined = [
        (np.asmatrix(a), b, None), (a, b.astype(np.float64), None), (a[0], b, None), (a, b[:5], None),
        (a.astype(np.float16), b.astype(np.float16), None), (a[None], b, None), (a, b, out.astype(np.float64)),
        (a, b, np.empty((5, 4), np.float32)), (a, b, np.empty((15,), np.float32)), (a.tolist(), b, None),
    ]
    readonly = np.empty((5, 3), np.float32)
    readonly.flags.writeable = False
    declined.append((a, b, readonly))
    for args in declined:
        handed.clear()
        given = args[:2] if args[2] is None else args
        try:
            want = np.matmul(*given)
        except (ValueError, TypeError) as exc:
            with pytest.raises(type(exc)):
                fast(*given)
        else:
            got = fast(*given)
            assert np.allclose(got, want, rtol=1e-3) and type(got) is type(want)
        # (api.matmul may call itself: np.matrix operands, as arrays.)
        assert handed and len(handed[0][0]) == len(given) and not handed[0][1], [np.shape(x) for x in args]
        assert all(x is y for x, y in zip(handed[0][0], given))
    # Keywords the entry does not take itself reach api.matmul as given.
    handed.clear()
    with pytest.raises(TypeError):
        fast(a, b, out=out, casting="unsafe")
    assert len(handed) == 1 and handed[0][1] == {"out": out, "casting": "unsafe"}
    monkeypatch.undo()
    rt.use_library(built.library)
