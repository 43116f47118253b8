"""The page: header, then the seven tabs in display order (Run, Watch a pass, Playground, Experiments, Drafters
side by side, Lessons, The maths), each built by its module's ``build(ctx)`` with the shared
:class:`~specviz.ui.context.PageContext`. No model is loaded until a run starts."""

from __future__ import annotations

import json

import gradio as gr

from . import (experiments_tab, lessons_tab, links, maths_tab, playground_tab, run_tab, settings, side_by_side_tab,
               visitors, watch_tab)
from .context import PageContext
from .draw.styles import page_css
from .tour import tour_js

#: The colour-blind-safe palette: a class on the page's root switches the token colours' CSS
#: variables (:func:`specviz.ui.draw.palette.css_variables`) to Okabe–Ito's.
PALETTE_JS = "(on) => { document.documentElement.classList.toggle('sv-cb', !!on); return []; }"


def style_js() -> str:
    """The page's one way to its stylesheet (:func:`specviz.ui.draw.styles.page_css`): added to the
    document's head once when the page loads, so it holds however the page is served (``python
    app.py``, a Space, an in-process test server)."""
    return ("() => { if (document.getElementById('sv-style')) return [];"
            " const style = document.createElement('style'); style.id = 'sv-style';"
            f" style.textContent = {json.dumps(page_css())}; document.head.appendChild(style); return []; }}")


#: gradio's Plot component re-mounts its chart whenever a new figure arrives (a ``{#key}`` block
#: around the chart in gradio 6's ``Plot.svelte``): in one update the old chart's effect redraws
#: the old ``<div>`` with ``Plotly.react``, the block removes that div, and the new chart draws a
#: fresh one from nothing. Both draws are waste: a fresh draw costs 2-5 times a redraw of a chart
#: already drawn (the race 136 against 44 ms, tokens per pass 62 against 13 ms, in a 256-token
#: run), and while tokens streamed the two made up most of each long task (issue 26).
#:
#: This script, run once when the page loads, wraps ``Plotly.react`` (every other call of Plotly is
#: untouched): a call on a chart ``<div>`` is carried out once, at the end of the current task's
#: microtasks, when gradio's update has settled, and only on a div still in the page. A new div
#: that takes the place of one gradio just removed receives the removed div's chart (moved inside
#: it, as it stands), which is then redrawn in place. The ``Plotly`` global appears when gradio
#: first loads its plotly chunk, which may come before or after this script.
ONE_DRAW_JS = """() => {
  if (window.__svOneDraw) return [];
  window.__svOneDraw = true;
  const wrap = (plotly) => {
    if (!plotly || typeof plotly.react !== 'function' || plotly.__svOneDraw) return;
    plotly.__svOneDraw = true;
    const react = plotly.react;
    const pending = new Map();  // gradio's chart div -> [its parent then, the latest call's arguments]
    const drawn = new WeakMap();  // a parent element -> the chart div last drawn there
    const flush = () => {
      const calls = [...pending];
      pending.clear();
      for (const [div, [parent, args]] of calls) {
        if (!div.isConnected) continue;  // removed by this update: its successor draws
        let chart = drawn.get(parent);
        if (chart && chart !== div && !chart.isConnected) div.appendChild(chart);  // the old chart, kept
        else if (!chart || !chart.isConnected || !div.contains(chart)) chart = div;
        drawn.set(parent, chart);
        try { react.call(plotly, chart, ...args); }
        catch (error) { console.error(error); }  // one chart's failure leaves the others drawn
      }
    };
    plotly.react = function (gd, ...args) {
      if (!(gd instanceof Element) || !gd.parentElement) return react.call(this, gd, ...args);
      if (pending.size === 0) queueMicrotask(flush);
      pending.set(gd, [gd.parentElement, args]);
      return Promise.resolve(gd);
    };
  };
  if (window.Plotly) { wrap(window.Plotly); return []; }
  let loaded;
  Object.defineProperty(window, 'Plotly', {configurable: true, enumerable: true,
    get: () => loaded, set: (value) => { wrap(value); loaded = value; }});
  return [];
}"""


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
                    f"{settings.PUBLIC_POLICY.max_run_s:g} s. Run it locally for any model.*")


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
    and a visitor has at most one generation waiting or running (:func:`specviz.ui.visitors.one_generation`).

    In every mode each visitor's suffix history and Token Recycling table are their own (:mod:`specviz.ui.visitors`), freed
    when they leave (``demo.unload``) or press "Forget my earlier outputs", and gradio's file cache
    is emptied of old files (:data:`specviz.ui.settings.DELETE_CACHE`).
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
            with gr.Tab("Lessons", id="lessons"):
                lessons_tab.build(ctx)
            with gr.Tab("The maths", id="maths"):
                maths_tab.build(ctx)
        _your_data()
        demo.unload(visitors.end_session)
        links.wire(demo, ctx, link_note)
        palette.change(None, palette, None, js=PALETTE_JS, api_name=False)
        demo.load(None, None, None, js=style_js(), api_name=False)
        demo.load(None, None, None, js=ONE_DRAW_JS, api_name=False)
        demo.load(None, None, None, js=tour_js(), api_name=False)
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
