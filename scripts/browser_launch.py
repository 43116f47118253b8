"""What every browser-driving script and test shares: Debian's Chromium, the arguments it is
launched with (headless, no outbound traffic of its own), and a free loopback port for an app.

Scripts import it as ``scripts.browser_launch`` (they run as ``python -m scripts.NAME`` from the
repository root); so do the tests, which pytest also runs from the root. Playwright only drives
this system browser: never ``playwright install``.
"""

from __future__ import annotations

import random
import shutil
import socket

#: Debian's chromium (``apt-get install chromium``), wherever PATH finds it.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Chromium's launch arguments (/work/shared/README.md, "UI facts"): headless, no sandbox or GPU,
#: and none of its own network traffic (QUIC, first-run pages, background updates, sync).
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


#: Where :func:`free_port` looks: below Linux's ephemeral range (32768–60999 by default), from
#: which the OS hands out both ``bind(0)`` ports and the local ports of outgoing connections. A
#: port taken from that range could be given to a browser's or a client's connection in the tens
#: of seconds before an app, still importing, binds it (seen twice under load: the app refused its
#: first connection).
PORT_RANGE = range(20_000, 32_000)


def free_port() -> int:
    """A TCP port on 127.0.0.1, outside the ephemeral range (:data:`PORT_RANGE`, tried in a
    random order), that was free a moment ago; another process may still take it before the
    caller binds it, but no outgoing connection will.

    Raises:
        OSError: if no port of the range could be bound.
    """
    for port in random.sample(PORT_RANGE, 64):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {PORT_RANGE.start}–{PORT_RANGE.stop - 1} on 127.0.0.1")
