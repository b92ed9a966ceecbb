"""libautotune on Arm: the aarch64 library, proven under QEMU.

The pure-Python tests check the generated parts (the panel table, the kernels'
streaming entry).  The ``arm`` tests build a NEON and an SME2 library from
generated kernels (tests/arm_runtime/build.py), cross-build the C driver and a
BLAS client program against them and run both under QEMU (SVL 512 for SME2):

* the randomised semantics suite (fp32/fp64, NN..TT, both layouts, odd shapes,
  leading dims, alpha/beta and the BLAS NaN rules; 1, 2 and 4 threads bitwise
  identical), on the library's parameters and again forced onto the packed path;
* for SME2 the same suite on a CPU without FEAT_SME_FA64, where any Advanced
  SIMD instruction inside a streaming region traps: the region is clean;
* the AAPCS64 canary check of the library's entry and of every `<name>_s`,
  SVCR after each call, and a caller's pending lazy ZA save being committed;
* tests/c/blas_entry.c linked with the library in place of a BLAS, statically
  and dynamically.

Nothing here times anything: under emulation timings mean nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.codegen import sme2
from autotune.host import HostInfo
from autotune import contract, families, link as arm
from autotune.link import emit_kernel_table_c
from autotune.specs import KernelSpec
from autotune.toolchain import Target, ToolchainError, arm_target

from .arm_runtime import build as rt

X86 = HostInfo(arch="x86_64", os="linux", cpu="AMD EPYC", features=())
ISAS = ("neon", "sme2")
#: Random cases per phase (default parameters, forced packed path).
CASES = 300


# --------------------------------------------------------------------------- generated text


def test_table_records_give_sme2_kernels_their_panels_and_streaming_entries():
    specs = [KernelSpec("sme2", "f64", 20, 9, False, False, "pb", 2),
             KernelSpec("sme2", "f32", 32, 32, False, True, "", 2),
             KernelSpec("sme2", "f32", 19, 16, True, True, "pah", 2),
             KernelSpec("sme2", "f32", 30, 17, True, False, "papb", 2)]
    table = emit_kernel_table_c([(s, {}) for s in specs], {"provenance": "emulated"}, {})
    records = re.findall(r'\{"(at_\w+)", "sme2", "sme2[\w ]*", (\d), \d, \d, \d+, \d+, (\d+), (\d+), (\d+), '
                         r"\(at_kernel_fn\)(\w+), \(at_kernel_fn\)(\w+)\}", table)
    assert [r[0] for r in records] == [s.name for s in sorted(specs)]
    assert all(fn == name and fn_s == name + "_s" for name, *_, fn, fn_s in records)
    panels = {name: (int(a), int(b)) for name, _, a, b, *_ in records}
    assert panels["at_sgemm_sme2_nt_32x32_u2"] == (0, 0)
    assert panels["at_sgemm_sme2_tn_30x17_papb_u2"] == (32, 32)
    assert panels["at_sgemm_sme2_tt_19x16_pah_u2"] == (32, 0)
    assert panels["at_dgemm_sme2_nn_20x9_pb_u2"] == (0, 16)
    assert {int(r[4]) for r in records} == {64}  # a spec without an SVL is at the default 512
    at_256 = replace(specs[0], svl=256)
    assert (f'{{"{at_256.name}", "sme2", "sme2 smef64f64", 1, 0, 0, 20, 9, 0, 12, 32, '
            in emit_kernel_table_c([(at_256, {})], {}, {}))


def test_table_records_of_neon_kernels_have_no_streaming_entries():
    table = emit_kernel_table_c([(KernelSpec("neon", "f32", 8, 4, False, False, "", 2), {})], {}, {})
    assert ('{"at_sgemm_neon_nn_8x4_u2", "neon", "asimd", 0, 0, 0, 8, 4, 0, 0, 0, '
            "(at_kernel_fn)at_sgemm_neon_nn_8x4_u2, 0}") in table
    assert "_s(void)" not in table


def test_sme2_kernels_have_a_streaming_entry():
    spec = KernelSpec("sme2", "f32", 19, 64, False, True, "h", 2)
    text = sme2.generate(spec).text
    name = spec.name
    # Both are global functions (at_asm.h spells them for ELF and Mach-O); _s comes first.
    assert re.search(rf"^AT_FUNC_BEGIN\({name}_s\)$", text, re.M)
    assert re.search(rf"^AT_ENTRY\({name}\)$", text, re.M)
    # One smstart/smstop, both skipped by the streaming entry (x8 = 0).
    assert len(re.findall(r"^\s+smstart\b", text, re.M)) == 1
    assert len(re.findall(r"^\s+smstop\b", text, re.M)) == 1
    streaming = text[text.index(f"AT_FUNC_BEGIN({name}_s)"):text.index(f"AT_ENTRY({name})")]
    assert "mov x8, #0" in streaming and "tpidr2_el0" not in streaming
    assert re.search(r"cbz x8, \S+stay\b[^\n]*\n\s+smstop", text)


# --------------------------------------------------------------------------- under QEMU


def _target(isa: str) -> Target:
    try:
        return arm_target(isa, X86, svl_bits=512)
    except ToolchainError as exc:
        pytest.skip(f"no Arm toolchain: {exc}")


@pytest.fixture(scope="module", params=ISAS)
def built(request, tmp_path_factory):
    """(target, library, workdir) per Arm target, built once per module."""
    target = _target(request.param)
    home = tmp_path_factory.mktemp(f"home-{request.param}")
    lib = rt.build_sample_library(target, home)
    return target, lib, home / "work"


def _run(runner, exe: Path, *args: str, timeout: float = 900) -> tuple[int, list[dict], str]:
    done = subprocess.run([*runner, str(exe), *args], capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def _suite_ok(events: list[dict], rc: int, stderr: str) -> dict:
    summary = [e for e in events if e["event"] == "suite"]
    fails = [e for e in events if e["event"] == "fail"]
    assert summary, f"driver died: rc={rc} {stderr[-800:]}"
    assert not fails, fails[:5]
    assert rc == 0 and summary[0]["failures"] == 0
    return summary[0]


@pytest.mark.arm
def test_library_is_aarch64_and_cached(built):
    target, lib, _ = built
    for path in (lib.library, lib.archive):
        assert path is not None and path.exists()
    elf = lib.library.read_bytes()[:20]
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64
    assert lib.archive.read_bytes()[:8] == b"!<arch>\n"
    again = rt.build_sample_library(target, lib.library.parent.parent.parent)
    assert again.cached and again.hash == lib.hash


@pytest.mark.arm
def test_library_exports_exactly_the_public_set(built):
    """The aarch64 .so, like the host's (test_exports.py): the kernels, their
    streaming entries and the SME2 region are linked in but not exported."""
    from autotune.link import public_symbols

    from .test_exports import dynamic_symbols

    _, lib, _ = built
    assert dynamic_symbols(lib.library) == set(public_symbols())


@pytest.mark.arm
def test_semantics_suite(built):
    target, lib, work = built
    exe = rt.build_driver(target, lib, work)
    rc, events, stderr = _run(target.runner, exe, "suite", "--seed", "11", "--cases", str(CASES))
    summary = _suite_ok(events, rc, stderr)
    assert summary["cases"] == 2 * CASES and summary["kernels"] > 0
    assert summary["kernel_steps"] > 0  # the plans really ran the library's kernels
    # Of the phase with every problem packed, all but the few columns of C that never pack
    # (an untransposed A with up to 8, a transposed one with up to 32: plan.c).
    assert summary["packed_plans"] >= CASES // 3 and summary["split_plans"] >= CASES // 4
    if target.isa == "sme2":
        # Kernels reading an A panel, a B panel, and hybrids (padded A panels) all ran.
        assert summary["pa_steps"] > 0 and summary["pb_steps"] > 0 and summary["hybrid_steps"] > 0
        # Variable blocks computed blocks smaller than their own (rows, columns below a tile).
        assert summary["partial_steps"] > 0
    phases = {e["phase"]: e for e in events if e["event"] == "phase"}
    assert phases["default"]["failures"] == 0 and phases["packed"]["failures"] == 0


@pytest.mark.arm
@pytest.mark.parametrize("built", ["sme2"], indirect=True)
def test_streaming_region_has_no_neon(built):
    """Without FEAT_SME_FA64, Advanced SIMD in streaming mode is illegal: a
    region that ran any (compiled C, libc) would die of SIGILL here."""
    target, lib, work = built
    exe = rt.build_driver(target, lib, work)
    runner = [*target.runner[:-1], target.runner[-1] + ",sme_fa64=off"]
    rc, events, stderr = _run(runner, exe, "suite", "--seed", "5", "--cases", "60")
    _suite_ok(events, rc, stderr)


@pytest.mark.arm
def test_callee_saved_registers_and_sme_state(built):
    target, lib, work = built
    exe = rt.build_driver(target, lib, work)
    rc, events, stderr = _run(target.runner, exe, "abi")
    done = [e for e in events if e["event"] == "abi_done"]
    assert done, f"driver died: rc={rc} {stderr[-800:]}"
    broken = [e for e in events if e["event"] == "abi" and not e["ok"]]
    assert not broken, broken[:5]
    calls = [e["call"] for e in events if e["event"] == "abi"]
    assert sum(c.startswith("at_plan_execute/") for c in calls) == 4
    if target.isa == "sme2":
        # Every kernel's streaming entry, inside a streaming region.
        assert sum(c.endswith("_s") for c in calls) == len(rt.library_kernels(target))
        # A caller's dormant ZA: the save was committed, TPIDR2_EL0 and SVCR are 0.
        assert "lazy_za_save/at_plan_execute" in calls
    assert rc == 0


@pytest.mark.arm
@pytest.mark.parametrize("static", [True, False], ids=["static", "shared"])
def test_blas_program_links_the_library_as_its_blas(built, static):
    target, lib, work = built
    exe = rt.build_blas_program(target, lib, work, static)
    runner = list(target.runner)
    if not static:
        # A dynamically linked aarch64 program: QEMU needs the aarch64 loader and libc.
        runner[1:1] = ["-L", "/usr/aarch64-linux-gnu", "-E", f"LD_LIBRARY_PATH={lib.library.parent}"]
    done = subprocess.run([*runner, str(exe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "done 0" in done.stdout, done.stdout + done.stderr
    assert "ok cblas_sgemm_col_nt" in done.stdout and "ok sgemm_tn_beta0_nan_c" in done.stdout
    assert " ** On entry to SGEMM parameter number  8 had an illegal value" in done.stderr
    assert "Parameter 14 to routine cblas_sgemm was incorrect" in done.stderr
    own = rt.build_blas_program(target, lib, work, static, own_xerbla=True)
    done = subprocess.run([*runner, str(own)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok cblas_own_xerbla_param 14" in done.stdout, done.stdout


@pytest.mark.arm
@pytest.mark.slow
def test_suite_notices_unfed_panels(tmp_path, monkeypatch):
    """A library whose table says "in place" for packed-format kernels computes
    wrong numbers, and the suite says so (the suite can fail)."""
    target = _target("sme2")
    monkeypatch.setattr(contract, "operand_format", lambda spec: (0, 0))
    lib = rt.build_sample_library(target, tmp_path / "home")
    exe = rt.build_driver(target, lib, tmp_path / "work")
    rc, events, _ = _run(target.runner, exe, "suite", "--seed", "3", "--cases", "60")
    assert rc != 0 and [e for e in events if e["event"] == "fail"]


@pytest.mark.arm
@pytest.mark.slow
@pytest.mark.parametrize("isa", ISAS)
def test_install_table_builds_a_working_library(isa, tmp_path, request):
    """The install's path: `install --target <isa> --quick` stores the emulated
    table, build_arm_library links it from the install's objects, and the suite
    passes on that library.  SME2's install is the run's shared one (the
    sme2_install fixture): a second would cost ten minutes of emulation."""
    from autotune import build, codegen
    from autotune.install import InstallOptions, install, resolve_targets

    target = _target(isa)
    if isa == "sme2":
        shared = request.getfixturevalue("sme2_install")
        home, stored = shared.home, shared.table
    else:
        home = tmp_path / "home"
        stored = install(InstallOptions(target=isa, quick=True, home=home), host=X86).table
    _, targets = resolve_targets(isa, X86)
    chosen = [r.spec for r in stored.selected()]
    objects = build.build_kernels(target, [codegen.generate(s) for s in chosen],
                                  home=home).objects  # every one from the install's cache
    # Beside the shared install's library, not over it: other tests are running it.
    out = tmp_path / "lib" if isa == "sme2" else None
    lib = arm.build_arm_library(stored, targets, objects, home, out)
    where = out or home / "lib" / isa
    assert lib.library == where / "libautotune.so" and lib.archive == where / "libautotune.a"
    exe = rt.build_driver(target, lib, tmp_path / "work")
    rc, events, stderr = _run(target.runner, exe, "suite", "--seed", "23", "--cases", "100")
    assert _suite_ok(events, rc, stderr)["kernels"] == len(chosen)


@pytest.mark.arm
@pytest.mark.parametrize("built", ["sme2"], indirect=True)
def test_sme2_library_is_right_on_every_arm_cpu(built):
    """The library carries an SME2 set per SVL (128, 256, 512), each needing SME2:
    a CPU runs the set of its own SVL; on one of another SVL (1024), or without
    SME, plans leave them all out and the answers stay right; the CPU check says
    which kernels sit out and why."""
    target, lib, work = built
    exe = rt.build_driver(target, lib, work, baseline=True)
    qemu = target.runner[:-1]
    assert target.runner[-1] == "max,sme512=on"
    sets = {svl: sum(s.svl == svl for s in rt.library_kernels(target)) for svl in families.CROSS_SVLS}
    assert all(sets.values())
    for cpu in ("max,sme512=on", "max,sme256=on", "max,sme128=on", "max,sme1024=on", "max,sme=off",
                "cortex-a76", "neoverse-v1"):
        rc, events, stderr = _run([*qemu, cpu], exe, "one")
        assert rc == 0 and events, f"{cpu}: {stderr[-500:]}"
        one = events[0]
        assert one["rc"] == 0 and one["wrong"] == 0, (cpu, one)
        svl = int(cpu[len("max,sme"):-len("=on")]) if cpu.endswith("=on") else 0
        if svl in sets:
            assert one["cpu_check"] == 0 and one["usable"] == sets[svl], (cpu, one)
            assert one["svl_used"] == svl and one["streamed"] > 0, (cpu, one)
            # An A from memory keeps 16 columns in place only where no SME2 kernel may run them.
            assert one["wide_path"] == 1, (cpu, one)
        else:
            assert one["cpu_check"] == -4 and one["usable"] == 0, (cpu, one)
            assert one["streamed"] == 0, (cpu, one)
            assert "sme2" in one["error"] or "vector length" in one["error"], one["error"]
    assert "the library has 128 256 512 bits; this CPU's is 1024" in _run([*qemu, "max,sme1024=on"], exe,
                                                                            "one")[1][0]["error"]
    for cpu in ("max,sme256=on", "max,sme128=on", "cortex-a76"):
        rc, events, stderr = _run([*qemu, cpu], exe, "suite", "--seed", "5", "--cases", "40")
        _suite_ok(events, rc, stderr)


@pytest.mark.arm
@pytest.mark.parametrize("built", ["sme2"], indirect=True)
def test_a_thread_that_changes_its_svl_stays_right(built):
    """A program may give itself another streaming vector length (prctl
    PR_SME_SET_VL) after its first call, when the kernels were chosen for the
    first; this ran them at the wrong extents (wrong answers, writes outside C,
    SIGILL, heap corruption).  That thread's shares now take the portable code."""
    target, lib, work = built
    exe = rt.build_sequence_program(target, lib.archive, lib.header.parent, work)
    qemu = target.runner[:-1]
    for svl_bytes in (16, 64):  # "max" starts at SVL 256
        rc, events, stderr = _run([*qemu, "max"], exe, "--seed", "2", "--calls", "150", "--set-svl", str(svl_bytes))
        assert not [e for e in events if e["event"] == "fail"], events[:5]
        (summary,) = [e for e in events if e["event"] == "summary"]
        assert rc == 0 and summary["failures"] == 0 and summary["svl_after"] == svl_bytes * 8, stderr[-500:]
        assert summary["cpu_check_after"] == -4 and "not the 256 its SME2 kernels" in summary["cpu_error_after"]
        assert "sme2" in summary["families"]  # the SVL-256 set ran before the change


@pytest.mark.arm
@pytest.mark.parametrize("built", ["sme2"], indirect=True)
def test_sme2_without_sve(built):
    """SME2 does not imply SVE (Apple's M4 has none): the executor's normal-mode
    code, compiled under armv9-a, was vectorised with SVE and died of SIGILL at
    the first SME2 plan on such a CPU."""
    target, lib, work = built
    exe = rt.build_sequence_program(target, lib.archive, lib.header.parent, work)
    rc, events, stderr = _run([*target.runner[:-1], "max,sve=off,sme512=on"], exe, "--seed", "8", "--calls", "150")
    assert not [e for e in events if e["event"] == "fail"], events[:5]
    summary = [e for e in events if e["event"] == "summary"]
    assert rc == 0 and summary and summary[0]["failures"] == 0, f"rc={rc} (-4: SIGILL) {stderr[-500:]}"
    assert summary[0]["cpu_check"] == 0 and "sme2" in summary[0]["families"]


@pytest.mark.arm
@pytest.mark.slow
@pytest.mark.parametrize("svl", [128, 256])
def test_sme2_library_for_another_svl_is_right_at_it(svl, tmp_path):
    """The same library built for SVL 128 or 256 and run at it: the four-step K
    loops, the once-per-call panels and the region's transposing pack (vector
    length agnostic, slices moved four or two at a time) at other tile sizes."""
    try:
        target = arm_target("sme2", X86, svl_bits=svl)
    except ToolchainError as exc:
        pytest.skip(f"no Arm toolchain: {exc}")
    lib = rt.build_sample_library(target, tmp_path / "home")
    exe = rt.build_driver(target, lib, tmp_path / "work")
    assert target.runner[-1] == f"max,sme{svl}=on"
    rc, events, stderr = _run(target.runner, exe, "suite", "--seed", "7", "--cases", "120")
    summary = _suite_ok(events, rc, stderr)
    assert summary["pa_steps"] > 0 and summary["pb_steps"] > 0 and summary["kernel_steps"] > 0


def test_streaming_file_gets_a_compiler_that_knows_the_sme_attributes():
    old_gcc = Target(isa="sme2", cc=("gcc",), cflags=())
    assert arm.streaming_compiler(Target(isa="sme2", cc=("clang-19", "--target=aarch64-linux-gnu"),
                                         cflags=())) == ("clang-19", "--target=aarch64-linux-gnu")
    chosen = arm.streaming_compiler(old_gcc)
    assert chosen == ("gcc",) or "clang" in chosen[0]


@pytest.mark.arm
@pytest.mark.slow
def test_mixed_sme2_and_neon_table(tmp_path):
    """A table with both families (what a native SME2 host's install selects):
    NEON kernels called from inside a streaming region leave streaming mode
    around the call, shares with no SME2 kernel skip the region; the suite,
    the FA64-less CPU and the ABI checks still pass."""
    from autotune import build, codegen
    from autotune.link import default_params

    sme, neon = _target("sme2"), _target("neon")
    home = tmp_path / "home"
    objects = []
    for target in (sme, neon):
        chosen = rt.library_kernels(target)
        built = build.build_kernels(target, [codegen.generate(s) for s in chosen], home=home)
        objects += [(s, built.objects[s.name].path) for s in chosen]
    params = default_params(None, {"f32": (32, 32), "f64": (16, 32)}, provenance="emulated")
    lib = arm.build_arm_runtime(sme, [(s, {}) for s, _ in objects], objects, params, {}, home / "lib" / "sme2")
    exe = rt.build_driver(sme, lib, tmp_path / "work")
    for runner in (sme.runner, [*sme.runner[:-1], sme.runner[-1] + ",sme_fa64=off"]):
        rc, events, stderr = _run(runner, exe, "suite", "--seed", "31", "--cases", "150")
        summary = _suite_ok(events, rc, stderr)
        assert summary["kernels"] == len(objects)
        # Both families ran: steps of SME2 kernels and of the others (NEON).
        assert 0 < summary["sme2_steps"] < summary["kernel_steps"]
    rc, events, stderr = _run(sme.runner, exe, "abi")
    assert rc == 0 and not [e for e in events if e["event"] == "abi" and not e["ok"]], stderr[-500:]
