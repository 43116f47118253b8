"""Drafters: where the K guessed tokens come from.

Every drafter implements the same small interface (:class:`Drafter`), the seam that
transformers calls ``get_candidates``:

* :meth:`Drafter.prefill` is told the prompt once;
* :meth:`Drafter.propose` returns up to K token ids **and the exact distributions they were drawn
  from** (``p_draft``), because the accept test divides by those probabilities;
* :meth:`Drafter.rollback` is told how many committed tokens are still valid after verification,
  so a drafter with a KV cache can drop what was rejected.

Kinds:

* :class:`ModelDrafter`: any causal LM sharing the target's tokenizer, sampled with the same
  :class:`~specviz.sampling.SamplingConfig` as the target (Chen et al. 2023; Leviathan et al. 2023).
  The teaching self-drafts (an int8 copy of the target, the target's first N layers) are
  ``ModelDrafter`` s around models built in :mod:`specviz.models`.
* :class:`PromptLookupDrafter`: copies the tokens that followed the latest earlier occurrence of
  the context's last n-gram (Saxena 2023, "prompt lookup decoding"). Deterministic, so its draft
  distribution is a point mass (a one-hot ``p_draft``) and the accept test becomes
  "accept with probability p_target(x)" — still exactly lossless.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["Drafter", "ModelDrafter", "PromptLookupDrafter", "crop_cache"]


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


class Drafter(Protocol):
    """What the speculative loop needs from a source of draft tokens."""

    #: short label shown in the UI and the CLI output
    name: str
    #: True when the drafter runs a neural network (its step time enters the cost ratio c)
    uses_model: bool

    def prefill(self, context: list[int]) -> None:
        """Process the prompt (all of it but the last token, which the first round feeds)."""

    def propose(
        self, committed: list[int], k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[list[int], torch.Tensor, int]:
        """Draft up to ``k`` tokens after ``committed``.

        Returns:
            ``(tokens, p_draft, steps)``: ``tokens`` has ``k' <= k`` ids, ``p_draft`` is
            ``(k', V)`` float32 (the distribution each token was drawn from), ``steps`` the number
            of forward passes spent.
        """

    def rollback(self, valid: int) -> None:
        """Forget everything past the first ``valid`` committed tokens."""


class ModelDrafter:
    """A draft language model with its own KV cache.

    Args:
        model: a transformers causal LM (already on its device, in eval mode).
        vocab_size: width of the shared real vocabulary; logits are cut to this many columns
            so draft and target distributions live on the same ids (padded widths differ).
        name: label for the UI.
    """

    uses_model = True

    def __init__(self, model, vocab_size: int, name: str = "draft model") -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self.device = next(model.parameters()).device
        self.cache = None

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache()

    @torch.inference_mode()
    def _forward(self, ids: list[int] | torch.Tensor, keep: int) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids.view(1, -1), cache=self.cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0, :, : self.vocab_size]

    def prefill(self, context: list[int]) -> None:
        self.cache = self._new_cache()
        if context:
            self._forward(context, 1)

    def propose(self, committed, k, sampling, generator):
        if k <= 0:
            return [], torch.empty(0, self.vocab_size, device=self.device), 0
        pending = committed[self.cache.get_seq_length() :]
        tokens: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        step_input: list[int] | torch.Tensor = pending
        for _ in range(k):
            p_draft = logits_to_probs(self._forward(step_input, 1)[-1], sampling)
            token = sample(p_draft, generator)
            tokens.append(token)
            rows.append(p_draft)
            # Stay on the device: the next step's input is the sampled tensor itself.
            step_input = token.view(1)
        return torch.stack(tokens).tolist(), torch.stack(rows), k

    def rollback(self, valid: int) -> None:
        crop_cache(self.cache, valid)


class PromptLookupDrafter:
    """Prompt lookup decoding: propose the continuation of an earlier match of the last n-gram.

    For n from ``max_ngram`` down to ``min_ngram``, the last n committed tokens are searched for
    earlier in the context (most recent occurrence first); the up-to-K tokens that followed it are
    proposed. With no match nothing is proposed and the round is a plain target step.

    The proposal is a deterministic function of the context, so ``p_draft`` is one-hot: the
    acceptance probability is ``p_target(x)`` and the residual is ``p_target`` with ``x`` removed.

    Args:
        vocab_size: width of the probability rows to return.
        max_ngram: longest n-gram to match (tokens).
        min_ngram: shortest n-gram to match (tokens).
    """

    uses_model = False

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = "prompt lookup (n-gram)"
        self.device = torch.device("cpu")

    def lookup(self, committed: list[int], k: int) -> list[int]:
        """The up-to-``k`` tokens that followed the most recent earlier match of the last n-gram."""
        n_tokens = len(committed)
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            suffix = committed[n_tokens - n :]
            # Most recent match first: in copy-heavy prompts it is the one being copied.
            for start in range(n_tokens - n - 1, -1, -1):
                if committed[start : start + n] == suffix:
                    follow = committed[start + n : start + n + k]
                    if follow:
                        return follow
        return []

    def prefill(self, context: list[int]) -> None:
        pass

    def propose(self, committed, k, sampling, generator):
        tokens = self.lookup(committed, k) if k > 0 else []
        tokens = [t for t in tokens[:k]]
        index = torch.tensor(tokens, dtype=torch.long, device=self.device)
        p_draft = torch.nn.functional.one_hot(index, self.vocab_size).float()
        return tokens, p_draft, 0

    def rollback(self, valid: int) -> None:
        pass
