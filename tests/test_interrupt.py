"""Ctrl-C at any stage of `autotune install`: exit 130 soon, the previous table and library kept.

A first install makes the pair to keep; each test then starts a forced install
in a subprocess, waits for a stage's traces in the home (objects being compiled,
journal lines, the tuning database) and sends SIGINT, once or twice.

The install is started with SIGINT at its default disposition whatever the test
runner's: a runner started as a script's background job (CI, `pytest &`, nohup)
ignores SIGINT, its children inherit that, and Python then installs no Ctrl-C
handler at all (the tuning stage installed its own, so only that test passed):
the compiling and measuring tests saw the install run to its end with status 0.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .isa import best_simd_isa

ROOT = Path(__file__).resolve().parent.parent
SIMD = best_simd_isa()
PATTERN = f"at_sgemm_{SIMD}_nn_16x[1-4]_*"

pytestmark = [
    pytest.mark.skipif(SIMD not in ("avx512", "avx2"),
                       reason="needs avx512 or avx2 kernels, which this host cannot run"),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="watches the install through /proc"),
]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(home: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", "install", "--only", PATTERN, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_default_sigint)


def pair(home: Path) -> tuple[str, str]:
    """Digests of the installed table and library: what must survive an interrupted run."""
    files = (home / "tables" / "host.json", home / "lib" / "host" / "libautotune.so")
    return tuple(hashlib.sha256(f.read_bytes()).hexdigest() for f in files)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("interrupt-home")
    done = start(home, "--quick")
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    return home


def wait_for(proc: subprocess.Popen, condition, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, "the install ended before the stage came"
        assert time.monotonic() < deadline, "the stage never came"
        time.sleep(0.01)


def study_state(home: Path) -> dict[str, int]:
    """Each tuning file and the time it was last written.  SQLite's journal comes and
    goes while the install writes the study: one listed and gone before its stat is skipped."""
    folder = home / "tuning"
    state = {}
    for p in folder.iterdir() if folder.exists() else ():
        try:
            state[p.name] = p.stat().st_mtime_ns
        except FileNotFoundError:
            continue
    return state


def journal_lines(home: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in (home / "journal").glob("*.jsonl"))


def compiling(pid: int) -> bool:
    """Whether a compiler (``cc ... -c``) runs as a child of ``pid`` (Linux's /proc)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                if b"\0-c\0" in (entry / "cmdline").read_bytes():
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


@pytest.mark.parametrize("stage", ["compiling", "measuring", "tuning"])
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_keeps_the_previous_pair(installed, stage, presses):
    before = pair(installed)
    lines = journal_lines(installed)
    proc = start(installed, "--force", "--budget", "60")
    try:
        if stage == "compiling":
            wait_for(proc, lambda: compiling(proc.pid))
        elif stage == "measuring":
            # --force starts a fresh journal: the first new line is a finished validation.
            wait_for(proc, lambda: (installed / "build").exists() and 0 < journal_lines(installed) != lines)
        else:
            # The study database of earlier runs is there already: wait for this run to write it.
            seen = study_state(installed)
            wait_for(proc, lambda: study_state(installed) != seen)
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        if presses == 2:
            time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, (stage, proc.returncode, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    assert waited < 5.0, f"{stage}: {waited:.1f} s to stop"
    assert pair(installed) == before
    # A compile that was killed is not the source's fault: nothing cached as an error.
    assert not list((installed / "build").rglob("*.error"))
