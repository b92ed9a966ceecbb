"""The kernel contract: the records autotune.contract writes are what at_kernel.h means.

A C program includes the header and the records of a few kernels (with stand-in
entry points), and prints every field; the Python side must read back what the
spec and the family's operand format say.  A field added, dropped or reordered
on one side only fails here, before any library or harness is built.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from autotune import contract
from autotune.home import kernels_src
from autotune.specs import KernelSpec
from autotune.toolchain import find_cc

SPECS = [
    KernelSpec("avx2", "f32", 16, 6),
    KernelSpec("generic", "f64", 3, 2, True, False),
    KernelSpec("neon", "f32", 8, 4, False, False, "", 2),
    KernelSpec("sme2", "f32", 30, 17, True, False, "papb", 2),
    KernelSpec("sme2", "f64", 20, 9, False, False, "pb", 2),
]

PRINTER = r"""
#include <stdio.h>
#include "at_kernel.h"

extern const at_kernel table[];
extern const int table_count;

int main(void)
{
    for (int i = 0; i < table_count; i++) {
        const at_kernel *k = &table[i];
        printf("{\"name\": \"%s\", \"isa\": \"%s\", \"requires\": \"%s\", \"dtype\": %d, \"trans_a\": %d, \"trans_b\": %d, "
               "\"mr\": %d, \"nr\": %d, \"pack_a_ld\": %d, \"pack_b_ld\": %d, \"svl_bytes\": %d, "
               "\"fn\": %d, \"fn_s\": %d}\n",
               k->name, k->isa, k->requires, (int)k->dtype, (int)k->trans_a, (int)k->trans_b, (int)k->mr,
               (int)k->nr, (int)k->pack_a_ld, (int)k->pack_b_ld, (int)k->svl_bytes,
               k->fn != 0, k->fn_s != 0);
    }
    return 0;
}
"""


def _stand_ins(specs: list[KernelSpec]) -> str:
    """Empty definitions of every entry point the records name (the kernels are not needed)."""
    return "\n".join(line.replace(");", ") {}") for line in contract.declarations(specs))


@pytest.mark.parametrize("svl_bits", [256, 512])
def test_records_read_back_in_c_as_the_specs_say(tmp_path: Path, svl_bits: int):
    specs = [replace(s, svl=svl_bits) if s.isa == "sme2" else s for s in SPECS]
    source = tmp_path / "records.c"
    source.write_text("\n".join([
        "#include <stdint.h>", '#include "at_kernel.h"',
        _stand_ins(specs), *contract.record_array("table", specs), PRINTER,
    ]))
    exe = tmp_path / "records"
    subprocess.run([*find_cc(), "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                    f"-I{kernels_src() / 'include'}", str(source), "-o", str(exe)], check=True)
    rows = [json.loads(line) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                        check=True).stdout.splitlines()]
    assert [r["name"] for r in rows] == [s.name for s in specs]
    for row, spec in zip(rows, specs):
        pack_a, pack_b = contract.operand_format(spec)
        streaming = spec.isa == "sme2"
        assert row == {
            "name": spec.name, "isa": spec.isa, "requires": " ".join(contract.requirements(spec)),
            "dtype": int(spec.dtype == "f64"),
            "trans_a": int(spec.trans_a), "trans_b": int(spec.trans_b), "mr": spec.mr, "nr": spec.nr,
            "pack_a_ld": pack_a, "pack_b_ld": pack_b, "svl_bytes": svl_bits // 8 if streaming else 0,
            "fn": 1, "fn_s": int(streaming),
        }
    # The packed SME2 formats are whole vectors of the SVL: the records change with it.
    vl = svl_bits // 32
    assert (rows[3]["pack_a_ld"], rows[3]["pack_b_ld"]) == (-(-30 // vl) * vl, -(-17 // vl) * vl)


def test_an_empty_record_array_compiles_to_a_zero_count():
    lines = contract.record_array("table", [])
    assert lines[-1] == "const int table_count = 0;"


def test_the_kernel_abi_is_spelled_only_by_the_contract():
    """Other modules build prototypes through autotune.contract, not by hand."""
    root = Path(contract.__file__).resolve().parent
    spelled = re.compile(r"const (float|double|\{\w+\}) \*(restrict )?A, int64_t lda")
    offenders = [p.relative_to(root.parent) for p in root.rglob("*.py")
                 if p.name != "contract.py" and spelled.search(p.read_text())]
    assert offenders == []
