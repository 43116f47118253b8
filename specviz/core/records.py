"""What each round of a run leaves behind: plain-data records, the one source of every figure.

A run is a list of :class:`Round` records. Each round is one target forward pass (a *verify
pass*): the drafted tokens with the probabilities and uniform draws that decided them, how many
were accepted, and the one token the target contributed (resampled at the first rejection, or the
bonus token when every draft survived). Plain autoregressive decoding is recorded in the same
shape, with no drafted tokens and ``kind="plain"``.

Nothing here imports torch: records are lists, ints, floats and strings, so they can be copied
into UI state, serialised to JSON (:mod:`specviz.figures.trace`) and compared in tests. Every
figure derived from them lives in :mod:`specviz.figures.analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ACCEPTED", "BONUS", "KINDS", "PLAIN", "RESAMPLED", "DraftedToken", "EmittedToken", "Round", "effective_k"]

#: Kinds of emitted tokens.
ACCEPTED = "accepted"  # a draft token that passed the min(1, p_target/p_draft) test
RESAMPLED = "resampled"  # drawn from normalize(max(0, p_target - p_draft)) at the first rejection
BONUS = "bonus"  # drawn from the target after all drafted tokens were accepted
PLAIN = "plain"  # drawn from the target with nothing drafted (plain decoding, or a drafter with no guess)
KINDS = (ACCEPTED, RESAMPLED, BONUS, PLAIN)


@dataclass
class DraftedToken:
    """One token proposed by the drafter and judged by the verify step.

    ``accepted`` is False for the first rejected token *and* for every token after it (those were
    never tested: ``uniform`` and ``accept_prob`` are still recorded for them but ``tested`` is
    False).

    ``parent`` is the index in ``Round.drafted`` of the token this one continues, -1 for a token
    that continues the committed context. None means the previous token of the list: a chain.
    A tree round lists its nodes parents first, so a node's depth is its parent's plus one
    (:func:`specviz.figures.analysis.analyse` counts per-position acceptance by depth). In a tree,
    ``accepted`` is True exactly for the nodes of the accepted path (``Round.n_accepted`` of
    them, one per depth), ``tested`` for every node that faced a test (the children of the
    context and of accepted nodes, in turn, until one passed), and ``accept_prob`` is the
    probability its test used: against the residual left by the siblings rejected before it.

    ``top_draft`` and ``top_target`` (instrumented runs) are the most likely tokens under p_draft
    and p_target at this position, as ``[id, text, probability]`` lists, most likely first: the
    distributions actually used (after temperature, top-k and top-p), for the token inspector.
    """

    id: int
    text: str
    p_draft: float
    p_target: float
    accept_prob: float
    uniform: float
    accepted: bool
    tested: bool
    parent: int | None = None
    top_draft: list = field(default_factory=list)
    top_target: list = field(default_factory=list)


@dataclass
class EmittedToken:
    """One token appended to the output.

    ``rejected_id``/``rejected_text`` name the draft token that was rejected at this position
    (only for ``kind == "resampled"``; in a tree round, the last sibling rejected at that depth). ``p_target`` is the target's probability of this token at
    its position (before the residual for a resampled token).

    For a token the target drew (resampled, bonus, plain) in an instrumented run, ``p_source`` is
    its probability under the distribution it was drawn from (the normalised residual
    max(0, p_target − p_draft) for a resampled token, p_target otherwise) and ``top_source`` that
    distribution's most likely tokens as ``[id, text, probability]`` lists. An accepted token's
    story is its :class:`DraftedToken`.
    """

    id: int
    text: str
    kind: str
    p_target: float
    round: int
    rejected_id: int | None = None
    rejected_text: str | None = None
    p_source: float | None = None
    top_source: list = field(default_factory=list)


@dataclass
class Round:
    """One verify pass (or one plain decoding step).

    Times are wall-clock milliseconds: ``draft_ms`` is the drafter's time for this round's
    proposal (all K draft forward passes), ``verify_ms`` the target's single forward pass plus the
    accept test and resample, ``other_ms`` everything else the round did before it was handed to
    the consumer (cache rollback bookkeeping, records, text decoding). ``k`` is the lookahead
    asked of the drafter this round (K, or fewer near the length limit; 0 for plain decoding).
    ``elapsed_s`` is the run's generation time (s) when this round ended, prefill included and the
    consumer's pauses not (so a replay can show the run's speed as it stood after any round).
    ``root_from_prefill`` marks the first round, whose first distribution came from the prompt's
    prefill pass: its ``verify_ms`` covers only the pass over its drafted tokens (for a plain
    round, no forward pass at all), so it is no measure of a plain step.
    """

    index: int
    drafted: list[DraftedToken] = field(default_factory=list)
    n_accepted: int = 0
    emitted: list[EmittedToken] = field(default_factory=list)
    draft_ms: float = 0.0
    draft_steps: int = 0
    verify_ms: float = 0.0
    other_ms: float = 0.0
    k: int = 0
    elapsed_s: float = 0.0
    root_from_prefill: bool = False

    @property
    def n_proposed(self) -> int:
        return len(self.drafted)

    def drafted_for(self, slot: int) -> DraftedToken | None:
        """The drafted token behind ``emitted[slot]``: the accepted node at that depth for an
        accepted token, the (last) rejected sibling for a resampled one, None for a bonus or plain
        token. In a chain this is ``drafted[slot]``; in a tree the accepted nodes, listed parents
        first, are the path in depth order."""
        kind = self.emitted[slot].kind
        path = [i for i, t in enumerate(self.drafted) if t.accepted]
        if kind == ACCEPTED:
            return self.drafted[path[slot]] if slot < len(path) else None
        if kind != RESAMPLED:
            return None
        parent = path[-1] if path else -1
        rejected = [t for i, t in enumerate(self.drafted) if t.tested and not t.accepted
                    and (t.parent if t.parent is not None else i - 1) == parent]
        return rejected[-1] if rejected else None


def effective_k(k: int, drafting: bool) -> int:
    """The lookahead K a run drafts with: ``k`` when something drafts, 0 for plain decoding (no
    drafter), whatever K the settings held. Every count, trace and budget that says K reads it here.

    Args:
        k: the lookahead K asked for (tokens per pass).
        drafting: True when the run has a drafter (``drafter is not None``, ``not request.plain``).
    """
    return k if drafting else 0
