"""The normaliser's unit cases, each through an engine file so that it fails without the conversion:
α ÷ tested versus the engines' rate ÷ drafted, accept length with and without the bonus, counts past
the stop token, cumulative counters versus one run, full versus conditional acceptance by position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engine_logs import EngineFileError, read_engine_file
from specviz.engine_logs import normalise as nz

FIXTURES = Path(__file__).parent / "fixtures" / "engines"


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def figure(run, name: str) -> float:
    return next(f for f in run.figures if f.name == name).value


def test_alpha_divides_by_tested_drafts_not_by_every_drafted_one():
    run = read_engine_file(text("vllm_detailed.json"), "d")
    engine_rate = json.loads(text("vllm_detailed.json"))["metrics"]["speculative_decoding"]["draft_acceptance_rate"]
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(engine_rate)  # the engine's own unit, kept
    assert figure(run, nz.ALPHA) == pytest.approx(4 / 6)  # a pass keeping a of d tested min(a + 1, d)
    assert figure(run, nz.ALPHA) > engine_rate + 0.2
    alpha_figure = next(f for f in run.figures if f.name == nz.ALPHA)
    assert "tested" in alpha_figure.conversion and "per_step_accepted" in alpha_figure.engine_field


def test_accept_length_bonus_in_and_out():
    run = read_engine_file(text("vllm_detailed.json"), "d")
    assert figure(run, "accept length (vLLM's mean_acceptance_length)") == pytest.approx(1 + 4 / 3)
    assert figure(run, nz.ACCEPTED_PER_PASS) == pytest.approx(4 / 3)  # bonus out
    assert figure(run, nz.TOKENS_PER_PASS) == pytest.approx(1 + 4 / 3)  # bonus in


def test_sglang_accept_length_counts_the_prompt_pass_token_which_specviz_leaves_out():
    run = read_engine_file(text("sglang_decoupled.json"), "s")
    assert figure(run, "accept length (SGLang's spec_accept_length)") == pytest.approx(2.0)  # 4 tokens ÷ 2 passes
    assert figure(run, nz.TOKENS_PER_PASS) == pytest.approx(1.5)  # 1 + 1 accepted ÷ 2 passes
    assert figure(run, nz.TOKENS_PER_PASS + ", from the response's tokens") == pytest.approx(1.5)  # (4 − 1) ÷ 2


def _stopped_vllm_payload() -> str:
    """The scheduler test's response shape with two steps of 3 drafts keeping 3 and 2, and a stop
    token at the second step's first draft: 1 + 4 + 1 = 6 tokens, not 1 + 4 + 3."""
    data = json.loads(text("vllm_detailed.json"))
    spec = data["metrics"]["speculative_decoding"]
    spec.update(per_step_accepted=[3, 2], per_step_drafted=[3, 3], acceptance_histogram=[0, 0, 1, 1], num_spec_steps=2,
                num_accepted_draft_tokens=5, num_draft_tokens=6, mean_acceptance_length=3.5, draft_acceptance_rate=5 / 6)
    data["usage"]["completion_tokens"] = 6
    data["choices"][0]["finish_reason"] = "stop"
    return json.dumps(data)


def test_vllm_drafts_counted_past_the_stop_token_are_clipped():
    run = read_engine_file(_stopped_vllm_payload(), "stopped")
    assert run.accepted_per_pass == (3, 1)
    assert figure(run, "accepted drafts past the stop token") == 1
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(4 / 6)


def test_mlx_vlm_accepted_drafts_past_the_stop_token_are_clipped():
    run = read_engine_file(text("mlx_vlm_past_stop.json"), "m")
    assert figure(run, "accepted drafts past the stop token") == 1
    assert figure(run, nz.ACCEPTED_PER_PASS) == pytest.approx(3 / 3)  # not 4 ÷ 3
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(3 / 9)


def test_two_scrapes_give_one_runs_counters_and_one_scrape_is_marked_cumulative():
    lifetime = read_engine_file(text("vllm_metrics_after.prom"), "after")
    run = read_engine_file(text("vllm_metrics_after.prom"), "after", before=text("vllm_metrics.prom"))
    assert lifetime.cumulative and not run.cumulative
    assert figure(lifetime, nz.ACCEPTANCE_RATE) == pytest.approx(6 / 11)
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(4 / 8)  # (3, 3), (3, 1), (2, 0)
    assert run.passes == 3 and run.accepted_by_position == (2, 1, 1)


def test_scrapes_from_a_restarted_server_are_refused():
    with pytest.raises(EngineFileError, match="num_drafts"):
        read_engine_file(text("vllm_metrics.prom"), "x", before=text("vllm_metrics_after.prom"))


def test_full_and_conditional_acceptance_by_position_differ_as_defined():
    run = read_engine_file(text("vllm_summary.json"), "s")
    assert figure(run, nz.FULL_AT.format(i=2)) == pytest.approx(3 / 43)  # kept ÷ every pass
    assert figure(run, nz.CONDITIONAL_AT.format(i=2)) == pytest.approx(3 / 4)  # kept ÷ passes that reached it


def test_clip_at_stop_removes_the_last_pass_target_token_first_then_its_drafts():
    assert nz.clip_at_stop([3, 2], emitted=8, first_token_from_prefill=True) == ((3, 2), 0)
    assert nz.clip_at_stop([3, 2], emitted=7, first_token_from_prefill=True) == ((3, 2), 1)  # only the bonus
    assert nz.clip_at_stop([3, 2], emitted=5, first_token_from_prefill=True) == ((3, 0), 3)
    assert nz.clip_at_stop([2, 2], emitted=4, first_token_from_prefill=False) == ((2, 1), 2)


def test_clip_total_at_stop_matches_the_per_pass_clip_when_the_stop_is_in_the_last_pass():
    passes = [3, 1, 4]
    for emitted in range(7, 13):  # 1 + 4 + 2 + 5 = 12 tokens unclipped; the last pass holds 5 of them
        clipped, _ = nz.clip_at_stop(passes, emitted, True)
        assert nz.clip_total_at_stop(sum(passes), len(passes), emitted, True) == sum(clipped)


def test_per_run_subtracts_and_refuses_a_fall():
    assert nz.per_run({"a": 2, "b": 1}, {"a": 5, "b": 1, "c": 7}) == {"a": 3, "b": 0, "c": 7}
    with pytest.raises(ValueError, match="fell"):
        nz.per_run({"a": 5}, {"a": 2})


def test_tested_by_position_stops_at_the_first_rejection_and_at_the_drafted_length():
    assert nz.tested_by_position([0, 2, 4], [4, 4, 4], 4) == (3, 2, 2, 1)
    assert nz.tested_by_position([1], [1], 3) == (1, 0, 0)
    assert nz.accepted_by_position([0, 2, 4], 4) == (2, 2, 1, 1)
