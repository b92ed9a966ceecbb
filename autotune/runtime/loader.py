"""Finding and loading libautotune: ctypes for the C API, _atfast for the hot path.

The library of an install lives in ``$AUTOTUNE_HOME/lib/<target>/``;
``$AUTOTUNE_LIBRARY`` names one explicitly.  Loading it never detects, builds or
reads a table: everything the hot path needs is baked into the library.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..home import home
from ..params import CTuneParams as at_tune_params  # the C name, for the prototypes below
from .library import LIBRARY_NAME

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
        ("path", c_int32), ("threads", c_int32), ("kernel_trans", c_int32), ("reserved", c_int32),
        ("nsteps", c_int64), ("blk_m", c_int64), ("blk_n", c_int64), ("blk_k", c_int64),
        ("predicted_seconds", ctypes.c_double), ("memops", ctypes.c_double),
    ]


class at_kernel_info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p), ("dtype", c_int32), ("trans_a", c_int32),
        ("trans_b", c_int32), ("mr", c_int32), ("nr", c_int32),
    ]


@dataclass(frozen=True)
class Runtime:
    """A loaded library: ``lib`` (ctypes, prototypes set) and its ``fast`` extension or None."""

    path: Path
    lib: ctypes.CDLL
    fast: ModuleType | None


def find_library() -> Path | None:
    """$AUTOTUNE_LIBRARY, else the newest ``$AUTOTUNE_HOME/lib/*/libautotune.so``."""
    explicit = os.environ.get("AUTOTUNE_LIBRARY")
    if explicit:
        return Path(explicit)
    root = home() / "lib"
    try:
        found = sorted(root.glob(f"*/{LIBRARY_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    return found[0] if found else None


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
    lib.at_kernel_count.restype = ctypes.c_int
    lib.at_kernel_count.argtypes = []
    lib.at_kernel_get.restype = ctypes.c_int
    lib.at_kernel_get.argtypes = [ctypes.c_int, ctypes.POINTER(at_kernel_info)]
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
    # rest of the API works the same without them.
    if hasattr(lib, "at_params_get"):
        lib.at_params_get.restype = ctypes.c_int
        lib.at_params_get.argtypes = [ctypes.POINTER(at_tune_params)]
        lib.at_params_set.restype = ctypes.c_int
        lib.at_params_set.argtypes = [ctypes.POINTER(at_tune_params)]
    lib.at_plan_execute_batch.restype = ctypes.c_int
    lib.at_plan_execute_batch.argtypes = [P, i64, ctypes.c_double, P, i64, P, i64,
                                          ctypes.c_double, P, i64]
    lib.at_gemm_batch_strided.restype = ctypes.c_int
    lib.at_gemm_batch_strided.argtypes = (
        [ctypes.c_int] * 4 + [i64] * 3 + [ctypes.c_double, P, i64, i64, P, i64, i64,
                                          ctypes.c_double, P, i64, i64, i64]
    )


def _load_extension(directory: Path) -> ModuleType | None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = directory / f"_atfast{suffix}"
    if not path.exists():
        return None
    loader = importlib.machinery.ExtensionFileLoader("_atfast", str(path))
    spec = importlib.util.spec_from_file_location("_atfast", str(path), loader=loader)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_lock = threading.Lock()
_loaded: dict[Path, Runtime] = {}


def load(path: Path | str | None = None) -> Runtime | None:
    """Load (once per path) the library at ``path`` or :func:`find_library`'s; None if absent.

    Raises OSError when a library exists but cannot be loaded: a broken install
    must be seen, not silently replaced by the fallback.
    """
    resolved = Path(path) if path is not None else find_library()
    if resolved is None or not resolved.exists():
        return None
    resolved = resolved.resolve()
    with _lock:
        if resolved in _loaded:
            return _loaded[resolved]
        # RTLD_GLOBAL: the extension's dependency on libautotune.so resolves to
        # this very copy, so ctypes and the hot path share one plan cache.
        lib = ctypes.CDLL(str(resolved), mode=ctypes.RTLD_GLOBAL)
        _prototypes(lib)
        runtime = Runtime(resolved, lib, _load_extension(resolved.parent))
        _loaded[resolved] = runtime
        return runtime
