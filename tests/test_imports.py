"""No import circle in the Python packages, and no circle of calls among the C runtime's units.

A circle means neither side can be read, tested or replaced without the other,
and in Python the order of first imports then decides whether a name exists yet
(a lazy import inside a function is how such a circle usually hides, so those
count here).  The graphs are read from the sources (the AST of every module) and
from the objects (``nm`` of each runtime unit compiled alone), never from what a
test process happens to have imported.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from pathlib import Path

import pytest

from autotune.toolchain import ToolchainError, arm_march, find_cc

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autotune", "benchmarks")
RUNTIME = ROOT / "kernels_src" / "runtime"

#: Circles someone is removing now; each entry goes when its circle does (the test
#: below fails on a listed circle that no longer exists, so the list cannot go stale).
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()

#: What a report must not reach: a report reads results; it neither builds nor loads a library.
REPORT_FORBIDDEN = ("autotune.build", "autotune.link", "autotune.qsuite", "autotune.install",
                    "autotune.measure", "autotune.runtime")


# -- Python ------------------------------------------------------------------------

def module_files(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Module name -> source file, for every module of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


class _Imports(ast.NodeVisitor):
    """The modules one file names in imports, each with whether it runs at import time.

    ``if TYPE_CHECKING:`` blocks never run, so they are left out; an import in a
    function body is lazy, one anywhere else (class bodies, try blocks) eager.
    """

    def __init__(self, package: str) -> None:
        self.package = package  # what a relative import starts from
        self.depth = 0
        self.found: list[tuple[str, bool]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
        for child in (node.orelse if name == "TYPE_CHECKING" else [*node.body, *node.orelse]):
            self.visit(child)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(alias.name, self.depth == 0) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[:len(self.package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        # `from package import name` imports the submodule when name is one, else
        # takes a name of the package: import_graph resolves either to the deepest module.
        self.found += [(f"{module}.{alias.name}", self.depth == 0) for alias in node.names]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self.found.append((node.args[0].value, self.depth == 0))
        self.generic_visit(node)


def import_graph(files: Mapping[str, Path]) -> dict[str, dict[str, bool]]:
    """module -> {module it imports: whether eagerly}, over the modules of ``files``.

    An imported name resolves to the deepest module of ``files`` it names
    (``from .x import y`` names x, or x.y when y is a submodule).  Not edges: the
    parent packages every import runs first (or each package that imports its
    own modules would be a circle), and a lazy import of a name from a package
    the module is in (``from . import gemm`` in a function of autotune.runtime.api):
    that package finished importing before any function of its modules runs, so
    the import only reads a name.  The same import at module level is an edge:
    run while the package imports the module, it finds the name missing.
    """
    graph: dict[str, dict[str, bool]] = {}
    for module, path in files.items():
        visitor = _Imports(module if path.name == "__init__.py" else module.rpartition(".")[0])
        visitor.visit(ast.parse(path.read_text(), str(path)))
        edges: dict[str, bool] = {}
        for name, eager in visitor.found:
            parts = name.split(".")
            target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                           if ".".join(parts[:n]) in files), None)
            if target is None or target == module or (not eager and module.startswith(target + ".")):
                continue
            edges[target] = edges.get(target, False) or eager
        graph[module] = edges
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The graph's strongly connected components of two or more nodes (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def one_circle(graph: Mapping[str, Iterable[str]], component: list[str]) -> list[str]:
    """A shortest way round the component from its first member back to it, to name in a failure."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph.get(node, ())):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if succ in members and succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def describe(graph: Mapping[str, Iterable[str]], components: Iterable[list[str]]) -> str:
    return "\n".join(f"{' -> '.join(one_circle(graph, c))}  (component: {', '.join(c)})" for c in components)


@pytest.fixture(scope="module")
def python_graph() -> dict[str, dict[str, bool]]:
    return import_graph(module_files())


def test_no_import_circle(python_graph):
    found = circles(python_graph)
    new = [c for c in found if frozenset(c) not in KNOWN_CIRCLES]
    assert not new, "import circles (lazy imports count):\n" + describe(python_graph, new)
    gone = KNOWN_CIRCLES - {frozenset(c) for c in found}
    assert not gone, f"no longer circles: remove them from KNOWN_CIRCLES: {sorted(map(sorted, gone))}"


def test_the_graph_reads_every_form_of_import(tmp_path):
    # The forms circles hid behind (reports.html imported extras inside a function).
    sources = {
        "pkg/__init__.py": "from .a import run\nVERSION = 1\n",
        "pkg/a.py": "def run():\n    from . import VERSION\n    from .sub import deep\n    return deep\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import run\n"
                    "from . import c\n",
        "pkg/c.py": "import importlib\nimport pkg.sub.deep\n"
                    "def later():\n    return importlib.import_module('pkg.b')\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "from .. import VERSION\n",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(module_files(tmp_path, ["pkg"]))
    assert graph == {
        "pkg": {"pkg.a": True},
        "pkg.a": {"pkg.sub.deep": False},  # `from . import VERSION` in a function reads a name
        "pkg.b": {"pkg.c": True},  # the TYPE_CHECKING import never runs
        "pkg.c": {"pkg.sub.deep": True, "pkg.b": False},
        "pkg.sub": {},
        "pkg.sub.deep": {"pkg": True},
    }
    # deep reads VERSION from pkg as it imports, so pkg's lazy path to it closes a circle.
    assert circles(graph) == [["pkg", "pkg.a", "pkg.sub.deep"], ["pkg.b", "pkg.c"]]
    assert one_circle(graph, ["pkg", "pkg.a", "pkg.sub.deep"]) == ["pkg", "pkg.a", "pkg.sub.deep", "pkg"]


def loaded_by(graph: Mapping[str, Mapping[str, bool]], modules: Iterable[str]) -> set[str]:
    """What running ``modules``' code can import: everything they import (lazily
    too), then what those import at import time, with the packages above each."""
    reached: set[str] = set()
    todo = [target for module in modules for target in graph[module]]
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        todo += [t for t, eager in graph.get(module, {}).items() if eager]
        todo += [".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 1)]
    return reached


def test_a_report_neither_builds_nor_loads_a_library(python_graph):
    reports = [m for m in python_graph if m.split(".")[:2] == ["autotune", "reports"]]
    assert "autotune.reports.html" in reports
    reached = loaded_by(python_graph, reports)
    bad = sorted(m for m in reached if m.startswith(REPORT_FORBIDDEN))
    assert not bad, f"autotune.reports reaches {bad}: a report reads results"


# -- C runtime ---------------------------------------------------------------------

def _nm(obj: Path) -> tuple[set[str], set[str]]:
    """(global symbols ``obj`` defines, those it needs from elsewhere)."""
    out = subprocess.run(["nm", "-P", "-g", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        name, kind, *rest = line.split()
        (undefined if kind in ("U", "w", "v") and not rest else defined).add(name)
    return defined, undefined


def _compile(cc: Sequence[str], flags: Sequence[str], source: Path, obj: Path) -> bool:
    done = subprocess.run([*cc, *flags, "-c", str(source), "-o", str(obj)], capture_output=True, text=True)
    return done.returncode == 0


def _variants() -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(name, compiler, flags) of each build the runtime's units take part in: the
    host's, and where clang-19 is installed the SME2 library's (whose exec.c
    calls the streaming executor, AT_SME2_EXEC)."""
    includes = [f"-I{ROOT / 'kernels_src' / 'include'}", f"-I{RUNTIME}"]
    python = sysconfig.get_paths().get("include")
    if python and (Path(python) / "Python.h").exists():
        includes.append(f"-I{python}")  # pyfast.c, the extension
    base = ["-std=c11", "-O0", "-fPIC", "-pthread", *includes]
    try:
        found = [("host", find_cc(), base)]
    except ToolchainError as exc:
        pytest.skip(str(exc))
    clang = shutil.which("clang-19")
    if clang:
        found.append(("sme2", (clang, "--target=aarch64-linux-gnu"),
                      [*base, f"-I{ROOT / 'kernels_src' / 'arm'}", arm_march("sme2"), "-DAT_SME2_EXEC"]))
    return found


def unit_graph(tmp: Path) -> tuple[dict[str, set[str]], list[str]]:
    """(unit -> units whose functions or data it uses, units no compiler here builds)."""
    units = sorted(p for p in RUNTIME.iterdir() if p.suffix in (".c", ".S"))
    graph: dict[str, set[str]] = {u.name: set() for u in units}
    built_somewhere: set[str] = set()
    for name, cc, flags in _variants():
        objects = {u.name: tmp / f"{name}-{u.name}.o" for u in units}
        with ThreadPoolExecutor(max_workers=2) as pool:
            ok = dict(zip(objects, pool.map(_compile, repeat(cc), repeat(flags), units, objects.values())))
        symbols = {u: _nm(obj) for u, obj in objects.items() if ok[u]}
        owner = {sym: u for u, (defined, _) in symbols.items() for sym in defined}
        for unit, (_, needed) in symbols.items():
            graph[unit] |= {owner[s] for s in needed if s in owner and owner[s] != unit}
        built_somewhere |= set(symbols)
    return graph, sorted(set(graph) - built_somewhere)


def test_no_circle_among_the_runtime_units(tmp_path):
    graph, unbuilt = unit_graph(tmp_path)
    assert graph["cache.c"] and graph["plan.c"], graph  # the objects were read at all
    found = circles(graph)
    assert not found, "C runtime units calling each other:\n" + describe(graph, found)
    if unbuilt:
        pytest.skip(f"no compiler here builds {', '.join(unbuilt)} (clang-19: scripts/setup_arm.sh)")
