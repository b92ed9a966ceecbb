"""The Python view of kernel executing plans: built by the C tiler, read back, explained, drawn.

``plan(M, N, K, ...)`` asks libautotune's tiler (the same code the hot path runs)
for a plan and returns a frozen :class:`Plan`; :func:`explain` prints what it
decided and why it predicts the time it does; :func:`draw` shows C tiled into
blocks labelled by kernel, in the manner of IAAT's Fig. 2.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..specs import DTYPE_CODE, DTYPES, KernelSpec, parse_trans

# The runtime is imported by the functions that ask a library: a plan recorded
# earlier reads back (the report) without the bindings that load one.
if TYPE_CHECKING:
    from ..runtime import loader

_TRANS = ("nn", "nt", "tn", "tt")
_LAYOUTS = {"col": 0, "row": 1}


#: Steps a Plan lists at most (~15 MB of Step records); kernel_counts and
#: explain still cover every step, through the library's summary.
STEP_LIMIT = 100_000


class PlanError(RuntimeError):
    """No plan can be made: no library, or invalid arguments (the message says which)."""


@dataclass(frozen=True)
class Step:
    """One kernel call: the block ``C[i0:i0+mb, j0:j0+nb]`` in the caller's coordinates."""

    kernel: str      # kernel name, or "edge" for the portable code
    i0: int
    j0: int
    mb: int
    nb: int
    pack_a: bool
    pack_b: bool
    thread: int


@dataclass(frozen=True)
class Plan:
    dtype: str
    trans: str
    layout: str
    M: int
    N: int
    K: int
    lda: int
    ldb: int
    ldc: int
    path: str                     # "small" (operands read in place) or "packed" (Goto)
    threads: int
    kernel_trans: str             # the transposition of the kernels that run
    # (blk_m, blk_n, blk_k); on the small path (0, 0, the K slice each step walks at a
    # time, every step in turn per slice; 0: all of K)
    blocks: tuple[int, int, int]
    predicted_seconds: float
    memops: float
    steps: tuple[Step, ...]       # the first STEP_LIMIT steps (all of them below that)
    nsteps: int = -1              # every step of the plan; -1: len(steps)
    a_copied: bool = False        # small path: op(A) read from a copy in rows along K
    # small path, K in slices over an A from memory: how many rows below a band of
    # whole-line slivers the walk prefetches A before the band starts (0: none)
    prefetch_rows: int = 0
    # small path of a few kernel steps on one thread: how many a call runs straight from
    # the plan's list, each kernel called from a line of its own (0: the executor's walk)
    direct_steps: int = 0
    # small path over a B from memory, C much wider than tall: each thread's steps go
    # column by column, not band by band of rows
    column_order: bool = False
    usage: tuple[tuple[str, int, int], ...] = ()  # (kernel, calls, elements of C) of every step

    def to_dict(self) -> dict:
        """A JSON-ready mapping; :meth:`from_dict` reads it back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "Plan":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in fields},
                      "blocks": tuple(data["blocks"]),
                      "steps": tuple(Step(**step) for step in data["steps"]),
                      "usage": tuple(tuple(u) for u in data.get("usage", ()))})

    @property
    def title(self) -> str:
        return f"{self.M}x{self.N}x{self.K} {self.dtype} {self.trans}"

    @property
    def step_count(self) -> int:
        return self.nsteps if self.nsteps >= 0 else len(self.steps)

    @property
    def truncated(self) -> bool:
        """Whether ``steps`` lists only the first STEP_LIMIT of the plan's steps."""
        return self.step_count > len(self.steps)

    @property
    def predicted_gflops(self) -> float:
        flops = 2.0 * self.M * self.N * self.K
        return flops / self.predicted_seconds / 1e9 if self.predicted_seconds > 0 else 0.0

    def kernel_counts(self) -> dict[str, int]:
        """Calls per kernel over the whole plan (listed steps or not)."""
        if self.usage:
            return {name: calls for name, calls, _ in self.usage}
        return dict(Counter(step.kernel for step in self.steps))

    def kernels_by_area(self) -> list[str]:
        """Kernel names in order of the part of C they compute, largest first."""
        elements = self.kernel_elements()
        return sorted(elements, key=lambda name: -elements[name])

    def coverage(self) -> float:
        """Fraction of C the steps compute (1.0 for a correct plan)."""
        total = self.M * self.N
        return sum(self.kernel_elements().values()) / total if total else 1.0

    def kernel_elements(self) -> dict[str, int]:
        """Elements of C each kernel computes over the whole plan."""
        if self.usage:
            return {name: elements for name, _, elements in self.usage}
        elements: Counter[str] = Counter()
        for step in self.steps:
            elements[step.kernel] += step.mb * step.nb
        return dict(elements)


def _runtime() -> loader.Runtime:
    from ..runtime import api, loader

    runtime = api.current() or loader.load()
    if runtime is None:
        raise PlanError("no libautotune installed: run `autotune install`")
    return runtime


def plan(
    M: int,
    N: int,
    K: int,
    dtype: str = "f32",
    trans: str = "nn",
    *,
    layout: str = "col",
    lda: int | None = None,
    ldb: int | None = None,
    ldc: int | None = None,
    threads: int = 0,
    max_steps: int = STEP_LIMIT,
    runtime: loader.Runtime | None = None,
) -> Plan:
    """The plan the library would execute for this problem (``threads`` 0: its default).

    Leading dimensions default to the tight ones of ``layout``.  At most
    ``max_steps`` steps are listed; counts and explain cover them all.  ``runtime``:
    the library whose tiler plans (default: the one gemm uses, else the installed one).
    """
    from ..runtime import loader

    if dtype not in DTYPES:
        raise PlanError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if layout not in _LAYOUTS:
        raise PlanError(f"layout must be 'col' or 'row', got {layout!r}")
    ta, tb = parse_trans(trans)
    for name, value in (("M", M), ("N", N), ("K", K), ("lda", lda), ("ldb", ldb), ("ldc", ldc)):
        # The C API's sizes are int64_t: ctypes would pass a larger one wrapped to a negative.
        if value is not None and not 0 <= value < 2**63:
            raise PlanError(f"{name} must be from 0 to {2**63 - 1}, got {value}")
    row = layout == "row"
    a_rows, a_cols = (K, M) if ta else (M, K)
    b_rows, b_cols = (N, K) if tb else (K, N)
    lda = lda if lda is not None else max(1, a_cols if row else a_rows)
    ldb = ldb if ldb is not None else max(1, b_cols if row else b_rows)
    ldc = ldc if ldc is not None else max(1, N if row else M)
    runtime = runtime or _runtime()
    lib = runtime.lib
    handle = lib.at_plan_create_ex(DTYPE_CODE[dtype], _LAYOUTS[layout], int(ta), int(tb),
                                   M, N, K, lda, ldb, ldc, threads)
    if not handle:
        raise PlanError(lib.at_last_error().decode(errors="replace"))
    names = kernel_names(runtime)
    try:
        info = loader.at_plan_info()
        lib.at_plan_get_info(handle, ctypes.byref(info))
        total = lib.at_plan_steps(handle, None, 0)
        # A huge plan (10^8 kernel calls) is summarised, never listed whole.
        count = max(0, min(total, max_steps))
        raw = (loader.at_step * max(1, count))()
        lib.at_plan_steps(handle, raw, count)
        usage: tuple[tuple[str, int, int], ...] = ()
        if hasattr(lib, "at_plan_usage"):
            slots = len(names) + 1
            calls, elements = (ctypes.c_int64 * slots)(), (ctypes.c_int64 * slots)()
            lib.at_plan_usage(handle, calls, elements)
            usage = tuple((name, calls[i], elements[i]) for i, name in enumerate([*names, "edge"])
                          if calls[i])
    finally:
        lib.at_plan_destroy(handle)
    steps = []
    # Through numpy: reading ctypes fields one by one costs microseconds a step.
    records = np.frombuffer(raw, dtype=np.dtype(loader.at_step), count=count).tolist() if count else []
    for kernel, thread, i0, j0, mb, nb, pack in records:
        if row:
            # The plan tiles C^T (row-major C is column-major C^T): back to C.
            i0, j0, mb, nb = j0, i0, nb, mb
        steps.append(Step(names[kernel] if kernel >= 0 else "edge", i0, j0, mb, nb,
                          bool(pack & 1), bool(pack & 2), thread))
    return Plan(
        dtype=dtype, trans=trans.lower(), layout=layout, M=M, N=N, K=K, lda=lda, ldb=ldb, ldc=ldc,
        path="packed" if info.path == 1 else "small", threads=info.threads,
        kernel_trans=_TRANS[info.kernel_trans], blocks=(info.blk_m, info.blk_n, info.blk_k),
        predicted_seconds=info.predicted_seconds, memops=info.memops, steps=tuple(steps),
        nsteps=total, usage=usage, a_copied=bool(info.a_copied), prefetch_rows=info.prefetch_rows,
        direct_steps=info.direct_steps, column_order=bool(info.column_order),
    )


def kernel_names(runtime: loader.Runtime | None = None) -> list[str]:
    """The library's kernels in table order (the indices of ``at_kernel_get``)."""
    from ..runtime import loader

    lib = (runtime or _runtime()).lib
    names = []
    for i in range(lib.at_kernel_count()):
        ki = loader.at_kernel_info()
        lib.at_kernel_get(i, ctypes.byref(ki))
        names.append(ki.name.decode())
    return names


def explain(p: Plan) -> str:
    """What the tiler decided for ``p``, in a few lines of text."""
    lines = [
        f"{p.dtype} {p.trans} {p.layout}-major  M={p.M} N={p.N} K={p.K}  "
        f"lda={p.lda} ldb={p.ldb} ldc={p.ldc}",
        f"path: {p.path}" + (
            f" (blk_m={p.blocks[0]} blk_n={p.blocks[1]} blk_k={p.blocks[2]}, panels packed for "
            f"{p.kernel_trans} kernels)" if p.path == "packed" else
            f" (A copied into rows along K for the {p.kernel_trans} kernels, B read in place)"
            if p.a_copied else " (A and B read in place" + (
                f", K walked in slices of {p.blocks[2]}, every step in turn per slice"
                + (f", A's lines prefetched {p.prefetch_rows} rows ahead" if p.prefetch_rows else "")
                + ")" if p.blocks[2] else ")")),
        f"threads: {p.threads}   steps: {p.step_count}"
        + (", each kernel called straight from the plan" if p.direct_steps else "")
        + (", column by column (B from memory)" if p.column_order else ""),
        f"predicted: {p.predicted_seconds * 1e6:.2f} us ({p.predicted_gflops:.1f} GFLOPS)   "
        f"memops: {p.memops:.0f} elements (sum(mb+nb)*K + 2MN)",
        "kernels:",
    ]
    flops = p.kernel_elements()
    blocks = {s.kernel: (s.mb, s.nb) for s in p.steps}
    for name in flops:  # kernels past the listed steps: their block from the name
        if name not in blocks and name != "edge":
            spec = KernelSpec.from_name(name)
            blocks[name] = (spec.mr, spec.nr)
    total = max(1, sum(flops.values()))
    for name, count in sorted(p.kernel_counts().items(), key=lambda kv: -flops[kv[0]]):
        mb, nb = blocks.get(name, (0, 0))
        lines.append(f"  {name:<40} {mb:>3}x{nb:<3} x{count:<6} {100.0 * flops[name] / total:5.1f}% of C")
    return "\n".join(lines)


def draw(p: Plan, width: int = 64, height: int = 32) -> str:
    """C as a character grid: one letter per kernel (legend below), neighbouring
    blocks alternate case so block edges show; large C is drawn scaled down."""
    if p.M == 0 or p.N == 0:
        return f"(empty C: {p.M} x {p.N})"
    sy = max(1, -(-p.M // height))
    sx = max(1, -(-p.N // width))
    rows, cols = -(-p.M // sy), -(-p.N // sx)
    grid = [["?"] * cols for _ in range(rows)]
    letters: dict[str, str] = {}
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for s in p.steps:
        letter = letters.setdefault(s.kernel, alphabet[len(letters) % len(alphabet)])
        band = s.i0 // max(1, s.mb) + s.j0 // max(1, s.nb)
        ch = letter if band % 2 == 0 else letter.lower()
        for y in range(s.i0 // sy, min(rows, -(-(s.i0 + s.mb) // sy))):
            for x in range(s.j0 // sx, min(cols, -(-(s.j0 + s.nb) // sx))):
                grid[y][x] = ch
    scale = "" if sx == sy == 1 else f"  (one character = {sy} x {sx} elements)"
    out = [f"C {p.M} x {p.N}, {p.path} path, {p.step_count} steps{scale}"]
    if p.truncated:
        out.append(f"  (drawn from the first {len(p.steps)} steps; '?' marks blocks not drawn)")
    out += ["  " + "".join(row) for row in grid]
    for kernel, letter in letters.items():
        sample = next(s for s in p.steps if s.kernel == kernel)
        out.append(f"  {letter} = {kernel} ({sample.mb}x{sample.nb})")
    return "\n".join(out)


__all__ = ["Plan", "Step", "PlanError", "plan", "explain", "draw"]
