"""NEON kernels (AArch64 Advanced SIMD): 32 x 128-bit registers, C intrinsics.

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

``col`` and ``row`` accumulate with ``fmla v.4s, v.4s, v.s[lane]``; tails of the
vector dimension use 64-bit registers and single-lane loads (never a full vector
past the footprint).  ``dot`` keeps one vector of partial sums per C element and
reduces it once at the end (IAAT's TN allocation: neither operand is contiguous
along i or j).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..specs import DTYPE_CTYPE, KernelSpec, parse_trans
from . import GeneratedSource

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


# --------------------------------------------------------------------------- C text


@dataclass(frozen=True)
class _Vocab:
    """Intrinsic spelling for one dtype."""

    dtype: str

    @property
    def sfx(self) -> str:
        return "f32" if self.dtype == "f32" else "f64"

    def is_q(self, width: int) -> bool:
        return width == LANES[self.dtype] or width == 3

    def vtype(self, width: int) -> str:
        if self.dtype == "f32":
            return "float32x4_t" if width >= 3 else "float32x2_t"
        return "float64x2_t" if width == 2 else "float64x1_t"

    def q(self, width: int) -> str:
        return "q" if self.is_q(width) else ""

    def load(self, width: int, ptr: str) -> str:
        # A one-element f32 chunk lives in a 64-bit register: load-and-duplicate
        # reads only that element.
        if self.dtype == "f32" and width == 1:
            return f"vld1_dup_f32({ptr})"
        if width == 3:
            return f"vld1q_lane_f32(({ptr}) + 2, vcombine_f32(vld1_f32({ptr}), vdup_n_f32(0)), 2)"
        return f"vld1{self.q(width)}_{self.sfx}({ptr})"

    def store(self, width: int, ptr: str, value: str) -> str:
        if self.dtype == "f32" and width == 1:
            return f"vst1_lane_f32({ptr}, {value}, 0);"
        if width == 3:
            return f"{{ const float32x4_t t = {value}; vst1_f32({ptr}, vget_low_f32(t)); vst1q_lane_f32(({ptr}) + 2, t, 2); }}"
        return f"vst1{self.q(width)}_{self.sfx}({ptr}, {value});"

    def zero(self, width: int) -> str:
        return f"vdup{self.q(width)}_n_{self.sfx}(0)"

    def fma_lane(self, acc: str, width: int, vec: str, b: str, b_width: int, lane: int) -> str:
        name = f"vfma{self.q(width)}_lane{self.q(b_width)}_{self.sfx}"
        return f"{acc} = {name}({acc}, {vec}, {b}, {lane});"

    def fma_n(self, acc: str, width: int, vec: str, scalar: str) -> str:
        return f"{acc} = vfma{self.q(width)}_n_{self.sfx}({acc}, {vec}, {scalar});"


def _banner(spec: KernelSpec) -> str:
    return (
        f"/* Generated by {__name__} from\n"
        f" *   {spec!r}\n"
        " * Do not edit: change the generator and re-run `autotune install`. */\n"
        "#if !defined(__ARM_NEON) || !defined(__aarch64__)\n"
        '#error "this kernel needs AArch64 Advanced SIMD: compile it with the neon target\'s flags"\n'
        "#endif\n\n"
        "#include <arm_neon.h>\n#include <stdint.h>\n\n"
    )


def _signature(spec: KernelSpec) -> str:
    t = DTYPE_CTYPE[spec.dtype]
    return (
        f"void {spec.name}(int64_t K, const {t} *A, int64_t lda, const {t} *B, int64_t ldb,\n"
        f"    {t} *C, int64_t ldc, {t} alpha, {t} beta)"
    )


def _interleave(fmas: list[str], loads: list[str]) -> list[str]:
    """Spread the loads of the next step evenly over this step's FMAs."""
    if not loads:
        return list(fmas)
    out: list[str] = []
    every = max(1, len(fmas) // len(loads))
    pending = list(loads)
    for k, fma in enumerate(fmas):
        if pending and k % every == 0:
            out.append(pending.pop(0))
        out.append(fma)
    return out + pending


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1

    def add(self, *lines: str) -> None:
        self.lines += ["    " * self.depth + line if line else "" for line in lines]

    def open(self, head: str) -> None:
        self.add(head + " {")
        self.depth += 1

    def close(self, tail: str = "") -> None:
        self.depth -= 1
        self.add("}" + tail)


def _emit_lanes(spec: KernelSpec) -> str:
    """The ``col`` and ``row`` forms: fmla by element, ping-pong K loop."""
    v = _Vocab(spec.dtype)
    t = DTYPE_CTYPE[spec.dtype]
    form = form_of(spec)
    # "vec" is the dimension held in vector lanes, "bc" the broadcast one.
    if form == "col":
        vec_n, bc_n, vec_name, vec_ptr = spec.mr, spec.nr, "a", "&A[{off} + ({p})*lda]"
    else:
        vec_n, bc_n, vec_name, vec_ptr = spec.nr, spec.mr, "b", "&B[{off} + ({p})*ldb]"
    vchunks = chunks(vec_n, spec.dtype)
    voffs = [sum(vchunks[:c]) for c in range(len(vchunks))]
    klane = spec.trans == "nt"
    if klane:
        bchunks = chunks(bc_n, spec.dtype)
        boffs = [sum(bchunks[:c]) for c in range(len(bchunks))]
    # Two K steps per broadcast register: a 64-bit pair for f32, a full q for f64.
    pair_width = 1 if spec.dtype == "f32" else 2
    pair_ptr = "&B[({p}) + {x}*ldb]" if form == "col" else "&A[({p}) + {x}*lda]"
    scalar = {
        ("col", False): "B[({p}) + {x}*ldb]",
        ("col", True): "B[{x} + ({p})*ldb]",
        ("row", False): "A[({p}) + {x}*lda]",
    }[(form, klane)]
    pair_type = "float32x2_t" if spec.dtype == "f32" else "float64x2_t"
    pair_load = "vld1_f32({})" if spec.dtype == "f32" else "vld1q_f64({})"

    def acc(x: int, c: int) -> str:
        return f"c{x}_{c}"

    def vreg(stage: int, c: int) -> str:
        return f"{vec_name}{stage}_{c}"

    def load_vec(stage: int, p: str) -> list[str]:
        return [f"{vreg(stage, c)} = {v.load(w, vec_ptr.format(off=voffs[c], p=p))};"
                for c, w in enumerate(vchunks)]

    def load_bc(stage: int, p: str) -> list[str]:
        if klane:
            return [f"r{stage}_{c} = {v.load(w, f'&B[{boffs[c]} + ({p})*ldb]')};"
                    for c, w in enumerate(bchunks)]
        return [f"k{x} = {pair_load.format(pair_ptr.format(p=p, x=x))};" for x in range(bc_n)]

    def bc_operand(stage: int, x: int) -> tuple[str, int, int]:
        """(register, its width, lane) holding op(B)[p, x] (or op(A)[x, p]) in ``stage``."""
        if klane:
            c = next(c for c in range(len(bchunks)) if boffs[c] <= x < boffs[c] + bchunks[c])
            return f"r{stage}_{c}", bchunks[c], x - boffs[c]
        return f"k{x}", pair_width, stage

    def fmas(stage: int, reload_pairs_at: str | None = None) -> list[str]:
        out = []
        for x in range(bc_n):
            reg, bw, lane = bc_operand(stage, x)
            for c, w in enumerate(vchunks):
                out.append(v.fma_lane(acc(x, c), w, vreg(stage, c), reg, bw, lane))
            if reload_pairs_at is not None:
                # This pair's last use: load the next two K steps into it.
                out.append(f"k{x} = {pair_load.format(pair_ptr.format(p=reload_pairs_at, x=x))};")
        return out

    L = _Lines()
    L.add("/* Accumulators: the whole C block stays in registers for the K loop. */")
    for x in range(bc_n):
        L.add(" ".join(f"{v.vtype(w)} {acc(x, c)} = {v.zero(w)};" for c, w in enumerate(vchunks)))
    L.add("/* Vector operand, two copies for the two stages of the K loop. */")
    for s in (0, 1):
        L.add(" ".join(f"{v.vtype(w)} {vreg(s, c)};" for c, w in enumerate(vchunks)))
    if klane:
        L.add("/* Rows of op(B) for the two stages. */")
        for s in (0, 1):
            L.add(" ".join(f"{v.vtype(w)} r{s}_{c};" for c, w in enumerate(bchunks)))
    else:
        L.add("/* Two K steps of the broadcast operand per register (lane = stage). */")
        L.add(" ".join(f"{pair_type} k{x};" for x in range(bc_n)))
    L.add("int64_t p = 0;")
    L.open("if (K >= 2)")
    L.add("/* Prologue: operands of step 0. */")
    L.add(*load_vec(0, "p"), *(load_bc(0, "p")))
    L.open("for (; p + 4 <= K; p += 2)")
    L.add("/* Stage 1 (ping): load step p+1 while multiplying step p. */")
    stage1_loads = load_vec(1, "p + 1") + (load_bc(1, "p + 1") if klane else [])
    L.add(*_interleave(fmas(0), stage1_loads))
    L.add("/* Stage 2 (pong): load step p+2 while multiplying step p+1. */")
    if klane:
        L.add(*_interleave(fmas(1), load_vec(0, "p + 2") + load_bc(0, "p + 2")))
    else:
        L.add(*_interleave(fmas(1, reload_pairs_at="p + 2"), load_vec(0, "p + 2")))
    L.close()
    L.add("/* Epilogue: the last pair of steps, loading nothing beyond it. */")
    stage1_loads = load_vec(1, "p + 1") + (load_bc(1, "p + 1") if klane else [])
    L.add(*_interleave(fmas(0), stage1_loads))
    L.add(*fmas(1))
    L.add("p += 2;")
    L.close()
    L.open("if (p < K)")
    L.add("/* Odd K: one step with scalar broadcasts. */")
    L.add(*load_vec(0, "p"))
    for x in range(bc_n):
        L.add(f"const {t} s{x} = {scalar.format(p='p', x=x)};")
        L.add(*[v.fma_n(acc(x, c), w, vreg(0, c), f"s{x}") for c, w in enumerate(vchunks)])
    L.close()
    L.add("/* C = alpha * acc + beta * C; beta == 0 never reads C. */")
    if form == "col":
        for beta_zero in (True, False):
            L.open("if (beta == (" + t + ")0)" if beta_zero else "else")
            for x in range(bc_n):
                for c, w in enumerate(vchunks):
                    ptr = f"&C[{voffs[c]} + {x}*ldc]"
                    val = f"vmul{v.q(w)}_n_{v.sfx}({acc(x, c)}, alpha)"
                    if not beta_zero:
                        val = f"vfma{v.q(w)}_n_{v.sfx}({val}, {v.load(w, ptr)}, beta)"
                    L.add(v.store(w, ptr, val))
            L.close()
    else:
        # Row form: the lanes run along j, C's columns are strided: scalar stores.
        for beta_zero in (True, False):
            L.open("if (beta == (" + t + ")0)" if beta_zero else "else")
            for x in range(bc_n):
                for c, w in enumerate(vchunks):
                    for lane in range(w):
                        get = f"vget{v.q(w)}_lane_{v.sfx}({acc(x, c)}, {lane})"
                        dst = f"C[{x} + {voffs[c] + lane}*ldc]"
                        rhs = f"alpha * {get}" if beta_zero else f"alpha * {get} + beta * {dst}"
                        L.add(f"{dst} = {rhs};")
            L.close()
    return _banner(spec) + _signature(spec) + "\n{\n" + "\n".join(L.lines) + "\n}\n"


def _emit_dot(spec: KernelSpec) -> str:
    """The ``tn`` form: one vector of partial dot products per C element."""
    v = _Vocab(spec.dtype)
    t = DTYPE_CTYPE[spec.dtype]
    W = LANES[spec.dtype]
    mr, nr = spec.mr, spec.nr
    vt = v.vtype(W)
    q = f"vld1q_{v.sfx}"

    def loads(stage: int, p: str) -> list[str]:
        return ([f"a{stage}_{i} = {q}(&A[({p}) + {i}*lda]);" for i in range(mr)]
                + [f"b{stage}_{j} = {q}(&B[({p}) + {j}*ldb]);" for j in range(nr)])

    def fmas(stage: int) -> list[str]:
        return [f"d{i}_{j} = vfmaq_{v.sfx}(d{i}_{j}, a{stage}_{i}, b{stage}_{j});"
                for i in range(mr) for j in range(nr)]

    L = _Lines()
    L.add(f"/* d_i_j holds {W} partial sums of C[i, j] along K. */")
    for i in range(mr):
        L.add(" ".join(f"{vt} d{i}_{j} = vdupq_n_{v.sfx}(0);" for j in range(nr)))
    for s in (0, 1):
        L.add(" ".join([f"{vt} a{s}_{i};" for i in range(mr)] + [f"{vt} b{s}_{j};" for j in range(nr)]))
    L.add("int64_t p = 0;")
    L.open(f"if (K >= {2 * W})")
    L.add(*loads(0, "p"))
    L.open(f"for (; p + {4 * W} <= K; p += {2 * W})")
    L.add(f"/* Stage 1: load K steps p+{W}.. while multiplying p.. */")
    L.add(*_interleave(fmas(0), loads(1, f"p + {W}")))
    L.add(f"/* Stage 2: load K steps p+{2 * W}.. while multiplying p+{W}.. */")
    L.add(*_interleave(fmas(1), loads(0, f"p + {2 * W}")))
    L.close()
    L.add(*_interleave(fmas(0), loads(1, f"p + {W}")))
    L.add(*fmas(1))
    L.add(f"p += {2 * W};")
    L.close()
    L.open(f"if (p + {W} <= K)")
    L.add(*loads(0, "p"), *fmas(0))
    L.add(f"p += {W};")
    L.close()
    L.add("/* Reduce, then the last K % lanes steps in scalar arithmetic. */")
    for i in range(mr):
        L.add(" ".join(f"{t} s{i}_{j} = vaddvq_{v.sfx}(d{i}_{j});" for j in range(nr)))
    L.open("for (; p < K; ++p)")
    for i in range(mr):
        L.add(f"const {t} x{i} = A[p + {i}*lda];")
    for i in range(mr):
        L.add(" ".join(f"s{i}_{j} += x{i} * B[p + {j}*ldb];" for j in range(nr)))
    L.close()
    for beta_zero in (True, False):
        L.open("if (beta == (" + t + ")0)" if beta_zero else "else")
        for j in range(nr):
            for i in range(mr):
                dst = f"C[{i} + {j}*ldc]"
                L.add(f"{dst} = alpha * s{i}_{j};" if beta_zero
                      else f"{dst} = alpha * s{i}_{j} + beta * {dst};")
        L.close()
    return _banner(spec) + _signature(spec) + "\n{\n" + "\n".join(L.lines) + "\n}\n"


def generate(spec: KernelSpec) -> GeneratedSource:
    if spec.isa != ISA:
        raise ValueError(f"{spec.name} is not a neon kernel")
    if spec.unroll != UNROLL:
        raise ValueError(f"{spec.name}: NEON kernels have a two-stage K loop (unroll {UNROLL})")
    if not fits(spec):
        raise ValueError(
            f"{spec.name} needs {registers_needed(spec)} vector registers; NEON has {VECTOR_REGISTERS}"
            if spec.variant == "" else f"{spec.name}: NEON kernels read operands in place (no variant)"
        )
    text = _emit_dot(spec) if form_of(spec) == "dot" else _emit_lanes(spec)
    return GeneratedSource(spec, text, "c")
