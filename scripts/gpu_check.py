"""The device checks in one command: ``python -m scripts.gpu_check`` on a CUDA machine.

    python -m scripts.gpu_check             # on one GPU, at most a few minutes
    python -m scripts.gpu_check --dry-run   # the same checks on the CPU at tiny shapes, under a minute
    python -m scripts.gpu_check --json FILE # also write every line's figures as JSON

It prints the versions found, then one line per check: ``PASS``, ``FAIL`` or ``SKIP`` (a check that
needs CUDA, on the CPU), its name, what was observed and what was expected; the exit status is 1
when any check failed. Models have random weights built from the presets' configs (below, the
architecture fields of each model's ``config.json`` on the hub): no real weights fit what a device
run can carry, and a device machine has no network. Random weights make near-uniform
distributions, so acceptance is meaningless here; per-pass costs (c, v) are not.

The checks:

* **greedy equality** (float32, bfloat16, float16; chain and tree; dynamic and static cache): a
  tiny random Llama and a perturbed copy as its draft; greedy speculative tokens equal plain
  greedy tokens. In float32 exactly; in half precision too, unless the first difference follows a
  near-tie of the plain run (top-2 logit gap within 4 ulps of the largest logit), where a batched
  verify pass may legitimately pick the other token.
* **tree-mask agreement** (each dtype; dynamic and static): the logits of one tree pass
  (:func:`specviz.core.engine.tree_attention_inputs`) equal each node's own causal chain pass, to 8 ulps
  of the largest logit (float32: 1e-5 relative).
* **generators per device**: a CUDA target with a draft model on the CPU samples (each with its
  own device's generator) and a rerun with the same seed writes the same tokens.
* **phase boundaries synchronised**: every reading of the run's clock synchronises CUDA (counted
  by wrapping ``torch.cuda.synchronize``): 2 + 6 per round.
* **c and v at the presets' shapes** (bfloat16; eager and static cache): SmolLM2-135M →
  SmolLM2-1.7B, Qwen2.5-0.5B → Qwen2.5-7B, Qwen2.5-Coder-0.5B → 1.5B and SmolLM2-135M's EAGLE head, each with its plain
  baseline; c and v finite and positive, beside the layer ratio a launch-bound GPU predicts; the
  run's ``prefill_ms`` against a separately synchronised prefill; host syncs per round (PyTorch's
  sync debug mode warns at each implicit one: ``.tolist()``, ``.item()``, pageable copies; the
  clock's own ``torch.cuda.synchronize`` is not among them); the peak memory.
* **static draft step as a CUDA graph**: SmolLM2-135M's one-token static step is captured once
  (``torch.cuda.CUDAGraph``) and replayed; its logits equal the eager steps', and the replay's step
  time is printed beside the eager one.

* **the app's own path** (:mod:`scripts.gpu_check_app`): a checkpoint at SmolLM2-135M's shape
  loaded onto the device by the routine the Space places its models with; the per-layer step time
  to set as ``SPECVIZ_LAYER_STEP_S`` (what the reservations use); a public-mode Run through the
  page's job function, with the reservation it would request beside the time it took (with
  ``--app-job``, where gradio is installed; else SKIP).

It imports torch, transformers and specviz's engine only: no gradio, plotly or gguf (the GPU
image has none of them; tests/test_gpu_check.py runs the dry run with those imports refused; the
page's job is checked only with ``--app-job``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

from specviz.core import phaseclock
from specviz.drafters import ModelDrafter
from specviz.drafters.eagle import EagleDrafter, EagleHead
from specviz.core.engine import Generation, tree_attention_inputs
from specviz.core.kvcache import PaddedStaticCache, run_pass
from specviz.core.sampling import SamplingConfig
from specviz.figures.speedup import PlainBaseline
from specviz.figures.analysis import analyse_generation
from scripts.gpu_check_app import app_checks

#: The presets' models (specviz/ui/serve/settings.py PRESETS): the architecture fields of their
#: config.json files on the Hugging Face hub.
PRESET_CONFIGS = {
    "SmolLM2-135M-Instruct": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                              "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                              "vocab_size": 49152, "tie_word_embeddings": True, "max_position_embeddings": 8192},
    "SmolLM2-1.7B-Instruct": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
                              "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 32,
                              "vocab_size": 49152, "tie_word_embeddings": True, "max_position_embeddings": 8192},
    "Qwen2.5-0.5B-Instruct": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                              "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                              "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 32768},
    "Qwen2.5-7B-Instruct": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                            "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                            "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 32768},
    "Qwen2.5-Coder-0.5B-Instruct": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                                    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                                    "vocab_size": 151936, "tie_word_embeddings": True,
                                    "max_position_embeddings": 32768},
    "Qwen2.5-Coder-1.5B-Instruct": {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
                                    "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                                    "vocab_size": 151936, "tie_word_embeddings": True,
                                    "max_position_embeddings": 32768},
}
#: (draft, target) of the GPU presets, and the offline target with its learned head.
PAIRS = [("SmolLM2-135M-Instruct", "SmolLM2-1.7B-Instruct"), ("Qwen2.5-0.5B-Instruct", "Qwen2.5-7B-Instruct"),
         ("Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct"), ("EAGLE head", "SmolLM2-135M-Instruct")]
#: The dry run's widths: the presets' layer counts (what launch-bound costs follow), tiny matrices.
TINY_WIDTHS = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
               "vocab_size": 256}
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
K = 4


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: str  # PASS, FAIL or SKIP
    observed: str
    expected: str
    figures: dict | None = None

    def line(self) -> str:
        return f"{self.status:4} {self.name}: {self.observed} (expected: {self.expected})"


def _failed(name: str, expected: str, exc: BaseException) -> Check:
    return Check(name, "FAIL", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", expected)


def _checked(name: str, expected: str, run) -> Check:
    """``run()`` → ``(passed or None for SKIP, observed, figures)``, any exception a FAIL."""
    try:
        passed, observed, figures = run()
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        return _failed(name, expected, exc)
    return Check(name, "SKIP" if passed is None else "PASS" if passed else "FAIL", observed, expected, figures)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _sync(device: torch.device) -> None:
    phaseclock.synchronize(device)


# --------------------------------------------------------------------------- models
def random_model(fields: dict, dtype: torch.dtype, device: torch.device, seed: int):
    """A causal LM with seeded random weights (transformers' own initialisation) from config
    fields, built directly on ``device`` in ``dtype``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(fields)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def tiny_pair(device: torch.device, dtype: torch.dtype):
    """The greedy checks' models: a 2-layer Llama (hidden 64, vocab 256, lm_head ×8 so that argmaxes
    are rarely near-ties) and a copy with noise of std 0.003 as its draft (the test suite's)."""
    fields = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
              "tie_word_embeddings": False}
    target = random_model(fields, torch.float32, torch.device("cpu"), 0)
    draft = random_model(fields, torch.float32, torch.device("cpu"), 0)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)
        for parameter, source in zip(draft.parameters(), target.parameters()):
            parameter.copy_(source + torch.randn(source.shape, generator=generator) * 0.003)
    return target.to(device=device, dtype=dtype), draft.to(device=device, dtype=dtype)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- correctness
PROMPT = [200, 1, 2, 3, 200, 1, 2, 3, 200, 9, 8]


def _near_tie(model, ids: list[int]) -> tuple[float, float]:
    """The top-2 logit gap after ``ids`` (an uncached pass) and 4 ulps of the largest logit."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1]), 4 * torch.finfo(model.dtype).eps * float(logits.abs().max())


def greedy_check(device: torch.device, dtype: torch.dtype, tokens: int) -> Check:
    def run():
        target, draft = tiny_pair(device, dtype)
        plain = Generation(target, PROMPT, None, sampling=GREEDY, max_new_tokens=tokens).run().token_ids
        observed, ok = [], True
        for cache in ("dynamic", "static"):
            for branches in (1, 3):
                spec = Generation(target, PROMPT, ModelDrafter(draft, 256), k=K, sampling=GREEDY, max_new_tokens=tokens,
                                  branches=branches, cache=cache).run().token_ids
                where = next((i for i, (a, b) in enumerate(zip(spec, plain)) if a != b), None)
                label = f"{cache} {'tree' if branches > 1 else 'chain'}"
                if where is None and len(spec) == len(plain):
                    observed.append(f"{label} equal")
                    continue
                gap, ulps = _near_tie(target, PROMPT + plain[:where])
                tie = dtype != torch.float32 and gap <= ulps
                ok &= tie
                observed.append(f"{label} differs at token {where} (top-2 gap {gap:.3g}, 4 ulps {ulps:.3g})")
        _free(device)
        return ok, "; ".join(observed), None

    expected = ("identical tokens" if dtype == torch.float32 else
                "identical tokens, or a first difference at a near-tie of the plain run")
    return _checked(f"greedy equality, {_dtype_name(dtype)}", expected, run)


def tree_check(device: torch.device, dtype: torch.dtype) -> Check:
    from transformers import DynamicCache

    def run():
        target, _ = tiny_pair(device, dtype)
        context, tokens, parents = [3, 17, 42, 99, 5, 6], [10, 11, 12, 13, 14, 15], [-1, 0, 0, -1, 3, 1]
        cached, pending = context[:4], context[4:]
        chains = []
        with torch.inference_mode():
            for i in range(len(tokens)):
                path, node = [], i
                while node >= 0:
                    path.insert(0, tokens[node])
                    node = parents[node]
                ids = torch.tensor([context + path], device=device)
                chains.append(target(input_ids=ids).logits[0, -1].float())
        chains = torch.stack(chains)
        scale = float(chains.abs().max())
        tol = (1e-5 if dtype == torch.float32 else 8 * torch.finfo(dtype).eps) * scale
        worst = {}
        for name, cache in (("dynamic", DynamicCache()), ("static", PaddedStaticCache.create(target, 32, 8))):
            with torch.inference_mode():
                run_pass(target, cache, torch.tensor(cached, device=device), 1)
                mask = tree_attention_inputs(parents, len(cached), len(pending), dtype, device)
                logits = run_pass(target, cache, torch.tensor(pending + tokens, device=device), len(tokens), mask)
            worst[name] = float((logits.float() - chains).abs().max())
        _free(device)
        observed = ", ".join(f"{name} max |diff| {value:.3g}" for name, value in worst.items())
        return max(worst.values()) <= tol, f"{observed} (tolerance {tol:.3g})", worst

    expected = ("each node's logits equal its chain pass within " +
                ("1e-5 of the largest logit" if dtype == torch.float32 else "8 ulps of the largest logit"))
    return _checked(f"tree-mask agreement, {_dtype_name(dtype)}", expected, run)


def generator_check(device: torch.device) -> Check:
    def run():
        target, draft = tiny_pair(device, torch.float32)
        draft = draft.to("cpu")

        def once():
            gen = Generation(target, PROMPT, ModelDrafter(draft, 256), k=K, sampling=SAMPLED, max_new_tokens=24, seed=7)
            gen.run()
            return gen.token_ids, [str(d) for d in gen._generators.devices]

        (first, devices), (second, _) = once(), once()
        expected_devices = [str(next(target.parameters()).device)] + (["cpu"] if device.type != "cpu" else [])
        ok = first == second and devices == expected_devices
        return ok, f"generators on {devices}, rerun {'identical' if first == second else 'DIFFERENT'}", None

    return _checked("generators per device", "a generator per device (target's, then the CPU draft's); "
                    "the same tokens on a rerun with the same seed", run)


def sync_check(device: torch.device) -> Check:
    def run():
        target, draft = tiny_pair(device, torch.float32)
        calls = []
        real = torch.cuda.synchronize
        torch.cuda.synchronize = lambda *a, **kw: calls.append(1) or real(*a, **kw)
        try:
            gen = Generation(target, PROMPT, ModelDrafter(draft, 256), k=K, sampling=SAMPLED, max_new_tokens=24, seed=3)
            gen.run()
        finally:
            torch.cuda.synchronize = real
        marks, rounds = gen._clock.marks, len(gen.rounds)
        wanted = marks if device.type == "cuda" else 0
        ok = marks == 2 + 6 * rounds and len(calls) == wanted
        return ok, f"{marks} clock readings over {rounds} rounds, {len(calls)} torch.cuda.synchronize calls", None

    return _checked("phase boundaries synchronised",
                    "2 + 6 per round clock readings, each one torch.cuda.synchronize on CUDA (none on the CPU)", run)


# --------------------------------------------------------------------------- costs at the presets' shapes
@contextmanager
def implicit_syncs(device: torch.device):
    """Count the implicit host syncs inside the block: PyTorch's sync debug mode warns at each
    synchronising CUDA operation (``.item()``, ``.tolist()``, pageable copies); an explicit
    ``torch.cuda.synchronize`` does not warn. Yields a list whose length is the count (None on
    the CPU, where nothing is asynchronous)."""
    if device.type != "cuda":
        yield None
        return
    found: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode("default")
    found.extend(w for w in caught if "synchroniz" in str(w.message))


def _pair_models(pair, device, dtype, dry_run):
    draft_name, target_name = pair
    fields = lambda name: {**PRESET_CONFIGS[name], **(TINY_WIDTHS if dry_run else {})}
    target = random_model(fields(target_name), dtype, device, 0)
    if draft_name == "EAGLE head":
        head = EagleHead(target).to(dtype=dtype).eval()
        vocab = target.config.vocab_size
        return target, lambda: EagleDrafter(head, vocab), vocab, 1
    draft = random_model(fields(draft_name), dtype, device, 1)
    vocab = min(target.config.vocab_size, draft.config.vocab_size)
    return target, lambda: ModelDrafter(draft, vocab), vocab, draft.config.num_hidden_layers


def _synced_prefill_ms(target, prompt: list[int], device) -> float:
    from transformers import DynamicCache

    from specviz.core.kvcache import cache_argument

    times = []
    ids = torch.tensor([prompt], device=device)
    with torch.inference_mode():
        for _ in range(3):
            cache = DynamicCache()
            _sync(device)
            t0 = time.perf_counter()
            target(input_ids=ids, **cache_argument(target, cache), use_cache=True, logits_to_keep=1)
            _sync(device)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _costs(target, make_drafter, vocab, prompt, tokens, cache, device):
    """One warmed-up plain baseline and one speculative run: their analysis and implicit syncs."""
    for drafter in (None, make_drafter()):  # first calls allocate and pick kernels: untimed
        Generation(target, prompt, drafter, k=K, sampling=GREEDY, max_new_tokens=min(tokens, 8), vocab_size=vocab,
                   cache=cache).run()
    plain = Generation(target, prompt, None, sampling=GREEDY, max_new_tokens=tokens, vocab_size=vocab, cache=cache).run()
    baseline = PlainBaseline.from_rounds(plain.rounds, plain.tokens_per_s)
    with implicit_syncs(device) as syncs:
        spec = Generation(target, prompt, make_drafter(), k=K, sampling=GREEDY, max_new_tokens=tokens, vocab_size=vocab,
                          cache=cache).run()
    return spec, analyse_generation(spec, baseline), syncs


def pair_checks(pair, device: torch.device, dry_run: bool) -> list[Check]:
    """c and v (eager and static), the prefill's timing, host syncs per round and peak memory of
    one preset pair."""
    dtype = torch.float32 if dry_run else torch.bfloat16
    name = f"{pair[0]} → {pair[1]}"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        target, make_drafter, vocab, draft_layers = _pair_models(pair, device, dtype, dry_run)
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: report it, go on with the next pair
        return [_failed(f"c and v, {name}", "the models built", exc)]
    layer_ratio = draft_layers / target.config.num_hidden_layers
    prompt = torch.randint(0, vocab, (16 if dry_run else 128,), generator=torch.Generator().manual_seed(0)).tolist()
    tokens = 6 if dry_run else 48
    checks, runs = [], {}
    for cache in ("dynamic", "static"):
        def costs(cache=cache):
            spec, analysis, syncs = _costs(target, make_drafter, vocab, prompt, tokens, cache, device)
            runs[cache] = (spec, syncs)
            c, v = analysis.cost_ratio_c, analysis.verify_cost_v
            figures = {"c": c, "v": v, "layer_ratio": layer_ratio, "plain_step_ms": analysis.plain_step_ms,
                       "draft_step_ms": analysis.draft_step_ms, "verify_ms": analysis.verify_ms,
                       "tokens_per_s": spec.tokens_per_s, "notes": spec.notes}
            ok = all(x is not None and math.isfinite(x) and x > 0 for x in (c, v))
            return ok, (f"c {c:.3f}, v {v:.3f} (layer ratio {layer_ratio:.3f}); plain step "
                        f"{analysis.plain_step_ms:.2f} ms, draft step {analysis.draft_step_ms:.2f} ms, verify pass "
                        f"{analysis.verify_ms:.2f} ms" + (f"; {' '.join(spec.notes)}" if spec.notes else "")), figures

        checks.append(_checked(f"c and v, {name}, {cache} cache, {_dtype_name(dtype)}",
                               "finite and > 0; launch-bound, c ≈ the layer ratio", costs))
    return checks + _run_checks(name, target, prompt, runs, device)


def _run_checks(name, target, prompt, runs, device) -> list[Check]:
    def prefill():
        spec = runs["dynamic"][0]
        synced = _synced_prefill_ms(target, prompt, device)
        observed = f"run's prefill_ms {spec.prefill_ms:.2f}, synchronised prefill {synced:.2f} ms"
        figures = {"prefill_ms": spec.prefill_ms, "synced_prefill_ms": synced}
        if device.type != "cuda":  # the CPU's work is done when the call returns: nothing to check, only noise
            return None, f"n/a on the CPU ({observed})", figures
        return spec.prefill_ms >= 0.5 * synced, observed, figures

    def syncs():
        if device.type != "cuda":
            return None, "n/a (the CPU runs synchronously)", None
        per_round = {cache: len(found) / len(spec.rounds) for cache, (spec, found) in runs.items()}
        text = ", ".join(f"{cache} {value:.1f}" for cache, value in per_round.items())
        return all(v >= 1 for v in per_round.values()), f"implicit syncs per round: {text} (+4 clock readings)", per_round

    def memory():
        if device.type != "cuda":
            return None, "n/a (CPU)", None
        peak, total = torch.cuda.max_memory_allocated(device), torch.cuda.get_device_properties(device).total_memory
        return peak < total, f"peak {peak / 2**30:.2f} GiB of {total / 2**30:.1f} GiB", {"peak_bytes": peak}

    return [_checked(f"prefill timed when done, {name}", "prefill_ms >= half a synchronised prefill", prefill),
            _checked(f"host syncs per round, {name}", ">= 1 (the accept walk reads its tokens), counted", syncs),
            _checked(f"peak memory, {name}", "below the device's memory", memory)]


# --------------------------------------------------------------------------- CUDA graph replay
def graph_check(device: torch.device, steps: int = 16) -> Check:
    """Capture SmolLM2-135M's one-token static draft step as a CUDA graph and replay it."""
    def run():
        if device.type != "cuda":
            return None, "n/a (needs CUDA)", None
        model = random_model(PRESET_CONFIGS["SmolLM2-135M-Instruct"], torch.bfloat16, device, 1)
        cache = PaddedStaticCache.create(model, 128 + steps + 4, 1)
        prompt = torch.randint(0, 49152, (128,), generator=torch.Generator().manual_seed(0)).to(device)
        tokens = torch.randint(0, 49152, (steps,), generator=torch.Generator().manual_seed(1)).to(device)
        with torch.inference_mode():
            run_pass(model, cache, prompt, 1)
            eager, eager_ms = _eager_steps(model, cache, tokens)
            cache.crop(len(prompt))
            replayed, replay_ms = _replayed_steps(model, cache, tokens)
        worst = float((eager.float() - replayed.float()).abs().max())
        tol = 8 * torch.finfo(torch.bfloat16).eps * float(eager.float().abs().max())
        del model, cache
        _free(device)
        figures = {"eager_step_ms": eager_ms, "replay_step_ms": replay_ms, "max_diff": worst}
        return worst <= tol, (f"replay step {replay_ms:.3f} ms vs eager {eager_ms:.3f} ms "
                              f"({eager_ms / replay_ms:.1f}× faster); max |logit diff| {worst:.3g}"), figures

    return _checked("static draft step as a CUDA graph, SmolLM2-135M, bfloat16",
                    "captured and replayed; logits equal the eager steps' within 8 ulps", run)


def _eager_steps(model, cache, tokens):
    rows, times = [], []
    for token in tokens:
        _sync(tokens.device)
        t0 = time.perf_counter()
        rows.append(run_pass(model, cache, token.view(1), 1)[0])
        _sync(tokens.device)
        times.append((time.perf_counter() - t0) * 1e3)
    return torch.stack(rows), statistics.median(times[2:])


def _replayed_steps(model, cache, tokens):
    """The same steps by one captured graph: the inputs are copied into its buffers each step."""
    from specviz.core.kvcache import _static_inputs, cache_argument

    start = cache.length
    buffers, _ = _static_inputs(cache, tokens[:1], model.dtype, None)
    buffers = {k: v.clone() for k, v in buffers.items()}

    def step():
        return model(**buffers, **cache_argument(model, cache), use_cache=True, logits_to_keep=1).logits

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the capture, as torch.cuda.graphs asks
            step()
    torch.cuda.current_stream().wait_stream(stream)
    cache.crop(start)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    cache.crop(start)  # the capture ran nothing: the layers' lengths are where they were
    rows, times = [], []
    for token in tokens:
        inputs, _ = _static_inputs(cache, token.view(1), model.dtype, None)
        for key, value in inputs.items():
            buffers[key].copy_(value)
        _sync(tokens.device)
        t0 = time.perf_counter()
        graph.replay()
        _sync(tokens.device)
        times.append((time.perf_counter() - t0) * 1e3)
        cache.length += 1  # the graph advanced the layers' device lengths itself
        rows.append(out[0, -1].clone())
    return torch.stack(rows), statistics.median(times[2:])


# --------------------------------------------------------------------------- the report
def versions(device: torch.device) -> str:
    import transformers

    cuda = torch.version.cuda or "none"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "CPU"
    return (f"versions: python {platform.python_version()}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, CUDA {cuda} (available: {torch.cuda.is_available()}), device {name}")


def all_checks(device: torch.device, dry_run: bool, app_job: bool = False):
    """Every check, in order, made one at a time (a generator, so each line prints when done);
    ``app_job``: also run a Run through the page's job function (needs gradio)."""
    for dtype in DTYPES:
        yield greedy_check(device, dtype, 16 if dry_run else 48)
        yield tree_check(device, dtype)
    yield generator_check(device)
    yield sync_check(device)
    for pair in PAIRS:
        yield from pair_checks(pair, device, dry_run)
        _free(device)  # the pair's models died with pair_checks' frame
    yield graph_check(device)
    yield from app_checks(device, dry_run, _checked, with_page=app_job)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the same checks on the CPU at tiny shapes")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write every check as JSON to FILE")
    parser.add_argument("--app-job", action="store_true",
                        help="also run a public-mode Run through the page's job function (needs gradio installed)")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print(f"gpu_check: this torch {torch.__version__} sees no CUDA GPU; run with --dry-run for the CPU checks",
              file=sys.stderr)
        return 2
    device = torch.device("cpu") if args.dry_run else torch.device("cuda", torch.cuda.current_device())
    if args.dry_run:
        torch.set_num_threads(1)  # tiny models: more threads only wait at barriers (and the machine may be shared)
    t0 = time.perf_counter()
    header = versions(device)
    print(header, flush=True)
    checks = []
    for check in all_checks(device, args.dry_run, args.app_job):
        checks.append(check)
        print(check.line(), flush=True)
    failed = sum(c.status == "FAIL" for c in checks)
    summary = (f"{len(checks) - failed - sum(c.status == 'SKIP' for c in checks)} passed, {failed} failed, "
               f"{sum(c.status == 'SKIP' for c in checks)} skipped in {time.perf_counter() - t0:.0f} s")
    print(summary, flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"versions": header, "summary": summary, "checks": [asdict(c) for c in checks]}, out, indent=1,
                      default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
