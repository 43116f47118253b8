"""The EAGLE head shipped for SmolLM2-135M-Instruct (``specviz/heads/smollm2-135m-instruct``): it
is small, says how it was made, and drafts exactly on the real target (greedy text equal to plain
decoding in float32; fractional acceptance probabilities at T = 1)."""

from __future__ import annotations

import json

import pytest

from specviz.models import loading as models
from specviz.drafters.eagle import HEAD_FILE, shipped_head_dir
from specviz.drafters.registry import build_drafter
from specviz.run.runner import make_generation
from specviz.core.sampling import SamplingConfig

TARGET = "smollm2-135m-instruct"
STORY = "Write a short story about a lighthouse keeper who finds a message in a bottle."

pytestmark = pytest.mark.skipif(
    not (models.cache_dir() / "models" / TARGET / "specviz-prepared.json").is_file(),
    reason=f"run `python -m specviz prepare {TARGET}` first")


def test_the_shipped_head_is_small_and_says_how_it_was_made():
    directory = shipped_head_dir(TARGET)
    assert (directory / HEAD_FILE).stat().st_size <= 16 * 10**6
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    assert config["eagle"]["target"] == TARGET and config["eagle"]["weights_dtype"] == "bfloat16"
    log = json.loads((directory / "training_log.json").read_text(encoding="utf-8"))
    assert [v["depth"] for v in log["validation"]] == [1, 2, 3]
    assert "python -m specviz train-draft" in (directory / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def target():
    return models.load_model(TARGET, device="cpu", dtype="float32")


def _rounds(target, spec: str, temperature: float, seed: int = 0, max_new_tokens: int = 40) -> list:
    drafter = build_drafter(spec, target, device="cpu", dtype="float32")
    gen = make_generation(target, drafter, target.encode(STORY, chat=True), k=3,
                          sampling=SamplingConfig(temperature=temperature), max_new_tokens=max_new_tokens, seed=seed,
                          instrument=True)
    return list(gen)


def test_greedy_text_with_the_shipped_head_is_plain_decodings(target):
    rounds = _rounds(target, "eagle", 0.0)
    plain = _rounds(target, "none", 0.0)
    assert [t.id for r in rounds for t in r.emitted] == [t.id for r in plain for t in r.emitted]
    assert sum(r.n_accepted for r in rounds) > 0  # the head's drafts were accepted, not just tried


def test_at_t1_the_heads_drafts_carry_fractional_acceptance_probabilities(target):
    tested = [d for r in _rounds(target, "eagle", 1.0, seed=1) for d in r.drafted if d.tested]
    fractional = [d.accept_prob for d in tested if 0.0 < d.accept_prob < 1.0]
    assert len(fractional) >= len(tested) // 3, [round(d.accept_prob, 3) for d in tested]
