"""Kernel generators: one module per ISA, each with ``generate(spec) -> GeneratedSource``.

:func:`generate` finds the generator by the spec's ISA name
(``autotune.codegen.<isa>``), imported on first use, so a generator module added
for a new ISA plugs in without editing a table here.  The quantised kernels'
generators are found the same way, by the family of their records
(:func:`quant_generator`: ``autotune.codegen.quant_<family>``, each with
``units(kernels)``, the translation units of a set of its kernels).  Which kernels exist, and
the register models the generators follow, are in :mod:`autotune.families`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..specs import KernelSpec, QKernelSpec

LANGUAGES = {"c": ".c", "asm": ".S"}


@dataclass(frozen=True)
class GeneratedSource:
    """The text of one kernel's source file; never edited by hand, never committed."""

    spec: KernelSpec
    text: str
    language: str = "c"  # "c" or "asm"

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {tuple(LANGUAGES)}, got {self.language!r}")

    @property
    def filename(self) -> str:
        return self.spec.name + LANGUAGES[self.language]


@dataclass(frozen=True)
class QuantUnit:
    """One generated file of quantised kernels: its name, text and the flags its ISA
    level adds to the target's (a header among them is included, not compiled)."""

    filename: str
    text: str
    flags: tuple[str, ...] = ()


def generator_module(isa: str, entry: str = "generate"):
    """The module generating ``isa`` kernels (defining ``entry``); ValueError when there is none."""
    if not isa.isidentifier():
        raise ValueError(f"no kernel generator for ISA {isa!r}")
    name = f"{__name__}.{isa}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only a missing generator is "no generator"; a generator that fails to
        # import for another reason must show its own error.
        if exc.name != name:
            raise
        raise ValueError(f"no kernel generator for ISA {isa!r} (no module {name})") from None
    gen = getattr(module, entry, None)
    # A helper module (bench, _x86) may import this package's generate; only a
    # module defining its own is a generator, else dispatch would recurse.
    if not callable(gen) or getattr(gen, "__module__", None) != name:
        raise ValueError(f"no kernel generator for ISA {isa!r} ({name} defines no {entry}())")
    return module


def quant_generator(spec: QKernelSpec):
    """The module writing ``spec``'s family of quantised kernels (``autotune.codegen.quant_<family>``)."""
    return generator_module(f"quant_{spec.family}", "units")


def generate(spec: KernelSpec) -> GeneratedSource:
    """Generate the source of one kernel with its ISA's generator (an SME2 kernel at
    its spec's streaming vector length)."""
    return generator_module(spec.isa).generate(spec)
