"""The diagnostics of a run (:mod:`specviz.diagnose.diagnostics`) on hand-built passes with known answers,
the rules replayed on recorded passes (the block-verification paper's own example; bounds from the
"other tokens" bucket that contain the exact value computed from a tiny model's whole
distributions), and their JSON, summary and charts on a loaded trace, an old one included."""

from __future__ import annotations

import copy
import itertools
import json
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz.diagnose import diagnostics as dg
from specviz.figures.trace import trace_from_dict
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round


def chain(index: int, n_drafted: int, n_accepted: int, p_draft: float = 0.5, p_target: float = 0.4,
          top: bool = False) -> Round:
    """A chain pass that drafted ``n_drafted`` tokens and kept the first ``n_accepted``."""
    drafted = [DraftedToken(id=100 + j, text=f"d{j}", p_draft=p_draft, p_target=p_target,
                            accept_prob=min(1.0, p_target / p_draft) if p_draft else 0.0, uniform=0.3, accepted=j < n_accepted,
                            tested=j <= n_accepted) for j in range(n_drafted)]
    if top:
        for t in drafted:
            t.top_draft, t.top_target = [[t.id, "", p_draft]], [[t.id, "", p_target]]
    last = PLAIN if not n_drafted else (BONUS if n_accepted == n_drafted else RESAMPLED)
    emitted = [EmittedToken(7, "t", kind, 0.5, index) for kind in [ACCEPTED] * n_accepted + [last]]
    return Round(index=index, drafted=drafted, n_accepted=n_accepted, emitted=emitted, k=n_drafted)


# Three drafting passes, K = 4: 4/4 kept, 1/4, 0/4; and one pass that drafted nothing.
ROUNDS = [chain(0, 4, 4), chain(1, 4, 1), chain(2, 4, 0), chain(3, 0, 0)]


def test_full_and_conditional_acceptance_by_position():
    rates = dg.acceptance_by_position(ROUNDS, 4)
    # Tested: 3 passes at position 1, 2 at 2 (the 4/4 and the 1/4 pass), 1 at 3 and 4; kept: 2, 1, 1, 1.
    assert [(p.tested, p.accepted) for p in rates] == [(3, 2), (2, 1), (1, 1), (1, 1)]
    assert [p.full for p in rates] == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert [p.conditional for p in rates] == pytest.approx([2 / 3, 1 / 2, 1, 1])
    assert {p.drafting_passes for p in rates} == {3}  # the pass without a draft is not a drafting pass


def test_zero_accept_share_and_the_histogram_in_vllm_units():
    assert dg.zero_accept_share(ROUNDS) == pytest.approx(1 / 3)
    assert dg.accepted_length_histogram(ROUNDS, 4) == [1, 1, 0, 0, 1]  # kept drafts, the bonus not counted
    assert dg.zero_accept_share([chain(0, 0, 0)]) is None


AEON = [0.600, 0.385, 0.215, 0.108, 0.062, 0.0, 0.0]  # AEON DFlash #6 (a sliding-window bug)
LLAMA_CPP = [0.637, 0.237]  # llama.cpp #23544 (a regression)


def test_the_cliff_is_found_where_the_issues_found_it():
    aeon = dg.find_cliff(AEON)
    assert aeon is not None and aeon.position == 5 and (aeon.before, aeon.after) == (0.062, 0.0)
    assert "after position 5" in aeon.sentence and aeon.sentence.count(".") >= 1
    llama = dg.find_cliff(LLAMA_CPP)
    assert llama is not None and llama.position == 1


@pytest.mark.parametrize("rates", [
    [0.9 * 0.45 ** i for i in range(6)],  # a steep but smooth geometric decay
    [0.8 ** (i + 1) for i in range(6)],  # full rates of a constant α, read as conditional
    [0.7] * 6,  # Leviathan et al.'s flat α
    [0.6, 0.55, 0.5, 0.45],
])
def test_a_smooth_decay_is_no_cliff(rates):
    assert dg.find_cliff(rates) is None


def test_a_fall_on_too_few_tests_is_no_cliff():
    few = [dg.PositionRates(1, 5, 5, 3, 0.6, 0.6), dg.PositionRates(2, 5, 3, 0, 0.0, 0.0)]
    assert dg.find_cliff(few) is None  # 3/5 → 0/3: z ≈ 1.6
    many = [dg.PositionRates(1, 400, 400, 255, 0.6375, 0.6375), dg.PositionRates(2, 400, 255, 60, 0.15, 0.235)]
    assert dg.find_cliff(many).position == 1


def test_calibration_bins_p_draft_against_the_accepted_share():
    rounds = [chain(0, 2, 1, p_draft=0.05, p_target=0.5), chain(1, 1, 1, p_draft=1.0, p_target=1.0)]
    bins = dg.calibration(rounds)
    assert [(b.low, b.tested) for b in bins] == [(0.0, 2), (pytest.approx(0.9), 1)]  # p_draft = 1 in the last bin
    assert bins[0].accepted_rate == 0.5 and bins[1].accepted_rate == 1.0
    assert bins[0].mean_p_draft == pytest.approx(0.05) and bins[0].mean_accept_prob == 1.0
    unrecorded = [chain(0, 2, 1, p_draft=0.0, p_target=0.0)]
    assert dg.calibration(unrecorded) == ()


def test_the_engine_k_maximises_vllm_goodput():
    # goodput(K) = (1 + Σ_{i≤K} Π_{j≤i} α_j) / (K·c + v): with α = (0.8, 0.5), v = 1,
    # c = 0.1 gives 1, 1.8/1.1, 2.2/1.2 → K = 2; c = 0.5 gives 1, 1.8/1.5, 2.2/2 → K = 1.
    two = dg.engine_k([0.8, 0.5], 0.1, 1.0)
    assert two.k == 2 and two.goodputs == pytest.approx((1.0, 1.8 / 1.1, 2.2 / 1.2))
    assert dg.engine_k([0.8, 0.5], 0.5, 1.0).k == 1
    assert dg.engine_k([1.0] * 10, 0.05, 1.0).k == 10  # vLLM's test: perfect acceptance picks the most
    assert dg.engine_k([0.01] * 10, 0.05, 1.0).k == 0  # ... and none picks K = 0 (plain decoding)
    assert dg.engine_k([0.8, 0.0, None, None], 0.1, 1.0).goodputs[3] == pytest.approx(1.8 / 1.3)
    assert dg.engine_k([0.8], None, 1.0) is None and dg.engine_k([None], 0.1, 1.0) is None


# --------------------------------------------------------------------------- rules on recorded passes
def _point(token_id: int, p_draft: dict, p_target: dict) -> DraftedToken:
    """A drafted token with its whole (short) distributions as its top lists."""
    top = lambda dist: [[i, "", p] for i, p in sorted(dist.items(), key=lambda kv: -kv[1]) if p > 0]
    return DraftedToken(id=token_id, text="", p_draft=p_draft[token_id], p_target=p_target[token_id],
                        accept_prob=0.0, uniform=0.0, accepted=False, tested=True, top_draft=top(p_draft),
                        top_target=top(p_target))


def test_the_block_verification_paper_example():
    """Sun et al. 2024, §3: context-free p_target = (1/3, 2/3), p_draft = (2/3, 1/3), γ = 2. Token
    verification keeps 10/9 drafts on average, block verification 11/9. The four drafted blocks
    appear as often as the draft draws them (4 : 2 : 2 : 1), so the means over passes are the
    expectations."""
    p_draft, p_target = {0: 2 / 3, 1: 1 / 3}, {0: 1 / 3, 1: 2 / 3}
    rounds = []
    for block, copies in (((0, 0), 4), ((0, 1), 2), ((1, 0), 2), ((1, 1), 1)):
        for _ in range(copies):
            drafted = [_point(x, p_draft, p_target) for x in block]
            rounds.append(Round(index=len(rounds), drafted=drafted, n_accepted=0,
                                emitted=[EmittedToken(0, "", RESAMPLED, 0.5, 0)], k=2))
    on = dg.rules_on_passes(rounds, 2)
    tokens = {name: estimate.tokens_per_pass for name, estimate in on.rules.items()}
    assert tokens["block"] == pytest.approx((1 + 11 / 9,) * 2)
    assert tokens["full-these-drafts"] == pytest.approx((1 + 10 / 9,) * 2)
    assert tokens["full"] == pytest.approx((1 + 2 / 3 + 4 / 9,) * 2)  # Σ min = 2/3 at each position
    assert tokens["one-hot"] == tokens["exact-match"] == pytest.approx((1 + 1 / 3 + 1 / 9,) * 2)  # p_target(a)
    assert tokens["exact-match-sampled"] == pytest.approx((1 + 4 / 9 + 16 / 81,) * 2)  # Σ p_target·p_draft
    assert all(on.rules[name].exact for name in dg.RULES)  # whole distributions: nothing left open
    assert on.rules["full"].accept[0] == pytest.approx((2 / 3, 2 / 3)) and on.rules["block"].accept == (None, None)


def test_block_verification_keeps_at_least_as_many_as_token_verification_on_average():
    """Sun et al., Theorem 2, on random context-dependent distributions (vocabulary 3, γ = 3),
    every drafted block enumerated with its probability: E[τ] under block ≥ under token by token."""
    rng = random.Random(0)
    dists = {}

    def dist(key):
        if key not in dists:
            w = [rng.random() ** 3 for _ in range(3)]
            dists[key] = [x / sum(w) for x in w]
        return dists[key]

    for trial in range(5):
        block_e = token_e = 0.0
        for xs in itertools.product(range(3), repeat=3):
            pd = [dist(("d", trial, xs[:i]))[xs[i]] for i in range(3)]
            pt = [dist(("t", trial, xs[:i]))[xs[i]] for i in range(3)]
            weight = pd[0] * pd[1] * pd[2]
            weights, p = [], 1.0
            for t, d in zip(pt, pd):
                p = min(1.0, p * t / d)
                weights.append(p)
            masses = [sum(max(weights[i] * a - b, 0.0) for a, b in zip(dist(("t", trial, xs[:i + 1])),
                                                                      dist(("d", trial, xs[:i + 1]))))
                      for i in range(2)]
            block_e += weight * sum(dg.block_reach(pt, pd, masses))
            reach, prod = 0.0, 1.0
            for t, d in zip(pt, pd):
                prod *= min(1.0, t / d)
                reach += prod
            token_e += weight * reach
        assert block_e >= token_e - 1e-12


def test_block_reach_is_exact_with_fractions_on_the_paper_example():
    third = Fraction(1, 3)
    reach = dg.block_reach([third, third], [2 * third, 2 * third], [Fraction(0)])  # block (a, a): p = 1/2, 1/4
    assert reach == [1 - (1 - 0) * (1 - Fraction(1, 4)), Fraction(1, 4)]


def test_kept_tokens_match_the_recorder():
    from specviz.core.recorder import TOP_TOKENS

    assert dg.TOP_TOKENS_KEPT == TOP_TOKENS


@pytest.fixture(scope="module")
def tiny_run():
    """A tiny model's sampled run with the recorder keeping every token of every distribution
    (TOP_TOKENS = the vocabulary), so the figures can be computed exactly, and the same run cut to
    the trace's top 10."""
    import torch
    from helpers import noisy_copy, tiny_llama

    from specviz.core import recorder
    from specviz.drafters import ModelDrafter
    from specviz.core.engine import Generation
    from specviz.core.sampling import SamplingConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    kept, recorder.TOP_TOKENS = recorder.TOP_TOKENS, 256
    try:
        target = tiny_llama(0, lm_head_scale=8.0)
        draft = noisy_copy(target, seed=5, scale=0.01)
        rounds = Generation(target, [3, 17, 42, 99, 5], ModelDrafter(draft, 256), k=4,
                            sampling=SamplingConfig(temperature=1.0), max_new_tokens=40, seed=2).run().rounds
    finally:
        recorder.TOP_TOKENS = kept
        torch.set_num_threads(threads)
    cut = copy.deepcopy(rounds)
    for r in cut:
        for t in r.drafted:
            t.top_draft, t.top_target = t.top_draft[:kept], t.top_target[:kept]
    return rounds, cut


def test_the_bounds_contain_the_exact_figure_of_the_whole_distributions(tiny_run):
    whole, cut = tiny_run
    exact, bounded = dg.rules_on_passes(whole, 4), dg.rules_on_passes(cut, 4)
    assert exact.drafting_passes >= 5
    for name in dg.RULES + dg.EXTRA_FIGURES:
        lo, hi = exact.rules[name].tokens_per_pass
        assert hi - lo < 1e-5, name  # the whole distributions pin the figure down
        low, high = bounded.rules[name].tokens_per_pass
        assert low - 1e-6 <= lo <= high + 1e-6, (name, low, lo, high)
        for (e_lo, _), (b_lo, b_hi) in zip(exact.rules[name].reach, bounded.rules[name].reach):
            assert b_lo - 1e-6 <= e_lo <= b_hi + 1e-6, name
        for e, b in zip(exact.rules[name].accept, bounded.rules[name].accept):
            assert (e is None) == (b is None) and (e is None or b[0] - 1e-6 <= e[0] <= b[1] + 1e-6), name
    # One-hot needs only p_target of the argmax: nearly always among the target's top 10.
    one_hot = bounded.rules["one-hot"].tokens_per_pass
    assert one_hot[1] - one_hot[0] < 0.1
    assert bounded.rules["full-these-drafts"].exact  # the drafted tokens' own probabilities are kept


# --------------------------------------------------------------------------- JSON, summary, charts
def test_the_json_holds_what_the_issue_asks(tiny_run):
    _, cut = tiny_run
    out = json.loads(json.dumps(dg.diagnose(cut, 4, 0.2, 1.1).to_dict()))
    for key in ("zero_accept_share", "acceptance_by_position", "accepted_length_histogram", "cliff", "calibration",
                "engine_k", "expected_tokens_per_pass", "rules_on_passes"):
        assert key in out, key
    assert set(out["expected_tokens_per_pass"]) >= set(dg.RULES)
    assert all(lo <= hi for lo, hi in out["expected_tokens_per_pass"].values())
    assert {"full", "conditional", "tested", "accepted"} <= set(out["acceptance_by_position"][0])
    assert out["engine_k"]["learner_k"] == 4 and 0 <= out["engine_k"]["k"] <= 4
    assert sum(out["accepted_length_histogram"]) == out["rules_on_passes"]["drafting_passes"]
    rows = dict(dg.describe(out))
    assert set(rows) == set(dg.DIAGNOSTICS_HEADERS)


def _old_trace() -> dict:
    """A version-1 trace as older specviz saved it: no root_from_prefill, no top-token lists."""
    drafted = [{"id": 5, "text": "a", "p_draft": 0.5, "p_target": 0.4, "accept_prob": 0.8, "uniform": 0.9,
                "accepted": False, "tested": True}]
    emitted = [{"id": 6, "text": "b", "kind": "resampled", "p_target": 0.3, "round": 0}]
    return {"format": "specviz-trace", "version": 1, "k": 1, "target": "t", "drafter": "d",
            "rounds": [{"index": 0, "drafted": drafted, "n_accepted": 0, "emitted": emitted, "draft_ms": 1.0,
                        "draft_steps": 1, "verify_ms": 2.0, "other_ms": 0.1, "k": 1, "elapsed_s": 0.1}]}


def test_an_old_trace_still_loads_and_shows_what_it_can():
    from specviz.ui.serve.state import RunState

    rounds, meta = trace_from_dict(_old_trace())
    d = dg.diagnose(rounds, 1)
    assert d.rules is None and d.zero_accept_share == 1.0 and d.engine_k is None
    assert dict(dg.describe(d.to_dict()))[dg.DIAGNOSTICS_HEADERS[3]].startswith("—")
    view = RunState.from_rounds(rounds, meta).view(None, "loaded", True)
    assert "zero-accept share" in view.summary and "needs a chain run recorded" in view.summary
    assert len(view.figures()) == 8


def test_the_run_view_shows_the_rules_and_both_acceptances(tiny_run):
    import plotly.graph_objects as go

    from specviz.ui.serve.state import RunState

    _, cut = tiny_run
    view = RunState(k=4, rounds=cut, html=[""] * len(cut), finished=True).view(None, "done", True)
    names = [t.name for t in view.positions.data]
    assert "accepted ÷ tested at position i (conditional)" in names
    assert "accepted ÷ all drafting passes (full)" in names
    assert list(view.rules.data[0].x) == list(dg.RULES)
    assert sum(view.lengths.data[0].y) == dg.rules_on_passes(cut, 4).drafting_passes
    assert "four rules" in view.rules.layout.title.text and "whiskers" in view.rules.layout.title.text
    assert "kept none" in view.lengths.layout.title.text
    assert "expected tokens per pass by rule" in view.summary
    for figure in view.figures():
        go.Figure(json.loads(figure.to_json()))  # valid with plotly's validation on


def _top10(dist: list[float]) -> list:
    ranked = sorted(((p, i) for i, p in enumerate(dist) if p > 0), reverse=True)[: dg.TOP_TOKENS_KEPT]
    return [[i, "", p] for p, i in ranked]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 40), st.floats(0.2, 6.0), st.floats(0.0, 1.0))
def test_each_position_figure_lies_in_its_bounds(seed, vocab, peak, weight):
    """Random p_draft and p_target (vocabulary 2..40, from flat to peaked), the drafted token drawn
    from p_draft, both cut to their top 10: every exact figure lies in its (low, high)."""
    rng = random.Random(seed)

    def dist():
        w = [rng.random() ** peak for _ in range(vocab)]
        return [x / sum(w) for x in w]

    p_draft, p_target = dist(), dist()
    x = rng.choices(range(vocab), weights=p_draft)[0]
    token = DraftedToken(id=x, text="", p_draft=p_draft[x], p_target=p_target[x], accept_prob=0.0, uniform=0.0,
                         accepted=False, tested=True, top_draft=_top10(p_draft), top_target=_top10(p_target))
    position = dg._Position(token)
    argmax = max(range(vocab), key=lambda i: (p_draft[i], -i))
    exact = {
        "overlap": sum(min(a, b) for a, b in zip(p_target, p_draft)),
        "target_of_argmax": p_target[token.top_draft[0][0]],
        "dot": sum(a * b for a, b in zip(p_target, p_draft)),
    }
    for name, value in exact.items():
        low, high = getattr(position, name)()
        assert low - 1e-9 <= value <= high + 1e-9, (name, low, value, high)
    low, high = position.block_mass(weight)
    value = sum(max(weight * a - b, 0.0) for a, b in zip(p_target, p_draft))
    assert low - 1e-9 <= value <= high + 1e-9
    assert p_draft[argmax] == pytest.approx(token.top_draft[0][2])


def test_the_summary_says_where_the_cliff_is_and_a_plain_run_has_no_diagnostics():
    from specviz.ui.draw.run_views import diagnostics_markdown

    # 100 passes, K = 4: 40 keep nothing, 10 keep one, 50 keep two and never a third (0.6, 0.83, 0).
    rounds = ([chain(i, 4, 0) for i in range(40)] + [chain(40 + i, 4, 1) for i in range(10)]
              + [chain(50 + i, 4, 2) for i in range(50)])
    d = dg.diagnose(rounds, 4)
    assert d.cliff.position == 2 and "collapses after position 2" in diagnostics_markdown(d)
    assert diagnostics_markdown(dg.diagnose([chain(0, 0, 0)], 0)) == ""
