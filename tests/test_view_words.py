"""The words of the views match the event: a tree's pass is described as a tree, a tree's bonus
token as its accepted path reaching a leaf, a pass with nothing drafted as a plain target step; the
summary shows the speedup with its range and says how it was measured."""

from __future__ import annotations

import html

import pytest
from helpers import tiny_llama

from specviz.figures.analysis import analyse, health_notes
from specviz.drafters import PromptLookupDrafter
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig
from specviz.figures.speedup import PlainBaseline
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.ui.draw.run_views import TREE_BONUS_LABEL, inspector_markdown, legend_html, render_round, summary_markdown
from specviz.figures.analysis import analyse_generation


def node(i: int, parent: int, accepted: bool, tested: bool = True) -> DraftedToken:
    return DraftedToken(100 + i, f"n{i}", 0.5, 0.4, 0.8, 0.5 if accepted else 0.95, accepted=accepted, tested=tested,
                        parent=parent)


def tree_round(index: int = 3) -> Round:
    """Context → 3 children (two rejected, the third accepted) → its child (accepted, a leaf); the
    rejected first child has 7 untested descendants: 11 nodes, a path of 2, then the bonus."""
    drafted = [node(0, -1, False), node(1, -1, False), node(2, -1, True), node(3, 2, True)]
    drafted += [node(4 + j, 0 if j == 0 else 3 + j, False, tested=False) for j in range(7)]
    emitted = [EmittedToken(102, "n2", ACCEPTED, 0.4, index), EmittedToken(103, "n3", ACCEPTED, 0.4, index),
               EmittedToken(7, "b", BONUS, 0.3, index)]
    return Round(index=index, drafted=drafted, n_accepted=2, emitted=emitted, verify_ms=20.0, k=8)


def chain_round(index: int, accepted: int, drafted: int = 4) -> Round:
    tokens = [DraftedToken(100 + j, f"d{j}", 0.5, 0.4, 0.8, 0.5 if j < accepted else 0.95, accepted=j < accepted,
                           tested=j <= accepted) for j in range(drafted)]
    last = PLAIN if not drafted else (BONUS if accepted == drafted else RESAMPLED)
    emitted = [EmittedToken(100 + j, f"d{j}", ACCEPTED, 0.4, index) for j in range(accepted)]
    emitted.append(EmittedToken(9, "x", last, 0.3, index, rejected_id=100 + accepted if last == RESAMPLED else None,
                                rejected_text=f"d{accepted}" if last == RESAMPLED else None))
    return Round(index=index, drafted=tokens, n_accepted=accepted, emitted=emitted, verify_ms=12.0, k=drafted)


def test_a_tree_pass_is_described_as_a_tree_and_its_bonus_as_a_leaf_reached():
    r = tree_round()
    story = inspector_markdown(r, 2)
    assert "draft tree of 11 nodes" in story and "accepted path is 2 nodes long" in story
    assert "accepted path reached a leaf of the draft tree (depth 2)" in story
    assert "of 11 drafts accepted" not in story and "all 11 drafts" not in story
    assert "Verify pass 4" in inspector_markdown(r, 0)
    assert html.escape(TREE_BONUS_LABEL) in render_round(r, set())
    assert "all drafts accepted" not in render_round(r, set())


def test_a_chain_bonus_says_all_drafts_were_accepted():
    r = chain_round(0, 4)
    story = inspector_markdown(r, 4)
    assert "(4 of 4 drafts accepted)" in story and "all 4 drafts were accepted" in story
    assert "bonus token (all drafts accepted)" in render_round(r, set())
    assert "all K accepted" not in legend_html()


def test_a_pass_that_drafted_nothing_is_a_plain_step():
    r = chain_round(10, 0, drafted=0)
    story = inspector_markdown(r, 0)
    assert story.startswith("**Pass 11**: nothing was drafted; plain target step.")
    assert "0 of 0" not in story and "Verify pass" not in story
    assert "**Plain target step**" in story


def test_the_summary_of_a_tree_run_says_tree_and_that_the_theory_is_a_chains():
    rounds = [tree_round(i) for i in range(12)]
    a = analyse(rounds, 8, wall_s=1.0)
    assert (a.tree_rounds, a.tree_nodes_max, a.tree_branching_max) == (12, 11, 3)
    summary = summary_markdown(a, "done")
    assert "a tree: up to 3 children at a node (B) and 11 nodes per pass (N), in 12 of 12 passes" in summary
    assert "a chain's formula, not a tree's" in summary
    assert any("drafted trees" in n and "underestimates" in n for n in health_notes(a))
    chain = summary_markdown(analyse([chain_round(i, 2) for i in range(3)], 4, wall_s=1.0), "done")
    assert "a chain of up to K = 4 drafts" in chain and "tree" not in chain


def test_the_summary_shows_the_speedup_with_its_range_and_how_it_was_measured():
    baseline = PlainBaseline(12.0, 0.0, (40.0, 60.0, 50.0), (30, 30, 30), 0.0)
    rounds = [chain_round(i, 2) for i in range(10)]
    a = analyse(rounds, 4, wall_s=30 * 0.025, baseline=baseline)
    summary = summary_markdown(a, "done")
    assert "**2.00× (1.60–2.40×)** faster than plain decoding" in summary
    assert "the median of 3 timed plain runs" in summary and "slowest and the fastest plain run" in summary
    single = analyse(rounds[:3], 4, wall_s=9 * 0.025, baseline=PlainBaseline(12.0, 20.0))
    text = summary_markdown(single, "done")
    assert "one timed plain run" in text and "no range" in text
    slow = analyse([chain_round(i, 0) for i in range(3)], 4, wall_s=3.0, baseline=PlainBaseline(12.0, 20.0))
    assert "— a slowdown**" in summary_markdown(slow, "done")
    assert any(n.startswith(f"Slower than plain decoding ({slow.speedup:.2f}×)") for n in health_notes(slow))


def test_a_baseline_that_stopped_early_is_compared_per_token_and_the_summary_says_so():
    baseline = PlainBaseline(12.0, 0.0, (50.0,), (12,), 0.0)
    a = analyse([chain_round(i, 2) for i in range(10)], 4, wall_s=1.0, baseline=baseline)
    assert "stopped at end-of-text after 12 tokens, so it is compared per token" in summary_markdown(a, "done")


@pytest.mark.usefixtures("one_torch_thread")
def test_a_real_tree_run_is_described_as_a_tree():
    target = tiny_llama(0)
    prompt = [5, 6, 7, 8, 5, 6, 9, 10, 5, 6, 11, 12, 5, 6, 7, 13, 5, 6]
    run = Generation(target, prompt, PromptLookupDrafter(256), k=4, sampling=SamplingConfig(1.0), max_new_tokens=30,
                     seed=2, branches=4).run()
    a = analyse_generation(run)
    assert a.tree_rounds > 0 and a.tree_branching_max >= 2
    assert "a tree: up to" in summary_markdown(a, "done")
    tree = next(r for r in run.rounds if any(t.parent == -1 for t in r.drafted[1:]))
    assert "It verified a draft tree of" in inspector_markdown(tree, 0)


def test_the_tokens_per_pass_theory_hover_says_it_is_a_chains_formula_for_a_tree_run():
    from specviz.ui.draw import charts

    rounds = [tree_round(i) for i in range(4)]
    a = analyse(rounds, 8, wall_s=1.0)
    theory = next(t for t in charts.tokens_per_pass_figure(rounds, 8, a.alpha).data if t.name.startswith("theory"))
    assert "a chain's formula: 4 of 4 passes drafted a tree" in theory.hovertemplate
    chain = [chain_round(i, 2) for i in range(4)]
    theory = next(t for t in charts.tokens_per_pass_figure(chain, 4, 0.5).data if t.name.startswith("theory"))
    assert "tree" not in theory.hovertemplate


def test_a_range_that_includes_1_is_no_clear_speedup_or_slowdown():
    baseline = PlainBaseline(12.0, 0.0, (23.0, 30.0, 27.0), (30, 30, 30), 0.0)
    rounds = [chain_round(i, 2) for i in range(10)]
    a = analyse(rounds, 4, wall_s=30 * 0.025, baseline=baseline)  # 25 ms a token against 23-30
    assert a.speedup_low < 1 < a.speedup_high
    summary = summary_markdown(a, "done")
    assert "no clear difference from plain decoding (its range includes 1×)" in summary
    assert "faster than plain" not in summary and "a slowdown" not in summary
    assert not any("Slower than plain" in n for n in health_notes(a))


def test_a_round_that_cannot_pay_names_the_part_that_costs_too_much():
    """"the draft step is too expensive" was said whatever made a round cost more
    than K + 1 plain steps; with v = 8.70 and K·c = 0.41 (a slow verify pass on a busy CPU) the
    verify pass is the one to name. The word is decided from K·c against v."""
    import dataclasses

    a = analyse([chain_round(i, 2) for i in range(10)], 4, wall_s=1.0)
    slow_verify = dataclasses.replace(a, k=4, cost_ratio_c=0.1025, verify_cost_v=8.70)
    notes = " ".join(health_notes(slow_verify))
    assert "The verify pass is too slow here (v = 8.70" in notes and "draft step is too expensive" not in notes
    costly_draft = dataclasses.replace(a, k=4, cost_ratio_c=1.5, verify_cost_v=1.1)
    notes = " ".join(health_notes(costly_draft))
    assert "The draft step is too expensive here (K·c = 6.00" in notes and "verify pass is too slow" not in notes


def test_the_tree_note_says_under_or_over_from_the_sign_of_the_gap():
    """the tree note said the chain formula "underestimates" with 3.29 tokens per
    pass observed against 3.36 for a chain: the word now follows the sign."""
    import dataclasses

    a = analyse([tree_round(i) for i in range(12)], 8, wall_s=1.0)
    below = dataclasses.replace(a, tokens_per_pass=3.29, predicted_tokens_per_pass=3.36)
    note = next(n for n in health_notes(below) if "drafted trees" in n)
    assert "overestimates" in note and "underestimates" not in note and "3.29 observed, 3.36" in note
    above = dataclasses.replace(a, tokens_per_pass=3.50, predicted_tokens_per_pass=3.36)
    assert "underestimates" in next(n for n in health_notes(above) if "drafted trees" in n)


def test_the_inspector_writes_tiny_probabilities_with_significant_figures():
    """"0.0000 / 0.0004 = 0.0021" told nothing; a probability under 0.001 is
    written to three significant figures, and the ratio shows its two numbers."""
    d = DraftedToken(5, "x", 0.000412, 8.4e-7, 0.00204, 0.5, accepted=False, tested=True)
    r = Round(index=0, drafted=[d], n_accepted=0,
              emitted=[EmittedToken(7, "y", RESAMPLED, 0.3, 0, rejected_id=5, rejected_text="x")])
    story = inspector_markdown(r, 0)
    assert "p_draft = 0.000412, p_target = 8.4e-07" in story
    assert "min(1, p_target / p_draft) = **0.0020** (p_target / p_draft = 8.4e-07 / 0.000412)" in story
    assert "0.0000" not in story
