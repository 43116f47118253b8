"""One recipe for a model feature: a generating endpoint (/run, /lossless, /sweep, /side_by_side)
is declared once as a :class:`Feature`, and this module does the rest the same way for each.

A feature module holds three things:

* its **work**: a module-level generator ``work(ctx, *args, **kwargs)`` taking the job's
  :class:`~specviz.ui.serve.gpu.JobContext` first, run by :func:`specviz.ui.serve.gpu.run_job` (in ZeroGPU's
  worker on a Space), its loops ending on ``ctx.should_end()``;
* its **plan**: the validating callback, in the main process, that turns the page's values into
  the work's plain arguments and the GPU seconds to reserve (a :class:`Plan`), refusing bad input
  with a ``gr.Error`` before any GPU is asked for;
* its **Gradio callback**, which keeps the endpoint's signature (the API's parameter names) and
  whose body is :meth:`Feature.stream` (or :meth:`Feature.result` for a single answer).

:meth:`Feature.stream` calls the plan, makes the job (:func:`specviz.ui.serve.gpu.make_job`) and streams
it (:func:`specviz.ui.serve.gpu.stream_job`); :meth:`Feature.wire` wires the button while the page is
built: the queue (:data:`GENERATION`, :func:`generation_limit`, raw values: ``preprocess=False``),
public mode's one generation per visitor (the event registered with the page's
:class:`~specviz.ui.serve.visitors.GenerationGate`), and a Stop button (``cancels`` for the page's side,
:func:`specviz.ui.serve.gpu.stop_session` for the worker's). :data:`FEATURES` lists every declared feature
by its api_name; :func:`page_events` the events one page wired. Nothing else in the package makes a
job or names the generation queue (tests/test_layout.py checks it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import gradio as gr

from specviz.models.memory import on_zero_gpu
from specviz.ui.serve import gpu
from specviz.ui.serve import settings
from specviz.ui.serve import visitors

#: The queue every model computation waits in (its ``concurrency_id``).
GENERATION = "generation"
#: Generations running at once on ZeroGPU, where each call gets a GPU of its own: as many as the
#: queue holds (each visitor still one at a time in public mode). Off ZeroGPU one at a time: one
#: model computation fills a small CPU (or one GPU).
ZERO_GPU_GENERATIONS = settings.QUEUE_SIZE
#: Every declared feature, by its api_name.
FEATURES: dict[str, Feature] = {}
#: Model-free listeners (Stop's): their own queue, never waiting behind a generation.
_FREE = dict(api_name=False, concurrency_id="playground", concurrency_limit=None, show_progress="hidden")


@dataclass(frozen=True)
class Plan:
    """What a feature's plan returns: the work's plain arguments (picklable: they cross into
    ZeroGPU's worker) and the GPU seconds reserved (:mod:`specviz.ui.serve.gpu_budget`)."""

    args: tuple
    duration_s: int
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Feature:
    """A generating endpoint, declared once at its module's level (after its work function).

    Attributes:
        api_name: the endpoint's name (``"run"`` is /run).
        work: the module-level generator the GPU job runs (see the module's docstring).
        plan: ``plan(*values, **kwargs) -> Plan``, the validation and the reservation.

    Raises:
        ValueError: ``work`` is not a module-level function (it would not pickle by reference), or
            another feature already took ``api_name``.
    """

    api_name: str
    work: Callable
    plan: Callable[..., Plan]

    def __post_init__(self):
        module = sys.modules.get(getattr(self.work, "__module__", None) or "")
        name = getattr(self.work, "__qualname__", "")
        if module is None or "." in name or getattr(module, name, None) is not self.work:
            raise ValueError(f"a feature's work must be a module-level function, got {self.work!r}")
        known = FEATURES.get(self.api_name)
        if known is not None and known.work is not self.work:
            raise ValueError(f"two features are named {self.api_name!r}")
        FEATURES[self.api_name] = self

    def stream(self, *values, progress=None, **kwargs) -> Iterator:
        """The callback's outputs: ``plan(*values, **kwargs)`` (its ``gr.Error`` raised before any
        job), then the job's outputs as :func:`specviz.ui.serve.gpu.stream_job` streams them
        (``progress``: the callback's ``gr.Progress``)."""
        plan = self.plan(*values, **kwargs)
        job = gpu.make_job(self.work, *plan.args, duration_s=plan.duration_s, **plan.kwargs)
        started = time.monotonic()
        try:
            yield from gpu.stream_job(job, progress)
        finally:  # how long the slot was held, for the queue's words (visitors.queue_words)
            visitors.GENERATION_CLOCK.record(time.monotonic() - started)

    def result(self, *values, progress=None, **kwargs):
        """:meth:`stream`'s last outputs (None if the work yielded nothing), for an endpoint that
        answers once."""
        outputs = None
        for outputs in self.stream(*values, progress=progress, **kwargs):
            pass
        return outputs

    def wire(self, trigger, fn, inputs, outputs, public: bool, stop=None, on_stop=None, status=None):
        """Wire the feature while the page is built; returns the generation's event.

        Args:
            trigger: the listener, e.g. ``button.click`` (called like it, with ``fn``, ``inputs``,
                ``outputs`` and the queue's settings).
            fn: the Gradio callback (its ``public`` bound).
            inputs, outputs: the event's components.
            public: public mode: a quick check first (:func:`specviz.ui.serve.visitors.generation_click`)
                and the page's gate as the event's validator.
            stop: the Stop button, or None: it cancels the event and raises the flag of the
                visitor's running job of this feature.
            on_stop: ``(fn, inputs, outputs)`` of a model-free view Stop also runs (the Run tab's
                stopped run), or None.
            status: a Markdown under the button, or None: the queue's words, the progress and a
                refusal's pill go there, never on the outputs
                (:func:`specviz.ui.serve.visitors.generation_click`).
        """
        event = visitors.generation_click(trigger, fn, inputs, outputs, public, status=status,
                                          api_name=self.api_name,
                                          concurrency_id=GENERATION, concurrency_limit=generation_limit(),
                                          # Raw values reach the callback, whose plan validates them:
                                          # a component's own preprocessing would answer a bad API
                                          # value with gradio's generic error, not the setting's.
                                          preprocess=False)
        from gradio.context import Context

        page = Context.root_block
        block_fn = page.fns[event["id"]]  # gradio's record of the event: its queue, validator, api_name
        page._specviz_features = page_events(page) + [(self, block_fn)]
        if public:
            visitors.gate_of(page).register(block_fn)
        if stop is not None:
            stop.click(self.stop_handler(), None, None, cancels=[event], **_FREE)
            if on_stop is not None:
                stop.click(*on_stop, **_FREE)
        return event

    def stop_handler(self) -> Callable:
        """The Stop button's handler: ``handler(request)`` raises the flag of the requesting
        visitor's running jobs of this feature (:func:`specviz.ui.serve.gpu.stop_session`), no one else's."""
        work = self.work

        def stop(request: gr.Request) -> None:
            gpu.stop_session(request, work)

        return stop


def generation_limit() -> int:
    """The generations that run at once: :data:`ZERO_GPU_GENERATIONS` on ZeroGPU, else 1."""
    return ZERO_GPU_GENERATIONS if on_zero_gpu() else 1


def page_events(page: gr.Blocks) -> list[tuple[Feature, object]]:
    """(feature, gradio's BlockFunction) of each generation :meth:`Feature.wire` wired on ``page``."""
    return list(getattr(page, "_specviz_features", []))

