"""The quantised formats are declared once (autotune.qformat) and C and the packer agree with it."""

from __future__ import annotations

import re

import numpy as np

from autotune import host, qformat, quant
from autotune.home import kernels_src


def test_the_header_carries_the_declaration():
    text = (kernels_src() / "runtime" / "at_qkernel.h").read_text()
    start, end = text.find(qformat.BEGIN), text.find(qformat.END)
    assert 0 <= start < end, "at_qkernel.h lost its autotune.qformat block"
    assert text[start:end + len(qformat.END)] == qformat.emit_c(), \
        "at_qkernel.h differs from autotune.qformat: paste `python -m autotune.qformat` between its markers"


def test_no_unit_spells_a_format_number_of_its_own():
    runtime = kernels_src() / "runtime"
    for path in (runtime / "qgemm.c", runtime / "at_qkernel.h"):
        body = path.read_text().replace(qformat.emit_c(), "")
        assert not re.search(r"#define\s+(Q?SUB|Q?PANEL|AT_QPAD_COLUMNS|AT_Q4S|AT_Q8)\b", body), path.name


def test_the_packer_lays_out_what_the_formats_say():
    rng = np.random.default_rng(3)
    W = rng.standard_normal((96, 13)).astype(np.float32)
    for fmt in qformat.WEIGHTS:
        w = quant.quantize_weights(W, fmt.bits, 32, fmt.symmetric)
        packed = quant.pack_panels(w)
        panels = -(-13 // qformat.PAD_COLUMNS) * qformat.PAD_COLUMNS // qformat.PANEL
        assert packed.codes.shape[0] == panels
        assert packed.codes[0].size == (96 // qformat.SUB) * fmt.sub_bytes, fmt.name
        assert (packed.zeros is not None) == fmt.zero_points, fmt.name


def test_kernel_features_are_host_names():
    """features.c tests the names autotune.host detects: one vocabulary, no bridge tables."""
    known = set(host.ARM_HWCAP_BITS.values()) | set(host.ARM_HWCAP2_BITS.values()) | \
        set(host.GEMM_FEATURES_AVX512) | set(host.GEMM_FEATURES_OTHER)
    tested = set(re.findall(r'IS\("([a-z0-9_]+)"\)', (kernels_src() / "runtime" / "features.c").read_text()))
    assert tested and tested <= known, sorted(tested - known)
