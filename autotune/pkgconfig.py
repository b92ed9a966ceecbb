"""The pkg-config file of an installed library: how C, C++ and Fortran builds find it.

Written beside the library, into ``<library dir>/pkgconfig/autotune.pc``, with
absolute paths of that directory: ``PKG_CONFIG_PATH=<library dir>/pkgconfig
pkg-config --cflags --libs autotune`` then gives the header's directory, the
library and an rpath, so the program runs without LD_LIBRARY_PATH.  It names
the final directory, so the install writes it when it commits the library, not
in the staging directory the library is built in.
"""

from __future__ import annotations

from pathlib import Path

from . import __version__
from .files import atomic_write_text

PC_NAME = "autotune.pc"


def pc_dir(library_dir: Path) -> Path:
    """The directory to put on PKG_CONFIG_PATH."""
    return Path(library_dir) / "pkgconfig"


def _escaped(path: Path) -> str:
    # pkg-config splits its output on blanks; a backslash keeps one inside a path.
    return str(path).replace("\\", "\\\\").replace(" ", "\\ ")


def pc_text(library_dir: Path) -> str:
    """autotune.pc for a library (and autotune.h) in ``library_dir``."""
    where = _escaped(Path(library_dir).resolve())
    return (
        f"libdir={where}\n"
        f"includedir={where}\n"
        "\n"
        "Name: autotune\n"
        "Description: install-time autotuned GEMM: at_* plans, CBLAS and Fortran BLAS ?gemm\n"
        f"Version: {__version__}\n"
        "Cflags: -I${includedir}\n"
        # The rpath: a program finds the library where the install put it.
        "Libs: -L${libdir} -Wl,-rpath,${libdir} -lautotune\n"
        "Libs.private: -lm -lpthread\n"
    )


def write_pc(library_dir: Path) -> Path:
    """Write ``autotune.pc`` for ``library_dir`` atomically; returns its path."""
    directory = pc_dir(library_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / PC_NAME
    atomic_write_text(final, pc_text(library_dir))
    return final
