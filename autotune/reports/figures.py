"""The report's figures, drawn with matplotlib's object API (no pyplot state).

Each builder takes the numbers from :mod:`autotune.reports.data` and returns a
:class:`matplotlib.figure.Figure`; :func:`to_svg` and :func:`to_png_uri` turn a
figure into markup that needs nothing outside the page. Dense figures (heatmaps,
plan drawings) go out as PNG, whose size does not grow with the number of cells;
line and bar charts as SVG, which stays sharp at any zoom.
"""

from __future__ import annotations

import base64
import io
import itertools
import math
import re
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # reports are written on headless machines; never open a window

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import BoundaryNorm, ListedColormap, Normalize, to_hex
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..trials import SIZE_AXES, size_label
from .data import ABSENT, REJECTED, VALIDATED, HeatmapGrid, TuningHistory, unique_in_order

if TYPE_CHECKING:  # the plan records only: drawing loads no library
    from ..plans import Plan

STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "axes.edgecolor": "#888888",
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.facecolor": "white",
    # Glyphs as paths: the SVG then draws the same text on any machine, with no font lookup.
    "svg.fonttype": "path",
    # A fixed salt keeps generated ids, and so the whole page, identical between runs.
    "svg.hashsalt": "autotune-report",
}

HEAT_CMAP = "viridis"
#: Inches per heatmap cell when panels are sized to their grids: room for a 6 pt label.
HEAT_CELL = 0.13

ABSENT_COLOUR = "#f1f1f1"
REJECTED_COLOUR = "#d9534f"
VALIDATED_COLOUR = "#5aa9a0"
PEAK_COLOUR = "#444444"
BEST_COLOUR = "#c2185b"

# One hue per ISA so a kernel's family reads at a glance in every chart.
ISA_COLOURS = {
    "avx512": "Blues", "avx2": "Oranges", "generic": "Greens",
    "neon": "Purples", "sme2": "Reds", "sme": "RdPu",
}


def style() -> AbstractContextManager:
    return matplotlib.rc_context(STYLE)


# -- output ----------------------------------------------------------------------

_counter = itertools.count()


def to_svg(fig: Figure, *, title: str = "") -> str:
    """Inline SVG markup: no XML prologue, no namespaces to fetch, ids unique in the page.

    Several SVGs share one HTML document, so matplotlib's ids (glyph definitions,
    clip paths) get a per-figure prefix; otherwise the second figure's ``<use>`` could
    resolve to the first figure's glyph of the same id.
    """
    # Every figure here lays itself out (constrained layout), so no "tight" bbox pass:
    # it would draw the figure a second time for nothing.
    buffer = io.StringIO()
    with style():
        fig.savefig(buffer, format="svg",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text, count=0)
    text = text.replace("xlink:href=", "href=")
    prefix = f"f{next(_counter)}-"
    text = re.sub(r'\bid="', f'id="{prefix}', text)
    text = text.replace('href="#', f'href="#{prefix}').replace("url(#", f"url(#{prefix}")
    label = f' role="img" aria-label="{_attr(title)}"' if title else ""
    return text.replace("<svg", f"<svg class=\"figure-svg\"{label}", 1)


def to_png_uri(fig: Figure, *, dpi: int = 110, tight: bool = False) -> str:
    """A ``data:`` URI of the figure as PNG.

    ``tight`` crops to the drawn artists, for figures whose fixed aspect ratio the
    layout engine cannot honour (plan drawings) and which would otherwise clip.
    """
    buffer = io.BytesIO()
    with style():
        fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None},
                    bbox_inches="tight" if tight else None, pad_inches=0.08)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


# -- heatmaps --------------------------------------------------------------------

def heat_scale(grids: Sequence[HeatmapGrid]) -> float:
    """The top of the colour scale: 100 (% of peak) when every grid has a peak, else the fastest GFLOPS."""
    if all(g.peak for g in grids):
        return 100.0
    return max((float(np.nanmax(g.gflops)) for g in grids if g.timed), default=1.0)


def heatmap_panel(grid: HeatmapGrid, *, scale: float, timed: bool, with_peak: bool) -> Figure:
    """One family (ISA, dtype, transposition) as its own figure, sized to its grid.

    Every cell gets HEAT_CELL inches, room for its row and column label at 6 pt,
    so a panel is readable at its natural size; the report flows the panels of a
    dtype side by side as the window allows (two abreast at 800 px).  Cell colour
    is the kernel's best GFLOPS as a percentage of the dtype's peak on the dtype's
    common scale (``scale``, see :func:`heat_scale`), so families compare; the key
    (:func:`heatmap_key`) explains colours and marks once for all panels.
    """
    width = max(2.9, HEAT_CELL * len(grid.nrs) + 0.75)
    height = max(1.8, HEAT_CELL * len(grid.mrs) + 0.95)
    with style():
        fig = Figure(figsize=(width, height), layout="constrained")
        ax = fig.subplots()
        _draw_heat_panel(ax, grid, Normalize(vmin=0.0, vmax=scale), colormaps[HEAT_CMAP], timed, with_peak)
    return fig


def _heat_legend(timed: bool) -> list:
    """The marks a heatmap panel uses, for its legend."""
    handles = [Patch(facecolor=REJECTED_COLOUR, label="rejected"),
               Patch(facecolor=ABSENT_COLOUR, edgecolor="#bbbbbb", label="no kernel (does not fit)")]
    if not timed:
        handles.insert(0, Patch(facecolor=VALIDATED_COLOUR, label="validated (not timed)"))
    handles.append(_dot_handle())
    if timed:
        handles.append(Patch(fill=False, edgecolor=BEST_COLOUR, linewidth=1.6, label="fastest in panel"))
    return handles


def heatmap_key(*, scale: float, timed: bool, with_peak: bool) -> Figure:
    """The colour bar and the marks of a dtype's heatmap panels, drawn once above them."""
    handles = _heat_legend(timed)
    with style():
        fig = Figure(figsize=(6.4, 1.05 if timed else 0.45), layout="constrained")
        if timed:
            bar_ax, legend_ax = fig.subplots(2, 1, height_ratios=(1, 1.3))
            from matplotlib.cm import ScalarMappable

            bar = fig.colorbar(ScalarMappable(Normalize(0.0, scale), colormaps[HEAT_CMAP]), cax=bar_ax,
                               orientation="horizontal")
            bar.set_label("best GFLOPS, % of measured peak" if with_peak else "best GFLOPS", fontsize=8)
            bar_ax.tick_params(labelsize=7)
        else:
            legend_ax = fig.subplots()
        legend_ax.axis("off")
        legend_ax.legend(handles=handles, loc="center", ncols=len(handles), fontsize=7.5, handlelength=1.4,
                         columnspacing=1.0)
    return fig


def heatmap_figure(grids: Sequence[HeatmapGrid], title: str = "") -> Figure:
    """Panels of one dtype in one figure: a row per ISA, a column per transposition.

    Cell colour is the kernel's best GFLOPS as a percentage of the dtype's peak, on
    one colour bar for every panel so families compare directly; a dot marks the
    shapes whose kernel the selection kept, a cross the rejected kernels, a magenta
    frame the fastest kernel of each panel. Without timings (an emulated table) the
    cells show validation only.  Too wide to read in a narrow window: the report
    draws :func:`heatmap_panel` figures instead; this one suits a slide or a paper.
    """
    isas = unique_in_order(g.isa for g in grids)
    transes = unique_in_order(g.trans for g in grids)
    timed = any(g.timed for g in grids)
    with_peak = all(g.peak for g in grids)
    scale = heat_scale(grids)
    with style():
        # Wide enough for the legend even when a table has a single transposition.
        fig = Figure(figsize=(max(2.9 * len(transes) + 0.9, 6.4), 2.9 * len(isas) + 0.5), layout="constrained")
        axes = fig.subplots(len(isas), len(transes), squeeze=False)
        norm = Normalize(vmin=0.0, vmax=scale)
        cmap = colormaps[HEAT_CMAP]
        mesh = None
        for ax in axes.flat:
            ax.set_visible(False)
        for grid in grids:
            ax = axes[isas.index(grid.isa), transes.index(grid.trans)]
            ax.set_visible(True)
            mesh = _draw_heat_panel(ax, grid, norm, cmap, timed, with_peak) or mesh
        if timed and mesh is not None:
            bar = fig.colorbar(mesh, ax=axes, shrink=0.85, aspect=40, pad=0.01)
            bar.set_label("best GFLOPS, % of measured peak" if with_peak else "best GFLOPS")
        handles = _heat_legend(timed)
        fig.legend(handles=handles, loc="outside lower center",
                   ncols=len(handles) if len(transes) > 1 else 3)
        if title:
            fig.suptitle(title, fontsize=12, fontweight="bold")
    return fig


def _dot_handle():
    from matplotlib.lines import Line2D

    return Line2D([], [], marker="o", linestyle="", markersize=4, markerfacecolor="white",
                  markeredgecolor="black", label="selected for the tiler")


def _draw_heat_panel(ax, grid: HeatmapGrid, norm: Normalize, cmap, timed: bool, with_peak: bool):
    rows, cols = len(grid.mrs), len(grid.nrs)
    ax.set_facecolor(ABSENT_COLOUR)
    # Status layer first: rejected and untimed validated kernels; the values go on top.
    status = np.ma.masked_equal(grid.status, ABSENT)
    status_cmap = ListedColormap([VALIDATED_COLOUR, REJECTED_COLOUR])
    ax.pcolormesh(np.arange(cols + 1), np.arange(rows + 1), status, cmap=status_cmap,
                  norm=BoundaryNorm([VALIDATED - 0.5, VALIDATED + 0.5, REJECTED + 0.5], 2),
                  edgecolors="white", linewidth=0.4)
    mesh = None
    if timed:
        values = grid.percent if with_peak else grid.gflops
        masked = np.ma.masked_invalid(values)
        mesh = ax.pcolormesh(np.arange(cols + 1), np.arange(rows + 1), masked, cmap=cmap, norm=norm,
                             edgecolors="white", linewidth=0.4)
    rej_i, rej_j = np.nonzero(grid.status == REJECTED)
    ax.scatter(rej_j + 0.5, rej_i + 0.5, marker="x", s=10, color="white", linewidths=0.8)
    sel_i, sel_j = np.nonzero(grid.selected)
    ax.scatter(sel_j + 0.5, sel_i + 0.5, marker="o", s=7, facecolor="white", edgecolor="black",
               linewidths=0.4)
    title = f"{grid.isa} {grid.trans}"
    best = grid.best()
    if best is not None:
        mr, nr, gflops = best
        i, j = grid.mrs.index(mr), grid.nrs.index(nr)
        ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="white", linewidth=3.2))
        ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor=BEST_COLOUR, linewidth=1.6))
        share = f" = {100 * gflops / grid.peak:.0f}%" if grid.peak else ""
        # Its own line: beside the family's name it would not fit a narrow panel.
        title += f"\nbest {mr}x{nr}: {gflops:.0f} GFLOPS{share}"
    ax.set_title(title, fontsize=9, loc="left")
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)  # mr grows downwards, like rows of C
    _index_ticks(ax.set_xticks, ax.set_xticklabels, grid.nrs)
    _index_ticks(ax.set_yticks, ax.set_yticklabels, grid.mrs)
    ax.set_xlabel("nr (columns of the C block)")
    ax.set_ylabel("mr (rows)")
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return mesh


def _index_ticks(set_ticks, set_labels, values: Sequence[int]) -> None:
    # Every size is labelled (the irregular ones beyond 16 are the interesting ones);
    # a long axis gets a smaller font instead of gaps.
    set_ticks([i + 0.5 for i in range(len(values))])
    set_labels([str(v) for v in values], fontsize=8 if len(values) <= 10 else 6.5 if len(values) <= 16 else 6)


# -- GFLOPS against K --------------------------------------------------------------

def isa_colour(isa: str, rank: int = 0, count: int = 1) -> str:
    cmap = colormaps[ISA_COLOURS.get(isa, "Greys")]
    # Darkest for the fastest kernel; stay clear of the palest end, which vanishes on white.
    shade = 0.9 - 0.45 * (rank / max(count - 1, 1)) if count > 1 else 0.8
    return to_hex(cmap(shade))


def k_curve_figure(curves: Mapping[tuple[str, str], pd.DataFrame], transes: Sequence[str],
                   peak: float | None, title: str = "") -> Figure:
    """One panel per transposition; in each, the fastest kernels of every ISA against K.

    ``curves`` maps (isa, trans) to a frame of :func:`autotune.reports.data.k_curves`.
    """
    with style():
        fig = Figure(figsize=(2.9 * len(transes) + 0.4, 4.3), layout="constrained")
        axes = fig.subplots(1, len(transes), squeeze=False, sharey=True)[0]
        ks = sorted({int(k) for frame in curves.values() for k in frame["K"]})
        top = max([peak or 0.0] + [float(f["gflops"].max()) for f in curves.values() if not f.empty])
        for ax, trans in zip(axes, transes):
            ax.grid(True, axis="y")
            for (isa, t), frame in curves.items():
                if t != trans or frame.empty:
                    continue
                kernels = unique_in_order(frame["kernel"])
                for rank, kernel in enumerate(kernels):
                    line = frame[frame["kernel"] == kernel]
                    ax.plot(line["K"], line["gflops"], marker="o", markersize=3.5, linewidth=1.6,
                            color=isa_colour(isa, rank, len(kernels)),
                            label=f"{isa} {line['label'].iloc[0]}")
            if peak:
                ax.axhline(peak, color=PEAK_COLOUR, linestyle="--", linewidth=1)
                ax.annotate(f"peak {peak:.0f}", (0.02, peak), xycoords=("axes fraction", "data"),
                            va="bottom", fontsize=7, color=PEAK_COLOUR)
            ax.set_title(trans, loc="left")
            ax.set_xscale("log", base=2)
            if ks:
                ax.set_xticks(ks)
                ax.set_xticklabels([str(k) for k in ks])
                ax.set_xlim(ks[0] / 1.3, ks[-1] * 1.3)
            ax.minorticks_off()
            ax.set_xlabel("K (depth)")
            ax.set_ylim(0, top * 1.12 if top else 1)
            if ax.get_legend_handles_labels()[0]:
                # Below the panel: inside it the legend hides the lines it names.
                ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=6.5,
                          handlelength=1.4, columnspacing=0.8)
        axes[0].set_ylabel("GFLOPS (median, tight leading dims)")
        if title:
            fig.suptitle(title, fontsize=12, fontweight="bold")
    return fig


# -- tuning ------------------------------------------------------------------------

def _time_unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return scale, unit
    return 1e-9, "ns"


def tuning_figure(history: TuningHistory) -> Figure:
    """The objective of every trial, the best so far, and the untuned baseline."""
    frame = history.trials
    reference = [v for v in (history.objective_default_s, history.objective_tuned_s) if v]
    scale, unit = _time_unit(float(np.median(list(frame["value"]) + reference)))
    with style():
        fig = Figure(figsize=(6.4, 3.5), layout="constrained")
        ax = fig.subplots()
        ax.grid(True, axis="y")
        ax.scatter(frame["number"], frame["value"] / scale, s=14, color="#8aa6c8", label="trial",
                   zorder=2)
        best = frame["value"].cummin() / scale
        ax.step(frame["number"], best, where="post", color="#1f4e8c", linewidth=1.8,
                label="best so far", zorder=3)
        if history.objective_default_s:
            ax.axhline(history.objective_default_s / scale, color="#888888", linestyle="--", linewidth=1,
                       label="model defaults")
        if history.objective_tuned_s:
            ax.axhline(history.objective_tuned_s / scale, color="#2e8540", linestyle=":", linewidth=1.4,
                       label="tuned (re-measured)")
        ax.set_xlabel("trial")
        ax.set_ylabel(f"objective ({unit}, lower is better)")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=4)
        low = min(list(frame["value"]) + reference) / scale
        high = float(np.percentile(frame["value"], 95)) / scale
        high = max([high] + [v / scale for v in reference])
        # Trials that blew up would flatten the interesting part of the chart to a line.
        ax.set_ylim(low * 0.95 if low > 0 else 0, high * 1.08)
    return fig


def crossover_figure(crossover: Mapping) -> Figure:
    """One measured decision: the alternative's time over the base's at each size timed,
    with where the install put the threshold and where the model (the OS's cache
    report) would have put it."""
    points = crossover.get("points") or []
    # A sweep may time each size on several thread counts (packing: one and all): a line each.
    series: dict[int, list[Mapping]] = {}
    for p in points:
        series.setdefault(int(p.get("threads", 0)), []).append(p)
    with style():
        fig = Figure(figsize=(4.6, 3.2), layout="constrained")
        ax = fig.subplots()
        ax.grid(True, which="both", axis="y")
        ax.axhline(1.0, color="#888888", linewidth=1)
        for threads, (marker, line) in zip(sorted(series), (("o", "-"), ("s", ":"))):
            run = series[threads]
            sides = [p["side"] for p in run]
            ratios = [p["alt_s"] / p["base_s"] if p["base_s"] else float("nan") for p in run]
            colours = ["#2e8540" if r < 1 else "#b04a3a" for r in ratios]
            label = "all threads" if threads == 0 else f"{threads} thread{'s' if threads > 1 else ''}"
            ax.plot(sides, ratios, color="#8aa6c8", linewidth=1, linestyle=line, zorder=2,
                    label=label if len(series) > 1 else None)
            ax.scatter(sides, ratios, c=colours, s=22, marker=marker, zorder=3)
        for flops, colour, style_, label in ((crossover["flops"], "#1f4e8c", "-", "stored"),
                                             (crossover["model_flops"], "#888888", "--", "model")):
            ax.axvline((flops / 2) ** (1 / 3), color=colour, linestyle=style_, linewidth=1.4,
                       label=f"{label}: {size_label(crossover, (flops / 2) ** (1 / 3))}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(SIZE_AXES.get(crossover.get("shape", "square"), SIZE_AXES["square"]))
        ax.set_ylabel(f"time {crossover['alt']} / {crossover['base']}")
        low, high = ax.get_xlim()
        model_side = (crossover["model_flops"] / 2) ** (1 / 3)
        if model_side > high:  # a far-off model still shows, at the right edge
            ax.set_xlim(low, model_side * 1.2)
        ax.legend(loc="best", fontsize="small")
    return fig


def importance_figure(importance: pd.Series, method: str, label: str = "") -> Figure:
    with style():
        fig = Figure(figsize=(5.0, 0.45 * max(len(importance), 2) + 0.9), layout="constrained")
        ax = fig.subplots()
        ordered = importance.sort_values()
        ax.barh(list(ordered.index), list(ordered.values * 100), color="#3b6fb6", height=0.6)
        for y, value in enumerate(ordered.values):
            ax.annotate(f"{100 * value:.0f}%", (value * 100, y), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=8)
        ax.set_xlim(0, max(100 * float(ordered.max()) * 1.18, 1))
        label = label or "importance within its study, % (optuna PED-ANOVA)"
        ax.set_xlabel(label)
        ax.grid(True, axis="x")
    return fig


# -- plans -------------------------------------------------------------------------

def kernel_colours(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per kernel name over every plan of the page."""
    palette = [to_hex(c) for c in colormaps["tab20"].colors[::2] + colormaps["tab20"].colors[1::2]]
    return {name: palette[i % len(palette)] for i, name in enumerate(unique_in_order(names))}


def short_kernel(name: str) -> str:
    """``at_sgemm_avx512_nn_16x6_u4`` -> ``avx512 16x6``: the legend names the block, not the symbol."""
    parts = name.split("_")
    if len(parts) >= 5 and parts[0] == "at":
        return f"{parts[2]} {parts[4]}"
    return name


def plan_figure(plan: "Plan", colours: Mapping[str, str]) -> Figure:
    """C as a rectangle (rows down, columns across) tiled by the plan's steps (the listed ones)."""
    longest = max(plan.M, plan.N, 1)
    width = 0.6 + 3.6 * plan.N / longest
    height = 0.9 + 3.6 * plan.M / longest
    with style():
        fig = Figure(figsize=(max(width, 2.4), height + 0.5), layout="constrained")
        ax = fig.subplots()
        for block in plan.steps:
            ax.add_patch(Rectangle((block.j0, block.i0), block.nb, block.mb,
                                   facecolor=colours.get(block.kernel, "#999999"),
                                   edgecolor="white", linewidth=1.0))
            # Label only blocks with room for the text; the legend names the rest.
            if block.nb >= 0.14 * longest and block.mb >= 0.07 * longest:
                ax.text(block.j0 + block.nb / 2, block.i0 + block.mb / 2, f"{block.mb}x{block.nb}",
                        ha="center", va="center", fontsize=7, color="white", fontweight="bold")
        ax.add_patch(Rectangle((0, 0), plan.N, plan.M, fill=False, edgecolor="#333333", linewidth=1.2))
        ax.set_xlim(0, plan.N)
        ax.set_ylim(plan.M, 0)
        ax.set_aspect("equal")
        ax.xaxis.tick_top()
        ax.set_xticks([0, plan.N])
        ax.set_yticks([0, plan.M])
        ax.tick_params(length=2)
        for spine in ax.spines.values():
            spine.set_visible(False)
        subtitle = f"{plan.step_count} blocks"
        if plan.predicted_seconds:
            scale, unit = _time_unit(plan.predicted_seconds)
            subtitle += f", predicted {plan.predicted_seconds / scale:.3g} {unit}"
        ax.set_title(f"{plan.title}\n{subtitle}", fontsize=9, loc="left")
        handles = [Patch(facecolor=colours.get(k, "#999999"), label=short_kernel(k)) for k in plan.kernels_by_area()]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 2), fontsize=7)
    return fig


# -- peers -------------------------------------------------------------------------

def benchmark_figure(frame: pd.DataFrame) -> Figure:
    """GFLOPS per shape, one bar per library, autotune first."""
    shapes = unique_in_order(frame["shape"])
    libraries = unique_in_order(frame["library"])
    libraries.sort(key=lambda name: name != "autotune")
    table = frame.pivot_table(index="shape", columns="library", values="gflops", aggfunc="max")
    width = 0.8 / max(len(libraries), 1)
    palette = colormaps["tab10"].colors
    with style():
        fig = Figure(figsize=(min(1.0 + 0.75 * len(shapes) * max(len(libraries), 2) / 2, 11), 3.4),
                     layout="constrained")
        ax = fig.subplots()
        ax.grid(True, axis="y")
        x = np.arange(len(shapes))
        for i, library in enumerate(libraries):
            values = [table.at[s, library] if library in table.columns and s in table.index else math.nan
                      for s in shapes]
            ax.bar(x + (i - (len(libraries) - 1) / 2) * width, values, width * 0.92,
                   label=library, color=palette[i % len(palette)], zorder=2)
        ax.set_xticks(x)
        ax.set_xticklabels(shapes, rotation=30 if len(shapes) > 6 else 0, ha="right" if len(shapes) > 6 else "center")
        ax.set_ylabel("GFLOPS")
        ax.set_xlabel("shape")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside upper center", ncols=min(len(libraries), 6))
    return fig
