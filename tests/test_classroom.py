"""The classroom's predictions: the Playground keeps the best K back until it is guessed or asked
for and scores a guess by its speedup against the best one; a temperature sweep's status says
whether the learner's prediction of α matched the measured trend (specviz.run.sweep.alpha_trend)."""

from __future__ import annotations

import gradio as gr
import pytest

from specviz.run.sweep import alpha_trend
from specviz.ui import tour
from specviz.ui.tabs.experiments_tab import prediction_verdict
from specviz.ui.tabs.playground_tab import BEST_K_HIDDEN, score_guess, shown_figures
from specviz.ui.teach import playground

SKIP = type(gr.skip())


def test_the_figures_hold_the_best_k_back_until_revealed():
    hidden = shown_figures(0.6, 5, 0.2, 1.0, False)
    assert hidden.startswith("**2.38** expected tokens per pass · **1.19×** expected speedup")
    assert BEST_K_HIDDEN in hidden and "**Best K** for" not in hidden
    shown = shown_figures(0.6, 5, 0.2, 1.0, True)
    cf = playground.closed_form(0.6, 5, 0.2, 1.0)
    assert f"**K = {cf.best_k}**" in shown and BEST_K_HIDDEN not in shown


def test_a_guess_is_scored_against_the_best_speedup():
    best, best_s = playground.best_k(0.6, 0.2, 1.0)  # K = 2, 1.96/1.4 = 1.400×
    assert (best, round(best_s, 3)) == (2, 1.4)
    assert score_guess(2, 0.6, 0.2, 1.0).startswith("**Spot on.**")
    three = score_guess(3, 0.6, 0.2, 1.0)  # (1 − 0.6⁴)/0.4/1.6 = 1.36× = 97% of the best
    assert "1.360×" in three and "97% of the best" in three and "1 away" in three
    assert score_guess(12, 0.6, 0.2, 1.0).startswith("**Off**")
    with pytest.raises(gr.Error, match="guess of the best K"):
        score_guess(0, 0.6, 0.2, 1.0)


def _rows(alphas):
    return [dict(temperature=t, alpha=a, tested=40) for t, a in zip((0.0, 0.7, 1.5), alphas)]


@pytest.mark.parametrize("alphas, guess, matched", [
    ((0.9, 0.7, 0.5), "falls", True), ((0.9, 0.7, 0.5), "rises", False),
    ((0.5, 0.7, 0.9), "rises", True), ((0.5, 0.9, 0.7), "stays", True), ((0.5, 0.9, 0.7), "falls", False),
])
def test_the_sweep_status_says_whether_the_prediction_matched(alphas, guess, matched):
    trend = alpha_trend(_rows(alphas), "temperature")
    status = f"**Done**: 3 settings of temperature. {trend.sentence}"
    out = prediction_verdict(status, "Temperature", guess, trend.direction)
    assert out.startswith(status)
    assert ("Your prediction matched" in out) == matched and ("Not what you predicted" in out) == (not matched)


def test_no_verdict_without_a_guess_a_temperature_sweep_or_a_finished_one():
    trend = alpha_trend(_rows((0.9, 0.7, 0.5)), "temperature")
    done = f"**Done**: 3 settings. {trend.sentence}"
    assert isinstance(prediction_verdict(done, "Temperature", None, trend.direction), SKIP)
    assert isinstance(prediction_verdict(done, "Lookahead K", "falls", trend.direction), SKIP)
    assert isinstance(prediction_verdict("Finished 1/3 settings…", "Temperature", "falls", None), SKIP)


def test_the_verdict_reads_the_trend_as_data_not_from_the_status_words():
    # The status words say "rose", the measured direction says "falls": the verdict follows the data.
    status = "**Done**: 3 settings of temperature. Per-token α rose with the setting (made-up words)."
    assert "Your prediction matched" in prediction_verdict(status, "Temperature", "falls", "falls")
    unknown = prediction_verdict(status, "Temperature", "rises", None)
    assert "too few drafts were tested" in unknown


def test_the_tour_has_8_to_12_steps_each_with_an_action_but_the_last():
    assert 8 <= len(tour.STEPS) <= 12
    assert all(s["selector"] and s["events"] and s["action"] for s in tour.STEPS[:-1])
    assert not tour.STEPS[-1]["events"]
    js = tour.tour_js()
    assert js.startswith("() => {") and "__STEPS__" not in js and "sessionStorage" in js and "Escape" in js
