"""The drafter kinds: :data:`DRAFTER_KINDS`, how a spec names one, and how each is built.

Each :class:`DrafterKind` holds one kind's spec, menu label, note, help form and builder (the
``_build_*`` functions); :func:`parse_drafter_spec` normalises a spec, :func:`drafter_kind` finds
its kind, and :func:`spec_forms` / :func:`spec_help` describe them all. Adding a drafter is
adding one entry to :data:`DRAFTER_KINDS`. :func:`specviz.drafters.registry.build_drafter` calls the
builders.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.core.drafter import Drafter
from specviz.models import selfdraft
from specviz.models.loading import in_use, load_model, touch
from specviz.models.offline import OFFLINE_MODELS, is_repo_id
from specviz.drafters.draft_model import ModelDrafter, shared_vocab_size
from specviz.drafters.lookup import PromptLookupDrafter
from specviz.drafters.oracle import OracleDrafter
from specviz.drafters.recycle import RecycleDrafter
from specviz.drafters.suffix import SuffixDrafter

if TYPE_CHECKING:
    import torch

    from specviz.drafters.recycle import RecycleTable
    from specviz.drafters.suffix import SuffixHistory
    from specviz.models.loading import LoadedModel
    from specviz.models.offline import ProgressFn

__all__ = ["DEVICE_TYPES", "DRAFTER_KINDS", "DrafterKind", "build_drafter", "device_type", "drafter_kind", "for_device", "kinds_for",
           "parse_drafter_spec", "real_draft_phrase", "spec_forms", "spec_help"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrafterKind:
    """One kind of drafter: the one place its spec, description and construction live.

    The app's menu, ``--draft``'s help, :func:`parse_drafter_spec`, public mode's allowed
    drafters (:func:`specviz.run.request.check_public_models`) and
    :func:`specviz.drafters.registry.build_drafter` all read :data:`DRAFTER_KINDS`; adding a drafter is
    adding one entry there.

    Attributes:
        spec: the spec string (``--draft`` on the command line) and the key in the registry.
        label: the app's menu entry.
        note: one or two sentences on what it is and when it pays off, shown beside the menu.
        form: how a spec names it, for help and error messages (``"early-exit:N (first N
            layers)"``).
        build: ``(target, spec, device, dtype, progress) -> Drafter | None``: the drafter
            for a :class:`~specviz.models.loading.LoadedModel` target and a normalised spec.
        needs_model: loads a model of its own (a draft checkpoint); public mode allows only the
            presets' models for such kinds.
        can_branch: drafts trees (B > 1).
        parameter: what a spec of this kind carries besides the kind: ``"model_name"`` (the spec
            is a draft model's name), ``"layers"`` (a layer count, ``early-exit:N``), or None.
            A user interface asks for it beside its menu.
        lookup: prompt lookup's point-mass matches in the context: passes that found no match get
            a health note, and the lossless check says why its α is all or nothing.
        plain: drafts nothing (plain decoding, the baseline).
        aliases: other spellings of ``spec`` (lower case), normalised to it.
        pattern: for a parametrised kind, the regular expression its specs must match (group 1
            is the parameter: a number is normalised, other text such as a path kept as written;
            an optional group left out gives the bare spec); specs starting with ``spec`` are
            checked against it.
        devices: the device types (``"cpu"``, ``"cuda"``) the target may be on for this kind to
            draft (the int8 copy: the CPU only, PyTorch's dynamic int8 kernels being CPU-only).
            Every default, lesson, hint and menu that picks a drafter asks :meth:`runs_on`.
        stand_in: the spec that drafts in this kind's place on a device it does not run on (None:
            nothing stands in), chosen by :func:`for_device`.
        copy_bytes: bytes per target parameter of a copy of the target this kind builds at its
            peak (the int8 copy is quantized from a float32 deep copy: 4), for memory estimates.
        real_draft: drafts from a real distribution made from the target alone (the self-drafts):
            what the lossless check's hints suggest when a drafter proposes point masses or
            nothing.
        lane: the kind's short label in "Drafters side by side" (what that tab shows and API
            callers of /side_by_side send), or None for a kind not offered there: the learned
            heads and Token Recycling need a head or a warm table that a one-off lane would not
            show fairly, and suffix lookup learns across runs.
        replays: replays the target's own output for the same settings (the oracle): its figures
            are the ceiling the others are measured against (:mod:`specviz.diagnose.ceiling`).
    """

    spec: str
    label: str
    note: str
    form: str
    build: Callable[..., Drafter | None]
    needs_model: bool = False
    can_branch: bool = True
    parameter: str | None = None
    lookup: bool = False
    plain: bool = False
    aliases: tuple[str, ...] = ()
    pattern: str | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")
    stand_in: str | None = None
    copy_bytes: float = 0.0
    real_draft: bool = False
    lane: str | None = None
    replays: bool = False

    def runs_on(self, device) -> bool:
        """Whether this kind drafts for a target on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``
        or a ``torch.device``; see :func:`device_type`).

        Raises:
            ValueError: for a device that is neither (``"auto"`` must be resolved first).
        """
        return device_type(device) in self.devices

    def normalise(self, key: str) -> str | None:
        """``key`` (stripped) as this kind's spec, or None if it is not this kind.

        Raises:
            ValueError: for a parametrised kind's spec of the wrong form.
        """
        lowered = key.lower()
        if self.pattern is None:
            return self.spec if lowered in (self.spec, *self.aliases) else None
        if not lowered.startswith(self.spec):
            return None
        match = re.fullmatch(self.pattern, key, flags=re.IGNORECASE)
        if not match:  # the parameter's range depends on the target: checked when the draft is built
            raise ValueError(f"bad drafter spec {key!r}: write {self.form}; accepted: {spec_forms()}")
        if match.group(1) is None:  # an optional parameter left out
            return self.spec
        parameter = match.group(1)
        return f"{self.spec}:{int(parameter) if parameter.isdigit() else parameter}"


def _vocab(target) -> int:
    return min(target.vocab_size, target.logits_width)


def _special(target) -> frozenset[int]:
    """The target tokenizer's special tokens: lookup drafters never copy chat-template markup."""
    return frozenset(int(i) for i in getattr(getattr(target, "tokenizer", None), "all_special_ids", None) or [])


def _build_none(target, spec, device, dtype, progress):
    return None


def _build_ngram(target, spec, device, dtype, progress):
    return PromptLookupDrafter(_vocab(target), never=_special(target))


def _build_suffix(target, spec, device, dtype, progress):
    return SuffixDrafter(_vocab(target))


def _build_recycle(target, spec, device, dtype, progress):
    return RecycleDrafter(_vocab(target))


def _build_lookup_recycle(target, spec, device, dtype, progress):
    from specviz.drafters.combined import LookupThen

    # Trigram matches only, as in lookup+eagle: shorter ones are left to the table.
    lookup = PromptLookupDrafter(_vocab(target), max_ngram=3, min_ngram=3, never=_special(target))
    return LookupThen(RecycleDrafter(_vocab(target)), lookup,
                      label="recycle")


def _build_oracle(target, spec, device, dtype, progress):
    return OracleDrafter(_vocab(target))


def _build_int8(target, spec, device, dtype, progress):
    return ModelDrafter(selfdraft.int8_draft(target), _vocab(target), name="int8 copy of the target")


def _build_early_exit(target, spec, device, dtype, progress):
    n, total = int(spec.split(":")[1]), selfdraft.num_layers(target.model)
    return ModelDrafter(selfdraft.early_exit_draft(target, n), _vocab(target),
                        name=f"first {n} of {total} layers of the target")


def _build_eagle(target, spec, device, dtype, progress):
    from specviz.drafters.eagle import EagleDrafter, load_head, shipped_head_dir

    directory = spec.partition(":")[2] or shipped_head_dir(target.name)
    head = load_head(directory, target.model)
    return EagleDrafter(head, _vocab(target), name=f"EAGLE head {Path(directory).name}")


def _build_lookup_eagle(target, spec, device, dtype, progress):
    from specviz.drafters.combined import LookupThenEagle

    directory = spec.partition(":")[2]
    head = _build_eagle(target, f"eagle:{directory}" if directory else "eagle", device, dtype, progress)
    # Trigram matches only: on free text a shorter match is usually a common word, not a copy.
    return LookupThenEagle(head, PromptLookupDrafter(_vocab(target), max_ngram=3, min_ngram=3, never=_special(target)))


def _build_model(target, spec, device, dtype, progress):
    if not (spec in OFFLINE_MODELS or Path(spec).expanduser().is_dir() or is_repo_id(spec)):
        raise ValueError(f"unknown drafter spec {spec!r}; accepted: {spec_forms()}: an offline name "
                         f"({', '.join(OFFLINE_MODELS)}), a local directory or a hub id 'org/name'")
    draft = load_model(spec, device=device, dtype=dtype, progress=progress)
    if draft.model is target.model:
        logger.warning("draft %r is the target itself: every token will be accepted, nothing is saved", spec)
    return ModelDrafter(draft.model, shared_vocab_size(target, draft), name=f"draft model {spec}")


#: Every kind of drafter, in menu order: the one place their descriptions and builders live.
DRAFTER_KINDS: dict[str, DrafterKind] = {k.spec: k for k in (
    DrafterKind("ngram", "Prompt lookup (n-gram match in the context)",
                "Copies what followed the last earlier occurrence of the current few tokens in the prompt or "
                "output. Costs almost nothing and is exactly lossless: on copy-heavy prompts (fix typos, CSV → "
                "JSON) it is the drafter that pays off on a CPU, as long as nothing else busies the cores; on free "
                "text it pays only where the model repeats itself.",
                "ngram (prompt lookup)", _build_ngram, lookup=True, aliases=("prompt-lookup",),
                lane="Prompt lookup"),
    DrafterKind("suffix", "Suffix lookup (context and earlier outputs)",
                "Looks the current suffix up in the prompt, the output so far and earlier outputs of this process, "
                "and proposes the most frequent continuations (SuffixDecoding). Model-free and exactly lossless "
                "like prompt lookup; it pays off when requests repeat themselves (agents, templated answers).",
                "suffix (suffix lookup in the context and earlier outputs of this process)", _build_suffix,
                aliases=("suffix-decoding",)),
    DrafterKind("model", "Draft model (give its id below)",
                "A smaller language model of the target's family, with exactly its tokenizer (offline name, local "
                "directory or hub id; different tokenizers are refused): the paper's own setting. It pays off "
                "where one of its steps costs a small fraction of a target step and it agrees with the target: "
                "on a CPU, a draft a third the target's size on code; on a GPU only with far fewer layers than "
                "the target, since eager decoding there is launch-bound (c ≈ draft layers ÷ target layers).",
                "a draft model (offline name, directory or hub id) sharing the target's tokenizer", _build_model,
                needs_model=True, parameter="model_name", lane="Draft model (Run tab's)"),
    DrafterKind("int8", "Self-draft: int8 copy of the target (teaching)",
                "The target itself, quantized to int8 (CPU only). It agrees with the target often, but each of its "
                "steps costs most of a target step, so it shows a high α *without* a speedup: the 'good draft, "
                "too expensive' case.",
                "int8 (quantized copy of the target)", _build_int8, devices=("cpu",), stand_in="early-exit:4",
                copy_bytes=4.0, real_draft=True, lane="int8 self-draft"),
    DrafterKind("early-exit", "Self-draft: first N layers of the target (teaching)",
                "The target's first N layers feeding its final norm and output head, sharing its weights, with no "
                "training: it almost never agrees with the target (α ≈ 0). The 'poorly aligned draft' case: "
                "nearly every pass is wasted.",
                "early-exit:N (first N layers)", _build_early_exit, parameter="layers",
                pattern=r"early-exit:(\d+)", real_draft=True, lane="Early-exit self-draft"),
    DrafterKind("eagle", "Learned head on the target's features (EAGLE)",
                "A one-layer head trained on the target's own answers that reads the target's last hidden "
                "state (EAGLE): a draft for free text where lookup finds nothing; exactly lossless, since the "
                "head reports the distribution it samples from, so its drafts carry fractional acceptance "
                "probabilities. The one shipped for SmolLM2-135M is cheap but agrees with the target on well "
                "under half of the tokens, so on a CPU it pays little or not at all; the run's own α and c say "
                "how it did. Train one with python -m specviz train-draft.",
                "eagle[:DIR] (a learned head on the target's features: the shipped one, or a head directory)",
                _build_eagle, needs_model=True, pattern=r"eagle(?::(.+))?"),
    DrafterKind("lookup+eagle", "Prompt lookup, else the learned head",
                "Copies from the context where a trigram of it repeats (prompt lookup), and lets the learned "
                "head (EAGLE) draft everywhere else: the copy machine for copy-heavy text, the head for free "
                "text; a tree takes branches from both. Exactly lossless: each node is tested against the "
                "distribution it was drawn from.",
                "lookup+eagle[:DIR] (prompt lookup, else the learned head: the shipped one, or a head directory)",
                _build_lookup_eagle, needs_model=True, pattern=r"lookup\+eagle(?::(.+))?"),
    DrafterKind("recycle", "Token Recycling (the target's own top-k next tokens)",
                "Drafts a tree by walking a table of the target's own top 8 next tokens after each token, read "
                "from the verify passes it already ran (Token Recycling, Luo et al. 2025): no model, no training, "
                "exactly lossless, and unlike prompt lookup it drafts on free text too; it starts empty for you "
                "(no warm start here: that costs a pass over 2,000 tokens) and learns from every run of your "
                "session, so try it as a tree (B ≥ 2) and run twice.",
                "recycle (Token Recycling: a table of the target's own top-k next tokens)", _build_recycle),
    DrafterKind("lookup+recycle", "Prompt lookup, else Token Recycling",
                "Copies from the context where a trigram of it repeats (prompt lookup), and drafts from the "
                "Token Recycling table everywhere else; a tree takes branches from both. Model-free and exactly "
                "lossless.",
                "lookup+recycle (prompt lookup, else Token Recycling; trees from both)", _build_lookup_recycle),
    DrafterKind("oracle", "Oracle: the target's own output, replayed (the ceiling)",
                "Before the run the target writes its own answer to the prompt with the same settings and seed "
                "(plain decoding, untimed); the run then replays that answer as its draft. A drafter cannot do "
                "better: it costs nothing (c ≈ 0), so its tokens per pass and speedup are the ceiling of this "
                "machine's verify pass at this K. At T = 0 every pass keeps all K drafts; at T > 0 a replayed "
                "token is one sample of the target, kept with probability p_target(x).",
                "oracle (the target's own output replayed: the ceiling)", _build_oracle, can_branch=False, replays=True,
                lane="Oracle: the target's own output, replayed (the ceiling)"),
    DrafterKind("none", "None: plain decoding of the target",
                "No drafting: the target decodes one token per forward pass, the baseline every speedup is "
                "measured against.",
                "none (plain decoding)", _build_none, can_branch=False, plain=True, aliases=("",),
                lane="None (plain decoding)"),
)}

#: The kind a spec naming none of the others is: a draft model.
_MODEL_KIND = "model"


def spec_forms() -> str:
    """The accepted drafter specs in one line, in registry order, the draft model last."""
    named = [k.form.split(" (")[0] for k in DRAFTER_KINDS.values() if k.spec != _MODEL_KIND]
    order = sorted(named, key=lambda form: form != "none")  # none first, as users look for it
    return ", ".join(order) + ", or " + DRAFTER_KINDS[_MODEL_KIND].form


def spec_help() -> str:
    """``--draft``'s help: every kind's form and what it is."""
    return ", ".join(k.form for k in DRAFTER_KINDS.values())


def drafter_kind(spec: str) -> DrafterKind:
    """The kind of a normalised spec (:func:`parse_drafter_spec`): the draft model for any name."""
    for kind in DRAFTER_KINDS.values():
        if kind.spec != _MODEL_KIND and (spec == kind.spec or (kind.pattern and spec.startswith(kind.spec + ":"))):
            return kind
    return DRAFTER_KINDS[_MODEL_KIND]


def parse_drafter_spec(spec: str) -> str:
    """Normalise a drafter spec by :data:`DRAFTER_KINDS`: a kind's spec or alias → its spec
    (``""`` → ``"none"``, ``"prompt-lookup"`` → ``"ngram"``), a parametrised form checked and
    normalised (``"early-exit:03"`` → ``"early-exit:3"``); anything else is a draft model name,
    kept stripped (whether it exists is found out when it loads).

    Raises:
        ValueError: for a non-string, a parametrised kind's spec of the wrong form
            (``early-exit`` without a layer count), or the menu's ``"model"`` entry with no model
            named.
    """
    if not isinstance(spec, str):
        raise ValueError(f"the drafter spec must be text; accepted: {spec_forms()}")
    key = spec.strip()
    if key.lower() == _MODEL_KIND:
        raise ValueError("choose a draft model: give its hub id or local directory, or pick another drafter")
    for kind in DRAFTER_KINDS.values():
        if kind.spec != _MODEL_KIND:
            normalised = kind.normalise(key)
            if normalised is not None:
                return normalised
    return key


# --------------------------------------------------------------------------- devices
#: The device types a target can be on, as :func:`device_type` names them.
DEVICE_TYPES = ("cpu", "cuda")
_DEVICE_WORDS = {"cpu": "the CPU", "cuda": "a CUDA GPU"}


def device_type(device) -> str:
    """``"cpu"`` or ``"cuda"`` for ``"cpu"``, ``"cuda"``, ``"cuda:N"`` (or ``"cpu:N"``) or a ``torch.device``.

    Raises:
        ValueError: for anything else (``"auto"`` among them: resolve it first, e.g. with
            :func:`specviz.models.loading.resolve_device`).
    """
    match = re.fullmatch(r"(cpu|cuda)(?::\d+)?", str(device).strip().lower())
    if not match:
        raise ValueError(f"unknown device {device!r}: use cpu or cuda")
    return match.group(1)


def kinds_for(device) -> list[DrafterKind]:
    """The kinds that draft for a target on ``device``, in menu order (:data:`DRAFTER_KINDS`)."""
    return [kind for kind in DRAFTER_KINDS.values() if kind.runs_on(device)]


def for_device(spec: str, device) -> tuple[str, str | None]:
    """The spec to draft with for a target on ``device``: ``spec`` itself where its kind runs
    there, else its kind's ``stand_in``, with one sentence saying which stands in for which.

    Args:
        spec: a normalised drafter spec (:func:`parse_drafter_spec`).
        device: where the target is (see :func:`device_type`).

    Returns:
        ``(spec, None)`` or ``(stand-in spec, sentence)``.

    Raises:
        ValueError: for an unknown device, or a kind that does not run there and has no stand-in.
    """
    kind = drafter_kind(spec)
    if kind.runs_on(device):
        return spec, None
    where = device_type(device)
    if kind.stand_in is None or not drafter_kind(kind.stand_in).runs_on(where):
        raise ValueError(f"the {kind.spec} drafter does not run with the target on {_DEVICE_WORDS[where]}")
    only = " or ".join(_DEVICE_WORDS[d] for d in kind.devices)
    return kind.stand_in, (f"The {kind.spec} drafter runs only with the target on {only}; with the target on "
                           f"{_DEVICE_WORDS[where]}, {kind.stand_in} drafts in its place.")


def real_draft_phrase(device) -> str:
    """The self-drafts that draft a real distribution for a target on ``device``, in words
    (``"the int8 or early-exit self-draft"`` on the CPU, ``"the early-exit self-draft"`` on CUDA):
    what the lossless check suggests when a drafter proposes point masses or nothing."""
    names = [kind.spec for kind in kinds_for(device) if kind.real_draft]
    return f"the {' or '.join(names)} self-draft"


# --------------------------------------------------------------------------- building one
def build_drafter(
    spec: str,
    target: LoadedModel,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: ProgressFn | None = None,
    history: SuffixHistory | None = None,
    table: RecycleTable | None = None,
) -> Drafter | None:
    """Build the drafter described by ``spec`` for ``target``.

    The spec is normalised by :func:`specviz.drafters.parse_drafter_spec` and built by its kind's
    ``build`` in :data:`specviz.drafters.DRAFTER_KINDS` (the one place each kind is described):
    ``"none"`` (or empty) → None (plain decoding); ``"ngram"`` →
    :class:`~specviz.drafters.PromptLookupDrafter`; ``"suffix"`` →
    :class:`~specviz.drafters.SuffixDrafter` searching ``history`` (a visitor's own
    :class:`~specviz.drafters.SuffixHistory`; None: the process-wide one, for the CLI and the bench);
    ``"recycle"`` (and ``"lookup+recycle"``) → a :class:`~specviz.drafters.RecycleDrafter` drafting
    from and updating ``table`` (a visitor's own :class:`~specviz.drafters.RecycleTable`; None: the
    process-wide one); ``"int8"`` → a ModelDrafter around
    :func:`~specviz.models.selfdraft.int8_draft`; ``"early-exit:N"`` → a ModelDrafter around
    :func:`~specviz.models.selfdraft.early_exit_draft`; any
    other string is loaded with :func:`~specviz.models.loading.load_model` (``device``/``dtype``/``progress`` apply to it)
    and checked with :func:`shared_vocab_size`.

    The returned drafter's ``vocab_size`` is the width to pass to the engine as ``vocab_size``.

    Raises:
        ValueError: for a malformed spec (the message lists the accepted forms) or an invalid
            layer count / device for the self-drafts.
        IncompatiblePairError: if a draft model's tokenizer differs from the target's.
        ModelLoadError: if a draft model cannot be loaded.
    """
    key = parse_drafter_spec(spec)
    with in_use(target):  # loading a draft model never evicts its target
        drafter = drafter_kind(key).build(target, key, device, dtype, progress)
        with in_use(getattr(drafter, "model", None)):
            touch(target)  # an int8 copy counts against the byte limit; the pair stays
    if history is not None and isinstance(drafter, SuffixDrafter):
        drafter.history = history  # the visitor's own, never another's
    if table is not None and hasattr(drafter, "table"):
        drafter.table = table  # the visitor's own Token Recycling table
    return drafter
