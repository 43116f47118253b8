"""The synthetic twin (specviz.diagnose.twin): on an i.i.d. simulated run its figures are the closed form's and
no test of fit rejects it; on a recorded real run it departs, and the sentence says where."""

from __future__ import annotations

import math

import pytest

from specviz.figures import theory
from specviz.figures.analysis import analyse
from specviz.diagnose.diagnostics import accepted_length_histogram, zero_accept_share
from specviz.core.records import ACCEPTED, BONUS, RESAMPLED, DraftedToken, EmittedToken, Round
from specviz.diagnose.twin import (FIT_LEVEL, accept_runs, constant_length_p, mean_acceptance_length, simulate_accepts,
                          synthetic_twin, twin_figures)

K = 4
ALPHA = 0.6
#: Passes of the simulated run. Power: the tests of fit hold their 1% level on i.i.d. data, so with
#: four tests the seeded run below passes with probability ≥ 96%, and it is seeded, so it passes
#: every time; the mean-length check uses 3 standard errors (sd of tokens per pass at α = 0.6, K = 4
#: is about 1.4, so 3 SE over 600 passes is ±0.17).
PASSES = 600


def _rounds_from_kept(kept: list[int], k: int = K) -> list[Round]:
    """Chain passes of depth k that kept ``kept[i]`` drafts (then a resample, or a bonus after all k)."""
    rounds = []
    for i, n in enumerate(kept):
        drafted = [DraftedToken(1, "", 0.5, 0.5, 1.0, 0.5, j < n, j <= n) for j in range(k)]
        kinds = [ACCEPTED] * n + [BONUS if n == k else RESAMPLED]
        rounds.append(Round(i, drafted, n, [EmittedToken(1, "", kind, 0.5, i) for kind in kinds], k=k))
    return rounds


@pytest.fixture(scope="module")
def iid_run():
    return _rounds_from_kept(simulate_accepts(ALPHA, [K] * PASSES, seed=3))


def test_an_iid_simulated_run_matches_the_closed_form(iid_run):
    a = analyse(iid_run, K, 1.0)
    twin = synthetic_twin(iid_run, K, a.alpha)
    # The twin's expected figures are the closed forms, exactly, at the run's own α.
    assert twin.iid.mean_acceptance_length == pytest.approx(theory.expected_tokens_per_pass(a.alpha, K), abs=1e-12)
    shares = [n / PASSES for n in twin.iid.accepted_length_histogram]
    assert shares == pytest.approx(theory.tokens_per_pass_distribution(a.alpha, K), abs=1e-12)
    assert twin.iid.zero_accept_share == pytest.approx(1 - a.alpha)
    # The simulated run agrees with them within its sampling error, and no test rejects it.
    sd = math.sqrt(sum(p * (n + 1 - twin.iid.mean_acceptance_length) ** 2
                       for n, p in enumerate(theory.tokens_per_pass_distribution(a.alpha, K))))
    assert abs(a.tokens_per_pass - theory.expected_tokens_per_pass(ALPHA, K)) < 3 * sd / math.sqrt(PASSES)
    assert len(twin.tests) == 4 and all(t.p_value >= FIT_LEVEL for t in twin.tests), twin.tests
    assert not twin.departs and twin.sentence.startswith(f"The i.i.d. model at α = {a.alpha:.2f} fits this run")
    # The engines' constant-length twin finds the same p where acceptance is i.i.d.
    assert twin.constant_p == pytest.approx(a.alpha, abs=0.03)


def test_the_run_figures_are_the_diagnostics_definitions(iid_run):
    twin = synthetic_twin(iid_run, K, analyse(iid_run, K, 1.0).alpha)
    assert twin.real.accepted_length_histogram == accepted_length_histogram(iid_run, K)
    assert twin.real.zero_accept_share == zero_accept_share(iid_run)
    assert sum(twin.real.accept_run_lengths) == sum(1 for r in iid_run if r.n_accepted < K)


def test_a_streaky_run_departs_in_its_runs_or_lengths_and_the_sentence_says_so():
    """All-or-nothing passes (a copy, then nothing to copy) at the same α the i.i.d. run has."""
    kept = ([K] * 6 + [0] * 4) * 30
    rounds = _rounds_from_kept(kept)
    twin = synthetic_twin(rounds, K, analyse(rounds, K, 1.0).alpha)
    assert twin.departs and twin.departure in ("accepted drafts per pass", "zero-accept passes",
                                               "run lengths of accepts", "acceptance by position")
    assert twin.sentence.startswith("The real run departs from the i.i.d. model") and "p = " in twin.sentence


def test_a_recorded_real_run_departs_with_the_sentence(real_lookup_run):
    rounds = real_lookup_run.rounds
    a = analyse(rounds, K, real_lookup_run.elapsed_s)
    twin = synthetic_twin(rounds, K, a.alpha)
    assert twin.departs, (twin.sentence, twin.tests)
    assert twin.sentence.startswith(f"The real run departs from the i.i.d. model at its own α = {a.alpha:.2f}")
    assert twin.departure in twin.sentence


@pytest.fixture(scope="module")
def real_lookup_run(smollm2):
    """Prompt lookup on the offline SmolLM2-135M (float32, greedy) writing the lighthouse poem, 160
    tokens: free verse with little to copy, then a line it repeats, which lookup copies whole (about
    40 drafting passes; one such run gave acceptance by position 0.74, 0.90, 1.00, 1.00, p = 0.002)."""
    from specviz.drafters.registry import build_drafter
    from specviz.run.runner import make_generation
    from specviz.core.sampling import SamplingConfig
    from specviz.ui.serve.settings import FREE_TEXT_PROMPT

    ids = smollm2.encode(FREE_TEXT_PROMPT, chat=True)
    drafter = build_drafter("ngram", smollm2)
    return make_generation(smollm2, drafter, ids, K, SamplingConfig(temperature=0.0), 160, 0).run()


def test_constant_length_p_solves_the_engines_equation():
    for length in (1.0, 1.7, 2.9, 4.2, 5.0):
        p = constant_length_p(length, K)
        assert sum(p**i for i in range(1, K + 1)) == pytest.approx(length - 1, abs=1e-9)
    assert constant_length_p(1.0, K) == pytest.approx(0.0, abs=1e-9)
    assert constant_length_p(K + 1, K) == pytest.approx(1.0, abs=1e-9)
    with pytest.raises(ValueError):
        constant_length_p(K + 2, K)


def test_run_lengths_cross_passes_that_kept_everything():
    rounds = _rounds_from_kept([K, 2, 0, K, K, 1, 3, K])  # 4 + 2 | 0 | 4 + 4 + 1 | 3 | the last 4 never ended
    assert accept_runs(rounds) == [6, 0, 9, 3]
    assert mean_acceptance_length(rounds) == pytest.approx(1 + 22 / 8)


def test_the_iid_run_lengths_are_geometric():
    twin = twin_figures(0.5, [K] * 10, n_runs=64, width=K + 1)
    assert twin.accept_run_lengths[:3] == pytest.approx([32, 16, 8])
    assert sum(twin.accept_run_lengths) == pytest.approx(64)


def test_nothing_drafted_has_no_twin():
    plain = [Round(0, [], 0, [EmittedToken(1, "", "plain", 0.5, 0)])]
    twin = synthetic_twin(plain, K, None)
    assert twin.iid is None and "Nothing was drafted" in twin.sentence
