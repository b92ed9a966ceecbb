"""The SME2 quantised kernels (autotune/codegen/quant_sme2.py: 4- and 8-bit weights) and their weight format
(autotune.quant.pack_sme2), validated under QEMU at every SVL the Arm library supports.

The format test is pure numpy.  The ``arm`` tests cross-build tests/qsme2_driver/
with the generated kernels once (they are SVL-agnostic), and run it under QEMU with
the SME2 CPU model at each SVL: A quantised and packed in C, the block kernel
(1VL x 4VL ``smopa``) and the GEMV (``sdot``) over odd shapes and adversarial
scales, each C compared with :func:`autotune.quant.reference_qmatmul` within
:func:`autotune.quant.scaling_error_bound`, with ldc past N (those columns must come
back untouched) and C's old values continued (``load_c``) or never read.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune import quant
from autotune.codegen import quant_sme2
from autotune.home import kernels_src
from autotune.host import HostInfo
from autotune.toolchain import ToolchainError, arm_target

X86 = HostInfo(arch="x86_64", os="linux", cpu="AMD EPYC", features=())
DRIVER = Path(__file__).resolve().parent / "qsme2_driver" / "qsme2_driver.c"
BLOCK, GEMV = 0, 1


# --------------------------------------------------------------------------- the format


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("svl", quant.SME2_SVLS)
def test_pack_sme2_element_by_element(svl, symmetric):
    rng = np.random.default_rng(svl)
    k, n = 70, 37
    w = quant.quantize_weights(rng.standard_normal((k, n)) + (0 if symmetric else 0.7), block=32, symmetric=symmetric)
    packed = quant.pack_sme2(w, svl)
    assert packed.symmetric == symmetric
    vl = svl // 32
    width = 4 * vl
    assert packed.panel_columns == width and packed.panels == -(-n // width)
    kp = w.padded_k
    codes = packed.codes.reshape(packed.panels, kp // 4, 2 * width)
    nibble = np.empty((n, kp), np.int64)
    nibble[:, 0::2], nibble[:, 1::2] = w.codes & 15, w.codes >> 4
    for p in range(packed.panels):
        for c in range(width):
            col = p * width + c
            for k4 in range(kp // 4):
                for t in range(4):
                    index = 4 * c + t  # nibble index within the step, what luti4 reads
                    byte = codes[p, k4, index // 2]
                    got = (byte >> 4) if index % 2 else (byte & 15)
                    want = nibble[col, 4 * k4 + t] if col < n else quant.SYMMETRIC_ZERO_POINT
                    assert got == want, (p, c, k4, t)
            for b in range(w.blocks):
                if symmetric:
                    assert packed.scales[p, b, c] == (w.scales[col, b] if col < n else 0)
                else:  # scales, then zero points
                    assert packed.scales[p, b, 0, c] == (w.scales[col, b] if col < n else 0)
                    assert packed.scales[p, b, 1, c] == (w.zero_points[col, b] if col < n else 8)


@pytest.mark.parametrize("svl", quant.SME2_SVLS)
def test_pack_sme2_8bit_element_by_element(svl):
    rng = np.random.default_rng(svl + 8)
    k, n = 70, 37
    w = quant.quantize_weights(rng.standard_normal((k, n)), bits=8, block=32)
    packed = quant.pack_sme2(w, svl)
    assert packed.bits == 8 and packed.symmetric
    width = 4 * (svl // 32)
    kp = w.padded_k
    assert packed.panel_columns == width and packed.panels == -(-n // width)
    assert packed.codes.shape == (packed.panels, kp // 4 * 4 * width) and packed.scales.shape == (packed.panels, width)
    codes = packed.codes.view(np.int8).reshape(packed.panels, kp // 4, width, 4)
    for p in range(packed.panels):
        for c in range(width):
            col = p * width + c
            for k4 in range(kp // 4):
                for t in range(4):  # byte 4c + t of the step: what smopa/sdot take for column c
                    want = w.codes[col, 4 * k4 + t] if col < n else 0
                    assert codes[p, k4, c, t] == want, (p, c, k4, t)
            assert packed.scales[p, c] == (w.scales[col, 0] if col < n else 0)


def test_pack_sme2_refuses_an_unknown_svl():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((40, 9))
    for bits in (4, 8):
        with pytest.raises(quant.QuantizationError, match="svl_bits"):
            quant.pack_sme2(quant.quantize_weights(W, bits=bits), 384)


def test_kernel_text_names_the_instructions():
    text = quant_sme2.kernels_source().text
    for needle in ("luti4 {z4.b-z5.b}, zt0, z0[0]", "smopa za3.s", "sdot za.s[w8, 0, vgx4]",
                   "mova {z28.b-z31.b}, za0h.b[w12, 0:3]", "scvtf {z28.s-z31.s}", "ldr zt0",
                   "AT_FUNC_BEGIN(at_q4s_sme2_1vlx4vl_s)", "AT_ENTRY(at_q4s_sme2_1x4vl)",
                   "AT_ENTRY(at_q8_sme2_1vlx4vl)", "smopa za3.s, p0/m, p0/m, z23.b, z15.b",
                   "sdot za.s[w8, 0, vgx4], {z16.b-z19.b}, z9.b[3]"):
        assert needle in text, needle
    # The 8-bit kernels expand nothing: no luti4 and no ZT0 between their entries and their end.
    q8 = text[text.index("AT_FUNC_BEGIN(at_q8_sme2_1vlx4vl_s)"):text.index("AT_FUNC_END(at_q8_sme2_1x4vl_s)")]
    assert "luti4" not in q8 and "zt0" not in q8


def test_qicount_operands_quantise_exactly(tmp_path):
    """benchmarks/arm_icount --quantised checks both libraries' C for equality with the
    reference on SME2: its operands must quantise exactly, and KleidiAI's nxk input must
    hold the same codes."""
    from benchmarks import arm_icount

    m, k, n = 3, 64, 40
    A, codes = arm_icount.exact_operands(m, n, k)
    qa, sa = quant.quantize_activations(A)
    assert (sa == 1).all() and (qa == A).all()
    path = tmp_path / "data.bin"
    arm_icount.sme2_quant_data(path, m, n, k, 512)
    raw = np.fromfile(path, np.uint8)
    header = raw[:72].view(np.int64)
    assert (header[0], header[1]) == (4, 32)  # bits, A's block
    ours_codes, ours_scales, native = header[6], header[7], header[8]
    start = 72 + 4 * m * k + ours_codes + 4 * ours_scales
    blocks = raw[start:start + native].reshape(n, k // 32, 18)
    assert (blocks[:, :, :2].copy().view(np.float16) == 1).all()
    nibbles = blocks[:, :, 2:]
    low, high = (nibbles & 15).astype(int) - 8, (nibbles >> 4).astype(int) - 8
    assert (np.concatenate([low, high], axis=2).reshape(n, k) == codes.T).all()


@pytest.mark.parametrize("block", [32, 64])
def test_qicount_8bit_operands_quantise_exactly(tmp_path, block):
    """The 8-bit operands: sa = 1 for any block of A, W's column scales 1, KleidiAI's nxk
    input the same int8 codes followed by those scales."""
    from benchmarks import arm_icount

    m, k, n = 3, 128, 40
    A, codes = arm_icount.exact_operands(m, n, k, bits=8)
    qa, sa = quant.quantize_activations(A, block)
    assert (sa == 1).all() and (qa == A).all()
    path = tmp_path / "data.bin"
    arm_icount.sme2_quant_data(path, m, n, k, 512, bits=8, block=block)
    raw = np.fromfile(path, np.uint8)
    header = raw[:72].view(np.int64)
    assert (header[0], header[1]) == (8, block)
    start = 72 + 4 * m * k + header[6] + 4 * header[7]
    native = raw[start:start + header[8]]
    assert (native[:n * k].view(np.int8).reshape(n, k) == codes.T).all()
    assert (native[n * k:].view(np.float32) == 1).all()


# --------------------------------------------------------------------------- under QEMU


def _target(svl: int):
    try:
        return arm_target("sme2", X86, svl_bits=svl)
    except ToolchainError as exc:
        pytest.skip(f"needs the Arm cross compiler and QEMU >= 10.1 (scripts/setup.sh --test): {exc}")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    """The driver with the kernels, built once: the kernels read the SVL at run time."""
    target = _target(512)
    work = tmp_path_factory.mktemp("qsme2")
    for source in quant_sme2.generate():
        (work / source.filename).write_text(source.text)
    objects = []
    for name in ("at_qsme2_kernels.S", "at_qsme2_quant.c", DRIVER):
        source = work / name if isinstance(name, str) else name
        obj = work / (Path(name).stem + ".o")
        subprocess.run([*target.cc, *target.cflags, "-Wall", "-Werror", "-I", str(work),
                        "-I", str(kernels_src() / "arm"), "-c", str(source), "-o", str(obj)], check=True)
        objects.append(str(obj))
    exe = work / "qsme2_driver"
    subprocess.run([*target.cc, *target.cflags, *target.ldflags, *objects, "-lm", "-o", str(exe)], check=True)
    return exe


def _case(rng, m: int, k: int, n: int, svl: int, form: int, block: int = 32, scales: str = "normal",
          nan_a: bool = False, load_c: bool = False, symmetric: bool = True, bits: int = 4):
    """A case: (w, A, C0, header, payload)."""
    W = rng.standard_normal((k, n)).astype(np.float32)
    A = rng.standard_normal((m, k)).astype(np.float32)
    if scales == "zero_block":
        if bits == 8:
            W[:, ::3] = 0  # 8 bits have one scale per column: every third column's is 0
        else:
            W[:min(block, k)] = 0  # the first block of every column: scale 0
    if not symmetric:
        W += rng.uniform(-1, 2, n).astype(np.float32)  # off-centre columns: zero points away from 8
    w = quant.quantize_weights(W, bits=bits, block=block, symmetric=symmetric)
    if scales in ("subnormal", "large", "huge"):
        # subnormal products sa * sw; terms near float32's top; terms beyond it.
        factor, a_factor = {"subnormal": (1e-41, 1e-3), "large": (1e30, 1e3), "huge": (3e37, 1e3)}[scales]
        w = quant.QuantizedWeights(w.codes, (w.scales * np.float32(factor)).astype(np.float32), w.zero_points,
                                   w.k, bits, w.block)
        A *= np.float32(a_factor)
    if scales == "tiny_a":
        A *= np.float32(1e-41)  # subnormal A and sa: a / sa may pass 127 and must be clipped
    if scales == "ties":
        # sa = 1 exactly and halves: a / sa lands on .5, where rounding must go to even
        A = (rng.integers(-254, 255, (m, k)) / 2).astype(np.float32)
        A[:, ::block] = 127
    if nan_a:
        A[m // 2, k // 3] = np.nan
        A[m - 1, k - 1] = -np.inf  # in the last block, past the whole ones when K is not a multiple
    packed = quant.pack_sme2(w, svl)
    ldc = n + 3
    C0 = rng.standard_normal((m, ldc)).astype(np.float32) if load_c else np.full((m, ldc), np.nan, np.float32)
    C0[:, n:] = 12345.0  # past N: must come back as it was
    kind = 2 if bits == 8 else 0 if symmetric else 1
    header = np.array([svl // 32, form + 2 * kind, m, k, n, block, w.blocks, ldc, int(load_c),
                       packed.codes.size,
                       packed.scales.size], np.int64)
    payload = b"".join(x.tobytes() for x in (header, A, packed.codes, packed.scales, C0))
    return w, A, C0, payload


def _check(w, A, C0, got, n, load_c):
    m = A.shape[0]
    got = got.reshape(m, -1)
    assert (got[:, n:] == 12345.0).all(), "the kernel wrote past column N"
    want = quant.reference_qmatmul(A, w)
    bound = quant.scaling_error_bound(A, w)
    if load_c:
        want = want + C0[:, :n]  # the kernel continues C's sums: bound the extra addition too
        bound = bound + 2 * np.finfo(np.float32).eps * (np.abs(want) + np.abs(C0[:, :n]))
    c = got[:, :n]
    # Where the terms pass float32's range the bound is Inf: the reference may hold NaN
    # (Inf - Inf) where one FMA, whose product is not rounded to Inf, gives Inf.
    unbounded = np.isinf(bound)
    nan = np.isnan(want)
    differ = (np.isnan(c) != nan) & ~unbounded
    assert not differ.any(), f"NaN elements differ: {np.argwhere(differ)[:3]}"
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(c.astype(np.float64) - want)
        ok = (err <= bound) | (nan & np.isnan(c)) | (c == want) | unbounded
    assert ok.all(), f"{(~ok).sum()} elements off, worst {np.nanmax(np.where(ok, 0, err))}"


def _run_cases(driver: Path, svl: int, cases, tmp_path: Path) -> None:
    target = _target(svl)
    argv, made = [], []
    for i, (m, k, n, form, kw) in enumerate(cases):
        rng = np.random.default_rng(1000 * svl + i)
        w, A, C0, payload = _case(rng, m, k, n, svl, form, **kw)
        path, out = tmp_path / f"case{i}.bin", tmp_path / f"out{i}.bin"
        path.write_bytes(payload)
        argv += [str(path), str(out)]
        made.append((w, A, C0, out, n, kw.get("load_c", False), (m, k, n, form, kw)))
    done = subprocess.run([*target.runner, str(driver), "run", *argv], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    for w, A, C0, out, n, load_c, case in made:
        try:
            _check(w, A, C0, np.fromfile(out, np.float32), n, load_c)
        except AssertionError as exc:
            raise AssertionError(f"SVL {svl}, case (M, K, N, form, options) = {case}: {exc}") from None


def _shapes(svl: int, forms=(BLOCK, GEMV)):
    """Odd shapes around the SVL's block: M = 1, 3, 16, 17, 23, 33; N = 1, 5, 33, 70 and
    4VL +- 1; K not a multiple of the block; blocks of 32, 64 and 128; adversarial scales."""
    width = 4 * (svl // 32)
    cases = []
    for form in forms:
        ms = (1, 3) if form == GEMV else (1, 3, 16, 17, 23, 33)
        for i, m in enumerate(ms):
            for j, n in enumerate((1, 5, 33, 70, width - 1, width + 1)):
                k = (45, 100, 77, 64, 131, 33)[(i + j) % 6]
                cases.append((m, k, n, form, {}))
        cases += [(ms[-1], 200, width + 5, form, {"block": 64}),
                  (ms[-1], 130, 9, form, {"block": 128, "load_c": True}),
                  (ms[-1], 96, 70, form, {"scales": "zero_block"}),
                  (ms[-1], 96, 33, form, {"scales": "subnormal"}),
                  (ms[-1], 96, 33, form, {"scales": "large"}),
                  (ms[-1], 96, 33, form, {"scales": "huge"}),
                  (ms[-1], 96, 33, form, {"scales": "ties"}),
                  (ms[-1], 96, 33, form, {"scales": "tiny_a"}),
                  (ms[-1], 90, 33, form, {"nan_a": True, "load_c": True})]
        # Asymmetric weights (an identity table, z * sum(qa) subtracted per block) on a sample.
        cases += [(m, k, n, form, {**kw, "symmetric": False}) for m, k, n, f, kw in list(cases)
                  if f == form and (m, n) in {(1, 5), (3, 33), (ms[-1], 70), (ms[-1], width + 1), (ms[-1], 33)}]
    # 8-bit weights on every symmetric case: the same shapes and adversarial scales.
    cases += [(m, k, n, f, {**kw, "bits": 8}) for m, k, n, f, kw in list(cases) if kw.get("symmetric", True)]
    return cases


@pytest.mark.arm
def test_driver_reads_the_svl(driver):
    for svl in (128, 2048):
        target = _target(svl)
        done = subprocess.run([*target.runner, str(driver), "vl"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and int(done.stdout) == svl // 32, done.stderr


@pytest.mark.arm
@pytest.mark.parametrize("svl", quant.SME2_SVLS)
def test_kernels_validate(driver, svl, tmp_path):
    _run_cases(driver, svl, _shapes(svl), tmp_path)


@pytest.mark.arm
@pytest.mark.slow
@pytest.mark.parametrize("svl", [128, 512, 2048])
def test_kernels_validate_larger(driver, svl, tmp_path):
    """Many row tiles and panels, long K, the widest block."""
    width = 4 * (svl // 32)
    cases = [(m, k, n, form, kw) for form in (BLOCK, GEMV)
             for m, k, n, kw in ((70 if form == BLOCK else 2, 1000, 3 * width + 7, {}),
                                 (5, 4100, 2 * width - 3, {"block": 4096}),
                                 (1, 2048, 300, {"load_c": True}),
                                 (33 if form == BLOCK else 1, 1000, 2 * width + 3, {"symmetric": False}),
                                 (70 if form == BLOCK else 2, 1000, 3 * width + 7, {"bits": 8}),
                                 (5, 4100, 2 * width - 3, {"block": 4096, "bits": 8}))]
    _run_cases(driver, svl, cases, tmp_path)


def _broken_driver(work: Path, change) -> Path:
    """The driver built with the generated kernels' text passed through ``change``."""
    target = _target(512)
    work.mkdir()
    for source in quant_sme2.generate():
        (work / source.filename).write_text(change(source.text) if source.filename.endswith(".S") else source.text)
    objects = []
    for source in (work / "at_qsme2_kernels.S", work / "at_qsme2_quant.c", DRIVER):
        obj = work / (source.stem + ".o")
        subprocess.run([*target.cc, *target.cflags, "-I", str(work), "-I", str(kernels_src() / "arm"),
                        "-c", str(source), "-o", str(obj)], check=True)
        objects.append(str(obj))
    exe = work / "broken_driver"
    subprocess.run([*target.cc, *target.cflags, *target.ldflags, *objects, "-lm", "-o", str(exe)], check=True)
    assert shutil.which(target.runner[0])
    return exe


@pytest.mark.arm
def test_a_wrong_table_is_noticed(tmp_path):
    """The validation can fail: the same kernels with ZT0 mapping codes to code - 7."""
    exe = _broken_driver(tmp_path / "broken", lambda text: text.replace(
        ".word " + ", ".join(str(c - 8) for c in range(16)), ".word " + ", ".join(str(c - 7) for c in range(16))))
    with pytest.raises(AssertionError, match="elements off"):
        _run_cases(exe, 512, [(3, 64, 9, BLOCK, {})], tmp_path)


@pytest.mark.arm
@pytest.mark.parametrize("form", [BLOCK, GEMV])
def test_a_wrong_8bit_step_is_noticed(tmp_path, form):
    """The validation can fail for the 8-bit kernels: step 1's outer products (block) or
    dot products (GEMV) given step 0's codes of A."""
    if form == BLOCK:
        wrong, right = "smopa za0.s, p0/m, p0/m, z20.b, z4.b", "smopa za0.s, p0/m, p0/m, z21.b, z4.b"
    else:
        wrong, right = "sdot za.s[w8, 0, vgx4], {z4.b-z7.b}, z8.b[0]", "sdot za.s[w8, 0, vgx4], {z4.b-z7.b}, z8.b[1]"

    def change(text: str) -> str:
        assert text.count(right) == 1, right
        return text.replace(right, wrong)

    exe = _broken_driver(tmp_path / "broken", change)
    with pytest.raises(AssertionError, match="elements off"):
        _run_cases(exe, 512, [(3 if form == GEMV else 17, 64, 9, form, {"bits": 8})], tmp_path)
