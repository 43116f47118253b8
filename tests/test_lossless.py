"""The lossless check and its control case (specviz.ui.teach.lossless): the real verify step passes the
chi-square test, a verify step that accepts every draft token fails it, and token labels can be
told apart."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

from specviz.drafters import PromptLookupDrafter
from specviz.core.sampling import SamplingConfig
from specviz.ui.teach.lossless import (
    binned,
    chi_square_p,
    draw_first_tokens,
    first_token_experiment,
    lossless_notes,
    token_label,
)

P_TARGET = torch.tensor([0.5, 0.3, 0.2])
P_DRAFT = torch.tensor([0.2, 0.3, 0.5])


def _p_value(counts: torch.Tensor, p: torch.Tensor, n: int) -> float:
    top = torch.arange(len(p))
    return chi_square_p(binned(counts.double(), top), binned(p.double(), top), n)


def test_accept_all_is_rejected_by_the_chi_square():
    """Accepting every draft makes the first token follow p_draft = (0.2, 0.3, 0.5) instead of
    p_target = (0.5, 0.3, 0.2). The chi-square statistic then grows like
    n · Σ (p_draft − p_target)² / p_target = n · (0.09/0.5 + 0 + 0.09/0.2) = 0.63 n: about 1,260 at
    n = 2,000, against 9.21 for p = 0.01 with 2 degrees of freedom. Its sampling spread under this
    alternative is about √(4 · 0.63 n) ≈ 71, so it stays above 9.21 with certainty for any seed."""
    n = 2000
    counts, accepted = draw_first_tokens(P_TARGET, P_DRAFT, n, torch.Generator().manual_seed(0), "accept_all")
    assert accepted == n
    assert _p_value(counts, P_TARGET, n) < 0.01


def test_the_real_verify_step_passes_the_same_test():
    """Under exactness the p-value is uniform on [0, 1]; this fixed seed (deterministic) lands above
    0.01, as 99% of seeds would, and the frequencies sit within 4 binomial standard errors
    √(p(1 − p)/n) ≤ 0.011 of p_target."""
    n = 2000
    counts, accepted = draw_first_tokens(P_TARGET, P_DRAFT, n, torch.Generator().manual_seed(0))
    assert 0 < accepted < n
    assert _p_value(counts, P_TARGET, n) > 0.01
    assert torch.allclose(counts.double() / n, P_TARGET.double(), atol=4 * 0.0112)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=0, vocab_size=64, lm_head_scale=4.0)


def test_the_control_case_fails_and_the_real_case_passes_on_a_model(tiny):
    """Prompt lookup at T = 1 proposes one fixed token x (a point mass). Accepting it always puts
    every draw on x, while p_target(x) < 1: a chi-square p-value far below 0.01 (at p_target(x) ≤ 0.9
    the statistic is ≥ n(1 − 0.9)²/0.9 ≈ 22 at n = 2,000 for x's bin alone)."""
    prompt = [5, 6, 7, 8, 5, 6, 7]  # "5 6 7" occurred before: lookup proposes 8
    drafter = PromptLookupDrafter(vocab_size=64)
    sampling = SamplingConfig(temperature=1.0)
    broken = first_token_experiment(tiny, drafter, prompt, sampling, n=2000, seed=0, control="accept_all")
    assert broken.p_value_speculative < 0.01 and broken.acceptance_rate == 1.0
    assert broken.control == "accept_all" and len(broken.p_draft) == len(broken.p_target)
    real = first_token_experiment(tiny, drafter, prompt, sampling, n=2000, seed=0)
    assert real.p_value_speculative > 0.01
    assert any("point mass" in note for note in lossless_notes(real, 1.0, lookup=True))
    assert any("Control case" in note for note in lossless_notes(broken, 1.0))


def test_unknown_control_is_refused(tiny):
    with pytest.raises(ValueError, match="control must be one of"):
        first_token_experiment(tiny, PromptLookupDrafter(64), [5, 6, 5], SamplingConfig(1.0), control="x")


def test_at_temperature_zero_the_notes_say_there_is_nothing_to_sample(tiny):
    report = first_token_experiment(tiny, PromptLookupDrafter(64), [5, 6, 7, 5, 6], SamplingConfig(0.0), n=200)
    assert report.p_value_speculative == 1.0
    assert "nothing to sample" in lossless_notes(report, 0.0)[0]


def test_token_labels_show_whitespace_and_ids():
    assert token_label(" the", 278) == "␣the\u00a0#278"
    assert token_label("\n\n", 198) == "↵↵\u00a0#198"
    assert token_label("", 2) == "∅\u00a0#2"
    assert token_label("", 3) != token_label("", 2)  # two empty decodings stay apart
    assert token_label("a\x01", 9) == "a\\x01\u00a0#9"
    assert "other" in token_label("", -1)


@pytest.mark.parametrize("rule", ["one-hot", "exact-match", "block"])
def test_every_exact_rule_passes_the_check_and_the_lossy_control_fails_it(rule):
    """The page's check per rule: the first token under each exact rule follows p_target (a fixed
    seed, as in the test above); under relaxed-top-k every drafted token of a 3-token vocabulary is
    in the top 5, so it follows p_draft (statistic ≈ 0.63 n ≈ 1,260, test above) and fails.
    One-hot and exact match propose the draft's argmax (token 2), accepted with p_target(2) = 0.2."""
    n = 2000
    counts, accepted = draw_first_tokens(P_TARGET, P_DRAFT, n, torch.Generator().manual_seed(0), rule=rule)
    assert 0 < accepted < n
    assert _p_value(counts, P_TARGET, n) > 0.01
    lossy, accepted = draw_first_tokens(P_TARGET, P_DRAFT, n, torch.Generator().manual_seed(0), rule="relaxed-top-k")
    assert accepted == n and _p_value(lossy, P_TARGET, n) < 0.01


def test_the_check_on_a_model_fails_for_the_lossy_rule_and_says_why(tiny):
    """On a tiny model at T = 1 with prompt lookup's point mass x: relaxed top-k keeps x whenever it
    is in the target's top 5, so x's bin is far too tall; the notes name the lossy control."""
    prompt = [5, 6, 7, 8, 5, 6, 7]
    drafter = PromptLookupDrafter(vocab_size=64)
    sampling = SamplingConfig(temperature=1.0)
    lossy = first_token_experiment(tiny, drafter, prompt, sampling, n=2000, seed=0, rule="relaxed-top-k")
    exact = first_token_experiment(tiny, drafter, prompt, sampling, n=2000, seed=0, rule="one-hot")
    assert lossy.rule == "relaxed-top-k" and exact.rule == "one-hot"
    assert exact.p_value_speculative > 0.01
    assert lossy.p_value_speculative < 0.01 or lossy.acceptance_rate == 0.0
    assert any("lossy control" in note for note in lossless_notes(lossy, 1.0, lookup=True))
