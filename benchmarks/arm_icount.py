"""Guest instructions of one SGEMM call under QEMU: autotune's aarch64 library against KleidiAI.

Without SME2 hardware, the measure of an SME2 GEMM here is the number of guest
instructions it executes under ``qemu-aarch64``: deterministic, repeatable, and for
an outer-product kernel a fair proxy of its issue slots.  **These are instruction
counts under emulation, not timings.**

::

    AUTOTUNE_HOME=/tmp/h autotune install --target sme2 --quick
    AUTOTUNE_HOME=/tmp/h python -m benchmarks.arm_icount [--kleidiai /path/to/kleidiai]
    AUTOTUNE_HOME=/tmp/h python -m benchmarks.arm_icount --isa neon [--kleidiai ...]
    python -m autotune.benchmarks.arm_icount ...          # the same from an installed autotune

How: ``arm_icount.c`` (beside this file) is linked statically with the installed
``lib/sme2/libautotune.a`` and, when a KleidiAI source checkout is given, with
KleidiAI's f32 SME2 packers and its 2VLx2VL ``mopa`` kernel compiled from that
checkout (built under ``$AUTOTUNE_HOME/benchmarks/icount``, never inside the
project).  The program makes the same row-major NN call twice (fp32, one thread,
alpha 1, beta 0), each between two marker functions; QEMU runs it with
``-one-insn-per-tb -d exec,nochain``, which logs one line per executed guest
instruction with the symbol it belongs to, and this module counts the lines
between the markers per symbol.  Phase "first" includes planning the shape,
"cached" is the same call again.  KleidiAI's count is its two packs and the
matmul: a BLAS call must pack both operands.  Both results are checked against a
double-precision reference; a wrong one is reported, never counted.

Prints, per shape: autotune's first and cached calls and their difference (what
planning a new shape costs), instructions per FLOP,
KleidiAI's count and the ratio cached / KleidiAI, measured in this run (or "not
measured" without ``--kleidiai``), and the symbols taking most of the cached call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from autotune import home as at_home
from autotune.host import detect
from autotune.toolchain import arm_target

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "arm_icount.c"
#: The shapes of issue 15's table (M, N, K).
SHAPES = ((256, 256, 256), (128, 128, 128), (64, 64, 64), (8, 128, 128), (1, 512, 512), (100, 10, 1000),
          (33, 65, 129), (512, 512, 64))
#: KleidiAI's sources the comparison needs (paths inside a KleidiAI checkout).
KAI_SOURCES = (
    "kai/ukernels/matmul/pack/kai_lhs_pack_f32p2vlx1_f32_sme.c",
    "kai/ukernels/matmul/pack/kai_lhs_pack_f32p2vlx1_f32_sme_asm.S",
    "kai/ukernels/matmul/pack/kai_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme.c",
    "kai/ukernels/matmul/pack/kai_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme_asm.S",
    "kai/ukernels/matmul/matmul_clamp_f32_f32p_f32p/kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa.c",
    "kai/ukernels/matmul/matmul_clamp_f32_f32p_f32p/kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa_asm.S",
    "kai/kai_common_sme_asm.S",
    "kai/ukernels/matmul/pack/kai_rhs_pack_kxn_x32p16x1b_x32_x32_neon.c",
    "kai/ukernels/matmul/pack/kai_rhs_pack_kxn_x32p16x1b_x32_x32_neon_asm.S",
    "kai/ukernels/matmul/matmul_clamp_f32_f32_f32p/kai_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla.c",
    "kai/ukernels/matmul/matmul_clamp_f32_f32_f32p/kai_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla_asm.S",
)
#: QEMU's CPU model per counted instruction set (None: the SME2 target's own).
#: Without SME the library's SME2 kernels are unusable (cpu.c) and its plans use NEON.
CPUS = {"sme2": None, "neon": "max,sme=off"}
PHASES = {1: "first", 2: "cached"}


@dataclass
class Count:
    """Instructions of one program run, per phase and per symbol."""

    phases: dict[str, int] = field(default_factory=dict)
    symbols: dict[str, Counter] = field(default_factory=dict)
    check: dict = field(default_factory=dict)


def build_driver(out: Path, library: Path, kleidiai: Path | None, svl_bits: int) -> Path:
    """Link arm_icount.c with libautotune.a (and KleidiAI's sources when given)."""
    target = arm_target("sme2", detect(), svl_bits)
    include = at_home.kernels_src() / "include"
    argv = [*target.cc, "-O2", "-std=c11", "-march=armv9-a+sme2", "-I", str(include), str(DRIVER)]
    if kleidiai is not None:
        argv += ["-DAT_KLEIDIAI", "-I", str(kleidiai), *[str(kleidiai / s) for s in KAI_SOURCES]]
    argv += [str(library), "-lm", *target.ldflags, "-o", str(out)]
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"building the counting driver failed:\n{' '.join(argv)}\n{done.stderr[-3000:]}")
    return out


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


def qemu_runner(svl_bits: int, cpu: str | None = None) -> list[str]:
    """The SME2 target's QEMU command, on CPU model `cpu` instead of its own when given."""
    runner = list(arm_target("sme2", detect(), svl_bits).runner)
    if cpu is not None:
        runner[runner.index("-cpu") + 1] = cpu
    return runner


def count(program: Path, library: str, shape: tuple[int, int, int], svl_bits: int, cpu: str | None = None) -> Count:
    """Check the call's result under plain QEMU, then run it again with one
    instruction per translation block and count the executed instructions
    between each phase's markers, per symbol.

    QEMU's log line for an executed block is ``Trace 0: host [.../pc/...] symbol``;
    with ``-one-insn-per-tb`` and ``nochain`` there is one per guest instruction.
    The log goes through a FIFO, so a first call of millions of instructions
    never lands on disk."""
    runner = qemu_runner(svl_bits, cpu)
    args = [str(program), library, *map(str, shape)]
    checked = subprocess.run([*runner, *args, "check"], capture_output=True, text=True)
    if checked.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(args)} failed ({checked.returncode}): {checked.stderr[-2000:]}")
    lines = [ln for ln in checked.stdout.splitlines() if ln.startswith("{")]
    return counted_run(runner, [*args, "count"], Count(check=json.loads(lines[-1]) if lines else {"wrong": -1}))


def counted_run(runner: Sequence[str], program: Sequence[str], result: Count,
                qemu_flags: Sequence[str] = ()) -> Count:
    """Run ``program`` under ``runner`` (a qemu-aarch64 command) logging every executed
    instruction, and tally the log into ``result`` by phase and symbol.  The log goes
    through a FIFO, so a run of millions of instructions never lands on disk."""
    with tempfile.TemporaryDirectory(prefix="at-icount-") as tmp:
        fifo = Path(tmp) / "log"
        os.mkfifo(fifo)
        argv = [*runner, "-one-insn-per-tb", "-d", "exec,nochain", *qemu_flags, "-D", str(fifo), *program]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(fifo, "rb") as log:
            tally(log, result)
        err = proc.communicate()[1]
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {err[-2000:]!r}")
    return result


def _fmt(n: float | None) -> str:
    return "not measured" if n is None else f"{n:,.0f}"


def run(args: argparse.Namespace) -> list[dict]:
    home = Path(args.home or at_home.home())
    library = Path(args.library) if args.library else home / "lib" / "sme2" / "libautotune.a"
    if not library.exists():
        raise SystemExit(f"{library} not found: run `autotune install --target sme2` with AUTOTUNE_HOME={home}")
    kai = Path(args.kleidiai).resolve() if args.kleidiai else None
    if kai is not None and not all((kai / s).exists() for s in KAI_SOURCES):
        raise SystemExit(f"{kai} is not a KleidiAI checkout with the f32 SME2 kernels ({KAI_SOURCES[-2]})")
    program = build_driver(home / "benchmarks" / "icount" / f"arm_icount_{args.svl}", library, kai, args.svl)
    rows = []
    for shape in args.shapes:
        cpu = CPUS[args.isa]
        at = count(program, "autotune", shape, args.svl, cpu)
        peer = "kleidiai-neon" if args.isa == "neon" else "kleidiai"
        kc = count(program, peer, shape, args.svl, cpu) if kai is not None else None
        flops = 2.0 * math.prod(shape)
        cached = at.phases.get("cached")
        row = {
            "shape": "x".join(map(str, shape)),
            "isa": args.isa,
            "autotune_first": at.phases.get("first"),
            "autotune_cached": cached,
            # What planning the shape costs (issue 15: under a million for 256^3).
            "autotune_extra": at.phases["first"] - cached if cached and at.phases.get("first") else None,
            "autotune_per_flop": cached / flops if cached else None,
            "autotune_wrong": at.check.get("wrong"),
            "kleidiai": kc.phases.get("cached") if kc else None,
            "kleidiai_per_flop": kc.phases["cached"] / flops if kc and kc.phases.get("cached") else None,
            "kleidiai_wrong": kc.check.get("wrong") if kc else None,
            "top": at.symbols.get("cached", Counter()).most_common(args.top),
        }
        row["ratio"] = cached / row["kleidiai"] if cached and row["kleidiai"] else None
        rows.append(row)
        _print_row(row)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if ratios:
        print(f"geometric mean of cached / KleidiAI over {len(ratios)} shapes: "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x")
    return rows


def _print_row(r: dict) -> None:
    wrong = " WRONG" if r["autotune_wrong"] else ""
    kwrong = " WRONG" if r["kleidiai_wrong"] else ""
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "not measured"
    kpf = f" ({r['kleidiai_per_flop']:.4f}/flop)" if r.get("kleidiai_per_flop") else ""
    print(f"{r['shape']:>14}  first {_fmt(r['autotune_first']):>12}  cached {_fmt(r['autotune_cached']):>10}{wrong}"
          f"  first - cached {_fmt(r.get('autotune_extra')):>10}"
          f"  ({r['autotune_per_flop']:.4f}/flop)  KleidiAI {_fmt(r['kleidiai']):>10}{kpf}{kwrong}  ratio {ratio}")
    total = r["autotune_cached"] or 1
    print("                " + ", ".join(f"{s} {100 * n / total:.0f}%" for s, n in r["top"]))
    sys.stdout.flush()


def _shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().replace(",", "x").split("x"))
    return m, n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.arm_icount", description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", type=_shape, help="MxNxK (default: issue 15's table)")
    parser.add_argument("--home", help="AUTOTUNE_HOME with an sme2 install (default: $AUTOTUNE_HOME)")
    parser.add_argument("--library", help="a libautotune.a for aarch64 to count instead of the installed one")
    parser.add_argument("--kleidiai", help="a KleidiAI source checkout to compare with (built beside, not copied)")
    parser.add_argument("--isa", choices=sorted(CPUS), default="sme2",
                        help="count the library on an SME2 CPU model (default) or without SME (its NEON family), "
                             "against KleidiAI's path for that instruction set")
    parser.add_argument("--svl", type=int, default=512, help="streaming vector length in bits (default 512)")
    parser.add_argument("--top", type=int, default=4, help="symbols listed per shape")
    parser.add_argument("--json", metavar="PATH", help="also write the rows to PATH as JSON")
    args = parser.parse_args(argv)
    args.shapes = args.shapes or list(SHAPES)
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
