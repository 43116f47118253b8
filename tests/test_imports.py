"""specviz's modules import each other without cycles (module-level, function-level and
type-checking imports all count), read from the source with :mod:`ast`. A subpackage's
``__init__.py`` is a module too (named by its package, ``drafters``): importing anything from a
package runs it first."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specviz"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parents(name: str) -> set[str]:
    """The packages above module ``name`` (``"a.b.c"`` → ``{"a", "a.b"}``)."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The specviz modules ``path`` imports, wherever the import statement is. Importing a module
    of a package runs the package's ``__init__`` first, so that counts too, unless ``path`` lies
    in that package (whose ``__init__`` is then already running)."""
    name = _module_name(path)
    package = name.rpartition(".")[0] if path.name != "__init__.py" else name
    found, above = set(), set()
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
            submodules = [f"{prefix}.{a.name}".strip(".") for a in node.names]
            # ``from . import a`` takes module a; ``from . import b`` of a name reads the __init__
            names = submodules + ([prefix] if not set(submodules) <= modules else [])
        elif isinstance(node, ast.Import):
            names = [a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "specviz"]
        found |= {n for n in names if n in modules}
        above |= {p for n in names for p in _parents(n) if p in modules}
    return found | (above - _parents(name))


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
    paths = [p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.name != "__init__.py"]
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports(p, modules) - {_module_name(p)} for p in paths}
    # the reader sees the imports: a package's __init__ and its modules, relative imports from inside one
    assert graph["models.loading"] >= {"models.offline", "models.memory", "models.model_cache"}
    assert graph["drafters"] >= {"drafters.registry", "drafters.lookup"}
    assert graph["drafters.registry"] >= {"models.selfdraft", "drafters.lookup", "models.offline", "models.loading"}
    assert "models" in graph["drafters.registry"]  # importing a module of a package runs its __init__
    assert graph["train.train_draft"] >= {"drafters", "drafters.eagle"}
    assert _cycle(graph) is None, " → ".join(_cycle(graph))
