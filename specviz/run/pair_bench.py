"""The same-family pair against transformers and llama.cpp, and against the machine's own limit, in one run.

``python -m specviz bench --pair`` runs the offline Qwen2.5-Coder 0.5B → 1.5B pair on prompts of
each kind (:data:`PAIR_PROMPTS`: code at T = 0, an explanation at T = 0.7, JSON → YAML at T = 0),
one process, the same threads for every engine:

* **specviz**, for each weight format (bfloat16, and int4 blocks on torch's CPU kernels,
  :mod:`specviz.models.quantized`): plain decoding and speculative sampling at each K, runs
  alternated; the decode rate (:func:`specviz.figures.speedup.decode_tokens_per_s`), α, tokens
  per pass, c and v (:func:`specviz.figures.analysis.analyse`), and the K that gave the most tokens/s;
* **transformers** (bfloat16): plain ``generate()`` and assisted generation with the same draft
  model and K (:func:`specviz.run.bench.run_benchmark`: ratios of whole-call tokens/s);
* **llama.cpp** (xllamacpp, when installed): the same GGUF files, plain and draft-model
  speculation with greedy and probabilistic drafting (:mod:`specviz.run.llamacpp_lane`), and its
  own c and v;
* **the limit**: the bytes of weights one step reads (:func:`specviz.models.quantized.weight_bytes`;
  for llama.cpp, the GGUF's tensors but the embedding table) ÷ the memory bandwidth measured here
  (:func:`read_bandwidth`) is the fastest a plain step can be; each engine's plain step is shown as
  a fraction of it.

Every rate is a decode rate (tokens after the first ÷ time after the prompt's pass), so engines
that prefill differently compare on the same footing; ratios are worth something only on a quiet
machine, and only against each other within one run.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from specviz.figures.analysis import analyse
from specviz.figures.speedup import PlainBaseline, decode_tokens_per_s

__all__ = ["PAIR_PROMPTS", "PAIR_PROMPTS_FILE", "format_pair_report", "read_bandwidth", "run_pair_bench"]

PAIR_PROMPTS_FILE = Path(__file__).resolve().parents[1] / "data" / "pair_prompts.json"
#: The prompts that tell the pair's whole story: ``{name, prompt, temperature, label}``.
PAIR_PROMPTS: list[dict] = json.loads(PAIR_PROMPTS_FILE.read_text(encoding="utf-8"))
TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"


def read_bandwidth(threads: int, gib: float = 1.0, repeats: int = 5) -> dict[str, float]:
    """The machine's memory bandwidth on ``threads`` torch threads (GB/s, 10⁹ bytes): a sum over a
    ``gib`` GiB float32 tensor (reads it once) and a copy of it (reads and writes it), best of
    ``repeats``. The sum is a decoding step's access pattern: every weight read once."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.ones(int(gib * 2**30) // 4)
        y = torch.empty_like(x)
        nbytes = x.numel() * 4
        read, copy = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            x.sum()
            read.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            y.copy_(x)
            copy.append(time.perf_counter() - t0)
        del x, y
    finally:
        torch.set_num_threads(before)
    return {"read_gb_s": nbytes / min(read) / 1e9, "copy_gb_s": 2 * nbytes / min(copy) / 1e9, "threads": threads}


def gguf_step_bytes(path: str) -> int:
    """The bytes of a GGUF file's tensors one decoding step reads: all but the embedding table
    (read one row a token)."""
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(path).tensors if t.name != "token_embd.weight")


def _timed_runs(prepared, k: int, repeats: int) -> tuple[list, list]:
    """``repeats`` plain and speculative runs of ``prepared`` at lookahead ``k``, alternated (the
    order rotating), each after the same warm-up; returns (plain runs, speculative runs)."""
    request = prepared.request.with_(k=k)
    prepared = type(prepared)(**{**prepared.__dict__, "request": request})
    prepared.warm_up()
    plain, spec = [], []
    for i in range(repeats):
        for speculative in ((False, True) if i % 2 == 0 else (True, False)):
            run = prepared.generation(speculative=speculative, eos=False).run()
            (spec if speculative else plain).append(run)
    return plain, spec


def _decode_rate(runs) -> float | None:
    rates = [decode_tokens_per_s(len(r.tokens), r.elapsed_s * 1e3 - r.prefill_ms) for r in runs]
    rates = [r for r in rates if r]
    return statistics.median(rates) if rates else None


def specviz_rows(prepared, ks: list[int], repeats: int) -> list[dict[str, Any]]:
    """specviz's plain and speculative decode rates at each K for one prepared prompt, with α,
    tokens per pass, c and v of the speculative runs against the plain runs' steps."""
    rows = []
    for k in ks:
        plain, spec = _timed_runs(prepared, k, repeats)
        baseline = PlainBaseline.from_rounds([r for run in plain for r in run.rounds], _decode_rate(plain) or 0.0)
        a = analyse([r for run in spec for r in run.rounds], k, sum(r.elapsed_s for r in spec),
                    sum(r.prefill_ms for r in spec), baseline)
        plain_rate, spec_rate = _decode_rate(plain), _decode_rate(spec)
        rows.append({"k": k, "plain_tokens_per_s": plain_rate, "spec_tokens_per_s": spec_rate,
                     "speedup": spec_rate / plain_rate if spec_rate and plain_rate else None, "alpha": a.alpha,
                     "tokens_per_pass": a.tokens_per_pass, "c": a.cost_ratio_c, "v": a.verify_cost_v,
                     "plain_step_ms": baseline.step_ms if baseline else None})
    return rows


def run_pair_bench(*, weights: tuple[str, ...] = ("bfloat16", "int4"), ks: tuple[int, ...] = (2, 3, 4),
                   threads: int = 1, repeats: int = 2, max_new_tokens: int = 96, transformers: bool = True,
                   llamacpp: bool = True, report=print) -> dict[str, Any]:
    """Everything the module docstring lists, as plain data (``report`` gets a line before each step)."""
    from specviz.models import quantized
    from specviz.models.offline import gguf_path
    from specviz.run.request import validate_request
    from specviz.run.runner import prepare_run

    torch.set_num_threads(threads)
    result: dict[str, Any] = {"threads": threads, "max_new_tokens": max_new_tokens, "repeats": repeats,
                              "torch": torch.__version__, "prompts": PAIR_PROMPTS, "specviz": {}, "transformers": {},
                              "llamacpp": {}}
    report(f"memory bandwidth on {threads} thread(s)…")
    result["bandwidth"] = read_bandwidth(threads)
    for dtype in weights:
        rows = result["specviz"][dtype] = []
        best_k = None  # every K on the first prompt (code); the one that gave the most tokens/s on the others
        for p in PAIR_PROMPTS:
            report(f"specviz {dtype}: {p['name']} (T = {p['temperature']})…")
            request = validate_request(prompt=p["prompt"], target=TARGET, draft=DRAFT, k=max(ks),
                                       temperature=p["temperature"], top_k=0, top_p=1.0,
                                       max_new_tokens=max_new_tokens, seed=0, chat=True, device="cpu", dtype=dtype)
            prepared = prepare_run(request)
            step_bytes = quantized.weight_bytes(prepared.target.model)
            measured = specviz_rows(prepared, list(ks) if best_k is None else [best_k], repeats)
            if best_k is None:
                best_k = max(measured, key=lambda r: r["spec_tokens_per_s"] or 0)["k"]
            rows += [{"prompt": p["name"], "temperature": p["temperature"], "step_bytes": step_bytes, **row}
                     for row in measured]
            if transformers and dtype == "bfloat16":
                result["transformers"][p["name"]] = _transformers(prepared, p, max(ks), max_new_tokens, report)
    if llamacpp:
        result["llamacpp"] = _llamacpp(gguf_path(TARGET), gguf_path(DRAFT), max(ks), threads, max_new_tokens,
                                       report)
    return result


def _transformers(prepared, prompt: dict, k: int, max_new_tokens: int, report) -> dict:
    """transformers' plain ``generate()`` and assisted generation against specviz, whole-call
    tokens/s, one repeat (:func:`specviz.run.bench.run_benchmark`)."""
    from specviz.run.bench import BenchPrompt, run_benchmark

    report(f"transformers: {prompt['name']}…")
    bench = run_benchmark(prepared.target, prepared.drafter, [BenchPrompt(prompt["name"], prompt["prompt"], True)],
                          [k], [prompt["temperature"]], max_new_tokens=max_new_tokens, repeats=1,
                          instrument_check=False, draft_spec=DRAFT)
    plain, spec = bench["plain"][0], bench["spec"][0]
    return {"k": k, "plain_vs_generate": plain["ratio_vs_transformers"], "spec_vs_assisted": spec["ratio_vs_transformers"],
            "assisted_speedup": spec["transformers_speedup"], "specviz_speedup": spec["speedup"],
            "generate_tokens_per_s": plain["transformers_tokens_per_s"],
            "assisted_tokens_per_s": spec["transformers_tokens_per_s"]}


def _llamacpp(target_gguf, draft_gguf, k: int, threads: int, max_new_tokens: int, report) -> dict:
    """llama.cpp on the same GGUF files: plain, greedy and probabilistic drafting on each prompt,
    its c and v on the code prompt, and the bytes its step reads; ``{"missing": why}`` without
    xllamacpp or the files."""
    from specviz.run import llamacpp_lane

    try:
        llamacpp_lane.import_xllamacpp()
    except ImportError as err:
        return {"missing": str(err)}
    if target_gguf is None or draft_gguf is None:
        return {"missing": "the pair's GGUF files are not prepared"}
    out: dict[str, Any] = {"step_bytes": gguf_step_bytes(str(target_gguf)), "rows": []}
    with llamacpp_lane.LlamaCppLane(target_gguf, draft_gguf, threads=threads) as lane:
        report("llama.cpp: its own c and v on the code prompt…")
        costs = lane.measure_costs(PAIR_PROMPTS[0]["prompt"], k=k, max_tokens=max_new_tokens)
        out["costs"] = {key: costs[key] for key in ("k", "target_step_ms", "draft_step_ms", "c", "v", "v_batch")}
        for mode in ("plain", "draft-greedy", "draft-probabilistic"):
            for p in PAIR_PROMPTS:
                report(f"llama.cpp {mode}: {p['name']}…")
                run = lane.run(p["prompt"], mode=mode, k=k, temperature=p["temperature"], max_tokens=max_new_tokens)
                out["rows"].append({"mode": mode, "prompt": p["name"], "temperature": p["temperature"],
                                    **{key: run[key] for key in ("decode_tokens_per_s", "acceptance", "alpha",
                                                                 "tokens_per_pass", "step_ms", "predicted_n")}})
    return out


def format_pair_report(result: dict) -> str:
    """The bench's tables: each engine's decode rates, speedups, α, tokens per pass, c and v, the
    bandwidth limit and each plain step as a fraction of it, and the ratios the goals name."""
    def f(x, spec=".2f"):
        return "–" if x is None else format(x, spec)

    bw = result["bandwidth"]
    lines = [f"memory: {bw['read_gb_s']:.1f} GB/s read (sum), {bw['copy_gb_s']:.1f} GB/s copy, "
             f"{bw['threads']} thread(s); every rate below: tokens after the first ÷ time after the prompt's pass",
             "", f"{'engine':<19} {'prompt':<12} {'K':>2} {'plain t/s':>9} {'spec t/s':>8} {'speedup':>7} {'α':>5} "
             f"{'tok/pass':>8} {'c':>5} {'v':>5} {'plain step ÷ limit':>18}"]
    for dtype, rows in result["specviz"].items():
        for r in rows:
            limit_ms = r["step_bytes"] / (bw["read_gb_s"] * 1e9) * 1e3
            share = f(limit_ms / r["plain_step_ms"]) if r["plain_step_ms"] else "–"
            lines.append(f"{'specviz ' + dtype:<19} {r['prompt']:<12} {r['k']:>2} {f(r['plain_tokens_per_s'], '.1f'):>9} "
                         f"{f(r['spec_tokens_per_s'], '.1f'):>8} {f(r['speedup']):>7} {f(r['alpha']):>5} "
                         f"{f(r['tokens_per_pass']):>8} {f(r['c']):>5} {f(r['v']):>5} {share:>18}")
    lc = result.get("llamacpp") or {}
    if "rows" in lc:
        plain = {r["prompt"]: r for r in lc["rows"] if r["mode"] == "plain"}
        limit_ms = lc["step_bytes"] / (bw["read_gb_s"] * 1e9) * 1e3
        for r in lc["rows"]:
            if r["mode"] == "plain":
                continue
            base = plain[r["prompt"]]
            speedup = r["decode_tokens_per_s"] / base["decode_tokens_per_s"] if base["decode_tokens_per_s"] else None
            costs = lc["costs"]
            lines.append(f"{'llama.cpp ' + r['mode'].removeprefix('draft-'):<19} {r['prompt']:<12} {costs['k']:>2} "
                         f"{f(base['decode_tokens_per_s'], '.1f'):>9} {f(r['decode_tokens_per_s'], '.1f'):>8} "
                         f"{f(speedup):>7} {f(r['alpha']):>5} {f(r['tokens_per_pass']):>8} {f(costs['c']):>5} "
                         f"{f(costs['v']):>5} {f(limit_ms / base['step_ms']) if base['step_ms'] else '–':>18}")
        lines.append(f"llama.cpp's verify forward of K + 1 positions alone: v_batch = {f(lc['costs']['v_batch'])}")
    elif lc.get("missing"):
        lines.append(f"llama.cpp: {lc['missing']}")
    for name, t in (result.get("transformers") or {}).items():
        lines.append(f"transformers ({name}, bfloat16, whole calls): specviz plain ÷ generate() {f(t['plain_vs_generate'])}, "
                     f"specviz speculative ÷ assisted {f(t['spec_vs_assisted'])}; speedups: specviz "
                     f"{f(t['specviz_speedup'])}×, assisted {f(t['assisted_speedup'])}×")
    lines += _goals(result)
    return "\n".join(lines)


def _goals(result: dict) -> list[str]:
    """The ratios the goals name, on the code prompt: specviz's best speculative and plain decode
    rates against llama.cpp's plain one, and specviz's speedup over its own plain decoding."""
    lc = result.get("llamacpp") or {}
    code = [r for rows in result["specviz"].values() for r in rows if r["prompt"] == "code"]
    if not code:
        return []
    best = max(code, key=lambda r: r["spec_tokens_per_s"] or 0)
    fastest_plain = max(r["plain_tokens_per_s"] or 0 for r in code)
    out = [f"best on code: specviz {next(d for d, rows in result['specviz'].items() if best in rows)}, K = {best['k']}: "
           f"{best['spec_tokens_per_s']:.1f} tokens/s, {best['speedup']:.2f}× its own plain decoding"]
    plain = next((r for r in lc.get("rows", []) if r["mode"] == "plain" and r["prompt"] == "code"), None)
    if plain and plain["decode_tokens_per_s"]:
        out.append(f"against llama.cpp's plain decoding on code ({plain['decode_tokens_per_s']:.1f} tokens/s): specviz "
                   f"speculative {best['spec_tokens_per_s'] / plain['decode_tokens_per_s']:.2f}×, specviz plain "
                   f"{fastest_plain / plain['decode_tokens_per_s']:.2f}×")
    return out
