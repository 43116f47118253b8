"""Read (and write) the speculative-decoding counters that serving engines report.

Gradio-free and torch-free. :func:`read_engine_file` turns one engine file into an
:class:`~specviz.engines.imported.ImportedRun`; bad input raises :class:`EngineFileError`.
"""

from __future__ import annotations

from .errors import EngineFileError
from .imported import ENGINES, TOKEN_KINDS, Figure, ImportedRun

__all__ = ["ENGINES", "TOKEN_KINDS", "EngineFileError", "Figure", "ImportedRun", "read_engine_file"]


def read_engine_file(text: str, name: str, engine: str | None = None) -> ImportedRun:
    """Read one engine file's text (``name`` is its file name or URL, kept as plain text).

    ``engine`` is one of :data:`ENGINES`, or None to guess it from the text. Raises
    :class:`EngineFileError` (a ValueError) with one sentence naming the field on bad input.
    """
    raise EngineFileError("Engine importers are not built yet.")
