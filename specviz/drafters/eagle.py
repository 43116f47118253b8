"""A learned draft that reads the target's features: an EAGLE-style head.

EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty")
drafts with a one-layer head that sees, at each position ``i``, the target's last-layer feature
``h_i`` (its hidden state before the final norm) and the embedding of the *next* token
``c_{i+1}``, and predicts the next feature ``h_{i+1}``; the target's own final norm and LM head
turn that into a distribution over ``c_{i+2}``. Drafting deeper, the head feeds its predicted
feature back in. Here:

* :class:`EagleHead`: ``fuse`` (a linear map ``2H → H`` of ``[h_i ; embed(c_{i+1})]``), then one
  transformers ``LlamaDecoderLayer`` (initialised from the target's last layer; transformers
  supplies its rotary embedding and attention), then the target's frozen norm and LM head,
  *referenced*, never copied into the head's weights. Optionally restricted to a frequent-token
  vocabulary: tokens outside it get ``p_draft = 0``. That keeps sampling exact, since the draft
  samples from exactly the distribution it reports (a token the draft never proposes only loses
  acceptance, never correctness).
* :func:`save_head` / :func:`load_head`: a head directory holds ``config.json`` (the layer's
  ``LlamaConfig`` and an ``eagle`` section) and ``model.safetensors`` (the trainable weights and the
  frequent-token ids), nothing of the target.
* :class:`EagleDrafter`: the :class:`~specviz.core.drafter.Drafter`. Chains sample each step from the
  head's processed distribution (its ``p_draft`` row); trees expand the most probable nodes depth
  by depth (EAGLE-2, Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic
  Draft Trees"), choosing children by a rule :func:`specviz.core.sampling.verify_tree` proves exact
  (:meth:`EagleDrafter._children`).

Training lives in :mod:`specviz.train.train_draft` (``python -m specviz train-draft``); the heads shipped
for the offline targets in ``specviz/heads/``; prompt lookup with the head behind it in
:mod:`specviz.drafters.combined`.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import torch
from torch import nn

from specviz.core.drafttree import DraftTree, crop_cache, default_tree_nodes
from specviz.core.kvcache import cache_argument
from specviz.core.sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["HEAD_FILE", "HEAD_FORMAT", "HEADS_DIR", "MAX_CONFIG_BYTES", "MAX_JSON_DEPTH", "EagleDrafter", "EagleHead",
           "JsonTooDeepError", "check_frequent_ids", "head_config", "load_head", "loads_bounded", "min_frequent_tokens",
           "non_finite_tensors", "open_safetensors", "read_json_object", "save_head", "shipped_head_dir", "tree_mask"]

#: Where the heads shipped for the offline targets live: ``HEADS_DIR / <target name>``.
HEADS_DIR = Path(__file__).resolve().parent.parent / "heads"
#: The weights file of a head directory.
HEAD_FILE = "model.safetensors"
#: The head directory's format version (config.json's ``eagle.format``) this code writes and reads.
HEAD_FORMAT = 1
#: The config fields that fix a head's tensor shapes and the vocabulary it proposes from: a head
#: directory's must equal the ones :func:`head_config` gives for the target it is loaded for.
SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "vocab_size", "num_hidden_layers")
_FLOAT_DTYPES = ("F32", "BF16", "F16")
#: The largest config.json read (bytes): a head's is about 1 KiB, so a larger one is refused from
#: its size, before a byte of it is read (a 300 MiB one was read whole first).
MAX_CONFIG_BYTES = 2**20
#: The deepest nesting of brackets a JSON text this code reads may have (a head's config and a
#: checkpoint's history are 3 deep); deeper text would make ``json.loads`` recurse past Python's
#: limit.
MAX_JSON_DEPTH = 32
#: A draft vocabulary smaller than this (distinct ids) proposes too little to ever be accepted
#: (FR-Spec keeps 8k of 128k); :func:`min_frequent_tokens` scales it down for tiny vocabularies.
MIN_FREQUENT_TOKENS = 16
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]")
_INT_DTYPES = ("I64", "I32")


def _target_parts(target) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """The target's ``(input embedding, final norm, LM head, last decoder layer)``."""
    decoder = target.get_decoder()
    return target.get_input_embeddings(), decoder.norm, target.get_output_embeddings(), decoder.layers[-1]


def head_config(target_config):
    """The ``LlamaConfig`` of a head's one decoder layer for a target's config: the target's
    widths, heads, rotary settings and norm epsilon, one layer, SDPA attention.

    Raises:
        ValueError: for a target whose config lacks the Llama-style fields (hidden_size,
            num_attention_heads, intermediate_size).
    """
    from transformers import LlamaConfig

    config = getattr(target_config, "text_config", None) or target_config
    fields = {k: v for k, v in config.to_dict().items() if k in LlamaConfig().to_dict()}
    missing = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size") if k not in fields]
    if missing:
        raise ValueError(f"the target's config lacks {', '.join(missing)}: an EAGLE head needs a Llama-style target")
    fields.update(num_hidden_layers=1, layer_types=None, tie_word_embeddings=False)
    fields.pop("architectures", None)
    head = LlamaConfig(**fields)
    head._attn_implementation = "sdpa"
    return head


def tree_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive attention mask ``(1, 1, Q, KV)`` from a boolean ``(Q, KV)`` (True = may attend):
    0 where allowed, ``dtype``'s minimum elsewhere."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min).view(1, 1, *allowed.shape)


class EagleHead(nn.Module):
    """The draft head: fuse, one decoder layer, and the target's frozen norm and LM head.

    Args:
        target: the target causal LM (transformers, Llama-style decoder with ``.layers`` and
            ``.norm``). Its embedding, final norm and LM head are used by reference.
        frequent_ids: optional ``(F,)`` int64 token ids the head may propose (the rest get
            probability 0); None: the whole vocabulary.
        init_from_target: copy the target's last layer into the head's layer (training starts
            there); False leaves transformers' random initialisation (a loaded head overwrites it).

    Trainable parameters: ``fuse`` (``2H·H``) and ``layer``; :meth:`state_dict` holds only them and
    the ``frequent_ids`` buffer.
    """

    def __init__(self, target, frequent_ids: torch.Tensor | None = None, init_from_target: bool = True) -> None:
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        super().__init__()
        self.config = head_config(target.config)
        hidden = self.config.hidden_size
        embed, norm, lm_head, last_layer = _target_parts(target)
        # A tuple keeps the target's modules out of this module's parameters and state_dict.
        self._target = (embed, norm, lm_head)
        self.fuse = nn.Linear(2 * hidden, hidden, bias=False)
        self.layer = LlamaDecoderLayer(self.config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(self.config)
        ids = frequent_ids if frequent_ids is not None else torch.empty(0, dtype=torch.long)
        self.register_buffer("frequent_ids", ids.to(torch.long).clone())
        self._sub_weight: torch.Tensor | None = None
        if init_from_target:
            with torch.no_grad():
                # The fused input starts as the feature itself (identity on its half), the token's
                # embedding entering with a small weight: the layer first sees what it was trained on.
                self.fuse.weight.zero_()
                self.fuse.weight[:, :hidden] = torch.eye(hidden)
                nn.init.normal_(self.fuse.weight[:, hidden:], std=0.02 / hidden**0.5)
                self.layer.load_state_dict(last_layer.state_dict(), strict=False)
        self.to(device=lm_head.weight.device, dtype=torch.float32)

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def forward(self, features: torch.Tensor, token_ids: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """The predicted next features.

        Args:
            features: ``(B, T, H)`` the feature of each position (the target's, or the head's own
                prediction when drafting deeper).
            token_ids: ``(B, T)`` int64, the token *after* each position.
            position_ids: ``(B, T)`` or ``(1, T)`` int64 positions.
            attention_mask: ``(B or 1, 1, T, KV)`` additive mask (:func:`tree_mask`); None is
                plain causal attention with no cache.
            cache: optional transformers ``DynamicCache`` (the head's own), extended in place.

        Returns:
            ``(B, T, H)`` predicted features of the next positions, in the head's dtype.
        """
        embed = self._target[0]
        dtype = self.fuse.weight.dtype
        x = self.fuse(torch.cat([features.to(dtype), embed(token_ids).to(dtype)], dim=-1))
        position_embeddings = self.rotary(x, position_ids=position_ids)
        if attention_mask is None:
            t = x.shape[1]
            attention_mask = tree_mask(torch.ones(t, t, dtype=torch.bool, device=x.device).tril(), dtype)
        return self.layer(x, attention_mask=attention_mask, position_ids=position_ids, **cache_argument(self.layer, cache),
                          use_cache=cache is not None, position_embeddings=position_embeddings)

    def sub_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Logits ``(..., F)`` over the frequent ids (``(..., V)`` when unrestricted) of predicted
        features ``(..., H)``, through the target's final norm and LM head."""
        _, norm, lm_head = self._target
        normed = norm(predicted.to(lm_head.weight.dtype))
        if not self.frequent_ids.numel():
            return lm_head(normed).float()
        weight = self._sub_weight
        if weight is None or weight.dtype != lm_head.weight.dtype or weight.device != lm_head.weight.device:
            # Rows of the frozen LM head, gathered once (a derived cache, never saved).
            weight = self._sub_weight = lm_head.weight.detach().index_select(0, self.frequent_ids)
        return torch.nn.functional.linear(normed, weight).float()

    def logits(self, predicted: torch.Tensor, width: int) -> torch.Tensor:
        """Logits ``(..., width)`` float32 over the whole vocabulary: ``-inf`` outside the frequent
        ids, so :func:`specviz.core.sampling.logits_to_probs` gives them probability 0."""
        sub = self.sub_logits(predicted)
        if not self.frequent_ids.numel():
            return sub[..., :width]
        full = sub.new_full((*sub.shape[:-1], width), float("-inf"))
        keep = self.frequent_ids < width
        return full.index_copy(-1, self.frequent_ids[keep], sub[..., keep])


def save_head(head: EagleHead, directory: str | Path, meta: dict | None = None,
              dtype: torch.dtype = torch.float32) -> Path:
    """Write ``head`` to ``directory``: ``config.json`` (its layer's config plus an ``eagle``
    section with ``meta`` and the weights' dtype) and ``model.safetensors`` (fuse, layer and
    ``frequent_ids``; floats in ``dtype``: bfloat16 halves the file, 8.4 MB for SmolLM2's head,
    and :func:`load_head` casts back to the target's dtype).

    Returns:
        The directory's path.

    Raises:
        ValueError: when a weight is NaN or infinite (nothing is written).
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    bad = non_finite_tensors(head.state_dict())
    if bad:  # a head of NaN weights drafts nothing, and load_head would refuse it anyway
        raise ValueError(f"{directory}: not written, the head's {', '.join(bad[:4])} hold NaN or infinite weights")
    directory.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict()
    config["eagle"] = {"format": HEAD_FORMAT, **(meta or {}), "weights_dtype": str(dtype).removeprefix("torch.")}
    (directory / "config.json").write_text(json.dumps(config, indent=2, default=str), encoding="utf-8")
    state = {k: v.detach().to(dtype).contiguous() if v.is_floating_point() else v.contiguous()
             for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    save_file(state, str(directory / HEAD_FILE))
    return directory


def open_safetensors(path: Path):
    """``safetensors.safe_open(path)`` (the header read and checked against the file's length,
    no tensor loaded yet), or one line naming the file for one that is missing, empty,
    truncated, half-written or of another format.

    Raises:
        ValueError: ``"<path> is not a readable safetensors file (<why>)"``.
    """
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError) as err:
        why = _not_safetensors(path) or " ".join(str(err).split()).removeprefix("Error while deserializing header: ")
        raise ValueError(f"{path} is not a readable safetensors file ({why})") from None


def _not_safetensors(path: Path) -> str | None:
    """What a file that safetensors refused looks like instead, from its first bytes (None: no
    telling, e.g. a safetensors file cut short)."""
    try:
        with open(path, "rb") as f:
            start = f.read(8)
    except OSError:
        return None
    if not start:
        return "it is empty"
    if start[:1] == b"\x80" or start[:4] == b"PK\x03\x04":
        return "it is a pickle or a torch.save file, which specviz never loads: unpickling can run code"
    if start.lstrip()[:1] in (b"{", b"["):
        return "it is JSON text"
    return None


class JsonTooDeepError(ValueError):
    """A JSON text nested deeper than a reader allows (:func:`loads_bounded`)."""


def loads_bounded(text: str, where: str, max_depth: int = MAX_JSON_DEPTH):
    """``json.loads(text)`` once its brackets (outside strings) are found nested at most
    ``max_depth`` deep, so that a hostile text never makes the parser recurse past Python's limit.

    Raises:
        JsonTooDeepError: ``"<where> is nested deeper than <max_depth> levels (<depth>)"``.
        ValueError: the parser's own (the caller names the file).
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub('""', text))
    depth = max(itertools.accumulate(1 if c in "[{" else -1 for c in brackets), default=0)
    if depth > max_depth:
        raise JsonTooDeepError(f"{where} is nested deeper than {max_depth} levels ({depth})")
    return json.loads(text)


def read_json_object(path: Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> dict:
    """The JSON object in ``path``, its size checked (``os.stat``) before it is read and its
    nesting before it is parsed (:func:`loads_bounded`).

    Raises:
        ValueError: one line naming the file, when it is larger than ``max_bytes``, cannot be read,
            is nested too deep or holds no JSON object.
    """
    try:
        size = os.stat(path).st_size
    except OSError as err:
        raise ValueError(f"{path} is not {what} (not a readable file: {' '.join(str(err).split())})") from None
    if size > max_bytes:
        raise ValueError(f"{path} is not {what}: it is {size / 2**20:.0f} MiB, more than the "
                         f"{max_bytes / 2**20:.0f} MiB such a file can be")
    try:
        data = loads_bounded(Path(path).read_text(encoding="utf-8"), "its JSON")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"{path} is not {what} (not a readable JSON file: {' '.join(str(err).split())})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not {what} (its JSON is not an object)")  # noqa: TRY004 - a file's content
    return data


def _head_meta(config_path: Path, saved: dict) -> dict:
    """The config's ``eagle`` section, of a format this code reads (ValueError naming the file)."""
    meta = saved.get("eagle")
    if not isinstance(meta, dict):  # a file's content, not an argument's type: a ValueError
        raise ValueError(f"{config_path} has no \"eagle\" section: not a head written by specviz train-draft")  # noqa: TRY004
    if meta.get("format") != HEAD_FORMAT:
        raise ValueError(f"{config_path} is a head of format {meta.get('format')!r}; this specviz reads format "
                         f"{HEAD_FORMAT} (heads written by train-draft)")
    return meta


def _check_sizes(config_path: Path, saved: dict, meta: dict, expected) -> None:
    """The head's config against :func:`head_config` of the target (ValueError naming the fields)."""
    wrong = [f"{name} {saved.get(name)!r} (the target's {getattr(expected, name)!r})" for name in SIZE_FIELDS
             if saved.get(name) != getattr(expected, name)]
    if wrong:
        made_for = f", made for {meta.get('target')!r}" if meta.get("target") else ""
        raise ValueError(f"{config_path} describes a head of other sizes than this target's{made_for}: "
                         + "; ".join(wrong))


def _check_tensors(weights_path: Path, header, expected: dict[str, tuple[int, ...]]) -> None:
    """Every tensor a head of these sizes has, none other, each of its shape and a float dtype
    (``frequent_ids``: one dimension, integers). ValueError naming the file and the tensors."""
    names = set(header.keys())
    missing, extra = sorted(set(expected) - names), sorted(names - set(expected))
    if missing:
        raise ValueError(f"{weights_path} lacks {len(missing)} of the head's {len(expected)} tensors "
                         f"({', '.join(missing[:4])}{', …' if len(missing) > 4 else ''}): a head missing any "
                         "of them would draft from untrained weights")
    if extra:
        raise ValueError(f"{weights_path} holds tensors a head does not have ({', '.join(extra[:4])})")
    for name, shape in expected.items():
        view = header.get_slice(name)
        got, dtype = tuple(view.get_shape()), view.get_dtype()
        if name == "frequent_ids":
            if len(got) != 1 or dtype not in _INT_DTYPES:
                raise ValueError(f"{weights_path}: frequent_ids is {dtype} {list(got)}, not a list of token ids")
        elif got != shape or dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{weights_path}: {name} is {dtype} {list(got)}, a head of these sizes has "
                             f"{list(shape)} floats")


def load_head(directory: str | Path, target) -> EagleHead:
    """Read a head directory written by :func:`save_head` for ``target``, checked before any weight
    is used: ``config.json`` is a JSON object with an ``eagle`` section of :data:`HEAD_FORMAT`
    whose :data:`SIZE_FIELDS` are the target's (:func:`head_config`; the target it was made for is
    named when they are not); ``model.safetensors`` is a whole safetensors file holding exactly
    the tensors of a head of those sizes, each of its shape and dtype, finite, with token ids
    inside the target's vocabulary.

    Returns:
        The head in eval mode, on the target's device, in the target's dtype.

    Raises:
        ValueError: one line naming the file and what is wrong with it (a missing file, a
            truncated or foreign weights file, a config of another target, a missing tensor, …).
    """
    directory = Path(directory).expanduser()
    config_path, weights_path = directory / "config.json", directory / HEAD_FILE
    if not (config_path.is_file() and weights_path.is_file()):
        raise ValueError(f"{directory} is not an EAGLE head directory (needs config.json and {HEAD_FILE}); "
                         "train one with: python -m specviz train-draft --target NAME --out DIR")
    saved = read_json_object(config_path, "an EAGLE head's config")
    meta = _head_meta(config_path, saved)
    _check_sizes(config_path, saved, meta, head_config(target.config))
    head = EagleHead(target, None, init_from_target=False)
    expected = {k: tuple(v.shape) for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    with open_safetensors(weights_path) as header:
        _check_tensors(weights_path, header, expected)
        state = {name: header.get_tensor(name) for name in expected}
    bad = non_finite_tensors(state)
    if bad:
        raise ValueError(f"{weights_path}: {', '.join(bad)} holds NaN or infinite weights")
    ids = state["frequent_ids"].to(torch.long)
    check_frequent_ids(ids, target.get_output_embeddings().weight.shape[0], weights_path)
    head = EagleHead(target, ids, init_from_target=False)
    head.load_state_dict({**state, "frequent_ids": ids}, strict=False)
    head.meta = meta
    return head.to(dtype=target.get_output_embeddings().weight.dtype).eval()


def min_frequent_tokens(width: int) -> int:
    """The fewest distinct ids a head's frequent-token list may hold for a vocabulary of ``width``
    tokens: :data:`MIN_FREQUENT_TOKENS`, a sixteenth of a tiny vocabulary, never under 2 (a head
    that can propose one token only drafts it every time)."""
    return max(2, min(MIN_FREQUENT_TOKENS, width // 16))


def check_frequent_ids(ids: torch.Tensor, width: int, where) -> None:
    """A head's ``frequent_ids`` (``(F,)`` integers; empty: the whole vocabulary) checked for what
    makes a head useless though well formed: an id outside ``[0, width)``, an id listed twice
    (one token repeated is the degenerate case), fewer distinct ids than
    :func:`min_frequent_tokens`.

    Raises:
        ValueError: one line naming ``where`` (the file) and the offending id or count.
    """
    ids = ids.to(torch.long).flatten()
    if not ids.numel():
        return
    outside = ids[(ids < 0) | (ids >= width)]
    if outside.numel():
        raise ValueError(f"{where}: frequent_ids holds token id {int(outside[0])}, outside the target's "
                         f"vocabulary [0, {width})")
    distinct, counts = torch.unique(ids, return_counts=True)
    if (counts > 1).any():
        first = int(distinct[counts > 1][0])
        raise ValueError(f"{where}: frequent_ids repeats token id {first} ({int(counts.max())} times; "
                         f"{distinct.numel()} distinct of {ids.numel()}): a degenerate draft vocabulary")
    least = min_frequent_tokens(width)
    if distinct.numel() < least:
        raise ValueError(f"{where}: frequent_ids holds {distinct.numel()} distinct token"
                         f"{'s' if distinct.numel() != 1 else ''} ({', '.join(map(str, distinct.tolist()))}); a head "
                         f"for a vocabulary of {width} needs at least {least} to draft anything useful")


def non_finite_tensors(state: dict) -> list[str]:
    """The names of the floating-point tensors of ``state`` holding a NaN or an infinity."""
    return [name for name, t in state.items()
            if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()]


def shipped_head_dir(target_name: str) -> Path:
    """The directory of the head shipped for ``target_name`` (an offline name).

    Raises:
        ValueError: when no head is shipped for it, with the command that trains one.
    """
    directory = HEADS_DIR / Path(str(target_name)).name
    if not (directory / HEAD_FILE).is_file():
        raise ValueError(f"no EAGLE head is shipped for {target_name!r} yet: train one with "
                         f"`python -m specviz train-draft --target {target_name} --out DIR` and use --draft eagle:DIR")
    return directory


class EagleDrafter:
    """Drafts with an :class:`EagleHead` over the target's features (EAGLE; EAGLE-2 trees).

    The engine hands it the target's last-layer features of every position its cache keeps
    (``wants_features``, :meth:`extend_features`). At a round with ``n`` committed tokens the
    features of positions ``0 … n − 2`` are known (the last committed token was never fed); the
    head's own KV cache holds the positions it has already read with the target's features, and
    a round first feeds the new ones, causally, in one head pass: the last output predicts the
    feature of position ``n − 1`` and, through the target's norm and LM head, the first draft
    token. Deeper steps feed the head's predicted feature back (the target's own feature where it
    is known: position ``n − 1`` in the first round, which the prefill scored). After drafting,
    the head's cache is cut back to the positions read with the target's features, so rejected
    drafts leave nothing behind.

    Args:
        head: the trained head (on the target's device and dtype).
        vocab_size: the shared vocabulary width V of the ``p_draft`` rows.
        name: label for the UI and the CLI.
    """

    uses_model = True
    wants_features = True

    def __init__(self, head: EagleHead, vocab_size: int, name: str = "EAGLE head") -> None:
        self.head = head.eval()
        self.vocab_size = vocab_size
        self.name = name
        self.device = head.fuse.weight.device
        self.cache = None
        self._features = torch.empty(0, head.hidden_size)
        self._start = 0  # the position of self._features[0] = positions in the head's cache

    def prefill(self, context: list[int]) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self._features = torch.empty(0, self.head.hidden_size, device=self.device, dtype=self.head.fuse.weight.dtype)
        self._start = 0

    def extend_features(self, features: torch.Tensor) -> None:
        """Append the target's features ``(M, H)`` of the next ``M`` positions its cache kept."""
        self._features = torch.cat([self._features, features.to(self._features.dtype)])

    @torch.inference_mode()
    def _run(self, features: torch.Tensor, tokens: torch.Tensor, positions: list[int],
             allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One head pass over ``q`` inputs: predicted features ``(q, H)`` and logits ``(q, V)``.
        ``allowed`` ``(q, cached + q)`` says which cached and new positions each input sees."""
        dtype = self.head.fuse.weight.dtype
        out = self.head(features.unsqueeze(0), tokens.view(1, -1),
                        torch.tensor([positions], dtype=torch.long, device=self.device),
                        tree_mask(allowed.to(self.device), dtype), cache=self.cache)[0]
        return out, self.head.logits(out, self.vocab_size)

    def _read_context(self, committed: list[int]):
        """Feed the head the positions whose target features are new; return the last output
        ``(H,)``, its logits ``(V,)`` and the target's feature of position ``n − 1`` if known."""
        n = len(committed)
        last = min(self._start + self._features.shape[0], n - 1)  # positions < last are readable
        new = last - self._start
        if last <= 0 or new <= 0:
            return None, None, None
        past = self._start
        allowed = torch.ones(new, past + new, dtype=torch.bool).tril(diagonal=past)
        tokens = torch.tensor(committed[past + 1 : last + 1], dtype=torch.long, device=self.device)
        out, logits = self._run(self._features[:new], tokens, list(range(past, last)), allowed)
        self._features, self._start = self._features[new:], last
        extra = self._features[0] if self._features.shape[0] else None
        return out[-1], logits[-1], extra

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        """A chain of ``k`` tokens, each sampled from the head's processed distribution (its
        ``p_draft`` row), or with ``branches > 1`` an EAGLE-2 tree (:meth:`_tree`)."""
        empty = DraftTree.chain([], torch.empty(0, self.vocab_size, device=self.device))
        if k <= 0:
            return empty
        feature, logits, extra = self._read_context(committed)
        if feature is None:
            return empty
        try:
            if branches > 1:
                return self._tree(len(committed), feature, logits, extra, k, sampling, generator, branches,
                                  max_nodes or default_tree_nodes(k, branches))
            return self._chain(len(committed), feature, logits, extra, k, sampling, generator)
        finally:
            crop_cache(self.cache, self._start)  # keep only what was read with the target's features

    def _chain(self, n, feature, logits, extra, k, sampling, generator) -> DraftTree:
        tokens, rows = [], []
        for step in range(k):
            p_draft = logits_to_probs(logits, sampling)
            token = sample(p_draft, generator)
            tokens.append(token)
            rows.append(p_draft)
            if step == k - 1:
                break
            # Position n − 1 + step reads the target's feature where the prefill computed it.
            feature_in = extra if step == 0 and extra is not None else feature
            allowed = torch.ones(1, self.cache.get_seq_length() + 1, dtype=torch.bool)
            out, step_logits = self._run(feature_in.view(1, -1), token.view(1), [n - 1 + step], allowed)
            feature, logits = out[0], step_logits[0]
        return DraftTree.chain(torch.stack(tokens).tolist(), torch.stack(rows), k)

    @staticmethod
    def _children(logits: torch.Tensor, count: int, sampling: SamplingConfig, generator) -> list[tuple]:
        """Up to ``count`` children of one node: ``(token, p_draft row, point mass, confidence)``.

        Chosen by rules :func:`specviz.core.sampling.verify_tree` proves exact. At ``T > 0`` they are
        sampled *without replacement* from the head's processed distribution ``q``: child ``j``
        is drawn from ``q`` with the earlier siblings removed and renormalised, and that is its
        ``p_draft`` row; the verify walk tests it against the residual left by its earlier
        siblings with exactly that row, so (by the one-step argument of
        :mod:`specviz.core.sampling`, "Trees") the token emitted at that depth is distributed as the
        residual, and by induction as the target. At ``T = 0`` they are the ``count`` most
        likely tokens (by the softmax of the raw logits) as point masses, exact by the
        point-mass rule. No child's inclusion depends on its own value: the count is fixed
        before drawing. The confidence (the head's probability of the token) ranks nodes for
        expansion only (EAGLE-2), which does not touch the node's own test.
        """
        if sampling.greedy:
            ranked = torch.softmax(logits.float(), dim=-1)
            top_p, top_ids = ranked.topk(count)
            return [(int(t), None, True, float(p)) for p, t in zip(top_p.tolist(), top_ids.tolist()) if p > 0]
        q = logits_to_probs(logits, sampling)
        remaining, children = q.clone(), []
        for _ in range(count):
            mass = remaining.sum()
            if float(mass) <= 1e-6:  # nothing left to propose (a top-k / restricted vocabulary)
                break
            row = remaining / mass
            token = int(sample(row, generator))
            children.append((token, row, False, float(q[token])))
            remaining = remaining.clone()
            remaining[token] = 0.0
        return children

    def _tree(self, n, feature, logits, extra, k, sampling, generator, branches, budget) -> DraftTree:
        """EAGLE-2's dynamic tree (Li et al. 2024b, Section 4): depth by depth, the ``branches``
        most probable nodes of the last depth (by the head's path probability, the product of
        its confidences) are expanded with up to ``branches`` children each (:meth:`_children`),
        until depth ``k`` or ``budget`` nodes; each depth's expanded nodes go through the head in
        one pass with a tree mask, so a tree costs at most ``k`` head passes like a chain."""
        tokens: list[int] = []
        parents: list[int] = []
        rows: list[torch.Tensor] = []
        points: list[bool] = []
        score = {-1: 1.0}
        state = {-1: (feature if extra is None else extra, logits)}  # node → (its output feature, logits)
        slot: dict[int, int] = {}  # node → its index in the head's cache
        ancestors = {-1: []}
        frontier, steps = [-1], 1
        for depth in range(1, k + 1):
            new = []
            for parent in sorted(frontier, key=lambda v: -score[v])[:branches]:
                room = budget - len(tokens)
                for token, row, point, conf in self._children(state[parent][1], min(branches, room), sampling,
                                                              generator):
                    node = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                    rows.append(row if row is not None else torch.nn.functional.one_hot(
                        torch.tensor(token, device=self.device), self.vocab_size).float())
                    points.append(point)
                    score[node] = score[parent] * conf
                    ancestors[node] = ancestors[parent] + ([parent] if parent >= 0 else [])
                    new.append(node)
            if depth == k or not new or len(tokens) >= budget:
                break
            frontier = sorted(new, key=lambda v: -score[v])[:branches]
            self._expand(frontier, n - 2 + depth, tokens, parents, state, slot, ancestors)
            steps += 1
        return DraftTree(tokens, parents, torch.stack(rows), steps, points)

    def _expand(self, nodes, position, tokens, parents, state, slot, ancestors) -> None:
        """Run the head on ``nodes`` (one depth, position ``position``) in one pass: each sees the
        head's context, its own ancestors and itself; record their outputs and cache slots."""
        cached = self.cache.get_seq_length()
        allowed = torch.zeros(len(nodes), cached + len(nodes), dtype=torch.bool)
        allowed[:, : self._start] = True
        for i, node in enumerate(nodes):
            allowed[i, [slot[a] for a in ancestors[node]]] = True
            allowed[i, cached + i] = True
        features = torch.stack([state[parents[node]][0] for node in nodes])
        ids = torch.tensor([tokens[node] for node in nodes], dtype=torch.long, device=self.device)
        out, logits = self._run(features, ids, [position] * len(nodes), allowed)
        for i, node in enumerate(nodes):
            state[node] = (out[i], logits[i])
            slot[node] = cached + i
        return None

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        # The head's cache holds only positions read with the target's features, all committed.
        if self.cache is not None:
            crop_cache(self.cache, valid)

    def finish(self, prompt: list[int], output: list[int]) -> None:
        pass
