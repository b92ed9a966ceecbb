"""The quantised kernels and qmatmul end to end: generated AVX2 kernels, the library's
entry point, the Python API, and the install stage that validates them.

Every product is compared with :func:`autotune.quant.reference_qmatmul` within
:func:`autotune.quant.scaling_error_bound` (the only rounding a correct kernel may
add), over odd shapes and adversarial scales.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotune
from autotune import host, link, quant, qsuite, toolchain
from autotune import contract
from autotune.codegen import quant_x86
from autotune.families import qkernel, x86
from autotune.qformat import KINDS as QKINDS
from autotune.link import build_runtime, default_params, emit_kernel_table_c
from autotune.runtime import api, loader, qapi
import autotune.runtime as rt

from .isa import requires_isa

pytestmark = requires_isa("avx2")

KINDS = {"q4s": (4, True), "q4a": (4, False), "q8": (8, True)}


#: The forms the default suite compiles (the whole family takes a minute: see the slow test):
#: GEMV and block kernels of one, two and four panels, per kind (4x16: what install picks on Zen 3).
FORMS = [x86.qkernel(kind, "avx2", mr, nr) for kind in KINDS for mr, nr in ((1, 8), (1, 32), (2, 16), (4, 8), (4, 16))]


@pytest.fixture(scope="session")
def qlib(tmp_path_factory: pytest.TempPathFactory) -> loader.Runtime:
    """A libautotune whose registry holds FORMS (no float kernels)."""
    home = tmp_path_factory.mktemp("qhome")
    target = toolchain.target_for("avx2", host.detect())
    names = [k.name for k in FORMS]
    parts = link.quant_parts({"quant": {"selected": names}}, {"avx2": target}, home)
    table = emit_kernel_table_c([], default_params(provenance="model"), {})
    built = build_runtime(target, [], table, home / "lib" / "quant", quant=parts)
    runtime = loader.load(built.library)
    assert runtime is not None and qapi.prototypes(runtime.lib)
    return runtime


@pytest.fixture
def using(qlib):
    """qlib behind autotune.qmatmul for one test, then whatever was there before."""
    before = api.current()
    rt.use_library(qlib.path)
    yield qlib
    rt.use_library(before.path if before is not None else None)


def _within(C: np.ndarray, A: np.ndarray, w: quant.QuantizedWeights, bias=None, clamp=None) -> None:
    want = quant.reference_qmatmul(A, w, bias, clamp)
    problem = qsuite._check(C, want, quant.scaling_error_bound(A, w).astype(np.float64))
    assert problem is None, problem


def test_the_registry_lists_the_kernels_in_order(qlib):
    assert qapi.kernel_names(qlib.lib) == [k.name for k in FORMS]


@pytest.mark.parametrize("name", [k.name for k in FORMS])
def test_every_kernel_matches_the_reference_on_adversarial_cases(qlib, name):
    kind = qkernel(name).kind
    for description, A, w in qsuite._cases(kind):
        C = qapi.call(qlib.lib, A, w, None, None, name)
        want = quant.reference_qmatmul(A, w)
        problem = qsuite._check(C, want, quant.scaling_error_bound(A, w).astype(np.float64))
        assert problem is None, f"{name} at {description}: {problem}"


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 19), k=st.integers(1, 300), n=st.integers(1, 75), block=st.sampled_from([32, 64, 96]),
       kind=st.sampled_from(sorted(KINDS)), scale=st.sampled_from([1.0, 1e-30, 1e30]), seed=st.integers(0, 2**16))
def test_library_choice_matches_the_reference(qlib, m, k, n, block, kind, scale, seed):
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((m, k)) * scale).astype(np.float32)
    W = rng.standard_normal((k, n)).astype(np.float32)
    bits, symmetric = KINDS[kind]
    w = quant.quantize_weights(W, bits, block, symmetric)
    _within(qapi.call(qlib.lib, A, w, None, None), A, w)


def _adversarial_activations(k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows whose quantisation is easy to get wrong by one code or one scale bit."""
    rows = [rng.standard_normal(k),
            np.r_[127.0, rng.integers(-254, 255, k - 1) / 2.0],  # sa = 1: every code a tie or exact
            np.r_[1.0, (rng.integers(-254, 255, k - 1) + 0.5) / 127.0],  # near the ties of sa = 1/127
            rng.standard_normal(k) * 1e-40,  # subnormal: sa underflows or is subnormal
            rng.standard_normal(k) * 1e-43,
            rng.standard_normal(k) * 3e38,  # at the top of float32's range
            np.where(rng.random(k) < 0.5, -0.0, 0.0),  # zero blocks, signed zeros
            np.r_[np.inf, rng.standard_normal(k - 1)],  # an Inf: the first block's scale is NaN
            np.r_[rng.standard_normal(k - 1), np.nan]]  # a NaN in the last, partial block
    with np.errstate(over="ignore"):  # 3e38 * normal rounds to +-Inf in float32 on purpose
        return np.array(rows).astype(np.float32)


@pytest.mark.parametrize("block", [32, 64])
def test_activation_codes_are_those_of_quantize_activations(qlib, block):
    """The identity in 8 bits makes C[m, n] = float(127 * qa[m, n]) * (sa * sw) exactly,
    so any code or scale qgemm.c's quantisation (AVX2 for whole blocks, scalar for the
    last partial one) gets differently from quantize_activations shows as an inequality."""
    rng = np.random.default_rng(9)
    k = 5 * block + 9
    A = _adversarial_activations(k, rng)
    w = quant.quantize_weights(np.eye(k, dtype=np.float32), bits=8, block=block)
    C = qapi.call(qlib.lib, A, w, None, None)
    want = quant.reference_qmatmul(A, w)
    assert np.array_equal(C, want, equal_nan=True)
    codes, scales = quant.quantize_activations(A, block, w.padded_k)
    assert (codes[1:3] != 0).any() and np.isnan(scales[-2:, :]).any()  # the cases are what they claim


def test_portable_code_when_the_library_has_no_quantised_kernel(built):
    """The session library has no quantised kernels: qgemm.c's portable code computes."""
    runtime = loader.load(built.library)
    assert qapi.prototypes(runtime.lib) and qapi.kernel_names(runtime.lib) == []
    rng = np.random.default_rng(3)
    for kind, (bits, symmetric) in KINDS.items():
        A = rng.standard_normal((5, 77)).astype(np.float32)
        w = quant.quantize_weights(rng.standard_normal((77, 13)), bits, 32, symmetric)
        _within(qapi.call(runtime.lib, A, w, None, None), A, w)
        with pytest.raises(quant.QuantizationError, match="AT_ENOKERNEL"):
            qapi.call(runtime.lib, A, w, None, None, f"at_{kind}_avx2_1x8")


def test_qmatmul_bias_clamp_and_nan_rows(using):
    rng = np.random.default_rng(4)
    A = rng.standard_normal((6, 130)).astype(np.float32)
    A[2, 7] = np.nan
    W = rng.standard_normal((130, 45)).astype(np.float32)
    bias = rng.standard_normal(45).astype(np.float32)
    for kind, (bits, symmetric) in KINDS.items():
        w = autotune.quantize_weights(W, bits=bits, symmetric=symmetric)
        C = autotune.qmatmul(A, w, bias=bias, clamp=(-3.0, 2.5))
        _within(C, A, w, bias, (-3.0, 2.5))
        assert np.isnan(C[2]).all() and not np.isnan(np.delete(C, 2, axis=0)).any()
        rows = np.delete(C, 2, axis=0)
        assert rows.min() >= -3.0 and rows.max() <= 2.5
        # and near the float product: the quantisation error bound, stated in quant.py
        good = np.delete(np.arange(6), 2)
        exact = A[good].astype(np.float64) @ W.astype(np.float64)
        plain = autotune.qmatmul(A[good], w)
        assert (np.abs(plain - exact) <= quant.quantization_error_bound(A[good], w)).all()


def test_the_extensions_call_gives_the_ctypes_calls_bits(using):
    """qmatmul goes through _atfast._qmatmul (one C call; ctypes cost 3 us a call), with
    the same bits as the ctypes call, a library status raised as QuantizationError."""
    fast = using.fast
    assert fast is not None and hasattr(fast, "_qmatmul")
    rng = np.random.default_rng(8)
    for m, k, n in ((1, 1000, 333), (1, 31, 8), (7, 257, 40), (33, 96, 1)):
        A = rng.standard_normal((m, k)).astype(np.float32)
        bias, clamp = rng.standard_normal(n).astype(np.float32), np.array([-2.0, 2.0], np.float32)
        for kind, (bits, symmetric) in KINDS.items():
            w = autotune.quantize_weights(rng.standard_normal((k, n)), bits=bits, symmetric=symmetric)
            for b, c in ((None, None), (bias, clamp)):
                one_call = qapi.call(using.lib, A, w, b, c, fast=fast)
                assert np.array_equal(one_call, qapi.call(using.lib, A, w, b, c), equal_nan=True), (m, k, n, kind)
            assert np.array_equal(autotune.qmatmul(A, w, bias, (-2.0, 2.0)), one_call)
    bad = qapi.at_qweights(4, 1, 40, 3, 7)  # a block of 7 rows: the library refuses it
    status = fast._qmatmul(np.ones((2, 40), np.float32), ctypes.addressof(bad), 3, None, None)
    assert status == -1 and "block" in using.lib.at_last_error().decode()
    with pytest.raises(TypeError):
        fast._qmatmul(np.ones((2, 40), np.float32), 1)
    with pytest.raises(ValueError, match="C-contiguous float32"):
        fast._qmatmul(np.ones((2, 40)), ctypes.addressof(bad), 3, None, None)


def test_strided_bias_and_clamp_are_read_as_their_values(using):
    # np.asarray keeps a strided view: the C side read (low, high) past its values.
    rng = np.random.default_rng(9)
    A = rng.standard_normal((3, 64)).astype(np.float32)
    w = autotune.quantize_weights(rng.standard_normal((64, 5)).astype(np.float32))
    bias = rng.standard_normal(10).astype(np.float32)[::2]
    clamp = np.array([-1.0, 99.0, 0.5, 99.0], np.float32)[::2]
    C = autotune.qmatmul(A, w, bias=bias, clamp=clamp)
    _within(C, A, w, bias.copy(), (-1.0, 0.5))


def test_qmatmul_errors_are_clear(using):
    w = autotune.quantize_weights(np.ones((40, 3), np.float32))
    A = np.ones((2, 40), np.float32)
    with pytest.raises(TypeError, match="float32"):
        autotune.qmatmul(A.astype(np.float64), w)
    with pytest.raises(ValueError, match="2-D"):
        autotune.qmatmul(A[0], w)
    with pytest.raises(ValueError, match="K=41 columns"):
        autotune.qmatmul(np.ones((2, 41), np.float32), w)
    with pytest.raises(ValueError, match="bias must have shape"):
        autotune.qmatmul(A, w, bias=np.ones(4))
    with pytest.raises(ValueError, match="low <= high"):
        autotune.qmatmul(A, w, clamp=(1.0, -1.0))
    with pytest.raises(TypeError, match="QuantizedWeights"):
        autotune.qmatmul(A, np.ones((40, 3), np.float32))


def test_saved_weights_give_the_same_product(using, tmp_path):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((3, 100)).astype(np.float32)
    for kind, (bits, symmetric) in KINDS.items():
        w = autotune.quantize_weights(rng.standard_normal((100, 20)), bits=bits, symmetric=symmetric)
        loaded = quant.QuantizedWeights.load(w.save(tmp_path / kind))
        assert np.array_equal(autotune.qmatmul(A, loaded), autotune.qmatmul(A, w))


def test_without_a_library_the_reference_computes_and_says_why():
    before = api.current()
    api.use(None)
    try:
        w = autotune.quantize_weights(np.ones((33, 2), np.float32))
        A = np.ones((1, 33), np.float32)
        api._warned.clear()
        with pytest.warns(RuntimeWarning, match="numpy computes qmatmul"):
            C = autotune.qmatmul(A, w)
        assert np.array_equal(C, quant.reference_qmatmul(A, w))
    finally:
        rt.use_library(before.path if before is not None else None)


def test_packed_format_places_every_weight_where_at_qkernel_h_says():
    rng = np.random.default_rng(6)
    for bits, symmetric in KINDS.values():
        w = quant.quantize_weights(rng.standard_normal((70, 11)), bits, 64, symmetric)
        p = w.packed
        signed = w.signed_codes()
        zero = 0 if bits == 8 else (8 if symmetric else None)
        assert p.codes.shape[0] == 32 // 8 and p.scales.shape == (4, w.blocks * 8)
        for n in range(w.n):
            panel, c = divmod(n, 8)
            for k in range(w.padded_k):
                sub, r = divmod(k, 32)
                if bits == 8:
                    g, j = divmod(r, 4)
                    code = int(p.codes[panel, sub * 256 + g * 32 + c * 4 + j].astype(np.int8))
                else:
                    v, rest = divmod(r, 8)
                    half, j = divmod(rest, 4)
                    code = int(p.codes[panel, sub * 128 + v * 32 + c * 4 + j] >> (4 * half) & 0xF)
                    z = zero if zero is not None else int(p.zeros[panel, (k // 64) * 8 + c])
                    code -= z
                assert code == signed[n, k], (bits, symmetric, n, k)
            assert np.array_equal(p.scales[panel, c::8], w.block_scales()[n])
        columns = p.scales.reshape(4, w.blocks, 8).transpose(0, 2, 1).reshape(32, w.blocks)
        assert not columns[w.n:].any()  # padded columns have zero scales


def test_install_stage_rejects_a_wrong_kernel_and_keeps_the_right_ones(tmp_path, monkeypatch):
    target = toolchain.target_for("avx2", host.detect())
    real = quant_x86.generate

    def broken(kernels, emulate_vnni=False):  # the 1x8 form forgets the zero point: the checks must see it
        text = real(kernels, emulate_vnni)
        head, _, tail = text.partition("/* at_q4s_avx2_1x8:")
        return head + "/* at_q4s_avx2_1x8:" + tail.replace("_mm256_fnmadd_ps(zero_point", "_mm256_fmadd_ps(zero_point", 1)

    monkeypatch.setattr(quant_x86, "generate", broken)
    stage = qsuite.run_stage(target, tmp_path, patterns=["at_q4s_avx2_1x8", "at_q4s_avx2_2x8"])
    assert stage.verdicts["at_q4s_avx2_2x8"] == "validated"
    assert stage.verdicts["at_q4s_avx2_1x8"].startswith("wrong answer")
    assert stage.selected == ("at_q4s_avx2_2x8",)
    assert set(stage.seconds["at_q4s_avx2_2x8"]) == set(qsuite.MEASURE_M)
    monkeypatch.setattr(quant_x86, "generate", real)
    registry, objects = link.quant_parts({"quant": stage.settings()}, {"avx2": target}, tmp_path)
    assert '"at_q4s_avx2_2x8"' in registry and "at_q4s_avx2_1x8" not in registry and objects[0].exists()


def test_install_stage_times_every_valid_kernel_in_its_rounds(tmp_path):
    """Every validated kernel comes back timed (the driver takes each one's result), and
    per kind the GEMV form and the block are chosen among them."""
    target = toolchain.target_for("avx2", host.detect())
    names = ["at_q8_avx2_1x8", "at_q8_avx2_2x8", "at_q8_avx2_4x8"]
    stage = qsuite.run_stage(target, tmp_path, patterns=names)
    assert {n: stage.verdicts[n] for n in names} == dict.fromkeys(names, "validated")
    # A block kernel is not timed on fewer rows than its tile: qmatmul gives those to the GEMV form.
    assert {n: set(stage.seconds[n]) for n in names} == {"at_q8_avx2_1x8": {1, 16}, "at_q8_avx2_2x8": {16, 64},
                                                         "at_q8_avx2_4x8": {16, 64}}
    assert len(stage.selected) == 2 and "at_q8_avx2_1x8" in stage.selected


def test_a_block_kernel_is_priced_as_qmatmul_runs_it_with_the_gemv_form_on_the_rows_it_leaves():
    """A 6-row tile at M = 16 is timed on 12 rows; the other 4 cost the fastest GEMV's
    one-row time each (timed whole, they ran in the portable code and it never won)."""
    best = {("at_q4s_avx512vnni_6x16", 16): 50e-6, ("at_q4s_avx512vnni_4x16", 16): 70e-6,
            ("at_q4s_avx512vnni_1x32", 1): 10e-6, ("at_q4s_avx512vnni_1x16", 1): 12e-6,
            ("at_q8_avx512vnni_6x16", 16): 80e-6}
    rows = {("at_q4s_avx512vnni_6x16", 16): 12, ("at_q4s_avx512vnni_4x16", 16): 16,
            ("at_q8_avx512vnni_6x16", 16): 16}  # no q8 GEMV timed: all 16 rows were the kernel's
    priced = qsuite._as_run(best, rows)
    assert priced[("at_q4s_avx512vnni_6x16", 16)] == pytest.approx(50e-6 + 4 * 10e-6)
    assert priced[("at_q4s_avx512vnni_4x16", 16)] == 70e-6
    assert priced[("at_q8_avx512vnni_6x16", 16)] == 80e-6
    assert priced[("at_q4s_avx512vnni_1x16", 1)] == 12e-6


def test_install_stage_journals_its_verdicts_and_timings(tmp_path, monkeypatch):
    """A second install of the same kernels takes the verdicts and the timings from the journal
    (nothing runs), as the float kernels' are; the journal's lines are the install's own."""
    from autotune.install import Journal

    target = toolchain.target_for("avx2", host.detect())
    names = ["at_q4a_avx2_1x8", "at_q4a_avx2_2x8"]
    first = qsuite.run_stage(target, tmp_path, patterns=names, journal=Journal(tmp_path / "j.jsonl"))

    def no_run(*args):
        raise AssertionError(f"ran again: {args}")

    monkeypatch.setattr(qsuite, "_run", no_run)
    again = qsuite.run_stage(target, tmp_path, patterns=names, journal=Journal(tmp_path / "j.jsonl"))
    assert again == first and set(first.selected) == set(names)
    with pytest.raises(AssertionError, match="ran again"):  # a fresh journal: run again
        qsuite.run_stage(target, tmp_path, patterns=names, journal=Journal(tmp_path / "j.jsonl", fresh=True))


@pytest.mark.slow
def test_install_stage_validates_the_whole_family(tmp_path):
    target = toolchain.target_for("avx2", host.detect())
    stage = qsuite.run_stage(target, tmp_path)
    family = [k.name for k in x86.quant_family("avx2")]
    assert {n: stage.verdicts[n] for n in family} == {n: "validated" for n in family}
    for kind in QKINDS:
        mine = [qkernel(n) for n in stage.selected if qkernel(n).kind == kind]
        gemv, blocks = [k for k in mine if k.mr == 1], [k for k in mine if k.mr > 1]
        assert len(gemv) == 1 and blocks, (kind, mine)
        # one block kernel; after an AMX one, smaller AMX tiles for the rows it leaves
        assert all(blocks[0].isa == k.isa == x86.AMX_ISA and k.mr < blocks[0].mr for k in blocks[1:]), mine


def test_kernel_records_names_and_the_generated_unit():
    k = x86.qkernel("q4a", "avx2", 4, 16)
    assert k.name == "at_q4a_avx2_4x16" and qkernel(k.name) == k and k.panels == 2
    for bad in (("q5", "avx2", 1, 8), ("q4s", "neon", 1, 8), ("q4s", "avx2", 9, 8), ("q4s", "avx2", 1, 12),
                ("q4s", "avx2", 1, 24)):
        with pytest.raises(ValueError):
            x86.qkernel(*bad)
    with pytest.raises(ValueError, match="not a quantised kernel name"):
        qkernel("at_sgemm_avx2_nn_4x8")
    text = quant_x86.generate([k])
    assert "#error" in text and "Do not edit" in text and "void at_q4a_avx2_4x16(" in text
    assert "const at_qkernel_entry at_qkernel_table[1] = {{0}};" in contract.qregistry([])
    assert '{"at_q4a_avx2_4x16", 1, 4, 16, at_q4a_avx2_4x16, "avx2 fma"}' in contract.qregistry([k])
    assert '"at_q4a_avx2_4x16", 1, 4, 16, at_q4a_avx2_4x16, "fma"}' in contract.qregistry([k], ["fma"])
    assert all(x86.quant_fits(f.isa, f.mr, f.nr) for f in x86.quant_family()) and not x86.quant_fits("avx2", 8, 32)


#: The host's C compiler (install's, which always exists) and whichever of gcc and clang
#: are installed too, each once (cc is often gcc under another name).
COMPILERS = list({os.path.realpath(shutil.which(c) or c): c
                  for c in (toolchain.find_cc()[0], "gcc", "clang", "clang-19") if shutil.which(c)}.values())


@pytest.mark.parametrize("compiler", COMPILERS)
def test_the_unit_compiles_with_every_compiler_and_optimisation_level(compiler, tmp_path):
    """The AVX2 4-bit kernels are inline assembly asking for up to 15 ymm and 11 general
    registers: a compiler that cannot allocate them (at -O0 most of all) rejects the unit."""
    source = tmp_path / "kernels.c"
    source.write_text(quant_x86.generate(x86.quant_family("avx2")))
    for level in ("-O0", "-O3"):
        done = subprocess.run([compiler, level, "-mavx2", "-mfma", "-c", str(source), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{compiler} {level}: {done.stderr[-2000:]}"


@pytest.mark.parametrize("block", [32, 256, 1024, 4096])
@pytest.mark.parametrize("m", [8, 40])
def test_every_kernel_computes_the_same_bits_whatever_the_block(qlib, m, block):
    """The AVX2 kernels take one int32 dot product and one FMA per block and column, in
    order of K, so on the rows a kernel covers (M a multiple of every mr) they agree bit
    for bit, whatever the tile or the slicing of K (many blocks per slice, or one)."""
    rng = np.random.default_rng(block)
    k = 2 * block + 40  # a partial last block
    A = rng.standard_normal((m, k)).astype(np.float32)
    for kind, (bits, symmetric) in KINDS.items():
        w = quant.quantize_weights(rng.standard_normal((k, 37)).astype(np.float32), bits, block, symmetric)
        gemv, *blocks = [f.name for f in FORMS if f.kind == kind]
        first = qapi.call(qlib.lib, A, w, None, None, gemv)
        _within(first, A, w)
        for name in blocks:
            C = qapi.call(qlib.lib, A, w, None, None, name)
            assert np.array_equal(C, first), f"{name} differs from {gemv} by {np.abs(C - first).max()}"


def _product_in(lib, X: np.ndarray, lda: int, m: int, k: int, w: quant.QuantizedWeights, Y: np.ndarray, ldc: int,
                kernel: str | None = None) -> None:
    """at_qmatmul_f32 on A = X's first m rows and k columns (row stride lda) into Y (row stride ldc)."""
    ws = qapi.weights_struct(w, qapi.sme2_svl(lib))
    args = (m, X.ctypes.data, lda, ctypes.byref(ws), None, None, Y.ctypes.data, ldc)
    status = lib.at_qmatmul_f32(*args) if kernel is None else lib.at_qmatmul_f32_using(kernel.encode(), *args)
    assert status == 0, lib.at_last_error().decode()


@pytest.mark.parametrize("name", [None] + [k.name for k in FORMS if k.kind == "q4s"] + ["at_q4a_avx2_4x16",
                                                                                      "at_q8_avx2_4x16"])
def test_leading_dimensions_far_above_the_operands_and_c_over_a(qlib, name):
    """lda and ldc far above K and N: the columns past N keep their values; and C may
    overwrite A (K = N, one buffer): A is quantised before the first store to C."""
    kind = qkernel(name).kind if name else "q4a"
    bits, symmetric = KINDS[kind]
    rng = np.random.default_rng(5)
    m, k, n = 13, 70, 37
    w = quant.quantize_weights(rng.standard_normal((k, n)).astype(np.float32), bits, 32, symmetric)
    lda, ldc = k + 1000, n + 4099
    X = rng.standard_normal((m, lda)).astype(np.float32)
    Y = np.full((m, ldc), -7.25, np.float32)
    _product_in(qlib.lib, X, lda, m, k, w, Y, ldc, name)
    _within(Y[:, :n], X[:, :k], w)
    assert (Y[:, n:] == -7.25).all()

    square = quant.quantize_weights(rng.standard_normal((k, k)).astype(np.float32), bits, 32, symmetric)
    apart = np.empty((m, k), np.float32)
    _product_in(qlib.lib, X, lda, m, k, square, apart, k, name)
    shared = X.copy()
    _product_in(qlib.lib, shared, lda, m, k, square, shared, lda, name)
    assert np.array_equal(shared[:, :k], apart) and np.array_equal(shared[:, k:], X[:, k:])
