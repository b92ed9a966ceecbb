"""The x86 quantised kernels' test library: qgemm.c with a chosen set of kernels, as the
install's validation links it, and the check of a kernel against the reference."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Iterable

import numpy as np

from autotune import build, host, link, quant, qsuite, toolchain
from autotune.families import x86
from autotune.runtime import qapi
from autotune.specs import QKernelSpec


def validation_library(tmp_path: Path, kernels: list[QKernelSpec], emulate: bool) -> ctypes.CDLL:
    """qgemm.c with ``kernels`` registered in this order (``lib.kernels_object``: their object).

    ``emulate``: the VNNI and tile instructions in exact AVX2 arithmetic, and a registry
    that asks for AVX2 alone, or qgemm.c would not run them on a CPU without those.
    """
    target = toolchain.target_for("avx2", host.detect())
    obj = build.compile_qkernels(target, kernels, tmp_path, emulate_vnni=emulate)
    assert obj.ok, obj.error
    features = x86.QUANT_FEATURES["avx2"] if emulate else None
    lib = ctypes.CDLL(str(link.build_qlibrary(target, kernels, obj.path, tmp_path / "lib" / "libq.so", features)))
    assert qapi.prototypes(lib)
    lib.at_set_num_threads.argtypes, lib.at_set_num_threads.restype = [ctypes.c_int], None
    lib.kernels_object = obj.path
    return lib


def assert_within_bound(lib: ctypes.CDLL, kernel: QKernelSpec,
                        cases: Iterable[tuple[str, np.ndarray, quant.QuantizedWeights]]) -> None:
    """``kernel`` (forced by name) within the scaling bound of reference_qmatmul on every case."""
    for description, A, w in cases:
        C = qapi.call(lib, A, w, None, None, kernel.name)
        bound = quant.scaling_error_bound(A, w).astype(np.float64)
        problem = qsuite._check(C, quant.reference_qmatmul(A, w), bound)
        assert problem is None, f"{kernel.name} at {description}: {problem}"


def assert_same_bits_on_threads(lib: ctypes.CDLL, name_of_kind, block: int, seed: int = 12) -> None:
    """Kernel ``name_of_kind(kind)`` of every weight kind gives one thread's bits on 2 and 3."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((37, 1000)).astype(np.float32)
    for kind, (bits, symmetric) in {"q4s": (4, True), "q4a": (4, False), "q8": (8, True)}.items():
        w = quant.quantize_weights(rng.standard_normal((1000, 333)).astype(np.float32), bits, block, symmetric)
        results = []
        for count in (1, 2, 3):
            lib.at_set_num_threads(count)
            results.append(qapi.call(lib, A, w, None, None, name_of_kind(kind)))
        lib.at_set_num_threads(0)
        assert all(np.array_equal(r, results[0]) for r in results[1:]), kind
