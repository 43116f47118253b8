"""The analysis of a run: every derived figure specviz shows, defined once.

The app's summary and charts, ``python -m specviz run --json`` and ``python -m specviz bench``
all read their figures from :func:`analyse`, so the same rounds give the same numbers
everywhere. A figure is defined here, with its formula and source, and nowhere else.

Inputs are the run's :class:`~specviz.core.records.Round` records (plain data), its measured speed, and
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

Trees. A round's drafted tokens carry a ``parent`` index (see :class:`~specviz.core.records.DraftedToken`);
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
from dataclasses import asdict, dataclass

from specviz.figures import theory
from specviz.core.records import effective_k
from specviz.core.records import KINDS, Round
from specviz.figures.speedup import (
    PlainBaseline,
    format_speedup,
    own_plain_steps,
    pass_times,
    speedup_doubt,
    speedup_with_spread,
)

__all__ = [
    "PositionAcceptance",
    "RoundTime",
    "RunAnalysis",
    "analyse",
    "draft_depth",
    "health_notes",
    "is_tree_round",
    "per_position_acceptance",
    "running_acceptance",
]



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


def per_position_acceptance(rounds: list[Round], k: int) -> tuple[PositionAcceptance, ...]:
    """For i = 1..max(K, the deepest draft): the passes whose test reached depth i and those that
    accepted a draft there (a tree counts a depth once per pass), as :attr:`RunAnalysis.per_position`."""
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
    own_steps = own_plain_steps(rounds)
    draft_ms_per_round = _mean([r.draft_ms for r in rounds])
    verify_ms = _mean(pass_times(rounds))
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
        per_position=per_position_acceptance(rounds, k),
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
    :data:`specviz.figures.speedup.BASELINE_SCATTER`, or that covered fewer tokens than the run; a run that drafted
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


def analyse_generation(generation, baseline: PlainBaseline | None = None) -> RunAnalysis:
    """Every derived figure of a :class:`~specviz.core.engine.Generation`'s rounds so far
    (:func:`analyse` with the run's own K, time and prefill): the loop records, this reads.

    Args:
        generation: a Generation, finished or not (a stopped run is described as far as it went).
        baseline: the plain-decoding baseline measured on the same models, for the speedup.
    """
    return analyse(generation.rounds, effective_k(generation.k, generation.drafter is not None),
                   generation.elapsed_s, generation.prefill_ms, baseline)
