"""What the report draws beyond the table: plans of example shapes, peer benchmarks."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..home import home as default_home
from .html import ReportExtras

if TYPE_CHECKING:
    from ..plans import Plan

#: Shapes whose plans the report draws (M, N, K, dtype): IAAT's 15x15 figure, the
#: irregular shapes of the benchmark suite, and a large one that takes the packed path.
EXAMPLE_SHAPES = (
    (15, 15, 64, "f32"),
    (35, 32, 64, "f32"),
    (13, 33, 23, "f32"),
    (87, 93, 56, "f64"),
    (100, 10, 1000, "f32"),
    (512, 512, 512, "f32"),
)


def example_plans(target: str, root: Path) -> "list[Plan] | None":
    """Plans the installed library makes for EXAMPLE_SHAPES; None when it cannot be loaded here
    (no library yet, or one built for another machine, as an emulated target's is).

    The library is opened privately (RTLD_LOCAL, see the loader) and asked for plans
    only: writing a report never changes which library ``autotune.gemm`` runs.
    """
    from ..plans import PlanError, plan
    from ..runtime import loader

    library = root / "lib" / target / loader.LIBRARY_NAME
    if not library.exists():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            private = loader.load(library)
        if private is None:
            return None
        return [plan(M, N, K, dtype, runtime=private) for M, N, K, dtype in EXAMPLE_SHAPES]
    except (OSError, PlanError):
        return None


def latest_benchmarks(root: Path) -> pd.DataFrame | None:
    """The last `autotune bench` results in the report's form (benchmarks/report.csv), if any."""
    path = root / "benchmarks" / "report.csv"
    if not path.exists():
        return None
    frame = pd.read_csv(path)
    needed = {"shape", "library", "gflops", "ratio"}
    return frame if needed <= set(frame.columns) else None


def collect_extras(target: str, root: Path | None = None) -> ReportExtras:
    root = root or default_home()
    return ReportExtras(plans=example_plans(target, root), benchmarks=latest_benchmarks(root))
