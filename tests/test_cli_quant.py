"""`autotune show`'s account of the quantised kernels where install measured no choice:
an Arm library's (every NEON kernel, SME2's for an SME2 target, picked where the
library runs) and an x86 library without any.  tests/test_cli.py covers the
measured x86 section (settings["quant"])."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import table
from autotune.families import neon as neon_family, sme2 as sme2_family
from autotune.install import InstallOptions, install, library_qkernels
from autotune.link import build_qharness
from tests.isa import requires_isa
from tests.test_table import make_table

ROOT = Path(__file__).resolve().parent.parent
SME2_NAMES = [k.name for k in sme2_family.quant_family()]


def show(home: Path, target: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)  # piped: every line whole
    return subprocess.run([sys.executable, "-m", "autotune", "show", "--target", target], capture_output=True,
                          text=True, env=env, timeout=120)


def emulated_arm_table(target: str, settings: dict) -> table.TunedTable:
    base = make_table(target, "emulated")
    return dataclasses.replace(base, settings={**base.settings, **settings})


def listed(stdout: str) -> list[str]:
    """The kernel names of the section `quantised kernels in the library`, in order."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("quantised kernels in the library"))
    names = []
    for line in lines[start + 1:]:
        cells = [cell.strip() for cell in line.strip("│┃ ").split("│")]
        if cells[0].startswith("at_q"):
            names.append(cells[0])
        elif names and line.startswith("└"):
            break
    return names


@pytest.mark.parametrize("target", ["neon", "sme2"])
def test_show_lists_an_arm_librarys_quantised_kernels_and_says_the_cpu_chooses(tmp_path, target):
    isas = ("sme2", "neon") if target == "sme2" else ("neon",)
    table.save(emulated_arm_table(target, {"isas": list(isas), "quant_library": library_qkernels(isas, {})}),
               tmp_path)
    done = show(tmp_path, target)
    assert done.returncode == 0, done.stderr
    want = [k.name for k in neon_family.quant_family()] + (SME2_NAMES if target == "sme2" else [])
    assert listed(done.stdout) == want
    row = next(line for line in done.stdout.splitlines() if "at_q4s_dotprod_1x16" in line)
    assert "q4s" in row and "gemv" in row and "dotprod" in row
    assert "(not measured)" in done.stdout
    assert "qmatmul chooses where the library runs" in done.stdout and "features the CPU has" in done.stdout
    assert ("the sme2 kernels come first" in done.stdout) == (target == "sme2")


def test_show_says_when_a_library_has_no_quantised_kernel_or_the_table_has_no_record(tmp_path):
    table.save(emulated_arm_table("sme2", {"quant_library": []}), tmp_path)
    done = show(tmp_path, "sme2")
    assert done.returncode == 0, done.stderr
    assert "quantised kernels: none in this library; qmatmul computes with its portable C code" in done.stdout
    table.save(make_table("sme2", "emulated"), tmp_path)  # written before install recorded them
    done = show(tmp_path, "sme2")
    assert "quantised kernels: not recorded; run `autotune install --target sme2`" in done.stdout
    assert "quantised kernels in the library" not in done.stdout


def test_the_record_follows_what_each_library_links():
    """x86: the quantised stage's selection, in its order; Arm: every NEON kernel, SME2's after them."""
    selected = {"selected": ["at_q8_avx2_2x16", "at_q4s_avx2_1x16"]}
    assert [(e["name"], e["form"], e["needs"]) for e in library_qkernels(("avx2", "generic"), selected)] == \
        [("at_q8_avx2_2x16", "tile", "avx2 fma"), ("at_q4s_avx2_1x16", "gemv", "avx2 fma")]
    assert library_qkernels(("generic",), {}) == [] and library_qkernels(("avx2",), {}) == []
    neon = library_qkernels(("neon",), {})
    assert [e["name"] for e in neon] == [k.name for k in neon_family.quant_family()]
    assert {e["needs"] for e in neon} == {"i8mm", "asimddp"}
    assert [e["name"] for e in library_qkernels(("sme2", "neon"), {})] == [e["name"] for e in neon] + SME2_NAMES


@pytest.mark.arm
def test_an_emulated_neon_install_records_the_kernels_its_library_names(tmp_path):
    """The install validated every quantised kernel under QEMU, as the float ones; the table's
    record is what the installed aarch64 library's at_qkernel_name lists, asked under QEMU;
    and `autotune show` prints them as validated."""
    from .test_quant_arm import _target

    target = _target()
    result = install(InstallOptions(target="neon", home=tmp_path, only=("at_dgemm_neon_tt_1x1_*",)))
    assert result.library is not None, result.notes
    entries = result.table.settings["quant_library"]
    recorded = [e["name"] for e in entries]
    assert recorded == [k.name for k in neon_family.quant_family()]
    assert {e["verdict"] for e in entries} == {"validated"}
    assert result.table.settings["quant"]["selected"] == recorded
    exe = build_qharness(target, result.library.parent / "libautotune.a", tmp_path / "qharness")
    done = subprocess.run([*target.runner, str(exe), "names"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == recorded
    shown = show(tmp_path, "neon")
    assert shown.returncode == 0, shown.stderr
    assert listed(shown.stdout) == recorded
    assert all("validated" in line for line in shown.stdout.splitlines() if "at_q" in line)


@requires_isa("avx2")
def test_an_x86_install_records_the_kernels_its_library_names(tmp_path):
    """The record of an x86 install is what its library's at_qkernel_name lists (asked in a
    subprocess: a test process keeps the libraries it loads)."""
    result = install(InstallOptions(quick=True, home=tmp_path, only=("at_sgemm_avx2_nn_8x2_*", "at_q4s_avx2_*")))
    assert result.library is not None, result.notes
    recorded = [e["name"] for e in result.table.settings["quant_library"]]
    assert recorded == result.table.settings["quant"]["selected"] and recorded
    code = ("import ctypes, sys\n"
            "lib = ctypes.CDLL(sys.argv[1])\n"
            "lib.at_qkernel_name.restype = ctypes.c_char_p\n"
            "i = 0\n"
            "while (name := lib.at_qkernel_name(i)) is not None:\n"
            "    print(name.decode())\n"
            "    i += 1\n")
    done = subprocess.run([sys.executable, "-c", code, str(result.library)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == recorded
