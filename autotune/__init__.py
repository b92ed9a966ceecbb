"""autotune: install-time autotuned GEMM with input-aware kernel executing plans.

``gemm``, ``gemm_batch`` and ``matmul`` are the numpy API of the float path,
``quantize_weights`` and ``qmatmul`` of the quantised one; this module imports
nothing until one of them is first called (then ``autotune.runtime`` and the
installed library), so ``import autotune`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

__version__ = "0.1.0"


def gemm(A: ArrayLike, B: ArrayLike, C: np.ndarray | None = None, *, alpha: float = 1.0,
         beta: float = 0.0, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """C = alpha * op(A) @ op(B) + beta * C on numpy arrays, through libautotune.

    Parameters, errors and examples: :func:`autotune.runtime.api.numpy_gemm`, whose
    contract the C entry point keeps.  This wrapper is replaced by the runtime's C
    entry point on first use, so later calls cost one C call.
    """
    global gemm
    from . import runtime

    gemm = runtime.gemm
    return gemm(A, B, C, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)


def gemm_batch(A: Any, B: Any, C: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
               trans_a: bool = False, trans_b: bool = False) -> Any:
    """A batch of GEMMs over stacks (3-D arrays) or lists of matrices.

    See :func:`autotune.runtime.api.gemm_batch` for the parameters.
    """
    from . import runtime

    return runtime.gemm_batch(A, B, C, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)


def matmul(a: ArrayLike, b: ArrayLike, out: np.ndarray | None = None) -> Any:
    """numpy.matmul through libautotune.

    See :func:`autotune.runtime.api.matmul` for the parameters, dtypes and errors.
    """
    from . import runtime

    return runtime.matmul(a, b, out=out)


def set_num_threads(n: int) -> None:
    """Threads later products may use; ``n < 1`` returns to the environment's choice.

    See :func:`autotune.runtime.api.set_num_threads`.
    """
    from . import runtime

    runtime.set_num_threads(n)


def get_num_threads() -> int:
    """The threads products may use (1 without a library)."""
    from . import runtime

    return runtime.get_num_threads()


def clear_plan_cache() -> None:
    """Drop the library's cached plans; see :func:`autotune.runtime.api.clear_plan_cache`."""
    from . import runtime

    runtime.clear_plan_cache()


def quantize_weights(W: ArrayLike, bits: int = 4, block: int = 32, symmetric: bool = True,
                     scale_dtype: Any = "float32") -> Any:
    """W[K, N] quantised (4 bits per block of K, or 8 bits per column) and packed for qmatmul.

    Returns :class:`autotune.quant.QuantizedWeights` (``.save(path)`` / ``.load(path)``).
    See :func:`autotune.quant.quantize_weights` for the formats and errors.
    """
    from . import quant

    return quant.quantize_weights(W, bits=bits, block=block, symmetric=symmetric, scale_dtype=scale_dtype)


def qmatmul(A: ArrayLike, w: Any, bias: ArrayLike | None = None,
            clamp: tuple[float, float] | None = None) -> Any:
    """C = A @ W for float32 A and weights from :func:`quantize_weights`, through libautotune.

    See :func:`autotune.runtime.qapi.qmatmul` for the arithmetic, bias, clamp and errors.
    """
    from .runtime import qapi

    return qapi.qmatmul(A, w, bias=bias, clamp=clamp)
