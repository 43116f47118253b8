"""The page: header, then the eight tabs in display order (Run, Watch a pass, Playground, Experiments, Drafters
side by side, Your engine's numbers, Lessons, The maths), each built by its module's ``build(ctx)`` with the
shared :class:`~specviz.ui.context.PageContext`. No model is loaded until a run starts.

The page's JavaScript lives in files beside the drawing (``specviz/ui/draw/js/``, read by
:func:`specviz.ui.draw.scripts.script`), each handed to gradio as an event's ``js`` or a
``gr.HTML``'s ``js_on_load``. When the page loads it runs five:

* ``style.js`` adds the one stylesheet (:func:`specviz.ui.draw.styles.page_css`) to the document's head;
* ``one_draw.js`` draws each chart once per update, in place. Gradio 6's Plot component mounts a new
  chart ``<div>`` for every new figure (a ``{#key}`` block in its ``Plot.svelte``), so in one update
  the old div was redrawn with ``Plotly.react`` and then removed, and the new div drawn from nothing
  (2-5 times a redraw's cost). The script wraps ``Plotly.react``: calls are held to the end of the
  update's microtasks, a div gradio removed meanwhile is skipped, and its successor receives the old
  chart element and redraws it in place;
* ``fit_charts.js`` fits each chart's title and legend to the width it is drawn at, after every
  draw and resize (titles cut at the right edge, legends over titles);
* ``tour.js``, the guided tour (:mod:`.tour`), bound to its steps (:mod:`specviz.ui.draw.tour_steps`);
* ``slider_range.js`` says under a slider when a number typed into its box lies outside its range
  (gradio clamps it on blur without a word, and the run uses the clamped value).

The others belong to one control each: ``palette.js`` (the colour-blind switch below: the class
``sv-cb`` on the page's root), ``select_tab.js`` (a link's or a lesson's tab, :mod:`.context`),
``tokens.js``, ``stretch.js`` and ``inspector_in_view.js`` (the Run tab's token panel, its stretch of
passes and its inspector, :mod:`.run_tab`), ``stage.js`` (Watch a pass's keys, :mod:`.watch_tab`) and
``copy.js`` (the "Copy link" buttons, :mod:`.share`). Each file's opening comment says what it reads
and which draw module writes it; tests/test_layout.py holds them to that."""

from __future__ import annotations

import gradio as gr

from specviz.ui import links, share
from specviz.ui.tabs import engines_tab
from specviz.ui.tabs import experiments_tab
from specviz.ui.tabs import lessons_tab
from specviz.ui.tabs import maths_tab
from specviz.ui.tabs import playground_tab
from specviz.ui.tabs import run_tab
from specviz.ui.serve import settings
from specviz.ui.tabs import side_by_side_tab
from specviz.ui.serve import visitors
from specviz.ui.tabs import watch_tab
from specviz.ui.context import PageContext
from specviz.ui.draw.scripts import called, script
from specviz.ui.draw.styles import page_css
from specviz.ui.tour import tour_js


def _header(public: bool) -> None:
    gr.Markdown(
        "# specviz — speculative sampling, live\n"
        "A drafter proposes **K** tokens, the target verifies them in **one** forward pass, and the output is "
        "distributed exactly as the target's own. Every token below is coloured by how it was produced."
    )
    if public:
        limits = settings.limits(True)
        gr.Markdown(f"*Public demo: pick a model pair from the presets; runs are capped at "
                    f"{limits.max_new_tokens} new tokens, K ≤ {limits.max_k} and "
                    f"{settings.PUBLIC_POLICY.max_run_s:g} s of generating (loading, warm-up and timing plain "
                    f"decoding for the speedup come on top; a check, an experiment or side by side count them "
                    f"within their {settings.PUBLIC_POLICY.max_run_s:g} s). One generation at a time per "
                    f"visitor. Run it locally for any model.*", elem_id="sv-public-caps")


def _classroom_bar() -> tuple[gr.Markdown, gr.Checkbox]:
    """The tour button, the palette switch and the note a classroom link leaves (hidden until then)."""
    with gr.Row(equal_height=True):
        gr.Button("Take the tour", size="sm", elem_id="sv-tour-btn", scale=0, min_width=140)
        palette = gr.Checkbox(False, label="Colour-blind-safe colours", elem_id="sv-cb", scale=0, min_width=240,
                              container=False)
    note = gr.Markdown(visible=False, elem_id="sv-link-note")
    return note, palette


def build_page(public: bool) -> gr.Blocks:
    """The whole page for public mode or not.

    ``public``: the model fields are read-only (only the presets run), the Device accordion is
    hidden, the sliders stop at the public caps, and every model callback gets ``public=True``
    bound, so the API (/run, /lossless, /sweep, /side_by_side) enforces the same limits as the page;
    and a visitor has at most one generation waiting or running (:func:`specviz.ui.serve.visitors.one_generation`).

    In every mode each visitor's suffix history and Token Recycling table are their own (:mod:`specviz.ui.serve.visitors`), freed
    when they leave (``demo.unload``) or press "Forget my earlier outputs", and gradio's file cache
    is emptied of old files (:data:`specviz.ui.serve.settings.DELETE_CACHE`).
    """
    with gr.Blocks(title="specviz — speculative sampling, live", delete_cache=settings.DELETE_CACHE) as demo:
        # Made outside the Tabs: a State among the Tabs' children would shift the tab labels.
        last_analysis = gr.State(None)
        lesson_runs = gr.State(None)
        tab_request = gr.Textbox("", visible=False, elem_id="sv-tab-request")
        _header(public)
        link_note, palette = _classroom_bar()
        with gr.Tabs(selected="run"):
            with gr.Tab("Run", id="run"):
                # A lesson's "what to notice" shows here, above the controls it set.
                lesson_note = gr.Markdown(visible=False, elem_id="sv-lesson-note")
                ctx = PageContext(public=public, tab_request=tab_request, lesson_note=lesson_note, lesson_runs=lesson_runs,
                                  last_analysis=last_analysis)
                run_tab.build(ctx)
            with gr.Tab("Watch a pass", id="watch"):
                watch_tab.build(ctx)
            with gr.Tab("Playground", id="playground"):
                playground_tab.build(ctx)
            with gr.Tab("Experiments", id="experiments"):
                experiments_tab.build(ctx)
            with gr.Tab("Drafters side by side", id="side_by_side"):
                side_by_side_tab.build(ctx)
            with gr.Tab("Your engine's numbers", id="engines"):
                engines_tab.build(ctx)
            with gr.Tab("Lessons", id="lessons"):
                lessons_tab.build(ctx)
            with gr.Tab("The maths", id="maths"):
                maths_tab.build(ctx)
        _your_data()
        demo.unload(visitors.end_session)
        links.wire(demo, ctx, link_note)
        share.wire_serving_notes(demo)
        palette.change(None, palette, None, js=script("palette"), api_name=False)
        demo.load(None, None, None, js=called(script("style"), page_css()), api_name=False)
        # The page opens on a finished run, replayed in a few seconds: the payoff before any setting.
        replay_recorded, shown = ctx.recorded
        demo.load(replay_recorded, None, shown, api_name=False, concurrency_id="playground", concurrency_limit=None,
                  show_progress="hidden")
        demo.load(None, None, None, js=script("one_draw"), api_name=False)
        demo.load(None, None, None, js=script("fit_charts"), api_name=False)
        demo.load(None, None, None, js=tour_js(), api_name=False)
        demo.load(None, None, None, js=script("slider_range"), api_name=False)
    if public:
        visitors.one_generation(demo)
    return demo


def _your_data() -> None:
    """What the page keeps of a visitor, and the button that forgets it (/forget)."""
    with gr.Accordion("Your data", open=False):
        gr.Markdown("The **suffix drafter** drafts from your own earlier outputs in this session, and **Token "
                    "Recycling** from what the target predicted during your own runs, never from anyone else's. "
                    "They are kept on the server until you close the page (or an hour after your "
                    "last run), and exports are overwritten by your next export.")
        with gr.Row():
            forget = gr.Button("Forget my earlier outputs", size="sm", elem_id="sv-forget")
            said = gr.Markdown(elem_id="sv-forget-status")
        forget.click(visitors.forget, None, said, api_name="forget", concurrency_limit=None, show_progress="hidden")
