"""The speculative sampling loop, and plain decoding through the same sampler.

One round of speculative sampling (Chen et al. 2023, Algorithm 2; Leviathan et al. 2023,
Algorithm 1):

1. the drafter proposes up to K tokens and the distributions they were drawn from;
2. the target scores the pending token and all K drafts in **one** forward pass (the verify pass),
   giving K + 1 distributions;
3. :func:`specviz.sampling.verify` accepts a prefix, then resamples one token from the residual
   distribution or, if all K survived, samples a bonus token;
4. both models' KV caches are cropped back to the committed tokens.

Cache bookkeeping. Each model's cache holds the committed tokens *except the last one* (the
"pending" token, whose next-token distribution nobody has computed yet). A round feeds each model
``committed[cache_length:]`` followed by any new tokens, so a cache that lags behind (a drafter
that proposed nothing, or the draft's K-th token that was never fed) catches up in the same
forward pass. After verification the target keeps ``old committed + accepted drafts``.

Plain decoding is the same loop with no drafter: one target pass, one token, ``kind="plain"``.

The engine knows nothing about tokenization beyond an optional ``decode`` callable used to put
text into the trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from .drafters import Drafter, crop_cache
from .sampling import SamplingConfig, logits_to_probs, residual_distribution, verify
from .analysis import PlainBaseline, RunAnalysis, analyse
from .trace import ACCEPTED, PLAIN, RESAMPLED, DraftedToken, EmittedToken, Round

__all__ = ["TOP_TOKENS", "ContextLengthError", "Generation", "IncrementalDecoder", "context_limit"]

#: Tokens kept per distribution for the token inspector (instrumented runs).
TOP_TOKENS = 10


class ContextLengthError(ValueError):
    """Raised before a run starts when prompt + new tokens would exceed a model's context."""


def context_limit(model) -> int | None:
    """A model's maximum number of positions (tokens), or None if its config does not say."""
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(getattr(config, "text_config", config), name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class IncrementalDecoder:
    """Text of each new token, robust to byte-level BPE pieces that only make sense together.

    The text of token i is ``decode(ids[j:i+1])`` minus ``decode(ids[j:i])`` for a short window
    ``j``, the approach text-generation-inference uses; an incomplete UTF-8 sequence (``\\ufffd``)
    is held back until the next token completes it.

    Args:
        decode: ``list[int] -> str`` (e.g. ``tokenizer.decode`` with special tokens skipped).
        window: number of earlier tokens decoded along with the new one.
    """

    def __init__(self, decode: Callable[[list[int]], str], window: int = 6) -> None:
        self.decode = decode
        self.window = window
        self.ids: list[int] = []
        self.emitted_upto = 0  # ids[:emitted_upto] have had their text handed out

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        start = max(0, self.emitted_upto - self.window)
        before = self.decode(self.ids[start : self.emitted_upto])
        after = self.decode(self.ids[start:])
        if after.endswith("\ufffd"):
            return ""
        self.emitted_upto = len(self.ids)
        return after[len(before) :]


@dataclass
class Generation:
    """One generation run, speculative or plain; iterate it to run it round by round.

    Args:
        target: the target causal LM (transformers model, eval mode).
        prompt_ids: the prompt's token ids (chat template and BOS already applied), non-empty.
        drafter: a :class:`~specviz.drafters.Drafter`, or None for plain decoding.
        k: lookahead K, the most tokens drafted per round (>= 1 when a drafter is given).
        sampling: sampling settings, applied to draft and target alike.
        max_new_tokens: tokens to emit at most (>= 1).
        seed: seed of the run's ``torch.Generator`` (on the target's device).
        eos_token_ids: ids that end the run when emitted (the EOS is kept as the last token).
        vocab_size: shared real vocabulary width; both models' logits are cut to it so a padded
            lm_head never yields an id the tokenizer lacks. Defaults to the target's logits width.
        decode: optional ``list[int] -> str`` for per-token text in the trace.
        instrument: record per-token probabilities and uniforms in the trace (the UI needs them;
            the benchmark measures their cost by turning them off).

    Iterating yields one :class:`~specviz.trace.Round` per target pass. Afterwards
    :attr:`tokens`, :attr:`finish_reason` and :meth:`analysis` describe the run; if iteration
    stopped early (an error, or the user pressed Stop) they describe what was produced so far. A
    Generation runs once: iterating it a second time raises :class:`RuntimeError`.

    Raises (while iterating):
        ContextLengthError: before any model call, if prompt + max_new_tokens exceeds a
            model's context length.
        specviz.sampling.NonFiniteLogitsError: if a model produces NaN/+inf logits.
        ValueError: for an empty prompt or out-of-range K / max_new_tokens.
    """

    target: object
    prompt_ids: list[int]
    drafter: Drafter | None = None
    k: int = 4
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 64
    seed: int = 0
    eos_token_ids: tuple[int, ...] = ()
    vocab_size: int | None = None
    decode: Callable[[list[int]], str] | None = None
    instrument: bool = True

    def __post_init__(self) -> None:
        self.rounds: list[Round] = []
        self.tokens: list[EmittedToken] = []
        self.finish_reason: str | None = None
        self.wall_s = 0.0
        self.prefill_ms = 0.0
        self._t_start: float | None = None
        self._paused_s = 0.0  # seconds the consumer held the generator between rounds
        self._started = False

    # ----------------------------------------------------------------- public summaries
    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def token_ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def elapsed_s(self) -> float:
        """Generation wall time so far (s): prefill and rounds, not the consumer's pauses."""
        if self.finish_reason is None and self._t_start is not None:
            return time.perf_counter() - self._t_start - self._paused_s
        return self.wall_s

    @property
    def tokens_per_s(self) -> float:
        """Emitted tokens ÷ :attr:`elapsed_s` (tokens/s), 0 before any time has passed."""
        elapsed = self.elapsed_s
        return len(self.tokens) / elapsed if elapsed > 0 else 0.0

    def analysis(self, baseline: PlainBaseline | None = None) -> RunAnalysis:
        """Every derived figure of the rounds so far (:func:`specviz.analysis.analyse`)."""
        return analyse(self.rounds, self.k if self.drafter is not None else 0, self.elapsed_s, self.prefill_ms,
                       baseline)

    # ----------------------------------------------------------------- the loop
    def _check(self) -> None:
        if not self.prompt_ids:
            raise ValueError("the prompt is empty: give at least one token")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.drafter is not None and not 1 <= self.k <= 64:
            raise ValueError(f"lookahead K must be between 1 and 64, got {self.k}")
        # The longest forward pass covers the prompt and max_new_tokens - 1 new tokens (drafts are
        # capped by the remaining budget); one more position keeps the check simple and safe.
        needed = len(self.prompt_ids) + self.max_new_tokens
        models = [("target", self.target)]
        if self.drafter is not None and getattr(self.drafter, "model", None) is not None:
            models.append(("draft", self.drafter.model))
        for role, model in models:
            limit = context_limit(model)
            if limit is not None and needed > limit:
                raise ContextLengthError(
                    f"prompt ({len(self.prompt_ids)} tokens) + max new tokens ({self.max_new_tokens})"
                    + f" = {needed} exceeds the {role} model's context length of {limit} tokens"
                )

    def __iter__(self) -> Iterator[Round]:
        if self._started:
            raise RuntimeError("a Generation runs once: make a new one to run again")
        self._started = True
        self._check()
        self._setup()
        self._t_start = time.perf_counter()
        self._prefill()
        self.prefill_ms = (time.perf_counter() - self._t_start) * 1e3
        while self.finish_reason is None:
            round_ = self._round()
            if self.finish_reason is not None:
                self.wall_s = time.perf_counter() - self._t_start - self._paused_s
            # Time spent by the consumer between rounds (rendering, charts, streaming) is not
            # generation time: leave it out so the UI's work never counts against the run.
            t_yield = time.perf_counter()
            yield round_
            self._paused_s += time.perf_counter() - t_yield

    def _setup(self) -> None:
        from transformers import DynamicCache

        self._device = next(self.target.parameters()).device
        self._vocab = self.vocab_size or self.target.get_output_embeddings().weight.shape[0]
        self._generator = torch.Generator(device=self._device).manual_seed(self.seed)
        self._decoder = IncrementalDecoder(self.decode) if self.decode else None
        self._eos = set(self.eos_token_ids)
        self._committed = list(self.prompt_ids)
        self._cache = DynamicCache()
        self._texts: dict[int, str] = {}

    def _target_forward(self, ids: list[int], keep: int) -> torch.Tensor:
        """Logits ``(keep, V)`` of the target's last ``keep`` positions after feeding ``ids``."""
        inp = torch.tensor([ids], dtype=torch.long, device=self._device)
        with torch.inference_mode():
            out = self.target(input_ids=inp, cache=self._cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0, :, : self._vocab]

    def _prefill(self) -> None:
        # Everything but the last prompt token: the first round feeds that one.
        if len(self._committed) > 1:
            self._target_forward(self._committed[:-1], 1)
        if self.drafter is not None:
            self.drafter.prefill(self._committed[:-1])

    def _draft(self, k_round: int) -> tuple[list[int], torch.Tensor, int]:
        if k_round > 0:
            return self.drafter.propose(self._committed, k_round, self.sampling, self._generator)
        return [], torch.empty(0, self._vocab), 0

    def _verify(self, drafts: list[int], p_draft: torch.Tensor):
        """One target pass over the pending token and the drafts, the accept test, and the
        rollback of both caches to the committed tokens plus the accepted drafts."""
        n_old = len(self._committed)
        logits = self._target_forward(self._committed[self._cache.get_seq_length() :] + drafts, len(drafts) + 1)
        p_target = logits_to_probs(logits, self.sampling)
        draft_ids = torch.tensor(drafts, dtype=torch.long, device=self._device)
        result = verify(draft_ids, p_draft.to(self._device), p_target, self._generator)
        crop_cache(self._cache, n_old + result.n_accepted)
        if self.drafter is not None:
            self.drafter.rollback(n_old + result.n_accepted)
        return result, p_target

    def _round(self) -> Round:
        """Draft, verify, and record one round; commits its tokens and sets finish_reason."""
        remaining = self.max_new_tokens - len(self.tokens)
        # Never draft past the length limit: K' + 1 tokens at most fill it exactly.
        k_round = min(self.k, remaining - 1) if self.drafter is not None else 0
        t0 = time.perf_counter()
        drafts, p_draft, draft_steps = self._draft(k_round)
        t1 = time.perf_counter()
        result, p_target = self._verify(drafts, p_draft)
        t2 = time.perf_counter()
        round_ = self._record(drafts, result, k_round)
        if self.instrument:
            self._record_distributions(round_, p_draft, p_target, result)
        round_.draft_ms, round_.draft_steps = (t1 - t0) * 1e3, draft_steps
        round_.verify_ms = (t2 - t1) * 1e3
        self.tokens.extend(round_.emitted)
        self._committed.extend(t.id for t in round_.emitted)
        self.rounds.append(round_)
        if self.finish_reason is None and len(self.tokens) >= self.max_new_tokens:
            self.finish_reason = "length"
        round_.other_ms = (time.perf_counter() - t2) * 1e3
        round_.elapsed_s = time.perf_counter() - self._t_start - self._paused_s
        return round_

    def _record(self, drafts: list[int], result, k_round: int) -> Round:
        """The round's trace record: drafted tokens with their tests, and the emitted tokens,
        cut at an EOS (nothing after it, no bonus token)."""
        new_ids = drafts[: result.n_accepted] + [result.next_token]
        kinds = [ACCEPTED] * result.n_accepted + [(result.next_kind if drafts else PLAIN)]
        p_new = (result.p_target_drafted[: result.n_accepted].tolist() if self.instrument
                 else [0.0] * result.n_accepted)
        p_new.append(result.next_p_target)
        for position, token_id in enumerate(new_ids):
            if token_id in self._eos:
                new_ids, kinds, p_new = new_ids[: position + 1], kinds[: position + 1], p_new[: position + 1]
                self.finish_reason = "eos"
                break
        # An EOS inside the accepted prefix also ends the bookkeeping there: drafts past it
        # never reach the output, so they count as neither proposed nor accepted, and
        # accepted + resampled + bonus + plain always equals the emitted tokens.
        n_accepted = min(result.n_accepted, len(new_ids))
        round_ = Round(index=len(self.rounds), n_accepted=n_accepted, k=k_round)
        if drafts and self.instrument:
            round_.drafted = self._drafted_records(drafts, result)
        elif drafts:
            round_.drafted = [DraftedToken(t, "", 0.0, 0.0, 0.0, 0.0, i < result.n_accepted, i <= result.n_accepted,
                                           parent=i - 1) for i, t in enumerate(drafts)]
        if n_accepted < result.n_accepted:
            round_.drafted = round_.drafted[:n_accepted]
        for token_id, kind, p in zip(new_ids, kinds, p_new):
            emitted = EmittedToken(id=token_id, text=self._decoder.push(token_id) if self._decoder else "",
                                   kind=kind, p_target=p, round=round_.index)
            if kind == RESAMPLED:
                emitted.rejected_id = drafts[result.n_accepted]
                emitted.rejected_text = round_.drafted[result.n_accepted].text
            round_.emitted.append(emitted)
        return round_

    def _top(self, probs: torch.Tensor) -> list[list]:
        """``[[id, text, probability], ...]`` of the :data:`TOP_TOKENS` most likely ids of each row of
        ``probs`` ``(rows, V)``, zero-probability ids left out (a point-mass row keeps one)."""
        values, ids = torch.topk(probs, min(TOP_TOKENS, probs.shape[-1]), dim=-1)
        rows = []
        for row_values, row_ids in zip(values.tolist(), ids.tolist()):
            rows.append([[i, self._text_of(i), p] for i, p in zip(row_ids, row_values) if p > 0])
        return rows

    def _text_of(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.decode([token_id]) if self.decode else ""
        return text

    def _record_distributions(self, round_: Round, p_draft, p_target, result) -> None:
        """The inspector's rows: top tokens under p_draft and p_target at each drafted position, and
        the distribution the target's own token was drawn from (residual or p_target)."""
        n = len(round_.drafted)
        if n:
            top_target = self._top(p_target[:n])
            for token, top_d, top_t in zip(round_.drafted, self._top(p_draft[:n].to(p_target.device)), top_target):
                token.top_draft, token.top_target = top_d, top_t
        last = round_.emitted[-1]
        if last.kind == ACCEPTED:  # an EOS ended the round inside the accepted drafts
            return
        if last.kind == RESAMPLED:
            source = residual_distribution(p_target[result.n_accepted], p_draft[result.n_accepted].to(p_target.device))
        else:
            source = p_target[result.n_accepted]
        last.p_source = float(source[last.id])
        last.top_source = self._top(source.view(1, -1))[0]

    def _drafted_records(self, drafts: list[int], result) -> list[DraftedToken]:
        p_target = result.p_target_drafted.tolist()
        p_draft = result.p_draft_drafted.tolist()
        accept = result.accept_prob.tolist()
        uniforms = result.uniforms.tolist()
        return [
            DraftedToken(
                id=token_id,
                text=self._text_of(token_id),
                p_draft=p_draft[i],
                p_target=p_target[i],
                accept_prob=accept[i],
                uniform=uniforms[i],
                accepted=i < result.n_accepted,
                tested=i <= result.n_accepted,
                parent=i - 1,
            )
            for i, token_id in enumerate(drafts)
        ]

    def run(self) -> Generation:
        """Run to completion and return self."""
        for _ in self:
            pass
        return self

