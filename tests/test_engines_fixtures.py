"""Each engine's importer reads fixtures taken from that engine's own tests and documentation
(tests/fixtures/engines/README.md says where each came from) and gives the figures those sources
expect, in specviz's units. Torch-free and fast: plain files in, numbers out."""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.engine_logs import guess_engine, read_engine_file
from specviz.engine_logs import normalise as nz

FIXTURES = Path(__file__).parent / "fixtures" / "engines"


def read(name: str, **kw):
    return read_engine_file((FIXTURES / name).read_text(encoding="utf-8"), name, **kw)


def figure(run, name: str) -> float:
    values = [f.value for f in run.figures if f.name == name]
    assert values, f"{name!r} not among {[f.name for f in run.figures]}"
    return values[0]


def names(run) -> set[str]:
    return {f.name for f in run.figures}


@pytest.mark.parametrize("name, engine", [
    ("vllm_summary.json", "vllm"), ("vllm_detailed.json", "vllm"), ("vllm_stream.sse", "vllm"),
    ("vllm_metrics.prom", "vllm"), ("sglang_generate.json", "sglang"), ("sglang_server_info.json", "sglang"),
    ("llamacpp_completion.json", "llamacpp"), ("llamacpp_server.log", "llamacpp"), ("mlx_lm_stream.jsonl", "mlx"),
    ("mlx_vlm_timings.json", "mlx"),
])
def test_the_engine_is_told_from_its_own_field_names(name, engine):
    assert guess_engine((FIXTURES / name).read_text(encoding="utf-8")) == engine


def test_vllm_docs_summary_example_gives_the_documented_figures_and_alpha_per_tested_draft():
    run = read("vllm_summary.json")
    assert (run.engine, run.k, run.passes, run.accepted_histogram) == ("vllm", 3, 43, (39, 1, 0, 3))
    assert figure(run, "accept length (vLLM's mean_acceptance_length)") == pytest.approx(1.2325581395348837)
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(0.07751937984496124)
    # 39 passes tested 1 draft, 1 tested 2, 3 tested all 3: 50 tested, 10 accepted.
    assert figure(run, nz.ALPHA) == pytest.approx(10 / 50)
    assert figure(run, nz.ZERO_ACCEPT) == pytest.approx(39 / 43)
    assert run.accepted_by_position == (4, 3, 3) and run.tested_by_position == (43, 4, 3)
    assert figure(run, nz.CONDITIONAL_AT.format(i=2)) == pytest.approx(3 / 4)
    assert run.accepted_per_pass is None  # a summary has no order of passes


def test_vllm_scheduler_test_steps_give_per_pass_counts_and_conditional_acceptance():
    run = read("vllm_detailed.json")
    assert run.accepted_per_pass == (3, 1, 0) and run.drafted_per_pass == (3, 3, 3)
    assert figure(run, nz.TOKENS_PER_PASS) == pytest.approx(1 + 4 / 3)
    assert figure(run, nz.ALPHA) == pytest.approx(4 / 6)  # tested 3 + 2 + 1
    assert [figure(run, nz.CONDITIONAL_AT.format(i=i)) for i in (1, 2, 3)] == pytest.approx([2 / 3, 1 / 2, 1.0])
    assert [figure(run, nz.FULL_AT.format(i=i)) for i in (1, 2, 3)] == pytest.approx([2 / 3, 1 / 3, 1 / 3])


def test_vllm_stream_colours_tokens_step_by_step_from_its_chunks():
    run = read("vllm_stream.sse")
    assert run.accepted_per_pass == (3, 1, 0)
    assert run.tokens == (" t0", " t1", " t2", " t3", " t4", " t5", " t8", " t12")
    assert run.token_kinds == ("target", "draft", "draft", "draft", "target", "draft", "target", "target")


def test_vllm_grammar_invalid_drafts_leave_alpha_unshown_rather_than_guessed():
    run = read("vllm_invalid_drafts.json")
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(1.0)
    assert nz.ALPHA not in names(run)
    assert any("did not all draft K" in note for note in run.notes)


def test_vllm_prometheus_counters_from_its_metrics_test():
    run = read("vllm_metrics.prom")
    assert run.cumulative and run.passes == 1 and run.k == 3
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(2 / 3)
    assert run.accepted_by_position == (1, 1, 0)
    assert figure(run, nz.FULL_AT.format(i=2)) == pytest.approx(1.0)
    assert figure(run, "accept length (vLLM: 1 + accepted ÷ drafts)") == pytest.approx(3.0)


def test_sglang_serving_test_meta_info_keeps_its_rate_and_names_its_accept_length():
    run = read("sglang_generate.json")
    assert (run.engine, run.k, run.passes) == ("sglang", 2, 1)
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(0.5)
    assert figure(run, "accept length (SGLang's spec_accept_length)") == pytest.approx(2.0)
    assert run.accepted_histogram == (0, 1, 0)


def test_sglang_fixed_k_denominator_is_verify_passes_times_draft_tokens():
    run = read("sglang_fixed_k.json")
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(1 / 6)
    assert run.k == 3


def test_sglang_decoupled_proposals_and_histogram():
    run = read("sglang_decoupled.json")
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(0.5)
    assert run.accepted_histogram == (1, 1) and run.k == 1
    assert figure(run, nz.ZERO_ACCEPT) == pytest.approx(0.5)


def test_sglang_server_info_is_marked_cumulative():
    run = read("sglang_server_info.json")
    assert run.cumulative and run.passes is None
    assert figure(run, "tokens per pass, server lifetime (SGLang's avg_spec_accept_length)") == pytest.approx(1.5)


def test_llamacpp_synthetic_zero_acceptance_gives_a_zero_rate_and_says_what_is_missing():
    run = read("llamacpp_completion.json")
    assert figure(run, nz.ACCEPTANCE_RATE) == 0.0
    # 32 tokens predicted, nothing accepted: the first from the prompt's pass, then one a pass
    assert run.passes == 31 and any("acc per pos" in note for note in run.notes)


def test_llamacpp_log_line_recovers_steps_and_positions_from_its_rounded_figures():
    run = read("llamacpp_server.log")
    assert run.passes == 1449 and run.k == 2  # 2898 drafted = 2 × 1449
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(1797 / 2898)
    assert [figure(run, nz.FULL_AT.format(i=i)) for i in (1, 2)] == pytest.approx([0.727, 0.513], abs=5e-4)
    assert sum(run.accepted_by_position) == 1797
    assert figure(run, nz.ALPHA) == pytest.approx(1797 / (1449 + 1053.5), abs=2e-4)


def test_mlx_lm_from_draft_flags_give_passes_and_token_colours():
    run = read("mlx_lm_stream.jsonl")
    assert run.token_kinds == ("draft", "draft", "target", "draft", "draft")
    assert run.accepted_per_pass == (2, 2) and run.k == 2
    assert figure(run, nz.ALPHA) == pytest.approx(1.0)


def test_mlx_vlm_timings_rate_as_its_test_expects():
    run = read("mlx_vlm_timings.json")
    assert figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(0.6)
    assert run.passes == 5 and run.k == 4
    assert "accepted drafts past the stop token" not in names(run)


def _sse(*events: dict) -> str:
    import json

    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def test_streams_of_each_engine_are_read_from_their_last_counting_event():
    """Recorded streams: SGLang's native /generate repeats a growing meta_info, llama.cpp's and
    mlx-vlm's final chunk carries the timings; the events before it hold text only."""
    import json

    meta = json.loads((FIXTURES / "sglang_decoupled.json").read_text())["meta_info"]
    early = {**meta, "completion_tokens": 2, "spec_verify_ct": 1, "spec_num_correct_drafts": 0,
             "spec_num_proposed_drafts": 1, "spec_accept_rate": 0.0, "spec_accept_length": 2.0,
             "spec_correct_drafts_histogram": [1], "spec_accept_histogram": [1]}
    sglang = read_engine_file(_sse({"text": "a", "meta_info": early}, {"text": "ab", "meta_info": meta}), "s.sse")
    assert sglang.passes == 2 and sglang.accepted_histogram == (1, 1)
    timings = json.loads((FIXTURES / "llamacpp_completion.json").read_text())["timings"]
    llama = read_engine_file(_sse({"content": "a", "stop": False}, {"content": "", "stop": True, "timings": timings}),
                             "l.sse")
    assert llama.engine == "llamacpp" and figure(llama, nz.ACCEPTANCE_RATE) == 0.0
    vlm = json.loads((FIXTURES / "mlx_vlm_timings.json").read_text())["timings"]
    mlx = read_engine_file(_sse({"choices": [{"delta": {"content": "hi"}}]},
                                {"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": vlm}), "m.sse")
    assert mlx.engine == "mlx" and mlx.passes == 5 and figure(mlx, nz.ACCEPTANCE_RATE) == pytest.approx(0.6)


def test_a_scrape_of_two_engines_adds_their_counters_and_says_so():
    text = (FIXTURES / "vllm_metrics.prom").read_text()
    second = "\n".join(line.replace('engine="0"', 'engine="1"') for line in text.splitlines() if line.startswith("vllm:"))
    run = read_engine_file(text + second + "\n", "two.prom")
    assert run.passes == 2 and run.accepted_by_position == (2, 2, 0)
    assert any("2 engines or models" in note for note in run.notes)
