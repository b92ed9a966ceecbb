"""Where autotune keeps what it builds: $AUTOTUNE_HOME, never the source tree."""

from __future__ import annotations

import os
import sys
from pathlib import Path


class HomeError(RuntimeError):
    """The home directory cannot be used; the message says why and what to do."""


def user_data_dir(app: str) -> Path:
    """platformdirs' ``user_data_dir(app)``: where a user's data for ``app`` lives.

    The first ``autotune.gemm`` looks for the library here, and importing
    platformdirs was most of that call's cost, so on Linux its rule (the XDG base
    directory one: ``$XDG_DATA_HOME`` when absolute, else ``~/.local/share``) is
    written out; the install and the loader both come here, so they cannot
    disagree, and tests/test_runtime.py checks the rule against platformdirs.
    Other systems ask platformdirs.
    """
    if sys.platform.startswith("linux"):
        xdg = os.environ.get("XDG_DATA_HOME", "")
        return Path(xdg if os.path.isabs(xdg) else os.path.expanduser("~/.local/share")) / app
    import platformdirs

    return Path(platformdirs.user_data_dir(app))


def home() -> Path:
    """$AUTOTUNE_HOME, else the user's data directory."""
    configured = os.environ.get("AUTOTUNE_HOME")
    return Path(configured).expanduser() if configured else user_data_dir("autotune")


def ensure_writable(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise HomeError(
            f"cannot write to {path} ({exc.strerror or exc}); set AUTOTUNE_HOME to a writable directory"
        ) from exc
    return path


def tools_dir() -> Path:
    """Third-party tools the setup script unpacks (the QEMU with SME2 support).

    Kept apart from $AUTOTUNE_HOME so tests with a temporary home still find them.
    """
    configured = os.environ.get("AUTOTUNE_TOOLS")
    return Path(configured) if configured else user_data_dir("autotune-tools")


def kernels_src() -> Path:
    """The shipped C sources: kernels_src/ of a checkout or of the installed package."""
    checkout = Path(__file__).resolve().parent.parent / "kernels_src"
    if checkout.is_dir():
        return checkout
    from importlib import resources

    return Path(str(resources.files("autotune.kernels_src")))
