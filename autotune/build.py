"""Build: kernel sources -> cached objects -> one harness executable per ISA.

Every object lives at ``$AUTOTUNE_HOME/build/<isa>/objects/<sha256>.o`` where the
hash covers everything that decides the machine code: the source text, the
compiler's identity and the exact argv.  A source that did not change is never
recompiled, and an object only appears under its final name once the compiler
finished (compile to a temporary name, then ``files.replace``), so an interrupted
install leaves no half-written object behind for the next one to trust.

A kernel that does not compile is a failure recorded in the :class:`BuildResult`
(its name and the compiler's output); the other kernels build on.  Only problems
with the build machinery itself -- the shipped harness failing to compile or the
link failing -- raise :class:`BuildError`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from . import contract, home as home_mod
from .codegen import quant_generator
from . import files
from .files import atomic_write_text
from .specs import KernelSpec, QKernelSpec
from .toolchain import GCC_VECTOR_FLAGS, Target, compiler_identity, slowdown

#: Seconds one compiler or linker run may take before it counts as failed.
COMPILE_TIMEOUT = 300.0
LINK_TIMEOUT = 600.0

_SUFFIX = {"c": ".c", "asm": ".S"}
# Beyond this many arguments the link goes through an @response file: a few
# thousand object paths exceed what some kernels allow on one command line.
_RESPONSE_FILE_ARGS = 200


class BuildError(RuntimeError):
    """The harness could not be compiled or linked; the message has the compiler output."""


class SourceLike(Protocol):
    """What build_kernels needs of a source: autotune.codegen.GeneratedSource fits."""

    spec: KernelSpec
    text: str
    language: str


#: ``progress(advance=1, description="at_sgemm_...")`` once per finished kernel;
#: rich's ``functools.partial(progress.update, task_id)`` fits as it is.
ProgressFn = Callable[..., object]


@dataclass(frozen=True)
class ObjectResult:
    """One compiled object, or why it could not be compiled (``error`` set, ``path`` None)."""

    name: str
    path: Path | None
    hash: str
    cached: bool
    error: str | None = None
    spec: KernelSpec | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.path is not None


@dataclass(frozen=True)
class BuildResult:
    """Objects that compiled, keyed by kernel name, and compile failures with the compiler output."""

    objects: dict[str, ObjectResult] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def compiled(self) -> int:
        """How many objects the compiler actually produced (not served from the cache)."""
        return sum(not obj.cached for obj in self.objects.values())


def build_dir(target: Target, home: Path | None = None) -> Path:
    return (home or home_mod.home()) / "build" / target.isa


def default_jobs() -> int:
    """Parallel compiles: one per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        # Length-prefixed so that no two different part lists hash alike.
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` unless it already holds exactly that."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    atomic_write_text(path, text)


# Ctrl-C during a build: compilers still running are killed, queued units never
# start, and what a killed compiler said is not mistaken for the source's fault.
_stop = threading.Event()
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()
INTERRUPTED = "interrupted"


def _run(argv: Sequence[str], timeout: float) -> tuple[bool, str]:
    """Run a compiler; (succeeded, everything it printed)."""
    if _stop.is_set():
        return False, INTERRUPTED
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        return False, f"cannot run {argv[0]}: {exc}"
    with _running_lock:
        _running.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return False, f"timed out after {timeout:.0f} s: {' '.join(argv)}\n{out}{err}"
    finally:
        with _running_lock:
            _running.discard(proc)
    if proc.returncode < 0 or _stop.is_set():
        return False, f"{INTERRUPTED}: {argv[0]} ended by signal {-proc.returncode}"
    output = (out + err).strip()
    if proc.returncode != 0:
        return False, output or f"{argv[0]} exited with status {proc.returncode}"
    return True, output


# What a compiler prints when the machine, not the source, stopped it: a full disk
# or quota, an I/O error, memory, a killed or crashed compiler, a missing program
# or header, files it may not write.  Lower case; matched anywhere in its output.
_ENVIRONMENT_FAULTS = (
    "no space left on device", "disk quota exceeded", "input/output error", "read-only file system",
    "permission denied", "no such file or directory", "cannot allocate memory", "out of memory",
    "memory exhausted", "killed", "terminated signal", "terminated by signal", "segmentation fault",
    "bus error", "internal compiler error", "too many open files", "resource temporarily unavailable",
    "error writing", "can't write", "cannot write", "can't close", "cannot execute", "not found",
    "stack dump", "please submit a full bug report", "file too large", "broken pipe",
)
# A diagnostic about the source: "file:line[:col]: [fatal ]error: ..." (gcc and clang alike).
_SOURCE_DIAGNOSTIC = re.compile(r"^[^\s:][^:\n]*:\d+(?::\d+)?: (?:fatal )?error: ", re.MULTILINE)


def source_fault(output: str) -> bool:
    """Whether a failed compile's ``output`` is the source's fault, and so may be cached.

    Only a compiler's own diagnostic about a line of the source is; anything the
    environment did (a full disk while writing the object, the OOM killer, a
    compiler or header that is missing) would come out differently next time and
    must not reject the kernel for good.  When in doubt the answer is no: the
    cost of that is one more compile.
    """
    if output.startswith(("timed out", "cannot run", INTERRUPTED)):
        return False
    lowered = output.lower()
    if any(fault in lowered for fault in _ENVIRONMENT_FAULTS):
        return False
    return _SOURCE_DIAGNOSTIC.search(output) is not None


def interrupt_compilers() -> None:
    """Kill the compilers under way and start no more (Ctrl-C; a build in another thread)."""
    _stop.set()
    with _running_lock:
        for proc in _running:
            proc.kill()


class CoreBudget:
    """The cores compilers share with a measurement that needs one to itself.

    A compiler takes a core while it runs (:meth:`core`); a measurement asks with
    ``first=True`` and gets the next core that frees up before any compiler does,
    so the timing of finished kernels proceeds beside the compiles of the rest
    instead of after them, and never beside more compilers than leave it a core.
    """

    def __init__(self, cores: int) -> None:
        self._cond = threading.Condition()
        self._free = max(1, cores)
        self._first_waiting = 0

    @contextmanager
    def core(self, first: bool = False) -> Iterator[None]:
        with self._cond:
            self._first_waiting += first
            self._cond.wait_for(lambda: self._free > (0 if first else self._first_waiting))
            self._first_waiting -= first
            self._free -= 1
        try:
            yield
        finally:
            with self._cond:
                self._free += 1
                self._cond.notify_all()


def _compile(
    target: Target,
    source_text: str,
    name: str,
    language: str,
    flags: Sequence[str],
    home: Path | None,
    extra_hash: str = "",
    force: bool = False,
    root: Path | None = None,
) -> ObjectResult:
    if language not in _SUFFIX:
        return ObjectResult(name, None, "", False, f"unknown source language {language!r}")
    root = root or build_dir(target, home)
    objects, sources = root / "objects", root / "src"
    objects.mkdir(parents=True, exist_ok=True)
    sources.mkdir(parents=True, exist_ok=True)

    # The argv minus the file names is what decides the code, so it is hashed
    # whole: the same source under other flags or another compiler is another object.
    # An assembly source's header counts as its text (its place on disk does not).
    digest = _digest(source_text, language, extra_hash + language_header_text(language), target.compiler_id,
                     *target.cc, "--", *flags)
    src = sources / f"{name}{_SUFFIX[language]}"
    _write_atomic(src, source_text)
    obj = objects / f"{digest}.o"
    # A compile error is as deterministic as an object: the same inputs fail the
    # same way, so the error is cached too and a re-run does not pay for it again.
    failed = objects / f"{digest}.error"
    if not force:
        if obj.exists():
            return ObjectResult(name, obj, digest, True)
        if failed.exists():
            return ObjectResult(name, None, digest, True, failed.read_text())

    tmp = objects / f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp.o"
    ok, output = _run([*target.cc, *flags, *language_includes(language), "-c", str(src), "-o", str(tmp)],
                      COMPILE_TIMEOUT * slowdown(target))
    if not ok:
        tmp.unlink(missing_ok=True)
        if source_fault(output):
            _write_atomic(failed, output)
        return ObjectResult(name, None, digest, False, output)
    files.replace(tmp, obj)
    failed.unlink(missing_ok=True)
    return ObjectResult(name, obj, digest, False)


def shared_dir(home: Path | None = None) -> Path:
    """Objects every ISA of a host may link (the harness driver, the runtime library's C).

    Their key holds the compiler and the flags, which the ISAs of one host share for
    portable code, so each is compiled once rather than once per family.
    """
    return (home or home_mod.home()) / "build" / "shared"


def compile_file(cc: Sequence[str], args: Sequence[str], source: Path, headers: Iterable[Path],
                 cache: Path, timeout: float, *, link: bool = False) -> tuple[Path, bool]:
    """``cc args -c source`` (``link``: ``cc args source``, a shared object) once per content.

    Returns (the output in ``cache``, whether it was there already).  The key is the
    compiler's identity, the whole argv, the source's text and the text of every
    header it may include (``headers``, a superset is fine): the same file under the
    same flags is never compiled twice, whichever table or library it goes into.
    Raises :class:`BuildError` with the compiler's output when it fails.
    """
    digest = _digest(compiler_identity(tuple(cc)), *cc, "--", *args, "--", str(link), source.name,
                     source.read_text(), *(part for h in sorted(headers) for part in (h.name, h.read_text())))
    suffix = ".so" if link else ".o"
    out = cache / f"{digest}{suffix}"
    if out.exists():
        return out, True
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp{suffix}"
    ok, output = _run([*cc, *args, *(() if link else ("-c",)), str(source), "-o", str(tmp)], timeout)
    if not ok:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"cannot compile {source.name}:\n{output}")
    files.replace(tmp, out)
    return out, False


def language_includes(language: str) -> tuple[str, ...]:
    """Include flags a kernel source of ``language`` needs: assembly includes at_asm.h."""
    return (f"-I{home_mod.kernels_src() / 'arm'}",) if language == "asm" else ()


def language_header_text(language: str) -> str:
    """The shipped header text a ``language`` source includes (part of its objects' hash)."""
    return (home_mod.kernels_src() / "arm" / contract.ASM_HEADER).read_text() if language == "asm" else ""


def compile_object(
    target: Target, source_text: str, name: str, language: str = "c", home: Path | None = None
) -> ObjectResult:
    """Compile one kernel source with ``target.cflags`` through the content-hashed cache.

    Never raises for a compile error: ``error`` holds the compiler's output.
    """
    return _compile(target, source_text, name, language, target.cflags, home)


#: Rows (mr) of the kernels one translation unit holds: 4 values of mr.
UNIT_MR_SPAN = 4


def unit_key(spec: KernelSpec) -> str:
    """Kernels sharing a translation unit: one ISA, dtype, transposition and a span of mr.

    Compiling a kernel alone is dominated by parsing the intrinsics headers (about
    three quarters of the time for avx512). A unit parses them once: gcc 12 took
    0.45 s per avx2 unit plus 0.065 s per kernel in it, so units of one mr (104
    for the avx2 family, 8 kernels each) spent 45 % of the family's compile on
    headers, and units of four mr (about 30 kernels) spend 17 %, while still
    leaving enough units to keep every core busy. Grouping by the family's
    structure, not by position in a list, keeps a unit's members stable when
    kernels are added elsewhere in the family.
    """
    span = (spec.mr - 1) // UNIT_MR_SPAN
    return f"{spec.isa}_{spec.dtype}_{spec.trans}_{spec.variant or 'direct'}_mr{span * UNIT_MR_SPAN + 1}"


def _unit_text(members: Sequence[SourceLike], prelude: bool = False) -> str:
    names = ", ".join(m.spec.name for m in members)
    head = f"/* Translation unit of {len(members)} generated kernels: {names} */\n"
    if prelude:
        head += f'#include "{PRELUDE}"\n'
    return head + "\n" + "\n".join(m.text for m in members)


#: The header a unit includes first, so that GCC can load it precompiled.
PRELUDE = "at_unit_prelude.h"
# Headers worth precompiling: parsing immintrin.h took 0.4 s of a 2.4-2.9 s
# avx512 unit (gcc 12, -O2); stdint.h alone costs nothing.
_HEAVY_HEADERS = ("immintrin.h", "arm_neon.h", "arm_sme.h")
_SYSTEM_INCLUDE = re.compile(r"^#include <[^>]+>$", re.MULTILINE)
_pch_lock = threading.Lock()


def prelude_text(members: Sequence[SourceLike]) -> str | None:
    """The system includes every member shares, when one of them is heavy enough to precompile."""
    common: list[str] | None = None
    for member in members:
        lines = _SYSTEM_INCLUDE.findall(member.text)
        common = lines if common is None else [line for line in common if line in lines]
    if not common or not any(h in line for line in common for h in _HEAVY_HEADERS):
        return None
    return "".join(f"{line}\n" for line in common)


def precompiled_prelude(target: Target, flags: Sequence[str], text: str, home: Path | None = None,
                        force: bool = False) -> Path | None:
    """A directory holding ``text`` as the prelude header and GCC's precompiled form of it.

    The compile of each unit then loads the parsed headers instead of parsing them
    again: the same machine code (GCC uses a precompiled header only when it was
    built with the unit's flags, and otherwise parses the text beside it), and the
    avx512 and avx2 families compiled in 13 % less time (Zen 4, gcc 12).  None where the compiler is Clang or the header does not
    precompile: the units then include the plain header.
    """
    # Clang takes a precompiled header only through -include-pch, never from an #include.
    if "clang" in target.compiler_id.lower() or target.emulated:
        return None
    digest = _digest(text, target.compiler_id, *target.cc, "--", *flags)[:16]
    root = build_dir(target, home) / "pch" / digest
    gch = root / f"{PRELUDE}.gch"
    with _pch_lock:
        if gch.exists() and not force:
            return root
        root.mkdir(parents=True, exist_ok=True)
        _write_atomic(root / PRELUDE, text)
        tmp = root / f".{PRELUDE}.{os.getpid()}.tmp.gch"
        ok, _ = _run([*target.cc, *flags, "-x", "c-header", str(root / PRELUDE), "-o", str(tmp)],
                     COMPILE_TIMEOUT)
        if not ok:
            tmp.unlink(missing_ok=True)
            return None
        files.replace(tmp, gch)
    return root


def _kernel_hash(target: Target, source: SourceLike) -> str:
    """Identity of one kernel's machine code, whichever unit it was compiled in."""
    # Same digest as a kernel compiled alone, so the two paths agree on identity.
    return _digest(source.text, source.language, language_header_text(source.language), target.compiler_id,
                   *target.cc, "--", *target.cflags)


def build_kernels(
    target: Target,
    sources: Sequence[SourceLike],
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    home: Path | None = None,
    force: bool = False,
    on_unit: Callable[[Sequence[ObjectResult]], object] | None = None,
    cores: CoreBudget | None = None,
) -> BuildResult:
    """Compile every source, ``jobs`` compilers at a time (default: one per core).

    C kernels are compiled in units (see :func:`unit_key`); a unit that fails is
    retried kernel by kernel so that one bad kernel is reported alone and the rest
    of its unit still builds. Each kernel's :attr:`ObjectResult.hash` identifies
    its own code, so results keyed on it survive regrouping. ``force`` recompiles
    even what the cache holds. ``progress``, if given, is called as
    ``progress(advance=n, description=name)`` from the calling thread, and
    ``on_unit`` with each unit's results (failed ones have ``error`` set) as the
    unit finishes, so a caller in another thread may use them at once.  With
    ``cores``, every compiler runs holding one of its cores.
    """
    objects: dict[str, ObjectResult] = {}
    failures: dict[str, str] = {}
    unique: dict[str, SourceLike] = {}
    for source in sources:
        name = source.spec.name
        if name in unique and unique[name].text != source.text:
            failures[name] = "two different sources for the same kernel name"
        unique.setdefault(name, source)
    todo = [s for n, s in unique.items() if n not in failures]

    src_dir = build_dir(target, home) / "src"
    src_dir.mkdir(parents=True, exist_ok=True)
    units: dict[str, list[SourceLike]] = {}
    for source in todo:
        # The readable per-kernel source, whatever unit compiles it.
        _write_atomic(src_dir / f"{source.spec.name}{_SUFFIX.get(source.language, '.txt')}", source.text)
        key = unit_key(source.spec) if source.language == "c" else source.spec.name
        units.setdefault(key, []).append(source)

    _stop.clear()
    # One precompiled prelude per distinct header set, built before the units that load it.
    unit_preludes = {key: prelude_text(members) for key, members in units.items() if len(members) > 1}
    with cores.core() if cores else nullcontext():
        preludes = {text: precompiled_prelude(target, target.cflags, text, home, force)
                    for text in set(unit_preludes.values()) if text}

    def compile_unit(key: str, members: list[SourceLike]) -> list[tuple[SourceLike, ObjectResult]]:
        with cores.core() if cores else nullcontext():
            return _compile_unit(key, members)

    def _compile_unit(key: str, members: list[SourceLike]) -> list[tuple[SourceLike, ObjectResult]]:
        if len(members) == 1:
            only = members[0]
            flags = target.cflags
            results = [(only, _compile(target, only.text, only.spec.name, only.language, flags, home,
                                       force=force))]
        else:
            pch = preludes.get(unit_preludes[key])
            flags = (*target.cflags, f"-I{pch}") if pch else target.cflags
            unit = _compile(target, _unit_text(members, prelude=pch is not None), f"unit_{key}", "c", flags,
                            home, force=force)
            if unit.ok or _stop.is_set():
                results = [(m, unit) for m in members]
            else:
                results = [(m, _compile(target, m.text, m.spec.name, m.language, target.cflags, home,
                                        force=force)) for m in members]
        return [(m, ObjectResult(m.spec.name, r.path, _kernel_hash(target, m), r.cached, r.error, m.spec))
                for m, r in results]

    # Threads are enough: the work happens in the compiler subprocesses.
    with ThreadPoolExecutor(max_workers=max(1, jobs or default_jobs())) as pool:
        futures = {pool.submit(compile_unit, key, members): members for key, members in units.items()}
        try:
            _collect(futures, objects, failures, progress, on_unit)
        except KeyboardInterrupt:
            # Leaving the pool waits for its threads: make that a moment.
            interrupt_compilers()
            for future in futures:
                future.cancel()
            raise
    # Deterministic order for everything downstream (the registry, reports).
    return BuildResult(dict(sorted(objects.items())), dict(sorted(failures.items())))


def _collect(futures: Mapping, objects: dict, failures: dict, progress: Callable | None,
             on_unit: Callable | None = None) -> None:
    """Results of the compile units as they finish, into ``objects`` and ``failures``."""
    for future in as_completed(futures):
        members = futures[future]
        try:
            results = future.result()
        except OSError as exc:  # e.g. the home became unwritable mid-build
            error = f"{type(exc).__name__}: {exc}"
            results = [(m, ObjectResult(m.spec.name, None, "", False, error, m.spec)) for m in members]
        for member, result in results:
            if result.ok:
                objects[result.name] = result
            else:
                failures[result.name] = result.error or "compiler produced no object"
        if progress is not None:
            progress(advance=len(members), description=members[-1].spec.name)
        if on_unit is not None:
            on_unit([result for _, result in results])


# ------------------------------------------------------------------ harness --



def registry_source(isa: str, specs: Sequence[KernelSpec]) -> str:
    """The C registry the harness links: one ``at_kernel`` record per kernel, in the order given.

    Each record carries the leading dimensions of the packed panels its kernel
    reads (0 for an operand read in place), so the harness packs what it must.
    """
    lines = [
        f"/* Generated by autotune.build for the {isa} harness: {len(specs)} kernels.",
        " * Do not edit: it is rewritten on every build. */",
        '#include "at_registry.h"',
        "",
        *contract.declarations(specs),
        "",
        *contract.record_array("at_registry", specs),
        f'const char at_registry_isa[] = "{isa}";',
        "",
    ]
    return "\n".join(lines)


def _peak_file(target: Target) -> Path:
    harness_dir = home_mod.kernels_src() / "harness"
    own = harness_dir / f"peak_{target.isa}.c"
    return own if own.exists() else harness_dir / "peak_generic.c"


def _quote_response(arg: str) -> str:
    # gcc and clang read @files with shell-like quoting.
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_harness(
    target: Target, objects: Sequence[ObjectResult], home: Path | None = None
) -> Path:
    """Link the harness for ``target`` over the given kernel objects; returns the executable.

    Objects that failed to compile are skipped.  Each object's kernel is taken from
    its ``spec`` (or parsed from its name).  The executable is named after a hash of
    everything linked into it, so an unchanged kernel set is not linked again.
    Raises :class:`BuildError` when the driver does not compile or the link fails.
    """
    harness_dir = home_mod.kernels_src() / "harness"
    usable = [obj for obj in objects if obj.ok]
    specs = [obj.spec or KernelSpec.from_name(obj.name) for obj in usable]
    contract_dir = home_mod.kernels_src() / "include"
    header = "".join((d / name).read_text() for d, name in (
        (harness_dir, "at_registry.h"), (harness_dir, "peak_common.h"), (harness_dir, "peak_t.h"),
        (harness_dir, "pace_t.h"), (contract_dir, contract.HEADER)))
    include = (f"-I{harness_dir}", f"-I{contract_dir}")
    base = (*target.base_cflags, *include)

    parts = [
        _compile(target, (harness_dir / "harness.c").read_text(), "harness", "c", base, home, header,
                 root=shared_dir(home)),
        _compile(target, registry_source(target.isa, specs), "registry", "c", base, home,
                 header),
        _compile(target, _peak_file(target).read_text(), f"peak_{target.isa}", "c",
                 (*target.cflags, *include), home, header),
    ]
    for part in parts:
        if not part.ok:
            raise BuildError(f"cannot compile the {target.isa} harness ({part.name}):\n{part.error}")

    link_flags = [*target.ldflags, *(("-static",) if target.emulated else ()), "-lm"]
    # Kernels compiled in one unit share an object: link each object once.
    kernel_objects = sorted({str(obj.path) for obj in usable})
    inputs = [str(p.path) for p in parts] + kernel_objects
    digest = _digest(target.compiler_id, *target.cc, *link_flags, *(p.hash for p in parts),
                     *(obj.hash for obj in usable), *kernel_objects)
    root = build_dir(target, home)
    exe = root / f"harness-{digest[:16]}"
    if exe.exists():
        return exe

    tmp = root / f".harness-{digest[:16]}.{os.getpid()}.{threading.get_ident()}.tmp"
    rsp: Path | None = None
    if len(inputs) > _RESPONSE_FILE_ARGS:
        rsp = root / f".harness-{digest[:16]}.{os.getpid()}.rsp"
        rsp.write_text("\n".join(_quote_response(arg) for arg in inputs) + "\n")
        inputs = [f"@{rsp}"]
    try:
        ok, output = _run([*target.cc, *inputs, "-o", str(tmp), *link_flags], LINK_TIMEOUT * slowdown(target))
        if not ok:
            raise BuildError(f"cannot link the {target.isa} harness:\n{output}")
        files.replace(tmp, exe)
    finally:
        tmp.unlink(missing_ok=True)
        if rsp is not None:
            rsp.unlink(missing_ok=True)
    return exe


# -- the quantised kernels' object -------------------------------------------------------

def kernel_compiler(target: Target) -> Target:
    """``target`` compiling with clang when one is installed, else as it is.

    GCC 12 keeps several int16 partial sums of the 4x8 and 2x16 forms on the stack
    (81 and 73 stack operands in their loops, even with ``-fno-tree-reassoc``;
    clang 19: 26 and 28); in the same runs here clang's objects made the
    64 x 4096 x 4096 product 1.3-1.8x faster.  The object links into the GCC-built
    library through the same C ABI.
    """
    if "clang" in target.compiler_id.lower():
        return target
    for name in ("clang-19", "clang-18", "clang"):
        path = shutil.which(name)
        if path:
            return replace(target, cc=(path,))
    return target


def compile_qkernels(target: Target, kernels: Sequence[QKernelSpec], home: Path | None = None,
                     emulate_vnni: bool = False) -> ObjectResult:
    """One object with ``kernels`` (content-hashed: the same set compiles once), by :func:`kernel_compiler`.

    With GCC, ``-fno-tree-reassoc``: it otherwise rebalances each int16 accumulation
    into a tree of partial products that outnumber the 16 ymm registers, and spills them.
    ``emulate_vnni``: VNNI kernels with vpdpbusd in AVX2 arithmetic, AMX ones with their
    tile instructions in C (tests on CPUs without them).  Kernels of several generators
    (quant_x86's and quant_amx's, both built with the avx2 target's flags) are their
    units one after another in one source: one object, as the link stage expects.
    """
    generators: dict = {}
    for k in kernels:
        generators.setdefault(quant_generator(k), []).append(k)
    source = "\n".join(unit.text for gen, mine in generators.items() for unit in gen.units(mine, emulate_vnni))
    name = f"at_qkernels_{target.isa}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    compiler = kernel_compiler(target)
    # -O3 with all its passes, as they were measured against the peers, whatever the
    # float kernels take.
    extra = ("-O3",) + (() if "clang" in compiler.compiler_id.lower() else ("-fno-tree-reassoc",))
    flags = tuple(f for f in target.cflags if f not in GCC_VECTOR_FLAGS)
    return _compile(compiler, source, name, "c", (*flags, *extra), home)
