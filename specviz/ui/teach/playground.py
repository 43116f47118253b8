"""The what-if playground: the closed forms and a simulation of them, no model needed.

Everything here is pure and fast (microseconds for the closed forms, milliseconds for a
simulation of tens of thousands of rounds), so the app can recompute it on every slider move.

The model (Leviathan et al. 2023, Section 3; Chen et al. 2023): each drafted token is accepted
independently with probability α, the drafter proposes exactly K tokens per round, and a round
stops at its first rejection. A round costs K draft steps of c plain target steps each plus one
verify pass of v plain steps, and emits between 1 and K + 1 tokens:

* expected tokens per pass  E[N] = (1 − α^(K+1)) / (1 − α)   (their eq. 1),
* expected speedup          S    = E[N] / (K·c + v)           (their Theorem 3.8 with v = 1).

The formulas themselves live in :mod:`specviz.figures.theory`; this module adds the questions a learner
asks of them (which K is best, where is speculation a slowdown) and a Monte-Carlo run of the same
acceptance process, so the closed form can be seen to be the mean of something random.

Units: α is a probability; K a count of drafted tokens; c and v are dimensionless time ratios
(one draft step ÷ one plain target step; one verify pass ÷ one plain target step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specviz.figures import theory

__all__ = ["BEST_K_MAX", "ClosedForm", "MonteCarlo", "best_k", "closed_form", "from_analysis", "monte_carlo",
           "speedup_grid", "tokens_per_pass_variance"]

#: The best K is searched over 1..BEST_K_MAX (the request limit on K).
BEST_K_MAX = 16


@dataclass(frozen=True)
class ClosedForm:
    """The closed forms at one (α, K, c, v).

    Attributes:
        alpha, k, c, v: the inputs.
        tokens_per_pass: E[N] = (1 − α^(K+1)) / (1 − α), tokens per verify pass.
        round_cost: K·c + v, the cost of one round in plain target steps.
        speedup: E[N] / (K·c + v); below 1 is a slowdown.
        ceiling: (K + 1) / (K·c + v), the speedup if every draft were accepted (α = 1).
        best_k: the K in 1..:data:`BEST_K_MAX` with the largest speedup at this α, c, v.
        best_speedup: that speedup.
    """

    alpha: float
    k: int
    c: float
    v: float
    tokens_per_pass: float
    round_cost: float
    speedup: float
    ceiling: float
    best_k: int
    best_speedup: float


def best_k(alpha: float, c: float, v: float = 1.0, k_max: int = BEST_K_MAX) -> tuple[int, float]:
    """The lookahead K in 1..``k_max`` that maximises the expected speedup, and that speedup.

    A plain search (16 evaluations of :func:`specviz.figures.theory.expected_speedup`): the speedup is not
    concave in K in general once v and c vary, and a search cannot be wrong. Ties go to the smaller
    K (less wasted drafting for the same speed).

    Raises:
        ValueError: for α outside [0, 1], c < 0, v <= 0 or ``k_max`` < 1.
    """
    if isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 1:
        raise ValueError(f"k_max must be an integer >= 1, got {k_max!r}")
    best = (1, theory.expected_speedup(alpha, 1, c, v))
    for k in range(2, k_max + 1):
        s = theory.expected_speedup(alpha, k, c, v)
        if s > best[1] * (1 + 1e-12):  # a strict improvement, not float noise
            best = (k, s)
    return best


def closed_form(alpha: float, k: int, c: float, v: float = 1.0) -> ClosedForm:
    """Every closed-form figure of the playground at one point (see :class:`ClosedForm`).

    Raises:
        ValueError: for α outside [0, 1], K < 1, c < 0 or v <= 0 (from :mod:`specviz.figures.theory`).
    """
    tpp = theory.expected_tokens_per_pass(alpha, k)
    speedup = theory.expected_speedup(alpha, k, c, v)
    cost = k * float(c) + float(v)
    kb, sb = best_k(alpha, c, v)
    return ClosedForm(alpha=float(alpha), k=int(k), c=float(c), v=float(v), tokens_per_pass=tpp, round_cost=cost,
                      speedup=speedup, ceiling=(k + 1) / cost, best_k=kb, best_speedup=sb)


def speedup_grid(alphas: Sequence[float], ks: Sequence[int] | None = None, cs: Sequence[float] | None = None,
                 k: int = 4, c: float = 0.05, v: float = 1.0) -> list[list[float]]:
    """Expected speedup over a grid, for the playground's map.

    Give ``ks`` for a map over (α, K) at fixed ``c``, or ``cs`` for a map over (α, c) at fixed
    ``k``. Rows follow the second axis (K or c), columns follow α, as a heatmap's ``z`` wants.

    Returns:
        ``z[i][j]`` = speedup at (alphas[j], ks[i] or cs[i]); values below 1 are slowdowns.

    Raises:
        ValueError: unless exactly one of ``ks`` and ``cs`` is given, or for an out-of-domain value.
    """
    if (ks is None) == (cs is None):
        raise ValueError("give exactly one of ks (a map over α and K) or cs (a map over α and c)")
    if ks is not None:
        return [[theory.expected_speedup(a, kk, c, v) for a in alphas] for kk in ks]
    return [[theory.expected_speedup(a, k, cc, v) for a in alphas] for cc in cs]


def tokens_per_pass_variance(alpha: float, k: int) -> float:
    """Var N of the tokens emitted by one verify pass, from its exact distribution
    (:func:`specviz.figures.theory.tokens_per_pass_distribution`): Σ n² P(N = n) − E[N]²."""
    dist = theory.tokens_per_pass_distribution(alpha, k)
    mean = sum((n + 1) * p for n, p in enumerate(dist))
    return max(0.0, sum((n + 1) ** 2 * p for n, p in enumerate(dist)) - mean * mean)


@dataclass(frozen=True)
class MonteCarlo:
    """A simulation of the acceptance process: ``runs`` runs of ``rounds`` rounds each.

    Attributes:
        alpha, k, c, v, rounds, runs, seed: the inputs.
        tokens_per_pass: mean tokens per verify pass over all ``rounds × runs`` rounds.
        tokens_per_pass_se: its standard error, std of N ÷ √(rounds × runs).
        speedup: ``tokens_per_pass`` ÷ (K·c + v) (every round costs the same in this model, so
            the speedup of a run is its mean tokens per pass ÷ the round cost).
        run_tokens_per_pass: each run's mean tokens per pass (``runs`` values): the spread a
            learner sees between real runs of ``rounds`` passes.
        run_speedup: each run's speedup (``runs`` values).
        counts: ``counts[n - 1]`` = rounds that emitted n tokens, n = 1..K + 1.
    """

    alpha: float
    k: int
    c: float
    v: float
    rounds: int
    runs: int
    seed: int
    tokens_per_pass: float
    tokens_per_pass_se: float
    speedup: float
    run_tokens_per_pass: tuple[float, ...]
    run_speedup: tuple[float, ...]
    counts: tuple[int, ...]

    def spread(self, values: Sequence[float], lo: float = 5.0, hi: float = 95.0) -> tuple[float, float]:
        """The (lo, hi) percentiles of per-run values (default: the middle 90% of runs)."""
        return float(np.percentile(values, lo)), float(np.percentile(values, hi))


def monte_carlo(alpha: float, k: int, c: float, v: float = 1.0, rounds: int = 20, runs: int = 2000,
                seed: int = 0) -> MonteCarlo:
    """Simulate the acceptance process: every drafted token accepted independently with probability α.

    Each round draws K uniforms; the accepted drafts are the all-accepted prefix (a round stops
    testing at its first rejection), and the round emits that many plus one target token. An
    explicit ``numpy.random.Generator`` seeded with ``seed`` makes it reproducible.

    Args:
        alpha: per-token acceptance probability, in [0, 1].
        k: lookahead K, 1..64.
        c, v: cost ratio and verify cost (see the module docstring).
        rounds: verify passes per simulated run (1..10,000), e.g. 20 for a 48-token run at α ≈ 0.7.
        runs: simulated runs (1..100,000); rounds × runs is capped at 2,000,000.
        seed: the generator's seed (>= 0).

    Returns:
        A :class:`MonteCarlo`.

    Raises:
        ValueError: for an out-of-domain argument.
    """
    theory.expected_tokens_per_pass(alpha, k)  # raises for an α outside [0, 1] or a bad K
    cost = k * theory.check_nonneg("c", c) + theory.check_nonneg("verify_cost", v, strict=True)
    for name, value, hi in (("k", k, 64), ("rounds", rounds, 10_000), ("runs", runs, 100_000), ("seed", seed, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed" else 1) \
                or (hi is not None and value > hi):
            raise ValueError(f"{name} must be an integer in range, got {value!r}")
    if rounds * runs > 2_000_000:
        raise ValueError(f"rounds × runs must be at most 2,000,000, got {rounds * runs}")
    rng = np.random.default_rng(seed)
    accepted = rng.random((runs, rounds, k)) < alpha
    # Length of the all-True prefix of each round: flags after the first rejection never count.
    n = np.cumprod(accepted, axis=2).sum(axis=2) + 1  # (runs, rounds), tokens emitted per pass
    per_run = n.mean(axis=1)
    total = n.size
    std = float(n.std(ddof=1)) if total > 1 else 0.0
    return MonteCarlo(alpha=float(alpha), k=k, c=float(c), v=float(v), rounds=rounds, runs=runs, seed=seed,
                      tokens_per_pass=float(n.mean()), tokens_per_pass_se=std / math.sqrt(total),
                      speedup=float(n.mean()) / cost, run_tokens_per_pass=tuple(per_run.tolist()),
                      run_speedup=tuple((per_run / cost).tolist()),
                      counts=tuple(np.bincount(n.ravel(), minlength=k + 2)[1:k + 2].tolist()))


def from_analysis(scalars: Mapping | None) -> dict | None:
    """The playground's (α, K, c, v) from a real run's figures, or None when the run has no α or c.

    Args:
        scalars: :meth:`specviz.figures.analysis.RunAnalysis.scalars` of a run (or a sweep row), or None.

    Returns:
        ``{"alpha", "k", "c", "v"}``: the run's per-token α (accepted ÷ tested), its K, its
        measured cost ratio c and verify cost v (v = 1 when it was not measured); None if the run
        drafted nothing or had no plain baseline to measure c against.
    """
    if not scalars:
        return None
    alpha, c, k = scalars.get("alpha"), scalars.get("cost_ratio_c"), scalars.get("k")
    if alpha is None or c is None or not k:
        return None
    v = scalars.get("verify_cost_v") or 1.0
    return {"alpha": float(alpha), "k": int(k), "c": float(c), "v": float(v)}
