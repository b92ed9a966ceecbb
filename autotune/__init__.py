"""autotune: install-time autotuned GEMM with input-aware kernel executing plans.

``gemm``, ``gemm_batch`` and ``matmul`` are the numpy API of the float path,
``quantize_weights`` and ``qmatmul`` of the quantised one; ``set_num_threads``,
``get_num_threads`` and ``clear_plan_cache`` steer the runtime.  ``import autotune``
imports none of them: each is looked up on its first access (PEP 562), which
imports ``autotune.runtime`` and the installed library, or ``autotune.quant``.

The lookup hands out the entry itself, never a forwarding wrapper, so
``from autotune import gemm`` is the C entry point: a wrapper that bound the C
entry on its first call stayed a wrapper in every reference taken before that
call, and each of its calls paid an import and a keyword call (0.85 us against
0.24 for an 8x8 product, A @ B 0.70).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the signatures, for type checkers and editors
    from .quant import quantize_weights
    from .runtime.api import (clear_plan_cache, gemm_batch, get_num_threads, matmul,
                              numpy_gemm as gemm, set_num_threads)
    from .runtime.qapi import qmatmul

__version__ = "0.1.0"

#: The runtime's public entries, as ``autotune.runtime`` exports them.
_RUNTIME_NAMES = ("gemm", "gemm_batch", "matmul", "set_num_threads", "get_num_threads", "clear_plan_cache")
_QUANT_NAMES = ("quantize_weights", "qmatmul")

__all__ = [*_RUNTIME_NAMES, *_QUANT_NAMES]


def __getattr__(name: str) -> Any:
    if name in _RUNTIME_NAMES:
        # runtime.use_library rebinds autotune.gemm too, so the copy kept here follows it.
        from . import runtime

        value = getattr(runtime, name)
    elif name == "quantize_weights":
        from .quant import quantize_weights as value
    elif name == "qmatmul":
        from .runtime.qapi import qmatmul as value
    else:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
