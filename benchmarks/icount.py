"""Guest instructions under QEMU: what every kind of :mod:`benchmarks.arm_icount` shares.

* counting: a program brackets each measured call with ``icount_begin(phase)`` and
  ``icount_end(phase)`` (``icount.h``); ``qemu-aarch64 -one-insn-per-tb -d exec,nochain``
  logs one line per executed guest instruction with its symbol, and :func:`tally`
  counts the lines between the markers per phase and symbol;
* building: a C program linked statically with an aarch64 ``libautotune.a`` and,
  given a KleidiAI source checkout, with the KleidiAI sources it compares against,
  compiled from that checkout (never copied into the project);
* KleidiAI's 4-bit weight format (:func:`kleidiai_native`), which both quantised
  kinds hand its RHS packer;
* shapes, written ``MxNxK`` (C is M x N) for every kind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from autotune import quant
from autotune.toolchain import Target

HERE = Path(__file__).resolve().parent
PHASES = {1: "first", 2: "cached"}


@dataclass
class Count:
    """Instructions of one program run, per phase and per symbol."""

    phases: dict[str, int] = field(default_factory=dict)
    symbols: dict[str, Counter] = field(default_factory=dict)
    check: dict = field(default_factory=dict)


def tally(lines: Iterable[bytes], result: Count) -> Count:
    """Count QEMU ``-d exec`` lines between the markers, per phase and symbol.

    A line ends with the symbol of its instruction (``Trace 0: 0x... [.../pc/...]
    name``).  Phase n starts at the n-th ``icount_begin`` and ends at the next
    ``icount_end``; the markers' own instructions are not counted."""
    phase, counter = 0, Counter()
    for line in lines:
        symbol = line.rsplit(b"] ", 1)[-1].strip()
        if symbol == b"icount_begin":
            phase = len(result.phases) + 1
        elif symbol == b"icount_end":
            if phase:
                result.phases[PHASES.get(phase, str(phase))] = sum(counter.values())
                result.symbols[PHASES.get(phase, str(phase))] = Counter({k.decode(): v for k, v in counter.items()})
            phase, counter = 0, Counter()
        elif phase:
            counter[symbol] += 1
    return result


def runner(target: Target, cpu: str | None = None) -> list[str]:
    """``target``'s QEMU command, on CPU model ``cpu`` instead of its own when given."""
    argv = list(target.runner)
    if cpu is not None:
        argv[argv.index("-cpu") + 1] = cpu
    return argv


def _one_thread(env: Mapping[str, str] | None) -> dict[str, str]:
    """The guest's environment with the library on one thread: a pool's workers
    would run inside the counted window (30,956 then 30,618 instructions for two
    runs of one 128^3 product, against 27,045 every time on one thread)."""
    return {**(os.environ if env is None else env), "AUTOTUNE_NUM_THREADS": "1"}


def counted_run(runner: Sequence[str], program: Sequence[str], result: Count, qemu_flags: Sequence[str] = (),
                env: Mapping[str, str] | None = None) -> Count:
    """Run ``program`` under ``runner`` (a qemu-aarch64 command) logging every executed
    instruction, and tally the log into ``result`` by phase and symbol.  The log goes
    through a FIFO, so a run of millions of instructions never lands on disk."""
    with tempfile.TemporaryDirectory(prefix="at-icount-") as tmp:
        fifo = Path(tmp) / "log"
        os.mkfifo(fifo)
        argv = [*runner, "-one-insn-per-tb", "-d", "exec,nochain", *qemu_flags, "-D", str(fifo), *program]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_one_thread(env))
        with open(fifo, "rb") as log:
            tally(log, result)
        err = proc.communicate()[1]
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {err[-2000:]!r}")
    return result


def checked_count(runner: Sequence[str], program: Sequence[str], env: Mapping[str, str] | None = None,
                  qemu_flags: Sequence[str] = ()) -> Count:
    """For a program taking ``count|check`` last: check its result under plain QEMU
    (the program prints a JSON line with ``wrong``, exits 1 when wrong), then count
    it.  Checking apart keeps a reference product of M N K multiply-adds out of
    the instruction log, where it would cost far more than the calls measured."""
    checked = subprocess.run([*runner, *program, "check"], capture_output=True, text=True, env=_one_thread(env))
    if checked.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(program)} failed ({checked.returncode}): {checked.stderr[-2000:]}")
    lines = [ln for ln in checked.stdout.splitlines() if ln.startswith("{")]
    result = Count(check=json.loads(lines[-1]) if lines else {"wrong": -1})
    return counted_run(runner, [*program, "count"], result, qemu_flags, env)


def unlogged(exe: Path, prefix: str = "kai_run_rhs_pack_") -> list[str]:
    """QEMU ``-dfilter`` ranges for everything but the functions named ``prefix...``:
    KleidiAI's RHS packing (one packer per kind of weights a program compares) runs
    before the markers, yet would be logged, for 4096 x 4096 weights a billion lines
    nobody counts.  Empty (log everything) without llvm-nm."""
    nm = shutil.which("llvm-nm-19") or shutil.which("llvm-nm")
    if nm is None:
        return []
    listing = subprocess.run([nm, "-S", "--defined-only", str(exe)], capture_output=True, text=True).stdout
    symbols = [line.split() for line in listing.splitlines()]
    skipped = sorted({(int(p[0], 16), int(p[0], 16) + int(p[1], 16)) for p in symbols
                      if len(p) == 4 and p[3].startswith(prefix)})
    if not skipped:
        return []
    ranges, start = [], 0
    for begin, end in skipped:
        if begin > start:
            ranges.append(f"0x{start:x}..0x{begin - 1:x}")
        start = max(start, end)
    ranges.append(f"0x{start:x}..0xffffffffffff")
    return ["-dfilter", ",".join(ranges)]


def kleidiai_checkout(path: str | None, sources: Sequence[str], what: str) -> Path | None:
    """The KleidiAI checkout at ``path`` (None without one), refused unless it holds ``sources``."""
    if path is None:
        return None
    checkout = Path(path).resolve()
    missing = [s for s in sources if not (checkout / s).exists()]
    if missing:
        raise SystemExit(f"{checkout} is not a KleidiAI checkout with {what} (no {missing[0]})")
    return checkout


def build(target: Target, driver: Path, out: Path, march: str, includes: Sequence[Path], archive: Path,
          kleidiai: Path | None = None, sources: Sequence[str] = ()) -> Path:
    """Link ``driver`` (a C file beside this module) statically with ``archive`` (an aarch64
    libautotune.a) and, with a KleidiAI checkout, with its ``sources`` and ``-DAT_KLEIDIAI``."""
    argv = [*target.cc, "-O2", "-std=c11", march, *[f"-I{d}" for d in (*includes, HERE)], str(driver)]
    if kleidiai is not None:
        argv += ["-DAT_KLEIDIAI", f"-I{kleidiai}", *[str(kleidiai / s) for s in sources]]
    argv += [str(archive), "-pthread", "-lm", *target.ldflags, "-o", str(out)]
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"building the counting program failed:\n{' '.join(argv)}\n{done.stderr[-3000:]}")
    return out


def kleidiai_native(w: quant.QuantizedWeights) -> bytes:
    """``w`` (symmetric 4 bits, K a multiple of 32) in KleidiAI's qsu4c32s16s0: per column and
    block an f16 scale, then per 32 values of K 16 bytes, byte i holding k = i (low) and i + 16."""
    u = (w.signed_codes() + 8).astype(np.uint8)  # [N, Kp], zero point 8
    n, kp = u.shape
    subs = u.reshape(n, w.blocks, w.block // 32, 2, 16)
    packed = (subs[:, :, :, 0] | (subs[:, :, :, 1] << 4)).reshape(n, w.blocks, w.block // 2)
    scales = w.block_scales().astype(np.float16).view(np.uint8).reshape(n, w.blocks, 2)
    return np.concatenate([scales, packed], axis=2).tobytes()


def parse_shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` (or ``M,N,K``) as (M, N, K)."""
    m, n, k = (int(x) for x in text.lower().replace(",", "x").split("x"))
    return m, n, k


def geomean(values: Sequence[float]) -> float:
    """The geometric mean: of ratios, the one that treats 2x and 0.5x alike."""
    return math.exp(sum(map(math.log, values)) / len(values))


def top(symbols: Sequence[tuple[str, int]], total: int | None) -> str:
    """``symbol share%, ...``: where a phase's instructions went."""
    return ", ".join(f"{s} {100 * n / (total or 1):.0f}%" for s, n in symbols)
