"""What a GPU job reserves (specviz/ui/serve/gpu_budget.py) follows what the job will do: a baseline
timed exactly when the job will time one (the same key the run looks up), the prompt's length,
the lossless check's passes computed once and its draws, a load for a pair not yet in memory,
and a per-layer step time a device run can calibrate."""

from __future__ import annotations


import pytest

from specviz.models import loading as models
from specviz.run.runner import baseline_key, encode_prompt
from specviz.ui.serve import gpu_budget
from specviz.ui.serve.fields import request_from


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    from helpers import bpe_tokenizer
    from test_cli import _save_tiny

    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(tmp_path_factory.mktemp("reserve") / "target", tok, seed=0)


def _request(target: str, **changes):
    values = {"prompt": "the quick brown fox the quick brown fox the quick", "target_id": target,
              "drafter_kind": "ngram", "draft_model": "", "early_exit_layers": 1, "k": 3, "temperature": 0.0,
              "top_k": 0, "top_p": 1.0, "seed": 0, "chat": False, "device": "cpu", "dtype": "float32",
              "max_new_tokens": 64}
    return request_from({**values, **changes}, False)


def _stored_key(request) -> str:
    """The key the Run job stores its baseline under (runner.baseline_key of the prepared run)."""
    from types import SimpleNamespace

    target = models.load_model(request.target, device=request.device, dtype=request.dtype)
    ids, _ = encode_prompt(target, request.prompt, request.chat)
    return baseline_key(SimpleNamespace(request=request, target=target, prompt_ids=ids))


def test_a_new_prompt_with_the_same_settings_reserves_for_a_fresh_baseline(tiny_target):
    """the second run, a new prompt, reserved as if the baseline were reused, then timed
    one and stopped at the deadline."""
    first = _request(tiny_target)
    baselines = {_stored_key(first): object()}
    assert gpu_budget.baseline_timed(first, baselines) is False  # the same run: reused
    second = _request(tiny_target, prompt="a different prompt about the lazy dog")
    assert gpu_budget.baseline_timed(second, baselines) is True
    longer = _request(tiny_target, max_new_tokens=65)  # another limit: another key, as the run looks it up
    assert gpu_budget.baseline_timed(longer, baselines) is True


def test_no_stored_baseline_or_an_unloaded_target_means_one_is_timed(tiny_target):
    request = _request(tiny_target)
    assert gpu_budget.baseline_timed(request, {}) is True
    models.clear_cache()
    assert gpu_budget.baseline_timed(request, {"anything": object()}) is True


def test_a_pair_not_in_memory_reserves_its_load(tiny_target):
    request = _request(tiny_target)
    models.clear_cache()
    cold = gpu_budget.load_seconds(request)
    models.load_model(request.target, device="cpu", dtype="float32")
    assert cold >= gpu_budget.LOAD_FIXED_S and gpu_budget.load_seconds(request) == 0.0


def test_the_lossless_check_pays_its_passes_once_and_a_little_per_draw():
    """500 draws of SmolLM2-135M → 1.7B reserved 53 s when each draw was charged two forward
    passes (and used 0.4 s): the check makes its passes once and only repeats the sampling."""
    assert gpu_budget.draws_seconds(500, 24, 30, prompt=20) < 2.0
    extra = gpu_budget.draws_seconds(20_000, 24, 30, prompt=20) - gpu_budget.draws_seconds(0, 24, 30, prompt=20)
    assert extra == pytest.approx(2 * 20_000 * gpu_budget.DRAW_S)
    assert gpu_budget.draws_seconds(0, 24, 30, prompt=2000) > gpu_budget.draws_seconds(0, 24, 30, prompt=20)


def test_a_longer_prompt_reserves_more():
    short = gpu_budget.run_seconds(64, 4, 24, 24, True, prompt=10)
    long = gpu_budget.run_seconds(64, 4, 24, 24, True, prompt=2000)
    assert long > short


def test_the_layer_step_is_calibrated_from_the_environment():
    assert gpu_budget.layer_step_s({"SPECVIZ_LAYER_STEP_S": "0.00025"}) == 0.00025
    for bad in ("", "fast", "-1", "nan", "0"):
        assert gpu_budget.layer_step_s({"SPECVIZ_LAYER_STEP_S": bad}) == gpu_budget.DEFAULT_LAYER_STEP_S


def _ngram_work(ctx):
    yield ctx.past_deadline()


def test_the_deadline_counts_from_the_jobs_creation_in_the_main_process():
    """ZeroGPU's reservation runs from scheduling; a worker that took 30 s to start (CUDA init,
    tensors moved) has 30 s less before it is killed."""
    import time

    from specviz.ui.serve import gpu

    fresh = gpu.JobContext(gpu.Job(_ngram_work, duration_s=60, enforce_deadline=True, created_s=time.monotonic()))
    late = gpu.JobContext(gpu.Job(_ngram_work, duration_s=60, enforce_deadline=True,
                                  created_s=time.monotonic() - 58))
    assert not fresh.past_deadline() and late.past_deadline()
    assert gpu.make_job(_ngram_work, duration_s=20).created_s <= time.monotonic()


def test_closing_a_job_mid_step_does_not_stall_the_caller(monkeypatch):
    """gradio closes a cancelled generator on its event loop; spaces' wrapper answers a close by
    waiting for the worker's current step (here 2 s): the page's side must return at once."""
    import time

    from specviz.ui.serve import gpu

    closed = []

    def slow_to_close(job):
        try:
            yield gpu.Record("outputs", "first")
            yield gpu.Record("outputs", "second")
        finally:
            time.sleep(2.0)  # the worker's step still running
            closed.append(True)

    monkeypatch.setattr(gpu, "run_job", slow_to_close)
    job = gpu.Job(_ngram_work, duration_s=20, stop_slot=gpu.new_stop_slot())
    stream = gpu.stream_job(job)
    assert next(stream) == "first"
    t0 = time.perf_counter()
    stream.close()
    assert time.perf_counter() - t0 < 0.2
    assert gpu.stop_requested(job.stop_slot)
    deadline = time.monotonic() + 10
    while not closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert closed  # the wrapped generator was still closed, off the caller's thread
