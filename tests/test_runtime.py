"""The runtime end to end: a library built from generated kernels, called from Python and C.

The library is built once per session in a temporary $AUTOTUNE_HOME from a
slice of the host's fastest kernel family (provenance "model", so no timing is
involved); every result is compared with a float64 numpy reference under the
bound |c - ref| <= c_K * eps * (|alpha| |A||B| + |beta| |C|), c_K = 2 (K + 2).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotune.runtime as rt
from autotune import link as library
from autotune.runtime import api, loader
from .untuned import build_untuned, small_selection
from autotune.specs import KernelSpec

from .reference import assert_close, check_gemm, operand

ROOT = Path(__file__).resolve().parent.parent
DTYPES = (np.float32, np.float64)
TRANS = ((False, False), (False, True), (True, False), (True, True))


@pytest.fixture()
def lib(built: library.LibraryBuild) -> loader.Runtime:
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    rt.set_num_threads(0)
    return runtime





SHAPES = [
    (1, 1, 1), (1, 7, 3), (7, 1, 5), (3, 5, 1), (2, 3, 17), (15, 15, 15), (16, 16, 16), (17, 17, 17),
    (31, 33, 13), (33, 31, 64), (5, 97, 7), (97, 5, 11), (48, 13, 29), (47, 12, 257), (64, 5, 64),
    (65, 3, 2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("corder", ["C", "F"])
def test_gemm_matches_numpy(lib, dtype, ta, tb, corder):
    rng = np.random.default_rng(hash((ta, tb, corder, np.dtype(dtype).char)) % 2**32)
    for M, N, K in SHAPES:
        A = operand(rng, *((K, M) if ta else (M, K)), dtype, order=rng.choice(["C", "F"]),
                    pad=int(rng.integers(0, 3)))
        B = operand(rng, *((N, K) if tb else (K, N)), dtype, order=rng.choice(["C", "F"]),
                    pad=int(rng.integers(0, 3)))
        C0 = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order=corder)
        for alpha, beta in ((1.0, 0.0), (1.0, 1.0), (-0.75, 2.5), (0.5, -1.0)):
            C = C0.copy(order=corder)
            out = rt.gemm(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
            assert out is C
            assert_close(C, A, B, C0, alpha, beta, ta, tb)
        out = rt.gemm(A, B, trans_a=ta, trans_b=tb)
        assert out.dtype == dtype
        assert_close(out, A, B, None, 1.0, 0.0, ta, tb)


@settings(max_examples=60, deadline=None)
@given(
    M=st.integers(0, 70), N=st.integers(0, 70), K=st.integers(0, 70),
    ta=st.booleans(), tb=st.booleans(), f64=st.booleans(), seed=st.integers(0, 2**31),
)
def test_gemm_random_shapes(built, M, N, K, ta, tb, f64, seed):
    rt.use_library(built.library)
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    check_gemm(rt.gemm, rng, M, N, K, ta, tb, dtype, 0.5, -1.5)


def test_large_packed_path(lib):
    """Big enough for the Goto path (packed panels, K sliced) and for threads."""
    rng = np.random.default_rng(3)
    for dtype in DTYPES:
        for ta, tb in TRANS:
            M, N, K = 211, 173, 301
            check_gemm(rt.gemm, rng, M, N, K, ta, tb, dtype, 1.25, 0.5)


def test_strided_and_transposed_views(lib):
    rng = np.random.default_rng(4)
    big = rng.standard_normal((60, 70))
    for dtype in DTYPES:
        X = big.astype(dtype)
        A = X[3:40, 5:30]          # ld > rows, row-major view
        B = X.T[2:27, 1:20]        # column-major view
        C = np.zeros((80, 60), dtype=dtype)[7:44, 9:28]   # C itself a view
        out = rt.gemm(A, B, C)
        assert out is C
        assert_close(C, A, B, None, 1.0, 0.0, False, False)
        # No unit stride anywhere: copies are made, the result is still in C.
        A2, B2 = X[::2, ::3][:20, :15], X[1::3, ::2][:15, :11]
        C2 = np.zeros((40, 30), dtype=dtype)[::2, ::2][:20, :11]
        rt.gemm(A2, B2, C2)
        assert_close(C2, A2, B2, None, 1.0, 0.0, False, False)
        # Negative strides.
        A3, B3 = X[::-1, :][:9, :8], X[:, ::-1][:8, :6]
        assert_close(rt.gemm(A3, B3), A3, B3, None, 1.0, 0.0, False, False)


def test_blas_edge_cases(lib):
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        A = rng.standard_normal((9, 7)).astype(dtype)
        B = rng.standard_normal((7, 5)).astype(dtype)
        # beta == 0 never reads C.
        C = np.full((9, 5), np.nan, dtype=dtype)
        rt.gemm(A, B, C, beta=0.0)
        assert np.all(np.isfinite(C))
        # alpha == 0 never reads A or B.
        An, Bn = np.full_like(A, np.nan), np.full_like(B, np.inf)
        C = np.ones((9, 5), dtype=dtype)
        rt.gemm(An, Bn, C, alpha=0.0, beta=2.0)
        assert np.all(C == 2)
        rt.gemm(An, Bn, C, alpha=0.0, beta=0.0)
        assert np.all(C == 0)
        # K == 0 scales C by beta.
        C = np.full((4, 3), 3.0, dtype=dtype)
        rt.gemm(np.zeros((4, 0), dtype), np.zeros((0, 3), dtype), C, beta=0.5)
        assert np.all(C == 1.5)
        C = np.full((4, 3), np.nan, dtype=dtype)
        rt.gemm(np.zeros((4, 0), dtype), np.zeros((0, 3), dtype), C, beta=0.0)
        assert np.all(C == 0)
        # M or N == 0.
        assert rt.gemm(np.zeros((0, 4), dtype), np.zeros((4, 3), dtype)).shape == (0, 3)
        assert rt.gemm(np.zeros((2, 4), dtype), np.zeros((4, 0), dtype)).shape == (2, 0)
        # NaN and Inf propagate.
        A2 = A.copy()
        A2[2, 3] = np.nan
        out = rt.gemm(A2, B)
        assert np.all(np.isnan(out[2])) and np.all(np.isfinite(np.delete(out, 2, axis=0)))
        A2[2, 3] = np.inf
        B2 = np.abs(B) + 1
        assert np.all(np.isposinf(rt.gemm(A2, B2)[2]))


def test_errors_are_clear(lib):
    f32, f64 = np.ones((3, 4), np.float32), np.ones((4, 2), np.float64)
    with pytest.raises(TypeError, match="float32 and B is float64"):
        rt.gemm(f32, f64)
    with pytest.raises(ValueError, match="inner dimensions"):
        rt.gemm(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))
    with pytest.raises(ValueError, match="C is 3 x 3"):
        rt.gemm(np.ones((3, 4)), np.ones((4, 2)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="2-D"):
        rt.gemm(np.ones(4), np.ones((4, 2)))
    with pytest.raises(TypeError, match="not numeric"):
        rt.gemm(np.array([["a"]]), np.array([["b"]]))
    with pytest.raises(TypeError, match="C is float32"):
        rt.gemm(np.ones((3, 4)), np.ones((4, 2)), np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="read-only"):
        C = np.ones((3, 2))
        C.flags.writeable = False
        rt.gemm(np.ones((3, 4)), np.ones((4, 2)), C)
    with pytest.raises(TypeError, match="unexpected"):
        rt.gemm(np.ones((3, 4)), np.ones((4, 2)), gamma=1.0)
    with pytest.raises(ValueError, match="beta"):
        rt.gemm(np.ones((3, 4)), np.ones((4, 2)), beta=1.0)


def test_unsupported_dtype_falls_back_once(lib):
    api._warned.clear()
    A, B = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out1 = rt.gemm(A, B)
        out2 = rt.gemm(A, B)
    assert np.array_equal(out1, A @ B) and np.array_equal(out2, A @ B)
    assert len([w for w in caught if "numpy computes" in str(w.message)]) == 1


def test_no_library_falls_back_to_numpy(built):
    api.use(None)
    api._warned.clear()
    try:
        rng = np.random.default_rng(6)
        A, B = rng.standard_normal((5, 4)), rng.standard_normal((3, 4))
        C = np.full((5, 3), np.nan)
        with pytest.warns(RuntimeWarning, match="no libautotune"):
            rt.numpy_gemm(A, B, C, trans_b=True)
        assert_close(C, A, B, None, 1.0, 0.0, False, True)
        # alpha == 0 does not read A or B in the fallback either.
        C = np.ones((5, 3))
        rt.numpy_gemm(np.full((5, 4), np.nan), np.full((3, 4), np.nan), C, alpha=0.0, beta=3.0,
                      trans_b=True)
        assert np.all(C == 3)
    finally:
        rt.use_library(built.library)


def test_gemm_batch(lib):
    rng = np.random.default_rng(7)
    for dtype in DTYPES:
        A = rng.standard_normal((6, 9, 5)).astype(dtype)
        B = rng.standard_normal((6, 5, 7)).astype(dtype)
        out = rt.gemm_batch(A, B)
        for i in range(6):
            assert_close(out[i], A[i], B[i], None, 1.0, 0.0, False, False)
        # Transposed items, a shared 2-D operand, C given and updated in place.
        At = np.ascontiguousarray(A.transpose(0, 2, 1))
        W = rng.standard_normal((7, 5)).astype(dtype)
        C0 = rng.standard_normal((6, 9, 7)).astype(dtype)
        C = C0.copy()
        assert rt.gemm_batch(At, W, C, alpha=2.0, beta=-1.0, trans_a=True, trans_b=True) is C
        for i in range(6):
            assert_close(C[i], At[i], W, C0[i], 2.0, -1.0, True, True)
        # Lists of different shapes.
        As = [rng.standard_normal((m, 3)).astype(dtype) for m in (1, 4, 17)]
        Bs = [rng.standard_normal((3, n)).astype(dtype) for n in (2, 19, 5)]
        for a, b, c in zip(As, Bs, rt.gemm_batch(As, Bs)):
            assert_close(c, a, b, None, 1.0, 0.0, False, False)


def _run_plan(runtime, threads, A, B, C, ta, tb):
    """Execute through an explicit plan made for `threads` threads (ctypes API)."""
    M, N = C.shape
    K = A.shape[0] if ta else A.shape[1]
    code = 0 if A.dtype == np.float32 else 1
    # Fortran-ordered arrays: column-major problem with tight leading dimensions.
    plan = runtime.lib.at_plan_create_ex(code, 0, int(ta), int(tb), M, N, K,
                                         A.shape[0], B.shape[0], M, threads)
    assert plan
    info = loader.at_plan_info()
    runtime.lib.at_plan_get_info(plan, ctypes.byref(info))
    rc = runtime.lib.at_plan_execute(plan, 1.0, A.ctypes.data, B.ctypes.data, 0.0, C.ctypes.data)
    runtime.lib.at_plan_destroy(plan)
    assert rc == 0
    return info.threads


@pytest.mark.parametrize("shape", [(120, 130, 250), (600, 520, 180), (61, 701, 97)])
def test_bitwise_identical_for_any_thread_count(lib, shape):
    rng = np.random.default_rng(8)
    M, N, K = shape
    for dtype in DTYPES:
        for ta, tb in ((False, False), (True, True)):
            A = np.asfortranarray(rng.standard_normal((K, M) if ta else (M, K)).astype(dtype))
            B = np.asfortranarray(rng.standard_normal((N, K) if tb else (K, N)).astype(dtype))
            results, used = [], []
            for threads in (1, 2, 4):
                C = np.asfortranarray(np.full((M, N), np.nan, dtype=dtype))
                used.append(_run_plan(lib, threads, A, B, C, ta, tb))
                results.append(C)
            assert used[0] == 1 and max(used) > 1
            for C in results[1:]:
                assert C.tobytes(order="F") == results[0].tobytes(order="F")
            assert_close(results[0], A, B, None, 1.0, 0.0, ta, tb)


def test_thread_setting_and_gemm_threads(lib):
    rng = np.random.default_rng(9)
    A = rng.standard_normal((256, 200)).astype(np.float32)
    B = rng.standard_normal((200, 190)).astype(np.float32)
    outs = []
    for n in (1, 2, 3):
        rt.set_num_threads(n)
        assert rt.get_num_threads() == n
        outs.append(rt.gemm(A, B))
    rt.set_num_threads(0)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_environment_sets_threads(built):
    code = (
        "import autotune.runtime as rt, sys; rt.use_library(sys.argv[1]); "
        "print(rt.get_num_threads())"
    )
    env = dict(_without_thread_variables(), AUTOTUNE_NUM_THREADS="3", OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code, str(built.library)], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "3", out.stderr


def _without_thread_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("AUTOTUNE_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


@pytest.mark.parametrize("variables, want", [
    ({"OMP_NUM_THREADS": "3"}, 3),
    ({"OMP_NUM_THREADS": "3,1"}, 3),             # OpenMP's nested list: the outer level
    ({"OPENBLAS_NUM_THREADS": "5"}, 5),
    ({"OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "5"}, 3),
    ({"AUTOTUNE_NUM_THREADS": "4", "OMP_NUM_THREADS": "3"}, 4),
    ({"OMP_NUM_THREADS": "0", "OPENBLAS_NUM_THREADS": "5"}, 5),  # 0: not set
    ({}, None),                                  # the CPUs the process may run on
])
def test_threads_follow_the_processs_conventions(built, variables, want):
    """A good neighbour (issue 26): with AUTOTUNE_NUM_THREADS unset, the count every
    other pool in the process is sized by, OMP_NUM_THREADS then OPENBLAS_NUM_THREADS."""
    code = (
        "import autotune.runtime as rt, sys; rt.use_library(sys.argv[1]); "
        "print(rt.get_num_threads())"
    )
    env = dict(_without_thread_variables(), **variables)
    out = subprocess.run([sys.executable, "-c", code, str(built.library)], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    expected = want if want is not None else min(len(os.sched_getaffinity(0)), 256)
    assert out.stdout.strip() == str(expected), out.stderr
    assert out.stderr == ""


@pytest.mark.parametrize("value", ["1e3", "-2", "four", "3x"])
def test_environment_thread_count_that_is_no_count_is_ignored_with_one_warning(built, value):
    # The variable is read again after set_num_threads(0): still one warning per process.
    code = (
        "import autotune.runtime as rt, sys; rt.use_library(sys.argv[1]); "
        "print(rt.get_num_threads()); rt.set_num_threads(0); print(rt.get_num_threads())"
    )
    env = dict(_without_thread_variables(), AUTOTUNE_NUM_THREADS=value)
    out = subprocess.run([sys.executable, "-c", code, str(built.library)], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    online = min(len(os.sched_getaffinity(0)), 256)
    assert out.stdout.split() == [str(online)] * 2, out.stderr
    assert out.stderr.count("AUTOTUNE_NUM_THREADS") == 1
    assert f'ignoring AUTOTUNE_NUM_THREADS="{value}"' in out.stderr


def test_plan_cache_hits(lib):
    lib.lib.at_plan_cache_clear()
    A, B = np.ones((13, 11), np.float32), np.ones((11, 9), np.float32)
    created0, hits0 = rt.cache_stats()
    for _ in range(5):
        rt.gemm(A, B)
    created, hits = rt.cache_stats()
    assert created - created0 == 1 and hits - hits0 == 4


def test_c_program_links_and_reports_bad_arguments(built, tmp_path):
    libdir = built.library.parent
    exe = tmp_path / "blas_entry"
    results = {}
    for variant, extra in (("default", []), ("own", ["-DOWN_XERBLA"])):
        subprocess.run(
            ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *extra, f"-I{libdir}",
             str(ROOT / "tests/c/blas_entry.c"), "-o", str(exe), f"-L{libdir}", "-l:libautotune.so",
             f"-Wl,-rpath,{libdir}", "-lm"],
            check=True, capture_output=True, text=True, timeout=120,
        )
        results[variant] = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    default, own = results["default"], results["own"]
    assert default.returncode == 0 and "done 0" in default.stdout, default.stdout
    assert " ** On entry to SGEMM parameter number  8 had an illegal value" in default.stderr
    assert " ** On entry to SGEMM parameter number  1 had an illegal value" in default.stderr
    assert "Parameter 14 to routine cblas_sgemm was incorrect" in default.stderr
    assert own.returncode == 0 and "ok cblas_own_xerbla_param 14" in own.stdout, own.stdout
    assert "ok cblas_own_xerbla_row_lda 11 1" in own.stdout  # reference CBLAS numbering, RowMajorStrg set


def test_table_c_format():
    spec = KernelSpec("generic", "f32", 4, 3, False, True)
    text = library.emit_kernel_table_c(
        [(spec, {16: 10.0, 64: 20.0, 256: 25.0})],
        {"blk_m": {"f32": 128, "f64": 64}, "blk_n": 512, "blk_k": 256, "pack_flops": 1e6,
         "thread_flops": 2e6, "provenance": "emulated", "simd_bytes": 16},
        {"f32": 100.0, "f64": 50.0},
    )
    assert f"void {spec.name}(int64_t K, const float *A" in text
    assert "{16, 64, 256, 0, 0, 0, 0, 0}" in text
    assert ".provenance = 1" in text and ".blk_m = {128, 64}" in text
    assert text == library.emit_kernel_table_c(
        [(spec, {256: 25.0, 16: 10.0, 64: 20.0})],
        {"blk_m": {"f32": 128, "f64": 64}, "blk_n": 512, "blk_k": 256, "pack_flops": 1e6,
         "thread_flops": 2e6, "provenance": "emulated", "simd_bytes": 16},
        {"f32": 100.0, "f64": 50.0},
    )
    with pytest.raises(ValueError, match="provenance"):
        library.emit_kernel_table_c([], {"provenance": "guessed"}, {})


def test_build_is_cached(built, tmp_path_factory):
    again = build_untuned(tmp_path_factory.getbasetemp() / "runtime-home", select=small_selection)
    assert again.cached and again.hash == built.hash and again.library == built.library
    assert (built.library.parent / "autotune.h").exists()


def test_threads_survive_fork(built):
    """A child forked after the pool started must not wait for the parent's workers."""
    code = (
        "import os, sys, numpy as np, autotune.runtime as rt\n"
        "rt.use_library(sys.argv[1]); rt.set_num_threads(2)\n"
        "A = np.ones((300, 300), np.float32); C = rt.gemm(A, A)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if np.all(rt.gemm(A, A) == 300) else 1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('child', os.waitstatus_to_exitcode(status), np.all(C == 300))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(built.library)], capture_output=True,
                         text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "child 0 True", out.stderr


def stored(rng, rows, cols, ld, layout, dtype):
    """A rows x cols matrix in a flat buffer with leading dimension ld: (buffer, view)."""
    outer, inner = (cols, rows) if layout == 0 else (rows, cols)
    buf = rng.standard_normal(ld * max(outer, 1)).astype(dtype)
    view = buf.reshape(max(outer, 1), ld)[:outer, :inner]
    return buf, (view.T if layout == 0 else view)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", [0, 1])
def test_vector_operands_through_the_free_flag(lib, dtype, layout):
    """M == 1 and N == 1 in every transposition, with tight and padded leading
    dimensions: the tiler may read a vector operand in the other format (plan.c,
    choose_vector_flags), which must agree with the caller's strides."""
    rng = np.random.default_rng(7)
    code = 0 if dtype == np.float32 else 1
    for M, N, K in ((1, 256, 256), (256, 1, 256), (1, 1, 300), (1, 37, 5), (33, 1, 70),
                    (1, 700, 650)):
        for ta in (0, 1):
            for tb in (0, 1):
                for pad in (0, 3):
                    ra, ca = (K, M) if ta else (M, K)
                    rb, cb = (N, K) if tb else (K, N)
                    lda = (ra if layout == 0 else ca) + pad
                    ldb = (rb if layout == 0 else cb) + pad
                    ldc = (M if layout == 0 else N) + pad
                    abuf, A = stored(rng, ra, ca, lda, layout, dtype)
                    bbuf, B = stored(rng, rb, cb, ldb, layout, dtype)
                    cbuf, C = stored(rng, M, N, ldc, layout, dtype)
                    C0 = C.copy()
                    rc = lib.lib.at_gemm(code, layout, ta, tb, M, N, K, 0.75, abuf.ctypes.data,
                                         lda, bbuf.ctypes.data, ldb, -0.5, cbuf.ctypes.data, ldc)
                    assert rc == 0
                    assert_close(C, A, B, C0, 0.75, -0.5, bool(ta), bool(tb))


# ---- the per-call fast paths (cache.c front cache, exec_t.h run_one / run_items) ----

@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_batch_fast_path_matches_single_calls_bitwise(lib, dtype):
    """gemm_batch runs items through run_items (kernels resolved once per batch),
    single gemm calls through run_one: the same kernel calls, so the same bits.
    Shapes cover one-step plans, several steps, edge steps and more steps than
    the direct table holds; alpha = 0 must not read A (NaN there) and beta = 0
    must not read C (NaN there)."""
    rng = np.random.default_rng(11)
    for M, N, K in ((2, 2, 2), (8, 8, 8), (15, 15, 15), (3, 5, 1), (17, 17, 17), (131, 67, 9),
                    (1, 9, 4)):
        for ta, tb in TRANS:
            for order in ("C", "F"):
                for alpha, beta in ((1.0, 0.0), (0.5, -1.5), (0.0, 2.0), (0.0, 0.0)):
                    batch = 5
                    A = rng.standard_normal((batch,) + ((K, M) if ta else (M, K))).astype(dtype)
                    B = rng.standard_normal((batch,) + ((N, K) if tb else (K, N))).astype(dtype)
                    if alpha == 0.0:
                        A[:] = np.nan
                    C0 = rng.standard_normal((batch, M, N)).astype(dtype)
                    if beta == 0.0:
                        C0[:] = np.nan
                    if order == "F":
                        # Each item column-major: the batch view is (batch, M, N) of F items.
                        C0 = np.ascontiguousarray(C0.transpose(0, 2, 1)).transpose(0, 2, 1)
                    C = C0.copy(order="K")
                    rt.gemm_batch(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
                    for i in range(batch):
                        # A one-item stack: the same flags and leading dimensions
                        # as the batch (a single gemm may orient a vector-shaped
                        # operand the other way), executed by run_one.
                        want = C0[i:i + 1].copy(order="K")
                        rt.gemm_batch(A[i:i + 1], B[i:i + 1], want, alpha=alpha, beta=beta,
                                      trans_a=ta, trans_b=tb)
                        assert C[i].tobytes() == want[0].tobytes(), (M, N, K, ta, tb, order,
                                                                    alpha, beta, i)
                        if alpha == 0.0 and beta == 0.0:
                            assert not np.any(C[i])
                        elif alpha == 0.0:
                            np.testing.assert_array_equal(C[i], C0[i] * dtype(beta))
                        else:
                            assert_close(C[i], A[i], B[i], None if beta == 0.0 else C0[i],
                                         alpha, beta, ta, tb)


def test_plan_execute_batch_and_ptrs_match_execute(lib):
    """at_plan_execute_batch / _ptrs (run_items) against at_plan_execute (run_one),
    bitwise, for a row-major plan (the operands trade places in both)."""
    rng = np.random.default_rng(12)
    for dtype, code in ((np.float32, 0), (np.float64, 1)):
        for M, N, K in ((8, 8, 8), (13, 7, 5), (40, 36, 3)):
            batch = 4
            A = rng.standard_normal((batch, M, K)).astype(dtype)
            B = rng.standard_normal((batch, K, N)).astype(dtype)
            plan = lib.lib.at_plan_create(code, 1, 0, 0, M, N, K, K, N, N)
            assert plan
            try:
                C1 = np.full((batch, M, N), np.nan, dtype=dtype)
                rc = lib.lib.at_plan_execute_batch(plan, batch, 1.25, A.ctypes.data, M * K,
                                                   B.ctypes.data, K * N, 0.0, C1.ctypes.data,
                                                   M * N)
                assert rc == 0
                C2 = np.full((batch, M, N), np.nan, dtype=dtype)
                P = ctypes.c_void_p * batch
                pa = P(*[A[i].ctypes.data for i in range(batch)])
                pb = P(*[B[i].ctypes.data for i in range(batch)])
                pc = P(*[C2[i].ctypes.data for i in range(batch)])
                fn = lib.lib.at_plan_execute_ptrs
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, P, P,
                               ctypes.c_double, P]
                assert fn(plan, batch, 1.25, pa, pb, 0.0, pc) == 0
                for i in range(batch):
                    C3 = np.full((M, N), np.nan, dtype=dtype)
                    assert lib.lib.at_plan_execute(plan, 1.25, A[i].ctypes.data, B[i].ctypes.data,
                                                   0.0, C3.ctypes.data) == 0
                    assert C1[i].tobytes() == C3.tobytes() == C2[i].tobytes()
                    assert_close(C3, A[i], B[i], None, 1.25, 0.0, False, False)
            finally:
                lib.lib.at_plan_destroy(plan)


def test_front_cache_is_invalidated_by_clear(lib):
    """A thread's front cache answers repeated calls without the shared cache, but
    at_plan_cache_clear empties it: the next call plans again."""
    A, B = np.ones((21, 6), np.float64), np.ones((6, 19), np.float64)
    rt.gemm(A, B)
    created0, hits0 = rt.cache_stats()
    for _ in range(3):
        rt.gemm(A, B)
    created1, hits1 = rt.cache_stats()
    assert created1 == created0 and hits1 - hits0 == 3
    lib.lib.at_plan_cache_clear()
    np.testing.assert_array_equal(rt.gemm(A, B), np.full((21, 19), 6.0))
    created2, _ = rt.cache_stats()
    assert created2 == created1 + 1


def test_front_caches_of_many_threads(lib):
    """Threads share the plans (one created per shape) and each keeps its own
    front cache; hits of threads that have exited still count."""
    import threading

    lib.lib.at_plan_cache_clear()
    shapes = [(9, 10, 11), (12, 5, 3), (7, 7, 7), (30, 2, 9), (4, 40, 6), (11, 11, 1)]
    rng = np.random.default_rng(13)
    ops = [(rng.standard_normal((m, k)), rng.standard_normal((k, n))) for m, n, k in shapes]
    created0, hits0 = rt.cache_stats()
    errors = []
    calls = 40

    def work(t):
        try:
            for r in range(calls):
                # More shapes than front-cache entries, visited in a thread's own
                # order: entries are evicted and refetched from the shared cache.
                A, B = ops[(r * (t + 1) + t) % len(ops)]
                C = rt.gemm(A, B)
                np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    created, hits = rt.cache_stats()
    # Each call either hits (front or shared) or creates the plan; two threads
    # may plan one shape at once, and the cache keeps one of the two.
    assert len(shapes) <= created - created0 <= 4 * len(shapes)
    assert (created - created0) + (hits - hits0) == 4 * calls


# ---- gemm_batch's C entry (_atfast.gemm_batch) against the Python path ----

def _stack(rng, batch, rows, cols, dtype, order):
    """A (batch, rows, cols) stack: C- or F-ordered items, or the whole array in F order."""
    X = rng.standard_normal((batch, rows, cols)).astype(dtype)
    if order == "F":
        return np.ascontiguousarray(X.transpose(0, 2, 1)).transpose(0, 2, 1)
    if order == "FF":
        return np.asfortranarray(X)  # batch stride 1: items interleaved
    return X


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_gemm_batch_c_entry_matches_python_path(lib, dtype):
    """The C entry picks the same layout, flags and leading dimensions as
    api._batch_slow_path (the former gemm_batch), so the same bits; both within
    the eps*K bound of numpy.  Covers C/F items, shared 2-D operands, alpha/beta
    and beta = 0 over a C full of NaN (C must not be read)."""
    assert api._state.batch is lib.fast.gemm_batch
    rng = np.random.default_rng(23)
    batch = 7
    for M, N, K in ((8, 8, 8), (3, 5, 1), (1, 9, 4), (17, 6, 13)):
        for ta, tb in TRANS:
            for oa, ob, oc in (("C", "C", "C"), ("F", "C", "F"), ("C", "F", "C"), ("FF", "FF", "FF"),
                               ("F", "F", "C")):
                for shared in (None, "A", "B"):
                    for alpha, beta in ((1.0, 0.0), (0.5, -1.5), (-2.0, 0.0)):
                        a_shape = (K, M) if ta else (M, K)
                        b_shape = (N, K) if tb else (K, N)
                        A = _stack(rng, batch, *a_shape, dtype, oa)
                        B = _stack(rng, batch, *b_shape, dtype, ob)
                        if shared == "A":
                            A = A[0]
                        elif shared == "B":
                            B = B[0]
                        C0 = _stack(rng, batch, M, N, dtype, oc)
                        if beta == 0.0:
                            C0[...] = np.nan
                        C = C0.copy(order="K")
                        got = rt.gemm_batch(A, B, C, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb)
                        assert got is C
                        want = C0.copy(order="K")
                        api._batch_slow_path(A, B, want, alpha, beta, int(ta), int(tb))
                        case = (M, N, K, ta, tb, oa, ob, oc, shared, alpha, beta)
                        assert C.tobytes(order="A") == want.tobytes(order="A"), case
                        for i in range(batch):
                            a = A if A.ndim == 2 else A[i]
                            b = B if B.ndim == 2 else B[i]
                            assert_close(C[i], a, b, None if beta == 0.0 else C0[i], alpha, beta,
                                         ta, tb)
                        if beta == 0.0:
                            # Without C: a new C-ordered stack, the Python path's bits
                            # (its layout may differ from C's above, so compare with it).
                            new = rt.gemm_batch(A, B, alpha=alpha, trans_a=ta, trans_b=tb)
                            assert new.dtype == dtype and new.flags.c_contiguous
                            ref = api._batch_slow_path(A, B, None, alpha, 0.0, int(ta), int(tb))
                            assert new.tobytes() == ref.tobytes(), case
                            for i in range(batch):
                                a = A if A.ndim == 2 else A[i]
                                b = B if B.ndim == 2 else B[i]
                                assert_close(new[i], a, b, None, alpha, 0.0, ta, tb)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_gemm_batch_c_entry_empty_and_fallbacks(lib, dtype):
    rng = np.random.default_rng(29)
    # Empty stacks: an empty result of the right shape, C untouched.
    out = rt.gemm_batch(np.empty((0, 4, 3), dtype), np.empty((0, 3, 5), dtype))
    assert out.shape == (0, 4, 5) and out.dtype == dtype
    C = np.empty((0, 4, 5), dtype)
    assert rt.gemm_batch(np.empty((0, 4, 3), dtype), np.empty((3, 5), dtype), C, beta=1.0) is C
    # Empty items: K = 0 gives beta * C (zeros for beta = 0, NaN in C ignored).
    C = np.full((3, 4, 5), np.nan, dtype)
    rt.gemm_batch(np.empty((3, 4, 0), dtype), np.empty((3, 0, 5), dtype), C)
    assert not np.any(C)
    # What the C entry declines still gives numpy's values: items with no unit
    # stride, a negative batch stride, lists, a shared operand for an F-ordered stack.
    A = rng.standard_normal((6, 10, 12)).astype(dtype)
    B = rng.standard_normal((6, 6, 7)).astype(dtype)
    for a, b in ((A[:, ::2, ::2], B), (A[::-1, :5, :6], B[::-1]), (A[:, :5, :6], B[0])):
        got = rt.gemm_batch(a, b)
        for i in range(6):
            assert_close(got[i], a[i], b if b.ndim == 2 else b[i], None, 1.0, 0.0, False, False)
    got = rt.gemm_batch(list(A[:, :5, :6]), B[0])
    for i in range(6):
        assert_close(got[i], A[i, :5, :6], B[0], None, 1.0, 0.0, False, False)
    # A read-only C (here a broadcast view, every item aliased) is declined in C
    # and rejected by the Python path with its clear error.
    C = np.broadcast_to(np.zeros((5, 7), dtype), (6, 5, 7))
    with pytest.raises(ValueError):
        rt.gemm_batch(A[:, :5, :6], B, C)  # read-only broadcast view: the clear error
    # A subclass of ndarray is still updated in place.
    class Sub(np.ndarray):
        pass

    C = np.zeros((6, 5, 7), dtype).view(Sub)
    assert rt.gemm_batch(A[:, :5, :6], B, C) is C


def test_gemm_batch_c_entry_errors(lib):
    A = np.ones((4, 3, 5), np.float32)
    B = np.ones((4, 5, 2), np.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        rt.gemm_batch(A, np.ones((4, 6, 2), np.float32))
    with pytest.raises(ValueError, match="batch sizes differ"):
        rt.gemm_batch(A, np.ones((5, 5, 2), np.float32))
    with pytest.raises(ValueError, match="shape"):
        rt.gemm_batch(A, B, np.empty((4, 3, 3), np.float32))
    with pytest.raises(ValueError, match="shape"):
        rt.gemm_batch(A, B, np.empty((3, 2), np.float32))
    with pytest.raises(ValueError, match="beta"):
        rt.gemm_batch(A, B, beta=1.0)
    with pytest.raises(ValueError, match="3-D"):
        rt.gemm_batch(A[0], B[0])
    with pytest.raises(TypeError, match="dtype"):
        rt.gemm_batch(A, B.astype(np.float64), np.empty((4, 3, 2), np.float32))
    with pytest.raises(TypeError, match="unexpected keyword"):
        rt.api._state.batch(A, B, gamma=1.0)


def _shapes_planned_as(lib, code, candidates, one_kernel):
    """The candidate (M, N, K) whose column-major plan reads A and B in place as one
    kernel call (one_kernel) or as several."""
    found = []
    for M, N, K in candidates:
        plan = lib.lib.at_plan_create(code, 0, 0, 0, M, N, K, M, K, M)
        info = loader.at_plan_info()
        assert lib.lib.at_plan_get_info(plan, ctypes.byref(info)) == 0
        if (info.nsteps == 1) == one_kernel and info.path == 0:
            found.append((M, N, K))
        lib.lib.at_plan_destroy(plan)
    return found


SMALL_CANDIDATES = {True: [(1, 1, 1), (2, 2, 2), (3, 4, 5), (4, 4, 4), (8, 4, 8), (7, 3, 2)],
                    False: [(15, 15, 15), (13, 33, 23), (17, 9, 13), (5, 7, 3), (31, 2, 9), (40, 40, 5)]}


@pytest.mark.parametrize("one_kernel", [True, False], ids=["one-kernel", "several-steps"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_repeated_small_calls_keep_the_blas_rules(lib, dtype, one_kernel):
    """A repeated shape runs from cblas_?gemm's front-cache hit: a plan of one kernel
    calls it there, any other goes straight to the executor.  Either way alpha == 0
    must still read neither A nor B, beta == 0 must not read C, row-major must swap
    the operands, and the bits must be those of the first call's."""
    code = 0 if dtype == np.float32 else 1
    name = "cblas_sgemm" if code == 0 else "cblas_dgemm"
    ct = ctypes.c_float if code == 0 else ctypes.c_double
    fn = getattr(lib.lib, name)
    I, P = ctypes.c_int, ctypes.c_void_p
    fn.restype = None
    fn.argtypes = [I, I, I, I, I, I, ct, P, I, P, I, ct, P, I]
    shapes = _shapes_planned_as(lib, code, SMALL_CANDIDATES[one_kernel], one_kernel)
    assert shapes, f"the test library plans none of {SMALL_CANDIDATES[one_kernel]} so"
    rng = np.random.default_rng(21)
    for M, N, K in shapes:
        for order, (ta, tb) in itertools.product((101, 102), TRANS):
            A = operand(rng, K if ta else M, M if ta else K, dtype)
            B = operand(rng, N if tb else K, K if tb else N, dtype)
            A, B = (np.ascontiguousarray(A), np.ascontiguousarray(B)) if order == 101 else \
                (np.asfortranarray(A), np.asfortranarray(B))
            lda = A.shape[1] if order == 101 else A.shape[0]
            ldb = B.shape[1] if order == 101 else B.shape[0]
            ldc = N if order == 101 else M
            layout = "C" if order == 101 else "F"
            first = None
            for _ in range(3):  # the first call plans, the next ones hit the front cache
                C = np.full((M, N), np.nan, dtype=dtype, order=layout)
                fn(order, 112 if ta else 111, 112 if tb else 111, M, N, K, 1.5, A.ctypes.data,
                   lda, B.ctypes.data, ldb, 0.0, C.ctypes.data, ldc)
                assert_close(C, A, B, None, 1.5, 0.0, ta, tb)
                first = C.tobytes() if first is None else first
                assert C.tobytes() == first
            C0 = rng.standard_normal((M, N)).astype(dtype)
            C = np.array(C0, order=layout)
            An, Bn = np.full_like(A, np.nan), np.full_like(B, np.inf)
            for _ in range(2):
                fn(order, 112 if ta else 111, 112 if tb else 111, M, N, K, 0.0, An.ctypes.data,
                   lda, Bn.ctypes.data, ldb, 0.5, C.ctypes.data, ldc)
            np.testing.assert_array_equal(C, (C0 * dtype(0.5)) * dtype(0.5))
    # The plan handle's shortcut: alpha == 0 and beta == 0 clear C, NaN operands unread.
    M, N, K = shapes[0]
    plan = lib.lib.at_plan_create(code, 0, 0, 0, M, N, K, M, K, M)
    try:
        An = np.full((K, M), np.nan, dtype=dtype).T
        Bn = np.full((N, K), np.nan, dtype=dtype).T
        C = np.full((M, N), np.nan, dtype=dtype, order="F")
        assert lib.lib.at_plan_execute(plan, 0.0, An.ctypes.data, Bn.ctypes.data, 0.0,
                                       C.ctypes.data) == 0
        assert np.all(C == 0)
    finally:
        lib.lib.at_plan_destroy(plan)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the written-out rule is Linux's (XDG)")
@pytest.mark.parametrize("xdg", [None, "", "/srv/data", "relative/data", " /srv/padded"])
def test_the_default_home_is_platformdirs_user_data_dir(monkeypatch, xdg):
    """home.py writes platformdirs' Linux rule out (so the first gemm does not import
    platformdirs); it must name the directory platformdirs names."""
    platformdirs = pytest.importorskip("platformdirs")
    from autotune import home as home_mod

    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    monkeypatch.delenv("AUTOTUNE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/someone")
    assert home_mod.user_data_dir("autotune") == Path(platformdirs.user_data_dir("autotune"))
    assert home_mod.home() == Path(platformdirs.user_data_dir("autotune"))
