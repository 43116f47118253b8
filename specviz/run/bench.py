"""Benchmark: our engine against transformers' ``generate()``, in one process, same everything.

For every temperature T and lookahead K, on the same prompts, model objects, device and dtype,
after one warm-up call of each method, and alternating the methods within each repeat (the order
rotates from repeat to repeat so no method always runs on a cold or warm cache):

* ``ours plain``: :class:`specviz.core.engine.Generation` with no drafter;
* ``generate()``: ``model.generate`` with the same sampling settings (``do_sample=False`` for
  T = 0, else ``do_sample=True, temperature, top_k, top_p``);
* ``ours spec``: the speculative loop with the drafter, ``instrument=True`` (what the app runs);
* ``assisted``: transformers assisted generation with the same draft: ``assistant_model=`` the
  drafter's model with ``num_assistant_tokens=K``, schedule ``"constant"`` and the confidence
  threshold off (so it drafts exactly K like we do), or ``prompt_lookup_num_tokens=K`` with
  ``max_matching_ngram_size=3`` (our prompt-lookup's longest n-gram) for a drafter without a
  model of its own (``ngram``, ``suffix``) or with one transformers cannot run (an EAGLE head):
  :func:`transformers_counterpart`, named in the result's ``transformers_assisted``;
* ``ours spec, instrument off``: the same loop with ``instrument=False`` and no per-token text
  decoding, to price the instrumentation;
* ``ours oracle`` (only with ``oracle``): the same loop with the oracle drafter (the target's own
  output replayed, :mod:`specviz.drafters.oracle`, recorded untimed before each call), the ceiling
  of this machine at K: each speculative row then carries ``oracle`` (its tokens per pass and
  speedup with its range, and the row's gap to it, :func:`specviz.diagnose.ceiling.gap_to_oracle`);
* ``ours tree`` (only with ``branches`` B > 1): the same loop drafting trees (at most B children
  per node, at most N nodes, one verify pass with a tree attention mask), instrumented like
  ``ours spec``. Its row carries ``tree_ratio_vs_chain`` = tree tokens/s ÷ chain (ours spec)
  tokens/s, and then the headline ``spec_ratio_vs_transformers`` and ``speedup`` describe the tree.

The suffix drafter's process-wide history of earlier outputs and Token Recycling's process-wide
table are cleared before every call (:func:`specviz.drafters.clear_suffix_history`,
:func:`specviz.drafters.clear_recycle_table`), so no method is measured on its own earlier output
of the same prompt, nor on a table an earlier call filled: each recycling run starts cold, or with
``recycle_warm`` = N > 0 from the same warm table: the first N tokens of a fixed bundled text
(:func:`specviz.drafters.recycle.warm_text`, none of it a bench prompt or answer) read once by the
target (:func:`specviz.drafters.recycle.warm_table`, untimed), its snapshot put back after every
emptying, so no call drafts from its own or another call's output.

Equal lengths: every method generates exactly ``max_new_tokens`` tokens. Our engine is given no
EOS ids (it keeps going past an EOS); transformers gets ``min_new_tokens = max_new_tokens``
(which masks EOS until the end). Tokens/s is tokens ÷ wall time of the whole call (prefill
included), measured outside the call with ``time.perf_counter``. A repeat's tokens/s pools all
prompts (total tokens ÷ total seconds); the table shows the median over repeats.

The module is in two parts: :func:`measure` runs the models and keeps every sample as plain data
(:class:`Measurements`); :func:`summarise` turns them into rows without running anything.

Derived figures. Each speculative row's α, acceptance rate, tokens per pass, c, v, speedup and
theoretical speedups come from :func:`specviz.figures.analysis.analyse` (defined there, once), over the
rounds of every prompt and repeat of that (T, K), with the median-over-repeats tokens/s of ours
spec and ours plain as the measured rates, and the plain rounds' mean step time as the baseline
step (:class:`~specviz.figures.speedup.PlainBaseline`). The bench adds its comparisons:

* ``ratio_vs_transformers`` = ours tokens/s ÷ transformers' tokens/s (same method kind);
* ``transformers_speedup`` = assisted tokens/s ÷ ``generate()`` tokens/s;
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

from specviz.figures.analysis import analyse
from specviz.diagnose.diagnostics import DIAGNOSTICS_HEADERS, diagnose, diagnostics_row
from specviz.drafters import RECYCLE_TABLE, clear_recycle_table, clear_suffix_history
from specviz.drafters.recycle import warm_table, warm_token_ids
from specviz.run.runner import make_generation, warm_up
from specviz.figures.speedup import NOT_MEASURABLE, PlainBaseline

log = logging.getLogger(__name__)

DEFAULT_PROMPTS = Path(__file__).resolve().parents[1] / "data" / "bench_prompts.json"

OURS_PLAIN = "ours plain"
HF_PLAIN = "generate()"
OURS_SPEC = "ours spec"
HF_SPEC = "assisted"
OURS_SPEC_RAW = "ours spec, instrument off"
OURS_TREE = "ours tree"
OURS_ORACLE = "ours oracle"


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


def time_ours(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed, instrument=True, branches=1,
              tree_nodes=None, rule="full") -> Sample:
    gen = make_generation(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed,
                          instrument=instrument, eos=False, decode=instrument, branches=branches,
                          tree_nodes=tree_nodes, rule=rule)
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
    """Instrumentation overhead = 1 − (tokens/s instrumented ÷ tokens/s not instrumented)."""
    return 1 - instrumented / raw if instrumented and raw else None


def _ratio(a, b):
    return a / b if a is not None and b else None


# --------------------------------------------------------------------------- measuring
@dataclass
class Measurements:
    """Everything :func:`measure` timed, as plain data; :func:`summarise` turns it into rows.

    ``samples[(method, T, K)][repeat]`` lists that repeat's samples, one per prompt (K is None for
    the plain methods); ``first_ids[(method, T, K)][prompt name]`` the token ids of the method's
    first timed run of each prompt (for the greedy agreement checks).
    """

    samples: dict = field(default_factory=dict)
    first_ids: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    loadavg_before: float | None = None
    loadavg_after: float | None = None

    def add(self, key: tuple, repeat: int, prompt: str, sample: Sample) -> None:
        self.samples.setdefault(key, {}).setdefault(repeat, []).append(sample)
        self.first_ids.setdefault(key, {}).setdefault(prompt, sample.ids)

    def tokens_per_s(self, key: tuple, cpu: bool = False) -> float | None:
        """Median over repeats of the repeat's pooled tokens/s (wall time, or CPU time)."""
        return _median(_pooled_tps(self.samples.get(key, {}), cpu))

    def rounds(self, key: tuple) -> list:
        return [rd for rs in self.samples.get(key, {}).values() for s in rs for rd in s.rounds]

    def prompt_tokens_per_s(self, key: tuple, prompt_index: int) -> float | None:
        """Median over repeats of one prompt's tokens/s."""
        return _median([rs[prompt_index].tokens_per_s for rs in self.samples.get(key, {}).values()
                        if prompt_index < len(rs)])


class _Methods:
    """The timed calls of one benchmark: ours and transformers', plain and speculative."""

    def __init__(self, target, drafter, ks, seed, transformers_baselines, instrument_check, branches=1,
                 tree_nodes=None, rule="full", warm=None, oracle=None):
        self.target, self.drafter, self.seed, self.rule = target, drafter, seed, rule
        self.oracle = oracle  # the oracle drafter timed beside the drafter (None: not timed)
        self.warm = warm  # the warm table's snapshot (recycle_table_at_start), or None: cold
        self.branches, self.tree_nodes = branches, tree_nodes
        self.draft_model = getattr(drafter, "model", None)
        hf_spec = transformers_baselines and transformers_counterpart(drafter) is not None
        self.list = [(OURS_PLAIN, None)] + ([(HF_PLAIN, None)] if transformers_baselines else [])
        if drafter is not None:
            for k in ks:
                self.list += [(OURS_SPEC, k)] + ([(HF_SPEC, k)] if hf_spec else [])
                self.list += [(OURS_TREE, k)] if branches > 1 else []
                self.list += [(OURS_SPEC_RAW, k)] if instrument_check else []
                self.list += [(OURS_ORACLE, k)] if oracle is not None else []

    def call(self, method, k, sampling, ids, n_tokens) -> Sample:
        target, seed = self.target, self.seed
        measurement_start(self.warm)  # no method may draft from an earlier method's output or table
        if method == OURS_TREE:
            return time_ours(target, self.drafter, ids, k, sampling, n_tokens, seed, branches=self.branches,
                             tree_nodes=self.tree_nodes, rule=self.rule)
        if method == OURS_PLAIN:
            return time_ours(target, None, ids, 1, sampling, n_tokens, seed)
        if method == OURS_ORACLE:
            return time_ours(target, self.oracle, ids, k, sampling, n_tokens, seed, rule=self.rule)
        if method in (OURS_SPEC, OURS_SPEC_RAW):
            return time_ours(target, self.drafter, ids, k, sampling, n_tokens, seed, instrument=method == OURS_SPEC,
                             rule=self.rule)
        if method == HF_PLAIN:
            return time_hf(target, ids, sampling, n_tokens, seed)
        if self.draft_model is not None:
            with _assistant_config(self.draft_model, k):
                return time_hf(target, ids, sampling, n_tokens, seed, assistant=self.draft_model)
        return time_hf(target, ids, sampling, n_tokens, seed, lookup_k=k)


def warm_snapshot(target, n_tokens: int) -> tuple | None:
    """The process-wide Token Recycling table warmed from the first ``n_tokens`` tokens of the
    bundled warm text (:func:`~specviz.drafters.recycle.warm_token_ids`,
    :func:`~specviz.drafters.recycle.warm_table`), as a snapshot for :func:`recycle_table_at_start`;
    None for ``n_tokens`` = 0 (cold). Leaves the table holding exactly those rows."""
    clear_recycle_table()
    if not n_tokens:
        return None
    warm_table(target, warm_token_ids(target.tokenizer, n_tokens), RECYCLE_TABLE)
    return RECYCLE_TABLE.snapshot()


def recycle_table_at_start(warm: tuple | None, table=None) -> None:
    """Empty ``table`` (default: the process-wide Token Recycling table) and, with ``warm``
    (:func:`warm_snapshot`), put the warm rows back: every call starts from the same table, never
    from its own earlier output."""
    if table is None:
        clear_recycle_table()
        table = RECYCLE_TABLE
    else:
        table.clear()
    if warm is not None:
        table.restore(warm)


def measurement_start(warm: tuple | None = None, drafter=None) -> None:
    """The state every measurement starts from, a bench call's and a sweep row's alike (a
    sweep that skipped it measured Token Recycling at three different tokens per pass for one
    setting three times): the suffix drafter's history empty, so no run drafts from an earlier
    run's output, and the Token Recycling table empty or holding exactly the warm rows ``warm``
    (:func:`recycle_table_at_start`), never what an earlier run taught it.

    Args:
        warm: the warm table's snapshot, or None: cold.
        drafter: whose stores (its ``history``, its ``table``) to reset; None: the process-wide
            ones (:data:`~specviz.drafters.SUFFIX_HISTORY`, :data:`~specviz.drafters.RECYCLE_TABLE`),
            which the bench's drafters use. A drafter without them has nothing to reset.
    """
    if drafter is None:
        clear_suffix_history()
        recycle_table_at_start(warm)
        return
    history, table = getattr(drafter, "history", None), getattr(drafter, "table", None)
    if history is not None:
        history.clear()
    if table is not None:
        recycle_table_at_start(warm, table)


def transformers_counterpart(drafter) -> str | None:
    """Which transformers method the ``assisted`` rows time for ``drafter`` (None: no drafter):
    assisted generation with the same draft model when the drafter has one (``.model``), else
    prompt-lookup decoding, transformers' best option with no second model (the one it offers for
    model-free drafters, and the one to beat for drafters it lacks, such as an EAGLE head)."""
    if drafter is None:
        return None
    if getattr(drafter, "model", None) is not None:
        return "assisted generation with the same draft model (assistant_model=, num_assistant_tokens=K)"
    return "prompt-lookup decoding (prompt_lookup_num_tokens=K, max_matching_ngram_size=3)"


def measure(target, drafter, prompts, encoded, ks, temperatures, top_k=0, top_p=1.0, max_new_tokens=64,
            repeats=3, seed=0, transformers_baselines=True, instrument_check=True, report=None,
            warmup_tokens=None, branches=1, tree_nodes=None, rule="full", recycle_warm=0, oracle=False) -> Measurements:
    """Time every method on every prompt (see the module docstring for the protocol).

    Our speculative methods verify under ``rule`` (:data:`specviz.core.sampling.RULES`). With
    ``recycle_warm`` = N > 0 every call starts from the Token Recycling table warmed from N tokens
    of the bundled warm text (:func:`warm_snapshot`, once per benchmark, untimed), else cold.

    With ``branches`` > 1 the tree variant of our speculative loop (``ours tree``) is timed too,
    with at most ``tree_nodes`` nodes per tree; with ``oracle`` the oracle drafter (``ours oracle``).

    Our methods warm up through :func:`specviz.run.runner.warm_up`, transformers' with one untimed
    call each. Within a repeat the method order rotates per prompt and repeat.
    """
    from specviz.run.runner import default_warmup_tokens
    from specviz.core.sampling import SamplingConfig

    report = report or (lambda line: None)
    warm = warm_snapshot(target, recycle_warm)
    from specviz.drafters.oracle import OracleDrafter

    replay = OracleDrafter(min(target.vocab_size, target.logits_width)) if oracle and drafter is not None else None
    methods = _Methods(target, drafter, ks, seed, transformers_baselines, instrument_check, branches, tree_nodes,
                       rule, warm, replay)
    out = Measurements(loadavg_before=_loadavg())
    started = time.perf_counter()
    n_warm = warmup_tokens or default_warmup_tokens(max_new_tokens)
    for temperature in temperatures:
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        report(f"T={temperature}: warm-up")
        for k in ks if drafter is not None else [1]:
            measurement_start(warm)
            warm_up(target, drafter, encoded[0], k, sampling, n_warm)
            if drafter is not None and branches > 1:
                warm_up(target, drafter, encoded[0], k, sampling, n_warm, branches=branches, tree_nodes=tree_nodes)
        for method, k in methods.list:
            if method in (HF_PLAIN, HF_SPEC):
                methods.call(method, k, sampling, encoded[0], n_warm)
        for r in range(repeats):
            for p_index, (prompt, ids) in enumerate(zip(prompts, encoded)):
                shift = (r + p_index) % len(methods.list)
                for method, k in methods.list[shift:] + methods.list[:shift]:
                    report(f"T={temperature} repeat {r + 1}/{repeats} {prompt.name}: {method}"
                           + (f" K={k}" if k else "") + f" [{time.perf_counter() - started:.0f} s]")
                    out.add((method, temperature, k), r, prompt.name,
                            methods.call(method, k, sampling, ids, max_new_tokens))
    out.elapsed_s = time.perf_counter() - started
    out.loadavg_after = _loadavg()
    return out


# --------------------------------------------------------------------------- summarising
def spec_analysis(m: Measurements, temperature: float, k: int, method: str = OURS_SPEC):
    """The :class:`~specviz.figures.analysis.RunAnalysis` of one (T, K) setting of a speculative method
    (ours spec, or ours tree), all prompts and repeats pooled: α, tokens per pass and step times
    from every round, tokens/s the median over repeats, against the plain baseline of the same
    temperature."""
    plain_key = (OURS_PLAIN, temperature, None)
    baseline = PlainBaseline.from_rounds(m.rounds(plain_key), m.tokens_per_s(plain_key) or 0.0)
    key = (method, temperature, k)
    seconds = sum(s.seconds for rs in m.samples.get(key, {}).values() for s in rs)
    return analyse(m.rounds(key), k, seconds, baseline=baseline, tokens_per_s=m.tokens_per_s(key))


def _greedy_agreement(m: Measurements, method, temperature, k, eos, reference=(OURS_PLAIN, None)) -> float | None:
    """Fraction of prompts whose greedy output equals the reference's (ours plain unless given as
    ``(method, k)``); T = 0 only. In bfloat16 batched verification can flip near-tied argmaxes,
    and a ratio of tokens/s between two different texts compares their copyability too."""
    ref_key = (reference[0], temperature, reference[1])
    if temperature != 0 or (method, temperature, k) not in m.first_ids or ref_key not in m.first_ids:
        return None
    ours, theirs = m.first_ids[ref_key], m.first_ids[(method, temperature, k)]
    return sum(_same_until_eos(ours[p], theirs[p], eos) for p in theirs) / len(theirs)


def _plain_row(m: Measurements, temperature: float, eos: set[int]) -> dict:
    ours, hf = (OURS_PLAIN, temperature, None), (HF_PLAIN, temperature, None)
    baseline = PlainBaseline.from_rounds(m.rounds(ours), m.tokens_per_s(ours) or 0.0)
    return {
        "temperature": temperature,
        "ours_tokens_per_s": m.tokens_per_s(ours),
        "transformers_tokens_per_s": m.tokens_per_s(hf),
        "ratio_vs_transformers": _ratio(m.tokens_per_s(ours), m.tokens_per_s(hf)),
        "cpu_ratio_vs_transformers": _ratio(m.tokens_per_s(ours, cpu=True), m.tokens_per_s(hf, cpu=True)),
        "plain_step_ms": baseline.step_ms if baseline else None,
        "transformers_same_greedy_text": _greedy_agreement(m, HF_PLAIN, temperature, None, eos),
        "tokens_per_s_runs": _pooled_tps(m.samples.get(ours, {})),
        "transformers_tokens_per_s_runs": _pooled_tps(m.samples.get(hf, {})),
    }


def spec_row(m: Measurements, temperature: float, k: int, eos: set[int]) -> dict:
    """One speculative row: the analysis's figures plus the bench's comparisons."""
    ours, hf, raw = (OURS_SPEC, temperature, k), (HF_SPEC, temperature, k), (OURS_SPEC_RAW, temperature, k)
    plain, hf_plain = (OURS_PLAIN, temperature, None), (HF_PLAIN, temperature, None)
    cpu = {key: m.tokens_per_s(key, cpu=True) for key in (ours, hf, raw, plain)}
    analysis = spec_analysis(m, temperature, k)
    return {
        "temperature": temperature,
        "k": k,
        **analysis.scalars(),
        "oracle": oracle_figures(m, temperature, k, analysis.scalars()),
        "diagnostics": diagnose(m.rounds(ours), k, analysis.cost_ratio_c, analysis.verify_cost_v).to_dict(),
        "ours_tokens_per_s": m.tokens_per_s(ours),
        "transformers_tokens_per_s": m.tokens_per_s(hf),
        "ratio_vs_transformers": _ratio(m.tokens_per_s(ours), m.tokens_per_s(hf)),
        "cpu_ratio_vs_transformers": _ratio(cpu[ours], cpu[hf]),
        "cpu_speedup": _ratio(cpu[ours], cpu[plain]),
        "cpu_instrumentation_overhead": _overhead(cpu[ours], cpu[raw]),
        "transformers_speedup": _ratio(m.tokens_per_s(hf), m.tokens_per_s(hf_plain)),
        "same_greedy_text_as_plain": _greedy_agreement(m, OURS_SPEC, temperature, k, eos),
        "transformers_same_greedy_text": _greedy_agreement(m, HF_SPEC, temperature, k, eos),
        "uninstrumented_tokens_per_s": m.tokens_per_s(raw),
        "instrumentation_overhead": _overhead(m.tokens_per_s(ours), m.tokens_per_s(raw)),
        "tokens_per_s_runs": _pooled_tps(m.samples.get(ours, {})),
        "transformers_tokens_per_s_runs": _pooled_tps(m.samples.get(hf, {})),
    }


def oracle_figures(m: Measurements, temperature: float, k: int, row: dict) -> dict | None:
    """The oracle's figures at (T, K) (tokens per pass, speedup with its range) and ``row``'s gap to
    them (:func:`specviz.diagnose.ceiling.gap_to_oracle`), or None when the oracle was not timed."""
    from specviz.diagnose.ceiling import gap_to_oracle

    if (OURS_ORACLE, temperature, k) not in m.samples:
        return None
    oracle = spec_analysis(m, temperature, k, OURS_ORACLE).scalars()
    figures = {name: oracle[name] for name in ("alpha", "tokens_per_pass", "speedup", "speedup_low", "speedup_high",
                                                "speedup_text", "speedup_doubt", "verify_cost_v", "cost_ratio_c")}
    return {**figures, **gap_to_oracle(row, oracle)}


def tree_row(m: Measurements, temperature: float, k: int, eos: set[int]) -> dict:
    """One tree row (ours tree at this T and K): the analysis's figures, and the comparisons with
    the chain (ours spec) and with transformers' assisted generation.

    ``tree_ratio_vs_chain`` = tree tokens/s ÷ chain tokens/s (> 1: the tree pays off);
    ``nodes_per_pass`` = drafted nodes ÷ verify passes (the tree's verify width).
    """
    tree, chain, hf = (OURS_TREE, temperature, k), (OURS_SPEC, temperature, k), (HF_SPEC, temperature, k)
    plain = (OURS_PLAIN, temperature, None)
    cpu = {key: m.tokens_per_s(key, cpu=True) for key in (tree, chain, hf, plain)}
    analysis = spec_analysis(m, temperature, k, OURS_TREE)
    return {
        "temperature": temperature,
        "k": k,
        **analysis.scalars(),
        "diagnostics": diagnose(m.rounds(tree), k, analysis.cost_ratio_c, analysis.verify_cost_v).to_dict(),
        "nodes_per_pass": analysis.proposed_per_pass,
        "ours_tokens_per_s": m.tokens_per_s(tree),
        "chain_tokens_per_s": m.tokens_per_s(chain),
        "tree_ratio_vs_chain": _ratio(m.tokens_per_s(tree), m.tokens_per_s(chain)),
        "cpu_tree_ratio_vs_chain": _ratio(cpu[tree], cpu[chain]),
        "transformers_tokens_per_s": m.tokens_per_s(hf),
        "ratio_vs_transformers": _ratio(m.tokens_per_s(tree), m.tokens_per_s(hf)),
        "cpu_ratio_vs_transformers": _ratio(cpu[tree], cpu[hf]),
        "cpu_speedup": _ratio(cpu[tree], cpu[plain]),
        "same_greedy_text_as_plain": _greedy_agreement(m, OURS_TREE, temperature, k, eos),
        "same_greedy_text_as_chain": _greedy_agreement(m, OURS_TREE, temperature, k, eos, (OURS_SPEC, k)),
        "tokens_per_s_runs": _pooled_tps(m.samples.get(tree, {})),
    }


def _prompt_rows(m: Measurements, prompts, temperature: float, k: int) -> list[dict]:
    rows = []
    for i, prompt in enumerate(prompts):
        tps = {method: m.prompt_tokens_per_s((method, temperature, kk), i)
               for method, kk in ((OURS_PLAIN, None), (OURS_SPEC, k), (HF_PLAIN, None), (HF_SPEC, k),
                                  (OURS_TREE, k))}
        rows.append({
            "prompt": prompt.name, "kind": prompt.kind, "temperature": temperature, "k": k,
            "ours_plain_tokens_per_s": tps[OURS_PLAIN], "ours_spec_tokens_per_s": tps[OURS_SPEC],
            "speedup": _ratio(tps[OURS_SPEC], tps[OURS_PLAIN]),
            "transformers_speedup": _ratio(tps[HF_SPEC], tps[HF_PLAIN]),
            "tree_speedup": _ratio(tps[OURS_TREE], tps[OURS_PLAIN]),
            "tree_ratio_vs_chain": _ratio(tps[OURS_TREE], tps[OURS_SPEC]),
        })
    return rows


def summarise(m: Measurements, target, drafter, prompts, encoded, ks, temperatures, settings: dict) -> dict:
    """The benchmark's result (plain data) from its measurements; no model is run."""
    eos = set(target.eos_token_ids)
    plain_rows = [_plain_row(m, t, eos) for t in temperatures]
    grid = [(t, k) for t in temperatures for k in ks] if drafter is not None else []
    spec_rows = [spec_row(m, t, k, eos) for t, k in grid]
    tree_rows = [tree_row(m, t, k, eos) for t, k in grid] if settings.get("branches", 1) > 1 else []
    first_spec = spec_rows[0] if spec_rows else {}
    # With trees the headline describes the tree (the chain's figures stay in "spec").
    headline = tree_rows[0] if tree_rows else first_spec
    return {
        "target": target.name,
        "drafter": getattr(drafter, "name", None),
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": _transformers_version(),
        **settings,
        "prompts": [p.__dict__ for p in prompts],
        "prompt_tokens": [len(ids) for ids in encoded],
        "elapsed_s": m.elapsed_s,
        # 1-minute load average before and after: other processes on the machine skew timings.
        "loadavg_before": m.loadavg_before,
        "loadavg_after": m.loadavg_after,
        # Headline numbers: the first temperature's plain row and the first (T, K) spec row.
        "plain_ratio_vs_transformers": plain_rows[0]["ratio_vs_transformers"] if plain_rows else None,
        "spec_ratio_vs_transformers": headline.get("ratio_vs_transformers"),
        "speedup": headline.get("speedup"),
        "theoretical_speedup": headline.get("theoretical_speedup"),
        "instrumentation_overhead": first_spec.get("instrumentation_overhead"),
        "tree_ratio_vs_chain": tree_rows[0]["tree_ratio_vs_chain"] if tree_rows else None,
        "chain_speedup": first_spec.get("speedup"),
        "plain": plain_rows,
        "spec": spec_rows,
        "tree": tree_rows,
        "per_prompt": [row for t, k in grid for row in _prompt_rows(m, prompts, t, k)],
    }


def run_benchmark(target, drafter, prompts: list[BenchPrompt], ks: list[int], temperatures: list[float],
                  top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64, repeats: int = 3, seed: int = 0,
                  transformers_baselines: bool = True, instrument_check: bool = True,
                  draft_spec: str = "", report=None, warmup_tokens: int | None = None, branches: int = 1,
                  tree_nodes: int | None = None, rule: str = "full", recycle_warm: int = 0,
                  oracle: bool = False) -> dict:
    """Measure (:func:`measure`) and summarise (:func:`summarise`): every figure as plain data.

    Args:
        target: a loaded target (``specviz.models.loading.LoadedModel``).
        drafter: the drafter (None: only the plain rows are measured).
        prompts: the prompts; each is encoded with the target's chat template if ``chat``.
        ks, temperatures: the grid; plain rows are measured once per temperature.
        branches, tree_nodes: with ``branches`` > 1, the tree variant (``ours tree``) runs beside
            the chain at every (T, K), at most ``tree_nodes`` nodes per tree (default 2·K).
        rule: the verification rule of our speculative rows (:data:`specviz.core.sampling.RULES`).
        recycle_warm: tokens of the bundled warm text a Token Recycling table starts from before
            every call (0: cold; :func:`warm_snapshot`); recorded as ``recycle_warm``.
        oracle: time the oracle drafter beside the drafter at every (T, K), the ceiling each
            speculative row's ``oracle`` compares it with.
        report: optional ``str -> None`` called with a progress line before each call.
        warmup_tokens: tokens per warm-up call of each method (default
            :func:`specviz.run.runner.default_warmup_tokens`; the CLI passes ``max_new_tokens`` with
            ``--compile`` so compiling is not timed).

    A prompt that asks for a chat template the target lacks is used as plain text, with a note
    in the result's ``notes`` (:func:`specviz.run.runner.encode_prompt`, the policy of every front-end).

    Raises:
        ValueError: if a prompt encodes to no tokens.
    """
    from specviz.run.runner import encode_prompt

    encoded, notes = [], []
    for p in prompts:
        ids, prompt_notes = encode_prompt(target, p.prompt, p.chat)
        encoded.append(ids)
        notes += [f"Prompt {p.name!r}: {note}" for note in prompt_notes]
    m = measure(target, drafter, prompts, encoded, ks, temperatures, top_k, top_p, max_new_tokens, repeats, seed,
                transformers_baselines, instrument_check, report, warmup_tokens, branches, tree_nodes, rule,
                recycle_warm, oracle)
    assisted = transformers_counterpart(drafter) if transformers_baselines else None
    settings = {"draft": draft_spec, "transformers_assisted": assisted, "max_new_tokens": max_new_tokens,
                "repeats": repeats, "top_k": top_k, "top_p": top_p, "seed": seed, "branches": branches,
                "tree_nodes": tree_nodes, "rule": rule, "recycles": getattr(drafter, "table", None) is not None,
                "recycle_warm": recycle_warm,
                "recycle_warm_tokens": len(warm_token_ids(target.tokenizer, recycle_warm)) if recycle_warm else 0}
    return {**summarise(m, target, drafter, prompts, encoded, ks, temperatures, settings), "notes": notes}

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
            + (f", torch.compile ({result['compile']})" if result.get("compile") else "")
            + (f", Token Recycling table warmed from {result['recycle_warm_tokens']} tokens of fixed text before "
               "each call" if result.get("recycle_warm") else
               ", Token Recycling table empty before each call (cold)" if result.get("recycles") else "")
            + (f"; 'assisted' = transformers' {result['transformers_assisted']}"
               if result.get("transformers_assisted") else ""))
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
            ["T", "K", "ours spec tok/s", "assisted tok/s", "ours/assisted", "(by CPU time)",
             "acceptance rate (acc/proposed)", "α per token (acc/tested)",
             "tokens/pass (predicted)", "c", "verify cost v", "speedup", "assisted speedup", "theoretical",
             "measured/theory", "theory, actual draft lengths", "measured/that", "instrumentation overhead",
             "(by CPU time)", "same greedy text (ours, assisted)"],
            [[_f(r["temperature"], "{:g}"), str(r["k"]), _f(r["ours_tokens_per_s"], "{:.1f}"),
              _f(r["transformers_tokens_per_s"], "{:.1f}"), _f(r["ratio_vs_transformers"]),
              _f(r["cpu_ratio_vs_transformers"]), _f(r["acceptance_rate"]), _f(r["alpha"]),
              f"{_f(r['tokens_per_pass'])} ({_f(r['predicted_tokens_per_pass'])})",
              _f(r["cost_ratio_c"], "{:.3f}"), _f(r["verify_cost_v"]),
              NOT_MEASURABLE if r.get("speedup_doubt") else _f(r["speedup"], "{:.2f}×"),
              _f(r["transformers_speedup"], "{:.2f}×"), _f(r["theoretical_speedup"], "{:.2f}×"),
              _f(r["speedup_vs_theoretical"]), _f(r["theoretical_speedup_actual_drafts"], "{:.2f}×"),
              _f(r["speedup_vs_theoretical_actual_drafts"]), _f(r["instrumentation_overhead"], "{:+.1%}"),
              _f(r["cpu_instrumentation_overhead"], "{:+.1%}"),
              f"{_f(r['same_greedy_text_as_plain'], '{:.0%}')}, {_f(r['transformers_same_greedy_text'], '{:.0%}')}"]
             for r in result["spec"]],
        )]
    if result.get("tree"):
        out += ["", f"Tree speculation: B = {result.get('branches')}, N = {result.get('tree_nodes') or '2·K'}", "",
                _table(
            ["T", "K", "ours tree tok/s", "ours chain tok/s", "tree/chain", "(by CPU time)", "nodes/pass",
             "α per token (acc/tested)", "tokens/pass", "verify cost v", "speedup", "ours tree/assisted",
             "same greedy text (as plain, as chain)"],
            [[_f(r["temperature"], "{:g}"), str(r["k"]), _f(r["ours_tokens_per_s"], "{:.1f}"),
              _f(r["chain_tokens_per_s"], "{:.1f}"), _f(r["tree_ratio_vs_chain"]), _f(r["cpu_tree_ratio_vs_chain"]),
              _f(r["nodes_per_pass"]), _f(r["alpha"]), _f(r["tokens_per_pass"]), _f(r["verify_cost_v"]),
              NOT_MEASURABLE if r.get("speedup_doubt") else _f(r["speedup"], "{:.2f}×"), _f(r["ratio_vs_transformers"]),
              f"{_f(r['same_greedy_text_as_plain'], '{:.0%}')}, {_f(r.get('same_greedy_text_as_chain'), '{:.0%}')}"]
             for r in result["tree"]],
        )]
    out += _oracle_table(result)
    rows = [r for r in result["spec"] + result.get("tree", []) if r.get("diagnostics")]
    if rows:
        out += ["", ("Diagnostics (drafting passes; the rules replayed on the recorded passes, [low, high] where "
                     "the top-10 tokens a trace keeps leave a figure open)"), "",
                _table(["T", "K", *DIAGNOSTICS_HEADERS],
                       [[_f(r["temperature"], "{:g}"), str(r["k"]), *diagnostics_row(r["diagnostics"])] for r in rows])]
    if result["spec"]:
        out += ["", _table(
            ["prompt", "kind", "T", "K", "ours speedup", "ours tree speedup", "tree/chain", "assisted speedup"],
            [[r["prompt"], r["kind"], _f(r["temperature"], "{:g}"), str(r["k"]), _f(r["speedup"], "{:.2f}×"),
              _f(r.get("tree_speedup"), "{:.2f}×"), _f(r.get("tree_ratio_vs_chain")),
              _f(r["transformers_speedup"], "{:.2f}×")]
             for r in result["per_prompt"]],
        )]
    return "\n".join(out)


def _oracle_table(result: dict) -> list[str]:
    """The oracle's ceiling beside each (T, K), with the drafter's gap to it ([] when not timed)."""
    rows = [r for r in result["spec"] if r.get("oracle")]
    if not rows:
        return []

    def speed(o):
        return NOT_MEASURABLE if o.get("speedup_doubt") else o.get("speedup_text") or "–"

    return ["", "The ceiling: the oracle drafter (the target's own output replayed) at the same settings", "", _table(
        ["T", "K", "oracle tokens/pass", "oracle speedup", "drafter tokens/pass", "gap, tokens/pass", "gap, speedup",
         "share of the oracle's speedup"],
        [[_f(r["temperature"], "{:g}"), str(r["k"]), _f(r["oracle"]["tokens_per_pass"]), speed(r["oracle"]),
          _f(r["tokens_per_pass"]), _f(r["oracle"]["tokens_per_pass_gap"]), _f(r["oracle"]["speedup_gap"], "{:.2f}×"),
          _f(r["oracle"]["share_of_ceiling"], "{:.0%}")] for r in rows])]


def speedup_figure(results: list[dict]):
    """Plotly figure of :func:`run_benchmark` results: speedup over plain decoding against K.

    One colour per (draft, temperature): measured speedup (solid), the closed-form theory from
    per-token α, c and verify cost v (dotted), the same model on the rounds' actual draft lengths
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
