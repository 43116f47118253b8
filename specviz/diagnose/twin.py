"""The synthetic twin of a run: the i.i.d. acceptance model at the run's own α, beside the real passes.

Engines now benchmark speculative decoding with *synthetic acceptance*: every draft kept
independently with one constant probability (vLLM ``rejection_sample_method: synthetic`` with
``synthetic_acceptance_rate``; llama.cpp ``--spec-synthetic-acceptance-length``, PR #27711). The
same i.i.d. model is what the closed forms assume (Leviathan et al. 2023, Definition 3.1 and
eq. 1). A real run differs: conditional acceptance changes with the draft position, some passes
keep nothing, and accepts come in streaks because acceptance correlates within a phrase. The twin
puts the model's figures beside the run's and says, with a test of fit, where they part.

Two twins, from the run's own counts (nothing here runs a model or imports torch):

* **the i.i.d. twin** at α = accepted ÷ tested (:attr:`specviz.figures.analysis.RunAnalysis.alpha`, the
  maximum-likelihood estimate of a constant per-draft acceptance);
* **the constant-length twin**, the engines' form: the constant conditional p with
  p + p² + … + p^K = L − 1, where L = 1 + accepted ÷ drafting passes is the run's mean acceptance
  length (vLLM's ``mean_acceptance_length``; llama.cpp's synthetic length, GPU.md's shared notes).
  It matches the run's mean length by construction; its p is not the run's α when acceptance
  depends on the position.

Four figures, each defined once where it already was, and its expectation under a twin:

* accepted drafts per pass (:func:`specviz.diagnose.diagnostics.accepted_length_histogram`): a pass that
  drafted k_i tokens keeps j of them with probability p^j(1 − p) for j < k_i and p^k_i for j = k_i
  (:func:`specviz.figures.theory.tokens_per_pass_distribution`), summed over the drafting passes;
* conditional acceptance by position (:func:`specviz.diagnose.diagnostics.acceptance_by_position`): p at
  every position;
* the zero-accept share (:func:`specviz.diagnose.diagnostics.zero_accept_share`): 1 − p;
* run lengths of accepts (:func:`accept_runs`): the tested drafts' outcomes in the order they were
  tested, across passes, cut at every rejection; under the model the outcomes are independent
  Bernoulli(p) draws, so a run has r accepts with probability p^r (1 − p) (geometric).

The test of fit (scipy.stats) compares each figure with the i.i.d. twin: a chi-square of the
accepted-length histogram and of the run lengths against the model (bins pooled until each
expects at least :data:`MIN_EXPECTED`; one degree of freedom removed for the estimated α), a
chi-square test of homogeneity of conditional acceptance across positions (the model says every
position keeps the same share), and an exact binomial test of the zero-accept passes against 1 − α.
The figure with the smallest p-value below :data:`FIT_LEVEL` is where the run departs, said in
one sentence (:attr:`SyntheticTwin.sentence`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field

from specviz.figures.analysis import draft_depth
from specviz.diagnose.diagnostics import accepted_length_histogram, acceptance_by_position, zero_accept_share
from specviz.figures.theory import tokens_per_pass_distribution
from specviz.core.records import RESAMPLED, Round

__all__ = ["FIT_LEVEL", "MIN_EXPECTED", "FitTest", "SyntheticTwin", "TwinFigures", "accept_runs",
           "constant_length_p", "mean_acceptance_length", "simulate_accepts", "synthetic_twin", "twin_figures"]

#: A figure departs from the i.i.d. model when its test's p-value is below this.
FIT_LEVEL = 0.01
#: Chi-square bins are pooled until each expects at least this many (Cochran's rule).
MIN_EXPECTED = 5.0
#: Fewer drafting passes than this: too little to test anything.
MIN_PASSES = 8


@dataclass(frozen=True)
class TwinFigures:
    """The four figures, observed (counts) or expected under a twin (expected counts).

    ``accepted_length_histogram[j]``: drafting passes that kept j drafts (j = 0..K);
    ``conditional_by_position[i]``: share kept at position i + 1 when tested (None: never tested);
    ``zero_accept_share``: drafting passes that kept nothing ÷ drafting passes;
    ``accept_run_lengths[r]``: runs of exactly r accepts ended by a rejection (r = 0..);
    ``mean_acceptance_length``: 1 + accepted drafts per drafting pass.
    """

    accepted_length_histogram: list[float]
    conditional_by_position: list[float | None]
    zero_accept_share: float | None
    accept_run_lengths: list[float]
    mean_acceptance_length: float | None


@dataclass(frozen=True)
class FitTest:
    """One figure's test against the i.i.d. twin: its name, the test, statistic, p-value, and the
    figure's observed and expected values in words."""

    figure: str
    method: str
    statistic: float
    p_value: float
    detail: str


@dataclass(frozen=True)
class SyntheticTwin:
    """A run beside its two synthetic twins, and where it departs (see the module docstring).

    ``alpha``: the run's per-token α (accepted ÷ tested); ``constant_p``: the constant-length
    twin's p; ``departs``: some figure's test is below :data:`FIT_LEVEL` (``departure`` names the
    one with the smallest p-value); ``sentence``: the verdict in one sentence.
    """

    k: int
    drafting_passes: int
    alpha: float | None
    constant_p: float | None
    real: TwinFigures
    iid: TwinFigures | None
    constant_length: TwinFigures | None
    tests: list[FitTest] = field(default_factory=list)
    departs: bool = False
    departure: str | None = None
    sentence: str = ""

    def to_dict(self) -> dict:
        """Plain JSON-ready data: ``run --json``'s ``synthetic_twin``."""
        return asdict(self)


# --------------------------------------------------------------------------- the run's own figures
def _drafting(rounds: list[Round]) -> list[Round]:
    return [r for r in rounds if r.drafted]


def mean_acceptance_length(rounds: list[Round]) -> float | None:
    """1 + accepted drafts ÷ drafting passes (vLLM's mean acceptance length, the bonus or resampled
    token counted once per pass); None when nothing was drafted."""
    drafting = _drafting(rounds)
    return 1 + sum(r.n_accepted for r in drafting) / len(drafting) if drafting else None


def accept_runs(rounds: list[Round]) -> list[int]:
    """Lengths of the runs of accepted drafts, in the order they were tested, each ended by a
    rejection: a pass contributes its ``n_accepted`` accepts, then a rejection when it ended with a
    resampled token. Runs continue across passes that kept every draft (the bonus token is not a
    test); the last run, which no rejection ended, is left out (it is cut, not finished)."""
    runs, current = [], 0
    for r in _drafting(rounds):
        current += r.n_accepted
        if r.emitted and r.emitted[-1].kind == RESAMPLED:
            runs.append(current)
            current = 0
    return runs


def _run_counts(runs: list[int]) -> list[float]:
    counts = [0.0] * (max(runs) + 1 if runs else 1)
    for n in runs:
        counts[n] += 1
    return counts


def _real_figures(rounds: list[Round], k: int) -> TwinFigures:
    positions = acceptance_by_position(rounds, k)
    return TwinFigures(
        accepted_length_histogram=[float(n) for n in accepted_length_histogram(rounds, k)],
        conditional_by_position=[p.conditional for p in positions],
        zero_accept_share=zero_accept_share(rounds),
        accept_run_lengths=_run_counts(accept_runs(rounds)),
        mean_acceptance_length=mean_acceptance_length(rounds))


# --------------------------------------------------------------------------- a twin's figures
def twin_figures(p: float, depths: list[int], n_runs: int, width: int) -> TwinFigures:
    """The four figures expected under the i.i.d. model with constant conditional acceptance ``p``.

    Args:
        p: the per-draft acceptance probability, in [0, 1].
        depths: each drafting pass's draft depth k_i (≥ 1).
        n_runs: how many rejection-ended runs the real run had (the run-length counts are scaled to it).
        width: how many histogram bins (K + 1) and positions (K) to return at least.

    Returns:
        A :class:`TwinFigures` of expected counts and shares.
    """
    deepest = max([width - 1, *depths]) if depths else width - 1
    histogram = [0.0] * (deepest + 1)
    for depth in depths:
        for j, share in enumerate(tokens_per_pass_distribution(p, depth)):
            histogram[j] += share
    reach = max(1, _longest_run_bin(p, n_runs))
    runs = [n_runs * p**r * (1 - p) for r in range(reach)] + [n_runs * p**reach]  # the last bin is r ≥ reach
    mean_length = 1 + sum(p * (1 - p**d) / (1 - p) if p < 1 else d for d in depths) / len(depths) if depths else None
    return TwinFigures(accepted_length_histogram=histogram, conditional_by_position=[p] * deepest,
                       zero_accept_share=1 - p if depths else None, accept_run_lengths=runs,
                       mean_acceptance_length=mean_length)


def _longest_run_bin(p: float, n_runs: int) -> int:
    """The run length from which the geometric tail is one bin: where fewer than one run in the
    whole run is expected beyond it (at most 64)."""
    if p <= 0 or n_runs <= 0:
        return 1
    if p >= 1:
        return 64
    return min(64, max(1, math.ceil(math.log(1 / n_runs) / math.log(p))))


def constant_length_p(mean_length: float, k: int) -> float:
    """The engines' synthetic acceptance: the constant p with p + p² + … + p^K = L − 1 (bisection).

    Args:
        mean_length: L, the mean acceptance length (1 + accepted drafts per drafting pass), in [1, K + 1].
        k: the lookahead K, ≥ 1.

    Returns:
        p in [0, 1] (0 for L = 1, 1 for L = K + 1).

    Raises:
        ValueError: for K < 1 or L outside [1, K + 1].
    """
    if k < 1 or not 1 <= mean_length <= k + 1 + 1e-9:
        raise ValueError(f"need K >= 1 and 1 <= L <= K + 1, got K = {k}, L = {mean_length}")
    target = mean_length - 1
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid**i for i in range(1, k + 1)) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def simulate_accepts(p: float, depths: list[int], seed: int = 0) -> list[int]:
    """One seeded run of the i.i.d. model: for each drafting pass of depth k_i, the drafts kept
    (each kept with probability ``p`` until the first rejection, at most k_i)."""
    rng = random.Random(seed)
    kept = []
    for depth in depths:
        n = 0
        while n < depth and rng.random() < p:
            n += 1
        kept.append(n)
    return kept


# --------------------------------------------------------------------------- tests of fit
def _pooled(observed: list[float], expected: list[float]) -> tuple[list[float], list[float]]:
    """Adjacent bins merged, left to right, until each expects at least :data:`MIN_EXPECTED` (a
    short last group joins the one before)."""
    obs_groups, exp_groups, o, e = [], [], 0.0, 0.0
    for a, b in zip(observed, expected):
        o, e = o + a, e + b
        if e >= MIN_EXPECTED:
            obs_groups.append(o)
            exp_groups.append(e)
            o = e = 0.0
    if e > 0 or o > 0:
        if obs_groups:
            obs_groups[-1] += o
            exp_groups[-1] += e
        else:
            obs_groups, exp_groups = [o], [e]
    return obs_groups, exp_groups


def _chisquare(observed: list[float], expected: list[float], ddof: int) -> tuple[float, float] | None:
    """(statistic, p) of Pearson's chi-square after pooling, or None with too few bins to test."""
    from scipy import stats

    n = len(expected)
    observed = observed + [0.0] * (n - len(observed))
    expected = expected + [0.0] * (len(observed) - n)
    obs, exp = _pooled(observed, expected)
    if len(obs) - 1 - ddof < 1 or sum(exp) <= 0:
        return None
    scale = sum(obs) / sum(exp)
    result = stats.chisquare(obs, [x * scale for x in exp], ddof=ddof)
    return float(result.statistic), float(result.pvalue)


def _histogram_test(real: TwinFigures, iid: TwinFigures, alpha: float) -> FitTest | None:
    fit = _chisquare(real.accepted_length_histogram, iid.accepted_length_histogram, ddof=1)
    if fit is None:
        return None
    n = sum(real.accepted_length_histogram)
    k = len(real.accepted_length_histogram) - 1
    observed = (real.accepted_length_histogram[0] / n, real.accepted_length_histogram[k] / n)
    expected = (iid.accepted_length_histogram[0] / n, iid.accepted_length_histogram[k] / n)
    return FitTest("accepted drafts per pass", "chi-square goodness of fit (α estimated, bins pooled)", *fit,
                   f"{observed[0]:.0%} of drafting passes kept none and {observed[1]:.0%} kept all {k}, where "
                   f"independent draws at α = {alpha:.2f} give {expected[0]:.0%} and {expected[1]:.0%}")


def _positions_test(rounds: list[Round], k: int, alpha: float) -> FitTest | None:
    from scipy import stats

    rows = [(p.position, p.accepted, p.tested - p.accepted) for p in acceptance_by_position(rounds, k) if p.tested]
    if len(rows) < 2 or not any(a for _, a, _ in rows) or not any(r for _, _, r in rows):
        return None
    result = stats.chi2_contingency([[a, r] for _, a, r in rows], correction=False)
    shares = ", ".join(f"{a / (a + r):.2f}" for _, a, r in rows)
    return FitTest("acceptance by position", "chi-square test of homogeneity across positions",
                   float(result.statistic), float(result.pvalue),
                   f"conditional acceptance runs {shares} from position 1 to {rows[-1][0]}, where the model keeps "
                   f"α = {alpha:.2f} at every position")


def _zero_accept_test(real: TwinFigures, n: int, alpha: float) -> FitTest | None:
    from scipy import stats

    if real.zero_accept_share is None or not 0 < alpha < 1:
        return None
    zeros = round(real.zero_accept_share * n)
    result = stats.binomtest(zeros, n, 1 - alpha)
    return FitTest("zero-accept passes", "exact binomial test against 1 − α", float(zeros), float(result.pvalue),
                   f"{real.zero_accept_share:.0%} of drafting passes kept nothing, where the model expects "
                   f"1 − α = {1 - alpha:.0%}")


def _runs_test(real: TwinFigures, iid: TwinFigures, alpha: float) -> FitTest | None:
    observed = list(real.accept_run_lengths)
    expected = list(iid.accept_run_lengths)
    if len(observed) > len(expected):  # runs longer than the model's tail bin go into it
        observed = observed[: len(expected) - 1] + [sum(observed[len(expected) - 1 :])]
    fit = _chisquare(observed, expected, ddof=1)
    if fit is None:
        return None
    n = sum(real.accept_run_lengths)
    longest = len(real.accept_run_lengths) - 1
    mean_real = sum(r * c for r, c in enumerate(real.accept_run_lengths)) / n
    return FitTest("run lengths of accepts", "chi-square goodness of fit to the geometric law (α estimated)", *fit,
                   f"runs of accepted drafts averaged {mean_real:.1f} (longest {longest}) where independent draws "
                   f"give {alpha / (1 - alpha):.1f}, with {real.accept_run_lengths[0] / n:.0%} of rejections right "
                   f"after another (model {1 - alpha:.0%}): accepts come in streaks")


def _verdict(tests: list[FitTest], alpha: float, passes: int) -> tuple[bool, str | None, str]:
    if not tests:
        return False, None, (f"Too little to test the i.i.d. model on: {passes} drafting passes at α = {alpha:.2f} "
                             "leave no figure with enough expected counts.")
    worst = min(tests, key=lambda t: t.p_value)
    if worst.p_value < FIT_LEVEL:
        return True, worst.figure, (f"The real run departs from the i.i.d. model at its own α = {alpha:.2f} most in "
                                    f"the {worst.figure}: {worst.detail} ({worst.method}, p = {worst.p_value:.2g}).")
    return False, None, (f"The i.i.d. model at α = {alpha:.2f} fits this run: no figure departs at the "
                         f"{FIT_LEVEL:.0%} level over {passes} drafting passes (closest: the {worst.figure}, "
                         f"p = {worst.p_value:.2g}).")


# --------------------------------------------------------------------------- the twin
def synthetic_twin(rounds: list[Round], k: int, alpha: float | None) -> SyntheticTwin:
    """A run's figures beside its i.i.d. and constant-length twins, and the test of fit.

    Args:
        rounds: the run's rounds (chains; a tree pass counts its accepted path and its depth).
        k: the lookahead K the run asked for (0: plain decoding, no twin).
        alpha: the run's per-token α (:attr:`specviz.figures.analysis.RunAnalysis.alpha`), None if nothing
            was tested.

    Returns:
        A :class:`SyntheticTwin`; without drafting passes or α its twins are None and its sentence
        says there is nothing to compare.
    """
    real = _real_figures(rounds, k)
    drafting = _drafting(rounds)
    depths = [draft_depth(r) for r in drafting]
    if not drafting or alpha is None or k < 1:
        return SyntheticTwin(k, len(drafting), alpha, None, real, None, None,
                             sentence="Nothing was drafted, so there is no acceptance to model.")
    runs = int(sum(real.accept_run_lengths))
    width = len(real.accepted_length_histogram)
    iid = twin_figures(alpha, depths, runs, width)
    length = real.mean_acceptance_length
    constant_p = constant_length_p(min(length, k + 1), k)  # the engines' K: every pass drafts K there
    constant = twin_figures(constant_p, depths, runs, width)
    tests = []
    if len(drafting) >= MIN_PASSES:
        found = (_histogram_test(real, iid, alpha), _positions_test(rounds, k, alpha),
                 _zero_accept_test(real, len(drafting), alpha), _runs_test(real, iid, alpha) if runs else None)
        tests = [t for t in found if t is not None]
    departs, departure, sentence = _verdict(tests, alpha, len(drafting))
    return SyntheticTwin(k, len(drafting), alpha, constant_p, real, iid, constant, tests, departs, departure, sentence)
