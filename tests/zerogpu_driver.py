"""Scenarios run by :mod:`tests.test_zerogpu_real`, each in a fresh Python under the real
``spaces`` emulation (:mod:`tests.zerogpu_harness` sets the environment): ``python -m
tests.zerogpu_driver SCENARIO`` prints one JSON line with what the test checks. A CLI script:
printing is its output."""

from __future__ import annotations

import json
import logging
import sys
import time


def _start() -> None:
    from tests.zerogpu_harness import install_cuda_stubs

    install_cuda_stubs()
    import spaces  # noqa: F401  (first, as app.py does: it patches torch)


def _cache_entries() -> list[dict]:
    from specviz.models import loading as models

    return [{"name": e["name"], "device": e["device"], "dtype": e["dtype"]} for e in models.cache_info()["entries"]]


def scenario_import() -> dict:
    """``import app`` in public mode: what the model cache holds afterwards, and the log's warnings."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logging.getLogger("specviz").addHandler(handler)
    t0 = time.perf_counter()
    import app  # noqa: F401

    return {"entries": _cache_entries(), "warnings": records[-10:], "import_s": time.perf_counter() - t0}


def _hub_values() -> dict:
    """The page's values for the SmolLM2 hub preset, as a visitor sends them in public mode."""
    from specviz.ui.serve import settings

    preset = settings.PRESETS["SmolLM2-135M → SmolLM2-1.7B-Instruct · hub, GPU"]
    return dict(prompt="Fix the typos: Teh cat sat on teh mat.", target_id=preset["target"], drafter_kind="model",
                draft_model=preset["draft_model"], early_exit_layers=4, k=4, temperature=0.0, top_k=0, top_p=1.0,
                max_new_tokens=8, seed=0, chat=True, device="auto", dtype="auto")


def scenario_deploy() -> dict:
    """A first deploy: ``import app`` in public mode, then ``spaces``' own packing as ``launch()``
    runs it (the placed tensors written to the offload folder, the hub blobs they were mapped from
    deleted), then a visitor's hub-preset request through the page's validation and the model
    loads its job makes: the sentence each gives, or "ok"."""
    import os
    import pathlib

    from spaces.zero import torch as zero_torch

    from tests.zerogpu_harness import OpenedFiles, snapshot_files_opened

    hub = pathlib.Path(os.environ["HF_HUB_CACHE"])
    with OpenedFiles(hub.glob("models--*/blobs")) as watch:
        result = scenario_import()
    result["opened"] = snapshot_files_opened(hub, watch.opened)
    from specviz.models import loading as models
    from specviz.ui.serve.fields import request_from
    from tests.zerogpu_harness import HUB_MODELS

    packed = zero_torch.pack()
    weights_left = sorted(str(p.relative_to(hub)) for p in hub.glob("models--*/snapshots/*/*.safetensors")
                          if p.exists())
    outcome = {}
    try:
        request = request_from(_hub_values(), public=True)
        outcome["request"] = "ok"
        for name in (request.target, request.draft):
            loaded = models.load_model(name, device=request.device, dtype=request.dtype)
            outcome[f"load {name}"] = f"ok {loaded.device}"
    except Exception as err:
        outcome["request"] = f"{type(err).__name__}: {err}"
    return {**result, "packed_bytes": packed, "weights_left": weights_left, "hub_models": list(HUB_MODELS),
            **outcome}


# ----------------------------------------------------------------------------- the forked worker
#: The visitor's secret, as the token ids a run would add to their suffix history and table.
SECRET = [4242, 31337, 4242, 27182, 31337]


def remember(ctx, tokens):
    """A work function doing what a run does to the visitor's stores (its output added to their
    suffix history, the target's top ids after it to their table); yields the worker's pid."""
    import os

    import torch

    from specviz.ui.serve import visitors

    visitors.visitor_history().add(list(tokens))
    visitors.visitor_table().update(list(tokens), torch.tensor([[t] for t in tokens]))
    yield os.getpid()


def _holds(history, table, tokens) -> bool:
    """Whether a history or table holds any of ``tokens`` (a table: as a row or a candidate)."""
    seen = {t for seq in history.to_list() for t in seq} if history is not None else set()
    if table is not None:
        seen |= {t for token in tokens for t in table.row(token)} | {t for t in tokens if table.row(t)}
    return bool(seen & set(tokens))


def probe(ctx, tokens):
    """A work function reporting what the worker holds: whether the job's own stores, and whether
    any history or table alive anywhere in the worker's memory (every one the garbage collector
    tracks, the worker's per-visitor stores included), hold ``tokens``."""
    import gc
    import os

    from specviz.drafters import RecycleTable, SuffixHistory
    from specviz.ui.serve import visitors

    mine = (visitors.visitor_history(), visitors.visitor_table())
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, (SuffixHistory, RecycleTable)) and o not in mine]
    anywhere = any(_holds(o, None, tokens) if isinstance(o, SuffixHistory) else _holds(None, o, tokens) for o in alive)
    yield {"pid": os.getpid(), "job_sees": _holds(*mine, tokens), "worker_holds": anywhere,
           "worker_sessions": len(visitors.HISTORIES) + len(visitors.TABLES)}


def count(ctx, rounds, pause_s):
    """A work function of ``rounds`` rounds of ``pause_s`` seconds each, yielding the round's
    number and ending early, as a run's loop does, when Stop is pressed or the deadline passes."""
    for i in range(rounds):
        if ctx.should_end():
            return
        time.sleep(pause_s)
        yield i


class _Scheduler:
    """Stand-ins for the device API calls ``spaces.zero.client`` makes (``schedule``, ``allow``,
    ``release``), answering as the ZeroGPU scheduler does: one card (index 0, idle, so the wrapper
    reuses its worker), and the worker killed (SIGKILL) once its charged reservation
    (``client.get_duration_seconds``, the real one) runs out unless released first."""

    def __init__(self) -> None:
        import threading

        self.timers: dict[str, threading.Timer] = {}
        self.released: list[tuple[str, bool]] = []
        self.count = 0

    def install(self) -> None:
        from spaces.zero import client

        client.schedule, client.allow, client.release = self.schedule, self.allow, self.release

    def schedule(self, task_id, request=None, duration=None, gpu_size=None, **_):
        import threading

        from spaces.zero import client
        from spaces.zero.api import ScheduleResponse

        self.count += 1
        token = f"allow-{self.count}"
        timer = threading.Timer(client.get_duration_seconds(duration, gpu_size), self.abort)
        timer.daemon = True
        timer.start()
        self.timers[token] = timer
        return ScheduleResponse(idle=True, nvidiaIndex=0, nvidiaUUID="GPU-harness", allowToken=token)

    def allow(self, allow_token: str) -> None:  # in the worker: nothing to tell the device API
        return None

    def release(self, allow_token: str, *, fail: bool = False, allow_404: bool = False) -> None:
        self.timers.pop(allow_token).cancel()
        self.released.append((allow_token, fail))

    @staticmethod
    def abort() -> None:
        """The platform takes the card back: every worker is killed."""
        import multiprocessing
        import os
        import signal

        children = multiprocessing.active_children()
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
        # Dead, and seen dead by the wrapper's own Process objects, before the next job asks for
        # its worker. spaces' sentinel thread (``Worker._close_on_exit``) reaps the worker in its
        # own join; until it has stored the exit code, ``is_alive()`` on the same object still
        # answers True (its waitpid gets ECHILD), and the next job is handed the dead worker: "GPU
        # task aborted" (seen once in a full run, when a plain join here returned first).
        deadline = time.monotonic() + 10
        for child in children:
            while child.exitcode is None and time.monotonic() < deadline:
                time.sleep(0.01)


def _no_card_start_up() -> None:
    """The worker's two start-up steps that need a real card become no-ops: ``torch.init``
    (``.cuda()`` on a tensor) and ``torch.move`` (the packed tensors to the card); these jobs
    place nothing."""
    from spaces.zero import torch as zero_torch

    zero_torch.init = lambda nvidia_uuid: None
    zero_torch.move = lambda callback=None: None


class _Visitor:
    """A page's request as the app reads it: its session hash."""

    def __init__(self, session: str) -> None:
        self.session_hash = session


def _job(session: str, work, *args, duration_s: int = 60, **kwargs):
    from specviz.ui.serve import gpu
    from specviz.ui.serve import visitors

    token = visitors.JOB_SESSION.set(session)  # make_job reads the visitor as a callback would
    try:
        return gpu.make_job(work, *args, duration_s=duration_s, **kwargs)
    finally:
        visitors.JOB_SESSION.reset(token)


def _ended(job, timeout_s: float = 10.0) -> None:
    """Wait until the job's stream is closed and its slot released (the worker then idle)."""
    from specviz.ui.serve import gpu

    limit = time.monotonic() + timeout_s
    while job.stop_slot in gpu._running and time.monotonic() < limit:
        time.sleep(0.01)


def _stop_part() -> dict:
    """Visitor A's 200-round job; visitor B presses Stop at A's round 3, A at round 8."""
    import os

    from specviz.ui.serve import gpu

    job = _job("visitor-a", count, 200, 0.05)
    outputs, other_stopped, own_at, own_s = [], None, None, None
    for value in gpu.stream_job(job):
        outputs.append(value)
        if len(outputs) == 3:
            other_stopped = gpu.stop_session(_Visitor("visitor-b"))
        if len(outputs) == 8:
            own_at, own_s = len(outputs), time.monotonic()
            gpu.stop_session(_Visitor("visitor-a"))
    ended_s = time.monotonic() - own_s if own_s is not None else None
    _ended(job)
    return {"outputs": len(outputs), "other_stopped": other_stopped, "own_at": own_at,
            "after_own_stop": len(outputs) - (own_at or 0), "end_after_stop_s": ended_s,
            "main_pid": os.getpid()}


def _run(session: str, work, *args):
    from specviz.ui.serve import gpu

    job = _job(session, work, *args)
    outputs = list(gpu.stream_job(job))
    _ended(job)
    return outputs[-1]


def _main_holds(tokens) -> bool:
    """Whether any history or table alive in the main process holds ``tokens``."""
    import gc

    from specviz.drafters import RecycleTable, SuffixHistory

    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, (SuffixHistory, RecycleTable))]
    return any(_holds(o, None, tokens) if isinstance(o, SuffixHistory) else _holds(None, o, tokens) for o in alive)


def _forget_part() -> dict:
    """Visitor F presses Forget while their job runs. Visitor A's run adds the secret; A presses
    Forget; then B's job and A's next job probe the worker. Then C runs with the secret and closes
    the tab; B probes again. Then E runs, the worker is killed, a new one forked while E's history
    is held, E presses Forget; B probes the new worker."""
    from specviz.ui.serve import gpu
    from specviz.ui.serve import visitors

    # Visitor F presses Forget while their job runs: what the job brings back must not restore it.
    job, outputs = _job("visitor-f", remember, SECRET), []
    for value in gpu.stream_job(job):
        outputs.append(value)
        visitors.forget(_Visitor("visitor-f"))
    _ended(job)
    del job
    result = {"midrun_outputs": len(outputs), "main_after_midrun_forget": _main_holds(SECRET)}
    result["remember_pid"] = _run("visitor-a", remember, SECRET)
    result["main_had_secret"] = _holds(visitors.HISTORIES.get("visitor-a"), visitors.TABLES.get("visitor-a"), SECRET)
    visitors.forget(_Visitor("visitor-a"))
    result["main_after_forget"] = _main_holds(SECRET)
    result["other_after_forget"] = _run("visitor-b", probe, SECRET)
    result["own_after_forget"] = _run("visitor-a", probe, SECRET)
    _run("visitor-c", remember, SECRET)
    visitors.end_session(_Visitor("visitor-c"))
    result["main_after_close"] = _main_holds(SECRET)
    result["other_after_close"] = _run("visitor-b", probe, SECRET)
    # The platform reclaims the idle worker; the next job forks a new one while the main process
    # holds visitor E's secret; E then presses Forget.
    _run("visitor-e", remember, SECRET)
    _Scheduler.abort()
    result["refork_pid"] = _run("visitor-e", probe, [])["pid"]
    visitors.forget(_Visitor("visitor-e"))
    result["other_after_refork"] = _run("visitor-b", probe, SECRET)
    return result


def _deadline_part(enforce: bool) -> dict:
    """A 4-second reservation for a 20-second job (the deadline enforced as on ZeroGPU, or not):
    its outputs and how it ended."""
    from specviz.ui.serve import gpu

    job = _job("visitor-d", count, 200, 0.1, duration_s=4)
    job = gpu.Job(job.work, job.args, job.kwargs, job.duration_s, job.stop_slot, job.session,
                  enforce_deadline=None if enforce else False, stores=job.stores, created_s=job.created_s)
    outputs, outcome, t0 = [], "ok", time.monotonic()
    try:
        for value in gpu.stream_job(job):
            outputs.append(value)
    except Exception as err:  # noqa: BLE001 — the outcome is what the test reads
        outcome = f"{type(err).__name__}: {getattr(err, 'message', err)}"
    _ended(job)
    return {"outputs": len(outputs), "outcome": outcome, "elapsed_s": time.monotonic() - job.created_s,
            "stream_s": time.monotonic() - t0, "deadline_s": gpu.deadline_s(4)}


# ----------------------------------------------------------------------------- records' bytes
#: Simulated time per round of :func:`streamed` (s): about the offline SmolLM2's pace on a small CPU,
#: so the stream sends tokens and charts as often as a real run (scripts/stream_bytes.py's clock).
ROUND_S = 0.06


def streamed(ctx, tokens):
    """A work function streaming the Run tab's own stream (:func:`specviz.ui.tabs.run_stream.stream`) of
    a ``tokens``-token run: a tiny random Llama (tests/helpers.py) drafted by prompt lookup (the
    page's default drafter; one forward pass a round keeps it cheap), greedy, K = 4, instrumented
    as the page's runs are, each round counted as :data:`ROUND_S` of the stream's clock."""
    from types import SimpleNamespace

    from scripts.stream_bytes import _PacedRun, _SimulatedClock
    from specviz.drafters.lookup import PromptLookupDrafter
    from specviz.core.engine import Generation
    from specviz.run.request import RunRequest
    from specviz.core.sampling import SamplingConfig
    from specviz.ui.tabs import run_stream
    from specviz.ui.serve.state import RunState
    from tests.helpers import tiny_llama

    vocab = 256
    target = tiny_llama(0, vocab_size=vocab, max_position_embeddings=tokens + 64, lm_head_scale=8.0)
    drafter = PromptLookupDrafter(vocab)
    words = [f" w{i}" for i in range(vocab)]
    greedy = SamplingConfig(temperature=0.0)
    run = Generation(target, list(range(1, 17)), drafter, k=4, sampling=greedy, max_new_tokens=tokens, seed=0,
                     decode=lambda ids: "".join(words[i] for i in ids))
    request = RunRequest(prompt="tiny", target="tiny-llama", draft="ngram", k=4, sampling=greedy,
                         max_new_tokens=tokens, seed=0)
    state = RunState(label="tiny Llama ← prompt lookup", k=4, max_new_tokens=tokens)
    clock = _SimulatedClock(ROUND_S)
    saved, run_stream.time = run_stream.time, SimpleNamespace(perf_counter=clock.perf_counter, time=time.time)
    try:
        yield from run_stream.stream(_PacedRun(run, clock), request, state, {}, lambda _: {}, ctx=ctx)
    finally:
        run_stream.time = saved


class _CountingPickler:
    """``multiprocessing.queues``' pickler in the main process, counting the bytes of every record
    read from a worker's pipe (what ``spaces``' wrapper receives: ``OkResult(Record)``)."""

    def __init__(self) -> None:
        from multiprocessing.reduction import ForkingPickler

        self.dumps, self.received = ForkingPickler.dumps, []

    def loads(self, data, *args, **kwargs):
        import pickle

        from specviz.ui.serve.gpu import Record

        loaded = pickle.loads(data, *args, **kwargs)
        value = getattr(loaded, "value", None)
        if isinstance(value, Record) and value.kind == "outputs":
            self.received.append(len(data))
        return loaded


def _bytes_part() -> dict:
    """A 64- and a 512-token run streamed through the wrapper: the bytes of each outputs record
    read from the worker's pipe, and (the control) the bytes each record would have had carrying
    the outputs whole, as before."""
    import multiprocessing.queues as queues
    from multiprocessing.reduction import ForkingPickler

    from spaces.zero.types import OkResult

    from specviz.ui.serve import gpu

    result = {}
    for tokens in (64, 512):
        counting, original = _CountingPickler(), queues._ForkingPickler
        queues._ForkingPickler = counting
        try:
            job, whole = _job("visitor-bytes", streamed, tokens), []
            for outputs in gpu.stream_job(job):  # the run state is one object, updated record after record
                whole.append(len(ForkingPickler.dumps(OkResult(gpu.Record("outputs", outputs)))))
            _ended(job)
        finally:
            queues._ForkingPickler = original
        state = outputs[-2]  # RUN_OUTPUTS: ..., "baselines", "state", "slider"
        result[str(tokens)] = {"records": counting.received, "whole": whole, "updates": len(whole),
                               "rounds": len(state.rounds), "html": len(state.html),
                               "emitted": sum(len(r.emitted) for r in state.rounds),
                               "indices": [r.index for r in state.rounds], "finished": state.finished}
    return result


# ----------------------------------------------------------------------------- closing mid-load
def loading(ctx, load_s):
    """A work function that says it is loading, then loads for ``load_s`` seconds the way the Run
    tab does (:func:`specviz.ui.tabs.run_stream.while_working`: status lines while a thread works),
    then says it is loaded."""
    from specviz.ui.tabs.run_stream import while_working

    yield "loading"
    yield from while_working(lambda: time.sleep(load_s), lambda s: f"loading · {s:.1f} s")
    yield "loaded"


async def _close_on_loop(stream, wait_s: float) -> dict:
    """As gradio serves a generator: each item fetched in a thread (``SyncToAsyncIterator``), and,
    when the visitor leaves or presses Stop, the generator closed on the event loop
    (``safe_aclose_iterator``). The first item, then ``wait_s`` later the close; a heartbeat every
    5 ms measures the loop meanwhile."""
    import asyncio

    from gradio.utils import SyncToAsyncIterator, safe_aclose_iterator

    iterator = SyncToAsyncIterator(stream, limiter=None)
    first = await iterator.__anext__()
    gaps, done = [], asyncio.Event()

    async def heartbeat():
        while not done.is_set():
            t0 = time.monotonic()
            await asyncio.sleep(0.005)
            gaps.append(time.monotonic() - t0)

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(wait_s)
    t0 = time.monotonic()
    await safe_aclose_iterator(iterator)
    close_s = time.monotonic() - t0
    await asyncio.sleep(0.05)
    done.set()
    await beat
    return {"first": repr(first)[:80], "close_s": close_s, "max_gap_s": max(gaps)}


def _close_part(load_s: float = 1.5, wait_s: float = 0.4) -> dict:
    """A job closed on gradio's event loop while its worker loads: through the page's
    :func:`specviz.ui.serve.gpu.stream_job`, and (the control) ``spaces``' wrapper closed directly, as
    before the close moved off the loop."""
    import asyncio

    from specviz.ui.serve import gpu

    job = _job("visitor-leaves", loading, load_s)
    t0 = time.monotonic()
    page = asyncio.run(_close_on_loop(gpu.stream_job(job), wait_s))
    _ended(job)
    page["worker_step_s"] = time.monotonic() - t0  # the worker went on loading after the close
    control_job = _job("visitor-leaves", loading, load_s)
    control = asyncio.run(_close_on_loop(gpu.run_job(control_job), wait_s))
    gpu.release_slot(control_job.stop_slot)
    return {"page": page, "wrapper_on_loop": control, "load_s": load_s}


# ----------------------------------------------------------------------------- two visitors at once
#: How long each of the two visitors' jobs holds its GPU (s).
HOLD_S = 1.0


def stamp(ctx, hold_s):
    """A work function that holds the GPU ``hold_s`` seconds: its worker's pid, start and end
    (``time.monotonic()``, the machine's clock, shared by the forked workers)."""
    import os

    start = time.monotonic()
    time.sleep(hold_s)
    yield {"pid": os.getpid(), "start": start, "end": time.monotonic()}


def plan_stamp():
    """The stamp feature's plan: no input, :data:`HOLD_S` held, 10 s reserved."""
    from specviz.ui.serve.feature import Plan

    return Plan((HOLD_S,), 10)


def stamp_page():
    """The stamp feature's Gradio callback."""
    from specviz.ui.serve.feature import FEATURES

    yield from FEATURES["harness_stamp"].stream()


def _overlap_part() -> dict:
    """Two visitors (two gradio clients, two sessions) press one generation button of a page served
    by gradio with its queue, the button wired as every model feature is
    (:meth:`specviz.ui.serve.feature.Feature.wire`: the generation queue and its concurrency), each job
    run through ``spaces``' wrapper: the stamps of both jobs."""
    import gradio as gr
    from gradio_client import Client
    from spaces.zero import client

    from specviz.ui.serve import feature
    from specviz.ui.serve import settings

    client.startup_report = lambda: None  # the device API, unreachable; launch() reports to it
    stamp_feature = feature.Feature("harness_stamp", stamp, plan_stamp)
    with gr.Blocks() as demo:
        button, out = gr.Button(), gr.JSON()
        stamp_feature.wire(button.click, stamp_page, [], [out], public=False)
    demo.queue(max_size=settings.QUEUE_SIZE).launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1")
    try:
        visitors = [Client(demo.local_url, verbose=False) for _ in range(2)]
        jobs = [v.submit(api_name="/harness_stamp") for v in visitors]
        stamps = [job.result(timeout=60) for job in jobs]
    finally:
        demo.close()
    return {"limit": feature.generation_limit(), "queue_size": settings.QUEUE_SIZE, "stamps": stamps,
            "sessions": len({v.session_hash for v in visitors})}


# ----------------------------------------------------------------------------- nothing placed
def _nothing_placed_part() -> dict:
    """``import app`` in public mode where no public model can be loaded (nothing in the hub cache,
    the offline models' cache unwritable): the placement's problem, and what the page's load event
    writes to the Run tab's status line."""
    import app
    from specviz.ui.serve import placement

    loads = [fn for fn in app.demo.fns.values() if fn.fn is placement.page_status]
    targets = [[getattr(c, "elem_id", None) for c in fn.outputs] for fn in loads]
    triggers = [[event for _, event in fn.targets] for fn in loads]
    return {"problem": placement.PLACEMENT_PROBLEM, "status": [fn.fn() for fn in loads], "outputs": targets,
            "triggers": triggers, "api_visibility": [fn.api_visibility for fn in loads]}


def scenario_worker() -> dict:
    """``run_job`` through ``spaces``' real generator wrapper, in one forked worker reused across
    jobs as ZeroGPU reuses an idle one: the app imported with nothing placeable, then Stop, Forget
    (and a closed tab), the deadline, the deadline left unenforced (the control: the scheduler's
    abort), the records' bytes, a close mid-load, and two visitors at once through gradio's queue."""
    scheduler = _Scheduler()
    scheduler.install()
    _no_card_start_up()
    from spaces.zero import client

    from specviz.ui.serve import gpu

    result = {"wrapped": getattr(gpu.run_job, "__wrapped__", None) is not None,
              "charged_4s": client.get_duration_seconds(__import__("datetime").timedelta(seconds=4), None)}
    parts = {"nothing_placed": _nothing_placed_part, "stop": _stop_part, "forget": _forget_part,
             "deadline": lambda: _deadline_part(enforce=True), "unenforced": lambda: _deadline_part(enforce=False),
             "bytes": _bytes_part, "close": _close_part, "overlap": _overlap_part}
    result["part_s"] = {}
    for name, part in parts.items():
        t0 = time.monotonic()
        result[name] = part()
        result["part_s"][name] = round(time.monotonic() - t0, 2)
        if name == "unenforced":
            result["unenforced"]["released"] = list(scheduler.released)
    result["schedules"] = scheduler.count
    return result


# ----------------------------------------------------------------------------- /export after /run
def scenario_export() -> dict:
    """An API client on the ZeroGPU path (a report: /export called as soon as /run returned, in
    one script, failed three times in a row: once "Nothing to export yet", twice no answer in five
    minutes): ``import app`` (not public: the tiny offline model runs on the CPU inside ``spaces``'
    forked worker), the page served with its queue, then one gradio client calls /run and, as soon
    as it returns, /export, :data:`EXPORT_ROUNDS` times: each call's seconds and what /export
    answered (its files' names) or its error."""
    scheduler = _Scheduler()
    scheduler.install()
    _no_card_start_up()
    from gradio_client import Client
    from spaces.zero import client

    client.startup_report = lambda: None  # the device API, unreachable; launch() reports to it
    import app
    from specviz.ui.serve import gpu

    app.demo.queue().launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1")
    rounds = []
    try:
        visitor = Client(app.demo.local_url, verbose=False)
        for _ in range(EXPORT_ROUNDS):
            t0 = time.monotonic()
            visitor.predict(api_name="/run", prompt="Fix the typos: Teh cat sat on teh mat.",
                            target_id="smollm2-135m-instruct", drafter_kind="ngram", k=4, temperature=0.0,
                            max_new_tokens=32, device="cpu")
            ran = time.monotonic() - t0
            job = visitor.submit(api_name="/export")
            try:
                files = job.result(timeout=60)
                answer = sorted(str(f).rsplit("/", 1)[-1] for f in files if f)
            except Exception as err:  # noqa: BLE001 — the failure is the result
                answer = f"{type(err).__name__}: {err}"
            rounds.append({"run_s": round(ran, 2), "export_s": round(time.monotonic() - t0 - ran, 2),
                           "export": answer})
    finally:
        app.demo.close()
    return {"wrapped": getattr(gpu.run_job, "__wrapped__", None) is not None, "rounds": rounds,
            "schedules": scheduler.count}


#: /run then /export, this many times in one client.
EXPORT_ROUNDS = 4

SCENARIOS = {"import": scenario_import, "deploy": scenario_deploy, "worker": scenario_worker,
             "export": scenario_export}


def main(argv: list[str]) -> int:
    _start()
    result = SCENARIOS[argv[0]]()
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
