"""The engines tab's lane (/llamacpp_lane) before any model loads: a public page, a pair without GGUF
files and a machine without xllamacpp are refused in one sentence each; the table escapes what it
shows; the commands for the Run tab's settings name the pair's own GGUF files. The lane's runs on the
real pair are in tests/test_llamacpp_lane.py (slow)."""

from __future__ import annotations


import gradio as gr
import pytest

from specviz.ui.tabs import lane_view

PAIR = {"prompt": "def fib(n):", "target_id": "qwen2.5-coder-1.5b-instruct", "drafter_kind": "model",
        "draft_model": "qwen2.5-coder-0.5b-instruct", "early_exit_layers": 1, "k": 4, "temperature": 0.0,
        "top_k": 0, "top_p": 1.0, "seed": 0, "chat": True, "device": "cpu", "dtype": "auto"}


def test_a_public_page_refuses_the_lane_in_a_sentence():
    with pytest.raises(gr.Error, match="public demo does not offer it"):
        lane_view.plan_lane(PAIR, True)


def test_without_xllamacpp_the_lane_says_how_to_get_it(without_xllamacpp):
    with pytest.raises(gr.Error, match=r"pip install xllamacpp"):
        lane_view.plan_lane(PAIR, False)


def test_the_panel_says_what_the_server_lacks_before_run_is_pressed(without_xllamacpp):
    """A newcomer met the lane's refusal only as a pop-up that went away: the status line says it
    as the page opens, in the refusal's own words."""
    from specviz.run.llamacpp_lane import INSTALL_HINT

    assert lane_view.lane_status(True) == lane_view.PUBLIC_REFUSAL
    assert INSTALL_HINT in lane_view.lane_status(False)
    with pytest.raises(gr.Error) as refusal:
        lane_view.plan_lane(PAIR, False)
    assert INSTALL_HINT in str(refusal.value.message)


def test_a_target_without_gguf_files_is_refused_before_anything_loads():
    pytest.importorskip("xllamacpp")
    with pytest.raises(gr.Error, match="specviz keeps them only for the offline Qwen2.5-Coder pair"):
        lane_view.plan_lane({**PAIR, "target_id": "smollm2-135m-instruct", "drafter_kind": "ngram"}, False)


def test_the_table_shows_each_engines_figures_and_escapes_its_words():
    rows = [{"engine": "specviz", "mode": "exact rule (full)", "decode_tokens_per_s": 5.06,
             "plain_decode_tokens_per_s": 2.5, "decode_speedup": 2.02, "acceptance": 0.8, "alpha": 0.8,
             "tokens_per_pass": 4.2, "c": 0.3, "v": 1.3, "why": "wins"},
            {"engine": "llama.cpp", "mode": "<b>plain</b>", "decode_tokens_per_s": 16.0}]
    text = lane_view.lane_markdown(rows)
    assert "| specviz | exact rule (full) | 5.1 | 2.02× | 0.800 | 0.80 | 4.20 | 0.30 | 1.30 |" in text
    assert "<b>" not in text and "| 16.0 | – |" in text
    assert "specviz's plain decoding: 2.5 tokens/s" in text and "- wins" in text


def test_the_commands_name_the_pairs_gguf_files_or_say_what_is_missing():
    text = lane_view.commands_markdown(PAIR)
    assert "**llama.cpp**" in text and "**vLLM**" in text and "**SGLang**" in text
    assert "Qwen/Qwen2.5-Coder-1.5B-Instruct" in text and "--spec-draft-n-max 4" in text


def test_the_request_to_send_is_a_code_block_shown_as_it_is_sent():
    """The request to send is shown in a code block, its quotes as quotes (not ``&quot;``, which a
    copied request would carry), and text with backticks cannot close its block early."""
    import re

    text = lane_view.commands_markdown(PAIR)
    blocks = re.findall(r"^(`{3,})text\n(.*)\n\1$", text, flags=re.M)
    assert len(blocks) == 3, text  # llama.cpp, vLLM and SGLang each get the request
    for fence, body in blocks:
        assert body.startswith('POST /v1/chat/completions {"messages": ') and '"max_tokens": 96' in body
        assert "&quot;" not in body
    fence, body = re.fullmatch(r"(`+)text\n(.*)\n\1", lane_view.fenced("a ```` b\nc"), flags=re.S).groups()
    assert body == "a ```` b c" and len(fence) == 5


def test_where_xllamacpp_is_installed_the_panel_names_the_pair_to_pick(monkeypatch):
    monkeypatch.setattr(lane_view, "_xllamacpp_installed", lambda: True)
    # where it can run, the pair to pick first: the default pair has no GGUF files, and was refused
    assert "pick **Qwen2.5-Coder 0.5B → 1.5B · offline" in lane_view.lane_status(False)
    assert lane_view.lane_status(True) == lane_view.PUBLIC_REFUSAL  # installed or not, public pages refuse
