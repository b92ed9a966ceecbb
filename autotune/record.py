"""A program's own shapes: what AUTOTUNE_RECORD wrote, read back for `install --shapes`.

Run a program with ``AUTOTUNE_RECORD=shapes.jsonl`` and the library appends a
line for every plan it builds (``kernels_src/runtime/record.c``): Python's
``autotune.gemm`` and ``matmul``, the CBLAS and Fortran entry points alike.
``autotune install --shapes shapes.jsonl`` then adds the most frequent of them
to the tuner's suite, so the parameters are tuned for the workload that runs.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from .params import DTYPES
from .suite import SuiteShape

#: Recorded shapes the suite takes at most (the most frequent first): each one
#: costs every trial its time.
MAX_SHAPES = 16
#: 2MNK from which a recorded shape joins the packed path's ("large") study.
LARGE_FLOPS = 2.0 * 160**3


class RecordError(ValueError):
    """The file is not a shape record (the message says which line)."""


def read_shapes(path: Path, limit: int = MAX_SHAPES) -> tuple[SuiteShape, ...]:
    """The ``limit`` most frequent distinct shapes of the record at ``path``.

    Lines cut short (a program killed while writing) are skipped; a file with no
    shape at all, or lines of another kind, is an error naming the first bad line.
    """
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise RecordError(f"cannot read the shape record {path}: {exc.strerror or exc}") from None
    counts: Counter[SuiteShape] = Counter()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            shape = _shape(entry)
        except (ValueError, KeyError, TypeError):
            if number == len(lines):
                continue  # the last line of a program that was killed mid-write
            raise RecordError(f"{path}, line {number}: not a shape recorded by AUTOTUNE_RECORD") from None
        if shape is not None:
            counts[shape] += 1
    if not counts:
        raise RecordError(f"{path} holds no shape: run the program with AUTOTUNE_RECORD={path} first")
    return tuple(shape for shape, _ in counts.most_common(limit))


def _shape(entry: dict) -> SuiteShape | None:
    dtype, trans = entry["dtype"], entry["trans"]
    m, n, k, threads = int(entry["m"]), int(entry["n"]), int(entry["k"]), int(entry["threads"])
    if dtype not in DTYPES or trans not in ("nn", "nt", "tn", "tt") or min(m, n, k) < 0:
        raise ValueError(entry)
    if 0 in (m, n, k):
        return None  # nothing to plan: only C's scaling, which no parameter changes
    kind = "large" if 2.0 * m * n * k >= LARGE_FLOPS else "recorded"
    # One thread stays one thread; any other count is the library's default on this host.
    return SuiteShape(kind, dtype, trans, m, n, k, threads=1 if threads == 1 else 0)
