"""Watch a pass's stage (:mod:`specviz.ui.tabs.watch_tab`): where the learner is (pass and beat), the
output so far, the pass's drafted tokens as chips coloured by what the beats so far revealed, the
pass's own token once drawn, and the beat's sentence. Plain data in (the trace's rounds and the
beats of :mod:`specviz.ui.teach.beats`), HTML out; its look is :data:`.styles.WATCH_CSS`, and the
stage's script (``js/stage.js``) reads the sentence (``.sv-watch-sentence``) as the beat figure's
text alternative. Every text from a run goes through :func:`.escape.as_text`."""

from __future__ import annotations

from specviz.figures.trace import emitted_piece, visible_text
from specviz.core.records import Round
from specviz.ui.teach.beats import DRAFT, TEST, Beat, beats, depths, is_chain
from specviz.ui.draw.escape import as_text

__all__ = ["stage_html"]


def _chip(text: str, classes: str, note: str = "") -> str:
    small = f"<small>{as_text(note)}</small>" if note else ""
    return f'<span class="sv-chip {classes}">{as_text(visible_text(text))}{small}</span>'


def _node_class(i: int, played: list[Beat], final: bool) -> str:
    drafted = {b.node for b in played if b.kind == DRAFT}
    verdicts = {b.node: b.accepted for b in played if b.kind == TEST}
    beat = played[-1]
    if i not in drafted:
        return "sv-w-pending"
    cls = ("sv-w-accepted" if verdicts.get(i) else "sv-w-rejected" if i in verdicts
           else "sv-w-untested" if final else "")
    if i == beat.node:
        cls += " sv-w-current" + (" sv-w-new" if beat.kind == DRAFT else "")
    return cls


def stage_html(label: str, rounds: list[Round], pass_index: int, beat_index: int, still: bool) -> str:
    """The stage: where we are, the output so far, the drafted tokens as chips coloured by what the
    beats so far revealed, the pass's own token once drawn, and the beat's sentence (a live region,
    also the picture's text alternative).

    ``label``: the run's name in words; ``rounds``: its verify passes; ``pass_index`` and
    ``beat_index``: 0-based, the beat within :func:`~specviz.ui.teach.beats.beats` of that pass;
    ``still``: no motion (the class ``sv-still``). The last 160 characters of the output before the
    pass are shown as its context.

    Raises:
        IndexError: a pass or a beat that the run does not have (the page clamps them first).
    """
    round_ = rounds[pass_index]
    all_beats = beats(round_)
    played = all_beats[: beat_index + 1]
    beat = played[-1]
    final = beat is all_beats[-1]
    before = "".join(t.text for r in rounds[:pass_index] for t in r.emitted)[-160:]
    chips = [_chip(t.text, _node_class(i, played, final), "" if is_chain(round_) else
                   f"pos {depths(round_)[i] + 1}") for i, t in enumerate(round_.drafted)]
    if final and round_.emitted and round_.emitted[-1].kind != "accepted":
        last = round_.emitted[-1]
        chips.append("→ " + _chip(emitted_piece(last), f"sv-w-{last.kind} sv-w-current sv-w-new", last.kind))
    return (f'<div class="sv-watch{" sv-still" if still else ""}">'
            f'<div class="sv-watch-progress">{as_text(label)} · pass {pass_index + 1} of {len(rounds)} · '
            f'beat {beat_index + 1} of {len(all_beats)} ({beat.kind})</div>'
            f'<div class="sv-watch-context">…{as_text(before)}</div>'
            f'<div class="sv-watch-strip">{"".join(chips)}</div>'
            f'<p class="sv-watch-sentence" role="status" aria-live="polite">{as_text(beat.sentence)}</p></div>')
