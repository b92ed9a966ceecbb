"""Tuning the planner: an optuna search seeded by the analytic models.

The runtime plans with a handful of numbers (``docs/runtime.md``): Goto blocks,
the no-pack/pack crossover, the single/multi-thread threshold, the thread grid
and the tiler's cost weights.  :mod:`autotune.models` derives them from the
cache geometry; :func:`tune` measures whether other values plan faster on this
machine.  Trials need no rebuild: ``at_params_set`` replaces the library's
parameters in the running process and drops its cached plans; the workload and
its timing are :mod:`autotune.suite`'s, the parameters and their space
:mod:`autotune.params`'s, and this module is the search.

One optuna study per (dtype, transposition class, regime), run in sequence, each
searching only the parameters its regime's plans depend on while the others stay
at the values already kept.  The runtime holds one parameter set per dtype for
all four transpositions (the packed path repacks any transposition into its
fastest format), so the transposition class is ``all`` and every study's suite
mixes nn, nt, tn and tt shapes.  Results are kept only where a re-measurement,
interleaved with the default's, shows they are faster; the whole suite is then
timed once more with both settings for the record.  See ``docs/tuning.md``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import math
import signal
import sqlite3
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import optuna
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from . import home as home_mod
from .models import analytic_params
from .params import DTYPES, PlannerParams, space_point, suggest
from .suite import LibraryRunner, SuiteRunner, SuiteShape, TuningError, race, default_suite, suite_time
from .table import TunedTable

#: What `autotune install` gives the search: searches of 90 s gained 0-4 % on four
#: hosts, most of it in the first trials, and the install should take three minutes
#: on 2 cores; `--quick` skips the search (the measured crossovers stay).
DEFAULT_BUDGET_S = 40.0
QUICK_BUDGET_S = 0.0
#: The default search is the install's elastic part: it gets what is left of this
#: much wall time since the install started (less what follows it), between
#: MIN_BUDGET_S and DEFAULT_BUDGET_S.  On a 2-vCPU Zen 5 VM the stages before it took
#: 100 s in quiet moments and 135 s in slow ones (compiling 30 % slower, a tenth of
#: the kernels timed again), which took README's first command past three minutes
#: with a fixed 40 s search, while the searched set ran the held-out shapes within
#: 2 % of the measured crossovers alone in five installs there.  The aim leaves the
#: set-up script (5-20 s) and the stages after the search inside those three minutes;
#: on a 2-vCPU Zen 4 VM (2026-12-02) the stages before the search took 120-150 s.
INSTALL_AIM_S = 150.0
MIN_BUDGET_S = 10.0


def default_budget(elapsed_s: float, after_s: float = 10.0) -> float:
    """The search's share of an install ``elapsed_s`` seconds in, ``after_s`` still to come
    after it (the held-out check, the library's rebuild)."""
    return max(MIN_BUDGET_S, min(DEFAULT_BUDGET_S, INSTALL_AIM_S - elapsed_s - after_s))

#: Kept only when faster than the incumbent by more than this fraction: below
#: it a shared machine's noise decides, and a change must earn its place.
KEEP_MARGIN = 0.01
#: Interleaved rounds when comparing a study's best with the incumbent.
CONFIRM_ROUNDS = 3
#: A study's best few are re-measured, not only its best: the minimum of many
#: noisy measurements is biased low (the winner's curse).
CONFIRM_CANDIDATES = 3
SUITE_VERSION = 1




# -- the search space ---------------------------------------------------------------

@dataclass(frozen=True)
class StudySpec:
    """One study: which shapes it times and which parameters it searches."""

    dtype: str
    regime: str
    trans_class: str = "all"

    @property
    def key(self) -> str:
        return f"{self.dtype}-{self.trans_class}-{self.regime}"


def study_specs(dtypes: Sequence[str]) -> tuple[StudySpec, ...]:
    return tuple(StudySpec(dt, regime) for dt in dtypes for regime in ("small", "large"))


class HopelessPruner(optuna.pruners.BasePruner):
    """Stop a trial whose partial suite time is already ``factor`` x a good trial's.

    The suite is timed shape by shape and reported cumulatively, so a setting
    that makes one of the first shapes much slower is dropped before the rest is
    measured.  The reference is the ``rank``-th best complete trial at that
    step, not the best: on a shared machine one lucky measurement would
    otherwise prune nearly everything after it.  The factor is generous because
    a partial sum is noisy and a setting that loses early may still win later.
    """

    def __init__(self, factor: float = 1.3, rank: int = 3) -> None:
        self.factor = factor
        self.rank = rank
        # The complete trials' partial times, sorted, per step: asking the study for
        # its trials at every report read them all from SQLite, 11 s of a 40 s budget.
        self._by_step: dict[int, list[float]] | None = None
        self._counted: set[int] = set()

    def completed(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Count a finished trial (tune's after-trial callback); only complete ones count."""
        by_step = self._known(study)
        if trial.state == optuna.trial.TrialState.COMPLETE:
            self._count(by_step, trial)

    def _count(self, by_step: dict[int, list[float]], trial: optuna.trial.FrozenTrial) -> None:
        if trial.number not in self._counted:
            self._counted.add(trial.number)
            for step, value in trial.intermediate_values.items():
                bisect.insort(by_step.setdefault(step, []), value)

    def _known(self, study: optuna.Study) -> dict[int, list[float]]:
        if self._by_step is None:  # once: the trials a resumed study already has
            self._by_step = {}
            for done in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
                self._count(self._by_step, done)
        return self._by_step

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        value = trial.intermediate_values[step]
        seen = self._known(study).get(step)
        if not seen:
            return False
        return value > self.factor * seen[min(self.rank, len(seen)) - 1]


# -- storage ------------------------------------------------------------------------

def storage_path(target: str, home: Path | None = None) -> Path:
    return (home or home_mod.home()) / "tuning" / f"{target}.db"


def _rdb(path: Path) -> optuna.storages.RDBStorage:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0)
        # A trial writes a dozen small transactions; with the default journal each
        # one waits for an fsync (~10 ms here), which would cost more than timing the
        # suite.  WAL without per-commit sync survives a crash of this process, and
        # a power cut only loses the last trials of a history that is a cache.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return optuna.storages.RDBStorage(f"sqlite:///{path}", engine_kwargs={"creator": connect})


def _open_storage(path: Path, say: Callable[[str], None]) -> tuple[optuna.storages.RDBStorage, str | None]:
    """The study database; an unreadable one is moved aside (and reported) for a fresh one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        storage = _rdb(path)
        storage.get_all_studies()
        return storage, None
    except Exception as exc:  # sqlalchemy's and optuna's errors have no common base
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        path.replace(aside)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        say(f"tuning history {path} is unreadable ({type(exc).__name__}: {reason}); "
            f"moved it to {aside.name} and starting a fresh study")
        for side in ("-wal", "-shm"):
            path.with_name(path.name + side).unlink(missing_ok=True)
        return _rdb(path), str(aside)


class _Interrupt:
    """Ctrl-C during the search, taken when it is safe.

    A KeyboardInterrupt raised at an arbitrary point can land inside optuna's
    storage write and leave the study half updated (optuna 5 then fails with an
    UnboundLocalError of its own, or logs the interrupt's traceback as a failed
    trial), or inside SQLAlchemy's cursor handling, which prints it as a
    traceback.  So the first Ctrl-C only sets ``hit``; the search checks it
    between shapes and stops cleanly.  A second one raises at once only while a
    measurement runs (``shield(False)``); everywhere else the search is shielded
    and it waits for the next measurement or checkpoint, which comes within one
    shape's time.  Shielded by default, not only around optuna's calls: opening
    the study, queueing its first trial and reading its trials back touch the
    storage too.
    """

    def __init__(self) -> None:
        self.presses = 0
        self.shielded = True

    @property
    def hit(self) -> bool:
        return self.presses > 0

    @property
    def insisted(self) -> bool:
        """Pressed twice: skip whatever is left that only refines the result."""
        return self.presses > 1

    def handler(self, signum: int, frame: Any) -> None:
        self.presses += 1
        if self.insisted and not self.shielded:
            raise KeyboardInterrupt

    def insist(self) -> None:
        """A KeyboardInterrupt came some other way: it means stop now, as two presses do."""
        self.presses = max(self.presses, 2)

    def raise_if_insisted(self) -> None:
        if self.insisted:
            raise KeyboardInterrupt

    @contextmanager
    def shield(self, on: bool = True) -> Iterator[None]:
        """``on``: optuna's code runs inside; a second press waits for the block's end.
        Off: a measurement inside a shielded block, where a second press raises at once."""
        before, self.shielded = self.shielded, on
        try:
            yield
        finally:
            self.shielded = before
        if not on:
            return
        # A second press that came while shielded is taken now.
        self.raise_if_insisted()


@contextmanager
def _deferred_interrupt() -> Iterator[_Interrupt]:
    state = _Interrupt()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Only the main thread may install handlers; elsewhere Ctrl-C is not ours.  A
        # process started with Ctrl-C ignored (a script's background job, nohup) keeps
        # ignoring it here as in every other stage.
        yield state
        return
    previous = signal.signal(signal.SIGINT, state.handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


# -- the held-out check --------------------------------------------------------------

#: Interleaved rounds of the held-out check.
HELD_OUT_ROUNDS = 2

#: How much slower than a less measured set a kept set may run any one held-out shape,
#: whatever its geometric mean: a tuned set whose blocking ran 1024^3 1.34x slower (an
#: NT main kernel's panels aliasing in L1) won by its gains on the transposed shapes
#: (Zen 1, 2026-12-07).  Well above the noise of one shape on a shared VM (15 %).
WORST_SHAPE = 1.25


@dataclass(frozen=True)
class HeldOutVerdict:
    """Which parameter set the held-out shapes chose, and how each one ran them."""

    chosen: str
    times: Mapping[str, float]  # seconds of the held-out workload, by candidate
    shapes: int
    #: Each candidate's best time per call on each shape, in the shapes' order.
    per_shape: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    labels: tuple[str, ...] = ()  # the shapes' labels, in that order

    def gain(self, over: str) -> float | None:
        """How much faster the chosen set ran the held-out shapes than ``over`` did."""
        return self.speedup(self.chosen, over)

    def speedup(self, name: str, over: str) -> float | None:
        """How much faster set ``name`` ran the held-out shapes than ``over`` did: the
        geometric mean of the shapes' time ratios (each shape counts once, whatever
        its size), or the workload's where the shapes' times were not kept."""
        if over in self.per_shape and name in self.per_shape:
            return _speedup(self.per_shape[over], self.per_shape[name])
        base, mine = self.times.get(over), self.times.get(name)
        return base / mine if base and mine else None

    def to_dict(self) -> dict[str, Any]:
        # Each shape's times stay in the record: which shapes decided is what a
        # person asks when a measured set loses (packing thresholds measured on
        # squares also move tall-skinny products onto the packed path).
        by_shape = {label: {name: _round(times[i]) for name, times in self.per_shape.items()}
                    for i, label in enumerate(self.labels)}
        return {"chosen": self.chosen, "times_s": {k: _round(v) for k, v in self.times.items()},
                "shapes": self.shapes, **({"per_shape_s": by_shape} if by_shape else {})}


def _worst(base: Sequence[float], mine: Sequence[float]) -> float:
    """How many times slower than ``base`` ``mine`` ran its worst shape (1.0 if none)."""
    return max((b / a for a, b in zip(base, mine) if a > 0 and b > 0), default=1.0)


def _speedup(slow: Sequence[float], fast: Sequence[float]) -> float:
    """Geometric mean of slow/fast over the shapes both timed."""
    logs = [math.log(a / b) for a, b in zip(slow, fast) if a > 0 and b > 0]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def _plan_groups(runner: SuiteRunner, sets: Mapping[str, PlannerParams],
                 shapes: Sequence[SuiteShape]) -> list[list[list[str]]]:
    """Per shape, the sets partitioned by their plan of it: each set alone where the
    runner has no ``plan_signature``."""
    signature = getattr(runner, "plan_signature", None)
    if signature is None or len(sets) < 2:
        return [[[name] for name in sets] for _ in shapes]
    plans: dict[str, list[bytes]] = {}
    for name, params in sets.items():
        runner.set_params(params)
        plans[name] = [signature(shape) for shape in shapes]
    partition = []
    for i in range(len(shapes)):
        groups: dict[bytes, list[str]] = {}
        for name in sets:
            groups.setdefault(plans[name][i], []).append(name)
        partition.append(list(groups.values()))
    return partition


def judge(runner: SuiteRunner, candidates: Mapping[str, PlannerParams], shapes: Sequence[SuiteShape],
          rounds: int = HELD_OUT_ROUNDS) -> HeldOutVerdict:
    """The first of ``candidates`` (most measured first) that loses to none after it on ``shapes``.

    Each set is timed on shapes the search never saw, in interleaved rounds, so a
    tuning that only fitted its own suite, or the noise of a busy machine, is
    caught: a set is kept only if no less measured one ran these shapes faster,
    by the geometric mean of the shapes' time ratios, nor any one shape
    :data:`WORST_SHAPE` times faster.  Not by the workload's
    total: one 1024^3 call outweighs the other 14 shapes together, and its noise
    (a few percent on a shared VM) outweighed the two shapes where a measured and
    the model's packing thresholds differed (448^3, 768x512x384): the model's set
    was kept by 1 %.  Identical sets are timed once, under the first name.
    """
    unique: dict[str, PlannerParams] = {}
    for name, params in candidates.items():
        if all(params != seen for seen in unique.values()):
            unique[name] = params
    names = list(unique)
    best = {name: [math.inf] * len(shapes) for name in names}
    # Sets that plan a shape alike run the same code there: their times differ by
    # noise alone, which decided verdicts (a 12^3 product timed 1.6x apart under
    # two sets with one plan).  Each plan of a shape is timed once, under its
    # first set, and every set with that plan has its time; a shape all sets plan
    # alike decides nothing and is timed in one round only.
    partition = _plan_groups(runner, unique, shapes)
    for r in range(max(1, rounds) if len(names) > 1 else 1):
        # Shape by shape, every plan in turn: the plans of one shape see the same
        # few seconds of a drifting machine.
        for i, shape in enumerate(shapes):
            if r and len(partition[i]) == 1:
                continue
            for group in partition[i]:
                runner.set_params(unique[group[0]])
                t = min(best[group[0]][i], runner.time_shape(shape))
                for name in group:
                    best[name][i] = t
    per_shape = {name: tuple(times) for name, times in best.items()}
    workload = {name: sum(s.calls * t for s, t in zip(shapes, times)) for name, times in per_shape.items()}
    chosen = next(n for i, n in enumerate(names)
                  if all(_speedup(per_shape[m], per_shape[n]) >= 1.0
                         and _worst(per_shape[m], per_shape[n]) <= WORST_SHAPE for m in names[i + 1:]))
    return HeldOutVerdict(chosen, workload, len(shapes), per_shape, tuple(s.label for s in shapes))


# -- the result ---------------------------------------------------------------------

@dataclass(frozen=True)
class TuneProgress:
    """Passed to ``progress`` after every trial (and once at the end with ``done``)."""

    study: str
    trial: int
    elapsed_s: float
    budget_s: float
    best_s: float | None
    default_s: float | None
    done: bool = False


@dataclass(frozen=True)
class TuningResult:
    """``params``: the table's params to bake (tuned where they won, else the default);
    ``record``: the table's ``tuning`` mapping."""

    params: Mapping[str, Any]
    record: Mapping[str, Any]
    objective_default_s: float | None
    objective_tuned_s: float | None
    kept: bool
    trials: int
    interrupted: bool = False
    studies: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


def _round(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.6g}")
    return v


def _fingerprint(table: TunedTable, default: PlannerParams, shapes: Sequence[SuiteShape]) -> str:
    """Studies resume only while the kernels, the starting point and the suite are the same."""
    data = json.dumps({"suite": SUITE_VERSION, "shapes": [asdict(s) for s in shapes],
                       "default": asdict(default), "kernels": sorted(table.selection),
                       "target": table.target}, sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:12]


def _make_progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[best]}"), console=console, transient=False)


def tune(
    table: TunedTable,
    library: Path | None,
    *,
    budget_s: float,
    seed: int = 0,
    home: Path | None = None,
    progress: Callable[[TuneProgress], None] | None = None,
    console: Console | None = None,
    runner: SuiteRunner | None = None,
    suite: Sequence[SuiteShape] | None = None,
    n_trials: int | None = None,
) -> TuningResult:
    """Search the planner parameters for ``budget_s`` seconds; keep what beats the default.

    ``table.params`` is the starting point (the analytic default when it is
    empty).  ``library`` is the installed library the suite is timed with
    (``runner`` replaces it, e.g. a deterministic fake in tests).  Studies are
    stored in ``$AUTOTUNE_HOME/tuning/<target>.db`` and continue where a previous
    run stopped.  ``n_trials`` caps each study's trials (for reproducible tests).
    A budget of 0 measures nothing: the analytic default, recorded as such.
    Ctrl-C stops the search and keeps the best result found so far.
    """
    started = time.perf_counter()
    base_params = dict(table.params) or analytic_params(table.host, None, table.provenance)
    default = PlannerParams.from_mapping(base_params)
    dtypes = tuple(dt for dt in DTYPES if any(r.spec.dtype == dt for r in table.selected())) or DTYPES
    shapes = tuple(suite) if suite is not None else default_suite(dtypes)
    record: dict[str, Any] = {
        "trials": [], "objective_default_s": None, "objective_tuned_s": None,
        "budget_s": float(budget_s), "seed": seed, "source": "analytic",
        "default_params": default.to_mapping(), "tuned_params": None, "studies": [],
        "kept": False, "interrupted": False,
    }
    say = console.print if console is not None else (lambda text: None)
    if budget_s <= 0:
        return TuningResult(default.to_mapping(base_params), record, None, None, False, 0)

    own_runner = runner is None
    if runner is None:
        if library is None:
            raise TuningError("tune needs the installed library (or a runner)")
        runner = LibraryRunner(library, seed=seed)
    bar: Progress | None = None
    if progress is None and console is not None:
        bar = _make_progress(console)
    try:
        with _quiet_optuna(), _deferred_interrupt() as stop, \
                (bar if bar is not None else nullcontext()):
            setup = SearchSetup(table, runner, default, base_params, shapes, budget_s, seed, home,
                                n_trials, started)
            result = _search(setup, SearchFeedback(progress, bar, say, stop), record)
        if stop.hit and not result.interrupted:
            # A press after the search's last look (in the final race, say) is a
            # Ctrl-C all the same: the handler is back, and nobody else will see it.
            record["interrupted"] = True
            result = replace(result, interrupted=True)
        return result
    finally:
        if own_runner:
            runner.close()


@dataclass(frozen=True)
class SearchSetup:
    """What one search works with: tune()'s inputs, resolved."""

    table: TunedTable
    runner: SuiteRunner
    default: PlannerParams
    base_params: Mapping[str, Any]
    shapes: Sequence[SuiteShape]
    budget_s: float
    seed: int
    home: Path | None
    n_trials: int | None
    started: float  # perf_counter() when tune() began: the budget counts from there


@dataclass(frozen=True)
class SearchFeedback:
    """How a search reports as it goes, and hears Ctrl-C."""

    progress: Callable[[TuneProgress], None] | None
    bar: Progress | None
    say: Callable[[str], None]
    stop: _Interrupt


def _search(setup: SearchSetup, feedback: SearchFeedback, record: dict[str, Any]) -> TuningResult:
    """The studies in turn; ``record`` (the table's tuning mapping) is filled as they finish."""
    table, runner, default, base_params, shapes = (setup.table, setup.runner, setup.default,
                                                   setup.base_params, setup.shapes)
    budget_s, seed, home, n_trials, started = (setup.budget_s, setup.seed, setup.home, setup.n_trials,
                                               setup.started)
    progress, bar, say, stop = feedback.progress, feedback.bar, feedback.say, feedback.stop
    specs = [s for s in study_specs(DTYPES)
             if any(x.dtype == s.dtype and x.regime == s.regime for x in shapes)]
    by_study = {s.key: [x for x in shapes if x.dtype == s.dtype and x.regime == s.regime]
                for s in specs}
    deadline = started + budget_s
    task = bar.add_task("tuning", total=budget_s, best="") if bar is not None else None

    # The default's objective per study; the wall time of each pass (not the
    # objective, which is a workload) sizes the study's share of the budget, so
    # that every study gets about as many trials.
    study_default: dict[str, float] = {}
    wall: dict[str, float] = {}
    try:
        for s in specs:
            t0 = time.perf_counter()
            with stop.shield(False):
                study_default[s.key] = suite_time(runner, default, by_study[s.key])
            wall[s.key] = max(time.perf_counter() - t0, 1e-6)
            if stop.hit:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        say("[yellow]interrupted before the search began: the analytic default stays[/yellow]")
        record.update(interrupted=True)
        return TuningResult(default.to_mapping(base_params), record, None, None, False, 0, True)
    one_pass = sum(wall.values())
    default_total = sum(study_default.values())
    # The final comparison takes 2 passes per round; keep it within a quarter of the budget.
    final_rounds = int(max(1, min(CONFIRM_ROUNDS, (0.25 * budget_s) // (2 * one_pass))))
    # 1.25: a pass late in the search can be slower than the first (a busier machine).
    search_s = max(0.0, deadline - time.perf_counter() - 1.25 * 2 * final_rounds * one_pass)
    search_end = time.perf_counter() + search_s
    # A study's confirmation costs (1 + CONFIRM_CANDIDATES) * CONFIRM_ROUNDS passes of its shapes.
    share_weight = dict(wall)
    total_weight = sum(share_weight.values())

    storage, reset = _open_storage(storage_path(table.target, home), say)
    if reset:
        record["storage_reset"] = reset
    fingerprint = _fingerprint(table, default, shapes)
    record["source"] = "tuned"
    record["storage"] = str(storage_path(table.target, home))

    incumbent = default
    incumbent_obj = dict(study_default)
    interrupted = False
    number = 0
    best_estimate = default_total

    def tell(study_key: str, trial_no: int, done: bool = False) -> None:
        elapsed = time.perf_counter() - started
        if bar is not None and task is not None:
            bar.update(task, completed=min(budget_s, elapsed), description=f"tuning {study_key}",
                       best=f"best {best_estimate * 1e3:.3f} ms (default {default_total * 1e3:.3f} ms)")
        if progress is not None:
            progress(TuneProgress(study_key, trial_no, elapsed, budget_s, best_estimate, default_total, done))

    for index, spec in enumerate(specs):
        key = spec.key
        study_shapes = by_study[key]
        # thread_flops is one number for both dtypes: the first small study owns it.
        tunes_threads = spec.regime == "small" and spec.dtype == specs[0].dtype
        share = search_s * share_weight[key] / total_weight
        confirm_s = (1 + CONFIRM_CANDIDATES) * CONFIRM_ROUNDS * wall[key]
        # A study that overran (a slow last trial) eats into the next ones, never
        # into the final comparison.
        end = min(search_end - confirm_s, time.perf_counter() + max(0.0, share - confirm_s))
        sampler = optuna.samplers.TPESampler(seed=seed * 1009 + index, n_startup_trials=8)
        pruner = HopelessPruner()
        study = optuna.create_study(study_name=f"{key}:{fingerprint}", storage=storage,
                                    sampler=sampler, pruner=pruner,
                                    direction="minimize", load_if_exists=True)
        before = len(study.trials)
        start_point = space_point(incumbent, spec.dtype, spec.regime, tunes_threads)
        study.enqueue_trial(start_point, skip_if_exists=True)
        offset = sum(v for k, v in incumbent_obj.items() if k != key)

        def objective(trial: optuna.Trial) -> float:
            values = suggest(trial, spec.regime, tunes_threads)
            candidate = incumbent.with_values(spec.dtype, values)

            def report(step: int, partial: float) -> None:
                if stop.hit:
                    # Ends the trial through optuna's own path, storage intact.
                    raise optuna.TrialPruned("interrupted")
                with stop.shield():
                    trial.report(partial, step)
                    pruned = trial.should_prune()
                if pruned:
                    raise optuna.TrialPruned()

            try:
                with stop.shield(False):
                    return suite_time(runner, candidate, study_shapes, report)
            except KeyboardInterrupt:
                stop.insist()
                raise optuna.TrialPruned("interrupted") from None

        def after(study: optuna.Study, trial: optuna.trial.FrozenTrial, pruner: HopelessPruner = pruner) -> None:
            nonlocal best_estimate
            pruner.completed(study, trial)
            if trial.value is not None:
                best_estimate = min(best_estimate, trial.value + offset)
            tell(key, trial.number)
            if time.perf_counter() >= end or stop.hit:
                study.stop()

        try:
            if time.perf_counter() < end:
                # Shielded: a second Ctrl-C must not land inside optuna's storage writes.
                with stop.shield():
                    study.optimize(objective, n_trials=n_trials,
                                   timeout=max(0.0, end - time.perf_counter()), callbacks=[after])
        except KeyboardInterrupt:
            interrupted = True
        if stop.hit or interrupted:
            interrupted = True
            say("[yellow]interrupted: keeping the best result found so far[/yellow]")

        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        summary: dict[str, Any] = {"study": key, "name": study.study_name,
                                   "trials": len(study.trials), "this_run": len(study.trials) - before,
                                   "default_s": _round(study_default[key]),
                                   "params": sorted(start_point), "kept": False}
        for t in study.trials:
            value = t.value if t.state == optuna.trial.TrialState.COMPLETE else None
            record["trials"].append({
                "number": number, "study": key, "state": t.state.name,
                "value": _round(value + offset) if value is not None else None,
                "study_value": _round(value),
                "params": {f"{spec.dtype}.{p}": _round(v) for p, v in t.params.items()},
            })
            number += 1
        if complete:
            summary["best_s"] = _round(min(t.value for t in complete))
            candidates: list[tuple[PlannerParams, dict[str, Any]]] = []
            for t in sorted(complete, key=lambda t: t.value):
                cand = incumbent.with_values(spec.dtype, t.params)
                if cand != incumbent and all(cand != c for c, _ in candidates):
                    candidates.append((cand, t.params))
                if len(candidates) == CONFIRM_CANDIDATES:
                    break
            if candidates:
                rounds = 1 if interrupted else CONFIRM_ROUNDS
                try:
                    stop.raise_if_insisted()
                    with stop.shield(False):
                        times = race(runner, [incumbent] + [c for c, _ in candidates], study_shapes, rounds)
                except KeyboardInterrupt:
                    # Unconfirmed, so not kept: only measured wins replace the default.
                    interrupted = True
                    times = [math.inf] * (len(candidates) + 1)
                old = times[0]
                pick = min(range(len(candidates)), key=lambda i: times[i + 1])
                new = times[pick + 1]
                summary.update(confirm_default_s=_round(old), confirm_best_s=_round(new))
                if new < old * (1 - KEEP_MARGIN):
                    incumbent = candidates[pick][0]
                    incumbent_obj[key] = new
                    summary["kept"] = True
                    summary["best_params"] = {p: _round(v) for p, v in candidates[pick][1].items()}
        record["studies"].append(summary)
        if interrupted:
            break

    # The record's two numbers: the whole suite with both settings, interleaved.
    rounds = 1 if interrupted else final_rounds
    obj_default = obj_tuned = default_total
    if incumbent != default:
        try:
            stop.raise_if_insisted()
            with stop.shield(False):
                obj_default, obj_tuned = race(runner, [default, incumbent], shapes, rounds)
        except KeyboardInterrupt:
            # Every kept study was confirmed against its incumbent: their sum stands.
            interrupted = True
            obj_tuned = sum(incumbent_obj.values())
    kept = incumbent != default and obj_tuned < obj_default
    if not kept:
        # The studies' wins did not add up on the whole suite: the default stays.
        incumbent, obj_tuned = default, obj_default
    record.update(
        objective_default_s=_round(obj_default), objective_tuned_s=_round(obj_tuned),
        kept=kept, interrupted=interrupted, fingerprint=fingerprint,
        elapsed_s=_round(time.perf_counter() - started),
        tuned_params=incumbent.to_mapping() if kept else None,
        speedup=_round(obj_default / obj_tuned) if obj_tuned else None,
    )
    if not kept:
        record["source"] = "analytic"
    best_estimate = obj_tuned
    tell("done", number, done=True)
    params = incumbent.to_mapping(base_params)
    return TuningResult(params, record, obj_default, obj_tuned, kept, len(record["trials"]),
                        interrupted, tuple(record["studies"]))
