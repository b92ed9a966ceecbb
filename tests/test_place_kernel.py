"""place_kernel_*: the main kernel of products read in place, per transposition, that
the install measured (autotune.crossovers.measure_place_kernel).  The tiler favours it
where the install's products reach, from K = 64 up to the flops of 2 x 128^3, and
plans as before elsewhere; the product stays right, and a value naming a kernel of
another dtype or transposition is refused."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import autotune.runtime as rt
from autotune.runtime import loader
from autotune.specs import KernelSpec

from .reference import assert_close, operand
from .test_packed_path import lib, library_kernels as kernels  # noqa: F401 (lib: the module's fixture)

TRANS = {"nn": (0, 0), "nt": (0, 1), "tn": (1, 0), "tt": (1, 1)}
BOUND_FLOPS = 2 * 128**3  # plan.c's AT_PLACE_FAVOUR_FLOPS


def test_the_favour_reaches_as_far_as_the_installs_products():
    """plan.c takes the measured kernel up to the flops of the largest product the
    install timed it on, from K = 64: the two must move together."""
    from pathlib import Path
    import re

    from autotune.crossovers import PLACE_SHAPES

    source = (Path(__file__).parents[1] / "kernels_src" / "runtime" / "plan.c").read_text()
    assert "#define AT_PLACE_FAVOUR_FLOPS (2.0 * 128 * 128 * 128)" in source
    assert max(2 * m * n * k for m, n, k in PLACE_SHAPES) == BOUND_FLOPS
    assert min(k for _, _, k in PLACE_SHAPES) >= int(re.search(r"AT_PLACE_FAVOUR_K (\d+)", source).group(1))


def set_place(runtime, trans: str, dt: int, value: int) -> int:
    p = loader.at_tune_params()
    assert runtime.lib.at_params_get(ctypes.byref(p)) == 0
    # In place at every size, on one thread: the tiling alone decides.  With calls
    # all but free the favoured kernel is the cheapest per element wherever it fits
    # (at the built-in 2 ns a call, a block of 16x2 does not take the place of 8x14's).
    for d in range(2):
        p.pack_flops[d] = p.pack_flops_tn[d] = 1e18
        p.call_seconds[d] = 1e-30
    p.thread_flops = 1e18
    getattr(p, f"place_kernel_{trans}")[dt] = value
    return runtime.lib.at_params_set(ctypes.byref(p))


def plan_steps(runtime, dt, ta, tb, M, N, K):
    plan = runtime.lib.at_plan_create_ex(dt, 0, ta, tb, M, N, K, K if ta else M, N if tb else K, M, 1)
    assert plan, runtime.lib.at_last_error()
    try:
        info = loader.at_plan_info()
        runtime.lib.at_plan_get_info(plan, ctypes.byref(info))
        steps = (loader.at_step * info.nsteps)()
        runtime.lib.at_plan_steps(plan, steps, info.nsteps)
    finally:
        runtime.lib.at_plan_destroy(plan)
    assert info.path == 0
    return [(s.kernel, s.i0, s.j0, s.mb, s.nb) for s in steps]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("trans", list(TRANS))
def test_the_place_kernel_covers_products_read_in_place_where_measured(lib, dtype, trans):
    dt, (ta, tb) = int(dtype == np.float64), TRANS[trans]
    mine = [k for k in kernels(lib) if k[2] == dt and k[3] == (ta, tb)
            and not KernelSpec.from_name(k[1]).variant and k[4] * k[5] >= 4]
    if len(mine) < 2:
        # A family without this transposition's in-place kernels (only packed formats,
        # or one kernel): the favour has nothing to choose between.
        pytest.skip(f"this host's test library has fewer than two {trans} kernels of this dtype "
                    "that read their operands in place")
    rng = np.random.default_rng(7 * dt + ta * 2 + tb)
    assert set_place(lib, trans, dt, 0) == 0

    def covered(steps, index):
        return sum(mb * nb for k, _, _, mb, nb in steps if k == index)

    # A kernel the figures leave out of a product it tiles exactly.
    def products():
        for index, name, _, _, mr, nr in sorted(mine, key=lambda k: (-k[4] * k[5], k[0])):
            for rows, cols in ((3, 4), (5, 7), (7, 3)):
                M, N = rows * mr, cols * nr
                K = max(64, min(200, BOUND_FLOPS // (2 * M * N)))
                yield index, name, M, N, K, plan_steps(lib, dt, ta, tb, M, N, K)

    found = next(((i, n, M, N, K, f) for i, n, M, N, K, f in products() if covered(f, i) < 0.5 * M * N), None)
    # With calls all but free the figures take the fastest kernel per flop wherever it
    # fits, so any slower one is left out of a product it tiles exactly.
    assert found is not None, f"the figures chose every {trans} kernel on its own products"
    index, name, M, N, K, figures = found
    shallow_figures = plan_steps(lib, dt, ta, tb, M, N, 32)
    big_figures = plan_steps(lib, dt, ta, tb, M, N, BOUND_FLOPS // (2 * M * N) + 1)
    assert set_place(lib, trans, dt, index + 1) == 0
    favoured = plan_steps(lib, dt, ta, tb, M, N, K)
    assert covered(favoured, index) >= 0.5 * M * N, (name, favoured)
    # Shallower than K = 64, or past the flops the install timed: the figures' plans.
    assert plan_steps(lib, dt, ta, tb, M, N, 32) == shallow_figures
    assert plan_steps(lib, dt, ta, tb, M, N, BOUND_FLOPS // (2 * M * N) + 1) == big_figures
    A = operand(rng, *((K, M) if ta else (M, K)), dtype, "F", pad=3)
    B = operand(rng, *((N, K) if tb else (K, N)), dtype, "F", pad=2)
    C0 = np.asarray(rng.standard_normal((M, N)), dtype=dtype, order="F")
    C = C0.copy(order="F")
    rt.set_num_threads(1)
    rt.gemm(A, B, C, alpha=0.5, beta=-1.0, trans_a=bool(ta), trans_b=bool(tb))
    assert_close(C, A, B, C0, 0.5, -1.0, bool(ta), bool(tb))
    # Another transposition's kernel, another dtype's, or no kernel at all: refused.
    others = [k[0] + 1 for k in kernels(lib) if k[2] == dt and k[3] != (ta, tb)][:1]
    others += [k[0] + 1 for k in kernels(lib) if k[2] != dt][:1]
    for bad in (-1, lib.lib.at_kernel_count() + 1, *others):
        assert set_place(lib, trans, dt, bad) != 0, bad
    assert set_place(lib, trans, dt, 0) == 0
