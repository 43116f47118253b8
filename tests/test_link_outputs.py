"""A classroom link's router and the page agree on every output: for
every link kind (a tab, Playground values, each lesson, a trace, a bad value, none) the page load
returns one value per output, a lesson link sets what the Lessons button sets, and a Playground
link sets every panel the sliders drive from the link's values."""

from __future__ import annotations

import pytest

from specviz.ui.tabs.lessons_tab import LESSON_TARGETS, LESSONS, apply_lesson

LINKS = [{}, {"tab": "maths"}, {"tab": "playground", "alpha": "0.6", "k": "5", "c": "0.2", "v": "1"},
         {"trace": "poem_int8", "pass": "2", "beat": "3"}, {"tab": "nowhere", "k": "lots"},
         *({"lesson": lesson["slug"]} for lesson in LESSONS.values()),
         {"lesson": "temperature", "trace": "poem_int8", "alpha": "0.3"}]


class _Request:
    def __init__(self, params):
        self.query_params = params


@pytest.fixture(scope="module")
def page_load():
    """The page's link router as the page wires it: (its function, its outputs)."""
    from specviz.ui.page import build_page

    demo = build_page(False)
    (fn,) = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "open_link"]
    return fn.fn, fn.outputs


@pytest.mark.parametrize("params", LINKS, ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items()) or "none")
def test_every_link_kind_returns_one_value_per_output(page_load, params):
    open_link, outputs = page_load
    values = open_link(_Request(params))
    assert len(values) == len(outputs), (len(values), len(outputs))


def test_a_lesson_link_sets_what_the_lesson_button_sets(page_load):
    from specviz.ui.links import LESSON_SLUGS

    open_link, outputs = page_load
    by_output = dict(zip([id(o) for o in outputs], open_link(_Request({"lesson": "temperature"})), strict=True))
    button = dict(zip(LESSON_TARGETS, apply_lesson(LESSON_SLUGS["temperature"]), strict=True))
    memory = button["lesson_runs"]  # the lesson's memory of its runs, as the button sets it
    assert memory == {"slug": "temperature", "runs": []} and memory in by_output.values()


def test_a_playground_link_sets_every_panel_from_its_values(page_load):
    open_link, outputs = page_load
    values = open_link(_Request({"tab": "playground", "alpha": "0.6", "k": "5", "c": "0.2", "v": "1"}))
    by_id = {o.elem_id: v for o, v in zip(outputs, values, strict=True) if getattr(o, "elem_id", None)}
    assert "c = 0.200" in by_id["sv-pg-map"].layout.title.text and "0.050" not in by_id["sv-pg-map"].layout.title.text
    assert "1.190" in by_id["sv-pg-mc-text"] or "1.19" in by_id["sv-pg-mc-text"]
    assert "1.907" not in by_id["sv-pg-mc-text"]
    assert "**1.19×** expected speedup" in by_id["sv-pg-figures"]
