"""Markdown tables of a saved run, for docs/performance.md: ``python -m benchmarks.markdown [latest.json]``."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

CBLAS = ("autotune", "openblas", "blis", "mkl")
PLAN = ("autotune", "libxsmm", "mkl")


def _f(value: object, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{float(value):.{digits}f}"  # type: ignore[arg-type]


def _gflops(rows: pd.DataFrame, interface: str, library: str, column: str = "gflops") -> str:
    r = rows[rows["interface"].eq(interface) & rows["library"].eq(library)]
    if r.empty:
        return ""
    if r["status"].iloc[0] != "ok":
        return str(r["status"].iloc[0])
    return _f(r[column].iloc[0])


def c_table(frame: pd.DataFrame, dtype: str, threads: int, align: int, column: str = "gflops") -> str:
    part = frame[frame["level"].eq("c") & frame["dtype"].eq(dtype) & frame["threads"].eq(threads)
                 & frame["align"].eq(align)]
    head = ("| shape | ours cblas | OpenBLAS | BLIS | MKL | ratio | ours plan | LIBXSMM | MKL JIT | ratio | % peak |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for shape in dict.fromkeys(part["shape"]):
        rows = part[part["shape"].eq(shape)]
        ours_c = rows[rows["interface"].eq("cblas") & rows["library"].eq("autotune")]
        ours_p = rows[rows["interface"].eq("plan") & rows["library"].eq("autotune")]
        ratio_c = _f(ours_c["ratio"].iloc[0], 2) if not ours_c.empty else ""
        ratio_p = _f(ours_p["ratio"].iloc[0], 2) if not ours_p.empty else ""
        if column != "gflops" and not ours_c.empty:
            peers = rows[rows["interface"].eq("cblas") & ~rows["library"].eq("autotune") & rows["status"].eq("ok")]
            ratio_c = _f(ours_c[column].iloc[0] / peers[column].max(), 2) if not peers.empty else "–"
            ratio_p = ""
        pf = ours_c["peak_fraction"].iloc[0] if not ours_c.empty and column == "gflops" else math.nan
        cells = [shape, *(_gflops(rows, "cblas", lib, column) for lib in CBLAS), ratio_c,
                 *(_gflops(rows, "plan", lib, column) for lib in PLAN), ratio_p,
                 "–" if not math.isfinite(pf) else f"{pf:.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def python_table(frame: pd.DataFrame) -> str:
    part = frame[frame["level"].eq("python")]
    lines = ["| threads | dtype | shape | `A @ B` | `gemm(A, B)` | ratio | `matmul(out=)` | `gemm(A, B, C)` | ratio | "
             "`matmul` ratio | ours us/call |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (threads, dtype, shape), rows in part.groupby(["threads", "dtype", "shape"], sort=False):
        def pick(interface: str, library: str) -> pd.Series | None:
            r = rows[rows["interface"].eq(interface) & rows["library"].eq(library)]
            return None if r.empty else r.iloc[0]
        if rows["batch"].iloc[0] > 1:
            o, n = pick("python-batch", "autotune"), pick("python-batch", "numpy")
            lines.append(f"| {threads} | {dtype} | {shape} | {_f(n['gflops'])} (matmul) | {_f(o['gflops'])} "
                         f"(gemm_batch) | {_f(o['ratio'], 2)} | | | | | {o['best_s'] * 1e6:.0f} |")
            continue
        a, an = pick("python-alloc", "autotune"), pick("python-alloc", "numpy")
        o, on = pick("python-out", "autotune"), pick("python-out", "numpy")
        m = pick("python-matmul", "autotune")
        lines.append(f"| {threads} | {dtype} | {shape} | {_f(an['gflops'])} | {_f(a['gflops'])} | {_f(a['ratio'], 2)} | "
                     f"{_f(on['gflops'])} | {_f(o['gflops'])} | {_f(o['ratio'], 2)} | "
                     f"{_f(m['ratio'], 2) if m is not None else ''} | {o['best_s'] * 1e6:.2f} |")
    return "\n".join(lines)


def means_table(means: list[dict]) -> str:
    lines = ["| level | interface | dtype | threads | align | regime | geomean | min | worst shape | % peak |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for m in means:
        pf = m.get("peak_fraction")
        lines.append(f"| {m['level']} | {m['interface']} | {m['dtype']} | {m['threads']} | {m['align']} | "
                     f"{m['regime']} | {_f(m['geomean'], 2)} | {_f(m['min_ratio'], 2)} | {m['worst_shape']} | "
                     f"{'–' if pf is None else f'{pf:.0%}'} |")
    return "\n".join(lines)


def render(document: dict) -> str:
    frame = pd.DataFrame(document["results"])
    # JSON's nulls arrive as None in object columns: back to floats (NaN).
    for column in ("gflops", "gflops_median", "cold_gflops", "cold_gflops_median", "ratio", "peak_fraction",
                   "best_s", "median_s"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    out = []
    for dtype in ("f32", "f64"):
        for threads in sorted(set(frame.loc[frame["level"].eq("c"), "threads"])):
            for align in (64, 16):
                part = frame[frame["level"].eq("c") & frame["dtype"].eq(dtype) & frame["threads"].eq(threads)
                             & frame["align"].eq(align)]
                if part.empty:
                    continue
                out.append(f"#### {dtype}, {threads} thread(s), {align}-byte aligned, hot cache (GFLOPS)\n")
                out.append(c_table(frame, dtype, threads, align))
                out.append("")
                if part["cold_gflops"].notna().any():
                    out.append(f"#### {dtype}, {threads} thread(s), {align}-byte aligned, cold cache (GFLOPS)\n")
                    out.append(c_table(frame, dtype, threads, align, "cold_gflops"))
                    out.append("")
    if frame["level"].eq("python").any():
        out.append("#### Python level, one thread (GFLOPS)\n")
        out.append(python_table(frame))
        out.append("")
    out.append("#### Geometric means of ours / best peer\n")
    out.append(means_table(document.get("regime_means", [])))
    out.append("")
    out.append("#### Targets\n")
    out.append("| target | goal | measured | met | short by |\n|---|---|---|---|---|")
    for t in document.get("targets", []):
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        out.append(f"| {t['name']} | {t['goal']} | {t['measured']} | {met} | {t['shortfall']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.markdown")
    parser.add_argument("path", nargs="?", type=Path, default=None, help="latest.json (default: $AUTOTUNE_HOME's)")
    args = parser.parse_args(argv)
    path = args.path
    if path is None:
        from autotune.home import home

        path = home() / "benchmarks" / "latest.json"
    print(render(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
