"""K walked in slices by in-place plans of a few columns of C (plan.c,
slice_place_walks; cost.c, at__place_k_slice).

A few columns of C read A in place one sliver a step; where those slivers straddle
cache lines, fall into a few L1 sets or sit a page apart, each step walks K in slices
and every step takes its turn per slice, so a neighbour re-reads the lines it shares
from L1.  The slice is the plan's blk_k on the small path.  Here: which plans slice
and by how much (the rule written out again), and that sliced plans compute the
product, bit for bit the same whatever the thread count, the batch or the address.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

import autotune.runtime as rt
from autotune import plans
from autotune.runtime import loader

from .reference import assert_close

LINE, SETS, WAYS, STEP, MIN_SLICES = 64, 64, 8, 8, 4


@pytest.fixture(autouse=True)
def lib(built):
    """The session's library, every product read in place (these shapes would pack
    on some hosts' crossovers)."""
    runtime = rt.use_library(built.library)
    params = loader.at_tune_params()
    assert runtime.lib.at_params_get(ctypes.byref(params)) == 0
    params.pack_flops[0] = params.pack_flops[1] = 1e15
    params.pack_flops_tn[0] = params.pack_flops_tn[1] = 1e15
    params.place_stream_bytes[0] = params.place_stream_bytes[1] = 1e15  # A cached, whatever its size
    assert runtime.lib.at_params_set(ctypes.byref(params)) == 0
    rt.set_num_threads(0)
    yield runtime
    runtime.lib.at_params_set(None)
    rt.set_num_threads(0)


def stream_from(lib, nbytes: float) -> None:
    """Walk in place as if an A of ``nbytes`` or more streamed from memory (place_stream_bytes)."""
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.place_stream_bytes[0] = params.place_stream_bytes[1] = nbytes
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0


def expected_slice(p: plans.Plan, streams: bool = False) -> int:
    """docs/runtime.md's rule: at most 8 columns of C over an untransposed A (any
    number where A streams from memory), K at least four slices long.  An A that
    streams: slices of 8, 16 for more than 4 columns of C, and 128 bytes of a row of A
    for more than 16.  Otherwise a slice as deep as one
    step's walk fits the L1 sets it falls in, and at least 8 steps of K per column of C."""
    if p.path != "small" or p.a_copied or p.trans[0] == "t" or p.step_count < 2 or (p.N > 8 and not streams):
        return 0
    bpe = 4 if p.dtype == "f32" else 8
    if streams:
        slice_k = 128 // bpe if p.N > 16 else STEP * (2 if p.N > 4 else 1)
        return slice_k if p.K >= MIN_SLICES * slice_k else 0
    lines = math.ceil(max(s.mb for s in p.steps) * bpe / LINE) + 1
    sets = SETS
    if (p.lda * bpe) % LINE == 0:
        stride = (p.lda * bpe // LINE) % SETS
        sets = min(SETS, SETS // math.gcd(stride or SETS, SETS) * lines)
    slice_k = max(sets * WAYS // lines // STEP * STEP, STEP * p.N)
    return slice_k if p.K >= MIN_SLICES * slice_k else 0


def expected_prefetch(p: plans.Plan, streams: bool) -> int:
    """docs/runtime.md's rule: a sliced walk over an A from memory most of whose steps
    read whole lines of each column prefetches two lines below each band."""
    assert p.step_count == len(p.steps), "the rule counts every step"
    bpe = 4 if p.dtype == "f32" else 8
    whole_lines = sum(s.mb * bpe % LINE == 0 for s in p.steps)
    return 2 * LINE // bpe if streams and expected_slice(p, True) and 2 * whole_lines > len(p.steps) else 0


@pytest.mark.parametrize("dtype,M,N,K,lda,trans", [
    ("f32", 1024, 1, 1024, 1024, "nn"),  # a page a column: slices of 8
    ("f32", 256, 1, 256, 256, "nn"),     # 1 KiB a column, a few sets
    ("f32", 700, 2, 900, 1024, "nn"),
    ("f64", 512, 4, 512, 512, "nn"),     # a page a column, four columns of C: slices of 32
    ("f64", 300, 4, 2000, 300, "nn"),    # no whole number of lines a column: every set
    ("f64", 250, 3, 3000, 250, "nt"),
    ("f64", 64, 3, 128, 64, "nn"),       # two slices' walk: all of K
    ("f32", 256, 9, 2048, 256, "nn"),    # more than 8 columns of C: all of K
    ("f32", 256, 256, 256, 256, "nn"),
    ("f32", 1024, 1, 1024, 1024, "tn"),  # A read along K: all of K
])
def test_which_plans_walk_k_in_slices(dtype, M, N, K, lda, trans):
    p = plans.plan(M, N, K, dtype, trans, lda=lda if trans[0] == "n" else K, threads=1)
    assert p.step_count == len(p.steps)  # every step listed, so the rule sees them all
    assert p.path == "small" and p.blocks[:2] == (0, 0)
    assert p.blocks[2] == expected_slice(p)


@pytest.mark.parametrize("dtype,M,N,K,lda,trans", [
    ("f64", 1024, 4, 1024, 1024, "nn"),  # a page a column: 32 for a cached A
    ("f64", 1500, 4, 1500, 1500, "nn"),  # every set: 184 for a cached A
    ("f32", 2048, 8, 2048, 2048, "nn"),
    ("f64", 1000, 6, 1000, 1003, "nt"),
    ("f32", 2000, 1, 24, 2000, "nn"),    # too shallow for four slices: all of K
    ("f32", 2048, 4, 2048, 2048, "tn"),  # A read along K: all of K
    ("f64", 2048, 9, 2048, 2048, "nn"),  # more than 8 columns of C: all of K unless A streams
    ("f32", 1500, 16, 1500, 1500, "nn"),
    ("f64", 2048, 17, 2048, 2048, "nn"),  # more than 16: 128 bytes of each row a slice
    ("f32", 1500, 64, 1500, 1500, "nn"),
])
def test_an_a_that_streams_from_memory_is_walked_in_short_slices(lib, dtype, M, N, K, lda, trans):
    bpe = 4 if dtype == "f32" else 8
    kwargs = dict(lda=lda if trans[0] == "n" else K, threads=1)
    stream_from(lib, M * K * bpe + 1)  # one byte more than this A: cached
    cached = plans.plan(M, N, K, dtype, trans, **kwargs)
    assert cached.blocks[2] == expected_slice(cached)
    assert cached.prefetch_rows == 0
    stream_from(lib, M * K * bpe)  # A of exactly the threshold's bytes streams
    streams = plans.plan(M, N, K, dtype, trans, **kwargs)
    assert streams.blocks[2] == expected_slice(streams, streams=True)
    assert streams.prefetch_rows == expected_prefetch(streams, streams=True)
    if expected_slice(cached) and streams.blocks[2]:
        assert streams.blocks[2] < cached.blocks[2]


def test_a_page_a_column_slices_by_columns_of_c_whatever_the_kernels():
    # The walk falls into as many sets as its sliver has lines: one step's slice is
    # WAYS columns of A, raised to STEP per column of C.
    for N, want in ((1, 8), (2, 16), (4, 32), (8, 64)):
        assert plans.plan(512, N, 2048, "f32", lda=1024, threads=1).blocks == (0, 0, want), N
    assert "K walked in slices of 8" in plans.explain(plans.plan(512, 1, 2048, "f32", lda=1024, threads=1))


SLICED = [(1024, 1, 1024), (257, 1, 2100), (1003, 2, 1500), (300, 4, 2000), (129, 3, 3000), (100, 8, 4000)]


#: Sliced only where A streams from memory: more than 8 columns of C.
STREAM_SLICED = [(300, 12, 2000), (129, 16, 700), (1001, 9, 130), (257, 33, 600),
                 (70001, 16, 130)]  # the last in chunks


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("M,N,K,streams", [(*shape, False) for shape in SLICED] +
                         [(*shape, True) for shape in SLICED + STREAM_SLICED])
def test_sliced_products_are_right(lib, dtype, M, N, K, streams):
    if streams:
        stream_from(lib, 0.0)  # every A streams: the short slices
    rng = np.random.default_rng(M * N + K)
    sliced = 0
    for tb, alpha, beta, pad in ((False, 1.0, 0.0, 0), (True, -1.5, 0.5, 3), (False, 0.25, -2.0, 16),
                                 (True, 1.0, 1.0, 1)):
        A = np.asfortranarray(rng.standard_normal((M + pad, K)).astype(dtype))[:M]
        B = np.asfortranarray(rng.standard_normal((N, K) if tb else (K, N)).astype(dtype))
        C0 = np.asfortranarray(rng.standard_normal((M, N)).astype(dtype))
        if beta == 0:
            C0[...] = np.nan  # beta = 0 never reads C, in any slice
        C = C0.copy(order="F")
        rt.gemm(A, B, C, alpha=alpha, beta=beta, trans_b=tb)
        assert_close(C, A, B, None if beta == 0 else C0, alpha, beta, False, tb)
        p = plans.plan(M, N, K, "f32" if dtype == np.float32 else "f64", "nt" if tb else "nn",
                       lda=M + pad, threads=1, max_steps=1)
        sliced += p.blocks[2] > 0
    assert sliced, "no case of this shape walked K in slices: it tests nothing here"


def test_some_walk_over_an_a_from_memory_prefetches_its_lines(lib):
    # The products above run the prefetching walk only if one of their plans takes it.
    stream_from(lib, 0.0)
    prefetching = [(dtype, M, N, K) for dtype in ("f32", "f64") for M, N, K in SLICED + STREAM_SLICED
                   if plans.plan(M, N, K, dtype, threads=1, max_steps=1).prefetch_rows]
    assert prefetching, "no streaming walk of the products above prefetches: the path goes untested"
    dtype, M, N, K = prefetching[0]
    assert "A's lines prefetched" in plans.explain(plans.plan(M, N, K, dtype, threads=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_row_major_x_at_w_is_sliced_and_right(dtype):
    # x @ W of a row-major caller is a column of steps over W's rows.
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2, 1536)).astype(dtype)
    W = rng.standard_normal((1536, 1024)).astype(dtype)
    p = plans.plan(2, 1024, 1536, "f32" if dtype == np.float32 else "f64", layout="row", threads=1,
                   max_steps=1)
    assert p.blocks[2] > 0
    assert_close(rt.gemm(X, W), X, W, None, 1.0, 0.0, False, False)


def _at_offset(a: np.ndarray, offset_bytes: int) -> np.ndarray:
    """A C-ordered copy of a whose data starts offset_bytes past a 64-byte line."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("streams", [False, True], ids=["cached", "streams"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_sliced_bits_do_not_depend_on_threads_batch_or_address(lib, dtype, streams):
    # x @ W, row-major: the column-major problem is 1000 x 2 x 1200, a column of steps.
    if streams:
        stream_from(lib, 0.0)
    rng = np.random.default_rng(11)
    X = rng.standard_normal((2, 1200)).astype(dtype)
    W = rng.standard_normal((1200, 1000)).astype(dtype)
    W2 = rng.standard_normal((1200, 1000)).astype(dtype)
    assert plans.plan(2, 1000, 1200, "f32" if dtype == np.float32 else "f64", layout="row",
                      threads=1, max_steps=1).blocks[2] > 0
    results = []
    for threads in (1, 2):
        rt.set_num_threads(threads)
        results.append(rt.gemm(X, W))
    for offset in (0, 16, 32, 48):
        results.append(rt.gemm(_at_offset(X, offset), _at_offset(W, offset)))
    for threads in (1, 2):
        rt.set_num_threads(threads)
        batch = rt.gemm_batch(np.stack([X, X]), np.stack([W, W2]))
        results.append(batch[0])
        assert batch[1].tobytes() == rt.gemm(X, W2).tobytes()
    for r in results[1:]:
        assert r.tobytes() == results[0].tobytes()
    assert_close(results[0], X, W, None, 1.0, 0.0, False, False)


def test_a_few_columns_of_c_never_pack(lib):
    # Each element of an untransposed A is used N times: a copy of A costs about what the
    # product does, whatever crossover the install measured on squares.
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.pack_flops[0] = params.pack_flops[1] = 0.0
    params.pack_flops_tn[0] = params.pack_flops_tn[1] = 0.0
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0
    for dtype in ("f32", "f64"):
        assert plans.plan(2048, 8, 2048, dtype, threads=1, max_steps=1).path == "small"
        assert plans.plan(2048, 2, 2048, dtype, "nt", threads=1, max_steps=1).path == "small"
        assert plans.plan(2, 2048, 2048, dtype, layout="row", threads=1, max_steps=1).path == "small"
        assert plans.plan(2048, 9, 2048, dtype, threads=1, max_steps=1).path == "packed"
        # A transposed A stays in place up to 32 columns (its copy is a transpose of all of A).
        for trans in ("tn", "tt"):
            assert plans.plan(2048, 1, 2048, dtype, trans, threads=1, max_steps=1).path == "small"
            assert plans.plan(2048, 32, 2048, dtype, trans, threads=1, max_steps=1).path == "small"
            assert plans.plan(2048, 33, 2048, dtype, trans, threads=1, max_steps=1).path == "packed"
    # Nor rows of C of up to 128 bytes (f32 32 columns, fp64 16) over an A that streams
    # from memory, in slices of 16 (or 128 bytes of a row of A past 16 columns); the
    # install's held-out probes are as wide.
    from autotune.crossovers import STREAM_WIDEST

    stream_from(lib, 2048 * 2048 * 4)
    for dtype in ("f32", "f64"):
        widest, bpe = STREAM_WIDEST[dtype], 4 if dtype == "f32" else 8
        assert widest * bpe == 128
        assert plans.plan(2048, 16, 2048, dtype, threads=1, max_steps=1).blocks == (0, 0, 16)
        assert plans.plan(2048, widest, 2048, dtype, threads=1, max_steps=1).blocks == \
            (0, 0, 16 if widest <= 16 else 128 // bpe)
        assert plans.plan(2, 2048, 2048, dtype, layout="row", threads=1, max_steps=1).blocks == (0, 0, 8)
        assert plans.plan(2048, widest + 1, 2048, dtype, threads=1, max_steps=1).path == "packed"
        # A row short of the threshold, f32 packs; f64's A has twice the bytes.
        assert plans.plan(2047, 16, 2048, dtype, threads=1, max_steps=1).path == \
            ("packed" if dtype == "f32" else "small")


def expected_column_order(p: plans.Plan, threshold: float) -> bool:
    """docs/runtime.md's rule: a small-path plan over a B from memory (its K N elements'
    bytes past place_stream_bytes), N at least 8 times M, not walked in K slices nor
    with A copied, goes column by column."""
    b_bytes = p.K * p.N * (4 if p.dtype == "f32" else 8)
    return (p.path == "small" and b_bytes >= threshold and not p.a_copied and not p.blocks[2]
            and p.step_count > 1 and 8 * p.M <= p.N)


# Between the bytes of A and of B in the products below: B comes from memory, A not.
B_STREAMS = 48 * 1024


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_wide_c_over_a_b_from_memory_goes_column_by_column(lib, dtype):
    ordered = 0
    for threshold in (1e15, B_STREAMS):
        stream_from(lib, threshold)
        for M, N, K in ((17, 700, 300), (9, 1000, 100), (33, 264, 50), (33, 263, 50), (3, 64, 64),
                        (200, 200, 300), (1, 500, 40), (12, 2000, 8)):
            p = plans.plan(M, N, K, dtype, threads=1, max_steps=10**6)
            want = expected_column_order(p, threshold)
            assert p.column_order == want, (M, N, K, threshold, p.blocks, p.step_count)
            keys = [(s.j0, s.i0) if want else (s.i0, s.j0) for s in p.steps]
            assert keys == sorted(keys), (M, N, K, "steps out of order")
            ordered += want
    assert ordered >= 3
    assert "column by column" in plans.explain(plans.plan(17, 700, 300, dtype, threads=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_column_order_bits_do_not_depend_on_threads_or_batch(lib, dtype):
    """The order of the steps changes no bit: each writes its own block of C over all of K."""
    rng = np.random.default_rng(17)
    A = np.asfortranarray(rng.standard_normal((17, 300)).astype(dtype))
    B = np.asfortranarray(rng.standard_normal((300, 700)).astype(dtype))
    walked = rt.gemm(A, B)  # place_stream_bytes past any B here: band by band
    stream_from(lib, B_STREAMS)
    assert plans.plan(17, 700, 300, "f32" if dtype == np.float32 else "f64", threads=1).column_order
    results = []
    for threads in (1, 2):
        rt.set_num_threads(threads)
        results.append(rt.gemm(A, B))
        results.append(rt.gemm_batch(np.stack([A, A]), np.stack([B, B]))[1])
    for r in results:
        assert r.tobytes() == walked.tobytes()
    assert_close(walked, A, B, None, 1.0, 0.0, False, False)
