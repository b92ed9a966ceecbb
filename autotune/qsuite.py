"""The quantised kernels' install stage: validate, measure, select (the build is build.py's and link.py's).

For a native x86 target (:func:`run_stage`) install compiles the family
(:func:`autotune.build.compile_qkernels`), links it with the runtime's ``qgemm.c``
into a validation library (:func:`autotune.link.build_qlibrary`) and runs this
module (``python -m autotune.qsuite validate|measure <library> <kernels>``) in the
crash-isolated driver :func:`autotune.measure.drive`: a kernel that crashes kills
the subprocess, not the installer, and is rejected.  Every kernel is checked
against :func:`autotune.quant.reference_qmatmul` over odd shapes (M = 1, N below a
tile, K not a multiple of the block, blocks of 64) and adversarial scales (zero,
subnormal, huge, NaN in A) within :func:`autotune.quant.scaling_error_bound`; the
valid ones are timed on M = 1, 16, 64 with K = N = 1024 (a block kernel on the
whole groups of its rows, the rest priced at the GEMV form's time, as qmatmul runs
them).  Per kind of weights the
fastest GEMV kernel (mr = 1) and the fastest block kernel are selected (an AMX block
kernel with smaller AMX tiles for the rows it leaves, :func:`select`); the table
records them (``settings["quant"]``) and the link stage regenerates their object
from the names.

For an Arm target (:func:`run_arm_stage`, native or under QEMU) the same cases run
through ``kernels_src/harness/qharness.c`` linked with a library holding the whole
family, in the same driver; nothing is timed, and the library links the validated
kernels.  Verdicts and timings go into install's journal.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import struct
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from . import build, files, link, measure
from .families import ARM_ISAS, qkernel, quant_kernels, x86
from .qformat import KINDS
from .quant_shapes import MEASURE_KN
from .specs import QKernelSpec
from .suite import best_of_rounds
from .toolchain import Target

if TYPE_CHECKING:
    from .crossovers import Crossover, Effort

#: Shapes (M) timed at install, with K = N = MEASURE_KN, best of MEASURE_ROUNDS.
MEASURE_M = (1, 16, 64)
MEASURE_ROUNDS = 5
#: Seconds a validation or measurement subprocess may take.
TIMEOUT = 600.0


@dataclass(frozen=True)
class QuantStage:
    """What the stage found: verdicts, seconds per shape (M -> s) and the selection, preferred first."""

    verdicts: Mapping[str, str]  # name -> "validated" or why it was rejected
    seconds: Mapping[str, Mapping[int, float]]
    selected: tuple[str, ...]

    def settings(self) -> dict:
        """The table's record of the stage (JSON): what link rebuilds the library from."""
        return {"selected": list(self.selected), "verdicts": dict(self.verdicts),
                "seconds": {name: {str(m): s for m, s in by_m.items()} for name, by_m in self.seconds.items()}}


def kernel_isas(target: Target) -> tuple[str, ...]:
    """The kernel ISAs install builds for ``target``: AVX2, and the VNNI and AMX forms the host has.

    The host's features are autotune.host.detect()'s, after the ISA cap (AUTOTUNE_ISA):
    a capped install never builds, validates or selects a kernel above its cap, and
    install only selects kernels it ran (validated and timed) on this CPU.
    """
    from .host import detect

    if target.isa not in x86.QUANT_TARGETS or target.emulated:
        return ()
    return x86.quant_isas(detect().features)


class _Results(measure.KernelHandler):
    """The result events of :func:`_main` per kernel; a crash or hang is the kernel's verdict."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.results: dict[str, dict] = {}

    def event(self, kernel: str, event: dict) -> None:
        if event.get("event") == "result":
            self.results[kernel] = event

    def failed(self, kernel: str, reason: str) -> None:
        self.results[kernel] = {"kernel": kernel, "status": f"{reason} while being {self.command}d"}


def _run(target: Target, command: str, library: Path, names: Sequence[str]) -> dict[str, dict]:
    """Run :func:`_main` on ``names`` in the crash-isolated driver (:func:`autotune.measure.drive`):
    a kernel that crashes is rejected, and the driver starts again on the rest."""
    handler = _Results(command)
    argv = ["-m", "autotune.qsuite", command, str(library)]
    try:
        measure.drive(Path(sys.executable), target, argv, names, handler, TIMEOUT, None)
    except measure.MeasureError:
        # Timing runs every kernel in rounds before it reports any, so a crash there names
        # none: each kernel again on its own finds which one (validation ran them all first).
        for name in names:
            try:
                measure.drive(Path(sys.executable), target, argv, [name], handler, TIMEOUT, None)
            except measure.MeasureError:
                handler.failed(name, "crashed")
    return {n: handler.results.get(n, {"status": f"no result while being {command}d"}) for n in names}


class Journal(Protocol):
    """What the stages use of install's journal (autotune.install.Journal)."""

    validations: dict[str, dict]
    benches: dict[tuple[str, str], list[dict]]

    def append(self, entries: Iterable[dict]) -> None: ...


#: The journal's settings key of the quantised timings (all of a library's kernels, in rounds).
#: What the timings mean, in the journal's key: ``as-run`` block kernels are timed on their
#: whole rows and priced with the GEMV form on the rest (_as_run).
JOURNAL_SETTINGS = f"quant:M={','.join(map(str, MEASURE_M))}:KN={MEASURE_KN}:rounds={MEASURE_ROUNDS}:as-run"


def _journaled_verdicts(journal: Journal | None, library_hash: str, names: Sequence[str],
                        run: Callable[[Sequence[str]], Mapping[str, str]]) -> dict[str, str]:
    """name -> verdict: from the journal where it holds this library's, else ``run`` and journaled.

    Keyed by the hash of the library that ran them (its kernels and qgemm.c), as the float
    kernels' verdicts are by their object's: a changed kernel is validated again."""
    key = {n: f"{library_hash}:{n}" for n in names}
    known = journal.validations if journal is not None else {}
    todo = [n for n in names if key[n] not in known]
    fresh = run(todo) if todo else {}
    entries = [{"kind": "validate", "hash": key[n], "status": fresh[n]} for n in todo]
    if journal is not None:
        journal.append(entries)
        journal.validations.update((e["hash"], e) for e in entries)
    return {n: fresh[n] if n in fresh else known[key[n]]["status"] for n in names}


def _digest_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_stage(target: Target, home: Path, patterns: Sequence[str] = (), quick: bool = False,
              journal: Journal | None = None) -> QuantStage | None:
    """Build, validate and time the family of ``target``; None when it has no quantised kernels.

    ``patterns`` (install's ``--only``) keep the kernels whose names match one.  With a
    ``journal``, verdicts and timings an earlier run left for the same library are reused
    (timings only all together: they are compared within one set of rounds).
    """
    family = [k for isa in kernel_isas(target) for k in x86.quant_family(isa, quick=quick)
              if not patterns or any(fnmatch.fnmatchcase(k.name, p) for p in patterns)]
    if not family:
        return None
    obj = build.compile_qkernels(target, family, home)
    if not obj.ok:
        return QuantStage({k.name: "compile error: " + (obj.error or "").splitlines()[0] for k in family}, {}, ())
    library = link.build_qlibrary(target, family, obj.path, build.build_dir(target, home) / "quant" / f"lib{obj.hash[:16]}.so")
    names = [k.name for k in family]
    lib_hash = _digest_file(library)
    verdicts = _journaled_verdicts(journal, lib_hash, names, lambda todo: {
        n: r["status"] for n, r in _run(target, "validate", library, todo).items()})
    valid = [n for n in names if verdicts.get(n) == "validated"]
    bench_key = (f"{lib_hash}:{','.join(valid)}", JOURNAL_SETTINGS)
    if journal is not None and bench_key in journal.benches:
        timings = journal.benches[bench_key][0]
    else:
        timings = {n: r.get("seconds", {}) for n, r in (_run(target, "measure", library, valid) if valid else {}).items()}
        if journal is not None and valid:
            journal.append([{"kind": "bench", "hash": bench_key[0], "settings": bench_key[1], "rows": [timings]}])
            journal.benches[bench_key] = [timings]
    seconds = {n: {int(m): float(s) for m, s in by_m.items()} for n, by_m in timings.items()}
    return QuantStage(verdicts, seconds, select(seconds))


# -- an Arm library's kernels: validated by qharness.c, natively or under the emulator ------

def pack_calls(calls: Sequence[tuple]) -> bytes:
    """The input of ``qharness`` (kernels_src/harness/qharness.c, whose header describes it):
    each call (kernel name or "" for the library's choice, A, weights[, options]);
    ``options`` (all optional): ``sme2`` (the weights' :class:`autotune.quant.Sme2Weights`),
    ``bias``, ``clamp``, ``ldc``."""
    blob = bytearray()
    for name, A, w, *rest in calls:
        opts = rest[0] if rest else {}
        m, _ = A.shape
        packed, form = w.packed, opts.get("sme2")
        bias, clamp, ldc = opts.get("bias"), opts.get("clamp"), opts.get("ldc", w.n)
        flags = (1 if bias is not None else 0) | (2 if clamp is not None else 0)
        blob += struct.pack("<12q", m, A.shape[1], w.n, w.bits, int(w.symmetric), w.block, len(name),
                            form.svl_bits if form else 0, form.codes.size if form else 0,
                            form.scales.size if form else 0, ldc, flags) + name.encode()
        blob += np.ascontiguousarray(A, np.float32).tobytes() + packed.codes.tobytes() + packed.scales.tobytes()
        if packed.zeros is not None:
            blob += packed.zeros.tobytes()
        if form:
            blob += form.codes.tobytes() + np.ascontiguousarray(form.scales, np.float32).tobytes()
        for extra in (bias, clamp):
            if extra is not None:
                blob += np.asarray(extra, np.float32).tobytes()
    return bytes(blob)


def unpack_results(data: bytes, calls: Sequence[tuple]) -> list[tuple[int, np.ndarray]]:
    """(status, C as M x ldc, columns past N included) of each call, from qharness's output."""
    at, results = 0, []
    for _, A, w, *rest in calls:
        ldc = (rest[0] if rest else {}).get("ldc", w.n)
        (status,) = struct.unpack_from("<q", data, at)
        size = A.shape[0] * ldc
        results.append((status, np.frombuffer(data, np.float32, size, at + 8).reshape(A.shape[0], ldc)))
        at += 8 + 4 * size
    if at != len(data):
        raise ValueError(f"qharness wrote {len(data)} bytes for {len(calls)} cases, not {at}")
    return results


def validate_library(target: Target, home: Path, kernels: Sequence[QKernelSpec],
                     journal: Journal | None = None) -> dict[str, str]:
    """Run every one of ``kernels`` on :func:`_cases` in a library holding them all (no float
    kernels), through ``qharness`` in the crash-isolated driver, natively or under the
    target's emulator; name -> "validated" or why not.  An SME2 kernel's cases carry the
    weights' SME2 form for the target's vector length, which the library runs it on."""
    lib = link.build_arm_runtime(target, [], [], link.default_params(None, {}, provenance="emulated"), {},
                                 home / "build" / "quant" / target.isa / "lib", cache=build.shared_dir(home) / "runtime")
    work = home / "build" / "quant" / target.isa
    harness = link.build_qharness(target, lib.archive, work / "qharness")
    return _journaled_verdicts(journal, lib.hash, [k.name for k in kernels],
                               lambda todo: _validate_in(target, harness, work, [k for k in kernels if k.name in todo]))


def _validate_in(target: Target, harness: Path, work: Path, kernels: Sequence[QKernelSpec]) -> dict[str, str]:
    """name -> verdict of each of ``kernels``, run by ``harness`` on :func:`_cases`."""
    verdicts: dict[str, str] = {}
    for kind in KINDS:
        mine = [k.name for k in kernels if k.kind == kind]
        if not mine:
            continue
        sme2 = any(qkernel(n).family == "sme2" for n in mine) and target.svl_bits
        calls = [(d, A, w, {"sme2": w.sme2(target.svl_bits)} if sme2 else {}) for d, A, w in _cases(kind)]
        cases = work / f"cases-{kind}.bin"
        with files.atomic_writer(cases, "wb") as f:
            f.write(pack_calls([("", A, w, o) for _, A, w, o in calls]))
        out = work / f"out-{kind}"
        out.mkdir(parents=True, exist_ok=True)
        handler = _Results("validate")
        measure.drive(harness, target, [str(cases), str(out)], mine, handler,
                      measure.default_timeout(target) * 10, None)
        for name in mine:
            ran = handler.results.get(name, {})
            if ran.get("event") != "result":  # crashed or hung: the driver's reason
                verdicts[name] = ran.get("status", "no result while being validated")
                continue
            verdicts[name] = _verdict(unpack_results((out / f"{name}.bin").read_bytes(), calls), calls)
    return verdicts


def run_arm_stage(targets: Mapping[str, Target], home: Path, journal: Journal | None = None) -> QuantStage | None:
    """An Arm library's quantised kernels (:func:`autotune.families.quant_kernels`), each
    validated by :func:`validate_library` with the target the library is built for;
    nothing timed (qgemm.c chooses among them where it runs).  The selection is the
    validated ones, which the library links: an SME2 kernel only with all of its
    family's, which are one object."""
    target = targets.get("sme2") or next((t for isa, t in targets.items() if isa in ARM_ISAS), None)
    kernels = quant_kernels(targets) if target is not None else []
    if not kernels:
        return None
    verdicts = validate_library(target, home, kernels, journal)
    valid = [k for k in kernels if verdicts[k.name] == "validated"]
    if any(k.family == "sme2" and verdicts[k.name] != "validated" for k in kernels):
        valid = [k for k in valid if k.family != "sme2"]
    return QuantStage(verdicts, {}, tuple(k.name for k in valid))


def _verdict(results: Sequence[tuple[int, np.ndarray]], calls: Sequence[tuple]) -> str:
    from .quant import reference_qmatmul, scaling_error_bound

    for (status, C), (description, A, w, _) in zip(results, calls):
        if status != 0:
            return f"not run at {description}: status {status} (the CPU lacks its features?)"
        problem = _check(np.ascontiguousarray(C[:, :w.n]), reference_qmatmul(A, w), scaling_error_bound(A, w))
        if problem:
            return f"wrong answer at {description}: {problem}"
    return "validated"


def _gemv_seconds(seconds: Mapping[int, float], m: int) -> float:
    """The GEMV form's time for m rows: as timed, or m single rows where it was not."""
    return seconds.get(m, m * seconds[1])


def _rows_left(name: str, mine: Mapping[str, Mapping[int, float]], one: str | None) -> dict[int, float]:
    """A block kernel's seconds at each measured M below its height, where it was not
    timed: qgemm.c gives all those rows to the GEMV form (``one``, a row at a time)
    or, an AMX kernel's, to a smaller AMX tile (its tails, which join where they beat
    the GEMV form), whichever is faster.  An AMX 32-row tile ran M = 64 at 562 us
    against 611 for the 16-row one (K = N = 1024, a Xeon VM), and was never chosen
    while M = 16, where it does nothing, counted as not measured."""
    mr, isa = qkernel(name).mr, qkernel(name).isa
    filled = {}
    for m in MEASURE_M:
        if m == 1 or m >= mr or m in mine[name]:
            continue
        ways = [s[m] for n, s in mine.items()
                if isa == x86.AMX_ISA and m in s and 1 < qkernel(n).mr <= m and qkernel(n).isa == isa]
        if one is not None:
            ways.append(_gemv_seconds(mine[one], m))
        if ways:
            filled[m] = min(ways)
    return filled


def select(seconds: Mapping[str, Mapping[int, float]]) -> tuple[str, ...]:
    """Per kind: the fastest mr = 1 kernel at M = 1, the fastest block kernel over M > 1
    (at an M below its height, by what is done with those rows: :func:`_rows_left`).

    An AMX block kernel comes with the fastest AMX tile of each smaller mr that ran here,
    largest first: qgemm.c gives them the rows it leaves (``tail_kernel``) before the
    GEMV form, since a 16- or 32-row tile would leave up to 31 rows to one-row calls.
    A smaller tile joins only where it ran M = 16 faster than the GEMV form did: a tile
    of 2 or 4 rows expands the weights for as few rows as the GEMV and pays a whole
    tile product for them (a 2-vCPU Xeon: AMX 4x32 337 us at M = 16, K = N = 1024,
    against 314 for the zmm GEMV, and 7 x 1000 x 333 ran 0.062 ms on the AMX tails
    against 0.047 on the GEMV).
    """
    chosen = []
    for kind in KINDS:
        mine = {n: s for n, s in seconds.items() if qkernel(n).kind == kind and s}
        gemv = [n for n in mine if qkernel(n).mr == 1 and 1 in mine[n]]
        one = min(gemv, key=lambda n: mine[n][1]) if gemv else None
        mine = {n: {**_rows_left(n, mine, one), **s} for n, s in mine.items()}
        blocks = [n for n in mine if qkernel(n).mr > 1 and all(m in mine[n] for m in MEASURE_M if m > 1)]
        total = {n: sum(mine[n][m] for m in MEASURE_M if m > 1) for n in blocks}
        if blocks:
            best = qkernel(min(blocks, key=total.__getitem__))
            chosen.append(best.name)
            if best.isa == x86.AMX_ISA:
                rows = min(m for m in MEASURE_M if m > 1)
                bar = _gemv_seconds(mine[one], rows) if one else math.inf
                smaller = [n for n in blocks if qkernel(n).isa == best.isa and qkernel(n).mr < best.mr]
                for mr in sorted({qkernel(n).mr for n in smaller}, reverse=True):
                    tile = min((n for n in smaller if qkernel(n).mr == mr), key=total.__getitem__)
                    if mine[tile][rows] < bar:
                        chosen.append(tile)
        if one:
            chosen.append(one)
    return tuple(chosen)


# -- the subprocess: validation cases and timings ----------------------------------

def _as_run(best: Mapping[tuple[str, int], float], rows_timed: Mapping[tuple[str, int], int]
            ) -> dict[tuple[str, int], float]:
    """Seconds per (kernel, M) as qmatmul would take them: a block kernel timed on fewer
    rows than M gets the rows it leaves at its kind's fastest GEMV time (M = 1)."""
    gemv: dict[str, float] = {}
    for (name, m), s in best.items():
        if m == 1 and qkernel(name).mr == 1:
            kind = qkernel(name).kind
            gemv[kind] = min(s, gemv.get(kind, s))
    return {(name, m): s + (m - rows_timed.get((name, m), m)) * gemv.get(qkernel(name).kind, 0.0)
            for (name, m), s in best.items()}


def _cases(kind: str) -> list[tuple[str, np.ndarray, object]]:
    """(description, A, weights) over odd shapes and adversarial scales; seeded."""
    from .quant import quantize_weights

    bits, symmetric = (8, True) if kind == "q8" else (4, kind == "q4s")
    rng = np.random.default_rng(17)
    cases = []
    # 71 rows: passes of 8 row tiles and more for every mr up to 8 (16 and more, where
    # qgemm.c's cover prefetches, for mr up to 4), and a tail; 1024-row blocks: slices of
    # K of one block each, with C loaded back between them.
    for m, k, n, block in ((1, 1, 1, 32), (1, 33, 5, 32), (2, 64, 8, 32), (5, 100, 41, 32), (7, 96, 17, 64),
                           (9, 300, 70, 32), (13, 257, 33, 96), (16, 128, 96, 32), (3, 1000, 40, 128),
                           (71, 300, 70, 32), (40, 2100, 37, 1024)):
        A = rng.standard_normal((m, k)).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        if k > 32:
            W[:32, 0] = 0.0  # a zero block: scale 0
            A[0, :32] = 0.0
        if k > 64 and n > 1:
            W[32:64, 1] *= 1e-39  # subnormal scale
            A[-1, 32:64] *= np.float32(1e-38)
        if n > 2:
            W[:, 2] *= 1e36  # huge products
            A[:, -1] = 3e38
        if m > 3:
            A[3, k // 2] = np.nan
        cases.append((f"M={m} K={k} N={n} block={block}", A, quantize_weights(W, bits, block, symmetric)))
    return cases


def _check(C: np.ndarray, want: np.ndarray, bound: np.ndarray) -> str | None:
    """None when C is within the bound of the reference; else the first bad element."""
    same = (C == want) | (np.isnan(C) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        close = np.abs(C.astype(np.float64) - want) <= bound
    bad = np.argwhere(~(same | close))
    if not len(bad):
        return None
    i, j = bad[0]
    return f"C[{i},{j}] = {C[i, j]!r}, reference {want[i, j]!r}, bound {bound[i, j]!r}"


# -- threads -----------------------------------------------------------------------------

#: GEMV sizes (M = 1, K = N = side, 4-bit weights) the thread sweep climbs, about sqrt(2)
#: apart: 65 thousand to 4 million multiply-adds, where a split starts to pay.
THREAD_SIDES = (256, 362, 512, 724, 1024, 1448, 2048)
#: What at_qmatmul_f32 assumes where nothing was measured (qgemm.c's built-in).
BUILTIN_THREAD_MACS = float(1 << 22)
#: A sample of the thread sweep: calls for at least this long.
THREAD_SAMPLE_S = 1e-3


def thread_macs(crossover: "Crossover", threads: int) -> float:
    """The multiply-adds per thread a measured sweep puts the split at (0: not measured,
    the built-in stays): at_qmatmul_f32 takes t threads from t times it, and the
    sweep found all ``threads`` paying from a GEMV of side^2 multiply-adds."""
    if crossover.source not in ("measured", "beyond"):
        return 0.0
    side = (crossover.flops / 2.0) ** (1.0 / 3.0)
    return float(f"{side * side / threads:.4g}")


def thread_crossover(threads: int, time_gemv: Callable[[int, int], float], busy: bool = False,
                     effort: "Effort | None" = None, advance: Callable[[], None] = lambda: None) -> "Crossover":
    """Where splitting a quantised product over ``threads`` pays: GEMVs of THREAD_SIDES
    timed on one thread and on all, in interleaved rounds (:func:`autotune.crossovers.measure_pair`),
    the threshold where they lose least (:func:`autotune.crossovers.crossing`).

    ``time_gemv(side, threads)`` is seconds per 1 x side x side product on that many
    threads, every product split (:class:`LibraryGemvTimer`).  The model's prior is the
    built-in, 4 Mi multiply-adds a thread, which a Zen 5 VM found 8 times too high.
    On a ``busy`` machine nothing is timed: one thread would win against a split that
    waits for a loaded core.
    """
    from .crossovers import CONFIRM, FULL, MARGIN, Crossover, crossing, measure_pair

    effort = effort or FULL
    model_side = (BUILTIN_THREAD_MACS * threads) ** 0.5
    model = 2.0 * model_side ** 3
    record = dict(param="qthread_macs", dtype="q4s", base="1 thread", alt="all threads", model_flops=model,
                  shape="gemv")
    if busy or threads < 2:
        return Crossover(**record, flops=model, source="busy" if busy else "model")
    points = []
    for side in THREAD_SIDES:
        if points and points[-1].base_s * (side / points[-1].side) ** 2 > effort.max_call_s:
            break
        points.append(measure_pair(side, lambda: time_gemv(side, 1), lambda: time_gemv(side, threads),
                                   MARGIN, effort))
        advance()
        if len(points) >= CONFIRM and all(p.verdict() == "alt" for p in points[-CONFIRM:]):
            break
    flops, source = crossing(points, prior=model)
    return Crossover(**record, flops=float(f"{flops if flops is not None else model:.4g}"), source=source,
                     points=tuple(points))


class LibraryGemvTimer:
    """``time_gemv`` for :func:`thread_crossover` through a loaded library (ctypes): one
    4-bit 1 x side x side product per size, each sample calls for THREAD_SAMPLE_S or
    more, less what a ctypes call costs by itself (about 3 us, the time of a 1 x 362 x 362
    product: left in, it would draw both sides' times together and hide where the C
    library's split pays).  :meth:`close` gives the library back its own thread count
    and threshold."""

    def __init__(self, lib: object, seed: int = 0) -> None:
        from .runtime import qapi

        qapi.prototypes(lib)
        self.lib, self._rng = lib, np.random.default_rng(seed)
        self._operands: dict[int, tuple] = {}
        self._calls: dict[int, int] = {}
        self._overhead: float | None = None

    def _sample(self, side: int, threads: int) -> float:
        from .quant import quantize_weights
        from .runtime import qapi

        if side not in self._operands:
            W = self._rng.standard_normal((side, side)).astype(np.float32)
            self._operands[side] = (self._rng.standard_normal((1, side)).astype(np.float32),
                                    quantize_weights(W, 4, 32, True))
        A, w = self._operands[side]
        self.lib.at_set_num_threads(threads)
        self.lib.at_qthreads_set(1.0)  # every product split over the threads asked for
        qapi.call(self.lib, A, w, None, None)  # the warm-up, and the threads woken
        calls = self._calls.get(side, 1)
        while True:
            start = time.perf_counter()
            for _ in range(calls):
                qapi.call(self.lib, A, w, None, None)
            elapsed = time.perf_counter() - start
            if elapsed >= THREAD_SAMPLE_S:
                self._calls[side] = calls
                return elapsed / calls
            calls *= 2

    def __call__(self, side: int, threads: int) -> float:
        if self._overhead is None:  # a 1 x 32 x 32 product: the call, next to no work
            self._overhead = min(self._sample(32, 1) for _ in range(5))
        return max(self._sample(side, threads) - self._overhead, 1e-3 * self._overhead)

    def close(self) -> None:
        self.lib.at_set_num_threads(0)
        self.lib.at_qthreads_set(0.0)


def _seconds(fn: Callable[..., object], *args: object) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _main(argv: Sequence[str]) -> int:
    import ctypes

    from .quant import reference_qmatmul, scaling_error_bound, quantize_weights
    from .runtime import qapi

    command, library, names = argv[0], argv[1], argv[2:]
    lib = ctypes.CDLL(library)
    qapi.prototypes(lib)
    if command == "measure":  # kernels are chosen by their one-thread speed, as the targets are stated
        lib.at_set_num_threads(1)
    cases: dict[str, list] = {}
    calls: dict[tuple[str, int], Callable[[], float]] = {}
    # qmatmul runs a block kernel on whole groups of its rows and the GEMV form on the
    # rest, so where the kinds' GEMV kernels are timed too a block kernel is timed on
    # its whole rows and the rest priced at the fastest GEMV's one-row time
    # (_as_run).  Timed on all M, a 6-row tile at M = 16 and 64 ran its last 4 rows
    # in the portable code, 10-20x the 4x32 tile's time (Zen 5), and never won.
    with_gemv = {qkernel(n).kind for n in names if qkernel(n).mr == 1}
    rows_timed: dict[tuple[str, int], int] = {}
    for name in names:
        kind = qkernel(name).kind
        if command == "validate":
            print(json.dumps({"event": "start", "kernel": name}), flush=True)
            if kind not in cases:
                cases[kind] = [(d, A, w, reference_qmatmul(A, w), scaling_error_bound(A, w))
                               for d, A, w in _cases(kind)]
            status = "validated"
            for description, A, w, want, bound in cases[kind]:
                try:
                    problem = _check(qapi.call(lib, A, w, None, None, name), want, bound)
                except qapi.QuantizationError as refused:  # the CPU or the OS lacks its features
                    status = f"not run at {description}: {refused}"
                    break
                if problem:
                    status = f"wrong answer at {description}: {problem}"
                    break
            print(json.dumps({"event": "result", "kernel": name, "status": status}), flush=True)
        else:
            if kind not in cases:
                rng = np.random.default_rng(5)
                W = rng.standard_normal((MEASURE_KN, MEASURE_KN)).astype(np.float32)
                bits, symmetric = (8, True) if kind == "q8" else (4, kind == "q4s")
                cases[kind] = [quantize_weights(W, bits, 32, symmetric),
                               {m: rng.standard_normal((m, MEASURE_KN)).astype(np.float32) for m in MEASURE_M}]
            w, inputs = cases[kind]
            mr = qkernel(name).mr
            for m, A in inputs.items():
                if m > 1 and mr == 1 and m > 16:
                    continue  # a GEMV kernel covers M > 1 only as a row-at-a-time fallback
                if mr > m and kind in with_gemv:
                    continue  # qmatmul gives these rows to the GEMV form
                rows = m - m % mr if kind in with_gemv else m
                A = A[:rows]
                rows_timed[(name, m)] = rows
                qapi.call(lib, A, w, None, None, name)  # the warm-up
                calls[(name, m)] = (lambda A=A, w=w, name=name: _seconds(qapi.call, lib, A, w, None, None, name))
    if command == "measure":
        # In rounds of every kernel: timed one after another, one install put q4a's 4x16
        # 30% ahead of q4s's (the same loop with less to do) and chose q4s's 2x8.  So
        # every kernel's events come at the end (measure.drive takes a kernel's events
        # until the next one starts), and a crash before them is placed by the caller.
        best = _as_run(best_of_rounds(calls, MEASURE_ROUNDS), rows_timed)
        for name in names:
            print(json.dumps({"event": "start", "kernel": name}), flush=True)
            seconds = {m: s for (n, m), s in best.items() if n == name}
            print(json.dumps({"event": "result", "kernel": name, "status": "measured", "seconds": seconds}),
                  flush=True)
    print(json.dumps({"event": "done"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
