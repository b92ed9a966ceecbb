"""What the report draws beyond the table: plans of example shapes, peer benchmarks."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..home import home as default_home
from ..files import atomic_write_text
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


def plans_path(target: str, root: Path) -> Path:
    return root / "plans" / f"{target}.json"


def record_example_plans(target: str, library: Path, root: Path) -> Path | None:
    """Write the plans ``library`` makes for EXAMPLE_SHAPES where the report reads them.

    `autotune install` calls this after each native install, so that writing a
    report loads no library.  The library is opened privately (RTLD_LOCAL, see
    the loader): this never changes which library ``autotune.gemm`` runs.
    None when the library cannot run here (built for another machine).
    """
    from ..plans import PlanError, plan
    from ..runtime import loader

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            private = loader.load(library)
        if private is None:
            return None
        records = [plan(M, N, K, dtype, runtime=private).to_dict() for M, N, K, dtype in EXAMPLE_SHAPES]
    except (OSError, PlanError):
        return None
    path = plans_path(target, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"library": str(library), "plans": records}) + "\n")
    return path


def example_plans(target: str, root: Path) -> "list[Plan] | None":
    """The plans the last install recorded for EXAMPLE_SHAPES; None when there are none
    (no native install yet) or the file cannot be read."""
    from ..plans import Plan

    try:
        data = json.loads(plans_path(target, root).read_text())
        return [Plan.from_dict(p) for p in data["plans"]] or None
    except (OSError, ValueError, KeyError, TypeError):
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
