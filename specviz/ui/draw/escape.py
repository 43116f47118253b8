"""The page's one rule for text that comes from outside the code: :func:`as_text`.

URL parameters, a loaded trace's fields, file and model names, token texts and the error
messages that quote any of them reach the page through components that read Markdown *and*
HTML (``gr.Markdown``: marked with GitHub's extensions, then DOMPurify, then KaTeX on ``$$…$$``),
HTML only (``gr.HTML``, the error and warning pop-ups) or Plotly's small HTML subset (labels,
ticks, hovers, annotations). Every such string goes through :func:`as_text` once, where it is put
into the page's Markdown or HTML, and nowhere else; components that show plain text (a
checkbox's label, a textbox, a dropdown) get the string itself.
"""

from __future__ import annotations

__all__ = ["as_text"]

#: HTML's own characters, by the entities ``html.escape`` writes (quotes for attribute values).
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
#: Characters that are Markdown wherever they stand: backslash escapes, code spans, emphasis and
#: strikethrough, table cells, LaTeX's ``$``, and the ``@`` of an e-mail autolink (GFM 6.9).
_MARKDOWN = "\\`*_~|$@"
#: What opens a block when it starts a line, after at most three spaces (headings, quotes, lists,
#: setext and thematic breaks, ordered lists): escaped as a string's first character other than
#: a space, since a string's own line breaks are escaped and so it starts a line only where it
#: starts. Four spaces or more open indented code: then the first space is escaped.
_LINE_START = set("#>-+=0123456789")


def _reference(ch: str) -> str:
    code = ord(ch)
    return f"&#{0xFFFD if 0xD800 <= code <= 0xDFFF else code};"  # a lone surrogate cannot be sent


def _opens_markup(text: str, i: int) -> bool:
    """Whether ``text[i]`` starts markup only with what follows or precedes it: a link or an
    image (``](``, ``][``, a reference definition's ``]:``; a ``]`` last, before the page's own
    text), a URL autolink (``://``, ``www.``: GFM 6.9), or gradio's LaTeX placeholder and
    Plotly's template fields (``%%``, ``%{``)."""
    ch, after = text[i], text[i + 1 : i + 3]
    if ch == "]":
        return not after or after[0] in "([:"
    if ch == ":":
        return after == "//"
    if ch == ".":
        return text[max(i - 3, 0) : i].lower() == "www"
    if ch == "%":
        return after[:1] in ("{", "%")
    return False


def as_text(value: object) -> str:
    """``value`` (its ``str``) as text on any of the page's Markdown, HTML and Plotly surfaces:
    the page shows exactly its characters, and nothing in it becomes an element, a link, a style
    or a formula.

    The rule: ``& < > "`` become HTML's entities (as :func:`html.escape` writes them, so the
    result also fits in a double-quoted attribute); every character that makes Markdown on its
    own (``\\ ` * _ ~ | $ @``), a control character (line breaks included, so the string never
    starts a line of its own), a first character that would open a block at the start of a line
    (``# > - + =`` or a digit after at most three spaces; the first of four spaces), and the characters that make a link, an autolink or a
    template field with their neighbours (``](``, ``][``, ``]:``, ``://``, ``www.``, ``%{``,
    ``%%``) become numeric character references, which every one of those readers turns back into
    the character as text (CommonMark 0.31, 6.2: "entity and numeric character references …
    are not used for Markdown structure"; HTML 13.2.5.72; Plotly's ``convertEntities``). Letters,
    digits, spaces and the rest of the punctuation are left as they are, so a message stays
    readable through the API. A lone surrogate (which no page can carry) shows as U+FFFD.

    Escape where a string is put into the page's Markup, once: the result is markup, not text,
    so it must not be escaped again, and text passed to a plain-text component must not be
    escaped at all."""
    text = str(value)
    indent = len(text) - len(text.lstrip(" "))
    first = 0 if indent >= 4 else indent if text[indent : indent + 1] in _LINE_START else -1
    out = []
    for i, ch in enumerate(text):
        if ch in _HTML:
            out.append(_HTML[ch])
        elif (ch in _MARKDOWN or ord(ch) < 32 or ord(ch) == 127 or 0xD800 <= ord(ch) <= 0xDFFF or i == first
              or _opens_markup(text, i)):
            out.append(_reference(ch))
        else:
            out.append(ch)
    return "".join(out)
