"""The health checks (specviz.diagnose.health): each one triggered by the failure it names, and quiet on a
run without it. Rounds are built by hand (no model), so each test sets exactly one failure."""

from __future__ import annotations

import pytest

from specviz.figures.analysis import analyse
from specviz.diagnose.health import (BURST_RATIO, FALLBACK_SHARE, LOOP_MIN_TOKENS, MIN_PASSES, STALL_FACTOR, burstiness,
                            check_health, counter_mismatches, find_loop)
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round

K = 4


def _round(index: int, ids: list[int], kept: int, elapsed_s: float, drafted: int = K, texts=None) -> Round:
    """A chain pass that drafted ``drafted`` tokens and kept ``kept``: emits ``ids`` (kept accepted
    tokens, then a resampled one, or a bonus after all K; a plain token when nothing was drafted)."""
    texts = texts or [f" w{i}" for i in ids]
    drafts = [DraftedToken(ids[i] if i < len(ids) else 0, "", 0.5, 0.5, 1.0, 0.1, i < kept, i <= kept)
              for i in range(drafted)]
    kinds = [ACCEPTED] * kept + ([PLAIN] if not drafted else [BONUS] if kept == drafted else [RESAMPLED])
    emitted = [EmittedToken(i, t, kind, 0.5, index) for i, t, kind in zip(ids, texts, kinds)]
    return Round(index, drafts, kept, emitted, k=K, elapsed_s=elapsed_s, draft_ms=1.0, verify_ms=10.0)


def _varied_run(passes: int = 20, kept=lambda i: i % (K + 1), seconds=lambda i: 0.1) -> list[Round]:
    """Passes whose emitted ids never repeat, kept drafts cycling 0..K, evenly timed by default."""
    rounds, next_id, elapsed = [], 100, 0.0
    for i in range(passes):
        n = kept(i)
        ids = list(range(next_id, next_id + n + 1))
        next_id += n + 1
        elapsed += seconds(i)
        rounds.append(_round(i, ids, n, elapsed))
    return rounds


def _check(rounds, name, **kwargs):
    a = analyse(rounds, K, rounds[-1].elapsed_s)
    return next(c for c in check_health(rounds, a, **kwargs).checks if c.name == name)


# --------------------------------------------------------------------------- loop
def _looping_run(kept: int) -> list[Round]:
    """Passes that emit the same 5-token phrase over and over (ids 7, 8, 9, 10, 11)."""
    phrase = [7, 8, 9, 10, 11]
    texts = [" and", " the", " sea", " and", " the"]
    rounds = []
    for i in range(12):
        ids = phrase[: kept + 1]
        rounds.append(_round(i, ids, kept, 0.1 * (i + 1), texts=texts[: kept + 1]))
    return rounds


def test_a_loop_at_high_alpha_is_found_with_its_phrase_and_what_to_try():
    check = _check(_looping_run(kept=K), "loop")
    assert check.found
    assert "loops" in check.sentence and "' and the sea and the'" in check.sentence
    assert "temperature above 0" in check.sentence
    loop = find_loop(_looping_run(kept=K))
    assert loop.period == 5 and loop.length == 60 and loop.copies == 12


def test_a_loop_at_low_alpha_or_a_varied_text_is_not_reported():
    assert not _check(_looping_run(kept=0), "loop").found  # the same repetition, α = 0: a bad model, not hidden
    assert not _check(_varied_run(), "loop").found
    assert find_loop(_varied_run()) is None


def test_a_short_repeat_is_not_a_loop():
    rounds = [_round(0, [5, 5, 5], 2, 0.1)]  # three copies but fewer than LOOP_MIN_TOKENS tokens
    assert find_loop(rounds) is None and LOOP_MIN_TOKENS > 3


# --------------------------------------------------------------------------- drafts
def test_a_drafter_that_proposed_nothing_is_found():
    rounds = [_round(i, [200 + i], 0, 0.1 * (i + 1), drafted=0) for i in range(12)]
    check = _check(rounds, "drafts")
    assert check.found and "proposed nothing in all 12 passes" in check.sentence


def test_a_model_drafter_that_fell_back_to_plain_steps_is_found_but_a_lookup_is_not():
    rounds = [_round(i, [200 + i], 0, 0.1 * (i + 1), drafted=0 if i % 4 else K) for i in range(12)]
    share = sum(1 for r in rounds if not r.drafted) / len(rounds)
    assert share > FALLBACK_SHARE and len(rounds) >= MIN_PASSES
    assert _check(rounds, "drafts", always_drafts=True).found
    assert not _check(rounds, "drafts", always_drafts=False).found  # a lookup drafts only where it matches


def test_trees_asked_for_and_never_drafted_are_a_fallback():
    check = _check(_varied_run(), "drafts", branches_asked=3)
    assert check.found and "fell back to chains" in check.sentence
    assert not _check(_varied_run(), "drafts", branches_asked=1).found


# --------------------------------------------------------------------------- counters
def test_counters_that_disagree_with_the_tokens_are_found():
    rounds = _varied_run()
    rounds[3].n_accepted += 1  # mlx-vlm #2324's kind: a count the emitted tokens do not bear out
    check = _check(rounds, "counters")
    assert check.found and "pass 4 counts" in check.sentence


def test_tokens_after_the_end_of_text_and_past_the_limit_are_found():
    rounds = _varied_run()
    eos = rounds[2].emitted[-1].id
    found = counter_mismatches(rounds, K, eos_ids=(eos,), max_new_tokens=10)
    assert any("after the end-of-text token" in f for f in found)
    assert any("against a limit of 10" in f for f in found)


def test_counters_of_a_clean_run_agree():
    rounds = _varied_run()
    last = rounds[-1].emitted[-1].id
    assert counter_mismatches(rounds, K, eos_ids=(last,), max_new_tokens=100) == []
    assert not _check(rounds, "counters", eos_ids=(last,), max_new_tokens=100).found


# --------------------------------------------------------------------------- bursts
def test_a_stream_with_stalls_is_bursty_and_says_the_time_varied():
    slow = _varied_run(kept=lambda i: 2, seconds=lambda i: 1.0 if i % 3 == 0 else 0.05)
    b = burstiness(slow)
    assert b["ratio"] > BURST_RATIO and b["time_cv"] > b["tokens_cv"]
    check = _check(slow, "bursts")
    assert check.found and "bursts" in check.sentence and "most of the spread is time" in check.sentence
    assert "longest pass took 1000 ms against a median of 50 ms" in check.sentence


def test_uneven_chunks_with_a_stall_are_bursty_and_say_the_tokens_varied():
    chunky = _varied_run(kept=lambda i: K if i % 2 else 0, seconds=lambda i: 0.35 if i % 10 == 5 else 0.1)
    b = burstiness(chunky)
    assert b["tokens_cv"] > b["time_cv"] and b["longest_s"] > STALL_FACTOR * b["median_s"]
    check = _check(chunky, "bursts")
    assert check.found and "most of the spread is the tokens per pass" in check.sentence


def test_chunks_at_an_even_pace_are_how_speculation_streams_not_a_burst():
    chunky = _varied_run(kept=lambda i: K if i % 2 else 0)  # 5 tokens, then 1, every pass 100 ms
    assert burstiness(chunky)["ratio"] > BURST_RATIO
    assert not _check(chunky, "bursts").found


def test_an_even_stream_is_not_bursty():
    even = _varied_run(kept=lambda i: 2)
    assert burstiness(even)["ratio"] == pytest.approx(1.0)
    assert not _check(even, "bursts").found


# --------------------------------------------------------------------------- all of them
def test_a_healthy_run_finds_nothing_and_its_json_says_ok():
    rounds = _varied_run(kept=lambda i: 2 + i % 2)
    a = analyse(rounds, K, rounds[-1].elapsed_s)
    health = check_health(rounds, a, eos_ids=(), max_new_tokens=200)
    data = health.to_dict()
    assert data["ok"] is True and [c["name"] for c in data["checks"]] == ["loop", "drafts", "counters", "bursts"]
    assert not health.found
