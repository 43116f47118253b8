"""Sweep rows do not contaminate each other: the same setting swept three times
gives three equal rows, with the drafters that learn from earlier outputs (Token Recycling's
table, the suffix drafter's history) too, in the CLI's sweep and in the app's sweep steps; each
row starts from the state a bench call starts from (:func:`specviz.run.bench.measurement_start`),
and a visitor's own history and table are as they were once the sweep ends."""

from __future__ import annotations

import json

import pytest
from helpers import bpe_tokenizer
from test_cli import _save_tiny, specviz

from specviz.run.request import validate_request
from specviz.run.sweep import sweep, sweep_requests


def _finished_rows(steps) -> list[dict]:
    """The finished rows of a sweep, in order (runs it to the end)."""
    return [step.row for step in steps if step.row is not None]

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = "the quick brown fox the quick brown fox the quick"
#: What a row's measurement decides (timings vary between runs; these do not at T = 0).
DECIDED = ("alpha", "tokens_per_pass", "proposed", "tested", "accepted", "emitted", "text")


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("sweep-equal")
    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(root / "target", tok, seed=0)


def _base(target: str, draft: str):
    return validate_request(prompt=PROMPT, target=target, draft=draft, k=3, temperature=0.0, top_k=0, top_p=1.0,
                            max_new_tokens=24, seed=0, device="cpu", dtype="float32")


def _decided(row: dict) -> tuple:
    return tuple(row[name] for name in DECIDED)


@pytest.mark.parametrize("draft", ["recycle", "suffix"])
def test_three_equal_settings_give_three_equal_rows(tiny_target, draft):
    rows = _finished_rows(sweep(sweep_requests(_base(tiny_target, draft), "temperature", [0, 0, 0])))
    assert len(rows) == 3
    assert _decided(rows[0]) == _decided(rows[1]) == _decided(rows[2]), [_decided(r)[:2] for r in rows]


def test_the_cli_sweep_of_three_equal_settings_writes_three_equal_rows(tiny_target, tmp_path):
    out = tmp_path / "rows.json"
    done = specviz("sweep", "--target", tiny_target, "--draft", "recycle", "--temperature", "0", "0", "0",
                   "--max-new-tokens", "24", "--device", "cpu", "--dtype", "float32", "--prompt", PROMPT,
                   "--json", str(out), "--threads", "1")
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert len(rows) == 3 and _decided(rows[0]) == _decided(rows[1]) == _decided(rows[2])
    assert "rose with the setting" not in done.stdout and "fell as the setting rose" not in done.stdout


def test_the_apps_sweep_steps_give_equal_rows_and_keep_the_visitors_stores(tiny_target):
    from specviz.drafters import SuffixHistory
    from specviz.ui.serve import visitors
    from specviz.ui.tabs.sweep_steps import sweep_steps

    token = visitors.JOB_SESSION.set("sweep-visitor")
    try:
        history, table = visitors.visitor_history(), visitors.visitor_table()
        history.add([7, 8, 9, 10, 11, 12])
        before_history, before_table = [list(s) for s in history.sequences], table.snapshot()
        requests = sweep_requests(_base(tiny_target, "recycle"), "temperature", [0, 0, 0])
        steps = sweep_steps(requests, lambda *a, **k: None)
        rows = [step.row for step in steps if step.row is not None]
        assert len(rows) == 3 and _decided(rows[0]) == _decided(rows[1]) == _decided(rows[2])
        assert [list(s) for s in visitors.visitor_history().sequences] == before_history
        after = visitors.visitor_table().snapshot()
        assert all((a == b).all() if hasattr(a, "all") else a == b for a, b in zip(after, before_table))
        assert isinstance(history, SuffixHistory)
    finally:
        visitors.JOB_SESSION.reset(token)
        visitors.HISTORIES.drop("sweep-visitor")
        visitors.TABLES.drop("sweep-visitor")


def test_a_bench_call_and_a_sweep_row_start_from_one_reset(monkeypatch, tiny_target):
    """The sweep calls the bench's own reset (not a copy of it) before each row."""
    import specviz.run.bench as bench

    calls = []
    real = bench.measurement_start
    monkeypatch.setattr(bench, "measurement_start", lambda *a, **k: calls.append(a) or real(*a, **k))
    _finished_rows(sweep(sweep_requests(_base(tiny_target, "recycle"), "temperature", [0, 0])))
    assert len(calls) == 2
