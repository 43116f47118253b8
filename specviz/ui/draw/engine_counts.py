"""An engine's counters as the figures the Run tab's charts read, so those charts draw an imported run.

An engine (:mod:`specviz.engine_logs`) reports how many drafts each verify pass proposed and kept, or
only a histogram or per-position totals; never the draws u, p_target or p_draft behind them.
:func:`engine_figures` turns those counts into a :class:`~specviz.figures.analysis.RunAnalysis` and a
:class:`~specviz.diagnose.diagnostics.RunDiagnostics` (what :func:`~specviz.ui.draw.charts.per_position_figure`
and :func:`~specviz.ui.draw.diagnostic_charts.accepted_length_figure` draw) and the passes by tokens
emitted (:func:`~specviz.ui.draw.charts.tokens_per_pass_counts_figure`), each figure defined as the
library defines it for a recorded run (tests/test_engine_views.py holds them equal on the same passes):

* full acceptance at position i = passes that kept a draft at i ÷ drafting passes; conditional =
  kept at i ÷ tested at i; per-token α = kept ÷ tested; acceptance rate = kept ÷ drafted;
  zero-accept share = drafting passes that kept none ÷ drafting passes; tokens per pass = 1 + kept;
* a chain: after the first rejection nothing is tested, so a pass that kept ``a`` of ``d`` drafts
  tested min(a + 1, d) (the engines' own convention, :func:`specviz.engine_logs.normalise.tested_per_pass`);
* from an accepted-length histogram (vLLM's ``acceptance_histogram``, SGLang's
  ``spec_correct_drafts_histogram``) or per-position totals with the passes (vLLM's
  ``num_accepted_tokens_per_pos``: a count at i implies the positions before i were kept, so the
  passes keeping exactly j drafts are ``count_j − count_{j+1}``, ``count_0`` = the passes), every
  pass drafted K, and the order of the passes is not in the file;
* where the file tells how many passes were tested at each position (``tested_by_position``),
  conditional acceptance and α divide by those counts instead.

Everything is counted, never expanded into records, so a server's lifetime of passes costs no
more than one run's. Gradio-free and torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import accumulate

from specviz.figures.analysis import PositionAcceptance, RunAnalysis, analyse
from specviz.diagnose.diagnostics import PositionRates, RunDiagnostics, engine_k, find_cliff
from specviz.engine_logs import ImportedRun

__all__ = ["MAX_K", "EngineFigures", "engine_figures", "passes_from_positions"]

#: A lookahead at most (a trace's own limit on drafted nodes in one pass, :data:`specviz.figures.trace.MAX_DRAFTED`).
MAX_K = 256


def passes_from_positions(passes: int, by_position: tuple[int, ...]) -> list[int]:
    """Passes by kept drafts, j = 0..K, from full acceptance counts by position.

    ``by_position[i]``: the passes that kept the draft at position i (0-based), which implies they
    kept every position before it (vLLM's ``num_accepted_tokens_per_pos``); ``passes``: every
    drafting pass. Entry j of the result = count_j − count_{j+1}, with count_0 = ``passes``.

    Raises:
        ValueError: a count above the one before it (or above ``passes``), or a negative one.
    """
    counts = [passes, *by_position]
    for i in range(1, len(counts)):
        if counts[i] < 0 or counts[i] > counts[i - 1]:
            raise ValueError(f"accepted at position {i - 1} is {counts[i]}, above the {counts[i - 1]} passes that "
                             "got as far")
    return [counts[j] - counts[j + 1] for j in range(len(counts) - 1)] + [counts[-1]]


@dataclass(frozen=True)
class EngineFigures:
    """What the Run tab's charts read, for an imported run: lookahead ``k``; ``passes_by_tokens[n]``
    the passes that emitted n tokens and ``short`` those that proposed fewer than K (the tokens-per-pass
    chart); ``analysis`` (α, acceptance rate, tokens per pass, conditional acceptance by position) and
    ``diagnostics`` (full acceptance by position, zero-accept share, accepted-length histogram, the
    cliff, the K an engine would pick at the stated c and v), both None when the file has totals
    only; and ``how`` the passes were read (one sentence, "" for none)."""

    k: int
    passes_by_tokens: dict[int, int]
    short: int
    analysis: RunAnalysis | None
    diagnostics: RunDiagnostics | None
    how: str


@dataclass
class _Tally:
    """Passes counted: ``kept[j]`` drafting passes kept j drafts, ``tested[j]`` tested j positions;
    ``plain`` passes drafted nothing, ``short`` proposed fewer than K, ``drafted`` drafts in all."""

    kept: list[int]
    tested: list[int]
    plain: int
    short: int
    drafted: int


def _k_of(run: ImportedRun) -> int:
    """The run's lookahead: the file's K, else the longest draft it shows.

    Raises:
        ValueError: above :data:`MAX_K`.
    """
    hist = getattr(run, "accepted_histogram", None)
    k = (run.k or max(run.drafted_per_pass or run.accepted_per_pass or (0,))
         or max(len(hist or ()) - 1, len(run.accepted_by_position or ())))
    if k > MAX_K:
        raise ValueError(f"a lookahead of K = {k} is more than the {MAX_K} this page draws")
    return int(k)


def engine_figures(run: ImportedRun, c: float | None, v: float | None) -> EngineFigures:
    """Every chart figure of an imported run, at the user's stated cost ratio ``c`` (draft step ÷
    target step) and verify cost ``v`` (verify pass ÷ target step) for the K an engine would pick.

    Per-pass counts are read pass by pass; else the histogram, else per-position totals with the
    passes; else (totals only) there is nothing per pass to draw.

    Raises:
        ValueError: counts that contradict each other (more kept than drafted, per-pass lists of
            different lengths, a position's count above the one before, a negative count, a position
            kept more often than tested), or K above :data:`MAX_K`.
    """
    k = _k_of(run)
    hist = getattr(run, "accepted_histogram", None)
    if run.accepted_per_pass:
        tally, how = _per_pass(run, k), "from the file's counts per verify pass"
    elif hist:
        tally, how = _histogram(list(hist), k), "from the file's accepted-length histogram"
    elif run.accepted_by_position and run.passes:
        tally = _histogram(passes_from_positions(run.passes, tuple(run.accepted_by_position)), k)
        how = "from the file's per-position totals"
    else:
        return EngineFigures(k, {}, 0, None, None, "")
    if not run.accepted_per_pass:
        how += ": how many passes kept each number of drafts is exact, the order of the passes is not in the file"
    return _figures(tally, max(k, len(tally.kept) - 1), c, v, how, getattr(run, "tested_by_position", None))


def _per_pass(run: ImportedRun, k: int) -> _Tally:
    kept = run.accepted_per_pass
    drafted = run.drafted_per_pass or (k,) * len(kept)
    if len(drafted) != len(kept):
        raise ValueError(f"{len(kept)} passes of accepted counts but {len(drafted)} of drafted counts")
    width = max(k, max(drafted))
    if width > MAX_K:
        raise ValueError(f"a pass of {width} drafts is more than the {MAX_K} this page draws")
    tally = _Tally([0] * (width + 1), [0] * (width + 1), 0, 0, sum(drafted))
    for i, (a, d) in enumerate(zip(kept, drafted)):
        if a < 0 or d < 0 or a > d:
            raise ValueError(f"pass {i + 1}: {a} drafts kept of {d} drafted is not a count")
        tally.short += d < width
        if d == 0:
            tally.plain += 1
            continue
        tally.kept[a] += 1
        tally.tested[min(a + 1, d)] += 1  # a chain tests up to its first rejection
    return tally


def _histogram(hist: list[int], k: int) -> _Tally:
    """Passes known by a histogram (``hist[j]`` kept exactly j drafts), each of K drafted."""
    if any(n < 0 for n in hist):
        raise ValueError("a negative count of passes in the accepted-length histogram")
    width = max(k, len(hist) - 1)
    kept = hist + [0] * (width + 1 - len(hist))
    tested = [0] * (width + 1)
    for j, n in enumerate(kept):
        tested[min(j + 1, width)] += n
    return _Tally(kept, tested, 0, 0, sum(kept) * width)


def _at_least(counts: list[int]) -> list[int]:
    """``out[i]`` = Σ_{j ≥ i} counts[j], with a final 0."""
    return list(accumulate(reversed(counts)))[::-1] + [0]


def _figures(t: _Tally, k: int, c, v, how: str, told: tuple[int, ...] | None) -> EngineFigures:
    drafting = sum(t.kept)
    kept_at, tested_at = _at_least(t.kept), _at_least(t.tested)
    tested = [tested_at[i] for i in range(1, k + 1)]
    if told:
        tested = [told[i - 1] if i - 1 < len(told) else tested[i - 1] for i in range(1, k + 1)]
    rates = []
    for i in range(1, k + 1):
        a, n = kept_at[i], tested[i - 1]
        if n < a:
            raise ValueError(f"position {i - 1} kept {a} drafts but was tested {n} times")
        rates.append(PositionRates(i, drafting, n, a, a / drafting if drafting else None, a / n if n else None))
    rates = tuple(rates)
    diagnostics = RunDiagnostics(k=k, positions=rates, zero_accept_share=t.kept[0] / drafting if drafting else None,
                                 accepted_length_histogram=list(t.kept), cliff=find_cliff(rates), calibration=(),
                                 engine_k=engine_k(rates, c, v))
    by_tokens = {j + 1: n for j, n in enumerate(t.kept) if n}
    if t.plain:
        by_tokens[1] = by_tokens.get(1, 0) + t.plain
    return EngineFigures(k, by_tokens, t.short, _counted_analysis(rates, k, drafting + t.plain, t.drafted), diagnostics,
                         how)


def _counted_analysis(rates: tuple[PositionRates, ...], k: int, passes: int, drafted: int) -> RunAnalysis:
    """A :class:`RunAnalysis` of counts alone: passes, proposed, tested, accepted, α, acceptance
    rate, tokens per pass and conditional acceptance by position; the timing fields those of a run
    with no rounds (nothing timed)."""
    tested, accepted = sum(p.tested for p in rates), sum(p.accepted for p in rates)
    return dataclasses.replace(
        analyse([], k, wall_s=0.0), target_passes=passes, proposed=drafted, tested=tested, accepted=accepted,
        emitted=passes + accepted, acceptance_rate=accepted / drafted if drafted else None,
        alpha=accepted / tested if tested else None, tokens_per_pass=(passes + accepted) / passes if passes else 0.0,
        proposed_per_pass=drafted / passes if passes else 0.0,
        per_position=tuple(PositionAcceptance(p.position, p.tested, p.accepted, p.conditional) for p in rates))
