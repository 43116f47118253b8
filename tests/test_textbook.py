"""The textbook round (specviz/core/textbook.py) is the engine's chain walk, draw for draw: the same
tokens from the same generator, so a reader can trust the sixty lines they read."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import noisy_copy, tiny_llama
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig, logits_to_probs, sample, verify_tree
from specviz.core.textbook import accept_or_resample, speculative_round
from specviz.drafters.draft_model import ModelDrafter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _engine_chain(draft_tokens, p_draft, p_target, generator) -> list[int]:
    result = verify_tree(torch.tensor(draft_tokens, dtype=torch.long), list(range(-1, len(draft_tokens) - 1)),
                         p_draft, p_target, False, generator, "full")
    return [draft_tokens[i] for i in result.path] + [result.next_token]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 6), vocab=st.integers(2, 12),
       temperature=st.sampled_from([0.0, 0.3, 1.0, 2.0]), same=st.booleans())
def test_the_accept_test_is_the_engines_chain_walk_draw_for_draw(seed, k, vocab, temperature, same):
    """Random rows (equal ones too, where only rounding can reject), drafts drawn from p_draft:
    the textbook and verify_tree emit the same tokens and leave the generator in the same state."""
    g = torch.Generator().manual_seed(seed)
    sampling = SamplingConfig(temperature)
    p_target = logits_to_probs(torch.randn(k + 1, vocab, generator=g) * 3, sampling)
    p_draft = p_target[:k].clone() if same else logits_to_probs(torch.randn(k, vocab, generator=g) * 3, sampling)
    draft_tokens = [int(sample(row, g)) for row in p_draft]
    ours, theirs = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 1)
    assert accept_or_resample(draft_tokens, p_draft, p_target, ours) == _engine_chain(draft_tokens, p_draft,
                                                                                      p_target, theirs)
    assert torch.equal(ours.get_state(), theirs.get_state())


@pytest.mark.parametrize("temperature", [0.0, 0.8, 1.5])
def test_textbook_rounds_emit_what_the_engine_emits_with_a_draft_model(temperature):
    """Whole rounds with real (tiny) models: the textbook re-reads the context each pass, the engine
    keeps KV caches and a record of every draw; the emitted tokens agree round by round."""
    target = tiny_llama(0, lm_head_scale=6.0)
    draft = noisy_copy(target, seed=1, scale=0.02)
    prompt, k, sampling, seed = [3, 17, 42, 9, 120], 4, SamplingConfig(temperature), 7
    gen = Generation(target, prompt, ModelDrafter(draft, 256), k=k, sampling=sampling, max_new_tokens=200, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    context, rounds, kinds = list(prompt), 0, set()
    for round_ in gen:
        emitted = speculative_round(target, draft, context, k, sampling, generator)
        assert emitted == [t.id for t in round_.emitted], f"round {round_.index}"
        context += emitted
        kinds |= {t.kind for t in round_.emitted}
        rounds += 1
        if rounds == 12:
            break
    if temperature > 0:
        assert {"accepted", "resampled"} <= kinds  # both branches of the rule ran
