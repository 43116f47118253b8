"""Health checks: what a run's counters hide. High α is not health.

Four failures users report that the usual figures (α, tokens per pass, speedup) do not show, each
checked from a run's :class:`~specviz.core.records.Round` records and said in one sentence with what to try
(:func:`check_health`; the app's summary and ``run --json``'s ``health``):

* **loop** (:func:`find_loop`): the output repeats one n-gram over and over while α is high. With
  greedy decoding a model can loop ("and and and …"), a lookup drafter copies the loop, and the
  counters show high acceptance and fast output (SwiftLM #88). A loop is a stretch where every
  token equals the one ``period`` tokens before it, for at least :data:`LOOP_MIN_COPIES` copies of
  the repeated phrase and :data:`LOOP_MIN_TOKENS` tokens, covering at least :data:`LOOP_MIN_SHARE`
  of the output, with α ≥ :data:`LOOP_ALPHA`.
* **no drafts** (:func:`draft_gaps`): a drafter that proposed nothing in the whole run, or nothing
  in more than :data:`FALLBACK_SHARE` of its passes when its kind always drafts (a model drafter: a
  silent fallback to plain steps), or that was asked for trees and drafted none (fell back to
  chains).
* **counters** (:func:`counter_mismatches`): counters that disagree with the emitted tokens: a
  pass's ``n_accepted`` against its accepted drafts and accepted tokens, more than K + 1 tokens in
  a pass, accepted > tested or tested > proposed, tokens after an end-of-text token (mlx-vlm
  #2324 counted accepted drafts past the stop token), more tokens than the run's limit.
* **bursts** (:func:`burstiness`): the stream's instantaneous tokens/s (each pass's tokens ÷ its
  time, :attr:`~specviz.core.records.Round.elapsed_s` differences) spread by more than
  :data:`BURST_RATIO` between its 90th and 10th percentiles over at least :data:`MIN_PASSES`
  passes, *and* some pass stalled (the longest took more than :data:`STALL_FACTOR` × the median):
  a reader sees stalls, then chunks. Chunks at an even pace alone (1 token, then K + 1) are how
  speculative decoding streams, not a failure. The sentence says whether the tokens per pass or
  the time per pass varied more.

Nothing here imports torch or runs a model.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from specviz.figures.analysis import RunAnalysis
from specviz.core.records import ACCEPTED, Round

__all__ = ["BURST_RATIO", "FALLBACK_SHARE", "LOOP_ALPHA", "LOOP_MIN_COPIES", "LOOP_MIN_SHARE", "LOOP_MIN_TOKENS",
           "MIN_PASSES", "STALL_FACTOR", "Health", "HealthCheck", "Loop", "burstiness", "check_health", "counter_mismatches",
           "draft_gaps", "find_loop"]

#: A loop: at least this many copies of the repeated phrase …
LOOP_MIN_COPIES = 3
#: … at least this many tokens long …
LOOP_MIN_TOKENS = 12
#: … covering at least this share of the output …
LOOP_MIN_SHARE = 0.25
#: … while the per-token α is at least this (a loop at low α is a bad model, not a hidden one).
LOOP_ALPHA = 0.6
#: Longest repeated phrase looked for (tokens).
LOOP_MAX_PERIOD = 32
#: A drafter that always drafts (a model) fell back when more passes than this drafted nothing.
FALLBACK_SHARE = 0.5
#: Bursty: 90th ÷ 10th percentile of the instantaneous tokens/s above this …
BURST_RATIO = 4.0
#: … over at least this many passes (also the fewest passes a fallback share is judged on) …
MIN_PASSES = 10
#: … with a pass that took more than this multiple of the median pass: a stall.
STALL_FACTOR = 3.0


@dataclass(frozen=True)
class HealthCheck:
    """One check: its name, whether it found the failure, and one sentence saying what it found and
    what to try (or that it found nothing)."""

    name: str
    found: bool
    sentence: str


@dataclass(frozen=True)
class Health:
    """Every check of a run, in the order of the module docstring."""

    checks: tuple[HealthCheck, ...]

    @property
    def found(self) -> list[HealthCheck]:
        """The checks that found something."""
        return [c for c in self.checks if c.found]

    def to_dict(self) -> dict:
        """Plain JSON-ready data: ``run --json``'s ``health`` (``ok`` when nothing was found)."""
        return {"ok": not self.found, "checks": [asdict(c) for c in self.checks]}


# --------------------------------------------------------------------------- the loop
@dataclass(frozen=True)
class Loop:
    """A stretch of the output repeating a phrase: ``period`` tokens long, starting at token
    ``start``, ``length`` tokens in all (``copies`` = length ÷ period)."""

    period: int
    start: int
    length: int
    phrase_ids: tuple[int, ...]
    phrase: str

    @property
    def copies(self) -> float:
        return self.length / self.period


def _tokens(rounds: list[Round]):
    return [t for r in rounds for t in r.emitted]


def find_loop(rounds: list[Round]) -> Loop | None:
    """The longest stretch of the output that repeats one phrase (every token equal to the one
    ``period`` before it, period 1..:data:`LOOP_MAX_PERIOD`), if it holds at least
    :data:`LOOP_MIN_COPIES` copies and :data:`LOOP_MIN_TOKENS` tokens; else None. Ties go to the
    shortest period (``a a a a`` is period 1, not 2)."""
    tokens = _tokens(rounds)
    ids = [t.id for t in tokens]
    best = None
    for period in range(1, min(LOOP_MAX_PERIOD, len(ids) // LOOP_MIN_COPIES) + 1):
        run = 0
        for i in range(period, len(ids) + 1):
            if i < len(ids) and ids[i] == ids[i - period]:
                run += 1
                continue
            length = run + period  # the first copy, then every token that repeated it
            if run and length >= max(LOOP_MIN_TOKENS, LOOP_MIN_COPIES * period) and (best is None or
                                                                                      length > best[2]):
                best = (period, i - length, length)
            run = 0
    if best is None:
        return None
    period, start, length = best
    phrase = tokens[start : start + period]
    return Loop(period, start, length, tuple(t.id for t in phrase), "".join(t.text for t in phrase))


def _loop_check(rounds: list[Round], a: RunAnalysis) -> HealthCheck:
    loop = find_loop(rounds)
    share = loop.length / a.emitted if loop and a.emitted else 0.0
    if loop is None or share < LOOP_MIN_SHARE or a.alpha is None or a.alpha < LOOP_ALPHA:
        return HealthCheck("loop", False, "No repeated-phrase loop at high α.")
    return HealthCheck("loop", True, (
        f"The output loops: the {loop.period}-token phrase {loop.phrase!r} repeats {loop.copies:.1f} times "
        f"({loop.length} of {a.emitted} tokens, from token {loop.start + 1}) while per-token α = {a.alpha:.2f} and "
        f"{a.tokens_per_pass:.2f} tokens per pass. High acceptance here measures the drafter copying a stuck target, "
        "not a good draft: try a temperature above 0, fewer new tokens, or another prompt."))


# --------------------------------------------------------------------------- no drafts, fallback
def draft_gaps(a: RunAnalysis, always_drafts: bool = False, branches_asked: int = 1) -> list[str]:
    """Sentences on a drafter that proposed nothing or fell back (empty when it drafted as asked).

    Args:
        a: the run's analysis (``k`` 0 for plain decoding: nothing to check).
        always_drafts: the drafter's kind drafts every pass (a model), so passes without a draft
            mean it fell back; a lookup drafts only where it finds a match.
        branches_asked: the B the run asked for; B > 1 with no tree pass is a fallback to chains.
    """
    if not a.k or not a.target_passes:
        return []
    if a.proposed == 0:
        return [f"The drafter proposed nothing in all {a.target_passes} passes: every pass was a plain target step, "
                "so this is plain decoding with extra bookkeeping. Try a drafter that drafts here (a lookup needs "
                "text to copy; the learned head or a draft model draft everywhere)."]
    gaps = []
    share = a.passes_without_draft or 0.0
    if always_drafts and share > FALLBACK_SHARE and a.target_passes >= MIN_PASSES:
        gaps.append(f"The drafter drafted nothing in {share:.0%} of passes although it always drafts: it fell back to "
                    "plain steps. Check the run's notes and the drafter's setup.")
    if branches_asked > 1 and a.tree_rounds == 0:
        gaps.append(f"Asked for trees (B = {branches_asked}), the run drafted none: it fell back to chains (the notes "
                    "say why when the target cannot take a tree mask), so the tree settings changed nothing.")
    return gaps


def _draft_check(a: RunAnalysis, always_drafts: bool, branches_asked: int) -> HealthCheck:
    gaps = draft_gaps(a, always_drafts, branches_asked)
    if not gaps:
        return HealthCheck("drafts", False, "The drafter drafted as asked." if a.k else "Plain decoding: no drafter.")
    return HealthCheck("drafts", True, " ".join(gaps))


# --------------------------------------------------------------------------- counters
def counter_mismatches(rounds: list[Round], k: int, eos_ids=(), max_new_tokens: int | None = None) -> list[str]:
    """Where the run's counters disagree with its emitted tokens, one phrase each (empty: none).

    Per pass: ``n_accepted`` against the drafts flagged accepted and the tokens emitted as
    accepted; at most K + 1 tokens; accepted ≤ tested ≤ proposed. Over the run: no token after an
    end-of-text id, and at most ``max_new_tokens`` tokens."""
    found = []
    for r in rounds:
        flagged = sum(1 for t in r.drafted if t.accepted)
        tested = sum(1 for t in r.drafted if t.tested)
        emitted = sum(1 for t in r.emitted if t.kind == ACCEPTED)
        if not r.n_accepted == flagged == emitted:
            found.append(f"pass {r.index + 1} counts {r.n_accepted} accepted drafts, but {flagged} drafts are flagged "
                         f"accepted and {emitted} tokens were emitted as accepted")
        if k and len(r.emitted) > max(k, r.k) + 1:
            found.append(f"pass {r.index + 1} emitted {len(r.emitted)} tokens, more than K + 1 = {max(k, r.k) + 1}")
        if not flagged <= tested <= len(r.drafted):
            found.append(f"pass {r.index + 1} has {flagged} accepted, {tested} tested and {len(r.drafted)} proposed "
                         "drafts (accepted ≤ tested ≤ proposed fails)")
    tokens = _tokens(rounds)
    stops = [i for i, t in enumerate(tokens) if t.id in set(eos_ids)]
    if stops and stops[0] < len(tokens) - 1:
        found.append(f"{len(tokens) - 1 - stops[0]} tokens were emitted after the end-of-text token at position "
                     f"{stops[0] + 1}")
    if max_new_tokens and len(tokens) > max_new_tokens:
        found.append(f"{len(tokens)} tokens were emitted against a limit of {max_new_tokens}")
    return found


def _counter_check(rounds, k, eos_ids, max_new_tokens) -> HealthCheck:
    found = counter_mismatches(rounds, k, eos_ids, max_new_tokens)
    if not found:
        return HealthCheck("counters", False, "The counters agree with the emitted tokens.")
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return HealthCheck("counters", True, (
        "The counters disagree with the emitted tokens: " + "; ".join(found[:3]) + more + ". Figures computed "
        "from these counters (α, tokens per pass) are wrong: trust the tokens, and report the mismatch."))


# --------------------------------------------------------------------------- bursts
def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def burstiness(rounds: list[Round]) -> dict | None:
    """The stream's instantaneous rates: per pass, tokens ÷ the pass's time (s, from
    ``elapsed_s`` differences; the first pass's time is its own ``elapsed_s`` less nothing, so it is
    left out, holding the prefill). Returns ``{"rates", "p10", "p90", "ratio", "tokens_cv", "time_cv",
    "longest_s", "median_s"}`` or None with fewer than :data:`MIN_PASSES` timed passes."""
    durations, counts = [], []
    for before, r in zip(rounds, rounds[1:]):
        seconds = r.elapsed_s - before.elapsed_s
        if seconds > 0:
            durations.append(seconds)
            counts.append(len(r.emitted))
    if len(durations) < MIN_PASSES:
        return None
    rates = [n / s for n, s in zip(counts, durations)]
    p10, p90 = _percentile(rates, 0.1), _percentile(rates, 0.9)

    def cv(values):
        mean = statistics.fmean(values)
        return statistics.pstdev(values) / mean if mean > 0 else 0.0

    return {"rates": rates, "p10": p10, "p90": p90, "ratio": p90 / p10 if p10 > 0 else float("inf"),
            "tokens_cv": cv(counts), "time_cv": cv(durations), "longest_s": max(durations),
            "median_s": statistics.median(durations)}


def _burst_check(rounds: list[Round]) -> HealthCheck:
    b = burstiness(rounds)
    if b is None or b["ratio"] <= BURST_RATIO or b["longest_s"] <= STALL_FACTOR * b["median_s"]:
        return HealthCheck("bursts", False, "The stream's pace was even." if b else
                           f"Too few passes (under {MIN_PASSES}) to judge the stream's pace.")
    if b["time_cv"] > b["tokens_cv"]:
        cause = ("most of the spread is time: something else held the machine during some passes; on a small "
                 "machine try one torch thread (SPECVIZ_THREADS=1) or close what competes for the cores")
    else:
        cause = ("most of the spread is the tokens per pass (passes that keep every draft against passes that "
                 "keep none): a smaller K evens the chunks, at some cost in speed")
    return HealthCheck("bursts", True, (
        f"The stream came in bursts: instantaneous speed ranged from {b['p10']:.1f} to {b['p90']:.1f} tokens/s "
        f"(10th to 90th percentile of the passes, {b['ratio']:.1f}×) and the longest pass took "
        f"{b['longest_s'] * 1e3:.0f} ms against a median of {b['median_s'] * 1e3:.0f} ms, so a reader sees stalls, "
        f"then chunks; {cause}."))


# --------------------------------------------------------------------------- all of them
def check_health(rounds: list[Round], a: RunAnalysis, eos_ids=(), max_new_tokens: int | None = None,
                 always_drafts: bool = False, branches_asked: int = 1) -> Health:
    """Every health check of a run (see the module docstring).

    Args:
        rounds: the run's rounds.
        a: their analysis (:func:`specviz.figures.analysis.analyse`).
        eos_ids: the target's end-of-text ids.
        max_new_tokens: the run's token limit (None: not checked).
        always_drafts: the drafter's kind drafts every pass (a model; :func:`draft_gaps`).
        branches_asked: the run's B.

    Returns:
        A :class:`Health` with one :class:`HealthCheck` per check, in order: loop, drafts, counters, bursts.
    """
    return Health((_loop_check(rounds, a), _draft_check(a, always_drafts, branches_asked),
                   _counter_check(rounds, a.k, eos_ids, max_new_tokens), _burst_check(rounds)))
