"""Guest instructions of one quantised product under QEMU: autotune's SME2 4-bit kernels against KleidiAI's.

``C[M, N] = A[M, K] (f32) x W[K, N]``, W symmetric 4-bit in blocks of 32.  As in
:mod:`benchmarks.arm_icount` (whose counter this reuses), **these are instruction
counts under emulation, not timings**: ``qemu-aarch64 -one-insn-per-tb -d exec,nochain``
logs one line per executed guest instruction and the lines between two marker
calls are counted per symbol.

::

    python -m benchmarks.arm_qicount --kleidiai /path/to/kleidiai [--svl 512] [MxKxN ...]

Three programs' counts per shape: autotune's kernels called directly ("autotune"),
the same product through the library's ``at_qmatmul_f32`` ("library": its own
choice, the weights carrying their SME2 form, so the wiring's overhead shows) and
KleidiAI's.

What is counted (``arm_qicount.c`` beside this file): autotune's A quantisation and
packing (``at_qsme2_quantize_a``) and its kernels (the 1VLx4VL ``smopa`` block over
whole row tiles, the 1x4VL ``sdot`` GEMV for M = 1 and for a last row tile of one
row), against KleidiAI's LHS quantise-and-pack (``kai_run_lhs_quant_pack_qsi8d32p_f32_neon``)
and its kernel for the same format (``..._1x4vl_sme2_sdot`` for M = 1, else
``..._1vlx4vl_sme2_mopa``).  W's packing is excluded on both sides (done once per
model).  Both libraries are built from source beside the project (the SME2
target's libautotune.a, which holds the generated kernels, by
:func:`autotune.link.build_arm_runtime`, and KleidiAI's checkout, under
``$AUTOTUNE_HOME/benchmarks/qicount``), and every result is checked exactly
against the reference first (the operands are
chosen so that every quantisation is exact); a wrong one is reported, never counted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from autotune import home as at_home, quant
from autotune.codegen import quant_sme2
from autotune.host import detect
from autotune.link import build_arm_runtime, default_params
from autotune.toolchain import arm_target

from .arm_icount import count

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "arm_qicount.c"
#: The shapes of issue 17's SME2 comparison, M x K x N.
SHAPES = ((1, 4096, 4096), (16, 1024, 1024), (64, 1024, 1024), (33, 512, 96))
KAI_SOURCES = (
    "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/"
    "kai_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa.c",
    "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/"
    "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot.c",
    "kai/ukernels/matmul/pack/kai_lhs_quant_pack_qsi8d32p_f32_neon.c",
    "kai/ukernels/matmul/pack/kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon.c",
    "kai/kai_common_sme_asm.S",
)
BLOCK = 32


def build(out: Path, kleidiai: Path, svl_bits: int) -> Path:
    """The counting program: arm_qicount.c, KleidiAI's sources and the SME2 target's
    libautotune.a (no float kernels), which holds the generated SME2 kernels the
    program also calls directly."""
    target = arm_target("sme2", detect(), svl_bits)
    gen = out.parent / "generated"
    gen.mkdir(parents=True, exist_ok=True)
    header = quant_sme2.header_source()
    (gen / header.filename).write_text(header.text)
    lib = build_arm_runtime(target, [], [], default_params(None, {}, provenance="emulated"), {},
                            out.parent / "lib", with_extension=False, cache=out.parent / "cache")
    argv = [*target.cc, "-O2", "-std=c11", "-march=armv9-a+sme2", "-I", str(gen), "-I", str(kleidiai),
            "-I", str(lib.header.parent), str(DRIVER), *[str(kleidiai / s) for s in KAI_SOURCES],
            str(lib.archive), "-pthread", "-lm", *target.ldflags, "-o", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"building the counting program failed:\n{' '.join(argv)}\n{done.stderr[-3000:]}")
    return out


def operands(m: int, k: int, n: int, seed: int = 17) -> tuple[np.ndarray, np.ndarray]:
    """A [M, K] of integers with max |a| = 127 in every block (so sa = 1 exactly, also
    in f16) and signed 4-bit codes [K, N] in [-7, 7] (with scale 1)."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-127, 128, (m, k)).astype(np.float32)
    A[:, ::BLOCK] = 127
    codes = rng.integers(-7, 8, (k, n))
    codes[::BLOCK] = 7  # each block's max |w| = 7: scale exactly 1
    return A, codes


def data_file(path: Path, m: int, k: int, n: int, svl_bits: int) -> None:
    A, codes = operands(m, k, n)
    w = quant.quantize_weights(codes.astype(np.float32), block=BLOCK)
    assert (w.scales == 1).all() and (w.signed_codes()[:, :k].T == codes).all()
    ours = quant.pack_sme2(w, svl_bits)
    # KleidiAI's nxk qsu4c32s16s0 input: per column n and block, its f16 scale then 16
    # bytes, byte j holding k0 + j (low nibble) and k0 + j + 16 (high), codes + 8.
    u = (codes.T + 8).astype(np.uint8).reshape(n, k // BLOCK, 2, BLOCK // 2)
    nibbles = (u[:, :, 0, :] | (u[:, :, 1, :] << 4)).astype(np.uint8)
    scale = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    native = np.concatenate([np.broadcast_to(scale, (n, k // BLOCK, 2)), nibbles], axis=2)
    want = (A.astype(np.float64) @ codes.astype(np.float64)).astype(np.float32)
    header = np.array([svl_bits // 32, m, n, k, ours.codes.size, ours.scales.size, native.size], np.int64)
    # Then the library's qpanel8 arrays (the weights' own format; the SME2 form rides beside it).
    panels = w.packed
    tail = np.array([panels.codes.size, panels.scales.size], np.int64)
    path.write_bytes(b"".join(x.tobytes() for x in (header, A, ours.codes, ours.scales, native, want,
                                                    tail, panels.codes, panels.scales)))


def run(args: argparse.Namespace) -> list[dict]:
    home = Path(args.home or at_home.home())
    kai = Path(args.kleidiai).resolve()
    if not all((kai / s).exists() for s in KAI_SOURCES):
        raise SystemExit(f"{kai} is not a KleidiAI checkout with the qsi8d32p x qsi4c32p SME2 kernels")
    work = home / "benchmarks" / "qicount"
    program = build(work / f"arm_qicount_{args.svl}", kai, args.svl)
    rows = []
    for m, k, n in args.shapes:
        if k % BLOCK:
            raise SystemExit(f"K = {k}: KleidiAI's kernels need whole blocks of {BLOCK}")
        data = work / f"data_{m}x{k}x{n}_{args.svl}.bin"
        data_file(data, m, k, n, args.svl)
        os.environ["AT_QICOUNT_DATA"] = str(data)  # the program's operands, read outside the markers
        ours = count(program, "autotune", (m, n, k), args.svl)
        lib = count(program, "library", (m, n, k), args.svl)
        theirs = count(program, "kleidiai", (m, n, k), args.svl)
        row = {"shape": f"{m}x{k}x{n}", "svl": args.svl,
               "autotune": ours.phases.get("cached"), "autotune_wrong": ours.check.get("wrong"),
               "library": lib.phases.get("cached"), "library_wrong": lib.check.get("wrong"),
               "kleidiai": theirs.phases.get("cached"), "kleidiai_wrong": theirs.check.get("wrong"),
               "autotune_top": ours.symbols.get("cached", {}).most_common(3),
               "library_top": lib.symbols.get("cached", {}).most_common(4),
               "kleidiai_top": theirs.symbols.get("cached", {}).most_common(3)}
        row["ratio"] = row["autotune"] / row["kleidiai"] if row["autotune"] and row["kleidiai"] else None
        row["library_ratio"] = row["library"] / row["kleidiai"] if row["library"] and row["kleidiai"] else None
        rows.append(row)
        _print_row(row)
    for key, who in (("ratio", "autotune"), ("library_ratio", "library")):
        ratios = [r[key] for r in rows if r[key]]
        if ratios:
            print(f"geometric mean of {who} / KleidiAI over {len(ratios)} shapes at SVL {args.svl}: "
                  f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def _print_row(r: dict) -> None:
    def fmt(n):
        return "not counted" if n is None else f"{n:,}"
    def wrong(side):
        return " WRONG" if r[f"{side}_wrong"] else ""
    ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
    lratio = f"{r['library_ratio']:.3f}" if r["library_ratio"] else "-"
    print(f"{r['shape']:>14} SVL {r['svl']}: autotune {fmt(r['autotune']):>12}{wrong('autotune')}  "
          f"library {fmt(r['library']):>12}{wrong('library')}  KleidiAI {fmt(r['kleidiai']):>12}{wrong('kleidiai')}"
          f"  autotune/KleidiAI {ratio}  library/KleidiAI {lratio}")
    for side in ("autotune", "library", "kleidiai"):
        total = r[side] or 1
        print(f"{'':16}{side}: " + ", ".join(f"{s} {100 * c / total:.0f}%" for s, c in r[f"{side}_top"]))
    sys.stdout.flush()


def _shape(text: str) -> tuple[int, int, int]:
    m, k, n = (int(x) for x in text.lower().replace(",", "x").split("x"))
    return m, k, n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.arm_qicount", description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", type=_shape, help="MxKxN (default: issue 17's four)")
    parser.add_argument("--kleidiai", required=True, help="a KleidiAI source checkout (built beside, not copied)")
    parser.add_argument("--home", help="where to build (default: $AUTOTUNE_HOME)")
    parser.add_argument("--svl", type=int, default=512, help="streaming vector length in bits (default 512)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows to PATH as JSON")
    args = parser.parse_args(argv)
    args.shapes = args.shapes or list(SHAPES)
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
