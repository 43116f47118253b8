"""A visitor's mistake is logged as one line, never as a traceback: the page raises its
``gr.Error`` with ``print_exception=False`` (gradio prints a traceback for any other error)."""

from __future__ import annotations

import logging

import pytest

from specviz.ui.page import build_page

gradio_client = pytest.importorskip("gradio_client")


def test_a_refused_run_logs_one_line_and_no_traceback(capfd, caplog):
    demo = build_page(public=False)
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        client = gradio_client.Client(demo.local_url, verbose=False)
        capfd.readouterr()
        with caplog.at_level(logging.INFO, logger="specviz.app"):
            with pytest.raises(Exception, match="The prompt is empty"):
                client.predict(prompt="   ", target_id="smollm2-135m-instruct", drafter_kind="ngram",
                               draft_model="", early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0,
                               max_new_tokens=6, seed=0, chat=True, device="cpu", dtype="float32", api_name="/run")
            with pytest.raises(Exception, match="Nothing to replay yet"):
                client.predict(3, api_name="/replay")
    finally:
        demo.close()
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, (out + err)[-2000:]
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused: ")]
    assert len(refused) == 2 and "The prompt is empty" in refused[0] and "\n" not in refused[0], refused
