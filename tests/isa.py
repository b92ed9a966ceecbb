"""The host's instruction sets, for tests that need one: pick the best, or skip naming it."""

from __future__ import annotations

import functools

import pytest

from autotune import host, toolchain


@functools.cache
def native_isas() -> tuple[str, ...]:
    """Kernel families this host runs natively, fastest first (generic always last)."""
    return toolchain.native_isas(host.detect())


def best_simd_isa() -> str:
    """The fastest native vector family (avx512, avx2, neon or sme2), else generic."""
    return native_isas()[0]


def requires_isa(isa: str) -> pytest.MarkDecorator:
    """Skip a test on hosts that cannot run ``isa`` kernels, saying which ISA is missing."""
    return pytest.mark.skipif(isa not in native_isas(), reason=f"needs {isa} kernels, which this host cannot run")


def cpu_features() -> set[str]:
    """What the CPU itself has: the runtime (qgemm.c, cpu.c) asks it, and AUTOTUNE_ISA,
    which caps what install builds, does not change its answer."""
    return set(host.detect_cpu().features)
