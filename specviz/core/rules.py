"""The verification rules a speculative run can use, by name: plain data, no torch.

A rule decides which drafted tokens a verify pass keeps and what it samples after the first
rejection. :mod:`specviz.core.sampling` implements each one (``verify``, ``verify_tree``); this module
only names them, so a trace reader, the diagnostics and the page can check a rule's name without
importing torch. The rules and their sources are described in :mod:`specviz.core.sampling`'s module
docstring ("Verification rules").

One rule takes a parameter: ``ensemble:W``, transformers' static ensemble verification with its
``assistant_ensemble_weight`` W (0 ≤ W ≤ 1): a dial from the exact full rule (W = 1) to accepting
every draft (W = 0). :func:`check_rule` parses its name; :data:`RULES` holds the fixed rules only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ENSEMBLE", "RELAXED_TOP_K", "RULES", "RULE_CHOICES", "RULE_NAMES", "Rule", "RuleError", "check_rule",
           "ensemble_rule"]


class RuleError(ValueError):
    """An unknown verification rule, or one that does not apply to the draft's shape."""


@dataclass(frozen=True)
class Rule:
    """One verification rule of :data:`RULES`.

    Attributes:
        name: the rule's name (``"full"``, ``"one-hot"``, …), as the CLI and the page take it.
        description: one line on what it does and where it comes from.
        lossless: True when the output is distributed exactly as the target's (greedy decoding
            at T = 0); False for the lossy control.
        proposes: ``"sample"`` when the draft samples its tokens from ``p_draft``, ``"argmax"``
            when it proposes its most likely token (a point mass) instead.
        trees: True when :func:`verify_tree` can verify a tree of drafts under the rule.
        weight: the ensemble rule's W (:func:`ensemble_rule`); None for every other rule.
    """

    name: str
    description: str
    lossless: bool
    proposes: str
    trees: bool
    weight: float | None = None

    @property
    def label(self) -> str:
        """The rule's menu label, the same on every tab: its name and a word on what it is
        (``"one-hot (exact, argmax draft)"``, ``"relaxed-top-k (LOSSY control)"``)."""
        argmax = self.proposes == "argmax"
        if self.weight is not None:
            return f"{self.name} ({'exact' if self.lossless else 'LOSSY'} ensemble, w = {self.weight:g})"
        kind = "LOSSY control" if not self.lossless else ("exact, argmax draft" if argmax else "exact")
        return f"{self.name} ({kind})"


#: The target's top-k that the lossy ``"relaxed-top-k"`` control accepts a drafted token from.
RELAXED_TOP_K = 5

#: The verification rules, by name (see the module docstring, "Verification rules").
RULES: dict[str, Rule] = {
    "full": Rule("full", "accept x with min(1, p_target(x)/p_draft(x)), resample from max(0, p_target − p_draft) "
                 "(Chen et al. 2023; Leviathan et al. 2023)", True, "sample", True),
    "one-hot": Rule("one-hot", "the draft proposes its argmax x as a point mass: accept with p_target(x), resample "
                    "from p_target without x (vLLM V1, PR #16899)", True, "argmax", True),
    "exact-match": Rule("exact-match", "the draft proposes its argmax, the target samples its own token and the "
                        "draft is kept iff the two are equal (llama.cpp)", True, "argmax", True),
    "block": Rule("block", "the whole chain is verified jointly; never fewer tokens accepted on average than token "
                  "by token (Sun et al. 2024, arXiv 2403.10444)", True, "sample", False),
    "relaxed-top-k": Rule("relaxed-top-k", f"LOSSY control: accept any drafted token within the target's top "
                          f"{RELAXED_TOP_K}, else draw from p_target (relaxed acceptance)", False, "sample", True),
}
RULE_NAMES: tuple[str, ...] = tuple(RULES)
#: The ensemble rule's name, before its weight (``"ensemble:0.5"``).
ENSEMBLE = "ensemble"
#: What an unknown rule's message lists: the fixed rules, then the dial.
_KNOWN = f"{', '.join(RULE_NAMES)} or {ENSEMBLE}:W with 0 ≤ W ≤ 1"
#: Every menu of rules: (label, name) pairs, in :data:`RULES`' order.
RULE_CHOICES: tuple[tuple[str, str], ...] = tuple((rule.label, name) for name, rule in RULES.items())


def ensemble_rule(weight: float) -> Rule:
    """transformers' static ensemble verification at weight ``weight`` (its
    ``assistant_ensemble_weight``, PR #45979; DIVERSED, arXiv 2604.07622).

    A drafted x is accepted with min(1, v(x)/p_draft(x)), v = w·p_target + (1 − w)·p_draft; a
    rejection resamples from normalize(max(0, p_target − p_draft)), which is normalize(max(0,
    v − p_draft)) since v − p_draft = w·(p_target − p_draft). Each emitted token then follows v, not
    p_target: lossless only at w = 1, where it is the full rule. Chains only (a tree's siblings
    would each need their own v).

    Args:
        weight: w, a finite number in [0, 1].

    Returns:
        The :class:`Rule` named ``f"ensemble:{weight:g}"``.

    Raises:
        RuleError: one sentence, for a weight outside [0, 1] or not a number.
    """
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
        raise RuleError(f"the ensemble rule's weight W must be a number from 0 to 1 (ensemble:0.5), got {weight!r}")
    weight = float(f"{weight:g}")  # the weight its name says, so that a name read back is the same rule
    lossless = weight == 1.0
    what = ("exactly the full rule" if lossless else
            f"LOSSY: each token follows {weight:g}·p_target + {1 - weight:g}·p_draft")
    return Rule(f"{ENSEMBLE}:{weight:g}", f"static ensemble verification, w = {weight:g}: accept x with min(1, "
                f"v(x)/p_draft(x)), v = w·p_target + (1 − w)·p_draft, resample from max(0, p_target − p_draft); "
                f"{what} (transformers' assistant_ensemble_weight, PR #45979)", lossless, "sample", False, weight)


def _parse_ensemble(rule: str) -> Rule:
    """The :class:`Rule` of a name ``"ensemble:W"`` (:func:`ensemble_rule`)."""
    text = rule[len(ENSEMBLE) + 1:].strip()
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not math.isfinite(weight) or not 0.0 <= weight <= 1.0:
        raise RuleError(f"the ensemble rule takes its weight W from 0 to 1 after a colon (ensemble:0.5), got "
                        f"{rule!r}")
    return ensemble_rule(weight)


def check_rule(rule, tree: bool = False) -> Rule:
    """The :class:`Rule` named ``rule``, checked against the draft's shape.

    Args:
        rule: a rule name of :data:`RULES`, or ``"ensemble:W"`` with 0 ≤ W ≤ 1 (any type: it comes
            from a user).
        tree: True when the drafts form a tree (B > 1), False for a chain.

    Returns:
        The :class:`Rule` (for ``"ensemble:W"`` one named with W written by ``:g``, so
        ``"ensemble:0.50"`` is ``"ensemble:0.5"``).

    Raises:
        RuleError: one sentence, for an unknown rule, an ensemble weight outside [0, 1], or a
            chain-only rule asked to verify a tree.
    """
    if isinstance(rule, str) and rule.startswith(f"{ENSEMBLE}:"):
        found = _parse_ensemble(rule)
    else:
        found = RULES.get(rule) if isinstance(rule, str) else None
    if found is None:
        raise RuleError(f"the verification rule must be one of {_KNOWN}, got {rule!r}")
    if tree and not found.trees:
        why = ("the ensemble v mixes in the p_draft of the one drafted token it tests" if found.weight is not None
               else "Sun et al. 2024 define it for one block")
        trees = ", ".join(r.name for r in RULES.values() if r.trees)
        raise RuleError(f"the {found.name} rule verifies a chain of drafts only ({why}): draft chains (B = 1) or "
                        f"pick one of {trees} for trees")
    return found
