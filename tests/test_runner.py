"""specviz.run.runner's one way from a request to a run: the chat-template policy, the prompt's cost
in tokens (public mode), the label and stop ids, and the plain baseline as a generator."""

from __future__ import annotations

import pytest
from helpers import bpe_tokenizer
from test_cli import _save_tiny, _smollm2_prepared

from specviz.run.request import DEFAULT_LIMITS, PUBLIC_LIMITS, RequestError, validate_request
from specviz.core.records import effective_k
from specviz.run.runner import baseline_key, baseline_steps, drain, encode_prompt, prepare_run
from specviz.run.sweep import sweep, sweep_requests
from specviz.figures.analysis import analyse_generation

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENGLISH = ["The quick brown fox jumps over the lazy dog."] * 20
#: 2,600 CJK characters: under the public character cap, far over its token cap.
CJK = "速度解码推测模型" * 325


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("runner")
    return {"chat": _save_tiny(root / "chat", bpe_tokenizer(ENGLISH, chat=True, vocab_size=300), seed=0),
            "plain": _save_tiny(root / "plain", bpe_tokenizer(ENGLISH, chat=False, vocab_size=300), seed=0)}


def _request(target: str, limits=PUBLIC_LIMITS, **changes):
    values = dict(prompt="the quick brown fox", target=target, draft="ngram", k=2, temperature=0.0, top_k=0,
                  top_p=1.0, max_new_tokens=4, seed=0, device="cpu", dtype="float32")
    values.update(changes)
    return validate_request(**values, limits=limits)


def test_one_chat_template_policy(tiny):
    chat = prepare_run(_request(tiny["chat"], chat=True))
    plain = prepare_run(_request(tiny["chat"], chat=False))
    assert len(chat.prompt_ids) > len(plain.prompt_ids) and not chat.notes and not plain.notes
    no_template = prepare_run(_request(tiny["plain"], chat=True))
    assert no_template.notes == [f"{tiny['plain']} has no chat template: the prompt was used as plain text."]
    assert no_template.prompt_ids == prepare_run(_request(tiny["plain"])).prompt_ids
    with pytest.raises(ValueError, match="empty"):
        encode_prompt(no_template.target, "", False)
    assert chat.label.endswith("← prompt lookup (n-gram)") and chat.stop_ids == frozenset(chat.target.eos_token_ids)
    assert prepare_run(_request(tiny["plain"], draft="none")).label.endswith(", plain decoding")


def test_public_prompt_limit_counts_tokens_not_characters(tiny):
    assert len(CJK) == 2600 and len(CJK) <= PUBLIC_LIMITS.max_prompt_chars
    request = _request(tiny["plain"], prompt=CJK)  # the character guard lets it through...
    with pytest.raises(RequestError, match=r"the prompt is \d+ tokens long \(2600 characters\); the limit is 1024"):
        prepare_run(request)  # ...the token count does not
    assert len(prepare_run(_request(tiny["plain"], DEFAULT_LIMITS, prompt=CJK)).prompt_ids) > 1024  # the context decides
    ascii_prompt = ("the quick brown fox jumps over the lazy dog " * 100)[:4000]
    assert len(prepare_run(_request(tiny["plain"], prompt=ascii_prompt)).prompt_ids) <= 1024
    # A public sweep checks it too: its requests carry the limits they were validated with.
    with pytest.raises(RequestError, match="tokens long"):
        next(sweep(sweep_requests(request, "k", [2, 3], limits=PUBLIC_LIMITS)))
    with pytest.raises(RequestError, match="characters long; the limit is 16000"):
        _request(tiny["plain"], prompt="x" * 16_001)


@pytest.mark.skipif(not _smollm2_prepared(), reason="run `python -m specviz prepare smollm2-135m-instruct` first")
def test_public_prompt_limit_on_smollm2_with_a_cjk_prompt():
    request = _request("smollm2-135m-instruct", prompt=CJK, chat=True, dtype="auto")
    with pytest.raises(RequestError, match=r"the prompt is \d{4} tokens long \(2600 characters\); the limit is 1024"):
        prepare_run(request)


def test_a_prepared_run_drafts_its_own_k_and_plain_decoding_counts_k_zero(tiny):
    """K, the seed and the token limit reach the generation by name (all ints: a swap would not
    fail); plain decoding analyses as K = 0 whatever K the settings held (request.effective_k)."""
    assert effective_k(5, drafting=True) == 5 and effective_k(5, drafting=False) == 0
    speculative = prepare_run(_request(tiny["plain"], k=3, max_new_tokens=6, seed=7)).generation()
    assert (speculative.k, speculative.max_new_tokens, speculative.seed) == (3, 6, 7)
    plain = prepare_run(_request(tiny["plain"], draft="none", k=3)).generation()
    plain.run()
    assert analyse_generation(plain).k == 0


def test_baseline_steps_time_plain_decoding_three_times_and_reuse_a_known_baseline(tiny):
    prepared = prepare_run(_request(tiny["plain"]))
    steps = baseline_steps(prepared)
    lines = []
    while True:
        try:
            lines.append(next(steps))
        except StopIteration as done:
            baseline = done.value
            break
    assert all(isinstance(line, str) for line in lines)
    assert baseline.samples == 3 and baseline.tokens_per_s > 0
    known = {baseline_key(prepared): baseline}
    assert drain(baseline_steps(prepared, known)) is baseline
