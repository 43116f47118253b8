"""One visitor's run, as plain data kept in a ``gr.State``: what the stream, the inspector, the
replay and the export share. Gradio deep-copies State values, so :class:`RunState` holds only
copyable data (rounds, strings, numbers, the baseline), no model or generator.

Also here: the Run tab's outputs by name (:class:`RunView`, :data:`RUN_OUTPUTS` and its kin,
:class:`RunUpdate`), so the tab's components and the callbacks' values meet by field name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

import gradio as gr

from specviz.figures.analysis import RunAnalysis, analyse, health_notes
from specviz.diagnose.diagnostics import diagnose
from specviz.drafters import drafter_kind
from specviz.core.records import effective_k
from specviz.core.sampling import check_rule
from specviz.figures.speedup import PlainBaseline, running_speedup
from specviz.figures.trace import trace_from_dict, trace_rule
from specviz.core.records import Round
from specviz.ui.draw import charts, diagnostic_charts
from specviz.ui.draw.run_views import NO_TRACE_BASELINE, render_round, summary_markdown, wrap_output

#: The summary's sentence when a finished run's own timings contradict its plain baseline.
REMEASURE_NOTE = ("This run's own timings disagree with the plain baseline, or its samples scatter, so it is not "
                  "kept: the next run with these settings times plain decoding again.")


class RunView(NamedTuple):
    """The Run tab's outputs that show a run: token panel, summary and the eight charts (the five of
    the run, then its diagnostics: the rules on its passes, accepted lengths, calibration)."""

    tokens: object
    summary: object
    alpha: object
    tokens_per_pass: object
    speedup: object
    positions: object
    time: object
    rules: object
    lengths: object
    calibration: object

    def figures(self) -> tuple:
        """The charts, in the page's order (what the export's charts page holds)."""
        return tuple(getattr(self, name) for name in FIGURES)


#: The view's charts, by field name (every field after the token panel and the summary).
FIGURES = RunView._fields[2:]

#: What each of the Run tab's events writes, by name and in order: the view's fields, then what
#: travels with a run (``baselines``: the visitor's measured plain baselines; ``state``: the
#: :class:`RunState`; ``slider``: the replay slider). The Run tab lists its components from these
#: names and the callbacks their values (:meth:`RunUpdate.values`), so nothing is matched by
#: position across files.
RUN_OUTPUTS = (*RunView._fields, "baselines", "state", "slider")  # Run (/run)
SHOWN_OUTPUTS = (*RunView._fields, "state", "slider")  # Stop, and a loaded trace (/load_trace)
VIEW_OUTPUTS = RunView._fields  # a replayed pass (/replay)


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: A :class:`RunUpdate` field the event writes but leaves as it is (sent as ``gr.skip()``).
KEEP = _Keep()


class RunUpdate(NamedTuple):
    """One update of the Run tab: the view and what travels with it. A field the event does not
    write is ignored; one it writes but should leave as it is holds :data:`KEEP` (the default),
    sent as ``gr.skip()`` (a view's own fields hold ``gr.skip()`` themselves)."""

    view: RunView
    baselines: object = KEEP
    state: object = KEEP
    slider: object = KEEP

    def values(self, names: tuple[str, ...]) -> tuple:
        """The values for an event's outputs ``names`` (one of :data:`RUN_OUTPUTS`,
        :data:`SHOWN_OUTPUTS`, :data:`VIEW_OUTPUTS`), in their order."""
        fields = {**self.view._asdict(), "baselines": self.baselines, "state": self.state, "slider": self.slider}
        return tuple(gr.skip() if fields[name] is KEEP else fields[name] for name in names)


def waiting_view(tokens: str, status: str, k: int) -> RunView:
    """The view before the first round: an empty panel, a status line and empty charts at lookahead ``k``."""
    return RunView(tokens=tokens, summary=status, alpha=charts.alpha_figure([]),
                   tokens_per_pass=charts.tokens_per_pass_figure([], k, None), speedup=charts.speedup_figure([], None),
                   positions=charts.per_position_figure(None), time=charts.time_split_figure(None),
                   rules=diagnostic_charts.rules_figure(None), lengths=diagnostic_charts.accepted_length_figure(None),
                   calibration=diagnostic_charts.calibration_figure(None))


def _looks_up(spec) -> bool:
    """Whether a saved trace's drafter spec is a lookup drafter (a spec that is not text: no)."""
    return isinstance(spec, str) and drafter_kind(spec).lookup


def _drafting_settings(settings: dict) -> dict:
    """A saved trace's temperature, B, and what its drafter's kind says about it (a model always
    drafts; the oracle replays the target), for the health checks and the ceiling."""
    spec = settings.get("draft")
    kind = drafter_kind(spec) if isinstance(spec, str) and spec else None
    temperature, branches = settings.get("temperature"), settings.get("branches")
    return {"temperature": float(temperature) if isinstance(temperature, (int, float)) else 0.0,
            "branches": int(branches) if isinstance(branches, int) and branches > 0 else 1,
            "always_drafts": bool(kind and (kind.needs_model or kind.real_draft)),
            "oracle": bool(kind and kind.replays)}


def rule_note(rule: str, a: RunAnalysis | None = None) -> str:
    """The summary's sentence on a run verified by a rule other than the full one; for block
    verification with its analysis ``a``, why its α and tokens per pass do not follow the chain's
    closed form (α 0.618 stood beside 3.43 tokens per pass with no word on why)."""
    found = check_rule(rule)
    if not found.lossless:
        return (f"Verified by the {rule} rule, a LOSSY control ({found.description}): its output is not "
                "distributed as the target's, and its α is not comparable with an exact rule's.")
    said = f"Verified by the {rule} rule: {found.description}."
    if rule == "block" and a is not None and a.alpha is not None and a.predicted_tokens_per_pass is not None:
        said += (f" Block verification tests every drafted position and keeps the block up to its last passing "
                 f"test, so per-token α = {a.alpha:.3f} is the share of drafts kept and a pass yields 1 + α × "
                 f"drafts per pass = 1 + {a.alpha:.3f} × {a.proposed_per_pass:.2f} = "
                 f"{1 + a.alpha * a.proposed_per_pass:.2f} tokens (measured {a.tokens_per_pass:.2f}), more than "
                 f"the chain's (1 − α^(K+1))/(1 − α) = {a.predicted_tokens_per_pass:.2f}, which assumes the first "
                 "failed test ends the pass.")
    return said


#: A chat template's markup token, as its text reads: ``<|im_start|>``, ``<|im_end|>``, ``<start_of_turn>``.
_MARKUP = re.compile(r"<\|?[a-z_]+\|?>")


def markup_draft_note(rounds: list[Round]) -> list[str]:
    """The summary's sentence on a rejected draft that is chat-template markup (every
    default run opened with a struck-through ``<|im_start|>`` that the page never explained), or
    none. Prompt lookup matches the prompt's last tokens, and in a chat prompt those (a newline
    after the assistant's turn marker) occur earlier in the template, followed by the next turn's
    marker: it proposes that marker, which the target, starting its reply, rejects."""
    for r in rounds:
        for t in r.drafted:
            if t.tested and not t.accepted and _MARKUP.fullmatch(t.text.strip()):
                return [f"Pass {r.index + 1}'s struck-through draft {t.text.strip()} is chat-template markup: prompt "
                        "lookup found the prompt's last tokens earlier in the chat template and proposed what came "
                        "next there, the next turn's marker. The target, starting its reply, rejected it, and the "
                        "same verify pass gave the reply's token in its place, so it cost no extra pass."]
    return []


@dataclass
class RunState:
    """A run (live or loaded from a trace) and what its views need.

    ``html`` caches each round's rendered tokens; ``k`` is the lookahead (0 for plain decoding);
    ``prefill_ms`` the prompt's prefill time (ms); ``baseline`` the plain decoding it is compared
    with; ``eos`` the target's end-of-sequence ids; ``lookup`` whether prompt lookup drafted and
    ``low_precision_greedy`` whether a greedy run used bf16/fp16 (both select health notes);
    ``meta`` the saved trace's fields other than the rounds; ``notes`` the engine's notes;
    ``max_new_tokens`` the run's token limit; ``finished`` whether it has ended (done, stopped or
    loaded); ``remeasure`` whether its baseline was dropped from the visitor's cache
    (:data:`REMEASURE_NOTE`); ``loaded`` whether it came from a saved trace; ``stop_slot`` the
    GPU job's Stop flag (:func:`specviz.ui.serve.gpu.request_stop`; −1: none); ``rule`` the
    verification rule (:data:`specviz.core.sampling.RULES`; ``"full"`` for a trace older than rules);
    ``busy_note`` what :func:`specviz.ui.serve.threads.busy_note` said when it ran ("" for a quiet
    machine). ``weight_bytes`` is what one pass of the target reads: its parameters' bytes (0 for a
    saved trace); ``drafter_name`` the drafter's label. ``label`` is the pair
    in words, text from outside (a trace's fields, a model's name): views escape it.
    """

    label: str = ""
    k: int = 0
    eos: list[int] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    prefill_ms: float = 0.0
    baseline: PlainBaseline | None = None
    lookup: bool = False
    low_precision_greedy: bool = False
    meta: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    max_new_tokens: int = 0
    finished: bool = False
    remeasure: bool = False
    loaded: bool = False
    stop_slot: int = -1
    rule: str = "full"
    busy_note: str = ""
    temperature: float = 0.0
    branches: int = 1
    always_drafts: bool = False
    oracle: bool = False
    weight_bytes: int = 0
    drafter_name: str = ""

    @classmethod
    def new(cls, request, target, drafter, label: str) -> RunState:
        """The state of a run about to start: ``request`` a RunRequest, ``target`` a LoadedModel,
        ``drafter`` its drafter (None: plain decoding)."""
        low_precision = str(target.dtype) in ("torch.bfloat16", "torch.float16")
        return cls(label=label, k=effective_k(request.k, drafter is not None), eos=sorted(target.eos_token_ids),
                   lookup=drafter_kind(request.draft).lookup,
                   low_precision_greedy=low_precision and request.sampling.greedy,
                   max_new_tokens=request.max_new_tokens, rule=request.rule,
                   temperature=request.sampling.temperature, branches=request.branches,
                   always_drafts=bool(getattr(drafter, "uses_model", False)),
                   oracle=bool(getattr(drafter, "replays_target", False)),
                   weight_bytes=_weight_bytes(target), drafter_name=getattr(drafter, "name", "") or "")

    @classmethod
    def from_trace(cls, data: dict) -> RunState:
        """The state of a saved trace's run (for the inspector and the replay).

        Raises:
            ValueError: if it is not a trace this version can read (the message says why).
        """
        return cls.from_rounds(*trace_from_dict(data))

    @classmethod
    def from_rounds(cls, rounds: list[Round], meta: dict) -> RunState:
        """The state of a saved trace already read and validated
        (:func:`specviz.figures.trace.load_trace_file`'s ``(rounds, meta)``)."""
        eos = set(meta.get("eos_token_ids") or [])
        base = meta.get("baseline")
        settings = meta.get("settings") or {}
        return cls(label=f"{meta.get('target', '?')} ← {meta.get('drafter') or 'plain decoding'} (saved trace)",
                   k=int(meta.get("k") or 0), eos=sorted(eos), rounds=rounds,
                   html=[render_round(r, eos) for r in rounds], prefill_ms=float(meta.get("prefill_ms") or 0.0),
                   baseline=PlainBaseline.from_dict(base) if base else None, lookup=_looks_up(settings.get("draft")),
                   low_precision_greedy=meta.get("dtype") in ("bfloat16", "float16")
                   and not settings.get("temperature"),
                   meta=meta, max_new_tokens=int(settings.get("max_new_tokens") or 0), finished=True, loaded=True,
                   rule=trace_rule(meta),
                   busy_note=meta["busy_note"] if isinstance(meta.get("busy_note"), str) else "",
                   **_drafting_settings(settings))

    def add(self, round_: Round, run) -> None:
        """Record a finished round of ``run`` (a Generation): the round, its HTML, the prefill and notes."""
        self.rounds.append(round_)
        self.html.append(render_round(round_, set(self.eos)))
        self.prefill_ms = run.prefill_ms
        self.notes = list(run.notes)

    def analysis(self, upto: int | None = None) -> RunAnalysis:
        """Every figure of the run as it stood after ``upto`` rounds (None: all), against its baseline
        (:func:`specviz.figures.analysis.analyse`; time up to the last round's end)."""
        rounds = self.rounds[:upto]
        return analyse(rounds, self.k, rounds[-1].elapsed_s if rounds else 0.0, self.prefill_ms, self.baseline)

    def view(self, upto: int | None, status: str, done: bool, generated_at: float | None = None,
             analysis: RunAnalysis | None = None, drawn: tuple[str, ...] = FIGURES) -> RunView:
        """Tokens HTML, summary and the eight charts after ``upto`` rounds (None: all), the summary
        and charts with the run's diagnostics (:func:`specviz.diagnose.diagnostics.diagnose`).

        ``generated_at``: the server's time.time() of the newest token (the browser measures lag
        with it); ``analysis``: :meth:`analysis` of the same rounds, if already computed;
        ``drawn``: the charts (names among :data:`FIGURES`) to build, the others ``gr.skip()`` (left
        as they are on the page: a streamed run redraws one chart at a time)."""
        rounds = self.rounds[:upto]
        a = analysis if analysis is not None else self.analysis(upto)
        d = diagnose(rounds, self.k, a.cost_ratio_c, a.verify_cost_v) if rounds else None
        notes = self.notes + ([self.busy_note] if self.busy_note else []) + health_notes(
            a, lookup=self.lookup, low_precision_greedy=self.low_precision_greedy)
        if self.remeasure and upto is None:
            notes.append(REMEASURE_NOTE)
        if self.lookup:
            notes += markup_draft_note(rounds)
        if self.k and self.rule != "full":
            notes.append(rule_note(self.rule, a))
        if done and rounds:  # what the numbers hide, once the run has ended (specviz.ui.tabs.numbers_hide)
            from specviz.ui.tabs.numbers_hide import summary_notes

            notes += summary_notes(self, rounds, a)
        never = self.loaded and self.baseline is None  # a saved trace without one: no baseline is coming
        build = {
            "alpha": lambda: charts.alpha_figure(rounds),
            "tokens_per_pass": lambda: charts.tokens_per_pass_figure(rounds, self.k, a.alpha),
            "speedup": lambda: charts.speedup_figure(running_speedup(rounds, self.baseline), a.theoretical_speedup,
                                                     NO_TRACE_BASELINE if never else charts.WAITING_TEXT,
                                                     doubt=a.speedup_doubt),
            "positions": lambda: charts.per_position_figure(a, d.positions if d else None),
            "time": lambda: charts.time_split_figure(a),
            "rules": lambda: diagnostic_charts.rules_figure(d),
            "lengths": lambda: diagnostic_charts.accepted_length_figure(d),
            "calibration": lambda: diagnostic_charts.calibration_figure(d),
        }
        return RunView(tokens=wrap_output("".join(self.html[: len(rounds)]), done, generated_at),
                       summary=summary_markdown(a, status, notes, NO_TRACE_BASELINE if never else "measuring…",
                                                diagnostics=d),
                       **{name: build[name]() if name in drawn else gr.skip() for name in FIGURES})


def _weight_bytes(target) -> int:
    """The bytes of a loaded target's weights (each parameter once): what every forward pass reads."""
    model = getattr(target, "model", None)
    if model is None:
        return 0
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
