"""Guest instructions of one GEMM call under QEMU: autotune's aarch64 code against KleidiAI's.

Without Arm hardware, the measure of an aarch64 GEMM here is the number of guest
instructions it executes under ``qemu-aarch64``: for kernels made of outer products,
``sdot``/``smmla`` and their loads a fair proxy of issue slots, no more.  **These are
instruction counts under emulation, not timings.**  A count repeats exactly for the
same program, arguments and environment (their sizes move the guest's stack, and with
it what malloc and a name lookup execute: tens to hundreds of instructions) when the
library runs one thread: QEMU logs every guest thread, so with the pool's workers
(``AUTOTUNE_NUM_THREADS`` unset) a float count varies from run to run.

::

    AUTOTUNE_HOME=/tmp/h autotune install --target sme2 --quick
    AUTOTUNE_HOME=/tmp/h python -m benchmarks.arm_icount [--kleidiai DIR] [MxNxK ...]     # float, SME2
    AUTOTUNE_HOME=/tmp/h python -m benchmarks.arm_icount --isa neon [--kleidiai DIR]      # float, no SME
    python -m benchmarks.arm_icount --quantised --kleidiai DIR [--svl 512] [--bits 4,8] [--q8-block 32,k] [MxNxK ...]
                                                                                       # 4- and 8-bit, SME2
    python -m benchmarks.arm_icount --quantised --isa neon [--kleidiai DIR] [MxNxK ...]  # 4-bit, NEON
    python -m autotune.benchmarks.arm_icount ...          # the same from an installed autotune

Every kind takes shapes as ``MxNxK`` (C is M x N) and builds its program (a C file
beside this module, linked statically with an aarch64 ``libautotune.a`` and, given a
KleidiAI source checkout, with KleidiAI's sources for the same path compiled from it)
under ``$AUTOTUNE_HOME/benchmarks``, never inside the project.  The program makes
the same call twice, each between two marker functions; :mod:`benchmarks.icount`
counts the instructions between the markers per symbol.  Phase "first" of autotune's
float call includes planning the shape; "cached" is the same call again, the one
compared.  Every result is checked first; a wrong one is reported, never counted.

**float** (``icount_float.c``): ``cblas_sgemm`` of the installed ``lib/sme2/libautotune.a``
(fp32, row-major NN, one thread, alpha 1, beta 0), checked against a double-precision
reference.  KleidiAI's count is its two packs and the matmul (a BLAS call must pack
both operands): ``lhs_pack_f32p2vlx1`` + ``rhs_pack_kxn_f32p2vlx1biasf32`` + the 2VLx2VL
``mopa`` kernel; with ``--isa neon`` QEMU's CPU has no SME, the library's plans use its
NEON family, and KleidiAI's path is ``rhs_pack_kxn_x32p16x1b`` + the 6x16 ``mla`` kernel.
Prints per shape: the first and cached calls and their difference (what planning a
new shape costs), instructions per FLOP, KleidiAI's count, the ratio cached / KleidiAI
and the symbols taking most of the cached call.

**--quantised** (``C = A (f32) x W``, W symmetric 4-bit in blocks of 32, A quantised to
int8 per block at call time; KleidiAI's ``qsi8d32p x qsi4c32p``, its scales f16; on SME2
also 8-bit W, below).  W's packing is outside the markers on both sides (done once per model).

* SME2 (``icount_sme2_quant.c``, ``--kleidiai`` required): autotune's A quantisation and
  packing (``at_qsme2_quantize_a``) and its kernels called directly (the 1VLx4VL
  ``smopa`` block over whole row tiles, the 1x4VL ``sdot`` GEMV for M = 1 and a last
  tile of one row), the same product through the library's ``at_qmatmul_f32``
  ("library": its own choice, so the wiring's overhead shows), and KleidiAI's
  ``lhs_quant_pack_qsi8d32p_f32_neon`` + ``..._1x4vl_sme2_sdot`` (M = 1) or
  ``..._1vlx4vl_sme2_mopa``.  The library is built here with the SME2 target's
  generated kernels; the operands quantise exactly, so every C must equal the
  reference exactly.  ``--bits 8`` (the default counts both): 8-bit W (one scale per
  column) against KleidiAI's 8-bit counterpart, ``lhs_quant_pack_qai8dxp_f32`` +
  ``qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot`` (M = 1) or ``qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa``.
  KleidiAI has no 8-bit SME2 kernel for A quantised per block: qai8dx quantises each row
  of A once (asymmetric int8, one scale and zero point per row), so its kernel scales
  once per row and panel where autotune's format scales once per block of A.  Each
  8-bit shape is counted at each ``--q8-block`` (A's block for autotune: 32, the
  4-bit format's, and ``k``, one block per row as qai8dx has; K up to 4096).
  KleidiAI's 8-bit C is checked against the exact one by relative (Frobenius) error
  (``KAI_TOLERANCE``): its per-row scale (max - min) / 255 is not exact.
* NEON (``icount_neon_quant.c``, on ``-cpu max``: dotprod and i8mm): the library's own
  choice, the dotprod 4x8 block forced by name, KleidiAI's dotprod kernel
  (``qsi8d32p1x4_qsi4c32p4x4_1x4`` for M = 1, which computes one row only,
  ``qsi8d32p4x4_qsi4c32p4x4_16x4`` above) and ``qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm``.
  autotune's C is checked against :func:`autotune.quant.reference_qmatmul` within
  :func:`autotune.quant.scaling_error_bound`, KleidiAI's against the f32 product of A
  and the dequantised W (relative Frobenius error: its f16 scales differ).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
from collections import Counter
from pathlib import Path

import numpy as np

from autotune import home as at_home, quant, qsuite
from autotune.codegen import quant_sme2
from autotune.host import HostInfo, detect
from autotune.link import build_arm_runtime, default_params
from autotune.toolchain import arm_target

from . import icount
from .icount import Count, checked_count, counted_run, geomean, kleidiai_checkout, kleidiai_native, unlogged

HERE = Path(__file__).resolve().parent
KAI_MATMUL = "kai/ukernels/matmul/"
QUANT_DIR = KAI_MATMUL + "matmul_clamp_f32_qsi8d32p_qsi4c32p/"
QUANT8_DIR = KAI_MATMUL + "matmul_clamp_f32_qai8dxp_qsi8cxp/"
BLOCK = 32

#: The shapes each kind counts by default, MxNxK: issue 15's table, issue 17's SME2 comparison, and
#: the NEON comparison's.
SHAPES = {
    "float": ((256, 256, 256), (128, 128, 128), (64, 64, 64), (8, 128, 128), (1, 512, 512), (100, 10, 1000),
              (33, 65, 129), (512, 512, 64)),
    # ... and the prefill shapes, M = 64 to 1024 (K = N = 1024: M = 1024 logs some 30
    # million instructions per call and side under QEMU, a few minutes per shape).
    "sme2-quant": ((1, 4096, 4096), (16, 1024, 1024), (64, 1024, 1024), (33, 96, 512), (256, 1024, 1024),
                   (1024, 1024, 1024)),
    "neon-quant": ((1, 4096, 4096), (16, 1024, 1024), (64, 512, 512), (33, 1000, 512)),
}
#: KleidiAI's sources each kind compiles (paths inside a checkout).
KAI_SOURCES = {
    "float": (
        KAI_MATMUL + "pack/kai_lhs_pack_f32p2vlx1_f32_sme.c",
        KAI_MATMUL + "pack/kai_lhs_pack_f32p2vlx1_f32_sme_asm.S",
        KAI_MATMUL + "pack/kai_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme.c",
        KAI_MATMUL + "pack/kai_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme_asm.S",
        KAI_MATMUL + "matmul_clamp_f32_f32p_f32p/kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa.c",
        KAI_MATMUL + "matmul_clamp_f32_f32p_f32p/kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa_asm.S",
        "kai/kai_common_sme_asm.S",
        KAI_MATMUL + "pack/kai_rhs_pack_kxn_x32p16x1b_x32_x32_neon.c",
        KAI_MATMUL + "pack/kai_rhs_pack_kxn_x32p16x1b_x32_x32_neon_asm.S",
        KAI_MATMUL + "matmul_clamp_f32_f32_f32p/kai_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla.c",
        KAI_MATMUL + "matmul_clamp_f32_f32_f32p/kai_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla_asm.S",
    ),
    "sme2-quant": (
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa.c",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot.c",
        KAI_MATMUL + "pack/kai_lhs_quant_pack_qsi8d32p_f32_neon.c",
        KAI_MATMUL + "pack/kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon.c",
        "kai/kai_common_sme_asm.S",
        QUANT8_DIR + "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa.c",
        QUANT8_DIR + "kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa_asm.S",
        QUANT8_DIR + "kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot.c",
        QUANT8_DIR + "kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot_asm.S",
        KAI_MATMUL + "pack/kai_lhs_quant_pack_qai8dxp_f32.c",
        KAI_MATMUL + "pack/kai_rhs_pack_nxk_qsi8cxp_qsi8cx_neon.c",
    ),
    "neon-quant": (
        KAI_MATMUL + "pack/kai_lhs_quant_pack_qsi8d32p_f32.c",
        KAI_MATMUL + "pack/kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0.c",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod.c",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod_asm.S",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod.c",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod_asm.S",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm.c",
        QUANT_DIR + "kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm_asm.S",
    ),
}


def _work(args: argparse.Namespace) -> Path:
    """Where the kind ``args`` selects builds.  A count can depend on the length of the program's path
    (64x64x64 float: 6,110, 6,231 or 6,341 instructions cached, the difference in
    malloc, for the same binary at paths of 52, 61 or 19 characters), so these are
    the directories and program names the published counts were measured with: the
    same ``--home`` gives the same numbers."""
    return Path(args.home or at_home.home()) / "benchmarks" / {"float": "icount", "sme2-quant": "qicount",
                                                               "neon-quant": "neon_qicount"}[kind(args)]


# --------------------------------------------------------------------------- float

#: QEMU's CPU model per counted instruction set (None: the SME2 target's own).
#: Without SME the library's SME2 kernels are unusable (cpu.c) and its plans use NEON.
CPUS = {"sme2": None, "neon": "max,sme=off"}


def run_float(args: argparse.Namespace) -> list[dict]:
    """The float kind: the installed SME2 library's cblas_sgemm (or ``--library``)."""
    home = Path(args.home or at_home.home())
    library = Path(args.library) if args.library else home / "lib" / "sme2" / "libautotune.a"
    if not library.exists():
        raise SystemExit(f"{library} not found: run `autotune install --target sme2` with AUTOTUNE_HOME={home}")
    kai = kleidiai_checkout(args.kleidiai, KAI_SOURCES["float"], "the f32 SME2 and NEON kernels")
    target = arm_target("sme2", detect(), args.svl)
    program = icount.build(target, HERE / "icount_float.c", _work(args) / f"arm_icount_{args.svl}",
                           "-march=armv9-a+sme2", [at_home.kernels_src() / "include"], library, kai, KAI_SOURCES["float"])
    qemu = icount.runner(target, CPUS[args.isa])
    peer = "kleidiai-neon" if args.isa == "neon" else "kleidiai"
    rows = []
    for shape in args.shapes:
        at = checked_count(qemu, [str(program), "autotune", *map(str, shape)])
        kc = checked_count(qemu, [str(program), peer, *map(str, shape)]) if kai is not None else None
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
            "top": at.symbols.get("cached", Counter()).most_common(args.top or 4),
        }
        row["ratio"] = cached / row["kleidiai"] if cached and row["kleidiai"] else None
        rows.append(row)
        _print_float(row)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    _write_json(args, rows)
    if ratios:
        print(f"geometric mean of cached / KleidiAI over {len(ratios)} shapes: {geomean(ratios):.2f}x")
    return rows


def _fmt(n: float | None) -> str:
    return "not measured" if n is None else f"{n:,.0f}"


def _print_float(r: dict) -> None:
    wrong = " WRONG" if r["autotune_wrong"] else ""
    kwrong = " WRONG" if r["kleidiai_wrong"] else ""
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "not measured"
    kpf = f" ({r['kleidiai_per_flop']:.4f}/flop)" if r.get("kleidiai_per_flop") else ""
    print(f"{r['shape']:>14}  first {_fmt(r['autotune_first']):>12}  cached {_fmt(r['autotune_cached']):>10}{wrong}"
          f"  first - cached {_fmt(r.get('autotune_extra')):>10}"
          f"  ({r['autotune_per_flop']:.4f}/flop)  KleidiAI {_fmt(r['kleidiai']):>10}{kpf}{kwrong}  ratio {ratio}")
    print("                " + icount.top(r["top"], r["autotune_cached"]), flush=True)


# --------------------------------------------------------------------------- quantised, SME2



def build_sme2_quant(work: Path, kleidiai: Path, svl_bits: int) -> Path:
    """The SME2 quantised program: icount_sme2_quant.c, KleidiAI's sources and the SME2
    target's libautotune.a (no float kernels), which holds the generated SME2 kernels
    the program also calls directly."""
    target = arm_target("sme2", detect(), svl_bits)
    gen = work / "generated"
    gen.mkdir(parents=True, exist_ok=True)
    header = quant_sme2.header_source()
    (gen / header.filename).write_text(header.text)
    lib = build_arm_runtime(target, [], [], default_params(None, {}, provenance="emulated"), {},
                            work / "lib", with_extension=False, cache=work / "cache")
    return icount.build(target, HERE / "icount_sme2_quant.c", work / f"arm_qicount_{svl_bits}",
                        "-march=armv9-a+sme2", [gen, lib.header.parent], lib.archive, kleidiai, KAI_SOURCES["sme2-quant"])


def exact_operands(m: int, n: int, k: int, seed: int = 17, bits: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A [M, K] of integers with max |a| = 127 in every block of 32 (so sa = 1 exactly, also
    in f16, for any block a multiple of 32) and signed codes [K, N] with scale 1: 4 bits in
    [-7, 7], 8 bits in [-127, 127]."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-127, 128, (m, k)).astype(np.float32)
    A[:, ::BLOCK] = 127
    top = 7 if bits == 4 else 127
    codes = rng.integers(-top, top + 1, (k, n))
    codes[::BLOCK] = top  # each block's (8 bits: each column's) max |w| = top: scale exactly 1
    return A, codes


def sme2_quant_data(path: Path, m: int, n: int, k: int, svl_bits: int, bits: int = 4, block: int = BLOCK) -> None:
    """The SME2 program's operands (its header describes the layout), exact by construction."""
    A, codes = exact_operands(m, n, k, bits=bits)
    w = quant.quantize_weights(codes.astype(np.float32), bits=bits, block=block)
    assert (w.scales == 1).all() and (w.signed_codes()[:, :k].T == codes).all()
    ours = quant.pack_sme2(w, svl_bits)
    if bits == 8:  # KleidiAI's nxk int8 codes, then the f32 scale of each column
        native = np.frombuffer(np.ascontiguousarray(w.codes[:, :k]).tobytes()
                               + w.scales[:, 0].astype(np.float32).tobytes(), np.uint8)
    else:
        native = np.frombuffer(kleidiai_native(w), np.uint8)
    want = (A.astype(np.float64) @ codes.astype(np.float64)).astype(np.float32)
    header = np.array([bits, block, svl_bits // 32, m, n, k, ours.codes.size, ours.scales.size, native.size],
                      np.int64)
    # Then the library's qpanel8 arrays (the weights' own format; the SME2 form rides beside it).
    panels = w.packed
    tail = np.array([panels.codes.size, panels.scales.size], np.int64)
    path.write_bytes(b"".join(x.tobytes() for x in (header, A, ours.codes, ours.scales, native, want,
                                                    tail, panels.codes, panels.scales)))


def sme2_quant_runs(args: argparse.Namespace, k: int) -> list[tuple[int, int]]:
    """(bits, A's block) of every count of a shape with this K: 4 bits at 32, 8 bits at each
    ``--q8-block`` (``k``: one block per row) that K allows."""
    runs = [(4, BLOCK)] if 4 in args.bits else []
    for block in args.q8_block if 8 in args.bits else ():
        b = k if block == "k" else int(block)
        if b <= quant.MAX_BLOCK and k % b == 0 and (8, b) not in runs:
            runs.append((8, b))
    return runs


def run_sme2_quant(args: argparse.Namespace) -> list[dict]:
    """The quantised SME2 kind: autotune's kernels, its library, KleidiAI's kernels."""
    kai = kleidiai_checkout(args.kleidiai, KAI_SOURCES["sme2-quant"], "the qsi8d32p x qsi4c32p and "
                                                                       "qai8dxp x qsi8cxp SME2 kernels")
    if kai is None:
        raise SystemExit("--quantised --isa sme2 compares with KleidiAI: give --kleidiai DIR")
    work = _work(args)
    program = build_sme2_quant(work, kai, args.svl)
    qemu = icount.runner(arm_target("sme2", detect(), args.svl))
    quiet = unlogged(program)
    n_top = args.top or 3
    rows = []
    for m, n, k in args.shapes:
        theirs_by_bits: dict[int, Count] = {}
        for bits, block in sme2_quant_runs(args, k):
            data = work / f"data_{m}x{n}x{k}_{args.svl}_q{bits}b{block}.bin"
            sme2_quant_data(data, m, n, k, args.svl, bits, block)
            env = {**os.environ, "AT_QICOUNT_DATA": str(data)}  # the operands, read outside the markers

            def count(who: str) -> Count:
                return checked_count(qemu, [str(program), who, str(m), str(n), str(k)], env, quiet)

            ours, lib = count("autotune"), count("library")
            # KleidiAI's count does not depend on autotune's block: once per shape and bits.
            if bits not in theirs_by_bits:
                theirs_by_bits[bits] = count("kleidiai")
            theirs = theirs_by_bits[bits]
            row = {"shape": f"{m}x{n}x{k}", "svl": args.svl, "bits": bits, "block": block,
                   "autotune": ours.phases.get("cached"), "autotune_wrong": ours.check.get("wrong"),
                   "library": lib.phases.get("cached"), "library_wrong": lib.check.get("wrong"),
                   "kleidiai": theirs.phases.get("cached"), "kleidiai_wrong": theirs.check.get("wrong"),
                   "kleidiai_relative_error": theirs.check.get("relative_error"),
                   "autotune_top": ours.symbols.get("cached", Counter()).most_common(n_top),
                   # One more for the library: at_qmatmul_f32's own frame takes a place.
                   "library_top": lib.symbols.get("cached", Counter()).most_common(n_top + 1),
                   "kleidiai_top": theirs.symbols.get("cached", Counter()).most_common(n_top)}
            row["ratio"] = row["autotune"] / row["kleidiai"] if row["autotune"] and row["kleidiai"] else None
            row["library_ratio"] = row["library"] / row["kleidiai"] if row["library"] and row["kleidiai"] else None
            rows.append(row)
            _print_sme2_quant(row)
    # Per kind of count: 4 bits, and 8 bits at each block asked (k: the K of each shape).
    groups: dict[str, list[dict]] = {}
    for r in rows:
        k = int(r["shape"].split("x")[2])
        label = "q4" if r["bits"] == 4 else "q8 block k" if r["block"] == k else f"q8 block {r['block']}"
        groups.setdefault(label, []).append(r)
    for label, mine in groups.items():
        for key, who in (("ratio", "autotune"), ("library_ratio", "library")):
            ratios = [r[key] for r in mine if r[key]]
            if ratios:
                print(f"geometric mean of {who} / KleidiAI over {len(ratios)} shapes, {label}, SVL {args.svl}: "
                      f"{geomean(ratios):.3f}")
    _write_json(args, rows)
    return rows


def _print_sme2_quant(r: dict) -> None:
    def fmt(n: int | None) -> str:
        return "not counted" if n is None else f"{n:,}"

    def wrong(side: str) -> str:
        return " WRONG" if r[f"{side}_wrong"] else ""

    ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
    lratio = f"{r['library_ratio']:.3f}" if r["library_ratio"] else "-"
    what = f"q{r['bits']} block {r['block']}"
    print(f"{r['shape']:>14} SVL {r['svl']} {what:>13}: autotune {fmt(r['autotune']):>12}{wrong('autotune')}  "
          f"library {fmt(r['library']):>12}{wrong('library')}  KleidiAI {fmt(r['kleidiai']):>12}{wrong('kleidiai')}"
          f"  autotune/KleidiAI {ratio}  library/KleidiAI {lratio}")
    for side in ("autotune", "library", "kleidiai"):
        print(f"{'':16}{side}: " + icount.top(r[f"{side}_top"], r[side]), flush=True)


# --------------------------------------------------------------------------- quantised, NEON

#: KleidiAI's relative error against the f32 product of the dequantised W may not exceed this.
KAI_TOLERANCE = 0.05
NEON_CALLS = ("autotune", "autotune:at_q4s_dotprod_4x8", "kai-dotprod", "kai-i8mm")
#: The NEON target as a cross build: QEMU's ``-cpu max`` has every NEON level, whatever this host is.
X86 = HostInfo(arch="x86_64", os="linux", cpu="x86-64", features=())


def build_neon_quant(work: Path, kleidiai: Path | None) -> tuple[tuple[str, ...], Path]:
    """(QEMU runner on -cpu max, the NEON quantised program with every NEON quantised kernel)."""
    target = arm_target("neon", X86)
    lib = build_arm_runtime(target, [], [], default_params(None, {}, provenance="emulated"), {}, work / "lib")
    exe = work / ("arm_neon_qicount_kai" if kleidiai else "arm_neon_qicount")
    icount.build(target, HERE / "icount_neon_quant.c", exe, "-march=armv8.6-a+dotprod+i8mm", [lib.header.parent],
                 lib.archive, kleidiai, KAI_SOURCES["neon-quant"])
    return target.runner, exe


def write_neon_quant_input(path: Path, A: np.ndarray, w: quant.QuantizedWeights) -> None:
    """The NEON program's input: the shape, A, autotune's and KleidiAI's forms of ``w``."""
    def counted(array: np.ndarray) -> bytes:
        data = np.ascontiguousarray(array).tobytes()
        return struct.pack("<q", len(data)) + data

    native = np.frombuffer(kleidiai_native(w), np.uint8)
    path.write_bytes(struct.pack("<4q", A.shape[0], w.n, w.k, w.block) + np.ascontiguousarray(A).tobytes()
                     + counted(w.packed.codes) + counted(w.packed.scales) + counted(native))


def count_neon_quant(runner: tuple[str, ...], exe: Path, inp: Path, who: str, out: Path) -> Count:
    """Instructions per phase and symbol of one run (KleidiAI's RHS packing left out of the log)."""
    return counted_run(runner, [str(exe), str(inp), who, str(out)], Count(), unlogged(exe))


def run_neon_quant(args: argparse.Namespace) -> list[dict]:
    """The quantised NEON kind: the library's choice, a forced kernel, KleidiAI's two."""
    work = _work(args)
    work.mkdir(parents=True, exist_ok=True)
    kai = kleidiai_checkout(args.kleidiai, KAI_SOURCES["neon-quant"], "the qsi8d32p x qsi4c32p NEON kernels")
    runner, exe = build_neon_quant(work, kai)
    rng = np.random.default_rng(3)
    rows = []
    for m, n, k in args.shapes:
        A = rng.standard_normal((m, k)).astype(np.float32)
        w = quant.quantize_weights(rng.standard_normal((k, n)).astype(np.float32), 4, 32, True)
        inp, out = work / "in.bin", work / "out.bin"
        write_neon_quant_input(inp, A, w)
        want, bound = quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64)
        f32 = A.astype(np.float64) @ w.dequantize().astype(np.float64)
        row: dict = {"shape": f"{m}x{n}x{k}"}
        # The forced 4x8 block leaves rows below 4 to the portable code: not worth counting.
        calls = [c for c in NEON_CALLS if (kai is not None or not c.startswith("kai")) and (m >= 4 or ":" not in c)]
        for who in calls:
            counted = count_neon_quant(runner, exe, inp, who, out)
            C = np.fromfile(out, np.float32).reshape(m, n)
            if who.startswith("autotune"):
                ok = qsuite._check(C, want, bound) is None
            else:
                ok = float(np.linalg.norm(C - f32) / np.linalg.norm(f32)) <= KAI_TOLERANCE
            symbols = counted.symbols.get("cached")
            row[who] = {"cached": counted.phases.get("cached"), "ok": ok,
                        "top": symbols.most_common(args.top or 3) if symbols else []}
        rows.append(row)
        _print_neon_quant(row)
    _write_json(args, rows)
    return rows


def _print_neon_quant(row: dict) -> None:
    cells = [f"{who} {r['cached']:,}{'' if r['ok'] else ' WRONG'}" for who, r in row.items() if who != "shape"]
    base = row.get("autotune", {}).get("cached")
    for peer in ("kai-dotprod", "kai-i8mm"):
        if peer in row and base:
            cells.append(f"autotune/{peer} {base / row[peer]['cached']:.2f}x")
    print(f"{row['shape']:>16}  " + "  ".join(cells))
    print(" " * 18 + "autotune: " + icount.top(row["autotune"]["top"], row["autotune"]["cached"]), flush=True)


# --------------------------------------------------------------------------- the command

RUNS = {"float": run_float, "sme2-quant": run_sme2_quant, "neon-quant": run_neon_quant}


def kind(args: argparse.Namespace) -> str:
    """The kind ``--quantised`` and ``--isa`` select: float (on either ISA), sme2-quant or neon-quant."""
    return f"{args.isa}-quant" if args.quantised else "float"


def _write_json(args: argparse.Namespace, rows: list[dict]) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, shapes defaulting to the kind's table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.arm_icount", description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", type=icount.parse_shape,
                        help="MxNxK (default: the kind's table; quantised: K a multiple of 32)")
    parser.add_argument("--quantised", action="store_true",
                        help="count the quantised product (f32 A x symmetric 4-bit W; SME2: 8-bit W too) "
                             "instead of SGEMM")
    parser.add_argument("--isa", choices=sorted(CPUS), default="sme2",
                        help="float: count the SME2 library on an SME2 CPU model (default) or without SME (its "
                             "NEON family); quantised: the SME2 or the NEON kernels; each against KleidiAI's "
                             "path for that instruction set")
    parser.add_argument("--kleidiai", help="a KleidiAI source checkout to compare with (built beside, not copied; "
                                           "required with --quantised --isa sme2)")
    parser.add_argument("--home", help="AUTOTUNE_HOME: the float kind's sme2 install, and where every kind builds "
                                       "(default: $AUTOTUNE_HOME)")
    parser.add_argument("--library", help="float: a libautotune.a for aarch64 to count instead of the installed one")
    parser.add_argument("--svl", type=int, default=512, help="SME2: streaming vector length in bits (default 512)")
    parser.add_argument("--bits", default="4,8",
                        help="quantised SME2: the weights counted, 4 and/or 8 (bits), comma-separated (default 4,8)")
    parser.add_argument("--q8-block", default="32,k",
                        help="quantised SME2, 8 bits: A's blocks for autotune, comma-separated multiples of 32 or k "
                             "(one block per row, as KleidiAI's qai8dx); default 32,k")
    parser.add_argument("--top", type=int, help="symbols listed per shape (default 4 float, 3 quantised)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows to PATH as JSON")
    args = parser.parse_args(argv)
    if args.quantised and args.library:
        parser.error("--library is the float kind's: the quantised kinds build their library")
    if args.quantised and args.isa == "sme2" and not args.kleidiai:
        parser.error("--quantised --isa sme2 compares with KleidiAI: give --kleidiai DIR")
    if args.quantised and any(k % BLOCK for _, _, k in args.shapes):
        parser.error(f"KleidiAI's quantised kernels need K a multiple of {BLOCK}")
    try:
        args.bits = sorted({int(b) for b in args.bits.split(",")})
    except ValueError:
        parser.error(f"--bits takes 4 and/or 8, not {args.bits!r}")
    args.q8_block = [b.strip().lower() for b in args.q8_block.split(",")]
    if not set(args.bits) <= {4, 8} or any(b != "k" and (not b.isdigit() or int(b) % BLOCK or not int(b))
                                           for b in args.q8_block):
        parser.error("--bits takes 4 and/or 8; --q8-block positive multiples of 32 or k")
    args.shapes = args.shapes or list(SHAPES[kind(args)])
    return args


def run(args: argparse.Namespace) -> list[dict]:
    """Count the kind ``args`` selects; prints a table and returns its rows."""
    return RUNS[kind(args)](args)


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
