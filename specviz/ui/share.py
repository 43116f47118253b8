"""The "Copy link" buttons of classroom links (:mod:`specviz.ui.teach.link_query` writes the queries): the link
goes to the clipboard where the browser allows it, and always into a textbox beside the button,
so it can be copied by hand where clipboard access is denied.

A link is built in the browser from the address the visitor's browser used (``draw/js/copy.js``:
``window.location``), never from the address the server printed, so a class that opened the page
at a LAN address, a gradio share link or the Space gets links that open there. Beside each button a
sentence (:func:`serving_sentence`, filled when the page loads by :func:`wire_serving_notes`) says
when the link can open on this computer only, and how to serve a class (README, "Serve your class")."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable

import gradio as gr

from specviz.ui.draw.escape import as_text
from specviz.ui.draw.scripts import script

#: Turns the query a callback wrote into the textbox into the page's full address and copies it to
#: the clipboard where the browser allows (``draw/js/copy.js``).
COPY_JS = script("copy")
#: The class of the sentence beside each "Copy link" (:func:`wire_serving_notes` finds them by it).
NOTE_CLASS = "sv-serve-note"

#: The server listens on loopback only (gradio's default, ``python app.py``).
LOOPBACK_ONLY = ("**Only this computer can open these links**: the server listens on {host} only. To serve a "
                 "class, restart it with `GRADIO_SERVER_NAME=0.0.0.0 python app.py` and open the page at this "
                 "computer's network address{lan}, or with `GRADIO_SHARE=True python app.py` for a public "
                 "gradio.live link, or use the Space (README, \"Serve your class\").")
#: The server listens on the network, but this page was opened at a loopback address.
PAGE_ON_LOOPBACK = ("**This page's address ({page}) is this computer's own**, so a link copied here opens on "
                    "this computer only: open the page at its network address{lan} and copy the link there.")
#: A gradio share link exists, but this page was opened at a loopback address.
PAGE_ON_LOOPBACK_SHARED = ("**This page's address ({page}) is this computer's own**, so a link copied here "
                           "opens on this computer only: open the public address {share} and copy the link there.")


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address, optionally ``[v6]`` or with ``:port``) names this
    computer only: ``localhost``, a ``*.localhost`` name, 127.0.0.0/8 or ::1. None and "" are not."""
    host = (host or "").strip().lower()
    if host.startswith("["):  # [::1]:7860
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:  # 127.0.0.1:7860, localhost:7860
        host = host.split(":", 1)[0]
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def lan_address() -> str | None:
    """This computer's address on its local network as the routing table would use it (a UDP
    socket's ``connect`` sends nothing; it only picks the outgoing interface), or None where
    there is none (no network, a loopback-only machine)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere, nothing is sent
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if is_loopback(address) or address.startswith("0.") else address


#: A host name, an address or ``host:port`` as it may appear in Markdown: nothing in it makes markup.
_PLAIN_HOST = re.compile(r"[A-Za-z0-9.:\[\]-]{1,255}")


def _host(text: str | None) -> str:
    """``text`` (a host from the request, the server's name) as Markdown code when it is a plain
    host name or address, else escaped as text (:func:`~specviz.ui.draw.escape.as_text`)."""
    text = str(text or "")
    return f"`{text}`" if _PLAIN_HOST.fullmatch(text) else as_text(text)


def serving_sentence(server_name: str | None, page_host: str | None, share_url: str | None = None,
                     on_space: bool = False, lan: str | None = None, port: int | None = None) -> str:
    """The sentence beside "Copy link" for a server listening on ``server_name`` (gradio's
    ``server_name``; None: not launched, gradio's default 127.0.0.1) and a page opened at
    ``page_host`` (the Host the browser sent, e.g. ``127.0.0.1:7860``), or "" when a copied link
    opens for a class as it is (a Space, a share link, a network address).

    Args:
        share_url: gradio's public share link, if the server made one.
        on_space: the app runs on a Hugging Face Space (its address is the Space's).
        lan: this computer's network address (:func:`lan_address`), named as an example.
        port: the server's port, for that example.

    Returns: Markdown whose outside strings (the hosts, the share link) are shown as text."""
    if on_space:
        return ""
    lan_hint = f" (here probably {_host(f'{lan}:{int(port)}')})" if lan and port else ""
    page = _host(page_host)
    if server_name is None or is_loopback(server_name):
        return LOOPBACK_ONLY.format(host=_host(server_name or "127.0.0.1"), lan=lan_hint)
    if not is_loopback(page_host):
        return ""
    if share_url:
        return PAGE_ON_LOOPBACK_SHARED.format(page=page, share=as_text(share_url))
    return PAGE_ON_LOOPBACK.format(page=page, lan=lan_hint)


def serving_note(elem_id: str) -> gr.Markdown:
    """The sentence on serving a class (hidden unless :func:`serving_sentence` has one), filled as
    the page loads (:func:`wire_serving_notes`). A tab with many "Copy link" buttons shows one."""
    return gr.Markdown("", visible=False, elem_id=elem_id, elem_classes=[NOTE_CLASS])


def copy_link(label: str, elem_id: str, query: Callable, inputs: list, size: str = "sm",
              note: bool = True) -> gr.Textbox:
    """A "Copy link" button, the textbox that shows the link, and under them the sentence on
    serving a class (:func:`serving_note`; ``note=False`` where the tab shows one for all its
    buttons); ``query(*inputs)`` writes the link's query (a :mod:`specviz.ui.teach.link_query`
    builder). Returns the textbox."""
    with gr.Row(equal_height=True):
        button = gr.Button(label, size=size, elem_id=elem_id, scale=0, min_width=120)
        box = gr.Textbox(show_label=False, container=False, interactive=False, scale=3,
                         placeholder="the link appears here (and is copied to the clipboard)",
                         elem_id=f"{elem_id}-box")
    if note:
        serving_note(f"{elem_id}-serve")
    button.click(query, inputs, box, api_name=False, concurrency_id="playground", concurrency_limit=None,
                 show_progress="hidden").then(None, box, box, js=COPY_JS, api_name=False)
    return box


def wire_serving_notes(demo: gr.Blocks) -> int:
    """When the page loads, fill every "Copy link"'s sentence (:data:`NOTE_CLASS`) for the way
    this page was reached: the server's address is read from ``demo`` as launched, the page's
    from the request's Host (a proxy's ``X-Forwarded-Host`` first). Returns how many notes."""
    notes = [block for block in demo.blocks.values() if NOTE_CLASS in (getattr(block, "elem_classes", None) or [])]
    if not notes:
        return 0

    def fill(request: gr.Request):
        headers = dict(getattr(request, "headers", None) or {}) if request is not None else {}
        page_host = headers.get("x-forwarded-host") or headers.get("host")
        server_name = getattr(demo, "server_name", None)
        text = serving_sentence(server_name, page_host, getattr(demo, "share_url", None),
                                on_space=bool(os.environ.get("SPACE_ID")),
                                lan=lan_address() if server_name is None or is_loopback(server_name)
                                or is_loopback(page_host) else None,
                                port=getattr(demo, "server_port", None))
        # One update each: gradio consumes an update as it applies it, so a shared one reached only the first.
        updates = [gr.update(value=text, visible=bool(text)) for _ in notes]
        return updates if len(updates) > 1 else updates[0]

    demo.load(fill, None, notes, api_name=False, show_progress="hidden", concurrency_id="playground",
              concurrency_limit=None)
    return len(notes)
