"""Prompt lookup: copy what followed an earlier occurrence of the context's last n-gram.

:class:`PromptLookupDrafter` copies the tokens that followed the latest earlier occurrence of the
context's last n-gram (Saxena 2023, "prompt lookup decoding"); as a tree, the continuations of up
to B distinct earlier matches, longest match first, each at most twice as deep as its match is
long, merged into a prefix tree (:func:`prefix_tree`). Deterministic, so its draft distribution
is a point mass (a one-hot ``p_draft``) and the accept test becomes "accept with probability
p_target(x)" — still exactly lossless.
"""

from __future__ import annotations

import torch

from specviz.core.drafttree import DraftTree, default_tree_nodes
from specviz.drafters.base import branch_depth, context_matches

__all__ = ["PromptLookupDrafter", "prefix_tree"]


def prefix_tree(sequences: list[list[int]], max_nodes: int) -> tuple[list[int], list[int]]:
    """Merge token sequences into a prefix tree (a trie), in the order given, within a node budget.

    Shared prefixes become shared nodes, so no parent gets two children with the same token (the
    verify walk would certainly reject the second). Sequences are inserted in priority order; the
    one that reaches the budget is cut there, and later ones are left out.

    Args:
        sequences: token sequences, highest priority first.
        max_nodes: most nodes in the tree (N).

    Returns:
        ``(tokens, parents)``, parents first (``-1`` = the context).
    """
    tokens: list[int] = []
    parents: list[int] = []
    child_of: dict[tuple[int, int], int] = {}
    for sequence in sequences:
        node = -1
        for token in sequence:
            existing = child_of.get((node, token))
            if existing is None:
                if len(tokens) >= max_nodes:
                    return tokens, parents
                existing = len(tokens)
                tokens.append(token)
                parents.append(node)
                child_of[(node, token)] = existing
            node = existing
    return tokens, parents


class PromptLookupDrafter:
    """Prompt lookup decoding: propose the continuation of an earlier match of the last n-gram.

    As a chain (``branches = 1``, the classic method, Saxena 2023, and what transformers'
    ``prompt_lookup_num_tokens`` does): for n from ``max_ngram`` down to ``min_ngram``, the last n
    committed tokens are searched for earlier in the context (most recent occurrence first); the
    up-to-K tokens that followed it are proposed. With no match nothing is proposed and the round
    is a plain target step.

    As a tree (``branches = B > 1``): every earlier position whose preceding tokens match the
    context's end contributes a branch; matches are ranked by how long the match is (up to
    ``max_match`` tokens, longest first, then most recent), and each branch is cut to
    ``depth_factor × match length`` tokens (at most K). That cut is SuffixDecoding's rule (Oliaro
    et al. 2024; vLLM's ``suffix_decoding_max_spec_factor``): a long match is evidence that the text
    is being copied, so it earns a deep branch, while a one-token match earns a short one. The
    first B distinct branches are merged into a prefix tree (:func:`prefix_tree`) within the node
    budget. Replaying the bench prompts (BENCHMARKS.md, "Tree speculation") this rule used fewer
    nodes per pass than the chain and accepted more tokens per pass; without it (every branch K
    deep) the tree used twice the chain's nodes and lost on free text.

    The proposal is a deterministic function of the context, so ``p_draft`` is one-hot: the
    acceptance probability is ``p_target(x)`` and the residual is ``p_target`` with ``x`` removed.

    Args:
        vocab_size: width of the probability rows to return.
        max_ngram: longest n-gram to match in chain mode (tokens).
        min_ngram: shortest n-gram (chain) or match (tree) to use (tokens).
        max_match: longest match measured in tree mode (tokens).
        depth_factor: a tree branch is at most ``depth_factor × match length`` tokens deep.
        never: token ids never proposed (the tokenizer's special tokens: copying chat-template
            markup such as ``<|im_start|>`` is a guess the target rejects at the start of every
            reply); a continuation is cut before the first, and a match that would propose nothing
            gives way to the next. Still a function of the context alone, so still exact.
    """

    uses_model = False

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, max_match: int = 16,
                 depth_factor: float = 2.0, never: frozenset[int] = frozenset()) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if max_match < min_ngram or depth_factor <= 0:
            raise ValueError(f"need max_match >= min_ngram and depth_factor > 0, got {max_match}, {depth_factor}")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_match = max_match
        self.depth_factor = depth_factor
        self.never = frozenset(never)
        self.name = "prompt lookup (n-gram)"
        self.device = torch.device("cpu")

    def _cut(self, tokens: list[int]) -> list[int]:
        """``tokens`` up to the first one never proposed (:attr:`never`)."""
        for i, token in enumerate(tokens):
            if token in self.never:
                return tokens[:i]
        return tokens

    def lookup(self, committed: list[int], k: int) -> list[int]:
        """The up-to-``k`` tokens that followed the most recent earlier match of the last n-gram
        (the longest n-gram that occurs, ``max_ngram`` at most), cut before a token never proposed."""
        n_tokens = len(committed)
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            suffix = committed[n_tokens - n :]
            # Most recent match first: in copy-heavy prompts it is the one being copied.
            for start in range(n_tokens - n - 1, -1, -1):
                if committed[start : start + n] == suffix:
                    proposal = self._cut(committed[start + n : start + n + k])
                    if proposal:
                        return proposal
        return []

    def branches(self, committed: list[int], k: int, matches: int) -> list[list[int]]:
        """Up to ``matches`` distinct tree branches: the continuations of earlier matches of the
        context's end, longest match first (then most recent), each cut to
        ``depth_factor × match length`` tokens (at most ``k``).

        A branch that is a prefix of one already taken adds nothing to a tree and is skipped.
        """
        ranked = [m for m in context_matches(committed, self.max_match) if m[0] >= self.min_ngram]
        ranked.sort(key=lambda m: -m[0])  # stable: longest first, the most recent among equals
        found: list[list[int]] = []
        for length, end in ranked:
            branch = self._cut(committed[end : end + branch_depth(self.depth_factor, length, k)])
            if branch and not any(f[: len(branch)] == branch for f in found):
                found.append(branch)
                if len(found) >= matches:
                    break
        return found

    def prefill(self, context: list[int]) -> None:
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        if k <= 0:
            return DraftTree.point_masses([], [], self.vocab_size)
        if branches <= 1:
            tokens = self.lookup(committed, k)
            return DraftTree.point_masses(tokens, list(range(-1, len(tokens) - 1)), self.vocab_size)
        tokens, parents = prefix_tree(self.branches(committed, k, branches),
                                      max_nodes or default_tree_nodes(k, branches))
        return DraftTree.point_masses(tokens, parents, self.vocab_size)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        pass

    def finish(self, prompt: list[int], output: list[int]) -> None:
        pass
