"""Prompt lookup where a trigram of the context repeats, another drafter elsewhere.

:class:`LookupThen` pairs the copy machine for copy-heavy text (:mod:`specviz.drafters.lookup`)
with a drafter for free text: Token Recycling (:mod:`specviz.drafters.recycle`, the registry's
``lookup+recycle``) or the EAGLE head (:mod:`specviz.drafters.eagle`, ``lookup+eagle``, through
:class:`LookupThenEagle`). A chain comes from one of the two; a tree takes branches from both
(:func:`merge_trees`): the copy's, then the other drafter's in the room left. Each node is verified against the distribution it was drawn from, so the
output stays exactly the target's.
"""

from __future__ import annotations

import torch

from specviz.core.drafttree import DraftTree, default_tree_nodes
from specviz.drafters.eagle import EagleDrafter

__all__ = ["LookupThen", "LookupThenEagle", "merge_trees"]


def merge_trees(first: DraftTree, second: DraftTree, max_nodes: int | None = None) -> DraftTree:
    """``first``'s nodes, then ``second``'s grafted onto the same root, within ``max_nodes``.

    A point-mass node of ``second`` whose parent already has a child with its token is merged
    into that child (its children follow it there): after a node is rejected the residual holds
    no mass on its token (:mod:`specviz.core.sampling`, "Duplicates"), so a later sibling with the same
    token can only be rejected too, and leaving it out changes no outcome. A node drawn at random
    is never merged, since its rejection test updates the residual the later siblings see.

    ``max_nodes`` cuts the merged tree after that many nodes (its prefix is a tree: parents come
    first). Give it only when every node of ``second`` is a point mass: how many nodes merge
    depends on the tokens, and a cut that depends on randomly drawn tokens would make a node's
    presence depend on its siblings' draws.

    Returns:
        A :class:`~specviz.core.drafttree.DraftTree` whose ``steps`` are both trees' steps.
    """
    tokens, parents = list(first.tokens), list(first.parents)
    rows, points = list(first.p_draft), list(first.point_mass)
    child = {(parent, token): i for i, (parent, token) in enumerate(zip(parents, tokens))}
    placed: dict[int, int] = {-1: -1}  # second's node → its node in the merged tree
    for i, (token, parent) in enumerate(zip(second.tokens, second.parents)):
        parent = placed[parent]
        existing = child.get((parent, token)) if second.point_mass[i] else None
        if existing is not None:
            placed[i] = existing
            continue
        if max_nodes is not None and len(tokens) >= max_nodes:
            break
        placed[i] = len(tokens)
        child.setdefault((parent, token), len(tokens))
        tokens.append(token)
        parents.append(parent)
        rows.append(second.p_draft[i].to(first.p_draft.device))
        points.append(second.point_mass[i])
    p_draft = torch.stack(rows) if rows else first.p_draft
    return DraftTree(tokens, parents, p_draft, first.steps + second.steps, points)


class LookupThen:
    """Prompt lookup where the context repeats itself, another drafter everywhere else.

    Each round, a prompt-lookup drafter that needs a match of at least three tokens (a shorter
    match on free text is usually a common word, not a copy) proposes what followed the match, as
    point masses. As a chain, when there is no such match, ``fallback`` drafts instead. As a tree
    (B > 1) with ``fill_trees``, ``fallback``'s tree fills the node budget the lookup left
    (:func:`merge_trees`): lookup's branches first, then the fallback's, shared prefixes merged.

    Which drafter proposes, and every token a deterministic drafter proposes, depend only on the
    run so far (committed tokens and earlier passes), never on this round's random draws; a
    sampled node is verified against exactly the distribution it was drawn from, and a point mass
    by the point-mass rule. So each round's output is distributed as the target's (Chen et al.
    2023, Theorem 1, round by round; :func:`specviz.core.sampling.verify_tree` for trees). The fallback
    hears about every round, whoever drafted: the target's features, top-k candidates, rollbacks.

    Args:
        fallback: the drafter for text lookup cannot copy (Token Recycling, the EAGLE head).
        lookup: a :class:`~specviz.drafters.lookup.PromptLookupDrafter` that drafts only from long
            enough matches (``min_ngram=3`` in the registry's kinds that build this).
        fill_trees: let the fallback fill a tree the lookup started (False: a tree comes from one
            of them, like a chain).
        label: what :attr:`last` calls a round the fallback drafted.
    """

    def __init__(self, fallback, lookup, fill_trees: bool = True, label: str = "fallback") -> None:
        self.fallback = fallback
        self.lookup = lookup
        self.fill_trees = fill_trees
        self.label = label
        self.vocab_size = fallback.vocab_size
        self.device = fallback.device
        self.uses_model = fallback.uses_model
        self.wants_features = getattr(fallback, "wants_features", False)
        self.wants_top_ids = getattr(fallback, "wants_top_ids", 0)
        self.name = f"prompt lookup, else {fallback.name}"
        #: which drafted the last round: "lookup", ``label``, or "both" (for the tests and the curious)
        self.last = ""

    @property
    def table(self):
        """The fallback's Token Recycling table (AttributeError when it has none)."""
        return self.fallback.table

    @table.setter
    def table(self, value) -> None:
        self.fallback.table = value

    def prefill(self, context: list[int]) -> None:
        self.fallback.prefill(context)
        self.lookup.prefill(context)

    def extend_features(self, features: torch.Tensor) -> None:
        self.fallback.extend_features(features)

    def observe_top_ids(self, tokens: list[int], top_ids: torch.Tensor) -> None:
        self.fallback.observe_top_ids(tokens, top_ids)

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        tree = self.lookup.propose(committed, k, sampling, generator, branches, max_nodes)
        if len(tree) and (branches <= 1 or not self.fill_trees):
            self.last = "lookup"
            return tree
        if not len(tree):
            self.last = self.label
            return self.fallback.propose(committed, k, sampling, generator, branches, max_nodes)
        budget = max_nodes or default_tree_nodes(k, branches)
        if len(tree) >= budget:
            self.last = "lookup"
            return tree
        # A drafter without a model (Token Recycling) proposes point masses: it may fill the whole
        # budget and be cut after merging. A sampled tree gets only the room left, uncut.
        deterministic = not self.uses_model
        rest = self.fallback.propose(committed, k, sampling, generator, branches,
                                     budget if deterministic else budget - len(tree))
        merged = merge_trees(tree, rest, budget if deterministic else None)
        self.last = "both" if len(merged) > len(tree) else "lookup"
        return merged

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        # The merged tree's node numbers are not the fallback's own: it gets the committed length
        # only (the head's cache holds committed positions alone; lookup and recycling keep none).
        self.fallback.rollback(valid)
        self.lookup.rollback(valid, path)

    def finish(self, prompt: list[int], output: list[int]) -> None:
        self.fallback.finish(prompt, output)
        self.lookup.finish(prompt, output)


class LookupThenEagle(LookupThen):
    """:class:`LookupThen` with the learned head (:class:`EagleDrafter`) behind prompt lookup.

    A chain comes from one of the two. A tree (B > 1) with ``fill_trees`` takes branches from
    both: lookup's copy first, then the head's EAGLE-2 tree in the nodes the copy left (its own
    budget fixed by the copy's size before the head draws anything, so no node's presence depends
    on a random draw; at T > 0 the head's nodes are sampled and never merged, at T = 0 they are
    point masses and shared prefixes merge, :func:`merge_trees`). A round whose copy fills the
    whole budget, like every chain the lookup drafts, costs no head pass; one the head fills costs
    up to K head passes (c ≈ 0.08 of a target pass each for the shipped head).

    The head reads the target's features every round, whoever drafted, so its context is whole
    when its turn comes.

    Args:
        head: the :class:`EagleDrafter`.
        lookup: a :class:`~specviz.drafters.lookup.PromptLookupDrafter` (``min_ngram=3`` in the
            registry's ``lookup+eagle``).
        fill_trees: let the head fill a tree the lookup started (False: a tree comes from one of
            them, like a chain).
    """

    def __init__(self, head: EagleDrafter, lookup, fill_trees: bool = True) -> None:
        super().__init__(head, lookup, fill_trees=fill_trees, label="head")
        self.head = head
        self.name = f"prompt lookup, else the {head.name}"
