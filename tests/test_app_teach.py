"""The teaching tabs' callbacks (specviz/ui/*_tab.py), called as the page and the Gradio API call them: the
playground's figures are the closed form's, bad values get one clear line, the "load the last
run" button reads the last_analysis State, lessons set up the Run tab, and a sweep refuses bad
values before loading anything."""

from __future__ import annotations

import gradio as gr
import pytest

from specviz.ui.tabs.experiments_tab import run_sweep_ui
from specviz.ui.tabs.lessons_tab import CLEARED, LESSON_FIELDS, LESSON_TARGETS, apply_lesson
from specviz.ui.page import build_page
from specviz.ui.tabs.playground_tab import analysis_for_playground, playground_update
from specviz.ui.tabs.side_by_side_tab import run_side_by_side
from specviz.ui.teach import playground

gradio_client = pytest.importorskip("gradio_client")


def test_playground_figures_are_the_closed_forms():
    figures, fig, mc_text, mc_fig = playground_update(0.8, 4, 0.1, 1.0, "α and K", 24, 0)
    cf = playground.closed_form(0.8, 4, 0.1, 1.0)
    assert f"E[N] = **{cf.tokens_per_pass:.3f}**" in figures
    assert f"S = **{cf.speedup:.3f}×**" in figures
    assert f"**K = {cf.best_k}**" in figures
    assert f"{cf.tokens_per_pass:.3f} |" in mc_text  # the Monte-Carlo table quotes the closed form beside it
    assert fig.data[0].type == "heatmap" and len(fig.data[0].y) == playground.BEST_K_MAX
    _, fig_c, _, _ = playground_update(0.8, 4, 0.1, 1.0, "α and c", 24, 0)
    assert fig_c.layout.yaxis.title.text == "c"


@pytest.mark.parametrize("args,message", [
    ((None, 4, 0.1, 1.0, "α and K", 24, 0), "Per-token α must be a number in [0, 1]"),
    ((0.5, 2.5, 0.1, 1.0, "α and K", 24, 0), "Lookahead K must be a whole number between 1 and 16"),
    ((0.5, 4, "cheap", 1.0, "α and K", 24, 0), "Cost ratio c must be a number"),
    ((0.5, 4, 0.1, 0, "α and K", 24, 0), "Verify cost v must be a number in (0, 10]"),
    ((0.5, 4, 0.1, 1.0, "α and z", 24, 0), "The map is over"),
])
def test_playground_refuses_bad_values_with_one_line(args, message):
    with pytest.raises(gr.Error) as err:
        playground_update(*args)
    assert message in str(err.value)


def test_load_last_run_reads_alpha_k_c_v_from_the_state():
    row = {"alpha": 0.734, "k": 4, "cost_ratio_c": 0.012, "verify_cost_v": 1.07}
    alpha, k, c, v, note = analysis_for_playground(row)
    assert (alpha["value"], k["value"], c["value"], v["value"]) == (0.73, 4, 0.012, 1.07)
    assert "per-token α = 0.734" in note and "outside" not in note
    # A busy CPU's v = 4.4 fits the slider; v = 7.5 does not, and the note says so.
    assert analysis_for_playground({**row, "verify_cost_v": 4.4})[3]["value"] == 4.4
    *_, v, note = analysis_for_playground({**row, "verify_cost_v": 7.5})
    assert v["value"] == 6.0 and "The measured v = 7.5 is outside the slider's 0.5–6: set to 6." in note
    with pytest.raises(gr.Error, match="No real run"):
        analysis_for_playground(None)


def test_a_lesson_sets_up_the_run_tab_and_says_what_to_notice():
    outputs = apply_lesson("A misaligned draft (early exit)")
    # The Run tab is selected in the browser (ui.context.select_tab_js); the previous run is cleared.
    assert len(outputs) == len(LESSON_TARGETS) == len(LESSON_FIELDS) + 2 + len(CLEARED)
    values = dict(zip(LESSON_TARGETS, outputs))
    assert values["drafter_kind"]["value"] == "early-exit" and values["early_exit_layers"]["value"] == 4
    assert "almost never guess" in values["lesson_note"]["value"] and values["lesson_note"]["visible"] is True
    assert values["lesson_runs"] == {"slug": "early_exit", "runs": []}  # no run made under it yet


def test_every_lesson_note_is_whole_sentences():
    """The Lessons tab shows each note as written: it starts with a capital and ends a sentence."""
    from specviz.ui.tabs.lessons_tab import LESSONS, lesson_note

    for name in LESSONS:
        note = lesson_note(name)
        assert note[0].isupper() and note.endswith("."), (name, note[:40])


def test_the_lesson_buttons_render_in_a_system_font_stack_that_covers_their_labels():
    """A lesson button's capital "A" showed in another face than the rest of its label (the theme's
    web font): every lesson button carries the class whose rule sets whole system fonts only."""
    import re

    import gradio as gr

    from specviz.ui.draw.styles import SYSTEM_SANS, page_css
    from specviz.ui.tabs.lessons_tab import LESSONS

    demo = build_page(public=False)
    buttons = {b.value: b for b in demo.blocks.values() if isinstance(b, gr.Button) and b.value in LESSONS}
    assert set(buttons) == set(LESSONS)
    assert all("sv-lesson-button" in (b.elem_classes or []) for b in buttons.values()), buttons
    rule = re.search(r"\.sv-lesson-button[^{]*\{([^}]*)\}", page_css())
    assert rule and f"font-family: {SYSTEM_SANS} !important" in rule.group(1)
    families = [f.strip().strip('"') for f in SYSTEM_SANS.split(",")]
    assert families[-1] == "sans-serif" and "Source Sans Pro" not in families
    assert any(name.startswith("A ") for name in LESSONS)  # the labels that showed the stray "A"


def test_sweep_refuses_bad_values_before_loading_a_model():
    args = dict(prompt="Hi", target_id="smollm2-135m-instruct", drafter_kind="ngram", draft_model="",
                early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0, seed=0, chat=True, device="cpu",
                dtype="float32", last_analysis=None)
    with pytest.raises(gr.Error, match="Temperature must be a number"):
        next(run_sweep_ui("Temperature", "0 hot", 8, **args))
    with pytest.raises(gr.Error, match="Lookahead K must be a whole number"):
        next(run_sweep_ui("Lookahead K", "1 99", 8, **args))
    with pytest.raises(gr.Error, match="Type the k values"):
        next(run_sweep_ui("Lookahead K", "  ", 8, **args))


def test_the_teaching_endpoints_are_in_the_api():
    demo = build_page(public=False)
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        client = gradio_client.Client(demo.local_url, verbose=False)
        names = set(client.view_api(return_format="dict", print_info=False)["named_endpoints"])
        assert {"/playground", "/playground_load_run", "/sweep", "/side_by_side", "/lossless"} <= names
        figures, *_ = client.predict(0.8, 4, 0.1, 1.0, "α and K", 24, 0, api_name="/playground")
        assert f"{playground.closed_form(0.8, 4, 0.1, 1.0).speedup:.3f}" in figures
        with pytest.raises(Exception) as err:
            client.predict("x", 4, 0.1, 1.0, "α and K", 24, 0, api_name="/playground")
        assert "Per-token α must be a number" in str(err.value)
    finally:
        demo.close()


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    from helpers import bpe_tokenizer
    from test_cli import _save_tiny

    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(tmp_path_factory.mktemp("teach") / "target", tok, seed=0)


def _held(target: str) -> dict:
    return dict(prompt="the quick brown fox the quick brown fox the quick", target_id=target, drafter_kind="ngram",
                draft_model="", early_exit_layers=1, k=3, temperature=0.0, top_k=0, top_p=1.0, seed=0, chat=False,
                device="cpu", dtype="float32")


class _NoProgress:
    def __call__(self, *args, **kwargs):
        pass


def test_an_experiment_streams_rows_and_a_csv_and_fills_last_analysis(tiny_target, one_torch_thread):
    updates = list(run_sweep_ui("Temperature", "0, 1", 6, **_held(tiny_target), last_analysis=None,
                                    progress=_NoProgress()))
    status, table, *figs, csv_path, last, trend = updates[-1]
    assert "**Done**: 2 settings of temperature" in status
    assert trend in ("rises", "falls", "stays", None) and all(u[-1] is None for u in updates[:-1])
    assert [row[0] for row in table] == ["0.0", "1.0"]
    assert open(csv_path, encoding="utf-8").read().count("\n") == 3  # header and two rows
    assert last["temperature"] == 1.0 and "alpha" in last
    assert any(str(u[0]).startswith("Running setting") for u in updates[:-1])


def test_side_by_side_shows_one_coloured_output_per_drafter(tiny_target, one_torch_thread):
    updates = list(run_side_by_side(["Prompt lookup", "Early-exit self-draft", "None (plain decoding)"], 6,
                                        **_held(tiny_target), progress=_NoProgress()))
    html, status = updates[-1]
    assert "**Done**: 3 drafters" in status
    for draft in ("ngram", "early-exit:1", "none"):
        assert f'data-draft="{draft}"' in html
    assert html.count('class="sv-out"') == 3 and "per-token α" in html
    assert "inspector" not in html  # these outputs open no inspector, so they promise none
    with pytest.raises(gr.Error, match="Tick at least one drafter"):
        next(run_side_by_side([], 6, **_held(tiny_target), progress=_NoProgress()))


def test_public_mode_caps_the_settings_of_an_experiment(tiny_target):
    with pytest.raises(gr.Error, match="at most 6 settings"):
        next(run_sweep_ui("Lookahead K", "1 2 3 4 5 6 7", 6, **_held(tiny_target), last_analysis=None,
                              progress=_NoProgress(), public=True))


def test_the_learned_head_preset_drafts_free_text_and_its_note_quotes_no_old_measurement():
    """Choosing the learned-head preset replaces the typo prompt (garbled at T = 1) with the free-text
    poem, other presets leave the prompt alone; its note says where the run's own figures are
    instead of quoting a speedup measured once elsewhere; the lesson does not say float32 for a page
    whose Dtype is auto (bfloat16 on a CPU that runs it natively)."""
    from specviz.ui.tabs import run_tab
    from specviz.ui.serve import settings
    from specviz.ui.tabs.lessons_tab import LESSONS, lesson_note

    eagle = next(name for name, p in settings.PRESETS.items() if p["drafter"] == "eagle")
    outputs = run_tab.apply_preset(eagle)
    assert outputs[-1]["value"] == settings.FREE_TEXT_PROMPT and "typo" not in outputs[-1]["value"].lower()
    plain = run_tab.apply_preset(settings.DEFAULT_PRESET)
    assert len(plain) == len(outputs) and plain[-1] == gr.skip()
    note = settings.DRAFTER_NOTES["eagle"]
    assert "×" not in note and "α and c say how it did" in note
    learned = next(name for name in LESSONS if LESSONS[name]["slug"] == "learned_draft")
    assert "dtype" not in LESSONS[learned]  # the lesson runs the page's Dtype, auto
    text = lesson_note(learned)
    assert "in float32" not in text and "*auto*" in text
