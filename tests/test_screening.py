"""Measure what can matter, and no more: screening, ISA dominance and recorded shapes.

The install times every kernel briefly, drops those too slow to be selected for
their block, and builds a lower ISA only where its sampled kernels did not lose
to a higher one everywhere.  Here a fake timer plays the harness, so each test
knows which kernel is fastest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import install as inst
from autotune.record import RecordError, read_shapes
from autotune.specs import KernelSpec
from autotune.table import selection_key


def spec(isa: str, mr: int, nr: int, unroll: int = 4, dtype: str = "f32", trans: str = "nn") -> KernelSpec:
    return KernelSpec(isa=isa, dtype=dtype, mr=mr, nr=nr, trans_a=trans[0] == "t", trans_b=trans[1] == "t",
                      unroll=unroll)


class FakeTimer:
    """KernelTimer's interface over a table of GFLOPS (None: the kernel crashes)."""

    def __init__(self, gflops: dict[KernelSpec, float | None]) -> None:
        self.gflops = gflops
        self.timed: list[tuple[str, list[KernelSpec]]] = []

    def time(self, specs, settings, what="measure") -> int:
        self.timed.append((what, list(specs)))
        return len(specs)

    def rows(self, spec, settings) -> list[dict]:
        value = self.gflops[spec]
        if value is None:
            return []
        return [{"kernel": spec.name, "K": 64, "pad": 0, "median_gflops": value, "best_gflops": value}]


def test_screening_keeps_the_blocks_leaders_and_those_close_to_them() -> None:
    fast, close, slow = spec("avx2", 8, 4, 4), spec("avx2", 8, 4, 8), spec("avx2", 8, 4, 1)
    alone, crashed = spec("avx2", 6, 2), spec("avx2", 8, 4, 2)
    timer = FakeTimer({fast: 100.0, close: 80.0, slow: 70.0, alone: 10.0, crashed: None})
    leaders, speed = {}, {}
    contenders, screened = inst.screen(timer, [fast, close, slow, alone, crashed], leaders, speed)
    assert set(contenders) == {fast, close, alone, crashed}
    assert list(screened) == [slow] and fast.name in screened[slow]
    assert leaders[selection_key(fast)] == (fast, 100.0)
    assert speed[slow] == 70.0 and speed[crashed] is None
    assert timer.timed == [("screen", [fast, close, slow, alone, crashed])]


def test_a_lower_isa_is_screened_against_the_higher_ones_leader() -> None:
    high, low = spec("avx512", 8, 4), spec("avx2", 8, 4)
    leaders, speed = {}, {}
    inst.screen(FakeTimer({high: 200.0}), [high], leaders, speed)
    contenders, screened = inst.screen(FakeTimer({low: 90.0}), [low], leaders, speed)
    assert contenders == [] and list(screened) == [low]


def _family(isa: str, count: int) -> list[KernelSpec]:
    return [spec(isa, mr, nr, dtype=dt) for dt in ("f32", "f64") for mr in range(1, 9)
            for nr in range(1, 9)][:count]


def test_dominance_is_read_by_tile_area() -> None:
    high, low = _family("avx2", 128), _family("generic", 128)
    sample = inst.dominance_sample(low)
    assert len(sample) == inst.DOMINANCE_SAMPLE and len(set(sample)) == len(sample)
    assert {s.dtype for s in sample} == {"f32", "f64"}  # spread over the family
    leaders = {selection_key(h): (h, 100.0) for h in high}
    areas = sorted({s.mr * s.nr for s in sample})
    speed = {s: 40.0 for s in sample}
    assert inst.dominated(sample, speed, leaders) == {"area_limit": areas[0], "by": "avx2", "worst_ratio": 0.4}
    # Kept up on the smallest tiles: built up to the next sampled area above them.
    small = [s for s in sample if s.mr * s.nr == areas[1]]
    speed.update({s: 90.0 for s in small})
    verdict = inst.dominated(sample, speed, leaders)
    assert verdict["area_limit"] == areas[2] and verdict["worst_ratio"] == 0.4
    # A sampled kernel that did not validate or crashed counts as keeping up.
    biggest = max(sample, key=lambda s: s.mr * s.nr)
    speed[biggest] = None
    assert inst.dominated(sample, speed, leaders) == {"area_limit": None}


def test_a_family_too_small_to_sample_is_built_whole() -> None:
    assert inst.dominance_sample(_family("generic", 2 * inst.DOMINANCE_SAMPLE - 1)) == []


# -- AUTOTUNE_RECORD -------------------------------------------------------------------

def test_read_shapes_counts_deduplicates_and_keeps_the_most_frequent(tmp_path: Path) -> None:
    path = tmp_path / "shapes.jsonl"
    line = lambda m, n, k, threads=2, dtype="f32", trans="nn": json.dumps(  # noqa: E731
        {"dtype": dtype, "trans": trans, "m": m, "n": n, "k": k, "threads": threads})
    path.write_text("\n".join([line(7, 9, 11)] * 3 + [line(300, 300, 300, 1, "f64", "tn"), line(0, 5, 5),
                               line(7, 9, 11)]) + "\n" + '{"dtype": "f3')  # cut short by a kill
    shapes = read_shapes(path)
    assert [(s.m, s.n, s.k) for s in shapes] == [(7, 9, 11), (300, 300, 300)]
    assert shapes[0].threads == 0 and shapes[0].kind == "recorded"
    assert shapes[1].threads == 1 and shapes[1].kind == "large" and shapes[1].trans == "tn"
    assert len(read_shapes(path, limit=1)) == 1


@pytest.mark.parametrize("text, message", [("", "holds no shape"), ("hello\n{}\n", "line 1"),
                                           ('{"dtype": "f16", "trans": "nn", "m": 1, "n": 1, "k": 1, '
                                            '"threads": 1}\n\n', "line 1")])
def test_a_bad_record_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "shapes.jsonl"
    path.write_text(text)
    with pytest.raises(RecordError, match=message):
        read_shapes(path)
    with pytest.raises(inst.InstallError, match=message):
        inst.recorded_shapes(path)
    with pytest.raises(RecordError, match="cannot read"):
        read_shapes(tmp_path / "missing.jsonl")


def test_the_library_records_every_shape_it_plans(built, tmp_path: Path) -> None:
    """Through the real library, in a process of its own (the library reads the variable once)."""
    record = tmp_path / "shapes.jsonl"
    program = (
        "import numpy as np, autotune\n"
        "a = np.ones((7, 11), np.float32); b = np.ones((11, 9), np.float32)\n"
        "for _ in range(5): autotune.gemm(a, b)\n"  # planned once, cached after
        "autotune.gemm(np.ones((3, 4)), np.ones((4, 5)))\n"
        "autotune.gemm(np.ones((4, 3)).T, np.ones((4, 5)))\n"
    )
    env = {**os.environ, "AUTOTUNE_LIBRARY": str(built.library), "AUTOTUNE_RECORD": str(record),
           "AUTOTUNE_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", program], env=env, check=True, timeout=120)
    shapes = read_shapes(record)
    # Row-major numpy arrays run as C^T = B^T A^T: recorded as the column-major product computed.
    assert {(s.dtype, s.m, s.n, s.k) for s in shapes} == {("f32", 9, 7, 11), ("f64", 5, 3, 4)}
    assert {s.trans for s in shapes if s.dtype == "f64"} == {"nn", "nt"}
    lines = record.read_text().splitlines()
    assert len([ln for ln in lines if '"f32"' in ln]) == 1, lines
