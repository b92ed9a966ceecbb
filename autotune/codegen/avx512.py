"""AVX-512 kernels: 32 zmm registers, 16 fp32 / 8 fp64 lanes, k-register masked tails."""

from __future__ import annotations

from ..families.x86 import fits, strategy
from ..specs import DTYPE_BYTES, KernelSpec
from . import GeneratedSource
from ._x86 import Vocabulary, emit


def vocabulary(dtype: str, half: bool = False) -> Vocabulary:
    """The zmm vocabulary, or with ``half`` the ymm one of AVX-512VL (same 32
    registers, k masks and embedded broadcasts)."""
    bits = 256 if half else 512
    needs = "AVX-512F and VL" if half else "AVX-512F"
    return Vocabulary(
        isa="avx512",
        module=__name__,
        guard="!defined(__AVX512F__)" + (" || !defined(__AVX512VL__)" if half else ""),
        guard_message=f"this kernel needs {needs}: compile it with the avx512 target's flags",
        vtype=f"__m{bits}" if dtype == "f32" else f"__m{bits}d",
        prefix=f"_mm{bits}",
        suffix="ps" if dtype == "f32" else "pd",
        lanes=bits // 8 // DTYPE_BYTES[dtype],
        masked="k",
    )


def half_width(spec: KernelSpec) -> bool:
    """Whether the C columns fit half a zmm: such a block (8 fp32 / 4 fp64 rows or
    fewer) is computed in ymm registers.  A zmm masked to half its lanes does the
    same FMAs, but its masked loads and stores cost more: an 8x8 fp32 kernel took
    15 ns per product in a batch where the ymm form takes 12."""
    return strategy(spec) == "bcast_b" and spec.mr * DTYPE_BYTES[spec.dtype] <= 32


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != "avx512":
        raise ValueError(f"{spec.name} is not an avx512 kernel")
    if not fits(spec):
        raise ValueError(f"{spec.name} does not fit the avx512 register file")
    return GeneratedSource(spec, emit(spec, vocabulary(spec.dtype, half_width(spec))), "c")
