"""A separate draft model: :class:`ModelDrafter`, and the tokenizer check that pairs it.

:class:`ModelDrafter`: any causal LM sharing the target's tokenizer (checked by
:func:`shared_vocab_size`), sampled with the same :class:`~specviz.core.sampling.SamplingConfig` as
the target (Chen et al. 2023; Leviathan et al. 2023). As a tree it adds, beside its sampled
chain, the draft's most likely other tokens where it is unsure (ranked by draft confidence, as
EAGLE-2 expands, Li et al. 2024). The teaching self-drafts (an int8 copy of the target, the
target's first N layers, :mod:`specviz.models.selfdraft`) are ``ModelDrafter`` s too.
"""

from __future__ import annotations

import heapq

import torch

from specviz.core.drafttree import DraftTree, crop_cache, default_tree_nodes
from specviz.models.errors import IncompatiblePairError
from specviz.core.kvcache import PaddedStaticCache, run_pass
from specviz.core.sampling import logits_to_probs, sample

__all__ = ["ModelDrafter", "shared_vocab_size"]


class ModelDrafter:
    """A draft language model with its own KV cache.

    Args:
        model: a transformers causal LM (already on its device, in eval mode).
        vocab_size: width of the shared real vocabulary; logits are cut to this many columns
            so draft and target distributions live on the same ids (padded widths differ).
        name: label for the UI.

    The engine says which KV cache to keep (:meth:`set_cache`): transformers' ``DynamicCache``
    (the default), or a :class:`~specviz.core.kvcache.PaddedStaticCache` fed one token per pass, so
    every draft step has one shape (a token that catches up after a fully accepted round is its
    own pass, counted in the tree's ``steps``).
    """

    uses_model = True

    def __init__(self, model, vocab_size: int, name: str = "draft model") -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self.device = next(model.parameters()).device
        self.cache = None
        self._cache_kind, self._max_len = "dynamic", 0

    def set_cache(self, kind: str, max_len: int) -> None:
        """Keep a ``kind`` cache (``"dynamic"`` or ``"static"``) of up to ``max_len`` positions
        from the next :meth:`prefill` on (the engine calls this before every run's prefill)."""
        self._cache_kind, self._max_len = kind, max_len

    def _new_cache(self):
        from transformers import DynamicCache

        if self._cache_kind == "static":
            return PaddedStaticCache.create(self.model, self._max_len, 1)
        return DynamicCache()

    @torch.inference_mode()
    def _forward(self, ids: list[int] | torch.Tensor, keep: int) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            ids = torch.tensor(ids, dtype=torch.long, device=self.device)
        return run_pass(self.model, self.cache, ids.view(-1), keep)[:, : self.vocab_size]

    def prefill(self, context: list[int]) -> None:
        self.cache = self._new_cache()
        if context:
            self._forward(context, 1)

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        """A sampled chain of ``k`` tokens (the spine), plus, as a tree, other likely tokens.

        The spine is the chain drafter's: each token sampled from the draft's distribution given
        the tokens before it, one forward pass per token. With ``branches > 1`` each spine
        position also offers up to ``branches − 1`` of the draft's most likely *other* tokens as
        siblings of its spine token (leaves: they cost no draft pass), the best by draft
        confidence (the chance the path reaches them times their draft probability, EAGLE-2's
        ranking, Li et al. 2024) within the node budget ``max_nodes − k``. Those siblings are
        chosen from the probabilities, not sampled, so they are point masses; tested after the
        spine token, exact by :func:`specviz.core.sampling.verify_tree`. At T = 0 the ranking uses the
        softmax of the raw logits (the processed distribution is one-hot there).
        """
        if k <= 0:
            return DraftTree.chain([], torch.empty(0, self.vocab_size, device=self.device))
        pending = committed[self.cache.get_seq_length() :]
        catch_up = 0
        if isinstance(self.cache, PaddedStaticCache):  # one token per pass: the older pending ones first
            for token in pending[:-1]:
                self._forward([token], 1)
            catch_up, pending = len(pending) - 1, pending[-1:]
        tokens: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        ranked: list[torch.Tensor] = []
        step_input: list[int] | torch.Tensor = pending
        for _ in range(k):
            logits = self._forward(step_input, 1)[-1]
            p_draft = logits_to_probs(logits, sampling)
            token = sample(p_draft, generator)
            tokens.append(token)
            rows.append(p_draft)
            if branches > 1:
                ranked.append(torch.softmax(logits.float(), dim=-1) if sampling.greedy else p_draft)
            # Stay on the device: the next step's input is the sampled tensor itself.
            step_input = token.view(1)
        spine = torch.stack(tokens).tolist()
        tree = DraftTree.chain(spine, torch.stack(rows), k + catch_up)
        if branches > 1:
            budget = (max_nodes or default_tree_nodes(k, branches)) - k
            tree = _add_siblings(tree, torch.stack(ranked), branches, budget)
        return tree

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        # The cache holds only spine tokens: keep the leading accepted nodes that are spine nodes.
        if path is not None:
            on_spine = next((i for i, node in enumerate(path) if node != i), len(path))
            valid -= len(path) - on_spine
        crop_cache(self.cache, valid)

    def finish(self, prompt: list[int], output: list[int]) -> None:
        pass


def _add_siblings(spine: DraftTree, ranked: torch.Tensor, branches: int, budget: int) -> DraftTree:
    """The spine plus the best ``budget`` other tokens as siblings of its nodes (point masses).

    Args:
        spine: the sampled chain, ``k`` nodes.
        ranked: ``(k, V)`` the draft's confidence in each token at each spine position.
        branches: B, the most children per node (spine token included).
        budget: most siblings to add (nodes).
    """
    k = len(spine)
    if budget <= 0 or k == 0:
        return spine
    top_p, top_ids = ranked.topk(min(branches, ranked.shape[-1]), dim=-1)
    top_p, top_ids = top_p.tolist(), top_ids.tolist()
    spine_p = ranked.gather(1, torch.tensor(spine.tokens, device=ranked.device).view(k, 1)).squeeze(1).tolist()
    candidates = []  # (score, depth, token): score = P(reaching the parent) · q(token)
    reach = 1.0
    for depth in range(k):
        others = [(p, t) for p, t in zip(top_p[depth], top_ids[depth]) if t != spine.tokens[depth]]
        candidates += [(reach * p, depth, t) for p, t in others[: branches - 1] if p > 0]
        reach *= spine_p[depth]
    chosen = sorted(heapq.nlargest(budget, candidates), key=lambda c: (c[1], -c[0]))
    tokens = spine.tokens + [t for _, _, t in chosen]
    parents = spine.parents + [depth - 1 for _, depth, _ in chosen]
    index = torch.tensor([t for _, _, t in chosen], dtype=torch.long, device=spine.p_draft.device)
    one_hot = torch.nn.functional.one_hot(index, spine.p_draft.shape[-1]).to(spine.p_draft.dtype)
    return DraftTree(tokens, parents, torch.cat([spine.p_draft, one_hot]), spine.steps,
                     spine.point_mass + [True] * len(chosen))


def shared_vocab_size(target, draft) -> int:
    """Check that ``draft`` can draft for ``target`` and return the vocabulary width they share.

    The tokenizers must agree: every token of the smaller tokenizer must have the same id in the
    larger one, and the BOS and EOS ids must be equal where both define them. The shared width is
    ``min(len(target tokenizer), len(draft tokenizer), target logits width, draft logits width)``,
    so lm_heads padded to different widths (e.g. 49152 vs 49280) pair fine: the padding columns
    are cut off before any probability is computed.

    Returns:
        The shared width (number of token ids), to pass as ``vocab_size`` to the engine and the
        :class:`ModelDrafter`.

    Raises:
        IncompatiblePairError: if the tokenizers differ; the message names both models, their
            vocabulary sizes and one differing token.
    """
    t_vocab, d_vocab = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    label = (f"target {target.name!r} (vocab {len(target.tokenizer)}) and draft {draft.name!r} "
             f"(vocab {len(draft.tokenizer)})")
    small, big, small_name, big_name = ((t_vocab, d_vocab, target.name, draft.name)
                                        if len(t_vocab) <= len(d_vocab) else
                                        (d_vocab, t_vocab, draft.name, target.name))
    for token, index in small.items():
        other = big.get(token)
        if other != index:
            where = f"id {other} in {big_name!r}" if other is not None else f"missing from {big_name!r}"
            raise IncompatiblePairError(
                f"{label} use different tokenizers: token {token!r} is id {index} in {small_name!r} "
                f"but {where}; a draft must share the target's tokenizer"
            )
    for attr in ("bos_token_id", "eos_token_id"):
        a, b = getattr(target.tokenizer, attr, None), getattr(draft.tokenizer, attr, None)
        if a is not None and b is not None and a != b:
            raise IncompatiblePairError(f"{label} disagree on {attr}: {a} vs {b}")
    return min(len(target.tokenizer), len(draft.tokenizer), target.logits_width, draft.logits_width)
