"""The quantised kernels' formats, declared once: weights, activations and the packed panels.

Everything that writes or reads quantised data takes its numbers from here: the
quantiser and packer (:mod:`autotune.quant`), the generators (the quantised parts
of :mod:`autotune.codegen`), the kernel records (:class:`autotune.specs.QKernelSpec`)
and, through :func:`emit_c`, the C runtime: ``kernels_src/runtime/at_qkernel.h``
carries :func:`emit_c`'s text between its ``BEGIN``/``END`` markers (it is a shipped
header a C consumer compiles without Python), and ``tests/test_qformat.py`` fails
when the two differ, as ``tests/test_params.py`` does for the planner parameters.

This module imports nothing of the package: the records' layer (``specs``) sits on it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Columns of a packed panel: one 256-bit vector of int32 or f32 lanes.
PANEL = 8
#: Rows of K in a packed sub-block: what one int16 accumulation may cover without overflow.
SUB = 32
#: Packed columns are padded to a multiple of this (zero scales), so every kernel reads
#: whole tiles and qgemm.c gives each thread whole units of this many columns.
PAD_COLUMNS = 32
#: The zero point that makes the unsigned 4-bit format symmetric.
SYMMETRIC_ZERO_POINT = 8
#: Widest block: its int32 sums stay exact (4096 * 127 * 127 < 2**31).
MAX_BLOCK = 4096
#: Largest activation and 8-bit weight code: symmetric int8, -128 left unused.
INT8_MAX = 127


@dataclass(frozen=True)
class WeightFormat:
    """One kind of quantised weights: its bits, whether it has zero points per block.

    ``name`` is the short name kernel names and tables use (``q4s``).
    """

    name: str
    bits: int
    symmetric: bool

    @property
    def code(self) -> int:
        """The C enum value (``AT_Q4S`` ...): the index in :data:`WEIGHTS`."""
        return KINDS.index(self.name)

    @property
    def sub_bytes(self) -> int:
        """Bytes of one panel's sub-block: SUB rows x PANEL columns of ``bits``."""
        return SUB * PANEL * self.bits // 8

    @property
    def zero_points(self) -> bool:
        """Whether kernels read a zero point per block and column (the asymmetric 4-bit kind)."""
        return not self.symmetric


#: The kinds of weights, in the order of the C enum (AT_Q4S, AT_Q4A, AT_Q8).
WEIGHTS = (
    WeightFormat("q4s", 4, True),
    WeightFormat("q4a", 4, False),
    WeightFormat("q8", 8, True),
)
KINDS = tuple(w.name for w in WEIGHTS)
FORMATS = {w.name: w for w in WEIGHTS}
#: The one activation format (KleidiAI's spelling): signed int8 codes per row and block
#: of K with an f32 scale, and the block's code sum (for the zero points).
ACTIVATIONS = "qsi8d32"


def weight_format(kind: str) -> WeightFormat:
    """The format named ``kind``; ValueError for an unknown one."""
    try:
        return FORMATS[kind]
    except KeyError:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}") from None


def c_constants() -> dict[str, int]:
    """The C names and values of the formats (at_qkernel.h)."""
    out = {f"AT_{w.name.upper()}": w.code for w in WEIGHTS}
    out["AT_QKINDS"] = len(WEIGHTS)
    out.update(AT_QPANEL=PANEL, AT_QSUB=SUB, AT_QPAD_COLUMNS=PAD_COLUMNS,
               AT_QSYMMETRIC_ZERO_POINT=SYMMETRIC_ZERO_POINT, AT_QMAX_BLOCK=MAX_BLOCK)
    out.update({f"AT_QSUB_BYTES_{bits}": SUB * PANEL * bits // 8 for bits in sorted({w.bits for w in WEIGHTS})})
    return out


BEGIN = "/* BEGIN autotune.qformat.emit_c */"
END = "/* END autotune.qformat.emit_c */"


def emit_c() -> str:
    """The block of ``#define`` lines at_qkernel.h carries, with its markers."""
    return "\n".join([BEGIN, *(f"#define {name} {value}" for name, value in c_constants().items()), END])


if __name__ == "__main__":
    print(emit_c())
