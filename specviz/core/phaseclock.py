"""The one clock of a run: every reading waits for the devices first.

CUDA (and MPS) kernels launch asynchronously: a ``time.perf_counter()`` right after a forward
pass measures when the pass was *launched*, and its work lands in whichever later phase happens to
wait for the device first (PyTorch, "CUDA semantics: asynchronous execution"). So every phase
boundary of a run (the prefill's start and end; each round's draft, verify and other phases; the
consumer's pauses) is read through :meth:`PhaseClock.mark`, which synchronises every device the run
uses and then reads the clock. On a CPU the synchronisation is a no-op and costs nothing; on a GPU
it is one ``torch.cuda.synchronize`` per device per boundary, four per round, each on an idle or
nearly idle device (the round's own host reads, such as ``.tolist()``, already wait).

:mod:`specviz.core.engine` reads time only through this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from time import perf_counter

import torch

__all__ = ["PhaseClock", "synchronize"]


def synchronize(device: torch.device) -> None:
    """Wait until ``device`` has finished the work queued on it: ``torch.cuda.synchronize`` on
    CUDA, ``torch.mps.synchronize`` on MPS, nothing on the CPU (its work is done when the call
    returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class PhaseClock:
    """A run's timer: synchronised readings, and the consumer's pauses kept out of its time.

    Args:
        devices: the devices the run computes on (the target's and the drafter's); each is
            synchronised at every reading, once however often it is listed.

    Attributes:
        marks: synchronised readings taken so far (each reading is one phase boundary).
    """

    def __init__(self, devices: Iterable[torch.device] = ()) -> None:
        self.devices = list(dict.fromkeys(torch.device(d) for d in devices))
        self.marks = 0
        self._start: float | None = None
        self._paused_s = 0.0
        self._pause_at: float | None = None

    @property
    def started(self) -> bool:
        return self._start is not None

    def mark(self) -> float:
        """Synchronise every device, then read the clock (seconds, ``time.perf_counter``)."""
        for device in self.devices:
            synchronize(device)
        self.marks += 1
        return perf_counter()

    def start(self) -> float:
        """Start the run's time (a synchronised reading); returns it."""
        self._start, self._paused_s = self.mark(), 0.0
        return self._start

    def elapsed_s(self, at: float | None = None) -> float:
        """Seconds since :meth:`start` at the reading ``at`` (default: a new synchronised reading),
        less the pauses already ended."""
        if self._start is None:
            raise RuntimeError("the clock was not started")
        return (self.mark() if at is None else at) - self._start - self._paused_s

    def pause(self) -> None:
        """The consumer holds the run from now (rendering, streaming): not the run's time."""
        self._pause_at = self.mark()

    def resume(self) -> None:
        """The consumer handed the run back: the pause since :meth:`pause` is left out."""
        if self._pause_at is not None:
            self._paused_s += self.mark() - self._pause_at
            self._pause_at = None
