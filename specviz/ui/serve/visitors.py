"""What the page keeps apart per visitor, server-side: each session's suffix-drafter history and
Token Recycling table (:class:`HistoryStore`, so one visitor's text is never drafted, shown or
exported to another), its
export folder (overwritten, not one new folder per export), public mode's one generation per
visitor (:class:`GenerationGate`, a queue validator), and what a visitor whose generation waits is
told: how many generations were ahead and about how long (:func:`queue_words`).

A visitor is a Gradio session (``gr.Request.session_hash``: a browser tab, or one
``gradio_client.Client``). Callbacks that did not come through the server (tests calling them
directly) have no session: they get a fresh, empty history and table of their own, never a shared one.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict

import gradio as gr

from specviz.drafters import (
    SESSION_HISTORY_MAX_SEQUENCES,
    SESSION_HISTORY_MAX_TOKENS,
    SESSION_TABLE_MAX_ROWS,
    RecycleTable,
    SuffixHistory,
)

logger = logging.getLogger("specviz.app")

#: Visitors whose history is kept at once (least recently used dropped first) and for how long
#: after their last run (seconds). At most SESSIONS × SESSION_HISTORY_MAX_TOKENS tokens in all, and
#: as many Token Recycling tables of SESSION_TABLE_MAX_ROWS rows (about 0.6 MB each).
HISTORY_SESSIONS = 128
HISTORY_TTL_S = 3600.0

#: Where each visitor's exports are written: one folder per session, overwritten by each export,
#: at most this many folders, none kept past the TTL (gradio copies what it serves into its own
#: cache, which ``gr.Blocks(delete_cache=…)`` empties).
EXPORT_ROOT = os.path.join(tempfile.gettempdir(), "specviz-exports")
EXPORT_FOLDERS = 64
EXPORT_TTL_S = 3600.0

ONE_GENERATION = ("One generation at a time per visitor in public mode: yours is still waiting or running. "
                  "Press Stop or wait for it to finish, then try again.")
#: A refused or accepted push reaches the queue a moment after its validator: a second push of the
#: same session within this window is counted as waiting (seconds).
PUSH_WINDOW_S = 2.0
#: A press that passed its quick check holds the visitor's one generation while its chain of
#: model-free steps runs (the Run tab's settings check, the cleared views), before its generation
#: is pushed: a second press meanwhile is refused with a message, not the first one's push
#: refused silently by the validator. The hold lapses after this long (seconds), or when that
#: generation is pushed, or when the chain stops (:func:`release_claim`).
CLAIM_S = 30.0


#: Every history and table a :class:`HistoryStore` of this process made or was given (weakly: a
#: dropped one is gone from here too), and the process they belong to (:func:`drop_inherited`).
_TRACKED: weakref.WeakSet = weakref.WeakSet()
_owner_pid = os.getpid()


class HistoryStore:
    """Each session's :class:`~specviz.drafters.SuffixHistory` (capped at the session caps), or
    with ``factory=new_table`` its :class:`~specviz.drafters.RecycleTable`: at most
    ``max_sessions`` of them, each dropped ``ttl_s`` after its last use. Thread-safe."""

    def __init__(self, max_sessions: int = HISTORY_SESSIONS, ttl_s: float = HISTORY_TTL_S, factory=None) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.factory = factory or new_history
        self._by_session: OrderedDict[str, tuple[object, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: str):
        """The session's history (a new empty one the first time); marks it used now."""
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            history = self._by_session.pop(session, (None, 0.0))[0]
            if history is None:
                history = self.factory()
                _TRACKED.add(history)
            self._by_session[session] = (history, now)
            while len(self._by_session) > self.max_sessions:
                self._by_session.popitem(last=False)
            return history

    def _expire(self, now: float) -> None:
        while self._by_session:
            oldest, (_, used) = next(iter(self._by_session.items()))
            if now - used <= self.ttl_s:
                break
            del self._by_session[oldest]

    def put(self, session: str, value) -> None:
        """Make ``value`` the session's history (or table), used now: what a GPU worker updated,
        brought back (:func:`specviz.ui.serve.gpu.stream_job`), or what the main process sent it."""
        _TRACKED.add(value)
        with self._lock:
            self._by_session.pop(session, None)
            self._by_session[session] = (value, time.monotonic())
            while len(self._by_session) > self.max_sessions:
                self._by_session.popitem(last=False)

    def replace(self, session: str, expected, value) -> bool:
        """Make ``value`` the session's history (or table) only if the session still holds
        ``expected`` (what a job took when it was made): a visitor who pressed Forget or left while
        the job ran gets nothing back from it. Returns whether ``value`` was kept."""
        with self._lock:
            held = self._by_session.get(session, (None, 0.0))[0]
            if held is None or held is not expected:
                return False
            _TRACKED.add(value)
            self._by_session.pop(session)
            self._by_session[session] = (value, time.monotonic())
            return True

    def drop(self, session: str) -> None:
        """Forget the session's history (the session ended, or the visitor asked)."""
        with self._lock:
            self._by_session.pop(session, None)

    def __contains__(self, session: str) -> bool:
        with self._lock:
            return session in self._by_session

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_session)


def new_history() -> SuffixHistory:
    """An empty history with one visitor's caps."""
    return SuffixHistory(SESSION_HISTORY_MAX_TOKENS, SESSION_HISTORY_MAX_SEQUENCES)


def new_table() -> RecycleTable:
    """An empty Token Recycling table with one visitor's cap.

    Cold on purpose: the CLI's and the bench's warm start
    (:func:`specviz.drafters.recycle.warm_table`) costs a target pass over about 2,200 tokens, a
    wait of seconds at best on a 2-core CPU before a visitor's first run (the drafter's note says
    the table starts empty)."""
    return RecycleTable(SESSION_TABLE_MAX_ROWS)


HISTORIES = HistoryStore()
TABLES = HistoryStore(factory=new_table)


def _reset_in_child() -> None:
    """In a process just forked: empty maps and new locks for the two stores (a lock held by a
    main-process thread at the fork would stay held in the child forever). Pure Python: the
    copies' contents are emptied by :func:`drop_inherited`, at the worker's first job."""
    for store in (HISTORIES, TABLES):
        store._lock = threading.Lock()
        store._by_session = OrderedDict()


os.register_at_fork(after_in_child=_reset_in_child)


def drop_inherited() -> int:
    """In a process forked from the one that made the stores (ZeroGPU's GPU worker), once: empty
    every visitor history and table the fork copied. A worker outlives the visitor's Forget or
    closed tab, which reach only the main process, and the fork copies them all, held by the
    stores or still referenced (a job being sent when the fork happened: its arguments stay on
    the forked stack); a job brings its own visitor's stores (:data:`JOB_STORES`). Nothing in the
    process that made them. Returns how many were emptied."""
    global _owner_pid
    if os.getpid() == _owner_pid:
        return 0
    _owner_pid = os.getpid()
    inherited = list(_TRACKED)
    _TRACKED.clear()
    for store in inherited:
        store.clear()
    return len(inherited)


#: The session of the visitor a GPU job serves (:func:`specviz.ui.serve.gpu.run_job` sets it in the
#: worker, where gradio's request context may be missing); :func:`session_of` reads it first.
JOB_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("specviz_job_session", default=None)
#: The (history, table) the running GPU job carries (:attr:`specviz.ui.serve.gpu.Job.stores`), set by
#: :func:`specviz.ui.serve.gpu.run_job` around each step: in a forked worker the visitor's stores live
#: only here, never in :data:`HISTORIES`/:data:`TABLES`, so nothing of a visitor outlasts their
#: job in the worker.
JOB_STORES: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("specviz_job_stores", default=None)


def session_of(request: gr.Request | None = None) -> str | None:
    """The session hash of ``request``, else of the GPU job running (:data:`JOB_SESSION`), else of
    the request the running callback serves (None outside the server). Reads gradio's context
    variable; a gradio without it gives None."""
    if request is None and JOB_SESSION.get() is not None:
        return JOB_SESSION.get()
    if request is None:
        try:
            from gradio.context import LocalContext

            request = LocalContext.request.get(None)
        except (ImportError, AttributeError, LookupError):
            request = None
    session = getattr(request, "session_hash", None)
    return session if isinstance(session, str) and session else None


def visitor_history(request: gr.Request | None = None) -> SuffixHistory:
    """The history of the visitor the running callback serves (the one their GPU job carries, in a
    job: :data:`JOB_STORES`), or a fresh one without a session."""
    if request is None and JOB_STORES.get() is not None:
        return JOB_STORES.get()[0]
    session = session_of(request)
    return HISTORIES.get(session) if session else new_history()


def visitor_table(request: gr.Request | None = None) -> RecycleTable:
    """The Token Recycling table of the visitor the running callback serves, or a fresh one
    without a session; in a GPU job, the one it carries (:data:`JOB_STORES`)."""
    if request is None and JOB_STORES.get() is not None:
        return JOB_STORES.get()[1]
    session = session_of(request)
    return TABLES.get(session) if session else new_table()


def forget(request: gr.Request) -> str:
    """The "Forget my earlier outputs" button: drop this visitor's history and Token Recycling
    table; a line saying so."""
    # (The docstring is the endpoint's API description: kept as it was.) These are the only copies
    # kept past a job: a GPU worker holds a visitor's stores only while their job runs
    # (JOB_STORES, drop_inherited), and a job running now brings its copy back only to a visitor
    # who has not forgotten since (HistoryStore.replace).
    session = session_of(request)
    if session:
        HISTORIES.drop(session)
        TABLES.drop(session)
    return ("Forgotten: the suffix drafter no longer knows your earlier outputs, nor Token Recycling what the "
            "target predicted in them.")


def end_session(request: gr.Request) -> None:
    """``demo.unload``: the visitor left; free their history, table and export folder (the only
    copies past a job, as for :func:`forget`)."""
    session = session_of(request)
    if session:
        HISTORIES.drop(session)
        TABLES.drop(session)
        shutil.rmtree(_folder_path(session), ignore_errors=True)


# ----------------------------------------------------------------------------- exports
def _folder_path(session: str) -> str:
    # A digest, not the hash itself: the folder name must not let anyone reach a session.
    return os.path.join(EXPORT_ROOT, hashlib.sha256(session.encode()).hexdigest()[:24])


def export_folder(request: gr.Request | None = None) -> str:
    """This visitor's export folder (created; emptied of nothing: files are overwritten by name).

    Folders past :data:`EXPORT_TTL_S` and beyond the :data:`EXPORT_FOLDERS` newest are removed
    first, so the disk used stays bounded. Without a session: a fresh temporary folder (tests)."""
    session = session_of(request)
    if session is None:
        return tempfile.mkdtemp(prefix="specviz-export-")
    path = _folder_path(session)
    _prune(keep=path)
    os.makedirs(path, exist_ok=True)
    os.utime(path)
    return path


def _prune(keep: str) -> None:
    try:
        entries = [e for e in os.scandir(EXPORT_ROOT) if e.is_dir() and e.path != keep]
    except OSError:
        return
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    now = time.time()
    for i, entry in enumerate(entries):
        if i >= EXPORT_FOLDERS - 1 or now - entry.stat().st_mtime > EXPORT_TTL_S:
            shutil.rmtree(entry.path, ignore_errors=True)


# ----------------------------------------------------------------------------- fair queue
class GenerationGate:
    """Public mode's rule: a visitor has at most one generation waiting or running.

    The page's generation events are registered with it as they are wired
    (:meth:`specviz.ui.serve.feature.Feature.wire` calls :meth:`register`), and its :meth:`validator`
    runs when one is pushed, before it waits in the queue. It counts this session's registered
    events in the queue and running (read from gradio's queue; if gradio's internals change, that
    count is 0 and only the push window below applies: no crash), plus a push of the same session
    accepted within :data:`PUSH_WINDOW_S` (pushes validated at the same moment have not reached the
    queue yet), plus a press that passed its quick check and has not pushed its generation yet
    (:data:`CLAIM_S`: without it, two presses on two tabs a second apart could have the second
    one's generation pushed first and the first one's refused by the validator, whose refusal
    reaches the page as no message at all)."""

    def __init__(self, demo: gr.Blocks) -> None:
        self.demo = demo
        self.fns: list = []  # the generation events' gradio BlockFunctions
        self.api_names: frozenset = frozenset()  # their names, as the queue's records give them
        self._accepted: dict[str, float] = {}  # session → time.time() of its last accepted push
        self._claims: dict[str, float] = {}  # session → time.time() its press passed the quick check
        self._lock = threading.Lock()

    def register(self, block_fn) -> None:
        """Gate the event of ``block_fn`` (gradio's BlockFunction): the validator is set on it."""
        block_fn.validator = self.validator
        self.fns.append(block_fn)
        self.api_names = self.api_names | {block_fn.api_name}

    def busy(self, session: str) -> int:
        """This session's generation events waiting or running (0 if the queue cannot be read)."""
        try:
            queue = self.demo._queue
            events = [e for waiting in list(queue.event_queue_per_concurrency_id.values()) for e in waiting.queue]
            events += [e for job in list(queue.active_jobs) if job for e in job]
            gated = {id(fn) for fn in self.fns}
            return sum(1 for e in events if e.session_hash == session and id(e.fn) in gated)
        except Exception:  # noqa: BLE001 — a gradio change degrades to "no check", never a crash
            return 0

    def arrived(self, session: str, since: float) -> bool:
        """Whether a generation event of ``session`` reached the queue at or after ``since``
        (time.time()): then the queue itself counts it (False if the queue cannot be read)."""
        try:
            records = list(self.demo._queue.event_analytics.values())
            return any(r.get("session_hash") == session and r.get("time", 0) >= since
                       and r.get("function") in self.api_names for r in records)
        except Exception:  # noqa: BLE001 — as in busy()
            return False

    def admit(self, session: str | None, note: bool = True, claim: bool = False) -> bool:
        """Whether ``session`` may push another generation now. The validator (``note``) notes the
        push and takes over the session's claim (its own press's); the quick check of a press
        (``note=False``) is refused while another press holds a claim, and with ``claim`` holds
        one itself (:data:`CLAIM_S`)."""
        if session is None:
            return True
        now = time.time()
        with self._lock:
            for s, t in list(self._accepted.items()):
                if now - t > PUSH_WINDOW_S or self.arrived(s, t):
                    del self._accepted[s]
            for s, t in list(self._claims.items()):
                if now - t > CLAIM_S or self.arrived(s, t):
                    del self._claims[s]
            if session in self._accepted or self.busy(session):
                return False
            if note:
                self._claims.pop(session, None)
                self._accepted[session] = now
                return True
            if session in self._claims:
                return False
            if claim:
                self._claims[session] = now
            return True

    def release(self, session: str | None) -> None:
        """Drop ``session``'s claim: its press's chain stopped before its generation was pushed."""
        with self._lock:
            self._claims.pop(session, None)

    def validator(self, request: gr.Request, *values):
        """The events' ``validator``: one ``gr.validate`` per input, the first refused with
        :data:`ONE_GENERATION` when the visitor already has a generation waiting or running."""
        try:
            ok = self.admit(session_of(request))
        except Exception:  # noqa: BLE001 — never block a visitor because of the check itself
            logger.exception("the one-generation check failed; letting the event through")
            ok = True
        if not ok:  # the page shows no message for this one: the log says it happened
            _log_refusal("push", request)
        first = gr.validate(True, "") if ok else gr.validate(False, ONE_GENERATION)
        return [first] + [gr.validate(True, "")] * (len(values) - 1)


#: The public page's gate, by its Blocks (made by :func:`gate_of`; read by :func:`check_generation`).
_GATES: dict[int, GenerationGate] = {}


def gate_of(demo: gr.Blocks) -> GenerationGate:
    """The gate of the public page ``demo`` (made the first time a generation is registered)."""
    gate = _GATES.get(id(demo))
    if gate is None or gate.demo is not demo:
        gate = _GATES[id(demo)] = GenerationGate(demo)
    return gate


def one_generation(demo: gr.Blocks) -> int:
    """How many of ``demo``'s events the one-generation-per-visitor gate holds: each generation
    registered itself as it was wired (:meth:`specviz.ui.serve.feature.Feature.wire`), none found by a
    name or a queue's id."""
    gate = _GATES.get(id(demo))
    return len(gate.fns) if gate is not None and gate.demo is demo else 0


def check_generation(demo: gr.Blocks, request: gr.Request | None = None) -> None:
    """The page's check before a generation starts in public mode: raises ``gr.Error`` with
    :data:`ONE_GENERATION` when this visitor already has one waiting or running, or a press on its
    way to one; else this press holds the visitor's generation until it is pushed
    (:data:`CLAIM_S`). A ``gr.Error`` is a pop-up over whatever tab the visitor pressed Run on;
    the validator's refusal alone reaches the page only as a 422 in the console (the Run tab) or a
    box over the first input, so every generation button runs this first
    (:func:`generation_click`). Nothing when the page has no gate (not public)."""
    gate = _GATES.get(id(demo))
    if gate is not None and not gate.admit(session_of(request), note=False, claim=True):
        _log_refusal("press", request)
        raise gr.Error(ONE_GENERATION, title="Please wait")


def _log_refusal(what: str, request: gr.Request | None) -> None:
    """One log line per refusal of the gate, naming the session by its first characters only."""
    logger.info("one-generation gate: a %s refused (session %s…)", what, (session_of(request) or "")[:6])


def release_claim(request: gr.Request) -> None:
    """A press's chain stopped before its generation (the Run tab's settings refused): its claim
    on the visitor's one generation goes (:meth:`GenerationGate.release`), so the next press is
    not told to wait for a generation that never started."""
    session = session_of(request)
    for gate in list(_GATES.values()):
        gate.release(session)


class GenerationClock:
    """How long recent generations held their queue slot (seconds, from the plan's end to the last
    output, refused ones not counted): an exponential moving average that the queue's words use
    (:func:`queue_words`). Thread-safe."""

    def __init__(self, weight: float = 0.3) -> None:
        self.weight = weight
        self.mean_s: float | None = None
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        """Add one generation's duration (negative or non-finite values are ignored)."""
        if not (seconds >= 0 and seconds < float("inf")):
            return
        with self._lock:
            self.mean_s = seconds if self.mean_s is None else (1 - self.weight) * self.mean_s + self.weight * seconds


#: The process's clock of generations (:meth:`specviz.ui.serve.feature.Feature.stream` records each).
GENERATION_CLOCK = GenerationClock()


def generations_ahead(demo: gr.Blocks, concurrency_id: str, slots: int = 1) -> int:
    """How many generations must finish before one pushed now to the queue ``concurrency_id`` of
    ``demo`` starts: those waiting there, plus those running beyond ``slots`` − 1 (its concurrency
    limit; 0 if gradio's queue cannot be read)."""
    try:
        queue = demo._queue
        waiting = queue.event_queue_per_concurrency_id.get(concurrency_id)
        n_waiting = len(waiting.queue) if waiting is not None else 0
        running = sum(1 for job in list(queue.active_jobs) if job
                      and getattr(job[0], "concurrency_id", None) == concurrency_id)
    except Exception:  # noqa: BLE001 — a gradio change degrades to no words, never a crash
        return 0
    return max(0, n_waiting + running - max(1, int(slots)) + 1)


def queue_words(ahead: int, mean_s: float | None, cap_s: float | None, slots: int = 1) -> str:
    """The sentence a visitor reads under the button when ``ahead`` generations were ahead of
    theirs ("" when none): how many, and about how long, from ``mean_s`` (recent generations'
    mean, :class:`GenerationClock`) or else from the public cap ``cap_s``; ``slots`` generations
    run at once."""
    if ahead <= 0:
        return ""
    slots = max(1, int(slots))
    count = "1 generation was" if ahead == 1 else f"{ahead} generations were"
    if mean_s is not None:
        wait = f"about {max(1, round(ahead * mean_s / slots))} s at the pace of recent ones ({mean_s:.0f} s each)"
    elif cap_s is not None:
        wait = f"at most about {round(ahead * cap_s / slots)} s ({cap_s:g} s of generating each, plus loading)"
    else:
        wait = "how long depends on their settings"
    return (f"**In the queue**: {count} ahead of yours when you pressed it, {wait}. Yours starts on its own; "
            "keep this tab open.")


def generation_click(trigger, fn, inputs, outputs, public: bool, status=None, **kwargs):
    """Wire a generation button while the page is built: ``trigger(fn, inputs, outputs, **kwargs)``,
    after a quick model-free step of its own (never queued behind a generation) where there is one
    to take: in public mode :func:`check_generation`, so any tab's refusal shows as a message where
    the visitor pressed the button; with ``status`` (a Markdown under the button) the queue's words
    (:func:`queue_words`) written there. With ``status`` the generation's progress, and the pill of
    a refusal it raises, show on that line only (``show_progress_on``), so a refused generation
    leaves every output as it was and says why in a toast. Returns the
    generation's event (what Stop cancels)."""
    if not public and status is None:
        return trigger(fn, inputs, outputs, **kwargs)
    from gradio.context import Context

    demo = Context.root_block  # the page being built
    concurrency_id, slots = kwargs.get("concurrency_id"), kwargs.get("concurrency_limit") or 1

    def check(request: gr.Request):
        if public:
            check_generation(demo, request)
        if status is None:
            return None
        from specviz.ui.serve.settings import PUBLIC_POLICY

        words = queue_words(generations_ahead(demo, concurrency_id, slots), GENERATION_CLOCK.mean_s,
                            PUBLIC_POLICY.max_run_s if public else None, slots)
        return gr.update(value=words, visible=bool(words))

    first = trigger(check, None, status, api_name=False, concurrency_id="playground", concurrency_limit=None,
                    show_progress="hidden")
    if status is not None:
        kwargs = {"show_progress_on": status, "show_progress": "minimal", **kwargs}
    return first.success(fn, inputs, outputs, **kwargs)
