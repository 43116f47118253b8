"""A verification rule replayed on a recorded pass: the one place that says what each rule
(:mod:`specviz.core.rules`) would accept of a pass's drafts, from the distributions a run or trace
recorded (:class:`~specviz.core.records.Round`). Nothing here imports torch or runs a model;
:mod:`specviz.core.sampling` runs the rules live.

Two readers share it:

* the run's diagnostics (:func:`rules_on_passes`, shown by the Run tab, ``run --json``, the bench):
  each rule's expected tokens per pass, averaged over the run's chain passes;
* Watch a pass (:func:`replay_rule`): one pass's test replayed under a rule with its recorded
  uniforms u, position by position.

Both read the per-position figures of :func:`pass_figures`:

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
  p_target(x_j)/p_draft(x_j)): the figure block verification is compared with on the same drafts,
  and what the full rule does with the recorded drafts when a pass is replayed.
* ``"relaxed-top-k"``: the LOSSY control keeps a draft within the target's top
  :data:`~specviz.core.rules.RELAXED_TOP_K` (1 or 0, no uniform).
* ``"ensemble:W"``: transformers' static ensemble verification (PR #45979) on the pass's own
  drafts, min(1, 1 − W + W·p_target(x)/p_draft(x)) (:func:`ensemble_test`); and over whole
  distributions (:func:`ensemble_dial`, the lossless↔lossy dial): at a position it accepts a
  sampled draft with Σ_x min(p_draft, v) = 1 − W·TV(p_target, p_draft), v = W·p_target + (1 − W)·p_draft,
  and its emitted token follows v, at a total-variation distance (1 − W)·TV(p_target, p_draft)
  from p_target.

A trace keeps the top :data:`TOP_TOKENS_KEPT` tokens of each distribution
(:data:`specviz.core.recorder.TOP_TOKENS`), plus the exact p_draft and p_target of the drafted token.
The rest is an "other tokens" bucket whose mass is known (1 − the kept mass) and whose every token
is at most the smallest kept probability. Each figure that needs a whole distribution is therefore
given as a ``(low, high)`` range that contains the exact value (:class:`PositionBounds` says how
each is bounded); figures that need only the drafted tokens (``"full-these-drafts"``) have
low = high.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.core.rules import ENSEMBLE, RELAXED_TOP_K, check_rule, ensemble_rule
from specviz.core.rules import RULES as ALL_RULES
from specviz.core.records import Round

__all__ = [
    "EXTRA_FIGURES",
    "FIGURES",
    "DialPoint",
    "RULES",
    "TOP_TOKENS_KEPT",
    "PositionBounds",
    "RuleEstimate",
    "RuleReplay",
    "RuleStep",
    "RulesOnPasses",
    "block_reach",
    "block_weights",
    "ensemble_dial",
    "ensemble_test",
    "is_chain",
    "pass_figures",
    "ratio_test",
    "replay_rule",
    "rules_on_passes",
]

#: The exact rules, by the names the CLI's ``--rule`` uses (:data:`specviz.core.rules.RULES`, the lossy
#: control left out: no closed form says what it would accept).
RULES = tuple(name for name, rule in ALL_RULES.items() if rule.lossless)
#: Figures shown beside them: the exact-match test on a sampled draft, and the full rule on the
#: pass's own drafts (block verification's like-for-like comparison).
EXTRA_FIGURES = ("exact-match-sampled", "full-these-drafts")

#: Tokens a trace keeps per distribution (:data:`specviz.core.recorder.TOP_TOKENS`, which imports torch;
#: a test checks the two agree). A shorter list is the whole distribution (zero-probability ids are
#: left out).
TOP_TOKENS_KEPT = 10

Range = tuple[float, float]


def is_chain(round_: Round) -> bool:
    """True when every drafted token continues the one before it (no siblings, no tree)."""
    return all((t.parent if t.parent is not None else i - 1) == i - 1 for i, t in enumerate(round_.drafted))


# --------------------------------------------------------------------------- bounds at one position
class PositionBounds:
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


def ratio_test(p_target: float, p_draft: float) -> float:
    """min(1, p_target/p_draft), the full rule's acceptance of one drafted token."""
    return min(1.0, p_target / p_draft) if p_draft > 0 else float(p_target > 0)


def ensemble_test(p_target: float, p_draft: float, weight: float) -> float:
    """min(1, v(x)/p_draft(x)) with v = w·p_target + (1 − w)·p_draft: the ensemble rule's acceptance
    of one drafted token (:func:`specviz.core.sampling.verify` under ``"ensemble:W"``); :func:`ratio_test`
    at w = 1."""
    if p_draft <= 0:
        return float(p_target > 0) if weight == 1.0 else 1.0
    return min(1.0, 1.0 - weight + weight * p_target / p_draft)


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


def block_weights(drafted) -> list[float]:
    """Sun et al.'s weights p_i = min(1, p_{i−1}·p_target(x_i)/p_draft(x_i)), p_0 = 1, of a drafted
    chain (:class:`~specviz.core.records.DraftedToken` list): the recorded drafts' own probabilities only."""
    weights, p = [], 1.0
    for t in drafted:
        p = min(1.0, p * t.p_target / t.p_draft) if t.p_draft > 0 else float(p * t.p_target > 0)
        weights.append(p)
    return weights


# --------------------------------------------------------------------------- one pass, every figure
#: The :class:`PositionBounds` method giving each token-by-token rule's acceptance at a position.
_BOUNDED = {"full": "overlap", "one-hot": "target_of_argmax", "exact-match": "target_of_argmax",
            "exact-match-sampled": "dot"}
#: Every figure :func:`pass_figures` computes.
FIGURES = (*_BOUNDED, "full-these-drafts", "block", "relaxed-top-k")


def _relaxed_top_k(token) -> Range:
    """1 when the drafted token is within the target's top :data:`RELAXED_TOP_K`, else 0."""
    # The target's k-th probability is recorded whenever its top list has k entries; a shorter
    # list is the whole distribution, where every token of positive mass is inside.
    top = [float(p) for _, _, p in token.top_target]
    kth = top[RELAXED_TOP_K - 1] if len(top) >= RELAXED_TOP_K else 0.0
    inside = float(token.p_target > 0 and token.p_target >= kth)
    return inside, inside


def _block_tests(drafted, positions: list[PositionBounds]) -> tuple[list[Range], list[Range]]:
    """Block verification's h_i ranges and its reach P(τ ≥ i) ranges on one drafted chain."""
    weights = block_weights(drafted)
    masses = [positions[i + 1].block_mass(weights[i]) for i in range(len(drafted) - 1)]
    tests = [(_h(lo, weights[i]), _h(hi, weights[i])) for i, (lo, hi) in enumerate(masses)]
    tests += [(weights[-1], weights[-1])] if drafted else []
    p_t, p_d = [t.p_target for t in drafted], [t.p_draft for t in drafted]
    low = block_reach(p_t, p_d, [m[0] for m in masses]) if drafted else []
    high = block_reach(p_t, p_d, [m[1] for m in masses]) if drafted else []
    return tests, list(zip(low, high))


def pass_figures(round_: Round, figure: str,
                 positions: list[PositionBounds] | None = None) -> tuple[list[Range], list[Range]]:
    """One figure of :data:`FIGURES` on one recorded chain pass, at each drafted position.

    Args:
        round_: a chain pass; every figure but ``"full-these-drafts"`` needs its distributions
            (``top_draft``/``top_target``) recorded.
        figure: a name of :data:`FIGURES` (the module docstring says what each is), or
            ``"ensemble:W"`` (the ensemble rule's test on the recorded drafts).
        positions: the pass's :class:`PositionBounds`, one per drafted token, when the caller
            already built them (they are built here otherwise).

    Returns:
        ``(tests, reach)``: ``tests[i]`` the ``(low, high)`` probability that the test at position
        i + 1 passes given the recorded prefix (block verification: Sun et al.'s h_i; relaxed
        top-k: 1 or 0); ``reach[i]`` the probability the rule keeps at least i + 1 drafts
        (Π_{j≤i} tests_j for a token-by-token rule, :func:`block_reach` for block).

    Raises:
        KeyError: for a name outside :data:`FIGURES`.
    """
    drafted = round_.drafted
    if figure == "full-these-drafts":
        tests = [(a, a) for a in (ratio_test(t.p_target, t.p_draft) for t in drafted)]
    elif figure.startswith(f"{ENSEMBLE}:"):
        weight = check_rule(figure).weight
        tests = [(a, a) for a in (ensemble_test(t.p_target, t.p_draft, weight) for t in drafted)]
    elif figure == "relaxed-top-k":
        tests = [_relaxed_top_k(t) for t in drafted]
    else:
        positions = positions if positions is not None else [PositionBounds(t) for t in drafted]
        if figure == "block":
            return _block_tests(drafted, positions)
        tests = [getattr(p, _BOUNDED[figure])() for p in positions]
    reach, lo, hi = [], 1.0, 1.0
    for a_lo, a_hi in tests:
        lo, hi = lo * a_lo, hi * a_hi
        reach.append((lo, hi))
    return tests, reach


# --------------------------------------------------------------------------- the rules on a run's passes
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


#: The attribute a round keeps its rule figures in once computed: a round never changes after it
#: is recorded, and the live view recomputes the run's figures several times a second.
_CACHE = "_specviz_rule_figures"


def _pass_figures(r: Round) -> dict[str, tuple[list[Range | None], list[Range]]]:
    """Every estimated figure's (acceptance, reach) ranges on one recorded chain pass (computed once
    a round); block verification decides the block jointly, so it has no per-position acceptance."""
    cached = r.__dict__.get(_CACHE)
    if cached is None:
        positions = [PositionBounds(t) for t in r.drafted]
        cached = {name: pass_figures(r, name, positions) for name in RULES + EXTRA_FIGURES}
        cached["block"] = ([None] * len(positions), cached["block"][1])
        r.__dict__[_CACHE] = cached
    return cached


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
    (:class:`PositionBounds`); the run's figures are their means over passes, so they bound the run's
    figure the same way.

    Args:
        rounds: the run's rounds; k: the lookahead K asked for.

    Returns:
        A :class:`RulesOnPasses`, or None when no drafting pass was recorded with distributions.
    """
    chains = [r for r in rounds if is_chain(r)]
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


# --------------------------------------------------------------------------- one pass replayed with its u
@dataclass(frozen=True)
class RuleStep:
    """One drafted position of a pass replayed under a rule (:func:`replay_rule`).

    ``node``: the index in ``Round.drafted``; ``token_id``/``text``: the token the rule tests
    there (the draft's argmax for one-hot and exact match, else the recorded draft); ``accept``:
    ``(low, high)``, the probability the test passes given the recorded prefix (block: Sun et
    al.'s h_i; relaxed top-k: 1 or 0), low < high only where the "other tokens" bucket leaves it
    open; ``uniform``: the recorded u used (None when the rule uses none); ``passes``: the test's
    result with that u, None when u falls inside ``accept`` (the bucket decides); ``kept``: whether
    the rule keeps this draft (block: i ≤ τ), None where undecided.
    """

    node: int
    token_id: int
    text: str
    accept: tuple[float, float]
    uniform: float | None
    passes: bool | None
    kept: bool | None


@dataclass(frozen=True)
class RuleReplay:
    """A chain pass's test replayed under one rule with the recorded u (:func:`replay_rule`).

    ``accepted``: ``(low, high)`` drafts kept with the recorded u (equal unless the bucket leaves
    a test open); ``expected``: ``(low, high)`` the rule's expected drafts kept, Σ_i P(keep ≥ i)
    given the recorded prefix; ``drafted``: K of this pass; ``steps``: one per drafted position.
    """

    rule: str
    drafted: int
    steps: tuple[RuleStep, ...]
    accepted: tuple[int, int]
    expected: tuple[float, float]


def _test(u: float | None, accept: tuple[float, float], strict: bool = True) -> bool | None:
    """u against an acceptance range: True/False where the whole range agrees, None where not."""
    lo, hi = accept
    if strict:
        return True if u < lo else False if u >= hi else None
    return True if u <= lo else False if u > hi else None


def _block_steps(drafted, tests: list[Range]) -> tuple[list[RuleStep], tuple[int, int]]:
    """Block verification's steps with the recorded u as η_i, and τ's (low, high)."""
    passes = [_test(t.uniform, h, strict=False) for t, h in zip(drafted, tests)]
    # τ = max{i : η_i ≤ h_i}: its low end counts only sure passes, its high end open ones too.
    tau_lo = max([i + 1 for i, p in enumerate(passes) if p is True], default=0)
    tau_hi = max([i + 1 for i, p in enumerate(passes) if p is not False], default=0)
    steps = [RuleStep(i, t.id, t.text, tests[i], t.uniform, passes[i],
                      True if i < tau_lo else False if i >= tau_hi else None) for i, t in enumerate(drafted)]
    return steps, (tau_lo, tau_hi)


def _token_steps(drafted, rule: str, tests: list[Range]) -> tuple[list[RuleStep], tuple[int, int]]:
    """A token-by-token rule's steps with the recorded u: a draft is kept while every test passes."""
    steps, sure, open_, count_lo, count_hi = [], True, True, 0, 0
    for i, (t, accept) in enumerate(zip(drafted, tests)):
        token_id, text, uniform = t.id, t.text, t.uniform
        if rule in ("one-hot", "exact-match"):
            token_id, text = int(t.top_draft[0][0]), t.top_draft[0][1]
        elif rule == "relaxed-top-k":  # deterministic: no uniform
            uniform = None
        passes = accept[0] >= 1.0 if uniform is None else _test(uniform, accept)
        kept = True if sure and passes is True else False if not open_ or passes is False else None
        steps.append(RuleStep(i, token_id, text, accept, uniform, passes, kept))
        sure = sure and passes is True
        open_ = open_ and passes is not False
        count_lo += sure
        count_hi += open_
    return steps, (count_lo, count_hi)


def replay_rule(round_: Round, rule: str) -> RuleReplay:
    """The pass's test replayed under ``rule`` with the recorded uniforms.

    Every position uses the distributions recorded after the recorded prefix (p_target and
    p_draft there), and its recorded u (the trace keeps u for untested positions too). The test
    probabilities are :func:`pass_figures`'s, the full rule's on the recorded drafts
    (``"full-these-drafts"``). For one-hot and exact match, an argmax draft that differs from the
    recorded one would have continued from its own prefix; the recorded prefix's distributions
    stand in for it, as in :func:`rules_on_passes`. Figures that need a whole distribution (the
    argmax's p_target when the target's top list misses it, block verification's residual mass
    R_i) are ``(low, high)`` ranges from the "other tokens" bucket (:class:`PositionBounds`); with
    full rows (a list shorter than the kept top 10 is the whole distribution) they are exact and
    equal :func:`specviz.core.sampling.block_weights`'s (a test checks).

    Args:
        round_: a chain pass (tree passes: the rules are replayed on chains only) recorded with
            distributions (``top_draft``/``top_target``) for every rule but ``"full"``.
        rule: a name of :data:`specviz.core.rules.RULES`, or ``"ensemble:W"`` (tested on the recorded
            drafts, :func:`ensemble_test`: needs no distributions).

    Returns:
        A :class:`RuleReplay`: ``expected`` is Σ_i of :func:`pass_figures`'s reach.

    Raises:
        ValueError: one sentence, for an unknown rule, a tree pass, or a pass recorded without the
            distributions the rule needs.
    """
    if not is_chain(round_):
        raise ValueError("the rule switch replays chain passes only: this pass drafted a tree")
    drafted = round_.drafted
    rule = check_rule(rule).name
    if rule != "full" and not rule.startswith(f"{ENSEMBLE}:") and not _recorded(round_):
        raise ValueError(f"this pass was recorded without its distributions, so the {rule} rule cannot be "
                         "replayed on it (only the full rule, which needs just the drafted tokens)")
    tests, reach = pass_figures(round_, "full-these-drafts" if rule == "full" else rule)
    if rule == "block":
        steps, accepted = _block_steps(drafted, tests)
    else:
        steps, accepted = _token_steps(drafted, rule, tests)
    expected = (sum(lo for lo, _ in reach), sum(hi for _, hi in reach))
    return RuleReplay(rule, len(drafted), tuple(steps), accepted, expected)


# --------------------------------------------------------------------------- the lossless↔lossy dial
@dataclass(frozen=True)
class DialPoint:
    """The ensemble rule at one weight on a run's recorded passes (:func:`ensemble_dial`), each
    figure a ``(low, high)`` range from the "other tokens" bucket.

    ``tokens_per_pass``: the mean over the analysed passes of 1 + Σ_i Π_{j≤i} a_j, a_j the rule's
    acceptance at position j; ``accept``: the mean of a_j over the drafted positions (the rule's
    conditional α); ``distance``: the mean over the drafted positions of the total-variation
    distance from p_target of the token emitted there, (1 − w)·TV(p_target, p_draft).
    """

    weight: float
    tokens_per_pass: Range
    accept: Range
    distance: Range


_OVERLAPS = "_specviz_overlaps"


def _overlaps(r: Round) -> list[Range]:
    """Σ_x min(p_target, p_draft) at each drafted position of a recorded pass (computed once a round)."""
    cached = r.__dict__.get(_OVERLAPS)
    if cached is None:
        cached = r.__dict__[_OVERLAPS] = [PositionBounds(t).overlap() for t in r.drafted]
    return cached


def ensemble_dial(rounds: list[Round], weights) -> list[DialPoint] | None:
    """The ensemble rule ``"ensemble:W"`` replayed at each weight on the run's recorded chain passes.

    At a drafted position with overlap o = Σ_x min(p_target, p_draft) (so TV(p_target, p_draft) =
    1 − o), the ensemble v = w·p_target + (1 − w)·p_draft gives Σ_x min(p_draft, v) = 1 − w·(1 − o)
    for a sampled draft, and the token emitted there follows v: TV(v, p_target) = (1 − w)·(1 − o).
    So α rises and the distance grows linearly as w goes from 1 (the full rule, distance 0) to 0
    (every draft kept, the draft's own distance). Positions chain as in :func:`rules_on_passes`
    (expected tokens 1 + Σ_i Π_{j≤i} a_j given the recorded prefix); the bucket's bounds on o
    give each figure's range (a decreasing function of o takes its low end at o's high end).

    Args:
        rounds: the run's rounds (trees and passes recorded without distributions are skipped).
        weights: the w to replay, each in [0, 1].

    Returns:
        One :class:`DialPoint` per weight, in order, or None when no drafting chain pass was
        recorded with distributions.

    Raises:
        RuleError: a weight outside [0, 1].
    """
    weights = [ensemble_rule(w).weight for w in weights]
    used = [r for r in rounds if is_chain(r) and (not r.drafted or _recorded(r))]
    drafted = [_overlaps(r) for r in used if r.drafted]
    if not drafted:
        return None
    positions = sum(len(o) for o in drafted)
    points = []
    for w in weights:
        tokens, accept, distance = [float(len(used) - len(drafted))] * 2, [0.0, 0.0], [0.0, 0.0]
        for overlaps in drafted:
            reach = [1.0, 1.0]
            tokens = [tokens[0] + 1.0, tokens[1] + 1.0]
            for lo, hi in overlaps:
                a_lo, a_hi = 1.0 - w * (1.0 - lo), 1.0 - w * (1.0 - hi)
                reach = [reach[0] * a_lo, reach[1] * a_hi]
                tokens = [tokens[0] + reach[0], tokens[1] + reach[1]]
                accept = [accept[0] + a_lo, accept[1] + a_hi]
                distance = [distance[0] + (1.0 - w) * (1.0 - hi), distance[1] + (1.0 - w) * (1.0 - lo)]
        points.append(DialPoint(w, (tokens[0] / len(used), tokens[1] / len(used)),
                                (accept[0] / positions, accept[1] / positions),
                                (distance[0] / positions, distance[1] / positions)))
    return points
