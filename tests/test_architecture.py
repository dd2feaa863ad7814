"""The package's shape: the engine imports no UI library, and no two modules import each other.

The import graph is read from the source (``ast``), so an import inside a
function counts as much as one at the top of a module: both run, and a cycle
through a function-level import only waits for the first call to break.
Imports under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import skippy_tui

PACKAGE_DIR = Path(skippy_tui.__file__).parent


def module_files(root: Path, package: str) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file under ``root`` (a package named ``package``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, at any depth, except in the body of ``if TYPE_CHECKING:``."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
        return
    skip_body = isinstance(node, ast.If) and _is_type_checking(node.test)
    for child in node.orelse if skip_body else ast.iter_child_nodes(node):  # type: ignore[attr-defined]
        yield from _imports(child)


def import_graph(modules: Mapping[str, Path], package: str) -> dict[str, set[str]]:
    """``{module: modules of ``package`` it imports}``; ``from X import name`` points at
    ``X.name`` when that is a module, else at ``X``."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        here = name.split(".") if is_pkg else name.split(".")[:-1]  # the package relative imports start from
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = here[: len(here) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
            for t in targets:
                # ``import a.b.c`` names a.b.c; the longest known prefix is the module meant
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and (t == package or t.startswith(package + ".")):
                    edges.add(t)
        graph[name] = edges
    return graph


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, as a
    path that starts and ends at the same module (e.g. ``[a, b, a]``); sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graphs here are a few dozen nodes)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(_cycle_in(graph, comp) for comp in components)


def _cycle_in(graph: Mapping[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside it)."""
    start = min(comp)
    parent: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, set()) & comp):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(comp)}")  # pragma: no cover


# -- the rules -----------------------------------------------------------------------------


def test_no_import_cycles_inside_the_package() -> None:
    graph = import_graph(module_files(PACKAGE_DIR, "skippy_tui"), "skippy_tui")
    assert "skippy_tui.cli_common" in graph["skippy_tui.cli"]  # the graph is really read
    cycles = find_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_engine_imports_no_ui_library() -> None:
    code = (
        "import sys, pkgutil, importlib, skippy_tui.engine as e\n"
        "for m in pkgutil.walk_packages(e.__path__, 'skippy_tui.engine.'):\n"
        "    importlib.import_module(m.name)\n"
        "import skippy_tui.config\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"engine pulled in UI modules: {out.stdout}"


def test_the_engine_imports_nothing_from_outside_the_engine() -> None:
    # the engine is a library: the CLI, the bench, the app and the transcript build on it, never the reverse
    graph = import_graph(module_files(PACKAGE_DIR, "skippy_tui"), "skippy_tui")
    outside = {
        (m, t)
        for m, ts in graph.items()
        if m.startswith("skippy_tui.engine")
        for t in ts
        if not t.startswith("skippy_tui.engine")
    }
    assert outside == set()


def external_imports(path: Path) -> set[str]:
    """The top-level names of the modules outside the package that ``path`` imports (any depth,
    ``if TYPE_CHECKING:`` left out)."""
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


NATIVE = "skippy_tui.engine.native"
C_LEVEL = {"llama_cpp", "ctypes"}


def test_only_the_native_layer_talks_to_llama_cpp() -> None:
    # llama.cpp's C API, its Python bindings and libggml are reached from engine/native/ alone
    talkers = {
        name: sorted(external_imports(path) & C_LEVEL)
        for name, path in module_files(PACKAGE_DIR, "skippy_tui").items()
        if not (name == NATIVE or name.startswith(NATIVE + "."))
    }
    assert {n: t for n, t in talkers.items() if t} == {}


def test_the_policy_imports_no_model_code() -> None:
    # auto's decisions are pure functions of measured costs and counts: tested without a model
    model_code = ("native", "load", "drafting", "process", "speculator")
    graph = import_graph(module_files(PACKAGE_DIR, "skippy_tui"), "skippy_tui")
    policy = {m: ts for m, ts in graph.items() if m.startswith("skippy_tui.engine.policy")}
    assert len(policy) >= 5  # the package is really read
    reached = {(m, t) for m, ts in policy.items() for t in ts if t.split(".")[2] in model_code}
    assert reached == set()


# -- the cycle finder can fail ----------------------------------------------------------------


def test_find_cycles_names_each_cycle_and_passes_a_dag() -> None:
    dag = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert find_cycles(dag) == []
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]


def test_the_graph_counts_function_level_imports_but_not_type_checking_ones(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import B\n"
        "def f():\n    from .sub import c\n    return c\n"
    )
    (pkg / "b.py").write_text("import pkg.a\nclass B: ...\n")
    (pkg / "sub" / "c.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    from .. import a\nelse:\n    from ..b import B\n"
    )
    graph = import_graph(module_files(pkg, "pkg"), "pkg")
    assert graph["pkg.a"] == {"pkg.sub.c"}  # the function's import; not the TYPE_CHECKING one
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.c"] == {"pkg.b"}  # the else branch runs
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.c", "pkg.b", "pkg.a"]]
