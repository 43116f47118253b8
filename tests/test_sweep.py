"""Experiments (specviz.run.sweep and ``python -m specviz sweep``) on tiny random models saved to a
temporary directory (the pattern of tests/test_cli.py): each setting gives one row with the
setting and the run's figures, progress comes round by round, and the CLI writes one JSON row per
setting."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import bpe_tokenizer
from test_cli import _save_tiny, specviz

from specviz.run.request import RequestError, validate_request
from specviz.run.sweep import CSV_FIELDS, sweep, sweep_requests, write_csv


def _finished_rows(steps) -> list[dict]:
    """The finished rows of a sweep, in order (runs it to the end)."""
    return [step.row for step in steps if step.row is not None]

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REQUIRED = ("temperature", "k", "draft", "alpha", "acceptance_rate", "tokens_per_pass", "speedup",
            "theoretical_speedup")
PROMPT = "the quick brown fox the quick brown fox the quick"


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("sweep")
    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(root / "target", tok, seed=0)


def _base(target: str, **changes):
    values = dict(prompt=PROMPT, target=target, draft="ngram", k=3, temperature=0.0, top_k=0, top_p=1.0,
                  max_new_tokens=8, seed=0, device="cpu", dtype="float32")
    values.update(changes)
    return validate_request(**values)


def test_sweep_requests_vary_one_setting_and_validate_it(tiny_target):
    requests = sweep_requests(_base(tiny_target), "temperature", [0, "0.7", 1.5])
    assert [r.sampling.temperature for r in requests] == [0.0, 0.7, 1.5]
    assert {r.k for r in requests} == {3} and {r.draft for r in requests} == {"ngram"}
    with pytest.raises(RequestError, match="temperature must be a number"):
        sweep_requests(_base(tiny_target), "temperature", [0, "hot"])
    with pytest.raises(RequestError, match="a sweep varies one of"):
        sweep_requests(_base(tiny_target), "top_p", [0.5])
    with pytest.raises(RequestError, match="at least one"):
        sweep_requests(_base(tiny_target), "k", [])


@pytest.mark.parametrize("setting, value, typed", [("temperature", 0.7, "0.7"), ("k", 5, "5"),
                                                   ("draft", "early-exit:1", "early-exit:1")])
def test_a_varied_request_equals_the_request_validated_with_that_setting(tiny_target, setting, value, typed):
    base = _base(tiny_target, branches=2, tree_nodes=8)
    expected = _base(tiny_target, branches=2, tree_nodes=8, **{setting: value})
    assert sweep_requests(base, setting, [typed]) == [expected]
    with pytest.raises(RequestError, match="tree nodes"):  # K above the held node budget, as validate_request says
        sweep_requests(base, "k", [9])


def test_temperature_sweep_gives_one_row_per_setting_with_the_figures(tiny_target):
    steps = list(sweep(sweep_requests(_base(tiny_target), "temperature", [0.0, 1.0])))
    rows = [s.row for s in steps if s.row is not None]
    assert [r["temperature"] for r in rows] == [0.0, 1.0]
    for row in rows:
        for key in REQUIRED:
            assert key in row, key
        assert row["emitted"] == 8 and row["k"] == 3 and row["draft"] == "ngram"
        assert row["speedup"] is not None and row["plain_tokens_per_s"] > 0
    # Progress comes round by round: speculative, then the baseline, then the row.
    phases = [s.phase for s in steps if s.index == 0]
    assert phases[0] == "speculative" and "plain" in phases and phases[-1] == "done"
    assert steps[0].total == 2 and "setting 1/2" in steps[0].message


def test_k_and_drafter_sweeps(tiny_target):
    rows = _finished_rows(sweep(sweep_requests(_base(tiny_target), "k", [1, 2])))
    assert [r["k"] for r in rows] == [1, 2]
    rows = _finished_rows(sweep(sweep_requests(_base(tiny_target), "draft", ["ngram", "none"])))
    assert [r["draft"] for r in rows] == ["ngram", "none"]
    assert rows[1]["alpha"] is None and rows[1]["speedup"] is None  # plain decoding is the yardstick itself


def test_closing_the_sweep_stops_it(tiny_target):
    """The app's Stop closes the generator: nothing runs after the round that was in progress."""
    steps = sweep(sweep_requests(_base(tiny_target), "temperature", [0.0, 1.0, 1.5]))
    first = next(steps)
    steps.close()
    assert first.index == 0 and first.phase == "speculative"
    with pytest.raises(StopIteration):
        next(steps)


def test_csv_has_a_header_and_one_line_per_row(tiny_target):
    rows = _finished_rows(sweep(sweep_requests(_base(tiny_target), "temperature", [0.0, 1.0])))
    table = list(csv.DictReader(io.StringIO(write_csv(rows))))
    assert len(table) == 2 and list(table[0])[: len(CSV_FIELDS)] == list(CSV_FIELDS)
    assert float(table[1]["temperature"]) == 1.0 and "count_accepted" in table[0]


def test_cli_sweep_writes_one_json_row_per_setting(tiny_target, tmp_path):
    out = tmp_path / "sweep.json"
    done = specviz("sweep", "--target", tiny_target, "--draft", "ngram", "--temperature", "0", "0.7", "1.5",
                   "--max-new-tokens", "6", "--device", "cpu", "--dtype", "float32", "--prompt", PROMPT,
                   "--json", str(out), "--threads", "1")
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [r["temperature"] for r in rows] == [0.0, 0.7, 1.5]
    for row in rows:
        assert all(key in row for key in REQUIRED)
    assert "temperature=1.5: per-token α" in done.stdout


def test_cli_sweep_over_drafters_and_a_bad_value(tiny_target, tmp_path):
    out = tmp_path / "drafts.json"
    done = specviz("sweep", "--target", tiny_target, "--draft", "ngram", "none", "--max-new-tokens", "4",
                   "--device", "cpu", "--dtype", "float32", "--prompt", PROMPT, "--json", str(out), "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert [r["draft"] for r in json.loads(out.read_text())] == ["ngram", "none"]
    bad = specviz("sweep", "--target", tiny_target, "-k", "1", "99", "--prompt", PROMPT)
    assert bad.returncode == 1 and "lookahead K must be a whole number between 1 and 16" in bad.stderr
    both = specviz("sweep", "--target", tiny_target, "-k", "1", "2", "--temperature", "0", "1", "--prompt", PROMPT)
    assert both.returncode == 1 and "one setting at a time" in both.stderr


def test_sweep_charts_plot_measured_and_theory_per_setting():
    import plotly.graph_objects as go

    from specviz.ui.draw import charts

    rows = [{"temperature": t, "alpha": a, "acceptance_rate": a / 2, "tokens_per_pass": 1 + a,
             "predicted_tokens_per_pass": 1 + a, "speedup": 0.9 + a, "theoretical_speedup": 1 + a}
            for t, a in [(0.0, 0.8), (1.0, 0.4)]]
    for metric in ("alpha", "tokens_per_pass", "speedup"):
        fig = go.Figure(charts.sweep_figure(rows, "temperature", metric).to_dict())
        assert list(fig.data[0].x) == [0.0, 1.0] and len(fig.data) == 2
    assert "waiting" in str(charts.sweep_figure([], "k", "speedup").to_dict())
    with pytest.raises(ValueError):
        charts.sweep_figure(rows, "temperature", "nope")


def test_alpha_trend_says_what_was_measured():
    from specviz.run.sweep import AlphaTrend, alpha_trend

    rows = [{"temperature": 0.0, "alpha": 0.8, "tested": 50}, {"temperature": 1.5, "alpha": 0.3, "tested": 40}]
    trend = alpha_trend(rows, "temperature")
    assert trend.direction == "falls" and trend.sentence.startswith("Per-token α fell as the setting rose")
    rows[0]["alpha"], rows[1]["alpha"] = 0.3, 0.9
    trend = alpha_trend(rows, "temperature")
    assert trend.direction == "rises" and "rose with the setting" in trend.sentence
    rows.append({"temperature": 2.0, "alpha": 0.1, "tested": 3})
    trend = alpha_trend(rows, "temperature")
    assert trend.direction == "stays"
    assert "no trend is claimed" in trend.sentence
    assert "fewer than 20 drafts were tested at 2.0" in trend.sentence
    unknown = alpha_trend([{"k": 1, "alpha": None, "tested": 0}, {"k": 2, "alpha": 0.5, "tested": 9}], "k")
    assert unknown.direction is None and "could not be compared" in unknown.sentence
    assert alpha_trend(rows[:1], "temperature") == AlphaTrend(None, "")


TREE_PROMPT = "the cat sat on the mat. the dog ran to the fox. the cat ran to the dog. the"


def _is_tree(round_) -> bool:
    """True when a round's draft branched (some node's parent is not the node before it)."""
    return any(d.parent != i - 1 for i, d in enumerate(round_.drafted))


def test_sweep_keeps_the_tree_settings_and_records_them(tiny_target):
    base = _base(tiny_target, prompt=TREE_PROMPT, branches=3, tree_nodes=12, max_new_tokens=12)
    requests = sweep_requests(base, "k", [2, 4])
    assert {(r.branches, r.tree_nodes) for r in requests} == {(3, 12)}
    steps = list(sweep(requests))
    rows = [s.row for s in steps if s.row is not None]
    assert [(r["k"], r["branches"], r["tree_nodes"]) for r in rows] == [(2, 3, 12), (4, 3, 12)]
    runs = {id(s.run): s.run for s in steps if s.run is not None}.values()
    assert all(run.branches == 3 and run.tree_nodes == 12 for run in runs)
    assert any(_is_tree(r) for run in runs for r in run.rounds), "no round drafted a tree"
    chains = _finished_rows(sweep(sweep_requests(_base(tiny_target, prompt=TREE_PROMPT, max_new_tokens=12), "k", [2])))
    assert chains[0]["branches"] == 1 and chains[0]["tree_nodes"] is None
    table = list(csv.DictReader(io.StringIO(write_csv(rows))))
    assert [(t["branches"], t["tree_nodes"]) for t in table] == [("3", "12"), ("3", "12")]


def test_sweep_steps_carry_the_stop_ids(tiny_target):
    from specviz.run.runner import prepare_run

    stop_ids = prepare_run(_base(tiny_target)).stop_ids
    steps = list(sweep(sweep_requests(_base(tiny_target), "draft", ["ngram", "none"])))
    assert stop_ids and all(s.stop_ids == stop_ids for s in steps)


def test_sweep_stops_at_its_time_cap_with_the_rows_it_finished(tiny_target):
    requests = sweep_requests(_base(tiny_target), "temperature", [0.0, 1.0, 1.5])
    steps = list(sweep(requests, max_run_s=1e-6))
    assert [s.phase for s in steps] == ["stopped"] and not _finished_rows(steps)
    assert steps[-1].message.startswith("Stopped at the time limit of 1e-06 s: 0 of 3 settings finished")
    # A cap the first setting fits in (a tiny model, 8 tokens) and the second's loading passes:
    # the finished row is kept and nothing runs after the cap.
    import time

    from specviz.run.runner import prepare_run

    cap = 3.0

    def slow_second(request, report):
        if request is requests[1]:
            time.sleep(cap)
        return prepare_run(request, report)

    steps = list(sweep(requests, prepare=slow_second, max_run_s=cap))
    assert [s.phase for s in steps][-2:] == ["done", "stopped"] and len(_finished_rows(steps)) == 1
    assert {s.index for s in steps[:-1]} == {0} and "1 of 3 settings finished" in steps[-1].message


def test_cli_sweep_runs_trees_and_says_so(tiny_target, tmp_path):
    out = tmp_path / "tree.json"
    done = specviz("sweep", "--target", tiny_target, "--draft", "ngram", "-k", "2", "4", "--branches", "3",
                   "--tree-nodes", "12", "--max-new-tokens", "8", "--device", "cpu", "--dtype", "float32",
                   "--prompt", TREE_PROMPT, "--json", str(out), "--threads", "1")
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [(r["k"], r["branches"], r["tree_nodes"]) for r in rows] == [(2, 3, 12), (4, 3, 12)]
    assert "k=2 (tree B=3, N=12): per-token α" in done.stdout


def test_cli_sweep_refuses_trees_without_a_drafter(tiny_target):
    done = specviz("sweep", "--target", tiny_target, "--draft", "none", "-k", "2", "4", "--branches", "3",
                   "--prompt", PROMPT)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert ("--branches > 1 needs a drafter that drafts trees (ngram, suffix, a draft model, int8, early-exit:N, "
            "eagle[:DIR], lookup+eagle[:DIR], recycle, lookup+recycle)") in done.stderr


def test_no_trend_is_claimed_where_the_data_cannot_carry_one():
    """α 0.81, 0.75, 0.80, 0.73 over four temperatures goes down on the whole, but back up by 0.05 on
    the way: a change of 0.08 is not a trend. A sweep of drafters has no order at all."""
    from specviz.run.sweep import alpha_trend

    wobbly = [{"temperature": t, "alpha": a, "tested": 400} for t, a in zip((0.0, 0.5, 1.0, 1.5),
                                                                           (0.81, 0.75, 0.80, 0.73))]
    trend = alpha_trend(wobbly, "temperature")
    assert trend.direction == "stays" and "fell" not in trend.sentence and "no trend is claimed" in trend.sentence
    small = [{"k": k, "alpha": a, "tested": 30} for k, a in zip((2, 4, 8), (0.62, 0.58, 0.55))]
    assert alpha_trend(small, "k").direction == "stays"  # monotone, but 0.07 over 30 tested drafts is noise
    drafters = [{"draft": d, "alpha": a, "tested": 200} for d, a in zip(("ngram", "int8", "early-exit:4"),
                                                                        (0.9, 0.6, 0.1))]
    unordered = alpha_trend(drafters, "draft")
    assert unordered.direction is None and "fell" not in unordered.sentence and "no order" in unordered.sentence
    assert "ngram: 0.90 (200 tested)" in unordered.sentence
