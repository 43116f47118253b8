"""The page's one stylesheet: :func:`page_css`, added to the page once when it loads (``js/style.js``,
loaded by :mod:`specviz.ui.page`), whichever way the page is served (``python app.py``, a Space, a
test's in-process server). Its colours are the palette's CSS variables (:mod:`.palette`), so the
colour-blind switch recolours every token kind, the Watch tab's chips included.

Sections, in the order they are written: the token stream and its panel (:mod:`.run_views`), Watch
a pass's stage (:mod:`.watch_views`), the guided tour's panel (:mod:`specviz.ui.tour`), the stretch
highlight, the lesson buttons, the charts while streaming, an engine's kinds and the engine-log
switch (:mod:`.engine_views`), touch screens (no chart toolbar), a projector's first screen, the
tablet and the phone layouts; apart from them, the exported charts page's own
rules (:data:`EXPORT_CSS`, :mod:`.export_page`).
"""

from __future__ import annotations

import functools

from specviz.ui.draw.palette import css_variables

__all__ = ["ENGINE_CSS", "EXPORT_CSS", "LESSON_BUTTON_CSS", "PHONE_CSS", "PROJECTOR_CSS", "TABLET_CSS",
           "TOKENS_CSS", "TOUCH_CSS", "TOUR_CSS", "WATCH_CSS", "page_css"]

TOKENS_CSS = """
.sv-out { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 15px; line-height: 1.9;
          white-space: pre-wrap; word-break: break-word; padding: 10px; min-height: 120px;
          border: 1px solid var(--border-color-primary); border-radius: 8px; }
.sv-tok { border-radius: 3px; padding: 1px 0; }
.sv-accepted { background: color-mix(in srgb, var(--sv-accepted) 18%, transparent);
               border-bottom: 2px solid var(--sv-accepted); }
.sv-resampled { background: color-mix(in srgb, var(--sv-resampled) 22%, transparent);
                border-bottom: 2px solid var(--sv-resampled); }
.sv-bonus { background: color-mix(in srgb, var(--sv-bonus) 20%, transparent);
            border-bottom: 2px solid var(--sv-bonus); }
.sv-plain { background: color-mix(in srgb, var(--sv-plain) 13%, transparent);
            border-bottom: 2px solid var(--sv-plain); }
.sv-rejected { color: var(--sv-rejected); text-decoration: line-through; font-size: 0.85em; opacity: 0.9; }
.sv-special { color: var(--sv-muted); font-size: 0.8em; }
.sv-legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin-bottom: 6px; font-size: 0.9em; }
.sv-legend > span { white-space: nowrap; }
.sv-legend > .sv-caption { flex-basis: 100%; white-space: normal; font-weight: 600; }
.sv-status { font-size: 0.95em; }
.sv-round { border-left: 1px dotted var(--sv-rule); padding-left: 1px; margin-left: 1px; }
.sv-out [data-r] { cursor: pointer; }
.sv-notes { color: var(--sv-note); }
.sv-tree ul { list-style: none; margin: 0 0 0 1.2em; padding-left: 0.6em; border-left: 1px dotted var(--sv-rule); }
.sv-tree li { margin: 2px 0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.sv-untested { color: var(--sv-faint); }
/* The Run tab's token box: a fixed height (resizable) that scrolls, so a long run does not push the
   charts off the screen; the legend stays at its top. */
#sv-tokens { height: 360px; min-height: 160px; overflow-y: auto !important; resize: vertical; }
#sv-tokens .sv-legend { position: sticky; top: 0; z-index: 1; padding: 4px 0;
                        background: var(--block-background-fill); }
.sv-out:not(:has(.sv-tok, .sv-rejected, .sv-stage))::before { content: "output appears here"; font-style: italic;
                                                              opacity: 0.6; }
/* What a run is doing before its first token, inside the token box where the eye already is. */
.sv-out .sv-stage { font-family: var(--font); font-style: italic; opacity: 0.85; }
/* A live run's last line, under its last token: how it ended. */
.sv-out .sv-end { font-family: var(--font); font-weight: 600; margin-top: 8px; opacity: 0.85; }
/* Table headers (gr.Dataframe's too) wrap between words, never inside one. */
table th, table th * { word-break: normal !important; overflow-wrap: normal !important; hyphens: manual; }
/* Drafters side by side: each drafter's figures above its output. */
.sv-sbs { margin: 10px 0 4px; }
"""

#: Watch a pass: the stage's chips take the token kinds' colours, so the colour-blind switch
#: reaches them too.
WATCH_CSS = """
.sv-watch { font-size: 15px; }
.sv-watch-progress { color: var(--sv-progress); font-size: 0.9em; margin-bottom: 4px; }
.sv-watch-context { color: var(--sv-context); font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; }
.sv-watch-strip { display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0; min-height: 2.2em;
  font-family: ui-monospace, Menlo, monospace; }
.sv-chip { border: 2px solid var(--sv-plain); border-radius: 4px; padding: 2px 6px;
  background: color-mix(in srgb, var(--sv-plain) 8%, transparent);
  transition: background-color 200ms ease-out, border-color 200ms ease-out, opacity 200ms ease-out; }
.sv-chip small { color: var(--sv-muted); margin-left: 4px; }
.sv-chip.sv-w-pending { visibility: hidden; }
.sv-chip.sv-w-accepted { border-color: var(--sv-accepted);
  background: color-mix(in srgb, var(--sv-accepted) 18%, transparent); }
.sv-chip.sv-w-rejected { border-color: var(--sv-rejected);
  background: color-mix(in srgb, var(--sv-rejected) 12%, transparent); text-decoration: line-through; }
.sv-chip.sv-w-untested { opacity: 0.45; }
.sv-chip.sv-w-resampled { border-color: var(--sv-resampled);
  background: color-mix(in srgb, var(--sv-resampled) 22%, transparent); }
.sv-chip.sv-w-bonus { border-color: var(--sv-bonus); background: color-mix(in srgb, var(--sv-bonus) 20%, transparent); }
.sv-chip.sv-w-plain { border-color: var(--sv-plain); background: color-mix(in srgb, var(--sv-plain) 13%, transparent); }
.sv-chip.sv-w-current { outline: 3px solid var(--sv-current); outline-offset: 1px; }
.sv-chip.sv-w-new { animation: sv-pop 250ms ease-out; }
@keyframes sv-pop { from { opacity: 0; transform: translateY(-4px); } to { opacity: 1; transform: none; } }
.sv-watch-sentence { font-size: 1.05em; margin: 6px 0 0 0; }
.sv-still .sv-chip { transition: none; animation: none; }
@media (prefers-reduced-motion: reduce) { .sv-chip { transition: none; animation: none; } }
"""

#: The tour's panel, keyboard focus rings, and the stretch of passes picked in the race.
TOUR_CSS = """
#sv-tour { position: fixed; right: 16px; bottom: 16px; z-index: 1000; width: min(360px, calc(100vw - 32px));
  background: var(--background-fill-primary); color: var(--body-text-color);
  border: 2px solid var(--color-accent); border-radius: 10px; padding: 12px 14px;
  box-shadow: 0 6px 24px var(--sv-shadow); font-size: 0.95em; }
#sv-tour[hidden] { display: none; }
#sv-tour .sv-tour-count { font-size: 0.8em; opacity: 0.75; }
#sv-tour .sv-tour-do { margin-top: 6px; font-weight: 600; }
#sv-tour .sv-tour-buttons { display: flex; gap: 8px; margin-top: 10px; justify-content: flex-end; }
#sv-tour button { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 3px 10px;
  background: var(--button-secondary-background-fill); color: inherit; cursor: pointer; }
#sv-tour button:focus-visible, .sv-out [data-r]:focus-visible { outline: 3px solid var(--sv-bonus);
  outline-offset: 1px; }
.sv-tour-target { outline: 3px solid var(--sv-bonus) !important; outline-offset: 3px;
  border-radius: 6px; }
.sv-round.sv-stretch { background: var(--sv-highlight); box-shadow: 0 0 0 1px var(--sv-highlight-edge) inset; }
.sv-range-note { font-size: 0.9em; margin-top: 4px; padding-left: 6px; font-weight: 600;
  color: var(--body-text-color); border-left: 3px solid var(--color-accent); }
"""

#: System fonts only, no web font: on the theme's web font (Source Sans Pro, from the page's static
#: files) a lesson button's capital "A" was seen in another face than the rest of its label. Each
#: family here is a whole system font covering Latin, so a label renders in one face.
SYSTEM_SANS = ('system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", "Liberation Sans", '
               'Arial, sans-serif')

#: The Lessons tab's buttons (:mod:`specviz.ui.tabs.lessons_tab`, class ``sv-lesson-button``).
LESSON_BUTTON_CSS = f"""
.sv-lesson-button, .sv-lesson-button * {{ font-family: {SYSTEM_SANS} !important; }}
"""

#: Touch screens and phones: no Plotly toolbar (on a phone it covered the titles and legends, issue
#: 39 item 7; pinch-zoom and a tap's hover still work).
TOUCH_CSS = """
@media (pointer: coarse), (hover: none), (max-width: 600px) {
  .gradio-container .modebar-container { display: none !important; }
}
"""

#: A projector's first screen (1366 × 768): the token box a little shorter, and the inspector's
#: chart only once it has one (empty, it pushed the speedup's chart 250 px down, below the first
#: screen).
PROJECTOR_CSS = """
#sv-inspector-plot:not(:has(.js-plotly-plot)) { display: none !important; }
@media (min-width: 901px) and (max-height: 860px) { #sv-tokens { height: 300px; } }
"""

#: Up to a tablet's width (900 px) the Run tab's two columns become one (side by side at 768 px the
#: charts' column was 420 px wide, three charts of 140 px), in the order a small screen is read: the
#: prompt and Run, then the tokens, inspector, charts and summary, then the model pair and the
#: other settings (the tokens were 930 px below Run on a phone).
TABLET_CSS = """
@media (max-width: 900px) {
  #sv-run-row { flex-direction: column !important; }
  #sv-run-row > .column { display: contents !important; }
  #sv-run-row > .column:first-child > .row:has(#sv-run-btn) ~ * { order: 2; }
  #sv-run-row > .column:first-child > #sv-run-status { order: 0; }
  #sv-run-row > .column:last-child > * { order: 1; }
}
"""

#: Phones (under 600 px): one chart per row, rows wrap, tables and formulas scroll sideways; the
#: token box takes most of the screen's height and its legend scrolls away with the tokens (stuck at
#: the top, the legend's wrapped lines left the tokens three lines on a 390 × 844 phone).
PHONE_CSS = """
@media (max-width: 600px) {
  #sv-tokens { height: 62vh !important; }
  #sv-tokens .sv-legend { position: static !important; font-size: 12px; }
  .gradio-container, .gradio-container .main { padding-left: 6px !important; padding-right: 6px !important; }
  .gradio-container .row, .gradio-container .form { flex-wrap: wrap !important; }
  .gradio-container .row > *, .gradio-container .column { min-width: min(100%, 160px) !important; }
  .gradio-container .row > :has(.js-plotly-plot) { min-width: 100% !important; flex: 1 1 100% !important; }
  .gradio-container .js-plotly-plot, .gradio-container .plot-container { max-width: 100% !important; }
  .gradio-container .tab-wrapper, .gradio-container [role=tablist] { overflow-x: auto; }
  .gradio-container table { display: block; overflow-x: auto; }
  .sv-out { font-size: 14px !important; }
  .sv-legend > span { white-space: normal !important; }
  .katex-display { overflow-x: auto; overflow-y: hidden; }
}
"""


#: While a run streams (the page's class ``sv-streaming``, set by the token panel's script in
#: :mod:`specviz.ui.tabs.run_tab`), a chart off-screen skips the browser's style and layout work
#: (``content-visibility: auto``); its height holds the place (the last rendered one once drawn,
#: else the charts' 300 px). Gradio's status updates restyle the page on every streamed update, and
#: a Plotly redraw then waits for the whole page's style and layout: on the Run
#: tab after a 256-token run, 3,500 elements of which the nine charts are 2,700, that took 48 ms and
#: 14 ms with this rule, and a chart redraw on a restyled page 66-70 ms and 31-36 ms. Only while
#: streaming: skipped content has no text for the page's other readers (``innerText``).
CHART_CSS = """
.sv-streaming .js-plotly-plot { content-visibility: auto; contain-intrinsic-height: auto 300px; }
"""

#: The kinds an engine can tell (the "Your engine's numbers" tab, :mod:`.engine_views`): the target's
#: own token in the bonus colour, a token the file says nothing of hatched; and the Run tab's
#: "What an engine would have logged" switch (the class ``sv-engine-log`` on the page's root,
#: ``js/engine_log.js``): what no engine logs (rejected drafts, untested tree nodes, every
#: probability and draw: :data:`specviz.ui.draw.run_views.UNLOGGED`, the inspector's chart, the
#: calibration and the rules replayed on the distributions) greyed out, and the target's tokens
#: (resampled, bonus, plain: an engine's flag does not tell them apart) in one look.
ENGINE_CSS = """
.sv-engine-target { background: color-mix(in srgb, var(--sv-bonus) 20%, transparent);
                    border-bottom: 2px solid var(--sv-bonus); }
.sv-unknown { background: repeating-linear-gradient(135deg, transparent 0 3px,
                          color-mix(in srgb, var(--sv-faint) 35%, transparent) 3px 6px);
              border-bottom: 2px dashed var(--sv-faint); }
.sv-no-text { font-style: italic; }
#sv-engine-tokens { max-height: 360px; overflow-y: auto; }
.sv-engine-log-only { display: none; }
:root.sv-engine-log .sv-engine-log-only { display: inline; white-space: normal; }
:root.sv-engine-log #sv-tokens .sv-out .sv-rejected, :root.sv-engine-log #sv-inspector-tree .sv-rejected,
:root.sv-engine-log #sv-inspector-tree .sv-untested, :root.sv-engine-log .sv-unlogged,
:root.sv-engine-log #sv-inspector-plot, :root.sv-engine-log #sv-calibration, :root.sv-engine-log #sv-rules {
  opacity: 0.3; filter: grayscale(1); }
:root.sv-engine-log #sv-tokens .sv-out :is(.sv-resampled, .sv-bonus, .sv-plain) {
  background: color-mix(in srgb, var(--sv-bonus) 20%, transparent); border-bottom-color: var(--sv-bonus); }
"""

#: The exported charts page (:mod:`.export_page`), a file of its own opened without the app, so not
#: part of :func:`page_css`: the prompt keeps its lines and wraps long ones.
EXPORT_CSS = """
.sv-export-prompt { white-space: pre-wrap; }
"""


@functools.cache
def page_css() -> str:
    """The whole stylesheet: the palette's variables, then every section above."""
    return (css_variables() + TOKENS_CSS + WATCH_CSS + TOUR_CSS + LESSON_BUTTON_CSS + CHART_CSS + ENGINE_CSS
            + TOUCH_CSS + PROJECTOR_CSS + TABLET_CSS + PHONE_CSS)
