"""Greedy speculative decoding equals plain greedy decoding on the real target, for every drafter.

SmolLM2-135M-Instruct in float32 on the CPU (the ``smollm2`` fixture), temperature 0: whatever
the drafter proposes, the emitted tokens must be the target's own argmax chain, token for token,
and the run must stop where plain decoding stops (EOS or the length limit). In float32 the batched
verify pass and the one-token plain steps agree on every argmax; in bfloat16 batched verification
can flip near-tied argmaxes, which is why this runs in float32.

Three short prompts: a copy-heavy typo fix (prompt lookup and the int8 copy get long accepted
blocks, then a rejection where the output stops copying), a CSV→JSON conversion (structured text,
short matches) and free text (prompt lookup rarely proposes; every run reaches the length
limit). Each drafter runs at a few lookaheads K, chosen for coverage within a CI budget of about a
minute for the whole file: prompt lookup costs nothing per draft, so K = 1, 3 and 8; the int8 copy
(α high, each draft step costs most of a target step) at K = 2 and K = 8 (long accepted blocks, the
bonus token, rollback of many positions); the early-exit draft rejects almost every token at
greedy, so a long K would only repeat the same path at several times the cost: K = 1 and 3; Token
Recycling at K = 4 (its table is the process's, so its drafts depend on the runs before it).
"""

from __future__ import annotations

import pytest

from specviz.models import loading as models
from specviz.drafters.registry import build_drafter
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig
from specviz.core.records import RESAMPLED

GREEDY = SamplingConfig(temperature=0.0)
MAX_NEW_TOKENS = 24
PROMPTS = {
    "typo-fix": "Fix the typo and repeat the sentence: The quick brown fox jumps over the lazy dgo near the old river bank.",
    "csv-to-json": "Convert to JSON: name,age\nAnn,31\nBo,42",
    "free-text": "Write one sentence about the sea.",
}
DRAFTERS = {
    # spec: (lookaheads, must accept a block of >= 2 drafted tokens in some round)
    "ngram": ((1, 3, 8), True),
    "int8": ((2, 8), True),
    "early-exit:6": ((1, 3), False),
    "lookup+eagle": ((3,), True),  # the shipped head where lookup finds no trigram to copy
    "recycle": ((4,), False),  # the table starts from what earlier passes taught it: blocks are not promised
}


def vocab_of(target) -> int:
    return min(target.vocab_size, target.logits_width)


def generation(target, ids, drafter, k=1) -> Generation:
    return Generation(target.model, ids, drafter, k=k, sampling=GREEDY, max_new_tokens=MAX_NEW_TOKENS,
                      eos_token_ids=tuple(target.eos_token_ids), vocab_size=vocab_of(target))


@pytest.fixture(scope="module")
def plain_greedy(smollm2):
    """Per prompt name: the chat-formatted prompt ids and plain greedy decoding of them (computed once)."""
    references = {}
    for name, text in PROMPTS.items():
        ids = smollm2.encode(text, chat=True)
        references[name] = (ids, generation(smollm2, ids, None).run())
    return references


@pytest.mark.parametrize("spec", list(DRAFTERS))
def test_greedy_speculative_output_equals_plain_greedy(smollm2, plain_greedy, spec):
    """For each prompt and K, speculative tokens == plain greedy tokens, with the same finish reason.

    The runs must also exercise what the drafter is for: a round that accepted ≥ 2 drafted tokens
    (multi-token verification) for prompt lookup and the int8 copy, and at least one rejection for
    every drafter (the cache rollback path).
    """
    lookaheads, needs_block = DRAFTERS[spec]
    drafter = build_drafter(spec, smollm2)
    assert drafter.vocab_size == vocab_of(smollm2)
    longest_block = rejections = 0
    for name, (ids, plain) in plain_greedy.items():
        for k in lookaheads:
            spec_run = generation(smollm2, ids, drafter, k=k).run()
            assert spec_run.token_ids == plain.token_ids, (spec, name, k, smollm2.decode(spec_run.token_ids))
            assert spec_run.finish_reason == plain.finish_reason, (spec, name, k)
            longest_block = max([longest_block] + [r.n_accepted for r in spec_run.rounds])
            rejections += sum(t.kind == RESAMPLED for t in spec_run.tokens)
    if needs_block:
        assert longest_block >= 2, f"{spec}: no round accepted 2 drafted tokens; multi-token verify untested"
    assert rejections > 0, f"{spec}: no draft was ever rejected; rollback untested"


def test_reference_runs_cover_eos_and_length_stops(plain_greedy):
    """The plain references end both ways: by EOS (the copy prompt) and by the length limit (free
    text), so the equality test checks that speculative runs stop at the same place in both cases."""
    reasons = {name: run.finish_reason for name, (_, run) in plain_greedy.items()}
    assert reasons["typo-fix"] == "eos"
    assert reasons["free-text"] == "length"
    assert all(len(run.token_ids) <= MAX_NEW_TOKENS for _, run in plain_greedy.values())


def test_plain_decoding_is_generate_token_for_token_even_in_bfloat16():
    """Our plain decoding computes what transformers' ``generate()`` computes: the whole prompt in
    one prefill pass (the first token comes from its last row), then one token per pass. So the
    greedy tokens agree exactly even in bfloat16, where a pass of another shape (say, a prefill of
    all but the last prompt token and then a pass over that token) flips near-tied argmaxes: on
    the CSV prompt below it did, and the two runs then wrote different answers from the first
    token on. Both runs stop at the first EOS."""
    import torch

    bf16 = models.load_model("smollm2-135m-instruct", device="cpu", dtype="bfloat16")
    eos = list(bf16.eos_token_ids)
    prompts = ["Convert this CSV to a JSON array of objects:\n\nname,age,city\nAlice,34,Paris\nBob,27,Berlin\n"
               "Carol,45,Madrid\nDavid,19,Lisbon",
               "Write a short story about a lighthouse keeper who finds a message in a bottle."]
    for text in prompts:
        ids = bf16.encode(text, chat=True)
        ours = Generation(bf16.model, ids, None, sampling=GREEDY, max_new_tokens=32, eos_token_ids=tuple(eos),
                          vocab_size=vocab_of(bf16)).run()
        with torch.inference_mode():
            out = bf16.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                      max_new_tokens=32, do_sample=False, temperature=None, top_p=None, top_k=None,
                                      eos_token_id=eos, pad_token_id=eos[0])
        assert ours.token_ids == out[0, len(ids):].tolist(), (text[:20], bf16.decode(ours.token_ids))
