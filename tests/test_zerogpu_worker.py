"""Stop, Forget (and a closed tab) and the deadline through the real ``spaces`` package's
generator wrapper (``spaces.GPU`` → ``spaces.zero.wrappers``), which forks a worker, pickles the
job in and every record out, and reuses the idle worker for the next job, as on a ZeroGPU Space
(issue 42). :mod:`tests.zerogpu_driver`'s ``worker`` scenario runs it in one fresh Python; what it
stubs, and why, is in its ``_Scheduler`` and ``_no_card_start_up`` and in
:mod:`tests.zerogpu_harness`. The jobs are the driver's small work functions (a run's loop that
ends on Stop or the deadline; a run's additions to the visitor's stores; a probe of what the
worker holds), so the file takes seconds, not a model's load. The first tests check the same two
rules in this process, without ``spaces``: a job's stores come back only to a visitor who has not
forgotten since, and a forked process empties the stores it inherited.
"""

from __future__ import annotations

import multiprocessing

import pytest

from specviz.ui import gpu, visitors
from tests.zerogpu_harness import run_driver, spaces_env

SECRET = [4242, 31337, 4242, 27182, 31337]
#: What a forked child inherits without a job: a history held by this module when it forks.
_HELD: list = []


def adding_the_secret(ctx):
    """A work function that adds the secret to the visitor's history, as a run adds its output."""
    visitors.visitor_history().add(SECRET)
    yield "added"
    yield "done"


def _job_of(session: str, work):
    token = visitors.JOB_SESSION.set(session)
    try:
        return gpu.make_job(work, duration_s=10)
    finally:
        visitors.JOB_SESSION.reset(token)


class _Visitor:
    def __init__(self, session: str) -> None:
        self.session_hash = session


def test_a_forget_pressed_while_a_job_runs_is_not_undone_by_the_stores_it_brings_back():
    session = "visitor-forgets-mid-run"
    stream = gpu.stream_job(_job_of(session, adding_the_secret))
    assert next(stream) == "added"
    visitors.forget(_Visitor(session))
    assert list(stream) == ["done"]
    assert visitors.HISTORIES.get(session).to_list() == []
    visitors.HISTORIES.drop(session)
    visitors.TABLES.drop(session)


def test_a_job_not_forgotten_brings_its_stores_back():
    session = "visitor-keeps"
    list(gpu.stream_job(_job_of(session, adding_the_secret)))
    assert visitors.HISTORIES.get(session).to_list() == [SECRET]
    visitors.HISTORIES.drop(session)
    visitors.TABLES.drop(session)


def _child(queue) -> None:
    emptied = visitors.drop_inherited()
    queue.put((emptied, len(visitors.HISTORIES), _HELD[0].to_list(), visitors.drop_inherited()))


def test_a_forked_process_empties_every_visitor_store_it_inherited():
    session = "visitor-at-fork"
    visitors.HISTORIES.get(session).add(SECRET)
    _HELD.append(visitors.HISTORIES.get(session))  # still referenced in the child, as a job's arguments are
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,), daemon=True)
    proc.start()
    emptied, sessions, held, again = queue.get(timeout=30)
    proc.join(timeout=10)
    assert emptied >= 1 and sessions == 0 and held == [] and again == 0
    assert visitors.drop_inherited() == 0 and _HELD[0].to_list() == [SECRET]  # the parent keeps its own
    _HELD.clear()
    visitors.HISTORIES.drop(session)
    visitors.TABLES.drop(session)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """The ``worker`` scenario's JSON result."""
    pytest.importorskip("spaces")
    return run_driver("worker", spaces_env(tmp_path_factory.mktemp("zerogpu-worker")), timeout=180)


def test_the_jobs_run_in_a_forked_worker_through_the_real_wrapper(worker):
    assert worker["wrapped"]  # run_job is spaces' wrapper, not the bare generator
    forget = worker["forget"]
    assert forget["remember_pid"] != worker["stop"]["main_pid"]
    assert forget["other_after_forget"]["pid"] == forget["remember_pid"]  # the idle worker reused
    assert forget["other_after_refork"]["pid"] != forget["remember_pid"]  # a fresh fork after the abort


def test_a_visitors_stop_ends_their_job_in_the_worker_within_a_round(worker):
    stop = worker["stop"]
    assert stop["own_at"] == 8
    assert stop["after_own_stop"] <= 2 and stop["outputs"] < 200
    assert stop["end_after_stop_s"] < 1.0


def test_another_visitors_stop_does_not_reach_the_job(worker):
    stop = worker["stop"]
    assert stop["other_stopped"] == 0
    assert stop["outputs"] >= 8  # the job went on past visitor B's Stop at its round 3


def test_after_forget_no_job_in_the_worker_sees_or_holds_the_secret(worker):
    forget = worker["forget"]
    assert forget["main_had_secret"] and not forget["main_after_forget"]
    for probe in (forget["other_after_forget"], forget["own_after_forget"]):
        assert not probe["job_sees"], probe
        assert not probe["worker_holds"], probe
        assert probe["worker_sessions"] == 0, probe


def test_a_forget_pressed_while_the_workers_job_runs_is_not_undone_when_it_ends(worker):
    forget = worker["forget"]
    assert forget["midrun_outputs"] == 1 and not forget["main_after_midrun_forget"]


def test_after_a_closed_tab_the_worker_holds_nothing_of_the_visitor(worker):
    forget = worker["forget"]
    assert not forget["main_after_close"]
    assert not forget["other_after_close"]["worker_holds"]


def test_a_worker_forked_while_the_visitor_had_a_history_keeps_no_copy_after_forget(worker):
    assert not worker["forget"]["other_after_refork"]["worker_holds"]


def test_a_short_reservation_ends_the_job_at_its_deadline_with_its_output(worker):
    deadline = worker["deadline"]
    assert deadline["outcome"] == "ok", deadline
    assert deadline["outputs"] > 0
    assert deadline["deadline_s"] <= deadline["elapsed_s"] < worker["charged_4s"]


def test_without_the_deadline_the_scheduler_aborts_the_job(worker):
    """The control: the harness's scheduler does kill a job past its charged reservation."""
    unenforced = worker["unenforced"]
    assert "GPU task aborted" in unenforced["outcome"], unenforced
    assert worker["released"][-1][1] is True  # released as failed, as spaces does on an abort
