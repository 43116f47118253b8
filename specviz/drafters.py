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

import re
from dataclasses import dataclass
from typing import Protocol

import torch

from .sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["DRAFTER_KINDS", "Drafter", "DrafterKind", "ModelDrafter", "PromptLookupDrafter", "crop_cache",
           "parse_drafter_spec"]


@dataclass(frozen=True)
class DrafterKind:
    """One kind of drafter as the app, the CLI and the docs describe it.

    Attributes:
        spec: the spec string (``--draft`` on the command line); ``early-exit:N`` and ``<model>``
            are forms.
        label: the app's menu entry.
        note: one or two sentences on what it is and when it pays off, shown beside the menu and
            in ``--help``.
    """

    spec: str
    label: str
    note: str


#: Every kind of drafter, in menu order: the one place their descriptions live.
DRAFTER_KINDS: dict[str, DrafterKind] = {k.spec: k for k in (
    DrafterKind("ngram", "Prompt lookup (n-gram match in the context)",
                "Copies what followed the last earlier occurrence of the current few tokens in the prompt or "
                "output. Costs almost nothing and is exactly lossless: on copy-heavy prompts (fix typos, CSV → "
                "JSON) it is the drafter that pays off on a CPU (about 1.5–2.6×); on free text it rarely finds a "
                "match (about 1.0×)."),
    DrafterKind("model", "Draft model (give its id below)",
                "A smaller language model with exactly the target's tokenizer (offline name, local directory or "
                "hub id; different tokenizers are refused). Pays off on a GPU with a big target (e.g. 135M → "
                "1.7B); on a CPU a draft is rarely cheap enough relative to a 135M target."),
    DrafterKind("int8", "Self-draft: int8 copy of the target (teaching)",
                "The target itself, quantized to int8 (CPU only). It agrees with the target often (α ≈ 0.5–0.9) "
                "but costs 50–100% of a target step, so it shows a high α *without* a speedup: the 'good draft, "
                "too expensive' case."),
    DrafterKind("early-exit", "Self-draft: first N layers of the target (teaching)",
                "The target's first N layers feeding its final norm and output head, sharing its weights, with no "
                "training: it almost never agrees with the target (α ≈ 0). The 'poorly aligned draft' case: "
                "nearly every pass is wasted."),
    DrafterKind("none", "None: plain decoding of the target",
                "No drafting: the target decodes one token per forward pass, the baseline every speedup is "
                "measured against."),
)}

_SPEC_FORMS = "none, ngram, int8, early-exit:N (N layers), or a draft model (offline name, directory or hub id)"


def parse_drafter_spec(spec: str) -> str:
    """Normalise a drafter spec: ``""``/``"none"`` → ``"none"``, ``"prompt-lookup"`` → ``"ngram"``,
    ``"early-exit:N"`` checked for its form; anything else is a draft model name, kept stripped
    (whether it exists is found out when it loads).

    Raises:
        ValueError: for a non-string, ``early-exit`` without a layer count, or the
            menu's ``"model"`` entry with no model named.
    """
    if not isinstance(spec, str):
        raise ValueError(f"the drafter spec must be text; accepted: {_SPEC_FORMS}")
    key = spec.strip()
    lowered = key.lower()
    if lowered in ("", "none"):
        return "none"
    if lowered in ("ngram", "prompt-lookup"):
        return "ngram"
    if lowered == "int8":
        return "int8"
    if lowered.startswith("early-exit"):
        match = re.fullmatch(r"early-exit:(\d+)", lowered)
        if not match:  # the layer count's range depends on the target: checked when the draft is built
            raise ValueError(f"bad drafter spec {spec!r}: write early-exit:N with N a layer count; accepted: {_SPEC_FORMS}")
        return f"early-exit:{int(match.group(1))}"
    if lowered == "model":
        raise ValueError("choose a draft model: give its hub id or local directory, or pick another drafter")
    return key


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
