"""A run's random sources: one ``torch.Generator`` per device.

PyTorch refuses to sample a CUDA tensor with a CPU generator and the reverse, so a drafter on
another device than the target (an int8 CPU draft beside a CUDA target) needs a generator of its
own. Each device's generator is seeded with the run's seed, so a seeded run is reproducible;
the target device's is made exactly as a single generator was (``torch.Generator(device).
manual_seed(seed)``), so a run whose drafter shares the target's device draws what it drew before.
"""

from __future__ import annotations

import torch

__all__ = ["GeneratorPool"]


class GeneratorPool:
    """One seeded ``torch.Generator`` per device, each made on first use.

    Args:
        seed: the run's seed (every device's generator starts from it).
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    @staticmethod
    def key(device: str | torch.device) -> torch.device:
        """The pool's key of a device: ``"cuda"`` and ``"cuda:N"`` name the same device when N is
        the current one."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return device

    def make(self, device: torch.device) -> torch.Generator:
        """A new generator on ``device`` seeded with the run's seed."""
        return torch.Generator(device=device).manual_seed(self.seed)

    def get(self, device: str | torch.device) -> torch.Generator:
        """The generator of ``device`` (the same object every time).

        Raises:
            RuntimeError: from PyTorch, for a device this build cannot make a generator on.
        """
        key = self.key(device)
        if key not in self._generators:
            self._generators[key] = self.make(key)
        return self._generators[key]

    @property
    def devices(self) -> list[torch.device]:
        """The devices that have a generator so far, in the order they were made."""
        return list(self._generators)
