"""Tuning: the analytic models, the parameter override of the runtime and the search.

The search machinery (keep-or-improve, resume, a corrupted study file, seeds,
pruning, Ctrl-C) runs against a deterministic fake runner whose suite time is a
smooth function of the parameters with its optimum away from the default, so
every assertion is exact.  The runtime override and one short real search use
the session's untuned library (the one tests/test_runtime.py builds).
"""

from __future__ import annotations

import ctypes
import dataclasses
import io
import math
import os
import signal
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from rich.console import Console

from autotune import models, suite, tune as tn
from autotune.params import DEFAULTS, PlannerParams
from autotune.host import CacheLevel, HostInfo
from autotune import link as library
from autotune.runtime import loader
from autotune.table import TunedTable

HOST = HostInfo(
    arch="x86_64", os="linux", cpu="test", features=("avx2", "avx512f", "fma"),
    caches=(CacheLevel(1, "data", 48 << 10, 64, 12, 64), CacheLevel(2, "unified", 1 << 20, 64, 16, 1024),
            CacheLevel(3, "unified", 32 << 20, 64, 16, 32768, 2)),
    cores=2,
)
MAIN = {"f32": (32, 6), "f64": (16, 6)}


def make_table(params: dict | None = None) -> TunedTable:
    return TunedTable(target="host", host=HOST, provenance="measured",
                      peak_gflops={"f32": 285.0, "f64": 142.0}, kernels=(),
                      params=params if params is not None else library.default_params(HOST, MAIN))


# -- the analytic models --------------------------------------------------------------

def test_blocking_satisfies_kirbymm_constraints():
    geo = models.geometry(HOST)
    for dtype, (mr, nr) in MAIN.items():
        bpe = models.BPE[dtype]
        b = models.solve_blocking(geo, dtype, mr, nr, peak_gflops=285.0)
        assert models.l1_fits(geo, bpe, mr, nr, b.blk_k)
        # The deepest such blk_k: 8 more no longer fits L1.
        assert b.blk_k == 1024 or not models.l1_fits(geo, bpe, mr, nr, b.blk_k + 8)
        assert models.l2_fits(geo, bpe, mr, b.blk_k, b.blk_n)
        assert b.blk_m % mr == 0 and b.blk_n % nr == 0
        assert b.intensity >= b.intensity_needed
        assert b.blk_m <= models.BLOCK_CAP_M and b.blk_n <= models.BLOCK_CAP_N


def test_intensity_bound_raises_blocks_when_bandwidth_is_scarce():
    geo = models.geometry(HOST)
    b = models.solve_blocking(geo, "f32", 32, 6, peak_gflops=285.0, bandwidth=5e9)
    assert b.feasible and b.intensity_needed > models.intensity(models.BLOCK_CAP_M, 252)
    assert b.blk_m > models.BLOCK_CAP_M and b.blk_m % 32 == 0
    # 1 GB/s for 285 GFLOPS: nothing L2 allows hides the traffic; blocks are as big as allowed.
    starved = models.solve_blocking(geo, "f32", 32, 6, peak_gflops=285.0, bandwidth=1e9)
    assert not starved.feasible and starved.blk_n > b.blk_n
    assert models.l2_fits(geo, 4, 32, starved.blk_k, starved.blk_n)


def test_smaller_caches_give_smaller_blocks_and_crossover():
    small = dataclasses.replace(HOST, caches=(CacheLevel(1, "data", 32 << 10, 64, 8, 64),
                                              CacheLevel(2, "unified", 256 << 10, 64, 8, 512)))
    big, little = library.default_params(HOST, MAIN), library.default_params(small, MAIN)
    for dt in ("f32", "f64"):
        assert little["blk_k"][dt] < big["blk_k"][dt]
        assert little["pack_flops"][dt] < big["pack_flops"][dt]
    # f64 elements are twice as big: the IAAT crossover comes earlier.
    assert big["pack_flops"]["f64"] < big["pack_flops"]["f32"]


def test_default_params_is_pure_and_complete():
    a, b = library.default_params(HOST, MAIN), library.default_params(HOST, MAIN)
    assert a == b
    p = PlannerParams.from_mapping(a)
    assert p.to_mapping(a) == a
    assert library.default_params(None)["simd_bytes"] == 16


# -- a deterministic fake runner ---------------------------------------------------------

OPTIMUM = {"blk_m": 256, "blk_n": 512, "blk_k": 384, "call_seconds": 6e-9}


class FakeRunner:
    """Suite time = flops at 100 GFLOPS times a bowl around OPTIMUM (in log space).

    grid 2 makes the first large shape 20x slower (a hopeless trial to prune).
    ``interrupt_after`` raises KeyboardInterrupt once, at that time_shape call.
    """

    def __init__(self, interrupt_after: int | None = None, flat: bool = False,
                 sigint_after: int | None = None) -> None:
        self.params: PlannerParams | None = None
        self.calls = 0
        self.interrupt_after = interrupt_after
        self.sigint_after = sigint_after
        self.flat = flat

    def set_params(self, params: PlannerParams) -> None:
        self.params = params

    def time_shape(self, shape: tn.SuiteShape) -> float:
        self.calls += 1
        if self.interrupt_after is not None and self.calls == self.interrupt_after:
            raise KeyboardInterrupt
        if self.sigint_after is not None and self.calls == self.sigint_after:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, wherever it lands
        base = shape.flops / 100e9
        if self.flat:
            return base
        p, dt = self.params, shape.dtype
        assert p is not None
        keys = ("blk_m", "blk_n", "blk_k") if shape.regime == "large" else ("call_seconds",)
        bowl = sum(math.log(p.get(dt, k) / OPTIMUM[k]) ** 2 for k in keys)
        slow = 20.0 if shape.regime == "large" and p.get(dt, "grid") == 2 and shape.m == 160 else 1.0
        return base * (1.0 + 0.2 * bowl) * slow

    def close(self) -> None:
        pass


SUITE = tuple(s for s in tn.default_suite() if (s.m, s.n, s.k) in
              {(8, 8, 8), (37, 5, 61), (2000, 8, 64), (160, 160, 160), (512, 512, 256)})


def run(home: Path, runner=None, **kw) -> tn.TuningResult:
    kw.setdefault("budget_s", 30.0)
    kw.setdefault("n_trials", 12)
    return tn.tune(make_table(), None, home=home, runner=runner or FakeRunner(), suite=SUITE, **kw)


def fake_suite_s(params: PlannerParams) -> float:
    """What the fake runner says the whole suite costs with ``params`` (it has no noise)."""
    return tn.suite_time(FakeRunner(), params, SUITE)


def assert_kept_only_if_faster(res: tn.TuningResult) -> None:
    default, tuned = PlannerParams.from_mapping(make_table().params), PlannerParams.from_mapping(res.params)
    if res.kept:
        assert tuned != default and fake_suite_s(tuned) < fake_suite_s(default)
    else:
        assert tuned == default


def test_tiny_budget_keeps_or_improves(tmp_path):
    res = run(tmp_path, budget_s=2.0, n_trials=None)
    assert_kept_only_if_faster(res)
    # The record's numbers are the suite times of the settings it names.
    assert res.objective_default_s == pytest.approx(fake_suite_s(PlannerParams.from_mapping(make_table().params)),
                                                    rel=1e-3)
    assert res.objective_tuned_s == pytest.approx(fake_suite_s(PlannerParams.from_mapping(res.params)), rel=1e-3)
    rec = res.record
    for key in ("trials", "objective_default_s", "objective_tuned_s", "budget_s"):
        assert key in rec
    assert rec["budget_s"] == 2.0 and len(rec["trials"]) == res.trials > 0
    for t in rec["trials"]:
        assert set(t) >= {"number", "value", "params"}
    assert [t["number"] for t in rec["trials"]] == list(range(len(rec["trials"])))


def test_search_improves_on_a_default_away_from_the_optimum(tmp_path):
    res = run(tmp_path, n_trials=25)
    assert res.kept and res.objective_tuned_s < res.objective_default_s
    assert res.record["source"] == "tuned" and res.record["tuned_params"]
    assert PlannerParams.from_mapping(res.params) != PlannerParams.from_mapping(make_table().params)
    # Provenance and SIMD width are carried over from the table, not tuned.
    assert res.params["provenance"] == "measured" and res.params["simd_bytes"] == 64


def test_nothing_better_keeps_the_default(tmp_path):
    res = run(tmp_path, runner=FakeRunner(flat=True), n_trials=6)
    assert not res.kept and res.objective_tuned_s == res.objective_default_s
    assert res.params == make_table().params
    assert res.record["source"] == "analytic" and res.record["tuned_params"] is None
    assert not any(s["kept"] for s in res.record["studies"])


def test_zero_budget_is_the_analytic_default_without_measuring(tmp_path):
    res = tn.tune(make_table(), None, budget_s=0, home=tmp_path)
    assert res.params == make_table().params and res.trials == 0 and not res.kept
    assert res.record["source"] == "analytic" and res.record["objective_default_s"] is None
    assert not (tmp_path / "tuning").exists()


def assert_resumed(before: tn.TuningResult, again: tn.TuningResult, study: int) -> None:
    """The storage was left consistent: the next run reopened the study, kept its trials
    and added its own, and the run as a whole searched.  How many trials one study adds
    depends on its share of the budget, which follows the default pass's wall times:
    a loaded machine moves it (busy runs added 1 of 2 and 4 of 5 asked for)."""
    old, new = before.record["studies"][study], again.record["studies"][study]
    assert new["name"] == old["name"]
    assert new["trials"] == old["trials"] + new["this_run"]
    assert sum(s["this_run"] for s in again.record["studies"]) >= 1


def test_resume_continues_the_study(tmp_path):
    first = run(tmp_path, n_trials=5)
    second = run(tmp_path, n_trials=5)
    assert len(second.record["studies"]) == len(first.record["studies"])
    for study, summary in enumerate(second.record["studies"]):
        assert_resumed(first, second, study)
        # Its n_trials, unless its share of the budget ended first.
        assert summary["this_run"] <= 5
    added = sum(s["this_run"] for s in second.record["studies"])
    assert len(second.record["trials"]) == len(first.record["trials"]) + added
    storage = optuna.storages.RDBStorage(f"sqlite:///{tn.storage_path('host', tmp_path)}")
    assert len(storage.get_all_studies()) == len(first.record["studies"])


def test_corrupted_study_file_gives_a_message_and_a_fresh_study(tmp_path):
    db = tn.storage_path("host", tmp_path)
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not an sqlite database\x00" * 64)
    out = io.StringIO()
    res = run(tmp_path, n_trials=3, console=Console(file=out, width=200))
    text = out.getvalue()
    assert "unreadable" in text and "fresh study" in text
    aside = Path(res.record["storage_reset"])
    assert aside.exists() and aside.read_bytes().startswith(b"this is not")
    # Fresh: every trial is this run's (up to its n_trials, as its budget share allows).
    assert all(s["trials"] == s["this_run"] <= 3 for s in res.record["studies"])
    assert sum(s["this_run"] for s in res.record["studies"]) >= 1


def test_same_seed_same_choices(tmp_path):
    # A budget no study's share runs out of, however the machine's load splits it
    # (the shares follow the default pass's wall times): each study runs its n_trials.
    a = run(tmp_path / "a", seed=7, n_trials=14, budget_s=3600.0)
    b = run(tmp_path / "b", seed=7, n_trials=14, budget_s=3600.0)
    c = run(tmp_path / "c", seed=8, n_trials=14, budget_s=3600.0)

    def choices(r):
        return [(t["study"], t["params"], t["state"]) for t in r.record["trials"]]

    assert choices(a) == choices(b)
    assert a.params == b.params
    assert choices(a) != choices(c)


def test_hopeless_trials_are_pruned(tmp_path):
    res = run(tmp_path, n_trials=30)
    grid2 = [t for t in res.record["trials"] if t["params"].get("f32.grid") == 2
             or t["params"].get("f64.grid") == 2]
    assert grid2, "the seeded search never tried grid 2"
    assert all(t["state"] == "PRUNED" and t["value"] is None for t in grid2)


def test_ctrl_c_keeps_the_best_found(tmp_path):
    # Past the default's measurement and well into the search, before its end.
    runner = FakeRunner(interrupt_after=len(SUITE) + 100)
    res = run(tmp_path, runner=runner, n_trials=20)
    assert res.interrupted and res.record["interrupted"]
    assert_kept_only_if_faster(res)
    assert len(res.record["studies"]) < 4


def test_a_real_ctrl_c_stops_cleanly_and_the_study_resumes(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    res = run(tmp_path, runner=FakeRunner(sigint_after=len(SUITE) + 100), n_trials=20)
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
    assert res.interrupted and len(res.record["studies"]) < 4
    assert_kept_only_if_faster(res)
    assert not any(t["state"] == "FAIL" for t in res.record["trials"])
    assert_resumed(res, run(tmp_path, n_trials=2), 0)


def test_ctrl_c_twice_inside_optunas_storage_writes_waits_for_a_safe_point(tmp_path, monkeypatch, caplog):
    """Both presses land while optuna writes a new trial's parameters (as in a CI run):
    raised there, the interrupt went through optuna, which logged its traceback."""
    runner = FakeRunner()
    write = optuna.storages.RDBStorage._set_trial_param
    presses = []

    def press_while_writing(self, *args, **kwargs):
        if runner.calls > len(SUITE) + 100 and len(presses) < 2:
            presses.append(runner.calls)
            os.kill(os.getpid(), signal.SIGINT)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(optuna.storages.RDBStorage, "_set_trial_param", press_while_writing)
    with caplog.at_level("WARNING", logger="optuna"):
        res = run(tmp_path, runner=runner, n_trials=40)
    assert len(presses) == 2, "the presses never came inside storage writes"
    assert res.interrupted and len(res.record["studies"]) < 4
    assert not any(t["state"] == "FAIL" for t in res.record["trials"])
    assert not any(r.exc_info for r in caplog.records), caplog.text
    # Pressed twice: the trial under way ends at its first shape, and nothing is raced.
    assert runner.calls == presses[0] + 1
    assert_kept_only_if_faster(res)
    monkeypatch.undo()
    assert_resumed(res, run(tmp_path, n_trials=2), 0)


def test_ctrl_c_twice_between_optunas_calls_waits_for_a_safe_point(tmp_path, monkeypatch, caplog):
    """Both presses land while the second study queues its first trial, outside
    study.optimize: a busy run once raised the second one inside SQLAlchemy's cursor
    code there, which printed the interrupt's traceback."""
    enqueue = optuna.Study.enqueue_trial
    queued = []

    def press_twice_while_queueing(self, *args, **kwargs):
        queued.append(self.study_name)
        if len(queued) == 2:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler counts the first press before the second comes
            os.kill(os.getpid(), signal.SIGINT)
        return enqueue(self, *args, **kwargs)

    monkeypatch.setattr(optuna.Study, "enqueue_trial", press_twice_while_queueing)
    with caplog.at_level("WARNING"):
        res = run(tmp_path, runner=FakeRunner(), n_trials=40)
    assert len(queued) == 2
    assert res.interrupted and len(res.record["studies"]) == 2
    assert not any(t["state"] == "FAIL" for t in res.record["trials"])
    assert not any(r.exc_info for r in caplog.records), caplog.text
    assert_kept_only_if_faster(res)
    monkeypatch.undo()
    assert_resumed(res, run(tmp_path, n_trials=2), 1)


def test_a_second_ctrl_c_during_a_measurement_ends_the_search_at_once(tmp_path):
    first = len(SUITE) + 100
    runner = FakeRunner(sigint_after=first)  # the second press
    time_shape = runner.time_shape

    def pressed_before(shape):
        if runner.calls + 1 == first:
            os.kill(os.getpid(), signal.SIGINT)  # the first press
        return time_shape(shape)

    runner.time_shape = pressed_before
    res = run(tmp_path, runner=runner, n_trials=40)
    assert res.interrupted and len(res.record["studies"]) == 1
    # No confirmation race and no final race after the second press.
    assert runner.calls == first
    assert not any(t["state"] == "FAIL" for t in res.record["trials"])
    assert_kept_only_if_faster(res)


def test_params_roundtrip_and_with_values():
    p = PlannerParams.from_mapping(make_table().params)
    q = p.with_values("f64", {"blk_m": 64, "grid": 2, "thread_flops": 1e6})
    assert q.blk_m == (p.blk_m[0], 64) and q.grid == (p.grid[0], 2) and q.thread_flops == 1e6
    assert PlannerParams.from_mapping(q.to_mapping()) == q
    legacy = PlannerParams.from_mapping({"blk_m": 96, "blk_n": 256, "blk_k": 128})
    assert legacy.call_seconds == (DEFAULTS.call_seconds[0],) * 2 and legacy.grid == (0, 0)


# -- the runtime override ------------------------------------------------------------------

@pytest.fixture(scope="module")
def runtime(built):
    rt = loader.load(built.library)
    yield rt
    rt.lib.at_params_set(None)


def plan_info(lib, m, n, k, dtype=0) -> loader.at_plan_info:
    plan = lib.at_plan_create(dtype, 0, 0, 0, m, n, k, m, k, m)
    assert plan
    info = loader.at_plan_info()
    assert lib.at_plan_get_info(plan, ctypes.byref(info)) == 0
    lib.at_plan_destroy(plan)
    return info


def test_params_get_set_replace_and_restore(runtime):
    lib = runtime.lib
    baked = loader.at_tune_params()
    assert lib.at_params_get(ctypes.byref(baked)) == 0
    assert baked.call_seconds[0] == DEFAULTS.call_seconds[0] and baked.edge_frac[1] == DEFAULTS.edge_frac[1]
    new = loader.at_tune_params.from_buffer_copy(baked)
    new.pack_flops[0] = 1e15  # never pack
    assert lib.at_params_set(ctypes.byref(new)) == 0
    assert plan_info(lib, 300, 300, 300).path == 0
    new.pack_flops[0] = 0.0  # always pack, with small blocks
    new.blk_m[0], new.blk_n[0], new.blk_k[0] = 48, 64, 40
    assert lib.at_params_set(ctypes.byref(new)) == 0
    info = plan_info(lib, 300, 300, 300)
    assert info.path == 1 and info.blk_m <= 48 and info.blk_n <= 64 and info.blk_k == 40
    got = loader.at_tune_params()
    lib.at_params_get(ctypes.byref(got))
    assert bytes(got) == bytes(new)
    bad = loader.at_tune_params.from_buffer_copy(new)
    bad.grid[1] = 3
    assert lib.at_params_set(ctypes.byref(bad)) == -1 and b"grid" in lib.at_last_error()
    bad.grid[1], bad.blk_k[0] = 0, -1
    assert lib.at_params_set(ctypes.byref(bad)) == -1
    lib.at_params_get(ctypes.byref(got))
    assert bytes(got) == bytes(new)  # a rejected setting changes nothing
    assert lib.at_params_set(None) == 0
    lib.at_params_get(ctypes.byref(got))
    assert bytes(got) == bytes(baked)


def test_cached_plans_follow_the_override(runtime):
    """at_gemm goes through the plan cache: a new setting must not find old plans."""
    lib = runtime.lib
    rng = np.random.default_rng(3)
    A = np.asfortranarray(rng.standard_normal((200, 150)).astype(np.float32))
    B = np.asfortranarray(rng.standard_normal((150, 170)).astype(np.float32))
    want = A.astype(np.float64) @ B.astype(np.float64)
    base = loader.at_tune_params()
    lib.at_params_get(ctypes.byref(base))
    created = []
    for pack, grid, bk in ((1e15, 0, 0), (0.0, 1, 24), (0.0, 2, 136)):
        p = loader.at_tune_params.from_buffer_copy(base)
        p.pack_flops[0], p.grid[0], p.blk_k[0], p.thread_flops = pack, grid, bk, 0.0
        p.call_seconds[0], p.edge_frac[0] = 8e-9, 0.2
        assert lib.at_params_set(ctypes.byref(p)) == 0
        before, hits = ctypes.c_int64(), ctypes.c_int64()
        lib.at_plan_cache_stats(ctypes.byref(before), ctypes.byref(hits))
        C = np.zeros((200, 170), dtype=np.float32, order="F")
        rc = lib.at_gemm(0, 0, 0, 0, 200, 170, 150, 1.0, A.ctypes.data, 200, B.ctypes.data, 150,
                         0.0, C.ctypes.data, 200)
        assert rc == 0
        after = ctypes.c_int64()
        lib.at_plan_cache_stats(ctypes.byref(after), ctypes.byref(hits))
        created.append(after.value - before.value)
        np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-3)
    assert created == [1, 1, 1]
    lib.at_params_set(None)


def test_real_search_on_the_library_keeps_or_improves(runtime, tmp_path):
    suite = tuple(s for s in tn.default_suite() if (s.m, s.n, s.k) in {(24, 24, 24), (256, 256, 256)})
    table = make_table(library.default_params(HOST, MAIN, provenance="model"))
    baked = loader.at_tune_params()
    runtime.lib.at_params_get(ctypes.byref(baked))
    res = tn.tune(table, runtime.path, budget_s=4.0, seed=1, home=tmp_path, suite=suite, n_trials=4)
    assert res.objective_default_s > 0
    assert res.trials >= 4
    # The search leaves the library with its baked parameters.
    now = loader.at_tune_params()
    runtime.lib.at_params_get(ctypes.byref(now))
    assert bytes(now) == bytes(baked)


def test_kernels_and_settings_are_timed_in_rounds_of_every_one():
    """Each round runs every measure once, so a drifting machine gives all the same windows."""
    results = {"a": iter([5.0, 2.0, 3.0]), "b": iter([1.0, 2.0, 9.0])}
    order, named = [], []

    def measure(name: str) -> float:
        order.append(name)
        return next(results[name])

    best = suite.best_of_rounds({n: (lambda n=n: measure(n)) for n in results}, 3, named.append)
    assert order == named == ["a", "b"] * 3
    assert best == {"a": 2.0, "b": 1.0}


def test_a_ctrl_c_at_the_search_s_last_measurement_is_not_lost(tmp_path):
    """One press after the search last looked at it (the final race) was dropped when
    the handler was put back: the install went on and committed with status 0."""
    counted = FakeRunner()
    first = run(tmp_path / "count", runner=counted, n_trials=4)
    assert not first.interrupted
    res = run(tmp_path / "pressed", runner=FakeRunner(sigint_after=counted.calls), n_trials=4)
    assert res.interrupted and res.record["interrupted"]


def test_a_process_that_ignores_ctrl_c_keeps_ignoring_it_while_tuning(tmp_path):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        res = run(tmp_path, runner=FakeRunner(sigint_after=len(SUITE) + 5), n_trials=4)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not res.interrupted


def test_plan_signature_tells_plans_apart_and_only_them(built):
    runner = suite.LibraryRunner(built.library)
    try:
        square = suite.SuiteShape("large", "f32", "nn", 128, 128, 128)
        tiny = suite.SuiteShape("small", "f64", "nt", 12, 12, 12)
        runner.set_params(PlannerParams(pack_flops=(0.0, 0.0)))
        packed = [runner.plan_signature(s) for s in (square, tiny)]
        assert [runner.plan_signature(s) for s in (square, tiny)] == packed  # the same bytes every time
        runner.set_params(PlannerParams(pack_flops=(1e300, 0.0)))
        in_place = [runner.plan_signature(s) for s in (square, tiny)]
        assert in_place[0] != packed[0] and in_place[1] == packed[1]  # only the f32 plan changed
    finally:
        runner.close()


def test_the_pruner_reads_the_studys_trials_once_and_counts_complete_ones_after():
    # Asking the study at every report read every trial from SQLite: 11 s of a 40 s budget.
    from optuna.trial import TrialState, create_trial

    from autotune.tune import HopelessPruner

    study = optuna.create_study()
    for value in (1.0, 2.0, 3.0):  # a resumed study's complete trials
        study.add_trial(create_trial(value=value, intermediate_values={0: value}))
    asked = []
    real = study.get_trials
    study.get_trials = lambda *a, **k: asked.append(1) or real(*a, **k)  # type: ignore[method-assign]
    pruner = HopelessPruner(factor=1.3, rank=3)

    def partial(value: float, state=TrialState.RUNNING):
        return create_trial(state=state, value=value if state == TrialState.COMPLETE else None,
                            intermediate_values={0: value})

    assert pruner.prune(study, partial(3.8)) is False  # 3.8 <= 1.3 x 3.0
    assert pruner.prune(study, partial(4.0)) is True
    pruner.completed(study, partial(0.5, TrialState.PRUNED))  # a pruned trial sets no bar
    assert pruner.prune(study, partial(3.8)) is False
    done = partial(0.5, TrialState.COMPLETE)
    done.number = 99
    pruner.completed(study, done)
    pruner.completed(study, done)  # counted once
    assert pruner.prune(study, partial(2.7)) is True and pruner.prune(study, partial(2.5)) is False  # bar 1.3 x 2.0
    assert len(asked) == 1


def test_the_default_budget_is_what_the_install_has_left_within_bounds():
    from autotune.tune import DEFAULT_BUDGET_S, INSTALL_AIM_S, MIN_BUDGET_S, default_budget

    assert default_budget(0.0) == DEFAULT_BUDGET_S  # a fast host searches as long as ever
    assert default_budget(INSTALL_AIM_S - 10.0 - 25.0) == pytest.approx(25.0)  # a slow one less
    assert default_budget(INSTALL_AIM_S + 60.0) == MIN_BUDGET_S  # and never nothing
