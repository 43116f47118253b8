"""The one error an engine file can raise: :class:`EngineFileError`."""

from __future__ import annotations

__all__ = ["EngineFileError"]


class EngineFileError(ValueError):
    """An engine file (or streamed completion) specviz cannot read: foreign, malformed, too large or
    inconsistent. The message is one sentence naming the field, for the visitor."""
