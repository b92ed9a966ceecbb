"""A library without measurements: generated kernels ranked by the analytic model.

What the runtime tests run against instead of a tuned table: the same runtime
and kernels, provenance ``model``, so the tiler ranks kernels with its analytic
model and no timing is involved.  Kernels come from the real
generators (:mod:`autotune.codegen`) and the content-hashed build cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from autotune import build, codegen, host as host_mod, toolchain
from autotune.families import default_family
from autotune.specs import KernelSpec
from autotune.link import LibraryBuild, build_runtime, default_params, emit_kernel_table_c

#: The peak per core of the analytic model when none was measured (GFLOPS f32, f64).
MODEL_PEAK = {"avx512": (152.4, 76.2), "avx2": (85.8, 42.9), "generic": (16.0, 8.0)}


def small_selection(specs: Iterable[KernelSpec]) -> list[KernelSpec]:
    """A slice of a family that keeps tests fast yet exercises the tiler: per
    dtype and transposition the biggest block, a few 1..4 tails, one vector-high
    narrow kernel, and the gaps the portable edge code must fill."""
    groups: dict[tuple[str, str], list[KernelSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.dtype, spec.trans), []).append(spec)
    keep: list[KernelSpec] = []
    for group in groups.values():
        biggest = max(group, key=lambda s: (s.mr * s.nr, s.mr))
        tails = [s for s in group if (s.mr, s.nr) in {(1, 1), (2, 1), (1, 2), (4, 4), (3, 3)}]
        narrow = [s for s in group if s.mr >= 8 and s.nr in (1, 2) and s.mr != biggest.mr]
        keep += sorted({biggest, *tails, *narrow[:2]})
    return sorted(keep)


def build_untuned(
    home: Path,
    isa: str | None = None,
    select: Callable[[list[KernelSpec]], list[KernelSpec]] | None = None,
    dtypes: Iterable[str] = ("f32", "f64"),
) -> LibraryBuild:
    """Generate, compile and link a model-provenance library under ``home/lib/<isa>-model``.

    ``isa`` defaults to the fastest native one; ``select`` picks from the quick family.
    Raises :class:`autotune.link.LibraryError` or ToolchainError on failure.
    """
    info = host_mod.detect()
    isa = isa or toolchain.native_isas(info)[0]
    target = toolchain.target_for(isa, info)
    specs = default_family([isa], tuple(dtypes), quick=True)
    if select is not None:
        specs = select(specs)
    sources = [codegen.generate(s) for s in specs]
    result = build.build_kernels(target, sources, jobs=2, home=home)
    objects = [(obj.spec or KernelSpec.from_name(name), obj.path) for name, obj in result.objects.items()
               if obj.path is not None]
    main: dict[str, tuple[int, int]] = {}
    for spec, _ in objects:
        best = main.get(spec.dtype)
        if spec.trans == "nt" and (best is None or spec.mr * spec.nr > best[0] * best[1]):
            main[spec.dtype] = (spec.mr, spec.nr)
    params = default_params(info, main, provenance="model")
    f32, f64 = MODEL_PEAK.get(isa, MODEL_PEAK["generic"])
    table = emit_kernel_table_c([(spec, {}) for spec, _ in objects], params, {"f32": f32, "f64": f64})
    return build_runtime(target, objects, table, Path(home) / "lib" / f"{isa}-model")
