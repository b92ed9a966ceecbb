"""A table's tuning record (``TunedTable.tuning``, written by :mod:`autotune.tune`) read for people.

`autotune show`, `autotune install` and the HTML report all say how many trials
the search ran and whether its result was kept; they count and explain from
here, so the numbers agree wherever they are read.  This module imports neither
optuna nor matplotlib: `autotune show` stays quick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

#: What autotune.tune.KEEP_MARGIN is (tests/test_report.py checks they agree):
#: a study's best is kept only when its confirmation run beats the incumbent by more.
KEEP_MARGIN = 0.01


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def trial_state(trial: Mapping[str, Any]) -> str:
    """The trial's optuna state name (COMPLETE, PRUNED, FAIL, RUNNING, WAITING).

    Records written before states were stored have a value or not: complete or failed.
    """
    state = trial.get("state")
    if state:
        return str(state).upper()
    return "COMPLETE" if _finite(trial.get("value")) else "FAIL"


@dataclass(frozen=True)
class TrialCounts:
    """Every trial of a record, by how it ended."""

    complete: int = 0    # measured the whole suite: the dots of the report's chart
    pruned: int = 0      # stopped after a few shapes, already far slower than good trials
    failed: int = 0      # raised, or returned no number
    unfinished: int = 0  # running or waiting when the search stopped (Ctrl-C)

    @property
    def total(self) -> int:
        return self.complete + self.pruned + self.failed + self.unfinished

    def breakdown(self) -> str:
        """``218 complete, 470 pruned, 7 failed`` (empty kinds left out, complete never)."""
        parts = [f"{self.complete} complete"]
        parts += [f"{n} {word}" for n, word in ((self.pruned, "pruned"), (self.failed, "failed"),
                                                (self.unfinished, "unfinished")) if n]
        return ", ".join(parts)

    def describe(self) -> str:
        """``695 trials: 218 complete, 470 pruned, 7 failed``."""
        return f"{self.total} trial{'' if self.total == 1 else 's'}: {self.breakdown()}"


def trial_counts(tuning: Mapping[str, Any] | None) -> TrialCounts:
    counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0, "OTHER": 0}
    for trial in (tuning or {}).get("trials") or ():
        state = trial_state(trial)
        if state == "COMPLETE" and not _finite(trial.get("value")):
            state = "FAIL"  # a complete trial without a number has nothing to show
        counts[state if state in counts else "OTHER"] += 1
    return TrialCounts(counts["COMPLETE"], counts["PRUNED"], counts["FAIL"], counts["OTHER"])


def was_kept(tuning: Mapping[str, Any] | None) -> bool:
    """Whether the tuned parameters replaced the analytic defaults.

    The record says so (``kept``); one without the key (written by hand, or by an
    early version) is read from its two suite times.
    """
    tuning = tuning or {}
    if "kept" in tuning:
        return bool(tuning["kept"])
    default_s, tuned_s = tuning.get("objective_default_s"), tuning.get("objective_tuned_s")
    return _finite(default_s) and _finite(tuned_s) and float(tuned_s) < float(default_s)


def _ms(seconds: Any) -> str:
    return f"{float(seconds) * 1e3:.3f} ms"


def verdict(tuning: Mapping[str, Any] | None) -> str | None:
    """Whether the tuned parameters replaced the analytic defaults, and why, in a sentence or two.

    None when nothing was searched (no record, or a zero budget).  The tuner
    (autotune.tune) keeps a study's best only when an interleaved confirmation
    run beats the incumbent by more than KEEP_MARGIN, and the whole result only
    when the full suite, re-measured with both settings, is faster.
    """
    if not tuning:
        return None
    studies = list(tuning.get("studies") or ())
    default_s, tuned_s = tuning.get("objective_default_s"), tuning.get("objective_tuned_s")
    margin = f"{100 * KEEP_MARGIN:g}%"
    if tuning.get("held_out_rejected"):
        return ("The tuned parameters were dropped: faster than the starting point on the tuning suite, "
                "they were not faster on the held-out shapes the search never saw (fitted to the suite, "
                "or to a busy machine's noise).")
    if was_kept(tuning):
        text = "The tuned parameters were kept"
        if _finite(default_s) and _finite(tuned_s):
            text += (f": re-measured interleaved with the defaults, the whole suite took {_ms(tuned_s)} "
                     f"against {_ms(default_s)} ({float(default_s) / float(tuned_s):.2f}x faster)")
        won = [s["study"] for s in studies if s.get("kept")]
        if won:
            text += f"; studies that won their confirmation run: {', '.join(won)}"
        return text + "."
    if not studies:
        if tuning.get("interrupted"):
            return "Interrupted before the search began: the analytic defaults stay."
        if not tuning.get("trials"):
            return None  # budget 0: nothing was searched
        return "The analytic defaults were kept."
    won = [s for s in studies if s.get("kept")]
    if won:
        names = ", ".join(s["study"] for s in won)
        text = (f"The analytic defaults were kept: {names} beat the defaults on their own shapes in the "
                "confirmation run, but re-measured on the whole suite the tuned set was not faster")
        if _finite(default_s):
            text += f" (defaults {_ms(default_s)})"
        return text + "."
    reasons = []
    for s in studies:
        name = s.get("study", "?")
        if "confirm_best_s" in s and "confirm_default_s" in s:
            best, base = s["confirm_best_s"], s["confirm_default_s"]
            if _finite(best) and _finite(base):
                reasons.append(f"{name}: best re-measured at {_ms(best)} against {_ms(base)} for the defaults")
            else:
                reasons.append(f"{name}: the confirmation run was interrupted")
        elif "best_s" in s:
            reasons.append(f"{name}: its best trials were the defaults themselves")
        else:
            reasons.append(f"{name}: no trial measured the whole suite")
    text = ("The analytic defaults were kept: the tuner keeps a study's best parameters only when an "
            f"interleaved confirmation run shows them faster than the defaults by more than {margin}, "
            "and none was. A trial's value is a single noisy measurement, so the best-so-far curve "
            "falls below the defaults by luck alone; the confirmation run measures again")
    if tuning.get("interrupted"):
        text += " (this search was interrupted)"
    return text + ". " + "; ".join(reasons) + "."


def summary_line(tuning: Mapping[str, Any] | None) -> str:
    """One line for the terminal: tuned (and by how much) or the analytic default, and the trials."""
    tuning = tuning or {}
    default_s, tuned_s = tuning.get("objective_default_s"), tuning.get("objective_tuned_s")
    if not default_s or not tuned_s:
        return "planner parameters: analytic default (not tuned)"
    if was_kept(tuning):
        verdict_word = "tuned kept"
    elif tuning.get("held_out_rejected"):
        verdict_word = "default kept (tuned faster on the suite, not on the held-out shapes)"
    else:
        verdict_word = "default kept (tuned not faster when re-measured)"
    return (f"tuning: suite {default_s * 1e3:.2f} ms default, {tuned_s * 1e3:.2f} ms tuned, {verdict_word} "
            f"({trial_counts(tuning).describe()}; {tuning.get('budget_s', 0):.0f} s)")


def held_out_line(tuning: Mapping[str, Any] | None) -> str | None:
    """The held-out check in one line: which parameter set won, and its gain over the model's.

    The install times the model's, the measured and the tuned parameters on shapes
    the search never saw (autotune.tune.judge); None for a table without the check.
    """
    held = (tuning or {}).get("held_out")
    if not held:
        return None
    words = {"tuned": "tuned parameters", "tuned, measured crossovers":
             "tuned parameters with the measured crossovers", "measured": "measured crossovers",
             "model": "model's parameters (nothing measured beat them)"}
    gain = held.get("gain_over_model")
    chosen = str(held.get("chosen"))
    held_alone = [str(name).removeprefix("measured ") for name in held.get("held") or ()]
    if chosen == "measured crossovers that held":
        # Each crossover judged alone first; those that did not lose joined (install.crossovers_that_held).
        said = f"the model's parameters with the measured {', '.join(held_alone)} crossovers"
    else:
        # "measured pack_flops f32": the model's set with that one measured crossover.
        said = words.get(chosen) or (f"the model's parameters with the {chosen} crossover"
                                     if chosen.startswith("measured ") else chosen)
    text = f"held-out check ({held.get('shapes', '?')} shapes the tuner never saw): {said} kept"
    if _finite(gain) and held.get("chosen") != "model":
        text += f", {float(gain):.2f}x the model's speed there"
    if tuning.get("held_out_rejected"):
        text += "; the tuned set won its own suite but not these shapes, so it was dropped"
    return text


#: How a crossover's sizes read (autotune.crossovers.Crossover.shape): a square product's
#: side, the quantised GEMV's (M = 1, K = N = side), or M of a few columns of C (M x 4 x M).
SIZE_AXES = {"square": "square size (M = N = K)", "gemv": "qmatmul GEMV size (M = 1, K = N)",
             "stream": "M of M x 4 x M (A of M^2 elements, read in place)"}


def size_label(crossover: Mapping[str, Any], side: float) -> str:
    """``512^3``, ``1 x 512 x 512`` for a GEMV sweep, ``1024 x 4 x 1024 (A 8.0 MiB)`` for
    the streaming one."""
    shape = crossover.get("shape")
    if shape == "gemv":
        return f"1 x {side:.0f} x {side:.0f}"
    if shape == "stream":
        from .models import BPE

        mib = side * side * BPE.get(str(crossover.get("dtype")), 8) / 2**20
        return f"{side:.0f} x 4 x {side:.0f} (A {mib:.1f} MiB)"
    return f"{side:.0f}^3"


def crossover_name(crossover: Mapping[str, Any]) -> str:
    """What a crossover decides, as a reader names it: ``pack_flops f32``, ``qmatmul threads``."""
    param = str(crossover.get("param"))
    if param in ("pack_flops", "pack_flops_tn", "place_stream_bytes"):
        return f"{param} {crossover.get('dtype')}"
    return {"qthread_macs": "qmatmul threads"}.get(param, param)


def edge_lines(edge: Any) -> list[str]:
    """The edge code's measured speed per dtype (autotune.crossovers.measure_edge,
    ``settings["edge"]``) in a line each: what the planner prices uncovered blocks at."""
    lines = []
    for dtype, e in sorted((edge or {}).items()):
        try:
            frac, peak = float(e["frac"]), float(e["peak_gflops"])
        except (KeyError, TypeError, ValueError):
            continue
        if e.get("gflops") is None:
            lines.append(f"edge code {dtype}: could not be timed, priced at {100 * frac:.1f}% of peak")
            continue
        lines.append(f"edge code {dtype}: {float(e['gflops']):.1f} GFLOPS measured, {100 * frac:.1f}% of "
                     f"the {peak:.0f} GFLOPS peak (what the planner prices a block no kernel covers at)")
    return lines


def thread_cost_lines(cost: Any) -> list[str]:
    """The measured fixed cost of a threaded call (autotune.crossovers.measure_thread_cost,
    ``settings["thread_cost"]``), in a line: what a split must save to be taken."""
    if not isinstance(cost, Mapping):
        return []
    value = float(cost.get("value") or 0.0)
    if cost.get("seconds") is None:
        why = {"busy": "other processes kept the cores busy"}.get(str(cost.get("source")), "one thread")
        return [f"thread cost: {value * 1e6:.2f} us, the default (not timed: {why})"]
    sides = ", ".join(f"{k} {float(v) * 1e6:.2f}" for k, v in (cost.get("by_side") or {}).items())
    return [f"thread cost: {value * 1e6:.2f} us a call on {cost.get('threads')} threads beyond its busiest "
            f"share (measured at {sides} us; a plan splits only where it saves more)"]


def main_kernel_lines(mains: Any, places: Any = None) -> list[str]:
    """The main kernels the install timed (autotune.crossovers.measure_main_kernel and
    measure_place_kernel): the packed path's per dtype (``settings["main_kernel"]``)
    and in place per dtype and transposition (``settings["place_kernel"]``), in a line
    each: which kernel runs the blocks and why."""
    lines = []
    records = [(f"packed path {key}", m) for key, m in sorted((mains or {}).items())] + \
        [(f"in place {key}", m) for key, m in sorted((places or {}).items())]
    for where, m in records:
        if not isinstance(m, Mapping):
            continue
        seconds = dict(m.get("seconds") or {})
        if m.get("source") == "busy" or not seconds:
            lines.append(f"{where}: main kernel by the kernels' figures (not timed: "
                         + ("other processes kept the cores busy)" if m.get("source") == "busy" else "no candidates)"))
            continue
        tried = len(seconds) - 1
        if m.get("trans"):
            shapes = ", ".join("x".join(str(d) for d in s) for s in m.get("shapes") or ())
            ran, on = f"ran {shapes} in place", f"on {shapes} read in place"
        else:
            ran, on = f"ran a packed {m.get('side')}^3", f"on a packed {m.get('side')}^3"
        base = seconds.get("figures")
        if not m.get("name"):
            lines.append(f"{where}: main kernel by the kernels' figures, none of {tried} candidates "
                         f"{ran} on one thread {100 * float(m.get('margin', 0)):.0f}% faster")
            continue
        mine = seconds.get(m["name"])
        gain = f", {base / mine:.2f}x the figures' choice" if base and mine else ""
        lines.append(f"{where}: main kernel {m['name']} (fastest of {tried} candidates {on}, one thread{gain})")
    return lines


def crossover_lines(crossovers: Any) -> list[str]:
    """Each measured crossover (autotune.crossovers, ``settings["crossovers"]``) in a line."""
    lines = []
    for c in crossovers or ():
        try:
            side, model_side = (float(c["flops"]) / 2) ** (1 / 3), (float(c["model_flops"]) / 2) ** (1 / 3)
        except (KeyError, TypeError, ValueError):
            continue
        name = crossover_name(c)
        points = c.get("points") or ()
        runs = sorted({int(p.get("threads", 0)) for p in points})
        on = " on one thread and all" if runs == [0, 1] else ""
        how = {"measured": f"measured over {len({p.get('side') for p in points})} sizes{on}",
               "beyond": f"{c.get('base')} won every size timed, so past the largest",
               "model": "the noise decided nothing: the model's value",
               "busy": "not measured, other processes kept the cores busy: the model's value; "
                       "run the install again on a quiet machine"}.get(c.get("source"), c.get("source"))
        if c.get("source") == "busy" and points:
            # Metered while it ran (host.load_meter): steal time counts, a VM's vCPU taken away.
            how = (f"timed twice while other work took {float(c.get('other_load') or 0):.1f} cores "
                   "(other processes, or the hypervisor): the model's value; run the install again "
                   "on a quiet machine")
        subject = {"pack_flops_tn": "tn products (A transposed) ",
                   "place_stream_bytes": "a few columns of C read in place, "}.get(str(c.get("param")), "")
        lines.append(f"{name}: {subject}{c.get('alt')} from {size_label(c, side)} ({how}; "
                     f"the model said {size_label(c, model_side)})")
    return lines
