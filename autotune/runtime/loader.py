"""Finding and loading libautotune: ctypes for the C API, _atfast for the hot path.

The library of the native install lives in ``$AUTOTUNE_HOME/lib/host/`` (cross
builds for other machines beside it are never loaded); ``$AUTOTUNE_LIBRARY``
names one explicitly.  Loading it never detects, builds or
reads a table: everything the hot path needs is baked into the library.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import struct
import sys
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from ..home import home


def library_name(system: str = sys.platform) -> str:
    """The shared library's file name on ``system`` (a ``sys.platform`` value, or a Target's os)."""
    return "libautotune.dylib" if system == "darwin" else "libautotune.so"


#: The file every install on this machine writes and the loader opens (the link
#: stage names it after this): ``libautotune.dylib`` on macOS, ``.so`` elsewhere.
LIBRARY_NAME = library_name()

c_int64 = ctypes.c_int64
c_int32 = ctypes.c_int32


class at_step(ctypes.Structure):
    _fields_ = [
        ("kernel", c_int32), ("thread", c_int32), ("i0", c_int64), ("j0", c_int64),
        ("mb", c_int32), ("nb", c_int32), ("pack", c_int32),
    ]


class at_plan_info(ctypes.Structure):
    _fields_ = [
        ("dtype", c_int32), ("layout", c_int32), ("trans_a", c_int32), ("trans_b", c_int32),
        ("M", c_int64), ("N", c_int64), ("K", c_int64),
        ("lda", c_int64), ("ldb", c_int64), ("ldc", c_int64),
        ("path", c_int32), ("threads", c_int32), ("kernel_trans", c_int32), ("a_copied", c_int32),
        ("nsteps", c_int64), ("blk_m", c_int64), ("blk_n", c_int64), ("blk_k", c_int64),
        ("predicted_seconds", ctypes.c_double), ("memops", ctypes.c_double),
        ("prefetch_rows", c_int64),
        ("direct_steps", c_int64),
        ("column_order", c_int64),
    ]


class at_kernel_info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p), ("dtype", c_int32), ("trans_a", c_int32),
        ("trans_b", c_int32), ("mr", c_int32), ("nr", c_int32),
    ]


class Runtime(NamedTuple):
    """A loaded library: ``lib`` (ctypes, prototypes set) and its ``fast`` extension or None.

    A NamedTuple, not a dataclass: the first gemm creates one, and importing
    dataclasses would cost that call more than the rest of this module.
    """

    path: Path
    lib: ctypes.CDLL
    fast: ModuleType | None
    #: Why ``fast`` is None although an extension is there (damaged, another
    #: version): the one warning gemm gives says it.
    fast_problem: str | None = None


class LibraryRefused(OSError):
    """A library exists but must not be used here; the message says why and what to run."""


#: The target whose library ``autotune.gemm`` loads: the native install.  Cross
#: builds (``--target neon|sme2``) live beside it, for another machine.
HOST_TARGET = "host"


def find_library() -> Path | None:
    """$AUTOTUNE_LIBRARY, else ``$AUTOTUNE_HOME/lib/host/libautotune.so`` (``.dylib`` on macOS) when it exists."""
    explicit = os.environ.get("AUTOTUNE_LIBRARY")
    if explicit:
        return Path(explicit)
    path = home() / "lib" / HOST_TARGET / LIBRARY_NAME
    return path if path.exists() else None


def _prototypes(lib: ctypes.CDLL) -> None:
    P = ctypes.c_void_p
    i64 = c_int64
    lib.at_plan_create.restype = P
    lib.at_plan_create.argtypes = [ctypes.c_int] * 4 + [i64] * 6
    lib.at_plan_create_ex.restype = P
    lib.at_plan_create_ex.argtypes = [ctypes.c_int] * 4 + [i64] * 6 + [ctypes.c_int]
    lib.at_plan_destroy.restype = None
    lib.at_plan_destroy.argtypes = [P]
    lib.at_plan_execute.restype = ctypes.c_int
    lib.at_plan_execute.argtypes = [P, ctypes.c_double, P, P, ctypes.c_double, P]
    lib.at_plan_get_info.restype = ctypes.c_int
    lib.at_plan_get_info.argtypes = [P, ctypes.POINTER(at_plan_info)]
    lib.at_plan_steps.restype = i64
    lib.at_plan_steps.argtypes = [P, ctypes.POINTER(at_step), i64]
    if hasattr(lib, "at_plan_usage"):
        lib.at_plan_steps_from.restype = i64
        lib.at_plan_steps_from.argtypes = [P, i64, ctypes.POINTER(at_step), i64]
        lib.at_plan_usage.restype = ctypes.c_int
        lib.at_plan_usage.argtypes = [P, ctypes.POINTER(i64), ctypes.POINTER(i64)]
    lib.at_kernel_count.restype = ctypes.c_int
    lib.at_kernel_count.argtypes = []
    lib.at_kernel_get.restype = ctypes.c_int
    lib.at_kernel_get.argtypes = [ctypes.c_int, ctypes.POINTER(at_kernel_info)]
    if hasattr(lib, "at_cpu_check"):
        lib.at_cpu_check.restype = ctypes.c_int
        lib.at_cpu_check.argtypes = []
        lib.at_required_features.restype = ctypes.c_char_p
        lib.at_required_features.argtypes = []
    if hasattr(lib, "at_kernel_usable"):
        lib.at_kernel_usable.restype = ctypes.c_int
        lib.at_kernel_usable.argtypes = [ctypes.c_int]
    lib.at_last_error.restype = ctypes.c_char_p
    lib.at_last_error.argtypes = []
    lib.at_set_num_threads.restype = None
    lib.at_set_num_threads.argtypes = [ctypes.c_int]
    lib.at_get_num_threads.restype = ctypes.c_int
    lib.at_get_num_threads.argtypes = []
    lib.at_plan_cache_clear.restype = None
    lib.at_plan_cache_clear.argtypes = []
    lib.at_plan_cache_stats.restype = None
    lib.at_plan_cache_stats.argtypes = [ctypes.POINTER(i64), ctypes.POINTER(i64)]
    lib.at_gemm.restype = ctypes.c_int
    lib.at_gemm.argtypes = [ctypes.c_int] * 4 + [i64] * 3 + [ctypes.c_double, P, i64, P, i64,
                                                              ctypes.c_double, P, i64]
    # Libraries built before the parameter override existed lack these two; the
    # rest of the API works the same without them.  They take a pointer to
    # at_tune_params (``byref(at_tune_params())``, or None for the built-in
    # parameters) declared as void *: the struct's ctypes mirror lives in
    # params.py, which the first gemm must not pay for importing.
    if hasattr(lib, "at_params_get"):
        lib.at_params_get.restype = ctypes.c_int
        lib.at_params_get.argtypes = [P]
        lib.at_params_set.restype = ctypes.c_int
        lib.at_params_set.argtypes = [P]
    lib.at_plan_execute_batch.restype = ctypes.c_int
    lib.at_plan_execute_batch.argtypes = [P, i64, ctypes.c_double, P, i64, P, i64,
                                          ctypes.c_double, P, i64]
    lib.at_gemm_batch_strided.restype = ctypes.c_int
    lib.at_gemm_batch_strided.argtypes = (
        [ctypes.c_int] * 4 + [i64] * 3 + [ctypes.c_double, P, i64, i64, P, i64, i64,
                                          ctypes.c_double, P, i64, i64, i64]
    )


#: The extension's calling convention with api.use (pyfast.c's AT_FAST_ABI).
FAST_ABI = 4


def damage(path: Path) -> str | None:
    """Why an ELF shared object is unusable (truncated, not ELF), or None when it looks whole.

    dlopen of a truncated library maps segments past the end of the file and
    the process dies of SIGBUS when it touches them, so a file whose headers
    point beyond its end is refused before it is opened.  Other formats
    (Mach-O) are left to the dynamic loader.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
            if head[:4] != b"\x7fELF":
                return None if head[:4] in _MACHO_MAGIC else "not a shared library"
            if len(head) < 64 or head[4] != 2:
                return "truncated" if len(head) < 64 else None  # 32-bit: not ours to judge
            order = "<" if head[5] == 1 else ">"
            phoff, shoff = struct.unpack_from(order + "QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 0x36)
            if shoff + shnum * shentsize > size or phoff + phnum * phentsize > size:
                return "truncated"
            f.seek(phoff)
            table = f.read(phnum * phentsize)
            for i in range(phnum):
                ptype, _, offset, _, _, filesz = struct.unpack_from(order + "IIQQQQ", table, i * phentsize)
                if ptype == 1 and offset + filesz > size:  # PT_LOAD
                    return "truncated"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


_MACHO_MAGIC = (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf", b"\xca\xfe\xba\xbe")


def _load_extension(directory: Path) -> tuple[ModuleType | None, str | None]:
    """The ``_atfast`` beside the library, or None and why when it is there but unusable.

    A damaged or outdated extension costs speed, never answers: gemm then
    computes with numpy, and its one warning (api.use) says what to run.  Nothing
    is said here: a second message from the loader once contradicted it.
    """
    # The import system's own suffixes (the first is sysconfig's EXT_SUFFIX, the
    # name link.py gives it) without importing sysconfig on the first gemm.
    path = next((p for p in (directory / f"_atfast{s}" for s in importlib.machinery.EXTENSION_SUFFIXES)
                 if p.exists()), None)
    if path is None:
        return None, None
    try:
        problem = damage(path)
        if problem:
            raise ImportError(problem)
        loader = importlib.machinery.ExtensionFileLoader("_atfast", str(path))
        spec = importlib.util.spec_from_file_location("_atfast", str(path), loader=loader)
        if spec is None:
            raise ImportError("no module spec")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as exc:
        return None, f"the extension {path} does not load ({exc}): run `autotune install --force`"
    if getattr(module, "ABI", None) != FAST_ABI:
        return None, (f"the extension {path} was built by another version of autotune: run "
                      "`autotune install --force`")
    return module, None


#: Functions every libautotune exports and the loader declares: a library without
#: them is another one (a system BLAS named by AUTOTUNE_LIBRARY, say).
_SIGNATURE = ("at_gemm", "at_plan_create_ex", "at_gemm_batch_strided", "at_last_error")


_lock = threading.Lock()
_loaded: dict[Path, Runtime] = {}


def load(path: Path | str | None = None) -> Runtime | None:
    """Load (once per path) the library at ``path`` or :func:`find_library`'s; None if absent.

    The library is opened RTLD_LOCAL: its BLAS symbols (``sgemm_``, ``xerbla_``)
    never bind other code loaded later, and two libraries can live in one process
    (the extension reaches its own through the entry points api.use hands it).
    Raises OSError when a library exists but cannot be loaded (damaged), and
    :class:`LibraryRefused` when its kernels are above ``AUTOTUNE_ISA``: a broken
    install must be seen, not silently replaced by the fallback.  A library
    some of whose kernels this CPU cannot run (built for another machine) loads
    with a warning: its plans use the other kernels.
    """
    resolved = Path(path) if path is not None else find_library()
    if resolved is None or not resolved.exists():
        return None
    resolved = resolved.resolve()
    with _lock:
        if resolved in _loaded:
            return _loaded[resolved]
        try:
            problem = damage(resolved)
            if problem:
                raise OSError(problem)
            lib = ctypes.CDLL(str(resolved), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise OSError(f"{resolved} does not load ({exc}): run `autotune install --force`") from exc
        missing = [name for name in _SIGNATURE if not hasattr(lib, name)]
        if missing:
            # Refused once, here, rather than an AttributeError on every call.
            raise LibraryRefused(f"{resolved} is not libautotune (it has no {missing[0]}; another BLAS?): "
                                 "point AUTOTUNE_LIBRARY at a libautotune, or unset it to use the "
                                 "installed one")
        _prototypes(lib)
        # A library built for another CPU: right answers, not its speed.
        if hasattr(lib, "at_cpu_check") and lib.at_cpu_check() != 0:
            warnings.warn(f"{resolved}: {lib.at_last_error().decode(errors='replace')}",
                          RuntimeWarning, stacklevel=2)
        if hasattr(lib, "at_required_features"):
            needs = lib.at_required_features().decode().split()
            cap = os.environ.get("AUTOTUNE_ISA")
            # host.py (archspec, subprocess, the detection tables) is needed only to
            # judge a cap: without one, the first gemm must not pay for importing it.
            if cap:
                from ..host import ISA_CAP_VARIABLE, IsaCapError, above_cap, normalized_arch
            try:
                over = above_cap(normalized_arch(os.uname().machine), needs, cap) if cap else ()
            except IsaCapError as exc:
                raise LibraryRefused(str(exc)) from exc
            if over:
                raise LibraryRefused(
                    f"{resolved} needs {' '.join(over)}, above {ISA_CAP_VARIABLE}={cap}: run "
                    f"`autotune install` with {ISA_CAP_VARIABLE}={cap} to build a library for it")
        runtime = Runtime(resolved, lib, *_load_extension(resolved.parent))
        _loaded[resolved] = runtime
        return runtime


def __getattr__(name: str) -> Any:
    # at_tune_params, the struct at_params_get / at_params_set exchange, on demand
    # (see _prototypes): params.py stays off the first gemm's path.
    if name == "at_tune_params":
        from ..params import CTuneParams

        return CTuneParams
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
