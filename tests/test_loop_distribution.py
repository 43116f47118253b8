"""The first emitted token of the whole speculative loop follows the target's distribution.

Each run is a real :class:`~specviz.core.engine.Generation`: a :class:`~specviz.drafters.ModelDrafter`
around a tiny random draft model proposes K = 1 token from a one-token prompt, the tiny target
verifies it in one forward pass, and the first emitted token (accepted draft or residual resample)
is recorded. Seeds 0..N−1 give N independent runs (about 5 ms each on one thread of this 2-core machine).

Design (the numbers are checked by ``test_sample_size_catches_total_variation_0_05_with_99_percent_power``):

* **Cells.** Vocabulary V = 8 and lm_heads scaled ×8, so every token is its own chi-square cell:
  nothing is pooled, hence a sampler whose output is at total-variation distance δ from p_target
  over tokens is at distance δ over the cells too. The smallest p_target is 0.019, so with
  N = 3,650 every cell expects ≥ 69 counts (≥ 5 needed for Pearson's approximation).
  Degrees of freedom df = V − 1 = 7; the 1% critical value is χ²₀.₉₉(7) = 18.48.
* **Level.** For an exact sampler Pearson's X² is (asymptotically) χ²(7), so p > 0.01 fails in 1%
  of seed ranges. The seeds are fixed, so the test is deterministic.
* **Power.** If the sampler emits p' with TV(p', p) = δ, X² is approximately noncentral χ²(df, λ)
  with λ = N · Σᵢ (p'ᵢ − pᵢ)² / pᵢ. By Cauchy–Schwarz,
  2δ = Σ |p'ᵢ − pᵢ| = Σ (|p'ᵢ − pᵢ| / √pᵢ) · √pᵢ ≤ √(Σ (p'ᵢ − pᵢ)² / pᵢ) · √(Σ pᵢ),
  so Σ (p'ᵢ − pᵢ)² / pᵢ ≥ 4δ² and λ ≥ 4Nδ². Equality needs |p' − p| ∝ p: mass δ moved
  proportionally from a set of cells holding half of p to the other half (the least favourable
  perturbation; moving δ between the two largest cells gives λ = Nδ²(1/p₁ + 1/p₂), twice as
  much here). Power grows with λ, so for δ = 0.05 and N = 3,650: λ ≥ 36.5 and
  P(ncx2(7, 36.5) > 18.48) = 0.9902 ≥ 0.99, the fewest runs (in fifties) that promise it
  (3,600 would give 0.989; 4,000, used before, bought 0.995 for 10% more time). A Monte Carlo
  of Pearson's test on multinomial draws from the least favourable p' for this p_target
  confirms the approximation at this N (0.9915 and 0.9908 for its two directions).
* **Both branches carry weight.** The draft is an unrelated model: TV(p_draft, p_target) = 0.48,
  so the draft token is rejected, and the first token comes from the residual
  normalize(max(0, p_target − p_draft)), in 48% of runs. A fault in either the accept test or
  the residual moves a large share of the output.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from helpers import tiny_llama
from scipy import stats

import specviz.core.sampling
from specviz.drafters import ModelDrafter
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig, logits_to_probs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 8
LM_HEAD_SCALE = 8.0
PROMPT = [1]
SAMPLED = SamplingConfig(temperature=1.0)
N = 3_650  #: runs per histogram (the fewest that give the stated power)
DELTA = 0.05  #: total-variation distance a faulty sampler must be caught at
LEVEL = 0.01  #: chi-square rejection level
POWER = 0.99  #: required probability of catching a TV-0.05 fault


@pytest.fixture(scope="module")
def pair():
    """Target, draft, and their float64 next-token distributions after PROMPT (temperature 1)."""
    target = tiny_llama(0, vocab_size=VOCAB, lm_head_scale=LM_HEAD_SCALE)
    draft = tiny_llama(1, vocab_size=VOCAB, lm_head_scale=LM_HEAD_SCALE)
    with torch.inference_mode():
        p_target = logits_to_probs(target(input_ids=torch.tensor([PROMPT])).logits[0, -1], SAMPLED).double()
        p_draft = logits_to_probs(draft(input_ids=torch.tensor([PROMPT])).logits[0, -1], SAMPLED).double()
    return target, draft, p_target / p_target.sum(), p_draft / p_draft.sum()


def first_tokens(target, draft, seeds) -> tuple[torch.Tensor, int]:
    """Histogram of the first emitted token over one speculative run per seed, and how many of
    those runs rejected the draft token (K = 1, so the first round emits the accepted draft plus
    a bonus, or a resampled token)."""
    counts = torch.zeros(VOCAB, dtype=torch.long)
    rejected = 0
    for seed in seeds:
        gen = Generation(target, PROMPT, ModelDrafter(draft, VOCAB), k=1, sampling=SAMPLED, max_new_tokens=2,
                         seed=seed)
        first_round = next(iter(gen))
        counts[first_round.emitted[0].id] += 1
        rejected += first_round.n_accepted == 0
    return counts, rejected


def chisquare_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square p-value of ``counts`` against ``probs``, one cell per token (no pooling)."""
    expected = probs.double() * float(counts.sum())
    assert float(expected.min()) >= 5.0, "a cell expects < 5 counts: the chi-square approximation would not hold"
    return float(stats.chisquare(counts.double().numpy(), expected.numpy()).pvalue)


def tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def least_favourable(p: np.ndarray, delta: float) -> list[np.ndarray]:
    """Perturbations of ``p`` at TV ``delta`` that minimise Pearson's noncentrality: mass moved
    proportionally between the split of the cells whose mass is closest to 1/2, both directions."""
    best = min((cells for r in range(1, len(p)) for cells in itertools.combinations(range(len(p)), r)),
               key=lambda cells: abs(p[list(cells)].sum() - 0.5))
    in_a = np.isin(np.arange(len(p)), best)
    a = p[in_a].sum()
    return [np.where(in_a, p * (1 + sign * delta / a), p * (1 - sign * delta / (1 - a))) for sign in (1, -1)]


def test_sample_size_catches_total_variation_0_05_with_99_percent_power(pair):
    """The module docstring's power claim, computed: λ ≥ 4Nδ² = 36.5, P(ncx2(7, 36.5) > χ²₀.₉₉(7)) ≥ 0.99.

    Also checked without the asymptotic approximation: 20,000 simulated histograms of N draws
    from each least favourable p' (TV exactly 0.05) are rejected at level 0.01 in ≥ 99% of cases.
    """
    _, _, p_target, _ = pair
    p = p_target.numpy()
    assert N * p.min() >= 5.0  # every cell is its own cell: no pooling hides a perturbation
    df = VOCAB - 1
    critical = stats.chi2.ppf(1 - LEVEL, df)
    lam = 4 * N * DELTA**2
    assert df == 7 and critical == pytest.approx(18.475, abs=1e-3) and lam == pytest.approx(36.5)
    assert stats.ncx2.sf(critical, df, lam) >= POWER  # 0.9902

    rng = np.random.default_rng(0)
    for p_fault in least_favourable(p, DELTA):
        assert p_fault.min() >= 0 and 0.5 * np.abs(p_fault - p).sum() == pytest.approx(DELTA)
        assert N * ((p_fault - p) ** 2 / p).sum() >= lam  # the Cauchy–Schwarz bound
        counts = rng.multinomial(N, p_fault, size=20_000)
        statistic = ((counts - N * p) ** 2 / (N * p)).sum(axis=1)
        assert (statistic > critical).mean() >= POWER


def test_first_token_through_the_loop_follows_the_target_not_the_draft(pair):
    """3,650 seeded runs of the real loop: the first token passes chi-square against p_target at
    level 0.01, and is rejected against p_draft at p < 1e-6 (the test tells the two apart).

    The draft token is rejected in a share of runs equal to TV(p_draft, p_target) = 0.48
    (binomial σ = 0.008), so the residual branch produces about half of the histogram.
    """
    target, draft, p_target, p_draft = pair
    counts, rejected = first_tokens(target, draft, range(N))
    assert abs(rejected / N - tv(p_target, p_draft)) < 0.04
    assert 0.4 < rejected / N < 0.6
    assert chisquare_p(counts, p_target) > LEVEL
    assert chisquare_p(counts, p_draft) < 1e-6


def test_sampler_off_by_total_variation_0_05_is_rejected(pair, monkeypatch):
    """A deliberately broken loop whose output is exactly TV 0.05 from p_target fails the same test.

    The fault: after a rejection, resample from (1 − w)·residual + w·p_target instead of the
    residual (w = 1 is the classic bug "resample from the target"). The output then is
    p' = p + w·r·(p − residual), with r = TV(p_draft, p_target) the rejection probability, so
    TV(p', p) = w·r·TV(p, residual); w is chosen to make that exactly δ = 0.05. The broken
    histogram (fresh seeds) matches p' (p > 0.01: the fault is what it claims to be) and is
    rejected against p_target at p < 0.01, as the power bound promises for any fault of this size.
    Here w = 0.37; this p' is not the least favourable shape, so its λ = 48 (power 0.9993).
    """
    target, draft, p_target, p_draft = pair
    residual = (p_target - p_draft).clamp_min(0)
    residual = residual / residual.sum()
    r = tv(p_target, p_draft)
    w = DELTA / (r * tv(p_target, residual))
    assert 0 < w < 1
    p_fault = p_target + w * r * (p_target - residual)
    assert tv(p_fault, p_target) == pytest.approx(DELTA)

    correct = specviz.core.sampling.residual_distribution

    def blended_residual(p_t, p_d):
        return (1 - w) * correct(p_t, p_d) + w * p_t

    monkeypatch.setattr(specviz.core.sampling, "residual_distribution", blended_residual)
    counts, _ = first_tokens(target, draft, range(N, 2 * N))
    assert chisquare_p(counts, p_fault) > LEVEL
    assert chisquare_p(counts, p_target) < LEVEL
