"""With Token Recycling drafting, alone or behind prompt lookup, the first two emitted tokens follow
the target's distribution.

Each run is a real :class:`~specviz.core.engine.Generation` on a tiny target (vocabulary V = 4), sampling
at T = 1, K = 2, as a tree (B = 2, N = 4 nodes): a :class:`~specviz.drafters.RecycleDrafter`, or
:class:`~specviz.drafters.combined.LookupThen` (trigram prompt lookup, Token Recycling filling the
tree). The prompt ``1 2 3 1 2 3`` repeats a trigram, so the combined drafter's first tree merges
lookup's copy with recycled branches. The first two emitted tokens ``(x1, x2)`` are recorded: the
first round's accepted path and next token, or, after a rejection at depth 1, the second round's
first token, drafted from a table the first round's verify pass has just updated.

One table per worker process, kept across its runs (the app's hot start). The runs are still
independent draws from the same distribution: whatever the table holds, a run's output is
distributed as the target's (that is the claim under test), so each run's output given every
earlier run is that distribution.

Design (checked by ``test_sample_size_catches_total_variation_0_05``):

* **Cells.** The 16 pairs ``(x1, x2)``, with exact probabilities ``p_target(x1) · p_target(x2 | x1)``
  from the target's forward passes; with ``lm_head`` ×3 the smallest is 0.023, so with N = 4,500
  every cell expects ≥ 103 counts (≥ 5 needed for Pearson's approximation): no pooling,
  df = 15, 1% critical value χ²₀.₉₉(15) = 30.58.
* **Level.** p > 0.01: an exact sampler fails in 1% of seed ranges; the seeds are fixed, so the
  test is deterministic.
* **Power.** A sampler emitting p' at total-variation distance δ from p makes Pearson's X²
  approximately noncentral χ²(15, λ) with λ = N Σ (p'ᵢ − pᵢ)²/pᵢ ≥ 4Nδ² (Cauchy–Schwarz, as in
  tests/test_loop_distribution.py). With N = 4,500 and δ = 0.05, λ ≥ 45 and
  P(ncx2(15, 45) > 30.58) = 0.9901, the fewest runs (in fifties) that promise 0.99 (4,450 would
  give 0.989; 5,000, used before, bought 0.996 for 11% more time).
* **Every branch carries weight.** Recycled drafts are point masses, accepted with probability
  p_target(x): the test asserts that depth 1 is rejected in at least 15% of runs and accepted in
  at least 20%, that a second root child (tested against the residual its elder sibling left) is
  accepted in at least 5%, and that the second round drafts after a first-round rejection.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import torch
from helpers import tiny_llama
from scipy import stats

from specviz.drafters import PromptLookupDrafter, RecycleDrafter, RecycleTable
from specviz.drafters.combined import LookupThen
from specviz.core.engine import Generation
from specviz.core.sampling import SamplingConfig, logits_to_probs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 4
PROMPT = [1, 2, 3, 1, 2, 3]
SAMPLED = SamplingConfig(temperature=1.0)
N = 4_500  #: runs per histogram (see the power bound above)
DELTA = 0.05
LEVEL = 0.01
POWER = 0.99
KINDS = ("recycle", "lookup+recycle")


def build_target():
    """The tiny target, from a fixed seed: the same in every process."""
    return tiny_llama(0, vocab_size=VOCAB, lm_head_scale=3.0)


def make_drafter(kind: str, table: RecycleTable):
    recycle = RecycleDrafter(VOCAB, table)
    if kind == "recycle":
        return recycle
    return LookupThen(recycle, PromptLookupDrafter(VOCAB, max_ngram=3, min_ngram=3), label="recycle")


def first_pairs(kind: str, seeds) -> tuple[np.ndarray, dict]:
    """Histogram ``(V, V)`` of the first two emitted tokens over one run per seed (one table for
    all of them), and counts of what happened: first rounds that rejected every depth-1 node,
    accepted one, accepted a later root child; second rounds that drafted; merged trees."""
    target, table = build_target(), RecycleTable()
    counts = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    seen = {"rejected": 0, "accepted": 0, "sibling": 0, "second_drafted": 0, "both": 0}
    for seed in seeds:
        drafter = make_drafter(kind, table)
        gen = Generation(target, PROMPT, drafter, k=2, sampling=SAMPLED, max_new_tokens=3, seed=seed, branches=2,
                         instrument=False)
        emitted: list[int] = []
        for round_ in gen:
            seen["both"] += getattr(drafter, "last", "") == "both"
            if not emitted:
                seen["accepted"] += round_.n_accepted > 0
                seen["rejected"] += round_.n_accepted == 0
                roots = [node for node in round_.drafted if node.parent == -1]
                seen["sibling"] += any(node.accepted for node in roots[1:])
            else:
                seen["second_drafted"] += bool(round_.drafted)
            emitted += [t.id for t in round_.emitted]
            if len(emitted) >= 2:
                break
        counts[emitted[0], emitted[1]] += 1
    return counts, seen


def _worker(kind: str, seeds: range):
    torch.set_num_threads(1)
    return first_pairs(kind, seeds)


def histogram(kind: str) -> tuple[np.ndarray, dict]:
    """:func:`first_pairs` of ``kind`` over seeds 0..N−1, the halves in two worker processes (each
    run is a few milliseconds of Python: two cores halve the wall time); the sums of both."""
    halves = [range(N // 2), range(N // 2, N)]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        (c1, s1), (c2, s2) = pool.map(_worker, [kind, kind], halves)
    return c1 + c2, {key: s1[key] + s2[key] for key in s1}


@pytest.fixture(scope="module")
def pairs() -> np.ndarray:
    """The exact ``(V, V)`` distribution of the first two tokens, float64."""
    target = build_target()
    with torch.inference_mode():
        first = logits_to_probs(target(input_ids=torch.tensor([PROMPT])).logits[0, -1], SAMPLED).double()
        ids = torch.tensor([PROMPT + [x] for x in range(VOCAB)])
        second = logits_to_probs(target(input_ids=ids).logits[:, -1], SAMPLED).double()
    joint = first[:, None] * second
    return (joint / joint.sum()).numpy()


def chi_square_p(counts: np.ndarray, p: np.ndarray) -> float:
    expected = p.ravel() * counts.sum()
    assert expected.min() >= 5.0, "a cell expects < 5 counts: the chi-square approximation would not hold"
    return float(stats.chisquare(counts.ravel().astype(float), expected).pvalue)


def test_sample_size_catches_total_variation_0_05(pairs):
    assert N * pairs.min() >= 5.0
    df = VOCAB * VOCAB - 1
    critical = stats.chi2.ppf(1 - LEVEL, df)
    assert critical == pytest.approx(30.578, abs=1e-3)
    assert stats.ncx2.sf(critical, df, 4 * N * DELTA**2) > POWER


@pytest.mark.parametrize("kind", [KINDS[0], pytest.param(KINDS[1], marks=pytest.mark.slow)])
def test_first_two_tokens_follow_the_target(pairs, kind):
    """Token Recycling alone runs in the suite (about 20 s of CPU); behind prompt lookup, whose
    first trees merge both drafters, with ``-m slow`` (the suite's 15 minutes are nearly spent)."""
    counts, seen = histogram(kind)
    assert counts.sum() == N
    assert seen["rejected"] >= 0.15 * N and seen["accepted"] >= 0.2 * N, seen
    assert seen["sibling"] >= 0.05 * N and seen["second_drafted"] >= 0.5 * seen["rejected"], seen
    if kind == "lookup+recycle":
        assert seen["both"] >= 0.5 * N, seen  # most first trees hold lookup's copy and recycled branches
    p_value = chi_square_p(counts, pairs)
    assert p_value > LEVEL, (p_value, seen)
