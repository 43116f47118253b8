"""Every colour the page uses, once: the token kinds (and their colour-blind-safe set), the charts'
roles, the race lanes and the few greys of the stylesheet.

Python figures read the constants here; the stylesheet (:mod:`.styles`) reads only the CSS
variables :func:`css_variables` writes from them, so the "Colour-blind-safe colours" switch
(the ``sv-cb`` class on the page's root) recolours every token-kind colour in the HTML at once:
the token stream, the legend, the inspector and Watch a pass's chips. Plotly figures keep the
default set (they are drawn on the server, before any switch).

No other file of the page writes a colour (``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

from specviz.core.records import ACCEPTED, BONUS, PLAIN, RESAMPLED

__all__ = ["COLOUR_BLIND_TOKEN_COLOURS", "CURRENT", "MARKER", "MARKER_EDGE", "MEAN", "NOTE_TEXT", "PREDICTED_FILL",
           "RACE", "RACE_HIGHLIGHT", "RANGE_FILL", "REJECTED", "SLOW_FILL", "SPEEDUP_SCALE", "STYLE_COLOURS",
           "THEORY", "TOKEN_COLOURS", "css_variables"]

#: Kind of a drafted token that the verify step rejected (not an emitted kind).
REJECTED = "rejected"

#: The token kinds' colours (the emitted kinds of :mod:`specviz.figures.trace` and a rejected draft).
TOKEN_COLOURS: dict[str, str] = {
    ACCEPTED: "#2e9e5b",
    RESAMPLED: "#e8833a",
    REJECTED: "#d64545",
    BONUS: "#3b6fd8",
    PLAIN: "#8c8c8c",
}

#: The same kinds in Okabe & Ito's (2008) colours, safe for colour-blind readers.
COLOUR_BLIND_TOKEN_COLOURS: dict[str, str] = {
    ACCEPTED: "#0072b2",
    RESAMPLED: "#e69f00",
    REJECTED: "#d55e00",
    BONUS: "#cc79a7",
    PLAIN: "#8c8c8c",
}

THEORY = "#7b52ab"  # closed-form predictions (always dashed or hollow)
MEAN = "#222222"  # measured running means, the break-even line
SLOW_FILL = "rgba(214, 69, 69, 0.10)"  # where speculative is slower than plain
RANGE_FILL = "rgba(59, 111, 216, 0.18)"  # a speedup's range over the baseline's samples
PREDICTED_FILL = "rgba(232, 131, 58, 0.45)"  # p_draft bars behind the measured histograms
NOTE_TEXT = "#666666"  # a figure's "waiting…" or "nothing to show" note
CURRENT = "#111111"  # the beat or token being shown now
MARKER = "#000000"  # "your setting" on the playground's map, the race's finish lines
MARKER_EDGE = "#ffffff"  # the ring around markers and bars that overlap
#: The playground's speedup map: slowdowns red, break-even white, speedups green.
SPEEDUP_SCALE = ("#b2182b", "#f7f7f7", "#1b7837")

#: The race lanes' segments by kind (Okabe–Ito, like the colour-blind set).
RACE: dict[str, str] = {"prefill": "#cccccc", "draft": "#56b4e9", "wasted": "#d55e00", "verify": "#0072b2",
                        "other": "#999999", "plain": "#e69f00"}
RACE_HIGHLIGHT = "#ffd54a"  # a stretch of passes picked in the race (the token panel's --sv-highlight)

#: The stylesheet's other colours, as CSS variables ``--sv-<name>``.
STYLE_COLOURS: dict[str, str] = {
    "muted": "#777",  # special tokens, a chip's probability
    "faint": "#999",  # untested tree nodes
    "rule": "#9a9a9a",  # the dotted line between rounds and down a tree
    "note": "#9a4d00",  # health notes under the summary
    "progress": NOTE_TEXT,  # Watch a pass's progress line
    "context": "#888",  # Watch a pass's context text
    "current": CURRENT,  # the outline of the beat being shown
    "highlight": RACE_HIGHLIGHT + "44",  # a stretch of passes picked in the race, see through
    "highlight-edge": "#c9a100",
    "shadow": "#0004",  # the tour panel's shadow
}


def css_variables() -> str:
    """The palette as CSS custom properties: ``--sv-<kind>`` for every token kind (switched to
    :data:`COLOUR_BLIND_TOKEN_COLOURS` under ``:root.sv-cb``) and ``--sv-<name>`` for
    :data:`STYLE_COLOURS`."""
    def block(selector: str, colours: dict[str, str]) -> str:
        return selector + " { " + " ".join(f"--sv-{name}: {value};" for name, value in colours.items()) + " }"

    return "\n".join([block(":root", {**TOKEN_COLOURS, **STYLE_COLOURS}),
                      block(":root.sv-cb", COLOUR_BLIND_TOKEN_COLOURS)]) + "\n"
