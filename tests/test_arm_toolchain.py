"""The Arm toolchain: setup script's mirror parsing, arm_target, SME2 under QEMU.

The mirror parsing and the arm_target errors are pure or monkeypatched and run
anywhere; the tests marked ``arm`` need scripts/setup_arm.sh to have run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotune import toolchain
from autotune.host import HostInfo
from autotune.toolchain import ToolchainError, arm_target

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "setup_arm.sh"
X86 = HostInfo(arch="x86_64", os="linux", cpu="AMD EPYC", features=("avx2", "fma"))
ARM = HostInfo(arch="aarch64", os="linux", cpu="Neoverse-V2", features=("asimd", "fp", "sve"))
ARM_SME = HostInfo(arch="aarch64", os="linux", cpu="Apple M4", features=("asimd", "sme", "sme2"),
                   svl_bits=512)

# --------------------------------------------------------------------------- mirror parsing

DEB822_BOOKWORM = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

DEB822_SECURITY_FIRST = """\
Types: deb deb-src
URIs: https://security.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example.org/debian
Suites: bookworm
Components: main

Enabled: no
Types: deb
URIs: http://disabled.example.org/debian
Suites: bookworm
Components: main

Types: deb
URIs: https://mirror.example.net/debian/
Suites: bookworm
Components: main contrib
"""

CLASSIC = """\
# deb cdrom:[Debian GNU/Linux 12]/ bookworm main
deb-src http://src.example.org/debian bookworm main
deb http://security.debian.org/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://ftp.fr.debian.org/debian bookworm main
deb http://ftp.fr.debian.org/debian bookworm-updates main
"""


def mirror(tmp_path: Path, name: str, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(text)
    return subprocess.run(["bash", str(SETUP), "--mirror-from", str(path)],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "name,text,expected",
    [
        ("debian.sources", DEB822_BOOKWORM, "http://deb.debian.org/debian"),
        ("mixed.sources", DEB822_SECURITY_FIRST, "https://mirror.example.net/debian"),
        ("sources.list", CLASSIC, "http://ftp.fr.debian.org/debian"),
    ],
)
def test_mirror_from_recorded_sources(tmp_path, name, text, expected):
    done = mirror(tmp_path, name, text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_mirror_missing_is_an_error(tmp_path):
    done = mirror(tmp_path, "sources.list", "# nothing but comments\ndeb-src http://x.org/debian bookworm main\n")
    assert done.returncode != 0
    assert "no Debian mirror" in done.stderr


def test_mirror_first_of_several_files(tmp_path):
    (tmp_path / "a.list").write_text("deb http://security.debian.org/debian-security bookworm-security main\n")
    (tmp_path / "b.sources").write_text(DEB822_BOOKWORM)
    done = subprocess.run(["bash", str(SETUP), "--mirror-from", str(tmp_path / "a.list"),
                           str(tmp_path / "b.sources")], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "http://deb.debian.org/debian"


# --------------------------------------------------------------------------- arm_target


def test_qemu_version_parsing():
    parse = toolchain._parse_qemu_version
    assert parse("qemu-aarch64 version 10.1.2 (Debian 1:10.1.2+ds-1~bpo13+1)\nCopyright") == (10, 1)
    assert parse("qemu-aarch64 version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u13)") == (7, 2)
    assert parse("garbage") is None


def test_native_aarch64_targets():
    neon = arm_target("neon", ARM)
    assert not neon.emulated and neon.runner == () and neon.arch == "aarch64"
    assert "-march=armv8-a+simd" in neon.cflags
    sme = arm_target("sme2", ARM_SME)
    assert "-march=armv9-a+sme2+sme-f64f64" in sme.cflags and not sme.emulated
    with pytest.raises(ToolchainError, match="no SME2"):
        arm_target("sme2", ARM)
    with pytest.raises(ToolchainError, match="streaming vector length is 512"):
        arm_target("sme2", ARM_SME, svl_bits=256)


def test_native_install_under_an_emulator_is_not_measured():
    """An aarch64 userland under qemu-aarch64 builds natively, but its table must say emulated."""
    import dataclasses

    from autotune.install import resolve_targets

    provenance, targets = resolve_targets("host", ARM)
    assert provenance == "measured" and set(targets) == {"neon", "generic"}
    assert not any(t.emulated for t in targets.values())
    emulated = dataclasses.replace(ARM, emulator="aarch64 emulated by QEMU -cpu neoverse-v1 on the host's x86_64 kernel")
    provenance, targets = resolve_targets("host", emulated)
    assert provenance == "emulated" and set(targets) == {"neon", "generic"}
    assert not any(t.emulated or t.runner for t in targets.values())  # still built and run natively
    # ... by a compiler and programs as slow as an emulated target's: their timeouts stretch alike.
    assert {toolchain.slowdown(t) for t in targets.values()} == {toolchain.EMULATION_SLOWDOWN}
    assert {toolchain.slowdown(t) for t in resolve_targets("host", ARM)[1].values()} == {1.0}


def test_target_for_routes_arm_isas(monkeypatch):
    monkeypatch.setattr(toolchain, "arm_target", lambda isa, host, svl_bits: ("arm", isa, svl_bits))
    assert toolchain.target_for("neon", X86) == ("arm", "neon", 512)
    assert toolchain.target_for("sme2", X86, svl_bits=256) == ("arm", "sme2", 256)


def test_bad_requests():
    with pytest.raises(ToolchainError, match="not an Arm target"):
        arm_target("avx2", X86)
    with pytest.raises(ToolchainError, match="SVL must be one of"):
        arm_target("sme2", X86, svl_bits=384)


def fake_qemu(tmp_path: Path, version: str) -> Path:
    path = tmp_path / "qemu-aarch64"
    path.write_text(f"#!/bin/sh\necho 'qemu-aarch64 version {version} (Debian)'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def cross_tools(monkeypatch, tmp_path):
    """Pretend clang-19, lld and the cross libraries are installed; no QEMU anywhere."""
    which = {"clang-19": "/usr/bin/clang-19", "ld.lld-19": "/usr/bin/ld.lld-19"}
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: which.get(name))
    real_exists = os.path.exists
    monkeypatch.setattr(toolchain.os.path, "exists",
                        lambda p: True if p == toolchain._CROSS_SYSROOT_LIBC else real_exists(p))
    monkeypatch.setattr(toolchain.glob, "glob", lambda pattern: [pattern])
    monkeypatch.setattr(toolchain, "_qemu_aarch64_path", lambda: str(tmp_path / "absent" / "qemu-aarch64"))
    return which


def test_missing_clang(cross_tools):
    del cross_tools["clang-19"]
    with pytest.raises(ToolchainError, match=r"clang-19 .*scripts/setup_arm.sh"):
        arm_target("neon", X86)


def test_missing_lld(cross_tools):
    del cross_tools["ld.lld-19"]
    with pytest.raises(ToolchainError, match=r"lld-19 .*scripts/setup_arm.sh"):
        arm_target("neon", X86)


def test_missing_cross_libc(cross_tools, monkeypatch):
    monkeypatch.setattr(toolchain.os.path, "exists", lambda p: False)
    with pytest.raises(ToolchainError, match="libc6-dev-arm64-cross"):
        arm_target("neon", X86)


def test_missing_cross_libgcc(cross_tools, monkeypatch):
    monkeypatch.setattr(toolchain.glob, "glob", lambda pattern: [])
    with pytest.raises(ToolchainError, match="libgcc-12-dev-arm64-cross"):
        arm_target("neon", X86)


def test_missing_qemu(cross_tools):
    with pytest.raises(ToolchainError, match=r"no qemu-aarch64 .*scripts/setup_arm.sh"):
        arm_target("sme2", X86)


def test_old_qemu_runs_neon_but_not_sme2(cross_tools, tmp_path):
    cross_tools["qemu-aarch64"] = str(fake_qemu(tmp_path, "7.2.15"))
    neon = arm_target("neon", X86)
    assert neon.runner == (cross_tools["qemu-aarch64"], "-cpu", "max") and neon.emulated
    with pytest.raises(ToolchainError, match=r"QEMU >= 10.1.*7.2.*scripts/setup_arm.sh"):
        arm_target("sme2", X86)


def test_recent_qemu_gives_the_sme2_target(cross_tools, tmp_path, monkeypatch):
    recent = fake_qemu(tmp_path, "10.1.2")
    monkeypatch.setattr(toolchain, "_qemu_aarch64_path", lambda: str(recent))
    for svl in (128, 256, 512):
        target = arm_target("sme2", X86, svl_bits=svl)
        assert target.runner == (str(recent), "-cpu", f"max,sme{svl}=on")
        assert target.cc == ("/usr/bin/clang-19", "--target=aarch64-linux-gnu")
        assert "-static" in target.ldflags and "-fuse-ld=lld" in target.ldflags
        assert target.emulated and target.arch == "aarch64"


# --------------------------------------------------------------------------- under QEMU

SME2_HELLO = r"""
#include <stdio.h>
/* One fmopa of (1..16) x (1..16) through a multi-vector ld1w, summed back out. */
static float a[64], out[16];
int main(void)
{
    long svl;
    __asm__ volatile("rdsvl %0, #1" : "=r"(svl));
    for (int i = 0; i < 64; ++i) a[i] = (float)(i % (svl / 4) + 1);
    __asm__ volatile(
        "smstart\n"
        "zero {za}\n"
        "ptrue pn8.s\n"
        "ptrue p0.s\n"
        "ld1w {z0.s-z3.s}, pn8/z, [%[a]]\n"
        "fmopa za0.s, p0/m, p0/m, z0.s, z3.s\n"
        "mov w12, #2\n"
        "mova z4.s, p0/m, za0h.s[w12, 0]\n"
        "st1w z4.s, p0, [%[out]]\n"
        "smstop\n"
        :
        : [a] "r"(a), [out] "r"(out)
        : "x12", "v0", "v1", "v2", "v3", "v4", "memory", "cc");
    /* Row 2 of the outer product: 3 * (1..VL). */
    int ok = 1;
    for (int j = 0; j < svl / 4; ++j) ok &= out[j] == 3.0f * (float)(j + 1);
    printf("svl=%ld ok=%d\n", svl * 8, ok);
    return !ok;
}
"""


@pytest.mark.arm
@pytest.mark.parametrize("svl", [512, 128])
def test_sme2_hello_runs_under_qemu(tmp_path, svl):
    target = arm_target("sme2", X86, svl_bits=svl)
    src = tmp_path / "hello.c"
    src.write_text(SME2_HELLO)
    exe = tmp_path / "hello"
    subprocess.run([*target.cc, *target.cflags, *target.ldflags, str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    done = subprocess.run([*target.runner, str(exe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"svl={svl} ok=1"


@pytest.mark.arm
def test_setup_script_is_idempotent_and_qemu_recent():
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "already installed" in done.stdout and "QEMU already unpacked" in done.stdout
    assert "arm64 netlib testers already unpacked" in done.stdout
    version = subprocess.run([toolchain._qemu_aarch64_path(), "--version"], capture_output=True, text=True)
    assert toolchain._parse_qemu_version(version.stdout) >= (10, 1)
