"""The house rules of the code's layout, read from the source with ``ast`` (nothing is imported):
only ``app.py`` and ``specviz/ui/`` import gradio, the page's tabs never import each other, and no
function is longer than 80 lines (that the ``specviz`` package has no import cycle, counting every
import statement, is tests/test_imports.py's)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specviz"
UI = PACKAGE / "ui"
MAX_FUNCTION_LINES = 80
#: Functions allowed past the limit for now, as "path::name" (empty it as they are split).
LONG_FUNCTIONS_TODO: set[str] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> list[Path]:
    return [ROOT / "app.py", *sorted(PACKAGE.rglob("*.py"))]


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except what sits under ``if TYPE_CHECKING:`` (never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not _is_type_checking(child))


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports when it runs (absolute names; ``from x import y`` counts x and
    x.y), at any depth of the file: an import inside a function runs too, only later. Imports for
    type checkers only (``if TYPE_CHECKING:``) do not count."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _imports_gradio(path: Path) -> bool:
    return any(name == "gradio" or name.startswith("gradio.") for name in _imports(path))


def test_only_the_front_door_and_the_ui_package_import_gradio():
    offenders = [str(p.relative_to(ROOT)) for p in _sources()
                 if _imports_gradio(p) and p != ROOT / "app.py" and UI not in p.parents]
    assert not offenders, f"only app.py and specviz/ui/ may import gradio: {offenders}"
    assert _imports_gradio(UI / "page.py")  # the rule reads imports correctly


def test_the_tabs_never_import_each_other():
    tabs = {_module_name(p) for p in UI.glob("*_tab.py")}
    assert len(tabs) == 7, sorted(tabs)
    for path in UI.glob("*_tab.py"):
        others = (_imports(path) & tabs) - {_module_name(path)}
        assert not others, f"{path.name} imports the tab(s) {sorted(others)}: share through ctx or a piece below"


def test_the_import_reader_skips_type_checking_blocks_and_resolves_relative_imports():
    names = _imports(PACKAGE / "selfdraft.py")
    assert "specviz.models" not in names and "torch" in names  # its LoadedModel import is for type checkers
    assert {"specviz.ui.fields", "specviz.request"} <= _imports(UI / "runs.py")


def _long_functions() -> list[tuple[str, int]]:
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append((f"{path.relative_to(ROOT)}::{node.name}", lines))
    return found


def test_no_function_is_longer_than_80_lines():
    too_long = [(name, n) for name, n in _long_functions() if name not in LONG_FUNCTIONS_TODO]
    assert not too_long, f"split these (lines): {too_long}"
    stale = LONG_FUNCTIONS_TODO - {name for name, _ in _long_functions()}
    assert not stale, f"no longer long: remove from LONG_FUNCTIONS_TODO: {sorted(stale)}"


def test_app_py_is_only_the_front_door():
    lines = (ROOT / "app.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60, len(lines)


@pytest.mark.parametrize("module", ["page", "run_tab", "fields", "state", "errors", "runs"])
def test_each_ui_module_says_what_it_holds(module):
    assert ast.get_docstring(ast.parse((UI / f"{module}.py").read_text(encoding="utf-8")))
