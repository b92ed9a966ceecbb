"""The SME2 quantised kernels wired into the aarch64 library's ``at_qmatmul_f32``, under QEMU.

An SME2 target's library (autotune.link.build_arm_runtime) links the kernels of
autotune/codegen/quant_sme2.py and runs them on weights (4- and 8-bit) that carry an SME2
form (``at_qweights.sme2_*``) packed for the thread's streaming vector length
(``at_qsme2_svl()``).  kernels_src/harness/qharness.c runs the library on cases
written here; C is compared with :func:`autotune.quant.reference_qmatmul` within
:func:`autotune.quant.scaling_error_bound` (bias and clamp applied to both):

* the library's own choice on ``-cpu max,sme=on,sme512=on`` (slow: SVL 128 and
  2048) with the form packed for the SVL the driver reports, on odd shapes (M = 1,
  2, 15, 16, 17, 33; N = 1, 5, 4VL - 1, 4VL + 1; K not a multiple of the block;
  NaN in A; bias and clamp; ldc > N), symmetric and asymmetric, and QEMU's
  translation log showing that the SME2 kernels ran (and the NEON ones did not);
* the SME2 kernels forced by name, and refused for weights without a usable form;
* weights packed for another SVL: right answers through the NEON kernels;
* cortex-a76 (no SME2) with SME2-form weights: right answers, no SIGILL;
* the threaded SME2 path (AUTOTUNE_NUM_THREADS = 2, 3) bit for bit one thread's, at
  SVL 512 and 128, on shapes that give every count its threads.

The Python side (the form's cache, the ctypes struct in step with autotune.h) is
tested without QEMU.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune import qsuite, quant
from autotune.home import kernels_src
from autotune.host import HostInfo
from autotune.link import build_arm_runtime, default_params
from autotune.runtime import qapi
from autotune.toolchain import Target, arm_target

from .test_quant_arm import AT_ENOKERNEL, AT_OK, _check, _run, arm_or_skip, harness_with_library

X86 = HostInfo(arch="x86_64", os="linux", cpu="AMD EPYC", features=())
#: Kinds of weights: (bits, symmetric).
KINDS = {"q4s": (4, True), "q4a": (4, False), "q8": (8, True)}
SME2_KERNELS = tuple(f"at_{kind}_sme2_{form}" for kind in KINDS for form in ("1vlx4vl", "1x4vl"))


def _sme_cpu(svl: int) -> str:
    return f"max,sme=on,sme{svl}=on"


# --------------------------------------------------------------------------- Python side


def test_sme2_form_is_packed_once_per_svl_and_not_saved(tmp_path):
    rng = np.random.default_rng(3)
    w = quant.quantize_weights(rng.standard_normal((70, 9)).astype(np.float32), 4, 32, False)
    form = w.sme2(512)
    assert w.sme2(512) is form and w.sme2(128) is not form and w.sme2(128).svl_bits == 128
    ref = quant.pack_sme2(w, 512)
    assert (form.codes == ref.codes).all() and (form.scales == ref.scales).all()
    loaded = quant.QuantizedWeights.load(w.save(tmp_path / "w.npz"))
    assert set(np.load(tmp_path / "w.npz").files) == set(w.arrays())  # the form is not saved
    assert (loaded.sme2(512).codes == form.codes).all()


def test_weights_struct_fills_the_sme2_form_only_for_a_reported_svl():
    rng = np.random.default_rng(5)
    w4 = quant.quantize_weights(rng.standard_normal((64, 5)).astype(np.float32), 4, 32, True)
    plain = qapi.weights_struct(w4)
    assert not plain.sme2_codes and not plain.sme2_scales and plain.sme2_svl == 0
    ws = qapi.weights_struct(w4, 256)
    assert ws.sme2_svl == 256 and ws.sme2_codes == w4.sme2(256).codes.ctypes.data
    assert ws.sme2_scales == w4.sme2(256).scales.ctypes.data
    w8 = quant.quantize_weights(rng.standard_normal((64, 5)).astype(np.float32), 8, 32, True)
    ws8 = qapi.weights_struct(w8, 256)
    assert ws8.sme2_svl == 256 and ws8.sme2_codes == w8.sme2(256).codes.ctypes.data
    assert w8.sme2(256).bits == 8 and w8.sme2(256).scales.shape == (1, 32)  # one scale per column


def test_ctypes_struct_matches_autotune_h(tmp_path):
    """Every field of qapi.at_qweights at the offset the C compiler gives it."""
    fields = [name for name, _ in qapi.at_qweights._fields_]
    body = "".join(f'    printf("{f} %zu\\n", offsetof(at_qweights, {f}));\n' for f in fields)
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "autotune.h"\nint main(void)\n{\n'
                   f'{body}    printf("sizeof %zu\\n", sizeof(at_qweights));\n    return 0;\n}}\n')
    exe = tmp_path / "layout"
    cc = subprocess.run(["cc", "-std=c11", f"-I{kernels_src() / 'include'}", str(src), "-o", str(exe)],
                        capture_output=True, text=True)
    if cc.returncode:
        pytest.skip(f"no host C compiler (cc): {cc.stderr[-300:]}")
    seen = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                         check=True).stdout.splitlines())
    for f in fields:
        assert int(seen[f]) == getattr(qapi.at_qweights, f).offset, f
    assert int(seen["sizeof"]) == ctypes.sizeof(qapi.at_qweights)


# --------------------------------------------------------------------------- under QEMU


def _target(svl: int = 512) -> Target:
    return arm_or_skip("sme2", svl)


@pytest.fixture(scope="module")
def sme2_qharness(tmp_path_factory) -> tuple[Target, Path]:
    return harness_with_library(_target(), tmp_path_factory.mktemp("qsme2lib"))


def _qemu(target: Target, cpu: str) -> list[str]:
    return [*target.runner[:-1], cpu]


def _driver_svl(target: Target, exe: Path, cpu: str) -> int:
    done = subprocess.run([*_qemu(target, cpu), str(exe), "svl"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def _cases(kind: str, svl: int) -> list[tuple[str, np.ndarray, quant.QuantizedWeights, dict]]:
    """Odd shapes for VL = svl / 32: every M of the docstring against N = 1, 5, 4VL +- 1,
    K not a multiple of the block, a NaN row, bias and clamp, ldc > N; seeded."""
    rng = np.random.default_rng(29)
    width = 4 * (svl // 32)
    ns = (1, 5, width - 1, width + 1)
    ks = ((50, 32), (96, 32), (200, 64), (129, 128))
    cases = []
    for i, m in enumerate((1, 2, 15, 16, 17, 33, 1, 17)):
        n, (k, block) = ns[i % len(ns)], ks[i % len(ks)]
        A = rng.standard_normal((m, k)).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        if not KINDS[kind][1]:
            W[:, ::2] += 1.5  # off-centre columns: zero points away from 8
        opts: dict = {}
        if i % 3 == 1:
            A[m // 2, k - 1] = np.nan  # in the last (partial) block
        if i % 2 == 1:
            opts["bias"] = rng.standard_normal(n).astype(np.float32)
        if i % 4 == 2:
            opts["clamp"] = (-2.0, 1.5)
        if i % 3 == 0:
            opts["ldc"] = n + 3
        w = quant.quantize_weights(W, KINDS[kind][0], block, KINDS[kind][1])
        cases.append((f"{kind} M={m} K={k} N={n} block={block} {sorted(opts)}", A, w, opts))
    return cases


def _check_case(C: np.ndarray, A: np.ndarray, w: quant.QuantizedWeights, opts: dict) -> str | None:
    if "bias" not in opts and "clamp" not in opts:
        return _check(C, A, w)
    want = quant.reference_qmatmul(A, w, opts.get("bias"), opts.get("clamp"))
    bound = quant.scaling_error_bound(A, w).astype(np.float64)
    if "bias" in opts:  # one more rounding, of |C + bias|
        bound = bound + np.abs(want.astype(np.float64)) * np.finfo(np.float32).eps
    return qsuite._check(C, want, bound)


def _translated(target: Target, exe: Path, cpu: str, inp: Path, out: Path, log: Path) -> set[str]:
    """The quantised kernels' symbols QEMU translated (so reached) while qharness ran ``inp``."""
    done = subprocess.run([*_qemu(target, cpu), "-d", "in_asm", "-D", str(log), str(exe), str(inp), str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-800:]
    symbols = set(re.findall(r"^IN: (\S+)", log.read_text(errors="replace"), re.M))
    # A block inside a kernel may be named after its streaming entry <name>_s (same code).
    return {s.removesuffix("_s") if "_sme2_" in s else s for s in symbols
            if s.startswith(("at_q4s_", "at_q4a_", "at_q8_"))}


def _library_choice(svl: int, sme2_qharness, work: Path) -> None:
    target, exe = sme2_qharness
    cpu = _sme_cpu(svl)
    assert _driver_svl(target, exe, cpu) == svl
    calls, labels = [], []
    for kind in KINDS:
        for label, A, w, opts in _cases(kind, svl):
            calls.append(("", A, w, {**opts, "sme2": w.sme2(svl)}))
            labels.append(label)
    problems = []
    for label, (_, A, w, opts), (status, C) in zip(labels, calls, _run(target, exe, cpu, calls, work)):
        if status != AT_OK:
            problems.append(f"{label}: status {status}")
        elif (problem := _check_case(C, A, w, opts)) is not None:
            problems.append(f"{label}: {problem}")
    assert not problems, f"SVL {svl}:\n" + "\n".join(problems[:10])
    # Which kernels ran: the SME2 block and GEMV of both kinds, no NEON kernel.
    ran = _translated(target, exe, cpu, work / f"in-{cpu}.bin", work / "out-log.bin", work / "qemu.log")
    assert ran == set(SME2_KERNELS), ran


@pytest.mark.arm
def test_library_choice_runs_the_sme2_kernels_at_svl_512(sme2_qharness, tmp_path):
    _library_choice(512, sme2_qharness, tmp_path)


@pytest.mark.arm
@pytest.mark.slow
@pytest.mark.parametrize("svl", [128, 256, 1024, 2048])
def test_library_choice_runs_the_sme2_kernels_at_other_svls(sme2_qharness, tmp_path, svl):
    _library_choice(svl, sme2_qharness, tmp_path)


#: kernels_src/runtime/qgemm.c's MACS_PER_THREAD: the least work the library gives a thread.
MACS_PER_THREAD = 1 << 22
THREADS = (1, 2, 3)


def _thread_cases(svl: int) -> list[tuple[str, np.ndarray, quant.QuantizedWeights, dict]]:
    """Shapes big enough for 3 threads, N never a multiple of the panel (4VL columns): M = 1
    (the GEMV), a partial row tile (5 rows: the block kernel at SVL 512; a tile and a GEMV
    row at SVL 128), several tiles with a partial one (40) and tiles with a GEMV row (33);
    both kinds, with bias, clamp and ldc > N on some; seeded."""
    rng = np.random.default_rng(31)
    width = 4 * (svl // 32)
    cases = []
    for i, (m, k, n, block) in enumerate(((1, 4096, 3100, 32), (5, 1024, 2500, 64), (40, 300, 1000, 64),
                                          (33, 200, 1800, 32))):
        assert n % width, n
        w_f = rng.standard_normal((k, n)).astype(np.float32)
        for kind, (bits, symmetric) in KINDS.items():
            W = w_f if symmetric else w_f + np.float32(1.5) * (np.arange(n) % 2 == 0)
            w = quant.quantize_weights(W.astype(np.float32), bits, block, symmetric)
            macs = m * w.padded_k * -(-n // width) * width
            assert macs >= max(THREADS) * MACS_PER_THREAD, (m, k, n)  # every count splits the columns
            opts: dict = {}
            if i % 2:
                opts["bias"] = rng.standard_normal(n).astype(np.float32)
            if i >= 2:
                opts["clamp"] = (-3.0, 2.5)
            if i == 3:
                opts["ldc"] = n + 5
            A = rng.standard_normal((m, k)).astype(np.float32)
            cases.append((f"{kind} M={m} K={k} N={n} block={block} {sorted(opts)}", A, w, opts))
    return cases


def _threads_agree(svl: int, sme2_qharness, work: Path) -> None:
    target, exe = sme2_qharness
    cpu = _sme_cpu(svl)
    assert _driver_svl(target, exe, cpu) == svl
    cases = _thread_cases(svl)
    calls = [("", A, w, {**opts, "sme2": w.sme2(svl)}) for _, A, w, opts in cases]
    outputs = {}
    for threads in THREADS:
        run = work / f"t{threads}"
        run.mkdir()
        log = run / "strace.log"
        results = _run(target, exe, cpu, calls, run,
                       ("-E", f"AUTOTUNE_NUM_THREADS={threads}", "-d", "strace", "-D", str(log)))
        # The pool's workers are started (clone) on the first region of more than one thread.
        clones = len(re.findall(r"\bclone\(", log.read_text(errors="replace")))
        assert clones == threads - 1, (threads, clones)
        assert [s for s, _ in results] == [AT_OK] * len(calls)
        outputs[threads] = [C for _, C in results]
    problems = []
    for (label, A, w, opts), C in zip(cases, outputs[1]):
        if (problem := _check_case(C, A, w, opts)) is not None:
            problems.append(f"{label}: {problem}")
    for threads in THREADS[1:]:
        for (label, *_), one, many in zip(cases, outputs[1], outputs[threads]):
            if not np.array_equal(one.view(np.uint32), many.view(np.uint32)):
                bad = np.argwhere(one.view(np.uint32) != many.view(np.uint32))
                problems.append(f"{label}, {threads} threads: {len(bad)} elements differ from one thread's, "
                                f"first at (row, column) {tuple(bad[0].tolist())}")
    assert not problems, f"SVL {svl}:\n" + "\n".join(problems[:10])


@pytest.mark.arm
@pytest.mark.parametrize("svl", [512, 128])
def test_threaded_sme2_path_is_bitwise_one_threads(sme2_qharness, tmp_path, svl):
    """AUTOTUNE_NUM_THREADS = 1, 2, 3 on the library's choice: each thread calls the SME2
    kernels on a run of whole panels, so C is bit for bit one thread's, and within the bound."""
    _threads_agree(svl, sme2_qharness, tmp_path)


#: qharness behind a prologue: the pool's worker is started (by a NEON-path call, weights
#: without an SME2 form) while the main thread's SVL is 256, so it keeps 256; the main
#: thread then goes back to 512 and runs the cases on 2 threads.
_OTHER_SVL_WORKER = r"""
#define _GNU_SOURCE
#include <sys/prctl.h>
#define main qharness_main
#include "qharness.c"
#undef main
#ifndef PR_SME_SET_VL
#define PR_SME_SET_VL 63
#endif

int main(int argc, char **argv)
{
    if (prctl(PR_SME_SET_VL, 32) != 32 || at_qsme2_svl() != 256) return fprintf(stderr, "no SVL 256\n"), 9;
    enum { M = 16, K = 4096, N = 256 }; /* 2^24 multiply-adds: two threads on the NEON path */
    static uint8_t codes[N / 8 * (K / 32) * 128];
    static float scales[N / 8 * (K / 32) * 8], A[M * K], C[M * N];
    const at_qweights w = {4, 1, K, N, 32, codes, scales, NULL, NULL, NULL, 0};
    at_set_num_threads(2);
    if (at_qmatmul_f32(M, A, K, &w, NULL, NULL, C, N) != AT_OK) return fprintf(stderr, "warm-up failed\n"), 9;
    if (prctl(PR_SME_SET_VL, 64) != 64 || at_qsme2_svl() != 512) return fprintf(stderr, "no SVL 512\n"), 9;
    return qharness_main(argc, argv);
}
"""


@pytest.mark.arm
def test_a_worker_at_another_svl_leaves_its_panels_to_the_caller(sme2_qharness, tmp_path):
    """A pool worker started at SVL 256 and a caller at 512 with the 512 form: the worker's
    share is computed by the caller, so C is still bit for bit one thread's."""
    target, exe = sme2_qharness
    cpu = "max,sme=on,sme256=on,sme512=on"
    src = tmp_path / "other_svl.c"
    src.write_text(_OTHER_SVL_WORKER)
    prog = tmp_path / "other_svl"
    kernels = kernels_src()
    march = [f for f in target.base_cflags if f.startswith(("-march", "-mcpu"))]
    archive = exe.parent / "lib" / "libautotune.a"
    assert archive.is_file(), archive
    subprocess.run([*target.cc, "-std=c11", "-O2", *march, f"-I{kernels / 'include'}", f"-I{kernels / 'runtime'}",
                    f"-I{kernels / 'harness'}", str(src), str(archive), *target.ldflags, "-pthread", "-lm", "-o",
                    str(prog)], check=True, capture_output=True, text=True)
    cases = _thread_cases(512)
    calls = [("", A, w, {**opts, "sme2": w.sme2(512)}) for _, A, w, opts in cases]
    (tmp_path / "one").mkdir()
    one = _run(target, exe, cpu, calls, tmp_path / "one", ("-E", "AUTOTUNE_NUM_THREADS=1"))
    log = tmp_path / "strace.log"
    two = _run(target, prog, cpu, calls, tmp_path, ("-d", "strace", "-D", str(log)))
    assert len(re.findall(r"\bclone\(", log.read_text(errors="replace"))) == 1  # the worker, at SVL 256
    for (label, A, w, opts), (s1, c1), (s2, c2) in zip(cases, one, two):
        assert s1 == s2 == AT_OK, label
        assert _check_case(c1, A, w, opts) is None, label
        assert np.array_equal(c1.view(np.uint32), c2.view(np.uint32)), label


@pytest.mark.arm
def test_kernel_names_list_the_sme2_kernels_after_the_registry(sme2_qharness):
    target, exe = sme2_qharness
    done = subprocess.run([*_qemu(target, "cortex-a76"), str(exe), "names"], capture_output=True, text=True,
                          timeout=60)
    names = done.stdout.split()
    assert names[-len(SME2_KERNELS):] == list(SME2_KERNELS)
    assert not any("_sme2_" in n for n in names[:-len(SME2_KERNELS)]) and any("_i8mm_" in n for n in names)


@pytest.mark.arm
def test_forced_sme2_kernels_and_every_fallback(sme2_qharness, tmp_path):
    """Forced by name: right answers with a usable form (the block kernel over every row,
    partial tiles included; the GEMV row by row); refused (AT_ENOKERNEL) for weights
    without a form, packed for another SVL, or of another kind.  The library's choice with a form
    for another SVL, or on cortex-a76 (no SME2) with the right form: the NEON path."""
    target, exe = sme2_qharness
    svl, other = 512, 256
    cpu = _sme_cpu(svl)
    calls, expected = [], []
    for kind in KINDS:
        for _, A, w, opts in _cases(kind, svl)[1:6]:
            for name in (n for n in SME2_KERNELS if n.startswith(f"at_{kind}_")):
                calls.append((name, A, w, {**opts, "sme2": w.sme2(svl)}))
                expected.append(AT_OK)
        _, A, w, opts = _cases(kind, svl)[4]
        calls.append((f"at_{kind}_sme2_1vlx4vl", A, w, opts))  # no form
        expected.append(AT_ENOKERNEL)
        calls.append((f"at_{kind}_sme2_1x4vl", A, w, {**opts, "sme2": w.sme2(other)}))
        expected.append(AT_ENOKERNEL)
        wrong = {"q4s": "q4a", "q4a": "q8", "q8": "q4s"}[kind]
        calls.append((f"at_{wrong}_sme2_1vlx4vl", A, w, {**opts, "sme2": w.sme2(svl)}))
        expected.append(AT_ENOKERNEL)
    results = _run(target, exe, cpu, calls, tmp_path)
    assert [s for s, _ in results] == expected
    for (name, A, w, opts), (status, C) in zip(calls, results):
        if status == AT_OK:
            assert (problem := _check_case(C, A, w, opts)) is None, f"{name} at M={A.shape[0]}: {problem}"

    # The library's choice where the SME2 form cannot be used: right answers, NEON kernels.
    for where, form_svl in ((cpu, other), ("cortex-a76", svl)):
        calls = [("", A, w, {**opts, "sme2": w.sme2(form_svl)}) for kind in KINDS for _, A, w, opts in
                 _cases(kind, svl)]
        work = tmp_path / where.replace(",", "_").replace("=", "")
        work.mkdir()
        for (_, A, w, opts), (status, C) in zip(calls, _run(target, exe, where, calls, work)):
            assert status == AT_OK
            assert (problem := _check_case(C, A, w, opts)) is None, f"{where}, M={A.shape[0]}: {problem}"
        ran = _translated(target, exe, where, work / f"in-{where}.bin", work / "out-log.bin", work / "qemu.log")
        assert ran and not any("_sme2_" in s for s in ran), (where, ran)
        if where == "cortex-a76":
            assert all("_dotprod_" in s for s in ran), ran
        # And forced on this CPU / for these weights: refused, never run.
        _, A, w, opts = _cases("q4s", svl)[2]
        (status, _), = _run(target, exe, where, [("at_q4s_sme2_1vlx4vl", A, w, {"sme2": w.sme2(form_svl)})], work)
        assert status == AT_ENOKERNEL


@pytest.mark.arm
def test_cache_keys_of_the_sme2_library(sme2_qharness):
    """The generated SME2 header's -I folder is named by its text and given to qgemm.c and
    the quantiser only, so compile_file's keys (argv, source and header texts) are the
    same in a second build (every object comes from the cache), and a NEON library
    built with the same cache compiles only the two files whose flags differ
    (exec.c without AT_SME2_EXEC, qgemm.c without AT_QSME2): the rest of the runtime
    is shared."""
    target, exe = sme2_qharness
    home = exe.parent

    def objects() -> set[str]:
        return {p.name for p in (home / "cache").rglob("*.o")}

    before = objects()
    assert any(True for _ in (home / "cache").glob("qsme2-*/at_qsme2.h"))
    params = default_params(None, {}, provenance="emulated")
    again = build_arm_runtime(target, [], [], params, {}, home / "lib2", cache=home / "cache")
    assert not again.cached  # a new folder: linked again ...
    assert objects() == before  # ... from cached objects
    build_arm_runtime(arm_target("neon", X86), [], [], params, {}, home / "lib-neon", cache=home / "cache")
    assert len(objects() - before) == 2


@pytest.mark.arm
@pytest.mark.parametrize("svl", [512, 128])
def test_an_sme2_install_validates_every_quantised_kernel_it_links(tmp_path, svl):
    """Install's Arm stage (qharness under QEMU at the target's SVL, in the crash-isolated
    driver) validates the SME2 kernels on weights with their SME2 form, and the NEON ones
    beside them; the library then links exactly the validated ones."""
    from autotune.families import quant_kernels

    target = _target(svl)
    stage = qsuite.run_arm_stage({"sme2": target, "neon": arm_target("neon", X86)}, tmp_path)
    names = [k.name for k in quant_kernels(("sme2", "neon"))]
    assert stage.verdicts == dict.fromkeys(names, "validated")
    assert list(stage.selected) == names and any("_sme2_" in n for n in names)
