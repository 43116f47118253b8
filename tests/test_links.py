"""Classroom links: parsing keeps the valid values and notes each bad one (never raises), the
builders write queries that parse back to the same values, and the Playground link of the README
(α 0.6, K 5, c 0.2, v 1) shows the closed form's 2.38 tokens per pass and 1.19× speedup."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from specviz.ui.teach import link_query, playground

SLUGS = ("copy_heavy", "early_exit")


def _params(query: str) -> dict:
    return dict(parse_qsl(query.lstrip("?"), keep_blank_values=True))


def test_the_readme_playground_link_opens_those_values():
    link = link_query.parse(_params("?tab=playground&alpha=0.6&k=5&c=0.2&v=1"), SLUGS)
    assert link.tab == "playground" and not link.notes
    assert link.playground == {"alpha": 0.6, "k": 5, "c": 0.2, "v": 1.0}
    assert isinstance(link.playground["k"], int)
    cf = playground.closed_form(**link.playground)
    # E[N] = (1 − 0.6⁶)/(1 − 0.6) = 2.38336; S = 2.38336/(5·0.2 + 1) = 1.19168
    assert cf.tokens_per_pass == pytest.approx((1 - 0.6**6) / 0.4)
    assert f"{cf.tokens_per_pass:.2f}" == "2.38" and f"{cf.speedup:.2f}" == "1.19"


@pytest.mark.parametrize("query, note", [
    ("?alpha=1.5", "alpha is not a number in [0.0, 1.0]"),
    ("?alpha=abc", "alpha is not a number"),
    ("?k=2.5", "k is not a whole number"),
    ("?k=0", "k is not a whole number in [1, 16]"),
    ("?c=nan", "c is not a number in"),
    ("?v=0", "v is not a number in [0.5, 6.0]"),
    ("?tab=nowhere", "tab is not a tab here"),
    ("?lesson=nope", "lesson is not a lesson here"),
    ("?trace=a/b", "trace is not a trace name"),
    ("?trace=demo&pass=0", "pass is not a whole number ≥ 1"),
    ("?trace=demo&pass=2&beat=0", "beat is not a whole number ≥ 1"),  # 1-based, as the stage counts
])
def test_bad_values_are_ignored_with_a_note(query, note):
    link = link_query.parse(_params(query), SLUGS)
    assert link.playground == {} and link.lesson is None and link.trace is None
    assert any(note in n for n in link.notes), link.notes


HOSTILE = {"lesson": "[Sign in again](https://evil.invalid/login)", "tab": "<img src=x>", "alpha": "<b>b</b>",
           "k": "**9**", "c": "$$x$$", "v": "`v`", "trace": "evil.invalid", "pass": "<i>2</i>", "beat": "_1_"}


def test_a_bad_value_is_refused_by_its_parameters_name_never_echoed():
    """A link is anyone's text and its note lands on the page of whoever opens it: the
    note names each parameter and what it takes, and no value sent appears in it."""
    from specviz.ui.links import route

    link = link_query.parse(HOSTILE, SLUGS)
    assert len(link.notes) == 8, link.notes
    for name in ("tab", "alpha", "k", "c", "v", "lesson", "pass", "beat"):
        assert any(note.startswith(f"{name} ") for note in link.notes), (name, link.notes)
    opened = route({"trace": "no_such_trace", "pass": "3"}, (lambda *a: (_ for _ in ()).throw(ValueError(
        "no bundled trace 'no_such_trace'")), [None]), ("alpha",))
    notes = [*link.notes, opened[1]["value"], route(HOSTILE, None, ("alpha",))[1]["value"]]
    for value in [*HOSTILE.values(), "no_such_trace"]:
        assert not any(value in note for note in notes), (value, notes)
    assert "trace is not a bundled trace with a pass 3" in opened[1]["value"]


def test_good_values_survive_beside_bad_ones():
    link = link_query.parse(_params("?alpha=0.9&k=lots&c=0.1"), SLUGS)
    assert link.playground == {"alpha": 0.9, "c": 0.1} and len(link.notes) == 1 and link.tab == "playground"


def test_unknown_parameters_are_ignored_silently_and_nothing_is_asked():
    assert link_query.parse({"utm_source": "mail"}, SLUGS) == link_query.Link()


def test_lesson_trace_and_tab_links():
    assert link_query.parse({"lesson": "early_exit"}, SLUGS) == link_query.Link(tab="run", lesson="early_exit")
    assert link_query.parse({"trace": "greedy-copy", "pass": "3", "beat": "2"}, SLUGS).trace == ("greedy-copy", 3, 2)
    assert link_query.parse({"trace": "greedy-copy"}, SLUGS) == link_query.Link(tab="watch", trace=("greedy-copy", 1, 1))
    assert link_query.parse({"tab": "maths", "alpha": "0.5"}, SLUGS).tab == "maths"  # an explicit tab wins


def test_without_the_watch_tab_its_links_are_noted_not_followed():
    link = link_query.parse({"trace": "x", "tab": "watch"}, SLUGS, watch=False)
    assert link.trace is None and link.tab is None and len(link.notes) == 2


@pytest.mark.parametrize("query", [
    link_query.playground_link(0.6, 5, 0.2, 1.0), link_query.playground_link(0.725, 16, 0.005, 2.5),
    link_query.lesson_link("copy_heavy"), link_query.watch_link("greedy-copy", 4, 1), link_query.tab_link("experiments"),
])
def test_built_links_parse_back_without_notes(query):
    link = link_query.parse(_params(query), SLUGS)
    assert not link.notes and link.tab is not None


def test_builders_write_short_readable_queries():
    assert link_query.playground_link(0.6, 5.0, 0.2, 1.0) == "?tab=playground&alpha=0.6&k=5&c=0.2&v=1"
    assert link_query.watch_link("greedy-copy", 4, 1) == "?trace=greedy-copy&pass=4&beat=1"
    with pytest.raises(ValueError):
        link_query.tab_link("nowhere")


def test_lesson_slugs_are_url_safe_and_unique():
    from specviz.ui.tabs.lessons_tab import LESSONS

    slugs = [lesson["slug"] for lesson in LESSONS.values()]
    assert len(set(slugs)) == len(slugs)
    assert all(s == link_query.slug(s) for s in slugs)
    assert link_query.slug("A misaligned draft (early exit)") == "a_misaligned_draft_early_exit"


def test_the_router_updates_the_playground_and_notes_bad_values():
    import gradio as gr

    from specviz.ui.links import route

    out = route({"alpha": "0.6", "k": "5", "c": "0.2", "v": "1", "lesson": "x"}, None, ("alpha", "k", "c", "v"))
    tab, note, *sliders = out[:6]
    assert tab == "playground"  # the tab's id, which the browser selects (ui.context.SELECT_TAB_JS)
    assert [s["value"] for s in sliders] == [0.6, 5, 0.2, 1.0]
    assert "lesson is not a lesson here" in note["value"] and "'x'" not in note["value"] and note["visible"]
    seen = []
    out = route({"trace": "t", "pass": "2"}, (lambda *a: seen.append(a) or ("opened",), [None]), ("alpha",))
    assert seen == [("t", 2, 1)] and out[-1] == "opened" and out[0] == "watch"
    out = route({}, None, ("alpha",))
    assert all(isinstance(u, type(gr.skip())) for u in out[:3])
