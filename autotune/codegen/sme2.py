"""SME2 kernels: the family of :mod:`autotune.families.sme2`, generated as AArch64 assembly.

The family module says which blocks exist, how each reads its operands (in place
or a packed panel, :func:`~autotune.families.sme2.kernel_format`) and where its
Z registers go (:func:`~autotune.families.sme2.allocate`); this module writes
the instructions.  A kernel has four parts: the entry points (prologue and, for
the ordinary entry, the lazy ZA save and ``smstart``), the set-up of predicates
and accumulators, the two-stage K loop of loads and outer products, and the
store ``C = alpha * ZA + beta * C`` (with, for a hybrid kernel, the SVE rows
after the ZA part), then the epilogue.

Why assembly and not ACLE intrinsics: ``__arm_new("za")`` makes clang call
``__arm_tpidr2_save``, which Debian 12's aarch64 runtime lacks; a kernel written
with explicit ``smstart``/``smstop`` commits a caller's lazy ZA save itself (a
few instructions, below) and links anywhere.  ``<name>`` enters streaming mode
once per call; ``<name>_s`` runs inside a caller's streaming region (ZA on).  Kernels are specialised to one streaming vector length (SVL, 512
bits by default): VL, tile counts and predicates are constants, except in a
variable block (variant suffix ``v``), whose streaming entry makes its predicates
from the block's extent in x7 (rows | cols << 32) and whose ordinary entry sets
x7 to the whole block.

The text includes ``kernels_src/arm/at_asm.h``: its macros spell the global
symbols, local labels and ELF-only directives, so one kernel assembles as ELF
(Linux) and as Mach-O (macOS) with the same machine code.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import contract
from ..families.sme2 import (
    ISA,
    UNROLL,
    UNROLL_NARROW,
    UNROLLS,
    VARIANT_OF_TRANS,
    VECTOR_REGISTERS,
    ZA_TILES,
    KernelFormat,
    Registers,
    WideRegisters,
    allocate,
    allocate_wide,
    fits,
    is_variable,
    kernel_format,
    load_groups,
    spec_svl,
)
from ..specs import SVL_CHOICES, KernelSpec
from . import GeneratedSource

_ELEM = {"f32": ("s", "w", 2), "f64": ("d", "d", 3)}  # suffix, ld1/st1 letter, log2 bytes
#: Every kernel has a second entry point, ``<name>_s``, for callers that already
#: run in streaming mode with ZA enabled (a plan's streaming region): it neither
#: commits a lazy ZA save nor switches modes, so one region serves many calls.
#: The predicate of all lanes.
_FULL = "p0"


@dataclass(frozen=True)
class _Group:
    """One load instruction: ``count`` consecutive vectors from tile ``first``."""

    first: int
    count: int
    elems: int  # active elements; count*VL when full
    pred: str  # governing predicate (p-reg or pn-reg name)


@dataclass(frozen=True)
class _Layout:
    """What every part of one kernel's text shares: element spelling, tiles,
    predicates, load groups and Z registers."""

    spec: KernelSpec
    svl_bits: int
    fmt: KernelFormat
    t: str  # element suffix: s or d
    ld: str  # ld1/st1 letter: w or d
    shift: int  # log2 of the element's bytes
    za_rows: int  # rows on ZA; the SVE rows follow them
    rows_last: int  # rows of the last row tile
    cols_last: int  # columns of the last column tile
    row_pred: tuple[str, ...]  # governing predicate per row tile
    col_pred: tuple[str, ...]  # governing predicate per column tile
    a_groups: tuple[_Group, ...]
    b_groups: tuple[_Group, ...]
    pred_setup: tuple[tuple[str, str], ...]  # (instruction, comment) making the groups' predicates
    regs: Registers | None  # the two-stage loop's registers (unroll 2)
    wide: WideRegisters | None  # the four-step loop's registers (unroll 4)
    wide_pred: dict  # (vectors, active elements) -> predicate, for the four-step loop's panel loads
    # A variable block's in-place loads: (side "a"/"b", first tile, vectors) -> predicate
    # made at run time from the block's rows (columns); empty for a fixed block.
    var_pred: dict

    @property
    def variable(self) -> bool:
        return is_variable(self.spec)

    def load_pred(self, side: str, first: int, count: int, elems: int) -> str:
        """The governing predicate of one operand load of the four-step loop."""
        if (side, first, count) in self.var_pred:
            return self.var_pred[side, first, count]
        return self.wide_pred[count, elems]

    @property
    def vl(self) -> int:
        return self.fmt.vl

    @property
    def tm(self) -> int:
        return self.fmt.tiles_m

    @property
    def tn(self) -> int:
        return self.fmt.tiles_n

    @property
    def sve_rows(self) -> int:
        return self.fmt.sve_rows

    def local(self, tail: str) -> str:
        """One of the kernel's local labels (``AT_L``: ``.L...`` on ELF, ``L...`` on Mach-O)."""
        return f"AT_L({self.spec.name}_{tail})"

    @property
    def gpr(self) -> str:
        """The general register width alpha and beta cross smstart in."""
        return "w" if self.spec.dtype == "f32" else "x"

    @property
    def fpr(self) -> str:
        """The FP register width alpha and beta arrive in."""
        return "s" if self.spec.dtype == "f32" else "d"

    def vecs(self, first: int, count: int) -> str:
        """A register or a multi-vector register list."""
        if count == 1:
            return f"z{first}.{self.t}"
        return f"{{z{first}.{self.t}-z{first + count - 1}.{self.t}}}"

    def scratch(self) -> list[int]:
        """Operand registers, free after the K loop: scratch for the store."""
        if self.regs is None:  # the four-step loop: every register but alpha's and beta's
            return list(range(VECTOR_REGISTERS - 2))
        regs = self.regs
        return sorted(set(regs.a[0].values()) | set(regs.b[0].values()) | set(regs.a[1].values())
                      | set(regs.b[1].values()) | set(regs.bcast[0]) | set(regs.bcast[1]))


def _layout(spec: KernelSpec, svl_bits: int) -> _Layout:
    t, ld, shift = _ELEM[spec.dtype]
    fmt = kernel_format(spec, svl_bits)
    vl, tm, tn, sve_rows = fmt.vl, fmt.tiles_m, fmt.tiles_n, fmt.sve_rows
    za_rows = spec.mr - sve_rows

    # Predicates.  p0: all lanes.  p1/p2: the last row / column tile when partial.
    # p7: the SVE rows' lanes in a column (hybrid kernels).
    rows_last = za_rows - (tm - 1) * vl
    cols_last = spec.nr - (tn - 1) * vl
    row_pred = [_FULL] * (tm - 1) + [_FULL if rows_last == vl else "p1"]
    col_pred = [_FULL] * (tn - 1) + [_FULL if cols_last == vl else "p2"]
    var_pred: dict[tuple[str, int, int], str] = {}
    if is_variable(spec):
        # Every tile's lanes come from the run-time extent: p1.. for the row tiles,
        # then the column tiles, all within p1-p7, which FMOPA can take (fits() sees to it).
        row_pred = [f"p{1 + i}" for i in range(tm)]
        col_pred = [f"p{1 + tm + j}" for j in range(tn)]
        pn = iter(range(15, 7, -1))  # the fixed loads' pn registers count up from pn8
        for side, tiles, packed, preds in (("a", tm, fmt.a.packed, row_pred), ("b", tn, fmt.b.packed, col_pred)):
            if packed:
                continue  # a panel is zero beyond the block: whole vectors
            for first, count, _ in load_groups(tiles, tiles * vl, vl, False):
                var_pred[side, first, count] = preds[first] if count == 1 else f"pn{next(pn)}"
    free_p = iter(("p3", "p4", "p5", "p6"))
    free_pn = iter(("pn8", "pn9", "pn10", "pn11", "pn12", "pn13", "pn14", "pn15"))
    pred_setup: list[tuple[str, str]] = []
    made: dict[tuple[int, int], str] = {}

    def predicate(count: int, elems: int) -> str:
        """The governing predicate of a load of ``count`` vectors with ``elems``
        active elements; loads of the same extent share one."""
        if (count, elems) in made:
            return made[count, elems]
        if count == 1 and elems == vl:
            reg = _FULL
        elif count == 1:
            reg = next(free_p)
            pred_setup.append((f"mov x12, #{elems}", ""))
            pred_setup.append((f"whilelt {reg}.{t}, xzr, x12", f"{elems} of {vl} lanes"))
        else:
            reg = next(free_pn)
            if elems == count * vl:
                pred_setup.append((f"ptrue {reg}.{t}", f"all {count} vectors"))
            else:
                pred_setup.append((f"mov x12, #{elems}", ""))
                pred_setup.append((f"whilelt {reg}.{t}, xzr, x12, vlx{count}", f"{elems} of {count * vl} lanes"))
        made[count, elems] = reg
        return reg

    a_raw = load_groups(tm, za_rows, vl, fmt.a.packed)
    b_raw = load_groups(tn, spec.nr, vl, fmt.b.packed)
    a_groups = tuple(_Group(f, c, e, var_pred.get(("a", f, c)) or predicate(c, e)) for f, c, e in a_raw)
    b_groups = tuple(_Group(f, c, e, var_pred.get(("b", f, c)) or predicate(c, e)) for f, c, e in b_raw)
    regs = wide = None
    if spec.unroll == UNROLL:
        wide = allocate_wide(fmt, za_rows, spec.nr)
        if wide is None:
            raise ValueError(f"{spec.name}: four K steps of operands do not fit z0-z31")
        for side, loads in (("a", wide.a_loads), ("b", wide.b_loads)):
            for load in loads:
                if (side, load.first, load.count) not in var_pred:
                    predicate(load.count, load.elems)
    else:
        regs = allocate(tm, tn, sve_rows, a_raw, b_raw)
        if regs is None:
            raise ValueError(f"{spec.name}: its operand groups do not fit z0-z29")
    return _Layout(spec, svl_bits, fmt, t, ld, shift, za_rows, rows_last, cols_last,
                   tuple(row_pred), tuple(col_pred), a_groups, b_groups, tuple(pred_setup), regs, wide, made,
                   var_pred)


class Asm:
    """Assembly lines, one instruction each with its comment in a column (``width``)."""

    def __init__(self, width: int = 46) -> None:
        self.lines: list[str] = []
        self.width = width

    def __call__(self, text: str, comment: str = "") -> None:
        self.lines.append(f"    {text:<{self.width}}// {comment}" if comment else f"    {text}")

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def note(self, text: str) -> None:
        self.lines.append(f"    // {text}")


def commit_lazy_za_save(asm: Asm, label) -> None:
    """Before an ordinary entry's ``smstart``: save a caller's dormant ZA (AAPCS64's lazy
    scheme: a TPIDR2 block names the buffer) and clear TPIDR2, so ZA is ours to use.
    ``label(tail)`` makes the entry's local labels; the caller defines ``za_free``
    (right after this) and ``bad_tpidr2`` (a trap for a malformed block)."""
    asm.note("Commit a caller's lazy ZA save (AAPCS64 TPIDR2 block) before using ZA.")
    asm("mrs x16, tpidr2_el0")
    asm(f"cbz x16, {label('za_free')}")
    asm("ldur x14, [x16, #8]")
    asm("lsr x14, x14, #16", "reserved bytes 10-15 must be zero")
    asm(f"cbnz x14, {label('bad_tpidr2')}")
    asm("ldr x17, [x16]", "za_save_buffer")
    asm("ldrh w15, [x16, #8]", "num_za_save_slices")
    asm(f"cbz x17, {label('za_saved')}")
    asm("mov w12, #0")
    asm(f"cbz w15, {label('za_saved')}")
    asm.label(label("za_save"))
    asm("str za[w12, 0], [x17]")
    asm("addsvl x17, x17, #1")
    asm("add w12, w12, #1")
    asm("cmp w12, w15")
    asm(f"b.lo {label('za_save')}")
    asm.label(label("za_saved"))
    asm("msr tpidr2_el0, xzr")


def _header(k: _Layout) -> list[str]:
    """The comment block and the directives before the code."""
    spec, fmt, t = k.spec, k.fmt, k.t
    vl, tm, tn = k.vl, k.tm, k.tn
    return [
        f"// Generated by {__name__} from",
        f"//   {spec!r}",
        "// Do not edit: change the generator and re-run `autotune install`.",
        f"// SVL {k.svl_bits} bits: VL = {vl} {spec.ctype}s; C block {spec.mr}x{spec.nr} in "
        f"{tm}x{tn} ZA tiles (za0.{t}..za{tm * tn - 1}.{t}, tile (i,j) = za[i*{tn}+j]).",
        f"// op(A): {'packed panel, lda = ' + str(fmt.a.panel_ld) if fmt.a.packed else 'in place'}; "
        f"op(B): {'packed panel, ldb = ' + str(fmt.b.panel_ld) if fmt.b.packed else 'in place'}.",
        *([f"// Hybrid: rows {k.za_rows}..{spec.mr - 1} by SVE fmla (broadcast op(A) x row of op(B)),",
           "// stored through za0 (rows in, columns out) after the ZA part."] if k.sve_rows else []),
        "// Registers: x0 K, x1 A, x2 lda, x3 B, x4 ldb, x5 C, x6 ldc; alpha, beta in",
        "// x9/x10 across smstart, z30/z31 at the store.",
        *_register_map(k),
        "// Symbols, local labels and ELF-only directives: at_asm.h (AT_SYM, AT_L, AT_FUNC_*).",
        "#if !defined(__aarch64__)",
        '#error "this kernel needs AArch64 with SME2: compile it with the sme2 target\'s flags"',
        "#endif",
        f'#include "{contract.ASM_HEADER}"',
        "    .arch armv9-a+sme2" + ("+sme-f64f64" if spec.dtype == "f64" else ""),
        "    .text",
    ]


def _register_map(k: _Layout) -> list[str]:
    """The header's map of the K loop's Z registers."""
    if k.wide is not None:
        w = k.wide
        def steps(side):
            return "; ".join(f"step {q}: " + ", ".join(f"z{side[q][i]}" for i in sorted(side[q])) for q in range(UNROLL))
        return ["// K loop: four steps per iteration (two stages of two), then one step at a time.",
                f"// op(A) {'panel, two steps per load' if k.fmt.a.packed else 'in place, one step per load'}: "
                + steps(w.a) + ".",
                f"// op(B) {'panel, two steps per load' if k.fmt.b.packed else 'in place, one step per load'}: "
                + steps(w.b) + ".",
                "// Loop registers: x7 iterations, x14/x15 op(A)/op(B) two steps ahead, x16/x17 lda/ldb in elements."]
    regs = k.regs
    return ["// Operand sets (ping, pong): op(A) "
            + ", ".join(f"z{r}" for r in sorted(regs.a[0].values())) + " / "
            + ", ".join(f"z{r}" for r in sorted(regs.a[1].values())) + "; op(B) "
            + ", ".join(f"z{r}" for r in sorted(regs.b[0].values())) + " / "
            + ", ".join(f"z{r}" for r in sorted(regs.b[1].values())) + "."]


#: A variable block keeps its column count at [sp, #80] from the set-up to the store.
_COLS_SLOT = 80


def _frame(k: _Layout) -> int:
    """Bytes of the frame: x29, x30, d8-d15 and, for a variable block, its column count."""
    return 96 if k.variable else 80


def _prologue(asm: Asm, k: _Layout) -> None:
    """Frame, callee-saved d8-d15, alpha and beta into general registers."""
    reg, fr = k.gpr, k.fpr
    asm(f"stp x29, x30, [sp, #-{_frame(k)}]!")
    asm("mov x29, sp")
    asm("stp d8, d9, [sp, #16]", "z8-z15 are clobbered: save their callee-saved low halves")
    asm("stp d10, d11, [sp, #32]")
    asm("stp d12, d13, [sp, #48]")
    asm("stp d14, d15, [sp, #64]")
    asm(f"fmov {reg}9, {fr}0", "alpha: FP registers do not survive smstart")
    asm(f"fmov {reg}10, {fr}1", "beta")
    asm(f"fcmp {fr}1, #0.0")
    asm("cset x11, eq", "x11 = (beta == 0): then C is never read")


def _entry_points(asm: Asm, k: _Layout) -> None:
    """Both entries; the ordinary one commits a lazy ZA save and enters streaming mode."""
    name, L = k.spec.name, k.local
    # The streaming entry: the caller (a plan's streaming region) is already in
    # streaming mode with ZA enabled and keeps both; x8 = 0 says "do not smstop".
    asm.lines.append(f"AT_FUNC_BEGIN({name}{contract.STREAMING_SUFFIX})")
    _prologue(asm, k)
    asm("mov x8, #0", "entered streaming with ZA on: leave both on")
    asm(f"b {L('body')}")
    asm.lines.append(f"AT_ENTRY({name})")
    _prologue(asm, k)
    asm("mov x8, #1", "this call owns streaming mode and ZA")
    if k.variable:
        asm(f"mov x7, #{k.spec.mr}", "the contract's block: all rows ...")
        asm(f"movk x7, #{k.spec.nr}, lsl #32", "... and all columns")
    commit_lazy_za_save(asm, L)
    asm.label(L("za_free"))
    asm("smstart", "streaming mode and ZA, once per call")


def _setup(asm: Asm, k: _Layout) -> None:
    """The common body's start: zero the accumulators, scale the leading
    dimensions to bytes, make the predicates."""
    t, vl = k.t, k.vl
    asm.label(k.local("body"))
    asm("zero {za}")
    asm(f"lsl x2, x2, #{k.shift}", "leading dimensions in bytes")
    asm(f"lsl x4, x4, #{k.shift}")
    asm(f"lsl x6, x6, #{k.shift}")
    asm(f"ptrue p0.{t}")
    if k.variable:
        _variable_predicates(asm, k)
    elif "p1" in k.row_pred:
        asm(f"mov x12, #{k.rows_last}")
        asm(f"whilelt p1.{t}, xzr, x12", f"rows of the last row tile: {k.rows_last} of {vl}")
    if "p2" in k.col_pred and not k.variable:
        asm(f"mov x12, #{k.cols_last}")
        asm(f"whilelt p2.{t}, xzr, x12", f"columns of the last column tile: {k.cols_last} of {vl}")
    for text, comment in k.pred_setup:
        asm(text, comment)
    if k.sve_rows:
        asm(f"mov x12, #{k.sve_rows}")
        asm(f"whilelt p7.{t}, xzr, x12", f"the {k.sve_rows} SVE rows of a column")
        for zr in k.regs.acc.values():
            asm(f"mov z{zr}.{t}, #0")


def _variable_predicates(asm: Asm, k: _Layout) -> None:
    """A variable block's lanes from its extent (x7 = rows | cols << 32): one predicate
    per row and column tile (all false past the extent) and the in-place loads'
    multi-vector counters; the column count waits on the stack for the store."""
    t, vl = k.t, k.vl
    asm("mov w12, w7", "rows of the block")
    asm("lsr x13, x7, #32", "columns of the block")
    asm(f"str x13, [sp, #{_COLS_SLOT}]")
    extent = {"a": ("x12", k.row_pred), "b": ("x13", k.col_pred)}
    for side, (count, preds) in extent.items():
        for i, p in enumerate(preds):
            start = "xzr" if i == 0 else "x14"
            if i:
                asm(f"mov x14, #{i * vl}")
            asm(f"whilelt {p}.{t}, {start}, {count}", f"{'rows' if side == 'a' else 'columns'} of tile {i}")
    for (side, first, n), p in sorted(k.var_pred.items()):
        if not p.startswith("pn"):
            continue
        count = extent[side][0]
        if first:
            asm(f"mov x14, #{first * vl}")
        asm(f"whilelt {p}.{t}, {'x14' if first else 'xzr'}, {count}, vlx{n}",
            f"op({side.upper()}) tiles {first}..{first + n - 1} in place")


def _load(asm: Asm, k: _Layout, s: int) -> None:
    """Load one K step's operands into set ``s`` and advance the operand pointers."""
    t, ld, regs = k.t, k.ld, k.regs
    for ptr, groups, placed in (("x1", k.a_groups, regs.a), ("x3", k.b_groups, regs.b)):
        for g in groups:
            if g.elems == 0:
                continue
            off = f", #{g.first}, mul vl" if g.first else ""
            asm(f"ld1{ld} {k.vecs(placed[s][g.first], g.count)}, {g.pred}/z, [{ptr}{off}]")
    for i, zr in enumerate(regs.bcast[s]):
        byte = (k.za_rows + i) << k.shift
        if byte <= 63 << k.shift:  # ld1r's immediate: 0..63 elements
            asm(f"ld1r{ld} z{zr}.{t}, p0/z, [x1, #{byte}]", f"op(A)[{k.za_rows + i}, p] to every lane")
        else:
            asm(f"add x15, x1, #{byte}")
            asm(f"ld1r{ld} z{zr}.{t}, p0/z, [x15]", f"op(A)[{k.za_rows + i}, p] to every lane")
    asm("add x1, x1, x2", "next K step of op(A)")
    asm("add x3, x3, x4", "next K step of op(B)")


def _mopas(asm: Asm, k: _Layout, s: int) -> None:
    """The outer products of set ``s`` into ZA, and the SVE rows' fmla."""
    t, tn, regs = k.t, k.tn, k.regs
    for i in range(k.tm):
        for j in range(tn):
            asm(f"fmopa za{i * tn + j}.{t}, {k.row_pred[i]}/m, {k.col_pred[j]}/m, "
                f"z{regs.a[s][i]}.{t}, z{regs.b[s][j]}.{t}")
    for i, zr in enumerate(regs.bcast[s]):
        for j in range(tn):
            asm(f"fmla z{regs.acc[i, j]}.{t}, p0/m, z{regs.b[s][j]}.{t}, z{zr}.{t}",
                f"SVE row {k.za_rows + i}, column tile {j}" if j == 0 else "")


def _k_loop(asm: Asm, k: _Layout) -> None:
    """Two stages, ping and pong: step p+1 loads while step p multiplies."""
    L = k.local
    asm.note("K loop in two stages: the loads of step p+1 are issued before the outer")
    asm.note("products of step p, so they overlap; nothing is loaded past step K-1.")
    asm(f"cbz x0, {L('store')}")
    _load(asm, k, 0)
    asm("subs x0, x0, #1", "x0 = steps left after the one in set 0")
    asm(f"b.eq {L('last0')}")
    asm.label(L("loop"))
    _load(asm, k, 1)
    _mopas(asm, k, 0)
    asm("subs x0, x0, #1")
    asm(f"b.eq {L('last1')}")
    _load(asm, k, 0)
    _mopas(asm, k, 1)
    asm("subs x0, x0, #1")
    asm(f"b.ne {L('loop')}")
    asm.label(L("last0"))
    _mopas(asm, k, 0)
    asm(f"b {L('store')}")
    asm.label(L("last1"))
    _mopas(asm, k, 1)


def _single_groups(tiles: int) -> bool:
    """One load per K step (1, 2 or 4 tiles): a side read in place can then address
    its four steps from two pointers, [x] and [x, ld, lsl], two steps apart."""
    return tiles in (1, 2, 4)


def _load_wide(asm: Asm, k: _Layout) -> None:
    """The operands of four K steps, stage by stage, and the pointer updates.

    A packed panel holds its K steps back to back (ld = tiles x VL), so a stage's
    two steps are one run of 2 x tiles vectors: multi-vector loads at ``#n, mul
    vl`` offsets, one ``addvl`` per iteration (per stage when an offset is out of
    the instruction's reach).  A side read in place loads each step's tiles:
    from x1 (x3) and x14 (x15) = two steps further, each with and without the
    scalar index ld, when a step is one load; else step by step."""
    ld, shift, w = k.ld, k.shift, k.wide
    sides = (("x1", "x2", "x14", "x16", k.fmt.a.packed, k.tm, w.a_loads),
             ("x3", "x4", "x15", "x17", k.fmt.b.packed, k.tn, w.b_loads))
    legal = {ptr: all(-8 * ld_.count <= (ld_.first + (2 * tiles if ld_.step else 0)) <= 7 * ld_.count
                      and (ld_.first + (2 * tiles if ld_.step else 0)) % ld_.count == 0 for ld_ in loads)
             for ptr, _, _, _, packed, tiles, loads in sides if packed}
    for ptr, ldr, ahead, index, packed, tiles, loads in sides:
        if not packed and _single_groups(tiles):
            asm(f"add {ahead}, {ptr}, {ldr}, lsl #1", "two K steps ahead")
    for stage in (0, 2):
        for ptr, ldr, ahead, index, packed, tiles, loads in sides:
            for load in (x for x in loads if x.step in (stage, stage + 1)):
                pred = k.load_pred("a" if ptr == "x1" else "b", load.first, load.count, load.elems)
                regs = k.vecs(load.reg, load.count)
                if packed:
                    vec = load.first + (2 * tiles if stage and legal[ptr] else 0)
                    off = f", #{vec}, mul vl" if vec else ""
                    addr = f"[{ptr}{off}]"
                elif _single_groups(tiles):
                    base = ptr if load.step < 2 else ahead
                    addr = f"[{base}, {index}, lsl #{shift}]" if load.step % 2 else f"[{base}]"
                else:
                    off = f", #{load.first}, mul vl" if load.first else ""
                    addr = f"[{ptr}{off}]"
                asm(f"ld1{ld} {regs}, {pred}/z, {addr}", f"op({'A' if ptr == 'x1' else 'B'}) step {load.step}"
                    + (f" and {load.step + 1}" if packed and load.first + load.count > tiles else ""))
                if not packed and not _single_groups(tiles) and load is [x for x in loads if x.step == load.step][-1]:
                    asm(f"add {ptr}, {ptr}, {ldr}")
            if packed and not legal[ptr] and stage == 0:
                asm(f"addvl {ptr}, {ptr}, #{2 * tiles}", "the second stage's two steps")
    for ptr, ldr, ahead, index, packed, tiles, loads in sides:
        if packed:
            asm(f"addvl {ptr}, {ptr}, #{(4 if legal[ptr] else 2) * tiles}", "next four K steps")
        elif _single_groups(tiles):
            asm(f"add {ptr}, {ptr}, {ldr}, lsl #2", "next four K steps")


def _mopas_wide(asm: Asm, k: _Layout, step: int) -> None:
    t, tn, w = k.t, k.tn, k.wide
    for i in range(k.tm):
        for j in range(tn):
            asm(f"fmopa za{i * tn + j}.{t}, {k.row_pred[i]}/m, {k.col_pred[j]}/m, "
                f"z{w.a[step][i]}.{t}, z{w.b[step][j]}.{t}")


def _k_loop_wide(asm: Asm, k: _Layout) -> None:
    """Four K steps per iteration: every load of the four steps, then their outer
    products (an out-of-order core overlaps the next iteration's loads with them);
    then K % 4 steps one at a time, from z0 (op(A)) and z8 (op(B))."""
    t, ld, L = k.t, k.ld, k.local
    asm.note("K loop: four steps per iteration, then the last K % 4 one by one.")
    asm(f"lsr x16, x2, #{k.shift}", "lda, ldb in elements (scalar-index loads)")
    asm(f"lsr x17, x4, #{k.shift}")
    asm("lsr x7, x0, #2", "iterations of four steps")
    asm("and x0, x0, #3", "steps left after them")
    asm(f"cbz x7, {L('tail')}")
    asm.label(L("loop"))
    _load_wide(asm, k)
    for step in range(UNROLL):
        _mopas_wide(asm, k, step)
    asm("subs x7, x7, #1")
    asm(f"b.ne {L('loop')}")
    asm.label(L("tail"))
    asm(f"cbz x0, {L('store')}")
    asm.label(L("step"))
    a_reg = {g.first: g.first for g in k.a_groups}
    b_reg = {g.first: 8 + g.first for g in k.b_groups}
    for ptr, groups, regs in (("x1", k.a_groups, a_reg), ("x3", k.b_groups, b_reg)):
        for g in groups:
            if g.elems:
                off = f", #{g.first}, mul vl" if g.first else ""
                asm(f"ld1{ld} {k.vecs(regs[g.first], g.count)}, {g.pred}/z, [{ptr}{off}]")
    asm("add x1, x1, x2")
    asm("add x3, x3, x4")
    for i in range(k.tm):
        for j in range(k.tn):
            asm(f"fmopa za{i * k.tn + j}.{t}, {k.row_pred[i]}/m, {k.col_pred[j]}/m, z{i}.{t}, z{8 + j}.{t}")
    asm("subs x0, x0, #1")
    asm(f"b.ne {L('step')}")


#: The bits of 1.0, as alpha arrives in x9 / w9.
_ONE_BITS = {"f32": "#0x3f800000", "f64": "#0x3ff0000000000000"}


def _store_za_plain(asm: Asm, k: _Layout) -> None:
    """C = ZA when alpha == 1 and beta == 0 (a BLAS call's usual case, KleidiAI's
    only one): four columns of a tile per SME2 four-slice MOVA, stored from four
    column pointers at the row tiles' ``#i, mul vl`` offsets, no arithmetic;
    otherwise on to the scaling store."""
    spec, t, ld, vl, tm, tn, L = k.spec, k.t, k.ld, k.vl, k.tm, k.tn, k.local
    asm.note("alpha == 1 and beta == 0: C = ZA, four columns (vertical slices) per MOVA.")
    asm(f"cbz x11, {L('scaled')}", "beta != 0")
    asm(f"mov {k.gpr}13, {_ONE_BITS[spec.dtype]}")
    asm(f"cmp {k.gpr}9, {k.gpr}13")
    asm(f"b.ne {L('scaled')}", "alpha != 1")
    if k.variable:
        asm(f"ldr x17, [sp, #{_COLS_SLOT}]", "columns of the block not yet stored")

    def store_column(j: int) -> None:
        """Column w12 of column tile j, one vertical slice per row tile."""
        for i in range(tm):
            off = f", #{i}, mul vl" if i else ""
            asm(f"mova z{4 * i}.{t}, p0/m, za{i * tn + j}v.{t}[w12, 0]")
            asm(f"st1{ld} z{4 * i}.{t}, {k.row_pred[i]}, [x13{off}]")
        asm("add x13, x13, x6")
        asm("add w12, w12, #1")

    for j in range(tn):
        cols = spec.nr - j * vl if j == tn - 1 else vl
        fours = cols // 4 * 4
        asm(f"mov x13, #{j * vl}")
        asm("madd x13, x13, x6, x5", f"&C[0 + {j * vl}*ldc]")
        asm("mov w12, #0")
        if k.variable:
            _tile_columns(asm, k)
            asm("and x1, x0, #0xfffffffffffffffc", "in fours")
            asm(f"cbz x1, {L(f'r{j}')}")
        if fours:
            tag = L(f"p{j}")
            asm.label(tag)
            asm("add x14, x13, x6", "columns w12 + 1, + 2, + 3")
            asm("add x15, x13, x6, lsl #1")
            asm("add x16, x14, x6, lsl #1")
            for i in range(tm):
                asm(f"mova {k.vecs(4 * i, 4)}, za{i * tn + j}v.{t}[w12, 0:3]", f"four columns of tile ({i},{j})")
            for c, ptr in enumerate(("x13", "x14", "x15", "x16")):
                for i in range(tm):
                    off = f", #{i}, mul vl" if i else ""
                    asm(f"st1{ld} z{4 * i + c}.{t}, {k.row_pred[i]}, [{ptr}{off}]")
            asm("add x13, x13, x6, lsl #2")
            asm("add w12, w12, #4")
            asm(f"cmp w12, {'w1' if k.variable else '#' + str(fours)}")
            asm(f"b.lt {tag}")
        if k.variable:
            # The last 0..3 columns of the tile, one at a time.
            asm.label(L(f"r{j}"))
            asm("cmp w12, w0")
            asm(f"b.ge {L(f'd{j}')}")
            asm.label(L(f"q{j}"))
            store_column(j)
            asm("cmp w12, w0")
            asm(f"b.lt {L(f'q{j}')}")
            asm.label(L(f"d{j}"))
            continue
        for _ in range(cols - fours):
            store_column(j)
    asm(f"b {L('stored')}")


def _tile_columns(asm: Asm, k: _Layout) -> None:
    """x0 = the columns of the next column tile, min(x17, VL); x17 = the columns after it."""
    asm(f"mov x0, #{k.vl}")
    asm("cmp x17, x0")
    asm("csel x0, x17, x0, lt", "columns of this tile")
    asm("sub x17, x17, x0")


def _store_za(asm: Asm, k: _Layout) -> None:
    """C = alpha * ZA + beta * C for the ZA rows, one column at a time; beta == 0
    (x11) takes a loop that never reads C."""
    spec, t, ld, vl, tm, tn, L = k.spec, k.t, k.ld, k.vl, k.tm, k.tn, k.local
    asm.label(L("store"))
    if k.wide is not None:
        _store_za_plain(asm, k)
        asm.label(L("scaled"))
    asm.note("C = alpha * ZA + beta * C, one column (a vertical tile slice) at a time.")
    asm(f"dup z30.{t}, {k.gpr}9")
    asm(f"dup z31.{t}, {k.gpr}10")
    scratch = k.scratch()
    val = scratch[:tm] if len(scratch) >= 2 * tm else [scratch[0]] * tm
    old = scratch[tm:2 * tm] if len(scratch) >= 2 * tm else [scratch[1]] * tm
    if k.variable:
        asm(f"ldr x17, [sp, #{_COLS_SLOT}]", "columns of the block not yet stored")

    for j in range(tn):
        cols = spec.nr - j * vl if j == tn - 1 else vl
        if k.variable:
            _tile_columns(asm, k)
            asm(f"cbz x0, {L(f'c{j}_done')}", "no column of this tile in the block")
        for beta_zero in (False, True):
            tag = L(f"c{j}_b0" if beta_zero else f"c{j}_bc")
            if not beta_zero:
                asm(f"mov x13, #{j * vl}")
                asm("madd x13, x13, x6, x5", f"&C[0 + {j * vl}*ldc]")
                asm("mov w12, #0")
                asm(f"cbnz x11, {L(f'c{j}_b0')}")
            asm.label(tag)
            for i in range(tm):
                p = k.row_pred[i]
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
            asm(f"cmp w12, {'w0' if k.variable else '#' + str(cols)}")
            asm(f"b.lt {tag}")
            if not beta_zero:
                asm(f"b {L(f'c{j}_done')}")
        asm.label(L(f"c{j}_done"))


def _store_sve_rows(asm: Asm, k: _Layout) -> None:
    """A hybrid kernel's SVE rows: the accumulators are rows of C, turned into
    columns through za0 and stored like the ZA part under predicate p7."""
    spec, t, ld, vl, tn, L = k.spec, k.t, k.ld, k.vl, k.tn, k.local
    asm.note("SVE rows: the accumulators are rows of C; za0 turns them into columns.")
    scratch = k.scratch()
    v, o = scratch[0], scratch[1]
    for j in range(tn):
        cols = spec.nr - j * vl if j == tn - 1 else vl
        asm(f"zero {{za0.{t}}}")
        for i in range(k.sve_rows):
            asm(f"mov w12, #{i}")
            asm(f"mova za0h.{t}[w12, 0], p0/m, z{k.regs.acc[i, j]}.{t}")
        asm(f"mov x13, #{j * vl}")
        asm("madd x13, x13, x6, x5")
        asm(f"add x13, x13, #{k.za_rows << k.shift}", f"&C[{k.za_rows} + {j * vl}*ldc]")
        asm("mov w12, #0")
        for beta_zero in (False, True):
            tag = L(f"s{j}_b0" if beta_zero else f"s{j}_bc")
            if not beta_zero:
                asm(f"cbnz x11, {L(f's{j}_b0')}")
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
                asm(f"b {L(f's{j}_done')}")
        asm.label(L(f"s{j}_done"))


def _epilogue(asm: Asm, k: _Layout) -> None:
    """Leave streaming mode (unless entered in it), restore, return; the trap for
    a malformed TPIDR2 block."""
    L = k.local
    asm(f"cbz x8, {L('stay')}", "the streaming entry leaves the mode to its caller")
    asm("smstop")
    asm.label(L("stay"))
    asm("ldp d8, d9, [sp, #16]")
    asm("ldp d10, d11, [sp, #32]")
    asm("ldp d12, d13, [sp, #48]")
    asm("ldp d14, d15, [sp, #64]")
    asm(f"ldp x29, x30, [sp], #{_frame(k)}")
    asm("ret")
    asm.label(L("bad_tpidr2"))
    asm("brk #0x5a", "malformed TPIDR2 block: the caller broke the SME ABI")


def _emit(spec: KernelSpec, svl_bits: int) -> str:
    k = _layout(spec, svl_bits)
    asm = Asm()
    _entry_points(asm, k)
    _setup(asm, k)
    if k.wide is not None:
        _k_loop_wide(asm, k)
    else:
        _k_loop(asm, k)
    _store_za(asm, k)
    if k.sve_rows:
        _store_sve_rows(asm, k)
    if k.wide is not None:
        asm.label(k.local("stored"))
    _epilogue(asm, k)
    name = spec.name
    tail = [f"AT_FUNC_END({name})", f"AT_FUNC_END({name}{contract.STREAMING_SUFFIX})", "AT_NO_EXEC_STACK", ""]
    return "\n".join(_header(k) + asm.lines + tail)


def generate(spec: KernelSpec, svl_bits: int = 0) -> GeneratedSource:
    """The kernel at its spec's SVL; ``svl_bits`` sets one for a spec without (as tests
    make by hand), never another than the spec's own, which its name carries."""
    if spec.isa != ISA:
        raise ValueError(f"{spec.name} is not an sme2 kernel")
    if spec.svl and svl_bits and svl_bits != spec.svl:
        raise ValueError(f"{spec.name} is specialised to SVL {spec.svl}, not {svl_bits}")
    svl_bits = spec_svl(spec, svl_bits)
    if svl_bits not in SVL_CHOICES:
        raise ValueError(f"SVL must be one of {SVL_CHOICES}, got {svl_bits}")
    if spec.unroll not in UNROLLS:
        raise ValueError(f"{spec.name}: SME2 kernels have a K loop of unroll {UNROLL} (whole tiles) "
                         f"or unroll {UNROLL_NARROW} (hybrids, or operands too many for four steps)")
    base = VARIANT_OF_TRANS[spec.trans]
    if spec.variant not in (base, base + "h", base + "v"):
        raise ValueError(
            f"{spec.name}: the {spec.trans} layout needs variant "
            f"{base!r} (operand format), or {base + 'h'!r} for the hybrid form, or {base + 'v'!r} "
            f"for the variable block, not {spec.variant!r}"
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
