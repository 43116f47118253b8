"""A run's settings, once: the ordered fields the page and the Gradio API send, and the one way
from their values to a validated :class:`~specviz.run.request.RunRequest`.

Every model callback (/run, /lossless, /sweep, /side_by_side) takes the fields it needs as one
parameter per field, named as here (API callers pass them by keyword), and builds its request with
:func:`request_from`. :func:`spread` gives a callback written over a ``values`` dict that flat
signature, so the list of fields is written only in :data:`FIELDS`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from specviz.drafters import DRAFTER_KINDS, drafter_kind
from specviz.run.request import (RequestError, RunRequest, check_drafter_device, check_public_models, pin_public_device, to_int,
                       validate_request)
from specviz.ui.serve import settings
from specviz.ui.serve.user_errors import user_errors


@dataclass(frozen=True)
class Field:
    """One run setting: its parameter name (the Run tab's component of the same name sends it)
    and its default for API callers (``inspect.Parameter.empty``: required)."""

    name: str
    default: object = inspect.Parameter.empty


#: The run's settings in the order the page and the API send them.
FIELDS = (
    Field("prompt"), Field("target_id"), Field("drafter_kind"), Field("draft_model"), Field("early_exit_layers"),
    Field("k"), Field("temperature"), Field("top_k"), Field("top_p"), Field("max_new_tokens"), Field("seed"),
    Field("chat"), Field("device"), Field("dtype"), Field("branches", 1), Field("tree_nodes", 0),
    Field("rule", "full"),
)
NAMES = tuple(f.name for f in FIELDS)
#: The settings an experiment or a comparison takes from the Run tab: it sets its own token
#: count, and it runs chains.
SHARED = tuple(n for n in NAMES if n not in ("max_new_tokens", "branches", "tree_nodes"))


def drafter_spec(drafter_kind, draft_model, early_exit_layers) -> str:
    """The drafter spec from the page's three controls (menu, model id, layer count).

    Raises:
        RequestError: an unknown kind, a missing draft model, or a bad layer count.
    """
    if drafter_kind not in DRAFTER_KINDS:
        raise RequestError(f"the drafter must be one of {', '.join(DRAFTER_KINDS)}, got {drafter_kind!r}")
    parameter = DRAFTER_KINDS[drafter_kind].parameter
    if parameter == "model_name":
        if not isinstance(draft_model, str) or not draft_model.strip():
            raise RequestError("choose a draft model: give its hub id or local directory, or pick another drafter")
        return draft_model.strip()
    if parameter == "layers":
        return f"early-exit:{to_int('early-exit layers', early_exit_layers, 1, 256)}"
    return drafter_kind


def spec_fields(spec: str) -> dict:
    """The page's drafter controls for a normalised spec, by field name (the inverse of
    :func:`drafter_spec`): ``drafter_kind``, and ``draft_model`` or ``early_exit_layers`` for a
    kind with a parameter."""
    kind = drafter_kind(spec)
    if kind.parameter == "model_name":
        return {"drafter_kind": kind.spec, "draft_model": spec}
    if kind.parameter == "layers":
        return {"drafter_kind": kind.spec, "early_exit_layers": int(spec.partition(":")[2])}
    return {"drafter_kind": kind.spec}


def request_from(values: Mapping, public: bool) -> RunRequest:
    """The page's (or an API caller's) values, by field name, as a validated request.

    ``max_new_tokens``, ``branches``, ``tree_nodes`` and ``rule`` may be absent (1, a chain, the
    default budget, the full rule). In public mode the tighter public limits apply, only the presets' models are
    allowed, and the server's own device and dtype are used (a visitor's other choice, a drafter
    that does not run there or a pair that does not fit its memory is refused:
    :func:`specviz.run.request.pin_public_device`). In every mode a drafter that does not run with
    the target on its device is refused (:func:`specviz.run.request.check_drafter_device`). These
    checks come before anything loads, so nothing is downloaded or read for a refused request.

    Raises:
        gr.Error: saying which value is wrong and why.
    """
    branches, tree_nodes = values.get("branches", 1), values.get("tree_nodes")
    with user_errors():
        request = validate_request(
            prompt=values["prompt"], target=values["target_id"],
            draft=drafter_spec(values["drafter_kind"], values["draft_model"], values["early_exit_layers"]),
            k=values["k"], temperature=values["temperature"], top_k=values["top_k"], top_p=values["top_p"],
            max_new_tokens=values.get("max_new_tokens", 1), seed=values["seed"], chat=values["chat"],
            device=values["device"], dtype=values["dtype"], limits=settings.limits(public),
            branches=1 if branches in (None, "") else branches,
            tree_nodes=None if tree_nodes in (None, "", 0, 0.0, "0") else tree_nodes,
            rule=values.get("rule") or "full")
        if public:
            check_public_models(request.target, request.draft, *settings.public_allowed())
            request = pin_public_device(request, settings.public_server())
        check_drafter_device(request.draft, settings.target_device(request.device))
    return request


def flag_value(name: str, value) -> bool:
    """A checkbox value as sent by the page or an API caller (true/false, 1/0, None = false).

    Raises:
        RequestError: anything else.
    """
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (int, str)) and str(value).strip().lower() in ("1", "0", "true", "false"):
        return str(value).strip().lower() in ("1", "true")
    raise RequestError(f"{name} must be true or false, got {value!r}")


def spread(names: tuple[str, ...]):
    """Decorator: ``fn(..., values, ...)`` becomes a callable with one parameter per field of
    ``names`` (in :data:`FIELDS` order, with their defaults) where ``values`` stood, and hands
    ``fn`` those values as a dict. Gradio reads the flat signature for the API's parameter names;
    generators stay generators (streaming outputs)."""
    chosen = [f for f in FIELDS if f.name in names]

    def decorate(fn):
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index("values")
        flat = [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default) for f in chosen]
        flat_signature = signature.replace(parameters=params[:at] + flat + params[at + 1:])

        def gather(args, kwargs) -> dict:
            bound = flat_signature.bind(*args, **kwargs)
            arguments = dict(bound.arguments)
            for f in chosen:  # absent optional fields get their defaults
                arguments.setdefault(f.name, f.default)
            values = {f.name: arguments.pop(f.name) for f in chosen}
            return {**arguments, "values": values}

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return (yield from fn(**gather(args, kwargs)))
        else:
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return fn(**gather(args, kwargs))
        wrapper.__signature__ = flat_signature
        return wrapper

    return decorate
