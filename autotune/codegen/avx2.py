"""AVX2 + FMA kernels: 16 ymm registers, 8 fp32 / 4 fp64 lanes, maskload tails, C tails stored in pieces."""

from __future__ import annotations

from ..families.x86 import fits
from ..specs import DTYPE_BYTES, KernelSpec
from . import GeneratedSource
from ._x86 import Vocabulary, emit


def vocabulary(dtype: str) -> Vocabulary:
    lanes = 32 // DTYPE_BYTES[dtype]
    return Vocabulary(
        isa="avx2",
        module=__name__,
        guard="!defined(__AVX2__) || !defined(__FMA__)",
        guard_message="this kernel needs AVX2 and FMA: compile it with the avx2 target's flags",
        vtype="__m256" if dtype == "f32" else "__m256d",
        prefix="_mm256",
        suffix="ps" if dtype == "f32" else "pd",
        lanes=lanes,
        masked="vector",
    )


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != "avx2":
        raise ValueError(f"{spec.name} is not an avx2 kernel")
    if not fits(spec):
        raise ValueError(f"{spec.name} does not fit the avx2 register file")
    return GeneratedSource(spec, emit(spec, vocabulary(spec.dtype)), "c")
