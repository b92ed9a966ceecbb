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
