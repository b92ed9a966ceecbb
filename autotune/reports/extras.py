"""What the report draws beyond the table: plans of example shapes, peer benchmarks.

Both are results later stages stored in the home: the plans install recorded
(:mod:`autotune.plans.examples`), the last `autotune bench`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..home import home as default_home
from ..plans.examples import example_plans
from .html import ReportExtras


def latest_benchmarks(root: Path) -> pd.DataFrame | None:
    """The last `autotune bench` results in the report's form (benchmarks/report.csv), if any."""
    path = root / "benchmarks" / "report.csv"
    if not path.exists():
        return None
    frame = pd.read_csv(path)
    needed = {"shape", "library", "gflops", "ratio"}
    return frame if needed <= set(frame.columns) else None


def collect_extras(target: str, root: Path | None = None) -> ReportExtras:
    """What the home holds for ``target``'s report besides its table."""
    root = root or default_home()
    return ReportExtras(plans=example_plans(target, root), benchmarks=latest_benchmarks(root))
