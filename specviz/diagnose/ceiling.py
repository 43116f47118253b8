"""The oracle's ceiling: what it is made of, and how far each drafter is from it.

The oracle drafter (:mod:`specviz.drafters.oracle`) replays the target's own output, so it drafts
for free and, at T = 0, every draft is kept. What is left is the machine: one verify pass of K + 1
positions costs v plain steps (:attr:`specviz.figures.analysis.RunAnalysis.verify_cost_v`) and the
drafts K·c (c ≈ 0 for a replay), so no drafter at this K can beat

    ceiling = (K + 1) / (K·c + v)

(Leviathan et al. 2023, Theorem 3.8 with α = 1 and the verify cost measured; the same bound
:func:`specviz.figures.analysis.health_notes` uses for a draft too costly to ever pay). vLLM's replay
oracle (PR #62258) measured 10.5× where EAGLE-3 reached 2.85× on one GPU: the gap between a drafter
and the oracle is what a better drafter could still win; the oracle's own gap to the bound is what
the machine loses (uneven passes, bookkeeping).

At T > 0 a replayed token is one sample of the target, a point mass, so it is kept with probability
p_target(x), and after the first resample the run and the recording part ways: the oracle is then
a ceiling for greedy decoding only, and the sentence says so with the run's own numbers.
"""

from __future__ import annotations

from specviz.figures.analysis import RunAnalysis
from specviz.figures.speedup import format_speedup
from specviz.core.records import RESAMPLED, Round

__all__ = ["ceiling_sentence", "first_departure", "gap_phrase", "gap_to_oracle", "mean_p_target_tested"]

def first_departure(rounds: list[Round]) -> int | None:
    """The 1-based output position of the first resampled token (where a run at T > 0 leaves the
    recording it replays), or None when no draft was rejected."""
    position = 0
    for r in rounds:
        for t in r.emitted:
            position += 1
            if t.kind == RESAMPLED:
                return position
    return None


def mean_p_target_tested(rounds: list[Round]) -> float | None:
    """Mean p_target(x) of the tested drafts: for point-mass drafts, each one's chance of being kept."""
    values = [t.p_target for r in rounds for t in r.drafted if t.tested]
    return sum(values) / len(values) if values else None


def ceiling_sentence(a: RunAnalysis, rounds: list[Round], temperature: float) -> str:
    """What the oracle's ceiling is made of (c, v, K), in two or three sentences with the run's numbers.

    Args:
        a: the oracle run's analysis (c and v need its plain baseline; without one the sentence
            says the bound waits for it).
        rounds: its rounds.
        temperature: the run's temperature (0: greedy).
    """
    k = a.k
    measured = (f"this run: {a.tokens_per_pass:.2f} tokens per pass"
                + (f", speedup {a.speedup_text}" if a.speedup is not None and not a.speedup_doubt else ""))
    if a.cost_ratio_c is None or not a.verify_cost_v:
        bound = (f"The oracle replays the target's own output, so a pass can yield K + 1 = {k + 1} tokens for one "
                 f"verify pass; its ceiling (K + 1)/(K·c + v) waits for the plain baseline that measures c and v "
                 f"({measured}).")
    else:
        ceiling = (k + 1) / (k * a.cost_ratio_c + a.verify_cost_v)
        bound = (f"The oracle replays the target's own output: its drafts cost c = {a.cost_ratio_c:.3f} of a plain "
                 f"step, and a pass yields at most K + 1 = {k + 1} tokens for one verify pass costing "
                 f"v = {a.verify_cost_v:.2f} plain steps, so no drafter can beat (K + 1)/(K·c + v) = {ceiling:.2f}× "
                 f"at K = {k} on this machine ({measured}).")
    if temperature == 0:
        return bound + (" At T = 0 every replayed draft is the target's own argmax, so every pass keeps all K "
                        "until the recording ends.")
    mean_p = mean_p_target_tested(rounds)
    left = first_departure(rounds)
    kept = f" (here their mean p_target is {mean_p:.2f})" if mean_p is not None else ""
    parted = (f"; the run left the recording at token {left}, and past that the replay proposes another text's "
              "tokens" if left else "")
    return bound + (f" At T = {temperature:g} each replayed draft is one sample of the target, a point mass, so it "
                    f"is accepted with probability p_target(x){kept}{parted}.")


def gap_to_oracle(row: dict, oracle: dict) -> dict:
    """How far one drafter's figures are from the oracle's, at the same settings.

    Args:
        row, oracle: figures with ``tokens_per_pass`` and ``speedup`` (a sweep row, a bench row or
            :meth:`specviz.figures.analysis.RunAnalysis.scalars`).

    Returns:
        ``{"tokens_per_pass_gap", "speedup_gap", "share_of_ceiling"}``: oracle − drafter tokens per
        pass, oracle − drafter speedup (None without both speedups), and drafter ÷ oracle speedup
        (None likewise).
    """
    speedups = (row.get("speedup"), oracle.get("speedup"))
    have = all(s is not None for s in speedups) and not row.get("speedup_doubt") and not oracle.get("speedup_doubt")
    return {"tokens_per_pass_gap": oracle["tokens_per_pass"] - row["tokens_per_pass"],
            "speedup_gap": speedups[1] - speedups[0] if have else None,
            "share_of_ceiling": speedups[0] / speedups[1] if have and speedups[1] else None}


def gap_phrase(row: dict, oracle: dict) -> str:
    """The gap in words: ``"1.80 tokens per pass and 0.95× below the oracle (41% of its speedup)"``."""
    gap = gap_to_oracle(row, oracle)
    text = f"{gap['tokens_per_pass_gap']:.2f} tokens per pass"
    if gap["speedup_gap"] is not None:
        text += (f" and {format_speedup(gap['speedup_gap'])} below the oracle ({gap['share_of_ceiling']:.0%} of its "
                 "speedup)")
    else:
        text += " below the oracle"
    return text
