"""Reading an engine file safely: size limits, JSON/JSONL/SSE parsing and checked values.

An engine file may come from anyone, so every value the readers use passes through one of these
checks, and anything wrong raises one :class:`~specviz.engine_logs.errors.EngineFileError` whose message
is one sentence naming the field (``vllm: metrics.speculative_decoding.per_step_accepted[3] is -1,
not a count ≥ 0.``). Limits (:data:`MAX_BYTES`, :data:`MAX_STEPS`, :data:`MAX_POSITIONS`,
:data:`MAX_TOKENS`) keep a hostile file from costing memory or time. Strings that specviz shows as
labels (model names, finish reasons, drafter kinds) must be plain names: markup in them is refused.
Token texts are kept as the plain text they are; the views escape them.
"""

from __future__ import annotations

import json
import math
import re

from specviz.engine_logs.file_error import EngineFileError

__all__ = ["MAX_BYTES", "MAX_COUNT", "MAX_POSITIONS", "MAX_STEPS", "MAX_TOKENS", "MAX_TOKEN_CHARS", "check_text",
           "count", "counts", "fail", "json_documents", "label", "load_json", "optional_count", "plain_source",
           "ratio", "sse_events", "token_text"]

#: The largest engine file read (bytes): a detailed per-request response of 65,536 steps is about 1 MB.
MAX_BYTES = 8 * 2**20
#: The most verify steps one run may list (per-step arrays, streamed chunks, tokens).
MAX_STEPS = 65_536
#: The most draft positions (K) a counter array or histogram may have.
MAX_POSITIONS = 256
#: The most output tokens a file may carry.
MAX_TOKENS = 65_536
#: The longest text of one token.
MAX_TOKEN_CHARS = 1_024
#: The largest count accepted (a server's lifetime counters are large, but finite and exact in a float).
MAX_COUNT = 2**53
#: The most lines (Prometheus scrape, log, JSONL, SSE) a file may have.
MAX_LINES = 400_000

_MARKUP = re.compile(r"<\s*[/!?a-zA-Z]|javascript:|&#|&[a-zA-Z]+;", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def fail(engine: str, field: str, why: str):
    """Raise the one error: ``"<engine>: <field> <why>."`` (one sentence naming the field)."""
    raise EngineFileError(f"{engine}: {field} {why.rstrip('.')}.")


def _show(value) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value) if not isinstance(value, int) or value.bit_length() <= 64 else "a huge integer"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def check_text(text, engine: str = "file") -> str:
    """``text`` as a str within :data:`MAX_BYTES` and :data:`MAX_LINES` (bytes are decoded as UTF-8)."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_BYTES:
            fail(engine, "the file", f"is larger than {MAX_BYTES // 2**20} MB, the most an engine file may be")
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as err:
            fail(engine, "the file", f"is not UTF-8 text (bad byte at {err.start})")
    if not isinstance(text, str):
        fail(engine, "the file", f"is {_show(text)}, not text")
    if len(text) > MAX_BYTES:
        fail(engine, "the file", f"is larger than {MAX_BYTES // 2**20} MB, the most an engine file may be")
    if text.count("\n") > MAX_LINES:
        fail(engine, "the file", f"has more than {MAX_LINES} lines")
    return text


def _no_constants(name: str):
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str, engine: str, what: str = "the file"):
    """One JSON document (NaN and Infinity refused, depth bounded by the parser)."""
    try:
        return json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        fail(engine, what, "is JSON nested too deeply to be an engine's output")
    except ValueError as err:
        fail(engine, what, f"is not valid JSON ({str(err).splitlines()[0][:80]})")


def sse_events(text: str, engine: str) -> list:
    """The JSON payloads of a server-sent-event stream's ``data:`` lines, ``[DONE]`` left out."""
    events = []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload in ("", "[DONE]"):
            continue
        if len(events) >= MAX_STEPS:
            fail(engine, "the stream", f"has more than {MAX_STEPS} events")
        events.append(load_json(payload, engine, f"the stream's line {n}"))
    return events


def json_documents(text: str, engine: str) -> list:
    """The JSON values of a file that is one JSON document, JSON Lines, or an SSE stream."""
    stripped = text.strip()
    if not stripped:
        fail(engine, "the file", "is empty")
    if any(line.strip().startswith("data:") for line in stripped.splitlines()[:50]):
        return sse_events(stripped, engine)
    try:
        return [json.loads(stripped, parse_constant=_no_constants)]
    except RecursionError:
        fail(engine, "the file", "is JSON nested too deeply to be an engine's output")
    except ValueError as err:
        first = stripped.splitlines()[0]
        try:
            json.loads(first, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            fail(engine, "the file", f"is not valid JSON ({str(err).splitlines()[0][:80]})")
    lines = [line for line in stripped.splitlines() if line.strip()]
    if len(lines) > MAX_STEPS:
        fail(engine, "the file", f"has more than {MAX_STEPS} JSON lines")
    return [load_json(line, engine, f"line {n}") for n, line in enumerate(lines, start=1)]


def count(value, engine: str, field: str, hi: int = MAX_COUNT) -> int:
    """A whole count 0..hi (a float such as 12.0, as Prometheus writes counters, is taken if whole)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        fail(engine, field, f"is {_show(value)}, not a whole count")
    if value < 0:
        fail(engine, field, f"is {value}, not a count ≥ 0")
    if value > hi:
        fail(engine, field, f"is {_show(value)}, more than the {hi} it can be")
    return value


def optional_count(value, engine: str, field: str, hi: int = MAX_COUNT) -> int | None:
    """:func:`count`, or None for a missing (None) value."""
    return None if value is None else count(value, engine, field, hi)


def counts(value, engine: str, field: str, limit: int = MAX_STEPS, hi: int = MAX_COUNT) -> tuple[int, ...]:
    """A list of counts of at most ``limit`` items."""
    if not isinstance(value, list):
        fail(engine, field, f"is {_show(value)}, not a list of counts")
    if len(value) > limit:
        fail(engine, field, f"has {len(value)} items, more than the {limit} a run may have")
    return tuple(count(v, engine, f"{field}[{i}]", hi) for i, v in enumerate(value))


def ratio(value, engine: str, field: str, lo: float = 0.0, hi: float = 1.0) -> float:
    """A finite number in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(engine, field, f"is {_show(value)}, not a number")
    if isinstance(value, int) and value.bit_length() > 64 or not math.isfinite(value):
        fail(engine, field, f"is {_show(value)}, not a finite number")
    if not lo <= value <= hi:
        fail(engine, field, f"is {value:g}, outside [{lo:g}, {hi:g}]")
    return float(value)


def label(value, engine: str, field: str, limit: int = 200) -> str:
    """A name specviz shows as a label (model, finish reason, drafter kind): short plain text, no
    markup, no control characters."""
    if not isinstance(value, str):
        fail(engine, field, f"is {_show(value)}, not a string")
    if len(value) > limit:
        fail(engine, field, f"is longer than {limit} characters")
    if _MARKUP.search(value):
        fail(engine, field, "holds markup, which no engine writes there")
    if _CONTROL.search(value):
        fail(engine, field, "holds control characters")
    return value


def token_text(value, engine: str, field: str) -> str:
    """One token's (or one streamed chunk's) text: kept as plain text, bounded in length."""
    if not isinstance(value, str):
        fail(engine, field, f"is {_show(value)}, not a string")
    if len(value) > MAX_TOKEN_CHARS * 64:
        fail(engine, field, f"is longer than {MAX_TOKEN_CHARS * 64} characters")
    return value


def plain_source(name) -> str:
    """A file name or URL as plain text for the view: control characters dropped, 200 characters at most."""
    text = _CONTROL.sub("", str(name if name is not None else ""))
    return text if len(text) <= 200 else text[:199] + "…"
