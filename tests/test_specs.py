"""The x86 register-budget model (autotune.families.x86) and the kernel families it admits."""

from __future__ import annotations

import math

import pytest

from autotune.families import default_family
from autotune.families.x86 import (
    MAX_SIDE,
    REGISTER_FILES,
    SUPPORTED_ISAS,
    family,
    fits,
    register_budget,
    register_file,
    registers_needed,
    strategy,
)
from autotune.specs import DTYPES, NAME_PATTERN, TRANSPOSITIONS, KernelSpec

FAMILIES = [(isa, dtype, trans) for isa in SUPPORTED_ISAS for dtype in DTYPES for trans in TRANSPOSITIONS]


@pytest.mark.parametrize("isa,dtype,trans", FAMILIES)
def test_every_kernel_fits_its_register_file(isa, dtype, trans):
    specs = family(isa, dtype, trans)
    assert specs, "every supported ISA has a family for every dtype and transposition"
    count = register_file(isa).count
    for spec in specs:
        assert fits(spec)
        assert registers_needed(spec) <= count, spec.name
        assert (spec.isa, spec.dtype, spec.trans) == (isa, dtype, trans)


@pytest.mark.parametrize("isa,dtype,trans", FAMILIES)
def test_family_is_sorted_unique_and_names_round_trip(isa, dtype, trans):
    specs = family(isa, dtype, trans)
    assert specs == sorted(specs)
    assert len({s.name for s in specs}) == len(specs)
    for spec in specs:
        assert NAME_PATTERN.match(spec.name), spec.name
        assert KernelSpec.from_name(spec.name) == spec


@pytest.mark.parametrize("isa,dtype,trans", FAMILIES)
def test_family_is_everything_the_model_admits(isa, dtype, trans):
    """Growing a block's broadcast side (or any side of dot/scalar blocks) by one
    either gives another member or breaks the budget or the side cap."""
    specs = family(isa, dtype, trans)
    shapes = {(s.mr, s.nr) for s in specs}
    for s in specs:
        kind = strategy(s)
        grow = {"bcast_b": [(0, 1)], "bcast_a": [(1, 0)]}.get(kind, [(0, 1), (1, 0)])
        for dm, dn in grow:
            m, n = s.mr + dm, s.nr + dn
            if (m, n) in shapes:
                continue
            bigger = KernelSpec(s.isa, s.dtype, m, n, s.trans_a, s.trans_b, "", s.unroll)
            assert not fits(bigger) or max(m, n) > MAX_SIDE and (m > MAX_SIDE if dm else n > MAX_SIDE), s.name


def test_budget_counts_accumulators_and_operands():
    # 16x6 fp32 NN on AVX-512: one vector along M, 6 accumulators, two sets to
    # reach 8 FMA chains, double-buffered A column and broadcast.
    b = register_budget(KernelSpec("avx512", "f32", 16, 6, unroll=4))
    assert (b.accumulators, b.a, b.b, b.sets) == (6, 2, 2, 2)
    assert b.total == 16
    # 48x8: three vectors along M, 24 accumulators: the largest such block.
    b = register_budget(KernelSpec("avx512", "f32", 48, 8, unroll=4))
    assert (b.accumulators, b.a, b.b, b.sets, b.total) == (24, 6, 2, 1, 32)
    assert not fits(KernelSpec("avx512", "f32", 48, 9, unroll=4))
    # TT mirrors NN; TN counts one register per C element.
    tt = register_budget(KernelSpec("avx512", "f32", 8, 48, True, True, unroll=4))
    assert (tt.accumulators, tt.a, tt.b) == (24, 2, 6)
    tn = register_budget(KernelSpec("avx512", "f64", 4, 6, True, False, unroll=2))
    assert (tn.accumulators, tn.a, tn.b) == (24, 4, 2)
    # AVX2 has half the registers and half the lanes.
    assert fits(KernelSpec("avx2", "f32", 8, 12, unroll=4))
    assert not fits(KernelSpec("avx2", "f32", 16, 7, unroll=4))
    # No model, no fit: unknown ISAs and packed variants are not families here.
    assert not fits(KernelSpec("neon", "f32", 8, 4))
    assert not fits(KernelSpec("avx512", "f32", 16, 6, variant="p16"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", TRANSPOSITIONS)
def test_avx512_has_dozens_of_kernels(dtype, trans):
    assert len(family("avx512", dtype, trans)) >= 48


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_tails_cover_every_size_up_to_the_vector(isa, dtype):
    w = register_file(isa).lanes(dtype)
    nn = {s.mr for s in family(isa, dtype, "nn")}
    nt = {s.mr for s in family(isa, dtype, "nt")}
    tt = {s.nr for s in family(isa, dtype, "tt")}
    for sizes in (nn, nt, tt):
        assert set(range(1, w + 1)) <= sizes
    # Whole vectors and half-vector steps beyond one vector, as far as the budget allows.
    assert {w, 2 * w, 3 * w} <= nn
    assert 3 * w // 2 in nn


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_column_blocks_read_a_gemvs_whole_column(isa, dtype):
    """Up to 16 vectors of one column (NN, NT) or one row (TT): in one column each
    vector meets one FMA from memory, so only one buffer counts against the registers."""
    rf = register_file(isa)
    w = rf.lanes(dtype)
    # Sums, one buffered vector of op(A) and a buffered broadcast: 16 on AVX-512, 12 on AVX2.
    vectors = [k for k in (6, 8, 12, 16) if k + 2 * rf.buffers <= rf.count]
    assert vectors[-1] == (16 if isa == "avx512" else 12)
    for trans, side in (("nn", 0), ("nt", 0), ("tt", 1)):
        long_side = {(s.mr, s.nr)[side] for s in family(isa, dtype, trans) if (s.mr, s.nr)[1 - side] == 1}
        assert {k * w for k in vectors} <= long_side, (trans, sorted(long_side))
    one_column = register_budget(KernelSpec(isa, dtype, vectors[-1] * w, 1, unroll=1))
    assert (one_column.accumulators, one_column.a) == (vectors[-1], rf.buffers)
    # Two columns load each vector once for two FMAs: it is held, and that many do not fit.
    assert not fits(KernelSpec(isa, dtype, vectors[-1] * w, 2, unroll=1))


def test_avx512_fp32_nn_offers_the_fast_blocks():
    shapes = {(s.mr, s.nr) for s in family("avx512", "f32", "nn")}
    for mr, nr in [(16, 6), (16, 12), (32, 6), (32, 12), (48, 6), (48, 8)]:
        assert (mr, nr) in shapes


def test_unroll_is_a_parameter_and_defaults_to_the_model():
    assert {s.unroll for s in family("avx512", "f32", "nn", unroll=3)} == {3}
    defaults = {s.unroll for s in family("avx512", "f32", "nn")}
    assert defaults == {1, 8}
    # Small blocks unroll deeper: they need the extra accumulator sets; blocks
    # with enough chains in one set are not unrolled at all.
    for s in family("avx512", "f32", "nn"):
        assert (s.unroll == 1) == (register_budget(s).sets == 1 and s.mr * s.nr >= 8), s
    small = [s for s in family("avx512", "f32", "nn") if s.mr <= 16 and s.nr == 1]
    assert all(register_budget(s).sets > 1 for s in small)
    # A dot kernel's K step is a vector deep: it unrolls half as much.
    assert {s.unroll for s in family("avx512", "f32", "tn")} <= {2, 4}


@pytest.mark.parametrize("isa", SUPPORTED_ISAS)
def test_quick_is_a_useful_subset(isa):
    full = default_family([isa])
    quick = default_family([isa], quick=True)
    assert set(quick) < set(full)
    assert quick == sorted(quick)
    for dtype in DTYPES:
        for trans in TRANSPOSITIONS:
            q = {(s.mr, s.nr) for s in quick if s.dtype == dtype and s.trans == trans}
            f = {(s.mr, s.nr) for s in full if s.dtype == dtype and s.trans == trans}
            # The small tails a tiler needs are all there.
            assert {(m, n) for m in range(1, 5) for n in range(1, 5)} & f <= q
            # And the largest blocks.
            biggest = max(m * n for m, n in f)
            assert any(m * n == biggest for m, n in q)


def test_quick_avx512_is_a_tenth_to_a_fifth():
    ratio = len(default_family(["avx512"], quick=True)) / len(default_family(["avx512"]))
    assert 0.08 <= ratio <= 0.22


def test_quick_keeps_whole_vector_blocks():
    quick = default_family(["avx512"], dtypes=["f32"], transes=["nn"], quick=True)
    mrs = {s.mr for s in quick}
    assert {1, 2, 3, 4, 16, 32, 48, 64} <= mrs


def test_default_family_skips_isas_without_a_model_and_keeps_order():
    assert default_family(["nosuchisa"]) == []
    both = default_family(["avx2", "avx512"], dtypes=["f64"], transes=["NT"])
    assert both == sorted(both)
    assert {s.isa for s in both} == {"avx2", "avx512"}
    assert {s.trans for s in both} == {"nt"}


def test_register_files():
    assert REGISTER_FILES["avx512"].count == 32 and REGISTER_FILES["avx512"].lanes("f32") == 16
    assert REGISTER_FILES["avx512"].lanes("f64") == 8
    assert REGISTER_FILES["avx2"].count == 16 and REGISTER_FILES["avx2"].lanes("f64") == 4
    assert REGISTER_FILES["generic"].lanes("f32") == 1
    with pytest.raises(ValueError):
        family("neon", "f32", "nn")
    with pytest.raises(ValueError):
        family("avx512", "f16", "nn")
    with pytest.raises(ValueError):
        family("avx512", "f32", "xn")


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_strategies_follow_contiguity(isa):
    assert strategy(KernelSpec(isa, "f32", 8, 4)) == "bcast_b"
    assert strategy(KernelSpec(isa, "f32", 8, 4, False, True)) == "bcast_b"
    assert strategy(KernelSpec(isa, "f32", 4, 8, True, True)) == "bcast_a"
    assert strategy(KernelSpec(isa, "f32", 4, 4, True, False)) == "dot"
    assert strategy(KernelSpec("generic", "f32", 4, 2, True, False)) == "scalar"
    assert math.isfinite(registers_needed(KernelSpec(isa, "f64", 1, 1)))
