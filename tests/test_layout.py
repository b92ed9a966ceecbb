"""The import layering of specs, families and codegen.

``autotune.specs`` (the record, the name grammar, the dtype tables) imports
neither the families nor the generators; ``autotune.families.*`` (the register
models) import specs and never a generator; the generators import the families.
Each check runs in a fresh interpreter, so modules another test imported do not
hide a cycle.
"""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
import autotune.families

ROOT = Path(autotune.__file__).resolve().parent.parent
FAMILY_MODULES = ["autotune.families"] + [
    f"autotune.families.{m.name}" for m in pkgutil.iter_modules(autotune.families.__path__)
]


def loaded_after(module: str) -> list[str]:
    """The autotune modules a fresh interpreter holds after importing ``module``."""
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'autotune')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_family_module_is_listed():
    assert {"autotune.families.x86", "autotune.families.neon", "autotune.families.sme2"} <= set(FAMILY_MODULES)


@pytest.mark.parametrize("module", FAMILY_MODULES)
def test_families_load_no_generator(module):
    loaded = loaded_after(module)
    assert module in loaded
    assert not [m for m in loaded if m == "autotune.codegen" or m.startswith("autotune.codegen.")]


def test_specs_loads_neither_families_nor_codegen():
    loaded = loaded_after("autotune.specs")
    assert not [m for m in loaded if m.startswith(("autotune.families", "autotune.codegen"))], loaded


def _imported(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names anywhere in ``path``
    (function bodies too, where a lazy import would hide from the checks above),
    resolved against the autotune package."""
    package = ".".join(path.relative_to(ROOT).parent.parts)  # what a relative import starts from
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


def test_no_lazy_import_crosses_the_layers():
    specs = _imported(ROOT / "autotune" / "specs.py")
    assert not {m for m in specs if m.startswith(("autotune.families", "autotune.codegen"))}, specs
    for path in sorted((ROOT / "autotune" / "families").glob("*.py")):
        names = _imported(path)
        assert not {m for m in names if m.startswith("autotune.codegen")}, (path.name, names)
        assert "autotune.specs" in names, path.name  # the one layer below


def test_generators_take_their_models_from_the_families():
    codegen = ROOT / "autotune" / "codegen"
    for name, family in (("_x86", "x86"), ("avx2", "x86"), ("avx512", "x86"), ("generic", "x86"),
                         ("neon", "neon"), ("sme2", "sme2"),
                         ("quant_x86", "x86"), ("quant_amx", "x86"), ("quant_neon", "neon"), ("quant_sme2", "sme2")):
        assert f"autotune.families.{family}" in _imported(codegen / f"{name}.py"), name


def test_every_quantised_kernel_is_one_record_a_family_declares_and_a_generator_writes():
    """specs -> families -> codegen for the quantised kernels: each family's records
    round-trip through their names, and the dispatch finds their generator."""
    from autotune import codegen, specs
    from autotune.families import neon, qkernel, sme2, x86

    records = [k for isa in x86.QUANT_ISAS for k in x86.quant_family(isa)] + neon.quant_family() + sme2.quant_family()
    # family "amx": declared by families.x86 (its tile model), written by codegen.quant_amx
    assert {k.family for k in records} == {"x86", "amx", "neon", "sme2"}
    for k in records:
        assert specs.QNAME_PATTERN.match(k.name) and qkernel(k.name) == k, k.name
        assert k.features and k.form in specs.QFORMS
    for family in ("x86", "amx", "neon", "sme2"):
        mine = [k for k in records if k.family == family]
        assert codegen.quant_generator(mine[0]).units(mine), family
