"""Build an aarch64 libautotune from generated kernels and link the test programs.

Used by tests/test_arm_runtime.py and tests/test_cpu_models.py.  The kernels go through the same path as an
install (autotune.build, cached under the given home); the library through
autotune.link.build_arm_runtime; the driver (driver.c, rt_abi.S) and
tests/c/blas_entry.c are cross-built and linked with the library in place of a
BLAS: statically with libautotune.a, or dynamically with libautotune.so.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

from autotune import build, codegen, families, specs
from autotune.families import sme2
from autotune.home import kernels_src
from autotune.link import ArmLibraryBuild, build_arm_runtime, default_params
from autotune.specs import KernelSpec
from autotune.toolchain import Target

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: NEON heights and widths the test library keeps (the quick family has more):
#: enough for every tail of the tiler's covers, few enough to compile fast.
NEON_SIDES = {1, 2, 3, 4, 8}


#: SME2 blocks below whole tiles (predicated kernels) the test library adds to
#: the quick family, which has none: they cover small tails and odd edges.
SME2_PARTIAL = ((1, 1), (3, 5), (8, 8), (13, 40))
#: Hybrid (SME + SVE rows) kernels per dtype and transposition: their packed A
#: panels are padded to whole vectors, a format of its own.
SME2_HYBRIDS = 2


def library_kernels(target: Target) -> list[KernelSpec]:
    """The kernels of a test library: SME2's quick family at every SVL a cross-build
    carries, with partial and hybrid blocks at the target's, or a slice of NEON's
    quick family."""
    svl = target.svl_bits or 512
    family = families.default_family([target.isa], quick=True, svls=families.CROSS_SVLS)
    if target.isa == "neon":
        return [s for s in family if s.mr in NEON_SIDES and s.nr in NEON_SIDES]
    extra = []
    for dtype in ("f32", "f64"):
        for trans in specs.TRANSPOSITIONS:
            ta, tb = specs.parse_trans(trans)
            variant = sme2.VARIANT_OF_TRANS[trans]
            extra += [KernelSpec("sme2", dtype, m, n, ta, tb, variant, sme2.UNROLL, svl) for m, n in SME2_PARTIAL]
            extra += [s for s in sme2.family(dtype, trans, svl) if sme2.is_hybrid(s)][:SME2_HYBRIDS]
    return sorted(set(family) | {s for s in extra if sme2.fits(s)})


def build_sample_library(target: Target, home: Path, kernels: Sequence[KernelSpec] | None = None) -> ArmLibraryBuild:
    chosen = list(kernels if kernels is not None else library_kernels(target))
    sources = [codegen.generate(s) for s in chosen]
    built = build.build_kernels(target, sources, home=home)
    if built.failures:
        raise RuntimeError("kernels failed to compile: " + ", ".join(sorted(built.failures)))
    objects = [(s, built.objects[s.name].path) for s in chosen]
    main = {}
    for dtype in ("f32", "f64"):
        nn = [s for s in chosen if s.dtype == dtype and s.trans == "nn"]
        if nn:
            best = max(nn, key=lambda s: (s.mr * s.nr, s.mr))
            main[dtype] = (best.mr, best.nr)
    params = default_params(None, main, provenance="emulated")
    return build_arm_runtime(target, [(s, {}) for s in chosen], objects, params, {}, home / "lib" / target.isa)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}\n{done.stdout}{done.stderr}")


def _strict(target: Target) -> list[str]:
    return ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", *[f for f in target.base_cflags if f.startswith("-march")]]


def build_driver(target: Target, lib: ArmLibraryBuild, workdir: Path, baseline: bool = False) -> Path:
    """driver.c + rt_abi.S linked statically with libautotune.a.

    ``baseline`` builds the driver for any aarch64 CPU (no SME checks of its
    own), to run the library on CPUs without the target's extensions.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    sme = target.isa == "sme2" and not baseline
    arch = list(target.cflags if sme else target.base_cflags)
    defines = ["-DRT_SME"] if sme else []
    includes = [f"-I{lib.header.parent}", f"-I{kernels_src() / 'runtime'}", f"-I{kernels_src() / 'include'}"]
    exe = workdir / f"driver-{target.isa}{'-baseline' if baseline else ''}"
    _run([*target.cc, *_strict(target), *[f for f in arch if f.startswith("-march")], *defines, *includes,
          str(HERE / "driver.c"), str(HERE / "rt_abi.S"), str(lib.archive), *target.ldflags, "-pthread",
          "-lm", "-o", str(exe)])
    return exe


def build_blas_program(target: Target, lib: ArmLibraryBuild, workdir: Path, static: bool,
                       own_xerbla: bool = False) -> Path:
    """tests/c/blas_entry.c, a program using libautotune as its BLAS."""
    workdir.mkdir(parents=True, exist_ok=True)
    kind = "static" if static else "shared"
    exe = workdir / f"blas_entry-{target.isa}-{kind}{'-own' if own_xerbla else ''}"
    link = [str(lib.archive), *target.ldflags] if static else \
        [f"-L{lib.library.parent}", "-l:libautotune.so", *[f for f in target.ldflags if f != "-static"]]
    _run([*target.cc, *_strict(target), *(["-DOWN_XERBLA"] if own_xerbla else []), f"-I{lib.header.parent}",
          str(ROOT / "tests" / "c" / "blas_entry.c"), *link, "-pthread", "-lm", "-o", str(exe)])
    return exe


def build_sequence_program(target: Target, archive: Path, header_dir: Path, workdir: Path) -> Path:
    """tests/c/sequence.c (a long run of varied BLAS calls, each checked) linked
    statically with an aarch64 ``libautotune.a``, for any aarch64 CPU."""
    workdir.mkdir(parents=True, exist_ok=True)
    exe = workdir / f"sequence-{target.isa}"
    _run([*target.cc, *_strict(target), f"-I{header_dir}", str(ROOT / "tests" / "c" / "sequence.c"),
          str(archive), *target.ldflags,
          "-pthread", "-lm", "-o", str(exe)])
    return exe
