"""gemm and gemm_batch on numpy arrays.

The hot path is one call into the ``_atfast`` extension, which reads the
arrays' buffers in C, finds the cached plan and runs it.  Everything it does not
take (another dtype, mixed dtypes, an operand with no unit stride, a read-only
or badly shaped C) comes back to :func:`_slow_path` here, which raises the clear
error, copies, or lets numpy compute (the MLAS pattern: use the fast path only
where its preconditions hold, never a wrong result).
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

from . import loader

_SUPPORTED = (np.dtype(np.float32), np.dtype(np.float64))

_warn_lock = threading.Lock()
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


#: Why gemm computes with numpy when no library is in use.
NO_LIBRARY = "no libautotune installed (run `autotune install`)"


class _State:
    """The library in use; replaced as a whole so readers never see half of one."""

    runtime: loader.Runtime | None = None
    reason: str = NO_LIBRARY
    # runtime.fast.gemm_batch when the extension has it; None: the Python path.
    batch: Any = None
    # What autotune.runtime.gemm is bound to: the extension's gemm, or numpy_gemm.
    gemm: Any = None
    # What autotune.runtime.matmul is bound to: the extension's matmul, or matmul below.
    matmul: Any = None


_state = _State()


def _op(X: np.ndarray, trans: bool) -> np.ndarray:
    return X.T if trans else X


def _check_2d(name: str, X: Any) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"gemm: {name} must be 2-D, got an array of shape {X.shape}")
    return X


def _numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biufc"


def _numpy_gemm(A: np.ndarray, B: np.ndarray, C: np.ndarray | None, alpha: float, beta: float,
                trans_a: bool, trans_b: bool) -> np.ndarray:
    """The reference semantics computed by numpy (alpha == 0 reads neither A nor B)."""
    opA, opB = _op(A, trans_a), _op(B, trans_b)
    M, N = opA.shape[0], opB.shape[1]
    dtype = _scaled_dtype(A, B, alpha, beta if C is not None else 0.0)
    if C is not None:
        if not np.can_cast(dtype, C.dtype, "same_kind"):
            raise TypeError(f"gemm: alpha={alpha!r}, beta={beta!r} on {A.dtype} x {B.dtype} make a {dtype} "
                            f"product, which C's {C.dtype} cannot hold: pass a C of that dtype "
                            "(numpy refuses the cast too)")
        dtype = C.dtype
    if alpha == 0 or opA.shape[1] == 0:
        product = np.zeros((M, N), dtype=dtype)
    else:
        product = opA @ opB
        if alpha != 1:
            product = alpha * product
    if C is None:
        return np.asarray(product, dtype=dtype)
    if beta == 0:
        C[...] = product
    else:
        C[...] = product + beta * C
    return C


def _scaled_dtype(A: np.ndarray, B: np.ndarray, alpha: Any, beta: Any) -> np.dtype:
    """The dtype of ``alpha * A @ B + beta * C`` as numpy computes it: integer
    operands stay integers under integral scalars (the default 1.0 and 0.0), and
    a fractional one makes the product float, never a silent truncation."""
    def integral(x: Any) -> bool:
        try:
            return float(x).is_integer()  # False for inf and nan
        except (TypeError, ValueError):
            return False

    return np.result_type(A, B, *(x for x in (alpha, beta) if not integral(x)))


def _native(X: np.ndarray) -> np.ndarray:
    """X in the machine's byte order (a copy when it is byte-swapped), so a '>f8'
    operand runs in the kernels like any float64 one, whichever operand it is."""
    return X if X.dtype.isnative else X.astype(X.dtype.newbyteorder("="))


def _slow_path(A: Any, B: Any, C: Any, alpha: float, beta: float, trans_a: int,
               trans_b: int) -> np.ndarray:
    """Everything the C fast path declined; see the module docstring."""
    A, B = _check_2d("A", A), _check_2d("B", B)
    if C is not None:
        if not isinstance(C, np.ndarray):
            raise TypeError(f"gemm: C must be a numpy array updated in place, got {type(C).__name__}")
        if C.ndim != 2:
            raise ValueError(f"gemm: C must be 2-D, got an array of shape {C.shape}")
        if not C.flags.writeable:
            raise ValueError("gemm: C is read-only")
    for name, X in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        if not _numeric(X.dtype):
            raise TypeError(f"gemm: {name} has dtype {X.dtype}, which is not numeric")
    opA_shape = A.shape[::-1] if trans_a else A.shape
    opB_shape = B.shape[::-1] if trans_b else B.shape
    if opA_shape[1] != opB_shape[0]:
        raise ValueError(
            f"gemm: inner dimensions differ: op(A) is {opA_shape[0]} x {opA_shape[1]}, "
            f"op(B) is {opB_shape[0]} x {opB_shape[1]}"
        )
    M, N = opA_shape[0], opB_shape[1]
    if C is not None and C.shape != (M, N):
        raise ValueError(f"gemm: C is {C.shape[0]} x {C.shape[1]} but op(A) @ op(B) is {M} x {N}")
    if C is None and beta != 0:
        raise ValueError("gemm: beta needs an output C to scale")
    A, B = _native(A), _native(B)
    if C is not None and not C.dtype.isnative:
        # Computed in native order, then stored back in C's own.
        native = _native(C) if beta != 0 else np.empty(C.shape, C.dtype.newbyteorder("="))
        _slow_path(A, B, native, alpha, beta, trans_a, trans_b)
        C[...] = native
        return C
    runtime = _state.runtime
    floats = A.dtype in _SUPPORTED and B.dtype in _SUPPORTED
    if floats and A.dtype != B.dtype:
        raise TypeError(
            f"gemm: A is {A.dtype} and B is {B.dtype}; convert one so both have the same dtype"
        )
    if floats and C is not None and C.dtype != A.dtype:
        raise TypeError(f"gemm: C is {C.dtype} but A and B are {A.dtype}")
    if runtime is None or runtime.fast is None or not floats:
        if runtime is None or runtime.fast is None:
            _warn_once(f"nolib-{_state.reason}", f"autotune: {_state.reason}; numpy computes gemm instead")
        else:
            _warn_once(f"dtype-{A.dtype}-{B.dtype}",
                       f"autotune: no kernels for dtype {A.dtype}/{B.dtype}; numpy computes gemm")
        return _numpy_gemm(A, B, C, alpha, beta, bool(trans_a), bool(trans_b))
    # Operands with no unit stride (or negative strides), and operands C overlaps
    # (C would be read after it was written): contiguous copies, numpy's answer.
    A2 = A if (A.flags.c_contiguous or A.flags.f_contiguous) and not _overlaps(A, C) else np.array(A, order="C")
    B2 = B if (B.flags.c_contiguous or B.flags.f_contiguous) and not _overlaps(B, C) else np.array(B, order="C")
    fast = runtime.fast.gemm
    if C is None:
        return fast(A2, B2, alpha=alpha, trans_a=trans_a, trans_b=trans_b)
    if C.flags.c_contiguous or C.flags.f_contiguous:
        return fast(A2, B2, C, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
    tmp = np.array(C, order="C") if beta != 0 else np.empty(C.shape, C.dtype)
    fast(A2, B2, tmp, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
    C[...] = tmp
    return C


def _overlaps(X: np.ndarray, C: np.ndarray | None) -> bool:
    return C is not None and np.may_share_memory(X, C)


def numpy_gemm(A: ArrayLike, B: ArrayLike, C: np.ndarray | None = None, *, alpha: float = 1.0,
               beta: float = 0.0, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """``C = alpha * op(A) @ op(B) + beta * C``: ``gemm``'s contract, computed by numpy.

    :func:`autotune.gemm` is this function when no library is installed (with one
    ``RuntimeWarning`` per process), and otherwise the ``_atfast`` C function with
    the same signature and semantics, which sends back here what it does not take.

    Parameters
    ----------
    A : array_like, 2-D
        ``M x K`` (``K x M`` when ``trans_a``).  Any strides; operands with no unit
        stride are copied once.
    B : array_like, 2-D
        ``K x N`` (``N x K`` when ``trans_b``).
    C : ndarray, 2-D, optional
        ``M x N``, updated in place and returned; it may overlap ``A`` or ``B``.
        Without it a new C-ordered array is returned.
    alpha, beta : float
        BLAS scalars; ``alpha == 0`` reads neither ``A`` nor ``B``, ``beta == 0``
        never reads ``C`` (NaNs in it are overwritten).  ``beta != 0`` needs ``C``.
    trans_a, trans_b : bool
        Use the transpose of ``A`` / ``B``.

    Returns
    -------
    ndarray
        ``C``, or the new ``M x N`` product.

    Raises
    ------
    ValueError
        An operand is not 2-D, the inner dimensions differ, ``C`` has the wrong shape
        or is read-only, or ``beta != 0`` without ``C``.
    TypeError
        An operand is not numeric, ``A`` and ``B`` are float32 and float64 (convert
        one: gemm never converts silently; :func:`matmul` promotes as numpy does), or
        ``C``'s float dtype differs from theirs.

    Notes
    -----
    The kernels exist for float32 and float64; other numeric dtypes are computed by
    numpy with a warning.  Above about 2e5 flops the C path releases the GIL.

    Examples
    --------
    >>> import numpy as np, autotune
    >>> A = np.ones((3, 4), np.float32); B = np.ones((4, 2), np.float32)
    >>> autotune.gemm(A, B)
    array([[4., 4.],
           [4., 4.],
           [4., 4.]], dtype=float32)
    >>> C = np.ones((3, 2), np.float32)
    >>> _ = autotune.gemm(A, B, C, alpha=0.5, beta=2.0); C[0, 0]
    np.float32(4.0)
    """
    return _slow_path(A, B, C, alpha, beta, int(trans_a), int(trans_b))


def _entry_points(lib: ctypes.CDLL) -> tuple[int, int, int, int]:
    """Addresses of the four functions the extension calls, from this very library."""
    return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value  # type: ignore[return-value]
                 for name in ("at_gemm", "at_gemm_batch_strided", "at_last_error", "at_qmatmul_f32"))


def use(runtime: loader.Runtime | None, reason: str = NO_LIBRARY) -> None:
    """Make ``runtime`` the library behind gemm (None: the numpy fallback, warning ``reason``)."""
    batch, gemm, product = None, numpy_gemm, matmul
    if runtime is not None and runtime.fast is not None:
        fast = runtime.fast
        fast._init(np.empty, np.dtype(np.float32), np.dtype(np.float64), _slow_path,
                   _batch_slow_path, matmul, np.ndarray, *_entry_points(runtime.lib))
        batch, gemm, product = fast.gemm_batch, fast.gemm, fast.matmul
        # Pickled as autotune.gemm and autotune.matmul, which any process can import
        # (dask and multiprocessing send functions so): the extension's own module
        # name, _atfast, is importable only where autotune has loaded it.
        gemm.__module__ = product.__module__ = "autotune"
    elif runtime is not None and not any(runtime.path.parent.glob("_atfast*")):
        # The install found no Python headers (Debian's python3-dev), so it built none.
        reason = (f"no _atfast extension beside {runtime.path}: install Python's headers (python3-dev) "
                  "and run `autotune install --force`")
    elif runtime is not None:
        reason = runtime.fast_problem or (f"libautotune's extension beside {runtime.path} is unusable "
                                          "(run `autotune install --force`)")
    _state.batch = batch
    _state.gemm, _state.matmul = gemm, product
    _state.runtime = runtime
    _state.reason = reason


def entry() -> Callable[..., np.ndarray]:
    """The gemm in use: the extension's C entry point, or :func:`numpy_gemm`."""
    return _state.gemm or numpy_gemm


def matmul_entry() -> Callable[..., np.ndarray]:
    """The matmul in use: the extension's C entry point, which hands every call but a
    product of two float matrices to :func:`matmul`, or :func:`matmul` itself."""
    return _state.matmul or matmul


def current() -> loader.Runtime | None:
    """The library behind gemm (:class:`~autotune.runtime.loader.Runtime`), None for numpy's."""
    return _state.runtime


def _orient(shape: tuple[int, int], strides: tuple[int, int]) -> tuple[bool, int] | None:
    """(stored column-major?, leading dimension) of one 2-D item, None if no unit stride."""
    r, c = shape
    sr, sc = strides
    mr, mc = max(1, r), max(1, c)
    if r == 0 or c == 0:
        return True, mr
    if (sr == 1 or r == 1) and (c == 1 or sc >= mr):
        return True, (mr if c == 1 else sc)
    if (sc == 1 or c == 1) and (r == 1 or sr >= mc):
        return False, (mc if r == 1 else sr)
    return None


def _batch_view(X: np.ndarray, batch: int) -> tuple[int, tuple[bool, int]] | None:
    """(batch stride in elements, orientation) of a 3-D stack or a 2-D operand broadcast."""
    item = X.itemsize
    if any(s % item for s in X.strides):
        return None
    strides = [s // item for s in X.strides]
    if X.ndim == 2:
        o = _orient(X.shape, (strides[0], strides[1]))
        return (0, o) if o else None
    if X.shape[0] != batch or strides[0] < 0:
        return None
    o = _orient(X.shape[1:], (strides[1], strides[2]))
    return (strides[0], o) if o else None


def gemm_batch(A: ArrayLike | Sequence[ArrayLike], B: ArrayLike | Sequence[ArrayLike],
               C: np.ndarray | Sequence[np.ndarray] | None = None, *, alpha: float = 1.0,
               beta: float = 0.0, trans_a: bool = False,
               trans_b: bool = False) -> np.ndarray | list[np.ndarray]:
    """``C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i]`` for every item of a batch.

    Parameters
    ----------
    A, B : ndarray (3-D or 2-D), or sequence of 2-D arrays
        Stacks of shape ``(batch, rows, cols)``.  A 2-D operand, or a stack of one
        item against a stack of many, is shared by every item (numpy's
        broadcasting of a stack of length 1).  Sequences (lists or tuples of
        matrices, possibly of different shapes) are computed item by item.
    C : ndarray (3-D) or sequence of 2-D arrays, optional
        ``(batch, M, N)``, updated in place and returned.  It may overlap ``A`` or
        ``B``.  Items that share memory (a batch stride of 0 sums every product
        into one matrix) are computed one after another in item order, so
        ``beta=1`` accumulates exactly as a loop of :func:`gemm` calls would.
    alpha, beta, trans_a, trans_b
        As in :func:`numpy_gemm` (``gemm``), the same for every item.

    Returns
    -------
    ndarray or list of ndarray
        ``C``, or a new ``(batch, M, N)`` stack (a list for sequence operands).

    Raises
    ------
    ValueError
        The stacks' lengths differ (and neither is 1), an item's inner dimensions
        differ, ``C`` has the wrong shape, or ``beta != 0``
        without ``C``.
    TypeError
        As :func:`numpy_gemm`.

    Notes
    -----
    Stacks of one float dtype whose items each have a unit stride run as one C
    call: one plan lookup, the batch split over the library's threads, the GIL
    released above about 2e5 flops.  Anything else runs item by item.  For stacks
    of more than three dimensions, or numpy's broadcasting and type promotion, use
    :func:`matmul`.

    Examples
    --------
    >>> import numpy as np, autotune
    >>> A = np.ones((8, 3, 4)); B = np.ones((4, 5))
    >>> autotune.gemm_batch(A, B).shape
    (8, 3, 5)
    """
    if (isinstance(A, np.ndarray) and isinstance(B, np.ndarray) and A.ndim == B.ndim == 3
            and A.shape[0] != B.shape[0]):
        # np.matmul's broadcasting: a stack of one item is shared by every item.
        if A.shape[0] == 1:
            A = A[0]
        elif B.shape[0] == 1:
            B = B[0]
    batch = _state.batch
    if batch is not None:
        # _atfast validates the stacks and runs the plan in C; whatever it
        # declines comes back to _batch_slow_path below.
        return batch(A, B, C, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
    return _batch_slow_path(A, B, C, alpha, beta, int(trans_a), int(trans_b))


def _batch_slow_path(A: Any, B: Any, C: Any, alpha: float, beta: float, trans_a: int,
                     trans_b: int) -> Any:
    """gemm_batch for what _atfast declined: lists, mixed dtypes, items with no
    unit stride, C overlapping A, B or itself, errors, and no library at all."""
    from . import gemm as _gemm  # the entry bound to the current library

    if isinstance(A, (list, tuple)) or isinstance(B, (list, tuple)):
        n = len(A) if isinstance(A, (list, tuple)) else len(B)

        def items(name: str, X: Any) -> Sequence[Any]:
            # The other operand of a list: one matrix for every item, or a stack of n.
            if isinstance(X, (list, tuple)):
                return X
            X = np.asarray(X)
            if X.ndim == 2:
                return [X] * n
            if X.ndim == 3:
                return list(X)
            raise ValueError(f"gemm_batch: {name} must be a list of matrices, a 2-D matrix shared by every "
                             f"item or a 3-D stack, got an array of shape {X.shape}")

        As, Bs = items("A", A), items("B", B)
        if len(As) != len(Bs) or (C is not None and len(C) != n):
            raise ValueError(f"gemm_batch: A, B and C must have the same number of items, got {len(As)}, "
                             f"{len(Bs)}" + (f" and {len(C)}" if C is not None else ""))
        out = []
        for i, (a, b) in enumerate(zip(As, Bs)):
            try:
                if C is None:
                    out.append(_gemm(a, b, alpha=alpha, trans_a=trans_a, trans_b=trans_b))
                else:
                    _gemm(a, b, C[i], alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
            except (ValueError, TypeError) as exc:
                # Named as the call the user made, with the item at fault.
                raise type(exc)(f"gemm_batch: item {i}: {str(exc).removeprefix('gemm: ')}") from None
        return out if C is None else C
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim not in (2, 3) or B.ndim not in (2, 3) or max(A.ndim, B.ndim) != 3:
        raise ValueError(f"gemm_batch: expected 3-D stacks, got shapes {A.shape} and {B.shape}")
    batch = A.shape[0] if A.ndim == 3 else B.shape[0]
    if A.ndim == 3 and B.ndim == 3 and A.shape[0] != B.shape[0]:
        raise ValueError(f"gemm_batch: batch sizes differ: {A.shape[0]} and {B.shape[0]}")
    a_item = A.shape[1:] if A.ndim == 3 else A.shape
    b_item = B.shape[1:] if B.ndim == 3 else B.shape
    M, K = (a_item[1], a_item[0]) if trans_a else a_item
    Kb, N = (b_item[1], b_item[0]) if trans_b else b_item
    if K != Kb:
        raise ValueError(f"gemm_batch: inner dimensions differ: op(A) is {M} x {K}, op(B) is {Kb} x {N}")
    if C is None:
        if beta != 0:
            raise ValueError("gemm_batch: beta needs an output C to scale")
        C = np.empty((batch, M, N), dtype=np.result_type(A, B))
    elif not isinstance(C, np.ndarray) or C.shape != (batch, M, N):
        raise ValueError(f"gemm_batch: C must be an array of shape {(batch, M, N)}")
    if _overlaps(A, C):
        A = np.array(A, order="C")
    if _overlaps(B, C):
        B = np.array(B, order="C")
    runtime = _state.runtime
    views = None
    if (runtime is not None and A.dtype in _SUPPORTED and A.dtype == B.dtype == C.dtype
            and C.flags.writeable):
        views = [_batch_view(X, batch) for X in (A, B, C)]
    if views is None or any(v is None for v in views):
        for i in range(batch):
            _gemm(A[i] if A.ndim == 3 else A, B[i] if B.ndim == 3 else B, C[i],
                  alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
        return C
    # specs.py is imported here, off the first-call path of gemm (issue 16).
    from ..specs import DTYPE_CODE

    (sa, (a_col, lda)), (sb, (b_col, ldb)), (sc, (c_col, ldc)) = views
    layout = 0 if c_col else 1
    # An operand stored the other way round from C is its own transpose there.
    ta = bool(trans_a) ^ (a_col != c_col)
    tb = bool(trans_b) ^ (b_col != c_col)
    rc = runtime.lib.at_gemm_batch_strided(
        DTYPE_CODE[A.dtype.name.replace('float', 'f')], layout, int(ta), int(tb), M, N, K, float(alpha),
        A.ctypes.data, lda, sa, B.ctypes.data, ldb, sb, float(beta), C.ctypes.data, ldc, sc, batch,
    )
    if rc != 0:
        message = runtime.lib.at_last_error().decode(errors="replace")
        raise MemoryError(message) if rc == -2 else RuntimeError(f"libautotune: {message}")
    return C


def set_num_threads(n: int) -> None:
    """Set the number of threads later products may use.

    Parameters
    ----------
    n : int
        Threads (at most the library's ``AT_MAX_THREADS``); ``n < 1`` goes back to
        ``$AUTOTUNE_NUM_THREADS``, else the online CPUs.  No effect without a library.

    Notes
    -----
    Process-wide, like ``openblas_set_num_threads``; ``threadpoolctl.threadpool_limits``
    sets the same count for a block.  Plans cached for another count are re-planned.
    """
    runtime = _state.runtime
    if runtime is not None:
        runtime.lib.at_set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads products may use (1 without a library).

    Returns
    -------
    int
        The count :func:`set_num_threads` set, else ``$AUTOTUNE_NUM_THREADS``, else
        the online CPUs.
    """
    runtime = _state.runtime
    return int(runtime.lib.at_get_num_threads()) if runtime is not None else 1


def clear_plan_cache() -> None:
    """Drop every cached plan (the library's shared cache and this thread's own).

    Other threads drop the plans they keep on their next product.  The cache is
    bounded in bytes anyway; this returns its memory at once, e.g. after a run of
    huge one-off shapes.  No effect without a library.
    """
    runtime = _state.runtime
    if runtime is not None:
        runtime.lib.at_plan_cache_clear()


def cache_stats() -> tuple[int, int]:
    """The plan cache's counters since the library was loaded.

    Returns
    -------
    created : int
        Plans the tiler made (cache misses).
    hits : int
        Products that found their plan in the cache.  ``(0, 0)`` without a library.
    """
    runtime = _state.runtime
    if runtime is None:
        return (0, 0)
    created, hits = ctypes.c_int64(), ctypes.c_int64()
    runtime.lib.at_plan_cache_stats(ctypes.byref(created), ctypes.byref(hits))
    return created.value, hits.value


def _matmul_error(a: np.ndarray, b: np.ndarray) -> ValueError:
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    return ValueError(
        "matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
        f"(n?,k),(k,m?)->(n?,m?) (size {k_b} is different from {k_a})")


def matmul(a: ArrayLike, b: ArrayLike, out: np.ndarray | None = None) -> np.ndarray:
    """Matrix product of two arrays with :func:`numpy.matmul`'s semantics, through libautotune.

    Parameters
    ----------
    a, b : array_like
        Operands, at least 1-D.  A 1-D ``a`` is a row vector and a 1-D ``b`` a
        column vector, and the added dimension is removed from the result; arrays
        of more than two dimensions are stacks of matrices in their last two
        dimensions, whose leading dimensions broadcast as numpy's do.  Any strides
        (transposed views, slices) are accepted.
    out : ndarray, optional
        Where to write the result.  Its shape must be the result's; its dtype must
        be one the result casts to under ``same_kind`` rules.  It may overlap ``a``
        or ``b``: the product is then computed into a temporary first, as numpy does.

    Returns
    -------
    ndarray
        The product, ``out`` when it was given.

    Raises
    ------
    ValueError
        If an operand is 0-D, the core dimensions do not match, the stacks do not
        broadcast, or ``out`` has the wrong shape.
    TypeError
        If an operand is not numeric.

    Notes
    -----
    float32 and float64 results (including float32 x float64, which computes in
    float64 as numpy's type promotion says) run in libautotune's kernels: one
    :func:`gemm` for a single product, :func:`gemm_batch` calls for stacks (one
    per run of items with one batch stride; broadcast stacks are never copied, so
    memory stays numpy's: the result, and a copy of an operand whose matrices have
    no unit stride).  ``np.matrix`` operands give an ``np.matrix``, as numpy's.
    Other result dtypes (integers, bool, complex, float16) are computed by
    :func:`numpy.matmul` itself, which is exact for integers; so is everything
    when no library is installed (with one warning per process).

    Examples
    --------
    >>> import numpy as np, autotune
    >>> a = np.ones((10, 3, 4), np.float32); b = np.ones((4, 5), np.float32)
    >>> autotune.matmul(a, b).shape
    (10, 3, 5)
    >>> float(autotune.matmul(np.ones(4), np.ones(4)))
    4.0
    """
    # (autotune.matmul is the extension's entry when it is loaded: it computes one
    # product of two float matrices of one dtype itself, and hands every other call
    # here.  The checks below cost 2.8 us a call, four times an 8x8 product.)
    # np.matmul wraps its result in np.matrix when an operand is one (its
    # __array_wrap__); so does this, for a drop-in.  Other subclasses get an ndarray.
    matrix = out is None and (isinstance(a, np.matrix) or isinstance(b, np.matrix))
    a, b = np.asarray(a), np.asarray(b)
    if matrix:
        return np.asmatrix(matmul(a, b))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: Input operand {0 if a.ndim == 0 else 1} does not have enough "
                         "dimensions (has 0, gufunc core with signature (n?,k),(k,m?)->(n?,m?) "
                         "requires 1)")
    for i, X in enumerate((a, b)):
        if not _numeric(X.dtype):
            raise TypeError(f"matmul: operand {i} has dtype {X.dtype}, which is not numeric")
    dtype = np.result_type(a, b)
    if out is not None and not isinstance(out, np.ndarray):
        raise TypeError(f"matmul: out must be a numpy array, got {type(out).__name__}")
    if dtype not in _SUPPORTED:
        return np.matmul(a, b, out=out)
    A = a[None, :] if a.ndim == 1 else a
    B = b[:, None] if b.ndim == 1 else b
    if A.shape[-1] != B.shape[-2]:
        raise _matmul_error(a, b)
    try:
        stack = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: the stacks of shapes {a.shape} and {b.shape} do not "
                         "broadcast") from None
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    shape = stack + ((M,) if a.ndim > 1 else ()) + ((N,) if b.ndim > 1 else ())
    if out is not None:
        if out.shape != shape:
            raise ValueError(f"matmul: out has shape {out.shape}, but the result has shape {shape}")
        if not out.flags.writeable:
            raise ValueError("matmul: out is read-only")
        if not np.can_cast(dtype, out.dtype, "same_kind"):
            raise TypeError(f"matmul: cannot cast the result from {dtype} to out's {out.dtype} "
                            "with casting rule 'same_kind'")
    A, B = A.astype(dtype, copy=False), B.astype(dtype, copy=False)
    # The product goes straight into out when out has the result's dtype and
    # shares no memory with an operand; otherwise into a temporary, copied once.
    direct = (out is not None and out.dtype == dtype and not np.may_share_memory(out, a)
              and not np.may_share_memory(out, b))
    result = out if direct else np.empty(shape, dtype)
    full = result.reshape(stack + (M, N)) if result.ndim != len(stack) + 2 else result
    if full.size:
        _product(A, B, full, stack, M, K, N)
    if out is not None:
        if not direct:
            np.copyto(out, result, casting="same_kind")
        return out  # itself, as numpy returns it: a 0-D out for vector . vector stays an array
    return result[()] if not shape else result  # a scalar for vector . vector, as numpy


def _unit_item(X: np.ndarray) -> bool:
    """Whether each matrix of X (its last two dimensions) has a unit stride, as the
    batch kernels need; other operands are copied once, at their own size."""
    r, c = X.shape[-2:]
    sr, sc = X.strides[-2:]
    return r <= 1 or c <= 1 or sr == X.itemsize or sc == X.itemsize


def _runs(stack: tuple[int, ...], views: Sequence[np.ndarray]) -> tuple[int, list[int]]:
    """How many trailing stack dimensions merge into one batch stride in every view
    (the items of one gemm_batch call), and that stride per view.  A broadcast
    dimension has stride 0 and merges with a broadcast run, so (n, 1) x (1, n)
    stacks run n calls of n items each; dimensions of size 1 merge with anything."""
    t, run, inner = 0, 1, None
    for d in range(len(stack) - 1, -1, -1):
        if stack[d] != 1:
            strides = [v.strides[d] for v in views]
            if inner is None:
                inner = strides
            elif any(s != i * run for s, i in zip(strides, inner)):
                break
            run *= stack[d]
        t += 1
    return t, inner if inner is not None else [0] * len(views)


def _product(A: np.ndarray, B: np.ndarray, R: np.ndarray, stack: tuple[int, ...], M: int, K: int,
             N: int) -> None:
    """R[...] = A @ B for broadcast stacks A, B and a result R of shape stack + (M, N).

    Nothing is materialised: broadcast stacks are zero-stride views, and the stack
    is walked as runs of items one gemm_batch call takes (one batch stride per
    operand), an outer loop over what does not merge.  Memory beyond the result is
    at most a copy of an operand whose matrices have no unit stride."""
    from . import gemm as _gemm  # the entry bound to the current library

    if K == 0:
        R[...] = 0
        return
    if not stack:
        _gemm(A, B, R)
        return
    A = A if _unit_item(A) else np.ascontiguousarray(A)
    B = B if _unit_item(B) else np.ascontiguousarray(B)
    Av = np.broadcast_to(A, stack + (M, K))
    Bv = np.broadcast_to(B, stack + (K, N))
    t, (sa, sb, sr) = _runs(stack, (Av, Bv, R))
    run = int(np.prod(stack[len(stack) - t:]))
    as_strided = np.lib.stride_tricks.as_strided

    def items(X: np.ndarray, index: tuple[int, ...], stride: int, writeable: bool) -> np.ndarray:
        base = X[index]
        if stride == 0 and not writeable:
            return base[(0,) * t]  # one matrix shared by the run: gemm_batch's 2-D operand
        return as_strided(base, (run,) + base.shape[-2:], (stride,) + base.strides[-2:],
                          writeable=writeable)

    for index in np.ndindex(*stack[:len(stack) - t]):
        a, b, r = items(Av, index, sa, False), items(Bv, index, sb, False), items(R, index, sr, True)
        if a.ndim == b.ndim == 2:  # every item is the same product: compute it once
            _gemm(a, b, r[0])
            r[1:] = r[0]
        else:
            gemm_batch(a, b, r)
