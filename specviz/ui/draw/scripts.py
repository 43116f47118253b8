"""The page's JavaScript, one file per script in ``specviz/ui/draw/js/``, each beside the drawing
whose HTML it reads and each opening with a comment on what it does, the DOM it reads and which
draw module writes that DOM. The page hands them to gradio unchanged (an event's ``js=`` or a
``gr.HTML``'s ``js_on_load=``): :func:`script` reads one, :func:`called` binds a script that is a
function to fixed arguments (the tour's steps, the stylesheet, one tab to select).

Two kinds of file: a ``js_on_load`` body (``tokens.js``, ``stage.js``: statements with gradio's
``element``, ``trigger`` and ``watch`` in scope) and an event's function (every other file: one
arrow function whose parameters are the event's inputs, returning its outputs).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

__all__ = ["JS", "called", "names", "script"]

#: The folder of the scripts. The project has no setup file to list package data in: the app runs
#: from the checkout (``python app.py``, a Space's clone of the repository), where these files are
#: committed beside this module.
JS = Path(__file__).resolve().with_name("js")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def names() -> list[str]:
    """The scripts there are, by name (a file's stem), sorted."""
    return sorted(path.stem for path in JS.glob("*.js"))


@functools.cache
def script(name: str) -> str:
    """The text of the script ``name`` (``specviz/ui/draw/js/<name>.js``), read once per process.

    Raises:
        ValueError: ``name`` is not a script's name (the message lists them); a name with anything
            but lower-case letters, digits and underscores is refused before any file is opened.
    """
    if not _NAME.fullmatch(name) or not (JS / f"{name}.js").is_file():
        raise ValueError(f"no script {name!r} in {JS}; there are: {', '.join(names())}")
    return (JS / f"{name}.js").read_text(encoding="utf-8")


def called(function: str, *arguments) -> str:
    """An event's ``js`` with no inputs that calls ``function`` (a script's text that is one
    function, e.g. ``script("tour")``) with ``arguments``, each written as JSON (so a string, a
    list of dicts or the stylesheet's text arrive as the same values in the browser).

    Raises:
        TypeError: an argument JSON cannot write.
    """
    values = ", ".join(json.dumps(argument) for argument in arguments)
    return "() => { return (" + function.strip() + ")(" + values + "); }"
