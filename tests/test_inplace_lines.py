"""Which one-column kernels a plan reads an operand in place with.

A kernel of one column uses each element of its sliver of A once, so in place it runs
at the speed of the lines it reads; a sliver that is no whole number of cache lines
shares one with each neighbour and both read it.  The kernels' figures (A contiguous
and in L1) do not show that: on Zen 1, 14x1 kernels led fp64's figures by 3 % and ran
256x1x256 1.4x slower than 48x1 (cost.c, sliver_line_share).
"""

from __future__ import annotations

import ctypes

import pytest

from autotune import build, codegen, host as host_mod, toolchain
from autotune.link import build_runtime, default_params, emit_kernel_table_c
from autotune.runtime import loader
from autotune.specs import KernelSpec


#: Per family: the kernel unroll, and fp64 one-column heights whose figures will rank
#: them first, second and third; the first's sliver is no whole number of lines, the
#: second's one line or more exactly.
_HEIGHTS = {"avx512": (8, (14, 16, 8)), "avx2": (8, (14, 16, 8)), "neon": (2, (6, 8, 4))}


@pytest.fixture(scope="module")
def figures_favour_a_straddling_sliver(tmp_path_factory):
    """A measured-provenance library of three fp64 NN one-column kernels of the host's
    fastest family, whose figures rank the straddling one first at every depth."""
    info = host_mod.detect()
    isa = toolchain.native_isas(info)[0]
    if isa not in _HEIGHTS:
        pytest.skip(f"the {isa} family has no one-column fp64 kernel a whole cache line tall "
                    "(its tallest is 7 rows, 56 bytes), so whole lines cannot be preferred")
    unroll, heights = _HEIGHTS[isa]
    home = tmp_path_factory.mktemp("lines-home")
    target = toolchain.target_for(isa, info)
    figures = dict(zip(heights, (16.6, 16.1, 15.3)))
    specs = [KernelSpec(isa, "f64", mr, 1, unroll=unroll) for mr in heights]
    built = build.build_kernels(target, [codegen.generate(s) for s in specs], jobs=2, home=home)
    assert not built.failures
    objects = [(s, built.objects[s.name].path) for s in specs]
    params = default_params(info, {"f64": (heights[1], 1)}, provenance="measured")
    table = emit_kernel_table_c([(s, {k: figures[s.mr] for k in (4, 16, 64, 256)}) for s in specs], params,
                                {"f32": 40.0, "f64": 20.0})
    library = build_runtime(target, objects, table, home / "lib" / "lines").library
    lib = ctypes.CDLL(str(library))
    loader._prototypes(lib)
    return lib, f"_{heights[0]}x1_"


def _kernels(lib, M: int, N: int, K: int, lda: int) -> set[str]:
    plan = lib.at_plan_create_ex(1, 0, 0, 0, M, N, K, lda, K, M, 1)
    assert plan
    try:
        info = loader.at_plan_info()
        lib.at_plan_get_info(plan, ctypes.byref(info))
        assert info.path == 0  # read in place
        steps = (loader.at_step * info.nsteps)()
        lib.at_plan_steps(plan, steps, info.nsteps)
        names = set()
        for s in steps:
            k = loader.at_kernel_info()
            assert s.kernel >= 0 and lib.at_kernel_get(s.kernel, ctypes.byref(k)) == 0
            names.add(k.name.decode())
        return names
    finally:
        lib.at_plan_destroy(plan)


@pytest.mark.parametrize("M,lda", [(256, 256), (448, 448), (256, 300)])
def test_in_place_one_column_products_read_whole_lines(figures_favour_a_straddling_sliver, M, lda):
    lib, straddling = figures_favour_a_straddling_sliver
    names = _kernels(lib, M, 1, 256, lda)
    assert names and all(straddling not in n for n in names), names
