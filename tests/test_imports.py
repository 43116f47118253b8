"""specviz's modules import each other without cycles (module-level, function-level and
type-checking imports all count), read from the source with :mod:`ast`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specviz"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The specviz modules ``path`` imports, wherever the import statement is."""
    package = _module_name(path).rpartition(".")[0] if path.name != "__init__.py" else _module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                prefix = ".".join([*base, *([node.module] if node.module else [])]).strip(".")
            elif node.module and node.module.split(".")[0] == "specviz":
                prefix = node.module.partition(".")[2]
            else:
                continue
            names = [prefix] + [f"{prefix}.{a.name}".strip(".") for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "specviz"]
        found |= {n for n in names if n in modules}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph``, as a path that returns to its start, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_in_specviz():
    paths = [p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports(p, modules) - {_module_name(p)} for p in paths}
    assert graph["models"] >= {"drafters", "selfdraft", "offline"}  # the reader sees the imports
    assert _cycle(graph) is None, " → ".join(_cycle(graph))
