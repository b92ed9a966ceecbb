"""The runtime: libautotune loaded from $AUTOTUNE_HOME, gemm / gemm_batch, the fallback.

``gemm`` is bound at import to the ``_atfast`` extension's C function when an
installed library is found, so a call costs one C call; otherwise to the numpy
fallback, which warns once.  :func:`use_library` rebinds it (tests, a fresh
install in the same process).  Code that keeps a reference to ``gemm`` keeps the
entry it got: call ``autotune.runtime.gemm`` through the module to follow a rebind.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import api, loader, threadpool
from .api import (cache_stats, clear_plan_cache, gemm_batch, get_num_threads, matmul, numpy_gemm,
                  set_num_threads)

gemm = numpy_gemm


def use_library(path: Path | str | None = None) -> loader.Runtime | None:
    """Load the library at ``path`` (default: the installed one) and route gemm and matmul to it.

    Returns the runtime, or None when there is no library (gemm then falls back to numpy).
    """
    global gemm, matmul
    runtime = loader.load(path)
    api.use(runtime)
    gemm, matmul = api.entry(), api.matmul_entry()
    # autotune.gemm and autotune.matmul bind themselves to this module's entries on
    # first use; they must follow a rebind too, or they would keep computing in the
    # previous library.
    top = sys.modules.get("autotune")
    if top is not None:
        top.gemm, top.matmul = gemm, matmul
    return runtime


def _initial() -> None:
    try:
        use_library()
    except OSError as exc:
        # A library that exists but does not load, or was built for another CPU,
        # must not break `import autotune`: gemm falls back to numpy and says why
        # on first use.
        api.use(None, reason=str(exc))


_initial()
threadpool.install()

__all__ = [
    "gemm", "gemm_batch", "matmul", "use_library", "set_num_threads", "get_num_threads", "cache_stats",
    "clear_plan_cache",
    "numpy_gemm",
]
