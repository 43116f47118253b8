"""The lesson "Same distribution, different speed": one full-rule run at its settings, whose
recorded passes the note replays under the four rules once the run finishes, with that run's own
figures (the note quoted an older run's, "20 passes … 2.40", against the page's 17 and
2.82), and whose first token it judges against p_target under each rule."""

from __future__ import annotations

import re

import pytest
import torch

from specviz.diagnose.diagnostics import RULES, diagnose
from specviz.ui.draw.diagnostic_charts import rules_figure
from specviz.ui.tabs.lessons_tab import LESSON_TARGETS, LESSONS, after_run, apply_lesson, lesson_note
from specviz.ui.serve.settings import FREE_TEXT_PROMPT
from specviz.ui.serve.state import RunState
from specviz.ui.tabs.watch_tab import bundled

LESSON = "Same distribution, different speed (verification rules)"
#: "Same 19 passes, four rules: …": the title of the Run tab's chart of the replay
#: (specviz.ui.draw.diagnostic_charts.rules_figure), its pass count the run's.
CHART = re.compile(r"Same (\d+) passes, four rules")
#: How the note quotes a rule's expected tokens per pass: "**one-hot** 1.50" (a range as the
#: summary writes one, "[1.49, 1.52]").
QUOTE = r"\*\*{rule}\*\* (\[?[0-9.]+(?:, [0-9.]+\])?)"


def _quoted(text: str) -> dict[str, str]:
    found = {rule: re.search(QUOTE.format(rule=re.escape(rule)), text) for rule in RULES}
    assert all(found.values()), {rule: bool(m) for rule, m in found.items()}
    return {rule: m.group(1) for rule, m in found.items()}


def _note_after(rounds, k: int) -> str:
    memory = dict(zip(LESSON_TARGETS, apply_lesson(LESSON, "cpu"), strict=True))["lesson_runs"]
    note, _ = after_run(memory, RunState(k=k, rounds=list(rounds), finished=True), FREE_TEXT_PROMPT, 1.0)
    return note.split("**On your run:**", 1)[1]


def test_the_rules_lesson_runs_once_under_the_full_rule_and_asks_before_it_tells():
    """The lesson sets up one full-rule run (the replay needs its sampled drafts' distributions: a
    one-hot or exact-match run drafts argmax point masses), says "same distribution" and not "same
    output", puts its question before the run, and quotes no figure before there is a run."""
    from scripts.rules_lesson import lesson_request

    lesson, text = LESSONS[LESSON], lesson_note(LESSON)
    request = lesson_request("bfloat16")
    assert lesson["rule"] == request.rule == "full" and request.draft == "int8" and request.seed == 0
    assert (request.k, request.sampling.temperature, request.max_new_tokens) == (4, 1.0, 48)
    assert "same distribution, not the same text" in text and "same output" not in text.lower()
    question = text.index("?")
    assert question < text.index("Press **Run**") and "predict" in text[:question].lower()
    assert not re.search(r"\d\.\d\d", text)  # no figure quoted from an older run


def test_the_rules_lesson_quotes_its_runs_replay_under_each_rule():
    """On a run (the bundled int8 poem, real SmolLM2-135M passes), the note names the Run tab's
    chart by its own title with the run's pass count, quotes each rule's expected tokens per pass
    as the summary writes it, and the run's own tokens per pass; block never keeps fewer than the
    full rule on the same passes (Sun et al., Theorem 2) and one-hot equals exact-match."""
    from scripts.rules_lesson import lesson_figures

    rounds = bundled("poem_int8").rounds
    figures = lesson_figures(rounds, 4)
    text = _note_after(rounds, 4)
    assert _quoted(text) == {rule: figures[rule] for rule in RULES}, (figures, text)
    on_screen = rules_figure(diagnose(rounds, 4)).layout.title.text
    assert CHART.search(on_screen) and CHART.search(on_screen).group(0) in text, (on_screen, text)
    assert f"under the full rule: {figures['measured']}" in text
    low = {rule: float(v.strip("[]").split(",")[0]) for rule, v in _quoted(text).items()}
    assert low["one-hot"] == low["exact-match"] and low["block"] >= low["full"] - 0.01
    assert "Same distribution" in text and "p_target" in text


@pytest.mark.slow
def test_the_rules_lesson_quotes_what_its_one_run_gives(one_torch_thread):
    """The lesson's run made as the Run tab makes it (its settings, the Run tab's defaults, Dtype
    auto as bfloat16 on this CPU, one torch thread as the app on two cores): the note filled in
    after it quotes each rule's expected tokens per pass on that run's passes to the digits the
    summary shows, the tokens per pass the run measured, and the chart's pass count. About 35 s on
    a busy 2-core machine (the model loads, then 48 tokens on one thread)."""
    from scripts.rules_lesson import lesson_figures, lesson_rounds

    assert torch.get_num_threads() == 1
    rounds, k = lesson_rounds("bfloat16")
    figures = lesson_figures(rounds, k)
    text = _note_after(rounds, k)
    assert _quoted(text) == {rule: figures[rule] for rule in RULES}, figures
    assert f"Same {figures['passes']} passes, four rules" in text and figures["chart"].startswith(
        f"Same {figures['passes']} passes")
    assert f"under the full rule: {figures['measured']}" in text, figures["measured"]
