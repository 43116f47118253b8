"""The round trip specviz run → engine format → import keeps every figure the format carries, for a
chain and a tree run, greedy and T = 1, on the suite's tiny config-built models (2-layer random Llama
target, a noisy copy of it as the draft; 24 tokens a run, a second or two on the CPU in all).

The figures compared are specviz's own, computed from the saved trace by :mod:`specviz.figures.analysis` and
:mod:`specviz.diagnose.diagnostics`: acceptance rate (÷ drafted), per-token α (÷ tested; chains only: a tree's
drafted count is its nodes), accepted drafts per pass, zero-accept share, the accepted-length
histogram, full and conditional acceptance by position, and, where the format carries tokens, each
token's text and whether it was an accepted draft. llama.cpp's log prints rates to 3 decimals and the
mean length to 2, so its figures agree to that precision."""

from __future__ import annotations

import json

import pytest
from helpers import noisy_copy

from specviz.figures.analysis import analyse
from specviz.diagnose.diagnostics import acceptance_by_position, accepted_length_histogram, zero_accept_share
from specviz.drafters import ModelDrafter
from specviz.core.engine import Generation
from specviz.engine_logs import normalise as nz
from specviz.engine_logs import read_engine_file
from specviz.engine_logs.writers import write
from specviz.core.sampling import SamplingConfig
from specviz.figures.trace import load_trace_file, trace_to_dict

pytestmark = pytest.mark.usefixtures("one_torch_thread")

K = 4
PROMPT = [5, 6, 7, 8, 5, 6, 9, 10, 5, 6, 11, 12]
RUNS = {"chain greedy": (1, 0.0), "chain T=1": (1, 1.0), "tree greedy": (2, 0.0), "tree T=1": (2, 1.0)}
ENGINES = ("vllm", "sglang", "llamacpp", "mlx")


def _decode(ids: list[int]) -> str:
    return "".join(chr(0x61 + i % 26) for i in ids)


@pytest.fixture(scope="module")
def traces(target) -> dict:
    """The four runs as saved traces, read back as a front-end would (rounds, metadata)."""
    draft = noisy_copy(target, seed=5, scale=0.008)
    out = {}
    for name, (branches, temperature) in RUNS.items():
        gen = Generation(target, PROMPT, ModelDrafter(draft, 256), k=K, sampling=SamplingConfig(temperature=temperature),
                         max_new_tokens=24, seed=3, branches=branches, decode=_decode)
        gen.run()
        data = trace_to_dict(gen.rounds, settings={"k": K, "temperature": temperature, "branches": branches}, k=K,
                             finish_reason=gen.finish_reason)
        out[name] = load_trace_file(json.dumps(data).encode())
    return out


def _figure(run, name: str) -> float | None:
    return next((f.value for f in run.figures if f.name == name), None)


def _expected(rounds, every_round_a_pass: bool) -> dict:
    """specviz's own figures of the rounds. Engines count the passes that drafted; mlx-lm's stream
    cannot tell a pass that drafted nothing (its token is the target's, as after a rejection), so for
    it every round is a pass that kept no draft."""
    a = analyse(rounds, K, wall_s=1.0)
    passes = rounds if every_round_a_pass else [r for r in rounds if r.drafted]
    kept = [r.n_accepted for r in passes]
    width = max([K, *kept])
    return {nz.ACCEPTANCE_RATE: a.acceptance_rate, nz.ALPHA: a.alpha, nz.ACCEPTED_PER_PASS: sum(kept) / len(kept),
            nz.ZERO_ACCEPT: kept.count(0) / len(kept) if every_round_a_pass else zero_accept_share(rounds),
            "full": [sum(1 for n in kept if n > i) / len(kept) for i in range(width)],
            "positions": acceptance_by_position(rounds, K),
            "histogram": [kept.count(j) for j in range(width + 1)] if every_round_a_pass
            else accepted_length_histogram(rounds, K)}


def _trim(hist) -> list[int]:
    hist = list(hist)
    while len(hist) > 1 and hist[-1] == 0:
        hist.pop()
    return hist


def _tolerance(engine: str) -> float:
    return 1.01e-3 if engine == "llamacpp" else 1e-9  # the log prints rates to 3 decimals


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("run_name", list(RUNS))
def test_round_trip_keeps_every_figure_the_format_carries(traces, run_name, engine):
    rounds, meta = traces[run_name]
    tree = RUNS[run_name][0] > 1
    imported = read_engine_file(write(engine, rounds, meta), f"run.{engine}")
    want, tol = _expected(rounds, every_round_a_pass=engine == "mlx"), _tolerance(engine)
    assert imported.engine == engine
    for name in (nz.ACCEPTANCE_RATE, nz.ACCEPTED_PER_PASS):
        if engine == "mlx" and name == nz.ACCEPTANCE_RATE:
            continue  # the stream does not say how many tokens each pass drafted
        assert _figure(imported, name) == pytest.approx(want[name], abs=tol), name
    if engine != "llamacpp":  # the log line has no histogram and no zero-accept count
        assert _figure(imported, nz.ZERO_ACCEPT) == pytest.approx(want[nz.ZERO_ACCEPT], abs=tol)
        assert _trim(imported.accepted_histogram) == _trim(want["histogram"])
    for i, full in enumerate(want["full"], start=1):
        if full:
            assert _figure(imported, nz.FULL_AT.format(i=i)) == pytest.approx(full, abs=tol)
    if engine == "vllm":  # per-step drafted counts: α ÷ tested for chains, nothing guessed for trees
        assert _figure(imported, nz.ALPHA) == (None if tree else pytest.approx(want[nz.ALPHA]))
    elif engine in ("sglang", "llamacpp") and not all(len(r.drafted) == K for r in rounds if r.drafted):
        assert _figure(imported, nz.ALPHA) is None  # drafts shorter than K near the end: not guessed
    if engine in ("vllm", "mlx"):
        emitted = [t for r in rounds for t in r.emitted]
        assert imported.tokens == tuple(t.text for t in emitted)
        assert imported.token_kinds == tuple("draft" if t.kind == "accepted" else "target" for t in emitted)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("run_name", [name for name, (branches, _) in RUNS.items() if branches == 1])
def test_round_trip_of_k_long_chain_passes_keeps_alpha_and_conditional_acceptance(traces, run_name, engine):
    """Every format gives α ÷ tested and conditional acceptance when every pass drafted K: the run's
    passes up to the first shorter one (a prefix of a run is a run)."""
    rounds, meta = traces[run_name]
    full_k = []
    for r in rounds:
        if len(r.drafted) != K:
            break
        full_k.append(r)
    imported = read_engine_file(write(engine, full_k, meta), f"run.{engine}")
    want, tol = _expected(full_k, every_round_a_pass=False), _tolerance(engine)
    assert _figure(imported, nz.ALPHA) == pytest.approx(want[nz.ALPHA], abs=tol)
    for p in want["positions"]:
        if p.tested:
            assert _figure(imported, nz.CONDITIONAL_AT.format(i=p.position)) == pytest.approx(p.conditional, abs=tol)


def test_round_trip_runs_hold_rejections_and_full_acceptances(traces):
    """The runs exercise both ends of the accept walk, so the comparisons above are not vacuous."""
    for rounds, _ in traces.values():
        assert any(r.n_accepted < len(r.drafted) for r in rounds)
        assert any(r.n_accepted >= 2 for r in rounds)
    assert any(not r.drafted for rounds, _ in traces.values() for r in rounds)  # a pass that drafted nothing
