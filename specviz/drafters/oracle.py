"""The oracle drafter: the target's own output for the same prompt and settings, replayed as the draft.

vLLM's replay oracle (PR #62258) measures what a perfect drafter would give on a machine: the
target's saved outputs are replayed as drafts, so every pass pays only the verify pass and a
drafter that costs nothing (c ≈ 0). Its tokens per pass and speedup are the ceiling the other
drafters are measured against (:mod:`specviz.diagnose.ceiling`).

How it is recorded. Before a run, :func:`specviz.run.runner.make_generation` (which sits above the
drafters and may run the engine) decodes the prompt plainly with the run's own target, sampling
settings, seed, token limit and end-of-text ids, untimed, and hands the ids to
:meth:`OracleDrafter.set_recording`. A drafter cannot run the engine itself (the drafters import
only ``sampling``, ``drafttree``, ``offline`` and ``errors``), hence the hook there.

What it proposes. At output position i it proposes the recording's tokens i … i + K − 1, as
point masses (a one-hot ``p_draft``), so the accept test is "accept x with probability
p_target(x)" and the output stays exactly the target's (Leviathan et al. 2023, point-mass drafts
as in prompt lookup). At T = 0 in float32 the recording *is* the speculative run's output (greedy
speculative decoding writes plain greedy's text), so every pass accepts all K and emits K + 1
tokens until the recording ends. At T > 0 a replayed token is one sample of the target, worth
p_target(x) when tested; after the first resample the run and the recording part ways, and the
replay continues position by position (as vLLM's does), now proposing another text's tokens.
Past the recording's end it proposes nothing (plain steps).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from specviz.core.drafttree import DraftTree

__all__ = ["OracleDrafter", "recording_key"]

#: Recordings kept per drafter: a run needs its warm-up's and its own; the bench one per prompt and setting (ids only).
MAX_RECORDINGS = 16


def recording_key(prompt_ids, sampling, max_new_tokens: int, seed: int, eos_token_ids, cache: str = "dynamic") -> tuple:
    """What a recording depends on: the prompt's ids, the sampling settings, the token limit, the
    seed, the end-of-text ids and the KV cache kind (a static cache's passes have their own shapes).
    The verification rule is not in it: the recording is plain decoding, which no rule touches."""
    return (tuple(int(t) for t in prompt_ids), repr(sampling), int(max_new_tokens), int(seed),
            tuple(sorted(int(t) for t in eos_token_ids)), str(cache))


class OracleDrafter:
    """Replays the target's own plain-decoding output for the same prompt and settings as the draft.

    ``replays_target = True`` asks :func:`specviz.run.runner.make_generation` for the recording
    (:meth:`needs_recording`, :meth:`set_recording`) before each run; :meth:`use` picks the one
    a run replays.

    Args:
        vocab_size: width of the ``p_draft`` rows (the run's shared vocabulary V).

    Raises (from :meth:`propose`):
        RuntimeError: if no recording was chosen with :meth:`use` (the run was not built by
            :func:`specviz.run.runner.make_generation`).
    """

    uses_model = False
    replays_target = True

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = int(vocab_size)
        self.name = "oracle (the target's own output, replayed)"
        self.device = torch.device("cpu")
        self._recordings: OrderedDict[tuple, list[int]] = OrderedDict()
        self._replay: list[int] | None = None
        self._prompt_len = 0

    # ----------------------------------------------------------------- recording
    def needs_recording(self, key: tuple) -> bool:
        """Whether the settings ``key`` (:func:`recording_key`) have no recording yet."""
        return key not in self._recordings

    def set_recording(self, key: tuple, output_ids: list[int]) -> None:
        """Keep ``output_ids``, the target's plain output under the settings ``key``."""
        self._recordings[key] = [int(t) for t in output_ids]
        self._recordings.move_to_end(key)
        while len(self._recordings) > MAX_RECORDINGS:
            self._recordings.popitem(last=False)

    def use(self, key: tuple) -> None:
        """Replay the recording of ``key`` in the next run.

        Raises:
            KeyError: if there is none (record it first with :meth:`set_recording`).
        """
        self._replay = self._recordings[key]
        self._recordings.move_to_end(key)

    @property
    def recording(self) -> list[int]:
        """The ids the current run replays (empty before :meth:`use`)."""
        return list(self._replay or [])

    # ----------------------------------------------------------------- the Drafter interface
    def prefill(self, context: list[int]) -> None:
        """The engine hands the prompt without its last token: output position 0 follows it."""
        self._prompt_len = len(context) + 1

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        """The recording's next ``k`` tokens at the current output position, as point masses (a
        chain whatever ``branches`` asks: there is one recording)."""
        if self._replay is None:
            raise RuntimeError("the oracle drafter has no recording: build the run with "
                               "specviz.run.runner.make_generation, which records the target's output first")
        position = len(committed) - self._prompt_len
        tokens = self._replay[position : position + max(0, k)] if position >= 0 else []
        return DraftTree.point_masses(tokens, list(range(-1, len(tokens) - 1)), self.vocab_size)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        """Nothing to roll back: the position follows the committed length."""

    def finish(self, prompt: list[int], output: list[int]) -> None:
        """Nothing to learn: the recording is fixed."""
