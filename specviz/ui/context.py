"""What the tabs share, made by :func:`specviz.ui.page.build_page` and handed to each tab's
``build(ctx)``: tabs never import each other, they meet here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr

from specviz.ui.draw.scripts import called, script

#: Selects a tab in the browser by its ``id`` (``gr.Tab(id=...)``; the page renders it as the tab
#: button's ``data-tab-id``; ``draw/js/select_tab.js``): a js-only event, so the Tabs is never a server
#: event's output. Gradio refreshes the loading status of every output of every event that has run, on
#: each message of any later event, and for a container that means reading every component inside it:
#: with the Tabs an output of the page load, each streamed update of a run copied every value on the
#: page (150,000 copies, 31 M characters in a 256-token run), a quarter of the browser's work.
SELECT_TAB_JS = script("select_tab")


def select_tab_js(tab: str) -> str:
    """:data:`SELECT_TAB_JS` for one fixed tab (an event's ``js`` with no inputs)."""
    return called(SELECT_TAB_JS, tab)


@dataclass
class PageContext:
    """The page's shared pieces.

    Attributes:
        public: public mode (bound into every model callback).
        tab_request: a hidden Textbox: the tab a link asks for (the page load's router sets it,
            :data:`SELECT_TAB_JS` then selects that tab in the browser).
        lesson_note: the Markdown above the Run tab's controls where a lesson says what to notice.
        lesson_runs: State: the lesson picked and the figures of the runs made since
            (:func:`specviz.ui.teach.lesson_runs.new_memory`; None: no lesson picked).
        last_analysis: State holding the last real run's figures (``RunAnalysis.scalars()`` or a
            sweep row): the Run and Experiments tabs fill it, the Playground loads it.
        inputs: the Run tab's input components by field name (:data:`specviz.ui.serve.fields.NAMES`,
            plus ``check_temperature`` and ``control`` of the lossless check), filled by the Run
            tab, read by the Experiments and side-by-side tabs and set by the lessons.
        run_state: the Run tab's State of this visitor's run (a ``RunState`` or None), filled by
            the Run tab, read by the "Watch a pass" tab.
        run_outputs: the Run tab's components that show a run, by
            :class:`~specviz.ui.serve.state.RunView` field name, and its ``state``: filled by the Run
            tab, cleared by a lesson.
        run_done: the Run button's generation event (``.then`` follows a finished run), set by
            the Run tab; the lessons fill their note in after it.
        recorded: ``(recorded_run, outputs)`` from the Run tab: the generator that replays the
            recorded run the page opens on (:func:`specviz.ui.tabs.replay.recorded_run`) and the
            Run tab's outputs it fills.
        watch: ``(open_trace, outputs)`` from the "Watch a pass" tab: ``open_trace(name, pass_,
            beat)`` returns the values of ``outputs`` for a bundled trace at that pass and beat
            (for a URL router).
        playground: the Playground's sliders by name (``alpha``, ``k``, ``c``, ``v``), filled by
            the Playground tab, set by classroom links (:mod:`specviz.ui.links`).
        playground_panels: ``(panels_for, components)`` from the Playground tab:
            ``panels_for(slider_values)`` returns every panel the sliders drive, by name, and
            ``components`` holds those panels by the same names (a link sets them with the sliders).
    """

    public: bool
    tab_request: gr.Textbox
    lesson_note: gr.Markdown
    lesson_runs: gr.State
    last_analysis: gr.State
    inputs: dict[str, gr.components.Component] = field(default_factory=dict)
    run_state: gr.State | None = None
    run_outputs: dict[str, gr.components.Component] = field(default_factory=dict)
    run_done: object = None
    recorded: tuple[Callable, list[gr.components.Component]] | None = None
    watch: tuple[Callable[..., tuple], list[gr.components.Component]] | None = None
    playground: dict[str, gr.components.Component] = field(default_factory=dict)
    playground_panels: tuple[Callable[[dict], dict], dict[str, gr.components.Component]] | None = None

    def run_inputs(self, names: tuple[str, ...]) -> list[gr.components.Component]:
        """The Run tab's components of ``names``, in that order (a callback's inputs)."""
        return [self.inputs[name] for name in names]
