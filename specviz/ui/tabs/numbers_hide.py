"""The Run tab's "What the numbers hide" panel: a finished run's synthetic twin, its health checks,
the oracle's ceiling and the lessons written from its numbers; and the sentences the summary adds
from them. Model-free: everything is computed from the visitor's :class:`~specviz.ui.serve.state.RunState`.
"""

from __future__ import annotations

from specviz.figures.analysis import RunAnalysis, draft_depth
from specviz.diagnose.ceiling import ceiling_sentence
from specviz.diagnose.health import Health, check_health
from specviz.diagnose.twin import SyntheticTwin, synthetic_twin
from specviz.ui.draw.twin_charts import numbers_hide_markdown, twin_figure
from specviz.ui.teach.numbers_lessons import CEILING, HEALTH, TWIN, ceiling_lesson, health_lesson, twin_lesson

__all__ = ["numbers_hide_view", "run_health", "summary_notes"]


def run_health(state, rounds, a: RunAnalysis) -> Health:
    """The health checks of ``state``'s run (a :class:`~specviz.ui.serve.state.RunState`) over ``rounds``."""
    return check_health(rounds, a, state.eos, state.max_new_tokens or None, always_drafts=state.always_drafts,
                        branches_asked=state.branches)


def summary_notes(state, rounds, a: RunAnalysis) -> list[str]:
    """What the summary adds for a finished run: each health check that found something, and for
    an oracle run what its ceiling is made of (:func:`specviz.diagnose.ceiling.ceiling_sentence`)."""
    notes = [c.sentence for c in run_health(state, rounds, a).found]
    if state.oracle and a.k:
        notes.append(ceiling_sentence(a, rounds, state.temperature))
    return notes


def _parts(state) -> tuple[RunAnalysis, SyntheticTwin, Health]:
    a = state.analysis()
    return a, synthetic_twin(state.rounds, a.k, a.alpha), run_health(state, state.rounds, a)


def numbers_hide_view(state):
    """``(twin figure, panel Markdown)`` of the visitor's last run or loaded trace (before any:
    the empty figure and a hint)."""
    if state is None or not getattr(state, "rounds", None):
        return twin_figure(None), numbers_hide_markdown(None, None, None, [])
    a, twin, health = _parts(state)
    drafting = [r for r in state.rounds if r.drafted]
    ceiling = ceiling_sentence(a, state.rounds, state.temperature) if state.oracle and a.k else None
    lessons = [(TWIN, twin_lesson(twin)), (HEALTH, health_lesson(health, a))]
    if ceiling:
        lessons.insert(0, (CEILING, ceiling_lesson(a, state.rounds, state.temperature)))
    figure = twin_figure(twin, [r.n_accepted for r in drafting], [draft_depth(r) for r in drafting])
    return figure, numbers_hide_markdown(twin, health, ceiling, [(t, x) for t, x in lessons if x])
