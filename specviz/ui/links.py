"""Classroom links on the page: the router that opens what a link's query asks for when the page
loads (parsing is :func:`specviz.ui.teach.link_query.parse`; the "Copy link" buttons are :mod:`.share`)."""

from __future__ import annotations

import gradio as gr

from .context import PageContext
from .draw.escape import as_text
from .lessons_tab import LESSON_FIELDS, LESSONS, apply_lesson
from .teach import link_query

#: The lessons by the slug a link names them with.
LESSON_SLUGS = {lesson["slug"]: name for name, lesson in LESSONS.items()}


def _watch_updates(watch, link: link_query.Link, notes: list[str]) -> list:
    """The Watch tab's updates for the link's trace (skips when it names none or cannot be opened)."""
    if watch is None:
        return []
    open_fn, outputs = watch
    skips = [gr.skip()] * len(outputs)
    if link.trace is None:
        return skips
    try:
        updates = open_fn(*link.trace)
    except (gr.Error, ValueError, KeyError, IndexError):  # its message would quote the link's name
        notes.append(f"trace is not a bundled trace with a pass {link.trace[1]}: the trace link was ignored.")
        return skips
    return list(updates) if isinstance(updates, (tuple, list)) else [updates]


def _lesson_updates(link: link_query.Link) -> list:
    if link.lesson is None:
        return [gr.skip()] * (len(LESSON_FIELDS) + 1)
    return list(apply_lesson(LESSON_SLUGS[link.lesson]))[:-1]  # the router selects the tab itself


def route(params, watch, playground_names: tuple[str, ...]) -> list:
    """The page's updates for query parameters ``params``: the selected tab, the link note, the
    Playground's sliders (``playground_names`` in order), the lesson's Run-tab controls and note,
    and the Watch tab's outputs (``watch``: ``ctx.watch`` or None). Never raises: bad values are
    skipped and the note says so."""
    link = link_query.parse(params, LESSON_SLUGS, watch=watch is not None)
    notes = list(link.notes)
    watch_updates = _watch_updates(watch, link, notes)
    sliders = [gr.update(value=link.playground[n]) if n in link.playground else gr.skip() for n in playground_names]
    note = (gr.update(value="*Link: " + as_text(" ".join(notes)) + "*", visible=True) if notes else gr.skip())
    tab = gr.Tabs(selected=link.tab) if link.tab else gr.skip()
    return [tab, note, *sliders, *_lesson_updates(link), *watch_updates]


def wire(demo: gr.Blocks, ctx: PageContext, note: gr.Markdown) -> None:
    """Open what the page's address asks for when it loads (once per visit)."""
    watch = getattr(ctx, "watch", None)
    names = tuple(ctx.playground)
    outputs = [ctx.tabs, note, *[ctx.playground[n] for n in names], *ctx.run_inputs(LESSON_FIELDS),
               ctx.lesson_note, *(watch[1] if watch else [])]

    def open_link(request: gr.Request):
        return route(dict(request.query_params) if request is not None else {}, watch, names)

    demo.load(open_link, None, outputs, api_name=False, show_progress="hidden")
