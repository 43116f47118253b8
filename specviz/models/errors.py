"""The errors model loading and pairing raise (re-exported by :mod:`specviz.models.loading`).

They live in their own module because both :mod:`specviz.models.offline` (preparation of the offline
models) and :mod:`specviz.models.loading` (loading, pairing) raise them, and models imports offline.
"""

from __future__ import annotations

__all__ = ["IncompatiblePairError", "ModelLoadError"]


class ModelLoadError(RuntimeError):
    """A model could not be prepared or loaded (not cached while offline, download or conversion
    failure, unreadable checkpoint). The message says which model and why, for the UI."""


class IncompatiblePairError(ValueError):
    """Target and draft tokenizers map tokens to different ids, so their distributions live on
    different vocabularies and standard speculative sampling would produce garbage."""
