"""The `autotune` command's user-facing behaviour: help, errors a user can act on, layout."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from rich.console import Console

from autotune import cli, table, toolchain
from tests.isa import best_simd_isa
from tests.test_table import make_table


def autotune(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_help_explains_every_command(tmp_path):
    out = autotune("--help", home=tmp_path).stdout
    for command in ("install", "show", "clean"):
        assert command in out
    install_help = autotune("install", "--help", home=tmp_path).stdout
    for option in ("--target", "--quick", "--force", "--only"):
        assert option in install_help


def test_show_without_a_table_says_what_to_run(tmp_path):
    done = autotune("show", home=tmp_path)
    assert done.returncode == 2
    assert "autotune install" in done.stderr


def test_unknown_target_is_a_clear_error(tmp_path):
    done = autotune("install", "--target", "avx1024", home=tmp_path)
    assert done.returncode == 2
    assert "unknown target 'avx1024'" in done.stderr and "avx512" in done.stderr


def test_unwritable_home_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = autotune("install", "--quick", home=blocker / "home")
    assert done.returncode == 2
    assert "AUTOTUNE_HOME" in done.stderr


def test_table_of_another_host_is_refused(tmp_path):
    table.save(make_table(), tmp_path)  # fingerprint of a made-up CPU
    done = autotune("show", home=tmp_path)
    assert done.returncode == 2
    assert "another host" in done.stderr


def test_show_host_names_the_features_kernels_use(tmp_path):
    done = autotune("show", "--host", home=tmp_path)
    assert done.returncode == 0
    best = best_simd_isa()
    assert best in done.stdout
    for feature in toolchain.X86_REQUIRES.get(best, ()):
        assert feature in done.stdout


def test_show_paths_points_into_the_home(tmp_path):
    done = autotune("show", "--paths", home=tmp_path)
    assert str(tmp_path / "tables" / "host.json") in done.stdout.replace("\n", "")


@pytest.mark.parametrize("show_all", [False, True])
def test_show_fits_80_columns_and_quotes_percent_of_peak(show_all):
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=False)
    cli.print_table(make_table(), console, show_all=show_all)
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "at_sgemm_avx512_nn_16x6_u4" in text
    assert "92%" in text  # best 140 GFLOPS of a 152.4 peak
    assert "1 rejected" in text


def test_emulated_table_says_so():
    buffer = io.StringIO()
    cli.print_table(make_table("sme2", "emulated"), Console(file=buffer, width=80))
    assert "EMULATED" in buffer.getvalue()


@pytest.mark.parametrize("command", [["clean"], ["report"]])
def test_an_unwritable_home_is_one_line(tmp_path, monkeypatch, capsys, command):
    import autotune.reports

    denied = PermissionError(13, "Permission denied", str(tmp_path / "build"))

    def refuse(*args, **kwargs):
        raise denied

    (tmp_path / "build").mkdir()
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path))
    monkeypatch.setattr(cli.shutil, "rmtree", refuse)
    monkeypatch.setattr(autotune.reports, "report_command", refuse)
    assert cli.main(command) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{tmp_path / 'build'}: Permission denied" in line and "AUTOTUNE_HOME" in line
