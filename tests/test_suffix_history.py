"""The suffix drafter's history of earlier outputs is per instance (one per visitor in the app):
a text one visitor generated is never drafted for another; histories are bounded and copyable."""

from __future__ import annotations

import copy

import pytest

from specviz.drafters import SUFFIX_HISTORY, SuffixDrafter, SuffixHistory
from specviz.drafters.registry import build_drafter
from specviz.core.sampling import SamplingConfig

SECRET = [901, 902, 903, 904, 905, 906, 907, 908]  # visitor A's output
GREEDY = SamplingConfig(temperature=0.0)


def _proposed(drafter, context: list[int]) -> list[int]:
    tree = drafter.propose(context, 6, GREEDY, None, branches=4, max_nodes=24)
    return list(tree.tokens)


def test_a_visitors_output_is_drafted_only_from_their_own_history(smollm2):
    mine, theirs = SuffixHistory(), SuffixHistory()
    a = build_drafter("suffix", smollm2, history=mine)
    b = build_drafter("suffix", smollm2, history=theirs)
    assert a.history is mine and b.history is theirs
    a.finish([1, 2], SECRET)  # visitor A's run ends: its output joins A's history only
    context = [5, 6] + SECRET[:3]  # visitor B types the start of A's text
    assert _proposed(a, context)[:5] == SECRET[3:]  # A's own history continues it
    assert not set(_proposed(b, context)) & set(SECRET[3:])  # B's never does
    assert len(theirs) == 0 and SECRET not in SUFFIX_HISTORY.to_list()
    assert build_drafter("suffix", smollm2).history is SUFFIX_HISTORY  # the CLI's and the bench's default


def test_the_history_is_bounded_oldest_dropped_first():
    history = SuffixHistory(max_tokens=10, max_sequences=3)
    for start in range(0, 50, 4):
        history.add(list(range(start, start + 4)))
    assert history.to_list() == [[44, 45, 46, 47], [48, 49, 50, 51]] and len(history) == 8
    history = SuffixHistory(max_tokens=100, max_sequences=3)
    for start in range(5):
        history.add([start, start + 1])
    assert history.to_list() == [[2, 3], [3, 4], [4, 5]]
    history.add(list(range(1000)))  # one output longer than the cap keeps its end
    assert history.to_list() == [list(range(900, 1000))] and len(history) == 100
    assert history.ends_after(950) == [(0, 51)] and history.ends_after(5) == []
    with pytest.raises(ValueError):
        SuffixHistory(max_tokens=0)


def test_a_history_round_trips_through_plain_lists_and_copies_independently():
    history = SuffixHistory(max_tokens=50, max_sequences=4)
    history.add([1, 2, 3])
    history.add([2, 3, 4])
    again = SuffixHistory.from_list(history.to_list(), 50, 4)
    assert again.to_list() == history.to_list() and again.ends_after(2) == history.ends_after(2)
    copied = copy.deepcopy(history)
    copied.add([7, 8, 9])
    assert history.to_list() == [[1, 2, 3], [2, 3, 4]] and copied.ends_after(7) == [(2, 1)]
    assert history.ends_after(7) == [] and (copied.max_tokens, copied.max_sequences) == (50, 4)
    drafter = SuffixDrafter(32, history=copied)
    assert drafter.history is copied
    for bad in ({"a": 1}, [[1, -2]], [[1.5]], [[True]], [3]):
        with pytest.raises(ValueError, match="token-id lists"):
            SuffixHistory.from_list(bad)
