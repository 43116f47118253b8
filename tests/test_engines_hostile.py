"""Bad, foreign and hostile engine files get one EngineFileError each, a ValueError whose message is
one sentence naming the field: huge arrays, negative counts, counts above the drafted, markup where a
name belongs, wrong types, non-numbers, deep nesting, bytes that are not text, and files of no engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specviz.engine_logs import EngineFileError, read_engine_file
from specviz.engine_logs.checks import MAX_BYTES, MAX_STEPS

FIXTURES = Path(__file__).parent / "fixtures" / "engines"


def _vllm(**changes) -> str:
    data = json.loads((FIXTURES / "vllm_detailed.json").read_text(encoding="utf-8"))
    data["metrics"]["speculative_decoding"].update(changes)
    return json.dumps(data)


def _fixture(name: str, old: str, new: str) -> str:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new)


CASES = {
    "huge per-step array": (_vllm(per_step_accepted=[0] * (MAX_STEPS + 1)), "per_step_accepted"),
    "file too large": ("{" + " " * (MAX_BYTES + 1) + "}", "larger than"),
    "negative count": (_fixture("sglang_generate.json", '"spec_verify_ct": 1', '"spec_verify_ct": -1'), "spec_verify_ct"),
    "accepted above drafted": (_fixture("llamacpp_completion.json", '"draft_n_accepted": 0', '"draft_n_accepted": 65'),
                               "draft_n_accepted"),
    "accepted above drafted in a step": (_vllm(per_step_drafted=[3, 0, 6]), "per_step_accepted[1]"),
    "markup in a metrics label": (_fixture("vllm_metrics.prom", 'engine="0"} 1.0',
                                           'engine="<img src=x onerror=alert(1)>"} 1.0'), "label engine"),
    "markup in a drafter kind": (_fixture("mlx_vlm_timings.json", '"mtp"', '"<script>alert(1)</script>"'),
                                 "draft_kind"),
    "markup in a finish reason": (_fixture("sglang_generate.json", '{"type": "stop"}', '"<b onmouseover=x>stop</b>"'),
                                  "finish_reason"),
    "wrong type": (_vllm(num_spec_steps="3"), "num_spec_steps"),
    "flag that is not a boolean": (_fixture("mlx_lm_stream.jsonl", '"from_draft": false', '"from_draft": "no"'),
                                   "from_draft"),
    "not a number": (_fixture("vllm_summary.json", "1.2325581395348837", "NaN"), "not valid JSON"),
    "a sum that disagrees": (_vllm(acceptance_histogram=[1, 1, 1, 1]), "num_spec_steps"),
    "a rate that disagrees": (_vllm(draft_acceptance_rate=0.9), "draft_acceptance_rate"),
    "deep nesting": ('{"num_spec_steps": 1, "acceptance_histogram": ' + "[" * 50_000 + "]" * 50_000 + "}",
                     "nested too deeply"),
    "foreign file": ('{"hello": "world"}', "no field of vLLM"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_file_gets_one_sentence_naming_the_field(case):
    text, field = CASES[case]
    with pytest.raises(EngineFileError) as caught:
        read_engine_file(text, "hostile.json")
    message = str(caught.value)
    assert field in message
    assert isinstance(caught.value, ValueError)
    assert "\n" not in message and message.endswith(".") and len(message) < 300
    assert not re.search(r"\.\s+[A-Z]", message), message  # one sentence


def test_bytes_that_are_not_utf8_are_refused_in_one_sentence():
    with pytest.raises(EngineFileError, match="not UTF-8"):
        read_engine_file(b'{"timings": {"draft_n": 1}}\xff\xfe', "x.json")


def test_an_unknown_engine_name_is_refused():
    with pytest.raises(EngineFileError, match="not one of"):
        read_engine_file((FIXTURES / "vllm_summary.json").read_text(), "x", engine="tensorrt")


def test_token_text_with_markup_is_kept_as_the_plain_text_it_is():
    text = _fixture("mlx_lm_stream.jsonl", '" t1"', '"<img src=x onerror=alert(1)>"')
    run = read_engine_file(text, "x.jsonl")
    assert run.tokens[0] == "<img src=x onerror=alert(1)>"  # data, not markup: the views escape it
