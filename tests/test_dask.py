"""Many small products spread over a Dask cluster, autotune inside each task (docs/scaling.md)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="dask is not installed (pip install 'autotune[dask]')")
distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install 'dask[distributed]')")

import autotune  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _worker_state() -> tuple[bool, int]:
    import autotune.runtime as wrt

    runtime = wrt.api.current()
    return runtime is not None and runtime.fast is not None, wrt.get_num_threads()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_stacked_products_on_a_local_cluster_match_numpy(built):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4000, 12, 16))
    B = rng.standard_normal((4000, 16, 10)).astype(np.float32)  # promoted to float64, as numpy
    dA = da.from_array(A, chunks=(500, 12, 16))
    dB = da.from_array(B, chunks=(500, 16, 10))
    product = da.map_blocks(autotune.matmul, dA, dB, dtype=np.result_type(A, B),
                            chunks=(dA.chunks[0], (12,), (10,)))
    # Each worker process loads the session's library and runs one thread.
    env = {"AUTOTUNE_LIBRARY": str(built.library), "AUTOTUNE_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, env=env) as cluster, \
            distributed.Client(cluster) as client:
        got = product.compute()
        states = client.run(_worker_state)
    assert len(states) == 2 and all(s == (True, 1) for s in states.values()), states
    want = np.matmul(A, B.astype(np.float64))
    bound = np.matmul(np.abs(A), np.abs(B.astype(np.float64)))
    assert got.dtype == np.float64 and got.shape == want.shape
    assert np.all(np.abs(got - want) <= 2 * (16 + 2) * np.finfo(np.float64).eps * bound)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_autotune_bench_dask_runs_the_throughput_benchmark(built, tmp_path):
    """`autotune bench dask` reaches benchmarks/dask_graph.py: both graphs run on the
    cluster, every worker has the library, and the two sums agree."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "AUTOTUNE_LIBRARY": str(built.library), "AUTOTUNE_HOME": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "autotune", "bench", "dask", "--batch", "3000", "--shape", "8", "12",
                           "6", "--chunk-mb", "0.1", "--repeats", "1"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["batch"] == 3000 and result["shape"] == [8, 12, 6] and result["workers"] == 2
    assert result["library_on_every_worker"] and result["agree"], result
    assert result["autotune_s"] > 0 and result["numpy_s"] > 0
