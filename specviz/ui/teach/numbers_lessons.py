"""The lessons of "What the numbers hide", written from a finished run's own numbers: the oracle's
ceiling, the synthetic twin and the health checks, about four lines each. Every figure in them
comes from the run (its :class:`~specviz.figures.analysis.RunAnalysis`, :class:`~specviz.diagnose.twin.SyntheticTwin`
and :class:`~specviz.diagnose.health.Health`); none is a constant written here. No gradio, no torch.
"""

from __future__ import annotations

from specviz.figures.analysis import RunAnalysis
from specviz.diagnose.ceiling import first_departure
from specviz.diagnose.health import Health
from specviz.core.records import Round
from specviz.diagnose.twin import SyntheticTwin

__all__ = ["CEILING", "HEALTH", "TWIN", "ceiling_lesson", "health_lesson", "twin_lesson"]

#: The lessons' titles, as the Lessons tab names them.
CEILING = "The ceiling (the oracle drafter)"
TWIN = "What a constant α hides (the synthetic twin)"
HEALTH = "High α is not health (the health checks)"


def ceiling_lesson(a: RunAnalysis, rounds: list[Round], temperature: float) -> str:
    """The oracle lesson for an oracle run: what it reached, what bounds it, what a drafter can still win."""
    speed = f"a measured speedup of {a.speedup_text}" if a.speedup is not None and not a.speedup_doubt else \
        "a speedup still to be measured against plain decoding"
    bound = (f" The rest is the machine: one verify pass of K + 1 = {a.k + 1} positions costs "
             f"v = {a.verify_cost_v:.2f} plain steps." if a.verify_cost_v else "")
    parted = first_departure(rounds)
    sampled = (f" At T = {temperature:g} the replay is one sample of the target: the run left it at token {parted}, so "
               "this is a ceiling for greedy decoding, not for sampling." if temperature and parted else "")
    return (f"The target's own answer, replayed as the draft, gave {a.tokens_per_pass:.2f} tokens per pass over "
            f"{a.target_passes} passes (α = {a.alpha:.2f}) and {speed}: no drafter can do better at K = {a.k} on this "
            f"machine.{bound}{sampled} Run prompt lookup with the same settings: its distance below these figures "
            "is what a better drafter could still win.") if a.alpha is not None else ""


def twin_lesson(twin: SyntheticTwin) -> str:
    """The synthetic-twin lesson: the run's α, the two twins an engine would benchmark with, and where
    the run departs from them."""
    if twin.iid is None:
        return ""
    real, iid = twin.real, twin.iid
    length = real.mean_acceptance_length
    return (f"This run kept α = {twin.alpha:.2f} of its tested drafts, a mean acceptance length of {length:.2f}. An "
            f"engine's synthetic benchmark keeps every draft independently at one rate: {twin.alpha:.2f} (the i.i.d. "
            f"twin) or {twin.constant_p:.2f} (the constant-length twin, matching {length:.2f}). The i.i.d. twin keeps "
            f"nothing in {iid.zero_accept_share:.0%} of passes; this run kept nothing in {real.zero_accept_share:.0%} "
            f"over {twin.drafting_passes} drafting passes. {twin.sentence}")


def health_lesson(health: Health, a: RunAnalysis) -> str:
    """The health lesson: the run's α and tokens per pass beside what the four checks found."""
    found = health.found
    head = (f"This run's counters read α = {a.alpha:.2f} and {a.tokens_per_pass:.2f} tokens per pass over "
            f"{a.target_passes} passes." if a.alpha is not None else
            f"This run drafted nothing to test over {a.target_passes} passes.")
    if not found:
        return (head + f" None of the {len(health.checks)} checks found anything: no loop, drafts as asked, counters "
                "that agree with the tokens, an even pace. Run the greedy poem with prompt lookup and more tokens: "
                "when the model starts repeating itself, α rises while the text goes nowhere.")
    names = ", ".join(c.name for c in found)
    return (head + f" {len(found)} of {len(health.checks)} checks found something ({names}), which those figures "
            f"do not show. {found[0].sentence}")
