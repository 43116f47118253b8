"""Exports and uploads keep the server's disk and memory flat.

Starts the app in public mode (``python app.py`` in a subprocess, with its own temporary folders
so nothing else is counted), makes one short run through ``gradio_client``, then ``--n`` exports
of it and ``--n`` uploads of its exported trace (/load_trace), and prints, before and after each
phase, the disk used by gradio's file cache (``GRADIO_TEMP_DIR``) and specviz's export folders,
and the server process's resident memory (RSS).

    python -m scripts.export_disk            # --n 100

BENCHMARKS.md records its output ("Exports and uploads: disk and memory").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from gradio_client import Client, handle_file

from scripts.browser_launch import free_port

ROOT = Path(__file__).resolve().parents[1]


def run_args(**overrides) -> dict:
    """/run's parameters for a short greedy run of the offline SmolLM2 (overrides by name)."""
    values = dict(prompt="Fix the typos: Teh cat sat on teh mat.", target_id="smollm2-135m-instruct",
                  drafter_kind="ngram", draft_model="", early_exit_layers=4, k=4, temperature=0.0, top_k=0,
                  top_p=1.0, max_new_tokens=16, seed=0, chat=True, device="cpu", dtype="float32", branches=1,
                  tree_nodes=0)
    values.update(overrides)
    return values


def disk_bytes(*folders) -> int:
    """Bytes of the files under ``folders`` (missing folders count 0)."""
    total = 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.path.getsize(os.path.join(root, name))
    return total


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` (MB)."""
    return psutil.Process(pid).memory_info().rss / 2**20


@contextlib.contextmanager
def public_app(extra_env: dict | None = None, timeout_s: float = 300):
    """Start ``python app.py`` in public mode with private temp folders; yields
    ``(url, pid, gradio_cache, export_root)``; stops the server and removes the folders at the end."""
    tmp = Path(tempfile.mkdtemp(prefix="specviz-disk-"))
    (tmp / "gradio").mkdir()
    (tmp / "tmp").mkdir()
    port = free_port()
    env = {**os.environ, "SPECVIZ_PUBLIC": "1", "GRADIO_TEMP_DIR": str(tmp / "gradio"), "TMPDIR": str(tmp / "tmp"),
           "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", **(extra_env or {})}
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + timeout_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the app exited: {(tmp / 'server.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            if time.time() > deadline:
                raise RuntimeError("the app did not start in time")
            time.sleep(1)
        yield url, server.pid, tmp / "gradio", tmp / "tmp" / "specviz-exports"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _line(label: str, pid: int, folders) -> tuple[int, float]:
    disk, rss = disk_bytes(*folders), rss_mb(pid)
    print(f"{label:<28} disk {disk / 2**20:8.2f} MB   server RSS {rss:8.1f} MB", flush=True)
    return disk, rss


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100, help="exports, then uploads (default 100)")
    parser.add_argument("--every", type=int, default=25, help="print a line every this many calls")
    args = parser.parse_args(argv)
    with public_app() as (url, pid, cache, exports):
        downloads = Path(tempfile.mkdtemp(prefix="specviz-downloads-"))
        try:
            client = Client(url, verbose=False, download_files=str(downloads))
            client.predict(**run_args(), api_name="/run")
            files = client.predict(api_name="/export")
            trace = next(f for f in files if str(f).endswith(".json"))
            print(f"one export: {', '.join(f'{Path(f).name} {os.path.getsize(f) / 2**20:.2f} MB' for f in files)}")
            start = _line("after one run and export", pid, (cache, exports))
            for i in range(1, args.n + 1):
                client.predict(api_name="/export")
                if i % args.every == 0 or i == args.n:
                    _line(f"after {i} more exports", pid, (cache, exports))
            for i in range(1, args.n + 1):
                client.predict(handle_file(str(trace)), api_name="/load_trace")
                if i % args.every == 0 or i == args.n:
                    end = _line(f"after {i} uploads", pid, (cache, exports))
            print(f"growth: disk {(end[0] - start[0]) / 2**20:+.2f} MB, RSS {end[1] - start[1]:+.1f} MB")
        finally:
            shutil.rmtree(downloads, ignore_errors=True)


if __name__ == "__main__":
    main()
