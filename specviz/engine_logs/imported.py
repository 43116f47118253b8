"""The shared data type of an engine's imported numbers: :class:`ImportedRun` and its :class:`Figure`.

An engine (vLLM, SGLang, llama.cpp, mlx-lm) reports a handful of counters, never the draws u,
p_target or p_draft behind them. An :class:`ImportedRun` holds what one file (or one streamed
completion) told, already in specviz's units, and each :class:`Figure` says which engine field a
number came from and what was converted on the way, so the page can show both. Fields a format
cannot fill are None and ``notes`` says why in a sentence. Plain data, no torch, no gradio.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ENGINES", "TOKEN_KINDS", "Figure", "ImportedRun"]

#: Engines an :class:`ImportedRun` can come from.
ENGINES = ("vllm", "sglang", "llamacpp", "mlx")
#: What an imported token's provenance can be: an accepted draft, the target's own token, or not told.
TOKEN_KINDS = ("draft", "target", "unknown")


@dataclass(frozen=True)
class Figure:
    """One number as the engine reported it and as specviz shows it.

    ``name`` is specviz's term (e.g. "acceptance rate α (÷ tested)"), ``value`` the number in
    specviz's units, ``engine_field`` the field it was read from (e.g.
    "vllm:spec_decode_num_accepted_tokens"), ``conversion`` one sentence saying what was converted
    ("" when the engine's number is used as it is).
    """

    name: str
    value: float
    engine_field: str
    conversion: str


@dataclass(frozen=True)
class ImportedRun:
    """What one engine file told about a speculative run, in specviz's units.

    ``accepted_per_pass`` counts accepted drafts per verify pass, the bonus token excluded and
    clipped at the stop token; ``drafted_per_pass`` the drafts proposed in that pass;
    ``accepted_by_position[i]`` the passes whose draft at position i (0-based) was accepted (full
    acceptance: it implies positions 0..i-1 were accepted too). ``cumulative`` is True when the
    counters cover a server's lifetime rather than one run. ``tokens`` and ``token_kinds`` (one of
    :data:`TOKEN_KINDS` each) are filled when the format carries the output's text. ``notes`` are
    sentences on what the format cannot tell.

    Optional fields (added after the first shape; default None): ``accepted_histogram[j]`` counts
    the passes that kept exactly j drafts, j = 0..K, bonus excluded (formats that give the histogram
    but not the order of the passes); ``tested_by_position[i]`` the passes whose accept test reached
    position i (0-based), the denominator of conditional acceptance, where the format tells it.
    """

    engine: str
    source: str
    k: int | None
    accepted_per_pass: tuple[int, ...] | None
    drafted_per_pass: tuple[int, ...] | None
    accepted_by_position: tuple[int, ...] | None
    passes: int | None
    cumulative: bool
    tokens: tuple[str, ...] | None
    token_kinds: tuple[str, ...] | None
    figures: tuple[Figure, ...]
    notes: tuple[str, ...]
    accepted_histogram: tuple[int, ...] | None = None
    tested_by_position: tuple[int, ...] | None = None
