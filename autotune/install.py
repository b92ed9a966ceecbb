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
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import pandas as pd
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from . import build, codegen, families, measure, qsuite, table
from . import files as files_mod
from .home import ensure_writable, home as default_home, install_lock
from .host import HostInfo, detect
from .specs import KernelSpec
from .table import KernelRecord, TunedTable, library_dir
from .link import LibraryBuild, build_table_library, default_params
from .pkgconfig import write_pc
from .toolchain import Target, native_isas, target_for

#: How kernels are timed. `quick` keeps the whole install near a minute on 2 cores.
#: K = 4 is where tiny products live: a kernel's call and set-up cost, not its
#: loop, decide there, and the tiler reads its choice for K <= 4 off that point.
MEASURE_SETTINGS: dict[str, dict[str, Any]] = {
    "default": {"ks": [4, 16, 64, 256], "pads": [0, 17], "min_time_ms": 1.0, "repeats": 3},
    "quick": {"ks": [64, 256], "pads": [0], "min_time_ms": 0.5, "repeats": 3},
}
#: Kernels per harness run: small enough that a crash or Ctrl-C loses little, large
#: enough that process start-up stays negligible.
CHUNK = 48


@dataclass(frozen=True)
class InstallOptions:
    target: str = "host"
    quick: bool = False
    force: bool = False
    jobs: int | None = None
    home: Path | None = None
    svl_bits: int | None = None  # the one SME2 vector length to build for (default: svl_sets)
    budget_s: float | None = None  # tuning time; None: tune.DEFAULT_BUDGET_S, or none with quick
    seed: int = 0  # tuning seed
    only: tuple[str, ...] = ()  # shell patterns on kernel names; empty means the whole family


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
        with open(self.path, "a") as handle:
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
    mode = "quick" if options.quick else "default"
    settings = MEASURE_SETTINGS[mode]
    skey = settings_key(settings)
    journal = Journal(root / "journal" / f"{options.target}-{host.fingerprint}.jsonl", fresh=options.force)

    kernel_specs = select_specs(families.default_family(targets, quick=options.quick, svls=svls), options.only)
    if not kernel_specs:
        raise InstallError(f"no kernel of {', '.join(targets)} matches {' '.join(options.only)}")
    records: dict[str, KernelRecord] = {}
    frames: list[pd.DataFrame] = []
    peaks: dict[str, dict[str, float]] = {}
    compiled = measured = 0
    notes: list[str] = []
    all_objects: dict[str, build.ObjectResult] = {}

    show = console.is_terminal or os.environ.get("AUTOTUNE_PROGRESS") == "1"
    with (make_progress(console) if show else nullcontext()) as progress:
        for isa, label, target, isa_specs in kernel_groups(targets, kernel_specs, host):
            task = progress.add_task(f"compile {label}", total=len(isa_specs)) if progress else None
            sources = [codegen.generate(spec) for spec in isa_specs]
            built = build.build_kernels(target, sources, jobs=options.jobs, force=options.force,
                                        home=root, progress=_advance(progress, task))
            compiled += sum(1 for o in built.objects.values() if not o.cached)
            for spec in isa_specs:
                if spec.name in built.failures:
                    records[spec.name] = KernelRecord(spec, "rejected", "compile error: "
                                                      + _first_line(built.failures[spec.name]))
            ok_specs = [s for s in isa_specs if s.name in built.objects]
            if not ok_specs:
                notes.append(f"{label}: no kernel compiled")
                continue
            objects = {s.name: built.objects[s.name] for s in ok_specs}
            all_objects.update(objects)
            harness = build.build_harness(target, [objects[s.name] for s in ok_specs], home=root)

            # Validate before timing: a kernel that computes wrong numbers is never measured.
            todo = [s.name for s in ok_specs if objects[s.name].hash not in journal.validations]
            task = progress.add_task(f"validate {label}", total=len(ok_specs)) if progress else None
            if progress:
                progress.advance(task, len(ok_specs) - len(todo))
            for names in _chunks(todo, CHUNK):
                results = measure.validate(harness, target, names, progress=_advance(progress, task))
                journal.append({"kind": "validate", "hash": objects[n].hash, "name": n,
                                "status": results[n].status, "reason": results[n].reason} for n in names)
                journal.validations.update({objects[n].hash: {"status": results[n].status,
                                                              "reason": results[n].reason} for n in names})

            harness_key = harness.name
            if not target.emulated and (isa, harness_key) not in journal.peaks:
                peak = measure.peak(harness, target)
                journal.append([{"kind": "peak", "isa": isa, "harness": harness_key, "gflops": peak}])
                journal.peaks[(isa, harness_key)] = peak
            if not target.emulated:
                peaks[isa] = journal.peaks[(isa, harness_key)]

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
                continue
            todo = [s.name for s in valid if (objects[s.name].hash, skey) not in journal.benches]
            task = progress.add_task(f"measure {label}", total=len(valid)) if progress else None
            if progress:
                progress.advance(task, len(valid) - len(todo))
            for names in _chunks(todo, CHUNK):
                frame = measure.bench(harness, target, names, ks=settings["ks"], pads=settings["pads"],
                                      min_time_ms=settings["min_time_ms"], repeats=settings["repeats"],
                                      progress=_advance(progress, task))
                rows = {n: frame[frame["kernel"] == n].to_dict("records") for n in names}
                journal.append({"kind": "bench", "hash": objects[n].hash, "settings": skey, "rows": rows[n]}
                               for n in names if rows[n])
                journal.benches.update({(objects[n].hash, skey): rows[n] for n in names if rows[n]})
                measured += sum(1 for n in names if rows[n])
            for spec in valid:
                rows = journal.benches.get((objects[spec.name].hash, skey))
                if not rows:
                    records[spec.name] = KernelRecord(spec, "rejected", "crashed while being timed",
                                                      objects[spec.name].hash)
                    continue
                frame = pd.DataFrame(rows)
                frames.append(frame)
                records[spec.name] = _measured_record(spec, objects[spec.name].hash, frame)

    # The quantised kernels (qmatmul): validated and timed in their own subprocess.
    quant: dict[str, Any] = {}
    for target in targets.values():
        stage = qsuite.run_stage(target, root, options.only, options.quick)
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
        measurements=pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=table.MEASUREMENT_COLUMNS),
        selection=selection,
        # An emulated table's blocking comes from the model alone: this machine's
        # caches say nothing about the Arm CPU it will run on.
        params=default_params(host if provenance != "emulated" else None, main_kernels(chosen),
                              provenance=provenance),
        settings={"mode": mode, **settings, "isas": list(targets), "peak_by_isa": peaks,
                  **({"svl_bits": list(svls)} if svls else {}), **({"quant": quant} if quant else {}),
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
        stored, library = tune_and_rebuild(stored, library, targets, all_objects, root, options, console, show)
    path, installed = commit(stored, library, root)
    if native and installed is not None:
        from .reports.extras import record_example_plans  # the report's shapes; loads matplotlib

        record_example_plans(options.target, installed, root)
    return InstallResult(stored, path, compiled, measured, time.monotonic() - started, tuple(notes), installed)


def library_qkernels(isas: Iterable[str], quant: Mapping[str, Any]) -> list[dict[str, str]]:
    """The quantised kernels the library for ``isas`` links, as its at_qkernel_name lists
    them (preferred first): name, kind of weights, form (block: rows > 1; gemv: one row)
    and the CPU features it needs, then an SME2 library's SME2 kernels, which
    at_qmatmul_f32 runs first on weights with an SME2 form for the CPU's vector length.
    The table records them for `autotune show`: an Arm library cannot be asked in this
    process, and its choice is made where it runs.  Which ones: :func:`qsuite.registry_kernels`.
    """
    from .codegen import quant_registry, quant_sme2

    isas = tuple(isas)
    entries = [{"name": k.name, "kind": k.kind, "form": "block" if k.mr > 1 else "gemv",
                "needs": " ".join(quant_registry.kernel_features(k))}
               for k in qsuite.registry_kernels(isas, quant.get("selected", ()))]
    if "sme2" in isas:
        entries += [{"name": name, "kind": kind, "form": "block" if form == "mopa" else "gemv",
                     "needs": "sme2"} for name, form, kind in quant_sme2.KERNELS]
    return entries


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
                     console: Console, show: bool) -> tuple[TunedTable, LibraryBuild]:
    """Tune the planner on the freshly built library; bake the result in if it won.

    A budget of zero (the quick install) records the analytic default as such.
    """
    from .tune import DEFAULT_BUDGET_S, QUICK_BUDGET_S, tune

    budget = options.budget_s
    if budget is None:
        budget = QUICK_BUDGET_S if options.quick else DEFAULT_BUDGET_S
    result = tune(stored, library.library, budget_s=budget, seed=options.seed, home=root,
                  console=console if show else None)
    if result.interrupted:
        # The trials are in the study database for the next run to resume; this
        # run ends here and the previous table and library stay.
        raise KeyboardInterrupt
    stored = replace(stored, params=dict(result.params), tuning=dict(result.record))
    if result.kept:
        library = build_table_library(stored, targets, objects, root, library.library.parent)
    return stored, library


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


def _measured_record(spec: KernelSpec, object_hash: str, frame: pd.DataFrame) -> KernelRecord:
    tight = frame[frame["pad"] == 0] if (frame["pad"] == 0).any() else frame
    by_k = tight.groupby("K")["median_gflops"].max()
    return KernelRecord(
        spec=spec,
        status="validated",
        object_hash=object_hash,
        best_gflops=float(frame["best_gflops"].max()),
        gflops_by_k=tuple((int(k), round(float(g), 3)) for k, g in by_k.items()),
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
