"""at_qmatmul_f32 on the library's threads: columns split in whole units of 32, so
every thread count gives the same bits as one thread, and the right answer on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

import autotune
import autotune.runtime as rt
from autotune import contract, quant, qsuite
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


def test_the_split_threshold_is_the_tables_unless_set(qlib):
    """at_qthreads_set / _get: the multiply-adds per thread from which a product is split;
    this library's table measured none, so the built-in stands until one is set."""
    lib = qlib.lib
    assert lib.at_qthreads_get() == qsuite.BUILTIN_THREAD_MACS
    assert lib.at_qthreads_set(1000.0) == 0 and lib.at_qthreads_get() == 1000.0
    for bad in (-1.0, float("nan"), float("inf")):
        assert lib.at_qthreads_set(bad) == -1 and "finite and non-negative" in lib.at_last_error().decode()
        assert lib.at_qthreads_get() == 1000.0
    assert lib.at_qthreads_set(0.0) == 0 and lib.at_qthreads_get() == qsuite.BUILTIN_THREAD_MACS


def test_a_measured_threshold_is_baked_into_the_registry():
    text = contract.qregistry([], thread_macs=131072.0)
    assert "const double at_qthread_macs = 131072.0;" in text
    assert "const double at_qthread_macs = 0.0;" in contract.qregistry([])
    with pytest.raises(ValueError, match="finite and non-negative"):
        contract.qregistry([], thread_macs=float("nan"))


def _machine(split_from: int, gain: float = 0.55):
    """A fake host whose two threads take `gain` of one thread's time from `split_from` on."""
    def time_gemv(side: int, threads: int) -> float:
        one = 1e-9 * side * side
        return one if threads == 1 else one * (gain if side >= split_from else 1.4)
    return time_gemv


def test_the_thread_sweep_puts_the_split_where_two_threads_start_to_pay():
    found = qsuite.thread_crossover(2, _machine(724))
    assert found.source == "measured" and found.shape == "gemv"
    side = (found.flops / 2) ** (1 / 3)
    assert 512 < side < 724  # between the last size one thread won and the first two did
    assert qsuite.thread_macs(found, 2) == pytest.approx(side * side / 2, rel=1e-3)
    assert [p.side for p in found.points][-2:] == [724, 1024]  # two wins in a row end the sweep


def test_a_busy_or_single_core_host_keeps_the_builtin():
    assert qsuite.thread_crossover(2, _machine(256), busy=True).source == "busy"
    assert qsuite.thread_crossover(1, _machine(256)).source == "model"
    for found in (qsuite.thread_crossover(2, _machine(256), busy=True), qsuite.thread_crossover(1, _machine(256))):
        assert qsuite.thread_macs(found, 2) == 0.0 and not found.points
