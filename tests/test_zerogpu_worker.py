"""Stop, Forget (and a closed tab), the deadline, the records' bytes, a close mid-load and two
visitors at once through the real ``spaces`` package's generator wrapper (``spaces.GPU`` → ``spaces.zero.wrappers``), which forks a worker, pickles the
job in and every record out, and reuses the idle worker for the next job, as on a ZeroGPU Space. :mod:`tests.zerogpu_driver`'s ``worker`` scenario runs it in one fresh Python; what it
stubs, and why, is in its ``_Scheduler`` and ``_no_card_start_up`` and in
:mod:`tests.zerogpu_harness`. The jobs are the driver's small work functions (a run's loop that
ends on Stop or the deadline; a run's additions to the visitor's stores; a probe of what the
worker holds; a tiny Llama's run streamed by the Run tab's own stream; a load the way the Run
tab waits for one; a job that holds the GPU a second), so the file takes seconds, not a model's
load. The scenario first imports the app in public mode where no public model can be placed. The first tests check the same two
rules in this process, without ``spaces``: a job's stores come back only to a visitor who has not
forgotten since, and a forked process empties the stores it inherited.
"""

from __future__ import annotations

import multiprocessing
import statistics

import pytest

from specviz.ui.serve import gpu
from specviz.ui.serve import visitors
from tests.zerogpu_harness import run_driver, unplaceable_env

#: One xdist worker runs this module, so its ``worker`` scenario (a fresh Python with the real
#: ``spaces`` package, about 30 s of CPU) runs once, not once on each worker that draws one of its tests.
pytestmark = pytest.mark.xdist_group("zerogpu-worker")

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
    return run_driver("worker", unplaceable_env(tmp_path_factory.mktemp("zerogpu-worker")), timeout=300)


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
    assert unenforced["released"][-1][1] is True  # released as failed, as spaces does on an abort


def test_nothing_placed_at_import_is_said_on_the_run_tabs_status_line_at_each_page_load(worker):
    """a Space whose public models all failed to load says so where its owner looks
    first, the Run tab's status line, as the page loads (not as an endpoint of the API)."""
    placed = worker["nothing_placed"]
    assert placed["problem"].startswith("No model could be placed"), placed
    assert placed["outputs"] == [["sv-summary"]] and placed["triggers"] == [["load"]], placed
    assert placed["api_visibility"] == ["private"]  # not an endpoint of the API
    status = placed["status"][0]
    assert status.startswith("**Not ready:**") and "No model could be placed" in status
    assert "Errno" not in status and "not cached" not in status  # the errors themselves stay in the log


def test_bytes_per_update_stay_flat_from_a_64_to_a_512_token_run(worker):
    """Through the wrapper's pipe: the median outputs record of a 512-token run is
    no bigger than 1.5 times a 64-token run's (each record carries the rounds since the last one),
    where records carrying the outputs whole (the control, as before) grow with the run."""
    short, long = worker["bytes"]["64"], worker["bytes"]["512"]
    for tokens, run in ((64, short), (512, long)):
        assert run["emitted"] == tokens and run["finished"], run
        assert run["html"] == run["rounds"] and run["indices"] == sorted(set(run["indices"]))
        assert len(run["records"]) == run["updates"]
    assert statistics.median(long["records"]) < 1.5 * statistics.median(short["records"]), (short, long)
    assert statistics.median(long["whole"]) > 3 * statistics.median(short["whole"]), (short, long)
    assert sum(long["records"]) * 5 < sum(long["whole"])


def test_closing_a_job_mid_load_stalls_the_event_loop_under_0_2_s(worker):
    """gradio closes a cancelled generator on its event loop; the page's stream
    hands the wrapper's close (which waits for the worker's current step, here a load) to a thread."""
    close = worker["close"]
    page, control = close["page"], close["wrapper_on_loop"]
    assert page["close_s"] < 0.2 and page["max_gap_s"] < 0.2, page
    assert page["worker_step_s"] > close["load_s"] - 0.2  # the worker was still loading after the close
    assert control["max_gap_s"] > 0.5, control  # the wrapper closed on the loop stalls it: the harness sees it


def test_two_visitors_jobs_run_at_the_same_time_on_zerogpu(worker):
    """ZeroGPU gives each call its own GPU, so the generation queue runs
    QUEUE_SIZE at once there; two visitors' jobs through gradio's queue and the wrapper overlap,
    each in a worker of its own."""
    overlap = worker["overlap"]
    assert overlap["limit"] == overlap["queue_size"] > 1 and overlap["sessions"] == 2
    first, second = overlap["stamps"]
    assert max(first["start"], second["start"]) < min(first["end"], second["end"]), overlap
    assert first["pid"] != second["pid"]
