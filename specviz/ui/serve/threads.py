"""How many CPU threads torch uses, and whether the machine is busy.

On a small CPU the models here are tiny (135–270 M parameters, one token at a time), so a decoding
step is short and torch's intra-op threads spend much of it meeting at barriers. When another
program holds a core (a browser drawing the page, a video call, another user's job), a thread
that must wait for that core stalls every step. Measured on 2 cores with one other
program using about one core, 2 threads (torch's default there) at 2.6–2.7 tokens/s with
speedups of 0.30–1.89× across three identical runs, and ``OMP_NUM_THREADS=1`` at 17–23 tokens/s
and 2.15–2.84×. ``python -m scripts.threads_busy`` measures both settings, with and without a
competing load, in one run (BENCHMARKS.md, "Threads on a busy CPU").

So the app's default leaves one core to everything else: :func:`default_threads` =
max(1, cores − 1), set by :func:`configure_threads` before any model loads (``app.py``; a
Space runs the same file). ``SPECVIZ_THREADS`` (or the CLI's ``--threads``) overrides it; an
``OMP_NUM_THREADS`` the user set is respected as given.
"""

from __future__ import annotations

import os

__all__ = ["BUSY_LOAD_MARGIN", "THREADS_ENV", "busy_note", "configure_threads", "cpu_cores", "default_threads",
           "machine_load"]

#: The environment variable that sets the app's torch threads (a positive integer).
THREADS_ENV = "SPECVIZ_THREADS"
#: The 1-minute load average may exceed the cores by this much before the machine counts as busy.
BUSY_LOAD_MARGIN = 0.5


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS says, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_threads(cores: int | None = None) -> int:
    """The app's torch threads: max(1, cores − 1), one core left to the browser and everything
    else (see the module docstring for the measurement behind it)."""
    cores = cpu_cores() if cores is None else cores
    return max(1, cores - 1)


def _positive_int(text) -> int | None:
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if value >= 1 else None


def configure_threads(threads: int | None = None, env=None) -> tuple[int, str]:
    """Set torch's intra-op threads and say where the number came from: ``(threads, source)``.

    The first that applies: ``threads`` (a CLI's ``--threads``), ``SPECVIZ_THREADS``, an
    ``OMP_NUM_THREADS`` the user set (torch reads it itself; kept as is), else
    :func:`default_threads`. Call it before any model loads.

    Raises:
        ValueError: ``threads`` given and below 1, or ``SPECVIZ_THREADS`` set to anything but a
            positive integer (a typo should not silently fall back).
    """
    import torch

    env = os.environ if env is None else env
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        source = "given"
    elif env.get(THREADS_ENV, "").strip():
        threads = _positive_int(env[THREADS_ENV])
        if threads is None:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {env[THREADS_ENV]!r}")
        source = THREADS_ENV
    elif _positive_int(env.get("OMP_NUM_THREADS")) is not None:
        threads, source = _positive_int(env["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    else:
        threads, source = default_threads(), "default: cores − 1"
    torch.set_num_threads(threads)
    return threads, source


def machine_load() -> float | None:
    """The 1-minute load average (runnable processes, this one's threads included), None where
    the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_note(load: float | None = None, cores: int | None = None) -> str | None:
    """A sentence for a run's notes when the machine is busy, else None.

    The rule: the 1-minute load average is above cores + :data:`BUSY_LOAD_MARGIN`: more threads
    want to run than there are cores, counting this server's own (at most cores − 1 by default,
    so the excess is other work). Then timings wander from pass to pass and run to run, and the
    page says so before anyone reads a speedup."""
    load = machine_load() if load is None else load
    cores = cpu_cores() if cores is None else cores
    if load is None or load <= cores + BUSY_LOAD_MARGIN:
        return None
    return (f"The machine is busy: its load average is {load:.1f} on {cores} core{'s' if cores != 1 else ''} "
            "(more work wants to run than there are cores), so this run's timings and its speedup vary more than "
            "usual. Run again when the machine is quiet for figures to compare.")
