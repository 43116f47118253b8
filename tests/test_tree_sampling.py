"""Exact acceptance on a draft tree (:func:`specviz.core.sampling.verify_tree`), on hand-built distributions.

The distribution tests draw a depth-2 tree 20,000 times (b = 2, 3 or 4 children per node; the
children sampled independently from the draft, deterministic point masses, or one sampled child
plus deterministic siblings as :class:`specviz.drafters.ModelDrafter` builds them), verify it,
and compare the first two emitted tokens with the target's joint distribution
``p0(x1) · p1[x1](x2)`` by a chi-square test. When a round emits one token only (every root child
rejected), the second token is drawn from the target's ``p1[x1]``, which is what the next round
does. Cells are the 5 × 5 = 25 pairs, so 24 degrees of freedom.

The bound. Under the null hypothesis (verify_tree is exact) the p-value is uniform, so a correct
implementation fails ``p > 0.01`` for 1% of seeds; the seed is fixed, so the test is deterministic.
Against a fault that moves the joint distribution to ``f`` the statistic is approximately
noncentral chi-square with noncentrality ``λ = N · Σ (f − p)² / p``; with 24 degrees of freedom
the 1% critical value is 42.98 and ``λ = 40`` is caught with probability 0.94
(``scipy.stats.ncx2``), so N = 20,000 draws catch any fault whose chi-square divergence exceeds
2e-3. Every target probability is >= 0.05 and every pair's >= 0.0036, so each cell expects
>= 72 draws and the chi-square approximation holds. :func:`test_a_residual_fault_is_caught`
checks the power on a real fault (siblings tested against the target instead of the residual):
it must fail the same test.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

import specviz.core.sampling as sampling_module
from specviz.core.sampling import sample, verify, verify_tree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V = 5
N_DRAWS = 20_000
P0 = torch.tensor([0.30, 0.10, 0.25, 0.05, 0.30])  # target at the context
Q0 = torch.tensor([0.10, 0.40, 0.10, 0.30, 0.10])  # draft at the context: far from P0
# Target and draft after each first token x (rows), all entries >= 0.05.
P1 = torch.tensor([
    [0.40, 0.15, 0.15, 0.15, 0.15],
    [0.05, 0.05, 0.30, 0.30, 0.30],
    [0.20, 0.20, 0.20, 0.20, 0.20],
    [0.10, 0.60, 0.10, 0.10, 0.10],
    [0.25, 0.05, 0.25, 0.20, 0.25],
])
Q1 = torch.tensor([
    [0.10, 0.50, 0.10, 0.20, 0.10],
    [0.30, 0.30, 0.20, 0.10, 0.10],
    [0.60, 0.10, 0.10, 0.10, 0.10],
    [0.10, 0.10, 0.10, 0.10, 0.60],
    [0.20, 0.20, 0.20, 0.20, 0.20],
])
P2 = torch.full((V,), 1.0 / V)  # after a depth-2 node: the bonus row (not part of the test)
# Deterministic children: at the context (b = 4 repeats token 3, which verify_tree must merge),
# and after each first token x.
FIXED0 = {2: [3, 0], 3: [3, 0, 1], 4: [3, 0, 3, 1]}


def fixed1(x: int, b: int) -> list[int]:
    return [(x + j + 1) % V for j in range(b)]


EYE = torch.eye(V)


def one_hot(tokens: list[int]) -> torch.Tensor:
    return EYE[tokens]


def mixed_children(first: int, q: torch.Tensor, b: int) -> list[int]:
    """One sampled child, then the draft's most likely other tokens (ModelDrafter's siblings)."""
    return [first] + [t for t in q.argsort(descending=True, stable=True).tolist() if t != first][: b - 1]


def child_draws(kind: str, b: int, n: int, gen) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's random draws for ``n`` trees, made in two batched calls: ``(n, b)`` children of
    the context and ``(n, b, b)`` children of each of them (by node position), independent."""
    root = sample(Q0.expand(n, b, V), gen)
    if kind == "mixed":  # node j's first child drawn from Q1 of that node's token
        tokens = torch.stack([torch.tensor(mixed_children(int(r[0]), Q0, b)) for r in root])
        return root, sample(Q1[tokens].unsqueeze(2).expand(n, b, b, V), gen)
    return root, sample(Q1[root].unsqueeze(2).expand(n, b, b, V), gen)


def node_children(kind: str, b: int, q: torch.Tensor, fixed: list[int], draws: list[int]):
    """``b`` children of one node: tokens, p_draft rows, point-mass flags."""
    if kind == "sampled":  # independent draws from q (duplicates happen, and stay)
        return draws, q.expand(b, V), [False] * b
    if kind == "point":
        return fixed, one_hot(fixed), [True] * len(fixed)
    tokens = mixed_children(draws[0], q, b)
    return tokens, torch.cat([q.view(1, V), one_hot(tokens[1:])]), [False] + [True] * (len(tokens) - 1)


def build_tree(kind: str, b: int, root_draws: list[int], kid_draws: list[list[int]]):
    """A depth-2 tree: ``b`` children at the context, ``b`` children under each of them."""
    tokens, rows, flags = node_children(kind, b, Q0, FIXED0[b], root_draws)
    parents = [-1] * len(tokens)
    p_target = [P0] + [P1[x] for x in tokens]
    for node, x in enumerate(list(tokens)):
        kid_tokens, kid_rows, kid_flags = node_children(kind, b, Q1[x], fixed1(x, b), kid_draws[node])
        tokens = tokens + kid_tokens
        rows = torch.cat([rows, kid_rows])
        flags = flags + kid_flags
        parents += [node] * len(kid_tokens)
        p_target += [P2] * len(kid_tokens)
    return torch.tensor(tokens), parents, rows, torch.stack(p_target), flags


def first_two_counts(kind: str, b: int, seed: int, n: int = N_DRAWS) -> tuple[torch.Tensor, int]:
    """Histogram (V, V) of the first two emitted tokens over ``n`` verified trees, and how many
    rounds accepted a node that was not its parent's first child (the siblings' share)."""
    gen = torch.Generator().manual_seed(seed)
    root_draws, kid_draws = (d.tolist() for d in child_draws(kind, b, n, gen))
    counts = torch.zeros(V, V, dtype=torch.long)
    later_sibling = 0
    # A tree of point masses is the same every round (its children are fixed): built once.
    fixed_tree = build_tree(kind, b, root_draws[0], kid_draws[0]) if kind == "point" else None
    for i in range(n):
        tokens, parents, rows, p_target, flags = fixed_tree or build_tree(kind, b, root_draws[i], kid_draws[i])
        result = verify_tree(tokens, parents, rows, p_target, flags, gen)
        emitted = [int(tokens[j]) for j in result.path] + [result.next_token]
        if len(emitted) < 2:
            emitted.append(int(sample(P1[emitted[0]], gen)))
        counts[emitted[0], emitted[1]] += 1
        first_children = {parents.index(p) for p in set(parents)}
        later_sibling += any(node not in first_children for node in result.path)
    return counts, later_sibling


def joint_p_value(counts: torch.Tensor) -> float:
    joint = (P0.view(V, 1) * P1).flatten().double()
    expected = joint / joint.sum() * counts.sum()  # float32 table rounding: renormalise in float64
    return float(stats.chisquare(counts.flatten().double().numpy(), expected.numpy()).pvalue)


@pytest.mark.parametrize("kind, b", [("sampled", 2), ("sampled", 4), ("point", 3), ("point", 4), ("mixed", 3)])
def test_tree_output_follows_the_target_joint_distribution(kind, b):
    """The first two tokens of a verified depth-2 tree are distributed as the target's (chi-square
    over the 25 pairs, 20,000 trees, p > 0.01; the bound is in the module docstring), and later
    siblings do get accepted (the residual walk is exercised, not only first children)."""
    counts, later_sibling = first_two_counts(kind, b, seed=100 + b)
    assert joint_p_value(counts) > 0.01
    assert later_sibling > N_DRAWS // 50


def test_a_residual_fault_is_caught(monkeypatch):
    """Power check: testing every sibling against the target row instead of the updated residual
    (``residual_distribution`` returning ``p_target``) must fail the same chi-square test."""
    monkeypatch.setattr(sampling_module, "residual_distribution", lambda p_target, p_draft: p_target)
    counts, _ = first_two_counts("sampled", 3, seed=103)
    assert joint_p_value(counts) < 0.01


def test_greedy_tree_follows_the_target_argmax():
    """At T = 0 (one-hot rows) the walk accepts exactly the children that are the target's
    argmax and emits the target's next argmax: greedy tree decoding is greedy decoding."""
    argmax = [2, 4, 1]  # the target's greedy path: 2, then 4, then 1
    rows = [one_hot([argmax[0]])[0], one_hot([argmax[1]])[0], one_hot([0])[0], one_hot([argmax[2]])[0],
            one_hot([3])[0]]
    # root children 0 (wrong), 2 (right); node 1's children 3 (wrong), 4 (right, a leaf)
    tokens, parents = torch.tensor([0, 2, 3, 4]), [-1, -1, 1, 1]
    p_target = torch.stack([rows[0], rows[2], rows[1], rows[4], rows[3]])
    for point_mass in (True, False):
        result = verify_tree(tokens, parents, one_hot([0, 2, 3, 4]), p_target, point_mass, torch.Generator())
        assert result.path == [1, 3] and result.next_kind == "bonus" and result.next_token == argmax[2]
        assert result.tested == [True, True, True, True] and result.accepted == [False, True, False, True]


def test_all_children_rejected_resamples_and_names_the_last_rejected():
    """When every child fails, the next token comes from the final residual (never a rejected
    child), and ``rejected_node`` is the last child tested."""
    p_target = torch.stack([torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5])] + [P2] * 3)
    tokens, parents = torch.tensor([0, 1, 2]), [-1, -1, -1]
    result = verify_tree(tokens, parents, one_hot([0, 1, 2]), p_target, True, torch.Generator().manual_seed(0))
    assert result.path == [] and result.next_kind == "resampled" and result.next_token in (3, 4)
    assert result.rejected_node == 2 and result.tested == [True, True, True]


def test_repeated_point_mass_child_is_merged():
    """A point-mass child repeating a rejected sibling is skipped: never tested, never accepted."""
    p_target = torch.stack([torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])] + [P2] * 3)
    result = verify_tree(torch.tensor([0, 0, 2]), [-1, -1, -1], one_hot([0, 0, 2]), p_target, True,
                         torch.Generator())
    assert result.tested == [True, False, True] and result.path == [2]


def test_chain_verify_is_the_one_branch_tree():
    """``verify`` and ``verify_tree`` on a chain give the same verdicts and draws for one seed."""
    p_target = torch.stack([P0, P1[1], P1[3], P2])
    tokens = torch.tensor([1, 3, 0])
    p_draft = torch.stack([Q0, Q1[1], Q1[3]])
    for seed in range(20):
        chain = verify(tokens, p_draft, p_target, torch.Generator().manual_seed(seed))
        tree = verify_tree(tokens, [-1, 0, 1], p_draft, p_target, False, torch.Generator().manual_seed(seed))
        assert (chain.n_accepted, chain.next_token, chain.next_kind) == (tree.n_accepted, tree.next_token,
                                                                         tree.next_kind)
        torch.testing.assert_close(chain.uniforms, tree.uniforms)


def test_verify_tree_rejects_bad_trees():
    with pytest.raises(ValueError, match="parents"):
        verify_tree(torch.tensor([0, 1]), [-1, 1], one_hot([0, 1]), torch.stack([P0] * 3), True, None)
    with pytest.raises(ValueError, match="shape"):
        verify_tree(torch.tensor([0, 1]), [-1, 0], one_hot([0, 1]), torch.stack([P0] * 2), True, None)
