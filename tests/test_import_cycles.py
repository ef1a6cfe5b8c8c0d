"""No import cycle among the memory's modules, type-only imports included: a module that needs
another's name under ``TYPE_CHECKING`` to dodge a cycle still has one (the design is circular,
and a later runtime import, or a tool that follows annotations, meets it)."""

from __future__ import annotations

import ast
from pathlib import Path

import shortterm

ROOT = Path(shortterm.__file__).parent


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports, at any depth of its source
    (``if TYPE_CHECKING:`` blocks and function bodies included). ``from pkg import name`` is
    an edge to ``pkg.name`` when that is a module, else to ``pkg`` itself."""
    paths = {_module(p, root): p for p in root.rglob("*.py")}
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    target = ".".join(base + (node.module.split(".") if node.module else []))
                elif node.module and node.module.split(".")[0] == top:
                    target = node.module
                else:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges.add(sub if sub in paths else target)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in paths)
        graph[name] = {e for e in edges if e in paths and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan's
    algorithm, iteratively: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_memory_has_no_import_cycle() -> None:
    graph = import_graph(ROOT)
    memory = {
        name: {e for e in edges if e.startswith("shortterm.memory.")}
        for name, edges in graph.items()
        if name.startswith("shortterm.memory.")
    }
    assert cycles(memory) == []


def test_the_cycle_rule_sees_a_type_only_cycle(tmp_path: Path) -> None:
    """The check would see the kind of cycle it forbids (it is not vacuous): three modules in
    a ring, the last edge under ``TYPE_CHECKING`` and relative, beside an acyclic one."""
    pkg = tmp_path / "probe"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "a.py").write_text("from .b import B\n")
    (pkg / "inner" / "b.py").write_text("from probe.inner import c\n")
    (pkg / "inner" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    )
    (pkg / "lone.py").write_text("from .inner import a\n")
    graph = import_graph(pkg)
    assert graph["probe.lone"] == {"probe.inner.a"}
    assert cycles(graph) == [["probe.inner.a", "probe.inner.b", "probe.inner.c"]]
