"""The quantised formats and their reference product (autotune.quant).

Every quantised kernel is checked against reference_qmatmul, so the reference is
checked here against an independent evaluation of the same arithmetic in float64,
and the formats against the weights they stand for.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.quant import (
    QuantizationError,
    QuantizedWeights,
    quantization_error_bound,
    quantize_activations,
    quantize_weights,
    reference_qmatmul,
    scaling_error_bound,
)

#: (bits, symmetric): every weight format.
FORMATS = [(4, True), (4, False), (8, True)]
FORMAT_IDS = ["q4-sym", "q4-asym", "q8"]
#: K around the block edges, 1, primes; N from one column up.
SHAPES = [(1, 1, 1), (1, 32, 1), (3, 31, 5), (2, 33, 7), (5, 64, 3), (7, 97, 13), (1, 128, 16), (4, 200, 1)]


def weights_error(w: QuantizedWeights, W: np.ndarray) -> np.ndarray:
    return np.abs(w.dequantize().astype(np.float64) - W)


def scale_of_each_weight(w: QuantizedWeights) -> np.ndarray:
    return np.repeat(w.block_scales(), w.block, axis=1)[:, :w.k].T.astype(np.float64)


def within(C: np.ndarray, expected: np.ndarray, bound: np.ndarray) -> bool:
    """|C - expected| <= bound, where an infinite bound (terms beyond float32) allows anything."""
    with np.errstate(invalid="ignore"):
        return bool(np.where(np.isinf(bound), True, np.abs(C - expected) <= bound).all())


def independent_product(A: np.ndarray, w: QuantizedWeights) -> np.ndarray:
    """The quantised product in float64, block by block, from the codes alone."""
    qa, sa = quantize_activations(A, w.block, w.padded_k)
    qw, sw = w.signed_codes().astype(np.float64), w.block_scales().astype(np.float64)
    out = np.zeros((A.shape[0], w.n))
    b = w.block
    for j in range(w.blocks):
        part = slice(j * b, (j + 1) * b)
        out += (qa[:, part].astype(np.float64) @ qw[:, part].T) * (sa[:, j, None].astype(np.float64) * sw[None, :, j])
    return out


@pytest.mark.parametrize("bits, symmetric", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_each_weight_is_within_half_a_scale(m, k, n, bits, symmetric):
    W = np.random.default_rng(k * 7 + n).standard_normal((k, n))
    w = quantize_weights(W, bits=bits, symmetric=symmetric)
    assert w.shape == (k, n) and w.padded_k % 32 == 0 and w.padded_k >= k
    assert (weights_error(w, W) <= scale_of_each_weight(w) * (0.5 + 1e-6)).all()


@pytest.mark.parametrize("bits, symmetric", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_reference_is_the_quantised_arithmetic(m, k, n, bits, symmetric):
    rng = np.random.default_rng(m * 101 + k)
    A, W = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n))
    w = quantize_weights(W, bits=bits, symmetric=symmetric)
    C = reference_qmatmul(A, w)
    assert C.dtype == np.float32 and C.shape == (m, n)
    assert within(C, independent_product(A, w), scaling_error_bound(A, w))
    # ... and the quantised product is near the float one, within the stated bound,
    # which is itself a fraction of the product's magnitude (half a step of 15 or
    # of 254 on each operand, relative to typical normal values).
    exact = A.astype(np.float64) @ W
    bound = quantization_error_bound(A, w)
    assert (np.abs(C - exact) <= bound).all()
    magnitude = np.abs(A.astype(np.float64)) @ np.abs(W)
    assert (bound <= (0.5 if bits == 4 else 0.05) * magnitude).all()


def test_asymmetric_weights_fit_a_shifted_range_better():
    W = np.random.default_rng(1).uniform(0.5, 1.0, (64, 8))  # all positive: half of a symmetric range unused
    symmetric = weights_error(quantize_weights(W, symmetric=True), W).max()
    asymmetric = weights_error(quantize_weights(W, symmetric=False), W).max()
    assert asymmetric < symmetric


def test_zero_blocks_are_exact_zeros():
    W = np.zeros((64, 3))
    W[32:, 1] = np.linspace(-1, 1, 32)
    for bits, symmetric in FORMATS:
        w = quantize_weights(W, bits=bits, symmetric=symmetric)
        assert (w.dequantize()[:, [0, 2]] == 0).all()
        assert (w.dequantize()[:32, 1] == 0).all()
    A = np.zeros((2, 64), np.float32)
    codes, scales = quantize_activations(A)
    assert (codes == 0).all() and (scales == 0).all()
    assert (reference_qmatmul(A, quantize_weights(W)) == 0).all()


@pytest.mark.parametrize("magnitude", [1e-40, 1e-30, 1.0, 1e30, 3e38], ids=["subnormal", "tiny", "one", "huge", "near-max"])
@pytest.mark.parametrize("bits, symmetric", FORMATS, ids=FORMAT_IDS)
def test_adversarial_scales_keep_reference_and_codes_agreeing(magnitude, bits, symmetric):
    rng = np.random.default_rng(3)
    W = rng.uniform(-1, 1, (40, 5)) * magnitude
    A = rng.uniform(-1, 1, (3, 40)).astype(np.float32)
    w = quantize_weights(W, bits=bits, symmetric=symmetric)
    assert np.isfinite(w.scales).all()
    C = reference_qmatmul(A, w)
    assert within(C, independent_product(A, w), scaling_error_bound(A, w))
    if magnitude <= 1e30 and magnitude >= 1e-30:  # scales in float32's normal range: the bound holds
        assert (np.abs(C - A.astype(np.float64) @ W) <= quantization_error_bound(A, w)).all()


def test_float16_scales_refuse_what_they_cannot_hold():
    W = np.random.default_rng(4).standard_normal((32, 4))
    w = quantize_weights(W, scale_dtype=np.float16)
    assert w.scales.dtype == np.float16
    assert (weights_error(w, W) <= scale_of_each_weight(w) * (0.5 + 1e-3)).all()
    with pytest.raises(QuantizationError, match="float32"):
        quantize_weights(W * 1e6, scale_dtype=np.float16)


def test_non_finite_activations_make_their_row_nan():
    rng = np.random.default_rng(5)
    W = rng.standard_normal((70, 6))
    w = quantize_weights(W)
    A = rng.standard_normal((4, 70)).astype(np.float32)
    A[1, 3], A[2, 69] = np.nan, np.inf
    C = reference_qmatmul(A, w)
    assert np.isnan(C[1]).all() and np.isnan(C[2]).all()
    assert np.isfinite(C[[0, 3]]).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused(bad):
    W = np.ones((32, 2))
    W[5, 1] = bad
    with pytest.raises(QuantizationError, match="NaN or Inf"):
        quantize_weights(W)


def test_bias_and_clamp_follow_the_product():
    rng = np.random.default_rng(6)
    A, W = rng.standard_normal((5, 48)).astype(np.float32), rng.standard_normal((48, 7))
    w = quantize_weights(W, bits=8)
    bias = rng.standard_normal(7).astype(np.float32)
    plain = reference_qmatmul(A, w)
    assert np.array_equal(reference_qmatmul(A, w, bias=bias), plain + bias)
    clamped = reference_qmatmul(A, w, bias=bias, clamp=(-0.5, 0.75))
    assert np.array_equal(clamped, np.clip(plain + bias, -0.5, 0.75))
    with pytest.raises(QuantizationError, match="bias"):
        reference_qmatmul(A, w, bias=bias[:3])
    with pytest.raises(QuantizationError, match="clamp"):
        reference_qmatmul(A, w, clamp=(1.0, -1.0))


@pytest.mark.parametrize("kwargs, message", [
    ({"bits": 3}, "bits"), ({"block": 33}, "block"), ({"block": 16}, "block"), ({"block": 8192}, "block"),
    ({"bits": 8, "symmetric": False}, "symmetric"), ({"scale_dtype": np.float64}, "scale_dtype"),
])
def test_bad_parameters_are_named(kwargs, message):
    with pytest.raises(QuantizationError, match=message):
        quantize_weights(np.ones((32, 2)), **kwargs)


def test_bad_operands_are_named():
    w = quantize_weights(np.ones((40, 3)))
    with pytest.raises(QuantizationError, match="K=41"):
        reference_qmatmul(np.ones((2, 41), np.float32), w)
    with pytest.raises(QuantizationError, match="2-D"):
        quantize_weights(np.ones(32))
    with pytest.raises(QuantizationError, match="at least one"):
        quantize_weights(np.ones((0, 4)))
    with pytest.raises(QuantizationError, match="real numbers"):
        quantize_weights(np.ones((32, 2), complex))


@pytest.mark.parametrize("bits, symmetric", FORMATS, ids=FORMAT_IDS)
def test_saved_weights_load_back_equal(tmp_path, bits, symmetric):
    w = quantize_weights(np.random.default_rng(7).standard_normal((77, 9)), bits=bits, symmetric=symmetric)
    path = w.save(tmp_path / "weights")
    assert path.name == "weights.npz" and [p.name for p in tmp_path.iterdir()] == ["weights.npz"]
    back = QuantizedWeights.load(path)
    assert (back.k, back.bits, back.block, back.symmetric) == (w.k, w.bits, w.block, w.symmetric)
    assert np.array_equal(back.dequantize(), w.dequantize())
    assert np.array_equal(back.codes, w.codes) and np.array_equal(back.scales, w.scales)


@pytest.mark.parametrize("bits, symmetric", FORMATS, ids=FORMAT_IDS)
def test_packed_arrays_start_on_a_cache_line_also_when_loaded(tmp_path, bits, symmetric):
    """The kernels' 32-byte loads of codes and scales must not straddle two lines (numpy
    promises 16-byte alignment, and np.load places arrays where it likes)."""
    w = quantize_weights(np.random.default_rng(8).standard_normal((300, 70)), bits=bits, symmetric=symmetric)
    for weights in (w, QuantizedWeights.load(w.save(tmp_path / "w"))):
        packed = weights.packed
        arrays = [packed.codes, packed.scales] + ([] if packed.zeros is None else [packed.zeros])
        assert all(a.ctypes.data % 64 == 0 and a.flags.c_contiguous for a in arrays)


@pytest.mark.parametrize("bits, symmetric", FORMATS, ids=FORMAT_IDS)
def test_weights_are_immutable_once_packed(tmp_path, bits, symmetric):
    """qmatmul reads the packed copy made at quantisation: an array changed after it
    would make qmatmul, reference_qmatmul and save disagree (issue 26), so every
    array of the weights is read-only, also after load, and a record made from the
    caller's own arrays does not follow later changes to them."""
    W = np.random.default_rng(9).standard_normal((70, 6))
    w = quantize_weights(W, bits=bits, symmetric=symmetric)
    for weights in (w, QuantizedWeights.load(w.save(tmp_path / "w"))):
        packed = weights.packed
        for array in (weights.codes, weights.scales, weights.zero_points, packed.codes, packed.scales,
                      packed.zeros):
            if array is not None:
                assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            weights.scales[...] *= 2
        with pytest.raises(ValueError, match="read-only"):
            weights.codes[0, 0] = 1
    scales = np.array(w.scales)  # the caller's writeable copy
    mine = QuantizedWeights(np.array(w.codes), scales, w.zero_points, w.k, w.bits, w.block)
    before = mine.dequantize()
    scales *= 2
    assert np.array_equal(mine.dequantize(), before)
    assert scales.flags.writeable  # the caller's array is left as it was


def test_damaged_arrays_are_refused():
    w = quantize_weights(np.random.default_rng(8).standard_normal((64, 4)), symmetric=False)
    arrays = w.arrays()
    with pytest.raises(QuantizationError, match="no 'codes'"):
        QuantizedWeights.from_arrays({k: v for k, v in arrays.items() if k != "codes"})
    with pytest.raises(QuantizationError, match="format"):
        QuantizedWeights.from_arrays({**arrays, "format_version": np.int64(99)})
    with pytest.raises(QuantizationError, match="shape"):
        QuantizedWeights.from_arrays({**arrays, "codes": arrays["codes"][:, :-1]})
    with pytest.raises(QuantizationError, match="zero points"):
        QuantizedWeights.from_arrays({**arrays, "zero_points": arrays["zero_points"] + 16})
    with pytest.raises(QuantizationError, match="finite"):
        QuantizedWeights.from_arrays({**arrays, "scales": -arrays["scales"]})


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 130), n=st.integers(1, 9), bits_sym=st.sampled_from(FORMATS),
       scale=st.floats(1e-6, 1e6), seed=st.integers(0, 2**16))
def test_quantisation_round_trip_holds_for_any_shape(k, n, bits_sym, scale, seed):
    bits, symmetric = bits_sym
    W = np.random.default_rng(seed).standard_normal((k, n)) * scale
    w = quantize_weights(W, bits=bits, symmetric=symmetric)
    assert (weights_error(w, W) <= scale_of_each_weight(w) * (0.5 + 1e-6)).all()
    A = np.random.default_rng(seed + 1).standard_normal((2, k)).astype(np.float32)
    assert within(reference_qmatmul(A, w), independent_product(A, w), scaling_error_bound(A, w))
