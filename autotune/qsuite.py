"""The quantised kernels' install stage: build, validate, measure, select.

For a target with a quantised generator (avx2, :mod:`autotune.codegen.quant_x86`)
install compiles the family into one object, links it with the runtime's
``qgemm.c`` into a validation library and runs this module as a subprocess
(``python -m autotune.qsuite validate|measure <library> <kernels>``): a kernel
that crashes kills the subprocess, not the installer, and is rejected.  Every
kernel is checked against :func:`autotune.quant.reference_qmatmul` over odd
shapes (M = 1, N below a tile, K not a multiple of the block, blocks of 64) and
adversarial scales (zero, subnormal, huge, NaN in A) within
:func:`autotune.quant.scaling_error_bound`; the valid ones are timed on
M = 1, 16, 64 with K = N = 1024.  Per kind of weights the fastest GEMV kernel
(mr = 1) and the fastest block kernel are selected; the table records them
(``settings["quant"]``) and the link stage regenerates their object from the names.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import build, contract
from .codegen import quant_x86
from .families import qkernel, quant_kernels, x86
from .qformat import KINDS
from .specs import QKernelSpec
from .home import kernels_src
from .suite import best_of_rounds
from .toolchain import Target

#: The object's name in the build cache.
UNIT = "at_qkernels"
#: Shapes (M) timed at install, with K = N = MEASURE_KN, best of MEASURE_ROUNDS.
MEASURE_M = (1, 16, 64)
MEASURE_KN = 1024
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


def kernel_compiler(target: Target) -> Target:
    """``target`` compiling with clang when one is installed, else as it is.

    GCC 12 keeps several int16 partial sums of the 4x8 and 2x16 forms on the stack
    (81 and 73 stack operands in their loops, even with ``-fno-tree-reassoc``;
    clang 19: 26 and 28); in the same runs here clang's objects made the
    64 x 4096 x 4096 product 1.3-1.8x faster.  The object links into the GCC-built
    library through the same C ABI.
    """
    if "clang" in target.compiler_id.lower():
        return target
    for name in ("clang-19", "clang-18", "clang"):
        path = shutil.which(name)
        if path:
            return replace(target, cc=(path,))
    return target


def compile_kernels(target: Target, kernels: Sequence[QKernelSpec], home: Path | None = None,
                    emulate_vnni: bool = False) -> build.ObjectResult:
    """One object with ``kernels`` (content-hashed: the same set compiles once), by :func:`kernel_compiler`.

    With GCC, ``-fno-tree-reassoc``: it otherwise rebalances each int16 accumulation
    into a tree of partial products that outnumber the 16 ymm registers, and spills them.
    ``emulate_vnni``: VNNI kernels with vpdpbusd in AVX2 arithmetic (tests on CPUs without it).
    """
    source = quant_x86.generate(kernels, emulate_vnni)
    name = f"{UNIT}_{target.isa}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    compiler = kernel_compiler(target)
    extra = () if "clang" in compiler.compiler_id.lower() else ("-fno-tree-reassoc",)
    return build._compile(compiler, source, name, "c", (*target.cflags, *extra), home)


def link_library(target: Target, kernels: Sequence[QKernelSpec], obj: Path, out: Path,
                 features: Sequence[str] | None = None) -> Path:
    """A shared library with qgemm.c, its error text, thread pool and ``kernels`` registered: for this stage only.

    ``features``: what the registry says every kernel needs instead of its own (tests that emulate VNNI).
    """
    from .link import _run, runtime_cflags

    src = kernels_src()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".qlink-", dir=out.parent) as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "at_qtable.c").write_text(contract.qregistry(kernels, features))
        cflags = [*runtime_cflags(target), f"-I{src / 'include'}", f"-I{src / 'runtime'}"]
        built = tmp / out.name
        _run([*target.cc, *cflags, "-shared", "-o", str(built), str(src / "runtime" / "qgemm.c"),
              str(src / "runtime" / "error.c"), str(src / "runtime" / "pool.c"), str(src / "runtime" / "features.c"), str(tmp / "at_qtable.c"),
              str(obj), "-lm"], target)
        built.replace(out)
    return out


def kernel_isas(target: Target) -> tuple[str, ...]:
    """The kernel ISAs install builds for ``target``: AVX2, and the VNNI forms the host has.

    The host's features are autotune.host.detect()'s, after the ISA cap (AUTOTUNE_ISA):
    a capped install never builds, validates or selects a kernel above its cap, and
    install only selects kernels it ran (validated and timed) on this CPU.
    """
    from .host import detect

    if target.isa not in quant_x86.TARGETS or target.emulated:
        return ()
    return x86.quant_isas(detect().features)


def _subprocess(command: str, library: Path, names: Sequence[str]) -> dict[str, dict]:
    """Run this module on ``names``; a crash rejects the kernel it was running and the rest go on."""
    results: dict[str, dict] = {}
    todo = list(names)
    while todo:
        try:
            proc = subprocess.run([sys.executable, "-m", "autotune.qsuite", command, str(library), *todo],
                                  capture_output=True, text=True, timeout=TIMEOUT)
            out, code = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out, code = exc.stdout or "", "timeout"
            out = out.decode() if isinstance(out, bytes) else out
        started = None
        for line in out.splitlines():
            event = json.loads(line)
            if event["event"] == "start":
                started = event["kernel"]
            else:
                results[event["kernel"]] = event
                started = None
        if code != 0 and started is None and not any(n in results for n in todo):
            raise RuntimeError(f"autotune.qsuite {command} failed: {proc.stderr.strip()[-2000:]}")
        if started is not None:
            results[started] = {"kernel": started, "status": f"crashed (exit {code}) while being {command}d"}
        todo = [n for n in todo if n not in results]
    return results


def run_stage(target: Target, home: Path, patterns: Sequence[str] = (), quick: bool = False) -> QuantStage | None:
    """Build, validate and time the family of ``target``; None when it has no quantised kernels.

    ``patterns`` (install's ``--only``) keep the kernels whose names match one.
    """
    family = [k for isa in kernel_isas(target) for k in x86.quant_family(isa, quick=quick)
              if not patterns or any(fnmatch.fnmatchcase(k.name, p) for p in patterns)]
    if not family:
        return None
    obj = compile_kernels(target, family, home)
    if not obj.ok:
        return QuantStage({k.name: "compile error: " + (obj.error or "").splitlines()[0] for k in family}, {}, ())
    library = link_library(target, family, obj.path, build.build_dir(target, home) / "quant" / f"lib{obj.hash[:16]}.so")
    names = [k.name for k in family]
    verdicts = {n: r["status"] for n, r in _subprocess("validate", library, names).items()}
    valid = [n for n in names if verdicts.get(n) == "validated"]
    timings = _subprocess("measure", library, valid) if valid else {}
    seconds = {n: {int(m): float(s) for m, s in r.get("seconds", {}).items()} for n, r in timings.items()}
    return QuantStage(verdicts, seconds, select(seconds))


def select(seconds: Mapping[str, Mapping[int, float]]) -> tuple[str, ...]:
    """Per kind: the fastest mr = 1 kernel at M = 1, the fastest block kernel over M > 1."""
    chosen = []
    for kind in KINDS:
        mine = {n: s for n, s in seconds.items() if qkernel(n).kind == kind and s}
        gemv = [n for n in mine if qkernel(n).mr == 1 and 1 in mine[n]]
        blocks = [n for n in mine if qkernel(n).mr > 1 and all(m in mine[n] for m in MEASURE_M if m > 1)]
        if blocks:
            chosen.append(min(blocks, key=lambda n: sum(mine[n][m] for m in MEASURE_M if m > 1)))
        if gemv:
            chosen.append(min(gemv, key=lambda n: mine[n][1]))
    return tuple(chosen)


def library_parts(settings: Mapping, targets: Mapping[str, Target], home: Path) -> tuple[str, list[Path]] | None:
    """(at_qtable.c, objects) for the kernels a table selected, None without any."""
    names = (settings.get("quant") or {}).get("selected") or []
    target = next((t for isa, t in targets.items() if isa in quant_x86.TARGETS), None)
    if target is None:
        return None
    kernels = quant_kernels([target.isa], names)
    if not kernels:
        return None
    obj = compile_kernels(target, kernels, home)
    if not obj.ok:
        raise RuntimeError(f"the selected quantised kernels no longer compile: {obj.error}")
    return contract.qregistry(kernels), [obj.path]


# -- the subprocess: validation cases and timings ----------------------------------

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
    for name in names:
        print(json.dumps({"event": "start", "kernel": name}), flush=True)
        kind = qkernel(name).kind
        if command == "validate":
            if kind not in cases:
                cases[kind] = [(d, A, w, reference_qmatmul(A, w), scaling_error_bound(A, w))
                               for d, A, w in _cases(kind)]
            status = "validated"
            for description, A, w, want, bound in cases[kind]:
                problem = _check(qapi.call(lib, A, w, None, None, name), want, bound)
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
            for m, A in inputs.items():
                if m > 1 and qkernel(name).mr == 1 and m > 16:
                    continue  # a GEMV kernel covers M > 1 only as a row-at-a-time fallback
                qapi.call(lib, A, w, None, None, name)  # the warm-up, and where a crash shows
                calls[(name, m)] = (lambda A=A, w=w, name=name: _seconds(qapi.call, lib, A, w, None, None, name))
    if command == "measure":
        # In rounds of every kernel: timed one after another, one install put q4a's 4x16
        # 30% ahead of q4s's (the same loop with less to do) and chose q4s's 2x8.
        best = best_of_rounds(calls, MEASURE_ROUNDS,
                              lambda key: print(json.dumps({"event": "start", "kernel": key[0]}), flush=True))
        for name in names:
            seconds = {m: s for (n, m), s in best.items() if n == name}
            print(json.dumps({"event": "result", "kernel": name, "status": "measured", "seconds": seconds}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
