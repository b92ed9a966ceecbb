"""Right answers on every CPU model QEMU emulates, or a clear error; never SIGILL.

A library meets other CPUs than the one it was built on (a home shared over NFS,
a container image, an aarch64 build copied to a phone), so each CPU must get
right answers from the kernels it can run, the portable code covering the rest.
tests/c/sequence.c checks that with a long run of varied calls in one process
(every BLAS entry, adversarial shapes and leading dims, aliasing, NaN rules,
thread counts, the packed path) and reports which kernel families its plans use.

* aarch64: the library of `autotune install --target sme2 --quick` (the session's
  ``sme2_install``, shared with tests/test_arm_netlib.py), NEON and SME2 sets for
  SVL 128, 256 and 512, under every CPU model qemu-aarch64 lists: ARMv8.0 cores
  (no LSE atomics, fp16, dotprod or SVE), SVE without SME (a64fx, neoverse-v1),
  SME2 without SVE (max,sve=off, as Apple's M4), SME2 at each SVL, SVLs the
  library has no set for (1024, 2048), and a thread that changes its SVL with
  prctl() after the first call.  QEMU cannot express
  SME without SME2 (no sme2 property), nor a neoverse-v2.
* x86-64: a library as a bigger machine builds it, with AVX-512, AVX2+FMA and
  portable kernels (compiled here, never run here), under qemu-x86_64 at CPU
  models below this host's (Nehalem: no AVX; SandyBridge: AVX without AVX2 and
  FMA), at it (Haswell), natively, and from Python under QEMU.  QEMU 11.1's TCG
  executes no AVX-512 (Skylake-Server runs as an AVX2 CPU and says so on
  stderr), so the expectations come from what the CPU reports to the program.

scripts/setup_arm.sh unpacks qemu-aarch64 and qemu-x86_64 into the tools folder.
Timings under emulation mean nothing; nothing here times anything.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import build, codegen, host as host_mod, toolchain
from autotune.families import default_family
from autotune.home import tools_dir
from autotune.link import build_runtime, default_params, emit_kernel_table_c
from autotune.specs import KernelSpec
from benchmarks.peers import PINNING_VARIABLES

from .untuned import small_selection

ROOT = Path(__file__).resolve().parent.parent
QEMU = tools_dir() / "qemu" / "usr" / "bin"
SETUP = "scripts/setup_arm.sh unpacks it"
#: Calls per run: enough for every entry, repeat kind and path (about 2 s per model under QEMU).
CALLS = 300

#: qemu-aarch64 models and the SME2 set each runs (0: none, NEON and portable code only).
#: "max" has SME2 at SVL 256 unless told otherwise.
ARM_MODELS = {
    "cortex-a35": 0, "cortex-a53": 0, "cortex-a55": 0, "cortex-a57": 0, "cortex-a72": 0,
    "cortex-a76": 0, "cortex-a78ae": 0, "cortex-a710": 0, "neoverse-n1": 0, "neoverse-n2": 0,
    "neoverse-v1": 0, "a64fx": 0, "max,sve=off,sme=off": 0, "max,sme=off": 0,
    "max,sme128=on": 128, "max,sme256=on": 256, "max,sme512=on": 512, "max,sme_fa64=off": 256,
    "max,sve=off": 256,  # SME2 without SVE, as Apple's M4
    "max,sme1024=on": 0, "max,sme2048=on": 0,
}
#: qemu-x86_64 models ("host": this CPU, natively).
X86_MODELS = ("host", "Nehalem", "SandyBridge", "Haswell", "Skylake-Server")

pytestmark = pytest.mark.slow


def _run(argv: list[str], timeout: float = 600, **kwargs) -> tuple[dict, subprocess.CompletedProcess]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    fails = [e for e in events if e["event"] == "fail"]
    summary = [e for e in events if e["event"] == "summary"]
    assert summary, f"rc={done.returncode} (-4 is SIGILL): {done.stderr[-800:]}"
    assert not fails and summary[0]["failures"] == 0, fails[:5]
    assert done.returncode == 0, done.stderr[-800:]
    # A call that could not compute says so on stderr ("libautotune: ...; C is unchanged").
    assert "libautotune:" not in done.stderr, done.stderr[-800:]
    return summary[0], done


def _seed(model: str) -> str:
    """A seed of its own per model: together the runs cover more calls."""
    return str(sum(map(ord, model)))


# --------------------------------------------------------------------------- aarch64


@pytest.fixture(scope="module")
def arm_sequence(sme2_install, tmp_path_factory) -> Path:
    from .arm_runtime import build as rt

    library = Path(sme2_install.library)
    return rt.build_sequence_program(sme2_install.target, library.parent / "libautotune.a", library.parent,
                                     tmp_path_factory.mktemp("arm-sequence"))


def _arm_sets(sme2_install) -> tuple[int, dict[int, int]]:
    """NEON kernels, and SME2 kernels per SVL, of the installed library."""
    chosen = [r.spec for r in sme2_install.table.selected()]
    svls: dict[int, int] = {}
    for spec in chosen:
        if spec.isa == "sme2":
            svls[spec.svl] = svls.get(spec.svl, 0) + 1
    return sum(s.isa == "neon" for s in chosen), svls


@pytest.mark.arm
@pytest.mark.parametrize("cpu", list(ARM_MODELS))
def test_the_aarch64_library_is_right_on_every_arm_cpu(sme2_install, arm_sequence, cpu):
    qemu = sme2_install.target.runner[0]
    summary, _ = _run([qemu, "-cpu", cpu, str(arm_sequence), "--seed", _seed(cpu), "--calls", str(CALLS)])
    assert summary["calls"] > 0.9 * CALLS and summary["bad_calls"] > 0
    assert summary["refused_steps"] == 0  # no plan uses a kernel this CPU cannot run
    neon, svls = _arm_sets(sme2_install)
    svl = ARM_MODELS[cpu]
    assert summary["usable"] == neon + svls.get(svl, 0), summary
    families = set(summary["families"])
    if svl:
        assert summary["cpu_check"] == 0 and "sme2" in families, summary
    else:
        assert families <= {"neon", "edge"} and "neon" in families, summary
        assert summary["cpu_check"] == -4 and ("sme2" in summary["cpu_error"]
                                               or "vector length" in summary["cpu_error"]), summary


@pytest.mark.arm
@pytest.mark.parametrize("svl_bytes", [16, 128])
def test_a_thread_that_changes_its_svl_after_the_first_call(sme2_install, arm_sequence, svl_bytes):
    """prctl(PR_SME_SET_VL) after the first call: the kernels were chosen for the
    first SVL.  Before the fix this gave wrong answers, writes outside C, SIGILL
    and heap corruption; now that thread computes with portable code and
    at_cpu_check says why."""
    qemu = sme2_install.target.runner[0]
    summary, _ = _run([qemu, "-cpu", "max", str(arm_sequence), "--seed", str(svl_bytes), "--calls", str(CALLS),
                       "--set-svl", str(svl_bytes)])
    assert summary["svl_after"] == svl_bytes * 8
    assert summary["cpu_check"] == 0 and summary["cpu_check_after"] == -4, summary
    assert f"streaming vector length is {svl_bytes * 8} bits, not the 256" in summary["cpu_error_after"]


# --------------------------------------------------------------------------- x86-64


def _qemu_x86() -> str:
    path = QEMU / "qemu-x86_64"
    if not os.access(path, os.X_OK):
        pytest.skip(f"needs qemu-x86_64 in {path.parent} ({SETUP})")
    return str(path)


def _slim(specs: list[KernelSpec], isa: str) -> list[KernelSpec]:
    """Per dtype and transposition the biggest block, and for portable C a 1x1 and
    a 4x4 tail: what dispatch needs at a fifth of small_selection's compiling
    (the tiler's interplay with a whole family is tests/test_sequence.py's)."""
    keep = []
    for spec in small_selection(specs):
        group = [t for t in specs if (t.dtype, t.trans) == (spec.dtype, spec.trans)]
        biggest = spec.mr * spec.nr == max(t.mr * t.nr for t in group)
        if biggest or (isa == "generic" and (spec.mr, spec.nr) in ((1, 1), (4, 4))):
            keep.append(spec)
    return keep


@pytest.fixture(scope="module")
def bigger_library(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """A library as an AVX-512 machine's install makes it: AVX-512, AVX2+FMA and
    portable kernels (AVX-512 only compiled here), and its kernels per family."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs an x86-64 host")
    info = host_mod.detect()
    home = tmp_path_factory.getbasetemp() / "runtime-home"  # the session library's build cache
    objects: list[tuple[KernelSpec, Path]] = []
    for isa in toolchain.X86_ISAS:
        # Target as target_for gives it, without its check that this CPU runs the family.
        target = toolchain.Target(isa=isa, cc=toolchain.find_cc(), cflags=toolchain._X86_FLAGS[isa],
                                  base_cflags=toolchain._COMMON)
        specs = _slim(default_family([isa], quick=True), isa)
        result = build.build_kernels(target, [codegen.generate(s) for s in specs], jobs=2, home=home)
        assert not result.failures, sorted(result.failures)
        objects += [(obj.spec or KernelSpec.from_name(name), obj.path) for name, obj in result.objects.items()
                    if obj.path is not None]
    main = {"f32": (6, 16), "f64": (6, 8)}
    params = default_params(info, main, provenance="model")
    table = emit_kernel_table_c([(s, {}) for s, _ in objects], params, {"f32": 152.4, "f64": 76.2})
    out = tmp_path_factory.mktemp("bigger") / "lib" / "host"
    lib = build_runtime(toolchain.target_for("generic", info), objects, table, out).library
    counts = {isa: sum(s.isa == isa for s, _ in objects) for isa in toolchain.X86_ISAS}
    return lib, counts


@pytest.fixture(scope="module")
def x86_sequence(bigger_library, tmp_path_factory) -> Path:
    lib, _ = bigger_library
    exe = tmp_path_factory.mktemp("x86-sequence") / "sequence"
    cc = toolchain.find_cc()
    subprocess.run([*cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{lib.parent}",
                    str(ROOT / "tests" / "c" / "sequence.c"), f"-L{lib.parent}", "-l:libautotune.so",
                    f"-Wl,-rpath,{lib.parent}", "-pthread", "-lm", "-o", str(exe)], check=True)
    return exe


@pytest.mark.xdist_group("x86-models")
@pytest.mark.parametrize("cpu", X86_MODELS)
def test_a_bigger_machines_library_is_right_on_every_x86_cpu(bigger_library, x86_sequence, cpu):
    _, counts = bigger_library
    runner = [] if cpu == "host" else [_qemu_x86(), "-cpu", cpu]
    summary, _ = _run([*runner, str(x86_sequence), "--seed", _seed(cpu), "--calls", str(CALLS)])
    features = set(summary["features"].split())
    runs = [isa for isa in toolchain.X86_ISAS if set(toolchain.X86_REQUIRES[isa]) <= features]
    if cpu in ("Nehalem", "SandyBridge"):
        assert runs == ["generic"], summary  # the model really lacks AVX2 and FMA
    if cpu == "Haswell":
        assert runs == ["avx2", "generic"], summary
    assert summary["usable"] == sum(counts[isa] for isa in runs), summary
    assert summary["refused_steps"] == 0
    families = set(summary["families"])
    assert families <= {*runs, "edge"} and runs[0] in families, summary
    lacking = [f for isa in toolchain.X86_ISAS for f in toolchain.X86_REQUIRES[isa] if f not in features]
    if not lacking:  # an AVX-512 host, natively
        assert summary["cpu_check"] == 0, summary
    else:
        assert summary["cpu_check"] == -4, summary
        named = summary["cpu_error"].split("lacks ", 1)[1].split(":", 1)[0].split()
        assert sorted(named) == sorted(set(lacking)), summary["cpu_error"]


#: Python under QEMU: the loader's warning, and right answers through gemm (the
#: _atfast extension) from the kernels this CPU runs.
PYTHON_CHECK = r"""
import sys, warnings
import numpy as np
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import autotune.runtime as rt
    runtime = rt.use_library(sys.argv[1])
assert runtime is not None
from tests.test_sequence import _call
usable = [runtime.lib.at_kernel_usable(i) for i in range(runtime.lib.at_kernel_count())]
rng = np.random.default_rng(5)
calls = 0
for dtype in (np.float32, np.float64):
    for M, N, K in ((1, 1, 1), (7, 33, 17), (16, 16, 1), (65, 9, 64), (3, 130, 2), (48, 47, 0)):
        for ta in (False, True):
            for tb in (False, True):
                _call(rng, dtype, M, N, K, ta, tb, [1, 0, 17], ["F", "C", "F"], 1.5, 0.0 if calls % 2 else -2.0)
                calls += 1
print(sum(usable), calls, runtime.fast is not None)
print("WARN", " | ".join(str(w.message) for w in seen))
"""


@pytest.mark.xdist_group("x86-models")
def test_python_on_a_cpu_without_avx(bigger_library):
    lib, counts = bigger_library
    # A variable pinning numpy's OpenBLAS to another CPU's kernels (this workplace's
    # shells export OPENBLAS_CORETYPE=Haswell) makes `import numpy` die of SIGILL on the
    # emulated Nehalem before any of autotune runs.
    env = {k: v for k, v in os.environ.items() if k not in PINNING_VARIABLES}
    done = subprocess.run([_qemu_x86(), "-cpu", "Nehalem", sys.executable, "-c", PYTHON_CHECK, str(lib)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-1500:]
    usable, calls, fast = done.stdout.split("\n")[0].split()
    assert int(usable) == counts["generic"] and int(calls) == 48 and fast == "True"
    assert "lacks avx2 fma avx512f" in done.stdout and "right answers" in done.stdout
