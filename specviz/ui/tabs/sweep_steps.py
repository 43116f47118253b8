"""What the Experiments and side-by-side tabs share: an experiment's validated requests from the
Run tab's values (:func:`sweep_plan`) and :func:`specviz.run.sweep.sweep`'s steps for this visitor,
with its errors as one clear line and public mode's time limit (:class:`SweepSteps`)."""

from __future__ import annotations

import functools

from specviz.drafters import for_device, parse_drafter_spec
from specviz.run.request import check_drafter_device, check_public_models, pin_public_device, to_int
from specviz.run.runner import prepare_run
from specviz.run.sweep import sweep, sweep_requests
from specviz.ui.serve import settings
from specviz.ui.serve import visitors
from specviz.ui.serve.fields import request_from
from specviz.ui.serve.user_errors import refused, user_errors

SWEEP_DEFAULTS = {"temperature": "0 0.3 0.7 1.0 1.5", "k": "1 2 3 4 6 8", "draft": "ngram int8 early-exit:4 none"}


def sweep_default(parameter: str, device) -> str:
    """The values an experiment of ``parameter`` starts with for a target on ``device``: the
    drafters are those of :data:`SWEEP_DEFAULTS` that run there, each other one replaced by its
    stand-in (:func:`specviz.drafters.for_device`) unless that is listed already."""
    text = SWEEP_DEFAULTS[parameter]
    if parameter != "draft":
        return text
    specs = [for_device(parse_drafter_spec(spec), device)[0] for spec in text.split()]
    return " ".join(dict.fromkeys(specs))
SWEEP_LABELS = {"Temperature": "temperature", "Lookahead K": "k", "Drafter": "draft"}
PUBLIC_MAX_SETTINGS = 6  # a public experiment runs at most this many settings (each a run and a baseline)


def sweep_values(parameter: str, text) -> list[str]:
    """The values typed for a sweep, split on commas and spaces (validated by specviz.run.sweep)."""
    if not isinstance(text, str) or not text.replace(",", " ").split():
        raise refused(f"Type the {parameter} values to sweep, e.g. {SWEEP_DEFAULTS[parameter]}.")
    return text.replace(",", " ").split()


def sweep_plan(parameter, values_text, max_new_tokens, values: dict, public: bool, replace=None):
    """(parameter, requests): the validated requests of a sweep from the Experiments controls and
    the Run tab's ``values`` (by field name); ``replace``: the swept values, instead of ``values_text``.

    Raises:
        gr.Error: an unknown parameter, bad values, too many settings in public mode, a refused model,
            or a drafter that does not run with the target on its device.
    """
    parameter = SWEEP_LABELS.get(parameter, parameter)
    if parameter not in SWEEP_DEFAULTS:
        raise refused(f"Sweep one of {', '.join(SWEEP_LABELS)}, got {parameter!r}.")
    swept = replace if replace is not None else sweep_values(parameter, values_text)
    if public and len(swept) > PUBLIC_MAX_SETTINGS:
        raise refused(f"Public mode: at most {PUBLIC_MAX_SETTINGS} settings per experiment, got {len(swept)}.")
    limits = settings.limits(public)
    with user_errors():
        tokens = to_int("tokens per setting", max_new_tokens, 1, limits.max_new_tokens)
    base = request_from({**values, "max_new_tokens": tokens}, public)
    with user_errors():
        requests = sweep_requests(base, parameter, swept, limits=limits)
        if public:
            server = settings.public_server()
            for r in requests:
                check_public_models(r.target, r.draft, *settings.public_allowed())
            requests = [pin_public_device(r, server) for r in requests]
        for r in requests:
            check_drafter_device(r.draft, settings.target_device(r.device))
    return parameter, requests


class SweepSteps:
    """:func:`specviz.run.sweep.sweep`'s steps for the visitor the callback serves: a suffix drafter
    searches only their own earlier outputs (:func:`specviz.ui.serve.visitors.visitor_history`), Token
    Recycling only their own table (:func:`specviz.ui.serve.visitors.visitor_table`), each row starting
    from them emptied and leaving them as they were (:func:`specviz.run.sweep.sweep`), loading
    and run errors become one clear gr.Error line, and with ``max_run_s`` (public mode) the sweep
    stops at that wall time (its own cap: loading, warm-ups and baselines count) with the rows it
    finished; its "stopped" step is not passed on, :attr:`stopped` says so instead.

    Args:
        requests: from :func:`sweep_plan`.
        progress: the callback's ``gr.Progress``.
        max_run_s: the time limit (seconds), or None.
        ctx: the GPU job's :class:`~specviz.ui.serve.gpu.JobContext`, or None: Stop and the job's
            deadline end the sweep after the round that sees them, as the time limit does.
    """

    def __init__(self, requests, progress, max_run_s: float | None = None, ctx=None) -> None:
        self.requests = requests
        self.progress = progress
        self.max_run_s = max_run_s
        self.ctx = ctx
        self.stopped = False
        self.why = ""  # what stopped it: "limit", "stop" or "deadline"

    def __iter__(self):
        def report(fraction, message):
            self.progress(fraction, desc=message)

        prepare = functools.partial(prepare_run, history=visitors.visitor_history(), table=visitors.visitor_table())
        should_end = self.ctx.should_end if self.ctx is not None else None
        with user_errors():
            for step in sweep(self.requests, progress=report, prepare=prepare, max_run_s=self.max_run_s,
                              should_end=should_end):
                if step.phase == "stopped":
                    self.stopped, self.why = True, self._why_stopped()
                    return
                yield step
                if self.ctx is not None and self.ctx.should_end():
                    self.stopped, self.why = True, "stop" if self.ctx.stopped() else "deadline"
                    return

    def _why_stopped(self) -> str:
        """What ended the sweep: Stop, the job's deadline (both reach its warm-ups and baselines),
        else the time limit."""
        if self.ctx is not None and self.ctx.stopped():
            return "stop"
        return "deadline" if self.ctx is not None and self.ctx.past_deadline() else "limit"

    def stopped_note(self) -> str:
        """The status line's words for a stop ("" if it did not stop): at the time limit, by the
        visitor, or at the end of the GPU time reserved."""
        if not self.stopped:
            return ""
        if self.why == "stop":
            return "**Stopped** by you"
        if self.why == "deadline":
            return f"**Stopped** at the end of the GPU time reserved ({self.ctx.budget_s:.0f} s)"
        return f"**Stopped** at the public time limit of {self.max_run_s:g} s"


def sweep_steps(requests, progress, public: bool = False, ctx=None) -> SweepSteps:
    """The visitor's :class:`SweepSteps`, capped at the public time limit in public mode (``ctx``:
    the GPU job's context, or None)."""
    return SweepSteps(requests, progress, settings.PUBLIC_POLICY.max_run_s if public else None, ctx)
