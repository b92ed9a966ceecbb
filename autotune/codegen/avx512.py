"""AVX-512 kernels: 32 zmm registers, 16 fp32 / 8 fp64 lanes, k-register masked tails."""

from __future__ import annotations

from ..specs import DTYPE_BYTES, KernelSpec, fits
from . import GeneratedSource
from ._x86 import Vocabulary, emit


def vocabulary(dtype: str) -> Vocabulary:
    lanes = 64 // DTYPE_BYTES[dtype]
    return Vocabulary(
        isa="avx512",
        module=__name__,
        guard="!defined(__AVX512F__)",
        guard_message="this kernel needs AVX-512F: compile it with the avx512 target's flags",
        vtype="__m512" if dtype == "f32" else "__m512d",
        prefix="_mm512",
        suffix="ps" if dtype == "f32" else "pd",
        lanes=lanes,
        masked="k",
    )


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != "avx512":
        raise ValueError(f"{spec.name} is not an avx512 kernel")
    if not fits(spec):
        raise ValueError(f"{spec.name} does not fit the avx512 register file")
    return GeneratedSource(spec, emit(spec, vocabulary(spec.dtype)), "c")
