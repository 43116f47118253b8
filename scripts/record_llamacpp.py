"""Record real llama.cpp output (via the xllamacpp wheel) as test fixtures for specviz:
``python -m scripts.record_llamacpp --install`` wrote tests/fixtures/engines/llamacpp_b<build>_*.

Every fixture comes from the real engine: llama.cpp's own server code running
inside a Python process through ``xllamacpp`` (``pip install xllamacpp``).
Nothing is synthesised or edited, except that JSON written from Python
objects (the ``*.expected.json`` summaries) is computed from the engine's
responses.

How it works
------------
The parent process runs a sequence of *workers*, one at a time (never two
models loaded at once).  Each worker is this same script re-executed as a
child process (``--worker NAME``) whose **stderr file descriptor** is a log
file, because llama.cpp logs from its own C++ threads directly to fd 2 (there
is no Python logging hook and no log-file option in ``CommonParams``).  The
worker builds ``xllamacpp.CommonParams``, starts ``xllamacpp.Server`` (which
also listens on ``127.0.0.1:<random port>``), sends requests, writes its
fixture files, and exits.

Raw HTTP bodies (``completion.json``, ``stream.sse``, ``ngram_completion.json``,
``metrics.prom``) are fetched from the in-process server's own HTTP listener
so they are byte-for-byte what llama.cpp sends.  (In-process calls return
parsed Python objects, and in-process streaming strips the ``data: `` prefix
and the ``[DONE]`` line -- ``stream_inprocess.jsonl`` shows what the Python
callback receives.)

Fixtures written to ``--out`` (default ``fixtures/``)
----------------------------------------------------
completion.json                  raw body of one non-streamed /v1/chat/completions
                                 response, draft-model speculation (greedy drafts)
completion.request.json          the request body that produced it
stream.sse                       raw bytes of one streamed response (SSE)
stream.request.json              its request body
stream_inprocess.jsonl           the same request via Server.handle_chat_completions
                                 with a callback: one JSON object per callback call
props.json                       raw /props body of the speculative server
completion_server.log            server log (fd 2) of the worker above
server_27_requests.log           server log while serving 27 requests (3 prompts x
                                 T in {0, 0.7, 1.0} x 3 seeds, draft speculation)
server_27_requests.expected.json per-request timings and the totals an importer of
                                 the log must reproduce
trace_level.log                  log at verbosity 4 (trace): adds "acc per pos" and
                                 "statistics draft-simple: ..." lines
metrics.prom                     raw /metrics scrape after the trace-level requests
metrics.expected.json            sums of those requests' timings the counters match
ngram_completion.json            raw body of one response with n-gram speculation
ngram_completion.request.json    its request body
trace_level_ngram.log            the n-gram worker's log at verbosity 4
debug_level.log                  log at verbosity 5 (debug), one short request: per pass
                                 "accepted a/b draft tokens" and every draft position's
                                 top-3 candidates with draft probabilities
debug_level.expected.json        that request and its timings
README.md                        command, versions, build info, date, settings

Usage
-----
    python -m specviz prepare qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct   # the pair's GGUF files
    python -m scripts.record_llamacpp                  # everything into llamacpp_fixtures/ (~10 min, 1 thread)
    python -m scripts.record_llamacpp --install        # and copy the tests' files into tests/fixtures/engines
    python -m scripts.record_llamacpp --only completion ngram
    python -m scripts.record_llamacpp --target T.gguf --draft D.gguf --out fixtures --k 4

``--install`` copies, under the prefix ``llamacpp_b<build>_``: completion.json, stream.sse,
ngram_completion.json, metrics.prom, metrics.expected.json, server_27_requests.log (as 27_requests.log)
and its .expected.json (as 27_requests.expected.json), trace_level.log (as trace.log) and
trace_level_ngram.log (as trace_ngram.log).

Workers: completion (completion + stream + props), server27, trace (trace log
+ metrics), ngram, debug.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path.cwd()
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "engines"
#: What --install copies into tests/fixtures/engines, and under which name after the prefix.
INSTALLED = {"completion.json": "completion.json", "stream.sse": "stream.sse",
             "ngram_completion.json": "ngram_completion.json", "metrics.prom": "metrics.prom",
             "metrics.expected.json": "metrics.expected.json", "server_27_requests.log": "27_requests.log",
             "server_27_requests.expected.json": "27_requests.expected.json", "trace_level.log": "trace.log",
             "trace_level_ngram.log": "trace_ngram.log"}


def _pair_gguf(name: str) -> str | None:
    """The offline pair's own GGUF (kept by ``specviz prepare``), or None before it is prepared."""
    from specviz.models.offline import gguf_path

    path = gguf_path(name)
    return str(path) if path else None

PROMPTS = {
    "code": (
        ("Write a Python function is_prime(n) that returns True when n is prime, "
         "with a docstring and three doctests."),
        0.0,
    ),
    "explanation": ("Explain in three sentences why the sky is blue.", 0.7),
    "data": (
        ('Convert this JSON to YAML: {"name": "specviz", "version": 2, "tags": '
         '["speculative", "sampling"], "authors": [{"name": "Ada", "role": "lead"}]}'),
        0.0,
    ),
}

WORKERS = ("completion", "server27", "trace", "ngram", "debug")


# ---------------------------------------------------------------------------
# helpers used inside workers
# ---------------------------------------------------------------------------


def _messages(name: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPTS[name][0]}]


def _make_params(args, *, spec: str, verbosity: int):
    """CommonParams for one server. spec: 'draft' | 'draft-prob' | 'ngram' | 'none'."""
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = args.target
    p.n_ctx = 2048
    p.n_parallel = 1
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.n_threads_http = 2
    p.endpoint_metrics = True
    p.cache_ram_mib = 256  # default 8192 MiB host prompt cache; keep memory bounded
    p.verbosity = verbosity
    if spec in ("draft", "draft-prob"):
        # A draft path alone does NOT enable speculation; the type must be set.
        p.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        d = p.speculative.draft
        d.mparams.path = args.draft
        d.n_max = args.k
        d.n_min = 0
        d.p_min = 0.0
        d.probabilistic = spec == "draft-prob"
        d.cpuparams.n_threads = args.threads
        d.cpuparams_batch.n_threads = args.threads
    elif spec == "ngram":
        p.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        p.speculative.ngram_simple.size_n = args.ngram_n
        p.speculative.ngram_simple.size_m = args.k
        p.speculative.ngram_simple.min_hits = 1
    return p


def _http_post(base: str, path: str, body: dict) -> bytes:
    req = urllib.request.Request(
        base + path, data=json.dumps(body).encode("utf-8"), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        return resp.read()


def _http_get(base: str, path: str) -> bytes:
    with urllib.request.urlopen(base + path, timeout=60) as resp:
        return resp.read()


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _request(name: str, *, temperature: float | None = None, seed: int = 0, max_tokens: int = 96, **kw) -> dict:
    body = {
        "messages": _messages(name),
        "max_tokens": max_tokens,
        "temperature": PROMPTS[name][1] if temperature is None else temperature,
        "seed": seed,
    }
    body.update(kw)
    return body


def _timings_sums(timings: list[dict]) -> dict:
    keys = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "draft_n", "draft_n_accepted", "cache_n")
    sums = {k: sum(t.get(k, 0) or 0 for t in timings) for k in keys}
    # Every target decode after the prompt yields 1 token + the drafts it accepts.
    sums["verify_passes_derived"] = sum(t["predicted_n"] - (t.get("draft_n_accepted") or 0) - 1 for t in timings)
    return sums


# ---------------------------------------------------------------------------
# workers (run in a child process; fd 2 is the log file)
# ---------------------------------------------------------------------------


def _record_code_completion(args, out: Path, spec: str, verbosity: int, name: str):
    """Start llama.cpp's server in this process with ``spec`` drafting, send it the code prompt and
    write the response (``name``.json) and the request (``name``.request.json); returns the server
    and the response's bytes."""
    import xllamacpp as xlc

    srv = xlc.Server(_make_params(args, spec=spec, verbosity=verbosity))
    req = _request("code", seed=0)
    raw = _http_post(srv.listening_address, "/v1/chat/completions", req)
    (out / f"{name}.json").write_bytes(raw)
    _write_json(out / f"{name}.request.json", req)
    return srv, raw


def worker_completion(args, out: Path) -> dict:
    srv, raw = _record_code_completion(args, out, "draft", 3, "completion")
    base = srv.listening_address

    sreq = _request("explanation", seed=1, stream=True)
    raw_sse = _http_post(base, "/v1/chat/completions", sreq)
    (out / "stream.sse").write_bytes(raw_sse)
    _write_json(out / "stream.request.json", sreq)

    chunks: list = []
    srv.handle_chat_completions(dict(sreq), chunks.append)
    with open(out / "stream_inprocess.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in chunks)

    (out / "props.json").write_bytes(_http_get(base, "/props"))
    del srv
    return {"completion_bytes": len(raw), "stream_bytes": len(raw_sse), "inprocess_chunks": len(chunks)}


def worker_server27(args, out: Path) -> dict:
    import xllamacpp as xlc

    srv = xlc.Server(_make_params(args, spec="draft", verbosity=3))
    names = list(PROMPTS)
    temps = (0.0, 0.7, 1.0)
    per_request = []
    for i in range(27):
        name = names[i % 3]
        temp = temps[(i // 3) % 3]
        seed = i // 9  # 3 seeds; T=0 repeats hit llama.cpp's prompt cache (realistic)
        req = _request(name, temperature=temp, seed=seed)
        resp = srv.handle_chat_completions(req)
        t = resp["timings"]
        per_request.append(
            {
                "index": i,
                "prompt": name,
                "temperature": temp,
                "seed": seed,
                "finish_reason": resp["choices"][0]["finish_reason"],
                "timings": t,
            }
        )
        print(f"[server27] {i + 1}/27 {name} T={temp} draft {t.get('draft_n_accepted')}/{t.get('draft_n')}",
              file=sys.stdout, flush=True)
    del srv
    timings = [r["timings"] for r in per_request]
    acc = sum(t.get("draft_n_accepted", 0) for t in timings)
    drafted = sum(t.get("draft_n", 0) for t in timings)
    expected = {
        "requests": 27,
        "accepted": acc,
        "drafted": drafted,
        "acceptance": acc / drafted if drafted else None,
        "sums": _timings_sums(timings),
        "note": (
            "accepted/drafted are sums of the responses' timings.draft_n_accepted / timings.draft_n; "
            "each must equal the 'N accepted / M generated' numbers of the matching "
            "'draft acceptance = ...' log line (one per request, in order)."
        ),
        "per_request": per_request,
    }
    _write_json(out / "server_27_requests.expected.json", expected)
    return {"accepted": acc, "drafted": drafted}


def worker_trace(args, out: Path) -> dict:
    import xllamacpp as xlc

    srv = xlc.Server(_make_params(args, spec="draft", verbosity=4))
    base = srv.listening_address
    plan = [("code", None, 0), ("explanation", None, 1), ("data", None, 0), ("explanation", 1.0, 2)]
    per_request = []
    for name, temp, seed in plan:
        req = _request(name, temperature=temp, seed=seed, cache_prompt=False)
        resp = srv.handle_chat_completions(req)
        per_request.append({"prompt": name, "temperature": req["temperature"], "seed": seed, "timings": resp["timings"]})
    metrics = _http_get(base, "/metrics")
    (out / "metrics.prom").write_bytes(metrics)
    del srv
    timings = [r["timings"] for r in per_request]
    sums = _timings_sums(timings)
    expected = {
        "requests": len(timings),
        "sums": sums,
        "counters_should_equal": {
            "llamacpp:spec_decode_num_draft_tokens_total": sums["draft_n"],
            "llamacpp:spec_decode_num_accepted_tokens_total": sums["draft_n_accepted"],
            "llamacpp:tokens_predicted_total": sums["predicted_n"],
            "llamacpp:prompt_tokens_total": sums["prompt_n"],
            "llamacpp:n_decode_total": sums["verify_passes_derived"] + len(timings),
        },
        "counters_bounded_by": {
            "llamacpp:spec_decode_num_drafts_total": {
                "max": sums["verify_passes_derived"],
                "note": "verify passes that carried a draft; equals verify_passes_derived when every pass drafted",
            },
        },
        "not_equal_note": (
            "llamacpp:prompt_seconds_total != sum(prompt_ms)/1000 for speculative servers: the per-request "
            "prompt_ms includes the draft model's processing of the prompt, the counter does not (observed). "
            "llamacpp:tokens_predicted_seconds_total == sum(predicted_ms)/1000 up to rounding."
        ),
        "per_request": per_request,
    }
    _write_json(out / "metrics.expected.json", expected)
    return {"metrics_bytes": len(metrics)}


def worker_debug(args, out: Path) -> dict:
    import xllamacpp as xlc

    srv = xlc.Server(_make_params(args, spec="draft", verbosity=5))
    req = _request("explanation", seed=1, max_tokens=32, cache_prompt=False)
    resp = srv.handle_chat_completions(req)
    _write_json(out / "debug_level.expected.json", {"request": req, "timings": resp["timings"]})
    del srv
    return {"draft_n": resp["timings"].get("draft_n"), "accepted": resp["timings"].get("draft_n_accepted")}


def worker_ngram(args, out: Path) -> dict:
    srv, raw = _record_code_completion(args, out, "ngram", 4, "ngram_completion")
    del srv
    return {"ngram_bytes": len(raw)}


WORKER_FUNCS = {
    "completion": (worker_completion, "completion_server.log"),
    "server27": (worker_server27, "server_27_requests.log"),
    "trace": (worker_trace, "trace_level.log"),
    "ngram": (worker_ngram, "trace_level_ngram.log"),
    "debug": (worker_debug, "debug_level.log"),
}


# ---------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------


def _common_argv(args) -> list[str]:
    return [
        "--target", args.target, "--draft", args.draft, "--out", str(args.out),
        "--threads", str(args.threads), "--k", str(args.k), "--ngram-n", str(args.ngram_n),
    ]


def _run_worker(name: str, args) -> dict:
    out = Path(args.out)
    _, logname = WORKER_FUNCS[name]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    t0 = time.time()
    with open(out / logname, "wb") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "scripts.record_llamacpp", "--worker", name] + _common_argv(args),
            stderr=log, stdout=subprocess.PIPE, env=env, check=False, cwd=Path(__file__).resolve().parents[1],
        )
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    for line in lines[:-1]:
        print("   ", line)
    if proc.returncode != 0:
        raise SystemExit(f"worker {name} failed (rc={proc.returncode}); see {out / logname}")
    summary = json.loads(lines[-1]) if lines else {}
    summary["seconds"] = round(time.time() - t0, 1)
    return summary


def _write_readme(args, summaries: dict, started: str) -> None:
    import xllamacpp as xlc

    ver = xlc._version.get_versions()
    cmd = " ".join(["python -m scripts.record_llamacpp"] + sys.argv[1:])
    readme = f"""# llama.cpp fixtures for specviz

Recorded from the real engine by `python -m scripts.record_llamacpp`.

* Command: `{cmd}` (run from `{HERE}`)
* Date (UTC): started {started}, finished {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}
* xllamacpp {xlc.__version__} (git {ver.get('full-revisionid')}, built {ver.get('date')}), CPU wheel from PyPI
* llama.cpp: the wheel reports `build_info: b0-unknown` and `BUILD_INFO = {xlc.BUILD_INFO}`
  (build number/commit not embedded). xllamacpp's version scheme is `YYYY.M.<llama.cpp build>`,
  so this is llama.cpp tag **b{xlc.__version__.split('.')[-1]}** (inferred from the version, not reported).
* System info: `{xlc.get_system_info().strip()}`
* Host: {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs (shared with other work)
* Target: `{args.target}` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M)
* Draft:  `{args.draft}` (Qwen2.5-Coder-0.5B-Instruct)
* Threads: {args.threads} (target, target batch, draft, draft batch); n_ctx 2048; 1 slot; cache_ram_mib 256
* Speculation: `speculative.types = [DRAFT_SIMPLE]`, `draft.n_max = {args.k}`, `n_min = 0`, `p_min = 0.0`,
  `probabilistic = False` (greedy drafts); n-gram: `[NGRAM_SIMPLE]`, `size_n = {args.ngram_n}`, `size_m = {args.k}`, `min_hits = 1`
* Requests: OpenAI chat endpoint `/v1/chat/completions` (llama.cpp applies the GGUF's ChatML template;
  no system message is sent, so the template inserts Qwen's default system prompt), `max_tokens` 96.
* Log verbosity: 3 (info, default) except `trace_level*.log` (4 = trace) and `debug_level.log` (5 = debug).

Prompts: code T=0, explanation T=0.7, data T=0 (see `PROMPTS` in scripts/record_llamacpp.py).

## Files

| file | what |
|---|---|
| completion.json | raw HTTP body, non-streamed chat completion with draft speculation (code prompt, T=0) |
| stream.sse | raw HTTP body of a streamed chat completion (explanation prompt, T=0.7, seed 1); `timings` ride on the last chunk before `data: [DONE]` |
| stream_inprocess.jsonl | the same request body sent again in process (`handle_chat_completions(body, callback)`): what the callback receives, one JSON object per call (no `data: ` prefix, no `[DONE]`). Its text differs from stream.sse although the seed is the same: the second run reuses the cached prompt, and sampling with speculation is not reproducible across cache states |
| props.json | raw `/props`; note `"speculative.types": "none"` in the defaults although the server speculates |
| completion_server.log | fd-2 log of that server (verbosity 3) |
| server_27_requests.log | fd-2 log while serving 27 requests; 27 `draft acceptance = ...` lines |
| server_27_requests.expected.json | per-request timings; totals accepted/drafted |
| trace_level.log | verbosity-4 log, 4 requests (`acc per pos`, `statistics draft-simple: ...`) |
| metrics.prom | raw `/metrics` after those 4 requests |
| metrics.expected.json | sums of the 4 requests' timings that the counters should equal |
| ngram_completion.json | raw body, n-gram speculation (code prompt, T=0) |
| trace_level_ngram.log | verbosity-4 log of the n-gram server |
| debug_level.log | verbosity-5 (debug) log, one 32-token request (explanation, T=0.7, seed 1): per-pass `accepted a/b draft tokens`, per-position draft candidates |
| debug_level.expected.json | that request and its timings |

Worker summaries: `{json.dumps(summaries)}`
"""
    (Path(args.out) / "README.md").write_text(readme, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="target GGUF (default: the offline Qwen2.5-Coder 1.5B's)")
    ap.add_argument("--draft", default=None, help="draft GGUF (default: the offline Qwen2.5-Coder 0.5B's)")
    ap.add_argument("--out", default=str(HERE / "llamacpp_fixtures"), help="output folder (default: %(default)s)")
    ap.add_argument("--install", action="store_true", help="copy the tests' files into tests/fixtures/engines")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp CPU threads (default: 1)")
    ap.add_argument("--k", type=int, default=4, help="draft length n_max / n-gram size_m (default: 4)")
    ap.add_argument("--ngram-n", type=int, default=3, help="n-gram lookup length size_n (default: 3)")
    ap.add_argument("--only", nargs="+", choices=WORKERS, help="run only these workers")
    ap.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.target = args.target or _pair_gguf("qwen2.5-coder-1.5b-instruct")
    args.draft = args.draft or _pair_gguf("qwen2.5-coder-0.5b-instruct")
    if not args.target or not args.draft:
        raise SystemExit("no GGUF files: python -m specviz prepare qwen2.5-coder-1.5b-instruct "
                         "qwen2.5-coder-0.5b-instruct first, or give --target and --draft")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.worker:  # child process: stderr (fd 2) is already the log file
        func, _ = WORKER_FUNCS[args.worker]
        summary = func(args, out)
        print(json.dumps(summary), flush=True)
        return 0

    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        raise SystemExit("xllamacpp is not installed: pip install xllamacpp")

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    summaries = {}
    for name in args.only or WORKERS:
        print(f"== worker {name}", flush=True)
        summaries[name] = _run_worker(name, args)
        print(f"   {summaries[name]}", flush=True)
    _write_readme(args, summaries, started)
    if args.install:
        import shutil

        import xllamacpp as xlc

        prefix = f"llamacpp_b{xlc.__version__.split('.')[-1]}_"
        for source, name in INSTALLED.items():
            if (out / source).exists():
                shutil.copyfile(out / source, FIXTURES / (prefix + name))
                print(f"   {FIXTURES / (prefix + name)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
