"""Checks that need a CUDA GPU (marked ``gpu``; tests/conftest.py skips them where torch sees none).

What a CPU cannot show: that the run's generators live on the devices that use them (PyTorch
refuses a CPU generator for CUDA tensors), that every clock reading really waits for CUDA, that
greedy equality and tree masks hold with CUDA's kernels in each dtype, and that the static
cache's one-token step replays as a CUDA graph. ``python -m scripts.gpu_check`` runs the same
checks and the presets' costs in one command; its checks are reused here.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import noisy_copy, tiny_llama

from specviz.drafters import ModelDrafter
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig

pytestmark = pytest.mark.gpu

VOCAB = 256
PROMPT = [200, 1, 2, 3, 200, 1, 2, 3, 200]
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
CUDA = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def pair():
    """The target on CUDA, and its perturbed copy (the draft) on CUDA and on the CPU."""
    target = tiny_llama(0, lm_head_scale=8.0)
    draft = noisy_copy(target, seed=5, scale=0.003)
    return target.to(CUDA), copy.deepcopy(draft).to(CUDA), draft


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("branches", [1, 3])
def test_greedy_speculative_equals_plain_greedy_on_cuda(pair, cache, branches):
    target, draft, _ = pair
    plain = Generation(target, PROMPT, None, sampling=GREEDY, max_new_tokens=32).run()
    spec = Generation(target, PROMPT, ModelDrafter(draft, VOCAB), k=4, sampling=GREEDY, max_new_tokens=32,
                      branches=branches, cache=cache).run()
    assert spec.token_ids == plain.token_ids and spec.notes == []


def test_static_cache_equals_dynamic_on_cuda_with_seeded_sampling(pair):
    target, draft, _ = pair
    runs = [Generation(target, PROMPT, ModelDrafter(draft, VOCAB), k=4, sampling=SAMPLED, max_new_tokens=32,
                       seed=11, cache=cache).run().token_ids for cache in ("dynamic", "static")]
    assert runs[0] == runs[1]


def test_a_cpu_draft_beside_a_cuda_target_samples_with_its_own_generator(pair):
    target, _, cpu_draft = pair

    def run():
        gen = Generation(target, PROMPT, ModelDrafter(cpu_draft, VOCAB), k=4, sampling=SAMPLED, max_new_tokens=24,
                         seed=7)
        return gen.run()

    first, second = run(), run()
    assert first._generator.device.type == "cuda" and first._draft_generator.device.type == "cpu"
    assert first._generators.devices == [CUDA, torch.device("cpu")]
    assert first.token_ids == second.token_ids


def test_every_clock_reading_waits_for_cuda(pair, monkeypatch):
    target, draft, _ = pair
    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    gen = Generation(target, PROMPT, ModelDrafter(draft, VOCAB), k=4, sampling=SAMPLED, max_new_tokens=16,
                     seed=3).run()
    assert len(calls) == gen._clock.marks == 2 + 6 * len(gen.rounds)
    assert gen.prefill_ms > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_greedy_equality_and_tree_masks_hold_in_each_dtype(dtype):
    from scripts.gpu_check import greedy_check, tree_check

    for check in (greedy_check(CUDA, dtype, 32), tree_check(CUDA, dtype)):
        assert check.status == "PASS", check.line()


def test_the_static_draft_step_replays_as_a_cuda_graph():
    from scripts.gpu_check import graph_check

    check = graph_check(CUDA)
    assert check.status == "PASS", check.line()
