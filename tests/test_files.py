"""Atomic replacement (autotune.files) as every writer of the project meets it: through
links, never over a FIFO, a device or a directory, keeping the mode of what was there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from autotune import files
from autotune.quant import QuantizedWeights, quantize_weights


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_symlink_is_written_through_not_replaced(tmp_path):
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    files.atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    # A dangling link creates its target, as `echo > link` would.
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "made.txt")
    files.atomic_write_text(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "made.txt").read_text() == "made"


def test_a_fifo_a_directory_and_a_device_are_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    directory = tmp_path / "dir"
    directory.mkdir()
    targets = [fifo, directory]
    if os.geteuid() == 0:  # a device node can only be made by root (what the issue saw replaced)
        device = tmp_path / "null"
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append(device)
    for target in targets:
        kind = stat.S_IFMT(target.stat().st_mode)
        with pytest.raises(files.NotRegularFileError, match="not a regular file") as caught:
            files.atomic_write_text(target, "x")
        assert "\n" not in str(caught.value)
        assert stat.S_IFMT(target.stat().st_mode) == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(t.name for t in targets)  # no temporary left


def test_an_existing_file_keeps_its_mode_and_a_new_one_gets_the_umask(tmp_path):
    shared = tmp_path / "shared.txt"
    shared.write_text("old")
    shared.chmod(0o644)
    files.atomic_write_text(shared, "new")
    assert _mode(shared) == 0o644
    private = tmp_path / "private.txt"
    private.write_text("old")
    private.chmod(0o600)
    files.atomic_write_text(private, "new")
    assert _mode(private) == 0o600
    previous = os.umask(0o027)
    try:
        files.atomic_write_text(tmp_path / "new.txt", "new")
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "new.txt") == 0o640


def test_quantised_weights_save_through_links_keeping_the_mode(tmp_path):
    w = quantize_weights(np.random.default_rng(3).standard_normal((64, 8)))
    real = tmp_path / "real.npz"
    real.write_bytes(b"old")
    real.chmod(0o644)
    link = tmp_path / "w.npz"
    link.symlink_to(real)
    w.save(link)
    assert link.is_symlink() and _mode(real) == 0o644
    assert np.array_equal(QuantizedWeights.load(real).codes, w.codes)
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        w.save(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_report_output_refuses_a_fifo_in_one_line(tmp_path, monkeypatch, capsys):
    from autotune import cli, table
    from tests.test_report import HOST, synthetic_table

    monkeypatch.setattr("autotune.host.detect", lambda: HOST)
    table.save(synthetic_table(isas=("generic",)), Path(os.environ["AUTOTUNE_HOME"]))
    fifo = tmp_path / "report.html"
    os.mkfifo(fifo)
    assert cli.main(["report", "-o", str(fifo)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "FIFO" in lines[0] and str(fifo) in lines[0], lines
    assert "AUTOTUNE_HOME" not in lines[0]  # the home has nothing to do with it
    assert stat.S_ISFIFO(fifo.stat().st_mode)
