"""Closed-form predictions for speculative sampling, in plain Python floats (no torch).

The model behind every formula here: each drafted token is accepted independently with the same
probability ``alpha`` (the *acceptance rate*, Leviathan et al. 2023, Definition 3.1: the
expected value of ``sum_x min(p_draft(x), p_target(x))``), the drafter proposes exactly ``K``
tokens per round, and the verify pass stops at the first rejection. The number of accepted drafts
in a round is then a geometric run length capped at ``K``, and one target token (the resampled one
or the bonus one) is always added, so a verify pass emits between 1 and ``K + 1`` tokens.

Sources:
    * Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative
      Decoding", ICML 2023: eq. (1) (expected tokens per pass, written with gamma for K) and
      Theorem 3.8 (expected walltime improvement factor).
    * Chen, Borgeaud, Irving, Lespiau, Sifre, Jumper (2023), "Accelerating Large Language Model
      Decoding with Speculative Sampling": the same modified rejection sampling (their
      Algorithm 2), which makes the per-token acceptance probability ``min(1, q/p)``.

Units: ``alpha`` is a probability in [0, 1]; ``k`` is a count of drafted tokens; ``c`` and
``verify_cost`` are dimensionless time ratios (see :func:`expected_speedup`). Every function
raises :class:`ValueError` for an argument outside its domain (including NaN).
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "expected_speedup",
    "expected_tokens_per_pass",
    "launch_bound_cost_ratio",
    "tokens_per_pass_distribution",
]


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise ValueError(f"alpha must be a real number in [0, 1], got {alpha!r}")
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:  # also rejects NaN
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    return alpha


def _check_k(k: int, minimum: int) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"K must be an integer >= {minimum}, got {k!r}")
    k = int(k)
    if k < minimum:
        raise ValueError(f"K must be >= {minimum}, got {k}")
    return k


def check_nonneg(name: str, value: float, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0.0 or (strict and value == 0.0):
        raise ValueError(f"{name} must be a finite number {'> 0' if strict else '>= 0'}, got {value}")
    return value


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """Expected number of tokens emitted by one verify (target) pass.

    Leviathan et al. 2023, eq. (1): ``E[N] = (1 - alpha**(K+1)) / (1 - alpha)``, i.e. the
    geometric sum ``1 + alpha + ... + alpha**K``.

    The limits are exact: ``alpha = 0`` gives 1.0 and ``alpha = 1`` gives ``K + 1`` (no 0/0).
    Near ``alpha = 1`` the numerator is evaluated as ``-expm1((K+1) * log(alpha))`` so it does
    not lose precision to cancellation (``1 - alpha`` itself is exact in floating point there).

    Args:
        alpha: per-token acceptance rate, in [0, 1].
        k: lookahead K, drafted tokens per round, an integer >= 0 (K = 0 is plain decoding: 1).

    Returns:
        Expected tokens per target pass, in [1, K + 1].

    Raises:
        ValueError: if alpha is outside [0, 1] or K is not an integer >= 0.
    """
    alpha = _check_alpha(alpha)
    k = _check_k(k, 0)
    if alpha == 0.0:
        return 1.0
    if alpha == 1.0:
        return float(k + 1)
    return -math.expm1((k + 1) * math.log(alpha)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float, verify_cost: float = 1.0) -> float:
    """Expected wall-time speedup of speculative sampling over plain decoding.

    Leviathan et al. 2023, Theorem 3.8: the expected improvement factor in total walltime is
    ``(1 - alpha**(K+1)) / ((1 - alpha) * (K*c + 1))``. One round costs K draft steps (``K*c``
    target-step units) plus one verify pass and yields :func:`expected_tokens_per_pass` tokens,
    whereas plain decoding yields one token per target step. Here the verify pass's cost is a
    parameter, ``verify_cost``; ``verify_cost = 1.0`` gives Leviathan's formula exactly (their
    assumption that scoring K + 1 positions in parallel costs one plain step).

    Args:
        alpha: per-token acceptance rate, in [0, 1].
        k: lookahead K, an integer >= 1.
        c: cost ratio, (time of one draft forward step) / (time of one target decode step), >= 0.
        verify_cost: (time of one verify pass over K + 1 positions) / (time of one plain target
            decode step), > 0. Default 1.0.

    Returns:
        Expected speedup factor (> 1 is faster than plain decoding, < 1 is a slowdown).
        ``alpha = 0`` gives ``1 / (K*c + verify_cost)``.

    Raises:
        ValueError: if alpha is outside [0, 1], K < 1, c < 0, verify_cost <= 0, or any is
            non-finite.
    """
    alpha = _check_alpha(alpha)
    k = _check_k(k, 1)
    c = check_nonneg("c", c)
    verify_cost = check_nonneg("verify_cost", verify_cost, strict=True)
    return expected_tokens_per_pass(alpha, k) / (k * c + verify_cost)


def tokens_per_pass_distribution(alpha: float, k: int) -> list[float]:
    """Distribution of the number of tokens N emitted by one verify pass.

    With independent acceptances at rate alpha, the pass accepts ``n - 1`` drafts then rejects
    one, for ``n <= K``: ``P(N = n) = alpha**(n-1) * (1 - alpha)``; or accepts all K and adds the
    bonus token: ``P(N = K + 1) = alpha**K``. This is the truncated geometric distribution whose
    mean is Leviathan et al. 2023, eq. (1) (:func:`expected_tokens_per_pass`).

    Args:
        alpha: per-token acceptance rate, in [0, 1].
        k: lookahead K, an integer >= 0.

    Returns:
        A list of length ``K + 1``; element ``i`` is ``P(N = i + 1)``. The entries sum to 1 (up to
        rounding). ``alpha = 1`` puts all mass on ``K + 1``; ``alpha = 0`` all mass on 1.

    Raises:
        ValueError: if alpha is outside [0, 1] or K is not an integer >= 0.
    """
    alpha = _check_alpha(alpha)
    k = _check_k(k, 0)
    # 0.0 ** 0 == 1.0 in Python, so alpha = 0 gives [1, 0, ..., 0] without special-casing.
    probs = [alpha ** (n - 1) * (1.0 - alpha) for n in range(1, k + 1)]
    probs.append(alpha**k)
    return probs


def launch_bound_cost_ratio(draft_layers: int, target_layers: int) -> float:
    """The cost ratio c of a draft model on a GPU where batch-1 eager decoding is launch-bound.

    A decode step of a small model on a fast GPU costs about (layers × kernels per layer × launch
    time), not weight bytes ÷ memory bandwidth: the kernels finish faster than the host launches
    them. Two models of one architecture launch the same kernels per layer, so one draft step over
    one target step is ``c ≈ draft_layers / target_layers``, whatever their widths. Source:
    /work/shared/GPU.md, "CUDA semantics the timings depend on" (batch-1 eager decoding is
    launch-bound; SmolLM2-135M has 30 layers, SmolLM2-1.7B 24, Qwen2.5-0.5B 24, Qwen2.5-7B 28).
    With c ≥ 1 no α or K beats plain decoding: even every draft accepted gives
    ``expected_speedup(1, K, c) = (K + 1) / (K·c + 1) ≤ 1``.

    Args:
        draft_layers: the draft model's decoder layers (``config.num_hidden_layers``), >= 1.
        target_layers: the target's, >= 1.

    Returns:
        c, dimensionless (30 / 24 = 1.25 for SmolLM2-135M drafting for SmolLM2-1.7B).

    Raises:
        ValueError: for a layer count that is not an integer >= 1.
    """
    for name, layers in (("draft_layers", draft_layers), ("target_layers", target_layers)):
        if isinstance(layers, bool) or not isinstance(layers, numbers.Integral) or layers < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {layers!r}")
    return int(draft_layers) / int(target_layers)
