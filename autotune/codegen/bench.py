"""Compile generated kernels into a throw-away shared library and time them.

This is the generators' own probe (the install measures through the harness):
``python -m autotune.codegen.bench at_sgemm_avx512_nn_16x12_u4 ... [--k 256]``
prints GFLOPS per kernel with operands resident in L1, timed inside C.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..home import kernels_src
from ..specs import DTYPE_CODE, KernelSpec
from ..toolchain import _X86_FLAGS, find_cc
from . import generate

#: At most this many compiler processes at once (the machine is shared).
JOBS = 2

_TIMER = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <time.h>

#include "at_kernel.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Best seconds per call over `repeats` batches of `calls` calls; dtype 0 = f32, 1 = f64. */
double at_time(void *fn, int dtype, int64_t K, const void *A, int64_t lda, const void *B,
               int64_t ldb, void *C, int64_t ldc, int64_t calls, int repeats, double beta)
{
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        double t0 = now();
        if (dtype == 0)
            for (int64_t i = 0; i < calls; ++i)
                ((at_sgemm_fn)fn)(K, A, lda, B, ldb, C, ldc, 1.0f, (float)beta);
        else
            for (int64_t i = 0; i < calls; ++i)
                ((at_dgemm_fn)fn)(K, A, lda, B, ldb, C, ldc, 1.0, beta);
        double t = (now() - t0) / calls;
        if (t < best) best = t;
    }
    return best;
}
"""


@dataclass(frozen=True)
class BuiltLibrary:
    path: Path
    specs: tuple[KernelSpec, ...]

    def load(self) -> ctypes.CDLL:
        return ctypes.CDLL(str(self.path))


def cflags(isa: str) -> tuple[str, ...]:
    """The toolchain's flags for ``isa`` (x86 targets), warnings as errors."""
    return _X86_FLAGS[isa] + ("-Wall", "-Wextra", "-Werror")


def _compile(cc: tuple[str, ...], flags: Iterable[str], src: Path) -> Path:
    obj = src.with_suffix(".o")
    proc = subprocess.run([*cc, *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{src.name} did not compile:\n{proc.stderr}")
    return obj


def build_probe_library(specs: Iterable[KernelSpec], workdir: Path, extra_c: str = "") -> BuiltLibrary:
    """Generate, compile (each ISA with its own flags) and link ``specs`` into one .so."""
    specs = tuple(specs)
    workdir.mkdir(parents=True, exist_ok=True)
    cc = find_cc()
    jobs = []
    for spec in specs:
        source = generate(spec)
        path = workdir / source.filename
        path.write_text(source.text)
        jobs.append((cflags(spec.isa), path))
    if extra_c:
        path = workdir / "at_probe_extra.c"
        path.write_text(extra_c)
        jobs.append(((*cflags("generic"), f"-I{kernels_src() / 'include'}"), path))
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        objects = list(pool.map(lambda job: _compile(cc, *job), jobs))
    lib = workdir / f"libprobe{os.getpid()}_{len(specs)}.so"
    proc = subprocess.run([*cc, "-shared", "-o", str(lib), *map(str, objects)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"link failed:\n{proc.stderr}")
    return BuiltLibrary(lib, specs)


def measure(specs: Iterable[KernelSpec], K: int = 256, workdir: Path | None = None,
            min_seconds: float = 0.05, repeats: int = 5, beta: float = 0.0) -> dict[str, float]:
    """GFLOPS per kernel at depth K, tight leading dimensions, operands in L1.

    Every call updates the same C block.  With beta != 0 each call then loads
    what the previous call has just stored: kernels whose C columns are masked
    measured 2-3x slower at K = 16 than with beta == 0 on this Zen 5 (AVX-512
    TT 6x16: 30 against 146 GFLOPS; unmasked 16x16 showed no such gap), which
    fits a masked load that cannot be forwarded from a masked store in flight.
    A plan moves on to other blocks and does not pay that, hence beta = 0 by
    default.
    """
    import numpy as np

    specs = tuple(specs)
    with tempfile.TemporaryDirectory() as tmp:
        built = build_probe_library(specs, Path(workdir or tmp), extra_c=_TIMER)
        lib = built.load()
        results = {}
        rng = np.random.default_rng(0)
        for spec in specs:
            dtype = np.float32 if spec.dtype == "f32" else np.float64
            a_rows, a_cols = (spec.mr, K) if not spec.trans_a else (K, spec.mr)
            b_rows, b_cols = (K, spec.nr) if not spec.trans_b else (spec.nr, K)
            A = np.asfortranarray(rng.standard_normal((a_rows, a_cols)).astype(dtype))
            B = np.asfortranarray(rng.standard_normal((b_rows, b_cols)).astype(dtype))
            C = np.asfortranarray(np.zeros((spec.mr, spec.nr), dtype))
            timer = lib.at_time
            timer.restype = ctypes.c_double
            fn = ctypes.cast(getattr(lib, spec.name), ctypes.c_void_p)
            args = [fn, DTYPE_CODE[spec.dtype], ctypes.c_int64(K), A.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(a_rows),
                    B.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(b_rows),
                    C.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(spec.mr)]
            timer.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64] + [ctypes.c_void_p, ctypes.c_int64] * 3 + [
                ctypes.c_int64, ctypes.c_int, ctypes.c_double]
            # Size the batch so that one repeat lasts about min_seconds.
            per_call = timer(*args, ctypes.c_int64(100), 1, beta)
            calls = max(100, int(min_seconds / max(per_call, 1e-9)))
            seconds = timer(*args, ctypes.c_int64(calls), repeats, beta)
            results[spec.name] = spec.flops_per_k * K / seconds / 1e9
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="kernel names, e.g. at_sgemm_avx512_nn_16x12_u4")
    parser.add_argument("--k", type=int, default=256, help="depth K (default 256)")
    parser.add_argument("--beta", type=float, default=0.0, help="beta of every call (default 0)")
    args = parser.parse_args(argv)
    specs = [KernelSpec.from_name(name) for name in args.names]
    for name, gflops in measure(specs, K=args.k, beta=args.beta).items():
        print(f"{name:40s} K={args.k:5d} beta={args.beta:g} {gflops:8.1f} GFLOPS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
