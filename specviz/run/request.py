"""One validated request: the single place that checks and normalises a run's settings.

The app (its page and its Gradio API), the CLI and the bench all turn what a user sent into a
:class:`RunRequest` with :func:`validate_request`, with one set of limits (:class:`Limits`). A
malformed value — ``None``, ``"hot"``, NaN, a float where an integer belongs, a number out of
range — raises :class:`RequestError` with one line that names the setting, what it must be and
what was sent. Front-ends show that line as it is (``gr.Error`` in the app, ``specviz: error:``
on the command line).

Values arrive as whatever the caller had: Gradio sliders send floats (``4.0``), its API passes
JSON values through untouched, argparse gives ints and floats. Numeric strings (``"4"``,
``"0.7"``) are accepted; an integer setting accepts a float only when it is whole (``4.0``).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from specviz.models import memory
from specviz.run import pair_sizing
from specviz.drafters import DRAFTER_KINDS, drafter_kind, for_device, parse_drafter_spec
from specviz.core.kvcache import CACHE_KINDS
from specviz.core.sampling import RuleError, SamplingConfig, check_rule

__all__ = ["DEFAULT_LIMITS", "MODEL_FREE_DRAFTERS", "PUBLIC_LIMITS", "Limits", "PublicPolicy", "RequestError",
           "RunRequest", "ServerDevice", "check_drafter_device", "check_public_models",
           "pin_public_device",
           "public_mode", "public_policy", "to_float", "to_int", "validate_draft", "validate_request",
           "validate_sampling"]


class RequestError(ValueError):
    """A setting a user sent is malformed or out of range; the message is one line for them."""


@dataclass(frozen=True)
class Limits:
    """Bounds on a run's settings (inclusive).

    Attributes:
        max_k: largest lookahead K (draft tokens per round).
        max_new_tokens: most tokens one run may generate.
        max_prompt_chars: longest prompt (characters): a cheap first guard, checked before
            anything is loaded.
        max_prompt_tokens: longest prompt in tokens, chat template included, checked once the
            prompt is encoded (:func:`specviz.run.runner.prepare_run`); None: the model's context
            length decides. Tokens, not characters, are what a run costs: 2,600 CJK characters
            can be 7,800 tokens, 4,000 ASCII characters under 900.
        max_seed: largest seed (torch seeds are 64-bit).
        max_temperature: highest temperature.
        max_branches: most children per draft-tree node (B; 1 drafts chains).
        max_tree_nodes: most nodes per draft tree (N).
    """

    max_k: int = 16
    max_new_tokens: int = 1024
    max_prompt_chars: int = 20_000
    max_prompt_tokens: int | None = None
    max_seed: int = 2**63 - 1
    max_temperature: float = 100.0
    max_branches: int = 8
    max_tree_nodes: int = 64


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class RunRequest:
    """A run's settings after validation: every field has its type and lies within the limits.

    Attributes:
        prompt: the prompt text (non-empty after stripping; kept as typed).
        target: target model: offline name, local directory or hub id (stripped).
        draft: the drafter spec (``"none"``, ``"ngram"``, ``"int8"``, ``"early-exit:N"`` or a
            draft model), normalised by :func:`specviz.drafters.parse_drafter_spec`.
        k: lookahead K, 1..``max_k`` (kept when ``draft`` is ``"none"``; the engine ignores it).
        sampling: temperature, top-k and top-p, applied to draft and target alike.
        max_new_tokens: 1..``max_new_tokens`` of the limits.
        seed: the run's random seed, 0..``max_seed``.
        chat: apply the target's chat template.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        dtype: ``"auto"``, ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"int4"`` (every linear
            layer kept as int4 blocks on torch's CPU kernels, bfloat16 activations).
        branches: B, most children per draft-tree node, 1..``max_branches`` (1: chains).
        tree_nodes: N, most nodes per draft tree, K..``max_tree_nodes``, or None for the
            default (:func:`specviz.core.drafttree.default_tree_nodes`).
        max_prompt_tokens: the limits' ``max_prompt_tokens``, carried so that
            :func:`specviz.run.runner.prepare_run` checks the encoded prompt against the limits the
            request was validated with (None: no cap but the model's context).
        cache: the KV cache kind, ``"dynamic"`` or ``"static"`` (:data:`specviz.core.kvcache.CACHE_KINDS`;
            the same outputs, static passes of fixed shapes).
        rule: the verification rule, a name of :data:`specviz.core.sampling.RULES` (``"full"``,
            ``"one-hot"``, ``"exact-match"``, ``"block"`` or the lossy ``"relaxed-top-k"``).
    """

    prompt: str
    target: str
    draft: str
    k: int
    sampling: SamplingConfig
    max_new_tokens: int
    seed: int
    chat: bool = False
    device: str = "auto"
    dtype: str = "auto"
    branches: int = 1
    tree_nodes: int | None = None
    max_prompt_tokens: int | None = None
    cache: str = "dynamic"
    rule: str = "full"

    @property
    def plain(self) -> bool:
        """True when nothing is drafted (plain decoding)."""
        return drafter_kind(self.draft).plain

    def with_(self, **changes) -> RunRequest:
        """A copy with some fields replaced (not re-validated: pass validated values)."""
        return replace(self, **changes)

    def varied(self, setting: str, value, limits: Limits = DEFAULT_LIMITS) -> RunRequest:
        """A copy with one setting as a user typed it, checked as :func:`validate_request` checks
        it (an experiment varies one setting of a validated request). The other settings, the
        prompt-token cap among them, stay as the request was validated: pass ``limits`` no looser
        than those it was validated with.

        Args:
            setting: ``"temperature"``, ``"k"`` or ``"draft"``.
            value: the new value, of any type.
            limits: the bounds (the app's public mode passes tighter ones).

        Raises:
            RequestError: naming the setting, for a malformed value or a setting that cannot vary
                (a K above the held tree node budget among them).
        """
        if setting == "temperature":
            s = self.sampling
            return self.with_(sampling=validate_sampling(value, s.top_k, s.top_p, limits))
        if setting == "k":
            k = to_int("lookahead K", value, 1, limits.max_k)
            nodes = self.tree_nodes
            return self.with_(k=k, tree_nodes=None if nodes is None else to_int("tree nodes", nodes, k,
                                                                                 limits.max_tree_nodes))
        if setting == "draft":
            return self.with_(draft=validate_draft(value))
        raise RequestError(f"one of temperature, k or draft can vary, got {_describe(setting)}")


DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16", "int4")


# --------------------------------------------------------------------------- one value each
def _describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(name: str, value, what: str) -> float:
    """``value`` as a finite float, or RequestError naming the setting."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise RequestError(f"{name} must be {what}, got {_describe(value)}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RequestError(f"{name} must be {what}, got {_describe(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise RequestError(f"{name} must be {what}, got {value}")
    return value


def to_int(name: str, value, lo: int, hi: int | None = None) -> int:
    """An integer setting in ``[lo, hi]`` (``hi`` None: no upper bound).

    Raises:
        RequestError: for None, a bool, a non-numeric string, NaN/inf, a non-whole float, or a
            value out of range.
    """
    what = f"a whole number between {lo} and {hi}" if hi is not None else f"a whole number >= {lo}"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
    else:
        as_float = _number(name, value, what)
        if not as_float.is_integer():
            raise RequestError(f"{name} must be {what}, got {_describe(value)}")
        number = int(as_float)
    if number < lo or (hi is not None and number > hi):
        raise RequestError(f"{name} must be {what}, got {number}")
    return number


def to_float(name: str, value, lo: float, hi: float, lo_open: bool = False) -> float:
    """A real setting in ``[lo, hi]`` (or ``(lo, hi]`` with ``lo_open``).

    Raises:
        RequestError: for None, a bool, a non-numeric string, NaN/inf, or a value out of range.
    """
    what = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
    number = _number(name, value, what)
    if number < lo or number > hi or (lo_open and number == lo):
        raise RequestError(f"{name} must be {what}, got {number:g}")
    return number


def _choice(name: str, value, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise RequestError(f"{name} must be one of {', '.join(choices)}, got {_describe(value)}")
    return value.strip().lower()


def _text(name: str, value, limit: int, required: bool = True) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise RequestError(f"{name} must be text, got {_describe(value)}")
    if required and not value.strip():
        raise RequestError(f"the {name} is empty: type something" + (" or pick an example" if name == "prompt" else ""))
    if len(value) > limit:
        raise RequestError(f"the {name} is {len(value)} characters long; the limit is {limit}")
    return value


def _flag(name: str, value) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    raise RequestError(f"{name} must be true or false, got {_describe(value)}")


# --------------------------------------------------------------------------- the request
def validate_sampling(temperature, top_k, top_p, limits: Limits = DEFAULT_LIMITS) -> SamplingConfig:
    """Temperature (0 = greedy), top-k (0 = off, None counts as off) and top-p as a SamplingConfig.

    Raises:
        RequestError: for a malformed or out-of-range value.
    """
    t = to_float("temperature", temperature, 0.0, limits.max_temperature)
    k = 0 if top_k is None or top_k == "" else to_int("top-k", top_k, 0)
    p = to_float("top-p", top_p, 0.0, 1.0, lo_open=True)
    try:
        return SamplingConfig(temperature=t, top_k=k, top_p=p)
    except ValueError as err:  # SamplingConfig's own checks, in case they are stricter
        raise RequestError(str(err)) from None


def validate_draft(draft) -> str:
    """A drafter spec as typed, normalised (:func:`specviz.drafters.parse_drafter_spec`).

    Raises:
        RequestError: for a value that is not text or not a drafter spec.
    """
    if not isinstance(draft, str):
        raise RequestError(f"the drafter must be text such as ngram or none, got {_describe(draft)}")
    try:
        return parse_drafter_spec(draft)
    except ValueError as err:
        raise RequestError(str(err)) from None


def validate_request(
    *,
    prompt,
    target,
    draft,
    k,
    temperature,
    top_k,
    top_p,
    max_new_tokens,
    seed,
    chat=False,
    device="auto",
    dtype="auto",
    branches=1,
    tree_nodes=None,
    cache="dynamic",
    rule="full",
    limits: Limits = DEFAULT_LIMITS,
) -> RunRequest:
    """Check and normalise a run's settings (see the module docstring for what is accepted).

    Args:
        prompt, target, draft, k, temperature, top_k, top_p, max_new_tokens, seed, chat,
        device, dtype, branches, tree_nodes, cache, rule: as sent by the user (any type); see
            :class:`RunRequest`.
        limits: the bounds (the app's public mode passes tighter ones).

    Returns:
        The :class:`RunRequest`.

    Raises:
        RequestError: naming the first malformed setting, in the order of the arguments.
    """
    prompt = _text("prompt", prompt, limits.max_prompt_chars)
    target = _text("target model", target, 500).strip()
    draft = validate_draft(draft)
    k = to_int("lookahead K", k, 1, limits.max_k)
    sampling = validate_sampling(temperature, top_k, top_p, limits)
    max_new_tokens = to_int("max new tokens", max_new_tokens, 1, limits.max_new_tokens)
    seed = to_int("seed", seed, 0, limits.max_seed)
    chat = _flag("chat", chat)
    device = _choice("device", device, DEVICES)
    dtype = _choice("dtype", dtype, DTYPES)
    if dtype == "int4" and device == "cuda":
        raise RequestError("dtype int4 keeps the weights as int4 blocks for torch's CPU kernels: on a GPU choose "
                           "bfloat16 or float16")
    branches = to_int("branches", branches, 1, limits.max_branches)
    return RunRequest(
        prompt=prompt,
        target=target,
        draft=draft,
        k=k,
        sampling=sampling,
        max_new_tokens=max_new_tokens,
        seed=seed,
        chat=chat,
        device=device,
        dtype=dtype,
        branches=branches,
        tree_nodes=None if tree_nodes is None else to_int("tree nodes", tree_nodes, k, limits.max_tree_nodes),
        max_prompt_tokens=limits.max_prompt_tokens,
        cache=_choice("KV cache", cache, CACHE_KINDS),
        rule=validate_rule(rule, branches if not drafter_kind(draft).plain else 1),
    )


def validate_rule(rule, branches=1) -> str:
    """A verification rule as typed (:data:`specviz.core.sampling.RULES`), checked against the draft's
    shape (B > 1 drafts trees, which the chain-only ``"block"`` rule cannot verify).

    Raises:
        RequestError: one sentence, for an unknown rule or one that does not apply to trees.
    """
    name = rule.strip().lower() if isinstance(rule, str) else rule
    tree = isinstance(branches, int) and not isinstance(branches, bool) and branches > 1
    try:
        return check_rule(name, tree=tree).name
    except RuleError as err:
        raise RequestError(str(err)) from None


# --------------------------------------------------------------------------- public mode
PUBLIC_ENV = "SPECVIZ_PUBLIC"
MAX_RUN_ENV = "SPECVIZ_MAX_RUN_S"
PUBLIC_LIMITS = Limits(max_k=8, max_new_tokens=256, max_prompt_chars=16_000, max_prompt_tokens=1_024)
DEFAULT_PUBLIC_MAX_RUN_S = 60.0
PUBLIC_MAX_DRAWS = 4_000
#: Kinds of drafter that load no model of their own (``early-exit:N`` too: it reuses the target's
#: layers), read from :data:`specviz.drafters.DRAFTER_KINDS`.
MODEL_FREE_DRAFTERS = frozenset(spec for spec, kind in DRAFTER_KINDS.items() if not kind.needs_model)


@dataclass(frozen=True)
class PublicPolicy:
    """What a public deployment (a Hugging Face Space) allows.

    Attributes:
        limits: the tighter :class:`Limits` passed to :func:`validate_request`.
        max_run_s: wall-time cap of one run (seconds); a run past it stops with its tokens kept.
        max_draws: most draws of each kind in the "Is it lossless?" check.
    """

    limits: Limits = PUBLIC_LIMITS
    max_run_s: float = DEFAULT_PUBLIC_MAX_RUN_S
    max_draws: int = PUBLIC_MAX_DRAWS


def public_mode(env: Mapping[str, str] | None = None) -> bool:
    """True when ``SPECVIZ_PUBLIC`` (in ``env``, default ``os.environ``) is 1, true, yes or on."""
    env = os.environ if env is None else env
    return str(env.get(PUBLIC_ENV, "")).strip().lower() in ("1", "true", "yes", "on")


def public_policy(env: Mapping[str, str] | None = None) -> PublicPolicy:
    """The public-mode policy, with the run wall-time cap from ``SPECVIZ_MAX_RUN_S`` when that is a
    positive number of seconds (otherwise the default, 60 s)."""
    env = os.environ if env is None else env
    try:
        max_run_s = float(str(env.get(MAX_RUN_ENV, "")).strip())
    except ValueError:
        max_run_s = DEFAULT_PUBLIC_MAX_RUN_S
    if not math.isfinite(max_run_s) or max_run_s <= 0:
        max_run_s = DEFAULT_PUBLIC_MAX_RUN_S
    return PublicPolicy(max_run_s=max_run_s)


def check_public_models(target: str, draft: str, allowed_targets: Iterable[str], allowed_drafts: Iterable[str]) -> None:
    """Refuse, in public mode, a target or draft model outside the allowed (preset) ones.

    Runs before anything loads, so nothing is downloaded or read from disk for a refused name:
    free hub ids and local paths are refused unless they are exactly a preset's.

    Args:
        target: the request's target (stripped, as :func:`validate_request` returns it).
        draft: the request's normalised drafter spec; kinds that load no model of their own
            (:data:`MODEL_FREE_DRAFTERS`, ``needs_model`` false in the registry) are always allowed.
        allowed_targets, allowed_drafts: the preset target models and draft models.

    Raises:
        RequestError: naming the refused model and the allowed ones.
    """
    targets, drafts = sorted(set(allowed_targets)), sorted(set(allowed_drafts))
    if target not in targets:
        raise RequestError(f"public mode: the target model {_describe(target)} is not allowed; only the presets' "
                           f"models can run here ({', '.join(targets)})")
    if not drafter_kind(draft).needs_model:
        return
    if draft not in drafts:
        free = [kind.form.split(" (")[0] for kind in DRAFTER_KINDS.values() if not kind.needs_model]
        allowed = ", ".join([*drafts, *free])
        raise RequestError(f"public mode: the draft model {_describe(draft)} is not allowed; only the presets' "
                           f"drafters can run here ({allowed})")


@dataclass(frozen=True)
class ServerDevice:
    """Where a public server runs its models, chosen by the server, never by a visitor.

    Attributes:
        device: ``"cpu"`` or ``"cuda"``.
        dtypes: the dtypes it runs models in there, its choice for ``auto`` first
            (:func:`specviz.models.loading.native_dtypes`).
        model_bytes: the memory its models may fill there (the model cache's budget,
            :meth:`specviz.models.loading.ModelCache.budget`), or None when unknown.
    """

    device: str
    dtypes: tuple[str, ...]
    model_bytes: int | None = None


def check_drafter_device(draft: str, device: str, prefix: str = "") -> None:
    """Refuse, before anything loads, a drafter that does not run with the target on ``device``
    (:meth:`specviz.drafters.DrafterKind.runs_on`: the int8 self-draft on CUDA).

    Args:
        draft: the normalised drafter spec.
        device: ``"cpu"`` or ``"cuda"``, where the target will be.
        prefix: put before the sentence (``"public mode: "``).

    Raises:
        RequestError: naming the drafter, the device and the drafter that stands in for it there.
    """
    kind = drafter_kind(draft)
    if not kind.runs_on(device):
        stand_in, _ = for_device(draft, device)
        raise RequestError(f"{prefix}the {kind.spec} drafter does not run with the target on {device}; pick "
                           f"another drafter, such as {stand_in}")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def pin_public_device(request: RunRequest, server: ServerDevice) -> RunRequest:
    """Public mode: the request on the server's own device and dtype, or a refusal in one sentence.

    A visitor may send ``auto`` (or exactly what the server chose) for the device and one of the
    server's dtypes; anything else is refused before any work, as is a drafter that does not run
    on the server's device (the int8 self-draft on CUDA: :meth:`specviz.drafters.DrafterKind.runs_on`)
    and a pair whose weights would not fit the server's memory for models
    (:func:`specviz.run.pair_sizing.pair_fits`: parameter counts × bytes per parameter × headroom).

    Args:
        request: a validated request (its models already checked by :func:`check_public_models`).
        server: where and how the server runs models.

    Returns:
        The request with ``device`` and ``dtype`` set to the server's (never ``auto``).

    Raises:
        RequestError: naming the refused setting and what the server runs instead.
    """
    if request.device not in ("auto", server.device):
        raise RequestError(f"public mode: this server runs models on {server.device}, so the device "
                           f"{_describe(request.device)} cannot be chosen here (send auto)")
    dtype = server.dtypes[0] if request.dtype == "auto" else request.dtype
    if dtype not in server.dtypes:
        raise RequestError(f"public mode: this server runs models on {server.device} in "
                           f"{' or '.join(server.dtypes)}, so the dtype {_describe(request.dtype)} cannot be chosen "
                           "here (send auto)")
    check_drafter_device(request.draft, server.device, "public mode: ")
    kind = drafter_kind(request.draft)
    if not pair_sizing.pair_fits(request.target, request.draft, dtype, server.model_bytes):
        needed = pair_sizing.pair_bytes(request.target, request.draft, dtype) * memory.HEADROOM
        draft = (f"the draft model {_describe(request.draft)}" if kind.parameter == "model_name"
                 else f"the {kind.spec} drafter")
        raise RequestError(f"public mode: {request.target} with {draft} needs about {_gib(needed)} in {dtype} and "
                           f"this server has {_gib(server.model_bytes)} for models; pick a smaller model pair")
    return request.with_(device=server.device, dtype=dtype)
