"""What a GPU job's records carry: each output only as far as it changed since the job's previous
record.

On a ZeroGPU Space every record a job yields is pickled across the worker's pipe
(:func:`specviz.ui.serve.gpu.run_job`). The Run tab's outputs hold the whole run state (every round, each
drafted token with its p_draft and p_target rows) and the whole token panel, so a run that sent
them whole on every update moved bytes growing with the square of its rounds (a 256-token run: 80
records, 9.7 MiB). Here the worker's :class:`DeltaEncoder` turns each yielded outputs tuple into a
:class:`Packed` record of what changed, position by position, and the main process's
:class:`DeltaDecoder` rebuilds the very outputs the work yielded:

* a string equal to the one sent last at its position travels as :data:`SAME`; one that extends
  it (the append-only token panel, :class:`specviz.ui.tabs.run_stream.TokenPanel`) as
  :class:`Appended`, its new part only;
* a dataclass instance sent before at its position (the run's :class:`~specviz.ui.serve.state.RunState`,
  one object mutated round after round) travels as a :class:`FieldsDelta`: the new items of its
  append-only lists (:data:`APPEND_ONLY`: a run's ``rounds`` and their ``html``) and the other
  fields whose pickled bytes changed; its first sending is a copy with lists of its own;
* a Plotly figure yielded again, the same object (a finished run's charts are re-sent unchanged
  in each of its last updates, :func:`specviz.ui.tabs.run_stream.final_updates`), travels as
  :data:`SAME`: a figure is built for one view and never changed once yielded;
* anything else travels as it is.

The decoder keeps, per position, the value it last produced, so a dataclass rebuilt in the main
process is one object mutated record after record, as the worker's is. Outside a Space the job
runs in the server's process and nothing is pickled; the same encoding runs there, so every test
of a page's stream exercises it.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass

#: The list fields that only ever grow, by the dataclass's qualified name: items once appended are
#: never replaced nor changed, so a record carries only the new ones (checked: the items already
#: sent must still be the same objects, else the whole list is sent again).
APPEND_ONLY = {"specviz.ui.serve.state.RunState": ("rounds", "html")}


class _Same:
    def __repr__(self) -> str:
        return "SAME"

    def __reduce__(self):
        return (_same, ())


def _same() -> _Same:
    return SAME


#: An output equal to the one the job sent last at its position.
SAME = _Same()


@dataclass(frozen=True)
class Appended:
    """A string output: the one sent last at its position followed by ``suffix``."""

    suffix: str


@dataclass(frozen=True)
class FieldsDelta:
    """A dataclass output sent before at its position: ``tails`` the new items of its append-only
    lists (by field name), ``fields`` the other fields whose value changed (by field name)."""

    tails: dict
    fields: dict


@dataclass(frozen=True)
class Packed:
    """A record's outputs, encoded: ``items`` one per output position; ``shape`` ``"tuple"`` or
    ``"list"`` (the outputs' own type), or ``"single"`` for a work that yields one value."""

    items: tuple
    shape: str


def _qualname(value) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _is_figure(value) -> bool:
    return type(value).__module__.startswith("plotly.") and hasattr(value, "to_plotly_json")


def _is_instance(value) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


class _Sent:
    """What the encoder sent last at one position: the value, and for a dataclass the append-only
    lists' items sent and the other fields' pickled bytes."""

    def __init__(self, value, items: dict, pickled: dict) -> None:
        self.value, self.items, self.pickled = value, items, pickled


class DeltaEncoder:
    """The worker's side: :meth:`encode` each outputs a job yields, in order (one encoder per job)."""

    def __init__(self) -> None:
        self.sent: dict[int, _Sent] = {}

    def encode(self, outputs) -> Packed:
        """``outputs`` (a tuple, a list or one value) as a :class:`Packed` of what changed since the
        last call, position by position (see the module's docstring)."""
        if type(outputs) in (tuple, list):
            items, shape = list(outputs), type(outputs).__name__
        else:
            items, shape = [outputs], "single"
        return Packed(tuple(self._item(i, value) for i, value in enumerate(items)), shape)

    def _item(self, position: int, value):
        last = self.sent.get(position)
        if isinstance(value, str):
            self.sent[position] = _Sent(value, {}, {})
            if last is not None and isinstance(last.value, str) and last.value:
                if value == last.value:
                    return SAME
                if value.startswith(last.value):
                    return Appended(value[len(last.value):])
            return value
        if _is_figure(value) and last is not None and last.value is value:
            return SAME
        if _is_instance(value):
            return self._dataclass(position, value, last)
        self.sent[position] = _Sent(value, {}, {})
        return value

    def _dataclass(self, position: int, value, last: _Sent | None):
        growing = APPEND_ONLY.get(_qualname(value), ())
        items = {name: list(getattr(value, name)) for name in growing}
        pickled = {f.name: pickle.dumps(getattr(value, f.name), pickle.HIGHEST_PROTOCOL)
                   for f in dataclasses.fields(value) if f.name not in growing}
        self.sent[position] = _Sent(value, items, pickled)
        if last is None or last.value is not value:
            first = copy.copy(value)  # lists of its own: the decoder extends them (no pickling in-process)
            for name, listed in items.items():
                setattr(first, name, list(listed))
            return first
        tails, fields = {}, {}
        for name, now in items.items():
            before = last.items[name]
            if len(now) >= len(before) and all(a is b for a, b in zip(now, before)):
                if len(now) > len(before):
                    tails[name] = now[len(before):]
            else:
                fields[name] = list(now)
        for name, data in pickled.items():
            if data != last.pickled.get(name):
                fields[name] = getattr(value, name)
        return FieldsDelta(tails, fields)


class DeltaDecoder:
    """The main process's side: :meth:`decode` each :class:`Packed` of one job, in order."""

    def __init__(self) -> None:
        self.values: dict[int, object] = {}

    def decode(self, packed: Packed):
        """The outputs the work yielded, rebuilt from ``packed`` and the values decoded before; a
        value that is not a :class:`Packed` (outputs sent whole, as a stand-in for the GPU entry
        point may send them) is returned as it is.

        Raises:
            ValueError: a delta arrived for a position with nothing (or the wrong kind) before it.
        """
        if not isinstance(packed, Packed):
            return packed
        items = [self._item(i, item) for i, item in enumerate(packed.items)]
        if packed.shape == "single":
            return items[0]
        return tuple(items) if packed.shape == "tuple" else items

    def _item(self, position: int, item):
        last = self.values.get(position)
        if item is SAME or isinstance(item, (Appended, FieldsDelta)):
            if position not in self.values:
                raise ValueError(f"a delta for output {position} before any value")
        if item is SAME:
            return last
        if isinstance(item, Appended):
            if not isinstance(last, str):
                raise ValueError(f"an appended string for output {position}, which holds {type(last).__name__}")
            value = last + item.suffix
        elif isinstance(item, FieldsDelta):
            if not _is_instance(last):
                raise ValueError(f"a fields delta for output {position}, which holds {type(last).__name__}")
            for name, tail in item.tails.items():
                getattr(last, name).extend(tail)
            for name, field_value in item.fields.items():
                setattr(last, name, field_value)
            value = last
        else:
            value = item
        self.values[position] = value
        return value
