"""Read (and write) the speculative-decoding counters that serving engines report.

Gradio-free and torch-free. :func:`read_engine_file` turns one engine file (a response, a recorded
stream, a metrics scrape, a log) into an :class:`~specviz.engine_logs.imported.ImportedRun` in specviz's
units, each figure saying which engine field it came from and what was converted
(:mod:`specviz.engine_logs.normalise`); :func:`guess_engine` tells the engine from the text;
:mod:`specviz.engine_logs.writers` writes a saved specviz run in each engine's format. One module per
engine: :mod:`~specviz.engine_logs.vllm`, :mod:`~specviz.engine_logs.sglang`, :mod:`~specviz.engine_logs.llamacpp`,
:mod:`~specviz.engine_logs.mlx`. Bad, foreign or hostile input raises :class:`EngineFileError`.
"""

from __future__ import annotations

from specviz.engine_logs import llamacpp, mlx, sglang, vllm
from specviz.engine_logs.checks import check_text, fail
from specviz.engine_logs.file_error import EngineFileError
from specviz.engine_logs.imported import ENGINES, TOKEN_KINDS, Figure, ImportedRun

__all__ = ["ENGINES", "TOKEN_KINDS", "EngineFileError", "Figure", "ImportedRun", "guess_engine", "read_engine_file"]

#: Engine name → its module; the order is the order :func:`guess_engine` tries them in (mlx-vlm
#: writes llama.cpp's ``draft_n_accepted`` too, so mlx is tried before llama.cpp).
_MODULES = {"vllm": vllm, "sglang": sglang, "mlx": mlx, "llamacpp": llamacpp}


def guess_engine(text: str) -> str | None:
    """The engine that wrote ``text`` (one of :data:`ENGINES`), told by the field names only that
    engine writes; None when no engine's fields are there."""
    if not isinstance(text, str):
        return None
    for name, module in _MODULES.items():
        if module.looks_like(text):
            return name
    return None


def read_engine_file(text: str, name: str, engine: str | None = None, before: str | None = None) -> ImportedRun:
    """Read one engine file's text into an :class:`ImportedRun`.

    Args:
        text: the file's text (or bytes, decoded as UTF-8), at most
            :data:`specviz.engine_logs.checks.MAX_BYTES`.
        name: its file name or URL, kept as plain text for the view.
        engine: one of :data:`ENGINES`, or None to guess it (:func:`guess_engine`).
        before: for a vLLM or llama.cpp Prometheus scrape, an earlier scrape of the same server: the difference is
            one run's counters (else they are the server's lifetime, ``cumulative``).

    Raises:
        EngineFileError: (a ValueError) with one sentence naming the field, for a file that is too
            large, not text, of no known engine, or whose fields are missing, of the wrong type,
            negative, inconsistent (accepted above drafted) or hold markup where a name belongs.
    """
    text = check_text(text)
    if engine is None:
        engine = guess_engine(text)
        if engine is None:
            fail("file", "the file", "holds no field of vLLM, SGLang, llama.cpp or mlx-lm speculative metrics "
                 "(name the engine with --engine if it is one of them)")
    if engine not in _MODULES:
        fail("file", "the engine", f"{engine[:20]!r} is not one of {', '.join(ENGINES)}")
    if before is not None:
        if engine not in ("vllm", "llamacpp"):
            fail(engine, "the earlier scrape", "is only read for vLLM's and llama.cpp's Prometheus counters")
        return _held(_MODULES[engine].read(text, name, before=check_text(before)))
    return _held(_MODULES[engine].read(text, name))


def _held(run: ImportedRun) -> ImportedRun:
    """The run with a note where its counters cannot all hold at once (more accepted per pass than K
    drafts, or passes that kept more drafts than passes there were); a reader refuses what a single
    field shows is impossible, this catches what only their combination shows."""
    from dataclasses import replace

    figures = {f.name: f.value for f in run.figures}
    per_pass = figures.get("accepted drafts per pass (bonus excluded)")
    problems = []
    if run.k and per_pass is not None and per_pass > run.k + 1e-9:
        problems.append(f"{per_pass:.2f} drafts accepted per pass, with at most K = {run.k} drafted")
    kept = run.accepted_by_position or ()
    if run.passes and kept and max(kept) > run.passes:
        problems.append(f"a position kept {max(kept)} times in {run.passes} passes")
    if not problems:
        return run
    return replace(run, notes=(*run.notes, "These counters cannot all hold: " + "; ".join(problems)
                               + ". They may come from different requests or servers."))
