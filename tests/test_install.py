"""`autotune install` end to end on small kernel sets, in temporary homes."""

from __future__ import annotations

import ctypes
import json
import statistics
import subprocess

import pytest

from autotune import codegen, install as install_mod, measure
from autotune.codegen import GeneratedSource
from autotune.install import InstallError, InstallOptions, install
from autotune.table import load

from .isa import best_simd_isa

# The host's fastest vector family (avx512 or avx2; the install tests need one of them).
SIMD = best_simd_isa()
needs_x86_simd = pytest.mark.skipif(SIMD not in ("avx512", "avx2"),
                                    reason="needs avx512 or avx2 kernels, which this host cannot run")

# A few kernels of every native x86 family: enough to exercise each stage, fast to build.
SMALL = (f"at_sgemm_{SIMD}_nn_16x[1-3]_*", f"at_dgemm_{SIMD}_tt_*x8_*", "at_sgemm_avx2_nt_8x2_*",
         "at_dgemm_generic_tn_2x2_*")


def run(tmp_path, *patterns: str, **options) -> install_mod.InstallResult:
    return install(InstallOptions(quick=True, home=tmp_path, only=patterns or SMALL, **options))


@needs_x86_simd
def test_install_validates_measures_and_stores_a_table(tmp_path):
    result = run(tmp_path)
    table = load("host", tmp_path)
    assert result.path == tmp_path / "tables" / "host.json"
    assert table.provenance == "measured"
    assert {SIMD, "avx2", "generic"} == {k.spec.isa for k in table.kernels}
    assert table.validated and not table.rejected, [k.reason for k in table.rejected]
    assert table.peak_gflops["f32"] > 0 and table.peak_gflops["f64"] > 0
    for record in table.validated:
        assert record.best_gflops and record.best_gflops > 0
        assert [k for k, _ in record.gflops_by_k] in ([64, 256], []), record  # [] when screened out
        assert record.gflops_by_k or record.reason.startswith("screened out")
    # The decisions were measured on this host, and what is stored is what the held-out check chose.
    from autotune.params import BY_NAME, PlannerParams

    crossovers = [c for c in table.settings["crossovers"] if c["param"] != "qthread_macs"]  # no planner parameter
    assert {c["param"] for c in crossovers} >= {"pack_flops"}
    held = table.tuning["held_out"]
    alone = {f"measured {c['param']}" + (f" {c['dtype']}" if BY_NAME[c["param"]].per_dtype else ""): c
             for c in crossovers}
    assert held["chosen"] in (*install_mod.TUNED_SETS, "measured", "model", install_mod.HELD, *alone)
    assert held["shapes"] > 0
    # Each threshold as its parameter counts it (flops, or bytes of A for place_stream_bytes).
    from autotune.crossovers import Crossover, param_value

    measured = {(c["param"], c["dtype"]): Crossover.from_dict(c).value for c in crossovers}
    stored = PlannerParams.from_mapping(table.params)
    if held["chosen"] == "measured":
        for (param, dtype), value in measured.items():
            assert stored.get(dtype, param) == value
    if held["chosen"] == install_mod.HELD:  # some crossovers measured, the rest the model's
        for c in crossovers:
            model = param_value(c.get("shape", "square"), c["dtype"], c["model_flops"])
            assert stored.get(c["dtype"], c["param"]) in (measured[c["param"], c["dtype"]], pytest.approx(model))
    if held["chosen"] in alone:  # the model's set with that one crossover
        c = alone[held["chosen"]]
        assert stored.get(c["dtype"], c["param"]) == measured[c["param"], c["dtype"]]
    # The edge code's speed was timed, and every candidate planned with it: it is stored
    # whichever set won.
    for dtype in ("f32", "f64"):
        edge = table.settings["edge"][dtype]
        assert edge["gflops"] > 0 and stored.get(dtype, "edge_frac") == edge["frac"] > 0
    # So was the packed path's main kernel: the figures' choice and each candidate timed,
    # and what is stored names the winner in the library the table links (or 0).
    from autotune.runtime import loader

    linked = loader.load(result.library)
    names = {}
    for i in range(linked.lib.at_kernel_count()):
        info = loader.at_kernel_info()
        linked.lib.at_kernel_get(i, ctypes.byref(info))
        names[i + 1] = info.name.decode()
    for dtype in ("f32", "f64"):
        main = table.settings["main_kernel"][dtype]
        # (On a busy machine nothing is timed, as for the crossovers, and the figures choose.)
        assert main["source"] == "busy" and not main["seconds"] or \
            "figures" in main["seconds"] and len(main["seconds"]) >= 2
        value = stored.get(dtype, "pack_kernel")
        assert value == main["value"] and (names.get(value) if value else None) == main["name"]
    assert set(table.measurements["kernel"]) == {k.name for k in table.validated}
    assert set(table.selection) <= {k.name for k in table.validated}
    # Whether the vector kernels clear the upper halves was measured here, and the
    # table says what `autotune show` reports.
    upper = table.settings["upper_halves"]
    assert upper["dirty_ns"] > 0 and upper["clean_ns"] > 0 and isinstance(upper["free"], bool)
    # The plans the report draws are recorded beside the table: a report loads no library.
    from autotune.plans.examples import EXAMPLE_SHAPES, example_plans

    drawn = example_plans("host", tmp_path)
    assert drawn is not None and len(drawn) == len(EXAMPLE_SHAPES)
    assert {k for p in drawn for k in p.kernel_counts()} - {"edge"} <= set(table.selection)
    # Each kernel starts at the same place within a 64-byte line in the library as in the
    # harness that timed it (toolchain._ALIGN_KERNELS): where a short kernel starts moved its speed.
    kernels = {k.name for k in table.validated}
    in_library = _offsets_in_line(result.library, kernels)
    harnesses = [p for p in (tmp_path / "build").glob("*/harness-*") if p.suffix == ""]
    in_harness = [_offsets_in_line(h, kernels) for h in harnesses]
    assert harnesses and set(in_library) == kernels and set().union(*in_harness) == kernels
    assert all(offset == in_library[name] for timed in in_harness for name, offset in timed.items())
    assert set(in_library.values()) == {0}


def _offsets_in_line(binary, names: set[str]) -> dict[str, int]:
    """Where each named function of ``binary`` starts within a 64-byte line (nm's symbol table)."""
    listing = subprocess.run(["nm", "--defined-only", str(binary)], capture_output=True, text=True,
                             check=True).stdout
    found = {}
    for fields in map(str.split, listing.splitlines()):
        if len(fields) == 3 and fields[2] in names:
            found[fields[2]] = int(fields[0], 16) % 64
    return found


@needs_x86_simd
def test_the_quantised_split_over_threads_is_measured_and_baked_in(tmp_path):
    """qmatmul's threads: GEMVs timed on one thread and all, the threshold stored in the
    table and baked into the library (it was a constant from one VM, 8x too high on another)."""
    from autotune import host, qsuite
    from autotune.runtime import loader, qapi
    from autotune.trials import crossover_lines

    result = run(tmp_path, "at_sgemm_avx2_nn_8x2_*", "at_q4s_avx2_1x8", "at_q4s_avx2_4x8")
    quant = result.table.settings["quant"]
    splits = [c for c in result.table.settings["crossovers"] if c["param"] == "qthread_macs"]
    runtime = loader.load(result.library)
    assert qapi.prototypes(runtime.lib)
    cores = host.detect().cores
    if cores < 2:
        assert not splits and runtime.lib.at_qthreads_get() == qsuite.BUILTIN_THREAD_MACS
        return
    (split,) = splits
    assert split["shape"] == "gemv" and split["alt"] == "all threads"
    assert crossover_lines([split])[0].startswith("qmatmul threads: all threads from 1 x ")
    if split["source"] in ("measured", "beyond"):
        assert split["points"]
        side = (split["flops"] / 2) ** (1 / 3)
        assert quant["thread_macs"] == pytest.approx(side * side / cores, rel=1e-3)
        assert runtime.lib.at_qthreads_get() == quant["thread_macs"]
    else:  # one core, a busy machine, or noise that decided nothing: the built-in stays
        assert not quant.get("thread_macs") and runtime.lib.at_qthreads_get() == qsuite.BUILTIN_THREAD_MACS


@needs_x86_simd
def test_rerun_rebuilds_and_remeasures_nothing_unless_forced(tmp_path):
    first = run(tmp_path)
    assert first.compiled > 0 and first.measured > 0
    again = run(tmp_path)
    assert (again.compiled, again.measured) == (0, 0)
    assert {k.name for k in again.table.validated} == {k.name for k in first.table.validated}
    forced = run(tmp_path, f"at_sgemm_{SIMD}_nn_16x1_*", force=True)
    assert forced.compiled == 1 and forced.measured == 1


@needs_x86_simd
def test_interrupted_install_keeps_the_previous_table_and_resumes(tmp_path, monkeypatch):
    run(tmp_path, f"at_sgemm_{SIMD}_nn_16x1_*")
    before = (tmp_path / "tables" / "host.json").read_bytes()

    monkeypatch.setattr(install_mod, "CHUNK", 2)
    real_bench = measure.bench
    calls = []

    def bench_then_ctrl_c(*args, **kwargs):
        if kwargs["ks"] != install_mod.SCREEN_SETTINGS["ks"]:  # the full timing, after the screening
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
        return real_bench(*args, **kwargs)

    monkeypatch.setattr(measure, "bench", bench_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, f"at_sgemm_{SIMD}_nn_16x[1-6]_*")
    assert (tmp_path / "tables" / "host.json").read_bytes() == before

    monkeypatch.setattr(measure, "bench", real_bench)
    resumed = run(tmp_path, f"at_sgemm_{SIMD}_nn_16x[1-6]_*")
    # 16x1 came from the first install, 16x2 and 16x3 from the interrupted one
    # (its first chunk of two); only the rest is timed again.
    kernels = len(resumed.table.validated)
    assert kernels >= 4
    assert resumed.measured == kernels - 3


@needs_x86_simd
def test_wrong_and_uncompilable_kernels_are_rejected_and_the_rest_goes_on(tmp_path, monkeypatch):
    real_generate = codegen.generate

    def sabotage(spec):
        source = real_generate(spec)
        if spec.name.startswith("at_dgemm_generic_tn_2x2"):
            # Correct signature, wrong arithmetic: validation must catch it.
            wrong = (f"#include <stdint.h>\nvoid {spec.name}(int64_t K, const double *A, int64_t lda, "
                     "const double *B, int64_t ldb, double *C, int64_t ldc, double alpha, double beta)"
                     "{ (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)alpha; (void)beta;"
                     " for (int j = 0; j < 2; ++j) for (int i = 0; i < 2; ++i) C[i + j*ldc] = 1.0; }\n")
            return GeneratedSource(spec, wrong, source.language)
        if spec.name.startswith("at_sgemm_avx2_nt_8x2"):
            return GeneratedSource(spec, source.text + "\nthis is not C;\n", source.language)
        return source

    monkeypatch.setattr(codegen, "generate", sabotage)
    table = run(tmp_path).table
    reasons = {k.name.split("_u")[0]: k.reason for k in table.rejected}
    assert set(reasons) == {"at_dgemm_generic_tn_2x2", "at_sgemm_avx2_nt_8x2"}
    assert reasons["at_sgemm_avx2_nt_8x2"].startswith("compile error")
    assert "compile" not in reasons["at_dgemm_generic_tn_2x2"]
    assert len(table.validated) > 0
    assert not set(table.selection) & {k.name for k in table.rejected}


def test_a_pattern_matching_nothing_is_an_error(tmp_path):
    with pytest.raises(InstallError, match="matches"):
        run(tmp_path, "at_zgemm_*")


@needs_x86_simd
def test_cli_install_then_show_json(tmp_path, monkeypatch, capsys):
    from autotune.cli import main

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path))
    assert main(["install", "--quick", "--only", f"at_sgemm_{SIMD}_nn_16x2_*"]) == 0
    capsys.readouterr()
    assert main(["show", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["provenance"] == "measured"
    assert data["host"]["fingerprint"] and "fma" in data["host"]["features"]
    assert data["peak_gflops"]["f32"] > 0
    (kernel,) = data["kernels"]
    assert kernel["status"] == "validated" and kernel["best_gflops"] > 0
    assert (kernel["isa"], kernel["dtype"], kernel["mr"], kernel["nr"], kernel["trans"]) == \
        (SIMD, "f32", 16, 2, "nn")


@pytest.mark.arm
@pytest.mark.parametrize("target, patterns", [
    # Packed (pb, pa, papb), in-place and hybrid SME2 kernels, both dtypes, of the
    # sets for SVL 128 (nt 8x8), 256 (17x16, 8x8) and 512 (32x32, 17x16, 8x8).
    ("sme2", ("at_sgemm_sme2_*_32x32_*", "at_sgemm_sme2_nn_17x16_pbh_*", "at_dgemm_sme2_tn_8x8_*",
              "at_sgemm_sme2_nt_8x8_*")),
    ("neon", ("at_sgemm_neon_*_8x[1-3]_*", "at_dgemm_neon_tn_2x2_*", "at_dgemm_neon_tt_1x1_*")),
])
def test_arm_install_validates_under_emulation_and_stores_an_emulated_table(tmp_path, capsys, monkeypatch,
                                                                          target, patterns):
    from autotune.cli import main

    result = install(InstallOptions(target=target, home=tmp_path, only=patterns))
    table = result.table
    assert table.provenance == "emulated" and table.host.arch == "aarch64"
    assert table.validated and not table.rejected, [k.reason for k in table.rejected]
    assert all(k.model_score > 0 and not k.gflops_by_k for k in table.kernels)  # ranked, never timed
    # Each SME2 set validated under the emulator at its own vector length (a
    # kernel run at another one reads the wrong extents and fails validation).
    assert {k.spec.svl for k in table.kernels} == ({128, 256, 512} if target == "sme2" else {0})
    assert table.measurements.empty and not table.peak_gflops
    # The library is cross-built for the device: an aarch64 ELF (e_machine 183), never loaded here.
    assert result.library is not None and result.library.read_bytes()[18:20] == (183).to_bytes(2, "little")
    assert (result.library.parent / "libautotune.a").exists()
    assert table.tuning is None  # no tuning from emulated timings

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path))
    assert main(["show", "--target", target, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["provenance"] == "emulated" and data["host"]["svl_bits"] == (512 if target == "sme2" else 0)
    assert {k["status"] for k in data["kernels"]} == {"validated"}


def test_peak_is_never_below_a_validated_kernel():
    """A moment of low clock in the peak loop must not let kernels exceed "100 % of peak"."""
    from autotune.install import _best_peak
    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord

    fast = KernelRecord(KernelSpec("avx512", "f32", 16, 6, unroll=1), "validated", best_gflops=273.2)
    wrong = KernelRecord(KernelSpec("avx512", "f64", 8, 6, unroll=1), "rejected", "wrong result",
                         best_gflops=999.0)
    peaks = {"avx512": {"f32": 258.9, "f64": 129.6}, "avx2": {"f32": 126.6, "f64": 63.0}}
    assert _best_peak(peaks, [fast, wrong]) == {"f32": 273.2, "f64": 129.6}
    assert _best_peak(peaks) == {"f32": 258.9, "f64": 129.6}


@needs_x86_simd
def test_under_a_user_mode_emulator_nothing_timed_decides(tmp_path):
    """An install inside an emulated userland (host.emulator) measures no crossover and
    judges nothing: the emulator's times would decide; the model's parameters stay."""
    import dataclasses

    from autotune.host import detect

    host = dataclasses.replace(detect(), emulator="x86_64 emulated by a test")
    result = install(InstallOptions(quick=True, home=tmp_path, only=(f"at_sgemm_{SIMD}_nn_16x1_*",)), host=host)
    table = result.table
    assert table.provenance == "emulated" and result.library is not None
    assert "crossovers" not in table.settings and "held_out" not in (table.tuning or {})
    assert "edge" not in table.settings
    assert table.params["provenance"] == "emulated"


def test_each_depths_leaders_are_timed_again_in_rounds_and_the_rounds_decide(monkeypatch):
    """At K = 256 the grid caught NN 16x3 in a fast second (100 GFLOPS) and 24x4 in a slow
    one (80): timed in turns, 24x4 is the faster, and the packed path's workhorse
    follows the rounds.  TT 4x8 and 6x8 looked fastest of all and confirm low, handing
    their transposition's places to 3x12 and 5x8, and every transposition's top is
    timed again with them.  At K = 64 NN 8x8 looked fastest and confirms low."""
    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord
    import pandas as pd

    def record(mr, nr, at64, deep, dtype="f32", trans="nn"):
        spec = KernelSpec("avx2", dtype, mr, nr, trans[0] == "t", trans[1] == "t", "", 1)
        return KernelRecord(spec, "validated", object_hash=spec.name, best_gflops=deep,
                            gflops_by_k=((64, at64), (256, deep)))

    records = {r.spec.name: r for r in (
        record(16, 3, 50.0, 100.0), record(24, 4, 48.0, 80.0), record(8, 8, 70.0, 60.0),
        record(16, 2, 20.0, 20.0),
        record(4, 8, 45.0, 110.0, trans="tt"), record(6, 8, 44.0, 105.0, trans="tt"),
        record(3, 12, 43.0, 70.0, trans="tt"), record(5, 8, 42.0, 65.0, trans="tt"),
        record(2, 8, 10.0, 10.0, trans="tt"),
        record(16, 3, 30.0, 50.0, trans="tn"),
        record(8, 4, 40.0, 40.0, "f64"))}
    # Each kernel's speed at each depth in rounds the core kept its pace through; in
    # every third round the core ran slow (half its peak of 100) and the speed is
    # nonsense, which the medians leave out.
    truth = {("nn_16x3", 256): 85.0, ("nn_24x4", 256): 95.0, ("tt_4x8", 256): 40.0, ("tt_6x8", 256): 45.0,
             ("tt_3x12", 256): 65.0, ("tt_5x8", 256): 50.0, ("tn_16x3", 256): 52.0,
             ("nn_8x8", 64): 40.0, ("nn_16x3", 64): 49.0, ("nn_24x4", 64): 48.0, ("tt_4x8", 64): 44.0,
             ("tt_6x8", 64): 43.0, ("tn_16x3", 64): 30.0}
    calls = []

    def bench(harness, target, names, ks, pads, min_time_ms, repeats, place=0):
        calls.append((tuple(names), tuple(ks)))
        rows = []
        for n in names:
            rnd = sum(1 for c in calls if n in c[0] and c[1] == tuple(ks)) - 1
            slow = rnd % 3 == 1
            rows.append({"kernel": n, "median_gflops": 5.0 if slow else truth["_".join(n.split("_")[3:5]), ks[0]],
                         "pace_gflops": 50.0 if slow else 99.0})
        return pd.DataFrame(rows)

    class Timer:
        harness, target, peak, emulated = "harness", "target", 100.0, False

    timer = Timer()
    monkeypatch.setattr(measure, "bench", bench)
    confirmed = install_mod.confirm_leaders(records, {name: timer for name in records}, per_trans=2, rounds=3)
    # Per depth: three rounds of the two fastest of each transposition (TN's one kernel
    # competes with the others), then three more of every transposition's new top
    # together.  fp64 has one kernel: nothing to choose between.
    assert [ks for _, ks in calls] == [(64,)] * 6 + [(256,)] * 6
    nn, tt, tn = "at_sgemm_avx2_nn_", "at_sgemm_avx2_tt_", "at_sgemm_avx2_tn_16x3_u1"
    assert set(calls[0][0]) == {nn + "8x8_u1", nn + "16x3_u1", tt + "4x8_u1", tt + "6x8_u1", tn}
    assert set(calls[3][0]) == {nn + "16x3_u1", nn + "24x4_u1", tt + "4x8_u1", tt + "6x8_u1", tn}
    assert set(calls[6][0]) == {nn + "16x3_u1", nn + "24x4_u1", tt + "4x8_u1", tt + "6x8_u1", tn}
    assert set(calls[9][0]) == {nn + "16x3_u1", nn + "24x4_u1", tt + "3x12_u1", tt + "5x8_u1", tn}
    figures = {name: dict(r.gflops_by_k) for name, r in confirmed.items()}
    assert figures == {nn + "8x8_u1": {64: 40.0, 256: 60.0}, nn + "16x3_u1": {64: 49.0, 256: 85.0},
                       nn + "24x4_u1": {64: 48.0, 256: 95.0}, tt + "4x8_u1": {64: 44.0, 256: 40.0},
                       tt + "6x8_u1": {64: 43.0, 256: 45.0}, tt + "3x12_u1": {64: 43.0, 256: 65.0},
                       tt + "5x8_u1": {64: 42.0, 256: 50.0}, tn: {64: 30.0, 256: 52.0}}
    assert install_mod.main_kernels(list({**records, **confirmed}.values()))["f32"] == (24, 4)
    assert install_mod.main_kernels(list(records.values()))["f32"] == (16, 3)


def test_rounds_a_shared_host_slowed_leave_the_fastest_kernel_on_top(monkeypatch):
    """The host slows most rounds by 15-25 % while the peak loop's pace looks steady
    (2-vCPU Zen 3): the medians put NN 24x4 and 16x6 under 8x14's grid figure, and
    the packed path took 8x14.  The second fastest round of each is its speed, and
    24x4 stays the workhorse."""
    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord
    import pandas as pd

    def record(mr, nr, deep):
        spec = KernelSpec("avx2", "f32", mr, nr, False, False, "", 1)
        return KernelRecord(spec, "validated", object_hash=spec.name, best_gflops=deep,
                            gflops_by_k=((256, deep),))

    records = {r.spec.name: r for r in (record(24, 4, 100.0), record(16, 6, 99.0), record(15, 4, 90.0),
                                        record(8, 14, 88.0), record(8, 8, 70.0))}
    truth = {"24x4": 97.0, "16x6": 96.0, "15x4": 85.0, "8x14": 83.0, "8x8": 70.0}
    slowdown = [0.8, 1.0, 0.75, 0.85, 1.0]  # the same moments for every contender of a round
    seen: dict[str, int] = {}

    def bench(harness, target, names, ks, pads, min_time_ms, repeats, place=0):
        rows = []
        for n in names:
            rnd = seen[n] = seen.get(n, -1) + 1
            rows.append({"kernel": n, "median_gflops": truth[n.split("_")[4]] * slowdown[rnd % 5],
                         "pace_gflops": 99.0})
        return pd.DataFrame(rows)

    class Timer:
        harness, target, peak, emulated = "harness", "target", 100.0, False

    monkeypatch.setattr(measure, "bench", bench)
    confirmed = install_mod.confirm_leaders(records, {name: Timer() for name in records})
    figures = {name.split("_")[4]: dict(r.gflops_by_k)[256] for name, r in {**records, **confirmed}.items()}
    assert figures["24x4"] == 97.0 and figures["16x6"] == 96.0 and figures["15x4"] == 85.0
    assert install_mod.main_kernels(list({**records, **confirmed}.values()))["f32"] == (24, 4)
    # The medians of the same rounds would have handed the block to 8x14's grid figure.
    assert statistics.median([97.0 * f for f in slowdown]) < 88.0


def test_a_confirmation_the_host_slowed_throughout_changes_no_figure(monkeypatch):
    """Rounds whose leaders all ran at half their grid figures (the window, not the
    kernels) are timed again, and when they stay slow every figure keeps the grid's:
    16x4 (grid 95) stays over the unconfirmed 8x10 (78).  A window at the grid's
    pace that finds one lucky figure still lowers it."""
    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord
    import pandas as pd

    def record(mr, nr, at64):
        spec = KernelSpec("avx2", "f32", mr, nr, False, False, "", 1)
        return KernelRecord(spec, "validated", object_hash=spec.name, best_gflops=at64,
                            gflops_by_k=((64, at64),))

    records = {r.spec.name: r for r in (record(16, 4, 95.0), record(24, 3, 93.0), record(16, 6, 89.0),
                                        record(8, 10, 78.0))}
    calls = []

    def slow(harness, target, names, ks, pads, min_time_ms, repeats, place=0):
        calls.append(tuple(names))
        return pd.DataFrame([{"kernel": n, "median_gflops": 0.5 * dict(records[n].gflops_by_k)[64],
                              "pace_gflops": 99.0} for n in names])

    class Timer:
        harness, target, peak, emulated = "harness", "target", 100.0, False

    timer = Timer()
    monkeypatch.setattr(measure, "bench", slow)
    assert install_mod.confirm_leaders(records, {n: timer for n in records}) == {}
    assert len(calls) == 5 * (1 + install_mod.CONFIRM_SLOW_RETRIES)

    def lucky_24x3(harness, target, names, ks, pads, min_time_ms, repeats, place=0):
        truth = {"16x4": 94.0, "24x3": 60.0, "16x6": 90.0, "8x10": 78.0}
        return pd.DataFrame([{"kernel": n, "median_gflops": truth[n.split("_")[4]], "pace_gflops": 99.0}
                             for n in names])

    monkeypatch.setattr(measure, "bench", lucky_24x3)
    confirmed = install_mod.confirm_leaders(records, {n: timer for n in records})
    assert {n.split("_")[4]: dict(r.gflops_by_k)[64] for n, r in confirmed.items()} == \
        {"16x4": 94.0, "24x3": 60.0, "16x6": 90.0, "8x10": 78.0}  # 8x10 confirmed in 24x3's place


def test_the_rounds_figure_is_the_second_fastest_sample():
    assert install_mod.rounds_figure([50.0, 90.0, 70.0, 95.0, 60.0]) == 90.0
    assert install_mod.rounds_figure([40.0, 80.0]) == 80.0
    assert install_mod.rounds_figure([33.0]) == 33.0


def test_points_timed_on_a_slowed_core_or_with_spread_repeats_are_timed_again(monkeypatch, tmp_path):
    """The harness reports the core's pace beside every grid point; a point timed
    while the core ran the peak loop under STEADY of its peak, or whose median
    repeat fell that far under its best, is timed again, and the steadier sample
    of each point is kept, in the journal too."""
    import types

    import pandas as pd

    from autotune.specs import KernelSpec

    specs = [KernelSpec("avx2", "f64", mr, 4) for mr in (4, 8, 12, 16)]
    steady, slowed_once, spread_once, always_slow = (s.name for s in specs)
    # Per kernel and run: (median GFLOPS, best, pace) at K = 16 and 64; the peak loop's peak is 100.
    runs = {steady: [((30, 31, 99), (40, 40, 98))],
            slowed_once: [((20, 20, 90), (21, 21, 50)), ((30, 30, 95), (42, 43, 97))],
            spread_once: [((20, 30, 99), (40, 41, 99)), ((29, 30, 99), (35, 41, 99))],
            always_slow: [((10, 10, 40), (12, 12, 45)), ((14, 14, 60), (11, 11, 30)),
                          ((9, 9, 35), (13, 13, 55))]}
    calls = []

    def bench(harness, target, names, ks, pads, min_time_ms, repeats, progress=None, place=0):
        assert place == 0  # one pass: the operands stay where they were allocated
        calls.append(tuple(names))
        rows = []
        for name in names:
            attempt = sum(1 for c in calls if name in c) - 1
            for k, (median, best, pace) in zip(ks, runs[name][attempt]):
                rows.append({"kernel": name, "K": k, "pad": 0, "median_gflops": float(median),
                             "best_gflops": float(best), "pace_gflops": float(pace)})
        return pd.DataFrame(rows)

    monkeypatch.setattr(measure, "bench", bench)
    objects = {s.name: types.SimpleNamespace(hash=s.name) for s in specs}
    settings = {"ks": [16, 64], "pads": [0], "min_time_ms": 1.0, "repeats": 3}
    path = tmp_path / "journal.jsonl"
    timer = install_mod.KernelTimer("harness", "target", objects, install_mod.Journal(path), None, "avx2",
                                    peak=100.0)
    assert timer.time(specs, settings) == 4
    # Every kernel once; the three disturbed ones again; the one still slow a third time.
    assert calls == [(steady, slowed_once, spread_once, always_slow), (slowed_once, spread_once, always_slow),
                     (always_slow,)]
    assert timer.retimed == {slowed_once, spread_once, always_slow} and timer.unsteady == {always_slow}

    def by_k(journal, spec):
        key = (spec.name, install_mod.settings_key(settings))
        return {r["K"]: (r["median_gflops"], r["pace_gflops"]) for r in journal.benches[key]}

    reread = install_mod.Journal(path)  # the next install resumes from the kept samples
    for journal in (timer.journal, reread):
        assert by_k(journal, specs[0]) == {16: (30.0, 99.0), 64: (40.0, 98.0)}
        assert by_k(journal, specs[1]) == {16: (30.0, 95.0), 64: (42.0, 97.0)}
        assert by_k(journal, specs[2]) == {16: (29.0, 99.0), 64: (40.0, 99.0)}  # per point
        assert by_k(journal, specs[3]) == {16: (14.0, 60.0), 64: (13.0, 55.0)}

    # Without a peak (an unknown core) only the repeats' spread is judged.
    calls.clear()
    plain = install_mod.KernelTimer("harness", "target", {steady: objects[steady]},
                                    install_mod.Journal(tmp_path / "other.jsonl"), None, "avx2")
    runs[steady] = [((5, 5, 1), (5, 5, 1))]
    assert plain.time(specs[:1], settings) == 1 and calls == [(steady,)] and not plain.retimed


def test_the_pace_a_point_is_judged_by_is_the_fastest_seen(monkeypatch, tmp_path):
    """The pace loop's speed measured once at the start may itself come from a slow
    moment: a faster pace beside any point raises the reference, for the timers of
    the family that share it, and points timed at a pace under STEADY of the raised
    one are timed again."""
    import types

    import pandas as pd

    from autotune.specs import KernelSpec

    specs = [KernelSpec("avx2", "f64", mr, 4) for mr in (4, 8)]
    first, second = (s.name for s in specs)
    # Per kernel and run: (GFLOPS, pace) at K = 16; the start measured the pace at 60.
    runs = {first: [(30, 70), (40, 98)], second: [(41, 100)]}
    calls = []

    def bench(harness, target, names, ks, pads, min_time_ms, repeats, progress=None, place=0):
        calls.append(tuple(names))
        rows = []
        for name in names:
            gflops, pace = runs[name][sum(1 for c in calls if name in c) - 1]
            rows.append({"kernel": name, "K": 16, "pad": 0, "median_gflops": float(gflops),
                         "best_gflops": float(gflops), "pace_gflops": float(pace)})
        return pd.DataFrame(rows)

    monkeypatch.setattr(measure, "bench", bench)
    objects = {s.name: types.SimpleNamespace(hash=s.name) for s in specs}
    settings = {"ks": [16], "pads": [0], "min_time_ms": 1.0, "repeats": 1}
    shared = install_mod.PaceReference(60.0)
    journal = install_mod.Journal(tmp_path / "j.jsonl")
    one = install_mod.KernelTimer("harness", "target", {first: objects[first]}, journal, None, "avx2", shared)
    two = install_mod.KernelTimer("harness", "target", {second: objects[second]}, journal, None, "avx2", shared)
    assert two.time(specs[1:], settings) == 1 and shared.value == 100.0 and one.peak == 100.0
    # 70 was steady against the start's 60; against 100 it is a slowed core's.
    assert one.time(specs[:1], settings) == 1 and one.retimed == {first}
    key = (first, install_mod.settings_key(settings))
    assert [r["median_gflops"] for r in journal.benches[key]] == [40.0]
    unknown = install_mod.PaceReference(None)
    unknown.see([{"pace_gflops": 100.0}])
    assert unknown.value is None  # no pace to judge by (an emulator's) stays unknown


def test_a_grid_of_passes_keeps_each_points_median_pass(monkeypatch, tmp_path):
    """Every kernel once per pass, all kernels in turn; each point keeps its median
    pass among those the core kept its pace through, and a kernel that crashed is
    not run again."""
    import types

    import pandas as pd

    from autotune.specs import KernelSpec

    specs = [KernelSpec("avx2", "f32", mr, 4) for mr in (8, 16, 24)]
    drifting, slowed, crashed = (s.name for s in specs)
    # Per kernel, per pass: (GFLOPS, pace) at K = 16 and 64; the peak loop's peak is 100.
    runs = {drifting: [((50, 99), (80, 99)), ((70, 98), (60, 99)), ((60, 99), (90, 97))],
            slowed: [((90, 99), (90, 99)), ((30, 40), (30, 40)), ((10, 45), (20, 45))],
            crashed: [None]}
    calls = []

    places = []

    def bench(harness, target, names, ks, pads, min_time_ms, repeats, progress=None, place=0):
        calls.append(tuple(names))
        places.append(place)
        rows = []
        for name in names:
            attempt = sum(1 for c in calls if name in c) - 1
            if runs[name][attempt] is None:
                continue
            for k, (gflops, pace) in zip(ks, runs[name][attempt]):
                rows.append({"kernel": name, "K": k, "pad": 0, "median_gflops": float(gflops),
                             "best_gflops": float(gflops), "pace_gflops": float(pace)})
        return pd.DataFrame(rows)

    monkeypatch.setattr(measure, "bench", bench)
    objects = {s.name: types.SimpleNamespace(hash=s.name) for s in specs}
    settings = {"ks": [16, 64], "pads": [0], "min_time_ms": 0.7, "repeats": 1, "passes": 3}
    timer = install_mod.KernelTimer("harness", "target", objects, install_mod.Journal(tmp_path / "j.jsonl"),
                                    None, "avx2", peak=100.0)
    assert timer.time(specs, settings) == 2
    assert calls == [(drifting, slowed, crashed), (drifting, slowed), (drifting, slowed)]
    assert places == [0, 1, 2]  # each pass moves the operands within their pages
    key = install_mod.settings_key(settings)

    def by_k(name):
        return {r["K"]: r["median_gflops"] for r in timer.journal.benches[(name, key)]}

    assert by_k(drifting) == {16: 60.0, 64: 80.0}  # the median of three, point by point
    assert by_k(slowed) == {16: 90.0, 64: 90.0}  # the one pass the core kept its pace through
    assert (crashed, key) not in timer.journal.benches and not timer.retimed


def test_under_an_emulator_the_grid_is_one_pass_kept_as_it_came(monkeypatch, tmp_path):
    """Timings under an emulator measure the emulator: no passes, no retries."""
    import types

    import pandas as pd

    from autotune.specs import KernelSpec

    spec = KernelSpec("neon", "f32", 8, 4)
    calls = []

    def bench(harness, target, names, ks, pads, min_time_ms, repeats, progress=None, place=0):
        calls.append((tuple(names), place))
        return pd.DataFrame([{"kernel": n, "K": k, "pad": 0, "median_gflops": 1.0, "best_gflops": 3.0,
                              "pace_gflops": 5.0} for n in names for k in ks])

    monkeypatch.setattr(measure, "bench", bench)
    timer = install_mod.KernelTimer("harness", types.SimpleNamespace(under_emulator=True),
                                    {spec.name: types.SimpleNamespace(hash="h")},
                                    install_mod.Journal(tmp_path / "j.jsonl"), None, "neon", peak=100.0)
    settings = {"ks": [16, 64], "pads": [0], "min_time_ms": 0.7, "repeats": 1, "passes": 3}
    assert timer.time([spec], settings) == 1
    assert calls == [((spec.name,), 0)] and not timer.retimed


def test_a_kernel_s_record_takes_per_depth_the_fastest_tight_layout():
    from autotune.specs import KernelSpec

    def row(k, pad, median, best):
        return {"kernel": "k", "K": k, "pad": pad, "median_gflops": median, "best_gflops": best}

    spec = KernelSpec("generic", "f32", 2, 2)
    rows = [row(64, 0, 10.0, 11.0), row(64, 17, 30.0, 31.0), row(16, 0, 5.0, 6.0), row(16, 0, 7.0, 7.5)]
    record = install_mod._measured_record(spec, "h", rows)
    assert record.gflops_by_k == ((16, 7.0), (64, 10.0))  # padded rows do not count beside tight ones
    assert record.best_gflops == 31.0 and record.validated
    only_padded = install_mod._measured_record(spec, "h", [row(64, 17, 30.0, 31.0)])
    assert only_padded.gflops_by_k == ((64, 30.0),)


def test_the_grids_leaders_join_the_main_kernel_candidates():
    """A confirmation run through a slow minute left fp64 NT 8x5 at 25 GFLOPS (the
    grid: 49) under NT 6x4's unconfirmed 36: the plans can only pick 8x5 if it is
    among the candidates, so the grid's own leaders are."""
    from types import SimpleNamespace

    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord
    import pandas as pd

    def record(mr, nr, figure):
        spec = KernelSpec("avx2", "f64", mr, nr, False, True, "", 1)
        return KernelRecord(spec, "validated", object_hash=spec.name, best_gflops=figure,
                            gflops_by_k=((64, 30.0), (256, figure)))

    kernels = [record(6, 4, 35.6), record(4, 4, 35.4), record(6, 5, 35.4), record(8, 5, 24.9),
               record(8, 6, 30.1), record(2, 2, 10.0)]
    grid = {"8x5": 49.3, "8x6": 47.6, "6x4": 35.6, "4x4": 35.4, "6x5": 35.4, "2x2": 10.0}
    rows = [(r.name, k, g if k == 256 else 30.0) for r in kernels for k in (64, 256)
            for g in [grid[f"{r.spec.mr}x{r.spec.nr}"]]]
    stored = SimpleNamespace(selected=lambda: tuple(kernels),
                             measurements=pd.DataFrame(rows, columns=["kernel", "K", "median_gflops"]))
    values = {r.name: i + 1 for i, r in enumerate(kernels)}
    names = [n.split("_")[4] for n, _ in install_mod.main_candidates(stored, "f64", values, count=2)]
    # the figures' two, the grid's two; the model's two largest blocks are the grid's
    assert names == ["6x4", "4x4", "8x5", "8x6"]
    assert [v for _, v in install_mod.main_candidates(stored, "f64", values, count=1)] == [1, 4, 5]
    assert install_mod.main_candidates(stored, "f32", values) == []


def test_the_models_large_blocks_join_the_main_kernel_candidates():
    """The figures rank kernels alone; in a packed product the larger register block
    won (Xeon: f64 NN 24x8 and 32x5 at 0.77 of NT 8x7's figure ran a packed 512^3
    1.16x faster).  Per transposition, the blocks of the highest compute-to-memory
    ratio within MODEL_FLOOR of the best figure are candidates; slower ones are not."""
    from types import SimpleNamespace

    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord
    import pandas as pd

    def record(trans_b, mr, nr, figure):
        spec = KernelSpec("avx512", "f64", mr, nr, False, trans_b, "", 1)
        return KernelRecord(spec, "validated", object_hash=spec.name, best_gflops=figure,
                            gflops_by_k=((256, figure),))

    kernels = [record(True, 8, 7, 81.4), record(True, 8, 6, 79.8), record(True, 8, 5, 73.8),
               record(False, 24, 8, 63.0), record(False, 32, 5, 61.9), record(False, 28, 4, 65.6),
               record(False, 16, 12, 56.4), record(True, 16, 12, 58.0), record(False, 4, 4, 40.0)]
    stored = SimpleNamespace(selected=lambda: tuple(kernels),
                             measurements=pd.DataFrame(columns=["kernel", "K", "median_gflops"]))
    values = {r.name: i + 1 for i, r in enumerate(kernels)}
    names = [n.split("_", 3)[3] for n, _ in install_mod.main_candidates(stored, "f64", values, count=2)]
    # by figure: nt 8x7, 8x6; by the model: nn 24x8 (6.0) and 32x5 (5.9), not 16x12
    # (56.4 < 0.7 x 81.4); nt 16x12 (6.9), then nt 8x7 (already in)
    assert names == ["nt_8x7_u1", "nt_8x6_u1", "nn_24x8_u1", "nn_32x5_u1", "nt_16x12_u1"]
    assert install_mod.MODEL_FLOOR * 81.4 > 56.4


def test_place_candidates_are_the_transpositions_own_kernels_read_in_place():
    """The in-place main kernel's candidates, per dtype and transposition: the best by
    their figures at the depth nearest PLACE_K (the Xeon's one-vector 16x5 and 16x7),
    then the largest register blocks within MODEL_FLOOR of that best (64x5 and 32x8,
    which ran 128^3 in place 1.5x faster); never another transposition's kernel nor
    one of a packed format."""
    from types import SimpleNamespace

    from autotune.specs import KernelSpec
    from autotune.table import KernelRecord

    def record(mr, nr, at_64, trans_b=False, variant=""):
        spec = KernelSpec("avx512", "f32", mr, nr, False, trans_b, variant, 1)
        return KernelRecord(spec, "validated", object_hash=spec.name, best_gflops=at_64,
                            gflops_by_k=((16, 100.0), (64, at_64), (256, 250.0 - at_64)))

    kernels = [record(16, 5, 162.0), record(16, 7, 160.0), record(64, 5, 150.0), record(32, 8, 140.0),
               record(48, 8, 100.0), record(8, 8, 120.0), record(64, 6, 170.0, trans_b=True),
               record(64, 8, 165.0, variant="pa")]
    stored = SimpleNamespace(selected=lambda: tuple(kernels))
    values = {r.name: i + 1 for i, r in enumerate(kernels)}
    got = install_mod.place_candidates(stored, "f32", "nn", values, count=3)
    # By figure 16x5, 16x7, 64x5; by the model 32x8, 16x7, 64x5: 48x8 is the largest
    # block, but under 0.7 of the best figure at K = 64.
    assert [n.split("_", 4)[4] for n, _ in got] == ["16x5_u1", "16x7_u1", "64x5_u1", "32x8_u1"]
    assert [v for _, v in got] == [1, 2, 3, 4]
    assert [n.split("_", 4)[4] for n, _ in install_mod.place_candidates(stored, "f32", "nn", values, count=1)] \
        == ["16x5_u1", "32x8_u1"]
    assert [n for n, _ in install_mod.place_candidates(stored, "f32", "nt", values)] == [kernels[6].name]
    assert install_mod.place_candidates(stored, "f64", "nn", values) == []
