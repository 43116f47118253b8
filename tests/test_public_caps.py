"""Public mode says its caps: a K slider capped at 8 says a larger typed K runs
as 8 (Gradio's slider clamps a typed value without a word), and a CPU Space offers no drafter that
only a GPU preset can use (a separate draft model)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def public_page(monkeypatch_module):
    from specviz.ui.serve import settings
    from specviz.ui.page import build_page

    monkeypatch_module.setattr(settings, "server_device", lambda: "cpu")
    return build_page(True)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _component(demo, elem_id):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_the_public_k_slider_says_what_a_larger_k_does(public_page):
    k = _component(public_page, "sv-k")
    assert k.maximum == 8 and "a larger K typed here runs as 8" in k.info
    assert "runs as 256" in _component(public_page, "sv-max-new").info


def test_a_cpu_space_lists_no_gpu_preset_and_a_draft_model_only_from_pypi(public_page):
    """A CPU Space offers the offline presets, the same-family pair among them, so the draft-model
    kind is on its menu, for the one draft model public mode lets it load: the pair's, from PyPI."""
    from specviz.ui.serve import settings

    dropdowns = [b for b in public_page.blocks.values() if type(b).__name__ == "Dropdown"]
    pairs = next(d for d in dropdowns if d.label == "Model pair")
    assert not any("GPU" in str(choice) for choice in pairs.choices)
    assert any("same family" in str(choice) for choice in pairs.choices)
    drafter = next(d for d in dropdowns if d.label == "Drafter")
    assert "model" in [value for _, value in drafter.choices]
    models_allowed = {d for d in settings.public_models(cuda=False)[1] if d != "eagle"}
    assert models_allowed == {"qwen2.5-coder-0.5b-instruct"}
