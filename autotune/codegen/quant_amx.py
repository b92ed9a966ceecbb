"""x86 AMX quantised kernels (int8 activations x 4- or 8-bit weights on tiles), generated.

Same contract as :mod:`autotune.codegen.quant_x86` (``kernels_src/runtime/at_qkernel.h``):
an ``mr x nr`` block of C from A's int8 codes and W in the ``qpanel8`` format, over
``blocks`` blocks of K, stored row-major at ``ldc`` and continued from C when
``load_c`` is set.  The products go through the tile unit, the rest through AVX2:

* **Tiles** (:func:`autotune.families.x86.amx_tiles`): C as int32 tiles of ``rows``
  x 16 columns (``rows = min(mr, 16)``), one A tile per 16 rows, one B tile per 16
  columns.  A tile rows are A's codes, loaded straight from the quantised A at its row
  stride; B tiles are the weights' codes as bytes in the order ``tdpbssd`` reads (row
  ``i`` holds, per column, the four codes of ``k = 4i .. 4i+3``).  ``qpanel8`` already
  keeps that order per panel of 8 columns, so a B tile is two panels side by side:
  the 8-bit codes are copied (two panels' 32-byte rows into one 64-byte row), the
  4-bit ones expanded in registers (``vpand`` / ``vpsrlw``: the low nibbles of vector
  ``v`` are tile row ``2v``, the high ones row ``2v + 1``) and stored to a 64-byte
  aligned buffer on the stack, since ``tileloadd`` only reads memory.  The packed
  format stays ``qpanel8``: the weights serve every x86 kernel, and an AMX layout of
  their own would double the memory of a model for a copy that costs as little as the
  expansion the 4-bit codes need anyway.
* **K steps**: ``tdpbssd`` (signed x signed bytes, four products per int32 lane)
  takes up to 64 bytes of K per A row.  A block of an even number of 32-row
  sub-blocks is taken 64 at a time, a block of 32 (the common format) in one step
  of 32, each with its own tile configuration (``ldtilecfg`` once per call).
  ``tdpbusd`` would read A as unsigned; A's codes are signed and the weights' are
  either signed (8 bits) or nibbles that are also valid signed bytes, so one signed
  instruction serves every kind.  Symmetric 4-bit codes have their zero point (8)
  taken off as bytes in the expansion (``vpsubb``, codes -8 .. 7), so their sums are
  ``isum`` itself; asymmetric ones keep unsigned nibbles and subtract
  ``z * sum(qa of the block)`` in f32 (exact: integers below 2**24).
* **Block scales**: every block ends with its int32 tiles stored (``tilestored``) to
  a stack buffer and ``C += float(isum) * (sa * sw)`` with one FMA per 16 columns, in
  order of K, on C's tile in memory: the vector kernels' arithmetic, lane for lane,
  so the results are within :func:`autotune.quant.scaling_error_bound` of the
  reference.  With blocks of 32 this step, not the tile products, bounds the kernel
  (a 2-vCPU Xeon, 2026-12-06: half the samples of a 32x32 kernel when it ran eight
  columns an AVX2 instruction), so it is written against the zmm kernels'
  primitives (:mod:`autotune.codegen._quant_zmm`): AVX-512 for real, pairs of ymm
  where the tiles are emulated.

The tile state is requested once per process by the runtime (``features.c``:
``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); where it is refused the
``amx_tile`` feature tests false and qgemm.c runs the other kernels.  A call leaves
its configuration loaded for the next one (``sttilecfg`` tells whether the one in
force is its own; ``ldtilecfg`` and ``tilerelease`` on every call took 7 % of a
32x32 kernel's samples at K = 4096, and the driver calls a kernel per slice of K),
and qgemm.c releases the tiles (``tilerelease``) when a thread's share of the
product is done, so no thread keeps the tile state past a call.

``units(kernels, emulate=True)`` writes the same kernels with the tile instructions
replaced by plain C that does what each does on the configured shapes (and records,
instead of raising ``#UD``, a configuration the instruction would refuse:
``at_amx_emulated_fault()``), without the target attribute: the test suite checks
the kernels' packing, indexing and scaling on CPUs without AMX that way.
"""

from __future__ import annotations

from typing import Sequence

from ..contract import qkernel_signature as _signature, qkernel_unused
from ..families.x86 import AMX_ISA, AMX_ROW_BYTES, AMX_ROWS, AMX_TILE_COLUMNS, AMX_TILES, amx_fits, amx_tiles
from ..qformat import PANEL, SUB, SYMMETRIC_ZERO_POINT, weight_format
from ..specs import QKernelSpec
from . import QuantUnit, _quant_zmm
from .quant_x86 import _EMULATED_DPBUSD

FLAGS_GUARD = "!defined(__AVX2__) || !defined(__FMA__)"
#: The compilers' target attribute of the AMX functions (the unit's flags give AVX2 and FMA;
#: the scaling step's zmm primitives need AVX512F and, by their own attribute, VNNI).
TARGET_ATTRIBUTE = f"amx-tile,amx-int8,{_quant_zmm.TARGET}"
#: The emulated mode's report of a tile operation the hardware would refuse (#UD).
FAULT_FUNCTION = "at_amx_emulated_fault"

#: The tile configuration's memory form (ldtilecfg's 64 bytes, palette 1) and the helper
#: that fills it: C tiles first, then A, then B, rows and bytes per row as the kernel uses them.
_CONFIG = f"""/* ldtilecfg's operand: palette, start row, then bytes per row and rows of each tile. */
typedef struct {{
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
}} at_amx_tilecfg;

/* Tiles 0 .. c-1 hold C (rows x {AMX_TILE_COLUMNS} int32), the next a hold A (rows x kbytes codes),
 * the next b hold B (kbytes / 4 rows of {AMX_TILE_COLUMNS} columns x 4 codes). */
static inline void at_amx_configure(at_amx_tilecfg *cfg, int c, int a, int b, int rows, int kbytes)
{{
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    int t = 0;
    for (int i = 0; i < c; ++i, ++t) cfg->rows[t] = (uint8_t)rows, cfg->colsb[t] = {AMX_ROW_BYTES};
    for (int i = 0; i < a; ++i, ++t) cfg->rows[t] = (uint8_t)rows, cfg->colsb[t] = (uint16_t)kbytes;
    for (int i = 0; i < b; ++i, ++t) cfg->rows[t] = (uint8_t)(kbytes / 4), cfg->colsb[t] = {AMX_ROW_BYTES};
}}
"""

#: The tile operations of the real kernels.  GCC 12's tileloadd and ldtilecfg are asm
#: statements that name only the pointer (and 8 bytes of the configuration), so the
#: compiler could drop the stores that fill a B buffer or the configuration, or move
#: them across the load: AT_AMX_FENCE passes the address to an empty asm that clobbers
#: memory, before (the stores happen first) and after (the next step's stay after).
#: clang's builtins need no help; the fences cost it nothing.
_REAL = """#define AT_AMX_FENCE(p) __asm__ volatile("" : : "r"(p) : "memory")
#define AT_AMX_CONFIG(cfg) do { AT_AMX_FENCE(cfg); _tile_loadconfig(cfg); } while (0)
#define AT_AMX_CURRENT(cfg) do { _tile_storeconfig(cfg); AT_AMX_FENCE(cfg); } while (0)
#define AT_AMX_ZERO(t) _tile_zero(t)
#define AT_AMX_LOAD(t, base, stride) \\
    do { AT_AMX_FENCE(base); _tile_loadd(t, base, stride); AT_AMX_FENCE(base); } while (0)
#define AT_AMX_STORE(t, base, stride) _tile_stored(t, base, stride)
#define AT_AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
"""

#: The tile operations in plain C: tiles as bytes per thread, each instruction's effect on
#: the configured rows and bytes per row (loads zero the rest of the tile, as tileloadd
#: does), and the shape checks whose failure is #UD on the hardware, recorded instead.
_EMULATED = f"""/* The AMX tile instructions emulated in C (validation on CPUs without AMX; not for speed). */
#include <stdatomic.h>
static _Thread_local struct {{
    at_amx_tilecfg cfg;
    int configured;
    uint8_t data[{AMX_TILES}][{AMX_ROWS}][{AMX_ROW_BYTES}];
}} at_amx_emu;
static _Atomic(const char *) at_amx_emu_fault;

/* The first tile operation the hardware would have refused (#UD), or NULL. */
const char *{FAULT_FUNCTION}(void) {{ return atomic_load(&at_amx_emu_fault); }}

static void at_amx_emu_refuse(const char *what)
{{
    const char *none = NULL;
    atomic_compare_exchange_strong(&at_amx_emu_fault, &none, what);
}}

static int at_amx_emu_usable(int t)
{{
    if (!at_amx_emu.configured || t < 0 || t >= {AMX_TILES} || !at_amx_emu.cfg.rows[t] || !at_amx_emu.cfg.colsb[t]) {{
        at_amx_emu_refuse("a tile used that the configuration does not hold");
        return 0;
    }}
    return 1;
}}

static void at_amx_emu_config(const at_amx_tilecfg *cfg)
{{
    int ok = cfg->palette == 1 && cfg->start_row == 0;
    for (int t = 0; t < 16; ++t) {{
        ok &= cfg->rows[t] <= {AMX_ROWS} && cfg->colsb[t] <= {AMX_ROW_BYTES} && !cfg->rows[t] == !cfg->colsb[t];
        ok &= t < {AMX_TILES} || (!cfg->rows[t] && !cfg->colsb[t]);
    }}
    if (!ok) at_amx_emu_refuse("ldtilecfg: a configuration palette 1 does not allow");
    at_amx_emu.cfg = *cfg;
    at_amx_emu.configured = ok;
    memset(at_amx_emu.data, 0, sizeof at_amx_emu.data);
}}

static void at_amx_emu_zero(int t)
{{
    if (at_amx_emu_usable(t)) memset(at_amx_emu.data[t], 0, sizeof at_amx_emu.data[t]);
}}

static void at_amx_emu_load(int t, const void *base, int64_t stride)
{{
    if (!at_amx_emu_usable(t)) return;
    memset(at_amx_emu.data[t], 0, sizeof at_amx_emu.data[t]);
    for (int r = 0; r < at_amx_emu.cfg.rows[t]; ++r)
        memcpy(at_amx_emu.data[t][r], (const uint8_t *)base + r * stride, at_amx_emu.cfg.colsb[t]);
}}

static void at_amx_emu_store(int t, void *base, int64_t stride)
{{
    if (!at_amx_emu_usable(t)) return;
    for (int r = 0; r < at_amx_emu.cfg.rows[t]; ++r)
        memcpy((uint8_t *)base + r * stride, at_amx_emu.data[t][r], at_amx_emu.cfg.colsb[t]);
}}

/* tdpbssd c, a, b: c[m][n] += sum over k, j of a[m][4k + j] * b[k][4n + j], signed bytes,
 * int32 lanes wrapping as the hardware's do (uint32 arithmetic: no signed overflow). */
static void at_amx_emu_dpbssd(int c, int a, int b)
{{
    if (!at_amx_emu_usable(c) || !at_amx_emu_usable(a) || !at_amx_emu_usable(b)) return;
    const at_amx_tilecfg *g = &at_amx_emu.cfg;
    if (c == a || c == b || a == b || g->colsb[c] % 4 || g->colsb[a] % 4 || g->rows[c] != g->rows[a] ||
        g->colsb[a] / 4 != g->rows[b] || g->colsb[c] != g->colsb[b]) {{
        at_amx_emu_refuse("tdpbssd: tiles of shapes that do not multiply");
        return;
    }}
    for (int m = 0; m < g->rows[c]; ++m)
        for (int n = 0; n < g->colsb[c] / 4; ++n) {{
            uint32_t sum;
            memcpy(&sum, &at_amx_emu.data[c][m][4 * n], 4);
            for (int k = 0; k < g->colsb[a] / 4; ++k)
                for (int j = 0; j < 4; ++j)
                    sum += (uint32_t)((int32_t)(int8_t)at_amx_emu.data[a][m][4 * k + j] *
                                      (int32_t)(int8_t)at_amx_emu.data[b][k][4 * n + j]);
            memcpy(&at_amx_emu.data[c][m][4 * n], &sum, 4);
        }}
}}

/* sttilecfg: the configuration in force, or 64 zero bytes where none is. */
static void at_amx_emu_current(at_amx_tilecfg *cfg)
{{
    if (at_amx_emu.configured) *cfg = at_amx_emu.cfg;
    else memset(cfg, 0, sizeof *cfg);
}}

#define AT_AMX_CONFIG(cfg) at_amx_emu_config(cfg)
#define AT_AMX_CURRENT(cfg) at_amx_emu_current(cfg)
#define AT_AMX_ZERO(t) at_amx_emu_zero(t)
#define AT_AMX_LOAD(t, base, stride) at_amx_emu_load(t, base, stride)
#define AT_AMX_STORE(t, base, stride) at_amx_emu_store(t, base, stride)
#define AT_AMX_DPBSSD(c, a, b) at_amx_emu_dpbssd(c, a, b)
"""


def _expand(k: QKernelSpec, group: int) -> list[str]:
    """The C lines writing sub-block ``t``'s codes of 16-column group ``group`` (panels
    ``2 group`` and ``2 group + 1``) as tile rows ``8h .. 8h + 7`` of ``wt[group]``."""
    four = k.kind != "q8"
    bpb = weight_format(k.kind).sub_bytes
    out = []
    for q in range(2):
        out.append(f"{{ /* panel {2 * group + q}: bytes {32 * q} .. {32 * q + 31} of each row */")
        out.append(f"    const uint8_t *w = wq + {2 * group + q} * wstride + t * {bpb};")
        out.append(f"    uint8_t *row = wt[{group}] + h * {8 * AMX_ROW_BYTES} + {32 * q};")
        if four:
            for v in range(4):
                out.append(f"    const __m256i raw{v} = _mm256_loadu_si256((const __m256i *)(w + {32 * v}));")
                lo = f"_mm256_and_si256(raw{v}, low4)"
                hi = f"_mm256_and_si256(_mm256_srli_epi16(raw{v}, 4), low4)"
                if k.kind == "q4s":  # the zero point off as bytes: codes -8 .. 7, isum itself
                    lo, hi = f"_mm256_sub_epi8({lo}, zero_point)", f"_mm256_sub_epi8({hi}, zero_point)"
                out.append(f"    _mm256_store_si256((__m256i *)(row + {2 * v * AMX_ROW_BYTES}), {lo});")
                out.append(f"    _mm256_store_si256((__m256i *)(row + {(2 * v + 1) * AMX_ROW_BYTES}), {hi});")
        else:
            for g in range(8):
                out.append(f"    _mm256_store_si256((__m256i *)(row + {g * AMX_ROW_BYTES}), "
                           f"_mm256_loadu_si256((const __m256i *)(w + {32 * g})));")
        out.append("}")
    return out


def _kernel(k: QKernelSpec, emulate: bool) -> str:
    mr, nr = k.mr, k.nr
    c_tiles, a_tiles, b_tiles = amx_tiles(mr, nr)
    rows = min(mr, AMX_ROWS)
    tile_c = {(i, g): i * b_tiles + g for i in range(a_tiles) for g in range(b_tiles)}
    tile_a = {i: c_tiles + i for i in range(a_tiles)}
    tile_b = {g: c_tiles + a_tiles + g for g in range(b_tiles)}
    four = k.kind != "q8"
    attribute = "" if emulate else f"__attribute__((target(\"{TARGET_ATTRIBUTE}\")))\n"
    out = [f"/* {k.name}: {mr} row{'s' * (mr > 1)} x {nr} columns on AMX tiles: {c_tiles} C tile"
           f"{'s' * (c_tiles > 1)} of {rows} x {AMX_TILE_COLUMNS} int32 ({a_tiles} A, {b_tiles} B), "
           f"{'4-bit' if four else '8-bit'} weights{', zero points per block' if k.kind == 'q4a' else ''}. */",
           attribute + _signature(k.name), "{",
           f"    _Alignas(64) uint8_t wt[{b_tiles}][{AMX_ROWS * AMX_ROW_BYTES}]; /* B tiles: a K step's codes as bytes */",
           f"    _Alignas(64) int32_t isum[{mr * nr}]; /* the block's sums, row stride {nr} */",
           "    at_amx_tilecfg cfg;",
           "    /* Blocks of an even number of sub-blocks go 64 bytes of K a step (a whole tile",
           "     * row); blocks of 32 in one step of 32. */",
           "    const int64_t step = sub % 2 ? 1 : 2;",
           f"    at_amx_configure(&cfg, {c_tiles}, {a_tiles}, {b_tiles}, {rows}, (int)(step * {SUB}));",
           "    /* The tiles stay configured from call to call (the driver releases them when the",
           "     * thread's share is done): ldtilecfg only where another shape is in force. */",
           "    at_amx_tilecfg now;",
           "    AT_AMX_CURRENT(&now);",
           "    if (memcmp(&now, &cfg, sizeof cfg)) AT_AMX_CONFIG(&cfg);"]
    if four:
        out.append("    const __m256i low4 = _mm256_set1_epi8(0x0F);")
    if k.kind == "q4s":
        out.append(f"    const __m256i zero_point = _mm256_set1_epi8({SYMMETRIC_ZERO_POINT});")
        out.append("    (void)asum; /* the zero point is taken off the codes */")
    out += qkernel_unused(k.kind)
    out += ["    if (!load_c)",
            f"        for (int64_t r = 0; r < {mr}; ++r) memset(C + r * ldc, 0, {4 * nr});",
            "    for (int64_t b = 0; b < blocks; ++b) {"]
    out += [f"        AT_AMX_ZERO({t});" for t in tile_c.values()]
    out += ["        for (int64_t u = 0; u < sub; u += step) {",
            "            for (int64_t h = 0; h < step; ++h) {",
            "                const int64_t t = b * sub + u + h; /* sub-block index along K */"]
    for g in range(b_tiles):
        out += ["                " + line for line in _expand(k, g)]
    out.append("            }")
    for g, t in tile_b.items():
        out.append(f"            AT_AMX_LOAD({t}, wt[{g}], {AMX_ROW_BYTES});")
    for i, t in tile_a.items():
        out.append(f"            AT_AMX_LOAD({t}, qa + {i * AMX_ROWS} * lda + (b * sub + u) * {SUB}, lda);")
    out += [f"            AT_AMX_DPBSSD({tile_c[i, g]}, {tile_a[i]}, {tile_b[g]});" for (i, g) in tile_c]
    out.append("        }")
    out += [f"        AT_AMX_STORE({t}, isum + {i * AMX_ROWS * nr + g * AMX_TILE_COLUMNS}, {4 * nr});"
            for (i, g), t in tile_c.items()]
    out.append("        /* The block's scaling step: C += float(isum) * (sa * sw), one FMA per 16 columns. */")
    groups = range(nr // AMX_TILE_COLUMNS)
    for q in groups:  # panels 2q and 2q + 1: the 16 columns of one zmm
        lo, hi = f"{2 * q} * sstride + b * {PANEL}", f"{2 * q + 1} * sstride + b * {PANEL}"
        out.append(f"        const at_zf w{q} = at_z_load2_ps(ws + {lo}, ws + {hi});")
        if k.kind == "q4a":
            out.append(f"        const at_zf z{q} = at_z_load2_ps(wz + {lo}, wz + {hi});")
    out += [f"        for (int64_t r = 0; r < {mr}; ++r) {{",
            "            const at_zf sar = at_z_set1_ps(sa[r * lds + b]);"]
    if k.kind == "q4a":
        out.append("            const at_zf asr = at_z_set1_ps(asum[r * lds + b]);")
    out += ["            float *c = C + r * ldc;", f"            const int32_t *s = isum + r * {nr};"]
    for q in groups:
        x = f"at_z_cvt(at_z_load(s + {q * AMX_TILE_COLUMNS}))"
        if k.kind == "q4a":
            x = f"at_z_fnmadd(z{q}, asr, {x})"
        out.append(f"            at_z_store_ps(c + {q * AMX_TILE_COLUMNS}, at_z_fmadd({x}, at_z_mul(sar, w{q}), "
                   f"at_z_load_ps(c + {q * AMX_TILE_COLUMNS})));")
    out += ["        }", "    }", "}"]
    return "\n".join(out)


def units(kernels: Sequence[QKernelSpec], emulate: bool = False) -> list[QuantUnit]:
    """``kernels`` as the one translation unit of :func:`generate` (the avx2 target's flags build it)."""
    return [QuantUnit("at_qkernels_amx.c", generate(kernels, emulate))]


def generate(kernels: Sequence[QKernelSpec], emulate: bool = False) -> str:
    """One translation unit with every AMX kernel of ``kernels``, compiled with the avx2 target's flags.

    The kernels carry the AMX target attribute; ``emulate`` writes them with the tile
    instructions in plain C (:data:`_EMULATED`) instead, to validate them without AMX.
    """
    wrong = [k.name for k in kernels if k.isa != AMX_ISA or not amx_fits(k.mr, k.nr)]
    if wrong:  # the tile counts below are the family's model
        raise ValueError(f"not AMX kernels of the tile model: {wrong}")
    head = [
        "/* Generated by autotune.codegen.quant_amx from QKernelSpec records "
        f"({', '.join(k.name for k in sorted(kernels))}).",
        " * Do not edit: re-run `autotune install`.  Contract: kernels_src/runtime/at_qkernel.h;",
        " * packed weights: autotune.quant.pack_panels" + (" (tile instructions emulated in C)" if emulate else "")
        + ". */",
        f"#if {FLAGS_GUARD}",
        "#error \"these kernels need AVX2 and FMA: compile them with the avx2 target's flags\"",
        "#endif",
        "#include <immintrin.h>",
        "#include <stdint.h>",
        "#include <string.h>",
        "",
        _CONFIG,
        _EMULATED if emulate else _REAL,
        *((_EMULATED_DPBUSD,) if emulate else ()),
        _quant_zmm.primitives(emulate),
    ]
    return "\n".join(head + [_kernel(k, emulate) + "\n" for k in sorted(kernels)])
