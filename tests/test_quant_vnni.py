"""The VNNI quantised kernels (vpdpbusd: AVX-VNNI on ymm, AVX-512 VNNI with AVX512VL).

This host and QEMU's TCG (which reports "TCG doesn't support requested feature:
avx-vnni" and raises SIGILL) cannot execute vpdpbusd, so three checks share the work:
the generated kernels with vpdpbusd defined in exact AVX2 arithmetic run through
qgemm.c against the reference (their layout, sums and scaling); the real source
compiles to vpdpbusd in the right encoding; and on a CPU that has the feature,
the real kernels run the same cases (skipped elsewhere, naming the feature).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest

from autotune import build, host, qsuite, toolchain
from autotune.families import x86
from autotune.qformat import KINDS

from .isa import requires_isa
from .qlib import assert_same_bits_on_threads, assert_within_bound, validation_library

pytestmark = requires_isa("avx2")

TILES = {"avxvnni": ((1, 8), (1, 32), (2, 16), (4, 8)), "avx512vnni": ((1, 16), (2, 32), (6, 16), (8, 8))}
FORMS = [x86.qkernel(kind, isa, mr, nr) for isa, tiles in TILES.items() for kind in KINDS
         for mr, nr in tiles]


def _validate(lib, kernels) -> None:
    for k in kernels:
        assert_within_bound(lib, k, qsuite._cases(k.kind))


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return validation_library(tmp_path_factory.mktemp("vnni-emulated"), FORMS, emulate=True)


def test_emulated_vnni_kernels_match_the_reference(emulated):
    _validate(emulated, FORMS)


def test_emulated_vnni_kernels_on_threads_give_one_threads_bits(emulated):
    assert_same_bits_on_threads(emulated, lambda kind: x86.qkernel(kind, "avx512vnni", 6, 16).name, block=32)


def test_real_vnni_kernels_compile_to_vpdpbusd(tmp_path):
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump (binutils) to read the object")
    target = toolchain.target_for("avx2", host.detect())
    obj = build.compile_qkernels(target, FORMS, tmp_path)
    assert obj.ok, obj.error
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(obj.path)], capture_output=True, text=True,
                          check=True).stdout
    functions = {block.split(">:")[0].rsplit("<", 1)[-1]: block for block in text.split("\n\n") if ">:" in block}
    for k in FORMS:
        body = functions[k.name]
        dots = [line for line in body.splitlines() if "vpdpbusd" in line]
        assert dots, k.name
        # AVX-VNNI is the VEX form (objdump marks it {vex}); AVX-512 VNNI the EVEX one, on ymm
        assert all(("{vex}" in line) == (k.isa == "avxvnni") for line in dots), k.name
        assert "zmm" not in body, k.name
        assert "vpmaddubsw" not in body, k.name  # no int16 step left


@pytest.mark.parametrize("isa", sorted(TILES))
def test_real_vnni_kernels_on_a_cpu_that_has_them(tmp_path, isa):
    missing = [f for f in x86.QUANT_FEATURES[isa] if f not in host.detect().features]
    if missing:
        cap = os.environ.get(host.ISA_CAP_VARIABLE)
        pytest.skip(f"needs {', '.join(missing)} ({isa}), which this CPU does not have"
                    + (f" under {host.ISA_CAP_VARIABLE}={cap}" if cap else ""))
    kernels = [k for k in FORMS if k.isa == isa]
    _validate(validation_library(tmp_path, kernels, emulate=False), kernels)


def test_install_builds_only_the_isas_the_capped_host_has():
    assert x86.quant_isas(["avx2", "fma"]) == ("avx2",)
    assert x86.quant_isas(["avx2", "fma", "avx_vnni"]) == ("avx2", "avxvnni")
    full = ["avx2", "fma", "avx_vnni", "avx512f", "avx512vl", "avx512bw", "avx512_vnni", "amx_tile", "amx_int8"]
    assert x86.quant_isas(full) == x86.QUANT_ISAS
    # AUTOTUNE_ISA=avx2 hides the avx512 features, so install leaves the EVEX kernels out
    capped = host.apply_isa_cap(dataclasses.replace(host.detect(), features=tuple(full)), "avx2")
    assert "avx512vnni" not in x86.quant_isas(capped.features)
    assert set(x86.qkernel("q4s", "avx512vnni", 2, 16).features) >= {"avx512_vnni", "avx512vl"}
