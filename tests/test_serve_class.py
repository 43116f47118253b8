"""Serving a class, without a browser: the sentence beside "Copy link"
says when a link opens on this computer only, the queue's words say how many generations were
ahead and about how long, and a refused run changes nothing on the page (the Run button's chain
checks the settings before it clears anything)."""

from __future__ import annotations

import pytest

from specviz.ui import share
from specviz.ui.serve import visitors


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.0.1:7860", True), ("localhost:7860", True),
                                           ("[::1]:7860", True), ("::1", True), ("app.localhost", True),
                                           ("0.0.0.0", False), ("192.168.1.20:7860", False),
                                           ("abc.gradio.live", False), ("", False), (None, False)])
def test_loopback_hosts_are_told_from_network_ones(host, loopback):
    assert share.is_loopback(host) is loopback


def test_a_loopback_server_gets_the_commands_that_open_it_to_a_class():
    text = share.serving_sentence("127.0.0.1", "127.0.0.1:7860", lan="192.168.1.20", port=7860)
    assert "Only this computer can open these links" in text
    assert "GRADIO_SERVER_NAME=0.0.0.0" in text and "GRADIO_SHARE=True" in text and "Space" in text
    assert "192.168.1.20" in text and "7860" in text
    assert share.serving_sentence(None, None).startswith("**Only this computer")  # not launched: gradio's default


def test_a_network_server_opened_at_its_network_address_needs_no_sentence():
    assert share.serving_sentence("0.0.0.0", "192.168.1.20:7860") == ""
    assert share.serving_sentence("127.0.0.1", "owner-app.hf.space", on_space=True) == ""


def test_a_network_server_opened_at_loopback_points_at_its_network_or_share_address():
    lan = share.serving_sentence("0.0.0.0", "localhost:7860", lan="10.0.0.5", port=7860)
    assert "this computer's own" in lan and "10.0.0.5:7860" in lan
    shared = share.serving_sentence("0.0.0.0", "127.0.0.1:7860", share_url="https://abc.gradio.live")
    assert "abc.gradio.live" in shared.replace("&#46;", ".") and "open the public address" in shared
    assert "`127.0.0.1:7860`" in shared  # a plain host is shown as code


def test_an_outside_host_is_shown_as_text():
    text = share.serving_sentence("0.0.0.0", "127.0.0.1:1<img src=x onerror=alert(1)>")
    assert "<img" not in text and "&lt;img" in text


def test_the_queue_words_say_how_many_are_ahead_and_about_how_long():
    assert visitors.queue_words(0, 20.0, 60.0) == ""
    one = visitors.queue_words(1, 20.0, None)
    assert "1 generation was ahead of yours" in one and "about 20 s" in one
    three = visitors.queue_words(3, 20.0, 60.0)
    assert "3 generations were ahead" in three and "about 60 s" in three and "(20 s each)" in three
    assert "about 30 s" in visitors.queue_words(3, 20.0, None, slots=2)
    capped = visitors.queue_words(2, None, 60.0)
    assert "at most about 120 s" in capped and "60 s of generating each" in capped
    assert "depends on their settings" in visitors.queue_words(2, None, None)


def test_the_generation_clock_follows_recent_durations_and_ignores_nonsense():
    clock = visitors.GenerationClock(weight=0.5)
    assert clock.mean_s is None
    clock.record(10.0)
    clock.record(float("nan"))
    clock.record(-1.0)
    assert clock.mean_s == 10.0
    clock.record(20.0)
    assert clock.mean_s == pytest.approx(15.0)


class _Event:
    def __init__(self, concurrency_id):
        self.concurrency_id = concurrency_id


class _Waiting:
    def __init__(self, n):
        self.queue = [_Event("generation")] * n


class _Queue:
    def __init__(self, waiting, running, other=0):
        self.event_queue_per_concurrency_id = {"generation": _Waiting(waiting)}
        self.active_jobs = [[_Event("generation")]] * running + [[_Event("playground")]] * other + [None]


class _Demo:
    def __init__(self, queue):
        self._queue = queue


def test_generations_ahead_count_the_waiting_and_the_running_beyond_the_free_slots():
    assert visitors.generations_ahead(_Demo(_Queue(0, 0)), "generation") == 0
    assert visitors.generations_ahead(_Demo(_Queue(0, 1, other=3)), "generation") == 1
    assert visitors.generations_ahead(_Demo(_Queue(2, 1)), "generation") == 3
    assert visitors.generations_ahead(_Demo(_Queue(2, 1)), "generation", slots=4) == 0
    assert visitors.generations_ahead(_Demo(_Queue(4, 2)), "generation", slots=2) == 5
    assert visitors.generations_ahead(object(), "generation") == 0  # an unreadable queue: no words


def test_an_empty_prompt_is_refused_before_the_run_changes_anything():
    """The Run button's first checks raise the run's own refusal (a toast), so the race, the
    inspector and every output are untouched (tests/test_browser_layout.py sees it on the page)."""
    import gradio as gr

    from specviz.ui.serve.fields import NAMES
    from specviz.ui.tabs.run_tab import check_run

    values = dict(prompt="   ", target_id="smollm2-135m-instruct", drafter_kind="ngram", draft_model="",
                  early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=16, seed=0, chat=True,
                  device="auto", dtype="auto", branches=1, tree_nodes=0, rule="full")
    with pytest.raises(gr.Error, match="prompt is empty"):
        check_run(*[values[name] for name in NAMES], public=False)
    values["prompt"] = "Fix the typos: teh cat"
    assert check_run(*[values[name] for name in NAMES], public=False) is None


def test_the_lessons_tab_says_how_to_serve_a_class_once_not_under_every_lesson():
    from specviz.ui.page import build_page
    from specviz.ui.share import NOTE_CLASS
    from specviz.ui.tabs.lessons_tab import LESSONS

    page = build_page(public=False)
    notes = [b.elem_id for b in page.blocks.values() if NOTE_CLASS in (getattr(b, "elem_classes", None) or [])]
    assert [n for n in notes if n.startswith("sv-lesson")] == ["sv-lessons-serve"]
    copies = [b for b in page.blocks.values() if str(getattr(b, "elem_id", "")).startswith("sv-lesson-copy-")
              and type(b).__name__ == "Button"]
    assert len(copies) == len(LESSONS) > 10  # every lesson keeps its link
