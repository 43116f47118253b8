"""Experiments on real models: one setting varied, everything else held, one row per setting.

A sweep takes a base :class:`~specviz.run.request.RunRequest` and a list of values for one setting
(``temperature``, ``k`` or ``draft``). For each value it derives the request from the base one
(:meth:`specviz.run.request.RunRequest.varied`: that one setting checked as
:func:`specviz.run.request.validate_request` checks it, the one check the app and the CLI use), prepares it
(:func:`specviz.run.runner.prepare_run`: the pair from the model cache, the prompt under the one
chat-template policy, the end-of-text ids), warms up, runs the speculative
generation from the state a bench call starts from (:func:`specviz.run.bench.measurement_start`: no
earlier row's output in the suffix history, an empty Token Recycling table; the drafter's own
stores are put back afterwards) and a plain baseline of the same target, prompt and settings, and
reports the row:
the setting plus :meth:`specviz.figures.analysis.RunAnalysis.scalars` (per-token ``alpha`` = accepted ÷
tested, ``acceptance_rate`` = accepted ÷ proposed, ``tokens_per_pass``, measured ``speedup``,
``theoretical_speedup`` = (1 − α^(K+1)) / ((1 − α)(K·c + v)), and the rest).

:func:`sweep` is a generator of :class:`SweepStep` s, one after each round of each run, so a UI
can show progress and stop within one round (closing the generator stops the experiment; a
``max_run_s`` wall-time cap stops it too, keeping the finished rows). :func:`write_csv` writes
rows with the :mod:`csv` module.
"""

from __future__ import annotations

import csv
import math
import io
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from specviz.figures.analysis import analyse_generation
from specviz.drafters.stores import stores_kept
from specviz.run.request import DEFAULT_LIMITS, Limits, RequestError, RunRequest
from specviz.figures.speedup import speedup_doubts
from specviz.figures.trace import spreadsheet_safe

__all__ = ["CSV_FIELDS", "PARAMETERS", "TREND_WORDS", "AlphaTrend", "SweepStep", "alpha_trend", "row_speedups",
           "speedup_doubts", "sweep", "sweep_requests", "write_csv"]

#: The settings a sweep can vary, as the request names them.
PARAMETERS = ("temperature", "k", "draft")

#: Columns of the CSV (and the keys a row always has), setting first, then the figures.
CSV_FIELDS = ("temperature", "k", "draft", "branches", "tree_nodes", "drafter", "target", "max_new_tokens", "seed",
              "prompt_tokens", "alpha", "acceptance_rate", "tokens_per_pass", "predicted_tokens_per_pass", "speedup",
              "speedup_low", "speedup_high", "theoretical_speedup", "theoretical_speedup_actual_drafts", "cost_ratio_c",
              "verify_cost_v", "tokens_per_s", "plain_tokens_per_s", "plain_step_ms", "target_passes", "proposed", "tested",
              "accepted", "emitted", "finish_reason", "text")


@dataclass
class SweepStep:
    """Where a sweep stands, yielded after every round of every run.

    Attributes:
        index: the setting being run (0-based).
        total: how many settings there are.
        phase: ``"speculative"``, ``"plain"`` (the baseline), ``"done"`` (this setting finished)
            or ``"stopped"`` (the last step when the sweep's time cap ended it early).
        tokens: tokens emitted so far by the run in progress.
        max_new_tokens: that run's length limit.
        row: the finished row (``phase == "done"`` only), else None.
        run: the speculative :class:`~specviz.core.engine.Generation` of this setting (its rounds
            give the coloured tokens), or None before it starts.
        stop_ids: the target's end-of-text ids (what a view of the tokens marks as the end).
        note: why the sweep stopped (``phase == "stopped"``), or the baseline's progress line
            (``phase == "plain"``), else "".
    """

    index: int
    total: int
    phase: str
    tokens: int
    max_new_tokens: int
    row: dict | None = None
    run: object = None
    stop_ids: frozenset[int] = field(default_factory=frozenset)
    note: str = ""

    @property
    def message(self) -> str:
        """One line for a progress bar."""
        if self.phase == "stopped":
            return self.note
        if self.phase == "plain" and self.note:
            return f"setting {self.index + 1}/{self.total}: {self.note}"
        what = {"speculative": "speculative run", "plain": "plain baseline", "done": "done"}[self.phase]
        return f"setting {self.index + 1}/{self.total}: {what}, {self.tokens}/{self.max_new_tokens} tokens"


def sweep_requests(base: RunRequest, parameter: str, values: Sequence, limits: Limits = DEFAULT_LIMITS
                   ) -> list[RunRequest]:
    """One validated request per value of ``parameter``, the rest as in ``base``.

    Args:
        base: the held settings (already validated).
        parameter: ``"temperature"``, ``"k"`` or ``"draft"``.
        values: the values to try, 1..12 of them, as a user typed them (validated here).
        limits: bounds for the values (the app's public mode passes tighter ones).

    Raises:
        RequestError: for an unknown parameter, no values, more than 12, or a malformed value
            (the message names the setting, as :func:`specviz.run.request.validate_request` does).
    """
    if parameter not in PARAMETERS:
        raise RequestError(f"a sweep varies one of {', '.join(PARAMETERS)}, got {parameter!r}")
    values = list(values)
    if not values:
        raise RequestError(f"give at least one {parameter} value to sweep")
    if len(values) > 12:
        raise RequestError(f"a sweep takes at most 12 settings, got {len(values)}")
    return [base.varied(parameter, value, limits) for value in values]


def _row(prepared, spec, analysis) -> dict:
    """A sweep row: the setting, then every figure of the run's analysis (names as there)."""
    request, target = prepared.request, prepared.target
    return {
        "temperature": request.sampling.temperature,
        "k": request.k,
        "draft": request.draft,
        "branches": request.branches,
        "tree_nodes": request.tree_nodes,
        "drafter": getattr(prepared.drafter, "name", "plain decoding"),
        "target": target.name,
        "max_new_tokens": request.max_new_tokens,
        "seed": request.seed,
        "prompt_tokens": len(prepared.prompt_ids),
        **analysis.scalars(),
        "finish_reason": spec.finish_reason,
        "text": target.decode(spec.token_ids),
        "notes": prepared.notes + list(spec.notes),
    }


class _TimeUp(Exception):
    """The sweep's wall-time cap passed."""


def sweep(requests: Sequence[RunRequest], progress: Callable[[float, str], None] | None = None,
          prepare=None, max_run_s: float | None = None, should_end: Callable[[], bool] | None = None
          ) -> Iterator[SweepStep]:
    """Run each request speculatively and plainly; yield a :class:`SweepStep` after every round.

    For each request: prepare it (:func:`specviz.run.runner.prepare_run`: the model cache makes
    repeats free; a missing chat template gives plain text and a note, as everywhere), warm up
    once per pair, kind of sampling and tree shape (``once=True``), run the speculative generation
    with the request's K, B and N, then plain decoding of the same target with the same settings
    and seed as its baseline (skipped for ``draft = "none"``: it *is* the baseline, and its
    speedup is 1 by definition, left None).

    Args:
        requests: from :func:`sweep_requests`.
        progress: optional ``(fraction, message)`` callback for model loading.
        prepare: ``(request, progress) -> PreparedRun``, default :func:`specviz.run.runner.prepare_run`
            (which checks the prompt's tokens against the limits the requests were validated with).
        max_run_s: wall-time cap of the whole sweep (s), loading, warm-ups and baselines
            included; checked after every round. Past it the sweep ends with the rows it finished
            and a last step of phase ``"stopped"`` that says so. None: no cap.
        should_end: checked every round, the warm-ups' and the baselines' included (a GPU job's
            deadline or Stop, :meth:`specviz.ui.serve.gpu.JobContext.should_end`); once true the sweep
            ends as at ``max_run_s``, with the rows it finished.

    Yields:
        SweepStep: one per round; the step with ``phase == "done"`` carries the row.

    Raises:
        specviz.models.loading.ModelLoadError, IncompatiblePairError, ContextLengthError,
        NonFiniteLogitsError, RequestError, ValueError: from preparing and running, as the run
        command raises them.
    """
    from specviz.run.runner import prepare_run

    prepare = prepare or prepare_run
    deadline = None if max_run_s is None else time.perf_counter() + max_run_s
    finished = 0
    try:
        for index, request in enumerate(requests):
            prepared = prepare(request, progress)
            with prepared.in_use():
                yield from _setting(prepared, index, len(requests), deadline, should_end)
            finished += 1
    except _TimeUp:
        limit = f"the time limit of {max_run_s:g} s" if max_run_s is not None else "the end of its time"
        note = f"Stopped at {limit}: {finished} of {len(requests)} settings finished, the rest did not run."
        yield SweepStep(finished, len(requests), "stopped", 0, 0, note=note)


def _setting(prepared, index: int, total: int, deadline: float | None, should_end=None) -> Iterator[SweepStep]:
    """The steps of one setting: speculative run, plain baseline, then the row (``_TimeUp`` past
    ``deadline`` or once ``should_end()``)."""
    from specviz.run import bench
    from specviz.run.runner import baseline_steps

    def ended() -> bool:
        return (deadline is not None and time.perf_counter() > deadline) or (should_end is not None and should_end())

    def step(phase, tokens, run, row=None, note=""):
        if phase != "done" and ended():
            raise _TimeUp
        return SweepStep(index, total, phase, tokens, prepared.request.max_new_tokens, row=row, run=run,
                         stop_ids=prepared.stop_ids, note=note)

    prepared.warm_up(once=True, should_end=ended)
    step("speculative", 0, None)  # the warm-up and loading count against the cap
    with stores_kept(prepared.drafter):
        bench.measurement_start(drafter=prepared.drafter)  # a bench call's start: no earlier row's output
        spec = prepared.generation()
        for _ in spec:
            yield step("speculative", len(spec.tokens), spec)
    baseline = None
    if prepared.drafter is not None:
        plain = baseline_steps(prepared, should_end=ended)
        while True:
            try:
                line = next(plain)
            except StopIteration as done:
                baseline = done.value
                break
            yield step("plain", len(spec.tokens), spec, note=line)
        step("plain", len(spec.tokens), spec)  # a baseline cut short by the cap makes no row
    yield step("done", len(spec.tokens), spec, row=_row(prepared, spec, analyse_generation(spec, baseline)))


def row_speedups(rows: Sequence[dict]) -> list[str | None]:
    """Per row, its speedup as every front-end writes it: the figure with its range, or "not
    measurable now: …" (:func:`speedup_doubts`, :func:`specviz.figures.speedup.speedup_shown`)."""
    from specviz.figures.speedup import speedup_shown

    return [speedup_shown(r.get("speedup"), r.get("speedup_low"), r.get("speedup_high"), doubt)
            for r, doubt in zip(rows, speedup_doubts(rows))]


def _cell(value):
    """A CSV cell: floats to 6 significant digits (still numbers), None empty, text through
    :func:`specviz.figures.trace.spreadsheet_safe` (a prompt or a generated text can begin with ``=``)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else spreadsheet_safe(value)


def write_csv(rows: Iterable[dict], out: io.TextIOBase | None = None) -> str:
    """Rows as CSV (columns :data:`CSV_FIELDS`, then the per-kind counts as ``count_<kind>``).

    Args:
        rows: sweep rows.
        out: a text stream to write to; default a new string buffer.

    Text cells are neutralised against spreadsheet formulas (:func:`specviz.figures.trace.spreadsheet_safe`).

    Returns:
        The CSV text when ``out`` is None, else "" (it went to ``out``).
    """
    rows = list(rows)
    kinds = sorted({kind for row in rows for kind in (row.get("counts") or {})})
    buffer = out if out is not None else io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CSV_FIELDS, *(f"count_{kind}" for kind in kinds)])
    for row in rows:
        counts = row.get("counts") or {}
        writer.writerow([_cell(row.get(name)) for name in CSV_FIELDS] + [counts.get(kind, 0) for kind in kinds])
    return buffer.getvalue() if out is None else ""


#: How α moved across a sweep, by :attr:`AlphaTrend.direction`, in the words of its sentence.
TREND_WORDS = {"rises": "rose with the setting", "falls": "fell as the setting rose",
               "stays": "moved less than its own spread, so no trend is claimed"}


@dataclass(frozen=True)
class AlphaTrend:
    """How the per-token α moved across a sweep's settings, as data and as a sentence.

    Attributes:
        direction: ``"rises"``, ``"falls"`` (a trend: Kendall's τ between the setting's order and
            α at least :data:`TREND_TAU` in size, first and last differing the same way),
            ``"stays"`` (neither), or None when fewer than two settings drafted anything.
        sentence: one honest sentence saying so, with the tested counts behind each value;
            ``""`` for fewer than two rows.
    """

    direction: str | None
    sentence: str


#: Kendall's τ a trend needs: with 3 settings every pair in order, with 4 one pair out of order,
#: with 5 two of the ten (α 0.37, 0.33, 0.35, 0.12, 0.00 fell, τ = −0.8, though the
#: third value is above the second).
TREND_TAU = 0.6


def _kendall_tau(values: Sequence[float]) -> float:
    """Kendall's τ between the values' order and the values (ties count 0): 1 for a rising
    sequence, −1 for a falling one."""
    pairs = [(a, b) for i, a in enumerate(values) for b in values[i + 1:]]
    return sum((b > a) - (b < a) for a, b in pairs) / len(pairs)


def alpha_trend(rows: Sequence[dict], parameter: str) -> AlphaTrend:
    """How the per-token α moved with the setting (:class:`AlphaTrend`): its direction, and a
    sentence with the tested counts behind each value (α over a handful of tested drafts is
    noise). A trend is read only over an ordered setting (temperature, K; a list of drafters has no
    order) and only where the data carry it: the values go one way (Kendall's τ at least
    :data:`TREND_TAU`: one value out of line does not hide a fall), and the change from first to
    last exceeds both twice the largest step back against it (the points' own back and forth) and
    twice the two end points' combined standard error, sqrt(α(1 − α)/tested) each. Otherwise the
    sentence says the values."""
    points = [(r[parameter], r["alpha"], r["tested"]) for r in rows]
    if len(points) < 2:
        return AlphaTrend(None, "")
    measured = [(x, a, n) for x, a, n in points if a is not None]
    listing = ", ".join(f"{x}: {'n/a' if a is None else f'{a:.2f}'} ({n} tested)" for x, a, n in points)
    if len(measured) < 2:
        return AlphaTrend(None, f"Per-token α could not be compared: too few settings drafted anything ({listing}).")
    if parameter not in ORDERED_SETTINGS:
        return AlphaTrend(None, f"Per-token α by {parameter}: {listing}. These settings have no order, so no "
                                "trend is read from them.")
    direction = _direction(measured)
    few = [x for x, _, n in measured if n < 20]
    caveat = f"; fewer than 20 drafts were tested at {', '.join(map(str, few))}, so those values are noisy" if few else ""
    return AlphaTrend(direction, f"Per-token α {TREND_WORDS[direction]} ({listing}){caveat}.")


#: The settings whose values have an order, so that α can rise or fall along them.
ORDERED_SETTINGS = ("temperature", "k")


def _direction(measured: list[tuple]) -> str:
    """``"rises"``, ``"falls"`` or ``"stays"`` for ``(setting, α, tested)`` points (see :func:`alpha_trend`)."""
    alphas = [a for _, a, _ in measured]
    tau = _kendall_tau(alphas)
    change = alphas[-1] - alphas[0]
    sign = 1 if change > 0 else -1
    back = max([0.0] + [-sign * (b - a) for a, b in zip(alphas, alphas[1:])])
    (_, a0, n0), (_, a1, n1) = measured[0], measured[-1]
    noise = math.sqrt(a0 * (1 - a0) / max(n0, 1) + a1 * (1 - a1) / max(n1, 1))
    if abs(tau) < TREND_TAU or tau * change <= 0 or abs(change) <= 2 * back or abs(change) <= 2 * noise:
        return "stays"
    return "rises" if change > 0 else "falls"