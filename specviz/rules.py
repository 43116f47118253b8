"""The verification rules a speculative run can use, by name: plain data, no torch.

A rule decides which drafted tokens a verify pass keeps and what it samples after the first
rejection. :mod:`specviz.sampling` implements each one (``verify``, ``verify_tree``); this module
only names them, so a trace reader, the diagnostics and the page can check a rule's name without
importing torch. The rules and their sources are described in :mod:`specviz.sampling`'s module
docstring ("Verification rules").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RELAXED_TOP_K", "RULES", "RULE_CHOICES", "RULE_NAMES", "Rule", "RuleError", "check_rule"]


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
    """

    name: str
    description: str
    lossless: bool
    proposes: str
    trees: bool

    @property
    def label(self) -> str:
        """The rule's menu label, the same on every tab: its name and a word on what it is
        (``"one-hot (exact, argmax draft)"``, ``"relaxed-top-k (LOSSY control)"``)."""
        argmax = self.proposes == "argmax"
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
#: Every menu of rules: (label, name) pairs, in :data:`RULES`' order.
RULE_CHOICES: tuple[tuple[str, str], ...] = tuple((rule.label, name) for name, rule in RULES.items())


def check_rule(rule, tree: bool = False) -> Rule:
    """The :class:`Rule` named ``rule``, checked against the draft's shape.

    Args:
        rule: a rule name of :data:`RULES` (any type: it comes from a user).
        tree: True when the drafts form a tree (B > 1), False for a chain.

    Returns:
        The :class:`Rule`.

    Raises:
        RuleError: one sentence, for an unknown rule or a chain-only rule asked to verify a tree.
    """
    found = RULES.get(rule) if isinstance(rule, str) else None
    if found is None:
        raise RuleError(f"the verification rule must be one of {', '.join(RULE_NAMES)}, got {rule!r}")
    if tree and not found.trees:
        chains = ", ".join(r.name for r in RULES.values() if not r.trees)
        trees = ", ".join(r.name for r in RULES.values() if r.trees)
        raise RuleError(f"the {chains} rule verifies a chain of drafts only (Sun et al. 2024 define it for one "
                        f"block): draft chains (B = 1) or pick one of {trees} for trees")
    return found
