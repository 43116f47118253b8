"""Many visitors at once: concurrent sessions through the Gradio API get their own results, and
the model-free parts of the page answer while a generation is running."""

from __future__ import annotations

import re
import threading
import time

import pytest

from specviz.ui.page import build_page
from specviz.ui.serve.settings import QUEUE_SIZE

gradio_client = pytest.importorskip("gradio_client")

REQUESTS = [
    dict(prompt="Fix the typos: Teh cat sat on teh mat.", drafter_kind="ngram", seed=1, temperature=0.0),
    dict(prompt="Write one sentence about the sea.", drafter_kind="none", seed=2, temperature=1.0),
    dict(prompt="Name three colours.", drafter_kind="early-exit", early_exit_layers=4, seed=3, temperature=1.0),
    dict(prompt="Count from one to five.", drafter_kind="ngram", seed=4, temperature=0.7),
]


@pytest.fixture(scope="module")
def url():
    from specviz.models import loading as models

    models.prepare_offline("smollm2-135m-instruct")
    demo = build_page(public=False)
    demo.queue(max_size=QUEUE_SIZE).launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        yield demo.local_url
    finally:
        demo.close()


def _args(**overrides):
    values = dict(prompt="", target_id="smollm2-135m-instruct", drafter_kind="ngram", draft_model="",
                  early_exit_layers=4, k=3, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=10, seed=0,
                  chat=True, device="cpu", dtype="float32")
    values.update(overrides)
    return values


def _tokens(html: str) -> str:
    """The token panel without its timestamp markers (their times and number differ run to run)."""
    return re.sub(r'<i hidden class="sv-sent" data-t="[0-9.]+"></i>', "", html)


def test_four_sessions_at_once_each_get_the_result_they_would_get_alone(url):
    results: dict[int, str] = {}

    def visit(i):
        client = gradio_client.Client(url, verbose=False)
        results[i] = client.predict(**_args(**REQUESTS[i]), api_name="/run")[0]

    threads = [threading.Thread(target=visit, args=(i,)) for i in range(len(REQUESTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert sorted(results) == list(range(len(REQUESTS))), "a session did not finish"
    alone = gradio_client.Client(url, verbose=False)
    for i, request in enumerate(REQUESTS):
        assert _tokens(results[i]) == _tokens(alone.predict(**_args(**request), api_name="/run")[0]), i
    assert len({_tokens(html) for html in results.values()}) == len(REQUESTS)


def test_model_free_views_answer_while_a_generation_runs(url):
    # Plain decoding of a count that never ends by itself: 512 target steps after its warm-up and
    # its timed baseline (tens of seconds on any CPU), so the generation still holds its slot when
    # the replay answers unless the replay was queued behind it. Its first status (warming up,
    # timing the baseline or generating) says the job is running on the server: waiting for the
    # tokens themselves would only add a minute of baseline timing to the suite.
    busy = gradio_client.Client(url, verbose=False)
    job = busy.submit(**_args(prompt="1, 2, 3, 4, 5, 6, 7,", drafter_kind="none", chat=False,
                              max_new_tokens=512, seed=5), api_name="/run")
    deadline = time.time() + 300
    running = ("Warming up", "Timing plain decoding", "Generating")
    while (time.time() < deadline and not job.done()
           and not any(word in str(job.outputs()[-1][1] if job.outputs() else "") for word in running)):
        time.sleep(0.2)
    assert not job.done(), "the generation ended before it was seen running"
    other = gradio_client.Client(url, verbose=False)
    started = time.time()
    with pytest.raises(Exception, match="Nothing to replay yet"):
        other.predict(3, api_name="/replay")  # a new visitor has no run: answered at once, not queued
    assert time.time() - started < 10
    assert not job.done()
    job.cancel()
