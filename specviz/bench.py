"""Benchmark: our engine against transformers' ``generate()``, in one process, same everything.

For every temperature T and lookahead K, on the same prompts, model objects, device and dtype,
after one warm-up call of each method, and alternating the methods within each repeat (the order
rotates from repeat to repeat so no method always runs on a cold or warm cache):

* ``ours plain``: :class:`specviz.engine.Generation` with no drafter;
* ``generate()``: ``model.generate`` with the same sampling settings (``do_sample=False`` for
  T = 0, else ``do_sample=True, temperature, top_k, top_p``);
* ``ours spec``: the speculative loop with the drafter, ``instrument=True`` (what the app runs);
* ``assisted``: transformers assisted generation with the same draft: ``assistant_model=`` the
  drafter's model with ``num_assistant_tokens=K``, schedule ``"constant"`` and the confidence
  threshold off (so it drafts exactly K like we do), or ``prompt_lookup_num_tokens=K`` with
  ``max_matching_ngram_size=3`` (our prompt-lookup's longest n-gram) for ``ngram``;
* ``ours spec, instrument off``: the same loop with ``instrument=False`` and no per-token text
  decoding, to price the instrumentation.

Equal lengths: every method generates exactly ``max_new_tokens`` tokens. Our engine is given no
EOS ids (it keeps going past an EOS); transformers gets ``min_new_tokens = max_new_tokens``
(which masks EOS until the end). Tokens/s is tokens ÷ wall time of the whole call (prefill
included), measured outside the call with ``time.perf_counter``. A repeat's tokens/s pools all
prompts (total tokens ÷ total seconds); the table shows the median over repeats.

Derived figures (pooled over all prompts and repeats of a configuration):

* α = accepted / proposed (the engine's :class:`~specviz.trace.RunStats` definition);
  ``alpha_per_test`` = accepted / tested (``RunStats.alpha_hat``; tested = accepted + first
  rejections), the per-token acceptance probability the closed form assumes (each tested draft
  is a Bernoulli(α) trial). The theoretical speedup uses ``alpha_per_test``; accepted / proposed
  would count the drafts after a rejection, which were never tested, as failures and understate α.
* ``plain_step_ms``: mean round time of ``ours plain`` (one target step + sampling); this and
  the other step times are a repeat's mean, then the median over repeats (like tokens/s);
  ``c`` = draft step ms ÷ plain step ms (prompt lookup: lookup ms per round ÷ (K × plain step ms));
  ``verify_cost`` = mean verify-pass ms ÷ plain step ms.
* ``speedup`` = ours spec tokens/s ÷ ours plain tokens/s (both measured medians);
  ``theoretical`` = :func:`specviz.theory.expected_speedup` (alpha_per_test, K, c, verify_cost).
* ``theoretical_speedup_actual_drafts``: the same model on the rounds as they happened: mean over
  rounds of ``expected_tokens_per_pass(alpha_per_test, k_i)`` (k_i = that round's draft length) ÷
  mean round cost ((draft ms + verify ms) ÷ plain step ms). Prompt lookup proposes fewer than K
  tokens (often none) in many rounds, which the closed form does not model.
* ``instrumentation_overhead`` = 1 − (tokens/s instrumented ÷ tokens/s not instrumented).
* ``cpu_*``: the same ratios computed from this process's CPU time (``time.process_time``) instead
  of wall time. On a machine shared with other work they are far less noisy than wall-time ratios
  (with one torch thread they measure the same thing; with more, idle threads spinning at
  barriers count too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

log = logging.getLogger(__name__)

DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "assets" / "bench_prompts.json"
WARMUP_TOKENS = 8


def default_warmup_tokens(max_new_tokens: int, compiled: bool = False) -> int:
    """Tokens per warm-up call: a few, or, for a ``torch.compile``-d model, the whole run, so that
    every graph (prefill, one position, K + 1 positions) is compiled before anything is timed."""
    return max_new_tokens if compiled else min(WARMUP_TOKENS, max_new_tokens)

OURS_PLAIN = "ours plain"
HF_PLAIN = "generate()"
OURS_SPEC = "ours spec"
HF_SPEC = "assisted"
OURS_SPEC_RAW = "ours spec, instrument off"


# --------------------------------------------------------------------------- shared with the CLI
def load_pair(target_spec: str, draft_spec: str, device: str, dtype: str, progress=None,
              compile_mode: str | None = None):
    """Load the target (a ``LoadedModel``) and build the drafter (None for ``none``).

    ``progress(fraction, message)`` is passed to :mod:`specviz.models`, which also logs each step
    at INFO level (shown with ``-v``). With ``compile_mode`` (a ``torch.compile`` mode, e.g.
    ``"default"``) the target's forward and a model drafter's forward are compiled with
    :func:`specviz.models.compile_forward`; prompt lookup has no network to compile.
    """
    from . import models

    target = models.load_model(target_spec, device=device, dtype=dtype, progress=progress)
    drafter = models.build_drafter(draft_spec, target, device=device, dtype=dtype, progress=progress)
    if compile_mode:
        models.compile_forward(target.model, compile_mode)
        draft_model = getattr(drafter, "model", None)
        if draft_model is not None:
            models.compile_forward(draft_model, compile_mode)
    return target, drafter


def make_generation(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed, instrument=True, eos=True,
                    decode=True):
    """A :class:`~specviz.engine.Generation` wired to a loaded target and drafter."""
    from .engine import Generation

    vocab = getattr(drafter, "vocab_size", None) if drafter is not None else None
    return Generation(
        target=target.model,
        prompt_ids=list(prompt_ids),
        drafter=drafter,
        k=k,
        sampling=sampling,
        max_new_tokens=max_new_tokens,
        seed=seed,
        eos_token_ids=tuple(target.eos_token_ids) if eos else (),
        vocab_size=vocab or min(target.vocab_size, target.logits_width),
        decode=target.decode if decode else None,
        instrument=instrument,
    )


def cost_ratio(rounds, drafter, k: int, plain_step_ms: float | None) -> float | None:
    """Cost ratio c of a drafter relative to one plain target step (ms ÷ ms).

    Model drafters: mean time of one draft forward pass ÷ ``plain_step_ms``. Drafters without a
    network (prompt lookup): mean lookup time per round ÷ (K × ``plain_step_ms``), i.e. the round's
    drafting time expressed as the ``K·c`` of the speedup formula. None without a drafter or a
    baseline.
    """
    if drafter is None or not plain_step_ms or not rounds:
        return None
    steps = sum(r.draft_steps for r in rounds)
    draft_ms = sum(r.draft_ms for r in rounds)
    if steps:
        return draft_ms / steps / plain_step_ms
    return draft_ms / len(rounds) / (k * plain_step_ms)


# --------------------------------------------------------------------------- prompts
@dataclass
class BenchPrompt:
    name: str
    prompt: str
    chat: bool = False
    kind: str = "free"  # "copy" (copy-heavy: typo fixing, reformatting) or "free" (free text)


def load_prompts(path: str | Path | None) -> list[BenchPrompt]:
    """Read a prompt file: a JSON list of ``{name, prompt, chat, kind}`` objects."""
    path = Path(path) if path else DEFAULT_PROMPTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"prompt file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"prompt file {path} is not valid JSON: {exc}") from None
    if isinstance(data, dict):
        data = data.get("prompts", [])
    if not isinstance(data, list) or not data:
        raise ValueError(f"prompt file {path} must hold a non-empty list of prompts")
    prompts = []
    for i, item in enumerate(data):
        if isinstance(item, str):
            item = {"prompt": item}
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"]:
            raise ValueError(f"prompt {i} in {path} needs a non-empty 'prompt' string")
        prompts.append(BenchPrompt(name=str(item.get("name", f"prompt{i}")), prompt=item["prompt"],
                                   chat=bool(item.get("chat", False)), kind=str(item.get("kind", "free"))))
    return prompts


# --------------------------------------------------------------------------- timed calls
@dataclass
class Sample:
    tokens: int
    seconds: float
    rounds: list = field(default_factory=list)
    ids: list = field(default_factory=list)
    cpu_seconds: float = 0.0  # this process's CPU time during the call (all threads)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def time_ours(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed, instrument=True) -> Sample:
    gen = make_generation(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed,
                          instrument=instrument, eos=False, decode=instrument)
    c0, t0 = time.process_time(), time.perf_counter()
    gen.run()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return Sample(len(gen.tokens), seconds, gen.rounds, gen.token_ids, cpu)


def hf_kwargs(sampling, max_new_tokens: int) -> dict:
    """``generate()`` keyword arguments for our sampling settings, forcing exactly max_new_tokens."""
    kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens)
    if sampling.greedy:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    return kwargs


def time_hf(target, prompt_ids, sampling, max_new_tokens, seed, assistant=None, lookup_k=None) -> Sample:
    model = target.model
    device = next(model.parameters()).device
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    kwargs = hf_kwargs(sampling, max_new_tokens)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    if lookup_k is not None:
        kwargs.update(prompt_lookup_num_tokens=lookup_k, max_matching_ngram_size=3)
    eos = list(target.eos_token_ids)
    pad = eos[0] if eos else 0
    torch.manual_seed(seed)
    c0, t0 = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), pad_token_id=pad, **kwargs)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return Sample(out.shape[1] - input_ids.shape[1], seconds, ids=out[0, input_ids.shape[1]:].tolist(),
                  cpu_seconds=cpu)


@contextlib.contextmanager
def _assistant_config(assistant, k: int):
    """Make transformers draft exactly K tokens per round with ``assistant``, as our engine does
    (constant schedule, confidence threshold off); the generation config is restored afterwards
    (an early-exit draft shares it with the target)."""
    config = assistant.generation_config
    names = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    saved = {name: getattr(config, name, None) for name in names}
    config.num_assistant_tokens = k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


# --------------------------------------------------------------------------- the benchmark
def _median(values):
    return statistics.median(values) if values else None


def _pooled_tps(samples_by_repeat: dict[int, list[Sample]], cpu: bool = False) -> list[float]:
    """Tokens per second of each repeat, all prompts pooled (wall time, or CPU time if ``cpu``)."""
    out = []
    for samples in samples_by_repeat.values():
        seconds = sum(s.cpu_seconds if cpu else s.seconds for s in samples)
        out.append(sum(s.tokens for s in samples) / seconds if seconds > 0 else 0.0)
    return out


def _same_until_eos(a: list[int], b: list[int], eos: set[int]) -> bool:
    """Whether two greedy outputs agree before the first EOS of ``a``.

    Only the part before an EOS is comparable: our engine runs past an EOS when told to ignore it,
    while ``generate(min_new_tokens=...)`` masks the EOS and picks the runner-up instead.
    """
    for i, token in enumerate(a):
        if token in eos:
            return a[:i] == b[:i]
    return a == b


def _overhead(instrumented, raw):
    return 1 - instrumented / raw if instrumented and raw else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def run_benchmark(target, drafter, prompts: list[BenchPrompt], ks: list[int], temperatures: list[float],
                  top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64, repeats: int = 3, seed: int = 0,
                  transformers_baselines: bool = True, instrument_check: bool = True,
                  draft_spec: str = "", report=None, warmup_tokens: int | None = None) -> dict:
    """Run the benchmark and return every measurement as plain data (see the module docstring).

    Args:
        target: a loaded target (``specviz.models.LoadedModel``).
        drafter: the drafter (None: only the plain rows are measured).
        prompts: the prompts; each is encoded with the target's chat template if ``chat``.
        ks, temperatures: the grid; plain rows are measured once per temperature.
        report: optional ``str -> None`` called with a progress line before each call.
        warmup_tokens: tokens per warm-up call of each method (default: ``min(8, max_new_tokens)``;
            the CLI passes ``max_new_tokens`` with ``--compile`` so compiling is not timed).
    """
    from . import theory
    from .sampling import SamplingConfig
    from .trace import summarize

    report = report or (lambda line: None)
    encoded = []
    for p in prompts:
        if p.chat and not target.has_chat_template:
            raise ValueError(f"prompt {p.name!r} asks for the chat template but {target.name} has none")
        encoded.append(target.encode(p.prompt, p.chat))
    drafter_model = getattr(drafter, "model", None)
    hf_spec_ok = transformers_baselines and drafter is not None and (drafter_model is not None or not drafter.uses_model)

    def methods_list():
        out = [(OURS_PLAIN, None), (HF_PLAIN, None)] if transformers_baselines else [(OURS_PLAIN, None)]
        if drafter is not None:
            for k in ks:
                out.append((OURS_SPEC, k))
                if hf_spec_ok:
                    out.append((HF_SPEC, k))
                if instrument_check:
                    out.append((OURS_SPEC_RAW, k))
        return out

    def call(method, k, sampling, ids, n_tokens):
        if method == OURS_PLAIN:
            return time_ours(target, None, ids, 1, sampling, n_tokens, seed)
        if method == OURS_SPEC:
            return time_ours(target, drafter, ids, k, sampling, n_tokens, seed)
        if method == OURS_SPEC_RAW:
            return time_ours(target, drafter, ids, k, sampling, n_tokens, seed, instrument=False)
        if method == HF_PLAIN:
            return time_hf(target, ids, sampling, n_tokens, seed)
        if drafter_model is not None:
            with _assistant_config(drafter_model, k):
                return time_hf(target, ids, sampling, n_tokens, seed, assistant=drafter_model)
        return time_hf(target, ids, sampling, n_tokens, seed, lookup_k=k)

    samples: dict[tuple, dict[int, list[Sample]]] = {}
    first_ids: dict[tuple, dict[str, list[int]]] = {}  # token ids of each method's first run per prompt
    per_prompt: dict[tuple, dict[str, list[float]]] = {}
    started = time.perf_counter()
    load_before = _loadavg()
    for temperature in temperatures:
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        methods = methods_list()
        report(f"T={temperature}: warm-up")
        for method, k in methods:
            call(method, k, sampling, encoded[0], warmup_tokens or default_warmup_tokens(max_new_tokens))
        for r in range(repeats):
            for p_index, (prompt, ids) in enumerate(zip(prompts, encoded)):
                shift = (r + p_index) % len(methods)
                for method, k in methods[shift:] + methods[:shift]:
                    report(f"T={temperature} repeat {r + 1}/{repeats} {prompt.name}: {method}"
                           + (f" K={k}" if k else "") + f" [{time.perf_counter() - started:.0f} s]")
                    sample = call(method, k, sampling, ids, max_new_tokens)
                    key = (method, temperature, k)
                    samples.setdefault(key, {}).setdefault(r, []).append(sample)
                    per_prompt.setdefault(key, {}).setdefault(prompt.name, []).append(sample.tokens_per_s)
                    first_ids.setdefault(key, {}).setdefault(prompt.name, sample.ids)

    def tps(method, temperature, k=None, cpu=False):
        return _median(_pooled_tps(samples.get((method, temperature, k), {}), cpu))

    def rounds_of(method, temperature, k=None):
        return [rd for rs in samples.get((method, temperature, k), {}).values() for s in rs for rd in s.rounds]

    def per_repeat(method, temperature, k, statistic):
        """Median over repeats of ``statistic(rounds of one repeat)``: timings are summarised like
        tokens/s (median over repeats), so one repeat slowed by another process does not skew them."""
        values = []
        for repeat_samples in samples.get((method, temperature, k), {}).values():
            rounds = [rd for s in repeat_samples for rd in s.rounds]
            value = statistic(rounds) if rounds else None
            if value is not None:
                values.append(value)
        return _median(values)

    def mean_ms(attr):
        return lambda rounds: statistics.fmean(getattr(rd, attr) for rd in rounds)

    def draft_step_ms(rounds):
        steps = sum(rd.draft_steps for rd in rounds)
        return sum(rd.draft_ms for rd in rounds) / steps if steps else None

    plain_rows, spec_rows, prompt_rows = [], [], []
    for temperature in temperatures:
        ours_plain = tps(OURS_PLAIN, temperature)
        hf_plain = tps(HF_PLAIN, temperature)
        eos = set(target.eos_token_ids)

        def greedy_agreement(method, k=None):
            """Fraction of prompts whose greedy output equals ours plain (T = 0 only)."""
            if temperature != 0 or (method, temperature, k) not in first_ids:
                return None
            ours_ids, theirs = first_ids[(OURS_PLAIN, temperature, None)], first_ids[(method, temperature, k)]
            return sum(_same_until_eos(ours_ids[p], theirs[p], eos) for p in theirs) / len(theirs)

        plain_step_ms = per_repeat(OURS_PLAIN, temperature, None, mean_ms("verify_ms"))
        plain_rows.append({
            "temperature": temperature,
            "ours_tokens_per_s": ours_plain,
            "transformers_tokens_per_s": hf_plain,
            "ratio_vs_transformers": _ratio(ours_plain, hf_plain),
            "cpu_ratio_vs_transformers": _ratio(tps(OURS_PLAIN, temperature, cpu=True),
                                                tps(HF_PLAIN, temperature, cpu=True)),
            "plain_step_ms": plain_step_ms,
            "transformers_same_greedy_text": greedy_agreement(HF_PLAIN),
            "tokens_per_s_runs": _pooled_tps(samples.get((OURS_PLAIN, temperature, None), {})),
            "transformers_tokens_per_s_runs": _pooled_tps(samples.get((HF_PLAIN, temperature, None), {})),
        })
        if drafter is None:
            continue
        for k in ks:
            ours = tps(OURS_SPEC, temperature, k)
            hf = tps(HF_SPEC, temperature, k)
            raw = tps(OURS_SPEC_RAW, temperature, k)
            rounds = rounds_of(OURS_SPEC, temperature, k)
            stats = summarize(rounds, 0.0)
            alpha, alpha_per_test = stats.alpha, stats.alpha_hat
            verify_ms = per_repeat(OURS_SPEC, temperature, k, mean_ms("verify_ms"))
            draft_ms_per_round = per_repeat(OURS_SPEC, temperature, k, mean_ms("draft_ms"))
            step_ms = per_repeat(OURS_SPEC, temperature, k, draft_step_ms)
            # c as in cost_ratio(): per draft forward pass, or a lookup's per-round time over K slots.
            c = None
            if plain_step_ms and draft_ms_per_round is not None:
                c = step_ms / plain_step_ms if step_ms is not None else draft_ms_per_round / (k * plain_step_ms)
            verify_cost = _ratio(verify_ms, plain_step_ms)
            theoretical = None
            predicted_tpp = None
            if alpha_per_test is not None and c is not None and verify_cost:
                theoretical = theory.expected_speedup(alpha_per_test, k, c, verify_cost)
                predicted_tpp = theory.expected_tokens_per_pass(alpha_per_test, k)
            # The closed form assumes K drafts every round; prompt lookup often proposes fewer (or
            # none). The same model evaluated on the rounds' actual draft lengths and measured
            # round costs separates "the formula's assumption does not hold" from "time is lost
            # outside the draft and verify steps".
            theoretical_actual = None
            if alpha_per_test is not None and plain_step_ms and rounds:
                tpp = statistics.fmean(theory.expected_tokens_per_pass(alpha_per_test, rd.n_proposed) for rd in rounds)
                theoretical_actual = tpp / ((draft_ms_per_round + verify_ms) / plain_step_ms)
            speedup = _ratio(ours, ours_plain)
            spec_rows.append({
                "temperature": temperature,
                "k": k,
                "ours_tokens_per_s": ours,
                "transformers_tokens_per_s": hf,
                "ratio_vs_transformers": _ratio(ours, hf),
                "cpu_ratio_vs_transformers": _ratio(tps(OURS_SPEC, temperature, k, cpu=True),
                                                    tps(HF_SPEC, temperature, k, cpu=True)),
                "cpu_speedup": _ratio(tps(OURS_SPEC, temperature, k, cpu=True), tps(OURS_PLAIN, temperature, cpu=True)),
                "cpu_instrumentation_overhead": _overhead(tps(OURS_SPEC, temperature, k, cpu=True),
                                                          tps(OURS_SPEC_RAW, temperature, k, cpu=True)),
                "transformers_speedup": _ratio(hf, hf_plain),
                "alpha": alpha,
                "alpha_per_test": alpha_per_test,
                "proposed_per_round": stats.proposed / len(rounds) if rounds else None,
                "rounds_without_draft": sum(1 for rd in rounds if rd.n_proposed == 0) / len(rounds) if rounds else None,
                "tokens_per_pass": stats.tokens_per_pass if rounds else None,
                "predicted_tokens_per_pass": predicted_tpp,
                "cost_ratio_c": c,
                "draft_ms_per_round": draft_ms_per_round,
                "draft_step_ms": step_ms,
                "verify_ms": verify_ms,
                "verify_cost": verify_cost,
                "speedup": speedup,
                "theoretical_speedup": theoretical,
                "speedup_vs_theoretical": _ratio(speedup, theoretical),
                "theoretical_speedup_actual_drafts": theoretical_actual,
                "speedup_vs_theoretical_actual_drafts": _ratio(speedup, theoretical_actual),
                "same_greedy_text_as_plain": greedy_agreement(OURS_SPEC, k),
                "transformers_same_greedy_text": greedy_agreement(HF_SPEC, k),
                "uninstrumented_tokens_per_s": raw,
                "instrumentation_overhead": _overhead(ours, raw),
                "tokens_per_s_runs": _pooled_tps(samples.get((OURS_SPEC, temperature, k), {})),
                "transformers_tokens_per_s_runs": _pooled_tps(samples.get((HF_SPEC, temperature, k), {})),
            })
            for prompt in prompts:
                pp = lambda m, kk=None: _median(per_prompt.get((m, temperature, kk), {}).get(prompt.name, []))  # noqa: E731
                prompt_rows.append({
                    "prompt": prompt.name, "kind": prompt.kind, "temperature": temperature, "k": k,
                    "ours_plain_tokens_per_s": pp(OURS_PLAIN), "ours_spec_tokens_per_s": pp(OURS_SPEC, k),
                    "speedup": _ratio(pp(OURS_SPEC, k), pp(OURS_PLAIN)),
                    "transformers_speedup": _ratio(pp(HF_SPEC, k), pp(HF_PLAIN)),
                })

    first_spec = spec_rows[0] if spec_rows else {}
    return {
        "target": target.name,
        "draft": draft_spec,
        "drafter": getattr(drafter, "name", None),
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": _transformers_version(),
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "top_k": top_k,
        "top_p": top_p,
        "seed": seed,
        "prompts": [p.__dict__ for p in prompts],
        "prompt_tokens": [len(ids) for ids in encoded],
        "elapsed_s": time.perf_counter() - started,
        # 1-minute load average before and after: other processes on the machine skew timings.
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
        # Headline numbers: the first temperature's plain row and the first (T, K) spec row.
        "plain_ratio_vs_transformers": plain_rows[0]["ratio_vs_transformers"] if plain_rows else None,
        "spec_ratio_vs_transformers": first_spec.get("ratio_vs_transformers"),
        "speedup": first_spec.get("speedup"),
        "theoretical_speedup": first_spec.get("theoretical_speedup"),
        "instrumentation_overhead": first_spec.get("instrumentation_overhead"),
        "plain": plain_rows,
        "spec": spec_rows,
        "per_prompt": prompt_rows,
    }


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


# --------------------------------------------------------------------------- output
def _f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def format_report(result: dict) -> str:
    """Markdown tables of a :func:`run_benchmark` result."""
    head = (f"target {result['target']}, draft {result['draft'] or 'none'} ({result['drafter']}), "
            f"{result['device']} {result['dtype']}, {result['threads']} threads, "
            f"{result['max_new_tokens']} new tokens × {len(result['prompts'])} prompts × {result['repeats']} repeats, "
            f"torch {result['torch']}, transformers {result['transformers']}, "
            f"load average {_f(result.get('loadavg_before'), '{:.1f}')} → {_f(result.get('loadavg_after'), '{:.1f}')}"
            + (f", torch.compile ({result['compile']})" if result.get("compile") else ""))
    plain = _table(
        ["T", "ours plain tok/s", "generate() tok/s", "ours/generate()", "same, by CPU time", "plain step ms",
         "same greedy text"],
        [[_f(r["temperature"], "{:g}"), _f(r["ours_tokens_per_s"], "{:.1f}"),
          _f(r["transformers_tokens_per_s"], "{:.1f}"), _f(r["ratio_vs_transformers"]),
          _f(r["cpu_ratio_vs_transformers"]),
          _f(r["plain_step_ms"], "{:.1f}"), _f(r["transformers_same_greedy_text"], "{:.0%}")]
         for r in result["plain"]],
    )
    out = [head, "", plain]
    if result["spec"]:
        out += ["", _table(
            ["T", "K", "ours spec tok/s", "assisted tok/s", "ours/assisted", "(by CPU time)", "α (acc/proposed)",
             "α per test",
             "tokens/pass (predicted)", "c", "verify cost", "speedup", "assisted speedup", "theoretical",
             "measured/theory", "theory, actual draft lengths", "measured/that", "instrumentation overhead",
             "(by CPU time)", "same greedy text (ours, assisted)"],
            [[_f(r["temperature"], "{:g}"), str(r["k"]), _f(r["ours_tokens_per_s"], "{:.1f}"),
              _f(r["transformers_tokens_per_s"], "{:.1f}"), _f(r["ratio_vs_transformers"]),
              _f(r["cpu_ratio_vs_transformers"]), _f(r["alpha"]), _f(r["alpha_per_test"]),
              f"{_f(r['tokens_per_pass'])} ({_f(r['predicted_tokens_per_pass'])})",
              _f(r["cost_ratio_c"], "{:.3f}"), _f(r["verify_cost"]), _f(r["speedup"], "{:.2f}×"),
              _f(r["transformers_speedup"], "{:.2f}×"), _f(r["theoretical_speedup"], "{:.2f}×"),
              _f(r["speedup_vs_theoretical"]), _f(r["theoretical_speedup_actual_drafts"], "{:.2f}×"),
              _f(r["speedup_vs_theoretical_actual_drafts"]), _f(r["instrumentation_overhead"], "{:+.1%}"),
              _f(r["cpu_instrumentation_overhead"], "{:+.1%}"),
              f"{_f(r['same_greedy_text_as_plain'], '{:.0%}')}, {_f(r['transformers_same_greedy_text'], '{:.0%}')}"]
             for r in result["spec"]],
        )]
        out += ["", _table(
            ["prompt", "kind", "T", "K", "ours speedup", "assisted speedup"],
            [[r["prompt"], r["kind"], _f(r["temperature"], "{:g}"), str(r["k"]), _f(r["speedup"], "{:.2f}×"),
              _f(r["transformers_speedup"], "{:.2f}×")] for r in result["per_prompt"]],
        )]
    return "\n".join(out)


def speedup_figure(results: list[dict]):
    """Plotly figure of :func:`run_benchmark` results: speedup over plain decoding against K.

    One colour per (draft, temperature): measured speedup (solid), the closed-form theory from
    α per test, c and verify cost (dotted), the same model on the rounds' actual draft lengths
    (dashed) and transformers' assisted generation over ``generate()`` (open markers). A grey line
    marks 1× (below it, a slowdown).
    """
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    palette = qualitative.Plotly
    series = (
        ("speedup", "measured", {"mode": "lines+markers"}),
        ("theoretical_speedup", "theory (closed form)", {"mode": "lines+markers", "line": {"dash": "dot"}}),
        ("theoretical_speedup_actual_drafts", "theory (actual draft lengths)",
         {"mode": "lines", "line": {"dash": "dash"}}),
        ("transformers_speedup", "transformers assisted", {"mode": "markers", "marker": {"symbol": "circle-open", "size": 10}}),
    )
    fig = go.Figure()
    index = 0
    for result in results:
        for t in sorted({r["temperature"] for r in result["spec"]}):
            rows = sorted((r for r in result["spec"] if r["temperature"] == t), key=lambda r: r["k"])
            color = palette[index % len(palette)]
            index += 1
            for key, what, style in series:
                points = [(r["k"], r.get(key)) for r in rows if r.get(key) is not None]
                if not points:
                    continue
                style = {**style, "line": {**style.get("line", {}), "color": color},
                         "marker": {**style.get("marker", {}), "color": color}}
                fig.add_trace(go.Scatter(x=[k for k, _ in points], y=[y for _, y in points],
                                         name=f"{result['draft']} T={t:g}: {what}", **style))
    fig.add_hline(y=1.0, line={"color": "grey", "width": 1})
    fig.update_layout(template="plotly_white", title="Speculative sampling speedup over plain decoding",
                      xaxis_title="lookahead K", yaxis_title="speedup (×)", legend={"font": {"size": 11}})
    return fig
