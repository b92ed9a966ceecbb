"""SME2 kernels: outer products into the ZA tiles, generated as AArch64 assembly.

A kernel of ``a x b`` tiles (in units of VL, the number of elements of one
streaming vector) keeps its C block in ``a * b`` ZA tiles and, per K step, loads
one column of op(A) (``a`` vectors along i) and one row of op(B) (``b`` vectors
along j), then issues ``a * b`` FMOPA outer products.  fp32 has 4 tiles (za0.s-za3.s),
fp64 has 8 (za0.d-za7.d), so the shapes are 1VLx4VL, 2VLx2VL, 4VLx1VL and their
smaller forms for fp32, and 1x8 ... 8x1 for fp64.  Partial rows and columns
(``mr`` or ``nr`` not a multiple of VL) are governed by predicates: the loads
read exactly the operand footprint, the FMOPAs leave inactive rows and columns
alone, and the stores write only the block.

The outer product wants op(A)'s column and op(B)'s row contiguous, i.e. the NT
layout.  Every other layout reads a packed panel instead (the operand format,
as in gemmlowp's KernelFormat): the panel of op(A) holds, for each K step, its
``a * VL`` rows contiguously (zero padded), the panel of op(B) its ``b * VL``
columns.  The packing routine is the transposing pack through a ZA tile
(kernels_src/arm/sme2_pack.S): load rows horizontally, store columns vertically.

=====  ========  ==========================================================
trans  variant   operands
=====  ========  ==========================================================
nt     ``""``    A and B in place (predicated multi-vector loads)
nn     ``pb``    A in place, B a packed panel (ldb = panel stride)
tt     ``pa``    A a packed panel (lda = panel stride), B in place
tn     ``papb``  both packed
=====  ========  ==========================================================

Hybrid forms (variant suffix ``h``, KirbyMM's SME + SVE edge routine): a block of
``a*VL + mr2`` rows keeps ``a*VL`` rows on ZA and computes the last ``mr2`` (1..4)
with SVE ``fmla``, sharing the op(B) vectors the outer products load.

Why assembly and not ACLE intrinsics: ``__arm_new("za")`` makes clang call
``__arm_tpidr2_save``, which Debian 12's aarch64 runtime lacks; a kernel written
with explicit ``smstart``/``smstop`` commits a caller's lazy ZA save itself (a
few instructions, below) and links anywhere.  ``<name>`` enters streaming mode
once per call; ``<name>_s`` runs inside a caller's streaming region (ZA on).  Kernels are specialised to one streaming vector length (SVL, 512
bits by default): VL, tile counts and predicates are constants.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..specs import SVL_CHOICES, KernelSpec, parse_trans
from . import GeneratedSource

ISA = "sme2"
DEFAULT_SVL = 512
VECTOR_REGISTERS = 32
#: ZA tiles of each element size: SVL x SVL bits of ZA split into tiles.
ZA_TILES = {"f32": 4, "f64": 8}
_ELEM = {"f32": ("s", "w", 2), "f64": ("d", "d", 3)}  # suffix, ld1/st1 letter, log2 bytes
#: Two stages in the K loop (operands of step p+1 load while step p multiplies).
UNROLL = 2
VARIANT_OF_TRANS = {"nt": "", "nn": "pb", "tt": "pa", "tn": "papb"}
#: Every kernel has a second entry point, ``<name>_s``, for callers that already
#: run in streaming mode with ZA enabled (a plan's streaming region): it neither
#: commits a lazy ZA save nor switches modes, so one region serves many calls.
STREAMING_SUFFIX = "_s"


def lanes(dtype: str, svl_bits: int = DEFAULT_SVL) -> int:
    """VL: elements of one streaming vector."""
    return svl_bits // (32 if dtype == "f32" else 64)


@dataclass(frozen=True)
class SideFormat:
    """How a kernel reads one operand: in place, or as a packed panel."""

    packed: bool
    panel_ld: int  # elements between K steps of the panel (0 when in place)
    pack_routine: str  # C name of the routine producing the panel ("" when in place)


@dataclass(frozen=True)
class KernelFormat:
    """The operand formats of one kernel (gemmlowp's KernelFormat, per side).

    ``tiles_m`` row tiles go to ZA; a hybrid kernel (variant ending in ``h``)
    computes its last ``sve_rows`` rows (fewer than VL) with SVE ``fmla`` instead
    of a mostly empty extra row of tiles (KirbyMM's dedicated edge routine).
    """

    a: SideFormat
    b: SideFormat
    tiles_m: int
    tiles_n: int
    vl: int
    sve_rows: int = 0


#: Reserved registers: alpha and beta (z30, z31) at the store.
_RESERVED = 2
#: SVE edge rows a hybrid kernel may have (KirbyMM uses a few; more would be a tile).
HYBRID_ROWS = (1, 2, 3, 4)


def is_hybrid(spec: KernelSpec) -> bool:
    return spec.variant.endswith("h")


def kernel_format(spec: KernelSpec, svl_bits: int = DEFAULT_SVL) -> KernelFormat:
    vl = lanes(spec.dtype, svl_bits)
    tn = -(-spec.nr // vl)
    if is_hybrid(spec):
        tm, sve_rows = spec.mr // vl, spec.mr % vl
    else:
        tm, sve_rows = -(-spec.mr // vl), 0
    routine = f"at_sme2_pack_t_{spec.dtype}"
    pa, pb = "pa" in spec.variant, "pb" in spec.variant
    # Panels are whole multiples of VL (the pack writes whole vectors).
    a_ld = -(-spec.mr // vl) * vl
    return KernelFormat(
        a=SideFormat(pa, a_ld if pa else 0, routine if pa else ""),
        b=SideFormat(pb, tn * vl if pb else 0, routine if pb else ""),
        tiles_m=tm,
        tiles_n=tn,
        vl=vl,
        sve_rows=sve_rows,
    )


def vector_registers(spec: KernelSpec, svl_bits: int = DEFAULT_SVL) -> int:
    """Z registers of the K loop: two operand sets (ping-pong) and the SVE accumulators."""
    fmt = kernel_format(spec, svl_bits)
    per_set = fmt.tiles_m + fmt.tiles_n + fmt.sve_rows
    return 2 * per_set + fmt.sve_rows * fmt.tiles_n + _RESERVED


def fits(spec: KernelSpec, svl_bits: int = DEFAULT_SVL) -> bool:
    """The block fits the ZA tiles and the Z registers, and the variant matches the layout."""
    base = VARIANT_OF_TRANS.get(spec.trans)
    if spec.isa != ISA or spec.variant not in (base, base + "h"):
        return False
    fmt = kernel_format(spec, svl_bits)
    if is_hybrid(spec) and (fmt.tiles_m < 1 or fmt.sve_rows < 1):
        return False
    if fmt.tiles_m * fmt.tiles_n > ZA_TILES[spec.dtype] or vector_registers(spec, svl_bits) > VECTOR_REGISTERS:
        return False
    za_rows = spec.mr - fmt.sve_rows
    return _allocate(fmt.tiles_m, fmt.tiles_n, fmt.sve_rows,
                     _groups(fmt.tiles_m, za_rows, fmt.vl, fmt.a.packed),
                     _groups(fmt.tiles_n, spec.nr, fmt.vl, fmt.b.packed)) is not None


def cmr(spec: KernelSpec, svl_bits: int = DEFAULT_SVL) -> float:
    """KirbyMM's BiReg-CMR: flops per load instruction of one K step.

    ``a`` vectors of op(A) for the ZA rows, ``mr2`` broadcasts for the SVE rows and
    ``b`` vectors of op(B) shared by both: ``2 (a b VL^2 + mr2 b VL) / (a + mr2 + b)``,
    counting only the block's real elements when it is partial.
    """
    fmt = kernel_format(spec, svl_bits)
    return 2.0 * spec.mr * spec.nr / (fmt.tiles_m + fmt.sve_rows + fmt.tiles_n)


def family(dtype: str, trans: str, svl_bits: int = DEFAULT_SVL) -> list[KernelSpec]:
    """Full-tile shapes a x b VL with a*b <= ZA tiles, and their hybrid forms
    (a*VL + mr2) x b*VL with a few SVE edge rows; highest CMR first."""
    trans_a, trans_b = parse_trans(trans)
    vl = lanes(dtype, svl_bits)
    tiles = ZA_TILES[dtype]
    base = VARIANT_OF_TRANS[trans]
    specs = []
    for a in range(1, tiles + 1):
        for b in range(1, tiles // a + 1):
            specs.append(KernelSpec(ISA, dtype, a * vl, b * vl, trans_a, trans_b, base, UNROLL))
            specs += [KernelSpec(ISA, dtype, a * vl + r, b * vl, trans_a, trans_b, base + "h", UNROLL)
                      for r in HYBRID_ROWS if r < vl]
    specs = [s for s in specs if fits(s, svl_bits)]
    return sorted(specs, key=lambda s: (-cmr(s, svl_bits), s.mr, s.nr, s.variant))


# --------------------------------------------------------------------------- assembly


@dataclass(frozen=True)
class _Group:
    """One load instruction: ``count`` consecutive vectors from tile ``first``."""

    first: int
    count: int
    elems: int  # active elements; count*VL when full
    pred: str  # governing predicate (p-reg or pn-reg name)


def _groups(tiles: int, n: int, vl: int, padded: bool) -> list[tuple[int, int, int]]:
    """Split ``tiles`` vectors into 4-, 2- and 1-vector loads (SME2 multi-vector)."""
    out, t = [], 0
    for size in (4, 2, 1):
        while tiles - t >= size:
            elems = size * vl if padded else max(0, min(size * vl, n - t * vl))
            out.append((t, size, elems))
            t += size
    return out


@dataclass(frozen=True)
class _Registers:
    """Z registers of one kernel: operand sets, SVE broadcasts and accumulators."""

    a: tuple[dict[int, int], ...]  # per set: row tile -> register
    b: tuple[dict[int, int], ...]  # per set: column tile -> register
    bcast: tuple[tuple[int, ...], ...]  # per set: one register per SVE row
    acc: dict[tuple[int, int], int]  # (SVE row, column tile) -> register


def _allocate(tiles_m: int, tiles_n: int, sve_rows: int, a_groups, b_groups) -> _Registers | None:
    """Place every group at a register aligned to its size (multi-vector loads need
    it), largest groups first so small ones fill the gaps; None when z0-z29 run out."""
    free = [True] * (VECTOR_REGISTERS - _RESERVED)

    def take(count: int) -> int | None:
        for first in range(0, len(free) - count + 1, count if count > 1 else 1):
            if all(free[first:first + count]):
                free[first:first + count] = [False] * count
                return first
        return None

    a: tuple[dict[int, int], ...] = ({}, {})
    b: tuple[dict[int, int], ...] = ({}, {})
    requests = [(g[1], s, side, g[0]) for s in (0, 1) for side, groups in (("a", a_groups), ("b", b_groups))
                for g in groups]
    for count, s, side, first_tile in sorted(requests, key=lambda r: -r[0]):
        reg = take(count)
        if reg is None:
            return None
        for k in range(count):
            (a if side == "a" else b)[s][first_tile + k] = reg + k
    singles = []
    for _ in range(2 * sve_rows + sve_rows * tiles_n):
        reg = take(1)
        if reg is None:
            return None
        singles.append(reg)
    bcast = (tuple(singles[:sve_rows]), tuple(singles[sve_rows:2 * sve_rows]))
    rest = iter(singles[2 * sve_rows:])
    acc = {(i, j): next(rest) for i in range(sve_rows) for j in range(tiles_n)}
    return _Registers(a, b, bcast, acc)


class _Asm:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str, comment: str = "") -> None:
        self.lines.append(f"    {text:<46}// {comment}" if comment else f"    {text}")

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def note(self, text: str) -> None:
        self.lines.append(f"    // {text}")


def _emit(spec: KernelSpec, svl_bits: int) -> str:
    t, ld, shift = _ELEM[spec.dtype]
    fmt = kernel_format(spec, svl_bits)
    vl, tm, tn, sve_rows = fmt.vl, fmt.tiles_m, fmt.tiles_n, fmt.sve_rows
    za_rows = spec.mr - sve_rows  # rows on ZA; the SVE rows follow them
    name = spec.name
    L = f".L{name}_"
    asm = _Asm()
    full = "p0"

    # Predicates.  p0: all lanes.  p1/p2: the last row / column tile when partial.
    # p7: the SVE rows' lanes in a column (hybrid kernels).
    rows_last = za_rows - (tm - 1) * vl
    cols_last = spec.nr - (tn - 1) * vl
    row_pred = [full] * (tm - 1) + [full if rows_last == vl else "p1"]
    col_pred = [full] * (tn - 1) + [full if cols_last == vl else "p2"]
    free_p = iter(("p3", "p4", "p5", "p6"))
    free_pn = iter(("pn8", "pn9", "pn10", "pn11", "pn12", "pn13", "pn14", "pn15"))
    pred_setup: list[tuple[str, str]] = []

    def predicate(count: int, elems: int) -> str:
        if count == 1:
            if elems == vl:
                return full
            reg = next(free_p)
            pred_setup.append((f"mov x12, #{elems}", ""))
            pred_setup.append((f"whilelt {reg}.{t}, xzr, x12", f"{elems} of {vl} lanes"))
            return reg
        reg = next(free_pn)
        if elems == count * vl:
            pred_setup.append((f"ptrue {reg}.{t}", f"all {count} vectors"))
        else:
            pred_setup.append((f"mov x12, #{elems}", ""))
            pred_setup.append((f"whilelt {reg}.{t}, xzr, x12, vlx{count}", f"{elems} of {count * vl} lanes"))
        return reg

    a_raw = _groups(tm, za_rows, vl, fmt.a.packed)
    b_raw = _groups(tn, spec.nr, vl, fmt.b.packed)
    a_groups = [_Group(f, c, e, predicate(c, e)) for f, c, e in a_raw]
    b_groups = [_Group(f, c, e, predicate(c, e)) for f, c, e in b_raw]
    regs = _allocate(tm, tn, sve_rows, a_raw, b_raw)
    if regs is None:
        raise ValueError(f"{spec.name}: its operand groups do not fit z0-z29")

    def za_reg(s: int, i: int) -> int:
        return regs.a[s][i]

    def zb_reg(s: int, j: int) -> int:
        return regs.b[s][j]

    def vecs(first: int, count: int) -> str:
        if count == 1:
            return f"z{first}.{t}"
        return f"{{z{first}.{t}-z{first + count - 1}.{t}}}"

    def load(s: int) -> None:
        for ptr, groups, reg in (("x1", a_groups, za_reg), ("x3", b_groups, zb_reg)):
            for g in groups:
                if g.elems == 0:
                    continue
                off = f", #{g.first}, mul vl" if g.first else ""
                asm(f"ld1{ld} {vecs(reg(s, g.first), g.count)}, {g.pred}/z, [{ptr}{off}]")
        for i, zr in enumerate(regs.bcast[s]):
            byte = (za_rows + i) << shift
            if byte <= 63 << shift:  # ld1r's immediate: 0..63 elements
                asm(f"ld1r{ld} z{zr}.{t}, p0/z, [x1, #{byte}]", f"op(A)[{za_rows + i}, p] to every lane")
            else:
                asm(f"add x15, x1, #{byte}")
                asm(f"ld1r{ld} z{zr}.{t}, p0/z, [x15]", f"op(A)[{za_rows + i}, p] to every lane")
        asm("add x1, x1, x2", "next K step of op(A)")
        asm("add x3, x3, x4", "next K step of op(B)")

    def mopas(s: int) -> None:
        for i in range(tm):
            for j in range(tn):
                asm(f"fmopa za{i * tn + j}.{t}, {row_pred[i]}/m, {col_pred[j]}/m, "
                    f"z{za_reg(s, i)}.{t}, z{zb_reg(s, j)}.{t}")
        for i, zr in enumerate(regs.bcast[s]):
            for j in range(tn):
                asm(f"fmla z{regs.acc[i, j]}.{t}, p0/m, z{zb_reg(s, j)}.{t}, z{zr}.{t}",
                    f"SVE row {za_rows + i}, column tile {j}" if j == 0 else "")

    lines_head = [
        f"// Generated by {__name__} from",
        f"//   {spec!r}",
        "// Do not edit: change the generator and re-run `autotune install`.",
        f"// SVL {svl_bits} bits: VL = {vl} {spec.ctype}s; C block {spec.mr}x{spec.nr} in "
        f"{tm}x{tn} ZA tiles (za0.{t}..za{tm * tn - 1}.{t}, tile (i,j) = za[i*{tn}+j]).",
        f"// op(A): {'packed panel, lda = ' + str(fmt.a.panel_ld) if fmt.a.packed else 'in place'}; "
        f"op(B): {'packed panel, ldb = ' + str(fmt.b.panel_ld) if fmt.b.packed else 'in place'}.",
        *([f"// Hybrid: rows {za_rows}..{spec.mr - 1} by SVE fmla (broadcast op(A) x row of op(B)),",
           "// stored through za0 (rows in, columns out) after the ZA part."] if sve_rows else []),
        "// Registers: x0 K, x1 A, x2 lda, x3 B, x4 ldb, x5 C, x6 ldc; alpha, beta in",
        "// x9/x10 across smstart, z30/z31 at the store.",
        "// Operand sets (ping, pong): op(A) "
        + ", ".join(f"z{r}" for r in sorted(regs.a[0].values())) + " / "
        + ", ".join(f"z{r}" for r in sorted(regs.a[1].values())) + "; op(B) "
        + ", ".join(f"z{r}" for r in sorted(regs.b[0].values())) + " / "
        + ", ".join(f"z{r}" for r in sorted(regs.b[1].values())) + ".",
        "#if !defined(__aarch64__)",
        '#error "this kernel needs AArch64 with SME2: compile it with the sme2 target\'s flags"',
        "#endif",
        "    .arch armv9-a+sme2" + ("+sme-f64f64" if spec.dtype == "f64" else ""),
        "    .text",
        f"    .globl {name}",
        f"    .type {name}, %function",
        f"    .globl {name}{STREAMING_SUFFIX}",
        f"    .type {name}{STREAMING_SUFFIX}, %function",
        "    .p2align 4",
    ]
    reg = "w" if spec.dtype == "f32" else "x"
    fr = "s" if spec.dtype == "f32" else "d"

    def prologue() -> None:
        asm("stp x29, x30, [sp, #-80]!")
        asm("mov x29, sp")
        asm("stp d8, d9, [sp, #16]", "z8-z15 are clobbered: save their callee-saved low halves")
        asm("stp d10, d11, [sp, #32]")
        asm("stp d12, d13, [sp, #48]")
        asm("stp d14, d15, [sp, #64]")
        asm(f"fmov {reg}9, {fr}0", "alpha: FP registers do not survive smstart")
        asm(f"fmov {reg}10, {fr}1", "beta")
        asm(f"fcmp {fr}1, #0.0")
        asm("cset x11, eq", "x11 = (beta == 0): then C is never read")

    # The streaming entry: the caller (a plan's streaming region) is already in
    # streaming mode with ZA enabled and keeps both; x8 = 0 says "do not smstop".
    asm.lines.append(f"{name}{STREAMING_SUFFIX}:")
    prologue()
    asm("mov x8, #0", "entered streaming with ZA on: leave both on")
    asm(f"b {L}body")
    asm.lines.append(f"{name}:")
    prologue()
    asm("mov x8, #1", "this call owns streaming mode and ZA")
    asm.note("Commit a caller's lazy ZA save (AAPCS64 TPIDR2 block) before using ZA.")
    asm("mrs x16, tpidr2_el0")
    asm(f"cbz x16, {L}za_free")
    asm("ldur x14, [x16, #8]")
    asm("lsr x14, x14, #16", "reserved bytes 10-15 must be zero")
    asm(f"cbnz x14, {L}bad_tpidr2")
    asm("ldr x17, [x16]", "za_save_buffer")
    asm("ldrh w15, [x16, #8]", "num_za_save_slices")
    asm(f"cbz x17, {L}za_saved")
    asm("mov w12, #0")
    asm(f"cbz w15, {L}za_saved")
    asm.label(f"{L}za_save")
    asm("str za[w12, 0], [x17]")
    asm("addsvl x17, x17, #1")
    asm("add w12, w12, #1")
    asm("cmp w12, w15")
    asm(f"b.lo {L}za_save")
    asm.label(f"{L}za_saved")
    asm("msr tpidr2_el0, xzr")
    asm.label(f"{L}za_free")
    asm("smstart", "streaming mode and ZA, once per call")
    asm.label(f"{L}body")
    asm("zero {za}")
    asm(f"lsl x2, x2, #{shift}", "leading dimensions in bytes")
    asm(f"lsl x4, x4, #{shift}")
    asm(f"lsl x6, x6, #{shift}")
    asm(f"ptrue p0.{t}")
    if "p1" in row_pred:
        asm(f"mov x12, #{rows_last}")
        asm(f"whilelt p1.{t}, xzr, x12", f"rows of the last row tile: {rows_last} of {vl}")
    if "p2" in col_pred:
        asm(f"mov x12, #{cols_last}")
        asm(f"whilelt p2.{t}, xzr, x12", f"columns of the last column tile: {cols_last} of {vl}")
    for text, comment in pred_setup:
        asm(text, comment)
    if sve_rows:
        asm(f"mov x12, #{sve_rows}")
        asm(f"whilelt p7.{t}, xzr, x12", f"the {sve_rows} SVE rows of a column")
        for zr in regs.acc.values():
            asm(f"mov z{zr}.{t}, #0")

    asm.note("K loop in two stages: the loads of step p+1 are issued before the outer")
    asm.note("products of step p, so they overlap; nothing is loaded past step K-1.")
    asm(f"cbz x0, {L}store")
    load(0)
    asm("subs x0, x0, #1", "x0 = steps left after the one in set 0")
    asm(f"b.eq {L}last0")
    asm.label(f"{L}loop")
    load(1)
    mopas(0)
    asm("subs x0, x0, #1")
    asm(f"b.eq {L}last1")
    load(0)
    mopas(1)
    asm("subs x0, x0, #1")
    asm(f"b.ne {L}loop")
    asm.label(f"{L}last0")
    mopas(0)
    asm(f"b {L}store")
    asm.label(f"{L}last1")
    mopas(1)

    asm.label(f"{L}store")
    asm.note("C = alpha * ZA + beta * C, one column (a vertical tile slice) at a time.")
    asm(f"dup z30.{t}, {reg}9")
    asm(f"dup z31.{t}, {reg}10")
    # Scratch for the store: operand registers, free after the K loop.
    scratch = sorted(set(regs.a[0].values()) | set(regs.b[0].values()) | set(regs.a[1].values())
                     | set(regs.b[1].values()) | set(regs.bcast[0]) | set(regs.bcast[1]))
    val = scratch[:tm] if len(scratch) >= 2 * tm else [scratch[0]] * tm
    old = scratch[tm:2 * tm] if len(scratch) >= 2 * tm else [scratch[1]] * tm
    for j in range(tn):
        cols = spec.nr - j * vl if j == tn - 1 else vl
        for beta_zero in (False, True):
            tag = f"{L}c{j}_{'b0' if beta_zero else 'bc'}"
            if not beta_zero:
                asm(f"mov x13, #{j * vl}")
                asm("madd x13, x13, x6, x5", f"&C[0 + {j * vl}*ldc]")
                asm("mov w12, #0")
                asm(f"cbnz x11, {tag.replace('_bc', '_b0')}")
            asm.label(tag)
            for i in range(tm):
                p = row_pred[i]
                tile = i * tn + j
                v, o = val[i], old[i]
                asm(f"mova z{v}.{t}, p0/m, za{tile}v.{t}[w12, 0]", f"column of tile ({i},{j})")
                asm(f"fmul z{v}.{t}, z{v}.{t}, z30.{t}")
                if not beta_zero:
                    off = f", #{i}, mul vl" if i else ""
                    asm(f"ld1{ld} z{o}.{t}, {p}/z, [x13{off}]")
                    asm(f"fmla z{v}.{t}, {p}/m, z{o}.{t}, z31.{t}")
                off = f", #{i}, mul vl" if i else ""
                asm(f"st1{ld} z{v}.{t}, {p}, [x13{off}]")
            asm("add x13, x13, x6")
            asm("add w12, w12, #1")
            asm(f"cmp w12, #{cols}")
            asm(f"b.lt {tag}")
            if not beta_zero:
                asm(f"b {L}c{j}_done")
        asm.label(f"{L}c{j}_done")
    if sve_rows:
        asm.note("SVE rows: the accumulators are rows of C; za0 turns them into columns.")
        v, o = scratch[0], scratch[1]
        for j in range(tn):
            cols = spec.nr - j * vl if j == tn - 1 else vl
            asm(f"zero {{za0.{t}}}")
            for i in range(sve_rows):
                asm(f"mov w12, #{i}")
                asm(f"mova za0h.{t}[w12, 0], p0/m, z{regs.acc[i, j]}.{t}")
            asm(f"mov x13, #{j * vl}")
            asm("madd x13, x13, x6, x5")
            asm(f"add x13, x13, #{za_rows << shift}", f"&C[{za_rows} + {j * vl}*ldc]")
            asm("mov w12, #0")
            for beta_zero in (False, True):
                tag = f"{L}s{j}_{'b0' if beta_zero else 'bc'}"
                if not beta_zero:
                    asm(f"cbnz x11, {tag.replace('_bc', '_b0')}")
                asm.label(tag)
                asm(f"mova z{v}.{t}, p0/m, za0v.{t}[w12, 0]")
                asm(f"fmul z{v}.{t}, z{v}.{t}, z30.{t}")
                if not beta_zero:
                    asm(f"ld1{ld} z{o}.{t}, p7/z, [x13]")
                    asm(f"fmla z{v}.{t}, p7/m, z{o}.{t}, z31.{t}")
                asm(f"st1{ld} z{v}.{t}, p7, [x13]")
                asm("add x13, x13, x6")
                asm("add w12, w12, #1")
                asm(f"cmp w12, #{cols}")
                asm(f"b.lt {tag}")
                if not beta_zero:
                    asm(f"b {L}s{j}_done")
            asm.label(f"{L}s{j}_done")
    asm(f"cbz x8, {L}stay", "the streaming entry leaves the mode to its caller")
    asm("smstop")
    asm.label(f"{L}stay")
    asm("ldp d8, d9, [sp, #16]")
    asm("ldp d10, d11, [sp, #32]")
    asm("ldp d12, d13, [sp, #48]")
    asm("ldp d14, d15, [sp, #64]")
    asm("ldp x29, x30, [sp], #80")
    asm("ret")
    asm.label(f"{L}bad_tpidr2")
    asm("brk #0x5a", "malformed TPIDR2 block: the caller broke the SME ABI")
    tail = [f"    .size {name}, .-{name}", f"    .size {name}{STREAMING_SUFFIX}, .-{name}{STREAMING_SUFFIX}", '    .section .note.GNU-stack,"",%progbits', ""]
    return "\n".join(lines_head + asm.lines + tail)


def generate(spec: KernelSpec, svl_bits: int = DEFAULT_SVL) -> GeneratedSource:
    if spec.isa != ISA:
        raise ValueError(f"{spec.name} is not an sme2 kernel")
    if svl_bits not in SVL_CHOICES:
        raise ValueError(f"SVL must be one of {SVL_CHOICES}, got {svl_bits}")
    if spec.unroll != UNROLL:
        raise ValueError(f"{spec.name}: SME2 kernels have a two-stage K loop (unroll {UNROLL})")
    base = VARIANT_OF_TRANS[spec.trans]
    if spec.variant not in (base, base + "h"):
        raise ValueError(
            f"{spec.name}: the {spec.trans} layout needs variant "
            f"{base!r} (operand format), or {base + 'h'!r} for the hybrid form, not {spec.variant!r}"
        )
    if not fits(spec, svl_bits):
        fmt = kernel_format(spec, svl_bits)
        raise ValueError(
            f"{spec.name} needs {fmt.tiles_m}x{fmt.tiles_n} ZA tiles"
            + (f" and {fmt.sve_rows} SVE rows" if fmt.sve_rows else "")
            + f" at SVL {svl_bits}; {spec.dtype} has {ZA_TILES[spec.dtype]} tiles and "
            f"{VECTOR_REGISTERS} Z registers (hybrid kernels need 1..VL-1 SVE rows below whole tiles)"
        )
    return GeneratedSource(spec, _emit(spec, svl_bits), "asm")
