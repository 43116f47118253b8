"""Speculative sampling in one screen: one round of a chain, the whole rule, nothing else.

Chen et al. 2023 (Algorithm 2) and Leviathan et al. 2023 (Algorithm 1), in the shape of gpt-fast's
``speculative_decode``. No KV cache, no trees, no records, no timing: every forward pass reads the
whole context, so each line is the paper's. :class:`specviz.core.engine.Generation` runs the same
rule with caches, trees, other verification rules and a record of every draw, and
``tests/test_textbook.py`` holds the two equal draw for draw.
"""

from __future__ import annotations

import torch

from specviz.core.sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["accept_or_resample", "speculative_round"]


@torch.inference_mode()
def speculative_round(target, draft, context: list[int], k: int, sampling: SamplingConfig,
                      generator: torch.Generator) -> list[int]:
    """One round: the draft proposes ``k`` tokens, the target scores them in one pass, and
    :func:`accept_or_resample` keeps a prefix and adds one token of the target's.

    Args:
        target, draft: causal LMs sharing a vocabulary (transformers models: ``model(ids).logits``).
        context: the committed token ids (prompt and output so far), non-empty.
        k: lookahead K, the number of draft tokens (>= 1).
        sampling: temperature, top-k and top-p, applied to both models alike.
        generator: the one random source of every draw, drafts included.

    Returns:
        The 1 to ``k + 1`` token ids this round emits.
    """
    # 1. Draft: K tokens, one cheap forward pass each, and the distributions they were drawn from.
    draft_tokens, p_draft = [], []
    for _ in range(k):
        logits = draft(torch.tensor([context + draft_tokens])).logits[0, -1]
        p_draft.append(logits_to_probs(logits, sampling))
        draft_tokens.append(int(sample(p_draft[-1], generator)))
    # 2. Verify: ONE target pass over context + drafts gives p_target at all K + 1 positions.
    logits = target(torch.tensor([context + draft_tokens])).logits[0, len(context) - 1:]
    p_target = logits_to_probs(logits, sampling)  # (K + 1, V)
    # 3. Accept a prefix, then resample or add the bonus token.
    return accept_or_resample(draft_tokens, torch.stack(p_draft), p_target, generator)


def accept_or_resample(draft_tokens: list[int], p_draft: torch.Tensor, p_target: torch.Tensor,
                       generator: torch.Generator) -> list[int]:
    """The accept test of a chain of K draft tokens.

    Token ``x_i`` is kept with probability ``min(1, p_target(x_i) / p_draft(x_i))``. At the first
    rejection one token is drawn from ``normalize(max(0, p_target − p_draft))`` at that position
    and the round ends; if all K are kept, a bonus token is drawn from ``p_target`` after the
    last one. Either way the emitted tokens are distributed exactly as the target's own
    (Leviathan et al. 2023, Theorem 1).

    Args:
        draft_tokens: the K drafted ids.
        p_draft: ``(K, V)``, row ``i`` the distribution ``x_i`` was drawn from.
        p_target: ``(K + 1, V)``, row ``i`` the target's distribution at ``x_i``'s position, row
            ``K`` the one after the last draft token.
        generator: the random source (K uniforms for the tests, then one draw).

    Returns:
        The kept draft tokens and one token of the target's: 1 to K + 1 ids.
    """
    k = len(draft_tokens)
    uniforms = torch.rand(k, generator=generator)
    for i, x in enumerate(draft_tokens):
        # u < p_target/p_draft, written without the division: accepts with min(1, ratio).
        if uniforms[i] * p_draft[i, x] < p_target[i, x]:
            continue
        residual = (p_target[i] - p_draft[i]).clamp_min(0.0)
        if residual.sum() == 0:  # p_target == p_draft: no mass left, only float rounding got here
            residual = p_target[i]
        return draft_tokens[:i] + [int(sample(residual / residual.sum(), generator))]
    return draft_tokens + [int(sample(p_target[k], generator))]
