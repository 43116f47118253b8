"""Suffix lookup over the context and earlier outputs, and the history it searches.

:class:`SuffixDrafter` is model-free, in the spirit of SuffixDecoding (Oliaro et al. 2024; vLLM's
``suffix`` method): the longest suffix of the context that occurs in the context or in earlier
outputs of this process (:data:`SUFFIX_HISTORY`, emptied by :func:`clear_suffix_history`; the
app gives each visitor a :class:`SuffixHistory` of their own), and its most frequent
continuations as a tree (as deep as twice the match length). Point masses, like prompt lookup.
"""

from __future__ import annotations

import heapq

import torch

from specviz.core.drafttree import DraftTree, default_tree_nodes
from specviz.drafters.base import branch_depth, context_matches, match_length

__all__ = ["HISTORY_MAX_SEQUENCES", "HISTORY_MAX_TOKENS", "SESSION_HISTORY_MAX_SEQUENCES",
           "SESSION_HISTORY_MAX_TOKENS", "SUFFIX_HISTORY", "SuffixDrafter", "SuffixHistory",
           "clear_suffix_history"]


#: Caps of a :class:`SuffixHistory`: the process-wide one (the CLI, the bench) and one visitor's
#: own (a few runs' outputs: its index costs about 100 bytes a token, per visitor).
HISTORY_MAX_TOKENS = 200_000
HISTORY_MAX_SEQUENCES = 256
SESSION_HISTORY_MAX_TOKENS = 16_384
SESSION_HISTORY_MAX_SEQUENCES = 32


class SuffixHistory:
    """Earlier outputs (token ids) searched by :class:`SuffixDrafter`: the process's (the CLI's,
    the bench's) or one visitor's own, so one visitor's text is never drafted for another.

    Each token's occurrences are indexed when an output is added, so a lookup visits only the
    positions that follow the current last token, not the whole history. Bounded in memory: at
    most ``max_sequences`` outputs and ``max_tokens`` tokens, the oldest outputs dropped first (an
    output longer than ``max_tokens`` keeps its last ``max_tokens`` tokens). Small and plain, so
    it can live in per-session state: :meth:`to_list` / :meth:`from_list`, and ``copy.deepcopy``
    (which copies the outputs and rebuilds the index).

    Args:
        max_tokens: keep at most this many tokens (>= 1).
        max_sequences: keep at most this many outputs (>= 1).

    Raises:
        ValueError: if a cap is < 1.
    """

    def __init__(self, max_tokens: int = HISTORY_MAX_TOKENS, max_sequences: int = HISTORY_MAX_SEQUENCES) -> None:
        if max_tokens < 1 or max_sequences < 1:
            raise ValueError(f"need max_tokens >= 1 and max_sequences >= 1, got {max_tokens}, {max_sequences}")
        self.max_tokens = max_tokens
        self.max_sequences = max_sequences
        self.sequences: list[list[int]] = []
        self._ends: dict[int, list[tuple[int, int]]] = {}  # token → (sequence, index after it)
        self._n_tokens = 0

    def add(self, tokens: list[int]) -> None:
        """Remember one output (token ids), dropping the oldest outputs past the caps."""
        tokens = [int(t) for t in tokens][-self.max_tokens:]
        if not tokens:
            return
        self.sequences.append(tokens)
        self._n_tokens += len(tokens)
        dropped = False
        while len(self.sequences) > 1 and (self._n_tokens > self.max_tokens
                                           or len(self.sequences) > self.max_sequences):
            self._n_tokens -= len(self.sequences.pop(0))
            dropped = True
        if dropped:  # indices shifted: rebuild (rare: only once the history is full)
            self._ends = {}
            for i in range(len(self.sequences)):
                self._index(i)
        else:
            self._index(len(self.sequences) - 1)

    def _index(self, i: int) -> None:
        seq = self.sequences[i]
        for end in range(1, len(seq)):  # an end with at least one token after it
            self._ends.setdefault(seq[end - 1], []).append((i, end))

    def ends_after(self, token: int) -> list[tuple[int, int]]:
        """``(sequence index, end)`` of every position right after ``token`` that has a next token."""
        return self._ends.get(token, [])

    def clear(self) -> None:
        self.sequences.clear()
        self._ends.clear()
        self._n_tokens = 0

    def snapshot(self) -> list[list[int]]:
        """A copy of the outputs, for :meth:`restore` (a run that must not teach the history)."""
        return self.to_list()

    def restore(self, snapshot: list[list[int]]) -> None:
        """Put back what :meth:`snapshot` copied."""
        self.clear()
        for sequence in snapshot:
            self.add(sequence)

    def to_list(self) -> list[list[int]]:
        """The outputs, oldest first, as plain lists of ints (a copy), for per-session state."""
        return [list(s) for s in self.sequences]

    @classmethod
    def from_list(cls, sequences: list[list[int]], max_tokens: int = HISTORY_MAX_TOKENS,
                  max_sequences: int = HISTORY_MAX_SEQUENCES) -> SuffixHistory:
        """A history holding ``sequences`` (oldest first, as :meth:`to_list` gives), within the caps.

        Raises:
            ValueError: if ``sequences`` is not a list of lists of token ids (ints >= 0).
        """
        history = cls(max_tokens, max_sequences)
        if not isinstance(sequences, list):
            raise ValueError("a suffix history is a list of token-id lists")
        for seq in sequences:
            if not isinstance(seq, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in seq):
                raise ValueError("a suffix history is a list of token-id lists (ints >= 0)")
            history.add(seq)
        return history

    def __deepcopy__(self, memo) -> SuffixHistory:
        return SuffixHistory.from_list(self.sequences, self.max_tokens, self.max_sequences)

    def __len__(self) -> int:
        return self._n_tokens


#: The process-wide history of finished outputs: the default of a :class:`SuffixDrafter` built
#: without one (the CLI, the bench). The app gives each visitor session its own.
SUFFIX_HISTORY = SuffixHistory()


def clear_suffix_history() -> None:
    """Forget every earlier output (the bench does this before each measurement, so that no
    method is measured on its own earlier output)."""
    SUFFIX_HISTORY.clear()


class SuffixDrafter:
    """Suffix lookup over the context and earlier outputs, in the spirit of SuffixDecoding.

    SuffixDecoding (Oliaro et al. 2024; vLLM's ``suffix`` speculative method) keeps suffix trees
    of the prompt and of earlier outputs, finds the longest match of the current suffix, and
    proposes the continuations that followed it most often, as a tree verified in one pass. This
    is the same idea with plain lists: every earlier position of the context (prompt and output
    so far) and of :data:`SUFFIX_HISTORY` whose preceding tokens match the longest suffix
    (``<= max_match`` tokens) that occurs at all contributes its next ``k`` tokens; the
    continuations are counted in a trie, and the tree takes nodes best-first by count (how many
    matches pass through them), at most B children per node, within the node budget (B = 1: the
    most frequent child at each step, a chain). As a tree (B > 1) the continuations are cut to
    ``depth_factor × match length`` tokens, SuffixDecoding's rule (vLLM's
    ``suffix_decoding_max_spec_factor``): the longer the match, the deeper the speculation.
    Deterministic given the context and the history, so every node is a point mass.

    The engine calls :meth:`finish` when a run ends, which adds its output to the history.

    Args:
        vocab_size: width of the probability rows to return.
        max_match: longest suffix to match (tokens).
        history: the history to search and extend: each visitor's own in the app, so nobody's
            text is drafted for someone else (default :data:`SUFFIX_HISTORY`, the process-wide one
            of the CLI and the bench).
        depth_factor: in a tree, a continuation is at most ``depth_factor × match length`` deep.
    """

    uses_model = False

    def __init__(self, vocab_size: int, max_match: int = 8, history: SuffixHistory | None = None,
                 depth_factor: float = 2.0) -> None:
        if max_match < 1 or depth_factor <= 0:
            raise ValueError(f"need max_match >= 1 and depth_factor > 0, got {max_match}, {depth_factor}")
        self.depth_factor = depth_factor
        self.vocab_size = vocab_size
        self.max_match = max_match
        self.history = history if history is not None else SUFFIX_HISTORY
        self.name = "suffix lookup (context and earlier outputs)"
        self.device = torch.device("cpu")

    def continuations(self, committed: list[int], k: int) -> tuple[int, list[list[int]]]:
        """The longest matching suffix's length (tokens) and the next ``k`` tokens after every
        occurrence of it, the context's most recent first, then the history's newest first."""
        if not committed:
            return 0, []
        suffix = committed[-self.max_match :]
        matches = [(n, committed, end) for n, end in context_matches(committed, self.max_match)]
        history = self.history.sequences
        matches += [(match_length(history[i], end, suffix), history[i], end)
                    for i, end in reversed(self.history.ends_after(suffix[-1]))]
        best, found = 0, []
        for n, seq, end in matches:
            if n > best:
                best, found = n, []
            if n == best:
                found.append(seq[end : end + k])
        return best, found

    def prefill(self, context: list[int]) -> None:
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        if k <= 0:
            return DraftTree.point_masses([], [], self.vocab_size)
        length, found = self.continuations(committed, k)
        budget = k
        if branches > 1:
            budget = max_nodes or default_tree_nodes(k, branches)
            depth = branch_depth(self.depth_factor, length, k)
            found = [f[:depth] for f in found]
        tokens, parents = _frequent_tree(found, max(branches, 1), budget)
        return DraftTree.point_masses(tokens, parents, self.vocab_size)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        pass

    def finish(self, prompt: list[int], output: list[int]) -> None:
        self.history.add(output)


def _frequent_tree(sequences: list[list[int]], branches: int, max_nodes: int) -> tuple[list[int], list[int]]:
    """The most frequent continuations as a tree: trie nodes taken best-first by count.

    A node is a candidate once its parent is taken; candidates are taken by count (ties: the
    earlier sequence, i.e. the more recent match), at most ``branches`` children per node, until
    ``max_nodes`` are taken. Parents come before children in the result.
    """
    counts: dict[tuple, int] = {}
    first_seen: dict[tuple, int] = {}
    for order, seq in enumerate(sequences):
        for depth in range(1, len(seq) + 1):
            key = tuple(seq[:depth])
            counts[key] = counts.get(key, 0) + 1
            first_seen.setdefault(key, order)
    children: dict[tuple, list[tuple]] = {}
    for key in counts:
        children.setdefault(key[:-1], []).append(key)
    tokens: list[int] = []
    parents: list[int] = []
    index: dict[tuple, int] = {(): -1}
    taken_children: dict[tuple, int] = {}
    heap = [(-counts[c], first_seen[c], c) for c in children.get((), [])]
    heapq.heapify(heap)
    while heap and len(tokens) < max_nodes:
        _, _, key = heapq.heappop(heap)
        parent = key[:-1]
        if taken_children.get(parent, 0) >= branches:
            continue
        taken_children[parent] = taken_children.get(parent, 0) + 1
        index[key] = len(tokens)
        tokens.append(key[-1])
        parents.append(index[parent])
        for child in children.get(key, []):
            heapq.heappush(heap, (-counts[child], first_seen[child], child))
    return tokens, parents
