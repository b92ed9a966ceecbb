"""qmatmul: f32 activations x quantised weights through libautotune's ``at_qmatmul_f32``.

The weights come from :func:`autotune.quant.quantize_weights` (their packed
form is made once, then); A is quantised to int8 per row and block in C at each
call.  Without an installed library the numpy reference computes the same
arithmetic (:func:`autotune.quant.reference_qmatmul`) and a warning says why,
as ``gemm`` falls back to numpy.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..quant import SME2_SVLS, QuantizationError, QuantizedWeights, reference_qmatmul

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_P = ctypes.c_void_p
_I64 = ctypes.c_int64

#: Status codes of autotune.h.
_STATUS = {-1: "AT_EINVAL", -2: "AT_ENOMEM", -3: "AT_ENOKERNEL", -4: "AT_ENOCPU"}


class at_qweights(ctypes.Structure):
    """autotune.h's at_qweights."""

    _fields_ = [("bits", ctypes.c_int32), ("symmetric", ctypes.c_int32), ("k", _I64), ("n", _I64),
                ("block", _I64), ("codes", _P), ("scales", _P), ("zeros", _P),
                ("sme2_codes", _P), ("sme2_scales", _P), ("sme2_svl", _I64)]


#: The libraries whose quantised entry points are declared (declaring them took 1.9 us a call).
_declared: weakref.WeakKeyDictionary[ctypes.CDLL, bool] = weakref.WeakKeyDictionary()


def prototypes(lib: ctypes.CDLL) -> bool:
    """Declare the quantised entry points, once per library; False for a library built
    before they existed."""
    known = _declared.get(lib)
    if known is None:
        known = _declared[lib] = _declare(lib)
    return known


def _declare(lib: ctypes.CDLL) -> bool:
    if not hasattr(lib, "at_qmatmul_f32"):
        return False
    args = [_I64, _P, _I64, ctypes.POINTER(at_qweights), _P, _P, _P, _I64]
    lib.at_qmatmul_f32.restype = ctypes.c_int
    lib.at_qmatmul_f32.argtypes = args
    lib.at_qmatmul_f32_using.restype = ctypes.c_int
    lib.at_qmatmul_f32_using.argtypes = [ctypes.c_char_p, *args]
    lib.at_qkernel_name.restype = ctypes.c_char_p
    lib.at_qkernel_name.argtypes = [ctypes.c_int]
    if hasattr(lib, "at_qsme2_svl"):
        lib.at_qsme2_svl.restype = ctypes.c_int
        lib.at_qsme2_svl.argtypes = []
    if hasattr(lib, "at_qthreads_set"):
        lib.at_qthreads_set.restype = ctypes.c_int
        lib.at_qthreads_set.argtypes = [ctypes.c_double]
        lib.at_qthreads_get.restype = ctypes.c_double
        lib.at_qthreads_get.argtypes = []
    lib.at_last_error.restype = ctypes.c_char_p
    return True


def kernel_names(lib: ctypes.CDLL) -> list[str]:
    """The library's quantised kernels, preferred first."""
    names = []
    while (name := lib.at_qkernel_name(len(names))) is not None:
        names.append(name.decode())
    return names


def sme2_svl(lib: ctypes.CDLL) -> int:
    """The SVL in bits for which ``lib`` would use the weights' SME2 form on this CPU and
    thread (``at_qsme2_svl``); 0 without SME2 quantised kernels, an SME2 CPU, or the entry point."""
    return int(lib.at_qsme2_svl()) if hasattr(lib, "at_qsme2_svl") else 0


def weights_struct(w: QuantizedWeights, svl_bits: int = 0) -> at_qweights:
    """The C view of ``w``'s packed arrays (``w`` must outlive it); with ``svl_bits``
    (a library's :func:`sme2_svl`) also their SME2 form for it, packed on first use
    and kept by ``w``.  Made once per SVL and kept by ``w`` too (2.2 us a call)."""
    views = w._runtime_views
    ws = views.get(svl_bits)
    if ws is None:
        ws = views.setdefault(svl_bits, _weights_struct(w, svl_bits))
    return ws


def _weights_struct(w: QuantizedWeights, svl_bits: int) -> at_qweights:
    p = w.packed
    ws = at_qweights(w.bits, int(w.symmetric), w.k, w.n, w.block, p.codes.ctypes.data, p.scales.ctypes.data,
                     p.zeros.ctypes.data if p.zeros is not None else None)
    if svl_bits in SME2_SVLS:
        form = w.sme2(svl_bits)
        ws.sme2_codes, ws.sme2_scales, ws.sme2_svl = form.codes.ctypes.data, form.scales.ctypes.data, svl_bits
    return ws


def check_operands(A: Any, w: Any, bias: Any, clamp: Any) -> tuple[np.ndarray, np.ndarray | None,
                                                                     np.ndarray | None]:
    """(A as a C-contiguous float32 matrix, bias as float32 [N], clamp as float32 [2]) or a clear error."""
    if not isinstance(w, QuantizedWeights):
        raise TypeError(f"qmatmul: w must be QuantizedWeights from autotune.quantize_weights, not {type(w).__name__}")
    A = np.asarray(A)
    if A.dtype != np.float32:
        raise TypeError(f"qmatmul: A must be float32 (the activations are quantised from f32), not {A.dtype}: "
                        "convert with A.astype(np.float32)")
    if A.ndim != 2:
        raise ValueError(f"qmatmul: A must be 2-D (M x K), not an array of shape {A.shape}")
    if A.shape[1] != w.k:
        raise ValueError(f"qmatmul: A has K={A.shape[1]} columns but the weights were quantised with K={w.k}")
    b = None
    if bias is not None:
        b = np.ascontiguousarray(bias, dtype=np.float32)
        if b.shape != (w.n,):
            raise ValueError(f"qmatmul: bias must have shape ({w.n},), one value per column of C, not {b.shape}")
    c = None
    if clamp is not None:
        c = np.ascontiguousarray(clamp, dtype=np.float32)  # a strided view would be read past its values
        if c.shape != (2,) or not c[0] <= c[1]:
            raise ValueError(f"qmatmul: clamp must be (low, high) with low <= high, not {clamp!r}")
    return np.ascontiguousarray(A), b, c


def call(lib: ctypes.CDLL, A: np.ndarray, w: QuantizedWeights, bias: np.ndarray | None,
         clamp: np.ndarray | None, kernel: str | None = None, fast: Any = None) -> np.ndarray:
    """C = A x W through ``lib`` (``kernel``: force one, for validation and benchmarks),
    by the library's extension ``fast`` when given (one C call), else through ctypes."""
    ws = weights_struct(w, sme2_svl(lib))
    if fast is not None and kernel is None:
        C = fast._qmatmul(A, ctypes.addressof(ws), w.n, bias, clamp)
        if type(C) is int:
            raise QuantizationError(f"qmatmul: {_STATUS.get(C, C)}: {lib.at_last_error().decode()}")
        return C
    C = np.empty((A.shape[0], w.n), np.float32)
    args = (A.shape[0], A.ctypes.data, A.shape[1], ctypes.byref(ws), bias.ctypes.data if bias is not None else None,
            clamp.ctypes.data if clamp is not None else None, C.ctypes.data, w.n)
    status = lib.at_qmatmul_f32(*args) if kernel is None else lib.at_qmatmul_f32_using(kernel.encode(), *args)
    if status != 0:
        raise QuantizationError(f"qmatmul: {_STATUS.get(status, status)}: {lib.at_last_error().decode()}")
    return C


def qmatmul(A: ArrayLike, w: QuantizedWeights, bias: ArrayLike | None = None,
            clamp: tuple[float, float] | None = None) -> np.ndarray:
    """C[M, N] (float32) = A[M, K] (float32) x W, W quantised by :func:`autotune.quantize_weights`.

    A is quantised to int8 per row and block at the call; ``bias`` (N values) is
    added and ``clamp = (low, high)`` applied to C.  A NaN or Inf in A makes its
    row of C NaN.  Results equal :func:`autotune.quant.reference_qmatmul` within
    the rounding of the f32 scaling step (:func:`autotune.quant.scaling_error_bound`).
    """
    from . import api

    A2, b, c = check_operands(A, w, bias, clamp)
    runtime = api._state.runtime
    lib = runtime.lib if runtime is not None else None
    if lib is None or not prototypes(lib):
        reason = api._state.reason if lib is None else f"{runtime.path} predates the quantised entry points"
        api._warn_once(f"qnolib-{reason}", f"autotune: {reason}; numpy computes qmatmul instead")
        return reference_qmatmul(A2, w, b, None if c is None else (float(c[0]), float(c[1])))
    return call(lib, A2, w, b, c, fast=runtime.fast)
