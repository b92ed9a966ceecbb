"""NEON quantised kernels (f32 activations quantised to int8 x 4- or 8-bit weights), generated.

The same contract and packed format as the AVX2 kernels (``quant_x86``,
``kernels_src/runtime/at_qkernel.h``): the ``qpanel8`` format of
:func:`autotune.quant.pack_panels`, panels of 8 columns, per sub-block of 32 rows
of K four (4 bits) or eight (8 bits) vectors of 32 bytes whose byte ``4c + j``
holds column c's code(s).  Generated C with ``arm_neon.h`` intrinsics, one
translation unit per ISA level, each compiled with that level's flags only
(the runtime keeps the aarch64 baseline):

* ``dotprod`` (FEAT_DotProd, Armv8.2-A; ``SDOT (by element)`` of the Arm
  Architecture Reference Manual for A-profile):
  ``vdotq_laneq_s32(acc, w, a, lane)`` adds, per int32 lane i, the dot product of
  bytes ``4i..4i+3`` of w with bytes ``4*lane..4*lane+3`` of a: 16 bytes of a
  panel vector are 4 columns x 4 values of K, and 4 consecutive activation codes
  are one lane of A's sub-block, exactly the format's byte order.  8 bits: vector
  g holds ``k = 4g..4g+3``.  4 bits: the low nibbles (``and 0x0F``) are
  ``k = 8v..8v+3`` and the high ones (``ushr #4``) ``k = 8v+4..8v+7``, codes
  0..15 as signed bytes; the zero point times the block's sum of codes is taken
  off at the end of the block, as the AVX2 kernels do.
* ``i8mm`` (FEAT_I8MM; ``SMMLA (vector)``): ``vmmlaq_s32(acc, a, b)`` adds
  the 2x2 int32 product of two rows of 8 int8 (a) by two columns of 8 int8 (b).
  Two rows of A give a, 8 consecutive values of K each (``zip1/zip2`` of their
  64-bit halves); two columns give b: for 4 bits ``zip1/zip2`` of the low and the
  high nibbles' 32-bit words (a column's 4 low then its 4 high nibbles are
  ``k = 8v..8v+7``), for 8 bits of vectors ``2e`` and ``2e+1``.  At the end of a
  block ``zip1/zip2`` of two 2x2 tiles' 64-bit halves give each row's 4 columns.

Per block and column, in order of K: ``isum = int32 - zero_point * sum(qa)``
(exact: integers below 2**24) and ``C += float(isum) * (sa * sw)``, one FMA: the
arithmetic of :func:`autotune.quant.reference_qmatmul`, which a kernel differs
from by that step's rounding only.  An int32 sum never overflows: a block of at
most 4096 values of K adds at most ``4096 * 15 * 127`` (4 bits) or
``4096 * 127 * 127`` (8 bits).
"""

from __future__ import annotations

from typing import Sequence

from ..contract import qkernel_signature as signature, qkernel_unused
from ..families.neon import QUANT_LEVELS
from ..qformat import PANEL, SUB, SYMMETRIC_ZERO_POINT, weight_format
from ..specs import QKernelSpec
from . import QuantUnit

#: Each level's architecture flag: only its own translation unit is compiled with it.
MARCH = {"dotprod": "-march=armv8.2-a+dotprod", "i8mm": "-march=armv8.2-a+i8mm"}
#: The ACLE macro the compiler defines with each level's flag: the unit's guard.
ACLE_MACRO = {"dotprod": "__ARM_FEATURE_DOTPROD", "i8mm": "__ARM_FEATURE_MATMUL_INT8"}


def _prologue(k: QKernelSpec) -> list[str]:
    four = k.kind != "q8"
    out = []
    if four:
        out.append("    const uint8x16_t low4 = vdupq_n_u8(0x0F);")
    if k.kind == "q4s":
        out.append(f"    const float32x4_t zero_point = vdupq_n_f32({SYMMETRIC_ZERO_POINT}.0f);")
    out += qkernel_unused(k.kind)
    for r in range(k.mr):
        for p in range(k.panels):
            out.append("    " + " ".join(f"float32x4_t c{r}_{p}_{h} = load_c ? vld1q_f32(C + {r} * ldc + "
                                         f"{p * PANEL + 4 * h}) : vdupq_n_f32(0.0f);" for h in (0, 1)))
    return out


def _scaling(k: QKernelSpec, isum: dict[tuple[int, int, int], str]) -> list[str]:
    """The block's scaling step from isum[(row, panel, half)] (an int32x4 expression or name)."""
    four = k.kind != "q8"
    out = ["        /* The block's scaling step: C += float(isum) * (sa * sw), one FMA per column. */"]
    for p in range(k.panels):
        for h in (0, 1):
            out.append(f"        const float32x4_t w{p}_{h} = vld1q_f32(ws + {p} * sstride + b * {PANEL} + {4 * h});")
            if k.kind == "q4a":
                out.append(f"        const float32x4_t z{p}_{h} = vld1q_f32(wz + {p} * sstride + b * {PANEL} + {4 * h});")
    for r in range(k.mr):
        out.append(f"        const float32x4_t sa{r} = vdupq_n_f32(sa[{r} * lds + b]);")
        if four:
            out.append(f"        const float32x4_t as{r} = vdupq_n_f32(asum[{r} * lds + b]);")
        for p in range(k.panels):
            for h in (0, 1):
                x = f"vcvtq_f32_s32({isum[r, p, h]})"
                if four:
                    zero = "zero_point" if k.kind == "q4s" else f"z{p}_{h}"
                    x = f"vfmsq_f32({x}, {zero}, as{r})"  # exact: integers below 2^24
                out.append(f"        c{r}_{p}_{h} = vfmaq_f32(c{r}_{p}_{h}, {x}, vmulq_f32(sa{r}, w{p}_{h}));")
    return out


def _epilogue(k: QKernelSpec) -> list[str]:
    out = ["    }"]
    for r in range(k.mr):
        for p in range(k.panels):
            for h in (0, 1):
                out.append(f"    vst1q_f32(C + {r} * ldc + {p * PANEL + 4 * h}, c{r}_{p}_{h});")
    out.append("}")
    return out


def _load_a(k: QKernelSpec) -> list[str]:
    out = []
    for r in range(k.mr):
        out.append(f"            const int8_t *a{r} = qa + {r} * lda + t * {SUB};")
        out.append(f"            const int8x16_t a{r}_0 = vld1q_s8(a{r}), a{r}_1 = vld1q_s8(a{r} + 16);")
    return out


def _dotprod_kernel(k: QKernelSpec) -> list[str]:
    four = k.kind != "q8"
    bps = weight_format(k.kind).sub_bytes
    out = ["    for (int64_t b = 0; b < blocks; ++b) {"]
    for r in range(k.mr):
        for p in range(k.panels):
            out.append("        " + " ".join(f"int32x4_t s{r}_{p}_{h} = vdupq_n_s32(0);" for h in (0, 1)))
    out.append("        for (int64_t u = 0; u < sub; ++u) {")
    out.append("            const int64_t t = b * sub + u; /* sub-block index along K */")
    out += _load_a(k)
    groups = range(4) if four else range(8)
    for g in groups:
        for p in range(k.panels):
            for h in (0, 1):
                src = f"wq + {p} * wstride + t * {bps} + {32 * g + 16 * h}"
                if four:
                    out.append(f"            {{ /* k = 8*{g} .. 8*{g}+7, columns {4 * h}..{4 * h + 3} of panel {p} */")
                    out.append(f"                const uint8x16_t raw = vld1q_u8({src});")
                    out.append("                const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(raw, low4));")
                    out.append("                const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));")
                    for r in range(k.mr):
                        half, lane = g // 2, 2 * (g % 2)
                        out.append(f"                s{r}_{p}_{h} = vdotq_laneq_s32(s{r}_{p}_{h}, lo, a{r}_{half}, {lane});")
                        out.append(f"                s{r}_{p}_{h} = vdotq_laneq_s32(s{r}_{p}_{h}, hi, a{r}_{half}, {lane + 1});")
                else:
                    out.append(f"            {{ /* k = 4*{g} .. 4*{g}+3, columns {4 * h}..{4 * h + 3} of panel {p} */")
                    out.append(f"                const int8x16_t w = vld1q_s8((const int8_t *)({src}));")
                    for r in range(k.mr):
                        out.append(f"                s{r}_{p}_{h} = vdotq_laneq_s32(s{r}_{p}_{h}, w, a{r}_{g // 4}, {g % 4});")
                out.append("            }")
    out.append("        }")
    isum = {(r, p, h): f"s{r}_{p}_{h}" for r in range(k.mr) for p in range(k.panels) for h in (0, 1)}
    return out + _scaling(k, isum)


def _i8mm_kernel(k: QKernelSpec) -> list[str]:
    four = k.kind != "q8"
    bps = weight_format(k.kind).sub_bytes
    pairs = range(k.mr // 2)
    out = ["    for (int64_t b = 0; b < blocks; ++b) {",
           "        /* s{pair}_{panel}_{j}: rows 2*pair, 2*pair+1 x columns 2j, 2j+1 of the panel, as SMMLA's 2x2. */"]
    for q in pairs:
        for p in range(k.panels):
            out.append("        " + " ".join(f"int32x4_t s{q}_{p}_{j} = vdupq_n_s32(0);" for j in range(4)))
    out.append("        for (int64_t u = 0; u < sub; ++u) {")
    out.append("            const int64_t t = b * sub + u; /* sub-block index along K */")
    out += _load_a(k)
    for e in range(4):
        out.append(f"            {{ /* k = 8*{e} .. 8*{e}+7 */")
        zip_ = "vzip1q_s64" if e % 2 == 0 else "vzip2q_s64"
        for q in pairs:
            r0, r1 = 2 * q, 2 * q + 1
            out.append(f"                const int8x16_t ap{q} = vreinterpretq_s8_s64({zip_}("
                       f"vreinterpretq_s64_s8(a{r0}_{e // 2}), vreinterpretq_s64_s8(a{r1}_{e // 2})));")
        for p in range(k.panels):
            for h in (0, 1):
                if four:
                    src = f"wq + {p} * wstride + t * {bps} + {32 * e + 16 * h}"
                    out.append(f"                const uint8x16_t raw{p}_{h} = vld1q_u8({src});")
                    out.append(f"                const uint32x4_t lo{p}_{h} = vreinterpretq_u32_u8(vandq_u8(raw{p}_{h}, low4));")
                    out.append(f"                const uint32x4_t hi{p}_{h} = vreinterpretq_u32_u8(vshrq_n_u8(raw{p}_{h}, 4));")
                    first, second = f"lo{p}_{h}", f"hi{p}_{h}"
                else:
                    for g in (2 * e, 2 * e + 1):
                        src = f"wq + {p} * wstride + t * {bps} + {32 * g + 16 * h}"
                        out.append(f"                const uint32x4_t w{p}_{h}_{g % 2} = vreinterpretq_u32_u8(vld1q_u8({src}));")
                    first, second = f"w{p}_{h}_0", f"w{p}_{h}_1"
                for j, zip_ in ((2 * h, "vzip1q_u32"), (2 * h + 1, "vzip2q_u32")):
                    bcols = f"vreinterpretq_s8_u32({zip_}({first}, {second}))"
                    for q in pairs:
                        out.append(f"                s{q}_{p}_{j} = vmmlaq_s32(s{q}_{p}_{j}, ap{q}, {bcols});")
        out.append("            }")
    out.append("        }")
    isum = {}
    for q in pairs:
        for p in range(k.panels):
            for h in (0, 1):
                left, right = f"vreinterpretq_s64_s32(s{q}_{p}_{2 * h})", f"vreinterpretq_s64_s32(s{q}_{p}_{2 * h + 1})"
                isum[2 * q, p, h] = f"vreinterpretq_s32_s64(vzip1q_s64({left}, {right}))"
                isum[2 * q + 1, p, h] = f"vreinterpretq_s32_s64(vzip2q_s64({left}, {right}))"
    return out + _scaling(k, isum)


def _kernel(k: QKernelSpec) -> str:
    four = k.kind != "q8"
    head = [f"/* {k.name}: {k.mr} rows x {k.nr} columns ({k.panels} panel{'s' * (k.panels > 1)}), "
            f"{'4-bit' if four else '8-bit'} weights{', zero points per block' if k.kind == 'q4a' else ''}, "
            f"{'SMMLA' if k.isa == 'i8mm' else 'SDOT'}. */",
            signature(k.name), "{"]
    body = _dotprod_kernel(k) if k.isa == "dotprod" else _i8mm_kernel(k)
    return "\n".join(head + _prologue(k) + body + _epilogue(k))


def generate(kernels: Sequence[QKernelSpec]) -> str:
    """One translation unit with every kernel of ``kernels`` (all of one level)."""
    levels = {k.isa for k in kernels}
    if len(levels) != 1:
        raise ValueError(f"one ISA level per translation unit, not {sorted(levels)}")
    level = levels.pop()
    head = [
        "/* Generated by autotune.codegen.quant_neon from QKernelSpec records "
        f"({', '.join(k.name for k in sorted(kernels))}).",
        " * Do not edit: re-run `autotune install`.  Contract: kernels_src/runtime/at_qkernel.h;",
        " * packed weights: autotune.quant.pack_panels. */",
        f"#if !defined({ACLE_MACRO[level]})",
        f"#error \"these kernels need {level}: compile them with {MARCH[level]}\"",
        "#endif",
        "#include <arm_neon.h>",
        "#include <stdint.h>",
        "",
    ]
    return "\n".join(head + [_kernel(k) + "\n" for k in sorted(kernels)])


def units(kernels: Sequence[QKernelSpec]) -> list[QuantUnit]:
    """``kernels`` as one translation unit per level, in QUANT_LEVELS' order, each with its -march."""
    return [QuantUnit(f"at_qneon_{level}.c", generate(mine), (MARCH[level],)) for level in QUANT_LEVELS
            if (mine := [k for k in kernels if k.isa == level])]
