"""The plain baseline with its spread (specviz.figures.speedup.PlainBaseline, speedup_with_spread, the
baseline checks) on hand-built numbers, and its measurement (specviz.run.baseline) on a tiny model."""

from __future__ import annotations

import pytest
from helpers import tiny_llama

from specviz.run.runner import drain  # a step generator run to its end
from specviz.figures.analysis import analyse, health_notes
from specviz.run.baseline import MIN_SHORT_TOKENS, measure_baseline, short_sample_tokens
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig
from specviz.figures.speedup import PlainBaseline, baseline_still_valid, format_speedup, speedup_with_spread
from specviz.core.records import ACCEPTED, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.figures.analysis import analyse_generation


def spec_round(index: int, verify_ms: float = 12.0, accepted: int = 2, drafted: int = 4) -> Round:
    tokens = [DraftedToken(10 + j, "d", 1.0, 0.5, 0.5, 0.2 if j < accepted else 0.9, accepted=j < accepted,
                           tested=j <= accepted) for j in range(drafted)]
    emitted = [EmittedToken(1, "t", ACCEPTED, 0.5, index) for _ in range(accepted)]
    emitted.append(EmittedToken(2, "t", RESAMPLED if drafted else PLAIN, 0.5, index))
    return Round(index=index, drafted=tokens, n_accepted=accepted, emitted=emitted, draft_ms=8.0, draft_steps=drafted,
                 verify_ms=verify_ms, other_ms=1.0, k=drafted)


def plain_round(index: int, verify_ms: float) -> Round:
    return spec_round(index, verify_ms, accepted=0, drafted=0)


# --------------------------------------------------------------------------- the baseline's data
def test_old_baselines_and_saved_trace_dicts_still_load():
    old = PlainBaseline(step_ms=10.0, tokens_per_s=20.0)
    assert old.samples == 1 and old.scatter == 1.0 and old.covered_tokens is None
    assert old.tokens_per_s_at(500) == 20.0 and old.rate_range_at(7) == (20.0, 20.0)
    assert PlainBaseline.from_dict({"step_ms": 10.0, "tokens_per_s": 20.0}) == old
    new = PlainBaseline(10.0, 20.0, [40.0, 50.0, 60.0], [64, 32, 32], 100.0)
    assert new.sample_ms_per_token == (40.0, 50.0, 60.0)  # lists from JSON become tuples
    assert PlainBaseline.from_dict(new.to_dict()) == new
    assert PlainBaseline(**new.to_dict()) == new
    with pytest.raises(ValueError, match="malformed"):
        PlainBaseline.from_dict({"step_ms": 1.0})
    with pytest.raises(ValueError):
        PlainBaseline(10.0, 20.0, (1.0, 2.0), (5,))


def test_the_baseline_is_the_median_sample_compared_per_token():
    # Samples of 40, 50 and 200 ms per token (the last hit a busy moment), prefill 100 ms.
    b = PlainBaseline(45.0, 0.0, (40.0, 200.0, 50.0), (40, 32, 32), 100.0)
    assert b.scatter == pytest.approx(5.0)
    # Over a 512-token run: 1000 / (median 50 ms + 100 ms / 512).
    assert b.tokens_per_s_at(512) == pytest.approx(1e3 / (50.0 + 100.0 / 512))
    slow, fast = b.rate_range_at(512)
    assert slow == pytest.approx(1e3 / (200.0 + 100.0 / 512)) and fast == pytest.approx(1e3 / (40.0 + 100.0 / 512))
    # A run of 512 tokens at 25 ms each (prefill included): about 2× the median sample.
    value, low, high = speedup_with_spread(40.0, 512, b)
    assert value == pytest.approx(40.0 / b.tokens_per_s_at(512))
    assert low == pytest.approx(40.0 / fast) and high == pytest.approx(40.0 / slow)
    assert low < value < high


def test_the_runs_own_pass_to_pass_variation_widens_the_range():
    b = PlainBaseline(10.0, 20.0)
    even = [spec_round(i) for i in range(10)]
    assert speedup_with_spread(30.0, 30, b, even) == pytest.approx((1.5, 1.5, 1.5))
    uneven = [spec_round(i, 12.0 if i % 2 else 120.0) for i in range(10)]
    value, low, high = speedup_with_spread(30.0, 30, b, uneven)
    assert value == pytest.approx(1.5) and low < 1.4 and high > 1.6
    # Too few rounds to say anything: no range.
    assert speedup_with_spread(30.0, 9, b, uneven[:3]) == pytest.approx((1.5, 1.5, 1.5))
    assert speedup_with_spread(30.0, 9, None) is None


def test_one_way_to_write_a_speedup():
    assert format_speedup(1.1234, 1.05, 1.19) == "1.12× (1.05–1.19×)"
    assert format_speedup(1.1234) == "1.12×"
    assert format_speedup(1.1234, 1.121, 1.124) == "1.12×"


def test_the_analysis_carries_the_range_and_scalars_export_it():
    b = PlainBaseline(10.0, 0.0, (40.0, 60.0, 50.0), (30, 30, 30), 0.0)
    rounds = [spec_round(i) for i in range(10)]
    a = analyse(rounds, 4, wall_s=30 * 0.025, baseline=b)
    assert a.speedup == pytest.approx(2.0)  # 25 ms per token against the median 50
    assert a.speedup_low == pytest.approx(40.0 / 25.0) and a.speedup_high == pytest.approx(60.0 / 25.0)
    out = a.scalars()
    assert out["speedup_low"] == a.speedup_low and out["speedup_high"] == a.speedup_high
    assert out["plain_samples"] == 3 and out["plain_tokens"] == 30
    assert a.speedup_text == out["speedup_text"] == "2.00× (1.60–2.40×)"
    assert not hasattr(b, "speedup_text")


# --------------------------------------------------------------------------- checks against the run
def test_a_baseline_timed_during_a_busy_moment_is_called_out():
    # The run's own plain-shaped passes take 74 ms; the baseline's step took 192 ms.
    rounds = [spec_round(i, 80.0) for i in range(6)] + [plain_round(i, 74.0) for i in range(6, 10)]
    slow = PlainBaseline(192.0, 5.0)
    notes = health_notes(analyse(rounds, 4, wall_s=1.0, baseline=slow))
    assert any("192 ms a step" in n and "2.6× slower" in n and "74 ms" in n and "overstated" in n
               for n in notes), notes
    assert not baseline_still_valid(slow, rounds)
    fair = PlainBaseline(70.0, 5.0)
    assert baseline_still_valid(fair, rounds)
    assert not any("plain baseline" in n for n in health_notes(analyse(rounds, 4, wall_s=1.0, baseline=fair)))
    fast = PlainBaseline(30.0, 5.0)
    assert any("faster than this run's own plain steps" in n and "understated" in n
               for n in health_notes(analyse(rounds, 4, wall_s=1.0, baseline=fast)))
    assert not baseline_still_valid(fast, rounds)
    assert not baseline_still_valid(None, rounds)


def test_without_plain_shaped_passes_the_verify_passes_bound_the_baseline():
    # A verify pass (K + 1 positions) cannot be much faster than one plain step.
    rounds = [spec_round(i, 60.0) for i in range(6)]
    assert not baseline_still_valid(PlainBaseline(192.0, 5.0), rounds)
    assert baseline_still_valid(PlainBaseline(50.0, 5.0), rounds)
    notes = health_notes(analyse(rounds, 4, wall_s=1.0, baseline=PlainBaseline(192.0, 5.0)))
    assert any("median verify pass (60 ms)" in n for n in notes), notes


def test_scattered_samples_and_a_short_baseline_get_a_note():
    rounds = [spec_round(i, 12.0) for i in range(6)]
    scattered = PlainBaseline(12.0, 0.0, (40.0, 100.0, 45.0), (12, 12, 12), 0.0)
    a = analyse(rounds, 4, wall_s=1.0, baseline=scattered)
    notes = health_notes(a)
    assert any("scatter widely" in n and "2.5×" in n for n in notes), notes
    assert any("end-of-text after 12 tokens" in n and "emitted 18" in n for n in notes), notes
    assert not baseline_still_valid(scattered, rounds)


# --------------------------------------------------------------------------- measuring it
@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, vocab_size=64, max_position_embeddings=1024)


def test_measure_baseline_times_one_full_and_shorter_plain_runs(target):
    made = []

    def build():
        made.append(Generation(target, [1, 5, 9, 2], None, sampling=SamplingConfig(0.0), max_new_tokens=160))
        return made[-1]

    steps = measure_baseline(build, samples=3)
    progress = []
    with pytest.raises(StopIteration) as stop:
        while True:
            progress.append(next(steps))
    baseline = stop.value.value
    assert len(made) == 3 and progress and all("Timing plain decoding" in p for p in progress)
    assert any("sample 3 of 3" in p for p in progress)
    assert len(made[0].tokens) == 160
    short = short_sample_tokens(160)
    assert short == 40 and all(short <= len(g.tokens) < 160 for g in made[1:])
    assert baseline.samples == 3 and baseline.sample_tokens[0] == 160 and baseline.covered_tokens == 160
    assert all(ms > 0 for ms in baseline.sample_ms_per_token)
    assert baseline.step_ms > 0 and baseline.tokens_per_s > 0
    # The first sample's per-token time is its own: (generation time - prefill) / tokens.
    first = made[0]
    assert baseline.sample_ms_per_token[0] == pytest.approx((first.rounds[-1].elapsed_s * 1e3 - first.prefill_ms) / 160)


def test_measure_baseline_short_runs_and_bad_arguments(target):
    def build():
        return Generation(target, [1, 5, 9, 2], None, sampling=SamplingConfig(0.0), max_new_tokens=12)

    baseline = drain(measure_baseline(build, samples=2))
    # A run shorter than the short-sample floor is repeated whole.
    assert short_sample_tokens(12) == 12 and baseline.sample_tokens == (12, 12) and MIN_SHORT_TOKENS == 32
    one = drain(measure_baseline(lambda: Generation(target, [1, 5], None, max_new_tokens=1), samples=2))
    assert one is None  # a one-token run has no plain step to time
    with pytest.raises(ValueError, match="samples"):
        drain(measure_baseline(build, samples=0))


def test_the_running_speedup_ends_at_the_runs_figure_and_range():
    from specviz.figures.speedup import running_speedup

    b = PlainBaseline(10.0, 0.0, (40.0, 60.0, 50.0), (30, 30, 30), 20.0)
    rounds = [spec_round(i, 12.0 if i % 3 else 60.0) for i in range(12)]
    for i, r in enumerate(rounds):
        r.elapsed_s = 0.02 + 0.07 * (i + 1)
    points = running_speedup(rounds, b)
    a = analyse(rounds, 4, wall_s=rounds[-1].elapsed_s, baseline=b)
    assert len(points) == 12
    assert points[-1]["speedup"] == pytest.approx(a.speedup)
    assert points[-1]["low"] == pytest.approx(a.speedup_low) and points[-1]["high"] == pytest.approx(a.speedup_high)
    assert all(p["low"] <= p["speedup"] <= p["high"] for p in points)
    assert running_speedup(rounds, None) == []


def test_a_measured_baseline_gives_a_real_run_its_speedup_range(target):
    from specviz.drafters import PromptLookupDrafter

    prompt = [1, 5, 9, 2, 5, 9, 2, 5, 9, 2, 5]
    greedy = SamplingConfig(0.0)

    baseline = drain(measure_baseline(lambda: Generation(target, prompt, None, sampling=greedy, max_new_tokens=48)))
    spec = Generation(target, prompt, PromptLookupDrafter(64), k=4, sampling=greedy, max_new_tokens=48).run()
    a = analyse_generation(spec, baseline)
    assert a.plain_samples == 3 and a.plain_tokens == 48
    assert a.speedup_low <= a.speedup <= a.speedup_high
    assert a.speedup == pytest.approx(spec.tokens_per_s / baseline.tokens_per_s_at(len(spec.tokens)))
