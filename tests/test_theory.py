"""Closed forms of specviz.figures.theory (Leviathan et al. 2023, eq. 1 and Theorem 3.8)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from specviz.figures.theory import (
    expected_speedup,
    expected_tokens_per_pass,
    tokens_per_pass_distribution,
)

ALPHAS = [0.0, 0.05, 0.3, 0.5, 0.8, 0.95, 0.999, 1.0]
KS = [1, 2, 4, 7, 16]


@pytest.mark.parametrize("k", [0, *KS])
def test_zero_acceptance_emits_one_token_per_pass(k):
    assert expected_tokens_per_pass(0.0, k) == 1.0


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("c", [0.0, 0.05, 0.5, 2.0])
def test_zero_acceptance_speedup_is_one_over_kc_plus_one(k, c):
    assert expected_speedup(0.0, k, c) == pytest.approx(1.0 / (k * c + 1.0), rel=1e-15)


@pytest.mark.parametrize("k", [0, *KS])
def test_full_acceptance_emits_exactly_k_plus_one(k):
    assert expected_tokens_per_pass(1.0, k) == float(k + 1)
    assert expected_tokens_per_pass(1, k) == float(k + 1)  # an int alpha too


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k", [0, *KS])
def test_expected_tokens_equals_geometric_sum(alpha, k):
    assert expected_tokens_per_pass(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)), rel=1e-12)


@pytest.mark.parametrize("k", [1, 4, 16])
@pytest.mark.parametrize("eps", [1e-6, 1e-9, 1e-12, 1e-15])
def test_expected_tokens_is_accurate_just_below_alpha_one(k, eps):
    # The naive (1 - a**(K+1)) / (1 - a) loses ~eps**-1 * 1e-16 relative precision here.
    alpha = 1.0 - eps
    exact = sum(alpha**i for i in range(k + 1))
    assert expected_tokens_per_pass(alpha, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.1, 0.6, 0.9])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("c", [0.0, 0.1, 1.0])
def test_speedup_matches_leviathan_theorem_3_8(alpha, k, c):
    leviathan = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
    assert expected_speedup(alpha, k, c) == pytest.approx(leviathan, rel=1e-12)


def test_speedup_divides_by_the_verify_cost():
    base = expected_speedup(0.7, 4, 0.1)
    # Round cost K*c + verify_cost: 0.4 + 1.0 -> 0.4 + 1.6.
    assert expected_speedup(0.7, 4, 0.1, verify_cost=1.6) == pytest.approx(base * 1.4 / 2.0, rel=1e-12)


def test_speedup_below_one_when_drafting_is_expensive_and_useless():
    assert expected_speedup(0.1, 4, 0.5) < 1.0
    assert expected_speedup(0.9, 4, 0.02) > 1.0


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k", [0, *KS])
def test_distribution_sums_to_one_and_its_mean_is_expected_tokens(alpha, k):
    dist = tokens_per_pass_distribution(alpha, k)
    assert len(dist) == k + 1
    assert all(p >= 0.0 for p in dist)
    assert math.fsum(dist) == pytest.approx(1.0, abs=1e-12)
    mean = math.fsum(n * p for n, p in enumerate(dist, start=1))
    assert mean == pytest.approx(expected_tokens_per_pass(alpha, k), rel=1e-12)


def test_distribution_terms():
    assert tokens_per_pass_distribution(0.5, 3) == [0.5, 0.25, 0.125, 0.125]
    assert tokens_per_pass_distribution(0.0, 3) == [1.0, 0.0, 0.0, 0.0]
    assert tokens_per_pass_distribution(1.0, 3) == [0.0, 0.0, 0.0, 1.0]
    assert tokens_per_pass_distribution(0.7, 0) == [1.0]


@pytest.mark.parametrize("alpha,k", [(0.3, 3), (0.8, 4), (0.95, 6), (0.6, 1)])
def test_distribution_matches_monte_carlo_run_lengths(alpha, k):
    """Simulate M passes: accepted drafts = geometric run length of successes, capped at K.

    ``rng.geometric(1 - alpha)`` is the trial of the first failure (>= 1), so ``min(G, K + 1)``
    is the number of tokens a pass emits (accepted drafts + the resampled/bonus token).

    Bound: the observed frequency of n is Binomial(M, p_n) / M, with standard deviation
    sigma_n = sqrt(p_n (1 - p_n) / M). We allow 5 sigma_n + 1/M per cell; a 5-sigma deviation has
    two-sided probability < 6e-7 per cell (normal approximation), so < 1e-5 over all cells of all
    cases. The sample mean is allowed 5 sigma_N / sqrt(M), sigma_N^2 being the distribution's
    variance. The seed makes the run deterministic anyway; the bound says the test is not tuned.
    """
    m = 40_000
    rng = np.random.default_rng(20230518 + k)
    n = np.minimum(rng.geometric(1.0 - alpha, size=m), k + 1)
    freq = np.bincount(n, minlength=k + 2)[1:] / m
    dist = np.array(tokens_per_pass_distribution(alpha, k))
    assert freq.shape == dist.shape
    bound = 5.0 * np.sqrt(dist * (1.0 - dist) / m) + 1.0 / m
    assert np.all(np.abs(freq - dist) <= bound), (freq, dist, bound)

    support = np.arange(1, k + 2)
    mean = expected_tokens_per_pass(alpha, k)
    var = float(np.sum(dist * (support - mean) ** 2))
    assert abs(n.mean() - mean) <= 5.0 * math.sqrt(var / m)


@pytest.mark.parametrize(
    "call",
    [
        lambda: expected_tokens_per_pass(-0.01, 4),
        lambda: expected_tokens_per_pass(1.01, 4),
        lambda: expected_tokens_per_pass(float("nan"), 4),
        lambda: expected_tokens_per_pass(0.5, -1),
        lambda: expected_tokens_per_pass(0.5, 2.5),
        lambda: expected_tokens_per_pass("0.5", 4),
        lambda: tokens_per_pass_distribution(1.5, 4),
        lambda: tokens_per_pass_distribution(0.5, -1),
        lambda: expected_speedup(0.5, 0, 0.1),
        lambda: expected_speedup(0.5, 4, -0.1),
        lambda: expected_speedup(0.5, 4, float("inf")),
        lambda: expected_speedup(0.5, 4, 0.1, verify_cost=0.0),
        lambda: expected_speedup(-0.5, 4, 0.1),
    ],
)
def test_out_of_domain_arguments_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_theory_analysis_and_charts_import_neither_torch_nor_gradio():
    code = "import sys, specviz.figures.theory, specviz.ui.draw.charts, specviz.figures.analysis; print('torch' in sys.modules, 'gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_launch_bound_cost_ratio_is_the_layer_ratio():
    """GPU.md, "CUDA semantics": eager batch-1 decoding on a fast GPU costs about layers × launches,
    so c ≈ draft layers ÷ target layers; at c ≥ 1 not even α = 1 beats plain decoding."""
    from specviz.figures.theory import launch_bound_cost_ratio

    assert launch_bound_cost_ratio(30, 24) == 1.25  # SmolLM2-135M → SmolLM2-1.7B
    assert launch_bound_cost_ratio(24, 28) == pytest.approx(0.857, abs=1e-3)  # Qwen2.5-0.5B → 7B
    assert expected_speedup(1.0, 4, launch_bound_cost_ratio(30, 24)) == pytest.approx(5 / 6)
    for k in range(1, 17):
        assert expected_speedup(1.0, k, 1.0) == 1.0 and expected_speedup(1.0, k, 1.25) < 1.0
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="integer >= 1"):
            launch_bound_cost_ratio(bad, 24)
