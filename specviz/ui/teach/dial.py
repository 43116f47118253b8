"""The lossless↔lossy dial's draws: the ensemble rule ``"ensemble:W"`` (transformers' static
ensemble verification, :func:`specviz.core.sampling.verify`) at several weights W, each drawing the
first token of one prompt many times, as the "Is it lossless?" check does
(:mod:`specviz.ui.teach.lossless`: one draft and one target forward pass, only the random draws
repeated).

For each W the draws give the measured acceptance α (drafts kept ÷ draws) and the measured
total-variation distance of the first-token histogram from p_target (over the check's bins: the
top tokens and "everything else"), with the chi-square p-value of the lossless check. Beside
them, the exact figures the draws estimate: with v = W·p_target + (1 − W)·p_draft the rule keeps a
sampled draft with Σ_x min(p_draft, v) = 1 − W·TV(p_target, p_draft) and emits a token that follows
v, at distance (1 − W)·TV(p_target, p_draft) from p_target (binned, the same factor times the binned
distance). The exact rules sit at distance 0: the full rule (W = 1) with α = Σ min(p_target,
p_draft), and one-hot / exact match, which propose the draft's argmax, with p_target(argmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.core.rules import ensemble_rule
from specviz.ui.teach.lossless import binned, chi_square_p, first_distributions, draw_first_tokens

__all__ = ["DIAL_WEIGHTS", "DialDraw", "DialReport", "dial_draws", "dial_experiment"]

#: The weights the dial traces, from exact (1) to keeping every draft (0).
DIAL_WEIGHTS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)


@dataclass(frozen=True)
class DialDraw:
    """One weight's first-token draws (plain data).

    Attributes:
        weight: W; ``rule``: its name (``"ensemble:0.6"``).
        alpha: drafts kept ÷ draws; ``alpha_exact``: 1 − W·TV(p_target, p_draft), what it estimates.
        distance: total-variation distance of the binned first-token histogram from binned
            p_target; ``distance_exact``: (1 − W)·the binned TV of p_draft, what it estimates
            without sampling noise.
        p_value: the chi-square goodness-of-fit p-value against p_target (the lossless check's).
        freq: the histogram's frequency of each bin.
    """

    weight: float
    rule: str
    alpha: float
    alpha_exact: float
    distance: float
    distance_exact: float
    p_value: float
    freq: list[float]


@dataclass(frozen=True)
class DialReport:
    """:func:`dial_draws`' result: one :class:`DialDraw` per weight, and what frames them.

    Attributes:
        draws: per weight, in the order asked.
        n: draws per weight.
        token_ids: the bins (the top target tokens, then −1 for every other token).
        p_target, p_draft: each bin's probability.
        tv_draft: TV(p_target, p_draft) over the whole vocabulary.
        noise: the binned distance of ``n`` direct draws from p_target: the sampling noise a
            lossless rule's distance is made of.
        exact_rules: the first-token α of each exact rule (distance 0 by construction):
            ``"full"`` Σ min(p_target, p_draft), ``"one-hot / exact-match"`` p_target(argmax p_draft).
    """

    draws: list[DialDraw]
    n: int
    token_ids: list[int]
    p_target: list[float]
    p_draft: list[float]
    tv_draft: float
    noise: float
    exact_rules: dict[str, float]


def dial_draws(p_target: torch.Tensor, p_draft: torch.Tensor, n: int, generator: torch.Generator | None,
               weights=DIAL_WEIGHTS, top: int = 12) -> DialReport:
    """Draw the first token ``n`` times under ``"ensemble:W"`` for each W of ``weights``.

    Args:
        p_target, p_draft: ``(V,)`` first-token distributions on one device (p_draft: what the
            draft samples from; one-hot for prompt lookup).
        n: draws per weight (>= 100).
        generator: the random source of every draw.
        weights: each W in [0, 1].
        top: the most likely target tokens binned on their own (the rest share one bin).

    Returns:
        A :class:`DialReport`.

    Raises:
        ValueError: ``n < 100``; RuleError: a weight outside [0, 1].
    """
    if n < 100:
        raise ValueError(f"n must be at least 100 draws, got {n}")
    rules = [ensemble_rule(w) for w in weights]
    p_cpu, q_cpu = p_target.cpu().double(), p_draft.cpu().double()
    top_ids = torch.topk(p_cpu, min(top, p_cpu.shape[-1])).indices
    p_binned, q_binned = binned(p_cpu, top_ids), binned(q_cpu, top_ids)
    tv_draft = 0.5 * float((p_cpu - q_cpu).abs().sum())
    tv_binned = 0.5 * float((p_binned - q_binned).abs().sum())
    draws = []
    for rule in rules:
        counts, accepted = draw_first_tokens(p_target, p_draft, n, generator, rule=rule.name)
        freq = binned(counts.double(), top_ids) / n
        draws.append(DialDraw(rule.weight, rule.name, accepted / n, 1.0 - rule.weight * tv_draft,
                              0.5 * float((freq - p_binned).abs().sum()), (1.0 - rule.weight) * tv_binned,
                              chi_square_p(freq * n, p_binned, n), freq.tolist()))
    direct = torch.multinomial(p_target, n, replacement=True, generator=generator).cpu()
    direct_freq = binned(torch.bincount(direct, minlength=p_cpu.shape[-1]).double(), top_ids) / n
    argmax = int(q_cpu.argmax())
    return DialReport(draws, n, top_ids.tolist() + [-1], p_binned.tolist(), q_binned.tolist(), tv_draft,
                      0.5 * float((direct_freq - p_binned).abs().sum()),
                      {"full": 1.0 - tv_draft, "one-hot / exact-match": float(p_cpu[argmax])})


def dial_experiment(target, drafter, prompt_ids: list[int], sampling, n: int = 1000, seed: int = 0,
                    vocab_size: int | None = None, weights=DIAL_WEIGHTS) -> DialReport:
    """:func:`dial_draws` on a prompt's first token: one forward pass of the target and of the
    draft (prompt lookup: its point mass), as :func:`specviz.ui.teach.lossless.first_token_experiment`.

    Args:
        target: the target causal LM; drafter: any drafter; prompt_ids: the encoded prompt.
        sampling: the settings both models' distributions are taken with.
        n, weights: as :func:`dial_draws`; seed: the seed of every draw; vocab_size: the shared
            vocabulary width (defaults to the target's logits width).

    Raises:
        ValueError: an empty prompt, ``n < 100``, or a drafter that proposes nothing here.
    """
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    device = next(target.parameters()).device
    vocab = vocab_size or target.get_output_embeddings().weight.shape[0]
    generator = torch.Generator(device=device).manual_seed(seed)
    p_target_first, p_draft_first = first_distributions(target, drafter, prompt_ids, sampling, vocab, generator)
    return dial_draws(p_target_first, p_draft_first, n, generator, weights)
