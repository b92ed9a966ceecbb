"""The x86 kernel families (avx512, avx2, generic): the register-budget model.

A micro-kernel keeps its whole C block in registers for the length of the K
loop, plus the operand registers one K step needs.  The model below counts
those registers per loading strategy and admits a block only if it fits the
ISA's register file; the generators (autotune.codegen.<isa>) declare exactly
the values the model counts.  Where gcc 12 still moves a few of them through
the stack at the top of the budget is listed in docs/kernels.md, with the
strategies and the tables of the families.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..qformat import KINDS, PAD_COLUMNS
from ..specs import DTYPE_BYTES, DTYPES, KernelSpec, QKernelSpec, parse_trans


@dataclass(frozen=True)
class RegisterFile:
    """The floating-point registers one ISA's kernels may hold values in.

    ``vector`` is False for the portable family, whose registers are modelled
    as scalars (one element each, whatever the dtype).
    """

    isa: str
    count: int
    bits: int
    vector: bool = True
    # Copies of each operand register the model reserves: 2 double-buffers
    # them (IAAT's ping-pong), which gcc's allocator needs on the big AVX-512
    # blocks; with 16 registers the classic single-buffered blocks (16x6 fp32
    # AVX2: 12 + 2 + 1) compile without spills and a second buffer costs them.
    buffers: int = 1

    def lanes(self, dtype: str) -> int:
        if not self.vector:
            return 1
        return self.bits // (8 * DTYPE_BYTES[dtype])


REGISTER_FILES = {
    "avx512": RegisterFile("avx512", 32, 512, buffers=2),
    "avx2": RegisterFile("avx2", 16, 256),
    # x86-64 without ISA flags still has 16 xmm registers; modelled as scalars
    # because the portable kernels must not depend on the compiler vectorising.
    "generic": RegisterFile("generic", 16, 64, vector=False),
}

#: ISAs with an x86 register model (the Arm families are autotune.families.neon, .sme2).
SUPPORTED_ISAS = ("avx512", "avx2", "generic")

#: Loading strategy per transposition (vector ISAs).  See docs/kernels.md.
#:   "bcast_b": vectorise along M (a column of op(A) is contiguous), broadcast op(B);
#:   "bcast_a": vectorise along N (a row of op(B) is contiguous), broadcast op(A);
#:   "dot":     both operands contiguous along K: vector dot products, reduced at the end.
STRATEGIES = {"nn": "bcast_b", "nt": "bcast_b", "tt": "bcast_a", "tn": "dot"}

#: The one in-place variant: the "dot" strategy for NN blocks of a few rows.  A
#: 1-4 row block in the NN strategy fills 1-4 of a vector's lanes per FMA (one
#: FMA per column and K step whatever mr is), so the rows left over below a
#: multiple of the vector length cost as much as a full vector band: 17x129x33
#: spent half its time in its last row.  op(B) columns are contiguous along K,
#: so the rows of op(A), strided by lda along K, are gathered a vector of K at a
#: time and each C element is a dot product, W K steps per FMA.
GATHER = "gather"
#: Transpositions whose in-place operand strided along K can be gathered: NN's
#: op(A) (TT's op(B) would be the mirror image; NT has both operands strided).
GATHER_TRANS = ("nn",)
#: Rows of a gather block: beyond a few rows the NN strategy's masked vector is
#: cheaper than one gather per row and a horizontal sum per element.
GATHER_MAX_ROWS = 4
#: ISAs with a gather generator: AVX-512's mask registers make the K tail one
#: masked gather that reads nothing past the operand.
GATHER_ISAS = ("avx512",)

# Independent FMA chains that hide the FMA latency on the x86 cores this
# targets (4-cycle latency x 2 pipes); kernels with fewer accumulators split K
# over several accumulator sets when the register file has room for them.
FMA_CHAINS = 8
# Longest side a kernel is generated for: beyond it the tiler gains little and
# the name table grows without bound.
MAX_SIDE = 16


@dataclass(frozen=True)
class RegisterBudget:
    """The registers one kernel's K loop holds, by role."""

    accumulators: int  # one set of C-block registers
    a: int  # registers holding op(A) values of one K step
    b: int  # registers holding op(B) values of one K step
    sets: int  # accumulator sets the K loop rotates through (partial sums over K)

    @property
    def total(self) -> int:
        return self.accumulators * self.sets + self.a + self.b


def register_file(isa: str) -> RegisterFile:
    try:
        return REGISTER_FILES[isa]
    except KeyError:
        raise ValueError(f"no register model for ISA {isa!r}; known: {SUPPORTED_ISAS}") from None


def strategy(spec: KernelSpec) -> str:
    """How the kernel loads its operands: ``bcast_b``, ``bcast_a``, ``dot`` or ``scalar``."""
    if not register_file(spec.isa).vector:
        return "scalar"
    if spec.variant == GATHER:
        return "dot"
    return STRATEGIES[spec.trans]


def _base_budget(isa: str, dtype: str, trans: str, mr: int, nr: int,
                 variant: str = "") -> tuple[int, int, int]:
    rf = register_file(isa)
    w = rf.lanes(dtype)
    kind = "scalar" if not rf.vector else STRATEGIES[trans]
    if variant == GATHER:
        # One more register for A: the gather's vector of K offsets (0..7) * lda.
        acc, a, b = _base_budget(isa, dtype, "tn", mr, nr)
        return acc, a + 1, b
    # Operand registers are counted rf.buffers times, as IAAT's allocator
    # double-buffers them for its ping-pong K loop: on AVX-512, a model with
    # one buffer let gcc 12 spill accumulators of the 32x14 and 64x6 fp32 blocks.
    x = rf.buffers
    if kind == "bcast_b":
        vecs = math.ceil(mr / w)
        # One column: each vector of op(A) meets one FMA, which takes it from memory.
        return vecs * nr, (x * vecs if nr > 1 else x), x
    if kind == "bcast_a":
        vecs = math.ceil(nr / w)
        return mr * vecs, x, (x * vecs if mr > 1 else x)
    if kind == "dot":
        # The smaller side's vectors stay resident for a K chunk while the
        # other streams through (buffered) registers.
        resident = min(mr, nr)
        return mr * nr, (resident if mr <= nr else x), (x if mr <= nr else resident)
    # Scalar outer product: a column of op(A) and one op(B) value per K step.
    return mr * nr, mr, 1


def accumulator_sets(isa: str, dtype: str, trans: str, mr: int, nr: int, unroll: int,
                     variant: str = "") -> int:
    """Accumulator sets the generator rotates through within one unrolled K step.

    Enough sets to give FMA_CHAINS independent chains, no more than the unroll
    (each set takes one K step of an unrolled iteration) and no more than the
    free registers allow.
    """
    acc, a, b = _base_budget(isa, dtype, trans, mr, nr, variant)
    free = register_file(isa).count - a - b
    if free < acc:
        return 1
    return max(1, min(unroll, math.ceil(FMA_CHAINS / acc), free // acc))


def register_budget(spec: KernelSpec) -> RegisterBudget:
    acc, a, b = _base_budget(spec.isa, spec.dtype, spec.trans, spec.mr, spec.nr, spec.variant)
    sets = accumulator_sets(spec.isa, spec.dtype, spec.trans, spec.mr, spec.nr, spec.unroll,
                            spec.variant)
    return RegisterBudget(accumulators=acc, a=a, b=b, sets=sets)


def registers_needed(spec: KernelSpec) -> int:
    """Registers the kernel's K loop holds: accumulators (all sets) + A + B."""
    return register_budget(spec).total


def fits(spec: KernelSpec) -> bool:
    """Whether ``spec`` fits its ISA's register file (and has a family at all)."""
    if spec.isa not in REGISTER_FILES:
        return False
    if spec.variant and not (spec.variant == GATHER and spec.isa in GATHER_ISAS and
                             spec.trans in GATHER_TRANS and spec.mr <= GATHER_MAX_ROWS):
        return False
    return registers_needed(spec) <= register_file(spec.isa).count


def default_unroll(isa: str, dtype: str, trans: str, mr: int, nr: int, variant: str = "") -> int:
    """The model's K unroll: deep enough to rotate the accumulator sets that hide
    the FMA latency, and no deeper.

    A vector broadcast kernel whose one set already gives FMA_CHAINS chains is not
    unrolled: its K step is a dozen or more instructions, so the loop's own cost
    is noise, while an unrolled body's set-up costs at small K (measured on Zen 5:
    16x14 fp32 6 % faster at K = 8 without unrolling, the same at K = 256).  A
    "dot" or gather kernel's K step is a whole vector of K, so it unrolls half as much.
    """
    acc, _, _ = _base_budget(isa, dtype, trans, mr, nr, variant)
    vector = register_file(isa).vector
    dot = vector and (STRATEGIES[trans] == "dot" or variant == GATHER)
    if acc >= FMA_CHAINS:
        if vector and not dot:
            return 1
        unroll = 4
    else:
        unroll = 8
    if dot:
        unroll //= 2
    return unroll


def _fits_shape(isa: str, dtype: str, trans: str, mr: int, nr: int) -> bool:
    acc, a, b = _base_budget(isa, dtype, trans, mr, nr)
    return acc + a + b <= register_file(isa).count


def _vector_sides(w: int) -> list[int]:
    # Every size up to two vectors (the last one masked), then half-vector steps to
    # 4 vectors.  Two-vector blocks of every height let a band of 13 fp64 or 31
    # fp32 rows be one kernel instead of two (8 + 5, 16 + 15), each of which
    # would load every broadcast of op(B) again.  Then 6, 8, 12 and 16 vectors, which
    # only a single column (or row) fits: a GEMV reads its whole column of A at a time.
    return list(range(1, 2 * w + 1)) + [k * w // 2 for k in range(5, 9) if (k * w) % 2 == 0] + \
        [k * w for k in (6, 8, 12, 16)]


def _shapes(isa: str, dtype: str, trans: str) -> list[tuple[int, int]]:
    rf = register_file(isa)
    w = rf.lanes(dtype)
    kind = "scalar" if not rf.vector else STRATEGIES[trans]
    if kind in ("bcast_b", "bcast_a"):
        pairs = [
            (vec, other)
            for vec in _vector_sides(w)
            for other in range(1, MAX_SIDE + 1)
        ]
        if kind == "bcast_a":
            pairs = [(other, vec) for vec, other in pairs]
    else:
        pairs = [(m, n) for m in range(1, MAX_SIDE + 1) for n in range(1, MAX_SIDE + 1)]
    return [(m, n) for m, n in pairs if _fits_shape(isa, dtype, trans, m, n)]


def family(isa: str, dtype: str, trans: str, unroll: int | None = None) -> list[KernelSpec]:
    """Every ``mr x nr`` kernel of one ISA, dtype and transposition that fits the model.

    Sorted (by the KernelSpec order: mr, then nr).  ``unroll`` None takes the
    model's choice per kernel (:func:`default_unroll`).
    """
    register_file(isa)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {DTYPES}")
    trans_a, trans_b = parse_trans(trans)
    trans = trans.lower()
    specs = []
    for mr, nr in _shapes(isa, dtype, trans):
        u = unroll if unroll is not None else default_unroll(isa, dtype, trans, mr, nr)
        specs.append(KernelSpec(isa, dtype, mr, nr, trans_a, trans_b, "", u))
    return sorted(specs)


def gather_family(isa: str, dtype: str, trans: str) -> list[KernelSpec]:
    """The gather variant's blocks (see GATHER): 1..GATHER_MAX_ROWS rows, every width that fits."""
    trans = trans.lower()
    if isa not in GATHER_ISAS or trans not in GATHER_TRANS:
        return []
    trans_a, trans_b = parse_trans(trans)
    specs = []
    for mr in range(1, GATHER_MAX_ROWS + 1):
        for nr in range(1, MAX_SIDE + 1):
            u = default_unroll(isa, dtype, trans, mr, nr, GATHER)
            spec = KernelSpec(isa, dtype, mr, nr, trans_a, trans_b, GATHER, u)
            if fits(spec):
                specs.append(spec)
    return sorted(specs)


def _max_other(shapes: set[tuple[int, int]], vec_side_first: bool, side: int) -> int:
    return max(
        (n if vec_side_first else m)
        for m, n in shapes
        if (m if vec_side_first else n) == side
    )


def quick(isa: str, dtype: str, trans: str, specs: list[KernelSpec]) -> list[KernelSpec]:
    """The quick install's subset of one family (``trans`` lower case): the small
    tails a tiler needs (sides 1..4 and whole vectors) and the largest blocks."""
    rf = register_file(isa)
    w = rf.lanes(dtype)
    kind = "scalar" if not rf.vector else STRATEGIES[trans]
    small = {1, 2, 3, 4}
    shapes = {(s.mr, s.nr) for s in specs}
    keep: set[tuple[int, int]] = set()
    if kind in ("bcast_b", "bcast_a"):
        first = kind == "bcast_b"
        # The vectorised side: small tails, one vector, whole multiples of it.
        vec_sides = small | {k * w for k in range(1, 5)}
        for side in sorted(vec_sides):
            if not any((m if first else n) == side for m, n in shapes):
                continue
            top = _max_other(shapes, first, side)
            # The other side: small tails and the largest that fits.
            for other in small | {top}:
                pair = (side, other) if first else (other, side)
                if pair in shapes:
                    keep.add(pair)
    else:
        for m, n in shapes:
            maximal = (m + 1, n) not in shapes and (m, n + 1) not in shapes
            if (m in small and n in small) or (maximal and min(m, n) > 1):
                keep.add((m, n))
    # The largest blocks (most FMAs per operand load) whatever their shape.
    biggest = max(m * n for m, n in shapes)
    keep |= {(m, n) for m, n in shapes if m * n == biggest}
    return [s for s in specs if (s.mr, s.nr) in keep]


def score(spec: KernelSpec) -> float:
    """The analytic rank of a kernel: FLOPs per operand element loaded in one K step
    of the outer product, 2 mr nr / (mr + nr)."""
    return 2.0 * spec.mr * spec.nr / (spec.mr + spec.nr)


# -- quantised kernels (int8 activations x 4- or 8-bit weights, autotune.qformat) ----------
# Written by autotune.codegen.quant_x86: AVX2 (vpmaddubsw), and the VNNI forms
# (vpdpbusd; VEX on 16 ymm, EVEX with AVX512VL on 32 ymm, EVEX on 32 zmm) compiled
# into the same unit with target attributes.

QUANT_ISAS = ("avx2", "avxvnni", "avx512vnni", "avx512vnnizmm")
#: The toolchain targets whose flags build them (one translation unit; VNNI by target attributes).
QUANT_TARGETS = ("avx2",)
#: What the CPU must have to run a kernel of each ISA, in autotune.host's names.  The zmm
#: kernels use AVX512F and AVX512_VNNI instructions only (no byte or word shifts, no VL forms).
QUANT_FEATURES = {
    "avx2": ("avx2", "fma"),
    "avxvnni": ("avx2", "fma", "avx_vnni"),
    "avx512vnni": ("avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512_vnni"),
    "avx512vnnizmm": ("avx2", "fma", "avx512f", "avx512_vnni"),
}
#: Vector registers each ISA's kernels may use.
QUANT_REGISTERS = {"avx2": 16, "avxvnni": 16, "avx512vnni": 32, "avx512vnnizmm": 32}
#: Columns (int32 or f32 lanes) of one vector of each ISA's kernels: a zmm spans two panels.
QUANT_LANES = {"avx2": 8, "avxvnni": 8, "avx512vnni": 8, "avx512vnnizmm": 16}


def quant_fits(isa: str, mr: int, nr: int) -> bool:
    """Whether the tile's accumulators leave registers for the weights and broadcasts.

    Each row and vector of columns (8 on ymm, 16 on zmm) keeps an f32 accumulator and
    an int16 (4 bits) or int32 (8 bits, and VNNI) sum live: at most 8 such tiles with
    16 registers (16 vectors, minus what the compiler can keep in memory operands;
    beyond that it spills every step), at most 12 with AVX-512's 32 (24, and 8 for
    the weights, broadcasts and constants).
    """
    return mr * (nr // QUANT_LANES[isa]) <= (8 if QUANT_REGISTERS[isa] == 16 else 12)


#: Independent vpdpbusd chains the zmm kernels keep in flight: the instruction's latency
#: (4-5 cycles) times the two pipes that issue it.
QUANT_CHAINS = 8


def quant_chains(isa: str, mr: int, nr: int) -> int:
    """Integer sums per tile of C a zmm kernel splits each block's dot products over.

    A tile's block sum is a chain of 8 dependent ``vpdpbusd`` per 32 rows of K, so a
    kernel of few tiles waits on the instruction's latency: the 1 x 32 GEMV form (two
    tiles) ran 1 M multiply-adds of K = N = 1024 in 16 us, 15 a cycle.  Splitting the
    chain over 2, 4 or 8 sums (added before the block's scaling step; the integer sums
    are exact, so the result keeps its bits) gives QUANT_CHAINS chains where the
    registers allow.
    """
    tiles = mr * (nr // QUANT_LANES[isa])
    chains = 1
    while tiles * chains < QUANT_CHAINS and chains < 8:
        chains *= 2
    return chains if isa == "avx512vnnizmm" else 1


def qkernel(kind: str, isa: str, mr: int, nr: int) -> QKernelSpec:
    """The record of one x86 quantised kernel; ValueError outside the model.

    nr is 8, 16 or 32 on ymm, 16 or 32 on zmm (whole vectors); mr is 1..8.  AMX
    tiles have their own model (:func:`amx_qkernel`).
    """
    if isa == AMX_ISA:
        return amx_qkernel(kind, mr, nr)
    if isa not in QUANT_ISAS:
        raise ValueError(f"isa must be one of {QUANT_ISAS}, not {isa!r}")
    widths = tuple(w for w in (8, 16, 32) if w % QUANT_LANES[isa] == 0)
    # nr divides PAD_COLUMNS: qgemm.c gives each thread whole units of that many columns
    if not (1 <= mr <= 8 and nr in widths and PAD_COLUMNS % nr == 0):
        raise ValueError(f"tile {mr}x{nr}: mr in 1..8, nr {' or '.join(map(str, widths))} for {isa}")
    return QKernelSpec(kind, isa, mr, nr, "x86", QUANT_FEATURES[isa], "gemv" if mr == 1 else "tile")


def quant_family(isa: str = "avx2", kinds: tuple[str, ...] = KINDS, quick: bool = False) -> list[QKernelSpec]:
    """The kernels install builds, validates and measures: GEMV forms (mr = 1) and tiles.

    ``quick``: one GEMV form and one tile per kind (``autotune install --quick``).
    Three-row tiles are left out: M = 16 and 64 would leave a row to the GEMV form.
    The zmm tiles are whole zmm wide (16 or 32 columns); install times them beside the
    ymm ones and keeps whichever is faster, as for any other candidates.
    """
    if isa == AMX_ISA:
        return amx_family(kinds, quick)
    if isa == "avx512vnnizmm":
        tiles = [(1, 16), (4, 16)] if quick else \
            [(1, 16), (1, 32), (2, 16), (2, 32), (4, 16), (4, 32), (6, 16), (6, 32), (8, 16)]
    else:
        tiles = [(1, 8), (4, 8)] if quick else [(1, 8), (1, 16), (1, 32), (2, 8), (2, 16), (2, 32), (4, 8), (4, 16)]
    if isa == "avx512vnni" and not quick:
        tiles += [(6, 16), (8, 8)]
    return [qkernel(kind, isa, mr, nr) for kind in kinds for mr, nr in tiles if quant_fits(isa, mr, nr)]


def quant_isas(features: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The quantised ISAs a CPU with ``features`` (autotune.host names, after the ISA cap) runs."""
    return tuple(isa for isa in QUANT_ISAS if set(QUANT_FEATURES[isa]) <= set(features))


# -- AMX quantised kernels (int8 tiles, tdpbssd) ---------------------------------------------
# Written by autotune.codegen.quant_amx.  The model is the tile file rather than vector
# registers: palette 1 has 8 tiles of at most 16 rows x 64 bytes.  A kernel keeps its C
# block as int32 tiles of at most 16 rows x 16 columns (one 64-byte row of int32), one
# A tile per 16 rows (the activation codes of one K step, read straight from the
# quantised A) and one B tile per 16 columns (the step's weight codes as bytes, four
# consecutive K per column in a row: qpanel8's order, two panels side by side).  The
# block scales need the int32 sums of every block of K, so each block ends with the C
# tiles stored and scaled in f32 with AVX2, as the vector kernels scale theirs.

AMX_ISA = "amx"
#: Tile registers, rows per tile, bytes per tile row (palette 1 of every AMX CPU so far).
AMX_TILES = 8
AMX_ROWS = 16
AMX_ROW_BYTES = 64
#: int32 columns of one C tile row, and so the columns of one B tile.
AMX_TILE_COLUMNS = AMX_ROW_BYTES // 4
#: The tile instructions, AVX2 and FMA for the nibble expansion, and AVX-512 with VNNI
#: for the scaling step (zmm, through the zmm kernels' primitives, whose target names
#: VNNI): every CPU with AMX has them (Sapphire Rapids on).
AMX_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile", "amx_int8")
#: Rows a kernel may cover: qgemm.c's passes are 96 rows (PASS_ROWS), which a tile's mr
#: must divide; beyond 16 rows a kernel holds two A tiles.
AMX_MR = (1, 2, 4, 8, 16, 32)

QUANT_ISAS = QUANT_ISAS + (AMX_ISA,)
QUANT_FEATURES[AMX_ISA] = AMX_FEATURES


def amx_tiles(mr: int, nr: int) -> tuple[int, int, int]:
    """(C, A, B) tiles an ``mr x nr`` AMX kernel holds: a C tile per 16 rows and 16 columns,
    an A tile per 16 rows, a B tile per 16 columns."""
    row_tiles, col_tiles = -(-mr // AMX_ROWS), nr // AMX_TILE_COLUMNS
    return row_tiles * col_tiles, row_tiles, col_tiles


def amx_fits(mr: int, nr: int) -> bool:
    """Whether the tile is one the AMX generator writes: whole 16-column C tiles (nr 16 or
    32, a divisor of PAD_COLUMNS), rows in AMX_MR, and every tile it holds in the 8."""
    if mr not in AMX_MR or nr % AMX_TILE_COLUMNS or PAD_COLUMNS % nr:
        return False
    return sum(amx_tiles(mr, nr)) <= AMX_TILES


def amx_qkernel(kind: str, mr: int, nr: int) -> QKernelSpec:
    """The record of one AMX kernel (family ``amx``: autotune.codegen.quant_amx writes it)."""
    if not amx_fits(mr, nr):
        raise ValueError(f"AMX tile {mr}x{nr}: mr in {AMX_MR}, nr 16 or 32")
    return QKernelSpec(kind, AMX_ISA, mr, nr, AMX_ISA, AMX_FEATURES, "gemv" if mr == 1 else "tile")


def amx_family(kinds: tuple[str, ...] = KINDS, quick: bool = False) -> list[QKernelSpec]:
    """The AMX kernels install builds where the CPU has AMX: tile configurations from one
    row (the GEMV form) to 32 rows x 32 columns (2 x 2 C tiles, all 8 tiles); install
    times them and keeps the fastest per form, as for every quantised ISA."""
    tiles = [(1, 32), (16, 32)] if quick else \
        [(1, 16), (1, 32), (2, 32), (4, 32), (8, 32), (16, 16), (16, 32), (32, 32)]
    return [amx_qkernel(kind, mr, nr) for kind in kinds for mr, nr in tiles]
