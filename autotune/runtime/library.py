"""Building libautotune: the runtime C, the selected kernels and their table.

An install calls :func:`emit_kernel_table_c` with the selected kernels and their
measurements, then :func:`build_library` with the kernels' objects.  The result
is ``<out_dir>/libautotune.so`` with ``autotune.h`` beside it and, when Python's
headers are present, the ``_atfast`` extension module the Python entry points
use (see ``docs/runtime.md``).  Every output is replaced atomically and rebuilt
only when the hash of everything that went into it changes.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..home import kernels_src
from ..host import HostInfo
from ..specs import DTYPE_BYTES, DTYPE_CTYPE, KernelSpec
from ..toolchain import Target

#: The runtime's translation units, in kernels_src/runtime/.
RUNTIME_SOURCES = ("tiler.c", "exec.c", "pool.c", "cache.c", "blas.c")
RUNTIME_HEADERS = ("at_internal.h", "at_table.h", "exec_t.h")
EXTENSION_SOURCE = "pyfast.c"
LIBRARY_NAME = "libautotune.so"
KGRID_MAX = 8  # AT_KGRID_MAX of at_table.h
PROVENANCE_CODE = {"measured": 0, "model": 1, "emulated": 1}
_DTYPE_CODE = {"f32": 0, "f64": 1}
_COMPILE_TIMEOUT = 300.0


class LibraryError(RuntimeError):
    """The runtime library could not be built; the message has the compiler output."""


@dataclass(frozen=True)
class LibraryBuild:
    """What :func:`build_library` produced; ``extension`` is None without Python headers."""

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
    """Planner parameters before tuning: Goto blocks from cache geometry (KirbyMM).

    ``main_kernel`` maps a dtype to the ``(mr, nr)`` of the kernel the packed path
    will mostly run.  blk_k keeps one B micro-panel (blk_k x nr) and two A
    micro-panels (mr x blk_k) in all but one way of L1; blk_m keeps an A block in
    half of L2 (the other half streams B and C); blk_n keeps a B panel in a
    quarter of the L3 slice; both are capped so that blocks, the unit of the
    thread split, stay numerous.  Missing cache data gives the sizes of a 48 KiB L1,
    1 MiB L2 and 8 MiB L3.
    """
    l1 = host.cache(1) if host else None
    l2 = (host.cache(2, "unified") or host.cache(2)) if host else None
    l3 = (host.cache(3, "unified") or host.cache(3)) if host else None
    l1_size, l1_ways = (l1.size, l1.ways) if l1 and l1.size else (48 << 10, 12)
    l2_size = l2.size if l2 and l2.size else 1 << 20
    l3_size = l3.size if l3 and l3.size else 8 << 20
    main_kernel = dict(main_kernel or {})
    params: dict = {"blk_m": {}, "blk_n": {}, "blk_k": {}, "pack_flops": {}}
    for dtype, bpe in DTYPE_BYTES.items():
        mr, nr = main_kernel.get(dtype, (64 // bpe, 6))
        usable_l1 = l1_size * max(1, l1_ways - 1) / max(1, l1_ways)
        blk_k = int(usable_l1 // ((nr + 2 * mr) * bpe))
        blk_k = max(16, min(1024, blk_k - blk_k % 8))
        # Blocks are also the unit of the thread split (one thread computes a block
        # over all of K, which keeps results independent of the thread count), so
        # they are capped well below what the caches allow: a 256^2 C still has two
        # blocks and a 1000^2 C has 32.
        blk_m = int((l2_size / 2) // (blk_k * bpe))
        blk_m = max(mr, min(128, blk_m) // mr * mr)
        blk_n = int((l3_size / 4) // (blk_k * bpe))
        blk_n = max(nr, min(256, blk_n) // nr * nr)
        params["blk_m"][dtype], params["blk_n"][dtype], params["blk_k"][dtype] = blk_m, blk_n, blk_k
        # Below about 160^3 the operands stay in L2 and packing only adds traffic
        # (IAAT); the tuner replaces this with the measured crossover.
        params["pack_flops"][dtype] = 2.0 * 160**3
    # A parallel region costs a few microseconds of wake-up; 4 MFLOP is ~30 us on one core.
    params["thread_flops"] = 4.0e6
    params["provenance"] = provenance
    params["simd_bytes"] = 64
    return params


def _c_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_double(value: float) -> str:
    value = float(value)
    if not math.isfinite(value):
        return "0.0"
    return repr(value) if "e" in repr(value) or "." in repr(value) else repr(value) + ".0"


def _per_dtype(params: Mapping, key: str, default: float) -> tuple[float, float]:
    value = params.get(key, default)
    if isinstance(value, Mapping):
        return (value.get("f32", default), value.get("f64", default))
    return (value, value)


def emit_kernel_table_c(
    kernels: Sequence[tuple[KernelSpec, Mapping[int, float]]],
    params: Mapping,
    peak_gflops: Mapping[str, float],
) -> str:
    """The generated ``at_table.c`` (format: ``kernels_src/runtime/at_table.h``).

    ``kernels`` pairs each selected kernel with its median GFLOPS by K (at most
    eight points; more are thinned evenly).  ``params`` holds ``blk_m``, ``blk_n``,
    ``blk_k`` and ``pack_flops`` (per dtype, as ``{"f32": .., "f64": ..}`` or one
    number), ``thread_flops``, ``provenance`` (``measured``, ``model`` or
    ``emulated``: the last two make the tiler rank by its analytic model) and
    ``simd_bytes``.  The output depends only on the arguments.
    """
    provenance = params.get("provenance", "measured")
    if provenance not in PROVENANCE_CODE:
        raise ValueError(f"provenance must be one of {tuple(PROVENANCE_CODE)}, got {provenance!r}")
    seen: set[str] = set()
    lines = [
        "/* Generated by autotune.runtime.library.emit_kernel_table_c.",
        " * Do not edit: re-run `autotune install`.  Format: kernels_src/runtime/at_table.h. */",
        "#include <stdint.h>",
        '#include "at_table.h"',
        "",
    ]
    entries = []
    for spec, by_k in sorted(kernels, key=lambda item: item[0]):
        if spec.name in seen:
            raise ValueError(f"kernel {spec.name} listed twice")
        seen.add(spec.name)
        T = DTYPE_CTYPE[spec.dtype]
        lines.append(
            f"void {spec.name}(int64_t K, const {T} *A, int64_t lda, const {T} *B, int64_t ldb, "
            f"{T} *C, int64_t ldc, {T} alpha, {T} beta);"
        )
        grid = sorted((int(k), float(g)) for k, g in by_k.items() if int(k) > 0)
        if len(grid) > KGRID_MAX:
            step = (len(grid) - 1) / (KGRID_MAX - 1)
            grid = [grid[round(i * step)] for i in range(KGRID_MAX)]
        ks = [k for k, _ in grid] + [0] * (KGRID_MAX - len(grid))
        gs = [g if math.isfinite(g) and g > 0 else 0.0 for _, g in grid] + [0.0] * (KGRID_MAX - len(grid))
        entries.append(
            f"    {{{_c_str(spec.name)}, {_DTYPE_CODE[spec.dtype]}, {int(spec.trans_a)}, "
            f"{int(spec.trans_b)}, {spec.mr}, {spec.nr}, (at_kernel_fn){spec.name}, {len(grid)},\n"
            f"     {{{', '.join(map(str, ks))}}},\n"
            f"     {{{', '.join(_c_double(g) for g in gs)}}}}},"
        )
    lines.append("")
    if entries:
        lines.append("const at_kernel_desc at_kernel_table[] = {")
        lines.extend(entries)
        lines.append("};")
    else:
        # C has no empty arrays: one unused element, count zero.
        lines.append("const at_kernel_desc at_kernel_table[1] = {{0}};")
    lines.append(f"const int at_kernel_table_count = {len(entries)};")
    lines.append("")

    def pair(key: str, default: float, integer: bool) -> str:
        a, b = _per_dtype(params, key, default)
        return f"{{{int(a)}, {int(b)}}}" if integer else f"{{{_c_double(a)}, {_c_double(b)}}}"

    lines += [
        "const at_planner_params at_params = {",
        "    .format = AT_TABLE_FORMAT,",
        f"    .provenance = {PROVENANCE_CODE[provenance]}, /* {provenance} */",
        f"    .blk_m = {pair('blk_m', 128, True)},",
        f"    .blk_n = {pair('blk_n', 2048, True)},",
        f"    .blk_k = {pair('blk_k', 256, True)},",
        f"    .pack_flops = {pair('pack_flops', 2.0 * 160**3, False)},",
        f"    .thread_flops = {_c_double(params.get('thread_flops', 4.0e6))},",
        f"    .peak_gflops = {{{_c_double(peak_gflops.get('f32', 0.0))}, "
        f"{_c_double(peak_gflops.get('f64', 0.0))}}},",
        f"    .simd_bytes = {int(params.get('simd_bytes', 64))},",
        "};",
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


def _run(argv: Sequence[str]) -> None:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=_COMPILE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LibraryError(f"cannot run {' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise LibraryError(f"{' '.join(argv)}\n{(proc.stdout + proc.stderr).strip()}")


def _replace_atomic(src: Path, dst: Path) -> None:
    """Move a finished file into place: a process that loaded the old one keeps its mapping."""
    os.replace(src, dst)


def runtime_cflags(target: Target) -> list[str]:
    """Flags of the runtime's own C: the target's baseline, never a kernel ISA's."""
    flags = list(target.base_cflags)
    if not any(f.startswith("-O") for f in flags):
        flags.append("-O2")
    for flag in ("-std=c11", "-fPIC", "-pthread"):
        if flag not in flags:
            flags.append(flag)
    return flags


def python_extension_flags() -> tuple[list[str], str] | None:
    """(include flags, file suffix) for an extension of this Python, None without headers."""
    include = sysconfig.get_paths().get("include")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    if not include or not (Path(include) / "Python.h").exists():
        return None
    return [f"-I{include}"], suffix


def build_library(
    target: Target,
    kernel_objects: Sequence[tuple[KernelSpec, Path]],
    table_c: str,
    out_dir: Path,
) -> Path:
    """Build the runtime into ``out_dir`` and return the path of ``libautotune.so``.

    See :func:`build_runtime`, which also reports the extension and the hash.
    """
    return build_runtime(target, kernel_objects, table_c, out_dir).library


def build_runtime(
    target: Target,
    kernel_objects: Sequence[tuple[KernelSpec, Path]],
    table_c: str,
    out_dir: Path,
    with_extension: bool = True,
) -> LibraryBuild:
    """Link ``libautotune.so`` from the runtime C, ``table_c`` and the kernels' objects.

    Copies ``autotune.h`` beside it and builds the ``_atfast`` Python extension
    (linked to the library through ``$ORIGIN``).  Nothing is compiled when the
    hash of the sources, the objects, the compiler and the flags is unchanged.
    Raises :class:`LibraryError` with the compiler's output on failure.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = kernels_src()
    runtime_dir, include_dir = src / "runtime", src / "include"
    header = include_dir / "autotune.h"
    cflags = runtime_cflags(target)
    ext = python_extension_flags() if with_extension else None

    parts: list[bytes | str] = [target.compiler_id, *target.cc, "--", *cflags, "--", *target.ldflags]
    for name in (*RUNTIME_SOURCES, *RUNTIME_HEADERS, EXTENSION_SOURCE):
        parts += [name, (runtime_dir / name).read_bytes()]
    parts += [header.read_bytes(), table_c, str(ext)]
    # The build compiles kernels of one mr into one translation unit, so several
    # kernels may name the same object: it is linked (and hashed) once.
    object_paths = list(dict.fromkeys(str(obj) for _, obj in kernel_objects))
    parts += [spec.name for spec, _ in sorted(kernel_objects, key=lambda item: item[0])]
    for obj in object_paths:
        parts += [obj, Path(obj).read_bytes()]
    digest = _digest(*parts)

    library = out_dir / LIBRARY_NAME
    stamp = out_dir / (LIBRARY_NAME + ".hash")
    extension = out_dir / f"_atfast{ext[1]}" if ext else None
    if (
        library.exists()
        and stamp.exists()
        and stamp.read_text().strip() == digest
        and (extension is None or extension.exists())
    ):
        return LibraryBuild(library, out_dir / "autotune.h", extension, digest, True)

    with tempfile.TemporaryDirectory(prefix=".build-", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "at_table.c").write_text(table_c)
        includes = [f"-I{include_dir}", f"-I{runtime_dir}"]
        objects = []
        for name in (*RUNTIME_SOURCES, "at_table.c"):
            path = tmp / name if name == "at_table.c" else runtime_dir / name
            obj = tmp / (Path(name).stem + ".o")
            _run([*target.cc, *cflags, *includes, "-c", str(path), "-o", str(obj)])
            objects.append(str(obj))
        lib_tmp = tmp / LIBRARY_NAME
        _run(
            [*target.cc, "-shared", "-pthread", "-o", str(lib_tmp), *objects,
             *object_paths, *target.ldflags,
             f"-Wl,-soname,{LIBRARY_NAME}", "-lm"]
        )
        ext_tmp = None
        if ext and extension is not None:
            ext_tmp = tmp / extension.name
            _run(
                [*target.cc, *cflags, *includes, *ext[0], "-shared", str(runtime_dir / EXTENSION_SOURCE),
                 "-o", str(ext_tmp), f"-L{tmp}", "-l:" + LIBRARY_NAME, "-Wl,-rpath,$ORIGIN"]
            )
        header_tmp = tmp / "autotune.h"
        shutil.copyfile(header, header_tmp)
        _replace_atomic(lib_tmp, library)
        _replace_atomic(header_tmp, out_dir / "autotune.h")
        if ext_tmp is not None and extension is not None:
            _replace_atomic(ext_tmp, extension)
        stamp_tmp = tmp / "stamp"
        stamp_tmp.write_text(digest + "\n")
        _replace_atomic(stamp_tmp, stamp)
    return LibraryBuild(library, out_dir / "autotune.h", extension, digest, False)
