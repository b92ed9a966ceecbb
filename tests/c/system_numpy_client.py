"""Run by the system python (/usr/bin/python3) with Debian's numpy, which calls the
system BLAS (libblas.so.3): products checked against float64 within c_K eps, then
libautotune's plan-cache counters when a libautotune is in the process (preloaded:
its symbols are in the global scope), then the numpy used, then "ok" or "wrong"."""

import ctypes
import numpy as np

rng = np.random.default_rng(1)
ok = True
for dtype, eps in ((np.float32, 2.0**-23), (np.float64, 2.0**-52)):
    for M, N, K in ((64, 48, 33), (129, 7, 65), (5, 300, 17)):
        A = rng.standard_normal((M, K)).astype(dtype)
        B = rng.standard_normal((K, N)).astype(dtype)
        A64, B64 = A.astype(np.float64), B.astype(np.float64)
        want, bound = A64 @ B64, 2 * (K + 2) * eps * (np.abs(A64) @ np.abs(B64))
        for got in (np.dot(A, B), A @ B, np.matmul(A, B), (B.T @ A.T).T):
            ok &= bool(np.all(np.abs(got - want) <= bound))
created, hits = ctypes.c_int64(), ctypes.c_int64()
stats = getattr(ctypes.CDLL(None), "at_plan_cache_stats", None)
if stats is not None:
    stats(ctypes.byref(created), ctypes.byref(hits))
print("plans", created.value + hits.value if stats is not None else "none")
print("numpy", np.__file__)
print("ok" if ok else "wrong")
