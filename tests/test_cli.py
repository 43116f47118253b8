"""The command line, run as users run it: ``python -m specviz ...`` (its ``main`` in this process,
and in a subprocess for the tests of the real entry point and its exit codes).

Most tests use tiny random Llama checkpoints (2 layers, hidden 64) saved to a temporary directory
with a small byte-level BPE tokenizer trained on the spot, so they need no network and no
prepared model. One test runs the real SmolLM2-135M-Instruct (skipped unless
``python -m specviz prepare smollm2-135m-instruct`` has been run): the issue's done-when check,
greedy prompt lookup returns exactly the text of plain greedy decoding in float32.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import bpe_tokenizer

REPO = Path(__file__).resolve().parent.parent
TYPO_PROMPT = (
    "Fix the typos in this text and return only the corrected text: 'Teh quick brown fox jumsp over teh lazy "
    "dog. It was a sunny day and the fox was very hapy to be outside in the feilds.'"
)
KINDS = {"accepted", "resampled", "bonus", "plain"}


class Done(NamedTuple):
    """What a command left: its exit status and what it wrote (subprocess.CompletedProcess's names)."""

    returncode: int
    stdout: str
    stderr: str


def specviz(*args: str, timeout: float = 300) -> Done:
    """``python -m specviz ARGS`` run in this process: :func:`specviz.cli.main`, the function the
    module's ``__main__`` calls, with stdout and stderr captured (not a terminal, as when piped).
    A subprocess per call cost about 3 s of imports each; :func:`specviz_subprocess` keeps the real
    entry point tested. ``timeout`` is accepted for the subprocess form's sake."""
    import torch

    from specviz.cli import main

    out, err = io.StringIO(), io.StringIO()
    # main sets process-wide state a later test must not inherit: torch's threads (--threads) and
    # a root log handler writing to this call's captured stderr.
    threads, handlers = torch.get_num_threads(), logging.root.handlers[:]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            torch.set_num_threads(threads)
            logging.root.handlers[:] = handlers
    return Done(code, out.getvalue(), err.getvalue())


def specviz_subprocess(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m specviz ARGS`` in a subprocess, as a user runs it."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def _save_tiny(path: Path, tokenizer, seed: int, max_positions: int = 256, nan: bool = False) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # peaky distributions: greedy ties are unlikely
        if nan:
            model.model.embed_tokens.weight.fill_(float("nan"))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """Checkpoint directories: target, a second model with the same tokenizer, and broken variants."""
    root = tmp_path_factory.mktemp("tiny")
    english = ["The quick brown fox jumps over the lazy dog. Fix the typos in this sentence, please."] * 20
    other = ["Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."] * 20
    tok = bpe_tokenizer(english, chat=True, vocab_size=400)
    return {
        "target": _save_tiny(root / "target", tok, seed=0),
        "draft": _save_tiny(root / "draft", tok, seed=1),
        "nochat": _save_tiny(root / "nochat", bpe_tokenizer(english, chat=False, vocab_size=400), seed=0),
        "other": _save_tiny(root / "other", bpe_tokenizer(other, chat=False, vocab_size=400), seed=2),
        "short": _save_tiny(root / "short", tok, seed=0, max_positions=32),
        "nan": _save_tiny(root / "nan", tok, seed=0, nan=True),
    }


def _smollm2_prepared() -> bool:
    sys.path.insert(0, str(REPO))
    from specviz.models.loading import cache_dir

    return (cache_dir() / "models" / "smollm2-135m-instruct" / "specviz-prepared.json").is_file()


def run_json(*args: str, in_subprocess: bool = False) -> dict:
    done = (specviz_subprocess if in_subprocess else specviz)("run", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --------------------------------------------------------------------------- run
def test_run_json_reports_a_consistent_run(tiny):
    out = run_json("--target", tiny["target"], "--draft", "ngram", "-k", "4", "--temperature", "0",
                   "--max-new-tokens", "16", "--dtype", "float32", "--prompt", "the quick brown fox the quick brown")
    for key in ("text", "tokens", "target_passes", "proposed", "accepted", "alpha", "tokens_per_pass",
                "finish_reason", "tokens_per_s", "wall_s", "cost_ratio_c", "speedup", "plain_tokens_per_s"):
        assert key in out
    assert 1 <= len(out["tokens"]) <= 16
    assert {t["kind"] for t in out["tokens"]} <= KINDS
    assert all(set(t) == {"id", "text", "kind"} for t in out["tokens"])
    assert out["finish_reason"] in ("length", "eos")
    assert out["finish_reason"] == "eos" or len(out["tokens"]) == 16
    assert 0 <= out["accepted"] <= out["proposed"]
    n_accepted = sum(t["kind"] == "accepted" for t in out["tokens"])
    assert n_accepted == out["accepted"]
    assert out["tokens_per_pass"] == pytest.approx(len(out["tokens"]) / out["target_passes"], abs=1e-3)
    assert out["speedup"] > 0 and out["plain_tokens_per_s"] > 0 and out["cost_ratio_c"] >= 0
    # The diagnostics: each rule's expected tokens per pass as [low, high], the zero-accept share,
    # full and conditional acceptance by position.
    assert set(out["expected_tokens_per_pass"]) >= {"full", "one-hot", "exact-match", "block"}
    assert all(lo <= hi for lo, hi in out["expected_tokens_per_pass"].values())
    assert out["zero_accept_share"] is None or 0 <= out["zero_accept_share"] <= 1
    assert all({"full", "conditional"} <= set(p) for p in out["acceptance_by_position"])


@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_greedy_speculative_text_equals_plain_text(tiny, draft):
    draft_spec = tiny["draft"] if draft == "model" else "ngram"
    common = ("--target", tiny["target"], "--temperature", "0", "--max-new-tokens", "24", "--dtype", "float32",
              "--prompt", "Fix the typos: teh quick brwn fox the quick brown fox", "--chat")
    spec = run_json(*common, "--draft", draft_spec, "-k", "3")
    plain = run_json(*common, "--draft", "none")
    assert spec["text"] == plain["text"]
    assert [t["id"] for t in spec["tokens"]] == [t["id"] for t in plain["tokens"]]
    assert {t["kind"] for t in plain["tokens"]} == {"plain"}
    assert plain["alpha"] is None and plain["speedup"] is None
    if draft == "model":
        assert spec["proposed"] > 0 and spec["cost_ratio_c"] > 0


def test_sampled_run_is_reproducible_per_seed(tiny):
    args = ("--target", tiny["target"], "--draft", tiny["draft"], "--temperature", "1.0", "--top-k", "50",
            "--top-p", "0.9", "--max-new-tokens", "12", "--seed", "7", "--prompt", "the lazy dog", "--no-baseline")
    first, second = run_json(*args), run_json(*args)
    assert first["tokens"] == second["tokens"]
    assert first["speedup"] is None


def test_text_output_has_summary_and_no_colour_when_piped(tiny):
    done = specviz("run", "--target", tiny["target"], "--draft", "ngram", "--max-new-tokens", "8",
                   "--prompt", "the quick brown fox")
    assert done.returncode == 0, done.stderr
    assert "\033[" not in done.stdout
    assert "tokens/pass" in done.stdout and "speedup" in done.stdout


# --------------------------------------------------------------------------- errors
BAD_ARGS = {
    "k-zero": ["-k", "0"],
    "k-too-big": ["-k", "17"],
    "negative-temperature": ["--temperature", "-0.5"],
    "top-p-zero": ["--top-p", "0"],
    "top-p-above-one": ["--top-p", "1.5"],
    "unknown-model": ["--target", "no-such-model-anywhere"],
    "uncached-hub-id": ["--target", "nobody/not-cached-model"],
    "unknown-drafter": ["--draft", "early-exit:many"],
    "unknown-rule": ["--rule", "typical"],
    "block-rule-on-trees": ["--rule", "block", "--branches", "2"],
    "negative-recycle-warm": ["--draft", "recycle", "--recycle-warm", "-1"],
    "recycle-warm-without-recycling": ["--draft", "ngram", "--recycle-warm", "8"],
}


@pytest.mark.parametrize("name", list(BAD_ARGS))
def test_bad_arguments_fail_with_one_line(tiny, name):
    args = ["--target", tiny["target"], "--prompt", "hello", "--max-new-tokens", "4"] + BAD_ARGS[name]
    assert_one_line_error(specviz("run", *args))


@pytest.mark.parametrize("case", ["incompatible-pair", "context-too-long", "non-finite-logits"])
def test_model_errors_fail_with_one_line(tiny, case):
    args = {
        "incompatible-pair": ["--target", tiny["target"], "--draft", tiny["other"]],
        "context-too-long": ["--target", tiny["short"], "--draft", "ngram", "--max-new-tokens", "40"],
        "non-finite-logits": ["--target", tiny["nan"], "--draft", "none"],
    }[case]
    done = specviz("run", "--prompt", "the quick brown fox", *args)
    assert_one_line_error(done)
    expected = {"incompatible-pair": "tokenizer", "context-too-long": "context", "non-finite-logits": "NaN"}[case]
    assert expected in done.stderr


def test_compile_flag_parses_its_modes():
    """``--compile`` alone means torch.compile's default mode; absent means eager; an unknown mode
    is refused by argparse (exit status 2) before any model loads."""
    from specviz.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["bench"]).compile is None
    assert parser.parse_args(["bench", "--compile"]).compile == "default"
    assert parser.parse_args(["run", "--prompt", "x", "--compile", "reduce-overhead"]).compile == "reduce-overhead"
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["bench", "--compile", "fastest"])
    assert exit_info.value.code == 2


def test_the_module_entry_point_exits_0_or_1_with_one_line(tiny):
    done = specviz_subprocess("run", "--target", tiny["target"], "--prompt", "hello", "--max-new-tokens", "4",
                              "-k", "0")
    assert done.returncode == 1
    assert_one_line_error(done)
    usage = specviz_subprocess("run", "--no-such-flag")
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_prepare_unknown_name_fails_with_one_line():
    assert_one_line_error(specviz("prepare", "not-an-offline-model"))


def assert_one_line_error(done: Done | subprocess.CompletedProcess) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("specviz: error: ")


# --------------------------------------------------------------------------- bench
@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_bench_smoke(tiny, tmp_path, draft):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"name": "p", "prompt": "the quick brown fox the quick", "chat": True,
                                    "kind": "copy"}]))
    out, plot = tmp_path / "bench.json", tmp_path / "speedup.html"
    done = specviz("bench", "--target", tiny["target"], "--draft", tiny["draft"] if draft == "model" else "ngram",
                   "-k", "2", "3", "--temperature", "0", "1", "--max-new-tokens", "6", "--repeats", "1",
                   "--dtype", "float32", "--prompts", str(prompts), "--json", str(out), "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    for key in ("plain_ratio_vs_transformers", "spec_ratio_vs_transformers", "speedup", "theoretical_speedup",
                "instrumentation_overhead"):
        assert isinstance(result[key], float), key
    assert len(result["spec"]) == 4 and len(result["plain"]) == 2
    assert "ours/assisted" in done.stdout
    assert "Diagnostics" in done.stdout and all("diagnostics" in row for row in result["spec"])
    assert plot.stat().st_size > 0


def test_recycle_warm_reaches_run_and_bench_and_keeps_greedy_text(tiny, tmp_path):
    """``--recycle-warm N``: ``run`` warms the table from N tokens of the bundled text and keeps
    plain greedy text (float32), saying how many it used; ``bench`` records it and says so."""
    common = ["--target", tiny["target"], "--prompt", "the quick brown fox", "--max-new-tokens", "12",
              "--temperature", "0", "--dtype", "float32", "--no-baseline"]
    plain = run_json(*common, "--draft", "none")
    for shape in ([], ["--branches", "2"]):
        warm = run_json(*common, "--draft", "recycle", "--recycle-warm", "64", *shape, in_subprocess=not shape)
        assert warm["text"] == plain["text"] and warm["recycle_warm"] == warm["recycle_warm_tokens"] == 64
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"name": "p", "prompt": "the lazy dog", "chat": True}]))
    out = tmp_path / "bench.json"
    done = specviz("bench", "--target", tiny["target"], "--draft", "recycle", "--recycle-warm", "32", "-k", "2",
                   "--max-new-tokens", "4", "--repeats", "1", "--dtype", "float32", "--prompts", str(prompts),
                   "--no-transformers", "--no-instrument-check", "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["recycle_warm"] == result["recycle_warm_tokens"] == 32
    assert "table warmed from 32 tokens of fixed text" in done.stdout


@pytest.mark.parametrize("draft", ["ngram", "suffix"])
def test_tree_run_greedy_text_equals_plain_text(tiny, draft):
    """``--branches``/``--tree-nodes`` reach the engine: greedy tree text equals plain text, and the
    JSON says how the trees were shaped."""
    common = ("--target", tiny["target"], "-k", "3", "--temperature", "0", "--max-new-tokens", "16",
              "--dtype", "float32", "--prompt", "the quick brown fox the quick brown dog the quick")
    tree = run_json(*common, "--draft", draft, "--branches", "3", "--tree-nodes", "6")
    plain = run_json(*common, "--draft", "none", "--no-baseline")
    assert tree["text"] == plain["text"]
    assert (tree["branches"], tree["tree_nodes"], tree["notes"]) == (3, 6, [])


def test_static_cache_run_equals_the_dynamic_run(tiny):
    """``--cache static`` reaches the engine (the draft model's one-token steps, the target's padded
    verify passes) and writes the same tokens as the dynamic cache, seeded sampling included; the
    JSON and the trace say which cache ran."""
    common = ("--target", tiny["target"], "--draft", tiny["draft"], "-k", "3", "--temperature", "1.0",
              "--max-new-tokens", "12", "--seed", "7", "--dtype", "float32", "--prompt", "the lazy dog",
              "--no-baseline")
    static, dynamic = run_json(*common, "--cache", "static"), run_json(*common)
    assert static["tokens"] == dynamic["tokens"]
    assert (static["cache"], dynamic["cache"], static["notes"]) == ("static", "dynamic", [])
    done = specviz("run", *common, "--cache", "paged")
    assert done.returncode == 2 and "--cache" in done.stderr


def test_tree_nodes_below_k_fail_with_one_line(tiny):
    done = specviz("run", "--target", tiny["target"], "-k", "4", "--branches", "2", "--tree-nodes", "2",
                   "--prompt", "x")
    assert done.returncode == 1 and "tree nodes" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bench_runs_tree_beside_chain(tiny, tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"name": "p", "prompt": "the quick brown fox the quick", "chat": True,
                                    "kind": "copy"}]))
    out = tmp_path / "bench.json"
    done = specviz("bench", "--target", tiny["target"], "--draft", "suffix", "-k", "2", "--temperature", "0",
                   "--max-new-tokens", "6", "--repeats", "1", "--dtype", "float32", "--prompts", str(prompts),
                   "--branches", "2", "--no-instrument-check", "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert len(result["tree"]) == 1 and len(result["spec"]) == 1
    tree = result["tree"][0]
    assert isinstance(result["tree_ratio_vs_chain"], float) and result["tree_ratio_vs_chain"] == tree["tree_ratio_vs_chain"]
    assert result["speedup"] == tree["speedup"] and result["chain_speedup"] == result["spec"][0]["speedup"]
    assert result["spec_ratio_vs_transformers"] == tree["ratio_vs_transformers"]
    assert tree["same_greedy_text_as_plain"] == 1.0 and tree["same_greedy_text_as_chain"] == 1.0  # float32
    assert result["per_prompt"][0]["tree_ratio_vs_chain"] == pytest.approx(
        result["per_prompt"][0]["tree_speedup"] / result["per_prompt"][0]["speedup"])
    assert "tree/chain" in done.stdout and "as plain, as chain" in done.stdout


def test_chat_without_a_template_runs_on_plain_text_with_a_note(tiny):
    """The one chat-template policy (specviz.run.runner.encode_prompt): plain text and a note, as in
    the app and a sweep, never an error."""
    chat = run_json("--target", tiny["nochat"], "--prompt", "the quick brown fox", "--max-new-tokens", "4",
                    "--chat", "--no-baseline")
    plain = run_json("--target", tiny["nochat"], "--prompt", "the quick brown fox", "--max-new-tokens", "4",
                     "--no-baseline")
    assert chat["notes"][0].endswith("has no chat template: the prompt was used as plain text.")
    assert chat["prompt_tokens"] == plain["prompt_tokens"] and chat["text"] == plain["text"]
    assert not plain["notes"]


# --------------------------------------------------------------------------- one way to a run
def _front_ends_agree(target: str, chat: bool, monkeypatch) -> None:
    """The app's /run, the CLI's run, a sweep's row and prepare_run build the same prompt ids and
    stop ids (each front-end's runs are caught where every run is built, runner.make_generation)."""
    from specviz import cli
    from specviz.run import runner
    from specviz.run.request import validate_request
    from specviz.run.sweep import sweep, sweep_requests
    from specviz.ui.tabs.run_stream import run_demo

    seen = []
    real = runner.make_generation

    def spy(*args, **kwargs):  # PreparedRun passes every argument by name
        run = real(*args, **kwargs)
        seen.append((list(run.prompt_ids), frozenset(run.eos_token_ids)))
        return run

    prompt = "Fix the typos: teh quick brwn fox"
    settings = dict(prompt=prompt, target=target, draft="ngram", k=2, temperature=0.0, top_k=0, top_p=1.0,
                    max_new_tokens=3, seed=0, chat=chat, device="cpu", dtype="float32")
    prepared = runner.prepare_run(validate_request(**settings))
    expected = (prepared.prompt_ids, prepared.stop_ids)
    monkeypatch.setattr(runner, "make_generation", spy)
    argv = ["run", "--target", target, "--prompt", prompt, "--draft", "ngram", "-k", "2", "--temperature", "0",
            "--max-new-tokens", "3", "--device", "cpu", "--dtype", "float32", "--no-baseline"] + (["--chat"] * chat)
    result = cli.run_once(cli.build_parser().parse_args(argv))
    assert seen[-1] == expected and result["prompt_tokens"] == len(prepared.prompt_ids)
    assert result["notes"][: len(prepared.notes)] == prepared.notes
    steps = list(sweep(sweep_requests(validate_request(**settings), "k", [2])))
    assert {(tuple(s.run.prompt_ids), s.stop_ids) for s in steps if s.run is not None} == {
        (tuple(expected[0]), expected[1])}
    row = steps[-1].row
    assert row["prompt_tokens"] == len(expected[0]) and row["notes"][: len(prepared.notes)] == prepared.notes
    assert seen[-1] == expected  # the sweep's plain baseline too
    seen.clear()
    list(run_demo(prompt=prompt, target_id=target, drafter_kind="ngram", draft_model="", early_exit_layers=1, k=2,
                  temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=3, seed=0, chat=chat, device="cpu",
                  dtype="float32", baselines={}, progress=lambda *a, **k: None, public=False))
    full = [built for built in seen if len(built[0]) == len(expected[0])]  # a warm-up may take the prompt's end
    assert len(full) >= 4 and all(built == expected for built in full)  # three baseline samples and the run


@pytest.mark.parametrize("which,chat", [("target", True), ("target", False), ("nochat", True)])
def test_app_cli_sweep_and_prepare_run_build_the_same_prompt(tiny, which, chat, monkeypatch):
    _front_ends_agree(tiny[which], chat, monkeypatch)


@pytest.mark.skipif(not _smollm2_prepared(), reason="run `python -m specviz prepare smollm2-135m-instruct` first")
@pytest.mark.parametrize("chat", [True, False])
def test_app_cli_sweep_and_prepare_run_build_the_same_prompt_on_smollm2(chat, monkeypatch):
    _front_ends_agree("smollm2-135m-instruct", chat, monkeypatch)


# --------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def smollm2_typo_plain():
    """Plain greedy decoding of TYPO_PROMPT on SmolLM2, float32, 48 tokens, with the chat template:
    the reference of both equality tests below (the same settings as their ``common``), run once."""
    return run_json("--target", "smollm2-135m-instruct", "--temperature", "0", "--max-new-tokens", "48",
                    "--dtype", "float32", "--chat", "--prompt", TYPO_PROMPT, "--draft", "none", "--no-baseline")


@pytest.mark.skipif(not _smollm2_prepared(), reason="run `python -m specviz prepare smollm2-135m-instruct` first")
def test_smollm2_greedy_prompt_lookup_equals_plain_in_float32(smollm2_typo_plain):
    common = ("--target", "smollm2-135m-instruct", "--temperature", "0", "--max-new-tokens", "48",
              "--dtype", "float32", "--chat", "--prompt", TYPO_PROMPT)
    spec = run_json(*common, "--draft", "ngram", in_subprocess=True)  # the entry point a user runs
    plain = smollm2_typo_plain
    assert spec["text"] == plain["text"]
    assert spec["proposed"] > 0 and 0 <= spec["alpha"] <= 1
    assert spec["tokens_per_pass"] > 1.0
    assert spec["speedup"] > 0


@pytest.mark.skipif(not _smollm2_prepared(), reason="run `python -m specviz prepare smollm2-135m-instruct` first")
def test_smollm2_greedy_tree_prompt_lookup_equals_plain_in_float32(smollm2_typo_plain):
    """Tree speculation (up to 4 matches per round, K = 4) on the real model: the greedy text is
    plain greedy decoding's, and the trees pay off in tokens per pass on a copy-heavy prompt."""
    common = ("--target", "smollm2-135m-instruct", "--temperature", "0", "--max-new-tokens", "48",
              "--dtype", "float32", "--chat", "--prompt", TYPO_PROMPT)
    tree = run_json(*common, "--draft", "ngram", "--branches", "4", "--no-baseline")
    plain = smollm2_typo_plain
    assert tree["text"] == plain["text"]
    assert tree["tokens_per_pass"] > 1.0 and tree["proposed_per_pass"] > 0


def test_run_trace_writes_a_trace_that_loads_back_with_the_same_rounds(tiny, tmp_path):
    from specviz.figures.analysis import analyse
    from specviz.figures.trace import TRACE_VERSION, trace_from_dict

    path = tmp_path / "run.trace.json"
    out = run_json("--target", tiny["target"], "--draft", "ngram", "-k", "3", "--temperature", "0",
                   "--max-new-tokens", "12", "--dtype", "float32", "--prompt", "the quick brown fox the quick brown",
                   "--trace", str(path))
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "specviz-trace" and data["version"] == TRACE_VERSION
    assert data["settings"]["k"] == 3 and data["versions"]["torch"]
    rounds, meta = trace_from_dict(data)
    assert [t.id for r in rounds for t in r.emitted] == [t["id"] for t in out["tokens"]]
    again = analyse(rounds, 3, meta["wall_s"])
    assert (again.alpha, again.acceptance_rate, again.tokens_per_pass) == (out["alpha"], out["acceptance_rate"],
                                                                          out["tokens_per_pass"])
    assert "_trace" not in out


def test_a_trace_from_a_newer_format_says_why_it_cannot_load():
    from specviz.figures.trace import TRACE_VERSION, trace_from_dict

    with pytest.raises(ValueError, match="upgrade specviz"):
        trace_from_dict({"format": "specviz-trace", "version": TRACE_VERSION + 1, "rounds": []})
    with pytest.raises(ValueError, match="not a specviz trace"):
        trace_from_dict({"rounds": []})
    with pytest.raises(ValueError, match=r"rounds\[0\]: unknown field 'bogus'"):
        trace_from_dict({"format": "specviz-trace", "version": 1, "rounds": [{"index": 0, "bogus": 1}]})


def test_run_rule_is_reported_and_written_to_the_trace(tiny, tmp_path):
    """``run --rule exact-match --json`` says its rule, writes it into the trace, and at T = 0 writes
    the plain greedy text (an exact rule)."""
    from specviz.figures.trace import trace_from_dict, trace_rule

    path = tmp_path / "run.trace.json"
    common = ("--target", tiny["target"], "--temperature", "0", "--max-new-tokens", "12", "--dtype", "float32",
              "--prompt", "the quick brown fox the quick brown", "--no-baseline")
    out = run_json(*common, "--draft", tiny["draft"], "-k", "3", "--rule", "exact-match", "--trace", str(path))
    plain = run_json(*common, "--draft", "none")
    assert out["rule"] == "exact-match" and out["text"] == plain["text"]
    _, meta = trace_from_dict(json.loads(path.read_text(encoding="utf-8")))
    assert trace_rule(meta) == "exact-match"
