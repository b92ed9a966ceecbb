"""The zmm quantised kernels (``avx512vnnizmm``: vpdpbusd on zmm) and qgemm.c's AVX-512 quantiser of A.

This host (Zen 3, AVX2) has no AVX-512, and QEMU's TCG executes none either, so the
checks split as in test_quant_vnni.py:

* the zmm kernels with their primitives emulated on pairs of ymm (exact AVX2
  arithmetic, the kernel text the same) run through qgemm.c against the reference
  over odd shapes and adversarial scales, and bit for bit against the ymm kernel of
  the same mr (every x86 kernel does the same f32 steps per element);
* the real object has vpdpbusd on zmm (EVEX), and the AVX-512 quantiser zmm code;
* the quantisers of A (scalar, AVX2, AVX-512) compared byte for byte on adversarial
  rows by a harness that includes qgemm.c: the AVX-512 one with its intrinsics
  emulated in plain C (tests/c/avx512_emulated.h), and for real where the CPU has it;
* the real kernels and the AVX-512 quantiser run where the CPU has AVX-512 (skipped
  elsewhere, naming the features), and nowhere else: install does not build them
  and qgemm.c does not call them on a CPU without their features.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune import build, contract, host, link, quant, qsuite, toolchain
from autotune.codegen import _quant_zmm, quant_x86
from autotune.families import qkernel, x86
from autotune.qformat import KINDS, PAD_COLUMNS
from autotune.runtime import qapi
from autotune.specs import QKernelSpec

from .isa import cpu_features, requires_isa
from .qlib import validation_library

pytestmark = requires_isa("avx2")

ROOT = Path(__file__).resolve().parents[1]
ZMM = _quant_zmm.ISA
FAMILY = x86.quant_family(ZMM)
#: A ymm kernel of the same mr for each zmm kernel: the same rows go to the portable code,
#: so the whole of C must be the same bits (the 6- and 8-row ones are AVX-512 VNNI's, emulated).
PARTNER = {1: ("avx2", 8), 2: ("avx2", 8), 4: ("avx2", 8), 6: ("avx512vnni", 16), 8: ("avx512vnni", 8)}
PARTNERS = sorted({x86.qkernel(kind, *PARTNER[mr][:1], mr, PARTNER[mr][1]) for kind in KINDS for mr in PARTNER})
FEATURES_MISSING = [f for f in x86.QUANT_FEATURES[ZMM] if f not in host.detect().features]


def _partner(k) -> str:
    isa, nr = PARTNER[k.mr]
    return x86.qkernel(k.kind, isa, k.mr, nr).name


def _skip_reason(features) -> str:
    cap = os.environ.get(host.ISA_CAP_VARIABLE)
    return (f"needs {', '.join(features)}, which this CPU does not have"
            + (f" under {host.ISA_CAP_VARIABLE}={cap}" if cap else ""))


def _shape_cases(kind: str) -> list[tuple[str, np.ndarray, quant.QuantizedWeights]]:
    """Around the zmm tiles: M of 1, primes and mr +- 1; N below, at and above 16 and 32; K
    not a multiple of the block; rows and columns scaled far apart (seeded)."""
    bits, symmetric = (8, True) if kind == "q8" else (4, kind == "q4s")
    rng = np.random.default_rng(31)
    cases = []
    for m, k, n, block, scale in ((1, 31, 15, 32, 1.0), (1, 257, 33, 32, 1e-30), (5, 96, 16, 32, 1e30),
                                  (7, 100, 17, 64, 1.0), (9, 64, 31, 32, 1.0), (13, 130, 47, 96, 1e-20),
                                  (17, 33, 32, 32, 1.0), (23, 200, 65, 64, 1.0), (31, 70, 1, 32, 1e20),
                                  (47, 160, 63, 32, 1.0)):
        A = (rng.standard_normal((m, k)) * scale).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        W[:, ::3] *= np.float32(1e-3)  # columns of different scales in one vector
        if m > 2:
            A[1] = np.where(rng.random(k) < 0.5, 127.0, -127.0) * scale  # every code at +-127
        cases.append((f"M={m} K={k} N={n} block={block} scale={scale:g}", A,
                      quant.quantize_weights(W, bits, block, symmetric)))
    return cases


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return validation_library(tmp_path_factory.mktemp("zmm-emulated"), FAMILY + PARTNERS, emulate=True)


@pytest.mark.parametrize("kind", KINDS)
def test_emulated_zmm_kernels_match_the_reference_and_the_ymm_kernels_bits(emulated, kind):
    mine = [k for k in FAMILY if k.kind == kind]
    assert {k.mr for k in mine} == set(PARTNER) and {k.nr for k in mine} == {16, 32}
    for description, A, w in qsuite._cases(kind) + _shape_cases(kind):
        want, bound = quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64)
        ymm = {mr: qapi.call(emulated, A, w, None, None, _partner(k)) for mr, k in {k.mr: k for k in mine}.items()}
        for k in mine:
            C = qapi.call(emulated, A, w, None, None, k.name)
            problem = qsuite._check(C, want, bound)
            assert problem is None, f"{k.name} at {description}: {problem}"
            assert np.array_equal(C, ymm[k.mr], equal_nan=True), f"{k.name} != {_partner(k)} at {description}"


def test_emulated_zmm_kernels_on_threads_give_one_threads_bits(emulated):
    rng = np.random.default_rng(12)
    A = rng.standard_normal((37, 1000)).astype(np.float32)
    for kind in KINDS:
        bits, symmetric = (8, True) if kind == "q8" else (4, kind == "q4s")
        w = quant.quantize_weights(rng.standard_normal((1000, 333)).astype(np.float32), bits, 32, symmetric)
        for mr, nr in ((6, 32), (1, 32)):
            name = x86.qkernel(kind, ZMM, mr, nr).name
            results = []
            for count in (1, 2, 3):
                emulated.at_set_num_threads(count)
                results.append(qapi.call(emulated, A, w, None, None, name))
            emulated.at_set_num_threads(0)
            assert all(np.array_equal(r, results[0]) for r in results[1:]), name


def _functions(objdump: str, path: Path) -> dict[str, str]:
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                          check=True).stdout
    return {block.split(">:")[0].rsplit("<", 1)[-1]: block for block in text.split("\n\n") if ">:" in block}


@pytest.fixture(scope="module")
def objdump() -> str:
    found = shutil.which("objdump")
    if found is None:
        pytest.skip("needs objdump (binutils) to read the objects")
    return found


def test_real_zmm_kernels_compile_to_vpdpbusd_on_zmm(tmp_path, objdump, emulated):
    target = toolchain.target_for("avx2", host.detect())
    obj = build.compile_qkernels(target, FAMILY, tmp_path)
    assert obj.ok, obj.error
    functions = _functions(objdump, obj.path)
    for k in FAMILY:
        body = functions[k.name]
        dots = [line for line in body.splitlines() if "vpdpbusd" in line]
        # EVEX (no {vex}), every operand a zmm: 16 int32 sums of 16 columns per instruction
        assert dots and all("{vex}" not in line and "ymm" not in line and line.count("%zmm") >= 2
                            for line in dots), k.name
        assert "vinserti64x4" in body, k.name  # two panels per vector
        assert "vpmaddubsw" not in body and "vpsignb" not in body, k.name
        if k.kind == "q8":
            assert "vpxord" in body, k.name  # the codes made unsigned, w + 128
    text = "\n".join(_functions(objdump, emulated.kernels_object).values())
    assert "%zmm" not in text and "vpdpbusd" not in text  # what the emulated tests ran is AVX2


#: The host's C compiler and whichever of gcc and clang are installed too, each once.
COMPILERS = list({os.path.realpath(shutil.which(c) or c): c
                  for c in (toolchain.find_cc()[0], "gcc", "clang", "clang-19") if shutil.which(c)}.values())


@pytest.mark.parametrize("compiler", COMPILERS)
def test_the_zmm_unit_compiles_unoptimised_with_every_compiler(compiler, tmp_path):
    """The primitives are always-inline functions with the kernels' target attribute: a
    compiler must inline them into the kernels at -O0 too, real and emulated (the widest
    and the narrowest tile of each kind)."""
    kernels = [k for k in FAMILY if (k.mr, k.nr) in ((6, 32), (1, 16))]
    for emulate in (False, True):
        source = tmp_path / f"zmm{int(emulate)}.c"
        source.write_text(quant_x86.generate(kernels, emulate))
        done = subprocess.run([compiler, "-O0", "-mavx2", "-mfma", "-c", str(source), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{compiler} (emulated: {emulate}): {done.stderr[-2000:]}"


def test_real_zmm_kernels_on_a_cpu_that_has_them(tmp_path):
    if FEATURES_MISSING:
        pytest.skip(_skip_reason(FEATURES_MISSING) + f" (AVX-512 VNNI on zmm, {ZMM})")
    lib = validation_library(tmp_path, FAMILY + PARTNERS, emulate=False)
    for kind in KINDS:
        for description, A, w in qsuite._cases(kind) + _shape_cases(kind):
            want, bound = quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64)
            for k in (k for k in FAMILY if k.kind == kind):
                C = qapi.call(lib, A, w, None, None, k.name)
                assert qsuite._check(C, want, bound) is None, f"{k.name} at {description}"
                assert np.array_equal(C, qapi.call(lib, A, w, None, None, _partner(k)), equal_nan=True), k.name


def test_qgemm_never_runs_a_zmm_kernel_on_a_cpu_without_its_features(tmp_path):
    """The real (not emulated) kernels in a registry, preferred first: on this CPU qgemm.c
    refuses them by name and its own choice is the AVX2 kernel after them."""
    if set(x86.QUANT_FEATURES[ZMM]) <= cpu_features():
        pytest.skip("this CPU has AVX-512 VNNI: the zmm kernels run here (test_real_zmm_kernels_on_a_cpu_that_has_them)")
    zmm, ymm = [x86.qkernel(kind, ZMM, 4, 32) for kind in KINDS], [x86.qkernel(kind, "avx2", 4, 16) for kind in KINDS]
    lib = validation_library(tmp_path, zmm + ymm, emulate=False)
    rng = np.random.default_rng(2)
    A = rng.standard_normal((9, 100)).astype(np.float32)
    for k, fallback in zip(zmm, ymm):
        bits, symmetric = (8, True) if k.kind == "q8" else (4, k.kind == "q4s")
        w = quant.quantize_weights(rng.standard_normal((100, 40)).astype(np.float32), bits, 32, symmetric)
        with pytest.raises(quant.QuantizationError, match="AT_ENOKERNEL"):
            qapi.call(lib, A, w, None, None, k.name)
        assert np.array_equal(qapi.call(lib, A, w, None, None), qapi.call(lib, A, w, None, None, fallback.name))


def test_install_builds_zmm_kernels_only_where_the_capped_host_has_them(tmp_path):
    full = ["avx2", "fma", "avx_vnni", "avx512f", "avx512vl", "avx512bw", "avx512_vnni"]
    assert ZMM in x86.quant_isas(full) and ZMM in x86.QUANT_ISAS
    assert ZMM not in x86.quant_isas(["avx2", "fma", "avx512f", "avx512vl", "avx512bw"])  # no VNNI
    capped = host.apply_isa_cap(dataclasses.replace(host.detect(), features=tuple(full)), "avx2")
    assert ZMM not in x86.quant_isas(capped.features)
    if FEATURES_MISSING:
        # this CPU: install's stage neither builds nor validates nor times them (so never selects them)
        target = toolchain.target_for("avx2", host.detect())
        assert ZMM not in qsuite.kernel_isas(target)
        assert qsuite.run_stage(target, tmp_path, patterns=[f"*_{ZMM}_*"]) is None


def test_selection_keeps_whichever_width_was_faster():
    """The stage's selection compares seconds, not ISAs: zmm and ymm candidates alike."""
    names = {(isa, mr, nr): x86.qkernel("q4s", isa, mr, nr).name
             for isa, mr, nr in ((ZMM, 1, 32), (ZMM, 6, 32), ("avx512vnni", 1, 16), ("avx512vnni", 6, 16))}
    seconds = {names[(ZMM, 1, 32)]: {1: 2.0}, names[("avx512vnni", 1, 16)]: {1: 1.0},
               names[(ZMM, 6, 32)]: {16: 1.0, 64: 3.0}, names[("avx512vnni", 6, 16)]: {16: 1.5, 64: 3.5}}
    assert qsuite.select(seconds) == (names[(ZMM, 6, 32)], names[("avx512vnni", 1, 16)])
    seconds[names[(ZMM, 1, 32)]] = {1: 0.5}
    seconds[names[(ZMM, 6, 32)]] = {16: 2.0, 64: 3.5}
    assert qsuite.select(seconds) == (names[("avx512vnni", 6, 16)], names[(ZMM, 1, 32)])


def test_the_zmm_records_follow_the_register_model_and_the_padding():
    assert x86.quant_fits(ZMM, 6, 32) and x86.quant_fits(ZMM, 8, 16) and not x86.quant_fits(ZMM, 8, 32)
    for k in FAMILY:
        assert qkernel(k.name) == k and quant_x86.quant_fits(k.isa, k.mr, k.nr)
        assert k.nr % x86.QUANT_LANES[ZMM] == 0 and PAD_COLUMNS % k.nr == 0
        assert set(k.features) == {"avx2", "fma", "avx512f", "avx512_vnni"}
    with pytest.raises(ValueError, match="nr 16 or 32"):
        x86.qkernel("q4s", ZMM, 4, 8)  # half a zmm
    with pytest.raises(ValueError, match="beyond the x86 register model"):
        quant_x86.generate([QKernelSpec("q8", ZMM, 8, 32, "x86", ("avx512f",))])
    # qgemm.c recognises the zmm kernels by the ISA in their names (its quantiser follows them)
    assert f'"_{ZMM}_"' in (ROOT / "kernels_src" / "runtime" / "qgemm.c").read_text()


# -- qgemm.c's quantisers of A -----------------------------------------------------------

@pytest.fixture(scope="module")
def quantise_check(tmp_path_factory) -> dict[str, Path]:
    """tests/c/quantise_check.c with qgemm.c included, an empty registry and the runtime's
    helpers: "real", and "emulated" with the AVX-512 quantiser's intrinsics in plain C."""
    work = tmp_path_factory.mktemp("quantise")
    target = toolchain.target_for("avx2", host.detect())
    (work / "at_qtable.c").write_text(contract.qregistry([]))
    runtime = ROOT / "kernels_src" / "runtime"
    built = {}
    for form, defines in (("real", []), ("emulated", ["-DAT_EMULATE_AVX512"])):
        built[form] = work / f"quantise_check_{form}"
        subprocess.run([*target.cc, *link.runtime_cflags(target), *defines, f"-I{ROOT / 'kernels_src' / 'include'}",
                        f"-I{runtime}", f"-I{ROOT / 'tests' / 'c'}", str(ROOT / "tests" / "c" / "quantise_check.c"),
                        str(work / "at_qtable.c"), *(str(runtime / f) for f in ("error.c", "pool.c", "features.c")),
                        "-lm", "-o", str(built[form])], check=True)
    return built


def _adversarial_rows(k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows whose codes, scales or sums a vector quantiser gets wrong by a lane, a tie or a bit."""
    top = np.float32(3.4028235e38)
    ties = rng.integers(-254, 255, k) / 2.0  # with amax 127, sa = 1: every code a tie or exact
    rows = [rng.standard_normal(k),
            np.r_[127.0, ties[1:]],
            np.r_[-127.0, ties[1:]] * 2.0 ** -3,  # the same ties at sa = 1/8
            np.r_[127.0, ties[1:]] * 2.0 ** 100,
            np.r_[1.0, (rng.integers(-254, 255, k - 1) + 0.5) / 127.0],  # near the ties of sa = 1/127
            np.where(rng.random(k) < 0.5, top, -top),  # +-FLT_MAX: sa's largest
            np.r_[top, rng.standard_normal(k - 1)],
            rng.standard_normal(k) * 1e-40,  # subnormal: a / sa up to 190.5, clipped
            rng.standard_normal(k) * 1e-45,  # the smallest subnormals: sa underflows to 0
            np.where(rng.random(k) < 0.5, -0.0, 0.0),  # zero blocks, signed zeros
            np.r_[1e30, rng.standard_normal(k - 1)],  # one code +-127 and the rest 0 or -0
            np.r_[np.inf, rng.standard_normal(k - 1)],
            np.r_[rng.standard_normal(k - 1), -np.inf]]
    for at in (15, 16, 31, 33, k // 2):  # NaN at the edges of the zmm and ymm steps and inside
        row = rng.standard_normal(k)
        row[min(at, k - 1)] = np.nan
        rows.append(row)
    with np.errstate(over="ignore"):
        return np.array(rows).astype(np.float32)


def _quantisers(harness: Path, A: np.ndarray, block: int):
    """(choice for ymm kernels, for zmm kernels, {path: (codes, scales, sums)}) from the harness."""
    m, k = A.shape
    blocks = -(-k // block)
    kp = blocks * block
    out = subprocess.run([str(harness)], input=np.array([m, k, block], "<i8").tobytes() + A.tobytes(),
                         capture_output=True, check=True).stdout
    chosen, at, results = (out[0], out[1]), 2, {}
    for path in ("scalar", "avx2", "avx512"):
        ran, at = out[at], at + 1
        if not ran:
            continue
        codes = np.frombuffer(out, np.int8, m * kp, at).reshape(m, kp)
        at += m * kp
        scales = np.frombuffer(out, np.float32, m * blocks, at).reshape(m, blocks)
        sums = np.frombuffer(out, np.float32, m * blocks, at + 4 * m * blocks).reshape(m, blocks)
        at += 8 * m * blocks
        results[path] = (codes, scales, sums)
    assert at == len(out)
    return chosen, results


#: Block sizes and K: one whole block, whole blocks and a partial one, only a partial one, the widest block.
BLOCK_K = [(32, 32), (32, 5 * 32 + 9), (64, 64 - 1), (64, 3 * 64 + 17), (96, 2 * 96), (128, 128 + 31),
           (4096, 4096 + 100)]


def _agree(results: dict, A: np.ndarray, block: int) -> None:
    """Every path's codes, scale bits and sums are quantize_activations' (the partial block:
    the scalar code's in every path)."""
    codes, scales = quant.quantize_activations(A, block)
    for path, (q, s, sums) in results.items():
        assert np.array_equal(q, codes), path
        assert np.array_equal(s, scales, equal_nan=True), path
        assert np.array_equal(s.view(np.uint32), results["scalar"][1].view(np.uint32)), path  # NaN's bits too
        assert np.array_equal(sums, q.reshape(len(A), -1, block).sum(axis=2, dtype=np.int64)), path


@pytest.mark.parametrize("block, k", BLOCK_K)
def test_the_scalar_and_avx2_quantisers_of_a_agree_bit_for_bit(quantise_check, block, k):
    A = _adversarial_rows(k, np.random.default_rng(block + k))
    chosen, results = _quantisers(quantise_check["real"], A, block)
    assert {"scalar", "avx2"} <= set(results)
    _agree(results, A, block)
    # ymm kernels never get the zmm quantiser; zmm kernels get it where the CPU has AVX512F
    assert chosen == (1, 2 if "avx512" in results else 1)


@pytest.mark.parametrize("block, k", BLOCK_K)
def test_the_emulated_avx512_quantiser_of_a_agrees_bit_for_bit(quantise_check, block, k):
    """quantize_block_avx512's source with its intrinsics emulated lane by lane: its
    halves, lane order, masks, clipping and narrowing give the other paths' bits."""
    A = _adversarial_rows(k, np.random.default_rng(block + k))
    _, results = _quantisers(quantise_check["emulated"], A, block)
    assert set(results) == {"scalar", "avx2", "avx512"}
    _agree(results, A, block)


def test_the_avx512_quantiser_of_a_agrees_bit_for_bit(quantise_check):
    for block, k in BLOCK_K:
        A = _adversarial_rows(k, np.random.default_rng(block + k))
        _, results = _quantisers(quantise_check["real"], A, block)
        if "avx512" not in results:
            pytest.skip(_skip_reason(["avx512f"]) + " (the AVX-512 quantiser of A; emulated and read by objdump here)")
        _agree(results, A, block)


def test_the_emulated_quantiser_harness_has_no_avx512_instruction(quantise_check, objdump):
    text = "\n".join(_functions(objdump, quantise_check["emulated"]).values())
    assert "%zmm" not in text and "quantize_block_avx512" in text


def test_the_avx512_quantiser_is_zmm_code(tmp_path, objdump):
    target = toolchain.target_for("avx2", host.detect())
    obj = tmp_path / "qgemm.o"
    subprocess.run([*target.cc, *link.runtime_cflags(target), f"-I{ROOT / 'kernels_src' / 'include'}",
                    f"-I{ROOT / 'kernels_src' / 'runtime'}", "-c", str(ROOT / "kernels_src" / "runtime" / "qgemm.c"),
                    "-o", str(obj)], check=True)
    functions = _functions(objdump, obj)
    wide = functions["quantize_block_avx512"]
    for op in ("vdivpd", "vcvtpd2dq", "vminpd", "vmaxpd"):  # the double division, clip and rounding on zmm
        assert re.search(rf"{op}\s.*%zmm", wide), op
    assert re.search(r"vpmovsdb\s+%zmm", wide)
    assert "%zmm" not in functions["quantize_block_avx2"]
    assert all("%zmm" not in body for name, body in functions.items() if name != "quantize_block_avx512")
