"""Side-by-side GEMM benchmarks: autotune against the libraries a user would pick instead.

``autotune bench`` (and ``python -m benchmarks`` in a source checkout; both go
through :func:`add_arguments` and :func:`command`) measures, in one run:

* **C level**: one harness (``bench_gemm.c``) times every library through the same
  loop.  ``cblas`` interface: our ``cblas_?gemm`` against OpenBLAS's, BLIS's and
  MKL's.  ``plan`` interface: our ``at_plan_execute`` against LIBXSMM's dispatched
  kernel and MKL's JIT kernel, each created once outside the timed loop.
* **Python level**: ``autotune.gemm`` against ``A @ B`` and ``np.matmul(out=)``,
  ``gemm_batch`` against ``np.matmul`` on stacks.

and writes ``$AUTOTUNE_HOME/benchmarks/latest.{csv,json}`` (plus a dated copy).
Timings never belong in tests; the tests check that the harness computes correct
results through each peer and that this module's arithmetic is right.

In a source checkout this package is ``benchmarks``, beside ``autotune``; an
installed autotune carries it as ``autotune.benchmarks`` (pyproject.toml maps the
one directory to that name), so nothing here names its own package.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from autotune.host import usable_cores
from autotune.runtime.loader import LIBRARY_NAME

from .harness import TRANSPOSITIONS, Config, Point, Shape, build_harness, run_peer
from .peers import PINNING_VARIABLES, Peer, discover, pinned_in_environment, thread_env
from .results import (Target, add_ratios, evaluate_targets, points_frame, python_frame, regime_means,
                      report_frame)

SQUARE = (2, 3, 4, 5, 7, 8, 12, 13, 16, 24, 31, 32, 48, 64, 80, 96, 128, 256, 512, 1024)
#: The last two: PyTorch's x @ W.T for a few rows of x (column-major tn, N the rows of x).
IRREGULAR = tuple(Shape(*s) for s in ((35, 32, 64), (15, 15, 15), (13, 33, 23), (87, 93, 56), (1, 256, 256),
                                      (256, 1, 256), (64, 3, 128), (17, 129, 33), (100, 10, 1000),
                                      (256, 4, 256, 1, "tn"), (1024, 16, 1024, 1, "tn")))
BATCH = Shape(8, 8, 8, 10000)
QUICK_SQUARE = (4, 8, 16, 32, 64, 128, 512)
QUICK_IRREGULAR = (Shape(13, 33, 23), Shape(87, 93, 56), Shape(1, 256, 256))

__all__ = ["Options", "Results", "add_arguments", "options_from_args", "run", "main", "report_frame", "merge_passes",
           "load_latest", "SQUARE", "IRREGULAR", "BATCH"]


@dataclass(frozen=True)
class Options:
    """What one run measures.  The defaults are the full run (about 10 minutes on 2 cores)."""

    home: Path | None = None            # AUTOTUNE_HOME whose installed library is measured
    library: Path | None = None         # a libautotune.so to measure instead of the installed one
    quick: bool = False                 # a few shapes, shorter timing: about a minute
    dtypes: tuple[str, ...] = ("f32", "f64")
    threads: tuple[int, ...] = ()       # () = (1, all cores)
    min_time: float | None = None       # seconds per repeat (None: 2 ms, quick 1 ms)
    repeats: int | None = None          # repeats per point (None: 7, quick 5)
    cold: int | None = None             # cold-cache samples per point (None: 9, quick 5; 0 = off)
    passes: int | None = None           # times the whole peer sweep is repeated (None: 2, quick 1)
    c_level: bool = True
    python_level: bool = True
    libraries: tuple[str, ...] = ()     # only these libraries (autotune is always kept)
    shapes: tuple[Shape, ...] = ()      # override the shape list (tests, investigations)
    out_dir: Path | None = None         # default $AUTOTUNE_HOME/benchmarks
    save: bool = True
    show: bool = True                   # print the rich table and summary


@dataclass(frozen=True)
class Results:
    frame: pd.DataFrame                 # the long table (latest.csv)
    means: pd.DataFrame                 # geometric means per regime
    targets: tuple[Target, ...]
    peers: tuple[Peer, ...]
    peak: dict[str, float]
    meta: dict[str, object] = field(default_factory=dict)
    paths: tuple[Path, ...] = ()

    def report_frame(self) -> pd.DataFrame:
        return report_frame(self.frame)


def _home(options: Options) -> Path:
    if options.home is not None:
        return Path(options.home)
    from autotune.home import home

    return home()


def run_peak(peak: dict[str, float], frame: pd.DataFrame) -> dict[str, float]:
    """The per-core peak the fractions divide by: the installed table's, raised to
    the fastest correct one-thread C measurement of this run.  Nothing runs faster
    than the core, so a library that did (any library) shows the table's figure was
    taken at a lower clock; dividing by it would flatter every fraction."""
    out = dict(peak)
    if frame.empty:
        return out
    one = frame[frame["level"].eq("c") & frame["threads"].eq(1) & frame["status"].eq("ok")
                & frame["gflops"].notna()]
    for dtype, group in one.groupby("dtype"):
        out[str(dtype)] = max(out.get(str(dtype), 0.0), float(group["gflops"].max()))
    return out


def installed_peak(home: Path, target: str = "host") -> dict[str, float]:
    """The harness's measured FMA peak per core (GFLOPS per dtype) from the installed table."""
    path = home / "tables" / f"{target}.json"
    try:
        data = json.loads(path.read_text())
        return {str(k): float(v) for k, v in (data.get("peak_gflops") or {}).items()}
    except (OSError, ValueError):
        return {}


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _shapes(options: Options) -> tuple[list[Shape], tuple[Shape, ...]]:
    if options.shapes:
        irregular = tuple(s for s in options.shapes if s in IRREGULAR or (not s.square and s.batch == 1))
        return list(options.shapes), irregular
    square = QUICK_SQUARE if options.quick else SQUARE
    irregular = QUICK_IRREGULAR if options.quick else IRREGULAR
    return [Shape(n, n, n) for n in square] + list(irregular) + [BATCH], irregular


def _configs(options: Options) -> list[Config]:
    threads = options.threads or (1, os.cpu_count() or 1)
    cold = options.cold if options.cold is not None else (5 if options.quick else 9)
    configs = []
    for dtype in options.dtypes:
        if 1 in threads:
            configs.append(Config(dtype, 1, 64, cold))   # hot and cold, aligned as a C program's
            configs.append(Config(dtype, 1, 16, 0))      # numpy's default alignment
        configs.extend(Config(dtype, t, 64, 0) for t in sorted(set(threads)) if t > 1)
    return configs


def run_python_level(home: Path, sizes: tuple[int, ...], batch: int, min_time: float,
                     repeats: int, dtypes: tuple[str, ...] = ("f32", "f64"), threads: int = 1) -> dict:
    """The Python level, autotune against numpy (its own OpenBLAS) on ``threads`` threads.

    One thread runs both libraries in one process; more run each library in a process
    of its own, the other held to one thread.  numpy's OpenBLAS spins for about 100 ms
    after each of its calls, so with its threads alive even the result check (a
    float64 product) left autotune's second thread no core: two-thread 256^3 ran at
    one thread's speed (120 us a call against 62)."""
    # numpy's own OpenBLAS is a peer too: it runs without pinning variables, like the others.
    env = {k: v for k, v in os.environ.items() if k not in PINNING_VARIABLES}
    env.update({**thread_env(threads), "AUTOTUNE_HOME": str(home)})
    alone = {"autotune": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}, "numpy": {"AUTOTUNE_NUM_THREADS": "1"}}
    cwd = None
    if __name__ == "benchmarks":
        # The checkout's copy: its root is where the child finds this package (and autotune),
        # ahead of any other `benchmarks` on the path.
        cwd = root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", f"{__name__}.pylevel", "--sizes", ",".join(map(str, sizes)),
           "--batch", str(batch), "--min-time", f"{min_time:g}", "--repeats", str(repeats),
           "--dtypes", ",".join(dtypes)]
    rows: list[dict] = []
    document: dict = {}
    for library in ([None] if threads == 1 else ["autotune", "numpy"]):
        flags = ["--library", library] if library else []
        proc = subprocess.run([*cmd, *flags], capture_output=True, text=True, env={**env, **alone.get(library, {})},
                              check=False, timeout=1800, cwd=cwd)
        if proc.returncode != 0:
            return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1], "rows": []}
        part = json.loads(proc.stdout.strip().splitlines()[-1])
        rows += part.pop("rows")
        document = {**part, **document}  # the first process's (autotune's) "fast"
    return {**document, "rows": rows}


def _command_line() -> str:
    argv = list(sys.argv)
    if not argv:
        return "benchmarks.run"
    if argv[0].endswith("__main__.py"):  # `python -m benchmarks` (or autotune) reports the module's file
        ours = Path(argv[0]).resolve() == Path(__file__).resolve().with_name("__main__.py")
        argv[0:1] = ["python", "-m", __name__ if ours else Path(argv[0]).resolve().parent.name]
    return " ".join(shlex.quote(a) for a in argv)


def merge_passes(sweeps: list[list[Point]]) -> list[Point]:
    """One point per (peer, config, shape): the pass with the best time.

    The peers run one after another, so a burst of load on a shared machine hits
    whichever library is running; sweeping them all again and keeping each one's
    best pass gives every library the same chance of a quiet moment.
    """
    if len(sweeps) == 1:
        return sweeps[0]
    best: dict[tuple, Point] = {}
    for sweep in sweeps:
        for point in sweep:
            key = (point.peer, point.config, point.shape)
            kept = best.get(key)
            if kept is None or (point.status == "ok" and (kept.status != "ok" or point.best_s < kept.best_s)):
                best[key] = point
    return list(best.values())


def run(options: Options) -> Results:
    """Measure everything ``options`` asks for, side by side, and (by default) save and print it."""
    from . import display

    started = time.time()
    load_before = _load()
    home = _home(options)
    build_dir = home / "benchmarks" / "build"
    library = Path(options.library) if options.library else home / "lib" / "host" / LIBRARY_NAME
    peers = discover(library, build_dir)
    if options.libraries:
        keep = {*options.libraries, "autotune"}
        peers = [p for p in peers if p.library in keep]
    min_time = options.min_time or (0.001 if options.quick else 0.002)
    repeats = options.repeats or (5 if options.quick else 7)
    shapes, irregular = _shapes(options)
    console = display.console() if options.show else None

    passes = options.passes or (1 if options.quick else 2)
    points: list[Point] = []
    if options.c_level:
        exe = build_harness(build_dir)
        sweeps: list[list[Point]] = []
        for sweep in range(passes):
            found: list[Point] = []
            for config in _configs(options):
                for peer in peers:
                    # LIBXSMM's kernels and MKL's JIT kernels are single-threaded by design.
                    if config.threads > 1 and peer.interface == "plan" and peer.library != "autotune":
                        continue
                    if console:
                        console.log(f"pass {sweep + 1}/{passes} {config.dtype} {config.threads}T align "
                                    f"{config.align}: {peer.library} {peer.interface}")
                    found.extend(run_peer(exe, peer, config, shapes, min_time=min_time, repeats=repeats))
            sweeps.append(found)
        points = merge_passes(sweeps)
    frames = [points_frame(points, irregular)] if points else []

    pydocs: list[dict] = []
    if options.python_level and "numpy" in (options.libraries or ("numpy",)):
        sizes = tuple(s.M for s in shapes if s.square and s not in irregular)
        batch = next((s.batch for s in shapes if s.batch > 1), BATCH.batch)
        for threads in sorted(set(options.threads or (1, os.cpu_count() or 1))):
            if console:
                console.log(f"python level, {threads}T: autotune.gemm / matmul / gemm_batch against numpy")
            pydocs.append(run_python_level(home, sizes, batch, min_time, repeats, options.dtypes, threads))
            frames.append(python_frame(pydocs[-1], threads))

    frame = pd.concat([f for f in frames if not f.empty], ignore_index=True) if frames else pd.DataFrame()
    peak = run_peak(installed_peak(home), frame)
    frame = add_ratios(frame, peak) if not frame.empty else frame
    means = regime_means(frame) if not frame.empty else pd.DataFrame()
    targets = tuple(evaluate_targets(frame)) if not frame.empty else ()
    meta = {
        "command": _command_line(),
        "home": str(home), "library": str(library), "quick": options.quick, "min_time_s": min_time,
        "repeats": repeats, "passes": passes,
        "dropped_pinning_variables": pinned_in_environment(), "load_before": load_before, "load_after": _load(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1), "python_fast_path": next((d["fast"] for d in pydocs if "fast" in d), None),
        "python_error": "; ".join(d["error"] for d in pydocs if d.get("error")),
        "numpy": next((d["numpy"] for d in pydocs if "numpy" in d), ""),
    }
    results = Results(frame, means, targets, tuple(peers), peak, meta)
    if options.save and not frame.empty:
        results = display.save(results, options.out_dir or home / "benchmarks")
    if console:
        display.show(results, console)
    return results


def load_latest(home: Path | None = None) -> pd.DataFrame | None:
    """The long table of the last saved run, or None (what `autotune report` reads)."""
    path = (home or _home(Options())) / "benchmarks" / "latest.csv"
    return pd.read_csv(path) if path.exists() else None


def _thread_count(text: str) -> int:
    if text == "all":
        return usable_cores()
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count (a whole number, 1 or more, or all)")
    return int(text)


def _shape(text: str) -> Shape:
    dims, _, trans = text.partition(":")
    parts = dims.split(",")
    if (len(parts) not in (3, 4) or not all(p.strip().isdigit() and int(p) > 0 for p in parts)
            or trans not in ("", *TRANSPOSITIONS)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not M,N,K or M,N,K,BATCH (whole numbers, 1 or more), optionally followed by "
            f":TRANS ({', '.join(TRANSPOSITIONS)})")
    sizes = [int(p) for p in parts] + [1] * (4 - len(parts))
    return Shape(*sizes, trans=trans or "nn")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m benchmarks`, for `autotune bench` to share."""
    parser.add_argument("--quick", action="store_true", help="a few shapes, shorter timing (about a minute)")
    parser.add_argument("--home", type=Path, default=None,
                        help="AUTOTUNE_HOME whose installed library is measured (default: $AUTOTUNE_HOME)")
    parser.add_argument("--library", type=Path, default=None,
                        help="measure this libautotune.so instead of the installed one (C level only)")
    parser.add_argument("--dtype", choices=("f32", "f64"), action="append", dest="dtypes",
                        help="measure only this dtype (repeatable)")
    parser.add_argument("--threads", type=_thread_count, action="append", metavar="N",
                        help="thread count, or all for every core this process may use (repeatable; "
                             "default 1 and all cores)")
    parser.add_argument("--min-time", type=float, default=None, help="seconds per repeat (default 0.002)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per point (default 7)")
    parser.add_argument("--cold", type=int, default=None,
                        help="cold-cache samples per point, 0 to skip (default 9)")
    parser.add_argument("--passes", type=int, default=None,
                        help="sweep all peers this many times, keep each one's best (default 2, quick 1)")
    parser.add_argument("--only", action="append", default=None, metavar="LIBRARY",
                        help="only this peer (openblas, blis, mkl, libxsmm, numpy; repeatable)")
    parser.add_argument("--no-c", action="store_true", help="skip the C level")
    parser.add_argument("--no-python", action="store_true", help="skip the Python level")
    parser.add_argument("--shape", type=_shape, action="append", default=None, metavar="M,N,K[,BATCH][:TRANS]",
                        help="measure these shapes instead of the standard list (repeatable); TRANS is "
                             "nn (the default), nt, tn or tt, as BLAS names op(A) and op(B)")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for latest.csv/json (default $AUTOTUNE_HOME/benchmarks)")
    parser.add_argument("--no-save", action="store_true", help="do not write result files")
    parser.add_argument("--list-peers", action="store_true", help="print where each peer was found and exit")
    parser.add_argument("--quantised", action="store_true",
                        help="the quantised matmul instead: qmatmul against ONNX Runtime's MatMulNBits, "
                             "PyTorch's int4 and dynamic int8 matmuls and np.matmul on the dequantised f32 "
                             "weights, one thread each (benchmarks/quantised.py; --quick, --shape M,N,K, "
                             "--repeats, --min-time apply; --threads N or --threads all runs on N threads or "
                             "all cores instead, repeatable)")


def options_from_args(args: argparse.Namespace) -> Options:
    shapes = tuple(s if isinstance(s, Shape) else _shape(s) for s in (args.shape or ()))
    return Options(home=args.home, library=args.library, quick=args.quick, dtypes=tuple(args.dtypes or ("f32", "f64")),
                   threads=tuple(args.threads or ()), min_time=args.min_time, repeats=args.repeats,
                   cold=args.cold, passes=args.passes, c_level=not args.no_c, python_level=not args.no_python,
                   libraries=tuple(args.only or ()), shapes=shapes, out_dir=args.out, save=not args.no_save)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return command(parser.parse_args(argv))


def command(args: argparse.Namespace) -> int:
    """Run what the parsed options of :func:`add_arguments` ask for; 1 when a peer computed a wrong result."""
    if args.list_peers:
        from . import display

        home = _home(Options(home=args.home))
        display.show_peers(discover(home / "lib" / "host" / LIBRARY_NAME, home / "benchmarks" / "build"))
        return 0
    if getattr(args, "quantised", False):
        from . import quantised

        shapes = tuple((s.M, s.K, s.N) for s in (args.shape or ()))
        return quantised.run(args.quick, shapes, args.repeats, args.min_time, tuple(args.threads or (1,)))
    results = run(options_from_args(args))
    wrong = results.frame[results.frame["status"].eq("wrong")] if not results.frame.empty else results.frame
    return 1 if len(wrong) else 0
