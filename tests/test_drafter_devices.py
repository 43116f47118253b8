"""Drafters the device refuses are never picked for it: the int8 self-draft runs only with the
target on the CPU (PyTorch's dynamic int8 kernels), so on ``"cuda"`` no default, lesson, hint or
menu picks it, its stand-in (the early-exit self-draft) drafts instead and the page says so in
one line; on the CPU they all still offer it. The devices are strings: no GPU is needed to compute
what a CUDA server offers."""

from __future__ import annotations

import pytest
import torch

from specviz.drafters import DRAFTER_KINDS, device_type, drafter_kind, for_device, kinds_for, real_draft_phrase
from specviz.ui.tabs import lessons_tab
from specviz.ui.tabs import run_tab
from specviz.ui.serve import settings
from specviz.ui.tabs import side_by_side_tab
from specviz.ui.tabs.lossless_check import _no_first_draft_hint
from specviz.ui.tabs.sweep_steps import sweep_default
from specviz.ui.teach.lossless import REAL_VERIFY, LosslessReport, lossless_notes

INT8 = DRAFTER_KINDS["int8"]


def test_the_int8_self_draft_runs_on_the_cpu_only():
    assert INT8.devices == ("cpu",) and INT8.runs_on("cpu") and INT8.runs_on(torch.device("cpu"))
    assert not INT8.runs_on("cuda") and not INT8.runs_on("cuda:1") and not INT8.runs_on(torch.device("cuda", 0))
    assert all(kind.runs_on("cuda") for kind in DRAFTER_KINDS.values() if kind is not INT8)
    assert INT8 not in kinds_for("cuda") and INT8 in kinds_for("cpu")
    with pytest.raises(ValueError, match="unknown device 'auto'"):
        device_type("auto")


def test_a_stand_in_drafts_where_a_kind_does_not_run_and_one_sentence_says_so():
    assert for_device("int8", "cpu") == ("int8", None)
    spec, sentence = for_device("int8", "cuda")
    assert drafter_kind(spec).runs_on("cuda") and spec == INT8.stand_in == "early-exit:4"
    assert sentence.count(". ") == 0 and sentence.endswith(".") and "int8" in sentence and spec in sentence
    assert for_device("ngram", "cuda") == ("ngram", None)


def _menu_specs(device) -> list[str]:
    return [spec for _, spec in settings.drafter_menu(device)]


def test_no_menu_or_default_offers_int8_on_cuda_and_all_still_do_on_the_cpu():
    assert "int8" not in _menu_specs("cuda") and "int8" in _menu_specs("cpu")
    assert set(_menu_specs("cpu")) - set(_menu_specs("cuda")) == {"int8"}
    assert "int8" not in sweep_default("draft", "cuda").split()
    assert sweep_default("draft", "cuda") == "ngram early-exit:4 none"  # the stand-in was listed already
    assert sweep_default("draft", "cpu") == "ngram int8 early-exit:4 none"
    offered, ticked = side_by_side_tab.side_by_side_menu("cuda")
    assert "int8 self-draft" not in offered and "Early-exit self-draft" in ticked
    offered, ticked = side_by_side_tab.side_by_side_menu("cpu")
    assert "int8 self-draft" in offered and "int8 self-draft" in ticked


@pytest.mark.parametrize("name", list(lessons_tab.LESSONS))
def test_every_lesson_picks_a_drafter_that_runs_on_the_device(name):
    lesson = lessons_tab.LESSONS[name]
    on_cuda, sentence = lessons_tab.lesson_settings(name, "cuda")
    assert DRAFTER_KINDS[on_cuda["drafter_kind"]].runs_on("cuda")
    assert lessons_tab.lesson_settings(name, "cpu") == (lesson, None)  # the CPU keeps every lesson as written
    outputs = lessons_tab.apply_lesson(name, "cuda")
    values = dict(zip(lessons_tab.LESSON_FIELDS, outputs))
    note = outputs[len(lessons_tab.LESSON_FIELDS)]["value"]
    if DRAFTER_KINDS[lesson["drafter_kind"]].runs_on("cuda"):
        assert sentence is None and values["drafter_kind"]["value"] == lesson["drafter_kind"]
    else:
        assert values["drafter_kind"]["value"] == "early-exit" and values["early_exit_layers"]["value"] == 4
        assert sentence in note  # the page says which drafter stands in for which


def test_four_lessons_use_int8_on_the_cpu():
    on_cpu = [name for name in lessons_tab.LESSONS if lessons_tab.lesson_settings(name, "cpu")[0]["drafter_kind"]
              == INT8.spec]
    assert len(on_cpu) == 4  # with the verification rules lesson
    values = dict(zip(lessons_tab.LESSON_FIELDS, lessons_tab.apply_lesson(on_cpu[0], "cpu")))
    assert values["drafter_kind"]["value"] == INT8.spec


def test_the_lossless_hints_suggest_only_drafters_that_run_there():
    assert real_draft_phrase("cpu") == "the int8 or early-exit self-draft"
    assert real_draft_phrase("cuda") == "the early-exit self-draft"
    nothing = ValueError("the drafter proposes nothing for the first token")
    assert "int8" not in _no_first_draft_hint(nothing, device=torch.device("cuda"))
    assert "int8" in _no_first_draft_hint(nothing, device=torch.device("cpu"))
    one_branch = LosslessReport(token_ids=[1, -1], p_target=[0.5, 0.5], freq_speculative=[0.5, 0.5],
                                freq_direct=[0.5, 0.5], tv_speculative=0.0, tv_direct=0.0, p_value_speculative=1.0,
                                p_value_direct=1.0, n=100, acceptance_rate=0.0, draft_label="x", control=REAL_VERIFY)
    [on_cuda] = lossless_notes(one_branch, 1.0, device="cuda")
    [on_cpu] = lossless_notes(one_branch, 1.0, device="cpu")
    assert "early-exit" in on_cuda and "int8" not in on_cuda and "int8" in on_cpu


def test_choosing_cuda_in_the_device_menu_swaps_int8_for_its_stand_in(monkeypatch):
    monkeypatch.setattr(settings, "server_device", lambda: "cpu")
    menu, layers = run_tab.on_device_change("cuda", "int8")
    assert menu["value"] == "early-exit" and layers["value"] == 4
    assert "int8" not in [spec for _, spec in menu["choices"]]
    menu, _ = run_tab.on_device_change("auto", "int8")  # auto: the server's device, a CPU here
    assert "value" not in menu and "int8" in [spec for _, spec in menu["choices"]]
    monkeypatch.setattr(settings, "server_device", lambda: "cuda")
    menu, _ = run_tab.on_device_change("auto", "ngram")
    assert "value" not in menu and "int8" not in [spec for _, spec in menu["choices"]]


def test_a_page_built_on_a_cuda_server_offers_no_int8(monkeypatch):
    from specviz.ui.page import build_page

    monkeypatch.setattr(settings, "server_device", lambda: "cuda")
    components = build_page(public=False).get_config_file()["components"]
    by_id = {c["props"].get("elem_id"): c["props"] for c in components}
    drafter = next(c["props"] for c in components if c["props"].get("label") == "Drafter")
    assert "int8" not in [value for _, value in drafter["choices"]] and drafter["value"] == "ngram"
    sbs = by_id["sv-sbs-drafters"]
    assert "int8 self-draft" not in [value for _, value in sbs["choices"]] and "int8 self-draft" not in sbs["value"]


# ----------------------------------------------------------------------------- presets that pay on a GPU
SMOL_HUB = "SmolLM2-135M → SmolLM2-1.7B-Instruct · hub, GPU"


def test_the_eager_smollm2_pair_says_in_one_sentence_why_it_cannot_pay_on_a_gpu():
    note = settings.preset_note(SMOL_HUB)
    [sentence] = [s for s in note.split(". ") if "cannot" in s]
    assert sentence.startswith("On a GPU this eager pair cannot beat plain decoding") and "c ≈ 30/24 = 1.25" in sentence
    assert "5/(4·1.25 + 1) = 0.83×" in sentence
    assert "Pays off on a GPU" not in DRAFTER_KINDS["model"].note  # no promise of a speedup left


def test_the_gpu_defaults_pay_by_construction():
    """On a CUDA server the page starts on prompt lookup (nothing to run: c ≈ 0) and offers the
    learned head, one layer against the target's 30 (c ≈ 1/30): any pass yielding more than
    K·c + 1 tokens is a speedup there. Only the model-draft pairs are launch-bound."""
    from specviz.figures import theory
    from specviz.models import memory
    from specviz.run import pair_sizing

    default = settings.PRESETS[settings.DEFAULT_PRESET]
    assert DRAFTER_KINDS[default["drafter"]].lookup and DRAFTER_KINDS[default["drafter"]].runs_on("cuda")
    eagle = next(p for p in settings.PRESETS.values() if p["drafter"] == DRAFTER_KINDS["eagle"].spec)
    c = theory.launch_bound_cost_ratio(pair_sizing.drafter_layers("eagle", eagle["target"]),
                                       memory.model_layers(eagle["target"]))
    assert c == 1 / 30 and theory.expected_speedup(0.2, 3, c) > 1.1  # pays even at the head's lowest measured α
    assert "cannot" not in settings.preset_note(next(n for n, p in settings.PRESETS.items() if p is eagle))
    qwen = settings.preset_note("Qwen2.5-0.5B → Qwen2.5-7B-Instruct · hub, GPU")
    assert "c ≈ 24/28 = 0.86" in qwen and "up to 1.13×" in qwen


def test_a_drafter_the_device_refuses_is_refused_before_anything_loads(monkeypatch):
    import gradio as gr
    from test_api import _run_args

    from specviz.models import loading as models
    from specviz.ui.serve.fields import request_from
    from specviz.ui.tabs.sweep_steps import sweep_plan

    def forbidden(*args, **kwargs):
        raise AssertionError("nothing may load for a refused request")

    monkeypatch.setattr(models, "load_model", forbidden)
    monkeypatch.setattr(settings, "server_device", lambda: "cuda")
    with pytest.raises(gr.Error, match="The int8 drafter does not run with the target on cuda; pick another drafter, "
                                       "such as early-exit:4"):
        request_from(_run_args(drafter_kind="int8", device="auto"), public=False)
    assert request_from(_run_args(drafter_kind="int8", device="cpu"), public=False).draft == "int8"
    shared = {k: v for k, v in _run_args(device="auto").items() if k != "max_new_tokens"}
    with pytest.raises(gr.Error, match="The int8 drafter does not run with the target on cuda"):
        sweep_plan("Drafter", "ngram int8", 8, shared, public=False)
