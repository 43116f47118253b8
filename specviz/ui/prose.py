"""The page's long prose, kept as Markdown files in ``specviz/ui/text/`` (not in code)."""

from __future__ import annotations

import functools
from pathlib import Path

TEXT = Path(__file__).resolve().parent / "text"

#: KaTeX delimiters for Markdown components that show formulas.
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


@functools.cache
def prose(name: str) -> str:
    """The Markdown text ``text/<name>.md`` (e.g. ``"maths"``, ``"lessons/early_exit"``).

    Raises:
        FileNotFoundError: if there is no such file.
    """
    return (TEXT / f"{name}.md").read_text(encoding="utf-8")
