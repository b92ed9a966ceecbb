"""AVX-512 kernels: 32 zmm registers, 16 fp32 / 8 fp64 lanes (ymm or xmm where a column of the
block fits one), k-register masked tails."""

from __future__ import annotations

from ..families.x86 import fits
from ..specs import DTYPE_BYTES, KernelSpec
from . import GeneratedSource
from ._x86 import Vocabulary, emit, vector_bits


def vocabulary(dtype: str, bits: int = 512) -> Vocabulary:
    """The zmm vocabulary, or with ``bits`` 256 or 128 the ymm or xmm one of
    AVX-512VL (same 32 registers, k masks and embedded broadcasts)."""
    needs = "AVX-512F and VL" if bits < 512 else "AVX-512F"
    return Vocabulary(
        isa="avx512",
        module=__name__,
        guard="!defined(__AVX512F__)" + (" || !defined(__AVX512VL__)" if bits < 512 else ""),
        guard_message=f"this kernel needs {needs}: compile it with the avx512 target's flags",
        vtype=f"__m{bits}" if dtype == "f32" else f"__m{bits}d",
        prefix="_mm" if bits == 128 else f"_mm{bits}",
        suffix="ps" if dtype == "f32" else "pd",
        lanes=bits // 8 // DTYPE_BYTES[dtype],
        masked="k",
    )


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != "avx512":
        raise ValueError(f"{spec.name} is not an avx512 kernel")
    if not fits(spec):
        raise ValueError(f"{spec.name} does not fit the avx512 register file")
    return GeneratedSource(spec, emit(spec, vocabulary(spec.dtype, vector_bits(spec, 512))), "c")
