"""From a validated request to runs: loading the pair, building generations, warming up.

The front-ends (the app, ``python -m specviz run``, ``sweep`` and ``bench``) go through these few
functions, so they load, encode, warm up and build runs the same way:

* :func:`prepare_run`: the one way from a :class:`~specviz.run.request.RunRequest` to a
  :class:`PreparedRun` (the loaded pair, the prompt's ids under the one chat-template policy of
  :func:`encode_prompt`, the end-of-text ids, a label and notes for the user);
* :func:`baseline_steps`: the plain baseline of a prepared run, round by round;
* :func:`load_pair`: the target (a :class:`~specviz.models.loading.LoadedModel`) and the drafter;
* :func:`make_generation`: a :class:`~specviz.core.engine.Generation` wired to them;
* :func:`warm_up`: one short plain run and one short speculative run before anything is timed
  (first calls allocate memory, pick kernels and, with ``torch.compile``, compile);
* :func:`prepare` and :func:`measure_plain`: the same, for a script (the package's public API).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field

from specviz.drafters.stores import stores_kept
from specviz.run.baseline import DEFAULT_SAMPLES, measure_baseline
from specviz.run.request import RequestError, RunRequest, validate_request
from specviz.core.records import effective_k
from specviz.figures.speedup import PlainBaseline

__all__ = ["WARMUP_TOKENS", "PreparedRun", "baseline_key", "baseline_steps", "check_prompt_tokens", "default_warmup_tokens", "drain", "encode_prompt",
           "load_pair", "make_generation", "measure_plain", "prepare", "prepare_run", "record_for_oracle", "saved_trace",
           "warm_up"]

#: Tokens per warm-up run: enough for the first calls of every shape (prefill, one position,
#: K + 1 positions) to have happened.
WARMUP_TOKENS = 8


def default_warmup_tokens(max_new_tokens: int, compiled: bool = False) -> int:
    """Tokens per warm-up run: a few, or, for a ``torch.compile``-d model, the whole run, so that
    every graph (prefill, one position, K + 1 positions) is compiled before anything is timed."""
    return max_new_tokens if compiled else min(WARMUP_TOKENS, max_new_tokens)


def load_pair(target_spec: str, draft_spec: str, device: str = "auto", dtype: str = "auto", progress=None,
              compile_mode: str | None = None, history=None, table=None):
    """Load the target and build the drafter (None for ``none``).

    ``history``: the :class:`~specviz.drafters.SuffixHistory` a suffix drafter searches and
    extends; ``table``: the :class:`~specviz.drafters.RecycleTable` a Token Recycling drafter
    drafts from and updates (the app passes each visitor's own of both; None: the process-wide
    ones, for the CLI and bench).

    ``progress(fraction, message)`` is passed to :mod:`specviz.models.loading`, which also logs each step
    at INFO level. With ``compile_mode`` (a ``torch.compile`` mode, e.g. ``"default"``) the
    target's forward and a model drafter's forward are compiled with
    :func:`specviz.models.loading.compile_forward`; prompt lookup has no network to compile.

    Returns:
        ``(target, drafter)``: a :class:`~specviz.models.loading.LoadedModel` and a drafter or None.

    Raises:
        ValueError, specviz.models.loading.ModelLoadError, specviz.models.loading.IncompatiblePairError: from
            :func:`specviz.models.loading.load_model` and :func:`specviz.drafters.registry.build_drafter`.
    """
    from specviz.models import loading as models
    from specviz.drafters.registry import build_drafter

    target = models.load_model(target_spec, device=device, dtype=dtype, progress=progress)
    drafter = build_drafter(draft_spec, target, device=device, dtype=dtype, progress=progress,
                                   history=history, table=table)
    if compile_mode:
        models.compile_forward(target.model, compile_mode)
        draft_model = getattr(drafter, "model", None)
        if draft_model is not None:
            models.compile_forward(draft_model, compile_mode)
    return target, drafter


def make_generation(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed, instrument=True, eos=True,
                    decode=True, branches=1, tree_nodes=None, cache="dynamic", rule="full"):
    """A :class:`~specviz.core.engine.Generation` wired to a loaded target and drafter.

    Args:
        target: a :class:`~specviz.models.loading.LoadedModel`.
        drafter: a drafter, or None for plain decoding.
        prompt_ids: the encoded prompt.
        k, sampling, max_new_tokens, seed, instrument, branches, tree_nodes, cache, rule: as in
            :class:`~specviz.core.engine.Generation` (B = 1 drafts chains; ``cache`` the KV cache kind;
            ``rule`` the verification rule, :data:`specviz.core.sampling.RULES`).
        eos: stop at the target's EOS ids (the bench turns this off to generate equal lengths).
        decode: record each token's text.
    """
    from specviz.core.engine import Generation
    from specviz.figures.trace import TokenPieces

    vocab = getattr(drafter, "vocab_size", None) if drafter is not None else None
    if getattr(drafter, "replays_target", False):
        record_for_oracle(target, drafter, prompt_ids, sampling, max_new_tokens, seed, eos, cache)
    return Generation(
        target=target.model,
        prompt_ids=list(prompt_ids),
        drafter=drafter,
        k=k,
        sampling=sampling,
        max_new_tokens=max_new_tokens,
        seed=seed,
        eos_token_ids=tuple(target.eos_token_ids) if eos else (),
        vocab_size=vocab or min(target.vocab_size, target.logits_width),
        decode=target.decode if decode else None,
        label=TokenPieces(target.tokenizer) if decode else None,
        instrument=instrument,
        branches=branches,
        tree_nodes=tree_nodes,
        cache=cache,
        rule=rule,
    )


def record_for_oracle(target, drafter, prompt_ids, sampling, max_new_tokens, seed, eos=True, cache="dynamic") -> None:
    """Give an oracle drafter (:class:`specviz.drafters.oracle.OracleDrafter`) the target's own
    output for these settings and choose it for the next run: plain decoding of the same prompt,
    sampling settings, seed, token limit, end-of-text ids and cache kind, run here, before the
    speculative run's clock starts (so it is never timed), and once per settings.

    Args:
        target: a :class:`~specviz.models.loading.LoadedModel`.
        drafter: the oracle drafter.
        prompt_ids, sampling, max_new_tokens, seed, eos, cache: the run's, as in :func:`make_generation`.
    """
    from specviz.drafters.oracle import recording_key

    stop = tuple(target.eos_token_ids) if eos else ()
    key = recording_key(prompt_ids, sampling, max_new_tokens, seed, stop, cache)
    if drafter.needs_recording(key):
        plain = make_generation(target, None, prompt_ids, 1, sampling, max_new_tokens, seed, instrument=False, eos=eos,
                                decode=False, cache=cache).run()
        drafter.set_recording(key, plain.token_ids)
    drafter.use(key)


def warm_up(target, drafter, prompt_ids, k, sampling, tokens: int = WARMUP_TOKENS, once: bool = False,
            branches: int = 1, tree_nodes: int | None = None, cache: str = "dynamic", should_end=None) -> bool:
    """One short plain run and, with a drafter, one short speculative run, untimed.

    Args:
        target: a :class:`~specviz.models.loading.LoadedModel`.
        drafter: a drafter or None.
        prompt_ids: a prompt to warm up on (its last 16 tokens are used unless ``tokens`` is the
            whole run, as with ``torch.compile``).
        k, sampling: the run's lookahead and sampling settings.
        tokens: tokens per warm-up run (:func:`default_warmup_tokens`).
        once: skip the warm-up if this target already did it with this kind of drafter (kept in
            ``target.warmed``, which lives and dies with the model in the model cache): the app
            warms up once per pair, the CLI and the bench before every measurement.
        branches, tree_nodes: the speculative run's tree shape (B > 1 warms up tree passes too).
        cache: the KV cache kind the runs will use (a static cache's passes have their own shapes).
        should_end: a callable checked after every round (a GPU job's deadline or Stop); once true
            the warm-up ends there and is not recorded as done (``once`` runs it again next time).

    A suffix drafter's warm-up output is not kept in its history, nor what a Token Recycling
    table learnt from it (a made-up earlier output of the run about to be measured).

    Returns:
        True if it ran to its end, False if ``once`` skipped it or ``should_end`` cut it short.
    """
    key = f"{getattr(drafter, 'name', 'plain')}|{sampling.greedy}|{branches}|{cache}"
    warmed = getattr(target, "warmed", None)
    if once and warmed is not None and key in warmed:
        return False
    ids = list(prompt_ids) if tokens > WARMUP_TOKENS else list(prompt_ids)[-16:]
    ended = False
    with stores_kept(drafter):
        for d in (None, drafter) if drafter is not None else (None,):
            run = make_generation(target, d, ids, k, sampling, tokens, seed=0, branches=branches,
                                  tree_nodes=tree_nodes, cache=cache)
            ended = ended or any(should_end is not None and should_end() for _ in run)
    if warmed is not None and not ended:
        warmed.add(key)
    return not ended


def saved_trace(run, request, target, drafter, baseline: PlainBaseline | None) -> dict:
    """A finished (or stopped) run in the saved-trace format (:func:`specviz.figures.trace.trace_to_dict`):
    its rounds, the settings, model names, device, dtype, library versions, the plain baseline
    and the EOS ids, which is what the app needs to replay it without the models.

    Args:
        run: the :class:`~specviz.core.engine.Generation`.
        request: its :class:`~specviz.run.request.RunRequest`.
        target: the :class:`~specviz.models.loading.LoadedModel`.
        drafter: the drafter or None.
        baseline: the plain baseline it was compared with, or None.
    """
    import torch
    import transformers

    from specviz.figures.trace import trace_to_dict

    settings = {"prompt": request.prompt, "target": request.target, "draft": request.draft, "k": request.k,
                "temperature": request.sampling.temperature, "top_k": request.sampling.top_k,
                "top_p": request.sampling.top_p, "max_new_tokens": request.max_new_tokens, "seed": request.seed,
                "chat": request.chat, "branches": request.branches, "tree_nodes": request.tree_nodes,
                "cache": request.cache, "rule": request.rule}
    return trace_to_dict(
        run.rounds, settings=settings, target=target.name, drafter=getattr(drafter, "name", None),
        k=effective_k(request.k, drafter is not None), device=str(target.device),
        dtype="int4" if getattr(target, "weights", "dense") == "int4" else str(target.dtype).removeprefix("torch."),
        finish_reason=run.finish_reason, prefill_ms=run.prefill_ms,
        wall_s=run.elapsed_s, eos_token_ids=list(target.eos_token_ids),
        baseline=None if baseline is None else baseline.to_dict(),
        versions={"torch": torch.__version__, "transformers": transformers.__version__})


# --------------------------------------------------------------------------- request -> run
@dataclass
class PreparedRun:
    """A request ready to run: what every front-end needs before its first round.

    Attributes:
        request: the validated :class:`~specviz.run.request.RunRequest`.
        target: the :class:`~specviz.models.loading.LoadedModel`.
        drafter: the drafter, or None for plain decoding.
        prompt_ids: the encoded prompt (:func:`encode_prompt`), non-empty.
        stop_ids: the target's end-of-text ids (generation stops after one).
        label: the pair in words, e.g. ``"smollm2-135m-instruct ← prompt lookup (n-gram)"``.
        notes: sentences for the user about how the request was taken (e.g. a missing chat
            template), shown as a warning in the app and beside the figures in the CLI.
    """

    request: RunRequest
    target: object
    drafter: object | None
    prompt_ids: list[int]
    stop_ids: frozenset[int]
    label: str
    notes: list[str] = field(default_factory=list)

    def generation(self, speculative: bool = True, instrument: bool = True, eos: bool = True, decode: bool = True):
        """A fresh :class:`~specviz.core.engine.Generation` of this request: speculative with the drafter
        (the request's K, B and N), or plain decoding of the target with ``speculative=False``."""
        r = self.request
        # By name: K, the seed and the token limit are all ints, so a reordered signature must fail
        # loudly rather than swap them.
        return make_generation(target=self.target, drafter=self.drafter if speculative else None,
                               prompt_ids=self.prompt_ids, k=r.k, sampling=r.sampling,
                               max_new_tokens=r.max_new_tokens, seed=r.seed, instrument=instrument, eos=eos,
                               decode=decode, branches=r.branches, tree_nodes=r.tree_nodes, cache=r.cache,
                               rule=r.rule)

    def in_use(self):
        """A context manager pinning this run's target and draft model in the model cache while it
        runs (:func:`specviz.models.loading.in_use`): no other load evicts them meanwhile."""
        from specviz.models import loading as models

        return models.in_use(self.target, getattr(self.drafter, "model", None))

    def warm_up(self, once: bool = False, tokens: int | None = None, should_end=None) -> bool:
        """:func:`warm_up` with this request's settings (``tokens`` default: :data:`WARMUP_TOKENS`;
        ``should_end``: a deadline's check, as there)."""
        r = self.request
        return warm_up(target=self.target, drafter=self.drafter, prompt_ids=self.prompt_ids, k=r.k,
                       sampling=r.sampling, tokens=WARMUP_TOKENS if tokens is None else tokens, once=once,
                       branches=r.branches, tree_nodes=r.tree_nodes, cache=r.cache, should_end=should_end)


def encode_prompt(target, prompt: str, chat: bool) -> tuple[list[int], list[str]]:
    """The prompt's token ids under the one chat-template policy of every front-end.

    With ``chat`` and a target that has a chat template, the prompt is one user message with the
    assistant prefix (:meth:`specviz.models.loading.LoadedModel.encode`); with ``chat`` and no template it
    is used as plain text and a note says so (the app, the CLI and a sweep all do this).

    Args:
        target: a :class:`~specviz.models.loading.LoadedModel`.
        prompt: the user's text.
        chat: whether the chat template was asked for.

    Returns:
        ``(ids, notes)``: the ids (a non-empty list of ints) and 0 or 1 sentences.

    Raises:
        ValueError: if the prompt encodes to no tokens at all.
    """
    notes = []
    if chat and not target.has_chat_template:
        notes.append(f"{target.name} has no chat template: the prompt was used as plain text.")
        chat = False
    ids = list(target.encode(prompt, chat))
    if not ids:
        raise ValueError("the prompt is empty: it encodes to no tokens")
    return ids, notes


def check_prompt_tokens(n_tokens: int, n_chars: int, limit: int | None) -> None:
    """Refuse a prompt longer than ``limit`` tokens (chat template included; None: no limit).

    Characters are a poor measure of cost: 2,600 CJK characters can be 7,800 tokens while 4,000
    ASCII characters are under 900, so the character cap is only a cheap first guard.

    Raises:
        RequestError: naming both counts and the limit.
    """
    if limit is not None and n_tokens > limit:
        raise RequestError(f"the prompt is {n_tokens} tokens long ({n_chars} characters); the limit is {limit} tokens")


def prepare_run(request: RunRequest, progress=None, compile_mode: str | None = None, history=None,
                table=None) -> PreparedRun:
    """The one way from a validated request to a run: load the pair, encode the prompt, check its
    length in tokens, and name the pair.

    Args:
        request: from :func:`specviz.run.request.validate_request`.
        progress: optional ``(fraction, message)`` callback for loading (:func:`load_pair`).
        compile_mode: a ``torch.compile`` mode, or None (:func:`load_pair`).
        history: a suffix drafter's history (:func:`load_pair`); None: the process-wide one.
        table: a Token Recycling drafter's table (:func:`load_pair`); None: the process-wide one.

    The prompt's length in tokens is checked here, after the chat template, where it is known,
    against ``request.max_prompt_tokens`` (the limits the request was validated with, e.g.
    public mode's :data:`specviz.run.request.PUBLIC_LIMITS`).

    Returns:
        The :class:`PreparedRun`.

    Raises:
        RequestError: if the prompt is longer than ``request.max_prompt_tokens`` tokens.
        ValueError, specviz.models.loading.ModelLoadError, specviz.models.loading.IncompatiblePairError: from
            :func:`load_pair` and :func:`encode_prompt`.
    """
    target, drafter = load_pair(request.target, request.draft, request.device, request.dtype, progress,
                                compile_mode=compile_mode, history=history, table=table)
    prompt_ids, notes = encode_prompt(target, request.prompt, request.chat)
    check_prompt_tokens(len(prompt_ids), len(request.prompt), request.max_prompt_tokens)
    label = f"{target.name} ← {drafter.name}" if drafter is not None else f"{target.name}, plain decoding"
    return PreparedRun(request=request, target=target, drafter=drafter, prompt_ids=prompt_ids,
                       stop_ids=frozenset(target.eos_token_ids), label=label, notes=notes)


def baseline_key(prepared: PreparedRun) -> str:
    """What a plain baseline depends on (model, device, dtype, prompt ids, sampling, length,
    seed, KV cache kind): runs with equal keys can share one baseline measurement."""
    r, t = prepared.request, prepared.target
    return repr((t.source, str(t.device), str(t.dtype), prepared.prompt_ids, r.sampling, r.max_new_tokens, r.seed,
                 r.cache))


def baseline_steps(prepared: PreparedRun, known: Mapping[str, PlainBaseline] | None = None,
                   samples: int = DEFAULT_SAMPLES, should_end=None) -> Generator[str, None, PlainBaseline | None]:
    """Plain decoding of the prepared run's target, prompt and settings, timed ``samples`` times,
    as its speedup baseline (:func:`specviz.run.baseline.measure_baseline`: one full run, then short
    ones; the speedup's range comes from their spread). The app, the CLI's ``run`` and the sweeps
    all measure their baseline here.

    A generator: it yields one-line progress messages and returns the
    :class:`~specviz.figures.speedup.PlainBaseline` (None when no plain step was timed). When ``known``
    already holds a baseline under :func:`baseline_key`, it yields nothing and returns that one.
    Warm up first (:meth:`PreparedRun.warm_up`): the baseline is timed. ``should_end`` (a
    deadline's check) ends the timing early, returning None (:func:`specviz.run.baseline.measure_baseline`).
    """
    if known is not None and baseline_key(prepared) in known:
        return known[baseline_key(prepared)]
    return (yield from measure_baseline(lambda: prepared.generation(speculative=False), samples=samples,
                                        should_end=should_end))


def drain(steps: Generator):
    """Run a step generator (e.g. :func:`baseline_steps`) to its end; return what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as finished:
            return finished.value


# --------------------------------------------------------------------------- for a script
#: What :func:`prepare` runs when a script does not say: the offline model, prompt lookup, the
#: app's K, greedy decoding, the chat template.
SCRIPT_DEFAULTS = {"target": "smollm2-135m-instruct", "draft": "ngram", "k": 4, "temperature": 0.0, "top_k": 0,
                   "top_p": 1.0, "max_new_tokens": 128, "seed": 0, "chat": True}


def prepare(prompt: str, **settings) -> PreparedRun:
    """A run ready to go from a prompt and any of :func:`~specviz.run.request.validate_request`'s
    settings (``target``, ``draft``, ``k``, ``temperature``, ``top_k``, ``top_p``,
    ``max_new_tokens``, ``seed``, ``chat``, ``device``, ``dtype``, ``branches``, ``tree_nodes``,
    ``cache``, ``rule``); the rest are :data:`SCRIPT_DEFAULTS`. The same validation and loading as
    the app and the command line (:func:`prepare_run`).

    Returns:
        The :class:`PreparedRun`: ``.generation().run()`` runs it.

    Raises:
        RequestError: naming a malformed setting.
        ValueError, specviz.models.errors.ModelLoadError, specviz.models.errors.IncompatiblePairError:
            from loading the pair (:func:`prepare_run`).
    """
    return prepare_run(validate_request(prompt=prompt, **{**SCRIPT_DEFAULTS, **settings}))


def measure_plain(prepared: PreparedRun, samples: int = DEFAULT_SAMPLES) -> PlainBaseline | None:
    """The plain-decoding baseline of a prepared run, as the app and the command line measure it:
    a warm-up, then plain decoding of the same target, prompt and settings timed ``samples`` times
    (:func:`baseline_steps`). Pass it to :func:`specviz.figures.analysis.analyse_generation` for the
    measured speedup; None when no plain step could be timed."""
    prepared.warm_up()
    return drain(baseline_steps(prepared, samples=samples))
