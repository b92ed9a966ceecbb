"""Targets: how to build for an ISA and how to run what was built.

A :class:`Target` is everything the build and the harness need to know about one
ISA on this machine: the compiler command, that ISA's flags (each kernel family is
compiled with its own flags only, never the whole library with the highest ISA),
and the runner prefix (empty natively, the emulator when cross-building).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from .host import HostInfo


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

    @property
    def compiler_id(self) -> str:
        return compiler_identity(self.cc)


X86_ISAS = ("avx512", "avx2", "generic")
ARM_ISAS = ("sme2", "neon")
KNOWN_ISAS = X86_ISAS + ARM_ISAS

_COMMON = ("-O3", "-std=c11", "-fno-math-errno", "-fPIC")
_X86_FLAGS = {
    "avx512": _COMMON + ("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mavx2",
                         "-mprefer-vector-width=512"),
    "avx2": _COMMON + ("-mavx2", "-mfma"),
    "generic": _COMMON,
}
# Native x86 requirements of each family, as HostInfo feature names.
X86_REQUIRES = {
    "avx512": ("avx512f", "avx512vl", "avx512bw", "avx512dq", "fma"),
    "avx2": ("avx2", "fma"),
    "generic": (),
}


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


def target_for(isa: str, host: HostInfo) -> Target:
    """The Target that builds and runs ``isa`` kernels from this host."""
    if isa not in KNOWN_ISAS:
        raise ToolchainError(f"unknown target {isa!r}; known targets: {', '.join(KNOWN_ISAS)}")
    if isa in X86_ISAS and (host.arch == "x86_64" or isa == "generic"):
        if isa != "generic" and not host.has(*X86_REQUIRES[isa]):
            missing = [f for f in X86_REQUIRES[isa] if f not in host.features]
            raise ToolchainError(
                f"this CPU ({host.cpu}) lacks {', '.join(missing)}: it cannot run {isa} kernels"
            )
        flags = _X86_FLAGS[isa] if host.arch == "x86_64" else _COMMON
        return Target(isa=isa, cc=find_cc(), cflags=flags, base_cflags=_COMMON, arch=host.arch)
    if isa in X86_ISAS:
        raise ToolchainError(f"{isa} kernels need an x86-64 host; this one is {host.arch}")
    return arm_target(isa, host)


def arm_target(isa: str, host: HostInfo) -> Target:
    """NEON and SME2 targets: native on aarch64, cross-built and emulated on x86-64."""
    raise ToolchainError(
        f"the {isa} target is not available on this {host.arch} host yet: "
        "its cross toolchain and emulator are set up by scripts/setup.sh --arm"
    )
