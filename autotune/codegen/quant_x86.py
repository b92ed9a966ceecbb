"""AVX2 quantised kernels (f32 activations quantised to int8 x 4- or 8-bit weights), generated.

A kernel computes an ``mr x nr`` block of ``C = A x W`` from A's int8 codes and
W packed in the ``qpanel8`` format of :func:`autotune.quant.pack_panels`: panels
of 8 columns; in each sub-block of 32 rows of K, for 4-bit weights 4 vectors of
32 bytes, byte ``4c + j`` of vector ``v`` holding column c's nibbles for
``k = 8v + j`` (low) and ``k = 8v + 4 + j`` (high); for 8-bit weights 8 vectors,
byte ``4c + j`` of vector ``g`` holding column c's code for ``k = 4g + j``.
Four activation codes broadcast to every column (``vpbroadcastd``) meet a vector
of weights in ``vpmaddubsw`` (unsigned x signed bytes, pairs summed to int16):

* 4 bits: nibbles 0..15 times codes in [-127, 127]: a pair is at most 3810, so
  the 8 products of a sub-block add up in int16 (at most 30480) and one
  ``vpmaddwd`` by ones widens them to int32 per column;
* 8 bits: ``vpmaddubsw(|w|, sign(a, w))`` (a pair at most 32258), widened at once.

At the end of a block ``isum = int32 - zero_point * sum(qa of the block)``
(exact in f32: both are integers below 2**24) and ``C += float(isum) * (sa * sw)``
with one FMA per block and column, in order of K: the arithmetic of
:func:`autotune.quant.reference_qmatmul`, which the kernel differs from only by
that step's rounding.  Kernels store C (row-major, ``ldc``), starting from the
values in C when ``load_c`` is set (qgemm.c covers K in slices, so a slice of
weights stays in L1 while rows pass over it); they allocate nothing.
The C contract: ``kernels_src/runtime/at_qkernel.h``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .quant_registry import KINDS, signature

#: Columns of a packed panel: one ymm of int32 / f32 lanes.
PANEL = 8
#: Rows of K in a sub-block: what one int16 accumulation may cover without overflow.
SUB = 32
#: The ISAs this generator writes (the portable path lives in qgemm.c).
ISAS = ("avx2",)
FLAGS_GUARD = "!defined(__AVX2__) || !defined(__FMA__)"


@dataclass(frozen=True, order=True)
class QKernel:
    """One quantised kernel: its weight kind, ISA and register tile (nr a multiple of 8)."""

    kind: str
    isa: str
    mr: int
    nr: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")
        if self.isa not in ISAS:
            raise ValueError(f"isa must be one of {ISAS}, not {self.isa!r}")
        if not (1 <= self.mr <= 8 and self.nr in (8, 16, 24, 32)):
            raise ValueError(f"tile {self.mr}x{self.nr}: mr in 1..8, nr a multiple of 8 up to 32")

    @property
    def name(self) -> str:
        return f"at_{self.kind}_{self.isa}_{self.mr}x{self.nr}"

    @property
    def panels(self) -> int:
        return self.nr // PANEL


def fits(kernel: QKernel) -> bool:
    """Whether the tile's accumulators leave registers for the weights and broadcasts.

    Each row and panel keeps an f32 accumulator and an int16 (4 bits) or int32
    (8 bits) sum live: at most 8 such tiles, 16 vectors of the 16 ymm registers
    minus what GCC can keep in memory operands; beyond that it spills every step.
    """
    return kernel.mr * kernel.panels <= 8


def family(isa: str = "avx2", kinds: Sequence[str] = KINDS, quick: bool = False) -> list[QKernel]:
    """The kernels install builds, validates and measures: GEMV forms (mr = 1) and blocks.

    ``quick``: one GEMV form and one block per kind (``autotune install --quick``).
    Three-row blocks are left out: M = 16 and 64 would leave a row to the GEMV form.
    """
    tiles = [(1, 8), (4, 8)] if quick else [(1, 8), (1, 16), (1, 32), (2, 8), (2, 16), (2, 32), (4, 8), (4, 16)]
    return [k for kind in kinds for mr, nr in tiles if fits(k := QKernel(kind, isa, mr, nr))]


_signature = signature  # shared with the registry and the other ISAs' kernels


def _kernel(k: QKernel) -> str:
    mr, np_ = k.mr, k.panels
    rows, panels = range(mr), range(np_)
    four = k.kind != "q8"
    bpb = 128 if four else 256
    out = [f"/* {k.name}: {mr} rows x {k.nr} columns ({np_} panel{'s' * (np_ > 1)}), "
           f"{'4-bit' if four else '8-bit'} weights{', zero points per block' if k.kind == 'q4a' else ''}. */",
           _signature(k.name), "{"]
    out.append("    const __m256i ones = _mm256_set1_epi16(1);")
    if four:
        out.append("    const __m256i low4 = _mm256_set1_epi8(0x0F);")
    if k.kind == "q4s":
        out.append("    const __m256 zero_point = _mm256_set1_ps(8.0f);")
    if k.kind != "q4a":
        out.append("    (void)wz; /* no zero points */")
    if not four:
        out.append("    (void)asum; /* symmetric 8-bit codes: no zero point to multiply it */")
    out.append("    /* load_c: C holds the sums of the blocks before these (K is covered in slices). */")
    for r in rows:
        out.append("    " + " ".join(f"__m256 c{r}_{p} = load_c ? _mm256_loadu_ps(C + {r} * ldc + {p * PANEL}) "
                                     f": _mm256_setzero_ps();" for p in panels))
    out.append("    for (int64_t b = 0; b < blocks; ++b) {")
    for r in rows:
        out.append("        " + " ".join(f"__m256i s{r}_{p} = _mm256_setzero_si256();" for p in panels))
    out.append("        for (int64_t u = 0; u < sub; ++u) {")
    out.append("            const int64_t t = b * sub + u; /* sub-block index along K */")
    for r in rows:
        out.append(f"            const int8_t *a{r} = qa + {r} * lda + t * {SUB};")
    if four:
        for r in rows:
            out.append("            " + " ".join(f"__m256i h{r}_{p};" for p in panels))
        for v in range(4):
            for p in panels:
                out.append(f"            {{ /* k = 8*{v} .. 8*{v}+7 of panel {p} */")
                out.append(f"                const __m256i raw = _mm256_loadu_si256((const __m256i *)"
                           f"(wq + {p} * wstride + t * {bpb} + {v * 32}));")
                out.append("                const __m256i lo = _mm256_and_si256(raw, low4);")
                out.append("                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);")
                for r in rows:
                    for half, off in (("lo", 8 * v), ("hi", 8 * v + 4)):
                        product = (f"_mm256_maddubs_epi16({half}, "
                                   f"_mm256_set1_epi32(*(const int32_t *)(a{r} + {off})))")
                        if v == 0 and half == "lo":
                            out.append(f"                h{r}_{p} = {product};")
                        else:
                            out.append(f"                h{r}_{p} = _mm256_add_epi16(h{r}_{p}, {product});")
                out.append("            }")
        for r in rows:
            for p in panels:
                out.append(f"            s{r}_{p} = _mm256_add_epi32(s{r}_{p}, _mm256_madd_epi16(h{r}_{p}, ones));")
    else:
        for g in range(8):
            for p in panels:
                out.append(f"            {{ /* k = 4*{g} .. 4*{g}+3 of panel {p} */")
                out.append(f"                const __m256i w = _mm256_loadu_si256((const __m256i *)"
                           f"(wq + {p} * wstride + t * {bpb} + {g * 32}));")
                out.append("                const __m256i wabs = _mm256_abs_epi8(w);")
                for r in rows:
                    a = f"_mm256_set1_epi32(*(const int32_t *)(a{r} + {4 * g}))"
                    out.append(f"                s{r}_{p} = _mm256_add_epi32(s{r}_{p}, _mm256_madd_epi16("
                               f"_mm256_maddubs_epi16(wabs, _mm256_sign_epi8({a}, w)), ones));")
                out.append("            }")
    out.append("        }")
    out.append("        /* The block's scaling step: C += float(isum) * (sa * sw), one FMA. */")
    for p in panels:
        out.append(f"        const __m256 w{p} = _mm256_loadu_ps(ws + {p} * sstride + b * {PANEL});")
        if k.kind == "q4a":
            out.append(f"        const __m256 z{p} = _mm256_loadu_ps(wz + {p} * sstride + b * {PANEL});")
    for r in rows:
        out.append(f"        const __m256 sa{r} = _mm256_set1_ps(sa[{r} * lds + b]);")
        if four:
            out.append(f"        const __m256 as{r} = _mm256_set1_ps(asum[{r} * lds + b]);")
        for p in panels:
            isum = f"_mm256_cvtepi32_ps(s{r}_{p})"
            if four:
                zero = "zero_point" if k.kind == "q4s" else f"z{p}"
                isum = f"_mm256_fnmadd_ps({zero}, as{r}, {isum})"
            out.append(f"        c{r}_{p} = _mm256_fmadd_ps({isum}, _mm256_mul_ps(sa{r}, w{p}), c{r}_{p});")
    out.append("    }")
    for r in rows:
        for p in panels:
            out.append(f"    _mm256_storeu_ps(C + {r} * ldc + {p * PANEL}, c{r}_{p});")
    out.append("}")
    return "\n".join(out)


def generate(kernels: Sequence[QKernel]) -> str:
    """One translation unit with every kernel of ``kernels`` (all of one ISA)."""
    isas = {k.isa for k in kernels}
    if len(isas) > 1:
        raise ValueError(f"one ISA per translation unit, not {sorted(isas)}")
    head = [
        "/* Generated by autotune.codegen.quant_x86 from QKernel records "
        f"({', '.join(k.name for k in sorted(kernels))}).",
        " * Do not edit: re-run `autotune install`.  Contract: kernels_src/runtime/at_qkernel.h;",
        " * packed weights: autotune.quant.pack_panels. */",
        f"#if {FLAGS_GUARD}",
        "#error \"these kernels need AVX2 and FMA: compile them with the avx2 target's flags\"",
        "#endif",
        "#include <immintrin.h>",
        "#include <stdint.h>",
        "",
    ]
    return "\n".join(head + [_kernel(k) + "\n" for k in sorted(kernels)])
