"""Irregular shapes on the no-pack path: the NN gather kernels for the rows left over.

The session library (the same home and selection as tests/test_runtime.py, so one
library per process) has the gather variant's small blocks; with provenance
"model" the tiler ranks them as dot-product kernels, so the last 1-4 rows of an
NN problem run them.  Results are compared with a float64 numpy reference under
|c - ref| <= c_K * eps * (|alpha| |A||B| + |beta| |C|), c_K = 2 (K + 2).
"""

from __future__ import annotations

import numpy as np
import pytest

import autotune.runtime as rt
from autotune import plans
from autotune.codegen import generate
from autotune.families import default_family
from autotune.families.x86 import GATHER, fits, gather_family
from autotune.specs import KernelSpec

from .reference import assert_close, operand

DTYPES = (np.float32, np.float64)
TRANS = ((False, False), (False, True), (True, False), (True, True))
# M leaves 1..4 rows below a multiple of either vector length; K covers no full
# chunk, chunks plus a masked tail, and exact chunks.
SHAPES = [(17, 129, 33), (35, 32, 64), (1, 256, 256), (3, 5, 7), (18, 7, 16), (20, 13, 15),
          (33, 3, 1), (19, 40, 17), (4, 4, 100), (65, 9, 31)]


@pytest.fixture(autouse=True)
def lib(built):
    runtime = rt.use_library(built.library)
    rt.set_num_threads(0)
    return runtime


def has_gather(lib, dtype: str) -> bool:
    prefix = "at_sgemm_" if dtype == "f32" else "at_dgemm_"
    return any(n.startswith(prefix) and "_gather_" in n for n in plans.kernel_names(lib))




def test_gather_family_is_nn_avx512_and_few_rows():
    for dtype in ("f32", "f64"):
        specs = gather_family("avx512", dtype, "nn")
        assert specs and all(s.variant == GATHER and s.mr <= 4 and fits(s) for s in specs)
        assert {1, 2, 3, 4} == {s.mr for s in specs}
        for s in specs:
            assert KernelSpec.from_name(s.name) == s
        for trans in ("nt", "tn", "tt"):
            assert gather_family("avx512", dtype, trans) == []
        assert gather_family("avx2", dtype, "nn") == []
    assert not fits(KernelSpec("avx512", "f32", 5, 2, variant=GATHER, unroll=2))
    assert not fits(KernelSpec("avx512", "f32", 1, 4, True, False, variant=GATHER, unroll=2))
    full = default_family(["avx512"], dtypes=["f32"], transes=["nn"])
    assert set(gather_family("avx512", "f32", "nn")) <= set(full)


def test_gather_source_masks_the_k_tail_and_uses_64_bit_offsets():
    text = generate(KernelSpec("avx512", "f32", 2, 5, variant=GATHER, unroll=2)).text
    assert "_mm512_mask_i64gather_ps" in text and "i32gather" not in text
    assert "rest = " in text and "at_gather_ps(a, lda, idx, rest)" in text
    assert "a += 16 * lda;" in text and "b += 16;" in text
    text = generate(KernelSpec("avx512", "f64", 3, 2, variant=GATHER, unroll=4)).text
    assert "_mm512_mask_i64gather_pd" in text and "a += 8 * lda;" in text


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_leftover_rows_run_gather_kernels(lib, dtype):
    if not has_gather(lib, dtype):
        pytest.skip("gather kernels need AVX-512, which this host lacks")
    p = plans.plan(17, 129, 33, dtype=dtype)
    tail = [s for s in p.steps if s.i0 == 16]
    assert tail and all("_gather_" in s.kernel or s.kernel == "edge" for s in tail)
    # Row-major NN is C^T = B^T A^T: C's 17 columns are the rows the gather kernels take.
    p = plans.plan(129, 17, 33, dtype=dtype, layout="row")
    assert any("_gather_" in s.kernel for s in p.steps)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("corder", ["C", "F"])
def test_irregular_shapes_match_numpy(dtype, ta, tb, corder):
    rng = np.random.default_rng(hash((ta, tb, corder, np.dtype(dtype).char)) % 2**32)
    for M, N, K in SHAPES:
        for pad in (0, 3):
            A = operand(rng, *((K, M) if ta else (M, K)), dtype, rng.choice(["C", "F"]), pad)
            B = operand(rng, *((N, K) if tb else (K, N)), dtype, rng.choice(["C", "F"]), pad)
            C0 = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order=corder)
            for alpha, beta in ((1.0, 0.0), (-0.75, 2.5)):
                C = C0.copy(order=corder)
                if beta == 0:
                    C[...] = np.nan  # beta == 0 never reads C
                rt.gemm(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
                assert_close(C, A, B, C0, alpha, beta, ta, tb)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_gathered_rows_far_apart_and_k_zero(dtype):
    """A leading dimension of thousands of elements (the gather's offsets) and K = 0."""
    rng = np.random.default_rng(7)
    M, N, K = 18, 21, 37
    A = np.asfortranarray(rng.standard_normal((4099, K)).astype(dtype))[:M, :]
    B = np.asfortranarray(rng.standard_normal((K, N)).astype(dtype))
    C0 = np.asfortranarray(rng.standard_normal((M, N)).astype(dtype))
    C = C0.copy(order="F")
    rt.gemm(A, B, C, alpha=1.5, beta=0.5)
    assert_close(C, A, B, C0, 1.5, 0.5, False, False)
    A0 = np.zeros((M, 0), dtype)
    B0 = np.zeros((0, N), dtype)
    C = C0.copy(order="F")
    rt.gemm(A0, B0, C, alpha=1.0, beta=2.0)
    np.testing.assert_array_equal(C, 2.0 * C0)
