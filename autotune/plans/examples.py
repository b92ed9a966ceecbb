"""The plans of a few example shapes, recorded at install for the report to draw.

`autotune install` records them after each native install (it has the library
just built); the report reads the record, so writing a report loads no library.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from ..files import atomic_write_text
from . import Plan, PlanError, plan

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

    The library is opened privately (RTLD_LOCAL, see the loader): this never
    changes which library ``autotune.gemm`` runs.  None when the library cannot
    run here (built for another machine).
    """
    # Here, not at the top: the report imports this module to read the record.
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


def example_plans(target: str, root: Path) -> list[Plan] | None:
    """The plans the last install recorded for EXAMPLE_SHAPES; None when there are none
    (no native install yet) or the file cannot be read."""
    try:
        data = json.loads(plans_path(target, root).read_text())
        return [Plan.from_dict(p) for p in data["plans"]] or None
    except (OSError, ValueError, KeyError, TypeError):
        return None
