"""Measuring the planner's crossovers on the host: when packing pays, when threads pay,
when A comes from memory.

The tiler takes two decisions from a threshold on a product's flops: pack the
operands (Goto's path) or read them in place (IAAT's), and run on one thread or
on all of them; and one from the bytes of an A read in place: whether it outgrows
the last-level cache, and a walk of a few columns of C takes K in short slices.
:mod:`autotune.models` derives the thresholds from what the
operating system reports about the caches, and a report can be far off: a
2-core virtual machine that announced a 480 MB L3 put the packing crossover at
24 GFLOP, and 1024^3 ran in place at a fifth of the machine.  So the install
measures each decision instead of trusting the model: for a ladder of square
products it times the plan both ways, interleaved in rounds, and puts the
threshold where it loses the least time over the sizes measured.  The model's
value is the prior: it stands where the measurement finds it as good as any
other, or where the machine's noise leaves every size undecided, and the record
says so.

Nothing here builds or loads a library: it measures through a
:class:`autotune.suite.SuiteRunner`, so the tests drive it with a fake machine.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from .host import other_load
from .models import BPE
from .params import BY_NAME, DTYPES, PlannerParams
from .suite import SuiteRunner, SuiteShape

#: A threshold no product reaches: the cheaper side is always taken.  (The runtime
#: takes finite values only.)
NEVER = 1e300

#: Square sides each sweep climbs, about sqrt(2) apart.  Packing is timed from
#: the sizes where it starts to be a question (its copies cost more than they
#: save below) to past the largest crossover a current core's caches allow.
PACK_SIDES: Mapping[str, tuple[int, ...]] = {
    "f32": (128, 180, 256, 360, 512, 720, 1024, 1440),
    "f64": (96, 128, 180, 256, 360, 512, 720, 1024),
}
#: tn products (op(A) = A^T) read A in place as dot products, which lose to packing
#: from far smaller sizes than nn (Zen 5, f32, one thread: packed took half the time at 64^3).
PACK_TN_SIDES: tuple[int, ...] = (48, 64, 96, 128, 180, 256, 360, 512, 720)
THREAD_SIDES: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 180, 256)
#: The packing threshold each transposition the sweeps time sets (the others pack with nn's).
PACK_PARAMS: Mapping[str, str] = {"nn": "pack_flops", "tn": "pack_flops_tn"}
#: The M x STREAM_N x M products the streaming sweep climbs (place_stream_bytes): an A
#: of 1 MiB to 64 MiB, two sizes per doubling of its bytes, past the last-level cache
#: of a current core's share (a larger one stores the threshold past the last size).
STREAM_SIDES: Mapping[str, tuple[int, ...]] = {
    "f32": (512, 724, 1024, 1448, 2048, 2896, 4096),
    "f64": (362, 512, 724, 1024, 1448, 2048, 2896),
}
STREAM_N = 4
#: The widest C that stays in place where A comes from memory: rows of 128 bytes (plan.c,
#: AT_PLACE_STREAM_MAX_ROW_BYTES).
STREAM_WIDEST: Mapping[str, int] = {"f32": 32, "f64": 16}


def param_value(shape: str, dtype: str, flops: float) -> float:
    """A threshold on a sweep's scale (2 side^3 flops) as its parameter counts it: flops,
    or for a ``stream`` sweep the bytes of A (side^2 elements)."""
    if shape != "stream":
        return flops
    return (flops / 2.0) ** (2.0 / 3.0) * BPE[dtype]


def sweep_flops(shape: str, dtype: str, value: float) -> float:
    """The inverse of :func:`param_value`: a parameter's value on its sweep's scale."""
    if shape != "stream":
        return value
    return 2.0 * (max(value, 0.0) / BPE[dtype]) ** 1.5

#: The alternative must win at this many sizes in a row before a sweep stops: one
#: lucky size is not a crossover.
CONFIRM = 2
#: A side wins a size only by more than this fraction, or by more than the
#: repeats' own spread if that is larger.
MARGIN = 0.03


@dataclass(frozen=True)
class Effort:
    """How hard a sweep measures: interleaved rounds per size, the most a noisy size
    may take, and the longest call it times (it stops before a size whose one call
    would take longer)."""

    rounds: int = 3
    max_rounds: int = 9
    max_call_s: float = 0.25


FULL = Effort()
#: `install --quick`: fewer rounds, and no call past ~30 ms (about 700^3 f32 on one
#: core of a current CPU): a crossover above that is stored as just past it.
QUICK = Effort(rounds=2, max_rounds=4, max_call_s=0.03)


@dataclass(frozen=True)
class Point:
    """One size of a sweep: the best time per call of each side, and their noise."""

    side: int
    base_s: float  # the cheaper choice: in place, or one thread
    alt_s: float  # packed, or all threads
    spread: float  # relative spread of the rounds (median over best, minus one), the larger side's
    rounds: int
    threads: int = 0  # the threads both sides ran on (0: all, the library's default)

    @property
    def flops(self) -> float:
        return 2.0 * self.side ** 3

    @property
    def ratio(self) -> float:
        """Time of the alternative over the base: below one, the alternative pays."""
        return self.alt_s / self.base_s if self.base_s > 0 else math.inf

    def verdict(self, margin: float = MARGIN) -> str:
        """``alt``, ``base`` or ``tie`` (within the margin or the noise)."""
        bar = max(margin, self.spread)
        if self.ratio < 1.0 - bar:
            return "alt"
        if self.ratio > 1.0 + bar:
            return "base"
        return "tie"


@dataclass(frozen=True)
class Crossover:
    """A threshold as measured: what the model said, what the sweep found, what is kept.

    ``source`` is ``measured`` (the sides changed within the sweep), ``beyond``
    (the base side won up to the last size: the threshold is put just past it,
    since nothing above was measured), ``model`` (the noise decided nothing;
    the model's value stays) or ``busy`` (not measured: other processes kept the
    cores busy; the model's value stays).
    """

    param: str
    dtype: str
    base: str
    alt: str
    model_flops: float
    flops: float
    source: str
    points: tuple[Point, ...] = field(default_factory=tuple)
    #: Cores' worth of other work while the sweep ran (host.load_meter), where it was metered.
    other_load: float | None = None
    #: What a point's side is the size of: ``square`` products (M = N = K = side), the
    #: quantised ``gemv`` (M = 1, K = N = side) or ``stream`` (side x STREAM_N x side).
    #: ``flops`` is 2 side^3 either way, the sweep's scale for :func:`crossing`; the
    #: parameter itself may count otherwise (:attr:`value`).
    shape: str = "square"
    #: The parameter's value as stored (None in records older than it).
    threshold: float | None = None

    @property
    def value(self) -> float:
        """The threshold as its parameter counts it (:func:`param_value` of ``flops`` in
        records without one)."""
        return self.threshold if self.threshold is not None else param_value(self.shape, self.dtype, self.flops)

    @property
    def side(self) -> float:
        """The cube side of :attr:`flops` (what a person compares with a matrix size)."""
        return (self.flops / 2.0) ** (1.0 / 3.0)

    @property
    def model_side(self) -> float:
        return (self.model_flops / 2.0) ** (1.0 / 3.0)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["points"] = [asdict(p) for p in self.points]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Crossover":
        points = tuple(Point(**p) for p in data.get("points", ()))
        return cls(**{**data, "points": points})


def _gain(point: Point, margin: float) -> float:
    """How much faster the alternative ran than the base at ``point``, in log time,
    beyond the noise (the margin or the rounds' spread, whichever is larger):
    negative where the base was faster, 0 where the noise hides the answer."""
    if not point.ratio > 0 or not math.isfinite(point.ratio):
        return -math.inf if point.ratio == math.inf else 0.0
    gap = -math.log(point.ratio)
    return math.copysign(max(0.0, abs(gap) - math.log1p(max(margin, point.spread))), gap)


def crossing(points: Sequence[Point], margin: float = MARGIN,
             prior: float | None = None) -> tuple[float | None, str]:
    """(threshold flops, source) from a sweep's points, ascending in size (a size
    may come once per thread count): the threshold that loses the least time over
    the points measured.

    A threshold takes the base side below it and the alternative from it on; at
    each size, choosing the slower side loses the log of their time ratio beyond
    the noise (a size the noise leaves undecided costs nothing either way).  The
    candidates sit half a step below the first size, geometrically halfway
    between neighbours, and half a step above the last.  Sizes do not take turns
    in a real machine's answer as they do in its noise: a 720^3 that ran in place
    faster between a 512^3 and a 1024^3 that packed ran faster moves the
    threshold only as far as the time it saves, where "the alternative wins every
    size from here on" put it past all three.

    ``prior`` (the model's threshold in flops) stays when it loses no more than
    the best candidate (source ``measured``: the measurement agrees with it), and
    among equally good candidates the nearest to it is taken.  ``beyond``: the
    best is past the last size (the base side won up to the end); ``model``: no
    size was decided beyond the noise.
    """
    gains = [_gain(p, margin) for p in points]
    if not any(gains):
        return None, "model"
    sides = [float(p.side) for p in points]
    # A size may have been timed on several thread counts: one candidate per gap.
    ladder = sorted(set(sides))
    first = ladder[1] / ladder[0] if len(ladder) > 1 else math.sqrt(2.0)
    last = ladder[-1] / ladder[-2] if len(ladder) > 1 else math.sqrt(2.0)
    candidates = [ladder[0] / math.sqrt(first), *(math.sqrt(a * b) for a, b in zip(ladder, ladder[1:])),
                  ladder[-1] * math.sqrt(last)]

    def lost(threshold: float) -> float:
        return sum(max(0.0, -g) if side >= threshold else max(0.0, g) for side, g in zip(sides, gains))

    least = min(lost(c) for c in candidates)
    tolerance = 1e-9 * (1.0 + least)
    if prior is not None and lost((prior / 2.0) ** (1.0 / 3.0)) <= least + tolerance:
        return prior, "measured"
    best = [c for c in candidates if lost(c) <= least + tolerance]
    if prior is not None:
        centre = math.log((prior / 2.0) ** (1.0 / 3.0))
        chosen = min(best, key=lambda c: abs(math.log(c) - centre))
    else:
        chosen = best[(len(best) - 1) // 2]
    return 2.0 * chosen ** 3, "beyond" if chosen > ladder[-1] else "measured"


# -- measuring ------------------------------------------------------------------------

def _spread(samples: Sequence[float]) -> float:
    best = min(samples)
    return statistics.median(samples) / best - 1.0 if best > 0 else math.inf


def measure_point(runner: SuiteRunner, side: int, base: tuple[PlannerParams, SuiteShape],
                  alt: tuple[PlannerParams, SuiteShape], margin: float = MARGIN, effort: Effort = FULL) -> Point:
    """Both sides of one size, in interleaved rounds; more rounds while the noise hides the answer."""
    def timer(params: PlannerParams, shape: SuiteShape) -> Callable[[], float]:
        def seconds() -> float:
            runner.set_params(params)
            return runner.time_shape(shape)
        return seconds

    return measure_pair(side, timer(*base), timer(*alt), margin, effort)


def measure_pair(side: int, base: Callable[[], float], alt: Callable[[], float], margin: float = MARGIN,
                 effort: Effort = FULL) -> Point:
    """One size's :class:`Point` from two timers (seconds per call of each side), in
    interleaved rounds; more rounds while the noise hides the answer."""
    samples: dict[str, list[float]] = {"base": [], "alt": []}
    timers = {"base": base, "alt": alt}

    while True:
        for _ in range(effort.rounds):
            for label, seconds in timers.items():
                samples[label].append(seconds())
        rounds = len(samples["base"])
        point = Point(side, min(samples["base"]), min(samples["alt"]),
                      round(max(_spread(samples["base"]), _spread(samples["alt"])), 4), rounds)
        if point.verdict(margin) != "tie" or rounds + effort.rounds > effort.max_rounds or point.spread <= margin:
            return point


@dataclass(frozen=True)
class SweepSpec:
    """One decision: the threshold it sets, the sizes it climbs, and how each side is forced."""

    param: str
    dtype: str
    sides: tuple[int, ...]
    base: str
    alt: str
    force: Callable[[PlannerParams, int], tuple[tuple[PlannerParams, SuiteShape],
                                                tuple[PlannerParams, SuiteShape]]]
    #: Thread counts each size is timed on (the shapes' ``threads``; 0: all): the
    #: threshold serves them all, so it is the one that loses least over all of them.
    threads: tuple[int, ...] = (0,)
    #: What the sides measure (:attr:`Crossover.shape`), and so how the threshold
    #: found on the sweep's scale becomes the parameter's value (:func:`param_value`).
    shape: str = "square"


def pack_sweep(dtype: str, threads: int = 2, trans: str = "nn") -> SweepSpec:
    """In place against packed, on one thread and on all of them (``threads`` > 1),
    for nn products or (``trans="tn"``) products of A transposed, whose threshold
    (``pack_flops_tn``) is the tn kernels' own: they read A in place as dot products.

    One threshold serves every thread count, and they disagree: threads reading A
    and B in place share the last-level cache and the memory bus, which packed
    panels relieve, while one thread in place suffers most from a power-of-two
    leading dimension (a column of A in a few of L1's sets).  On a 2-core Zen 3 VM
    a sweep on all threads alone found the model's 591^3 as good as any, where one
    thread ran 512^3 in place at 0.75x of packed: the stored threshold is the one
    that loses least over both.
    """
    param = PACK_PARAMS[trans]

    def force(params: PlannerParams, side: int) -> tuple[tuple[PlannerParams, SuiteShape], ...]:
        shape = SuiteShape("large", dtype, trans, side, side, side)
        threaded = params.with_values(dtype, {"thread_flops": 0.0})
        # A tn product packs from the lower of the two thresholds: in place needs both past it.
        in_place = {name: NEVER for name in {"pack_flops", param}}
        return ((threaded.with_values(dtype, in_place), shape),
                (threaded.with_values(dtype, {param: 0.0}), shape))
    return SweepSpec(param, dtype, PACK_SIDES[dtype] if trans == "nn" else PACK_TN_SIDES, "in place", "packed",
                     force, (0, 1) if threads > 1 else (0,))


def stream_sweep(dtype: str, threads: int = 2) -> SweepSpec:
    """Slices for a cached A against short slices, on M x 4 x M products read in place,
    one thread and all: from which bytes of A (place_stream_bytes) a walk of a few
    columns of C takes K eight or sixteen steps at a time.

    Whether A stays in the last-level cache between calls is the fact the walk
    needs, and the one the operating system's report gets wrong (a 2-vCPU VM
    announced 480 MB).  On a 2-vCPU Zen 1 VM (8 MiB L3; one thread / two, GFLOPS
    cached rule against short slices): fp64 724 x 4 x 724 (A 4 MiB) 15.2 / 12.1 and
    28.5 / 14.1, 1024 x 4 x 1024 10.3 / 12.6 and 23.6 / 15.8, 2048 x 4 x 2048 6.3 /
    10.2 and 9.7 / 14.1.  The thread counts disagree in between (two Zen 1 vCPUs
    may sit in two core complexes, each with its own L3), and the bits of a product
    must not depend on its threads: the one threshold loses least over both.
    """
    def force(params: PlannerParams, side: int) -> tuple[tuple[PlannerParams, SuiteShape], ...]:
        shape = SuiteShape("probe", dtype, "nn", side, STREAM_N, side)
        in_place = params.with_values(dtype, {"pack_flops": NEVER, "thread_flops": 0.0})
        return ((in_place.with_values(dtype, {"place_stream_bytes": NEVER}), shape),
                (in_place.with_values(dtype, {"place_stream_bytes": 0.0}), shape))
    return SweepSpec("place_stream_bytes", dtype, STREAM_SIDES[dtype], "slices for a cached A",
                     "short K slices", force, (0, 1) if threads > 1 else (0,), "stream")


def thread_sweep(dtype: str = "f32") -> SweepSpec:
    """One thread against all: f32, whose threshold is the higher (a flop costs half the time)."""
    def force(params: PlannerParams, side: int) -> tuple[tuple[PlannerParams, SuiteShape], ...]:
        shape = SuiteShape("small", dtype, "nn", side, side, side)
        threaded = params.with_values(dtype, {"thread_flops": 0.0})
        return ((threaded, SuiteShape("small", dtype, "nn", side, side, side, threads=1)),
                (threaded, shape))
    return SweepSpec("thread_flops", dtype, THREAD_SIDES, "1 thread", "all threads", force)


def sweep(runner: SuiteRunner, spec: SweepSpec, params: PlannerParams,
          advance: Callable[[], None] = lambda: None, effort: Effort = FULL) -> tuple[Point, ...]:
    """Climb the sizes until the alternative has won CONFIRM in a row (or a call gets too long)."""
    points: list[Point] = []
    growth = 2 if spec.shape == "stream" else 3  # a call's work grows with side^3, or side^2 at N = 4
    for side in spec.sides:
        if points and max(p.base_s for p in points if p.side == points[-1].side) * \
                (side / points[-1].side) ** growth > effort.max_call_s:
            break
        (base, base_shape), (alt, alt_shape) = spec.force(params, side)
        for threads in spec.threads:
            # 0 keeps the threads the spec's shapes ask for (the thread sweep's own pair).
            on_base = replace(base_shape, threads=threads) if threads else base_shape
            on_alt = replace(alt_shape, threads=threads) if threads else alt_shape
            point = measure_point(runner, side, (base, on_base), (alt, on_alt), effort=effort)
            points.append(replace(point, threads=on_alt.threads))
        advance()
        sizes = sorted({p.side for p in points})[-CONFIRM:]
        if len(sizes) >= CONFIRM and all(p.verdict() == "alt" for p in points if p.side in sizes):
            break
    return tuple(points)


def specs_for(dtypes: Iterable[str], threads: int, tn_dtypes: Iterable[str] = ()) -> tuple[SweepSpec, ...]:
    """The sweeps of an install: packing per dtype (and for tn products of the dtypes
    in ``tn_dtypes``, those with tn kernels to run in place), then threads (on a host
    that has them)."""
    dtypes = [dt for dt in DTYPES if dt in set(dtypes)]
    tn = set(tn_dtypes)
    specs = [pack_sweep(dt, threads) for dt in dtypes] + [pack_sweep(dt, threads, "tn") for dt in dtypes if dt in tn]
    specs += [stream_sweep(dt, threads) for dt in dtypes]
    if threads > 1 and dtypes:
        specs.append(thread_sweep("f32" if "f32" in dtypes else dtypes[0]))
    return tuple(specs)


#: Other processes' load (in cores) from which the machine counts as busy: a
#: thread sweep there times the other core's queue, not this library's split.
BUSY_LOAD = 0.5
#: How long the install waits for a busy machine to calm down before measuring.
QUIET_WAIT_S = 20.0


def quiet_wait_s() -> float:
    """QUIET_WAIT_S, or $AUTOTUNE_QUIET_WAIT seconds (0: measure at once, as the test suite does)."""
    try:
        return max(0.0, float(os.environ.get("AUTOTUNE_QUIET_WAIT", QUIET_WAIT_S)))
    except ValueError:
        return QUIET_WAIT_S


def wait_for_quiet(max_wait_s: float = QUIET_WAIT_S, load: Callable[[], float | None] = other_load,
                   say: Callable[[str], None] = lambda text: None) -> float | None:
    """The other processes' load once it falls below BUSY_LOAD, or after ``max_wait_s``
    (whatever it is then; None where it cannot be read)."""
    waited = 0.0
    now = load()
    while now is not None and now >= BUSY_LOAD and waited < max_wait_s:
        if waited == 0.0:
            say(f"other processes keep {now:.1f} cores busy: waiting up to {max_wait_s:.0f} s "
                "for a quieter machine before timing the planner's decisions")
        now = load()
        waited += 0.5  # load() sleeps half a second
    return now


def probe_shapes(found: Iterable[Crossover], max_flops: float = math.inf,
                 against: Iterable[PlannerParams] = ()) -> tuple[SuiteShape, ...]:
    """Squares (M x 4 x M and M x 16 x M for the streaming threshold) between each
    measured threshold and the model's, and the value each set ``against`` has for
    it (a tuned set's), for the held-out check.

    Where the two thresholds are far apart, the held-out shapes may have none
    between them, and the check cannot tell one value from the other: an install
    measured f64 packing from 215^3 against the model's 418^3, no held-out shape
    lay in between, and the measured value was dropped for want of evidence.  The
    square at the geometric mean of the two sides is planned differently by the
    two values, on each thread count the sweep timed.
    """
    others = tuple(against)
    shapes: dict[SuiteShape, None] = {}
    for c in found:
        if c.source not in ("measured", "beyond") or not (0 < c.flops < NEVER and 0 < c.model_flops < NEVER):
            continue
        values = [sweep_flops(c.shape, c.dtype, float(p.get(c.dtype, c.param))) for p in others]
        sides = [c.model_side] + [(v / 2.0) ** (1.0 / 3.0) for v in values if 0 < v < NEVER]
        packing = next((t for t, param in PACK_PARAMS.items() if param == c.param), None)
        for side in sides:
            low, high = sorted((c.side, side))
            if high < 1.1 * low:
                continue
            middle = round(math.sqrt(low * high))
            # The streaming threshold decides the slices of 4 columns and the path of the widest.
            widths = (STREAM_N, STREAM_WIDEST[c.dtype]) if c.shape == "stream" else (middle,)
            for threads in ((1, 0) if packing or c.shape == "stream" else (0,)):
                for n in widths:
                    shapes[SuiteShape("probe", c.dtype, packing or "nn", middle, n, middle, threads=threads)] = None
    return tuple(s for s in shapes if s.flops <= max_flops)


def measure_crossovers(runner: SuiteRunner, params: PlannerParams, specs: Sequence[SweepSpec],
                       advance: Callable[[], None] = lambda: None, busy: bool = False,
                       effort: Effort = FULL, meter: Callable[[], Callable[[], float | None]] | None = None
                       ) -> tuple[PlannerParams, tuple[Crossover, ...]]:
    """Run ``specs`` in turn, each on the parameters the ones before it set.

    Returns the parameters with every measured threshold in place, and what
    each sweep saw.  On a ``busy`` machine no sweep is run and the model's values
    stay (source ``busy``): one thread would win every size against a split that
    waits for a loaded core, and the pack sweep, which times both sides on all
    threads, waits the same way (an install beside two busy cores found "in place
    wins up to 1708^3" where a quiet run of the same host packs from 429^3).  The
    runner is left on the returned parameters.

    ``meter`` (:func:`autotune.host.load_meter`) watches each sweep as it runs: one
    during which other work took BUSY_LOAD cores or more is run again, and if
    that run is no quieter, the model's value stays (``busy``, with the load).
    On a 2-vCPU VM one install's every two-thread call of the thread sweep took
    120-260 us from 32^3 up (one thread: 3-66 us) while another, minutes later,
    timed 2-8 us there, and the stored threshold (152^3) was that window's (likeliest:
    the second vCPU ran someone else's work, which a VM sees as steal time).
    """
    found: list[Crossover] = []
    for spec in specs:
        # The sweep's scale is 2 side^3; the parameter keeps its own unit, and the model's
        # exact value where the sweep keeps it (the round trip need not give it back).
        model_value = float(params.get(spec.dtype, spec.param))
        model = sweep_flops(spec.shape, spec.dtype, model_value)
        if busy:
            found.append(Crossover(spec.param, spec.dtype, spec.base, spec.alt, model, model, "busy",
                                   shape=spec.shape, threshold=model_value))
            continue
        other = None
        for _ in range(2):
            since = meter() if meter else None
            points = sweep(runner, spec, params, advance, effort)
            other = since() if since else None
            if other is None or other < BUSY_LOAD:
                break
        loaded = None if other is None else round(other, 2)
        if loaded is not None and other >= BUSY_LOAD:
            found.append(Crossover(spec.param, spec.dtype, spec.base, spec.alt, model, model, "busy", points,
                                   loaded, spec.shape, model_value))
            continue
        flops, source = crossing(points, prior=model)
        if flops is None or flops == model:
            flops, value = model, model_value
        else:
            flops = float(f"{flops:.4g}")
            value = float(f"{param_value(spec.shape, spec.dtype, flops):.4g}")
        crossover = Crossover(spec.param, spec.dtype, spec.base, spec.alt, model, flops, source, points,
                              loaded, spec.shape, value)
        params = params.with_values(spec.dtype, {spec.param: crossover.value})
        found.append(crossover)
    runner.set_params(params)
    return params, tuple(found)


def _best_times(runner: SuiteRunner, forced: PlannerParams, shapes: Mapping[Any, SuiteShape], rounds: int,
                then: PlannerParams) -> dict[Any, float]:
    """Each shape's best time over ``rounds`` interleaved rounds on the ``forced``
    parameters; the runner is left on ``then`` whatever happens."""
    from .suite import best_of_rounds

    runner.set_params(forced)
    try:
        return best_of_rounds({key: (lambda s=shape: runner.time_shape(s)) for key, shape in shapes.items()},
                              rounds)
    finally:
        runner.set_params(then)


# -- the edge code's speed ------------------------------------------------------------

#: Blocks the edge code is timed on, at two depths: the difference of the two times
#: is the code's own, without the call's (through ctypes, 0.5-1 us a call on a
#: 2-vCPU VM, noisier than a small block's whole work).
EDGE_BLOCKS: tuple[tuple[int, int], ...] = ((15, 15), (7, 13), (1, 129))
EDGE_DEPTHS: tuple[int, int] = (64, 256)


@dataclass(frozen=True)
class EdgeSpeed:
    """The portable edge code's measured speed for one dtype, and the planner's
    ``edge_frac`` it gives (that speed over the dtype's peak, within the
    parameter's range); ``gflops`` None where no block could be timed (the
    fraction is then the one it replaces)."""

    dtype: str
    gflops: float | None
    frac: float
    peak_gflops: float
    by_block: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "by_block": dict(self.by_block)}


def measure_edge(runner: SuiteRunner, params: PlannerParams, dtype: str, peak_gflops: float,
                 rounds: int = 3) -> EdgeSpeed:
    """How fast the blocks no kernel covers run, timed on one thread.

    The planner prices an uncovered block at ``edge_frac`` times the peak, and a
    guess there decides between edge code and kernels: the tuner once raised f32's
    to 0.13 (33 GFLOPS on Zen 5), no suite shape minded, and 2x2x2 then ran on
    edge code at 0.4x of its 2x2 kernel, 17x129x33 at half speed.  The code is one
    sequential sum per element (BLAS's order), a chain of dependent FMAs: about
    4 GFLOPS on that core in either dtype, a fraction of 0.016 (f32) and 0.032
    (f64).  With ``edge_frac`` set to 1 every block of these products is edge code.
    """
    from .params import BY_NAME

    forced = params.with_values(dtype, {"edge_frac": 1.0})
    shapes = {(mb, nb, k): SuiteShape("probe", dtype, "nn", mb, nb, k, threads=1)
              for mb, nb in EDGE_BLOCKS for k in EDGE_DEPTHS}
    best = _best_times(runner, forced, shapes, rounds, then=params)
    low, high = EDGE_DEPTHS
    by_block = {}
    for mb, nb in EDGE_BLOCKS:
        extra = best[(mb, nb, high)] - best[(mb, nb, low)]
        if extra > 0:
            by_block[f"{mb}x{nb}"] = round(2.0 * mb * nb * (high - low) / extra / 1e9, 3)
    param = BY_NAME["edge_frac"]
    if not by_block or not peak_gflops > 0:
        return EdgeSpeed(dtype, None, float(params.get(dtype, "edge_frac")), peak_gflops, by_block)
    gflops = statistics.median(by_block.values())
    frac = min(param.high, max(param.low, gflops / peak_gflops))
    return EdgeSpeed(dtype, round(gflops, 3), float(f"{frac:.4g}"), peak_gflops, by_block)


# -- the fixed cost of a threaded call -----------------------------------------------

#: Squares the threads' fixed cost is timed on: large enough that both threads'
#: shares are even and a call's work is tens of microseconds, small enough that
#: the cost is a visible part of it.
THREAD_COST_SIDES: tuple[int, ...] = (64, 80, 96, 112, 128)


@dataclass(frozen=True)
class ThreadCost:
    """What a call on all threads costs beyond its busiest share (``thread_seconds``):
    ``seconds`` as measured (None where it was not: one thread, a busy machine),
    ``value`` the parameter stored, ``call_s`` the timer's own cost of a call (a
    1x1x1 product on one thread), ``by_side`` the estimate at each square."""

    threads: int
    seconds: float | None
    value: float
    call_s: float | None = None
    by_side: Mapping[str, float] = field(default_factory=dict)
    source: str = "measured"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "by_side": dict(self.by_side)}


def measure_thread_cost(runner: SuiteRunner, params: PlannerParams, threads: int, rounds: int = 3,
                        busy: bool = False) -> ThreadCost:
    """The fixed cost of a parallel region, from squares timed on one thread and on all.

    A plan splits over threads only where its busiest share plus this cost beats
    one thread (plan.c, split_if_it_pays).  A call on ``threads`` threads takes the
    timer's own cost c, its busiest share of the work and the region's:
    ``t_all - c - (t_one - c) * share`` at each size, their median stored.
    ``share`` is the busiest thread's part of the work as the planner predicts it
    (a runner with ``predicted_seconds``), else ``1 / threads``: the imbalance of a
    split is the planner's to weigh, not the region's cost.  The calls come from
    Python, a microsecond or so apart, and what a worker that starts its share late
    costs them is counted too (docs/performance.md, the Xeon section): on a 2-vCPU
    Xeon VM three installs read 1.6, 2.0 and 5.0 us, where calls from C back to back
    showed about 1.  (thread_flops, a threshold on flops, had let 48^3 split there,
    1.72 us a call against 1.34 on one thread.)
    """
    model = float(params.thread_seconds)
    if threads < 2 or busy:
        return ThreadCost(threads, None, model, source="busy" if busy else "one thread")
    forced = params.with_values("f32", {"thread_flops": 0.0, "thread_seconds": 0.0})
    shapes = {("call", 1): SuiteShape("probe", "f32", "nn", 1, 1, 1, threads=1)}
    for side in THREAD_COST_SIDES:
        shapes[(side, 1)] = SuiteShape("probe", "f32", "nn", side, side, side, threads=1)
        shapes[(side, threads)] = SuiteShape("probe", "f32", "nn", side, side, side, threads=threads)
    best = _best_times(runner, forced, shapes, rounds, then=params)
    call = best[("call", 1)]
    predict = getattr(runner, "predicted_seconds", None)
    share = dict.fromkeys(THREAD_COST_SIDES, 1.0 / threads)
    if predict is not None:
        runner.set_params(forced)
        try:
            for side in THREAD_COST_SIDES:
                one, split = predict(shapes[(side, 1)]), predict(shapes[(side, threads)])
                if one > 0 and 0 < split <= one:
                    share[side] = split / one
        finally:
            runner.set_params(params)
    by_side = {f"{side}^3": max(0.0, best[(side, threads)] - call - (best[(side, 1)] - call) * share[side])
               for side in THREAD_COST_SIDES}
    # The median: a size now and then reads several times the others (a worker
    # that started late in every call of its samples).  Not a lower quantile:
    # Python's callers meet that worker, and with the lower quartile (1.37 us on a
    # 2-vCPU Xeon VM) 64^3 split and ran at 0.70x numpy from Python.
    seconds = statistics.median(by_side.values())
    from .params import BY_NAME

    param = BY_NAME["thread_seconds"]
    value = float(f"{min(param.high, max(param.low, seconds)):.3g}")
    return ThreadCost(threads, round(seconds, 10), value, round(call, 10),
                      {k: round(v, 10) for k, v in by_side.items()})


# -- the main kernels: the packed path's, and in place per transposition ----------

#: Kernels per dtype tried as the packed path's main kernel, beside the figures' choice:
#: this many by their figures, this many by the grid's own rows, and this many per
#: transposition by the register model (install.main_candidates).
MAIN_CANDIDATES = 3
#: The square each dtype's candidates run, packed and on one thread: deeper than the
#: blocking's K slice, a few milliseconds a call on a desktop core.
MAIN_SIDES: Mapping[str, int] = {"f32": 640, "f64": 512}
#: The products read in place that the candidates of a dtype and transposition run,
#: on one thread (M, N, K): a square whose columns of 128 f32 or f64 fall in a few
#: L1 sets, one whose columns spread over them, and a narrow deep one whose slivers
#: of A stream from L2 (like 100 x 10 x 1000).  The planner takes the kernel where
#: these reach (plan.c): from AT_PLACE_FAVOUR_K = 64 deep, up to the largest's flops
#: (AT_PLACE_FAVOUR_FLOPS).
PLACE_SHAPES: tuple[tuple[int, int, int], ...] = ((128, 128, 128), (96, 96, 96), (96, 16, 1024))


@dataclass(frozen=True)
class MainKernel:
    """A main kernel for one dtype as timed on the built library: the packed path's
    (the planner's ``pack_kernel``), or with ``trans`` that of products read in place
    of that transposition (``place_kernel_<trans>``).  ``value`` is 1 + the kernel's
    index in the library, 0 when the figures' own choice stays; ``seconds`` the time
    of each candidate's plans (``"figures"``: the kernels' figures choosing): of the
    packed square of ``side``, or in place the seconds per flop of ``shapes`` summed."""

    dtype: str
    value: int
    name: str | None
    side: int
    seconds: Mapping[str, float] = field(default_factory=dict)
    source: str = "measured"  # measured | busy
    margin: float = MARGIN  # how much faster a candidate had to be
    trans: str = ""  # in place: the transposition; "" for the packed path
    shapes: tuple[tuple[int, int, int], ...] = ()

    @property
    def param(self) -> str:
        return f"place_kernel_{self.trans}" if self.trans else "pack_kernel"

    @property
    def gain(self) -> float | None:
        """The chosen plan's speed over the figures' choice (None when nothing was timed)."""
        base = self.seconds.get("figures")
        mine = self.seconds.get(self.name or "figures")
        return base / mine if base and mine else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": dict(self.seconds), "shapes": [list(s) for s in self.shapes]}


def _race(settings: Mapping[str, PlannerParams], seconds_of: Callable[[], float], runner: SuiteRunner,
          params: PlannerParams, rounds: int) -> dict[str, float]:
    """Each setting's best time of ``seconds_of`` in interleaved rounds
    (:func:`autotune.suite.best_of_rounds`); the leader, when not ``"figures"``, races
    ``"figures"`` again, alone, and each keeps its slower best: among many candidates
    one may lead by a lucky sample.  The runner is left with ``params``."""
    from .suite import best_of_rounds

    def timed(p: PlannerParams) -> Callable[[], float]:
        def run() -> float:
            runner.set_params(p)
            return seconds_of()
        return run

    try:
        seconds = best_of_rounds({name: timed(p) for name, p in settings.items()}, rounds)
        best = min(seconds, key=seconds.__getitem__)
        if best != "figures" and len(settings) > 2:
            again = best_of_rounds({name: timed(settings[name]) for name in ("figures", best)}, rounds)
            seconds.update({name: max(seconds[name], s) for name, s in again.items()})
    finally:
        runner.set_params(params)
    return seconds


def _winner(seconds: Mapping[str, float], candidates: Sequence[tuple[str, int]],
            margin: float) -> tuple[str | None, int]:
    """The fastest candidate and its value, or (None, 0) unless ``margin`` faster than the figures."""
    best = min(seconds, key=seconds.__getitem__)
    if best == "figures" or seconds[best] > seconds["figures"] * (1 - margin):
        return None, 0
    return best, dict(candidates)[best]


def measure_main_kernel(runner: SuiteRunner, params: PlannerParams, dtype: str,
                        candidates: Sequence[tuple[str, int]], rounds: int = 3, busy: bool = False,
                        margin: float = MARGIN) -> MainKernel:
    """Which kernel runs the packed path's blocks fastest, timed on a packed product.

    The planner takes the transposition and the kernel whose figure at depth is
    highest, and figures within a few percent of each other are noise on a shared
    host: four installs of one machine (2-vCPU Zen 3) took fp32 NN 8x14, NT 16x3,
    NT 24x3 and NT 16x5 by them (the grid's figures alone, NT 8x13), and in plans
    with the same runtime and parameters NT 16x5 ran fp32 1024^3 and 2048^3 1.11x
    and 1.21x faster than 8x13.
    ``candidates`` are (name, 1 + index in the library) of the best kernels by
    their figures, by the grid's rows and by the register model
    (:func:`autotune.install.main_candidates`); each candidate's plan and the
    figures' own are timed in interleaved rounds on one thread (:func:`_race`),
    and the leader replaces the figures' choice only when ``margin`` faster.
    """
    side = MAIN_SIDES.get(dtype, 512)
    if busy or not candidates:
        return MainKernel(dtype, 0, None, side, {}, "busy" if busy else "measured", margin)
    shape = SuiteShape("probe", dtype, "nn", side, side, side, threads=1)
    packed = params.with_values(dtype, {"pack_flops": 0.0})
    settings = {"figures": packed.with_values(dtype, {"pack_kernel": 0}),
                **{name: packed.with_values(dtype, {"pack_kernel": value}) for name, value in candidates}}
    seconds = _race(settings, lambda: runner.time_shape(shape), runner, params, rounds)
    best, value = _winner(seconds, candidates, margin)
    return MainKernel(dtype, value, best, side, {name: float(f"{s:.4g}") for name, s in seconds.items()},
                      "measured", margin)


def measure_place_kernel(runner: SuiteRunner, params: PlannerParams, dtype: str, trans: str,
                         candidates: Sequence[tuple[str, int]], rounds: int = 3, busy: bool = False,
                         margin: float = MARGIN) -> MainKernel:
    """Which kernel of ``trans`` runs products read in place fastest, timed on
    :data:`PLACE_SHAPES`.

    The kernels' figures time each kernel alone, its sliver of A m_r wide and its B
    streaming; read in place through a leading dimension, the kernels one vector
    tall fall behind the taller ones.  On a 2-vCPU Xeon (AVX-512), one kernel
    tiling f32 128 x 120 x 128: NN 16x5 116 GFLOPS, 64x5, 48x8 and 32x8 174-175; the
    figures had 16x5 at 165 and 64x5 at 139 (K = 256), and plans took 16x5: 128^3
    ran at 0.63x MKL.  ``candidates`` (:func:`autotune.install.place_candidates`)
    race the figures' plans (:func:`_race`) on one thread, scored by seconds per
    flop summed over the shapes, so each weighs alike; the leader is kept only
    when ``margin`` faster.
    """
    if busy or not candidates:
        return MainKernel(dtype, 0, None, 0, {}, "busy" if busy else "measured", margin, trans, PLACE_SHAPES)
    shapes = [SuiteShape("probe", dtype, trans, m, n, k, threads=1) for m, n, k in PLACE_SHAPES]
    param = f"place_kernel_{trans}"
    # Read in place whatever the packing crossovers measured later will say.
    inplace = params.with_values(dtype, {"pack_flops": BY_NAME["pack_flops"].high,
                                         "pack_flops_tn": BY_NAME["pack_flops_tn"].high})
    settings = {"figures": inplace.with_values(dtype, {param: 0}),
                **{name: inplace.with_values(dtype, {param: value}) for name, value in candidates}}
    seconds = _race(settings, lambda: sum(runner.time_shape(s) / s.flops for s in shapes), runner, params,
                    rounds)
    best, value = _winner(seconds, candidates, margin)
    return MainKernel(dtype, value, best, 0, {name: float(f"{s:.4g}") for name, s in seconds.items()},
                      "measured", margin, trans, PLACE_SHAPES)
