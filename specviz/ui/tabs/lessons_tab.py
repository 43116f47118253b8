"""The Lessons tab: each button sets up the Run tab for one scenario (its settings, from
:data:`LESSONS`), clears the previous run from it, and says what to notice there (the note, from
``text/lessons/<slug>.md``). Once a run finishes, the note shows what the lesson's title promises
on that run, with the run's own figures (:mod:`specviz.ui.teach.lesson_runs`), and stays until
another lesson is picked."""

from __future__ import annotations

import functools

import gradio as gr

from specviz.diagnose.diagnostics import diagnose
from specviz.drafters import for_device
from specviz.ui.serve import settings
from specviz.ui.context import PageContext, select_tab_js
from specviz.ui.draw import race
from specviz.ui.draw.run_views import wrap_output
from specviz.ui.serve.fields import NAMES, drafter_spec, spec_fields
from specviz.ui.prose import prose
from specviz.ui.tabs.replay import reset_inspector
from specviz.ui.serve.settings import (DEFAULT_PRESET, EXAMPLE_LABELS, EXAMPLES, FREE_TEXT_PROMPT, PAIR_DRAFT,
                                       PAIR_PROMPTS, PAIR_TARGET, PRESETS)
from specviz.ui.share import copy_link, serving_note
from specviz.ui.serve.state import RunState, RunView, waiting_view
from specviz.ui.teach import lesson_runs, link_query
from specviz.ui.serve.user_errors import refused

#: One-click scenarios: the Run tab's settings they set (by field name; ``check_temperature`` and
#: ``control`` are the lossless check's), and the slug of their note. The rules lesson runs the
#: full rule: the Run tab replays that one run's sampled drafts under every rule (a one-hot or
#: exact-match run would draft argmax point masses, on which the rules cannot differ); naming
#: ``rule`` here also makes every other lesson set it back to the full rule.
LESSONS = {
    "Copy-heavy vs free text (prompt lookup)": dict(
        slug="copy_heavy", prompt=EXAMPLES[0][0], chat=True, drafter_kind="ngram", k=4, temperature=0.0,
        max_new_tokens=96),
    "Temperature 0 vs 1.5": dict(
        slug="temperature", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=0.0,
        max_new_tokens=48),
    "A good draft that is too slow (int8 on a CPU)": dict(
        slug="slow_draft", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=0.0,
        max_new_tokens=48),
    "A misaligned draft (early exit)": dict(
        slug="early_exit", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="early-exit", early_exit_layers=4, k=4,
        temperature=0.0, max_new_tokens=48),
    "A learned draft at T = 1 (EAGLE head)": dict(
        slug="learned_draft", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="eagle", k=3, temperature=1.0,
        max_new_tokens=64),
    "Same distribution, different speed (verification rules)": dict(
        slug="rules", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=1.0,
        max_new_tokens=48, rule="full", check_temperature=1.0, control=False),
    "Lossless check at T = 1": dict(
        slug="lossless_check", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="int8", k=4, temperature=1.0,
        max_new_tokens=48, check_temperature=1.0, control=False),
    # What the numbers hide: the panel of that name writes each of these from the run's numbers.
    "The ceiling (the oracle drafter)": dict(
        slug="oracle", prompt=EXAMPLES[0][0], chat=True, drafter_kind="oracle", k=4, temperature=0.0,
        max_new_tokens=48),
    "What a constant α hides (the synthetic twin)": dict(
        slug="synthetic_twin", prompt=EXAMPLES[1][0], chat=True, drafter_kind="ngram", k=4, temperature=0.0,
        max_new_tokens=128),
    "High α is not health (a greedy loop)": dict(
        slug="health", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="ngram", k=4, temperature=0.0,
        max_new_tokens=160),
    "The paper's own setting (a draft model of the same family)": dict(
        slug="paper_setting", prompt=PAIR_PROMPTS[0][0], chat=True, target_id=PAIR_TARGET, drafter_kind="model",
        draft_model=PAIR_DRAFT, k=4, temperature=0.0, max_new_tokens=96, check_temperature=0.7, control=False),
    "One pair, two engines (llama.cpp beside specviz)": dict(
        slug="two_engines", prompt=PAIR_PROMPTS[0][0], chat=True, target_id=PAIR_TARGET, drafter_kind="model",
        draft_model=PAIR_DRAFT, k=4, temperature=0.0, max_new_tokens=64),
    "Trading exactness for speed (the ensemble dial)": dict(
        slug="ensemble_dial", prompt=FREE_TEXT_PROMPT, chat=True, drafter_kind="early-exit", early_exit_layers=8,
        k=4, temperature=1.0, max_new_tokens=48, check_temperature=1.0, control=False),
}
#: The Run tab's components the lessons set, in field order.
LESSON_FIELDS = tuple(name for name in NAMES + ("check_temperature", "control")
                      if any(name in lesson for lesson in LESSONS.values()))


def lesson_note(name: str) -> str:
    """What to notice in lesson ``name`` (Markdown)."""
    return prose(f"lessons/{LESSONS[name]['slug']}").strip()


def lesson_settings(name: str, device) -> tuple[dict, str | None]:
    """Lesson ``name``'s settings for a target on ``device`` (``cpu`` or ``cuda``): a drafter that
    does not run there is replaced by its stand-in (:func:`specviz.drafters.for_device`), and the
    sentence saying so is returned with them (None when nothing was replaced)."""
    lesson = LESSONS[name]
    spec, sentence = for_device(drafter_spec(lesson["drafter_kind"], lesson.get("draft_model", ""),
                                             lesson.get("early_exit_layers", 4)),
                                device)
    return ({**lesson, **spec_fields(spec)} if sentence else lesson), sentence


#: The Run tab's outputs a lesson clears (the previous run's tokens, summary and charts, its race
#: and inspector, and the run itself, which the export and Watch a pass read), by ``run.<name>``.
CLEARED = (*(f"run.{name}" for name in RunView._fields), "run.state", "run.race", "run.inspector",
           "run.inspector_plot", "run.inspector_tree")
#: What a lesson sets, by name, in the order of :func:`apply_lesson`'s values: the Run tab's
#: controls (:data:`LESSON_FIELDS`), its lesson note, the lesson's memory of the runs made since
#: (:func:`specviz.ui.teach.lesson_runs.new_memory`) and the cleared run (:data:`CLEARED`; the Run
#: tab is selected in the browser, :func:`specviz.ui.context.select_tab_js`). The Lessons buttons
#: and a ``?lesson=`` link (:mod:`specviz.ui.links`) both list their outputs from these names, so
#: neither can send one value too many.
LESSON_TARGETS = (*LESSON_FIELDS, "lesson_note", "lesson_runs", *CLEARED)

#: The example prompts by kind, from their labels ("Fix typos (copy-heavy)"): what the lessons
#: that compare kinds of text call a run's prompt.
PROMPT_KINDS = {prompt: ("copy-heavy" if "copy-heavy" in label else "free text" if "free text" in label else "")
                for (prompt, _), label in zip(EXAMPLES, EXAMPLE_LABELS, strict=True)}


def lesson_values(name: str, device="auto") -> dict:
    """Lesson ``name``'s updates by :data:`LESSON_TARGETS` name: the Run tab's controls, its lesson
    note, a new memory of its runs and the previous run cleared (an empty view, no run state).
    ``device``: the Run tab's Device (``auto``: the server's): the lesson's drafter is one that
    runs there, and its note says which stands in for which.

    Raises:
        gr.Error: for an unknown lesson.
    """
    if name not in LESSONS:
        raise refused(f"Unknown lesson {name!r}.")
    lesson, sentence = lesson_settings(name, settings.target_device(device))
    # A lesson about another thing runs under the rule and on the target it was written for.
    lesson = {"rule": "full", "target_id": PRESETS[DEFAULT_PRESET]["target"], **lesson}
    stand_in = f"*{sentence}* " if sentence else ""
    empty = waiting_view(wrap_output(""), "Press **Run**.", int(lesson["k"]))
    return {**{f: gr.update(value=lesson[f]) if f in lesson else gr.skip() for f in LESSON_FIELDS},
            "lesson_note": gr.update(value=f"**Lesson: {name}.** {stand_in}{lesson_note(name)}", visible=True),
            "lesson_runs": lesson_runs.new_memory(LESSONS[name]["slug"]),
            **{f"run.{field}": value for field, value in empty._asdict().items()}, "run.state": None,
            "run.race": race.race_figure(race.race_lanes([], None)),
            **dict(zip(("run.inspector", "run.inspector_plot", "run.inspector_tree"), reset_inspector(), strict=True))}


def _lesson_name(slug: str) -> str | None:
    return next((name for name, lesson in LESSONS.items() if lesson["slug"] == slug), None)


def after_run(memory, state, prompt, temperature):
    """A run finished: the lesson picked (``memory``, :func:`specviz.ui.teach.lesson_runs.new_memory`)
    remembers its figures and its note shows them under the note's question; ``state``: the Run
    tab's :class:`~specviz.ui.serve.state.RunState`; ``prompt`` and ``temperature``: the Run tab's, which
    the run used. Returns ``(note, memory)``; skips both without a lesson or a finished run."""
    name = _lesson_name(memory.get("slug", "")) if isinstance(memory, dict) else None
    if name is None or not isinstance(state, RunState) or not state.finished or not state.rounds or not state.k:
        return gr.skip(), gr.skip()
    a = state.analysis()
    d = diagnose(state.rounds, state.k, a.cost_ratio_c, a.verify_cost_v)
    kind = PROMPT_KINDS.get(str(prompt or "").strip(), "")
    temp = float(temperature) if isinstance(temperature, (int, float)) else None
    figures = lesson_runs.run_figures(a, state.rounds, d, prompt_kind=kind, temperature=temp,
                                      judge_rules=memory["slug"] == "rules", drafter=state.drafter_name,
                                      weight_bytes=state.weight_bytes)
    memory = lesson_runs.remember(memory, figures)
    lines = lesson_runs.lesson_text(memory)
    if lines is None:
        return gr.skip(), memory
    return f"**Lesson: {name}.** {lesson_note(name)}\n\n**On your run:** {lines}", memory


def lesson_components(ctx: PageContext) -> dict:
    """The components a lesson sets, by :data:`LESSON_TARGETS` name."""
    return {**dict(zip(LESSON_FIELDS, ctx.run_inputs(LESSON_FIELDS), strict=True)), "lesson_note": ctx.lesson_note,
            "lesson_runs": ctx.lesson_runs, **{f"run.{name}": c for name, c in ctx.run_outputs.items()}}


def apply_lesson(name: str, device="auto"):
    """:func:`lesson_values` in :data:`LESSON_TARGETS` order (a Lessons button's outputs)."""
    values = lesson_values(name, device)
    return tuple(values[target] for target in LESSON_TARGETS)


def build(ctx: PageContext) -> None:
    """One button per lesson beside its note; a finished run fills the picked lesson's note in."""
    gr.Markdown("### Lessons\nEach button sets up the **Run** tab for one scenario and says what to notice there.")
    serving_note("sv-lessons-serve")  # once for the tab, not under each lesson's "Copy link"
    components = lesson_components(ctx)
    targets = [components[target] for target in LESSON_TARGETS]
    for name in LESSONS:
        with gr.Row():
            # sv-lesson-button: a system font stack (styles.LESSON_BUTTON_CSS), whose glyphs cover the label.
            button = gr.Button(name, scale=1, min_width=280, elem_classes="sv-lesson-button")
            with gr.Column(scale=3):
                gr.Markdown(lesson_note(name))
                slug = LESSONS[name]["slug"]
                copy_link("Copy link", f"sv-lesson-copy-{slug}", functools.partial(link_query.lesson_link, slug), None,
                          note=False)
        button.click(functools.partial(apply_lesson, name), ctx.run_inputs(("device",)), targets, api_name=False,
                     concurrency_id="playground", concurrency_limit=None
                     ).then(None, None, None, js=select_tab_js("run"), api_name=False)
    ctx.run_done.then(after_run, [ctx.lesson_runs, ctx.run_state, *ctx.run_inputs(("prompt", "temperature"))],
                      [ctx.lesson_note, ctx.lesson_runs], api_name=False, concurrency_id="playground",
                      concurrency_limit=None, show_progress="hidden")
