"""One streamed completion from a server with an OpenAI-compatible API, recorded for the importers.

:func:`fetch_completion` POSTs one completion request with ``stream: true`` (and what each engine
needs to report its speculative counters: vLLM's usage chunk, logprobs for per-token colours) to the
URL it is given, reads the server-sent events (bounded in bytes and time) and returns their text, which
:func:`specviz.engine_logs.read_engine_file` reads like a saved stream. Standard library only (urllib).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from specviz.engine_logs.checks import MAX_BYTES, fail

__all__ = ["display_url", "fetch_completion", "request_body"]


def display_url(url: str) -> str:
    """``url`` as the run's source shows it: scheme, host, port and path, without a user name,
    password, query or fragment (which may hold a key)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def request_body(url: str, prompt: str, max_tokens: int, model: str | None) -> dict:
    """The JSON body of the one completion request, by the endpoint's path: SGLang's native
    ``/generate`` (its ``meta_info`` carries the speculative fields), llama.cpp's native
    ``/completion`` (its final chunk carries ``timings``), else an OpenAI ``/v1/completions`` request,
    streamed with usage (vLLM puts ``metrics.speculative_decoding`` on the usage chunk) and one
    logprob per token (so the stream names its tokens). Greedy, so a rerun compares."""
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    if path.endswith("/generate"):
        return {"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}, "stream": True}
    if path.endswith("/completion"):
        return {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "stream": True}
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": 0}
    if model:
        body["model"] = model
    return body


def fetch_completion(url: str, prompt: str, max_tokens: int = 64, model: str | None = None,
                     timeout_s: float = 120.0) -> str:
    """Stream one completion from ``url`` (an http(s) endpoint such as ``http://host:8000/v1/completions``)
    and return the recorded events as text.

    Raises:
        EngineFileError: for a URL that is not http(s), a server that cannot be reached or answers with
            an error status, or a stream larger than :data:`specviz.engine_logs.checks.MAX_BYTES`.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        fail("url", "the URL", "is not an http:// or https:// address of a completions endpoint")
    data = json.dumps(request_body(url, prompt, max_tokens, model)).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        fail("url", "the server", f"answered HTTP {err.code} to the completion request")
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        fail("url", "the server", f"could not be reached ({str(reason)[:80]})")
    if len(raw) > MAX_BYTES:
        fail("url", "the stream", f"is larger than {MAX_BYTES // 2**20} MB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        fail("url", "the stream", f"is not UTF-8 text (bad byte at {err.start})")
