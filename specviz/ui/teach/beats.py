"""One verify pass in slow motion: the beats a learner steps through, the scoring of a guess made
before the reveal, and the accept/resample rule replayed at one position from the trace's numbers.

Everything here reads a :class:`~specviz.core.records.Round` (a live run's or a saved trace's), never a
model. A pass plays as beats, each with one sentence that carries the real numbers:

1. ``draft``: the drafted tokens appear one by one, each with its p_draft (list order, parents
   first, as the drafter proposed them);
2. ``verify``: one target forward pass scores every drafted token at once (p_target beside p_draft);
3. ``test``: each tested token, in the order :func:`specviz.core.sampling.verify_tree` tests them (down
   the tree, siblings in list order, the first accepted child continues), with its recorded uniform
   u against its acceptance probability min(1, p_target/p_draft) (for a later sibling, against the
   residual the rejected siblings left: the probability the trace records);
4. the pass's own token: ``residual`` (the first rejection's resample from
   normalize(max(0, p_target − p_draft))), ``bonus`` (every test passed), ``plain`` (nothing was
   drafted) or ``stop`` (the accepted path reached the end-of-sequence token).

Sources: Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2 (the chain rule);
Miao et al. 2024 (SpecInfer), Algorithm 2 and Jeon et al. 2024 (trees, siblings in turn).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# replay_rule is Watch a pass's rule switch, read by name from here as from specviz.diagnose.rule_replay.
from specviz.diagnose.rule_replay import is_chain, replay_rule  # noqa: F401
from specviz.core.rules import RELAXED_TOP_K
from specviz.figures.trace import emitted_piece, visible_text
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED, DraftedToken, Round

DRAFT, VERIFY, TEST, RESIDUAL, STOP = "draft", "verify", "test", "residual", "stop"
#: Beat kinds, in the order a pass plays them (``bonus`` and ``plain`` are the trace's kinds).
BEAT_KINDS = (DRAFT, VERIFY, TEST, RESIDUAL, BONUS, PLAIN, STOP)


@dataclass(frozen=True)
class Beat:
    """One step of a pass, with the numbers it shows and the sentence that says them.

    ``node`` is the index in ``Round.drafted`` of the token the beat is about (None for ``verify``
    and for the pass's own token); ``depth`` its position in this pass's output (0 = the first new
    token). ``emitted`` counts the tokens this pass has committed once the beat has played.
    ``accepted`` is the test's verdict (``test`` beats only). Probabilities are the trace's, in
    [0, 1]; ``uniform`` is the recorded u of the test.
    """

    kind: str
    node: int | None
    depth: int | None
    token_id: int | None
    text: str
    p_draft: float | None
    p_target: float | None
    accept_prob: float | None
    uniform: float | None
    accepted: bool | None
    emitted: int
    sentence: str

    @property
    def reveals(self) -> bool:
        """True for a beat that shows a verdict (a test, or the pass's own token and its count)."""
        return self.kind not in (DRAFT, VERIFY)


def fmt(p: float | None) -> str:
    """A probability as the beats print it: 4 decimals, or 3 significant digits below 0.001."""
    if p is None:
        return "—"
    return f"{p:.4f}" if p == 0 or p >= 1e-3 else f"{p:.3g}"


def quoted(text: str) -> str:
    """A token's text in quotes with whitespace made visible (``“␣fox”``)."""
    return "“" + visible_text(text) + "”"


def parent_of(round_: Round, i: int) -> int:
    """The index of node ``i``'s parent in ``round_.drafted`` (-1: the committed context)."""
    parent = round_.drafted[i].parent
    return i - 1 if parent is None else parent


def depths(round_: Round) -> list[int]:
    """The depth (0-based position in the pass's output) of every drafted node; parents come first."""
    out: list[int] = []
    for i in range(len(round_.drafted)):
        p = parent_of(round_, i)
        out.append(0 if p < 0 else out[p] + 1)
    return out


def in_test_order(round_: Round) -> list[int]:
    """The tested nodes in the order the verify step tested them: from the context down, each
    node's tested children in list order, the accepted one's children next (as
    :func:`specviz.core.sampling.verify_tree` walks)."""
    order, node = [], -1
    while True:
        kids = [i for i in range(len(round_.drafted)) if parent_of(round_, i) == node]
        order.extend(i for i in kids if round_.drafted[i].tested)
        chosen = [i for i in kids if round_.drafted[i].accepted and round_.drafted[i].tested]
        if not chosen:
            return order
        node = chosen[0]


def beats(round_: Round) -> list[Beat]:
    """Every beat of one verify pass, in play order (see the module docstring).

    Args:
        round_: one pass of a run or a saved trace. Drafted probabilities are only meaningful for
            an instrumented run (the app's and the CLI's are).

    Returns:
        ``len(drafted)`` draft beats, one verify beat (if anything was drafted), one test beat per
        tested node, and one beat for the pass's own token: at least one beat.
    """
    out = [_draft_beat(round_, i) for i in range(len(round_.drafted))]
    if round_.drafted:
        out.append(_verify_beat(round_))
    accepted = 0
    for i in in_test_order(round_):
        beat = _test_beat(round_, i, accepted)
        accepted += bool(beat.accepted)
        out.append(beat)
    out.append(_final_beat(round_))
    return out


def _draft_beat(round_: Round, i: int) -> Beat:
    t, d = round_.drafted[i], depths(round_)[i]
    where = f"position {d + 1}"
    parent = parent_of(round_, i)
    if not is_chain(round_):
        where += " after the context" if parent < 0 else f" after {quoted(round_.drafted[parent].text)}"
    how = ("p_draft = 1 (a point mass: a certain guess, as prompt lookup's and greedy drafts are)"
           if t.p_draft >= 1.0 - 1e-9
           else f"p_draft = {fmt(t.p_draft)}")
    sentence = f"Draft {i + 1} of {len(round_.drafted)}: the drafter proposes {quoted(t.text)} at {where}, {how}."
    return Beat(DRAFT, i, d, t.id, t.text, t.p_draft, None, None, None, None, 0, sentence)


def _verify_beat(round_: Round) -> Beat:
    n = len(round_.drafted)
    shown = round_.drafted[:6]
    pairs = ", ".join(f"{quoted(t.text)} {fmt(t.p_target)} vs {fmt(t.p_draft)}" for t in shown)
    more = f", and {n - len(shown)} more" if n > len(shown) else ""
    sentence = (f"One verify pass of the target scores all {n} drafted tokens at once; p_target vs p_draft: "
                f"{pairs}{more}.")
    return Beat(VERIFY, None, None, None, "", None, None, None, None, None, 0, sentence)


def _test_beat(round_: Round, i: int, accepted_before: int) -> Beat:
    t, d = round_.drafted[i], depths(round_)[i]
    siblings = [j for j in in_test_order(round_) if parent_of(round_, j) == parent_of(round_, i)]
    later = siblings.index(i) > 0
    if later:
        rule = (f"against the residual the {siblings.index(i)} rejected sibling(s) left, accept probability "
                f"{fmt(t.accept_prob)}")
    else:
        rule = (f"accept if u < min(1, p_target/p_draft) = min(1, {fmt(t.p_target)}/{fmt(t.p_draft)}) = "
                f"{fmt(t.accept_prob)}")
    verdict = (f"u = {fmt(t.uniform)} < {fmt(t.accept_prob)}: accepted" if t.accepted
               else f"u = {fmt(t.uniform)} ≥ {fmt(t.accept_prob)}: rejected")
    sentence = f"Position {d + 1}, {quoted(t.text)}: {rule}; {verdict}."
    emitted = accepted_before + (1 if t.accepted else 0)
    return Beat(TEST, i, d, t.id, t.text, t.p_draft, t.p_target, t.accept_prob, t.uniform, t.accepted, emitted,
                sentence)


def _count_words(round_: Round) -> str:
    n = len(round_.emitted)
    kinds = [k for k in (ACCEPTED, RESAMPLED, BONUS, PLAIN) if any(e.kind == k for e in round_.emitted)]
    parts = " + ".join(f"{sum(e.kind == k for e in round_.emitted)} {k}" for k in kinds)
    return f"This pass emits {n} token{'s' if n != 1 else ''}: {parts}."


def _final_beat(round_: Round) -> Beat:
    last = round_.emitted[-1] if round_.emitted else None
    n, depth = len(round_.emitted), len(round_.emitted) - 1
    if last is None or last.kind == ACCEPTED:
        sentence = f"The accepted path reached the end of the output (end-of-sequence or the length limit). " \
                   f"{_count_words(round_) if last else 'Nothing emitted.'}"
        return Beat(STOP, None, depth, None, "", None, None, None, None, None, n, sentence)
    source = f" (probability {fmt(last.p_source)} there)" if last.p_source is not None else ""
    text = emitted_piece(last)  # a byte the stream holds back shows as its bytes, not as nothing
    if last.kind == RESAMPLED:
        rejected = [i for i in in_test_order(round_) if not round_.drafted[i].accepted
                    and depths(round_)[i] == depth]
        after = (f"the {len(rejected)} rejected siblings" if len(rejected) > 1 else
                 f"{quoted(last.rejected_text or '')}")
        sentence = (f"Rejected at position {depth + 1}: after {after} the target resamples from "
                    f"max(0, p_target − p_draft), renormalised, and draws {quoted(text)}{source}; "
                    f"its p_target was {fmt(last.p_target)}. {_count_words(round_)}")
        kind = RESIDUAL
    elif last.kind == BONUS:
        sentence = (f"Every test passed: the bonus token {quoted(text)} comes from the target's own "
                    f"distribution after the last accepted token, p_target = {fmt(last.p_target)}, at no extra "
                    f"pass. {_count_words(round_)}")
        kind = BONUS
    else:
        sentence = (f"Nothing was drafted: the target draws {quoted(text)} itself, p_target = "
                    f"{fmt(last.p_target)}, one token for one pass, as plain decoding does.")
        kind = PLAIN
    return Beat(kind, None, depth, last.id, text, None, last.p_target, None, None, None, n, sentence)


# --------------------------------------------------------------------------- predict, then reveal
def guess_points(accept_prob: float, guess_accept: bool) -> float:
    """Expected points of one guess: the probability that it is right, ``min(1, p_target/p_draft)``
    for "accept" and ``1 − min(1, p_target/p_draft)`` for "reject" (a proper scoring rule's
    expectation: the guess is scored against the real probability, not against the one draw)."""
    return float(accept_prob if guess_accept else 1.0 - accept_prob)


def count_distribution(round_: Round) -> dict[int, float] | None:
    """P(the pass emits n tokens) for a chain: ``∏_{i<n−1} a_i · (1 − a_{n−1})`` for n ≤ K and
    ``∏ a_i`` for K + 1, with ``a_i`` the recorded min(1, p_target/p_draft) of drafted token i
    (conditional on the drafts before it: that is what the verify pass scored). None for a tree,
    whose untested siblings' probabilities against the residual are not recorded. A plain pass
    emits one token: {1: 1.0}."""
    if not round_.drafted:
        return {1: 1.0}
    if not is_chain(round_):
        return None
    out, reach = {}, 1.0
    for n, t in enumerate(round_.drafted, start=1):
        out[n] = reach * (1.0 - t.accept_prob)
        reach *= t.accept_prob
    out[len(round_.drafted) + 1] = reach
    return out


@dataclass(frozen=True)
class Score:
    """A scored guess: expected ``points`` out of ``possible`` (one per tested token, one for the
    count), what the best guess would have earned (``best``), and one line per item."""

    points: float
    possible: int
    best: float
    lines: tuple[str, ...]


def score_guess(round_: Round, accept_guesses: dict[int, bool], count_guess: int | None) -> Score:
    """Score a guess made before the reveal against the pass's real acceptance probabilities.

    Args:
        round_: the pass.
        accept_guesses: node index in ``round_.drafted`` → True for "accept"; a tested node left
            out counts as "reject". Untested nodes (after the decision) score nothing.
        count_guess: the guessed number of tokens the pass emits, or None for no guess.

    Each tested token earns :func:`guess_points`; the count earns its probability under
    :func:`count_distribution` (for a tree: 1 if right, 0 if not, the realised count).
    """
    points = best = 0.0
    lines, possible = [], 0
    for i in in_test_order(round_):
        t = round_.drafted[i]
        guess = bool(accept_guesses.get(i, False))
        got = guess_points(t.accept_prob, guess)
        points, best, possible = points + got, best + max(t.accept_prob, 1.0 - t.accept_prob), possible + 1
        lines.append(f"{quoted(t.text)}: you said {'accept' if guess else 'reject'}, accept probability "
                     f"{fmt(t.accept_prob)} → {got:.2f} points ({'accepted' if t.accepted else 'rejected'})")
    if count_guess is not None:
        n = len(round_.emitted)
        dist = count_distribution(round_)
        if dist is None:
            got, top = float(count_guess == n), 1.0
            how = f"the pass emitted {n} (a tree: scored on the outcome)"
        else:
            got, top = dist.get(int(count_guess), 0.0), max(dist.values())
            how = f"P(emit {count_guess}) = {got:.3f}; the pass emitted {n}"
        points, best, possible = points + got, best + top, possible + 1
        lines.append(f"tokens emitted: you said {count_guess}, {how} → {got:.2f} points")
    return Score(points, possible, best, tuple(lines))


# --------------------------------------------------------------------------- losslessness at one position
@dataclass(frozen=True)
class PositionDistributions:
    """p_draft and p_target at one drafted position, as far as the trace records them.

    The trace keeps each distribution's most likely tokens (10 in the app and the CLI). ``ids``/
    ``texts``/``p_draft``/``p_target``: the tokens shown, most likely first, each side's value its
    recorded probability, 0 where that side does not list the token. ``other_draft``/
    ``other_target``: the rest of each side's mass, the "other tokens" bucket (a token that one
    side does not list counts there on that side). Each side sums to 1 (float rounding aside).
    """

    ids: tuple[int, ...]
    texts: tuple[str, ...]
    p_draft: tuple[float, ...]
    p_target: tuple[float, ...]
    other_draft: float
    other_target: float
    drafted_id: int

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(p_draft, p_target)`` as float64 arrays of ``len(ids) + 1``, the bucket last."""
        return (np.array([*self.p_draft, self.other_draft], dtype=np.float64),
                np.array([*self.p_target, self.other_target], dtype=np.float64))


def position_distributions(token: DraftedToken, top: int = 8) -> PositionDistributions:
    """The recorded distributions at ``token``'s position, with an "other tokens" bucket.

    The drafted token (whose p_draft and p_target the trace records exactly) and at most ``top``
    other recorded tokens, the likeliest under p_target + p_draft; every other token's mass goes
    to the bucket, on each side. On the pair of distributions this defines, p_target's shown
    values are the real ones, and the speculative rule returns exactly that p_target (the rule is
    exact for any pair: Leviathan et al. 2023, Theorem 3.5), so a simulation on it shows the real
    mechanism on the real numbers; only the draft's unrecorded tail is lumped.

    Raises:
        ValueError: if the token has no recorded distributions (an uninstrumented run).
    """
    if not token.top_target or not token.top_draft:
        raise ValueError("this token has no recorded distributions (an uninstrumented run)")
    draft = {int(i): float(p) for i, _, p in token.top_draft}
    target = {int(i): float(p) for i, _, p in token.top_target}
    draft[token.id], target[token.id] = token.p_draft, token.p_target
    texts = {int(i): t for i, t, _ in token.top_draft + token.top_target}
    texts[token.id] = token.text
    others = sorted((i for i in set(draft) | set(target) if i != token.id),
                    key=lambda i: -(target.get(i, 0.0) + draft.get(i, 0.0)))[:top]
    ids = sorted([token.id, *others], key=lambda i: (-target.get(i, 0.0), -draft.get(i, 0.0)))
    p_d = tuple(draft.get(i, 0.0) for i in ids)
    p_t = tuple(target.get(i, 0.0) for i in ids)
    return PositionDistributions(tuple(ids), tuple(texts[i] for i in ids), p_d, p_t,
                                 max(0.0, 1.0 - sum(p_d)), max(0.0, 1.0 - sum(p_t)), token.id)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance ½·Σ|p − q| between two distributions over the same categories
    (0: identical, 1: disjoint)."""
    return float(0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def most_different_position(round_: Round) -> int | None:
    """The drafted node whose recorded p_draft and p_target differ most (largest
    :func:`total_variation` over :func:`position_distributions`), where the stacked bar shows a
    real residual and a draw shows the rule correcting the draft; None when no drafted node has
    recorded distributions. Ties go to the earliest node."""
    best, best_tv = None, -1.0
    for i, token in enumerate(round_.drafted):
        if not token.top_target or not token.top_draft:
            continue
        tv = total_variation(*position_distributions(token).arrays())
        if tv > best_tv:
            best, best_tv = i, tv
    return best


def simulate_draws(dists: PositionDistributions, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` draws of the accept/resample rule at one position, and ``n`` of the broken control.

    Speculative: draw x from p_draft, accept it if u·p_draft(x) < p_target(x), else draw from
    normalize(max(0, p_target − p_draft)) (Leviathan et al. 2023, Algorithm 1). Control: keep every
    draft x (its frequencies close in on p_draft, not p_target).

    Returns:
        ``(speculative counts, control counts)``, int64 arrays of ``len(dists.ids) + 1`` (the
        bucket last), each summing to ``n``.

    Raises:
        ValueError: if ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"draws must be at least 1, got {n}")
    p_draft, p_target = dists.arrays()
    p_draft, p_target = p_draft / p_draft.sum(), p_target / p_target.sum()
    rng = np.random.default_rng(seed)
    x = rng.choice(len(p_draft), size=n, p=p_draft)
    accept = rng.random(n) * p_draft[x] < p_target[x]
    residual = np.clip(p_target - p_draft, 0.0, None)
    residual = residual / residual.sum() if residual.sum() > 0 else p_target
    y = rng.choice(len(residual), size=n, p=residual)
    out = np.where(accept, x, y)
    size = len(p_draft)
    return np.bincount(out, minlength=size), np.bincount(x, minlength=size)


# --------------------------------------------------------------------------- the pass's test under each rule
#: What each rule's replay tests at a position, one sentence each (the page shows it above the verdicts).
RULE_TESTS = {
    "full": "Full rule (Chen et al. 2023; Leviathan et al. 2023): the recorded draft x is kept if the recorded "
            "u < min(1, p_target(x)/p_draft(x)).",
    "one-hot": "One-hot (vLLM V1, PR #16899): the draft proposes its argmax a as a point mass, kept if the recorded "
               "u < p_target(a).",
    "exact-match": "Exact match (llama.cpp): the draft proposes its argmax a and the target draws its own token with "
                   "the recorded u as that draw's uniform (inverse CDF, a listed first), so the two match iff "
                   "u < p_target(a); where no u was recorded the probability p_target(a) is shown.",
    "block": "Block verification (Sun et al. 2024, arXiv 2403.10444, Algorithm 2): weights p_i = min(1, "
             "p_{i−1}·p_target(x_i)/p_draft(x_i)), h_i = R_i/(R_i + 1 − p_i) (h_K = p_K), the recorded u_i as "
             "η_i, and the block keeps its first τ = max{i : u_i ≤ h_i} drafts, even past a failed test.",
    "relaxed-top-k": f"Relaxed top-{RELAXED_TOP_K} (LOSSY control): the recorded draft is kept if it is among the "
                     f"target's {RELAXED_TOP_K} most likely tokens, whatever u is (no uniform, no ratio).",
}
