"""The kernel contract: the one place the kernel ABI is written down in Python.

``kernels_src/include/at_kernel.h`` declares the two kernel signatures and the
``at_kernel`` record that describes a kernel (name, family, dtype, transposition,
block, operand format, SVL, entry points).  This module writes what C needs of
it: the kernels' prototypes, their records, and the parameter lists the
generators put at the top of every kernel.  The harness registry
(:mod:`autotune.build`), the library's kernel table (:mod:`autotune.link`) and
the Arm drivers of the tests are all made of :func:`kernel_record` and
:func:`declarations`, so a change to the record is one change here and one in
the header.

The quantised kernels' contract is ``kernels_src/runtime/at_qkernel.h`` (the
formats' numbers in it are :mod:`autotune.qformat`'s): this module writes their
prototypes (:func:`qkernel_signature`), the registry qgemm.c chooses from
(:func:`qregistry`, ``at_qtable.c``) and the table of the SME2 kernels, which
take whole matrices (:func:`qsme2_table`).  Every list of kernels in C is one of
these, made from :class:`autotune.specs.QKernelSpec` records.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from .families import operand_panels, sme2
from .qformat import weight_format
from .specs import DTYPE_CODE, KernelSpec, QKernelSpec
from .toolchain import REQUIRES

HEADER = "at_kernel.h"
#: The header every generated assembly kernel includes (kernels_src/arm/): symbol
#: names, local labels and the directives that differ between ELF and Mach-O.
ASM_HEADER = "at_asm.h"
#: The SME2 kernels' second entry point: the same kernel for a caller already in
#: streaming mode with ZA on, so a plan's steps switch mode once, not per call.
STREAMING_SUFFIX = "_s"


def parameters(ctype: str, restrict: bool = False) -> tuple[str, ...]:
    """The kernel signature's parameters in groups: K; A, lda; B, ldb; C, ldc; alpha, beta.

    Generators lay the groups out as they like; the names and types are these.
    """
    r = "restrict " if restrict else ""
    return (
        "int64_t K",
        f"const {ctype} *{r}A, int64_t lda",
        f"const {ctype} *{r}B, int64_t ldb",
        f"{ctype} *{r}C, int64_t ldc",
        f"{ctype} alpha, {ctype} beta",
    )


def signature_lines(spec: KernelSpec, name: str | None = None, qualifiers: str = "void") -> list[str]:
    """The head of a kernel's C definition, one parameter group per line, aligned
    under the parenthesis, with ``restrict`` operands (they never alias)."""
    name = name or spec.name
    groups = parameters(spec.ctype, restrict=True)
    pad = " " * (len(qualifiers) + len(name) + 2)
    return [f"{qualifiers} {name}({groups[0]},", *(f"{pad}{g}," for g in groups[1:-1]), f"{pad}{groups[-1]})"]


def prototype(spec: KernelSpec) -> str:
    """``void <name>(...);``: the declaration of the kernel's entry point."""
    return f"void {spec.name}({', '.join(parameters(spec.ctype))});"


def has_streaming_entry(spec: KernelSpec) -> bool:
    return spec.isa == "sme2"


def declarations(specs: Iterable[KernelSpec]) -> list[str]:
    """Prototypes of every entry point the records of ``specs`` name."""
    lines = []
    for spec in specs:
        lines.append(prototype(spec))
        if has_streaming_entry(spec):
            # Called only from streaming code, through a cast; its type is the
            # executor's business (sme2_exec.c).
            lines.append(f"void {spec.name}{STREAMING_SUFFIX}(void);")
    return lines


def requirements(spec: KernelSpec) -> tuple[str, ...]:
    """The CPU features (HostInfo names) the kernel needs: its family's, and for
    SME2 in f64 the f64 outer products (FEAT_SME_F64F64)."""
    extra = ("smef64f64",) if spec.isa == "sme2" and spec.dtype == "f64" else ()
    return (*REQUIRES.get(spec.isa, ()), *extra)


def operand_format(spec: KernelSpec) -> tuple[int, int]:
    """``pack_a_ld, pack_b_ld`` of the record: the panels' leading dims, 0 for in place."""
    return operand_panels(spec)


def kernel_record(spec: KernelSpec) -> str:
    """The C initialiser of the kernel's ``at_kernel`` record (an SME2 kernel's
    SVL is its spec's)."""
    pack_a, pack_b = operand_format(spec)
    streaming = has_streaming_entry(spec)
    svl_bytes = sme2.spec_svl(spec) // 8 if streaming else 0
    fn_s = f"(at_kernel_fn){spec.name}{STREAMING_SUFFIX}" if streaming else "0"
    return (
        f'{{"{spec.name}", "{spec.isa}", "{" ".join(requirements(spec))}", {DTYPE_CODE[spec.dtype]}, '
        f"{int(spec.trans_a)}, {int(spec.trans_b)}, {spec.mr}, {spec.nr}, {pack_a}, {pack_b}, {svl_bytes}, "
        f"(at_kernel_fn){spec.name}, {fn_s}}}"
    )


def record_array(c_name: str, specs: Sequence[KernelSpec]) -> list[str]:
    """``const at_kernel <c_name>[] = {...};`` and ``const int <c_name>_count``.

    The entry points must be declared before (:func:`declarations`).
    """
    if not specs:
        # C has no empty arrays: one unused element, count zero.
        return [f"const at_kernel {c_name}[1] = {{{{0}}}};", f"const int {c_name}_count = 0;"]
    return [
        f"const at_kernel {c_name}[] = {{",
        *(f"    {kernel_record(spec)}," for spec in specs),
        "};",
        f"const int {c_name}_count = {len(specs)};",
    ]


# -- the quantised kernels (kernels_src/runtime/at_qkernel.h) ---------------------------------

#: The generated registry of a library's quantised kernels.
QTABLE = "at_qtable.c"


def qkernel_signature(name: str) -> str:
    """The C prototype of quantised kernel ``name`` (at_qkernel_fn), without the semicolon."""
    return (f"void {name}(int64_t blocks, int64_t sub, const int8_t *qa, int64_t lda, const float *sa,\n"
            f"        const float *asum, int64_t lds, const uint8_t *wq, int64_t wstride, const float *ws,\n"
            f"        const float *wz, int64_t sstride, float *C, int64_t ldc, int64_t load_c)")


def qkernel_unused(kind: str) -> list[str]:
    """The C lines a quantised kernel of ``kind`` starts with for the operands it does not
    read (no zero points: ``wz``; symmetric 8-bit codes: ``asum``), and what ``load_c`` means."""
    fmt = weight_format(kind)
    return [*(["    (void)wz; /* no zero points */"] if not fmt.zero_points else []),
            *(["    (void)asum; /* symmetric 8-bit codes: no zero point to multiply it */"] if fmt.bits == 8 else []),
            "    /* load_c: C holds the sums of the blocks before these (K is covered in slices). */"]


def qregistry(kernels: Sequence[QKernelSpec], features: Sequence[str] | None = None,
              thread_macs: float = 0.0) -> str:
    """The generated ``at_qtable.c``: ``kernels`` (at_qkernel_fn ones) in order of preference,
    and ``thread_macs``, the multiply-adds per thread from which qgemm.c splits a product
    (measured by the install; 0: qgemm.c's built-in).

    Each entry needs its record's ``features``; ``features``, when given, replaces
    them for every entry: a test that runs VNNI kernels with their instruction
    emulated in AVX2 registers them as AVX2's.
    """
    lines = ["/* Generated by autotune.contract.qregistry.  Do not edit: re-run `autotune install`. */",
             '#include "at_qkernel.h"', ""]
    lines += [qkernel_signature(k.name) + ";" for k in kernels]
    entries = [f'    {{"{k.name}", {weight_format(k.kind).code}, {k.mr}, {k.nr}, {k.name}, '
               f'"{" ".join(sorted(set(k.features if features is None else features)))}"}},' for k in kernels]
    if entries:
        lines += ["const at_qkernel_entry at_qkernel_table[] = {", *entries, "};"]
    else:
        lines.append("const at_qkernel_entry at_qkernel_table[1] = {{0}};")
    if not (thread_macs >= 0 and math.isfinite(thread_macs)):
        raise ValueError(f"thread_macs must be finite and non-negative, not {thread_macs!r}")
    lines += [f"const int at_qkernel_count = {len(entries)};",
              f"const double at_qthread_macs = {float(thread_macs)!r};", ""]
    return "\n".join(lines)


def qsme2_table(kernels: Sequence[QKernelSpec]) -> list[str]:
    """The SME2 kernels' prototypes (both entries) and ``AT_QSME2_KERNELS``, the
    initialisers of qgemm.c's table of them: name, kind, whether a GEMV, function."""
    args = ("int64_t, int64_t, const int8_t *, int64_t, const float *, int64_t, const uint8_t *, "
            "const float *, float *, int64_t, int64_t")
    lines = [f"void {k.name}{suffix}({args});" for k in kernels for suffix in ("", STREAMING_SUFFIX)]
    entries = [f'{{"{k.name}", AT_{k.kind.upper()}, {int(k.gemv)}, {k.name}}}' for k in kernels]
    return [*lines, "#define AT_QSME2_KERNELS \\", *(f"    {e}, \\" for e in entries[:-1]), f"    {entries[-1]}"]
