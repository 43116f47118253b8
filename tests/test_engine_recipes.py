"""What to run in each engine for the pair on screen: llama.cpp gets GGUF files and the flags that turn
speculation on (a draft path alone does not), vLLM and SGLang hub ids; a model an engine cannot load
is named, not guessed."""

from __future__ import annotations

import shlex

from specviz.engine_logs.recipes import engine_commands


def test_the_pairs_commands_turn_speculation_on_with_its_k():
    llama, vllm, sglang = engine_commands("Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct", 4, 0.7,
                                          target_gguf="/m/t.gguf", draft_gguf="/m/d.gguf", threads=1)
    args = shlex.split(llama.command.split(" 2>")[0])
    assert args[:3] == ["llama-server", "-m", "/m/t.gguf"] and args[args.index("-md") + 1] == "/m/d.gguf"
    assert args[args.index("--spec-type") + 1] == "draft-simple" and args[args.index("--spec-draft-n-max") + 1] == "4"
    assert args[args.index("--spec-draft-sampling") + 1] == "probabilistic" and "--metrics" in args
    assert '"num_speculative_tokens": 4' in vllm.command and "--per-request-spec-decode-metrics detailed" in vllm.command
    assert "--speculative-algorithm STANDALONE" in sglang.command and "--speculative-num-draft-tokens 5" in sglang.command
    assert all('"temperature": 0.7' in c.request and "python -m specviz import" in c.bring_back
               for c in (llama, vllm, sglang))


def test_prompt_lookup_needs_no_draft_model_anywhere():
    llama, vllm, sglang = engine_commands("org/target", None, 3, 0.0, target_gguf="/m/t.gguf", lookup=True)
    assert "--spec-type ngram-simple" in llama.command and "-md" not in llama.command
    assert '"method": "ngram"' in vllm.command and "NGRAM" in sglang.command


def test_a_model_an_engine_cannot_load_is_named_not_guessed():
    llama, vllm, sglang = engine_commands(None, None, 4, 0.0)
    assert not llama.command and "GGUF" in llama.missing and "the target" in llama.missing
    assert not vllm.command and vllm.missing and not sglang.command
    hub_only = engine_commands("org/t", "org/d", 4, 0.0)[0]
    assert "specviz has none for the target" in hub_only.missing
