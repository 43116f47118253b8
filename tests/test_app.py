"""The Gradio app: it builds, its callbacks stream a real run, and bad input is a clear gr.Error."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import plotly.graph_objects as go
import pytest

import app
from specviz.figures.trace import TRACE_VERSION
from specviz.core.records import DraftedToken, EmittedToken, Round
from specviz.ui.tabs import run_stream
from specviz.ui.draw.run_views import inspector_markdown, render_round
from specviz.ui.tabs.lossless_check import run_lossless
from specviz.ui.tabs.replay import export_run, inspect_token, load_trace, replay
from specviz.ui.tabs.run_stream import run_demo
from specviz.ui.serve.settings import EXAMPLES


@pytest.fixture(scope="module")
def offline_model():
    """The offline SmolLM2-135M-Instruct, prepared once (the app's default target)."""
    from specviz.models import loading as models

    models.prepare_offline("smollm2-135m-instruct")
    return models.load_model("smollm2-135m-instruct", device="cpu", dtype="float32")


class _NoProgress:
    def __call__(self, *args, **kwargs):
        pass


def _inputs(**overrides):
    values = dict(prompt=EXAMPLES[0][0], target_id="smollm2-135m-instruct", drafter_kind="ngram",
                  draft_model="", early_exit_layers=2, k=4, temperature=0.0, top_k=0, top_p=1.0,
                  max_new_tokens=24, seed=0, chat=True, device="cpu", dtype="float32", baselines={})
    values.update(overrides)
    return values


def _run(**overrides):
    return list(run_demo(**_inputs(**overrides), progress=_NoProgress()))


def test_demo_builds_with_the_expected_controls():
    assert isinstance(app.demo, gr.Blocks)
    labels = {getattr(block, "label", None) for block in app.demo.blocks.values()}
    for label in ("Prompt", "Model pair", "Drafter", "Lookahead K", "Temperature (0 = greedy)", "Top-k (0 = off)",
                  "Top-p", "Max new tokens", "Seed"):
        assert label in labels, label
    assert app.demo.fns, "no callbacks wired"


def test_the_rule_menus_of_the_run_and_watch_tabs_label_each_rule_alike():
    """One label per rule (specviz.core.rules.Rule.label): the Run tab's dropdown and the Watch tab's
    switch offer the same (label, rule) pairs, the lossy control marked in both."""
    from specviz.core.rules import RULES

    menus = {block.elem_id: [tuple(choice) for choice in block.choices] for block in app.demo.blocks.values()
             if getattr(block, "choices", None) and {c[1] for c in block.choices} == set(RULES)}
    assert len(menus) == 2, menus  # the Run tab's and the Watch tab's
    first, second = menus.values()
    assert first == second == [(rule.label, name) for name, rule in RULES.items()]
    assert ("relaxed-top-k (LOSSY control)", "relaxed-top-k") in first


def test_render_round_strikes_through_the_rejected_draft_before_the_resampled_token():
    round_ = Round(index=0, n_accepted=1, drafted=[
        DraftedToken(5, "good", 0.5, 0.6, 1.0, 0.1, True, True),
        DraftedToken(6, "<bad>", 0.9, 0.1, 0.11, 0.7, False, True),
    ], emitted=[
        EmittedToken(5, "good", "accepted", 0.6, 0),
        EmittedToken(7, " fix", "resampled", 0.3, 0, rejected_id=6, rejected_text="<bad>"),
    ])
    html = render_round(round_, eos_ids=set())
    assert html.index('class="sv-rejected"') < html.index('class="sv-tok sv-resampled"')
    assert "&lt;bad&gt;" in html and "<bad>" not in html  # token text is escaped
    assert "p_draft = 0.900" in html


def test_render_round_marks_an_eos_token_that_has_no_text():
    round_ = Round(index=3, emitted=[EmittedToken(2, "", "bonus", 0.9, 3)])
    assert "⟨eos⟩" in render_round(round_, eos_ids={2})


@pytest.mark.parametrize("overrides, message", [
    (dict(prompt="  "), "prompt is empty"),
    (dict(k=0), "Lookahead K"),
    (dict(k=17), "Lookahead K"),
    (dict(temperature=-1), "temperature"),
    (dict(top_p=0.0), "top-p"),
    (dict(k=None), "Lookahead K"),
    (dict(k=2.5), "whole number"),
    (dict(temperature="hot"), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(max_new_tokens="many"), "Max new tokens"),
    (dict(seed=None), "seed"),
    (dict(drafter_kind="telepathy"), "drafter"),
    (dict(max_new_tokens=0), "Max new tokens"),
    (dict(drafter_kind="model", draft_model=""), "draft model"),
    (dict(drafter_kind="early-exit", early_exit_layers=99), "layer"),
    (dict(target_id="no-such-org/no-such-model"), "no-such-org/no-such-model"),
])
def test_bad_input_is_a_clear_gradio_error(offline_model, overrides, message):
    with pytest.raises(gr.Error) as err:
        _run(**overrides)
    assert message.lower() in str(err.value.message).lower()


def test_a_run_streams_coloured_tokens_a_summary_and_eight_charts(offline_model):
    updates = _run(max_new_tokens=24)
    final_html, final_summary, *figures, baselines, state, slider = updates[-1]
    assert "sv-accepted" in final_html
    assert "**Done**" in final_summary and "measured speedup" in final_summary
    assert len(figures) == 8 and all(isinstance(fig, go.Figure) for fig in figures)
    assert slider["maximum"] == len(state.rounds) == slider["value"]
    # The plain baseline was timed and kept for the next run, unless this run's own timings
    # contradicted it (a busy machine), which the summary then says.
    assert len(baselines) == 1 or (state.remeasure and "times plain decoding again" in final_summary)
    # Token updates come every round; there were several before the end.
    assert len(updates) > 3


def test_the_same_settings_reuse_the_measured_baseline(offline_model, monkeypatch):
    # Reuse is the subject here: keep the baseline whatever this (possibly busy) machine's run says
    # of it (tests/test_run_speedup.py checks that a contradicted one is dropped).
    monkeypatch.setattr(run_stream, "baseline_still_valid", lambda baseline, rounds: True)
    first = _run(max_new_tokens=8)
    assert any("Timing plain decoding" in str(update[1]) for update in first)
    baselines = first[-1][-3]
    second = _run(max_new_tokens=8, baselines=baselines)
    assert second[-1][-3] == baselines and second[-1][-2].baseline == first[-1][-2].baseline
    assert not any("Timing plain decoding" in str(update[1]) for update in second)


def test_lossless_panel_reports_distances_and_p_values(offline_model):
    fig, text = run_lossless(
        prompt="The capital of France is", target_id="smollm2-135m-instruct", drafter_kind="early-exit",
        draft_model="", early_exit_layers=6, k=1, temperature=1.0, top_k=0, top_p=1.0, seed=0, chat=False,
        device="cpu", dtype="float32", n_draws=1000, progress=_NoProgress())
    assert isinstance(fig, go.Figure)
    assert "total-variation distance" in text and "chi-square p-value" in text


# --------------------------------------------------------------------------- inspector, replay, export
@pytest.fixture(scope="module")
def sampled_run(offline_model):
    """A sampled run with a draft that gets rejected sometimes (int8 self-draft at T = 1)."""
    updates = _run(drafter_kind="int8", temperature=1.0, top_k=20, max_new_tokens=24, seed=3,
                   prompt="Write one sentence about the sea.")
    return updates[-1]


def _slot_of(state, kind):
    for r in state.rounds:
        for i, tok in enumerate(r.emitted):
            if tok.kind == kind:
                return r, i
    pytest.skip(f"no {kind} token in this run")


def test_inspector_tells_the_story_of_an_accepted_token_with_the_trace_numbers(sampled_run):
    state = sampled_run[-2]
    round_, slot = _slot_of(state, "accepted")
    evt = SimpleNamespace(round=round_.index, slot=slot)
    text, fig, tree = inspect_token(state, evt)
    assert 'as a tree' in tree and 'sv-accepted' in tree
    d = round_.drafted[slot]
    for value in (d.p_draft, d.p_target, d.accept_prob, d.uniform):
        assert f"{value:.4f}" in text
    assert "accepted" in text
    assert {t.name for t in fig.data} == {"p_draft", "p_target"}


def test_inspector_on_a_rejection_shows_the_residual_with_the_resampled_token(sampled_run):
    state = sampled_run[-2]
    round_, slot = _slot_of(state, "resampled")
    text, fig, tree = inspect_token(state, SimpleNamespace(round=round_.index, slot=slot))
    assert 'sv-rejected' in tree and 'sv-resampled' in tree
    assert "rejected" in text and "residual" in text
    tok = round_.emitted[slot]
    assert f"{tok.p_source:.4f}" in text
    residual = next(t for t in fig.data if t.name.startswith("residual"))
    starred = [y for x, y in zip(residual.x, residual.y) if x.startswith("★") and x.endswith(f"#{tok.id}")]
    assert starred == [pytest.approx(tok.p_source)]
    # the residual the inspector shows is normalised: its top tokens carry at most all the mass
    assert sum(p for _, _, p in tok.top_source) <= 1.0 + 1e-6


def test_replay_shows_the_run_as_it_stood_after_each_pass(sampled_run):
    state = sampled_run[-2]
    n = len(state.rounds)
    html_1, summary_1, *_ = replay(1, state)
    assert html_1.count('class="sv-round"') == 1 and "after pass 1" in summary_1
    html_n, *_ = replay(n, state)
    assert html_n.count('class="sv-round"') == n
    with pytest.raises(gr.Error, match="Pass must be"):
        replay(n + 1, state)


def test_an_exported_trace_loads_back_and_replays_to_the_same_tokens_and_figures(sampled_run):
    import json

    state = sampled_run[-2]
    trace_path, csv_path, charts_path = export_run(state)
    assert open(csv_path, encoding="utf-8").read().startswith("pass,k,proposed")
    assert "plotly" in open(charts_path, encoding="utf-8").read()
    html, summary, *figures, loaded, slider = load_trace(trace_path)
    assert [t.id for r in loaded.rounds for t in r.emitted] == [t.id for r in state.rounds for t in r.emitted]
    assert replay(len(state.rounds), loaded)[1].split("\n", 1)[1] == \
        replay(len(state.rounds), state)[1].split("\n", 1)[1]  # same table, same notes
    assert json.load(open(trace_path, encoding="utf-8"))["version"] == TRACE_VERSION
    with pytest.raises(gr.Error, match="Not a specviz trace"):
        bad = trace_path.replace(".json", "-bad.json")
        open(bad, "w", encoding="utf-8").write("{}")
        load_trace(bad)


def test_a_tree_round_draws_as_a_tree_with_the_path_and_the_struck_branch():
    from specviz.ui.draw.run_views import round_tree_html

    round_ = Round(index=0, n_accepted=2, drafted=[
        DraftedToken(1, "a", 1.0, 0.1, 0.1, 0.5, accepted=False, tested=True, parent=-1),
        DraftedToken(2, "b", 1.0, 0.6, 0.6, 0.5, accepted=True, tested=True, parent=-1),
        DraftedToken(3, "c", 1.0, 0.9, 0.9, 0.5, accepted=True, tested=True, parent=1),
        DraftedToken(5, "e", 1.0, 0.2, 0.2, 0.5, accepted=False, tested=False, parent=0),
    ], emitted=[EmittedToken(2, "b", "accepted", 0.6, 0), EmittedToken(3, "c", "accepted", 0.9, 0),
                EmittedToken(4, "d", "bonus", 0.5, 0)])
    html = round_tree_html(round_)
    assert html.count("<s class=\"sv-rejected\"") == 1 and html.count("sv-accepted") == 2
    assert "sv-untested" in html  # the rejected branch's child was never tested
    assert html.index("c\u00a0#3") < html.index("sv-bonus")  # the bonus token ends the path


def test_a_tree_run_streams_through_the_app(offline_model):
    updates = _run(prompt=EXAMPLES[0][0], branches=4, tree_nodes=16, max_new_tokens=24)
    state = updates[-1][-2]
    assert any(len({t.parent for t in r.drafted}) < len(r.drafted) for r in state.rounds)  # siblings
    assert "**Done**" in updates[-1][1]


def test_the_inspector_follows_the_accepted_path_of_a_tree_round():
    round_ = Round(index=0, n_accepted=1, drafted=[
        DraftedToken(1, "a", 1.0, 0.1, 0.1, 0.5, accepted=False, tested=True, parent=-1),
        DraftedToken(2, "b", 1.0, 0.6, 0.6, 0.5, accepted=True, tested=True, parent=-1),
        DraftedToken(3, "c", 1.0, 0.2, 0.2, 0.7, accepted=False, tested=True, parent=1),
    ], emitted=[EmittedToken(2, "b", "accepted", 0.6, 0),
                EmittedToken(9, "z", "resampled", 0.3, 0, rejected_id=3, rejected_text="c")])
    assert round_.drafted_for(0).id == 2 and round_.drafted_for(1).id == 3
    assert "b\u00a0#2" in inspector_markdown(round_, 0) and "0.6000" in inspector_markdown(round_, 0)
    assert "Rejected draft token** <code>c\u00a0#3</code>" in inspector_markdown(round_, 1)


def test_the_inspector_says_when_the_prefill_scored_the_first_token():
    plain = Round(index=0, emitted=[EmittedToken(5, "x", "plain", 0.9, 0)], root_from_prefill=True)
    assert "needed no pass of its own" in inspector_markdown(plain, 0)
    later = Round(index=1, emitted=[EmittedToken(6, "y", "plain", 0.8, 1)])
    assert "prefill" not in inspector_markdown(later, 0)


def test_a_trace_written_by_run_trace_on_the_offline_model_loads_in_the_app(offline_model, tmp_path, capsys):
    import json

    from specviz import cli

    path = tmp_path / "cli.trace.json"
    assert cli.main(["run", "--target", "smollm2-135m-instruct", "--draft", "ngram", "-k", "4", "--temperature", "0",
                     "--max-new-tokens", "12", "--chat", "--device", "cpu", "--dtype", "float32", "--no-baseline",
                     "--prompt", "Fix the typos: Teh cat sat on teh mat.", "--trace", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    html, summary, *figures, state, slider = load_trace(str(path))
    assert [t.id for r in state.rounds for t in r.emitted] == [t["id"] for t in printed["tokens"]]
    assert "**Loaded**" in summary and slider["value"] == len(state.rounds) == printed["target_passes"]
    assert f"{printed['alpha']:.3f}" in summary


def test_the_inspector_sits_right_under_the_token_panel_and_the_tour_says_so():
    """a click on a token answers where the visitor is looking. The inspector is
    the next thing after the token panel (before the charts and the summary; it used to sit under
    six charts, the summary table and its notes, about 1,800 px below the tokens), the page scrolls
    it into view when it opens, and the tour's step about it says where it is."""
    from specviz.ui import tour
    from specviz.ui.tabs import run_tab

    order = [block.elem_id for block in app.demo.blocks.values() if getattr(block, "elem_id", None)]
    tokens, inspector = order.index("sv-tokens"), order.index("sv-inspector")
    assert tokens < inspector < order.index("sv-alpha") and inspector < order.index("sv-summary")
    assert all(not name.startswith("sv-") or name.startswith("sv-inspector") for name in order[tokens + 1:inspector])
    assert "scrollIntoView" in run_tab.INSPECTOR_IN_VIEW_JS
    step = next(s for s in tour.STEPS if "token inspector" in s["text"])
    assert "right under the tokens" in step["text"]
