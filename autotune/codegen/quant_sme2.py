"""SME2 quantised kernels (f32 activations quantised to int8 x 4- or 8-bit weights), generated.

Two kernels per kind of weights (``q4s`` symmetric 4-bit, ``q4a`` asymmetric 4-bit,
``q8`` symmetric 8-bit), in one
AArch64 assembly file, written for every streaming vector length at once (they
read VL with ``cntw`` and step with ``addvl``/``incb``: one object
serves any SME2 CPU, unlike the float kernels of :mod:`autotune.codegen.sme2`,
which are specialised to one SVL; the weights' packing still depends on the SVL,
see :func:`autotune.quant.pack_sme2`):

* ``at_q4s_sme2_1vlx4vl`` (block, issue 17's 1VL x 4VL): per step of 4 rows of K,
  two vectors of packed weights become four vectors of int8 (``luti4`` through
  ZT0, whose table maps a code to ``code - 8``), and four ``smopa`` (4-way int8
  outer products) add a VL x 4VL block of ``isum`` into za0.s-za3.s.  After each
  block of K: per row, one ``mova`` reads the row of all four tiles (the byte
  tile's slices ``4i .. 4i+3``), ``scvtf`` converts it, and ``C += isum * (sa * sw)``
  with one ``fmla`` per element, in order of K (``q4a``: ZT0 keeps the code, and
  ``isum -= z * sum(qa)`` with ``fmls`` first, exact in f32): the arithmetic of
  :func:`autotune.quant.reference_qmatmul`, which the kernel differs from only by
  that step's rounding.
* ``at_q4s_sme2_1x4vl`` (GEMV, M = 1): ``sdot za.s[w8, 0, vgx4]`` (multi-vector,
  indexed) of four ``luti4``-expanded weight vectors by four codes of A replicated
  in every 128-bit segment (``ld1rqb``); per block the four ZA vectors go through
  the same ``scvtf`` and ``fmla`` into C's accumulators, which stay in Z registers
  across the whole of K.
* ``at_q8_sme2_1vlx4vl`` and ``at_q8_sme2_1x4vl``: the same two kernels on 8-bit
  codes, which ``smopa``/``sdot`` take as loaded (no ``luti4``, no ZT0): per step of
  4 rows of K four vectors of weights (the 4-bit kernels' two vectors of nibbles).
  The column's one scale is loaded once per panel and kept in registers for every
  block; the per-block step ``C += isum * (sa * sw)`` is the 4-bit kernels' own.

The C signature of all (``at_qsme2_fn``) adapts ``at_qkernel_fn``
(kernels_src/runtime/at_qkernel.h) to whole matrices, so one call (one ``smstart``)
covers C::

    void kernel(int64_t blocks, int64_t sub, const int8_t *qa, int64_t rows, const float *sa,
                int64_t cols, const uint8_t *wq, const float *ws, float *C, int64_t ldc, int64_t load_c);

``blocks``, ``sub``, ``C``, ``ldc``, ``load_c`` mean what they mean there.  ``qa``
and ``sa`` are A's codes and scales as :func:`quantizer_source`'s
``at_qsme2_quantize_a`` packs them (row tiles of VL rows for the block kernel,
single rows for the GEMV); ``rows`` and ``cols`` are the rows and columns of C
computed (every row, every panel); ``wq``/``ws`` the :class:`autotune.quant.Sme2Weights`
arrays (panel strides follow from blocks, sub and the SVL).  ``lda``, ``asum``, ``lds``,
``wstride``, ``wz`` and ``sstride`` are gone.  Each kernel has a second entry
``<name>_s`` for a caller already in streaming mode with ZA on (as the float kernels).
``at_qsme2_vl()`` returns VL (int32 lanes), callable outside streaming mode.  For ``q4a``
``sa`` carries A's code sums behind its scales and ``ws`` the zero points behind the scales;
for ``q8`` ``ws`` holds one scale per column (4VL floats a panel), not one per block.
"""

from __future__ import annotations

from typing import Sequence

from .. import contract
from ..families.sme2 import quant_family
from ..qformat import SYMMETRIC_ZERO_POINT
from ..specs import QKernelSpec
from . import QuantUnit
from .sme2 import Asm, commit_lazy_za_save

#: The kernels (autotune.families.sme2.quant_family), in the order the header lists them.
#: Kinds of weights: symmetric 4-bit (ZT0 maps a code to code - 8), asymmetric
#: 4-bit (ZT0 keeps the code; the zero point times A's code sum is subtracted per block)
#: and symmetric 8-bit (codes used as loaded).
KERNELS = quant_family()
#: ZT0's table per 4-bit kind (luti4 of bytes keeps each entry's low byte); q8 has none.
TABLES = {"q4s": tuple(c - SYMMETRIC_ZERO_POINT for c in range(16)), "q4a": tuple(range(16))}
#: Steps of 4 rows of K per iteration of either K loop (16 rows: one ld1rqb of A in the GEMV).
UNROLL = 4
#: Bytes of the frame: x29, x30, d8-d15, x19-x28.
_FRAME = 160


def _local(name: str, tail: str) -> str:
    return f"AT_L({name}_{tail})"


def _prologue(asm: Asm) -> None:
    """Stack arguments into x8-x10, then the frame; z8-z15 and x19-x28 are used."""
    asm("ldp x8, x9, [sp]", "C, ldc: the 9th and 10th arguments")
    asm("ldr x10, [sp, #16]", "load_c")
    asm(f"stp x29, x30, [sp, #-{_FRAME}]!")
    asm("mov x29, sp")
    for i, reg in enumerate(("d8, d9", "d10, d11", "d12, d13", "d14, d15", "x19, x20", "x21, x22",
                             "x23, x24", "x25, x26", "x27, x28")):
        asm(f"stp {reg}, [sp, #{16 + 16 * i}]", "callee-saved" if i == 0 else "")


def _epilogue(asm: Asm, name: str) -> None:
    L = lambda tail: _local(name, tail)  # noqa: E731
    asm.label(L("done"))
    asm(f"cbz x11, {L('stay')}", "the streaming entry leaves the mode to its caller")
    asm("smstop")
    asm.label(L("stay"))
    for i, reg in enumerate(("d8, d9", "d10, d11", "d12, d13", "d14, d15", "x19, x20", "x21, x22",
                             "x23, x24", "x25, x26", "x27, x28")):
        asm(f"ldp {reg}, [sp, #{16 + 16 * i}]")
    asm(f"ldp x29, x30, [sp], #{_FRAME}")
    asm("ret")
    asm.label(L("bad_tpidr2"))
    asm("brk #0x5a", "malformed TPIDR2 block: the caller broke the SME ABI")


def _entries(asm: Asm, name: str, kind: str) -> None:
    """``<name>_s`` (already streaming, ZA on) and ``<name>`` (commits a caller's lazy
    ZA save, then ``smstart``); x11 says whether to ``smstop`` at the end."""
    L = lambda tail: _local(name, tail)  # noqa: E731
    asm.lines.append(f"AT_FUNC_BEGIN({name}{contract.STREAMING_SUFFIX})")
    _prologue(asm)
    asm("mov x11, #0", "entered streaming with ZA on: leave both on")
    asm(f"b {L('body')}")
    asm.lines.append(f"AT_ENTRY({name})")
    _prologue(asm)
    asm("mov x11, #1", "this call owns streaming mode and ZA")
    commit_lazy_za_save(asm, L)
    asm.label(L("za_free"))
    asm("smstart", "streaming mode and ZA, once per call")
    asm.label(L("body"))
    asm("cntw x13", "VL: int32 lanes, rows of a row tile")
    asm("ptrue p0.b")
    asm("ptrue pn8.b", "all lanes, for the multi-vector byte loads")
    asm("ptrue pn10.s", "all lanes, for the multi-vector word loads")
    if kind in TABLES:
        asm(f"adr x16, AT_L(at_qsme2_lut_{kind})")
        asm("ldr zt0, [x16]", "code -> code - 8, for luti4" if kind == "q4s" else "code -> code, for luti4")
    asm("lsl x9, x9, #2", "ldc in bytes")


def _begin(asm: Asm, k: QKernelSpec) -> tuple:
    """Both entries of kernel ``k``; its name, local-label maker, kind and whether asymmetric."""
    _entries(asm, k.name, k.kind)
    return k.name, (lambda tail: _local(k.name, tail)), k.kind, k.kind == "q4a"


def _mopa_k_step(asm: Asm, kind: str) -> None:
    """16 rows of K into za0.s-za3.s: 4 steps of 4 rows, each 4 ``smopa`` of A's vector
    (VL rows x 4 codes) by 4 vectors of weights (4VL columns x 4 codes)."""
    if kind == "q8":
        asm.note("16 rows of K: 4 steps, each 4 vectors of int8 weights -> 4 smopa.")
        for step in range(4):
            at = "[x23]" if step == 0 else f"[x23, #{4 * step}, mul vl]"
            asm(f"ld1b {{z{4 * step}.b-z{4 * step + 3}.b}}, pn8/z, {at}", f"weights, step {step}")
        asm("ld1b {z20.b-z23.b}, pn8/z, [x25]", "A, steps 0-3: row i's 4 codes at bytes 4i..4i+3")
        asm("addvl x23, x23, #16")
        asm("addvl x25, x25, #4")
        for step in range(4):
            for tile in range(4):
                asm(f"smopa za{tile}.s, p0/m, p0/m, z{20 + step}.b, z{4 * step + tile}.b")
        return
    asm.note("16 rows of K: 4 steps, each 2 vectors of nibbles -> 4 of int8 -> 4 smopa.")
    asm("ld1b {z0.b-z3.b}, pn8/z, [x23]", "weights, steps 0 and 1")
    asm("ld1b {z16.b-z19.b}, pn8/z, [x23, #4, mul vl]", "steps 2 and 3")
    asm("ld1b {z20.b-z23.b}, pn8/z, [x25]", "A, steps 0-3: row i's 4 codes at bytes 4i..4i+3")
    asm("addvl x23, x23, #8")
    asm("addvl x25, x25, #4")
    for step, (src, a) in enumerate((("z0", "z20"), ("z2", "z21"), ("z16", "z22"), ("z18", "z23"))):
        first = int(src[1:])
        out = (4, 8)[step % 2]
        asm(f"luti4 {{z{out}.b-z{out + 1}.b}}, zt0, z{first}[0]", f"step {step}: columns 0..2VL-1")
        asm(f"luti4 {{z{out + 2}.b-z{out + 3}.b}}, zt0, z{first + 1}[0]", "2VL..4VL-1")
        for tile in range(4):
            asm(f"smopa za{tile}.s, p0/m, p0/m, {a}.b, z{out + tile}.b")


def _mopa(asm: Asm, k: QKernelSpec) -> None:
    name, L, kind, asym = _begin(asm, k)
    # 8-bit weights have one scale per column, loaded once per panel into z16-z19 (the
    # K loop leaves them alone); 4-bit ones a scale per block, loaded after each block.
    per_column = kind == "q8"
    asm("lsl x1, x1, #1", "K-loop iterations per block: 2 per 32 rows (16 rows each)")
    asm("mov x14, #0", "the panel's first column")
    asm.label(L("panel"))
    asm("whilelt pn9.s, x14, x5, vlx4", "the panel's columns of C")
    asm(f"b.none {L('done')}")
    if per_column:
        asm("ld1w {z16.s-z19.s}, pn10/z, [x7]", "sw: one scale per column, the same in every block")
        asm("addvl x7, x7, #4", "the next panel's scales")
    asm("mov x19, x3", "rows left")
    asm("mov x20, x2", "the row tile's codes")
    asm("mov x21, x4", "its scales")
    asm("mov x22, x8", "C at the tile's first row and the panel's first column")
    asm.label(L("tile"))
    asm("cmp x19, x13")
    asm("csel x15, x19, x13, lo", "rows of this tile")
    asm("lsl x15, x15, #2", "... as byte-tile slices: row i is slices 4i..4i+3")
    asm("and x30, x15, #0xfffffffffffffff0", "... the slices of whole groups of 4 rows (x30 is saved)")
    asm("mov x23, x6", "the panel's codes, read again by every row tile")
    if not per_column:
        asm("mov x24, x7", "the panel's scales")
    asm("mov x25, x20")
    asm("mov x26, x21")
    asm("mov x27, x0", "blocks left")
    asm("mov x28, x10", "whether C holds a sum to continue: load_c, then 1")
    asm.label(L("block"))
    asm("zero {za}")
    asm("mov x16, x1")
    asm.label(L("k"))
    _mopa_k_step(asm, kind)
    asm("subs x16, x16, #1")
    asm(f"b.ne {L('k')}")
    asm.note("The block's isum is in za0.s-za3.s: C += float(isum) * (sa * sw), row by row.")
    if not per_column:
        asm("ld1w {z16.s-z19.s}, pn10/z, [x24]", "sw: the block's 4VL column scales")
        if asym:
            asm("ld1w {z20.s-z23.s}, pn10/z, [x24, #4, mul vl]", "their zero points, as floats")
        asm(f"addvl x24, x24, #{8 if asym else 4}")
    asm("mov x17, x26", "sa of the tile's row 0 in this block")
    asm(f"addvl x26, x26, #{2 if asym else 1}", "VL scales per block" + (", then VL code sums" if asym else ""))
    asm("mov x16, x22")
    asm("mov w12, #0")
    asm(f"cbz x28, {L('first4')}")
    for form in ("more", "first"):
        # Groups of 4 rows: one ld1rqw of their sa, an indexed fmul.  The packed sa has
        # VL rows per tile, so a group's load never leaves it, also for the last 1-3 rows.
        def load_group() -> None:
            asm("ld1rqw {z7.s}, p0/z, [x17]", "sa of rows i..i+3, in every 128-bit segment")
            if asym:
                asm("ld1rqw {z6.s}, p0/z, [x17, x13, lsl #2]", "their code sums, VL floats further")
        asm.label(L(form + "4"))
        asm("cmp x12, x30")
        asm(f"b.hs {L(form + '_tail')}")
        load_group()
        asm("add x17, x17, #16")
        for r in range(4):
            _dequantise_row(asm, form, f"za0h.b[w12, {4 * r}:{4 * r + 3}]", f"z7.s[{r}]", r,
                            f"z6.s[{r}]" if asym else None)
        asm("add w12, w12, #16")
        asm(f"b {L(form + '4')}")
        asm.label(L(form + "_tail"))
        asm("cmp x12, x15", "1 to 3 rows left?")
        asm(f"b.hs {L('block_done')}")
        load_group()
        for r in range(3):
            if r:
                asm("add w12, w12, #4")
                asm("cmp x12, x15")
                asm(f"b.hs {L('block_done')}")
            _dequantise_row(asm, form, "za0h.b[w12, 0:3]", f"z7.s[{r}]", r, f"z6.s[{r}]" if asym else None)
        if form == "more":
            asm(f"b {L('block_done')}")
    asm.label(L("block_done"))
    asm("mov x28, #1")
    asm("subs x27, x27, #1")
    asm(f"b.ne {L('block')}")
    asm("mov x20, x25", "the next row tile's codes and scales follow")
    asm("mov x21, x26")
    asm("madd x22, x13, x9, x22", "VL rows down")
    asm("subs x19, x19, x13")
    asm(f"b.gt {L('tile')}")
    asm("mov x6, x23", "the next panel's codes" + ("" if per_column else " and scales") + " follow")
    if not per_column:
        asm("mov x7, x24")
    asm("incb x8, all, mul #4", "4VL columns of C to the right")
    asm("incw x14, all, mul #4")
    asm(f"b {L('panel')}")
    _epilogue(asm, name)
    asm.lines.append(f"AT_FUNC_END({name})")
    asm.lines.append(f"AT_FUNC_END({name}{contract.STREAMING_SUFFIX})")


def _dequantise_row(asm: Asm, form: str, slices: str, sa: str, r: int, asum: str | None) -> None:
    """One row of C: ``C = isum * (sa * sw)`` (first block) or ``C += ...`` (one fmla);
    ``sa`` (and the row's code sum ``asum``, asymmetric weights) an indexed element."""
    asm(f"mova {{z28.b-z31.b}}, {slices}", f"row i+{r} of za0.s-za3.s" if r else "row i of za0.s-za3.s")
    asm("scvtf {z28.s-z31.s}, {z28.s-z31.s}", "exact: |isum| < 2^24")
    if asum:
        for j in range(4):
            asm(f"fmls z{28 + j}.s, z{20 + j}.s, {asum}", "isum -= z * sum(qa): exact integers" if j == 0 else "")
    if form == "more":
        asm("ld1w {z24.s-z27.s}, pn9/z, [x16]", "C so far")
    for j in range(4):
        asm(f"fmul z{j}.s, z{16 + j}.s, {sa}", "sw * sa, rounded as the reference rounds it" if j == 0 else "")
    for j in range(4):
        if form == "more":
            asm(f"fmla z{24 + j}.s, p0/m, z{28 + j}.s, z{j}.s", "one rounding per block" if j == 0 else "")
        else:
            asm(f"fmul z{24 + j}.s, z{28 + j}.s, z{j}.s", "the first block: C is not read" if j == 0 else "")
    asm("st1w {z24.s-z27.s}, pn9, [x16]")
    asm("add x16, x16, x9")


def _gemv(asm: Asm, k: QKernelSpec) -> None:
    name, L, kind, asym = _begin(asm, k)
    per_column = kind == "q8"  # one scale per column: z20-z23, loaded once per panel
    asm("mov x21, x8", "C: w8 selects the ZA vector group of the isum")
    asm("mov w8, #0")
    asm("mul x15, x0, x1")
    asm("lsl x15, x15, #5", "bytes of a row of codes: blocks * sub * 32")
    asm.label(L("row"))
    asm("mov x14, #0", "the panel's first column")
    asm("mov x23, x6")
    asm("mov x24, x7")
    asm("mov x22, x21")
    asm.label(L("panel"))
    asm("whilelt pn9.s, x14, x5, vlx4", "the panel's columns of C")
    asm(f"b.none {L('row_done')}")
    if per_column:
        asm("ld1w {z20.s-z23.s}, pn10/z, [x24]", "sw, the same in every block")
        asm("addvl x24, x24, #4")
    asm("zero {za}")
    asm(f"cbz x10, {L('from_zero')}")
    asm("ld1w {z24.s-z27.s}, pn9/z, [x22]", "C so far: the accumulators, for the whole of K")
    asm(f"b {L('start')}")
    asm.label(L("from_zero"))
    for j in range(4):
        asm(f"dup z{24 + j}.s, #0", "C is not read" if j == 0 else "")
    asm.label(L("start"))
    asm("mov x25, x2", "the row's codes")
    asm("mov x26, x4", "its scales")
    asm("mov x27, x0", "blocks left")
    asm.label(L("block"))
    asm("mov x16, x1")
    asm.label(L("k"))
    asm.note("32 rows of K: A's codes 16 at a time in every 128-bit segment, 8 steps of 4VL columns.")
    asm("ld1rqb z8.b, p0/z, [x25]", "k 0..15")
    asm("ld1rqb z9.b, p0/z, [x25, #16]", "k 16..31")
    asm("add x25, x25, #32")
    if per_column:
        _gemv_q8_steps(asm)
    for half, a in () if per_column else ((0, "z8"), (1, "z9")):
        at = "[x23]" if half == 0 else f"[x23, #{8 * half}, mul vl]"
        asm(f"ld1b {{z0.b-z3.b}}, pn8/z, {at}", f"weights, steps {4 * half} and {4 * half + 1}")
        asm(f"ld1b {{z16.b-z19.b}}, pn8/z, [x23, #{8 * half + 4}, mul vl]", f"steps {4 * half + 2} and {4 * half + 3}")
        for step, src in enumerate((0, 2, 16, 18)):
            out = (4, 12)[step % 2]
            asm(f"luti4 {{z{out}.b-z{out + 1}.b}}, zt0, z{src}[0]", f"step {4 * half + step}")
            asm(f"luti4 {{z{out + 2}.b-z{out + 3}.b}}, zt0, z{src + 1}[0]")
            asm(f"sdot za.s[w8, 0, vgx4], {{z{out}.b-z{out + 3}.b}}, {a}.b[{step}]")
    if not per_column:
        asm("addvl x23, x23, #16")
    asm("subs x16, x16, #1", "sub iterations per block")
    asm(f"b.ne {L('k')}")
    asm.note("C += float(isum) * (sa * sw), in order of K.")
    asm("mova {z28.d-z31.d}, za.d[w8, 0, vgx4]", "the block's isum, 4VL columns")
    asm("scvtf {z28.s-z31.s}, {z28.s-z31.s}", "exact: |isum| < 2^24")
    if not per_column:
        asm("ld1w {z16.s-z19.s}, pn10/z, [x24]", "sw")
    if asym:
        asm("ld1w {z20.s-z23.s}, pn10/z, [x24, #4, mul vl]", "zero points, as floats")
        asm("ld1rw z6.s, p0/z, [x26, #4]", "the block's code sum of A")
        for j in range(4):
            asm(f"fmls z{28 + j}.s, p0/m, z{20 + j}.s, z6.s", "isum -= z * sum(qa): exact integers" if j == 0 else "")
    if not per_column:
        asm(f"addvl x24, x24, #{8 if asym else 4}")
    asm("ld1rw z7.s, p0/z, [x26]", "sa")
    asm(f"add x26, x26, #{8 if asym else 4}")
    for j in range(4):
        asm(f"fmul z{16 + j}.s, z7.s, z{(20 if per_column else 16) + j}.s", "sa * sw" if j == 0 else "")
    for j in range(4):
        asm(f"fmla z{24 + j}.s, p0/m, z{28 + j}.s, z{16 + j}.s", "one rounding per block" if j == 0 else "")
    asm("zero {za}")
    asm("subs x27, x27, #1")
    asm(f"b.ne {L('block')}")
    asm("st1w {z24.s-z27.s}, pn9, [x22]")
    asm("incb x22, all, mul #4", "4VL columns of C to the right")
    asm("incw x14, all, mul #4")
    asm(f"b {L('panel')}")
    asm.label(L("row_done"))
    asm("add x2, x2, x15", "the next row")
    asm(f"add x4, x4, x0, lsl #{3 if asym else 2}", "the next row's scales" + (" and sums" if asym else ""))
    asm("add x21, x21, x9")
    asm("subs x3, x3, #1")
    asm(f"b.gt {L('row')}")
    _epilogue(asm, name)
    asm.lines.append(f"AT_FUNC_END({name})")
    asm.lines.append(f"AT_FUNC_END({name}{contract.STREAMING_SUFFIX})")


def _gemv_q8_steps(asm: Asm) -> None:
    """32 rows of K of the 8-bit GEMV: per step of 4 rows one load of 4VL columns' codes
    and one ``sdot``; four register groups in turn, so a load runs ahead of the sdot
    before it.  The weights of 32 rows (32 vectors) pass ``ld1b``'s offset range
    (-32..28 vectors), hence two pointer steps."""
    groups = (0, 4, 12, 16)  # z8/z9 hold A, z20-z23 the scales, z24-z31 C and the isum
    for step in range(8):
        reg, offset = groups[step % 4], 4 * (step % 4)
        at = "[x23]" if offset == 0 else f"[x23, #{offset}, mul vl]"
        asm(f"ld1b {{z{reg}.b-z{reg + 3}.b}}, pn8/z, {at}", f"weights, step {step}")
        asm(f"sdot za.s[w8, 0, vgx4], {{z{reg}.b-z{reg + 3}.b}}, z{8 + step // 4}.b[{step % 4}]")
        if step % 4 == 3:
            asm("addvl x23, x23, #16")


def kernels_source() -> QuantUnit:
    """Both kernels, ``at_qsme2_vl`` and the luti4 table, as one assembly file."""
    asm = Asm(width=50)
    asm.lines += [
        f"// Generated by {__name__}.",
        "// Do not edit: change the generator.",
        "// 4- and 8-bit weights x int8 activations, any SVL (VL read at run time).",
        "// Arguments: x0 blocks, x1 sub, x2 qa, x3 rows, x4 sa, x5 cols, x6 wq, x7 ws;",
        "// on the stack C, ldc, load_c (to x8, x9, x10).  x11: smstop at the end.",
        "#if !defined(__aarch64__)",
        '#error "these kernels need AArch64 with SME2: compile them with the sme2 target\'s flags"',
        "#endif",
        f'#include "{contract.ASM_HEADER}"',
        "    .arch armv9-a+sme2",
        "    .text",
        "AT_FUNC_BEGIN(at_qsme2_vl)",
    ]
    asm("rdsvl x0, #1", "SVL in bytes (legal outside streaming mode)")
    asm("lsr x0, x0, #2", "int32 lanes")
    asm("ret")
    asm.lines.append("AT_FUNC_END(at_qsme2_vl)")
    for k in KERNELS:
        (_gemv if k.gemv else _mopa)(asm, k)
    for kind in TABLES:
        asm.lines += ["    .p2align 6", f"AT_L(at_qsme2_lut_{kind}):"]
        asm.note(f"ZT0 for {kind}: code c -> " + ("c - 8" if kind == "q4s" else "c"))
        asm(".word " + ", ".join(map(str, TABLES[kind])))
    asm.lines += ["AT_NO_EXEC_STACK", ""]
    return QuantUnit("at_qsme2_kernels.S", "\n".join(asm.lines))


_HEADER = """\
/* Generated by {module}.  Do not edit.
 * The C side of the SME2 quantised kernels: their signature, and A quantised and
 * packed for them. */
#ifndef AT_QSME2_H
#define AT_QSME2_H
#include <stdint.h>

typedef void (*at_qsme2_fn)(int64_t blocks, int64_t sub, const int8_t *qa, int64_t rows, const float *sa,
                            int64_t cols, const uint8_t *wq, const float *ws, float *C, int64_t ldc,
                            int64_t load_c);
{decls}
/* VL: int32 lanes of the streaming vector length (the block kernel's rows, a quarter of a panel). */
int64_t at_qsme2_vl(void);
/* Bytes of qa and floats of sa for M rows in tiles of mr rows (VL for the block kernel, 1 for the GEMV). */
int64_t at_qsme2_qa_bytes(int64_t M, int64_t kp, int64_t mr);
int64_t at_qsme2_sa_count(int64_t M, int64_t blocks, int64_t mr, int64_t sums);
/* acts = A[M, K] (row-major, lda) quantised per row and block as autotune.quant.quantize_activations
 * does (bit for bit), packed in tiles of mr rows: per step of 4 rows of K, mr x 4 codes
 * (row i at bytes 4i..4i+3); per tile sa [blocks][mr], or with sums (the q4a kernels)
 * [blocks][2][mr]: the scales, then each row's sum of the block's codes (as floats).
 * Rows past M: codes 0, scale 0. */
void at_qsme2_quantize_a(int64_t M, int64_t K, const float *acts, int64_t lda, int64_t block, int64_t blocks,
                         int64_t mr, int64_t sums, int8_t *qa, float *sa);
#endif
"""

_QUANTIZER = """\
/* Generated by {module}.  Do not edit. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "at_qsme2.h"

int64_t at_qsme2_qa_bytes(int64_t M, int64_t kp, int64_t mr)
{{
    return (M + mr - 1) / mr * mr * kp;
}}

int64_t at_qsme2_sa_count(int64_t M, int64_t blocks, int64_t mr, int64_t sums)
{{
    return (M + mr - 1) / mr * mr * blocks * (sums ? 2 : 1);
}}

/* rint without libm for |x| < 2^51: adding 1.5 * 2^52 leaves no fraction bits (as qgemm.c). */
static inline double round_even(double x)
{{
    const double magic = 6755399441055744.0;
    return (x + magic) - magic;
}}

/* Codes of 4 values: rint(a / scale) in double, as numpy divides (fcvtns rounds to
 * nearest, ties to even), narrowed with saturation to int32. */
static inline int32x4_t codes4(float32x4_t x, float64x2_t divisor)
{{
    const int64x2_t lo = vcvtnq_s64_f64(vdivq_f64(vcvt_f64_f32(vget_low_f32(x)), divisor));
    const int64x2_t hi = vcvtnq_s64_f64(vdivq_f64(vcvt_high_f64_f32(x), divisor));
    return vcombine_s32(vqmovn_s64(lo), vqmovn_s64(hi));
}}

/* Two steps of 4 codes: a[0..3] to q0, a[4..7] to q1, clipped to [-127, 127]
 * (saturating to int8 gives at most 127; -128 becomes -127). */
static inline int8x8_t quantize8(const float *a, float64x2_t divisor, int8_t *q0, int8_t *q1)
{{
    const int16x8_t wide = vcombine_s16(vqmovn_s32(codes4(vld1q_f32(a), divisor)),
                                        vqmovn_s32(codes4(vld1q_f32(a + 4), divisor)));
    const int8x8_t bytes = vmax_s8(vqmovn_s16(wide), vdup_n_s8(-127));
    vst1_lane_s32((int32_t *)(void *)q0, vreinterpret_s32_s8(bytes), 0);
    vst1_lane_s32((int32_t *)(void *)q1, vreinterpret_s32_s8(bytes), 1);
    return bytes;
}}

void at_qsme2_quantize_a(int64_t M, int64_t K, const float *acts, int64_t lda, int64_t block, int64_t blocks,
                         int64_t mr, int64_t sums, int8_t *qa, float *sa)
{{
    const int64_t kp = blocks * block, per_block = sums ? 2 * mr : mr;
    memset(qa, 0, (size_t)at_qsme2_qa_bytes(M, kp, mr));
    memset(sa, 0, sizeof(float) * (size_t)at_qsme2_sa_count(M, blocks, mr, sums));
    for (int64_t m = 0; m < M; ++m) {{
        const float *a = acts + m * lda;
        const int64_t tile = m / mr, i = m % mr;
        /* Row i of its tile: code k at step k / 4, byte 4i + k % 4; scale b at [b][i]. */
        int8_t *q = qa + tile * mr * kp + 4 * i;
        float *s = sa + tile * per_block * blocks + i;
        for (int64_t b = 0; b < blocks; ++b) {{
            const int64_t k0 = b * block, k1 = k0 + block < K ? k0 + block : K;
            const int64_t whole = k1 == k0 + block ? k1 : k0; /* NEON over whole blocks, C over a tail */
            float32x4_t vmax = vdupq_n_f32(0.0f);
            for (int64_t k = k0; k < whole; k += 32) {{ /* fmax, not fmaxnm: a NaN stays */
                float32x4_t m[4];
                for (int j = 0; j < 4; ++j)
                    m[j] = vmaxq_f32(vabsq_f32(vld1q_f32(a + k + 8 * j)), vabsq_f32(vld1q_f32(a + k + 8 * j + 4)));
                vmax = vmaxq_f32(vmax, vmaxq_f32(vmaxq_f32(m[0], m[1]), vmaxq_f32(m[2], m[3])));
            }}
            float amax = vmaxvq_f32(vmax); /* NaN if any lane is NaN */
            for (int64_t k = whole; k < k1; ++k) {{
                const float x = fabsf(a[k]);
                amax = x > amax || x != x ? x : amax;
            }}
            if (!(amax <= 3.4028234663852886e38f)) {{ /* NaN or Inf in the block */
                s[b * per_block] = NAN;
                continue; /* codes 0 */
            }}
            const float scale = (float)((double)amax / 127.0);
            s[b * per_block] = scale;
            if (scale == 0.0f) continue;
            const float64x2_t divisor = vdupq_n_f64((double)scale); /* divided, not multiplied by 1/sa */
            int8_t *dst = q + (k0 >> 2) * 4 * mr; /* a step of 4 codes is 4 * mr bytes */
            int32_t total = 0;
            if (sums)
                for (int64_t k = k0; k < whole; k += 8, dst += 8 * mr)
                    total += vaddlv_s8(quantize8(a + k, divisor, dst, dst + 4 * mr));
            else
                for (int64_t k = k0; k < whole; k += 8, dst += 8 * mr) /* blocks are multiples of 32 */
                    quantize8(a + k, divisor, dst, dst + 4 * mr);
            for (int64_t k = whole; k < k1; ++k) {{
                const double r = round_even((double)a[k] / (double)scale);
                const int32_t code = r > 127.0 ? 127 : r < -127.0 ? -127 : (int32_t)r;
                q[(k >> 2) * 4 * mr + (k & 3)] = (int8_t)code;
                total += code;
            }}
            if (sums) s[b * per_block + mr] = (float)total; /* exact: below 2^24 */
        }}
    }}
}}
"""


def header_source() -> QuantUnit:
    decls = "\n".join(contract.qsme2_table(KERNELS)) + "\n"
    return QuantUnit("at_qsme2.h", _HEADER.format(module=__name__, decls=decls))


def quantizer_source() -> QuantUnit:
    """``at_qsme2_quantize_a`` and its size helpers, in C (compiled for the sme2 target, run outside streaming mode)."""
    return QuantUnit("at_qsme2_quant.c", _QUANTIZER.format(module=__name__))


def generate() -> tuple[QuantUnit, ...]:
    """Every file: the header, the quantiser and the kernels."""
    return (header_source(), quantizer_source(), kernels_source())


def units(kernels: Sequence[QKernelSpec]) -> list[QuantUnit]:
    """The files of ``kernels``: the family's kernels are one object (any SVL), all or none."""
    if list(kernels) != KERNELS:
        raise ValueError(f"the SME2 quantised kernels build together: {[k.name for k in KERNELS]}")
    return list(generate())
