"""Token Recycling (:mod:`specviz.drafters.recycle`) and prompt lookup combined with it
(:class:`specviz.drafters.combined.LookupThen`), on tiny random Llama models (float32, CPU).

* the paper's static tree, and its cut to a CPU verify pass's budget;
* the adjacency table: overwritten rows, the last occurrence winning, its row cap, snapshots;
* the drafter's breadth-first walk of the table;
* through the engine: the table learns the verify pass's own top-k (no extra pass), greedy output
  equals plain greedy output for chains and trees, and the bench empties the table before each call.

The chi-square exactness test of both drafters through the whole loop is in
tests/test_recycle_distribution.py.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama
from test_tree_engine import PROMPTS, check_tree_counters, off_first_branch, plain_ids

from specviz.drafters import RECYCLE_TABLE, PromptLookupDrafter, RecycleDrafter, RecycleTable, clear_recycle_table
from specviz.core.drafttree import DraftTree
from specviz.drafters.combined import LookupThen, merge_trees
from specviz.drafters.recycle import PAPER_TREE, static_tree
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig

VOCAB = 256
GREEDY = SamplingConfig(temperature=0.0)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------- the static tree
def test_the_paper_tree_is_a_tree_of_80_nodes_in_6_levels():
    """Appendix 8.1 of Luo et al. 2025: 8, 21, 25, 15, 8 and 3 nodes per level, every node's parent
    in the tree, and the candidates of one node distinct."""
    assert len(PAPER_TREE) == len(set(PAPER_TREE)) == 80
    assert [sum(len(p) == d for p in PAPER_TREE) for d in range(1, 7)] == [8, 21, 25, 15, 8, 3]
    assert all(len(p) == 1 or p[:-1] in PAPER_TREE for p in PAPER_TREE)
    assert PAPER_TREE[:8] == tuple((j,) for j in range(8))


def test_the_cut_tree_keeps_the_likeliest_paths_first():
    # A chain is the top-1 spine, as deep as K even past the paper's 6 levels.
    assert static_tree(8, 1, 99) == [(0,) * d for d in range(1, 9)]
    # N = 2K = 8 nodes at K = 4: the spine, then the paths that leave it once for a second choice.
    assert static_tree(4, 8, 8) == [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0), (1,), (0, 1), (1, 0), (0, 0, 1)]
    for k, b, n in ((3, 2, 6), (4, 4, 12), (5, 8, 10), (6, 8, 80), (2, 3, 99)):
        paths = static_tree(k, b, n)
        assert len(paths) <= n and len(set(paths)) == len(paths)
        assert all(len(p) <= k and max(p) < b for p in paths)
        assert all(len(p) == 1 or p[:-1] in paths[: paths.index(p)] for p in paths)  # parents first
        assert all(p in PAPER_TREE or set(p) == {0} for p in paths)
    assert set(static_tree(6, 8, 999)) == set(PAPER_TREE)


# --------------------------------------------------------------------------- the table
def test_a_row_is_overwritten_and_the_last_occurrence_wins():
    table = RecycleTable(max_rows=8, k=3)
    assert table.row(5) == [] and len(table) == 0
    table.update([5, 9], torch.tensor([[1, 2, 3], [4, 5, 6]]))
    assert table.row(5) == [1, 2, 3] and table.row(9) == [4, 5, 6] and table.row(700) == []
    table.update([5, 7, 5], torch.tensor([[7, 8, 9], [0, 1, 2], [3, 4, 5]]))
    assert table.row(5) == [3, 4, 5] and table.row(7) == [0, 1, 2] and len(table) == 3
    table.update([1], torch.tensor([[6, 5, 4, 3, 2]]))  # wider rows keep the first k
    table.update([2], torch.tensor([[6]]))  # narrower ones leave the rest empty
    assert table.row(1) == [6, 5, 4] and table.row(2) == [6]
    with pytest.raises(ValueError, match="one row of top ids per token"):
        table.update([1, 2], torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match=">= 0"):
        table.update([-1], torch.tensor([[1, 2, 3]]))


def test_the_table_is_bounded_the_row_updated_longest_ago_reused():
    table = RecycleTable(max_rows=3, k=2)
    table.update([10, 11, 12], torch.tensor([[1, 1], [2, 2], [3, 3]]))
    table.update([10], torch.tensor([[4, 4]]))  # 11 is now the row updated longest ago
    table.update([13], torch.tensor([[5, 5]]))
    assert len(table) == 3 and table.row(11) == [] and table.row(10) == [4, 4] and table.row(13) == [5, 5]
    table.update([14, 15], torch.tensor([[6, 6], [7, 7]]))
    assert [t for t in range(10, 16) if table.row(t)] == [13, 14, 15]
    assert table._rows.shape == (3, 2)  # the rows never grow past the cap


def test_a_snapshot_restores_the_table_and_clear_empties_it():
    table = RecycleTable(max_rows=4, k=2)
    table.update([1, 2], torch.tensor([[3, 4], [5, 6]]))
    saved = table.snapshot()
    table.update([1, 9, 8, 7], torch.tensor([[0, 0], [1, 1], [2, 2], [3, 3]]))
    table.restore(saved)
    assert table.row(1) == [3, 4] and table.row(2) == [5, 6] and table.row(9) == [] and len(table) == 2
    table.clear()
    assert len(table) == 0 and table.row(1) == []
    RECYCLE_TABLE.update([3], torch.tensor([[1, 2, 3]]))
    clear_recycle_table()
    assert len(RECYCLE_TABLE) == 0


# --------------------------------------------------------------------------- the walk
def test_the_draft_is_the_static_tree_filled_from_the_table():
    """From the last token 1: its candidates [2, 3], 2's [4, 5], 4's [6, 1]; 3, 5 and 6 have no
    row, so their subtrees are left out and the budget goes to the next paths in order."""
    table = RecycleTable(k=2)
    table.update([1, 2, 4], torch.tensor([[2, 3], [4, 5], [6, 1]]))
    drafter = RecycleDrafter(VOCAB, table)
    chain = drafter.propose([9, 1], 4, GREEDY, None)
    assert chain.tokens == [2, 4, 6] and chain.is_chain and all(chain.point_mass)
    tree = drafter.propose([9, 1], 3, GREEDY, None, branches=2, max_nodes=6)
    # Paths in order: 0, 00, 000, 1, 01, 10 (no row for 3: left out), 001
    assert list(zip(tree.tokens, tree.parents)) == [(2, -1), (4, 0), (6, 1), (3, -1), (5, 0), (1, 1)]
    torch.testing.assert_close(tree.p_draft.sum(-1), torch.ones(6))
    assert drafter.propose([9, 7], 3, GREEDY, None, branches=2).tokens == []  # no row for 7: nothing
    assert drafter.propose([], 3, GREEDY, None).tokens == [] and drafter.propose([1], 0, GREEDY, None).tokens == []


# --------------------------------------------------------------------------- through the engine
def test_the_table_learns_each_verify_pass_own_top_k_with_no_extra_pass(target):
    """After every round, the rows of the tokens the pass scored (the last committed token and
    every node) hold the target's top 8 after them, computed here by separate causal passes; the
    loop ran exactly one target pass per round that fed it anything, plus the prefill."""
    counting, calls = [True], [0]

    def count(module, args):
        calls[0] += counting[0]

    handle = target.register_forward_pre_hook(count)
    table = RecycleTable()
    try:
        gen = Generation(target, PROMPTS[0], RecycleDrafter(VOCAB, table), k=3, sampling=GREEDY, max_new_tokens=20,
                         branches=2)
        committed, fed = list(PROMPTS[0]), 1
        for round_ in gen:
            counting[0] = False
            fed += bool(round_.drafted) or not round_.root_from_prefill
            scored = [(committed, committed[-1])]
            for node in round_.drafted:
                path, parent = [node.id], node.parent
                while parent >= 0:
                    path.insert(0, round_.drafted[parent].id)
                    parent = round_.drafted[parent].parent
                scored.append((committed + path, node.id))
            last = {token: context for context, token in scored}  # a later occurrence overwrites
            with torch.inference_mode():
                for token, context in last.items():
                    expected = target(input_ids=torch.tensor([context])).logits[0, -1, :VOCAB].topk(8).indices
                    assert table.row(token) == expected.tolist()
            committed += [t.id for t in round_.emitted]
            counting[0] = True
    finally:
        handle.remove()
    assert calls[0] == fed
    assert sum(r.n_accepted for r in gen.rounds) > 0 and any(len(r.drafted) > 3 for r in gen.rounds)


@pytest.mark.parametrize("branches", [1, 2, 4], ids=["chain", "tree-2", "tree-4"])
def test_greedy_recycling_equals_plain_greedy(target, branches):
    """At temperature 0 the output is plain greedy output for K in {2, 4} and both node budgets, with
    one table kept hot across the runs (as the app keeps a visitor's); recycled drafts are accepted
    and, in trees, some accepted paths leave the first branch."""
    n, table, accepted, left_first = 24, RecycleTable(), 0, 0
    for prompt in PROMPTS:
        expected = plain_ids(target, prompt, n)
        for k, nodes in ((2, None), (4, None), (4, 12)):
            gen = Generation(target, prompt, RecycleDrafter(VOCAB, table), k=k, sampling=GREEDY, max_new_tokens=n,
                             branches=branches, tree_nodes=nodes if branches > 1 else None).run()
            assert gen.token_ids == expected, f"prompt {prompt}, B={branches}, K={k}, N={nodes}"
            check_tree_counters(gen, k, nodes or (2 * k if branches > 1 else k))
            accepted += sum(r.n_accepted for r in gen.rounds)
            left_first += sum(off_first_branch(r) for r in gen.rounds)
    assert accepted > 10
    assert left_first > 0 if branches > 1 else left_first == 0


def test_lookup_then_recycling_takes_tree_branches_from_both_and_keeps_greedy_text(target):
    """A prompt whose trigrams repeat: chains come from lookup where it matches and from the table
    elsewhere; trees merge both (lookup's branches first). Output: plain greedy output."""
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 11, 5, 6, 7]
    expected = plain_ids(target, prompt, 32)
    for branches in (1, 2):
        table, turns = RecycleTable(), []
        drafter = LookupThen(RecycleDrafter(VOCAB, table), PromptLookupDrafter(VOCAB, min_ngram=3), label="recycle")
        assert drafter.wants_top_ids == 8 and drafter.table is table and not drafter.uses_model
        for _ in range(2):  # the second run drafts from a hot table
            gen = Generation(target, prompt, drafter, k=3, sampling=GREEDY, max_new_tokens=32, branches=branches)
            for round_ in gen:
                turns.append(drafter.last)
                assert all(node.p_draft == 1.0 for node in round_.drafted)  # every node a point mass
            assert gen.token_ids == expected
            check_tree_counters(gen, 3, 6 if branches > 1 else 3)
        # Round 1 copies (the table is still empty); trees later take branches from both.
        assert turns[0] == "lookup" and "recycle" in turns, turns
        assert ("both" in turns) == (branches > 1), turns


def test_merged_trees_share_point_mass_prefixes_but_never_merge_a_sampled_node():
    first = DraftTree.point_masses([1, 2, 3], [-1, 0, -1], VOCAB)
    second = DraftTree.point_masses([1, 4, 3, 5], [-1, 0, -1, 2], VOCAB)
    merged = merge_trees(first, second)
    assert list(zip(merged.tokens, merged.parents)) == [(1, -1), (2, 0), (3, -1), (4, 0), (5, 2)]
    assert merge_trees(first, second, max_nodes=4).tokens == [1, 2, 3, 4]
    sampled = DraftTree([1, 6], [-1, 0], torch.full((2, VOCAB), 1.0 / VOCAB), steps=2)
    merged = merge_trees(first, sampled)
    assert list(zip(merged.tokens, merged.parents)) == [(1, -1), (2, 0), (3, -1), (1, -1), (6, 3)]
    assert merged.point_mass == [True, True, True, False, False] and merged.steps == 2
    torch.testing.assert_close(merged.p_draft[3], sampled.p_draft[0])


def test_the_bench_empties_the_table_before_every_call(monkeypatch):
    """Every timed call of :class:`specviz.run.bench._Methods` finds the process-wide table empty."""
    from specviz.run import bench

    seen = []
    monkeypatch.setattr(bench, "time_ours", lambda *args, **kwargs: seen.append(len(RECYCLE_TABLE)))
    methods = bench._Methods(None, RecycleDrafter(VOCAB), [2], 0, transformers_baselines=False,
                             instrument_check=False, branches=2)
    for method, k in methods.list:
        RECYCLE_TABLE.update([1, 2], torch.tensor([[3], [4]]))
        methods.call(method, k, GREEDY, [1, 2], 4)
    assert seen == [0] * len(methods.list) == [0, 0, 0]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, lm_head_scale=8.0)
