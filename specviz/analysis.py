"""The analysis of a run: every derived figure specviz shows, defined once.

The app's summary and charts, ``python -m specviz run --json`` and ``python -m specviz bench``
all read their figures from :func:`analyse`, so the same rounds give the same numbers
everywhere. A figure is defined here, with its formula and source, and nowhere else.

Inputs are the run's :class:`~specviz.trace.Round` records (plain data), its measured speed, and
optionally a :class:`PlainBaseline`: plain decoding of the same target on the same prompt and
settings, measured in the same process. Nothing here imports torch or runs a model.

The figures (names as in :class:`RunAnalysis`, the JSON and the UI):

* ``acceptance_rate`` = accepted ÷ proposed draft tokens: the fraction of drafted tokens that
  reached the output, as vLLM's spec-decode metrics report it ("draft acceptance rate").
* ``alpha`` = accepted ÷ tested: the per-token acceptance probability α of Leviathan et al. 2023
  (Definition 3.1), the α the closed forms assume. A round stops testing at its first rejection,
  so drafts after it are proposed but never tested; counting them as failures (as
  ``acceptance_rate`` does) understates α. Each tested draft is one Bernoulli(α) trial, and
  accepted ÷ tested is the maximum-likelihood estimate of α.
* ``tokens_per_pass`` = emitted tokens ÷ target passes (verify passes).
* ``plain_step_ms``: one plain decoding step of the target, the mean ``verify_ms`` of the plain
  run's rounds (one target forward + sampling each; the prompt's prefill is not a step, and the
  first round, whose token the prefill's pass scored, has no pass of its own and is left out).
* ``cost_ratio_c`` (c): one draft forward pass ÷ one plain target step. A drafter without a
  network (prompt lookup) has no forward pass; its lookup time per round is spread over the K
  slots, draft ms per round ÷ (K × plain step ms), which is what the ``K·c`` term of the speedup
  formula stands for.
* ``verify_cost_v`` (v): one verify pass (the target scoring K + 1 positions, plus the accept
  test and resample) ÷ one plain target step, over the rounds that ran a pass. Leviathan et al.
  assume v = 1.
* ``speedup`` = speculative tokens/s ÷ plain tokens/s (both measured, prefill included), the
  plain rate taken over as many tokens as the run emitted from the median of several plain runs
  (:class:`PlainBaseline`, :meth:`PlainBaseline.tokens_per_s_at`). ``speedup_low`` and
  ``speedup_high`` bound it: the slowest and fastest plain run, and the run's own pass-to-pass
  variation (:func:`speedup_with_spread`); it is written ``1.12× (1.05–1.19×)`` everywhere
  (:func:`format_speedup`). ``plain_samples``, ``plain_tokens`` (tokens the longest plain run
  covered) and ``plain_scatter`` (slowest ÷ fastest plain run per token) describe the baseline;
  ``own_plain_step_ms`` (median ``verify_ms`` of this run's passes that drafted nothing) and
  ``median_verify_ms`` are the run's own evidence it is checked against
  (:func:`baseline_disagreement`, :func:`baseline_still_valid`).
* ``tree_rounds``, ``tree_nodes_max``, ``tree_branching_max``: passes that drafted a tree (a node
  with a sibling), the most nodes in one, the most children at one node (the context included).
* ``predicted_tokens_per_pass`` = (1 − α^(K+1)) / (1 − α) (Leviathan et al. 2023, eq. 1) and
  ``theoretical_speedup`` = that ÷ (K·c + v) (their Theorem 3.8 with the verify cost measured).
* ``predicted_tokens_per_pass_actual_drafts`` and ``theoretical_speedup_actual_drafts``: the
  same model on the rounds as they happened: mean over rounds of (1 − α^(k_i+1)) / (1 − α), with
  k_i the depth that round drafted, ÷ the measured mean round cost (draft ms + verify ms per
  round ÷ plain step ms). Prompt lookup drafts fewer than K tokens (often none) in many rounds,
  which the closed form does not model.
* ``per_position``: for i = 1..K, how often the i-th draft token of a round is accepted when it
  is tested (Leviathan et al.'s model says α at every i).
* ``time_split``: per round, draft ms, verify ms and everything else (bookkeeping, text
  decoding), against the plain step.

Trees. A round's drafted tokens carry a ``parent`` index (see :class:`~specviz.trace.DraftedToken`);
a chain is the tree whose every node has the previous one as parent. Position i is depth i: it
is *tested* in a round when some node at depth i faced the accept test, and *accepted* when one
was accepted. For a chain this is exactly "the i-th draft token". In a tree round ``proposed``
counts every node (so ``proposed_per_pass`` is the verify pass's width in nodes), ``tested`` every
node that faced a test (siblings included) and ``accepted`` the accepted path; the closed forms
are the chain's, evaluated at the tree's depth.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from . import theory
from .trace import KINDS, Round

__all__ = [
    "race_clock",
    "speedup_doubts",
    "NOT_MEASURABLE",
    "PlainBaseline",
    "PositionAcceptance",
    "RoundTime",
    "RunAnalysis",
    "analyse",
    "baseline_disagreement",
    "baseline_still_valid",
    "draft_depth",
    "format_speedup",
    "health_notes",
    "is_tree_round",
    "measured_speedup",
    "running_acceptance",
    "running_speedup",
    "speedup_doubt",
    "speedup_doubts",
    "speedup_shown",
    "speedup_with_spread",
]


def _pass_times(rounds: list[Round]) -> list[float]:
    """``verify_ms`` of the rounds that ran a target pass of their own: all but a first round that
    drafted nothing, whose token came from the prefill's pass (``Round.root_from_prefill``)."""
    return [r.verify_ms for r in rounds if r.drafted or not r.root_from_prefill]


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
            length (:func:`specviz.baseline.measure_baseline`). Empty for a baseline built from a
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
        steps = _pass_times(rounds)
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


@dataclass(frozen=True)
class PositionAcceptance:
    """Acceptance of the i-th draft position (depth i) over a run's rounds.

    ``rate`` = accepted ÷ tested, None when position i was never tested.
    """

    position: int
    tested: int
    accepted: int
    rate: float | None


@dataclass(frozen=True)
class RoundTime:
    """Where one round's time went (ms): drafting, the verify pass, and everything else."""

    round: int
    draft_ms: float
    verify_ms: float
    other_ms: float


@dataclass(frozen=True)
class RunAnalysis:
    """Every figure derived from one run (see the module docstring for each definition).

    Counts are tokens; times are ms unless the name says s; rates are tokens/s; ratios are
    dimensionless. A figure that cannot be computed (no drafts, no baseline) is None.
    """

    k: int
    target_passes: int
    proposed: int
    tested: int
    accepted: int
    emitted: int
    counts: dict[str, int]
    acceptance_rate: float | None
    alpha: float | None
    tokens_per_pass: float
    proposed_per_pass: float
    passes_without_draft: float | None
    wall_s: float
    tokens_per_s: float
    prefill_ms: float
    draft_ms_per_round: float | None
    draft_step_ms: float | None
    verify_ms: float | None
    other_ms_per_round: float | None
    plain_step_ms: float | None
    plain_tokens_per_s: float | None
    cost_ratio_c: float | None
    verify_cost_v: float | None
    speedup: float | None
    predicted_tokens_per_pass: float | None
    theoretical_speedup: float | None
    predicted_tokens_per_pass_actual_drafts: float | None
    theoretical_speedup_actual_drafts: float | None
    per_position: tuple[PositionAcceptance, ...]
    time_split: tuple[RoundTime, ...]
    speedup_low: float | None = None
    speedup_high: float | None = None
    plain_samples: int | None = None
    plain_tokens: int | None = None
    plain_scatter: float | None = None
    own_plain_step_ms: float | None = None
    own_plain_steps: int = 0
    median_verify_ms: float | None = None
    tree_rounds: int = 0
    tree_nodes_max: int = 0
    tree_branching_max: int = 0

    @property
    def speedup_vs_theoretical(self) -> float | None:
        """Measured ÷ closed-form speedup (1.0: the model explains the run)."""
        return _ratio(self.speedup, self.theoretical_speedup)

    @property
    def speedup_vs_theoretical_actual_drafts(self) -> float | None:
        """Measured speedup ÷ the same model on the actual draft lengths."""
        return _ratio(self.speedup, self.theoretical_speedup_actual_drafts)

    @property
    def speedup_text(self) -> str | None:
        """The measured speedup with its range, as every front-end writes it (:func:`format_speedup`)."""
        return None if self.speedup is None else format_speedup(self.speedup, self.speedup_low, self.speedup_high)

    @property
    def speedup_doubt(self) -> str | None:
        """Why the measured speedup cannot be trusted, one sentence (:func:`speedup_doubt`), or None."""
        return speedup_doubt(self)

    def to_dict(self) -> dict:
        """Plain JSON-ready data: every field and property (per-position and per-round lists too)."""
        out = asdict(self)
        out["speedup_vs_theoretical"] = self.speedup_vs_theoretical
        out["speedup_vs_theoretical_actual_drafts"] = self.speedup_vs_theoretical_actual_drafts
        out["speedup_text"] = self.speedup_text
        out["speedup_doubt"] = self.speedup_doubt
        return out

    def scalars(self) -> dict:
        """The single-number figures (and the per-kind counts) of :meth:`to_dict`, without the
        per-position and per-round lists: what ``run --json``, a bench row and the app's summary
        show."""
        out = self.to_dict()
        del out["per_position"], out["time_split"]
        return out


# --------------------------------------------------------------------------- the figures
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


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _depths(round_: Round) -> list[int]:
    """Depth (1 = first draft position) of each drafted token of a round."""
    depths: list[int] = []
    for i, token in enumerate(round_.drafted):
        parent = token.parent if token.parent is not None else i - 1
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def draft_depth(round_: Round) -> int:
    """How deep the round drafted: K for a full chain, the deepest node's depth in a tree, 0 for none."""
    depths = _depths(round_)
    return max(depths) if depths else 0


_draft_depth = draft_depth


def _per_position(rounds: list[Round], k: int) -> tuple[PositionAcceptance, ...]:
    width = max([k] + [_draft_depth(r) for r in rounds])
    tested = [0] * width
    accepted = [0] * width
    for r in rounds:
        depths = _depths(r)
        tested_at = {d for d, t in zip(depths, r.drafted) if t.tested}
        accepted_at = {d for d, t in zip(depths, r.drafted) if t.accepted}
        for d in tested_at:
            tested[d - 1] += 1
        for d in accepted_at:
            accepted[d - 1] += 1
    return tuple(PositionAcceptance(i + 1, tested[i], accepted[i], accepted[i] / tested[i] if tested[i] else None)
                 for i in range(width))


def _cost_ratio(rounds: list[Round], k: int, plain_step_ms: float | None) -> float | None:
    """c: see the module docstring (a model drafter's forward pass, or a lookup's time per slot)."""
    if not plain_step_ms or not rounds or k < 1:
        return None
    steps = sum(r.draft_steps for r in rounds)
    draft_ms = sum(r.draft_ms for r in rounds)
    if steps:
        return draft_ms / steps / plain_step_ms
    return draft_ms / len(rounds) / (k * plain_step_ms)


def _theory(alpha: float | None, k: int, c: float | None, v: float | None) -> tuple[float | None, float | None]:
    """(predicted tokens per pass, theoretical speedup) of the closed forms, None where undefined."""
    if alpha is None or k < 1:
        return None, None
    tpp = theory.expected_tokens_per_pass(alpha, k)
    speedup = theory.expected_speedup(alpha, k, c, v) if c is not None and v else None
    return tpp, speedup


def _theory_actual_drafts(rounds, alpha, draft_ms, verify_ms, plain_step_ms) -> tuple[float | None, float | None]:
    if alpha is None or not rounds:
        return None, None
    tpp = sum(theory.expected_tokens_per_pass(alpha, _draft_depth(r)) for r in rounds) / len(rounds)
    if not plain_step_ms or draft_ms is None or verify_ms is None:
        return tpp, None
    return tpp, tpp / ((draft_ms + verify_ms) / plain_step_ms)


def _counts(rounds: list[Round]) -> tuple[int, int, int, dict[str, int]]:
    """(proposed, tested, accepted) draft tokens and the emitted tokens per kind."""
    proposed = sum(len(r.drafted) for r in rounds)
    tested = sum(1 for r in rounds for t in r.drafted if t.tested)
    accepted = sum(1 for r in rounds for t in r.drafted if t.accepted)
    counts = {kind: 0 for kind in KINDS}
    for r in rounds:
        for token in r.emitted:
            counts[token.kind] += 1
    return proposed, tested, accepted, counts


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _parents(round_: Round) -> list[int]:
    return [t.parent if t.parent is not None else i - 1 for i, t in enumerate(round_.drafted)]


def is_tree_round(round_: Round) -> bool:
    """True when some node of the round has a sibling (two drafts continue the same prefix)."""
    parents = _parents(round_)
    return len(set(parents)) < len(parents)


def _tree_shape(rounds: list[Round]) -> dict:
    """The RunAnalysis tree fields: tree rounds, most nodes in one, most children of one node
    (the context included)."""
    trees = [r for r in rounds if is_tree_round(r)]
    nodes = max((len(r.drafted) for r in trees), default=0)
    branching = 0
    for r in trees:
        parents = _parents(r)
        branching = max(branching, max(parents.count(p) for p in set(parents)))
    return dict(tree_rounds=len(trees), tree_nodes_max=nodes, tree_branching_max=branching)


def _own_plain_steps(rounds: list[Round]) -> list[float]:
    """``verify_ms`` of the run's plain-shaped passes: rounds that drafted nothing and ran a pass of
    their own. Each is one target forward over one position plus sampling: a plain step."""
    return [r.verify_ms for r in rounds if not r.drafted and not r.root_from_prefill and r.verify_ms > 0]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _check_run_args(k, wall_s) -> None:
    """ValueError for a negative or non-integer K, or a negative or non-finite wall time."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"K must be an integer >= 0, got {k!r}")
    if not math.isfinite(wall_s) or wall_s < 0:
        raise ValueError(f"wall_s must be a finite number >= 0 (s), got {wall_s!r}")


def _baseline_figures(baseline: PlainBaseline | None, tokens_per_s: float, emitted: int, rounds: list[Round],
                      drafted: bool) -> dict:
    """The RunAnalysis fields that come from the plain baseline: the speedup with its range
    (:func:`speedup_with_spread`) and the baseline's samples, tokens covered and scatter."""
    spread = speedup_with_spread(tokens_per_s, emitted, baseline, rounds) if baseline and drafted else None
    return dict(
        plain_tokens_per_s=baseline.tokens_per_s_at(emitted) if baseline else None,
        speedup=spread[0] if spread else None,
        speedup_low=spread[1] if spread else None,
        speedup_high=spread[2] if spread else None,
        plain_samples=baseline.samples if baseline else None,
        plain_tokens=baseline.covered_tokens if baseline else None,
        plain_scatter=baseline.scatter if baseline else None,
    )


def analyse(
    rounds: list[Round],
    k: int,
    wall_s: float,
    prefill_ms: float = 0.0,
    baseline: PlainBaseline | None = None,
    tokens_per_s: float | None = None,
) -> RunAnalysis:
    """Every figure of a run, from its rounds, its wall time and a plain baseline.

    Args:
        rounds: the run's rounds in order (a prefix of them while the run goes on).
        k: the lookahead K the run was asked for (0 for plain decoding).
        wall_s: generation wall time so far (s), prefill included, the consumer's pauses
            excluded (``Generation.elapsed_s``).
        prefill_ms: time of the prompt's forward passes (ms).
        baseline: plain decoding of the same target measured in this process, or None (then c,
            v, the speedups and the theoretical speedups are None).
        tokens_per_s: the run's measured rate when the caller measured it otherwise (the bench
            pools repeats); default emitted ÷ ``wall_s``.

    Returns:
        A :class:`RunAnalysis`.

    Raises:
        ValueError: if ``k`` is negative or ``wall_s`` is negative or not finite.
    """
    _check_run_args(k, wall_s)
    passes = len(rounds)
    proposed, tested, accepted, counts = _counts(rounds)
    emitted = sum(counts.values())
    if tokens_per_s is None:
        tokens_per_s = emitted / wall_s if wall_s > 0 else 0.0

    draft_steps = sum(r.draft_steps for r in rounds)
    own_steps = _own_plain_steps(rounds)
    draft_ms_per_round = _mean([r.draft_ms for r in rounds])
    verify_ms = _mean(_pass_times(rounds))
    plain_step_ms = baseline.step_ms if baseline else None
    drafted = k > 0
    c = _cost_ratio(rounds, k, plain_step_ms) if drafted else None
    v = _ratio(verify_ms, plain_step_ms) if drafted else None
    alpha = accepted / tested if tested else None
    predicted_tpp, theoretical = _theory(alpha, k, c, v)
    actual_tpp, actual_speedup = _theory_actual_drafts(rounds, alpha, draft_ms_per_round, verify_ms, plain_step_ms)
    return RunAnalysis(
        k=k,
        target_passes=passes,
        proposed=proposed,
        tested=tested,
        accepted=accepted,
        emitted=emitted,
        counts=counts,
        acceptance_rate=accepted / proposed if proposed else None,
        alpha=alpha,
        tokens_per_pass=emitted / passes if passes else 0.0,
        proposed_per_pass=proposed / passes if passes else 0.0,
        passes_without_draft=sum(1 for r in rounds if not r.drafted) / passes if passes else None,
        wall_s=wall_s,
        tokens_per_s=tokens_per_s,
        prefill_ms=prefill_ms,
        draft_ms_per_round=draft_ms_per_round if drafted else None,
        draft_step_ms=sum(r.draft_ms for r in rounds) / draft_steps if draft_steps else None,
        verify_ms=verify_ms,
        other_ms_per_round=_mean([r.other_ms for r in rounds]),
        plain_step_ms=plain_step_ms,
        cost_ratio_c=c,
        verify_cost_v=v,
        predicted_tokens_per_pass=predicted_tpp,
        theoretical_speedup=theoretical,
        predicted_tokens_per_pass_actual_drafts=actual_tpp,
        theoretical_speedup_actual_drafts=actual_speedup,
        per_position=_per_position(rounds, k),
        time_split=tuple(RoundTime(r.index, r.draft_ms, r.verify_ms, r.other_ms) for r in rounds),
        own_plain_step_ms=_median(own_steps),
        own_plain_steps=len(own_steps),
        median_verify_ms=_median([r.verify_ms for r in rounds if r.drafted and r.verify_ms > 0]),
        **_tree_shape(rounds),
        **_baseline_figures(baseline, tokens_per_s, emitted, rounds, drafted),
    )


def running_acceptance(rounds: list[Round]) -> list[tuple[int, float, float]]:
    """Running ``(round index, acceptance_rate, alpha)`` after each round that had drafts so far.

    The same definitions as :func:`analyse` (accepted ÷ proposed, accepted ÷ tested) over the
    rounds up to and including each one, so the last entry equals the run's figures. Rounds
    before the first proposal are left out (both figures are undefined there).
    """
    out = []
    proposed = tested = accepted = 0
    for r in rounds:
        proposed += len(r.drafted)
        tested += sum(1 for t in r.drafted if t.tested)
        accepted += sum(1 for t in r.drafted if t.accepted)
        if proposed:
            out.append((r.index, accepted / proposed, accepted / tested if tested else 0.0))
    return out


#: Per-token α below this over at least :data:`MIN_PASSES_FOR_NOTES` passes: the draft rarely agrees.
LOW_ALPHA = 0.2
MIN_PASSES_FOR_NOTES = 10
#: Passes whose mean time is above this multiple of their median: some were held up (the CPU was busy).
UNEVEN_PASSES = 1.5


def health_notes(a: RunAnalysis, lookup: bool = False, low_precision_greedy: bool = False) -> list[str]:
    """Plain sentences on what the figures say that a user should know (empty when nothing stands out).

    Args:
        a: the run's analysis.
        lookup: the drafter is prompt lookup (its failures to find a match are worth a note).
        low_precision_greedy: greedy decoding in bfloat16/float16, where one batched verify pass
            can round a near-tie differently from a one-token step.

    The rules: per-token α below :data:`LOW_ALPHA` over at least :data:`MIN_PASSES_FOR_NOTES`
    passes; a draft so expensive that even α = 1 would not pay, (K + 1) / (K·c + v) < 1 (the
    closed form's ceiling); prompt lookup drafting nothing in most passes; a measured slowdown
    whose whole range is below 1× (said with whichever of the above explains it); verify passes so
    uneven that their mean is above :data:`UNEVEN_PASSES` × their median over at least :data:`MIN_PASSES_FOR_NOTES` passes
    (some passes waited for the CPU, and v, a mean, says more about that than about the model);
    low-precision greedy decoding; a plain baseline that disagrees with the run's own evidence
    of a plain step's time (:func:`baseline_disagreement`), whose samples scatter by more than
    :data:`BASELINE_SCATTER`, or that covered fewer tokens than the run; a run that drafted
    trees, which the chain's closed forms do not describe.
    """
    notes = []
    if a.alpha is not None and a.alpha < LOW_ALPHA and a.target_passes >= MIN_PASSES_FOR_NOTES:
        notes.append(f"The draft rarely agrees with the target: per-token α = {a.alpha:.2f} over {a.target_passes} "
                     "passes, so nearly every verify pass yields just its one target token.")
    ceiling = None
    if a.k and a.cost_ratio_c is not None and a.verify_cost_v:
        ceiling = (a.k + 1) / (a.k * a.cost_ratio_c + a.verify_cost_v)
        if ceiling < 1:
            notes.append(f"Even if every draft were accepted this could not be faster: a round costs K·c + v = "
                         f"{a.k * a.cost_ratio_c + a.verify_cost_v:.2f} plain steps and yields at most K + 1 = "
                         f"{a.k + 1} tokens (ceiling {ceiling:.2f}×). {_costly_part(a)}")
    if lookup and a.passes_without_draft is not None and a.passes_without_draft > 0.5:
        notes.append(f"Prompt lookup found no earlier match in {a.passes_without_draft:.0%} of passes: there is "
                     "little to copy in this text, so most passes are plain decoding steps.")
    if a.speedup is not None and not speedup_doubt(a) and (a.speedup_high or a.speedup) < 1 and not notes:
        notes.append(f"Slower than plain decoding ({format_speedup(a.speedup, a.speedup_low, a.speedup_high)}): the "
                     f"{a.tokens_per_pass:.2f} tokens per pass do not make up for a round costing "
                     f"{a.k * (a.cost_ratio_c or 0) + (a.verify_cost_v or 1):.2f} plain steps (K·c + v).")
    notes += _uneven_passes_note(a)
    notes += _baseline_notes(a)
    notes += _tree_note(a)
    if low_precision_greedy:
        notes.append("Greedy decoding in reduced precision: one batched verify pass can round a near-tie "
                     "differently from a one-token step, so the text may differ from plain decoding's in places "
                     "(float32 gives identical text).")
    return notes


def _uneven_passes_note(a: RunAnalysis) -> list[str]:
    passes = sorted(t.verify_ms for t in a.time_split if t.verify_ms > 0)
    if len(passes) < MIN_PASSES_FOR_NOTES or a.verify_cost_v is None or not a.verify_ms or not a.plain_step_ms:
        return []
    median = statistics.median(passes)
    if a.verify_ms <= UNEVEN_PASSES * median:
        return []
    return [f"Some verify passes took far longer than the others (longest {passes[-1]:.0f} ms, median "
            f"{median:.0f} ms): something else held the CPU during them, on a small machine often the browser "
            f"drawing this page. On the median pass v = {median / a.plain_step_ms:.2f}; the table's "
            f"v = {a.verify_cost_v:.2f} averages them all."]


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
    own = _own_plain_steps(rounds)
    passes = [r.verify_ms for r in rounds if r.drafted and r.verify_ms > 0]
    disagreement = baseline_disagreement(baseline.step_ms, _median(own), len(own), _median(passes), len(passes))
    return disagreement is None and baseline.scatter <= BASELINE_SCATTER


#: How every front-end begins the words that stand where an untrusted speedup would be.
NOT_MEASURABLE = "not measurable now"


def speedup_doubt(a: RunAnalysis) -> str | None:
    """Why ``a``'s measured speedup cannot be trusted, as one sentence, or None when it can (or
    there is none). The one rule the page's summary and speedup chart, the Experiments rows, the
    CLI and the bench follow: a doubted speedup is never shown as a figure, only these words
    after :data:`NOT_MEASURABLE` (:func:`speedup_shown`).

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


def _baseline_notes(a: RunAnalysis) -> list[str]:
    if a.plain_step_ms is None or a.speedup is None:
        return []
    doubt = speedup_doubt(a)
    # A doubted speedup is said once, in words, never with the figure's range.
    notes = [doubt]
    if a.plain_tokens is not None and a.plain_tokens < a.emitted:
        notes.append(f"Plain decoding stopped at end-of-text after {a.plain_tokens} tokens; this run emitted "
                     f"{a.emitted}. The speedup compares time per token: plain decoding's speed over its "
                     f"{a.plain_tokens} tokens stands in for its speed over {a.emitted}.")
    return [n for n in notes if n]


def _costly_part(a: RunAnalysis) -> str:
    """Which part of a round costs too much, decided from the two terms of K·c + v: the K draft steps
    (K·c) or the verify pass (v, in plain steps; a busy CPU makes one pass wait for a core)."""
    drafting = a.k * a.cost_ratio_c
    if drafting >= a.verify_cost_v:
        return f"The draft step is too expensive here (K·c = {drafting:.2f} against v = {a.verify_cost_v:.2f})."
    return (f"The verify pass is too slow here (v = {a.verify_cost_v:.2f} plain steps against K·c = {drafting:.2f} "
            "for the drafts); a verify pass this slow often means the CPU was busy.")


def _tree_note(a: RunAnalysis) -> list[str]:
    if not a.tree_rounds or a.predicted_tokens_per_pass is None:
        return []
    gap = a.tokens_per_pass - a.predicted_tokens_per_pass
    # The word follows the sign: a tree usually goes deeper than the chain formula says, not always.
    verdict = ("therefore underestimates" if gap > 0.005 else "here overestimates" if gap < -0.005
               else "here happens to match")
    return [f"This run drafted trees ({a.tree_rounds} of {a.target_passes} passes; up to {a.tree_nodes_max} nodes, "
            f"up to {a.tree_branching_max} children at a node). The theory rows are a chain's, "
            "(1 − α^(K+1))/(1 − α): one draft per depth, each accepted with probability α. A tree tries several siblings at a depth, each "
            "against the residual the rejected ones leave, so its accepted path goes deeper than a chain's, while "
            f"every rejected sibling counts as a failed test in α. The chain formula {verdict} this "
            f"tree's tokens per pass ({a.tokens_per_pass:.2f} observed, {a.predicted_tokens_per_pass:.2f} for a chain "
            "at this α): read it as a chain's reference, not a prediction for this tree."]


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
    doubted figure (:func:`speedup_shown`; rows of :func:`specviz.sweep.sweep`).

    The rule: a row's own doubt (``row["speedup_doubt"]``, :func:`specviz.analysis.speedup_doubt`),
    else a baseline out of line with the other rows'. Every row of a sweep times plain decoding of
    the same target, prompt and length (only the swept setting changes, and plain decoding's cost
    per step does not depend on T, K or the drafter), so their plain steps should agree. A row
    whose ``plain_step_ms`` is more than :data:`BASELINE_DISAGREES` × slower or
    faster than the median of the rows' plain steps (with two rows: than the other row's; then
    neither can be told right, and both say so) was timed while the machine's speed changed, and
    its speedup, divided by that baseline, is not comparable with the others (issue 26: T = 0 and
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
