"""The bounded model cache behind :func:`specviz.models.loading.load_model`: a least-recently-used cache
of loaded models keyed by (source, device, dtype), bounded by a count and, per device, bytes
(the layout and its rules: :mod:`specviz.models.loading`' docstring, "The model cache").

Split from :mod:`specviz.models.loading` (which keeps the process's one cache, ``_CACHE``, and the
functions around it: :func:`~specviz.models.loading.cache_info`, :func:`~specviz.models.loading.set_cache_limits`,
:func:`~specviz.models.loading.in_use`, …) so that each module stays readable; it knows a loaded model
only through its ``model``, ``name``, ``device`` and ``dtype`` attributes.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

from specviz.models import memory, selfdraft

# ``LoadedModel`` (specviz.models.loading) appears in annotations only, as a name: importing it would make
# the two modules import each other.

logger = logging.getLogger("specviz.models.loading")

CacheKey = tuple[str, str, torch.dtype]  # (source, device, dtype)

DEFAULT_MAX_MODELS = 4
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _parse_bytes(text: str) -> int:
    """``"8GiB"``, ``"8G"``, ``"512M"``, ``"1.5g"`` or ``"123"`` (binary units) -> a byte count."""
    match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?", text.strip().lower())
    if not match:
        raise ValueError(text)
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _limit_from_env(name: str, default: int | None, parse=int) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = 0
    if value < 1:
        logger.warning("ignoring %s=%r (not a positive number); using %s", name, raw,
                       "a budget from free memory" if default is None else default)
        return default
    return value


def module_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's tensors: parameters, buffers and packed (quantized) weights, each
    ``numel * element_size``, a tensor shared by several modules (tied embeddings) counted once."""
    values = list(module.state_dict(keep_vars=True).values()) + list(module.buffers())
    seen: set[tuple[str, int]] = set()
    total = 0
    for value in values:
        for tensor in value if isinstance(value, tuple) else (value,):
            if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
                continue
            where = (str(tensor.device), tensor.data_ptr())
            if where not in seen:
                seen.add(where)
                total += tensor.nelement() * tensor.element_size()
    return total


def _release_memory() -> None:
    """Free what dropped models leave: reference cycles, then the CUDA allocator's cached blocks."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@dataclass(eq=False)
class _Entry:
    loaded: LoadedModel  # noqa: F821 (specviz.models.loading; named only, see above)
    nbytes: int
    int8: weakref.ref | None = None  # the int8 copy last measured, and its bytes
    int8_bytes: int = 0
    pins: int = 0  # runs using it now (ModelCache.pin): never evicted while above 0

    def holds(self, held) -> bool:
        return self.loaded is held or self.loaded.model is held


class ModelCache:
    """A least-recently-used cache of :class:`LoadedModel` bounded by count and, per device, bytes.

    Keys are (source, device, dtype). Each device has its own byte budget (:meth:`budget`):
    ``max_bytes`` when one is set, else :func:`specviz.models.memory.memory_budget`, 70% of the device's
    free memory plus what the cache already holds there, read at each load (``psutil`` on the CPU,
    ``torch.cuda.mem_get_info`` on CUDA). Before a model is read, :meth:`make_room` evicts least
    recently used entries until the new one's estimated bytes fit beside the rest (so old and new
    are never in memory together past the budget); :meth:`put` then inserts it as the most
    recently used and re-applies the limits with its measured bytes. Never evicted: the newest
    entry (so one model larger than the budget still loads) and a pinned one (:meth:`pin`, or
    :func:`in_use`: the pair of a run in progress). :meth:`get` marks an entry as used. An
    entry's bytes are its model's :func:`module_bytes` plus those of its int8 copy
    (:func:`specviz.models.selfdraft.int8_copy`), if one was built; the copy is dropped with
    its target.

    Args:
        max_models: most models kept (default ``$SPECVIZ_MAX_MODELS``, else 4).
        max_bytes: most bytes kept on each device (default ``$SPECVIZ_MAX_MODEL_BYTES``, e.g.
            ``8GiB``, ``512M`` or a plain count; unset: sized from free memory as above).
        lock: the lock that guards the entries (default a fresh ``RLock``).
    """

    def __init__(self, max_models: int | None = None, max_bytes: int | None = None,
                 lock: threading.RLock | None = None) -> None:
        self._lock = lock if lock is not None else threading.RLock()
        self._entries: OrderedDict[CacheKey, _Entry] = OrderedDict()
        self.max_models = max_models or _limit_from_env("SPECVIZ_MAX_MODELS", DEFAULT_MAX_MODELS)
        self.max_bytes = max_bytes or _limit_from_env("SPECVIZ_MAX_MODEL_BYTES", None, _parse_bytes)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> LoadedModel | None:
        """The cached model for ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.loaded

    def peek(self, key: CacheKey) -> LoadedModel | None:
        """The cached model for ``key``, or None, without marking it used."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.loaded

    def put(self, key: CacheKey, loaded: LoadedModel, nbytes: int | None = None) -> None:
        """Insert ``loaded`` as the most recently used entry (``nbytes``: its size if already
        measured), then evict least recently used entries while over a limit."""
        with self._lock:
            self._entries[key] = _Entry(loaded, module_bytes(loaded.model) if nbytes is None else nbytes)
            self._entries.move_to_end(key)
            self.trim()

    def touch(self, loaded: LoadedModel) -> None:
        """Mark the entry holding ``loaded`` as the most recently used and re-apply the limits
        (after an int8 copy of it was built, say); nothing happens to models not in the cache."""
        with self._lock:
            for key, entry in self._entries.items():
                if entry.loaded is loaded:
                    self._entries.move_to_end(key)
                    self.trim()
                    return

    def pin(self, *held) -> None:
        """Keep the entries holding ``held`` (each a :class:`LoadedModel` or its module) from
        eviction until as many :meth:`unpin` calls; models not in the cache are ignored."""
        with self._lock:
            for entry in self._entries.values():
                entry.pins += sum(entry.holds(h) for h in held)

    def unpin(self, *held) -> None:
        """Undo one :meth:`pin` of each of ``held``."""
        with self._lock:
            for entry in self._entries.values():
                entry.pins = max(0, entry.pins - sum(entry.holds(h) for h in held))

    def set_limits(self, max_models: int | None = None, max_bytes: int | None = None,
                   from_memory: bool = False) -> None:
        """Change the limits (None keeps one; ``from_memory`` drops a set byte limit, so each
        device's budget comes from its free memory again) and evict what no longer fits."""
        for value in (max_models, max_bytes):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"cache limits must be positive integers, got {value!r}")
        with self._lock:
            self.max_models = max_models or self.max_models
            self.max_bytes = None if from_memory else max_bytes or self.max_bytes
            self.trim()

    def total_bytes(self) -> int:
        """Bytes of all entries, int8 copies included."""
        with self._lock:
            return sum(self._entry_bytes(entry) for entry in self._entries.values())

    def device_bytes(self, device: str | torch.device) -> int:
        """Bytes of the entries on ``device`` (``str(LoadedModel.device)``, e.g. ``"cpu"``)."""
        device = str(device)
        with self._lock:
            return sum(self._entry_bytes(e) for e in self._entries.values() if str(e.loaded.device) == device)

    def budget(self, device: str | torch.device) -> int:
        """The bytes entries on ``device`` may hold: ``max_bytes``, or when none is set
        :func:`specviz.models.memory.memory_budget` of the device's free memory and what is held there."""
        if self.max_bytes is not None:
            return self.max_bytes
        return memory.memory_budget(device, held=self.device_bytes(device))

    def make_room(self, device: str | torch.device, incoming: int, what: str) -> int:
        """Before a model of about ``incoming`` bytes is read onto ``device``: evict least recently
        used entries (pinned ones never) until one more model fits the count and ``incoming``
        fits that device's budget beside what stays; release their memory; one log line each.
        Returns how many were evicted."""
        device = str(device)
        with self._lock:
            budget = self.budget(device)  # once: evicting frees what it held, the sum stays
            evicted = []
            while len(self._entries) >= self.max_models and self._evict_one(None, keep_newest=False, out=evicted):
                pass
            while (self.device_bytes(device) + incoming > budget
                   and self._evict_one(device, keep_newest=False, out=evicted)):
                pass
            self._finish(evicted, f" to make room for {what} (about {incoming / 2**20:.1f} MiB)")
            return len(evicted)

    def trim(self) -> int:
        """Evict least recently used entries (never the newest, never a pinned one) until within
        both limits on every device; release their memory; log one line per eviction. Returns how
        many were evicted."""
        with self._lock:
            evicted = []
            while len(self._entries) > self.max_models and self._evict_one(None, keep_newest=True, out=evicted):
                pass
            for device in sorted({str(e.loaded.device) for e in self._entries.values()}):
                budget = self.budget(device)
                while self.device_bytes(device) > budget and self._evict_one(device, keep_newest=True, out=evicted):
                    pass
            self._finish(evicted, "")
            return len(evicted)

    def _evict_one(self, device: str | None, keep_newest: bool, out: list[str]) -> bool:
        """Evict the least recently used entry that may go (on ``device``, unless None); its line
        is appended to ``out``. False when none may go."""
        newest = next(reversed(self._entries), None) if keep_newest else None
        for key, entry in self._entries.items():
            if key != newest and entry.pins == 0 and device in (None, str(entry.loaded.device)):
                out.append(self._pop(key))
                return True
        return False

    def _finish(self, evicted: list[str], reason: str) -> None:
        if evicted:
            _release_memory()
        for line in evicted:
            logger.info("evicted %s%s; the cache now holds %d models, %.1f MiB (at most %d models)", line, reason,
                        len(self._entries), self.total_bytes() / 2**20, self.max_models)

    def clear(self) -> None:
        """Drop every entry and every int8 copy, and release their memory."""
        with self._lock:
            had = bool(self._entries)
            self._entries.clear()
            selfdraft.clear_int8()
            if had:
                _release_memory()

    def info(self) -> dict:
        """Plain data for logs and tests: ``entries`` (least recently used first; each with name,
        source, device, dtype, bytes including ``int8_bytes``, ``pins``), ``models``, ``bytes``
        (total), ``max_models``, ``max_bytes`` (None: sized from free memory) and ``budgets``
        (:meth:`budget` of each device an entry is on)."""
        with self._lock:
            entries = [
                {"name": e.loaded.name, "source": e.loaded.source, "device": str(e.loaded.device),
                 "dtype": str(e.loaded.dtype).removeprefix("torch."), "bytes": self._entry_bytes(e),
                 "int8_bytes": self._entry_bytes(e) - e.nbytes, "pins": e.pins}
                for e in self._entries.values()
            ]
            return {"entries": entries, "models": len(entries), "bytes": sum(e["bytes"] for e in entries),
                    "max_models": self.max_models, "max_bytes": self.max_bytes,
                    "budgets": {d: self.budget(d) for d in sorted({e["device"] for e in entries})}}

    def _entry_bytes(self, entry: _Entry) -> int:
        draft = selfdraft.int8_copy(entry.loaded)
        if draft is None:
            return entry.nbytes
        if entry.int8 is None or entry.int8() is not draft:
            entry.int8, entry.int8_bytes = weakref.ref(draft), module_bytes(draft)
        return entry.nbytes + entry.int8_bytes

    def _pop(self, key: CacheKey) -> str:
        # Returns only a description: no reference to the evicted model may outlive this call,
        # or the garbage collection that follows could not free it.
        entry = self._entries.pop(key)
        loaded = entry.loaded
        line = (f"{loaded.name} ({loaded.device}, {str(loaded.dtype).removeprefix('torch.')}, "
                f"{self._entry_bytes(entry) / 2**20:.1f} MiB)")
        selfdraft.drop_int8(loaded)
        return line
