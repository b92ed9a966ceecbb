"""libautotune's thread pool seen by threadpoolctl.

``threadpoolctl.threadpool_info()`` then lists each loaded libautotune (user_api
"blas", internal_api "autotune") and ``threadpool_limits(n)`` caps it, as it caps
OpenBLAS or MKL, so scikit-learn, Dask and joblib limit it without knowing it.

threadpoolctl finds the libraries a process has loaded by file-name prefix; the
controller class is registered when threadpoolctl is imported (now, if it
already is; otherwise by a one-shot import hook) so that the first gemm never
pays for importing threadpoolctl.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

_registered = False


def _register(threadpoolctl: ModuleType) -> None:
    global _registered
    if _registered or not hasattr(threadpoolctl, "register"):  # threadpoolctl < 3.5: no API for it
        return

    class AutotuneController(threadpoolctl.LibController):
        """at_get_num_threads / at_set_num_threads of one loaded libautotune."""

        user_api = "blas"
        internal_api = "autotune"
        filename_prefixes = ("libautotune",)

        def get_num_threads(self) -> int:
            return int(self.dynlib.at_get_num_threads())

        def set_num_threads(self, num_threads: int) -> None:
            self.dynlib.at_set_num_threads(int(num_threads))

        def get_version(self) -> str:
            from .. import __version__

            return __version__

    threadpoolctl.register(AutotuneController)
    _registered = True


class _OnImport:
    """Registers the controller right after ``import threadpoolctl`` runs, then leaves.

    A meta path finder needs only ``find_spec``; not subclassing
    importlib.abc.MetaPathFinder keeps importlib.abc off the first gemm's path.
    """

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "threadpoolctl":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module: ModuleType) -> None:
            exec_module(module)
            _register(module)

        spec.loader.exec_module = exec_and_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Make threadpoolctl see libautotune, whichever of the two is imported first."""
    module = sys.modules.get("threadpoolctl")
    if module is not None:
        _register(module)
    elif not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())
