"""The "Copy link" buttons of classroom links (:mod:`specviz.ui.teach.link_query` writes the queries): the link
goes to the clipboard where the browser allows it, and always into a textbox beside the button,
so it can be copied by hand where clipboard access is denied."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from .draw.scripts import script

#: Turns the query a callback wrote into the textbox into the page's full address and copies it to
#: the clipboard where the browser allows (``draw/js/copy.js``).
COPY_JS = script("copy")


def copy_link(label: str, elem_id: str, query: Callable, inputs: list, size: str = "sm") -> gr.Textbox:
    """A "Copy link" button and the textbox that shows the link; ``query(*inputs)`` writes the
    link's query (a :mod:`specviz.ui.teach.link_query` builder). Returns the textbox."""
    with gr.Row(equal_height=True):
        button = gr.Button(label, size=size, elem_id=elem_id, scale=0, min_width=120)
        box = gr.Textbox(show_label=False, container=False, interactive=False, scale=3,
                         placeholder="the link appears here (and is copied to the clipboard)",
                         elem_id=f"{elem_id}-box")
    button.click(query, inputs, box, api_name=False, concurrency_id="playground", concurrency_limit=None,
                 show_progress="hidden").then(None, box, box, js=COPY_JS, api_name=False)
    return box
