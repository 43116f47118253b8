"""The app on a ZeroGPU Space as the real ``spaces`` package (0.51) runs it, on this CPU machine
(:mod:`tests.zerogpu_harness`: its CUDA emulation on, the device API unreachable, tiny random
checkpoints laid out as the presets' hub cache): what would break on a first deploy.

* placed at import: ``import app`` in public mode leaves every cached public model on "cuda" in
  the model cache (transformers 5's threaded loader moved weights from threads the emulation does
  not cover, so nothing was placed);
* after packing: ``spaces``' own ``pack()`` (what ``launch()`` runs) deletes the hub blobs the
  placed tensors were mapped from; a visitor's hub-preset request is still validated and its
  models found, with no file read again;
* the charge: what ``spaces`` would charge for a reservation (requested × the card's
  ``duration_factor``) stays within the public cap;
* ``--dtype auto`` on a card whose bfloat16 is only emulated gives float16;
* README's ``preload_from_hub`` lists exactly the files the loader opened at import (watched with
  inotify while the repos lie as the hub ships them), and its quota examples are what
  ``gpu_budget`` reserves and ZeroGPU charges.

The harness runs one fresh Python for the first two (``spaces`` reads its configuration at
import), shared by their tests.
"""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from importlib.resources import files

import pytest
import torch

from specviz.models.loading import resolve_dtype
from specviz.ui.serve import gpu_budget
from specviz.ui.serve import settings
from tests.zerogpu_harness import HUB_MODELS, ROOT, build_caches, run_driver

pytest.importorskip("spaces")
#: One xdist worker runs this module, so its ``deployed`` scenario (a first deploy in a fresh
#: Python, about 15 s of CPU) runs once, not once on each worker that draws one of its tests.
pytestmark = pytest.mark.xdist_group("zerogpu-real")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """One first deploy under the harness (``tests/zerogpu_driver.py deploy``): its JSON result."""
    env = build_caches(tmp_path_factory.mktemp("zerogpu"))
    return run_driver("deploy", env, timeout=600)


def test_import_in_public_mode_places_the_cached_presets_on_cuda(deployed):
    placed = {e["name"]: e["device"] for e in deployed["entries"]}
    for name in (*HUB_MODELS, "smollm2-135m-instruct", "gemma-3-270m"):
        assert placed.get(name) == "cuda", (name, deployed["entries"], deployed["warnings"])


def test_packing_at_launch_deletes_the_hub_weights_it_packed(deployed):
    """The harness reproduces the platform: the placed safetensors blobs are gone after pack()."""
    assert deployed["packed_bytes"] > 0
    assert deployed["weights_left"] == []  # every snapshot's safetensors now points at a deleted blob


def test_a_hub_preset_request_after_packing_is_validated_and_finds_its_models(deployed):
    assert deployed["request"] == "ok", deployed["request"]
    for name in HUB_MODELS:
        assert deployed[f"load {name}"] == "ok cuda"


def _rtx_pro_card() -> dict:
    cards = json.loads(files("spaces.zero").joinpath("configs.json").read_text())
    return max(cards, key=lambda card: card["duration_factor"])


def test_what_zerogpu_charges_for_a_reservation_stays_within_the_public_cap(monkeypatch):
    """``spaces.zero.client.get_duration_seconds`` (the number it checks against the quota) on the
    card with the largest factor (the RTX PRO 6000: 1.5), for the longest reservation public mode
    asks for and for an estimate far past the cap."""
    from spaces.zero import client, config

    card = _rtx_pro_card()
    assert card["duration_factor"] > 1
    monkeypatch.setattr(config, "get_config", lambda: card)
    cap = gpu_budget.cap_s(True, settings.PUBLIC_POLICY.max_run_s)
    for estimate in (math.inf, gpu_budget.run_seconds(1024, 8, 28, 24, True), 1.0):
        requested = gpu_budget.duration_s(estimate, cap)
        charged = client.get_duration_seconds(timedelta(seconds=requested), None)
        assert charged <= cap, (estimate, requested, charged)
        assert charged == pytest.approx(gpu_budget.charged_s(requested))


def test_the_longest_public_reservation_uses_most_of_the_cap():
    cap = gpu_budget.cap_s(True, settings.PUBLIC_POLICY.max_run_s)
    assert gpu_budget.charged_s(gpu_budget.duration_s(math.inf, cap)) > cap - gpu_budget.duration_factor()


def test_auto_dtype_never_picks_emulated_bfloat16(monkeypatch):
    """A T4 or V100: ``is_bf16_supported()`` says True only by emulation."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_dtype("auto", "cuda") == torch.float16


def test_auto_dtype_picks_bfloat16_where_it_is_native(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert resolve_dtype("auto", "cuda") == torch.bfloat16


def _preload_lists() -> dict[str, list[str]]:
    """README's front matter ``preload_from_hub``: the files listed for each repo."""
    front = (ROOT / "README.md").read_text(encoding="utf-8").split("---")[1]
    block = front.split("preload_from_hub:")[1]
    lists = {}
    for line in block.splitlines()[1:]:
        if not line.startswith("  - "):
            break
        repo, files = line[4:].split()[:2]
        lists[repo] = files.split(",")
    return lists


def _hub_presets() -> set[str]:
    return {name for p in settings.PRESETS.values() for name in (p["target"], p["draft_model"])
            if name and "/" in name}


def test_readme_preloads_exactly_the_files_the_loader_opens(deployed):
    """the Space's build downloads each hub preset's files the loader opens at
    import (observed: every file of a repo laid out as the hub holds it, the ones opened while
    ``import app`` placed and counted the models), no other file and no whole repo."""
    lists = _preload_lists()
    assert set(lists) == _hub_presets()
    for repo in HUB_MODELS:
        assert sorted(lists[repo]) == deployed["opened"][repo], (repo, deployed["opened"])


#: Files the loader opens (observed above) that a preset's hub repo does not hold, by repo: Qwen2.5's
#: repos ship no ``special_tokens_map.json`` (their special tokens are in ``tokenizer_config.json``;
#: the hub's file listing, not checkable offline), and listing a file a repo lacks would fail the build.
NOT_IN_REPO = {"Qwen/Qwen2.5-0.5B-Instruct": {"special_tokens_map.json"},
               "Qwen/Qwen2.5-7B-Instruct": {"special_tokens_map.json"},
               "Qwen/Qwen2.5-Coder-0.5B-Instruct": {"special_tokens_map.json"},
               "Qwen/Qwen2.5-Coder-1.5B-Instruct": {"special_tokens_map.json"}}


def test_readme_preloads_every_shard_of_a_sharded_checkpoint_and_the_same_other_files():
    """The hub presets the harness does not lay out (the Qwen pair) list the same files as the
    others but those their repo lacks (:data:`NOT_IN_REPO`), their weights as one
    ``model.safetensors`` or an index with each of its shards."""
    lists = _preload_lists()
    others = {name for name in lists[HUB_MODELS[0]] if not name.endswith(".safetensors")}
    for repo, names in lists.items():
        weights = [f for f in names if ".safetensors" in f]
        assert set(names) - set(weights) == others - NOT_IN_REPO.get(repo, set()), repo
        if weights != ["model.safetensors"]:
            shards = sorted(w for w in weights if w.endswith(".safetensors"))
            count = len(shards)
            assert "model.safetensors.index.json" in weights, repo
            assert shards == [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)], repo
            assert all(re.fullmatch(r"model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?", w) for w in weights)


def _requested_and_charged(target: str, draft: str, baseline: bool) -> str:
    """docs/serving.md's "requested → charged" for 128 tokens, K = 4 and a short prompt, from gpu_budget."""
    cap = gpu_budget.cap_s(True, settings.PUBLIC_POLICY.max_run_s)
    target_layers, draft_layers = gpu_budget.step_layers(target, draft)
    seconds = gpu_budget.run_seconds(128, 4, target_layers, draft_layers, baseline,
                                     gpu_budget.prompt_tokens("Fix the typos: Teh cat sat on teh mat."))
    requested = gpu_budget.duration_s(seconds, cap)
    return f"{requested} s → {gpu_budget.charged_s(requested):g} s"


def test_readmes_quota_examples_are_what_gpu_budget_reserves_and_zerogpu_charges():
    deploy = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8").split("## Deploy as a Space")[1]
    deploy = " ".join(deploy.split())  # one line: the examples wrap
    for target, draft in (("smollm2-135m-instruct", "ngram"),
                          ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")):
        for baseline in (True, False):
            assert _requested_and_charged(target, draft, baseline) in deploy, (target, baseline)
