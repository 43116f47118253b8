"""What a lesson says about the run the visitor just made: the run's own figures, read from its
:class:`~specviz.figures.analysis.RunAnalysis` and :class:`~specviz.diagnose.diagnostics.RunDiagnostics`, written
into a few lines per lesson (a lesson quoted figures an older run had given, which the
page no longer produced).

The Run tab keeps, per visitor, the lesson picked and the figures of the runs made since
(:func:`new_memory`, :func:`remember`: plain data in a ``gr.State``), so a lesson that compares two
runs (copy-heavy text against free text, temperature 0 against 1.5) shows both. Each lesson with
run figures has a writer in :data:`WRITERS`, by its slug; a lesson without one keeps its note.

The rules lesson also judges each rule's output against the target's distribution
(:func:`rules_first_token_check`): on the run's recorded position where p_draft and p_target
differ most, the first emitted token is drawn many times under each rule and compared with
p_target, model-free. No gradio here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from specviz.figures.analysis import RunAnalysis
from specviz.diagnose.diagnostics import format_range
from specviz.diagnose.rule_replay import RULES
from specviz.figures.speedup import speedup_shown
from specviz.core.records import RESAMPLED, Round
from specviz.ui.teach.beats import position_distributions, total_variation
from specviz.ui.teach.lossless import draw_first_tokens

__all__ = ["LOOP_NGRAM", "LOOPS", "MEMORY_RUNS", "MEMORY_RUNS_BY_SLUG", "RULE_CHECK_DRAWS", "RuleCheck", "WRITERS", "lesson_text",
           "loop_share", "new_memory", "remember", "rules_first_token_check", "run_figures"]

#: Runs a lesson remembers (the newest last): two runs make a comparison.
MEMORY_RUNS = 2
#: A token continues a loop when the LOOP_NGRAM tokens ending at it appeared earlier in the output.
LOOP_NGRAM = 6
#: The loop share above which a text "repeats itself" (a non-repeating 100-token reply measured under 0.1).
LOOPS = 0.25
#: The example whose greedy continuation does not loop at the copy-heavy lesson's settings (SmolLM2-135M,
#: prompt lookup, K = 4, 96 tokens, bfloat16: loop share 0.01, against 0.62 for the poem, whose greedy
#: text repeats "a beacon of light" and which prompt lookup then copies at 2.29 tokens per pass).
FREE_EXAMPLE = "the example *Continue plain text*"
#: Draws of the first token under each rule in the rules lesson's check, each one the engine's own
#: verify step (about 1 ms on a CPU: five rules take a few seconds). With 500 draws a chi-square at
#: level 0.001 over ≤ 10 bins detects a total-variation distance of 0.15 with power 0.98
#: (noncentrality 500 · Σ Δ²/p ≥ 500 · (2 · 0.15)² = 45), 0.12 with power 0.8; an exact rule fails
#: it by chance once in a thousand checks.
RULE_CHECK_DRAWS = 500


def loop_share(token_ids: Sequence[int], n: int = LOOP_NGRAM) -> float:
    """The share of the tokens of ``token_ids`` (an output, in order) that end an ``n``-gram which
    already ended earlier in the same output: 0 for text that never repeats a stretch of ``n``
    tokens, near 1 for a loop. 0 for an output shorter than ``n``."""
    seen, repeated = set(), 0
    for end in range(n, len(token_ids) + 1):
        gram = tuple(token_ids[end - n:end])
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(token_ids) if len(token_ids) >= n else 0.0


def _speedup(a: RunAnalysis) -> str:
    """The measured speedup as the Run tab writes it, with its range (or why it is not shown)."""
    return speedup_shown(a.speedup, a.speedup_low, a.speedup_high, a.speedup_doubt) or "not measured (no baseline)"


def _f(x: float | None, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def run_figures(a: RunAnalysis, rounds: Sequence[Round], diagnostics=None, *, prompt_kind: str = "",
                temperature: float | None = None, judge_rules: bool = False, drafter: str = "",
                weight_bytes: int = 0) -> dict:
    """One run's figures as the lessons write them (strings, as shown), plain data for a State.

    ``a``: the run's analysis; ``rounds``: its passes; ``diagnostics``: its
    :class:`~specviz.diagnose.diagnostics.RunDiagnostics` (for the rules on its passes), or None;
    ``prompt_kind``: ``"copy-heavy"``, ``"free text"`` or ``""`` (another prompt); ``temperature``:
    the run's (None: unknown); ``judge_rules``: also draw each rule's first token against p_target
    (:func:`rules_first_token_check`, about a second: the rules lesson only); ``drafter``: its label;
    ``weight_bytes``: the bytes of the target's weights, what each of its passes reads (0: unknown)."""
    ids = [t.id for r in rounds for t in r.emitted]
    c, v, k = a.cost_ratio_c, a.verify_cost_v, a.k
    cost = None if c is None or v is None else k * c + v
    figures = {
        "prompt_kind": prompt_kind, "temperature": "—" if temperature is None else f"{temperature:g}",
        "emitted": str(a.emitted), "passes": str(a.target_passes), "tokens_per_pass": f"{a.tokens_per_pass:.2f}",
        "alpha": _f(a.alpha), "accepted": str(a.accepted), "tested": str(a.tested), "k": str(k),
        "no_draft_passes": str(sum(1 for r in rounds if not r.drafted)),
        "resampled": str(a.counts.get(RESAMPLED, 0)), "speedup": _speedup(a), "c": _f(c), "v": _f(v),
        "round_cost": _f(cost), "theory": _f(a.theoretical_speedup),
        "theory_half_c": _f(None if a.predicted_tokens_per_pass is None or cost is None or c is None
                            else a.predicted_tokens_per_pass / (k * c / 2 + v)),
        "loop_share": f"{loop_share(ids):.0%}", "loops": loop_share(ids) > LOOPS,
        "drafter": drafter, "speedup_value": a.speedup, "alpha_value": a.alpha,
        "predicted": _f(a.predicted_tokens_per_pass), "weight_gb": f"{weight_bytes / 1e9:.2f}" if weight_bytes else "",
        "plain_step_ms": _f(a.plain_step_ms, ".0f"), "verify_ms": _f(a.median_verify_ms, ".0f"),
        "expected": _f(None if cost is None or not cost else a.tokens_per_pass / cost),
    }
    on = getattr(diagnostics, "rules", None)
    if on is not None and on.drafting_passes:
        figures["rules"] = {name: format_range(on.rules[name].tokens_per_pass) for name in RULES}
        figures["rules_passes"] = str(on.passes)
        figures["rules_measured"] = f"{on.measured_tokens_per_pass:.2f}"
        if judge_rules:
            figures["rules_check"] = [check.as_dict() for check in rules_first_token_check(rounds)]
    return figures


def new_memory(slug: str) -> dict:
    """A lesson just picked (``slug``): no run made under it yet."""
    return {"slug": slug, "runs": []}


def remember(memory: dict | None, figures: dict) -> dict | None:
    """``memory`` with a finished run's ``figures`` (:func:`run_figures`) added, the oldest run
    dropped past :data:`MEMORY_RUNS`; None (no lesson picked) stays None."""
    if not memory:
        return None
    keep = MEMORY_RUNS_BY_SLUG.get(memory.get("slug", ""), MEMORY_RUNS)
    return {**memory, "runs": [*memory["runs"], figures][-keep:]}


# ----------------------------------------------------------------------------- the rules' output law
@dataclass(frozen=True)
class RuleCheck:
    """The first emitted token drawn :attr:`draws` times under one rule at one recorded position,
    against p_target there: ``tv`` the total-variation distance of the frequencies to p_target,
    ``p_value`` the chi-square goodness-of-fit p-value, ``lossless`` the rule's own claim."""

    rule: str
    draws: int
    tv: float
    p_value: float
    lossless: bool

    def as_dict(self) -> dict:
        return {"rule": self.rule, "draws": self.draws, "tv": self.tv, "p_value": self.p_value,
                "lossless": self.lossless}


def _chi_square(counts: np.ndarray, p_target: np.ndarray) -> float:
    """The chi-square p-value of ``counts`` against ``p_target``, bins expected under 5 draws merged."""
    n = counts.sum()
    small = p_target * n < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(p_target[~small], p_target[small].sum()) * n
    obs, exp = obs[exp > 0], exp[exp > 0]
    return 1.0 if len(exp) < 2 else float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _most_different(rounds: Sequence[Round]):
    """The recorded drafted token whose p_draft and p_target differ most over the run, or None."""
    best, best_tv = None, -1.0
    for r in rounds:
        for token in r.drafted:
            if token.top_target and token.top_draft:
                tv = total_variation(*position_distributions(token).arrays())
                if tv > best_tv:
                    best, best_tv = token, tv
    return best


def rules_first_token_check(rounds: Sequence[Round], draws: int = RULE_CHECK_DRAWS, seed: int = 0) -> list[RuleCheck]:
    """Each rule's output judged against the target's distribution, on the run's own numbers.

    At the recorded position where p_draft and p_target differ most
    (:func:`specviz.ui.teach.beats.position_distributions`: the recorded top tokens and an "other
    tokens" bucket on each side), the first emitted token is drawn ``draws`` times under each exact
    rule of :data:`specviz.diagnose.rule_replay.RULES` and the lossy ``relaxed-top-k`` control
    (:func:`specviz.ui.teach.lossless.draw_first_tokens`, the lossless check's own draws), and its
    frequencies are compared with p_target there. Every exact rule returns p_target for any pair of
    distributions, so its p-value is not small; the control returns something else wherever the
    two differ. Empty when no drafted position was recorded with its distributions."""
    token = _most_different(rounds)
    if token is None:
        return []
    p_draft, p_target = (torch.tensor(x / x.sum(), dtype=torch.float64) for x in position_distributions(token).arrays())
    checks = []
    for rule in (*RULES, "relaxed-top-k"):
        generator = torch.Generator().manual_seed(seed)
        counts, _ = draw_first_tokens(p_target, p_draft, draws, generator, rule=rule)
        freq = counts.double().numpy() / draws
        target = p_target.numpy()
        checks.append(RuleCheck(rule, draws, total_variation(freq, target), _chi_square(counts.numpy(), target),
                                rule != "relaxed-top-k"))
    return checks


# ----------------------------------------------------------------------------- each lesson's lines
def _copy_heavy(runs: list[dict]) -> list[str]:
    lines = []
    for f in runs:
        kind = f["prompt_kind"] or "this prompt"
        loop = (f"the output repeats itself ({f['loop_share']} of its tokens continue an earlier stretch of it), "
                "so prompt lookup copies the model's own loop" if f["loops"] else
                f"the output does not loop ({f['loop_share']} of its tokens repeat an earlier stretch)")
        lines.append(f"**{kind.capitalize()}:** {f['emitted']} tokens in {f['passes']} verify passes, "
                     f"**{f['tokens_per_pass']} tokens per pass**; {f['no_draft_passes']} of them found nothing to "
                     f"copy (grey plain steps); {loop}; speedup {f['speedup']}.")
    kinds = {f["prompt_kind"]: f for f in runs}
    if "copy-heavy" in kinds and "free text" in kinds:
        copy, free = kinds["copy-heavy"], kinds["free text"]
        lines.append(f"Copy-heavy text gave {copy['tokens_per_pass']} tokens per pass, free text "
                     f"{free['tokens_per_pass']}: prompt lookup can only copy what is already there."
                     + (f" This free text looped, so it had its own words to copy: {FREE_EXAMPLE} does not loop "
                        "at these settings." if free["loops"] else ""))
    elif "free text" not in kinds:
        lines.append(f"Now pick {FREE_EXAMPLE} below the prompt, free text that does not repeat itself at these "
                     "settings, and press **Run** again.")
    else:
        lines.append("Now pick a **copy-heavy** example (fix typos) and press **Run** again.")
    return lines


def _temperature(runs: list[dict]) -> list[str]:
    lines = [f"**T = {f['temperature']}:** per-token α = **{f['alpha']}** ({f['accepted']} of {f['tested']} "
             f"drafts accepted), {f['tokens_per_pass']} tokens per pass." for f in runs]
    temps = {f["temperature"] for f in runs}
    if len(temps) < 2:
        lines.append("Now set **Temperature** to 1.5 (or back to 0) and press **Run** again.")
    else:
        lines.append("At a higher temperature both models spread their probability: the test min(1, "
                     "p_target/p_draft) compares the two distributions, so α can move either way; over so few "
                     "tested drafts a difference of a few hundredths is noise. **Experiments** sweeps T in one click.")
    return lines


def _slow_draft(runs: list[dict]) -> list[str]:
    f = runs[-1]
    return [f"The int8 copy agreed with the target on α = **{f['alpha']}** of tested drafts "
            f"({f['tokens_per_pass']} tokens per pass), and the run was {f['speedup']} against plain decoding.",
            f"Why: one int8 draft step cost c = {f['c']} of a plain step and the verify pass v = {f['v']}, so a "
            f"round of K = {f['k']} drafts cost K·c + v = {f['round_cost']} plain steps for its "
            f"{f['tokens_per_pass']} tokens (closed form {f['theory']}×).",
            f"With c halved the closed form gives {f['theory_half_c']}×: load this run in the **Playground** and try."]


def _early_exit(runs: list[dict]) -> list[str]:
    f = runs[-1]
    return [f"The first layers' guesses were accepted at α = **{f['alpha']}** ({f['accepted']} of {f['tested']} "
            f"tested); {f['resampled']} of {f['passes']} passes ended in a resampled token (orange).",
            f"So a pass yielded {f['tokens_per_pass']} tokens, and drafting cost c = {f['c']} of a plain step "
            f"each: {f['speedup']} against plain decoding."]


def _learned_draft(runs: list[dict]) -> list[str]:
    f = runs[-1]
    return [f"The EAGLE head's drafts were accepted at α = **{f['alpha']}** ({f['accepted']} of {f['tested']}), "
            f"{f['tokens_per_pass']} tokens per pass; {f['resampled']} rejections resampled from the residual "
            "max(0, p_target − p_draft): click an orange token.",
            f"It cost c = {f['c']} of a target step per draft, so the run was {f['speedup']}."]


#: The chi-square level under which a rule's first token is judged not to follow p_target.
LEVEL = 0.001


def _verdict(p_value: float) -> str:
    return f"passes, p = {p_value:.2f}" if p_value >= LEVEL else f"fails, p < {LEVEL}"


def _rules(runs: list[dict]) -> list[str]:
    f = runs[-1]
    if "rules" not in f:
        return ["This run recorded no drafted passes to replay: press **Run** with a drafter."]
    r = f["rules"]
    lines = [f"**Same {f['rules_passes']} passes, four rules** (the chart of that title): expected tokens per pass "
             f"**full** {r['full']}, **one-hot** {r['one-hot']}, **exact-match** {r['exact-match']}, **block** "
             f"{r['block']} (the run itself, under the full rule: {f['rules_measured']}). Different speed."]
    checks = f.get("rules_check") or []
    if checks:
        said = "; ".join(f"**{c['rule']}** {_verdict(c['p_value'])} (distance {c['tv']:.3f})" for c in checks)
        lines.append(f"Same distribution: at this run's position where the two models differ most, the first token "
                     f"drawn {checks[0]['draws']:,} times under each rule, its frequencies against p_target "
                     f"(chi-square): {said}. An exact rule's distance is sampling noise; relaxed-top-k, a lossy "
                     "control, is judged the same way.")
    lines.append("The same text is not promised: at a temperature above 0 each rule draws its own tokens, so "
                 "each writes its own text from the same distribution.")
    return lines


def _lossless_check(runs: list[dict]) -> list[str]:
    f = runs[-1]
    return [f"This run at T = {f['temperature']}: α = {f['alpha']}, {f['tokens_per_pass']} tokens per pass.",
            "Now open **Is it lossless?** below and press **Run the check**; then tick *accept every draft token* "
            "and run it again: the table there gives each check's own distance and p-value."]


def _slower_or_faster(f: dict) -> str:
    """The run's speedup as shown, and in words when it is a slowdown."""
    value = f.get("speedup_value")
    if value is not None and value < 1 and f["speedup"].startswith(f"{value:.2f}"):
        return f"{f['speedup']}: **slower** than plain decoding (under 1×)"
    return f["speedup"]


def _paper_setting(runs: list[dict]) -> list[str]:
    """The paper's claims, each on the visitor's own runs of a same-family pair (Leviathan et al.
    2023; Chen et al. 2023): v near 1, tokens per pass against the closed form, the speedup below
    tokens per pass by K·c + v, α and the speedup falling with temperature, and the same-family
    draft against poorly aligned ones."""
    f = runs[-1]
    k = int(f["k"])
    reads = (f" The target's weights are {f['weight_gb']} GB, read once per pass whether it scores one position or "
             f"{k + 1}: reading them is most of a step, so the extra positions cost little." if f["weight_gb"] else "")
    lines = [f"**One pass, K + 1 positions, about one step:** the verify pass over {k + 1} positions took "
             f"{f['verify_ms']} ms against {f['plain_step_ms']} ms for a plain step: v = **{f['v']}**.{reads}",
             f"**Tokens per pass:** measured **{f['tokens_per_pass']}**; the closed form (1 − α^(K+1)) / (1 − α) at "
             f"this run's α = {f['alpha']} and K = {k} gives {f['predicted']} (at α = 0.8, K = 4 it gives 3.36, not "
             "the 2.8 some write-ups quote).",
             f"**The speedup is below tokens per pass:** each round cost K·c + v = {k}·{f['c']} + {f['v']} = "
             f"{f['round_cost']} plain steps for its {f['tokens_per_pass']} tokens, so {f['expected']}× at best; "
             f"measured {_slower_or_faster(f)}."]
    same = [g for g in runs if g["drafter"] == f["drafter"]]
    temps = {g["temperature"]: g for g in same}
    if len(temps) >= 2:
        said = "; ".join(f"T = {t}: α {g['alpha']}, {g['tokens_per_pass']} tokens per pass, {_slower_or_faster(g)}"
                         for t, g in sorted(temps.items()))
        lines.append(f"**Temperature:** {said}. Where the two models' distributions spread apart, fewer drafts "
                     "survive the test, and a pass that keeps little still paid for K draft steps.")
    else:
        lines.append("**Next:** pick *An explanation (T = 0.7)* below the prompt, set **Temperature** to 0.7, and "
                     "press **Run**: α and the speedup at a temperature where the small model agrees less.")
    others = {g["drafter"]: g for g in runs if g["drafter"] != f["drafter"]}
    if others:
        said = "; ".join(f"{name or 'plain'}: α {g['alpha']}, {g['tokens_per_pass']} tokens per pass, "
                         f"{_slower_or_faster(g)}" for name, g in others.items())
        lines.append(f"**Against other drafters on the same target:** {f['drafter']}: α {f['alpha']}, "
                     f"{f['tokens_per_pass']} tokens per pass; {said}. A draft of the same family, trained on the same "
                     "data, agrees with the target where the others guess.")
    elif len(temps) >= 2:
        lines.append("**Then:** keep the explanation and switch **Drafter** to *Self-draft: first N layers* or "
                     "*Prompt lookup*, and **Run**: the same target with poorly aligned drafts.")
    lines.append("**Lossless:** at T = 0.7, open **Is it lossless?** and press **Run the check**: the first token "
                 "drawn many times under the rule follows the 1.5B's own distribution.")
    return lines


def _two_engines(runs: list[dict]) -> list[str]:
    """One pair, two implementations: this run's own costs in the closed form (Leviathan et al. 2023:
    speedup = tokens per pass ÷ (K·c + v)), the verify cost v past which the same α and c make
    speculation slower than plain decoding (tokens per pass − K·c), and where to measure the same pair
    in llama.cpp (the lane, :mod:`specviz.run.llamacpp_lane`)."""
    f = runs[-1]
    k = int(f["k"])
    lines = []
    try:
        c, tokens = float(f["c"]), float(f["tokens_per_pass"])
    except ValueError:  # no baseline: no c, v or speedup to put in the closed form
        c = tokens = None
    if c is None or f["v"] == "—":
        lines.append(f"**This run:** α {f['alpha']}, {f['tokens_per_pass']} tokens per pass; its costs c and v need "
                     "the plain baseline, which this run did not time.")
    else:
        lines.append(f"**This engine's costs:** α {f['alpha']}; a draft step is c = {f['c']} of a plain step and the "
                     f"verify pass over "
                     f"{k + 1} positions v = {f['v']}, so each pass cost K·c + v = {f['round_cost']} plain steps for its "
                     f"{f['tokens_per_pass']} tokens: {f['expected']}× at best; measured {_slower_or_faster(f)}.")
        if tokens - k * c > 0:
            lines.append(f"**Where it stops paying:** at this run's α = {f['alpha']} and c = {f['c']}, speculation is "
                         f"slower than plain decoding once a verify pass costs more than {f['tokens_per_pass']} − "
                         f"{k}·{f['c']} = **{tokens - k * c:.2f}** plain steps. The paper assumes v near 1, and nothing "
                         "in the weights guarantees it: kernels bound by arithmetic rather than by reading the weights "
                         "pay for every extra position.")
        else:
            lines.append(f"**Where it stops paying:** here the drafts alone cost K·c = {k * c:.2f} plain steps a pass, "
                         f"no less than the {f['tokens_per_pass']} tokens a pass brings: no verify cost could make this "
                         "pair pay on this machine. The draft must be much cheaper than the target (c well under 1/K).")
    lines.append("**The same pair in llama.cpp:** open **Your engine's numbers**, then **One pair, two engines**, and "
                 "press **Run the Run tab's prompt in both** (`pip install xllamacpp`; a few minutes on a CPU). Its "
                 "table measures llama.cpp's own c and v on the same GGUF files, and its *Why* lines put each "
                 "engine's costs in this closed form.")
    return lines


#: Runs a lesson remembers when it compares more than two (the paper's: temperatures and drafters).
MEMORY_RUNS_BY_SLUG = {"paper_setting": 4}


#: Each lesson's lines on its runs, by slug (a lesson without a writer keeps its note).
WRITERS: dict[str, Callable[[list[dict]], list[str]]] = {
    "copy_heavy": _copy_heavy, "temperature": _temperature, "slow_draft": _slow_draft, "early_exit": _early_exit,
    "learned_draft": _learned_draft, "rules": _rules, "lossless_check": _lossless_check,
    "paper_setting": _paper_setting, "two_engines": _two_engines,
}


def lesson_text(memory: dict) -> str | None:
    """The lines lesson ``memory["slug"]`` shows on its runs (Markdown, one paragraph a line), or
    None when it has no writer or no run yet."""
    writer = WRITERS.get(memory.get("slug", ""))
    if writer is None or not memory.get("runs"):
        return None
    return "\n\n".join(writer(memory["runs"]))
