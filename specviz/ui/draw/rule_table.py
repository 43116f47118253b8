"""The words of Watch a pass's rule switch: a chain pass's test replayed under one verification
rule (:func:`specviz.diagnose.rule_replay.replay_rule`), written as a Markdown sentence, one table row per
drafted position, and the drafts kept against the recording. Plain data in, Markdown out; every
piece of text that comes from a trace is escaped (:func:`specviz.ui.draw.escape.as_text`).
"""

from __future__ import annotations

from specviz.diagnose.rule_replay import RuleReplay
from specviz.core.rules import RELAXED_TOP_K, RULES
from specviz.core.records import Round
from specviz.ui.teach.beats import RULE_TESTS, fmt, quoted
from specviz.ui.draw.escape import as_text

#: What the table's probability column holds, by rule (the rest: the test's pass probability).
_COLUMN = {"block": "h_i (block)", "relaxed-top-k": f"in the target's top {RELAXED_TOP_K}"}


def _span(value: tuple[float, float], spec: str = ".4f") -> str:
    lo, hi = value
    return fmt(lo) if format(lo, spec) == format(hi, spec) else f"[{fmt(lo)}, {fmt(hi)}]"


def _kept_word(kept: bool | None) -> str:
    return "kept" if kept else "not kept" if kept is False else "open (bucket)"


def _listed(replay: RuleReplay):
    """The steps the rule makes: block verification draws every η_i; a token-by-token rule stops
    at its first failed test, so the positions after it are never tested (the table
    listed their tests too)."""
    if replay.rule == "block":
        return replay.steps
    failed = next((i for i, s in enumerate(replay.steps) if s.passes is False), None)
    return replay.steps if failed is None else replay.steps[: failed + 1]


def _rows(replay: RuleReplay) -> list[str]:
    rows = []
    for s in _listed(replay):
        u = "—" if s.uniform is None else fmt(s.uniform)
        test = "—" if s.passes is None and s.uniform is None else (
            "passes" if s.passes else "fails" if s.passes is False else "open (bucket)")
        rows.append(f"| {s.node + 1} | {as_text(quoted(s.text))} | {_span(s.accept)} | {u} | {test} | "
                    f"{_kept_word(s.kept)} |")
    return rows


def _untested(replay: RuleReplay) -> str:
    """The sentence on the positions a token-by-token rule never tests ("" when it tests them all)."""
    listed = len(_listed(replay))
    if listed == len(replay.steps):
        return ""
    rest = f"position {listed + 1}" if listed + 1 == len(replay.steps) else f"positions {listed + 1}–{len(replay.steps)}"
    verb = "is" if listed + 1 == len(replay.steps) else "are"
    return f"The test fails at position {listed}, so the rule stops there: {rest} {verb} never tested. "


def rule_replay_text(pass_index: int, round_: Round, replay: RuleReplay) -> str:
    """Markdown for one pass replayed under a rule.

    Args:
        pass_index: the pass's 0-based index in the run (shown 1-based).
        round_: the pass as recorded (its ``n_accepted`` is the recording's count).
        replay: :func:`specviz.diagnose.rule_replay.replay_rule`'s result for ``round_`` (a pass that
            drafted at least one token).

    Returns:
        The rule's one-sentence test, a table (position, token tested, probability, recorded u,
        test, kept), the drafts kept with the recorded u and the expected count; ranges are
        explained when the trace's top-10 lists leave one open.
    """
    rule, i = replay.rule, pass_index
    what = _COLUMN.get(rule, "P(pass) here")
    lo, hi = replay.accepted
    count = f"{lo}" if lo == hi else f"{lo} to {hi}"
    alpha = f"{lo / replay.drafted:.2f}" if lo == hi else f"{lo / replay.drafted:.2f} to {hi / replay.drafted:.2f}"
    bucket = any(s.accept[0] != s.accept[1] for s in replay.steps)
    lossy = ("" if RULES[rule].lossless else " **Lossy**: its output is not the target's; the Run tab's lossless "
             "check fails for it.")
    return (f"**Pass {i + 1} under {as_text(rule)}.** {as_text(RULE_TESTS[rule])}{lossy}\n\n"
            f"| position | token tested | {as_text(what)} | recorded u | test | under {as_text(rule)} |\n"
            f"|---|---|---|---|---|---|\n" + "\n".join(_rows(replay)) + "\n\n"
            + _untested(replay) +
            f"With the recorded u, **{as_text(rule)} keeps {count} of {replay.drafted} drafts** (acceptance "
            f"{alpha} on this pass); the recording kept {round_.n_accepted}. Expected drafts kept under "
            f"{as_text(rule)} given the recorded prefix: {_span(replay.expected, '.2f')}."
            + (" A range [low, high] is the bound the trace's top-10 lists leave: the rest of each distribution is "
               "an \"other tokens\" bucket of known mass, no token in it above the smallest kept probability "
               "(the bounds of the run's diagnostics)." if bucket else ""))
