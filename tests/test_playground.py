"""The what-if playground (specviz.ui.teach.playground): closed forms, best K, and a Monte-Carlo run of the
acceptance process that agrees with the closed form within a bound derived from its variance."""

from __future__ import annotations

import math

import pytest

from specviz.figures import theory
from specviz.ui.teach import playground


def test_closed_form_matches_the_papers_formulas():
    """α = 0.8, K = 4: E[N] = (1 − 0.8⁵)/0.2 = 3.3616; with c = 0.1, v = 1 the speedup is that ÷ 1.4."""
    cf = playground.closed_form(0.8, 4, 0.1, 1.0)
    assert cf.tokens_per_pass == pytest.approx(3.3616)
    assert cf.round_cost == pytest.approx(1.4)
    assert cf.speedup == pytest.approx(3.3616 / 1.4)
    assert cf.ceiling == pytest.approx(5 / 1.4)


def test_zero_alpha_is_a_slowdown_of_one_over_the_round_cost():
    cf = playground.closed_form(0.0, 3, 0.2, 1.1)
    assert cf.tokens_per_pass == 1.0
    assert cf.speedup == pytest.approx(1 / (3 * 0.2 + 1.1))
    assert cf.best_k == 1  # drafting nothing useful: the least drafting is the least waste


def test_best_k_is_the_argmax_over_one_to_sixteen():
    for alpha, c, v in [(0.8, 0.05, 1.0), (0.6, 0.2, 1.0), (0.95, 0.01, 1.2), (0.3, 0.5, 1.0)]:
        k, s = playground.best_k(alpha, c, v)
        speeds = [theory.expected_speedup(alpha, kk, c, v) for kk in range(1, 17)]
        assert s == pytest.approx(max(speeds))
        assert k == speeds.index(max(speeds)) + 1


def test_free_drafts_and_perfect_acceptance_want_the_longest_lookahead():
    assert playground.best_k(1.0, 0.0, 1.0) == (16, 17.0)


def test_speedup_grid_over_k_and_over_c():
    alphas = [0.0, 0.5, 0.9]
    z = playground.speedup_grid(alphas, ks=[1, 4], c=0.1)
    assert len(z) == 2 and len(z[0]) == 3
    assert z[1][2] == pytest.approx(theory.expected_speedup(0.9, 4, 0.1))
    z = playground.speedup_grid(alphas, cs=[0.0, 1.0], k=2)
    assert z[1][0] == pytest.approx(1 / 3)  # α = 0, K = 2, c = 1: a round costs 3 steps for 1 token
    with pytest.raises(ValueError):
        playground.speedup_grid(alphas)


def test_variance_of_tokens_per_pass_from_the_distribution():
    assert playground.tokens_per_pass_variance(0.0, 4) == 0.0
    assert playground.tokens_per_pass_variance(1.0, 4) == pytest.approx(0.0, abs=1e-12)
    # K = 1: N is 1 + Bernoulli(α), variance α(1 − α).
    assert playground.tokens_per_pass_variance(0.3, 1) == pytest.approx(0.21)


@pytest.mark.parametrize("alpha,k", [(0.2, 2), (0.6, 4), (0.9, 8)])
def test_monte_carlo_agrees_with_the_closed_form(alpha, k):
    """The simulated mean of n = rounds × runs independent passes has standard error
    σ/√n with σ² = Var N computed exactly from the truncated geometric distribution. Five standard
    errors bound the deviation with false-failure probability below 6e-7 per case (normal tail;
    n = 40,000 makes the CLT approximation tight for a variable bounded in [1, K+1])."""
    mc = playground.monte_carlo(alpha, k, 0.1, 1.0, rounds=20, runs=2000, seed=1)
    expected = theory.expected_tokens_per_pass(alpha, k)
    se = math.sqrt(playground.tokens_per_pass_variance(alpha, k) / (20 * 2000))
    assert abs(mc.tokens_per_pass - expected) < 5 * se
    assert mc.tokens_per_pass_se == pytest.approx(se, rel=0.05)
    assert mc.speedup == pytest.approx(mc.tokens_per_pass / (k * 0.1 + 1.0))
    assert sum(mc.counts) == 40_000 and len(mc.counts) == k + 1
    lo, hi = mc.spread(mc.run_tokens_per_pass)
    assert lo <= expected <= hi


def test_monte_carlo_is_reproducible_from_its_seed():
    a = playground.monte_carlo(0.7, 4, 0.05, rounds=10, runs=50, seed=3)
    b = playground.monte_carlo(0.7, 4, 0.05, rounds=10, runs=50, seed=3)
    assert a == b


@pytest.mark.parametrize("kwargs", [dict(alpha=1.5), dict(k=0), dict(c=-1), dict(v=0), dict(rounds=0),
                                    dict(runs=10**6)])
def test_monte_carlo_rejects_out_of_domain_arguments(kwargs):
    args = dict(alpha=0.5, k=4, c=0.1, v=1.0, rounds=10, runs=10)
    args.update(kwargs)
    with pytest.raises(ValueError):
        playground.monte_carlo(**args)


def test_from_analysis_takes_alpha_k_c_v_of_a_run():
    row = {"alpha": 0.7, "k": 4, "cost_ratio_c": 0.02, "verify_cost_v": 1.1, "speedup": 1.8}
    assert playground.from_analysis(row) == {"alpha": 0.7, "k": 4, "c": 0.02, "v": 1.1}
    assert playground.from_analysis({"alpha": None, "k": 4, "cost_ratio_c": 0.1}) is None
    assert playground.from_analysis(None) is None


def test_playground_charts_build_with_plotly_validation():
    import plotly.graph_objects as go

    from specviz.ui.draw import charts

    alphas, ks = [0.0, 0.5, 1.0], [1, 2, 4]
    z = playground.speedup_grid(alphas, ks=ks, c=0.2)
    fig = go.Figure(charts.playground_map_figure(alphas, ks, z, "K", point=(0.5, 2)).to_dict())
    assert fig.data[0].colorscale[1][0] == pytest.approx(1 / fig.data[0].zmax)  # white at speedup 1
    assert fig.data[1].contours.start == 1.0  # the break-even contour
    mc = playground.monte_carlo(0.5, 4, 0.2, rounds=10, runs=100)
    fig = go.Figure(charts.monte_carlo_figure(list(mc.counts), theory.tokens_per_pass_distribution(0.5, 4),
                                              mc.tokens_per_pass, theory.expected_tokens_per_pass(0.5, 4)).to_dict())
    assert sum(fig.data[0].y) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        charts.playground_map_figure(alphas, ks, z[:2], "K")


def test_a_reveal_verdict_is_cleared_when_alpha_c_or_v_change():
    """the Reveal verdict stayed on screen after α changed, judging a guess
    against figures no longer shown. A change of α, c or v clears the score and hides the best K."""
    import app

    from specviz.ui.tabs.playground_tab import forget_verdict

    assert forget_verdict() == ("", False)
    assert forget_verdict("**Close**: 2.1 against 2.0", True) == ("", False)  # a verdict: guess again
    assert forget_verdict("", True) == ("", True)  # shown without a guess: it follows the sliders
    ids = {block.elem_id: block._id for block in app.demo.blocks.values() if getattr(block, "elem_id", None)}
    clearing = [fn for fn in app.demo.fns.values() if fn.fn is forget_verdict]
    assert len(clearing) == 1
    triggers = {(getattr(block, "_id", block), event) for block, event in clearing[0].targets}
    for name in ("sv-pg-alpha", "sv-pg-c", "sv-pg-v"):
        assert (ids[name], "change") in triggers, name
    assert ids["sv-pg-score"] in [block._id for block in clearing[0].outputs]
