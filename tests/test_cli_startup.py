"""How fast `autotune` starts: the commands that only read (help, show, plan, clean)
load none of the libraries only install, bench and report need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import table
from tests.test_cli import TUNING, emulated_table

ROOT = Path(__file__).resolve().parent.parent

#: What install (pandas), tuning (optuna) and the report (matplotlib) load: together
#: most of a second before a command could print anything.
HEAVY = ("pandas", "optuna", "matplotlib")

#: Runs `python -m autotune ARGS` in this interpreter (runpy, as -m does), then writes
#: the heavy modules it loaded as the last line of stderr.
PROBE = """\
import json, runpy, sys
sys.argv = ["autotune", *sys.argv[1:]]
try:
    runpy.run_module("autotune", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    sys.stdout.flush()
    print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def loaded_by(args: list[str], home: Path) -> tuple[list[str], subprocess.CompletedProcess]:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], capture_output=True,
                          text=True, env=env, timeout=120, cwd=home)
    return json.loads(done.stderr.splitlines()[-1]), done


@pytest.mark.parametrize("args", [["--help"], ["show", "--help"], ["show", "--target", "sme2"],
                                  ["show", "--target", "sme2", "--json"], ["show", "--paths"],
                                  ["show", "--host"], ["plan", "8", "8", "8"], ["clean"]])
def test_reading_commands_load_no_heavy_library(tmp_path, args):
    table.save(emulated_table(TUNING), tmp_path)
    heavy, done = loaded_by(args, tmp_path)
    assert heavy == [], f"`autotune {' '.join(args)}` imported {heavy}"
    assert "Traceback" not in done.stderr, done.stderr
    if args[0] == "show" and "--help" not in args:
        assert done.stdout.strip(), done.stderr  # the command ran, not only its import


def test_the_probe_sees_a_heavy_import(tmp_path):
    """The check above can fail: `bench --help` loads the benchmarks, which use pandas."""
    heavy, done = loaded_by(["bench", "--help"], tmp_path)
    assert "usage: autotune bench" in done.stdout
    assert "pandas" in heavy


def test_measurements_become_one_frame_when_first_read(tmp_path):
    """A loaded table keeps its stored rows until asked (tests/test_table.py checks their values)."""
    from tests.test_table import make_table

    original = make_table()
    table.save(original, tmp_path)
    loaded = table.load(original.target, tmp_path)
    assert isinstance(loaded.__dict__["_measurements"], table.StoredRows)
    frame = loaded.measurements
    assert frame is loaded.measurements and len(frame) == len(original.measurements)
    bare = table.TunedTable(target="x", host=original.host, provenance="model", peak_gflops={}, kernels=())
    assert bare.measurements.empty and list(bare.measurements.columns) == list(table.MEASUREMENT_COLUMNS)


def test_a_measurement_row_cut_short_is_refused_at_load(tmp_path):
    from tests.test_table import make_table

    path = table.save(make_table(), tmp_path)
    data = json.loads(path.read_text())
    data["measurements"]["data"][0] = data["measurements"]["data"][0][:-1]
    path.write_text(json.dumps(data))
    with pytest.raises(table.TableError, match="damaged"):
        table.load(data["target"], tmp_path)
