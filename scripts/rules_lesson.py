"""The lesson "Same distribution, different speed" on its one run, from the command line: the
figures its note fills in once the run finishes (:func:`specviz.ui.tabs.lessons_tab.after_run`), and
the note itself.

Its one run is made as the Run tab makes it: the lesson's settings (``LESSONS`` in
:mod:`specviz.ui.tabs.lessons_tab`) over the Run tab's defaults for the rest, through
:func:`specviz.ui.serve.fields.request_from`, :func:`specviz.run.runner.prepare_run` and
:meth:`specviz.run.runner.PreparedRun.generation`. Its recorded passes are then replayed under each
rule by :func:`specviz.diagnose.diagnostics.rules_on_passes`, written as the Run tab's summary writes them
(:func:`specviz.diagnose.diagnostics.format_range`), with the title of the Run tab's chart of them
(:func:`specviz.ui.draw.diagnostic_charts.rules_figure`).

The lesson's Dtype is the page's, *auto*: bfloat16 on a CPU that runs it natively, so the figures
are measured in bfloat16, on one torch thread (what the app runs on a 2-core machine,
:func:`specviz.ui.serve.threads.default_threads`)::

    HF_HUB_OFFLINE=1 python -m scripts.rules_lesson --dtype bfloat16 --threads 1
"""

from __future__ import annotations

import argparse

import torch

from specviz.diagnose.diagnostics import RULES, diagnose, format_range
from specviz.run.runner import prepare_run
from specviz.ui.draw.diagnostic_charts import rules_figure
from specviz.ui.serve.fields import NAMES, request_from
from specviz.ui.tabs.lessons_tab import LESSONS
from specviz.ui.serve.settings import DEFAULT_PRESET, PRESETS

LESSON = "Same distribution, different speed (verification rules)"
#: The Run tab's defaults for the settings a lesson leaves alone (specviz/ui/tabs/run_tab.py).
RUN_TAB_DEFAULTS = dict(target_id=PRESETS[DEFAULT_PRESET]["target"], draft_model="", early_exit_layers=4,
                        top_k=0, top_p=1.0, seed=0, device="auto", dtype="auto", branches=1, tree_nodes=0)


def lesson_request(dtype: str = "auto"):
    """The lesson's run as a validated request (``dtype``: the Run tab's Dtype, *auto* by default)."""
    values = {**RUN_TAB_DEFAULTS, **{n: v for n, v in LESSONS[LESSON].items() if n in NAMES}, "dtype": dtype}
    return request_from(values, public=False)


def lesson_rounds(dtype: str = "auto"):
    """The lesson's run made: ``(rounds, k)``."""
    prepared = prepare_run(lesson_request(dtype))
    run = prepared.generation().run()
    return run.rounds, prepared.request.k


def lesson_figures(rounds, k: int) -> dict[str, str]:
    """What the lesson quotes, as the page writes it: each rule's expected tokens per pass (two
    decimals, a range where the trace's top-10 lists leave one) and the full rule's on the run's own
    drafts (``full-these-drafts``), the tokens per pass the run measured, the passes replayed, and
    the chart's title."""
    d = diagnose(rounds, k)
    on = d.rules
    return {**{name: format_range(on.rules[name].tokens_per_pass) for name in (*RULES, "full-these-drafts")},
            "measured": f"{on.measured_tokens_per_pass:.2f}", "passes": str(on.passes),
            "chart": rules_figure(d).layout.title.text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rounds, k = lesson_rounds(args.dtype)
    for name, value in lesson_figures(rounds, k).items():
        print(f"{name}: {value}")
    print(lesson_note_after(rounds, k))


def lesson_note_after(rounds, k: int) -> str:
    """The lesson's note as the Run tab shows it once its run (``rounds``, lookahead ``k``) finishes."""
    from specviz.ui.tabs.lessons_tab import LESSON_TARGETS, after_run, apply_lesson
    from specviz.ui.serve.state import RunState

    memory = dict(zip(LESSON_TARGETS, apply_lesson(LESSON, "cpu"), strict=True))["lesson_runs"]
    note, _ = after_run(memory, RunState(k=k, rounds=list(rounds), finished=True), LESSONS[LESSON]["prompt"],
                        LESSONS[LESSON]["temperature"])
    return note


if __name__ == "__main__":
    main()
