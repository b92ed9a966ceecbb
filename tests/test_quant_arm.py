"""The NEON quantised kernels (``sdot``, ``smmla``) and the aarch64 library's quantised path, under QEMU.

The aarch64 library (autotune.link.build_arm_runtime, no float kernels) carries
every NEON quantised kernel; kernels_src/harness/qharness.c runs it under
qemu-aarch64 on cases written here, and the host compares each C with
:func:`autotune.quant.reference_qmatmul` within :func:`autotune.quant.scaling_error_bound`:

* every kernel forced by name (``at_qmatmul_f32_using``), all three kinds, on odd
  shapes (M = 1, 3, 5, 16, 17; N = 1, 5, 33, 70; K not a multiple of the block;
  blocks 32 to 128) and adversarial scales (a zero block, subnormal, beyond
  float32, NaN in A), on a CPU with both dotprod and i8mm (``max``);
* the library's own choice on CPU models without dotprod (cortex-a53, a72: the
  portable code, no SIGILL), with dotprod (cortex-a76, neoverse-n1) and with
  i8mm (neoverse-n2, max), where a forced kernel the CPU cannot run is refused;
  and which kernels it executes there, by symbol, under QEMU's instruction log
  (benchmarks/icount.py's counter).

Nothing here times anything.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune import contract, quant, qsuite
from autotune.codegen import quant_generator, quant_neon
from autotune.families import neon, qkernel
from autotune.host import HostInfo
from autotune.link import build_arm_runtime, build_qharness, default_params
from autotune.toolchain import Target, ToolchainError, arm_target


X86 = HostInfo(arch="x86_64", os="linux", cpu="AMD EPYC", features=())
KINDS = {"q4s": (4, True), "q4a": (4, False), "q8": (8, True)}
AT_OK, AT_ENOKERNEL = 0, -3
KERNELS = neon.quant_family()
#: QEMU CPU models and the levels they have.
MODELS = {"cortex-a53": (), "cortex-a72": (), "cortex-a76": ("dotprod",), "neoverse-n1": ("dotprod",),
          "neoverse-n2": ("dotprod", "i8mm"), "max": ("dotprod", "i8mm")}
#: The models the default suite runs (one per level); the slow one runs them all.
QUICK_MODELS = ("cortex-a53", "cortex-a76", "neoverse-n2")


# --------------------------------------------------------------------------- generated text


def test_family_names_features_and_order():
    names = [k.name for k in KERNELS]
    assert len(names) == len(set(names)) and all(qkernel(n) == k for n, k in zip(names, KERNELS))
    levels = [k.isa for k in KERNELS]
    assert levels == sorted(levels, key=neon.QUANT_LEVELS.index)  # i8mm first: no timings under emulation
    assert all(k.mr % 2 == 0 for k in KERNELS if k.isa == "i8mm")
    for kind in KINDS:  # every kind has a block form and a GEMV form
        assert any(k.kind == kind and k.mr == 1 for k in KERNELS)
        assert any(k.kind == kind and k.mr > 1 and k.isa == "i8mm" for k in KERNELS)
    for bad in (("q4s", "i8mm", 1, 8), ("q4s", "dotprod", 8, 8), ("q4s", "sve", 1, 8), ("q5", "dotprod", 1, 8)):
        with pytest.raises(ValueError):
            neon.qkernel(*bad)
    with pytest.raises(ValueError):
        qkernel("at_q4s_avx2")


def test_units_are_one_per_level_with_its_guard_and_flag():
    units = quant_generator(KERNELS[0]).units(KERNELS)
    assert [u.filename for u in units] == ["at_qneon_i8mm.c", "at_qneon_dotprod.c"]
    for u, level in zip(units, ("i8mm", "dotprod")):
        assert u.flags == (quant_neon.MARCH[level],) and f"#if !defined({quant_neon.ACLE_MACRO[level]})" in u.text
        assert "Do not edit" in u.text
        mine = [k for k in KERNELS if k.isa == level]
        assert all(f"void {k.name}(" in u.text for k in mine)
        assert ("vmmlaq_s32" in u.text) == (level == "i8mm")
        assert ("vdotq_laneq_s32" in u.text) == (level == "dotprod")
    with pytest.raises(ValueError):
        quant_neon.generate(KERNELS)


def test_registry_entries_name_their_levels():
    k = neon.qkernel("q4a", "i8mm", 4, 8)
    text = contract.qregistry([k, neon.qkernel("q8", "dotprod", 1, 16)])
    assert '{"at_q4a_i8mm_4x8", 1, 4, 8, at_q4a_i8mm_4x8, "i8mm"},' in text
    assert '{"at_q8_dotprod_1x16", 2, 1, 16, at_q8_dotprod_1x16, "asimddp"},' in text


# --------------------------------------------------------------------------- under QEMU


def arm_or_skip(isa: str = "neon", svl: int = 512) -> Target:
    """The cross target of ``isa``, or a skip naming what is missing."""
    try:
        return arm_target(isa, X86, svl)
    except ToolchainError as exc:
        pytest.skip(f"needs the Arm cross compiler (clang-19) and a QEMU for {isa} (scripts/setup.sh --test): {exc}")


def _target() -> Target:
    return arm_or_skip("neon")


def harness_with_library(target: Target, home: Path) -> tuple[Target, Path]:
    """(target, qharness.c linked statically with the target's libautotune.a: the whole
    quantised family, no float kernels)."""
    lib = build_arm_runtime(target, [], [], default_params(None, {}, provenance="emulated"), {}, home / "lib",
                            cache=home / "cache")
    return target, build_qharness(target, lib.archive, home / "qharness")


@pytest.fixture(scope="module")
def qharness(tmp_path_factory) -> tuple[Target, Path]:
    return harness_with_library(_target(), tmp_path_factory.mktemp("qarm"))


def _cases(kind: str) -> list[tuple[str, np.ndarray, quant.QuantizedWeights]]:
    """The install stage's adversarial cases and the odd shapes of this suite's docstring; seeded."""
    bits, symmetric = KINDS[kind]
    rng = np.random.default_rng(23)
    cases = list(qsuite._cases(kind))
    for m, k, n, block in ((1, 50, 5, 32), (3, 100, 33, 32), (5, 129, 70, 64), (16, 64, 1, 32), (17, 200, 33, 64),
                           (17, 77, 70, 32)):
        A = rng.standard_normal((m, k)).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        cases.append((f"M={m} K={k} N={n} block={block}", A, quant.quantize_weights(W, bits, block, symmetric)))
    return cases


def _run(target: Target, exe: Path, cpu: str, calls: list[tuple], work: Path,
         qemu_args: tuple[str, ...] = ()) -> list[tuple[int, np.ndarray]]:
    """(status, C) of each (kernel name or "", A, w[, options]) call, run by qharness under QEMU's ``cpu``
    (``qemu_args``: more of QEMU's options, such as ``-E VAR=value`` for the guest's environment).

    ``options`` (a dict, all optional): ``sme2`` (an :class:`autotune.quant.Sme2Weights` to pass as
    the weights' SME2 form), ``bias``, ``clamp`` and ``ldc`` (> N: the columns past N must come back
    untouched, which is checked here)."""
    blob = qsuite.pack_calls(calls)
    inp, out = work / f"in-{cpu}.bin", work / f"out-{cpu}.bin"
    inp.write_bytes(bytes(blob))
    runner = [*target.runner[:-1], cpu, *qemu_args]
    done = subprocess.run([*runner, str(exe), str(inp), str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"qharness on {cpu}: rc={done.returncode} (-4 is SIGILL) {done.stderr[-800:]}"
    assert json.loads(done.stdout.splitlines()[-1]) == {"event": "done", "cases": len(calls)}
    results = []
    for (name, A, w, *rest), (status, full) in zip(calls, qsuite.unpack_results(out.read_bytes(), calls)):
        assert (full[:, w.n:].view(np.uint32) == 0xFFFFFFFF).all(), f"{name or 'choice'}: wrote past N"
        results.append((status, np.ascontiguousarray(full[:, :w.n])))
    return results


def _check(C: np.ndarray, A: np.ndarray, w: quant.QuantizedWeights) -> str | None:
    return qsuite._check(C, quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64))


@pytest.mark.arm
def test_every_neon_kernel_forced_by_name_matches_the_reference(qharness, tmp_path):
    target, exe = qharness
    calls, labels = [], []
    for kind in KINDS:
        for description, A, w in _cases(kind):
            for k in (k for k in KERNELS if k.kind == kind):
                calls.append((k.name, A, w))
                labels.append(f"{k.name} at {description}")
    problems = []
    for label, (name, A, w), (status, C) in zip(labels, calls, _run(target, exe, "max", calls, tmp_path)):
        if status != AT_OK:
            problems.append(f"{label}: status {status}")
        elif (problem := _check(C, A, w)) is not None:
            problems.append(f"{label}: {problem}")
    assert not problems, "\n".join(problems[:10])


def _library_choice_on(model: str, qharness, work: Path) -> None:
    """Right answers from the library's own choice on ``model``; forced kernels run only with their level."""
    target, exe = qharness
    has = MODELS[model]
    calls, expected = [], []
    for kind in KINDS:
        for _, A, w in _cases(kind):
            calls.append(("", A, w))
            expected.append(AT_OK)
        _, A, w = _cases(kind)[-1]
        for k in (k for k in KERNELS if k.kind == kind):
            calls.append((k.name, A, w))
            expected.append(AT_OK if k.isa in has else AT_ENOKERNEL)
    results = _run(target, exe, model, calls, work)
    assert [status for status, _ in results] == expected
    for (name, A, w), (status, C) in zip(calls, results):
        if status == AT_OK:
            problem = _check(C, A, w)
            who = name or "the library's choice"
            assert problem is None, f"{model}, {who} at M={A.shape[0]} K={A.shape[1]}: {problem}"


@pytest.mark.arm
@pytest.mark.parametrize("model", QUICK_MODELS)
def test_library_choice_per_cpu_model(qharness, tmp_path, model):
    _library_choice_on(model, qharness, tmp_path)


@pytest.mark.arm
@pytest.mark.slow
@pytest.mark.parametrize("model", [m for m in MODELS if m not in QUICK_MODELS])
def test_library_choice_on_more_cpu_models(qharness, tmp_path, model):
    _library_choice_on(model, qharness, tmp_path)


def _adversarial_rows(k: int, block: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of A whose quantisation is easy to get wrong by one code, one scale bit or one sum."""
    def subnormal(top: int) -> np.ndarray:  # multiples of 2^-149: sa 1 to 3 of those, a / sa a tie or > 127
        return np.ldexp(rng.integers(-top, top + 1, k).astype(np.float64), -149)

    def anchored(values: np.ndarray, top: float) -> np.ndarray:  # +-top somewhere in every block: sa = top / 127
        starts = np.arange(0, k, block)
        at = np.minimum(starts + rng.integers(0, block, starts.size), k - 1)
        values[at] = top * rng.choice([-1.0, 1.0], at.size)
        return values

    lanes = rng.permutation(k - k % block)
    rows = [rng.standard_normal(k),
            anchored(rng.integers(-254, 255, k) / 2.0, 127.0),  # sa = 1: every code a tie or exact
            anchored(rng.integers(-254, 255, k) * 24.5, 49.0 * 127),  # sa = 49: ties a * (1 / sa) misses
            anchored((rng.integers(-127, 127, k) + 0.5) / 127.0, 1.0),  # near the ties of sa = 1/127
            -np.abs(rng.standard_normal(k)),  # the largest magnitude negative: codes reach -127
            subnormal(190),  # sa = 2^-149 where max|n| < 190.5: quotients up to 190, clipped both ways
            subnormal(317),  # sa = 2 or 3 x 2^-149: ties at .5 and clipping
            rng.standard_normal(k) * 1e-40,  # subnormal: sa underflows or is subnormal
            rng.standard_normal(k) * 1e-43,
            rng.standard_normal(k) * 1e37,  # large, with C still finite
            rng.standard_normal(k) * 3e38,  # at the top of float32's range (and some +-Inf)
            np.where(rng.random(k) < 0.5, -0.0, 0.0),  # zero blocks, signed zeros
            np.where(np.arange(k) == lanes[0], np.nan, rng.standard_normal(k)),  # one NaN in a whole block
            np.where(np.arange(k) == lanes[1], np.inf, np.where(np.arange(k) == lanes[2], -np.inf, 1.0)),
            np.r_[rng.standard_normal(k - 1), np.nan]]  # a NaN in the last, partial block
    with np.errstate(over="ignore"):  # 3e38 * normal rounds to +-Inf in float32 on purpose
        return np.array(rows).astype(np.float32)


@pytest.mark.arm
def test_activation_codes_scales_and_sums_are_those_of_quantize_activations(qharness, tmp_path):
    """qgemm.c's quantisation of A (NEON for whole blocks, scalar for a partial one) is
    quantize_activations' bit for bit.  With W = 7 I in symmetric 4 bits every weight
    scale is 1 or 0 and only the diagonal block counts, so C[m, n] = float(7 qa) * sa
    rounded once in any order of the scaling, and the kernels' zero-point correction
    (8 times the code sum) cancels only if the library's sum is right: a code, a scale
    bit or a sum the library gets differently from the reference shows as an inequality.
    Each A as one call (the block kernel, M > 1) and row by row (the GEMV, M = 1)."""
    target, exe = qharness
    rng = np.random.default_rng(17)
    calls = []
    for block in (32, 64, 128):
        for k in (4 * block, 3 * block + 9, 2 * block + 31):  # whole blocks only, a partial last one
            A = _adversarial_rows(k, block, rng)
            w = quant.quantize_weights(7 * np.eye(k, dtype=np.float32), 4, block, True)
            assert set(np.unique(w.block_scales())) == {0.0, 1.0}
            calls += [("", A, w)] + [("", A[i:i + 1], w) for i in range(len(A))]
            codes, scales = quant.quantize_activations(A, block, w.padded_k)
            assert (np.abs(codes[1:7]) == 127).any(axis=1).all() and np.isnan(scales[-3:]).any(axis=1).all()
    for (_, A, w), (status, C) in zip(calls, _run(target, exe, "max", calls, tmp_path)):
        assert status == AT_OK
        want = quant.reference_qmatmul(A, w)
        wrong = np.argwhere(~((C == want) | (np.isnan(C) & np.isnan(want))))
        assert not wrong.size, f"M={A.shape[0]} K={A.shape[1]} block={w.block}: C{wrong[0]} {C[tuple(wrong[0])]!r} " \
                               f"is not {want[tuple(wrong[0])]!r} ({len(wrong)} differ)"


# --------------------------------------------------------------------------- the instruction-count benchmark


def test_kleidiai_native_weights_hold_the_same_codes():
    """benchmarks/arm_icount.py hands KleidiAI the weights autotune uses, in its
    qsu4c32s16s0 layout: per column and block an f16 scale, then per 32 values of K
    16 bytes, byte i holding k = i (low nibble) and k = i + 16 (high), zero point 8."""
    from benchmarks.icount import kleidiai_native

    rng = np.random.default_rng(4)
    w = quant.quantize_weights(rng.standard_normal((96, 5)).astype(np.float32), 4, 64, True)
    raw = np.frombuffer(kleidiai_native(w), np.uint8).reshape(5, w.blocks, 2 + 32)
    codes, scales = w.signed_codes(), w.block_scales()
    for n in range(5):
        for b in range(w.blocks):
            assert raw[n, b, :2].view(np.float16)[0] == np.float16(scales[n, b])
            for i in range(32):
                sub, j = divmod(i, 16)
                byte = int(raw[n, b, 2 + 16 * sub + j])
                k0 = b * 64 + 32 * sub + j
                assert (byte & 0x0F) - 8 == codes[n, k0] and (byte >> 4) - 8 == codes[n, k0 + 16]


@pytest.mark.arm
@pytest.mark.slow
def test_instruction_count_benchmark_counts_checked_calls(tmp_path, capsys):
    from benchmarks import arm_icount

    _target()
    options = arm_icount.parse_args(["--quantised", "--isa", "neon", "--home", str(tmp_path), "--top", "20", "5x40x64"])
    (row,) = arm_icount.run(options)
    for who in ("autotune", "autotune:at_q4s_dotprod_4x8"):
        assert row[who]["ok"] and row[who]["cached"] > 0
    assert "at_q4s_dotprod_4x8" in {symbol for symbol, _ in row["autotune:at_q4s_dotprod_4x8"]["top"]}
    assert "5x40x64" in capsys.readouterr().out


@pytest.mark.arm
def test_the_library_runs_the_kernels_of_the_cpus_level(tmp_path):
    """Which kernels the library's own choice executes, by symbol, on each level's CPU
    model: none on cortex-a53 (no dotprod), the dotprod block and GEMV on
    cortex-a76, the i8mm block and the dotprod GEMV on neoverse-n2."""
    from benchmarks import arm_icount

    _target()
    runner, exe = arm_icount.build_neon_quant(tmp_path, None)
    rng = np.random.default_rng(8)
    A = rng.standard_normal((5, 64)).astype(np.float32)
    w = quant.quantize_weights(rng.standard_normal((64, 40)).astype(np.float32), 4, 32, True)
    arm_icount.write_neon_quant_input(tmp_path / "in.bin", A, w)
    expected = {"cortex-a53": set(), "cortex-a76": {"at_q4s_dotprod_4x8", "at_q4s_dotprod_1x16"},
                "neoverse-n2": {"at_q4s_i8mm_4x8", "at_q4s_dotprod_1x16"}}
    for model, kernels in expected.items():
        cpu = [*runner[:-1], model]
        counted = arm_icount.count_neon_quant(tuple(cpu), exe, tmp_path / "in.bin", "autotune", tmp_path / "out.bin")
        ran = {s for s in counted.symbols["cached"] if s.startswith(("at_q4s_", "at_q4a_", "at_q8_"))}
        assert ran == kernels, model
        C = np.fromfile(tmp_path / "out.bin", np.float32).reshape(5, 40)
        assert _check(C, A, w) is None, model


@pytest.mark.arm
def test_neon_library_has_no_sme2_path(qharness, tmp_path):
    """The NEON target's library carries no SME2 quantised kernels: at_qsme2_svl() is 0 even
    on an SME2 CPU, no SME2 name is listed, and weights carrying an SME2 form get right
    answers from the NEON kernels there."""
    target, exe = qharness
    cpu = "max,sme=on,sme512=on"
    runner = [*target.runner[:-1], cpu]
    for mode, check in (("svl", lambda out: out.split() == ["0"]),
                        ("names", lambda out: out.split() and not any("_sme2_" in n for n in out.split()))):
        done = subprocess.run([*runner, str(exe), mode], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and check(done.stdout), (mode, done.stdout, done.stderr)
    calls = [("", A, w, {"sme2": quant.pack_sme2(w, 512)}) for kind in ("q4s", "q4a", "q8") for _, A, w in _cases(kind)]
    for (_, A, w, _), (status, C) in zip(calls, _run(target, exe, cpu, calls, tmp_path)):
        assert status == AT_OK and _check(C, A, w) is None, f"M={A.shape[0]} K={A.shape[1]}"


@pytest.mark.arm
def test_the_install_stage_rejects_a_wrong_neon_kernel_and_keeps_the_right_ones(tmp_path, monkeypatch):
    """Install's validation of an Arm library (qharness under QEMU, in the crash-isolated driver)
    sees a kernel that forgets the zero point; its neighbours stay validated."""
    target = _target()
    real = quant_neon.generate

    def broken(kernels):
        head, marker, tail = real(kernels).partition("/* at_q4s_dotprod_1x8:")
        return head + marker + tail.replace("vfmsq_f32(", "vfmaq_f32(", 1)

    monkeypatch.setattr(quant_neon, "generate", broken)
    verdicts = qsuite.validate_library(target, tmp_path, [qkernel("at_q4s_dotprod_1x8"), qkernel("at_q4s_dotprod_4x8"),
                                                          qkernel("at_q8_dotprod_1x8")])
    assert verdicts["at_q4s_dotprod_1x8"].startswith("wrong answer")
    assert verdicts["at_q4s_dotprod_4x8"] == verdicts["at_q8_dotprod_1x8"] == "validated"
