"""Engine units → specviz's units: one function per conversion, each the only place it is made.

The engines disagree on what their counters mean (vLLM #42508 and #39359, llama.cpp #14104,
mlx-vlm #2324). specviz's units, as :mod:`specviz.figures.analysis` and :mod:`specviz.diagnose.diagnostics` define them:

* **per-token α (÷ tested)** = accepted drafts ÷ drafts that faced the accept test. A pass stops
  testing at its first rejection, so a chain pass that drafted d and kept a tested min(a + 1, d)
  (:func:`tested_per_pass`). Engines report the **acceptance rate (÷ drafted)** = accepted ÷ drafted
  instead, which counts the untested drafts after a rejection as failures and so understates α.
* **accepted drafts per pass** exclude the target's own token (bonus or resample); **tokens per pass**
  = 1 + accepted drafts per pass includes it. vLLM's ``mean_acceptance_length`` and llama.cpp's
  "mean acceptance length" are tokens per pass; SGLang's ``spec_accept_length`` is completion tokens
  ÷ verify passes, which also counts the prompt pass's first token (:func:`tokens_per_pass`).
* **counts clipped at the stop token**: engines count the drafts a verify pass accepted, even those
  after a stop token inside the accepted block that never reached the output (mlx-vlm #2324; vLLM's
  scheduler counts before it truncates at a stop). :func:`clip_at_stop` and :func:`clip_total_at_stop`
  take them back out, given how many tokens the response really holds.
* **per run versus cumulative**: a Prometheus scrape or SGLang's ``avg_spec_accept_length`` covers a
  server's lifetime; two scrapes differenced (:func:`per_run`) give one run's counters.
* **full versus conditional acceptance by position**: full_i = passes that kept a draft at position i
  ÷ drafting passes (vLLM's ``num_accepted_tokens_per_pos[i] / num_drafts``, llama.cpp's "acceptance
  rate per position"); conditional_i = kept at i ÷ tested at i (:func:`conditional_by_position`).

Positions here are 0-based (position 0 is the first draft), as in the engines' counters.
"""

from __future__ import annotations

from specviz.engine_logs.imported import Figure

__all__ = [
    "ACCEPTANCE_RATE",
    "ACCEPTED_PER_PASS",
    "ALPHA",
    "CONDITIONAL_AT",
    "FULL_AT",
    "PASSES",
    "TOKENS_PER_PASS",
    "ZERO_ACCEPT",
    "acceptance_rate",
    "accepted_by_position",
    "alpha",
    "clip_at_stop",
    "clip_total_at_stop",
    "conditional_by_position",
    "full_by_position",
    "histogram",
    "per_run",
    "position_figures",
    "positions_from_histogram",
    "tested_by_position",
    "tested_from_histogram",
    "tested_per_pass",
    "tokens_per_pass",
]

#: specviz's names of the figures (the page and the CLI show these; each Figure says its engine field).
ALPHA = "per-token α (÷ tested)"
ACCEPTANCE_RATE = "acceptance rate (÷ drafted)"
ACCEPTED_PER_PASS = "accepted drafts per pass (bonus excluded)"
TOKENS_PER_PASS = "tokens per pass (bonus included)"
PASSES = "verify passes"
ZERO_ACCEPT = "zero-accept share"
FULL_AT = "full acceptance at position {i}"
CONDITIONAL_AT = "conditional acceptance at position {i}"


def tested_per_pass(accepted: int, drafted: int) -> int:
    """Drafts of one chain pass that faced the accept test: every kept one and the first rejected
    one, min(accepted + 1, drafted) (Leviathan et al. 2023: testing stops at the first rejection)."""
    return min(accepted + 1, drafted)


def alpha(accepted_per_pass, drafted_per_pass) -> tuple[float | None, int]:
    """(per-token α = accepted ÷ tested, tested) of chain passes; α None when nothing was tested."""
    tested = sum(tested_per_pass(a, d) for a, d in zip(accepted_per_pass, drafted_per_pass))
    return (sum(accepted_per_pass) / tested if tested else None), tested


def acceptance_rate(accepted: int, drafted: int) -> float | None:
    """Accepted ÷ drafted tokens (the engines' "acceptance rate"), None when nothing was drafted."""
    return accepted / drafted if drafted else None


def tokens_per_pass(completion_tokens: int, passes: int, first_token_from_prefill: bool = True) -> float | None:
    """Tokens per verify pass, bonus included, from a response's token count: SGLang's
    ``spec_accept_length`` divides all completion tokens by the passes, including the first token,
    which the prompt's pass sampled; specviz leaves that token out: (tokens − 1) ÷ passes."""
    if not passes:
        return None
    return (completion_tokens - (1 if first_token_from_prefill else 0)) / passes


def accepted_by_position(accepted_per_pass, width: int) -> tuple[int, ...]:
    """Passes whose draft at position i (0-based) was kept, i < width: a pass keeping a drafts kept
    positions 0..a−1 (acceptance stops at the first rejection, so it is a prefix)."""
    out = [0] * width
    for a in accepted_per_pass:
        for i in range(min(a, width)):
            out[i] += 1
    return tuple(out)


def tested_by_position(accepted_per_pass, drafted_per_pass, width: int) -> tuple[int, ...]:
    """Passes whose accept test reached position i: the pass drafted more than i and kept at least i."""
    out = [0] * width
    for a, d in zip(accepted_per_pass, drafted_per_pass):
        for i in range(min(a + 1, d, width)):
            out[i] += 1
    return tuple(out)


def histogram(accepted_per_pass, k: int) -> tuple[int, ...]:
    """Passes by accepted drafts, entry j = passes that kept exactly j, j = 0..max(K, most kept)."""
    out = [0] * (max([k, *accepted_per_pass]) + 1)
    for a in accepted_per_pass:
        out[a] += 1
    return tuple(out)


def positions_from_histogram(hist) -> tuple[int, ...]:
    """Full-acceptance counts by position from a histogram: kept at i = passes that kept more than i."""
    return tuple(sum(hist[i + 1:]) for i in range(len(hist) - 1))


def tested_from_histogram(hist, k: int) -> tuple[tuple[int, ...], int]:
    """(tested by position, tested in all) when every pass drafted K: a pass keeping j tested min(j + 1, K)."""
    by_position = tuple(sum(hist[j] for j in range(len(hist)) if j >= i) for i in range(k))
    return by_position, sum(hist[j] * tested_per_pass(j, k) for j in range(len(hist)))


def full_by_position(kept, passes: int) -> tuple[float | None, ...]:
    """full_i = kept_i ÷ drafting passes (vLLM's per-position rate, llama.cpp's rate per position)."""
    return tuple(n / passes if passes else None for n in kept)


def conditional_by_position(kept, tested) -> tuple[float | None, ...]:
    """conditional_i = kept_i ÷ tested_i: of the passes whose test reached i, the share that kept i."""
    return tuple(n / t if t else None for n, t in zip(kept, tested))


def clip_at_stop(accepted_per_pass, emitted: int, first_token_from_prefill: bool) -> tuple[tuple[int, ...], int]:
    """Per-pass accepted drafts with those past the response's end taken out.

    A pass that kept a drafts emits a + 1 tokens (its drafts and the target's token); a stop token
    inside the block ends the response there, but the engine still counted all a. Given the tokens
    the response holds (``emitted``, plus one from the prompt's pass when the engine samples the first
    token there), the excess is removed from the last passes: first the final pass's target token,
    then its drafts, and so on backwards.

    Returns:
        ``(accepted per pass, tokens removed)``; the counts are unchanged when nothing exceeds.
    """
    accepted = list(accepted_per_pass)
    excess = (1 if first_token_from_prefill else 0) + sum(a + 1 for a in accepted) - emitted
    removed = max(excess, 0)
    i = len(accepted) - 1
    while excess > 0 and i >= 0:
        excess -= 1  # the pass's own target token goes first
        cut = min(excess, accepted[i])
        accepted[i] -= cut
        excess -= cut
        i -= 1
    return tuple(accepted), removed


def clip_total_at_stop(accepted: int, passes: int, emitted: int, first_token_from_prefill: bool) -> int:
    """:func:`clip_at_stop` for totals: accepted drafts that reached the output, when the response
    holds ``emitted`` tokens from ``passes`` verify passes (mlx-vlm #2324: accepted drafts counted past
    the stop token, so ``predicted_n − draft_n_accepted`` understates the passes' target tokens)."""
    excess = (1 if first_token_from_prefill else 0) + accepted + passes - emitted
    return accepted - max(0, excess - 1) if excess > 0 else accepted


def per_run(before: dict, after: dict) -> dict:
    """One run's counters from two scrapes of cumulative counters (the same names): after − before.

    Raises:
        ValueError: when a counter went down (the server restarted between the scrapes) or is
            missing from ``after``.
    """
    out = {}
    for name, value in before.items():
        if name not in after:
            raise ValueError(f"{name} is in the first scrape but not in the second")
        if after[name] < value:
            raise ValueError(f"{name} fell from {value} to {after[name]} between the scrapes (a restart?)")
        out[name] = after[name] - value
    for name, value in after.items():
        out.setdefault(name, value)
    return out


def position_figures(kept, passes: int, tested, field: str, conversion: str) -> list[Figure]:
    """Full and conditional acceptance figures by position (1-based in the names, as specviz shows them)."""
    figures = []
    full = full_by_position(kept, passes)
    conditional = conditional_by_position(kept, tested) if tested is not None else (None,) * len(kept)
    for i, (f, c) in enumerate(zip(full, conditional)):
        if f is not None:
            figures.append(Figure(FULL_AT.format(i=i + 1), f, field, conversion))
        if c is not None:
            figures.append(Figure(CONDITIONAL_AT.format(i=i + 1), c, field,
                                  "Divided by the passes whose test reached this position, not by all passes."))
    return figures
