"""The `autotune` command."""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import json
import os
import select
import shutil
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .home import MARKER, HomeError, check_cleanable, home, install_lock
from .host import IsaCapError, cache_doubts, describe, detect
from .pkgconfig import PC_NAME, pc_dir
from .quant_shapes import MEASURE_KN
from .table import TableError, TunedTable, kernel_score, library_dir, load, table_path
from .specs import SVL_CHOICES
from .toolchain import KNOWN_ISAS, ToolchainError
from .trials import crossover_lines, edge_lines, held_out_line, main_kernel_lines, summary_line, thread_cost_lines

DESCRIPTION = """\
Install-time autotuned GEMM. `autotune install` generates fixed-size micro-kernels
for every instruction set this machine (or the chosen target) supports, compiles
and validates them against a double-precision reference, times them, and stores a
tuned table under $AUTOTUNE_HOME (default: the user's data directory)."""

TARGET_HELP = (
    "what to tune: 'host' (default) is every kernel family this CPU runs natively; "
    f"one of {', '.join(KNOWN_ISAS)} selects a single family (Arm families are "
    "cross-built and validated under QEMU on an x86 host)"
)
TARGETS = ("host", *KNOWN_ISAS)

#: The runtime's most threads (AT_MAX_THREADS, kernels_src/runtime/at_internal.h).
MAX_THREADS = 256

#: A shell's status for a program that wrote into a pipe nobody reads any more
#: (128 + SIGPIPE), what `cat big | head` reports for cat.
CLOSED_PIPE_STATUS = 128 + signal.SIGPIPE

#: The width rich lays tables out in when the output is piped: wider than any line
#: autotune prints, so nothing is folded, and tables keep their natural width.
PIPED_WIDTH = 1000


def target(value: str) -> str:
    """--target: a name the installer knows; otherwise argparse's error, listing them."""
    if value not in TARGETS:
        raise argparse.ArgumentTypeError(f"unknown target {value!r}; valid targets: {', '.join(TARGETS)}")
    return value


def count(minimum: int, maximum: int | None = None, note: str = "") -> Callable[[str], int]:
    """A whole-number argument in [minimum, maximum]; the error names the range."""
    span = f"from {minimum} to {maximum}" if maximum is not None else f"of {minimum} or more"

    def whole_number(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number {span}"
                                             + (f" ({note})" if note else ""))
        return value

    return whole_number


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def build_parser(with_bench: bool = True) -> argparse.ArgumentParser:
    """The command line.  ``with_bench=False`` leaves out `bench`'s own options, which
    come from the benchmarks package (it imports pandas): a command other than
    `bench` parses without them."""
    parser = argparse.ArgumentParser(prog="autotune", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    install = commands.add_parser(
        "install", help="generate, compile, validate and measure kernels; store the tuned table",
        description="Generate, compile, validate and measure the kernels, then store the tuned "
                    "table. A re-run rebuilds and re-measures only what changed. Ctrl-C (once or "
                    "twice, at any stage) exits with status 130 and leaves the previous table and "
                    "library as they were; finished compiles, measurements and tuning trials are "
                    "kept for the next run. One install runs per $AUTOTUNE_HOME at a time: a second "
                    "one is refused at once, naming the first one's PID.")
    install.add_argument("--target", type=target, default="host", help=TARGET_HELP)
    install.add_argument("--quick", action="store_true",
                         help="a smaller kernel family and a shorter timing grid (about a minute)")
    install.add_argument("--force", action="store_true",
                         help="rebuild and re-measure everything, ignoring caches")
    install.add_argument("--exhaustive", action="store_true",
                         help="time every kernel over the whole grid, wide leading dimensions too (by "
                              "default a brief screening run drops the kernels too slow to be selected)")
    install.add_argument("--jobs", type=count(1), default=None, metavar="N",
                         help="parallel compiler processes (default: the number of cores)")
    install.add_argument("--svl", type=int, choices=SVL_CHOICES, default=None, metavar="BITS",
                         help="build the SME2 kernels for this streaming vector length only "
                              "(default: the CPU's; a cross-build carries 128, 256 and 512, and "
                              "the library runs the set of the CPU it meets)")
    install.add_argument("--budget", type=seconds, default=None, metavar="SECONDS",
                         help="time for the optuna search of the planner's parameters (default: what is "
                              "left of a 165 s install, 15 to 40; 0 skips the search, as --quick does; the "
                              "crossovers are measured either way)")
    install.add_argument("--seed", type=int, default=0, help="seed of the tuning search (default 0)")
    install.add_argument("--shapes", type=Path, default=None, metavar="FILE",
                         help="also tune for the shapes a program planned while AUTOTUNE_RECORD=FILE was "
                              "set in its environment (its most frequent ones join the tuning suite)")
    install.add_argument("--only", action="append", default=[], metavar="PATTERN",
                         help="tune only the kernels whose names match this shell pattern, "
                              "e.g. 'at_sgemm_avx512_nn_*' (repeatable)")

    show = commands.add_parser(
        "show", help="print the tuned table (or the host) in the terminal or as JSON",
        description="Print the tuned table: per family the validated and rejected kernels and "
                    "the fastest ones with their share of the measured peak.")
    show.add_argument("--target", type=target, default="host", help=TARGET_HELP)
    show.add_argument("--host", action="store_true", help="print what was detected about this machine")
    show.add_argument("--json", action="store_true", help="print the table as JSON for scripts")
    show.add_argument("--all", action="store_true", help="list every kernel, not only the fastest")
    show.add_argument("--paths", action="store_true", help="print where autotune keeps its files")
    show.add_argument("--limit", type=count(1), default=12, metavar="N",
                      help="fastest kernels listed per data type (default 12)")
    show.add_argument("--heatmap", action="store_true",
                      help="draw each family's kernel speed over mr x nr as a heatmap")

    plan = commands.add_parser(
        "plan", help="show the kernel executing plan the tiler makes for one GEMM shape",
        description="Ask the installed library's input-aware tiler for the plan of C = op(A) op(B) "
                    "with C of M x N and depth K: its steps (which kernel covers which block of C), "
                    "the predicted time and memory operations, and a drawing of the tiling of C.")
    # The C API's sizes are int64_t: a larger one would wrap to a negative size.
    size = count(0, 2**63 - 1)
    plan.add_argument("M", type=size, help="rows of C")
    plan.add_argument("N", type=size, help="columns of C")
    plan.add_argument("K", type=size, help="the depth: columns of op(A), rows of op(B)")
    plan.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    plan.add_argument("--trans", default="nn", type=str.lower, choices=("nn", "nt", "tn", "tt"),
                      help="transpositions of A and B, BLAS style (default nn)")
    plan.add_argument("--layout", choices=("col", "row"), default="col",
                      help="storage order of the matrices (default col, as BLAS)")
    plan.add_argument("--threads", type=count(0, MAX_THREADS, "0: the library's default"), default=0,
                      metavar="N", help=f"threads to plan for, 1 to {MAX_THREADS} (default 0: the library's, "
                                        "AUTOTUNE_NUM_THREADS or the online CPUs)")
    plan.add_argument("--steps", type=count(0), default=40, metavar="N",
                      help="list at most N steps (default 40; the drawing shows them all)")

    bench = commands.add_parser(
        "bench", help="benchmark against OpenBLAS, BLIS, LIBXSMM, MKL and numpy in one run",
        description="Measure the installed library side by side with the libraries a user would "
                    "pick instead: our cblas and plan handles against OpenBLAS, BLIS, MKL and "
                    "LIBXSMM (C level) and autotune.gemm against numpy (Python level), on small, "
                    "irregular and large shapes, one and all cores. Results go to "
                    "$AUTOTUNE_HOME/benchmarks/ (latest.csv, latest.json, report.csv) and "
                    "`autotune report` draws them. A peer that is not installed is reported as "
                    "missing: they are Debian's libopenblas-dev, libblis-dev and libxsmm-dev and "
                    "PyPI's mkl (`bash scripts/setup.sh --bench` in a source checkout installs them). "
                    "The full run takes about 10 minutes on 2 cores, --quick about one.")
    if with_bench:
        add_bench_arguments(bench)

    report = commands.add_parser(
        "report", help="write the HTML tuning report (one self-contained offline file)",
        description="Write one self-contained HTML page showing what was tuned: host and peak, "
                    "heatmaps of kernel speed over mr x nr, GFLOPS against K, the selection, "
                    "rejected kernels, and the tuning history and plans once they exist.")
    report.add_argument("--target", type=target, default="host", help=TARGET_HELP)
    report.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="where to write it (default: $AUTOTUNE_HOME/reports/<target>.html)")
    report.add_argument("--open", action="store_true", help="open it in a web browser")

    clean = commands.add_parser(
        "clean", help="delete the build cache (tables are kept unless --all)",
        description="Delete the build cache, journals and staged libraries under $AUTOTUNE_HOME. Only a "
                    f"folder that is an autotune home is cleaned: one with the {MARKER} file `autotune "
                    "install` writes there, the default home, or a home an older autotune filled (its "
                    "tables/<target>.json, journal/<target>-<fingerprint>.jsonl, content-hashed objects "
                    "or libautotune are there; it gets the marker then). Any other folder, e.g. a "
                    "project given as AUTOTUNE_HOME=., is refused and left untouched.")
    clean.add_argument("--all", action="store_true", help="also delete the tuned tables")
    return parser


def add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    """`bench`'s options and its `dask` run, as the benchmarks package declares them."""
    try:
        suite = benchmarks_module()
        suite.add_arguments(bench)
        runs = bench.add_subparsers(dest="bench_run", title="other benchmarks", metavar="{dask}")
        dask = runs.add_parser(
            "dask", help="throughput of many small products on a Dask cluster, against numpy.matmul",
            description="Run one Dask graph of many small products on a local cluster (two worker "
                        "processes by default) with autotune.matmul per chunk and again with "
                        "numpy.matmul, alternating them; print the best times, their ratio (numpy's "
                        "time over autotune's) and whether the two agree, as JSON. Needs "
                        "dask.distributed (pip install 'autotune[dask]'); docs/scaling.md explains the "
                        "setup. The default run (200,000 products of 16x16x16) takes about a minute.")
        importlib.import_module(f"{suite.__name__}.dask_graph").add_arguments(dask)
    except ImportError:
        # Every other command works without the benchmarks; `autotune bench`, whatever its
        # options, says what is missing.
        bench.set_defaults(bench_unavailable=True)


def requested_command(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the top level
    has options only without values: -h, --version), None for none."""
    words = sys.argv[1:] if argv is None else argv
    return next((word for word in words if not word.startswith("-")), None)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Like parser.parse_args, but an unknown option is the command's error, with its usage.

    argparse hands what a subcommand does not know back to the top-level parser,
    which would print the top-level usage for an option `show` does not have.
    """
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "bench_unavailable", False):
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """A closed pipe is main()'s to handle (quietly, status 141), not rich's (status 1)."""
        self.quiet = True  # nothing more goes to this stream
        if not self.stderr:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) that wraps only for a person at a terminal.

    rich wraps to 80 columns when the stream is a pipe or a file, which cuts lines
    mid-phrase ("0\nrejected") for the script or log reading them; there every
    line is written whole, tables at their natural width (COLUMNS, when set, still
    gives a width).
    """
    stream = sys.stderr if stderr else sys.stdout
    terminal = _Console(file=stream, stderr=stderr)
    if terminal.is_terminal or os.environ.get("COLUMNS"):
        return terminal
    return _Console(file=stream, stderr=stderr, soft_wrap=True, width=PIPED_WIDTH)


def stdout_closed() -> bool:
    """Whether the reader of our stdout went away (`| head` took its lines and left)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (a test's capture): not a pipe
        return False


def quiet_exit_on_closed_pipe() -> int:
    """End quietly, as `cat` does when `head` has read enough: nothing on stderr, status 141.

    stdout is pointed at /dev/null first, so the interpreter's last flush of the
    unwritten rest cannot fail ("Exception ignored ... BrokenPipeError").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return CLOSED_PIPE_STATUS


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = run(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then one more case handled below
        return status
    except KeyboardInterrupt:
        # A second Ctrl-C that came before run() could ignore it: still an interrupted
        # run (status 130), never the interpreter's death by SIGINT (-2).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return 130
    except BrokenPipeError:
        if stdout_closed():
            return quiet_exit_on_closed_pipe()
        raise


#: Errors of a place that refuses writes, where writing somewhere else is the way out.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def os_error_hint(exc: OSError, command: str | None, root: Path) -> str:
    """Where to go instead, only when going elsewhere helps: a home that refuses writes
    (install, bench and report write there), or a report's file (`report -o`).

    A full disk, an I/O error, `clean` (whose files are the home's whatever it is set
    to) and a refusal that is not about permissions get no hint: another
    AUTOTUNE_HOME or -o would not cure them.
    """
    if command == "clean":
        return ""
    name = os.fsdecode(exc.filename) if exc.filename else ""
    in_home = bool(name) and _inside(Path(name), root)
    from .files import NotRegularFileError

    if command == "report" and not in_home and (exc.errno in _NOT_WRITABLE or isinstance(exc, NotRegularFileError)):
        return " (give `report` another -o)"
    if exc.errno not in _NOT_WRITABLE or not in_home:
        return ""
    if command == "report":
        return " (set AUTOTUNE_HOME to a writable directory, or give `report` another -o)"
    return " (set AUTOTUNE_HOME to a writable directory)"


def _inside(path: Path, root: Path) -> bool:
    try:
        return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)
    except ValueError:
        return False


def report_os_error(exc: OSError, err: Console, command: str | None = None) -> int:
    """The file and the reason on one line, and a hint where one applies."""
    where = f"{exc.filename}: " if exc.filename else ""
    err.print(f"[bold red]error:[/] {where}{exc.strerror or exc}{os_error_hint(exc, command, home())}",
              soft_wrap=True)
    return 2


def one_line(message: str) -> str:
    """A message as one line: a compiler's failure (the command, then its output) is
    told by its first diagnostic, the line a person would look for."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) <= 1:
        return message.strip()
    diagnostic = next((line for line in lines[1:] if "error" in line.lower()), None)
    if diagnostic is None:
        return lines[0]
    return f"{lines[0].split(' ', 1)[0]} failed: {diagnostic}" if len(lines[0]) > 200 else f"{lines[0]}: {diagnostic}"


def user_errors() -> tuple[type[Exception], ...]:
    """The errors whose message says all a user needs: printed on one line, status 2.

    InstallError and PlanError belong to modules that load pandas, numpy and the
    build stages; one can only have been raised once its module is loaded, so they
    join the tuple then, and the commands that do not need those modules never load them.
    """
    errors: list[type[Exception]] = [ToolchainError, TableError, HomeError, IsaCapError]
    for module, name in (("autotune.install", "InstallError"), ("autotune.plans", "PlanError"),
                         ("autotune.link", "LibraryError"), ("autotune.build", "BuildError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


def run(argv: Sequence[str] | None = None) -> int:
    args = parse_args(build_parser(with_bench=requested_command(argv) == "bench"), argv)
    out = console()
    err = console(stderr=True)
    try:
        if args.command == "install":
            return cmd_install(args, err)
        if args.command == "show":
            return cmd_show(args, out)
        if args.command == "bench":
            return cmd_bench(args, err)
        if args.command == "plan":
            return cmd_plan(args, out)
        if args.command == "report":
            from .reports import report_command  # matplotlib only when drawing

            out.print(f"wrote {report_command(args.target, args.output, args.open)}", soft_wrap=True)
            return 0
        if args.command == "clean":
            return cmd_clean(args, out)
    # First: evaluating the clauses below runs code (user_errors()), where a second
    # Ctrl-C would raise past every clause of this try.
    except KeyboardInterrupt:
        # The run is over: a second Ctrl-C must not cut the report short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if args.command == "install":
            err.print("[yellow]interrupted:[/] the previous table and library are unchanged; finished "
                      "compiles, measurements and tuning trials are kept and the next run resumes from them",
                      soft_wrap=True)
        else:
            err.print("[yellow]interrupted[/]")
        return 130
    except user_errors() as exc:
        # One line however long: a wrapped path or command cannot be copied.
        err.print(f"[bold red]error:[/] {escape(one_line(str(exc)))}", soft_wrap=True)
        return 2
    except BrokenPipeError as exc:
        if stdout_closed():
            raise  # main() ends quietly
        return report_os_error(exc, err, args.command)
    except OSError as exc:
        return report_os_error(exc, err, args.command)
    return 1


def cmd_install(args: argparse.Namespace, err: Console) -> int:
    from .install import InstallOptions, install  # the build stages and pandas: for install alone

    result = install(InstallOptions(target=args.target, quick=args.quick, force=args.force,
                                    jobs=args.jobs, only=tuple(args.only),
                                    svl_bits=args.svl, budget_s=args.budget, seed=args.seed,
                                    shapes=args.shapes, exhaustive=args.exhaustive),
                     console=err)
    table = result.table
    err.print(
        f"[green]stored[/] {result.path}: {len(table.validated)} kernels validated, "
        f"{len(table.rejected)} rejected, {len(table.selection)} selected "
        f"({result.compiled} compiled, {result.measured} measured in this run, "
        f"{result.seconds:.0f} s)"
    )
    print_decisions(table, err)
    if result.library:
        err.print(f"library: {result.library}", soft_wrap=True)
    for note in result.notes:
        err.print(f"[yellow]note:[/] {note}")
    return 0


def cmd_show(args: argparse.Namespace, out: Console) -> int:
    if args.paths:
        from .runtime.loader import LIBRARY_NAME  # the runtime package loads numpy

        root = home()
        rows = {
            "home": root,
            "table": table_path(args.target, root),
            "build cache": root / "build",
            "library": library_dir(args.target, root) / LIBRARY_NAME,
            "header": library_dir(args.target, root) / "autotune.h",
            "pkg-config": pc_dir(library_dir(args.target, root)) / PC_NAME,
        }
        archive = library_dir(args.target, root) / "libautotune.a"
        if archive.exists():  # cross-built targets also ship a static library
            rows["static library"] = archive
        # What a C, C++ or Fortran build sets to find the library through pkg-config.
        search = f"PKG_CONFIG_PATH={pc_dir(library_dir(args.target, root))}"
        if args.json:
            print(json.dumps({**{k: str(v) for k, v in rows.items()}, "pkg_config_env": search}, indent=1))
        else:
            for label, path in rows.items():
                out.print(f"{label:<15} {path}", highlight=False, soft_wrap=True)
            out.print(search, highlight=False, soft_wrap=True)
        return 0
    if args.host:
        host = detect()
        if args.json:
            print(json.dumps({**host.to_dict(), "fingerprint": host.fingerprint}, indent=1))
        else:
            grid = Table(show_header=False, box=None, pad_edge=False)
            grid.add_column(style="bold")
            grid.add_column(overflow="fold")
            for label, value in describe(host):
                grid.add_row(label, value)
            out.print(grid)
        return 0
    # Only native tables are checked against this host: an emulated table describes
    # the emulated CPU and is shown, never run.
    table = load(args.target, host=detect() if args.target == "host" else None)
    if args.json:
        print(json.dumps(table.summary_dict(), indent=1))
        return 0
    print_table(table, out, show_all=args.all, limit=args.limit)
    if args.heatmap:
        from .reports import terminal_heatmap
        from .reports.data import families

        for isa, dtype, trans in families(table):
            out.print(terminal_heatmap(table, dtype, trans, isa))
    return 0


def print_table(table: TunedTable, out: Console, *, show_all: bool = False, limit: int = 12) -> None:
    host = table.host
    banner = f"[bold]{table.target}[/] table  {host.cpu}  ({host.arch}, {table.provenance})"
    if table.provenance == "emulated":
        banner += "\n[bold yellow]EMULATED: kernels validated under QEMU; timings are not real[/]"
    out.print(banner)
    peaks = "  ".join(f"{d} {g:.1f}" for d, g in sorted(table.peak_gflops.items()))
    out.print(f"peak GFLOPS per core: {peaks or 'not measured'}   fingerprint {table.fingerprint}")
    print_decisions(table, out)

    summary = Table(title="kernels", title_justify="left")
    for column in ("family", "dtype", "trans", "valid", "rejected", "best GFLOPS"):
        summary.add_column(column, justify="right" if column in ("valid", "rejected", "best GFLOPS") else "left")
    groups: dict[tuple[str, str, str], list] = {}
    for record in table.kernels:
        groups.setdefault((record.spec.isa, record.spec.dtype, record.spec.trans), []).append(record)
    for (isa, dtype, trans), records in sorted(groups.items()):
        valid = [r for r in records if r.validated]
        best = max((r.best_gflops or 0.0 for r in valid), default=0.0)
        summary.add_row(isa, dtype, trans, str(len(valid)), str(len(records) - len(valid)),
                        f"{best:.1f}" if best else "-")
    out.print(summary)

    for dtype in sorted({r.spec.dtype for r in table.kernels}):
        records = [r for r in table.validated if r.spec.dtype == dtype]
        records.sort(key=kernel_score, reverse=True)
        shown = records if show_all else records[:limit]
        if not shown:
            continue
        peak = table.peak_gflops.get(dtype)
        ranking = "highest modelled FLOPs per load" if table.provenance == "emulated" else "fastest"
        listing = Table(title=f"{dtype}: {'all' if show_all else ranking} kernels "
                              f"({len(shown)} of {len(records)})", title_justify="left")
        listing.add_column("kernel", overflow="fold")
        listing.add_column("model" if table.provenance == "emulated" else "mean", justify="right")
        listing.add_column("best", justify="right")
        listing.add_column("% peak", justify="right")
        for record in shown:
            score = kernel_score(record)
            share = f"{100 * (record.best_gflops or 0) / peak:.0f}%" if peak and record.best_gflops else "-"
            listing.add_row(record.name, f"{score:.1f}" if score else "-",
                            f"{record.best_gflops:.1f}" if record.best_gflops else "-", share)
        out.print(listing)
    quant = table.settings.get("quant")
    # Timed kernels (an x86 install) show their times; an Arm library's are validated, not timed.
    if quant and quant.get("verdicts") and quant.get("seconds"):
        print_quantised(quant, out)
    else:
        print_quant_library(table.settings.get("quant_library"), table.target, out)
    if table.rejected:
        out.print(f"[yellow]{len(table.rejected)} rejected[/], e.g. {table.rejected[0].name}: "
                  f"{table.rejected[0].reason}", soft_wrap=True)


def print_decisions(table: TunedTable, out: Console) -> None:
    """How the planner's parameters were decided: doubted cache reports, measured crossovers,
    the search and the held-out check."""
    for doubt in cache_doubts(table.host):
        out.print(f"[yellow]doubtful cache report:[/] {doubt}; the crossovers below were measured instead",
                  highlight=False, soft_wrap=True)
    for line in crossover_lines(table.settings.get("crossovers")):
        out.print(f"crossover {line}", highlight=False, soft_wrap=True)
    mains = main_kernel_lines(table.settings.get("main_kernel"), table.settings.get("place_kernel"))
    for line in (edge_lines(table.settings.get("edge")) + mains
                 + thread_cost_lines(table.settings.get("thread_cost"))
                 + upper_halves_lines(table.settings.get("upper_halves"))):
        out.print(line, highlight=False, soft_wrap=True)
    out.print(summary_line(table.tuning), highlight=False)
    held = held_out_line(table.tuning)
    if held:
        out.print(held, highlight=False, soft_wrap=True)


def upper_halves_lines(probe: Mapping[str, Any] | None) -> list[str]:
    """Whether the x86 vector kernels clear the upper halves before they return, and
    the measurement that decided it (install's ``settings["upper_halves"]``)."""
    if not probe:
        return []
    times = (f"a call and SSE work after it {probe['dirty_ns']:.1f} ns leaving them dirty, "
             f"{probe['clean_ns']:.1f} clearing them")
    if probe["free"]:
        return [f"vzeroupper: left out of the kernels ({times})"]
    return [f"vzeroupper: kernels clear the upper halves before they return ({times})"]


def print_quantised(quant: dict | None, out: Console) -> None:
    """The quantised kernels install validated (``settings["quant"]``, autotune.qsuite):
    each one's verdict, whether qmatmul uses it, and its time per product at each timed M."""
    if not quant or not quant.get("verdicts"):
        return
    seconds = quant.get("seconds", {})
    ms = sorted({int(m) for times in seconds.values() for m in times})
    listing = Table(title=f"quantised kernels (qmatmul; microseconds at K = N = {MEASURE_KN})",
                    title_justify="left")
    listing.add_column("kernel", overflow="fold")
    listing.add_column("verdict")
    listing.add_column("used", justify="center")
    for m in ms:
        listing.add_column(f"M={m}", justify="right")
    selected = set(quant.get("selected", ()))
    for name, verdict in sorted(quant["verdicts"].items()):
        times = seconds.get(name, {})
        listing.add_row(name, verdict, "*" if name in selected else "",
                        *(f"{1e6 * times[str(m)]:.0f}" if str(m) in times else "-" for m in ms))
    out.print(listing)


def print_quant_library(entries: Sequence[Mapping[str, str]] | None, target: str, out: Console) -> None:
    """The quantised kernels a library carries without a measured choice (``settings["quant_library"]``,
    autotune.install.library_qkernels): an Arm library's, which picks among them where it runs."""
    if entries is None:  # a table written before install recorded them
        command = "autotune install" + ("" if target == "host" else f" --target {target}")
        out.print(f"quantised kernels: not recorded; run `{command}`", soft_wrap=True, highlight=False)
        return
    if not entries:
        out.print("quantised kernels: none in this library; qmatmul computes with its portable C code",
                  highlight=False)
        return
    validated = any("verdict" in entry for entry in entries)
    listing = Table(title="quantised kernels in the library (not measured)", title_justify="left")
    for column in ("kernel", "weights", "form", "needs", *(("verdict",) if validated else ())):
        listing.add_column(column, overflow="fold")
    for entry in entries:
        listing.add_row(entry["name"], entry["kind"], entry["form"], entry["needs"] or "-",
                        *((entry.get("verdict", "not validated"),) if validated else ()))
    out.print(listing)
    out.print("qmatmul chooses where the library runs: per kind of weights, the first block kernel above "
              "(M > 1) and the first gemv kernel (one row) whose features the CPU has; its portable C code "
              "where none fits", highlight=False)
    if any(entry["needs"] == "sme2" for entry in entries):
        out.print("the sme2 kernels come first on weights that carry an SME2 form for the CPU's vector length",
                  highlight=False)


def cmd_plan(args: argparse.Namespace, out: Console) -> int:
    from .plans import draw, explain, plan

    # Enough steps to draw C and list the first ones; the counts cover the whole plan.
    made = plan(args.M, args.N, args.K, args.dtype, args.trans, layout=args.layout, threads=args.threads,
                max_steps=max(args.steps, 10_000))
    out.print(explain(made), highlight=False)
    steps = Table(title=f"steps ({min(args.steps, len(made.steps))} of {made.step_count})",
                  title_justify="left")
    for column in ("kernel", "i0", "j0", "mb", "nb", "pack", "thread"):
        steps.add_column(column, justify="left" if column == "kernel" else "right")
    for step in made.steps[:args.steps]:
        pack = "+".join(side for side, on in (("A", step.pack_a), ("B", step.pack_b)) if on) or "-"
        steps.add_row(step.kernel, str(step.i0), str(step.j0), str(step.mb), str(step.nb), pack,
                      str(step.thread))
    out.print(steps)
    out.print(draw(made), highlight=False)
    return 0


def benchmarks_module() -> ModuleType:
    """The benchmarks package: ``benchmarks/`` beside ``autotune/`` in a source checkout,
    else the copy an installed autotune carries (``autotune.benchmarks``, see pyproject.toml).

    The checkout's copy is loaded from its own path, never by a search of sys.path,
    so another directory's ``benchmarks`` (the current one's, say) is never run.
    """
    source = Path(__file__).resolve().parent.parent / "benchmarks"
    if not (source / "bench_gemm.c").is_file():
        return importlib.import_module("autotune.benchmarks")
    loaded = sys.modules.get("benchmarks")
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve().parent == source:
        return loaded
    spec = importlib.util.spec_from_file_location("benchmarks", source / "__init__.py",
                                                  submodule_search_locations=[str(source)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["benchmarks"]
        raise
    return module


def cmd_bench(args: argparse.Namespace, err: Console) -> int:
    try:
        bench = benchmarks_module()
    except ImportError as exc:
        err.print(f"[bold red]error:[/] `autotune bench` needs the benchmarks that ship with autotune "
                  f"(autotune.benchmarks), and this installation lacks them ({exc}): reinstall autotune from "
                  "its wheel or from a clone of its source (`pip install .` there)", soft_wrap=True)
        return 2
    if getattr(args, "bench_run", None) == "dask":
        return importlib.import_module(f"{bench.__name__}.dask_graph").command(args)
    return bench.command(args)


def cmd_clean(args: argparse.Namespace, out: Console) -> int:
    root = home()
    if not root.exists():
        return 0  # nothing was ever kept there
    check_cleanable(root)
    with install_lock(root):  # never under a running install's feet
        return _clean(root, args.all, out)


def _clean(root: Path, everything: bool, out: Console) -> int:
    # Staged libraries are a build cache too; installed ones go only with --all.
    staged = sorted((root / "lib").glob(".staging-*")) if (root / "lib").is_dir() else []
    doomed = [root / "build", root / "journal", *staged] + ([root / "tables", root / "lib"] if everything else [])
    for path in doomed:
        if path.exists():
            shutil.rmtree(path)
            out.print(f"removed {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
