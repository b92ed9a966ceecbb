"""AVX2 + FMA kernels: 16 ymm registers, 8 fp32 / 4 fp64 lanes (xmm where a column of the block fits
one), a column's last rows loaded and stored in pieces, never through vmaskmov."""

from __future__ import annotations

from ..families.x86 import fits
from ..specs import DTYPE_BYTES, KernelSpec
from . import GeneratedSource
from ._x86 import Vocabulary, emit, vector_bits


def vocabulary(dtype: str, bits: int = 256) -> Vocabulary:
    """The ymm vocabulary, or with ``bits`` 128 the xmm one (same 16 registers)."""
    return Vocabulary(
        isa="avx2",
        module=__name__,
        guard="!defined(__AVX2__) || !defined(__FMA__)",
        guard_message="this kernel needs AVX2 and FMA: compile it with the avx2 target's flags",
        vtype=f"__m{bits}" if dtype == "f32" else f"__m{bits}d",
        prefix="_mm" if bits == 128 else f"_mm{bits}",
        suffix="ps" if dtype == "f32" else "pd",
        lanes=bits // 8 // DTYPE_BYTES[dtype],
        masked="vector",
    )


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != "avx2":
        raise ValueError(f"{spec.name} is not an avx2 kernel")
    if not fits(spec):
        raise ValueError(f"{spec.name} does not fit the avx2 register file")
    return GeneratedSource(spec, emit(spec, vocabulary(spec.dtype, vector_bits(spec, 256))), "c")
