"""The tiler's bounded cover search finds the exhaustive search's predicted time.

cover.c prunes block sizes and band heights that cannot be in an optimum, which
took planning a new 256^3 shape under QEMU from 16.8 million instructions to a
fraction of that.  The pruning is exact by construction (what it drops can be
replaced by what it keeps at no greater predicted time), so the check here is
tight: over the kernel sets of the x86 families (AVX2, AVX-512) and of the
aarch64 library (SME2 at SVL 512 beside NEON), ranked by the analytic model and
by randomly perturbed "measured" rates, at K = 1 and 255, and over adversarial
block shapes (1, primes, just around kernel sizes and their multiples, tall and
skinny, large), the bounded search's predicted seconds must equal the exhaustive
search's to within 1e-9 relative (floating-point summation order), and both
tilings must cover the block exactly once with the grid's own cells.

The grids are built here the way cost.c builds them (every size up to the
biggest kernel; a cell holds the fastest of its kernel, if any, the SME2
variable blocks at least its size, and the portable edge code); the searches themselves are cover.c's, compiled with
tests/c/cover_check.c.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from autotune.families import default_family, model_score
from autotune.families.sme2 import is_variable
from autotune.params import PlannerParams
from autotune.specs import KernelSpec

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "kernels_src" / "runtime"
#: Relative tolerance: the searches add the same cells' seconds in another order.
TOLERANCE = 1e-9
#: Peak GFLOPS per dtype of the model's unit (only ratios to the edge code matter).
PEAK = {"f32": 80.0, "f64": 40.0}


@pytest.fixture(scope="module")
def checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("needs a host C compiler (cc, gcc or clang)")
    out = tmp_path_factory.mktemp("cover") / "cover_check"
    subprocess.run([cc, "-O2", "-std=c11", "-I", str(ROOT / "kernels_src" / "include"), "-I", str(RUNTIME),
                    str(ROOT / "tests" / "c" / "cover_check.c"), str(RUNTIME / "cover.c"), "-lm", "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    return out


def grid(specs: list[KernelSpec], dtype: str, K: int, rate: dict[str, float]) -> tuple[int, int, list]:
    """cost.c's grid: seconds of an h x w block at depth K, kernel or edge code."""
    params = PlannerParams()
    d = 0 if dtype == "f32" else 1
    call, edge = params.call_seconds[d], params.edge_frac[d] * PEAK[dtype]
    H = max([8, *(s.mr for s in specs)])
    W = max([8, *(s.nr for s in specs)])
    cells = [[(-1, 2.0 * h * w * K / (edge * 1e9) + call) for w in range(1, W + 1)] for h in range(1, H + 1)]
    # Fixed blocks first; then each SME2 variable block offers its cost to every
    # block up to its size, so a row holds one cost over many widths.
    for i, s in sorted(enumerate(specs), key=lambda e: is_variable(e[1])):
        sec = 2.0 * s.mr * s.nr * K / (rate[s.name] * 1e9) + call
        variable = is_variable(s)
        for h in range(1 if variable else s.mr, s.mr + 1):
            for w in range(1 if variable else s.nr, s.nr + 1):
                if sec < cells[h - 1][w - 1][1]:
                    cells[h - 1][w - 1] = (i, sec)
    return H, W, cells


def shapes(H: int, W: int, sizes: set[int], rng: random.Random, large: bool) -> list[tuple[int, int]]:
    """Adversarial block shapes for a grid of kernel heights and widths `sizes`;
    `large` adds sides past the cover's remainder cap (H x W + H), whose
    exhaustive search is the slow part of this test."""
    edge = {1, 2, 3, 5, 7, 13, 31, 61, 97, 127, 257, 509, 1021}
    for s in sizes | {H, W}:
        for k in (1, 2, 3, 7):
            edge |= {k * s - 1, k * s, k * s + 1}
    edge = sorted(x for x in edge if x >= 1)
    out = [(m, n) for m in (1, 17, 64, 65, 256) for n in edge[:: max(1, len(edge) // 10)]]
    out += [(n, m) for m, n in out]
    if large:
        cap = [H * W - 1, H * W + H + 1, W * W + W + 1, (H + 1) * (W + 1)]  # around the cover's remainder cap
        out += [(1, 5000), (5000, 3), (3000, 2), (2, 3000), (4097, 4093), *((c, 7) for c in cap), *((5, c) for c in cap)]
    out += [(rng.randint(1, 600), rng.randint(1, 600)) for _ in range(12)]
    # By width: one tiler serves them all, and blocks of one width reuse its row covers.
    return sorted(set(out), key=lambda s: (s[1], s[0]))


def family_specs(isas: tuple[str, ...], dtype: str, trans: str) -> list[KernelSpec]:
    specs = [s for isa in isas for s in default_family([isa], (dtype,), quick=False)]
    return [s for s in specs if s.trans == trans]


CASES = [
    # (kernel families, dtype, transposition): the x86 families, and the aarch64
    # library at SVL 512 (its SME2 kernels beside NEON's, as cpu.c enables them).
    (("avx2",), "f32", "nn"), (("avx2",), "f64", "nt"), (("avx512",), "f32", "tn"),
    (("avx512",), "f64", "nn"), (("sme2", "neon"), "f32", "nn"), (("sme2", "neon"), "f64", "tt"),
    (("neon",), "f32", "nt"),
]


@pytest.mark.parametrize("isas,dtype,trans", CASES, ids=["-".join((*c[0], c[1], c[2])) for c in CASES])
def test_bounded_search_matches_exhaustive(checker: Path, isas, dtype, trans):
    specs = family_specs(isas, dtype, trans)
    assert specs, (isas, dtype, trans)
    rng = random.Random(f"{isas}{dtype}{trans}")
    top = max(model_score(s) for s in specs)
    model = {s.name: PEAK[dtype] * model_score(s) / top for s in specs}
    problems = []
    for K in (1, 255):
        # The analytic model, and two tables as measurements give them: every
        # kernel at its own efficiency, some slower than the edge code.
        for variant in range(3):
            rate = model if variant == 0 else {n: g * rng.uniform(0.02, 1.2) for n, g in model.items()}
            H, W, cells = grid(specs, dtype, K, rate)
            problems.append((H, W, cells, shapes(H, W, {s.mr for s in specs} | {s.nr for s in specs}, rng,
                                                 large=variant == 1)))
    assert_searches_agree(checker, problems)


def assert_searches_agree(checker: Path, problems: list[tuple[int, int, list, list[tuple[int, int]]]]) -> None:
    """Run both searches over (H, W, cells, blocks) problems: every tiling covers its
    block once with the grid's cells, and the bounded one's predicted time is the
    exhaustive one's."""
    text, queries = [], []
    for H, W, cells, qs in problems:
        text.append(f"{H} {W}")
        text += [f"{kid} {sec!r}" for row in cells for kid, sec in row]
        text.append(str(len(qs)))
        text += [f"{m} {n}" for m, n in qs]
        queries += qs
    done = subprocess.run([str(checker)], input="\n".join(text) + "\n", capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == len(queries)
    worse = []
    for line in lines:
        m, n, exhaustive, bounded, ok = line.split()
        assert ok == "1", f"{m} x {n}: a tiling does not cover the block with its cells"
        if abs(float(bounded) / float(exhaustive) - 1) > TOLERANCE:
            worse.append((m, n, float(bounded) / float(exhaustive)))
    assert not worse, f"{len(worse)} of {len(lines)} blocks differ from the exhaustive optimum: {worse[:10]}"


def random_run_grid(rng: random.Random) -> tuple[int, int, list]:
    """A grid whose rows and band heights come in runs of one cost (as SME2 variable
    blocks make them), with costs random enough that any size may be the best."""
    H, W = rng.randint(1, 24), rng.randint(2, 40)

    def costs(length: int) -> list[float]:
        out, size = [], 1
        while size <= length:
            hi = min(length, size + rng.choice((0, 0, 1, 3, 7, 15, 40)))
            cost = hi * rng.uniform(0.5, 1.5) if rng.random() < 0.7 else rng.uniform(0.1, 3.0) * hi
            out += [cost] * (hi - size + 1)
            size = hi + 1
        return out

    heights = costs(H)
    cells = [[(0, heights[h] * c) for c in costs(W)] for h in range(H)]
    return H, W, cells


def test_bounded_search_matches_exhaustive_on_runs(checker: Path):
    """Grids of random runs of one cost, where the remainder bound and the programme
    over runs do the work, against the exhaustive search."""
    rng = random.Random("runs")
    problems = []
    for _ in range(150):
        H, W, cells = random_run_grid(rng)
        qs = sorted({(rng.randint(1, 3 * H + 5), rng.randint(1, W * W + 3 * W)) for _ in range(8)}
                    | {(1, W * W + W + 1), (H * H + H + 1, 1), (rng.randint(1, 9), rng.randint(1, 4000))},
                    key=lambda s: (s[1], s[0]))
        problems.append((H, W, cells, qs))
    assert_searches_agree(checker, problems)


def random_variable_grid(rng: random.Random) -> tuple[int, int, list]:
    """A grid as cost.c builds one for SME2 beside NEON: edge blocks whose cost grows
    with their area, a few fixed kernels, and variable blocks that offer one cost to
    every block up to their size.  Many heights then share a variable block's row
    costs, so the lazy search leaves most rows uncovered, falls back to covering
    them all when it keeps asking for more, and rows lend their covers to the next."""
    H, W = rng.randint(8, 40), rng.randint(8, 40)
    edge, call = rng.uniform(0.5, 2.0), rng.uniform(0.0, 30.0)
    cells = [[(-1, h * w * edge + call) for w in range(1, W + 1)] for h in range(1, H + 1)]
    kernels = [(rng.randint(1, H), rng.randint(1, W), False) for _ in range(rng.randint(0, 6))]
    kernels += [(rng.randint(1, H), rng.randint(1, W), True) for _ in range(rng.randint(1, 4))]
    for i, (mr, nr, variable) in enumerate(sorted(kernels, key=lambda k: k[2])):
        sec = mr * nr * edge * rng.uniform(0.05, 0.6) + call + (rng.uniform(0.0, 200.0) if variable else 0.0)
        for h in range(1 if variable else mr, mr + 1):
            for w in range(1 if variable else nr, nr + 1):
                if sec < cells[h - 1][w - 1][1]:
                    cells[h - 1][w - 1] = (i, sec)
    return H, W, cells


def test_bounded_search_matches_exhaustive_on_variable_blocks(checker: Path):
    """Grids of variable blocks over edge code, blocks of every kind of width and
    height (one tiler per grid, so rows covered for one block serve the next of its
    width), against the exhaustive search."""
    rng = random.Random("variable")
    problems = []
    for _ in range(120):
        H, W, cells = random_variable_grid(rng)
        qs = {(rng.randint(1, 4 * H), rng.randint(1, 4 * W)) for _ in range(6)}
        qs |= {(rng.randint(1, 300), n) for n in (1, W - 1, W, W + 1, 2 * W + 3)}
        qs |= {(H * H + H + 1, rng.randint(1, 9)), (rng.randint(1, 9), W * W + W + 1)}
        problems.append((H, W, cells, sorted(qs, key=lambda s: (s[1], s[0]))))
    assert_searches_agree(checker, problems)
