"""Exports a spreadsheet opens: the rounds CSV and the experiments CSV keep generated text as text
(no formula injection) and number verify passes from 1, as the inspector and the charts do."""

from __future__ import annotations

import csv
import io

import pytest

from specviz.run.sweep import CSV_FIELDS, write_csv
from specviz.figures.trace import rounds_csv, spreadsheet_safe
from specviz.core.records import ACCEPTED, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round

DANGEROUS = ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(1,1)", "+1+1", "-2+3", "=SUM(E", "\tcmd", "\rcmd"]


@pytest.mark.parametrize("text", DANGEROUS)
def test_text_that_a_spreadsheet_would_run_is_quoted(text):
    assert spreadsheet_safe(text) == "'" + text


@pytest.mark.parametrize("value", ["plain text", " =not first", "", "1.5", 3, -0.5, 0.0, None, True])
def test_everything_else_is_left_as_it_is(value):
    assert spreadsheet_safe(value) is value


def round_with_text(index: int, text: str, rejected: str | None = None) -> Round:
    drafted = [DraftedToken(1, "a", 1.0, 0.5, 0.5, 0.9, accepted=False, tested=True)] if rejected else []
    kind = RESAMPLED if rejected else PLAIN
    emitted = [EmittedToken(2, text, kind, 0.5, index, rejected_id=1 if rejected else None, rejected_text=rejected)]
    return Round(index=index, drafted=drafted, emitted=emitted, verify_ms=1.25, elapsed_s=0.5 * (index + 1))


def test_the_rounds_csv_counts_passes_from_1_and_neutralises_text():
    rounds = [round_with_text(0, "=SUM(E"), round_with_text(1, "@SUM(1,1)", rejected="+1+1"),
              round_with_text(2, "fine")]
    rounds[2].emitted.insert(0, EmittedToken(3, "-", ACCEPTED, 0.5, 2))
    table = list(csv.DictReader(io.StringIO(rounds_csv(rounds))))
    assert [row["pass"] for row in table] == ["1", "2", "3"]
    assert [row["text"] for row in table] == ["'=SUM(E", "'@SUM(1,1)", "'-fine"]
    assert table[1]["rejected_draft"] == "'+1+1" and table[0]["rejected_draft"] == ""
    assert table[0]["verify_ms"] == "1.25" and table[2]["elapsed_s"] == "1.5"  # numbers stay numbers


def test_the_experiments_csv_neutralises_text_and_keeps_negative_numbers():
    row = {name: None for name in CSV_FIELDS}
    row.update(temperature=0.7, k=4, draft="=HYPERLINK(\"x\")", text="+1+1 is two", speedup=-0.5,
               speedup_low=0.9, speedup_high=1.3, prompt_tokens=12, counts={"accepted": 3})
    table = list(csv.DictReader(io.StringIO(write_csv([row]))))
    assert table[0]["draft"] == "'=HYPERLINK(\"x\")" and table[0]["text"] == "'+1+1 is two"
    assert table[0]["speedup"] == "-0.5" and table[0]["k"] == "4" and table[0]["count_accepted"] == "3"
    assert (table[0]["speedup_low"], table[0]["speedup_high"]) == ("0.9", "1.3")


def test_the_exported_charts_page_has_a_title_and_the_runs_settings():
    """the exported charts page had no title and no settings, so a page opened
    later did not say what it showed. Its title names the run, a table lists the settings, and
    text from outside (the prompt, a model's name) stays text."""
    import html

    import plotly.graph_objects as go

    from specviz.ui.tabs.replay import charts_html

    meta = {"target": "smollm2-135m-instruct", "drafter": "prompt lookup (n-gram)", "device": "cpu",
            "dtype": "bfloat16", "finish_reason": "length",
            "settings": {"prompt": "Fix <b>this</b>", "k": 4, "temperature": 0.0, "max_new_tokens": 96}}
    page = charts_html([go.Figure()], "smollm2 ← prompt lookup", meta)
    assert "<title>specviz charts · smollm2 ← prompt lookup</title>" in page
    assert "<h1>specviz charts · smollm2 ← prompt lookup</h1>" in page
    shown = html.unescape(page)  # as the browser reads the escaped values
    for name, value in (("k", "4"), ("temperature", "0.0"), ("max_new_tokens", "96"), ("dtype", "bfloat16"),
                        ("target", "smollm2-135m-instruct")):
        assert f"<tr><th>{name}</th><td>{value}</td></tr>" in shown, name
    assert "<b>this</b>" not in page and "&lt;b&gt;this&lt;/b&gt;" in page
    assert charts_html([go.Figure()], "x", meta) == charts_html([go.Figure()], "x", meta)
