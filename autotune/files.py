"""Replacing a file so that readers see the old one or the new one, never half.

Every atomic write of the project comes through here (tables, reports, quantised
weights, generated sources, the installed library's files), because renaming a
temporary file over a path has three traps that each caller would otherwise meet
on its own:

* a symlink at the path would be replaced by a regular file, cutting the link; the
  user meant to write where it points, so the link is followed and its target
  replaced;
* a FIFO, a device node or a directory at the path would be replaced (as root, a
  report to ``/dev/full`` replaced the device node); such a path is refused;
* the new file would carry the temporary file's private mode (0600); an existing
  file keeps its mode, a new one gets what ``open`` would give it under the umask.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


class NotRegularFileError(OSError):
    """The path names something other than a regular file; it is left as it is."""


def destination(path: str | os.PathLike[str]) -> Path:
    """Where a write to ``path`` must land: the file at the end of its links.

    Raises :class:`NotRegularFileError` when that is not a regular file (a missing
    one is fine: the write creates it).
    """
    final = Path(os.path.realpath(path))
    try:
        mode = final.stat().st_mode
    except FileNotFoundError:
        return final
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise NotRegularFileError(errno.EEXIST, f"{kind} is there, not a regular file; refusing to replace it",
                                  str(path))
    return final


def _default_mode() -> int:
    # os.umask can only be read by setting it; set it back at once.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def replace(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Move the finished file ``source`` over ``path`` (same file system) atomically.

    An existing file's mode is kept; ``source``'s own mode stands for a new file (a
    linker's output is executable). Returns the path replaced, links followed.
    """
    final = destination(path)
    try:
        os.chmod(source, stat.S_IMODE(final.stat().st_mode))
    except FileNotFoundError:
        pass
    os.replace(source, final)
    return final


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``'s destination; on a clean exit it replaces it.

    An exception (or Ctrl-C) inside the block leaves ``path`` untouched and removes
    the temporary file.
    """
    final = destination(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        keep = stat.S_IMODE(final.stat().st_mode)
    except FileNotFoundError:
        keep = _default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, mode) as handle:
            os.fchmod(handle.fileno(), keep)  # mkstemp makes it 0600
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically; returns the file written (links followed)."""
    with atomic_writer(path, "w") as handle:
        handle.write(text)
    return Path(os.path.realpath(path))
