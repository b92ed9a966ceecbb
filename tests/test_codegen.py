"""The kernel generators: sources compile cleanly and compute the ABI's semantics.

Kernels are compiled with the toolchain's flags (plus -Wall -Wextra -Werror)
into a shared library in tmp_path and called through ctypes on operands that
end exactly at a PROT_NONE guard page, so any read past an operand's footprint
faults.  Results are compared with a float64 reference under the bound
``2 (K + 2) eps (|alpha| sum_p |a_ip||b_pj| + |beta| |c_ij|)``.
"""

from __future__ import annotations

import ctypes
import mmap
import random
import re
import subprocess
import zlib

import numpy as np
import pytest

from autotune.codegen import GeneratedSource, generate, generator_module
from autotune.codegen.bench import build_probe_library, cflags
from autotune.families.x86 import family, register_file
from autotune.specs import DTYPES, TRANSPOSITIONS, KernelSpec
from autotune import host, toolchain
from autotune.toolchain import X86_REQUIRES, find_cc


def _cpu_flags() -> set[str]:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return set()
    match = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(match.group(1).split()) if match else set()


CPU = _cpu_flags()
X86 = ("avx512", "avx2", "generic")
RUNNABLE = [isa for isa in X86 if all(f in CPU for f in X86_REQUIRES[isa])]

KS = (0, 1, 2, 3, 7, 17, 57, 71)
# (1, -0.0): a beta of negative zero misses the common call's test on the bits
# (codegen._x86._PLAIN_CALL) and must still leave C, NaN here, unread.
ALPHA_BETA = ((1.0, 0.0), (-1.5, 0.0), (1.0, 1.0), (-0.75, 2.5), (0.5, -1.0), (1.0, -0.0))
EPS = {"f32": np.finfo(np.float32).eps, "f64": np.finfo(np.float64).eps}
NP = {"f32": np.float32, "f64": np.float64}
CT = {"f32": ctypes.c_float, "f64": ctypes.c_double}


# ---------------------------------------------------------------------------
# Operands that end at a guard page
# ---------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PAGE = mmap.PAGESIZE
PROT_NONE = 0  # the mmap module exports PROT_READ and PROT_WRITE only


class Guarded:
    """``n`` elements whose last one is the last byte before a PROT_NONE page."""

    def __init__(self, n: int, dtype: str):
        itemsize = np.dtype(NP[dtype]).itemsize
        body = -(-max(n * itemsize, 1) // PAGE) * PAGE
        self.size = body + PAGE
        addr = _libc.mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        self.base = addr
        assert _libc.mprotect(addr + body, PAGE, PROT_NONE) == 0
        self.addr = addr + body - n * itemsize
        buf = (CT[dtype] * max(n, 1)).from_address(self.addr if n else addr)
        self.array = np.ctypeslib.as_array(buf)[:n]

    def free(self) -> None:
        _libc.munmap(self.base, self.size)


def _store(dense: np.ndarray, ld: int, dtype: str, fill: float) -> tuple[Guarded, np.ndarray]:
    """A column-major rows x cols matrix with leading dimension ``ld``, as tight as the ABI allows."""
    rows, cols = dense.shape
    n = 0 if rows == 0 or cols == 0 else (cols - 1) * ld + rows
    g = Guarded(n, dtype)
    g.array[:] = fill
    for j in range(cols):
        g.array[j * ld: j * ld + rows] = dense[:, j]
    return g, np.array([j * ld + i for j in range(cols) for i in range(rows)], dtype=np.int64).reshape(cols, rows).T


def run_case(lib, spec: KernelSpec, K: int, alpha: float, beta: float, rng: np.random.Generator,
             pad: tuple[int, int, int]) -> tuple[bool, str]:
    dtype = spec.dtype
    mr, nr = spec.mr, spec.nr
    a_op = rng.standard_normal((mr, K))
    b_op = rng.standard_normal((K, nr))
    c_old = rng.standard_normal((mr, nr))
    # Storage shapes (column-major) for each transposition.
    a_st = a_op.T if spec.trans_a else a_op
    b_st = b_op.T if spec.trans_b else b_op
    lda = a_st.shape[0] + pad[0]
    ldb = b_st.shape[0] + pad[1]
    ldc = mr + pad[2]
    # NaN in the gaps between columns: a kernel that reads them poisons its result.
    A, _ = _store(a_st.astype(NP[dtype]), lda, dtype, np.nan)
    B, _ = _store(b_st.astype(NP[dtype]), ldb, dtype, np.nan)
    c_fill = np.nan if beta == 0 else c_old
    C, c_idx = _store(np.broadcast_to(c_fill, (mr, nr)).astype(NP[dtype]), ldc, dtype, 7.0)
    try:
        a64 = a_op.astype(NP[dtype]).astype(np.float64)
        b64 = b_op.astype(NP[dtype]).astype(np.float64)
        c64 = c_old.astype(NP[dtype]).astype(np.float64)
        ref = alpha * (a64 @ b64) + (beta * c64 if beta != 0 else 0.0)
        bound = 2 * (K + 2) * EPS[dtype] * (abs(alpha) * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c64))
        fn = getattr(lib, spec.name)
        fn.restype = None
        fn(ctypes.c_int64(K), ctypes.c_void_p(A.addr), ctypes.c_int64(lda), ctypes.c_void_p(B.addr),
           ctypes.c_int64(ldb), ctypes.c_void_p(C.addr), ctypes.c_int64(ldc), CT[dtype](alpha), CT[dtype](beta))
        got = C.array[c_idx].astype(np.float64)
        outside = np.ones(C.array.shape, bool)
        outside[c_idx.ravel()] = False
        where = f"K={K} lda={lda} ldb={ldb} ldc={ldc} alpha={alpha} beta={beta}"
        if not np.all(np.isfinite(got)):
            return False, f"non-finite result ({where})"
        err = np.abs(got - ref)
        if np.any(err > bound + np.finfo(np.float64).tiny):
            return False, f"max error {err.max():.3g} over bound {bound[err > bound].min():.3g} ({where})"
        if np.any(C.array[outside] != 7.0):
            return False, f"wrote outside the mr x nr block ({where})"
        return True, ""
    finally:
        A.free()
        B.free()
        C.free()


def check_kernels(lib, specs, seed: int, ks=KS, pads=((1, 3, 2), (0, 0, 0), (17, 5, 9))) -> list[str]:
    rng = np.random.default_rng(seed)
    failures = []
    for spec in specs:
        for K in ks:
            for n, (alpha, beta) in enumerate(ALPHA_BETA):
                ok, why = run_case(lib, spec, K, alpha, beta, rng, pads[(K + n) % len(pads)])
                if not ok:
                    failures.append(f"{spec.name}: {why}")
                    break
    return failures


# ---------------------------------------------------------------------------
# Which kernels the default run checks
# ---------------------------------------------------------------------------

def sample(isa: str, dtype: str, trans: str, seed: int = 7) -> list[KernelSpec]:
    """Tails and extremes of one family, one kernel at random, and the unroll remainders.

    Sides of 1, W - 1, W + 1 (masked vectors) and the largest blocks; an odd
    unroll (3) and no unroll (1) exercise the remainder loops.
    """
    specs = family(isa, dtype, trans)
    w = register_file(isa).lanes(dtype)
    shapes = {(s.mr, s.nr): s for s in specs}

    def longest(m=None, n=None):
        row = [(mm, nn) for (mm, nn) in shapes if (m is None or mm == m) and (n is None or nn == n)]
        return max(row, key=lambda mn: (mn[0] * mn[1], mn)) if row else None

    picks = {
        longest(),  # the largest block
        longest(m=1),  # one row, as wide as the budget allows
        longest(n=1),  # one column, as tall as it allows
        (w - 1, 2) if (w - 1, 2) in shapes else None,  # a masked vector
        # Just over one vector: a full vector plus a masked one.
        longest(m=min((m for m, _ in shapes if m > w), default=0)),
        longest(n=min((n for _, n in shapes if n > w), default=0)),
    }
    picks.discard(None)
    rnd = random.Random(f"{seed}{isa}{dtype}{trans}")
    rest = sorted(set(shapes) - picks)
    picks |= set(rnd.sample(rest, min(1, len(rest))))
    chosen = [shapes[key] for key in sorted(picks)]
    ta, tb = trans[0] == "t", trans[1] == "t"
    mid = chosen[len(chosen) // 2]
    chosen.append(KernelSpec(isa, dtype, mid.mr, mid.nr, ta, tb, "", 3))
    chosen.append(KernelSpec(isa, dtype, 1, 1, ta, tb, "", 1))
    return chosen


def _samples(isas) -> list[KernelSpec]:
    return [s for isa in isas for d in DTYPES for t in TRANSPOSITIONS for s in sample(isa, d, t)]


@pytest.fixture(scope="module")
def sampled_libs(tmp_path_factory):
    libs = {}
    for isa in RUNNABLE:
        built = build_probe_library(_samples([isa]), tmp_path_factory.mktemp(f"lib_{isa}"))
        libs[isa] = (built.load(), built.specs)
    return libs


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("isa", X86)
def test_sample_compiles_with_toolchain_flags(isa, sampled_libs, tmp_path):
    # -Wall -Wextra -Werror are part of cflags(): a warning fails the build.
    # The runnable ISAs were built (all dtypes and transpositions) by the fixture.
    if isa in sampled_libs:
        assert len(sampled_libs[isa][1]) >= 8 * 5
    else:
        build_probe_library(_samples([isa]), tmp_path)


@pytest.mark.parametrize("isa", RUNNABLE)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", TRANSPOSITIONS)
def test_sampled_kernels_compute_gemm(sampled_libs, isa, dtype, trans):
    lib, specs = sampled_libs[isa]
    mine = [s for s in specs if s.dtype == dtype and s.trans == trans]
    assert mine
    failures = check_kernels(lib, mine, seed=zlib.crc32(f"{isa}{dtype}{trans}".encode()))
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("isa", [isa for isa in RUNNABLE if isa != "generic"])
def test_dot_kernels_sum_any_number_of_accumulators(isa, tmp_path):
    """The dot kernels' horizontal sums fold W accumulators per vector of sums
    (_x86._fold_sums): counts just below, at and above multiples of W, in several
    vectors of sums, with the lanes of absent accumulators folded as zeros."""
    specs = []
    for dtype in DTYPES:
        w = register_file(isa).lanes(dtype)
        by_count = {}
        for s in family(isa, dtype, "tn"):  # tn is the family of dot kernels
            by_count.setdefault(s.mr * s.nr, s)
        want = {1, w - 1, w, w + 1, 2 * w - 1, 2 * w + 1, max(by_count)}
        specs += [by_count[c] for c in sorted(want & set(by_count))]
        assert len(want & set(by_count)) >= 4, (dtype, sorted(by_count))
    for spec in specs:
        text = generate(spec).text
        assert "sums[" in text and "reduce_add" not in text, spec.name
    lib = build_probe_library(specs, tmp_path).load()
    failures = check_kernels(lib, specs, seed=zlib.crc32(isa.encode()))
    assert not failures, "\n".join(failures[:10])


def test_checker_catches_a_wrong_kernel(tmp_path):
    """The numerical check must be able to fail: a kernel with its alpha ignored is caught."""
    spec = KernelSpec("generic", "f32", 3, 2, unroll=2)
    text = generate(spec).text.replace("alpha * c[0][j][i] + beta", "c[0][j][i] + beta")
    path = tmp_path / "broken.c"
    path.write_text(text)
    so = tmp_path / "broken.so"
    subprocess.run([*find_cc(), *cflags("generic"), "-shared", str(path), "-o", str(so)], check=True)
    failures = check_kernels(ctypes.CDLL(str(so)), [spec], seed=1, ks=(7,))
    assert failures and "bound" in failures[0]


@pytest.mark.parametrize("isa", X86)
def test_source_shape(isa):
    spec = family(isa, "f32", "nn")[-1]
    src = generate(spec)
    assert isinstance(src, GeneratedSource)
    assert src.language == "c" and src.filename == spec.name + ".c"
    text = src.text
    assert text.startswith(f"/* Generated by autotune.codegen.{isa} from\n *   {spec!r}")
    assert "Do not edit" in text
    includes = re.findall(r"#include <([^>]+)>", text)
    assert includes == (["stdint.h"] if isa == "generic" else ["stdint.h", "immintrin.h"])
    signature = (f"void {spec.name}(int64_t K,", "const float *restrict A, int64_t lda,",
                 "const float *restrict B, int64_t ldb,", "float *restrict C, int64_t ldc,",
                 "float alpha, float beta)")
    for part in signature:
        assert part in text
    if isa == "generic":
        assert "_mm" not in text and "#error" not in text
    else:
        assert "#error" in text
    for word in ("TODO", "FIXME"):
        assert word not in text


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_feature_guard_stops_a_build_without_the_isa_flags(isa, tmp_path):
    src = generate(family(isa, "f64", "nt")[0])
    path = tmp_path / src.filename
    path.write_text(src.text)
    proc = subprocess.run([*find_cc(), "-O2", "-c", str(path), "-o", str(tmp_path / "x.o")],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "compile it with the" in proc.stderr


def test_tails_use_masked_memory_operations():
    text = generate(KernelSpec("avx512", "f32", 13, 4, unroll=4)).text
    assert "_mm512_maskz_loadu_ps" in text and "_mm512_mask_storeu_ps" in text
    text = generate(KernelSpec("avx512", "f64", 3, 3, True, False, unroll=2)).text
    assert "_mm512_maskz_loadu_pd" in text  # the K tail of a dot-product kernel


@pytest.mark.parametrize("dtype, mr, call", [
    ("f64", 3, "at_load_first_pd(a, 3)"), ("f32", 3, "at_load_first_ps128(a, 3)"),
    ("f32", 7, "at_load_first_ps(a, 7)"), ("f32", 11, "at_load_first_ps(a + 8, 3)"),
    ("f32", 13, "at_load_first_ps(a + 8, 5)"), ("f64", 7, "at_load_first_pd(a + 4, 3)")])
def test_avx2_moves_partial_columns_in_pieces_without_a_mask(dtype, mr, call):
    """AVX2 loads and stores a column's last rows as 4-, 2- and 1-lane pieces, never
    vmaskmov: microcoded on AMD Zen 1-3, where a 3x3 fp32 kernel ran at 6 GFLOPS with
    masked loads of A and 16 in pieces (Vocabulary.in_pieces)."""
    text = generate(KernelSpec("avx2", dtype, mr, 4, unroll=4)).text
    assert call in text
    suffix = "ps" if dtype == "f32" else "pd"
    assert re.search(rf"at_store_first_{suffix}(128)?\(C \+ 3 \* ldc", text)
    assert not re.search(r"maskload|maskstore|tail =|_mm256_setr_epi(32|64x)\(-1", text)
    text = generate(KernelSpec("avx2", "f32", 16, 2, unroll=4)).text
    assert "_first_" not in text  # whole vectors: no tail, no helper


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_avx2_dot_kernels_load_the_k_tail_in_pieces(dtype):
    """The TN kernels' last K % lanes values, a count known at run time, load in pieces
    too: with vmaskmov, fp32 TN 3x3 took 50 ns a call at K = 4 on Zen 1 and 27 at K = 8;
    in pieces 28 at K = 4."""
    text = generate(KernelSpec("avx2", dtype, 3, 3, True, False, unroll=2)).text
    suffix = "ps" if dtype == "f32" else "pd"
    assert f"a0 = at_load_first_{suffix}(a, (int)(K - p));" in text
    assert f"x = at_load_first_{suffix}(b + 2 * ldb, (int)(K - p));" in text
    assert not re.search(r"maskload|cmpgt|rest =", text)


def test_columns_are_held_in_the_narrowest_vector_that_fits():
    """A column of C (NN, NT) in an xmm, ymm or zmm, whichever is the narrowest that
    holds it: a wider vector masked to the rows made 1-4 row kernels up to 1.17x
    slower (codegen._x86.vector_bits).  An exact fit needs no mask, nor do one or two
    fp32 lanes or one fp64 lane (Vocabulary.exact)."""
    def text(isa, dtype, mr, nr=4):
        return generate(KernelSpec(isa, dtype, mr, nr, unroll=8)).text

    for isa in ("avx2", "avx512"):
        exact = text(isa, "f32", 4)
        assert "__m128 c0_0_0" in exact and "tail" not in exact and "__m256" not in exact
        exact = text(isa, "f64", 2)
        assert "__m128d c0_0_0" in exact and "tail" not in exact
    partial = text("avx2", "f32", 3)
    assert "at_load_first_ps128(a, 3)" in partial  # the xmm's own pieces
    assert "at_store_first_ps128(C, c0_0_0, 3);" in partial
    assert "_mm_maskz_loadu_ps(tail, a)" in text("avx512", "f32", 3)
    # One or two fp32 rows, or one fp64 row, move by movss / movq / movsd: no mask at all.
    for isa in ("avx2", "avx512"):
        two = text(isa, "f32", 2)
        assert "_mm_loadl_epi64((const __m128i *)(a))" in two and "_mm_storel_pi((__m64 *)(C), c0_0_0);" in two
        one = text(isa, "f32", 1)
        assert "_mm_load_ss(a)" in one and "_mm_store_ss(C, c0_0_0);" in one
        one = text(isa, "f64", 1)
        assert "_mm_load_sd(a)" in one and "_mm_store_sd(C, c0_0_0);" in one
        masks = re.compile(r"maskz?_?(load|store)|__mmask|tail =|_first_")
        assert not any(masks.search(t) for t in (two, one, text(isa, "f32", 1)))
    assert "__m256 c0_0_0" in text("avx512", "f32", 5) and "__m512 c0_0_0" in text("avx512", "f32", 9)
    assert "__m256d c0_0_0" in text("avx2", "f64", 3)


@pytest.mark.parametrize("name", ["at_sgemm_avx512_nn_16x12_u4", "at_sgemm_avx512_nn_32x8_u4",
                                  "at_sgemm_avx512_nn_48x6_u4", "at_dgemm_avx512_nn_24x6_u4",
                                  "at_sgemm_avx512_tn_4x6_u2", "at_sgemm_avx2_nn_8x12_u4",
                                  "at_sgemm_avx2_nn_16x4_u4",
                                  # One column, as many sums as registers allow (gcc spilled
                                  # one a K step while the column's vectors were pinned too).
                                  "at_sgemm_avx512_nn_256x1_u1", "at_dgemm_avx512_nn_128x1_u1",
                                  "at_sgemm_avx2_nn_96x1_u1"])
def test_k_loop_keeps_vectors_in_registers(name, tmp_path):
    """No vector register is spilled to or reloaded from the stack inside a loop."""
    asm = _assembly(name, tmp_path)
    stack_vec = re.compile(r"[xyz]mm\d+.*\(%r[sb]p\)|\(%r[sb]p\).*[xyz]mm")
    for label, body in _loops(asm):
        assert not [x for x in body if stack_vec.search(x)], f"spill in the loop at {label}"


def _assembly(name: str, tmp_path) -> list[str]:
    """The kernel's source compiled with its target's flags, as assembly lines."""
    spec = KernelSpec.from_name(name)
    src = generate(spec)
    path = tmp_path / src.filename
    path.write_text(src.text)
    return subprocess.run([*find_cc(), *cflags(spec.isa), "-S", str(path), "-o", "-"],
                          capture_output=True, text=True, check=True).stdout.splitlines()


UPPER_HALVES_NAMES = ["at_sgemm_avx512_nn_48x8_u4", "at_dgemm_avx512_tn_2x14_u2",
                      "at_sgemm_avx512_tt_4x32_u2", "at_sgemm_avx2_nn_16x4_u4",
                      "at_dgemm_avx2_tn_3x3_u1", "at_dgemm_avx512_nn_3x2_gather_u4"]


def _install_assembly(name: str, tmp_path, extra: tuple[str, ...] = ()) -> list[str]:
    """The kernel as assembly under the flags the install compiles it with, plus ``extra``."""
    spec = KernelSpec.from_name(name)
    src = generate(spec)
    path = tmp_path / src.filename
    path.write_text(src.text)
    # The install's flags (toolchain.target_for), written out so that a host capped
    # below the ISA (AUTOTUNE_ISA) or without it still compiles the kernel.
    flags = cflags(spec.isa)
    if "clang" not in toolchain.compiler_identity(find_cc()).lower():
        flags = flags[:1] + toolchain.GCC_VECTOR_FLAGS + flags[1:]
    if spec.isa in RUNNABLE and spec.isa in toolchain.native_isas(host.detect()):
        wanted = set(toolchain.target_for(spec.isa, host.detect()).cflags) - {toolchain.UPPER_HALVES_FREE_FLAG}
        assert set(flags) >= wanted
    return subprocess.run([*find_cc(), *flags, *extra, "-S", str(path), "-o", "-"],
                          capture_output=True, text=True, check=True).stdout.splitlines()


@pytest.mark.parametrize("name", UPPER_HALVES_NAMES)
def test_kernels_return_with_the_upper_halves_cleared(name, tmp_path):
    """Every return of a vector kernel follows a vzeroupper, under the flags the
    install compiles with (GCC's own vzeroupper pass is off under them): the
    runtime and the harness that call kernels are SSE code, which on Intel cores
    runs several times slower after 256- or 512-bit code left the upper halves dirty."""
    rets = 0
    since_clear = False
    for line in _install_assembly(name, tmp_path):
        op = line.split()[0] if line.split() else ""
        if op == "vzeroupper":
            since_clear = True
        elif op == "ret":
            assert since_clear, f"{name}: a ret with no vzeroupper before it"
            rets += 1
        elif re.match(r"^\w+:", line):  # a function's own label starts a new body
            since_clear = False
        elif op.startswith("v") and since_clear and re.search(r"%[yz]mm", line):
            since_clear = False  # wide code after the clear dirties the halves again
    assert rets >= 1


@pytest.mark.parametrize("name", UPPER_HALVES_NAMES[3:5])
def test_kernels_leave_the_upper_halves_where_the_cpu_measured_them_free(name, tmp_path):
    """Compiled for a CPU whose SSE code measured no cost after dirty halves
    (toolchain.upper_halves), a kernel has no vzeroupper: on Zen 1 it cost a
    2x2x2 call a fifth of its time."""
    asm = _install_assembly(name, tmp_path, (toolchain.UPPER_HALVES_FREE_FLAG,))
    assert any(line.split()[:1] == ["ret"] for line in asm)
    assert not [line for line in asm if "vzeroupper" in line]


def _loops(asm: list[str]) -> list[tuple[str, list[str]]]:
    """(label, lines) of every loop of an assembly listing: a backward jump's span."""
    labels, loops = {}, []
    for i, line in enumerate(asm):
        label = re.match(r"^(\.L\d+):", line)
        if label:
            labels[label.group(1)] = i
        jump = re.match(r"\s+j\w+\s+(\.L\d+)", line)
        if jump and labels.get(jump.group(1), i) < i:
            loops.append((jump.group(1), asm[labels[jump.group(1)]:i]))
    return loops


@pytest.mark.parametrize("name", ["at_sgemm_avx512_nn_64x3_u1", "at_sgemm_avx512_nn_32x6_u1",
                                  "at_dgemm_avx512_nn_13x13_u1", "at_sgemm_avx2_nn_16x4_u1",
                                  "at_sgemm_avx512_tt_6x32_u1"])
def test_multi_vector_steps_load_each_vector_once(name, tmp_path):
    """With several vectors per K step, no FMA reads a whole vector from memory: each
    vector is loaded once and reused by every broadcast (gcc folds the loads into
    the FMAs otherwise, reading each vector nb times)."""
    asm = _assembly(name, tmp_path)
    store = re.compile(r"\s+v?mov\w*\s+%[xyz]mm\d+, .*\(")
    # The K loop broadcasts op(B) and stores nothing (the epilogue, which a
    # backward jump may also span, stores C).
    k_loops = [body for _, body in _loops(asm)
               if any("vbroadcasts" in x or "{1to" in x for x in body)
               and not any(store.match(x) for x in body)]
    fmas = [line for body in k_loops for line in body if "vfmadd" in line]
    assert fmas
    folded = [line for line in fmas if "(%" in line and "{1to" not in line]
    assert not folded, folded[:3]


def test_dispatch_is_by_isa_name():
    assert generator_module("avx512").__name__ == "autotune.codegen.avx512"
    with pytest.raises(ValueError, match="no kernel generator"):
        generate(KernelSpec("nosuchisa", "f32", 8, 4))
    with pytest.raises(ValueError):
        generate(KernelSpec("bench", "f32", 8, 4))
    with pytest.raises(ValueError):
        generate(KernelSpec("avx512", "f32", 64, 16))  # does not fit
    with pytest.raises(ValueError):
        GeneratedSource(KernelSpec("avx512", "f32", 8, 4), "", "fortran")
    assert GeneratedSource(KernelSpec("avx512", "f32", 8, 4), "", "asm").filename.endswith("_u1.S")


@pytest.mark.slow
@pytest.mark.parametrize("isa", RUNNABLE)
def test_whole_family(isa, tmp_path):
    """Every kernel of the family through the install's own path: unit builds, then the
    harness's validation (guard pages, NaN padding, nine depths, four alpha/beta pairs)."""
    from autotune import build, measure
    from autotune.host import detect
    from autotune.toolchain import target_for

    target = target_for(isa, detect())
    specs = [s for d in DTYPES for t in TRANSPOSITIONS for s in family(isa, d, t)]
    built = build.build_kernels(target, [generate(s) for s in specs], home=tmp_path)
    assert not built.failures, list(built.failures.items())[:3]
    harness = build.build_harness(target, list(built.objects.values()), home=tmp_path)
    results = measure.validate(harness, target, [s.name for s in specs])
    failures = [f"{n}: {r.reason}" for n, r in results.items() if not r.ok]
    assert not failures, f"{len(failures)} failing kernels:\n" + "\n".join(failures[:20])



@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_avx512_row_blocks_store_each_column_at_the_narrowest_width(dtype):
    """TT blocks store C's columns through registers no wider than a column: a zmm
    store masked to one lane cost Zen 4 ~10 cycles, and a zmm value cast down and
    stored masked compiles to vextractf64x4 to memory, which faulted there on its
    masked-off lanes past a page's end."""
    lanes = 16 if dtype == "f32" else 8
    for mr, expect in ((1, "_mm_store_s"), (2, "_mm_storel_pi(" if dtype == "f32" else "_mm_storeu_"),
                       (3, "_mm_mask_storeu_" if dtype == "f32" else "_mm256_mask_storeu_"),
                       (lanes // 2, "_mm256_storeu_"), (lanes - 1, "_mm512_mask_storeu_")):
        text = generate(KernelSpec("avx512", dtype, mr, 5, True, True)).text
        epilogue = text[text.rindex("if (beta == 0)"):]
        assert expect in epilogue, (mr, expect)
        assert not re.search(r"_mask_storeu_p[sd]\([^,]*, [^,]*, _mm512_cast", epilogue), mr
        assert not re.search(r"_storeu?_[ps][sd]\([^,]*, _mm512_cast", epilogue), mr
