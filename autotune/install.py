"""`autotune install`: detect -> generate -> build -> validate -> measure -> store.

Each stage is a module of its own; this one only sequences them, shows progress and
makes the run resumable. Every finished validation and measurement is appended to a
journal under $AUTOTUNE_HOME (keyed by the kernel object's content hash and the
measurement settings), so a re-run, or a run after Ctrl-C, redoes only what changed.
The table itself is written once, atomically, at the end.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import queue
import shutil
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import pandas as pd
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from . import build, codegen, families, measure, qsuite, table
from . import files as files_mod
from .home import ensure_writable, home as default_home, install_lock
from .host import HostInfo, detect, load_meter
from .specs import TRANSPOSITIONS, KernelSpec
from .table import KernelRecord, TunedTable, library_dir
from .link import LibraryBuild, build_table_library, default_params, precompile_runtime
from .pkgconfig import write_pc
from .toolchain import Target, native_isas, target_for, upper_halves

if TYPE_CHECKING:
    from .crossovers import Crossover
    from .params import PlannerParams
    from .suite import SuiteRunner, SuiteShape
    from .tune import HeldOutVerdict

#: How kernels are timed. `quick` keeps the whole install near a minute on 2 cores.
#: K = 4 is where tiny products live: a kernel's call and set-up cost, not its
#: loop, decide there, and the tiler reads its choice for K <= 4 off that point.
#: Leading dimensions wider than the block (pad 17) are timed by --exhaustive only:
#: the tiler reads its speeds at tight ones, and validation covers the wide ones.
#: `passes`: the grid is timed that many times over, every kernel once per pass,
#: and each point keeps its median pass (KernelTimer.time): the passes lie seconds
#: apart, so a kernel is not ranked by the one moment of a drifting machine it met.
MEASURE_SETTINGS: dict[str, dict[str, Any]] = {
    "default": {"ks": [4, 16, 64, 256], "pads": [0], "min_time_ms": 0.5, "repeats": 1, "passes": 3},
    "quick": {"ks": [64, 256], "pads": [0], "min_time_ms": 0.5, "repeats": 3},
    "exhaustive": {"ks": [4, 16, 64, 256], "pads": [0, 17], "min_time_ms": 1.0, "repeats": 1, "passes": 3},
}
#: The screening run every kernel gets before the full grid (see screen()).
SCREEN_SETTINGS: dict[str, Any] = {"ks": [64], "pads": [0], "min_time_ms": 0.25, "repeats": 3}
#: A kernel this much slower than the best of its block at the screening depth is
#: not timed further: a quarter is several times the spread of a busy machine's
#: repeats, and more than any kernel here gained over its block's best between depths.
SCREEN_MARGIN = 0.25
#: Kernels per harness run: small enough that a crash or Ctrl-C loses little, large
#: enough that process start-up stays negligible.
CHUNK = 48
#: A family's kernels are validated and timed in about this many waves, as their
#: compiles finish: enough that timing overlaps most of the compiling, few
#: enough that each wave's harness link and screening stay a small cost.
WAVES = 8


@dataclass(frozen=True)
class InstallOptions:
    target: str = "host"
    quick: bool = False
    force: bool = False
    jobs: int | None = None
    home: Path | None = None
    svl_bits: int | None = None  # the one SME2 vector length to build for (default: svl_sets)
    budget_s: float | None = None  # tuning time; None: tune.default_budget (what the install has left), none with quick
    seed: int = 0  # tuning seed
    only: tuple[str, ...] = ()  # shell patterns on kernel names; empty means the whole family
    exhaustive: bool = False  # time every kernel over the whole grid (no screening), wide leading dims too
    shapes: Path | None = None  # shapes recorded with AUTOTUNE_RECORD, added to the tuning suite


@dataclass(frozen=True)
class InstallResult:
    table: TunedTable
    path: Path
    compiled: int  # objects compiled in this run (the rest came from the cache)
    measured: int  # kernels timed in this run (the rest came from the journal)
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    library: Path | None = None  # libautotune built from this table


class InstallError(RuntimeError):
    """The install cannot proceed; the message says what to do."""


# -- targets ------------------------------------------------------------------------

#: Families a named target's library carries besides its own: an SME2 library
#: must run on every Arm CPU, so it brings NEON for CPUs without SME2 (or of
#: another vector length) and for the rows and columns below a ZA tile.
WITH_FALLBACK = {"sme2": ("sme2", "neon")}


def resolve_targets(target: str, host: HostInfo, svl_bits: int | None = None) -> tuple[str, dict[str, Target]]:
    """Map the CLI's target name to (provenance, {isa: Target}).

    ``host`` means every family this CPU runs natively; an ISA name means that family
    (with its fallbacks, WITH_FALLBACK), natively if the host has it, else
    cross-built and emulated.
    """
    isas = native_isas(host) if target == "host" else WITH_FALLBACK.get(target, (target,))
    targets = {isa: target_for(isa, host, svl_bits) for isa in isas}
    # A whole userland under a user-mode emulator (host.emulator) builds and measures as
    # natively, but its timings are the emulator's: the table must not pass for measured.
    emulated = bool(host.emulator) or any(t.emulated for t in targets.values())
    return ("emulated" if emulated else "measured"), targets


def upper_halves_record(targets: Mapping[str, Target]) -> dict | None:
    """What this CPU charges SSE code after dirty upper halves (toolchain.upper_halves),
    which decided whether the x86 vector kernels clear them: for `autotune show`."""
    for target in targets.values():
        if target.isa in ("avx2", "avx512") and target.arch == "x86_64":
            probe = upper_halves(target.cc)
            return probe.to_dict() if probe else None
    return None


def svl_sets(targets: Mapping[str, Target], svl_bits: int | None = None) -> tuple[int, ...]:
    """The streaming vector lengths the SME2 family is generated for.

    A native install knows its CPU's SVL and can validate kernels at no other, so
    it builds that set only; a cross-build does not know the Arm CPU it will meet
    and carries a set per common SVL (families.CROSS_SVLS), each validated under
    the emulator at its own length.  ``svl_bits`` asks for one set.
    """
    sme2 = targets.get("sme2")
    if sme2 is None:
        return ()
    if svl_bits or not sme2.emulated:
        return (svl_bits or sme2.svl_bits,)
    return families.CROSS_SVLS


def kernel_groups(targets: Mapping[str, Target], specs: Sequence[KernelSpec],
                  host: HostInfo) -> Iterator[tuple[str, str, Target, list[KernelSpec]]]:
    """(isa, label, target, kernels) per family and, for SME2, per vector length:
    the kernels one harness validates under one CPU model."""
    for isa, target in targets.items():
        svls = sorted({s.svl for s in specs if s.isa == isa})
        for svl in svls:
            group = [s for s in specs if s.isa == isa and s.svl == svl]
            if svl and svl != target.svl_bits:
                target = target_for(isa, host, svl)
            yield isa, (f"{isa} @{svl}" if len(svls) > 1 else isa), target, group


def emulated_host(targets: Mapping[str, Target], host: HostInfo) -> HostInfo:
    """The CPU an emulated table describes: the emulator's, never this host.

    Its fingerprint keys the table apart from any native aarch64 table, so an
    emulated table is never taken for one measured on real hardware.
    """
    target = next(iter(targets.values()))
    features = {"neon": ("asimd", "fp"), "sme2": ("asimd", "fp", "sme", "sme2", "sve", "sve2")}
    names = sorted({f for isa in targets for f in features.get(isa, ())})
    cpu = f"QEMU {' '.join(target.runner[1:])} (emulated on {host.cpu})"
    return HostInfo(arch=target.arch, os="linux", cpu=cpu, features=tuple(names),
                    svl_bits=target.svl_bits, caches=(), cores=host.cores, compiler=target.compiler_id)


# -- the journal -------------------------------------------------------------------

class Journal:
    """Append-only JSON lines of finished results, read back on the next run.

    A line cut short by an interruption is ignored; results are keyed by content
    hashes, so a stale line can never be applied to a kernel that changed.
    """

    def __init__(self, path: Path, fresh: bool = False) -> None:
        self.path = path
        # The quantised stage records from its own thread beside the float kernels'.
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            path.unlink(missing_ok=True)
        self.validations: dict[str, dict] = {}
        self.benches: dict[tuple[str, str], list[dict]] = {}
        self.peaks: dict[tuple[str, str], dict[str, float]] = {}
        for entry in self._read():
            try:
                kind = entry.get("kind")
                if kind == "validate":
                    self.validations[entry["hash"]] = entry
                elif kind == "bench":
                    self.benches[(entry["hash"], entry["settings"])] = entry["rows"]
                elif kind == "peak":
                    self.peaks[(entry["isa"], entry["harness"])] = entry["gflops"]
            except (KeyError, TypeError):
                continue  # a line of another shape: measured again, never trusted

    def _read(self) -> Iterator[dict]:
        """Every whole entry; a damaged line (cut short, not UTF-8, not JSON) is skipped."""
        if not self.path.exists():
            return
        for line in self.path.read_bytes().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry

    def append(self, entries: Iterable[dict]) -> None:
        lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries)
        if not lines:
            return
        with self._lock, open(self.path, "a") as handle:
            handle.write(lines)
            handle.flush()
            os.fsync(handle.fileno())


def select_specs(family: Sequence[KernelSpec], patterns: Sequence[str]) -> list[KernelSpec]:
    if not patterns:
        return list(family)
    return [s for s in family if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]


def settings_key(settings: Mapping[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# -- validating and timing -----------------------------------------------------------

def validate_all(harness: Path, target: Target, specs: Sequence[KernelSpec],
                 objects: Mapping[str, build.ObjectResult], journal: Journal,
                 advance: Callable[..., None], jobs: int) -> None:
    """Validate every kernel the journal has no verdict for, ``jobs`` harnesses at a time.

    Validation checks numbers, not speed, so it may use every core (timing may
    not).  Each harness runs in a session of its own, so Ctrl-C reaches only this
    process: the chunks under way finish, nothing more is started, and what
    finished is in the journal for the next run.
    """
    todo = [s.name for s in specs if objects[s.name].hash not in journal.validations]
    advance(len(specs) - len(todo))

    def record(names: Sequence[str], results: Mapping[str, measure.ValidationResult]) -> None:
        journal.append({"kind": "validate", "hash": objects[n].hash, "name": n,
                        "status": results[n].status, "reason": results[n].reason} for n in names)
        journal.validations.update({objects[n].hash: {"status": results[n].status,
                                                      "reason": results[n].reason} for n in names})

    # Chunks small enough that both harnesses stay busy to the end.
    size = max(8, min(CHUNK, -(-len(todo) // (2 * max(1, jobs)))))
    chunks = list(_chunks(todo, size))
    if jobs <= 1 or len(chunks) <= 1:
        for names in chunks:
            record(names, measure.validate(harness, target, names, progress=advance))
        return
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(measure.validate, harness, target, names, progress=advance): names
                   for names in chunks}
        for future in as_completed(futures):
            record(futures[future], future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


#: A grid point is timed again (up to RETIME_TRIES times, the steadier sample kept)
#: when its samples look disturbed by more than this fraction:
#: - the core's pace (a loop that loads and multiplies like a kernel, run by the
#:   harness beside every point: pace_t.h) under STEADY of that loop's speed on
#:   the core left alone (PaceReference): the core ran slow, for another virtual
#:   machine on its SMT sibling or a lower clock.  Neither shows in the load
#:   figures the crossover sweeps watch; on a 2-vCPU Zen 3 VM one vCPU ran a 32^3
#:   fp64 plan at 25 GFLOPS against 43 on the other for seconds at a time.  A loop
#:   of FMAs alone missed most of it: on a 2-vCPU Xeon VM the kernels of whole
#:   harness runs came out at 0.6-0.7x their speed with it at 90-95 % of its peak,
#:   and one install's table kept fp64 16x8 at 60 GFLOPS (K = 64) against 85 for it
#:   in steady runs;
#: - the median repeat under STEADY of the best: something took the core during
#:   them.  In one install 5-8 % of the points' repeats spread that much.
STEADY = 0.85
RETIME_TRIES = 2


def median_pass(runs: Sequence[Sequence[dict]], peak: float | None = None) -> list[dict]:
    """One row per grid point (K, pad) from several passes' rows: the pass with the
    median speed (the slower middle one of an even count) among the steady ones
    (:func:`steady_only`).  A kernel one pass has no rows for (it crashed) gets none."""
    if not runs or any(not rows for rows in runs):
        return []
    points: dict[tuple, list[dict]] = {}
    for rows in runs:
        for row in rows:
            points.setdefault((row.get("K"), row.get("pad")), []).append(row)
    merged = []
    for rows in points.values():
        ordered = sorted(steady_only(rows, peak), key=lambda r: float(r["median_gflops"]))
        merged.append(ordered[(len(ordered) - 1) // 2])
    return merged


def steady_only(rows: Sequence[dict], peak: float | None) -> list[dict]:
    """The rows whose samples look undisturbed (:func:`steadiness`), or all of them
    when none do: a figure from a slowed core beats no figure."""
    return [r for r in rows if steadiness(r, peak) >= STEADY] or list(rows)


def steadiness(row: Mapping[str, Any], peak: float | None) -> float:
    """How undisturbed a grid point's samples look, 1 when fully: the lower of the
    core's pace over its ``peak`` (when both are known) and the median repeat over the best."""
    ratios = []
    pace = row.get("pace_gflops")
    if pace is not None and pace == pace and peak:  # (NaN: a row without one)
        ratios.append(float(pace) / peak)
    best, median = row.get("best_gflops"), row.get("median_gflops")
    if best and median is not None and best == best and median == median:
        ratios.append(float(median) / float(best))
    return min(ratios, default=1.0)


class PaceReference:
    """What a bench point's pace is judged against (:func:`steadiness`): the pace
    loop's speed on the core left alone, as far as this install has seen it.

    The harness measures it once per family, as the best of a few dozen runs over a
    tenth of a second, and a disturbance can outlast that: on a 2-vCPU Xeon VM one
    such measurement read 116 GFLOPS where the loop ran at 137-157 beside the
    points of undisturbed kernels, so points taken at 0.75x passed as steady.  A
    faster pace beside any point raises it: a core can be slowed, never sped up
    past itself.  None (unknown, as an emulator's) stays None.
    """

    def __init__(self, value: float | None = None) -> None:
        self.value = value

    def see(self, rows: Iterable[Mapping[str, Any]]) -> None:
        if self.value is None:
            return
        for row in rows:
            pace = row.get("pace_gflops")
            if pace is not None and pace == pace and float(pace) > self.value:
                self.value = float(pace)


class KernelTimer:
    """Times one harness's kernels under a measurement setting, through the journal:
    a kernel timed before (same object, same setting) is not timed again.

    A setting with ``passes`` times every kernel once per pass, all of them in
    turn, and keeps each point's median pass.  A kernel with a grid point whose
    samples look disturbed (:func:`steadiness` under STEADY; ``peak`` is the
    speed of the harness's pace loop on the core left alone, in GFLOPS, None when
    unknown, or a :class:`PaceReference` the timers of one family share) is timed
    again;
    ``retimed`` and ``unsteady`` name the kernels timed again and those still
    disturbed after the last try.
    """

    def __init__(self, harness: Path, target: Target, objects: Mapping[str, build.ObjectResult],
                 journal: Journal, progress: Progress | None, label: str,
                 peak: float | PaceReference | None = None) -> None:
        self.harness, self.target, self.objects, self.journal = harness, target, objects, journal
        self.progress, self.label = progress, label
        self.pace = peak if isinstance(peak, PaceReference) else PaceReference(peak)
        # Under an emulator a timing measures the emulator: one pass, kept as it came.
        self.emulated = bool(getattr(target, "under_emulator", False))
        self.retimed: set[str] = set()
        self.unsteady: set[str] = set()

    @property
    def peak(self) -> float | None:
        return self.pace.value

    def rows(self, spec: KernelSpec, settings: Mapping[str, Any]) -> list[dict]:
        return self.journal.benches.get((self.objects[spec.name].hash, settings_key(settings))) or []

    def _disturbed(self, rows: Sequence[Mapping[str, Any]]) -> bool:
        return any(steadiness(r, self.peak) < STEADY for r in rows)

    def _bench(self, names: Sequence[str], settings: Mapping[str, Any], task: Any,
               place: int = 0) -> dict[str, list[dict]]:
        frame = measure.bench(self.harness, self.target, names, ks=settings["ks"], pads=settings["pads"],
                              min_time_ms=settings["min_time_ms"], repeats=settings["repeats"],
                              progress=_advance(self.progress, task), place=place)
        # One pass over the rows: a filtered frame per kernel cost 23 s of a Zen 5 install.
        rows: dict[str, list[dict]] = {n: [] for n in names}
        records = frame.to_dict("records")
        for row in records:
            rows[row["kernel"]].append(row)
        self.pace.see(records)
        return rows

    def _store(self, rows: Mapping[str, list[dict]], skey: str) -> None:
        self.journal.append({"kind": "bench", "hash": self.objects[n].hash, "settings": skey, "rows": r}
                            for n, r in rows.items() if r)
        self.journal.benches.update({(self.objects[n].hash, skey): r for n, r in rows.items() if r})

    def time(self, specs: Sequence[KernelSpec], settings: Mapping[str, Any], what: str = "measure") -> int:
        """Time the kernels not yet timed under ``settings``; returns how many were."""
        skey = settings_key(settings)
        todo = [s.name for s in specs if (self.objects[s.name].hash, skey) not in self.journal.benches]
        progress = self.progress
        task = _grown_task(progress, f"{what} {self.label}", len(specs))
        if progress:
            progress.advance(task, len(specs) - len(todo))
        passes = 1 if self.emulated else int(settings.get("passes", 1))
        _grown_task(progress, f"{what} {self.label}", (passes - 1) * len(todo))
        runs: dict[str, list[list[dict]]] = {n: [] for n in todo}

        def timed_again(names: Sequence[str]) -> None:
            # Passes after the first move the operands within their pages (harness
            # --place): each pass its own placement, as a user's matrices have theirs.
            runs_so_far = max((len(runs[n]) for n in names), default=0)
            for chunk in _chunks(names, CHUNK):
                rows = self._bench(chunk, settings, task, place=runs_so_far if passes > 1 else 0)
                for n in chunk:
                    runs[n].append(rows[n])
                if passes == 1:  # one pass: journal each chunk as it ends
                    self._store({n: self.merged(runs[n], passes) for n in chunk}, skey)

        for number in range(passes):
            # A kernel that crashed is not run again: its first pass has no rows.
            timed_again([n for n in todo if number == 0 or runs[n][0]])

        def disturbed() -> list[str]:
            return [n for n in todo if runs[n] and runs[n][0] and self._disturbed(self.merged(runs[n], passes))]

        for _ in range(0 if self.emulated else RETIME_TRIES):
            again = disturbed()
            if not again:
                break
            _grown_task(progress, f"{what} {self.label}", len(again))
            self.retimed.update(again)
            timed_again(again)
        if passes > 1:
            self._store({n: self.merged(r, passes) for n, r in runs.items()}, skey)
        self.unsteady.update(disturbed())
        return sum(1 for n in todo if (self.objects[n].hash, skey) in self.journal.benches)

    def merged(self, runs: Sequence[Sequence[dict]], passes: int) -> list[dict]:
        """A kernel's rows from its runs: the median pass of a setting of several
        passes (:func:`median_pass`), else per grid point the steadiest run (the
        repeats' spread and the core's pace decide); a first run without rows (a
        crash) gives none."""
        if not runs or not runs[0]:
            return []
        if passes > 1:
            return median_pass(runs, self.peak)
        kept = {}
        for rows in runs:
            for row in rows:
                point = (row.get("K"), row.get("pad"))
                if point not in kept or steadiness(row, self.peak) > steadiness(kept[point], self.peak):
                    kept[point] = row
        return list(kept.values())


def screen(timer: KernelTimer, specs: Sequence[KernelSpec], leaders: dict[tuple, tuple[KernelSpec, float]],
           speed: dict[KernelSpec, float | None]) -> tuple[list[KernelSpec], dict[KernelSpec, str]]:
    """Time every kernel briefly; keep for the full grid only those that may still be selected.

    Kernels computing the same block (table.selection_key: other ISAs, other
    unrolls) compete for one place in the library.  One that is SCREEN_MARGIN
    slower than the best of its block at the screening depth (``leaders``, kept
    across families and updated here) cannot win the mean over the grid, so its
    full timing is skipped: successive halving with one rung.  Returns
    (contenders, {screened-out kernel: why}) and adds each kernel's screening
    speed to ``speed``; a kernel that crashed while screened stays a contender,
    for the full run to name.
    """
    timer.time(specs, SCREEN_SETTINGS, what="screen")
    for spec in specs:
        rows = timer.rows(spec, SCREEN_SETTINGS)
        speed[spec] = max((float(r["median_gflops"]) for r in rows), default=None)
        key = table.selection_key(spec)
        if speed[spec] is not None and (key not in leaders or speed[spec] > leaders[key][1]):
            leaders[key] = (spec, speed[spec])
    contenders, screened = [], {}
    for spec in specs:
        leader, best = leaders.get(table.selection_key(spec), (None, None))
        gflops = speed[spec]
        if gflops is None or leader is None or leader == spec or gflops >= (1 - SCREEN_MARGIN) * best:
            contenders.append(spec)
        else:
            screened[spec] = (f"screened out: {gflops:.1f} GFLOPS at K = {SCREEN_SETTINGS['ks'][0]} "
                              f"against {best:.1f} for {leader.name}")
    return contenders, screened


#: Kernels of a lower ISA timed to decide whether a higher one dominates it.
DOMINANCE_SAMPLE = 12


def dominance_sample(covered: Sequence[KernelSpec], size: int = DOMINANCE_SAMPLE) -> list[KernelSpec]:
    """An even spread of ``covered`` (blocks a higher family already computes) over
    dtypes, transpositions and tile sizes; empty when there are too few to be worth it."""
    if len(covered) < 2 * size:
        return []
    ordered = sorted(covered, key=lambda s: (s.dtype, s.trans, s.mr * s.nr, s.mr, s.nr, s.variant, s.unroll))
    step = len(ordered) / size
    return [ordered[int(i * step + step / 2)] for i in range(size)]


def dominated(sample: Sequence[KernelSpec], speed: Mapping[KernelSpec, float | None],
              leaders: Mapping[tuple, tuple[KernelSpec, float]]) -> dict[str, Any]:
    """Where another family dominates the sampled one: the tile areas (mr x nr) to build.

    A narrower ISA keeps up with a wider one on small tiles, whose few columns
    leave the wide vectors half empty, and falls behind on large ones.  So the
    sample is read by tile area: every covered block smaller than the first
    sampled area above the largest one where the sampled kernel was competitive
    (within SCREEN_MARGIN of its block's leader, or unknown: it did not validate
    or crashed) is built; the larger ones are not.  ``{"area_limit": A, "by":
    isas, "worst_ratio": the best ratio above the limit}``; an area_limit of None
    means build everything (the sample never lost its block).
    """
    entries = []
    for spec in sample:
        mine = speed.get(spec)
        leader, best = leaders.get(table.selection_key(spec), (None, None))
        beaten = bool(mine) and leader is not None and leader.isa != spec.isa and bool(best) \
            and mine < (1 - SCREEN_MARGIN) * best
        entries.append((spec.mr * spec.nr, beaten, mine / best if beaten else None,
                        leader.isa if beaten else None))
    entries.sort(key=lambda e: e[0])
    competitive = [area for area, beaten, _, _ in entries if not beaten]
    above = [e for e in entries if not competitive or e[0] > max(competitive)]
    if not above:
        return {"area_limit": None}
    return {"area_limit": above[0][0], "by": ", ".join(sorted({e[3] for e in above})),
            "worst_ratio": round(max(e[2] for e in above), 3)}


# -- progress ------------------------------------------------------------------------

def make_progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<22}"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def _grown_task(progress: Progress | None, description: str, more: int) -> Any:
    """The progress task called ``description``, its total grown by ``more`` (a new one
    the first time): the waves of one stage share a bar."""
    if progress is None:
        return None
    for task in progress.tasks:
        if task.description == description:
            progress.update(task.id, total=(task.total or 0) + more)
            return task.id
    return progress.add_task(description, total=more)


def _advance(progress: Progress | None, task: Any) -> Callable[..., None]:
    def advance(advance: int = 1, **_: Any) -> None:
        if progress is not None:
            progress.advance(task, advance)
    return advance


# -- the pipeline ----------------------------------------------------------------------

def _install(options: InstallOptions, console: Console | None, host: HostInfo | None) -> InstallResult:
    started = time.monotonic()
    console = console or Console(stderr=True)
    root = ensure_writable(options.home or default_home())
    host = host or detect()
    provenance, targets = resolve_targets(options.target, host, options.svl_bits)
    svls = svl_sets(targets, options.svl_bits)
    mode = "quick" if options.quick else "exhaustive" if options.exhaustive else "default"
    settings = MEASURE_SETTINGS[mode]
    journal = Journal(root / "journal" / f"{options.target}-{host.fingerprint}.jsonl", fresh=options.force)

    # A bad shape record fails now, not after minutes of compiling.
    extra = recorded_shapes(options.shapes)
    kernel_specs = select_specs(families.default_family(targets, quick=options.quick, svls=svls), options.only)
    if not kernel_specs:
        raise InstallError(f"no kernel of {', '.join(targets)} matches {' '.join(options.only)}")
    records: dict[str, KernelRecord] = {}
    measurement_rows: list[dict] = []  # every timed grid point, one frame at the end
    peaks: dict[str, dict[str, float]] = {}
    paces: dict[str, PaceReference] = {}  # per family, the pace loop's speed on the core left alone
    compiled = measured = 0
    notes: list[str] = []
    all_objects: dict[str, build.ObjectResult] = {}
    skipped: dict[str, dict[str, Any]] = {}  # families left unbuilt where a higher one dominates

    show = console.is_terminal or os.environ.get("AUTOTUNE_PROGRESS") == "1"
    jobs = options.jobs or build.default_jobs()
    # The cores of the kernel stage: compilers take what the timing of finished
    # kernels and the quantised stage leave (build.CoreBudget).
    cores = build.CoreBudget(jobs)
    arm = any(isa in families.ARM_ISAS for isa in targets)

    def quant_stages() -> list[qsuite.QuantStage | None]:
        # Its own compile, validation and single-core timing, on one core beside
        # the float kernels' stage: it needs nothing of theirs.
        with cores.core(first=True):
            return [qsuite.run_stage(target, root, options.only, options.quick, journal)
                    for target in targets.values()]

    beside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quant")
    quant_future = None if arm else beside.submit(quant_stages)
    # The fastest kernel screened so far for each block, across families: a lower
    # ISA's kernel competes with a higher one's for the same place.
    leaders: dict[tuple, tuple[KernelSpec, float]] = {}
    screen_speed: dict[KernelSpec, float | None] = {}
    timers: dict[str, KernelTimer] = {}  # the harness that timed each kernel

    def run_batch(isa: str, label: str, target: Target, specs: Sequence[KernelSpec],
                  progress: Progress | None) -> None:
        """Compile, validate and time ``specs`` (one family's, or a part of it).

        The kernels are validated and timed in waves as their units finish
        compiling, each wave holding one core (build.CoreBudget) while the
        compilers of the rest keep the others: timing alone would leave all but
        one core idle for a quarter of the stage.
        """
        nonlocal compiled
        by_name = {s.name: s for s in specs}
        finished: queue.Queue = queue.Queue()
        task = progress.add_task(f"compile {label}", total=len(specs)) if progress else None
        sources = [codegen.generate(spec) for spec in specs]
        wave_size = max(1, -(-len(specs) // WAVES))
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile") as background:
            compiling = background.submit(build.build_kernels, target, sources, jobs=jobs, force=options.force,
                                          home=root, progress=_advance(progress, task),
                                          on_unit=finished.put, cores=cores)
            compiling.add_done_callback(lambda _: finished.put(None))
            try:
                ready: list[build.ObjectResult] = []
                done = False
                while not done:
                    items = [finished.get()]  # blocks until a unit (or the build) ends
                    while not finished.empty():
                        items.append(finished.get_nowait())
                    for item in items:
                        if item is None:
                            done = True
                        else:
                            ready.extend(item)
                    if done or len(ready) >= wave_size:
                        with cores.core(first=True):
                            measure_wave(isa, label, target, [by_name[r.name] for r in ready],
                                         {r.name: r for r in ready}, progress, jobs if done else 1)
                        ready = []
            except BaseException:
                build.interrupt_compilers()
                raise
            built = compiling.result()
        compiled += built.compiled
        for name, error in built.failures.items():
            if name not in records:  # failed before any unit ran (two sources for one name)
                records[name] = KernelRecord(by_name[name], "rejected", "compile error: " + _first_line(error))
        if not built.objects:
            notes.append(f"{label}: no kernel compiled")

    def measure_wave(isa: str, label: str, target: Target, specs: Sequence[KernelSpec],
                     results: Mapping[str, build.ObjectResult], progress: Progress | None,
                     validate_jobs: int) -> None:
        """Validate and time the kernels of one wave of finished compiles."""
        nonlocal measured
        for spec in specs:
            result = results[spec.name]
            if not result.ok:
                records[spec.name] = KernelRecord(spec, "rejected", "compile error: "
                                                  + _first_line(result.error or "no object"))
        ok_specs = [s for s in specs if results[s.name].ok]
        if not ok_specs:
            return
        objects = {s.name: results[s.name] for s in ok_specs}
        all_objects.update(objects)
        harness = build.build_harness(target, [objects[s.name] for s in ok_specs], home=root)

        # Validate before timing: a kernel that computes wrong numbers is never measured.
        task = _grown_task(progress, f"validate {label}", len(ok_specs))
        validate_all(harness, target, ok_specs, objects, journal, _advance(progress, task), validate_jobs)

        # The core's peak and its pace loop's, once per family: every wave's harness runs the same loops.
        if not target.emulated and isa not in peaks:
            harness_key = harness.name
            if (isa, harness_key) not in journal.peaks:
                peak = measure.peak(harness, target)
                journal.append([{"kind": "peak", "isa": isa, "harness": harness_key, "gflops": peak}])
                journal.peaks[(isa, harness_key)] = peak
            found = journal.peaks[(isa, harness_key)]
            peaks[isa] = {dtype: found[dtype] for dtype in ("f32", "f64") if dtype in found}
            paces[isa] = PaceReference(found.get("pace"))

        valid = [s for s in ok_specs if journal.validations[objects[s.name].hash]["status"] == "validated"]
        for spec in ok_specs:
            verdict = journal.validations[objects[spec.name].hash]
            if verdict["status"] != "validated":
                records[spec.name] = KernelRecord(spec, "rejected", verdict["reason"], objects[spec.name].hash)

        # Timings under emulation mean nothing: emulated kernels are validated, not timed.
        if target.emulated:
            for spec in valid:
                records[spec.name] = KernelRecord(spec, "validated", object_hash=objects[spec.name].hash,
                                                  model_score=round(families.model_score(spec), 3))
            return
        timer = KernelTimer(harness, target, objects, journal, progress, label, paces.get(isa))
        timers.update({s.name: timer for s in valid})
        if options.exhaustive:
            contenders, screened = valid, {}
        else:
            contenders, screened = screen(timer, valid, leaders, screen_speed)
            for spec, reason in screened.items():
                rows = timer.rows(spec, SCREEN_SETTINGS)
                measurement_rows.extend(rows)
                records[spec.name] = replace(_measured_record(spec, objects[spec.name].hash, rows),
                                             gflops_by_k=(), reason=reason)
        measured += timer.time(contenders, settings)
        for spec in contenders:
            rows = timer.rows(spec, settings)
            if not rows:
                records[spec.name] = KernelRecord(spec, "rejected", "crashed while being timed",
                                                  objects[spec.name].hash)
                continue
            measurement_rows.extend(rows)
            records[spec.name] = _measured_record(spec, objects[spec.name].hash, rows)

    with (make_progress(console) if show else nullcontext()) as progress:
        for isa, label, target, isa_specs in kernel_groups(targets, kernel_specs, host):
            covered = [s for s in isa_specs if table.selection_key(s) in leaders]
            sample = dominance_sample(covered) if not (options.exhaustive or target.emulated) else []
            if not sample:
                run_batch(isa, label, target, isa_specs, progress)
                continue
            # A lower ISA is built first for a sample of the blocks a higher family
            # computes; the rest of those blocks only up to the tile size where the
            # sample stopped keeping up (dominated()).
            chosen_sample = set(sample)
            rest = [s for s in covered if s not in chosen_sample]
            rest_set = set(rest)
            run_batch(isa, f"{label} (sample)", target,
                      [s for s in isa_specs if s not in rest_set], progress)
            beaten = dominated(sample, screen_speed, leaders)
            limit = beaten["area_limit"]
            build_rest = [s for s in rest if limit is None or s.mr * s.nr < limit]
            if build_rest:
                run_batch(isa, label, target, build_rest, progress)
            if limit is not None and len(rest) > len(build_rest):
                left = len(rest) - len(build_rest)
                skipped[isa] = {"kernels": left, "sampled": len(sample), **beaten}
                notes.append(f"{isa}: {left} kernels of tiles of {limit} elements or more not built: "
                             f"every sampled one lost its block to {beaten['by']} by "
                             f"{100 * (1 - beaten['worst_ratio']):.0f}% or more")

    # The runtime C does not depend on which kernels win: it compiles on the core
    # the confirmation's timing leaves idle.
    runtime_target = next(iter(targets.values()))
    precompiled = None if arm or runtime_target.emulated else beside.submit(
        precompile_runtime, runtime_target, root)
    records.update(confirm_leaders(records, timers))
    unique_timers = {id(t): t for t in timers.values()}.values()
    retimed = set().union(*(t.retimed for t in unique_timers))
    if retimed:
        unsteady = set().union(*(t.unsteady for t in unique_timers))
        notes.append(f"timing: {len(retimed)} kernels timed again: the core ran under {STEADY:.0%} of its pace "
                     f"loop's speed, or their repeats spread by more than {1 - STEADY:.0%}" +
                     (f"; {len(unsteady)} still so after {RETIME_TRIES} more tries (their steadiest samples kept)"
                      if unsteady else ""))

    # The quantised kernels (qmatmul): validated (and, natively on x86, timed) in the
    # crash-isolated driver; an Arm library links the ones its validation passed.
    quant: dict[str, Any] = {}
    stages = [qsuite.run_arm_stage(targets, root, journal)] if quant_future is None else quant_future.result()
    if precompiled is not None:
        precompiled.result()
    beside.shutdown()
    for target, stage in zip(targets.values(), stages):
        if stage is not None:
            quant = stage.settings()
            if not stage.selected:
                notes.append(f"{target.isa}: no quantised kernel validated; qmatmul uses portable code")
    ordered = tuple(records[s.name] for s in kernel_specs if s.name in records)
    selection = table.select_kernels(ordered)
    chosen = [records[name] for name in selection]
    stored = TunedTable(
        target=options.target,
        host=emulated_host(targets, host) if any(t.emulated for t in targets.values()) else host,
        provenance=provenance,
        peak_gflops=_best_peak(peaks, ordered),
        kernels=ordered,
        measurements=pd.DataFrame(measurement_rows) if measurement_rows
        else pd.DataFrame(columns=table.MEASUREMENT_COLUMNS),
        selection=selection,
        # An emulated table's blocking comes from the model alone: this machine's
        # caches say nothing about the Arm CPU it will run on.
        params=default_params(host if provenance != "emulated" else None, main_kernels(chosen),
                              provenance=provenance),
        settings={"mode": mode, **settings, "isas": list(targets), "peak_by_isa": peaks,
                  **({"dominated": skipped} if skipped else {}),
                  **({"svl_bits": list(svls)} if svls else {}), **({"quant": quant} if quant else {}),
                  **({"upper_halves": upper} if (upper := upper_halves_record(targets)) else {}),
                  "quant_library": library_qkernels(targets, quant)},
    )
    # The library is built and tuned in a staging directory; the table and its
    # library then replace the previous pair together (commit), so an interrupted
    # or failed run leaves the previous pair, never a new library beside an old table.
    staging = staging_dir(options.target, root)
    library: LibraryBuild | None = None
    if chosen:
        library = build_table_library(stored, targets, all_objects, root, staging)
    native = library is not None and not any(t.emulated for t in targets.values())
    if native and library.extension is None:
        # Found on a Debian arm64 userland without python3-dev: the library works from C,
        # but autotune.gemm would quietly compute with numpy.
        notes.append("no Python headers: the _atfast extension was not built and autotune.gemm falls back "
                     "to numpy; install them (Debian: python3-dev) and run `autotune install --force`")
    if native:
        stored, library = tune_and_rebuild(stored, library, targets, all_objects, root, options, console,
                                           show, extra, started)
    path, installed = commit(stored, library, root)
    if native and installed is not None:
        from .plans.examples import record_example_plans  # the report's shapes

        record_example_plans(options.target, installed, root)
    return InstallResult(stored, path, compiled, measured, time.monotonic() - started, tuple(notes), installed)


def library_qkernels(isas: Iterable[str], quant: Mapping[str, Any]) -> list[dict[str, str]]:
    """The quantised kernels the library for ``isas`` links, as its at_qkernel_name lists
    them (preferred first): name, kind of weights, form (tile, gemv, za) and the CPU
    features it needs (:func:`autotune.families.quant_kernels`).  The table records
    them for `autotune show`: an Arm library cannot be asked in this process, and its
    choice is made where it runs.
    """
    verdicts = quant.get("verdicts") or {}
    return [{"name": k.name, "kind": k.kind, "form": k.form, "needs": " ".join(k.features),
             **({"verdict": verdicts[k.name]} if k.name in verdicts else {})}
            for k in families.quant_kernels(isas, quant.get("selected"))]


def install(options: InstallOptions = InstallOptions(), console: Console | None = None,
            host: HostInfo | None = None) -> InstallResult:
    """Run the pipeline with the home's install lock held (one install per home at a time).

    Raises :class:`~autotune.home.HomeBusyError` at once when another install runs there.
    """
    root = ensure_writable(options.home or default_home())
    with install_lock(root):
        # Under the lock no other run is using a staging folder: any there is left
        # by a run that was killed, and only takes space.
        for stale in sorted((root / "lib").glob(".staging-*")):
            shutil.rmtree(stale, ignore_errors=True)
        try:
            return _install(options, console, host)
        finally:
            shutil.rmtree(staging_dir(options.target, root), ignore_errors=True)


def staging_dir(target: str, home: Path | None = None) -> Path:
    """Where this run builds and tunes its library before the commit; removed when it ends.

    Named after the process, so no two runs can ever share one (the lock makes
    sure of it too); the objects it links come from the build cache.
    """
    return (home or default_home()) / "lib" / f".staging-{target}-{os.getpid()}"


@contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT waits until the block ends (then it interrupts as usual).

    Held at Python's level, not by the main thread's signal mask: with SIGINT
    blocked there, the kernel hands it to another thread (the library's workers,
    loaded for tuning, or a pipe reader), Python's handler still raises in the
    main thread at once, and the commit was cut in the middle.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # not ours to change: another thread, or a handler installed outside Python
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        signal.raise_signal(signal.SIGINT)  # to the handler that is back (ignored stays ignored)


def commit(stored: TunedTable, staged: LibraryBuild | None, root: Path) -> tuple[Path, Path | None]:
    """Install the staged library's files and the table as one step: (table, library) paths.

    Each file is replaced atomically (a process that loaded the old library keeps
    its mapping), and Ctrl-C is held off for the few milliseconds the copies and
    the table take, so a second Ctrl-C cannot leave the pair mixed.
    """
    final = library_dir(stored.target, root)
    with _sigint_held():
        installed = None
        if staged is not None:
            final.mkdir(parents=True, exist_ok=True)
            files = sorted(p for p in staged.library.parent.iterdir() if p.is_file())
            # The hash stamp last: it tells a later build that the rest is complete.
            files.sort(key=lambda p: p.name.endswith(".hash"))
            for src in files:
                tmp = final / f".{src.name}.{os.getpid()}.tmp"
                shutil.copy2(src, tmp)
                files_mod.replace(tmp, final / src.name)
            installed = final / staged.library.name
            write_pc(final)
        path = table.save(stored, root)
    return path, installed


def tune_and_rebuild(stored: TunedTable, library: LibraryBuild, targets: Mapping[str, Target],
                     objects: Mapping[str, build.ObjectResult], root: Path, options: InstallOptions,
                     console: Console, show: bool, extra: Sequence["SuiteShape"] = (),
                     started: float | None = None) -> tuple[TunedTable, LibraryBuild]:
    """Measure the planner's decisions on the freshly built library; bake in what won.

    Three parameter sets compete: the model's (from the caches the OS reports,
    what the library was built with, but for the edge code's speed, timed here
    first), the measured one (the model's with the
    packing and thread crossovers timed on this host, :mod:`autotune.crossovers`),
    and the tuned one (optuna's search from the measured set).  Shapes the search
    never saw decide which is stored (:func:`autotune.tune.judge`); the library is
    rebuilt when that is not what it was built with.  A budget of zero (the quick install)
    skips the search, not the measurements; without one (``options.budget_s``) the
    search gets what is left of the install's aim since ``started`` (its
    ``time.monotonic()``; :func:`autotune.tune.default_budget`).  ``extra``: a
    program's recorded shapes, which join the search's suite.
    """
    from .crossovers import (BUSY_LOAD, FULL, QUICK, measure_crossovers, measure_edge, measure_main_kernel,
                             measure_place_kernel, measure_thread_cost, probe_shapes, quiet_wait_s, specs_for,
                             wait_for_quiet)
    from .params import DTYPES, PlannerParams
    from .suite import LibraryRunner, default_suite, held_out_suite
    from .tune import QUICK_BUDGET_S, default_budget, tune

    started = time.monotonic() if started is None else started

    if stored.provenance == "emulated":
        # A whole userland under a user-mode emulator: every time is the emulator's, so
        # nothing measured here may decide; the model's parameters stay, said as such.
        return stored, library
    budget = options.budget_s
    dtypes = tuple(dt for dt in DTYPES if any(r.spec.dtype == dt for r in stored.selected())) or DTYPES
    built = PlannerParams.from_mapping(stored.params)
    # The suite's plans are not the user's workload: never recorded as if they were.
    os.environ.pop("AUTOTUNE_RECORD", None)
    runner = LibraryRunner(library.library, seed=options.seed)
    try:
        tn_dtypes = {r.spec.dtype for r in stored.selected() if r.spec.trans_a and not r.spec.trans_b}
        sweeps = specs_for(dtypes, stored.host.cores, tn_dtypes)
        load = wait_for_quiet(quiet_wait_s(),
                              say=lambda text: console.print(f"[yellow]note:[/] {text}", soft_wrap=True))
        busy = load is not None and load >= BUSY_LOAD
        quant = dict(stored.settings.get("quant") or {})
        split_quant = bool(quant.get("selected")) and stored.host.cores > 1
        total = 2 * len(dtypes) + 1 + sum(len(s.sides) for s in sweeps) + \
            (len(qsuite.THREAD_SIDES) if split_quant else 0)
        effort = QUICK if options.quick else FULL
        with (make_progress(console) if show else nullcontext()) as progress:
            task = progress.add_task("measure crossovers", total=total) if progress else None
            # The edge code's speed is a fact about the code, like a kernel's: every
            # candidate set plans with it, the model's included.
            edges = {}
            for dt in dtypes:
                edges[dt] = measure_edge(runner, built, dt, float(stored.peak_gflops.get(dt, 0.0)),
                                         rounds=2 if options.quick else 3)
                _advance(progress, task)()
            model = built
            for dt, edge in edges.items():
                model = model.with_values(dt, {"edge_frac": edge.frac})
            # So is which kernel runs the packed blocks best: every set plans with it too.
            values = runner.kernel_values()
            mains, places = {}, {}
            for dt in dtypes:
                mains[dt] = measure_main_kernel(runner, model, dt, main_candidates(stored, dt, values),
                                                rounds=2 if options.quick else 3, busy=busy)
                model = model.with_values(dt, {"pack_kernel": mains[dt].value})
                # And which runs products read in place, per transposition.
                for trans in TRANSPOSITIONS:
                    candidates = place_candidates(stored, dt, trans, values)
                    if candidates:
                        place = measure_place_kernel(runner, model, dt, trans, candidates,
                                                     rounds=2 if options.quick else 3, busy=busy)
                        places[f"{dt} {trans}"] = place
                        model = model.with_values(dt, {place.param: place.value})
                _advance(progress, task)()
            # And what a threaded call costs beyond its share: the thread sweep then
            # times splits that are taken only where they pay.
            thread_cost = measure_thread_cost(runner, model, stored.host.cores,
                                              rounds=2 if options.quick else 3, busy=busy)
            model = model.with_values("f32", {"thread_seconds": thread_cost.value})
            _advance(progress, task)()
            measured, found = measure_crossovers(runner, model, sweeps, _advance(progress, task), busy,
                                                 effort, meter=load_meter)
            if split_quant:
                # qmatmul's split over threads: GEMVs through the same library.
                timer = qsuite.LibraryGemvTimer(runner.lib, options.seed)
                try:
                    split = qsuite.thread_crossover(stored.host.cores, timer, busy, effort,
                                                    _advance(progress, task))
                finally:
                    timer.close()
                quant["thread_macs"] = qsuite.thread_macs(split, stored.host.cores)
            if progress:
                progress.update(task, completed=total)
        # The quantised split is no planner parameter: it joins the record, not the held-out check.
        recorded = (*found, split) if split_quant else found
        if budget is None:
            budget = QUICK_BUDGET_S if options.quick else default_budget(time.monotonic() - started)
        stored = replace(stored, params=measured.to_mapping(stored.params),
                         settings={**stored.settings, "crossovers": [c.to_dict() for c in recorded],
                                   "edge": {dt: e.to_dict() for dt, e in edges.items()},
                                   "main_kernel": {dt: m.to_dict() for dt, m in mains.items()},
                                   "place_kernel": {key: m.to_dict() for key, m in places.items()},
                                   "thread_cost": thread_cost.to_dict(),
                                   "other_load": None if load is None else round(load, 2),
                                   **({"quant": quant} if quant else {})})
        result = tune(stored, library.library, budget_s=budget, seed=options.seed, home=root,
                      console=console if show else None, runner=runner,
                      suite=default_suite(dtypes, extra))
        if result.interrupted:
            # The trials are in the study database for the next run to resume; this
            # run ends here and the previous table and library stay.
            raise KeyboardInterrupt
        tuned = PlannerParams.from_mapping(result.params)
        anchored = with_measured_crossovers(tuned, found)
        # Untuned (a zero budget, or nothing won its confirmation), the search's result is
        # the measured set itself: it competes under that name.
        candidates = {**({ANCHORED: anchored} if result.kept and anchored != tuned else {}),
                      **({"tuned": tuned} if result.kept else {}), "measured": measured,
                      **each_crossover_alone(model, found), "model": model}
        # A quick install judges on one round and without the 1024^3 products.
        limit = 2.0 * 768**3 if options.quick else math.inf
        shapes = held_out_suite(dtypes, limit) + probe_shapes(found, limit, (tuned,) if result.kept else ())
        final, held_out = held_out_check(runner, candidates, found, shapes, 1 if options.quick else 2)
    finally:
        runner.close()
    record = dict(result.record)
    record["held_out"] = held_out
    if result.kept and held_out["chosen"] not in TUNED_SETS:
        # Faster on its own suite, not on shapes it never saw: fitted to the suite or to noise.
        record.update(kept=False, held_out_rejected=True, tuned_params=None, source="analytic")
    stored = replace(stored, params=final.to_mapping(stored.params), tuning=record)
    if final != built or (stored.settings.get("quant") or {}).get("thread_macs"):
        library = build_table_library(stored, targets, objects, root, library.library.parent)
    return stored, library


def main_candidates(stored: TunedTable, dtype: str, values: Mapping[str, int],
                    count: int | None = None) -> list[tuple[str, int]]:
    """The packed path's candidate main kernels of ``dtype``, as (name, ``pack_kernel``
    value): the library's fastest by their figures at the deepest depth measured, the
    fastest there in the grid's own rows, then per transposition the largest register
    blocks by the model (:func:`autotune.families.model_score`) among the kernels
    whose figure there is at least :data:`MODEL_FLOOR` of the best.

    A confirmation run through a slow minute lowers the kernels it re-times and
    leaves the rest at the grid's figures: one fresh install had fp64 NT 8x5 and
    8x6 at 25 and 30 GFLOPS after it (the grid: 49 and 48), under NT 6x4's
    unconfirmed 36, and the figures' four best ran a packed 512^3 at 24 GFLOPS or
    less.  The grid's leaders join the candidates, and the plans decide.

    The figures rank a kernel alone, its operands in L1 or streaming from L2 at
    the grid's depth; in a packed product the larger block loads less per FMA and
    is called fewer times.  On a 2-vCPU Xeon (AVX-512) the figures' six best f64
    kernels were all 8 rows tall (NT 8x7 81 GFLOPS at K = 256), and every one ran
    a packed 512^3 at 60-61 GFLOPS, where NN 24x8 and NN 32x5, at 63 and 62 in
    the grid, ran it at 70-71 (five interleaved rounds; 1024^3 and 2048^3 alike).
    """
    from .crossovers import MAIN_CANDIDATES

    count = count or MAIN_CANDIDATES
    mine = [r for r in stored.selected() if r.spec.dtype == dtype and r.gflops_by_k and r.name in values]
    by_figure = sorted(mine, key=lambda r: -max(r.gflops_by_k)[1])
    deepest = {r.name: max(r.gflops_by_k)[0] for r in mine}
    grid: dict[str, float] = {}
    frame = stored.measurements
    if len(frame) and {"kernel", "K", "median_gflops"} <= set(frame.columns):
        for name, k, g in zip(frame["kernel"], frame["K"], frame["median_gflops"]):
            if deepest.get(name) == k and g == g:
                grid[name] = max(grid.get(name, 0.0), float(g))
    by_grid = sorted(grid, key=lambda n: -grid[n])
    figure = {r.name: max(max(r.gflops_by_k)[1], grid.get(r.name, 0.0)) for r in mine}
    floor = MODEL_FLOOR * max(figure.values(), default=0.0)
    by_model: list[str] = []
    for trans in sorted({r.spec.trans for r in mine}):
        near = [r for r in mine if r.spec.trans == trans and figure[r.name] >= floor]
        near.sort(key=lambda r: (-families.model_score(r.spec), -figure[r.name]))
        by_model += [r.name for r in near[:count]]
    names = list(dict.fromkeys([r.name for r in by_figure[:count]] + by_grid[:count] + by_model))
    return [(name, values[name]) for name in names]


def place_candidates(stored: TunedTable, dtype: str, trans: str, values: Mapping[str, int],
                     count: int | None = None) -> list[tuple[str, int]]:
    """The candidate main kernels of ``dtype`` and ``trans`` for products read in place,
    as (name, ``place_kernel_<trans>`` value): the fastest by their figures at the
    depth nearest :data:`PLACE_K`, then the largest register blocks by the model
    (:func:`autotune.families.model_score`) among those whose figure there is at least
    :data:`MODEL_FLOOR` of the best.  Only kernels that read their operands in place
    (no packed format) can be one.

    The figures rank the kernels alone, where the blocks one vector tall lead; read
    in place the taller ones ran ahead (:func:`autotune.crossovers.measure_place_kernel`),
    and the model's ranking brings them in.
    """
    from .crossovers import MAIN_CANDIDATES

    count = count or MAIN_CANDIDATES
    mine = [r for r in stored.selected() if r.spec.dtype == dtype and r.spec.trans == trans
            and not r.spec.variant and r.gflops_by_k and r.name in values]

    def figure(r: KernelRecord) -> float:
        return min(r.gflops_by_k, key=lambda kg: (abs(math.log(kg[0] / PLACE_K)), -kg[0]))[1]

    by_figure = sorted(mine, key=lambda r: -figure(r))
    floor = MODEL_FLOOR * max((figure(r) for r in mine), default=0.0)
    by_model = sorted((r for r in mine if figure(r) >= floor), key=lambda r: (-families.model_score(r.spec), -figure(r)))
    names = list(dict.fromkeys([r.name for r in by_figure[:count]] + [r.name for r in by_model[:count]]))
    return [(name, values[name]) for name in names]


#: The depth whose figures rank the in-place candidates: products read in place from
#: AT_PLACE_FAVOUR_K (plan.c) on are what they run, and there a sliver of A of most
#: blocks fits L1, as in place.
PLACE_K = 64


#: How close to the best figure a kernel must be for the model to propose it as the
#: packed path's main kernel (main_candidates): the f64 blocks that won there were
#: at 0.76-0.77 of it.
MODEL_FLOOR = 0.7


#: The held-out check's name for the model's set with every measured crossover that held alone.
HELD = "measured crossovers that held"


def _held(verdict: HeldOutVerdict, name: str) -> bool:
    """Whether the set ``name`` ran the held-out shapes at least as fast as the model's."""
    gain = verdict.speedup(name, "model")
    return gain is not None and gain >= 1.0


def held_out_check(runner: SuiteRunner, candidates: Mapping[str, PlannerParams],
                   found: Sequence[Crossover], shapes: Sequence[SuiteShape],
                   rounds: int) -> tuple[PlannerParams, dict[str, Any]]:
    """The parameter set the held-out shapes keep, and the record of how they chose.

    ``candidates`` run from most measured to the model's (named ``model``), as
    :func:`autotune.tune.judge` takes them.  Where its winner is the model's set or
    one crossover alone, the crossovers that held alone join
    (:func:`crossovers_that_held`) and meet that winner and the model's again: two
    crossovers of one dtype may interact.
    """
    from .tune import judge

    model = candidates["model"]
    verdict = judge(runner, candidates, shapes, rounds)
    together = crossovers_that_held(verdict, model, found)
    extra: dict[str, Any] = {}
    if together is not None and verdict.chosen not in (*TUNED_SETS, "measured") \
            and all(together != params for params in candidates.values()):
        extra = {"alone": verdict.to_dict(),
                 "held": [name for name in _alone_names(model, found) if _held(verdict, name)]}
        candidates = {HELD: together, verdict.chosen: candidates[verdict.chosen], "model": model}
        verdict = judge(runner, candidates, shapes, rounds)
    record = {**verdict.to_dict(), "gain_over_model": verdict.gain("model"), **extra}
    return candidates[verdict.chosen], record


def crossovers_that_held(verdict: HeldOutVerdict, model: PlannerParams,
                         found: Sequence[Crossover]) -> PlannerParams | None:
    """The model's set with each measured crossover whose set alone (:func:`each_crossover_alone`)
    did not lose to the model's on the held-out shapes; None unless that is two or more.

    The check picks one set, and a set with one crossover wins at most one: an
    install kept its measured f32 packing threshold and dropped the f64 one, which
    no held-out shape had contradicted.  Each crossover stands on its own evidence.
    """
    params, held = model, 0
    for name, c in _alone_names(model, found).items():
        if _held(verdict, name):
            params, held = params.with_values(c.dtype, {c.param: c.value}), held + 1
    return params if held > 1 else None


def _alone_names(model: PlannerParams, found: Sequence[Crossover]) -> dict[str, Crossover]:
    """The measured crossovers that change the model's set, by their held-out names."""
    from .params import BY_NAME

    named = {}
    for c in found:
        if c.source in ("measured", "beyond") and model.with_values(c.dtype, {c.param: c.value}) != model:
            named[f"measured {c.param}" + (f" {c.dtype}" if BY_NAME[c.param].per_dtype else "")] = c
    return named


#: The searched set with the crossovers the sweeps measured in place of its own values.
ANCHORED = "tuned, measured crossovers"
#: The held-out verdicts that keep the search's work.
TUNED_SETS = (ANCHORED, "tuned")


def with_measured_crossovers(params: PlannerParams, found: Sequence[Crossover]) -> PlannerParams:
    """``params`` with every crossover the sweeps measured.

    The search moves the crossovers as freely as the rest, on a suite that may have
    no shape between its value and the measured one: a Zen 1 install's search took
    fp64 packing from 209^3 to 262^3, won the held-out check by 1.02x on a transposed
    shape its blocking ran 1.8x faster, and ran 256^3 from numpy at 0.88x its
    speed (1.07x with the measured value).  This set keeps the search's other values
    and comes before it in the check, which times both on squares between the two
    thresholds (crossovers.probe_shapes): the search's value stays only where it
    ran them faster.
    """
    from .params import BY_NAME

    for c in found:
        if c.source in ("measured", "beyond") and c.param in BY_NAME:
            params = params.with_values(c.dtype, {c.param: c.value})
    return params


def each_crossover_alone(model: PlannerParams, found: Sequence[Crossover]) -> dict[str, PlannerParams]:
    """The model's set with one measured crossover each, named ``measured <param> [<dtype>]``.

    The held-out check then keeps a crossover the measurements got right though another
    in the same set is wrong: one install measured packing from 215^3 (f32 448^3 and
    768x512x384 ran 1.5x and 1.2x faster) and threads from 152^3 (128^3 ran 1.5x slower
    on one thread), and the whole measured set lost to the model's.
    """
    sets = {name: model.with_values(c.dtype, {c.param: c.value})
            for name, c in _alone_names(model, found).items()}
    return sets if len(sets) > 1 else {}


def recorded_shapes(path: Path | None) -> tuple["SuiteShape", ...]:
    """The shapes a program recorded with AUTOTUNE_RECORD (:mod:`autotune.record`), for the suite."""
    if path is None:
        return ()
    from .record import RecordError, read_shapes

    try:
        return read_shapes(path)
    except RecordError as exc:
        raise InstallError(str(exc)) from None


#: Kernels per dtype, transposition and depth re-timed in rounds (confirm_leaders),
#: the rounds they take, and how many times at most the leaders are confirmed over
#: (until every transposition's top was timed in the same rounds).
CONFIRM_KERNELS = 3
CONFIRM_ROUNDS = 5
CONFIRM_ITERATIONS = 8


def rounds_figure(speeds: Sequence[float]) -> float:
    """A kernel's speed from its samples in interleaved rounds: the second fastest
    (the fastest of one or two).

    A shared host only ever slows a kernel down, and on a 2-vCPU VM it did so in
    most rounds: the peak loop ran at 48-93 of its 102 GFLOPS in eight harness runs
    a minute apart (2-vCPU Zen 3).  The median of five rounds had fp32 NN 16x6 at 78
    GFLOPS and 24x4 at 84, under the grid's 88 for 8x14, which three confirmations
    never reached (in a loop over a packed block they ran at 96, 97 and 83), so the
    packed path took 8x14 and fp32 large ran at 69-74 % of the peak.  The second
    fastest of rounds all contenders met alike is their speed on a core left alone,
    and no one fast moment decides.
    """
    ordered = sorted(speeds, reverse=True)
    return ordered[1] if len(ordered) > 2 else ordered[0]


def confirm_leaders(records: Mapping[str, KernelRecord], timers: Mapping[str, KernelTimer],
                    per_trans: int = CONFIRM_KERNELS, rounds: int = CONFIRM_ROUNDS,
                    iterations: int = CONFIRM_ITERATIONS) -> dict[str, KernelRecord]:
    """The fastest kernels of each transposition at every depth of the grid, re-timed
    there in interleaved rounds.

    The planner picks kernels by their speeds at the grid's depths, and the grid
    times each kernel in its own moments of a drifting machine, so the kernel
    that met a fast moment is the one picked.  At depth the packed path runs one
    kernel for nearly all of a large product, from the transposition whose best
    kernel is fastest at blk_k (plan.c, whose formats the packing then writes;
    :func:`main_kernels` sets the blocking from the NN one).  On a 2-vCPU VM one
    install's grid had fp32 16x3 at 100 GFLOPS and 24x4 at 90 (K = 256), and four
    rounds in turns had them at 75-82 and 79-83; another had fp64 TT 4x8 at 47
    GFLOPS (the packed path took it: fp64 1024^3 ran at 0.84x the speed of an
    install that took NT 8x6), and five rounds had it at 34 against 41 for NT 8x6.
    Each round times every contender once, so all of them meet the same slow and
    fast moments; :func:`rounds_figure` of the rounds the core kept its pace
    through replaces the grid's figure at that depth.  The top ``per_trans`` of each
    dtype and transposition are timed together at each depth, and all of them
    again while a transposition's top is then not the set just timed (a kernel
    confirmed lower hands its place to the next), ``iterations`` times at most:
    an install whose confirmation timed a transposition's new leaders in rounds
    of their own had fp64 TT 3x12 at 48.7 GFLOPS and NT 8x5 at 46.5 (rounds
    together afterwards: 38 and 41-45), took TT 3x12, and ran fp64 1024^3 at
    0.66x MKL.  Returns the records it changed.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for name, r in records.items():
        # (Timings under an emulator measure the emulator: nothing to confirm.)
        if r.status == "validated" and r.gflops_by_k and name in timers and not timers[name].emulated:
            groups.setdefault((r.spec.dtype, r.spec.trans), []).append(name)
    # A transposition's one kernel still competes with the others' (plan.c); a
    # dtype's one kernel has nothing to compete with.
    per_dtype = {dtype: sum(len(names) for (d, _), names in groups.items() if d == dtype)
                 for dtype, _ in groups}
    current = dict(records)

    def figure(name: str, k: int) -> float | None:
        return dict(current[name].gflops_by_k).get(k)

    depths = sorted({k for names in groups.values() for name in names for k, _ in records[name].gflops_by_k})
    for k in depths:
        timed_together: set[str] = set()
        slow_windows = 0
        for _ in range(iterations):
            contenders = []
            for (dtype, _), names in groups.items():
                ranked = sorted((n for n in names if figure(n, k) is not None), key=lambda n: -(figure(n, k) or 0.0))
                if per_dtype[dtype] > 1:
                    contenders += ranked[:per_trans]
            if set(contenders) <= timed_together:
                break
            # The leaders of every transposition in the same rounds, those confirmed
            # before too: a figure from other moments would decide between them again.
            speeds = _rounds([current[n] for n in contenders], timers, k, rounds)
            found = {n: round(rounds_figure(speeds[n]), 3) for n in contenders if speeds[n]}
            if found and not window_kept_pace(found, {n: figure(n, k) or 0.0 for n in found}):
                # Every kernel left out of these rounds keeps a figure from other moments:
                # the leaders' from a slow window would hand their blocks to them.
                slow_windows += 1
                if slow_windows > CONFIRM_SLOW_RETRIES:
                    break
                continue
            timed_together = set(contenders)
            for name, figure_k in found.items():  # (none: crashed in every round, keeps its figure)
                current[name] = replace(current[name], gflops_by_k=tuple(
                    (kk, figure_k if kk == k else g) for kk, g in current[name].gflops_by_k))
    return {name: r for name, r in current.items() if r is not records[name]}


#: Times a depth's confirmation is run again after a window that ran slow (window_kept_pace).
CONFIRM_SLOW_RETRIES = 2


def window_kept_pace(confirmed: Mapping[str, float], before: Mapping[str, float]) -> bool:
    """Whether a confirmation's rounds ran at the grid's pace: the median of the
    contenders' confirmed figures over their figures before is at least STEADY.

    One lucky grid figure confirms low alone; a window the host slowed confirms
    them all low.  A fresh install's rounds at K = 64 had fp32 NN 16x4 at 53 GFLOPS
    (grid 95), 24x3 at 45 (93) and 16x6 at 69 (89) while the unconfirmed 8x10 kept
    its 78, and the in-place tiler then covered 64^3 with 8x10 and 8x12 (2-vCPU Zen 3).
    """
    ratios = [confirmed[n] / before[n] for n in confirmed if before.get(n)]
    return not ratios or statistics.median(ratios) >= STEADY


def _rounds(contenders: Sequence[KernelRecord], timers: Mapping[str, KernelTimer], k: int,
            rounds: int) -> dict[str, list[float]]:
    """Each contender's speeds at depth k over ``rounds`` rounds, every round timing
    each once (one harness run per harness), those the core ran slow through left
    out unless no other round is left."""
    by_timer: dict[int, list[KernelRecord]] = {}
    for r in contenders:
        by_timer.setdefault(id(timers[r.spec.name]), []).append(r)
    samples: dict[str, list[dict]] = {r.spec.name: [] for r in contenders}
    for number in range(rounds):  # each round its own placement of the operands (harness --place)
        for group in by_timer.values():
            timer = timers[group[0].spec.name]
            frame = measure.bench(timer.harness, timer.target, [r.spec.name for r in group], ks=(k,),
                                  pads=(0,), min_time_ms=0.5, repeats=1, place=number)
            for row in frame.to_dict("records"):
                samples[row["kernel"]].append(row)
    return {name: [float(r["median_gflops"]) for r in steady_only(rows, timers[name].peak)]
            for name, rows in samples.items()}


def main_kernels(chosen: Sequence[KernelRecord]) -> dict[str, tuple[int, int]]:
    """Per dtype, the (mr, nr) of the fastest NN kernel at the deepest K measured: the
    packed path's workhorse (it runs at depth blk_k), whose shape sets the cache blocking."""
    def deep_speed(record: KernelRecord) -> float:
        if not record.gflops_by_k:
            return table.kernel_score(record)
        return max(record.gflops_by_k)[1]

    best: dict[str, KernelRecord] = {}
    for record in chosen:
        if record.spec.trans == "nn" and (record.spec.dtype not in best
                                          or deep_speed(record) > deep_speed(best[record.spec.dtype])):
            best[record.spec.dtype] = record
    return {dtype: (r.spec.mr, r.spec.nr) for dtype, r in best.items()}


def _measured_record(spec: KernelSpec, object_hash: str, rows: Sequence[Mapping[str, Any]]) -> KernelRecord:
    """A timed kernel's record: per K its fastest median over the tight layouts (pad 0)
    when it has them, else over all.  Plain rows, not a frame per kernel: building
    3,500 of those cost 5.8 s of an install."""
    tight = [r for r in rows if r["pad"] == 0] or list(rows)
    by_k: dict[int, float] = {}
    for row in tight:
        k = int(row["K"])
        by_k[k] = max(by_k.get(k, -math.inf), float(row["median_gflops"]))
    return KernelRecord(
        spec=spec,
        status="validated",
        object_hash=object_hash,
        best_gflops=max(float(r["best_gflops"]) for r in rows),
        gflops_by_k=tuple((k, round(g, 3)) for k, g in sorted(by_k.items())),
    )


def _best_peak(peaks: Mapping[str, Mapping[str, float]],
               records: Iterable[KernelRecord] = ()) -> dict[str, float]:
    """The host's peak per dtype: the fastest family's FMA throughput (the physical limit).

    A kernel cannot run faster than the core, so a validated kernel's best time is a
    lower bound on the peak too: the peak loop runs for a moment, and a moment of
    lower clock (seen here: 258.9 GFLOPS fp32 against kernels timed at 273) would
    otherwise inflate every "% of peak" the report and the benchmarks print.
    """
    best: dict[str, float] = {}
    for by_dtype in peaks.values():
        for dtype, gflops in by_dtype.items():
            best[dtype] = max(best.get(dtype, 0.0), float(gflops))
    for record in records:
        if record.validated and record.best_gflops and record.spec.dtype in best:
            best[record.spec.dtype] = max(best[record.spec.dtype], float(record.best_gflops))
    return best


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if "error" in line:
            return line.strip()
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
