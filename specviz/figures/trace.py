"""Plain-data records of a generation run, consumed by the UI, the charts, the CLI and the tests.

A run is a list of :class:`Round` records. Each round is one target forward pass (a *verify
pass*): the drafted tokens with the probabilities and uniform draws that decided them, how many
were accepted, and the one token the target contributed (resampled at the first rejection, or the
bonus token when every draft survived). Plain autoregressive decoding is recorded in the same
shape, with no drafted tokens and ``kind="plain"``.

Nothing here imports torch: records are lists, ints, floats and strings, so they can be copied
into UI state, serialised to JSON and compared in tests. A saved trace may come from anyone:
:func:`load_trace_file` and :func:`trace_from_dict` check all of it and raise one
:class:`TraceError` naming the wrong field. :class:`TokenPieces` and :func:`token_label` name
single tokens for the views. Every figure derived from them lives in
:mod:`specviz.figures.analysis`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import MISSING, asdict, fields

from specviz.core.rules import RULE_NAMES, RuleError, check_rule

from specviz.core.records import KINDS, DraftedToken, EmittedToken, Round


# --------------------------------------------------------------------------- saved traces
#: The saved-trace format: ``{"format": TRACE_FORMAT, "version": TRACE_VERSION, ...}``. Version 2 added
#: ``Round.root_from_prefill``; version 1 traces load with it False.
TRACE_FORMAT = "specviz-trace"
TRACE_VERSION = 2


def trace_to_dict(rounds: list[Round], **meta) -> dict:
    """A run as plain JSON-ready data: the format header, ``meta`` (settings, model names,
    versions, finish reason — whatever the caller records) and every round with its drafted
    tokens (p_draft, p_target, acceptance probability, uniform, verdict, parent) and emitted
    tokens. :func:`trace_from_dict` reads it back."""
    return {"format": TRACE_FORMAT, "version": TRACE_VERSION, **meta,
            "rounds": [asdict(r) for r in rounds]}


# --------------------------------------------------------------------------- reading traces safely
class TraceError(ValueError):
    """A saved trace this specviz cannot read: not a trace, from a newer format, malformed, too
    large or too deeply nested. The message names the field that is wrong by its path in the
    trace (``rounds[3].drafted[2].parent: -5 is not ...``), for the visitor."""


#: Limits on what a trace may hold. A real run is far inside them: 1,024 tokens with K = 16
#: and draft trees of 64 nodes is at most 1,024 passes of 64 nodes and 65 emitted tokens, each
#: with 10 top tokens per distribution (:data:`specviz.core.engine.TOP_TOKENS`), about 60 MB of JSON.
MAX_TRACE_BYTES = 96 * 2**20
MAX_ROUNDS = 4_096
MAX_DRAFTED = 256  # drafted nodes in one verify pass
MAX_TOTAL_TOKENS = 1 << 18  # drafted and emitted tokens of the whole trace
MAX_TOP_TOKENS = 64  # rows of one top-token list
MAX_TOKEN_CHARS = 1_024  # one token's text
MAX_TOKEN_ID = 2**31 - 1
MAX_META_CHARS = 100_000  # one string of the metadata (the prompt among them)
MAX_META_ITEMS = 10_000  # values in one metadata field, nested ones included
MAX_META_DEPTH = 8  # nesting of one metadata field
_BIG = 2**64


def _show(value) -> str:
    """A short description of a bad value for a message (never a huge or recursive repr)."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else f"a {value.bit_length()}-bit integer"
    if isinstance(value, str):
        return repr(value[:40]) + ("…" if len(value) > 40 else "")
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} fields"
    return f"a {type(value).__name__}"


def _fail(path: str, value, why: str):
    raise TraceError(f"{path}: {_show(value)} {why}")


def _int(value, path: str, lo: int = 0, hi: int = _BIG) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(path, value, "is not a whole number")
    if not lo <= value <= hi:
        _fail(path, value, f"is outside {lo}..{hi}")
    return value


def _real(value, path: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, value, "is not a number")
    if isinstance(value, int) and value.bit_length() > 64 or not math.isfinite(value):
        _fail(path, value, "is not a finite number")
    if not lo <= value <= hi:
        _fail(path, value, f"is outside [{lo:g}, {hi:g}]")
    return float(value)


def _prob(value, path: str) -> float:
    return _real(value, path, 0.0, 1.0)


def _bool(value, path: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, value, "is not true or false")
    return value


def _text(value, path: str, limit: int = MAX_TOKEN_CHARS) -> str:
    if not isinstance(value, str):
        _fail(path, value, "is not a string")
    if len(value) > limit:
        _fail(path, value, f"is longer than {limit} characters")
    return value


def _token_id(value, path: str) -> int:
    return _int(value, path, 0, MAX_TOKEN_ID)


def _optional(check):
    return lambda value, path: None if value is None else check(value, path)


def _list(value, path: str, limit: int) -> list:
    if not isinstance(value, list):
        _fail(path, value, "is not a list")
    if len(value) > limit:
        _fail(path, value, f"has more than {limit} items")
    return value


def _top(value, path: str) -> list:
    """A top-token list: ``[id, text, probability]`` rows."""
    rows = []
    for j, row in enumerate(_list(value, path, MAX_TOP_TOKENS)):
        where = f"{path}[{j}]"
        if not isinstance(row, (list, tuple)) or len(row) != 3:
            _fail(where, row, "is not an [id, text, probability] row")
        rows.append([_token_id(row[0], f"{where}[0]"), _text(row[1], f"{where}[1]"), _prob(row[2], f"{where}[2]")])
    return rows


def _record(cls, raw, path: str, checks: dict):
    """A dataclass record from a dict: every field checked, unknown and missing fields refused."""
    if not isinstance(raw, dict):
        _fail(path, raw, "is not an object")
    for key in raw:
        if key not in checks:
            raise TraceError(f"{path}: unknown field {_show(key)}")
    for f in fields(cls):
        if f.name not in raw and f.name in checks and f.default is MISSING and f.default_factory is MISSING:
            raise TraceError(f"{path}.{f.name}: missing")
    return cls(**{key: check(raw[key], f"{path}.{key}") for key, check in checks.items() if key in raw})


_DRAFTED_CHECKS = {"id": _token_id, "text": _text, "p_draft": _prob, "p_target": _prob, "accept_prob": _prob,
                   "uniform": _prob, "accepted": _bool, "tested": _bool,
                   "parent": _optional(lambda v, p: _int(v, p, -_BIG, _BIG)), "top_draft": _top,
                   "top_target": _top}
_EMITTED_CHECKS = {"id": _token_id, "text": _text, "kind": lambda v, p: _kind(v, p), "p_target": _prob,
                   "round": lambda v, p: _int(v, p, 0, MAX_ROUNDS), "rejected_id": _optional(_token_id),
                   "rejected_text": _optional(_text), "p_source": _optional(_prob), "top_source": _top}
_ROUND_CHECKS = {"index": lambda v, p: _int(v, p, 0, MAX_ROUNDS), "n_accepted": lambda v, p: _int(v, p, 0, MAX_DRAFTED),
                 "draft_ms": _real, "draft_steps": lambda v, p: _int(v, p, 0, 1 << 20), "verify_ms": _real,
                 "other_ms": _real, "k": lambda v, p: _int(v, p, 0, MAX_DRAFTED), "elapsed_s": _real,
                 "root_from_prefill": _bool}


def _kind(value, path: str) -> str:
    if value not in KINDS or not isinstance(value, str):
        _fail(path, value, f"is not a token kind ({', '.join(KINDS)})")
    return value


def _round(raw, i: int) -> Round:
    """Round ``i`` of a trace, checked field by field and for consistency (parents earlier in the
    round, emitted tokens of this round, no more accepted drafts than drafted)."""
    path = f"rounds[{i}]"
    if not isinstance(raw, dict):
        _fail(path, raw, "is not an object")
    drafted_raw = _list(raw.get("drafted", []), f"{path}.drafted", MAX_DRAFTED)
    emitted_raw = _list(raw.get("emitted", []), f"{path}.emitted", MAX_DRAFTED + 1)
    round_ = _record(Round, {k: v for k, v in raw.items() if k not in ("drafted", "emitted")}, path, _ROUND_CHECKS)
    round_.drafted = [_record(DraftedToken, d, f"{path}.drafted[{j}]", _DRAFTED_CHECKS)
                      for j, d in enumerate(drafted_raw)]
    round_.emitted = [_record(EmittedToken, e, f"{path}.emitted[{j}]", _EMITTED_CHECKS)
                      for j, e in enumerate(emitted_raw)]
    if round_.index != i:
        _fail(f"{path}.index", round_.index, f"is not this round's place in the list ({i})")
    for j, token in enumerate(round_.drafted):
        if token.parent is not None and not -1 <= token.parent < j:
            _fail(f"{path}.drafted[{j}].parent", token.parent,
                  f"is not an earlier node of this round (-1 for the context, else 0..{j - 1})")
    if round_.n_accepted > len(round_.drafted):
        _fail(f"{path}.n_accepted", round_.n_accepted, f"is more than the {len(round_.drafted)} drafted tokens")
    if len(round_.emitted) > len(round_.drafted) + 1:
        _fail(f"{path}.emitted", emitted_raw, f"is more than the drafted tokens + 1 ({len(round_.drafted) + 1})")
    for j, token in enumerate(round_.emitted):
        if token.round != i:
            _fail(f"{path}.emitted[{j}].round", token.round, f"is not this round ({i})")
    return round_


def _plain_json(value, path: str) -> None:
    """A metadata value of a field this version does not use: plain JSON, bounded in depth, size
    and string length (walked without recursion, so no nesting can exhaust the stack)."""
    stack, items = [(value, path, 0)], 0
    while stack:
        value, where, depth = stack.pop()
        items += 1
        if items > MAX_META_ITEMS:
            raise TraceError(f"{path}: holds more than {MAX_META_ITEMS} values")
        if depth > MAX_META_DEPTH:
            raise TraceError(f"{where}: nested deeper than {MAX_META_DEPTH} levels")
        if isinstance(value, dict):
            for key, inner in value.items():
                _text(key, f"{where} (a key)", 200)
                stack.append((inner, f"{where}.{key}", depth + 1))
        elif isinstance(value, list):
            stack.extend((inner, f"{where}[{j}]", depth + 1) for j, inner in enumerate(value))
        elif isinstance(value, str):
            _text(value, where, MAX_META_CHARS)
        elif isinstance(value, float) and not math.isfinite(value):
            _fail(where, value, "is not a finite number")
        elif isinstance(value, int) and not isinstance(value, bool):
            _int(value, where, -_BIG, _BIG)
        elif value is not None and not isinstance(value, (bool, float)):
            _fail(where, value, "is not a JSON value")


def _meta_text(value, path: str):
    return None if value is None else _text(value, path, MAX_META_CHARS)


_SETTINGS_CHECKS = {
    "prompt": _meta_text, "target": _meta_text, "draft": _meta_text,
    "k": _optional(lambda v, p: _int(v, p, 0, MAX_DRAFTED)),
    "temperature": _optional(_real), "top_k": _optional(_int), "top_p": _optional(_prob),
    "max_new_tokens": _optional(_int), "seed": _optional(_int), "chat": _optional(_bool),
    "branches": _optional(lambda v, p: _int(v, p, 1, MAX_DRAFTED)),
    "tree_nodes": _optional(lambda v, p: _int(v, p, 0, MAX_DRAFTED)),
    "rule": lambda v, p: _rule(v, p),
}


def _rule(value, path: str):
    if value is None:
        return value
    try:  # a fixed rule's name, or the ensemble dial's ensemble:W written as check_rule writes it
        known = isinstance(value, str) and check_rule(value).name == value
    except RuleError:
        known = False
    if not known:
        _fail(path, value, f"is not a verification rule ({', '.join(RULE_NAMES)}, ensemble:W)")
    return value


def trace_rule(meta: dict) -> str:
    """The verification rule a saved trace's run used (:data:`specviz.core.sampling.RULES`): its
    ``settings.rule``, or ``"full"`` for a trace written before runs had a rule (the only rule then)."""
    settings = meta.get("settings") or {}
    return settings.get("rule") or "full"


def _settings(value, path: str):
    if value is None:
        return None
    if not isinstance(value, dict):
        _fail(path, value, "is not an object")
    for key, inner in value.items():
        _text(key, f"{path} (a key)", 200)
        _SETTINGS_CHECKS.get(key, _plain_json)(inner, f"{path}.{key}")
    return value


#: A saved plain baseline's fields (:meth:`specviz.figures.speedup.PlainBaseline.to_dict`): the first two
#: always, the timed samples and the prefill since the speedup got its range (older traces lack them).
_BASELINE_REQUIRED = {"step_ms", "tokens_per_s"}
_BASELINE_OPTIONAL = {"sample_ms_per_token", "sample_tokens", "prefill_ms"}


def _baseline(value, path: str):
    if value is None:
        return None
    if not isinstance(value, dict) or not _BASELINE_REQUIRED <= set(value) <= _BASELINE_REQUIRED | _BASELINE_OPTIONAL:
        _fail(path, value, "is not {\"step_ms\": ..., \"tokens_per_s\": ...} (with optional "
              "\"sample_ms_per_token\", \"sample_tokens\", \"prefill_ms\")")
    for key in ("step_ms", "tokens_per_s"):
        _real(value[key], f"{path}.{key}")
    if value.get("prefill_ms") is not None:
        _real(value["prefill_ms"], f"{path}.prefill_ms")
    for j, ms in enumerate(_list(value.get("sample_ms_per_token") or [], f"{path}.sample_ms_per_token", MAX_META_ITEMS)):
        _real(ms, f"{path}.sample_ms_per_token[{j}]")
    for j, n in enumerate(_list(value.get("sample_tokens") or [], f"{path}.sample_tokens", MAX_META_ITEMS)):
        _int(n, f"{path}.sample_tokens[{j}]")
    return value


def _eos_ids(value, path: str):
    if value is not None:
        for j, token_id in enumerate(_list(value, path, MAX_META_ITEMS)):
            _token_id(token_id, f"{path}[{j}]")
    return value


_META_CHECKS = {
    "settings": _settings, "target": _meta_text, "drafter": _meta_text, "device": _meta_text, "dtype": _meta_text,
    "finish_reason": _meta_text, "k": _optional(lambda v, p: _int(v, p, 0, MAX_DRAFTED)),
    "prefill_ms": _optional(_real),
    "wall_s": _optional(_real), "eos_token_ids": _eos_ids, "baseline": _baseline,
}


def _check_version(data: dict) -> int:
    version = data.get("version")
    if "version" not in data:
        raise TraceError("version: missing (a specviz trace says which format version wrote it)")
    if isinstance(version, bool) or not isinstance(version, int):
        _fail("version", version, f"is not a format version (a whole number from 1 to {TRACE_VERSION})")
    if version > TRACE_VERSION:
        raise TraceError(f"version: this trace was made by a newer specviz (format version {_show(version)}; this "
                         f"one reads versions 1 to {TRACE_VERSION}): upgrade specviz to read it")
    if version < 1:
        _fail("version", version, f"is not a format version (versions are 1 to {TRACE_VERSION})")
    return version


def trace_from_dict(data: dict) -> tuple[list[Round], dict]:
    """The rounds and the metadata of a saved trace, every field checked before use.

    A trace may come from a stranger, so nothing in it is trusted: its version, every round's
    fields (types; probabilities and uniform draws in [0, 1]; times finite and >= 0; ids whole
    numbers >= 0; kinds from :data:`KINDS`; parents earlier nodes of the same round), the metadata
    the app reads (settings, EOS ids, baseline) and the sizes (:data:`MAX_ROUNDS`,
    :data:`MAX_DRAFTED`, :data:`MAX_TOTAL_TOKENS`, :data:`MAX_TOKEN_CHARS`, ...). Metadata fields
    this version does not use are kept if they are plain, bounded JSON.

    Raises:
        TraceError: (a ValueError) if ``data`` is not a specviz trace, was written by a newer
            version of the format than this one reads, or anything in it is malformed; the
            message names the field by its path, e.g. ``rounds[3].drafted[2].parent``.
    """
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise TraceError("not a specviz trace (no \"format\": \"specviz-trace\" field)")
    _check_version(data)
    for key, value in data.items():
        if key not in ("format", "version", "rounds"):
            _text(key, "a top-level key", 200)
            _META_CHECKS.get(key, _plain_json)(value, key)
    if "rounds" not in data:
        raise TraceError("rounds: missing")
    rounds, total = [], 0
    for i, raw in enumerate(_list(data["rounds"], "rounds", MAX_ROUNDS)):
        round_ = _round(raw, i)
        total += len(round_.drafted) + len(round_.emitted)
        if total > MAX_TOTAL_TOKENS:
            raise TraceError(f"rounds: more than {MAX_TOTAL_TOKENS} drafted and emitted tokens in all")
        rounds.append(round_)
    meta = {k: v for k, v in data.items() if k != "rounds"}
    return rounds, meta


def load_trace_file(source, max_bytes: int = MAX_TRACE_BYTES) -> tuple[list[Round], dict]:
    """Read, size-check, parse and validate a saved trace (the app's export or ``run --trace``).

    Args:
        source: a path (str or path-like) or the file's bytes.
        max_bytes: the largest file accepted (bytes); default :data:`MAX_TRACE_BYTES`.

    Returns:
        ``(rounds, meta)`` as :func:`trace_from_dict`.

    Raises:
        TraceError: for any file that is not a readable trace: unreadable, too large, not UTF-8,
            not JSON, nested too deeply for the parser, or rejected by :func:`trace_from_dict`.
            No other exception comes out.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
    else:
        try:
            with open(source, "rb") as f:
                raw = f.read(max_bytes + 1)
        except (OSError, TypeError, ValueError) as err:
            raise TraceError(f"could not read the file: {err}") from None
    if len(raw) > max_bytes:
        raise TraceError(f"the file is larger than {max_bytes / 2**20:g} MB, the most a trace may be")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise TraceError(f"the file is not UTF-8 text (bad byte at {err.start})") from None
    except RecursionError:
        raise TraceError("the file's JSON is nested too deeply to be a specviz trace") from None
    except ValueError as err:  # JSONDecodeError, and integers past Python's digit limit
        raise TraceError(f"the file is not valid JSON: {err}") from None
    return trace_from_dict(data)


#: Leading characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """A CSV cell that a spreadsheet shows as written: text beginning with ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return gets a leading single quote (OWASP's rule against CSV
    formula injection), so a generated ``=HYPERLINK(...)`` stays text. Numbers (int, float) are
    returned unchanged: a float -0.5 stays -0.5; so is any other non-text value."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


#: Columns of :func:`rounds_csv`; ``pass`` counts verify passes from 1, as the inspector and the charts do.
ROUND_CSV_FIELDS = ("pass", "k", "proposed", "accepted", "emitted", "kinds", "text", "rejected_draft",
                    "draft_ms", "draft_steps", "verify_ms", "other_ms", "elapsed_s")


def rounds_csv(rounds: list[Round]) -> str:
    """One CSV row per round (:data:`ROUND_CSV_FIELDS`): its drafts, verdicts, output and times (ms, s).

    Text cells go through :func:`spreadsheet_safe` (generated text can begin with ``=``); numbers
    are written as numbers.
    """
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(ROUND_CSV_FIELDS)
    for r in rounds:
        rejected = [t.rejected_text for t in r.emitted if t.rejected_text is not None]
        writer.writerow([r.index + 1, r.k, len(r.drafted), r.n_accepted, len(r.emitted),
                         " ".join(t.kind for t in r.emitted), spreadsheet_safe("".join(t.text for t in r.emitted)),
                         spreadsheet_safe(rejected[0] if rejected else ""), round(r.draft_ms, 3), r.draft_steps,
                         round(r.verify_ms, 3), round(r.other_ms, 3), round(r.elapsed_s, 4)])
    return out.getvalue()


# --------------------------------------------------------------------------- labels
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def _bytes_text(data: bytes) -> str:
    """UTF-8 ``data`` as text, each byte that is not part of a whole character as ``<0xNN>``."""
    out = []
    while data:
        try:
            out.append(data.decode("utf-8"))
            break
        except UnicodeDecodeError as err:
            out.append(data[: err.start].decode("utf-8"))
            out.extend(f"<0x{b:02X}>" for b in data[err.start : err.end])
            data = data[err.end :]
    return "".join(out)


class TokenPieces:
    """The text of single tokens as a reader should see it: what each token is by itself.

    * a special token (chat markers, BOS/EOS, any added token marked special) by its name,
      e.g. ``<|im_start|>`` (decoding skips it, which left an empty, nameless label);
    * a token that is part of one UTF-8 character (an emoji or CJK character split by
      byte-level BPE, or a sentencepiece byte-fallback token) as its bytes, ``<0xF0><0x9F>``,
      with any whole characters in it as text (decoding it alone gives ``\ufffd``);
    * any other token as it decodes.

    The token stream shows the characters such tokens make together (it decodes incrementally,
    :class:`specviz.core.engine.IncrementalDecoder`); drafted nodes and top-token rows, which stand
    alone, use these pieces. Results are cached per id.

    Args:
        tokenizer: a transformers tokenizer (``decode``, ``convert_ids_to_tokens``,
            ``added_tokens_decoder``).
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        self._special = {i: t.content for i, t in added.items() if getattr(t, "special", False)}
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        piece = self._cache.get(token_id)
        if piece is None:
            piece = self._cache[token_id] = self._piece(token_id)
        return piece

    def _piece(self, token_id: int) -> str:
        if token_id in self._special:
            return self._special[token_id]
        text = self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if "\ufffd" not in text:
            return text
        raw = self.tokenizer.convert_ids_to_tokens(token_id)
        if isinstance(raw, str) and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", raw):  # sentencepiece byte fallback
            return f"<0x{raw[3:5].upper()}>"
        byte_of = _unicode_to_byte()
        if isinstance(raw, str) and raw and all(ch in byte_of for ch in raw):  # byte-level BPE (GPT-2's map)
            return _bytes_text(bytes(byte_of[ch] for ch in raw))
        return text


@functools.cache
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character → byte (the inverse of its ``bytes_to_unicode``)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


def visible_text(text: str) -> str:
    """``text`` with whitespace and control characters made visible (``␣ ↵ ⇥ ␍``, ``\\xNN``);
    ``∅`` if empty."""
    return "".join(_VISIBLE.get(ch, ch if ch.isprintable() else f"\\x{ord(ch):02x}") for ch in text) or "∅"


def emitted_piece(token: EmittedToken) -> str:
    """An emitted token's text for a label: the stream's text, or, where the stream shows nothing
    (a special token, or a byte of a character that later tokens complete: the stream holds it
    back), the token's own piece from the distribution it was drawn from (a
    :class:`TokenPieces` piece, e.g. ``<0xF0><0x9F>``), when that was recorded; else ``""``."""
    if token.text:
        return token.text
    return next((text for i, text, _ in token.top_source if i == token.id), "")


def token_label(text: str, token_id: int) -> str:
    """A token as a reader can tell it apart: its text with whitespace made visible, and its id.

    ``text`` is best a :class:`TokenPieces` piece (special tokens by name, partial characters as
    ``<0xNN>`` bytes). ``" the"`` becomes ``"␣the #278"``-like text (the separator is a no-break
    space, so a chart that makes spaces visible leaves it alone); an empty text (an older trace's
    special or partial byte token) shows as ``∅``; other control characters as ``\\xNN``.
    ``token_id < 0`` is the "all other tokens" bin. The label is plain text: HTML and Plotly
    callers escape it.
    """
    if token_id < 0:
        return "all\u00a0other\u00a0tokens"
    return f"{visible_text(text)}\u00a0#{token_id}"
