"""Where autotune keeps what it builds: $AUTOTUNE_HOME, never the source tree."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import platformdirs


class HomeError(RuntimeError):
    """The home directory cannot be used; the message says why and what to do."""


def home() -> Path:
    """$AUTOTUNE_HOME, else the user's data directory."""
    configured = os.environ.get("AUTOTUNE_HOME")
    return Path(configured).expanduser() if configured else Path(platformdirs.user_data_dir("autotune"))


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
    return Path(configured) if configured else Path(platformdirs.user_data_dir("autotune-tools"))


def kernels_src() -> Path:
    """The shipped C sources: kernels_src/ of a checkout or of the installed package."""
    checkout = Path(__file__).resolve().parent.parent / "kernels_src"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("autotune.kernels_src")))
