"""The draft tree every drafter returns, and the two small helpers drafters share.

Kept outside the :mod:`specviz.drafters` package, which it serves: every drafter family there
builds a :class:`DraftTree`, and the engine (:mod:`specviz.core.engine`) and the head's training
(:mod:`specviz.train.train_draft`) use this module too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["DraftTree", "LastLayerFeatures", "crop_cache", "default_tree_nodes"]


def crop_cache(cache, length: int) -> None:
    """Drop cached positions beyond ``length`` tokens.

    transformers 5's ``Cache.crop`` takes a *negative* count of tokens to remove; this wrapper
    takes the length to keep, which is what the rollback logic reasons in.

    Args:
        cache: a transformers ``Cache``.
        length: number of leading positions to keep (tokens).
    """
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def default_tree_nodes(k: int, branches: int) -> int:
    """The node budget N of a tree round when none is given: ``K`` for a chain, else ``2·K``.

    A verify pass's cost grows slowly with its positions (on a 2-core CPU, 8–12 positions cost
    5–15% more than 4 in bfloat16, /work/shared/README.md), and replaying prompt lookup with up to
    4 matches used about twice the chain's nodes per pass. The budget is an upper bound: with one
    match a tree round is the chain round, K nodes at most.
    """
    return k if branches <= 1 else 2 * k


@dataclass
class DraftTree:
    """A drafter's proposal: a tree of tokens, parents first.

    Attributes:
        tokens: ``N`` token ids.
        parents: ``N`` parent indices: ``-1`` for a node that continues the committed context,
            else an earlier node's index (so depths are ``depth(parent) + 1``).
        p_draft: ``(N, V)`` float32: row ``i`` the distribution node ``i`` was drawn from (a
            one-hot row for a point mass).
        steps: draft forward passes spent (0 for model-free drafters).
        point_mass: per node, True when the token is a deterministic function of the context
            (its test is "accept with r(x)", :func:`specviz.core.sampling.verify_tree`).
    """

    tokens: list[int]
    parents: list[int]
    p_draft: torch.Tensor
    steps: int = 0
    point_mass: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.point_mass:
            self.point_mass = [False] * len(self.tokens)
        if not len(self.tokens) == len(self.parents) == self.p_draft.shape[0] == len(self.point_mass):
            raise ValueError(f"a draft tree needs one parent, p_draft row and flag per token: {len(self.tokens)} "
                             f"tokens, {len(self.parents)} parents, {self.p_draft.shape[0]} rows, "
                             f"{len(self.point_mass)} flags")

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, tokens: list[int], p_draft: torch.Tensor, steps: int = 0, point_mass: bool = False) -> DraftTree:
        """The one-branch tree: parents ``-1, 0, 1, …``."""
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), p_draft, steps, [point_mass] * len(tokens))

    @classmethod
    def point_masses(cls, tokens: list[int], parents: list[int], vocab_size: int) -> DraftTree:
        """A tree of deterministic tokens, with one-hot ``p_draft`` rows (CPU)."""
        index = torch.tensor(tokens, dtype=torch.long)
        return cls(list(tokens), list(parents), torch.nn.functional.one_hot(index, vocab_size).float(), 0,
                   [True] * len(tokens))

    @property
    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def depths(self) -> list[int]:
        """Depth of each node (1 = continues the context)."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        return depths


class LastLayerFeatures:
    """Records the target's last decoder layer output (the hidden state *before* the final norm)
    during the forward passes run inside ``with``: the features an EAGLE-style head reads (Li et
    al. 2024, "EAGLE", Section 3: the second-to-top layer's feature, i.e. before the LM head's norm).

    transformers' ``output_hidden_states`` replaces the last entry with the *normed* state, so the
    pre-norm one is taken with a forward hook on the last layer, registered only inside the
    ``with`` block: passes run outside it (every drafter that does not ask) cost nothing extra.

    Args:
        model: a transformers decoder-only causal LM whose decoder has ``.layers``.

    Attributes:
        features: after the block, ``(batch, T, H)`` the last layer's output of the last pass
            run inside it, detached, in the model's dtype (None if no pass ran).

    Raises:
        ValueError: (on construction) for a model without a ``layers`` list in its decoder.
    """

    def __init__(self, model) -> None:
        layers = getattr(model.get_decoder(), "layers", None)
        if not layers:
            raise ValueError(f"{type(model).__name__} has no decoder layers to read features from")
        self.layer = layers[-1]
        self.features: torch.Tensor | None = None
        self._handle = None

    def _hook(self, module, args, output) -> None:
        self.features = (output[0] if isinstance(output, tuple) else output).detach()

    def __enter__(self) -> LastLayerFeatures:
        self.features = None
        self._handle = self.layer.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
        self._handle = None
