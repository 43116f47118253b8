"""A job's deadline reaches every step that spends GPU time, not only the
stream loop: the warm-up, the timed plain baseline and an experiment's steps end at the deadline
too, so a job ends itself before the platform kills it, keeping what it made and saying why.

Time here is counted in the target's forward passes (a clock that advances one unit per pass),
so "ends by its deadline" is exact on a busy machine: at most the pass in flight runs past it."""

from __future__ import annotations

import pytest
from helpers import bpe_tokenizer
from test_cli import _save_tiny

from specviz.run.baseline import measure_baseline
from specviz.ui.serve import gpu
from specviz.ui.tabs import run_stream
from specviz.ui.serve.fields import request_from
from specviz.ui.serve.state import RunState

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(tmp_path_factory.mktemp("deadline") / "target", tok, seed=0)


def _request(target: str, **changes):
    values = {"prompt": "the quick brown fox the quick brown fox the quick", "target_id": target,
              "drafter_kind": "ngram", "draft_model": "", "early_exit_layers": 1, "k": 3, "temperature": 0.0,
              "top_k": 0, "top_p": 1.0, "seed": 0, "chat": False, "device": "cpu", "dtype": "float32",
              "max_new_tokens": 96}
    return request_from({**values, **changes}, False)


class PassClock:
    """A clock that reads the target's forward passes so far."""

    def __init__(self, request):
        from specviz.run.runner import prepare_run

        self.passes = 0
        model = prepare_run(request).target.model  # the model cache's own object: the job reuses it
        self.hook = model.register_forward_hook(self._count)

    def _count(self, *_):
        self.passes += 1

    def __call__(self) -> float:
        return float(self.passes)

    def close(self):
        self.hook.remove()


def _context(clock: PassClock, passes_left: int) -> gpu.JobContext:
    job = gpu.Job(run_stream.run_work, (), {}, 10, gpu.new_stop_slot(), None, enforce_deadline=True)
    ctx = gpu.JobContext(job, clock=clock)
    ctx.deadline = clock() + passes_left
    return ctx


def test_a_run_whose_warm_up_and_baseline_outlast_the_deadline_ends_by_it(tiny_target):
    """Three passes of budget: the old code spent them in the warm-up, then ran the rest of the
    warm-up and three timed plain samples (over 100 passes) before the stream loop looked."""
    request = _request(tiny_target)
    run_stream.SHARED_BASELINES.clear()
    clock = PassClock(request)
    try:
        ctx = _context(clock, 3)
        outputs = list(run_stream.run_work(ctx, request, {}, False))
    finally:
        clock.close()
    assert clock.passes <= ctx.deadline + 1, f"{clock.passes - ctx.deadline:.0f} passes past the deadline"
    state, summary = outputs[-1][-2], outputs[-1][1]
    assert isinstance(state, RunState) and state.finished
    assert isinstance(summary, str) and "**Stopped** at the end of the GPU time reserved" in summary, summary
    assert "warming up" in summary or "plain baseline" in summary, summary


def test_a_run_stopped_during_its_baseline_keeps_its_state_and_says_so(tiny_target):
    """A budget the warm-up fits in (it is untimed and short) but the baseline does not."""
    request = _request(tiny_target, max_new_tokens=64)
    run_stream.SHARED_BASELINES.clear()
    clock = PassClock(request)
    try:
        ctx = _context(clock, 40)
        outputs = list(run_stream.run_work(ctx, request, {}, False))
    finally:
        clock.close()
    assert clock.passes <= ctx.deadline + 1
    state, summary = outputs[-1][-2], outputs[-1][1]
    assert isinstance(state, RunState) and state.finished and state.baseline is None
    assert "**Stopped** at the end of the GPU time reserved" in summary and "plain baseline" in summary, summary


def test_the_baseline_ends_when_asked_and_returns_none():
    """measure_baseline checks ``should_end`` every round: a cut baseline is no baseline."""

    class Round:
        def __init__(self, i):
            self.emitted, self.elapsed_s = [i], 0.01 * (i + 1)

    class FakeRun:
        max_new_tokens, prefill_ms, tokens_per_s = 50, 1.0, 100.0

        def __init__(self):
            self.rounds, self.tokens = [], []

        def __iter__(self):
            for i in range(self.max_new_tokens):
                self.rounds.append(Round(i))
                self.tokens.append(i)
                yield self.rounds[-1]

    made = []

    def build():
        made.append(FakeRun())
        return made[-1]

    steps = measure_baseline(build, samples=3, should_end=lambda: sum(len(r.tokens) for r in made) >= 10)
    with pytest.raises(StopIteration) as done:
        while True:
            next(steps)
    assert done.value.value is None and len(made) == 1 and len(made[0].tokens) == 10


def test_an_experiment_ends_at_the_deadline_inside_its_warm_up(tiny_target):
    from specviz.run.sweep import sweep_requests
    from specviz.ui.tabs.sweep_steps import SweepSteps

    request = _request(tiny_target, max_new_tokens=64)
    clock = PassClock(request)
    try:
        ctx = _context(clock, 3)  # sampling at T > 0 warms up anew: the earlier tests warmed up greedy runs
        steps = SweepSteps(sweep_requests(request, "temperature", [0.5, 0.7]), lambda *a, **k: None, ctx=ctx)
        rows = [step.row for step in steps if step.row is not None]
    finally:
        clock.close()
    assert clock.passes <= ctx.deadline + 1 and rows == []
    assert steps.stopped and steps.why == "deadline" and "GPU time reserved" in steps.stopped_note()


def test_a_lossless_check_past_its_deadline_makes_no_draws_and_says_so(tiny_target):
    from specviz.ui.tabs import lossless_check

    request = _request(tiny_target, temperature=1.0)
    clock = PassClock(request)
    try:
        ctx = _context(clock, 0)
        ctx.deadline = -1.0  # loading took the whole reservation
        (figure, text), = list(lossless_check.lossless_work(ctx, request, 4000, "none", False))
    finally:
        clock.close()
    assert figure is None and "**Stopped** at the end of the GPU time reserved" in text and "no draws" in text, text


def test_a_run_whose_deadline_passes_while_it_streams_keeps_its_tokens(tiny_target):
    """Warmed up and with the visitor's baseline known, a run spends its budget in the stream:
    it stops within a pass of the deadline, its tokens on screen."""
    request = _request(tiny_target)
    clock = PassClock(request)
    try:
        free = gpu.JobContext(gpu.Job(run_stream.run_work, (), {}, 10, gpu.new_stop_slot(), None,
                                      enforce_deadline=False))
        first = list(run_stream.run_work(free, request, {}, False))[-1][-2]  # the first run's state
        assert first.baseline is not None  # its plain baseline was timed: the next run reuses it
        from specviz.run.runner import prepare_run

        # As the page keeps it (a finished run whose own timings contradict its baseline drops it
        # from the returned dict, and this tiny model's timings are noisy): the key the run looks up.
        baselines = {run_stream.baseline_key(prepare_run(request)): first.baseline}
        ctx = _context(clock, 3)
        outputs = list(run_stream.run_work(ctx, request, baselines, False))
    finally:
        clock.close()
    assert clock.passes <= ctx.deadline + 1
    state, summary = outputs[-1][-2], outputs[-1][1]
    tokens = sum(len(r.emitted) for r in state.rounds)
    assert state.finished and 0 < tokens < 96 and "end of the GPU time reserved" in summary, summary
