"""Timing plain decoding several times: the :class:`~specviz.figures.speedup.PlainBaseline` a speedup divides by.

One plain run is one draw from a noisy clock. On a shared machine the same greedy run showed
speedups from 1.03× to 3.89× in one sitting, because its single plain baseline happened to be timed
during a slow moment (192 ms/token against 53–69 ms/token later). :func:`measure_baseline` times
plain decoding ``samples`` times and returns a baseline that keeps every sample, so the speedup is
the median's and carries the samples' range (:func:`specviz.figures.speedup.speedup_with_spread`).

Nothing here imports torch: a sample is any object shaped like :class:`~specviz.core.engine.Generation`
(iterable by rounds, with ``rounds``, ``prefill_ms`` and each round's ``elapsed_s``).
"""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator

from specviz.figures.speedup import PlainBaseline

__all__ = ["MIN_SHORT_TOKENS", "STALE_AFTER_S", "BaselineStore", "measure_baseline", "short_sample_tokens"]

#: The fewest tokens a later (shorter) sample covers: enough steps that one held-up step does not
#: decide its per-token time.
#: Plain runs timed for a speedup's baseline: one full and two short ones, so one slow moment
#: moves the median little and shows in the range.
DEFAULT_SAMPLES = 3
MIN_SHORT_TOKENS = 32


def short_sample_tokens(full_tokens: int) -> int:
    """Tokens the second and later samples cover: a quarter of the first sample's, at least
    :data:`MIN_SHORT_TOKENS`, at most the first sample's."""
    return min(full_tokens, max(MIN_SHORT_TOKENS, full_tokens // 4))


def _ms_per_token_upto(run, tokens: int) -> tuple[float, int]:
    """(decoding ms per token, tokens) over the first rounds of ``run`` covering ``tokens`` tokens
    (prefill excluded; ``Round.elapsed_s`` is generation time when the round ended)."""
    covered = 0
    for r in run.rounds:
        covered += len(r.emitted)
        if covered >= tokens:
            return (r.elapsed_s * 1e3 - run.prefill_ms) / covered, covered
    last = run.rounds[-1].elapsed_s if run.rounds else 0.0
    return (last * 1e3 - run.prefill_ms) / max(covered, 1), covered


def measure_baseline(build_plain_run: Callable[[], object], samples: int = DEFAULT_SAMPLES, progress_every: int = 8,
                     should_end: Callable[[], bool] | None = None) -> Generator[str, None, PlainBaseline | None]:
    """Time plain decoding ``samples`` times; yield progress lines, return the baseline.

    The first sample runs to the end (its length limit or end-of-text): it says how many tokens
    plain decoding covers and times every length the run will reach. Later samples stop after
    :func:`short_sample_tokens` tokens: a full-length repeat would double or triple the wait
    before every run for little gain, while a few dozen steps already show whether the machine's
    speed has changed. A short sample runs at shorter contexts than the full one, so its time per
    token is scaled by how the first sample's whole run compares with its own first as many
    tokens (the same prefix, so only the machine's speed differs between the two).

    Use as ``baseline = yield from measure_baseline(...)``, or drive it and read
    ``StopIteration.value``.

    Args:
        build_plain_run: makes a fresh plain :class:`~specviz.core.engine.Generation` of the target on
            the prompt and settings of the run to compare (each sample is a new run: a
            Generation runs once).
        samples: plain runs to time (>= 1).
        progress_every: yield a progress line every this many rounds.
        should_end: checked after every round (a GPU job's deadline or Stop,
            :meth:`specviz.ui.serve.gpu.JobContext.should_end`); once true the sample in progress stops
            and no baseline is returned (a cut sample times a shorter run than the one compared).

    Yields:
        One-line progress messages ("Timing plain decoding (sample 2 of 3): 20/32 tokens…").

    Returns:
        The :class:`~specviz.figures.speedup.PlainBaseline` (one sample per plain run), or None when no
        plain step was timed (a one-token run) or ``should_end`` ended the timing.

    Raises:
        ValueError: if ``samples`` < 1; and whatever the runs raise (e.g.
            :class:`~specviz.core.engine.ContextLengthError`).
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    measured = []
    for index in range(samples):
        first = measured[0][0] if measured else None
        if index and first is None:
            break  # the full sample timed nothing: there is nothing to scale a short one to
        run = build_plain_run()
        limit = short_sample_tokens(len(first.tokens)) if first is not None else None
        label = f"Timing plain decoding for the speedup baseline (sample {index + 1} of {samples})"
        # the tokens the samples after this one will time: short ones, of the first sample's length
        later = (samples - index - 1) * short_sample_tokens(len(first.tokens) if first is not None
                                                            else run.max_new_tokens)
        if not (yield from _run_sample(run, limit, label, progress_every, should_end, later)):
            return None
        if not run.rounds:
            continue
        ms_per_token, tokens = _ms_per_token_upto(run, limit or len(run.tokens))
        if first is not None:
            first_prefix_ms, _ = _ms_per_token_upto(first, tokens)
            if first_prefix_ms > 0:
                ms_per_token *= measured[0][1] / first_prefix_ms
        measured.append((run, ms_per_token, tokens))
    if not measured:
        return None
    return _baseline(measured)


def _run_sample(run, limit: int | None, label: str, progress_every: int,
                should_end: Callable[[], bool] | None = None, later_tokens: int = 0) -> Generator[str, None, bool]:
    """Run ``run`` to its end, or until it has ``limit`` tokens; yield a progress line now and then,
    with the time the timing has left once this sample's own pace says it (its tokens left and
    the ``later_tokens`` the samples after it will time, at its tokens/s so far).
    Returns False when ``should_end`` stopped it first."""
    rounds = iter(run)
    try:
        for i, _ in enumerate(rounds):
            if should_end is not None and should_end():
                return False
            if i % progress_every == 0:
                goal = limit or run.max_new_tokens
                rate = run.tokens_per_s
                left = ((goal - len(run.tokens)) + later_tokens) / rate if rate > 0 and i else None
                estimate = f", about {left:.0f} s of timing left" if left is not None else ""
                yield f"{label}: {len(run.tokens)}/{goal} tokens{estimate}…"
            if limit is not None and len(run.tokens) >= limit:
                break
        return True
    finally:
        close = getattr(rounds, "close", None)
        if close is not None:
            close()  # a stopped sample releases its generator (and its cache) now


def _baseline(measured: list) -> PlainBaseline | None:
    """The baseline of the timed samples: the median plain step over them, the first one's prefill
    and every sample's per-token time (each scaled to the first sample's length)."""
    first = measured[0][0]
    full_tokens = sum(len(r.emitted) for r in first.rounds)
    steps = [b.step_ms for b in (PlainBaseline.from_rounds(run.rounds, 1.0) for run, _, _ in measured) if b]
    kept = [(ms, tokens) for _, ms, tokens in measured if ms > 0]
    if not steps or not kept:
        return None
    per_token = tuple(ms for ms, _ in kept)
    rate = 1e3 / (statistics.median(per_token) + first.prefill_ms / max(full_tokens, 1))
    return PlainBaseline(statistics.median(steps), rate, per_token, tuple(t for _, t in kept), first.prefill_ms)


#: A stored baseline older than this (s) is stale: a machine's load changes over minutes (plain
#: steps of one model have varied five-fold within one sitting), so an older one is timed again.
STALE_AFTER_S = 600.0
#: Most baselines a store keeps (the least recently measured go first).
STORE_SIZE = 256


class BaselineStore:
    """Plain baselines measured on this machine, shared by every visitor of a server, by settings.

    A baseline is timing, not text: it holds times per token and per step, nothing a visitor
    typed. Its key (:func:`specviz.run.runner.baseline_key`: model, device, dtype, the prompt's token
    ids, sampling, length, seed, cache) does depend on the prompt, so the store keeps only a
    SHA-256 digest of the key: what one visitor wrote never sits in a structure another visitor's
    run reads, and a second visitor with the same settings reuses the timing without paying for a
    fresh one. Thread-safe (the server runs callbacks on several threads).

    The staleness rule: a baseline is reused for :data:`STALE_AFTER_S` after it was measured, and
    not after a run contradicted it (:meth:`drop`; :func:`specviz.figures.speedup.baseline_still_valid`).

    Args:
        stale_after_s: the age (s) past which :meth:`get` no longer returns a baseline.
        size: most entries kept.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, stale_after_s: float = STALE_AFTER_S, size: int = STORE_SIZE, clock=None) -> None:
        self.stale_after_s, self.size = stale_after_s, size
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[PlainBaseline, float]] = OrderedDict()

    @staticmethod
    def _digest(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    def get(self, key: str) -> tuple[PlainBaseline, float] | None:
        """(baseline, its age in s) for ``key`` when one is stored and not stale, else None."""
        digest = self._digest(key)
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            age = self._clock() - entry[1]
            if age > self.stale_after_s:
                del self._entries[digest]
                return None
            return entry[0], age

    def put(self, key: str, baseline: PlainBaseline) -> None:
        """Store ``baseline`` for ``key``, measured now."""
        digest = self._digest(key)
        with self._lock:
            self._entries.pop(digest, None)
            self._entries[digest] = (baseline, self._clock())
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def drop(self, baseline: PlainBaseline) -> bool:
        """Forget every entry holding ``baseline`` (a run contradicted it); whether one was held."""
        with self._lock:
            gone = [d for d, (b, _) in self._entries.items() if b == baseline]
            for d in gone:
                del self._entries[d]
        return bool(gone)

    def clear(self) -> None:
        """Forget every baseline."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
