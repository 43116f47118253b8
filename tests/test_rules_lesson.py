"""The lesson "Same output, different speed": one full-rule run at its settings, whose recorded
passes the Run tab replays under the four rules; the lesson asks its question first and quotes what
that run gives (its figures are remade by ``scripts/rules_lesson.py``, the command in its docstring)."""

from __future__ import annotations

import re

import pytest
import torch

from specviz.diagnostics import DIAGNOSTICS_HEADERS, RULES, diagnose
from specviz.ui.draw.diagnostic_charts import rules_figure
from specviz.ui.lessons_tab import LESSONS, lesson_note
from specviz.ui.watch_tab import LAST_RUN, bundled

LESSON = "Same output, different speed (verification rules)"
#: "Same 19 passes, four rules: …": the title of the Run tab's chart of the replay
#: (specviz.ui.draw.diagnostic_charts.rules_figure), its pass count the run's.
CHART = re.compile(r"Same (\d+) passes, four rules: tokens per pass \(whiskers: top-10 range\)")
#: How the lesson quotes a rule's expected tokens per pass: "**one-hot** 1.50" (a range as the
#: summary writes one, "[1.49, 1.52]").
QUOTE = r"\*\*{rule}\*\* (\[?[0-9.]+(?:, [0-9.]+\])?)"


def _quoted(text: str) -> dict[str, str]:
    found = {rule: re.search(QUOTE.format(rule=re.escape(rule)), text) for rule in RULES}
    assert all(found.values()), {rule: bool(m) for rule, m in found.items()}
    return {rule: m.group(1) for rule, m in found.items()}


def test_the_rules_lesson_runs_once_under_the_full_rule_and_asks_before_it_tells():
    """The lesson sets up one full-rule run (the replay needs its sampled drafts' distributions: a
    one-hot or exact-match run drafts argmax point masses), says the settings it was measured at,
    puts its question before any figure, names the Run tab's chart and summary row that replay the
    run's passes under each rule (the chart's title made by the chart's own code), quotes all four
    rules in an order its numbers bear out, and keeps the lossless check's sentence."""
    from scripts.rules_lesson import lesson_request

    lesson, text = LESSONS[LESSON], lesson_note(LESSON)
    request = lesson_request("bfloat16")
    assert lesson["rule"] == request.rule == "full" and request.draft == "int8" and request.seed == 0
    assert (request.k, request.sampling.temperature, request.max_new_tokens) == (4, 1.0, 48)
    for said in ("int8", "K = 4", "T = 1", "seed 0", "48 tokens", "bfloat16"):
        assert said in text, said
    question = text.index("?")
    assert question < re.search(r"\d\.\d\d", text).start()
    assert text[:question].count("**full**") and "predict" in text[:question].lower()
    title = CHART.search(text)
    assert title, "the lesson does not name the chart by its title"
    on_screen = rules_figure(diagnose(bundled("poem_int8").rounds, 4)).layout.title.text
    assert CHART.fullmatch(on_screen), on_screen  # the pattern is the chart's own title
    assert DIAGNOSTICS_HEADERS[3].split(":")[0] in text  # the summary's row
    quoted = {rule: float(v.strip("[]").split(",")[0]) for rule, v in _quoted(text).items()}
    assert quoted["one-hot"] == quoted["exact-match"]  # the same acceptance, p_target(argmax p_draft)
    assert quoted["block"] >= quoted["full"] > quoted["one-hot"]
    assert LAST_RUN in text and "The same pass under another rule" in text  # the Watch tab's switch, on this run
    assert "the four exact rules pass" in text and "relaxed-top-k" in text and "fails" in text


@pytest.mark.slow
def test_the_rules_lesson_quotes_what_its_one_run_gives(one_torch_thread):
    """The lesson's run made as the Run tab makes it (its settings, the Run tab's defaults, Dtype
    auto as bfloat16 on this CPU, one torch thread as the app on two cores), its recorded passes
    replayed under each rule by specviz.diagnostics.rules_on_passes: the lesson quotes each rule's
    expected tokens per pass to the digits the summary shows, the full rule's on the run's own
    drafts, the tokens per pass the run measured, and the chart by its title with the run's pass
    count. About 35 s on a busy 2-core machine (the model loads, then 48 tokens on one thread)."""
    from scripts.rules_lesson import lesson_figures, lesson_rounds

    assert torch.get_num_threads() == 1
    figures = lesson_figures(*lesson_rounds("bfloat16"))
    text = lesson_note(LESSON)
    assert _quoted(text) == {rule: figures[rule] for rule in RULES}, figures
    assert figures["chart"] in text, figures["chart"]
    assert f"measured {figures['measured']}" in text, figures["measured"]
    assert f"these very drafts, {figures['full-these-drafts']}" in text, figures["full-these-drafts"]
