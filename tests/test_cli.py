"""The `autotune` command's user-facing behaviour: help, errors a user can act on, layout."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from autotune import cli, table, toolchain
from autotune.home import MARKER
from tests.isa import best_simd_isa
from tests.test_table import make_table

ROOT = Path(__file__).resolve().parent.parent

def autotune(*args: str, home, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), **(env or {})}
    env.pop("COLUMNS", None)  # as from a script: no width but the pipe's
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


def test_show_lists_the_quantised_kernels_qmatmul_uses():
    """A table with the quantised stage's settings shows each kernel's verdict, the
    ones qmatmul uses and their times; a table without them shows no such section
    (tests/test_cli_quant.py: what it shows instead)."""
    import dataclasses

    quant = {"selected": ["at_q4s_avx2_4x8"],
             "verdicts": {"at_q4s_avx2_4x8": "validated", "at_q8_avx2_2x16": "wrong answer"},
             "seconds": {"at_q4s_avx2_4x8": {"1": 8.6e-4, "64": 2.0e-3}}}
    plain = make_table("avx2", "measured")
    with_quant = dataclasses.replace(plain, settings={**plain.settings, "quant": quant})
    buffer = io.StringIO()
    cli.print_table(with_quant, Console(file=buffer, width=100))
    lines = [line for line in buffer.getvalue().splitlines() if "at_q" in line]
    assert "quantised kernels" in buffer.getvalue()
    assert any("at_q4s_avx2_4x8" in line and "*" in line and "860" in line and "2000" in line for line in lines)
    assert any("at_q8_avx2_2x16" in line and "wrong answer" in line and "*" not in line for line in lines)
    buffer = io.StringIO()
    cli.print_table(plain, Console(file=buffer, width=100))
    assert "verdict" not in buffer.getvalue() and "at_q" not in buffer.getvalue()


@pytest.mark.parametrize("command", [["clean"], ["report"]])
def test_an_unwritable_home_is_one_line(tmp_path, monkeypatch, capsys, command):
    import autotune.reports

    denied = PermissionError(13, "Permission denied", str(tmp_path / "build"))

    def refuse(*args, **kwargs):
        raise denied

    (tmp_path / "build").mkdir()
    (tmp_path / MARKER).write_text("")
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path))
    monkeypatch.setattr(cli.shutil, "rmtree", refuse)
    monkeypatch.setattr(autotune.reports, "report_command", refuse)
    assert cli.main(command) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{tmp_path / 'build'}: Permission denied" in line
    # Another home helps a report (it writes there), not `clean`, whose files are this home's.
    assert ("AUTOTUNE_HOME" in line) == (command == ["report"])
    assert ("another -o" in line) == (command == ["report"])


@pytest.mark.parametrize("command, error, hint", [
    (["clean"], OSError(28, "No space left on device", "HOME/build"), None),
    (["report"], OSError(28, "No space left on device", "HOME/reports/host.html"), None),
    (["report"], OSError(5, "Input/output error", "HOME/reports/host.html"), None),
    (["report", "-o", "/elsewhere/r.html"], PermissionError(13, "Permission denied", "/elsewhere/r.html"),
     "(give `report` another -o)"),
    (["show"], OSError(30, "Read-only file system", "HOME/tables/host.json"),
     "(set AUTOTUNE_HOME to a writable directory)"),
    (["show"], PermissionError(13, "Permission denied", "/etc/other"), None),
])
def test_a_hint_only_where_it_helps(tmp_path, monkeypatch, capsys, command, error, hint):
    """The hint to move the home or the report goes only with a refusal to write there:
    not with a full disk, an I/O error, `clean`, or a file outside the home."""
    import autotune.reports

    if error.filename.startswith("HOME"):
        error.filename = str(tmp_path) + error.filename[4:]

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path))
    (tmp_path / "build").mkdir()
    (tmp_path / MARKER).write_text("")
    monkeypatch.setattr(cli.shutil, "rmtree", fail)
    monkeypatch.setattr(autotune.reports, "report_command", fail)
    monkeypatch.setattr(cli, "cmd_show", fail)
    assert cli.main(command) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{error.filename}: {error.strerror}" in line
    if hint is None:
        assert "(" not in line.split(error.strerror, 1)[1], line
    else:
        assert line.endswith(hint), line


# -- commands and their errors ------------------------------------------------------

def emulated_table(tuning: dict | None = None):
    """A table `show --target sme2` prints on any host (emulated tables are never checked against it)."""
    import dataclasses

    return dataclasses.replace(make_table("sme2", "emulated"), tuning=tuning)


TUNING = {"objective_default_s": 1.23e-3, "objective_tuned_s": 1.23e-3, "kept": False, "budget_s": 90.0,
          "trials": [{"number": i, "state": state, "value": 1.3e-3 if state == "COMPLETE" else None}
                     for i, state in enumerate(["COMPLETE"] * 5 + ["PRUNED"] * 7 + ["FAIL"])]}


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_bench_has_help(tmp_path, flag):
    done = autotune("bench", flag, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: autotune bench")
    for option in ("--quick", "--only", "--threads", "--list-peers", "dask"):
        assert option in done.stdout
    done = autotune("bench", "dask", flag, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: autotune bench dask")
    for option in ("--batch", "--shape", "--workers", "--chunk-mb"):
        assert option in done.stdout


def test_bench_rejects_bad_options_with_its_own_usage(tmp_path):
    done = autotune("bench", "--threads", "-2", home=tmp_path)
    assert done.returncode == 2 and "usage: autotune bench" in done.stderr and "thread count" in done.stderr


def test_bench_dask_rejects_bad_counts_with_its_own_usage(tmp_path):
    done = autotune("bench", "dask", "--batch", "0", home=tmp_path)
    assert done.returncode == 2 and "usage: autotune bench dask" in done.stderr
    assert "'0' is not a whole number of 1 or more" in done.stderr


def test_bench_runs_from_another_directory(tmp_path):
    # `--list-peers` runs the benchmarks' own code without measuring anything.
    env = {**os.environ, "AUTOTUNE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "autotune", "bench", "--list-peers"], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "openblas" in done.stdout.lower()


def test_unknown_target_names_the_valid_ones_and_no_command_that_fails(tmp_path):
    for command in ("show", "report", "install"):
        done = autotune(command, "--target", "foo", home=tmp_path)
        assert done.returncode == 2
        assert f"usage: autotune {command}" in done.stderr
        assert "unknown target 'foo'" in done.stderr
        assert "valid targets: host, avx512, avx2, generic" in done.stderr
        assert "--target foo`" not in done.stderr  # no hint to run what cannot work


def test_unknown_option_prints_the_commands_usage(tmp_path):
    done = autotune("show", "--frobnicate", home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: autotune show")
    assert "unrecognized arguments: --frobnicate" in done.stderr


@pytest.mark.parametrize("args,message", [
    (["plan", "8", "8", "8", "--threads", "-1"], "'-1' is not a whole number from 0 to 256"),
    (["plan", "8", "8", "8", "--threads", "1e3"], "'1e3' is not a whole number from 0 to 256"),
    (["plan", "8", "8", "8", "--threads", "257"], "'257' is not a whole number from 0 to 256"),
    (["plan", "-8", "8", "8"], "'-8' is not a whole number from 0 to 9223372036854775807"),
    (["install", "--jobs", "0"], "'0' is not a whole number of 1 or more"),
    (["install", "--budget", "-5"], "'-5' is not a number of seconds"),
    (["show", "--limit", "0"], "'0' is not a whole number of 1 or more"),
])
def test_invalid_counts_are_refused(tmp_path, args, message):
    done = autotune(*args, home=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and f"usage: autotune {args[0]}" in done.stderr


def test_every_command_a_message_names_exists():
    """Hints in messages and pages (`autotune install --force`, ...) must parse as commands."""
    import re

    parser = cli.build_parser()
    sources = [*Path(ROOT, "autotune").rglob("*.py"), *Path(ROOT, "autotune").rglob("*.j2"),
               *Path(ROOT, "benchmarks").rglob("*.py"), Path(ROOT, "README.md")]
    named = set()
    for path in sources:
        for command in re.findall(r"`autotune ([a-z][^`{}<>\[\]|]*)`", path.read_text()):
            named.add(command.strip())
    assert {"install", "bench", "install --force", "clean --all", "show --paths"} <= named
    for command in sorted(named):
        try:
            parser.parse_args(command.split())
        except SystemExit:
            pytest.fail(f"`autotune {command}` is named in a message but does not parse")


# -- output into pipes ----------------------------------------------------------------

def test_piped_output_is_not_wrapped(tmp_path):
    table.save(emulated_table(TUNING), tmp_path)
    done = autotune("show", "--target", "sme2", home=tmp_path)  # stdout is a pipe here
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    summary = next(line for line in lines if line.startswith("tuning:"))
    assert len(summary) > 80 and summary.endswith("90 s)")  # one line, however long
    assert "13 trials: 5 complete, 7 pruned, 1 failed" in summary


def test_terminal_output_still_wraps_to_the_terminal():
    buffer = io.StringIO()
    console = Console(file=buffer, width=60, force_terminal=True)
    console.print("word " * 30)
    assert max(len(line) for line in buffer.getvalue().splitlines()) <= 60


@pytest.mark.parametrize("args", [["show", "--target", "sme2", "--json"], ["show", "--target", "sme2"],
                                  ["show", "--paths"]])
def test_a_closed_pipe_ends_quietly(tmp_path, args):
    table.save(emulated_table(TUNING), tmp_path)
    env = {**os.environ, "AUTOTUNE_HOME": str(tmp_path)}
    # The reader is gone before the command writes a byte: what `| head -0` does at once,
    # and `| head` does after its lines.
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141  # 128 + SIGPIPE, as a shell reports for `cat`
    assert stderr == ""


def test_a_closed_pipe_from_a_shell_pipeline(tmp_path):
    table.save(emulated_table(TUNING), tmp_path)
    script = f"set -o pipefail; {sys.executable} -m autotune show --target sme2 --json | head -n 1"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOTUNE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert done.stdout == "{\n"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert done.returncode in (0, 141)  # 0 when everything fitted the pipe before head left


def test_bench_without_its_package_says_what_to_do(monkeypatch, capsys):
    def missing():
        raise ImportError("No module named 'autotune.benchmarks'")

    monkeypatch.setattr(cli, "benchmarks_module", missing)
    assert cli.main(["bench", "--quick"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "autotune.benchmarks" in line and "reinstall autotune" in line and "pip install ." in line


def test_messages_on_stderr_are_not_wrapped_either(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a file: not a terminal
    err = cli.console(stderr=True)
    err.print("stored /some/home/tables/host.json: 701 kernels validated, 0 rejected, 419 selected " * 2)
    assert len(sys.stderr.getvalue().splitlines()) == 1


def test_a_compiler_for_another_word_size_is_one_line_before_any_build(tmp_path):
    """CC="gcc -m32" compiled every kernel and ended in a LibraryError traceback at the link."""
    done = autotune("install", "--quick", "--budget", "0", home=tmp_path, env={"CC": "gcc -m32"})
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "gcc -m32" in line and "cannot build a library for this host" in line and "CC=" in line
    assert not (tmp_path / "build").exists()  # refused before the first compile


def test_a_library_build_failure_is_one_line(tmp_path, monkeypatch, capsys):
    from autotune import install
    from autotune.link import LibraryError

    def fail(*args, **kwargs):
        raise LibraryError("gcc -O3 -shared -o lib.so a.c b.c\nIn file included from a.c:1:\n"
                           "a.h:3:10: fatal error: x.h: No such file or directory\ncompilation terminated.")

    monkeypatch.setattr(install, "install", fail)
    assert cli.main(["install", "--quick"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "fatal error: x.h: No such file or directory" in line and "AUTOTUNE_HOME" not in line


def _project(folder: Path) -> list[Path]:
    """A project folder: its own build/, lib/ and tables/, nothing of autotune's."""
    made = [folder / "build" / "main.o", folder / "lib" / "libproject.so", folder / "tables" / "prices.csv",
            folder / "journal" / "2026.md"]
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    return made


def test_clean_refuses_a_folder_that_is_not_a_home(tmp_path):
    """`AUTOTUNE_HOME=. autotune clean --all` in a project deleted its build/, lib/ and tables/."""
    made = _project(tmp_path)
    for args in (("clean",), ("clean", "--all")):
        done = autotune(*args, home=tmp_path)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert "not an autotune home" in line and MARKER in line
    assert all(path.read_text() == "mine" for path in made)


def test_clean_cleans_a_home_install_marked_and_an_older_home(tmp_path):
    from autotune.home import ensure_writable

    marked = ensure_writable(tmp_path / "new")  # what install does first
    assert (marked / MARKER).is_file()
    (marked / "build").mkdir()
    assert autotune("clean", "--all", home=marked).returncode == 0 and not (marked / "build").exists()
    # A home an older autotune filled has no marker, but its files are autotune's own.
    older = tmp_path / "older"
    table.save(make_table(), older)
    (older / "journal").mkdir()
    (older / "journal" / "host-0123abcd.jsonl").write_text("")
    done = autotune("clean", "--all", home=older)
    assert done.returncode == 0, done.stderr
    assert not (older / "tables").exists() and not (older / "journal").exists() and (older / MARKER).is_file()


def test_a_second_ctrl_c_while_the_first_is_handled_still_exits_130(monkeypatch, capsys):
    """The second press of a double Ctrl-C landed while Python evaluated `except
    user_errors()` (a call) for the first: it escaped every clause, and the
    interpreter died of SIGINT (status -2) instead of exiting with 130."""
    import signal

    def first_press(*args):
        raise KeyboardInterrupt

    def second_press():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_install", first_press)
    monkeypatch.setattr(cli, "user_errors", second_press)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert cli.main(["install"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "interrupted" in capsys.readouterr().err


def test_show_says_whether_the_kernels_clear_the_upper_halves_and_why():
    free = cli.upper_halves_lines({"dirty_ns": 2.83, "clean_ns": 4.03, "free": True})
    kept = cli.upper_halves_lines({"dirty_ns": 31.0, "clean_ns": 4.03, "free": False})
    assert free == ["vzeroupper: left out of the kernels (a call and SSE work after it 2.8 ns leaving "
                    "them dirty, 4.0 clearing them)"]
    assert kept[0].startswith("vzeroupper: kernels clear the upper halves before they return (")
    assert "31.0 ns leaving them dirty" in kept[0]
    assert cli.upper_halves_lines(None) == []  # an Arm table, or one from before the probe
