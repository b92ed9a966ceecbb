"""AVX-512 kernels: 32 zmm registers, 16 fp32 / 8 fp64 lanes (ymm or xmm where a column of the
block fits one), k-register masked tails."""

from __future__ import annotations

from ..families.x86 import fits, strategy
from ..specs import DTYPE_BYTES, KernelSpec
from . import GeneratedSource
from ._x86 import Vocabulary, emit


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


def vector_bits(spec: KernelSpec) -> int:
    """The narrowest of zmm, ymm and xmm that holds a column of the block (NN and
    NT, whose vectors run along M).  A wider vector masked to the rows does the
    same FMAs, but its masked loads and stores cost more: an 8x8 fp32 kernel took
    15 ns per product in a batch as a zmm masked to half, 12 as a ymm, and a 2x2x2
    fp32 product 5.8 ns as a ymm masked to two lanes, 4.4 as an xmm (2-vCPU Xeon,
    family 6 model 207; the kernel's K loop alone, the call around it aside)."""
    if strategy(spec) != "bcast_b":
        return 512
    column = spec.mr * DTYPE_BYTES[spec.dtype]
    return 128 if column <= 16 else 256 if column <= 32 else 512


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != "avx512":
        raise ValueError(f"{spec.name} is not an avx512 kernel")
    if not fits(spec):
        raise ValueError(f"{spec.name} does not fit the avx512 register file")
    return GeneratedSource(spec, emit(spec, vocabulary(spec.dtype, vector_bits(spec))), "c")
