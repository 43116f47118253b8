"""Plain-data records of a generation run, consumed by the UI, the charts, the CLI and the tests.

A run is a list of :class:`Round` records. Each round is one target forward pass (a *verify
pass*): the drafted tokens with the probabilities and uniform draws that decided them, how many
were accepted, and the one token the target contributed (resampled at the first rejection, or the
bonus token when every draft survived). Plain autoregressive decoding is recorded in the same
shape, with no drafted tokens and ``kind="plain"``.

Nothing here imports torch: records are lists, ints, floats and strings, so they can be copied
into UI state, serialised to JSON and compared in tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
    """

    id: int
    text: str
    p_draft: float
    p_target: float
    accept_prob: float
    uniform: float
    accepted: bool
    tested: bool


@dataclass
class EmittedToken:
    """One token appended to the output.

    ``rejected_id``/``rejected_text`` name the draft token that was rejected at this position
    (only for ``kind == "resampled"``). ``p_target`` is the target's probability of this token at
    its position (before the residual for a resampled token).
    """

    id: int
    text: str
    kind: str
    p_target: float
    round: int
    rejected_id: int | None = None
    rejected_text: str | None = None


@dataclass
class Round:
    """One verify pass (or one plain decoding step).

    Times are wall-clock milliseconds: ``draft_ms`` is the drafter's time for this round's
    proposal (all K draft forward passes), ``verify_ms`` the target's single forward pass plus the
    accept test and resample.
    """

    index: int
    drafted: list[DraftedToken] = field(default_factory=list)
    n_accepted: int = 0
    emitted: list[EmittedToken] = field(default_factory=list)
    draft_ms: float = 0.0
    draft_steps: int = 0
    verify_ms: float = 0.0

    @property
    def n_proposed(self) -> int:
        return len(self.drafted)

    @property
    def round_alpha(self) -> float | None:
        """Accepted / proposed in this round, or None when nothing was proposed."""
        return self.n_accepted / self.n_proposed if self.drafted else None


@dataclass
class RunStats:
    """Summary of a run, derived only from its rounds and its wall time.

    Attributes:
        target_passes: number of target forward passes after the prompt (= rounds).
        proposed: drafted tokens actually proposed (the denominator of α).
        accepted: drafted tokens accepted.
        alpha: acceptance rate, accepted / proposed, in [0, 1]; ``None`` when nothing was proposed.
        tested: drafted tokens that actually faced the accept test (the accepted prefix plus the
            first rejected token; tokens after a rejection are proposed but never tested).
        alpha_hat: accepted / tested, the estimate of the per-token acceptance probability α that
            the closed forms in :mod:`specviz.theory` assume (Leviathan et al. 2023, Section 3.1).
            accepted / proposed underestimates it whenever a rejection discards later drafts.
        tokens_per_pass: emitted tokens / target passes.
        emitted: number of emitted tokens; equals the sum of the per-kind counts.
        counts: emitted tokens per kind.
        wall_s: wall-clock seconds of generation, prefill included, not counting time the consumer
            of the run spent between rounds (UI rendering and streaming).
        tokens_per_s: emitted tokens / wall_s.
        prefill_ms: time of the prompt forward passes (both models).
        draft_step_ms: mean time of one draft forward pass (ms), ``None`` without model drafts.
        verify_ms: mean time of one verify pass (ms).
    """

    target_passes: int
    proposed: int
    accepted: int
    alpha: float | None
    tested: int
    alpha_hat: float | None
    tokens_per_pass: float
    emitted: int
    counts: dict[str, int]
    wall_s: float
    tokens_per_s: float
    prefill_ms: float
    draft_step_ms: float | None
    verify_ms: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(rounds: list[Round], wall_s: float, prefill_ms: float = 0.0) -> RunStats:
    """Aggregate rounds into :class:`RunStats`.

    Args:
        rounds: the run's rounds, in order.
        wall_s: wall-clock seconds of the whole generation (seconds).
        prefill_ms: prompt processing time (ms).

    Returns:
        The run's :class:`RunStats`.
    """
    proposed = sum(r.n_proposed for r in rounds)
    accepted = sum(r.n_accepted for r in rounds)
    tested = sum(sum(1 for d in r.drafted if d.tested) for r in rounds)
    counts = {kind: 0 for kind in KINDS}
    for r in rounds:
        for tok in r.emitted:
            counts[tok.kind] += 1
    emitted = sum(counts.values())
    draft_steps = sum(r.draft_steps for r in rounds)
    draft_ms = sum(r.draft_ms for r in rounds)
    return RunStats(
        target_passes=len(rounds),
        proposed=proposed,
        accepted=accepted,
        alpha=accepted / proposed if proposed else None,
        tested=tested,
        alpha_hat=accepted / tested if tested else None,
        tokens_per_pass=emitted / len(rounds) if rounds else 0.0,
        emitted=emitted,
        counts=counts,
        wall_s=wall_s,
        tokens_per_s=emitted / wall_s if wall_s > 0 else 0.0,
        prefill_ms=prefill_ms,
        draft_step_ms=draft_ms / draft_steps if draft_steps else None,
        verify_ms=sum(r.verify_ms for r in rounds) / len(rounds) if rounds else None,
    )
