"""What every test shares: a home of its own, and one runtime library per session.

No test reads or writes the user's ``$AUTOTUNE_HOME``: a library installed there
would be found by the runtime's loader and mix its plan cache and parameters with
the ones a test builds.  The session home is set here, at import, before any test
module imports autotune; each test then gets a fresh one of its own.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from autotune.table import TunedTable
    from autotune.toolchain import Target

_SESSION_HOME = tempfile.mkdtemp(prefix="autotune-test-home-")
atexit.register(shutil.rmtree, _SESSION_HOME, ignore_errors=True)
os.environ["AUTOTUNE_HOME"] = _SESSION_HOME
# An install under test measures at once: under pytest-xdist the other worker is the
# "other process" the install would otherwise wait for (tests/test_crossovers.py
# covers the wait itself).
os.environ["AUTOTUNE_QUIET_WAIT"] = "0"
os.environ.pop("AUTOTUNE_LIBRARY", None)
# The Ctrl-C tests press Ctrl-C as a person at a terminal does.  A suite started in the
# background of a script (`cmd &`, nohup) inherits SIGINT ignored, which the install
# honours by design (tune._deferred_interrupt): every press would be lost and six tests
# fail.  The suite itself takes Ctrl-C as an interactive run would; its children, which
# exec, start with the default disposition again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from .untuned import build_untuned, small_selection  # noqa: E402  (after the home is set)


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """A fresh, empty $AUTOTUNE_HOME for every test."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("AUTOTUNE_HOME", str(home))
    monkeypatch.delenv("AUTOTUNE_LIBRARY", raising=False)
    return home


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory):
    """The session's model-provenance library: a slice of the host's fastest family.

    One library for the whole session: a process keeps every library it loaded
    mapped, and the plan-cache tests need all modules to call the same copy.
    """
    return build_untuned(tmp_path_factory.getbasetemp() / "runtime-home", select=small_selection)


@dataclass(frozen=True)
class ArmInstall:
    table: TunedTable
    library: Path
    target: Target  # the SME2 family's; its runner is QEMU
    home: Path  # the install's AUTOTUNE_HOME: its compiled objects, to link again from


def _run_wide_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test run that every pytest-xdist worker sees: the base
    temporary directory of the controller (each worker's is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(request.config, "workerinput") else base


@pytest.fixture(scope="session")
def sme2_install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ArmInstall:
    """`autotune install --target sme2 --quick` once per run, as on an x86-64
    machine: the aarch64 library a device gets (SME2 kernel sets for SVL 128, 256 and 512, and the
    NEON family), cross-built and validated under QEMU.  Several minutes of
    emulation, so every test that needs that library shares this one, across
    pytest-xdist workers too: the first worker installs under a lock, the others
    wait for it and load what it stored (then the emulator runs that use the
    library spread over every worker)."""
    import fcntl

    from autotune import table as tables
    from autotune.host import HostInfo
    from autotune.install import InstallOptions, install
    from autotune.toolchain import ToolchainError, arm_target

    host = HostInfo(arch="x86_64", os="linux", cpu="x86-64 (cross-building for aarch64)", features=())
    try:
        target = arm_target("sme2", host, svl_bits=512)
    except ToolchainError as exc:
        pytest.skip(f"no Arm toolchain: {exc}")
    shared = _run_wide_dir(request, tmp_path_factory)
    home = shared / "sme2-install"
    finished = shared / "sme2-install.library"  # written last: the install is complete
    with open(shared / "sme2-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if finished.exists():
            return ArmInstall(tables.load("sme2", home), Path(finished.read_text()), target, home)
        result = install(InstallOptions(target="sme2", quick=True, home=home), host=host)
        assert result.library is not None, result.notes
        tables.atomic_write_text(finished, str(result.library))
    return ArmInstall(result.table, result.library, target, home)
