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
import tempfile

import pytest

_SESSION_HOME = tempfile.mkdtemp(prefix="autotune-test-home-")
atexit.register(shutil.rmtree, _SESSION_HOME, ignore_errors=True)
os.environ["AUTOTUNE_HOME"] = _SESSION_HOME
os.environ.pop("AUTOTUNE_LIBRARY", None)

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
