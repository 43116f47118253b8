"""What a drafter learns across runs, kept out of a run that must not teach it.

Two drafters remember: suffix lookup its history of earlier outputs
(:class:`~specviz.drafters.suffix.SuffixHistory`) and Token Recycling its table of the target's top
next tokens (:class:`~specviz.drafters.recycle.RecycleTable`); in the app each visitor has their own.
A warm-up run and a sweep's rows must leave both as they found them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["stores_kept"]


@contextlib.contextmanager
def stores_kept(drafter) -> Iterator[None]:
    """Inside the block the drafter's stores (its ``history``, its ``table``, whichever it has)
    may change; on leaving, even by an error, they are put back as they were. A drafter with
    neither (or None) has nothing to keep."""
    stores = [store for store in (getattr(drafter, "history", None), getattr(drafter, "table", None))
              if store is not None]
    snapshots = [store.snapshot() for store in stores]
    try:
        yield
    finally:
        for store, snapshot in zip(stores, snapshots):
            store.restore(snapshot)
