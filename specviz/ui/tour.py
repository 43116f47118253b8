"""The guided tour: a small fixed panel that walks a learner through the page one action at a
time (press Run, click a token, step a replay pass, move α in the Playground, …) and moves on
when the learner does the step's action, like the textbook of Transformer Explainer. It runs in
the browser (``specviz/ui/draw/js/tour.js``, loaded once by the page through :func:`tour_js`),
listening for clicks and inputs on the controls' elem_ids; its place is kept in sessionStorage, so
a reload resumes it. Esc closes it. The steps are data (:data:`specviz.ui.draw.tour_steps.STEPS`);
the panel's look is the page's stylesheet's (:data:`specviz.ui.draw.styles.TOUR_CSS`)."""

from __future__ import annotations

from specviz.ui.draw.scripts import called, script
from specviz.ui.draw.tour_steps import STEPS

__all__ = ["STEPS", "tour_js"]


def tour_js() -> str:
    """The tour's browser code bound to :data:`STEPS`, a function for ``demo.load(None, js=...)``:
    adds the panel and its listeners (once per page)."""
    return called(script("tour"), STEPS)
