"""The install measures the planner's crossovers: the stored thresholds follow the host, not its report.

A fake machine (its packing and threading pay from known sizes) stands in for the
library, so each test knows the right answer; hosts whose OS reports a 480 MB L3,
no L3, or a 256 KiB L2 give the model very different thresholds, and the measured
ones must not move with them.
"""

from __future__ import annotations

import math
import time

import pytest

from autotune import crossovers as cx
from autotune import tune as tn
from autotune.host import CacheLevel, HostInfo, cache_doubts
from autotune.models import analytic_params
from autotune.params import PlannerParams
from autotune.suite import SuiteShape, held_out_suite
from autotune.trials import crossover_lines, held_out_line


class FakeMachine:
    """Packing pays from ``pack_side``^3 (tn products from ``tn_side``^3), two threads from
    ``thread_side``^3, short K slices of a few columns of C from an A of ``stream_bytes``;
    ``noise`` jitters."""

    def __init__(self, pack_side: float = 400.0, thread_side: float = 60.0, noise: float = 0.0,
                 seed: int = 0, tn_side: float = 110.0, stream_bytes: float = 12 * 2**20) -> None:
        import random

        self.pack_side, self.thread_side, self.noise, self.tn_side = pack_side, thread_side, noise, tn_side
        self.stream_bytes = stream_bytes
        self.params: PlannerParams | None = None
        self.rng = random.Random(seed)
        self.timed: list[SuiteShape] = []

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None
        self.timed.append(shape)
        flops = shape.flops
        side = (flops / 2) ** (1 / 3)
        threshold, crossover = self.params.get(shape.dtype, "pack_flops"), self.pack_side
        if shape.trans == "tn":  # plan.c: the earlier of the two
            threshold = min(threshold, self.params.get(shape.dtype, "pack_flops_tn"))
            crossover = self.tn_side
        packed = flops >= threshold
        # In place is 30% faster below the crossover and falls behind above it.
        speed = 1.0 if packed else (1.3 if side < crossover else 0.6)
        if not packed and shape.n <= 8 and shape.trans == "nn":
            # plan.c, slice_place_walks: the slices suit A only on the right side of the machine's line.
            a_bytes = shape.m * shape.k * (4 if shape.dtype == "f32" else 8)
            short = a_bytes >= self.params.get(shape.dtype, "place_stream_bytes")
            speed *= 1.0 if short == (a_bytes >= self.stream_bytes) else 0.6
        seconds = flops / (50e9 * speed)
        threaded = shape.threads != 1 and flops >= self.params.thread_flops
        if threaded:
            # Two threads halve the work and pay a wake-up worth half of thread_side^3's time.
            seconds = seconds / 2 + 2.0 * self.thread_side ** 3 / (50e9 * 1.3) / 2
        return seconds * (1 + self.noise * self.rng.random())

    def close(self) -> None:
        pass


def _host(l2: int, l3: int | None, l3_shared: int = 2) -> HostInfo:
    caches = [CacheLevel(1, "data", 48 << 10, 64, 12, 64), CacheLevel(2, "unified", l2, 64, 16, l2 // 1024)]
    if l3 is not None:
        caches.append(CacheLevel(3, "unified", l3, 64, 16, l3 // 1024, l3_shared))
    return HostInfo(arch="x86_64", os="linux", cpu="injected", features=("avx2", "fma"),
                    caches=tuple(caches), cores=2)


HOSTS = {
    "480 MB L3": _host(2 << 20, 480 << 20),
    "no L3": _host(1 << 20, None),
    "256 KiB L2": _host(256 << 10, 8 << 20),
}


def _side(flops: float) -> float:
    return (flops / 2) ** (1 / 3)


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_stored_thresholds_follow_the_measurement_not_the_report(name: str) -> None:
    model = PlannerParams.from_mapping(analytic_params(HOSTS[name]))
    machine = FakeMachine(pack_side=400, thread_side=60)
    params, found = cx.measure_crossovers(machine, model, cx.specs_for(("f32", "f64"), threads=2))
    for dtype in ("f32", "f64"):
        side = _side(params.get(dtype, "pack_flops"))
        # Between the last ladder size below 400 and the first above it.
        assert 360 <= side <= 512, (name, dtype, side)
    assert 48 <= _side(params.thread_flops) <= 64
    for dtype in ("f32", "f64"):
        # Between the ladder's A of 8 MiB and of 16 MiB, where the machine's 12 MiB lies.
        assert 8 * 2**20 < params.get(dtype, "place_stream_bytes") < 16 * 2**20, (name, dtype)
    assert {c.source for c in found} == {"measured"}
    assert [c.param for c in found] == ["pack_flops", "pack_flops", "place_stream_bytes", "place_stream_bytes",
                                        "thread_flops"]
    # The record keeps the model's value beside the measured one.
    pack = next(c for c in found if c.param == "pack_flops")
    assert pack.model_flops == model.get("f32", "pack_flops")


def test_tn_products_get_a_crossover_of_their_own_where_there_are_tn_kernels() -> None:
    model = PlannerParams.from_mapping(analytic_params(HOSTS["480 MB L3"]))
    machine = FakeMachine(pack_side=400, thread_side=60, tn_side=110)
    specs = cx.specs_for(("f32", "f64"), threads=2, tn_dtypes=("f32",))
    assert [(s.param, s.dtype) for s in specs] == [("pack_flops", "f32"), ("pack_flops", "f64"),
                                                   ("pack_flops_tn", "f32"), ("place_stream_bytes", "f32"),
                                                   ("place_stream_bytes", "f64"), ("thread_flops", "f32")]
    params, found = cx.measure_crossovers(machine, model, specs)
    assert 96 <= _side(params.get("f32", "pack_flops_tn")) <= 128
    assert 360 <= _side(params.get("f32", "pack_flops")) <= 512  # nn's own, untouched by tn's
    assert params.get("f64", "pack_flops_tn") == model.get("f64", "pack_flops_tn")  # no tn kernels: not timed
    tn = next(c for c in found if c.param == "pack_flops_tn")
    assert {p.threads for p in tn.points} == {0, 1} and tn.source == "measured"
    timed_tn = {s.m for s in machine.timed if s.trans == "tn"}
    assert timed_tn and timed_tn <= set(cx.PACK_TN_SIDES)
    # The held-out probe between the model's threshold and the measured one is a tn square.
    probes = cx.probe_shapes([tn])
    assert probes and {s.trans for s in probes} == {"tn"} and {s.threads for s in probes} == {0, 1}
    (base, _), (alt, shape) = cx.pack_sweep("f32", 2, "tn").force(PlannerParams(), 256)
    assert shape.trans == "tn"
    assert base.get("f32", "pack_flops") > 1e100 and base.get("f32", "pack_flops_tn") > 1e100
    assert alt.get("f32", "pack_flops_tn") == 0
    line = next(text for text in crossover_lines([c.to_dict() for c in found]) if text.startswith("pack_flops_tn"))
    assert line.startswith("pack_flops_tn f32: tn products (A transposed) packed from ")


def test_the_480_mb_report_is_doubted_and_the_model_would_have_been_far_off() -> None:
    host = HOSTS["480 MB L3"]
    assert any("L3" in d and "per CPU" in d for d in cache_doubts(host))
    assert not cache_doubts(HOSTS["no L3"]) and not cache_doubts(HOSTS["256 KiB L2"])
    model = analytic_params(host)
    assert _side(model["pack_flops"]["f32"]) > 1500  # what sent 1024^3 down the in-place path


def test_an_l3_smaller_than_the_l2_is_doubted() -> None:
    assert any("smaller than" in d for d in cache_doubts(_host(4 << 20, 2 << 20)))


def test_a_sweep_stops_once_the_alternative_won_twice_in_a_row() -> None:
    machine = FakeMachine(pack_side=200)
    points = cx.sweep(machine, cx.pack_sweep("f32", threads=1), PlannerParams())
    assert [p.side for p in points] == [128, 180, 256, 360]
    assert [p.verdict() for p in points] == ["base", "base", "alt", "alt"]


def test_the_pack_sweep_times_every_size_on_one_thread_and_on_all() -> None:
    machine = FakeMachine(pack_side=200)
    points = cx.sweep(machine, cx.pack_sweep("f32", threads=2), PlannerParams())
    assert [(p.side, p.threads) for p in points] == [(s, t) for s in (128, 180, 256, 360) for t in (0, 1)]
    assert {s.threads for s in machine.timed} == {0, 1}
    # The two thread counts disagree: the threshold loses least over both.
    disagree = [cx.Point(256, 1.0, 0.8, 0.01, 3, 1), cx.Point(256, 1.0, 1.05, 0.01, 3, 0),
                cx.Point(360, 1.0, 0.7, 0.01, 3, 1), cx.Point(360, 1.0, 0.9, 0.01, 3, 0)]
    flops, source = cx.crossing(disagree)
    assert source == "measured" and (flops / 2) ** (1 / 3) < 256  # 256^3 packs: 20 % won, 5 % lost


def test_in_place_winning_everywhere_puts_the_threshold_just_past_the_ladder() -> None:
    machine = FakeMachine(pack_side=1e9)
    params, (found,) = cx.measure_crossovers(machine, PlannerParams(), [cx.pack_sweep("f32")])
    assert found.source == "beyond"
    top = cx.PACK_SIDES["f32"][-1]
    assert top < _side(params.get("f32", "pack_flops")) < top * 1.5


def test_packing_winning_from_the_smallest_size_puts_it_below_the_ladder() -> None:
    machine = FakeMachine(pack_side=10)
    params, (found,) = cx.measure_crossovers(machine, PlannerParams(), [cx.pack_sweep("f64")])
    assert found.source == "measured"
    assert _side(params.get("f64", "pack_flops")) < cx.PACK_SIDES["f64"][0]


def test_ties_keep_the_model_value() -> None:
    points = [cx.Point(s, 1.0, 1.0 + 0.001 * (i % 2), 0.0, 3) for i, s in enumerate((64, 96, 128))]
    assert cx.crossing(points) == (None, "model")
    params, (found,) = cx.measure_crossovers(_Flat(), PlannerParams(), [cx.thread_sweep()])
    assert found.source == "model"
    assert params.thread_flops == PlannerParams().thread_flops


class _Flat(FakeMachine):
    def time_shape(self, shape: SuiteShape) -> float:
        return 1e-3


def test_a_noisy_size_is_measured_again_and_its_spread_widens_the_margin() -> None:
    calls = []

    class Noisy(FakeMachine):
        def time_shape(self, shape: SuiteShape) -> float:
            calls.append(shape)
            # The two sides differ by 5%, and every other round is 30% slow.
            slow = 1.3 if len(calls) % 4 in (0, 1) else 1.0
            return (1.0 if shape.threads == 1 else 0.95) * slow

    point = cx.measure_point(Noisy(), 64, (PlannerParams(), SuiteShape("small", "f32", "nn", 64, 64, 64, threads=1)),
                             (PlannerParams(), SuiteShape("small", "f32", "nn", 64, 64, 64)))
    assert point.rounds > cx.FULL.rounds  # the spread hid the 5%: more rounds were taken
    assert point.spread > cx.MARGIN and point.verdict() == "tie"


def test_the_pack_sweep_runs_on_all_threads_and_forces_each_side() -> None:
    machine = FakeMachine()
    (base, base_shape), (alt, alt_shape) = cx.pack_sweep("f64").force(PlannerParams(), 256)
    assert base_shape.threads == alt_shape.threads == 0  # the library's default
    assert base.thread_flops == alt.thread_flops == 0
    assert base.get("f64", "pack_flops") > 1e100 and alt.get("f64", "pack_flops") == 0
    assert base.get("f32", "pack_flops") == PlannerParams().get("f32", "pack_flops")  # the other dtype untouched
    (_, one), (threaded, all_) = cx.thread_sweep().force(PlannerParams(), 64)
    assert one.threads == 1 and all_.threads == 0 and threaded.thread_flops == 0
    del machine


def test_a_one_core_host_measures_no_thread_crossover() -> None:
    specs = cx.specs_for(("f64",), threads=1)
    assert [s.param for s in specs] == ["pack_flops", "place_stream_bytes"]
    assert all(s.threads == (0,) for s in specs)


def test_the_record_round_trips_and_reads_as_a_line() -> None:
    machine = FakeMachine(pack_side=400)
    _, found = cx.measure_crossovers(machine, PlannerParams(), cx.specs_for(("f32",), threads=2))
    again = tuple(cx.Crossover.from_dict(c.to_dict()) for c in found)
    assert again == found
    lines = crossover_lines([c.to_dict() for c in found])
    assert len(lines) == 3 and lines[0].startswith("pack_flops f32: packed from ")
    assert "the model said" in lines[0]
    # The streaming threshold reads in products and bytes of A, not in flops.
    assert lines[1].startswith("place_stream_bytes f32: a few columns of C read in place, short K slices from ")
    assert " x 4 x " in lines[1] and "MiB)" in lines[1]


def test_the_streaming_threshold_is_stored_in_bytes_of_a_and_probed_on_a_few_columns() -> None:
    machine = FakeMachine(stream_bytes=12 * 2**20)
    model = PlannerParams().with_values("f64", {"place_stream_bytes": 300 * 2**20})  # a 400 MB L3's
    params, (found,) = cx.measure_crossovers(machine, model, [cx.stream_sweep("f64", threads=2)])
    assert found.shape == "stream" and found.source == "measured"
    assert params.get("f64", "place_stream_bytes") == found.value
    # side x 4 x side: A of side^2 doubles; the value is A's bytes at the threshold's side.
    assert found.value == pytest.approx(found.side ** 2 * 8, rel=1e-3)
    assert cx.param_value("stream", "f64", cx.sweep_flops("stream", "f64", 5e6)) == pytest.approx(5e6)
    assert found.model_flops == pytest.approx(cx.sweep_flops("stream", "f64", 300 * 2**20))
    # Each size was timed on one thread and on all, with A in place and the slices forced each way.
    timed = {(s.m, s.n, s.k, s.threads) for s in machine.timed}
    assert {(m, n) for m, n, _, _ in timed} <= {(m, cx.STREAM_N) for m in cx.STREAM_SIDES["f64"]}
    assert {t for *_, t in timed} == {0, 1}
    (base, shape), (alt, _) = cx.stream_sweep("f64").force(PlannerParams(), 1024)
    assert (shape.m, shape.n, shape.k) == (1024, cx.STREAM_N, 1024)
    assert base.get("f64", "pack_flops") > 1e100 and base.get("f64", "place_stream_bytes") > 1e100
    assert alt.get("f64", "place_stream_bytes") == 0
    # The held-out check times the few-column products between the model's line and the measured one.
    probes = cx.probe_shapes([found])
    assert probes and {s.n for s in probes} == {cx.STREAM_N, cx.STREAM_WIDEST["f64"]} and all(s.m == s.k for s in probes)
    assert all(found.side < s.m < found.model_side for s in probes) and {s.threads for s in probes} == {0, 1}


# -- the held-out check ---------------------------------------------------------------

class _Costs:
    """Each parameter set's time on every shape, by its thread_flops (a label)."""

    def __init__(self, by_label: dict[float, float]) -> None:
        self.by_label = by_label
        self.params: PlannerParams | None = None

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None
        return self.by_label[self.params.thread_flops] * shape.flops * 1e-12

    def close(self) -> None:
        pass


def _sets() -> dict[str, PlannerParams]:
    return {name: PlannerParams(thread_flops=value) for name, value in
            (("tuned", 1.0), ("measured", 2.0), ("model", 3.0))}


def test_judge_keeps_the_tuned_set_only_when_it_wins_the_held_out_shapes() -> None:
    shapes = held_out_suite(("f32",))
    won = tn.judge(_Costs({1.0: 1.0, 2.0: 1.1, 3.0: 2.0}), _sets(), shapes)
    assert won.chosen == "tuned" and won.gain("model") == pytest.approx(2.0)
    lost = tn.judge(_Costs({1.0: 1.2, 2.0: 1.1, 3.0: 2.0}), _sets(), shapes)
    assert lost.chosen == "measured"
    # Measured crossovers that lose to the model's guess are not stored either.
    worse = tn.judge(_Costs({1.0: 1.3, 2.0: 1.2, 3.0: 1.0}), _sets(), shapes)
    assert worse.chosen == "model" and worse.gain("model") == pytest.approx(1.0)


def test_judge_counts_every_shape_once_not_the_largest_many_times() -> None:
    class LargestNoisy(_Costs):
        def time_shape(self, shape: SuiteShape) -> float:
            assert self.params is not None
            measured = self.params.thread_flops == 2.0
            # The measured set is 20 % faster on every shape but the largest, where
            # it drew a 15 % slower window: that one call outweighs all the others.
            largest = shape.flops >= 2.0 * 1024**3
            factor = (1.15 if largest else 0.8) if measured else 1.0
            return factor * shape.flops * 1e-12

    shapes = held_out_suite(("f64",))
    sets = {"measured": PlannerParams(thread_flops=2.0), "model": PlannerParams(thread_flops=3.0)}
    verdict = tn.judge(LargestNoisy({}), sets, shapes)
    assert verdict.times["measured"] > verdict.times["model"]  # the workload's total says model...
    assert verdict.chosen == "measured" and verdict.gain("model") > 1.15  # ...every shape but one says measured
    # The record keeps each shape's times, so a person can see which shapes decided.
    record = verdict.to_dict()["per_shape_s"]
    assert len(record) == len(shapes) and set(record[shapes[0].label]) == {"measured", "model"}


def test_judge_drops_a_set_that_ran_one_shape_far_slower_whatever_its_mean() -> None:
    class OneShapeFarSlower(_Costs):
        def time_shape(self, shape: SuiteShape) -> float:
            assert self.params is not None
            # Tuned: 20 % faster on every shape but the largest, 1.34x slower there.
            largest = shape.flops >= 2.0 * 1024**3
            factor = {1.0: 1.34 if largest else 0.8, 2.0: 1.0, 3.0: 1.0}[self.params.thread_flops]
            return factor * shape.flops * 1e-12

    shapes = held_out_suite(("f32",))
    verdict = tn.judge(OneShapeFarSlower({}), _sets(), shapes)
    assert verdict.speedup("tuned", "measured") > 1.15  # the mean alone would keep it
    assert verdict.chosen == "measured"


def test_judge_times_identical_sets_once() -> None:
    same = PlannerParams()
    costs = _Costs({same.thread_flops: 1.0})
    verdict = tn.judge(costs, {"tuned": same, "measured": same, "model": same}, held_out_suite(("f64",)))
    assert verdict.chosen == "tuned" and list(verdict.times) == ["tuned"]


def test_judge_counts_sets_that_plan_a_shape_alike_as_equally_fast_there() -> None:
    class SamePlansNoisyTimes(_Costs):
        """The measured set differs from the model's on the two largest shapes, where it is
        10 % faster; everywhere else both plan alike, and noise makes the model's look 20 %
        faster on most of them."""

        def largest(self, shape: SuiteShape) -> bool:
            return shape.flops >= 2.0 * 768 * 512 * 384

        def plan_signature(self, shape: SuiteShape) -> bytes:
            assert self.params is not None
            differs = self.largest(shape) and self.params.thread_flops == 2.0
            return b"measured" if differs else b"one plan"

        def time_shape(self, shape: SuiteShape) -> float:
            assert self.params is not None
            measured = self.params.thread_flops == 2.0
            factor = (0.9 if self.largest(shape) else 1.2) if measured else 1.0
            return factor * shape.flops * 1e-12

    sets = {"measured": PlannerParams(thread_flops=2.0), "model": PlannerParams(thread_flops=3.0)}
    shapes = held_out_suite(("f64",))
    verdict = tn.judge(SamePlansNoisyTimes({}), sets, shapes)
    assert verdict.chosen == "measured"
    for shape, (measured, model) in zip(shapes, zip(verdict.per_shape["measured"], verdict.per_shape["model"])):
        assert (measured < model) if SamePlansNoisyTimes({}).largest(shape) else measured == model
    # Without the signatures the noise decides.
    class NoisyTimes(_Costs):
        largest = SamePlansNoisyTimes.largest
        time_shape = SamePlansNoisyTimes.time_shape

    assert tn.judge(NoisyTimes({}), sets, shapes).chosen == "model"


def test_judge_times_each_plan_once_per_round_and_a_shape_all_plan_alike_once() -> None:
    class Counting(_Costs):
        def __init__(self) -> None:
            super().__init__({1.0: 1.0, 2.0: 1.0, 3.0: 1.0})
            self.calls: list[tuple[str, float]] = []

        def plan_signature(self, shape: SuiteShape) -> bytes:
            # Only the tuned set plans the largest shapes its own way.
            own = shape.flops >= 2.0 * 768 * 512 * 384 and self.params.thread_flops == 1.0
            return b"tuned" if own else b"one plan"

        def time_shape(self, shape: SuiteShape) -> float:
            self.calls.append((shape.label, self.params.thread_flops))
            return super().time_shape(shape)

    runner, shapes = Counting(), held_out_suite(("f32",))
    tn.judge(runner, _sets(), shapes, rounds=3)
    differ = [s.label for s in shapes if s.flops >= 2.0 * 768 * 512 * 384]
    assert len(differ) == 2
    for shape in shapes:
        timed = [flops for label, flops in runner.calls if label == shape.label]
        assert timed == ([1.0, 2.0] * 3 if shape.label in differ else [1.0])


def test_a_right_crossover_is_kept_though_another_measured_with_it_is_wrong() -> None:
    from autotune.install import each_crossover_alone

    model = PlannerParams(pack_flops=(2.0 * 591**3, 2.0 * 418**3), thread_flops=2.0 * 82**3)
    found = [cx.Crossover("pack_flops", "f32", "in place", "packed", 2.0 * 591**3, 2.0 * 215**3, "measured"),
             cx.Crossover("pack_flops", "f64", "in place", "packed", 2.0 * 418**3, 2.0 * 418**3, "model"),
             cx.Crossover("thread_flops", "f32", "one thread", "all", 2.0 * 82**3, 2.0 * 152**3, "measured")]
    alone = each_crossover_alone(model, found)
    assert list(alone) == ["measured pack_flops f32", "measured thread_flops"]
    assert alone["measured pack_flops f32"] == model.with_values("f32", {"pack_flops": 2.0 * 215**3})
    assert alone["measured thread_flops"].thread_flops == 2.0 * 152**3
    measured = model.with_values("f32", {"pack_flops": 2.0 * 215**3, "thread_flops": 2.0 * 152**3})

    class Host(_Costs):
        """Packing pays from 215^3 up; a second thread pays from 82^3 (the sweep said 152^3)."""

        def time_shape(self, shape: SuiteShape) -> float:
            p = self.params
            side = (shape.flops / 2) ** (1 / 3)
            packed = shape.flops >= p.get(shape.dtype, "pack_flops")
            threaded = shape.threads != 1 and shape.flops >= p.thread_flops
            t = shape.flops * 1e-12 * (0.7 if packed and side >= 215 else 1.0)
            return t * (0.6 if threaded and side >= 82 else 1.0)

    sets = {"measured": measured, **alone, "model": model}
    verdict = tn.judge(Host({}), sets, held_out_suite(("f32",)))
    assert verdict.chosen == "measured pack_flops f32"
    line = held_out_line({"held_out": {**verdict.to_dict(), "gain_over_model": verdict.gain("model")}})
    assert "model's parameters with the measured pack_flops f32 crossover kept" in line
    # One crossover measured: nothing to take apart.
    assert each_crossover_alone(model, found[:2]) == {}


def test_probe_shapes_lie_between_the_measured_and_the_model_thresholds() -> None:
    found = [cx.Crossover("pack_flops", "f64", "in place", "packed", 2.0 * 418**3, 2.0 * 215**3, "measured"),
             cx.Crossover("pack_flops", "f32", "in place", "packed", 2.0 * 591**3, 2.0 * 591**3, "model"),
             cx.Crossover("pack_flops", "f32", "in place", "packed", 2.0 * 400**3, 2.0 * 420**3, "measured"),
             cx.Crossover("thread_flops", "f32", "one thread", "all", 2.0 * 82**3, 2.0 * 152**3, "beyond")]
    probes = cx.probe_shapes(found)
    # f64 packing on one thread and on all, at the geometric mean of 215 and 418; threads
    # on all; nothing where the model's value stayed or the two are within 10 %.
    assert [(s.dtype, s.m, s.threads) for s in probes] == [("f64", 300, 1), ("f64", 300, 0), ("f32", 112, 0)]
    assert all(s.m == s.n == s.k and s.kind == "probe" for s in probes)
    assert cx.probe_shapes(found, max_flops=2.0 * 200**3) == (probes[2],)


class PackingHost(_Costs):
    """Packing pays from ``pack_side[dtype]``^3 up and costs below it; a second thread
    pays from 82^3 up."""

    def __init__(self, pack_side: dict[str, float]) -> None:
        super().__init__({})
        self.pack_side = pack_side

    def time_shape(self, shape: SuiteShape) -> float:
        p = self.params
        side = (shape.flops / 2) ** (1 / 3)
        t = shape.flops * 1e-12
        if shape.flops >= p.get(shape.dtype, "pack_flops"):
            t *= 0.7 if side >= self.pack_side[shape.dtype] else 1.3
        if shape.threads != 1 and shape.flops >= p.thread_flops:
            t *= 0.6 if side >= 82 else 1.4
        return t


def _three_crossovers() -> tuple[PlannerParams, list[cx.Crossover]]:
    model = PlannerParams(pack_flops=(2.0 * 591**3, 2.0 * 418**3), thread_flops=2.0 * 82**3)
    return model, [
        cx.Crossover("pack_flops", "f32", "in place", "packed", 2.0 * 591**3, 2.0 * 215**3, "measured"),
        cx.Crossover("pack_flops", "f64", "in place", "packed", 2.0 * 418**3, 2.0 * 215**3, "measured"),
        cx.Crossover("thread_flops", "f32", "one thread", "all", 2.0 * 82**3, 2.0 * 152**3, "measured")]


def _held_out(host: _Costs, model: PlannerParams, found: list[cx.Crossover],
              probes: bool = True) -> tuple[PlannerParams, dict]:
    from autotune.install import each_crossover_alone, held_out_check

    measured = model
    for c in found:
        measured = measured.with_values(c.dtype, {c.param: c.value})
    shapes = held_out_suite() + (cx.probe_shapes(found) if probes else ())
    return held_out_check(host, {"measured": measured, **each_crossover_alone(model, found), "model": model},
                          found, shapes, rounds=1)


def test_every_crossover_that_holds_alone_is_kept_together() -> None:
    # Both packing thresholds measured right, the thread threshold wrong: the check
    # picks one set, and each set alone carries one crossover.
    model, found = _three_crossovers()
    kept, record = _held_out(PackingHost({"f32": 215, "f64": 215}), model, found)
    both = model.with_values("f32", {"pack_flops": 2.0 * 215**3}).with_values("f64", {"pack_flops": 2.0 * 215**3})
    assert kept == both
    assert record["chosen"] == "measured crossovers that held" and record["gain_over_model"] > 1.0
    assert record["held"] == ["measured pack_flops f32", "measured pack_flops f64"]
    assert record["alone"]["chosen"] in ("measured pack_flops f32", "measured pack_flops f64")
    line = held_out_line({"held_out": record})
    assert "with the measured pack_flops f32, pack_flops f64 crossovers kept" in line


def test_a_crossover_no_held_out_shape_tests_is_judged_on_its_probe() -> None:
    # f64 packing really pays from the model's 418^3: the measured 215^3 is wrong, and only
    # the probe at 300^3 (no held-out f64 shape lies between) shows it.
    model, found = _three_crossovers()
    host = PackingHost({"f32": 215, "f64": 418})
    kept, record = _held_out(host, model, found)
    assert kept == model.with_values("f32", {"pack_flops": 2.0 * 215**3})
    assert record["chosen"] == "measured pack_flops f32" and "held" not in record
    # Without the probe nothing contradicts it, and it would have been kept.
    kept, _ = _held_out(host, model, found, probes=False)
    assert kept.get("f64", "pack_flops") == 2.0 * 215**3


@pytest.mark.parametrize("truth, kept", [(215, "tuned, measured crossovers"), (262, "tuned")])
def test_a_tuned_set_keeps_its_own_crossover_only_where_the_probes_ran_it_faster(truth, kept) -> None:
    # The search moved f64 packing from the measured 215^3 to 262^3; no held-out f64
    # shape lies between, so the probe at the geometric mean decides.
    from autotune.install import ANCHORED, each_crossover_alone, held_out_check, with_measured_crossovers

    model, found = _three_crossovers()
    found = found[:2]  # both packing thresholds, measured right at 215^3
    measured = with_measured_crossovers(model, found)
    tuned = measured.with_values("f64", {"pack_flops": 2.0 * 262**3, "blk_m": 40})
    anchored = with_measured_crossovers(tuned, found)
    assert anchored != tuned and anchored.get("f64", "blk_m") == 40
    assert anchored.get("f64", "pack_flops") == 2.0 * 215**3
    probes = cx.probe_shapes(found, against=(tuned,))
    assert {(s.dtype, s.m, s.threads) for s in probes} >= {("f64", 237, 1), ("f64", 237, 0)}
    host = PackingHost({"f32": 215, "f64": truth})
    candidates = {ANCHORED: anchored, "tuned": tuned, "measured": measured,
                  **each_crossover_alone(model, found), "model": model}
    chosen, record = held_out_check(host, candidates, found, held_out_suite() + probes, rounds=1)
    assert record["chosen"] == kept and chosen == candidates[kept]
    assert held_out_line({"held_out": record}).count("tuned parameters") == 1


def test_held_out_shapes_cover_every_regime_and_never_meet_the_suite() -> None:
    from autotune.suite import default_suite

    held = held_out_suite(("f32",))
    assert {s.kind for s in held} >= {"small", "irregular", "tall-skinny", "batched", "large"}
    assert {s.threads for s in held} == {0, 1}
    assert max(s.m * s.n * s.k for s in held) >= 1024 ** 3
    suite = {(s.trans, s.m, s.n, s.k, s.batch) for s in default_suite(("f32",))}
    assert not suite & {(s.trans, s.m, s.n, s.k, s.batch) for s in held}


def test_held_out_line_says_what_was_kept_and_why() -> None:
    record = {"held_out": {"chosen": "measured", "times_s": {}, "shapes": 30, "gain_over_model": 3.1},
              "held_out_rejected": True}
    line = held_out_line(record)
    assert line is not None and "measured crossovers kept" in line and "3.10x" in line
    assert "dropped" in line
    assert held_out_line({}) is None
    assert math.isfinite(3.1)


# -- a busy machine ------------------------------------------------------------------

def test_a_busy_machine_keeps_the_models_thresholds() -> None:
    machine = FakeMachine(thread_side=60)
    model = PlannerParams()
    params, found = cx.measure_crossovers(machine, model, cx.specs_for(("f32",), threads=2), busy=True)
    assert {c.param for c in found} == {"pack_flops", "place_stream_bytes", "thread_flops"}
    assert all(c.source == "busy" and not c.points for c in found)
    assert all(c.value == model.get("f32", c.param) for c in found)
    assert params == model and not machine.timed
    assert all("quiet machine" in line for line in crossover_lines([c.to_dict() for c in found]))


def _meter(loads: list[float]):
    """A load meter whose sweeps see ``loads`` in turn."""
    def start():
        return lambda: loads.pop(0)
    return start


def test_a_sweep_other_work_disturbed_is_run_again() -> None:
    machine = FakeMachine(pack_side=300.0)
    _, (found,) = cx.measure_crossovers(machine, PlannerParams(), [cx.pack_sweep("f32")],
                                        meter=_meter([1.4, 0.1]))
    assert found.source == "measured" and found.other_load == 0.1
    timed = len(machine.timed)
    _, (again,) = cx.measure_crossovers(FakeMachine(pack_side=300.0), PlannerParams(), [cx.pack_sweep("f32")])
    assert again.flops == found.flops and again.other_load is None
    # The first, disturbed, run was timed too: twice the calls of an undisturbed one.
    assert timed == 2 * len(_timed(300.0))


def _timed(pack_side: float) -> list[SuiteShape]:
    machine = FakeMachine(pack_side=pack_side)
    cx.measure_crossovers(machine, PlannerParams(), [cx.pack_sweep("f32")])
    return machine.timed


def test_a_sweep_disturbed_twice_keeps_the_model_value_and_says_why() -> None:
    model = PlannerParams(pack_flops=(2.0 * 591**3, 2.0 * 418**3))
    params, (found,) = cx.measure_crossovers(FakeMachine(pack_side=300.0), model, [cx.pack_sweep("f32")],
                                             meter=_meter([1.4, 0.9]))
    assert found.source == "busy" and found.flops == found.model_flops == 2.0 * 591**3
    assert params == model and found.other_load == 0.9 and found.points
    (line,) = crossover_lines([found.to_dict()])
    assert "timed twice while other work took 0.9 cores" in line and "the model's value" in line
    assert cx.Crossover.from_dict(found.to_dict()) == found


def test_the_load_meter_counts_the_machine_less_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import host

    # /proc/stat: 200 jiffies pass on 2 CPUs, half of them busy (one core's worth, steal
    # included); this process used half a core of its own over the second.
    readings = iter([(1000.0, 2000.0), (1100.0, 2200.0)])
    own = iter([10.0, 10.5])
    clock = iter([100.0, 101.0])
    monkeypatch.setattr(host, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr(host, "_own_cpu_s", lambda: next(own))
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    assert host.load_meter(cores=2)() == pytest.approx(0.5)


def test_wait_for_quiet_waits_until_the_load_falls_or_the_time_is_up() -> None:
    loads = iter([1.8, 1.2, 0.1, 2.0])
    said: list[str] = []
    assert cx.wait_for_quiet(10, load=lambda: next(loads), say=said.append) == 0.1
    assert len(said) == 1 and "1.8 cores" in said[0]
    always = iter([1.5] * 100)
    assert cx.wait_for_quiet(1.0, load=lambda: next(always)) == 1.5  # gave up after 1 s of samples
    assert cx.wait_for_quiet(0.0, load=lambda: None) is None


def test_other_load_reads_the_machine_now() -> None:
    from autotune.host import other_load

    load = other_load(0.05, cores=2)
    assert load is None or 0.0 <= load <= 2.0


def test_quiet_wait_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_QUIET_WAIT", "3.5")
    assert cx.quiet_wait_s() == 3.5
    monkeypatch.setenv("AUTOTUNE_QUIET_WAIT", "soon")
    assert cx.quiet_wait_s() == cx.QUIET_WAIT_S


def test_a_quick_sweep_stops_before_long_calls_and_takes_fewer_rounds() -> None:
    machine = FakeMachine(pack_side=1e9)
    points = cx.sweep(machine, cx.pack_sweep("f32", threads=1), PlannerParams(), effort=cx.QUICK)
    full = cx.sweep(FakeMachine(pack_side=1e9), cx.pack_sweep("f32", threads=1), PlannerParams())
    assert len(points) < len(full) and all(p.rounds == cx.QUICK.rounds for p in points)
    # The next size's call would have passed the quick limit.
    last = points[-1]
    assert last.base_s * (cx.PACK_SIDES["f32"][len(points)] / last.side) ** 3 > cx.QUICK.max_call_s


def test_a_tie_inside_the_closing_run_moves_the_threshold_by_a_step_not_past_the_ladder() -> None:
    ratios = (1.15, 1.10, 0.97, 0.80, 0.70)  # 0.97 is within the noise at 256
    points = [cx.Point(side, 1.0, r, 0.02, 3) for side, r in zip((128, 180, 256, 360, 512), ratios)]
    flops, source = cx.crossing(points)
    assert source == "measured" and round((flops / 2) ** (1 / 3)) == round(math.sqrt(180 * 256))


#: A two-thread pack sweep on a noisy 2-core VM (times packed / in place): the
#: power-of-two sizes pack faster, the others take turns.
NOISY = dict(zip((128, 180, 256, 360, 512, 720, 1024, 1440), (0.90, 1.18, 1.01, 1.11, 0.74, 1.25, 0.56, 0.69)))


def test_a_size_that_takes_turns_moves_the_threshold_only_as_far_as_the_time_it_saves() -> None:
    points = [cx.Point(side, 1.0, r, 0.02, 3) for side, r in NOISY.items()]
    flops, source = cx.crossing(points)
    # Past 720^3, where in place won, the threshold would lose 512^3's 26 %; below
    # 512^3 it loses 720^3's 20 % and 128^3's 10 %: the cheaper of the two.
    assert source == "measured" and round((flops / 2) ** (1 / 3)) == round(math.sqrt(360 * 512))
    # A rule of "the alternative won every size from here on" put it past 720^3.
    assert (flops / 2) ** (1 / 3) < 720


def test_the_model_stays_where_the_measurement_finds_it_as_good_as_any() -> None:
    points = [cx.Point(side, 1.0, r, 0.02, 3) for side, r in NOISY.items()]
    assert cx.crossing(points, prior=2.0 * 400**3) == (2.0 * 400**3, "measured")
    flops, _ = cx.crossing(points, prior=2.0 * 900**3)  # the model's 900^3 loses 512^3's gain
    assert round((flops / 2) ** (1 / 3)) == round(math.sqrt(360 * 512))
    # Only noise: the model's value, said as such.
    flat = [cx.Point(side, 1.0, 1.01, 0.02, 3) for side in NOISY]
    assert cx.crossing(flat, prior=2.0 * 900**3) == (None, "model")


def test_the_summary_says_why_a_tuned_set_was_dropped() -> None:
    from autotune.trials import summary_line

    record = {"objective_default_s": 0.1, "objective_tuned_s": 0.09, "kept": False, "held_out_rejected": True}
    assert "not on the held-out shapes" in summary_line(record)
    assert "not faster when re-measured" in summary_line({**record, "held_out_rejected": False})


# -- the edge code's speed -------------------------------------------------------------

class EdgeCode:
    """Blocks run on edge code at ``gflops`` once edge_frac is 1, after a call overhead
    that dwarfs the smaller blocks' work and differs on every call."""

    def __init__(self, gflops: float, overhead_s: float = 1e-6) -> None:
        import random

        self.gflops, self.overhead_s = gflops, overhead_s
        self.rng = random.Random(1)
        self.params: PlannerParams | None = None
        self.timed: list[SuiteShape] = []

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None and self.params.get(shape.dtype, "edge_frac") == 1.0
        self.timed.append(shape)
        return self.overhead_s * (1 + 0.02 * self.rng.random()) + shape.flops / (self.gflops * 1e9)


def test_the_edge_speed_is_its_codes_own_not_the_calls() -> None:
    params = PlannerParams()
    machine = EdgeCode(4.0)
    edge = cx.measure_edge(machine, params, "f32", peak_gflops=250.0)
    assert edge.gflops == pytest.approx(4.0, rel=0.05)
    assert edge.frac == pytest.approx(4.0 / 250.0, rel=0.05)
    assert set(edge.by_block) == {f"{mb}x{nb}" for mb, nb in cx.EDGE_BLOCKS}
    # One thread (the code is a core's), every block at both depths, and the
    # runner handed back on the caller's parameters.
    assert {s.threads for s in machine.timed} == {1} and {s.dtype for s in machine.timed} == {"f32"}
    assert {(s.m, s.n, s.k) for s in machine.timed} == \
        {(mb, nb, k) for mb, nb in cx.EDGE_BLOCKS for k in cx.EDGE_DEPTHS}
    assert machine.params == params
    assert cx.EdgeSpeed(**edge.to_dict()) == edge
    from autotune.trials import edge_lines

    (line,) = edge_lines({"f32": edge.to_dict()})
    assert line.startswith("edge code f32: 4.0 GFLOPS measured, 1.6% of the 250 GFLOPS peak")


def test_an_edge_speed_outside_the_parameters_range_is_clamped_and_noise_keeps_the_old_value() -> None:
    from autotune.params import BY_NAME

    params = PlannerParams()
    fast = cx.measure_edge(EdgeCode(400.0, overhead_s=0.0), params, "f64", peak_gflops=100.0)
    assert fast.frac == BY_NAME["edge_frac"].high and fast.gflops == pytest.approx(400.0, rel=0.01)

    class Backwards(EdgeCode):
        def time_shape(self, shape: SuiteShape) -> float:
            return 1e-3 / shape.k  # deeper ran faster: nothing to measure

    kept = cx.measure_edge(Backwards(1.0), params, "f64", peak_gflops=100.0)
    assert kept.gflops is None and kept.frac == params.get("f64", "edge_frac") and not kept.by_block


def test_with_edge_frac_one_every_edge_probe_runs_on_edge_code(built) -> None:
    """The measurement times edge code only if the planner gives these blocks no kernel."""
    import ctypes

    from autotune.runtime.loader import at_plan_info, at_step
    from autotune.suite import LibraryRunner

    runner = LibraryRunner(built.library)
    try:
        for dtype in ("f32", "f64"):
            runner.set_params(PlannerParams().with_values(dtype, {"edge_frac": 1.0}))
            for mb, nb in cx.EDGE_BLOCKS:
                for k in cx.EDGE_DEPTHS:
                    shape = SuiteShape("probe", dtype, "nn", mb, nb, k, threads=1)
                    plan = runner.lib.at_plan_create_ex(*runner._buffers_for(shape).plan_args)
                    assert plan
                    try:
                        info = at_plan_info()
                        runner.lib.at_plan_get_info(plan, ctypes.byref(info))
                        steps = (at_step * info.nsteps)()
                        runner.lib.at_plan_steps(plan, steps, info.nsteps)
                        assert info.nsteps >= 1 and all(s.kernel < 0 for s in steps), (dtype, mb, nb, k)
                    finally:
                        runner.lib.at_plan_destroy(plan)
        edge = cx.measure_edge(runner, PlannerParams(), "f64", peak_gflops=50.0, rounds=1)
        assert edge.gflops is not None and edge.gflops > 0.1
    finally:
        runner.close()


class MainKernels:
    """A packed product's time by the planner's pack_kernel: 0 (the figures' choice)
    runs at ``figures`` seconds, each candidate value at its own; a shared host
    slows every third call by half, which the rounds' best leaves out."""

    def __init__(self, figures: float, by_value: dict[int, float]) -> None:
        self.figures, self.by_value, self.params, self.calls = figures, by_value, None, 0

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None and self.params.get(shape.dtype, "pack_flops") == 0.0
        assert shape.threads == 1 and shape.m == shape.n == shape.k == cx.MAIN_SIDES[shape.dtype]
        self.calls += 1
        value = self.params.get(shape.dtype, "pack_kernel")
        return (self.figures if value == 0 else self.by_value[value]) * (1.5 if self.calls % 3 == 0 else 1.0)

    def close(self) -> None:
        pass


def test_the_packed_path_takes_the_kernel_that_ran_its_blocks_fastest() -> None:
    params = PlannerParams.from_mapping(analytic_params(None))
    candidates = [("nt_16x5", 7), ("nt_8x13", 3), ("nt_24x3", 9)]
    machine = MainKernels(10.0, {7: 8.2, 3: 11.0, 9: 9.9})
    main = cx.measure_main_kernel(machine, params, "f32", candidates)
    assert (main.value, main.name) == (7, "nt_16x5") and main.gain == pytest.approx(10.0 / 8.2)
    assert main.seconds == {"figures": 10.0, "nt_16x5": 8.2, "nt_8x13": 11.0, "nt_24x3": 9.9}
    # The runner is left on the parameters it was given.
    assert machine.params == params
    # Within the margin the figures' own choice stays; a busy host times nothing.
    close = cx.measure_main_kernel(MainKernels(10.0, {7: 9.8}), params, "f64", [("nt_8x6", 7)])
    assert (close.value, close.name) == (0, None)
    busy = cx.measure_main_kernel(MainKernels(10.0, {7: 1.0}), params, "f32", [("nt_16x5", 7)], busy=True)
    assert (busy.value, busy.source, busy.seconds) == (0, "busy", {})
    from autotune.trials import main_kernel_lines
    lines = main_kernel_lines({"f32": main.to_dict(), "f64": close.to_dict(), "x": busy.to_dict()})
    assert lines[0] == ("packed path f32: main kernel nt_16x5 (fastest of 3 candidates on a packed 640^3, "
                        "one thread, 1.22x the figures' choice)")
    assert "none of 1 candidates ran a packed 512^3 on one thread 3% faster" in lines[1]
    assert "not timed: other processes kept the cores busy" in lines[2]


class LuckyOnce(MainKernels):
    """One candidate whose first call alone ran fast (a quiet instant of a shared host)."""

    def __init__(self, figures: float, by_value: dict[int, float], lucky: int, lucky_seconds: float) -> None:
        super().__init__(figures, by_value)
        self.lucky, self.lucky_seconds, self.lucky_used = lucky, lucky_seconds, False

    def time_shape(self, shape: SuiteShape) -> float:
        seconds = super().time_shape(shape)
        if self.params.get(shape.dtype, "pack_kernel") == self.lucky and not self.lucky_used:
            self.lucky_used = True
            return self.lucky_seconds
        return seconds


def test_a_candidate_that_led_by_one_lucky_sample_does_not_replace_the_figures_choice() -> None:
    """With a dozen candidates one of them leads by chance now and then: the leader races
    the figures' choice again, and a lead that does not come back changes nothing."""
    params = PlannerParams.from_mapping(analytic_params(None))
    candidates = [(f"nn_{i}", i) for i in range(1, 13)]
    machine = LuckyOnce(10.0, {i: 10.5 for i in range(1, 13)}, lucky=5, lucky_seconds=6.0)
    main = cx.measure_main_kernel(machine, params, "f64", candidates)
    assert (main.value, main.name) == (0, None)
    assert main.seconds["nn_5"] == 10.5 and main.seconds["figures"] == 10.0
    # A lead that holds in the second race is taken.
    steady = cx.measure_main_kernel(MainKernels(10.0, {i: 10.5 if i != 5 else 8.5 for i in range(1, 13)}),
                                    params, "f64", candidates)
    assert (steady.value, steady.name) == (5, "nn_5")


class PlaceKernels:
    """Products read in place: each shape's time at the planner's place_kernel_<trans>
    value, the figures' choice (0) at 1 ns a flop, each candidate at its own factor of
    that on the aliasing square alone (what set the kernels one vector tall back)."""

    def __init__(self, trans: str, factor: dict[int, float]) -> None:
        self.trans, self.factor, self.params, self.timed = trans, factor, None, []

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None and shape.threads == 1 and shape.trans == self.trans
        # Read in place whatever the packing crossovers say.
        assert 2 * shape.m * shape.n * shape.k < self.params.get(shape.dtype, "pack_flops")
        assert 2 * shape.m * shape.n * shape.k < self.params.get(shape.dtype, "pack_flops_tn")
        self.timed.append(shape)
        value = self.params.get(shape.dtype, f"place_kernel_{self.trans}")
        aliasing = (shape.m, shape.n, shape.k) == cx.PLACE_SHAPES[0]
        return shape.flops * 1e-9 * (self.factor.get(value, 1.0) if value and aliasing else 1.0)

    def close(self) -> None:
        pass


def test_products_read_in_place_take_the_kernel_that_ran_them_fastest() -> None:
    """Per dtype and transposition, the candidates race the figures' plans on
    PLACE_SHAPES, scored by seconds per flop summed (each shape weighs alike); the
    fastest is kept only beyond the margin, and the show line names what ran."""
    params = PlannerParams.from_mapping(analytic_params(None))
    machine = PlaceKernels("nt", {4: 0.5, 6: 0.8})
    place = cx.measure_place_kernel(machine, params, "f64", "nt", [("nt_32x6", 4), ("nt_16x8", 6)])
    assert (place.value, place.name, place.param) == (4, "nt_32x6", "place_kernel_nt")
    # Three shapes at 1 s per 1e9 flops against the first at half of it: 3 / 2.5.
    assert place.gain == pytest.approx(3.0 / 2.5)
    assert {(s.m, s.n, s.k) for s in machine.timed} == set(cx.PLACE_SHAPES)
    assert {s.dtype for s in machine.timed} == {"f64"} and machine.params == params
    # A third faster on one shape of three is 11 %: kept at a 3 % margin, not at 15 %.
    assert cx.measure_place_kernel(PlaceKernels("nn", {2: 2 / 3}), params, "f32", "nn",
                                   [("nn_64x5", 2)]).value == 2
    kept = cx.measure_place_kernel(PlaceKernels("nn", {2: 2 / 3}), params, "f32", "nn", [("nn_64x5", 2)],
                                   margin=0.15)
    assert (kept.value, kept.name) == (0, None)
    busy = cx.measure_place_kernel(PlaceKernels("tt", {2: 0.1}), params, "f32", "tt", [("tt_8x8", 2)], busy=True)
    assert (busy.value, busy.source, busy.seconds) == (0, "busy", {})
    from autotune.trials import main_kernel_lines
    lines = main_kernel_lines({}, {"f64 nt": place.to_dict(), "f32 nn": kept.to_dict(), "f32 tt": busy.to_dict()})
    assert lines[0] == ("in place f32 nn: main kernel by the kernels' figures, none of 1 candidates ran "
                        "128x128x128, 96x96x96, 96x16x1024 in place on one thread 15% faster")
    assert lines[1].startswith("in place f32 tt: main kernel by the kernels' figures (not timed: other")
    assert lines[2] == ("in place f64 nt: main kernel nt_32x6 (fastest of 2 candidates on 128x128x128, "
                        "96x96x96, 96x16x1024 read in place, one thread, 1.20x the figures' choice)")



class PooledMachine:
    """A call costs the timer's ``call_s``, its work at 100 GFLOPS shared evenly by
    its threads, and ``region_s`` when it runs on more than one."""

    def __init__(self, region_s: float, call_s: float = 0.7e-6, cores: int = 2) -> None:
        self.region_s, self.call_s, self.cores = region_s, call_s, cores
        self.params: PlannerParams | None = None
        self.timed: list[tuple[SuiteShape, PlannerParams]] = []

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None
        self.timed.append((shape, self.params))
        threads = self.cores if shape.threads == 0 else shape.threads
        work = shape.flops / 100e9
        return self.call_s + (work / threads + self.region_s if threads > 1 else work)


@pytest.mark.parametrize("region_s", [0.0, 0.9e-6, 20e-6])
def test_the_thread_cost_is_the_regions_own_not_the_timers(region_s: float) -> None:
    params = PlannerParams()
    machine = PooledMachine(region_s)
    cost = cx.measure_thread_cost(machine, params, threads=2)
    assert cost.seconds == pytest.approx(region_s, abs=1e-9)
    assert cost.value == pytest.approx(region_s, abs=1e-9) and cost.call_s == pytest.approx(0.7e-6)
    assert set(cost.by_side) == {f"{s}^3" for s in cx.THREAD_COST_SIDES}
    # Timed with every split forced (no threshold, no cost), handed back on the caller's.
    assert all(p.thread_flops == 0.0 and p.thread_seconds == 0.0 for _, p in machine.timed)
    assert {s.threads for s, _ in machine.timed} == {1, 2} and machine.params == params
    assert cx.ThreadCost(**cost.to_dict()) == cost
    from autotune.trials import thread_cost_lines

    (line,) = thread_cost_lines(cost.to_dict())
    assert line.startswith(f"thread cost: {region_s * 1e6:.2f} us a call on 2 threads")


def test_one_thread_or_a_busy_machine_keeps_the_default_thread_cost() -> None:
    params = PlannerParams()
    for cost in (cx.measure_thread_cost(PooledMachine(5e-6), params, threads=1),
                 cx.measure_thread_cost(PooledMachine(5e-6), params, threads=2, busy=True)):
        assert cost.seconds is None and cost.value == params.thread_seconds
    from autotune.trials import thread_cost_lines

    assert "not timed: other processes kept the cores busy" in thread_cost_lines(cost.to_dict())[0]


class UnevenMachine(PooledMachine):
    """Its splits give the busiest thread 70 % of the work, as the planner predicts."""

    def time_shape(self, shape: SuiteShape) -> float:
        assert self.params is not None
        threads = self.cores if shape.threads == 0 else shape.threads
        work = shape.flops / 100e9
        return self.call_s + (0.7 * work + self.region_s if threads > 1 else work)

    def predicted_seconds(self, shape: SuiteShape) -> float:
        work = shape.flops / 100e9
        return 0.7 * work if (self.cores if shape.threads == 0 else shape.threads) > 1 else work


def test_an_uneven_split_is_the_planners_to_weigh_not_the_regions_cost() -> None:
    cost = cx.measure_thread_cost(UnevenMachine(1e-6), PlannerParams(), threads=2)
    assert cost.seconds == pytest.approx(1e-6, abs=1e-9)
    # Without the prediction, the 20 % of the work over an even share would read as cost.
    plain = cx.measure_thread_cost(type("Blind", (UnevenMachine,), {"predicted_seconds": None})(1e-6),
                                   PlannerParams(), threads=2)
    assert plain.seconds > 2e-6
