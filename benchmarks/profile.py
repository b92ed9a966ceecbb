"""Where the time of one shape goes: ``python -m benchmarks.profile 13,33,23 [--dtype f64]``.

Runs the C harness on the installed library under ``perf record`` and splits the
samples into what can limit a shape: the generated kernels, the portable edge code
and executor loop, packing, the entry point and plan cache (per-call overhead),
threading, and the harness itself.  Beside it: the plan the tiler made (path,
kernels, steps, predicted time from the measured kernel table) against the measured
time, so a miss can be pinned on overhead, kernel quality, planning or packing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.runtime.loader import LIBRARY_NAME

from .harness import build_harness
from .peers import thread_env

# (category, pattern on the symbol name), first match wins.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("kernels", r"^at_[sd]gemm_[a-z0-9]+_[nt]{2}_\d+x\d+"),
    ("packing", r"pack_[ab]"),
    ("edge code + executor", r"run_steps|run_part|run_item|at__execute|at_plan_execute|edge_|scale_|item_ptrs"),
    ("entry + plan cache", r"at__plan_acquire|at__plan_release|key_hash|cblas_|at_[sd]?gemm$|at_gemm|memcmp|"
                           r"pthread_mutex|cblas_check"),
    ("threads", r"pool|futex|sched|pthread_cond|task_"),
    ("harness", r"^main$|run_once|flush_caches|now$|clock_gettime"),
)


@dataclass(frozen=True)
class Profile:
    shares: dict[str, float]          # category -> fraction of samples
    top: list[tuple[str, float]]      # (symbol, fraction)


def categorize(symbol: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, symbol):
            return name
    return "other"


def parse_report(text: str) -> Profile:
    """``perf report --stdio --no-children --sort symbol`` -> shares per category."""
    per_symbol: Counter[str] = Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if m:
            per_symbol[m.group(2)] += float(m.group(1)) / 100
    shares: Counter[str] = Counter()
    for symbol, share in per_symbol.items():
        shares[categorize(symbol)] += share
    return Profile(dict(shares.most_common()), per_symbol.most_common(8))


def profile_shape(library: Path, shape: str, dtype: str, api: str, threads: int, build_dir: Path,
                  seconds: float = 0.5) -> tuple[Profile, str]:
    perf = shutil.which("perf")
    if perf is None:
        raise RuntimeError("perf is not installed (Debian package linux-perf)")
    exe = build_harness(build_dir)
    env = {**os.environ, **thread_env(threads)}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        run = subprocess.run([perf, "record", "-q", "-F", "10000", "-o", str(data), str(exe), "--lib", str(library),
                              "--api", api, "--dtype", dtype, "--threads", str(threads), "--min-time",
                              f"{seconds / 5:g}", "--repeats", "5", shape],
                             capture_output=True, text=True, env=env, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"perf record failed: {run.stderr.strip()[-300:]}")
        report = subprocess.run([perf, "report", "-i", str(data), "--stdio", "--no-children", "--sort", "symbol"],
                                capture_output=True, text=True, check=False)
    return parse_report(report.stdout), run.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("shape", help="M,N,K or M,N,K,BATCH")
    parser.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    parser.add_argument("--api", choices=("cblas", "plan"), default="cblas")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args(argv)
    from autotune.home import home as default_home

    home = args.home or default_home()
    library = home / "lib" / "host" / LIBRARY_NAME
    out = Console(highlight=False)
    prof, line = profile_shape(library, args.shape, args.dtype, args.api, args.threads, home / "benchmarks" / "build")
    import json

    record = json.loads(line.splitlines()[-1])
    dims = [int(v) for v in args.shape.split(",")]
    M, N, K = dims[:3]
    batch = dims[3] if len(dims) > 3 else 1
    measured = record["best_s"]
    out.print(f"{args.dtype} {M}x{N}x{K} x{batch} {args.api}, {args.threads} thread(s): "
              f"{measured * 1e9:.0f} ns/call, {2 * M * N * K * batch / measured * 1e-9:.1f} GFLOPS")
    table = Table(title="perf samples by category")
    table.add_column("category")
    table.add_column("share", justify="right")
    for name, share in prof.shares.items():
        table.add_row(name, f"{share:.0%}")
    out.print(table)
    out.print("top symbols: " + ", ".join(f"{s} {f:.0%}" for s, f in prof.top))
    os.environ["AUTOTUNE_HOME"] = str(home)
    os.environ["AUTOTUNE_NUM_THREADS"] = str(args.threads)
    from autotune import plans

    plan = plans.plan(M, N, K, dtype=args.dtype, threads=args.threads)
    kernels = Counter(s.kernel for s in plan.steps)
    predicted = plan.predicted_seconds * batch
    out.print(f"plan: path {plan.path}, {len(plan.steps)} steps, predicted {predicted * 1e9:.0f} ns "
              f"(measured / predicted = {measured / predicted:.2f}); kernels: "
              + ", ".join(f"{k} x{n}" for k, n in kernels.most_common(6)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
