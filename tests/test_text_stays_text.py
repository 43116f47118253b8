"""Text from outside the code stays text: one rule, :func:`specviz.ui.draw.escape.as_text`,
applied once wherever such a string is put into the page's Markdown or HTML, and never where a
component shows plain text. Here without a browser: the rule itself against a CommonMark parser
and an HTML parser, then every view a loaded trace with hostile fields reaches (the real browser
renders the same views in tests/test_browser_hostile.py). Also here: a trace without a plain
baseline says so where the speedup would be, and a token that is part of a character shows as
its bytes in the Watch tab and the lossless check's labels."""

from __future__ import annotations

import html
import html.parser
import json
import re
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz.figures.trace import visible_text
from specviz.core.records import DraftedToken, EmittedToken, Round
from specviz.ui.tabs import replay
from specviz.ui.tabs import watch_tab
from specviz.ui.draw import beat_charts, charts
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.run_views import (
    NO_TRACE_BASELINE,
    inspector_markdown,
    round_tree_html,
    summary_markdown,
)
from specviz.ui.serve.user_errors import refused

ROOT = Path(__file__).resolve().parents[1]

#: Hostile token texts (no whitespace, so they show unchanged where whitespace is made visible).
HOSTILE = ["<img/src=x/id=pwn-img>", "[Sign-in](https://evil.invalid/login)", "<b>b</b>", "**bold**", "_u_",
           "~~s~~", "`code`", "$$x^2$$", "&lt;&amp;", "\\*x\\*", "|a|b|", "<a/href=https://evil.invalid>a</a>",
           "<style>#pwn{}</style>", "www.evil.invalid", "m@evil.invalid", "%{x}", "${1+1}", "{{value}}",
           "<!--c-->", "<script>window.pwn=1</script>", "<svg/onload=window.pwn=1>", "#h", ">q", "-l", "1.",
           "[x]:https://evil.invalid", "![i](x)", "<https://evil.invalid>", "&#91;"]
#: A trace's target and drafter fields (they make the label of the status line and the Watch tab).
LABEL = ("<img src=x id=pwn-label> [Sign in](https://evil.invalid/login) <b>b</b> **bold** $$x^2$$ {{value}} "
         "${1+1} `c` ~~s~~ www.evil.invalid")
#: A bad field value, as the loader's message quotes it (at most 40 characters are quoted).
BAD_VALUE = "<img src=x id=pwn-err>**e**[l](//e.io)"


def hostile_trace(base: str = "poem_int8") -> dict:
    """A bundled trace whose target and drafter are :data:`LABEL` and whose tokens' texts are
    :data:`HOSTILE`: each hostile text replaces one token id's text everywhere it appears (drafted,
    emitted, rejected, the top-token rows), the ids of pass 2 (the Watch tab's first pass) first."""
    data = json.loads((ROOT / "specviz" / "data" / "traces" / f"{base}.json").read_text(encoding="utf-8"))
    data["target"], data["drafter"] = LABEL, "<b>drafter</b>"
    ids: list[int] = []
    for round_ in [data["rounds"][1], *data["rounds"]]:
        for token in round_["drafted"] + round_["emitted"]:
            if token["id"] not in ids:
                ids.append(token["id"])
    text_of = dict(zip(ids, HOSTILE))
    for round_ in data["rounds"]:
        for token in round_["drafted"] + round_["emitted"]:
            token["text"] = text_of.get(token["id"], token["text"])
            if token.get("rejected_id") in text_of:
                token["rejected_text"] = text_of[token["rejected_id"]]
            for key in ("top_draft", "top_target", "top_source"):
                for row in token.get(key) or []:
                    row[1] = text_of.get(row[0], row[1])
    return data


# --------------------------------------------------------------------------- the rule
ALPHABET = st.sampled_from(list("[]()!*_~`$%@:/.w<>&\"'#|{}\\-+=^ a1\n\t") + ["www.", "://", "http", "&#91;", "&lt;",
                                                                              "](", "<b>", "-->", "\u2028", "é"])


class _Collect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.data = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.data.append(data)

    def handle_comment(self, data):
        self.tags.append(("!--", {}))


@settings(max_examples=400, deadline=None)
@given(st.lists(ALPHABET, max_size=24).map("".join))
def test_markdown_reads_it_back_as_the_same_text_and_nothing_else(text):
    """CommonMark (markdown-it, with tables and strikethrough) renders ``as_text(text)`` as one
    paragraph of exactly that text, placed alone, after words, in a list item or in a table cell."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    shown = as_text(text)
    out = md.render(shown)
    if text.strip():
        body = re.fullmatch(r"<p>(.*)</p>\n", out, re.DOTALL)
        assert body and "<" not in body.group(1), (text, out)
        assert " ".join(html.unescape(body.group(1)).split()) == " ".join(text.split()), (text, out)
    for source in (f"x {shown} y", f"- item {shown}", f"| a | b |\n|---|---|\n| {shown} | c |"):
        tags = re.findall(r"<(/?[a-z]+)", md.render(source))
        assert set(tags) <= {"p", "/p", "ul", "/ul", "li", "/li", "table", "/table", "thead", "/thead", "tbody",
                             "/tbody", "tr", "/tr", "th", "/th", "td", "/td"}, (text, md.render(source))


@settings(max_examples=400, deadline=None)
@given(st.lists(ALPHABET, max_size=24).map("".join))
def test_html_reads_it_back_as_the_same_text_in_an_element_and_in_an_attribute(text):
    parser = _Collect()
    parser.feed(f'<span title="{as_text(text)}">{as_text(text)}</span>')
    parser.close()
    assert parser.tags == [("span", {"title": text.replace("\r\n", "\n").replace("\r", "\n")})] or \
        parser.tags == [("span", {"title": text})], parser.tags
    assert "".join(parser.data) == text


def test_what_it_leaves_alone_and_what_it_changes():
    assert as_text("Lookahead K must be a whole number in [1, 16], got 'x' (top-p 0.5: 90%).") == \
        "Lookahead K must be a whole number in [1, 16], got 'x' (top-p 0.5: 90%)."
    assert as_text("<b>") == "&lt;b&gt;" and as_text("&") == "&amp;" and as_text('"') == "&quot;"
    assert as_text("[a](b)") == "[a&#93;(b)" and as_text("https://x") == "https&#58;//x"
    assert as_text("www.x") == "www&#46;x" and as_text("- a") == "&#45; a" and as_text("a\nb") == "a&#10;b"
    assert as_text("\ud800") == "&#65533;" and as_text(3) == "&#51;"


# --------------------------------------------------------------------------- every view of a hostile trace
@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "trace.json"
    path.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    outputs = replay.load_trace(str(path), public=False)
    return dict(zip(("tokens", "summary", "alpha", "tpp", "speedup", "positions", "time", "rules", "lengths",
                     "calibration", "state", "slider"),
                    outputs))


def _escaped_once(markup: str, texts) -> None:
    """Each text is in ``markup`` escaped, and neither as it is (where escaping changes it; the
    shortest texts, like ``1.``, also occur in the markup's own numbers) nor escaped twice."""
    for text in texts:
        assert as_text(text) in markup, (text, markup[:400])
        assert as_text(text) == text or len(text) < 4 or text not in markup, (text, markup[:400])
        assert as_text(as_text(text)) == as_text(text) or as_text(as_text(text)) not in markup, (text, markup[:400])


def test_the_status_line_and_the_token_panel_show_the_trace_as_text(loaded):
    _escaped_once(loaded["summary"].split("\n")[0], [LABEL, "<b>drafter</b>"])
    rounds = loaded["state"].rounds
    shown = {e.text for r in rounds for e in r.emitted} | {e.rejected_text for r in rounds for e in r.emitted}
    assert len(shown & set(HOSTILE)) >= 10
    _escaped_once(loaded["tokens"], [t for t in HOSTILE if t in shown and t != "&#91;"])
    assert "<img" not in loaded["tokens"].replace('<i hidden class="sv-', "")


def test_the_inspector_its_tree_and_its_chart_show_token_texts_as_text(loaded):
    state = loaded["state"]
    story, figure, tree = replay.inspect_token(state, SimpleNamespace(round=1, slot=1))
    assert "`" not in story.replace(as_text("`code`"), "")  # a <code> element, not a Markdown code span
    labels = [visible_text(t) for t in HOSTILE[:5]]
    _escaped_once(story, [labels[1], labels[4]])  # the rejected draft and the resampled token
    _escaped_once(tree, labels[:5])
    ticks = [x for trace in figure.data for x in trace.x]
    assert any(as_text(labels[1]) in x for x in ticks) and not any(labels[1] in x for x in ticks), ticks


def test_errors_quote_a_bad_value_as_text(tmp_path):
    bad = hostile_trace()
    bad["rounds"][0]["emitted"][0]["kind"] = BAD_VALUE
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(gr.Error) as err:
        replay.load_trace(str(path), public=False)
    assert as_text(repr(BAD_VALUE)) in err.value.message and "<img" not in err.value.message, err.value.message
    assert refused(LABEL).message == as_text(LABEL)


def test_the_watch_tab_shows_the_pass_as_text_and_its_checkboxes_as_plain_text(loaded):
    w = watch_tab.Watched(loaded["state"].label, loaded["state"].rounds)
    views = watch_tab._pass_views(w, 1, 0, False)
    scrubber, stage, figure, _, stack_text, picks = views[:6]
    _escaped_once(stage, [LABEL, visible_text(HOSTILE[0])])
    labels = [label for label, _ in picks["choices"]]
    assert labels[:2] == [f"1. {HOSTILE[0]}", f"2. {HOSTILE[1]}"]  # text: the checkbox shows it as it is
    ticks = list(figure.data[0].x)
    assert ticks[:2] == [as_text(f"1. {HOSTILE[0]}"), as_text(f"2. {HOSTILE[1]}")]
    _escaped_once(stack_text, [f"“{HOSTILE[0]}”"])
    sentences = []
    for beat in range(1, scrubber["maximum"] + 1):  # every beat's sentence (the scrubber counts from 1)
        stage = watch_tab.on_beat(w, 2, beat, True)[1]
        sentence = re.search(r'<p class="sv-watch-sentence"[^>]*>(.*)</p>', stage).group(1)
        assert "<" not in sentence, sentence
        sentences.append(html.unescape(sentence))
    for text in HOSTILE[:2]:
        assert any(f"“{text}”" in sentence for sentence in sentences), (text, sentences)
    score = watch_tab.lock_guess(w, 2, 0, ["0"], 2, watch_tab.new_score(), True)[0]
    _escaped_once(score, [f"“{HOSTILE[0]}”", f"“{HOSTILE[1]}”"])


def test_notes_lossless_text_and_chart_labels_take_text(loaded):
    analysis = loaded["state"].analysis()
    _escaped_once(summary_markdown(analysis, "status", [f"a note naming {LABEL}"]), [LABEL])
    from specviz.ui.tabs.lossless_check import lossless_markdown

    report = SimpleNamespace(n=100, draft_label=LABEL, acceptance_rate=0.5, tv_speculative=0.1, tv_direct=0.1,
                             p_value_speculative=0.5, p_value_direct=0.5, token_ids=[1], temperature=1.0,
                             rule="full")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("specviz.ui.tabs.lossless_check.lossless_notes", lambda *a, **k: [f"note on {LABEL}"])
        _escaped_once(lossless_markdown(report, 1.0, 1.0, "real", False), [LABEL])
    figure = charts.lossless_figure(HOSTILE[:3], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5])
    assert list(figure.data[0].x) == [as_text(t) for t in HOSTILE[:3]]
    sweep = charts.sweep_figure([{"draft": HOSTILE[2], "alpha": 0.5, "acceptance_rate": 0.5}], "draft", "alpha")
    assert as_text(HOSTILE[2]) in list(sweep.data[0].x)


def test_run_status_lines_take_the_pairs_names_as_text():
    from specviz.ui.tabs import run_stream

    run = SimpleNamespace(finish_reason="length", tokens=[1, 2])
    request = SimpleNamespace(max_new_tokens=4)
    for done, over in ((True, False), (False, True), (False, False)):
        _escaped_once(run_stream._status(run, request, LABEL, done, over, 60.0), [LABEL])
    state = SimpleNamespace(finished=False, rounds=[], max_new_tokens=4, label=LABEL, stop_slot=-1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_stream, "RunState", SimpleNamespace)
        mp.setattr(run_stream, "STOP_SETTLE_S", 0.0)
        summary = dict(zip(run_stream.SHOWN_OUTPUTS, run_stream.stop_run(state)))["summary"]
    _escaped_once(summary, [LABEL])


# --------------------------------------------------------------------------- no baseline, partial characters
def test_a_trace_without_a_plain_baseline_says_so_where_the_speedup_would_be(loaded):
    assert loaded["state"].baseline is None
    row = next(line for line in loaded["summary"].splitlines() if line.startswith("| measured speedup"))
    assert NO_TRACE_BASELINE in row and "measuring" not in loaded["summary"], row
    notes = [a["text"] for a in loaded["speedup"].layout.annotations]
    assert NO_TRACE_BASELINE in notes and charts.WAITING_TEXT not in notes, notes


def test_a_byte_the_stream_holds_back_shows_as_its_bytes_in_the_watch_tab():
    """SmolLM2's 🦙 is four bytes over two tokens: a round that ends by resampling the first of them
    emits it with no text of its own (the stream waits for the character), and its piece is its
    bytes (as the inspector shows it)."""
    piece = "<0xF0><0x9F>"
    round_ = Round(index=0, n_accepted=0, drafted=[
        DraftedToken(238, "<0x94>", 0.9, 0.1, 0.11, 0.7, False, True, top_draft=[[238, "<0x94>", 0.9]],
                     top_target=[[10813, piece, 0.8], [238, "<0x94>", 0.1]])],
        emitted=[EmittedToken(10813, "", "resampled", 0.8, 0, rejected_id=238, rejected_text="<0x94>", p_source=0.9,
                              top_source=[[10813, piece, 0.9]])])
    w = watch_tab.Watched("utf-8", [round_])
    stage = watch_tab.stage_html(w, 0, len(watch_tab.beats(round_)) - 1, True)
    assert as_text(piece) in stage and "∅" not in stage, stage
    assert round_tree_html(round_).count(as_text(piece)) == 1
    assert as_text(piece) in inspector_markdown(round_, 0)


def test_the_lossless_checks_labels_show_a_partial_character_as_its_bytes():
    from specviz.models import loading as models
    from specviz.ui.tabs.lossless_check import first_token_labels

    directory = models.cache_dir() / "models" / "smollm2-135m-instruct"
    if not (directory / "specviz-prepared.json").is_file():
        pytest.skip("run `python -m specviz prepare smollm2-135m-instruct` first")
    from transformers import AutoTokenizer

    labels = first_token_labels(AutoTokenizer.from_pretrained(str(directory)), [10813, 238, 278, -1])
    assert labels[:2] == ["<0xF0><0x9F>\u00a0#10813", "<0x94>\u00a0#238"] and "\ufffd" not in "".join(labels)
    assert labels[3] == "all\u00a0other\u00a0tokens"


def test_beat_chart_labels_are_escaped_once(loaded):
    round_ = loaded["state"].rounds[1]
    figure = beat_charts.beat_figure(round_, watch_tab.beats(round_)[:1])
    assert list(figure.data[0].x) == [as_text(label) for label in beat_charts.node_labels(round_)]
