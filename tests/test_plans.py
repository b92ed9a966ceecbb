"""Plan invariants, read back from the C tiler through autotune.plans.

Every element of C is covered by exactly one step; every step names a kernel
of the library whose block size it has (or the portable edge code); threads only
change who runs a step, never the tiling.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotune.runtime as rt
from autotune import plans
from autotune.runtime import loader
from autotune.specs import KernelSpec

from .peak import PEAK_KIB

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def lib(built):
    return rt.use_library(built.library)


def check_plan(p: plans.Plan) -> None:
    assert not p.truncated, f"{p.step_count} steps: ask plans.plan for all of them (max_steps)"
    cover = np.zeros((p.M, p.N), dtype=np.int32)
    for s in p.steps:
        assert 0 <= s.i0 and s.i0 + s.mb <= p.M and 0 <= s.j0 and s.j0 + s.nb <= p.N
        assert 0 <= s.thread < p.threads
        cover[s.i0:s.i0 + s.mb, s.j0:s.j0 + s.nb] += 1
        if s.kernel != "edge":
            spec = KernelSpec.from_name(s.kernel)
            assert spec.dtype == p.dtype
            # Steps are in the caller's coordinates; a row-major plan runs kernels on C^T.
            mr, nr = (spec.nr, spec.mr) if p.layout == "row" else (spec.mr, spec.nr)
            assert (mr, nr) == (s.mb, s.nb)
            if p.path == "small":
                want = p.trans if p.layout == "col" else p.trans[::-1]
                assert spec.trans == p.kernel_trans
                # A vector operand's transposition is free (plan.c, choose_vector_flags),
                # and a few rows of an untransposed A may be copied into rows along K
                # (choose_copy_a): only then may the kernels' flag differ from the caller's.
                m, n = (p.N, p.M) if p.layout == "row" else (p.M, p.N)
                assert spec.trans[0] == want[0] or m == 1 or (p.a_copied and want[0] == "n")
                assert spec.trans[1] == want[1] or n == 1
                assert s.pack_a == p.a_copied and not s.pack_b
            else:
                assert spec.trans == p.kernel_trans and s.pack_a and s.pack_b
    if p.K == 0:
        # Nothing to multiply: the executor only scales C by beta.
        assert not p.steps
        return
    assert np.all(cover == 1), "some element of C is covered zero or several times"
    if p.M and p.N and p.K:
        assert p.predicted_seconds > 0
        mem = sum((s.mb + s.nb) * p.K for s in p.steps) + 2 * p.M * p.N
        assert p.memops == pytest.approx(mem)


@settings(max_examples=80, deadline=None)
@given(
    M=st.integers(0, 300), N=st.integers(0, 300), K=st.integers(0, 300),
    dtype=st.sampled_from(["f32", "f64"]), trans=st.sampled_from(["nn", "nt", "tn", "tt"]),
    layout=st.sampled_from(["col", "row"]), threads=st.integers(1, 5),
)
def test_every_element_covered_once(M, N, K, dtype, trans, layout, threads):
    check_plan(plans.plan(M, N, K, dtype, trans, layout=layout, threads=threads))


@pytest.mark.parametrize("shape", [(1, 1, 1), (15, 15, 15), (17, 16, 3), (64, 64, 64),
                                   (3000, 2, 5), (2, 3000, 5), (700, 650, 400)])
def test_tiling_does_not_depend_on_threads(shape):
    tilings = []
    for threads in (1, 2, 4):
        p = plans.plan(*shape, threads=threads)
        check_plan(p)
        tilings.append([(s.kernel, s.i0, s.j0, s.mb, s.nb) for s in sorted(
            p.steps, key=lambda s: (s.i0, s.j0))])
    assert tilings[0] == tilings[1] == tilings[2]


def test_problem_above_pack_flops_takes_packed_path_and_splits_threads(lib):
    # Where packing starts depends on the host's caches (a VM may report a
    # 260 MB L3 as this core's); what must hold is that the threshold is obeyed.
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.pack_flops[1] = 2.0 * 700 * 650 * 400 / 2
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0
    try:
        p = plans.plan(700, 650, 400, "f64", "tn", threads=4)
    finally:
        lib.lib.at_params_set(None)
    assert p.path == "packed" and all(b > 0 for b in p.blocks)
    assert p.threads > 1
    busy = {s.thread for s in p.steps}
    assert busy == set(range(p.threads))


@pytest.mark.parametrize("shape", [(64, 64, 64), (210, 210, 210)])
def test_a_split_is_taken_only_where_it_beats_one_thread_by_the_regions_cost(lib, shape):
    """thread_seconds is what a parallel region costs: a plan whose busiest share
    plus that is not below one thread's time runs on one thread, packed or not."""
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.thread_flops = 0.0
    params.pack_flops[0] = 2.0 * 200 ** 3
    try:
        for cost, threads in ((0.0, 2), (1e-2, 1)):
            params.thread_seconds = cost
            assert lib.lib.at_params_set(ctypes.byref(params)) == 0
            p = plans.plan(*shape, "f32", "nn", threads=2)
            assert p.path == ("packed" if shape[0] > 200 else "small")
            assert p.threads == threads and {s.thread for s in p.steps} == set(range(threads))
            one = plans.plan(*shape, "f32", "nn", threads=1)
            assert sorted((s.i0, s.j0, s.mb, s.nb) for s in p.steps) == \
                sorted((s.i0, s.j0, s.mb, s.nb) for s in one.steps)
            if threads == 2:  # the region's cost is part of the prediction
                assert p.predicted_seconds < one.predicted_seconds
            else:
                assert p.predicted_seconds == pytest.approx(one.predicted_seconds)
        params.thread_seconds = -1.0
        assert lib.lib.at_params_set(ctypes.byref(params)) != 0
    finally:
        lib.lib.at_params_set(None)


def _shared_lines(p: plans.Plan, elem: int) -> int:
    """Lines of (column-major) C that two threads write: a column where one
    thread's step ends at a row that does not start a 64-byte line and another
    thread's step begins."""
    owner_at: dict[tuple[int, int], int] = {}
    for s in p.steps:
        for j in range(s.j0, s.j0 + s.nb):
            owner_at[(s.i0, j)] = s.thread
    shared = 0
    for s in p.steps:
        row = s.i0 + s.mb
        if row < p.M and ((p.ldc * elem) % 64 or (row * elem) % 64):
            shared += sum(owner_at.get((row, j), s.thread) != s.thread for j in range(s.j0, s.j0 + s.nb))
    return shared


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(87, 93, 56), (97, 83, 61), (45, 200, 40), (130, 120, 30), (300, 90, 20)])
def test_threads_do_not_share_lines_of_c(lib, dtype, shape):
    """Two threads storing into one line of C pass it between their cores at
    every store: a split by rows at a row inside a line ran f32 87 x 93 x 56 at
    half the speed of the split by columns on a 2-vCPU Xeon (threads.c).  The
    split of the same tiling where the lines are whole (ldc a multiple of 16) is
    blind to them: counted on the real ldc, a split chosen for it must share no
    more.  (Which split wins is the model's weighing of lines against balance:
    tests/c/shared_lines_check.c pins that down.)"""
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.thread_flops = params.thread_seconds = 0.0
    params.pack_flops[0] = params.pack_flops[1] = 1e15
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0
    try:
        p = plans.plan(*shape, dtype, "nn", threads=2)
        # Whole lines per column, so no split shares one: the planner does not look.
        blind = plans.plan(*shape, dtype, "nn", threads=2, ldc=(shape[0] + 15) // 16 * 16)
    finally:
        lib.lib.at_params_set(None)
    elem = 4 if dtype == "f32" else 8
    assert p.threads == 2 and {s.thread for s in p.steps} == {0, 1}
    # The same tiling (ldc does not change it), split another way.
    assert sorted((s.i0, s.j0, s.mb, s.nb) for s in p.steps) == sorted((s.i0, s.j0, s.mb, s.nb) for s in blind.steps)
    unaware = _shared_lines(dataclasses.replace(blind, ldc=p.ldc), elem)
    assert _shared_lines(p, elem) <= unaware, plans.explain(p)


@pytest.mark.parametrize("shape, packed", [
    ((24, 2500, 48), False), ((64, 100000, 64), False),  # small A: B read a few times from cache
    ((100000, 64, 64), True), ((64, 4000, 4000), True), ((130, 130, 130), True),
    ((100, 100, 100), False),  # below the crossover square
])
def test_packing_needs_an_a_as_large_as_the_crossover_square(lib, shape, packed):
    # Measured on a 2-core Zen 3 (plan.c, takes_packed_path): with a crossover at
    # 108^3, the first two ran 1.3x and 1.25x faster in place, the next two 1.14x
    # and 1.12x faster packed, though all four have more flops than 108^3.
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.pack_flops[0] = 2.0 * 108 ** 3
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0
    try:
        p = plans.plan(*shape, "f32", "nn", threads=1, max_steps=1)
    finally:
        lib.lib.at_params_set(None)
    assert (p.path == "packed") == packed


@pytest.mark.parametrize("pack_tn, trans, packed", [
    (128, "tn", True), (128, "nn", False), (128, "nt", False), (128, "tt", False),
    (1024, "tn", False),  # neither threshold reached
    (2048, "tn", False),  # a tn threshold past pack_flops is never the later one: see below
])
def test_tn_products_pack_from_their_own_crossover(lib, pack_tn, trans, packed):
    # In place, a tn product's kernels read A as dot products along K (plan.c,
    # takes_packed_path): it packs from pack_flops_tn where that comes first, and
    # no other transposition sees that threshold.
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.pack_flops[0], params.pack_flops_tn[0] = 2.0 * 1024 ** 3, 2.0 * pack_tn ** 3
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0
    try:
        p = plans.plan(300, 300, 300, "f32", trans, threads=1, max_steps=1)
        q = plans.plan(1100, 1100, 1100, "f32", trans, threads=1, max_steps=1)
    finally:
        lib.lib.at_params_set(None)
    assert (p.path == "packed") == packed
    assert q.path == "packed"  # past pack_flops every transposition packs, tn too


def test_small_problem_reads_operands_in_place():
    p = plans.plan(24, 20, 16, "f32", "nt")
    assert p.path == "small" and p.blocks == (0, 0, 0)
    assert not any(s.pack_a or s.pack_b for s in p.steps)
    assert p.threads == 1  # far below the thread threshold


def test_bigger_blocks_are_preferred():
    """IAAT's first principle: one main kernel, not tails or edge code, covers most of C.

    Which kernel is main depends on the family (the portable one prefers 3x3 over
    1x14: one row of a vector leaves lanes idle), so the test asks for a block of
    at least eight elements covering half of C.
    """
    p = plans.plan(64, 64, 64, "f32", "nn")
    area: dict[str, int] = {}
    for s in p.steps:
        area[s.kernel] = area.get(s.kernel, 0) + s.mb * s.nb
    main = max(area, key=area.get)
    assert main != "edge" and area[main] >= 0.5 * 64 * 64, area
    spec = KernelSpec.from_name(main)
    assert spec.mr * spec.nr >= 8, (spec, area)


def test_explain_and_draw():
    p = plans.plan(15, 15, 15, "f32", "nn")
    text = plans.explain(p)
    assert "M=15 N=15 K=15" in text and "path: small" in text and "memops" in text
    picture = plans.draw(p).splitlines()
    assert picture[0].startswith("C 15 x 15")
    grid = picture[1:16]
    assert len(grid) == 15 and all(len(row.strip()) == 15 for row in grid)
    assert all(ch.isalpha() for row in grid for ch in row.strip())
    big = plans.draw(plans.plan(500, 300, 20))
    assert "one character" in big
    assert plans.draw(plans.plan(0, 5, 5)).startswith("(empty")


def test_invalid_arguments_raise():
    with pytest.raises(plans.PlanError, match="leading dimensions"):
        plans.plan(10, 10, 10, lda=5)
    with pytest.raises(plans.PlanError, match="dtype"):
        plans.plan(10, 10, 10, "f16")
    with pytest.raises(ValueError):
        plans.plan(10, 10, 10, trans="xx")


def thread_loads(p: plans.Plan) -> tuple[list[float], int]:
    """Predicted work per thread (flops: every step runs over the whole of K) and the
    number of items the split assigns (blocks on the packed path, steps otherwise)."""
    work = [0.0] * p.threads
    items = set()
    for s in p.steps:
        work[s.thread] += 2.0 * s.mb * s.nb * p.K
        if p.path == "packed":
            items.add((s.i0 // p.blocks[0], s.j0 // p.blocks[1]))
        else:
            items.add((s.i0, s.j0))
    return work, len(items)


@pytest.mark.parametrize("shape,dtype", [((256, 256, 256), "f64"), ((256, 256, 256), "f32"),
                                         ((512, 512, 512), "f64"), ((512, 512, 512), "f32"),
                                         ((1024, 1024, 1024), "f64"), ((700, 650, 400), "f64"),
                                         ((1000, 300, 64), "f32"), ((300, 1000, 64), "f64")])
@pytest.mark.parametrize("threads", [2, 4])
def test_threads_get_balanced_work(shape, dtype, threads):
    """No thread's predicted work exceeds 1.25x the mean where the items allow it.

    fp64 256^3 used to give thread 0 61,440 of C's 65,536 elements: blocks of
    120 x 252 cut 256 into 120 + 120 + 16 and the grid split could only hand
    out whole block rows or columns."""
    # Every step, however small the family's kernels (the portable ones: 10^5 and more).
    p = plans.plan(*shape, dtype, threads=threads, max_steps=4_000_000)
    check_plan(p)
    assert p.threads == threads
    work, items = thread_loads(p)
    mean = sum(work) / threads
    biggest_item = max(s.mb * s.nb for s in p.steps) * 2.0 * p.K
    if p.path == "packed":
        biggest_item = 2.0 * p.blocks[0] * p.blocks[1] * p.K
    # With at least two items per thread the split must be within 25 % of the
    # mean; with fewer, within about one item of it (contiguous runs guarantee
    # one item of predicted time; flops and predicted time differ by the kernels'
    # speeds, hence the margin).
    if items >= 2 * threads:
        assert max(work) <= 1.25 * mean, (work, items)
    else:
        assert max(work) <= mean + 1.25 * biggest_item, (work, items)
    assert all(w > 0 for w in work)


def _reach(p: plans.Plan) -> int:
    """The most rows plus columns of C one thread's steps span."""
    spans = []
    for t in range(p.threads):
        mine = [s for s in p.steps if s.thread == t]
        spans.append(max(s.i0 + s.mb for s in mine) - min(s.i0 for s in mine)
                     + max(s.j0 + s.nb for s in mine) - min(s.j0 for s in mine))
    return max(spans)


@pytest.mark.parametrize("shape", [(1000, 10, 100), (3000, 12, 32), (2000, 20, 50)])
def test_a_tall_or_wide_product_splits_along_its_long_side(lib, shape):
    """Threads of a 1000 x 10 x 100 product each read half of A, not all of it.

    Split by columns, its two threads read A twice and ran at 1.3x one thread's
    speed on a 2-core Zen 3, although the predicted loads were 1.6 % lighter than
    the split by rows, which ran at 1.8x."""
    M, N, _ = shape
    # Threads for any size: the library's own threshold may keep these on one.
    params = loader.at_tune_params()
    assert lib.lib.at_params_get(ctypes.byref(params)) == 0
    params.thread_flops = params.thread_seconds = 0.0
    assert lib.lib.at_params_set(ctypes.byref(params)) == 0
    try:
        p = plans.plan(*shape, "f32", threads=2)
    finally:
        lib.lib.at_params_set(None)
    check_plan(p)
    assert p.threads == 2
    long_side, short_side = max(M, N), min(M, N)
    # Each thread spans about half the long side and all of the short one.
    assert _reach(p) <= long_side * 0.6 + short_side, [(s.i0, s.j0, s.thread) for s in p.steps][:20]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_even_blocks_keep_the_block_count(dtype):
    """Blocks of one row or column are as even as the kernel sizes allow, never bigger
    than the cap and never more of them than the cap gives."""
    for n in (256, 257, 500, 1000):
        p = plans.plan(n, n, 300, dtype, threads=1)
        if p.path != "packed":
            continue
        bm, bn, _ = p.blocks
        rows = sorted({s.i0 // bm for s in p.steps})
        cols = sorted({s.j0 // bn for s in p.steps})
        # The last block is the only short one, and not a sliver of the others.
        last_m = n - rows[-1] * bm
        last_n = n - cols[-1] * bn
        assert 0 < last_m <= bm and 0 < last_n <= bn
        # No sliver: before, fp64 256 rows became 120 + 120 + 16.
        assert len(rows) == 1 or 4 * last_m >= bm, (n, bm, last_m)
        assert len(cols) == 1 or 4 * last_n >= bn, (n, bn, last_n)


@pytest.mark.parametrize("layout", ["col", "row"])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn", "tt"])
def test_vector_operands_may_change_kernel_family(layout, trans):
    """1 x N and M x 1 plans stay valid whatever family the free flag picks, and
    the flag is only taken where the operand's stride allows it."""
    for M, N, K in ((1, 256, 256), (256, 1, 256), (1, 1, 300), (1, 37, 5), (33, 1, 70)):
        p = plans.plan(M, N, K, "f32", trans, layout=layout)
        check_plan(p)
        # A padded vector (leading dimension > its length) has a strided flag only.
        lda = (M if trans[0] == "n" else K) if layout == "col" else (K if trans[0] == "n" else M)
        q = plans.plan(M, N, K, "f32", trans, layout=layout, lda=lda + 3)
        check_plan(q)


def test_pack_crossover_matches_the_measured_one():
    """On a Zen 5 geometry (1 MiB L2, 32 MiB L3 per two cores) packing pays from
    between 512^3 and 768^3 in f32 and between 384^3 and 512^3 in f64, as measured
    (autotune/models.py, pack_crossover_flops); 256^3 stays in place."""
    from autotune import models
    geo = models.Geometry(models.Cache(48 << 10, 64, 12), models.Cache(1 << 20, 64, 16),
                          models.Cache(32 << 20, 64, 16, shared_by=2), cores=2, simd_bytes=64)
    side = {dt: (models.pack_crossover_flops(geo, dt) / 2) ** (1 / 3) for dt in ("f32", "f64")}
    assert 512 <= side["f32"] < 768
    assert 384 <= side["f64"] <= 512
    # A host without an L3 falls back to half of its L2.
    small = models.Geometry(geo.l1, geo.l2, models.Cache(0, 64, 16), cores=2, simd_bytes=64)
    assert models.pack_crossover_flops(small, "f32") == pytest.approx(
        2 * ((1 << 19) / 12) ** 1.5)


def test_a_huge_plan_is_summarised_in_bounded_memory(built, tmp_path):
    """100000^3 has ~10^8 kernel calls: counted by the library, listed only in part."""
    code = PEAK_KIB + (
        "import sys, autotune.runtime as rt\n"
        "from autotune import plans\n"
        f"rt.use_library({str(built.library)!r})\n"
        "p = plans.plan(100000, 100000, 100000, max_steps=5000)\n"
        "counts, elements = p.kernel_counts(), p.kernel_elements()\n"
        "assert len(p.steps) == 5000 and p.truncated and sum(counts.values()) == p.step_count > 10**7\n"
        "assert sum(elements.values()) == 100000 * 100000, elements\n"
        "assert 'steps: %d' % p.step_count in plans.explain(p) and 'first 5000 steps' in plans.draw(p)\n"
        "print(peak_kib())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 200 * 1024, done.stdout  # KiB


def test_usage_agrees_with_the_listed_steps():
    for shape in ((64, 64, 64), (300, 200, 100), (13, 1000, 7)):
        p = plans.plan(*shape, "f64", "nt")
        assert not p.truncated
        listed: dict[str, int] = {}
        for s in p.steps:
            listed[s.kernel] = listed.get(s.kernel, 0) + 1
        assert listed == p.kernel_counts()


def test_a_real_plan_covers_c_and_draws():
    from autotune.reports import figures

    p = plans.plan(35, 32, 64, "f32", "nn")
    assert p.predicted_seconds > 0 and p.title == "35x32x64 f32 nn"
    assert p.coverage() == pytest.approx(1.0) and set(p.kernels_by_area()) == set(p.kernel_counts())
    figure = figures.plan_figure(p, figures.kernel_colours(p.kernels_by_area()))
    assert "35x32x64 f32 nn" in figure.axes[0].get_title(loc="left")
