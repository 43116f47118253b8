"""Diagnostics of a run that engine users debug with, and the verification rules replayed on its
recorded passes: every figure defined once, here, from a run's (or a loaded trace's)
:class:`~specviz.trace.Round` records. Nothing here imports torch or runs a model.

The app's Run tab and summary, ``python -m specviz run --json`` and the bench read these figures
from :func:`diagnose` (one :class:`RunDiagnostics`).

**Acceptance by position** (:func:`acceptance_by_position`), two figures model cards publish side by
side and learners confuse:

* *full* acceptance at position i = passes that accepted a draft at position i ÷ drafting passes:
  the share of all passes that *reach* past position i. vLLM's per-position acceptance
  (``num_accepted_tokens_per_pos[i] / num_drafts``, vllm/v1/spec_decode/metrics.py) and llama.cpp's
  "acceptance rate per position" are this figure.
* *conditional* acceptance at position i = accepted at i ÷ tested at i: of the passes whose test got
  as far as position i, the share that kept it (:attr:`specviz.analysis.PositionAcceptance.rate`).
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

**Rules on recorded passes** (:func:`rules_on_passes`): for every pass, with its drafts and recorded
distributions, what each verification rule would accept:

* ``"full"``: Chen et al. 2023 / Leviathan et al. 2023, accept x with min(1, p_target(x)/p_draft(x));
  a sampled draft is accepted at a position with probability Σ_x min(p_target(x), p_draft(x))
  (Leviathan et al., Theorem 3.5).
* ``"one-hot"`` (vLLM V1, PR #16899): the draft proposes its argmax a, treated as a point mass,
  accepted with probability p_target(a).
* ``"exact-match"`` (llama.cpp): the draft proposes its argmax a, the target samples its own token,
  kept when they are equal: probability p_target(a) again. ``"exact-match-sampled"``: the same test
  on a draft *sampled* from p_draft: Σ_x p_target(x)·p_draft(x).
* ``"block"``: block verification, Sun et al. 2024 (arXiv 2403.10444, Algorithm 2), on the pass's
  own drafted block (:func:`block_reach`).
* ``"full-these-drafts"``: the full rule on the pass's own drafted block, Π_{j≤i} min(1,
  p_target(x_j)/p_draft(x_j)): the figure block verification is compared with on the same drafts.

A trace keeps the top :data:`TOP_TOKENS_KEPT` tokens of each distribution
(:data:`specviz.recorder.TOP_TOKENS`), plus the exact p_draft and p_target of the drafted token.
The rest is an "other tokens" bucket whose mass is known (1 − the kept mass) and whose every token
is at most the smallest kept probability. Each figure that needs a whole distribution is therefore
given as a ``(low, high)`` range that contains the exact value (:class:`_Position` says how each is
bounded); figures that need only the drafted tokens (``"full-these-drafts"``) have low = high.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .analysis import PositionAcceptance, _depths, _per_position, is_tree_round
from .rules import RULES as ALL_RULES
from .trace import Round

__all__ = [
    "CALIBRATION_BINS",
    "CLIFF_RATIO",
    "DIAGNOSTICS_HEADERS",
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

#: The exact rules, by the names the CLI's ``--rule`` uses (:data:`specviz.rules.RULES`, the lossy
#: control left out: no closed form says what it would accept).
RULES = tuple(name for name, rule in ALL_RULES.items() if rule.lossless)
#: Figures shown beside them: the exact-match test on a sampled draft, and the full rule on the
#: pass's own drafts (block verification's like-for-like comparison).
EXTRA_FIGURES = ("exact-match-sampled", "full-these-drafts")

#: Tokens a trace keeps per distribution (:data:`specviz.recorder.TOP_TOKENS`, which imports torch;
#: a test checks the two agree). A shorter list is the whole distribution (zero-probability ids are
#: left out).
TOP_TOKENS_KEPT = 10

Range = tuple[float, float]


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
    depth i (:func:`specviz.analysis.analyse`).

    Args:
        rounds: the run's rounds; k: the lookahead K asked for.

    Returns:
        One :class:`PositionRates` per position, position 1 first.
    """
    passes = len(_drafting(rounds))
    return tuple(_rates(p, passes) for p in _per_position(rounds, k))


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
    width = max([k] + [max(_depths(r)) for r in _drafting(rounds)])
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
        positions: :class:`PositionRates` (or :class:`~specviz.analysis.PositionAcceptance`), or a
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
    (:attr:`specviz.analysis.RunAnalysis.verify_cost_v`), and goodput(0) = 1 (plain decoding, one
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


# --------------------------------------------------------------------------- rules on recorded passes
class _Position:
    """The recorded distributions at one drafted position, and bounds on the figures that need the
    whole of them.

    Known exactly: p_draft of the ids in ``top_draft`` and p_target of those in ``top_target``, and
    both of the drafted token. Unknown: the "other tokens" bucket. Its p_draft mass is
    ``rest_draft`` = 1 − Σ known p_draft and every p_draft in it is at most ``cap_draft`` = the
    smallest kept p_draft (0 when the list is shorter than :data:`TOP_TOKENS_KEPT`: then it was the
    whole distribution); likewise for p_target. K is the ids where both are known.
    """

    def __init__(self, token) -> None:
        self.draft = {int(i): float(p) for i, _, p in token.top_draft}
        self.target = {int(i): float(p) for i, _, p in token.top_target}
        self.argmax = int(token.top_draft[0][0]) if token.top_draft else None
        self.draft.setdefault(token.id, token.p_draft)
        self.target.setdefault(token.id, token.p_target)
        self.rest_draft = max(0.0, 1.0 - sum(self.draft.values()))
        self.rest_target = max(0.0, 1.0 - sum(self.target.values()))
        self.cap_draft = min(self.rest_draft, _cap(token.top_draft))
        self.cap_target = min(self.rest_target, _cap(token.top_target))
        self.both = self.draft.keys() & self.target.keys()
        self.draft_only = [self.draft[i] for i in self.draft.keys() - self.both]
        self.target_only = [self.target[i] for i in self.target.keys() - self.both]

    def _outside_both(self, target: bool) -> float:
        """Σ of p_target (``target``) or p_draft over the ids outside K: 1 − its sum over K."""
        known = self.target if target else self.draft
        return max(0.0, 1.0 - sum(known[i] for i in self.both))

    def excess(self, weight: float, of_target: bool = True) -> Range:
        """Σ_x max(w·a(x) − b(x), 0) with (a, b) = (p_target, p_draft), or (p_draft, p_target) when
        not ``of_target``.

        Low: the sum over K plus, for an id where only a is known, max(w·a − cap_b, 0) (its b is at
        most cap_b). High: the sum over K plus the least of w·Σ_{x∉K} a and the per-token caps
        (w·a for an id where only a is known, max(w·cap_a − b, 0) where only b is, w·rest_a for the
        bucket)."""
        a, b = (self.target, self.draft) if of_target else (self.draft, self.target)
        a_only, b_only = (self.target_only, self.draft_only) if of_target else (self.draft_only, self.target_only)
        cap_a, cap_b = (self.cap_target, self.cap_draft) if of_target else (self.cap_draft, self.cap_target)
        rest_a = self.rest_target if of_target else self.rest_draft
        base = sum(max(weight * a[i] - b[i], 0.0) for i in self.both)
        low = base + sum(max(weight * q - cap_b, 0.0) for q in a_only)
        caps = (sum(weight * q for q in a_only) + sum(max(weight * cap_a - d, 0.0) for d in b_only)
                + weight * rest_a)
        return low, base + min(weight * self._outside_both(of_target), caps)

    def overlap(self) -> Range:
        """Σ_x min(p_target, p_draft): the full rule's acceptance of a sampled draft.

        It equals 1 − Σ_x max(p_target − p_draft, 0) and 1 − Σ_x max(p_draft − p_target, 0), so
        each bound on an :meth:`excess` bounds it; the tightest of the two is kept. (Both lows are
        at least the sum over K alone.)"""
        t_lo, t_hi = self.excess(1.0, of_target=True)
        d_lo, d_hi = self.excess(1.0, of_target=False)
        return _ordered(max(0.0, 1.0 - min(t_hi, d_hi)), min(1.0, 1.0 - max(t_lo, d_lo)))

    def target_of_argmax(self) -> Range:
        """p_target(argmax p_draft): the one-hot and exact-match acceptance of an argmax draft.
        Exact when the argmax is among the kept target ids, else [0, cap_target]."""
        if self.argmax in self.target:
            value = self.target[self.argmax]
            return value, value
        return 0.0, self.cap_target

    def dot(self) -> Range:
        """Σ_x p_target(x)·p_draft(x): exact match of a sampled draft. Low: the sum over K. High:
        that plus the least of the per-token caps (p_draft·cap_target, p_target·cap_draft, the
        bucket min(cap_draft·rest_target, cap_target·rest_draft)) and max p_draft outside K ×
        Σ_{x∉K} p_target."""
        base = sum(self.draft[i] * self.target[i] for i in self.both)
        caps = (sum(p * self.cap_target for p in self.draft_only) + sum(p * self.cap_draft for p in self.target_only)
                + min(self.cap_draft * self.rest_target, self.cap_target * self.rest_draft))
        top_draft_outside = max(self.draft_only + [self.cap_draft])
        extra = min(caps, top_draft_outside * self._outside_both(True))
        return base, min(1.0, base + extra)

    def block_mass(self, p: float) -> Range:
        """S = Σ_x max(p·p_target(x) − p_draft(x), 0), the numerator of Sun et al.'s h_i at weight
        p (:meth:`excess`)."""
        return self.excess(p, of_target=True)


def _ordered(low: float, high: float) -> Range:
    """(low, high), swapped back where float rounding crossed two equal bounds of an exact figure."""
    return (low, high) if low <= high else (high, low)


def _cap(top: list) -> float:
    """The largest probability a token left out of a top list can have."""
    return float(min(p for _, _, p in top)) if len(top) >= TOP_TOKENS_KEPT else 0.0


def _ratio_test(p_target: float, p_draft: float) -> float:
    """min(1, p_target/p_draft), the full rule's acceptance of one drafted token."""
    return min(1.0, p_target / p_draft) if p_draft > 0 else float(p_target > 0)


def _h(mass: float, p: float) -> float:
    """Sun et al.'s h_i = mass / (mass + 1 − p_i); 1 when p_i = 1 (the limit for any mass > 0)."""
    return 1.0 if p >= 1.0 else mass / (mass + 1.0 - p)


def block_reach(p_target: list[float], p_draft: list[float], masses: list[float]) -> list[float]:
    """P(block verification keeps at least i drafts | this drafted block), i = 1..γ.

    Sun et al. 2024 (arXiv 2403.10444), Algorithm 2: with p_0 = 1,
    p_i = min(1, p_{i−1} · p_target(x_i) / p_draft(x_i)), and
    h_i = S_i / (S_i + 1 − p_i), S_i = Σ_x max(p_i · p_target(x | x_≤i) − p_draft(x | x_≤i), 0), for
    i < γ, h_γ = p_γ. Independent η_i ~ U(0, 1) give τ = max{i : η_i ≤ h_i} (0 if none), so
    P(τ ≥ i) = 1 − Π_{j=i..γ} (1 − h_j), and E[τ] = Σ_i P(τ ≥ i). (On the paper's example,
    p_target = (1/3, 2/3), p_draft = (2/3, 1/3), γ = 2, this gives E[τ] = 11/9 over drafted blocks,
    against the full rule's 10/9.) P(τ ≥ i) increases with every h_j, which increases with S_j, so
    bounds on S give bounds on it.

    Args:
        p_target, p_draft: the drafted tokens' probabilities, positions 1..γ.
        masses: S_1..S_{γ−1} (the distributions at position i + 1, weighted by p_i).

    Returns:
        ``[P(τ ≥ 1), ..., P(τ ≥ γ)]``.
    """
    weights, p = [], 1.0
    for t, d in zip(p_target, p_draft):
        p = min(1.0, p * t / d) if d > 0 else float(p * t > 0)
        weights.append(p)
    h = [_h(m, w) for m, w in zip(masses, weights)] + weights[len(masses):]
    reach, miss = [], 1.0
    for hj in reversed(h):
        miss *= 1.0 - hj
        reach.append(1.0 - miss)
    return reach[::-1]


def _block_weights(drafted) -> list[float]:
    weights, p = [], 1.0
    for t in drafted:
        p = min(1.0, p * t.p_target / t.p_draft) if t.p_draft > 0 else float(p * t.p_target > 0)
        weights.append(p)
    return weights


@dataclass(frozen=True)
class RuleEstimate:
    """One rule replayed on the recorded passes, every figure a ``(low, high)`` range.

    ``tokens_per_pass``: the mean over the analysed passes of 1 + expected drafts kept (a pass
    with nothing drafted counts 1). ``reach[i-1]``: the mean over the drafting passes of the
    probability the rule keeps at least i drafts (the rule's *full* acceptance at position i).
    ``accept[i-1]``: the mean over the passes that drafted position i of the rule's acceptance
    probability there, given the recorded prefix (its *conditional* acceptance); None for block
    verification, which decides the block jointly.
    """

    rule: str
    tokens_per_pass: Range
    reach: tuple[Range, ...]
    accept: tuple[Range | None, ...]

    @property
    def exact(self) -> bool:
        """Whether the recorded data pin every figure down (low = high)."""
        return self.tokens_per_pass[0] == self.tokens_per_pass[1] and all(lo == hi for lo, hi in self.reach)

    def to_dict(self) -> dict:
        return {"tokens_per_pass": list(self.tokens_per_pass), "reach_by_position": [list(r) for r in self.reach],
                "accept_by_position": [None if a is None else list(a) for a in self.accept], "exact": self.exact}


@dataclass(frozen=True)
class RulesOnPasses:
    """What each rule would do with a run's recorded passes (:func:`rules_on_passes`).

    ``passes``: the passes analysed (chains recorded with distributions, and passes that drafted
    nothing); ``drafting_passes`` those that drafted; ``skipped_tree`` and
    ``skipped_unrecorded`` the passes left out (tree drafts; passes recorded without
    distributions); ``measured_tokens_per_pass``: what the run itself emitted per pass over the
    analysed passes, under the rule it ran.
    """

    passes: int
    drafting_passes: int
    skipped_tree: int
    skipped_unrecorded: int
    measured_tokens_per_pass: float
    rules: dict[str, RuleEstimate]

    def to_dict(self) -> dict:
        return {"passes": self.passes, "drafting_passes": self.drafting_passes, "skipped_tree": self.skipped_tree,
                "skipped_unrecorded": self.skipped_unrecorded,
                "measured_tokens_per_pass": self.measured_tokens_per_pass,
                "rules": {name: estimate.to_dict() for name, estimate in self.rules.items()}}


def _token_rule_pass(positions: list[_Position], figure: str) -> tuple[list[Range], list[Range]]:
    """(acceptance, reach) ranges at each position of one pass under a token-by-token rule whose
    per-position acceptance is ``figure`` of :class:`_Position`: reach_i = Π_{j≤i} a_j."""
    accept = [getattr(p, figure)() for p in positions]
    reach, lo, hi = [], 1.0, 1.0
    for a_lo, a_hi in accept:
        lo, hi = lo * a_lo, hi * a_hi
        reach.append((lo, hi))
    return accept, reach


#: The attribute a round keeps its rule figures in once computed: a round never changes after it
#: is recorded, and the live view recomputes the run's figures several times a second.
_CACHE = "_specviz_rule_figures"


def _pass_figures(r: Round) -> dict[str, tuple[list[Range | None], list[Range]]]:
    """Every rule's (acceptance, reach) ranges on one recorded chain pass (computed once a round)."""
    cached = r.__dict__.get(_CACHE)
    if cached is None:
        cached = r.__dict__[_CACHE] = _compute_pass_figures(r)
    return cached


def _compute_pass_figures(r: Round) -> dict[str, tuple[list[Range | None], list[Range]]]:
    positions = [_Position(t) for t in r.drafted]
    out = {name: _token_rule_pass(positions, figure) for name, figure in
           (("full", "overlap"), ("one-hot", "target_of_argmax"), ("exact-match", "target_of_argmax"),
            ("exact-match-sampled", "dot"))}
    tests = [_ratio_test(t.p_target, t.p_draft) for t in r.drafted]
    reach, prod = [], 1.0
    for a in tests:
        prod *= a
        reach.append((prod, prod))
    out["full-these-drafts"] = ([(a, a) for a in tests], reach)
    weights = _block_weights(r.drafted)
    masses = [positions[i + 1].block_mass(weights[i]) for i in range(len(positions) - 1)]
    p_t = [t.p_target for t in r.drafted]
    p_d = [t.p_draft for t in r.drafted]
    low = block_reach(p_t, p_d, [m[0] for m in masses])
    high = block_reach(p_t, p_d, [m[1] for m in masses])
    out["block"] = ([None] * len(positions), list(zip(low, high)))
    return out


def _recorded(r: Round) -> bool:
    return all(t.top_draft and t.top_target for t in r.drafted)


def rules_on_passes(rounds: list[Round], k: int) -> RulesOnPasses | None:
    """Each rule of :data:`RULES` (and :data:`EXTRA_FIGURES`) replayed on the run's recorded passes.

    For every chain pass recorded with distributions (an instrumented run or trace), at each
    drafted position i, from the distributions recorded there (p_target and p_draft given the
    recorded prefix x_<i) and the drafted tokens:

    * full: a_i = Σ_x min(p_target, p_draft); one-hot and exact-match: a_i = p_target(argmax
      p_draft); exact-match-sampled: a_i = Σ_x p_target·p_draft; reach_i = Π_{j≤i} a_j, expected
      tokens 1 + Σ_i reach_i (the chain's formula with per-position acceptance, as vLLM's Adaptive
      K and Leviathan et al.'s eq. 1 with α_i). The product treats the positions as independent
      given the recorded prefix (a model, as the closed forms are); an argmax draft would also
      continue from its own prefix where the recorded one differs, and the recorded prefix's
      distributions stand in for it.
    * full-these-drafts: a_i = min(1, p_target(x_i)/p_draft(x_i)) on the recorded drafts: exact, and
      its mean over passes is an unbiased estimate of the full rule's expected tokens (the drafts
      were sampled from p_draft).
    * block: P(τ ≥ i) on the recorded block (:func:`block_reach`); unbiased in the same way, and in
      expectation never below full-these-drafts (Sun et al., Theorem 2), though a single block
      can be.

    A run verified by a rule whose draft proposes its argmax (``--rule one-hot`` or
    ``exact-match``) drafted at temperature 0, so its recorded p_draft rows are point masses: on
    its passes the full rule, one-hot and exact match keep the drafts equally often.

    Each pass's figures are ``(low, high)`` ranges from the "other tokens" bucket
    (:class:`_Position`); the run's figures are their means over passes, so they bound the run's
    figure the same way.

    Args:
        rounds: the run's rounds; k: the lookahead K asked for.

    Returns:
        A :class:`RulesOnPasses`, or None when no drafting pass was recorded with distributions.
    """
    chains = [r for r in rounds if not is_tree_round(r)]
    skipped_tree = len(rounds) - len(chains)
    used = [r for r in chains if not r.drafted or _recorded(r)]
    drafting = [r for r in used if r.drafted]
    if not drafting:
        return None
    width = max([k] + [len(r.drafted) for r in drafting])
    names = RULES + EXTRA_FIGURES
    tokens = {name: [0.0, 0.0] for name in names}
    reach = {name: [[0.0, 0.0] for _ in range(width)] for name in names}
    accept = {name: [[0.0, 0.0, 0] for _ in range(width)] for name in names}
    for r in used:
        if not r.drafted:
            for name in names:
                tokens[name][0] += 1.0
                tokens[name][1] += 1.0
            continue
        for name, (acc, rch) in _pass_figures(r).items():
            tokens[name][0] += 1.0 + sum(lo for lo, _ in rch)
            tokens[name][1] += 1.0 + sum(hi for _, hi in rch)
            for i, (lo, hi) in enumerate(rch):
                reach[name][i][0] += lo
                reach[name][i][1] += hi
            for i, a in enumerate(acc):
                if a is not None:
                    accept[name][i][0] += a[0]
                    accept[name][i][1] += a[1]
                    accept[name][i][2] += 1
    n, m = len(used), len(drafting)
    rules = {}
    for name in names:
        rules[name] = RuleEstimate(
            rule=name,
            tokens_per_pass=(tokens[name][0] / n, tokens[name][1] / n),
            reach=tuple((lo / m, hi / m) for lo, hi in reach[name]),
            accept=tuple((lo / c, hi / c) if c else None for lo, hi, c in accept[name]),
        )
    measured = sum(len(r.emitted) for r in used) / n
    return RulesOnPasses(n, m, skipped_tree, len(chains) - len(used), measured, rules)


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
    measured c and v (:class:`specviz.analysis.RunAnalysis`'s ``cost_ratio_c`` and
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
