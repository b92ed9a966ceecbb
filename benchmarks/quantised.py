"""`autotune bench --quantised`: qmatmul against its peers, on one thread or all cores, in one run.

For each shape (M, K, N) the same W is quantised once to 4 bits (blocks of 32,
symmetric) and every peer multiplies the same f32 A by it:

* **autotune**: :func:`autotune.qmatmul` (A quantised to int8 in C at each call);
* **ort MatMulNBits**: ONNX Runtime's ``com.microsoft.MatMulNBits`` (MLAS) in a one-node
  model built with the ``onnx`` package, fed autotune's own codes and scales as constant
  initializers (B [N, blocks, 16] is autotune's [N, K/2] byte for byte, and without a
  zero_points input its 4-bit zero point is 8, autotune's symmetric one), with
  ``accuracy_level=4``: A quantised to int8 per block, as autotune does;
* **torch int4**: PyTorch's weight-only int4 matmul,
  ``aten._weight_int4pack_mm_for_cpu`` with f32 activations, fed autotune's own
  codes and scales (zero offsets 0), so it computes with the same weights;
  **torch int4 bf16**: the same with bf16 activations and scales (its fast path);
* **torch int8 dyn**: ``torch.ao.quantization.quantize_dynamic`` of an
  ``nn.Linear`` holding the dequantised W (per-tensor int8 weights, A quantised per call);
* **numpy f32**: ``np.matmul`` on the dequantised f32 W (its BLAS, pinned through
  threadpoolctl).

``threads`` (default 1; ``--threads all`` is every core this process may use) is every
peer's thread count: autotune's and numpy's BLAS through threadpoolctl, PyTorch's through
``torch.set_num_threads``, ONNX Runtime's as the session's ``intra_op_num_threads`` (one
inter-op thread).  The issues' targets are stated for one thread and are judged on
one-thread runs only.  On more than one thread every repeat starts after a pause of
``SETTLE`` seconds: numpy's OpenBLAS workers poll for about 0.2 s after a call, ONNX
Runtime's and PyTorch's spin for a while too, and a pool still spinning from the
previous repeat would take a core from the library timed next.  (A process per library
would avoid that too, but its repeats could then not alternate with autotune's.)

Each is timed after a warm-up in ``repeats`` rounds, a repeat looping for at least
``min_time`` seconds.  In a round every peer is timed right after a repeat of autotune,
and the ratio is the median over the rounds of those adjacent pairs' peer time /
autotune time (above 1: autotune is faster).  A shared VM's speed drifts by up to 1.5x
between seconds and minutes: two repeats timed back to back see the same speed, where
each peer's best of its own repeats may come from windows seconds apart (the PyTorch f32
peer alone takes seconds a call).  The times shown are each peer's best repeat.  A peer
whose first call took more than ``MAX_CALL`` seconds (PyTorch's f32 int4 path from M = 64
on a busy VM) is not timed again: its row shows that call, and its ratio is that call over
autotune's best repeat, said in its note; at a larger M with the same K and N it is not
run, and its row says why.

Every peer's C is checked against the f32 product on the dequantised W within
:func:`autotune.quant.quantization_error_bound` (torch int4, which gets the dequantised
W exactly, within a float tolerance of it), and a wrong one is reported, not timed.  That
bound is loose enough to pass weights scrambled in some ways (a nibble order swapped
moves each term by a few steps of random sign), so ONNX Runtime, which reads autotune's
codes in its own layout, is also run on rows of A whose int8 quantisation is exact
(:func:`exactly_quantised_rows`) and held to :func:`autotune.quant.reference_qmatmul`
within :func:`autotune.quant.scaling_error_bound`.  A missing peer (PyTorch or ONNX
Runtime not installed, a shape it refuses) is reported with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from autotune.quant import QuantizedWeights

#: The issues' shapes (M = 1 to 1024 with K = N = 4096) and odd ones.
SHAPES = ((1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (256, 4096, 4096), (1024, 4096, 4096),
          (1, 4000, 1000), (7, 1000, 333), (33, 2048, 1024))
QUICK_SHAPES = ((1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096))
BLOCK = 32
ORT = "ort MatMulNBits"
#: Seconds between repeats on more than one thread, for the previous library's pool to stop spinning.
SETTLE = 0.3
#: A peer whose first call takes longer is not timed in rounds (see the module's docstring).
MAX_CALL = 5.0
#: Rows of A per piece of the reference bound: block_sums holds blocks x rows x N float64
#: (1 GiB at M = 256 with K = N = 4096 in one piece).
BOUND_ROWS = 32
#: Targets of issue 17 on x86, one thread: peer time / autotune time at least this.
TARGETS = {"torch int4": 1.5, "torch int4 bf16": 1.5, "numpy f32": 2.0}


def targets() -> dict[str, float]:
    """:data:`TARGETS` and, on x86, issue 28's for ONNX Runtime: 2x on a CPU with AMX, 1.5x without."""
    from autotune import host

    info = host.detect()
    if info.arch != "x86_64":  # issue 28 compares the Arm kernels by instruction counts instead
        return dict(TARGETS)
    return {**TARGETS, ORT: 2.0 if info.has("amx_int8") else 1.5}


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
                   reference: str = "autotune", settle: float = 0.0) -> tuple[dict[str, float], dict[str, float]]:
    """Each function's best repeat, and each one's median ratio to ``reference`` in adjacent pairs.

    A round times, for every other function, a repeat of ``reference`` and then one of
    it.  Without ``reference`` among ``fns`` (it failed its check), or with nothing
    else, the rounds time each function once and there are no ratios.  Every repeat
    starts ``settle`` seconds after the previous one ended.
    """
    best = dict.fromkeys(fns, float("inf"))
    ratios: dict[str, list[float]] = {name: [] for name in fns if name != reference}

    def timed(name: str) -> float:
        if settle > 0:
            time.sleep(settle)
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
        return {"torch int4": reason, "torch int4 bf16": reason, "torch int8 dyn": reason}
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


def matmul_nbits(w: QuantizedWeights, threads: int = 1,
                 accuracy_level: int = 4) -> Callable[[np.ndarray], np.ndarray]:
    """ONNX Runtime's ``MatMulNBits`` on ``w``'s own codes and scales: a function of A [M, K] float32.

    One node in the ``com.microsoft`` domain: A [M, K] f32 in, B uint8 [N, blocks, block / 2]
    and scales f32 [N * blocks] as constant initializers (so the session packs B for its
    kernels once, as a model's weights are), no zero_points (4-bit zero point 8), C [M, N]
    out.  ``threads`` is the session's intra-op thread count.  Raises ImportError without
    ``onnx`` or ``onnxruntime``, ValueError for weights it cannot take as they are.
    """
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    if w.bits != 4 or not w.symmetric:
        raise ValueError("MatMulNBits is fed symmetric 4-bit weights here (its zero point 8 is theirs)")
    # The op's B holds, per column and block, the block's codes along K two to a byte, the
    # first in the low nibble: autotune's codes row (column n of W, the even k low) cut into
    # blocks, the padding of K already codes 8, zero weights.
    codes = np.ascontiguousarray(w.codes).reshape(w.n, w.blocks, w.block // 2)
    scales = np.ascontiguousarray(w.block_scales()).reshape(-1)  # float16 scales widen exactly
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["C"], domain="com.microsoft",
                            K=w.k, N=w.n, bits=4, block_size=w.block, accuracy_level=accuracy_level)
    graph = helper.make_graph(
        [node], "qmatmul_peer", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", w.k])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, ["M", w.n])],
        initializer=[numpy_helper.from_array(codes, "B"), numpy_helper.from_array(scales, "scales")])
    # A fixed, old opset and IR version: the newest the onnx package writes may be newer
    # than the installed runtime reads, and the graph needs nothing of them.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda A: session.run(None, {"A": A})[0]


def exactly_quantised_rows(rng: np.random.Generator, m: int, k: int, block: int = BLOCK) -> np.ndarray:
    """float32 A [m, k] that every per-block int8 quantiser of A codes the same way.

    Each row is whole numbers in [-127, 127] times one power of two, and every block of K
    starts with 127: its scale ``max|a| / 127`` is that power of two and each value is its
    code times it, exactly, however a library rounds or forms the scale's reciprocal (and
    whatever its blocks of A, as long as they are whole multiples of ``block`` long).  A
    product of such rows differs from :func:`autotune.quant.reference_qmatmul` only in the
    scaling step, so weights read wrongly show.
    """
    codes = rng.integers(-127, 128, (m, -(-k // block) * block))
    codes.reshape(m, -1, block)[:, :, 0] = 127
    powers = np.exp2(rng.integers(-10, 3, (m, 1)).astype(np.float64))
    return (codes[:, :k] * powers).astype(np.float32)


def check_codes(run: Callable[[np.ndarray], np.ndarray], w: QuantizedWeights, rows: int = 4,
                seed: int = 0) -> str | None:
    """None when ``run`` (A -> C) multiplies :func:`exactly_quantised_rows` by ``w`` as
    :func:`autotune.quant.reference_qmatmul` does, within
    :func:`autotune.quant.scaling_error_bound`; else what is wrong."""
    from autotune.quant import reference_qmatmul, scaling_error_bound

    A = exactly_quantised_rows(np.random.default_rng(seed), rows, w.k, w.block)
    C = np.asarray(run(A))
    expected = reference_qmatmul(A, w)
    bound = scaling_error_bound(A, w)
    if C.shape != expected.shape:
        return f"wrong: C has shape {C.shape}, not {expected.shape}"
    bad = np.argwhere(~(np.abs(C.astype(np.float64) - expected) <= bound))
    if len(bad):
        i, j = bad[0]
        return (f"wrong: on exactly quantised rows C[{i},{j}] = {C[i, j]:.6g}, reference {expected[i, j]:.6g}, "
                f"bound {bound[i, j]:.3g} ({len(bad)} of {C.size} outside)")
    return None


def _ort_peer(A: np.ndarray, w: QuantizedWeights, threads: int) -> Callable[[], np.ndarray] | str:
    """The ONNX Runtime peer as a callable returning C, or why it is missing or wrong."""
    try:
        run = matmul_nbits(w, threads)
    except ImportError as exc:
        return f"ONNX Runtime not installed ({exc.name or exc}; pip install 'autotune[bench]')"
    except Exception as exc:  # a shape or version it refuses: reported, not fatal
        return f"refused: {str(exc).splitlines()[0][:120]}"
    try:
        wrong = check_codes(run, w)
    except Exception as exc:
        return f"refused: {str(exc).splitlines()[0][:120]}"
    return wrong or (lambda: run(A))


class _Reference:
    """The f32 product on the dequantised W and the bounds the peers are held to, each
    computed once per shape however many peers ask."""

    def __init__(self, A: np.ndarray, w: QuantizedWeights, Wd: np.ndarray) -> None:
        self.A, self.w, self.Wd = A, w, Wd

    @cached_property
    def exact(self) -> np.ndarray:
        return self.A.astype(np.float64) @ self.Wd.astype(np.float64)

    @cached_property
    def magnitude(self) -> np.ndarray:
        return np.abs(self.A).astype(np.float64) @ np.abs(self.Wd).astype(np.float64)

    @cached_property
    def quantised(self) -> np.ndarray:
        """:func:`autotune.quant.quantization_error_bound`, a piece of rows at a time (each
        row's bound depends on that row alone)."""
        from autotune.quant import quantization_error_bound

        return np.vstack([quantization_error_bound(self.A[i:i + BOUND_ROWS], self.w)
                          for i in range(0, len(self.A), BOUND_ROWS)])


def _right(peer: str, C: np.ndarray, reference: _Reference) -> str | None:
    """None when C is a right answer for this peer; else what is wrong."""
    if peer in ("torch int4", "numpy f32"):  # the dequantised W itself: float rounding only
        bound = 8 * np.finfo(np.float32).eps * reference.magnitude + 1e-30
    elif peer == "torch int4 bf16":  # A and the scales rounded to bf16 (8 bits), products and sums too
        bound = 4 * 2.0 ** -8 * reference.magnitude + 1e-30
    elif peer == "torch int8 dyn":  # its own (per-tensor) quantisation: twice ours is generous
        bound = 4 * reference.quantised + 1e-30
    else:  # autotune and MatMulNBits at accuracy level 4: A quantised to int8 per block of 32
        bound = reference.quantised
    exact = reference.exact
    bad = np.argwhere(~(np.abs(C.astype(np.float64) - exact) <= bound))
    if len(bad):
        i, j = bad[0]
        return f"wrong: C[{i},{j}] = {C[i, j]:.6g}, f32 product {exact[i, j]:.6g}, bound {bound[i, j]:.3g}"
    return None


def _checked(peer: str, fn: Callable[[], np.ndarray], reference: _Reference) -> tuple[str | None, float]:
    """The first call of a peer, its warm-up: what is wrong with its C (None if nothing), and its seconds."""
    start = time.perf_counter()
    C = fn()
    seconds = time.perf_counter() - start
    return _right(peer, C, reference), seconds


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
    # (peer, K, N) -> (M, seconds) of a first call over MAX_CALL: a larger M of the same K
    # and N would only take longer (PyTorch's f32 int4 path took 248 s at M = 1024).
    overlong: dict[tuple[str, int, int], tuple[int, float]] = {}
    for m, k, n in shapes:
        A = rng.standard_normal((m, k)).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        w = autotune.quantize_weights(W, bits=4, block=BLOCK)
        Wd = w.dequantize()
        reference = _Reference(A, w, Wd)
        peers: dict[str, Callable[[], np.ndarray] | str] = {"autotune": lambda: autotune.qmatmul(A, w)}
        if library is None:
            peers["autotune"] = f"no libautotune: {api._state.reason}"
        peers[ORT] = _ort_peer(A, w, threads)
        peers.update(_torch_peers(A, w, Wd, threads))
        peers["numpy f32"] = lambda: np.matmul(A, Wd)
        # The first call of each is its warm-up and its check; only right ones are timed.
        problems: dict[str, str | None] = {}
        first: dict[str, float] = {}
        for peer, fn in peers.items():
            smaller, seconds = overlong.get((peer, k, n), (m, 0.0))
            if isinstance(fn, str):
                problems[peer] = fn
            elif smaller < m:
                problems[peer] = f"not run: {seconds:.1f} s a call at M = {smaller} already (over {MAX_CALL:g} s)"
            else:
                problems[peer], first[peer] = _checked(peer, fn, reference)
        slow = {peer for peer, seconds in first.items() if seconds > MAX_CALL and not problems[peer]}
        overlong.update({(peer, k, n): (m, first[peer]) for peer in slow})
        timed = {peer: fn for peer, fn in peers.items() if not problems[peer] and peer not in slow}
        best, ratios = _paired_rounds(timed, repeats, min_time, settle=SETTLE if threads > 1 else 0.0)
        for peer in sorted(slow, key=lambda peer: peer != "autotune"):  # autotune's first: the others' pair
            best[peer] = first[peer]
            if "autotune" in best and peer != "autotune":
                ratios[peer] = first[peer] / best["autotune"]
        for peer in peers:
            note = "numpy threads not pinned (no threadpoolctl)" if peer == "numpy f32" and limits is None else ""
            if peer in slow:
                note = f"one call (over {MAX_CALL:g} s), not paired: x autotune's best"
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
    goals = targets()
    for r in rows:
        shape = "x".join(map(str, r.shape))
        ms = f"{r.seconds * 1e3:9.3f}" if r.seconds else f"{'-':>9}"
        ratio = f"{r.ratio:11.2f}" if r.ratio else f"{'':>11}"
        lines.append(f"{shape:>18}  {r.peer:<15} {ms} {ratio}  {r.note}")
        if r.peer in goals and r.ratio:
            met = r.ratio >= goals[r.peer]
            verdicts.append(f"{shape}: {r.ratio:.2f}x {r.peer} (target {goals[r.peer]}x) {'met' if met else 'NOT met'}")
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
