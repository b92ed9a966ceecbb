"""at_qmatmul_f32 on the library's threads: columns split in whole units of 32, so
every thread count gives the same bits as one thread, and the right answer on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

import autotune
import autotune.runtime as rt
from autotune import quant, qsuite
from autotune.runtime import qapi

from .isa import requires_isa
from . import test_quant_kernels

#: The session's quantised library and its kinds, shared with test_quant_kernels.
KINDS, qlib, using = test_quant_kernels.KINDS, test_quant_kernels.qlib, test_quant_kernels.using

pytestmark = requires_isa("avx2")

#: (M, K, N): each above qgemm.c's 4 million multiply-adds per extra thread, with N
#: from 2 units of columns (fewer than 3 threads) to 11, K and N off the block and tile.
SHAPES = [(33, 1000, 333), (2, 4100, 1000), (64, 256, 1000), (300, 1000, 40), (17, 4000, 150)]


@pytest.fixture
def threads(qlib):
    """Set the library's thread count for one test; its environment's count afterwards."""
    yield qlib.lib.at_set_num_threads
    qlib.lib.at_set_num_threads(0)


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_any_thread_count_gives_one_threads_bits(qlib, threads, m, k, n, kind):
    rng = np.random.default_rng(m * k + n)
    A = rng.standard_normal((m, k)).astype(np.float32)
    A[m // 2, k // 3] = np.nan  # a NaN row crosses every thread's columns
    bits, symmetric = KINDS[kind]
    w = quant.quantize_weights(rng.standard_normal((k, n)).astype(np.float32), bits, 32, symmetric)
    threads(1)
    one = qapi.call(qlib.lib, A, w, None, None)
    problem = qsuite._check(one, quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64))
    assert problem is None, problem
    for count in (2, 3, 4):
        threads(count)
        assert qlib.lib.at_get_num_threads() == count
        assert np.array_equal(qapi.call(qlib.lib, A, w, None, None), one, equal_nan=True), count


def test_qmatmul_follows_the_librarys_thread_count(using):
    rng = np.random.default_rng(8)
    A = rng.standard_normal((16, 1024)).astype(np.float32)
    w = autotune.quantize_weights(rng.standard_normal((1024, 700)).astype(np.float32))
    bias = rng.standard_normal(700).astype(np.float32)
    before = rt.get_num_threads()
    try:
        results = []
        for count in (1, 2):
            rt.set_num_threads(count)
            results.append(autotune.qmatmul(A, w, bias=bias, clamp=(-20.0, 20.0)))
        assert np.array_equal(results[0], results[1])
    finally:
        rt.set_num_threads(before)
