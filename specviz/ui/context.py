"""What the tabs share, made by :func:`specviz.ui.page.build_page` and handed to each tab's
``build(ctx)``: tabs never import each other, they meet here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr


@dataclass
class PageContext:
    """The page's shared pieces.

    Attributes:
        public: public mode (bound into every model callback).
        tabs: the page's Tabs (a lesson selects the Run tab).
        lesson_note: the Markdown above the Run tab's controls where a lesson says what to notice.
        lesson_runs: State: runs since a lesson set the Run tab up (None: no lesson note shown);
            the lessons set it to 0, the Run tab counts and hides the note on the second run.
        last_analysis: State holding the last real run's figures (``RunAnalysis.scalars()`` or a
            sweep row): the Run and Experiments tabs fill it, the Playground loads it.
        inputs: the Run tab's input components by field name (:data:`specviz.ui.fields.NAMES`,
            plus ``check_temperature`` and ``control`` of the lossless check), filled by the Run
            tab, read by the Experiments and side-by-side tabs and set by the lessons.
        run_state: the Run tab's State of this visitor's run (a ``RunState`` or None), filled by
            the Run tab, read by the "Watch a pass" tab.
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
    tabs: gr.Tabs
    lesson_note: gr.Markdown
    lesson_runs: gr.State
    last_analysis: gr.State
    inputs: dict[str, gr.components.Component] = field(default_factory=dict)
    run_state: gr.State | None = None
    watch: tuple[Callable[..., tuple], list[gr.components.Component]] | None = None
    playground: dict[str, gr.components.Component] = field(default_factory=dict)
    playground_panels: tuple[Callable[[dict], dict], dict[str, gr.components.Component]] | None = None

    def run_inputs(self, names: tuple[str, ...]) -> list[gr.components.Component]:
        """The Run tab's components of ``names``, in that order (a callback's inputs)."""
        return [self.inputs[name] for name in names]
