"""What to run in an engine for the pair and settings on screen, and what to bring back.

One command each for llama.cpp's server (b11368 and later: ``--spec-type``, ``--spec-draft-n-max``,
``--spec-draft-sampling``), vLLM (``--speculative-config``, ``--per-request-spec-decode-metrics
detailed``, vLLM PR #48915) and SGLang (``--speculative-algorithm STANDALONE`` for a draft model, or
``NGRAM``), so that a run in the engine can be imported here (``python -m specviz import``) and read
beside specviz's own. Torch-free: the caller names the models (hub ids, GGUF paths) it has.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

__all__ = ["EngineCommand", "engine_commands"]


@dataclass(frozen=True)
class EngineCommand:
    """One engine's command line, what to send it, and what to import afterwards (each a sentence or
    a command), or why it cannot run this pair (``missing``)."""

    engine: str
    command: str
    request: str
    bring_back: str
    missing: str = ""


def _q(text: str) -> str:
    return shlex.quote(str(text))


def engine_commands(target: str | None, draft: str | None, k: int, temperature: float, *,
                    target_gguf: str | None = None, draft_gguf: str | None = None, lookup: bool = False,
                    threads: int | None = None) -> list[EngineCommand]:
    """The commands that run the pair on screen in llama.cpp, vLLM and SGLang.

    Args:
        target, draft: the models' hub ids (None: the engine needs one specviz does not know); no
            draft for prompt lookup.
        k: lookahead K; temperature: the request's.
        target_gguf, draft_gguf: GGUF files for llama.cpp (None: named as missing, never guessed).
        lookup: the drafter is n-gram lookup in the context, not a draft model.
        threads: llama.cpp's CPU threads (None: its default).

    Returns:
        One :class:`EngineCommand` per engine, in the order llama.cpp, vLLM, SGLang.
    """
    body = {"messages": [{"role": "user", "content": "…"}], "max_tokens": 96, "temperature": temperature}
    request = f"POST /v1/chat/completions {json.dumps(body, ensure_ascii=False)}"
    out = [_llamacpp(target_gguf, draft_gguf, k, lookup, threads, request)]
    for engine, build in (("vLLM", _vllm), ("SGLang", _sglang)):
        if target is None or (draft is None and not lookup):
            absent = target if target is None else draft
            out.append(EngineCommand(engine, "", request, "", f"{engine} loads models by hub id or path, and the "
                                     f"model {absent or 'asked for'} has none specviz knows."))
        else:
            out.append(build(target, draft, k, lookup, request))
    return out


def _llamacpp(target_gguf, draft_gguf, k, lookup, threads, request) -> EngineCommand:
    bring_back = ("python -m specviz import server.log (the log at -lv 4: one 'draft acceptance' line per request and "
                  "its 'acc per pos'), or scrape /metrics before and after and import both with --before")
    if target_gguf is None or (draft_gguf is None and not lookup):
        absent = "the target" if target_gguf is None else "the draft"
        return EngineCommand("llama.cpp", "", request, bring_back,
                             f"llama.cpp reads GGUF files, and specviz has none for {absent}: convert it with "
                             "llama.cpp's convert_hf_to_gguf.py.")
    parts = ["llama-server", "-m", _q(target_gguf)]
    if lookup:
        parts += ["--spec-type", "ngram-simple"]
    else:
        parts += ["-md", _q(draft_gguf), "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
                  "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
                  # the rule specviz runs: sampled drafts tested with min(1, p_target/p_draft)
                  "--spec-draft-sampling", "probabilistic"]
    if threads:
        parts += ["-t", str(threads)]
    parts += ["--metrics", "-lv", "4", "2>", "server.log"]
    return EngineCommand("llama.cpp", " ".join(parts), request, bring_back)


def _vllm(target, draft, k, lookup, request) -> EngineCommand:
    config = ({"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3} if lookup
              else {"model": draft, "num_speculative_tokens": k})
    command = (f"vllm serve {_q(target)} --speculative-config {_q(json.dumps(config))} "
               "--per-request-spec-decode-metrics detailed")
    return EngineCommand("vLLM", command, request,
                         "python -m specviz import response.json (each response carries metrics.speculative_decoding)")


def _sglang(target, draft, k, lookup, request) -> EngineCommand:
    if lookup:
        command = (f"python -m sglang.launch_server --model-path {_q(target)} --speculative-algorithm NGRAM "
                   f"--speculative-num-draft-tokens {k + 1}")
    else:
        command = (f"python -m sglang.launch_server --model-path {_q(target)} --speculative-algorithm STANDALONE "
                   f"--speculative-draft-model-path {_q(draft)} --speculative-num-steps {k} "
                   f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}")
    return EngineCommand("SGLang", command, request,
                         "python -m specviz import response.json (meta_info: spec_accept_length, "
                         "spec_correct_drafts_histogram)")
