"""The pair's bench: what it measures is defined once (decode rates, the bandwidth limit), and its
report says the ratios the goals name. The real run needs the 1.6 GB pair and minutes: it is the
command BENCHMARKS.md quotes, never a timed test."""

from __future__ import annotations

import pytest
import torch

from specviz.models import quantized
from specviz.run import pair_bench


def test_the_bandwidth_is_measured_on_the_threads_asked_for():
    threads = torch.get_num_threads()
    bw = pair_bench.read_bandwidth(1, gib=0.125, repeats=2)
    assert bw["threads"] == 1 and bw["read_gb_s"] > 0.5 and bw["copy_gb_s"] > 0.5
    assert torch.get_num_threads() == threads  # put back


def test_the_pairs_prompts_are_the_pages():
    from specviz.ui.serve import settings

    assert [p["name"] for p in pair_bench.PAIR_PROMPTS] == ["code", "explanation", "json-to-yaml"]
    assert [p[0] for p in settings.PAIR_PROMPTS] == [p["prompt"] for p in pair_bench.PAIR_PROMPTS]
    assert [p["temperature"] for p in pair_bench.PAIR_PROMPTS] == [0.0, 0.7, 0.0]


def test_the_step_bytes_are_the_linear_layers_lm_head_included():
    from helpers import tiny_llama

    model = tiny_llama(0)  # hidden 64, intermediate 128, 2 layers, vocab 256, untied lm_head
    per_layer = 4 * 64 * 64 - 2 * 64 * 32 + 3 * 64 * 128  # q, o full; k, v at 2 of 4 heads; gate, up, down
    assert quantized.weight_bytes(model) == 4 * (2 * per_layer + 256 * 64)  # float32, embedding left out
    quantized.quantize_model(model, None)
    assert quantized.weight_bytes(model) < 4 * (2 * per_layer + 256 * 64) / 5  # int4 blocks: about a sixth


def _result(llamacpp: bool = True) -> dict:
    row = dict(prompt="code", temperature=0.0, step_bytes=int(0.965e9), k=3, plain_tokens_per_s=8.4,
               spec_tokens_per_s=11.8, speedup=11.8 / 8.4, alpha=1.0, tokens_per_pass=4.0, c=0.37, v=1.9,
               plain_step_ms=119.0)
    lc = {"step_bytes": int(0.98e9), "costs": {"k": 4, "c": 0.6, "v": 6.0, "v_batch": 3.5},
          "rows": [dict(mode="plain", prompt="code", temperature=0.0, decode_tokens_per_s=14.6, acceptance=None,
                        alpha=None, tokens_per_pass=1.0, step_ms=68.5, predicted_n=96),
                   dict(mode="draft-greedy", prompt="code", temperature=0.0, decode_tokens_per_s=9.6, acceptance=1.0,
                        alpha=1.0, tokens_per_pass=5.0, step_ms=200.0, predicted_n=96)]} if llamacpp else \
        {"missing": "The llama.cpp lane needs the xllamacpp package"}
    return {"bandwidth": {"read_gb_s": 22.0, "copy_gb_s": 21.5, "threads": 1}, "specviz": {"int4": [row]},
            "transformers": {}, "llamacpp": lc}


def test_the_report_states_the_limit_and_the_goals_ratios():
    text = pair_bench.format_pair_report(_result())
    assert "22.0 GB/s read" in text
    limit_share = 0.965e9 / 22e9 * 1e3 / 119.0
    assert f"{limit_share:.2f}" in text  # specviz's plain step as a fraction of the bandwidth's floor
    assert "specviz speculative 0.81×, specviz plain 0.58×" in text  # 11.8 ÷ 14.6 and 8.4 ÷ 14.6
    assert "v_batch = 3.50" in text and "llama.cpp greedy" in text


def test_without_llamacpp_the_report_says_why():
    text = pair_bench.format_pair_report(_result(llamacpp=False))
    assert "llama.cpp: The llama.cpp lane needs the xllamacpp package" in text and "specviz plain" not in text.split(
        "best on code")[1]
