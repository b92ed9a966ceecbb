"""Damaged artefacts in the home: one line naming the file and the remedy, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import table
from autotune.install import Journal

ROOT = Path(__file__).resolve().parent.parent

DAMAGE = {
    "random bytes": bytes(range(256)) * 3,
    "a JSON list": b"[1, 2]",
    "missing fields": b'{"schema": 1}',
    "a host of the wrong shape": b'{"schema": 1, "host": {"arch": 3}, "target": "host"}',
    "cut short": b'{"schema": 1, "host": {"ar',
}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_table_is_named_with_its_remedy(tmp_path, damage):
    path = table.table_path("host", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(DAMAGE[damage])
    with pytest.raises(table.TableError, match="autotune install --force"):
        table.load("host", tmp_path)
    for args in (("show",), ("show", "--json")):
        done = cli(tmp_path, *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("error:") and str(path) in line and "autotune install --force" in line
    assert cli(tmp_path, "--version").returncode == 0
    assert cli(tmp_path, "clean", "--all").returncode == 0 and not path.exists()


def test_a_damaged_journal_keeps_its_whole_lines(tmp_path):
    path = tmp_path / "journal" / "host-x.jsonl"
    journal = Journal(path)
    journal.append([{"kind": "validate", "hash": "a", "ok": True},
                    {"kind": "peak", "isa": "avx2", "harness": "h", "gflops": {"f32": 1.0}}])
    with open(path, "ab") as f:
        f.write(b'{"kind": "validate", "hash": "b", "ok": tr')  # cut short by a crash
        f.write(b"\n\xff\xfe not text\n[1, 2]\n")
        f.write(b'{"kind": "bench"}\n')                   # the right JSON, the wrong shape
        f.write(json.dumps({"kind": "validate", "hash": "c", "ok": False}).encode() + b"\n")
    again = Journal(path)
    assert set(again.validations) == {"a", "c"} and again.peaks == {("avx2", "h"): {"f32": 1.0}}
    assert again.benches == {}
