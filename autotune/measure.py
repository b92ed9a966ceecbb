"""Measure: validate and time kernels by running the harness as a subprocess.

The harness (kernels_src/harness/harness.c, linked by :func:`autotune.build.build_harness`)
prints one JSON object per line.  This module runs it -- behind ``target.runner``,
so the same code drives a native harness and one under QEMU -- and reads the
lines as they arrive.  Before each kernel the harness announces
``{"event":"start","kernel":...}``; when the process dies (a signal, or a kill
after the per-kernel timeout) the kernel of the last unfinished ``start`` is
blamed, recorded as rejected, and the harness is started again on the kernels
that remain.  A kernel failure is therefore always a value in the result; only
a harness that cannot run at all raises :class:`MeasureError`.
"""

from __future__ import annotations

import abc
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .toolchain import Target, slowdown

#: Seconds a native harness may stay silent inside one kernel before it is killed.
DEFAULT_TIMEOUT = 60.0

#: ``progress(advance=1, description=kernel_name)`` once per finished kernel,
#: as in :mod:`autotune.build`.
ProgressFn = Callable[..., object]

BENCH_COLUMNS = (
    "kernel", "K", "pad", "lda", "ldb", "ldc", "iters",
    "best_gflops", "median_gflops", "ns_per_call", "median_ns_per_call", "pace_gflops",
)


class MeasureError(RuntimeError):
    """The harness cannot be used at all (missing, not executable, or dies before any kernel)."""


@dataclass(frozen=True)
class ValidationResult:
    """The verdict on one kernel: ``status`` is ``"validated"`` or ``"rejected"``.

    ``case`` is the harness's description of the first failing case (K, leading
    dimensions, alpha, beta, element, got / want / bound) for a wrong answer;
    ``reason`` says in words why the kernel was rejected.
    """

    name: str
    status: str
    reason: str = ""
    cases: int = 0
    max_rel_err: float | None = None
    case: Mapping[str, object] | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "validated"


def default_timeout(target: Target) -> float:
    return DEFAULT_TIMEOUT * slowdown(target)


# ---------------------------------------------------------------- running --


@dataclass(frozen=True)
class _Exit:
    """How a harness run ended: its exit status, or that it was killed for silence."""

    returncode: int | None
    timed_out: bool
    stderr: str


class _Run:
    """One harness process whose stdout lines are read by a thread into a queue,
    so the caller can wait for the next line with a timeout."""

    def __init__(self, argv: Sequence[str]) -> None:
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                # Its own process group, so a timeout kills the runner and the
                # harness under it together, and nothing else.
                start_new_session=True,
            )
        except OSError as exc:
            raise MeasureError(f"cannot execute the harness ({' '.join(argv)}): {exc}") from exc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.timed_out = False
        self._stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            # The tail is what explains a failure; a chatty harness must not fill memory.
            if len(self._stderr) < 200:
                self._stderr.append(line)

    def events(self, timeout: float) -> Iterator[dict]:
        """JSON objects as they arrive; stops at end of output or after ``timeout`` of silence."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                self.timed_out = True
                self._kill()
                return
            if line is None:
                return
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # an emulator's or a libc's chatter on stdout, not ours
            if isinstance(event, dict) and "event" in event:
                yield event

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()

    def finish(self) -> _Exit:
        try:
            returncode = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._kill()
            returncode = self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=5)
        return _Exit(returncode, self.timed_out, "".join(self._stderr).strip())


def _crash_reason(end: _Exit, timeout: float) -> str:
    if end.timed_out:
        return f"timed out: no result within {timeout:g} s"
    code = end.returncode
    if code is not None and code < 0:
        return f"crashed: {_signal_name(-code)}"
    # A shell or an emulator may report a fatal signal as 128 + n.
    if code is not None and 128 < code < 128 + 65:
        return f"crashed: {_signal_name(code - 128)} (exit status {code})"
    return f"harness exited with status {code} inside the kernel"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _harness_argv(harness: Path, target: Target, *args: str) -> list[str]:
    return [*target.runner, str(harness), *args]


class KernelHandler(abc.ABC):
    """What a command does with its events; :func:`drive` does the rest."""

    @abc.abstractmethod
    def event(self, kernel: str, event: dict) -> None:
        """One JSON event the harness printed about ``kernel``."""

    def finished(self, kernel: str) -> None:
        """The kernel ended normally (its next ``start`` or ``done`` arrived)."""

    @abc.abstractmethod
    def failed(self, kernel: str, reason: str) -> None:
        """The kernel crashed or hung; ``reason`` says how."""


def drive(
    harness: Path,
    target: Target,
    args: Sequence[str],
    names: Sequence[str],
    handler: KernelHandler,
    timeout: float,
    progress: ProgressFn | None,
) -> None:
    """Run ``harness <args> NAME...`` until every name has finished or failed,
    restarting it after each crash on the names still to do."""
    remaining = list(dict.fromkeys(names))
    while remaining:
        run = _Run(_harness_argv(harness, target, *args, *remaining))
        done: set[str] = set()
        current: str | None = None

        def close(kernel: str, reason: str | None = None) -> None:
            if kernel in done:
                return
            done.add(kernel)
            if reason is None:
                handler.finished(kernel)
            else:
                handler.failed(kernel, reason)
            if progress is not None:
                progress(advance=1, description=kernel)

        try:
            for event in run.events(timeout):
                kind, kernel = event.get("event"), event.get("kernel")
                if kind == "start" and isinstance(kernel, str):
                    if current is not None:
                        close(current)
                    current = kernel
                elif kind == "done":
                    if current is not None:
                        close(current)
                    current = None
                elif kind == "error" and isinstance(kernel, str):
                    close(kernel, f"harness error: {event.get('message', 'unknown')}")
                elif isinstance(kernel, str) and kernel not in done:
                    handler.event(kernel, event)
        except BaseException:
            # Ctrl-C, or a failure of ours: the harness has a session of its own (a
            # terminal's Ctrl-C never reaches it), so nothing else would stop it timing
            # on in the background, on the cores the next run needs.
            run._kill()
            raise
        end = run.finish()
        if current is not None and current not in done:
            close(current, _crash_reason(end, timeout))
        if not done:
            detail = f"\n{end.stderr}" if end.stderr else ""
            raise MeasureError(
                f"the harness {harness} ran no kernel (exit status {end.returncode}"
                f"{', timed out' if end.timed_out else ''}){detail}"
            )
        remaining = [name for name in remaining if name not in done]


# --------------------------------------------------------------- validate --


class _Validate(KernelHandler):
    def __init__(self) -> None:
        self.results: dict[str, ValidationResult] = {}

    def event(self, kernel: str, event: dict) -> None:
        if event.get("event") != "validate":
            return
        cases = int(event.get("cases", 0))
        if event.get("ok") is True:
            self.results[kernel] = ValidationResult(
                kernel, "validated", "", cases, _float(event.get("max_rel_err"))
            )
        else:
            case = event.get("case") or {}
            self.results[kernel] = ValidationResult(
                kernel, "rejected", _describe_case(case), cases, None, case
            )

    def finished(self, kernel: str) -> None:
        if kernel not in self.results:
            self.results[kernel] = ValidationResult(kernel, "rejected", "harness reported no verdict")

    def failed(self, kernel: str, reason: str) -> None:
        self.results[kernel] = ValidationResult(kernel, "rejected", reason)


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _describe_case(case: Mapping[str, object]) -> str:
    if not case:
        return "wrong result"
    where = (
        f"K={case.get('K')} lda={case.get('lda')} ldb={case.get('ldb')} ldc={case.get('ldc')} "
        f"alpha={case.get('alpha')} beta={case.get('beta')}"
        + (" (C full of NaN)" if case.get("c_nan") else "")
    )
    if case.get("what") == "padding":
        return f"wrote C[{case.get('i')},{case.get('j')}] in the ldc padding at {where}"
    return (
        f"wrong result at {where}: C[{case.get('i')},{case.get('j')}] = {case.get('got')}, "
        f"expected {case.get('want')} (bound {case.get('bound')})"
    )


def validate(
    harness: Path,
    target: Target,
    names: Sequence[str],
    progress: ProgressFn | None = None,
    *,
    seed: int = 42,
    timeout: float | None = None,
) -> dict[str, ValidationResult]:
    """Validate ``names`` against the harness's double-precision reference.

    Returns one result per name, in the order given.  A kernel that crashes or
    stays silent past ``timeout`` seconds is rejected with the reason
    (``"crashed: SIGSEGV"``, ``"timed out: ..."``) and the rest are still validated.
    """
    handler = _Validate()
    limit = timeout if timeout is not None else default_timeout(target)
    drive(harness, target, ["validate", "--seed", str(seed)], names, handler, limit, progress)
    return {name: handler.results[name] for name in dict.fromkeys(names)}


# ------------------------------------------------------------------ bench --


class _Bench(KernelHandler):
    def __init__(self) -> None:
        self.pending: dict[str, list[dict]] = {}
        self.rows: list[dict] = []
        self.failures: dict[str, str] = {}

    def event(self, kernel: str, event: dict) -> None:
        if event.get("event") == "bench":
            self.pending.setdefault(kernel, []).append(
                {col: event.get(col) for col in BENCH_COLUMNS}
            )

    def finished(self, kernel: str) -> None:
        self.rows.extend(self.pending.pop(kernel, []))

    def failed(self, kernel: str, reason: str) -> None:
        # Timings of a kernel that went on to crash are not trusted.
        self.pending.pop(kernel, None)
        self.failures[kernel] = reason


def bench(
    harness: Path,
    target: Target,
    names: Sequence[str],
    ks: Sequence[int] = (16, 64, 256),
    pads: Sequence[int] = (0, 17),
    min_time_ms: float = 2.0,
    repeats: int = 5,
    progress: ProgressFn | None = None,
    *,
    timeout: float | None = None,
    place: int = 0,
) -> pd.DataFrame:
    """Time ``names`` over the grid ``ks x pads`` with operands hot in L1.

    One row per (kernel, K, pad) with the columns of :data:`BENCH_COLUMNS`;
    ``place`` (0: as allocated) moves the operands to cache-line offsets within
    their pages drawn from that number (the harness's ``--place``); ``pace_gflops``
    is the core's speed beside the samples.
    ``best_*`` is the fastest of ``repeats`` runs, each at least ``min_time_ms``
    long.  Kernels that crashed or timed out have no rows: they are listed with
    their reason in ``frame.attrs["failures"]`` (a ``dict[str, str]``).
    """
    if not ks or not pads:
        raise ValueError("bench needs at least one K and one pad")
    handler = _Bench()
    limit = timeout if timeout is not None else default_timeout(target)
    args = [
        "bench",
        "--k", ",".join(str(int(k)) for k in ks),
        "--pad", ",".join(str(int(p)) for p in pads),
        "--min-time-ms", repr(float(min_time_ms)),
        "--repeats", str(int(repeats)),
        *(("--place", str(int(place))) if place else ()),
    ]
    drive(harness, target, args, names, handler, limit, progress)
    frame = pd.DataFrame(handler.rows, columns=list(BENCH_COLUMNS))
    ints = ["K", "pad", "lda", "ldb", "ldc", "iters"]
    floats = ["best_gflops", "median_gflops", "ns_per_call", "median_ns_per_call", "pace_gflops"]
    frame = frame.astype({**{c: "int64" for c in ints}, **{c: "float64" for c in floats}})
    frame.attrs["failures"] = dict(handler.failures)
    return frame


# ------------------------------------------------------------------- peak --


def peak(harness: Path, target: Target, *, timeout: float | None = None) -> dict[str, float]:
    """One core's measured multiply-add peak for the harness's ISA: ``{"f32": GFLOPS, "f64": GFLOPS}``,
    and under ``"pace"`` the speed of the pace loop every bench point is timed beside
    (its ``pace_gflops``) on the core left alone, when the harness reports it."""
    limit = timeout if timeout is not None else default_timeout(target)
    run = _Run(_harness_argv(harness, target, "peak"))
    started = time.monotonic()
    result: dict[str, float] = {}
    for event in run.events(limit):
        if event.get("event") == "peak" and event.get("dtype") in ("f32", "f64", "pace"):
            value = _float(event.get("gflops"))
            if value is not None:
                result[str(event["dtype"])] = value
    end = run.finish()
    if not {"f32", "f64"} <= set(result):
        why = _crash_reason(end, limit) if end.returncode or end.timed_out else "incomplete output"
        raise MeasureError(
            f"the harness {harness} did not report its peak after {time.monotonic() - started:.1f} s "
            f"({why}){': ' + end.stderr if end.stderr else ''}"
        )
    return result
