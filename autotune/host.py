"""Host detection: what machine is this, and what may its kernels use.

Detection lives in the parse functions below, each a pure function of recorded
text (``/proc/cpuinfo``, HWCAP words, ``sysctl`` output, sysfs cache files) so the
tests can replay machines this one is not.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class CacheLevel:
    level: int
    kind: str  # "data", "instruction" or "unified"
    size: int  # bytes
    line: int  # bytes
    ways: int
    sets: int
    shared_by: int = 1  # logical CPUs sharing one instance


@dataclass(frozen=True)
class HostInfo:
    arch: str  # "x86_64" | "aarch64"
    os: str  # "linux" | "darwin"
    cpu: str  # model name as the OS reports it
    features: tuple[str, ...]  # sorted, lower case: "avx512f", "fma", "asimd", "sme2", ...
    svl_bits: int = 0  # SME streaming vector length; 0 without SME
    caches: tuple[CacheLevel, ...] = field(default_factory=tuple)
    cores: int = 1
    compiler: str = ""  # e.g. "gcc 12.2.0"; not part of the fingerprint
    # Non-empty when a user-mode emulator runs this process (an aarch64 userland under
    # qemu-aarch64 on an x86-64 kernel): the features are the emulated CPU's, and
    # nothing timed here says anything about a real one.
    emulator: str = ""

    def has(self, *features: str) -> bool:
        return all(f in self.features for f in features)

    def cache(self, level: int, kind: str = "data") -> CacheLevel | None:
        for cache in self.caches:
            if cache.level == level and cache.kind in (kind, "unified"):
                return cache
        return None

    @property
    def fingerprint(self) -> str:
        """Stable identity of the hardware: everything a tuned table depends on.

        The compiler is left out on purpose: a compiler upgrade rebuilds kernels
        through the content-hashed build cache, it does not make a different host.
        """
        # An empty emulator is left out too, so a native host keeps the fingerprint it had
        # before the field existed; an emulated one is keyed apart from real hardware.
        identity = {k: v for k, v in self.to_dict().items()
                    if k != "compiler" and not (k == "emulator" and not v)}
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["features"] = list(self.features)
        data["caches"] = [asdict(c) for c in self.caches]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "HostInfo":
        return cls(
            arch=data["arch"],
            os=data["os"],
            cpu=data["cpu"],
            features=tuple(data["features"]),
            svl_bits=int(data.get("svl_bits", 0)),
            caches=tuple(CacheLevel(**c) for c in data.get("caches", [])),
            cores=int(data.get("cores", 1)),
            compiler=data.get("compiler", ""),
            emulator=data.get("emulator", ""),
        )


# ---------------------------------------------------------------------------
# Detection. Everything below reads recorded text through pure parse functions;
# only detect() and the small live readers touch the running machine.
# ---------------------------------------------------------------------------

SYSFS_CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")

# Used only when neither sysfs nor sysconf knows. The L1d is the smallest of any
# current server core, so a blocking derived from it stays inside the real cache;
# a too-small guess costs a few percent, a too-large one thrashes.
DEFAULT_LINE = 64
DEFAULT_L1D = CacheLevel(level=1, kind="data", size=32 * 1024, line=DEFAULT_LINE,
                         ways=8, sets=64)
DEFAULT_L2 = CacheLevel(level=2, kind="unified", size=1024 * 1024, line=DEFAULT_LINE,
                        ways=16, sets=1024)

# Linux auxv keys (elf.h) and the SME prctl (linux/prctl.h).
AT_HWCAP = 16
AT_HWCAP2 = 26
PR_SME_GET_VL = 64

# Bit positions of AT_HWCAP and AT_HWCAP2 on arm64, named as /proc/cpuinfo names
# them (arch/arm64/include/uapi/asm/hwcap.h and hwcap_str[] in
# arch/arm64/kernel/cpuinfo.c), so both sources give the same feature set.
ARM_HWCAP_BITS: dict[int, str] = dict(enumerate((
    "fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32",
    "atomics", "fphp", "asimdhp", "cpuid", "asimdrdm", "jscvt", "fcma", "lrcpc",
    "dcpop", "sha3", "sm3", "sm4", "asimddp", "sha512", "sve", "asimdfhm",
    "dit", "uscat", "ilrcpc", "flagm", "ssbs", "sb", "paca", "pacg",
    "gcs",
)))
ARM_HWCAP2_BITS: dict[int, str] = dict(enumerate((
    "dcpodp", "sve2", "sveaes", "svepmull", "svebitperm", "svesha3", "svesm4", "flagm2",
    "frint", "svei8mm", "svef32mm", "svef64mm", "svebf16", "i8mm", "bf16", "dgh",
    "rng", "bti", "mte", "ecv", "afp", "rpres", "mte3", "sme",
    "smei16i64", "smef64f64", "smei8i32", "smef16f32", "smeb16f32", "smef32f32", "smefa64", "wfxt",
    "ebf16", "sveebf16", "cssc", "rprfm", "sve2p1", "sme2", "sme2p1", "smei16i32",
    "smebi32i32", "smeb16b16", "smef16f16", "mops", "hbc", "sveb16b16", "lrcpc3", "lse128",
    "fpmr", "lut", "faminmax", "f8cvt", "f8fma", "f8dp4", "f8dp2", "f8e4m3",
    "f8e5m2", "smelutv2", "smef8f16", "smef8f32", "smesf8fma", "smesf8dp4", "smesf8dp2", "poe",
)))

# MIDR implementer and part numbers of the cores a GEMM user is likely to meet;
# Linux prints only the numbers, and a person wants the name.
ARM_IMPLEMENTERS = {
    0x41: "Arm", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon",
    0x4E: "NVIDIA", 0x51: "Qualcomm", 0x61: "Apple", 0x6D: "Microsoft", 0xC0: "Ampere",
}
ARM_PARTS = {
    (0x41, 0xD03): "Cortex-A53", (0x41, 0xD05): "Cortex-A55", (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72", (0x41, 0xD09): "Cortex-A73", (0x41, 0xD0A): "Cortex-A75",
    (0x41, 0xD0B): "Cortex-A76", (0x41, 0xD0C): "Neoverse-N1", (0x41, 0xD0D): "Cortex-A77",
    (0x41, 0xD40): "Neoverse-V1", (0x41, 0xD41): "Cortex-A78", (0x41, 0xD44): "Cortex-X1",
    (0x41, 0xD46): "Cortex-A510", (0x41, 0xD47): "Cortex-A710", (0x41, 0xD48): "Cortex-X2",
    (0x41, 0xD49): "Neoverse-N2", (0x41, 0xD4D): "Cortex-A715", (0x41, 0xD4E): "Cortex-X3",
    (0x41, 0xD4F): "Neoverse-V2", (0x41, 0xD80): "Cortex-A520", (0x41, 0xD81): "Cortex-A720",
    (0x41, 0xD82): "Cortex-X4", (0x41, 0xD84): "Neoverse-V3", (0x41, 0xD85): "Cortex-X925",
    (0x41, 0xD87): "Cortex-A725", (0x41, 0xD8E): "Neoverse-N3",
    (0x46, 0x001): "A64FX", (0xC0, 0xAC3): "AmpereOne",
}

# macOS sysctl names -> the Linux names above, so kernels select on one vocabulary.
# Apple spells the same feature several ways across OS releases, hence the aliases.
DARWIN_FEATURES: dict[str, tuple[str, ...]] = {
    "hw.optional.floatingpoint": ("fp",),
    "hw.optional.AdvSIMD": ("asimd",),
    "hw.optional.neon": ("asimd",),
    "hw.optional.neon_hpfp": ("asimdhp",),
    "hw.optional.neon_fp16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_FP16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_DotProd": ("asimddp",),
    "hw.optional.arm.FEAT_FHM": ("asimdfhm",),
    "hw.optional.armv8_2_fhm": ("asimdfhm",),
    "hw.optional.arm.FEAT_RDM": ("asimdrdm",),
    "hw.optional.arm.FEAT_BF16": ("bf16",),
    "hw.optional.arm.FEAT_EBF16": ("ebf16",),
    "hw.optional.arm.FEAT_I8MM": ("i8mm",),
    "hw.optional.arm.FEAT_FCMA": ("fcma",),
    "hw.optional.arm.FEAT_JSCVT": ("jscvt",),
    "hw.optional.arm.FEAT_LSE": ("atomics",),
    "hw.optional.armv8_1_atomics": ("atomics",),
    "hw.optional.arm.FEAT_CRC32": ("crc32",),
    "hw.optional.armv8_crc32": ("crc32",),
    "hw.optional.arm.FEAT_AES": ("aes",),
    "hw.optional.arm.FEAT_PMULL": ("pmull",),
    "hw.optional.arm.FEAT_SHA1": ("sha1",),
    "hw.optional.arm.FEAT_SHA256": ("sha2",),
    "hw.optional.arm.FEAT_SHA512": ("sha512",),
    "hw.optional.armv8_2_sha512": ("sha512",),
    "hw.optional.arm.FEAT_SHA3": ("sha3",),
    "hw.optional.armv8_2_sha3": ("sha3",),
    "hw.optional.arm.FEAT_LRCPC": ("lrcpc",),
    "hw.optional.arm.FEAT_LRCPC2": ("ilrcpc",),
    "hw.optional.arm.FEAT_DPB": ("dcpop",),
    "hw.optional.arm.FEAT_DPB2": ("dcpodp",),
    "hw.optional.arm.FEAT_FlagM": ("flagm",),
    "hw.optional.arm.FEAT_FlagM2": ("flagm2",),
    "hw.optional.arm.FEAT_FRINTTS": ("frint",),
    "hw.optional.arm.FEAT_SB": ("sb",),
    "hw.optional.arm.FEAT_PAuth": ("paca", "pacg"),
    "hw.optional.arm.FEAT_SSBS": ("ssbs",),
    "hw.optional.arm.FEAT_DIT": ("dit",),
    "hw.optional.arm.FEAT_BTI": ("bti",),
    "hw.optional.arm.FEAT_ECV": ("ecv",),
    "hw.optional.arm.FEAT_AFP": ("afp",),
    "hw.optional.arm.FEAT_RPRES": ("rpres",),
    "hw.optional.arm.FEAT_WFxT": ("wfxt",),
    "hw.optional.arm.FEAT_CSSC": ("cssc",),
    "hw.optional.arm.FEAT_HBC": ("hbc",),
    "hw.optional.arm.FEAT_SME": ("sme",),
    "hw.optional.arm.FEAT_SME2": ("sme2",),
    "hw.optional.arm.FEAT_SME_F64F64": ("smef64f64",),
    "hw.optional.arm.FEAT_SME_I16I64": ("smei16i64",),
    "hw.optional.arm.SME_F32F32": ("smef32f32",),
    "hw.optional.arm.SME_BI32I32": ("smebi32i32",),
    "hw.optional.arm.SME_B16F32": ("smeb16f32",),
    "hw.optional.arm.SME_F16F32": ("smef16f32",),
    "hw.optional.arm.SME_I8I32": ("smei8i32",),
    "hw.optional.arm.SME_I16I32": ("smei16i32",),
}

# Shown first by describe(), in this order, when the host has them; any other
# avx512* flag follows the named ones.
GEMM_FEATURES_AVX512 = (
    "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16", "avx512_fp16",
    "avx512_vnni", "avx512ifma",
)
GEMM_FEATURES_OTHER = (
    "amx_tile", "amx_bf16", "amx_int8", "avx2", "fma", "avx_vnni", "f16c",
    "fp", "asimd", "fphp", "asimdhp", "asimddp", "asimdfhm", "i8mm", "bf16",
    "sve", "sve2", "svei8mm", "svebf16", "sme", "sme2", "sme2p1", "smef64f64", "smei16i64",
)


# --- x86-64 ---------------------------------------------------------------

def _cpuinfo_fields(text: str) -> dict[str, str]:
    """``key: value`` pairs of the first processor block of /proc/cpuinfo.

    Every block describes one logical CPU and Linux only exposes the features
    common to all of them, so the first block speaks for the machine.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def parse_x86_cpuinfo(text: str) -> tuple[str, tuple[str, ...]]:
    """Model name and sorted lower-case ``flags`` of an x86 /proc/cpuinfo."""
    fields = _cpuinfo_fields(text)
    flags = fields.get("flags", "").lower().split()
    return fields.get("model name", ""), tuple(sorted(set(flags)))


# --- aarch64 --------------------------------------------------------------

def parse_arm_hwcaps(hwcap: int, hwcap2: int) -> tuple[str, ...]:
    """Feature names of the AT_HWCAP and AT_HWCAP2 words, as /proc/cpuinfo spells them.

    Bits this table does not name yet are ignored rather than invented: a newer
    kernel must not change the fingerprint of a machine it does not change.
    """
    names = {name for bit, name in ARM_HWCAP_BITS.items() if hwcap >> bit & 1}
    names |= {name for bit, name in ARM_HWCAP2_BITS.items() if hwcap2 >> bit & 1}
    return tuple(sorted(names))


def arm_cpu_name(implementer: int, part: int) -> str:
    """``0x41, 0xd40`` -> ``"Neoverse-V1"``; unknown parts keep their numbers."""
    if (implementer, part) in ARM_PARTS:
        return ARM_PARTS[implementer, part]
    vendor = ARM_IMPLEMENTERS.get(implementer, f"implementer 0x{implementer:02x}")
    return f"{vendor} part 0x{part:03x}"


def parse_arm_cpuinfo(text: str) -> tuple[str, tuple[str, ...]]:
    """CPU name and sorted ``Features`` of an aarch64 /proc/cpuinfo."""
    fields = _cpuinfo_fields(text)
    features = tuple(sorted(set(fields.get("features", "").lower().split())))
    name = fields.get("model name", "")
    try:
        name = arm_cpu_name(int(fields["cpu implementer"], 0), int(fields["cpu part"], 0))
    except (KeyError, ValueError):
        pass
    return name, features


def svl_bits_from_prctl(result: int) -> int:
    """Streaming vector length of a ``prctl(PR_SME_GET_VL)`` result (bytes in the low 16 bits)."""
    return (result & 0xFFFF) * 8 if result > 0 else 0


def _linux_auxv_hwcaps() -> tuple[int, int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        getauxval = libc.getauxval
    except (OSError, AttributeError):
        return None
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    hwcap, hwcap2 = int(getauxval(AT_HWCAP)), int(getauxval(AT_HWCAP2))
    return (hwcap, hwcap2) if hwcap else None


def _linux_svl_bits() -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl.restype = ctypes.c_int
        bits = svl_bits_from_prctl(int(libc.prctl(PR_SME_GET_VL, 0, 0, 0, 0)))
    except (OSError, AttributeError):
        bits = 0
    if bits:
        return bits
    # The default a new thread gets; equal to the prctl answer unless someone changed it.
    text = _read_text(Path("/proc/sys/abi/sme_default_vector_length"))
    return int(text) * 8 if text.isdigit() else 0


# --- user-mode emulation ----------------------------------------------------

# A 32-bit process on its 64-bit kernel is the kernel's own compat mode, not emulation.
_COMPAT_ARCHES = {("i386", "x86_64"), ("i686", "x86_64"), ("armv7l", "aarch64"), ("armv8l", "aarch64")}


def parse_kernel_arch(sysctl_arch: str, modalias: str = "") -> str:
    """The kernel's own architecture, from ``/proc/sys/kernel/arch`` or, failing that,
    ``/sys/devices/system/cpu/modalias`` (``cpu:type:x86,...`` / ``cpu:type:aarch64:...``).

    A user-mode emulator fakes uname and /proc/cpuinfo for its guest but passes these
    through, so they still name the machine underneath.  Empty when neither says.
    """
    if sysctl_arch.strip():
        return normalized_arch(sysctl_arch.strip())
    match = re.match(r"cpu:type:([a-z0-9_]+)", modalias.strip())
    if not match:
        return ""
    return {"x86": "x86_64"}.get(match[1], normalized_arch(match[1]))


def emulator_name(process_arch: str, kernel_arch: str, qemu_cpu: str = "") -> str:
    """What runs a ``process_arch`` process on a ``kernel_arch`` kernel: "" when the kernel
    runs it itself (or cannot tell), else a description naming the emulator's CPU
    model when QEMU's ``QEMU_CPU`` variable gives it."""
    if not kernel_arch or kernel_arch == process_arch or (process_arch, kernel_arch) in _COMPAT_ARCHES:
        return ""
    by = f"QEMU -cpu {qemu_cpu}" if qemu_cpu else "a user-mode emulator"
    return f"{process_arch} emulated by {by} on the host's {kernel_arch} kernel"


def _linux_emulator(arch: str) -> str:
    kernel = parse_kernel_arch(_read_text(Path("/proc/sys/kernel/arch")),
                               _read_text(Path("/sys/devices/system/cpu/modalias")))
    return emulator_name(arch, kernel, os.environ.get("QEMU_CPU", ""))


# --- macOS ----------------------------------------------------------------

def _sysctl_values(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        # `sysctl -a` writes "key: value"; `sysctl -e` and older tools "key=value".
        match = re.match(r"\s*([A-Za-z0-9_.]+)\s*(?::|=)\s*(.*?)\s*$", line)
        if match:
            values[match[1]] = match[2]
    return values


def _int_or(values: Mapping[str, str], *keys: str, default: int = 0) -> int:
    for key in keys:
        try:
            return int(values[key])
        except (KeyError, ValueError):
            continue
    return default


def parse_darwin_sysctl(text: str) -> dict:
    """HostInfo fields (cpu, features, svl_bits, caches, cores) from ``sysctl`` output.

    Caches are those of the performance cores (``hw.perflevel0``), where kernels run
    when they are busy. macOS reports no associativity, so the ways are the
    conservative defaults and the sets follow from size / (ways * line).
    """
    values = _sysctl_values(text)
    features: set[str] = set()
    for key, names in DARWIN_FEATURES.items():
        if _int_or(values, key) > 0:
            features.update(names)
    svl_bytes = _int_or(values, "hw.optional.arm.sme_max_svl_b")
    svl_bits = svl_bytes * 8 if "sme" in features else 0

    line = _int_or(values, "hw.cachelinesize", default=DEFAULT_LINE)
    l2_shared = _int_or(values, "hw.perflevel0.cpusperl2", default=1)
    specs = (
        (1, "data", ("hw.perflevel0.l1dcachesize", "hw.l1dcachesize"), DEFAULT_L1D.ways, 1),
        (1, "instruction", ("hw.perflevel0.l1icachesize", "hw.l1icachesize"), DEFAULT_L1D.ways, 1),
        (2, "unified", ("hw.perflevel0.l2cachesize", "hw.l2cachesize"), DEFAULT_L2.ways, l2_shared),
        (3, "unified", ("hw.l3cachesize",), DEFAULT_L2.ways, _int_or(values, "hw.ncpu", default=1)),
    )
    caches = []
    for level, kind, keys, ways, shared in specs:
        size = _int_or(values, *keys)
        if size > 0:
            caches.append(_complete_cache(level, kind, size, line, ways, 0, shared))
    return {
        "cpu": values.get("machdep.cpu.brand_string", ""),
        "features": tuple(sorted(features)),
        "svl_bits": svl_bits,
        "caches": with_default_caches(caches),
        "cores": _int_or(values, "hw.logicalcpu", "hw.ncpu", default=1),
    }


# --- caches ---------------------------------------------------------------

_KIND_ORDER = {"data": 0, "instruction": 1, "unified": 2}


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def parse_size(text: str) -> int:
    """``"48K"`` -> 49152; sysfs writes K, older kernels and other tools M or G."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not match:
        return 0
    return int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2].upper()]


def count_cpu_list(text: str) -> int:
    """Number of CPUs in a kernel cpu list such as ``"0-3,8,10-11"``."""
    count = 0
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            count += int(high) - int(low) + 1 if high else 1
    return count


def _complete_cache(level: int, kind: str, size: int, line: int, ways: int, sets: int,
                    shared_by: int) -> CacheLevel:
    """A CacheLevel with whichever of line, ways and sets was missing (0) derived.

    size = line * ways * sets holds for every real cache, so two of them give the
    third; with only the size known, the defaults of that level stand in.
    """
    line = line or DEFAULT_LINE
    default = DEFAULT_L1D if level == 1 else DEFAULT_L2
    if not ways and sets:
        ways = size // (line * sets)
    if not ways:
        ways = default.ways
    if not sets:
        sets = size // (line * ways)
    return CacheLevel(level=level, kind=kind, size=size, line=line, ways=max(ways, 1),
                      sets=max(sets, 1), shared_by=max(shared_by, 1))


def _sort_caches(caches: Iterable[CacheLevel]) -> tuple[CacheLevel, ...]:
    unique = {(c.level, c.kind): c for c in caches}
    return tuple(sorted(unique.values(), key=lambda c: (c.level, _KIND_ORDER.get(c.kind, 9))))


_SYSFS_CACHE_FILES = (
    "level", "type", "size", "coherency_line_size", "ways_of_associativity",
    "number_of_sets", "shared_cpu_list",
)


def _parse_sysfs_caches(root: Path) -> list[CacheLevel]:
    caches = []
    try:
        indexes = sorted(p for p in root.iterdir() if p.name.startswith("index"))
    except OSError:
        return caches
    for index in indexes:
        files = {name: _read_text(index / name) for name in _SYSFS_CACHE_FILES}
        level, kind, size = files["level"], files["type"].lower(), parse_size(files["size"])
        if not level.isdigit() or kind not in _KIND_ORDER or size <= 0:
            continue
        number = {name: int(v) if v.isdigit() else 0 for name, v in files.items()}
        caches.append(_complete_cache(
            int(level), kind, size, number["coherency_line_size"],
            number["ways_of_associativity"], number["number_of_sets"],
            count_cpu_list(files["shared_cpu_list"]),
        ))
    return caches


# glibc's _SC_LEVEL*_CACHE_* numbers (bits/confname.h); Python's os.sysconf does
# not name them, so they are asked of libc directly.
_GLIBC_SYSCONF = {
    (1, "data"): (188, 189, 190),
    (1, "instruction"): (185, 186, 187),
    (2, "unified"): (191, 192, 193),
    (3, "unified"): (194, 195, 196),
}


def sysconf_caches() -> tuple[CacheLevel, ...]:
    """Caches as glibc's sysconf reports them (from CPUID on x86); empty elsewhere."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return ()
    try:
        libc_sysconf = ctypes.CDLL(None).sysconf
    except (OSError, AttributeError):
        return ()
    libc_sysconf.restype = ctypes.c_long
    libc_sysconf.argtypes = [ctypes.c_int]
    caches = []
    for (level, kind), (size_name, ways_name, line_name) in _GLIBC_SYSCONF.items():
        size, ways, line = (max(int(libc_sysconf(n)), 0) for n in (size_name, ways_name, line_name))
        if size > 0:
            caches.append(_complete_cache(level, kind, size, line, ways, 0, 1))
    return _sort_caches(caches)


def with_default_caches(caches: Iterable[CacheLevel],
                        fallback: Iterable[CacheLevel] = ()) -> tuple[CacheLevel, ...]:
    """``caches`` plus an L1d and an L2 taken from ``fallback`` or the defaults if missing.

    The blocking model needs both levels; a guess that is too small costs a few
    percent, a missing level would cost a crash.
    """
    found = {(c.level, c.kind): c for c in caches}
    spare = {(c.level, c.kind): c for c in fallback}
    for default in (DEFAULT_L1D, DEFAULT_L2):
        # A data access at this level is served by a data cache or a unified one.
        served = [(default.level, kind) for kind in ("data", "unified")]
        if not any(key in found for key in served):
            chosen = next((spare[key] for key in served if key in spare), default)
            found[chosen.level, chosen.kind] = chosen
    return _sort_caches(found.values())


def read_sysfs_caches(root: Path = SYSFS_CACHE_ROOT, *,
                      use_sysconf: bool = True) -> tuple[CacheLevel, ...]:
    """The caches of one CPU from sysfs, completed so that L1d and L2 are always present.

    Missing sets or ways are derived from size and line; an L1d or L2 that sysfs
    does not describe comes from glibc's sysconf (unless ``use_sysconf`` is false,
    which keeps the function a pure reader of ``root``), else from the defaults.
    Missing or unreadable files are skipped, never raised.
    """
    return with_default_caches(_parse_sysfs_caches(root), sysconf_caches() if use_sysconf else ())


# --- cores and compiler ---------------------------------------------------

def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(len(os.sched_getaffinity(0)), 1)
        except OSError:
            pass
    return os.cpu_count() or 1


def parse_compiler_version(first_line: str) -> str:
    """Short compiler identity from the first line of ``cc --version``.

    ``"gcc 12.2.0"``, ``"clang 19.1.7"`` or ``"Apple clang 16.0.0"``; a compiler
    this does not recognise keeps its own first line.
    """
    line = first_line.strip()
    match = re.search(r"(Apple )?clang version (\d+(?:\.\d+)*)", line)
    if match:
        return f"{match[1] or ''}clang {match[2]}"
    # GCC prints "NAME (PKGVERSION) VERSION ...", whatever it was installed as
    # (cc, gcc-12, aarch64-linux-gnu-gcc); no other compiler uses that form.
    match = re.match(r"\S+ \(.*?\) (\d+\.\d+(?:\.\d+)?)", line)
    if match:
        return f"gcc {match[1]}"
    return line


def host_compiler() -> str:
    """Identity of the host C compiler ($CC, else cc); empty if there is none."""
    argv = os.environ.get("CC", "").split() or ["cc"]
    if not shutil.which(argv[0]):
        return ""
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (out.stdout or out.stderr).strip().splitlines()
    return parse_compiler_version(lines[0]) if out.returncode == 0 and lines else ""


# --- the running machine --------------------------------------------------

def normalized_arch(machine: str) -> str:
    machine = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _detect_linux(arch: str) -> HostInfo:
    cpuinfo = _read_text(Path("/proc/cpuinfo"))
    svl_bits = 0
    if arch == "aarch64":
        cpu, features = parse_arm_cpuinfo(cpuinfo)
        hwcaps = _linux_auxv_hwcaps()
        if hwcaps:
            features = parse_arm_hwcaps(*hwcaps)
        if "sme" in features:
            svl_bits = _linux_svl_bits()
    elif arch in ("x86_64", "i686", "i386"):
        cpu, features = parse_x86_cpuinfo(cpuinfo)
    else:
        cpu, features = _cpuinfo_fields(cpuinfo).get("model name", ""), ()
    return HostInfo(
        arch=arch, os="linux", cpu=cpu or platform.processor() or arch, features=features,
        svl_bits=svl_bits, caches=read_sysfs_caches(), cores=usable_cores(),
        compiler=host_compiler(), emulator=_linux_emulator(arch),
    )


def _detect_darwin(arch: str) -> HostInfo:
    try:
        out = subprocess.run(["sysctl", "hw", "machdep.cpu"], capture_output=True, text=True,
                             timeout=30)
        text = out.stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    fields = parse_darwin_sysctl(text)
    fields["cpu"] = fields["cpu"] or platform.processor() or arch
    fields["cores"] = usable_cores()
    return HostInfo(arch=arch, os="darwin", compiler=host_compiler(), **fields)


def _detect_other(arch: str, os_name: str) -> HostInfo:
    # archspec knows how to ask CPUID on systems without /proc; its names follow
    # Linux's cpuinfo flags, the vocabulary used everywhere else here.
    cpu, features = platform.processor() or arch, ()
    try:
        import archspec.cpu

        detected = archspec.cpu.host()
        cpu = detected.brand or detected.name or cpu
        features = tuple(sorted(f.lower() for f in detected.features))
    except Exception:  # archspec raises a variety of errors on unknown hosts
        pass
    return HostInfo(arch=arch, os=os_name, cpu=cpu, features=features,
                    caches=with_default_caches(()), cores=usable_cores(),
                    compiler=host_compiler())


class IsaCapError(ValueError):
    """AUTOTUNE_ISA names no instruction set of this architecture."""


#: AUTOTUNE_ISA, best first per architecture, with the feature-name prefixes each
#: level hides (those of every family above it).  As MKL_ENABLE_INSTRUCTIONS or
#: LIBXSMM_TARGET: an AVX-512 machine installs and tests as an AVX2-only or a
#: portable-C host, and a library can be built for the smaller machines it will meet.
ISA_CAPS: Mapping[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "x86_64": (("avx512", ()), ("avx2", ("avx512", "amx")),
               ("generic", ("avx512", "amx", "avx", "fma", "f16c"))),
    "aarch64": (("sme2", ()), ("neon", ("sme", "sve")), ("generic", ("sme", "sve", "asimd"))),
}
ISA_CAP_VARIABLE = "AUTOTUNE_ISA"


def apply_isa_cap(info: HostInfo, cap: str | None) -> HostInfo:
    """``info`` with the features above ``cap`` removed (None or "": unchanged).

    The fingerprint covers the features, so a capped host keys its own tables.
    Raises :class:`IsaCapError` for a name this architecture does not have.
    """
    hidden = above_cap(info.arch, info.features, cap)
    if not hidden:
        return info
    features = tuple(f for f in info.features if f not in hidden)
    svl_bits = info.svl_bits if "sme" in features else 0
    return replace(info, features=features, svl_bits=svl_bits)


def above_cap(arch: str, features: Iterable[str], cap: str | None) -> tuple[str, ...]:
    """The ``features`` that AUTOTUNE_ISA=``cap`` hides on ``arch`` (none without a cap)."""
    if not cap:
        return ()
    levels = dict(ISA_CAPS.get(arch, (("generic", ()),)))
    hidden = levels.get(cap.strip().lower())
    if hidden is None:
        raise IsaCapError(f"{ISA_CAP_VARIABLE}={cap!r} is not an instruction set of {arch}: "
                          f"use one of {', '.join(levels)}")
    return tuple(f for f in features if hidden and f.startswith(hidden))


@functools.lru_cache(maxsize=1)
def detect_cpu() -> HostInfo:
    """The running machine as the CPU itself answers, detected once per process.  The
    runtime's dispatch and other libraries see this one; $AUTOTUNE_ISA does not change it."""
    arch = normalized_arch(platform.machine())
    if sys.platform.startswith("linux"):
        return _detect_linux(arch)
    if sys.platform == "darwin":
        return _detect_darwin(arch)
    return _detect_other(arch, platform.system().lower() or sys.platform)


@functools.lru_cache(maxsize=1)
def detect() -> HostInfo:
    """The running machine as install builds for it: :func:`detect_cpu` capped by $AUTOTUNE_ISA."""
    return apply_isa_cap(detect_cpu(), os.environ.get(ISA_CAP_VARIABLE))


# --- presentation ---------------------------------------------------------

def _format_bytes(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def cache_label(cache: CacheLevel) -> str:
    suffix = {"data": "d", "instruction": "i"}.get(cache.kind, "")
    return f"L{cache.level}{suffix}"


def describe_cache(cache: CacheLevel) -> str:
    """``"48 KiB, 12-way, 64 B lines, 64 sets"`` (plus who shares it, when anyone does)."""
    text = f"{_format_bytes(cache.size)}, {cache.ways}-way, {cache.line} B lines, {cache.sets} sets"
    return text + (f", shared by {cache.shared_by} CPUs" if cache.shared_by > 1 else "")


#: Per core, more than any CPU is known to have (the largest seen: 12 MiB of L3 per
#: core on AMD's 3D V-cache parts, 16 MiB of L2 per Apple cluster, 192 KiB of L1d).
PLAUSIBLE_PER_CORE: Mapping[int, int] = {1: 1 << 20, 2: 32 << 20, 3: 64 << 20}


def cache_doubts(host: HostInfo) -> tuple[str, ...]:
    """What in the OS's cache report no real CPU would have, one sentence each.

    Virtual machines report what their configuration says: a 2-core Xeon VM
    announced a 480 MB L3.  The planner's models start from these sizes, and the
    install measures the decisions they feed; `autotune show` says which report
    it doubted.
    """
    doubts = []
    for cache in host.caches:
        if cache.kind == "instruction" or cache.level not in PLAUSIBLE_PER_CORE:
            continue
        share = cache.size / max(1, cache.shared_by)
        if share > PLAUSIBLE_PER_CORE[cache.level]:
            doubts.append(f"the OS reports an L{cache.level} of {_format_bytes(cache.size)} for "
                          f"{max(1, cache.shared_by)} CPU{'s' if cache.shared_by > 1 else ''}: "
                          f"{share / (1 << 20):.0f} MiB per CPU, more than any CPU has "
                          f"(a virtual machine's setting?)")
    levels = {c.level: c.size for c in host.caches if c.kind != "instruction"}
    for lower, upper in ((1, 2), (2, 3)):
        if lower in levels and upper in levels and levels[upper] < levels[lower]:
            doubts.append(f"the OS reports an L{upper} ({_format_bytes(levels[upper])}) smaller than "
                          f"the L{lower} ({_format_bytes(levels[lower])})")
    return tuple(doubts)


def describe(host: HostInfo) -> list[tuple[str, str]]:
    """Ordered (label, value) rows for a CLI to print."""
    gemm = [f for f in GEMM_FEATURES_AVX512 if f in host.features]
    gemm += sorted(f for f in host.features if f.startswith("avx512") and f not in gemm)
    gemm += [f for f in GEMM_FEATURES_OTHER if f in host.features]
    rest = len(host.features) - len(gemm)
    rows = [
        ("Architecture", f"{host.arch} / {host.os}"),
        ("CPU", host.cpu or "unknown"),
        ("GEMM features", " ".join(gemm) or "none"),
    ]
    if host.arch == "aarch64":
        rows.append(("SME vector length", f"{host.svl_bits} bits" if host.svl_bits else "no SME"))
    rows.append(("Other features", f"{rest} more"))
    if host.emulator:
        rows.append(("Emulated", f"{host.emulator}: timings mean nothing here"))
    rows += [(cache_label(c), describe_cache(c)) for c in host.caches]
    rows += [("Doubtful", doubt) for doubt in cache_doubts(host)]
    rows += [
        ("Cores", str(host.cores)),
        ("Compiler", host.compiler or "none found"),
        ("Fingerprint", host.fingerprint),
    ]
    return rows


def _cpu_times() -> tuple[float, float] | None:
    """(idle, total) jiffies of all CPUs, from /proc/stat; None where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [float(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    return idle, sum(values[:8])  # guest time is already counted in user


def load_meter(cores: int | None = None) -> Callable[[], float | None]:
    """Start counting; the function returned gives the cores' worth of work done since
    by anything but this process: other processes, and in a virtual machine the
    hypervisor's steal time (/proc/stat counts both as busy).

    :func:`other_load` looks before a measurement; this covers the measurement
    itself, which can take seconds in which a neighbour wakes up.  This process's
    own CPU time (all its threads) is taken out, so its own timings do not count.
    None where /proc/stat cannot be read.
    """
    import time

    start, wall0, own0 = _cpu_times(), time.monotonic(), _own_cpu_s()

    def since() -> float | None:
        end, wall = _cpu_times(), time.monotonic() - wall0
        if start is None or end is None or end[1] <= start[1] or wall <= 0:
            return None
        busy = (1.0 - (end[0] - start[0]) / (end[1] - start[1])) * (cores or os.cpu_count() or 1)
        return max(0.0, busy - (_own_cpu_s() - own0) / wall)
    return since


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def other_load(seconds: float = 0.5, cores: int | None = None) -> float | None:
    """Cores' worth of work other processes did while this one slept for ``seconds``.

    The load average lags by a minute (an install's own compiles would count);
    this is what the machine does now, which is what a timing meets.  None where
    /proc/stat does not exist (macOS).
    """
    import time

    before = _cpu_times()
    time.sleep(seconds)
    after = _cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy = 1.0 - (after[0] - before[0]) / (after[1] - before[1])
    return busy * (cores or os.cpu_count() or 1)
