"""The NEON family (AArch64 Advanced SIMD, 32 x 128-bit registers): its register model.

The family follows IAAT's register allocator (three register groups: the C block,
two copies of the vector operand for the ping-pong K loop, the broadcast operand)
and its "minimal memops" ranking: every kernel of a family does the same FMAs per
K step, so kernels differ by the load instructions each FLOP costs.

Four kernel forms, chosen by where each operand is contiguous (column-major, BLAS):

=====  ===========  ================================  ================================
trans  form         vector operand (fmla by element)  broadcast operand
=====  ===========  ================================  ================================
nn     ``col``      column of op(A), along i          two K steps of op(B)[:, j] per j
nt     ``col``      column of op(A), along i          row of op(B), along j
tt     ``row``      row of op(B), along j             two K steps of op(A)[i, :] per i
tn     ``dot``      rows of op(A) and columns of op(B), both along K: dot products
=====  ===========  ================================  ================================

``dot`` keeps one vector of partial sums per C element and reduces it once at the
end (IAAT's TN allocation: neither operand is contiguous along i or j).  The
generator writing these forms as C intrinsics is autotune.codegen.neon.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..qformat import KINDS
from ..specs import KernelSpec, QKernelSpec, parse_trans

ISA = "neon"
VECTOR_REGISTERS = 32
LANES = {"f32": 4, "f64": 2}
#: The K loop is two stages (ping-pong), so every NEON kernel has unroll 2.
UNROLL = 2

# IAAT's row counts for the column forms; the budget decides the column counts.
_COL_MR = {"f32": (16, 12, 8, 4, 3, 2, 1), "f64": (8, 6, 4, 3, 2, 1)}
_MAX_DIM = 32
_DOT_MAX = 10


@dataclass(frozen=True)
class Budget:
    """Registers and load instructions of one kernel, per IAAT's allocator."""

    form: str  # "col", "row" or "dot"
    c_regs: int
    vector_regs: int  # both ping-pong copies
    broadcast_regs: int
    loads_per_k: float  # load instructions per K step

    @property
    def registers(self) -> int:
        return self.c_regs + self.vector_regs + self.broadcast_regs


def chunks(n: int, dtype: str) -> tuple[int, ...]:
    """Widths (in elements) of the registers holding ``n`` consecutive elements.

    Full 128-bit registers, then one register for the rest: two or one f32 in a
    64-bit register, three f32 in a 128-bit one filled by a pair load and a lane
    load.  A tail loads exactly the elements that exist.
    """
    lanes = LANES[dtype]
    rest = n % lanes
    return (lanes,) * (n // lanes) + ((rest,) if rest else ())


def form_of(spec: KernelSpec) -> str:
    return {"nn": "col", "nt": "col", "tt": "row", "tn": "dot"}[spec.trans]


def budget(spec: KernelSpec) -> Budget:
    dt, mr, nr = spec.dtype, spec.mr, spec.nr
    if spec.trans == "nn":
        vm = len(chunks(mr, dt))
        return Budget("col", vm * nr, 2 * vm, nr, vm + nr / 2)
    if spec.trans == "nt":
        vm, vn = len(chunks(mr, dt)), len(chunks(nr, dt))
        return Budget("col", vm * nr, 2 * vm, 2 * vn, vm + vn)
    if spec.trans == "tt":
        vn = len(chunks(nr, dt))
        return Budget("row", vn * mr, 2 * vn, mr, vn + mr / 2)
    lanes = LANES[dt]
    return Budget("dot", mr * nr, 2 * (mr + nr), 0, (mr + nr) / lanes)


def registers_needed(spec: KernelSpec) -> int:
    return budget(spec).registers


def fits(spec: KernelSpec) -> bool:
    return spec.isa == ISA and spec.variant == "" and registers_needed(spec) <= VECTOR_REGISTERS


def memops_per_flop(spec: KernelSpec) -> float:
    """IAAT's ranking: load instructions per floating-point operation (lower is better)."""
    return budget(spec).loads_per_k / spec.flops_per_k


def family(dtype: str, trans: str) -> list[KernelSpec]:
    """Every NEON kernel the register budget allows, fewest memops per FLOP first."""
    trans_a, trans_b = parse_trans(trans)

    def spec(mr: int, nr: int) -> KernelSpec:
        return KernelSpec(ISA, dtype, mr, nr, trans_a, trans_b, "", UNROLL)

    shapes: list[KernelSpec] = []
    if trans in ("nn", "nt"):
        for mr in _COL_MR[dtype]:
            shapes += [spec(mr, nr) for nr in range(1, _MAX_DIM + 1)]
    elif trans == "tt":
        for nr in _COL_MR[dtype]:
            shapes += [spec(mr, nr) for mr in range(1, _MAX_DIM + 1)]
    else:
        shapes = [spec(mr, nr) for mr in range(1, _DOT_MAX + 1) for nr in range(1, _DOT_MAX + 1)]
    kept = [s for s in shapes if fits(s)]
    return sorted(kept, key=lambda s: (memops_per_flop(s), -s.mr * s.nr, s.mr, s.nr))


#: The quick install's sides: IAAT's most used heights and widths.
QUICK_SIDES = frozenset({1, 2, 3, 4, 8, 12, 16})


def quick(specs: list[KernelSpec]) -> list[KernelSpec]:
    """The kernels of ``specs`` whose both sides are QUICK_SIDES."""
    return [s for s in specs if {s.mr, s.nr} <= QUICK_SIDES]


def score(spec: KernelSpec) -> float:
    """IAAT's memops-per-FLOP model inverted, so higher is better."""
    return 1.0 / memops_per_flop(spec)


# -- quantised kernels (int8 activations x 4- or 8-bit weights, autotune.qformat) ----------
# Written by autotune.codegen.quant_neon, one translation unit per ISA level.

#: ISA levels, most capable first: the order in which an aarch64 library prefers them.
QUANT_LEVELS = ("i8mm", "dotprod")
#: What the CPU must have for each level, in autotune.host's names (HWCAP_ASIMDDP is dotprod).
QUANT_FEATURES = {"dotprod": ("asimddp",), "i8mm": ("i8mm",)}
#: Tiles per level, in the order an emulated install (no timings) prefers them:
#: the blocks that keep most products per load first, then the GEMV forms.
#: SMMLA works on pairs of rows, so i8mm has no mr = 1 form; CPUs with i8mm take
#: the dotprod GEMV kernel for their single rows (every such core has dotprod).
QUANT_TILES = {"i8mm": ((4, 8), (2, 16), (2, 8)),
               "dotprod": ((4, 8), (2, 16), (1, 16), (1, 8), (1, 32))}


def quant_fits(mr: int, nr: int) -> bool:
    """Whether the accumulators leave half of the 32 vector registers to A and W.

    Per row and panel of 8 columns: two float32x4 of C and two int32x4 sums (i8mm:
    four 2x2 tiles per pair of rows, the same count).
    """
    return mr * (nr // 8) * 4 <= VECTOR_REGISTERS // 2


def qkernel(kind: str, level: str, mr: int, nr: int) -> QKernelSpec:
    """The record of one NEON quantised kernel; ValueError outside the model."""
    if level not in QUANT_LEVELS:
        raise ValueError(f"level must be one of {QUANT_LEVELS}, not {level!r}")
    if not (1 <= mr <= 8 and nr in (8, 16, 24, 32)):
        raise ValueError(f"tile {mr}x{nr}: mr in 1..8, nr a multiple of 8 up to 32")
    if level == "i8mm" and mr % 2:
        raise ValueError(f"i8mm kernels take rows in pairs: mr = {mr} is odd")
    if not quant_fits(mr, nr):
        raise ValueError(f"tile {mr}x{nr}: more accumulators than NEON's 32 registers hold")
    return QKernelSpec(kind, level, mr, nr, "neon", QUANT_FEATURES[level], "gemv" if mr == 1 else "tile")


def quant_family(levels: tuple[str, ...] = QUANT_LEVELS, kinds: tuple[str, ...] = KINDS) -> list[QKernelSpec]:
    """Every kernel of ``levels``, in order of preference: by level, then QUANT_TILES' order."""
    return [qkernel(kind, level, mr, nr) for level in QUANT_LEVELS if level in levels
            for mr, nr in QUANT_TILES[level] for kind in kinds]
