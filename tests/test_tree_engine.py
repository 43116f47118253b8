"""Tree speculation through the engine, on tiny random Llama models (2 layers, float32, CPU).

What must hold for trees as for chains (tests/test_engine.py):

* greedy tree output equals plain greedy output token for token, for every drafter and B;
* after every round the target's KV cache holds exactly the committed tokens but the pending one
  (keys/values equal a fresh prefill), although the verify pass fed the whole tree and kept only
  the accepted path; the draft model's cache holds a prefix of the committed tokens;
* one verify pass per round feeds the pending tokens plus every node;
* every counter agrees with the emitted tokens and the recorded tree;
* a target whose attention cannot take a tree mask falls back to chains, with a note.

The exactness of the accept walk itself is tested on hand-built distributions in
tests/test_tree_sampling.py.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_cache_holds, fresh_kv, noisy_copy, tiny_llama

from specviz.drafters import (SUFFIX_HISTORY, ModelDrafter, PromptLookupDrafter, SuffixDrafter, SuffixHistory,
                              clear_suffix_history, prefix_tree)
from specviz.core.drafttree import DraftTree
from specviz.core.engine import Generation, tree_attention_inputs
from specviz.core.kvcache import cache_argument
from specviz.core.sampling import SamplingConfig
from specviz.figures.trace import trace_from_dict, trace_to_dict
from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED
from specviz.figures.analysis import analyse_generation

VOCAB = 256
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
# Prompts where the last tokens occur several times with different continuations, so prompt
# lookup and the suffix drafter find several matches.
PROMPTS = [
    [5, 6, 7, 8, 5, 6, 9, 10, 5, 6, 11, 12, 5, 6, 7, 13, 5, 6],
    [200, 1, 2, 3, 200, 1, 4, 200, 1, 2, 5, 200, 1],
    [3, 17, 42, 99, 5, 3, 17, 8],
]
KINDS = ["lookup", "suffix", "noisy", "random", "oracle"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def drafts(target):
    return {"noisy": noisy_copy(target, seed=5, scale=0.003), "random": tiny_llama(1, lm_head_scale=8.0)}


class OracleTreeDrafter:
    """Knows the target's greedy output and hides it in the second branch of every tree.

    Each tree is a wrong 2-token branch first, then a branch that follows the reference for a
    few tokens and then goes wrong (its length cycles with the round), so at T = 0 every accepted
    path leaves the first branch and ends inside the second: the target's cache must be
    index-selected to the second branch every round.
    """

    uses_model = False
    name = "oracle tree"

    def __init__(self, reference: list[int]) -> None:
        self.reference = reference
        self.rounds = 0

    def prefill(self, context):
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None):
        right = self.reference[len(committed) : len(committed) + k]
        if not right:
            return DraftTree.point_masses([], [], VOCAB)
        self.rounds += 1
        right = right[: 1 + self.rounds % len(right)]
        if len(right) < k:
            right = right + [(right[-1] + 7) % VOCAB]  # a wrong token after the right ones
        wrong = [(right[0] + 1) % VOCAB, (right[0] + 2) % VOCAB]
        tokens = wrong + right
        parents = [-1, 0, -1] + list(range(2, len(right) + 1))
        return DraftTree.point_masses(tokens, parents, VOCAB)

    def rollback(self, valid, path=None):
        pass

    def finish(self, prompt, output):
        pass


def make_drafter(kind: str, drafts: dict, prompt: list[int] | None = None, target=None):
    if kind == "oracle":
        return OracleTreeDrafter(prompt + plain_ids(target, prompt, 64))
    if kind == "lookup":
        return PromptLookupDrafter(VOCAB)
    if kind == "suffix":
        return SuffixDrafter(VOCAB, history=SuffixHistory())
    return ModelDrafter(drafts[kind], VOCAB)


def plain_ids(target, prompt, n) -> list[int]:
    return Generation(target, prompt, None, sampling=GREEDY, max_new_tokens=n).run().token_ids


def depths(round_) -> list[int]:
    out: list[int] = []
    for token in round_.drafted:
        out.append(1 if token.parent < 0 else out[token.parent] + 1)
    return out


def off_first_branch(round_) -> bool:
    """The accepted path left the first-listed branch (so the cache had to be index-selected)."""
    return any(t.accepted for i, t in enumerate(round_.drafted) if not all(u.accepted for u in round_.drafted[:i]))


def check_tree_counters(gen: Generation, k: int, max_nodes: int) -> None:
    """Every counter of a finished tree run agrees with its recorded trees and emitted tokens."""
    eos_round = len(gen.rounds) - 1 if gen.finish_reason == "eos" else None
    for r in gen.rounds:
        d = depths(r)
        assert all(t.parent is not None and -1 <= t.parent < i for i, t in enumerate(r.drafted))
        assert len(r.drafted) <= max_nodes and max(d, default=0) <= k
        path = [i for i, t in enumerate(r.drafted) if t.accepted]
        # The accepted nodes form one path from the root, one node per depth.
        assert [d[i] for i in path] == list(range(1, len(path) + 1))
        assert all(r.drafted[i].parent == (path[j - 1] if j else -1) for j, i in enumerate(path))
        assert r.n_accepted == len(path)
        # Tested nodes are children of the context or of an accepted node; accepted ones were tested.
        allowed_parents = {-1, *path}
        assert all(t.parent in allowed_parents for t in r.drafted if t.tested)
        assert all(t.tested for t in r.drafted if t.accepted)
        kinds = [t.kind for t in r.emitted]
        ids = [t.id for t in r.emitted]
        assert ids[: r.n_accepted] == [r.drafted[i].id for i in path]
        if r.index == eos_round:
            assert kinds[:-1] == [ACCEPTED] * (len(kinds) - 1)
            continue
        last = path[-1] if path else -1
        children = [i for i, t in enumerate(r.drafted) if t.parent == last]
        if not r.drafted:
            assert kinds == [PLAIN]
        elif children:  # every child of the last accepted node failed
            assert kinds == [ACCEPTED] * r.n_accepted + [RESAMPLED]
            rejected = r.emitted[-1].rejected_id
            assert rejected in [r.drafted[i].id for i in children if r.drafted[i].tested]
            # The residual has no mass on a rejected child.
            assert r.emitted[-1].id not in [r.drafted[i].id for i in children if r.drafted[i].tested]
        else:
            assert kinds == [ACCEPTED] * r.n_accepted + [BONUS]
    s = analyse_generation(gen)
    assert s.emitted == len(gen.tokens) == sum(s.counts.values())
    assert s.counts[ACCEPTED] == s.accepted == sum(r.n_accepted for r in gen.rounds)
    assert s.proposed == sum(len(r.drafted) for r in gen.rounds)
    assert s.tested == sum(1 for r in gen.rounds for t in r.drafted if t.tested)
    if s.proposed:
        assert 0.0 <= s.acceptance_rate <= s.alpha <= 1.0
        assert sum(p.accepted for p in s.per_position) == s.accepted
    assert s.tokens_per_pass == len(gen.tokens) / len(gen.rounds)
    assert [t.id for r in gen.rounds for t in r.emitted] == gen.token_ids


# --------------------------------------------------------------------------- tree attention


def test_tree_attention_pass_gives_each_path_its_chain_logits(target):
    """One pass over a tree (after 2 pending tokens, on a cached prefix) gives, at every node,
    the logits of a plain causal pass over the context and that node's root-to-node path."""
    context = [3, 17, 42, 99, 5, 6]
    tokens, parents = [10, 11, 12, 13, 14, 15], [-1, 0, 0, -1, 3, 1]
    cached, pending = context[:4], context[4:]
    cache = fresh_kv(target, cached)
    mask, positions = tree_attention_inputs(parents, len(cached), len(pending), torch.float32, torch.device("cpu"))
    assert mask.shape == (1, 1, 8, 12) and positions.tolist() == [[4, 5, 6, 7, 7, 6, 7, 8]]
    with torch.inference_mode():
        tree_logits = target(input_ids=torch.tensor([pending + tokens]), attention_mask=mask, position_ids=positions,
                             **cache_argument(target, cache), use_cache=True).logits[0]
        for i in range(len(tokens)):
            path, node = [], i
            while node >= 0:
                path.insert(0, tokens[node])
                node = parents[node]
            chain = target(input_ids=torch.tensor([context + path]), use_cache=False).logits[0, -1]
            torch.testing.assert_close(tree_logits[len(pending) + i], chain, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- greedy equality


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_tree_equals_plain_greedy(target, drafts, kind):
    """At temperature 0 the tree run's output is plain greedy output, for B in {2, 4}, K in {2, 4},
    the default node budget and a tight one; some accepted paths leave the first branch."""
    n = 24
    left_first_branch = 0
    for prompt in PROMPTS:
        expected = plain_ids(target, prompt, n)
        for b in (2, 4):
            for k, nodes in ((2, None), (4, None), (4, 5)):
                gen = Generation(target, prompt, make_drafter(kind, drafts, prompt, target), k=k, sampling=GREEDY,
                                 max_new_tokens=n, branches=b, tree_nodes=nodes + 2 if nodes else None).run()
                assert gen.token_ids == expected, f"prompt {prompt}, B={b}, K={k}, N={nodes}"
                check_tree_counters(gen, k, nodes + 2 if nodes else 2 * k + 2)
                left_first_branch += sum(off_first_branch(r) for r in gen.rounds)
    if kind in ("noisy", "oracle"):
        assert left_first_branch > 0


# --------------------------------------------------------------------------- KV caches


@pytest.mark.parametrize("kind, sampling", [("lookup", SAMPLED), ("noisy", SAMPLED), ("noisy", GREEDY),
                                            ("suffix", GREEDY), ("oracle", GREEDY)],
                         ids=["lookup-t1", "noisy-t1", "noisy-t0", "suffix-t0", "oracle-t0"])
def test_caches_hold_committed_tokens_after_every_tree_round(target, drafts, kind, sampling):
    """Target: at the start of every verify pass the cache equals a fresh prefill of the committed
    tokens but the pending one, and the pass feeds the pending tokens plus every node. Draft model:
    after every round its cache equals a fresh prefill of a prefix of the committed tokens (its
    spine up to where the accepted path left it)."""
    prompt = PROMPTS[0]
    drafter = make_drafter(kind, drafts, prompt, target)
    gen = Generation(target, prompt, drafter, k=4, sampling=sampling, max_new_tokens=40, seed=3, branches=3,
                     tree_nodes=8)
    fed = []

    def check_target_cache(module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # the keyword of 5.24+, or before
        if cache.get_seq_length() == 0:  # the prefill
            return
        committed = prompt + gen.token_ids
        assert_cache_holds(cache, target, committed if not gen.rounds else committed[:-1])  # round 1: all
        fed.append(kwargs["input_ids"].shape[1])

    handle = target.register_forward_pre_hook(check_target_cache, with_kwargs=True)
    try:
        for _ in gen:
            if isinstance(drafter, ModelDrafter):
                committed = prompt + gen.token_ids
                length = drafter.cache.get_seq_length()
                assert length < len(committed)
                assert_cache_holds(drafter.cache, drafter.model, committed[:length])
    finally:
        handle.remove()
    assert_cache_holds(gen._cache, target, (prompt + gen.token_ids)[: gen._cache.get_seq_length()])
    assert fed == [int(not r.root_from_prefill) + len(r.drafted) for r in gen.rounds
                   if r.drafted or not r.root_from_prefill]
    check_tree_counters(gen, 4, 8)
    assert any(not all(t.parent == i - 1 for i, t in enumerate(r.drafted)) for r in gen.rounds)  # real trees
    if kind == "oracle":
        assert all(off_first_branch(r) for r in gen.rounds if r.drafted)


@pytest.mark.parametrize("kind", ["lookup", "noisy", "random"])
def test_sampled_tree_counters_agree(target, drafts, kind):
    """At temperature 1 (rejections, resamples from residuals after several siblings) every
    counter still agrees with the recorded trees and the emitted tokens."""
    for prompt in PROMPTS:
        gen = Generation(target, prompt, make_drafter(kind, drafts), k=4, sampling=SAMPLED, max_new_tokens=30,
                         seed=7, branches=4).run()
        check_tree_counters(gen, 4, 8)


def test_tree_trace_round_trips(target):
    gen = Generation(target, PROMPTS[0], PromptLookupDrafter(VOCAB), k=4, sampling=SAMPLED, max_new_tokens=20,
                     seed=2, branches=4, decode=lambda ids: " ".join(map(str, ids))).run()
    rounds, _ = trace_from_dict(trace_to_dict(gen.rounds))
    assert rounds == gen.rounds
    assert any(any(t.parent == -1 for t in r.drafted[1:]) for r in rounds)  # a real tree is in it


# --------------------------------------------------------------------------- fallback


def test_sliding_window_target_falls_back_to_chains_with_a_note():
    model = tiny_llama(0, lm_head_scale=8.0)
    model.config.layer_types = ["sliding_attention", "full_attention"]
    gen = Generation(model, PROMPTS[0], PromptLookupDrafter(VOCAB), k=4, sampling=GREEDY, max_new_tokens=12,
                     branches=4).run()
    assert len(gen.notes) == 1 and "chains" in gen.notes[0] and "sliding" in gen.notes[0]
    assert all(t.parent == i - 1 for r in gen.rounds for i, t in enumerate(r.drafted))
    assert gen.token_ids == plain_ids(model, PROMPTS[0], 12)


def test_bad_tree_settings_raise(target):
    for kwargs in ({"branches": 0}, {"branches": 99}, {"tree_nodes": 2}):
        with pytest.raises(ValueError):
            Generation(target, PROMPTS[0], PromptLookupDrafter(VOCAB), k=4, **kwargs).run()


# --------------------------------------------------------------------------- drafters


def test_prompt_lookup_tree_merges_distinct_matches():
    """Up to B distinct continuations, longest match and most recent first, merged in a prefix
    tree within the budget; B = 1 is the chain lookup; one match gives the chain."""
    drafter = PromptLookupDrafter(VOCAB)
    context = [1, 2, 3, 9, 9, 1, 2, 4, 5, 1, 2, 3, 7, 1, 2]  # three matches of [1, 2], depth 2·2 = 4
    assert drafter.branches(context, 4, 4) == [[3, 7, 1, 2], [4, 5, 1, 2], [3, 9, 9, 1]]
    tree = drafter.propose(context, 4, GREEDY, None, branches=4, max_nodes=10)
    assert tree.tokens == [3, 7, 1, 2, 4, 5, 1, 2, 9, 9] and tree.parents == [-1, 0, 1, 2, -1, 4, 5, 6, 0, 8]
    assert all(tree.point_mass) and tree.p_draft.shape == (10, VOCAB)
    chain = drafter.propose(context, 4, GREEDY, None)
    assert chain.tokens == drafter.lookup(context, 4) == [3, 7, 1, 2] and chain.is_chain
    single = [8, 1, 2, 3, 4, 6, 1, 2]
    assert drafter.propose(single, 4, GREEDY, None, branches=4).tokens == [3, 4, 6, 1]
    assert prefix_tree([[1, 2], [1, 3], [4]], 2) == ([1, 2], [-1, 0])


def test_tree_branches_are_as_deep_as_their_match_is_long():
    """SuffixDecoding's rule: a branch is at most depth_factor (2) × its match length deep, and
    the longer match ranks first even when a shorter one is more recent; the chain (B = 1) is the
    classic lookup, K deep whatever the match length."""
    context = [6, 7, 8, 1, 2, 3, 4, 5, 9, 8, 3, 3, 3, 3, 6, 7, 8]  # [6, 7, 8] at 0, a lone [8] at 9
    drafter = PromptLookupDrafter(VOCAB)
    assert drafter.branches(context, 8, 4) == [[1, 2, 3, 4, 5, 9], [3, 3]]  # 2·3 and 2·1 tokens
    tree = drafter.propose(context, 8, GREEDY, None, branches=4, max_nodes=16)
    assert tree.tokens == [1, 2, 3, 4, 5, 9, 3, 3] and tree.parents == [-1, 0, 1, 2, 3, 4, -1, 6]
    assert drafter.propose(context, 8, GREEDY, None).tokens == [1, 2, 3, 4, 5, 9, 8, 3]
    assert PromptLookupDrafter(VOCAB, depth_factor=1).branches(context, 8, 4) == [[1, 2, 3], [3]]
    suffix = SuffixDrafter(VOCAB, history=SuffixHistory())
    assert suffix.continuations(context, 8) == (3, [[1, 2, 3, 4, 5, 9, 8, 3]])
    assert suffix.propose(context, 8, GREEDY, None, branches=4).tokens == [1, 2, 3, 4, 5, 9]
    assert suffix.propose(context, 8, GREEDY, None).tokens == [1, 2, 3, 4, 5, 9, 8, 3]
    with pytest.raises(ValueError):
        PromptLookupDrafter(VOCAB, depth_factor=0)


def test_model_drafter_tree_adds_point_mass_siblings_to_its_spine(target):
    drafter = ModelDrafter(target, VOCAB)
    drafter.prefill(PROMPTS[0][:-1])
    tree = drafter.propose(PROMPTS[0], 4, SAMPLED, torch.Generator().manual_seed(0), branches=3, max_nodes=9)
    assert isinstance(tree, DraftTree) and len(tree) == 9 and tree.steps == 4
    assert tree.parents[:4] == [-1, 0, 1, 2] and tree.point_mass == [False] * 4 + [True] * 5
    siblings: dict[int, list[int]] = {}
    for token, parent in zip(tree.tokens, tree.parents):
        siblings.setdefault(parent, []).append(token)
    assert all(len(set(s)) == len(s) <= 3 for s in siblings.values())


def test_suffix_drafter_learns_earlier_outputs_and_forgets_them_when_cleared(target):
    """A second greedy run of the same prompt finds the first run's output in the history and
    drafts far more of it; clearing the history forgets it."""
    history = SuffixHistory()
    prompt = [9, 8, 7, 6]

    def run():
        return Generation(target, prompt, SuffixDrafter(VOCAB, history=history), k=4, sampling=GREEDY,
                          max_new_tokens=24, branches=2).run()

    first = run()
    assert history.sequences == [first.token_ids]
    second = run()
    assert second.token_ids == first.token_ids
    assert analyse_generation(second).tokens_per_pass > analyse_generation(first).tokens_per_pass
    history.clear()
    assert len(history) == 0
    SUFFIX_HISTORY.add([1, 2, 3])
    clear_suffix_history()
    assert len(SUFFIX_HISTORY) == 0


def test_eos_inside_an_accepted_tree_path_ends_the_output_there(target):
    """An EOS on the accepted path (in the tree's second branch) ends the output right after it,
    as plain decoding does, and the round's counters drop the nodes deeper than it."""
    prompt = PROMPTS[2]
    reference = plain_ids(target, prompt, 40)
    position = next(i for i in range(3, 40) if reference[i] not in reference[:i])
    eos = reference[position]
    gen = Generation(target, prompt, OracleTreeDrafter(prompt + reference), k=4, sampling=GREEDY, max_new_tokens=40,
                     eos_token_ids=(eos,), branches=2, tree_nodes=6).run()
    assert gen.token_ids == reference[: position + 1] and gen.finish_reason == "eos"
    check_tree_counters(gen, 4, 6)
    last = gen.rounds[-1]
    assert max(depths(last), default=0) <= last.n_accepted or last.emitted[-1].kind != ACCEPTED
