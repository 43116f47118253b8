"""Tokens are labelled as they were produced: special tokens by name, parts of one UTF-8
character as their bytes, whitespace made visible, and token text that looks like markup shown
as text in the HTML views and in every Plotly label (never formatted by Plotly).

Real token ids come from the offline SmolLM2 tokenizer (byte-level BPE: an emoji is three
tokens, none a character by itself; ``<|im_start|>`` is special).
"""

from __future__ import annotations

import pytest

from specviz.figures.trace import TokenPieces, token_label
from specviz.core.records import ACCEPTED, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.ui.draw.charts import inspector_figure, lossless_figure, plotly_text, sweep_figure
from specviz.ui.draw.run_views import inspector_markdown, render_round, round_tree_html

EMOJI = "😀"  # F0 9F 98 80


@pytest.fixture(scope="module")
def pieces(smollm2):
    return TokenPieces(smollm2.tokenizer)


@pytest.fixture(scope="module")
def emoji_ids(smollm2):
    ids = smollm2.tokenizer(EMOJI, add_special_tokens=False)["input_ids"]
    assert len(ids) == 3 and all(smollm2.tokenizer.decode([i]) == "\ufffd" for i in ids)  # no piece is a character
    return ids


def test_pieces_name_special_tokens_and_show_partial_characters_as_bytes(smollm2, pieces, emoji_ids):
    tok = smollm2.tokenizer
    assert [pieces(i) for i in emoji_ids] == ["<0xF0><0x9F>", "<0x98>", "<0x80>"]
    assert [pieces(i) for i in (1, 2, 0)] == ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    assert pieces(tok.convert_tokens_to_ids("<file_sep>")) == "<file_sep>"  # special, though not BOS/EOS/chat
    for text in (" ok", "中", "\n", "<b>"):
        (i,) = tok(text, add_special_tokens=False)["input_ids"][:1]
        assert pieces(i) == tok.decode([i])
    assert "\ufffd" not in "".join(pieces(i) for i in range(len(tok)) if i % 97 == 0)


def _drafted(token_id, text, accepted, tested, parent, top=()):
    return DraftedToken(token_id, text, p_draft=0.6, p_target=0.3, accept_prob=0.5, uniform=0.2 if accepted else 0.9,
                        accepted=accepted, tested=tested, parent=parent, top_draft=list(top), top_target=list(top))


def test_views_show_bytes_special_names_markup_and_newlines_as_text(pieces, emoji_ids):
    f0, b98, b80 = emoji_ids
    top = [[f0, pieces(f0), 0.5], [1, pieces(1), 0.3], [33, "<b>", 0.1], [198, "\n", 0.1]]
    round_ = Round(index=0, n_accepted=1, drafted=[
        _drafted(f0, pieces(f0), True, True, -1, top),  # accepted: the start of the emoji
        _drafted(1, pieces(1), False, True, 0, top),  # <|im_start|>, rejected
        _drafted(198, "\n", False, False, 1),  # a newline behind it, never tested
        _drafted(b98, pieces(b98), False, True, -1),  # a rejected sibling of the root
    ], emitted=[
        EmittedToken(f0, "", ACCEPTED, 0.3, 0),  # the stream holds the partial character back
        EmittedToken(2, "", RESAMPLED, 0.2, 0, rejected_id=1, rejected_text=pieces(1), p_source=0.4,
                     top_source=[[2, pieces(2), 0.4], [33, "<b>", 0.3]]),
    ])
    stream = render_round(round_, eos_ids=set())
    start = "&lt;&#124;im&#95;start&#124;&gt;"  # <|im_start|>: its | and _ are Markdown, escaped too
    assert f"{start}</s>" in stream and f"rejected draft {start}\u00a0#1" in stream
    assert "''" not in stream and "∅" not in stream
    tree = round_tree_html(round_)
    assert "&lt;0xF0&gt;&lt;0x9F&gt;" in tree and "&lt;0x98&gt;" in tree and start in tree
    assert "↵" in tree and "&lt;&#124;im&#95;end&#124;&gt;" in tree  # the resampled special token, by name
    assert "\ufffd" not in tree and "∅" not in tree
    story = inspector_markdown(round_, 1)
    assert f"<code>{start}\u00a0#1</code>" in story and "<code>&lt;&#124;im&#95;end&#124;&gt;\u00a0#2</code>" in story
    assert "<code>&lt;0xF0&gt;&lt;0x9F&gt;\u00a0#" in inspector_markdown(round_, 0)
    for slot in (0, 1):
        labels = [x for trace in inspector_figure(round_, slot).data for x in trace.x]
        assert labels and not any("<" in x or ">" in x for x in labels)  # markup escaped for Plotly
    labels = list(inspector_figure(round_, 0).data[0].x)
    assert "★ &lt;0xF0&gt;&lt;0x9F&gt;\u00a0#" + str(f0) in labels and "&lt;b&gt;\u00a0#33" in labels
    assert "↵\u00a0#198" in labels


def test_a_rejected_whitespace_draft_is_struck_visibly_not_as_a_line_break():
    cases = (("\n", "↵"), ("\n\n", "↵↵"), (" ", "␣"), ("", "∅"), ("a\nb", "a↵b"), (" x\r\n", " x␍↵"))
    for text, shown in cases:
        round_ = Round(index=0, n_accepted=0, drafted=[_drafted(198, text, False, True, None)],
                       emitted=[EmittedToken(42, "x", RESAMPLED, 0.5, 0, rejected_id=198, rejected_text=text)])
        html = render_round(round_, set())
        struck = html.split("<s ", 1)[1].split("</s>")[0].split(">", 1)[1]
        assert struck == shown
    round_.drafted[0].text = round_.emitted[0].rejected_text = " the"
    assert ">␣the</s>" not in render_round(round_, set()) and "> the</s>" in render_round(round_, set())


def test_every_plotly_label_with_token_text_is_escaped():
    assert plotly_text("<b>bold</b> & <br>") == "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;br&gt;"
    assert plotly_text("$x$") == "&#36;x&#36;" and plotly_text("a $5 note") == "a &#36;5 note"  # not LaTeX to Plotly
    fig = lossless_figure(["<b>", "<sup>2", " <i>"], [0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.5, 0.3, 0.2])
    assert list(fig.data[0].x) == ["&lt;b&gt;", "&lt;sup&gt;2", "␣&lt;i&gt;"]
    rows = [{"draft": "<b>evil</b>", "alpha": 0.5, "acceptance_rate": 0.4}]
    assert list(sweep_figure(rows, "draft", "alpha").data[0].x) == ["&lt;b&gt;evil&lt;/b&gt;"]
    assert token_label("<br>", 5) == "<br>\u00a0#5"  # the label itself stays plain text: callers escape
