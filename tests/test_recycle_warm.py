"""Token Recycling's warm start (:func:`specviz.drafters.recycle.warm_table`): the paper's hot
start from a fixed text, on tiny random Llama models (float32, CPU).

* the warm table holds the target's own top-k after each token of the warm text (a later
  occurrence winning), checked against separate plain forward passes;
* a warmed run drafts from its first pass and keeps plain greedy output, chains and trees;
* the bench empties the table and puts the same warm rows back before every call;
* the bundled warm text leaves out the bench's topics and shares no phrase with its prompts.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import bpe_tokenizer, tiny_llama
from test_tree_engine import PROMPTS, check_tree_counters, plain_ids

from specviz.drafters import RECYCLE_TABLE, RecycleDrafter, RecycleTable
from specviz.drafters.recycle import (
    WARM_MAX_TOKENS,
    warm_table,
    warm_text,
    warm_token_ids,
)
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig

VOCAB = 256
GREEDY = SamplingConfig(temperature=0.0)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def warm_ids(seed: int, n: int) -> list[int]:
    """``n`` ids over a small alphabet (so tokens repeat, and later occurrences overwrite), with
    the tokens the test prompts end on among them."""
    generator = torch.Generator().manual_seed(seed)
    alphabet = torch.tensor(sorted({t for p in PROMPTS for t in p} | {20, 30, 40, 50, 60}))
    return alphabet[torch.randint(len(alphabet), (n,), generator=generator)].tolist()


def test_the_warm_table_holds_the_target_top_k_after_each_warm_token(target):
    """Chunks of 16 tokens, each its own sequence: every token's row is the top 8 of a plain
    forward pass over its chunk at its last occurrence."""
    ids = warm_ids(1, 40)
    table = RecycleTable()
    assert warm_table(target, ids, table, chunk=16, vocab_size=VOCAB) == 3
    expected = {}
    with torch.inference_mode():
        for start in range(0, len(ids), 16):
            piece = ids[start : start + 16]
            top = target(input_ids=torch.tensor([piece])).logits[0, :, :VOCAB].topk(8, dim=-1).indices
            expected.update({token: row.tolist() for token, row in zip(piece, top)})
    assert len(table) == len(expected) == len(set(ids))
    for token, row in expected.items():
        assert table.row(token) == row, token
    with pytest.raises(ValueError, match="chunk"):
        warm_table(target, ids, table, chunk=0)


@pytest.mark.parametrize("branches", [1, 2], ids=["chain", "tree-2"])
def test_a_warmed_run_drafts_from_its_first_pass_and_keeps_plain_greedy_output(target, branches):
    """Each run starts from the same warm table (the bench's protocol): its first verify pass
    already has a draft (the prompt's last token has a row), and the output is plain greedy."""
    warm = RecycleTable()
    warm_table(target, warm_ids(2, 96), warm, chunk=32, vocab_size=VOCAB)
    saved, accepted = warm.snapshot(), 0
    for prompt in PROMPTS:
        expected = plain_ids(target, prompt, 24)
        for k in (2, 4):
            warm.restore(saved)
            gen = Generation(target, prompt, RecycleDrafter(VOCAB, warm), k=k, sampling=GREEDY, max_new_tokens=24,
                             branches=branches).run()
            assert gen.token_ids == expected, f"prompt {prompt}, B={branches}, K={k}"
            assert gen.rounds[0].drafted, "the warm table drafts on the first pass"
            check_tree_counters(gen, k, 2 * k if branches > 1 else k)
            accepted += sum(r.n_accepted for r in gen.rounds)
    assert accepted > 10


def test_the_bench_warms_the_same_table_before_every_call(monkeypatch, loaded):
    """:func:`specviz.run.bench.warm_snapshot` reads the warm text's first 64 tokens once; every
    timed call then finds exactly those rows, whatever the call before it wrote."""
    from specviz.run import bench

    vocab = loaded.vocab_size
    warm = bench.warm_snapshot(loaded, 64)
    rows = {t: RECYCLE_TABLE.row(t) for t in range(vocab) if RECYCLE_TABLE.row(t)}
    assert rows and len(RECYCLE_TABLE) == len(set(warm_token_ids(loaded.tokenizer, 64)))
    assert bench.warm_snapshot(loaded, 0) is None and len(RECYCLE_TABLE) == 0
    seen = []
    monkeypatch.setattr(bench, "time_ours", lambda *args, **kwargs: seen.append(
        {t: RECYCLE_TABLE.row(t) for t in range(vocab) if RECYCLE_TABLE.row(t)}))
    methods = bench._Methods(None, RecycleDrafter(vocab), [2], 0, transformers_baselines=False,
                             instrument_check=False, branches=2, warm=warm)
    for method, k in methods.list:
        RECYCLE_TABLE.update([1, 2, 250], torch.tensor([[3], [4], [5]]))  # what a call would have learnt
        methods.call(method, k, GREEDY, [1, 2], 4)
    assert seen == [rows] * len(methods.list) and len(seen) == 3
    bench.recycle_table_at_start(None)
    assert len(RECYCLE_TABLE) == 0


def test_the_warm_text_leaves_out_the_bench_topics_and_shares_no_phrase_with_its_prompts():
    """No line of the warm text names a bench topic, and none shares a run of 4 words with a
    bench prompt; the ids are the text's, cut to the count asked and cached per tokenizer."""
    from specviz.run.bench import DEFAULT_PROMPTS

    text = warm_text()
    lines = text.splitlines()
    assert len(lines) > 200 and not any(line.startswith("#") for line in lines)
    topics = re.compile(r"\b(lighthouse|keeper|bottle|message|story|typo|spelling|csv|json|rename|variable|python)\b",
                        re.IGNORECASE)
    assert not [line for line in lines if topics.search(line)]

    def four_grams(s: str) -> set[tuple[str, ...]]:
        words = re.findall(r"[a-z']+", s.lower())
        return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}

    bench_grams = set().union(*(four_grams(p["prompt"]) for p in json.loads(DEFAULT_PROMPTS.read_text())))
    assert not [line for line in lines if four_grams(line) & bench_grams]
    tokenizer = bpe_tokenizer([text], chat=False, vocab_size=300)
    ids = warm_token_ids(tokenizer, WARM_MAX_TOKENS)
    assert len(ids) == WARM_MAX_TOKENS and tokenizer.decode(ids) == text[: len(tokenizer.decode(ids))]
    assert warm_token_ids(tokenizer, 10) == ids[:10] and warm_token_ids(tokenizer, 0) == []
    with pytest.raises(ValueError, match="warm-text tokens"):
        warm_token_ids(tokenizer, WARM_MAX_TOKENS + 1)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, lm_head_scale=8.0)


@pytest.fixture
def loaded():
    """A tiny target of 320 ids as a loaded model, with a tokenizer of 300 ids trained on the warm text."""
    from specviz.models.loading import LoadedModel

    tokenizer = bpe_tokenizer([warm_text()], chat=False, vocab_size=300)
    model = tiny_llama(0, vocab_size=320, lm_head_scale=8.0)
    return LoadedModel(model, tokenizer, "tiny", "tiny", torch.device("cpu"), torch.float32)
