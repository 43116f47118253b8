"""llama.cpp beside specviz: the same prompt and pair run in llama.cpp's own server code, in process.

``xllamacpp`` (``pip install xllamacpp``, or ``pip install specviz[llamacpp]``: a prebuilt CPU wheel of
llama.cpp's server, no compiler) loads the GGUF files into this process; :class:`LlamaCppLane` sends
one chat request at a time and returns the engine's **own** figures: its per-request ``timings``
and the change of its ``/metrics`` counters over the request, never a time specviz took itself.

Modes (:data:`MODES`), each a server setting (llama.cpp b11549 ignores per-request speculative
keys, so a new mode or K reloads the server; one server is alive at a time):

* ``plain``: the target alone;
* ``draft-greedy``: draft-model speculation (``--spec-type draft-simple``) with the draft's argmax
  proposed at each position, llama.cpp's default (``--spec-draft-sampling greedy``);
* ``draft-probabilistic``: the draft samples its proposals and the target tests them with
  min(1, p_target/p_draft) (``--spec-draft-sampling probabilistic``: specviz's own rule);
* ``ngram-simple``: n-gram lookup in the context (``--spec-type ngram-simple``), no draft model.

Figures (:func:`lane_figures`), in specviz's units:

* decode tokens/s = the tokens after the first ÷ the time after the prompt's pass (the engine's
  own ``predicted_per_second``, ``(predicted_n − 1) ÷ predicted_ms``); specviz's is the same
  quotient (:func:`specviz.figures.speedup.decode_tokens_per_s`);
* verify passes = ``predicted_n − draft_n_accepted − 1`` (each pass adds one token of the target's
  own; the first token comes from the prompt's pass), cross-checked against the change of
  ``llamacpp:n_decode_total`` (which counts that prompt pass too) and the engine's counter preferred
  where they differ; tokens per pass = ``(predicted_n − 1) ÷ passes``;
* acceptance rate = ``draft_n_accepted ÷ draft_n`` (accepted ÷ drafted, as every engine reports it);
* the engine's costs (:meth:`LlamaCppLane.measure_costs`): a plain step ``t_T``; ``c`` = the draft
  model's own plain step ÷ ``t_T``; ``v`` = (a speculative run's generation time − its drafting,
  ``draft_n`` × the draft step) ÷ verify passes ÷ ``t_T``, everything a pass costs besides drafting,
  as specviz's own ``v`` is (:mod:`specviz.figures.analysis`); and ``v_batch``, one target forward
  over K + 1 new positions after a cached prefix (the engine's ``prompt_ms`` for exactly those
  positions) ÷ ``t_T``: the target's share of it.

The closed form with each engine's own α, c and v (:func:`specviz.figures.theory.expected_speedup`,
Leviathan et al. 2023) then says in one sentence why one pair wins in one implementation and loses
in the other (:func:`why_sentence`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from specviz.figures import theory
from specviz.figures.speedup import decode_tokens_per_s

__all__ = ["INSTALL_HINT", "MODES", "LlamaCppLane", "import_xllamacpp", "lane_figures", "why_sentence"]

MODES = ("plain", "draft-greedy", "draft-probabilistic", "ngram-simple")
INSTALL_HINT = ("The llama.cpp lane needs the xllamacpp package (llama.cpp's server as a prebuilt CPU wheel, no "
                "compiler): pip install xllamacpp, or pip install specviz[llamacpp].")
#: The n-gram length llama.cpp looks up for ``ngram-simple`` (its default of 12 rarely matches in a short chat).
NGRAM_SIZE_N = 3
_METRIC = re.compile(r"^(llamacpp:[A-Za-z_:]+)(\{[^}]*\})?\s+(\S+)$")
_GAUGES = {"llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds", "llamacpp:requests_processing",
           "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode", "llamacpp:n_tokens_max"}


def import_xllamacpp():
    """The ``xllamacpp`` module.

    Raises:
        ImportError: with :data:`INSTALL_HINT` when it is not installed.
    """
    try:
        import xllamacpp
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return xllamacpp


def _metrics(text: str) -> dict[str, float]:
    """llama.cpp's ``/metrics`` text as ``{name or name{labels}: value}`` (counters and gauges)."""
    out = {}
    for line in text.splitlines():
        if (m := _METRIC.match(line.strip())) is not None:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


@dataclass(frozen=True)
class _ServerKey:
    model: str
    spec: str  # "target only", "draft model" or "n-gram"
    k: int
    probabilistic: bool


class LlamaCppLane:
    """llama.cpp's server for one target (and draft) GGUF, in this process.

    Use it as a context manager; keep it open across runs (loading takes seconds)::

        with LlamaCppLane(target_gguf, draft_gguf, threads=1) as lane:
            plain = lane.run(prompt, mode="plain")
            spec = lane.run(prompt, mode="draft-probabilistic", k=4, temperature=0.7)

    Args:
        target_gguf, draft_gguf: GGUF paths (the draft is needed by the ``draft-*`` modes and
            :meth:`measure_costs`).
        threads: CPU threads of every llama.cpp context (target, draft, their batches).
        n_ctx: the slot's context length, tokens.

    Raises:
        ImportError: without xllamacpp (:data:`INSTALL_HINT`).
    """

    def __init__(self, target_gguf, draft_gguf=None, *, threads: int = 1, n_ctx: int = 2048) -> None:
        self._xlc = import_xllamacpp()
        self.target_gguf, self.draft_gguf = str(target_gguf), (str(draft_gguf) if draft_gguf else None)
        self.threads, self.n_ctx = int(threads), int(n_ctx)
        self._server = None
        self._key: _ServerKey | None = None

    def __enter__(self) -> LlamaCppLane:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Unload the models (llama.cpp frees them as its server is destroyed)."""
        self._server, self._key = None, None

    def _key_for(self, mode: str, k: int) -> _ServerKey:
        if mode not in (*MODES, "draft-alone"):
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode in ("draft-alone", "draft-greedy", "draft-probabilistic") and not self.draft_gguf:
            raise ValueError(f"the mode {mode} needs the draft's GGUF")
        if mode == "plain":
            return _ServerKey(self.target_gguf, "target only", 0, False)
        if mode == "draft-alone":
            return _ServerKey(self.draft_gguf, "target only", 0, False)
        if mode == "ngram-simple":
            return _ServerKey(self.target_gguf, "n-gram", int(k), False)
        return _ServerKey(self.target_gguf, "draft model", int(k), mode == "draft-probabilistic")

    def _params(self, key: _ServerKey):
        xlc = self._xlc
        p = xlc.CommonParams()
        p.model.path = key.model
        p.n_ctx, p.n_parallel = self.n_ctx, 1  # one slot: requests in turn, metric changes per request
        p.cpuparams.n_threads = p.cpuparams_batch.n_threads = self.threads
        p.endpoint_metrics = True
        p.cache_ram_mib = 0  # its default keeps 8 GiB of prompts in memory
        p.verbosity = 1  # errors only: its own threads write the log to this process's stderr
        spec = p.speculative
        if key.spec == "draft model":
            spec.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]  # a path alone does not
            draft = spec.draft
            draft.mparams.path = self.draft_gguf
            draft.n_max, draft.n_min, draft.p_min = key.k, 0, 0.0  # always K drafts, as specviz drafts
            draft.probabilistic = key.probabilistic
            draft.cpuparams.n_threads = draft.cpuparams_batch.n_threads = self.threads
        elif key.spec == "n-gram":
            spec.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
            spec.ngram_simple.size_n, spec.ngram_simple.size_m, spec.ngram_simple.min_hits = NGRAM_SIZE_N, key.k, 1
        return p

    def _ensure(self, key: _ServerKey) -> float:
        """Make the server for ``key`` current (never two at once); seconds spent loading."""
        if self._key == key and self._server is not None:
            return 0.0
        self.close()
        t0 = time.perf_counter()
        self._server = self._xlc.Server(self._params(key))
        self._key = key
        return time.perf_counter() - t0

    def run(self, prompt: str, *, mode: str = "plain", k: int = 4, temperature: float = 0.0, max_tokens: int = 96,
            seed: int = 0) -> dict[str, Any]:
        """One chat request (llama.cpp applies the GGUF's chat template) and the engine's figures
        (:func:`lane_figures`), with ``mode``, ``k``, ``temperature`` and the load time.

        Raises:
            ValueError: an unknown mode, or a draft mode without the draft's GGUF.
            RuntimeError: the engine answered with an error.
        """
        key = self._key_for(mode, k)
        load_s = self._ensure(key)
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": int(max_tokens),
                "temperature": float(temperature), "seed": int(seed),
                "cache_prompt": False}  # every run processes its prompt afresh: comparable prompt times
        before = _metrics(self._server.handle_metrics())
        response = self._server.handle_chat_completions(body)
        after = _metrics(self._server.handle_metrics())
        if not isinstance(response, dict) or "choices" not in response:
            raise RuntimeError(f"llama.cpp answered with an error: {str(response)[:300]}")
        change = {name: after[name] - before.get(name, 0.0) for name in after if name.split("{")[0] not in _GAUGES}
        figures = lane_figures(response, change)
        figures.update(mode=mode, k=key.k, temperature=float(temperature), seed=int(seed), load_s=load_s)
        return figures

    def forward_ms(self, prefix_ids: list[int], n_new: int, repeats: int = 3) -> float:
        """The engine's own time (``prompt_ms``, median of ``repeats``) of one target forward over
        exactly ``n_new`` new positions after the cached ``prefix_ids``: the shape of a verify pass
        with K = n_new − 1. Runs on the plain target server."""
        self._ensure(self._key_for("plain", 0))
        filler = (prefix_ids * n_new)[:n_new]  # never what the model would write next: no cache hit
        times = []
        for _ in range(repeats):
            self._server.handle_completions({"prompt": prefix_ids, "max_tokens": 1, "temperature": 0.0,
                                             "cache_prompt": True})
            timings = self._server.handle_completions({"prompt": prefix_ids + filler, "max_tokens": 1,
                                                       "temperature": 0.0, "cache_prompt": True})["timings"]
            if int(timings["prompt_n"]) != n_new:
                raise RuntimeError(f"the engine evaluated {timings['prompt_n']} positions, not {n_new}")
            times.append(float(timings["prompt_ms"]))
        return sorted(times)[len(times) // 2]

    def tokenize(self, text: str) -> list[int]:
        """The target's token ids of ``text`` (special tokens parsed), from the engine's ``/tokenize``."""
        import json
        import urllib.request

        self._ensure(self._key_for("plain", 0))
        request = urllib.request.Request(self._server.listening_address + "/tokenize",
                                         data=json.dumps({"content": text, "add_special": False,
                                                          "parse_special": True}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return list(json.loads(answer.read())["tokens"])

    def measure_costs(self, prompt: str, *, k: int = 4, mode: str = "draft-greedy", temperature: float = 0.0,
                      max_tokens: int = 96, seed: int = 0) -> dict[str, Any]:
        """The engine's own c and v on ``prompt`` (module docstring): a plain run of the target, a
        K + 1-position forward, a plain run of the draft alone, and a speculative run, one server
        at a time. Returns ``{"k", "target_step_ms", "draft_step_ms", "c", "v", "v_batch",
        "verify_pass_ms", "runs": {"plain", "draft_alone", "speculative"}}``."""
        plain = self.run(prompt, mode="plain", temperature=temperature, max_tokens=max_tokens, seed=seed)
        t_target = plain["step_ms"]
        prefix = self.tokenize(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{plain['text']}")
        batch_ms = self.forward_ms(prefix, k + 1)
        alone = self.run(prompt, mode="draft-alone", temperature=temperature, max_tokens=max_tokens, seed=seed)
        t_draft = alone["step_ms"]
        spec = self.run(prompt, mode=mode, k=k, temperature=temperature, max_tokens=max_tokens, seed=seed)
        passes = spec["verify_passes"]
        t_verify = (spec["predicted_ms"] - spec["draft_n"] * t_draft) / passes if passes else math.nan
        return {"k": k, "target_step_ms": t_target, "draft_step_ms": t_draft, "c": t_draft / t_target,
                "v": t_verify / t_target, "v_batch": batch_ms / t_target, "verify_pass_ms": t_verify,
                "runs": {"plain": plain, "draft_alone": alone, "speculative": spec}}


def lane_figures(response: dict, change: dict[str, float]) -> dict[str, Any]:
    """One llama.cpp response's figures in specviz's units (module docstring).

    Args:
        response: the chat completion (``choices``, ``timings``).
        change: each ``/metrics`` counter's change over the request.

    Returns:
        ``text``, ``finish_reason``, ``predicted_n``, ``predicted_ms``, ``decode_tokens_per_s``,
        ``prompt_n``, ``prompt_ms``, ``draft_n``, ``draft_n_accepted``, ``acceptance`` (None when
        nothing was drafted), ``verify_passes``, ``passes_with_draft``, ``tokens_per_pass``,
        ``step_ms`` (generation time ÷ verify passes), ``accepted_per_position`` (the
        ``/metrics`` counters' change) and ``alpha`` (accepted ÷ tested; None without counters).
    """
    t = response.get("timings", {})
    predicted, predicted_ms = int(t.get("predicted_n", 0)), float(t.get("predicted_ms", 0.0))
    drafted, accepted = int(t.get("draft_n", 0) or 0), int(t.get("draft_n_accepted", 0) or 0)
    passes = max(predicted - accepted - 1, 0)
    decodes = change.get("llamacpp:n_decode_total")
    if decodes is not None and int(decodes) - 1 != passes:  # the engine's own counter, where they differ
        passes = int(decodes) - 1
    per_position = sorted((int(re.search(r'position="(\d+)"', name).group(1)), int(value))
                          for name, value in change.items()
                          if name.startswith("llamacpp:spec_decode_num_accepted_tokens_per_pos_total"))
    drafts = change.get("llamacpp:spec_decode_num_drafts_total")
    kept = [value for _, value in per_position]
    # α = accepted ÷ tested; a pass tests every draft it keeps, plus the one it rejects unless it kept all
    # K (kept[-1] counts those passes). Exact when every draft is K long; llama.cpp drafts fewer at the
    # very end of a request, where a short draft kept whole still counts one test too many.
    alpha = accepted / (accepted + int(drafts) - kept[-1]) if kept and drafts else None
    choice = response["choices"][0]
    return {
        "text": choice.get("message", {}).get("content", ""), "finish_reason": choice.get("finish_reason"),
        "predicted_n": predicted, "predicted_ms": predicted_ms,
        "decode_tokens_per_s": decode_tokens_per_s(predicted, predicted_ms) or 0.0,
        "prompt_n": int(t.get("prompt_n", 0)), "prompt_ms": float(t.get("prompt_ms", 0.0)),
        "draft_n": drafted, "draft_n_accepted": accepted, "acceptance": accepted / drafted if drafted else None,
        "verify_passes": passes, "passes_with_draft": None if drafts is None else int(drafts),
        "tokens_per_pass": (predicted - 1) / passes if passes else None,
        "step_ms": predicted_ms / passes if passes else None,
        "accepted_per_position": kept, "alpha": alpha,
    }


def why_sentence(engine: str, alpha: float | None, k: int, c: float | None, v: float | None,
                 measured: float | None) -> str:
    """Why an engine's speculation won or lost, from the closed form at its own α, c and v:
    ``expected_speedup(α, K, c, v)`` (Leviathan et al. 2023) beside the measured speedup.

    Args:
        engine: its name, as the sentence should say it.
        alpha: the per-token acceptance α (for llama.cpp's greedy drafts, its accepted ÷ drafted).
        k: lookahead K; c, v: the engine's own cost ratio and verify cost; measured: its speedup.
    """
    if alpha is None or c is None or v is None or not math.isfinite(c) or not math.isfinite(v):
        return f"{engine}: its α, c or v could not be measured on this run."
    expected = theory.expected_speedup(min(alpha, 1.0), k, c, v)
    tokens = theory.expected_tokens_per_pass(min(alpha, 1.0), k)
    verdict = "wins" if expected > 1 else "loses"
    said = f" (measured {measured:.2f}×)" if measured is not None else ""
    return (f"{engine}: a pass yields {tokens:.2f} tokens at α = {alpha:.2f} and costs K·c + v = {k}·{c:.2f} + "
            f"{v:.2f} = {k * c + v:.2f} plain steps, so it {verdict}: {expected:.2f}×{said}.")


# --------------------------------------------------------------------------- beside specviz's own run
def gguf_files(prepared) -> tuple[str, str | None]:
    """The GGUF files of a prepared run's pair, for llama.cpp: an offline model's own (kept when it
    was prepared). Nothing is guessed for a hub model or a directory.

    Raises:
        ValueError: naming the model whose GGUF specviz does not have.
    """
    from specviz.models.offline import gguf_path

    request = prepared.request
    target = gguf_path(request.target)
    if target is None:
        raise ValueError(f"llama.cpp reads GGUF files, and specviz has none for {request.target!r}: the offline pair "
                         "(qwen2.5-coder-1.5b-instruct ← qwen2.5-coder-0.5b-instruct) keeps its own; for another "
                         "model convert it with llama.cpp's convert_hf_to_gguf.py")
    if prepared.drafter is None or not getattr(prepared.drafter, "uses_model", False):
        return str(target), None
    draft = gguf_path(request.draft)
    if draft is None:
        raise ValueError(f"llama.cpp reads GGUF files, and specviz has none for the draft {request.draft!r}")
    return str(target), str(draft)


def specviz_row(prepared, baseline=None) -> dict[str, Any]:
    """specviz's own exact run of ``prepared`` (warm-up, one speculative run, the plain baseline
    timed as the page times it) in the lane's units: decode tokens/s of both, their ratio, the
    acceptance rate, α, tokens per pass, c and v (:func:`specviz.figures.analysis.analyse`)."""
    from specviz.figures.analysis import analyse_generation
    from specviz.run.runner import measure_plain

    prepared.warm_up()
    run = prepared.generation().run()
    baseline = baseline or measure_plain(prepared)
    a = analyse_generation(run, baseline)
    spec = decode_tokens_per_s(len(run.tokens), run.elapsed_s * 1e3 - run.prefill_ms)
    plain = 1e3 / baseline.step_ms if baseline is not None and baseline.step_ms else None
    return {"engine": "specviz", "mode": f"exact rule ({prepared.request.rule})", "text": run.text,
            "decode_tokens_per_s": spec, "plain_decode_tokens_per_s": plain,
            "decode_speedup": spec / plain if spec and plain else None, "acceptance": a.acceptance_rate,
            "alpha": a.alpha, "tokens_per_pass": a.tokens_per_pass, "c": a.cost_ratio_c, "v": a.verify_cost_v,
            "k": a.k, "why": why_sentence("specviz", a.alpha, a.k, a.cost_ratio_c, a.verify_cost_v,
                                          spec / plain if spec and plain else None)}


def llamacpp_rows(target_gguf: str, draft_gguf: str | None, prompt: str, *, k: int, temperature: float,
                  max_tokens: int, threads: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """The same prompt in llama.cpp: plain, then draft-model speculation with greedy and with
    probabilistic drafting (where there is a draft) and n-gram lookup, with the engine's own c and
    v (:meth:`LlamaCppLane.measure_costs`) and one :func:`why_sentence` each.

    Raises:
        ImportError: without xllamacpp (:data:`INSTALL_HINT`).
    """
    rows = []
    with LlamaCppLane(target_gguf, draft_gguf, threads=threads) as lane:
        settings = dict(k=k, temperature=temperature, max_tokens=max_tokens, seed=seed)
        costs = lane.measure_costs(prompt, mode="draft-greedy", **settings) if draft_gguf else None
        plain = costs["runs"]["plain"] if costs else lane.run(prompt, mode="plain", **settings)
        rows.append({"engine": "llama.cpp", "mode": "plain", **plain})
        runs = []
        if costs:
            runs += [("draft-greedy", costs["runs"]["speculative"]),
                     ("draft-probabilistic", lane.run(prompt, mode="draft-probabilistic", **settings))]
        runs.append(("ngram-simple", lane.run(prompt, mode="ngram-simple", **settings)))
    base = plain["decode_tokens_per_s"]
    for mode, run in runs:
        speedup = run["decode_tokens_per_s"] / base if base else None
        lookup = mode == "ngram-simple"  # nothing to run to draft: c = 0, and no v was measured for it
        c = 0.0 if lookup else (costs["c"] if costs else None)
        v = None if lookup else (costs["v"] if costs else None)
        alpha = run["alpha"]
        rows.append({"engine": "llama.cpp", **run, "mode": mode, "decode_speedup": speedup, "c": c, "v": v,
                     "v_batch": costs["v_batch"] if costs else None,
                     "why": why_sentence(f"llama.cpp ({mode})", alpha, k, c, v, speedup) if v is not None else ""})
    return rows
