"""When the planner puts a block on the portable edge code instead of a kernel.

Edge code (kernels_src/runtime/edge_t.h) sums each group of C's elements in a loop of
its own, and each loop costs about a kernel call's fixed cost besides its flops.  Its
measured rate (``edge_frac``) leaves those out, so an install whose figures gave the
quickest kernel call 6.7 ns planned fp64 2x2x2 on edge code: 43 ns a product against
10 on the 2x2 kernel (Zen 1; cost.c, edge_loops).
"""

from __future__ import annotations

import ctypes

import pytest

from autotune import build, codegen, host as host_mod, toolchain
from autotune.link import build_runtime, default_params, emit_kernel_table_c
from autotune.params import PlannerParams
from autotune.runtime import loader
from autotune.specs import KernelSpec

#: A Zen 1 install's fp64 figures (GFLOPS at K = 4, 16, 64, 256) for the kernels a
#: tiny product can use, its edge_frac and its peak.
_FIGURES = {(1, 1): (1.1, 2.4, 3.6, 4.3), (2, 1): (2.378, 4.579, 7.741, 9.247),
            (1, 2): (1.826, 3.386, 5.375, 6.163), (2, 2): (3.253, 5.757, 8.492, 9.452)}
_EDGE_FRAC = 0.2684
_PEAK = {"f32": 40.0, "f64": 20.0}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """A measured-provenance library of the host's fastest family's fp64 NN kernels
    up to 2x2, with the figures and edge_frac above."""
    info = host_mod.detect()
    isa = toolchain.native_isas(info)[0]
    home = tmp_path_factory.mktemp("edge-choice")
    target = toolchain.target_for(isa, info)
    specs = [KernelSpec(isa, "f64", mr, nr, unroll=8) for mr, nr in _FIGURES]
    built = build.build_kernels(target, [codegen.generate(s) for s in specs], jobs=2, home=home)
    assert not built.failures
    objects = [(s, built.objects[s.name].path) for s in specs]
    params = default_params(info, {"f64": (2, 2)}, provenance="measured")
    params["edge_frac"] = {**params["edge_frac"], "f64": _EDGE_FRAC}
    figures = [(s, dict(zip((4, 16, 64, 256), _FIGURES[s.mr, s.nr]))) for s in specs]
    library = build_runtime(target, objects, emit_kernel_table_c(figures, params, _PEAK),
                            home / "lib" / "edge").library
    lib = ctypes.CDLL(str(library))
    loader._prototypes(lib)
    lib.table_params = params
    return lib


def _kernel_indices(lib, M: int, N: int, K: int) -> list[int]:
    plan = lib.at_plan_create_ex(1, 0, 0, 0, M, N, K, M, K, M, 1)
    assert plan
    try:
        info = loader.at_plan_info()
        lib.at_plan_get_info(plan, ctypes.byref(info))
        steps = (loader.at_step * info.nsteps)()
        lib.at_plan_steps(plan, steps, info.nsteps)
        return [s.kernel for s in steps]
    finally:
        lib.at_plan_destroy(plan)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 2, 2), (2, 1, 3), (1, 2, 2), (2, 2, 1)])
def test_a_tiny_product_its_kernels_cover_runs_on_them(library, shape):
    steps = _kernel_indices(library, *shape)
    assert steps and all(k >= 0 for k in steps), steps  # -1: edge code


def test_an_edge_frac_of_one_still_puts_every_block_on_edge_code(library):
    """How the install times the edge code and the tests run it (crossovers.measure_edge)."""
    params = PlannerParams.from_mapping(library.table_params).with_values("f64", {"edge_frac": 1.0})
    assert library.at_params_set(ctypes.byref(params.to_struct())) == 0
    try:
        for shape in [(1, 1, 1), (2, 2, 2), (15, 15, 64), (7, 13, 256)]:
            assert set(_kernel_indices(library, *shape)) == {-1}, shape
    finally:
        library.at_params_set(None)  # back to the library's own table
