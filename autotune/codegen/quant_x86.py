"""x86 quantised kernels (f32 activations quantised to int8 x 4- or 8-bit weights), generated.

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

VNNI kernels (``avxvnni``: VEX ``vpdpbusd`` on ymm, 16 registers; ``avx512vnni``:
EVEX ``vpdpbusd`` on ymm with AVX512VL, 32 registers) read the same format: its
four consecutive K bytes per column and int32 lane are exactly what ``vpdpbusd``
sums into a lane, so each product goes straight into an int32 sum (no int16 step,
no widening).  They carry ``__attribute__((target(...)))`` in the same translation
unit as the AVX2 ones (compiled with the avx2 target's flags) and run only where
the CPU has the record's ``features``.  ``generate(..., emulate_vnni=True)``
defines ``vpdpbusd`` with exact AVX2 arithmetic instead (and no target
attributes): the test suite validates the VNNI kernels' data flow that way on
machines without VNNI, which QEMU's TCG cannot execute either.

The zmm kernels (``avx512vnnizmm``: EVEX ``vpdpbusd`` on zmm, two panels per
vector) are written by :mod:`autotune.codegen._quant_zmm` into the same unit, with
their own emulation on pairs of ymm.
"""

from __future__ import annotations

from typing import Sequence

from ..contract import qkernel_signature as _signature, qkernel_unused
from ..families.x86 import quant_fits
from ..qformat import PANEL, SUB, SYMMETRIC_ZERO_POINT, weight_format
from ..specs import QKernelSpec
from . import QuantUnit, _quant_zmm

FLAGS_GUARD = "!defined(__AVX2__) || !defined(__FMA__)"
#: The compilers' target attribute of each ISA's functions (none: the unit's flags).
_TARGET_ATTRIBUTE = {"avx2": "", "avxvnni": "avxvnni", "avx512vnni": "avx512f,avx512vl,avx512bw,avx512vnni"}


def _vnni(k: QKernelSpec) -> bool:
    return k.isa != "avx2"




def _nibble_products(mr: int, np_: int) -> list[str]:
    """The C lines of one AVX2 sub-block of 4-bit products: int16 sums ``h{r}_{p}``.

    One GNU inline-assembly statement (AT&T syntax, which gcc and clang both read)
    over pointers ``a{r}`` (row r's 32 activation codes), ``w`` (panel 0's 128 bytes;
    panel p ``p * wstride`` further) and ``low4``.  Written by hand because compilers
    do not keep the sums in registers: gcc 12 and clang 19 spilled the intrinsics
    version's 4x16 tile on every step (48-54 GMAC/s in L1 on a Zen 3; this form
    74-88, docs/quantised.md).  Registers: the mr x np sums, one weight vector per panel, the
    broadcast codes, a product and ``low4``: at most 15 ymm
    (:func:`autotune.families.x86.quant_fits`).
    Per quarter v of the sub-block, the low nibbles meet codes 8v..8v+3 and the high
    ones 8v+4..8v+7, as the qpanel8 layout places them.
    """
    sums = [f"h{r}_{p}" for r in range(mr) for p in range(np_)]
    weights = [f"nib{p}" for p in range(np_)]
    started: set[str] = set()
    body = []
    for v in range(4):
        for half in ("low", "high"):
            for p, reg in enumerate(weights):
                where = f"{32 * v}(%[w])" if p == 0 else \
                    f"{32 * v}(%[panel3])" if p == 3 else f"{32 * v}(%[w],%[wstride],{p})"
                body.append(f"vmovdqu {where}, %[{reg}]")
                if half == "high":
                    body.append(f"vpsrlw $4, %[{reg}], %[{reg}]")
                body.append(f"vpand %[low4], %[{reg}], %[{reg}]")
            offset = 8 * v + (4 if half == "high" else 0)
            for r in range(mr):
                body.append(f"vpbroadcastd {offset}(%[a{r}]), %[codes]")
                for p, reg in enumerate(weights):
                    h = f"h{r}_{p}"
                    if h in started:  # vpmaddubsw: unsigned nibbles (first source) x signed codes
                        body += [f"vpmaddubsw %[codes], %[{reg}], %[product]", f"vpaddw %[product], %[{h}], %[{h}]"]
                    else:
                        body.append(f"vpmaddubsw %[codes], %[{reg}], %[{h}]")
                        started.add(h)
    outputs = [f'[{x}] "=&x"({x})' for x in sums + weights + ["codes", "product"]]
    inputs = [f'[a{r}] "r"(a{r})' for r in range(mr)] + ['[w] "r"(w)', '[wstride] "r"(wstride)',
                                                         '[low4] "x"(low4)']
    if np_ == 4:
        inputs.append('[panel3] "r"(w + 3 * wstride)')  # no scale 3 in an address
    return [f"__m256i {', '.join(sums + weights)}, codes, product;",
            "__asm__(", *(f'    "{line}\\n\\t"' for line in body),
            f"    : {', '.join(outputs)}",
            f"    : {', '.join(inputs)}",
            '    : "memory");']


def _kernel(k: QKernelSpec, emulate_vnni: bool = False) -> str:
    mr, np_ = k.mr, k.panels
    rows, panels = range(mr), range(np_)
    four = k.kind != "q8"
    # AVX2's 4-bit kernels keep C's tile in memory (L1) and their int16 sums in registers
    # across a sub-block, written in assembly (_nibble_products); see the module's notes.
    in_memory = four and not _vnni(k)
    bpb = weight_format(k.kind).sub_bytes
    attribute = "" if emulate_vnni or not _TARGET_ATTRIBUTE[k.isa] else \
        f"__attribute__((target(\"{_TARGET_ATTRIBUTE[k.isa]}\")))\n"
    dot = "_mm256_dpbusd_avx_epi32" if k.isa == "avxvnni" else "_mm256_dpbusd_epi32"
    if emulate_vnni:
        dot = "at_emulated_dpbusd"
    out = [f"/* {k.name}: {mr} rows x {k.nr} columns ({np_} panel{'s' * (np_ > 1)}), "
           f"{'4-bit' if four else '8-bit'} weights{', zero points per block' if k.kind == 'q4a' else ''}"
           f"{', vpdpbusd' if _vnni(k) else ''}. */",
           attribute + (f"static inline __attribute__((always_inline))\n{_signature(k.name + '_body')}" if in_memory
                        else _signature(k.name)), "{"]
    if not _vnni(k):
        out.append("    const __m256i ones = _mm256_set1_epi16(1);")
    if four:
        out.append("    const __m256i low4 = _mm256_set1_epi8(0x0F);")
    if k.kind == "q4s":
        out.append(f"    const __m256 zero_point = _mm256_set1_ps({SYMMETRIC_ZERO_POINT}.0f);")
    out += qkernel_unused(k.kind)
    if in_memory:
        out.append("    if (!load_c) {")
        for r in rows:
            out.append("        " + " ".join(f"_mm256_storeu_ps(C + {r} * ldc + {p * PANEL}, _mm256_setzero_ps());"
                                             for p in panels))
        out.append("    }")
    else:
        for r in rows:
            out.append("    " + " ".join(f"__m256 c{r}_{p} = load_c ? _mm256_loadu_ps(C + {r} * ldc + {p * PANEL}) "
                                         f": _mm256_setzero_ps();" for p in panels))
    out.append("    for (int64_t b = 0; b < blocks; ++b) {")
    if in_memory:
        # The block's first sub-block sets its int32 sums, the rest (blocks above 32) add:
        # the common block of 32 pays no additions of zero.
        for r in rows:
            out.append("        " + " ".join(f"__m256i s{r}_{p};" for p in panels))
        for loop in ("{", "for (int64_t u = 1; u < sub; ++u) {"):
            t = "b * sub" if loop == "{" else "b * sub + u"
            out.append(f"        {loop}")
            out.extend(f"            const int8_t *a{r} = qa + {r} * lda + ({t}) * {SUB};" for r in rows)
            out.append(f"            const uint8_t *w = wq + ({t}) * {bpb};")
            out.extend("            " + line for line in _nibble_products(mr, np_))
            for r in rows:
                widened = [(f"s{r}_{p}", f"_mm256_madd_epi16(h{r}_{p}, ones)") for p in panels]
                out.append("            " + " ".join(f"{s_} = {m};" if loop == "{" else
                                                     f"{s_} = _mm256_add_epi32({s_}, {m});" for s_, m in widened))
            out.append("        }")
    else:
        for r in rows:
            out.append("        " + " ".join(f"__m256i s{r}_{p} = _mm256_setzero_si256();" for p in panels))
        out.append("        for (int64_t u = 0; u < sub; ++u) {")
        out.append("            const int64_t t = b * sub + u; /* sub-block index along K */")
        for r in rows:
            out.append(f"            const int8_t *a{r} = qa + {r} * lda + t * {SUB};")
        if _vnni(k):
            # vpdpbusd(sum, unsigned bytes, signed bytes): the nibbles (or |w|) are the
            # unsigned side; four products per lane go straight into the int32 sums.
            for v in range(4 if four else 8):
                for p in panels:
                    out.append(f"            {{ /* k = {8 if four else 4}*{v} ... of panel {p} */")
                    out.append(f"                const __m256i raw = _mm256_loadu_si256((const __m256i *)"
                               f"(wq + {p} * wstride + t * {bpb} + {v * 32}));")
                    if four:
                        out.append("                const __m256i lo = _mm256_and_si256(raw, low4);")
                        out.append("                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);")
                        for r in rows:
                            for half, off in (("lo", 8 * v), ("hi", 8 * v + 4)):
                                out.append(f"                s{r}_{p} = {dot}(s{r}_{p}, {half}, "
                                           f"_mm256_set1_epi32(*(const int32_t *)(a{r} + {off})));")
                    else:
                        out.append("                const __m256i wabs = _mm256_abs_epi8(raw);")
                        for r in rows:
                            a = f"_mm256_set1_epi32(*(const int32_t *)(a{r} + {4 * v}))"
                            out.append(f"                s{r}_{p} = {dot}(s{r}_{p}, wabs, _mm256_sign_epi8({a}, raw));")
                    out.append("            }")
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
            scale = f"_mm256_mul_ps(sa{r}, w{p})"
            if in_memory:
                c = f"C + {r} * ldc + {p * PANEL}"
                out.append(f"        _mm256_storeu_ps({c}, _mm256_fmadd_ps({isum}, {scale}, _mm256_loadu_ps({c})));")
            else:
                out.append(f"        c{r}_{p} = _mm256_fmadd_ps({isum}, {scale}, c{r}_{p});")
    out.append("    }")
    if not in_memory:
        for r in rows:
            for p in panels:
                out.append(f"    _mm256_storeu_ps(C + {r} * ldc + {p * PANEL}, c{r}_{p});")
    out.append("}")
    if in_memory:
        # The body twice: with sub = 1 (blocks of 32, the common format) the compiler drops
        # the loop over sub-blocks and has general registers enough for the rest; with sub
        # unknown it reloaded pointers from the stack in every block.  2-10% faster on a
        # Zen 3; the intrinsics kernels (8 bits) lost with it (docs/quantised.md, "Fourth round").
        args = "qa, lda, sa, asum, lds, wq, wstride, ws, wz, sstride, C, ldc, load_c"
        out += [attribute + _signature(k.name), "{",
                f"    if (sub == 1) {k.name}_body(blocks, 1, {args});",
                f"    else {k.name}_body(blocks, sub, {args});", "}"]
    return "\n".join(out)


#: vpdpbusd in exact AVX2 arithmetic, for ``generate(emulate_vnni=True)``: the bytes
#: widened to int16 (unsigned a, signed b), even and odd pairs through vpmaddwd (each
#: product at most 255 * 128 in magnitude), the two halves of each lane's four added.
_EMULATED_DPBUSD = """#ifndef AT_EMULATED_DPBUSD
#define AT_EMULATED_DPBUSD
/* vpdpbusd emulated with AVX2 (validation on CPUs without VNNI; not for speed). */
static inline __m256i at_emulated_dpbusd(__m256i sum, __m256i a, __m256i b)
{
    const __m256i even_a = _mm256_and_si256(a, _mm256_set1_epi16(0x00FF)), odd_a = _mm256_srli_epi16(a, 8);
    const __m256i even_b = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), odd_b = _mm256_srai_epi16(b, 8);
    return _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(even_a, even_b),
                                                   _mm256_madd_epi16(odd_a, odd_b)));
}
#endif
"""


def units(kernels: Sequence[QKernelSpec], emulate_vnni: bool = False) -> list[QuantUnit]:
    """``kernels`` as the one translation unit of :func:`generate` (the target's flags build it)."""
    return [QuantUnit("at_qkernels_x86.c", generate(kernels, emulate_vnni))]


def generate(kernels: Sequence[QKernelSpec], emulate_vnni: bool = False) -> str:
    """One translation unit with every kernel of ``kernels``, compiled with the avx2 target's flags.

    VNNI kernels carry their ISA's target attribute; ``emulate_vnni`` writes them
    with :data:`_EMULATED_DPBUSD` instead, to validate them on an AVX2-only CPU.
    """
    spilling = [k.name for k in kernels if not quant_fits(k.isa, k.mr, k.nr)]
    if spilling:  # the model counts the registers the code below declares
        raise ValueError(f"tiles beyond the x86 register model: {spilling}")
    head = [
        "/* Generated by autotune.codegen.quant_x86 from QKernelSpec records "
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
    if emulate_vnni and any(_vnni(k) for k in kernels):
        head.append(_EMULATED_DPBUSD)
    if any(k.isa == _quant_zmm.ISA for k in kernels):
        head.append(_quant_zmm.primitives(emulate_vnni))
    return "\n".join(head + [(_quant_zmm.kernel(k, emulate_vnni) if k.isa == _quant_zmm.ISA else
                               _kernel(k, emulate_vnni)) + "\n" for k in sorted(kernels)])
