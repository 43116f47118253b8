"""Measurement and maintenance scripts, run from the repository root as modules:
``python -m scripts.<name>`` (so ``specviz`` and ``app`` import without path edits)."""
