"""The tuned table: what an install measured and chose, stored once per target.

A :class:`TunedTable` is written as one JSON file, ``$AUTOTUNE_HOME/tables/<target>.json``,
replaced atomically so an interrupted install leaves the previous table intact. It
carries the host it was measured on (a table from another host or schema version is
refused, not silently used), the provenance of its numbers, the measured peak, every
kernel's validation status, the raw measurements and the kernel selection.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple

from . import __version__
from .files import atomic_write_text  # noqa: F401  (one helper; table.atomic_write_text still names it)
from .home import home as default_home
from .host import HostInfo
from .specs import KernelSpec

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
PROVENANCES = ("measured", "model", "emulated")
MEASUREMENT_COLUMNS = (
    "kernel", "K", "pad", "lda", "ldb", "ldc", "best_gflops", "median_gflops", "ns_per_call",
)


class TableError(RuntimeError):
    """A stored table cannot be used here; the message says why and what to run."""


@dataclass(frozen=True)
class KernelRecord:
    """One kernel's fate at install: validated (and how fast) or rejected (and why)."""

    spec: KernelSpec
    status: str  # "validated" | "rejected"
    reason: str = ""
    object_hash: str = ""
    best_gflops: float | None = None  # best over the measurement grid
    gflops_by_k: tuple[tuple[int, float], ...] = ()  # median GFLOPS at each K, tight leading dims
    model_score: float = 0.0  # analytic FLOPs per load (families.model_score): the rank without timings

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def validated(self) -> bool:
        return self.status == "validated"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "isa": self.spec.isa,
            "dtype": self.spec.dtype,
            "mr": self.spec.mr,
            "nr": self.spec.nr,
            "trans": self.spec.trans,
            "variant": self.spec.variant,
            "unroll": self.spec.unroll,
            "status": self.status,
            "reason": self.reason,
            "object_hash": self.object_hash,
            "best_gflops": self.best_gflops,
            "gflops_by_k": {str(k): v for k, v in self.gflops_by_k},
            "model_score": self.model_score,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "KernelRecord":
        spec = KernelSpec.from_name(data["name"])
        return cls(
            spec=spec,
            status=data["status"],
            reason=data.get("reason", ""),
            object_hash=data.get("object_hash", ""),
            best_gflops=data.get("best_gflops"),
            gflops_by_k=tuple(sorted((int(k), float(v)) for k, v in data.get("gflops_by_k", {}).items())),
            model_score=float(data.get("model_score", 0.0)),
        )


class StoredRows(NamedTuple):
    """Measurements as a stored table holds them: column names and rows of values."""

    columns: tuple[str, ...]
    data: tuple[tuple[Any, ...], ...]


class _Measurements:
    """``TunedTable.measurements``: a DataFrame, made from the stored rows when first read.

    `autotune show` loads a table without reading its raw measurements, and building
    the frame at load imported pandas: half a second of the command.  A frame given
    to the constructor is kept as it is; the rows a stored table carries
    (:class:`StoredRows`) become one on the first read.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, table: "TunedTable | None", owner: type | None = None) -> Any:
        if table is None:  # the class's value: the dataclass's default, no measurements
            return StoredRows(MEASUREMENT_COLUMNS, ())
        value = table.__dict__[self.slot]
        if isinstance(value, StoredRows):
            import pandas as pd

            value = pd.DataFrame(list(value.data), columns=list(value.columns))
            table.__dict__[self.slot] = value  # the same frame on every read, as a field's value
        return value

    def __set__(self, table: "TunedTable", value: "pd.DataFrame | StoredRows") -> None:
        table.__dict__[self.slot] = value  # the dataclass's __init__; the frozen class refuses any other


@dataclass(frozen=True, eq=False)
class TunedTable:
    target: str
    host: HostInfo
    provenance: str
    peak_gflops: Mapping[str, float]
    kernels: tuple[KernelRecord, ...]
    measurements: pd.DataFrame = _Measurements()  # a frame, or StoredRows that become one when read
    selection: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)  # how the numbers were measured
    tuning: Mapping[str, Any] | None = None
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    schema: int = SCHEMA_VERSION
    version: str = __version__

    def __post_init__(self) -> None:
        if self.provenance not in PROVENANCES:
            raise ValueError(f"provenance must be one of {PROVENANCES}, got {self.provenance!r}")

    @property
    def fingerprint(self) -> str:
        return self.host.fingerprint

    @property
    def validated(self) -> tuple[KernelRecord, ...]:
        return tuple(k for k in self.kernels if k.validated)

    @property
    def rejected(self) -> tuple[KernelRecord, ...]:
        return tuple(k for k in self.kernels if not k.validated)

    def kernel(self, name: str) -> KernelRecord:
        for record in self.kernels:
            if record.name == name:
                return record
        raise KeyError(name)

    def selected(self) -> tuple[KernelRecord, ...]:
        chosen = set(self.selection)
        return tuple(k for k in self.kernels if k.name in chosen)

    # -- serialisation -------------------------------------------------------------

    def summary_dict(self) -> dict[str, Any]:
        """The table for scripts (`autotune show --json`): everything but raw measurements."""
        return {
            "schema": self.schema,
            "version": self.version,
            "target": self.target,
            "created": self.created,
            "host": {**self.host.to_dict(), "fingerprint": self.fingerprint},
            "provenance": self.provenance,
            "peak_gflops": dict(self.peak_gflops),
            "settings": dict(self.settings),
            "params": dict(self.params),
            "tuning": dict(self.tuning) if self.tuning is not None else None,
            "selection": list(self.selection),
            "kernels": [k.to_dict() for k in self.kernels],
        }

    def to_dict(self) -> dict[str, Any]:
        data = self.summary_dict()
        frame = self.measurements.reindex(columns=list(MEASUREMENT_COLUMNS))
        data["measurements"] = {
            "columns": list(MEASUREMENT_COLUMNS),
            "data": [[_json_number(v) for v in row] for row in frame.itertuples(index=False, name=None)],
        }
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TunedTable":
        schema = data.get("schema")
        if schema != SCHEMA_VERSION:
            raise TableError(
                f"the stored table has schema version {schema}, this autotune reads version "
                f"{SCHEMA_VERSION}: run `autotune install --force` to measure again"
            )
        host_data = {k: v for k, v in data["host"].items() if k != "fingerprint"}
        measurements = data.get("measurements") or {"columns": list(MEASUREMENT_COLUMNS), "data": []}
        rows = StoredRows(tuple(measurements["columns"]), tuple(map(tuple, measurements["data"])))
        if any(len(row) != len(rows.columns) for row in rows.data):
            # Checked here, as the frame is made later: a damaged table is refused at load.
            raise ValueError(f"a measurement row does not have the {len(rows.columns)} columns named")
        return cls(
            target=data["target"],
            host=HostInfo.from_dict(host_data),
            provenance=data["provenance"],
            peak_gflops=dict(data.get("peak_gflops", {})),
            kernels=tuple(KernelRecord.from_dict(k) for k in data.get("kernels", [])),
            measurements=rows,
            selection=tuple(data.get("selection", [])),
            params=dict(data.get("params", {})),
            settings=dict(data.get("settings", {})),
            tuning=data.get("tuning"),
            created=data.get("created", ""),
            schema=schema,
            version=data.get("version", ""),
        )


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


# -- storage ----------------------------------------------------------------------

def table_path(target: str, home: Path | None = None) -> Path:
    return (home or default_home()) / "tables" / f"{target}.json"


def library_dir(target: str, home: Path | None = None) -> Path:
    """Where the library built from ``target``'s table is installed (install.commit puts it there)."""
    return (home or default_home()) / "lib" / target


def save(table: TunedTable, home: Path | None = None) -> Path:
    path = table_path(table.target, home)
    atomic_write_text(path, json.dumps(table.to_dict(), indent=1, allow_nan=False) + "\n")
    return path


def load(target: str = "host", home: Path | None = None, host: HostInfo | None = None) -> TunedTable:
    """Load the stored table of ``target``.

    With ``host`` given, a native table measured on another machine is refused: its
    numbers (and the kernels they chose) describe a different CPU. Emulated tables
    carry the emulated CPU's description and are never checked against the host.
    """
    path = table_path(target, home)
    if not path.exists():
        command = "autotune install" + ("" if target == "host" else f" --target {target}")
        raise TableError(f"no tuned table for target {target!r} at {path}: run `{command}`")
    remedy = "run `autotune install --force` (or `autotune clean --all`)"
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        raise TableError(f"the tuned table at {path} is unreadable ({exc}): {remedy}") from exc
    if not isinstance(data, Mapping):
        raise TableError(f"the tuned table at {path} is not a table (a JSON {type(data).__name__}): {remedy}")
    try:
        table = TunedTable.from_dict(data)
    except TableError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # A table cut short or edited by hand: name what is wrong, not a traceback.
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise TableError(f"the tuned table at {path} is damaged ({what}): {remedy}") from exc
    if host is not None and table.provenance != "emulated" and table.fingerprint != host.fingerprint:
        raise TableError(
            f"the tuned table at {path} was measured on another host (fingerprint {table.fingerprint}, "
            f"this host is {host.fingerprint}): run `autotune install` to tune this machine"
        )
    return table


# -- selection ----------------------------------------------------------------------

def kernel_score(record: KernelRecord) -> float:
    """Mean median-GFLOPS over the K grid: a kernel fast only at one depth should not win.

    Without timings (an emulated table) the analytic model's score ranks instead.
    """
    if not record.gflops_by_k:
        return record.model_score
    return sum(g for _, g in record.gflops_by_k) / len(record.gflops_by_k)


def selection_key(spec: KernelSpec) -> tuple:
    """The block a kernel computes: kernels with one key compete for one place in the library."""
    return (spec.dtype, spec.trans, spec.mr, spec.nr, spec.variant, spec.svl)


def select_kernels(records: Iterable[KernelRecord]) -> tuple[str, ...]:
    """For each block shape (dtype, transposition, mr, nr, format) keep the fastest validated kernel.

    Kernels of different ISAs or unroll factors computing the same block compete; the
    tiler then sees one kernel per shape.  An SME2 kernel competes only with its own
    vector length's set: each set serves other CPUs, and NEON serves those without SME2.
    """
    best: dict[tuple, KernelRecord] = {}
    for record in records:
        if not record.validated:
            continue
        key = selection_key(record.spec)
        if key not in best or kernel_score(record) > kernel_score(best[key]):
            best[key] = record
    return tuple(sorted(r.name for r in best.values()))
