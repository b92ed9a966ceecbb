"""Targets: how to build for an ISA and how to run what was built.

A :class:`Target` is everything the build and the harness need to know about one
ISA on this machine: the compiler command, that ISA's flags (each kernel family is
compiled with its own flags only, never the whole library with the highest ISA),
and the runner prefix (empty natively, the emulator when cross-building).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache

from .families import ARM_ISAS
from .home import kernels_src
from .host import HostInfo
from .specs import SVL_CHOICES


class ToolchainError(RuntimeError):
    """A target cannot be built or run here; the message says what to install."""


@dataclass(frozen=True)
class Target:
    isa: str
    cc: tuple[str, ...]  # compiler argv prefix, e.g. ("cc",) or ("clang-19", "--target=aarch64-linux-gnu")
    cflags: tuple[str, ...]  # flags for this ISA's kernels
    base_cflags: tuple[str, ...] = ("-O2",)  # flags for the harness driver and portable code
    ldflags: tuple[str, ...] = ()
    runner: tuple[str, ...] = ()  # argv prefix that runs a built program
    emulated: bool = False
    arch: str = "x86_64"
    svl_bits: int = 0  # the streaming vector length SME2 kernels are specialised to
    os: str = "linux"  # "linux" (ELF) or "darwin" (Mach-O): the link stage's library name and flags
    # Built and run natively, but this whole userland runs under a user-mode emulator
    # (HostInfo.emulator): its compiler and programs are as slow as an emulated target's.
    under_emulator: bool = False

    @property
    def compiler_id(self) -> str:
        return compiler_identity(self.cc)


#: How many times its native timeout a compile or a run may take under QEMU.
EMULATION_SLOWDOWN = 20.0


def slowdown(target: Target) -> float:
    """The factor on ``target``'s compile and run timeouts: an emulator's cost, else 1."""
    return EMULATION_SLOWDOWN if target.emulated or target.under_emulator else 1.0


X86_ISAS = ("avx512", "avx2", "generic")
KNOWN_ISAS = X86_ISAS + ARM_ISAS

_COMMON = ("-O3", "-std=c11", "-fno-math-errno", "-fPIC")
# The vector kernels are intrinsics written out in full, which -O3 has nothing
# to add to: 240 avx512 kernels timed at K = 4..256 ran at 0.998-1.003x their -O3
# speed (geomean per K) and compiled 11 % faster; -O1 lost 2-5 %.  Of -O2's RTL
# passes, global CSE, the second scheduling pass and the "expensive" cleanups
# cost 12-18 % of the compile and nothing at run time: 240 kernels
# of each family timed in interleaved rounds, both orders, ran at 1.007-1.05x
# (avx512) and 0.995-1.009x (avx2) their speed with those passes (geomean per K, Zen 4).
# (GCC's names: Clang would warn about each.)  Portable C (generic) keeps -O3,
# which vectorises its loops.  -fno-expensive-optimizations also turns off GCC's
# vzeroupper insertion, which Intel cores need before the SSE code that calls a
# kernel (a 48x8 call at K = 4 took 6x its time on a Xeon): the generated kernels
# and the peak loops clear the upper halves themselves (codegen._x86._leave_vector_state).
_VECTOR = ("-O2",) + _COMMON[1:]
GCC_VECTOR_FLAGS = ("-fno-gcse", "-fno-schedule-insns2", "-fno-expensive-optimizations")
# Every kernel function starts a 64-byte line, so it runs in the library at the place
# within a line where the harness timed it.  Linked at 16 bytes, 3,873 of the 5,100
# kernel functions of one install sat at another offset in the library than in a
# harness that timed them, and where a short kernel starts moved its speed: fp32 2x2 at
# K = 16 took 10.6 ns a call at offsets 0, 32 and 48 and 12.6 at 16, fp64 1x6
# 23.4 and 25.8 (Xeon, AVX-512).
_ALIGN_KERNELS = ("-falign-functions=64",)
_X86_FLAGS = {
    "avx512": _VECTOR + ("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mavx2",
                         "-mprefer-vector-width=512") + _ALIGN_KERNELS,
    "avx2": _VECTOR + ("-mavx2", "-mfma") + _ALIGN_KERNELS,
    "generic": _COMMON + _ALIGN_KERNELS,
}
# Native x86 requirements of each family, as HostInfo feature names.
X86_REQUIRES = {
    "avx512": ("avx512f", "avx512vl", "avx512bw", "avx512dq", "fma"),
    "avx2": ("avx2", "fma"),
    "generic": (),
}
# What each family needs of the CPU, as HostInfo feature names: a library
# records the union for its kernels and checks it when it loads (cpu.c).
REQUIRES = {**X86_REQUIRES, "neon": ("asimd",), "sme2": ("sme2",)}


def find_cc() -> tuple[str, ...]:
    """The host C compiler: $CC, else cc, gcc or clang, whichever exists first."""
    candidates = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    for candidate in candidates:
        argv = tuple(candidate.split())
        if shutil.which(argv[0]):
            return argv
    raise ToolchainError(
        "no C compiler found (tried " + ", ".join(candidates) + "). Install one, e.g. "
        "`apt-get install build-essential`, or run scripts/setup.sh, or set CC."
    )


@lru_cache(maxsize=None)
def compiler_identity(cc: tuple[str, ...]) -> str:
    """First line of `cc --version`: part of every object's content hash."""
    try:
        out = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run compiler {' '.join(cc)}: {exc}") from exc
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else " ".join(cc)


# What the runtime needs of a native compiler: the C library's headers, threads,
# and this Python's pointer width (a 32-bit library cannot be loaded by a 64-bit process).
_PROBE = f"""#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
_Static_assert(sizeof(void *) == {struct.calcsize("P")}, "autotune_probe_pointer_width");
int at_probe(void) {{ return 0; }}
"""


@lru_cache(maxsize=None)
def check_native_compiler(cc: tuple[str, ...], flags: tuple[str, ...]) -> None:
    """Refuse, before any stage starts, a compiler that cannot build this host's library.

    ``CC="gcc -m32"`` compiled every kernel (they include no C library header) and
    then failed deep in the link stage; one probe says it at once, in one line.
    """
    with tempfile.TemporaryDirectory(prefix="autotune-cc-probe-") as folder:
        source = os.path.join(folder, "probe.c")
        with open(source, "w") as handle:
            handle.write(_PROBE)
        argv = [*cc, *flags, "-fPIC", "-shared", "-pthread", source, "-o", os.path.join(folder, "probe.so")]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolchainError(f"cannot run compiler {' '.join(cc)}: {exc}") from exc
    if done.returncode == 0:
        return
    output = (done.stdout + done.stderr).replace(folder + os.sep, "")
    if "autotune_probe_pointer_width" in output:
        why = f"it does not build {8 * struct.calcsize('P')}-bit code, which this Python loads"
    else:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        why = next((line for line in lines if "error" in line), lines[0] if lines else f"status {done.returncode}")
    raise ToolchainError(f"the C compiler `{' '.join(cc)}` cannot build a library for this host: {why} "
                         "(set CC to a compiler for it, e.g. CC=gcc)")


#: Compiles the x86 vector kernels without their closing vzeroupper
#: (codegen._x86._leave_vector_state), on a CPU that measured it not worth its cost.
UPPER_HALVES_FREE_FLAG = "-DAT_UPPER_HALVES_FREE"
# The probe's call must beat the clearing one by this much: an even result keeps the
# clearing, whose worst case is a few cycles a call where the merge's is 6x (Intel).
_UPPER_HALVES_MARGIN = 0.95


@dataclass(frozen=True)
class UpperHalves:
    """What SSE code pays here after a kernel leaves the vector registers' upper halves
    dirty, from kernels_src/harness/upper_halves.c: nanoseconds of a call and the SSE
    work after it, leaving them dirty and clearing them."""

    dirty_ns: float
    clean_ns: float

    @property
    def free(self) -> bool:
        """Dirty halves clearly cost the caller less than clearing them costs the kernel."""
        return self.dirty_ns <= _UPPER_HALVES_MARGIN * self.clean_ns

    def to_dict(self) -> dict:
        return {"dirty_ns": self.dirty_ns, "clean_ns": self.clean_ns, "free": self.free}


@lru_cache(maxsize=None)
def upper_halves(cc: tuple[str, ...]) -> UpperHalves | None:
    """Time upper_halves.c on this x86-64 CPU (0.1 s), once a process; None where it
    cannot be built or run, and then the kernels clear the halves."""
    with tempfile.TemporaryDirectory(prefix="autotune-upper-halves-") as folder:
        program = os.path.join(folder, "upper_halves")
        try:
            built = subprocess.run([*cc, *_COMMON, "-mno-avx", str(kernels_src() / "harness" / "upper_halves.c"),
                                    "-o", program], capture_output=True, timeout=120)
            if built.returncode != 0:
                return None
            ran = subprocess.run([program], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
    try:
        dirty, clean = (float(field) for field in ran.stdout.split())
    except ValueError:
        return None
    return UpperHalves(dirty, clean) if ran.returncode == 0 else None


def _target_os(host: HostInfo) -> str:
    """A native target's object format family: "darwin" (Mach-O) on macOS, else "linux" (ELF)."""
    return "darwin" if host.os == "darwin" else "linux"


def native_isas(host: HostInfo) -> tuple[str, ...]:
    """Kernel families this host runs natively, fastest first."""
    if host.arch == "x86_64":
        return tuple(isa for isa in X86_ISAS if host.has(*X86_REQUIRES[isa]))
    if host.arch == "aarch64":
        isas = []
        if host.has("sme2") and host.svl_bits:
            isas.append("sme2")
        if host.has("asimd"):
            isas.append("neon")
        return tuple(isas) + ("generic",)
    return ("generic",)


def target_for(isa: str, host: HostInfo, svl_bits: int | None = None) -> Target:
    """The Target that builds and runs ``isa`` kernels from this host.

    ``svl_bits`` picks the SME2 streaming vector length (default: the host's, else 512).
    """
    if isa not in KNOWN_ISAS:
        raise ToolchainError(f"unknown target {isa!r}; known targets: {', '.join(KNOWN_ISAS)}")
    if isa in X86_ISAS and (host.arch == "x86_64" or isa == "generic"):
        if isa != "generic" and not host.has(*X86_REQUIRES[isa]):
            missing = [f for f in X86_REQUIRES[isa] if f not in host.features]
            raise ToolchainError(
                f"this CPU ({host.cpu}) lacks {', '.join(missing)}: it cannot run {isa} kernels"
            )
        flags = _X86_FLAGS[isa] if host.arch == "x86_64" else _COMMON
        cc = find_cc()
        if flags[0] == "-O2" and "clang" not in compiler_identity(cc).lower():
            flags = flags[:1] + GCC_VECTOR_FLAGS + flags[1:]
        check_native_compiler(cc, _COMMON)
        if isa != "generic" and host.arch == "x86_64":
            probe = upper_halves(cc)
            if probe is not None and probe.free:
                flags = flags + (UPPER_HALVES_FREE_FLAG,)
        return Target(isa=isa, cc=cc, cflags=flags, base_cflags=_COMMON, arch=host.arch,
                      os=_target_os(host), under_emulator=bool(host.emulator))
    if isa in X86_ISAS:
        raise ToolchainError(f"{isa} kernels need an x86-64 host; this one is {host.arch}")
    return arm_target(isa, host, svl_bits or host.svl_bits or 512)


def arm_target(isa: str, host: HostInfo, svl_bits: int = 512) -> Target:
    """NEON and SME2 targets: native on aarch64, cross-built and emulated on x86-64.

    ``svl_bits`` is the streaming vector length the SME2 kernels are specialised to;
    under emulation it is also the length QEMU gives the emulated CPU.
    """
    if isa not in ARM_ISAS:
        raise ToolchainError(f"{isa!r} is not an Arm target; Arm targets: {', '.join(ARM_ISAS)}")
    if svl_bits not in SVL_CHOICES:
        raise ToolchainError(f"SVL must be one of {SVL_CHOICES} bits, got {svl_bits}")
    flags = _COMMON + (arm_march(isa, host.os),)
    if host.arch == "aarch64":
        if isa == "sme2" and not host.has("sme2"):
            raise ToolchainError(f"this CPU ({host.cpu}) has no SME2: it cannot run sme2 kernels")
        if isa == "sme2" and host.svl_bits and host.svl_bits != svl_bits:
            raise ToolchainError(
                f"this CPU's streaming vector length is {host.svl_bits} bits, not {svl_bits}"
            )
        return Target(isa=isa, cc=find_cc(), cflags=flags, base_cflags=_COMMON, arch="aarch64",
                      svl_bits=svl_bits if isa == "sme2" else 0, os=_target_os(host),
                      under_emulator=bool(host.emulator))
    if host.arch != "x86_64":
        raise ToolchainError(f"cannot build {isa} kernels on a {host.arch} host")
    cc = _cross_clang()
    qemu = _recent_qemu(isa)
    cpu = "max,sme{}=on".format(svl_bits) if isa == "sme2" else "max"
    return Target(
        isa=isa,
        cc=cc,
        cflags=flags,
        base_cflags=_COMMON + ("-march=armv8-a",),
        ldflags=("-fuse-ld=lld", "-static"),
        runner=(str(qemu), "-cpu", cpu),
        emulated=True,
        arch="aarch64",
        svl_bits=svl_bits if isa == "sme2" else 0,
    )


_ARM_MARCH = {"neon": "-march=armv8-a+simd", "sme2": "-march=armv9-a+sme2+sme-f64f64"}
#: Apple's cores: the M4 has SME2 and SME_F64F64 but no SVE, while clang's armv9-a
#: (and armv9.2-a) turn SVE2 on, so C compiled with them (sme2_exec.c outside
#: streaming mode) may use instructions an M4 traps.  -mcpu=apple-m4 (LLVM 19 and
#: later) enables what the M4 has -- SME, SME2, SME_F64F64 -- and no SVE.
_APPLE_MARCH = {"neon": "-march=armv8-a+simd", "sme2": "-mcpu=apple-m4"}


def arm_march(isa: str, os_name: str = "linux") -> str:
    """The architecture flag of ``isa``'s kernels for an Arm target on ``os_name``."""
    return (_APPLE_MARCH if os_name == "darwin" else _ARM_MARCH)[isa]


#: The macOS release an Apple cross build targets (arm64-apple-macos<this>).
APPLE_MIN_OS = "14"


def apple_cross_target(isa: str, sdk: str | os.PathLike, svl_bits: int = 512) -> Target:
    """NEON and SME2 targets for arm64 macOS, cross-built here with clang-19 and ld64.lld.

    ``sdk`` is a macOS SDK folder (``usr/include``, ``usr/lib/libSystem.tbd``): clang
    reads the C library's headers from it and the linker libSystem's exports.  No
    runner: nothing built for macOS runs here.  The project's tests use it with a
    stub SDK (tests/macos/sdk) to check that everything the aarch64 library is made
    of compiles and links as Mach-O.
    """
    if isa not in ARM_ISAS:
        raise ToolchainError(f"{isa!r} is not an Arm target; Arm targets: {', '.join(ARM_ISAS)}")
    if svl_bits not in SVL_CHOICES:
        raise ToolchainError(f"SVL must be one of {SVL_CHOICES} bits, got {svl_bits}")
    clang = shutil.which("clang-19")
    lld = shutil.which("ld64.lld-19") or shutil.which("ld64.lld")
    if not clang or not lld:
        raise ToolchainError(f"clang-19 and lld-19 (ld64.lld) build for macOS here: {_SETUP_HINT}")
    return Target(
        isa=isa,
        cc=(clang, f"--target=arm64-apple-macos{APPLE_MIN_OS}", "-isysroot", str(sdk)),
        cflags=_COMMON + (arm_march(isa, "darwin"),),
        base_cflags=_COMMON,
        # A new -mlinker-version makes clang pass ld64's -platform_version, which lld needs.
        ldflags=(f"--ld-path={lld}", "-mlinker-version=1000"),
        arch="aarch64",
        svl_bits=svl_bits if isa == "sme2" else 0,
        os="darwin",
    )


_CROSS_SYSROOT_LIBC = "/usr/aarch64-linux-gnu/lib/libc.a"
_CROSS_LIBGCC = "/usr/lib/gcc-cross/aarch64-linux-gnu/*/libgcc.a"
# The first QEMU that executes SME2 (multi-vector loads, predicate-as-counter).
_QEMU_SME2 = (10, 1)
_SETUP_HINT = "run scripts/setup_arm.sh"


def _cross_clang() -> tuple[str, ...]:
    """clang-19 aimed at aarch64 Linux, with lld and the Debian cross C library."""
    clang = shutil.which("clang-19")
    if not clang:
        raise ToolchainError(f"clang-19 is not installed (it cross-builds the Arm kernels): {_SETUP_HINT}")
    if not shutil.which("ld.lld-19") and not shutil.which("ld.lld"):
        raise ToolchainError(f"lld-19 is not installed (clang links Arm programs with it): {_SETUP_HINT}")
    if not os.path.exists(_CROSS_SYSROOT_LIBC):
        raise ToolchainError(
            f"the aarch64 C library ({_CROSS_SYSROOT_LIBC}) is missing: install "
            f"libc6-dev-arm64-cross, or {_SETUP_HINT}"
        )
    if not glob.glob(_CROSS_LIBGCC):
        raise ToolchainError(
            "the aarch64 libgcc (clang finds the cross headers and start files through it) is "
            f"missing: install libgcc-12-dev-arm64-cross, or {_SETUP_HINT}"
        )
    return (clang, "--target=aarch64-linux-gnu")


def _qemu_aarch64_path() -> str:
    """Where scripts/setup_arm.sh unpacks qemu-aarch64."""
    from .home import tools_dir

    return str(tools_dir() / "qemu" / "usr" / "bin" / "qemu-aarch64")


def _parse_qemu_version(text: str) -> tuple[int, int] | None:
    """``qemu-aarch64 version 10.1.2 (Debian ...)`` -> ``(10, 1)``."""
    match = re.search(r"version (\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def _qemu_version(path: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _parse_qemu_version(out.stdout)


def _recent_qemu(isa: str) -> str:
    """The project's QEMU, else one on PATH; SME2 needs >= 10.1, NEON runs on any."""
    candidates = [_qemu_aarch64_path()] + [p for p in (shutil.which("qemu-aarch64"),
                                                      shutil.which("qemu-aarch64-static")) if p]
    found: list[tuple[str, tuple[int, int]]] = []
    for path in candidates:
        if os.access(path, os.X_OK):
            version = _qemu_version(path)
            if version:
                found.append((path, version))
    for path, version in found:
        if version >= _QEMU_SME2:
            return path
    if found and isa == "neon":
        return found[0][0]
    if found:
        path, version = found[0]
        raise ToolchainError(
            f"SME2 kernels need QEMU >= {_QEMU_SME2[0]}.{_QEMU_SME2[1]}, but {path} is "
            f"{version[0]}.{version[1]} (it traps SME2-only instructions): {_SETUP_HINT}"
        )
    raise ToolchainError(f"no qemu-aarch64 found to run the {isa} kernels here: {_SETUP_HINT}")
