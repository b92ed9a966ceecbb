"""One install per home at a time, and a staging folder per run (issue 26, item 8).

Two installs on one home shared ``lib/.staging-host`` with no lock: a table ended
up beside the other run's library, or the second failed on the first's staging.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune import install as install_mod
from autotune.home import LOCK, HomeBusyError, ensure_writable, install_lock
from autotune.install import InstallOptions, install

ROOT = Path(__file__).resolve().parent.parent


def _holder(home: Path) -> subprocess.Popen:
    """Another process holding the home's lock until its stdin closes."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from autotune.home import install_lock
        with install_lock(Path({str(home)!r})):
            print("held", flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_install_is_refused_at_once_naming_the_first(tmp_path, monkeypatch):
    home = ensure_writable(tmp_path / "home")
    ran: list[bool] = []
    monkeypatch.setattr(install_mod, "_install", lambda *a: ran.append(True))
    holder = _holder(home)
    try:
        with pytest.raises(HomeBusyError, match=rf"pid {holder.pid}\b") as caught:
            install(InstallOptions(quick=True, home=home))
        assert "\n" not in str(caught.value) and not ran
        # The command line says it in one line, status 2, before any stage starts.
        done = subprocess.run([sys.executable, "-m", "autotune", "install", "--quick"], capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)})
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert f"pid {holder.pid}" in line and "busy" in line
        assert not (home / "build").exists()
        # `clean` waits for no one either: it does not delete under a running install.
        (home / "build").mkdir()
        done = subprocess.run([sys.executable, "-m", "autotune", "clean"], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)})
        assert done.returncode == 2 and f"pid {holder.pid}" in done.stderr and (home / "build").exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    install(InstallOptions(quick=True, home=home))  # free again once the first has ended
    assert ran == [True]


def test_the_lock_is_the_process_s_not_the_file_s(tmp_path):
    """A run killed with SIGKILL leaves the file but not the lock."""
    home = ensure_writable(tmp_path)
    holder = _holder(home)
    holder.kill()
    holder.wait(timeout=30)
    assert (home / LOCK).exists()
    with install_lock(home):
        assert (home / LOCK).read_text().strip() == str(os.getpid())
    assert (home / LOCK).read_text() == ""  # no PID left behind that has gone


def test_each_run_stages_in_its_own_folder_and_stale_ones_go(tmp_path, monkeypatch):
    home = ensure_writable(tmp_path)
    stale = [home / "lib" / ".staging-host", home / "lib" / ".staging-host-4242"]
    for folder in stale:
        folder.mkdir(parents=True)
        (folder / "libautotune.so").write_text("a killed run's")
    seen: list[Path] = []

    def pipeline(options, console, host):
        staging = install_mod.staging_dir(options.target, home)
        assert not any(folder.exists() for folder in stale)
        assert str(os.getpid()) in staging.name and staging.name.startswith(".staging-host")
        staging.mkdir(parents=True)
        seen.append(staging)
        raise KeyboardInterrupt  # a run that ends early still leaves no staging behind

    monkeypatch.setattr(install_mod, "_install", pipeline)
    with pytest.raises(KeyboardInterrupt):
        install(InstallOptions(quick=True, home=home))
    assert seen and not seen[0].exists()
    assert list((home / "lib").iterdir()) == []


def test_ctrl_c_during_the_commit_waits_for_its_end_whichever_thread_gets_it(tmp_path, monkeypatch):
    """SIGINT was blocked in the main thread alone: the kernel handed it to another
    thread (the library's workers, loaded for tuning, or a pump thread), Python's
    handler ran the KeyboardInterrupt in the main thread at once, inside the commit,
    and left a new library beside the old table."""
    import signal
    import threading
    import types

    from autotune import table
    from tests.test_cli import make_table

    home = ensure_writable(tmp_path / "home")
    staged = tmp_path / "staged"
    staged.mkdir()
    for name in ("libautotune.so", "autotune.h", "libautotune.hash"):
        (staged / name).write_text(f"new {name}")
    idle = threading.Event()
    bystander = threading.Thread(target=idle.wait, daemon=True)  # SIGINT not blocked here
    bystander.start()
    real_replace = install_mod.files_mod.replace
    pressed = []

    def replace_and_press(source, path):
        if not pressed:
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the first file goes in
            for _ in range(1000):  # bytecodes enough for a pending KeyboardInterrupt to land
                pass
        return real_replace(source, path)

    monkeypatch.setattr(install_mod.files_mod, "replace", replace_and_press)
    stored = make_table()
    try:
        with pytest.raises(KeyboardInterrupt):
            install_mod.commit(stored, types.SimpleNamespace(library=staged / "libautotune.so"), home)
    finally:
        idle.set()
    # Delivered after the commit: the library and the table both made it.
    final = home / "lib" / stored.target
    for name in ("libautotune.so", "autotune.h", "libautotune.hash"):
        assert (final / name).read_text() == f"new {name}"
    assert table.table_path(stored.target, home).exists()
