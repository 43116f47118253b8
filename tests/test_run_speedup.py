"""The Run tab's measured speedup is one you can trust: plain decoding is timed three
times after the warm-up, the summary shows the speedup with its range, the same settings run five
times in one session give ranges that overlap, and a baseline a run contradicts is not reused."""

from __future__ import annotations

import re

import pytest

from specviz.figures.speedup import PlainBaseline
from specviz.figures.trace import trace_to_dict
from specviz.ui.tabs import run_stream
from specviz.ui.serve.settings import EXAMPLES
from specviz.ui.serve.state import REMEASURE_NOTE, RunState

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: "| measured speedup | **1.12× (1.05–1.19×)** faster …" (the range is absent when there is none).
SPEEDUP = re.compile(r"\| measured speedup \| \*\*([0-9.]+)×(?: \(([0-9.]+)–([0-9.]+)×\))?")


def _args(**overrides):
    values = dict(prompt=EXAMPLES[0][0], target_id="smollm2-135m-instruct", drafter_kind="ngram", draft_model="",
                  early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=40, seed=0,
                  chat=True, device="cpu", dtype="float32")
    values.update(overrides)
    return values


def _run(baselines: dict) -> tuple[str, dict, RunState, list[str]]:
    """One /run as the page does it: (final summary, baselines after it, the run's state, every status line)."""
    updates = list(run_stream.run_demo(**_args(), baselines=baselines, progress=lambda *a, **k: None, public=False))
    lines = [u[1] for u in updates if isinstance(u[1], str)]
    final = dict(zip(run_stream.RUN_OUTPUTS, updates[-1]))
    summary, baselines, state = final["summary"], final["baselines"], final["state"]
    return summary, baselines, state, lines


def _shown_range(summary: str) -> tuple[float, float]:
    match = SPEEDUP.search(summary)
    assert match, summary
    value, low, high = (float(x) if x else None for x in match.groups())
    return (low, high) if low is not None else (value, value)


def test_five_runs_of_the_same_settings_show_overlapping_speedup_ranges():
    from specviz.models import loading as models

    models.prepare_offline("smollm2-135m-instruct")
    baselines: dict = {}
    ranges, states = [], []
    for i in range(5):
        summary, baselines, state, lines = _run(baselines)
        assert summary.startswith("**Done**"), summary
        if i == 0:
            # Loading (when no earlier test of this process loaded the models) or warm-up first, then
            # three timed plain runs, their progress on the page.
            assert lines[0].startswith(("Loading the models", "Preparing")), lines[:3]
            assert any("sample 3 of 3" in line for line in lines), lines
            assert "the median of 3 timed plain runs" in summary
        ranges.append(_shown_range(summary))
        states.append(state)
    lows, highs = zip(*ranges)
    assert max(lows) <= min(highs), f"the shown speedup ranges do not overlap: {ranges}"
    # The saved trace keeps every sample of the baseline, so a loaded trace shows the same range.
    state = states[-1]
    loaded = RunState.from_trace(trace_to_dict(state.rounds, **state.meta))
    assert loaded.baseline == state.baseline and loaded.baseline.samples == 3


def test_a_baseline_the_run_contradicts_is_dropped_and_the_summary_says_so():
    from specviz.models import loading as models

    models.prepare_offline("smollm2-135m-instruct")
    _, _, state, _ = _run({})
    assert state.finished
    # A baseline timed while the machine was busy: ten times slower a step than this run's.
    fair = state.baseline
    slow = PlainBaseline(fair.step_ms * 10, fair.tokens_per_s / 10)
    state.baseline, state.remeasure = slow, False
    kept = run_stream.drop_if_contradicted(state, {"these settings": slow, "other settings": fair})
    assert kept == {"other settings": fair}
    assert state.remeasure
    assert REMEASURE_NOTE in state.view(None, "**Done**", True).summary
