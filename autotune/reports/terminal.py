"""The report's essentials for a terminal: a family's heatmap as a rich renderable.

Fits 80 columns: the axis with fewer distinct sizes runs across, each cell is four
characters wide (three when that would not fit) and shows the kernel's best GFLOPS as a percentage of the dtype's
peak on a background from the same colour map as the HTML heatmaps.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib import colormaps
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..table import TunedTable
from .data import REJECTED, VALIDATED, HeatmapGrid, heatmap_grid
from .figures import HEAT_CMAP

WIDTH = 80
CELL = 4
NARROW_CELL = 3
# The row label ("mr\\nr" is the widest) and the blank column after it.
LABEL = 6


def _background(share: float) -> str:
    r, g, b, _ = colormaps[HEAT_CMAP](min(max(share, 0.0), 1.0))
    return f"rgb({round(255 * r)},{round(255 * g)},{round(255 * b)})"


def _foreground(share: float) -> str:
    # viridis is dark below about 60%: light text there, dark text on the yellow end.
    return "black" if share >= 0.6 else "white"


def _cell(grid: HeatmapGrid, i: int, j: int, scale: float, width: int) -> Text:
    status = grid.status[i, j]
    # The last character is the selection mark (or blank), so cells never run together.
    marker = "*" if grid.selected[i, j] else " "
    if status == REJECTED:
        return Text("xx ".rjust(width), style="bold white on red")
    if status != VALIDATED:
        return Text(" " * width)
    value = grid.gflops[i, j]
    if not math.isfinite(value):
        return Text(("ok" + marker).rjust(width), style="black on rgb(90,169,160)")
    share = value / scale if scale else 0.0
    # A narrow cell has room for two digits only: 100% then reads as 99.
    shown = int(round(100 * share)) if width > NARROW_CELL else min(int(round(100 * share)), 99)
    return Text(f"{shown:>{width - 1}d}{marker}", style=f"{_foreground(share)} on {_background(share)}")


def terminal_heatmap(table: TunedTable, dtype: str, trans: str, isa: str) -> Group:
    """A family's kernels as a coloured grid: rows and columns are block sizes.

    Cells show best GFLOPS in percent of the dtype's measured peak (of the fastest
    kernel when no peak was measured); ``*`` marks a kernel the selection kept,
    ``xx`` a rejected one, ``ok`` a validated kernel that was not timed (emulated).
    """
    grid = heatmap_grid(table, isa, dtype, trans)
    if not grid.mrs:
        return Group(Text(f"no {isa} {dtype} {trans} kernels in this table", style="yellow"))
    across_nr = len(grid.nrs) <= len(grid.mrs)
    rows, cols = (grid.mrs, grid.nrs) if across_nr else (grid.nrs, grid.mrs)
    row_name, col_name = ("mr", "nr") if across_nr else ("nr", "mr")
    scale = grid.peak or (float(np.nanmax(grid.gflops)) if grid.timed else 0.0)
    width = CELL if len(cols) * CELL + LABEL <= WIDTH else NARROW_CELL
    # A kernel at or above the measured peak prints three digits: give it a separating
    # blank too when the row has room, so "73*100*" does not run together.
    if scale and grid.timed and np.nanmax(grid.gflops) >= scale * 0.995 and len(cols) * (width + 1) + LABEL <= WIDTH:
        width += 1
    if len(cols) * width + LABEL > WIDTH:
        raise ValueError(f"{len(cols)} columns of {width} characters do not fit {WIDTH} columns")

    heat = Table(box=None, padding=0, pad_edge=False, show_edge=False, collapse_padding=True)
    heat.add_column(f"{row_name}\\{col_name}", justify="right", no_wrap=True, min_width=LABEL - 1,
                    style="bold")
    heat.add_column("", width=1)
    for value in cols:
        heat.add_column(f"{value} ".rjust(width), justify="right", no_wrap=True, width=width)
    for r, row_value in enumerate(rows):
        cells = [(_cell(grid, r, c, scale, width) if across_nr else _cell(grid, c, r, scale, width))
                 for c in range(len(cols))]
        heat.add_row(str(row_value), "", *cells)

    title = Text(f"{isa} {dtype} {trans}", style="bold")
    best = grid.best()
    if best is not None:
        mr, nr, gflops = best
        share = f", {100 * gflops / grid.peak:.0f}% of peak" if grid.peak else ""
        title.append(f"  best {mr}x{nr} {gflops:.1f} GFLOPS{share}", style="")
    unit = "% of the measured peak" if grid.peak else "% of the fastest kernel"
    legend = Text(f"cells: best GFLOPS in {unit}; * selected, xx rejected", style="dim")
    if not grid.timed:
        legend = Text("no timings (emulated or not measured): ok validated, xx rejected", style="dim")
    return Group(title, heat, legend)
