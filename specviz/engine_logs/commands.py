"""The ``import`` and ``export`` sub-commands' arguments and work (:mod:`specviz.cli` prints).

``python -m specviz import FILE [--engine NAME] [--json]`` (or ``--url URL`` to stream one completion
from a server) reads an engine's file and reports every figure in specviz's units, with the engine
field it came from and what was converted, then the closed forms at the stated c and v.
``python -m specviz export TRACE --engine NAME -o FILE`` writes a saved specviz run in that engine's
format.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specviz.engine_logs.closed_form import closed_form, run_to_dict
from specviz.engine_logs.imported import ENGINES, ImportedRun

__all__ = ["add_engine_parsers", "export_text", "format_import", "import_result"]

DEFAULT_PROMPT = "Rewrite this sentence in plain words: the quick brown fox jumps over the lazy dog."


def add_engine_parsers(sub, cmd_import, cmd_export) -> None:
    """Add ``import`` and ``export`` to the CLI's sub-parsers, calling ``cmd_import`` / ``cmd_export``."""
    imp = sub.add_parser("import", help="read an engine's speculative-decoding numbers (vLLM, SGLang, llama.cpp, mlx)",
                         description="Read a file an engine wrote (a response, a recorded stream, a metrics scrape, "
                                     "a server log) or stream one completion from a server, and show every figure in "
                                     "specviz's units with the engine field it came from and what was converted.")
    imp.add_argument("file", nargs="?", default=None, metavar="FILE", help="the engine's file")
    imp.add_argument("--url", default=None, help="instead of FILE: an OpenAI-compatible completions endpoint to stream "
                                                 "one completion from (e.g. http://localhost:8000/v1/completions)")
    imp.add_argument("--engine", choices=ENGINES, default=None, help="the engine (default: guessed from the file)")
    imp.add_argument("--json", action="store_true", help="print one JSON object")
    imp.add_argument("--before", default=None, metavar="FILE",
                     help="vLLM Prometheus: an earlier scrape of the same server; the difference is one run")
    imp.add_argument("--c", type=float, default=None, dest="c", help="cost ratio c (draft step ÷ target step) for the closed form")
    imp.add_argument("--v", type=float, default=None, dest="v", help="verify cost v (verify pass ÷ target step) for the closed form")
    imp.add_argument("--prompt", default=DEFAULT_PROMPT, help="with --url: the prompt (default: a short rewrite task)")
    imp.add_argument("--max-tokens", type=int, default=64, dest="max_tokens", help="with --url: default %(default)s")
    imp.add_argument("--model", default=None, help="with --url: the served model's name")
    imp.set_defaults(func=cmd_import)
    exp = sub.add_parser("export", help="write a saved specviz run in an engine's format",
                         description="Write a saved run (run --trace FILE) as the engine would report it, to compare "
                                     "with that engine's own output for the same pair.")
    exp.add_argument("trace", metavar="TRACE", help="a trace written by python -m specviz run --trace")
    exp.add_argument("--engine", choices=ENGINES, required=True)
    exp.add_argument("-o", "--output", required=True, metavar="FILE")
    exp.set_defaults(func=cmd_export)


def _read(path: str) -> str:
    from specviz.engine_logs.checks import MAX_BYTES, check_text

    with open(path, "rb") as f:
        return check_text(f.read(MAX_BYTES + 1))


def import_result(args: argparse.Namespace) -> tuple[ImportedRun, dict]:
    """Do the work of ``import``: the run and its closed-form figures.

    Raises:
        ValueError: (EngineFileError and argument errors) with one sentence for the user.
        OSError: for a file that cannot be read.
    """
    from specviz.engine_logs import read_engine_file
    from specviz.engine_logs.stream import display_url, fetch_completion

    if (args.file is None) == (args.url is None):
        raise ValueError("give either FILE or --url URL")
    if args.url is not None:
        text, name = fetch_completion(args.url, args.prompt, args.max_tokens, args.model), display_url(args.url)
    else:
        text, name = _read(args.file), Path(args.file).name
    before = _read(args.before) if args.before else None
    run = read_engine_file(text, name, args.engine, before=before)
    return run, closed_form(run, args.c, args.v)


def _number(x) -> str:
    if isinstance(x, float) and not x.is_integer():
        return f"{x:.4f}"
    return f"{int(x)}" if isinstance(x, (int, float)) else str(x)


def format_import(run: ImportedRun, form: dict, as_json: bool) -> str:
    """``import``'s output: one JSON object, or lines of text (figure, value, engine field, conversion)."""
    if as_json:
        return json.dumps({**run_to_dict(run), "closed_form": form}, ensure_ascii=False)
    lines = [f"{run.engine} · {run.source}" + (" · cumulative over the server's life" if run.cumulative else "")
             + (f" · K = {run.k}" if run.k else "") + (f" · {run.passes} verify passes" if run.passes else "")]
    for f in run.figures:
        lines.append(f"  {f.name}: {_number(f.value)}   [{f.engine_field}]" + (f" {f.conversion}" if f.conversion else ""))
    if run.accepted_histogram is not None:
        lines.append("  passes by accepted drafts (bonus not counted): "
                     + " · ".join(f"{j}: {n}" for j, n in enumerate(run.accepted_histogram)))
    if run.token_kinds is not None:
        kinds = {kind: run.token_kinds.count(kind) for kind in ("draft", "target", "unknown")}
        lines.append("  tokens: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()))
    if form["expected_tokens_per_pass"] is not None:
        lines.append(f"  closed form at α = {form['alpha']:.4f}, K = {form['k']}: {form['expected_tokens_per_pass']:.3f} "
                     "tokens per pass (Leviathan et al. 2023, eq. 1)")
    if form["theoretical_speedup"] is not None:
        lines.append(f"  at c = {form['c']:g}, v = {form['v']:g}: theoretical speedup {form['theoretical_speedup']:.3f}×")
    if form["engine_k"] is not None:
        lines.append(f"  the K an engine would pick (vLLM Adaptive K): {form['engine_k']} "
                     f"(goodput {form['engine_k_goodput']:.3f})")
    elif form["c"] is None or form["v"] is None:
        lines.append("  give --c and --v (your measured cost ratio and verify cost) for the speedup and the K an engine "
                     "would pick")
    lines += [f"  note: {n}" for n in run.notes]
    return "\n".join(lines)


def export_text(args: argparse.Namespace) -> str:
    """Do the work of ``export``: the trace in the engine's format, written to ``args.output``; returns
    a one-line summary.

    Raises:
        specviz.figures.trace.TraceError: for a file that is not a readable trace.
    """
    from specviz.figures.trace import load_trace_file
    from specviz.engine_logs.writers import write

    rounds, meta = load_trace_file(args.trace)
    text = write(args.engine, rounds, meta)
    Path(args.output).write_text(text, encoding="utf-8")
    drafting = sum(1 for r in rounds if r.drafted)
    return f"wrote {args.output}: {len(rounds)} passes ({drafting} drafting) as {args.engine} reports them"
