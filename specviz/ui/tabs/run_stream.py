"""The Run tab's generation: load the pair and encode the prompt (:func:`load_and_encode`, the
page's one place for it), warm up and measure the plain baseline, then stream the speculative run
(:func:`run_demo`, the /run endpoint).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import logging
import time

import gradio as gr

from specviz.figures.analysis import RunAnalysis
from specviz.run.baseline import STALE_AFTER_S, BaselineStore
from specviz.run.request import RunRequest
from specviz.run.runner import PreparedRun, baseline_key, baseline_steps, prepare_run, saved_trace
from specviz.figures.speedup import baseline_still_valid
from specviz.ui.serve import gpu
from specviz.ui.serve import gpu_budget
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.draw.escape import as_text
from specviz.ui.draw.run_views import (end_line, fmt_figure, sent_mark, stage_panel, stream_head, stream_tail,
                                       wrap_output)
from specviz.ui.serve.feature import Feature, Plan
from specviz.ui.serve.fields import NAMES, request_from, spread
from specviz.ui.serve.state import (
    FIGURES,
    KEEP,
    RUN_OUTPUTS,
    SHOWN_OUTPUTS,
    RunState,
    RunUpdate,
    RunView,
    waiting_view,
)
from specviz.ui.serve.threads import busy_note
from specviz.ui.serve.user_errors import refused, user_errors

logger = logging.getLogger("specviz.app")

#: The summary (and one chart) are updated about this often while a run streams: the browser lags
#: behind if Plotly redraws on every round.
CHART_INTERVAL_S = 1.0
#: The charts a streamed run redraws, one per summary update in turn, each in an update of its own
#: (:data:`CHART_GAP_S` after the summary's), so that each of the page's updates costs the browser
#: at most one Plotly redraw or one token-and-summary update, never both (five
#: redraws a second made the main thread of a busy 2-core machine run tasks of up to 1.5 s, and a
#: click wait 11 s; a redraw riding a token update made tasks of 250-550 ms where either alone was
#: about half). The other charts (acceptance by draft position, time per round, the diagnostics)
#: and the race are drawn at the end.
STREAMED_CHARTS = ("alpha", "tokens_per_pass", "speedup")
#: A chart's own update is sent at least this long (s) after the update before it, so that the
#: browser meets the two in separate tasks (two updates sent together can land in one task).
CHART_GAP_S = 0.15
# Coalescing rounds that finish within this interval into one token update keeps the browser
# (which compares the whole panel with its DOM on each update) from competing with generation on a
# small CPU. The final update is always sent. Rounds in between send nothing: each update is a
# task of the browser's main thread however little it changes (gradio refreshes every output's
# status on each one; 17 ms of the main thread each on a busy 2-core machine, 300 of them a run).
TOKEN_INTERVAL_S = 0.4
#: Stop's handler waits this long before showing the stopped run (see :func:`stop_run`).
STOP_SETTLE_S = 0.5
#: At a run's end the eight charts are drawn this many per update (:func:`final_updates`), each
#: update one task of the browser's main thread: all eight in one update were one task of 1.3-5 s
#: on a busy 2-core machine, during which a click waited, and two were still 300-430 ms.
FINAL_CHARTS_PER_UPDATE = 1


def load_and_encode(request: RunRequest, progress, warn=gr.Warning) -> PreparedRun:
    """The request prepared for a run (:func:`specviz.run.runner.prepare_run`, the one way the app, the
    CLI and the sweeps take): the pair loaded with progress on the page, the prompt encoded under
    the one chat-template policy (a target without a template reads it as plain text, said here as
    a warning) and its tokens checked against the request's limit, the stop ids and the pair's
    label. A suffix drafter searches only this visitor's own earlier outputs
    (:func:`specviz.ui.serve.visitors.visitor_history`), and Token Recycling drafts only from this
    visitor's own table (:func:`specviz.ui.serve.visitors.visitor_table`), in every mode. ``warn``
    shows a note as a pop-up (in a GPU job: :meth:`specviz.ui.serve.gpu.JobContext.warn`).

    Raises:
        gr.Error: the models cannot load or cannot be paired, or the prompt has more tokens (chat
            template included) than the request's limits allow.
    """
    def report(fraction, message):
        progress(fraction, desc=message)

    with user_errors():
        prepared = prepare_run(request, report, history=visitors.visitor_history(), table=visitors.visitor_table())
    for note in prepared.notes:
        warn(as_text(note))  # a pop-up reads HTML, and a note may name a model
    return prepared


#: Plain baselines measured on this server, shared by its visitors by settings (timing, not text:
#: see :class:`specviz.run.baseline.BaselineStore`); a visitor's prompt and outputs stay theirs.
SHARED_BASELINES = BaselineStore()
#: While a model loads or warms up, the status line says so after this long (s), then every WORK_EVERY_S.
#: Loading a pair already in the model cache takes about 15 ms, so 0.1 s shows no stage that
#: flashes and goes, and leaves the 1 s from Run to the stage to the round trip.
WORK_FIRST_S, WORK_EVERY_S = 0.1, 1.0


def while_working(work, say):
    """Run ``work()`` in a thread and yield ``say(elapsed_s)`` (a status line) after
    :data:`WORK_FIRST_S` and then every :data:`WORK_EVERY_S` until it ends; return its result
    (its exception is raised here). Quick work yields nothing. The thread runs in a copy of this
    context, so Gradio's warnings and progress still reach this visitor's page."""
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specviz-work") as pool:
        future = pool.submit(ctx.run, work)
        start, wait = time.perf_counter(), WORK_FIRST_S
        while True:
            try:
                return future.result(timeout=wait)
            except concurrent.futures.TimeoutError:
                yield say(time.perf_counter() - start)
                wait = WORK_EVERY_S


def measure_baseline(prepared: PreparedRun, baselines: dict, store: BaselineStore | None = None, should_end=None):
    """Warm up once per pair, then the plain baseline of these settings: this visitor's from an
    earlier run, else one this server measured for the same settings less than
    :data:`specviz.run.baseline.STALE_AFTER_S` ago (``store``, default :data:`SHARED_BASELINES`), else
    timed by :func:`specviz.run.runner.baseline_steps` (three samples, the CLI's and the sweeps'
    measurement too) and stored there. The warm-up comes first so that no sample times a cold
    model (a first run once timed plain decoding at 192 ms/token against 53–69 later).
    Yields status lines (warming up and for how long, timing plain decoding n/N, a reused
    baseline's age); returns (baseline, baselines). ``should_end`` (the job's deadline or Stop) is
    checked every round of the warm-up and of the timing: once true they end, and the baseline is
    None."""
    store = SHARED_BASELINES if store is None else store
    yield from while_working(lambda: prepared.warm_up(once=True, should_end=should_end),
                             lambda s: f"Warming up {prepared.label} (an untimed run, so that no timing sees a cold "
                                       f"model) · {s:.0f} s…")
    if should_end is not None and should_end():
        return None, baselines
    key = baseline_key(prepared)
    if key not in baselines and (shared := store.get(key)) is not None:
        baseline, age = shared
        yield (f"Using the plain baseline this server measured {age:.0f} s ago for these settings (kept for "
               f"{STALE_AFTER_S / 60:.0f} minutes)…")
        return baseline, {**baselines, key: baseline}
    baseline = yield from baseline_steps(prepared, baselines, should_end=should_end)
    if baseline is not None and key not in baselines:
        store.put(key, baseline)
    return baseline, ({**baselines, key: baseline} if baseline is not None else baselines)


def drop_if_contradicted(state: RunState, baselines: dict, store: BaselineStore | None = None) -> dict:
    """``baselines`` without the run's baseline when the finished run's own timings contradict it
    (:func:`specviz.figures.speedup.baseline_still_valid`), and the server's store
    (:data:`SHARED_BASELINES`) without it too; ``state.remeasure`` then says so."""
    if state.baseline is None or baseline_still_valid(state.baseline, state.rounds):
        return baselines
    state.remeasure = True
    (SHARED_BASELINES if store is None else store).drop(state.baseline)
    return {key: b for key, b in baselines.items() if b != state.baseline}


class TokenPanel:
    """The token panel of a streamed run, append-only: the legend and the panel's opening tag,
    then each update adds the rounds since the last one and a :func:`~specviz.ui.draw.run_views.sent_mark`;
    the last one adds :func:`~specviz.ui.draw.run_views.stream_tail`. Gradio sends a string output that
    extends its previous value as an "append" of the new part (``gradio.utils.diff``), so a
    round costs its own bytes, not the whole panel's.

    ``whole=True`` is the behaviour before: the whole panel on each update and ``gr.skip()``
    between them (kept for ``scripts/stream_bytes.py``'s comparison)."""

    def __init__(self, state: RunState, whole: bool = False):
        self.state, self.whole = state, whole
        self.html = wrap_output("") if whole else stream_head()
        self.shown = 0

    def current(self):
        """The panel as last sent (unchanged: gradio sends no bytes for it)."""
        return gr.skip() if self.whole else self.html

    def update(self, generated_at: float, done: bool = False, end: str = "") -> str:
        """The panel with every round so far; ``done`` closes it, after the line ``end`` (plain
        text, :func:`~specviz.ui.draw.run_views.end_line`) when one is given."""
        if self.whole:
            self.html = wrap_output("".join(self.state.html), done, generated_at)
            return self.html
        closing = (end_line(end) if end else "") + stream_tail(generated_at)
        self.html += "".join(self.state.html[self.shown:]) + (closing if done else sent_mark(generated_at))
        self.shown = len(self.state.html)
        return self.html


def log_run(request: RunRequest, label: str, analysis: RunAnalysis, outcome: str) -> None:
    """One log line per finished run: the pair, the settings and the summary figures."""
    s = request.sampling
    logger.info("run %s · %s | target=%s draft=%s K=%d T=%g top_k=%d top_p=%g max_new=%d seed=%d chat=%s "
                "device=%s dtype=%s | tokens=%d alpha=%s tokens/s=%.1f speedup=%s",
                outcome, label, request.target, request.draft, request.k, s.temperature, s.top_k, s.top_p,
                request.max_new_tokens, request.seed, request.chat, request.device, request.dtype,
                analysis.emitted, fmt_figure(analysis.alpha, ".3f", "n/a"), analysis.tokens_per_s,
                fmt_figure(analysis.speedup, ".2f", "n/a"))


def loading_update(status: str, baselines: dict, stage: str | None = None) -> tuple:
    """/run's outputs while the pair loads: the status line, and the same words (``stage``, plain
    text) in the token box (:func:`~specviz.ui.draw.run_views.stage_panel`); the rest as it is."""
    shown = {"tokens": stage_panel(stage)} if stage else {}
    return _run_update(_skipped(summary=status, **shown), baselines, KEEP)


def _skipped(**shown) -> RunView:
    """A view that leaves every output as it is, except those given."""
    return RunView(*[gr.skip()] * len(RunView._fields))._replace(**shown)


def _run_update(view: RunView, baselines: dict, state: RunState, slider=KEEP) -> tuple:
    """/run's outputs (:data:`~specviz.ui.serve.state.RUN_OUTPUTS`): the view, the visitor's baselines,
    the run state and the replay slider (:data:`~specviz.ui.serve.state.KEEP`: left as it is)."""
    return RunUpdate(view, baselines, state, slider).values(RUN_OUTPUTS)


def _slider(state: RunState):
    """The replay slider spanning the finished run, at its end."""
    return gr.update(maximum=len(state.rounds), value=len(state.rounds))


def _status(run, request: RunRequest, label: str, done: bool, over: bool, max_run_s: float | None,
            deadline_s: float | None = None) -> str:
    label = as_text(label)  # the pair's names come from outside (a model's name or directory)
    if done:
        return f"**Done** ({run.finish_reason}) · {label}"
    if over and deadline_s is not None:
        return (f"**Stopped** at the end of the GPU time reserved for this run ({deadline_s:.0f} s) · {label} · "
                f"{len(run.tokens)}/{request.max_new_tokens} tokens")
    if over:
        # What the cap counts, said where it bites (a run held the slot 77 s).
        return (f"**Stopped** at the public time limit of {max_run_s:g} s of generating (loading, warm-up and "
                f"timing plain decoding not counted) · {label} · {len(run.tokens)}/{request.max_new_tokens} tokens")
    return f"Generating · {label} · {len(run.tokens)}/{request.max_new_tokens} tokens"


def stream(run, request: RunRequest, state: RunState, baselines: dict, trace_of, max_run_s: float | None = None,
           panel: TokenPanel | None = None, ctx=None):
    """Run the speculative generation, yielding the page's outputs: tokens often (every
    :data:`TOKEN_INTERVAL_S`), the summary and one chart of :data:`STREAMED_CHARTS` in turn about
    once a second (the chart alone, in the next update at least :data:`CHART_GAP_S` after the
    summary's), and everything at the end, a chart per update (:func:`final_updates`). Rounds
    between updates yield nothing; Stop still ends the run within one round (the loop reads the
    run state's flag each round). With
    ``max_run_s`` (public mode) a run whose generation time passes it stops there: its tokens
    stay on screen, the status says so, and no error is raised. ``panel``: the token panel
    (:class:`TokenPanel`; default: a new append-only one). ``ctx``: the GPU job's
    :class:`~specviz.ui.serve.gpu.JobContext` (None: no job): Stop reaches the loop through its flag,
    and past its deadline the run stops as at the time limit, its tokens kept."""
    panel = panel if panel is not None else TokenPanel(state)
    last_chart = last_tokens = last_sent = 0.0
    turn = 0  # which of STREAMED_CHARTS the next summary update redraws
    chart = {}  # the chart drawn with the last summary, sent alone in the next update
    try:
        for round_ in run:
            if state.finished or (ctx is not None and ctx.stopped()):
                return  # Stop was pressed: its handler (stop_run) has shown the run as it stood
            generated_at = time.time()
            state.add(round_, run)
            done = run.finish_reason is not None
            late = not done and ctx is not None and ctx.past_deadline()
            over = not done and (late or (max_run_s is not None and run.elapsed_s > max_run_s))
            now = time.perf_counter()
            if done or over or (not chart and now - last_chart > CHART_INTERVAL_S):
                last_chart = last_tokens = last_sent = now
                state.meta = trace_of(run)
                analysis = state.analysis()
                if done or over:
                    state.finished = True
                    state.busy_note = state.busy_note or busy_note() or ""
                    if state.busy_note:  # it travels with the trace: a loaded run says it too
                        state.meta["busy_note"] = state.busy_note
                    baselines = drop_if_contradicted(state, baselines)
                    log_run(request, state.label, analysis, run.finish_reason or "time-limit")
                status = _status(run, request, state.label, done, over, max_run_s,
                                 ctx.budget_s if late else None)
                drawn = FIGURES if done or over else (STREAMED_CHARTS[turn % len(STREAMED_CHARTS)],)
                turn += 1
                view = state.view(None, status, done or over, generated_at, analysis=analysis, drawn=drawn)
                if state.finished and not (done or over):
                    return  # stopped while the charts were drawn
                if not (done or over):
                    chart, view = {drawn[0]: getattr(view, drawn[0])}, view._replace(**{drawn[0]: gr.skip()})
                    yield _run_update(view._replace(tokens=panel.update(generated_at)), baselines, state)
                    continue
                yield from final_updates(view, panel, generated_at, baselines, state,
                                         end=_end_words(run, request, done))
                if over:
                    break
            elif chart and now - last_sent > CHART_GAP_S:
                last_sent = now
                yield _run_update(_skipped(tokens=panel.current(), **chart), baselines, state)
                chart = {}
            elif now - last_tokens > TOKEN_INTERVAL_S:
                last_tokens = last_sent = now
                yield _run_update(_skipped(tokens=panel.update(generated_at)), baselines, state)
    except ValueError as err:  # NonFiniteLogitsError among them: keep what was generated, say why it stopped
        state.finished = True
        view = state.view(None, f"**Stopped:** {as_text(err)}", True)
        yield _run_update(view._replace(tokens=panel.update(time.time(), True)), baselines, state, _slider(state))
        raise refused(str(err)) from None


def _end_words(run, request: RunRequest, done: bool) -> str:
    """The token panel's last line for a run that ended by itself (``done``) or at a time limit."""
    n = len(run.tokens)
    if not done:
        return f"Stopped at the time limit · {n} of {request.max_new_tokens} tokens, kept"
    why = "the model ended its answer" if run.finish_reason == "eos" else f"the {request.max_new_tokens}-token limit"
    return f"Done · {n} tokens · {why}"


def final_updates(view: RunView, panel: TokenPanel, generated_at: float, baselines: dict, state: RunState,
                  end: str = ""):
    """A finished run's ``view`` (every chart drawn) as a few updates of the page, so that no one
    of them costs the browser more than :data:`FINAL_CHARTS_PER_UPDATE` chart redraws: the first
    adds the last tokens to the panel, each adds the next charts in the page's order, and the last
    one is the whole view (the panel closed, after the line ``end`` when one is given, the summary
    with its final status, every chart) with the replay slider. A chart already drawn is sent again unchanged in each later update: gradio
    sends an output equal to its previous value as no change (``gradio.utils.diff``), and a figure
    left out (``gr.skip()``) would be sent whole again by the last update, so it would be redrawn."""
    shown = {}
    for i in range(0, len(FIGURES) - FINAL_CHARTS_PER_UPDATE, FINAL_CHARTS_PER_UPDATE):
        shown.update({name: getattr(view, name) for name in FIGURES[i:i + FINAL_CHARTS_PER_UPDATE]})
        tokens = panel.update(generated_at) if i == 0 else panel.current()
        yield _run_update(_skipped(tokens=tokens, **shown), baselines, state)
    yield _run_update(view._replace(tokens=panel.update(generated_at, True, end)), baselines, state, _slider(state))


def stop_run(state):
    """Stop pressed: the run as it stood, with the status "**Stopped** by you at N/M tokens" and
    one log line; nothing changes when no run is going (``state`` None or finished). The GPU
    worker, where the state is a copy, is reached by the Stop the feature wires
    (:meth:`specviz.ui.serve.feature.Feature.wire`: the visitor's own running job), never through the slot
    a state names: a stale state's slot may belong to another visitor's job by now."""
    if not isinstance(state, RunState) or state.finished:
        return RunUpdate(_skipped()).values(SHOWN_OUTPUTS)
    # The page's copy (rebuilt from the job's records, specviz.ui.serve.deltas): the job's own loop ends
    # on the Stop flag the feature's Stop handler raises.
    state.finished = True
    # An update the stream sent just before Stop is still on its way to the page; let it land
    # first, or it would overwrite this status with "Generating".
    time.sleep(STOP_SETTLE_S)
    tokens = sum(len(r.emitted) for r in state.rounds)
    status = f"**Stopped** by you at {tokens}/{state.max_new_tokens} tokens · {as_text(state.label)}"
    logger.info("run stopped by the visitor · %s | tokens=%d/%d passes=%d", state.label, tokens,
                state.max_new_tokens, len(state.rounds))
    if not state.rounds:
        return RunUpdate(_skipped(summary=status), state=state).values(SHOWN_OUTPUTS)
    return RunUpdate(state.view(None, status, True), state=state, slider=_slider(state)).values(SHOWN_OUTPUTS)


def _trace_meta(run, request, target, drafter, baseline) -> dict:
    meta = saved_trace(run, request, target, drafter, baseline)
    del meta["rounds"]
    return meta


@spread(NAMES)
def run_demo(values, baselines=None, progress=gr.Progress(), *, public: bool | None = None):
    """Stream a speculative run: the outputs :data:`specviz.ui.serve.state.RUN_OUTPUTS` names (the view's
    tokens HTML, summary and five charts, then the baselines, the run state and the replay slider).

    ``values``: the run's fields (:data:`specviz.ui.serve.fields.FIELDS`, passed one per parameter);
    ``branches``/``tree_nodes`` among them are the draft tree's B and N (B = 1 drafts chains;
    N = 0 is the default budget). ``public``: public mode (bound by build_page; None reads
    :data:`specviz.ui.serve.settings.PUBLIC`). The request is validated (:func:`plan_run`), then runs as
    one GPU job (:func:`run_work`): the feature :data:`RUN`."""
    yield from RUN.stream(values, baselines, public, progress=progress)


def plan_run(values: dict, baselines, public: bool | None) -> Plan:
    """/run's plan: the request validated (:func:`specviz.ui.serve.fields.request_from`; ``gr.Error``
    for a bad value) and reserved for :func:`specviz.ui.serve.gpu_budget.request_duration` (a baseline
    to time counts unless the visitor's ``baselines`` may hold it)."""
    public = settings.is_public(public)
    request = request_from(values, public)
    baselines = baselines if isinstance(baselines, dict) else {}
    timed = gpu_budget.baseline_timed(request, baselines)  # the job's own predicate (runner.baseline_key)
    duration = gpu_budget.request_duration(request, timed, gpu_budget.cap_s(public, settings.PUBLIC_POLICY.max_run_s))
    return Plan((request, baselines, public), duration)


def warm_and_stream(prepared: PreparedRun, baselines: dict, public: bool, ctx=None):
    """:func:`run_demo` once the pair is loaded: warm up, the baseline, then the stream (``ctx``:
    the GPU job's :class:`~specviz.ui.serve.gpu.JobContext`, or None)."""
    request, target, drafter, label = prepared.request, prepared.target, prepared.drafter, prepared.label
    state = RunState.new(request, target, drafter, label)
    state.busy_note = busy_note() or ""  # and again at the end: a load that came during the run counts too
    state.stop_slot = ctx.slot if ctx is not None else -1
    panel = TokenPanel(state)
    # The stage alone first: the page draws it before the eight emptied charts, which the next
    # update brings.
    preparing = f"Preparing {as_text(label)}…"
    yield _run_update(_skipped(tokens=stage_panel(f"Preparing {label}…"), summary=preparing), baselines, state)
    yield _run_update(waiting_view(stage_panel(f"Preparing {label}…"), preparing, request.k), baselines, state)
    if ctx is not None and ctx.past_deadline():
        yield _ended_early(state, panel, baselines, ctx, "loading the models")
        return

    def should_end() -> bool:
        return state.finished or (ctx is not None and ctx.should_end())

    with user_errors():
        steps = measure_baseline(prepared, baselines, should_end=should_end)
        while True:
            try:
                line = next(steps)
            except StopIteration as finished:
                state.baseline, baselines = finished.value
                break
            if should_end():
                steps.close()
                break
            yield _run_update(_skipped(tokens=stage_panel(line), summary=as_text(line)), baselines, state)
    if state.finished or (ctx is not None and ctx.stopped()):
        return  # stopped while the baseline was timed: stop_run showed it
    if ctx is not None and ctx.past_deadline():
        yield _ended_early(state, panel, baselines, ctx, "warming up and timing the plain baseline")
        return
    run = prepared.generation()
    trace_of = functools.partial(_trace_meta, request=request, target=target, drafter=drafter,
                                 baseline=state.baseline)
    yield from stream(run, request, state, baselines, trace_of,
                      max_run_s=settings.PUBLIC_POLICY.max_run_s if public else None, panel=panel, ctx=ctx)


def _ended_early(state: RunState, panel: TokenPanel, baselines: dict, ctx, what: str) -> tuple:
    """/run's last update when the job's deadline passed before the speculative run began
    (``what``: the step that took the time): the run state kept and finished, the panel closed,
    the status saying why nothing was generated."""
    state.finished = True
    status = (f"**Stopped** at the end of the GPU time reserved for this run ({ctx.budget_s:.0f} s) while "
              f"{what}, before any token was generated · {as_text(state.label)} · ask for fewer tokens, or run "
              "again: the models stay loaded")
    logger.info("run stopped at the deadline while %s · %s", what, state.label)
    return _run_update(_skipped(tokens=panel.update(time.time(), True), summary=status), baselines, state)


# ----------------------------------------------------------------------------- in the GPU job
def run_work(ctx: "gpu.JobContext", request, baselines: dict, public: bool):
    """The Run tab (/run): the pair loaded (:func:`specviz.ui.load_and_encode`), warmed
    up, its baseline timed or reused, and the speculative run streamed
    (:func:`specviz.ui.warm_and_stream`): :data:`specviz.ui.serve.state.RUN_OUTPUTS` tuples."""
    # The status says what is happening from the first second: loading takes up to a minute on
    # a small CPU the first time, and nothing else would show but Gradio's timer.
    first_time = "only the first run with these models waits for this; up to a minute on a small CPU"
    prepared = yield from while_working(
        lambda: load_and_encode(request, ctx, warn=ctx.warn),
        lambda s: loading_update(f"Loading the models for {as_text(request.target)} ({first_time}) · {s:.0f} s…",
                                 baselines, f"Loading the models for {request.target} ({first_time}) · {s:.0f} s…"))
    with prepared.in_use():  # no other load evicts the pair while it runs
        yield from warm_and_stream(prepared, baselines, public, ctx)


#: The Run tab's generation (/run), declared once (:mod:`specviz.ui.serve.feature`).
RUN = Feature("run", run_work, plan_run)
