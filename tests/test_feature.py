"""The one recipe for a model feature (:mod:`specviz.ui.serve.feature`) on the built page, and a Stop
that reaches only the job of the visitor who pressed it.

* Every generation event of the page is a feature's, wired by the recipe; in public mode the
  one-generation gate holds exactly those events; on ZeroGPU several visitors' generations run at
  once, elsewhere one at a time.
* A Stop slot is held by a job from its creation to its end, and a Stop reaches only the slots of
  the presser's own running jobs, so neither a visitor whose job ended long ago nor a stale Run-tab
  state naming an old slot can stop another visitor's live job."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from specviz.ui.serve import feature
from specviz.ui.serve import gpu
from specviz.ui.tabs import run_stream
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.serve.state import RunState

ENDPOINTS = {"run", "lossless", "sweep", "side_by_side", "dial", "llamacpp_lane"}


# ----------------------------------------------------------------------------- the recipe on the page
@pytest.fixture(scope="module")
def pages():
    """The page built off ZeroGPU in private mode and on ZeroGPU in public mode."""
    from specviz.ui.page import build_page

    built = {}
    for public, zero in ((False, False), (True, True)):
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(feature, "on_zero_gpu", lambda zero=zero: zero)
            built[public] = build_page(public)
    return built


def _unregistered(page) -> list[str]:
    """The page's events in the generation queue that no feature wired."""
    wired = {id(block_fn) for _, block_fn in feature.page_events(page)}
    return [str(f.api_name) for f in page.fns.values()
            if f.concurrency_id == feature.GENERATION and id(f) not in wired]


def test_every_generation_of_the_page_is_a_feature_wired_by_the_recipe(pages):
    for page in pages.values():
        events = feature.page_events(page)
        assert {f.api_name for f, _ in events} == ENDPOINTS == set(feature.FEATURES)
        assert all(block_fn.api_name == f.api_name and block_fn.preprocess is False for f, block_fn in events)
        assert _unregistered(page) == []
        cancelled = {i for f in page.fns.values() for i in f.cancels}
        stoppable = {f.api_name for f, block_fn in events if block_fn._id in cancelled}
        assert stoppable == {"run", "sweep", "side_by_side", "llamacpp_lane"}  # the lossless check and the dial have no Stop


def test_the_public_gate_holds_exactly_the_recipes_events(pages):
    public, private = pages[True], pages[False]
    gate = visitors.gate_of(public)
    gated = {f.api_name for f in public.fns.values() if f.validator is not None and f.validator == gate.validator}
    assert gated == ENDPOINTS and visitors.one_generation(public) == len(ENDPOINTS)
    assert gate.api_names == ENDPOINTS
    assert all(f.validator is None for f in private.fns.values()) and visitors.one_generation(private) == 0


def test_a_generation_wired_by_hand_is_found_unregistered():
    import gradio as gr

    with gr.Blocks() as page:
        box = gr.Textbox()
        gr.Button().click(lambda text: text, box, box, api_name="echo", concurrency_id=feature.GENERATION)
    assert _unregistered(page) == ["echo"]


def test_on_zero_gpu_several_visitors_generate_at_once_elsewhere_one(pages):
    """ZeroGPU gives each call its own GPU: the generation queue runs up to the queue's size at
    once (each visitor still one at a time, by the gate); off ZeroGPU one computation fills the machine."""
    assert 1 < feature.ZERO_GPU_GENERATIONS <= settings.QUEUE_SIZE
    for public, limit in ((False, 1), (True, feature.ZERO_GPU_GENERATIONS)):
        events = feature.page_events(pages[public])
        assert [(b.concurrency_id, b.concurrency_limit) for _, b in events] == [(feature.GENERATION, limit)] * len(ENDPOINTS)


def test_the_gate_counts_its_own_events_in_any_queue_and_no_others():
    """What a visitor has waiting or running is read by the events the gate holds, not by a
    queue's name: an event of the gate in another queue counts, another event in the generation
    queue does not."""
    gated, other = SimpleNamespace(api_name="run", validator=None), SimpleNamespace(api_name="x", validator=None)
    event = lambda session, fn: SimpleNamespace(session_hash=session, fn=fn)  # noqa: E731
    queue = SimpleNamespace(event_queue_per_concurrency_id={
        feature.GENERATION: SimpleNamespace(queue=[event("v", other), event("w", gated)]),
        "elsewhere": SimpleNamespace(queue=[event("v", gated)])}, active_jobs=[[event("v", gated)], None])
    gate = visitors.GenerationGate(SimpleNamespace(_queue=queue))
    gate.register(gated)
    assert gated.validator == gate.validator and other.validator is None
    assert gate.busy("v") == 2 and gate.busy("w") == 1 and gate.busy("z") == 0
    assert not gate.admit("v") and gate.admit("z")


def test_a_press_on_its_way_holds_the_visitors_generation_until_its_push(monkeypatch):
    """Two presses on two tabs a second apart: the first one's quick check claims the visitor's
    generation, so the second is refused at its own quick check (a message), and the first one's
    push is then admitted by the validator, not refused silently (seen on a busy server). A chain
    that stopped releases its claim; an unused claim lapses after CLAIM_S."""
    queue = SimpleNamespace(event_queue_per_concurrency_id={}, active_jobs=[], event_analytics={})
    gate = visitors.GenerationGate(SimpleNamespace(_queue=queue))
    now = [1000.0]
    monkeypatch.setattr(visitors.time, "time", lambda: now[0])
    assert gate.admit("v", note=False, claim=True)  # the first press's quick check
    assert not gate.admit("v", note=False, claim=True)  # the second press: refused with a message
    assert gate.admit("w", note=False, claim=True)  # another visitor is not held
    now[0] += 5
    assert gate.admit("v")  # the first press's push: its validator admits it
    assert not gate.admit("v", note=False)  # and it counts as waiting until it reaches the queue
    now[0] += visitors.PUSH_WINDOW_S + 1
    gate.release("w")  # w's chain stopped (its settings refused): w may press again at once
    assert gate.admit("w", note=False, claim=True)
    now[0] += visitors.CLAIM_S + 1  # a claim whose chain never pushed lapses
    assert gate.admit("w", note=False, claim=True)


def test_a_features_work_must_be_module_level_and_its_name_its_own():
    with pytest.raises(ValueError, match="module-level"):
        feature.Feature("echo-test", lambda ctx: iter(()), lambda: None)
    with pytest.raises(ValueError, match="two features"):
        feature.Feature("run", ticking, lambda: None)
    assert feature.FEATURES["run"].work is run_stream.run_work


# ----------------------------------------------------------------------------- Stop


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
        run_stream.RUN.stop_handler()(_visitor("visitor-c"))  # what the Run tab's Stop runs
        run_stream.stop_run(stale)
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


# ----------------------------------------------------------------------------- side by side's menu
def test_side_by_side_offers_every_registry_kind_with_a_lane_that_runs_on_the_device_with_the_same_default_ticks():
    from specviz.drafters import DRAFTER_KINDS
    from specviz.ui.tabs import side_by_side_tab as tab

    for device in ("cpu", "cuda"):
        offered, ticked = tab.side_by_side_menu(device)
        assert [tab.SIDE_BY_SIDE[label] for label in offered] == [
            spec for spec, kind in DRAFTER_KINDS.items() if kind.lane and kind.runs_on(device)]
        assert offered == [DRAFTER_KINDS[tab.SIDE_BY_SIDE[label]].lane for label in offered]
        assert ticked == [label for label in tab.SIDE_BY_SIDE_DEFAULT if label in offered]
    assert tab.side_by_side_menu("cpu")[1] == ["Prompt lookup", "int8 self-draft", "Early-exit self-draft",
                                               "None (plain decoding)"]


def test_each_offered_drafter_plans_a_run_of_its_own_kind():
    from specviz.drafters import drafter_kind
    from specviz.ui.tabs import side_by_side_tab as tab
    from specviz.ui.serve.fields import FIELDS

    values = {f.name: f.default for f in FIELDS}
    values.update(prompt="the quick brown fox", target_id="smollm2-135m-instruct", drafter_kind="ngram",
                  draft_model="smollm2-135m-instruct", early_exit_layers=2, k=3, temperature=0.0, top_k=0, top_p=1.0,
                  seed=0, chat=False, device="cpu", dtype="float32", max_new_tokens=8)
    assert not [name for name, value in values.items() if value is inspect.Parameter.empty]
    offered, _ = tab.side_by_side_menu("cpu")
    plan = tab.plan_side_by_side(offered, 8, values, False)
    requests = plan.args[0]
    assert [drafter_kind(r.draft).spec for r in requests] == [tab.SIDE_BY_SIDE[label] for label in offered]
