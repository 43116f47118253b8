"""The Run tab's lossless↔lossy dial (the /dial endpoint): transformers' static ensemble
verification ``"ensemble:W"`` (:func:`specviz.core.sampling.verify`) traced for one prompt as W goes
from 1 (exact, the full rule) to 0 (every draft kept).

Two views, side by side under "Is it lossless?":

* the first token drawn many times per W, as the lossless check draws it
  (:func:`specviz.ui.teach.dial.dial_experiment`): measured α against the measured distance of the
  histogram from p_target, with its chi-square p-value (a model computation: one GPU job);
* the last run's recorded passes replayed at each W (:func:`specviz.diagnose.rule_replay.ensemble_dial`):
  expected tokens per pass against the mean per-position distance, model-free.

The exact rules are marked at distance 0 on both.
"""

from __future__ import annotations

import functools
import time
from types import SimpleNamespace

import gradio as gr

from specviz.run.request import to_int
from specviz.diagnose.rule_replay import RULES as EXACT_RULES
from specviz.diagnose.rule_replay import ensemble_dial, rules_on_passes
from specviz.ui.serve import gpu
from specviz.ui.serve import gpu_budget
from specviz.ui.tabs import run_stream
from specviz.ui.serve import settings
from specviz.ui.draw import dial_chart
from specviz.ui.draw.escape import as_text
from specviz.ui.serve.feature import Feature, Plan
from specviz.ui.serve.fields import SHARED, request_from, spread
from specviz.ui.teach.dial import DIAL_WEIGHTS, dial_experiment
from specviz.ui.serve.user_errors import refused, user_errors

__all__ = ["DIAL", "build_panel", "dial_markdown", "dial_passes", "plan_dial", "run_dial", "wire"]

#: A chi-square p-value below this says the draws are not p_target's (the lossless check's reading).
REJECT_BELOW = 0.01
#: The page's default draws per weight: six weights, so about 6,000 verify steps.
DEFAULT_DRAWS = 1000
#: The Run tab's settings the dial takes: the run's, less the rule (the dial picks its own).
DIAL_FIELDS = tuple(name for name in SHARED if name != "rule")


def dial_markdown(report, seconds: float, temperature: float) -> str:
    """The draws' table (W, α, distance, p-value, verdict) and one sentence with the run's own
    numbers: how much α rose and how far the output moved from p_target between W = 1 and the
    smallest W. ``report``: a :class:`specviz.ui.teach.dial.DialReport`."""
    rows = "\n".join(
        f"| {d.weight:g} | {d.alpha:.3f} | {d.distance:.4f} | {d.p_value:.3g} | "
        f"{'passes' if d.p_value >= REJECT_BELOW else '**fails**'} |" for d in report.draws)
    first, last = report.draws[0], report.draws[-1]
    text = (f"**{report.n} first-token draws per w** in {seconds:.1f} s at temperature {temperature:g}; "
            f"the draft is {report.tv_draft:.3f} from p_target in total variation, and {report.n} direct draws "
            f"from p_target land {report.noise:.4f} from it (sampling noise).\n\n"
            "| w | α (drafts kept) | distance from p_target | chi-square p-value | lossless check |\n"
            f"|---|---|---|---|---|\n{rows}\n\n"
            f"From w = {first.weight:g} to w = {last.weight:g}, α went from {first.alpha:.2f} to {last.alpha:.2f} "
            f"while the output's distance from p_target went from {first.distance:.3f} to {last.distance:.3f}. "
            f"Exactly, α = 1 − w·TV and the distance is (1 − w)·TV, so α minus the distance stays at the full "
            f"rule's α, {1 - report.tv_draft:.3f}: the dial trades acceptance for distance one for one (over "
            "the whole vocabulary; the binned distance measured here is at most that).")
    if temperature == 0:
        text += ("\n\n**Note.** At temperature 0 both distributions are one-hot: every w either keeps the "
                 "draft or not, and there is no distribution to compare. Set the check's temperature above 0.")
    return text


@spread(DIAL_FIELDS)
def run_dial(values, n_draws=DEFAULT_DRAWS, progress=gr.Progress(), *, public: bool | None = None):
    """The lossless↔lossy dial: the first token drawn ``n_draws`` times under the ensemble rule at
    each weight of :data:`specviz.ui.teach.dial.DIAL_WEIGHTS`, α against the distance from
    p_target. ``temperature`` is the lossless check's own. Validated (:func:`plan_dial`), then one
    GPU job (:func:`dial_work`): the feature :data:`DIAL`."""
    return DIAL.result(values, n_draws, public, progress=progress)


def plan_dial(values: dict, n_draws, public: bool | None) -> Plan:
    """/dial's plan: the request and the draws validated (``gr.Error`` for a bad value, or for
    plain decoding: no draft to dial towards), reserved as the lossless check's draws, six times."""
    public = settings.is_public(public)
    request = request_from(values, public)
    with user_errors():
        n_draws = to_int("draws", n_draws, 100, (settings.PUBLIC_POLICY.max_draws if public else 100_000)
                         // len(DIAL_WEIGHTS))
    if request.plain:
        raise refused("Pick a drafter: with plain decoding there is no draft to dial towards.")
    cap = gpu_budget.cap_s(public, settings.PUBLIC_POLICY.max_run_s)
    duration = gpu_budget.draws_duration(request, n_draws * len(DIAL_WEIGHTS), cap)
    return Plan((request, n_draws), duration)


def dial_work(ctx: "gpu.JobContext", request, n_draws: int):
    """The dial's draws in the GPU job: one ``(figure, Markdown)`` pair."""
    prepared = run_stream.load_and_encode(request, ctx, warn=ctx.warn)
    if ctx.past_deadline():
        yield None, "**Stopped** at the end of the GPU time reserved for the dial: loading took it all. Try again."
        return
    with prepared.in_use():
        ctx(0.5, desc=f"Drawing {n_draws} first tokens at each of {len(DIAL_WEIGHTS)} weights…")
        t0 = time.perf_counter()
        with user_errors():
            report = dial_experiment(prepared.target.model, prepared.drafter, prepared.prompt_ids,
                                     request.sampling, n=n_draws, seed=request.seed,
                                     vocab_size=prepared.drafter.vocab_size)
        yield (dial_chart.dial_draws_figure(report),
               dial_markdown(report, time.perf_counter() - t0, request.sampling.temperature))


#: The dial (/dial), declared once (:mod:`specviz.ui.serve.feature`).
DIAL = Feature("dial", dial_work, plan_dial)


def dial_passes(state):
    """The last run's recorded passes at each weight (model-free): the figure and one sentence.
    ``state``: the Run tab's ``RunState`` or None."""
    rounds = state.rounds if state is not None else []
    points = ensemble_dial(rounds, DIAL_WEIGHTS)
    if points is None:
        return dial_chart.dial_passes_figure(None), ("No recorded chain passes yet: press **Run** with a drafter and "
                                                     "B = 1 (a chain), then trace the dial again.")
    on = rules_on_passes(rounds, state.k)
    exact = {name: sum(on.rules[name].tokens_per_pass) / 2 for name in EXACT_RULES} if on is not None else {}
    first, last = points[0], points[-1]
    text = (f"On the last run's passes ({as_text(state.label) or 'this run'}): from w = {first.weight:g} to "
            f"w = {last.weight:g}, tokens per pass {sum(first.tokens_per_pass) / 2:.2f} → "
            f"{sum(last.tokens_per_pass) / 2:.2f}, conditional α {sum(first.accept) / 2:.2f} → "
            f"{sum(last.accept) / 2:.2f}, mean distance per position {sum(first.distance) / 2:.3f} → "
            f"{sum(last.distance) / 2:.3f}.")
    return dial_chart.dial_passes_figure(points, exact), text


def build_panel(public: bool) -> SimpleNamespace:
    """The dial's accordion (placed where it is called, under "Is it lossless?"): its draws, its
    button, the two charts and their text."""
    d = SimpleNamespace()
    with gr.Accordion("Lossless ↔ lossy: the ensemble dial", open=False, elem_id="sv-dial-panel"):
        gr.Markdown("transformers ships **static ensemble verification** (`assistant_ensemble_weight` w): "
                    "accept a draft x with min(1, v(x)/p_draft(x)), v = w·p_target + (1 − w)·p_draft. At w = 1 it "
                    "is the full rule (exact); below 1 it keeps more drafts and its output follows v, not "
                    "p_target. Trace it for this prompt, from w = 1 to w = 0, at the check's temperature above; "
                    "the CLI runs it with `--rule ensemble:0.5`.")
        with gr.Row():
            d.n_draws = gr.Slider(100, (settings.PUBLIC_POLICY.max_draws if public else 20000) // len(DIAL_WEIGHTS),
                                  value=DEFAULT_DRAWS, step=100, label="First-token draws per w",
                                  elem_id="sv-dial-draws")
            d.button = gr.Button("Trace the dial", elem_id="sv-dial-btn")
        with gr.Row():
            d.draws_plot = gr.Plot(dial_chart.dial_draws_figure(None), label="First token", show_label=False,
                                   elem_id="sv-dial-draws-plot")
            d.passes_plot = gr.Plot(dial_chart.dial_passes_figure(None), label="Recorded passes", show_label=False,
                                    elem_id="sv-dial-passes-plot")
        d.text = gr.Markdown(elem_id="sv-dial-text")
        d.passes_text = gr.Markdown(elem_id="sv-dial-passes-text")
    return d


def wire(d: SimpleNamespace, ctx) -> None:
    """The dial's events: the draws (a generation, /dial) with the Run tab's settings and the
    check's temperature, and the recorded passes (model-free, from the Run tab's run state)."""
    inputs = [ctx.inputs["check_temperature"] if name == "temperature" else ctx.inputs[name]
              for name in DIAL_FIELDS]
    # update_wrapper: the API's description is run_dial's docstring, not functools.partial's.
    DIAL.wire(d.button.click, functools.update_wrapper(functools.partial(run_dial, public=ctx.public), run_dial),
              inputs + [d.n_draws],
              [d.draws_plot, d.text], ctx.public)
    d.button.click(dial_passes, ctx.run_state, [d.passes_plot, d.passes_text], api_name=False,
                   concurrency_limit=None, show_progress="hidden")
