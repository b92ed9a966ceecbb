"""Many small products over a Dask cluster: autotune.matmul against numpy.matmul per chunk.

``autotune bench dask`` (also ``python -m autotune.benchmarks.dask_graph``, or
``python -m benchmarks.dask_graph`` in a source checkout) builds one stacked array of small products in chunks of about
``--chunk-mb`` MB, runs the same ``da.map_blocks`` graph with each of the two
functions on one ``LocalCluster``, alternating them over the repeats so both see the
same machine, and prints one JSON document with the best times and their ratio
(numpy's time over autotune's: above 1, autotune is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np


def graph(matmul: Callable[..., Any], batch: int, m: int, k: int, n: int, dtype: str,
          chunk_mb: float) -> Any:
    """The product of two random stacks, chunked along the stack to about ``chunk_mb`` MB."""
    import dask.array as da

    item = np.dtype(dtype).itemsize * (m * k + k * n + m * n)
    per_chunk = max(1, int(chunk_mb * 2**20 // item))
    A = da.random.default_rng(0).standard_normal((batch, m, k), chunks=(per_chunk, m, k)).astype(dtype)
    B = da.random.default_rng(1).standard_normal((batch, k, n), chunks=(per_chunk, k, n)).astype(dtype)
    product = da.map_blocks(matmul, A, B, dtype=dtype, chunks=(A.chunks[0], (m,), (n,)))
    # The reduction keeps the products on the workers: the run times the products,
    # not the transfer of the whole result to the client.
    return product.sum(dtype="float64")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of this benchmark, for `autotune bench dask` to share."""
    parser.add_argument("--batch", type=_positive, default=200_000, help="products in the stack (default 200000)")
    parser.add_argument("--shape", type=_positive, nargs=3, default=(16, 16, 16), metavar=("M", "K", "N"),
                        help="each product is (M x K) @ (K x N) (default 16 16 16)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="default float32")
    parser.add_argument("--chunk-mb", type=float, default=100.0, help="chunk size along the stack (default 100)")
    parser.add_argument("--workers", type=_positive, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads-per-worker", type=_positive, default=1, help="default 1")
    parser.add_argument("--repeats", type=_positive, default=3, help="timed runs of each graph (default 3)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return command(parser.parse_args(argv))


def command(args: argparse.Namespace) -> int:
    """Run the benchmark :func:`add_arguments` describes; print its JSON document."""
    try:
        import distributed
    except ImportError:
        print("dask.distributed is not installed: pip install 'autotune[dask]'", file=sys.stderr)
        return 2
    import autotune

    m, k, n = args.shape
    # Each worker's library gets its share of the cores, and numpy's BLAS the same
    # (the nanny already sets OMP/MKL/OPENBLAS_NUM_THREADS=1 per worker thread).
    cores = os.cpu_count() or 1
    per_thread = max(1, cores // (args.workers * args.threads_per_worker))
    env = {"AUTOTUNE_NUM_THREADS": str(per_thread)}
    if os.environ.get("AUTOTUNE_HOME"):
        env["AUTOTUNE_HOME"] = os.environ["AUTOTUNE_HOME"]
    best = {"autotune": float("inf"), "numpy": float("inf")}
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=args.threads_per_worker,
                                  processes=True, dashboard_address=None, env=env) as cluster, \
            distributed.Client(cluster) as client:
        fast = client.run(lambda: __import__("autotune.runtime").runtime.api.current() is not None)
        graphs = {"autotune": graph(autotune.matmul, args.batch, m, k, n, args.dtype, args.chunk_mb),
                  "numpy": graph(np.matmul, args.batch, m, k, n, args.dtype, args.chunk_mb)}
        sums = {}
        for g in graphs.values():  # workers import autotune and load its library once
            g.compute()
        for _ in range(args.repeats):
            for name, g in graphs.items():
                start = time.perf_counter()
                sums[name] = float(g.compute())
                best[name] = min(best[name], time.perf_counter() - start)
    flops = 2.0 * args.batch * m * k * n
    tol = 2 * (k + 2) * np.finfo(args.dtype).eps * flops / 2  # |sum| bounded by the terms' count
    print(json.dumps({
        "batch": args.batch, "shape": [m, k, n], "dtype": args.dtype, "chunk_mb": args.chunk_mb,
        "workers": args.workers, "threads_per_worker": args.threads_per_worker,
        "library_on_every_worker": all(fast.values()),
        "autotune_s": best["autotune"], "numpy_s": best["numpy"],
        "autotune_gflops": flops / best["autotune"] / 1e9, "numpy_gflops": flops / best["numpy"] / 1e9,
        "ratio": best["numpy"] / best["autotune"],
        "agree": bool(abs(sums["autotune"] - sums["numpy"]) <= tol),
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
