"""The Python-level comparison, run in its own process (``python -m benchmarks.pylevel``).

It is a separate process because ``import autotune`` binds ``autotune.gemm`` to the
library of the ``AUTOTUNE_HOME`` it sees at import, and because numpy's OpenBLAS
reads ``OPENBLAS_NUM_THREADS`` only when it loads.  Prints one JSON document:
``{"fast": bool, "rows": [{"case", "library", "dtype", "n", "batch", "best_s", "median_s", "ok"}]}``.
``--library`` times one library's statements only: threaded runs of autotune and
numpy go in separate processes, since a pool that spins after its call (OpenBLAS's)
steals a core from the next library's call.

Statements are timed with :mod:`timeit` (compiled loops, no lambda between the clock
and the call), iterations calibrated to ``--min-time`` per repeat.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from typing import Any

import numpy as np

# case -> (library, statement): each autotune statement is compared with the numpy
# statement of the same case, which does the same allocation work.
CASES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "alloc": (("autotune", "gemm(A, B)"), ("numpy", "A @ B")),
    "out": (("autotune", "gemm(A, B, C)"), ("numpy", "matmul(A, B, out=C)")),
    "matmul": (("autotune", "at_matmul(A, B)"), ("numpy", "matmul(A, B)")),
}
LIBRARIES = ("autotune", "numpy")
BATCH_CASE = (("autotune", "gemm_batch(A, B, C)"), ("numpy", "matmul(A, B, out=C)"))


def time_statement(stmt: str, namespace: dict[str, Any], min_time: float, repeats: int) -> tuple[float, float]:
    """(best, median) seconds per execution of ``stmt``."""
    timer = timeit.Timer(stmt, globals=namespace)
    number = 1
    while True:  # warm-up doubles as calibration
        elapsed = timer.timeit(number)
        if elapsed >= min_time / 4 or number >= 1 << 24:
            break
        number *= 2
    number = max(1, int(number * min_time / max(elapsed, 1e-9)))
    samples = sorted(t / number for t in timer.repeat(repeat=repeats, number=number))
    return samples[0], samples[len(samples) // 2]


def _operands(shape: tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(dtype)


def measure(sizes: list[int], batch: int, min_time: float, repeats: int,
            dtypes: tuple[str, ...] = ("f32", "f64"), libraries: tuple[str, ...] = LIBRARIES) -> dict[str, Any]:
    # The names a user takes from the package, timed as such (`from autotune import gemm`).
    from autotune import gemm, gemm_batch, matmul as at_matmul, runtime

    # Each library's results are checked only where it is timed: a numpy-only process
    # never wakes autotune's threads.
    products = {"autotune": (gemm, at_matmul), "numpy": (np.matmul,)}
    rows: list[dict[str, Any]] = []

    def timed(cases: Any, ns: dict[str, Any], ok: dict[str, bool], **row: Any) -> None:
        for case, pair in cases:
            for library, stmt in pair:
                if library in libraries:
                    best, median = time_statement(stmt, ns, min_time, repeats)
                    rows.append({"case": case, "library": library, **row, "best_s": best, "median_s": median,
                                 "ok": ok[library]})

    for dtype_name in dtypes:
        dtype = np.dtype(np.float32 if dtype_name == "f32" else np.float64)
        tol = 1e-4 if dtype_name == "f32" else 1e-11
        for n in sizes:
            A, B = _operands((n, n), dtype, 1), _operands((n, n), dtype, 2)
            reference = A.astype(np.float64) @ B.astype(np.float64)
            ok = {lib: all(np.allclose(f(A, B), reference, rtol=tol, atol=tol * n) for f in products[lib])
                  for lib in libraries}
            ns = {"A": A, "B": B, "C": np.empty((n, n), dtype), "gemm": gemm, "matmul": np.matmul,
                  "at_matmul": at_matmul}
            timed(CASES.items(), ns, ok, dtype=dtype_name, n=n, batch=1)
        A, B = _operands((batch, 8, 8), dtype, 3), _operands((batch, 8, 8), dtype, 4)
        reference = np.matmul(A.astype(np.float64), B.astype(np.float64))
        ok = {lib: bool(np.allclose(gemm_batch(A, B) if lib == "autotune" else np.matmul(A, B), reference,
                                    rtol=tol, atol=tol * 8)) for lib in libraries}
        ns = {"A": A, "B": B, "C": np.empty((batch, 8, 8), dtype), "gemm_batch": gemm_batch, "matmul": np.matmul}
        timed((("batch", BATCH_CASE),), ns, ok, dtype=dtype_name, n=8, batch=batch)
    fast = runtime.gemm is not runtime.numpy_gemm
    return {"fast": fast, "numpy": np.__version__, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pylevel")
    parser.add_argument("--sizes", default="8,16,32")
    parser.add_argument("--batch", type=int, default=10000)
    parser.add_argument("--min-time", type=float, default=0.002)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtypes", default="f32,f64")
    parser.add_argument("--library", action="append", choices=LIBRARIES,
                        help="time only this library's statements (repeatable; default both)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    json.dump(measure(sizes, args.batch, args.min_time, args.repeats,
                      tuple(d for d in args.dtypes.split(",") if d), tuple(args.library or LIBRARIES)),
              sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
