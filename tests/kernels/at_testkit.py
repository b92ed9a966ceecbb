"""Shared helpers of the build / harness / measure tests: the hand-written kernels
of this directory turned into sources with the kernel ABI, and a native target."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from autotune.host import HostInfo
from autotune.specs import KernelSpec
from autotune.toolchain import Target, native_isas, target_for

KERNELS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class KernelSource:
    """Shaped like autotune.codegen.GeneratedSource: what build_kernels reads."""

    spec: KernelSpec
    text: str
    language: str = "c"


def cpu_features() -> tuple[str, ...]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return tuple(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return ()


def native_target() -> Target:
    """The fastest family this machine runs natively (avx512 here)."""
    host = HostInfo(arch=platform.machine(), os="linux", cpu="test", features=cpu_features())
    return target_for(native_isas(host)[0], host)


def source(body: str, isa: str, dtype: str, mr: int, nr: int, trans: str = "nn",
           variant: str = "naive") -> KernelSource:
    """``tests/kernels/<body>.c`` instantiated as the kernel ``KernelSpec(...).name``."""
    spec = KernelSpec(isa, dtype, mr, nr, trans[0] == "t", trans[1] == "t", variant)
    defines = (
        f"#define AT_NAME {spec.name}\n#define AT_T {spec.ctype}\n"
        f"#define AT_MR {mr}\n#define AT_NR {nr}\n"
        f"#define AT_TA {int(spec.trans_a)}\n#define AT_TB {int(spec.trans_b)}\n"
    )
    return KernelSource(spec, defines + (KERNELS / f"{body}.c").read_text())


def naive_sources(isa: str) -> list[KernelSource]:
    """A correct kernel per dtype and transposition, with odd block sizes."""
    shapes = {"f32": (5, 3), "f64": (3, 4)}
    return [
        source("naive", isa, dtype, *shapes[dtype], trans)
        for dtype in ("f32", "f64")
        for trans in ("nn", "nt", "tn", "tt")
    ]


def bad_sources(isa: str) -> dict[str, KernelSource]:
    """The misbehaving kernels, keyed by what is wrong with them."""
    return {
        "wrong": source("wrong", isa, "f64", 4, 2, variant="wrong"),
        "overread": source("overread", isa, "f32", 5, 2, variant="overread"),
        "padwrite": source("padwrite", isa, "f32", 3, 3, variant="padwrite"),
        "segv": source("crash_segv", isa, "f32", 2, 2, variant="segv"),
        "abort": source("crash_abort", isa, "f64", 2, 2, variant="abort"),
        "hang": source("hang", isa, "f32", 1, 1, variant="hang"),
    }
