"""Tuning reports: an offline HTML page (`autotune report`) and terminal views.

``write_report`` renders a :class:`~autotune.table.TunedTable` (plus whatever later
stages produced: tuning history, plans, peer benchmarks) into one self-contained
HTML file; ``report_command`` is what the command line calls; ``terminal_heatmap``
draws one kernel family for `autotune show`.
"""

from .extras import ReportExtras
from .html import default_report_path, render_report, report_command, write_report
from .terminal import terminal_heatmap

__all__ = [
    "ReportExtras",
    "default_report_path",
    "render_report",
    "report_command",
    "terminal_heatmap",
    "write_report",
]
