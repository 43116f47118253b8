"""The lossless↔lossy dial: transformers' static ensemble verification as the rule ``"ensemble:W"``
(:func:`specviz.core.rules.check_rule`, :func:`specviz.core.sampling.verify`, :mod:`specviz.diagnose.rule_replay`, the
Run tab's dial :mod:`specviz.ui.tabs.dial_view`).

Chi-square tests. The lossless check's own draws (:func:`specviz.ui.teach.lossless.draw_first_tokens`)
of the first token over a 3-token vocabulary, p_target = (0.5, 0.3, 0.2) and p_draft = (0.1, 0.3,
0.6): TV(p_target, p_draft) = 0.4. Power, as in tests/test_rules.py: an output law off by δ in
total variation gives the Pearson statistic a noncentrality λ ≥ 4Nδ². With N = 4,000 draws and 2
degrees of freedom (critical value 13.8 at 0.001), δ = 0.05 gives λ ≥ 40 and a miss probability
below 1%, so "w = 1 passes" would catch a rule off by 0.05. At w = 0.2 the law is v, at δ = (1 −
0.2)·0.4 = 0.32 from p_target: with N = 1,000, λ ≥ 410, and the rejection is certain (p far below
1e-12). A correct rule fails with probability 0.001; the seeds are fixed, so each run is the same
draw.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from specviz.diagnose.rule_replay import (
    DialPoint,
    ensemble_dial,
    ensemble_test,
    pass_figures,
    replay_rule,
    rules_on_passes,
)
from specviz.core.rules import RULE_CHOICES, RuleError, check_rule, ensemble_rule
from specviz.core.sampling import verify
from specviz.core.records import DraftedToken, Round
from specviz.ui.draw.dial_chart import dial_draws_figure, dial_passes_figure
from specviz.ui.teach.dial import dial_draws
from specviz.ui.teach.lossless import draw_first_tokens

pytestmark = pytest.mark.usefixtures("one_torch_thread")

P_TARGET = torch.tensor([0.5, 0.3, 0.2])
P_DRAFT = torch.tensor([0.1, 0.3, 0.6])
TV = 0.4


def _first_token_p(rule: str, n: int, seed: int = 0, law: torch.Tensor = P_TARGET) -> tuple[float, float]:
    """The chi-square p-value of ``n`` first tokens drawn under ``rule`` against ``law``, and α."""
    counts, accepted = draw_first_tokens(P_TARGET, P_DRAFT, n, torch.Generator().manual_seed(seed), rule=rule)
    expected = law.double() / law.double().sum() * n
    return float(stats.chisquare(counts.double().numpy(), expected.numpy()).pvalue), accepted / n


# --------------------------------------------------------------------------- the rule's name
def test_ensemble_w_parses_to_a_rule_with_its_weight_and_is_exact_only_at_1():
    half = check_rule("ensemble:0.50")
    assert (half.name, half.weight, half.lossless, half.trees) == ("ensemble:0.5", 0.5, False, False)
    assert check_rule("ensemble:1").lossless and check_rule("ensemble:1.0").name == "ensemble:1"
    assert not check_rule("ensemble:0").lossless
    assert "LOSSY" in half.label and "LOSSY" in half.description
    assert ensemble_rule(0.25).name == "ensemble:0.25"
    assert all(not name.startswith("ensemble") for _, name in RULE_CHOICES)  # the menus stay as they were


@pytest.mark.parametrize("name", ["ensemble:1.5", "ensemble:-0.1", "ensemble:x", "ensemble:nan", "ensemble:",
                                  "ensemble:inf"])
def test_a_weight_outside_0_to_1_is_refused_in_one_sentence(name):
    with pytest.raises(RuleError) as caught:
        check_rule(name)
    message = str(caught.value)
    assert "from 0 to 1" in message and repr(name) in message and message.count(". ") == 0


def test_the_ensemble_rule_verifies_chains_only_and_unknown_names_list_the_dial():
    with pytest.raises(RuleError, match="ensemble:0.5 rule verifies a chain of drafts only"):
        check_rule("ensemble:0.5", tree=True)
    with pytest.raises(RuleError, match="ensemble:W with 0 ≤ W ≤ 1, got 'ensembles'"):
        check_rule("ensembles")


def test_the_request_and_a_trace_take_ensemble_w():
    from specviz.run.request import RequestError, validate_request
    from specviz.figures.trace import TraceError, _settings

    base = {"prompt": "hi", "target": "t", "draft": "ngram", "k": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "max_new_tokens": 8, "seed": 0}
    assert validate_request(**base, rule=" Ensemble:0.5 ").rule == "ensemble:0.5"
    with pytest.raises(RequestError, match="from 0 to 1"):
        validate_request(**base, rule="ensemble:2")
    assert _settings({"rule": "ensemble:0.5"}, "settings")["rule"] == "ensemble:0.5"
    for bad in ("ensemble:2", "ensemble:0.50"):  # a trace writes the rule's own name
        with pytest.raises(TraceError, match="not a verification rule"):
            _settings({"rule": bad}, "settings")


# --------------------------------------------------------------------------- the rule, live
def test_transformers_worked_example_accepts_with_1_minus_w_plus_w_times_the_ratio():
    """transformers' own test (tests/generation/test_static_ensemble.py): q(x) = 0.8, p(x) = 0.4,
    u = 0.6: the full rule's ratio 0.5 rejects, w = 0.7 gives 1 − 0.7 + 0.7·0.5 = 0.65 and accepts.
    A rejection resamples from normalize(max(0, p − q)) = (0, 0.5, 0.375, 0.125): never token 0."""
    p_draft = torch.tensor([[0.80, 0.10, 0.05, 0.05]])
    p_target = torch.tensor([[0.40, 0.30, 0.20, 0.10], [0.25, 0.25, 0.25, 0.25]])
    result = verify(torch.tensor([0]), p_draft, p_target, torch.Generator().manual_seed(0), "ensemble:0.7")
    assert float(result.accept_prob[0]) == pytest.approx(0.65)
    assert ensemble_test(0.4, 0.8, 0.7) == pytest.approx(0.65) and ensemble_test(0.4, 0.8, 1.0) == 0.5
    outcomes = [verify(torch.tensor([0]), p_draft, p_target, torch.Generator().manual_seed(s), "ensemble:0.7")
                for s in range(300)]
    kept = sum(r.n_accepted for r in outcomes)
    assert 150 < kept < 240  # 0.65 · 300 = 195, ±5σ
    assert all(r.next_token != 0 for r in outcomes if r.n_accepted == 0)
    assert all(r.next_kind == "bonus" for r in outcomes if r.n_accepted == 1)


def test_w_1_is_the_full_rule_draw_for_draw_on_chains():
    """Same seeds, same rows: ensemble:1 and full keep the same drafts and emit the same token."""
    g = torch.Generator().manual_seed(7)
    for seed in range(60):
        p_draft = torch.softmax(2 * torch.randn(3, 5, generator=g), -1)
        p_target = torch.softmax(2 * torch.randn(4, 5, generator=g), -1)
        tokens = torch.multinomial(p_draft, 1, generator=g).squeeze(-1)
        a = verify(tokens, p_draft, p_target, torch.Generator().manual_seed(seed), "full")
        b = verify(tokens, p_draft, p_target, torch.Generator().manual_seed(seed), "ensemble:1")
        assert (a.n_accepted, a.next_token, a.next_kind) == (b.n_accepted, b.next_token, b.next_kind)
        assert torch.allclose(a.accept_prob, b.accept_prob)


def test_w_1_passes_the_chi_square_losslessness_test_and_small_w_fails_it():
    """Power: module docstring. At w = 0.2 the same draws follow v = 0.2·p_target + 0.8·p_draft
    (a test against v passes): the rule is lossy exactly as designed, no more."""
    p_exact, alpha_exact = _first_token_p("ensemble:1", 4000)
    assert p_exact > 1e-3
    assert alpha_exact == pytest.approx(1 - TV, abs=4 * (0.6 * 0.4 / 4000) ** 0.5)
    p_lossy, alpha_lossy = _first_token_p("ensemble:0.2", 1000, seed=1)
    assert p_lossy < 1e-12
    assert alpha_lossy == pytest.approx(1 - 0.2 * TV, abs=4 * (0.92 * 0.08 / 1000) ** 0.5)
    v = 0.2 * P_TARGET + 0.8 * P_DRAFT
    assert _first_token_p("ensemble:0.2", 1000, seed=1, law=v)[0] > 1e-3


def test_w_0_keeps_every_draft_of_a_live_run_and_w_1_runs_as_the_full_rule():
    from helpers import noisy_copy, tiny_llama

    from specviz.drafters import ModelDrafter
    from specviz.core.engine import Generation
    from specviz.core.sampling import SamplingConfig

    target = tiny_llama(0, lm_head_scale=8.0)
    draft = noisy_copy(target, seed=5, scale=0.05)
    t1 = SamplingConfig(temperature=1.0)
    runs = {rule: Generation(target, [3, 17, 42], ModelDrafter(draft, 256), k=3, sampling=t1, max_new_tokens=20,
                             seed=0, rule=rule).run() for rule in ("ensemble:0", "ensemble:1", "full")}
    every = runs["ensemble:0"].rounds
    assert all(r.n_accepted == len(r.drafted) for r in every[:-1])  # the last may be cut by the token limit
    assert runs["ensemble:1"].token_ids == runs["full"].token_ids


# --------------------------------------------------------------------------- on recorded passes
def _top(row):
    return sorted(([i, f"t{i}", p] for i, p in enumerate(row)), key=lambda e: -e[2])


ROWS_DRAFT = [[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]
ROWS_TARGET = [[0.2, 0.5, 0.3], [0.4, 0.4, 0.2]]


def _pass(u0=0.1, u1=0.25):
    """Drafts x = (0, 2) with whole rows recorded: full-rule tests 1/3 and 2/7; overlaps Σ min =
    0.6 and 0.5, so TV = 0.4 and 0.5 at the two positions."""
    drafted = []
    for i, (x, u) in enumerate(((0, u0), (2, u1))):
        p_d, p_t = ROWS_DRAFT[i][x], ROWS_TARGET[i][x]
        drafted.append(DraftedToken(id=x, text=f"t{x}", p_draft=p_d, p_target=p_t, accept_prob=min(1, p_t / p_d),
                                    uniform=u, accepted=False, tested=True, top_draft=_top(ROWS_DRAFT[i]),
                                    top_target=_top(ROWS_TARGET[i])))
    return Round(index=0, drafted=drafted, n_accepted=0)


def test_a_recorded_pass_replays_under_ensemble_w_with_its_own_u():
    """w = 0.5: tests 0.5 + 0.5·(1/3) = 2/3 and 0.5 + 0.5·(2/7) = 9/14; u = (0.1, 0.7) keeps the
    first only. At w = 1 the replay is the full rule's, step for step."""
    r = replay_rule(_pass(0.1, 0.7), "ensemble:0.5")
    assert [s.accept for s in r.steps] == [pytest.approx((2 / 3, 2 / 3)), pytest.approx((9 / 14, 9 / 14))]
    assert r.accepted == (1, 1) and r.expected == pytest.approx((2 / 3 + 2 / 3 * 9 / 14,) * 2)
    assert replay_rule(_pass(), "ensemble:1").steps == replay_rule(_pass(), "full").steps
    tests, _ = pass_figures(_pass(), "ensemble:0")
    assert tests == [(1.0, 1.0), (1.0, 1.0)]


def test_the_dial_on_recorded_passes_runs_from_the_full_rule_to_every_draft_kept():
    """Overlaps 0.6 and 0.5: at w the acceptances are 1 − 0.4w and 1 − 0.5w, the distances
    (1 − w)·0.4 and (1 − w)·0.5. w = 1 is the full rule's figure on the same pass."""
    rounds = [_pass()]
    one, half, zero = ensemble_dial(rounds, (1.0, 0.5, 0.0))
    full = rules_on_passes(rounds, 2).rules["full"].tokens_per_pass
    assert one.tokens_per_pass == pytest.approx(full) and one.distance == (0.0, 0.0)
    a1, a2 = 0.8, 0.75
    assert isinstance(half, DialPoint) and half.weight == 0.5
    assert half.tokens_per_pass == pytest.approx((1 + a1 + a1 * a2,) * 2)
    assert half.accept == pytest.approx(((a1 + a2) / 2,) * 2)
    assert half.distance == pytest.approx(((0.2 + 0.25) / 2,) * 2)
    assert zero.tokens_per_pass == (3.0, 3.0) and zero.distance == pytest.approx((0.45, 0.45))
    assert ensemble_dial([], (1.0,)) is None


# --------------------------------------------------------------------------- the dial's chart
def test_the_charts_points_are_the_draws_own_figures():
    """The first-token panel plots each weight's measured (distance, α) from its own draws: each
    point is recomputed here from the draws' histogram, and each lies within sampling noise of the
    exact line (α: 4σ of a binomial of 1,000 draws; distance: the distance that 1,000 direct draws
    from p_target showed, plus 0.05)."""
    report = dial_draws(P_TARGET, P_DRAFT, 1000, torch.Generator().manual_seed(3), weights=(1.0, 0.5, 0.0))
    figure = dial_draws_figure(report)
    points = next(t for t in figure.data if t.name.startswith("ensemble"))
    assert list(points.x) == [d.distance for d in report.draws]
    assert list(points.y) == [d.alpha for d in report.draws]
    for d in report.draws:
        assert d.distance == pytest.approx(0.5 * sum(abs(f - p) for f, p in zip(d.freq, report.p_target)))
        assert abs(d.alpha - d.alpha_exact) < 4 * (0.25 / 1000) ** 0.5
        assert abs(d.distance - d.distance_exact) < report.noise + 0.05
    assert [d.p_value > 1e-3 for d in report.draws] == [True, False, False]
    exact = {t.name: t.y[0] for t in figure.data if t.name.endswith("(exact)")}
    assert exact["full (exact)"] == pytest.approx(1 - TV)
    assert exact["one-hot / exact-match (exact)"] == pytest.approx(0.2)  # p_target of p_draft's argmax, token 2


def test_the_passes_chart_plots_the_replayed_points_and_the_exact_rules_at_0():
    points = ensemble_dial([_pass()], (1.0, 0.5, 0.0))
    figure = dial_passes_figure(points, {"full": 2.0, "block": 2.5})
    line = figure.data[0]
    assert list(line.x) == [sum(p.distance) / 2 for p in points]
    assert list(line.y) == [sum(p.tokens_per_pass) / 2 for p in points]
    assert [(t.name, t.x[0]) for t in figure.data[1:]] == [("full (exact)", 0.0), ("block (exact)", 0.0)]
    assert not dial_passes_figure(None).data


# --------------------------------------------------------------------------- the Run tab's dial
@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    """A tiny random target saved with a BPE tokenizer (as tests/test_app_teach.py's): loads in a
    fraction of a second, 300 ids, so the dial's 6 × 100 draws take well under a second."""
    from helpers import bpe_tokenizer
    from test_cli import _save_tiny

    tok = bpe_tokenizer(["The quick brown fox jumps over the lazy dog."] * 20, chat=False, vocab_size=300)
    return _save_tiny(tmp_path_factory.mktemp("dial") / "target", tok, seed=0)


def test_the_dial_endpoint_draws_every_weight_and_refuses_plain_decoding(tiny_target):
    """/dial as its button calls it (plan, job, work): a row per weight, w = 0 keeps every drafted
    token (prompt lookup's point mass, v = δ_x), and plain decoding has no draft to dial towards."""
    import gradio as gr

    from specviz.ui.tabs.dial_view import run_dial
    from specviz.ui.teach.dial import DIAL_WEIGHTS

    values = {"prompt": "the quick brown fox the quick brown fox the quick", "target_id": tiny_target,
              "drafter_kind": "ngram", "draft_model": "", "early_exit_layers": 1, "k": 3, "temperature": 1.0,
              "top_k": 0, "top_p": 1.0, "seed": 0, "chat": False, "device": "cpu", "dtype": "float32"}
    figure, text = run_dial(**values, n_draws=100, progress=lambda *a, **k: None, public=False)
    assert "**100 first-token draws per w**" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [float(r.split("|")[1]) for r in rows] == list(DIAL_WEIGHTS)
    points = next(t for t in figure.data if t.name.startswith("ensemble"))
    assert len(points.x) == len(DIAL_WEIGHTS) and points.y[-1] == 1.0
    with pytest.raises(gr.Error, match="plain decoding"):
        run_dial(**{**values, "drafter_kind": "none"}, n_draws=100, progress=lambda *a, **k: None, public=False)


def test_the_passes_view_reads_the_run_on_screen_and_says_when_there_is_none():
    from specviz.ui.tabs.dial_view import dial_passes
    from specviz.ui.serve.state import RunState

    figure, text = dial_passes(None)
    assert not figure.data and "press **Run**" in text
    state = RunState.from_rounds([_pass()], {"k": 2, "target": "t", "drafter": "d"})
    figure, text = dial_passes(state)
    assert "tokens per pass 1.90 → 3.00" in text and "mean distance per position 0.000 → 0.450" in text
    assert {t.name for t in figure.data[1:]} == {"full (exact)", "one-hot (exact)", "exact-match (exact)",
                                                 "block (exact)"}


def test_public_mode_caps_the_dials_draws_at_the_checks_total():
    """Public mode lets the lossless check draw 4,000 of each kind; the dial's six weights share
    that many (666 each), refused in one sentence before anything loads."""
    import gradio as gr

    from specviz.ui.serve import settings
    from specviz.ui.tabs.dial_view import plan_dial

    values = {"prompt": "Hi", "target_id": "smollm2-135m-instruct", "drafter_kind": "int8", "draft_model": "",
              "early_exit_layers": 4, "k": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0, "chat": True,
              "device": "auto", "dtype": "auto"}
    cap = settings.PUBLIC_POLICY.max_draws // 6
    with pytest.raises(gr.Error, match=f"between 100 and {cap}"):
        plan_dial(values, cap + 1, public=True)
    assert plan_dial(values, cap, public=True).args[1] == cap
