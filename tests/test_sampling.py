"""The verify step and the sampling math, on hand-built distributions.

Two kinds of test:

* branch tests with hand-built logits (``±10`` and ``-inf`` force each branch) and, where the
  claim is "for any uniform", the uniform draws pinned to the extremes of ``[0, 1)``;
* distribution tests that run :func:`specviz.core.sampling.verify` itself thousands of times with a
  seeded generator and compare the emitted token frequencies with the target distribution by a
  chi-square test. Each docstring derives its bound.

About the chi-square bounds used throughout: under the null hypothesis (the implementation is
exact) the p-value is uniform on [0, 1], so a correct implementation would fail ``p > 0.01`` for 1%
of seeds; the seed is fixed, so the test is deterministic. Against a fault that moves the output
distribution to ``f``, the statistic is approximately noncentral chi-square with noncentrality
``λ = N · Σ (f − p)² / p`` (N draws). With 5 degrees of freedom the 1% critical value is 15.09 and
``λ = 25`` gives a rejection probability of 0.94; so N = 20,000 draws catch any fault whose
chi-square divergence from the target exceeds 1.25e-3, N = 10,000 any above 2.5e-3. The faults
these tests guard against move the output far more: with the distributions below, resampling
from p_target instead of the residual gives 0.07, ignoring p_draft in the ratio 0.20, the
inverted ratio 1.9.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from specviz.core.sampling import (
    NonFiniteLogitsError,
    SamplingConfig,
    logits_to_probs,
    residual_distribution,
    sample,
    verify,
)

# A 6-token target and a draft that over-weights token 0 (accepted with probability 0.1/0.5) and
# token 2 (0.05/0.10), under-weights tokens 1, 3, 4 (which then also come from the residual) and
# agrees on token 5. Rejection mass Σ max(0, p_draft − p_target) = 0.45, so acceptance, rejection
# and the residual all carry a large share of the output.
P_TARGET = torch.tensor([0.10, 0.25, 0.05, 0.30, 0.20, 0.10])
P_DRAFT = torch.tensor([0.50, 0.10, 0.10, 0.10, 0.10, 0.10])

# Largest float32 below 1: torch.rand draws from [0, 1), so this and 0.0 are the extreme uniforms.
U_MAX = 1.0 - 2.0**-24


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def chisquare_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square goodness-of-fit p-value of ``counts`` against ``probs`` on the support of ``probs``.

    Cells with zero probability are left out of the test; callers assert separately that they are
    never hit.
    """
    support = probs > 0
    observed = counts[support].double()
    expected = probs[support].double() / probs[support].double().sum() * observed.sum()
    return float(stats.chisquare(observed.numpy(), expected.numpy()).pvalue)


@pytest.fixture
def force_uniform(monkeypatch):
    """Pin every uniform that ``verify`` and ``sample`` draw to one value (``torch.rand`` is their
    only source)."""

    def pin(value: float) -> None:
        def fake_rand(*size, generator=None, device=None, **kwargs):
            shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
            return torch.full(shape, value, dtype=kwargs.get("dtype") or torch.float32, device=device)

        monkeypatch.setattr(torch, "rand", fake_rand)

    return pin


def first_emitted(result, draft_tokens: list[int]) -> int:
    """The first token a verify result appends to the output."""
    return draft_tokens[0] if result.n_accepted > 0 else result.next_token


def run_single_token_blocks(p_target: torch.Tensor, p_draft: torch.Tensor, n: int, seed: int):
    """Draft one token from ``p_draft`` and verify it against ``p_target``, ``n`` times.

    Returns:
        ``(counts, n_accepted_total)``: histogram of the first emitted token, and how many drafts
        were accepted.
    """
    generator = torch.Generator().manual_seed(seed)
    p_draft_rows = p_draft.view(1, -1)
    p_target_rows = torch.stack([p_target, p_target])
    counts = torch.zeros(p_target.shape[-1], dtype=torch.long)
    accepted = 0
    for _ in range(n):
        token = sample(p_draft, generator).view(1)
        result = verify(token, p_draft_rows, p_target_rows, generator)
        accepted += result.n_accepted
        counts[first_emitted(result, token.tolist())] += 1
    return counts, accepted


# --------------------------------------------------------------------------- distribution tests


def test_verify_emits_target_distribution_not_draft():
    """The first emitted token of a K=1 block is distributed as p_target, not as p_draft.

    20,000 draws. Bound against p_target: see the module docstring (p > 0.01 fails 1% of seeds for
    an exact implementation; any fault with chi-square divergence > 1.25e-3 is caught with
    probability > 0.94). Bound against p_draft: the expected statistic is
    N · Σ (p_target − p_draft)² / p_draft = 20,000 · 1.07 ≈ 21,400 on 5 degrees of freedom, so
    p < 1e-6 (statistic > 36) holds with overwhelming margin: this shows the test has power.
    The acceptance rate is Σ min(p_target, p_draft) = 0.55 (binomial σ = 0.0035; 5σ allowed).
    """
    n = 20_000
    counts, accepted = run_single_token_blocks(P_TARGET, P_DRAFT, n, seed=1234)
    assert chisquare_p(counts, P_TARGET) > 0.01
    assert chisquare_p(counts, P_DRAFT) < 1e-6
    sigma = math.sqrt(0.55 * 0.45 / n)
    assert abs(accepted / n - 0.55) < 5 * sigma


def test_verify_with_temperature_top_k_top_p_emits_processed_target():
    """With temperature, top-k and top-p applied to both logits, the output follows the processed target.

    The processed target keeps tokens {0, 1, 3, 5} (top-k drops 2, 4, 6; top-p then drops 7); the
    processed draft keeps {0, 2, 5}, so the draft proposes token 2, which the target filtered out
    (always rejected), and tokens 1 and 3 can only come from the residual. Tokens outside the
    target's filtered set must never appear: each has target probability exactly 0, and an exact
    implementation emits it with probability 0 (one occurrence fails). 10,000 draws, 3 degrees of
    freedom on the support: an exact implementation passes p > 0.01 for 99% of seeds, and a fault
    with chi-square divergence > 2e-3 (λ = 20) is caught with probability > 0.91.
    """
    config = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)
    target_logits = torch.tensor([1.0, 2.2, -0.5, 1.6, 0.3, 2.0, -2.0, 0.8])
    draft_logits = torch.tensor([2.5, 1.0, 1.8, 0.2, 0.4, 1.2, 0.0, -1.0])
    p_target = logits_to_probs(target_logits, config)
    p_draft = logits_to_probs(draft_logits, config)
    kept = p_target > 0
    assert kept.tolist() == [True, True, False, True, False, True, False, False]
    assert (p_draft > 0).tolist() == [True, False, True, False, False, True, False, False]

    counts, _ = run_single_token_blocks(p_target, p_draft, 10_000, seed=99)
    assert counts[~kept].sum() == 0
    assert chisquare_p(counts, p_target) > 0.01


def test_verify_block_of_two_follows_target_at_each_position():
    """In a K=2 block, the second emitted token and the bonus token also follow the target.

    Rows are context-free here, so given that the first draft was accepted (an event that depends
    only on the first draft and its uniform), the token emitted second (draft 2 if accepted, else
    the residual sample) must follow P2; given both were accepted, the bonus must follow P3. The
    first emitted token must follow P1. 10,000 blocks: about 5,500 reach the second position
    (Σ min(P1, Q1) = 0.55) and 2,750 the bonus (0.55 · 0.5); with those counts a fault moving a
    position's distribution by chi-square divergence > 4.5e-3 (second) or 9e-3 (bonus) is caught
    with probability > 0.94; reading a neighbouring row instead moves it by 0.6 – 1.8 here (the
    rows differ that much). Each check passes for 99% of seeds when exact.
    """
    p1, q1 = P_TARGET, P_DRAFT
    p2 = torch.tensor([0.30, 0.05, 0.15, 0.10, 0.25, 0.15])
    q2 = torch.tensor([0.10, 0.30, 0.10, 0.30, 0.10, 0.10])
    p3 = torch.tensor([0.05, 0.05, 0.50, 0.10, 0.10, 0.20])
    p_target_rows = torch.stack([p1, p2, p3])
    p_draft_rows = torch.stack([q1, q2])
    generator = torch.Generator().manual_seed(7)
    first = torch.zeros(6, dtype=torch.long)
    second = torch.zeros(6, dtype=torch.long)
    bonus = torch.zeros(6, dtype=torch.long)
    for _ in range(10_000):
        drafts = sample(p_draft_rows, generator)
        result = verify(drafts, p_draft_rows, p_target_rows, generator)
        emitted = drafts.tolist()[: result.n_accepted] + [result.next_token]
        first[emitted[0]] += 1
        if result.n_accepted >= 1:
            second[emitted[1]] += 1
        if result.n_accepted == 2:
            assert result.next_kind == "bonus"
            bonus[emitted[2]] += 1
        else:
            assert result.next_kind == "resampled"
    assert second.sum() > 5_000 and bonus.sum() > 2_400
    assert chisquare_p(first, p1) > 0.01
    assert chisquare_p(second, p2) > 0.01
    assert chisquare_p(bonus, p3) > 0.01


def test_point_mass_draft_is_accepted_with_target_probability():
    """A one-hot p_draft (prompt lookup) is accepted with probability p_target(x); output follows p_target.

    The residual is p_target with x removed and renormalised (checked exactly), so the resampled
    token is never x. 10,000 blocks drafting x = 3 (p_target(3) = 0.30): the acceptance rate has
    binomial σ = √(0.3 · 0.7 / 10⁴) = 0.0046 and must lie within 5σ of 0.30; the emitted tokens
    pass the chi-square test against p_target (99% of seeds when exact, and a fault of divergence
    > 2.5e-3 is caught with probability > 0.94).
    """
    x = 3
    one_hot = torch.nn.functional.one_hot(torch.tensor(x), 6).float()
    expected_residual = P_TARGET.clone()
    expected_residual[x] = 0.0
    expected_residual /= expected_residual.sum()
    torch.testing.assert_close(residual_distribution(P_TARGET, one_hot), expected_residual)

    n = 10_000
    generator = torch.Generator().manual_seed(2024)
    p_target_rows = torch.stack([P_TARGET, P_TARGET])
    counts = torch.zeros(6, dtype=torch.long)
    accepted = 0
    for _ in range(n):
        result = verify(torch.tensor([x]), one_hot.view(1, -1), p_target_rows, generator)
        if result.n_accepted:
            accepted += 1
        else:
            assert result.next_token != x
        counts[first_emitted(result, [x])] += 1
    assert abs(accepted / n - 0.30) < 5 * math.sqrt(0.3 * 0.7 / n)
    assert chisquare_p(counts, P_TARGET) > 0.01


# --------------------------------------------------------------------------- branch tests


def test_residual_of_equal_distributions_is_target_not_nan():
    """max(0, p − p) has no mass: the residual falls back to p_target instead of 0/0 = NaN."""
    residual = residual_distribution(P_TARGET, P_TARGET.clone())
    assert torch.isfinite(residual).all()
    torch.testing.assert_close(residual, P_TARGET)
    # Batched rows: one equal pair, one ordinary pair; each row is handled on its own.
    rows = residual_distribution(torch.stack([P_TARGET, P_TARGET]), torch.stack([P_TARGET, P_DRAFT]))
    torch.testing.assert_close(rows[0], P_TARGET)
    torch.testing.assert_close(rows[1], torch.tensor([0.0, 0.15, 0.0, 0.20, 0.10, 0.0]) / 0.45)


def test_zero_target_probability_never_accepted_even_at_uniform_zero(force_uniform):
    """A draft token the target gives probability exactly 0 is rejected for every uniform, u = 0 included.

    The target logit of the drafted token is -inf; the draft gives it anything from certainty down
    to a denormal-scale probability. The resampled token then comes from the residual, which has
    no mass on it either.
    """
    force_uniform(0.0)
    target_logits = torch.tensor([[-math.inf, 1.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0]])
    p_target = logits_to_probs(target_logits, SamplingConfig())
    assert p_target[0, 0] == 0.0
    for draft_logits in ([10.0, -10.0, -10.0, -10.0], [0.0, 0.0, 0.0, 0.0], [-80.0, 10.0, 0.0, 0.0]):
        p_draft = logits_to_probs(torch.tensor([draft_logits]), SamplingConfig())
        for seed in range(20):
            result = verify(torch.tensor([0]), p_draft, p_target, torch.Generator().manual_seed(seed))
            assert result.n_accepted == 0
            assert result.next_kind == "resampled"
            assert result.next_token != 0


def test_target_at_least_draft_always_accepted_even_at_largest_uniform(force_uniform):
    """min(1, p_target/p_draft) = 1 means accepted for every uniform, including the largest below 1."""
    force_uniform(U_MAX)
    p_target = torch.stack([P_TARGET, P_TARGET])
    for token in (1, 3, 4, 5):  # p_draft <= p_target for these
        result = verify(torch.tensor([token]), P_DRAFT.view(1, -1), p_target, torch.Generator().manual_seed(0))
        assert result.n_accepted == 1 and result.next_kind == "bonus"
        assert result.accept_prob.item() == 1.0


def test_greedy_probabilities_are_one_hot_at_argmax():
    """Temperature 0 gives one-hot rows at the argmax (lowest id on ties), whatever top-k/top-p say."""
    logits = torch.tensor([[0.0, 10.0, -10.0, 3.0], [5.0, -math.inf, 5.0, 1.0]])
    for config in (SamplingConfig(temperature=0.0), SamplingConfig(temperature=0.0, top_k=2, top_p=0.1)):
        probs = logits_to_probs(logits, config)
        assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("uniform", [0.0, 0.5, U_MAX])
def test_greedy_verify_accepts_iff_argmax_matches(force_uniform, uniform):
    """At temperature 0, a draft is accepted iff it is the target's argmax, for any uniform.

    Block of 3 drafts [1, 2, 0] against target argmaxes [1, 2, 3, 0]: the first two are accepted,
    the third rejected, and the token that replaces it is the target's argmax 3 (the residual of
    two one-hots is the target's one-hot). A fully matching block gets the argmax bonus.
    """
    force_uniform(uniform)
    greedy = SamplingConfig(temperature=0.0)
    target_logits = torch.full((4, 5), -10.0)
    for row, best in enumerate([1, 2, 3, 0]):
        target_logits[row, best] = 10.0
    p_target = logits_to_probs(target_logits, greedy)
    drafts = torch.tensor([1, 2, 0])
    p_draft = torch.nn.functional.one_hot(drafts, 5).float()
    result = verify(drafts, p_draft, p_target, torch.Generator().manual_seed(0))
    assert (result.n_accepted, result.next_kind, result.next_token) == (2, "resampled", 3)

    drafts = torch.tensor([1, 2, 3])
    p_draft = torch.nn.functional.one_hot(drafts, 5).float()
    result = verify(drafts, p_draft, p_target, torch.Generator().manual_seed(0))
    assert (result.n_accepted, result.next_kind, result.next_token) == (3, "bonus", 0)


def test_flags_after_first_rejection_never_count(force_uniform):
    """The accepted count is the accepted *prefix*: a draft after the first rejection never counts.

    Block [0, 1, 2]: the target gives draft 0 probability 0 (logit -inf: rejected for any
    uniform), while drafts 1 and 2 have target probability 1 (accepted for any uniform). The
    accept flags are [False, True, True], but only the prefix counts: n_accepted = 0 and the
    next token is resampled at position 0. Same with the rejection in the middle: [True, False,
    True] gives 1.
    """
    force_uniform(0.0)
    v = 4
    p_draft = torch.full((3, v), 1.0 / v)

    def target_rows(reject_at: int) -> torch.Tensor:
        logits = torch.full((4, v), -math.inf)
        logits[:, 3] = 0.0
        for position, token in enumerate([0, 1, 2]):
            if position != reject_at:
                logits[position] = -math.inf
                logits[position, token] = 10.0
        return logits_to_probs(logits, SamplingConfig())

    result = verify(torch.tensor([0, 1, 2]), p_draft, target_rows(0), torch.Generator().manual_seed(0))
    assert (result.n_accepted, result.next_kind, result.next_token) == (0, "resampled", 3)
    assert result.p_target_drafted.tolist() == [0.0, 1.0, 1.0]

    result = verify(torch.tensor([0, 1, 2]), p_draft, target_rows(1), torch.Generator().manual_seed(0))
    assert (result.n_accepted, result.next_kind, result.next_token) == (1, "resampled", 3)


def test_empty_block_samples_from_first_target_row():
    """K = 0 (nothing drafted): verify draws the next token from p_target[0], as plain decoding does."""
    p_target = torch.tensor([[0.0, 0.0, 1.0]])
    result = verify(torch.zeros(0, dtype=torch.long), torch.zeros(0, 3), p_target, torch.Generator())
    assert (result.n_accepted, result.next_token, result.next_p_target) == (0, 2, 1.0)


def test_verify_rejects_mismatched_shapes():
    """Rows that do not line up with the drafts (K, K+1, same V) are refused, not silently broadcast."""
    generator = torch.Generator()
    with pytest.raises(ValueError, match="shape mismatch"):
        verify(torch.tensor([0, 1]), torch.rand(2, 6), torch.rand(2, 6), generator)  # needs K+1 target rows
    with pytest.raises(ValueError, match="shape mismatch"):
        verify(torch.tensor([0]), torch.rand(1, 5), torch.rand(2, 6), generator)  # vocab widths differ


@pytest.mark.parametrize(
    "bad",
    [float("nan"), float("inf")],
    ids=["nan", "posinf"],
)
def test_non_finite_logits_raise(bad):
    """NaN or +inf in any logit raises NonFiniteLogitsError, at any temperature."""
    logits = torch.tensor([[0.0, 1.0, 2.0], [0.5, 0.5, 0.5]])
    logits[1, 2] = bad
    for config in (SamplingConfig(), SamplingConfig(temperature=0.0), SamplingConfig(top_k=1, top_p=0.5)):
        with pytest.raises(NonFiniteLogitsError):
            logits_to_probs(logits, config)


def test_all_masked_row_raises_but_some_masked_is_fine():
    """-inf marks a forbidden token and is allowed; a row with every token forbidden is an error."""
    probs = logits_to_probs(torch.tensor([-math.inf, 0.0, -math.inf, 0.0]), SamplingConfig())
    assert probs.tolist() == [0.0, 0.5, 0.0, 0.5]
    with pytest.raises(NonFiniteLogitsError):
        logits_to_probs(torch.full((2, 3), -math.inf), SamplingConfig())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"top_k": -1},
        {"top_p": 0.0},
        {"top_p": -0.5},
        {"top_p": 1.5},
        {"top_p": float("nan")},
    ],
    ids=str,
)
def test_sampling_config_rejects_bad_values(kwargs):
    """Out-of-range settings fail when the config is built, not later as NaN probabilities."""
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def test_sampling_config_accepts_edge_values():
    """The documented edges are valid: greedy, filters off, top_p = 1."""
    SamplingConfig(temperature=0.0, top_k=0, top_p=1.0)
    SamplingConfig(temperature=2.0, top_k=1, top_p=1e-6)


def test_tiny_temperature_approaches_greedy_without_nan():
    """A temperature near 0 gives (nearly) the argmax one-hot, never NaN from overflowing logits.

    50 / 1e-40 overflows float32 to +inf, and softmax of +inf is NaN; the limit is the argmax
    (shared equally between tied maxima).
    """
    logits = torch.tensor([[0.0, 50.0, 1.0, 50.0], [-math.inf, 3.0, 2.0, 1.0]])
    probs = logits_to_probs(logits, SamplingConfig(temperature=1e-40, top_k=3, top_p=0.9))
    assert probs.tolist() == [[0.0, 0.5, 0.0, 0.5], [0.0, 1.0, 0.0, 0.0]]
    # Below float32's range (1e-50 rounds to 0.0 in float32, so the maximum became 0 / 0 = NaN).
    for temperature in (1e-46, 1e-50, 5e-324):
        tiny = logits_to_probs(logits, SamplingConfig(temperature=temperature))
        assert tiny.tolist() == [[0.0, 0.5, 0.0, 0.5], [0.0, 1.0, 0.0, 0.0]], temperature


def test_top_p_keeps_at_least_one_token():
    """A nucleus smaller than the top token's mass still keeps that token (never an empty row)."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    probs = logits_to_probs(logits, SamplingConfig(top_p=1e-6))
    assert probs[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert (probs[1] > 0).sum() == 1 and probs[1].sum() == 1.0


def test_temperature_top_k_top_p_match_hand_computation():
    """Temperature divides the logits, top-k keeps the k largest, top-p the smallest set reaching p.

    Logits log([0.5, 0.3, 0.15, 0.05]): top_p = 0.75 keeps {0, 1} (mass before token 2 is
    0.8 ≥ 0.75) → [0.625, 0.375, 0, 0]; top_k = 3 → [0.5, 0.3, 0.15, 0] / 0.95; temperature 0.5
    squares the probabilities before normalising.
    """
    base = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = base.log()
    torch.testing.assert_close(
        logits_to_probs(logits, SamplingConfig(top_p=0.75)), torch.tensor([0.625, 0.375, 0.0, 0.0])
    )
    torch.testing.assert_close(
        logits_to_probs(logits, SamplingConfig(top_k=3)), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95
    )
    torch.testing.assert_close(
        logits_to_probs(logits, SamplingConfig(temperature=0.5)), base**2 / (base**2).sum()
    )
    # Order: temperature, then top-k, then top-p on the tempered distribution. Tempered:
    # ∝ [0.25, 0.09, 0.0225, 0.0025]; top-k 3 drops token 3; top-p 0.9 then keeps {0, 1} (mass
    # before token 2 is 0.34 / 0.3625 = 0.938 ≥ 0.9).
    combined = logits_to_probs(logits, SamplingConfig(temperature=0.5, top_k=3, top_p=0.9))
    torch.testing.assert_close(combined, torch.tensor([0.25, 0.09, 0.0, 0.0]) / 0.34)
    # Output is float32 even for half-precision logits.
    assert logits_to_probs(logits.to(torch.bfloat16), SamplingConfig()).dtype == torch.float32


# Zeros inside the support and at both ends of the vocabulary: the ids an inverse-CDF sampler
# could wrongly pick through rounding or an off-by-one.
P_GAPPY = torch.tensor([0.0, 0.15, 0.0, 0.0, 0.35, 0.2, 0.0, 0.3, 0.0, 0.0])


def test_sample_follows_distribution_and_never_picks_zero_probability_ids():
    """20,000 rows sampled in one call follow P_GAPPY (chi-square, p > 0.01, see the module
    docstring for the bound) and never land on a zero-probability id."""
    generator = torch.Generator().manual_seed(7)
    ids = sample(P_GAPPY.expand(20_000, -1), generator)
    assert ids.shape == (20_000,) and ids.dtype == torch.int64
    counts = torch.bincount(ids, minlength=P_GAPPY.numel())
    assert counts[P_GAPPY == 0].sum() == 0
    assert chisquare_p(counts, P_GAPPY) > 0.01


@pytest.mark.parametrize("uniform, expected", [(0.0, 1), (U_MAX, 7), (1.0, 7)])
def test_sample_extreme_uniforms_stay_on_the_support(force_uniform, uniform, expected):
    """u = 0 gives the first id with mass, the largest uniform the last one, never a trailing
    zero-probability id. u = 1 is outside torch.rand's range but stands for ``u * total``
    rounding up to the total, which the sampler must also survive."""
    force_uniform(uniform)
    assert int(sample(P_GAPPY, None)) == expected
    # Unnormalised rows (mass 2) and a 250k-id vocabulary with the same trailing zeros.
    assert int(sample(2 * P_GAPPY, None)) == expected
    wide = torch.zeros(250_000)
    wide[: P_GAPPY.numel()] = P_GAPPY
    assert int(sample(wide, None)) == expected


def test_sample_one_hot_rows_give_their_argmax():
    """Greedy rows (one-hot, as logits_to_probs makes at T = 0) give their argmax for any seed,
    including the first and last id of a 49,152-id vocabulary."""
    rows = torch.zeros(3, 49_152)
    rows[0, 0] = rows[1, 12_345] = rows[2, -1] = 1.0
    for seed in range(20):
        assert sample(rows, torch.Generator().manual_seed(seed)).tolist() == [0, 12_345, 49_151]
