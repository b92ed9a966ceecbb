"""Kernel families: which micro-kernels exist, by each ISA family's register model.

One module per family: :mod:`.x86` (the avx512, avx2 and generic register files),
:mod:`.neon` (IAAT's allocator) and :mod:`.sme2` (the ZA tiles).  Each holds its
register model, its family enumeration (``family``), the quick install's subset
(``quick``) and its analytic score (``score``).  This package adds what spans the
families: the kernels an install generates (:func:`default_family`), the
analytic rank of any kernel (:func:`model_score`) and the packed panels a kernel
reads (:func:`operand_panels`); for the quantised kernels, the record a name
stands for (:func:`qkernel`) and the kernels a library carries (:func:`quant_kernels`).

The generators (autotune.codegen.<isa>) import these models to emit exactly the
registers they count; nothing here imports a generator.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..specs import TRANSPOSITIONS, KernelSpec, QKernelSpec, parse_qname
from . import neon, sme2, x86

#: The Arm families, fastest first.
ARM_ISAS = ("sme2", "neon")


#: The streaming vector lengths an SME2 library carries kernels for when the
#: CPU it will meet is not known (a cross-build): Apple's M4 has 512 bits, the
#: phone and server cores with SME2 have 128 to 512.
CROSS_SVLS = (128, 256, 512)


def arm_family(isa: str, dtype: str, trans: str, svl_bits: int = sme2.DEFAULT_SVL,
               quick: bool = False) -> list[KernelSpec]:
    """The NEON or SME2 family (SME2 at one SVL); ``quick`` keeps the common NEON sides
    and the whole-tile SME2 kernels (their hybrid edge forms are left to the full install)."""
    if isa == "neon":
        specs = neon.family(dtype, trans)
        return sorted(neon.quick(specs) if quick else specs)
    if isa == "sme2":
        specs = sme2.family(dtype, trans, svl_bits)
        return sorted(sme2.quick(specs) if quick else specs)
    raise ValueError(f"{isa!r} is not an Arm kernel family; Arm families: {ARM_ISAS}")


def default_family(
    isas: Iterable[str],
    dtypes: Iterable[str] = ("f32", "f64"),
    transes: Iterable[str] = TRANSPOSITIONS,
    quick: bool = False,
    svls: Iterable[int] = (sme2.DEFAULT_SVL,),
) -> list[KernelSpec]:
    """The kernels an install generates for these ISAs, SME2 once per SVL of ``svls``.

    ``quick`` keeps roughly a tenth to a fifth of them: the largest blocks and
    the small tails a tiler needs (sides 1..4 and whole vectors).  ISAs without
    a family contribute nothing.
    """
    out: list[KernelSpec] = []
    for isa in isas:
        if isa in ARM_ISAS:
            for dtype in dtypes:
                for trans in transes:
                    for svl in (svls if isa == sme2.ISA else (0,)):
                        out.extend(arm_family(isa, dtype, trans.lower(), svl, quick))
            continue
        if isa not in x86.REGISTER_FILES:
            continue
        for dtype in dtypes:
            for trans in transes:
                for specs in (x86.family(isa, dtype, trans), x86.gather_family(isa, dtype, trans)):
                    if specs:
                        out.extend(x86.quick(isa, dtype, trans.lower(), specs) if quick else specs)
    return sorted(out)


def model_score(spec: KernelSpec) -> float:
    """The analytic rank of a kernel: FLOPs per operand load of one K step.

    What emulated tables rank by, since emulated timings mean nothing: IAAT's
    memops-per-FLOP model for NEON (inverted, so higher is better), KirbyMM's
    compute-to-memory ratio for SME2, and for the other families the same
    outer-product count, 2 mr nr / (mr + nr).
    """
    if spec.isa == "neon":
        return neon.score(spec)
    if spec.isa == "sme2":
        return sme2.score(spec)
    return x86.score(spec)


def operand_panels(spec: KernelSpec) -> tuple[int, int]:
    """Leading dimensions of the packed panels the kernel reads for A and B (0: in place).

    A packed A panel holds op(A)[i, p] at ``i + p*ld``; a packed B panel holds
    op(B)[p, j] at ``j + p*ld``; both are zero beyond the block.  Only SME2 kernels
    read packed formats (:func:`.sme2.kernel_format`, at the spec's SVL).
    """
    if spec.isa != sme2.ISA:
        return 0, 0
    fmt = sme2.kernel_format(spec)
    return (fmt.a.panel_ld if fmt.a.packed else 0, fmt.b.panel_ld if fmt.b.packed else 0)


def qkernel(name: str) -> QKernelSpec:
    """The quantised kernel a name stands for, in whichever family declares it; ValueError for none."""
    f = parse_qname(name)
    if f["isa"] in x86.QUANT_ISAS:
        spec = x86.qkernel(f["kind"], f["isa"], f["mr"], f["nr"])
    elif f["isa"] in neon.QUANT_LEVELS:
        spec = neon.qkernel(f["kind"], f["isa"], f["mr"], f["nr"])
    else:
        spec = next((k for k in sme2.quant_family() if k.name == name), None)
    if spec is None or spec.name != name:
        raise ValueError(f"no family declares the quantised kernel {name!r}")
    return spec


def quant_kernels(isas: Iterable[str], selected: Iterable[str] | None = None) -> list[QKernelSpec]:
    """The quantised kernels a library for ``isas`` carries, preferred first.

    An Arm library: the NEON kernels, since qgemm.c picks among them by the
    features of the CPU it runs on (an emulated install times nothing), and an SME2
    library the SME2 kernels after them (qgemm.c runs those first on weights with
    an SME2 form; they stay out of the tile registry, taking whole matrices); of
    those, the ones install validated (``selected``), all when ``selected`` is None.
    An x86 library: the kernels install ``selected`` (validated and timed here).
    """
    isas = tuple(isas)
    if any(isa in ARM_ISAS for isa in isas):
        family = neon.quant_family() + (sme2.quant_family() if sme2.ISA in isas else [])
        return family if selected is None else [k for k in family if k.name in set(selected)]
    if any(isa in x86.QUANT_ISAS for isa in isas):
        return [qkernel(name) for name in selected or ()]
    return []
