"""The intrinsics-C emitter shared by the AVX-512 and AVX2 generators.

The two ISAs differ only in their vocabulary (vector type, mask form, the
intrinsic names), which :class:`Vocabulary` holds; the three loading
strategies of the register model (``autotune.families.x86.STRATEGIES``) are emitted
here once.  The emitter declares exactly the registers the model counts:
``sets`` accumulator sets of the C block, the vectors (or broadcasts) of one
K step, nothing else live across the K loop.

The module name starts with an underscore so that ``codegen.generate`` never
mistakes it for the generator of an ISA called "x86".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .. import contract
from ..families.x86 import GATHER, register_budget, register_file, strategy
from ..specs import DTYPE_BYTES, KernelSpec


#: (suffix, lanes) -> the load and the store of an xmm's first lanes that move without a
#: mask (Vocabulary.exact).  movq zeroes the upper lanes, as the masked load did, and
#: reads through a may_alias type.
_EXACT_MOVES = {
    ("ps", 1): ("_mm_load_ss({addr})", "_mm_store_ss({addr}, {value});"),
    ("ps", 2): ("_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)({addr})))",
                "_mm_storel_pi((__m64 *)({addr}), {value});"),
    ("pd", 1): ("_mm_load_sd({addr})", "_mm_store_sd({addr}, {value});"),
}


@dataclass(frozen=True)
class Vocabulary:
    """How one ISA spells the operations the kernels need, for one dtype."""

    isa: str
    module: str  # the generator module named in the banner
    guard: str  # preprocessor condition that must hold
    guard_message: str
    vtype: str
    prefix: str  # "_mm512" / "_mm256" / "_mm"
    suffix: str  # "ps" / "pd"
    lanes: int
    masked: str  # "k" (AVX-512 mask registers) or "vector" (AVX2 integer-vector masks)

    def op(self, name: str) -> str:
        return f"{self.prefix}_{name}_{self.suffix}"

    @property
    def bits(self) -> int:
        return 128 if self.prefix == "_mm" else int(self.prefix.removeprefix("_mm"))

    # --- masks -------------------------------------------------------------
    @property
    def mask_type(self) -> str:
        if self.masked == "k":
            # The narrowest k-mask type is 8 bits (a 4-lane ymm of fp64 uses its low 4).
            return f"__mmask{max(self.lanes, 8)}"
        return "__m128i" if self.bits == 128 else "__m256i"

    def const_mask(self, count: int) -> str:
        """A mask selecting the first ``count`` lanes, as a C constant expression."""
        if self.masked == "k":
            return f"({self.mask_type})0x{(1 << count) - 1:x}"
        # (An xmm of fp64 needs none: its one-lane tail moves exactly, Vocabulary.exact.)
        ones = ["-1"] * count + ["0"] * (self.lanes - count)
        setr = f"{self.prefix}_setr_epi32" if self.suffix == "ps" else f"{self.prefix}_setr_epi64x"
        return f"{setr}({', '.join(ones)})"

    def runtime_mask(self, count: str) -> str:
        """A k-mask of the first ``count`` lanes, ``0 < count < lanes`` known only at run
        time (AVX2 loads such a tail in pieces instead: :meth:`in_pieces`)."""
        if self.masked != "k":
            raise ValueError(f"{self.isa} moves a run-time count of lanes in pieces, without a mask")
        return f"({self.mask_type})((1u << {count}) - 1u)"

    # --- memory ------------------------------------------------------------
    def exact(self, lanes: int | None) -> bool:
        """Whether the first ``lanes`` lanes of a vector move by a scalar or 64-bit load
        and store (movss, movsd, movq): an xmm's one or two fp32, or one fp64.

        Those read and write exactly the lanes a mask would, without one: an fp32 2x2
        kernel at K = 8 took 4.6 ns a call with movq and 6.7 with k-masked moves
        (Xeon, AVX-512), and AVX2's vmaskmov is microcoded on AMD's Zen 1-3."""
        return self.bits == 128 and (self.suffix, lanes) in _EXACT_MOVES

    def in_pieces(self, lanes: int | str | None) -> bool:
        """Whether the first ``lanes`` lanes move as 4-, 2- and 1-lane pieces, through the
        helpers of :func:`_pieces_helpers`: AVX2's every partial vector that no single
        exact move covers.  ``lanes`` is a count the generator knows, or a C expression
        of one known at run time (1 to lanes - 1: the dot kernels' K tail).

        On AMD's Zen 1 vmaskmovps/pd costs about nine cycles as a load and more as a
        store, where the pieces cost one load each and a shuffle to join them: kernels
        with a 3-, 7- or 11-row fp32 column or a 3-row fp64 one ran 1.4-2.7x faster in
        pieces, at K = 2 to 256 (EPYC family 23 model 1, 2026-12-07)."""
        if isinstance(lanes, str):
            return self.masked == "vector"
        return self.masked == "vector" and lanes is not None and lanes < self.lanes and not self.exact(lanes)

    def needs_mask(self, lanes: int | None) -> bool:
        """Whether moving the first ``lanes`` of ``self.lanes`` lanes needs a mask declared."""
        return lanes != self.lanes and not self.exact(lanes) and not self.in_pieces(lanes)

    def load(self, addr: str, mask: str | None = None, lanes: int | str | None = None) -> str:
        """``lanes``: how many lanes ``mask`` selects, where the generator knows it (a
        number, or an expression :meth:`in_pieces` takes)."""
        if mask is None:
            return f"{self.op('loadu')}({addr})"
        if self.exact(lanes):
            return _EXACT_MOVES[self.suffix, lanes][0].format(addr=addr)
        if self.in_pieces(lanes):
            return f"{_pieces_name(self, 'load')}({addr}, {lanes})"
        if self.masked == "k":
            return f"{self.op('maskz_loadu')}({mask}, {addr})"
        # AVX2 maskload zeroes the masked lanes and never touches their memory.
        return f"{self.op('maskload')}({addr}, {mask})"

    def store(self, addr: str, value: str, mask: str | None = None, lanes: int | None = None) -> str:
        """``lanes``: how many lanes ``mask`` selects, where the generator knows it."""
        if mask is None:
            return f"{self.op('storeu')}({addr}, {value});"
        if self.exact(lanes):
            return _EXACT_MOVES[self.suffix, lanes][1].format(addr=addr, value=value)
        if self.in_pieces(lanes):
            return f"{_pieces_name(self, 'store')}({addr}, {value}, {lanes});"
        if self.masked == "k":
            return f"{self.op('mask_storeu')}({addr}, {mask}, {value});"
        return f"{self.op('maskstore')}({addr}, {mask}, {value});"

    # --- arithmetic --------------------------------------------------------
    def zero(self) -> str:
        return f"{self.op('setzero')}()"

    def set1(self, value: str) -> str:
        return f"{self.op('set1')}({value})"

    def fma(self, a: str, b: str, c: str) -> str:
        return f"{self.op('fmadd')}({a}, {b}, {c})"

    def mul(self, a: str, b: str) -> str:
        return f"{self.op('mul')}({a}, {b})"

    def add(self, a: str, b: str) -> str:
        return f"{self.op('add')}({a}, {b})"


def _pieces_helpers(voc: Vocabulary, ctype: str) -> list[str]:
    """AVX2: the load and the store of a vector's first ``n`` lanes as 4-, 2- and 1-lane
    pieces (Vocabulary.in_pieces), for the xmm and ymm of ``ctype``.

    vmaskmovps/pd is microcoded on AMD's Zen 1-3: to memory a 4x4 fp32 kernel spent two
    thirds of its time in its four masked stores of C, and from memory a 3x3 fp32 kernel
    ran at 6 GFLOPS where 4x3 ran at 28 (Zen 1).  ``n`` is a constant at every call, so
    the branches fold away.  The same lanes move and no other byte is touched, as with
    the masks; a load leaves the other lanes zero, as vmaskmov did.  Both widths are
    defined, each once per translation unit: the ymm helpers join xmm pieces, and kernels
    of both widths share a unit.
    """
    if voc.masked == "k":
        return []
    def exact_load(suffix: str, lanes: int) -> str:
        return _EXACT_MOVES[suffix, lanes][0].format(addr="p")

    if voc.suffix == "ps":
        xmm = [
            "static inline __attribute__((always_inline)) __m128 at_load_first_ps128(const float *p, int n)",
            "{",
            f"    if (n == 1) return {exact_load('ps', 1)};",
            f"    __m128 v = {exact_load('ps', 2)};",
            "    return n == 2 ? v : _mm_insert_ps(v, _mm_load_ss(p + 2), 0x20);",
            "}",
            "static inline __attribute__((always_inline)) void at_store_first_ps128(float *p, __m128 v, int n)",
            "{",
            "    if (n >= 2) {",
            "        _mm_storel_pi((__m64 *)p, v);",
            "        v = _mm_movehl_ps(v, v);",
            "        p += 2;",
            "        n -= 2;",
            "    }",
            "    if (n) _mm_store_ss(p, v);",
            "}",
        ]
        ymm = [
            "static inline __attribute__((always_inline)) __m256 at_load_first_ps(const float *p, int n)",
            "{",
            "    if (n < 4) return _mm256_zextps128_ps256(at_load_first_ps128(p, n));",
            "    if (n == 4) return _mm256_zextps128_ps256(_mm_loadu_ps(p));",
            "    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),",
            "                                at_load_first_ps128(p + 4, n - 4), 1);",
            "}",
            "static inline __attribute__((always_inline)) void at_store_first_ps(float *p, __m256 v, int n)",
            "{",
            "    __m128 x = _mm256_castps256_ps128(v);",
            "    if (n >= 4) {",
            "        _mm_storeu_ps(p, x);",
            "        x = _mm256_extractf128_ps(v, 1);",
            "        p += 4;",
            "        n -= 4;",
            "    }",
            "    if (n) at_store_first_ps128(p, x, n);",
            "}",
        ]
    else:
        # An fp64 xmm's partial vector is its one lane, which moves exactly (Vocabulary.exact).
        xmm = []
        ymm = [
            "static inline __attribute__((always_inline)) __m256d at_load_first_pd(const double *p, int n)",
            "{",
            f"    if (n == 1) return _mm256_zextpd128_pd256({exact_load('pd', 1)});",
            "    if (n == 2) return _mm256_zextpd128_pd256(_mm_loadu_pd(p));",
            "    return _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(p)), _mm_load_sd(p + 2), 1);",
            "}",
            "static inline __attribute__((always_inline)) void at_store_first_pd(double *p, __m256d v, int n)",
            "{",
            "    __m128d x = _mm256_castpd256_pd128(v);",
            "    if (n >= 2) {",
            "        _mm_storeu_pd(p, x);",
            "        x = _mm256_extractf128_pd(v, 1);",
            "        p += 2;",
            "        n -= 2;",
            "    }",
            "    if (n) _mm_store_sd(p, x);",
            "}",
        ]
    lines = []
    for width, body in (("128", xmm), ("256", ymm)):
        if body:
            guard = f"AT_FIRST_LANES_{voc.suffix.upper()}{width}_DEFINED"
            lines += [f"#ifndef {guard}", f"#define {guard}", *body, "#endif"]
    return lines + [""]


def _pieces_name(voc: Vocabulary, move: str) -> str:
    """The helper moving ``voc``'s first lanes: one per direction, dtype and width."""
    return f"at_{move}_first_{voc.suffix}" + ("128" if voc.bits == 128 else "")


def vector_bits(spec: KernelSpec, widest: int) -> int:
    """The narrowest vector, up to ``widest`` bits, that holds a column of the block
    (NN and NT, whose vectors run along M).  A wider vector masked to the rows does
    the same FMAs, but its masked loads and stores cost more: an 8x8 fp32 kernel
    took 15 ns per product in a batch as a zmm masked to half, 12 as a ymm, and
    fp32 2x2 at K = 64 1.14x longer as a ymm masked to two lanes than as an xmm
    (2-vCPU Xeon, family 6 model 207)."""
    if strategy(spec) != "bcast_b":
        return widest
    column_bits = 8 * spec.mr * DTYPE_BYTES[spec.dtype]
    return next(b for b in (128, 256, 512) if column_bits <= b or b == widest)


# Several vectors per K step are each used by every broadcast of the step; gcc
# would fold their loads into those FMAs as memory operands and read each vector
# nb times (64x3 fp32: 204 GFLOPS, L1-load bound, against 258 with the vectors
# pinned).  An empty asm that takes the value in a vector register pins it.
_IN_REGISTER = [
    "#ifndef AT_IN_REGISTER",
    "#define AT_IN_REGISTER(v) __asm__(\"\" : \"+v\"(v))",
    "#endif",
]


# The common call's test, alpha == 1 and beta == +0, on the scalars' bits: two
# integer compares and one branch where the floating-point ones take ordered
# compares, flag merges and two branches (fp64 2x2x2 and 4x4x4 calls 4-8 %
# faster, Zen 1).  -0.0 and NaN take the general epilogue, which gives the same
# bits (1 * x is x) and still never reads C for a beta of zero.
_PLAIN_CALL = [
    "#ifndef AT_PLAIN_CALL",
    "#define AT_PLAIN_CALL",
    "static inline int at_plain_call_f32(float alpha, float beta)",
    "{",
    "    uint32_t a, b;",
    "    __builtin_memcpy(&a, &alpha, sizeof a);",
    "    __builtin_memcpy(&b, &beta, sizeof b);",
    "    return (a == 0x3f800000u) & (b == 0);",
    "}",
    "static inline int at_plain_call_f64(double alpha, double beta)",
    "{",
    "    uint64_t a, b;",
    "    __builtin_memcpy(&a, &alpha, sizeof a);",
    "    __builtin_memcpy(&b, &beta, sizeof b);",
    "    return (a == 0x3ff0000000000000u) & (b == 0);",
    "}",
    "#endif",
]


_STRATEGY_NOTES = {
    "bcast_b": [
        "op(A) columns are contiguous: the block is {nv} vector(s) of {w} lanes along M",
        "({tail}); op(B) values are broadcast into the FMAs, one per column of C.",
    ],
    "bcast_a": [
        "op(B) rows are contiguous: the block is {nv} vector(s) of {w} lanes along N",
        "({tail}); op(A) values are broadcast into the FMAs, one per row of C; the",
        "rows reach column-major C {row_store}.",
    ],
    "dot": [
        "op(A) and op(B) are both contiguous along K: each C element is a vector of",
        "{w} partial dot products over K, summed across lanes at the end; the last",
        "K chunk is a masked load, so no scalar K loop.",
    ],
    "gather": [
        "op(B) columns are contiguous along K, op(A) rows are lda apart along K: each",
        "row's {w} K values of a chunk are gathered, and each C element is a vector of",
        "{w} partial dot products over K, summed across lanes at the end (a block of",
        "few rows does W K steps per FMA where vectors along M would do one); the last",
        "K chunk is a masked load and a masked gather, so no scalar K loop.",
    ],
}


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.depth + line) if line else "")

    def open(self, line: str) -> None:
        self(line + " {")
        self.depth += 1

    def close(self, suffix: str = "") -> None:
        self.depth -= 1
        self("}" + suffix)


def _vectors(extent: int, w: int) -> tuple[int, int]:
    """Vectors covering ``extent`` lanes and the lanes used in the last one."""
    nv = math.ceil(extent / w)
    return nv, extent - (nv - 1) * w


def emit(spec: KernelSpec, voc: Vocabulary) -> str:
    """The C source of one kernel."""
    kind = strategy(spec)
    budget = register_budget(spec)
    rf = register_file(spec.isa)
    w = voc.lanes
    T = spec.ctype
    out = _Writer()

    vec_extent = spec.nr if kind == "bcast_a" else spec.mr
    nv, tail = _vectors(vec_extent, w)
    tail_note = ("no masked vector" if tail == w else
                 f"last vector's {tail} lane(s) moved by scalar loads and stores, no mask" if voc.exact(tail)
                 else f"last vector's {tail} lanes moved in pieces, no mask" if voc.in_pieces(tail)
                 else f"last vector masked to {tail} lanes")
    note_kind = "gather" if spec.variant == GATHER else kind
    row_store = ("transposed in registers, a column per store" if voc.masked == "k"
                 else "through a stack tile")
    notes = [n.format(nv=nv, w=w, tail=tail_note, row_store=row_store) for n in _STRATEGY_NOTES[note_kind]]

    out(f"/* Generated by {voc.module} from")
    out(f" *   {spec!r}")
    out(" * Do not edit: change the generator and re-run `autotune install`.")
    out(" *")
    out(f" * {spec.name}: C[0:{spec.mr}, 0:{spec.nr}] = alpha * op(A) op(B) + beta * C, "
        f"trans {spec.trans}, column-major.")
    for note in notes:
        out(f" * {note}")
    out(f" * Registers: {budget.accumulators} accumulators x {budget.sets} set(s) + "
        f"{budget.a} for A + {budget.b} for B = {budget.total} of {rf.count}; "
        f"K unrolled by {spec.unroll}. */")
    out(f"#if {voc.guard}")
    out(f'#error "{voc.guard_message}"')
    out("#endif")
    out()
    out("#include <stdint.h>")
    out("#include <immintrin.h>")
    out()
    for line in _pieces_helpers(voc, T) if voc.in_pieces(_DOT_TAIL if kind == "dot" else tail) else []:
        out(line)
    if kind != "dot":
        for line in _IN_REGISTER + _PLAIN_CALL:
            out(line)
    if spec.variant == GATHER:
        for line in _gather_helper(voc, T):
            out(line)
    if kind != "dot" and spec.unroll > 1:
        # Products shallower than one unrolled iteration (every tiny GEMM) run
        # a body of one accumulator set and no unrolling.  Each body is a
        # function of its own and the kernel only picks one: gcc saves
        # registers and realigns the stack for the unrolled body before any
        # test inside it, which cost a 2x2x2 call more than its FMAs.  The bits
        # are the unrolled body's: with K below the unroll it, too, runs only
        # its remainder loop, on set 0.
        for suffix, sets, unroll in (("short", 1, 1), ("unrolled", budget.sets, spec.unroll)):
            _signature(out, spec, f"{spec.name}_{suffix}", "static __attribute__((noinline)) void")
            out("{")
            out.depth = 1
            out("(void)lda; (void)ldb; (void)ldc;")
            _emit_broadcast(out, spec, voc, kind, sets, unroll)
            _leave_vector_state(out)
            out.depth = 0
            out("}")
            out()
        _signature(out, spec, spec.name, "void")
        out("{")
        out.depth = 1
        out(f"if (K < {spec.unroll})")
        out(f"    {spec.name}_short(K, A, lda, B, ldb, C, ldc, alpha, beta);")
        out("else")
        out(f"    {spec.name}_unrolled(K, A, lda, B, ldb, C, ldc, alpha, beta);")
        out.depth = 0
        out("}")
        return "\n".join(out.lines) + "\n"
    _signature(out, spec, spec.name, "void")
    out("{")
    out.depth = 1
    out("/* Fixed by the ABI; a block one element wide never uses some of them. */")
    out("(void)lda; (void)ldb; (void)ldc;")
    if kind == "dot":
        _emit_dot(out, spec, voc, budget.sets)
    else:
        _emit_broadcast(out, spec, voc, kind, budget.sets, spec.unroll)
    _leave_vector_state(out)
    out.depth = 0
    out("}")
    return "\n".join(out.lines) + "\n"


def _leave_vector_state(out: _Writer) -> None:
    """vzeroupper before the kernel returns, written out rather than left to the
    compiler: GCC inserts it in a pass that -fno-expensive-optimizations
    (toolchain.GCC_VECTOR_FLAGS) turns off.  Its callers (the runtime, the
    harness) are SSE code, and on Intel cores SSE instructions after 256- or
    512-bit ones with the upper halves still dirty run slowly: a 48x8 fp32 kernel
    at K = 4 took 189 ns a call from such a caller, 31 with the halves cleared
    (2-vCPU Xeon, family 6 model 207, 2026-12-04).  Zen 1 pays nothing for them,
    and the instruction cost 1.5-2.4 ns of a 2x2x2 to 4x4x4 call (7.7 ns against
    9.3 for fp64 2x2x2): a CPU whose install measured that (toolchain.upper_halves)
    compiles its kernels with AT_UPPER_HALVES_FREE."""
    out("#ifndef AT_UPPER_HALVES_FREE")
    out("/* The upper halves cleared for the caller's SSE code (slow after them on Intel). */")
    out("_mm256_zeroupper();")
    out("#endif")


def _signature(out: _Writer, spec: KernelSpec, name: str, qualifiers: str) -> None:
    """The kernel ABI's parameter list under ``name``."""
    for line in contract.signature_lines(spec, name, qualifiers):
        out(line)


# ---------------------------------------------------------------------------
# Broadcast strategies (NN, NT: vectors along M; TT: vectors along N)
# ---------------------------------------------------------------------------

def _emit_broadcast(out: _Writer, spec: KernelSpec, voc: Vocabulary, kind: str, sets: int,
                    unroll: int) -> None:
    w = voc.lanes
    T = spec.ctype
    along_m = kind == "bcast_b"
    # "vec" is the operand loaded as vectors, "bc" the one broadcast.  Each K
    # step advances both pointers; the broadcast operand's values of one step
    # sit `bc_stride` apart.
    if along_m:
        nv, tail = _vectors(spec.mr, w)
        nb = spec.nr
        vec_ptr, vec_step = "a", "lda"
        bc_ptr = "b"
        bc_stride, bc_step = ("ldb", "1") if spec.trans == "nn" else ("1", "ldb")
    else:
        nv, tail = _vectors(spec.nr, w)
        nb = spec.mr
        vec_ptr, vec_step = "b", "ldb"
        bc_ptr, bc_stride, bc_step = "a", "lda", "1"
    masked = tail < w

    def acc(s: int, x: int, v: int) -> str:
        return f"c{s}_{x}_{v}"

    if voc.needs_mask(tail):
        out(f"const {voc.mask_type} tail = {voc.const_mask(tail)};")
    out(f"const {T} *a = A;")
    out(f"const {T} *b = B;")
    for s in range(sets):
        for x in range(nb):
            names = ", ".join(f"{acc(s, x, v)} = {voc.zero()}" for v in range(nv))
            out(f"{voc.vtype} {names};")
    out(f"{voc.vtype} {', '.join(f'v{v}' for v in range(nv))}{', bx' if nv > 1 else ''};")
    out()

    # Broadcasts strided by ld (NN's B, TT's A) are addressed from one pointer
    # per group of four columns, as p[0], p[ld], p[2 * ld] and p[ld3]: x86
    # addressing scales one index register by 1, 2, 4 or 8, so those need only
    # ld and ld3 besides the pointers.  With an offset register per column gcc
    # ran out of general registers from about ten columns and reloaded offsets
    # from the stack inside the K loop.
    grouped = bc_stride != "1" and nb > 4
    group_ptrs = [bc_ptr] + [f"{bc_ptr}{4 * g}" for g in range(1, math.ceil(nb / 4))]
    if grouped:
        out(f"const int64_t {bc_stride}3 = 3 * {bc_stride};")
        for g, ptr in enumerate(group_ptrs[1:], start=1):
            out(f"const {T} *{ptr} = {bc_ptr} + {4 * g} * {bc_stride};")
        out()

    def bc_addr(x: int) -> str:
        if grouped:
            g, o = divmod(x, 4)
            offset = ("0", bc_stride, f"2 * {bc_stride}", f"{bc_stride}3")[o]
            return f"{group_ptrs[g]}[{offset}]"
        if bc_stride == "1":
            return f"{bc_ptr}[{x}]" if x else f"{bc_ptr}[0]"
        return f"{bc_ptr}[{x} * {bc_stride}]" if x else f"{bc_ptr}[0]"

    def step(s: int) -> None:
        # One K step.  With one vector, each FMA takes its broadcast straight
        # from memory (AVX-512 folds it into the FMA's operand).  With several,
        # the vectors are loaded first and each broadcast is consumed by all of
        # them at once, so exactly one broadcast register is live (the model's
        # count); the order of the loads among the FMAs is left to the core's
        # out-of-order window, which spans several K steps.
        for v in range(nv):
            addr = f"{vec_ptr} + {v * w}" if v else vec_ptr
            mask = "tail" if masked and v == nv - 1 else None
            out(f"v{v} = {voc.load(addr, mask, tail)};")
            if nv > 1 and unroll == 1 and nb > 1:
                # (Not in unrolled bodies: there gcc then spilled vectors of its
                # remainder loop to the stack.  Nor in one column: each vector meets
                # one FMA, which reads it from memory; held in registers, a 256x1
                # block's sixteen beside its sixteen sums spilled one sum a K step.)
                out(f"AT_IN_REGISTER(v{v});")
            if nv == 1:
                for x in range(nb):
                    out(f"{acc(s, x, v)} = {voc.fma(f'v{v}', voc.set1(bc_addr(x)), acc(s, x, v))};")
        if nv > 1:
            for x in range(nb):
                out(f"bx = {voc.set1(bc_addr(x))};")
                for v in range(nv):
                    out(f"{acc(s, x, v)} = {voc.fma(f'v{v}', 'bx', acc(s, x, v))};")
        out(f"{vec_ptr} += {vec_step};")
        for ptr in group_ptrs if grouped else [bc_ptr]:
            out(f"{ptr} += {bc_step};")

    out("int64_t p = 0;")
    if unroll > 1:
        out.open(f"for (; p + {unroll} <= K; p += {unroll})")
        for u in range(unroll):
            out(f"/* k = p + {u} */")
            step(u % sets)
        out.close()
    out.open("for (; p < K; ++p)")
    step(0)
    out.close()
    _merge_sets(out, voc, sets, acc, nb, nv)
    out()
    out(f"const {voc.vtype} va = {voc.set1('alpha')};")
    if along_m:
        _store_columns(out, spec, voc, nv, tail, lambda x, v: acc(0, x, v))
    else:
        if voc.masked == "k":
            _store_rows_transposed(out, spec, voc, nv, lambda x, v: acc(0, x, v))
        else:
            _store_rows_via_tile(out, spec, voc, nv, lambda x, v: acc(0, x, v))


def _merge_sets(out: _Writer, voc: Vocabulary, sets: int, acc, nb: int, nv: int) -> None:
    if sets == 1:
        return
    out()
    out("/* Sum the partial accumulator sets (pairwise, for accuracy and depth). */")
    stride = 1
    while stride < sets:
        for s in range(0, sets - stride, 2 * stride):
            for x in range(nb):
                for v in range(nv):
                    out(f"{acc(s, x, v)} = {voc.add(acc(s, x, v), acc(s + stride, x, v))};")
        stride *= 2


def _store_columns(out: _Writer, spec: KernelSpec, voc: Vocabulary, nv: int, tail: int, acc) -> None:
    """C columns are vectors along M: scale, add beta * C (only if beta != 0), store.
    ``tail``: the lanes of the last vector of a column that are C's."""
    w = voc.lanes
    masked = tail < w
    # Columns addressed from one pointer per group of four, as for the strided
    # broadcasts (see _emit_broadcast): a register per column spills from ten.
    grouped = spec.nr > 4
    if grouped:
        out("const int64_t ldc3 = 3 * ldc;")
        for g in range(1, math.ceil(spec.nr / 4)):
            out(f"{spec.ctype} *C{4 * g} = C + {4 * g} * ldc;")

    def addr(j: int, v: int) -> str:
        if grouped:
            g, o = divmod(j, 4)
            base = f"C{4 * g}" if g else "C"
            col = base + ("", " + ldc", " + 2 * ldc", " + ldc3")[o]
        else:
            col = f"C + {j} * ldc" if j else "C"
        return f"{col} + {v * w}" if v else col

    def mask(v: int) -> str | None:
        return "tail" if masked and v == nv - 1 else None

    out.open(f"if (at_plain_call_{spec.dtype}(alpha, beta))")
    out("/* C = op(A) op(B), the common call: no multiply by alpha (the same bits). */")
    for j in range(spec.nr):
        for v in range(nv):
            out(voc.store(addr(j, v), acc(j, v), mask(v), tail))
    out.close(" else if (beta == 0) {")
    out.depth += 1
    out("/* beta == 0 must not read C: it may hold NaN. */")
    for j in range(spec.nr):
        for v in range(nv):
            out(voc.store(addr(j, v), voc.mul("va", acc(j, v)), mask(v), tail))
    out.close(" else {")
    out.depth += 1
    out(f"const {voc.vtype} vb = {voc.set1('beta')};")
    # Every load of C before any store: with a tight ldc the next column's
    # (masked) load overlaps the line a masked store just wrote, and masked
    # stores do not forward, so interleaving them stalls each column.
    for j in range(spec.nr):
        for v in range(nv):
            old = voc.load(addr(j, v), mask(v), tail)
            out(f"{acc(j, v)} = {voc.fma('vb', old, voc.mul('va', acc(j, v)))};")
    for j in range(spec.nr):
        for v in range(nv):
            out(voc.store(addr(j, v), acc(j, v), mask(v), tail))
    out.close()


def _store_rows_via_tile(out: _Writer, spec: KernelSpec, voc: Vocabulary, nv: int, acc) -> None:
    """Rows of C (vectors along N) go to a stack tile, then column by column into C.

    The tile is padded to whole vectors so the row stores need no mask; only
    its first nr columns are read back.
    """
    w = voc.lanes
    T = spec.ctype
    width = nv * w
    out(f"{T} tile[{spec.mr}][{width}];")
    for i in range(spec.mr):
        for v in range(nv):
            dst = f"&tile[{i}][{v * w}]"
            out(voc.store(dst, voc.mul("va", acc(i, v))))
    out.open("if (beta == 0)")
    out.open(f"for (int j = 0; j < {spec.nr}; ++j)")
    out(f"for (int i = 0; i < {spec.mr}; ++i) C[i + j * ldc] = tile[i][j];")
    out.close()
    out.close(" else {")
    out.depth += 1
    out.open(f"for (int j = 0; j < {spec.nr}; ++j)")
    out(f"for (int i = 0; i < {spec.mr}; ++i) C[i + j * ldc] = tile[i][j] + beta * C[i + j * ldc];")
    out.close()
    out.close()


def _shuffle_indices(w: int) -> tuple[list[int], list[int]]:
    """Two-source permutes interleaving the low (high) halves of x and y lane by lane."""
    lo = [r // 2 + (w if r % 2 else 0) for r in range(w)]
    hi = [w // 2 + r // 2 + (w if r % 2 else 0) for r in range(w)]
    return lo, hi


def _store_rows_transposed(out: _Writer, spec: KernelSpec, voc: Vocabulary, nv: int, acc) -> None:
    """AVX-512: transpose the row vectors in registers, then store C column by column.

    Rows come in groups of at most W, padded with zero vectors to P, a power of
    two.  log2(P) perfect-shuffle stages (pair row k with row k + P/2, interleave
    their low halves into slot 2k and their high halves into slot 2k + 1) leave
    the P x W block in column-major order across the P vectors: column j is P
    consecutive lanes, rotated to lane 0 by one valign and stored masked, where
    the plain tile copy (the AVX2 path) moves mr scalars through the stack.
    """
    w = voc.lanes
    itype = "epi32" if voc.suffix == "ps" else "epi64"
    perm = voc.op("permutex2var")
    groups = [(g, min(w, spec.mr - g * w)) for g in range(-(-spec.mr // w))]
    # Build the shuffle network as named expressions first, then emit only
    # those the stored columns reach: padding rows and the columns beyond nr
    # would otherwise leave permutes (and unused-variable warnings) behind.
    pads = {}
    exprs: list[tuple[str, str, tuple[str, ...]]] = []
    final: dict[tuple[int, int, int], str] = {}
    for g, rows in groups:
        p2 = 1 << (rows - 1).bit_length()
        pads[g] = p2
        for v in range(nv):
            if v * w >= spec.nr:
                continue
            level = [acc(g * w + i, v) for i in range(rows)] + [voc.zero()] * (p2 - rows)
            half = p2 // 2
            for _ in range(p2.bit_length() - 1):
                nxt = [""] * p2
                for k in range(half):
                    x, y = level[k], level[k + half]
                    for slot, idx in ((2 * k, "lo"), (2 * k + 1, "hi")):
                        name = f"t{len(exprs)}"
                        exprs.append((name, f"{perm}({x}, {idx}, {y})", (x, y)))
                        nxt[slot] = name
                level = nxt
            for k in range(p2):
                final[(g, v, k)] = level[k]

    def column(j: int, g: int) -> tuple[str, int]:
        v, jj = divmod(j, w)
        k, lane = divmod(jj * pads[g], w)
        return final[(g, v, k)], lane

    needed = {column(j, g)[0] for j in range(spec.nr) for g, _ in groups}
    for name, _, deps in reversed(exprs):
        if name in needed:
            needed.update(deps)
    used = {idx for name, expr, _ in exprs if name in needed for idx in ("lo", "hi") if f", {idx}, " in expr}
    for idx, lanes in zip(("lo", "hi"), _shuffle_indices(w)):
        if idx in used:
            # _mm512_set_* lists lanes from the highest down.
            out(f"const __m512i {idx} = _mm512_set_{itype}({', '.join(map(str, reversed(lanes)))});")
    for name, expr, _ in exprs:
        if name in needed:
            out(f"const {voc.vtype} {name} = {expr};")
    # Each column goes out through the narrowest register that holds its rows (VL):
    # Zen 4 spends about ten cycles on a zmm store masked to one lane, so a 1 x 96
    # fp32 TT block ran at 3 GFLOPS at K = 4, against 42 for AVX2's plain stores.
    width_of = {g: next(b for b in (128, 256, 512) if rows * (512 // w) <= b) for g, rows in groups}
    at_width = {b: voc if b == 512 else replace(voc, vtype=f"__m{b}" + ("" if voc.suffix == "ps" else "d"),
                                                 prefix="_mm" if b == 128 else f"_mm{b}", lanes=b * w // 512)
                for b in sorted(set(width_of.values()))}
    narrow = {g: at_width[b] for g, b in width_of.items()}
    for g, rows in groups:
        if rows < narrow[g].lanes and not narrow[g].exact(rows):
            out(f"const {narrow[g].mask_type} rows{g} = {narrow[g].const_mask(rows)};")

    def cast(b: int, value: str) -> str:
        """``value`` (a zmm) as its low ``b`` bits."""
        return value if b == 512 else f"_mm512_cast{voc.suffix}512_{voc.suffix}{b}({value})"

    def src(j: int, g: int) -> str:
        # Column j of row group g: lanes (jj * P) % W .. of vector jj * P // W,
        # rotated down to lane 0 (valign) when it does not start there.
        vec, lane = column(j, g)
        if lane == 0:
            return vec
        bits = "epi32" if voc.suffix == "ps" else "epi64"
        cast_in = "_mm512_castps_si512" if voc.suffix == "ps" else "_mm512_castpd_si512"
        cast_out = "_mm512_castsi512_ps" if voc.suffix == "ps" else "_mm512_castsi512_pd"
        return f"{cast_out}(_mm512_alignr_{bits}({cast_in}({vec}), {cast_in}({vec}), {lane}))"

    def dst(j: int, g: int) -> str:
        col = f"C + {j} * ldc" if j else "C"
        return f"{col} + {g * w}" if g else col

    def mask(g: int, rows: int) -> str | None:
        return f"rows{g}" if rows < narrow[g].lanes else None

    # One or two fp32 rows, or one fp64 row, move by scalar loads and stores (Vocabulary.exact).
    def store(g: int, rows: int, addr: str, value: str) -> str:
        return narrow[g].store(addr, value, mask(g, rows), rows)

    def load(g: int, rows: int, addr: str) -> str:
        return narrow[g].load(addr, mask(g, rows), rows)

    # The scaling is done at the store's width too.  A zmm product cast down and
    # stored masked becomes one vextractf64x4 to memory under the mask, and Zen 4
    # faults on that instruction's masked-off lanes past the end of a page (the
    # validation's guard page found it; a masked vmovupd of the same lanes does not).
    def width_constant(name: str, value: str) -> None:
        for b, v in at_width.items():
            out(f"const {v.vtype} {name}{b} = {cast(b, value)};")

    def scaled(j: int, g: int) -> str:
        return narrow[g].mul(f"va{width_of[g]}", cast(width_of[g], src(j, g)))

    width_constant("va", "va")
    out.open("if (beta == 0)")
    for j in range(spec.nr):
        for g, rows in groups:
            out(store(g, rows, dst(j, g), scaled(j, g)))
    out.close(" else {")
    out.depth += 1
    width_constant("vb", voc.set1("beta"))
    # All loads of C first, as in _store_columns: masked stores do not forward.
    for j in range(spec.nr):
        for g, rows in groups:
            n = narrow[g]
            out(f"const {n.vtype} u{j}_{g} = {n.fma(f'vb{width_of[g]}', load(g, rows, dst(j, g)), scaled(j, g))};")
    for j in range(spec.nr):
        for g, rows in groups:
            out(store(g, rows, dst(j, g), f"u{j}_{g}"))
    out.close()


# ---------------------------------------------------------------------------
# Dot-product strategy (TN)
# ---------------------------------------------------------------------------

def _gather_helper(voc: Vocabulary, ctype: str) -> list[str]:
    """AVX-512 gathers of W values ``ld`` apart (the gather variant's op(A) rows).

    64-bit offsets: 32-bit ones would overflow for lda above 2^31 / W.  fp32 takes
    two 8-lane gathers; masked lanes are not read (the K tail).
    """
    if voc.suffix == "ps":
        body = [
            "static inline __m512 at_gather_ps(const float *p, int64_t ld, __m512i idx, __mmask16 m)",
            "{",
            "    __m256 lo = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), (__mmask8)m, idx, p, 4);",
            "    /* Offsets, not p + 8 * ld: that pointer may lie past the operand. */",
            "    __m512i idx8 = _mm512_add_epi64(idx, _mm512_set1_epi64(8 * ld));",
            "    __m256 hi = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), (__mmask8)(m >> 8), idx8, p, 4);",
            "    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);",
            "}",
        ]
    else:
        body = [
            "static inline __m512d at_gather_pd(const double *p, int64_t ld, __m512i idx, __mmask8 m)",
            "{",
            "    (void)ld;",
            "    return _mm512_mask_i64gather_pd(_mm512_setzero_pd(), m, idx, p, 8);",
            "}",
        ]
    guard = f"AT_GATHER_{voc.suffix.upper()}_DEFINED"
    return [f"#ifndef {guard}", f"#define {guard}", *body, "#endif", ""]


#: The dot kernels' K tail, 1 to lanes - 1 values known at run time: AVX2 loads it in
#: pieces (Vocabulary.in_pieces), whose branches a run of calls of one K predicts.  With
#: vmaskmov, fp32 TN 3x3 at K = 4 took 54 ns a call on Zen 1, and 34 at K = 16.
_DOT_TAIL = "(int)(K - p)"


def _emit_dot(out: _Writer, spec: KernelSpec, voc: Vocabulary, sets: int) -> None:
    w = voc.lanes
    T = spec.ctype
    mr, nr = spec.mr, spec.nr
    # The smaller side stays resident for a K chunk; the other streams through
    # one register (counted twice on AVX-512: the next chunk's load overlaps).
    a_resident = mr <= nr
    # The gather variant reads op(A)[i, p] at A[i + p*lda]: row i is gathered
    # with offsets (0..7) * lda, and a chunk of K moves the pointer by W * lda.
    gather = spec.variant == GATHER

    def acc(s: int, i: int, j: int) -> str:
        return f"c{s}_{i}_{j}"

    out(f"const {T} *a = A;")
    out(f"const {T} *b = B;")
    if gather:
        offsets = ", ".join(f"{k} * lda" if k else "0" for k in reversed(range(8)))
        out(f"const __m512i idx = _mm512_set_epi64({offsets});")
        full = voc.const_mask(w)
    for s in range(sets):
        for i in range(mr):
            names = ", ".join(f"{acc(s, i, j)} = {voc.zero()}" for j in range(nr))
            out(f"{voc.vtype} {names};")
    res_n = mr if a_resident else nr
    res_name = "a" if a_resident else "b"
    out(f"{voc.vtype} {', '.join(f'{res_name}{r}' for r in range(res_n))}, x;")
    out()

    def chunk(s: int, offset: str, mask: str | None, lanes: str | None = None) -> None:
        def at(ptr: str, ld: str, r: int) -> str:
            row = f"{ptr} + {r} * {ld}" if r else ptr
            return f"{row} + {offset}" if offset != "0" else row

        def load_a(i: int) -> str:
            if not gather:
                return voc.load(at("a", "lda", i), mask, lanes)
            row = f"a + {i}" if i else "a"
            addr = f"{row} + {offset} * lda" if offset != "0" else row
            return f"at_gather_{voc.suffix}({addr}, lda, idx, {mask or full})"

        if a_resident:
            for i in range(mr):
                out(f"a{i} = {load_a(i)};")
            for j in range(nr):
                out(f"x = {voc.load(at('b', 'ldb', j), mask, lanes)};")
                for i in range(mr):
                    out(f"{acc(s, i, j)} = {voc.fma(f'a{i}', 'x', acc(s, i, j))};")
        else:
            for j in range(nr):
                out(f"b{j} = {voc.load(at('b', 'ldb', j), mask, lanes)};")
            for i in range(mr):
                out(f"x = {load_a(i)};")
                for j in range(nr):
                    out(f"{acc(s, i, j)} = {voc.fma('x', f'b{j}', acc(s, i, j))};")

    span = spec.unroll * w
    out("int64_t p = 0;")
    if spec.unroll > 1:
        out.open(f"for (; p + {span} <= K; p += {span})")
        for u in range(spec.unroll):
            out(f"/* k = p + {u * w} .. p + {u * w + w - 1} */")
            chunk(u % sets, str(u * w), None)
        out(f"a += {span} * lda;" if gather else f"a += {span};")
        out(f"b += {span};")
        out.close()
    out.open(f"for (; p + {w} <= K; p += {w})")
    chunk(0, "0", None)
    out(f"a += {w} * lda;" if gather else f"a += {w};")
    out(f"b += {w};")
    out.close()
    out.open("if (p < K)")
    if voc.in_pieces(_DOT_TAIL) and not gather:
        out("/* The last K % lanes values, loaded in pieces: nothing past the operands is read. */")
        chunk(0, "0", "rest", _DOT_TAIL)
    else:
        out("/* The last K % lanes values: masked loads read nothing past the operands. */")
        out(f"const {voc.mask_type} rest = {voc.runtime_mask('(K - p)')};")
        chunk(0, "0", "rest")
    out.close()
    _merge_sets(out, voc, sets, acc, mr, nr)
    out()
    # C's elements in column-major order, so that a vector of sums holds whole columns.
    sums = _fold_sums(out, voc, [acc(0, i, j) for j in range(nr) for i in range(mr)])
    out("/* The scalar update of the block. */")
    out.open("if (beta == 0)")
    for j in range(nr):
        for i in range(mr):
            out(f"C[{i} + {j} * ldc] = alpha * {sums[j * mr + i]};")
    out.close(" else {")
    out.depth += 1
    for j in range(nr):
        for i in range(mr):
            c = f"C[{i} + {j} * ldc]"
            out(f"{c} = alpha * {sums[j * mr + i]} + beta * {c};")
    out.close()


# ---------------------------------------------------------------------------
# Horizontal sums of many accumulators at once
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _FoldStep:
    """One level of the fold: (x, y) -> lo(x, y) + hi(x, y), where lo and hi
    rearrange the lanes of the pair so that the sum halves what each vector
    carries of each accumulator (and doubles the accumulators per vector)."""

    lo: str   # C template over {x} and {y}
    hi: str
    lanes_lo: object  # the same permutations on lists of lanes, for the lane map
    lanes_hi: object


def _blocks(v: list, size: int) -> list[list]:
    return [v[b:b + size] for b in range(0, len(v), size)]


def _shuffle128(imm: int):
    """_mm512_shuffle_f32x4 / f64x2: blocks a[imm0], a[imm1], b[imm2], b[imm3] of 128 bits."""
    def lanes(a: list, b: list) -> list:
        ba, bb = _blocks(a, len(a) // 4), _blocks(b, len(b) // 4)
        picks = [ba[imm & 3], ba[imm >> 2 & 3], bb[imm >> 4 & 3], bb[imm >> 6 & 3]]
        return [lane for block in picks for lane in block]
    return lanes


def _permute128(imm: int):
    """_mm256_permute2f128: halves chosen from (a.lo, a.hi, b.lo, b.hi)."""
    def lanes(a: list, b: list) -> list:
        halves = _blocks(a, len(a) // 2) + _blocks(b, len(b) // 2)
        return halves[imm & 3] + halves[imm >> 4 & 3]
    return lanes


def _unpack(block: int, element: int, high: bool):
    """unpacklo/unpackhi within each 128-bit block of ``block`` lanes, on
    elements of ``element`` lanes (2 for a pd unpack of fp32 data)."""
    def lanes(a: list, b: list) -> list:
        out = []
        for xa, xb in zip(_blocks(a, block), _blocks(b, block)):
            ea, eb = _blocks(xa, element), _blocks(xb, element)
            half = len(ea) // 2
            for k in range(half, 2 * half) if high else range(half):
                out += ea[k] + eb[k]
        return out
    return lanes


def _fold_steps(voc: Vocabulary) -> list[_FoldStep]:
    bits = int(voc.prefix.removeprefix("_mm"))
    block = voc.lanes * 128 // bits
    p, sfx = voc.prefix, voc.suffix
    steps = []
    if bits == 512:
        shuf = f"{p}_shuffle_{'f32x4' if sfx == 'ps' else 'f64x2'}"
        for lo, hi in ((0x44, 0xEE), (0x88, 0xDD)):
            steps.append(_FoldStep(f"{shuf}({{x}}, {{y}}, 0x{lo:02X})", f"{shuf}({{x}}, {{y}}, 0x{hi:02X})",
                                   _shuffle128(lo), _shuffle128(hi)))
    else:
        perm = f"{p}_permute2f128_{sfx}"
        steps.append(_FoldStep(f"{perm}({{x}}, {{y}}, 0x20)", f"{perm}({{x}}, {{y}}, 0x31)",
                               _permute128(0x20), _permute128(0x31)))
    steps.append(_FoldStep(f"{p}_unpacklo_{sfx}({{x}}, {{y}})", f"{p}_unpackhi_{sfx}({{x}}, {{y}})",
                           _unpack(block, 1, False), _unpack(block, 1, True)))
    if sfx == "ps":
        def as_pd(op: str) -> str:
            return f"{p}_castpd_ps({p}_{op}_pd({p}_castps_pd({{x}}), {p}_castps_pd({{y}})))"
        steps.append(_FoldStep(as_pd("unpacklo"), as_pd("unpackhi"),
                               _unpack(block, 2, False), _unpack(block, 2, True)))
    return steps


def _fold_sums(out: _Writer, voc: Vocabulary, accs: list[str]) -> list[str]:
    """Sum each accumulator's lanes, ``lanes`` accumulators per vector: pairs of
    vectors fold level by level into one vector whose lane l is the sum of one
    accumulator, stored to a stack array.  About 3 instructions per accumulator,
    where a reduction of each alone takes 8: a tn 2x14 fp32 kernel's 28 sums
    cost a third of its FMAs at K = 256.  Returns the C expression of each sum.

    Which lane ends with which accumulator follows from the shuffles; it is
    worked out here on lists of lanes, and checked: every lane of the result
    must hold all the lanes of exactly one accumulator."""
    w, T = voc.lanes, ("float" if voc.suffix == "ps" else "double")
    steps = _fold_steps(voc)
    assert 1 << len(steps) == w, (voc, len(steps))
    groups = math.ceil(len(accs) / w)
    out(f"/* Horizontal sums: {len(accs)} accumulators fold into {groups} vector(s) of sums. */")
    out(f"{T} sums[{groups * w}] __attribute__((aligned(64)));")
    where: dict[int, int] = {}
    for g in range(groups):
        names = accs[g * w:(g + 1) * w]
        names += [voc.zero()] * (w - len(names))
        # Lanes as (accumulator, lane) pairs; an absent accumulator is None.
        vecs = [(name, [[(g * w + v, lane)] if v + g * w < len(accs) else [] for lane in range(w)])
                for v, name in enumerate(names)]
        for level, step in enumerate(steps):
            folded = []
            for k in range(0, len(vecs), 2):
                (x, lx), (y, ly) = vecs[k], vecs[k + 1]
                name = f"s{g}_{level}_{k // 2}"
                lo, hi = step.lo.format(x=x, y=y), step.hi.format(x=x, y=y)
                out(f"const {voc.vtype} {name} = {voc.add(lo, hi)};")
                lanes = [a + b for a, b in zip(step.lanes_lo(lx, ly), step.lanes_hi(lx, ly))]
                folded.append((name, lanes))
            vecs = folded
        (name, lanes), = vecs
        out(f"{voc.op('store')}(sums + {g * w}, {name});")
        for lane, parts in enumerate(lanes):
            owners = {a for a, _ in parts}
            assert len(owners) <= 1 and (not owners or sorted(l for _, l in parts) == list(range(w))), \
                (voc, lane, parts)
            if owners:
                where[owners.pop()] = g * w + lane
    assert sorted(where) == list(range(len(accs)))
    return [f"sums[{where[q]}]" for q in range(len(accs))]

