"""The Run tab's generation: load the pair and encode the prompt (:func:`load_and_encode`, the
page's one place for it), warm up and measure the plain baseline, then stream the speculative run
(:func:`run_demo`, the /run endpoint).
"""

from __future__ import annotations

import functools
import logging
import time

import gradio as gr

from ..analysis import RunAnalysis
from ..request import RunRequest
from ..runner import make_generation, plain_baseline, saved_trace, warm_up
from ..view import _escape, _fmt, wrap_output
from . import settings, visitors
from .errors import user_errors
from .fields import NAMES, request_from, spread
from .gpu import gpu
from .state import RunState, RunView, waiting_view

logger = logging.getLogger("specviz.app")

CHART_INTERVAL_S = 1.0  # the browser lags behind if Plotly redraws on every round
# Token updates resend the whole panel (tens of kB for a few hundred tokens with their hover
# text); coalescing rounds that finish within this interval keeps the browser and the server's
# event loop from competing with generation on a small CPU. The final update is always sent.
TOKEN_INTERVAL_S = 0.25


def load_and_encode(request: RunRequest, progress) -> tuple:
    """(target, drafter, prompt_ids) for a request, with loading progress on the page.

    ``drafter`` is None for plain decoding; ``prompt_ids`` the prompt's token ids, through the
    target's chat template when the request asks for it (a warning on the page, and plain text,
    when the target has none). A suffix drafter searches only this visitor's own earlier outputs
    (:func:`specviz.ui.visitors.visitor_history`), in every mode.

    Raises:
        gr.Error: the models cannot load or cannot be paired.
    """
    def report(fraction, message):
        progress(fraction, desc=message)

    with user_errors():
        target, drafter = visitors.load_pair(request.target, request.draft, request.device, request.dtype, report,
                                             history=visitors.visitor_history())
    chat = request.chat
    if chat and not target.has_chat_template:
        gr.Warning(f"{target.name} has no chat template: using the prompt as plain text.")
        chat = False
    return target, drafter, target.encode(request.prompt, chat=chat)


def measure_baseline(target, drafter, prompt_ids, request: RunRequest, baselines: dict):
    """Warm up once per pair, then the plain baseline of these settings (measured here, or reused
    from this visitor's earlier run): yields progress lines, returns (baseline, baselines)."""
    warm_up(target, drafter, prompt_ids, request.k, request.sampling, once=True, branches=request.branches,
            tree_nodes=request.tree_nodes)
    key = repr((target.source, str(target.device), str(target.dtype), prompt_ids, request.sampling,
                request.max_new_tokens, request.seed))
    if key in baselines:
        return baselines[key], baselines
    plain = make_generation(target, None, prompt_ids, request.k, request.sampling, request.max_new_tokens,
                            request.seed)
    last = 0.0
    for _ in plain:
        if time.perf_counter() - last > 0.5:
            last = time.perf_counter()
            yield (f"Measuring plain decoding of the target for the speedup baseline: "
                   f"{len(plain.tokens)}/{request.max_new_tokens} tokens…")
    baseline = plain_baseline(plain)
    return baseline, {**baselines, key: baseline}


def log_run(request: RunRequest, label: str, analysis: RunAnalysis, outcome: str) -> None:
    """One log line per finished run: the pair, the settings and the summary figures."""
    s = request.sampling
    logger.info("run %s · %s | target=%s draft=%s K=%d T=%g top_k=%d top_p=%g max_new=%d seed=%d chat=%s "
                "device=%s dtype=%s | tokens=%d alpha=%s tokens/s=%.1f speedup=%s",
                outcome, label, request.target, request.draft, request.k, s.temperature, s.top_k, s.top_p,
                request.max_new_tokens, request.seed, request.chat, request.device, request.dtype,
                analysis.emitted, _fmt(analysis.alpha, ".3f", "n/a"), analysis.tokens_per_s,
                _fmt(analysis.speedup, ".2f", "n/a"))


def _skipped(**shown) -> RunView:
    """A view that leaves every output as it is, except those given."""
    return RunView(*[gr.skip()] * len(RunView._fields))._replace(**shown)


def _slider(state: RunState):
    """The replay slider spanning the finished run, at its end."""
    return gr.update(maximum=len(state.rounds), value=len(state.rounds))


def _status(run, request: RunRequest, label: str, done: bool, over: bool, max_run_s: float | None) -> str:
    if done:
        return f"**Done** ({run.finish_reason}) · {label}"
    if over:
        return (f"**Stopped** at the public time limit of {max_run_s:g} s · {label} · "
                f"{len(run.tokens)}/{request.max_new_tokens} tokens")
    return f"Generating · {label} · {len(run.tokens)}/{request.max_new_tokens} tokens"


def stream(run, request: RunRequest, state: RunState, baselines: dict, trace_of, max_run_s: float | None = None):
    """Run the speculative generation, yielding the page's outputs: tokens often, charts and the
    summary about once a second, and everything at the end. Every round yields (skipped outputs
    in between), so Stop ends the run within one round. With ``max_run_s`` (public mode) a run
    whose generation time passes it stops there: its tokens stay on screen, the status says so,
    and no error is raised."""
    last_chart = last_tokens = 0.0
    try:
        for round_ in run:
            generated_at = time.time()
            state.add(round_, run)
            done = run.finish_reason is not None
            over = not done and max_run_s is not None and run.elapsed_s > max_run_s
            if done or over or time.perf_counter() - last_chart > CHART_INTERVAL_S:
                last_chart = last_tokens = time.perf_counter()
                state.meta = trace_of(run)
                analysis = state.analysis()
                status = _status(run, request, state.label, done, over, max_run_s)
                view = state.view(None, status, done or over, generated_at, analysis=analysis)
                if done or over:
                    log_run(request, state.label, analysis, run.finish_reason or "time-limit")
                yield (*view, baselines, state, _slider(state) if done or over else gr.skip())
                if over:
                    break
            elif time.perf_counter() - last_tokens > TOKEN_INTERVAL_S:
                last_tokens = time.perf_counter()
                body = wrap_output("".join(state.html), generated_at=generated_at)
                yield *_skipped(tokens=body), baselines, state, gr.skip()
            else:
                yield *_skipped(), baselines, state, gr.skip()
    except ValueError as err:  # NonFiniteLogitsError among them: keep what was generated, say why it stopped
        yield (*state.view(None, f"**Stopped:** {_escape(str(err))}", True), baselines, state, _slider(state))
        raise gr.Error(str(err)) from None


def _trace_meta(run, request, target, drafter, baseline) -> dict:
    meta = saved_trace(run, request, target, drafter, baseline)
    del meta["rounds"]
    return meta


@gpu
@spread(NAMES)
def run_demo(values, baselines=None, progress=gr.Progress(), *, public: bool | None = None):
    """Stream a speculative run: (tokens HTML, summary, five charts, baselines, run state, replay slider).

    ``values``: the run's fields (:data:`specviz.ui.fields.FIELDS`, passed one per parameter);
    ``branches``/``tree_nodes`` among them are the draft tree's B and N (B = 1 drafts chains;
    N = 0 is the default budget). ``public``: public mode (bound by build_page; None reads
    :data:`specviz.ui.settings.PUBLIC`)."""
    public = settings.is_public(public)
    request = request_from(values, public)
    baselines = baselines if isinstance(baselines, dict) else {}
    target, drafter, prompt_ids = load_and_encode(request, progress)
    label = f"{target.name} ← {drafter.name}" if drafter else f"{target.name}, plain decoding"
    state = RunState.new(request, target, drafter, label)
    yield *waiting_view(wrap_output(""), f"Warming up {label}…", request.k), baselines, state, gr.skip()
    with user_errors():
        steps = measure_baseline(target, drafter, prompt_ids, request, baselines)
        while True:
            try:
                line = next(steps)
            except StopIteration as finished:
                state.baseline, baselines = finished.value
                break
            yield *_skipped(tokens=wrap_output(""), summary=line), baselines, state, gr.skip()
    run = make_generation(target, drafter, prompt_ids, request.k, request.sampling, request.max_new_tokens,
                          request.seed, branches=request.branches, tree_nodes=request.tree_nodes)
    trace_of = functools.partial(_trace_meta, request=request, target=target, drafter=drafter,
                                 baseline=state.baseline)
    yield from stream(run, request, state, baselines, trace_of,
                      max_run_s=settings.PUBLIC_POLICY.max_run_s if public else None)
