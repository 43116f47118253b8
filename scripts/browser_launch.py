"""What every browser-driving script and test shares: Debian's Chromium, the arguments it is
launched with (headless, no outbound traffic of its own), and a free loopback port for an app.

Scripts import it as ``scripts.browser_launch`` (they run as ``python -m scripts.NAME`` from the
repository root); so do the tests, which pytest also runs from the root. Playwright only drives
this system browser: never ``playwright install``.
"""

from __future__ import annotations

import shutil
import socket

#: Debian's chromium (``apt-get install chromium``), wherever PATH finds it.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Chromium's launch arguments (/work/shared/README.md, "UI facts"): headless, no sandbox or GPU,
#: and none of its own network traffic (QUIC, first-run pages, background updates, sync).
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; another process may
    still take it before the caller binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
