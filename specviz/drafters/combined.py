"""Prompt lookup where a trigram of the context repeats, else the learned head: :class:`LookupThenEagle`.

The copy machine for copy-heavy text (:mod:`specviz.drafters.lookup`), the EAGLE head
(:mod:`specviz.drafters.eagle`) for free text; each round is verified against the distribution of
whichever drafted it, so it stays exactly lossless. The registry's ``lookup+eagle`` kind builds it.
"""

from __future__ import annotations

import torch

from ..drafttree import DraftTree
from .eagle import EagleDrafter

__all__ = ["LookupThenEagle"]


class LookupThenEagle:
    """Prompt lookup where the context repeats itself, the learned head everywhere else.

    Each round, a prompt-lookup drafter that needs a match of at least three tokens (a shorter
    match on free text is usually a common word, not a copy)
    proposes what followed the match, as point masses; when there is no such match, the
    :class:`EagleDrafter` drafts. Which of the two proposes is a function of the committed tokens
    alone, so each round is verified against exactly the distribution its tokens were drawn
    from, and the output stays the target's (Chen et al. 2023, Theorem 1, holds round by round).
    The head reads the target's features every round, whoever drafted, so its context is whole
    when its turn comes; a round the lookup drafts costs no head pass.

    Args:
        head: the :class:`EagleDrafter`.
        lookup: a :class:`~specviz.drafters.lookup.PromptLookupDrafter` that drafts only from long
            enough matches (``min_ngram=3`` in the registry's ``lookup+eagle``, which builds it).
    """

    uses_model = True
    wants_features = True

    def __init__(self, head: EagleDrafter, lookup) -> None:
        self.head = head
        self.lookup = lookup
        self.vocab_size = head.vocab_size
        self.device = head.device
        self.name = f"prompt lookup, else the {head.name}"
        #: which drafter proposed the last round: "lookup" or "head" (for the tests and the curious)
        self.last = ""

    def prefill(self, context: list[int]) -> None:
        self.head.prefill(context)
        self.lookup.prefill(context)

    def extend_features(self, features: torch.Tensor) -> None:
        self.head.extend_features(features)

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        tree = self.lookup.propose(committed, k, sampling, generator, branches, max_nodes)
        self.last = "lookup" if len(tree) else "head"
        return tree if len(tree) else self.head.propose(committed, k, sampling, generator, branches, max_nodes)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        # The head's cache holds only committed positions (path is not needed); lookup keeps nothing.
        self.head.rollback(valid)
        self.lookup.rollback(valid, path)

    def finish(self, prompt: list[int], output: list[int]) -> None:
        self.head.finish(prompt, output)
        self.lookup.finish(prompt, output)
