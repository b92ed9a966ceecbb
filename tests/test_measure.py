"""Measure stage: validation and timing through the harness subprocess."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import at_testkit as tk  # noqa: E402

from autotune import build, measure  # noqa: E402


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    target = tk.native_target()
    bad = tk.bad_sources(target.isa)
    result = build.build_kernels(target, tk.naive_sources(target.isa) + list(bad.values()),
                                 jobs=2, home=home)
    assert result.failures == {}
    exe = build.build_harness(target, list(result.objects.values()), home=home)
    names = {key: src.spec.name for key, src in bad.items()}
    names["naive"] = [s.spec.name for s in tk.naive_sources(target.isa)]
    return exe, names, target


def test_validate_sorts_good_from_bad_and_survives_crashes(kit):
    exe, names, target = kit
    naive = names["naive"]
    # Crashing kernels first, between and last: each crash restarts the harness.
    order = [names["segv"], *naive[:3], names["overread"], names["wrong"], *naive[3:6],
             names["abort"], names["padwrite"], *naive[6:]]
    ticks: list[str] = []
    results = measure.validate(exe, target, order,
                               progress=lambda advance, description: ticks.append(description))
    assert list(results) == order
    assert sorted(ticks) == sorted(order)
    for name in naive:
        assert results[name].status == "validated" and results[name].ok, results[name]
        assert results[name].cases == 9 * 4 * 5 and results[name].max_rel_err is not None
    assert results[names["segv"]].reason == "crashed: SIGSEGV"
    assert results[names["abort"]].reason == "crashed: SIGABRT"
    assert results[names["overread"]].reason == "crashed: SIGSEGV"  # the guard page
    wrong = results[names["wrong"]]
    assert wrong.status == "rejected" and wrong.case["K"] == 1
    assert wrong.reason.startswith("wrong result at K=1 ")
    padwrite = results[names["padwrite"]]
    assert padwrite.status == "rejected" and padwrite.case["what"] == "padding"
    assert "ldc padding" in padwrite.reason


def test_a_hanging_kernel_times_out_and_the_rest_go_on(kit):
    exe, names, target = kit
    results = measure.validate(exe, target, [names["hang"], names["naive"][0]], timeout=1.0)
    assert results[names["hang"]].status == "rejected"
    assert results[names["hang"]].reason.startswith("timed out")
    assert results[names["naive"][0]].ok


def test_unknown_names_are_rejected_not_raised(kit):
    exe, names, target = kit
    results = measure.validate(exe, target, ["at_sgemm_nowhere_nn_1x1_u1", names["naive"][0]])
    assert results["at_sgemm_nowhere_nn_1x1_u1"].status == "rejected"
    assert "no such kernel" in results["at_sgemm_nowhere_nn_1x1_u1"].reason
    assert results[names["naive"][0]].ok


def test_bench_frame_and_crash_report(kit):
    exe, names, target = kit
    kernels = [names["naive"][0], names["segv"], names["naive"][4]]
    frame = measure.bench(exe, target, kernels, ks=(8, 48), pads=(0, 17), min_time_ms=0.5, repeats=3)
    assert list(frame.columns) == list(measure.BENCH_COLUMNS)
    assert len(frame) == 2 * 2 * 2
    assert set(frame["kernel"]) == {names["naive"][0], names["naive"][4]}
    assert (frame["best_gflops"] > 0).all()
    assert (frame["best_gflops"] >= frame["median_gflops"]).all()
    assert (frame["ns_per_call"] <= frame["median_ns_per_call"]).all()
    f32 = frame[(frame["kernel"] == names["naive"][0]) & (frame["pad"] == 17)]
    assert list(f32["lda"]) == [5 + 17, 5 + 17] and list(f32["ldb"]) == [8 + 17, 48 + 17]
    assert frame.attrs["failures"] == {names["segv"]: "crashed: SIGSEGV"}


def test_peak_is_positive(kit):
    exe, _, target = kit
    peaks = measure.peak(exe, target)
    assert set(peaks) == {"f32", "f64", "pace"} and min(peaks.values()) > 0


def test_an_unusable_harness_raises_measure_error(kit, tmp_path):
    _, names, target = kit
    with pytest.raises(measure.MeasureError, match="cannot execute"):
        measure.validate(tmp_path / "no-such-harness", target, names["naive"][:1])
    script = tmp_path / "not-a-harness"
    script.write_text("#!/bin/sh\necho 'oops' >&2\nexit 3\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(measure.MeasureError, match="(?s)ran no kernel.*oops"):
        measure.validate(script, target, names["naive"][:1])
    with pytest.raises(measure.MeasureError, match="peak"):
        measure.peak(script, target)


def test_the_runner_prefix_is_used(kit):
    exe, names, target = kit
    # `env` as a stand-in emulator: the harness must be started through the runner.
    wrapped = type(target)(**{**target.__dict__, "runner": ("env", "AT_RUNNER_SEEN=1")})
    results = measure.validate(exe, wrapped, names["naive"][:1])
    assert results[names["naive"][0]].ok


def test_ctrl_c_while_measuring_stops_the_harness(kit, tmp_path, monkeypatch):
    """The harness runs in a session of its own: after Ctrl-C it went on timing in the
    background, on the cores of a busy machine."""
    import os
    import time

    _, names, target = kit
    pid_file = tmp_path / "pid"
    script = tmp_path / "slow-harness"
    script.write_text(f'#!/bin/sh\necho $$ > "{pid_file}"\n'
                      f'echo \'{{"event":"start","kernel":"{names["naive"][0]}"}}\'\nexec sleep 300\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    real_events = measure._Run.events

    def interrupted(self, timeout):
        for event in real_events(self, timeout):
            yield event
            raise KeyboardInterrupt  # Ctrl-C once the harness is under way

    monkeypatch.setattr(measure._Run, "events", interrupted)
    with pytest.raises(KeyboardInterrupt):
        measure.validate(script, target, names["naive"][:1])
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # A killed child not yet reaped is a zombie: gone for this purpose.
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z":
                break
        except (FileNotFoundError, ProcessLookupError):  # reaped between the two looks (either errno)
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the harness was still running after Ctrl-C")
