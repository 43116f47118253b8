"""The house rules of the code's layout, read from the source with ``ast`` (nothing is imported):

* only ``app.py`` and ``specviz/ui/`` import gradio; the page's drawing (``specviz/ui/draw``) and its
  teaching computations (``specviz/ui/teach``) import none, and the drawing no torch either;
* the library (``specviz/`` outside ``ui/``) never imports the page, and is what the command line
  reaches: a module only the page uses lives in the page's wing;
* no file name repeats anywhere in the package; the page's tabs never import each other;
* one palette: no colour is written outside ``specviz/ui/draw/palette.py``, and the stylesheet
  reaches the page one way;
* no function is longer than 80 lines;
* no JavaScript in a Python file: each script is a file in ``specviz/ui/draw/js/``, loaded exactly
  once, and what it reads (ids, classes, data-* attributes) the drawing writes.

That the ``specviz`` package has no import cycle, counting every import statement, is
tests/test_imports.py's."""

from __future__ import annotations

import ast
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specviz"
UI = PACKAGE / "ui"
DRAW, TEACH = UI / "draw", UI / "teach"
PALETTE = DRAW / "palette.py"
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


def _library() -> list[Path]:
    """The library's modules: ``specviz/`` outside the page's package."""
    return [p for p in sorted(PACKAGE.rglob("*.py")) if UI not in p.parents]


def _reached_outside(path: Path) -> set[str]:
    """The top-level names of the packages outside specviz that ``path`` imports, directly or
    through the specviz modules it imports."""
    modules = {_module_name(p): p for p in [ROOT / "app.py", *PACKAGE.rglob("*.py")]}
    seen, todo, outside = set(), [_module_name(path)], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in _imports(modules[name]):
            if imported in modules:
                todo.append(imported)
            elif not imported.startswith("specviz"):
                outside.add(imported.split(".")[0])
    return outside


def test_the_drawing_and_the_teaching_modules_import_no_gradio_and_the_drawing_no_torch():
    wing = sorted(DRAW.glob("*.py")) + sorted(TEACH.glob("*.py"))
    assert len(wing) >= 10
    offenders = [str(p.relative_to(ROOT)) for p in wing if _imports_gradio(p)]
    assert not offenders, f"plain data in, HTML/CSS/Plotly out: no gradio in {offenders}"
    torch_users = [p.name for p in DRAW.glob("*.py") if "torch" in _reached_outside(p)]
    assert not torch_users, f"the drawing takes plain data, not tensors (directly or through specviz): {torch_users}"
    assert "torch" in _imports(TEACH / "lossless.py")  # the reader sees torch where it is imported


def test_the_library_never_imports_the_page():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n == "specviz.ui"
                                                  or n.startswith("specviz.ui."))
                 for p in _library()}
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, f"the library must not import the page: {offenders}"


def test_every_library_module_is_reached_from_the_command_line():
    """What the page alone uses belongs under specviz/ui/: every library module is imported, directly
    or not, by the command line (specviz/cli.py) or is one of the package's entry points."""
    modules = {_module_name(p): p for p in _library()}
    reached, todo = set(), ["specviz.cli"]
    while todo:
        name = todo.pop()
        if name in reached or name not in modules:
            continue
        reached.add(name)
        todo.extend(n for n in _imports(modules[name]) if n in modules)
    # A package's __init__ runs whenever one of its modules is imported; the textbook round is
    # written to be read (tests/test_textbook.py holds it equal to the engine), not run.
    packages = {name.rpartition(".")[0] for name in reached}
    unreached = sorted(set(modules) - reached - packages - {"specviz.__main__", "specviz.core.textbook"})
    assert not unreached, f"only the page uses these: move them under specviz/ui/ ({unreached})"
    assert "specviz.core.sampling" in reached and "specviz.drafters.eagle" in reached


def test_no_file_name_repeats_in_the_package():
    stems: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            stems.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    repeated = {stem: paths for stem, paths in stems.items() if len(paths) > 1}
    assert not repeated, f"one name, one file: {repeated}"


#: A colour in source text: #rgb, #rgba, #rrggbb, #rrggbbaa (not an HTML entity such as &#8203;),
#: rgb()/rgba(), or a quoted colour name.
COLOUR = re.compile(r"(?<![&\w])#(?:[0-9a-fA-F]{8}|[0-9a-fA-F]{6}|[0-9a-fA-F]{3,4})\b|\brgba?\(|"
                    r"[\"'](?:white|black|red|green|blue|orange|grey|gray)[\"']")


def test_one_palette_no_colour_is_written_outside_it():
    offenders = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
                 for p in [ROOT / "app.py", *sorted(UI.rglob("*.py"))] if p != PALETTE
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if COLOUR.search(line)]
    assert not offenders, "colours live in specviz/ui/draw/palette.py:\n" + "\n".join(offenders)
    assert COLOUR.search('color: "#2e9e5b"') and COLOUR.search("background: #fff;") and not COLOUR.search("#sv-tokens")
    assert COLOUR.search('color="white"') and not COLOUR.search("&#8203;")


def test_the_stylesheet_reaches_the_page_one_way():
    """Every CSS rule is in specviz/ui/draw/styles.py (its colours the palette's variables), added by
    the page's one style script (draw/js/style.js): no css=/css_template=/css_paths= and no other
    <style> but the exported charts page's head (a file of its own, its rules styles.EXPORT_CSS)."""
    ways = re.compile(r"\bcss(?:_template|_paths)?\s*=|createElement\(\s*['\"]style|<style")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in [ROOT / "app.py", *sorted(PACKAGE.rglob("*.py")),
                                                    *sorted(PACKAGE.rglob("*.js"))]
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if ways.search(line)]
    style, export = DRAW / "js" / "style.js", DRAW / "export_page.py"
    assert found == [f"specviz/ui/draw/export_page.py:{_line_of(export, '<style>{EXPORT_CSS}')}",
                     f"specviz/ui/draw/js/style.js:{_line_of(style, 'createElement')}"], found
    defined = re.compile(r"--sv-[\w-]+\s*:")
    outside = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if p != PALETTE
               and defined.search(p.read_text(encoding="utf-8"))]
    assert not outside, f"CSS variables are the palette's (css_variables()): {outside}"


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in line)


def test_the_tabs_never_import_each_other():
    tabs = {_module_name(p) for p in (UI / "tabs").glob("*_tab.py")}
    assert len(tabs) == 8, sorted(tabs)
    for path in (UI / "tabs").glob("*_tab.py"):
        others = (_imports(path) & tabs) - {_module_name(path)}
        assert not others, f"{path.name} imports the tab(s) {sorted(others)}: share through ctx or a piece below"


def test_the_import_reader_skips_type_checking_blocks():
    names = _imports(PACKAGE / "models" / "selfdraft.py")
    assert "specviz.models.loading" not in names and "torch" in names  # it names LoadedModel in prose only
    registry = _imports(PACKAGE / "drafters" / "registry.py")
    assert {"specviz.models.offline", "specviz.models.selfdraft", "specviz.drafters.lookup"} <= registry
    assert "specviz.drafters.suffix" in registry and "specviz.drafters.recycle" in registry
    assert {"specviz.ui.serve.fields", "specviz.run.request"} <= _imports(UI / "tabs" / "run_stream.py")


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


def test_each_module_of_the_page_says_what_it_holds():
    silent = [str(p.relative_to(ROOT)) for p in sorted(UI.rglob("*.py"))
              if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not silent, f"a module docstring says what each file holds: {silent}"


def _drafter_specs() -> set[str]:
    """The registry's drafter specs, read from its ``DrafterKind("spec", ...)`` entries."""
    tree = ast.parse((PACKAGE / "drafters" / "registry.py").read_text(encoding="utf-8"))
    return {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "DrafterKind" and isinstance(node.args[0], ast.Constant)}


def _compares_to_a_spec(node: ast.AST, specs: set[str]) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    literals = [s.value for s in sides if isinstance(s, ast.Constant)]
    literals += [e.value for s in sides if isinstance(s, (ast.Tuple, ast.Set, ast.List))
                 for e in s.elts if isinstance(e, ast.Constant)]
    return any(isinstance(v, str) and v in specs for v in literals)


def test_a_drafter_kind_is_told_by_a_registry_flag_not_by_its_spec_string():
    """Code outside the registry asks a kind's flags (``parameter``, ``lookup``, ``plain``,
    ``needs_model``, ``can_branch``), never ``spec == "model"``: a new kind is one registry entry."""
    specs = _drafter_specs()
    assert {"ngram", "model", "early-exit", "none", "eagle"} <= specs
    registry = PACKAGE / "drafters" / "registry.py"
    offenders = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in [ROOT / "app.py", *sorted(PACKAGE.rglob("*.py"))]
                 if p != registry for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                 if _compares_to_a_spec(node, specs)]
    assert not offenders, f"read a flag of DRAFTER_KINDS instead: {offenders}"
    assert _compares_to_a_spec(ast.parse('kind == "model"').body[0].value, specs)


# --------------------------------------------------------------------------- the page's JavaScript
JS_DIR = DRAW / "js"
#: What marks a string as JavaScript (the project's before-stop hook reads code the same way): two
#: or more of these in a string constant longer than 40 characters.
JS_MARKS = (("document.",), ("window.",), ("=>",), ("addEventListener",), ("querySelector",),
            ("function (", "function("))


def _looks_like_javascript(text: str) -> bool:
    return len(text) > 40 and sum(any(mark in text for mark in marks) for marks in JS_MARKS) >= 2


def _string_constants(path: Path):
    """Every string constant of ``path`` with its line; an f-string counts as its literal parts
    joined (a script written as an f-string is still a script)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value for v in node.values if isinstance(v, ast.Constant))


def test_no_javascript_is_written_in_a_python_file():
    """The page's scripts are files in specviz/ui/draw/js/ (loaded by draw/scripts.py), never a
    string in the Python code."""
    offenders = [f"{p.relative_to(ROOT)}:{line}: {text.strip()[:60]!r}" for p in _sources()
                 for line, text in _string_constants(p) if _looks_like_javascript(text)]
    assert not offenders, "move these scripts into specviz/ui/draw/js/:\n" + "\n".join(offenders)
    assert _looks_like_javascript("(on) => { document.documentElement.classList.toggle('sv-cb', !!on); }")
    assert not _looks_like_javascript("Each kind maps token => colour, for every kind the page shows.")
    assert not _looks_like_javascript("The page's scripts live in js files; each event's js= names one.")


def _js_files() -> list[Path]:
    return sorted(JS_DIR.glob("*.js"))


def _script_calls(path: Path) -> list[str]:
    """The names ``path`` loads with ``script("name")`` (draw/scripts.py's loader)."""
    return [node.args[0].value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and (getattr(node.func, "id", None) == "script" or getattr(node.func, "attr", None) == "script")]


def test_every_script_file_is_loaded_exactly_once_and_opens_with_what_it_reads():
    """Each file in specviz/ui/draw/js/ is named once on the Python side (``script("name")``), no
    name is loaded that has no file, and each file opens with a comment saying what it does and
    what it reads."""
    loads: dict[str, list[str]] = {}
    for path in _sources():
        for name in _script_calls(path):
            loads.setdefault(name, []).append(str(path.relative_to(ROOT)))
    files = {p.stem for p in _js_files()}
    assert len(files) >= 10, sorted(files)
    unused, missing = sorted(files - set(loads)), sorted(set(loads) - files)
    assert not unused, f"scripts no page code loads: {unused}"
    assert not missing, f"script(...) names with no file in {JS_DIR.relative_to(ROOT)}: {missing}"
    twice = {name: where for name, where in loads.items() if len(where) > 1}
    assert not twice, f"load each script once (keep it in a module constant): {twice}"
    silent = [p.name for p in _js_files() if not re.match(r"/\*.*?\bReads\b.*?\*/", p.read_text(encoding="utf-8"), re.S)]
    assert not silent, f"open each script with a comment: what it does, what it reads, who writes that: {silent}"


def _without_comments(js: str) -> str:
    return re.sub(r"/\*.*?\*/|(?<![:'\"])//[^\n]*", "", js, flags=re.S)


#: A string literal in a script (quotes or backticks; no escaped quote inside).
JS_STRING = re.compile(r"'([^'\\\n]*)'|\"([^\"\\\n]*)\"|`([^`\\]*)`")


def _selector_names(selector: str) -> set[str]:
    """The page's own names a CSS selector reads: ``#sv-…`` ids, ``.sv-…`` classes, ``data-*``."""
    return ({f"#{m}" for m in re.findall(r"#(sv-[\w-]+)", selector)}
            | {f".{m}" for m in re.findall(r"\.(sv-[\w-]+)", selector)}
            | set(re.findall(r"\[(data-[\w-]+)", selector)))


def _names_read(js: str) -> set[str]:
    """The ids, classes and data-* attributes a script reads: every string in it that is a
    selector (has ``#sv-``, ``.sv-`` or ``[data-``), ``getElementById``, ``getAttribute`` and
    ``classList.contains`` strings, and ``dataset.name`` (the attribute ``data-name``)."""
    code = _without_comments(js)
    found = set()
    for groups in JS_STRING.findall(code):
        text = next(g for g in groups if g) if any(groups) else ""
        if re.search(r"#sv-|\.sv-|\[data-", text):
            found |= _selector_names(text)
    found |= {f"#{m}" for m in re.findall(r"getElementById\(\s*['\"]([\w-]+)", code)}
    found |= {f".{m}" for m in re.findall(r"classList\.contains\(\s*['\"]([\w-]+)", code)}
    found |= set(re.findall(r"getAttribute\(\s*['\"](data-[\w-]+)", code))
    found |= {"data-" + re.sub(r"[A-Z]", lambda c: "-" + c.group().lower(), m)
              for m in re.findall(r"\.dataset\.(\w+)\b(?!\s*=[^=])", code)}
    return found


def _tour_selectors() -> set[str]:
    """What the tour's script reads through its steps' data (draw/tour_steps.py's ``selector=``)."""
    tree = ast.parse((DRAW / "tour_steps.py").read_text(encoding="utf-8"))
    return {name for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg == "selector"
            and isinstance(node.value, ast.Constant) for name in _selector_names(node.value.value)}


#: Names a script reads that no draw module writes, with who makes them instead: another script
#: (checked below to write it) or gradio itself.
MADE_BY_A_SCRIPT = {".sv-tour-count": "tour.js", ".sv-tour-text": "tour.js",
                    ".sv-tour-do": "tour.js", "data-go": "tour.js", "#sv-style": "style.js",
                    ".sv-range-note": "slider_range.js"}
MADE_BY_GRADIO = {"data-tab-id": "gradio's Tabs writes each tab button's id (gr.Tab(id=...))",
                  "data-testid": "gradio's blocks write it (a label's block-info)"}


def _written(name: str, draw_html: str, ui_literals: set[str], script_text: str = "") -> bool:
    """``name`` (``#id``, ``.class`` or ``data-x``) is written in ``draw_html`` (the draw modules'
    source) or ``script_text``; an id may also be a component's elem_id (a string literal of the
    page's modules, ``ui_literals``)."""
    kind, bare = name[0], name[1:]
    if kind == "#":
        by_script = re.search(rf"\.id\s*=\s*['\"]{re.escape(bare)}['\"]", script_text)
        return bare in ui_literals or f'id="{bare}"' in draw_html or bool(by_script)
    if kind == ".":
        in_class = re.compile(rf"class=\\?['\"][^'\"]*(?<![\w-]){re.escape(bare)}(?![\w-])")
        by_script = re.search(rf"(className\s*=|classList\.add\()\s*['\"]{re.escape(bare)}['\"]", script_text)
        return bool(in_class.search(draw_html) or in_class.search(script_text) or by_script)
    return f"{name}=" in draw_html or f"{name}=" in script_text


def test_every_id_class_and_data_attribute_a_script_reads_is_written_by_the_drawing():
    """A script reads what the drawing writes: each data-* attribute and each ``sv-`` class a script
    (or the tour's steps) reads is written in specviz/ui/draw/*.py, each ``sv-`` id there or as a
    component's elem_id, unless :data:`MADE_BY_A_SCRIPT` names the script that makes it (and that
    script does) or :data:`MADE_BY_GRADIO` says gradio writes it."""
    draw_html = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DRAW.glob("*.py")) if p.name != "tour_steps.py")
    ui_literals = {text for p in sorted(UI.rglob("*.py")) if p.name != "tour_steps.py"
                   for _, text in _string_constants(p) if text.startswith("sv-")}
    scripts = {p.name: p.read_text(encoding="utf-8") for p in _js_files()}
    read = {name: sorted(file for file, js in scripts.items() if name in _names_read(js))
            for js in scripts.values() for name in _names_read(js)}
    for name in _tour_selectors():
        read.setdefault(name, []).append("tour_steps.py")
    assert {"data-r", "data-i", "data-rej", "data-round", ".sv-done", ".sv-tok", "#sv-tokens"} <= set(read), read
    stale = sorted(set(MADE_BY_A_SCRIPT) - set(read))
    assert not stale, f"no script reads these any more: remove them from MADE_BY_A_SCRIPT: {stale}"
    unwritten = {name: where for name, where in read.items() if name not in MADE_BY_GRADIO
                 and not (name in MADE_BY_A_SCRIPT
                          and _written(name, "", set(), scripts[MADE_BY_A_SCRIPT[name]]))
                 and not _written(name, draw_html, ui_literals)}
    assert not unwritten, f"read by a script, written by nothing in specviz/ui/draw/ (name: scripts): {unwritten}"


def _layout_section(readme: str) -> str:
    """README's "## Layout" section: from its heading to the next level-2 heading."""
    start = readme.index("\n## Layout\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:] if end < 0 else readme[start:end]


def _unnamed_modules(section: str) -> list[str]:
    """The ``specviz/**/*.py`` modules (``__init__.py`` aside: a folder's row names it) whose file
    name is not written in ``section`` as code (```engine.py```)."""
    return [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py"))
            if p.name != "__init__.py" and f"`{p.name}`" not in section]


def test_readme_layout_names_every_module_of_the_package():
    """A newcomer finds every module of ``specviz/`` in README's Layout tables: a module added
    without its row fails here."""
    section = _layout_section((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not _unnamed_modules(section), f"add a row to README's Layout for: {_unnamed_modules(section)}"
    # The check can fail: the section without one module's name misses exactly that module.
    assert _unnamed_modules(section.replace("`engine.py`", "the engine")) == ["specviz/core/engine.py"]


def _unnamed_folders(section: str) -> list[str]:
    """The folders of ``specviz/`` (``__pycache__`` and the scripts' ``js/`` aside) not written in
    ``section`` as code (```specviz/core/```)."""
    data_inside = ("heads", "data", "text")  # their subfolders are data (a head, the traces, the lessons' prose)
    folders = sorted(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name not in ("__pycache__", "js")
                     and not set(p.relative_to(PACKAGE).parts[:-1]) & set(data_inside))
    return [str(p.relative_to(ROOT)) + "/" for p in folders if f"`{p.relative_to(ROOT)}/`" not in section]


def test_readme_layout_names_every_folder_of_the_package():
    section = _layout_section((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not _unnamed_folders(section), f"add a row to README's Layout for: {_unnamed_folders(section)}"
    assert _unnamed_folders(section.replace("`specviz/core/`", "core")) == ["specviz/core/"]


# ----------------------------------------------------------------------------- one recipe for a model feature
RECIPE = UI / "serve" / "feature.py"
GPU_ENTRY = UI / "serve" / "gpu.py"
#: Calls only the recipe makes: a job, its stream, the gate's quick check before a generation.
RECIPE_CALLS = {"make_job", "stream_job", "generation_click"}


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _names_the_generation_queue(node: ast.AST) -> bool:
    """A ``concurrency_id=`` keyword whose value is ``"generation"`` or a name ``GENERATION``."""
    if not isinstance(node, ast.keyword) or node.arg != "concurrency_id":
        return False
    value = node.value
    return (isinstance(value, ast.Constant) and value.value == "generation"
            or getattr(value, "id", getattr(value, "attr", None)) == "GENERATION")


def _recipe_bypasses(path: Path, tree: ast.AST) -> list[str]:
    """Where ``tree`` (the source of ``path``) makes a job, streams one, gates a generation or
    names the generation queue by hand instead of through :mod:`specviz.ui.serve.feature`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node) in RECIPE_CALLS and path not in (RECIPE, GPU_ENTRY):
            found.append(f"{path.name}:{node.lineno} {_called_name(node)}()")
        if _names_the_generation_queue(node) and path != RECIPE:
            found.append(f"{path.name}:{node.value.lineno} concurrency_id")
    return found


def _unregistered_works(tree: ast.AST) -> list[str]:
    """Module-level work functions (first parameter annotated ``JobContext``) that no
    ``Feature(...)`` of the same module declares."""
    works = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.args.args
             and "JobContext" in ast.unparse(node.args.args[0].annotation or ast.Constant(""))}
    declared = {ast.unparse(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                and _called_name(node) == "Feature" for arg in node.args[1:2]}
    return sorted(works - declared)


def test_every_model_feature_goes_through_the_one_recipe():
    """A generating endpoint is a :class:`specviz.ui.serve.feature.Feature`: no module but the recipe
    (and the GPU entry point it calls) makes or streams a job, gates a generation or names the
    generation queue, and every work function is declared as a feature's."""
    offenders = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += _recipe_bypasses(path, tree)
        offenders += [f"{path.name}: {name} is declared by no Feature" for name in _unregistered_works(tree)]
    assert not offenders, f"declare a Feature (specviz/ui/serve/feature.py) instead: {offenders}"
    declared = sum(1 for p in UI.rglob("*.py") for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Call) and _called_name(node) == "Feature")
    assert declared == 6  # /run, /lossless, /sweep, /side_by_side, /dial, /llamacpp_lane


def test_the_recipe_check_finds_a_feature_written_by_hand():
    by_hand = ast.parse(
        "def echo_work(ctx: 'gpu.JobContext', text):\n    yield text\n\n"
        "def run_echo(text):\n    yield from gpu.stream_job(gpu.make_job(echo_work, text, duration_s=10))\n\n"
        "button.click(run_echo, box, box, concurrency_id='generation', concurrency_limit=1)\n")
    tab = UI / "tabs" / "echo_tab.py"
    assert sorted(f.split(" ")[1] for f in _recipe_bypasses(tab, by_hand)) == ["concurrency_id", "make_job()",
                                                                                "stream_job()"]
    assert _unregistered_works(by_hand) == ["echo_work"]
    declared = ast.parse("def echo_work(ctx: 'gpu.JobContext'):\n    yield 1\n\nECHO = Feature('echo', echo_work, p)\n")
    assert _unregistered_works(declared) == [] and _recipe_bypasses(tab, declared) == []


# ----------------------------------------------------------------------------- the algorithm's own folder
CORE = PACKAGE / "core"


def test_the_algorithm_imports_nothing_of_specviz_but_itself():
    """specviz/core/ is the loop and what it needs: a reader follows one round without leaving it."""
    outside = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.startswith("specviz.")
                                                and not n.startswith("specviz.core"))
               for p in sorted(CORE.glob("*.py"))}
    outside = {path: names for path, names in outside.items() if names}
    assert not outside, f"core imports only core: {outside}"
    assert {"engine.py", "sampling.py", "textbook.py", "records.py", "drafter.py"} <= {p.name for p in CORE.glob("*.py")}


def test_models_never_import_drafters():
    """Loading, caching and sizing models knows nothing of drafters: a drafter is built from a loaded
    model (specviz.drafters.registry.build_drafter), never the other way round."""
    models = sorted((PACKAGE / "models").glob("*.py"))
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.startswith("specviz.drafters"))
                 for p in models}
    assert not {path: names for path, names in offenders.items() if names}, offenders
    assert len(models) >= 6 and "specviz.drafters.registry" in _imports(PACKAGE / "drafters" / "__init__.py")


def test_no_module_imports_another_modules_private_names():
    """A leading underscore means "this module's own": a name another module needs is public."""
    offenders = [f"{p.relative_to(ROOT)}: from {node.module} import {alias.name}"
                 for p in _sources() for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                 if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specviz")
                 for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not offenders, offenders
