"""Pure sampling math for speculative sampling.

Everything here is a function of tensors and an explicit ``torch.Generator``: no models, no
tokenizers, no global state. The engine (``specviz.engine``) calls these; the tests call them with
hand-built logits.

Conventions
-----------
* ``p_target`` is the target model's distribution, ``p_draft`` the draft's. Both are produced by
  :func:`logits_to_probs` with the *same* :class:`SamplingConfig`, in float32, so the ratio
  ``p_target / p_draft`` compares the exact distributions the tokens were drawn from
  (Chen et al. 2023, Algorithm 2; Leviathan et al. 2023, Section 2.3).
* Temperature 0 means greedy: the distribution is a one-hot vector at the argmax. The accept test
  and the residual then reduce to "accept iff the target's argmax equals the draft token", and the
  resampled token is the target's argmax, so greedy speculative decoding equals greedy decoding.
* Shapes use ``V`` for the vocabulary width and ``K`` for the number of drafted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "NonFiniteLogitsError",
    "SamplingConfig",
    "VerifyResult",
    "logits_to_probs",
    "residual_distribution",
    "sample",
    "verify",
]


class NonFiniteLogitsError(ValueError):
    """Raised when a model produced NaN or +inf logits (a broken model or dtype overflow)."""


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings applied identically to the draft and the target.

    Attributes:
        temperature: softmax temperature; ``0`` means greedy (argmax). Must be finite and ``>= 0``.
        top_k: keep only the ``top_k`` most likely tokens; ``0`` disables the filter.
        top_p: nucleus filter: keep the smallest set of most likely tokens whose mass reaches
            ``top_p``; ``1.0`` disables it. Must be in ``(0, 1]``.

    Raises:
        ValueError: on out-of-range settings.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        # Also refuses NaN and +inf (logits / inf turns -inf masks into NaN).
        if not (0.0 <= self.temperature < float("inf")):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def logits_to_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Turn raw logits into the sampling distribution: temperature, then top-k, then top-p.

    Follows the usual order of transformers' logits processors (temperature → top-k → top-p).
    Computed in float32 whatever the model's dtype, so draft and target probabilities are
    compared in one precision.

    Args:
        logits: ``(..., V)`` raw logits, any float dtype. ``-inf`` entries (masked tokens) are
            allowed; ``NaN`` and ``+inf`` are not.
        config: the sampling settings.

    Returns:
        ``(..., V)`` float32 probabilities summing to 1 along the last axis. With
        ``temperature == 0`` each row is one-hot at the argmax (ties go to the lowest id).

    Raises:
        NonFiniteLogitsError: if any logit is NaN or +inf, or a row is entirely ``-inf``.
    """
    logits = logits.float()
    # One device-to-host sync for both checks (each `if tensor` waits for the GPU); the message
    # is worked out only on the rare failing path.
    broken = (torch.isnan(logits) | torch.isposinf(logits)).any(dim=-1) | torch.isneginf(logits).all(dim=-1)
    if broken.any():
        if torch.isnan(logits).any() or torch.isposinf(logits).any():
            raise NonFiniteLogitsError("the model produced NaN or +inf logits; try float32")
        raise NonFiniteLogitsError("a row of logits is entirely -inf: no token is possible")
    if config.greedy:
        # Greedy is the temperature → 0 limit; top-k/top-p cannot change the argmax.
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    # Shift the maximum to 0 before dividing: a tiny temperature then sends the other logits to
    # -inf instead of overflowing the largest to +inf (softmax of +inf is NaN). A temperature
    # below float32's range would round to 0 and turn the maximum's 0 / 0 into NaN, so it is
    # raised to the smallest normal float32, which gives the same limit (ties share the mass).
    temperature = max(config.temperature, torch.finfo(torch.float32).tiny)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if config.top_k and config.top_k < logits.shape[-1]:
        kth = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Mass strictly before each token: a token stays if the tokens ranked above it have
        # not yet reached top_p, so the most likely token always survives.
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= config.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token id per row of ``probs`` by inverse-CDF sampling.

    One uniform ``u`` per row, scaled by the row's total mass, is located in the cumulative sum
    with a binary search: the id ``i`` with ``cdf[i-1] <= u < cdf[i]``. A zero-probability id has
    ``cdf[i-1] == cdf[i]`` and so can never be chosen, and ``u`` is kept strictly below the total,
    so rounding cannot pick a zero-probability id at the end of the vocabulary either. This is
    the textbook method (e.g. Devroye 1986, Section III.2); we use it instead of
    ``torch.multinomial``, which took about 2 ms per call over SmolLM2's 49,152 ids on CPU
    against about 0.1 ms here (BENCHMARKS.md, goal 1).

    The cumulative sum is taken in float64 (float32 on Apple's MPS, which has no float64) so that
    the rounding error over a 250k-id vocabulary stays far below any probability we sample.

    Args:
        probs: ``(..., V)`` non-negative probabilities; rows need not be exactly normalised (the
            uniform is scaled by each row's sum), one-hot rows give their argmax. Each row must
            have positive, finite mass (an all-zero or NaN row has no id to give); every row that
            :func:`logits_to_probs` and :func:`residual_distribution` return does, and the check
            is left out here because it would cost a device-to-host sync per draw.
        generator: the random source; the only one used, so runs are reproducible per seed. It
            must live on ``probs``' device.

    Returns:
        ``(...)`` int64 token ids, on ``probs``' device.
    """
    flat = probs.reshape(-1, probs.shape[-1])
    dtype = torch.float32 if flat.device.type == "mps" else torch.float64
    cdf = flat.to(dtype).cumsum(dim=-1)
    total = cdf[:, -1:]
    uniforms = torch.rand(flat.shape[0], 1, generator=generator, device=flat.device, dtype=dtype)
    # u * total can round up to total itself; the largest float below total keeps u inside.
    u = torch.minimum(uniforms * total, torch.nextafter(total, torch.zeros_like(total)))
    ids = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return ids.reshape(probs.shape[:-1])


def residual_distribution(p_target: torch.Tensor, p_draft: torch.Tensor) -> torch.Tensor:
    """The distribution to resample from after a rejection: normalize(max(0, p_target − p_draft)).

    Chen et al. 2023, Algorithm 2 (the ``(q − p)_+`` term, with their q the target). When the two
    distributions are equal the residual has no mass; a rejection is then impossible in exact
    arithmetic, but float rounding can still reach this branch, so we fall back to ``p_target``
    instead of dividing 0 by 0.

    Args:
        p_target: ``(..., V)`` target probabilities.
        p_draft: ``(..., V)`` draft probabilities, same shape.

    Returns:
        ``(..., V)`` float32 probabilities, never NaN.
    """
    residual = (p_target - p_draft).clamp_min(0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(residual.dtype).tiny), p_target)


@dataclass
class VerifyResult:
    """Outcome of verifying one block of drafted tokens.

    Attributes:
        n_accepted: length of the accepted prefix, ``0 <= n_accepted <= K``.
        next_token: the token emitted after the accepted prefix: resampled from the residual at
            the first rejection, or the bonus token from the target when all K were accepted.
        next_kind: ``"resampled"`` or ``"bonus"``.
        p_target_drafted: ``(K,)`` target probability of each drafted token.
        p_draft_drafted: ``(K,)`` draft probability of each drafted token.
        accept_prob: ``(K,)`` ``min(1, p_target/p_draft)`` per drafted token.
        uniforms: ``(K,)`` the uniform draw each acceptance test used.
        next_p_target: target probability of ``next_token`` at its position (before any residual).
    """

    n_accepted: int
    next_token: int
    next_kind: str
    p_target_drafted: torch.Tensor
    p_draft_drafted: torch.Tensor
    accept_prob: torch.Tensor
    uniforms: torch.Tensor
    next_p_target: float


def verify(
    draft_tokens: torch.Tensor,
    p_draft: torch.Tensor,
    p_target: torch.Tensor,
    generator: torch.Generator | None,
) -> VerifyResult:
    """The verify step of speculative sampling for one block of K drafted tokens.

    Token ``i`` is accepted with probability ``min(1, p_target_i(x_i) / p_draft_i(x_i))``; the
    test is written ``u * p_draft < p_target`` so that a target probability of exactly 0 is never
    accepted and no division by zero happens. At the first rejection a token is drawn from the
    residual distribution at that position and the rest of the block is discarded; if all K are
    accepted the bonus token is drawn from ``p_target[K]``. Chen et al. 2023, Algorithm 2;
    Leviathan et al. 2023, Algorithm 1.

    All K uniforms are drawn up front and the first rejection is found on the device, so a block
    costs one host synchronisation, not K.

    Args:
        draft_tokens: ``(K,)`` int64 drafted token ids, ``K >= 0``.
        p_draft: ``(K, V)`` the exact distributions the draft tokens were sampled from (a one-hot
            row for a point-mass drafter such as prompt lookup).
        p_target: ``(K + 1, V)`` target distributions at the K drafted positions and one more
            (for the bonus token).
        generator: random source for the uniforms and the resample.

    Returns:
        A :class:`VerifyResult`.

    Raises:
        ValueError: if the shapes disagree.
    """
    k = draft_tokens.shape[0]
    if p_draft.shape[0] != k or p_target.shape[0] != k + 1 or p_draft.shape[-1] != p_target.shape[-1]:
        raise ValueError(
            f"shape mismatch: draft_tokens {tuple(draft_tokens.shape)}, p_draft {tuple(p_draft.shape)}, "
            f"p_target {tuple(p_target.shape)}; expected (K,), (K, V), (K+1, V)"
        )
    device = p_target.device
    index = draft_tokens.view(k, 1)
    p_target_drafted = p_target[:k].gather(1, index).squeeze(1)
    p_draft_drafted = p_draft.gather(1, index).squeeze(1)
    uniforms = torch.rand(k, generator=generator, device=device) if k else p_target.new_zeros(0)
    accepted = uniforms * p_draft_drafted < p_target_drafted
    # Length of the all-True prefix: flags after the first rejection never count.
    n_accepted = int(accepted.long().cumprod(dim=0).sum().item()) if k else 0
    if n_accepted < k:
        kind = "resampled"
        distribution = residual_distribution(p_target[n_accepted], p_draft[n_accepted])
    else:
        kind = "bonus"
        distribution = p_target[k]
    next_token = int(sample(distribution, generator).item())
    accept_prob = torch.clamp(p_target_drafted / p_draft_drafted.clamp_min(torch.finfo(torch.float32).tiny), max=1.0)
    return VerifyResult(
        n_accepted=n_accepted,
        next_token=next_token,
        next_kind=kind,
        p_target_drafted=p_target_drafted,
        p_draft_drafted=p_draft_drafted,
        accept_prob=accept_prob,
        uniforms=uniforms,
        next_p_target=float(p_target[n_accepted, next_token]),
    )
