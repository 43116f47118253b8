"""What runs on the GPU: the page's generations as module-level work functions for
:func:`specviz.ui.gpu.run_job`, and the models placed at import on a ZeroGPU Space.

Each work function takes the job's :class:`~specviz.ui.gpu.JobContext` first and the plain
arguments its callback validated (the callbacks in :mod:`~specviz.ui.run_stream`,
:mod:`~specviz.ui.lossless_check`, :mod:`~specviz.ui.experiments_tab` and
:mod:`~specviz.ui.side_by_side_tab` refuse bad input before any GPU is asked for), reaches the
models through the model cache (:mod:`specviz.models`' module globals: a pair already loaded, or
placed by :func:`place_at_import`, is reused, and ``prepared.in_use()`` pins it while it runs), and
yields the callback's outputs: strings, figures, dicts and the run's state, all picklable. Stop
(:meth:`~specviz.ui.gpu.JobContext.stopped`) and the deadline
(:meth:`~specviz.ui.gpu.JobContext.past_deadline`) end the loops with what was made kept.

The tab modules import this one, and this one reads them as modules at call time (never names at
import), so either may be imported first.
"""

from __future__ import annotations

import logging
import time

import gradio as gr

from . import experiments_tab, lossless_check, run_stream, settings, side_by_side_tab
from .draw.escape import as_text
from .draw.tab_views import side_by_side_html
from .gpu import JobContext, on_zero_gpu
from .sweep_steps import sweep_steps

logger = logging.getLogger("specviz.app")


# ----------------------------------------------------------------------------- work functions
def run(ctx: JobContext, request, baselines: dict, public: bool):
    """The Run tab (/run): the pair loaded (:func:`specviz.ui.run_stream.load_and_encode`), warmed
    up, its baseline timed or reused, and the speculative run streamed
    (:func:`specviz.ui.run_stream.warm_and_stream`): :data:`specviz.ui.state.RUN_OUTPUTS` tuples."""
    prepared = run_stream.load_and_encode(request, ctx, warn=ctx.warn)
    with prepared.in_use():  # no other load evicts the pair while it runs
        yield from run_stream.warm_and_stream(prepared, baselines, public, ctx)


def lossless(ctx: JobContext, request, n_draws: int, control: str, public: bool):
    """The "Is it lossless?" check (/lossless): one ``(figure, Markdown)`` pair."""
    started = time.perf_counter()
    prepared = run_stream.load_and_encode(request, ctx, warn=ctx.warn)
    max_run_s = settings.PUBLIC_POLICY.max_run_s if public else None
    if ctx.enforced and (max_run_s is None or ctx.budget_s < max_run_s):  # the reservation's deadline is tighter
        max_run_s = ctx.budget_s
    with prepared.in_use():  # no other load evicts the pair while it draws
        yield lossless_check.check(prepared, n_draws, control, started, max_run_s, ctx)


def sweep(ctx: JobContext, parameter: str, requests: list, last_analysis, public: bool):
    """An experiment (/sweep): :func:`specviz.ui.experiments_tab.sweep_outputs`' updates."""
    steps = sweep_steps(requests, ctx, public, ctx=ctx)
    yield from experiments_tab.sweep_outputs(parameter, requests, last_analysis, steps)


def side_by_side(ctx: JobContext, requests: list, public: bool):
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
        yield side_by_side_html(done, eos), f"**Done**: {len(done)} drafters, same prompt and settings."


#: Every work function a job may name (tests check each pickles by reference).
WORKS = (run, lossless, sweep, side_by_side)
_ = side_by_side_tab  # imported so that a worker unpickling a job has every tab's module loaded


# ----------------------------------------------------------------------------- models at import
def public_pairs() -> list[tuple[str, str]]:
    """(target, draft model or "") of each preset public mode runs on this server's device."""
    targets, drafts = settings.public_allowed()
    pairs = []
    for p in settings.PRESETS.values():
        if p["target"] in targets:
            pairs.append((p["target"], p["draft_model"] if p["draft_model"] in drafts else ""))
    return pairs


def place_at_import(load=None) -> list[str]:
    """On a ZeroGPU Space, load the public presets' models onto ``cuda`` now, at import, as
    ZeroGPU asks (its main process emulates CUDA and moves the weights into each worker): each
    with the device and dtype the public pin will request (:func:`specviz.ui.settings.public_server`),
    so the model cache's key matches the runs' and no worker loads a copy. Elsewhere nothing
    happens. The model cache's budget on a Space is not read from ``torch.cuda.mem_get_info``
    (emulated there): :func:`specviz.ui.settings.public_server` gives it.

    Args:
        load: the loader (default :func:`specviz.models.load_model`; tests pass their own).

    Returns:
        The names loaded, in order ([] off a Space). A model that fails to load is logged and
        skipped: its run will say why when a visitor asks for it. The model cache's count limit
        is raised to hold them all (six with today's presets; the byte budget still applies).
    """
    if not on_zero_gpu():
        return []
    from .. import models

    load = load or models.load_model
    server = settings.public_server()
    dtype = server.dtypes[0] if server.dtypes else "auto"
    names = list(dict.fromkeys(name for pair in public_pairs() for name in pair if name))
    if models.cache_info()["max_models"] < len(names):  # keep every placed model: none evicts another
        models.set_cache_limits(max_models=len(names))
    loaded: list[str] = []
    for name in names:
        try:
            load(name, device="cuda", dtype=dtype)
            loaded.append(name)
        except Exception as err:  # a model that cannot load now is refused with a sentence later
            logger.warning("not placed at import: %s (%s)", name, err, exc_info=True)
    return loaded
