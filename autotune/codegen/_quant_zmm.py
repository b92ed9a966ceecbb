"""The x86 quantised kernels on zmm (ISA ``avx512vnnizmm``), for :mod:`autotune.codegen.quant_x86`.

They read the ``qpanel8`` format the ymm kernels read (panels of 8 columns, whose
sub-blocks lie ``wstride`` bytes apart): one zmm holds two panels, the low half
from panel ``2q`` and the high half from panel ``2q + 1`` (two 32-byte loads,
``vinserti64x4``), so its 16 int32 lanes are 16 consecutive columns of C and the
tile's rows store as whole 64-byte vectors.  ``nr`` is 16 or 32 (one or two zmm
per row): it divides ``qformat.PAD_COLUMNS``, so the column padding and qgemm.c's
per-thread units stay as they are.

Four activation codes broadcast to every lane (``vpbroadcastd`` from memory, or the
signed operand's embedded ``{1to16}`` where the compiler folds it) meet the weights
in ``vpdpbusd``:

* 4 bits: the low and high nibbles (unsigned, ``vpandd``/``vpsrld``) meet the codes
  as in the ymm VNNI kernels;
* 8 bits: AVX-512 has no ``vpsignb``, so rather than ``|w| x sign(a, w)`` the codes
  are made unsigned, ``w + 128`` (``vpxord`` with 0x80), and the block's int32 sums
  start at ``-128 * asum`` (the block's sum of A's codes, which qgemm.c computes for
  every kind): after the block they hold the exact ``isum`` and no per-row sign
  step is left in the loop.  The sums stay within int32: ``|128 asum|`` and the
  partial sums of ``(w + 128) a`` are each below 4096 * 255 * 127 < 2**27.

The block's scaling step is the ymm kernels' (one FMA per block, after the zero
point's ``fnmadd`` for 4 bits), lane for lane, so their results are the same bits.

The kernels are written against a few ``at_z_*`` primitives over ``at_zi``/``at_zf``.
Compiled for real they are AVX-512 intrinsics in functions with the ISA's target
attribute; for ``emulate_vnni`` they are pairs of ymm computed with AVX2 (the
``vpdpbusd`` of :data:`autotune.codegen.quant_x86._EMULATED_DPBUSD` per half), so
the kernels' loads, lane order, sums and scaling run and are checked on a CPU
without AVX-512, the kernel text being the same in both.
"""

from __future__ import annotations

from ..contract import qkernel_signature as _signature
from ..families.x86 import QUANT_LANES, quant_chains
from ..qformat import PANEL, SUB, SYMMETRIC_ZERO_POINT, weight_format
from ..specs import QKernelSpec

ISA = "avx512vnnizmm"
#: The target attribute of the real kernels and primitives: AVX512F and VNNI only.
TARGET = "avx512f,avx512vnni"


def _real_primitives() -> str:
    """The primitives on zmm (AVX512F, AVX512_VNNI)."""
    return f"""/* The zmm kernels' primitives on AVX-512 (vpdpbusd on zmm needs AVX512_VNNI). */
typedef __m512i at_zi;
typedef __m512 at_zf;
#define AT_Z static inline __attribute__((always_inline, target("{TARGET}")))
/* 32 bytes of panel p in the low half, of panel p + 1 in the high half: 16 columns in order. */
AT_Z at_zi at_z_load2(const uint8_t *lo, const uint8_t *hi)
{{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}}
AT_Z at_zf at_z_load2_ps(const float *lo, const float *hi)
{{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(lo))),
                                               _mm256_castps_pd(_mm256_loadu_ps(hi)), 1));
}}
AT_Z at_zi at_z_load(const int32_t *p) {{ return _mm512_loadu_si512(p); }}
AT_Z at_zf at_z_load_ps(const float *p) {{ return _mm512_loadu_ps(p); }}
AT_Z void at_z_store_ps(float *p, at_zf x) {{ _mm512_storeu_ps(p, x); }}
AT_Z at_zf at_z_zero_ps(void) {{ return _mm512_setzero_ps(); }}
AT_Z at_zi at_z_set1(int32_t x) {{ return _mm512_set1_epi32(x); }}
AT_Z at_zf at_z_set1_ps(float x) {{ return _mm512_set1_ps(x); }}
AT_Z at_zi at_z_and(at_zi x, at_zi y) {{ return _mm512_and_si512(x, y); }}
AT_Z at_zi at_z_xor(at_zi x, at_zi y) {{ return _mm512_xor_si512(x, y); }}
AT_Z at_zi at_z_add(at_zi x, at_zi y) {{ return _mm512_add_epi32(x, y); }}
AT_Z at_zi at_z_sra4(at_zi x) {{ return _mm512_srai_epi32(x, 4); }}
/* Each byte's high nibble to its low bits (a 32-bit shift: AVX512F has no 16-bit one
 * without AVX512BW; the bits it moves across bytes are masked off after). */
AT_Z at_zi at_z_srl4(at_zi x) {{ return _mm512_srli_epi32(x, 4); }}
/* sum + the four products (unsigned bytes of u, the signed codes a[0..3]) per lane. */
AT_Z at_zi at_z_dot(at_zi sum, at_zi u, const int8_t *a)
{{
    return _mm512_dpbusd_epi32(sum, u, _mm512_set1_epi32(*(const int32_t *)a));
}}
AT_Z at_zf at_z_cvt(at_zi x) {{ return _mm512_cvtepi32_ps(x); }}
AT_Z at_zf at_z_mul(at_zf x, at_zf y) {{ return _mm512_mul_ps(x, y); }}
AT_Z at_zf at_z_fmadd(at_zf x, at_zf y, at_zf z) {{ return _mm512_fmadd_ps(x, y, z); }}
AT_Z at_zf at_z_fnmadd(at_zf x, at_zf y, at_zf z) {{ return _mm512_fnmadd_ps(x, y, z); }}
"""


def _emulated_primitives() -> str:
    """The same primitives on pairs of ymm, in exact AVX2 arithmetic (at_emulated_dpbusd per half)."""
    def each(ret: str, expr: str) -> str:
        return f"{{ {ret} r; for (int h = 0; h < 2; ++h) r.h[h] = {expr}; return r; }}"

    return f"""/* The zmm kernels' primitives emulated on pairs of ymm (validation without AVX-512). */
typedef struct {{ __m256i h[2]; }} at_zi;
typedef struct {{ __m256 h[2]; }} at_zf;
#define AT_Z static inline __attribute__((always_inline))
AT_Z at_zi at_z_load2(const uint8_t *lo, const uint8_t *hi)
{{
    at_zi r = {{{{_mm256_loadu_si256((const __m256i *)lo), _mm256_loadu_si256((const __m256i *)hi)}}}};
    return r;
}}
AT_Z at_zf at_z_load2_ps(const float *lo, const float *hi)
{{
    at_zf r = {{{{_mm256_loadu_ps(lo), _mm256_loadu_ps(hi)}}}};
    return r;
}}
AT_Z at_zi at_z_load(const int32_t *p) {each("at_zi", "_mm256_loadu_si256((const __m256i *)(p + 8 * h))")}
AT_Z at_zf at_z_load_ps(const float *p) {each("at_zf", "_mm256_loadu_ps(p + 8 * h)")}
AT_Z void at_z_store_ps(float *p, at_zf x) {{ _mm256_storeu_ps(p, x.h[0]); _mm256_storeu_ps(p + 8, x.h[1]); }}
AT_Z at_zf at_z_zero_ps(void) {each("at_zf", "_mm256_setzero_ps()")}
AT_Z at_zi at_z_set1(int32_t x) {each("at_zi", "_mm256_set1_epi32(x)")}
AT_Z at_zf at_z_set1_ps(float x) {each("at_zf", "_mm256_set1_ps(x)")}
AT_Z at_zi at_z_and(at_zi x, at_zi y) {each("at_zi", "_mm256_and_si256(x.h[h], y.h[h])")}
AT_Z at_zi at_z_xor(at_zi x, at_zi y) {each("at_zi", "_mm256_xor_si256(x.h[h], y.h[h])")}
AT_Z at_zi at_z_add(at_zi x, at_zi y) {each("at_zi", "_mm256_add_epi32(x.h[h], y.h[h])")}
AT_Z at_zi at_z_sra4(at_zi x) {each("at_zi", "_mm256_srai_epi32(x.h[h], 4)")}
AT_Z at_zi at_z_srl4(at_zi x) {each("at_zi", "_mm256_srli_epi32(x.h[h], 4)")}
AT_Z at_zi at_z_dot(at_zi sum, at_zi u, const int8_t *a)
{each("at_zi", "at_emulated_dpbusd(sum.h[h], u.h[h], _mm256_set1_epi32(*(const int32_t *)a))")}
AT_Z at_zf at_z_cvt(at_zi x) {each("at_zf", "_mm256_cvtepi32_ps(x.h[h])")}
AT_Z at_zf at_z_mul(at_zf x, at_zf y) {each("at_zf", "_mm256_mul_ps(x.h[h], y.h[h])")}
AT_Z at_zf at_z_fmadd(at_zf x, at_zf y, at_zf z) {each("at_zf", "_mm256_fmadd_ps(x.h[h], y.h[h], z.h[h])")}
AT_Z at_zf at_z_fnmadd(at_zf x, at_zf y, at_zf z) {each("at_zf", "_mm256_fnmadd_ps(x.h[h], y.h[h], z.h[h])")}
"""


def primitives(emulate: bool) -> str:
    """The C text the zmm kernels need before them: real AVX-512 or emulated on ymm.

    Guarded: the AMX kernels' unit (autotune.codegen.quant_amx, whose scaling step
    is written against them) may share one source with this one's."""
    text = _emulated_primitives() if emulate else _real_primitives()
    return f"#ifndef AT_ZMM_PRIMITIVES\n#define AT_ZMM_PRIMITIVES\n{text}#endif\n"


def kernel(k: QKernelSpec, emulate: bool = False) -> str:
    """The C function of one zmm kernel (``k.isa`` is :data:`ISA`), against the primitives."""
    if k.isa != ISA:
        raise ValueError(f"{k.name} is not a zmm kernel")
    lanes = QUANT_LANES[ISA]
    mr, nv = k.mr, k.nr // lanes
    rows, vecs = range(mr), range(nv)
    fmt = weight_format(k.kind)
    four, bpb = fmt.bits == 4, fmt.sub_bytes

    def panels(q: int, offset: str) -> str:
        """Panels 2q and 2q + 1 of the packed codes at ``offset`` bytes into a panel."""
        return f"wq + {2 * q} * wstride + {offset}, wq + {2 * q + 1} * wstride + {offset}"

    attribute = "" if emulate else f"__attribute__((target(\"{TARGET}\")))\n"
    out = [f"/* {k.name}: {mr} rows x {k.nr} columns ({nv} zmm of 2 panels per row), "
           f"{'4-bit' if four else '8-bit'} weights{', zero points per block' if fmt.zero_points else ''}, "
           f"vpdpbusd on zmm. */",
           attribute + _signature(k.name), "{"]
    # Each tile's block sum is split over `chains` partial sums, the dots of a
    # sub-block dealt out in turn (quant_chains: enough independent vpdpbusd chains
    # to hide the instruction's latency), and added back before the scaling step.
    # With two or more, the high nibbles go unshifted (raw & 0xF0, 16 x the code)
    # into chains of their own, whose sum is shifted back once per block: one
    # instruction a block for the tile instead of one per 64 weights.  Exact: those
    # sums are multiples of 16 (below 2^27 in magnitude for a block of 4096 rows).
    chains = quant_chains(k.isa, mr, k.nr)
    links = [f"_{j}" for j in range(chains)] if chains > 1 else [""]
    split_nibbles = four and chains > 1
    if four:
        out.append("    const at_zi low4 = at_z_set1(0x0F0F0F0F);")
        if split_nibbles:
            out.append("    const at_zi high4 = at_z_set1((int32_t)0xF0F0F0F0u);")
    else:
        out.append("    const at_zi flip = at_z_set1((int32_t)0x80808080u); /* w + 128: unsigned codes */")
    if k.kind == "q4s":
        out.append(f"    const at_zf zero_point = at_z_set1_ps({SYMMETRIC_ZERO_POINT}.0f);")
    if not fmt.zero_points:
        out.append("    (void)wz; /* no zero points */")
    out.append("    /* load_c: C holds the sums of the blocks before these (K is covered in slices). */")
    for r in rows:
        out.append("    " + " ".join(f"at_zf c{r}_{q} = load_c ? at_z_load_ps(C + {r} * ldc + {q * lanes}) "
                                     f": at_z_zero_ps();" for q in vecs))
    out.append(f"    for (int64_t b = 0; b < blocks; ++b) {{ /* {chains} partial sum(s) per tile */")
    for r in rows:
        if four:
            start = "at_z_set1(0)"
        else:
            # -128 x the block's code sum: what the 128 added to every weight code contributes
            out.append(f"        const at_zi start{r} = at_z_set1(-128 * (int32_t)asum[{r} * lds + b]);")
            start = f"start{r}"
        for q in vecs:
            out.append("        " + " ".join(f"at_zi s{r}_{q}{link} = {start if j == 0 else 'at_z_set1(0)'};"
                                             for j, link in enumerate(links)))
    out.append("        for (int64_t u = 0; u < sub; ++u) {")
    out.append("            const int64_t t = b * sub + u; /* sub-block index along K */")
    for r in rows:
        out.append(f"            const int8_t *a{r} = qa + {r} * lda + t * {SUB};")

    def dot(r: int, q: int, number: int, codes: str, offset: int) -> str:
        s = f"s{r}_{q}{links[number % chains]}"
        return f"{s} = at_z_dot({s}, {codes}, a{r} + {offset});"

    for v in range(4 if four else 8):
        for q in vecs:
            at, columns = f"t * {bpb} + {v * 32}", f"columns {q * lanes} .. {q * lanes + lanes - 1}"
            if four:
                out.append(f"            {{ /* k = 8*{v} .. 8*{v}+7 of {columns} */")
                out.append(f"                const at_zi raw = at_z_load2({panels(q, at)});")
                hi = "at_z_and(raw, high4)" if split_nibbles else "at_z_and(at_z_srl4(raw), low4)"
                out.append(f"                const at_zi lo = at_z_and(raw, low4), hi = {hi};")
                for r in rows:
                    out.append(f"                {dot(r, q, 2 * v, 'lo', 8 * v)} {dot(r, q, 2 * v + 1, 'hi', 8 * v + 4)}")
            else:
                out.append(f"            {{ /* k = 4*{v} .. 4*{v}+3 of {columns} */")
                out.append(f"                const at_zi w = at_z_xor(at_z_load2({panels(q, at)}), flip);")
                for r in rows:
                    out.append(f"                {dot(r, q, v, 'w', 4 * v)}")
            out.append("            }")
    out.append("        }")
    def tree(parts: list[str]) -> str:  # log2(len) dependent adds
        while len(parts) > 1:
            parts = [f"at_z_add({x}, {y})" for x, y in zip(parts[::2], parts[1::2])] + parts[len(parts) & ~1:]
        return parts[0]

    if chains > 1:
        for r in rows:
            for q in vecs:
                parts = [f"s{r}_{q}{link}" for link in links]
                # The high nibbles' dots are the odd ones: 2v + 1 deals them to the odd chains.
                total = f"at_z_add({tree(parts[::2])}, at_z_sra4({tree(parts[1::2])}))" if split_nibbles \
                    else tree(parts)
                out.append(f"        const at_zi s{r}_{q} = {total};")
    out.append("        /* The block's scaling step: C += float(isum) * (sa * sw), one FMA, as on ymm. */")
    for q in vecs:
        lo, hi = f"{2 * q} * sstride + b * {PANEL}", f"{2 * q + 1} * sstride + b * {PANEL}"
        out.append(f"        const at_zf w{q} = at_z_load2_ps(ws + {lo}, ws + {hi});")
        if fmt.zero_points:
            out.append(f"        const at_zf z{q} = at_z_load2_ps(wz + {lo}, wz + {hi});")
    for r in rows:
        out.append(f"        const at_zf sa{r} = at_z_set1_ps(sa[{r} * lds + b]);")
        if four:
            out.append(f"        const at_zf as{r} = at_z_set1_ps(asum[{r} * lds + b]);")
        for q in vecs:
            isum = f"at_z_cvt(s{r}_{q})"
            if four:
                isum = f"at_z_fnmadd({'zero_point' if k.kind == 'q4s' else f'z{q}'}, as{r}, {isum})"
            out.append(f"        c{r}_{q} = at_z_fmadd({isum}, at_z_mul(sa{r}, w{q}), c{r}_{q});")
    out.append("    }")
    for r in rows:
        out.append("    " + " ".join(f"at_z_store_ps(C + {r} * ldc + {q * lanes}, c{r}_{q});" for q in vecs))
    out.append("}")
    return "\n".join(out)
