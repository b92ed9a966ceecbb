"""Where autotune keeps what it builds: $AUTOTUNE_HOME, never the source tree."""

from __future__ import annotations

import fcntl
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: The file that makes a folder an autotune home: written when a home is first used,
#: and what `autotune clean` asks for before it deletes anything there.
MARKER = ".autotune-home"
_MARKER_TEXT = ("This folder is an autotune home ($AUTOTUNE_HOME): `autotune clean` deletes its build/,\n"
                "journal/ and staged libraries, and with --all its tables/ and lib/.\n")

#: Targets whose files an older home (one from before the marker) may hold; the same
#: names as toolchain.KNOWN_ISAS plus "host", written out so this module stays light.
_TARGETS = ("host", "avx512", "avx2", "generic", "neon", "sme2")


class HomeError(RuntimeError):
    """The home directory cannot be used; the message says why and what to do."""


class HomeBusyError(HomeError):
    """Another process holds the home's install lock."""


#: The lock file one install (or clean) holds for as long as it runs.
LOCK = "install.lock"


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
        mark(path)
    except OSError as exc:
        raise HomeError(
            f"cannot write to {path} ({exc.strerror or exc}); set AUTOTUNE_HOME to a writable directory"
        ) from exc
    return path


def mark(path: Path) -> None:
    """Make ``path`` a home (idempotent): the marker `clean` looks for."""
    marker = path / MARKER
    if not marker.is_file():
        marker.write_text(_MARKER_TEXT)


def _older_home(path: Path) -> bool:
    """Whether ``path`` holds what only autotune writes, as homes did before the marker.

    Names, not folders, decide: a project has build/, lib/ and tables/ of its own,
    never a table named after an autotune target, a journal keyed by a fingerprint,
    a content-hashed kernel object or a libautotune.
    """
    hashed = re.compile(r"[0-9a-f]{64}\.(o|error)")
    journal = re.compile(rf"({'|'.join(_TARGETS)})-[0-9a-f]+\.jsonl")
    return (any((path / "tables" / f"{t}.json").is_file() for t in _TARGETS)
            or any(journal.fullmatch(p.name) for p in _children(path / "journal"))
            or any((path / "lib" / t / n).is_file() for t in _TARGETS for n in ("libautotune.so", "libautotune.dylib"))
            or any(hashed.fullmatch(p.name) for d in _children(path / "build") for p in _children(d / "objects")))


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def check_cleanable(path: Path) -> None:
    """Raise :class:`HomeError` unless ``path`` is an autotune home that may be cleaned.

    A home is a folder with the marker; the default home (the user's data folder
    named after autotune) and a home an older autotune filled (its tables, journals,
    objects or library are there, see :func:`_older_home`) are homes too, and get the
    marker now.  Anything else, e.g. a project folder given as AUTOTUNE_HOME=., is
    refused: its build/, lib/ and tables/ are not autotune's to delete.
    """
    if (path / MARKER).is_file():
        return
    if not path.is_dir():
        raise HomeError(f"{path} is not a folder: nothing to clean")
    if path == user_data_dir("autotune") or _older_home(path):
        try:
            mark(path)
        except OSError:
            pass  # a read-only home is still cleaned as far as it can be
        return
    raise HomeError(f"{path} is not an autotune home (it has no {MARKER} file, which `autotune install` "
                    "writes): refusing to delete anything in it; set AUTOTUNE_HOME to the home to clean")


@contextmanager
def install_lock(root: Path) -> Iterator[None]:
    """Hold ``root``'s install lock for the block, or raise :class:`HomeBusyError` at once.

    Two installs in one home shared the staging library and the journal: a table
    ended up beside the other run's library.  An flock (not a file's existence) is
    the lock, so a run killed by SIGKILL leaves nothing to clean up: the kernel
    drops it with the process.  The holder's PID is written into the file for the
    message of the one refused.  Failing fast rather than waiting: an install takes
    minutes, and a second one started by mistake should say so, not hang.
    """
    fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
            holder = f"pid {pid}" if pid else "which has not written its pid yet"
            raise HomeBusyError(f"{root} is busy: another autotune install or clean ({holder}) is using it; "
                                "wait for it to end, or set AUTOTUNE_HOME to another home") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # still held: no reader sees a PID that has gone
    finally:
        os.close(fd)


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
