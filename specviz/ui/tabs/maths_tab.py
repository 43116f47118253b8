"""The maths tab: the method step by step, why its output is exactly the target's, and the
expected tokens per pass and speedup (text in ``text/maths.md``)."""

from __future__ import annotations

import gradio as gr

from specviz.ui.context import PageContext
from specviz.ui.prose import LATEX, prose


def build(ctx: PageContext) -> None:
    """The derivation, with formulas."""
    gr.Markdown(prose("maths"), latex_delimiters=LATEX, elem_id="sv-maths")
