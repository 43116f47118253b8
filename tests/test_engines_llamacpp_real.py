"""The llama.cpp reader against what a real llama.cpp printed: b11549, in process through xllamacpp,
serving the offline Qwen2.5-Coder 0.5B → 1.5B pair (tests/fixtures/engines/README.md says how they
were recorded, with scripts/record_llamacpp.py). Each expected figure comes from the engine's own
per-request timings recorded beside the log, never from the reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.engine_logs import guess_engine, normalise as nz, read_engine_file, writers

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "engines"


def _read(name: str, engine: str | None = None):
    return read_engine_file((FIXTURES / name).read_text(encoding="utf-8"), name, engine)


def _figure(run, name):
    return next(f.value for f in run.figures if f.name == name)


def test_a_log_of_27_requests_is_read_in_full_not_as_its_last_request():
    expected = json.loads((FIXTURES / "llamacpp_b11549_27_requests.expected.json").read_text())
    run = _read("llamacpp_b11549_27_requests.log")
    assert expected["requests"] == 27 == _figure(run, "requests in the log")
    # the responses' own timings, summed: 1197 of 1848, not the last request's 29 of 32
    assert _figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(expected["accepted"] / expected["drafted"])
    assert expected["accepted"] == sum(r["accepted"] for r in expected["per_request"])
    assert any("27 requests" in note and "the last request alone: 29 of 32" in note for note in run.notes)


def test_mean_len_gives_the_verify_passes():
    """b11549 spells it ``mean len``; each request's steps are recovered from it, and their sum lies
    between the passes the timings give (predicted − accepted − 1, which also counts a last pass that
    drafted nothing) and that less one pass per request."""
    expected = json.loads((FIXTURES / "llamacpp_b11549_27_requests.expected.json").read_text())
    run = _read("llamacpp_b11549_27_requests.log")
    all_passes = sum(r["predicted_n"] - r["accepted"] - 1 for r in expected["per_request"])
    assert all_passes - 27 <= run.passes <= all_passes
    assert not any("cannot be recovered" in note for note in run.notes)
    assert _figure(run, nz.TOKENS_PER_PASS) == pytest.approx(1 + 1197 / run.passes)


def test_the_trace_levels_statistics_and_acc_per_pos_lines_are_read_beside_draft_acceptance():
    """At -lv 4 the statistics line's #gen drafts is the exact step count (97), and the per-position
    counts it gives are the /metrics scrape's of the same four requests."""
    run = _read("llamacpp_b11549_trace.log")
    metrics = _read("llamacpp_b11549_metrics.prom")
    assert run.passes == metrics.passes == 97
    assert run.accepted_by_position == metrics.accepted_by_position == (61, 43, 32, 28)
    assert any("statistics line agrees" in note for note in run.notes)


def test_metrics_are_read_without_naming_the_engine_and_match_the_timings():
    text = (FIXTURES / "llamacpp_b11549_metrics.prom").read_text()
    expected = json.loads((FIXTURES / "llamacpp_b11549_metrics.expected.json").read_text())
    assert guess_engine(text) == "llamacpp"
    for engine in (None, "llamacpp"):
        run = _read("llamacpp_b11549_metrics.prom", engine)
        assert _figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(expected["sums"]["draft_n_accepted"]
                                                                 / expected["sums"]["draft_n"])
        assert run.passes <= expected["sums"]["verify_passes_derived"] and run.cumulative


def test_a_response_and_its_stream_give_the_passes_from_the_timings():
    for name in ("llamacpp_b11549_completion.json", "llamacpp_b11549_stream.sse"):
        text = (FIXTURES / name).read_text()
        timings = json.loads(next(line[6:] for line in reversed(text.splitlines()) if '"timings"' in line)
                             if name.endswith(".sse") else text)["timings"]
        run = _read(name)
        assert run.passes == timings["predicted_n"] - timings["draft_n_accepted"] - 1
        assert _figure(run, nz.ACCEPTANCE_RATE) == pytest.approx(timings["draft_n_accepted"] / timings["draft_n"])


def test_export_writes_the_lines_this_llama_cpp_prints():
    """specviz's export of a run is in the exact spelling of the real trace log, and reads back."""
    from specviz.core.records import DraftedToken, EmittedToken, Round

    def drafted(accepted):
        return DraftedToken(1, "a", 0.5, 0.5, 1.0, 0.1, accepted, True)

    rounds = [Round(i, drafted=[drafted(True), drafted(True), drafted(a), drafted(False)], n_accepted=2 + a,
                    emitted=[EmittedToken(1, "a", "accepted", 0.5, i)] * (3 + a), k=4) for i, a in enumerate((1, 0, 1))]
    text = writers.write("llamacpp", rounds, {"wall_s": 1.0, "prefill_ms": 100.0})
    real = (FIXTURES / "llamacpp_b11549_trace.log").read_text().splitlines()
    shape = lambda line: line.split("| task ")[1].split("=")[0].split("|")[1].strip() if "| task " in line else ""
    ours = {shape(line) for line in text.splitlines() if "| task " in line}
    assert ours <= {shape(line) for line in real} and {"draft acceptance", "acc per pos", "eval time"} <= ours
    line = next(x for x in text.splitlines() if "draft acceptance" in x)
    assert line.split("I ", 1)[1] == "slot print_timing: id  0 | task 0 | draft acceptance = 0.66667 (    8 accepted /    12 generated), mean len =  3.67"
    back = read_engine_file(text, "export.log")
    assert back.passes == 3 and back.accepted_by_position == (3, 3, 2, 0)


def test_a_request_that_drafted_nothing_says_speculation_never_ran():
    doc = json.loads((FIXTURES / "llamacpp_b11549_completion.json").read_text())
    doc["timings"].update(draft_n=0, draft_n_accepted=0)
    run = read_engine_file(json.dumps(doc), "x.json")
    assert any(note.startswith("Speculation never ran") and "--spec-type draft-simple" in note for note in run.notes)
    assert not any("never ran" in note for note in _read("llamacpp_b11549_completion.json").notes)


def test_counters_that_cannot_all_hold_are_flagged():
    """The readers refuse what one field shows is impossible; a run whose fields disagree only in
    combination (here: per-position counts from one scrape beside the pass count of another) is
    shown with a note saying so."""
    from dataclasses import replace

    from specviz.engine_logs import _held

    run = _read("llamacpp_b11549_metrics.prom")
    assert _held(run) is run  # a real scrape holds together
    pasted = _held(replace(run, passes=20))
    assert any(note.startswith("These counters cannot all hold") and "61 times in 20 passes" in note
               for note in pasted.notes), pasted.notes
