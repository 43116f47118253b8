"""The oracle drafter (specviz.drafters.oracle): the target's own output replayed as the draft.

At T = 0 in float32 it keeps every draft, K + 1 tokens a pass, until the recorded output ends; at
T > 0 each replayed draft is a point mass kept with probability p_target(x), and the page says so;
its ceiling is said in c, v and K; the bench times it beside a drafter, with the gap.
"""

from __future__ import annotations

import html

import pytest
import torch
from helpers import bpe_tokenizer, tiny_llama

from specviz.models import loading as models
from specviz.drafters.registry import build_drafter
from specviz.figures.analysis import analyse
from specviz.diagnose.ceiling import ceiling_sentence, gap_phrase, gap_to_oracle
from specviz.drafters import DRAFTER_KINDS, parse_drafter_spec
from specviz.drafters.oracle import OracleDrafter
from specviz.run.runner import make_generation
from specviz.core.sampling import SamplingConfig
from specviz.figures.speedup import PlainBaseline
from specviz.figures.analysis import analyse_generation

pytestmark = pytest.mark.usefixtures("one_torch_thread")

K = 4
GREEDY = SamplingConfig(temperature=0.0)
CORPUS = "the quick brown fox jumps over the lazy dog near the river bank while the old cat sleeps"


@pytest.fixture(scope="module")
def loaded():
    """A tiny float32 target (320 ids, peaky distributions) with a small BPE tokenizer, as a loaded model."""
    tokenizer = bpe_tokenizer([CORPUS], chat=False, vocab_size=300)
    model = tiny_llama(1, vocab_size=320, lm_head_scale=8.0)
    return models.LoadedModel(model, tokenizer, "tiny", "tiny", torch.device("cpu"), torch.float32)


def _prompt(loaded):
    return loaded.encode("the quick brown fox", False)


def test_at_t0_every_pass_keeps_all_k_until_the_recording_ends(loaded):
    oracle = build_drafter("oracle", loaded)
    run = make_generation(loaded, oracle, _prompt(loaded), K, GREEDY, 23, seed=0)
    plain = make_generation(loaded, None, _prompt(loaded), K, GREEDY, 23, seed=0).run()
    assert oracle.recording == plain.token_ids  # recorded when the run was built, before it ran
    run.run()
    assert run.token_ids == plain.token_ids
    *full, last = [len(r.emitted) for r in run.rounds]
    assert full and all(n == K + 1 for n in full), full
    assert last == len(plain.token_ids) - (K + 1) * len(full) and 1 <= last <= K + 1
    a = analyse(run.rounds, K, run.elapsed_s)
    assert a.alpha == 1.0 and a.counts["resampled"] == 0


def test_at_t_above_0_each_replayed_draft_is_accepted_with_p_target(loaded):
    sampled = SamplingConfig(temperature=1.0)
    oracle = build_drafter("oracle", loaded)
    run = make_generation(loaded, oracle, _prompt(loaded), K, sampled, 24, seed=5).run()
    tested = [t for r in run.rounds for t in r.drafted if t.tested]
    assert tested and all(t.accept_prob == pytest.approx(min(1.0, t.p_target)) for t in tested)
    sentence = ceiling_sentence(analyse(run.rounds, K, run.elapsed_s), run.rounds, 1.0)
    assert "accepted with probability p_target(x)" in sentence and "At T = 1 " in sentence


def test_the_page_says_what_a_replayed_sample_is_worth(loaded):
    """The Run tab's summary (a finished oracle run's state) carries the ceiling's sentence, at T > 0
    with p_target(x); the "What the numbers hide" panel writes the ceiling lesson from its numbers."""
    from specviz.ui.tabs.numbers_hide import numbers_hide_view
    from specviz.ui.serve.state import RunState

    run = make_generation(loaded, build_drafter("oracle", loaded), _prompt(loaded), K,
                          SamplingConfig(temperature=1.0), 24, seed=5).run()
    state = RunState(k=K, rounds=run.rounds, max_new_tokens=24, finished=True, temperature=1.0, oracle=True)
    summary = html.unescape(state.view(None, "Done", True).summary)  # the page escapes text (as_text)
    assert "accepted with probability p_target(x)" in summary and "K + 1 = 5" in summary
    panel = html.unescape(numbers_hide_view(state)[1])
    assert "Lesson: The ceiling" in panel and f"over {len(run.rounds)} passes" in panel
    assert "Synthetic twin" in panel and "Health checks" in panel


def test_run_json_holds_the_ceiling_the_twin_and_the_health_checks(loaded):
    from specviz import cli
    from specviz.run.request import validate_request

    oracle = build_drafter("oracle", loaded)
    spec = make_generation(loaded, oracle, _prompt(loaded), K, GREEDY, 16, seed=0).run()
    request = validate_request(prompt="the quick brown fox", target="tiny", draft="oracle", k=K, temperature=0,
                               top_k=0, top_p=1, max_new_tokens=16, seed=0)
    result = cli.json_result(spec, analyse_generation(spec), loaded, request, 4, oracle)
    assert "every pass keeps all K" in result["oracle_ceiling"] and result["alpha"] == 1.0
    assert result["synthetic_twin"]["alpha"] == 1.0 and result["health"]["checks"][0]["name"] == "loop"
    assert "ceiling: " in cli.format_text(result, color=False)


def test_the_ceiling_is_made_of_c_v_and_k():
    from specviz.core.records import ACCEPTED, BONUS, DraftedToken, EmittedToken, Round

    rounds = [Round(i, [DraftedToken(1, "", 1.0, 1.0, 1.0, 0.1, True, True) for _ in range(K)], K,
                    [EmittedToken(1, "", ACCEPTED, 1.0, i)] * K + [EmittedToken(1, "", BONUS, 1.0, i)],
                    draft_ms=0.4, verify_ms=30.0, k=K, elapsed_s=0.03 * (i + 1)) for i in range(10)]
    baseline = PlainBaseline(step_ms=20.0, tokens_per_s=50.0)
    a = analyse(rounds, K, 0.3, baseline=baseline)
    sentence = ceiling_sentence(a, rounds, 0.0)
    c, v = a.cost_ratio_c, a.verify_cost_v
    assert f"c = {c:.3f}" in sentence and f"v = {v:.2f}" in sentence and "K + 1 = 5" in sentence
    assert f"{(K + 1) / (K * c + v):.2f}×" in sentence and "every pass keeps all K" in sentence


def test_each_drafter_says_its_gap_to_the_oracle():
    gap = gap_to_oracle({"tokens_per_pass": 2.0, "speedup": 1.5}, {"tokens_per_pass": 5.0, "speedup": 3.0})
    assert gap == {"tokens_per_pass_gap": 3.0, "speedup_gap": 1.5, "share_of_ceiling": 0.5}
    assert gap_phrase({"tokens_per_pass": 2.0, "speedup": 1.5}, {"tokens_per_pass": 5.0, "speedup": 3.0}) == \
        "3.00 tokens per pass and 1.50× below the oracle (50% of its speedup)"
    doubted = gap_to_oracle({"tokens_per_pass": 2.0, "speedup": 1.5, "speedup_doubt": "busy"},
                            {"tokens_per_pass": 5.0, "speedup": 3.0})
    assert doubted["speedup_gap"] is None and doubted["tokens_per_pass_gap"] == 3.0


def test_the_oracle_is_one_registry_kind_in_every_menu():
    from specviz.ui.tabs.side_by_side_tab import SIDE_BY_SIDE

    kind = DRAFTER_KINDS["oracle"]
    assert kind.replays and not kind.needs_model and not kind.can_branch
    assert parse_drafter_spec(" oracle ") == "oracle" and kind.label in SIDE_BY_SIDE


def test_a_replay_without_a_recording_is_refused():
    with pytest.raises(RuntimeError, match="no recording"):
        OracleDrafter(16).propose([1, 2, 3], K, GREEDY, None)


def test_the_bench_times_the_oracle_beside_a_drafter_with_the_gap(loaded):
    from specviz.run.bench import BenchPrompt, format_report, run_benchmark

    prompts = [BenchPrompt("p", "the quick brown fox the quick", kind="copy")]
    result = run_benchmark(loaded, build_drafter("ngram", loaded), prompts, [2], [0.0], max_new_tokens=6,
                           repeats=1, transformers_baselines=False, instrument_check=False, oracle=True)
    row = result["spec"][0]
    assert row["oracle"]["tokens_per_pass"] == pytest.approx(3.0)  # K + 1 on every pass, greedy, float32
    assert row["oracle"]["tokens_per_pass_gap"] == pytest.approx(3.0 - row["tokens_per_pass"])
    assert "The ceiling: the oracle drafter" in format_report(result)
    alone = run_benchmark(loaded, build_drafter("oracle", loaded), prompts, [2], [0.0], max_new_tokens=6,
                          repeats=1, transformers_baselines=False, instrument_check=False)["spec"][0]
    assert alone["speedup_low"] <= alone["speedup"] <= alone["speedup_high"]  # reported with its range
