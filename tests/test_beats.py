"""The beats of a verify pass, the scoring of a guess, the replay of the rule at one position, and
the bundled traces they play (specviz/data/traces): no model, no browser."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz.core.sampling import verify_tree
from specviz.figures.trace import trace_from_dict
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.ui.draw import beat_charts
from specviz.ui.draw.escape import as_text
from specviz.ui.teach.beats import (
    BEAT_KINDS,
    count_distribution,
    guess_points,
    in_test_order,
    most_different_position,
    position_distributions,
    score_guess,
    simulate_draws,
    total_variation,
)
from specviz.ui.teach.beats import beats as beats_of

TRACES = Path(__file__).resolve().parents[1] / "specviz" / "data" / "traces"
BUNDLED = sorted(TRACES.glob("*.json"))


def _tok(i, text, p_draft, p_target, u, accepted, tested, parent=None, top_draft=None, top_target=None):
    return DraftedToken(id=i, text=text, p_draft=p_draft, p_target=p_target,
                        accept_prob=min(1.0, p_target / p_draft), uniform=u, accepted=accepted, tested=tested,
                        parent=parent, top_draft=top_draft or [], top_target=top_target or [])


def _chain_with_rejection() -> Round:
    drafted = [_tok(10, " the", 0.6, 0.9, 0.30, True, True, -1),
               _tok(11, " cat", 0.5, 0.1, 0.70, False, True, 0,
                    top_draft=[[11, " cat", 0.5], [12, " dog", 0.3]],
                    top_target=[[12, " dog", 0.6], [11, " cat", 0.1], [13, " cow", 0.2]]),
               _tok(14, " sat", 0.8, 0.4, 0.10, False, False, 1)]
    emitted = [EmittedToken(10, " the", ACCEPTED, 0.9, 0),
               EmittedToken(12, " dog", RESAMPLED, 0.6, 0, rejected_id=11, rejected_text=" cat", p_source=0.75,
                            top_source=[[12, " dog", 0.75], [13, " cow", 0.25]])]
    return Round(index=0, drafted=drafted, n_accepted=1, emitted=emitted, k=3)


def test_a_chain_plays_drafts_then_one_verify_pass_then_tests_then_the_resample():
    round_ = _chain_with_rejection()
    played = beats_of(round_)
    assert [b.kind for b in played] == ["draft", "draft", "draft", "verify", "test", "test", "residual"]
    assert [b.emitted for b in played] == [0, 0, 0, 0, 1, 1, 2]
    assert all(b.kind in BEAT_KINDS for b in played)
    first, second = played[4], played[5]
    assert first.accepted and "u = 0.3000 < 1.0000: accepted" in first.sentence
    assert not second.accepted and second.accept_prob == pytest.approx(0.2)
    assert "min(1, 0.1000/0.5000) = 0.2000" in second.sentence and "u = 0.7000 ≥ 0.2000: rejected" in second.sentence
    assert "draws “␣dog” (probability 0.7500 there)" in played[-1].sentence
    assert "emits 2 tokens: 1 accepted + 1 resampled" in played[-1].sentence
    assert "p_draft = 0.8000" in played[2].sentence  # the untested draft still appears with its p_draft
    assert not any(b.reveals for b in played[:4]) and all(b.reveals for b in played[4:])


def test_all_accepted_ends_with_the_bonus_token_and_a_plain_pass_with_the_target_draw():
    drafted = [_tok(1, "a", 0.5, 0.5, 0.2, True, True, -1), _tok(2, "b", 0.5, 0.9, 0.9, True, True, 0)]
    emitted = [EmittedToken(1, "a", ACCEPTED, 0.5, 0), EmittedToken(2, "b", ACCEPTED, 0.9, 0),
               EmittedToken(3, "c", BONUS, 0.7, 0, p_source=0.7)]
    played = beats_of(Round(index=0, drafted=drafted, n_accepted=2, emitted=emitted, k=2))
    assert played[-1].kind == BONUS and played[-1].emitted == 3
    assert "bonus token “c”" in played[-1].sentence and "2 accepted + 1 bonus" in played[-1].sentence
    plain = beats_of(Round(index=1, emitted=[EmittedToken(4, "d", PLAIN, 0.3, 1, p_source=0.3)]))
    assert [b.kind for b in plain] == [PLAIN] and "p_target = 0.3000" in plain[0].sentence


def _tree() -> Round:
    """Context → 0 (rejected), 2 (accepted; its children 3 and 4 rejected), 5 never tested; 1 under 0."""
    drafted = [_tok(20, "x", 1.0, 0.1, 0.5, False, True, -1), _tok(21, "y", 1.0, 0.5, 0.5, False, False, 0),
               _tok(22, "z", 1.0, 0.6, 0.2, True, True, -1), _tok(23, "p", 1.0, 0.2, 0.9, False, True, 2),
               _tok(24, "q", 1.0, 0.3, 0.8, False, True, 2), _tok(25, "w", 1.0, 0.3, 0.1, False, False, -1)]
    emitted = [EmittedToken(22, "z", ACCEPTED, 0.6, 0),
               EmittedToken(26, "r", RESAMPLED, 0.4, 0, rejected_id=24, rejected_text="q", p_source=0.8)]
    return Round(index=0, drafted=drafted, n_accepted=1, emitted=emitted, k=2)


def test_a_tree_is_tested_down_the_accepted_path_siblings_in_list_order():
    round_ = _tree()
    assert in_test_order(round_) == [0, 2, 3, 4]
    played = beats_of(round_)
    tests = [b for b in played if b.kind == "test"]
    assert [b.node for b in tests] == [0, 2, 3, 4] and [b.depth for b in tests] == [0, 0, 1, 1]
    assert "against the residual the 1 rejected sibling(s) left" in tests[1].sentence
    assert "after the 2 rejected siblings" in played[-1].sentence
    assert "position 2 after “z”" in played[3].sentence  # drafts say where they hang in the tree


@pytest.mark.parametrize("seed", range(6))
def test_the_test_order_follows_verify_tree(seed):
    """On trees verified by the real :func:`verify_tree`, the beats walk its accepted path and test
    exactly the nodes it tested."""
    gen = torch.Generator().manual_seed(seed)
    parents = [-1, -1, 0, 0, 1, 2, -1]
    vocab = 5
    p_target = torch.softmax(torch.randn(len(parents) + 1, vocab, generator=gen) * 2, dim=-1)
    tokens = torch.tensor([0, 1, 1, 2, 0, 3, 4])
    result = verify_tree(tokens, parents, torch.zeros(len(parents), vocab), p_target, True, gen)
    drafted = [DraftedToken(int(t), str(int(t)), 1.0, float(result.p_target_node[i]), float(result.accept_prob[i]),
                            float(result.uniforms[i]), result.accepted[i], result.tested[i], parent=parents[i])
               for i, t in enumerate(tokens)]
    emitted = [EmittedToken(int(tokens[i]), "", ACCEPTED, 0.0, 0) for i in result.path]
    emitted.append(EmittedToken(result.next_token, "", result.next_kind, result.next_p_target, 0))
    round_ = Round(index=0, drafted=drafted, n_accepted=len(result.path), emitted=emitted)
    order = in_test_order(round_)
    assert set(order) == {i for i, t in enumerate(result.tested) if t}
    assert [i for i in order if drafted[i].accepted] == result.path
    assert beats_of(round_)[-1].kind == ("residual" if result.next_kind == RESAMPLED else BONUS)


def test_a_guess_earns_the_probability_that_it_is_right():
    assert guess_points(0.2, True) == pytest.approx(0.2) and guess_points(0.2, False) == pytest.approx(0.8)
    round_ = _chain_with_rejection()
    dist = count_distribution(round_)
    # a = 1, 0.2, 0.5: P(1) = 0, P(2) = 1·0.8, P(3) = 0.2·0.5, P(4) = 0.2·0.5
    assert dist == pytest.approx({1: 0.0, 2: 0.8, 3: 0.1, 4: 0.1}) and sum(dist.values()) == pytest.approx(1.0)
    score = score_guess(round_, {0: True, 2: True}, 2)  # the untested third draft scores nothing
    assert score.possible == 3
    assert score.points == pytest.approx(1.0 + 0.8 + 0.8) and score.best == pytest.approx(1.0 + 0.8 + 0.8)
    worst = score_guess(round_, {1: True}, 1)
    assert worst.points == pytest.approx(0.0 + 0.2 + 0.0)
    tree = score_guess(_tree(), {2: True}, 2)  # a tree's count is scored on the outcome
    assert count_distribution(_tree()) is None and tree.points == pytest.approx(0.9 + 0.6 + 0.8 + 0.7 + 1.0)


def test_accepted_mass_plus_residual_mass_is_p_target_and_the_rule_returns_it():
    token = _chain_with_rejection().drafted[1]
    dists = position_distributions(token)
    assert dists.ids[:3] == (12, 13, 11) and dists.drafted_id == 11
    p_draft, p_target = dists.arrays()
    assert p_draft.sum() == pytest.approx(1.0) and p_target.sum() == pytest.approx(1.0)
    assert dists.other_draft == pytest.approx(0.2) and dists.other_target == pytest.approx(0.1)
    np.testing.assert_allclose(np.minimum(p_draft, p_target) + np.clip(p_target - p_draft, 0, None), p_target)
    speculative, control = simulate_draws(dists, 200_000, seed=1)
    assert speculative.sum() == control.sum() == 200_000
    assert total_variation(speculative / 2e5, p_target) < 0.01
    assert total_variation(control / 2e5, p_draft) < 0.01 and total_variation(control / 2e5, p_target) > 0.3
    assert np.array_equal(simulate_draws(dists, 500, seed=3)[0], simulate_draws(dists, 500, seed=3)[0])
    with pytest.raises(ValueError):
        simulate_draws(dists, 0)
    with pytest.raises(ValueError, match="no recorded distributions"):
        position_distributions(_tree().drafted[0])


def test_the_bundled_traces_are_small_real_and_load():
    assert len(BUNDLED) >= 4
    readme = (TRACES / "README.md").read_text(encoding="utf-8")
    for path in BUNDLED:
        assert path.stat().st_size < 300_000, path.name
        assert path.name in readme
        rounds, meta = trace_from_dict(json.loads(path.read_text(encoding="utf-8")))
        # the offline models' real runs: SmolLM2 in float32, the same-family pair in bfloat16
        assert (meta["target"], meta["dtype"]) in {("smollm2-135m-instruct", "float32"),
                                                   ("qwen2.5-coder-1.5b-instruct", "bfloat16")} and rounds
        assert any(t.top_target for r in rounds for t in r.drafted), f"{path.name} is not instrumented"
    trees = [p for p in BUNDLED if "tree" in p.name]
    assert trees and all(json.loads(p.read_text())["settings"]["branches"] == 3 for p in trees)


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_every_pass_of_a_bundled_trace_plays_with_its_own_numbers(path):
    rounds, _ = trace_from_dict(json.loads(path.read_text(encoding="utf-8")))
    for round_ in rounds:
        played = beats_of(round_)
        tests = [b for b in played if b.kind == "test"]
        assert len(tests) == sum(t.tested for t in round_.drafted)
        assert sum(b.accepted for b in tests) == round_.n_accepted
        assert played[-1].emitted == len(round_.emitted)
        for b in tests:  # the verdict is the recorded one, and it is u against the acceptance probability
            if abs(b.uniform - b.accept_prob) > 1e-6:
                assert b.accepted == (b.uniform < b.accept_prob), b.sentence
        for i in range(len(played)):  # every beat draws (plotly validates the figure)
            fig = beat_charts.beat_figure(round_, played[: i + 1], "Pass 1 · ")
            if played[i].kind == "test":
                assert any(list(tr.x or []) == [played[i].uniform] for tr in fig.data if tr.name == "u")


# --------------------------------------------------------------------------- the tab's callbacks (no browser)
def test_the_tab_opens_a_bundled_trace_at_a_pass_and_beat_and_steps_across_passes():
    from specviz.ui.tabs import watch_tab

    out = watch_tab.open_trace("poem_int8", 2, 4)
    assert len(out) == 14  # source, state, pass slider, the pass's ten views (its replay last), the rule switch
    assert "Pass 2 under full" in out[11] and out[13] == {"value": "full", "__type__": "update"}
    w = out[1]
    # The scrubber counts beats as the stage does, 1 to 8: beat 4 is the scrubber's 4.
    assert out[2]["value"] == 2 and out[3] == {"maximum": 8, "value": 4, "__type__": "update"}
    assert as_text(beats_of(w.rounds[1])[3].sentence) in out[4] and "pass 2 of 19 · beat 4 of 8" in out[4]
    assert watch_tab.open_trace(watch_tab.BUNDLED["poem_int8"], 2, 99)[3]["value"] == 8  # clamped to the pass
    for beat in (1, 5, 8):  # the scrubber at n shows the stage's "beat n of 8"
        scrubber, stage = watch_tab.on_beat(w, 2, beat, False)[:2]
        assert scrubber["value"] == beat and f"beat {beat} of 8" in stage
        assert as_text(beats_of(w.rounds[1])[beat - 1].sentence) in stage
    forward = watch_tab.step(w, 2, 4, False, "full", delta=1)  # one beat on: the scrubber and the stage both say 5
    assert forward[1]["value"] == 5 and "beat 5 of 8" in forward[2]
    nxt = watch_tab.step(w, 2, 8, False, "one-hot", delta=1)  # past the last beat: the next pass's first
    assert nxt[0]["value"] == 3 and nxt[1]["value"] == 1 and "beat 1 of" in nxt[2]
    back = watch_tab.step(w, 3, 1, False, delta=-1)  # and back to the previous pass's last beat
    assert back[0]["value"] == 2 and back[1]["value"] == 8 and "beat 8 of 8" in back[2]
    # The replay comes with the pass it replays, in the same return (no event chained after it): a
    # step to another pass carries that pass's replay under the chosen rule, a step within a pass
    # leaves it as it is.
    assert "Pass 3 under one-hot" in nxt[-2] and "Pass 2 under full" in back[-2]
    import gradio as gr
    assert all(u == gr.skip() for u in forward[-2:])
    with pytest.raises(gr.Error, match="No bundled trace"):
        watch_tab.open_trace("nope", 1, 0)
    with pytest.raises(gr.Error):
        watch_tab.open_trace("poem_int8", 99, 0)


def test_the_tab_scores_a_guess_once_and_only_before_the_reveal():
    from specviz.ui.tabs import watch_tab

    w = watch_tab.bundled("poem_int8")
    text, score, *views = watch_tab.lock_guess(w, 2, 1, ["0"], 2, watch_tab.new_score(), False)
    want = score_guess(w.rounds[1], {0: True}, 2)
    assert f"{want.points:.2f} expected points out of 3" in text and score["points"] == pytest.approx(want.points)
    assert views[0]["value"] == 6 and "beat 6 of 8 (test)" in views[1]  # the reveal starts at the first test
    again, same, *_ = watch_tab.lock_guess(w, 2, 1, ["0"], 2, score, False)
    assert "already scored" in again and same == score
    late, unchanged, *_ = watch_tab.lock_guess(w, 3, 7, [], 0, score, False)
    assert "already showing" in late and unchanged == score
    fig = watch_tab.draw(w, 2, 7, 2000)
    assert "2,000 draws" in fig.layout.title.text


def test_the_tab_registers_its_deep_link_and_watches_the_visitors_last_run():
    import gradio as gr

    from specviz.ui.tabs import watch_tab
    from specviz.ui.context import PageContext
    from specviz.ui.serve.state import RunState

    with gr.Blocks():
        ctx = PageContext(public=True, tab_request=None, lesson_note=None, last_analysis=None, lesson_runs=None,
                          run_state=gr.State(None))
        watch_tab.build(ctx)
    open_fn, outputs = ctx.watch
    assert open_fn is watch_tab.open_trace and len(open_fn("copy_lookup", 1, 0)) == len(outputs)
    run = RunState.from_trace(json.loads((TRACES / "tree_lookup_t1.json").read_text(encoding="utf-8")))
    w, pass_slider, *views = watch_tab.load(watch_tab.LAST_RUN, run, False)
    assert w.rounds == run.rounds and "saved trace" in w.label and pass_slider["maximum"] == len(run.rounds)
    with pytest.raises(gr.Error, match="Nothing run yet"):
        watch_tab.load(watch_tab.LAST_RUN, None, False)


def test_the_trace_menu_loads_once_per_choice():
    """The menu's input event fired twice for one choice in Chromium, and the second load, landing
    late, moved a visitor who had typed a pass back to the trace's first pass: the menu loads on
    select (once per choice), and nothing else of the menu loads."""
    import gradio as gr

    from specviz.ui.context import PageContext
    from specviz.ui.tabs import watch_tab

    with gr.Blocks() as demo:
        ctx = PageContext(public=False, tab_request=None, lesson_note=None, last_analysis=None, lesson_runs=None,
                          run_state=gr.State(None))
        watch_tab.build(ctx)
    menu = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sv-watch-source")
    loads = [(event, fn.fn) for fn in demo.fns.values() for block, event in fn.targets
             if getattr(block, "_id", block) == menu._id]
    assert loads == [("select", watch_tab.load)], loads


def test_the_watch_tabs_link_names_a_bundled_trace_and_not_a_visitors_own_run():
    from specviz.ui.tabs import watch_tab

    assert watch_tab.watch_query(watch_tab.BUNDLED["poem_int8"], 2, 3) == "?trace=poem_int8&pass=2&beat=3"
    assert watch_tab.watch_query("copy_lookup", None, None) == "?trace=copy_lookup&pass=1&beat=1"
    assert not watch_tab.watch_query(watch_tab.LAST_RUN, 2, 3).startswith("?")


def test_the_losslessness_view_opens_where_p_draft_and_p_target_differ_most():
    """Pass 3 of poem_int8 drafts first a token whose p_draft ≈ p_target (total variation 0.012): a
    stacked bar with almost no residual teaches nothing, so the view opens (and Draw draws) at the
    pass's most different position, and so does a test beat at the near-identical position."""
    from specviz.ui.tabs import watch_tab

    w = watch_tab.bundled("poem_int8")
    round_ = w.rounds[2]
    tv = [total_variation(*position_distributions(t).arrays()) for t in round_.drafted]
    best = int(np.argmax(tv))
    assert tv[0] < 0.05 and best != 0 and tv[best] > 0.2  # the case worth fixing is in the trace
    assert most_different_position(round_) == best
    views = watch_tab.on_pass(w, 3, False)
    stack, stack_text = views[3], views[4]
    assert stack.layout.title.text.startswith(f"Draft {best + 1} ") and f"(draft {best + 1}; " in stack_text
    assert f"total variation {tv[best]:.3f}" in stack_text
    drawn = watch_tab.draw(w, 3, 1, 500)  # Draw runs the rule at the position on show
    want = beat_charts.draws_figure(position_distributions(round_.drafted[best]), *simulate_draws(
        position_distributions(round_.drafted[best]), 500))
    assert list(drawn.data[0].x) == list(want.data[0].x)
    first_test = next(k for k, b in enumerate(beats_of(round_)) if b.kind == "test")
    tested = beats_of(round_)[first_test].node
    at_test = watch_tab.on_beat(w, 3, first_test + 1, False)
    # The first test is at the near-identical position: the view stays on the most
    # different one and says why, rather than open on a bar with no residual.
    assert tested == 0 and at_test[3].layout.title.text.startswith(f"Draft {best + 1} ")
    assert "almost the same" in at_test[4]
