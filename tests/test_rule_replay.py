"""The Watch tab's rule switch (:func:`specviz.ui.teach.beats.replay_rule`): a pass's test replayed
under each verification rule with its recorded u, on hand-built rows whose answers are worked out
by hand, on the bundled traces (the full rule must give back the recorded verdicts), and against
:func:`specviz.core.sampling.block_weights` for block verification."""

from __future__ import annotations

import json

import pytest
import torch

from specviz.core.sampling import block_weights
from specviz.figures.trace import trace_from_dict
from specviz.core.records import DraftedToken, Round
from specviz.ui.teach.beats import is_chain, replay_rule
from specviz.ui.tabs.watch_tab import TRACES, bundled, rule_replay_views

# Two positions over a 3-token vocabulary, whole distributions recorded (lists shorter than the
# kept top 10 are the whole distribution, so every figure is exact).
P_DRAFT = [[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]
P_TARGET = [[0.2, 0.5, 0.3], [0.4, 0.4, 0.2], [0.3, 0.3, 0.4]]  # the last row: after both drafts (bonus)


def _top(row):
    return sorted(([i, f"t{i}", p] for i, p in enumerate(row)), key=lambda e: -e[2])


def _token(i, x, u, accepted, tested):
    p_d, p_t = P_DRAFT[i][x], P_TARGET[i][x]
    return DraftedToken(id=x, text=f"t{x}", p_draft=p_d, p_target=p_t, accept_prob=min(1.0, p_t / p_d), uniform=u,
                        accepted=accepted, tested=tested, top_draft=_top(P_DRAFT[i]), top_target=_top(P_TARGET[i]))


def _pass(u0=0.1, u1=0.25):
    """Drafts x = (0, 2): full-rule tests min(1, 0.2/0.6) = 1/3 and min(1, 0.2/0.7) = 2/7."""
    drafted = [_token(0, 0, u0, u0 < 1 / 3, True), _token(1, 2, u1, u0 < 1 / 3 and u1 < 2 / 7, u0 < 1 / 3)]
    return Round(index=0, drafted=drafted, n_accepted=sum(t.accepted for t in drafted))


def test_full_rule_tests_u_against_the_ratio():
    r = replay_rule(_pass(), "full")
    assert [s.accept for s in r.steps] == [pytest.approx((1 / 3, 1 / 3)), pytest.approx((2 / 7, 2 / 7))]
    assert [s.passes for s in r.steps] == [True, True] and r.accepted == (2, 2)
    assert r.expected == pytest.approx((1 / 3 + 1 / 3 * 2 / 7,) * 2)
    assert replay_rule(_pass(u1=0.3), "full").accepted == (1, 1)  # 0.3 ≥ 2/7


def test_one_hot_and_exact_match_test_the_argmax_with_p_target():
    """The argmaxes are tokens 0 and 2, p_target 0.2 each: u0 = 0.1 passes, u1 = 0.25 fails, where
    the full rule (2/7 > 0.25) kept both: the rules disagree on the same u."""
    for rule in ("one-hot", "exact-match"):
        r = replay_rule(_pass(), rule)
        assert [s.token_id for s in r.steps] == [0, 2]
        assert [s.accept for s in r.steps] == [(0.2, 0.2), (0.2, 0.2)]
        assert [s.passes for s in r.steps] == [True, False] and [s.kept for s in r.steps] == [True, False]
        assert r.accepted == (1, 1) and r.expected == pytest.approx((0.2 + 0.04,) * 2)


def test_block_weights_by_hand_and_as_the_sampler_computes_them():
    """p_1 = 1/3, p_2 = 1/3 · 0.2/0.7 = 2/21; R_1 = Σ max(p_1·p_target(·|x_1) − p_draft(·|x_1), 0)
    = 0.4/3 − 0.1 = 1/30, h_1 = R_1/(R_1 + 1 − p_1) = 1/21, h_2 = p_2 = 2/21. u = (0.04, 0.5): the
    first passes its own test, the second fails, τ = 1. u = (0.5, 0.09): the first fails but the
    second passes, so block verification keeps both (τ = 2) where the full rule keeps none."""
    h = [1 / 21, 2 / 21]
    r = replay_rule(_pass(0.04, 0.5), "block")
    assert [s.accept for s in r.steps] == [pytest.approx((x, x)) for x in h]
    assert r.accepted == (1, 1) and [s.kept for s in r.steps] == [True, False]
    rescued = replay_rule(_pass(0.5, 0.09), "block")
    assert [s.passes for s in rescued.steps] == [False, True] and rescued.accepted == (2, 2)
    assert replay_rule(_pass(0.5, 0.09), "full").accepted == (0, 0)
    # P(τ ≥ 1) = 1 − (1 − h_1)(1 − h_2), P(τ ≥ 2) = h_2.
    assert r.expected[0] == pytest.approx(1 - (1 - h[0]) * (1 - h[1]) + h[1])
    w, h_sampler, _ = block_weights(torch.tensor([0.2, 0.2]), torch.tensor([0.6, 0.7]), torch.tensor(P_TARGET),
                                    torch.tensor(P_DRAFT))
    assert w.tolist() == pytest.approx([1.0, 1 / 3, 2 / 21], rel=1e-5)
    assert [s.accept[0] for s in r.steps] == pytest.approx(h_sampler.tolist(), rel=1e-5)


def test_relaxed_top_k_keeps_a_draft_in_the_targets_top_5_whatever_u():
    """Six tokens: the drafted token 5 is the target's 6th (out of the top 5), token 4 its 5th (in)."""
    target = [0.3, 0.25, 0.2, 0.15, 0.06, 0.04]
    draft = [0.1, 0.1, 0.1, 0.1, 0.1, 0.5]

    def one(x):
        return Round(index=0, drafted=[DraftedToken(
            id=x, text=f"t{x}", p_draft=draft[x], p_target=target[x], accept_prob=1.0, uniform=0.99, accepted=True,
            tested=True, top_draft=_top(draft), top_target=_top(target))], n_accepted=1)

    assert replay_rule(one(5), "relaxed-top-k").accepted == (0, 0)
    kept = replay_rule(one(4), "relaxed-top-k")
    assert kept.accepted == (1, 1) and kept.steps[0].uniform is None  # no u used
    assert replay_rule(one(4), "full").accepted == (0, 0)  # u = 0.99 ≥ 0.06/0.1


def test_the_bucket_bounds_an_argmax_the_target_list_misses():
    """A full top-10 target list without the draft's argmax: p_target(argmax) is in [0, the
    smallest kept p_target]; a u inside that range leaves the test open, one above it fails."""
    target = [[i, f"t{i}", 0.09] for i in range(10)]  # 0.9 kept, 0.1 in the bucket, each ≤ 0.09
    draft = [[50, "t50", 0.8], [3, "t3", 0.2]]

    def one(u):
        return Round(index=0, drafted=[DraftedToken(id=3, text="t3", p_draft=0.2, p_target=0.09, accept_prob=0.45,
                                                    uniform=u, accepted=u < 0.45, tested=True, top_draft=draft,
                                                    top_target=target)], n_accepted=int(u < 0.45))

    open_ = replay_rule(one(0.05), "one-hot")
    assert open_.steps[0].accept == (0.0, 0.09) and open_.steps[0].passes is None and open_.accepted == (0, 1)
    assert replay_rule(one(0.5), "one-hot").accepted == (0, 0)


def test_the_full_rule_gives_back_every_recorded_verdict_of_the_bundled_chains():
    for stem in ("poem_int8", "early_exit_rejection", "copy_lookup"):
        rounds = trace_from_dict(json.loads((TRACES / f"{stem}.json").read_text(encoding="utf-8")))[0]
        for r in rounds:
            if not r.drafted or not is_chain(r):
                continue
            replay = replay_rule(r, "full")
            assert replay.accepted == (r.n_accepted, r.n_accepted), (stem, r.index)
            assert [s.kept for s in replay.steps] == [t.accepted for t in r.drafted], (stem, r.index)


def test_trees_unknown_rules_and_unrecorded_passes_are_refused_in_a_sentence():
    tree = next(r for r in bundled("tree_lookup_t0").rounds if r.drafted and not is_chain(r))
    with pytest.raises(ValueError, match="chain passes only"):
        replay_rule(tree, "full")
    with pytest.raises(ValueError, match="must be one of"):
        replay_rule(_pass(), "greedy")
    bare = Round(index=0, drafted=[DraftedToken(id=1, text="a", p_draft=0.5, p_target=0.4, accept_prob=0.8,
                                                uniform=0.3, accepted=True, tested=True)], n_accepted=1)
    assert replay_rule(bare, "full").accepted == (1, 1)
    with pytest.raises(ValueError, match="without its distributions"):
        replay_rule(bare, "block")


def test_the_tab_says_each_rules_count_on_a_pass_where_they_disagree():
    """poem_int8's pass 13 (the browser test's pass): the rules keep different numbers of drafts."""
    w = bundled("poem_int8")
    counts = {rule: replay_rule(w.rounds[12], rule).accepted for rule in ("full", "one-hot", "block")}
    assert len(set(counts.values())) == 3
    for rule, (n, _) in counts.items():
        text, figure = rule_replay_views(w, 13, rule)
        assert f"keeps {n} of 4 drafts" in text and figure.data
