"""The SME2 family: outer products into the ZA tiles, and the register model behind them.

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

Variable-block forms (variant suffix ``v``): the same whole-tile kernel, whose
streaming entry computes any block of up to ``mr x nr`` given at run time (rows
and columns in x7), its predicates made from those counts.  Through its ordinary
entry (the kernel contract) it computes the whole ``mr x nr`` block.  One narrow
kernel of each kind (1 x tiles, tiles x 1, 1 x 1 tiles) lets the planner put
every block of a few rows or columns (M or N below a tile, and the tails of
larger shapes) on outer products, as KleidiAI's kernels take the block's extent
as arguments, instead of on NEON or portable code.

Kernels are specialised to one streaming vector length (SVL): a spec carries
its own (``KernelSpec.svl``), and a family is enumerated per SVL.  The generator writing them as assembly is autotune.codegen.sme2; it
places its Z registers with :func:`allocate`, the same placement :func:`fits`
checks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..specs import KernelSpec, QKernelSpec, parse_trans

ISA = "sme2"
DEFAULT_SVL = 512
VECTOR_REGISTERS = 32
#: ZA tiles of each element size: SVL x SVL bits of ZA split into tiles.
ZA_TILES = {"f32": 4, "f64": 8}
#: K steps per iteration of a whole-tile kernel's K loop: two stages of two steps,
#: so a packed panel's two consecutive steps come in one multi-vector load and the
#: loop's pointer updates and branch are shared by 4 a b outer products (KleidiAI's
#: density: about 1.5 instructions per FMOPA when both operands are panels).
UNROLL = 4
#: The two-stage loop (operands of step p+1 load while step p multiplies): hybrid
#: kernels, whose SVE rows take registers of their own, and blocks whose four
#: steps of operands do not fit the Z registers (fp64 1x8 tiles).
UNROLL_NARROW = 2
UNROLLS = (UNROLL, UNROLL_NARROW)
VARIANT_OF_TRANS = {"nt": "", "nn": "pb", "tt": "pa", "tn": "papb"}


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


#: Reserved registers: alpha and beta (z30, z31) at the store; the operands get z0-z29.
_RESERVED = 2
#: Predicates a variable block may give its tiles: p1-p7 (p0 is all lanes).
VARIABLE_PREDICATES = 7
#: SVE edge rows a hybrid kernel may have (KirbyMM uses a few; more would be a tile).
HYBRID_ROWS = (1, 2, 3, 4)


def is_hybrid(spec: KernelSpec) -> bool:
    return spec.variant.endswith("h")


def is_variable(spec: KernelSpec) -> bool:
    """The block's extent comes at run time (streaming entry, x7 = rows | cols << 32)."""
    return spec.variant.endswith("v")


def spec_svl(spec: KernelSpec, svl_bits: int = 0) -> int:
    """The SVL a question about ``spec`` is asked at: the one given, else the spec's own,
    else the default (a spec made by hand, as tests do, without one)."""
    return svl_bits or spec.svl or DEFAULT_SVL


def kernel_format(spec: KernelSpec, svl_bits: int = 0) -> KernelFormat:
    vl = lanes(spec.dtype, spec_svl(spec, svl_bits))
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


def vector_registers(spec: KernelSpec, svl_bits: int = 0) -> int:
    """Z registers of the K loop.  Unroll 2: two operand sets (ping-pong) and the
    SVE accumulators, plus alpha and beta.  Unroll 4: the operands of four steps
    (alpha and beta come after the loop, in registers the loop no longer needs)."""
    fmt = kernel_format(spec, svl_bits)
    per_set = fmt.tiles_m + fmt.tiles_n + fmt.sve_rows
    if spec.unroll == UNROLL:
        return UNROLL * per_set
    return 2 * per_set + fmt.sve_rows * fmt.tiles_n + _RESERVED


def fits(spec: KernelSpec, svl_bits: int = 0) -> bool:
    """The block fits the ZA tiles and the Z registers, and the variant matches the layout."""
    base = VARIANT_OF_TRANS.get(spec.trans)
    if spec.isa != ISA or spec.variant not in (base, base + "h", base + "v") or spec.unroll not in UNROLLS:
        return False
    fmt = kernel_format(spec, svl_bits)
    # A variable block is a whole-tile block with the four-step loop, with a predicate
    # per row and column tile among p1-p7 (FMOPA's governing predicates are p0-p7).
    if is_variable(spec) and (spec.unroll != UNROLL or spec.mr % fmt.vl or spec.nr % fmt.vl
                              or fmt.tiles_m + fmt.tiles_n > VARIABLE_PREDICATES):
        return False
    if is_hybrid(spec) and (spec.unroll != UNROLL_NARROW or fmt.tiles_m < 1 or fmt.sve_rows < 1):
        return False
    if fmt.tiles_m * fmt.tiles_n > ZA_TILES[spec.dtype] or vector_registers(spec, svl_bits) > VECTOR_REGISTERS:
        return False
    za_rows = spec.mr - fmt.sve_rows
    if spec.unroll == UNROLL:
        return allocate_wide(fmt, za_rows, spec.nr) is not None
    return allocate(fmt.tiles_m, fmt.tiles_n, fmt.sve_rows,
                    load_groups(fmt.tiles_m, za_rows, fmt.vl, fmt.a.packed),
                    load_groups(fmt.tiles_n, spec.nr, fmt.vl, fmt.b.packed)) is not None


def with_unroll(spec: KernelSpec, svl_bits: int = 0) -> KernelSpec:
    """The spec with the loop its block takes: four steps when they fit, else two."""
    wide = replace(spec, unroll=UNROLL)
    return wide if fits(wide, svl_bits) else replace(spec, unroll=UNROLL_NARROW)


def cmr(spec: KernelSpec, svl_bits: int = 0) -> float:
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
            specs.append(with_unroll(KernelSpec(ISA, dtype, a * vl, b * vl, trans_a, trans_b, base, UNROLL,
                                                svl_bits)))
            specs += [KernelSpec(ISA, dtype, a * vl + r, b * vl, trans_a, trans_b, base + "h", UNROLL_NARROW,
                                 svl_bits)
                      for r in HYBRID_ROWS if r < vl]
    specs = [s for s in specs if fits(s, svl_bits)]
    specs += variable_blocks(dtype, trans, svl_bits)
    return sorted(specs, key=lambda s: (-cmr(s, svl_bits), s.mr, s.nr, s.variant))


def variable_blocks(dtype: str, trans: str, svl_bits: int = DEFAULT_SVL) -> list[KernelSpec]:
    """The variable-block kernels: a row of tiles (up to VL rows: M below a tile, a
    last row band), a column of tiles (N below a tile, a last column) and one tile
    (a corner), each as long as the four-step loop allows."""
    trans_a, trans_b = parse_trans(trans)
    vl = lanes(dtype, svl_bits)
    variant = VARIANT_OF_TRANS[trans] + "v"

    def spec(a: int, b: int) -> KernelSpec:
        return KernelSpec(ISA, dtype, a * vl, b * vl, trans_a, trans_b, variant, UNROLL, svl_bits)

    tiles = ZA_TILES[dtype]
    row = next(spec(1, b) for b in range(tiles, 0, -1) if fits(spec(1, b), svl_bits))
    col = next(spec(a, 1) for a in range(tiles, 0, -1) if fits(spec(a, 1), svl_bits))
    return list(dict.fromkeys((row, col, spec(1, 1))))


def quick(specs: list[KernelSpec]) -> list[KernelSpec]:
    """The quick install's kernels: the whole-tile ones and the variable blocks
    (hybrid edge forms are left to the full install)."""
    return [s for s in specs if not is_hybrid(s)]


def score(spec: KernelSpec, svl_bits: int = 0) -> float:
    """KirbyMM's compute-to-memory ratio (:func:`cmr`)."""
    return cmr(spec, svl_bits)


# --------------------------------------------------------------------------- Z registers


def load_groups(tiles: int, n: int, vl: int, padded: bool) -> list[tuple[int, int, int]]:
    """Split ``tiles`` vectors into 4-, 2- and 1-vector loads (SME2 multi-vector):
    ``(first tile, vectors, active elements)`` per load."""
    out, t = [], 0
    for size in (4, 2, 1):
        while tiles - t >= size:
            elems = size * vl if padded else max(0, min(size * vl, n - t * vl))
            out.append((t, size, elems))
            t += size
    return out


@dataclass(frozen=True)
class Registers:
    """Z registers of one kernel: operand sets, SVE broadcasts and accumulators."""

    a: tuple[dict[int, int], ...]  # per set: row tile -> register
    b: tuple[dict[int, int], ...]  # per set: column tile -> register
    bcast: tuple[tuple[int, ...], ...]  # per set: one register per SVE row
    acc: dict[tuple[int, int], int]  # (SVE row, column tile) -> register


def allocate(tiles_m: int, tiles_n: int, sve_rows: int, a_groups, b_groups) -> Registers | None:
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
    return Registers(a, b, bcast, acc)


@dataclass(frozen=True)
class WideLoad:
    """One load of the four-step loop: ``count`` vectors into z``reg``.. from the
    operand's K step ``step`` (0..3) at vector ``first`` (a packed panel's
    vectors run on across two steps: vector ``v`` of a two-step load is tile
    ``v % tiles`` of step ``step + v // tiles``)."""

    step: int
    first: int
    count: int
    elems: int
    reg: int


@dataclass(frozen=True)
class WideRegisters:
    """Z registers of the four-step loop: the loads of each side and, per K step
    0..3, the register of each of its tiles."""

    a_loads: tuple[WideLoad, ...]
    b_loads: tuple[WideLoad, ...]
    a: tuple[dict[int, int], ...]  # per step: row tile -> register
    b: tuple[dict[int, int], ...]  # per step: column tile -> register


def allocate_wide(fmt: KernelFormat, za_rows: int, nr: int) -> WideRegisters | None:
    """Registers of the four-step loop, or None when z0-z31 run out.  A packed side
    loads each stage's two steps (2 x tiles contiguous vectors) in 4-, 2- and
    1-vector groups; a side read in place loads each step's tiles (predicated to
    the block).  Groups start at a register aligned to their size, largest first."""
    free = [True] * VECTOR_REGISTERS
    requests = []  # (count, side, step, first, elems)
    for side, tiles, n, packed in (("a", fmt.tiles_m, za_rows, fmt.a.packed), ("b", fmt.tiles_n, nr, fmt.b.packed)):
        if packed:
            for stage in (0, 2):
                requests += [(c, side, stage, f, e) for f, c, e in load_groups(2 * tiles, 2 * tiles * fmt.vl, fmt.vl, True)]
        else:
            for step in range(UNROLL):
                requests += [(c, side, step, f, e) for f, c, e in load_groups(tiles, n, fmt.vl, False)]
    loads = {"a": [], "b": []}
    placed = {"a": tuple({} for _ in range(UNROLL)), "b": tuple({} for _ in range(UNROLL))}
    for count, side, step, first, elems in sorted(requests, key=lambda r: -r[0]):
        reg = next((r for r in range(0, VECTOR_REGISTERS - count + 1, count) if all(free[r:r + count])), None)
        if reg is None:
            return None
        free[reg:reg + count] = [False] * count
        loads[side].append(WideLoad(step, first, count, elems, reg))
        tiles = fmt.tiles_m if side == "a" else fmt.tiles_n
        for k in range(count):
            v = first + k
            placed[side][step + v // tiles][v % tiles] = reg + k
    order = lambda ld: (ld.step, ld.first)  # noqa: E731 - loads in memory order
    return WideRegisters(tuple(sorted(loads["a"], key=order)), tuple(sorted(loads["b"], key=order)),
                         placed["a"], placed["b"])


# -- quantised kernels (int8 activations x 4- or 8-bit weights, autotune.qformat) -----------
# Written by autotune.codegen.quant_sme2 for every SVL at once (VL read at run time):
# per kind, a ZA kernel of 1VL x 4VL (four smopa into za0-za3.s) and a GEMV of
# 1 x 4VL (multi-vector sdot into ZA).  They take whole matrices (at_qsme2_fn).
# The 4-bit kinds expand their nibbles with luti4; 8-bit codes go to smopa/sdot as loaded.

QUANT_KINDS = ("q4s", "q4a", "q8")


def quant_family() -> list[QKernelSpec]:
    """The SME2 quantised kernels, per kind the ZA kernel then the GEMV."""
    return [QKernelSpec(kind, ISA, 1, 4, "sme2", ("sme2",), form, vl_rows=form == "za", vl_cols=True)
            for kind in QUANT_KINDS for form in ("za", "gemv")]
