"""The runtime among other threads: the GIL, threadpoolctl, concurrent callers, first-call cost."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import autotune.runtime as rt

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def library(built):
    runtime = rt.use_library(built.library)
    assert runtime is not None and runtime.fast is not None
    yield runtime
    rt.set_num_threads(0)


def test_a_large_gemm_releases_the_gil(library):
    """Another Python thread runs while gemm computes (pyfast.c drops the GIL above a FLOP threshold)."""
    rt.set_num_threads(1)  # one core for the gemm, the other for the counter
    A = np.ones((700, 700)); B = np.ones((700, 700))
    rt.gemm(A, B)  # plan and warm up outside the measured call
    span: list[float] = []

    def work():
        span.append(time.perf_counter())
        rt.gemm(A, B)
        span.append(time.perf_counter())

    ticks: list[float] = []
    worker = threading.Thread(target=work)
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    start, end = span
    inside = sum(start < t < end for t in ticks)
    # Holding the GIL, the call would let the counter run at most at its edges.
    assert end - start > 0.01 and inside > 100, (end - start, inside)


def test_threadpoolctl_lists_and_limits_autotune(library):
    threadpoolctl = pytest.importorskip("threadpoolctl", minversion="3.5")
    rt.set_num_threads(2)
    found = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "autotune"]
    mine = [i for i in found if Path(i["filepath"]).resolve() == library.path]
    assert len(mine) == 1, found
    info = mine[0]
    assert info["user_api"] == "blas" and info["num_threads"] == 2
    assert info["version"] == __import__("autotune").__version__
    with threadpoolctl.threadpool_limits(1):
        assert rt.get_num_threads() == 1
    assert rt.get_num_threads() == 2
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert rt.get_num_threads() == 1


def test_threadpoolctl_imported_after_autotune_sees_it(built):
    code = (
        "import autotune.runtime as rt, sys\n"
        f"rt.use_library({str(built.library)!r})\n"
        "assert 'threadpoolctl' not in sys.modules\n"
        "import threadpoolctl\n"
        "print([i['internal_api'] for i in threadpoolctl.threadpool_info()])\n"
    )
    pytest.importorskip("threadpoolctl", minversion="3.5")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "'autotune'" in out.stdout


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_concurrent_callers_do_not_oversubscribe(library):
    """Eight Python threads calling gemm at once: the pool is entered by one caller
    at a time, the others run their shares on their own thread, so the library
    never adds more than its thread count's workers."""
    rt.set_num_threads(2)
    A = np.random.default_rng(0).standard_normal((300, 300))
    want = A @ A
    rt.gemm(A, A)  # start the pool's worker
    before = _os_threads()
    peak = [0]
    errors: list[float] = []

    def caller():
        for _ in range(5):
            errors.append(float(np.abs(rt.gemm(A, A) - want).max()))
            peak[0] = max(peak[0], _os_threads())

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(errors) < 1e-9
    # The only new OS threads are the eight callers themselves.
    assert peak[0] <= before + 8, (before, peak[0])


#: What ``import autotune; autotune.gemm(...)`` must not import (beyond what numpy
#: already did): install-time stages, the CLI's and report's libraries, and the
#: modules whose import cost the first call tens of milliseconds (platformdirs,
#: params' dataclasses, sysconfig).  subprocess: the call path runs no program.
FIRST_CALL_FORBIDDEN = (
    "autotune.host", "autotune.specs", "autotune.toolchain", "autotune.build", "autotune.measure",
    "autotune.tune", "autotune.table", "autotune.families", "autotune.params", "autotune.cli",
    "autotune.reports", "optuna", "pandas", "matplotlib", "scipy", "archspec", "threadpoolctl",
    "platformdirs", "rich", "jinja2", "subprocess", "dataclasses", "sysconfig",
)


@pytest.mark.parametrize("where", ["AUTOTUNE_HOME", "XDG_DATA_HOME"])
def test_first_call_imports_nothing_heavy(built, tmp_path, where):
    """``import autotune`` and a first gemm, matmul and gemm_batch load the installed library
    and nothing of install time, found through $AUTOTUNE_HOME or, without it, the user's
    data directory."""
    from .test_loading import install_copy

    data = tmp_path / "data"
    home = data / "autotune" if where == "XDG_DATA_HOME" else tmp_path / "home"
    library = install_copy(built, home)
    code = (
        "import sys, numpy as np\n"
        "before = set(sys.modules)\n"
        "import autotune\n"
        "autotune.gemm(np.ones((4, 4)), np.ones((4, 4)))\n"
        "autotune.matmul(np.ones((3, 4, 4), np.float32), np.ones((2, 1, 4, 4), np.float32))\n"
        "autotune.gemm_batch(np.ones((3, 4, 4)), np.ones((3, 4, 4)))\n"
        "new = set(sys.modules) - before\n"
        "import autotune.runtime as rt\n"
        "current = rt.api.current()\n"
        "assert current is not None and current.fast is not None\n"
        f"assert str(current.path) == {str(library.resolve())!r}, current.path\n"
        f"forbidden = {FIRST_CALL_FORBIDDEN!r}\n"
        "print(sorted(m for m in new if m in forbidden or m.split('.')[0] in forbidden))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_LIBRARY", "AUTOTUNE_HOME", "XDG_DATA_HOME")}
    # A cap is judged by host.py's tables: without one, host.py is not imported.
    env.pop("AUTOTUNE_ISA", None)
    env.update({"PYTHONPATH": str(ROOT), where: str(home if where == "AUTOTUNE_HOME" else data)})
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity to share one CPU")
def test_the_caller_runs_a_share_its_worker_has_not_started(built):
    """Two threads on one CPU (a worker woken onto its caller's CPU, or a VM whose
    other vCPU is elsewhere): the caller runs the worker's share itself when it gets
    there first (pool.c, region), and the bits are one thread's."""
    code = (
        "import os, ctypes, numpy as np, autotune.runtime as rt\n"
        "os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        f"lib = rt.use_library({str(built.library)!r})\n"
        "rng = np.random.default_rng(3)\n"
        "A = rng.standard_normal((97, 61)); B = rng.standard_normal((61, 83))\n"
        "rt.set_num_threads(1); one = rt.gemm(A, B)\n"
        "from autotune.runtime import loader\n"
        "params = loader.at_tune_params(); lib.lib.at_params_get(ctypes.byref(params))\n"
        "params.thread_flops = 1.0; lib.lib.at_params_set(ctypes.byref(params))\n"
        "rt.set_num_threads(2)\n"
        "regions, taken = ctypes.c_int64(), ctypes.c_int64()\n"
        "for _ in range(200):\n"
        "    assert rt.gemm(A, B).tobytes() == one.tobytes()\n"
        "lib.lib.at_pool_stats(ctypes.byref(regions), ctypes.byref(taken))\n"
        "print(regions.value, taken.value)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    regions, taken = map(int, out.stdout.split())
    # Each call is a two-share region; on one CPU the worker rarely starts first.
    assert regions >= 200 and taken > 0, (regions, taken)
