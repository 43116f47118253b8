"""Diagnostics of a run that engine users debug with, and the verification rules replayed on its
recorded passes (computed by :mod:`specviz.diagnose.rule_replay`): every figure defined once, from a run's
(or a loaded trace's) :class:`~specviz.core.records.Round` records. Nothing here imports torch or runs a
model.

The app's Run tab and summary, ``python -m specviz run --json`` and the bench read these figures
from :func:`diagnose` (one :class:`RunDiagnostics`).

**Acceptance by position** (:func:`acceptance_by_position`), two figures model cards publish side by
side and learners confuse:

* *full* acceptance at position i = passes that accepted a draft at position i ÷ drafting passes:
  the share of all passes that *reach* past position i. vLLM's per-position acceptance
  (``num_accepted_tokens_per_pos[i] / num_drafts``, vllm/v1/spec_decode/metrics.py) and llama.cpp's
  "acceptance rate per position" are this figure.
* *conditional* acceptance at position i = accepted at i ÷ tested at i: of the passes whose test got
  as far as position i, the share that kept it (:attr:`specviz.figures.analysis.PositionAcceptance.rate`).
  Leviathan et al.'s model says it is α at every i; the full figure then decays as α^i.

**Zero-accept share** (:func:`zero_accept_share`): drafting passes that kept no draft ÷ drafting
passes. **Accepted-length histogram** (:func:`accepted_length_histogram`): drafting passes by how
many drafts they kept, 0..K, the bonus/resampled token not counted: the units of vLLM's
``acceptance_histogram`` and SGLang's ``spec_correct_drafts_histogram``.

**Cliff** (:func:`find_cliff`): a sharp fall of conditional acceptance after one position, the sign
users found a sliding-window bug by (AEON DFlash #6: 0.600, 0.385, 0.215, 0.108, 0.062, 0) and a
llama.cpp regression (#23544: 0.637 → 0.237).

**Calibration** (:func:`calibration`): tested drafts binned by p_draft of the drafted token,
against the share accepted (EAGLE-2's dynamic trees, llama.cpp's ``--spec-draft-p-min`` and DSpark
steer by this confidence).

**The K an engine would pick** (:func:`engine_k`): vLLM's Adaptive K goodput model (vLLM PR #47111).

**Rules on recorded passes** (:func:`specviz.diagnose.rule_replay.rules_on_passes`, re-exported here with the
names the diagnostics' readers use): for every pass, with its drafts and recorded distributions,
what each verification rule would accept; :mod:`specviz.diagnose.rule_replay` defines each figure and its
bounds from a trace's top-10 lists, shared with Watch a pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specviz.figures.analysis import PositionAcceptance, draft_depth, per_position_acceptance
from specviz.diagnose.rule_replay import (EXTRA_FIGURES, RULES, TOP_TOKENS_KEPT, PositionBounds, Range, RuleEstimate, RulesOnPasses,
                          block_reach, rules_on_passes)
from specviz.core.records import Round

#: The bounds at one position under the name this module gave them before
#: :mod:`specviz.diagnose.rule_replay` held them (tests/test_diagnostics.py reads it).
_Position = PositionBounds

__all__ = [
    "CALIBRATION_BINS",
    "CLIFF_RATIO",
    "DIAGNOSTICS_HEADERS",
    "EXTRA_FIGURES",
    "RULES",
    "TOP_TOKENS_KEPT",
    "CalibrationBin",
    "Cliff",
    "EngineK",
    "PositionRates",
    "RuleEstimate",
    "RulesOnPasses",
    "RunDiagnostics",
    "acceptance_by_position",
    "accepted_length_histogram",
    "block_reach",
    "calibration",
    "describe",
    "diagnose",
    "diagnostics_row",
    "engine_k",
    "find_cliff",
    "format_range",
    "rules_on_passes",
    "zero_accept_share",
]



# --------------------------------------------------------------------------- acceptance by position
@dataclass(frozen=True)
class PositionRates:
    """Acceptance at draft position i (depth i), full and conditional.

    ``full`` = accepted ÷ ``drafting_passes`` (the share of all drafting passes that kept a draft at
    position i); ``conditional`` = accepted ÷ tested (of the passes that tested position i, the share
    that kept it). None where the denominator is 0.
    """

    position: int
    drafting_passes: int
    tested: int
    accepted: int
    full: float | None
    conditional: float | None


def _drafting(rounds: list[Round]) -> list[Round]:
    return [r for r in rounds if r.drafted]


def acceptance_by_position(rounds: list[Round], k: int) -> tuple[PositionRates, ...]:
    """Full and conditional acceptance at each draft position i = 1..max(K, deepest draft).

    full_i = A_i ÷ P and conditional_i = A_i ÷ T_i, with P the passes that drafted something, T_i
    the passes whose accept test reached position i and A_i the passes that kept a draft there
    (vLLM's ``num_accepted_tokens_per_pos[i] / num_drafts`` is full_i). In a tree, position i is
    depth i (:func:`specviz.figures.analysis.analyse`).

    Args:
        rounds: the run's rounds; k: the lookahead K asked for.

    Returns:
        One :class:`PositionRates` per position, position 1 first.
    """
    passes = len(_drafting(rounds))
    return tuple(_rates(p, passes) for p in per_position_acceptance(rounds, k))


def _rates(p: PositionAcceptance, passes: int) -> PositionRates:
    return PositionRates(p.position, passes, p.tested, p.accepted, p.accepted / passes if passes else None, p.rate)


def zero_accept_share(rounds: list[Round]) -> float | None:
    """Drafting passes that kept none of their drafts ÷ drafting passes (None: nothing drafted).

    A pass that drafted nothing (prompt lookup without a match, plain decoding) is not a drafting
    pass. Each zero-accept pass paid for its drafts and a verify pass and emitted one token.
    """
    drafting = _drafting(rounds)
    return sum(1 for r in drafting if r.n_accepted == 0) / len(drafting) if drafting else None


def accepted_length_histogram(rounds: list[Round], k: int) -> list[int]:
    """Drafting passes by accepted drafts: entry j counts the passes that kept exactly j drafts,
    j = 0..max(K, deepest draft). The target's own token (resampled or bonus) is not counted: the
    units of vLLM's ``acceptance_histogram`` and SGLang's ``spec_correct_drafts_histogram``."""
    width = max([k] + [draft_depth(r) for r in _drafting(rounds)])
    counts = [0] * (width + 1)
    for r in _drafting(rounds):
        counts[r.n_accepted] += 1
    return counts


# --------------------------------------------------------------------------- the cliff
#: A cliff: conditional acceptance at i + 1 at most this fraction of that at i …
CLIFF_RATIO = 0.5
#: … and at most this fraction of the run's usual step ratio (the median of the other steps) …
CLIFF_VS_USUAL = 0.6
#: … and, where counts are known, significant: a one-sided two-proportion z above this.
CLIFF_Z = 3.0


@dataclass(frozen=True)
class Cliff:
    """A sharp fall of conditional acceptance after ``position`` (from ``before`` to ``after``)."""

    position: int
    before: float
    after: float
    sentence: str


def find_cliff(positions) -> Cliff | None:
    """Where conditional acceptance collapses after a position, or None.

    A step i → i + 1 is a cliff when α_{i+1} ≤ :data:`CLIFF_RATIO` · α_i, and α_{i+1}/α_i ≤
    :data:`CLIFF_VS_USUAL` × the median of the run's other step ratios (1 when there are fewer than
    two others: Leviathan et al.'s model has conditional acceptance flat), and, when counts are
    given, the fall is significant: (α_i − α_{i+1}) / √(α̂(1 − α̂)(1/T_i + 1/T_{i+1})) ≥
    :data:`CLIFF_Z`, α̂ the pooled rate (a one-sided two-proportion z-test, false alarm about
    0.1% a step). The sharpest such step (lowest ratio) is reported. So a smooth geometric decay,
    every step the same ratio, is never a cliff, however steep; 0.637 → 0.237 (llama.cpp #23544)
    is one; and in 0.600, 0.385, 0.215, 0.108, 0.062, 0 (AEON DFlash #6), the fall to 0 after
    position 5 is.

    Args:
        positions: :class:`PositionRates` (or :class:`~specviz.figures.analysis.PositionAcceptance`), or a
            list of conditional rates (floats or None), position 1 first. Positions never tested
            end the sequence.

    Returns:
        A :class:`Cliff` with a one-sentence diagnosis, or None.
    """
    rates, tested = [], []
    for p in positions:
        rate = p if p is None or isinstance(p, (int, float)) else getattr(p, "conditional", getattr(p, "rate", None))
        if rate is None:
            break
        rates.append(float(rate))
        tested.append(None if isinstance(p, (int, float)) else p.tested)
    steps = [(i, rates[i + 1] / rates[i]) for i in range(len(rates) - 1) if rates[i] > 0]
    best = None
    for i, ratio in steps:
        others = sorted(r for j, r in steps if j != i)
        usual = _median(others) if len(others) >= 2 else 1.0
        if ratio > CLIFF_RATIO or ratio > CLIFF_VS_USUAL * usual:
            continue
        if tested[i] and tested[i + 1] and _z(rates[i], tested[i], rates[i + 1], tested[i + 1]) < CLIFF_Z:
            continue
        if best is None or ratio < best[1]:
            best = (i, ratio)
    if best is None:
        return None
    i = best[0]
    before, after = rates[i], rates[i + 1]
    sentence = (f"Conditional acceptance collapses after position {i + 1}: {before:.3f} of the tested drafts kept "
                f"there, {after:.3f} at position {i + 2}, a fall far sharper than the run's other steps. Something "
                f"changes past position {i + 1} (a sliding attention window, a cache or position bug, a draft head "
                f"trained for fewer steps), and drafting beyond K = {i + 1} mostly buys draft steps that are thrown "
                "away.")
    return Cliff(i + 1, before, after, sentence)


def _z(a: float, n: int, b: float, m: int) -> float:
    pooled = (a * n + b * m) / (n + m)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n + 1 / m))
    return (a - b) / se if se > 0 else math.inf


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


# --------------------------------------------------------------------------- calibration
#: Equal-width bins of p_draft over [0, 1].
CALIBRATION_BINS = 10


@dataclass(frozen=True)
class CalibrationBin:
    """Tested drafts whose p_draft fell in [``low``, ``high``): how many, their mean p_draft, the
    share accepted, and the mean acceptance probability the test used (min(1, p_target/p_draft)
    for a chain's full rule)."""

    low: float
    high: float
    tested: int
    mean_p_draft: float
    accepted_rate: float
    mean_accept_prob: float


def calibration(rounds: list[Round], bins: int = CALIBRATION_BINS) -> tuple[CalibrationBin, ...]:
    """The draft's confidence against how often it was kept: every tested draft token, binned by
    its p_draft (``bins`` equal bins over [0, 1], p_draft = 1 in the last), each bin's accepted ÷
    tested. Empty bins are left out; so is a run recorded without probabilities (the bench's
    uninstrumented timing, where every p_draft is 0).

    Under the one-hot and exact-match rules a draft is kept with probability p_target(x), so a
    draft whose p_draft matched p_target would sit on the diagonal; under the full rule the
    acceptance probability is min(1, p_target/p_draft), shown as ``mean_accept_prob``.
    """
    tokens = [t for r in rounds for t in r.drafted if t.tested]
    if not any(t.p_draft > 0 for t in tokens):
        return ()
    sums = [[0, 0.0, 0, 0.0] for _ in range(bins)]
    for t in tokens:
        b = sums[min(bins - 1, max(0, int(t.p_draft * bins)))]
        b[0] += 1
        b[1] += t.p_draft
        b[2] += t.accepted
        b[3] += t.accept_prob
    return tuple(CalibrationBin(i / bins, (i + 1) / bins, n, p / n, a / n, q / n)
                 for i, (n, p, a, q) in enumerate(sums) if n)


# --------------------------------------------------------------------------- engine K
@dataclass(frozen=True)
class EngineK:
    """The K vLLM's Adaptive K would pick: ``k`` and its goodput, with the goodput of every K."""

    k: int
    goodput: float
    goodputs: tuple[float, ...]
    c: float
    v: float


def engine_k(alphas, c: float | None, v: float | None) -> EngineK | None:
    """The lookahead an engine would pick from the measured conditional acceptance and costs.

    vLLM's Adaptive K (vLLM PR #47111, "Per-position EMA goodput cost model"; its README and
    ``tests/v1/core/test_adaptive_k.py``): maximise goodput(K) = E_acc(K) / (1 + K·c + verify
    overhead) with E_acc(K) = 1 + Σ_{i≤K} Π_{j≤i} α_j, α_j the *conditional* acceptance at position j
    (DISCO, Mamou et al. 2024, §3), c the draft step ÷ target step, and the verify cost constant in
    K (vLLM pads the verify pass to the configured K). Here 1 + verify overhead is the measured v
    (:attr:`specviz.figures.analysis.RunAnalysis.verify_cost_v`), and goodput(0) = 1 (plain decoding, one
    token a step): K = 0 is picked when no K beats it, as vLLM's does. Ties go to the smaller K.
    vLLM smooths α_j with an EMA and holds K for a cooldown; on a finished run the whole run's α_j
    stand in for the EMA. K runs over the positions measured (α_j known; a position after one
    that kept nothing is never tested, and reaching it has probability 0), so at most the run's K.

    Args:
        alphas: conditional acceptance per position (floats, or :class:`PositionRates`), position 1
            first; the first None ends them.
        c, v: the measured cost ratio and verify cost (None: no plain baseline, so no answer).

    Returns:
        An :class:`EngineK`, or None without c, v or any measured α.
    """
    if c is None or not v:
        return None
    rates = []
    for a in alphas:
        a = a if a is None or isinstance(a, (int, float)) else a.conditional
        if a is None and not (rates and rates[-1] == 0.0):
            break
        rates.append(float(a or 0.0))  # past a position that kept nothing, nothing is ever reached
    if not rates:
        return None
    goodputs, reach, e_acc = [1.0], 1.0, 1.0
    for i, a in enumerate(rates, start=1):
        reach *= a
        e_acc += reach
        goodputs.append(e_acc / (i * c + v))
    best = max(range(len(goodputs)), key=lambda i: (goodputs[i], -i))
    return EngineK(best, goodputs[best], tuple(goodputs), c, v)




def format_range(value: Range, spec: str = ".2f") -> str:
    """A ``(low, high)`` figure as every front-end writes it: ``"2.31"`` when the two agree at
    ``spec``'s precision, else ``"[2.29, 2.35]"``."""
    lo, hi = (format(x, spec) for x in value)
    return lo if lo == hi else f"[{lo}, {hi}]"


# --------------------------------------------------------------------------- all of them
@dataclass(frozen=True)
class RunDiagnostics:
    """Every diagnostic of one run (:func:`diagnose`); each field is one function's figure."""

    k: int
    positions: tuple[PositionRates, ...]
    zero_accept_share: float | None
    accepted_length_histogram: list[int]
    cliff: Cliff | None
    calibration: tuple[CalibrationBin, ...]
    engine_k: EngineK | None
    rules: RulesOnPasses | None = field(default=None)

    def to_dict(self) -> dict:
        """Plain JSON-ready data: what ``run --json`` and a bench row hold (keys as the fields,
        ``expected_tokens_per_pass`` the four rules' ``[low, high]`` in one place)."""
        rules = self.rules
        return {
            "zero_accept_share": self.zero_accept_share,
            "acceptance_by_position": [vars(p) for p in self.positions],
            "accepted_length_histogram": list(self.accepted_length_histogram),
            "cliff": None if self.cliff is None else vars(self.cliff),
            "calibration": [vars(b) for b in self.calibration],
            "engine_k": None if self.engine_k is None else {
                "k": self.engine_k.k, "goodput": self.engine_k.goodput, "goodputs": list(self.engine_k.goodputs),
                "c": self.engine_k.c, "v": self.engine_k.v, "learner_k": self.k,
                "learner_goodput": _goodput_at(self.engine_k, self.k)},
            "expected_tokens_per_pass": None if rules is None else {
                name: list(rules.rules[name].tokens_per_pass) for name in RULES + EXTRA_FIGURES},
            "rules_on_passes": None if rules is None else rules.to_dict(),
        }


def _goodput_at(e: EngineK, k: int) -> float | None:
    return e.goodputs[k] if 0 <= k < len(e.goodputs) else None


def diagnose(rounds: list[Round], k: int, c: float | None = None, v: float | None = None) -> RunDiagnostics:
    """Every diagnostic of a run from its rounds, its lookahead K and (for the engine's K) the
    measured c and v (:class:`specviz.figures.analysis.RunAnalysis`'s ``cost_ratio_c`` and
    ``verify_cost_v``; None without a plain baseline)."""
    positions = acceptance_by_position(rounds, k)
    return RunDiagnostics(
        k=k,
        positions=positions,
        zero_accept_share=zero_accept_share(rounds),
        accepted_length_histogram=accepted_length_histogram(rounds, k),
        cliff=find_cliff(positions),
        calibration=calibration(rounds),
        engine_k=engine_k(positions, c, v),
        rules=rules_on_passes(rounds, k),
    )


# --------------------------------------------------------------------------- in words
#: What :func:`describe` names each figure, in order (the bench's column headers).
DIAGNOSTICS_HEADERS = (
    "zero-accept share (drafting passes that kept no draft)",
    "acceptance by position, full / conditional (kept ÷ drafting passes / kept ÷ tested)",
    "accepted drafts per pass, 0..K (passes; bonus not counted, vLLM's units)",
    "expected tokens per pass by rule, on these passes: full · one-hot · exact-match · block",
    "an engine would pick (vLLM Adaptive K: max E_acc(K)/(K·c + v))",
    "cliff",
)


def _share(x) -> str:
    return "—" if x is None else f"{x:.1%}"


def _rate(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def describe(d: dict) -> list[tuple[str, str]]:
    """``(name, value)`` rows of :meth:`RunDiagnostics.to_dict`'s data, names
    :data:`DIAGNOSTICS_HEADERS`: what the app's summary, ``run``'s text and the bench's report write."""
    positions = " · ".join(f"{i}: {_rate(p['full'])} / {_rate(p['conditional'])}"
                           for i, p in enumerate(d["acceptance_by_position"], start=1) if p["tested"])
    histogram = " · ".join(f"{j}: {n}" for j, n in enumerate(d["accepted_length_histogram"]))
    rules = d["expected_tokens_per_pass"]
    if rules is None:
        by_rule = "— (needs a chain run recorded with its distributions)"
    else:
        on = d["rules_on_passes"]
        by_rule = " · ".join(f"{name} {format_range(tuple(rules[name]))}" for name in RULES)
        by_rule += (f" (measured {on['measured_tokens_per_pass']:.2f}; one-hot and exact match keep an argmax "
                    "draft equally often, p_target(argmax), and differ only in what they sample after a rejection; "
                    f"full rule on these very drafts "
                    f"{format_range(tuple(rules['full-these-drafts']))}; {on['passes']} passes")
        skipped = [f"{on['skipped_tree']} tree passes" if on["skipped_tree"] else "",
                   f"{on['skipped_unrecorded']} without distributions" if on["skipped_unrecorded"] else ""]
        by_rule += (", left out: " + ", ".join(s for s in skipped if s) if any(skipped) else "") + ")"
    e = d["engine_k"]
    if e is None:
        engine = "— (needs c and v: a plain baseline)"
    else:
        learner = e["learner_goodput"]
        engine = (f"K = {e['k']} (goodput {e['goodput']:.2f} tokens per plain-step cost, c = {e['c']:.3f}, "
                  f"v = {e['v']:.2f}); this run's K = {e['learner_k']}"
                  + (f" ({learner:.2f})" if learner is not None else " (beyond the measured positions)"))
    cliff = d["cliff"]["sentence"] if d["cliff"] else "none: no sharp fall of conditional acceptance"
    values = (_share(d["zero_accept_share"]), positions or "—", histogram or "—", by_rule, engine, cliff)
    return list(zip(DIAGNOSTICS_HEADERS, values))


def diagnostics_row(d: dict) -> list[str]:
    """The values of :func:`describe`, in :data:`DIAGNOSTICS_HEADERS` order (a bench table row)."""
    return [value for _, value in describe(d)]
