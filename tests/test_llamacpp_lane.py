"""The llama.cpp lane: its figures from the engine's own timings and counters, its sentences from the
closed form, and what it says where it cannot run. The real engine on the real pair runs behind
``-m slow`` (it needs xllamacpp and the 1.6 GB pair); the suite passes without xllamacpp."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.run import llamacpp_lane
from specviz.run.llamacpp_lane import lane_figures, why_sentence

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "engines"
PAIR = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")
CODE = "Write a Python function is_prime(n) that returns True when n is prime, with a docstring and three doctests."


def test_a_real_responses_figures_in_specvizs_units():
    """llama.cpp b11549's own response (K = 4, every draft accepted): 96 tokens, 76 of 76 drafts kept,
    19 verify passes, 5 tokens per pass; the decode rate is its own predicted_per_second."""
    response = json.loads((FIXTURES / "llamacpp_b11549_completion.json").read_text())
    change = {"llamacpp:n_decode_total": 20.0, "llamacpp:spec_decode_num_drafts_total": 19.0,
              **{f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}': 19.0 for i in range(4)}}
    f = lane_figures(response, change)
    t = response["timings"]
    assert (f["predicted_n"], f["draft_n"], f["draft_n_accepted"], f["verify_passes"]) == (96, 76, 76, 19)
    assert f["tokens_per_pass"] == pytest.approx(95 / 19) and f["acceptance"] == 1.0 and f["alpha"] == 1.0
    assert f["decode_tokens_per_s"] == pytest.approx(t["predicted_per_second"])
    assert f["accepted_per_position"] == [19, 19, 19, 19]


def test_the_engines_decode_counter_wins_where_it_disagrees_with_the_timings():
    response = json.loads((FIXTURES / "llamacpp_b11549_completion.json").read_text())
    assert lane_figures(response, {"llamacpp:n_decode_total": 23.0})["verify_passes"] == 22
    assert lane_figures(response, {})["verify_passes"] == 96 - 76 - 1


def test_alpha_counts_the_one_rejected_draft_of_each_pass_that_did_not_keep_all_k():
    """Two passes of K = 4: one kept all four, one kept one (tested two): α = 5 ÷ 6."""
    response = {"choices": [{"message": {"content": ""}}], "timings": {"predicted_n": 8, "predicted_ms": 100.0,
                                                                      "draft_n": 8, "draft_n_accepted": 5}}
    per_pos = [2, 1, 1, 1]
    change = {"llamacpp:spec_decode_num_drafts_total": 2.0,
              **{f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}': float(n)
                 for i, n in enumerate(per_pos)}}
    assert lane_figures(response, change)["alpha"] == pytest.approx(5 / 6)


def test_why_sentence_is_the_closed_form_at_the_engines_own_costs():
    wins = why_sentence("specviz", 1.0, 4, 0.37, 0.99, 1.99)
    assert "5.00 tokens" in wins and "4·0.37 + 0.99 = 2.47" in wins and "wins: 2.02×" in wins
    loses = why_sentence("llama.cpp", 1.0, 4, 0.60, 3.75, 0.6)
    assert "4·0.60 + 3.75 = 6.15" in loses and "loses: 0.81×" in loses and "(measured 0.60×)" in loses
    assert "could not be measured" in why_sentence("llama.cpp", None, 4, 0.6, 3.75, None)


def test_without_xllamacpp_the_lane_says_how_to_get_it(without_xllamacpp):
    with pytest.raises(ImportError, match=r"pip install xllamacpp, or pip install specviz\[llamacpp\]"):
        llamacpp_lane.LlamaCppLane("target.gguf")


def test_a_pair_without_gguf_files_is_named_not_guessed():
    from types import SimpleNamespace

    hub = SimpleNamespace(request=SimpleNamespace(target="Qwen/Qwen2.5-Coder-1.5B-Instruct",
                                                  draft="Qwen/Qwen2.5-Coder-0.5B-Instruct"), drafter=None)
    with pytest.raises(ValueError, match=r"specviz has none for 'Qwen/Qwen2.5-Coder-1.5B-Instruct'.*convert_hf_to_gguf"):
        llamacpp_lane.gguf_files(hub)


# ----------------------------------------------------------------------------- the real engine
def _pair_ggufs():
    from specviz.models.offline import gguf_path

    paths = [gguf_path(name) for name in PAIR]
    if None in paths:
        pytest.skip("python -m specviz prepare qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct first")
    pytest.importorskip("xllamacpp")
    return [str(p) for p in paths]


@pytest.mark.slow
def test_the_real_engine_on_the_pair_its_counters_agree_with_its_timings():
    target, draft = _pair_ggufs()
    with llamacpp_lane.LlamaCppLane(target, draft, threads=1) as lane:
        plain = lane.run(CODE, mode="plain", max_tokens=48)
        spec = lane.run(CODE, mode="draft-greedy", k=4, max_tokens=48)
        ngram = lane.run(CODE, mode="ngram-simple", k=4, max_tokens=48)
    assert plain["draft_n"] == 0 and plain["tokens_per_pass"] == pytest.approx(1.0)
    for run in (spec, ngram):
        assert run["verify_passes"] == run["predicted_n"] - run["draft_n_accepted"] - 1  # timings and counters agree
        assert 0 <= run["draft_n_accepted"] <= run["draft_n"] and sum(run["accepted_per_position"]) == run["draft_n_accepted"]
    assert spec["acceptance"] > 0.7 and spec["tokens_per_pass"] > 3  # the same family agrees on code


@pytest.mark.slow
def test_the_real_engines_costs_are_measured_not_assumed():
    target, draft = _pair_ggufs()
    with llamacpp_lane.LlamaCppLane(target, draft, threads=1) as lane:
        costs = lane.measure_costs(CODE, k=4, max_tokens=32)
    assert 0 < costs["c"] < 2 and costs["v"] > 0 and costs["v_batch"] > 0
    assert costs["runs"]["draft_alone"]["draft_n"] == 0
