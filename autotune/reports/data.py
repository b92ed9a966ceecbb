"""What the report shows, as plain numbers: grids, curves, summaries.

Everything here is a pure function of a :class:`~autotune.table.TunedTable` (or of
the optional extras), free of matplotlib and HTML, so the HTML page and the terminal
viewer draw the same numbers and the tests can check them without rendering.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ..params import BY_NAME, PARAMS
from ..specs import KernelSpec
from ..table import KernelRecord, TunedTable, kernel_score
from ..trials import TrialCounts, trial_counts, trial_state, verdict, was_kept

#: Cell states of a heatmap grid.
ABSENT, VALIDATED, REJECTED = 0, 1, 2

# ISAs in the order a reader expects them: widest vectors first, portable last.
ISA_ORDER = ("sme2", "sme", "neon", "avx512", "avx2", "generic")
TRANS_ORDER = ("nn", "nt", "tn", "tt")


def isa_rank(isa: str) -> tuple[int, str]:
    return (ISA_ORDER.index(isa) if isa in ISA_ORDER else len(ISA_ORDER), isa)


def trans_rank(trans: str) -> int:
    return TRANS_ORDER.index(trans) if trans in TRANS_ORDER else len(TRANS_ORDER)


@dataclass(frozen=True, eq=False)
class HeatmapGrid:
    """One family's kernels laid out by block shape: ``mr`` rows by ``nr`` columns.

    ``gflops`` is NaN where no kernel was timed; ``status`` says whether a kernel of
    that shape exists at all and whether it passed validation; ``selected`` marks the
    shapes where this family's kernel is the one the tiler will use.
    """

    isa: str
    dtype: str
    trans: str
    mrs: tuple[int, ...]
    nrs: tuple[int, ...]
    gflops: np.ndarray
    status: np.ndarray
    selected: np.ndarray
    peak: float | None

    @property
    def percent(self) -> np.ndarray:
        """Best GFLOPS as a percentage of the dtype's peak (NaN where unknown)."""
        if not self.peak:
            return np.full(self.gflops.shape, np.nan)
        return 100.0 * self.gflops / self.peak

    @property
    def timed(self) -> bool:
        return bool(np.isfinite(self.gflops).any())

    def best(self) -> tuple[int, int, float] | None:
        """(mr, nr, GFLOPS) of the fastest kernel in the grid."""
        if not self.timed:
            return None
        i, j = np.unravel_index(np.nanargmax(self.gflops), self.gflops.shape)
        return self.mrs[i], self.nrs[j], float(self.gflops[i, j])


def families(table: TunedTable) -> list[tuple[str, str, str]]:
    """(isa, dtype, trans) of every family in the table, in reading order."""
    keys = {(r.spec.isa, r.spec.dtype, r.spec.trans) for r in table.kernels}
    return sorted(keys, key=lambda k: (k[1], isa_rank(k[0]), trans_rank(k[2])))


def dtypes(table: TunedTable) -> list[str]:
    return sorted({r.spec.dtype for r in table.kernels})


def heatmap_grid(table: TunedTable, isa: str, dtype: str, trans: str) -> HeatmapGrid:
    """The grid of one family; several unroll factors of one shape keep the fastest."""
    records = [r for r in table.kernels
               if (r.spec.isa, r.spec.dtype, r.spec.trans) == (isa, dtype, trans) and not r.spec.variant]
    mrs = tuple(sorted({r.spec.mr for r in records}))
    nrs = tuple(sorted({r.spec.nr for r in records}))
    row = {m: i for i, m in enumerate(mrs)}
    col = {n: j for j, n in enumerate(nrs)}
    gflops = np.full((len(mrs), len(nrs)), np.nan)
    status = np.full((len(mrs), len(nrs)), ABSENT, dtype=np.int8)
    selected = np.zeros((len(mrs), len(nrs)), dtype=bool)
    chosen = set(table.selection)
    for record in records:
        i, j = row[record.spec.mr], col[record.spec.nr]
        if record.validated:
            status[i, j] = VALIDATED
            if record.best_gflops is not None and (np.isnan(gflops[i, j]) or record.best_gflops > gflops[i, j]):
                gflops[i, j] = record.best_gflops
        elif status[i, j] == ABSENT:
            status[i, j] = REJECTED
        selected[i, j] |= record.name in chosen
    return HeatmapGrid(isa, dtype, trans, mrs, nrs, gflops, status, selected,
                       table.peak_gflops.get(dtype))


def k_curves(table: TunedTable, isa: str, dtype: str, trans: str, top: int = 3) -> pd.DataFrame:
    """GFLOPS against K of the ``top`` fastest kernels of a family, tight leading dims.

    Columns: kernel, label (``mr x nr``), K, gflops (the median over repeats of the
    harness's median GFLOPS at pad 0). Kernels are ranked by the table's own score
    (mean over K), so the lines drawn are those the selection preferred.
    """
    columns = ["kernel", "label", "K", "gflops"]
    frame = table.measurements
    if frame.empty:
        return pd.DataFrame(columns=columns)
    records = [r for r in table.validated
               if (r.spec.isa, r.spec.dtype, r.spec.trans) == (isa, dtype, trans)]
    records.sort(key=kernel_score, reverse=True)
    names = [r.name for r in records[:top]]
    rows = frame[frame["kernel"].isin(names)]
    tight = rows[rows["pad"] == 0] if (rows["pad"] == 0).any() else rows
    if tight.empty:
        return pd.DataFrame(columns=columns)
    curves = tight.groupby(["kernel", "K"], as_index=False)["median_gflops"].median()
    curves = curves.rename(columns={"median_gflops": "gflops"})
    order = {name: i for i, name in enumerate(names)}
    curves["label"] = [_shape_label(KernelSpec.from_name(n)) for n in curves["kernel"]]
    curves = curves.sort_values(["kernel", "K"], key=lambda s: s.map(order) if s.name == "kernel" else s)
    return curves[columns].reset_index(drop=True)


def _shape_label(spec: KernelSpec) -> str:
    return f"{spec.mr}x{spec.nr}" + (f" u{spec.unroll}" if spec.unroll > 1 else "")


def pad_sensitivity(table: TunedTable) -> pd.DataFrame:
    """Per family, how much misaligned leading dimensions cost.

    The harness adds an odd pad to every leading dimension, so each column starts
    misaligned; the ratio median(GFLOPS padded) / median(GFLOPS tight), over every
    kernel and K, says whether the family's loads care. Empty without padded runs.
    """
    columns = ["isa", "dtype", "trans", "kernels", "tight", "padded", "ratio"]
    frame = table.measurements
    if frame.empty or not (frame["pad"] != 0).any() or not (frame["pad"] == 0).any():
        return pd.DataFrame(columns=columns)
    specs = {name: KernelSpec.from_name(name) for name in frame["kernel"].unique()}
    keyed = frame.assign(
        isa=frame["kernel"].map(lambda n: specs[n].isa),
        dtype=frame["kernel"].map(lambda n: specs[n].dtype),
        trans=frame["kernel"].map(lambda n: specs[n].trans),
        padded=frame["pad"] != 0,
    )
    rows = []
    for (isa, dtype, trans), group in keyed.groupby(["isa", "dtype", "trans"]):
        tight = group.loc[~group["padded"], "median_gflops"].median()
        padded = group.loc[group["padded"], "median_gflops"].median()
        if not (tight > 0 and math.isfinite(padded)):
            continue
        rows.append([isa, dtype, trans, group["kernel"].nunique(), tight, padded, padded / tight])
    rows.sort(key=lambda r: (r[1], isa_rank(r[0]), trans_rank(r[2])))
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class FamilySummary:
    isa: str
    dtype: str
    trans: str
    validated: int
    rejected: int
    selected: int
    best_kernel: str
    best_gflops: float | None
    peak: float | None

    @property
    def best_percent(self) -> float | None:
        if self.best_gflops is None or not self.peak:
            return None
        return 100.0 * self.best_gflops / self.peak


def family_summaries(table: TunedTable) -> list[FamilySummary]:
    groups: dict[tuple[str, str, str], list[KernelRecord]] = defaultdict(list)
    for record in table.kernels:
        groups[record.spec.isa, record.spec.dtype, record.spec.trans].append(record)
    chosen = set(table.selection)
    out = []
    for isa, dtype, trans in families(table):
        records = groups[isa, dtype, trans]
        timed = [r for r in records if r.validated and r.best_gflops is not None]
        best = max(timed, key=lambda r: r.best_gflops or 0.0, default=None)
        out.append(FamilySummary(
            isa, dtype, trans,
            validated=sum(r.validated for r in records),
            rejected=sum(not r.validated for r in records),
            selected=sum(r.name in chosen for r in records),
            best_kernel=best.name if best else "",
            best_gflops=best.best_gflops if best else None,
            peak=table.peak_gflops.get(dtype),
        ))
    return out


@dataclass(frozen=True)
class SelectionGroup:
    """The selected kernels of one dtype and transposition, as the tiler sees them."""

    dtype: str
    trans: str
    by_isa: tuple[tuple[str, int], ...]  # how many shapes each ISA won
    rows: tuple[tuple[str, int, int, str, float | None, float | None], ...]  # name, mr, nr, isa, best, mean


def selection_groups(table: TunedTable) -> list[SelectionGroup]:
    groups: dict[tuple[str, str], list[KernelRecord]] = defaultdict(list)
    for record in table.selected():
        groups[record.spec.dtype, record.spec.trans].append(record)
    out = []
    for (dtype, trans) in sorted(groups, key=lambda k: (k[0], trans_rank(k[1]))):
        records = sorted(groups[dtype, trans], key=lambda r: (r.spec.mr * r.spec.nr, r.spec.mr), reverse=True)
        wins = Counter(r.spec.isa for r in records)
        out.append(SelectionGroup(
            dtype, trans,
            by_isa=tuple(sorted(wins.items(), key=lambda kv: isa_rank(kv[0]))),
            rows=tuple((r.name, r.spec.mr, r.spec.nr, r.spec.isa, r.best_gflops,
                        kernel_score(r) or None) for r in records),
        ))
    return out


def rejection_reasons(table: TunedTable) -> list[tuple[str, int, tuple[str, ...]]]:
    """(reason, count, kernel names) grouped by reason, most frequent first.

    Reasons that differ only in the failing case's numbers are still distinct: a
    person reading them wants to see which K or leading dimension broke.
    """
    grouped: dict[str, list[str]] = defaultdict(list)
    for record in table.rejected:
        grouped[record.reason or "no reason recorded"].append(record.name)
    return sorted(((reason, len(names), tuple(sorted(names))) for reason, names in grouped.items()),
                  key=lambda item: (-item[1], item[0]))


# -- tuning ------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class TuningHistory:
    trials: pd.DataFrame  # the complete trials: number, study, value, then one column per parameter
    params: tuple[str, ...]
    objective_default_s: float | None
    objective_tuned_s: float | None
    budget_s: float | None
    counts: TrialCounts = TrialCounts()  # every trial by state: the chart shows the complete ones
    kept: bool = False  # whether the tuned parameters replaced the defaults
    verdict: str | None = None  # why (autotune.trials.verdict)

    @property
    def speedup(self) -> float | None:
        if self.objective_default_s and self.objective_tuned_s:
            return self.objective_default_s / self.objective_tuned_s
        return None


def tuning_history(tuning: Mapping[str, Any] | None) -> TuningHistory | None:
    """The trials of a tuning run as a frame; None when there is nothing to draw."""
    if not tuning:
        return None
    rows = []
    for trial in tuning.get("trials") or ():
        value = trial.get("value")
        if trial_state(trial) != "COMPLETE" or value is None or not math.isfinite(float(value)):
            continue  # a failed or pruned trial has no objective to plot (it is counted, though)
        rows.append({"number": int(trial.get("number", len(rows))), "study": str(trial.get("study", "")),
                     "value": float(value),
                     **{f"param:{k}": v for k, v in (trial.get("params") or {}).items()}})
    if not rows:
        return None
    frame = pd.DataFrame(rows).sort_values("number").reset_index(drop=True)
    params = tuple(sorted(c[len("param:"):] for c in frame.columns if c.startswith("param:")))
    frame = frame.rename(columns={f"param:{p}": p for p in params})

    def number(key: str) -> float | None:
        value = tuning.get(key)
        return float(value) if value is not None else None

    return TuningHistory(frame, params, number("objective_default_s"), number("objective_tuned_s"),
                         number("budget_s"), trial_counts(tuning), was_kept(tuning), verdict(tuning))


OPTUNA_METHOD = "optuna's PED-ANOVA (optuna.importance.get_param_importances), per study"
#: Complete trials a study needs before its importances are shown: PED-ANOVA compares
#: the best tenth of the trials (at least two) with the rest, and with fewer than this
#: the best two are the whole story.
MIN_IMPORTANCE_TRIALS = 10


def param_importance(history: TuningHistory) -> tuple[pd.Series, str]:
    """How much each parameter mattered to the objective, and how that was found.

    Each study (one dtype and regime) searched its own parameters, so importance
    is computed study by study with optuna's own evaluator
    (:func:`optuna.importance.get_param_importances`: PED-ANOVA, which needs no
    scikit-learn) over the study's complete trials; a study's shares add up to one.
    Parameters that never varied are left out, and so are studies with fewer than
    MIN_IMPORTANCE_TRIALS complete trials, or on which optuna fails or can only
    answer "all equal"; the returned description names them.
    """
    frame = history.trials
    studies = frame["study"] if "study" in frame else pd.Series([""] * len(frame))
    scores: dict[str, float] = {}
    left_out: list[str] = []
    for key, group in frame.groupby(studies.values, sort=False):
        varying = [p for p in history.params if p in group and group[p].notna().all()
                   and group[p].nunique(dropna=True) > 1]
        if not varying:
            continue
        name = str(key) or "the search"
        if len(group) < MIN_IMPORTANCE_TRIALS:
            left_out.append(f"{name} ({len(group)} complete trials, fewer than {MIN_IMPORTANCE_TRIALS})")
            continue
        found = _optuna_importance(group, varying)
        if found is None:
            left_out.append(f"{name} (optuna found no difference)")
            continue
        scores.update(found)
    method = OPTUNA_METHOD + (f"; left out: {', '.join(left_out)}" if left_out else "")
    if not scores:
        return pd.Series(dtype=float), method
    return pd.Series(scores, dtype=float).sort_values(ascending=False), method


def _distribution(name: str, column: pd.Series):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    param = BY_NAME.get(name.split(".")[-1])
    numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
    if not numeric or (param is not None and param.choices):
        return CategoricalDistribution(sorted(column.unique().tolist(), key=str))
    low, high = float(column.min()), float(column.max())
    log = bool(param is not None and param.log and low > 0)
    if all(float(v).is_integer() for v in column):
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(low, high, log=log)


def _plain(value: Any, distribution: Any) -> Any:
    from optuna.distributions import IntDistribution

    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(distribution, IntDistribution) else value


def _optuna_importance(group: pd.DataFrame, varying: list[str]) -> dict[str, float] | None:
    """optuna's importances over one study's complete trials; None where it has no answer."""
    import warnings

    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" on stderr
    try:
        distributions = {p: _distribution(p, group[p]) for p in varying}
        study = optuna.create_study(direction="minimize")
        for _, row in group.iterrows():
            study.add_trial(optuna.trial.create_trial(
                params={p: _plain(row[p], distributions[p]) for p in varying},
                distributions=distributions, value=float(row["value"])))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError, ImportError, TypeError, ZeroDivisionError):
        return None
    finally:
        optuna.logging.set_verbosity(verbosity)
    if any("importances will be equal" in str(w.message) for w in caught):
        return None
    values = {k: float(v) for k, v in found.items()}
    return values if values and all(math.isfinite(v) for v in values.values()) else None


# -- planner parameters ------------------------------------------------------------

@dataclass(frozen=True)
class ParamRow:
    name: str
    meaning: str
    f32: str
    f64: str
    default: str  # the runtime's built-in default (autotune.params)
    tuned: tuple[str, ...] = ()  # dtypes whose value the search changed from its starting point


def _param_text(name: str, value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if name.endswith("_seconds"):
        return f"{value * 1e9:.3g} ns"
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def param_rows(params: Mapping[str, Any], tuning: Mapping[str, Any] | None = None
               ) -> tuple[list[ParamRow], list[tuple[str, str]]]:
    """The planner's parameters of a table as rows (parameter, meaning, f32, f64, default),
    and the table's other ``params`` entries (kernel facts such as the SIMD width) as pairs."""
    start = (tuning or {}).get("default_params") or {}
    tuned = (tuning or {}).get("tuned_params") if was_kept(tuning) else None
    rows = []
    for p in PARAMS:
        if p.name not in params:
            continue
        value = params[p.name]
        per = {dt: (value.get(dt) if isinstance(value, Mapping) else value) for dt in ("f32", "f64")}
        changed = []
        if tuned and p.name in start:
            before = start[p.name]
            for dt in ("f32", "f64"):
                old = before.get(dt) if isinstance(before, Mapping) else before
                if old is not None and per[dt] is not None and not math.isclose(float(old), float(per[dt])):
                    changed.append(dt)
        rows.append(ParamRow(p.name, p.meaning, _param_text(p.name, per["f32"]), _param_text(p.name, per["f64"]),
                             _param_text(p.name, p.default), tuple(changed)))
    others = [(k, _param_text(k, v) if not isinstance(v, Mapping) else
               ", ".join(f"{dk} {_param_text(k, dv)}" for dk, dv in v.items()))
              for k, v in sorted(params.items()) if k not in BY_NAME]
    return rows, others


# -- plans and benchmarks ----------------------------------------------------------

BENCHMARK_COLUMNS = ("shape", "library", "gflops", "ratio")


def benchmark_frame(benchmarks: pd.DataFrame | None) -> pd.DataFrame | None:
    """The peer comparison with shapes in their measured order; None when absent."""
    if benchmarks is None or benchmarks.empty:
        return None
    missing = [c for c in BENCHMARK_COLUMNS if c not in benchmarks.columns]
    if missing:
        raise ValueError(f"benchmarks frame lacks columns {missing}; expected {list(BENCHMARK_COLUMNS)}")
    frame = benchmarks.copy()
    frame["shape"] = frame["shape"].astype(str)
    frame["library"] = frame["library"].astype(str)
    return frame.reset_index(drop=True)


def unique_in_order(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))
