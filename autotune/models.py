"""Analytic planner parameters: the starting point of tuning and the default without it.

Two models from the seed papers, solved from the detected cache geometry:

* KirbyMM's blocking constraints (seed 002), rewritten for this runtime's loop
  order.  The executor packs a ``blk_k x blk_n`` panel of B once per K slice and
  then, block by block, a ``blk_m x blk_k`` block of A; a block's micro tiling
  walks row bands, so one ``mr x blk_k`` sliver of A stays in L1 while the
  ``blk_k x nr`` micro-panels of B stream past it out of L2.  KirbyMM's roles
  of A and B are therefore swapped, and its constraints read

  - L1 (Eq. 7): the A sliver and the B micro-panel streaming past it take at
    most ``ways - 1`` ways of L1, counted per set (BLIS's analytical model,
    Low et al. 2016, which counts one streaming panel: the C micro-tile lives
    in registers during the K loop, and counting it and a second B micro-panel
    held fp64 at blk_k 128, 2-6 % slower at 1024^3 than 224-256 on Zen 5);
  - L2 (Eq. 6): the packed B panel, two A slivers and a C row band take at most
    ``ways - 1`` ways of L2;
  - operational intensity (Eq. 5): ``blk_m blk_n / (blk_m + blk_n) >=
    peak * bpe / (2 * bandwidth)``, so the block's arithmetic hides its traffic.

  The way left free keeps the unpacked C, which is read and written in place,
  from evicting the packed panels.

* IAAT's memory-operation model (seed 003) for small shapes: without packing a
  kernel reads its operands in place, which costs nothing extra while A, B and C
  stay in cache.  Packing pays once the working set ``(MK + KN + MN) bpe``
  leaves the cache the kernels stream from (a quarter of this core's share of
  the last level), so the crossover is the cube whose working set fills it.

Every function is pure: the library's content hash changes only with the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from .host import HostInfo
from .params import DEFAULTS, PARAMS

#: Bytes per element of each dtype the runtime plans for.
BPE: Mapping[str, int] = {"f32": 4, "f64": 8}
#: The in-place main kernels' parameters, one per transposition.
PLACE_KERNELS: tuple[str, ...] = tuple(p.name for p in PARAMS if p.name.startswith("place_kernel_"))

#: Sustained memory bandwidth one core can draw, bytes/s.  Nothing detects it;
#: 20 GB/s is a conservative figure for one core of a current server or desktop
#: part, and the operational-intensity bound it gives is loose (about 23
#: elements for a 285 GFLOPS core in f32), so an error of 2x moves nothing.
CORE_BANDWIDTH = 20e9

#: A parallel region's wake-up and join, seconds (pool.c's condition variables).
THREAD_OVERHEAD_S = 5e-6

#: Blocks are also the unit of the thread split: one thread computes a block
#: over all of K, which keeps results independent of the thread count.  These
#: caps keep a 256^2 C at two blocks and a 1000^2 C at 32, whatever the caches
#: would allow.
BLOCK_CAP_M = 128
BLOCK_CAP_N = 256


@dataclass(frozen=True)
class Cache:
    """One cache level as the constraints see it: ``sets x ways`` lines of ``line`` bytes."""

    size: int
    line: int
    ways: int
    shared_by: int = 1  # cores sharing one instance

    @property
    def way_bytes(self) -> int:
        return max(self.line, self.size // max(1, self.ways))

    def ways_for(self, nbytes: float) -> int:
        """Ways of every set that ``nbytes`` of contiguous data occupy (KirbyMM's ceil terms)."""
        return math.ceil(nbytes / self.way_bytes) if nbytes > 0 else 0


@dataclass(frozen=True)
class Geometry:
    l1: Cache
    l2: Cache
    l3: Cache
    cores: int
    simd_bytes: int


def geometry(host: HostInfo | None) -> Geometry:
    """The caches the constraints use; missing data gives a 48 KiB/12-way L1, 1 MiB/16-way L2."""

    def level(n: int, fallback: Cache) -> Cache:
        found = None
        if host is not None:
            found = host.cache(n, "unified") or host.cache(n) if n > 1 else host.cache(n)
        if found is None or not found.size:
            return fallback
        return Cache(found.size, found.line or 64, found.ways or fallback.ways,
                     max(1, found.shared_by))

    simd = 16
    cores = 1
    if host is not None:
        cores = max(1, host.cores)
        if host.has("avx512f"):
            simd = 64
        elif host.has("avx2") or host.has("avx"):
            simd = 32
        elif host.svl_bits:
            simd = host.svl_bits // 8
    return Geometry(
        level(1, Cache(48 << 10, 64, 12)),
        level(2, Cache(1 << 20, 64, 16)),
        level(3, Cache(8 << 20, 64, 16)),
        cores,
        simd,
    )


def nominal_peak_gflops(geo: Geometry, dtype: str, ghz: float = 3.5, fma_units: int = 2) -> float:
    """One core's FMA peak from the vector width when nothing was measured."""
    return 2.0 * fma_units * (geo.simd_bytes / BPE[dtype]) * ghz


def l1_fits(geo: Geometry, bpe: int, mr: int, nr: int, blk_k: int) -> bool:
    """KirbyMM Eq. 7 in this runtime's loop order (A sliver resident, one B micro-panel streaming)."""
    c = geo.l1
    used = c.ways_for(mr * blk_k * bpe) + c.ways_for(blk_k * nr * bpe)
    return used <= c.ways - 1


def l2_fits(geo: Geometry, bpe: int, mr: int, blk_k: int, blk_n: int) -> bool:
    """KirbyMM Eq. 6: packed B panel, two A slivers and a C row band within ways - 1 of L2."""
    c = geo.l2
    used = (c.ways_for(blk_k * blk_n * bpe) + 2 * c.ways_for(mr * blk_k * bpe)
            + c.ways_for(mr * blk_n * bpe))
    return used <= c.ways - 1


def intensity(blk_m: int, blk_n: int) -> float:
    """Flops per element moved by a block (KirbyMM Eq. 5 without the factor 2/bpe)."""
    return blk_m * blk_n / (blk_m + blk_n)


@dataclass(frozen=True)
class Blocking:
    blk_m: int
    blk_n: int
    blk_k: int
    intensity_needed: float  # elements: peak * bpe / (2 * bandwidth)
    intensity: float

    @property
    def feasible(self) -> bool:
        """False when no block the caches allow hides the memory traffic (memory bound)."""
        return self.intensity >= self.intensity_needed


def solve_blocking(geo: Geometry, dtype: str, mr: int, nr: int, *,
                   peak_gflops: float | None = None, bandwidth: float = CORE_BANDWIDTH) -> Blocking:
    """The largest blocks the L1 and L2 constraints allow, raised to meet the intensity bound.

    blk_k is the deepest multiple of 8 (16..1024) whose A sliver and B micro-panel
    fit L1; blk_n the widest multiple of nr whose B panel fits L2 at that depth;
    blk_m the largest multiple of mr whose A block shares L2 with the B panel
    (it is re-read once per row band, so it should not come from L3).  Both
    are then capped for the thread split and, if the cap broke the intensity
    bound, blk_m grows back (up to 8x its cap), then blk_n (up to its L2 limit),
    until it holds.  Where nothing does, the largest blocks are returned.
    """
    bpe = BPE[dtype]
    mr, nr = max(1, mr), max(1, nr)
    blk_k = 16
    for k in range(1024, 15, -8):
        if l1_fits(geo, bpe, mr, nr, k):
            blk_k = k
            break
    l2_n = nr
    for n in range(nr * (4096 // nr), nr - 1, -nr):
        if l2_fits(geo, bpe, mr, blk_k, n):
            l2_n = n
            break
    blk_n = max(nr, min(BLOCK_CAP_N, l2_n) // nr * nr)
    free_l2 = geo.l2.way_bytes * (geo.l2.ways - 1) - blk_k * blk_n * bpe - 2 * mr * blk_k * bpe
    blk_m = max(mr, int(free_l2 // (blk_k * bpe)) // mr * mr)
    blk_m = max(mr, min(BLOCK_CAP_M, blk_m) // mr * mr)
    peak = peak_gflops if peak_gflops and peak_gflops > 0 else nominal_peak_gflops(geo, dtype)
    needed = peak * 1e9 * bpe / (2.0 * bandwidth)
    while intensity(blk_m, blk_n) < needed and blk_m + mr <= 8 * BLOCK_CAP_M:
        blk_m += mr
    while intensity(blk_m, blk_n) < needed and blk_n + nr <= l2_n:
        blk_n += nr
    return Blocking(blk_m, blk_n, blk_k, needed, intensity(blk_m, blk_n))


def pack_crossover_flops(geo: Geometry, dtype: str) -> float:
    """IAAT: 2 s^3 for the cube whose working set 3 s^2 bpe fills the in-place budget.

    The kernels of the no-pack path stream their operands from the last-level
    cache well (measured on Zen 5: 270 GFLOPS for a 512^3 f32 C read in place
    against 155 packed), so the budget is this core's share of it, of which a
    quarter: operands with arbitrary leading dimensions use the sets unevenly
    (512^3 in f64, a 4 KiB column stride, halves in place and not packed).
    Half of L2 is the floor for hosts without an L3.

    Checked against measurement (Zen 5, 1 MiB L2, 32 MiB L3 per 2 cores, one
    thread, square C-ordered operands, GFLOPS in place / packed): f32 128^3
    224/71, 256^3 250/196, 384^3 252/203, 512^3 228/215, 768^3 209/206; f64
    256^3 113/102, 384^3 107/103, 512^3 103/105, 768^3 87/106.  The crossovers
    this gives, 591^3 (f32) and 418^3 (f64), fall where the measured curves
    cross; half of L2 (209^3 / 166^3), the earlier budget, packed 256^3 at a
    loss of 20 % (f32).
    """
    llc_share = geo.l3.size / max(1, geo.l3.shared_by) / 4
    budget = max(geo.l2.size / 2, llc_share)
    side = math.sqrt(budget / (3 * BPE[dtype]))
    return 2.0 * side**3


def place_stream_bytes(geo: Geometry) -> float:
    """The bytes of an A read in place from which it streams from memory between calls:
    three quarters of the last-level cache, which one thread has to itself (the rest
    holds B, C and what else the program keeps).

    On Zen 1 (8 MiB L3) fp64 M x 4 x M ran faster in slices of 32 with A of 4.8 MB
    and in slices of 8 with A of 8 MB; this puts the change at 6 MiB.  A prior only:
    the install measures it (:func:`autotune.crossovers.stream_sweep`).
    """
    return float(round(0.75 * max(geo.l3.size, geo.l2.size), -3))


def thread_crossover_flops(geo: Geometry, peak_gflops: float | None = None,
                           overhead_s: float = THREAD_OVERHEAD_S) -> float:
    """2MNK from which splitting over the cores saves more than the wake-up costs.

    With T cores a problem of F flops saves ``F / peak * (1 - 1/T)``; it pays
    once that exceeds the overhead.  The f32 peak is used: it gives the higher
    threshold, and f64, at half the speed, is then safely past its own.
    """
    peak = peak_gflops if peak_gflops and peak_gflops > 0 else nominal_peak_gflops(geo, "f32")
    cores = max(2, geo.cores)
    return overhead_s * peak * 1e9 / (1.0 - 1.0 / cores)


def analytic_params(
    host: HostInfo | None,
    main_kernel: Mapping[str, tuple[int, int]] | None = None,
    provenance: str = "measured",
    peak_gflops: Mapping[str, float] | None = None,
) -> dict:
    """The planner parameters of the models, in the table's ``params`` format.

    ``main_kernel`` maps a dtype to the ``(mr, nr)`` the packed path will mostly
    run (default: one vector of rows by 6).  Cost weights are the tiler's
    built-in values, stated explicitly so that a table records what planned.
    """
    geo = geometry(host)
    kernels = dict(main_kernel or {})
    peaks = dict(peak_gflops or {})
    params: dict = {key: {} for key in
                    ("blk_m", "blk_n", "blk_k", "pack_flops", "call_seconds", "edge_frac",
                     "pack_seconds", "grid", "pack_flops_tn", "pack_kernel", *PLACE_KERNELS,
                     "place_stream_bytes")}
    for dtype, bpe in BPE.items():
        mr, nr = kernels.get(dtype, (max(1, geo.simd_bytes // bpe), 6))
        b = solve_blocking(geo, dtype, mr, nr, peak_gflops=peaks.get(dtype))
        params["blk_m"][dtype], params["blk_n"][dtype], params["blk_k"][dtype] = b.blk_m, b.blk_n, b.blk_k
        params["pack_flops"][dtype] = round(pack_crossover_flops(geo, dtype), -3)
        # The cache model knows no kernel's way of reading: tn's own crossover is
        # measured (autotune.crossovers); until then it packs where nn does.
        params["pack_flops_tn"][dtype] = params["pack_flops"][dtype]
        # Which kernel runs a packed block best is timed on the built library
        # (autotune.crossovers.measure_main_kernel); until then the figures choose.
        params["pack_kernel"][dtype] = 0
        # And which runs the products read in place, per transposition
        # (autotune.crossovers.measure_place_kernel).
        for name in PLACE_KERNELS:
            params[name][dtype] = 0
        params["place_stream_bytes"][dtype] = place_stream_bytes(geo)
        for name in ("call_seconds", "edge_frac", "pack_seconds", "grid"):
            params[name][dtype] = DEFAULTS.get(dtype, name)
    params["thread_flops"] = round(thread_crossover_flops(geo, peaks.get("f32")), -3)
    # What a parallel region costs is the pool's and the machine's, no cache's: the
    # default until the install times it (autotune.crossovers.measure_thread_cost).
    params["thread_seconds"] = DEFAULTS.thread_seconds
    params["provenance"] = provenance
    params["simd_bytes"] = geo.simd_bytes
    return params
