"""ZeroGPU the documented way, checked with the real ``spaces`` package (outside a Space its
decorator passes functions through): ``spaces`` imported before torch, one module-level GPU entry
point that pickles by reference, jobs and records that cross a process boundary, Stop and the
deadline reaching a job in a forked worker, a worker's gr.Error arriving as its sentence, the
reservation bounded, the public models placed at import, and the torch markers of requirements.txt.

The ZeroGPU boundary is simulated where a test says so: :func:`_pickled_stream` pickles the job on
its way in and every record on its way out, as ``spaces``' worker queues do; the Stop and deadline
tests fork a real worker process (ZeroGPU forks its worker the same way) and pass records through a
``multiprocessing`` queue.
"""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import pickle
import re
import subprocess
import sys
import time

import gradio as gr
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement

from specviz.models import memory
from specviz.run.request import ServerDevice, pin_public_device
from specviz.ui.serve import feature
from specviz.ui.serve import gpu
from specviz.ui.serve import gpu_budget
from specviz.ui.serve import placement
from specviz.ui.tabs import run_stream
from specviz.ui.serve import settings
from specviz.ui.serve.deltas import DeltaDecoder
from specviz.ui.tabs.experiments_tab import run_sweep_ui
from specviz.ui.tabs.lossless_check import run_lossless
from specviz.ui.tabs.run_stream import run_demo
from specviz.ui.tabs.side_by_side_tab import run_side_by_side
from specviz.ui.serve.state import RunState
from specviz.ui.serve.user_errors import refused

spaces = pytest.importorskip("spaces")
ROOT = pathlib.Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- import order
def test_import_app_imports_spaces_before_torch():
    """``python -X importtime -c "import app"`` (the Done-when command): the app imports, and the
    first torch module finishes importing only after ``spaces`` has (importtime prints a module
    when its import ends, children first), so no torch code, CUDA queries included, ran before
    ``spaces`` was imported."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("SPACES_ZERO_GPU", None)
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import app"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    line = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)\s*$", re.MULTILINE)
    modules = [m.group(1) for m in line.finditer(out.stderr)]
    assert "spaces" in modules and "torch" in modules
    first_torch = next(i for i, m in enumerate(modules) if m == "torch" or m.startswith("torch."))
    assert modules.index("spaces") < first_torch


def test_settings_asks_cuda_only_when_asked(monkeypatch):
    """settings' server device is a cached function, not a constant computed at import."""
    assert callable(settings.server_device) and not hasattr(settings, "SERVER_DEVICE")
    source = (ROOT / "specviz" / "ui" / "serve" / "settings.py").read_text(encoding="utf-8")
    top_level = [line for line in source.splitlines() if "torch.cuda" in line and not line.startswith(" ")]
    assert top_level == []


# ----------------------------------------------------------------------------- the entry point
def test_every_spaces_gpu_callable_is_module_level_and_pickles_by_reference():
    """Only specviz/ui/serve/gpu.py applies ``spaces.GPU``, to ``run_job``, a module-level function that
    pickles by reference (ZeroGPU's worker unpickles it by name); the page's generations all go
    through it."""
    users = [p for p in [*ROOT.glob("specviz/**/*.py"), ROOT / "app.py"]
             if re.search(r"(?<!`)spaces\.GPU\(", p.read_text(encoding="utf-8"))]  # code, not ``docs``
    assert users == [ROOT / "specviz" / "ui" / "serve" / "gpu.py"]
    assert pickle.loads(pickle.dumps(gpu.run_job)) is gpu.run_job
    assert gpu.run_job.__qualname__ == "run_job"
    assert set(feature.FEATURES) == {"run", "lossless", "sweep", "side_by_side", "dial", "llamacpp_lane"}
    for declared in feature.FEATURES.values():
        assert pickle.loads(pickle.dumps(declared.work)) is declared.work
    for module in ("run_stream", "lossless_check", "experiments_tab", "side_by_side_tab", "lane_view"):
        text = (ROOT / "specviz" / "ui" / "tabs" / f"{module}.py").read_text(encoding="utf-8")
        assert "= Feature(" in text and "@gpu" not in text


def test_a_job_refuses_work_that_would_not_pickle_by_reference():
    with pytest.raises(ValueError, match="module-level"):
        gpu.Job(lambda ctx: iter(()))

    def local(ctx):
        yield 1

    with pytest.raises(ValueError, match="module-level"):
        gpu.Job(local)


def _dumps_without_tensors(obj) -> bytes:
    """``pickle.dumps(obj)``, failing if a tensor off the CPU is inside (a CUDA tensor would make
    ZeroGPU's main process touch CUDA when it unpickles a record)."""
    import io

    import torch

    class NoTensors(pickle.Pickler):
        def reducer_override(self, value):
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                pytest.fail(f"a tensor crossed the boundary: {tuple(value.shape)}")
            return NotImplemented

    buffer = io.BytesIO()
    NoTensors(buffer).dump(obj)
    return buffer.getvalue()


def _pickled_stream(calls):
    """A stand-in for :func:`specviz.ui.serve.gpu.stream_job` that crosses a pickle boundary both ways,
    as ZeroGPU's queues do (no CUDA tensor may cross); it records each job it ran in ``calls``."""
    real = gpu.stream_job

    def stream(job, progress=None):
        real_run_job = gpu.run_job

        def crossing(job):  # the main process keeps its job; the worker gets a copy
            job = pickle.loads(_dumps_without_tensors(job))
            calls.append(job)
            for record in real_run_job(job):
                yield pickle.loads(_dumps_without_tensors(record))

        gpu.run_job = crossing
        try:
            yield from real(job, progress)
        finally:
            gpu.run_job = real_run_job

    return stream


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    from helpers import bpe_tokenizer
    from test_cli import _save_tiny

    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(tmp_path_factory.mktemp("zerogpu") / "target", tok, seed=0)


def _values(target: str, **changes) -> dict:
    values = {"prompt": "the quick brown fox the quick brown fox the quick", "target_id": target,
              "drafter_kind": "ngram", "draft_model": "", "early_exit_layers": 1, "k": 3, "temperature": 0.0,
              "top_k": 0, "top_p": 1.0, "seed": 0, "chat": False, "device": "cpu", "dtype": "float32"}
    return {**values, **changes}


def _no_progress(*args, **kwargs):
    pass


def test_each_generation_runs_as_one_job_whose_records_pickle(tiny_target, one_torch_thread, monkeypatch):
    """Run, the lossless check, an experiment and side by side each make one picklable job, and every
    record they stream survives pickling with the page's outputs intact."""
    calls: list = []
    monkeypatch.setattr(gpu, "stream_job", _pickled_stream(calls))
    updates = list(run_demo(**_values(tiny_target), max_new_tokens=8,
                            baselines={}, progress=_no_progress, public=False))
    state = updates[-1][-2]
    assert isinstance(state, RunState) and state.finished and sum(len(r.emitted) for r in state.rounds) == 8
    _, text = run_lossless(**_values(tiny_target, temperature=1.0), n_draws=100, progress=_no_progress, public=False)
    assert "**100 draws each**" in text
    sweep = list(run_sweep_ui("Temperature", "0, 1", 4, **_values(tiny_target), last_analysis=None,
                              progress=_no_progress))
    assert "**Done**: 2 settings" in sweep[-1][0]
    side = list(run_side_by_side(["Prompt lookup", "None (plain decoding)"], 4, **_values(tiny_target),
                                 progress=_no_progress))
    assert "**Done**: 2 drafters" in side[-1][1]
    assert [job.work for job in calls] == [feature.FEATURES[name].work for name in
                                           ("run", "lossless", "sweep", "side_by_side")]
    assert all(gpu_budget.MIN_S <= job.duration_s <= gpu_budget.PRIVATE_CAP_S for job in calls)


def test_a_worker_refusal_arrives_as_its_sentence(tiny_target, tmp_path, monkeypatch):
    """A gr.Error raised inside the job (here: a target directory that holds no model, found only
    when loading) reaches the page as its own message, not a bare "Error" (gradio#12792)."""
    calls: list = []
    monkeypatch.setattr(gpu, "stream_job", _pickled_stream(calls))
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(gr.Error) as err:
        list(run_demo(**_values(str(empty)), max_new_tokens=4,
                      baselines={}, progress=_no_progress, public=False))
    assert len(calls) == 1 and err.value.message and err.value.message != "Error"
    assert "not-a-model" in err.value.message or "load" in err.value.message.lower()


def test_the_visitors_history_and_table_travel_with_the_job_and_come_back(tiny_target, one_torch_thread,
                                                                          monkeypatch):
    """Across the pickle boundary the worker drafts from the visitor's own history and table (sent
    with the job) and the main process keeps what the run added to them."""
    from specviz.ui.serve import visitors

    calls: list = []
    monkeypatch.setattr(gpu, "stream_job", _pickled_stream(calls))
    monkeypatch.setattr(gpu, "session_of", lambda request=None: "visitor-stores")
    visitors.HISTORIES.drop("visitor-stores")
    visitors.TABLES.drop("visitor-stores")
    before = visitors.HISTORIES.get("visitor-stores")
    list(run_demo(**_values(tiny_target, drafter_kind="suffix"), max_new_tokens=6, baselines={},
                  progress=_no_progress, public=False))
    list(run_demo(**_values(tiny_target, drafter_kind="recycle"), max_new_tokens=6, baselines={},
                  progress=_no_progress, public=False))
    history, table = visitors.HISTORIES.get("visitor-stores"), visitors.TABLES.get("visitor-stores")
    assert calls[0].stores is not None and history is not before  # the worker's copy, brought back
    assert history._n_tokens > 0 and len(table) > 0
    visitors.HISTORIES.drop("visitor-stores")
    visitors.TABLES.drop("visitor-stores")


def refusing(ctx):
    """A work function that refuses after one output (module level: it pickles by reference)."""
    yield "first"
    raise refused("The pair cannot run here.")


def test_a_refusal_record_is_raised_again_in_the_main_process():
    job = gpu.make_job(refusing, duration_s=10)
    records = [pickle.loads(pickle.dumps(r)) for r in gpu.run_job(job)]
    assert [r.kind for r in records] == ["outputs", "error"]
    with pytest.raises(gr.Error, match="The pair cannot run here."):
        list(gpu.stream_job(job))


# ----------------------------------------------------------------------------- stop and deadline
def counting(ctx, n: int, pause_s: float):
    """A work function that yields ``n`` ticks, ending early (with what it counted) on Stop or at the deadline."""
    for i in range(n):
        if ctx.should_end():
            yield ("ended", i, "stop" if ctx.stopped() else "deadline")
            return
        yield ("tick", i)
        time.sleep(pause_s)


def _worker(job, queue):
    """A forked worker, as ZeroGPU's: runs the job and sends each record pickled."""
    for record in gpu.run_job(job):
        queue.put(pickle.dumps(record))
    queue.put(None)


def _run_forked(job, on_first=None, timeout_s: float = 30.0) -> list:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(pickle.loads(pickle.dumps(job)), queue), daemon=True)
    proc.start()
    records = []
    try:
        while (item := queue.get(timeout=timeout_s)) is not None:
            records.append(pickle.loads(item))
            if len(records) == 1 and on_first is not None:
                on_first()
    finally:
        proc.join(timeout_s)
    assert proc.exitcode == 0
    decoder = DeltaDecoder()  # each record carries what changed since the last (specviz.ui.serve.deltas)
    return [decoder.decode(r.value) for r in records if r.kind == "outputs"]


def test_stop_reaches_a_job_running_in_a_forked_worker():
    job = gpu.make_job(counting, 10_000, 0.01, duration_s=60)
    outputs = _run_forked(job, on_first=lambda: gpu.request_stop(job.stop_slot))
    assert outputs[-1][0] == "ended" and outputs[-1][2] == "stop"
    assert 1 <= outputs[-1][1] < 10_000


def test_the_deadline_ends_a_forked_job_with_what_it_made():
    """A 2 s reservation: the deadline falls at 1 s (:func:`specviz.ui.serve.gpu_budget.deadline_s`), so
    about 100 of 10,000 ticks at 10 ms are made, and kept."""
    job = gpu.Job(counting, (10_000, 0.01), {}, 2, gpu.new_stop_slot(), None, enforce_deadline=True)
    outputs = _run_forked(job)
    assert outputs[-1][0] == "ended" and outputs[-1][2] == "deadline"
    assert 10 <= outputs[-1][1] < 10_000 and len(outputs) == outputs[-1][1] + 1


def test_the_deadline_ends_a_real_run_with_its_state_kept(tiny_target, one_torch_thread):
    """A run whose reservation is already spent stops before its warm-up (the
    deadline reaches every step, not only the stream), its state kept and the status saying why;
    tests/test_deadline_steps.py stops runs inside each step."""
    from specviz.ui.serve.fields import request_from

    request = request_from({**_values(tiny_target), "max_new_tokens": 64}, False)
    job = gpu.Job(run_stream.run_work, (request, {}, False), {}, 0, gpu.new_stop_slot(), None, enforce_deadline=True)
    outputs = list(gpu.stream_job(job))
    state = outputs[-1][-2]
    assert isinstance(state, RunState) and state.finished and not state.rounds
    assert "end of the GPU time reserved" in outputs[-1][1]


def test_stop_session_reaches_the_visitors_running_jobs_of_that_work(monkeypatch):
    monkeypatch.setattr(gpu, "session_of", lambda request=None: "visitor-a")
    first, second = gpu.new_stop_slot("visitor-a", counting), gpu.new_stop_slot("visitor-a", refusing)
    theirs = gpu.new_stop_slot("visitor-z", counting)
    gpu.stop_session(None, counting)
    assert gpu.stop_requested(first) and not gpu.stop_requested(second) and not gpu.stop_requested(theirs)
    for slot in (first, second, theirs):
        gpu.release_slot(slot)


# ----------------------------------------------------------------------------- reservation
def test_job_duration_is_the_jobs_reservation():
    job = gpu.make_job(counting, 1, 0.0, duration_s=37)
    assert gpu.job_duration(job) == 37


@given(seconds=st.floats(allow_nan=True, allow_infinity=True), cap=st.floats(10, 600))
def test_a_reservation_stays_between_the_floor_and_the_cap(seconds, cap):
    d = gpu_budget.duration_s(seconds, cap)
    assert gpu_budget.MIN_S <= d <= cap and isinstance(d, int)
    assert d / 2 <= gpu_budget.deadline_s(d) < d


def test_reservations_grow_with_the_request_and_stop_at_the_public_cap():
    from specviz.ui.serve.fields import request_from

    cap = gpu_budget.cap_s(True, settings.PUBLIC_POLICY.max_run_s)
    assert cap == settings.PUBLIC_POLICY.max_run_s
    base = _values("smollm2-135m-instruct")
    short = gpu_budget.request_duration(request_from({**base, "max_new_tokens": 16}, False), True, cap)
    long = gpu_budget.request_duration(request_from({**base, "max_new_tokens": 256}, False), True, cap)
    reused = gpu_budget.request_duration(request_from({**base, "max_new_tokens": 256}, False), False, cap)
    assert gpu_budget.MIN_S <= short < long <= cap and reused < long
    # The 7B hub pair at 256 tokens and K = 8 would take longer than the cap: it asks for the cap.
    big = gpu_budget.run_seconds(256, 8, 28, 24, True)
    assert gpu_budget.duration_s(big, cap) == int(cap // gpu_budget.duration_factor())


# ----------------------------------------------------------------------------- models at import
def test_nothing_is_placed_off_a_space(monkeypatch):
    monkeypatch.setattr(spaces.config.Config, "zero_gpu", False)
    assert placement.place_at_import(load=lambda *a, **k: pytest.fail("loaded off a Space")) == []


def test_on_a_space_the_public_models_are_placed_on_cuda_as_the_pin_will_ask(monkeypatch):
    """Each public preset's model loads at import on cuda in the dtype :func:`pin_public_device`
    gives an ``auto`` request, so the run's load finds it under the same cache key."""
    server = ServerDevice("cuda", ("bfloat16", "float16"), 40 * 2**30)
    monkeypatch.setattr(placement, "on_zero_gpu", lambda: True)
    monkeypatch.setattr(settings, "public_server", lambda: server)
    monkeypatch.setattr(settings, "public_allowed", lambda: settings.public_models(cuda=True))
    from specviz.models import loading as models

    limits = []
    monkeypatch.setattr(models, "set_cache_limits", lambda max_models=None, **_: limits.append(max_models))
    calls = []
    placed = placement.place_at_import(load=lambda name, device, dtype: calls.append((name, device, dtype)))
    assert limits in ([], [len(placed)]) and max(limits + [models.cache_info()["max_models"]]) >= len(placed)
    on_gpu = [p for p in settings.PRESETS.values() if not p.get("hub_twin")]  # an offline pair's hub twin instead
    hub = {p["target"] for p in on_gpu} | {p["draft_model"] for p in on_gpu}
    assert set(placed) == hub - {""} and len(placed) == len(set(placed))
    from specviz.ui.serve.fields import request_from

    for preset in on_gpu:
        values = {**_values(preset["target"]), "drafter_kind": "ngram", "device": "auto", "dtype": "auto",
                  "max_new_tokens": 8}
        pinned = pin_public_device(request_from(values, False), server)
        assert (preset["target"], pinned.device, pinned.dtype) in calls


def test_on_a_space_free_cuda_memory_is_never_asked(monkeypatch):
    import torch

    monkeypatch.setattr(spaces.config.Config, "zero_gpu", True)
    monkeypatch.setenv("ZEROGPU_CUDA_TOTAL_MEMORY", str(48 * 2**30))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: pytest.fail("CUDA asked on ZeroGPU"))
    assert memory.device_free_bytes("cuda") == 48 * 2**30


def test_on_zero_gpu_has_one_answer_spaces_own_where_spaces_is_importable(monkeypatch):
    """The GPU entry point, the placement and the model cache ask one function, and it answers as
    ``spaces`` decided at its import (an environment changed later does not make the app disagree
    with ``spaces.GPU``); without ``spaces`` it reads ``SPACES_ZERO_GPU`` the way ``spaces`` does."""
    assert gpu.on_zero_gpu is memory.on_zero_gpu and placement.on_zero_gpu is memory.on_zero_gpu
    for decided in (True, False):
        monkeypatch.setattr(spaces.config.Config, "zero_gpu", decided)
        monkeypatch.setenv("SPACES_ZERO_GPU", "false" if decided else "true")
        assert memory.on_zero_gpu() is decided
    monkeypatch.setitem(sys.modules, "spaces.config", None)  # import now raises ImportError
    for value, expected in (("True", True), ("1", True), ("t", True), ("yes", False), ("", False)):
        monkeypatch.setenv("SPACES_ZERO_GPU", value)
        assert memory.on_zero_gpu() is expected
    monkeypatch.delenv("SPACES_ZERO_GPU")
    assert memory.on_zero_gpu() is False


# ----------------------------------------------------------------------------- torch for the Space
def _torch_pins(environment: dict | None) -> list[str]:
    pins = []
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.name == "torch" and (req.marker is None or req.marker.evaluate(environment)):
            pins.append(str(req.specifier))
    return pins


def test_requirements_give_the_space_a_zerogpu_torch_and_this_machine_its_own():
    assert _torch_pins({"python_full_version": "3.12.12", "python_version": "3.12"}) == ["==2.11.0"]
    assert _torch_pins(None) == ["==2.13.0"]  # this interpreter (3.11)
    assert _torch_pins({"python_full_version": "3.10.13", "python_version": "3.10"}) == ["==2.13.0"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    front = readme.split("---")[1]
    assert 'python_version: "3.12.12"' in front and "suggested_hardware: zero-" in front
    assert "## " in readme and "## Deploy as a Space" in (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")


def test_the_run_tabs_stop_reaches_the_worker_through_the_visitors_running_job(monkeypatch):
    from types import SimpleNamespace

    from specviz.ui.tabs import run_stream

    slot = gpu.new_stop_slot("visitor-r", run_stream.run_work)
    state = RunState(label="pair", max_new_tokens=8, stop_slot=-1)  # the worker's copy is not this one
    run_stream.RUN.stop_handler()(SimpleNamespace(session_hash="visitor-r"))  # what the Run tab's Stop runs
    run_stream.stop_run(state)
    assert state.finished and gpu.stop_requested(slot)
    gpu.release_slot(slot)


# ----------------------------------------------------------------------------- presets that pay on a GPU
def test_the_pages_gpu_defaults_draft_for_free_and_the_eager_smollm2_pair_says_why_it_cannot_pay():
    """On a cuda server the Run tab starts with prompt lookup (no layers of its own: it pays by
    construction) and the learned-head preset drafts with one layer; the eager SmolLM2 hub pair's
    note says in a sentence that it cannot beat plain decoding (c ≈ layer ratio)."""
    default = settings.PRESETS[settings.DEFAULT_PRESET]
    assert gpu_budget.step_layers(default["target"], default["drafter"])[1] == 0
    assert ("Prompt lookup (n-gram match in the context)", "ngram") in settings.drafter_menu("cuda")
    eagle = next(p for p in settings.PRESETS.values() if p["drafter"] == "eagle")
    assert gpu_budget.step_layers(eagle["target"], "eagle")[1] == 1
    smol = next(n for n, p in settings.PRESETS.items() if p["draft_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert "cannot beat plain decoding" in settings.preset_note(smol)


def test_a_draft_steps_layers_are_read_before_anything_loads():
    assert gpu_budget.step_layers("smollm2-135m-instruct", "ngram") == (30, 0)
    assert gpu_budget.step_layers("smollm2-135m-instruct", "early-exit:4") == (30, 4)
    assert gpu_budget.step_layers("smollm2-135m-instruct", "int8") == (30, 30)
    assert gpu_budget.step_layers("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct") == (28, 24)
    # α = 0 worst case: every pass one token, K draft steps and one verify pass.
    assert gpu_budget.run_seconds(10, 4, 30, 0, False) == pytest.approx((10 + 8) * 30 * gpu_budget.LAYER_STEP_S)


def session_seen(ctx):
    """Yields the session :func:`specviz.ui.serve.visitors.session_of` sees at each step."""
    from specviz.ui.serve.visitors import session_of

    for _ in range(3):
        yield session_of()


def test_each_step_of_a_job_sees_its_visitor_even_from_a_fresh_context():
    """Gradio may advance a generator from a new copy of its context at every step: the job's
    session is set around each step, and nothing leaks into the caller's context."""
    import contextvars

    from specviz.ui.serve.visitors import session_of

    job = gpu.Job(session_seen, (), {}, 10, gpu.new_stop_slot(), "visitor-b")
    steps = gpu.stream_job(job)
    seen = [contextvars.copy_context().run(next, steps) for _ in range(3)]
    assert seen == ["visitor-b"] * 3 and session_of() is None
