"""The link stage: every libautotune, host and cross, from the runtime C, the kernels and their table.

Linking is a build step, not part of the runtime: ``autotune.runtime`` only loads
and calls what this module writes.  The host library and the aarch64 library
(NEON, or SME2 with its streaming executor, cross-built here or native on Arm)
share the content hash, the atomic replacement and the table emitter.

An install calls :func:`emit_kernel_table_c` with the selected kernels and their
measurements, then :func:`build_runtime` with the kernels' objects
(:func:`build_table_library` does both for a stored table).  The result
is ``<out_dir>/libautotune.so`` (``libautotune.dylib`` for macOS) with ``autotune.h`` beside it and, when Python's
headers are present, the ``_atfast`` extension module the Python entry points
use (see ``docs/runtime.md``).  Every output is replaced atomically and rebuilt
only when the hash of everything that went into it changes.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from . import contract, files
from .build import BuildError, compile_file, compile_qkernels, shared_dir
from .codegen import quant_generator
from .families import ARM_ISAS, quant_kernels, x86
from .home import kernels_src
from .host import HostInfo
from .models import analytic_params
from .params import DEFAULTS as PARAMS_DEFAULTS, PlannerParams, emit_c as emit_params_c
from .runtime.loader import library_name
from .specs import KernelSpec, QKernelSpec
from .toolchain import Target, compiler_identity, slowdown

if TYPE_CHECKING:  # only for annotations
    from .build import ObjectResult
    from .table import TunedTable

#: The runtime's translation units, in kernels_src/runtime/.
RUNTIME_SOURCES = ("plan.c", "cost.c", "cover.c", "threads.c", "params.c", "error.c", "exec.c",
                   "pool.c", "cache.c", "blas.c", "cpu.c", "features.c", "qgemm.c", "record.c")
RUNTIME_HEADERS = ("at_internal.h", "at_planner.h", "at_table.h", "exec_t.h", "edge_t.h", "at_qkernel.h")
QTABLE = contract.QTABLE
EXTENSION_SOURCE = "pyfast.c"
KGRID_MAX = 8  # AT_KGRID_MAX of at_table.h
PROVENANCE_CODE = {"measured": 0, "model": 1, "emulated": 1}
_COMPILE_TIMEOUT = 300.0


class LibraryError(RuntimeError):
    """The runtime library could not be built; the message has the compiler output."""


@dataclass(frozen=True)
class LibraryBuild:
    """What :func:`build_runtime` produced; ``extension`` is None without Python headers."""

    library: Path
    header: Path
    extension: Path | None
    hash: str
    cached: bool


def default_params(
    host: HostInfo | None = None,
    main_kernel: Mapping[str, tuple[int, int]] | None = None,
    provenance: str = "measured",
) -> dict:
    """Planner parameters before tuning: the analytic models of :mod:`autotune.models`.

    ``main_kernel`` maps a dtype to the ``(mr, nr)`` of the kernel the packed path
    will mostly run.  The Goto blocks solve KirbyMM's L1, L2 and operational
    intensity constraints on the detected cache geometry (capped, because blocks
    are also the unit of the thread split); the pack crossover is IAAT's working
    set filling half of L2; the thread threshold is where the split saves more than
    a parallel region's wake-up.  Missing cache data gives the sizes of a 48 KiB
    L1, 1 MiB L2 and 8 MiB L3.  This is what hosts that skip tuning plan with, and
    where `autotune.tune` starts its search.
    """
    return analytic_params(host, main_kernel, provenance)


def _c_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_double(value: float) -> str:
    value = float(value)
    if not math.isfinite(value):
        return "0.0"
    return repr(value) if "e" in repr(value) or "." in repr(value) else repr(value) + ".0"


def emit_kernel_table_c(
    kernels: Sequence[tuple[KernelSpec, Mapping[int, float]]],
    params: Mapping,
    peak_gflops: Mapping[str, float],
) -> str:
    """The generated ``at_table.c`` (format: ``kernels_src/runtime/at_table.h``).

    ``kernels`` pairs each selected kernel with its median GFLOPS by K (at most
    eight points; more are thinned evenly).  ``params`` is a table's ``params``:
    the planner parameters of :mod:`autotune.params` (one number or
    ``{"f32": .., "f64": ..}`` each; absent ones take their declared default) and
    two kernel facts, ``provenance`` (``measured``, ``model`` or ``emulated``: the
    last two make the tiler rank by its analytic model) and ``simd_bytes``.
    Kernels are listed sorted, whatever the order given.  The output depends
    only on the arguments.
    """
    provenance = params.get("provenance", "measured")
    if provenance not in PROVENANCE_CODE:
        raise ValueError(f"provenance must be one of {tuple(PROVENANCE_CODE)}, got {provenance!r}")
    ordered = sorted(kernels, key=lambda item: item[0])
    names = [spec.name for spec, _ in ordered]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"kernel {twice[0]} listed twice")
    specs = [spec for spec, _ in ordered]
    lines = [
        "/* Generated by autotune.link.emit_kernel_table_c.",
        " * Do not edit: re-run `autotune install`.  Format: kernels_src/runtime/at_table.h. */",
        "#include <stdint.h>",
        '#include "at_table.h"',
        "",
        *contract.declarations(specs),
        "",
    ]
    entries = []
    for spec, by_k in ordered:
        grid = sorted((int(k), float(g)) for k, g in by_k.items() if int(k) > 0)
        if len(grid) > KGRID_MAX:
            step = (len(grid) - 1) / (KGRID_MAX - 1)
            grid = [grid[round(i * step)] for i in range(KGRID_MAX)]
        ks = [k for k, _ in grid] + [0] * (KGRID_MAX - len(grid))
        gs = [g if math.isfinite(g) and g > 0 else 0.0 for _, g in grid] + [0.0] * (KGRID_MAX - len(grid))
        entries.append(
            f"    {{{contract.kernel_record(spec)}, {len(grid)},\n"
            f"     {{{', '.join(map(str, ks))}}},\n"
            f"     {{{', '.join(_c_double(g) for g in gs)}}}}},"
        )
    if entries:
        lines += ["const at_table_entry at_kernel_table[] = {", *entries, "};"]
    else:
        # C has no empty arrays: one unused element, count zero.
        lines.append("const at_table_entry at_kernel_table[1] = {{{0}}};")
    lines += [f"const int at_kernel_table_count = {len(entries)};", ""]

    features = sorted({f for spec in specs for f in contract.requirements(spec)})
    lines += [
        f"const char at_library_features[] = {_c_str(' '.join(features))};",
        "const at_kernel_facts at_facts = {",
        "    .format = AT_TABLE_FORMAT,",
        f"    .provenance = {PROVENANCE_CODE[provenance]}, /* {provenance} */",
        f"    .peak_gflops = {{{_c_double(peak_gflops.get('f32', 0.0))}, "
        f"{_c_double(peak_gflops.get('f64', 0.0))}}},",
        f"    .simd_bytes = {int(params.get('simd_bytes', 64))},",
        "};",
        emit_params_c("at_params", PlannerParams.from_mapping(params)),
        emit_params_c("at_params_builtin", PARAMS_DEFAULTS),
        "",
    ]
    return "\n".join(lines)


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _run(argv: Sequence[str], target: Target) -> None:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=_COMPILE_TIMEOUT * slowdown(target))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LibraryError(f"cannot run {' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise LibraryError(f"{' '.join(argv)}\n{(proc.stdout + proc.stderr).strip()}")


def _compile_all(jobs: Sequence[tuple[Sequence[str], Sequence[str], Path, Path]], headers: Sequence[Path],
                 cache: Path | None, target: Target, workers: int = 4) -> None:
    """Compile each (cc, args, source, object) job, ``workers`` at a time.

    With a ``cache`` (the install's build folder) an object comes from it when its
    source, headers, compiler and flags are unchanged: tuning rebuilds a library
    that differs from the first in its table alone, and a host's libraries share
    their runtime C, so only the table is compiled again.
    """
    def one(job: tuple[Sequence[str], Sequence[str], Path, Path]) -> None:
        cc, args, source, obj = job
        if cache is None:
            _run([*cc, *args, "-c", str(source), "-o", str(obj)], target)
            return
        try:
            cached, _ = compile_file(cc, args, source, headers, cache, _COMPILE_TIMEOUT * slowdown(target))
        except BuildError as exc:
            raise LibraryError(str(exc)) from exc
        shutil.copyfile(cached, obj)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, jobs))


def _headers(*folders: Path) -> list[Path]:
    """Every header a runtime source may include from these folders."""
    return sorted(h for folder in folders for h in folder.glob("*.h"))


def _replace_atomic(src: Path, dst: Path) -> None:
    """Move a finished file into place: a process that loaded the old one keeps its mapping."""
    files.replace(src, dst)


def shared_library_flags(target: Target, name: str) -> list[str]:
    """How ``target``'s compiler driver links the shared library ``name``.

    ELF: ``-shared`` with a soname.  Mach-O (``target.os == "darwin"``): a dylib
    whose install name is ``@rpath/<name>``, so a program linked with it finds it
    through its own rpath (``-Wl,-rpath,<dir>``), wherever the install put it.
    libm is part of libSystem there, which every link gets.
    """
    if target.os == "darwin":
        return ["-dynamiclib", f"-Wl,-install_name,@rpath/{name}"]
    # libdl: dlsym finds the host's error handlers (in libc itself from glibc 2.34 on).
    return ["-shared", f"-Wl,-soname,{name}", "-lm", "-ldl"]


#: Names autotune.h declares that belong to the host, not the library: the error
#: handlers a program (or its BLAS) defines and the library calls (blas.c).  Never
#: exported, never defined: preloaded, a definition would replace every other
#: library's, as it did numpy's LAPACK's xerbla_.
HOST_HANDLERS = ("xerbla_", "cblas_xerbla")

#: Reference CBLAS's globals (blas.c defines them weak): exported because programs
#: written for reference CBLAS link against them (Debian's CBLAS testers do not
#: start without RowMajorStrg), and a flag shared by interposition stays one flag.
CBLAS_GLOBALS = ("RowMajorStrg", "CBLAS_CallFromC")

#: A function prototype in autotune.h: a lowercase type at column 0, then the name.
_PROTOTYPE = re.compile(r"^[a-z][\w *]*?\b(\w+)\(", re.MULTILINE)


def public_symbols(header: Path | None = None) -> tuple[str, ...]:
    """What libautotune exports: every function ``autotune.h`` declares but the host's
    error handlers, and reference CBLAS's globals.

    The header is the one declaration of the public surface; the kernels, the
    generated tables and the ``at__`` internals stay local, so a program or a
    second BLAS in the process cannot bind to them (or they to it).  The Python
    side needs nothing else: the loader uses the ``at_`` API through ctypes and
    hands ``_atfast`` the addresses of at_gemm, at_gemm_batch_strided and
    at_last_error.
    """
    text = (header or kernels_src() / "include" / "autotune.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return tuple(sorted((set(_PROTOTYPE.findall(text)) - set(HOST_HANDLERS)) | set(CBLAS_GLOBALS)))


def export_flags(target: Target, tmp: Path) -> list[str]:
    """Linker flags that export exactly :func:`public_symbols` (a list file written into ``tmp``).

    ELF: a version script, everything else local.  Mach-O: ld64's
    ``-exported_symbols_list`` with C names' leading underscore.
    """
    names = public_symbols()
    if target.os == "darwin":
        listing = tmp / "exports.txt"
        listing.write_text("".join(f"_{n}\n" for n in names))
        return [f"-Wl,-exported_symbols_list,{listing}"]
    script = tmp / "exports.map"
    script.write_text("{\n  global:\n" + "".join(f"    {n};\n" for n in names) + "  local: *;\n};\n")
    return [f"-Wl,--version-script={script}"]


def extension_link_flags(target: Target) -> list[str]:
    """Linking the ``_atfast`` extension: its Python symbols resolve when Python loads it.

    ELF allows undefined symbols in a shared object; ld64 refuses them unless told,
    so on macOS the extension is a bundle with dynamic lookup, as distutils builds them.
    """
    return ["-bundle", "-undefined", "dynamic_lookup"] if target.os == "darwin" else ["-shared"]


def runtime_cflags(target: Target) -> list[str]:
    """Flags of the runtime's own C: the target's baseline, never a kernel ISA's."""
    flags = list(target.base_cflags)
    if not any(f.startswith("-O") for f in flags):
        flags.append("-O2")
    for flag in ("-std=c11", "-fPIC", "-pthread"):
        if flag not in flags:
            flags.append(flag)
    # No -mtls-dialect=gnu2: glibc's resolver of TLS descriptors for a library
    # that did not get static TLS (the second one dlopen'ed in a process) does
    # not preserve the vector registers the compiler keeps live across it before
    # glibc 2.39 (2.36 here): the second library computed wrong results.  The
    # hot thread-local, the front cache, is initial-exec instead (at_internal.h).
    return flags


def python_extension_flags() -> tuple[list[str], str] | None:
    """(include flags, file suffix) for an extension of this Python, None without headers."""
    include = sysconfig.get_paths().get("include")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    if not include or not (Path(include) / "Python.h").exists():
        return None
    return [f"-I{include}"], suffix


Job = tuple[Sequence[str], Sequence[str], Path, Path]  # (cc, args, source, object)


def _assemble(target: Target, out_dir: Path, parts: Sequence[bytes | str], sources: Callable[[Path], list[Job]],
              headers: Sequence[Path], ext: tuple[list[str], str] | None, ext_args: Sequence[str],
              ldflags: Sequence[str], linked: Sequence[str] = (), archive: bool = False,
              cache: Path | None = None) -> LibraryBuild | ArmLibraryBuild:
    """The one library builder: every target's libautotune is the objects of the compile
    jobs ``sources(tmp)`` writes (the runtime, the table, each family's parts) and the
    objects ``linked``, named by the hash of ``parts`` (what went into them); nothing is
    built when the published stamp has that hash.  Publishes the shared library, the
    static archive (``archive``), the Python extension (``ext``) and autotune.h together.
    """
    digest = _digest(*parts)
    lib_name = library_name(target.os)
    library, stamp = out_dir / lib_name, out_dir / (lib_name + ".hash")
    archive_path = out_dir / ARCHIVE_NAME if archive else None
    extension = out_dir / f"_atfast{ext[1]}" if ext else None
    made = ArmLibraryBuild if archive else LibraryBuild
    extra = (archive_path,) if archive else ()
    if (library.exists() and stamp.exists() and stamp.read_text().strip() == digest
            and (extension is None or extension.exists()) and (archive_path is None or archive_path.exists())):
        return made(library, out_dir / "autotune.h", extension, digest, True, *extra)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        jobs = sources(tmp)
        _compile_all(jobs, headers, cache, target)
        objects = [*(str(job[3]) for job in jobs), *linked]
        lib_tmp = tmp / lib_name
        _run([*target.cc, "-pthread", "-o", str(lib_tmp), *objects, *ldflags,
              *shared_library_flags(target, lib_name), *export_flags(target, tmp)], target)
        outputs = [(lib_tmp, library)]
        if archive_path is not None:
            _run([*_archiver(target), "rcs", str(tmp / ARCHIVE_NAME), *objects], target)
            outputs.append((tmp / ARCHIVE_NAME, archive_path))
        outputs += _build_extension(target.cc, ext_args, ext, extension, tmp, target, headers, cache)
        _publish(tmp, out_dir, outputs, kernels_src() / "include" / "autotune.h", digest, stamp)
    return made(library, out_dir / "autotune.h", extension, digest, False, *extra)


def build_runtime(
    target: Target,
    kernel_objects: Sequence[tuple[KernelSpec, Path]],
    table_c: str,
    out_dir: Path,
    with_extension: bool = True,
    quant: tuple[str, Sequence[Path]] | None = None,
    cache: Path | None = None,
) -> LibraryBuild:
    """Link ``libautotune.so`` from the runtime C, ``table_c`` and the kernels' objects.

    ``quant`` is the quantised kernels' registry (``at_qtable.c``) and objects
    (:func:`quant_parts`); without it at_qmatmul_f32 computes
    with qgemm.c's portable code.

    Copies ``autotune.h`` beside it and builds the ``_atfast`` Python extension
    (not linked to the library: the loader hands it the library's entry points).  Nothing is compiled when the
    hash of the sources, the objects, the compiler and the flags is unchanged;
    with a ``cache`` folder, a changed table recompiles the table alone.
    Raises :class:`LibraryError` with the compiler's output on failure.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runtime_dir, include_dir, cflags, includes = _runtime_build(target)
    header = include_dir / "autotune.h"
    ext = python_extension_flags() if with_extension else None

    parts: list[bytes | str] = [target.compiler_id, *target.cc, "--", *cflags, "--", *target.ldflags]
    for name in (*RUNTIME_SOURCES, *RUNTIME_HEADERS, EXTENSION_SOURCE):
        parts += [name, (runtime_dir / name).read_bytes()]
    qtable_c, quant_objects = quant or (contract.qregistry([]), ())
    parts += [header.read_bytes(), (include_dir / contract.HEADER).read_bytes(), table_c, str(ext), qtable_c]
    parts += [part for obj in quant_objects for part in (str(obj), Path(obj).read_bytes())]
    # The build compiles kernels of one mr into one translation unit, so several
    # kernels may name the same object: it is linked (and hashed) once.
    object_paths = list(dict.fromkeys(str(obj) for _, obj in kernel_objects))
    parts += [spec.name for spec, _ in sorted(kernel_objects, key=lambda item: item[0])]
    for obj in object_paths:
        parts += [obj, Path(obj).read_bytes()]

    def sources(tmp: Path) -> list[Job]:
        (tmp / "at_table.c").write_text(table_c)
        (tmp / QTABLE).write_text(qtable_c)
        return [*_runtime_jobs(target, tmp), *((target.cc, [*cflags, *includes], tmp / name,
                                                 tmp / (Path(name).stem + ".o")) for name in ("at_table.c", QTABLE))]

    return _assemble(target, out_dir, parts, sources, _headers(include_dir, runtime_dir), ext,
                     [*cflags, *includes], target.ldflags,
                     [*(str(obj) for obj in quant_objects), *object_paths], cache=cache)


def _runtime_build(target: Target) -> tuple[Path, Path, list[str], list[str]]:
    """The runtime's source and include folders, its flags and include flags for ``target``."""
    src = kernels_src()
    runtime_dir, include_dir = src / "runtime", src / "include"
    return runtime_dir, include_dir, runtime_cflags(target), [f"-I{include_dir}", f"-I{runtime_dir}"]


def _runtime_jobs(target: Target, tmp: Path) -> list[Job]:
    """The compile jobs of the runtime C, which no table changes."""
    runtime_dir, _, cflags, includes = _runtime_build(target)
    return [(target.cc, [*cflags, *includes], runtime_dir / name, tmp / (Path(name).stem + ".o"))
            for name in RUNTIME_SOURCES]


def precompile_runtime(target: Target, root: Path) -> None:
    """Compile the runtime C and the Python extension into the install's cache, so that
    the library built once the kernels are chosen compiles its tables alone.

    Install runs this, one compiler at a time, on the core the confirmation rounds
    leave idle; it is the same compile, cache and key as :func:`build_table_library`'s,
    so a failure here is left for that build to report.
    """
    runtime_dir, include_dir, cflags, includes = _runtime_build(target)
    cache, headers = shared_dir(root) / "runtime", _headers(include_dir, runtime_dir)
    ext = python_extension_flags()
    with tempfile.TemporaryDirectory(prefix=".precompile-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            _compile_all(_runtime_jobs(target, tmp), headers, cache, target, workers=1)
            if ext:
                _build_extension(target.cc, [*cflags, *includes], ext, tmp / f"_atfast{ext[1]}", tmp, target,
                                 headers, cache)
        except LibraryError:
            pass


def _build_extension(cc: Sequence[str], args: Sequence[str], ext: tuple[list[str], str] | None,
                     extension: Path | None, tmp: Path, target: Target, headers: Sequence[Path] = (),
                     cache: Path | None = None) -> list[tuple[Path, Path]]:
    """The _atfast extension built in ``tmp``: [(built, destination)], or [] without Python headers.

    It does not depend on the table: with a ``cache`` it is built once per source,
    headers (Python's version among them), compiler and flags.
    """
    if not ext or extension is None:
        return []
    built = tmp / extension.name
    source = kernels_src() / "runtime" / EXTENSION_SOURCE
    argv = [*args, *ext[0], *extension_link_flags(target)]
    if cache is None:
        _run([*cc, *argv, str(source), "-o", str(built)], target)
        return [(built, extension)]
    python = [Path(flag[2:]) / "patchlevel.h" for flag in ext[0] if flag.startswith("-I")]
    try:
        cached, _ = compile_file(cc, argv, source, [*headers, *(h for h in python if h.exists())], cache,
                                 _COMPILE_TIMEOUT * slowdown(target), link=True)
    except BuildError as exc:
        raise LibraryError(str(exc)) from exc
    shutil.copyfile(cached, built)
    return [(built, extension)]


def _publish(tmp: Path, out_dir: Path, outputs: Sequence[tuple[Path, Path]], header: Path, digest: str,
             stamp: Path) -> None:
    """Move finished outputs into place with autotune.h beside them, the hash stamp last
    (a later build trusts a stamp only when everything before it was replaced)."""
    header_tmp = tmp / "autotune.h"
    shutil.copyfile(header, header_tmp)
    for built, destination in (*outputs, (header_tmp, out_dir / "autotune.h")):
        _replace_atomic(built, destination)
    stamp_tmp = tmp / "stamp"
    stamp_tmp.write_text(digest + "\n")
    _replace_atomic(stamp_tmp, stamp)


# -- the Arm library (cross-built here, or native on an Arm host) ----------------------
#
# libautotune for aarch64: the NEON and SME2 targets.
#
# The Arm library is the x86 one (the runtime C of ``kernels_src/runtime/``, the
# selected kernels, the generated ``at_table.c``) plus, for SME2, the streaming
# executor: ``sme2_exec.c`` (compiled with the sme2 flags and ``__arm_streaming``
# bodies), ``sme2_region.S`` (the region's entry and exit, the streaming
# transposing pack).  The kernel records of ``at_table.c`` give every SME2 kernel
# its packed panels' leading dims and its ``<name>_s`` streaming entry point.
#
# On an x86 host the library is cross-built with the target's clang and linked
# twice: ``libautotune.a`` (what the QEMU test driver links statically) and
# ``libautotune.so`` (what is copied to a device, or run under QEMU with
# ``-L /usr/aarch64-linux-gnu``).  On an aarch64 host it is built natively, with
# the ``_atfast`` extension when Python's headers exist.  Outputs replace the old
# ones atomically and are rebuilt only when the hash of their inputs changes.

ARCHIVE_NAME = "libautotune.a"
#: The SME2 executor's own sources (kernels_src/runtime/).
SME2_SOURCES = ("sme2_exec.c", "sme2_region.S")
SME2_HEADERS = ("at_sme2.h", "sme2_exec_t.h")


@dataclass(frozen=True)
class ArmLibraryBuild(LibraryBuild):
    """:class:`LibraryBuild` plus the static archive linked from the same objects."""

    archive: Path | None = None


def streaming_compiler(target: Target) -> tuple[str, ...]:
    """The compiler for ``sme2_exec.c``, whose bodies are ``__arm_streaming``.

    clang >= 18 and gcc >= 14 know the SME keyword attributes; a native host
    whose ``cc`` is an older gcc (Debian 12's 12.2) borrows an installed clang
    for that one file (the rest of the library keeps ``cc``; the C ABI is the same).
    """
    identity = target.compiler_id.lower()
    if "clang" in identity:
        return target.cc
    version = re.search(r"(\d+)\.\d+", identity)
    if version and int(version[1]) >= 14:
        return target.cc
    for name in ("clang-19", "clang-18", "clang"):
        path = shutil.which(name)
        if path:
            return (path,)
    return target.cc  # its error message will name the attribute it lacks


def _archiver(target: Target) -> list[str]:
    """An ``ar`` that indexes aarch64 objects: LLVM's understands every target.

    For Mach-O it writes the BSD format with the symbol table ld64 reads (Apple's
    own ``ar``, found last, always does).
    """
    for name in ("llvm-ar-19", "llvm-ar", "aarch64-linux-gnu-ar", "ar"):
        path = shutil.which(name)
        if path:
            darwin = target.os == "darwin" and "llvm-ar" in Path(path).name
            return [path, *(["--format=darwin"] if darwin else [])]
    raise LibraryError("no archiver found (llvm-ar or ar): install llvm-19 or binutils")


def build_arm_runtime(
    target: Target,
    kernels: Sequence[tuple[KernelSpec, Mapping[int, float]]],
    kernel_objects: Sequence[tuple[KernelSpec, Path]],
    params: Mapping,
    peak_gflops: Mapping[str, float],
    out_dir: Path,
    with_extension: bool | None = None,
    cache: Path | None = None,
    quant_selected: Sequence[str] | None = None,
) -> ArmLibraryBuild:
    """Link the aarch64 ``libautotune.so`` (``.dylib`` for macOS) and ``libautotune.a`` into ``out_dir``.

    ``kernels`` pairs every selected kernel with its GFLOPS by K (empty under
    emulation), ``kernel_objects`` gives their compiled objects.  The Python
    extension is built only natively (default) since an emulated library cannot
    be loaded by this Python.  ``cache`` as for :func:`build_runtime`.
    The quantised kernels install validated (``quant_selected``; None: the whole
    family, for the validation itself) are linked in: the NEON ones
    (:mod:`autotune.codegen.quant_neon`),
    each ISA level compiled with its own flags; qgemm.c runs one only on a CPU
    with its level, the portable code elsewhere.  An SME2 target's library also
    links the SME2 quantised kernels (:mod:`autotune.codegen.quant_sme2`) and
    compiles qgemm.c with ``AT_QSME2``, which runs them on weights carrying an
    SME2 form for the CPU's vector length.
    """
    if target.isa not in ARM_ISAS:
        raise LibraryError(f"{target.isa} is not an Arm target ({', '.join(ARM_ISAS)})")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = kernels_src()
    runtime_dir, include_dir, arm_dir = src / "runtime", src / "include", src / "arm"
    header = include_dir / "autotune.h"
    sme2 = target.isa == "sme2"
    table_c = emit_kernel_table_c(kernels, params, peak_gflops)
    base = runtime_cflags(target)
    # exec.c learns of the streaming executor through AT_SME2_EXEC; the rest of
    # the runtime keeps the baseline flags, so it runs on any aarch64 core.
    defines = ["-DAT_SME2_EXEC"] if sme2 else []
    sme_flags = [*target.cflags, "-fno-builtin", "-pthread"]
    ext = python_extension_flags() if (with_extension if with_extension is not None
                                       else not target.emulated) else None
    shared_ldflags = [f for f in target.ldflags if f != "-static"]

    sme_cc = streaming_compiler(target) if sme2 else target.cc
    parts: list[bytes | str] = [target.compiler_id, *target.cc, "--", *base, *defines, "--",
                                compiler_identity(sme_cc), *sme_cc, *sme_flags,
                                "--", *target.ldflags, str(ext)]
    names = (*RUNTIME_SOURCES, *RUNTIME_HEADERS, EXTENSION_SOURCE) + ((*SME2_SOURCES, *SME2_HEADERS) if sme2 else ())
    for name in names:
        parts += [name, (runtime_dir / name).read_bytes()]
    carried = quant_kernels((target.isa,), quant_selected)
    qkernels = [k for k in carried if k.family == "neon"]  # the registry's: tiles of at_qkernel_fn
    sme2_q = [k for k in carried if k.family == "sme2"]
    qunits = quant_generator(qkernels[0]).units(qkernels) if qkernels else []
    qtable_c = contract.qregistry(qkernels)
    qflags = {u.filename: [*(f for f in base if not f.startswith(("-march", "-mcpu"))), *u.flags] for u in qunits}
    parts += [header.read_bytes(), (include_dir / contract.HEADER).read_bytes(), table_c, qtable_c]
    parts += [part for u in qunits for part in (u.filename, u.text, *qflags[u.filename])]
    # The SME2 quantised kernels (any SVL in one object) and their A quantiser: SME2
    # targets only, so NEON-only and x86 libraries never carry them.
    qsme2 = {src.filename: src.text for src in quant_generator(sme2_q[0]).units(sme2_q)} if sme2_q else {}
    if sme2:
        parts += [(arm_dir / contract.ASM_HEADER).read_bytes()]
        parts += [part for name, text in qsme2.items() for part in (name, text)]
    object_paths = list(dict.fromkeys(str(obj) for _, obj in kernel_objects))
    for obj in object_paths:
        parts += [obj, Path(obj).read_bytes()]
    includes = [f"-I{include_dir}", f"-I{runtime_dir}", f"-I{arm_dir}"]

    def sources(tmp: Path) -> list[Job]:
        (tmp / "at_table.c").write_text(table_c)
        # The NEON quantised kernels, every level in the one library: qgemm.c runs an
        # entry only where the CPU has its features (the portable code elsewhere).
        # Emulated installs have no timings, so the registry's order is by level
        # (i8mm, then dotprod), then the NEON family's QUANT_TILES order.
        (tmp / QTABLE).write_text(qtable_c)
        for unit in qunits:
            (tmp / unit.filename).write_text(unit.text)
        qsme2_include: list[str] = []
        if qsme2:
            # Only qgemm.c and the quantiser include the generated header, from a folder
            # named by the header's text: that -I flag is then part of their compile_file
            # keys (so a changed header compiles them again, an unchanged one never), and
            # the rest of the runtime keeps the keys it shares with the host's other
            # libraries.  Without a cache the temporary folder will do.
            header_text = qsme2["at_qsme2.h"]
            gen = (cache / f"qsme2-{_digest(header_text)[:16]}") if cache is not None else tmp / "qsme2"
            gen.mkdir(parents=True, exist_ok=True)
            if not (gen / "at_qsme2.h").exists() or (gen / "at_qsme2.h").read_text() != header_text:
                files.atomic_write_text(gen / "at_qsme2.h", header_text)
            qsme2_include = [f"-I{gen}"]
            for name, text in qsme2.items():
                if name != "at_qsme2.h":
                    (tmp / name).write_text(text)
        jobs: list[Job] = []

        def compile_job(path: Path, flags: Sequence[str], cc: Sequence[str] = target.cc) -> None:
            jobs.append((cc, [*flags, *includes], path, tmp / (path.name.replace(".", "_") + ".o")))

        for name in RUNTIME_SOURCES:
            extra = defines if name == "exec.c" else []
            if name == "qgemm.c" and qsme2:
                extra = ["-DAT_QSME2", *qsme2_include]
            compile_job(runtime_dir / name, [*base, *extra])
        compile_job(tmp / "at_table.c", base)
        compile_job(tmp / QTABLE, base)
        for unit in qunits:  # each level with its own -march, never the runtime's code
            compile_job(tmp / unit.filename, qflags[unit.filename])
        if sme2:
            for name in SME2_SOURCES:
                compile_job(runtime_dir / name, sme_flags, sme_cc)
        # The SME2 quantised kernels with the SME2 flags; the quantiser runs outside
        # streaming mode, so it keeps the baseline (an SME2 core need not have SVE outside
        # it: Apple M4 has none, and -march=armv9-a would let the compiler vectorise with SVE).
        if qsme2:
            compile_job(tmp / "at_qsme2_kernels.S", sme_flags, sme_cc)
            compile_job(tmp / "at_qsme2_quant.c", [*base, *qsme2_include])
        return jobs

    return _assemble(target, out_dir, parts, sources, _headers(include_dir, runtime_dir, arm_dir), ext,
                     [*base, *includes], shared_ldflags, object_paths, archive=True, cache=cache)


def build_arm_library(stored: "TunedTable", targets: Mapping[str, Target],
                      objects: Mapping[str, "ObjectResult"], root: Path,
                      out_dir: Path | None = None) -> ArmLibraryBuild:
    """libautotune for an Arm table, into ``out_dir`` (default ``<root>/lib/<target>/``).

    ``targets`` is install's ``{isa: Target}``; the runtime follows the SME2 target
    when there is one (its library runs NEON kernels too).  Emulated tables have
    no timings, so the tiler ranks their kernels by its analytic model.
    """
    chosen = stored.selected()
    runtime_target = targets.get("sme2") or next(iter(targets.values()))
    kernels = [(r.spec, dict(r.gflops_by_k)) for r in chosen]
    kernel_objects = []
    for record in chosen:
        path = objects[record.name].path if record.name in objects else None
        if path is None:
            raise LibraryError(f"{record.name} is selected but has no compiled object")
        kernel_objects.append((record.spec, path))
    return build_arm_runtime(runtime_target, kernels, kernel_objects, stored.params, stored.peak_gflops,
                             out_dir or root / "lib" / stored.target, cache=shared_dir(root) / "runtime",
                             quant_selected=(stored.settings.get("quant") or {}).get("selected"))


def build_table_library(stored: "TunedTable", targets: Mapping[str, Target],
                        objects: Mapping[str, "ObjectResult"], root: Path,
                        out_dir: Path | None = None) -> LibraryBuild:
    """libautotune for a stored table, into ``out_dir`` (default ``<root>/lib/<target>/``).

    Arm tables get the aarch64 library (:func:`build_arm_library`); the others
    the host one: the runtime C compiled with the baseline flags of the target
    family (every x86 target shares them, never a kernel ISA's), the selected
    kernels, the table as C.
    """
    if any(isa in ARM_ISAS for isa in targets):
        return build_arm_library(stored, targets, objects, root, out_dir)
    chosen = stored.selected()
    table_c = emit_kernel_table_c([(r.spec, dict(r.gflops_by_k)) for r in chosen], stored.params,
                                  stored.peak_gflops)
    kernel_objects = [(r.spec, objects[r.name].path) for r in chosen]
    runtime_target = next(iter(targets.values()))
    return build_runtime(runtime_target, kernel_objects, table_c, out_dir or root / "lib" / stored.target,
                         quant=quant_parts(stored.settings, targets, root),
                         cache=shared_dir(root) / "runtime")


# -- the quantised kernels ------------------------------------------------------------------

def build_qlibrary(target: Target, kernels: Sequence[QKernelSpec], obj: Path, out: Path,
                 features: Sequence[str] | None = None) -> Path:
    """A shared library with qgemm.c, its error text, thread pool and ``kernels`` registered: for this stage only.

    ``features``: what the registry says every kernel needs instead of its own (tests that emulate VNNI).
    """
    src = kernels_src()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".qlink-", dir=out.parent) as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "at_qtable.c").write_text(contract.qregistry(kernels, features))
        cflags = [*runtime_cflags(target), f"-I{src / 'include'}", f"-I{src / 'runtime'}"]
        built = tmp / out.name
        _run([*target.cc, *cflags, "-shared", "-o", str(built), str(src / "runtime" / "qgemm.c"),
              str(src / "runtime" / "error.c"), str(src / "runtime" / "pool.c"), str(src / "runtime" / "features.c"), str(tmp / "at_qtable.c"),
              str(obj), "-lm"], target)
        built.replace(out)
    return out


def quant_parts(settings: Mapping, targets: Mapping[str, Target], home: Path) -> tuple[str, list[Path]] | None:
    """(at_qtable.c, objects) for the kernels a table selected, None without any."""
    names = (settings.get("quant") or {}).get("selected") or []
    target = next((t for isa, t in targets.items() if isa in x86.QUANT_TARGETS), None)
    if target is None:
        return None
    kernels = quant_kernels([target.isa], names)
    if not kernels:
        return None
    obj = compile_qkernels(target, kernels, home)
    if not obj.ok:
        raise RuntimeError(f"the selected quantised kernels no longer compile: {obj.error}")
    return contract.qregistry(kernels, thread_macs=float((settings.get("quant") or {}).get("thread_macs", 0.0))), \
        [obj.path]


def build_qharness(target: Target, archive: Path, out: Path) -> Path:
    """``kernels_src/harness/qharness.c`` linked statically with ``archive`` (a libautotune.a):
    what runs a library's quantised kernels on cases the host wrote, natively or under the
    target's emulator (:func:`autotune.qsuite.validate_library`, the tests)."""
    src = kernels_src()
    march = [f for f in target.base_cflags if f.startswith(("-march", "-mcpu"))]
    out.parent.mkdir(parents=True, exist_ok=True)
    _run([*target.cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", *march, f"-I{src / 'include'}",
          f"-I{src / 'runtime'}", str(src / "harness" / "qharness.c"), str(archive), *target.ldflags,
          "-pthread", "-lm", "-o", str(out)], target)
    return out
