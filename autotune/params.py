"""The planner's parameters: declared once here, every other view derived from this table.

The tiler (``kernels_src/runtime/plan.c`` and ``cost.c``) plans with a handful of
numbers: Goto blocks, crossovers, cost weights, a thread-grid mode and the main
kernels the install measured.
Each is one :class:`Param` of :data:`PARAMS`: its C type, whether it has a value
per dtype, its default, the range the tuner searches and what it means.  From that
table come

- :class:`PlannerParams`, the typed record the models, the tuner and the table exchange;
- :class:`CTuneParams`, the ctypes mirror of ``autotune.h``'s ``at_tune_params``
  (``at_params_get`` / ``at_params_set``);
- :func:`emit_c`, the initialisers of the generated table: the library's parameters
  and the runtime's built-in defaults (what a zero cost weight stands for);
- :func:`suggest` and :func:`space_point`, optuna's search space.

``autotune.h`` keeps the struct written out, because it is the public ABI a C
programmer reads; ``tests/test_params.py`` compiles it and checks the offset, size
and default of every field against this declaration.  Facts about the kernels
(provenance, measured peak, vector width) are not parameters: the table emits them
in a struct of their own (``at_kernel_facts``, ``kernels_src/runtime/at_table.h``).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

DTYPES = ("f32", "f64")
DTYPE_INDEX = {"f32": 0, "f64": 1}

_CTYPES = {"int64_t": ctypes.c_int64, "int32_t": ctypes.c_int32, "double": ctypes.c_double}


@dataclass(frozen=True)
class Param:
    """One planner parameter: its C form, its default and its search space.

    ``study`` names the tuning study that searches it (``small``: the no-pack tiler's
    preferences; ``large``: the packed path's blocking; ``measured``: none, the
    install times what it stands for, :mod:`autotune.crossovers`); ``threaded`` ones are
    searched only on a host with more than one thread.  The space is ``[low, high]``,
    on a log scale, in steps of ``step``, or one of ``choices``.
    """

    name: str
    ctype: str
    per_dtype: bool
    default: float
    study: str
    meaning: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: int = 0
    choices: tuple[int, ...] = ()
    threaded: bool = False

    @property
    def is_int(self) -> bool:
        return self.ctype != "double"

    def cast(self, value: Any) -> float | int:
        return int(value) if self.is_int else float(value)

    def suggest(self, trial: Any) -> float | int:
        """The value an optuna trial tries for this parameter."""
        if self.choices:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.is_int:
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=self.step or 1)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def clip(self, value: float) -> float | int:
        """``value`` as a point of the search space (the incumbent enqueued as a trial)."""
        if self.choices:
            return int(value) if int(value) in self.choices else self.choices[0]
        if self.is_int:
            lo, hi, step = int(self.low), int(self.high), self.step or 1
            return int(min(hi, max(lo, lo + round((value - lo) / step) * step)))
        return float(min(self.high, max(self.low, value)))


#: In the order of autotune.h's ``at_tune_params``: the ctypes mirror and the C
#: initialisers follow it, and the search suggests in it.
PARAMS: tuple[Param, ...] = (
    Param("blk_m", "int64_t", True, 128, "large", "Goto block of M: rows of A packed per panel",
          low=16, high=512, step=16),
    Param("blk_n", "int64_t", True, 256, "large", "Goto block of N: columns of B packed per panel",
          low=16, high=1024, step=16),
    Param("blk_k", "int64_t", True, 256, "large", "Goto block of K: depth of one packed panel",
          low=32, high=1024, step=16),
    Param("pack_flops", "double", True, 2.0 * 160**3, "large",
          "2MNK from which the packed path is used (2s^3: also when A holds s^2 elements)", low=1e5, high=1e9, log=True),
    Param("thread_flops", "double", False, 4.0e6, "small",
          "2MNK below which a plan runs on one thread", low=1e5, high=1e8, log=True, threaded=True),
    Param("call_seconds", "double", True, 2e-9, "small",
          "tiler cost charged per kernel call besides its flops (favours big blocks)",
          low=0.25e-9, high=16e-9, log=True),
    Param("edge_frac", "double", True, 0.03, "measured",
          "speed of portable edge code as a fraction of peak (measured at install; low: exact kernel covers)",
          low=0.003, high=0.3, log=True),
    Param("pack_seconds", "double", True, 0.25e-9, "large",
          "tiler cost per element copied into a packed panel", low=0.03e-9, high=3e-9, log=True),
    Param("grid", "int32_t", True, 0, "large",
          "thread grid: 0 least predicted load, 1 split M, 2 split N", choices=(0, 1, 2)),
    Param("pack_flops_tn", "double", True, 2.0 * 160**3, "measured",
          "2MNK from which a tn product (op(A) = A^T) is packed where that is below pack_flops: "
          "in place its kernels read A as dot products (measured at install)", low=1e5, high=1e9, log=True),
    Param("pack_kernel", "int32_t", True, 0, "measured",
          "the packed path's main kernel: 1 + its index in the library's kernel table, which the "
          "table's selection orders (0: the fastest by the kernels' figures; measured at install)"),
    Param("thread_seconds", "double", False, 1e-6, "measured",
          "fixed cost of a call on several threads (waking and joining the pool): a plan splits only "
          "where its busiest share plus this beats one thread (measured at install)", low=0.0, high=1e-4),
    *(Param(f"place_kernel_{trans}", "int32_t", True, 0, "measured",
            f"the main kernel of {trans} products read in place, from K = 64 up to 2 x 128^3 flops: "
            "1 + its index in the "
            "library's kernel table (0: the tiler's choice by the kernels' figures; measured at install)")
      for trans in ("nn", "nt", "tn", "tt")),
    Param("place_stream_bytes", "double", True, 6.0 * 2**20, "measured",
          "bytes of an A read in place (M K elements) from which it comes from memory, not the last-level "
          "cache: a walk of up to 128 bytes of a row of C (f32 32 columns, fp64 16) then takes K in short "
          "slices and is not packed (measured at install)", low=2.0**18, high=2.0**31, log=True),
)
BY_NAME: dict[str, Param] = {p.name: p for p in PARAMS}
PER_DTYPE: tuple[str, ...] = tuple(p.name for p in PARAMS if p.per_dtype)


class CTuneParams(ctypes.Structure):
    """autotune.h's ``at_tune_params``: what ``at_params_get`` / ``at_params_set`` exchange."""

    _fields_ = [(p.name, _CTYPES[p.ctype] * 2 if p.per_dtype else _CTYPES[p.ctype]) for p in PARAMS]


def _pair(value: Any, param: Param) -> tuple:
    if isinstance(value, Mapping):
        return tuple(param.cast(value.get(dt, param.default)) for dt in DTYPES)
    if value is None:
        return (param.cast(param.default),) * 2
    return (param.cast(value),) * 2


@dataclass(frozen=True)
class PlannerParams:
    """Everything the planner reads; a pair is (f32, f64).  Defaults: :data:`PARAMS`."""

    blk_m: tuple[int, int] = (128, 128)
    blk_n: tuple[int, int] = (256, 256)
    blk_k: tuple[int, int] = (256, 256)
    pack_flops: tuple[float, float] = (2.0 * 160**3,) * 2
    thread_flops: float = 4.0e6
    call_seconds: tuple[float, float] = (2e-9, 2e-9)
    edge_frac: tuple[float, float] = (0.03, 0.03)
    pack_seconds: tuple[float, float] = (0.25e-9, 0.25e-9)
    grid: tuple[int, int] = (0, 0)
    pack_flops_tn: tuple[float, float] = (2.0 * 160**3,) * 2
    pack_kernel: tuple[int, int] = (0, 0)
    thread_seconds: float = 1e-6
    place_kernel_nn: tuple[int, int] = (0, 0)
    place_kernel_nt: tuple[int, int] = (0, 0)
    place_kernel_tn: tuple[int, int] = (0, 0)
    place_kernel_tt: tuple[int, int] = (0, 0)
    place_stream_bytes: tuple[float, float] = (6.0 * 2**20,) * 2

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> "PlannerParams":
        """From a table's ``params`` (one number or ``{"f32": .., "f64": ..}`` per key)."""
        values: dict[str, Any] = {}
        for p in PARAMS:
            raw = params.get(p.name)
            values[p.name] = _pair(raw, p) if p.per_dtype else p.cast(p.default if raw is None else raw)
        return cls(**values)

    def to_mapping(self, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The table's ``params`` format, over ``base`` (which keeps the kernel facts)."""
        out = dict(base or {})
        for p in PARAMS:
            value = getattr(self, p.name)
            out[p.name] = dict(zip(DTYPES, value)) if p.per_dtype else value
        return out

    def get(self, dtype: str, name: str) -> Any:
        value = getattr(self, name)
        return value[DTYPE_INDEX[dtype]] if BY_NAME[name].per_dtype else value

    def with_values(self, dtype: str, values: Mapping[str, Any]) -> "PlannerParams":
        """A copy with ``dtype``'s values of the per-dtype parameters (and shared ones) replaced."""
        changes: dict[str, Any] = {}
        for name, value in values.items():
            param = BY_NAME[name]
            if not param.per_dtype:
                changes[name] = param.cast(value)
                continue
            pair = list(changes.get(name, getattr(self, name)))
            pair[DTYPE_INDEX[dtype]] = param.cast(value)
            changes[name] = tuple(pair)
        return replace(self, **changes)

    def to_struct(self) -> CTuneParams:
        out = CTuneParams()
        for p in PARAMS:
            value = getattr(self, p.name)
            if p.per_dtype:
                getattr(out, p.name)[:] = value
            else:
                setattr(out, p.name, value)
        return out

    @classmethod
    def from_struct(cls, struct: CTuneParams) -> "PlannerParams":
        return cls(**{p.name: tuple(getattr(struct, p.name)) if p.per_dtype else getattr(struct, p.name)
                      for p in PARAMS})


DEFAULTS = PlannerParams()
assert [f.name for f in fields(PlannerParams)] == [p.name for p in PARAMS]
assert all(DEFAULTS.get("f32", p.name) == p.default for p in PARAMS)


# -- the search space ----------------------------------------------------------------

def searched(study: str, threaded: bool) -> tuple[Param, ...]:
    """The parameters a study searches (``threaded``: the host has more than one thread)."""
    return tuple(p for p in PARAMS if p.study == study and (threaded or not p.threaded))


def suggest(trial: Any, study: str, threaded: bool) -> dict[str, Any]:
    """The values an optuna trial tries, by parameter name (the study has one dtype)."""
    return {p.name: p.suggest(trial) for p in searched(study, threaded)}


def space_point(params: PlannerParams, dtype: str, study: str, threaded: bool) -> dict[str, Any]:
    """``params`` as a point of the study's space: the incumbent, enqueued as its first trial."""
    return {p.name: p.clip(params.get(dtype, p.name)) for p in searched(study, threaded)}


# -- C ---------------------------------------------------------------------------------

def _c_number(value: float, param: Param) -> str:
    if param.is_int:
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return "0.0"
    text = repr(value)
    return text if ("e" in text or "." in text) else text + ".0"


def emit_c(name: str, params: PlannerParams) -> str:
    """``const at_tune_params <name> = {...};``: a C initialiser of ``params``."""
    lines = [f"const at_tune_params {name} = {{"]
    for p in PARAMS:
        value = getattr(params, p.name)
        text = ("{" + ", ".join(_c_number(v, p) for v in value) + "}") if p.per_dtype else _c_number(value, p)
        lines.append(f"    .{p.name} = {text},")
    lines.append("};")
    return "\n".join(lines)
