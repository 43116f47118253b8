"""The small helpers several drafters share: earlier matches of the context's end, and the cap on
the branch behind one. Prompt lookup (:mod:`specviz.drafters.lookup`) and suffix lookup
(:mod:`specviz.drafters.suffix`) both use them; the interface every drafter implements is
:class:`specviz.core.drafter.Drafter`.
"""

from __future__ import annotations

__all__ = ["branch_depth", "context_matches", "match_length"]


def match_length(seq: list[int], end: int, suffix: list[int]) -> int:
    """How many tokens of ``suffix`` (from its end) equal ``seq`` just before ``end``."""
    n = 0
    while n < len(suffix) and n < end and seq[end - 1 - n] == suffix[-1 - n]:
        n += 1
    return n


def context_matches(committed: list[int], max_match: int) -> list[tuple[int, int]]:
    """``(match length, end)`` of every earlier place in ``committed`` where its last tokens (at
    most ``max_match``) occur, most recent first: the match ends just before index ``end``, and
    ``committed[end:]`` is what followed it. The context's own end is not a match."""
    suffix = committed[-max_match:]
    return [(match_length(committed, end, suffix), end) for end in range(len(committed) - 1, 0, -1)
            if committed[end - 1] == suffix[-1]]


def branch_depth(depth_factor: float, match_length: int, k: int) -> int:
    """SuffixDecoding's cap on a branch behind a match: ``depth_factor × match length`` tokens
    (at least 1, at most ``k``)."""
    return min(k, max(1, int(depth_factor * match_length)))
