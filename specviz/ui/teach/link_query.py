"""Classroom links: a page address whose query says what to open (a tab, the Playground at some
α, K, c and v, a lesson, or one verify pass of a bundled trace), parsed here and built here.

Pure string work (no gradio): :func:`parse` turns the query parameters into a :class:`Link`,
keeping what is valid and one short note per value it ignored (a link never fails to open the
page), and the ``*_link`` functions write the queries the page's "Copy link" buttons give out. A note
names the parameter and what it takes, never the value sent (a link is anyone's text, and the
note is on the page of whoever opens it).

Parameters (see README, "Classroom links"):

* ``tab=ID``: select that tab (``run``, ``playground``, ``experiments``, ``side_by_side``,
  ``lessons``, ``maths``, ``watch``);
* ``alpha=A&k=K&c=C&v=V``: the Playground's per-token α, lookahead K, cost ratio c and verify
  cost v (any subset; the others keep their defaults); implies ``tab=playground``;
* ``lesson=SLUG``: apply that lesson (it selects the Run tab);
* ``trace=NAME&pass=N&beat=B``: open the Watch tab on verify pass N (1-based) of bundled trace
  NAME at beat B (1-based, as the stage counts beats); ``pass`` and ``beat`` default to 1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

__all__ = ["PLAYGROUND_RANGES", "TABS", "Link", "lesson_link", "parse", "playground_link", "slug", "tab_link",
           "watch_link"]

#: The tabs a link can select, by their ids on the page.
TABS = ("run", "playground", "experiments", "side_by_side", "engines", "lessons", "maths", "watch")

#: The Playground's sliders: name → (label, low, high, whole number?). Values outside are ignored.
PLAYGROUND_RANGES = {
    "alpha": ("per-token α", 0.0, 1.0, False),
    "k": ("lookahead K", 1, 16, True),
    "c": ("cost ratio c", 0.0, 1.5, False),
    "v": ("verify cost v", 0.5, 6.0, False),  # real runs on a busy CPU measured v up to 4.4
}

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


@dataclass(frozen=True)
class Link:
    """What a classroom link asks for; every field None when the link did not ask (or asked badly).

    Attributes:
        tab: the tab id to select (from ``tab``, or implied by the Playground's values, a lesson
            (``run``) or a trace (``watch``)).
        playground: the valid Playground values given, by name (``alpha``, ``k``, ``c``, ``v``).
        lesson: the lesson slug to apply.
        trace: (trace name, pass N ≥ 1, beat B ≥ 1) for the Watch tab (both 1-based, as the stage counts them).
        notes: one short sentence per parameter that was ignored, and why.
    """

    tab: str | None = None
    playground: dict = field(default_factory=dict)
    lesson: str | None = None
    trace: tuple[str, int, int] | None = None
    notes: tuple[str, ...] = ()


def slug(name: str) -> str:
    """A URL-safe slug of a title: lower case, runs of anything but letters and digits as ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _number(name: str, text: str, notes: list[str]) -> float | int | None:
    label, lo, hi, whole = PLAYGROUND_RANGES[name]
    try:
        value = float(text)
    except (TypeError, ValueError):
        notes.append(f"{name} is not a number: {label} left as it was.")
        return None
    if not math.isfinite(value) or not lo <= value <= hi or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        notes.append(f"{name} is not {kind} in [{lo}, {hi}]: {label} left as it was.")
        return None
    return int(value) if whole else value


def _whole(name: str, text: str | None, default: int, lo: int, notes: list[str]) -> int | None:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < lo:
        notes.append(f"{name} is not a whole number ≥ {lo}: the trace link was ignored.")
        return None
    return value


def _trace(params: Mapping[str, str], notes: list[str]) -> tuple[str, int, int] | None:
    name = params.get("trace")
    if name is None:
        return None
    if not _NAME.match(name):
        notes.append("trace is not a trace name (letters, digits, '_', '-', '.'): ignored.")
        return None
    pass_ = _whole("pass", params.get("pass"), 1, 1, notes)
    beat = _whole("beat", params.get("beat"), 1, 1, notes)
    return None if pass_ is None or beat is None else (name, pass_, beat)


def parse(params: Mapping[str, str], lessons: Iterable[str] = (), watch: bool = True) -> Link:
    """The link in query parameters ``params`` (name → value, as ``request.query_params``).

    ``lessons``: the lesson slugs that exist; ``watch``: whether the page has the Watch tab (a
    ``trace`` or ``tab=watch`` without it is ignored with a note). Unknown parameters are ignored
    silently (a shared link may carry a tracker's); known ones with bad values get a note each,
    naming the parameter, not its value. Never raises.
    """
    notes: list[str] = []
    tab = params.get("tab")
    if tab is not None and (tab not in TABS or (tab == "watch" and not watch)):
        notes.append(f"tab is not a tab here (one of {', '.join(t for t in TABS if watch or t != 'watch')}).")
        tab = None
    values = {name: params[name] for name in PLAYGROUND_RANGES if name in params}
    playground = {name: v for name, text in values.items() if (v := _number(name, text, notes)) is not None}
    lesson = params.get("lesson")
    if lesson is not None and lesson not in set(lessons):
        notes.append(f"lesson is not a lesson here (one of {', '.join(lessons)}).")
        lesson = None
    trace = _trace(params, notes)
    if trace is not None and not watch:
        notes.append("This page has no “Watch a pass” tab: the trace link was ignored.")
        trace = None
    implied = "watch" if trace else "run" if lesson else "playground" if playground else None
    return Link(tab=tab or implied, playground=playground, lesson=lesson, trace=trace, notes=tuple(notes))


def _query(pairs: dict) -> str:
    return "?" + urlencode(pairs)


def _short(x: float) -> str:
    """A number as short as it can be written without losing its value (0.6, not 0.6000)."""
    return format(x, ".6g")


def playground_link(alpha: float, k: int, c: float, v: float) -> str:
    """The query that opens the Playground at (α, K, c, v), e.g. ``?tab=playground&alpha=0.6&k=5&c=0.2&v=1``."""
    return _query({"tab": "playground", "alpha": _short(alpha), "k": int(k), "c": _short(c), "v": _short(v)})


def lesson_link(lesson_slug: str) -> str:
    """The query that applies lesson ``lesson_slug``, e.g. ``?lesson=early_exit``."""
    return _query({"lesson": lesson_slug})


def tab_link(tab: str) -> str:
    """The query that selects tab ``tab``.

    Raises:
        ValueError: if ``tab`` is not one of :data:`TABS`."""
    if tab not in TABS:
        raise ValueError(f"no tab {tab!r}; one of {TABS}")
    return _query({"tab": tab})


def watch_link(trace: str, pass_: int, beat: int = 1) -> str:
    """The query that opens the Watch tab on verify pass ``pass_`` of ``trace`` at ``beat`` (both 1-based)."""
    return _query({"trace": trace, "pass": int(pass_), "beat": int(beat)})
