"""The "Drafters side by side" tab (/side_by_side): the Run tab's prompt and settings run once
with each chosen drafter, one coloured output above the other with its figures."""

from __future__ import annotations

import functools
import time

import gradio as gr

from specviz.drafters import DRAFTER_KINDS
from specviz.ui.serve import gpu
from specviz.ui.serve import gpu_budget
from specviz.ui.serve import settings
from specviz.ui.context import PageContext
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.tab_views import greedy_texts_note, side_by_side_html
from specviz.ui.serve.feature import Feature, Plan
from specviz.ui.serve.fields import SHARED, drafter_spec, spread
from specviz.ui.prose import prose
from specviz.ui.tabs.sweep_steps import sweep_plan, sweep_steps
from specviz.ui.serve.user_errors import refused, user_errors

#: The menu: every drafter kind of the registry that names a lane
#: (:attr:`specviz.drafters.DrafterKind.lane`, in the registry's order), label → spec; a kind with
#: a parameter takes the Run tab's (its draft model, its layers).
SIDE_BY_SIDE = {kind.lane: spec for spec, kind in DRAFTER_KINDS.items() if kind.lane}
#: What is ticked at first (of those that run with the target on the device: :func:`side_by_side_menu`).
SIDE_BY_SIDE_DEFAULT = ("Prompt lookup", "int8 self-draft", "Early-exit self-draft", "None (plain decoding)")


def side_by_side_menu(device) -> tuple[list[str], list[str]]:
    """(the drafters offered, those ticked at first) for a target on ``device``: only the kinds
    that run there (:meth:`specviz.drafters.DrafterKind.runs_on`; on CUDA no int8 self-draft, and
    the early-exit one, its stand-in, stays ticked)."""
    offered = [label for label, kind in SIDE_BY_SIDE.items() if DRAFTER_KINDS[kind].runs_on(device)]
    return offered, [label for label in SIDE_BY_SIDE_DEFAULT if label in offered]


def on_device_change(device):
    """The Run tab's Device changed: offer and tick the drafters that run there."""
    offered, ticked = side_by_side_menu(settings.target_device(device))
    return gr.update(choices=offered, value=ticked)


@spread(SHARED)
def run_side_by_side(drafters, max_new_tokens, values, progress=gr.Progress(), *, public: bool | None = None):
    """Stream the same prompt and settings run with each chosen drafter: (HTML, status). Validated
    (:func:`plan_side_by_side`), then one GPU job (:func:`side_by_side_work`): the feature
    :data:`SIDE_BY_SIDE_RUN`."""
    yield from SIDE_BY_SIDE_RUN.stream(drafters, max_new_tokens, values, public, progress=progress)


def plan_side_by_side(drafters, max_new_tokens, values: dict, public: bool | None) -> Plan:
    """/side_by_side's plan: one request per ticked drafter (``gr.Error`` for none ticked or a bad
    setting), reserved for :func:`specviz.ui.serve.gpu_budget.sweep_duration`."""
    public = settings.is_public(public)
    if not isinstance(drafters, list) or not drafters:
        raise refused("Tick at least one drafter to compare.")
    with user_errors():
        specs = [drafter_spec(SIDE_BY_SIDE.get(d, d), values["draft_model"], values["early_exit_layers"])
                 for d in drafters]
    _, requests = sweep_plan("draft", "", max_new_tokens, values, public, replace=specs)
    duration = gpu_budget.sweep_duration(requests, gpu_budget.cap_s(public, settings.PUBLIC_POLICY.max_run_s))
    return Plan((requests, public), duration)


def build(ctx: PageContext) -> None:
    """The drafters to compare, the token count, Run and Stop, and the outputs."""
    gr.Markdown(prose("side_by_side_intro"))
    with gr.Row():
        offered, ticked = side_by_side_menu(settings.server_device())
        chosen = gr.CheckboxGroup(offered, value=ticked, label="Drafters", elem_id="sv-sbs-drafters")
        tokens = gr.Slider(1, 256, value=48, step=1, label="Tokens each", elem_id="sv-sbs-tokens")
    with gr.Row():
        start = gr.Button("Run side by side", variant="primary")
        stop = gr.Button("Stop", variant="stop")
    status = gr.Markdown(elem_id="sv-sbs-status")
    out = gr.HTML(elem_id="sv-sbs-out")
    SIDE_BY_SIDE_RUN.wire(start.click, functools.partial(run_side_by_side, public=ctx.public),
                          [chosen, tokens] + ctx.run_inputs(SHARED), [out, status], ctx.public, stop=stop)
    ctx.inputs["device"].change(on_device_change, ctx.inputs["device"], chosen, api_name=False,
                                concurrency_id="playground", concurrency_limit=None, show_progress="hidden")


# ----------------------------------------------------------------------------- in the GPU job
def side_by_side_work(ctx: "gpu.JobContext", requests: list, public: bool):
    """Drafters side by side (/side_by_side): (HTML, status) updates."""
    done: list[tuple[dict, object]] = []
    eos: set[int] = set()
    last = 0.0
    steps = sweep_steps(requests, ctx, public, ctx=ctx)
    for step in steps:
        if step.row is not None:
            eos = set(step.stop_ids)
            done.append((step.row, step.run))
            yield side_by_side_html(done, eos), f"Finished {len(done)}/{len(requests)} drafters."
        elif time.perf_counter() - last > 0.3:
            last = time.perf_counter()
            yield gr.skip(), f"Running {as_text(step.message)}…"
    if steps.stopped:
        yield side_by_side_html(done, eos), f"{steps.stopped_note()}: {len(done)}/{len(requests)} drafters finished."
    else:
        note = greedy_texts_note([row for row, _ in done], requests[0].dtype)
        yield side_by_side_html(done, eos), f"**Done**: {len(done)} drafters, same prompt and settings. {note}".rstrip()


#: Drafters side by side (/side_by_side), declared once (:mod:`specviz.ui.serve.feature`).
SIDE_BY_SIDE_RUN = Feature("side_by_side", side_by_side_work, plan_side_by_side)
