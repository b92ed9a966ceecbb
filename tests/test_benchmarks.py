"""The benchmark machinery computes correct results and correct arithmetic.

No timing is asserted here (timings belong in benchmarks/): the C harness must
compute C correctly through every installed peer, a missing peer must be reported,
and the runner must parse the harness, compute ratios, regime means and targets
right on a tiny run.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import benchmarks
from autotune.reports import data as report_data
from autotune import link as rt_library
from benchmarks.harness import Config, Point, Shape, build_harness, run_peer
from benchmarks.peers import Peer, discover, peer_environment
from benchmarks.results import add_ratios, evaluate_targets, geomean, points_frame, regime, regime_means
from tests.isa import cpu_features

SHAPES = [Shape(8, 8, 8), Shape(13, 33, 23), Shape(1, 17, 5), Shape(35, 32, 64), Shape(8, 8, 8, 3)]


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench-build")


@pytest.fixture(scope="session")
def exe(build_dir: Path) -> Path:
    return build_harness(build_dir)


@pytest.fixture(scope="session")
def peers(built: rt_library.LibraryBuild, build_dir: Path) -> list[Peer]:
    return discover(built.library, build_dir)


PEER_IDS = [("autotune", "cblas"), ("openblas", "cblas"), ("blis", "cblas"), ("mkl", "cblas"),
            ("autotune", "plan"), ("libxsmm", "plan"), ("mkl", "plan")]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("align", [64, 16])
@pytest.mark.parametrize("library,interface", PEER_IDS)
def test_harness_computes_correct_results(exe: Path, peers: list[Peer], library: str, interface: str,
                                          dtype: str, align: int) -> None:
    peer = next(p for p in peers if (p.library, p.interface) == (library, interface))
    if not peer.found:
        pytest.skip(f"{library} not installed here: {peer.missing}")
    points = run_peer(exe, peer, Config(dtype, 1, align, 1), SHAPES, min_time=1e-4, repeats=1)
    assert [p.shape for p in points] == SHAPES
    for p in points:
        assert p.status == "ok", (p.shape, p.status, p.detail)
        assert p.check, (p.shape, p.err)
        assert p.err < (p.shape.K + 4) * np.finfo(np.float32 if dtype == "f32" else np.float64).eps
        assert p.best_s > 0 and p.median_s >= p.best_s
        assert p.cold_best_s > 0 and p.cold_median_s >= p.cold_best_s
        # The peak beside the point: measured wherever bench_gemm has a loop for the CPU, else absent.
        assert (p.core_gflops > 0) if _cpu_has_fma_loop() else math.isnan(p.core_gflops), p.shape


#: Transposed operands: A stored K x M (tn, tt), B N x K (nt, tt); odd sizes, a column of C.
TRANSPOSED = [Shape(13, 33, 23, 1, "tn"), Shape(40, 1, 70, 1, "tn"), Shape(17, 5, 9, 1, "nt"),
              Shape(9, 31, 12, 1, "tt"), Shape(6, 7, 8, 2, "tn")]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("library,interface", PEER_IDS)
def test_harness_transposes_as_blas_does(exe: Path, peers: list[Peer], library: str, interface: str,
                                         dtype: str) -> None:
    # Every BLAS agrees with the harness's reference on what op(A) op(B) is, so a wrong
    # reference (or a wrong leading dimension) fails them all; a JIT may decline a
    # transposition, but never computes it wrong.
    peer = next(p for p in peers if (p.library, p.interface) == (library, interface))
    if not peer.found:
        pytest.skip(f"{library} not installed here: {peer.missing}")
    points = run_peer(exe, peer, Config(dtype, 1, 16, 0), TRANSPOSED, min_time=1e-4, repeats=1)
    assert [p.shape for p in points] == TRANSPOSED
    for p in points:
        if interface == "plan" and library != "autotune" and p.status == "unsupported":
            continue
        assert p.status == "ok" and p.check, (p.shape, p.status, p.detail, p.err)


def test_shapes_name_their_transposition() -> None:
    shape = benchmarks._shape("256,4,256:tn")
    assert shape == Shape(256, 4, 256, 1, "tn") and shape.label == "256x4x256 tn" and shape.arg == "256,4,256:tn"
    assert not shape.square and benchmarks._shape("8,8,8,3") == Shape(8, 8, 8, 3)
    assert benchmarks._shape("8,8,8").label == "8x8x8"
    for bad in ("8,8,8:xt", "8,8,8:t", "8,8:nn", "8,8,0"):
        with pytest.raises(argparse.ArgumentTypeError):
            benchmarks._shape(bad)
    with pytest.raises(ValueError):
        Shape(1, 1, 1, 1, "nx")


def _cpu_has_fma_loop() -> bool:
    """Whether bench_gemm measures the core's peak here: AVX2 + FMA or AVX-512 on x86, NEON
    on Arm.  It asks the CPU itself (__builtin_cpu_supports), so AUTOTUNE_ISA is set aside."""
    import platform

    if platform.machine() in ("aarch64", "arm64"):
        return True
    features = cpu_features()
    return {"avx2", "fma"} <= features or "avx512f" in features


def test_two_threads_still_correct(exe: Path, peers: list[Peer]) -> None:
    ours = [p for p in peers if p.library == "autotune"]
    for peer in ours:
        for point in run_peer(exe, peer, Config("f64", 2, 64, 0), [Shape(96, 80, 64)], min_time=1e-4, repeats=1):
            assert point.status == "ok" and point.check, (peer, point.detail, point.err)


def test_missing_peer_is_reported_not_dropped(exe: Path, tmp_path: Path) -> None:
    found = discover(tmp_path / "nowhere" / "libautotune.so", tmp_path)
    ours = [p for p in found if p.library == "autotune"]
    assert len(ours) == 2 and all(not p.found and "does not exist" in p.missing for p in ours)
    assert {p.library for p in found} == {"autotune", "openblas", "blis", "mkl", "libxsmm"}
    ghost = Peer("ghost", "cblas", "cblas", None, "not installed")
    points = run_peer(exe, ghost, Config("f32", 1, 64, 0), SHAPES[:2], min_time=1e-4, repeats=1)
    assert [(p.status, p.detail) for p in points] == [("missing", "not installed")] * 2


def test_a_crashing_peer_is_reported_per_shape(exe: Path, tmp_path: Path) -> None:
    source = tmp_path / "crash.c"
    source.write_text("#include <signal.h>\nvoid cblas_sgemm(void) { raise(SIGILL); }\n"
                      "void cblas_dgemm(void) { raise(SIGILL); }\n")
    library = tmp_path / "libcrash.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    crashing = Peer("crasher", "cblas", "cblas", library)
    points = run_peer(exe, crashing, Config("f32", 1, 64, 0), SHAPES[:2], min_time=1e-4, repeats=1)
    assert [(p.status, p.detail) for p in points] == [("failed", "crashed (SIGILL)")] * 2


def test_a_library_without_the_entry_point_fails_per_shape(exe: Path, built: rt_library.LibraryBuild) -> None:
    wrong_api = Peer("autotune", "plan", "xsmm", built.library)  # no libxsmm_smmdispatch in it
    points = run_peer(exe, wrong_api, Config("f32", 1, 64, 0), SHAPES[:2], min_time=1e-4, repeats=1)
    assert all(p.status == "failed" and "symbols" in p.detail for p in points)


# -- the runner's arithmetic on made-up measurements ------------------------------

def _point(library: str, interface: str, shape: Shape, seconds: float, dtype: str = "f32",
           threads: int = 1, status: str = "ok", check: bool = True) -> Point:
    peer = Peer(library, interface, "cblas", Path("/x"))
    return Point(peer, Config(dtype, threads, 64, 0), shape, status, "", 1e-8, check, seconds, seconds * 1.1,
                 seconds * 3, seconds * 4)


def test_ratios_best_peer_and_peak_fraction() -> None:
    s = Shape(10, 10, 10)  # 2000 flops
    pts = [_point("autotune", "cblas", s, 1e-6), _point("openblas", "cblas", s, 2e-6),
           _point("mkl", "cblas", s, 4e-6), _point("blis", "cblas", s, 1e-9, status="missing")]
    frame = add_ratios(points_frame(pts, []), {"f32": 4.0})
    ours = frame[frame["library"].eq("autotune")].iloc[0]
    assert ours["gflops"] == pytest.approx(2.0)
    assert ours["gflops_median"] == pytest.approx(2.0 / 1.1)
    assert ours["cold_gflops"] == pytest.approx(2.0 / 3)
    assert ours["ratio"] == pytest.approx(2.0)     # against the best valid peer, OpenBLAS
    assert ours["best_peer"] == "openblas"
    assert ours["peak_fraction"] == pytest.approx(0.5)
    by_lib = frame.set_index("library")["ratio"]
    assert by_lib["mkl"] == pytest.approx(4.0) and math.isnan(by_lib["blis"])


def test_peak_fraction_divides_by_the_peak_measured_beside_the_point() -> None:
    s = Shape(10, 10, 10)  # 2000 flops: 2 GFLOPS at 1 us
    beside = replace(_point("autotune", "cblas", s, 1e-6), core_gflops=2.5)
    two = replace(_point("autotune", "cblas", s, 0.5e-6, threads=2), core_gflops=5.0)
    unmeasured = _point("autotune", "cblas", Shape(20, 10, 5), 1e-6)  # no beside figure: the run's peak
    frame = add_ratios(points_frame([beside, two, unmeasured], []), {"f32": 8.0})
    assert list(frame["peak_fraction"]) == pytest.approx([0.8, 0.4, 0.25])


def test_peak_is_raised_to_the_fastest_correct_one_thread_result() -> None:
    from benchmarks import run_peak
    s = Shape(10, 10, 10)  # 2000 flops
    pts = [_point("autotune", "cblas", s, 1e-6), _point("openblas", "cblas", s, 0.5e-6),
           _point("mkl", "cblas", s, 1e-9, status="wrong")]
    frame = points_frame(pts, [])
    # OpenBLAS's 4 GFLOPS beats a table peak of 3; the wrong 2000 GFLOPS never counts.
    assert run_peak({"f32": 3.0, "f64": 9.0}, frame) == {"f32": pytest.approx(4.0), "f64": 9.0}
    assert run_peak({"f32": 5.0}, frame) == {"f32": 5.0}


def test_wrong_results_never_count() -> None:
    s = Shape(4, 4, 4)
    pts = [_point("autotune", "cblas", s, 1e-6), _point("openblas", "cblas", s, 1e-9, check=False)]
    frame = add_ratios(points_frame(pts, []), {})
    assert set(frame["status"]) == {"ok", "wrong"}
    assert math.isnan(frame.loc[frame["library"].eq("autotune"), "ratio"].iloc[0])


def test_regimes_and_geometric_means() -> None:
    irregular = [Shape(13, 33, 23)]
    assert regime(Shape(128, 128, 128), irregular) == "small"
    assert regime(Shape(256, 256, 256), irregular) == "large"
    assert regime(Shape(13, 33, 23), irregular) == "irregular"
    assert regime(Shape(8, 8, 8, 10000), irregular) == "batch"
    assert geomean([2.0, 8.0, math.nan]) == pytest.approx(4.0)
    pts = []
    for shape, ratio in ((Shape(8, 8, 8), 2.0), (Shape(16, 16, 16), 0.5), (Shape(13, 33, 23), 3.0)):
        pts += [_point("autotune", "cblas", shape, 1e-6), _point("openblas", "cblas", shape, ratio * 1e-6)]
    means = regime_means(add_ratios(points_frame(pts, irregular), {"f32": 100.0})).set_index("regime")
    assert means.at["small", "geomean"] == pytest.approx(1.0)
    assert means.at["small", "min_ratio"] == pytest.approx(0.5)
    assert means.at["small", "worst_shape"] == "16x16x16"
    assert means.at["irregular", "geomean"] == pytest.approx(3.0)


def test_targets_say_by_how_much_they_are_missed() -> None:
    pts = []
    for n in (8, 16):
        s = Shape(n, n, n)
        pts += [_point("autotune", "cblas", s, 1e-6), _point("mkl", "cblas", s, 1.2e-6)]
    big = Shape(256, 256, 256)
    pts += [_point("autotune", "cblas", big, 1e-3), _point("mkl", "cblas", big, 0.9e-3)]
    frame = add_ratios(points_frame(pts, []), {"f32": 100.0})
    targets = {t.name: t for t in evaluate_targets(frame)}
    small = targets["cblas f32 small+irregular, 1 thread, align 64"]
    assert small.met is False and "geomean 0.30x short" in small.shortfall
    large = targets["large f32, 1 thread(s) vs MKL"]
    assert large.met is False and "0.05x short" in large.shortfall
    assert targets["plan f32 small+irregular, 1 thread, align 64"].met is None  # no plan peers measured
    # 256^3 at 33.6 GFLOPS is 34 % of a 100 GFLOPS core.
    assert targets["large f32, 1 thread(s) vs peak"].met is False


def test_targets_also_compare_at_equal_clock() -> None:
    # MKL ran 256^3 at 40 GFLOPS beside a peak of 50 (0.8), ours at 36 beside 36 (1.0):
    # 0.9x as measured, 1.25x at equal clock.
    big = Shape(256, 256, 256)
    flops = big.flops
    ours = replace(_point("autotune", "cblas", big, flops / 36e9), core_gflops=36.0)
    mkl = replace(_point("mkl", "cblas", big, flops / 40e9), core_gflops=50.0)
    targets = {t.name: t for t in evaluate_targets(add_ratios(points_frame([ours, mkl], []), {"f32": 50.0}))}
    large = targets["large f32, 1 thread(s) vs MKL"]
    assert large.met is False and "min 0.90x" in large.measured
    assert "at equal clock geomean 1.25x, min 1.25x" in large.measured


def test_the_peak_target_is_one_threads() -> None:
    big = Shape(256, 256, 256)
    pts = [_point("autotune", "cblas", big, 1e-3, threads=t) for t in (1, 2)]
    pts += [_point("mkl", "cblas", big, 1e-3, threads=t) for t in (1, 2)]
    targets = {t.name for t in evaluate_targets(add_ratios(points_frame(pts, []), {"f32": 30.0}))}
    assert "large f32, 1 thread(s) vs peak" in targets and "large f32, 2 thread(s) vs MKL" in targets
    assert "large f32, 2 thread(s) vs peak" not in targets


def test_python_level_parses_and_computes(tmp_path: Path) -> None:
    # An empty home: autotune.gemm is numpy's fallback there, which is enough to check the plumbing.
    doc = benchmarks.run_python_level(tmp_path, (8, 12), 16, 1e-4, 1)
    assert doc.get("rows"), doc
    frame = add_ratios(benchmarks.python_frame(doc), {"f32": 100.0, "f64": 50.0})
    assert set(frame["interface"]) == {"python-alloc", "python-out", "python-matmul", "python-batch"}
    assert frame["status"].eq("ok").all()
    ours = frame[frame["library"].eq("autotune")]
    assert (ours["ratio"] > 0).all() and len(ours) == 2 * (2 * 3 + 1)
    batch = frame[frame["interface"].eq("python-batch")]
    assert set(batch["shape"]) == {"16x(8x8x8)"} and (batch["flops"] == 2 * 8 ** 3 * 16).all()


def test_threaded_python_level_runs_each_library_in_its_own_process(tmp_path: Path, monkeypatch) -> None:
    # A pool spinning after its call steals the next library's cores: on two threads
    # autotune and numpy are timed in separate processes, the other library held to one
    # thread in each (numpy's result check would wake OpenBLAS's threads otherwise).
    calls = []
    real_run = benchmarks.subprocess.run

    def spy(cmd, **kwargs):
        calls.append((cmd, kwargs["env"]["OPENBLAS_NUM_THREADS"], kwargs["env"]["AUTOTUNE_NUM_THREADS"]))
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(benchmarks.subprocess, "run", spy)
    doc = benchmarks.run_python_level(tmp_path, (8,), 4, 1e-4, 1, ("f32",), threads=2)
    assert [c[0][-2:] for c in calls] == [["--library", "autotune"], ["--library", "numpy"]]
    assert [c[1:] for c in calls] == [("1", "2"), ("2", "1")]
    frame = benchmarks.python_frame(doc, threads=2)
    assert (frame["threads"] == 2).all() and frame["status"].eq("ok").all()
    assert sorted(frame.groupby("library").size().items()) == [("autotune", 4), ("numpy", 4)]
    targets = {t.name: t for t in evaluate_targets(add_ratios(frame, {"f32": 100.0}))}
    assert targets["python f32, 2 thread(s): gemm(A, B) vs A @ B, n = 8..512"].met is not None


def test_tiny_run_end_to_end(built: rt_library.LibraryBuild, tmp_path: Path) -> None:
    options = benchmarks.Options(home=tmp_path, library=built.library, dtypes=("f32",), threads=(1,),
                                 shapes=(Shape(8, 8, 8), Shape(3, 5, 7), Shape(4, 4, 4, 5)),
                                 min_time=1e-4, repeats=1, cold=1, python_level=False, show=False,
                                 out_dir=tmp_path / "out")
    results = benchmarks.run(options)
    frame = results.frame
    # Every peer has a row per shape and configuration, found or not.
    per_peer = frame.groupby(["library", "interface"]).size()
    assert set(per_peer.index) == {(p.library, p.interface) for p in results.peers}
    assert (per_peer == 3 * 2).all()  # 3 shapes x (align 64, align 16)
    assert not frame["status"].eq("wrong").any()
    assert frame[frame["library"].eq("autotune")]["status"].eq("ok").all()
    saved = pd.read_csv(tmp_path / "out" / "latest.csv")
    assert list(saved.columns) == list(frame.columns) and len(saved) == len(frame)
    doc = json.loads((tmp_path / "out" / "latest.json").read_text())
    assert {"meta", "targets", "regime_means", "results", "peers", "report"} <= set(doc)
    report = report_data.benchmark_frame(pd.read_csv(tmp_path / "out" / "report.csv"))
    assert report is not None and {"autotune"} <= set(report["library"])
    assert report["shape"].str.startswith("f32 ").all()


def test_profile_categories() -> None:
    from benchmarks.profile import categorize, parse_report

    assert categorize("at_sgemm_avx512_nn_8x16_u4") == "kernels"
    assert categorize("run_steps_f32") == "edge code + executor"
    assert categorize("pack_b_f64") == "packing"
    assert categorize("at__plan_acquire") == "entry + plan cache"
    assert categorize("cblas_sgemm") == "entry + plan cache"
    text = ("    52.45%  [.] at_sgemm_avx512_nn_4x4_u8   -  -\n"
            "             --51.62%--run_steps_f32\n"
            "    41.26%  [.] run_steps_f32   -  -\n"
            "     1.86%  [.] at__plan_acquire   -  -\n"
            "     0.10%  [k] _raw_spin_lock   -  -\n")
    prof = parse_report(text)
    assert prof.shares["kernels"] == pytest.approx(0.5245)
    assert prof.shares["edge code + executor"] == pytest.approx(0.4126)
    assert prof.shares["other"] == pytest.approx(0.001)
    assert prof.top[0] == ("at_sgemm_avx512_nn_4x4_u8", pytest.approx(0.5245))


def test_passes_keep_each_points_best_and_listed_squares_stay_irregular() -> None:
    s = Shape(8, 8, 8)
    slow, fast = _point("openblas", "cblas", s, 2e-6), _point("openblas", "cblas", s, 1e-6)
    failed = _point("openblas", "cblas", s, 1e-9, status="failed")
    assert benchmarks.merge_passes([[slow], [fast]]) == [fast]
    assert benchmarks.merge_passes([[slow], [failed]]) == [slow]
    assert regime(Shape(15, 15, 15), benchmarks.IRREGULAR) == "irregular"


def test_peers_run_without_pinning_variables() -> None:
    from benchmarks.peers import blis_pin, peer_environment

    base = {"PATH": "/bin", "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512", "BLIS_ARCH_TYPE": "generic"}
    env = peer_environment(Peer("openblas", "cblas", "cblas", Path("/x")), 2, base)
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env and "BLIS_ARCH_TYPE" not in env
    assert env["PATH"] == "/bin" and env["OPENBLAS_NUM_THREADS"] == "2" and env["AUTOTUNE_NUM_THREADS"] == "2"
    configs = ["skx", "knl", "haswell", "zen3", "zen2", "zen", "generic"]
    pin = blis_pin("generic", configs, {"avx2", "fma", "avx512f"})
    assert pin == (("BLIS_ARCH_TYPE", "0"),)  # BLIS 0.9 reads an index, not a name
    blis = peer_environment(Peer("blis", "cblas", "cblas", Path("/x"), "", pin), 1, base)
    assert blis["BLIS_ARCH_TYPE"] == "0"
    # Its own tuned choice is kept, and an AVX2-only CPU is never pinned to AVX-512 kernels.
    assert blis_pin("zen", configs, {"avx2", "fma", "avx512f"}) == ()
    assert blis_pin("generic", configs, {"avx2", "fma"}) == ()


def test_blis_is_measured_on_the_sub_configuration_it_can_run(peers: list[Peer]) -> None:
    blis = next(p for p in peers if p.library == "blis")
    if not blis.found:
        pytest.skip(f"BLIS not installed here: {blis.missing}")
    from benchmarks.peers import _BLIS_CHOICE

    env = peer_environment(blis, 1)
    proc = subprocess.run([sys.executable, "-c", _BLIS_CHOICE, str(blis.path)], capture_output=True, text=True,
                          env=env, check=True)
    chosen, features = proc.stdout.splitlines()[0], cpu_features()
    assert chosen not in ("skx", "knl") or "avx512f" in features, (chosen, env.get("BLIS_ARCH_TYPE"))
    assert chosen != "generic" or "avx512f" not in features, env.get("BLIS_ARCH_TYPE")


def test_arm_icount_tally_counts_between_markers():
    # benchmarks/icount.py reads QEMU's `-d exec` log: one line per guest
    # instruction, ending with its symbol.  Only what runs between a begin and
    # the next end marker counts, per phase, and the markers themselves do not.
    from benchmarks.icount import Count, tally

    def line(pc: int, symbol: str) -> bytes:
        return f"Trace 0: 0x7f0000{pc:04x} [00000000/{pc:016x}/00000001/00000201] {symbol}\n".encode()

    log = [line(1, "main"), line(2, "icount_begin"), line(3, "icount_begin"), line(4, "cblas_sgemm"),
           line(5, "kernel"), line(6, "kernel"), line(7, "icount_end"), line(8, "main"),
           line(9, "icount_begin"), line(10, "kernel"), line(11, "icount_end"), line(12, "exit")]
    result = tally(log, Count())
    assert result.phases == {"first": 3, "cached": 1}
    assert result.symbols["first"] == {"cblas_sgemm": 1, "kernel": 2}
    assert result.symbols["cached"] == {"kernel": 1}


def test_arm_icount_neon_runs_without_sme():
    # --isa neon counts the same library on a CPU model without SME, where its
    # plans use the NEON family: the runner's CPU is swapped, nothing else.
    from benchmarks.arm_icount import CPUS
    from benchmarks.icount import runner
    from autotune.host import detect
    from autotune.toolchain import ToolchainError, arm_target

    try:
        target = arm_target("sme2", detect(), 512)
    except ToolchainError as exc:
        pytest.skip(f"no Arm toolchain: {exc}")
    sme2, neon = runner(target, CPUS["sme2"]), runner(target, CPUS["neon"])
    at = sme2.index("-cpu")
    assert "sme512=on" in sme2[at + 1] and neon[at + 1] == "max,sme=off"
    assert neon[:at + 1] == sme2[:at + 1] and neon[at + 2:] == sme2[at + 2:]


def test_quantised_peers_are_timed_in_pairs_with_autotune(monkeypatch) -> None:
    """Every peer's repeat comes right after one of autotune's, and its ratio is the median
    of those pairs: a machine whose speed drifts gives each pair the same window."""
    from benchmarks import quantised

    calls: list[str] = []
    # Fake clocks: autotune takes 1 s a call, numpy 2, 2, 8 (one slow window), torch 3.
    costs = {"autotune": iter([1.0] * 6), "numpy f32": iter([2.0, 2.0, 8.0]), "torch int4": iter([3.0] * 3)}

    def repeat(fn, min_time: float) -> float:
        fn()
        return next(costs[calls[-1]])

    fns = {name: (lambda name=name: calls.append(name)) for name in costs}
    monkeypatch.setattr(quantised, "_one_repeat", repeat)
    best, ratios = quantised._paired_rounds(fns, repeats=3, min_time=0.0)
    assert calls == ["autotune", "numpy f32", "autotune", "torch int4"] * 3
    assert best == {"autotune": 1.0, "numpy f32": 2.0, "torch int4": 3.0}
    assert ratios == {"numpy f32": 2.0, "torch int4": 3.0}


def test_quantised_peers_are_timed_alone_when_there_is_no_pair() -> None:
    from benchmarks import quantised

    calls: list[str] = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("numpy f32", "torch int4")}
    best, ratios = quantised._paired_rounds(fns, repeats=2, min_time=0.0)
    assert calls == ["numpy f32", "torch int4"] * 2 and ratios == {} and set(best) == set(fns)
    calls.clear()  # autotune with no peer left to compare: still timed
    best, ratios = quantised._paired_rounds({"autotune": lambda: calls.append("autotune")}, repeats=3, min_time=0.0)
    assert calls == ["autotune"] * 3 and ratios == {} and best["autotune"] < 1.0


def test_quantised_report_judges_the_targets_by_the_paired_ratio() -> None:
    from benchmarks.quantised import Row, report

    shape = (64, 4096, 4096)
    rows = [Row(shape, "autotune", 0.015), Row(shape, "numpy f32", 0.031, ratio=1.97),
            Row(shape, "torch int4 bf16", 0.05, ratio=3.5), Row(shape, "torch int4", None, "no torch")]
    text = report(rows)
    # numpy's best over autotune's would be 2.07: the verdict follows the pairs' median
    assert "64x4096x4096: 1.97x numpy f32 (target 2.0x) NOT met" in text
    assert "64x4096x4096: 3.50x torch int4 bf16 (target 1.5x) met" in text
    assert "torch int4" in text and "no torch" in text
    assert "2.07" not in text


def _onnxruntime() -> None:
    """Skip, saying why, where the ONNX Runtime peer cannot be built."""
    for module in ("onnxruntime", "onnx"):
        pytest.importorskip(module, reason=f"{module} not installed (scripts/setup.sh --test installs it)")


def _weights(k: int = 200, n: int = 72, seed: int = 3):
    """4-bit weights whose K is not a multiple of the block: the last block is padded."""
    import autotune

    W = np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32)
    return autotune.quantize_weights(W, bits=4, block=32)


def test_onnxruntime_matmulnbits_reads_autotunes_codes_and_scales() -> None:
    """MatMulNBits fed autotune's codes and scales stands for the same W, bit for bit (its
    f32 path times the identity), and multiplies exactly quantised rows as the reference does."""
    _onnxruntime()
    from benchmarks import quantised

    w = _weights()
    f32 = quantised.matmul_nbits(w, threads=1, accuracy_level=1)
    assert np.array_equal(f32(np.eye(w.k, dtype=np.float32)), w.dequantize())
    int8 = quantised.matmul_nbits(w, threads=1)  # accuracy_level=4, as the bench runs it
    assert quantised.check_codes(int8, w, rows=5) is None
    assert quantised.check_codes(quantised.matmul_nbits(w, threads=2), w) is None


@pytest.mark.parametrize("mistake", ["nibbles swapped", "codes as signed nibbles"])
def test_onnxruntime_peer_with_a_wrong_code_mapping_is_reported_wrong(mistake: str, monkeypatch) -> None:
    """A session built on the codes laid out wrongly fails the bench's check, and the
    peer becomes that verdict (reported, never timed) instead of a callable."""
    _onnxruntime()
    from autotune.quant import QuantizedWeights
    from benchmarks import quantised

    w = _weights()
    codes = (w.codes >> 4 | w.codes << 4) if mistake == "nibbles swapped" else w.codes ^ 0x88
    mislaid = QuantizedWeights(codes.astype(np.uint8), w.scales, None, w.k, 4, w.block)
    build = quantised.matmul_nbits
    monkeypatch.setattr(quantised, "matmul_nbits", lambda weights, threads: build(mislaid, threads))
    A = np.random.default_rng(4).standard_normal((3, w.k)).astype(np.float32)
    verdict = quantised._ort_peer(A, w, threads=1)
    assert isinstance(verdict, str) and verdict.startswith("wrong: on exactly quantised rows"), verdict


def test_quantised_bench_times_onnxruntime_beside_autotune(monkeypatch) -> None:
    """A small run: the ONNX Runtime row passes both checks and is timed (PyTorch left out for speed)."""
    _onnxruntime()
    from benchmarks import quantised

    monkeypatch.setattr(quantised, "_torch_peers", lambda *args: {})
    rows = quantised.measure(shapes=((5, 200, 72),), repeats=2, min_time=0.0)
    row = next(r for r in rows if r.peer == quantised.ORT)
    assert row.note == "" and row.seconds and row.seconds > 0
    assert [r.peer for r in rows] == ["autotune", quantised.ORT, "numpy f32"]


def test_threads_all_is_every_usable_core() -> None:
    """`bench --quantised --threads all` runs on all cores as `--threads 1` runs on one."""
    import argparse

    from autotune.host import usable_cores

    parser = argparse.ArgumentParser()
    benchmarks.add_arguments(parser)
    args = parser.parse_args(["--quantised", "--threads", "1", "--threads", "all"])
    assert args.threads == [1, usable_cores()]
    with pytest.raises(SystemExit):
        parser.parse_args(["--threads", "0"])


def test_a_peer_over_the_time_limit_is_called_once_then_left_out_at_larger_m(monkeypatch) -> None:
    """A peer whose first call takes longer than MAX_CALL is shown with that call, its ratio
    against autotune's best, and is not run at a larger M of the same K and N."""
    from benchmarks import quantised

    calls: list[tuple[int, int, int]] = []

    def slow_peers(A, w, Wd, threads):
        def run() -> np.ndarray:
            calls.append((len(A), w.k, w.n))
            return np.matmul(A, Wd)
        return {"slow f32": run}

    monkeypatch.setattr(quantised, "_torch_peers", slow_peers)
    monkeypatch.setattr(quantised, "_ort_peer", lambda *args: "left out")
    monkeypatch.setattr(quantised, "MAX_CALL", 0.0)  # every first call is over it
    shapes = ((2, 64, 32), (4, 64, 32), (4, 96, 32))
    rows = {(r.shape, r.peer): r for r in quantised.measure(shapes=shapes, repeats=1, min_time=0.0)}
    assert calls == [(2, 64, 32), (4, 96, 32)]
    once, left_out = rows[(shapes[0], "slow f32")], rows[(shapes[1], "slow f32")]
    assert once.note.startswith("one call (over 0 s), not paired") and once.seconds
    assert left_out.note.startswith("not run: ") and "at M = 2 already" in left_out.note
    assert left_out.seconds is None
