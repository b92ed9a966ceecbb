"""Host detection, replayed on recorded machines and checked on this one."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import host as H
from autotune.host import CacheLevel, HostInfo

DATA = Path(__file__).parent / "data" / "hosts"


def read(*parts: str) -> str:
    return DATA.joinpath(*parts).read_text()


def recorded_auxv(name: str) -> tuple[int, int]:
    words = dict(line.split(":") for line in read(name, "auxv").splitlines() if line.strip())
    return int(words["AT_HWCAP"], 0), int(words["AT_HWCAP2"], 0)


def epyc() -> HostInfo:
    cpu, features = H.parse_x86_cpuinfo(read("epyc-zen5", "cpuinfo"))
    caches = H.read_sysfs_caches(DATA / "epyc-zen5" / "cache", use_sysconf=False)
    return HostInfo("x86_64", "linux", cpu, features, 0, caches, 2, "gcc 12.2.0")


def graviton3() -> HostInfo:
    cpu, _ = H.parse_arm_cpuinfo(read("graviton3", "cpuinfo"))
    features = H.parse_arm_hwcaps(*recorded_auxv("graviton3"))
    caches = H.read_sysfs_caches(DATA / "graviton3" / "cache", use_sysconf=False)
    return HostInfo("aarch64", "linux", cpu, features, 0, caches, 2, "gcc 12.2.0")


def apple_m4() -> HostInfo:
    fields = H.parse_darwin_sysctl(read("apple-m4", "sysctl.txt"))
    return HostInfo(arch="aarch64", os="darwin", compiler="Apple clang 16.0.0", **fields)


RECORDED = {"epyc-zen5": epyc, "graviton3": graviton3, "apple-m4": apple_m4}


# --- x86-64 ---------------------------------------------------------------

def test_x86_cpuinfo_features():
    cpu, features = H.parse_x86_cpuinfo(read("epyc-zen5", "cpuinfo"))
    assert cpu == "AMD EPYC"
    for flag in ("avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16", "avx2", "fma"):
        assert flag in features
    assert "amx_tile" not in features and "avx512_fp16" not in features
    assert list(features) == sorted(set(features))
    assert all(f == f.lower() for f in features)


def test_x86_cpuinfo_reads_first_processor_only():
    text = (
        "processor\t: 0\nmodel name\t: First CPU\nflags\t\t: FMA sse avx2 fma\n\n"
        "processor\t: 1\nmodel name\t: Second CPU\nflags\t\t: avx512f\n"
    )
    assert H.parse_x86_cpuinfo(text) == ("First CPU", ("avx2", "fma", "sse"))
    assert H.parse_x86_cpuinfo("") == ("", ())


def test_x86_sysfs_caches():
    caches = H.read_sysfs_caches(DATA / "epyc-zen5" / "cache", use_sysconf=False)
    assert [(c.level, c.kind) for c in caches] == [
        (1, "data"), (1, "instruction"), (2, "unified"), (3, "unified")]
    l1d, _, l2, l3 = caches
    assert l1d == CacheLevel(1, "data", 48 * 1024, 64, 12, 64, 1)
    assert l2 == CacheLevel(2, "unified", 1024 * 1024, 64, 16, 1024, 1)
    assert (l3.size, l3.ways, l3.sets, l3.shared_by) == (32 << 20, 16, 32768, 2)


# --- aarch64 --------------------------------------------------------------

def test_graviton3_cpuinfo():
    cpu, features = H.parse_arm_cpuinfo(read("graviton3", "cpuinfo"))
    assert cpu == "Neoverse-V1"
    for feature in ("fp", "asimd", "asimdhp", "fphp", "asimddp", "sve", "i8mm", "bf16", "svei8mm"):
        assert feature in features
    for feature in ("sve2", "sme", "sme2"):
        assert feature not in features


def test_graviton3_hwcaps_match_cpuinfo():
    _, from_cpuinfo = H.parse_arm_cpuinfo(read("graviton3", "cpuinfo"))
    assert H.parse_arm_hwcaps(*recorded_auxv("graviton3")) == from_cpuinfo


@pytest.mark.parametrize("word, bit, name", [
    (1, 0, "fp"), (1, 1, "asimd"), (1, 9, "fphp"), (1, 10, "asimdhp"), (1, 20, "asimddp"),
    (1, 22, "sve"), (1, 31, "pacg"),
    (2, 1, "sve2"), (2, 13, "i8mm"), (2, 14, "bf16"), (2, 23, "sme"), (2, 25, "smef64f64"),
    (2, 37, "sme2"), (2, 38, "sme2p1"),
])
def test_hwcap_bit_positions(word, bit, name):
    hwcap, hwcap2 = (1 << bit, 0) if word == 1 else (0, 1 << bit)
    assert H.parse_arm_hwcaps(hwcap, hwcap2) == (name,)


def test_hwcap_unknown_bits_are_ignored():
    assert H.parse_arm_hwcaps(1 << 61, 0) == ()
    assert H.parse_arm_hwcaps(0, 0) == ()


def test_hwcap_random_words_round_trip():
    hwcap_of = {name: bit for bit, name in H.ARM_HWCAP_BITS.items()}
    hwcap2_of = {name: bit for bit, name in H.ARM_HWCAP2_BITS.items()}
    assert not set(hwcap_of) & set(hwcap2_of), "a name must mean one bit"
    rng = random.Random(20261122)
    for _ in range(200):
        hwcap = sum(1 << b for b in H.ARM_HWCAP_BITS if rng.random() < 0.5)
        hwcap2 = sum(1 << b for b in H.ARM_HWCAP2_BITS if rng.random() < 0.5)
        names = H.parse_arm_hwcaps(hwcap, hwcap2)
        assert sum(1 << hwcap_of[n] for n in names if n in hwcap_of) == hwcap
        assert sum(1 << hwcap2_of[n] for n in names if n in hwcap2_of) == hwcap2


def test_arm_cpu_names():
    assert H.arm_cpu_name(0x41, 0xD40) == "Neoverse-V1"
    assert H.arm_cpu_name(0x41, 0xD4F) == "Neoverse-V2"
    assert H.arm_cpu_name(0x61, 0x022) == "Apple part 0x022"
    assert H.arm_cpu_name(0x99, 0x1) == "implementer 0x99 part 0x001"


def test_graviton3_sysfs_caches_derive_missing_sets_and_ways():
    l1d, l1i, l2, l3 = H.read_sysfs_caches(DATA / "graviton3" / "cache", use_sysconf=False)
    assert l1d == CacheLevel(1, "data", 64 * 1024, 64, 4, 256, 1)
    assert l1i.kind == "instruction" and l1i.sets == 256
    assert (l2.size, l2.ways, l2.sets) == (1 << 20, 8, 2048)
    # Only the size is known: default ways and line, sets from the size.
    assert (l3.ways, l3.line, l3.sets, l3.shared_by) == (16, 64, 32768, 2)


def test_sme_vector_length_from_prctl():
    assert H.svl_bits_from_prctl(64) == 512
    assert H.svl_bits_from_prctl(64 | 1 << 17) == 512  # PR_SME_VL_INHERIT flag set
    assert H.svl_bits_from_prctl(-1) == 0  # EINVAL: no SME


# --- macOS ----------------------------------------------------------------

def test_apple_m4_sysctl():
    fields = H.parse_darwin_sysctl(read("apple-m4", "sysctl.txt"))
    assert fields["cpu"] == "Apple M4"
    for feature in ("fp", "asimd", "asimdhp", "fphp", "asimddp", "bf16", "i8mm", "sme", "sme2",
                    "smef64f64", "smei16i64"):
        assert feature in fields["features"]
    assert "sve" not in fields["features"] and "sve2" not in fields["features"]
    assert fields["svl_bits"] == 512
    assert fields["cores"] == 10
    l1d = next(c for c in fields["caches"] if (c.level, c.kind) == (1, "data"))
    l2 = next(c for c in fields["caches"] if c.level == 2)
    assert (l1d.size, l1d.line, l1d.ways, l1d.sets) == (128 * 1024, 128, 8, 128)
    assert (l2.size, l2.line, l2.sets, l2.shared_by) == (16 << 20, 128, 8192, 4)


def test_darwin_without_sme_has_no_svl_and_accepts_equals_form():
    text = ("hw.optional.AdvSIMD=1\n"
            "hw.optional.arm.FEAT_SME = 0\n"
            "hw.optional.arm.sme_max_svl_b: 64\n")
    fields = H.parse_darwin_sysctl(text)
    assert fields["features"] == ("asimd",)
    assert fields["svl_bits"] == 0
    assert H.HostInfo("aarch64", "darwin", **fields).cache(1).size == H.DEFAULT_L1D.size


# --- caches, cores, compiler ----------------------------------------------

def test_missing_sysfs_gives_defaults(tmp_path):
    caches = H.read_sysfs_caches(tmp_path / "absent", use_sysconf=False)
    assert caches == (H.DEFAULT_L1D, H.DEFAULT_L2)


def test_broken_sysfs_entries_are_skipped(tmp_path):
    def index(name: str, **files: str) -> None:
        (tmp_path / name).mkdir()
        for key, value in files.items():
            (tmp_path / name / key).write_text(value + "\n")

    index("index0", level="1", type="Data", size="garbage")
    index("index1", level="x", type="Unified", size="1M")
    index("index2", type="Unified", size="8M")
    index("index3", level="3", type="Unified", size="8192K", number_of_sets="8192",
          coherency_line_size="64", ways_of_associativity="0")
    (tmp_path / "uevent").write_text("")
    caches = H.read_sysfs_caches(tmp_path, use_sysconf=False)
    l3 = CacheLevel(3, "unified", 8 << 20, 64, 16, 8192, 1)  # ways derived from the sets
    assert caches == (H.DEFAULT_L1D, H.DEFAULT_L2, l3)


def test_fallback_caches_fill_only_missing_levels():
    l2 = CacheLevel(2, "unified", 2 << 20, 64, 16, 2048, 1)
    spare = (CacheLevel(1, "data", 48 * 1024, 64, 12, 64, 1), CacheLevel(2, "unified", 1, 64, 1, 1))
    assert H.with_default_caches([l2], spare) == (spare[0], l2)


@pytest.mark.parametrize("text, size", [("48K", 48 << 10), ("1024K", 1 << 20), ("2M", 2 << 20),
                                        ("512", 512), ("32 KiB", 32 << 10), ("", 0), ("x", 0)])
def test_parse_size(text, size):
    assert H.parse_size(text) == size


@pytest.mark.parametrize("text, count", [("0", 1), ("0-1", 2), ("0-3,8,10-11", 7), ("", 0)])
def test_count_cpu_list(text, count):
    assert H.count_cpu_list(text) == count


@pytest.mark.parametrize("line, identity", [
    ("cc (Debian 12.2.0-14+deb12u1) 12.2.0", "gcc 12.2.0"),
    ("gcc (GCC) 11.4.1 20230605 (Red Hat 11.4.1-2)", "gcc 11.4.1"),
    ("aarch64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0", "gcc 12.2.0"),
    ("Debian clang version 19.1.7 (3+b1)", "clang 19.1.7"),
    ("clang version 18.1.3", "clang 18.1.3"),
    ("Apple clang version 16.0.0 (clang-1600.0.26.6)", "Apple clang 16.0.0"),
    ("Intel(R) oneAPI DPC++/C++ Compiler 2024.0.0", "Intel(R) oneAPI DPC++/C++ Compiler 2024.0.0"),
])
def test_compiler_identity(line, identity):
    assert H.parse_compiler_version(line) == identity


def test_missing_compiler_is_empty(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/autotune-test-cc")
    assert H.host_compiler() == ""


# --- the record -----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(RECORDED))
def test_round_trip(name):
    host = RECORDED[name]()
    assert HostInfo.from_dict(host.to_dict()) == host
    assert HostInfo.from_dict(json.loads(json.dumps(host.to_dict()))) == host


def test_fingerprint_is_stable_and_ignores_compiler():
    host = graviton3()
    assert host.fingerprint == graviton3().fingerprint == host.fingerprint
    assert dataclasses.replace(host, compiler="clang 19.1.7").fingerprint == host.fingerprint


def test_fingerprint_tracks_the_hardware():
    host = graviton3()
    prints = {
        host.fingerprint,
        dataclasses.replace(host, features=tuple(sorted(host.features + ("sve2",)))).fingerprint,
        dataclasses.replace(host, svl_bits=512).fingerprint,
        dataclasses.replace(host, caches=host.caches[:2]).fingerprint,
        epyc().fingerprint,
        apple_m4().fingerprint,
    }
    assert len(prints) == 6


def test_fingerprint_keys_an_emulated_host_apart():
    host = graviton3()
    emulated = dataclasses.replace(host, emulator="aarch64 emulated by QEMU -cpu neoverse-v1 on the host's x86_64 kernel")
    assert emulated.fingerprint != host.fingerprint
    assert HostInfo.from_dict(json.loads(json.dumps(emulated.to_dict()))) == emulated
    # A table written before the field existed still matches its host.
    old = {k: v for k, v in host.to_dict().items() if k != "emulator"}
    assert HostInfo.from_dict(old).fingerprint == host.fingerprint


@pytest.mark.parametrize("sysctl, modalias, kernel", [
    ("x86_64\n", "", "x86_64"),
    ("aarch64", "cpu:type:x86,ven0002fam0019mod0001:feature:,0000", "aarch64"),  # sysctl first
    ("", "cpu:type:x86,ven0002fam0019mod0001:feature:,0000,0001", "x86_64"),
    ("", "cpu:type:aarch64:feature:,0000,0001,0002", "aarch64"),
    ("", "", ""),
    ("", "garbage", ""),
])
def test_kernel_arch(sysctl, modalias, kernel):
    assert H.parse_kernel_arch(sysctl, modalias) == kernel


def test_emulator_name():
    assert H.emulator_name("aarch64", "aarch64") == ""
    assert H.emulator_name("x86_64", "x86_64", "max") == ""
    assert H.emulator_name("aarch64", "") == ""  # the kernel said nothing: no claim either way
    assert H.emulator_name("i686", "x86_64") == ""  # the kernel's compat mode
    assert H.emulator_name("armv7l", "aarch64") == ""
    assert H.emulator_name("aarch64", "x86_64") == "aarch64 emulated by a user-mode emulator on the host's x86_64 kernel"
    assert H.emulator_name("aarch64", "x86_64", "max,sme256=on") == \
        "aarch64 emulated by QEMU -cpu max,sme256=on on the host's x86_64 kernel"


def test_describe_rows():
    rows = H.describe(epyc())
    labels = [label for label, _ in rows]
    assert labels[:3] == ["Architecture", "CPU", "GEMM features"]
    assert labels[-3:] == ["Cores", "Compiler", "Fingerprint"]
    values = dict(rows)
    assert values["GEMM features"].split()[:4] == ["avx512f", "avx512vl", "avx512bw", "avx512dq"]
    assert "fma" in values["GEMM features"].split()
    assert values["L1d"] == "48 KiB, 12-way, 64 B lines, 64 sets"
    assert values["L3"].endswith("shared by 2 CPUs")
    shown = len(values["GEMM features"].split())
    assert values["Other features"] == f"{len(epyc().features) - shown} more"
    assert values["Fingerprint"] == epyc().fingerprint

    arm = dict(H.describe(apple_m4()))
    assert arm["SME vector length"] == "512 bits"
    assert arm["GEMM features"].split()[:2] == ["fp", "asimd"]
    assert dict(H.describe(graviton3()))["SME vector length"] == "no SME"
    assert "Emulated" not in arm
    emulated = dict(H.describe(dataclasses.replace(graviton3(), emulator="aarch64 emulated by QEMU")))
    assert emulated["Emulated"] == "aarch64 emulated by QEMU: timings mean nothing here"


# --- the live glue, fed recorded machines ---------------------------------

def test_linux_aarch64_glue_prefers_auxv_and_reads_svl_only_with_sme(monkeypatch):
    cpuinfo = read("graviton3", "cpuinfo")
    real_read_text = H._read_text

    def read_text(path: Path) -> str:
        return cpuinfo if str(path) == "/proc/cpuinfo" else real_read_text(path)

    monkeypatch.setattr(H, "_read_text", read_text)
    monkeypatch.setattr(H, "_linux_svl_bits", lambda: 512)
    monkeypatch.setattr(H, "_linux_auxv_hwcaps", lambda: recorded_auxv("graviton3"))
    host = H._detect_linux("aarch64")
    assert (host.cpu, host.svl_bits) == ("Neoverse-V1", 0)
    assert host.features == graviton3().features

    hwcap, hwcap2 = recorded_auxv("graviton3")
    monkeypatch.setattr(H, "_linux_auxv_hwcaps", lambda: (hwcap, hwcap2 | 1 << 23 | 1 << 37))
    host = H._detect_linux("aarch64")
    assert host.has("sme", "sme2") and host.svl_bits == 512

    monkeypatch.setattr(H, "_linux_auxv_hwcaps", lambda: None)  # no auxv: the Features line
    assert H._detect_linux("aarch64").features == graviton3().features

    # This kernel is not aarch64: an aarch64 process on it is emulated, and says so.
    kernel = H.parse_kernel_arch(real_read_text(Path("/proc/sys/kernel/arch")),
                                 real_read_text(Path("/sys/devices/system/cpu/modalias")))
    monkeypatch.setenv("QEMU_CPU", "neoverse-v1")
    if kernel and kernel != "aarch64":
        assert H._detect_linux("aarch64").emulator == \
            f"aarch64 emulated by QEMU -cpu neoverse-v1 on the host's {kernel} kernel"


def test_darwin_glue(monkeypatch):
    sysctl = read("apple-m4", "sysctl.txt")

    def fake_run(argv, **kwargs):
        clang = "Apple clang version 16.0.0 (clang-1600.0.26.6)\n"
        out = sysctl if argv[0] == "sysctl" else clang
        return subprocess.CompletedProcess(argv, 0, stdout=out, stderr="")

    monkeypatch.setattr(H.subprocess, "run", fake_run)
    monkeypatch.setattr(H.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.delenv("CC", raising=False)
    host = H._detect_darwin("aarch64")
    assert (host.cpu, host.svl_bits, host.compiler) == ("Apple M4", 512, "Apple clang 16.0.0")
    assert host.has("sme2", "bf16", "i8mm") and host.cores == H.usable_cores()


# --- this machine ---------------------------------------------------------

def test_detect_is_cached_and_sane():
    host = H.detect()
    assert H.detect() is host
    assert host.cores >= 1
    assert host.cache(1) is not None and host.cache(1).size > 0
    assert host.cache(2) is not None
    assert HostInfo.from_dict(host.to_dict()) == host
    assert list(host.features) == sorted(set(host.features))


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="checks the x86-64 Linux detection path")
def test_detect_on_this_x86_machine():
    host = H.detect()
    assert (host.arch, host.os) == ("x86_64", "linux")
    assert host.emulator == ""
    # Whatever this CPU is (AVX-512, AVX2 only or older), detection reports what the kernel sees.
    # (Under AUTOTUNE_ISA, what the cap leaves of it.)
    flags = set(H.parse_x86_cpuinfo(Path("/proc/cpuinfo").read_text())[1])
    capped = H.apply_isa_cap(HostInfo(arch="x86_64", os="linux", cpu="x", features=tuple(sorted(flags))),
                             os.environ.get("AUTOTUNE_ISA"))
    for feature in ("avx512f", "avx512vl", "avx2", "fma", "sse2"):
        assert host.has(feature) == capped.has(feature), feature
    l1d = host.cache(1, "data")
    assert l1d.kind == "data" and l1d.size > 0 and l1d.size == l1d.line * l1d.ways * l1d.sets
    assert host.svl_bits == 0


# -- AUTOTUNE_ISA ---------------------------------------------------------------

AVX512_HOST = HostInfo(arch="x86_64", os="linux", cpu="test",
                       features=("avx", "avx2", "avx512_bf16", "avx512bw", "avx512dq", "avx512f",
                                 "avx512vl", "f16c", "fma", "sse2"))
SME2_HOST = HostInfo(arch="aarch64", os="linux", cpu="test", svl_bits=512,
                     features=("asimd", "asimddp", "fp", "sme", "sme2", "sve", "sve2"))


@pytest.mark.parametrize("host, cap, families", [
    (AVX512_HOST, "", ("avx512", "avx2", "generic")),
    (AVX512_HOST, "avx512", ("avx512", "avx2", "generic")),
    (AVX512_HOST, "avx2", ("avx2", "generic")),
    (AVX512_HOST, "AVX2", ("avx2", "generic")),
    (AVX512_HOST, "generic", ("generic",)),
    (SME2_HOST, "sme2", ("sme2", "neon", "generic")),
    (SME2_HOST, "neon", ("neon", "generic")),
    (SME2_HOST, "generic", ("generic",)),
])
def test_isa_cap_hides_the_families_above_it(host, cap, families):
    from autotune import toolchain

    capped = H.apply_isa_cap(host, cap)
    assert toolchain.native_isas(capped) == families
    assert "sse2" in capped.features or host.arch != "x86_64"
    assert (capped.fingerprint == host.fingerprint) == (capped.features == host.features)
    if "sme2" not in families:
        assert capped.svl_bits == 0


def test_unknown_isa_cap_names_the_allowed_ones():
    with pytest.raises(H.IsaCapError, match="avx512, avx2, generic"):
        H.apply_isa_cap(AVX512_HOST, "avx1024")
    with pytest.raises(H.IsaCapError, match="sme2, neon, generic"):
        H.apply_isa_cap(SME2_HOST, "avx2")


def test_detection_honours_the_environment(tmp_path):
    code = "from autotune import host, toolchain; print(*toolchain.native_isas(host.detect()))"
    env = {**os.environ, "AUTOTUNE_ISA": "generic", "AUTOTUNE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["generic"], done.stderr
    bad = subprocess.run([sys.executable, "-m", "autotune.cli", "show", "--host"], capture_output=True,
                         text=True, env={**env, "AUTOTUNE_ISA": "avx1024"}, timeout=60)
    assert bad.returncode == 2 and "AUTOTUNE_ISA='avx1024'" in bad.stderr and "Traceback" not in bad.stderr
