"""Kernel specifications: the one record every stage keys on.

A :class:`KernelSpec` names a fixed-size micro-kernel computing an ``mr x nr`` block
of ``C = alpha * op(A) * op(B) + beta * C`` over a run-time depth ``K``.  The
generator, the build, the harness, the tuned table and the run-time tiler all take
the same record, and its :attr:`KernelSpec.name` is a pure function of it.

Every kernel has the same C signature (column-major, BLAS convention)::

    void name(int64_t K, const T *A, int64_t lda, const T *B, int64_t ldb,
              T *C, int64_t ldc, T alpha, T beta);

so an executing plan can chain kernels of any family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, asdict

DTYPES = ("f32", "f64")
DTYPE_BYTES = {"f32": 4, "f64": 8}
DTYPE_CTYPE = {"f32": "float", "f64": "double"}
#: The dtype codes of the C side (AT_F32, AT_F64 of autotune.h).
DTYPE_CODE = {"f32": 0, "f64": 1}
BLAS_PREFIX = {"f32": "s", "f64": "d"}
TRANSPOSITIONS = ("nn", "nt", "tn", "tt")

#: The grammar of kernel names; tests check every generated name against it.
NAME_PATTERN = re.compile(
    r"^at_(?P<prefix>[sd])gemm_(?P<isa>[a-z0-9]+)_(?P<trans>nn|nt|tn|tt)_"
    r"(?P<mr>\d+)x(?P<nr>\d+)(?:_(?P<variant>[a-z][a-z0-9]*))?_u(?P<unroll>\d+)$"
)


@dataclass(frozen=True, order=True)
class KernelSpec:
    """One fixed-size micro-kernel.

    ``variant`` is the operand format: ``""`` reads A and B in place through their
    leading dimensions (the no-pack path of small GEMM); other formats name a packed
    layout the kernel's packing routines produce.  ``unroll`` is the K-loop unroll
    factor, a tuning of the same layout.
    """

    isa: str
    dtype: str
    mr: int
    nr: int
    trans_a: bool = False
    trans_b: bool = False
    variant: str = ""
    unroll: int = 1

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {DTYPES}")
        if self.mr < 1 or self.nr < 1 or self.unroll < 1:
            raise ValueError(f"mr, nr and unroll must be positive: {self!r}")

    @property
    def trans(self) -> str:
        return ("t" if self.trans_a else "n") + ("t" if self.trans_b else "n")

    @property
    def name(self) -> str:
        variant = f"_{self.variant}" if self.variant else ""
        return (
            f"at_{BLAS_PREFIX[self.dtype]}gemm_{self.isa}_{self.trans}_"
            f"{self.mr}x{self.nr}{variant}_u{self.unroll}"
        )

    @property
    def ctype(self) -> str:
        return DTYPE_CTYPE[self.dtype]

    @property
    def flops_per_k(self) -> int:
        return 2 * self.mr * self.nr

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "KernelSpec":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @classmethod
    def from_name(cls, name: str) -> "KernelSpec":
        match = NAME_PATTERN.match(name)
        if not match:
            raise ValueError(f"not a kernel name: {name!r}")
        trans = match["trans"]
        return cls(
            isa=match["isa"],
            dtype="f32" if match["prefix"] == "s" else "f64",
            mr=int(match["mr"]),
            nr=int(match["nr"]),
            trans_a=trans[0] == "t",
            trans_b=trans[1] == "t",
            variant=match["variant"] or "",
            unroll=int(match["unroll"]),
        )


def parse_trans(trans: str) -> tuple[bool, bool]:
    """``'nt'`` -> ``(False, True)``; accepts upper case as BLAS callers write it."""
    trans = trans.lower()
    if trans not in TRANSPOSITIONS:
        raise ValueError(f"transposition must be one of {TRANSPOSITIONS}, got {trans!r}")
    return trans[0] == "t", trans[1] == "t"


# ---------------------------------------------------------------------------
# x86 kernel families: the register-budget model
# ---------------------------------------------------------------------------
#
# A micro-kernel keeps its whole C block in registers for the length of the K
# loop, plus the operand registers one K step needs.  The model below counts
# those registers per loading strategy and admits a block only if it fits the
# ISA's register file; the generators (autotune.codegen.<isa>) declare exactly
# the values the model counts.  Where gcc 12 still moves a few of them through
# the stack at the top of the budget is listed in docs/kernels.md, with the
# strategies and the tables of the families.

import math as _math
from collections.abc import Iterable as _Iterable


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

#: ISAs with a kernel family.  An Arm section may extend the families later.
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
        vecs = _math.ceil(mr / w)
        return vecs * nr, x * vecs, x
    if kind == "bcast_a":
        vecs = _math.ceil(nr / w)
        return mr * vecs, x, x * vecs
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
    return max(1, min(unroll, _math.ceil(FMA_CHAINS / acc), free // acc))


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
    # would load every broadcast of op(B) again.
    return list(range(1, 2 * w + 1)) + [k * w // 2 for k in range(5, 9) if (k * w) % 2 == 0]


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


def _quick(isa: str, dtype: str, trans: str, specs: list[KernelSpec]) -> list[KernelSpec]:
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


def default_family(
    isas: _Iterable[str],
    dtypes: _Iterable[str] = ("f32", "f64"),
    transes: _Iterable[str] = TRANSPOSITIONS,
    quick: bool = False,
    svl_bits: int = 512,
) -> list[KernelSpec]:
    """The kernels an install generates for these ISAs.

    ``quick`` keeps roughly a tenth to a fifth of them: the largest blocks and
    the small tails a tiler needs (sides 1..4 and whole vectors).  ISAs without
    a family contribute nothing.
    """
    out: list[KernelSpec] = []
    for isa in isas:
        if isa in ARM_ISAS:
            for dtype in dtypes:
                for trans in transes:
                    out.extend(arm_family(isa, dtype, trans.lower(), svl_bits, quick))
            continue
        if isa not in REGISTER_FILES:
            continue
        for dtype in dtypes:
            for trans in transes:
                for specs in (family(isa, dtype, trans), gather_family(isa, dtype, trans)):
                    if specs:
                        out.extend(_quick(isa, dtype, trans.lower(), specs) if quick else specs)
    return sorted(out)


# ---------------------------------------------------------------------------
# Arm kernel families
# ---------------------------------------------------------------------------
#
# The NEON and SME2 register models live beside their generators
# (autotune.codegen.neon, autotune.codegen.sme2), whose instruction sequences
# they describe; this section makes them families like the x86 ones.

#: The Arm families, fastest first.
ARM_ISAS = ("sme2", "neon")
#: Streaming vector lengths the SME2 generator specialises to (and QEMU emulates).
SVL_CHOICES = (128, 256, 512, 1024, 2048)
# The quick NEON subset: IAAT's most used heights and widths.
_ARM_QUICK_SIDES = {1, 2, 3, 4, 8, 12, 16}


def arm_family(isa: str, dtype: str, trans: str, svl_bits: int = 512,
               quick: bool = False) -> list[KernelSpec]:
    """The NEON or SME2 family; ``quick`` keeps the common NEON sides and the
    whole-tile SME2 kernels (their hybrid edge forms are left to the full install)."""
    from .codegen import neon, sme2  # the models live with the generators

    if isa == "neon":
        specs = neon.family(dtype, trans)
        return sorted(s for s in specs if not quick or {s.mr, s.nr} <= _ARM_QUICK_SIDES)
    if isa == "sme2":
        specs = sme2.family(dtype, trans, svl_bits)
        return sorted(s for s in specs if not quick or not sme2.is_hybrid(s))
    raise ValueError(f"{isa!r} is not an Arm kernel family; Arm families: {ARM_ISAS}")


def model_score(spec: KernelSpec, svl_bits: int = 512) -> float:
    """The analytic rank of a kernel: FLOPs per operand load of one K step.

    What emulated tables rank by, since emulated timings mean nothing: IAAT's
    memops-per-FLOP model for NEON (inverted, so higher is better), KirbyMM's
    compute-to-memory ratio for SME2, and for the other families the same
    outer-product count, 2 mr nr / (mr + nr).
    """
    if spec.isa == "neon":
        from .codegen import neon

        return 1.0 / neon.memops_per_flop(spec)
    if spec.isa == "sme2":
        from .codegen import sme2

        return sme2.cmr(spec, svl_bits)
    return 2.0 * spec.mr * spec.nr / (spec.mr + spec.nr)
