"""Printing (rich) and saving (CSV/JSON) a benchmark run."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from autotune.files import atomic_write_text, replace as replace_file

from .peers import Peer
from .results import OURS

if TYPE_CHECKING:
    from . import Results

CBLAS_PEERS = ("openblas", "blis", "mkl")
PLAN_PEERS = ("libxsmm", "mkl")


def console() -> Console:
    # Wide enough for the per-shape table when the output is a file or a pipe.
    return Console(highlight=False, width=None if Console().is_terminal else 170)


def _clean(value: Any) -> Any:
    """JSON has no NaN: missing numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _clean(value.item())
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def save(results: "Results", out_dir: Path) -> "Results":
    """latest.csv / latest.json and a timestamped copy of the JSON, atomically replaced."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    document = {
        "meta": results.meta,
        "peak_gflops": results.peak,
        "peers": [{"library": p.library, "interface": p.interface, "path": str(p.path) if p.path else None,
                   "missing": p.missing} for p in results.peers],
        "targets": [{"name": t.name, "goal": t.goal, "measured": t.measured, "met": t.met,
                     "shortfall": t.shortfall} for t in results.targets],
        "regime_means": _records(results.means),
        "results": _records(results.frame),
        "report": _records(results.report_frame()),
    }
    paths = []
    for name, write in (("latest.csv", lambda p: results.frame.to_csv(p, index=False)),
                        ("latest.json", lambda p: p.write_text(json.dumps(document, indent=1))),
                        ("report.csv", lambda p: results.report_frame().to_csv(p, index=False))):
        target = out_dir / name
        tmp = target.with_suffix(target.suffix + ".tmp")
        write(tmp)
        replace_file(tmp, target)
        paths.append(target)
    dated = out_dir / f"run-{stamp}.json"
    atomic_write_text(dated, (out_dir / "latest.json").read_text())
    paths.append(dated)
    return replace(results, paths=tuple(paths))


def _g(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:,.1f}"


def _x(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    style = "green" if value >= 1.0 else ("yellow" if value >= 0.9 else "red")
    return f"[{style}]{value:.2f}[/]"


def _cell(frame: pd.DataFrame, interface: str, library: str) -> tuple[str, float]:
    row = frame[frame["interface"].eq(interface) & frame["library"].eq(library)]
    if row.empty:
        return "", math.nan
    r = row.iloc[0]
    if r["status"] != "ok":
        return str(r["status"]), math.nan
    return _g(r["gflops"]), float(r["gflops"])


def c_table(frame: pd.DataFrame, dtype: str, threads: int = 1, align: int = 64) -> Table:
    part = frame[frame["level"].eq("c") & frame["dtype"].eq(dtype) & frame["threads"].eq(threads)
                 & frame["align"].eq(align)]
    table = Table(title=f"GFLOPS, {dtype}, {threads} thread(s), {align}-byte aligned, hot cache "
                        f"(ratio = autotune / best peer)")
    table.add_column("shape")
    for name in ("autotune", *CBLAS_PEERS):
        table.add_column(f"{name}\ncblas", justify="right")
    table.add_column("ratio", justify="right")
    for name in ("autotune", "libxsmm", "mkl jit"):
        table.add_column(f"{name}\nplan" if name == "autotune" else name, justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("% peak", justify="right")
    table.add_column("cold\nratio", justify="right")
    for shape in dict.fromkeys(part["shape"]):
        rows = part[part["shape"].eq(shape)]
        cells = [shape]
        ours_cblas = rows[rows["interface"].eq("cblas") & rows["library"].eq(OURS)]
        for lib in ("autotune", *CBLAS_PEERS):
            cells.append(_cell(rows, "cblas", lib)[0])
        cells.append(_x(float(ours_cblas["ratio"].iloc[0])) if not ours_cblas.empty else "")
        ours_plan = rows[rows["interface"].eq("plan") & rows["library"].eq(OURS)]
        for lib in ("autotune", *PLAN_PEERS):
            cells.append(_cell(rows, "plan", lib)[0])
        cells.append(_x(float(ours_plan["ratio"].iloc[0])) if not ours_plan.empty else "")
        pf = float(ours_cblas["peak_fraction"].iloc[0]) if not ours_cblas.empty else math.nan
        cells.append("–" if not math.isfinite(pf) else f"{pf:.0%}")
        cold = rows[rows["interface"].eq("cblas") & rows["status"].eq("ok")]
        cold_ratio = math.nan
        if not ours_cblas.empty and cold["cold_gflops"].notna().any():
            peers = cold[~cold["library"].eq(OURS)]["cold_gflops"]
            if peers.notna().any():
                cold_ratio = float(ours_cblas["cold_gflops"].iloc[0] / peers.max())
        cells.append(_x(cold_ratio))
        table.add_row(*cells)
    return table


def python_table(frame: pd.DataFrame) -> Table:
    part = frame[frame["level"].eq("python")]
    table = Table(title="Python level: GFLOPS (ratio = autotune / numpy)")
    for col in ("threads", "dtype", "shape", "A @ B", "gemm(A, B)", "ratio", "matmul(out=)", "gemm(A, B, C)",
                "ratio", "matmul ratio", "us/call ours"):
        table.add_column(col, justify="left" if col in ("threads", "dtype", "shape") else "right")
    for (threads, dtype, shape), rows in part.groupby(["threads", "dtype", "shape"], sort=False):
        def get(interface: str, library: str) -> pd.Series | None:
            r = rows[rows["interface"].eq(interface) & rows["library"].eq(library)]
            return None if r.empty else r.iloc[0]
        if shape.startswith("10000") or rows["batch"].iloc[0] > 1:
            ours, theirs = get("python-batch", OURS), get("python-batch", "numpy")
            table.add_row(str(threads), dtype, shape, _g(theirs["gflops"]) if theirs is not None else "",
                          f"{_g(ours['gflops'])} (batch)" if ours is not None else "",
                          _x(ours["ratio"]) if ours is not None else "", "", "", "", "",
                          f"{ours['best_s'] * 1e6:.1f}" if ours is not None else "")
            continue
        a_ours, a_np = get("python-alloc", OURS), get("python-alloc", "numpy")
        o_ours, o_np = get("python-out", OURS), get("python-out", "numpy")
        m_ours = get("python-matmul", OURS)
        table.add_row(str(threads), dtype, shape, *(_g(r["gflops"]) if r is not None else "" for r in (a_np, a_ours)),
                      _x(a_ours["ratio"]) if a_ours is not None else "",
                      *(_g(r["gflops"]) if r is not None else "" for r in (o_np, o_ours)),
                      _x(o_ours["ratio"]) if o_ours is not None else "",
                      _x(m_ours["ratio"]) if m_ours is not None else "",
                      f"{o_ours['best_s'] * 1e6:.2f}" if o_ours is not None else "")
    return table


def means_table(means: pd.DataFrame) -> Table:
    table = Table(title="Geometric mean of autotune / best peer per regime")
    for col in ("level", "interface", "dtype", "threads", "align", "regime", "geomean", "min", "worst shape",
                "% peak"):
        table.add_column(col, justify="right" if col in ("geomean", "min", "% peak") else "left")
    for r in means.itertuples(index=False):
        pf = r.peak_fraction
        table.add_row(r.level, r.interface, r.dtype, str(r.threads), str(r.align), r.regime, _x(r.geomean),
                      _x(r.min_ratio), r.worst_shape, "–" if not math.isfinite(pf) else f"{pf:.0%}")
    return table


def show_peers(peers: list[Peer] | tuple[Peer, ...], out: Console | None = None) -> None:
    out = out or console()
    for p in peers:
        where = str(p.path) if p.found else f"[red]missing[/]: {p.missing}"
        out.print(f"{p.library:9s} {p.interface:6s} {where}")


def peak_line(frame: pd.DataFrame, peak: dict[str, float]) -> str:
    """What the % peak column divides by: the core's peak measured beside each point
    (its range over the run says how far the clock moved), else the run's figure."""
    beside = frame[frame["core_gflops"].notna()] if "core_gflops" in frame else frame.iloc[0:0]
    if not beside.empty:
        spans = ", ".join(f"{d} {g['core_gflops'].min():.1f}-{g['core_gflops'].max():.1f}"
                          for d, g in beside.groupby("dtype"))
        return f"peak per core (GFLOPS), measured beside each point, which its % peak divides by: {spans}"
    figures = ", ".join(f"{k} {v:.1f}" for k, v in sorted(peak.items())) or "unknown (no installed table)"
    return ("peak per core (GFLOPS; the install's peak loop, or the fastest one-thread result of this run "
            f"if higher): {figures}")


def show(results: "Results", out: Console) -> None:
    frame = results.frame
    if frame.empty:
        out.print("[red]nothing was measured[/]")
        return
    c_level = frame[frame["level"].eq("c")]
    # One table per dtype and thread count measured (a --threads 2 run has no 1-thread rows).
    for dtype, threads in dict.fromkeys(zip(c_level["dtype"], c_level["threads"])):
        out.print(c_table(frame, dtype, int(threads)))
    if frame["level"].eq("python").any():
        out.print(python_table(frame))
    if not results.means.empty:
        out.print(means_table(results.means))
    if results.meta.get("python_fast_path") is False:
        out.print("[red]python level: autotune.gemm was numpy's fallback (no library installed in "
                  f"{results.meta.get('home')}); its ratios do not measure autotune[/]")
    if results.meta.get("python_error"):
        out.print(f"[red]python level failed[/]: {results.meta['python_error']}")
    jit = frame[frame["library"].eq("mkl") & frame["interface"].eq("plan") & frame["status"].eq("ok")]
    declined = int(jit["detail"].eq("no-jit").sum())
    if declined:
        # mkl_jit_create_?gemm returned MKL_NO_JIT: the kernel it hands back calls MKL's standard gemm.
        out.print(f"MKL JIT declined {declined} of {len(jit)} points (MKL_NO_JIT on this CPU): "
                  "its column is MKL's standard gemm behind the JIT interface")
    missing = [p for p in results.peers if not p.found]
    for p in missing:
        out.print(f"[red]missing peer[/] {p.library} ({p.interface}): {p.missing}")
    wrong = frame[frame["status"].eq("wrong")]
    for r in wrong.itertuples(index=False):
        out.print(f"[red]wrong result[/] {r.library} {r.interface} {r.dtype} {r.shape}: err {r.err:.2e}")
    out.print(peak_line(frame, results.peak))
    for t in results.targets:
        mark = "[green]met[/]" if t.met else ("[yellow]n/a[/]" if t.met is None else "[red]missed[/]")
        extra = f" — {t.shortfall}" if t.shortfall else ""
        out.print(f"target {mark}: {t.name}: {t.goal}; measured {t.measured}{extra}")
    meta = results.meta
    out.print(f"load {meta.get('load_before')} -> {meta.get('load_after')}, {meta.get('seconds')} s")
    for path in results.paths:
        out.print(f"wrote {path}")
