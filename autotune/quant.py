"""Quantised weights: the formats of W and the arithmetic every quantised kernel reproduces.

The operation is ``C[M, N] (f32) = A[M, K] (f32) x W[K, N]`` where W is stored as
small integers with scales, and A is quantised to int8 when the product is made:

* **4-bit weights** in blocks of ``block`` rows of K (32 by default), one scale per
  block and column.  Symmetric: ``w ~ scale * q`` with ``q`` in [-7, 7] and
  ``scale = max|w| / 7``.  Asymmetric: ``w ~ scale * (u - z)`` with ``u`` in
  [0, 15], ``scale = (max - min) / 15`` over a range that includes 0 (so 0 is
  exact) and a zero point ``z`` in [0, 15].  Both are stored the same way: one
  unsigned nibble ``u`` per weight, the symmetric format with ``z = 8``.
* **8-bit weights**, one scale per column (per channel): ``q`` in [-127, 127],
  ``scale = max|w| / 127``.
* **Activations**, per row and block of ``block`` values of K: ``a ~ sa * qa`` with
  ``qa`` int8 in [-127, 127] and ``sa = max|a| / 127``.

``C[m, n] = sum over blocks b of float(isum[m, b, n]) * (sa[m, b] * sw[b, n])`` where
``isum`` is the exact integer dot product of the block's codes; quantised kernels
accumulate ``isum`` in int32 (it is bounded by ``block * 127 * 15``) and differ from
:func:`reference_qmatmul` only by the rounding of that f32 scaling step.

Padding: K is padded to a multiple of ``block`` with zero weights (codes equal to
the zero point) and zero activations, so the padding adds nothing.  A block of
zeros gets scale 0.  Weights must be finite: NaN or Inf cannot be quantised and
are refused.  A non-finite activation gives its block the scale NaN, so its row of
C is NaN, as a BLAS passes a NaN of A through to its row of C.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .files import atomic_writer
# The formats' numbers are declared once, for Python and C, in autotune.qformat.
from .qformat import INT8_MAX, MAX_BLOCK, PAD_COLUMNS, PANEL, SUB, SYMMETRIC_ZERO_POINT

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

#: What the arrays of a saved QuantizedWeights are called (see QuantizedWeights.arrays).
FORMAT_VERSION = 1


class QuantizationError(ValueError):
    """Weights or activations that the quantised formats cannot hold."""


def padded_k(k: int, block: int) -> int:
    """K rounded up to whole blocks."""
    return -(-k // block) * block


@dataclass(frozen=True, eq=False)
class QuantizedWeights:
    """W[K, N] quantised, column-major by block: column n's codes are contiguous.

    ``codes``: 4 bits: uint8 [N, Kp // 2], two weights per byte, the even k in the
    low nibble; 8 bits: int8 [N, Kp].  ``scales``: [N, Kp // block] for 4 bits,
    [N, 1] for 8 bits, float32 or float16.  ``zero_points``: uint8 [N, Kp // block]
    for asymmetric 4-bit weights, else None.  ``k`` is W's real K, before padding.
    """

    codes: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    k: int
    bits: int
    block: int

    def __post_init__(self) -> None:
        # The packed copies the kernels read are made once from these arrays; an
        # array changed afterwards would make qmatmul disagree with
        # reference_qmatmul and save (issue 26), so nobody may write them.
        for name in ("codes", "scales", "zero_points"):
            array = getattr(self, name)
            if array is not None:
                object.__setattr__(self, name, _immutable(array))
        _check_format(self)

    @property
    def n(self) -> int:
        return self.codes.shape[0]

    @property
    def padded_k(self) -> int:
        return padded_k(self.k, self.block)

    @property
    def blocks(self) -> int:
        return self.padded_k // self.block

    @property
    def symmetric(self) -> bool:
        return self.zero_points is None

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of the W it stands for."""
        return (self.k, self.n)

    @cached_property
    def packed(self) -> PackedWeights:
        """The weights in the kernels' qpanel8 format (made once, when first asked;
        :func:`quantize_weights` and :meth:`load` ask at once)."""
        return pack_panels(self)

    @cached_property
    def _sme2_forms(self) -> dict[int, Sme2Weights]:
        return {}

    @cached_property
    def _runtime_views(self) -> dict[int, Any]:
        """The C views of the packed arrays the runtime made for these weights, by SVL
        (:func:`autotune.runtime.qapi.weights_struct`): they point into arrays these
        weights own and never change, so one view serves every call."""
        return {}

    def sme2(self, svl_bits: int) -> Sme2Weights:
        """The weights in the SME2 kernels' format for ``svl_bits`` (:func:`pack_sme2`), made
        once on first use (by a library that reports an SME2 CPU) and kept with the weights;
        not saved: it is a pure function of the codes."""
        forms = self._sme2_forms
        form = forms.get(svl_bits)
        if form is None:
            form = forms.setdefault(svl_bits, pack_sme2(self, svl_bits))
        return form

    def signed_codes(self) -> np.ndarray:
        """int16 [N, Kp]: each weight's code minus its zero point, ``w ~ scale * code``."""
        if self.bits == 8:
            return self.codes.astype(np.int16)
        nibbles = np.empty((self.n, self.padded_k), np.int16)
        nibbles[:, 0::2] = self.codes & 0x0F
        nibbles[:, 1::2] = self.codes >> 4
        zero = (np.full((self.n, self.blocks), SYMMETRIC_ZERO_POINT, np.int16) if self.zero_points is None
                else self.zero_points.astype(np.int16))
        return nibbles - np.repeat(zero, self.block, axis=1)

    def block_scales(self) -> np.ndarray:
        """float32 [N, Kp // block]: the scale of every block (8 bits: the column's)."""
        scales = self.scales.astype(np.float32)
        return np.repeat(scales, self.blocks, axis=1) if self.bits == 8 else scales

    def dequantize(self) -> np.ndarray:
        """float32 [K, N]: the weights the codes stand for."""
        values = self.signed_codes().astype(np.float32) * np.repeat(self.block_scales(), self.block, axis=1)
        return np.ascontiguousarray(values[:, :self.k].T)

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything, as numpy arrays: ``np.savez(path, **w.arrays())`` saves it."""
        arrays = {"format_version": np.int64(FORMAT_VERSION), "k": np.int64(self.k),
                  "bits": np.int64(self.bits), "block": np.int64(self.block),
                  "codes": self.codes, "scales": self.scales}
        if self.zero_points is not None:
            arrays["zero_points"] = self.zero_points
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> QuantizedWeights:
        """The weights :meth:`arrays` gave (``np.load`` of a saved file works as is).

        The packed form is made again from the codes (it is a pure function of them).
        """
        try:
            version = int(arrays["format_version"])
            if version != FORMAT_VERSION:
                raise QuantizationError(f"quantised weights of format {version}; this autotune reads format "
                                        f"{FORMAT_VERSION}: quantise the weights again")
            return _packed_now(cls(codes=np.asarray(arrays["codes"]), scales=np.asarray(arrays["scales"]),
                       zero_points=np.asarray(arrays["zero_points"]) if "zero_points" in arrays else None,
                       k=int(arrays["k"]), bits=int(arrays["bits"]), block=int(arrays["block"])))
        except KeyError as exc:
            raise QuantizationError(f"not quantised weights: no {exc} array") from exc

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write an ``.npz`` file atomically (an interrupted save leaves no half file)."""
        target = Path(path)
        if target.suffix != ".npz":
            target = target.with_name(target.name + ".npz")  # what np.savez would have named it
        # Through a link to its target, never over a FIFO or device, keeping the mode.
        with atomic_writer(target, "wb") as out:
            np.savez(out, **self.arrays())
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> QuantizedWeights:
        with np.load(path, allow_pickle=False) as arrays:
            # Fresh arrays no one else holds: frozen where they are, not copied.
            return cls.from_arrays({name: _frozen_in_place(arrays[name]) for name in arrays.files})


@dataclass(frozen=True, eq=False)
class PackedWeights:
    """W in the qpanel8 format the kernels read (kernels_src/runtime/at_qkernel.h).

    Columns padded to a multiple of 32 with zero scales, then cut into panels of 8.
    ``codes`` uint8 [panels, Kp/32 * bytes]: per sub-block of 32 rows of K, 4 bits:
    4 vectors of 32 bytes, byte ``4c + j`` of vector ``v`` holding column c's
    nibbles for ``k = 8v + j`` (low) and ``8v + 4 + j`` (high); 8 bits: 8 vectors,
    byte ``4c + j`` of vector ``g`` holding column c's code for ``k = 4g + j``.
    ``scales`` float32 [panels, blocks * 8] (8 bits: the column's scale in every
    block); ``zeros`` the same for asymmetric 4-bit zero points, else None.
    """

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None

    def __post_init__(self) -> None:
        # What the kernels read: made by pack_panels for these weights alone.
        for array in (self.codes, self.scales, self.zeros):
            if array is not None:
                array.setflags(write=False)

    @property
    def panels(self) -> int:
        return self.codes.shape[0]


def _aligned(a: np.ndarray, alignment: int = 64) -> np.ndarray:
    """A C-contiguous copy of ``a`` (any strides: the one copy a transposed view needs)
    starting on an ``alignment``-byte boundary.

    numpy promises 16 bytes: it placed the codes of a 4096 x 4096 W 48 bytes into a
    line, where half the kernels' 32-byte loads straddle two lines: 3-7% of a
    64 x 4096 x 4096 product on a Zen 3 (docs/quantised.md, "Fourth round")."""
    raw = np.empty(a.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def pack_panels(w: QuantizedWeights) -> PackedWeights:
    """``w`` in the qpanel8 format of :class:`PackedWeights`."""
    n, kp, blocks = w.n, w.padded_k, w.blocks
    n_pad = -(-n // PAD_COLUMNS) * PAD_COLUMNS
    panels, subs = n_pad // PANEL, kp // SUB
    scales = np.zeros((n_pad, blocks), np.float32)
    scales[:n] = w.block_scales()
    packed_scales = _aligned(scales.reshape(panels, PANEL, blocks).transpose(0, 2, 1)).reshape(panels, -1)
    if w.bits == 8:
        codes = np.zeros((n_pad, kp), np.int8)
        codes[:n] = w.codes
        # [panel, c, sub, g, j] -> [panel, sub, g, c, j]
        grid = codes.reshape(panels, PANEL, subs, 8, 4).transpose(0, 2, 3, 1, 4)
        return PackedWeights(_aligned(grid.view(np.uint8)).reshape(panels, -1), packed_scales, None)
    nibbles = np.full((n_pad, kp), SYMMETRIC_ZERO_POINT, np.uint8)
    nibbles[:n, 0::2] = w.codes & 0x0F
    nibbles[:n, 1::2] = w.codes >> 4
    # [panel, c, sub, v, half, j] -> low/high halves of [panel, sub, v, c, j]
    grid = nibbles.reshape(panels, PANEL, subs, 4, 2, 4).transpose(0, 2, 3, 4, 1, 5)
    codes = _aligned((grid[:, :, :, 0] | (grid[:, :, :, 1] << 4)).astype(np.uint8, copy=False)).reshape(panels, -1)
    zeros = None
    if w.zero_points is not None:
        z = np.full((n_pad, blocks), SYMMETRIC_ZERO_POINT, np.float32)
        z[:n] = w.zero_points
        zeros = _aligned(z.reshape(panels, PANEL, blocks).transpose(0, 2, 1)).reshape(panels, -1)
    return PackedWeights(codes, packed_scales, zeros)


#: Streaming vector lengths (bits) the SME2 format is made for: those of the Arm library.
SME2_SVLS = (128, 256, 512, 1024, 2048)


@dataclass(frozen=True, eq=False)
class Sme2Weights:
    """W in the format of the SME2 kernels (autotune/codegen/quant_sme2.py).

    Made for one streaming vector length, ``svl_bits``: a kernel's block is 1VL x 4VL
    (VL = svl_bits / 32 int32 lanes), so a panel holds ``4 * VL`` columns (padded
    with the zero code and scale 0).  ``codes`` uint8 [panels, Kp / 4 * 8 * VL]: per
    step of 4 rows of K (``k = 4s .. 4s + 3``) two vectors of ``4 * VL`` bytes, in
    which column c's four codes are the nibbles ``4c + t`` (nibble i is byte i // 2,
    the low half for even i).  That is what ``luti4 {z.b-z.b}, zt0, zn[0]`` reads:
    it expands the step's first vector into columns 0 .. 2VL-1 and the second into
    2VL .. 4VL-1, each column's four bytes together, as ``smopa``/``sdot`` take
    them.  ``scales`` float32 [panels, blocks, 4 * VL]; for asymmetric weights
    [panels, blocks, 2, 4 * VL]: the scales, then the zero points as floats (the
    kernel loads both with one pointer).  Padded columns hold code 8, zero point 8.

    8-bit weights (``bits`` 8): ``codes`` [panels, Kp / 4 * 16 * VL], per step of 4 rows
    of K four vectors of ``4 * VL`` bytes, column c's four int8 codes at bytes
    ``4c .. 4c + 3`` of the step (``smopa``/``sdot`` read them as loaded); ``scales``
    float32 [panels, 4 * VL], the column's one scale (the kernels load it once per
    panel, not per block).  Padded columns hold code 0 and scale 0.
    """

    codes: np.ndarray
    scales: np.ndarray
    svl_bits: int
    n: int
    k: int
    block: int
    symmetric: bool
    bits: int = 4

    def __post_init__(self) -> None:
        self.codes.setflags(write=False)
        self.scales.setflags(write=False)

    @property
    def panel_columns(self) -> int:
        return 4 * (self.svl_bits // 32)

    @property
    def panels(self) -> int:
        return self.codes.shape[0]


def pack_sme2(w: QuantizedWeights, svl_bits: int) -> Sme2Weights:
    """``w`` in the SME2 format of :class:`Sme2Weights` for ``svl_bits``.

    Parameterised by the SVL, not padded to the widest one: a panel is the kernel's
    4VL columns, so at SVL 128 a 16-column W is not padded to 256 columns (the panel
    of SVL 2048).  A library is built for the SVL of its CPU, as the float kernels are.
    """
    if svl_bits not in SME2_SVLS:
        raise QuantizationError(f"svl_bits must be one of {SME2_SVLS}, not {svl_bits!r}")
    width = 4 * (svl_bits // 32)
    n, kp, blocks = w.n, w.padded_k, w.blocks
    panels = -(-n // width)
    if w.bits == 8:
        codes8 = np.zeros((panels * width, kp), np.int8)
        codes8[:n] = w.codes
        # [panel, c, step, t] -> [panel, step, c, t]: the step's 4VL columns of 4 codes.
        grid8 = codes8.reshape(panels, width, kp // 4, 4).transpose(0, 2, 1, 3)
        scales8 = np.zeros(panels * width, np.float32)
        scales8[:n] = w.scales[:, 0]
        return Sme2Weights(np.ascontiguousarray(grid8).view(np.uint8).reshape(panels, -1),
                           scales8.reshape(panels, width), svl_bits, n, w.k, w.block, True, 8)
    nibbles = np.full((panels * width, kp), SYMMETRIC_ZERO_POINT, np.uint8)
    nibbles[:n, 0::2] = w.codes & 0x0F
    nibbles[:n, 1::2] = w.codes >> 4
    # [panel, c, step, t] -> [panel, step, c, t]: nibble 4c + t of the step's 8VL.
    grid = nibbles.reshape(panels, width, kp // 4, 4).transpose(0, 2, 1, 3).reshape(panels, kp // 4, width * 2, 2)
    codes = (grid[..., 0] | (grid[..., 1] << 4)).astype(np.uint8).reshape(panels, -1)
    scales = np.zeros((panels * width, blocks), np.float32)
    scales[:n] = w.block_scales()
    scales = scales.reshape(panels, width, blocks).transpose(0, 2, 1)
    if w.zero_points is not None:
        zeros = np.full((panels * width, blocks), SYMMETRIC_ZERO_POINT, np.float32)
        zeros[:n] = w.zero_points
        scales = np.stack([scales, zeros.reshape(panels, width, blocks).transpose(0, 2, 1)], axis=2)
    return Sme2Weights(np.ascontiguousarray(codes), np.ascontiguousarray(scales), svl_bits, n, w.k, w.block,
                       w.symmetric)


def _frozen_in_place(array: np.ndarray) -> np.ndarray:
    """A new array of this module's own, made read-only without a copy."""
    array.setflags(write=False)
    return array


def _immutable(array: Any) -> np.ndarray:
    """``array`` as one nobody can write: itself when it is read-only and owns its
    data, else a read-only copy (a view, or the caller's writeable array, could
    still be changed through its owner)."""
    array = np.asarray(array)
    if array.flags.writeable or array.base is not None:
        array = array.copy()
        array.setflags(write=False)
    return array


def _packed_now(w: QuantizedWeights) -> QuantizedWeights:
    """``w`` with its packed form made: packing belongs to quantising, not to the first product."""
    _ = w.packed
    return w


def _check_format(w: QuantizedWeights) -> None:
    """Refuse a record whose arrays do not fit together: kernels index them blindly."""
    if w.bits not in (4, 8):
        raise QuantizationError(f"bits must be 4 or 8, not {w.bits}")
    _check_block(w.block)
    if w.k < 1:
        raise QuantizationError(f"K must be at least 1, not {w.k}")
    if w.codes.ndim != 2 or w.codes.shape[0] < 1:
        raise QuantizationError(f"codes must be a 2-D array with a row per column of W, not {w.codes.shape}")
    n, kp, blocks = w.codes.shape[0], padded_k(w.k, w.block), padded_k(w.k, w.block) // w.block
    expect = {
        "codes": (np.uint8 if w.bits == 4 else np.int8, (n, kp // 2 if w.bits == 4 else kp)),
        "scales": (None, (n, blocks if w.bits == 4 else 1)),
    }
    if w.zero_points is not None:
        if w.bits != 4:
            raise QuantizationError("zero points belong to asymmetric 4-bit weights only")
        expect["zero_points"] = (np.uint8, (n, blocks))
    for name, (dtype, shape) in expect.items():
        array = getattr(w, name)
        if array.shape != shape:
            raise QuantizationError(f"{name} has shape {array.shape}; {w.bits}-bit weights of K={w.k}, "
                                    f"N={n}, block {w.block} need {shape}")
        if dtype is not None and array.dtype != dtype:
            raise QuantizationError(f"{name} must be {np.dtype(dtype).name}, not {array.dtype}")
    if w.scales.dtype not in (np.float32, np.float16):
        raise QuantizationError(f"scales must be float32 or float16, not {w.scales.dtype}")
    if not (np.isfinite(w.scales).all() and (w.scales >= 0).all()):
        raise QuantizationError("scales must be finite and non-negative")
    if w.bits == 8 and (w.codes == -128).any():
        raise QuantizationError("8-bit codes are symmetric, in [-127, 127]")
    if w.zero_points is not None and (w.zero_points > 15).any():
        raise QuantizationError("4-bit zero points are in [0, 15]")


def _check_block(block: int) -> None:
    if not (isinstance(block, (int, np.integer)) and 32 <= block <= MAX_BLOCK and block % 32 == 0):
        raise QuantizationError(f"block must be a multiple of 32 between 32 and {MAX_BLOCK}, not {block!r}")


def _as_matrix(name: str, X: ArrayLike) -> np.ndarray:
    array = np.asarray(X)
    if array.ndim != 2:
        raise QuantizationError(f"{name} must be a 2-D array, not {array.ndim}-D (shape {array.shape})")
    if array.dtype.kind not in "fiu":
        raise QuantizationError(f"{name} must hold real numbers, not {array.dtype}")
    return array


def _scaled_codes(values: np.ndarray, scale: np.ndarray, low: int, high: int) -> np.ndarray:
    """round(values / scale) clamped to [low, high]; 0 where the scale is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(scale > 0, values / np.where(scale > 0, scale, 1), 0)
    return np.clip(np.rint(ratio), low, high)


def quantize_weights(W: ArrayLike, bits: int = 4, block: int = 32, symmetric: bool = True,
                     scale_dtype: Any = np.float32) -> QuantizedWeights:
    """Quantise W[K, N] for :func:`reference_qmatmul` and the quantised kernels.

    ``bits=4``: blocks of ``block`` rows of K, one scale per block and column
    (``symmetric=False`` adds a zero point per block).  ``bits=8``: one scale per
    column, symmetric.  ``scale_dtype``: float32 or float16.  Each weight is off by
    at most half its block's scale.
    """
    W = _as_matrix("W", W)
    if bits not in (4, 8):
        raise QuantizationError(f"bits must be 4 or 8, not {bits!r}")
    _check_block(block)
    if bits == 8 and not symmetric:
        raise QuantizationError("8-bit weights are symmetric (one scale per column, no zero point)")
    scale_dtype = np.dtype(scale_dtype)
    if scale_dtype not in (np.float32, np.float16):
        raise QuantizationError(f"scale_dtype must be float32 or float16, not {scale_dtype}")
    k, n = W.shape
    if k == 0 or n == 0:
        raise QuantizationError(f"W must have at least one row and one column, not shape {W.shape}")
    values = W.astype(np.float64)
    if not np.isfinite(values).all():
        raise QuantizationError("W holds NaN or Inf: non-finite weights cannot be quantised")
    kp = padded_k(k, block)
    columns = np.zeros((n, kp))
    columns[:, :k] = values.T
    blocks = columns.reshape(n, kp // block, block)

    def stored(scale: np.ndarray) -> np.ndarray:
        # Codes are computed with the scale as stored, so dequantising reproduces them.
        with np.errstate(over="ignore"):
            kept = scale.astype(scale_dtype)
        if not np.isfinite(kept).all():
            raise QuantizationError(f"a weight of magnitude {np.abs(values).max():.3g} needs a scale beyond "
                                    f"{scale_dtype.name}: use scale_dtype=float32")
        return kept

    if bits == 8:
        scales = stored(np.abs(columns).max(axis=1, keepdims=True) / INT8_MAX)
        codes = _scaled_codes(columns, scales.astype(np.float64), -INT8_MAX, INT8_MAX).astype(np.int8)
        return _packed_now(QuantizedWeights(_frozen_in_place(codes), _frozen_in_place(scales), None, k, 8,
                                            block))
    if symmetric:
        scales = stored(np.abs(blocks).max(axis=2) / 7)
        zero = np.full(scales.shape, SYMMETRIC_ZERO_POINT, np.float64)
        zero_points = None
    else:
        low, high = np.minimum(blocks.min(axis=2), 0), np.maximum(blocks.max(axis=2), 0)
        scales = stored((high - low) / 15)
        exact = scales.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            zero = np.clip(np.rint(np.where(exact > 0, -low / np.where(exact > 0, exact, 1), 0)), 0, 15)
        zero_points = zero.astype(np.uint8)
    signed = _scaled_codes(blocks, scales.astype(np.float64)[:, :, None], -15, 15)
    nibbles = np.clip(signed + zero[:, :, None], 0, 15).astype(np.uint8).reshape(n, kp)
    codes = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)
    if zero_points is not None:
        zero_points = _frozen_in_place(zero_points)
    return _packed_now(QuantizedWeights(_frozen_in_place(codes), _frozen_in_place(scales), zero_points, k, 4,
                                        block))


def quantize_activations(A: ArrayLike, block: int = 32, k_padded: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A[M, K] as int8 codes [M, Kp] and float32 scales [M, Kp // block].

    The dynamic quantisation of a quantised product, made at call time: per row and
    block, ``sa = max|a| / 127`` rounded to float32, ``qa = round(a / sa)``.  A block
    holding NaN or Inf gets the scale NaN (its row of C becomes NaN) and codes 0.
    """
    A = _as_matrix("A", A)
    _check_block(block)
    m, k = A.shape
    kp = padded_k(k, block) if k_padded is None else k_padded
    rows = np.zeros((m, kp))
    rows[:, :k] = A
    blocks = rows.reshape(m, kp // block, block)
    finite = np.isfinite(blocks).all(axis=2)
    with np.errstate(invalid="ignore"):
        scales = np.where(finite, np.abs(np.where(np.isfinite(blocks), blocks, 0)).max(axis=2) / INT8_MAX, np.nan)
    scales = scales.astype(np.float32)
    safe = np.where(finite[:, :, None], blocks, 0)
    codes = _scaled_codes(safe, np.nan_to_num(scales, nan=0.0).astype(np.float64)[:, :, None], -INT8_MAX, INT8_MAX)
    return codes.astype(np.int8).reshape(m, kp), scales


def block_sums(A: ArrayLike, w: QuantizedWeights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The integer part of the product: (isum [blocks, M, N], sa [M, blocks], sw [N, blocks]).

    ``isum`` holds each block's exact integer dot products (computed in float64, where
    every such sum is an exact integer), the part a kernel accumulates in int32.
    """
    A = _as_matrix("A", A)
    if A.shape[1] != w.k:
        raise QuantizationError(f"A has K={A.shape[1]} columns but the weights were quantised with K={w.k}")
    qa, sa = quantize_activations(A, w.block, w.padded_k)
    qw = w.signed_codes()
    m, n, b = A.shape[0], w.n, w.block
    isum = np.empty((w.blocks, m, n))
    for j in range(w.blocks):
        isum[j] = qa[:, j * b:(j + 1) * b].astype(np.float64) @ qw[:, j * b:(j + 1) * b].T.astype(np.float64)
    return isum, sa, w.block_scales()


def reference_qmatmul(A: ArrayLike, w: QuantizedWeights, bias: ArrayLike | None = None,
                      clamp: tuple[float, float] | None = None) -> np.ndarray:
    """C = A x W through the quantised arithmetic, in numpy: the reference of every kernel.

    Per block, in order of K: ``C += float32(isum) * (sa * sw)`` in float32; then
    ``bias`` (float32 [N]) is added and the result clamped to ``clamp = (low, high)``.
    """
    isum, sa, sw = block_sums(A, w)
    m, n = isum.shape[1], isum.shape[2]
    out = np.zeros((m, n), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(w.blocks):
            out += isum[j].astype(np.float32) * (sa[:, j, None] * sw[None, :, j])
        out = _finish(out, n, bias, clamp)
    return out


def _finish(out: np.ndarray, n: int, bias: ArrayLike | None, clamp: tuple[float, float] | None) -> np.ndarray:
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float32)
        if bias.shape != (n,):
            raise QuantizationError(f"bias must have shape ({n},), one value per column of C, not {bias.shape}")
        out += bias
    if clamp is not None:
        low, high = (float(v) for v in clamp)
        if not low <= high:
            raise QuantizationError(f"clamp must be (low, high) with low <= high, not {clamp!r}")
        np.clip(out, low, high, out=out)
    return out


def scaling_error_bound(A: ArrayLike, w: QuantizedWeights) -> np.ndarray:
    """How far a kernel's C may be from :func:`reference_qmatmul`'s: float32 [M, N].

    Only the f32 scaling step differs between correct kernels (its order, fused or
    not): each block's term is off by a few units in the last place of itself, and
    their sum by one more per term, so ``(blocks + 3) * 2 * eps * sum |term|``.  Where
    the scales' product is subnormal its rounding is absolute, and the integer sum
    multiplies it: ``(blocks + 3) * 2 * (1 + sum |isum|)`` smallest subnormals more.
    Where the terms exceed float32's range a kernel may give Inf: the bound is Inf.
    """
    isum, sa, sw = block_sums(A, w)
    f32 = np.finfo(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = sum(np.abs(isum[j]) * np.abs(sa[:, j, None] * sw[None, :, j].astype(np.float64))
                        for j in range(w.blocks))
        steps = (w.blocks + 3) * 2
        bound = steps * (f32.eps * magnitude + f32.smallest_subnormal * (1 + np.abs(isum).sum(axis=0)))
        bound[magnitude > f32.max / 2] = np.inf
    return bound.astype(np.float32)


def quantization_error_bound(A: ArrayLike, w: QuantizedWeights) -> np.ndarray:
    """How far the quantised product may be from the float one, A @ W: float64 [M, N].

    Each activation is off by at most ``sa / 2`` and each weight by at most ``sw / 2``
    (round to nearest), so per block ``|a w - qa sa qw sw| <= |a| sw / 2 + sa / 2 |qw sw|``;
    summed over K, plus the scaling step's rounding.
    """
    A = _as_matrix("A", A).astype(np.float64)
    _, sa, sw = block_sums(A, w)
    b, kp = w.block, w.padded_k
    padded = np.zeros((A.shape[0], kp))
    padded[:, :w.k] = A
    weights = np.abs(w.signed_codes().astype(np.float64) * np.repeat(sw, b, axis=1))  # |qw sw| [N, Kp]
    bound = np.zeros((A.shape[0], w.n))
    for j in range(w.blocks):
        part = slice(j * b, (j + 1) * b)
        bound += (np.abs(padded[:, part]).sum(axis=1, keepdims=True) * sw[None, :, j] / 2
                  + sa[:, j, None] / 2 * weights[:, part].sum(axis=1)[None, :])
    return bound + scaling_error_bound(A, w)
