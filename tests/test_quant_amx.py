"""The AMX quantised kernels (tdpbssd on int8 tiles, autotune.codegen.quant_amx).

The CPUs this suite was written on have no AMX (and QEMU's TCG does not execute tile
instructions), so the checks share the work as the VNNI ones do: the generated kernels
with every tile instruction done by plain C on the configured shapes run through
qgemm.c against the reference (their B-tile packing, A-tile addressing, K steps and
block scaling, on odd shapes and adversarial scales); the real source compiles to
the tile instructions on the tiles the family's model assigns; on this CPU the real
kernels are refused and qgemm.c falls back to the others, and install leaves them out;
on a CPU that has AMX (and an OS that grants the tile state) they run the same cases.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from autotune import build, contract, host, quant, qsuite, toolchain
from autotune.codegen import quant_amx, quant_generator
from autotune.families import qkernel, x86
from autotune.qformat import KINDS
from autotune.runtime import qapi

from .isa import cpu_features, requires_isa
from .qlib import assert_same_bits_on_threads, assert_within_bound, validation_library

pytestmark = requires_isa("avx2")

ROOT = Path(__file__).resolve().parents[1]
BITS = {"q4s": (4, True), "q4a": (4, False), "q8": (8, True)}
#: Every tile configuration of the family, per kind: one C tile (1x16, 16x16), two side
#: by side (1x32 ... 16x32), four with two A tiles (32x32).
FORMS = x86.amx_family()
#: The AVX2 kernels a library holds beside them (the fallback where AMX cannot run).
AVX2 = [x86.qkernel(kind, "avx2", mr, nr) for kind in KINDS for mr, nr in ((4, 16), (1, 32))]


def _amx_missing() -> list[str]:
    return [f for f in x86.AMX_FEATURES if f not in host.detect().features]


def _require_amx() -> None:
    """Skip, naming what is missing, where the CPU itself has no AMX: the libraries these
    tests build hold the real kernels whatever AUTOTUNE_ISA caps (which limits what install
    builds), and the runtime asks the CPU, so under the cap they run here too."""
    missing = [f for f in x86.AMX_FEATURES if f not in cpu_features()]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (amx), which this CPU does not have")


def _fault(lib) -> str | None:
    fault = getattr(lib, quant_amx.FAULT_FUNCTION)
    fault.restype = ctypes.c_char_p
    text = fault()
    return text.decode() if text else None


def _odd_cases(kind: str):
    """Shapes around the tiles: M = 1, primes, just below and above 16 and 32 rows; N
    below, between and above whole C tiles; K not a multiple of the block; blocks of one
    sub-block (K steps of 32), two and four (steps of 64) and three (32 again)."""
    bits, symmetric = BITS[kind]
    rng = np.random.default_rng(23)
    out = []
    for m, k, n, block in ((1, 40, 1, 32), (2, 64, 17, 64), (15, 96, 16, 96), (16, 160, 33, 32),
                           (17, 130, 31, 64), (31, 256, 48, 128), (32, 70, 15, 32), (33, 200, 70, 96),
                           (47, 300, 45, 64), (65, 129, 64, 32)):
        A = rng.standard_normal((m, k)).astype(np.float32)
        W = rng.standard_normal((k, n)).astype(np.float32)
        W[:, ::3] *= np.float32(1e-30)  # tiny and huge scales side by side in one tile
        W[:, 1::5] *= np.float32(1e30)
        A[::2] *= np.float32(1e20)
        A[1::4] *= np.float32(1e-25)
        out.append((f"M={m} K={k} N={n} block={block}", A, quant.quantize_weights(W, bits, block, symmetric)))
    return out


def _validate(lib, kernels) -> None:
    for k in kernels:
        assert_within_bound(lib, k, qsuite._cases(k.kind) + _odd_cases(k.kind))


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return validation_library(tmp_path_factory.mktemp("amx-emulated"), FORMS, emulate=True)


def test_family_records_follow_the_tile_model():
    assert {k.isa for k in FORMS} == {"amx"} and {k.family for k in FORMS} == {"amx"}
    for k in FORMS:
        assert qkernel(k.name) == k and x86.qkernel(k.kind, "amx", k.mr, k.nr) == k
        assert set(k.features) == {"avx2", "fma", "avx512f", "avx512_vnni", "amx_tile", "amx_int8"} \
            <= set(host.GEMM_FEATURES_OTHER + host.GEMM_FEATURES_AVX512)
        assert sum(x86.amx_tiles(k.mr, k.nr)) <= x86.AMX_TILES and k.gemv == (k.mr == 1)
        assert 96 % k.mr == 0  # qgemm.c's PASS_ROWS: a pass is whole row tiles
    assert x86.amx_tiles(32, 32) == (4, 2, 2) and x86.amx_tiles(1, 16) == (1, 1, 1)
    for bad in ((16, 8), (3, 32), (64, 32), (16, 48), (12, 32)):
        with pytest.raises(ValueError):
            x86.qkernel("q4s", "amx", *bad)
    assert x86.quant_family("amx", quick=True) == [x86.amx_qkernel(kind, mr, 32) for kind in KINDS for mr in (1, 16)]
    with pytest.raises(ValueError, match="not AMX kernels"):
        quant_amx.generate([x86.qkernel("q4s", "avx2", 4, 16)])


def test_emulated_amx_kernels_match_the_reference(emulated):
    _validate(emulated, FORMS)
    assert _fault(emulated) is None


def test_the_librarys_choice_covers_rows_with_the_tile_then_the_gemv(tmp_path):
    """Registered AMX 16x32 then AMX 1x32 (install's order: block kernel, GEMV), the
    library's own choice takes both: whole 16-row groups, then one row at a time."""
    kernels = [x86.amx_qkernel(kind, mr, 32) for kind in KINDS for mr in (16, 1)]
    lib = validation_library(tmp_path, kernels, emulate=True)
    rng = np.random.default_rng(3)
    for kind, (bits, symmetric) in BITS.items():
        w = quant.quantize_weights(rng.standard_normal((100, 50)).astype(np.float32), bits, 32, symmetric)
        for m in (1, 16, 37):
            A = rng.standard_normal((m, 100)).astype(np.float32)
            problem = qsuite._check(qapi.call(lib, A, w, None, None), quant.reference_qmatmul(A, w),
                                    quant.scaling_error_bound(A, w).astype(np.float64))
            assert problem is None, f"{kind} M={m}: {problem}"
    assert _fault(lib) is None


def test_emulated_amx_kernels_on_threads_give_one_threads_bits(emulated):
    assert_same_bits_on_threads(emulated, lambda kind: x86.amx_qkernel(kind, 16, 32).name, block=64)


def test_the_emulation_refuses_tiles_that_do_not_multiply(tmp_path, monkeypatch):
    """The emulated tdpbssd checks shapes as the hardware does (#UD): a kernel that
    configured B with half its rows must be caught, not computed."""
    real = quant_amx.generate

    def broken(kernels, emulate=False):
        return real(kernels, emulate).replace("(uint8_t)(kbytes / 4)", "(uint8_t)(kbytes / 8)")

    monkeypatch.setattr(quant_amx, "generate", broken)
    k = x86.amx_qkernel("q8", 16, 16)
    lib = validation_library(tmp_path, [k], emulate=True)
    rng = np.random.default_rng(1)
    w = quant.quantize_weights(rng.standard_normal((64, 16)).astype(np.float32), 8, 32, True)
    A = rng.standard_normal((16, 64)).astype(np.float32)
    C = qapi.call(lib, A, w, None, None, k.name)
    assert _fault(lib) == "tdpbssd: tiles of shapes that do not multiply"
    assert qsuite._check(C, quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w)) is not None


def _functions(objdump: str, path) -> dict[str, str]:
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                          check=True).stdout
    return {block.split(">:")[0].rsplit("<", 1)[-1]: block for block in text.split("\n\n") if ">:" in block}


#: The compilers that build the unit: install's kernel compiler (clang where installed)
#: and gcc, whose tile intrinsics are asm statements the generator fences (AT_AMX_FENCE).
COMPILERS = list({os.path.realpath(shutil.which(c)): c
                  for c in ("gcc", "clang-19", "clang") if shutil.which(c)}.values())


@pytest.mark.parametrize("compiler", ["install"] + COMPILERS)
def test_real_amx_kernels_compile_to_tile_instructions(tmp_path, compiler):
    """``install``: the object install links (build.compile_qkernels: its kernel compiler
    and the avx2 target's flags); the others: the unit at -O2 by each compiler."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump (binutils) to read the object")
    if compiler == "install":
        built = build.compile_qkernels(toolchain.target_for("avx2", host.detect()), FORMS, tmp_path)
        assert built.ok, built.error
        obj = built.path
    else:
        source, obj = tmp_path / "amx.c", tmp_path / "amx.o"
        source.write_text(quant_amx.generate(FORMS))
        done = subprocess.run([compiler, "-O2", "-mavx2", "-mfma", "-c", str(source), "-o", str(obj)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    functions = _functions(objdump, obj)
    for k in FORMS:
        body = functions[k.name]
        for instruction in ("sttilecfg", "ldtilecfg", "tilezero", "tileloadd", "tdpbssd", "tilestored"):
            assert instruction in body, (compiler, k.name, instruction)
        assert "tilerelease" not in body, (compiler, k.name)  # the driver's, once a share is done
        # tdpbssd %tmm<B>,%tmm<A>,%tmm<C> (AT&T): exactly the model's C += A x B products
        c_tiles, a_tiles, b_tiles = x86.amx_tiles(k.mr, k.nr)
        products = set(re.findall(r"tdpbssd\s+%tmm(\d),%tmm(\d),%tmm(\d)", body))
        want = {(str(c_tiles + a_tiles + g), str(c_tiles + i), str(i * b_tiles + g))
                for i in range(a_tiles) for g in range(b_tiles)}
        assert products == want, (compiler, k.name, products)
        # the scaling step 16 columns an instruction; no VNNI products beside the tiles'
        assert re.search(r"vfmadd\w*ps\s.*%zmm", body) and "vpdpbusd" not in body, (compiler, k.name)


def test_real_amx_kernels_are_refused_where_the_cpu_cannot_run_them(tmp_path):
    """Real AMX kernels registered first, AVX2 ones after: where the CPU has no AMX or
    the OS refuses the tile state, qgemm.c never runs the AMX entries (a forced one is
    refused, the library's choice takes the AVX2 kernels) and nothing dies of SIGILL."""
    if set(x86.AMX_FEATURES) <= cpu_features():
        pytest.skip(f"this CPU has AMX, which the runtime asks for whatever {host.ISA_CAP_VARIABLE} caps: "
                    "the real kernels run in test_real_amx_kernels_on_a_cpu_that_has_them")
    amx = [x86.amx_qkernel(kind, mr, 32) for kind in KINDS for mr in (16, 1)]
    lib = validation_library(tmp_path, amx + AVX2, emulate=False)
    rng = np.random.default_rng(9)
    A = rng.standard_normal((37, 200)).astype(np.float32)
    for kind, (bits, symmetric) in BITS.items():
        w = quant.quantize_weights(rng.standard_normal((200, 70)).astype(np.float32), bits, 32, symmetric)
        with pytest.raises(quant.QuantizationError, match="no runnable kernel"):
            qapi.call(lib, A, w, None, None, x86.amx_qkernel(kind, 16, 32).name)
        problem = qsuite._check(qapi.call(lib, A, w, None, None), quant.reference_qmatmul(A, w),
                                quant.scaling_error_bound(A, w).astype(np.float64))
        assert problem is None, f"{kind}: {problem}"
    # install's validation subprocess gives such a kernel the verdict "not run", not a crash
    name = amx[0].name
    done = subprocess.run([sys.executable, "-m", "autotune.qsuite", "validate", lib._name, name],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = [e for e in map(json.loads, done.stdout.splitlines()) if e.get("event") == "result"]
    assert result["kernel"] == name and result["status"].startswith("not run at "), result


def test_real_amx_kernels_on_a_cpu_that_has_them(tmp_path):
    _require_amx()
    lib = validation_library(tmp_path, FORMS, emulate=False)
    try:
        qapi.call(lib, np.ones((16, 32), np.float32), quant.quantize_weights(np.ones((32, 32), np.float32)),
                  None, None, x86.amx_qkernel("q4s", 16, 32).name)
    except quant.QuantizationError:
        pytest.skip("the CPU has AMX but the OS refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM)")
    _validate(lib, FORMS)
    # The tile state is granted to the process: the pool's workers run tiles too, and
    # every thread count gives one thread's bits.
    assert_same_bits_on_threads(lib, lambda kind: x86.amx_qkernel(kind, 16, 32).name, block=64)
    assert_same_bits_on_threads(lib, lambda kind: x86.amx_qkernel(kind, 32, 32).name, block=32)


def _tile_state_in_use(tmp_path) -> Callable[[], int]:
    """XINUSE's tile bits (XGETBV with ECX = 1: bit 17 TILECFG, bit 18 TILEDATA) of the calling thread."""
    source, lib = tmp_path / "xinuse.c", tmp_path / "libxinuse.so"
    source.write_text("#include <stdint.h>\nint at_tiles_in_use(void) { uint32_t lo, hi;\n"
                      "    __asm__ volatile(\"xgetbv\" : \"=a\"(lo), \"=d\"(hi) : \"c\"(1));\n"
                      "    return (int)((lo >> 17) & 3); }\n")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(source), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib)).at_tiles_in_use


def test_no_thread_keeps_the_tile_state_after_a_product(tmp_path):
    """The kernels keep their configuration loaded from call to call (one ldtilecfg per
    shape, not per call) and qgemm.c releases the tiles when a share is done: after a
    product the calling thread holds no tile state, on one thread and on two."""
    _require_amx()
    lib = validation_library(tmp_path, [x86.amx_qkernel("q4s", 16, 32), x86.amx_qkernel("q4s", 1, 32)],
                             emulate=False)
    in_use = _tile_state_in_use(tmp_path)
    rng = np.random.default_rng(5)
    w = quant.quantize_weights(rng.standard_normal((512, 96)).astype(np.float32), 4, 32, True)
    A = rng.standard_normal((40, 512)).astype(np.float32)
    for threads in (1, 2):
        lib.at_set_num_threads(threads)
        C = qapi.call(lib, A, w, None, None)
        assert in_use() == 0, f"{threads} thread(s): the tile state is still in use"
        assert qsuite._check(C, quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w)) is None
    lib.at_set_num_threads(0)


def test_install_never_builds_amx_kernels_on_a_cpu_without_them(tmp_path):
    """install builds, validates and selects only the ISAs the (capped) host reports, so
    a kernel it keeps has run and validated on the installing CPU: here no AMX kernel."""
    base = ["avx2", "fma", "avx512f", "avx512_vnni"]
    assert x86.AMX_ISA not in x86.quant_isas(base)
    assert x86.AMX_ISA in x86.quant_isas(base + ["amx_tile", "amx_int8"])
    assert x86.AMX_ISA not in x86.quant_isas(base + ["amx_tile"])  # tiles without the int8 products
    assert x86.AMX_ISA not in x86.quant_isas(["avx2", "fma", "amx_tile", "amx_int8"])  # the scaling's zmm
    capped = host.apply_isa_cap(dataclasses.replace(host.detect(), features=(*base, "amx_tile", "amx_int8")),
                                "avx2")
    assert x86.AMX_ISA not in x86.quant_isas(capped.features)
    target = toolchain.target_for("avx2", host.detect())
    if _amx_missing():
        assert x86.AMX_ISA not in qsuite.kernel_isas(target)
        assert qsuite.run_stage(target, tmp_path, patterns=["at_q*_amx_*"]) is None  # nothing built or run


def test_one_object_holds_kernels_of_both_generators(tmp_path):
    """An x86 library's selection may mix AVX2 and AMX kernels: compile_qkernels writes
    each generator's unit into one source, and the registry lists them in the given order."""
    mixed = [AVX2[0], x86.amx_qkernel("q4s", 16, 32)]
    assert [quant_generator(k).__name__ for k in mixed] == ["autotune.codegen.quant_x86", "autotune.codegen.quant_amx"]
    lib = validation_library(tmp_path, mixed, emulate=True)
    assert qapi.kernel_names(lib) == [k.name for k in mixed]
    assert ('"at_q4s_amx_16x32", 0, 16, 32, at_q4s_amx_16x32, "amx_int8 amx_tile avx2 avx512_vnni avx512f fma"'
            in contract.qregistry(mixed))


def test_install_selects_smaller_amx_tiles_for_the_rows_a_block_leaves():
    """select(): an AMX block kernel brings the fastest AMX tile of each smaller mr (largest
    first, before the GEMV form) that ran M = 16 faster than the GEMV did; other ISAs keep
    one block kernel and one GEMV per kind."""
    seconds = {}
    for kind in KINDS:
        for mr, nr, s in ((32, 32, 3.0), (16, 32, 1.0), (16, 16, 2.0), (8, 32, 5.0), (4, 32, 4.0), (2, 32, 4.4),
                          (1, 32, 9.0)):
            seconds[x86.amx_qkernel(kind, mr, nr).name] = {1: s, 16: s, 64: s}
        for mr, nr, s in ((4, 16, 6.0), (1, 32, 0.5)):
            seconds[x86.qkernel(kind, "avx2", mr, nr).name] = {1: s, 16: 9 * s if mr == 1 else s, 64: s}
    # the GEMV takes 4.5 at M = 16: the 4- and 2-row tiles beat it there, the 8-row one does not
    want = [[f"at_{kind}_amx_16x32", f"at_{kind}_amx_4x32", f"at_{kind}_amx_2x32", f"at_{kind}_avx2_1x32"]
            for kind in KINDS]
    assert qsuite.select(seconds) == tuple(n for names in want for n in names)
    # a GEMV never timed at M = 16 is priced at 16 single rows (8.0): every smaller tile joins
    no_16 = {n: ({1: s[1]} if "avx2_1x32" in n else s) for n, s in seconds.items()}
    assert qsuite.select(no_16)[:4] == ("at_q4s_amx_16x32", "at_q4s_amx_8x32", "at_q4s_amx_4x32",
                                       "at_q4s_amx_2x32")
    avx2_only = {n: s for n, s in seconds.items() if "_avx2_" in n}
    assert qsuite.select(avx2_only) == tuple(f"at_{kind}_avx2_{t}" for kind in KINDS for t in ("4x16", "1x32"))


def test_a_tile_taller_than_the_smaller_m_is_judged_with_the_rows_it_leaves():
    """The 32-row AMX tile is timed at M = 64 only (at M = 16 qmatmul gives every row to
    the tails or the GEMV form).  It is chosen where its M = 64 time and the 16 rows it
    leaves (the 16-row tile's time, faster than the GEMV's) beat the 16-row tile at both:
    562 against 611 us at M = 64 on a Xeon VM.  The tails then follow as before."""
    seconds = {}
    for kind in KINDS:
        seconds[x86.amx_qkernel(kind, 32, 32).name] = {64: 562.0}
        for mr, s16, s64 in ((16, 176.0, 611.0), (8, 241.0, 861.0), (4, 381.0, 1400.0), (2, 617.0, 2417.0)):
            seconds[x86.amx_qkernel(kind, mr, 32).name] = {16: s16, 64: s64}
        seconds[x86.amx_qkernel(kind, 1, 32).name] = {1: 109.0, 16: 1111.0}
    want = [[f"at_{kind}_amx_32x32", f"at_{kind}_amx_16x32", f"at_{kind}_amx_8x32", f"at_{kind}_amx_4x32",
             f"at_{kind}_amx_2x32", f"at_{kind}_amx_1x32"] for kind in KINDS]
    assert qsuite.select(seconds) == tuple(n for names in want for n in names)
    # Slower at M = 64 than the 16-row tile: the 16-row tile stays the block kernel.
    slow = {n: ({64: 650.0} if "_32x32" in n else s) for n, s in seconds.items()}
    assert qsuite.select(slow)[0] == "at_q4s_amx_16x32" and not any("_32x32" in n for n in qsuite.select(slow))
    # Without smaller tiles its 16 rows go to the GEMV form, a row at a time.
    alone = {n: s for n, s in seconds.items() if "_32x32" in n or "_1x32" in n}
    assert qsuite.select(alone) == tuple(f"at_{kind}_amx_{t}" for kind in KINDS for t in ("32x32", "1x32"))


def test_the_librarys_choice_gives_the_rows_left_to_smaller_tiles(tmp_path, monkeypatch):
    """qgemm.c's tail tiles: with 16x32, 4x32 and 1x32 registered, M = 21 is 16 rows of the
    first, 4 of the second and 1 of the GEMV.  The 4x32 kernel is built with its scales
    doubled, so exactly the rows it covered show where the driver sent them."""
    real = quant_amx._kernel

    def doubled_4x32(k, emulate):
        text = real(k, emulate)
        return text.replace("at_z_mul(sar, ", "at_z_mul(at_z_fmadd(sar, at_z_set1_ps(1.0f), sar), ") \
            if k.mr == 4 else text

    monkeypatch.setattr(quant_amx, "_kernel", doubled_4x32)
    kernels = [x86.amx_qkernel("q4a", mr, 32) for mr in (16, 4, 1)]
    lib = validation_library(tmp_path, kernels, emulate=True)
    rng = np.random.default_rng(4)
    w = quant.quantize_weights(rng.standard_normal((96, 40)).astype(np.float32), 4, 32, False)
    A = rng.standard_normal((21, 96)).astype(np.float32)
    want, bound = quant.reference_qmatmul(A, w), quant.scaling_error_bound(A, w).astype(np.float64)
    C = qapi.call(lib, A, w, None, None)
    assert qsuite._check(np.delete(C, range(16, 20), 0), np.delete(want, range(16, 20), 0),
                         np.delete(bound, range(16, 20), 0)) is None
    assert qsuite._check(C[16:20] / 2, want[16:20], bound[16:20]) is None
    # a kernel forced by name covers its whole groups only (the rest is the portable code's)
    forced = qapi.call(lib, A, w, None, None, kernels[0].name)
    assert qsuite._check(forced, want, bound) is None
    assert qsuite._check(qapi.call(lib, A[:16], w, None, None), want[:16], bound[:16]) is None
