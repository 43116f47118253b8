"""Exactness on the real offline target, SmolLM2-135M-Instruct (float32, CPU).

The first-token tests reuse one draft and one target forward pass and repeat only the random
draws (``specviz.ui.teach.lossless.first_token_experiment``), so thousands of draws take seconds.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from specviz.drafters.registry import build_drafter
from specviz.drafters import ModelDrafter
from specviz.core.sampling import SamplingConfig, logits_to_probs
from specviz.ui.teach.lossless import first_token_experiment

PROMPT = "Name a colour of the rainbow:"
SAMPLING = SamplingConfig(temperature=1.0, top_k=20)


@pytest.fixture(scope="module")
def int8_drafter(smollm2):
    draft = build_drafter("int8", smollm2)
    assert isinstance(draft, ModelDrafter)
    return draft


@pytest.fixture(scope="module")
def first_token_distributions(smollm2, int8_drafter):
    """p_target and p_draft of the first token after the chat prompt (processed with SAMPLING)."""
    ids = torch.tensor([smollm2.encode(PROMPT, chat=True)])
    with torch.inference_mode():
        p_target = logits_to_probs(smollm2.model(input_ids=ids).logits[0, -1, : int8_drafter.vocab_size], SAMPLING)
        p_draft = logits_to_probs(int8_drafter.model(input_ids=ids).logits[0, -1, : int8_drafter.vocab_size], SAMPLING)
    return p_target.double(), p_draft.double()


def test_first_token_with_int8_draft_matches_the_target_not_the_draft(smollm2, int8_drafter, first_token_distributions):
    """4,000 speculative first tokens follow p_target (chi-square p > 0.01) and not p_draft.

    Bound: under the null hypothesis the chi-square p-value is uniform, so an exact sampler fails
    p > 0.01 with probability 1%; the seed is fixed, so the test is deterministic. The int8 draft
    differs from the target by a total-variation distance of several percent on this prompt, so
    with 4,000 draws the histogram against p_draft is rejected far beyond p < 1e-6 (checked below
    that the two distributions really differ, so this half of the test has power).
    """
    report = first_token_experiment(smollm2.model, int8_drafter, smollm2.encode(PROMPT, chat=True), SAMPLING,
                                     n=4000, seed=0, top=8, vocab_size=int8_drafter.vocab_size)
    assert report.p_value_speculative > 0.01, report
    assert report.p_value_direct > 0.01, report
    assert 0.0 < report.acceptance_rate < 1.0  # both branches (accept and residual) were exercised

    p_target, p_draft = first_token_distributions
    tv = 0.5 * float((p_target - p_draft).abs().sum())
    assert tv > 0.03, f"draft and target too close (TV {tv:.3f}) for the test to tell them apart"
    # The same speculative counts, tested against p_draft's binned probabilities.
    top = torch.tensor(report.token_ids[:-1])
    draft_binned = torch.cat([p_draft[top], (1 - p_draft[top].sum()).view(1)])
    observed = torch.tensor(report.freq_speculative) * report.n
    expected = draft_binned * report.n
    keep = expected >= 5
    p_vs_draft = stats.chisquare(observed[keep].numpy(), (expected[keep] * observed[keep].sum() / expected[keep].sum()).numpy()).pvalue
    assert p_vs_draft < 1e-6


def test_first_token_with_prompt_lookup_point_mass_matches_the_target(smollm2):
    """Prompt lookup's point-mass draft: accepted with probability p_target(x), else the residual."""
    prompt = "Repeat exactly: the cat sat on the mat. the cat sat on the"
    ids = smollm2.encode(prompt, chat=False)
    drafter = build_drafter("ngram", smollm2)
    report = first_token_experiment(smollm2.model, drafter, ids, SamplingConfig(temperature=1.0), n=4000, seed=1,
                                    top=8, vocab_size=drafter.vocab_size)
    assert report.p_value_speculative > 0.01, report
    assert 0.0 < report.acceptance_rate < 1.0
