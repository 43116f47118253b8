"""No server event of the page outputs a container. Gradio's page refreshes the
loading status of every output of every event that has run, on each message of any later event,
and for a container it reads every component inside it: with the Tabs an output of the page load,
each streamed update of a run copied every value on the page (150,000 copies, 31 M characters in a
256-token run, a quarter of the browser's main-thread work). A tab is selected in the browser
instead (:data:`specviz.ui.context.SELECT_TAB_JS`)."""

from __future__ import annotations

import pytest
from gradio.blocks import BlockContext


@pytest.mark.parametrize("public", [False, True], ids=["local", "public"])
def test_no_server_event_outputs_a_container_of_components(public):
    from specviz.ui.page import build_page

    demo = build_page(public)
    containers = []
    for fn in demo.fns.values():
        if fn.fn is None:  # a js-only event: no server call, no loading status
            continue
        for output in fn.outputs:
            if isinstance(output, BlockContext) and output.children:
                containers.append(f"{getattr(fn.fn, '__name__', fn.name)} -> {type(output).__name__} "
                                  f"({len(output.children)} children)")
    assert not containers, containers


def test_a_link_and_a_lesson_select_their_tab_in_the_browser():
    from specviz.ui.context import SELECT_TAB_JS
    from specviz.ui.page import build_page

    demo = build_page(False)
    fns = list(demo.fns.values())
    selects = [f for f in fns if f.fn is None and f.js and "data-tab-id" in f.js]
    assert len(selects) >= 2, "the page load's router and the lessons select tabs by a js-only event"
    (link,) = [f for f in selects if f.js == SELECT_TAB_JS]
    assert [getattr(i, "elem_id", None) for i in link.inputs] == ["sv-tab-request"]
