"""The C harness itself: warnings, the JSON line protocol, guard pages, padding checks."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import at_testkit as tk  # noqa: E402

from autotune import build  # noqa: E402
from autotune.home import kernels_src  # noqa: E402

HARNESS = kernels_src() / "harness"
ISA_FLAGS = {
    "avx512": ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mavx2"],
    "avx2": ["-mavx2", "-mfma"],
    "generic": [],
}


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A harness over the naive and the misbehaving kernels, in a private home."""
    home = tmp_path_factory.mktemp("home")
    target = tk.native_target()
    bad = tk.bad_sources(target.isa)
    sources = tk.naive_sources(target.isa) + list(bad.values())
    result = build.build_kernels(target, sources, jobs=2, home=home)
    assert result.failures == {}
    exe = build.build_harness(target, list(result.objects.values()), home=home)
    names = {key: src.spec.name for key, src in bad.items()}
    names["naive"] = [s.spec.name for s in tk.naive_sources(target.isa)]
    return exe, names, target


def run(exe: Path, *args: str, timeout: float = 60) -> tuple[list[dict], subprocess.CompletedProcess]:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    return events, proc


@pytest.mark.parametrize("family", ["gcc", "clang"])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_compiles_without_warnings(family, isa, tmp_path):
    candidates = ["gcc"] if family == "gcc" else ["clang", "clang-19", "clang-18"]
    cc = next((c for c in candidates if shutil.which(c)), None)
    if cc is None:
        pytest.skip(f"no {family} installed")
    strict = [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{HARNESS}",
              f"-I{kernels_src() / 'include'}", "-c"]
    for source, flags in ((HARNESS / "harness.c", []), (HARNESS / f"peak_{isa}.c", ISA_FLAGS[isa])):
        proc = subprocess.run([*strict, *flags, str(source), "-o", str(tmp_path / "x.o")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr


def test_every_line_is_json_with_the_event_first(kit):
    exe, names, _ = kit
    _, proc = run(exe, "validate", *names["naive"][:2])
    for line in proc.stdout.splitlines():
        assert line.startswith('{"event":"')
        json.loads(line)


def test_validate_announces_each_kernel_then_passes_the_correct_ones(kit):
    exe, names, _ = kit
    events, proc = run(exe, "validate", "--seed", "7", *names["naive"])
    assert proc.returncode == 0
    kinds = [(e["event"], e.get("kernel")) for e in events]
    expected = [x for n in names["naive"] for x in (("start", n), ("validate", n))] + [("done", None)]
    assert kinds == expected
    for e in events:
        if e["event"] == "validate":
            assert e["ok"] is True and e["cases"] == 9 * 4 * 5
            assert 0.0 <= e["max_rel_err"] < 1e-5


def test_validation_is_seeded(kit):
    exe, names, _ = kit
    first, _ = run(exe, "validate", "--seed", "3", names["naive"][0])
    again, _ = run(exe, "validate", "--seed", "3", names["naive"][0])
    other, _ = run(exe, "validate", "--seed", "4", names["naive"][0])
    assert first == again
    assert first[1]["max_rel_err"] != other[1]["max_rel_err"]


def test_a_wrong_kernel_is_reported_with_its_case(kit):
    exe, names, _ = kit
    events, _ = run(exe, "validate", names["wrong"])
    verdict = events[1]
    assert verdict["ok"] is False
    case = verdict["case"]
    # K=0 passes (the loop bug needs one iteration); K=1 over a NaN C is the first failure.
    assert case["K"] == 1 and case["alpha"] == 1 and case["beta"] == 0 and case["c_nan"] is True
    assert case["what"] == "value" and abs(case["got"] - case["want"]) > case["bound"]


def test_writing_into_the_ldc_padding_is_caught(kit):
    exe, names, _ = kit
    events, _ = run(exe, "validate", names["padwrite"])
    case = events[1]["case"]
    assert events[1]["ok"] is False and case["what"] == "padding"
    assert case["ldc"] > 3 and case["i"] == 3


def test_reading_past_an_operand_hits_the_guard_page(kit):
    exe, names, _ = kit
    events, proc = run(exe, "validate", names["naive"][0], names["overread"], names["naive"][1])
    assert proc.returncode == -signal.SIGSEGV
    assert events[-1] == {"event": "start", "kernel": names["overread"]}
    assert events[1]["ok"] is True  # the kernel before it finished normally


def test_crashes_leave_a_start_without_result(kit):
    exe, names, _ = kit
    for key, sig in (("segv", signal.SIGSEGV), ("abort", signal.SIGABRT)):
        events, proc = run(exe, "validate", names[key])
        assert proc.returncode == -sig
        assert events == [{"event": "start", "kernel": names[key]}]


def test_bench_reports_each_grid_point(kit):
    exe, names, _ = kit
    kernel = names["naive"][2]  # f32 tn 5x3: lda follows K
    events, proc = run(exe, "bench", "--k", "4,32", "--pad", "0,3", "--min-time-ms", "0.5",
                       "--repeats", "3", kernel)
    assert proc.returncode == 0
    points = [e for e in events if e["event"] == "bench"]
    assert [(p["K"], p["pad"]) for p in points] == [(4, 0), (4, 3), (32, 0), (32, 3)]
    assert [(p["lda"], p["ldb"], p["ldc"]) for p in points] == [
        (4, 4, 5), (7, 7, 8), (32, 32, 5), (35, 35, 8)]
    for p in points:
        assert p["best_gflops"] >= p["median_gflops"] > 0
        assert 0 < p["ns_per_call"] <= p["median_ns_per_call"]
        assert p["iters"] >= 1
        assert p["pace_gflops"] > 0  # the core's speed beside the samples (at_pace)


def test_a_sample_lasts_the_minimum_time_not_up_to_twice_it(kit):
    # The count is scaled from a short calibration run; doubling it until a run
    # lasted min_time made samples 1-2x as long, and the install's grid slower.
    # A sample is cut into slices of about 20 us (the fastest one counts): together
    # they last min_time.  The lengths below are taken at the fastest slice's pace,
    # and a count calibrated while the core ran slow (a busy host) fills less than a
    # slice at that pace: the lower bounds allow for it.
    exe, names, _ = kit
    min_ms = 0.5
    events, proc = run(exe, "bench", "--k", "4,8,12,16,24,32,48,64,96", "--pad", "0", "--min-time-ms",
                       str(min_ms), "--repeats", "3", names["naive"][2])
    assert proc.returncode == 0
    points = [p for p in events if p["event"] == "bench"]
    assert len(points) == 9
    slice_lengths = sorted(p["iters"] * p["ns_per_call"] for p in points)
    assert 0.3 * 20e3 <= slice_lengths[len(points) // 2] <= 1.3 * 20e3, slice_lengths
    lengths = sorted(p["slices"] * p["iters"] * p["ns_per_call"] / (min_ms * 1e6) for p in points)
    assert 0.3 <= lengths[len(lengths) // 2] <= 1.3, lengths


def test_a_sample_is_cut_into_slices(kit):
    # A virtual core can run at half speed for stretches shorter than a sample: the
    # fastest of many short slices is its full speed.  A sample shorter than a slice
    # is one run; a longer one is as many slices as fill it.
    exe, names, _ = kit
    kernel = names["naive"][2]
    events, proc = run(exe, "bench", "--k", "16", "--pad", "0", "--min-time-ms", "0.01", "--repeats", "1", kernel)
    assert proc.returncode == 0
    (point,) = [p for p in events if p["event"] == "bench"]
    assert point["slices"] == 1
    events, proc = run(exe, "bench", "--k", "16", "--pad", "0", "--min-time-ms", "1", "--repeats", "1", kernel)
    (point,) = [p for p in events if p["event"] == "bench"]
    assert 25 <= point["slices"] <= 75, point


def test_placements_move_the_operands_and_keep_the_grid(kit):
    # --place N: the operands at cache-line offsets drawn from N; the line says which.
    exe, names, _ = kit
    kernel = names["naive"][2]
    for place in (0, 3):
        events, proc = run(exe, "bench", "--k", "4,32", "--pad", "0", "--min-time-ms", "0.2",
                           "--repeats", "1", "--place", str(place), kernel)
        assert proc.returncode == 0
        points = [e for e in events if e["event"] == "bench"]
        assert [p["K"] for p in points] == [4, 32]
        assert all(p["place"] == place and p["median_gflops"] > 0 for p in points)
    events, proc = run(exe, "bench", "--place", "-1", kernel)
    assert proc.returncode == 2 and "--place" in events[0]["message"]


def test_deep_calls_read_b_from_copies_larger_than_l1(kit):
    # A plan streams B's slivers past a sliver of A kept in L1; a kernel timed on
    # one B in L1 hides what its loads per FMA cost there.
    exe, names, _ = kit
    kernel = names["naive"][2]  # f32 tn 5x3: B is 3 columns of K
    events, proc = run(exe, "bench", "--k", "64,256,300", "--pad", "0,5", "--min-time-ms", "0.2",
                       "--repeats", "1", kernel)
    assert proc.returncode == 0
    points = {(e["K"], e["pad"]): e for e in events if e["event"] == "bench"}
    assert points[64, 0]["b_copies"] == points[64, 5]["b_copies"] == 1
    for (K, pad), point in points.items():
        if K >= 256:
            one_b = -(-(2 * (K + pad) + K) * 4 // 64) * 64  # 3 columns ld apart, whole lines
            assert point["b_copies"] == (192 << 10) // one_b


def test_peak_prints_one_line_per_dtype_and_the_pace_loops(kit):
    exe, _, target = kit
    events, proc = run(exe, "peak")
    assert proc.returncode == 0
    peaks = {e["dtype"]: e for e in events if e["event"] == "peak"}
    # "pace": what every bench point's pace_gflops is measured against (install.steadiness).
    assert set(peaks) == {"f32", "f64", "pace"}
    assert all(p["isa"] == target.isa and p["gflops"] > 0 for p in peaks.values())
    # How the two peaks compare is a timing, and a loaded machine moves it: the
    # benchmarks report it, the test does not judge it.


def test_bad_usage_and_unknown_kernels(kit):
    exe, _, _ = kit
    events, proc = run(exe, "frobnicate")
    assert proc.returncode == 2 and events[0]["event"] == "error"
    events, proc = run(exe, "bench", "--k", "x")
    assert proc.returncode == 2 and events[0]["event"] == "error"
    events, proc = run(exe, "validate", "at_sgemm_nowhere_nn_1x1_u1")
    assert proc.returncode == 1
    assert events[0] == {"event": "error", "kernel": "at_sgemm_nowhere_nn_1x1_u1",
                         "message": "no such kernel in this harness"}
