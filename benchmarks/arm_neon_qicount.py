"""Guest instructions of one quantised matmul under QEMU: autotune's NEON kernels against KleidiAI's.

The same format on both sides: f32 activations quantised to int8 per block of 32
at call time, symmetric 4-bit weights in blocks of 32 (KleidiAI's ``qsi8d32p x
qsi4c32p``; its scales are f16, autotune's f32).  **These are instruction counts
under emulation, not timings**: deterministic, and for kernels made of
``sdot``/``smmla`` and their loads a proxy of issue slots, no more.

::

    python -m benchmarks.arm_neon_qicount --kleidiai /path/to/kleidiai [MxNxK ...]

``arm_neon_qicount.c`` (beside this file) is linked statically with an aarch64
``libautotune.a`` built here by :func:`autotune.link.build_arm_runtime` (no float
kernels; every NEON quantised kernel) and with KleidiAI's LHS quantise-and-pack,
RHS pack and two matmul kernels compiled from the given checkout, all under
``$AUTOTUNE_HOME/benchmarks/neon_qicount`` (never inside the project).  QEMU runs it
on ``-cpu max`` (dotprod and i8mm) with ``-one-insn-per-tb -d exec,nochain``;
:func:`benchmarks.arm_icount.tally` counts the instructions between the markers,
per symbol.  Phase "cached" (the second of two identical calls) is reported.

Per shape: autotune's own choice (i8mm 4x8 blocks and the dotprod 1x16 GEMV on
this CPU), the dotprod 4x8 block forced by name, KleidiAI's dotprod kernel
(``qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod`` for M = 1, which computes one row only,
``qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod`` above) and ``qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm``
(each its LHS quantise-and-pack and matmul; RHS packing happens once, before the
markers, as autotune packs when W is quantised).  Every result is checked: autotune's
against :func:`autotune.quant.reference_qmatmul` within
:func:`autotune.quant.scaling_error_bound`, KleidiAI's against the f32 product of A
and the dequantised W (relative Frobenius error, its f16 scales differ).
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

from autotune import home as at_home, quant, qsuite
from autotune.host import HostInfo
from autotune.link import build_arm_runtime, default_params
from autotune.toolchain import arm_target

from .arm_icount import Count, counted_run

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "arm_neon_qicount.c"
SHAPES = ((1, 4096, 4096), (16, 1024, 1024), (64, 512, 512), (33, 1000, 512))
KAI_DIR = "kai/ukernels/matmul/"
KAI_SOURCES = (
    KAI_DIR + "pack/kai_lhs_quant_pack_qsi8d32p_f32.c",
    KAI_DIR + "pack/kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0.c",
    KAI_DIR + "matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod.c",
    KAI_DIR + "matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod_asm.S",
    KAI_DIR + "matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod.c",
    KAI_DIR + "matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod_asm.S",
    KAI_DIR + "matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm.c",
    KAI_DIR + "matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm_asm.S",
)
#: KleidiAI's relative error against the f32 product of the dequantised W may not exceed this.
KAI_TOLERANCE = 0.05
CALLS = ("autotune", "autotune:at_q4s_dotprod_4x8", "kai-dotprod", "kai-i8mm")
X86 = HostInfo(arch="x86_64", os="linux", cpu="x86-64", features=())


def build(work: Path, kleidiai: Path | None) -> tuple[tuple[str, ...], Path]:
    """(QEMU runner on -cpu max, the counting program)."""
    target = arm_target("neon", X86)
    lib = build_arm_runtime(target, [], [], default_params(None, {}, provenance="emulated"), {}, work / "lib")
    exe = work / ("arm_neon_qicount_kai" if kleidiai else "arm_neon_qicount")
    argv = [*target.cc, "-O2", "-std=c11", "-march=armv8.6-a+dotprod+i8mm", f"-I{lib.header.parent}", str(DRIVER)]
    if kleidiai is not None:
        argv += ["-DAT_KLEIDIAI", f"-I{kleidiai}", *[str(kleidiai / s) for s in KAI_SOURCES]]
    argv += [str(lib.archive), "-lm", *target.ldflags, "-o", str(exe)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"building the counting program failed:\n{' '.join(argv)}\n{done.stderr[-3000:]}")
    return target.runner, exe


def kleidiai_native(w: quant.QuantizedWeights) -> bytes:
    """``w`` (symmetric 4 bits, K a multiple of 32) in KleidiAI's qsu4c32s16s0: per column and
    block an f16 scale, then per 32 values of K 16 bytes, byte i holding k = i (low) and i + 16."""
    u = (w.signed_codes() + 8).astype(np.uint8)  # [N, Kp], zero point 8
    n, kp = u.shape
    subs = u.reshape(n, w.blocks, w.block // 32, 2, 16)
    packed = (subs[:, :, :, 0] | (subs[:, :, :, 1] << 4)).reshape(n, w.blocks, w.block // 2)
    scales = w.block_scales().astype(np.float16).view(np.uint8).reshape(n, w.blocks, 2)
    return np.concatenate([scales, packed], axis=2).tobytes()


def _counted(array: np.ndarray) -> bytes:
    data = np.ascontiguousarray(array).tobytes()
    return struct.pack("<q", len(data)) + data


def unlogged(exe: Path) -> list[str]:
    """QEMU ``-dfilter`` ranges for everything but KleidiAI's RHS packing (outside the
    markers, yet logged: for 4096 x 4096 weights a billion lines nobody counts)."""
    nm = shutil.which("llvm-nm-19") or shutil.which("llvm-nm")
    if nm is None:
        return []
    listing = subprocess.run([nm, "-S", "--defined-only", str(exe)], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3].startswith("kai_run_rhs_pack_"):
            start, size = int(parts[0], 16), int(parts[1], 16)
            return ["-dfilter", f"0x0..0x{start - 1:x},0x{start + size:x}..0xffffffffffff"]
    return []


def write_input(path: Path, A: np.ndarray, w: quant.QuantizedWeights) -> None:
    """The program's input: the shape, A, autotune's and KleidiAI's forms of ``w``."""
    native = np.frombuffer(kleidiai_native(w), np.uint8)
    path.write_bytes(struct.pack("<4q", A.shape[0], w.n, w.k, w.block) + np.ascontiguousarray(A).tobytes()
                     + _counted(w.packed.codes) + _counted(w.packed.scales) + _counted(native))


def count(runner: tuple[str, ...], exe: Path, inp: Path, who: str, out: Path) -> Count:
    """Instructions per phase and symbol of one run (KleidiAI's RHS packing left out of the log)."""
    return counted_run(runner, [str(exe), str(inp), who, str(out)], Count(), unlogged(exe))


def run(args: argparse.Namespace) -> list[dict]:
    work = Path(args.home or at_home.home()) / "benchmarks" / "neon_qicount"
    work.mkdir(parents=True, exist_ok=True)
    kai = Path(args.kleidiai).resolve() if args.kleidiai else None
    if kai is not None and not all((kai / s).exists() for s in KAI_SOURCES):
        raise SystemExit(f"{kai} is not a KleidiAI checkout with the qsi8d32p x qsi4c32p NEON kernels")
    runner, exe = build(work, kai)
    rng = np.random.default_rng(3)
    rows = []
    for m, n, k in args.shapes:
        A = rng.standard_normal((m, k)).astype(np.float32)
        w = quant.quantize_weights(rng.standard_normal((k, n)).astype(np.float32), 4, 32, True)
        inp, out = work / "in.bin", work / "out.bin"
        write_input(inp, A, w)
        want, bound = quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64)
        f32 = A.astype(np.float64) @ w.dequantize().astype(np.float64)
        row: dict = {"shape": f"{m}x{n}x{k}"}
        # The forced 4x8 block leaves rows below 4 to the portable code: not worth counting.
        calls = [c for c in CALLS if (kai is not None or not c.startswith("kai")) and (m >= 4 or ":" not in c)]
        for who in calls:
            counted = count(runner, exe, inp, who, out)
            C = np.fromfile(out, np.float32).reshape(m, n)
            if who.startswith("autotune"):
                problem = qsuite._check(C, want, bound)
                ok = problem is None
            else:
                error = float(np.linalg.norm(C - f32) / np.linalg.norm(f32))
                ok = error <= KAI_TOLERANCE
            top = counted.symbols.get("cached")
            row[who] = {"cached": counted.phases.get("cached"), "ok": ok,
                        "top": top.most_common(args.top) if top else []}
        rows.append(row)
        _print_row(row)
    return rows


def _print_row(row: dict) -> None:
    cells = []
    for who, r in row.items():
        if who == "shape":
            continue
        cells.append(f"{who} {r['cached']:,}{'' if r['ok'] else ' WRONG'}")
    base = row.get("autotune", {}).get("cached")
    for peer in ("kai-dotprod", "kai-i8mm"):
        if peer in row and base:
            cells.append(f"autotune/{peer} {base / row[peer]['cached']:.2f}x")
    print(f"{row['shape']:>16}  " + "  ".join(cells))
    top = row["autotune"]["top"]
    total = row["autotune"]["cached"] or 1
    print(" " * 18 + "autotune: " + ", ".join(f"{s} {100 * c / total:.0f}%" for s, c in top))
    sys.stdout.flush()


def _shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    if k % 32:
        raise argparse.ArgumentTypeError("KleidiAI's kernels need K a multiple of 32")
    return m, n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.arm_neon_qicount",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", type=_shape, help="MxNxK (K a multiple of 32)")
    parser.add_argument("--home", help="where to build (default: $AUTOTUNE_HOME)")
    parser.add_argument("--kleidiai", help="a KleidiAI source checkout to compare with (built beside, not copied)")
    parser.add_argument("--top", type=int, default=3, help="symbols to show per shape")
    args = parser.parse_args(argv)
    args.shapes = args.shapes or list(SHAPES)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
