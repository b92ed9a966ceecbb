"""`autotune report`: one self-contained HTML page describing a tuned table.

The page carries its figures inline (SVG markup or PNG ``data:`` URIs) and its CSS
in a ``<style>`` element, and runs no script, so it opens the same from a laptop's
downloads folder, a CI artifact or an air-gapped machine. Sections whose data does
not exist yet (tuning, plans) are left out, not shown empty; the peers section
stays, saying which command measures them. The page reflows to narrow windows:
heatmaps are one small figure per family that flow side by side, wide tables
scroll inside their own box, and the page itself never scrolls sideways.
"""

from __future__ import annotations

import webbrowser
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from .. import __version__
from ..home import home as default_home
from ..files import atomic_write_text
from ..host import cache_doubts, describe
from ..quant_shapes import MEASURE_KN
from ..table import TunedTable
from ..table import load as load_table
from ..trials import crossover_lines, crossover_name, edge_lines, held_out_line, main_kernel_lines, thread_cost_lines
from . import data, figures
from .extras import ReportExtras, collect_extras

if TYPE_CHECKING:
    from ..plans import Plan

TEMPLATES = Path(__file__).resolve().parent / "templates"

#: Top kernels per family drawn against K; more lines than this stop being readable.
CURVES_PER_FAMILY = 3


@dataclass(frozen=True)
class PageFigure:
    """A drawn figure as the template places it."""

    title: str
    caption: str
    svg: str = ""
    png: str = ""
    wide: bool = True


def default_report_path(target: str, root: Path | None = None) -> Path:
    return (root or default_home()) / "reports" / f"{target}.html"


def render_report(table: TunedTable, *, extra: ReportExtras | None = None) -> str:
    """The report page as text."""
    extra = extra or ReportExtras()
    context = _context(table, extra)
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    env.filters["pct"] = _pct
    return env.get_template("report.html.j2").render(**context)


def write_report(table: TunedTable, path: Path, *, extra: ReportExtras | None = None) -> Path:
    """Write the report of ``table`` to ``path`` (atomically) and return the path."""
    path = Path(path)
    # A new report gets the umask's mode (0644 under the usual 022), readable by the
    # browsers, artifact uploaders and web servers of other users; a report that is
    # there keeps its own.
    atomic_write_text(path, render_report(table, extra=extra))
    return path


def report_command(target: str, output: Path | None, open_browser: bool, *,
                   extra: ReportExtras | None = None, root: Path | None = None) -> Path:
    """What `autotune report` does: load the stored table, write its page, maybe open it.

    A native table measured on another machine is refused by the loader (its numbers
    describe another CPU); an emulated one is never checked against the host.
    """
    from ..host import detect

    table = load_table(target, root, host=detect())
    extra = extra if extra is not None else collect_extras(target, root)
    path = write_report(table, output or default_report_path(target, root), extra=extra)
    if open_browser:
        # On a machine without a browser this returns False; the path is printed either way.
        webbrowser.open(path.resolve().as_uri())
    return path


# -- the page's content ----------------------------------------------------------

def _context(table: TunedTable, extra: ReportExtras) -> dict[str, Any]:
    benchmarks = data.benchmark_frame(extra.benchmarks)  # first: a malformed frame fails fast
    families = data.family_summaries(table)
    sections: list[tuple[str, str]] = [("summary", "Summary"), ("families", "Families")]
    heatmaps = _heatmaps(table)
    sections.append(("heatmaps", "Kernel heatmaps"))
    curves = _k_curves(table)
    if curves:
        sections.append(("depth", "GFLOPS against K"))
    sections += [("selection", "Selection"), ("rejected", "Rejected")]

    tuning = data.tuning_history(extra.tuning if extra.tuning is not None else table.tuning)
    tuning_figures = _tuning_figures(tuning)
    if tuning:
        sections.append(("tuning", "Tuning"))
    decisions = _decisions(table)
    if decisions["figures"] or decisions["lines"]:
        sections.append(("decisions", "Decisions"))
    plan_figures = _plan_figures(extra.plans)
    params, other_params = data.param_rows(table.params, extra.tuning if extra.tuning is not None
                                           else table.tuning)
    if params or other_params:
        sections.append(("params", "Parameters"))
    if plan_figures:
        sections.append(("plans", "Plans"))
    quantised = _quantised(table.settings)
    if quantised:
        sections.append(("quantised", "Quantised"))
    sections.append(("peers", "Peers"))  # with the command that measures them when there are none

    best_by_dtype = {}
    for summary in families:
        current = best_by_dtype.get(summary.dtype)
        if summary.best_gflops is not None and (current is None or summary.best_gflops > current.best_gflops):
            best_by_dtype[summary.dtype] = summary
    return {
        "table": table,
        "title": f"autotune report: {table.target}",
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": __version__,
        "sections": sections,
        "host_rows": describe(table.host),
        "peaks": _peak_rows(table),
        "settings": _settings_rows(table.settings),
        "counts": {"kernels": len(table.kernels), "validated": len(table.validated),
                   "rejected": len(table.rejected), "selected": len(table.selection)},
        "best_by_dtype": [best_by_dtype[d] for d in sorted(best_by_dtype)],
        "families": families,
        "heatmaps": heatmaps,
        "curves": curves,
        "pad": _pad_table(data.pad_sensitivity(table)),
        "selection": data.selection_groups(table),
        "rejections": data.rejection_reasons(table),
        "tuning": tuning,
        "tuning_figures": tuning_figures,
        "decisions": decisions,
        "params": params,
        "other_params": other_params,
        "plans": plan_figures,
        "quantised": quantised,
        "benchmarks": benchmarks,
        "benchmark_figure": _benchmark_figure(benchmarks),
        "benchmark_ratios": _ratio_table(benchmarks),
    }


def _peak_rows(table: TunedTable) -> list[tuple[str, str, float]]:
    """(dtype, where, GFLOPS): the table's peak per dtype, then each ISA's own."""
    rows = [(dtype, "host (best ISA)", float(g)) for dtype, g in sorted(table.peak_gflops.items())]
    by_isa = table.settings.get("peak_by_isa") or {}
    for isa in sorted(by_isa, key=data.isa_rank):
        for dtype, gflops in sorted((by_isa[isa] or {}).items()):
            rows.append((dtype, isa, float(gflops)))
    return rows


#: The measurement settings, labelled for a reader; other keys of ``settings`` are
#: records with sections of their own (peaks, quantised kernels, crossovers) or are
#: written out below.
_SETTING_LABELS = {"mode": "mode", "ks": "K grid", "pads": "leading-dim pads",
                   "min_time_ms": "min time per point (ms)", "repeats": "repeats per pass",
                   "passes": "passes over the grid (median kept)", "isas": "ISAs",
                   "svl_bits": "SME2 vector lengths (bits)"}


def _settings_rows(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows of how the kernels were measured.  Structured entries are
    never dumped: a table's crossovers once filled two screens of this table."""
    rows = [(label, ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value))
            for key, label in _SETTING_LABELS.items() if (value := settings.get(key)) is not None]
    for isa, skip in sorted((settings.get("dominated") or {}).items()):
        rows.append((f"{isa} kernels not built",
                     f"{skip['kernels']} of tiles of {skip['area_limit']} elements or more: every one of "
                     f"{skip['sampled']} sampled lost its block to {skip['by']} by "
                     f"{100 * (1 - skip['worst_ratio']):.0f}% or more"))
    if settings.get("other_load") is not None:
        rows.append(("other load before the crossover sweeps", f"{settings['other_load']:.2f} CPUs"))
    return rows


def _quantised(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The quantised kernels: those install validated and timed (x86, ``settings["quant"]``),
    else those the library carries unmeasured (``settings["quant_library"]``); None for neither."""
    quant = settings.get("quant") or {}
    if quant.get("verdicts"):
        seconds = quant.get("seconds", {})
        ms = sorted({int(m) for times in seconds.values() for m in times})
        selected = set(quant.get("selected", ()))
        rows = [(name, verdict, name in selected,
                 [1e6 * seconds.get(name, {})[str(m)] if str(m) in seconds.get(name, {}) else None for m in ms])
                for name, verdict in sorted(quant["verdicts"].items())]
        return {"measured": True, "kn": MEASURE_KN, "ms": ms, "rows": rows}
    library = settings.get("quant_library")
    if library:
        return {"measured": False, "entries": list(library)}
    return None


def _pad_table(pad: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, list[float | None]]]]:
    """(transpositions, rows of (ISA, dtype, padded/tight ratio per transposition))."""
    if pad.empty:
        return [], []
    transes = sorted(pad["trans"].unique(), key=data.trans_rank)
    rows = []
    for (isa, dtype), group in pad.groupby(["isa", "dtype"], sort=False):
        ratio = dict(zip(group["trans"], group["ratio"]))
        rows.append((isa, dtype, [ratio.get(t) for t in transes]))
    return transes, rows


@dataclass(frozen=True)
class HeatmapGroup:
    """A dtype's heatmaps: a key (colour bar and marks), then one panel per family."""

    title: str
    caption: str
    key: str  # PNG data URI
    panels: tuple[tuple[str, str], ...]  # (alt text, PNG data URI)


def _heatmaps(table: TunedTable) -> list[HeatmapGroup]:
    """Per dtype, one small figure per family (ISA and transposition), each sized to its grid.

    One figure of every family at once is too wide to read once a browser scales
    it down to a narrow window; panels at their natural size flow instead, as many
    abreast as fit (two at 800 px), and keep every row and column label legible.
    The panels of a dtype share one colour scale, explained once by the key.
    """
    out = []
    for dtype in data.dtypes(table):
        grids = [data.heatmap_grid(table, isa, d, trans) for isa, d, trans in data.families(table) if d == dtype]
        grids = [g for g in grids if g.mrs]
        if not grids:
            continue
        timed = any(g.timed for g in grids)
        with_peak = all(g.peak for g in grids)
        scale = figures.heat_scale(grids)
        key = figures.to_png_uri(figures.heatmap_key(scale=scale, timed=timed, with_peak=with_peak))
        panels = tuple(
            (f"{g.isa} {dtype} {g.trans}: " + ("heatmap of best GFLOPS over mr and nr" if timed
                                                else "validation result over mr and nr"),
             figures.to_png_uri(figures.heatmap_panel(g, scale=scale, timed=timed, with_peak=with_peak)))
            for g in grids)
        peak = table.peak_gflops.get(dtype)
        caption = (f"Each cell is one {dtype} kernel computing an mr x nr block of C; colour is its best "
                   + (f"GFLOPS as a share of the measured {dtype} peak ({peak:.1f} GFLOPS), one scale for "
                      "every family." if peak else "GFLOPS (no peak was measured).")
                   + " Dots mark the kernels the tiler will use; the magenta frame is each panel's fastest.")
        if not timed:
            caption = (f"Each cell is one {dtype} kernel computing an mr x nr block of C, coloured by its "
                       "validation result; nothing was timed, so there is no speed to show.")
        title = f"{dtype}: best GFLOPS by block shape" if timed else f"{dtype}: validation by block shape"
        out.append(HeatmapGroup(title, caption, key, panels))
    return out


def _k_curves(table: TunedTable) -> list[PageFigure]:
    out = []
    for dtype in data.dtypes(table):
        keys = [(isa, trans) for isa, d, trans in data.families(table) if d == dtype]
        curves = {key: data.k_curves(table, key[0], dtype, key[1], top=CURVES_PER_FAMILY) for key in keys}
        curves = {key: frame for key, frame in curves.items() if not frame.empty}
        if not curves:
            continue
        transes = data.unique_in_order(sorted((t for _, t in keys), key=data.trans_rank))
        fig = figures.k_curve_figure(curves, transes, table.peak_gflops.get(dtype),
                                     title=f"{dtype}: the {CURVES_PER_FAMILY} fastest kernels of each ISA")
        caption = ("Median GFLOPS at each depth K with tight leading dimensions, for the kernels that "
                   "rank highest by their mean over K (the selection's score). The dashed line is the peak.")
        out.append(PageFigure(f"{dtype} GFLOPS against K", caption,
                          svg=figures.to_svg(fig, title=f"{dtype} GFLOPS against K")))
    return out


def _tuning_figures(history: data.TuningHistory | None) -> list[PageFigure]:
    if history is None:
        return []
    counts = history.counts
    left_out = []
    if counts.pruned:
        left_out.append(f"{counts.pruned} pruned (stopped after a few shapes, already far slower than good "
                        "trials)")
    if counts.failed:
        left_out.append(f"{counts.failed} failed")
    if counts.unfinished:
        left_out.append(f"{counts.unfinished} unfinished")
    caption = (f"Each dot is one of the {counts.complete} complete trials, its measured end-to-end objective"
               + (f"; not drawn, having no objective: {', '.join(left_out)}" if left_out else "")
               + ". The line is the best found so far, a minimum of single noisy measurements; the dashed "
                 "line is the analytic defaults, and the dotted one the result re-measured at the end.")
    out = [PageFigure("Objective per trial", caption,
                      svg=figures.to_svg(figures.tuning_figure(history), title="objective per trial"), wide=False)]
    importance, method = data.param_importance(history)
    left_out = method.partition("; left out: ")[2]
    if importance.empty:
        caption = ("Parameter importance: none to show; " + (left_out or "no parameter varied")
                   + ". optuna's estimate (PED-ANOVA) needs about "
                   f"{data.MIN_IMPORTANCE_TRIALS} complete trials per study.")
        out.append(PageFigure("Parameter importance", caption, wide=False))
        return out
    caption = ("How much each planner parameter mattered: optuna's own estimate (PED-ANOVA, "
               "optuna.importance.get_param_importances) over each study's complete trials, which "
               "parameters set the best trials apart from the rest; each study's shares add up to 100%."
               + (f" Left out: {left_out}." if left_out else ""))
    out.append(PageFigure("Parameter importance", caption,
                          svg=figures.to_svg(figures.importance_figure(importance, method),
                                             title="parameter importance"), wide=False))
    return out


def _decisions(table: TunedTable) -> dict[str, Any]:
    """The planner's measured decisions: the doubted cache reports, a chart per crossover,
    and the held-out check's verdict."""
    crossovers = table.settings.get("crossovers") or []
    lines = [f"Doubtful cache report: {d}." for d in cache_doubts(table.host)]
    lines += [f"Crossover {line}." for line in crossover_lines(crossovers)]
    lines += [f"{line[0].upper()}{line[1:]}." for line in edge_lines(table.settings.get("edge"))
              + main_kernel_lines(table.settings.get("main_kernel"), table.settings.get("place_kernel"))
              + thread_cost_lines(table.settings.get("thread_cost"))]
    held = held_out_line(table.tuning)
    if held:
        lines.append(held[0].upper() + held[1:] + ".")
    figs = []
    for c in crossovers:
        if not c.get("points"):
            continue
        name = crossover_name(c)
        figs.append(PageFigure(name, f"{c['alt']} against {c['base']}: below 1 the {c['alt']} side is faster; "
                                     "the stored threshold (solid) and the model's (dashed)",
                               svg=figures.to_svg(figures.crossover_figure(c), title=name), wide=False))
    return {"lines": lines, "figures": figs}


def _plan_figures(plans: Sequence["Plan"] | None) -> list[PageFigure]:
    if not plans:
        return []
    colours = figures.kernel_colours([name for p in plans for name in p.kernels_by_area()])
    out = []
    for plan in plans:
        coverage = plan.coverage()
        caption = f"{plan.step_count} blocks, {len(plan.kernels_by_area())} kernels"
        if abs(coverage - 1.0) > 1e-9:
            caption += f"; the blocks cover {100 * coverage:.1f}% of C"
        out.append(PageFigure(plan.title, caption, png=figures.to_png_uri(figures.plan_figure(plan, colours), dpi=120, tight=True),
                          wide=False))
    return out


def _benchmark_figure(frame: pd.DataFrame | None) -> PageFigure | None:
    if frame is None:
        return None
    return PageFigure("GFLOPS per shape", "Best-of-N GFLOPS of each library on each shape, measured in one run.",
                  svg=figures.to_svg(figures.benchmark_figure(frame), title="peer comparison"))


def _ratio_table(frame: pd.DataFrame | None) -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """(libraries, rows of (shape, ratio per library)) in the measured order."""
    if frame is None:
        return [], []
    libraries = data.unique_in_order(frame["library"])
    libraries.sort(key=lambda name: name != "autotune")
    # Not pivot_table: it drops a shape whose ratios are all missing (one only autotune ran).
    pivot = frame.groupby(["shape", "library"])["ratio"].max().unstack()
    rows = []
    for shape in data.unique_in_order(frame["shape"]):
        values = [pivot.at[shape, lib] if lib in pivot.columns else None for lib in libraries]
        rows.append((shape, [None if v is None or pd.isna(v) else float(v) for v in values]))
    return libraries, rows


# -- number formatting (template filters) -----------------------------------------

def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return f"{value:,.{digits}f}"


def _pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return f"{value:.0f}%"
