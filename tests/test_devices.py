"""A run's devices: one synchronised clock for every phase boundary (specviz/core/phaseclock.py) and
one random generator per device (specviz/core/generators.py).

On a CPU a device synchronisation is a no-op, so these tests replace it with a counting hook and
the clock with a fake one: what they check is that every boundary of a run goes through the one
clock, in the right place (the prefill is closed by a synchronised reading before anything is
drafted), and that each figure comes from those readings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from helpers import noisy_copy

from specviz.core import phaseclock
from specviz.drafters import ModelDrafter
from specviz.core.drafttree import DraftTree
from specviz.core.engine import Generation
from specviz.core.generators import GeneratorPool
from specviz.core.phaseclock import PhaseClock
from specviz.core.sampling import SamplingConfig, sample

VOCAB = 256
PROMPT = [200, 1, 2, 3, 200, 1, 2, 3, 200]
SAMPLED = SamplingConfig(temperature=1.0)
ENGINE = Path(__file__).resolve().parents[1] / "specviz" / "core" / "engine.py"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------- the clock
def test_the_engine_reads_time_only_through_the_phase_clock():
    tree = ast.parse(ENGINE.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"time", "perf_counter", "monotonic", "process_time", "datetime"}, imported
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "time" not in names and "perf_counter" not in names
    assert "PhaseClock" in names


class _Events:
    """What happened, in order: each device synchronisation, target pass and draft."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def sync(self, device: torch.device) -> None:
        assert device.type == "cpu"
        self.log.append("sync")


class _Ticks:
    """A fake ``perf_counter``: 0, 1, 2, … seconds, one second per reading."""

    def __init__(self) -> None:
        self.now = -1.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_every_phase_boundary_is_a_synchronised_reading(target, monkeypatch):
    """The prefill is opened and closed by synchronised readings (so ``prefill_ms`` is its work's
    time, not its launch time); each round has exactly four (start, draft end, verify end, other
    end) and the consumer's pause two; the devices (target and drafter, both the CPU here) are
    synchronised once per reading; and every figure is a difference of those readings."""
    events, ticks = _Events(), _Ticks()
    monkeypatch.setattr(phaseclock, "synchronize", events.sync)
    monkeypatch.setattr(phaseclock, "perf_counter", ticks)
    drafter = ModelDrafter(noisy_copy(target, seed=5, scale=0.003), VOCAB)
    propose = drafter.propose
    monkeypatch.setattr(drafter, "propose", lambda *a, **kw: events.log.append("draft") or propose(*a, **kw))
    handle = target.register_forward_pre_hook(lambda *_: events.log.append("target"))
    try:
        gen = Generation(target, PROMPT, drafter, k=4, sampling=SAMPLED, max_new_tokens=16, seed=3)
        rounds = list(gen)
    finally:
        handle.remove()
    assert events.log[:3] == ["sync", "target", "sync"]  # the prefill, closed before any draft
    assert gen.prefill_ms == 1000.0
    # Each round: start, [the draft], draft end, [the verify pass], verify end, other end, pause, resume.
    found = re.findall(r"sync (draft )?sync (target )?sync sync sync sync", " ".join(events.log[3:]))
    assert " ".join(events.log[3:]).count("sync") == 6 * len(rounds) == gen._clock.marks - 2
    assert len(found) == len(rounds)
    for round_, (draft, verify) in zip(rounds, found):
        assert bool(draft) == (round_.k > 0)
        assert bool(verify) == bool(round_.drafted or not round_.root_from_prefill)
    for i, round_ in enumerate(rounds, 1):
        assert (round_.draft_ms, round_.verify_ms, round_.other_ms) == (1000.0, 1000.0, 1000.0)
        assert round_.elapsed_s == 5.0 * i  # pauses left out: one tick each
    assert gen.wall_s == rounds[-1].elapsed_s


def test_the_clock_synchronises_each_device_once_per_reading(monkeypatch):
    seen = []
    monkeypatch.setattr(phaseclock, "synchronize", seen.append)
    clock = PhaseClock(["cpu", torch.device("cpu"), "meta"])
    clock.start()
    clock.mark()
    assert seen == [torch.device("cpu"), torch.device("meta")] * 2 and clock.marks == 2
    with pytest.raises(RuntimeError, match="not started"):
        PhaseClock().elapsed_s()


def test_synchronize_is_a_no_op_on_the_cpu():
    phaseclock.synchronize(torch.device("cpu"))  # returns at once, touches no accelerator


# --------------------------------------------------------------------------- generators
def test_the_pool_keeps_one_seeded_generator_per_device():
    pool = GeneratorPool(11)
    cpu = pool.get("cpu")
    assert pool.get(torch.device("cpu")) is cpu and pool.devices == [torch.device("cpu")]
    reference = torch.Generator(device="cpu").manual_seed(11)
    assert torch.equal(torch.rand(5, generator=cpu), torch.rand(5, generator=reference))
    assert torch.equal(torch.rand(5, generator=GeneratorPool(11).get("cpu")),
                       torch.rand(5, generator=torch.Generator().manual_seed(11)))


class _ElsewhereDrafter:
    """A drafter that says it lives on another device (the way an int8 CPU draft sits beside a
    CUDA target); it samples one uniform token with the generator it is handed."""

    name, uses_model = "elsewhere", False

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.generators: list[torch.Generator] = []

    def prefill(self, context):
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None):
        self.generators.append(generator)
        p_draft = torch.full((VOCAB,), 1.0 / VOCAB)
        return DraftTree.chain([int(sample(p_draft, generator))], p_draft.view(1, -1))

    def rollback(self, valid, path=None):
        pass

    def finish(self, prompt, output):
        pass


def test_a_drafter_on_another_device_draws_from_that_devices_generator(target, monkeypatch):
    """The engine asks the pool for the drafter's device: a drafter elsewhere gets a generator of
    its own (here made on the CPU for the pretend device, since this machine has one device) and
    the verify walk keeps the target's; a drafter on the target's device shares the target's, so
    a run draws what one generator drew before."""
    made = []

    def make(pool, device):
        made.append(device)
        return torch.Generator().manual_seed(pool.seed)

    monkeypatch.setattr(GeneratorPool, "make", make)
    drafter = _ElsewhereDrafter("meta")
    gen = Generation(target, PROMPT, drafter, k=1, sampling=SAMPLED, max_new_tokens=6, seed=3).run()
    assert made == [torch.device("cpu"), torch.device("meta")]
    assert {id(g) for g in drafter.generators} == {id(gen._draft_generator)}
    assert gen._draft_generator is not gen._generator

    made.clear()
    here = _ElsewhereDrafter("cpu")
    gen = Generation(target, PROMPT, here, k=1, sampling=SAMPLED, max_new_tokens=6, seed=3).run()
    assert made == [torch.device("cpu")] and all(g is gen._generator for g in here.generators)
