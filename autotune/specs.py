"""Kernel specifications: the one record every stage keys on.

A :class:`KernelSpec` names a fixed-size micro-kernel computing an ``mr x nr`` block
of ``C = alpha * op(A) * op(B) + beta * C`` over a run-time depth ``K``.  The
generator, the build, the harness, the tuned table and the run-time tiler all take
the same record, and its :attr:`KernelSpec.name` is a pure function of it.

Every kernel has the same C signature (column-major, BLAS convention)::

    void name(int64_t K, const T *A, int64_t lda, const T *B, int64_t ldb,
              T *C, int64_t ldc, T alpha, T beta);

so an executing plan can chain kernels of any family.

A :class:`QKernelSpec` names a quantised micro-kernel (int8 activations x 4- or
8-bit weights, :mod:`autotune.qformat`); its C contract is
``kernels_src/runtime/at_qkernel.h`` and its names follow :data:`QNAME_PATTERN`.

Which kernels exist is not decided here: each family's register model is in
:mod:`autotune.families`.  This module knows no register file and imports
neither the families nor the generators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, asdict

from .qformat import ACTIVATIONS, KINDS, PANEL

DTYPES = ("f32", "f64")
DTYPE_BYTES = {"f32": 4, "f64": 8}
DTYPE_CTYPE = {"f32": "float", "f64": "double"}
#: The dtype codes of the C side (AT_F32, AT_F64 of autotune.h).
DTYPE_CODE = {"f32": 0, "f64": 1}
BLAS_PREFIX = {"f32": "s", "f64": "d"}
TRANSPOSITIONS = ("nn", "nt", "tn", "tt")
#: Streaming vector lengths the SME2 generator specialises to (and QEMU emulates).
SVL_CHOICES = (128, 256, 512, 1024, 2048)

#: The grammar of kernel names; tests check every generated name against it.
NAME_PATTERN = re.compile(
    r"^at_(?P<prefix>[sd])gemm_(?P<isa>[a-z0-9]+)_(?P<trans>nn|nt|tn|tt)_"
    r"(?P<mr>\d+)x(?P<nr>\d+)(?:_(?P<variant>[a-z][a-z0-9]*))?_u(?P<unroll>\d+)(?:_vl(?P<svl>\d+))?$"
)


@dataclass(frozen=True, order=True)
class KernelSpec:
    """One fixed-size micro-kernel.

    ``variant`` is the operand format: ``""`` reads A and B in place through their
    leading dimensions (the no-pack path of small GEMM); other formats name a packed
    layout the kernel's packing routines produce.  ``unroll`` is the K-loop unroll
    factor, a tuning of the same layout.  ``svl`` is the streaming vector length in
    bits an SME2 kernel is specialised to (0 for the other families): one library
    carries a set per SVL, and a CPU runs the set of its own.
    """

    isa: str
    dtype: str
    mr: int
    nr: int
    trans_a: bool = False
    trans_b: bool = False
    variant: str = ""
    unroll: int = 1
    svl: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {DTYPES}")
        if self.mr < 1 or self.nr < 1 or self.unroll < 1:
            raise ValueError(f"mr, nr and unroll must be positive: {self!r}")
        if self.svl and self.svl not in SVL_CHOICES:
            raise ValueError(f"svl must be 0 or one of {SVL_CHOICES}: {self!r}")

    @property
    def trans(self) -> str:
        return ("t" if self.trans_a else "n") + ("t" if self.trans_b else "n")

    @property
    def name(self) -> str:
        variant = f"_{self.variant}" if self.variant else ""
        svl = f"_vl{self.svl}" if self.svl else ""
        return (
            f"at_{BLAS_PREFIX[self.dtype]}gemm_{self.isa}_{self.trans}_"
            f"{self.mr}x{self.nr}{variant}_u{self.unroll}{svl}"
        )

    @property
    def ctype(self) -> str:
        return DTYPE_CTYPE[self.dtype]

    @property
    def flops_per_k(self) -> int:
        return 2 * self.mr * self.nr

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "KernelSpec":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @classmethod
    def from_name(cls, name: str) -> "KernelSpec":
        match = NAME_PATTERN.match(name)
        if not match:
            raise ValueError(f"not a kernel name: {name!r}")
        trans = match["trans"]
        return cls(
            isa=match["isa"],
            dtype="f32" if match["prefix"] == "s" else "f64",
            mr=int(match["mr"]),
            nr=int(match["nr"]),
            trans_a=trans[0] == "t",
            trans_b=trans[1] == "t",
            variant=match["variant"] or "",
            unroll=int(match["unroll"]),
            svl=int(match["svl"] or 0),
        )


def parse_trans(trans: str) -> tuple[bool, bool]:
    """``'nt'`` -> ``(False, True)``; accepts upper case as BLAS callers write it."""
    trans = trans.lower()
    if trans not in TRANSPOSITIONS:
        raise ValueError(f"transposition must be one of {TRANSPOSITIONS}, got {trans!r}")
    return trans[0] == "t", trans[1] == "t"


#: The forms of a quantised kernel: a register tile of C (mr > 1 rows), a GEMV
#: (one row at a time), an outer product into a matrix engine's tiles (SME2's ZA).
QFORMS = ("tile", "gemv", "za")

#: The grammar of quantised kernel names: weights' format, ISA, tile (a side in
#: vector lengths ends in ``vl``: the kernel serves any SVL).  The activations have
#: one format (qformat.ACTIVATIONS), so the name does not repeat it.
QNAME_PATTERN = re.compile(
    r"^at_(?P<kind>q[a-z0-9]+)_(?P<isa>[a-z0-9]+)_(?P<mr>\d+)(?P<mvl>vl)?x(?P<nr>\d+)(?P<nvl>vl)?$"
)


@dataclass(frozen=True, order=True)
class QKernelSpec:
    """One quantised micro-kernel: formats, ISA, tile, form and what the CPU needs.

    ``isa`` is the instruction set the kernel is written in (``avx2``, ``avxvnni``,
    ``dotprod``, ``i8mm``, ``sme2``...), ``family`` the family module that declares it
    and whose generator writes it (``autotune.families.<family>``,
    ``autotune.codegen.quant_<family>``), ``features`` what a CPU must have to run it,
    in :mod:`autotune.host`'s names (the registry lists them, features.c tests them).
    ``vl_rows``/``vl_cols``: ``mr``/``nr`` count streaming vector lengths, not
    elements; such a kernel reads the SVL at run time (``svl`` 0: any).
    Records are made by the families (``qkernel``), which check their register model.
    """

    kind: str
    isa: str
    mr: int
    nr: int
    family: str
    features: tuple[str, ...]
    form: str = "tile"
    vl_rows: bool = False
    vl_cols: bool = False
    svl: int = 0
    activations: str = ACTIVATIONS

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")
        if self.form not in QFORMS:
            raise ValueError(f"form must be one of {QFORMS}, not {self.form!r}")
        if self.mr < 1 or self.nr < 1:
            raise ValueError(f"mr and nr must be positive: {self!r}")

    @property
    def name(self) -> str:
        rows, cols = f"{self.mr}{'vl' * self.vl_rows}", f"{self.nr}{'vl' * self.vl_cols}"
        return f"at_{self.kind}_{self.isa}_{rows}x{cols}"

    @property
    def panels(self) -> int:
        """Packed panels of columns the kernel reads per call (element tiles)."""
        return self.nr // PANEL

    @property
    def gemv(self) -> bool:
        return self.form == "gemv"


def parse_qname(name: str) -> dict:
    """The fields a quantised kernel name spells: kind, isa, mr, nr, vl_rows, vl_cols."""
    match = QNAME_PATTERN.match(name)
    if not match or match["kind"] not in KINDS:
        raise ValueError(f"not a quantised kernel name: {name!r}")
    return {"kind": match["kind"], "isa": match["isa"], "mr": int(match["mr"]), "nr": int(match["nr"]),
            "vl_rows": bool(match["mvl"]), "vl_cols": bool(match["nvl"])}
