"""The run analysis (specviz.figures.analysis): each figure on hand-built rounds, and the same figures
through every front-end (the app's summary, ``run --json`` and the bench's rows)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from helpers import tiny_llama

from specviz import cli
from specviz.run import bench
from specviz.figures import theory
from specviz.figures.analysis import analyse, running_acceptance
from specviz.drafters import PromptLookupDrafter
from specviz.core.engine import Generation
from specviz.run.request import validate_request
from specviz.core.sampling import SamplingConfig
from specviz.figures.speedup import NOT_MEASURABLE, PlainBaseline, measured_speedup
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.ui.draw.run_views import summary_markdown
from specviz.figures.analysis import analyse_generation


def drafted(n_proposed: int, n_accepted: int, parents: list[int] | None = None) -> list[DraftedToken]:
    return [DraftedToken(id=10 + j, text=f"d{j}", p_draft=1.0, p_target=0.5, accept_prob=0.5, uniform=0.2,
                         accepted=j < n_accepted, tested=j <= n_accepted,
                         parent=None if parents is None else parents[j])
            for j in range(n_proposed)]


def make_round(index, n_proposed, n_accepted, draft_ms=0.0, steps=0, verify_ms=10.0, other_ms=1.0) -> Round:
    last = PLAIN if not n_proposed else (BONUS if n_accepted == n_proposed else RESAMPLED)
    emitted = [EmittedToken(20 + j, "t", kind, 0.5, index)
               for j, kind in enumerate([ACCEPTED] * n_accepted + [last])]
    return Round(index=index, drafted=drafted(n_proposed, n_accepted), n_accepted=n_accepted, emitted=emitted,
                 draft_ms=draft_ms, draft_steps=steps, verify_ms=verify_ms, other_ms=other_ms, k=n_proposed)


# Model-drafter rounds, K = 4: 4/4 accepted, 1/4, 0/4 (each draft step 2 ms, verify 12 ms).
MODEL_ROUNDS = [make_round(0, 4, 4, 8.0, 4, 12.0), make_round(1, 4, 1, 8.0, 4, 12.0),
                make_round(2, 4, 0, 8.0, 4, 12.0)]
BASELINE = PlainBaseline(step_ms=10.0, tokens_per_s=20.0)


def test_acceptance_rate_and_per_token_alpha_are_different_figures():
    a = analyse(MODEL_ROUNDS, 4, wall_s=0.5, baseline=BASELINE)
    assert (a.proposed, a.tested, a.accepted) == (12, 4 + 2 + 1, 5)
    assert a.acceptance_rate == pytest.approx(5 / 12)
    assert a.alpha == pytest.approx(5 / 7)
    assert a.emitted == 5 + 2 + 1 and a.tokens_per_pass == pytest.approx(8 / 3)
    assert a.counts == {ACCEPTED: 5, RESAMPLED: 2, BONUS: 1, PLAIN: 0}


def test_costs_speedup_and_theory_follow_their_formulas():
    a = analyse(MODEL_ROUNDS, 4, wall_s=0.5, baseline=BASELINE)
    assert a.draft_step_ms == pytest.approx(2.0) and a.verify_ms == pytest.approx(12.0)
    assert a.cost_ratio_c == pytest.approx(2.0 / 10.0)  # one draft forward ÷ one plain step
    assert a.verify_cost_v == pytest.approx(12.0 / 10.0)  # one verify pass ÷ one plain step
    assert a.tokens_per_s == pytest.approx(8 / 0.5)
    assert a.speedup == pytest.approx((8 / 0.5) / 20.0)
    alpha = 5 / 7
    assert a.predicted_tokens_per_pass == pytest.approx((1 - alpha**5) / (1 - alpha))
    assert a.theoretical_speedup == pytest.approx((1 - alpha**5) / ((1 - alpha) * (4 * 0.2 + 1.2)))
    # Every round drafted K here, so the model on the actual draft lengths agrees with the closed form
    # up to the round cost it uses (draft + verify ms per round).
    assert a.predicted_tokens_per_pass_actual_drafts == pytest.approx(a.predicted_tokens_per_pass)
    assert a.theoretical_speedup_actual_drafts == pytest.approx(a.predicted_tokens_per_pass / ((8.0 + 12.0) / 10.0))
    assert a.speedup_vs_theoretical == pytest.approx(a.speedup / a.theoretical_speedup)


def test_prompt_lookup_cost_is_its_lookup_time_spread_over_k_slots():
    rounds = [make_round(0, 3, 3, draft_ms=0.4), make_round(1, 0, 0, draft_ms=0.4)]
    a = analyse(rounds, 4, wall_s=0.1, baseline=BASELINE)
    assert a.draft_step_ms is None
    assert a.cost_ratio_c == pytest.approx(0.4 / (4 * 10.0))
    assert a.passes_without_draft == pytest.approx(0.5)
    # Theory on the actual drafts: one round drafted 3, the other nothing (1 token per pass).
    expected = (theory.expected_tokens_per_pass(1.0, 3) + 1.0) / 2
    assert a.predicted_tokens_per_pass_actual_drafts == pytest.approx(expected)


def test_per_position_acceptance_counts_each_position_when_tested():
    a = analyse(MODEL_ROUNDS, 4, wall_s=1.0)
    # Position 1 tested in all 3 rounds, accepted in 2; position 2 tested in 2 (after 4/4 and 1/4), etc.
    assert [(p.position, p.tested, p.accepted) for p in a.per_position] == [(1, 3, 2), (2, 2, 1), (3, 1, 1),
                                                                            (4, 1, 1)]
    assert a.per_position[0].rate == pytest.approx(2 / 3)


def test_per_position_of_a_tree_round_counts_depths():
    """Two children of the root (one rejected, one accepted), then a grandchild: positions are depths."""
    round_ = Round(index=0, n_accepted=2, drafted=[
        DraftedToken(1, "a", 1.0, 0.1, 0.1, 0.5, accepted=False, tested=True, parent=-1),
        DraftedToken(2, "b", 1.0, 0.6, 0.6, 0.5, accepted=True, tested=True, parent=-1),
        DraftedToken(3, "c", 1.0, 0.9, 0.9, 0.5, accepted=True, tested=True, parent=1),
    ], emitted=[EmittedToken(2, "b", ACCEPTED, 0.6, 0), EmittedToken(3, "c", ACCEPTED, 0.9, 0),
                EmittedToken(4, "d", BONUS, 0.5, 0)], verify_ms=10.0)
    a = analyse([round_], 2, wall_s=1.0)
    assert [(p.position, p.tested, p.accepted) for p in a.per_position] == [(1, 1, 1), (2, 1, 1)]
    assert a.tested == 3 and a.accepted == 2 and a.alpha == pytest.approx(2 / 3)


def test_time_split_and_missing_figures():
    a = analyse(MODEL_ROUNDS, 4, wall_s=1.0)
    assert [(t.round, t.draft_ms, t.verify_ms, t.other_ms) for t in a.time_split] == [(i, 8.0, 12.0, 1.0)
                                                                                   for i in range(3)]
    # Without a baseline nothing relative to a plain step exists.
    assert a.cost_ratio_c is a.verify_cost_v is a.speedup is a.theoretical_speedup is None
    empty = analyse([], 4, wall_s=0.0)
    assert empty.alpha is None and empty.acceptance_rate is None and empty.tokens_per_pass == 0.0
    plain = analyse([make_round(0, 0, 0)], 0, wall_s=1.0, baseline=BASELINE)
    assert plain.alpha is None and plain.speedup is None and plain.cost_ratio_c is None


def test_running_acceptance_ends_at_the_run_figures():
    running = running_acceptance(MODEL_ROUNDS)
    a = analyse(MODEL_ROUNDS, 4, wall_s=1.0)
    assert running[-1] == (2, pytest.approx(a.acceptance_rate), pytest.approx(a.alpha))
    assert running[0] == (0, 1.0, 1.0)


def test_bad_arguments_and_baselines():
    with pytest.raises(ValueError):
        analyse(MODEL_ROUNDS, -1, wall_s=1.0)
    with pytest.raises(ValueError):
        analyse(MODEL_ROUNDS, 4, wall_s=math.nan)
    with pytest.raises(ValueError, match="plain run"):
        PlainBaseline.from_rounds(MODEL_ROUNDS, 10.0)
    assert PlainBaseline.from_rounds([], 10.0) is None
    assert measured_speedup(10.0, None) is None and measured_speedup(10.0, 5.0) == 2.0


def test_a_first_round_scored_by_the_prefill_is_no_step():
    """A plain run's first token comes from the prompt's prefill pass, so its round took no pass of
    its own (about 0 ms): counted as a step it would make the plain step, and every c and v
    measured against it, look cheaper than it is. A first round that drafted runs a pass (over its
    drafts) and counts."""
    first = make_round(0, 0, 0, verify_ms=0.05)
    first.root_from_prefill = True
    plain = [first] + [make_round(i, 0, 0, verify_ms=10.0) for i in (1, 2, 3)]
    assert PlainBaseline.from_rounds(plain, 20.0).step_ms == pytest.approx(10.0)
    assert PlainBaseline.from_rounds([first], 20.0) is None
    spec_first = make_round(0, 4, 4, 8.0, 4, 9.0)
    spec_first.root_from_prefill = True
    a = analyse([spec_first] + MODEL_ROUNDS[1:], 4, wall_s=0.5, baseline=BASELINE)
    assert a.verify_ms == pytest.approx((9.0 + 12.0 + 12.0) / 3)


# --------------------------------------------------------------------------- one figure everywhere
@pytest.fixture(scope="module")
def real_run():
    """A speculative and a plain run of a tiny model (prompt lookup on a repetitive prompt)."""
    target = tiny_llama(0, vocab_size=64)
    prompt = [1, 5, 9, 2, 5, 9, 2, 5, 9]
    greedy = SamplingConfig(0.0)
    spec = Generation(target, prompt, PromptLookupDrafter(64), k=4, sampling=greedy, max_new_tokens=24).run()
    plain = Generation(target, prompt, None, sampling=greedy, max_new_tokens=24).run()
    return spec, plain


FIGURES = ("acceptance_rate", "alpha", "tokens_per_pass", "plain_step_ms", "cost_ratio_c", "verify_cost_v",
           "speedup", "predicted_tokens_per_pass", "theoretical_speedup", "theoretical_speedup_actual_drafts")


def test_the_same_rounds_give_the_same_figures_in_the_app_the_cli_and_the_bench(real_run):
    spec, plain = real_run
    baseline = PlainBaseline.from_rounds(plain.rounds, plain.tokens_per_s)
    analysis = analyse_generation(spec, baseline)
    assert analysis.proposed > 0 and analysis.theoretical_speedup is not None

    # run --json
    request = validate_request(prompt="x", target="t", draft="ngram", k=4, temperature=0, top_k=0, top_p=1,
                               max_new_tokens=24, seed=0)
    target = SimpleNamespace(decode=lambda ids: "", name="tiny", device="cpu", dtype="torch.float32")
    result = cli.json_result(spec, analysis, target, request, 9, None)

    # the bench's row code, on the same samples (one prompt, one repeat)
    m = bench.Measurements()
    m.add((bench.OURS_SPEC, 0.0, 4), 0, "p", bench.Sample(len(spec.tokens), spec.elapsed_s, spec.rounds))
    m.add((bench.OURS_PLAIN, 0.0, None), 0, "p", bench.Sample(len(plain.tokens), plain.elapsed_s, plain.rounds))
    row = bench.spec_row(m, 0.0, 4, eos=set())

    for name in FIGURES:
        ours = getattr(analysis, name)
        assert result[name] == ours, name
        assert row[name] == pytest.approx(ours, rel=1e-12), name

    # the app's summary shows the same numbers (as it formats them); c, v and the theory divide by the
    # plain step, so on a busy machine (a doubted baseline) they give way to "not measurable now":
    # test_the_summary_shows_c_v_and_the_theory_unless_the_baseline_is_doubted checks both cases
    # on fixed timings.
    summary = summary_markdown(analysis, "done")
    timed = ((analysis.cost_ratio_c, ".3f"), (analysis.verify_cost_v, ".2f"), (analysis.theoretical_speedup, ".2f"))
    for value, spec_ in ((analysis.acceptance_rate, ".3f"), (analysis.alpha, ".3f"), (analysis.tokens_per_pass, ".2f"),
                         *(() if analysis.speedup_doubt else timed)):
        assert format(value, spec_) in summary


def test_the_summary_shows_c_v_and_the_theory_unless_the_baseline_is_doubted():
    """Fixed timings: a 10 ms plain step and 12 ms verify passes give c = 0.200, v = 1.20; the same
    passes against a plain step sampled from 5 to 40 ms (scatter above
    :data:`specviz.figures.speedup.BASELINE_SCATTER`) are doubted, and the three rows that divide by it say so."""
    rounds = [make_round(i, 4, 2, 8.0, 4, 12.0) for i in range(12)]
    trusted = analyse(rounds, 4, 1.0, baseline=BASELINE)
    assert trusted.speedup_doubt is None
    summary = summary_markdown(trusted, "done")
    assert all(format(value, spec_) in summary for value, spec_ in (
        (trusted.cost_ratio_c, ".3f"), (trusted.verify_cost_v, ".2f"), (trusted.theoretical_speedup, ".2f")))
    assert "| cost ratio c (draft step ÷ plain step) | 0.200 |" in summary
    assert NOT_MEASURABLE not in summary
    busy = PlainBaseline(step_ms=10.0, tokens_per_s=20.0, sample_ms_per_token=(5.0, 10.0, 40.0), sample_tokens=(32, 32, 32))
    doubted = analyse(rounds, 4, 1.0, baseline=busy)
    assert doubted.speedup_doubt
    assert summary_markdown(doubted, "done").count(f"{NOT_MEASURABLE} (divided by the doubted plain step") == 3


# --------------------------------------------------------------------------- health notes
def test_health_notes_explain_a_misaligned_draft_an_expensive_draft_and_an_idle_lookup():
    from specviz.figures.analysis import health_notes

    misaligned = [make_round(i, 4, 0, 8.0, 4, 12.0) for i in range(12)]
    notes = health_notes(analyse(misaligned, 4, 1.0, baseline=BASELINE))
    assert any("rarely agrees" in n and "0.00" in n for n in notes)
    # c = 0.8 per draft step: 4 · 0.8 + 1.2 = 4.4 plain steps for at most 5 tokens -> fine; c = 1.5 is not.
    expensive = [make_round(i, 4, 4, 60.0, 4, 12.0) for i in range(3)]
    notes = health_notes(analyse(expensive, 4, 1.0, baseline=BASELINE))
    assert any("could not be faster" in n for n in notes), notes
    idle = [make_round(0, 2, 2, 0.1)] + [make_round(i, 0, 0, 0.1) for i in range(1, 4)]
    assert any("no earlier match in 75%" in n for n in health_notes(analyse(idle, 4, 1.0), lookup=True))
    assert health_notes(analyse(MODEL_ROUNDS, 4, 1.0)) == []
    # Ten 12 ms passes and two held up at 300 ms: mean 60 ms, median 12 ms.
    uneven = [make_round(i, 4, 2, 8.0, 4, 300.0 if i in (1, 6) else 12.0) for i in range(12)]
    notes = health_notes(analyse(uneven, 4, 1.0, baseline=BASELINE))
    assert any("longest 300 ms, median 12 ms" in n and "v = 1.20" in n and "v = 6.00" in n for n in notes), notes
    even = [make_round(i, 4, 2, 8.0, 4, 12.0) for i in range(12)]
    assert not any("median" in n for n in health_notes(analyse(even, 4, 1.0, baseline=BASELINE)))
    assert any("float32" in n for n in health_notes(analyse(MODEL_ROUNDS, 4, 1.0), low_precision_greedy=True))
