"""A sentence from the first second: the status line says what the run is
doing and for how long (loading, warming up, timing plain decoding n/N), and a second visitor
with the same settings reuses the plain baseline this server measured, unless it is stale."""

from __future__ import annotations

import time

import pytest
from test_baseline import spec_round

from specviz.run.baseline import BaselineStore
from specviz.figures.speedup import PlainBaseline


def test_the_store_keeps_timing_by_digest_and_forgets_stale_or_contradicted_ones():
    now = [0.0]
    store = BaselineStore(stale_after_s=600.0, clock=lambda: now[0])
    base = PlainBaseline(50.0, 20.0)
    key = "('smollm2', 'cpu', 'float32', [1, 2, 3], 'a prompt a visitor typed')"
    store.put(key, base)
    assert "a prompt a visitor typed" not in repr(store._entries)  # only a digest of the key is held
    now[0] = 599.0
    assert store.get(key) == (base, 599.0)
    now[0] = 601.0
    assert store.get(key) is None and len(store) == 0  # stale: timed again
    store.put(key, base)
    assert store.drop(base) and store.get(key) is None


def test_while_working_says_what_is_happening_and_for_how_long():
    from specviz.ui.tabs.run_stream import while_working

    lines = []
    steps = while_working(lambda: time.sleep(1.5) or 42, lambda s: f"Loading · {s:.0f} s")
    while True:
        try:
            lines.append(next(steps))
        except StopIteration as done:
            assert done.value == 42
            break
    assert lines[0] == "Loading · 0 s" and len(lines) >= 2 and lines[-1].endswith(" 1 s")
    assert list(while_working(lambda: 1, lambda s: "never")) == []  # quick work says nothing

    def broken():
        raise ValueError("no such model")

    with pytest.raises(ValueError, match="no such model"):
        list(while_working(broken, lambda s: ""))


class _Prepared:
    """Just what measure_baseline reads of a PreparedRun, to count the plain runs it times."""

    label = "tiny ← ngram"

    def __init__(self, key):
        self.key, self.timed = key, 0

    def warm_up(self, once=False, should_end=None):
        return False


def test_a_second_visitor_reuses_the_servers_baseline(monkeypatch):
    from specviz.ui.tabs import run_stream

    measured = PlainBaseline(50.0, 20.0)

    def timed(prepared, known=None, should_end=None):
        prepared.timed += 1
        yield "Timing plain decoding (sample 1 of 3): 8/32 tokens…"
        return measured

    monkeypatch.setattr(run_stream, "baseline_key", lambda prepared: prepared.key)
    monkeypatch.setattr(run_stream, "baseline_steps", timed)
    store = BaselineStore()

    def visit(prepared, baselines):
        steps = run_stream.measure_baseline(prepared, baselines, store)
        lines = []
        while True:
            try:
                lines.append(next(steps))
            except StopIteration as done:
                return lines, done.value

    first = _Prepared("these settings")
    lines, (baseline, kept) = visit(first, {})
    assert first.timed == 1 and baseline is measured and "Timing plain decoding" in lines[-1]
    second = _Prepared("these settings")  # another visitor: an empty baselines dict of their own
    lines, (baseline, kept) = visit(second, {})
    assert second.timed == 0 and baseline is measured and kept == {"these settings": measured}
    assert "this server measured" in lines[-1]
    other = _Prepared("other settings")
    visit(other, {})
    assert other.timed == 1
    # A run that contradicts the baseline drops it for everyone.
    state = run_stream.RunState(k=4, rounds=[spec_round(i, 10.0) for i in range(6)], baseline=PlainBaseline(400.0, 2.0))
    store.put("contradicted", state.baseline)
    run_stream.drop_if_contradicted(state, {}, store)
    assert store.get("contradicted") is None and state.remeasure
