"""From a validated request to runs: loading the pair, building generations, warming up.

The three front-ends (the app, ``python -m specviz run`` and ``bench``) go through these few
functions, so they load, warm up and build runs the same way:

* :func:`load_pair`: the target (a :class:`~specviz.models.LoadedModel`) and the drafter;
* :func:`make_generation`: a :class:`~specviz.engine.Generation` wired to them;
* :func:`warm_up`: one short plain run and one short speculative run before anything is timed
  (first calls allocate memory, pick kernels and, with ``torch.compile``, compile);
* :func:`plain_baseline`: the :class:`~specviz.analysis.PlainBaseline` of a finished plain run.
"""

from __future__ import annotations

from .analysis import PlainBaseline

__all__ = ["WARMUP_TOKENS", "default_warmup_tokens", "load_pair", "make_generation", "plain_baseline", "saved_trace",
           "warm_up"]

#: Tokens per warm-up run: enough for the first calls of every shape (prefill, one position,
#: K + 1 positions) to have happened.
WARMUP_TOKENS = 8


def default_warmup_tokens(max_new_tokens: int, compiled: bool = False) -> int:
    """Tokens per warm-up run: a few, or, for a ``torch.compile``-d model, the whole run, so that
    every graph (prefill, one position, K + 1 positions) is compiled before anything is timed."""
    return max_new_tokens if compiled else min(WARMUP_TOKENS, max_new_tokens)


def load_pair(target_spec: str, draft_spec: str, device: str = "auto", dtype: str = "auto", progress=None,
              compile_mode: str | None = None):
    """Load the target and build the drafter (None for ``none``).

    ``progress(fraction, message)`` is passed to :mod:`specviz.models`, which also logs each step
    at INFO level. With ``compile_mode`` (a ``torch.compile`` mode, e.g. ``"default"``) the
    target's forward and a model drafter's forward are compiled with
    :func:`specviz.models.compile_forward`; prompt lookup has no network to compile.

    Returns:
        ``(target, drafter)``: a :class:`~specviz.models.LoadedModel` and a drafter or None.

    Raises:
        ValueError, specviz.models.ModelLoadError, specviz.models.IncompatiblePairError: from
            :func:`specviz.models.load_model` and :func:`specviz.models.build_drafter`.
    """
    from . import models

    target = models.load_model(target_spec, device=device, dtype=dtype, progress=progress)
    drafter = models.build_drafter(draft_spec, target, device=device, dtype=dtype, progress=progress)
    if compile_mode:
        models.compile_forward(target.model, compile_mode)
        draft_model = getattr(drafter, "model", None)
        if draft_model is not None:
            models.compile_forward(draft_model, compile_mode)
    return target, drafter


def make_generation(target, drafter, prompt_ids, k, sampling, max_new_tokens, seed, instrument=True, eos=True,
                    decode=True, branches=1, tree_nodes=None):
    """A :class:`~specviz.engine.Generation` wired to a loaded target and drafter.

    Args:
        target: a :class:`~specviz.models.LoadedModel`.
        drafter: a drafter, or None for plain decoding.
        prompt_ids: the encoded prompt.
        k, sampling, max_new_tokens, seed, instrument, branches, tree_nodes: as in
            :class:`~specviz.engine.Generation` (B = 1 drafts chains).
        eos: stop at the target's EOS ids (the bench turns this off to generate equal lengths).
        decode: record each token's text.
    """
    from .engine import Generation

    vocab = getattr(drafter, "vocab_size", None) if drafter is not None else None
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
        instrument=instrument,
        branches=branches,
        tree_nodes=tree_nodes,
    )


def warm_up(target, drafter, prompt_ids, k, sampling, tokens: int = WARMUP_TOKENS, once: bool = False,
            branches: int = 1, tree_nodes: int | None = None) -> bool:
    """One short plain run and, with a drafter, one short speculative run, untimed.

    Args:
        target: a :class:`~specviz.models.LoadedModel`.
        drafter: a drafter or None.
        prompt_ids: a prompt to warm up on (its last 16 tokens are used unless ``tokens`` is the
            whole run, as with ``torch.compile``).
        k, sampling: the run's lookahead and sampling settings.
        tokens: tokens per warm-up run (:func:`default_warmup_tokens`).
        once: skip the warm-up if this target already did it with this kind of drafter (kept in
            ``target.warmed``, which lives and dies with the model in the model cache): the app
            warms up once per pair, the CLI and the bench before every measurement.
        branches, tree_nodes: the speculative run's tree shape (B > 1 warms up tree passes too).

    A suffix drafter's warm-up output is not kept in its history (it would be a made-up
    earlier output of the run about to be measured).

    Returns:
        True if it ran, False if ``once`` skipped it.
    """
    key = f"{getattr(drafter, 'name', 'plain')}|{sampling.greedy}|{branches}"
    warmed = getattr(target, "warmed", None)
    if once and warmed is not None and key in warmed:
        return False
    ids = list(prompt_ids) if tokens > WARMUP_TOKENS else list(prompt_ids)[-16:]
    history = getattr(drafter, "history", None)
    saved = list(history.sequences) if history is not None else None
    for d in (None, drafter) if drafter is not None else (None,):
        make_generation(target, d, ids, k, sampling, tokens, seed=0, branches=branches, tree_nodes=tree_nodes).run()
    if history is not None:
        history.clear()
        for sequence in saved:
            history.add(sequence)
    if warmed is not None:
        warmed.add(key)
    return True


def plain_baseline(plain_run) -> PlainBaseline | None:
    """The baseline of a finished plain :class:`~specviz.engine.Generation`: its mean step time and
    its tokens/s (:meth:`specviz.analysis.PlainBaseline.from_rounds`)."""
    return PlainBaseline.from_rounds(plain_run.rounds, plain_run.tokens_per_s)


def saved_trace(run, request, target, drafter, baseline: PlainBaseline | None) -> dict:
    """A finished (or stopped) run in the saved-trace format (:func:`specviz.trace.trace_to_dict`):
    its rounds, the settings, model names, device, dtype, library versions, the plain baseline
    and the EOS ids, which is what the app needs to replay it without the models.

    Args:
        run: the :class:`~specviz.engine.Generation`.
        request: its :class:`~specviz.request.RunRequest`.
        target: the :class:`~specviz.models.LoadedModel`.
        drafter: the drafter or None.
        baseline: the plain baseline it was compared with, or None.
    """
    import torch
    import transformers

    from .trace import trace_to_dict

    settings = {"prompt": request.prompt, "target": request.target, "draft": request.draft, "k": request.k,
                "temperature": request.sampling.temperature, "top_k": request.sampling.top_k,
                "top_p": request.sampling.top_p, "max_new_tokens": request.max_new_tokens, "seed": request.seed,
                "chat": request.chat, "branches": request.branches, "tree_nodes": request.tree_nodes}
    return trace_to_dict(
        run.rounds, settings=settings, target=target.name, drafter=getattr(drafter, "name", None),
        k=request.k if drafter is not None else 0, device=str(target.device),
        dtype=str(target.dtype).removeprefix("torch."), finish_reason=run.finish_reason, prefill_ms=run.prefill_ms,
        wall_s=run.elapsed_s, eos_token_ids=list(target.eos_token_ids),
        baseline=None if baseline is None else baseline.to_dict(),
        versions={"torch": torch.__version__, "transformers": transformers.__version__})
