"""The verification rules of :data:`specviz.core.sampling.RULES`: each exact rule is exactly lossless,
the lossy control is caught by the same test, block verification never accepts less on average
than token-by-token verification, and each rule's branches behave on hand-built logits.

Chi-square tests. The outcome is the first ``K + 1 = 3`` tokens of a sequence over a 3-token
vocabulary: one verify round of a K = 2 chain, then the target's own draws to fill the three
positions, so the second and third tokens are reached after an accept and after a rejection.
Every context has its own target and draft distribution (27 outcome cells, 26 degrees of
freedom). The exact target law is the product of the target's rows.

Power, for 20,000 draws: a verify rule whose output law is off by a total-variation distance δ
shifts the Pearson statistic's noncentrality to λ = N Σ Δ²/p ≥ N (Σ|Δ|)² = 4Nδ² (Cauchy–Schwarz,
Σp = 1), so δ = 0.03 gives λ ≥ 72: the statistic's mean ≈ 26 + 72 = 98 against the 0.001 critical
value 54.1, a miss probability well below 1e-6. A correct rule fails with probability 0.001; the
seeds are fixed, so each run is the same draw.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specviz.core.sampling import (
    RELAXED_TOP_K,
    RULES,
    RuleError,
    SamplingConfig,
    block_weights,
    check_rule,
    logits_to_probs,
    verify,
    verify_tree,
)
from specviz.figures.analysis import analyse_generation

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V = 3
K = 2
DRAWS = 20_000
LOSSLESS = [name for name, rule in RULES.items() if rule.lossless]


def _tables(seed: int):
    """Target and draft rows for every context of up to K tokens: peaky, so that the draft and
    the target disagree clearly and every branch of every rule is taken often."""
    g = torch.Generator().manual_seed(seed)
    contexts = [c for n in range(K + 1) for c in itertools.product(range(V), repeat=n)]
    p_target = {c: torch.softmax(2.0 * torch.randn(V, generator=g), -1) for c in contexts}
    p_draft = {c: torch.softmax(2.0 * torch.randn(V, generator=g), -1) for c in contexts}
    return p_target, p_draft


def _target_law(p_target) -> torch.Tensor:
    law = torch.zeros(V ** (K + 1), dtype=torch.float64)
    for i, seq in enumerate(itertools.product(range(V), repeat=K + 1)):
        law[i] = float(torch.prod(torch.stack([p_target[seq[:j]][seq[j]] for j in range(K + 1)])))
    return law


def _draws(rule: str, seed: int = 0, n: int = DRAWS) -> tuple[torch.Tensor, torch.Tensor]:
    """Counts of the first K + 1 tokens over ``n`` rounds under ``rule``, and the target's law."""
    p_target, p_draft = _tables(seed)
    g = torch.Generator().manual_seed(seed + 1)
    pick = random.Random(seed)  # the draft's and the continuation's draws: cheaper than torch's
    weights = {c: row.tolist() for c, row in {**p_draft, **{("t",) + c: r for c, r in p_target.items()}}.items()}
    argmax = RULES[rule].proposes == "argmax"
    counts = torch.zeros(V ** (K + 1), dtype=torch.float64)
    for _ in range(n):
        drafted, rows = [], []
        for _ in range(K):
            row = p_draft[tuple(drafted)]
            if argmax:  # the draft's argmax, proposed as the point mass it is
                token = int(row.argmax())
                row = torch.nn.functional.one_hot(torch.tensor(token), V).float()
            else:
                token = pick.choices(range(V), weights[tuple(drafted)])[0]
            drafted.append(token)
            rows.append(row)
        targets = torch.stack([p_target[tuple(drafted[:j])] for j in range(K + 1)])
        result = verify(torch.tensor(drafted), torch.stack(rows), targets, g, rule)
        seq = drafted[: result.n_accepted] + [result.next_token]
        while len(seq) < K + 1:
            seq.append(pick.choices(range(V), weights[("t", *seq)])[0])
        counts[int(sum(t * V ** (K - j) for j, t in enumerate(seq)))] += 1
    return counts, _target_law(p_target)


def _chi2_p(counts: torch.Tensor, law: torch.Tensor) -> float:
    expected = law / law.sum() * counts.sum()
    return float(stats.chisquare(counts.numpy(), expected.numpy()).pvalue)


# The full rule's law is also checked in test_lossless.py: its cases here run with the slow tests.
SLOW_FULL = [pytest.param(r, marks=pytest.mark.slow) if r == "full" else r for r in LOSSLESS]


@pytest.mark.parametrize("rule", SLOW_FULL)
def test_each_exact_rule_emits_the_target_law_on_a_chain(rule):
    """Chi-square over 20,000 rounds (power: module docstring): the first three tokens follow the
    target's law under every exact rule, argmax drafts for one-hot and exact match."""
    counts, law = _draws(rule)
    assert _chi2_p(counts, law) > 1e-3, f"{rule}: output law differs from the target's"


def test_relaxed_top_k_control_fails_the_same_test():
    """The lossy control accepts every drafted token (all 3 are in the top 5), so the output is
    the draft's law where it should be the target's: the same test rejects it outright."""
    assert RELAXED_TOP_K >= V
    counts, law = _draws("relaxed-top-k", n=4_000)
    assert _chi2_p(counts, law) < 1e-12


# --------------------------------------------------------------------------- trees
def _tree_draws(rule: str, n: int = DRAWS):
    """A root with two point-mass children (tokens 0 and 1; the first continued by token 2):
    counts of the first two tokens emitted, and the target's law of those two."""
    p_target, _ = _tables(3)
    tokens = torch.tensor([0, 1, 2])
    parents = [-1, -1, 0]
    rows = torch.nn.functional.one_hot(tokens, V).float()
    targets = torch.stack([p_target[()], p_target[(0,)], p_target[(1,)], p_target[(0, 2)]])
    g = torch.Generator().manual_seed(4)
    counts = torch.zeros(V * V, dtype=torch.float64)
    for _ in range(n):
        result = verify_tree(tokens, parents, rows, targets, True, g, rule)
        seq = [int(tokens[i]) for i in result.path] + [result.next_token]
        while len(seq) < 2:
            seq.append(int(torch.multinomial(p_target[tuple(seq)], 1, generator=g)))
        counts[seq[0] * V + seq[1]] += 1
    law = torch.tensor([float(p_target[()][a] * p_target[(a,)][b]) for a in range(V) for b in range(V)],
                       dtype=torch.float64)
    return counts, law


@pytest.mark.parametrize("rule", [r for r in SLOW_FULL if RULES[getattr(r, "values", [r])[0]].trees])
def test_tree_rules_emit_the_target_law(rule):
    """Trees where the rule applies (every exact rule but block): chi-square over 20,000 walks of a
    tree with two siblings at the root, 9 cells (the power bound above holds with 8 degrees of
    freedom, critical value 26.1)."""
    counts, law = _tree_draws(rule)
    assert _chi2_p(counts, law) > 1e-3


def test_relaxed_top_k_fails_on_trees_too():
    counts, law = _tree_draws("relaxed-top-k", n=4_000)
    assert _chi2_p(counts, law) < 1e-12


def test_block_refuses_a_tree_and_unknown_rules_are_refused():
    rows = torch.full((2, V), 1 / V)
    targets = torch.full((3, V), 1 / V)
    with pytest.raises(RuleError, match="chain"):
        verify_tree(torch.tensor([0, 1]), [-1, -1], rows, targets, False, None, "block")
    with pytest.raises(RuleError, match="one of full, one-hot, exact-match, block, relaxed-top-k"):
        verify(torch.tensor([0]), rows[:1], targets[:2], None, "typical")
    with pytest.raises(RuleError, match="chain"):
        check_rule("block", tree=True)
    assert check_rule("block").lossless and not check_rule("relaxed-top-k").lossless


# --------------------------------------------------------------------------- hand-built logits
NEG = float("-inf")
T1 = SamplingConfig(temperature=1.0)


def _probs(*rows) -> torch.Tensor:
    return logits_to_probs(torch.tensor(rows, dtype=torch.float32), T1)


def _outcomes(rule, tokens, p_draft, p_target, seeds=200):
    return [verify(torch.tensor(tokens), p_draft, p_target, torch.Generator().manual_seed(s), rule)
            for s in range(seeds)]


def test_one_hot_accepts_with_p_target_and_removes_the_token_on_rejection():
    """A point-mass draft of token 0 where the target gives it 1/2: accepted about half the time;
    a rejection never emits token 0 (the residual is the target without it), and a token the
    target rules out (−inf) is never accepted."""
    draft = torch.nn.functional.one_hot(torch.tensor([0]), 4).float()
    target = _probs([0.0, 0.0, NEG, NEG], [10.0, 0.0, 0.0, 0.0])
    results = _outcomes("one-hot", [0], draft, target)
    accepted = sum(r.n_accepted for r in results)
    assert 60 < accepted < 140
    assert all(r.next_token == 1 for r in results if r.n_accepted == 0)
    ruled_out = _outcomes("one-hot", [2], torch.nn.functional.one_hot(torch.tensor([2]), 4).float(), target)
    assert all(r.n_accepted == 0 and r.next_token in (0, 1) for r in ruled_out)


def test_exact_match_keeps_the_draft_iff_the_target_draws_it():
    """The target puts ≈1 on token 1 (+10 against −10): a draft of 1 is kept, a draft of 0 is
    replaced by the target's own draw, 1; the recorded accept probability is p_target(x)."""
    target = _probs([-10.0, 10.0, -10.0], [10.0, -10.0, -10.0])
    hit = _outcomes("exact-match", [1], torch.nn.functional.one_hot(torch.tensor([1]), 3).float(), target, 20)
    miss = _outcomes("exact-match", [0], torch.nn.functional.one_hot(torch.tensor([0]), 3).float(), target, 20)
    assert all(r.n_accepted == 1 and r.next_kind == "bonus" and r.next_token == 0 for r in hit)
    assert all(r.n_accepted == 0 and r.next_kind == "resampled" and r.next_token == 1 for r in miss)
    assert float(miss[0].accept_prob[0]) < 1e-6 < 1 - float(hit[0].accept_prob[0]) + 1


def test_block_accepts_a_block_whose_first_token_alone_would_often_fail():
    """Token 1: the draft was sure of it (+10) and the target gives it 1/2, so the full rule keeps
    it half the time. Token 2: the target is sure (+10), the draft gave it 1/4, so p_2 =
    min(1, ½ · 1 / ¼) = 1 and h_2 = 1: block verification keeps both tokens every time."""
    draft = _probs([10.0, NEG, NEG, NEG], [0.0, 0.0, 0.0, 0.0])
    target = _probs([0.0, 0.0, NEG, NEG], [-10.0, 10.0, -10.0, -10.0], [0.0, 0.0, 0.0, 0.0])
    block = _outcomes("block", [0, 1], draft, target)
    full = _outcomes("full", [0, 1], draft, target)
    assert all(r.n_accepted == 2 and r.next_kind == "bonus" for r in block)
    assert 60 < sum(r.n_accepted == 0 for r in full) < 140
    # Its uniforms and h are recorded: the first token can fail its own test and still be kept.
    assert any(float(r.uniforms[0]) >= float(r.accept_prob[0]) for r in block)


def test_block_rejects_a_token_the_target_rules_out_and_resamples_the_plain_residual():
    """p_target(x_1) = 0 (−inf): p_1 = p_2 = 0, so h_1 = h_2 = 0 and τ = 0; the next token comes
    from max(0, p_target − p_draft) at the first row, which has no mass on x_1."""
    draft = _probs([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    target = _probs([NEG, 0.0, 10.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    results = _outcomes("block", [0, 1], draft, target)
    assert all(r.n_accepted == 0 and r.next_token in (1, 2) for r in results)
    assert all(float(r.accept_prob.max()) == 0.0 for r in results)


def test_relaxed_top_k_accepts_an_unlikely_token_in_the_top_k():
    """p_target(x) ≈ e^−13 (−3 against +10) but x is in the top 5: the lossy control keeps it
    every time, where the full rule would almost never; a token outside the top 5 is refused."""
    v = RELAXED_TOP_K + 2
    target_row = [10.0, -3.0] + [-5.0] * (v - 2)
    draft_row = [0.0] * v
    target = _probs(target_row, [0.0] * v)
    draft = _probs(draft_row)
    assert all(r.n_accepted == 1 for r in _outcomes("relaxed-top-k", [1], draft, target, 20))
    assert sum(r.n_accepted for r in _outcomes("full", [1], draft, target, 20)) == 0
    target_low = _probs([10.0, 9.0, 8.0, 7.0, 6.0, -3.0, 5.0], [0.0] * v)
    assert all(r.n_accepted == 0 for r in _outcomes("relaxed-top-k", [5], draft, target_low, 20))


# --------------------------------------------------------------------------- block >= token
def _expected_accepted(p_target, p_draft, k: int) -> tuple[float, float]:
    """E[accepted drafts] of one round under block and under token-by-token verification,
    exactly: a sum over every drafted block of its probability times the rule's expectation."""
    block = token = 0.0
    for drafted in itertools.product(range(V), repeat=k):
        prob = 1.0
        for j in range(k):
            prob *= float(p_draft[drafted[:j]][drafted[j]])
        if prob == 0.0:
            continue
        pt = torch.stack([p_target[drafted[:j]][drafted[j]] for j in range(k)])
        pd = torch.stack([p_draft[drafted[:j]][drafted[j]] for j in range(k)])
        rows_t = torch.stack([p_target[drafted[:j]] for j in range(k + 1)])
        rows_d = torch.stack([p_draft[drafted[:j]] for j in range(k)])
        _, h, _ = block_weights(pt, pd, rows_t, rows_d)
        h = h.double().tolist()
        stop_after = [1.0]  # Π_{j>i} (1 − h_j), from the end
        for value in reversed(h):
            stop_after.insert(0, stop_after[0] * (1 - value))
        block += prob * sum((i + 1) * h[i] * stop_after[i + 1] for i in range(k))
        ratio = torch.clamp(pt / pd, max=1.0).double().cumprod(0)
        token += prob * float(ratio.sum())
    return block, token


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 3), sharpness=st.floats(0.1, 4.0))
def test_block_accepts_at_least_as_many_as_token_by_token_on_average(seed, k, sharpness):
    """Sun et al. 2024, Theorem 2, exactly (no sampling): over random context-dependent target and
    draft rows, block verification's expected accepted length is never below the token rule's."""
    g = torch.Generator().manual_seed(seed)
    contexts = [c for n in range(k + 1) for c in itertools.product(range(V), repeat=n)]
    p_target = {c: torch.softmax(sharpness * torch.randn(V, generator=g), -1) for c in contexts}
    p_draft = {c: torch.softmax(sharpness * torch.randn(V, generator=g), -1) for c in contexts}
    block, token = _expected_accepted(p_target, p_draft, k)
    assert block >= token - 1e-5


def test_block_weights_give_the_papers_worked_example():
    """Sun et al. 2024, Section 1: target (1/3, 2/3), draft (2/3, 1/3), K = 2 gives 11/9 accepted
    tokens per block against token verification's 10/9."""
    p_target = {c: torch.tensor([1 / 3, 2 / 3, 0.0]) for n in range(3) for c in itertools.product(range(V), repeat=n)}
    p_draft = {c: torch.tensor([2 / 3, 1 / 3, 0.0]) for n in range(3) for c in itertools.product(range(V), repeat=n)}
    block, token = _expected_accepted(p_target, p_draft, 2)
    assert block == pytest.approx(11 / 9, abs=1e-5)
    assert token == pytest.approx(10 / 9, abs=1e-5)


# --------------------------------------------------------------------------- through the engine
@pytest.mark.parametrize("rule", LOSSLESS)
def test_greedy_runs_equal_plain_greedy_under_every_exact_rule(rule):
    """At T = 0 a tiny random target (from a config) drafted by a perturbed copy writes the plain
    greedy text under every exact rule, with both accepts and rejections along the way."""
    from helpers import noisy_copy, tiny_llama

    from specviz.drafters import ModelDrafter
    from specviz.core.engine import Generation

    target = tiny_llama(0, lm_head_scale=8.0)
    draft = noisy_copy(target, seed=5, scale=0.003)
    greedy = SamplingConfig(temperature=0.0)
    prompt = [3, 17, 42, 99, 5]
    plain = Generation(target, prompt, None, sampling=greedy, max_new_tokens=24).run().token_ids
    gen = Generation(target, prompt, ModelDrafter(draft, 256), k=3, sampling=greedy, max_new_tokens=24,
                     rule=rule).run()
    assert gen.token_ids == plain
    analysis = analyse_generation(gen)
    assert analysis.accepted > 0 and analysis.counts["resampled"] > 0


def test_engine_refuses_block_for_trees_and_unknown_rules():
    from helpers import tiny_llama

    from specviz.drafters import ModelDrafter
    from specviz.core.engine import Generation

    target = tiny_llama(0, lm_head_scale=8.0)
    for rule, branches, words in (("block", 2, "chain"), ("nope", 1, "one of")):
        with pytest.raises(RuleError, match=words):
            Generation(target, [1, 2], ModelDrafter(target, 256), k=2, branches=branches, rule=rule).run()


def test_argmax_rules_draft_point_masses_and_sampled_rules_do_not():
    """One-hot and exact match have the drafter propose its argmax (p_draft = 1 for every drafted
    token in the trace); the full rule's drafts are samples."""
    from helpers import noisy_copy, tiny_llama

    from specviz.drafters import ModelDrafter
    from specviz.core.engine import Generation

    target = tiny_llama(0, lm_head_scale=8.0)
    draft = noisy_copy(target, seed=5, scale=0.003)
    for rule, point in (("one-hot", True), ("exact-match", True), ("full", False)):
        gen = Generation(target, [3, 17, 42], ModelDrafter(draft, 256), k=3, sampling=T1, max_new_tokens=16,
                         rule=rule).run()
        p_drafts = [d.p_draft for r in gen.rounds for d in r.drafted]
        assert all(p == 1.0 for p in p_drafts) == point, rule


# --------------------------------------------------------------------------- request, trace, page
def test_the_request_takes_a_rule_and_refuses_a_bad_one_in_one_sentence():
    from specviz.run.request import RequestError, validate_request

    base = {"prompt": "hi", "target": "t", "draft": "ngram", "k": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "max_new_tokens": 8, "seed": 0}
    assert validate_request(**base).rule == "full"
    assert validate_request(**base, rule=" One-Hot ").rule == "one-hot"
    with pytest.raises(RequestError, match="^the verification rule must be one of .*got 'typical'$"):
        validate_request(**base, rule="typical")
    with pytest.raises(RequestError, match="chain of drafts only"):
        validate_request(**base, rule="block", branches=2)
    assert validate_request(**base, rule="exact-match", branches=2).rule == "exact-match"


def test_old_traces_read_as_full_and_a_bad_rule_is_refused():
    from specviz.figures.trace import TraceError, _settings, trace_rule

    assert trace_rule({}) == "full" and trace_rule({"settings": {"k": 4}}) == "full"
    assert trace_rule({"settings": {"rule": "block"}}) == "block"
    with pytest.raises(TraceError, match="not a verification rule"):
        _settings({"rule": "<b>typical</b>"}, "settings")


def test_the_page_names_a_run_s_rule_and_flags_the_lossy_control():
    from specviz.ui.serve.state import RunState, rule_note

    assert "LOSSY" in rule_note("relaxed-top-k") and "vLLM" in rule_note("one-hot")
    loaded = RunState.from_rounds([], {"settings": {"rule": "relaxed-top-k"}})
    assert loaded.rule == "relaxed-top-k"
    assert RunState.from_rounds([], {}).rule == "full"


def test_every_lesson_sets_the_rule_back_to_the_full_rule():
    """The rules lesson's one run is a full-rule run (the Run tab replays it under the others), and
    every lesson sets the Verification rule, so a visitor's earlier one-hot run does not carry over."""
    from specviz.ui.tabs.lessons_tab import LESSON_FIELDS, LESSONS, apply_lesson

    assert "rule" in LESSON_FIELDS
    rules = {}
    for name in LESSONS:
        updates = apply_lesson(name, "cpu")[: len(LESSON_FIELDS)]
        rules[name] = updates[LESSON_FIELDS.index("rule")]["value"]
    assert set(rules.values()) == {"full"}, rules
