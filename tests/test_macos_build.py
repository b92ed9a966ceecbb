"""The aarch64 library as Mach-O, for macOS on Apple M4 (the most common SME2 machine).

Nothing here runs on a Mac: clang-19 aimed at ``arm64-apple-macos14`` assembles and
compiles every kind of source the library is made of, ld64.lld links them, and the
objects are read back (Mach-O headers, symbol tables, machine code).  Two honesty
levels, kept apart:

* compiled for real, with no SDK at all (an empty sysroot: only clang's own
  headers, stdint.h and arm_neon.h): the generated SME2 kernels, the NEON kernels,
  ``sme2_pack.S`` and ``sme2_region.S``.  The SME2 assembly is also shown to be the
  very same machine code as the ELF objects QEMU validates.
* compiled and linked against a stub SDK (tests/macos/sdk: declarations of the C
  library calls the runtime and the harness make, with Darwin's types, constants
  and feature guards, and a libSystem.tbd listing the exports they use): the
  runtime's C (``kernels_src/runtime/*.c`` but ``pyfast.c``, which needs Python's
  headers) and the generated table, through ``autotune.link.build_arm_runtime``
  into ``libautotune.dylib``; the harness through ``autotune.build.build_harness``
  into an executable.  This proves the C and its Apple branches compile for the
  target and the objects link; not that Apple's real headers, libSystem and ld64
  agree with the stubs (there is no SDK here), nor that anything runs.
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from autotune import build, codegen
from autotune.families import neon, sme2
from autotune.home import kernels_src
from autotune.host import HostInfo, parse_darwin_sysctl
from autotune.link import (build_arm_runtime, default_params, extension_link_flags, public_symbols,
                           shared_library_flags)
from autotune.runtime.loader import library_name
from autotune.specs import TRANSPOSITIONS, KernelSpec
from autotune.toolchain import (
    Target,
    ToolchainError,
    apple_cross_target,
    arm_march,
    arm_target,
    native_isas,
)

HERE = Path(__file__).resolve().parent
STUB_SDK = HERE / "macos" / "sdk"
M4_SYSCTL = HERE / "data" / "hosts" / "apple-m4" / "sysctl.txt"

MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPE_ARM64 = 0x0100000C
MH_OBJECT, MH_EXECUTE, MH_DYLIB = 0x1, 0x2, 0x6
LC_SYMTAB, LC_LOAD_DYLIB, LC_ID_DYLIB, LC_SEGMENT_64 = 0x2, 0xC, 0xD, 0x19
N_EXT, N_TYPE, N_SECT, N_UNDF = 0x01, 0x0E, 0x0E, 0x00


# --------------------------------------------------------------------------- reading objects


class MachO:
    """The parts of a 64-bit Mach-O file these tests look at."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        self.magic, self.cputype, _, self.filetype, ncmds, _, _, _ = struct.unpack_from("<IiiIIIII", data)
        self.sections: dict[tuple[str, str], bytes] = {}
        self.dylib_id: str | None = None
        self.dylibs: list[str] = []
        self.defined: set[str] = set()  # external symbols defined here
        self.undefined: set[str] = set()
        self.local: set[str] = set()  # non-external symbols (assembler temporaries never get here)
        if self.magic != MH_MAGIC_64:
            return
        offset = 32
        for _ in range(ncmds):
            cmd, size = struct.unpack_from("<II", data, offset)
            if cmd == LC_SEGMENT_64:
                nsects = struct.unpack_from("<I", data, offset + 64)[0]
                for i in range(nsects):
                    base = offset + 72 + 80 * i
                    sect, seg = (data[base + j:base + j + 16].rstrip(b"\0").decode() for j in (0, 16))
                    size_, off = struct.unpack_from("<Q", data, base + 40)[0], struct.unpack_from("<I", data, base + 48)[0]
                    self.sections[seg, sect] = data[off:off + size_]
            elif cmd in (LC_ID_DYLIB, LC_LOAD_DYLIB):
                name_off = struct.unpack_from("<I", data, offset + 8)[0]
                name = data[offset + name_off:offset + size].split(b"\0")[0].decode()
                if cmd == LC_ID_DYLIB:
                    self.dylib_id = name
                else:
                    self.dylibs.append(name)
            elif cmd == LC_SYMTAB:
                symoff, nsyms, stroff, _ = struct.unpack_from("<IIII", data, offset + 8)
                for i in range(nsyms):
                    strx, ntype, _, _, _ = struct.unpack_from("<IBBHQ", data, symoff + 16 * i)
                    name = data[stroff + strx:].split(b"\0")[0].decode()
                    if ntype & 0xE0:  # debugging (stab) entries
                        continue
                    if not ntype & N_EXT:
                        self.local.add(name)
                    elif ntype & N_TYPE == N_SECT:
                        self.defined.add(name)
                    elif ntype & N_TYPE == N_UNDF:
                        self.undefined.add(name)
            offset += size

    @property
    def arm64(self) -> bool:
        return self.magic == MH_MAGIC_64 and self.cputype == CPU_TYPE_ARM64

    @property
    def text(self) -> bytes:
        return self.sections[("__TEXT", "__text")]


def elf_text(path: Path) -> bytes:
    """The .text section of a 64-bit little-endian ELF object."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, off, size

    _, names_off, _ = header(shstrndx)
    for i in range(shnum):
        name, off, size = header(i)
        if data[names_off + name:].split(b"\0")[0] == b".text":
            return data[off:off + size]
    raise AssertionError(f"{path} has no .text")


# --------------------------------------------------------------------------- the host side (pure Python)


def m4_host() -> HostInfo:
    fields = parse_darwin_sysctl(M4_SYSCTL.read_text())
    return HostInfo(arch="aarch64", os="darwin", compiler="Apple clang 16.0.0", **fields)


def test_m4_host_gets_native_sme2_targets(monkeypatch):
    """sysctl's FEAT_SME2 and sme_max_svl_b (64 bytes on the M4) make an SME2 host
    with SVL 512; its targets are Mach-O and compiled for the M4 (no SVE)."""
    host = m4_host()
    assert host.has("sme2", "smef64f64") and host.svl_bits == 512 and not host.has("sve")
    assert native_isas(host) == ("sme2", "neon", "generic")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr("autotune.toolchain.shutil.which", lambda name: "/usr/bin/" + name)
    target = arm_target("sme2", host, svl_bits=512)
    assert target.os == "darwin" and target.svl_bits == 512 and not target.emulated
    assert "-mcpu=apple-m4" in target.cflags and not any("armv9" in f for f in target.cflags)
    assert arm_target("neon", host).cflags[-1] == arm_march("neon", "darwin") == "-march=armv8-a+simd"
    with pytest.raises(ToolchainError, match="512 bits, not 256"):
        arm_target("sme2", host, svl_bits=256)
    # Linux keeps its flags.
    assert arm_march("sme2") == "-march=armv9-a+sme2+sme-f64f64"


def test_library_name_and_link_flags_follow_the_platform():
    assert library_name("darwin") == "libautotune.dylib"
    assert library_name("linux") == "libautotune.so"
    apple = Target(isa="sme2", cc=("cc",), cflags=(), arch="aarch64", os="darwin")
    linux = Target(isa="sme2", cc=("cc",), cflags=(), arch="aarch64")
    assert shared_library_flags(apple, "libautotune.dylib") == [
        "-dynamiclib", "-Wl,-install_name,@rpath/libautotune.dylib"]
    assert shared_library_flags(linux, "libautotune.so") == ["-shared", "-Wl,-soname,libautotune.so", "-lm", "-ldl"]
    assert extension_link_flags(apple) == ["-bundle", "-undefined", "dynamic_lookup"]
    assert extension_link_flags(linux) == ["-shared"]


# --------------------------------------------------------------------------- compiled for macOS

requires_llvm = pytest.mark.skipif(
    not shutil.which("clang-19") or not (shutil.which("ld64.lld-19") or shutil.which("ld64.lld")),
    reason="clang-19 and lld-19 (ld64.lld) build the Mach-O objects: run scripts/setup_arm.sh",
)

SVL = 512


def sme2_sample() -> list[KernelSpec]:
    """Whole-tile blocks of every operand format, partial blocks, hybrids (h, pbh,
    pah, papbh), variable blocks, both dtypes, at SVL 512."""
    rng = random.Random(7)
    chosen = set()
    for dtype in ("f32", "f64"):
        for trans in TRANSPOSITIONS:
            family = sme2.family(dtype, trans, SVL)
            whole = [s for s in family if not sme2.is_hybrid(s)]
            hybrid = [s for s in family if sme2.is_hybrid(s)]
            chosen |= {whole[0], rng.choice(whole), rng.choice(hybrid)}
    chosen |= {KernelSpec("sme2", "f32", 13, 40, False, True, "", 2),
               KernelSpec("sme2", "f32", 30, 17, True, True, "pa", 2),
               KernelSpec("sme2", "f64", 20, 9, False, False, "pb", 2),
               KernelSpec("sme2", "f64", 7, 57, True, False, "papb", 2)}
    chosen |= {sme2.variable_blocks("f32", "nn", SVL)[0], sme2.variable_blocks("f64", "nt", SVL)[1]}
    return sorted(chosen)


def neon_sample() -> list[KernelSpec]:
    rng = random.Random(7)
    return sorted({s for dtype in ("f32", "f64") for trans in TRANSPOSITIONS
                   for s in [neon.family(dtype, trans)[0], rng.choice(neon.family(dtype, trans))]})


def compile_all(target: Target, specs: list[KernelSpec], home: Path) -> dict[str, build.ObjectResult]:
    built = build.build_kernels(target, [codegen.generate(s) for s in specs], jobs=2, home=home)
    assert not built.failures, built.failures
    return built.objects


@pytest.fixture(scope="module")
def macos(tmp_path_factory):
    """The kernels compiled for arm64 macOS with no SDK, and for aarch64 Linux (ELF)."""
    root = tmp_path_factory.mktemp("macos")
    no_sdk = root / "no-sdk"  # an empty sysroot: nothing but clang's own headers
    no_sdk.mkdir()
    targets = {isa: apple_cross_target(isa, no_sdk, SVL) for isa in ("sme2", "neon")}
    sme, neo = sme2_sample(), neon_sample()
    home = root / "home"
    objects = {**compile_all(targets["sme2"], sme, home), **compile_all(targets["neon"], neo, home)}
    clang = shutil.which("clang-19")
    elf = Target(isa="sme2", cc=(clang, "--target=aarch64-linux-gnu"), cflags=targets["sme2"].cflags[:-1]
                 + (arm_march("sme2"),), arch="aarch64", svl_bits=SVL)
    return {"targets": targets, "sme2": sme, "neon": neo, "objects": objects,
            "elf": compile_all(elf, sme, root / "elf-home"), "elf_target": elf, "root": root}


@requires_llvm
def test_sme2_kernels_assemble_as_macho_and_match_the_elf_code(macos):
    """Every generated SME2 kernel (smstart, zero {za}, fmopa, multi-vector ld1w,
    rdsvl-free fixed SVL, the lazy-save commit) assembles for arm64-apple-macos14,
    exports _<name> and _<name>_s, keeps its local labels out of the symbol table,
    and is the same machine code as its ELF object."""
    for spec in macos["sme2"]:
        obj = MachO(macos["objects"][spec.name].path)
        assert obj.arm64 and obj.filetype == MH_OBJECT, spec.name
        assert obj.defined == {f"_{spec.name}", f"_{spec.name}_s"}, (spec.name, obj.defined)
        assert obj.undefined == set() and not any(spec.name in s for s in obj.local), obj.local
        assert obj.text == elf_text(macos["elf"][spec.name].path), f"{spec.name}: Mach-O code differs from ELF"


@requires_llvm
def test_neon_kernels_compile_as_macho(macos):
    for spec in macos["neon"]:
        obj = MachO(macos["objects"][spec.name].path)
        assert obj.arm64 and obj.filetype == MH_OBJECT
        assert f"_{spec.name}" in obj.defined and not any(s.endswith(f"{spec.name}_s") for s in obj.defined)


@requires_llvm
@pytest.mark.parametrize("source, symbols", [
    ("arm/sme2_pack.S", {"_at_sme2_pack_t_f32", "_at_sme2_pack_t_f64"}),
    ("runtime/sme2_region.S", {"_at__sme2_region", "_at__sme2_pack_t_f32_s", "_at__sme2_pack_t_f64_s"}),
])
def test_hand_written_assembly_is_macho(macos, source, symbols, tmp_path):
    """sme2_pack.S and sme2_region.S through at_asm.h: Mach-O with underscored
    globals and no labels left behind; the same code as their ELF objects."""
    path = kernels_src() / source
    out = {}
    for kind, target in (("macho", macos["targets"]["sme2"]), ("elf", macos["elf_target"])):
        out[kind] = tmp_path / f"{path.stem}.{kind}.o"
        argv = [*target.cc, *target.cflags, *build.language_includes("asm"), "-c", str(path), "-o", str(out[kind])]
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", done.stderr
    obj = MachO(out["macho"])
    assert obj.arm64 and obj.filetype == MH_OBJECT
    assert obj.defined == symbols and obj.undefined == set()
    assert obj.local <= {"ltmp0"}, obj.local  # the assembler's section-start marker only
    assert obj.text == elf_text(out["elf"])


@requires_llvm
def test_libautotune_dylib_links_against_the_stub_sdk(macos):
    """The runtime's C (every file but pyfast.c) and the generated table compile
    against the stub SDK's declarations, and build_arm_runtime links them with the
    kernels of both families into libautotune.dylib: a Mach-O dylib named
    @rpath/libautotune.dylib that needs libSystem only, whose every undefined
    symbol the (stub) libSystem exports, plus libautotune.a in the BSD format."""
    target = apple_cross_target("sme2", STUB_SDK, SVL)
    specs = [*macos["sme2"], *macos["neon"]]
    objects = [(s, macos["objects"][s.name].path) for s in specs]
    params = default_params(None, {"f32": (32, 32), "f64": (16, 32)}, provenance="model")
    lib = build_arm_runtime(target, [(s, {}) for s in specs], objects, params, {},
                            macos["root"] / "lib", with_extension=False)
    assert lib.library.name == "libautotune.dylib" and lib.extension is None
    dylib = MachO(lib.library)
    assert dylib.arm64 and dylib.filetype == MH_DYLIB
    assert dylib.dylib_id == "@rpath/libautotune.dylib"
    assert dylib.dylibs == ["/usr/lib/libSystem.B.dylib"]
    # Exactly the public API and BLAS names (the -exported_symbols_list): the
    # kernels and the streaming region's entry are linked in but not exported.
    assert dylib.defined == {f"_{n}" for n in public_symbols()}, dylib.defined ^ {f"_{n}" for n in public_symbols()}
    for symbol in ("_at_gemm", "_at_plan_create", "_at_cpu_check", "_sgemm_", "_cblas_dgemm_batch"):
        assert symbol in dylib.defined, symbol
    for spec in macos["sme2"]:
        assert not {f"_{spec.name}", f"_{spec.name}_s"} & dylib.defined
    assert all(s.startswith("_") or s == "dyld_stub_binder" for s in dylib.undefined)
    assert not any(s.startswith("_at") for s in dylib.undefined), dylib.undefined
    assert "_sysctlbyname" in dylib.undefined  # cpu.c's macOS branch asks sysctl for SME2
    archive = lib.archive.read_bytes()
    assert archive.startswith(b"!<arch>\n") and b"__.SYMDEF" in archive[:200]


@requires_llvm
@pytest.mark.parametrize("isa", ["sme2", "neon"])
def test_harness_links_as_a_macho_executable(macos, isa):
    """What a native install on a Mac runs: build_harness compiles harness.c (POSIX
    plus MAP_ANON, which macOS shows only with _DARWIN_C_SOURCE), the registry and
    peak_<isa>.c, and links them with the kernels into a Mach-O executable."""
    target = apple_cross_target(isa, STUB_SDK, SVL)
    chosen = [macos["objects"][s.name] for s in macos[isa]]
    exe = MachO(build.build_harness(target, chosen, macos["root"] / f"harness-{isa}"))
    assert exe.arm64 and exe.filetype == MH_EXECUTE
    assert exe.dylibs == ["/usr/lib/libSystem.B.dylib"]
    assert {"_main", "_at_peak", f"_{macos[isa][0].name}"} <= exe.defined
    assert {"_mmap", "_mprotect", "_clock_gettime"} <= exe.undefined
