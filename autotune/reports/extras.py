"""What the report draws beyond the table: plans of example shapes, peer benchmarks.

Both are results later stages stored in the home: the plans install recorded
(:mod:`autotune.plans.examples`), the last `autotune bench`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pandas as pd

from ..home import home as default_home
from ..plans.examples import example_plans

if TYPE_CHECKING:
    from ..plans import Plan


@dataclass(frozen=True, eq=False)
class ReportExtras:
    """Inputs produced by later stages; each section appears only when its input exists.

    ``tuning`` defaults to the table's own ``tuning`` mapping. ``plans`` are
    :class:`autotune.plans.Plan` records. ``benchmarks`` is a frame with columns shape, library, gflops, ratio.
    """

    tuning: Mapping[str, Any] | None = None
    plans: Sequence["Plan"] | None = None
    benchmarks: pd.DataFrame | None = None


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
