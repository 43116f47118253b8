"""What the closed forms say about an imported run: specviz's existing definitions applied to the
engine's α, K and conditional acceptance, at a cost ratio c and verify cost v the user states.

Nothing is re-derived here: tokens per pass and speedup are :func:`specviz.figures.theory.expected_tokens_per_pass`
and :func:`specviz.figures.theory.expected_speedup` (Leviathan et al. 2023), the K an engine would pick is
:func:`specviz.diagnose.diagnostics.engine_k` (vLLM's Adaptive K goodput model).
"""

from __future__ import annotations

from dataclasses import asdict

from specviz.figures import theory
from specviz.diagnose.diagnostics import engine_k
from specviz.engine_logs.imported import ImportedRun
from specviz.engine_logs.normalise import ALPHA, conditional_by_position

__all__ = ["closed_form", "run_to_dict"]


def _alpha(run: ImportedRun) -> float | None:
    return next((f.value for f in run.figures if f.name == ALPHA), None)


def closed_form(run: ImportedRun, c: float | None = None, v: float | None = None) -> dict:
    """The closed-form figures of an imported run.

    Args:
        run: the :class:`ImportedRun`.
        c: draft step ÷ target step (the user's measured or stated cost ratio), or None.
        v: verify pass ÷ plain target step, or None (with c given, Leviathan's v = 1 is not assumed).

    Returns:
        ``{"alpha", "k", "expected_tokens_per_pass", "theoretical_speedup", "engine_k",
        "engine_k_goodput", "c", "v"}``; a figure is None where its inputs are missing.

    Raises:
        ValueError: from :mod:`specviz.figures.theory` for c < 0 or v ≤ 0.
    """
    alpha, k = _alpha(run), run.k
    out = {"alpha": alpha, "k": k, "c": c, "v": v, "expected_tokens_per_pass": None, "theoretical_speedup": None,
           "engine_k": None, "engine_k_goodput": None}
    if alpha is not None and k:
        out["expected_tokens_per_pass"] = theory.expected_tokens_per_pass(alpha, k)
        if c is not None and v is not None:
            out["theoretical_speedup"] = theory.expected_speedup(alpha, k, c, v)
    if run.accepted_by_position is not None and run.tested_by_position is not None and c is not None and v is not None:
        picked = engine_k(conditional_by_position(run.accepted_by_position, run.tested_by_position), c, v)
        if picked is not None:
            out["engine_k"], out["engine_k_goodput"] = picked.k, picked.goodput
    return out


def run_to_dict(run: ImportedRun) -> dict:
    """The run as plain JSON-ready data (tuples as lists, figures as objects)."""
    data = asdict(run)
    for key, value in data.items():
        if isinstance(value, tuple):
            data[key] = list(value)
    return data
