"""The Experiments tab (/sweep): one click varies temperature, K or the drafter for the Run tab's
prompt, target and settings; a table, three charts against the closed forms, and a CSV."""

from __future__ import annotations

import functools
import os
import time
from typing import NamedTuple

import gradio as gr

from specviz.run.sweep import TREND_WORDS, alpha_trend, write_csv
from specviz.ui.serve import gpu
from specviz.ui.serve import gpu_budget
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.context import PageContext
from specviz.ui.draw import charts
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.tab_views import SWEEP_HEADERS, greedy_texts_note, sweep_table
from specviz.ui.serve.feature import Feature, Plan
from specviz.ui.serve.fields import SHARED, spread
from specviz.ui.prose import LATEX, prose
from specviz.ui.tabs.sweep_steps import (
    SWEEP_DEFAULTS,
    SWEEP_LABELS,
    sweep_default,
    sweep_plan,
    sweep_steps,
)

METRICS = ("alpha", "tokens_per_pass", "speedup")


class SweepUpdate(NamedTuple):
    """One update of the experiment's outputs (/sweep), by name: the event lists its components
    and the callback its values from these fields, so nothing is matched by position. The charts
    are named as :data:`METRICS`; ``trend`` is the finished sweep's
    :attr:`specviz.run.sweep.AlphaTrend.direction`."""

    status: object
    table: object
    alpha: object
    tokens_per_pass: object
    speedup: object
    csv: object
    last_analysis: object
    trend: object


#: The outputs a finished setting rewrites (the rest of the tab's outputs travel with every update).
RESULTS = ("table", *METRICS, "csv")


def _csv(rows: list[dict], parameter: str) -> str:
    """The rows so far as a CSV file (specviz.run.sweep.write_csv) in this visitor's export folder
    (overwritten, not a new folder per setting); its path."""
    path = os.path.join(visitors.export_folder(), f"sweep-{parameter}.csv")
    with open(path, "w", encoding="utf-8", newline="") as out:
        write_csv(rows, out)
    return path


def _results(rows: list[dict], parameter: str) -> dict:
    """The :data:`RESULTS` of the rows so far, by name (the CSV's path, or None before any row)."""
    return {"table": sweep_table(rows, parameter), **{m: charts.sweep_figure(rows, parameter, m) for m in METRICS},
            "csv": _csv(rows, parameter) if rows else None}


@spread(SHARED)
def run_sweep_ui(parameter, values_text, max_new_tokens, values, last_analysis=None, progress=gr.Progress(), *,
                 public: bool | None = None):
    """Stream an experiment: (status, table, α chart, tokens/pass chart, speedup chart, CSV file,
    last_analysis, trend).

    The status line updates a few times a second; the table and charts when a setting finishes; the
    CSV (written with specviz.run.sweep.write_csv) after each finished setting, so a stopped sweep keeps
    what it measured. ``trend``: the finished sweep's :attr:`specviz.run.sweep.AlphaTrend.direction`
    (None until every setting has finished), for :func:`prediction_verdict`. Validated here
    (:func:`specviz.ui.tabs.sweep_steps.sweep_plan`), then one GPU job (:func:`sweep_work`)
    reserved for :func:`specviz.ui.serve.gpu_budget.sweep_duration`: the feature :data:`SWEEP`."""
    yield from SWEEP.stream(parameter, values_text, max_new_tokens, values, last_analysis, public, progress=progress)


def plan_sweep(parameter, values_text, max_new_tokens, values: dict, last_analysis, public: bool | None) -> Plan:
    """/sweep's plan: the settings to run (:func:`specviz.ui.tabs.sweep_steps.sweep_plan`, ``gr.Error``
    for a bad one) reserved for :func:`specviz.ui.serve.gpu_budget.sweep_duration`."""
    public = settings.is_public(public)
    parameter, requests = sweep_plan(parameter, values_text, max_new_tokens, values, public)
    duration = gpu_budget.sweep_duration(requests, gpu_budget.cap_s(public, settings.PUBLIC_POLICY.max_run_s))
    return Plan((parameter, requests, last_analysis, public), duration)


def sweep_outputs(parameter: str, requests: list, last_analysis, steps):
    """:func:`run_sweep_ui`'s updates from a sweep's ``steps`` (:class:`specviz.ui.tabs.sweep_steps.SweepSteps`)."""
    rows: list[dict] = []
    last = 0.0
    empty = {m: charts.sweep_figure([], parameter, m) for m in METRICS}
    yield SweepUpdate(status=f"Starting: {len(requests)} settings of {parameter}…", table=[], **empty, csv=None,
                      last_analysis=last_analysis, trend=None)
    for step in steps:
        if step.row is None:
            if time.perf_counter() - last > 0.3:
                last = time.perf_counter()
                yield SweepUpdate(status=f"Running {as_text(step.message)}…", **{n: gr.skip() for n in RESULTS},
                                  last_analysis=last_analysis, trend=None)
            continue
        rows.append(step.row)
        last_analysis = step.row
        trend = alpha_trend(rows, parameter) if len(rows) == len(requests) else None
        status = (f"**Done**: {len(rows)} settings of {parameter}. {trend.sentence} "
                  f"{greedy_texts_note(rows, requests[0].dtype)}".rstrip() if trend else
                  f"Finished {len(rows)}/{len(requests)} settings…")
        yield SweepUpdate(status=status, **_results(rows, parameter), last_analysis=last_analysis,
                          trend=trend.direction if trend else None)
    if steps.stopped:  # every output again: an API caller reads the last message only
        yield SweepUpdate(status=f"{steps.stopped_note()}: {len(rows)}/{len(requests)} settings of {parameter} "
                          "finished.", **_results(rows, parameter), last_analysis=last_analysis, trend=None)


#: The learner's prediction of a temperature sweep: the directions of :class:`specviz.run.sweep.AlphaTrend`.
PREDICTIONS = tuple(TREND_WORDS)


def prediction_verdict(status: str, parameter: str, guess: str | None, outcome: str | None):
    """The finished sweep's status with a line on the learner's prediction of α (``guess``: one of
    :data:`PREDICTIONS`) against the measured trend (``outcome``: the finished sweep's
    :attr:`specviz.run.sweep.AlphaTrend.direction`, None when α could not be compared); skips unless a
    temperature sweep finished with a guess."""
    if guess not in PREDICTIONS or SWEEP_LABELS.get(parameter) != "temperature" or not str(status).startswith(
            "**Done**"):
        return gr.skip()
    if outcome not in PREDICTIONS:
        line = f"You predicted α {guess}; too few drafts were tested to say what it did."
    elif outcome == guess:
        line = f"**Your prediction matched:** you said α {guess} as T rises, and it did."
    else:
        line = f"**Not what you predicted:** you said α {guess} as T rises; it {TREND_WORDS[outcome]}."
    return f"{status}\n\n{line}"


def build(ctx: PageContext) -> None:
    """The sweep's controls, status, table, charts and CSV, and their events."""
    gr.Markdown(prose("experiments_intro"), latex_delimiters=LATEX)
    with gr.Row():
        parameter = gr.Radio(list(SWEEP_LABELS), value="Temperature", label="Sweep", elem_id="sv-exp-param")
        values = gr.Textbox(SWEEP_DEFAULTS["temperature"], label="Values (spaces or commas)", elem_id="sv-exp-values")
        tokens = gr.Slider(1, min(256, settings.limits(ctx.public).max_new_tokens), value=48, step=1,
                           label="Tokens per setting", elem_id="sv-exp-tokens")
    with gr.Row():
        start = gr.Button("Run the experiment", variant="primary", elem_id="sv-exp-run")
        stop = gr.Button("Stop", variant="stop", elem_id="sv-exp-stop")
    guess = gr.Radio(list(PREDICTIONS), value=None, label="Predict first: what will α do as T rises?",
                     elem_id="sv-exp-guess")
    status = gr.Markdown("Press **Run the experiment**.", elem_id="sv-exp-status")
    table = gr.Dataframe(headers=SWEEP_HEADERS, interactive=False, wrap=True, elem_id="sv-exp-table")
    with gr.Row():
        plots = [gr.Plot(charts.sweep_figure([], "temperature", m), show_label=False, elem_id=f"sv-exp-{m}")
                 for m in METRICS]
    csv_file = gr.File(label="Results as CSV", elem_id="sv-exp-csv")
    # The drafters to sweep are those that run with the target on the Run tab's device.
    parameter.change(lambda p, device: sweep_default(SWEEP_LABELS[p], settings.target_device(device)),
                     [parameter, ctx.inputs["device"]], values, api_name=False, concurrency_id="playground",
                     concurrency_limit=None)
    # The prediction is about temperature: it shows only for a temperature sweep.
    parameter.change(lambda p: gr.update(visible=SWEEP_LABELS.get(p) == "temperature"), parameter, guess,
                     api_name=False, concurrency_id="playground", concurrency_limit=None, show_progress="hidden")
    inputs = [parameter, values, tokens] + ctx.run_inputs(SHARED) + [ctx.last_analysis]
    trend = gr.State(None)  # the finished sweep's AlphaTrend.direction
    outputs = SweepUpdate(status=status, table=table, **dict(zip(METRICS, plots)), csv=csv_file,
                          last_analysis=ctx.last_analysis, trend=trend)
    event = SWEEP.wire(start.click, functools.partial(run_sweep_ui, public=ctx.public), inputs, list(outputs),
                       ctx.public, stop=stop)
    event.then(prediction_verdict, [status, parameter, guess, trend], status, api_name=False,
               concurrency_id="playground", concurrency_limit=None, show_progress="hidden")


# ----------------------------------------------------------------------------- in the GPU job
def sweep_work(ctx: "gpu.JobContext", parameter: str, requests: list, last_analysis, public: bool):
    """An experiment (/sweep): :func:`specviz.ui.sweep_outputs`' updates."""
    steps = sweep_steps(requests, ctx, public, ctx=ctx)
    yield from sweep_outputs(parameter, requests, last_analysis, steps)


#: An experiment (/sweep), declared once (:mod:`specviz.ui.serve.feature`).
SWEEP = Feature("sweep", sweep_work, plan_sweep)
