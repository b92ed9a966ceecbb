"""Build stage: content-hashed kernel objects and the harness link."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import at_testkit as tk  # noqa: E402

from autotune import build, measure  # noqa: E402
from autotune.specs import KernelSpec  # noqa: E402


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def target():
    return tk.native_target()


def _count_compiler_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = build._run

    def counting(argv, timeout):
        calls.append(list(argv))
        return real(argv, timeout)

    monkeypatch.setattr(build, "_run", counting)
    return calls


def test_objects_land_in_the_cache_and_sources_stay_readable(home, target):
    sources = tk.naive_sources(target.isa)
    result = build.build_kernels(target, sources, jobs=2)
    assert result.failures == {}
    assert set(result.objects) == {s.spec.name for s in sources}
    for src in sources:
        obj = result.objects[src.spec.name]
        assert not obj.cached and obj.spec == src.spec
        assert obj.path == home / "build" / target.isa / "objects" / f"{obj.hash}.o"
        assert obj.path.stat().st_size > 0
        written = home / "build" / target.isa / "src" / f"{src.spec.name}.c"
        assert written.read_text() == src.text
    # Nothing half written is left next to the objects.
    assert not list((home / "build" / target.isa / "objects").glob(".*"))


def test_second_build_is_fully_cached(home, target, monkeypatch):
    sources = tk.naive_sources(target.isa)
    first = build.build_kernels(target, sources, jobs=2)
    calls = _count_compiler_runs(monkeypatch)
    ticks: list[dict] = []
    second = build.build_kernels(target, sources, jobs=2, progress=lambda **kw: ticks.append(kw))
    assert calls == []
    assert all(obj.cached for obj in second.objects.values())
    assert second.compiled == 0
    assert {n: o.path for n, o in second.objects.items()} == {n: o.path for n, o in first.objects.items()}
    assert len(ticks) == len(sources) and all(t["advance"] == 1 for t in ticks)
    assert {t["description"] for t in ticks} == set(second.objects)


def test_changed_source_rebuilds_only_that_object(home, target, monkeypatch):
    sources = tk.naive_sources(target.isa)
    first = build.build_kernels(target, sources, jobs=2)
    changed = tk.KernelSource(sources[3].spec, sources[3].text + "\n/* a comment changes the hash */\n")
    calls = _count_compiler_runs(monkeypatch)
    second = build.build_kernels(target, sources[:3] + [changed] + sources[4:], jobs=2)
    assert len(calls) == 1
    rebuilt = [n for n, o in second.objects.items() if not o.cached]
    assert rebuilt == [changed.spec.name]
    assert second.objects[changed.spec.name].hash != first.objects[changed.spec.name].hash


def test_hash_covers_flags(home, target):
    text = tk.naive_sources(target.isa)[0].text
    a = build.compile_object(target, text, "k", "c")
    other = type(target)(**{**target.__dict__, "cflags": (*target.cflags, "-DAT_OTHER_FLAGS")})
    b = build.compile_object(other, text, "k", "c")
    assert a.ok and b.ok and a.hash != b.hash and not b.cached


def test_compile_error_is_reported_and_the_rest_build(home, target):
    good = tk.naive_sources(target.isa)
    spec = KernelSpec(target.isa, "f32", 2, 2, variant="broken")
    broken = tk.KernelSource(spec, f"void {spec.name}(void) {{ this is not C; }}\n")
    result = build.build_kernels(target, [*good[:2], broken, *good[2:]], jobs=2)
    assert set(result.objects) == {s.spec.name for s in good}
    assert list(result.failures) == [spec.name]
    message = result.failures[spec.name]
    # The compiler's own diagnostic, naming the readable source file.
    assert f"{spec.name}.c" in message and "error" in message
    assert not list((home / "build" / target.isa / "objects").glob(".*"))


def test_harness_links_is_cached_and_lists_its_registry(home, target, monkeypatch):
    sources = tk.naive_sources(target.isa)
    objects = list(build.build_kernels(target, sources, jobs=2).objects.values())
    exe = build.build_harness(target, objects)
    assert exe.parent == home / "build" / target.isa and exe.name.startswith("harness-")
    calls = _count_compiler_runs(monkeypatch)
    assert build.build_harness(target, objects) == exe
    assert calls == []

    out = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=30, check=True)
    lines = [line for line in out.stdout.splitlines() if '"kernel"' in line]
    assert len(lines) == len(sources)
    spec = sources[6].spec  # f64 tn
    assert (
        f'{{"event":"kernel","name":"{spec.name}","dtype":"f64","mr":{spec.mr},"nr":{spec.nr},'
        f'"trans":"tn"}}' in lines
    )


def test_a_changed_kernel_set_links_a_new_harness(home, target):
    objects = list(build.build_kernels(target, tk.naive_sources(target.isa), jobs=2).objects.values())
    assert build.build_harness(target, objects) != build.build_harness(target, objects[:-1])


def test_long_link_lines_go_through_a_response_file(home, target, monkeypatch):
    monkeypatch.setattr(build, "_RESPONSE_FILE_ARGS", 2)
    calls = _count_compiler_runs(monkeypatch)
    objects = list(build.build_kernels(target, tk.naive_sources(target.isa), jobs=2).objects.values())
    exe = build.build_harness(target, objects)
    link = calls[-1]
    assert any(arg.startswith("@") for arg in link) and not any(arg.endswith(".o") for arg in link)
    out = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.count('"event":"kernel"') == len(objects)
    assert not list(exe.parent.glob("*.rsp"))


def test_an_empty_kernel_set_still_links(home, target):
    exe = build.build_harness(target, [])
    out = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip().splitlines() == ['{"event":"done","command":"list"}']


def test_registry_source_declares_typed_prototypes():
    specs = [KernelSpec("generic", "f64", 3, 2, True, False), KernelSpec("generic", "f32", 4, 4)]
    text = build.registry_source("generic", specs)
    assert (
        "void at_dgemm_generic_tn_3x2_u1(int64_t K, const double *A, int64_t lda, "
        "const double *B, int64_t ldb, double *C, int64_t ldc, double alpha, double beta);" in text
    )
    assert ('{"at_sgemm_generic_nn_4x4_u1", "generic", "", 0, 0, 0, 4, 4, 0, 0, 0, '
            "(at_kernel_fn)at_sgemm_generic_nn_4x4_u1, 0},") in text
    assert "const int at_registry_count = 2;" in text


def test_a_harness_that_does_not_link_raises(home, target):
    # An object that lacks the kernel its spec names: the link must fail loudly.
    spec = KernelSpec(target.isa, "f32", 2, 2, variant="missing")
    obj = build.compile_object(target, "int at_unrelated_symbol = 1;\n", spec.name, "c")
    with pytest.raises(build.BuildError, match=spec.name):
        build.build_harness(target, [build.ObjectResult(obj.name, obj.path, obj.hash, obj.cached, None, spec)])


def _unit_sources(isa: str, nrs=(1, 2, 3, 4)) -> list:
    """Kernels of one ISA, dtype, transposition and mr: they share a translation unit."""
    return [tk.source("naive", isa, "f32", 5, nr, "nn") for nr in nrs]


def test_kernels_of_one_mr_compile_as_one_unit(home, target, monkeypatch):
    sources = _unit_sources(target.isa)
    calls = _count_compiler_runs(monkeypatch)
    ticks: list[dict] = []
    result = build.build_kernels(target, sources, progress=lambda **kw: ticks.append(kw))
    assert len(calls) == 1 and sum(t["advance"] for t in ticks) == len(sources)
    assert len({o.path for o in result.objects.values()}) == 1
    # Each kernel keeps an identity of its own, whatever unit compiled it.
    assert len({o.hash for o in result.objects.values()}) == len(sources)
    alone = build.compile_object(target, sources[0].text, sources[0].spec.name)
    assert alone.hash == result.objects[sources[0].spec.name].hash
    exe = build.build_harness(target, list(result.objects.values()))
    assert measure.validate(exe, target, list(result.objects)) and all(
        r.ok for r in measure.validate(exe, target, list(result.objects)).values())


def test_a_broken_kernel_in_a_unit_is_isolated(home, target):
    sources = _unit_sources(target.isa)
    broken = tk.KernelSource(sources[1].spec, sources[1].text + "\nthis is not C;\n")
    result = build.build_kernels(target, [sources[0], broken, *sources[2:]])
    assert list(result.failures) == [broken.spec.name]
    assert set(result.objects) == {s.spec.name for s in sources} - {broken.spec.name}


def test_force_recompiles_what_the_cache_holds(home, target, monkeypatch):
    sources = _unit_sources(target.isa)
    build.build_kernels(target, sources)
    calls = _count_compiler_runs(monkeypatch)
    again = build.build_kernels(target, sources, force=True)
    assert len(calls) == 1 and not any(o.cached for o in again.objects.values())


def test_a_compile_error_is_cached_until_forced(home, target, monkeypatch):
    spec = KernelSpec(target.isa, "f32", 2, 2, variant="broken")
    broken = tk.KernelSource(spec, f"void {spec.name}(void) {{ this is not C; }}\n")
    first = build.build_kernels(target, [broken])
    calls = _count_compiler_runs(monkeypatch)
    again = build.build_kernels(target, [broken])
    assert calls == [] and again.failures == first.failures
    build.build_kernels(target, [broken], force=True)
    assert len(calls) == 1


def test_the_harness_driver_is_compiled_once_for_every_isa(home, target, monkeypatch):
    # The x86 families (and NEON with SME2 on Arm) share the portable flags: the
    # driver they link is one object, not one per family.
    generic = type(target)(**{**target.__dict__, "isa": "generic", "cflags": target.base_cflags})
    build.build_harness(target, list(build.build_kernels(target, tk.naive_sources(target.isa)).objects.values()))
    calls = _count_compiler_runs(monkeypatch)
    exe = build.build_harness(generic, [])
    compiled = [next(a for a in argv if a.endswith(".c")) for argv in calls if "-c" in argv]
    assert [Path(c).name for c in compiled] == ["registry.c", f"peak_{generic.isa}.c"]
    out = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=30, check=True)
    assert '"event":"kernel"' not in out.stdout


def test_compile_file_compiles_once_per_content(tmp_path, target, monkeypatch):
    include = tmp_path / "include"
    include.mkdir()
    header = include / "value.h"
    header.write_text("#define VALUE 41\n")
    source = tmp_path / "one.c"
    source.write_text('#include "value.h"\nint one(void) { return VALUE + 1; }\n')
    cache = tmp_path / "cache"
    args = [*target.base_cflags, f"-I{include}"]
    calls = _count_compiler_runs(monkeypatch)

    first, cached = build.compile_file(target.cc, args, source, [header], cache, 60)
    assert not cached and first.parent == cache and first.suffix == ".o" and len(calls) == 1
    assert build.compile_file(target.cc, args, source, [header], cache, 60) == (first, True)
    assert len(calls) == 1
    # The header's text, the flags and the source's text each make another object.
    header.write_text("#define VALUE 42\n")
    by_header, cached = build.compile_file(target.cc, args, source, [header], cache, 60)
    by_flags, _ = build.compile_file(target.cc, [*args, "-DOTHER"], source, [header], cache, 60)
    source.write_text(source.read_text() + "/* another text */\n")
    by_text, _ = build.compile_file(target.cc, args, source, [header], cache, 60)
    assert not cached and len({first, by_header, by_flags, by_text}) == 4 and len(calls) == 4
    assert all(p.stat().st_size > 0 for p in (first, by_header, by_flags, by_text))

    source.write_text("int one(void) { this is not C; }\n")
    with pytest.raises(build.BuildError, match="one.c"):
        build.compile_file(target.cc, args, source, [header], cache, 60)
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.name for p in (first, by_header, by_flags, by_text))


def test_a_library_with_another_table_compiles_the_table_alone(home, target, monkeypatch):
    # What tuning does (the same runtime, new parameters in the table), and what two
    # CPUs of one architecture do with one cache: only at_table.c is compiled again.
    from autotune import link

    objects = build.build_kernels(target, tk.naive_sources(target.isa)[:2]).objects.values()
    kernels = [(obj.spec, obj.path) for obj in objects]
    table = [(spec, {}) for spec, _ in kernels]
    cache = build.shared_dir(home) / "runtime"
    first = link.build_runtime(target, kernels, link.emit_kernel_table_c(table, {"provenance": "model"}, {}),
                               home / "lib" / "a", cache=cache)
    calls = _count_compiler_runs(monkeypatch)
    second = link.build_runtime(target, kernels,
                                link.emit_kernel_table_c(table, {"provenance": "model", "blk_k": 128}, {}),
                                home / "lib" / "b", cache=cache)
    assert not second.cached and second.hash != first.hash
    assert [Path(argv[argv.index("-c") + 1]).name for argv in calls] == ["at_table.c"]
    assert (first.extension is None) == (second.extension is None)
    if second.extension is not None:
        assert second.extension.read_bytes() == first.extension.read_bytes()
    assert second.library.stat().st_size > 0 and second.library.read_bytes() != first.library.read_bytes()


def test_a_precompiled_runtime_leaves_the_library_its_tables_alone_to_compile(home, target, monkeypatch):
    # Install compiles the runtime while the confirmation rounds time kernels; the
    # library built afterwards must find every runtime object (and the extension) in
    # the cache, or the early compile saved nothing.
    from autotune import link

    objects = build.build_kernels(target, tk.naive_sources(target.isa)[:2]).objects.values()
    kernels = [(obj.spec, obj.path) for obj in objects]
    early = _count_compiler_runs(monkeypatch)
    link.precompile_runtime(target, home)
    assert sorted(Path(argv[argv.index("-c") + 1]).name for argv in early if "-c" in argv) == \
        sorted(link.RUNTIME_SOURCES)
    late = _count_compiler_runs(monkeypatch)
    library = link.build_runtime(target, kernels, link.emit_kernel_table_c([(s, {}) for s, _ in kernels],
                                                                            {"provenance": "model"}, {}),
                                 home / "lib" / "a", cache=build.shared_dir(home) / "runtime")
    # (The extension, compiled and linked in one run without -c, is not among them.)
    assert all("-c" in argv for argv in late)
    assert sorted(Path(argv[argv.index("-c") + 1]).name for argv in late) == sorted(["at_table.c", link.QTABLE])
    assert library.library.stat().st_size > 0


# What compilers print when the machine stops them, as seen from gcc, cc1 and as.
ENVIRONMENT_FAILURES = {
    "full disk (cc1)": "cc1: fatal error: error writing to /tmp/ccQ1.s: No space left on device\n"
                       "compilation terminated.",
    "full disk (as)": "{standard input}: Assembler messages:\n{standard input}:912: Fatal error: can't write "
                      "24 bytes to section .text of k.o: 'No space left on device'",
    "quota": "k.c:1:1: fatal error: error writing to k.o: Disk quota exceeded",
    "I/O error": "k.c: fatal error: cannot open k.o: Input/output error",
    "OOM killer": "gcc: fatal error: Killed signal terminated program cc1\ncompilation terminated.",
    "out of memory": "cc1: out of memory allocating 65536 bytes after a total of 0 bytes",
    "crashed compiler": "k.c:9:1: internal compiler error: Segmentation fault\nPlease submit a full bug report",
}


@pytest.mark.parametrize("failure", ENVIRONMENT_FAILURES, ids=list(ENVIRONMENT_FAILURES))
def test_a_full_disk_is_not_cached_as_the_kernel_s_error(home, target, tmp_path, failure):
    """After the space (or memory) returns, the kernel compiles without --force."""
    disk_full = tmp_path / "disk-full"
    disk_full.write_text(ENVIRONMENT_FAILURES[failure])
    fake = tmp_path / "cc"
    real = " ".join(target.cc)
    fake.write_text(f'#!/bin/sh\nif [ -e "{disk_full}" ] && [ "$1" != --version ]; then\n'
                    f'  cat "{disk_full}" >&2; exit 1\nfi\nexec {real} "$@"\n')
    fake.chmod(0o755)
    faked = type(target)(**{**target.__dict__, "cc": (str(fake),)})
    sources = tk.naive_sources(target.isa)[:1]
    first = build.build_kernels(faked, sources)
    assert list(first.failures) == [sources[0].spec.name]
    assert not list((home / "build" / target.isa / "objects").glob("*.error"))
    disk_full.unlink()  # the space is back
    again = build.build_kernels(faked, sources)
    assert not again.failures and list(again.objects) == [sources[0].spec.name]


def test_only_a_diagnostic_about_the_source_is_its_fault():
    assert build.source_fault("k.c:3:5: error: expected ';' before '}' token")
    assert build.source_fault('k.c:5:2: error: #error "this kernel needs AVX-512F"')
    assert not build.source_fault("cc exited with status 1")  # says nothing about the source
    for output in ENVIRONMENT_FAILURES.values():
        assert not build.source_fault(output)


# -- precompiled prelude, the per-unit callback and the core budget ----------------------

def _vector_unit(target) -> list:
    """Three generated kernels of one unit (mr 1-4), which include immintrin.h."""
    from autotune import codegen

    if target.isa not in ("avx512", "avx2"):
        pytest.skip(f"needs an x86 vector family (kernels that include immintrin.h); this host runs {target.isa}")
    return [codegen.generate(KernelSpec(target.isa, "f32", mr, nr)) for mr, nr in ((1, 3), (2, 5), (3, 4))]


def _disassembly(path: Path) -> str:
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump (binutils) to compare machine code")
    out = subprocess.run([objdump, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return out.split("\n", 2)[2]  # past the line naming the file


def test_a_unit_loads_its_headers_precompiled_and_compiles_the_same_code(home, target, monkeypatch):
    sources = _vector_unit(target)
    calls = _count_compiler_runs(monkeypatch)
    result = build.build_kernels(target, sources)
    assert result.failures == {}
    gch = list((home / "build" / target.isa / "pch").glob(f"*/{build.PRELUDE}.gch"))
    if "clang" in target.compiler_id.lower():
        assert not gch
        return
    assert len(gch) == 1 and (gch[0].parent / build.PRELUDE).read_text() == \
        "#include <stdint.h>\n#include <immintrin.h>\n"
    units = [c for c in calls if "c-header" not in c]
    assert len(units) == 1 and f"-I{gch[0].parent}" in units[0]
    # The precompiled header changes how long the compile takes, never its code.
    plain = build._compile(target, build._unit_text(sources), "plain_unit", "c", target.cflags, home)
    unit = result.objects[sources[0].spec.name]
    assert plain.ok and plain.path != unit.path
    assert _disassembly(plain.path) == _disassembly(unit.path)
    # Cached like an object: a second build runs no compiler at all.
    calls.clear()
    again = build.build_kernels(target, sources)
    assert calls == [] and all(o.cached for o in again.objects.values())


def test_a_prelude_is_only_what_every_member_includes_and_only_when_heavy():
    def src(text: str):
        return tk.KernelSource(KernelSpec("avx2", "f32", 1, 1), text)

    both = "#include <stdint.h>\n#include <immintrin.h>\n"
    assert build.prelude_text([src(both + "int a;"), src(both + "#include <math.h>\nint b;")]) == both
    assert build.prelude_text([src("#include <stdint.h>\nint a;")]) is None  # nothing worth precompiling
    assert build.prelude_text([src(both), src("#include <stdint.h>\n")]) is None


def test_each_unit_is_handed_over_as_it_finishes(home, target):
    sources = [*tk.naive_sources(target.isa), *_unit_sources(target.isa, nrs=(6, 7))]
    handed: list[list] = []
    result = build.build_kernels(target, sources, jobs=2, on_unit=handed.append,
                                 cores=build.CoreBudget(2))
    names = [r.name for unit in handed for r in unit]
    assert sorted(names) == sorted(result.objects) and len(names) == len(set(names))
    assert len(handed) == len({build.unit_key(s.spec) for s in sources})


def test_a_measurement_gets_the_next_free_core_before_any_compiler():
    budget = build.CoreBudget(1)
    order: list[str] = []

    def take(name: str, first: bool) -> None:
        with budget.core(first=first):
            order.append(name)

    with budget.core():
        compiler = threading.Thread(target=take, args=("compiler", False))
        compiler.start()
        time.sleep(0.05)
        measurement = threading.Thread(target=take, args=("measurement", True))
        measurement.start()
        time.sleep(0.05)
        assert order == []  # both wait while the core is held
    compiler.join(5)
    measurement.join(5)
    assert order == ["measurement", "compiler"]


def test_the_core_budget_never_runs_more_than_its_cores():
    budget = build.CoreBudget(2)
    lock, running, peak = threading.Lock(), [0], [0]

    def work(first: bool) -> None:
        with budget.core(first=first):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.01)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=work, args=(i % 3 == 0,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert peak[0] == 2 and running[0] == 0


@pytest.mark.parametrize("compiler", ["gcc", "clang-19"])
def test_gcc_s_cheaper_vector_flags_reach_gcc_alone_and_never_the_quantised_kernels(compiler, monkeypatch):
    # Clang warns about each of GCC's pass names; the quantised kernels were measured
    # at -O3 with all its passes.
    from autotune import toolchain
    from autotune.families.x86 import qkernel
    from autotune.host import detect

    if not shutil.which(compiler):
        pytest.skip(f"{compiler} is not installed (scripts/setup.sh --test installs clang-19)")
    # Only the flags are asked for and nothing is run: an AVX2 CPU is described, not needed.
    host = replace(detect(), arch="x86_64", features=("avx2", "fma"))
    monkeypatch.setenv("CC", compiler)
    avx2 = toolchain.target_for("avx2", host)
    extra = set(toolchain.GCC_VECTOR_FLAGS) & set(avx2.cflags)
    assert extra == (set(toolchain.GCC_VECTOR_FLAGS) if compiler == "gcc" else set())
    assert not set(toolchain.GCC_VECTOR_FLAGS) & set(toolchain.target_for("generic", host).cflags)
    seen: list[tuple[str, ...]] = []
    monkeypatch.setattr(build, "_compile", lambda target, source, name, language, flags, home: seen.append(flags))
    build.compile_qkernels(avx2, [qkernel("q4s", "avx2", 1, 8)])
    assert seen and not set(toolchain.GCC_VECTOR_FLAGS) & set(seen[0]) and "-O3" in seen[0]


def test_vector_kernels_clear_the_upper_halves_unless_this_cpu_measured_them_free(monkeypatch):
    """The install compiles the x86 vector kernels without their vzeroupper only where
    the probe's call that leaves the halves dirty beat the clearing one by the margin:
    an even result, a slower one (Intel's merges) or no result keeps the clearing."""
    from autotune import toolchain
    from autotune.host import detect

    host = replace(detect(), arch="x86_64", features=("avx2", "avx512bw", "avx512dq", "avx512f",
                                                       "avx512vl", "fma"))
    flag = toolchain.UPPER_HALVES_FREE_FLAG
    for probe, left_out in ((toolchain.UpperHalves(2.8, 4.0), True), (toolchain.UpperHalves(3.9, 4.0), False),
                            (toolchain.UpperHalves(4.0, 4.0), False), (toolchain.UpperHalves(24.0, 4.0), False),
                            (None, False)):
        monkeypatch.setattr(toolchain, "upper_halves", lambda cc, probe=probe: probe)
        for isa in ("avx512", "avx2"):
            assert (flag in toolchain.target_for(isa, host).cflags) == left_out, (probe, isa)
        assert flag not in toolchain.target_for("generic", host).cflags


def test_the_upper_halves_probe_times_both_calls_on_this_cpu():
    from autotune import toolchain
    from autotune.host import detect_cpu

    if "avx" not in detect_cpu().features:
        pytest.skip("the probe runs 256-bit instructions: needs AVX")
    toolchain.upper_halves.cache_clear()
    probe = toolchain.upper_halves(toolchain.find_cc())
    assert probe is not None
    assert 0 < probe.dirty_ns < 1000 and 0 < probe.clean_ns < 1000
    assert probe.to_dict() == {"dirty_ns": probe.dirty_ns, "clean_ns": probe.clean_ns, "free": probe.free}
