"""The lessons show what their titles promise on the run the visitor just made: a
lesson clears the previous run, and once a run finishes its note quotes that run's own figures,
for every lesson, and keeps the runs a comparison needs; the rules lesson judges each rule's
output against p_target; docs/classroom.md lists the page's lessons. Model-free: the runs are the bundled
traces (real SmolLM2-135M passes) with a plain baseline attached."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz.diagnose.diagnostics import diagnose, format_range
from specviz.diagnose.rule_replay import RULES
from specviz.figures.speedup import PlainBaseline
from specviz.core.records import RESAMPLED, DraftedToken, Round
from specviz.ui.draw.run_views import wrap_output
from specviz.ui.tabs.replay import INSPECTOR_HINT
from specviz.ui.tabs.lessons_tab import (CLEARED, LESSON_TARGETS, LESSONS, PROMPT_KINDS, after_run, apply_lesson,
                                   lesson_note)
from specviz.ui.serve.settings import EXAMPLE_LABELS, EXAMPLES, FREE_TEXT_PROMPT
from specviz.ui.serve.state import RunState
from specviz.ui.teach import lesson_runs
from specviz.ui.tabs.watch_tab import bundled

ROOT = Path(__file__).resolve().parents[1]
#: Every number a note may hold: 1.25, 0.5%, 2,000, 12 (a range's brackets and × are not part of it).
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")
#: Numbers that are settings or formulas the lessons name, not figures of a run: T = 1.5 and 0 in
#: the temperature lesson's instruction, the 0 and 1 of min(1, …) and max(0, …), the rules check's
#: level 0.001.
SETTINGS = {"0", "1", "1.5", "0.001"}
#: The paper lesson's constants: the closed form's worked example (α = 0.8, K = 4 gives 3.36, not the
#: 2.8 some write-ups quote) and the temperature its next run asks for.
PAPER_CONSTANTS = {"0.8", "4", "3.36", "2.8", "0.7"}
#: The free-text example that does not loop (specviz.ui.teach.lesson_runs.FREE_EXAMPLE).
PLAIN_TEXT = "The history of the printing press begins"
#: The trace each lesson is tried on (a drafter of the lesson's kind where one is bundled).
TRACES = {"copy_heavy": "copy_lookup", "early_exit": "early_exit_rejection"}


def _state(trace: str) -> RunState:
    """A finished run: a bundled trace's passes with a plain baseline of 60 ms a step (so c, v and
    the speedup are figures, as on the page)."""
    rounds = bundled(trace).rounds
    state = RunState(label=trace, k=4, rounds=rounds, finished=True)
    state.baseline = PlainBaseline(step_ms=60.0, tokens_per_s=16.0)
    return state


def _name(slug: str) -> str:
    return next(name for name, lesson in LESSONS.items() if lesson["slug"] == slug)


def _memory(slug: str) -> dict:
    return dict(zip(LESSON_TARGETS, apply_lesson(_name(slug), "cpu"), strict=True))["lesson_runs"]


def _on_the_run(note: str) -> str:
    assert "**On your run:**" in note, note[:200]
    return note.split("**On your run:**", 1)[1]


def _run_figures(state: RunState, slug: str) -> set[str]:
    """The run's figures as the page writes them, from its analysis and diagnostics (not from the
    lesson module): counts, α, tokens per pass, c, v, K·c + v, the closed forms, the speedup and its
    range, the loop share, each rule's expected tokens per pass and the rules check's figures."""
    a = state.analysis()
    d = diagnose(state.rounds, state.k, a.cost_ratio_c, a.verify_cost_v)
    ids = [t.id for r in state.rounds for t in r.emitted]
    cost = a.k * a.cost_ratio_c + a.verify_cost_v
    shown = {str(x) for x in (a.emitted, a.target_passes, a.accepted, a.tested, a.k, a.counts[RESAMPLED],
                              sum(1 for r in state.rounds if not r.drafted))}
    shown |= {f"{x:.2f}" for x in (a.tokens_per_pass, a.alpha, a.cost_ratio_c, a.verify_cost_v, cost,
                                   a.theoretical_speedup, a.predicted_tokens_per_pass / (a.k * a.cost_ratio_c / 2
                                                                                          + a.verify_cost_v))}
    shown |= set(NUMBER.findall(a.speedup_text)) | set(NUMBER.findall(a.speedup_doubt or ""))
    shown |= {f"{lesson_runs.loop_share(ids):.0%}".rstrip("%")}
    shown |= {str(a.k + 1), f"{a.median_verify_ms:.0f}", f"{a.plain_step_ms:.0f}", f"{a.tokens_per_pass / cost:.2f}",
              f"{a.predicted_tokens_per_pass:.2f}",  # the paper lesson's: v's two times, its closed forms
              f"{a.tokens_per_pass - a.k * a.cost_ratio_c:.2f}",  # two engines': the v past which it stops paying,
              f"{a.k * a.cost_ratio_c:.2f}"}  # or the drafts' own cost where no v could
    if d.rules is not None:
        shown |= {n for name in RULES for n in NUMBER.findall(format_range(d.rules.rules[name].tokens_per_pass))}
        shown |= {str(d.rules.passes), f"{d.rules.measured_tokens_per_pass:.2f}"}
    return shown


@pytest.mark.parametrize("slug", sorted(lesson_runs.WRITERS))
def test_each_lesson_quotes_the_figures_of_the_run_just_made(slug):
    """After a run, a lesson's note quotes only that run's figures (every number in its run part is
    one of the run's, as the summary writes it) and the headline ones are there: α and tokens per
    pass (the rules lesson: each rule's expected tokens per pass on the same passes)."""
    state = _state(TRACES.get(slug, "poem_int8"))
    prompt = EXAMPLES[0][0] if slug == "copy_heavy" else FREE_TEXT_PROMPT
    note, memory = after_run(_memory(slug), state, prompt, 1.0)
    part = _on_the_run(note)
    figures = _run_figures(state, slug)
    for check in memory["runs"][0].get("rules_check", []):  # the rules check's own figures (tested below)
        figures |= {f"{check['p_value']:.2f}", f"{check['tv']:.3f}", f"{check['draws']:,}"}
    constants = PAPER_CONSTANTS if slug == "paper_setting" else set()
    stray = [n for n in NUMBER.findall(part) if n not in figures | SETTINGS | constants]
    assert not stray, (stray, part)
    a = state.analysis()
    if slug == "rules":
        d = diagnose(state.rounds, 4)
        assert all(f"**{name}** {format_range(d.rules.rules[name].tokens_per_pass)}" in part for name in RULES), part
        # Each rule's first token at the poem's most different position (real SmolLM2-135M numbers):
        # every exact rule passes (500 draws: power 0.98 against a deviation of 0.15 in total variation).
        checks = memory["runs"][0]["rules_check"]
        assert [c["rule"] for c in checks] == [*RULES, "relaxed-top-k"]
        assert all(c["p_value"] > 0.001 for c in checks if c["lossless"]), checks
        assert part.count("passes, p = ") >= len(RULES)
    else:  # the copy-heavy lesson is about tokens per pass and what there is to copy, not α
        assert f"{a.tokens_per_pass:.2f}" in part and (slug == "copy_heavy" or f"{a.alpha:.2f}" in part), part
    assert len(memory["runs"]) == 1 and note.startswith(f"**Lesson: {_name(slug)}.**")


def test_a_lesson_compares_the_two_runs_it_asks_for():
    """Copy-heavy vs free text: the first run asks for the second; after both, the note holds both
    runs' tokens per pass side by side (the copy-heavy one from the copy trace, the free one from
    the poem), each named by its kind of prompt; a third run drops the oldest."""
    copy, free = _state("copy_lookup"), _state("poem_int8")
    note, memory = after_run(_memory("copy_heavy"), copy, EXAMPLES[0][0], 0.0)
    assert f"Now pick {lesson_runs.FREE_EXAMPLE}" in note
    note, memory = after_run(memory, free, PLAIN_TEXT, 0.0)
    copy_tpp, free_tpp = (f"{s.analysis().tokens_per_pass:.2f}" for s in (copy, free))
    assert f"Copy-heavy text gave {copy_tpp} tokens per pass, free text {free_tpp}" in note, note
    assert "**Copy-heavy:**" in note and "**Free text:**" in note and "looped" not in note
    looped = {**memory, "runs": [memory["runs"][0], {**memory["runs"][1], "loops": True}]}
    assert "This free text looped" in lesson_runs.lesson_text(looped)
    _, memory = after_run(memory, free, FREE_TEXT_PROMPT, 0.0)
    assert [r["prompt_kind"] for r in memory["runs"]] == ["free text", "free text"]


def test_the_free_text_the_lesson_names_is_a_free_text_example():
    """The example the copy-heavy lesson sends the visitor to is on the page and labelled free text
    (its greedy continuation does not loop: measured in lesson_runs.FREE_EXAMPLE's comment)."""
    label = lesson_runs.FREE_EXAMPLE.split("*")[1]
    index = next(i for i, shown in enumerate(EXAMPLE_LABELS) if shown.startswith(label))
    assert PROMPT_KINDS[EXAMPLES[index][0]] == "free text" and EXAMPLES[index][0] == PLAIN_TEXT
    assert label in lesson_note(_name("copy_heavy"))


def test_the_temperature_lesson_shows_each_temperatures_alpha():
    state = _state("poem_int8")
    alpha = f"{state.analysis().alpha:.2f}"
    note, memory = after_run(_memory("temperature"), state, FREE_TEXT_PROMPT, 0.0)
    assert f"**T = 0:** per-token α = **{alpha}**" in note and "set **Temperature** to 1.5" in note
    note, _ = after_run(memory, state, FREE_TEXT_PROMPT, 1.5)
    assert "**T = 1.5:**" in note and "**T = 0:**" in note and "set **Temperature**" not in note


def test_a_lesson_clears_the_previous_run_and_stays_through_runs():
    """Picking a lesson empties the token panel and forgets the run (the inspector, export and
    Watch a pass read it); a run without a lesson, or one that did not finish, leaves the note."""
    values = dict(zip(LESSON_TARGETS, apply_lesson(_name("early_exit"), "cpu"), strict=True))
    out = values["run.tokens"].split('class="sv-out">', 1)[1]
    assert out.startswith("<i hidden") and "sv-tok" not in out and values["run.state"] is None  # no token left
    assert values["run.tokens"].split('class="sv-out">')[0] == wrap_output("").split('class="sv-out">')[0]
    assert set(CLEARED) <= set(values) and values["run.summary"] == "Press **Run**."
    assert values["run.inspector"] == INSPECTOR_HINT and "speculative 0 ms" in values["run.race"].layout.title.text
    unfinished = _state("poem_int8")
    unfinished.finished = False
    assert after_run(values["lesson_runs"], unfinished, FREE_TEXT_PROMPT, 0.0)[0] == after_run(
        None, _state("poem_int8"), FREE_TEXT_PROMPT, 0.0)[0]  # both skip
    assert PROMPT_KINDS[EXAMPLES[0][0]] == "copy-heavy" and PROMPT_KINDS[FREE_TEXT_PROMPT] == "free text"


def test_loop_share_tells_a_loop_from_text_that_does_not_repeat():
    assert lesson_runs.loop_share(list(range(100))) == 0.0
    loop = list(range(10)) * 10
    assert lesson_runs.loop_share(loop) == pytest.approx(85 / 100)  # every token after the first 15 repeats
    assert lesson_runs.loop_share([1, 2]) == 0.0


def _token(p_draft: list[float], p_target: list[float]) -> DraftedToken:
    """A drafted token (id 0) with whole distributions over 6 tokens recorded as its top lists."""
    top = lambda p: [[i, f"t{i}", x] for i, x in sorted(enumerate(p), key=lambda e: -e[1])]  # noqa: E731
    return DraftedToken(id=0, text="t0", p_draft=p_draft[0], p_target=p_target[0], accept_prob=1.0, uniform=0.5,
                        accepted=True, tested=True, top_draft=top(p_draft), top_target=top(p_target))


def test_the_rules_lesson_judges_each_rules_output_against_p_target():
    """Each exact rule's first token follows p_target on a pair of distributions that differ (total
    variation 0.70) and the lossy control's does not. Power: 300 draws a rule, chi-square at level
    0.001 over at most 6 bins; the control keeps the draft's likeliest tokens, so its output sits at
    total variation above 0.3 from p_target (noncentrality ≥ 300 · 0.6² = 108): rejected with
    probability above 0.999, while each exact rule fails by chance with probability 0.001 (seeded,
    so the test is deterministic)."""
    token = _token([0.5, 0.3, 0.1, 0.05, 0.03, 0.02], [0.05, 0.05, 0.1, 0.2, 0.3, 0.3])
    checks = {c.rule: c for c in lesson_runs.rules_first_token_check([Round(index=0, drafted=[token])], draws=300)}
    assert set(checks) == {*RULES, "relaxed-top-k"}
    for rule in RULES:
        assert checks[rule].lossless and checks[rule].p_value > 0.001 and checks[rule].tv < 0.1, checks[rule]
    assert checks["relaxed-top-k"].p_value < 0.001 and checks["relaxed-top-k"].tv > 0.3


def _readme_slugs() -> list[str]:
    text = (ROOT / "docs" / "classroom.md").read_text(encoding="utf-8")
    line = re.search(r"`\?lesson=SLUG`: (.*?)\n- `\?tab", text, re.S)
    assert line, "docs/classroom.md has no ?lesson=SLUG item"
    return re.findall(r"`([a-z_]+)`", line.group(1))


def test_readme_lists_the_lessons_the_page_has():
    """docs/classroom.md's ?lesson=SLUG item names every lesson the page has, in the page's order, and no other."""
    assert _readme_slugs() == [lesson["slug"] for lesson in LESSONS.values()]


def test_every_tab_of_the_page_can_be_linked_and_readme_lists_them():
    """``?tab=ID`` reaches every tab the page has (link_query.TABS against page.py's tab ids), and
    docs/classroom.md's ``?tab=ID`` item names the same ids."""
    from specviz.ui.teach.link_query import TABS

    page_ids = re.findall(r'gr\.Tab\([^)]*id="([a-z_]+)"\)', (ROOT / "specviz" / "ui" / "page.py").read_text())
    assert sorted(TABS) == sorted(page_ids)
    line = re.search(r"`\?tab=ID`: selects a tab: (.*?)\n", (ROOT / "docs" / "classroom.md").read_text(encoding="utf-8"))
    assert line and sorted(re.findall(r"`([a-z_]+)`", line.group(1))) == sorted(page_ids)


def test_the_two_engines_lesson_says_the_verify_cost_past_which_speculation_loses():
    """On the pair's recorded code run with a plain step of 236.5 ms (its own baseline): the v past
    which the run's α and c stop paying is tokens per pass − K·c, quoted from the run; with a draft
    too slow for any v (a 60 ms step), the lesson says no verify cost could pay instead."""
    state = _state("pair_code")
    state.baseline = PlainBaseline(step_ms=236.5, tokens_per_s=4.1)
    note, _ = after_run(_memory("two_engines"), state, "x", 0.7)
    a = state.analysis()
    assert f"= **{a.tokens_per_pass - a.k * a.cost_ratio_c:.2f}** plain steps" in note
    assert f"v = {a.verify_cost_v:.2f}" in note and "One pair, two engines" in note
    slow = _state("pair_code")  # 60 ms a plain step: c above 1
    note, _ = after_run(_memory("two_engines"), slow, "x", 0.7)
    assert "no verify cost could make this pair pay" in note and "plain steps." not in note.split("Where it")[1][:60]
