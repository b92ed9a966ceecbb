"""The right library or none: what the loader takes, refuses, and says when it falls back."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune.runtime as rt
from autotune import build, codegen, host, toolchain
from autotune import link as library
from autotune.runtime import loader
from autotune.families import default_family
from autotune.specs import KernelSpec

from .reference import assert_close
from .untuned import small_selection

ROOT = Path(__file__).resolve().parent.parent
X86_FEATURES = ("avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma")


def install_copy(built: library.LibraryBuild, home: Path, target: str = "host") -> Path:
    """The session library's directory copied to ``home/lib/<target>`` (a new file, a new load)."""
    dest = home / "lib" / target
    shutil.copytree(built.library.parent, dest)
    return dest / library.LIBRARY_NAME


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


def test_a_damaged_extension_costs_speed_not_answers(built, private_home):
    lib = install_copy(built, private_home)
    (extension,) = lib.parent.glob("_atfast*")
    extension.write_bytes(extension.read_bytes()[:1000])
    done = run_python(GEMM_CHECK, private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "does not load" in done.stderr and str(extension) in done.stderr
    assert "install --force" in done.stderr


def _lacking() -> str | None:
    if host.detect().arch != "x86_64":
        return None
    return next((f for f in X86_FEATURES if not host.detect().has(f)), None)


@pytest.fixture(scope="module")
def foreign_library(tmp_path_factory) -> tuple[Path, str]:
    """The session's kernels in a library whose table claims a feature this CPU lacks."""
    missing = _lacking()
    if missing is None:
        pytest.skip("needs an x86-64 CPU without one of " + ", ".join(X86_FEATURES))
    info = host.detect()
    isa = toolchain.native_isas(info)[0]
    target = toolchain.target_for(isa, info)
    specs = small_selection(default_family([isa], ("f32", "f64"), quick=True))
    home = tmp_path_factory.getbasetemp() / "runtime-home"  # the session library's build cache
    result = build.build_kernels(target, [codegen.generate(s) for s in specs], jobs=2, home=home)
    objects = [(obj.spec or KernelSpec.from_name(name), obj.path) for name, obj in result.objects.items()
               if obj.path is not None]
    text = library.emit_kernel_table_c([(s, {}) for s, _ in objects], {"provenance": "model"}, {})
    line = next(line for line in text.splitlines() if line.startswith("const char at_library_features"))
    text = text.replace(line, f'const char at_library_features[] = "{missing} fma";')
    out = tmp_path_factory.mktemp("foreign") / "lib" / "host"
    return library.build_runtime(target, objects, text, out).library, missing


def test_a_library_for_another_cpu_is_refused_at_load(foreign_library, private_home):
    path, missing = foreign_library
    with pytest.raises(loader.LibraryRefused, match=f"lacks {missing}"):
        loader.load(path)
    shutil.copytree(path.parent, private_home / "lib" / "host")
    done = run_python(GEMM_CHECK, private_home)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert f"lacks {missing}" in done.stderr and "autotune install" in done.stderr


def test_a_c_program_on_the_wrong_cpu_gets_a_message_not_sigill(foreign_library, tmp_path):
    path, missing = foreign_library
    source = tmp_path / "client.c"
    source.write_text(
        '#include <stdio.h>\n#include "autotune.h"\n'
        "int main(void) {\n"
        "    float A[4] = {1, 2, 3, 4}, B[4] = {1, 0, 0, 1}, C[4] = {7, 7, 7, 7};\n"
        "    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);\n"
        '    printf("%g %d\\n", C[0], at_gemm(0, 0, 0, 0, 2, 2, 2, 1.0, A, 2, B, 2, 0.0, C, 2));\n'
        "    return 0;\n}\n")
    exe = tmp_path / "client"
    subprocess.run(["cc", "-std=c11", str(source), f"-I{path.parent}", "-o", str(exe), str(path),
                    f"-Wl,-rpath,{path.parent}"], check=True)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "-4"]  # C unchanged, AT_ENOCPU
    assert f"cblas_sgemm: this CPU lacks {missing}" in done.stderr


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


def test_a_report_plans_without_rebinding_gemm(built, private_home):
    from autotune.reports.extras import EXAMPLE_SHAPES, example_plans

    install_copy(built, private_home)
    rt.use_library(built.library)
    before, gemm_before = rt.api.current(), rt.gemm
    drawn = example_plans("host", private_home)
    assert drawn is not None and [(p.M, p.N, p.K, p.dtype) for p in drawn] == list(EXAMPLE_SHAPES)
    assert rt.api.current() is before and rt.gemm is gemm_before


def test_the_runtime_imports_no_generator_nor_build_stage():
    code = ("import sys, autotune.runtime, autotune.plans\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('autotune.codegen', 'autotune.build',\n"
            "             'autotune.link', 'autotune.install', 'autotune.tune', 'autotune.measure')))\n"
            "print(' '.join(bad))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr
