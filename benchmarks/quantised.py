"""`autotune bench --quantised`: qmatmul against its peers, one thread each, in one run.

For each shape (M, K, N) the same W is quantised once to 4 bits (blocks of 32,
symmetric) and every peer multiplies the same f32 A by it:

* **autotune**: :func:`autotune.qmatmul` (A quantised to int8 in C at each call);
* **torch int4**: PyTorch's weight-only int4 matmul,
  ``aten._weight_int4pack_mm_for_cpu`` with f32 activations, fed autotune's own
  codes and scales (zero offsets 0), so it computes with the same weights;
  **torch int4 bf16**: the same with bf16 activations and scales (its fast path);
* **torch int8 dyn**: ``torch.ao.quantization.quantize_dynamic`` of an
  ``nn.Linear`` holding the dequantised W (per-tensor int8 weights, A quantised per call);
* **numpy f32**: ``np.matmul`` on the dequantised f32 W (its BLAS, pinned to one
  thread through threadpoolctl).

``threads`` (default 1) is every peer's thread count: autotune's and numpy's BLAS
through threadpoolctl, PyTorch's through ``torch.set_num_threads``; the issue's
targets are stated for one thread and are judged on one-thread runs only.

Each is timed after a warm-up in ``repeats`` rounds, a repeat looping for at least
``min_time`` seconds.  In a round every peer is timed right after a repeat of autotune,
and the ratio is the median over the rounds of those adjacent pairs' peer time /
autotune time (above 1: autotune is faster).  A shared VM's speed drifts by up to 1.5x
between seconds and minutes: two repeats timed back to back see the same speed, where
each peer's best of its own repeats may come from windows seconds apart (the PyTorch f32
peer alone takes seconds a call).  The times shown are each peer's best repeat.

Every peer's C is checked against the f32 product on the dequantised W within
:func:`autotune.quant.quantization_error_bound` (torch int4, which gets the dequantised
W exactly, within a float tolerance of it), and a wrong one is reported, not timed.  A
missing peer (PyTorch not installed, a shape it refuses) is reported with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: The issue's shapes (M = 1, 16, 64 with K = N = 4096) and odd ones.
SHAPES = ((1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (1, 4000, 1000), (7, 1000, 333), (33, 2048, 1024))
QUICK_SHAPES = ((1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096))
#: Targets of issue 17 on x86, one thread: peer time / autotune time at least this.
TARGETS = {"torch int4": 1.5, "torch int4 bf16": 1.5, "numpy f32": 2.0}
BLOCK = 32


@dataclass(frozen=True)
class Row:
    shape: tuple[int, int, int]
    peer: str
    seconds: float | None
    note: str = ""
    #: Median of peer time / autotune time over the rounds' adjacent pairs (None for autotune).
    ratio: float | None = None


def _one_repeat(fn: Callable[[], object], min_time: float) -> float:
    """Seconds per call of ``fn`` over calls lasting at least ``min_time`` in all."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / calls


def _paired_rounds(fns: Mapping[str, Callable[[], object]], repeats: int, min_time: float,
                   reference: str = "autotune") -> tuple[dict[str, float], dict[str, float]]:
    """Each function's best repeat, and each one's median ratio to ``reference`` in adjacent pairs.

    A round times, for every other function, a repeat of ``reference`` and then one of
    it.  Without ``reference`` among ``fns`` (it failed its check), or with nothing
    else, the rounds time each function once and there are no ratios.
    """
    best = dict.fromkeys(fns, float("inf"))
    ratios: dict[str, list[float]] = {name: [] for name in fns if name != reference}

    def timed(name: str) -> float:
        seconds = _one_repeat(fns[name], min_time)
        best[name] = min(best[name], seconds)
        return seconds

    for _ in range(repeats):
        if reference not in fns or not ratios:
            for name in fns:
                timed(name)
            continue
        for name in ratios:
            ours = timed(reference)
            ratios[name].append(timed(name) / max(ours, 1e-12))
    medians = {name: float(np.median(r)) for name, r in ratios.items() if r}
    return best, medians


def _torch_peers(A: np.ndarray, w, Wd: np.ndarray, threads: int = 1) -> dict[str, Callable[[], np.ndarray] | str]:
    """The PyTorch peers as callables returning C, or the reason one is missing."""
    try:
        import torch
    except ImportError:
        reason = "PyTorch not installed (pip install torch==2.13.0; scripts/setup_bench.sh)"
        return {"torch int4": reason, "torch int8 dyn": reason}
    torch.set_num_threads(threads)
    peers: dict[str, Callable[[], np.ndarray] | str] = {}
    x = torch.from_numpy(A)
    k, n = Wd.shape
    try:
        if w.padded_k != k:
            raise ValueError(f"K={k} is not a multiple of the group size {BLOCK}")
        nibbles = np.empty((w.n, w.padded_k), np.int32)
        nibbles[:, 0::2] = w.codes & 0x0F
        nibbles[:, 1::2] = w.codes >> 4
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(nibbles), 2)
        scales = torch.from_numpy(np.ascontiguousarray(w.block_scales().T))  # [K / group, N]
        scale_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=2).contiguous()
        int4 = torch.ops.aten._weight_int4pack_mm_for_cpu
        peers["torch int4"] = lambda: int4(x, packed, BLOCK, scale_zeros).numpy()
        # Its fast path takes bf16 activations (the f32 one is far slower): timed too, with
        # the conversions, so a user who would switch to bf16 sees that choice as well.
        scale_zeros16 = scale_zeros.to(torch.bfloat16)
        peers["torch int4 bf16"] = lambda: int4(x.to(torch.bfloat16), packed, BLOCK, scale_zeros16).float().numpy()
    except Exception as exc:  # a shape or build it refuses: reported, not fatal
        for name in ("torch int4", "torch int4 bf16"):
            peers.setdefault(name, f"refused: {str(exc).splitlines()[0][:120]}")
    try:
        linear = torch.nn.Linear(k, n, bias=False)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(np.ascontiguousarray(Wd.T)))
        dynamic = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear},
                                                         dtype=torch.qint8)

        def run_dynamic() -> np.ndarray:
            with torch.no_grad():
                return dynamic(x).numpy()

        peers["torch int8 dyn"] = run_dynamic
    except Exception as exc:
        peers["torch int8 dyn"] = f"refused: {str(exc).splitlines()[0][:120]}"
    return peers


def _right(peer: str, C: np.ndarray, A: np.ndarray, w, Wd: np.ndarray) -> str | None:
    """None when C is a right answer for this peer; else what is wrong."""
    from autotune.quant import quantization_error_bound

    exact = A.astype(np.float64) @ Wd.astype(np.float64)
    magnitude = np.abs(A).astype(np.float64) @ np.abs(Wd).astype(np.float64)
    if peer in ("torch int4", "numpy f32"):  # the dequantised W itself: float rounding only
        bound = 8 * np.finfo(np.float32).eps * magnitude + 1e-30
    elif peer == "torch int4 bf16":  # A and the scales rounded to bf16 (8 bits), products and sums too
        bound = 4 * 2.0 ** -8 * magnitude + 1e-30
    elif peer == "torch int8 dyn":  # its own (per-tensor) quantisation: twice ours is generous
        bound = 4 * quantization_error_bound(A, w) + 1e-30
    else:
        bound = quantization_error_bound(A, w)
    bad = np.argwhere(~(np.abs(C.astype(np.float64) - exact) <= bound))
    if len(bad):
        i, j = bad[0]
        return f"wrong: C[{i},{j}] = {C[i, j]:.6g}, f32 product {exact[i, j]:.6g}, bound {bound[i, j]:.3g}"
    return None


def measure(shapes: Sequence[tuple[int, int, int]] = SHAPES, repeats: int = 5, min_time: float = 0.05,
            seed: int = 7, threads: int = 1) -> list[Row]:
    """Time every peer on every shape on ``threads`` threads; rows in shape order, autotune first."""
    import autotune
    import autotune.runtime as rt
    from autotune.runtime import api

    before = rt.get_num_threads()
    rt.set_num_threads(threads)  # also when threadpoolctl is missing or predates its controller API
    try:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(threads)
    except ImportError:  # numpy's BLAS keeps its own thread count: said in its note
        limits = None
    rows: list[Row] = []
    rng = np.random.default_rng(seed)
    library = api.current()
    for m, k, n in shapes:
        A = rng.standard_normal((m, k)).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        w = autotune.quantize_weights(W, bits=4, block=BLOCK)
        Wd = w.dequantize()
        peers: dict[str, Callable[[], np.ndarray] | str] = {"autotune": lambda: autotune.qmatmul(A, w)}
        if library is None:
            peers["autotune"] = f"no libautotune: {api._state.reason}"
        peers.update(_torch_peers(A, w, Wd, threads))
        peers["numpy f32"] = lambda: np.matmul(A, Wd)
        # The first call of each is its warm-up and its check; only right ones are timed.
        problems = {peer: fn if isinstance(fn, str) else _right(peer, fn(), A, w, Wd) for peer, fn in peers.items()}
        best, ratios = _paired_rounds({peer: fn for peer, fn in peers.items() if not problems[peer]}, repeats,
                                      min_time)
        for peer in peers:
            note = "numpy threads not pinned (no threadpoolctl)" if peer == "numpy f32" and limits is None else ""
            rows.append(Row((m, k, n), peer, best.get(peer), problems[peer] or note, ratios.get(peer)))
    if limits is not None:
        limits.restore_original_limits()
    rt.set_num_threads(before)
    return rows


def report(rows: Sequence[Row], threads: int = 1) -> str:
    """A text table: per shape, each peer's time and its ratio to autotune's; then the targets (one thread)."""
    lines = [f"{'M x K x N':>18}  {'peer':<15} {'best ms':>9} {'x autotune':>11}  note   ({threads} thread"
             f"{'s' * (threads > 1)}; x autotune: median of adjacent pairs)"]
    verdicts = []
    for r in rows:
        shape = "x".join(map(str, r.shape))
        ms = f"{r.seconds * 1e3:9.3f}" if r.seconds else f"{'-':>9}"
        ratio = f"{r.ratio:11.2f}" if r.ratio else f"{'':>11}"
        lines.append(f"{shape:>18}  {r.peer:<15} {ms} {ratio}  {r.note}")
        if r.peer in TARGETS and r.ratio:
            met = r.ratio >= TARGETS[r.peer]
            verdicts.append(f"{shape}: {r.ratio:.2f}x {r.peer} (target {TARGETS[r.peer]}x) {'met' if met else 'NOT met'}")
    if threads != 1:
        return "\n".join(lines)
    return "\n".join(lines + ["", "targets (one thread):", *verdicts])


def run(quick: bool = False, shapes: Sequence[tuple[int, int, int]] = (), repeats: int | None = None,
        min_time: float | None = None, threads: Sequence[int] = (1,)) -> int:
    """Measure and print, once per thread count; 1 when a peer computed a wrong answer."""
    wrong = False
    for count in dict.fromkeys(threads):
        rows = measure(shapes or (QUICK_SHAPES if quick else SHAPES), repeats or (3 if quick else 5),
                       min_time if min_time is not None else (0.02 if quick else 0.05), threads=count)
        print(report(rows, count), flush=True)
        wrong = wrong or any(r.note.startswith("wrong") for r in rows)
    return 1 if wrong else 0
