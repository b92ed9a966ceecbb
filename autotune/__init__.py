"""autotune: install-time autotuned GEMM with input-aware kernel executing plans."""

__version__ = "0.1.0"


def gemm(A, B, C=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False):
    """C = alpha * op(A) @ op(B) + beta * C on numpy arrays, through libautotune.

    See :func:`autotune.runtime.gemm`; this wrapper is replaced by the runtime's C
    entry point on first use, so later calls cost one C call.
    """
    global gemm
    from . import runtime

    gemm = runtime.gemm
    return gemm(A, B, C, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)


def gemm_batch(A, B, C=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False):
    """A batch of GEMMs over stacks (3-D arrays) or lists of matrices; see autotune.runtime."""
    from . import runtime

    return runtime.gemm_batch(A, B, C, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)


def matmul(a, b, out=None):
    """numpy.matmul through libautotune; see :func:`autotune.runtime.matmul`."""
    from . import runtime

    return runtime.matmul(a, b, out=out)
