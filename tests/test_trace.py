"""Saved traces from strangers: every malformed, hostile or oversized trace is refused with one
clean error (:class:`specviz.figures.trace.TraceError`) that names the wrong field; a real trace loads.

The fuzz test throws mutations of a real trace (wrong types, deletions, huge, negative and NaN
numbers, deep nesting, wrong versions, cut-off JSON) at :func:`specviz.figures.trace.load_trace_file`.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from helpers import tiny_llama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specviz.figures.analysis import analyse
from specviz.ui.draw.charts import alpha_figure, inspector_figure, tokens_per_pass_figure
from specviz.drafters import PromptLookupDrafter
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig
from specviz.figures.trace import (MAX_ROUNDS, MAX_TOKEN_CHARS, TRACE_VERSION, TraceError, load_trace_file, trace_from_dict,
                           trace_to_dict)
from specviz.ui.draw.run_views import inspector_markdown, render_round, round_tree_html

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def real_trace() -> dict:
    """A real instrumented tree run of a tiny model (sampled, so with rejections and residuals),
    saved with the metadata the app and the CLI write."""
    prompt = [5, 6, 7, 8, 5, 6, 9, 10, 5, 6, 11, 12, 5, 6, 7, 13, 5, 6]
    gen = Generation(tiny_llama(0, lm_head_scale=8.0), prompt, PromptLookupDrafter(256), k=4,
                     sampling=SamplingConfig(temperature=1.0), max_new_tokens=20, seed=2, branches=4,
                     decode=lambda ids: "".join(chr(0x61 + i % 26) for i in ids)).run()
    settings_ = {"prompt": "abc", "target": "tiny", "draft": "ngram", "k": 4, "temperature": 1.0, "top_k": 0,
                 "top_p": 1.0, "max_new_tokens": 20, "seed": 2, "chat": False, "branches": 4, "tree_nodes": None}
    data = trace_to_dict(gen.rounds, settings=settings_, target="tiny", drafter="ngram", k=4, device="cpu",
                         dtype="float32", finish_reason=gen.finish_reason, prefill_ms=gen.prefill_ms,
                         wall_s=gen.elapsed_s, eos_token_ids=[2], baseline={"step_ms": 1.5, "tokens_per_s": 400.0},
                         versions={"torch": "2", "transformers": "5"})
    data = json.loads(json.dumps(data))
    assert any(t["parent"] == -1 for r in data["rounds"] for t in r["drafted"][1:])  # a real tree
    assert any(t["kind"] == "resampled" for r in data["rounds"] for t in r["emitted"])
    return data


def _bytes(data) -> bytes:
    return json.dumps(data).encode()


def test_a_real_trace_loads_from_bytes_and_from_a_path(real_trace, tmp_path):
    rounds, meta = load_trace_file(_bytes(real_trace))
    assert [r.index for r in rounds] == list(range(len(real_trace["rounds"])))
    assert trace_to_dict(rounds, **{k: v for k, v in meta.items() if k not in ("format", "version")}) == real_trace
    path = tmp_path / "t.json"
    path.write_bytes(_bytes(real_trace))
    assert load_trace_file(str(path))[0] == rounds
    assert load_trace_file(path)[0] == rounds


def _set(data: dict, path: tuple, value) -> dict:
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_DELETE = object()
_TREE = ("rounds", 0, "drafted")  # round 0 of the fixture drafted a tree (checked below)

BAD_FIELDS = [
    (_TREE + (1, "parent"), -5, r"rounds\[0\]\.drafted\[1\]\.parent: -5 is not an earlier node"),
    (_TREE + (1, "parent"), 1, r"rounds\[0\]\.drafted\[1\]\.parent: 1 is not an earlier node"),
    (_TREE + (0, "p_draft"), 1.5, r"rounds\[0\]\.drafted\[0\]\.p_draft: 1\.5 is outside \[0, 1\]"),
    (_TREE + (0, "uniform"), float("nan"), r"drafted\[0\]\.uniform: nan is not a finite number"),
    (_TREE + (0, "id"), -1, r"drafted\[0\]\.id: -1 is outside"),
    (_TREE + (0, "id"), True, r"drafted\[0\]\.id: True is not a whole number"),
    (_TREE + (0, "id"), "7", r"drafted\[0\]\.id: '7' is not a whole number"),
    (_TREE + (0, "accepted"), 1, r"drafted\[0\]\.accepted: 1 is not true or false"),
    (_TREE + (0, "text"), None, r"drafted\[0\]\.text: None is not a string"),
    (_TREE + (0, "text"), "x" * (MAX_TOKEN_CHARS + 1), r"drafted\[0\]\.text: .* is longer than"),
    (_TREE + (0, "top_draft"), [[1, "a"]], r"drafted\[0\]\.top_draft\[0\]: a list of 2 items is not an \[id"),
    (_TREE + (0, "top_target"), [[1, "a", -0.1]], r"top_target\[0\]\[2\]: -0\.1 is outside"),
    (_TREE + (0, "bogus"), 1, r"rounds\[0\]\.drafted\[0\]: unknown field 'bogus'"),
    (_TREE + (0, "tested"), _DELETE, r"rounds\[0\]\.drafted\[0\]\.tested: missing"),
    (_TREE + (0,), [], r"rounds\[0\]\.drafted\[0\]: a list of 0 items is not an object"),
    (("rounds", 0, "emitted", 0, "kind"), "evil", r"emitted\[0\]\.kind: 'evil' is not a token kind"),
    (("rounds", 0, "emitted", 0, "kind"), ["accepted"], r"emitted\[0\]\.kind: a list of 1 items is not a token kind"),
    (("rounds", 0, "emitted", 0, "round"), 3, r"emitted\[0\]\.round: 3 is not this round"),
    (("rounds", 0, "verify_ms"), -1.0, r"rounds\[0\]\.verify_ms: -1\.0 is outside"),
    (("rounds", 0, "draft_ms"), 1e309, r"rounds\[0\]\.draft_ms: inf is not a finite number"),
    (("rounds", 0, "elapsed_s"), 10**400, r"rounds\[0\]\.elapsed_s: a 1329-bit integer is not a finite number"),
    (("rounds", 0, "index"), 5, r"rounds\[0\]\.index: 5 is not this round's place"),
    (("rounds", 0, "n_accepted"), 99, r"rounds\[0\]\.n_accepted: 99 is more than the 8 drafted"),
    (("rounds", 0, "root_from_prefill"), "yes", r"root_from_prefill: 'yes' is not true or false"),
    (("rounds", 0, "emitted"), {}, r"rounds\[0\]\.emitted: an object of 0 fields is not a list"),
    (("rounds", 0), "round", r"rounds\[0\]: 'round' is not an object"),
    (("rounds",), {}, r"rounds: an object of 0 fields is not a list"),
    (("rounds",), _DELETE, r"rounds: missing"),
    (("rounds",), [{"index": i} for i in range(MAX_ROUNDS + 1)], r"rounds: a list of 4097 items has more than"),
    (("eos_token_ids",), ["a"], r"eos_token_ids\[0\]: 'a' is not a whole number"),
    (("eos_token_ids",), 2, r"eos_token_ids: 2 is not a list"),
    (("baseline",), {"step_ms": 1.0, "tokens_per_s": 2.0, "x": 0}, r"baseline: an object of 3 fields is not"),
    (("baseline", "step_ms"), float("-inf"), r"baseline\.step_ms: -inf is not a finite number"),
    (("settings",), [], r"settings: a list of 0 items is not an object"),
    (("settings", "temperature"), "hot", r"settings\.temperature: 'hot' is not a number"),
    (("settings", "chat"), "no", r"settings\.chat: 'no' is not true or false"),
    (("settings", "top_p"), 2, r"settings\.top_p: 2 is outside"),
    (("prefill_ms",), -3, r"prefill_ms: -3 is outside"),
    (("k",), 1.5, r"k: 1\.5 is not a whole number"),
    (("target",), ["x"], r"target: a list of 1 items is not a string"),
    (("versions",), {"torch": float("nan")}, r"versions\.torch: nan is not a finite number"),
    (("notes",), [[[[[[[[[[["deep"]]]]]]]]]]], r"notes(\[0\])+: nested deeper than 8 levels"),
    (("notes",), "x" * 100_001, r"notes: .* is longer than 100000 characters"),
    (("version",), "2", r"version: '2' is not a format version"),
    (("version",), True, r"version: True is not a format version"),
    (("version",), 2.0, r"version: 2\.0 is not a format version"),
    (("version",), 0, r"version: 0 is not a format version"),
    (("version",), -1, r"version: -1 is not a format version"),
    (("version",), _DELETE, r"version: missing"),
    (("version",), TRACE_VERSION + 1, r"version: this trace was made by a newer specviz .* upgrade specviz"),
    (("version",), 10**30, r"made by a newer specviz"),
    (("format",), "other", r"not a specviz trace"),
]


@pytest.mark.parametrize("path, value, message", BAD_FIELDS, ids=[m[:40] for _, _, m in BAD_FIELDS])
def test_a_bad_field_is_refused_with_its_path(real_trace, path, value, message):
    assert any(t["parent"] == -1 for t in real_trace["rounds"][0]["drafted"][1:])
    bad = _set(real_trace, path, value)
    with pytest.raises(TraceError, match=message):
        trace_from_dict(bad)
    with pytest.raises(TraceError, match=message):  # the same through the file reader
        load_trace_file(json.dumps(bad).encode())


BAD_FILES = [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"format": "specviz-trace", "version": 2, "rounds": [], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
     "nested too deeply"),
    (b'{"format": "specviz-trace", "version": ' + b"9" * 5000 + b', "rounds": []}', "not valid JSON"),
    (b'{"format": "specviz-trace", "version": 2, "rounds": [', "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "not a specviz trace"),
    (b'"specviz-trace"', "not a specviz trace"),
]


@pytest.mark.parametrize("raw, message", BAD_FILES, ids=[m for _, m in BAD_FILES])
def test_a_bad_file_is_refused_cleanly(raw, message):
    with pytest.raises(TraceError, match=message):
        load_trace_file(raw)


def test_size_limit_and_unreadable_paths(real_trace, tmp_path):
    raw = _bytes(real_trace)
    with pytest.raises(TraceError, match="larger than"):
        load_trace_file(raw, max_bytes=len(raw) - 1)
    path = tmp_path / "big.json"
    path.write_bytes(raw)
    with pytest.raises(TraceError, match="larger than"):
        load_trace_file(path, max_bytes=100)
    with pytest.raises(TraceError, match="could not read"):
        load_trace_file(tmp_path / "missing.json")
    with pytest.raises(TraceError, match="could not read"):
        load_trace_file(tmp_path)  # a folder


def test_a_python_structure_nested_without_end_is_refused():
    """trace_from_dict is also called on data that never went through json: a self-referencing
    list must not recurse without end."""
    loop: list = []
    loop.append(loop)
    with pytest.raises(TraceError, match="nested deeper"):
        trace_from_dict({"format": "specviz-trace", "version": 2, "rounds": [], "notes": loop})


# --------------------------------------------------------------------------- fuzz
_HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([-1, 0, 1, 2, 3, -5, 2**31, 2**63, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["accepted", "resampled", "bonus", "plain", "", "x" * 5000]),
    st.lists(st.integers(-3, 3), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.integers(1, 3000).map(lambda n: json.loads("[" * n + "]" * n) if n < 900 else None),
)


def _nodes(data, prefix=()):
    """Every path in a JSON value (the root's children and below)."""
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return
    for key, value in items:
        yield prefix + (key,)
        yield from _nodes(value, prefix + (key,))


@st.composite
def mutated_traces(draw, base):
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_nodes(data))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "duplicate"]))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if action == "delete":
            del parent[path[-1]]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
        else:
            parent[path[-1]] = draw(_HOSTILE)
    if draw(st.integers(0, 4)) == 4:  # a wrong version
        data["version"] = draw(st.one_of(_HOSTILE, st.sampled_from([0, -1, True, False, "2", 2.0, TRACE_VERSION + 1])))
    raw = json.dumps(data).encode()
    cut = draw(st.integers(0, 19))
    if cut == 19:  # cut the file short
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif cut == 18:  # nesting deeper than the parser goes, somewhere inside
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"[" * 5000 + raw[at:]
    return raw


def test_fuzzed_traces_only_ever_raise_trace_error(real_trace):
    """Many mutations of a real trace: each loads (and then renders: the views and the analysis
    take whatever the loader lets through) or is refused with TraceError; nothing else, no hang."""

    @settings(max_examples=600, deadline=2000, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(mutated_traces(real_trace))
    def check(raw):
        try:
            rounds, meta = load_trace_file(raw)
        except TraceError as err:
            assert str(err)
            return
        eos = set(meta.get("eos_token_ids") or [])
        for r in rounds:
            render_round(r, eos)
            round_tree_html(r)
            for slot in range(len(r.emitted)):
                inspector_markdown(r, slot)
        a = analyse(rounds, int(meta.get("k") or 0), float(meta.get("wall_s") or 0.0))
        assert math.isfinite(a.tokens_per_pass) or not rounds
        alpha_figure(rounds)
        tokens_per_pass_figure(rounds, int(meta.get("k") or 0), a.alpha)
        for r in rounds[:3]:
            for slot in range(len(r.emitted)):
                inspector_figure(r, slot)

    check()
