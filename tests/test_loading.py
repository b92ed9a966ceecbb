"""The right library or none: what the loader takes, refuses, and says when it falls back."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune.runtime as rt
from autotune import build, codegen, host, plans, toolchain
from autotune import link as library
from autotune.runtime import loader
from autotune.families import default_family
from autotune.specs import KernelSpec

from .reference import assert_close
from .untuned import small_selection

ROOT = Path(__file__).resolve().parent.parent


def install_copy(built: library.LibraryBuild, home: Path, target: str = "host") -> Path:
    """The session library's directory copied to ``home/lib/<target>`` (a new file, a new load)."""
    dest = home / "lib" / target
    shutil.copytree(built.library.parent, dest)
    return dest / loader.LIBRARY_NAME


def run_python(code: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_LIBRARY", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


GEMM_CHECK = (
    "import warnings, numpy as np, autotune\n"
    "warnings.simplefilter('always')\n"
    "A = np.arange(12.0).reshape(3, 4); B = np.arange(8.0).reshape(4, 2)\n"
    "assert np.allclose(autotune.gemm(A, B), A @ B)\n"
    "print('ok')\n"
)


def test_a_cross_built_library_is_never_the_one_loaded(built, private_home):
    install_copy(built, private_home, target="sme2")  # newer, but for another machine
    assert loader.find_library() is None
    host_lib = install_copy(built, private_home)
    os.utime(host_lib, (1, 1))  # older than the cross build: still the one
    assert loader.find_library() == host_lib


def test_two_libraries_in_one_process_keep_their_own_state(built, tmp_path):
    other = install_copy(built, tmp_path)
    first, second = loader.load(built.library), loader.load(other)
    assert first is not None and second is not None and first.lib._handle != second.lib._handle

    def created(runtime: loader.Runtime) -> int:
        n, hits = ctypes.c_int64(), ctypes.c_int64()
        runtime.lib.at_plan_cache_stats(ctypes.byref(n), ctypes.byref(hits))
        return n.value

    try:
        for runtime, idle in ((second, first), (first, second)):
            rt.use_library(runtime.path)
            before, idle_before = created(runtime), created(idle)
            A = np.random.default_rng(1).standard_normal((37, 23))
            B = np.random.default_rng(2).standard_normal((23, 41))
            C = rt.gemm(A, B)
            assert_close(C, A, B, np.zeros_like(C), 1.0, 0.0, False, False)
            assert created(runtime) == before + 1 and created(idle) == idle_before
    finally:
        rt.use_library(built.library)


def test_loading_exports_no_blas_symbol_to_the_process(built):
    loader.load(built.library)
    process = ctypes.CDLL(None)
    for name in ("sgemm_", "cblas_dgemm", "xerbla_", "at_gemm"):
        assert not hasattr(process, name), name


def test_a_damaged_library_falls_back_with_the_reason(built, private_home):
    lib = install_copy(built, private_home)
    lib.write_bytes(lib.read_bytes()[:4096])
    done = run_python(GEMM_CHECK, private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "does not load" in done.stderr and "autotune install --force" in done.stderr
    assert "numpy computes gemm" in done.stderr


def warning_messages(stderr: str) -> list[str]:
    """The RuntimeWarnings a run printed, one per warning (their source lines left out)."""
    return re.findall(r"RuntimeWarning: (.*)", stderr)


def test_a_damaged_extension_costs_speed_not_answers(built, private_home):
    """One warning, which says what happens: a truncated _atfast used to print
    "gemm runs slower through ctypes" and then "numpy computes gemm instead"."""
    lib = install_copy(built, private_home)
    (extension,) = lib.parent.glob("_atfast*")
    extension.write_bytes(extension.read_bytes()[:1000])
    done = run_python(GEMM_CHECK + "autotune.gemm(A, B); autotune.matmul(A, B)\n", private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    (message,) = warning_messages(done.stderr)
    assert "does not load" in message and str(extension) in message
    assert "install --force" in message and "numpy computes gemm" in message
    assert "ctypes" not in done.stderr


BLAS = Path("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3")


@pytest.mark.skipif(not BLAS.exists(), reason="Debian's reference BLAS (libblas3) is not installed")
def test_another_blas_named_by_autotune_library_is_refused_once(private_home):
    """AUTOTUNE_LIBRARY at a system BLAS used to raise AttributeError (undefined
    symbol at_plan_create) on every call; it is refused when loaded, in one line,
    and gemm answers through numpy."""
    env = {**os.environ, "AUTOTUNE_HOME": str(private_home), "PYTHONPATH": str(ROOT),
           "AUTOTUNE_LIBRARY": str(BLAS)}
    code = GEMM_CHECK + "autotune.gemm(A, B); autotune.gemm_batch(np.ones((2, 3, 3)), np.ones((2, 3, 3)))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    (message,) = warning_messages(done.stderr)
    assert "is not libautotune" in message and "AUTOTUNE_LIBRARY" in message
    assert "Error" not in done.stderr
    with pytest.raises(loader.LibraryRefused, match="is not libautotune"):
        loader.load(BLAS)


def test_use_library_moves_the_top_level_gemm_too(built, private_home):
    """autotune.gemm binds itself on first use; after use_library(path) it must
    compute in the new library like the rest (it stayed on the first one)."""
    import autotune

    other = install_copy(built, private_home)
    try:
        autotune.gemm(np.ones((2, 2)), np.ones((2, 2)))
        runtime = rt.use_library(other)
        assert autotune.gemm is rt.gemm is runtime.fast.gemm
        n = ctypes.c_int64()
        runtime.lib.at_plan_cache_stats(ctypes.byref(n), None)
        before = n.value
        autotune.gemm(np.ones((3, 5)), np.ones((5, 7)))
        runtime.lib.at_plan_cache_stats(ctypes.byref(n), None)
        assert n.value == before + 1
    finally:
        rt.use_library(built.library)
    assert autotune.gemm is rt.gemm


def test_names_taken_from_the_package_are_the_entries_themselves(built, private_home):
    """`from autotune import gemm` before any call is the C entry point: it was a
    wrapper that bound the entry on its first call, so a reference taken before
    paid an import and a keyword call every time (3.5x an 8x8 product's time)."""
    install_copy(built, private_home)
    env = {**os.environ, "AUTOTUNE_HOME": str(private_home), "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_LIBRARY", None)
    code = ("import sys, autotune\n"
            "assert 'autotune.runtime' not in sys.modules and 'numpy' not in sys.modules\n"
            "from autotune import gemm, gemm_batch, matmul, qmatmul, quantize_weights\n"
            "import autotune.runtime as rt, autotune.runtime.qapi as qapi, autotune.quant as quant\n"
            "assert gemm is rt.gemm is rt.api.current().fast.gemm, gemm\n"
            "assert (gemm_batch, matmul) == (rt.gemm_batch, rt.matmul)\n"
            "assert (qmatmul, quantize_weights) == (qapi.qmatmul, quant.quantize_weights)\n"
            "assert 'gemm' in dir(autotune)\n"
            "try:\n    autotune.no_such_name\nexcept AttributeError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module 'autotune' has no attribute 'no_such_name'"


def test_thread_setters_are_at_the_top_level(built):
    """docs/quantised.md names autotune.set_num_threads: it exists, with its getter."""
    import autotune

    rt.use_library(built.library)
    try:
        autotune.set_num_threads(1)
        assert autotune.get_num_threads() == 1 == rt.get_num_threads()
    finally:
        autotune.set_num_threads(0)



def test_a_missing_extension_names_the_headers_it_needs(built, private_home):
    """An install on a machine without Python's headers builds no extension (a
    Debian arm64 userland without python3-dev did): gemm still answers, through
    numpy, and the warning says what to install rather than calling it damaged."""
    lib = install_copy(built, private_home)
    (extension,) = lib.parent.glob("_atfast*")
    extension.unlink()
    done = run_python(GEMM_CHECK, private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "python3-dev" in done.stderr and "install --force" in done.stderr
    assert "unusable" not in done.stderr

#: A feature no CPU has: cpu.c counts names it cannot test as absent.
MISSING = "at_test_missing"


@pytest.fixture(scope="module")
def foreign_library(tmp_path_factory) -> tuple[Path, set[str]]:
    """The session's kernels in a library whose biggest kernel per dtype and
    transposition needs a feature this CPU lacks: a library built for another machine."""
    info = host.detect()
    isa = toolchain.native_isas(info)[0]
    target = toolchain.target_for(isa, info)
    specs = small_selection(default_family([isa], ("f32", "f64"), quick=True))
    home = tmp_path_factory.getbasetemp() / "runtime-home"  # the session library's build cache
    result = build.build_kernels(target, [codegen.generate(s) for s in specs], jobs=2, home=home)
    objects = [(obj.spec or KernelSpec.from_name(name), obj.path) for name, obj in result.objects.items()
               if obj.path is not None]
    groups: dict[tuple[str, str], list[KernelSpec]] = {}
    for spec, _ in objects:
        groups.setdefault((spec.dtype, spec.trans), []).append(spec)
    lacking = {max(group, key=lambda s: s.mr * s.nr).name for group in groups.values()}
    text = library.emit_kernel_table_c([(s, {}) for s, _ in objects], {"provenance": "model"}, {})
    for name in lacking:
        text, n = re.subn(rf'(\{{"{name}", "\w+", ")([^"]*)"', rf'\1\2 {MISSING}"', text)
        assert n == 1
    out = tmp_path_factory.mktemp("foreign") / "lib" / "host"
    return library.build_runtime(target, objects, text, out).library, lacking


def _quietly_loaded(path: Path) -> loader.Runtime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runtime = loader.load(path)
    assert runtime is not None
    return runtime


def test_a_library_for_another_cpu_warns_and_stays_right(foreign_library, private_home):
    path, lacking = foreign_library
    runtime = _quietly_loaded(path)
    names = plans.kernel_names(runtime)
    assert {n for i, n in enumerate(names) if not runtime.lib.at_kernel_usable(i)} == lacking
    shutil.copytree(path.parent, private_home / "lib" / "host")
    done = run_python(GEMM_CHECK, private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert f"lacks {MISSING}: plans use" in done.stderr and "autotune install" in done.stderr
    assert "numpy computes gemm" not in done.stderr  # the library computes, with its other kernels


SHAPES_FOR_LACKING = ((64, 64, 64), (97, 31, 50), (200, 150, 300), (1000, 700, 400))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("trans", ["nn", "nt", "tn", "tt"])
def test_plans_use_only_the_kernels_this_cpu_runs(foreign_library, dtype, trans):
    path, lacking = foreign_library
    foreign = _quietly_loaded(path)
    for M, N, K in SHAPES_FOR_LACKING:
        p = plans.plan(M, N, K, dtype, trans, runtime=foreign)
        assert p.coverage() == pytest.approx(1.0)
        assert not set(p.kernel_counts()) & lacking, p.kernel_counts()


def test_where_they_can_run_plans_do_use_those_kernels(foreign_library, built):
    """The check above can fail: the session library's plans of the same shapes use them."""
    _, lacking = foreign_library
    session = _quietly_loaded(built.library)
    used = {k for dtype in ("f32", "f64") for trans in ("nn", "nt", "tn", "tt") for M, N, K in SHAPES_FOR_LACKING
            for k in plans.plan(M, N, K, dtype, trans, runtime=session).kernel_counts()}
    assert used & lacking


def test_a_c_program_on_another_cpu_gets_right_answers(foreign_library, tmp_path):
    path, _ = foreign_library
    source = tmp_path / "client.c"
    source.write_text(
        '#include <stdio.h>\n#include "autotune.h"\n'
        "int main(void) {\n"
        "    float A[64 * 64], B[64 * 64], C[64 * 64];\n"
        "    for (int i = 0; i < 64 * 64; i++) { A[i] = (float)(i % 7) - 3; B[i] = i % 65 == 0; C[i] = 7; }\n"
        "    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0f, A, 64, B, 64, 0.0f, C, 64);\n"
        "    int wrong = 0;\n"
        "    for (int i = 0; i < 64 * 64; i++) wrong += C[i] != A[i];\n"
        '    printf("%d %d %d\\n", wrong, at_cpu_check(), at_gemm(0, 0, 0, 0, 64, 64, 64, 1.0, A, 64, B, 64, 0.0, C, 64));\n'
        "    return 0;\n}\n")
    exe = tmp_path / "client"
    subprocess.run(["cc", "-std=c11", str(source), f"-I{path.parent}", "-o", str(exe), str(path),
                    f"-Wl,-rpath,{path.parent}"], check=True)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "-4", "0"]  # right; AT_ENOCPU says some kernels sit out; computed
    assert done.stderr == ""


def test_the_fallback_warning_says_why(monkeypatch):
    monkeypatch.setattr(rt.api, "_warned", set())
    previous = rt.api.current()
    rt.api.use(None, reason="a test's reason")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            rt.numpy_gemm(np.eye(2), np.eye(2))
        assert any("a test's reason" in str(w.message) for w in seen)
    finally:
        rt.api.use(previous)


def test_a_library_above_the_isa_cap_is_refused(built, tmp_path, monkeypatch):
    needs = loader.load(built.library).lib.at_required_features().decode().split()
    if not needs:
        pytest.skip("the session library is portable C: no cap is below it")
    monkeypatch.setenv("AUTOTUNE_ISA", "generic")
    with pytest.raises(loader.LibraryRefused, match="above AUTOTUNE_ISA=generic"):
        loader.load(install_copy(built, tmp_path))


def test_plans_recorded_at_install_are_what_the_report_reads(built, private_home):
    from autotune.plans.examples import EXAMPLE_SHAPES, example_plans, plans_path, record_example_plans

    assert example_plans("host", private_home) is None  # nothing recorded yet: no section
    lib = install_copy(built, private_home)
    rt.use_library(built.library)
    before, gemm_before = rt.api.current(), rt.gemm
    path = record_example_plans("host", lib, private_home)
    assert path == plans_path("host", private_home)
    assert rt.api.current() is before and rt.gemm is gemm_before  # recording rebinds nothing
    drawn = example_plans("host", private_home)
    assert drawn is not None and [(p.M, p.N, p.K, p.dtype) for p in drawn] == list(EXAMPLE_SHAPES)
    live = plans.plan(*EXAMPLE_SHAPES[0][:3], EXAMPLE_SHAPES[0][3], runtime=loader.load(lib))
    assert drawn[0] == live  # the record reads back as the plan itself
    path.write_text("{not json")
    assert example_plans("host", private_home) is None  # damaged: no section, no traceback


def test_the_runtime_imports_no_generator_nor_build_stage():
    code = ("import sys, autotune.runtime, autotune.plans\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('autotune.codegen', 'autotune.build',\n"
            "             'autotune.link', 'autotune.install', 'autotune.tune', 'autotune.measure')))\n"
            "print(' '.join(bad))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr


def test_the_c_entries_unpickle_in_a_process_that_never_imported_autotune(built, private_home, tmp_path):
    """dask and multiprocessing send autotune.gemm and autotune.matmul by pickle.  The
    extension's functions pickled as _atfast.gemm, which only a process that had loaded
    the library could import; as autotune.gemm any process can."""
    install_copy(built, private_home)
    sent = tmp_path / "entries.pickle"
    done = run_python(
        "import pickle, autotune, autotune.runtime as rt\n"
        "assert rt.api.current().fast is not None\n"
        f"open({str(sent)!r}, 'wb').write(pickle.dumps((autotune.gemm, autotune.matmul)))\n", private_home)
    assert done.returncode == 0, done.stderr
    done = run_python(
        "import pickle, numpy as np\n"
        f"gemm, matmul = pickle.loads(open({str(sent)!r}, 'rb').read())\n"
        "import autotune\n"
        "assert (gemm, matmul) == (autotune.gemm, autotune.matmul) and type(gemm).__name__.startswith('builtin')\n"
        "A = np.arange(6.0).reshape(2, 3); B = np.arange(3.0).reshape(3, 1)\n"
        "assert np.allclose(gemm(A, B), A @ B) and np.allclose(matmul(A, B), A @ B)\n"
        "print('ok')\n", private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
