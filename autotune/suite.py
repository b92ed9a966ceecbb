"""The tuner's workload: a representative suite of GEMM shapes and how it is timed.

:mod:`autotune.tune` searches planner parameters; what it minimises is defined
here: for each shape of the suite, its time per call (``at_plan_execute`` on
preallocated buffers, through ctypes, the parameters set with ``at_params_set``)
times as many calls as make ``WORK_FLOPS`` of work.  A :class:`SuiteRunner` is
what the search measures with: :class:`LibraryRunner`, or a fake in tests.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping, Protocol, Sequence, TypeVar

import numpy as np

from .params import DTYPE_INDEX, DTYPES, PlannerParams
from .runtime.loader import at_kernel_info, at_plan_info, at_step, load

K = TypeVar("K")

_TRANS = {"nn": (0, 0), "nt": (0, 1), "tn": (1, 0), "tt": (1, 1)}

#: Flops of the representative workload per shape: a shape counts as many calls
#: as make this much work, so small and large shapes weigh alike.
WORK_FLOPS = 1e8
#: ...except that a tiny shape's time is mostly call overhead no parameter
#: changes; more calls than this would let that constant drown the rest.
MAX_CALLS = 1000


class TuningError(RuntimeError):
    """Tuning cannot run (e.g. the library has no parameter override)."""


# -- the suite ----------------------------------------------------------------------

@dataclass(frozen=True)
class SuiteShape:
    """One problem of the representative suite: column-major, ``op(A)`` is m x k."""

    kind: str  # small | irregular | tall-skinny | batched | large | probe (crossovers.probe_shapes)
    dtype: str
    trans: str
    m: int
    n: int
    k: int
    batch: int = 1
    threads: int = 0  # 0: the library's default (all cores); 1: a one-thread plan

    @property
    def regime(self) -> str:
        return "large" if self.kind == "large" else "small"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    @property
    def calls(self) -> int:
        return int(min(MAX_CALLS, max(1, round(WORK_FLOPS / self.flops))))

    @property
    def label(self) -> str:
        batch = f"{self.batch}x" if self.batch > 1 else ""
        threads = f" ({self.threads} thread{'s' if self.threads > 1 else ''})" if self.threads else ""
        return f"{self.dtype} {self.trans} {batch}{self.m}x{self.n}x{self.k}{threads}"


#: (kind, trans, m, n, k, batch, threads); threads 0 is the library's default (all cores).
_TEMPLATE: tuple[tuple[str, str, int, int, int, int, int], ...] = (
    ("small", "nn", 8, 8, 8, 1, 0), ("small", "nt", 16, 16, 16, 1, 0), ("small", "nn", 24, 24, 24, 1, 0),
    ("small", "tn", 32, 32, 32, 1, 0), ("small", "nn", 48, 48, 48, 1, 0), ("small", "tt", 64, 64, 64, 1, 0),
    ("irregular", "nn", 7, 13, 29, 1, 0), ("irregular", "nt", 37, 5, 61, 1, 0),
    ("irregular", "nn", 100, 30, 17, 1, 0), ("irregular", "tn", 61, 127, 33, 1, 0),
    ("irregular", "nn", 130, 70, 90, 1, 0),
    ("tall-skinny", "nn", 2000, 8, 64, 1, 0), ("tall-skinny", "nt", 8, 1500, 96, 1, 0),
    ("tall-skinny", "nn", 4096, 16, 16, 1, 0), ("tall-skinny", "tn", 64, 48, 3000, 1, 0),
    ("batched", "nn", 12, 12, 12, 64, 0), ("batched", "nt", 40, 24, 32, 32, 0),
    ("batched", "nn", 96, 96, 64, 8, 0),
    ("large", "nn", 160, 160, 160, 1, 0), ("large", "nn", 256, 256, 256, 1, 0),
    ("large", "nt", 200, 300, 250, 1, 0), ("large", "nn", 512, 512, 256, 1, 0),
    ("large", "tn", 384, 640, 320, 1, 0), ("large", "nn", 1024, 256, 512, 1, 0),
    ("large", "nn", 96, 2048, 128, 1, 0), ("large", "nn", 384, 384, 384, 1, 1),
    ("large", "nn", 768, 768, 768, 1, 0),
)


#: Shapes the search never sees, in every regime the planner's parameters touch
#: (one thread and all, in place and packed, up to 1024^3): whether tuned
#: parameters are kept is decided here, where they could not have been fitted.
_HELD_OUT: tuple[tuple[str, str, int, int, int, int, int], ...] = (
    ("small", "nn", 12, 12, 12, 1, 0), ("small", "tn", 20, 20, 20, 1, 0),
    ("small", "nt", 40, 40, 40, 1, 0), ("small", "nn", 56, 56, 56, 1, 0),
    ("irregular", "nn", 5, 70, 19, 1, 0), ("irregular", "nt", 90, 11, 45, 1, 0),
    ("irregular", "tn", 33, 129, 65, 1, 0),
    ("tall-skinny", "nn", 3000, 12, 32, 1, 0), ("tall-skinny", "nt", 24, 2500, 48, 1, 0),
    ("batched", "nn", 16, 16, 16, 48, 0),
    ("large", "nn", 128, 128, 128, 1, 0), ("large", "nn", 200, 200, 200, 1, 0),
    ("large", "nn", 448, 448, 448, 1, 1), ("large", "tn", 768, 512, 384, 1, 0),
    ("large", "nn", 1024, 1024, 1024, 1, 0),
)


def default_suite(dtypes: Sequence[str] = DTYPES, extra: Sequence[SuiteShape] = ()) -> tuple[SuiteShape, ...]:
    """Small square, irregular, tall-skinny, batched and large shapes, for each dtype,
    then ``extra`` of those dtypes (a user's recorded shapes)."""
    return tuple(SuiteShape(kind, dt, tr, m, n, k, b, threads)
                 for dt in dtypes for kind, tr, m, n, k, b, threads in _TEMPLATE) + \
        tuple(s for s in extra if s.dtype in dtypes)


def held_out_suite(dtypes: Sequence[str] = DTYPES, max_flops: float = math.inf) -> tuple[SuiteShape, ...]:
    """The shapes that judge a tuning (:data:`_HELD_OUT`), for each dtype, up to ``max_flops``."""
    shapes = (SuiteShape(kind, dt, tr, m, n, k, b, threads)
              for dt in dtypes for kind, tr, m, n, k, b, threads in _HELD_OUT)
    return tuple(s for s in shapes if s.flops <= max_flops)


# -- measuring ----------------------------------------------------------------------

class SuiteRunner(Protocol):
    """What the search measures with: the loaded library, or a fake in tests.

    A runner may also have ``plan_signature(shape) -> bytes``: equal for two
    parameter sets exactly when they plan the shape alike (:func:`tune.judge`
    then counts them as equally fast there instead of timing noise).
    """

    def set_params(self, params: PlannerParams) -> None: ...
    def time_shape(self, shape: SuiteShape) -> float: ...  # seconds per call
    def close(self) -> None: ...


@dataclass(frozen=True)
class _Buffers:
    plan_args: tuple[int, ...]
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    strides: tuple[int, int, int]


#: at_step's fields where the struct has them (its padding left out).
_STEP_DTYPE = np.dtype({
    "names": [name for name, _ in at_step._fields_],
    "formats": [np.dtype(ctype) for _, ctype in at_step._fields_],
    "offsets": [getattr(at_step, name).offset for name, _ in at_step._fields_],
    "itemsize": ctypes.sizeof(at_step),
})


class LibraryRunner:
    """Times plans of the loaded library in this process, on the host's thread count.

    Buffers are allocated once per shape; each sample runs a calibrated number
    of calls (at least ``min_sample_s``), the best of ``repeats`` samples after
    one warm-up counts.  The calibration happens once, so every trial times the
    same work.
    """

    def __init__(self, library: Path, repeats: int = 3, min_sample_s: float = 1e-4,
                 seed: int = 0) -> None:
        runtime = load(library)
        if runtime is None:
            raise TuningError(f"no library at {library}")
        if not hasattr(runtime.lib, "at_params_set"):
            raise TuningError(f"{library} has no at_params_set: rebuild it with this version")
        self.lib = runtime.lib
        self.repeats = repeats
        self.min_sample_s = min_sample_s
        self._rng = np.random.default_rng(seed)
        self._buffers: dict[SuiteShape, _Buffers] = {}
        self._reps: dict[SuiteShape, int] = {}

    def _buffers_for(self, shape: SuiteShape) -> _Buffers:
        key = replace(shape, threads=0)  # one set of operands whatever the thread count
        buf = self._buffers.get(key)
        if buf is not None:
            return replace(buf, plan_args=buf.plan_args[:-1] + (shape.threads,))
        dtype = np.float32 if shape.dtype == "f32" else np.float64
        ta, tb = _TRANS[shape.trans]
        ra, ca = (shape.k, shape.m) if ta else (shape.m, shape.k)
        rb, cb = (shape.n, shape.k) if tb else (shape.k, shape.n)
        sa, sb, sc = ra * ca, rb * cb, shape.m * shape.n
        a = self._rng.standard_normal(sa * shape.batch).astype(dtype)
        b = self._rng.standard_normal(sb * shape.batch).astype(dtype)
        c = np.zeros(sc * shape.batch, dtype=dtype)
        args = (DTYPE_INDEX[shape.dtype], 0, ta, tb, shape.m, shape.n, shape.k, ra, rb, shape.m, shape.threads)
        buf = _Buffers(args, a, b, c, (sa, sb, sc))
        self._buffers[key] = buf
        return buf

    def set_params(self, params: PlannerParams) -> None:
        rc = self.lib.at_params_set(ctypes.byref(params.to_struct()))
        if rc != 0:
            raise TuningError(f"at_params_set rejected {params}: {self.lib.at_last_error().decode()}")

    def kernel_values(self) -> dict[str, int]:
        """Each linked kernel's ``pack_kernel`` value: 1 + its index in the library's table."""
        values = {}
        for i in range(self.lib.at_kernel_count()):
            info = at_kernel_info()
            if self.lib.at_kernel_get(i, ctypes.byref(info)) == 0:
                values[info.name.decode()] = i + 1
        return values

    @contextmanager
    def _planned(self, shape: SuiteShape) -> Iterator[tuple[int, at_plan_info]]:
        """The plan the current parameters give ``shape`` and its summary, destroyed after."""
        buf = self._buffers_for(shape)
        plan = self.lib.at_plan_create_ex(*buf.plan_args)
        if not plan:
            raise TuningError(f"cannot plan {shape.label}: {self.lib.at_last_error().decode()}")
        try:
            info = at_plan_info()
            self.lib.at_plan_get_info(plan, ctypes.byref(info))
            yield plan, info
        finally:
            self.lib.at_plan_destroy(plan)

    def predicted_seconds(self, shape: SuiteShape) -> float:
        """What the planner predicts for ``shape`` on the current parameters (its busiest thread)."""
        with self._planned(shape) as (_, info):
            return float(info.predicted_seconds)

    def plan_signature(self, shape: SuiteShape) -> bytes:
        """A digest of the plan the current parameters give ``shape``: its summary and every step."""
        with self._planned(shape) as (plan, info):
            steps = (at_step * max(1, info.nsteps))()
            self.lib.at_plan_steps(plan, steps, info.nsteps)
            digest = hashlib.blake2b(digest_size=16)
            for value in (info.path, info.threads, info.kernel_trans, info.nsteps, info.blk_m, info.blk_n,
                          info.blk_k):
                digest.update(int(value).to_bytes(8, "little", signed=True))
            # Field by field: the structs' padding holds whatever the library's memory held.
            table = np.frombuffer(steps, dtype=_STEP_DTYPE, count=info.nsteps)
            for name in _STEP_DTYPE.names:
                digest.update(np.ascontiguousarray(table[name]).tobytes())
            return digest.digest()

    def time_shape(self, shape: SuiteShape) -> float:
        buf = self._buffers_for(shape)
        lib = self.lib
        plan = lib.at_plan_create_ex(*buf.plan_args)
        if not plan:
            raise TuningError(f"cannot plan {shape.label}: {lib.at_last_error().decode()}")
        try:
            pa, pb, pc = buf.a.ctypes.data, buf.b.ctypes.data, buf.c.ctypes.data
            if shape.batch > 1:
                sa, sb, sc = buf.strides
                batch = shape.batch

                def run() -> int:
                    return lib.at_plan_execute_batch(plan, batch, 1.0, pa, sa, pb, sb, 0.0, pc, sc)
            else:
                def run() -> int:
                    return lib.at_plan_execute(plan, 1.0, pa, pb, 0.0, pc)
            # Warm-up (first touch, caches, the pool's threads), and the one status
            # check: a failing call returns early and would look like a fast plan.
            rc = run()
            if rc != 0:
                raise TuningError(f"executing {shape.label} failed with status {rc}")
            reps = self._reps.get(shape)
            if reps is None:
                t0 = time.perf_counter()
                run()
                once = max(time.perf_counter() - t0, 1e-7)
                reps = self._reps[shape] = max(1, min(100000, math.ceil(self.min_sample_s / once)))
            best = math.inf
            for _ in range(self.repeats):
                t0 = time.perf_counter()
                for _ in range(reps):
                    run()
                best = min(best, (time.perf_counter() - t0) / reps)
            return best
        finally:
            lib.at_plan_destroy(plan)

    def close(self) -> None:
        # Back to the baked parameters: the process may go on using the library.
        self.lib.at_params_set(None)


def suite_time(runner: SuiteRunner, params: PlannerParams, shapes: Sequence[SuiteShape],
               report: Callable[[int, float], None] | None = None) -> float:
    """Seconds of the workload: each shape's calls times its measured time per call."""
    runner.set_params(params)
    total = 0.0
    for step, shape in enumerate(shapes):
        total += shape.calls * runner.time_shape(shape)
        if report is not None:
            report(step, total)
    return total


def best_of_rounds(measures: Mapping[K, Callable[[], float]], rounds: int,
                   before: Callable[[K], object] = lambda key: None) -> dict[K, float]:
    """Each measure's least result (seconds) over ``rounds`` rounds that run every measure once.

    A shared machine's speed drifts between seconds: measured one after another, two
    settings or kernels are compared across different windows, while a round gives
    every one of them the same ones.  ``before(key)`` runs before each measure (the
    quantised install stage names the kernel it is in, for a crash).
    """
    best = dict.fromkeys(measures, math.inf)
    for _ in range(max(1, rounds)):
        for key, measure in measures.items():
            before(key)
            best[key] = min(best[key], measure())
    return best


def race(runner: SuiteRunner, settings: Sequence[PlannerParams], shapes: Sequence[SuiteShape],
          rounds: int) -> list[float]:
    """Best of interleaved rounds for each setting (:func:`best_of_rounds`)."""
    best = best_of_rounds({i: (lambda p=p: suite_time(runner, p, shapes)) for i, p in enumerate(settings)}, rounds)
    return [best[i] for i in range(len(settings))]
