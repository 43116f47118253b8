"""Classroom links on the page: the router that opens what a link's query asks for when the page
loads (parsing is :func:`specviz.ui.teach.link_query.parse`; the "Copy link" buttons are :mod:`.share`)."""

from __future__ import annotations

import gradio as gr

from specviz.ui.context import SELECT_TAB_JS, PageContext
from specviz.ui.draw.escape import as_text
from specviz.ui.tabs.lessons_tab import LESSON_TARGETS, LESSONS, lesson_components, lesson_values
from specviz.ui.teach import link_query

#: The lessons by the slug a link names them with.
LESSON_SLUGS = {lesson["slug"]: name for name, lesson in LESSONS.items()}


def link_targets(playground_names: tuple[str, ...], watch_outputs: int, panels: tuple[str, ...] = ()
                 ) -> tuple[str, ...]:
    """Every output a link may set, by name, in the order of the page load's outputs: the tab it
    asks for (``tab_request``, selected in the browser by
    :data:`~specviz.ui.context.SELECT_TAB_JS`), the link note, the Playground's sliders and every
    panel they drive (``panels``), what a lesson sets (its
    :data:`~specviz.ui.tabs.lessons_tab.LESSON_TARGETS`) and the Watch tab's outputs. :func:`route`
    and :func:`wire` both list theirs from here, so the values and the outputs cannot disagree in
    number or order (a lesson link sent 28 values for 27 outputs and the page load
    failed)."""
    return ("tab_request", "note", *(f"playground.{n}" for n in playground_names), *(f"panel.{n}" for n in panels),
            *LESSON_TARGETS, *(f"watch.{i}" for i in range(watch_outputs)))


def _watch_updates(watch, link: link_query.Link, notes: list[str]) -> dict:
    """The Watch tab's updates for the link's trace, by ``watch.<i>`` (none when it names none or
    cannot be opened)."""
    if watch is None or link.trace is None:
        return {}
    open_fn = watch[0]
    try:
        updates = open_fn(*link.trace)
    except (gr.Error, ValueError, KeyError, IndexError):  # its message would quote the link's name
        notes.append(f"trace is not a bundled trace with a pass {link.trace[1]}: the trace link was ignored.")
        return {}
    updates = list(updates) if isinstance(updates, (tuple, list)) else [updates]
    return {f"watch.{i}": u for i, u in enumerate(updates)}


def _lesson_updates(link: link_query.Link) -> dict:
    if link.lesson is None:
        return {}
    return lesson_values(LESSON_SLUGS[link.lesson])


def route(params, watch, playground_names: tuple[str, ...], panels=None) -> list:
    """The page's updates for query parameters ``params``, one per :func:`link_targets` name (a
    ``gr.skip()`` for what the link leaves alone): the tab to select (its id), the link note, the
    Playground's sliders (``playground_names`` in order), what a lesson sets on the Run tab, and the
    Watch tab's outputs (``watch``: ``ctx.watch`` or None). ``panels``: ``ctx.playground_panels``
    or None; with it, a link that sets a slider sets every Playground panel too, from the link's
    values, in the same update. Never raises for a bad link: bad values are skipped and the note
    says so.

    Raises:
        ValueError: an update named no target (a wiring mistake, caught by the tests).
    """
    link = link_query.parse(params, LESSON_SLUGS, watch=watch is not None)
    notes = list(link.notes)
    updates = {**_watch_updates(watch, link, notes), **_lesson_updates(link),
               **{f"playground.{n}": gr.update(value=link.playground[n]) for n in playground_names
                  if n in link.playground}}
    if panels is not None and link.playground:
        updates.update({f"panel.{n}": value for n, value in panels[0](link.playground).items()})
    if notes:
        updates["note"] = gr.update(value="*Link: " + as_text(" ".join(notes)) + "*", visible=True)
    if link.tab:
        updates["tab_request"] = link.tab
    names = link_targets(playground_names, len(watch[1]) if watch else 0, tuple(panels[1]) if panels else ())
    unknown = set(updates) - set(names)
    if unknown:
        raise ValueError(f"link updates without an output: {sorted(unknown)}")
    return [updates.get(name, gr.skip()) for name in names]


def link_components(ctx: PageContext, note: gr.Markdown) -> dict:
    """The components a link may set, by :func:`link_targets` name."""
    watch = getattr(ctx, "watch", None)
    lesson = lesson_components(ctx)
    panels = ctx.playground_panels[1] if ctx.playground_panels else {}
    return {"tab_request": ctx.tab_request, "note": note,
            **{f"playground.{n}": c for n, c in ctx.playground.items()},
            **{f"panel.{n}": c for n, c in panels.items()}, **lesson,
            **{f"watch.{i}": c for i, c in enumerate(watch[1] if watch else [])}}


def wire(demo: gr.Blocks, ctx: PageContext, note: gr.Markdown) -> None:
    """Open what the page's address asks for when it loads (once per visit)."""
    watch = getattr(ctx, "watch", None)
    names = tuple(ctx.playground)
    panels = ctx.playground_panels
    components = link_components(ctx, note)
    outputs = [components[name] for name in link_targets(names, len(watch[1]) if watch else 0,
                                                          tuple(panels[1]) if panels else ())]

    def open_link(request: gr.Request):
        return route(dict(request.query_params) if request is not None else {}, watch, names, panels)

    demo.load(open_link, None, outputs, api_name=False, show_progress="hidden"
              ).then(None, ctx.tab_request, None, js=SELECT_TAB_JS, api_name=False)
