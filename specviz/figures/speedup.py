"""The measured speedup against plain decoding: the plain baseline it is divided by, its range,
how every front-end writes it, and when it cannot be trusted. :mod:`specviz.figures.analysis` reads these
for a run's figures (``speedup``, ``speedup_low``/``speedup_high``, ``plain_*``); the page, the
CLI, the bench and the sweeps write the figure and its doubt with them. Nothing here imports
torch or runs a model.

* :class:`PlainBaseline`: plain decoding of the same target, prompt and settings, measured in the
  same process, as one or more samples (the yardstick of c, v and the speedup).
* ``speedup`` = speculative tokens/s ÷ plain tokens/s (both measured, prefill included), the
  plain rate taken over as many tokens as the run emitted (:meth:`PlainBaseline.tokens_per_s_at`);
  its range from the slowest and fastest plain run and the run's own pass-to-pass variation
  (:func:`speedup_with_spread`), written ``1.12× (1.05–1.19×)`` (:func:`format_speedup`), and as
  it stood after each pass (:func:`running_speedup`); the race of the two lanes
  (:func:`race_clock`).
* When it is not trusted: a baseline contradicted by the run's own timings
  (:func:`baseline_disagreement`, :func:`baseline_still_valid`), or scattered samples
  (:func:`speedup_doubt`); a sweep's rows whose baselines disagree (:func:`speedup_doubts`). A
  doubted speedup is written in words only (:func:`speedup_shown`, :data:`NOT_MEASURABLE`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specviz.core.records import Round

__all__ = [
    "BASELINE_DISAGREES",
    "BASELINE_SCATTER",
    "NOT_MEASURABLE",
    "decode_tokens_per_s",
    "PlainBaseline",
    "baseline_disagreement",
    "baseline_still_valid",
    "format_speedup",
    "measured_speedup",
    "own_plain_steps",
    "pass_times",
    "race_clock",
    "running_speedup",
    "speedup_doubt",
    "speedup_doubts",
    "speedup_shown",
    "speedup_with_spread",
]


def pass_times(rounds: list[Round]) -> list[float]:
    """``verify_ms`` of the rounds that ran a target pass of their own: all but a first round that
    drafted nothing, whose token came from the prefill's pass (``Round.root_from_prefill``)."""
    return [r.verify_ms for r in rounds if r.drafted or not r.root_from_prefill]


def own_plain_steps(rounds: list[Round]) -> list[float]:
    """``verify_ms`` of the run's plain-shaped passes: rounds that drafted nothing and ran a pass of
    their own. Each is one target forward over one position plus sampling: a plain step."""
    return [r.verify_ms for r in rounds if not r.drafted and not r.root_from_prefill and r.verify_ms > 0]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class PlainBaseline:
    """Plain decoding of the target: the yardstick of c, v and the speedup.

    A baseline holds one or more *samples*, each one plain run of the same target, prompt and
    settings. One sample is a single draw from a noisy clock: on a shared machine the same plain
    run took 192 ms/token once and 53–69 ms/token minutes later, so the speedup divides by the
    median of several samples and carries their range (:func:`speedup_with_spread`).

    Attributes:
        step_ms: one plain decoding step (ms): the mean ``verify_ms`` of a plain run's rounds,
            the median of that over the samples. Prefill is not a step and is left out, and so is
            the first round, whose token came from the prefill's pass (``Round.root_from_prefill``).
        tokens_per_s: plain decoding's rate (tokens/s, prefill included) over ``sample_tokens[0]``
            tokens, from the median per-token time; for a baseline built from a rate alone (older
            code and saved traces), that measured rate.
        sample_ms_per_token: per sample, its decoding time per token (ms/token, prefill excluded):
            (generation time − prefill) ÷ tokens, a shorter sample's scaled to the first one's
            length (:func:`specviz.run.baseline.measure_baseline`). Empty for a baseline built from a
            rate alone.
        sample_tokens: per sample, the tokens it covered (a plain run stops at end-of-text).
        prefill_ms: the prompt's prefill (ms, median over the samples); added back once per run
            when the baseline's rate is taken over some number of tokens (:meth:`tokens_per_s_at`).
    """

    step_ms: float
    tokens_per_s: float
    sample_ms_per_token: tuple[float, ...] = ()
    sample_tokens: tuple[int, ...] = ()
    prefill_ms: float = 0.0

    def __post_init__(self) -> None:
        # Saved traces give lists; a frozen dataclass keeps tuples (hashable, not shared).
        object.__setattr__(self, "sample_ms_per_token", tuple(float(x) for x in self.sample_ms_per_token))
        object.__setattr__(self, "sample_tokens", tuple(int(x) for x in self.sample_tokens))
        if len(self.sample_ms_per_token) != len(self.sample_tokens):
            raise ValueError("a plain baseline needs one token count per sample")

    @classmethod
    def from_rounds(cls, rounds: list[Round], tokens_per_s: float) -> PlainBaseline | None:
        """The baseline of a plain run's rounds, or None when there are none (or no time passed).

        Raises:
            ValueError: if a round drafted something (that is not a plain run).
        """
        if any(r.drafted for r in rounds):
            raise ValueError("a plain baseline needs a plain run (rounds with nothing drafted)")
        steps = pass_times(rounds)
        if not steps:
            return None
        step_ms = sum(steps) / len(steps)
        return cls(step_ms, tokens_per_s) if step_ms > 0 and tokens_per_s > 0 else None

    @classmethod
    def from_dict(cls, data: dict) -> PlainBaseline:
        """A baseline from :meth:`to_dict`'s data, or from the ``{"step_ms", "tokens_per_s"}``
        dict that traces saved by older versions hold.

        Raises:
            ValueError: if a field is missing or not a number.
        """
        try:
            return cls(float(data["step_ms"]), float(data["tokens_per_s"]),
                       tuple(data.get("sample_ms_per_token") or ()), tuple(data.get("sample_tokens") or ()),
                       float(data.get("prefill_ms") or 0.0))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"the plain baseline is malformed: {err}") from None

    def to_dict(self) -> dict:
        """Plain JSON-ready data (what a saved trace stores); :meth:`from_dict` reads it back."""
        return {"step_ms": self.step_ms, "tokens_per_s": self.tokens_per_s,
                "sample_ms_per_token": list(self.sample_ms_per_token), "sample_tokens": list(self.sample_tokens),
                "prefill_ms": self.prefill_ms}

    @property
    def samples(self) -> int:
        """How many plain runs were timed (1 for a baseline built from a rate alone)."""
        return max(1, len(self.sample_ms_per_token))

    @property
    def covered_tokens(self) -> int | None:
        """Tokens the longest sample covered, None when unknown (a baseline from a rate alone)."""
        return max(self.sample_tokens) if self.sample_tokens else None

    @property
    def scatter(self) -> float:
        """Slowest ÷ fastest sample's time per token (1.0: the samples agree, or only one)."""
        times = self.sample_ms_per_token
        return max(times) / min(times) if len(times) > 1 and min(times) > 0 else 1.0

    def _rate(self, ms_per_token: float, tokens: int) -> float:
        return 1e3 / (ms_per_token + self.prefill_ms / max(tokens, 1))

    def plain_clock(self) -> tuple[float, float]:
        """Plain decoding's clock as every speedup counts it: ``(prefill ms, ms per token)``, so
        ``tokens`` tokens take ``prefill + tokens × ms per token`` (:meth:`tokens_per_s_at` is
        ``tokens`` ÷ that). The prefill is counted because the headline's rates are over the whole
        generation, which is what a reader waits for, and the run pays its own prefill too (the
        race lanes start with both, :func:`race_clock`). The median sample's ms per token; a
        baseline from a rate alone has no prefill of its own: 1000 ÷ that rate per token."""
        if not self.sample_ms_per_token:
            return 0.0, 1e3 / self.tokens_per_s
        return self.prefill_ms, statistics.median(self.sample_ms_per_token)

    def tokens_per_s_at(self, tokens: int) -> float:
        """Plain decoding's rate over a run of ``tokens`` tokens (tokens/s, prefill included):
        1000 ÷ (median ms per token + prefill ms ÷ tokens). So a baseline that stopped at
        end-of-text after a few dozen tokens is compared per token with a longer run, its
        prefill spread over as many tokens as the run's. A baseline from a rate alone: that rate."""
        if not self.sample_ms_per_token:
            return self.tokens_per_s
        return self._rate(self.plain_clock()[1], tokens)

    def rate_range_at(self, tokens: int) -> tuple[float, float]:
        """(slowest, fastest) sample's rate over ``tokens`` tokens (tokens/s), as :meth:`tokens_per_s_at`."""
        if not self.sample_ms_per_token:
            return self.tokens_per_s, self.tokens_per_s
        return self._rate(max(self.sample_ms_per_token), tokens), self._rate(min(self.sample_ms_per_token), tokens)


def race_clock(rounds: list[Round], prefill_ms: float, baseline: PlainBaseline | None
               ) -> tuple[float, float | None, float | None]:
    """The race lanes' clock, the one the headline's speedup uses: ``(speculative start ms, plain
    start ms, plain ms per token)``, the plain pair None without a baseline.

    Both lanes count the prefill, as the headline does (:func:`analyse`: the run's rate is emitted
    ÷ its wall time, prefill included; the plain rate is :meth:`PlainBaseline.tokens_per_s_at`):
    a reader waits for it either way, and leaving it out of one side only is what made the race
    (2.25×) and the headline (1.89×) disagree. The speculative lane starts where the run's clock
    says its first round began: the last round's ``elapsed_s`` minus the rounds' own times (the
    prefill and the set-up between), or ``prefill_ms`` (ms) when the rounds carry no clock. The
    plain lane starts after :meth:`PlainBaseline.plain_clock`'s prefill and steps at its ms per
    token, so plain finish ÷ speculative finish is the measured speedup for the same tokens."""
    spent = sum(r.draft_ms + r.verify_ms + r.other_ms for r in rounds)
    clock = rounds[-1].elapsed_s * 1e3 - spent if rounds and rounds[-1].elapsed_s > 0 else -1.0
    start = clock if clock >= 0 else max(float(prefill_ms or 0.0), 0.0)
    if baseline is None:
        return start, None, None
    plain_prefill, per_token = baseline.plain_clock()
    return start, plain_prefill, per_token


def decode_tokens_per_s(tokens: int, generation_ms: float) -> float | None:
    """The decode rate (tokens/s): the tokens after the first ÷ the time after the prompt's pass.
    The first token's distribution comes from the prompt's pass, so it is that pass's, not
    decoding's: llama.cpp's ``predicted_per_second`` is ``(predicted_n − 1) ÷ predicted_ms``. A
    comparison between engines reads this rate, since engines prefill a prompt very differently
    (llama.cpp's quantized kernels take about a step per prompt token on a CPU; a bfloat16 forward
    about one step for the whole prompt). For a specviz run: ``len(tokens)`` and ``elapsed_s × 1000
    − prefill_ms``. None without time or with fewer than two tokens.

    Args:
        tokens: tokens generated, the first one (from the prompt's pass) included.
        generation_ms: wall time from the end of the prompt's pass to the last token, ms.
    """
    return (tokens - 1) / generation_ms * 1e3 if generation_ms > 0 and tokens > 1 else None


def measured_speedup(tokens_per_s: float, plain_tokens_per_s: float | None) -> float | None:
    """Speedup = speculative tokens/s ÷ plain tokens/s, or None without a baseline.

    Both rates must be measured on the same target, prompt and settings in the same process;
    below 1 is a slowdown.
    """
    if not plain_tokens_per_s or plain_tokens_per_s <= 0:
        return None
    return tokens_per_s / plain_tokens_per_s


#: Two standard errors: the run's own pass-to-pass variation enters the range as about a 95% interval.
RUN_SPREAD_SE = 2.0
#: Fewest rounds whose spread says anything about the run's rate.
MIN_ROUNDS_FOR_SPREAD = 5


def _rate_error(m: int, t: float, n: float, tt: float, tn: float, nn: float) -> float:
    """:func:`_run_rate_error` from the sums over m rounds of t_i, n_i, t_i², t_i·n_i and n_i²
    (so a running figure updates it in O(1) a round)."""
    if m < MIN_ROUNDS_FOR_SPREAD or n <= 0 or t <= 0:
        return 0.0
    ratio = t / n
    residual = max(0.0, tt - 2 * ratio * tn + ratio * ratio * nn)  # Σ (t_i − R·n_i)²
    se = math.sqrt(residual / (m * (m - 1))) / (n / m)
    return min(0.5, RUN_SPREAD_SE * se / ratio)


def _round_sums(rounds: list[Round]) -> list[float]:
    sums = [0.0] * 6
    for r in rounds:
        _add_round(sums, r)
    return sums


def _add_round(sums: list[float], r: Round) -> None:
    t, n = r.draft_ms + r.verify_ms + r.other_ms, len(r.emitted)
    for i, x in enumerate((1, t, n, t * t, t * n, n * n)):
        sums[i] += x


def _run_rate_error(rounds: list[Round]) -> float:
    """Relative uncertainty of the run's time per token from its own passes' variation (0 with
    fewer than :data:`MIN_ROUNDS_FOR_SPREAD` rounds).

    The run's time per token is a ratio estimate R = Σ t_i ÷ Σ n_i over rounds i (t_i its draft +
    verify + other ms, n_i its emitted tokens); its standard error is
    √(Σ (t_i − R·n_i)² ÷ (m(m − 1))) ÷ n̄ (the ratio estimator's, Cochran, *Sampling Techniques*,
    3rd ed., §6.4). Returned: :data:`RUN_SPREAD_SE` × that ÷ R, capped at 0.5.
    """
    m, t, n, tt, tn, nn = _round_sums(rounds)
    return _rate_error(int(m), t, n, tt, tn, nn)


def _spread(tokens_per_s: float, emitted: int, baseline: PlainBaseline, error: float
            ) -> tuple[float, float, float] | None:
    value = measured_speedup(tokens_per_s, baseline.tokens_per_s_at(emitted))
    if value is None or tokens_per_s <= 0:
        return None
    slow, fast = baseline.rate_range_at(emitted)
    low = tokens_per_s / (1 + error) / fast
    high = tokens_per_s / (1 - error) / slow
    return value, min(low, value), max(high, value)


def speedup_with_spread(tokens_per_s: float, emitted: int, baseline: PlainBaseline | None,
                        rounds: list[Round] = ()) -> tuple[float, float, float] | None:
    """The measured speedup and its range: ``(value, low, high)``, or None without a baseline.

    value = the run's tokens/s ÷ plain decoding's tokens/s over as many tokens as the run emitted
    (:meth:`PlainBaseline.tokens_per_s_at`: the median plain sample, compared per token, prefill
    included once on both sides). The range takes the slowest and the fastest plain sample
    (:meth:`PlainBaseline.rate_range_at`) and widens the run's own rate by its pass-to-pass
    variation (:func:`_run_rate_error`, about ±2 standard errors): low = run rate ÷ (1 + e) ÷
    fastest plain rate, high = run rate ÷ (1 − e) ÷ slowest plain rate. With one plain sample and
    fewer than :data:`MIN_ROUNDS_FOR_SPREAD` rounds, low = value = high: nothing says how far off
    it may be, which the summary then says.
    """
    if baseline is None:
        return None
    return _spread(tokens_per_s, emitted, baseline, _run_rate_error(list(rounds)))


def format_speedup(value: float, low: float | None = None, high: float | None = None) -> str:
    """The one way a speedup is written: ``"1.12× (1.05–1.19×)"``, or ``"1.12×"`` without a range."""
    text = f"{value:.2f}×"
    if low is None or high is None or f"{low:.2f}" == f"{high:.2f}":
        return text
    return f"{text} ({low:.2f}–{high:.2f}×)"


#: A baseline's plain step this many times slower or faster than the run's own evidence disagrees with it.
BASELINE_DISAGREES = 1.5
#: Fewest plain-shaped passes (or verify passes) that count as evidence about a plain step's time.
MIN_EVIDENCE_PASSES = 3
#: Slowest ÷ fastest plain sample above this: the machine's speed changed while the baseline was timed.
BASELINE_SCATTER = 1.5


def _ms(x: float) -> str:
    return f"{x:.1f} ms" if x < 10 else f"{x:.0f} ms"


def baseline_disagreement(step_ms: float | None, own_plain_step_ms: float | None, own_plain_steps: int,
                          median_verify_ms: float | None, verify_passes: int) -> str | None:
    """A sentence when the baseline's plain step disagrees with the run's own evidence, else None.

    The evidence, best first: the median of the run's plain-shaped passes (rounds that drafted
    nothing: each is one plain step, timed in this run), when there are at least
    :data:`MIN_EVIDENCE_PASSES`; disagreement is a ratio beyond :data:`BASELINE_DISAGREES` either
    way. Otherwise the median verify pass: it scores K + 1 positions where a plain step scores one,
    so it cannot be much faster than a plain step; a baseline step more than
    :data:`BASELINE_DISAGREES` × slower than it was timed on a slower machine than the run's.
    """
    if not step_ms:
        return None
    if own_plain_step_ms and own_plain_steps >= MIN_EVIDENCE_PASSES:
        ratio = step_ms / own_plain_step_ms
        own = (f"this run's own plain steps ({_ms(own_plain_step_ms)}, the median of {own_plain_steps} passes that "
               "drafted nothing)")
        if ratio > BASELINE_DISAGREES:
            return (f"The plain baseline ({_ms(step_ms)} a step) is {ratio:.1f}× slower than {own}: it was probably "
                    "timed while the machine was busy, so the speedup is overstated. Run again to re-measure.")
        if ratio < 1 / BASELINE_DISAGREES:
            return (f"The plain baseline ({_ms(step_ms)} a step) is {1 / ratio:.1f}× faster than {own}: this run was "
                    "probably slowed by other work on the machine, so the speedup is understated. Run again to "
                    "re-measure.")
        return None
    if median_verify_ms and verify_passes >= MIN_EVIDENCE_PASSES and step_ms > BASELINE_DISAGREES * median_verify_ms:
        return (f"The plain baseline ({_ms(step_ms)} a step) is {step_ms / median_verify_ms:.1f}× slower than this "
                f"run's median verify pass ({_ms(median_verify_ms)}), which scores K + 1 positions where a plain step "
                "scores one: the baseline was probably timed while the machine was busy, so the speedup is "
                "overstated. Run again to re-measure.")
    return None


def baseline_still_valid(baseline: PlainBaseline | None, rounds: list[Round]) -> bool:
    """Whether a cached plain baseline may be reused after this run: it agrees with the run's own
    evidence of a plain step (:func:`baseline_disagreement`) and its samples do not scatter by
    more than :data:`BASELINE_SCATTER`. False for None (there is nothing to reuse)."""
    if baseline is None:
        return False
    own = own_plain_steps(rounds)
    passes = [r.verify_ms for r in rounds if r.drafted and r.verify_ms > 0]
    disagreement = baseline_disagreement(baseline.step_ms, _median(own), len(own), _median(passes), len(passes))
    return disagreement is None and baseline.scatter <= BASELINE_SCATTER


#: How every front-end begins the words that stand where an untrusted speedup would be.
NOT_MEASURABLE = "not measurable now"


def speedup_doubt(a) -> str | None:
    """Why ``a``'s measured speedup cannot be trusted, as one sentence, or None when it can (or
    there is none); ``a`` is a :class:`~specviz.figures.analysis.RunAnalysis`. The one rule the page's
    summary and speedup chart, the Experiments rows, the CLI and the bench follow: a doubted
    speedup is never shown as a figure, only these words after :data:`NOT_MEASURABLE`
    (:func:`speedup_shown`).

    The rule: a speedup is doubted when its plain baseline is contradicted by the run's own
    timings (:func:`baseline_disagreement`: the baseline's plain step is more than
    :data:`BASELINE_DISAGREES` × slower or faster than this run's own plain-shaped passes, or
    slower than its median verify pass by as much: the baseline or the run was timed while the
    machine was busy), or when the baseline's own samples scatter by more than
    :data:`BASELINE_SCATTER` (slowest ÷ fastest: the machine's speed changed while it was timed).
    Uneven verify passes alone are not a doubt: they widen the range, which the figure carries.
    """
    if a.plain_step_ms is None or a.speedup is None:
        return None
    verify_passes = sum(1 for t in a.time_split if t.verify_ms > 0) - a.own_plain_steps
    disagreement = baseline_disagreement(a.plain_step_ms, a.own_plain_step_ms, a.own_plain_steps,
                                         a.median_verify_ms, verify_passes)
    if disagreement:
        return disagreement
    if a.plain_scatter and a.plain_scatter > BASELINE_SCATTER:
        return (f"The {a.plain_samples} timings of plain decoding scatter widely (the slowest took "
                f"{a.plain_scatter:.1f}× as long per token as the fastest): the machine's speed changed while they "
                "ran. Run again when the machine is quiet.")
    return None


def speedup_shown(speedup: float | None, low: float | None, high: float | None, doubt: str | None) -> str | None:
    """The measured speedup as every front-end writes it: :func:`format_speedup` when it is
    trusted, ``"not measurable now: <why>"`` when :func:`speedup_doubt` (or a sweep's
    cross-row check) doubts it, None without a speedup."""
    if doubt:
        return f"{NOT_MEASURABLE}: {doubt[0].lower()}{doubt[1:]}"
    return None if speedup is None else format_speedup(speedup, low, high)


def running_speedup(rounds: list[Round], baseline: PlainBaseline | None) -> list[dict]:
    """The measured speedup as it stood after each round, with its range:
    ``{"t": elapsed s, "pass": verify pass (from 1), "speedup": ..., "low": ..., "high": ...}``.

    The same definitions as :func:`speedup_with_spread` over the rounds so far: tokens emitted so
    far ÷ generation time so far (``Round.elapsed_s``, prefill included), ÷ the baseline's tokens/s
    over as many tokens (:meth:`PlainBaseline.tokens_per_s_at`), so the last point is the run's
    figure. Empty without a baseline.
    """
    if baseline is None:
        return []
    points, emitted, sums = [], 0, [0.0] * 6
    for r in rounds:
        emitted += len(r.emitted)
        _add_round(sums, r)
        if r.elapsed_s > 0:
            m, t, n, tt, tn, nn = sums
            spread = _spread(emitted / r.elapsed_s, emitted, baseline, _rate_error(int(m), t, n, tt, tn, nn))
            if spread is not None:
                points.append({"t": r.elapsed_s, "pass": r.index + 1, "speedup": spread[0], "low": spread[1],
                               "high": spread[2]})
    return points


def speedup_doubts(rows: Sequence[dict]) -> list[str | None]:
    """Per row, why its measured speedup cannot be trusted (one sentence), or None: what the
    Experiments table and chart, the side-by-side heads and ``specviz sweep`` show in place of a
    doubted figure (:func:`speedup_shown`; rows of :func:`specviz.run.sweep.sweep`).

    The rule: a row's own doubt (``row["speedup_doubt"]``, :func:`specviz.figures.analysis.speedup_doubt`),
    else a baseline out of line with the other rows'. Every row of a sweep times plain decoding of
    the same target, prompt and length (only the swept setting changes, and plain decoding's cost
    per step does not depend on T, K or the drafter), so their plain steps should agree. A row
    whose ``plain_step_ms`` is more than :data:`BASELINE_DISAGREES` × slower or
    faster than the median of the rows' plain steps (with two rows: than the other row's; then
    neither can be told right, and both say so) was timed while the machine's speed changed, and
    its speedup, divided by that baseline, is not comparable with the others (T = 0 and
    T = 0.3 with the same α and tokens per pass showed 2.94× and 1.75×).
    """
    steps = [r.get("plain_step_ms") if r.get("speedup") is not None else None for r in rows]
    timed = [s for s in steps if s]
    out = []
    for row, step in zip(rows, steps):
        doubt = row.get("speedup_doubt")
        if not doubt and step and len(timed) >= 2:
            others = list(timed)
            others.remove(step)
            reference = others[0] if len(timed) == 2 else statistics.median(timed)
            ratio = step / reference
            if ratio > BASELINE_DISAGREES or ratio < 1 / BASELINE_DISAGREES:
                what = "the other setting's" if len(timed) == 2 else "the median of the settings'"
                doubt = (f"This setting's plain baseline ({step:.0f} ms a step) is {max(ratio, 1 / ratio):.1f}× "
                         f"{'slower' if ratio > 1 else 'faster'} than {what} ({reference:.0f} ms), though plain "
                         "decoding is the same at every setting: the machine's speed changed between them, so its "
                         "speedup cannot be compared. Run the experiment again when the machine is quiet.")
        out.append(doubt)
    return out
