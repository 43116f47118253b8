"""A generation's Stop reaches only the job of the visitor who pressed it (issue 42 item 1): a
Stop slot is held by a job from its creation to its end, and a Stop reaches only the slots of
the presser's own running jobs, so neither a visitor whose job ended long ago nor a stale Run-tab
state naming an old slot can stop another visitor's live job."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specviz.ui import gpu, run_stream
from specviz.ui.state import RunState


def ticking(ctx, n: int):
    """A work function of ``n`` ticks that ends early, saying so, when its Stop flag is raised."""
    for i in range(n):
        if ctx.should_end():
            yield ("stopped", i)
            return
        yield ("tick", i)


def _job(monkeypatch, session: str | None, n: int):
    """A job made for ``session`` as a callback serving that visitor would make it."""
    with monkeypatch.context() as patched:
        patched.setattr(gpu, "session_of", lambda request=None: session)
        return gpu.make_job(ticking, n, duration_s=10)


def _visitor(session: str):
    return SimpleNamespace(session_hash=session)


def _others_run_a_full_cycle(monkeypatch) -> None:
    """Other visitors run one slot-cycle of jobs to completion (enough to reuse any ended job's slot)."""
    for i in range(gpu.STOP_SLOTS - 1):
        assert list(gpu.stream_job(_job(monkeypatch, f"other-{i}", 1))) == [("tick", 0)]


def test_a_visitor_with_nothing_running_stops_no_one_after_their_slot_is_reused(monkeypatch):
    mine = _job(monkeypatch, "visitor-a", 2)
    assert list(gpu.stream_job(mine)) == [("tick", 0), ("tick", 1)]
    _others_run_a_full_cycle(monkeypatch)
    live = _job(monkeypatch, "visitor-b", 50)
    steps = gpu.stream_job(live)
    assert next(steps) == ("tick", 0)
    asked = gpu.stop_session(_visitor("visitor-a"))
    assert list(steps)[-1] == ("tick", 49)  # B's run went to its end
    assert asked == 0  # A has nothing running


def test_a_stale_run_state_naming_a_slot_now_held_by_another_visitor_stops_no_one(monkeypatch):
    ended = _job(monkeypatch, "visitor-a", 1)
    list(gpu.stream_job(ended))
    _others_run_a_full_cycle(monkeypatch)
    live = _job(monkeypatch, "visitor-b", 50)
    steps = gpu.stream_job(live)
    next(steps)
    monkeypatch.setattr(run_stream, "STOP_SETTLE_S", 0.0)
    for slot in {ended.stop_slot, live.stop_slot}:  # an old slot, and the one B holds now
        stale = RunState(label="pair", max_new_tokens=8, stop_slot=slot)
        run_stream.stop_run(stale, _visitor("visitor-c"))
        assert stale.finished  # C's own page shows the state stopped
    assert not gpu.stop_requested(live.stop_slot)
    assert list(steps)[-1] == ("tick", 49)


def test_a_visitors_stop_reaches_their_own_running_job_and_only_it(monkeypatch):
    live = _job(monkeypatch, "visitor-b", 50)
    other = _job(monkeypatch, "visitor-c", 50)
    steps, others = gpu.stream_job(live), gpu.stream_job(other)
    next(steps), next(others)
    assert gpu.stop_session(_visitor("visitor-b")) == 1
    assert list(steps)[-1] == ("stopped", 1)
    assert list(others)[-1] == ("tick", 49)


def test_a_slot_is_held_while_its_job_runs_and_released_when_it_ends(monkeypatch):
    job = _job(monkeypatch, "visitor-d", 3)
    assert gpu.stop_session(_visitor("visitor-d"), ticking) == 1  # held from creation
    list(gpu.stream_job(job))
    assert gpu.stop_session(_visitor("visitor-d")) == 0  # released at the end
    held = [gpu.new_stop_slot("visitor-e") for _ in range(4)]
    assert len(set(held)) == 4  # a held slot is never handed out again
    for slot in held:
        gpu.release_slot(slot)


def test_a_stop_without_a_session_reaches_no_job(monkeypatch):
    job = _job(monkeypatch, None, 5)
    steps = gpu.stream_job(job)
    next(steps)
    assert gpu.stop_session(None) == 0 and gpu.stop_session(SimpleNamespace(session_hash="")) == 0
    assert list(steps)[-1] == ("tick", 4)


def test_every_slot_held_refuses_a_new_job_with_a_sentence(monkeypatch):
    monkeypatch.setattr(gpu, "_running", {slot: ("x", None) for slot in range(gpu.STOP_SLOTS)})
    with pytest.raises(RuntimeError, match="Stop slots"):
        gpu.new_stop_slot("visitor-f")
