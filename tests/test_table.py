"""The tuned table: round trip, atomic replace, refusal of foreign tables, selection."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from autotune import files, table
from autotune.host import CacheLevel, HostInfo
from autotune.specs import KernelSpec
from autotune.table import KernelRecord, TableError, TunedTable

HOST = HostInfo(arch="x86_64", os="linux", cpu="Test CPU", features=("avx2", "avx512f", "fma"),
                caches=(CacheLevel(1, "data", 49152, 64, 12, 64),), cores=2, compiler="gcc 12")


def make_table(target: str = "host", provenance: str = "measured") -> TunedTable:
    fast = KernelSpec("avx512", "f32", 16, 6, unroll=4)
    slow = KernelSpec("avx2", "f32", 16, 6, unroll=4)
    broken = KernelSpec("avx512", "f64", 8, 4, unroll=2)
    records = (
        KernelRecord(fast, "validated", object_hash="a" * 64, best_gflops=140.0,
                     gflops_by_k=((16, 90.0), (256, 135.0))),
        KernelRecord(slow, "validated", object_hash="b" * 64, best_gflops=80.0,
                     gflops_by_k=((16, 60.0), (256, 78.0))),
        KernelRecord(broken, "rejected", reason="wrong result at K=17", object_hash="c" * 64),
    )
    frame = pd.DataFrame([[fast.name, 16, 0, 16, 16, 16, 95.0, 90.0, 21.5]], columns=table.MEASUREMENT_COLUMNS)
    return TunedTable(target=target, host=HOST, provenance=provenance, peak_gflops={"f32": 152.4},
                      kernels=records, measurements=frame, selection=table.select_kernels(records))


def test_round_trip_keeps_everything(tmp_path):
    original = make_table()
    path = table.save(original, tmp_path)
    loaded = table.load("host", tmp_path, host=HOST)
    assert path == tmp_path / "tables" / "host.json"
    assert loaded.summary_dict() == original.summary_dict()
    pd.testing.assert_frame_equal(loaded.measurements, original.measurements, check_dtype=False)
    assert loaded.fingerprint == HOST.fingerprint


def test_selection_keeps_fastest_of_each_shape_and_never_a_rejected_kernel():
    selected = make_table().selection
    assert selected == ("at_sgemm_avx512_nn_16x6_u4",)


def test_summary_has_the_fields_scripts_rely_on():
    data = json.loads(json.dumps(make_table().summary_dict()))
    assert {"host", "provenance", "peak_gflops", "kernels"} <= data.keys()
    assert {"arch", "features", "svl_bits", "fingerprint"} <= data["host"].keys()
    kernel = data["kernels"][2]
    assert {"name", "isa", "dtype", "mr", "nr", "trans", "status", "reason", "best_gflops"} <= kernel.keys()
    assert kernel["status"] == "rejected" and "K=17" in kernel["reason"]


def test_table_from_another_host_is_refused(tmp_path):
    table.save(make_table(), tmp_path)
    other = HostInfo(arch="x86_64", os="linux", cpu="Other CPU", features=("avx2", "fma"), cores=2)
    with pytest.raises(TableError, match="another host"):
        table.load("host", tmp_path, host=other)


def test_emulated_table_is_not_checked_against_the_host(tmp_path):
    table.save(make_table("sme2", "emulated"), tmp_path)
    other = HostInfo(arch="x86_64", os="linux", cpu="Other CPU", features=(), cores=2)
    assert table.load("sme2", tmp_path, host=other).provenance == "emulated"


def test_other_schema_version_is_refused_with_advice(tmp_path):
    path = table.save(make_table(), tmp_path)
    data = json.loads(path.read_text())
    data["schema"] = 999
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match="install --force"):
        table.load("host", tmp_path)


def test_missing_and_corrupt_tables_say_what_to_run(tmp_path):
    with pytest.raises(TableError, match="autotune install --target sme2"):
        table.load("sme2", tmp_path)
    path = table.table_path("host", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "tar')
    with pytest.raises(TableError, match="unreadable"):
        table.load("host", tmp_path)


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    table.atomic_write_text(path, "old")

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        table.atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary left behind
