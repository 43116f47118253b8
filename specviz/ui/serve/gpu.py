"""The page's one GPU entry point: every generation (Run, the lossless check, an experiment, side
by side) goes through :func:`run_job`, decorated with ``spaces.GPU`` where ``spaces`` is installed.

ZeroGPU (https://huggingface.co/docs/hub/spaces-zerogpu) runs a decorated function in a worker
forked from the main process and pickles what crosses: the arguments on the way in, each yielded
value on the way out, and the decorated function itself by reference. So:

* the decorated callable is one module-level function, :func:`run_job`; its argument is a
  :class:`Job`, a dataclass naming a module-level work function (a feature's, :data:`specviz.ui.serve.feature.FEATURES`) and
  plain arguments (strings, numbers, dicts, :class:`~specviz.run.request.RunRequest`);
* a work function is a generator given a :class:`JobContext` first; it reaches models through the
  model cache's module globals (placed on ``cuda`` at import on a Space:
  :func:`specviz.ui.serve.placement.place_at_import`) and yields the page's outputs, which
  :func:`run_job` wraps in :class:`Record` s (no CUDA tensors, no closures), together with the
  progress lines and warnings raised meanwhile; each record carries only what changed since the
  job's previous one (:mod:`specviz.ui.serve.deltas`: a run's new rounds, the token panel's new part),
  and :func:`stream_job` rebuilds the outputs, so the bytes per update stay flat however long the
  run;
* a ``gr.Error`` raised in the worker reached the page as a bare "Error" (gradio#12792): it
  travels as an ``error`` record and :func:`stream_job`, in the main process, raises it again;
  the callbacks validate their input before the call, so most refusals never reach a GPU;
* Stop reaches the worker through shared memory (:data:`_STOP`, created at import, so a forked
  worker inherits it; a job carries its slot's index, held from :func:`make_job` to the end of
  :func:`stream_job`, and a visitor's Stop reaches only the slots of their own running jobs:
  :func:`stop_session`), and the work ends its loop at the
  deadline (:func:`specviz.ui.serve.gpu_budget.deadline_s`) with what was generated kept;
* the visitor's suffix history and Token Recycling table travel with the job
  (:attr:`Job.stores`), reach the work only through the job, and come back in a ``stores``
  record; the worker keeps no copy past the job, so Forget and a closed tab, which drop the
  main process's, leave none anywhere;
* the reservation is the job's own :attr:`Job.duration_s` (:func:`job_duration`, ZeroGPU's
  callable ``duration``), estimated from the request by :mod:`specviz.ui.serve.gpu_budget`.

Outside a Space, ``spaces.GPU`` returns the function unchanged (and without ``spaces`` installed a
stand-in does the same): the job runs in the server's process, the same code.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import gradio as gr

from specviz.models.memory import on_zero_gpu
from specviz.ui.serve import visitors
from specviz.ui.serve.deltas import DeltaDecoder, DeltaEncoder
from specviz.ui.serve.gpu_budget import MIN_S, deadline_s
from specviz.ui.serve.visitors import JOB_SESSION, JOB_STORES, session_of

try:
    import spaces
except ImportError:  # not on a Space, nor in the dev environment: no ZeroGPU
    spaces = None

#: Slots of the Stop flags; more than the generations that can be running at once (the queue's
#: concurrency, at most :data:`specviz.ui.serve.settings.QUEUE_SIZE` on ZeroGPU), so a job always finds one.
STOP_SLOTS = 256
#: The Stop flags, one byte per slot, in memory shared with every process forked after import
#: (ZeroGPU's worker among them): 1 asks the job holding the slot to stop.
_STOP = multiprocessing.RawArray(ctypes.c_byte, STOP_SLOTS)
_slots_lock = threading.Lock()
_next_slot = 0
#: The jobs running now, by slot: (the visitor's session or None, the job's work function). A slot
#: is held from the job's creation (:func:`make_job`) to its end (:func:`stream_job`); only the
#: main process reads this.
_running: dict[int, tuple[str | None, Callable | None]] = {}


# ----------------------------------------------------------------------------- stop flags
def new_stop_slot(session: str | None = None, work: Callable | None = None) -> int:
    """A cleared Stop slot held by a new job of ``session`` running ``work`` until
    :func:`release_slot`. Free slots are taken in turn, so a released slot is reused only after
    every other free one (a forked worker that outlives its page still reads its raised flag).

    Raises:
        RuntimeError: every slot is held by a running job (more than :data:`STOP_SLOTS`).
    """
    global _next_slot
    with _slots_lock:
        free = (s % STOP_SLOTS for s in range(_next_slot, _next_slot + STOP_SLOTS))
        slot = next((s for s in free if s not in _running), None)
        if slot is None:
            raise RuntimeError(f"all {STOP_SLOTS} Stop slots are held by running jobs")
        _next_slot = (slot + 1) % STOP_SLOTS
        _STOP[slot] = 0
        _running[slot] = (session, work)
    return slot


def release_slot(slot: int | None) -> None:
    """The job holding ``slot`` ended: no Stop reaches the slot until a new job takes it. Its flag
    stays as it is (raised by :func:`stream_job`'s end)."""
    with _slots_lock:
        _running.pop(slot, None)


def request_stop(slot: int | None) -> None:
    """Raise the flag of ``slot`` (nothing for None or a negative slot). For the job's own side
    (:func:`stream_job`) and tests; a visitor's Stop goes through :func:`stop_session`, which
    reaches only their own running jobs."""
    if slot is not None and 0 <= slot < STOP_SLOTS:
        _STOP[slot] = 1


def stop_requested(slot: int | None) -> bool:
    """Whether Stop was asked of the job holding ``slot``."""
    return slot is not None and 0 <= slot < STOP_SLOTS and bool(_STOP[slot])


def stop_session(request: gr.Request | None = None, work: Callable | None = None) -> int:
    """A Stop button's handler: raise the flag of every job the visitor of ``request`` has running
    (of ``work`` only, when given); gradio's ``cancels`` ends the page's side of the event, this
    the worker's. A visitor with nothing running, or without a session, stops nothing: a slot
    remembered from an ended job is never reached. Returns the jobs asked."""
    session = session_of(request)
    if session is None:
        return 0
    with _slots_lock:
        slots = [slot for slot, (owner, job_work) in _running.items()
                 if owner == session and (work is None or job_work is work)]
    for slot in slots:
        request_stop(slot)
    return len(slots)


# ----------------------------------------------------------------------------- jobs and records
@dataclass(frozen=True)
class Job:
    """One generation for :func:`run_job`: what the worker runs, picklable.

    Attributes:
        work: a module-level generator function ``work(ctx, *args, **kwargs)`` (pickled by
            reference; a lambda, closure or method is refused with ValueError).
        args, kwargs: its plain arguments.
        duration_s: the GPU seconds reserved (:mod:`specviz.ui.serve.gpu_budget`).
        stop_slot: its Stop flag (:func:`new_stop_slot`).
        session: the visitor's session hash (their history, table and export folder), or None.
        enforce_deadline: whether the work ends at the deadline; None: on ZeroGPU only (which
            kills a worker past its reservation; elsewhere nothing does).
        created_s: ``time.monotonic()`` when the main process made the job (:func:`make_job`),
            or None: the deadline then counts from the worker's start. ZeroGPU's reservation
            runs from its scheduling, before the fork and the worker's start-up (CUDA init, the
            placed tensors moved), so the deadline counts from here (the monotonic clock is the
            machine's, shared by a forked worker).
        stores: ``[history, table]``, the visitor's (:class:`~specviz.drafters.SuffixHistory`,
            :class:`~specviz.drafters.RecycleTable`), or None: they travel with the job, since a
            forked worker's copies of the main process's would be stale, and come back updated
            (a ``stores`` record). The work reaches them through
            :data:`specviz.ui.serve.visitors.JOB_STORES`, never the worker's own stores, and
            :func:`run_job` empties this list at the job's end: a worker that outlives the job
            (ZeroGPU reuses an idle one, its last job's arguments still referenced) keeps nothing
            of the visitor, so Forget and a closed tab, which drop the main process's copies, leave
            no copy anywhere. Outside a Space they are the very objects.
    """

    work: Callable
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    duration_s: int = int(MIN_S)
    stop_slot: int = -1
    session: str | None = None
    enforce_deadline: bool | None = None
    stores: list | None = None
    created_s: float | None = None

    def __post_init__(self):
        module = sys.modules.get(getattr(self.work, "__module__", None) or "")
        name = getattr(self.work, "__qualname__", "")
        if module is None or "." in name or getattr(module, name, None) is not self.work:
            raise ValueError(f"a job's work must be a module-level function, got {self.work!r}")


@dataclass(frozen=True)
class Record:
    """What a job streams back: ``kind`` ``"outputs"`` (the callback's outputs, encoded as what
    changed since the previous record: a :class:`specviz.ui.serve.deltas.Packed`),
    ``"progress"`` (``(fraction, message)``), ``"warning"`` (a sentence), ``"stores"`` (the
    visitor's history and table, updated: :attr:`Job.stores`) or ``"error"`` (``(message, title)``
    of a ``gr.Error``)."""

    kind: str
    value: object = None


class JobContext:
    """A job's side of the worker: progress and warnings collected until the work's next yield,
    the Stop flag and the deadline. Not pickled (built in the worker). A progress line reaches the
    page at the work's next yield, so a model loaded inside the worker shows its steps once loaded
    (on a Space the presets' models are placed at import and a worker rarely loads).

    Call it like ``gr.Progress``: ``ctx(fraction, desc=message)``."""

    def __init__(self, job: Job, clock=time.monotonic) -> None:
        self.job, self.clock = job, clock
        self.slot, self.session = job.stop_slot, job.session
        self.budget_s = deadline_s(job.duration_s)
        self.deadline = (clock() if job.created_s is None else job.created_s) + self.budget_s
        self.pending: list[Record] = []
        self.enforced = on_zero_gpu() if job.enforce_deadline is None else bool(job.enforce_deadline)

    def __call__(self, fraction, desc: str | None = None, **_) -> None:
        self.pending.append(Record("progress", (fraction, desc)))

    def warn(self, text: str) -> None:
        """A pop-up warning for the visitor (``text`` already escaped for the page)."""
        self.pending.append(Record("warning", text))

    def stopped(self) -> bool:
        """Whether the visitor pressed Stop."""
        return stop_requested(self.slot)

    def past_deadline(self) -> bool:
        """Whether the reservation's deadline has passed (the work should end now, keeping what it
        made); always False where the deadline is not enforced."""
        return self.enforced and self.clock() > self.deadline

    def should_end(self) -> bool:
        """Stop pressed or the deadline passed."""
        return self.stopped() or self.past_deadline()

    def flush(self) -> Iterator[Record]:
        """The records collected since the last flush."""
        pending, self.pending = self.pending, []
        yield from pending


def job_duration(job: Job) -> int:
    """ZeroGPU's callable ``duration`` for :func:`run_job`: the seconds the job reserved."""
    return int(job.duration_s)


def _gpu(fn):
    """``spaces.GPU(duration=job_duration)`` where ``spaces`` is installed (a pass-through outside
    a Space), else ``fn`` itself."""
    return spaces.GPU(duration=job_duration)(fn) if spaces is not None else fn


@_gpu
def run_job(job: Job) -> Iterator[Record]:
    """Run ``job`` (on the GPU on a Space): its work's outputs and messages as :class:`Record` s,
    a ``gr.Error`` it raises as a last ``error`` record."""
    visitors.drop_inherited()  # a forked worker's first job: the fork's copies of every visitor's stores
    ctx = JobContext(job)
    stores = tuple(job.stores) if job.session and job.stores else None
    work = job.work(ctx, *job.args, **job.kwargs)
    encoder = DeltaEncoder()
    try:
        while True:
            # The session and stores are set around each step, not across yields: gradio may
            # advance a generator from a fresh copy of its context each time.
            token, stores_token = JOB_SESSION.set(job.session), JOB_STORES.set(stores)
            try:
                outputs = next(work)
            except StopIteration:
                break
            finally:
                JOB_STORES.reset(stores_token)
                JOB_SESSION.reset(token)
            yield from ctx.flush()
            yield Record("outputs", encoder.encode(outputs))
        yield from ctx.flush()
        yield from _stores_record(job)
    except gr.Error as err:
        yield from ctx.flush()
        yield from _stores_record(job)
        yield Record("error", (str(err.message), err.title))
    finally:
        work.close()
        if job.stores:
            job.stores.clear()  # nothing of the visitor outlives the job here (Job.stores)


def _stores_record(job: Job) -> Iterator[Record]:
    if job.session and job.stores:
        yield Record("stores", tuple(job.stores))


def _put_back(session: str | None, taken: tuple | None, stores) -> None:
    """The stores a job brought back become the visitor's, unless they pressed Forget or left
    since the job was made (the main process no longer holds what the job ``taken``)."""
    if session and taken and stores is not None:
        visitors.HISTORIES.replace(session, taken[0], stores[0])
        visitors.TABLES.replace(session, taken[1], stores[1])


def stream_job(job: Job, progress=None) -> Iterator:
    """The main process's side: the outputs of :func:`run_job` ``(job)``, its progress passed to
    ``progress`` (a ``gr.Progress``), its warnings shown, its error raised as a ``gr.Error``. If
    the page stops listening (Stop's ``cancels``, a closed tab), the job is asked to stop and
    :func:`run_job`'s generator is closed in a thread of its own: gradio closes a cancelled
    generator on its event loop, and ``spaces``' wrapper answers a close by waiting for the
    worker's current step, which would stall every visitor's page meanwhile. Once closed, the
    job's Stop slot is released (:func:`release_slot`)."""
    taken = tuple(job.stores) if job.stores else None  # run_job may empty the list in-process
    records = run_job(job)
    decoder = DeltaDecoder()
    try:
        for record in records:
            if record.kind == "outputs":
                yield decoder.decode(record.value)
            elif record.kind == "progress":
                if progress is not None:
                    fraction, message = record.value
                    progress(fraction, desc=message)
            elif record.kind == "warning":
                gr.Warning(record.value)
            elif record.kind == "stores":
                _put_back(job.session, taken, record.value)
            elif record.kind == "error":
                message, title = record.value
                raise gr.Error(message, title=title, print_exception=False)
    finally:
        request_stop(job.stop_slot)
        threading.Thread(target=_close_and_release, args=(records, job.stop_slot), name="close-gpu-job",
                         daemon=True).start()


def _close_and_release(records, slot: int) -> None:
    """Close a job's record stream (waits for the worker's current step), then free its Stop slot:
    the slot is reused only once the worker has seen its flag."""
    try:
        records.close()
    finally:
        release_slot(slot)


def make_job(work: Callable, *args, duration_s: int, **kwargs) -> Job:
    """A :class:`Job` of ``work`` for the visitor the running callback serves, holding a fresh Stop
    slot until :func:`stream_job` of it ends (stream it at once: a job never streamed keeps its slot)."""
    session = session_of()
    stores = [visitors.HISTORIES.get(session), visitors.TABLES.get(session)] if session else None
    return Job(work, args, kwargs, int(duration_s), new_stop_slot(session, work), session, stores=stores,
               created_s=time.monotonic())
