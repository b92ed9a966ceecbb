"""The `autotune` command."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from . import __version__
from .home import HomeError, home
from .host import IsaCapError, describe, detect
from .install import InstallError, InstallOptions, install, library_dir
from .plans import PlanError
from .runtime.loader import LIBRARY_NAME
from .table import TableError, TunedTable, kernel_score, load, table_path
from .specs import SVL_CHOICES
from .toolchain import KNOWN_ISAS, ToolchainError

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


def build_parser() -> argparse.ArgumentParser:
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
                    "kept for the next run.")
    install.add_argument("--target", default="host", help=TARGET_HELP)
    install.add_argument("--quick", action="store_true",
                         help="a smaller kernel family and a shorter timing grid (about a minute)")
    install.add_argument("--force", action="store_true",
                         help="rebuild and re-measure everything, ignoring caches")
    install.add_argument("--jobs", type=int, default=None, metavar="N",
                         help="parallel compiler processes (default: the number of cores)")
    install.add_argument("--svl", type=int, choices=SVL_CHOICES, default=None, metavar="BITS",
                         help="SME2 streaming vector length to specialise kernels to: 128, 256 or "
                              "512 (default: the CPU's; 512 when cross-building)")
    install.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                         help="time for the optuna search of the planner's parameters (default 90; "
                              "0 keeps the analytic default, as --quick does)")
    install.add_argument("--seed", type=int, default=0, help="seed of the tuning search (default 0)")
    install.add_argument("--only", action="append", default=[], metavar="PATTERN",
                         help="tune only the kernels whose names match this shell pattern, "
                              "e.g. 'at_sgemm_avx512_nn_*' (repeatable)")

    show = commands.add_parser(
        "show", help="print the tuned table (or the host) in the terminal or as JSON",
        description="Print the tuned table: per family the validated and rejected kernels and "
                    "the fastest ones with their share of the measured peak.")
    show.add_argument("--target", default="host", help=TARGET_HELP)
    show.add_argument("--host", action="store_true", help="print what was detected about this machine")
    show.add_argument("--json", action="store_true", help="print the table as JSON for scripts")
    show.add_argument("--all", action="store_true", help="list every kernel, not only the fastest")
    show.add_argument("--paths", action="store_true", help="print where autotune keeps its files")
    show.add_argument("--limit", type=int, default=12, metavar="N",
                      help="fastest kernels listed per data type (default 12)")
    show.add_argument("--heatmap", action="store_true",
                      help="draw each family's kernel speed over mr x nr as a heatmap")

    plan = commands.add_parser(
        "plan", help="show the kernel executing plan the tiler makes for one GEMM shape",
        description="Ask the installed library's input-aware tiler for the plan of C = op(A) op(B) "
                    "with C of M x N and depth K: its steps (which kernel covers which block of C), "
                    "the predicted time and memory operations, and a drawing of the tiling of C.")
    plan.add_argument("M", type=int)
    plan.add_argument("N", type=int)
    plan.add_argument("K", type=int)
    plan.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    plan.add_argument("--trans", default="nn", type=str.lower, choices=("nn", "nt", "tn", "tt"),
                      help="transpositions of A and B, BLAS style (default nn)")
    plan.add_argument("--layout", choices=("col", "row"), default="col",
                      help="storage order of the matrices (default col, as BLAS)")
    plan.add_argument("--threads", type=int, default=0, help="threads to plan for (default: the library's)")
    plan.add_argument("--steps", type=int, default=40, metavar="N",
                      help="list at most N steps (default 40; the drawing shows them all)")

    bench = commands.add_parser(
        "bench", help="benchmark against OpenBLAS, BLIS, LIBXSMM, MKL and numpy in one run",
        description="Run the side-by-side benchmarks of the source checkout's benchmarks/ "
                    "(the same as `python -m benchmarks` there): our cblas and plan handles "
                    "against the peers' on small, irregular and large shapes, one and all cores. "
                    "Arguments after `bench` go to it; `autotune bench -- --help` lists them. "
                    "`scripts/setup.sh --bench` installs the peers.", add_help=False)
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmarks")

    report = commands.add_parser(
        "report", help="write the HTML tuning report (one self-contained offline file)",
        description="Write one self-contained HTML page showing what was tuned: host and peak, "
                    "heatmaps of kernel speed over mr x nr, GFLOPS against K, the selection, "
                    "rejected kernels, and the tuning history and plans once they exist.")
    report.add_argument("--target", default="host", help=TARGET_HELP)
    report.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="where to write it (default: $AUTOTUNE_HOME/reports/<target>.html)")
    report.add_argument("--open", action="store_true", help="open it in a web browser")

    clean = commands.add_parser("clean", help="delete the build cache (tables are kept unless --all)",
                                description="Delete the build cache and journals under $AUTOTUNE_HOME.")
    clean.add_argument("--all", action="store_true", help="also delete the tuned tables")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Console()
    err = Console(stderr=True)
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
    except (ToolchainError, TableError, HomeError, InstallError, PlanError, IsaCapError) as exc:
        # One line however long: a wrapped path or command cannot be copied.
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        return 2
    except OSError as exc:
        # A home that became read-only or full, a file another process holds: the file
        # and the reason, and where to go instead.
        where = f"{exc.filename}: " if exc.filename else ""
        err.print(f"[bold red]error:[/] {where}{exc.strerror or exc} (set AUTOTUNE_HOME to a writable "
                  "directory, or give `report` another -o)", soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        # The run is over: a second Ctrl-C must not cut the report short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        err.print("[yellow]interrupted:[/] the previous table and library are unchanged; finished "
                  "compiles, measurements and tuning trials are kept and the next run resumes from them",
                  soft_wrap=True)
        return 130
    return 1


def cmd_install(args: argparse.Namespace, err: Console) -> int:
    result = install(InstallOptions(target=args.target, quick=args.quick, force=args.force,
                                    jobs=args.jobs, only=tuple(args.only),
                                    svl_bits=args.svl, budget_s=args.budget, seed=args.seed),
                     console=err)
    table = result.table
    err.print(
        f"[green]stored[/] {result.path}: {len(table.validated)} kernels validated, "
        f"{len(table.rejected)} rejected, {len(table.selection)} selected "
        f"({result.compiled} compiled, {result.measured} measured in this run, "
        f"{result.seconds:.0f} s)"
    )
    err.print(tuning_summary(table), highlight=False)
    if result.library:
        err.print(f"library: {result.library}", soft_wrap=True)
    for note in result.notes:
        err.print(f"[yellow]note:[/] {note}")
    return 0


def cmd_show(args: argparse.Namespace, out: Console) -> int:
    if args.paths:
        root = home()
        rows = {
            "home": root,
            "table": table_path(args.target, root),
            "build cache": root / "build",
            "library": library_dir(args.target, root) / LIBRARY_NAME,
            "header": library_dir(args.target, root) / "autotune.h",
        }
        archive = library_dir(args.target, root) / "libautotune.a"
        if archive.exists():  # cross-built targets also ship a static library
            rows["static library"] = archive
        if args.json:
            print(json.dumps({k: str(v) for k, v in rows.items()}, indent=1))
        else:
            for label, path in rows.items():
                out.print(f"{label:<15} {path}", highlight=False, soft_wrap=True)
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
    out.print(tuning_summary(table), highlight=False)

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
    if table.rejected:
        out.print(f"[yellow]{len(table.rejected)} rejected[/], e.g. {table.rejected[0].name}: "
                  f"{table.rejected[0].reason}", soft_wrap=True)


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


def cmd_bench(args: argparse.Namespace, err: Console) -> int:
    # The benchmarks live beside the package in the checkout, not inside it: the
    # install adds one import name, and peers' glue has no place in a runtime.
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "benchmarks" / "__main__.py").exists():
        err.print("[bold red]error:[/] `autotune bench` runs the benchmarks/ of a source checkout; "
                  "this autotune was installed without one (use `pip install -e` from a clone)")
        return 2
    passed = [a for a in args.args if a != "--"] if args.args[:1] == ["--"] else args.args
    return subprocess.call([sys.executable, "-m", "benchmarks", *passed], cwd=checkout)


def tuning_summary(table: TunedTable) -> str:
    """One line on the planner's parameters: tuned (and by how much) or the analytic default."""
    tuning = table.tuning or {}
    default_s, tuned_s = tuning.get("objective_default_s"), tuning.get("objective_tuned_s")
    if not default_s or not tuned_s:
        return "planner parameters: analytic default (not tuned)"
    verdict = "kept" if tuning.get("kept") else "default kept"
    return (f"tuning: suite {default_s * 1e3:.2f} ms default, {tuned_s * 1e3:.2f} ms tuned, {verdict} "
            f"({len(tuning.get('trials', []))} trials, {tuning.get('budget_s', 0):.0f} s)")


def cmd_clean(args: argparse.Namespace, out: Console) -> int:
    root = home()
    # Staged libraries are a build cache too; installed ones go only with --all.
    staged = sorted((root / "lib").glob(".staging-*")) if (root / "lib").is_dir() else []
    doomed = [root / "build", root / "journal", *staged] + ([root / "tables", root / "lib"] if args.all else [])
    for path in doomed:
        if path.exists():
            shutil.rmtree(path)
            out.print(f"removed {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
