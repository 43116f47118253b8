"""Weight-only quantized models for CPU decoding, built from a GGUF file's own blocks.

Decoding one token with a small LM on a CPU is memory-bandwidth bound: every step streams
every linear weight (lm_head included) from DRAM once.  This module replaces the
``nn.Linear`` layers of a transformers Qwen2/Llama-style model with the int4 and int8 layers of
:mod:`specviz.models.weight_formats` (torch's CPU weight-only kernels, their conventions
documented there), so far fewer bytes are read per step; it checks each converted tensor against
the GGUF's own dequantization, and saves and loads the result.

GGUF ``Q4_K`` tensors convert *exactly* to the int4 group-32 layout
(:func:`specviz.models.weight_formats.q4k_to_int4`); every other GGUF type (``Q6_K``, ``Q5_0``,
``Q8_0``, ...) is dequantized with ``gguf.quants.dequantize`` and requantized.

Sources: llama.cpp's tensor names (``blk.N.attn_q`` …) and transformers' GGUF loading (the q/k row
permutation of Llama-family conversions).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn as nn

from specviz.models.weight_formats import (DENSE, INT4, INT8, ROW_CHUNK, Int4Linear, Int8Linear, gguf_dequantize,
                                           int4_dequantize, int4_supported, int4_to_nibbles, int8_dequantize,
                                           nibbles_to_int4, q4k_to_int4, quantize_int4, quantize_int8)

__all__ = [
    "QuantReport",
    "TensorReport",
    "quantize_from_gguf",
    "quantize_model",
    "weight_bytes",
    "load_quantized",
    "release_memory",
]

FORMAT = "specviz-quant-v1"


# --------------------------------------------------------------------------------------
# whole-model conversion
# --------------------------------------------------------------------------------------

#: GGUF leaf name -> HF submodule path inside ``model.layers.N`` (llama.cpp standard names)
_LAYER_MAP = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
#: archs whose q/k rows llama.cpp's converter permuted (undone like transformers' LlamaTensorProcessor)
_ROW_PERMUTED_ARCHS = {"llama", "mistral"}


@dataclasses.dataclass
class TensorReport:
    """One converted linear. ``bytes_*``: weight (+scale/zero/bias) bytes one forward reads."""

    module: str
    gguf_name: str
    gguf_type: str
    shape: tuple[int, int]  # (out_features, in_features)
    method: str  # "int4-exact" | "int4-requant" | "int8-requant" | "bf16"
    bytes_before: int  # as bf16 weight + bf16 bias
    bytes_after: int
    rel_rms_err: float | None = None  # ||W_q - W_gguf|| / ||W_gguf|| on the checked rows
    max_abs_err: float | None = None


@dataclasses.dataclass
class QuantReport:
    """Result of :func:`quantize_from_gguf`."""

    gguf_path: str
    kind: str
    tensors: list[TensorReport]
    seconds: float = 0.0

    @property
    def bytes_before(self) -> int:
        """Linear-weight bytes one decoding step reads in bf16 (embedding gather and norms excluded)."""
        return sum(t.bytes_before for t in self.tensors)

    @property
    def bytes_after(self) -> int:
        return sum(t.bytes_after for t in self.tensors)

    @property
    def exact(self) -> list[str]:
        return [t.module for t in self.tensors if t.method == "int4-exact"]

    @property
    def requantized(self) -> list[str]:
        return [t.module for t in self.tensors if t.method.endswith("requant")]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            key = f"{t.gguf_type}->{t.method}"
            out[key] = out.get(key, 0) + 1
        return out

    def summary(self) -> str:
        worst = max((t.rel_rms_err or 0.0 for t in self.tensors if t.method != "int4-exact"), default=0.0)
        ex = [t.rel_rms_err or 0.0 for t in self.tensors if t.method == "int4-exact"]
        return (
            f"{self.gguf_path} kind={self.kind}: {len(self.tensors)} linears {self.counts()}; "
            f"weights/step {self.bytes_before / 1e9:.3f} GB (bf16) -> {self.bytes_after / 1e9:.3f} GB "
            f"({self.bytes_before / max(self.bytes_after, 1):.2f}x); exact max rel-rms err "
            f"{max(ex, default=0):.1e}; requant worst rel-rms err {worst:.3f}; {self.seconds:.1f} s"
        )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(bytes_before=self.bytes_before, bytes_after=self.bytes_after)
        return d


def _linear_targets(model: nn.Module, names: set[str]) -> Iterator[tuple[str, str]]:
    """(hf module path, gguf tensor name) for every linear the GGUF has a weight for."""
    base = getattr(model, "base_model_prefix", "model")
    n_layers = model.config.num_hidden_layers
    for i in range(n_layers):
        for leaf, sub in _LAYER_MAP.items():
            g = f"blk.{i}.{leaf}.weight"
            if g in names:
                yield f"{base}.layers.{i}.{sub}", g
    if "output.weight" in names:
        yield "lm_head", "output.weight"
    elif "token_embd.weight" in names and getattr(model.config, "tie_word_embeddings", False):
        yield "lm_head", "token_embd.weight"


def _row_permutation(model: nn.Module, gguf_name: str, n_rows: int) -> np.ndarray | None:
    """Row order undoing llama.cpp's q/k permutation for llama-family archs (None = identity)."""
    cfg = model.config
    if cfg.model_type not in _ROW_PERMUTED_ARCHS:
        return None
    if ".attn_q." in gguf_name:
        n_head = cfg.num_attention_heads
    elif ".attn_k." in gguf_name:
        n_head = cfg.num_key_value_heads
    else:
        return None
    dim = n_rows // n_head // 2
    return np.arange(n_rows).reshape(n_head, dim, 2).swapaxes(1, 2).reshape(-1)


def _resolve_method(kind, gguf_type: str, module: str, N: int, K: int, group_size: int) -> str:
    """Pick "int4" | "int8" | "bf16" for one tensor (see :func:`quantize_from_gguf`)."""
    if isinstance(kind, dict):
        m = kind.get(module.rsplit(".", 1)[-1], kind.get(gguf_type, kind.get("default", "auto")))
    else:
        m = kind
    if m == "auto":
        m = AUTO_POLICY.get(module.rsplit(".", 1)[-1], AUTO_POLICY.get(gguf_type, AUTO_POLICY["default"]))
    if m not in (INT4, INT8, DENSE):
        raise ValueError(f"unknown quantization kind {m!r}")
    if m == INT4 and not int4_supported(N, K, group_size):
        m = INT8  # kernel shape limits (N % 16, K % group)
    return m


#: what ``kind="auto"`` does per GGUF type (keys may also be module leaf names like "lm_head").
#: Q4_K converts exactly; the others were chosen by measurement (see NOTES.md).
AUTO_POLICY: dict[str, str] = {"Q4_K": INT4, "default": INT8}


def release_memory() -> None:
    """Return freed heap memory to the OS (glibc ``malloc_trim``; no-op elsewhere).

    Conversion frees many large temporaries; without this, glibc may keep gigabytes of them
    mapped (RSS stays high), which matters when the next step allocates a big model.
    """
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _iter_rows(raw: np.ndarray, n_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    for r in range(0, n_rows, ROW_CHUNK):
        yield r, raw[r : r + ROW_CHUNK]


def _convert(old: nn.Linear, hf_name: str, raw: np.ndarray, gtype: str, method: str, group_size: int, refine: int,
             rows: np.ndarray, portable: dict | None, modules_meta: dict) -> tuple[nn.Module, str, torch.Tensor]:
    """One linear layer in ``method``'s format: ``(new module, method name, the effective weight's
    rows`` ``rows`` for the check). Writes its portable tensors (when saving) and its metadata."""
    N, K = old.out_features, old.in_features
    bias = old.bias.detach() if old.bias is not None else None
    if method == INT4:
        exact = gtype == "Q4_K"
        g = 32 if exact else group_size
        q = torch.empty(N, K, dtype=torch.uint8)
        sz = torch.empty(K // g, N, 2, dtype=torch.bfloat16)
        for r, chunk in _iter_rows(raw, N):
            n = chunk.shape[0]
            if exact:
                q[r : r + n], sz[:, r : r + n] = q4k_to_int4(chunk, (n, K))
            else:
                q[r : r + n], sz[:, r : r + n] = quantize_int4(gguf_dequantize(chunk, gtype, (n, K)), g, refine=refine)
        if portable is not None:
            portable[f"{hf_name}.qweight_nibbles"] = int4_to_nibbles(q)
            portable[f"{hf_name}.scales_and_zeros"] = sz
        modules_meta[hf_name] = {"type": INT4, "in": K, "out": N, "group_size": g, "bias": bias is not None}
        return (Int4Linear.from_int4(q, sz, bias, g), "int4-exact" if exact else "int4-requant",
                int4_dequantize(q[rows], sz[:, rows], g))
    if method == INT8:
        q = torch.empty(N, K, dtype=torch.int8)
        s = torch.empty(N, dtype=torch.bfloat16)
        for r, chunk in _iter_rows(raw, N):
            n = chunk.shape[0]
            q[r : r + n], s[r : r + n] = quantize_int8(gguf_dequantize(chunk, gtype, (n, K)))
        if portable is not None:
            portable[f"{hf_name}.weight_int8"] = q
            portable[f"{hf_name}.scales"] = s
        modules_meta[hf_name] = {"type": INT8, "in": K, "out": N, "bias": bias is not None}
        return Int8Linear.from_int8(q, s, bias), "int8-requant", int8_dequantize(q[rows], s[rows])
    modules_meta[hf_name] = {"type": "dense", "in": K, "out": N, "bias": bias is not None}
    return old, DENSE, old.weight.detach()[torch.from_numpy(rows)].float()


def _checked(old: nn.Linear, hf_name: str, gname: str, raw: np.ndarray, gtype: str, method_name: str,
             rows: np.ndarray, eff_rows: torch.Tensor, max_rel_err: float) -> tuple[float, float]:
    """The converted rows against the model's current weight (a wrong name mapping or row order
    raises) and against the GGUF's own dequantization: ``(relative RMS error, max abs error)``.

    Raises:
        RuntimeError: the converted rows are further than ``max_rel_err`` from the model's weight.
    """
    K = old.in_features
    ref = gguf_dequantize(raw[rows], gtype, (len(rows), K))
    cur = old.weight.detach()[torch.from_numpy(rows)].float()
    cur_rel = float((eff_rows - cur).norm() / cur.norm().clamp_min(1e-30))
    if cur_rel > max_rel_err:
        raise RuntimeError(f"{hf_name} <- {gname} ({gtype}, {method_name}): relative error {cur_rel:.3f} vs the "
                           f"model's current weight exceeds {max_rel_err} (wrong name mapping or row permutation?)")
    return float((eff_rows - ref).norm() / ref.norm().clamp_min(1e-30)), float((eff_rows - ref).abs().max())


def _convert_tensor(model, hf_name, gname, t, kind, group_size, refine, check, check_rows, max_rel_err, portable,
                    modules_meta, log) -> TensorReport:
    """One GGUF tensor into the model's linear layer ``hf_name`` (in place): its format, the
    conversion, the check (:func:`_checked`), and its line of the report."""
    old = model.get_submodule(hf_name)
    if not isinstance(old, nn.Linear):
        raise ValueError(f"{hf_name} is {type(old).__name__}, expected nn.Linear")
    N, K = old.out_features, old.in_features
    if tuple(int(x) for x in t.shape) != (K, N):
        raise ValueError(f"{gname} has GGUF shape {tuple(t.shape)}, module {hf_name} is (out={N}, in={K})")
    raw = np.asarray(t.data).reshape(N, -1)
    perm = _row_permutation(model, gname, N)
    if perm is not None:
        raw = raw[perm]
    gtype = t.tensor_type.name
    method = _resolve_method(kind, gtype, hf_name, N, K, group_size)
    rows = np.unique(np.linspace(0, N - 1, check_rows).astype(int)) if check else np.array([], dtype=int)
    new, method_name, eff_rows = _convert(old, hf_name, raw, gtype, method, group_size, refine, rows, portable,
                                          modules_meta)
    rel = mx = None
    if check:
        rel, mx = _checked(old, hf_name, gname, raw, gtype, method_name, rows, eff_rows, max_rel_err)
    bytes_before = N * K * 2 + (N * 2 if old.bias is not None else 0)
    bytes_after = new.nbytes if hasattr(new, "nbytes") else bytes_before
    if new is not old:
        parent_name, _, leaf = hf_name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, new)
    if log:
        log(f"{hf_name:40s} {gtype:5s} -> {method_name:13s} rel_err={rel}")
    return TensorReport(hf_name, gname, gtype, (N, K), method_name, bytes_before, bytes_after, rel, mx)


def quantize_from_gguf(
    model: nn.Module,
    gguf_path: str,
    kind: str | dict = "auto",
    *,
    group_size: int = 32,
    check: bool = True,
    check_rows: int = 16,
    max_rel_err: float = 0.3,
    save_path: str | None = None,
    refine: int = 2,
    log: Callable[[str], None] | None = None,
) -> QuantReport:
    """Replace a transformers Qwen2/Llama model's linears in place with int4/int8 modules built
    from the GGUF file's own blocks.

    Converted: ``model.layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}`` and
    ``lm_head`` (from ``output.weight``, or ``token_embd.weight`` when embeddings are tied).
    Embedding, norms and biases stay as they are (biases move into the new modules).

    Args:
        model: a loaded ``*ForCausalLM`` (e.g. ``AutoModelForCausalLM.from_pretrained(dir,
            gguf_file=..., dtype=torch.bfloat16)``) whose config matches the GGUF file.
        gguf_path: the GGUF file.
        kind: ``"int4"`` -- Q4_K exact, everything else requantized to int4 group-``group_size``;
            ``"int8"`` -- everything requantized to int8 per-channel; ``"auto"`` --
            :data:`AUTO_POLICY`; or a dict mapping GGUF type names / module leaf names
            (``"lm_head"``, ``"down_proj"``) / ``"default"`` to ``"int4"|"int8"|"bf16"|"auto"``.
            Shapes the int4 kernel rejects fall back to int8.
        group_size: int4 group size for requantized tensors (Q4_K always uses 32).
        check: compare ``check_rows`` rows of each converted weight with the model's current
            weight and raise if the relative RMS error exceeds ``max_rel_err`` (catches name
            mapping / row permutation mistakes); also fills the report's error columns
            (measured against the GGUF dequantization, on those rows).
        save_path: if given, also write a portable safetensors file (see :func:`load_quantized`).
        refine: least-squares passes for int4 requantization.
        log: optional progress callback.
    Returns:
        :class:`QuantReport`.
    Raises:
        KeyError: a GGUF tensor expected for a linear is missing (none found at all).
        ValueError: shape mismatch between GGUF tensor and module.
        RuntimeError: ``check`` failed.
    """
    from gguf import GGUFReader

    t0 = time.perf_counter()
    reader = GGUFReader(gguf_path)
    tensors = {t.name: t for t in reader.tensors}
    targets = list(_linear_targets(model, set(tensors)))
    if not targets:
        raise KeyError(f"no linear weights of {type(model).__name__} found in {gguf_path}")
    report = QuantReport(str(gguf_path), kind if isinstance(kind, str) else json.dumps(kind), [])
    portable: dict[str, torch.Tensor] = {}
    modules_meta: dict[str, dict] = {}

    for hf_name, gname in targets:
        report.tensors.append(_convert_tensor(model, hf_name, gname, tensors[gname], kind, group_size, refine,
                                              check, check_rows, max_rel_err, portable if save_path else None,
                                              modules_meta, log))

    report.seconds = time.perf_counter() - t0
    if save_path:
        _save(model, save_path, portable, modules_meta, report)
    del portable, reader, tensors
    release_memory()
    return report


# --------------------------------------------------------------------------------------
# persistence
# --------------------------------------------------------------------------------------


def _save(model: nn.Module, path: str, portable: dict, modules_meta: dict, report: QuantReport) -> None:
    from safetensors.torch import save_file

    tensors = dict(portable)
    quantized = {k for k, v in modules_meta.items() if v["type"] != "dense"}
    for name, p in model.state_dict().items():
        mod = name.rsplit(".", 1)[0]
        if mod in quantized:
            if name.endswith(".bias") and p is not None:
                tensors[name] = p.detach().float().contiguous()
            continue
        tensors[name] = p.detach().contiguous()
    # tied tensors share storage; safetensors refuses that, so clone duplicates
    seen: dict[int, str] = {}
    for k, v in list(tensors.items()):
        ptr = v.untyped_storage().data_ptr()
        if ptr in seen:
            tensors[k] = v.clone()
        seen[ptr] = k
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    meta = {
        "format": FORMAT,
        "config": json.dumps(cfg),
        "modules": json.dumps(modules_meta),
        "report": json.dumps(report.to_dict()),
    }
    save_file(tensors, path, metadata=meta)


def load_quantized(path: str, dtype: torch.dtype = torch.bfloat16) -> tuple[nn.Module, QuantReport]:
    """Rebuild a model saved by ``quantize_from_gguf(..., save_path=path)`` without the GGUF.

    The model skeleton is created on the meta device from the stored config (no weights
    allocated twice), quantized modules are rebuilt (int4 nibbles repacked for this machine),
    the remaining tensors are assigned, and rotary-embedding buffers are recomputed.

    Returns ``(model, report)``; the model is in eval mode.  Raises ValueError if the file is
    not in this format, RuntimeError if a parameter/buffer stays unset.
    """
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path} is not a {FORMAT} file")
        cfg_dict = json.loads(meta["config"])
        config = AutoConfig.for_model(**cfg_dict)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        modules = json.loads(meta["modules"])
        for name, m in modules.items():
            bias = f.get_tensor(f"{name}.bias") if m["bias"] else None
            if m["type"] == INT4:
                q = nibbles_to_int4(f.get_tensor(f"{name}.qweight_nibbles"))
                new = Int4Linear.from_int4(q, f.get_tensor(f"{name}.scales_and_zeros"), bias, m["group_size"])
            elif m["type"] == INT8:
                new = Int8Linear.from_int8(f.get_tensor(f"{name}.weight_int8"), f.get_tensor(f"{name}.scales"), bias)
            else:
                continue
            parent_name, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, leaf, new)
        rest = {k: f.get_tensor(k) for k in f.keys() if not any(k.startswith(n + ".") for n in modules if modules[n]["type"] != "dense")}
    model.load_state_dict(rest, strict=False, assign=True)
    # non-persistent buffers (rotary inv_freq) are still on meta: rebuild those modules on CPU
    for name, mod in list(model.named_modules()):
        if any(b.is_meta for b in mod.buffers(recurse=False)) and hasattr(mod, "config"):
            parent_name, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, leaf, type(mod)(config=mod.config))
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(f"tensors missing from {path}: {left[:10]}")
    model.eval()
    release_memory()
    rep = json.loads(meta["report"])
    report = QuantReport(rep["gguf_path"], rep["kind"], [TensorReport(**{**t, "shape": tuple(t["shape"])}) for t in rep["tensors"]], rep["seconds"])
    return model, report


# --------------------------------------------------------------------------------------
# what specviz loads
# --------------------------------------------------------------------------------------


def quantize_model(model: nn.Module, gguf_path: str | None, kind: str = "int4", save_path: str | None = None,
                   group_size: int = 32) -> QuantReport:
    """Every linear layer of ``model`` (lm_head included) as int4 (or int8) blocks, in place: from
    the GGUF's own blocks where there is one (:func:`quantize_from_gguf`: Q4_K exactly), else by
    requantizing the model's own weights (:func:`quantize_int4`; a shape the int4 kernel refuses
    falls back to int8).

    Args:
        model: a transformers causal LM in bfloat16.
        gguf_path: the GGUF it was converted from, or None.
        kind: ``"int4"`` or ``"int8"``.
        save_path: where to keep the result (:func:`load_quantized` reads it back in seconds).
        group_size: int4 group size of requantized weights.

    Returns:
        The :class:`QuantReport`.
    """
    if gguf_path is not None:
        return quantize_from_gguf(model, gguf_path, kind, group_size=group_size, save_path=save_path)
    t0 = time.perf_counter()
    report = QuantReport("(none: requantized from the model's weights)", kind, [])
    for name, old in [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]:
        N, K = old.out_features, old.in_features
        bias = old.bias.detach() if old.bias is not None else None
        if kind == INT4 and int4_supported(N, K, group_size):
            new, method = Int4Linear.from_float(old.weight.detach(), bias, group_size), "int4-requant"
        else:
            new, method = Int8Linear.from_float(old.weight.detach(), bias), "int8-requant"
        parent_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, new)
        report.tensors.append(TensorReport(name, "", str(old.weight.dtype), (N, K), method,
                                           N * K * 2 + (N * 2 if bias is not None else 0), new.nbytes))
    report.seconds = time.perf_counter() - t0
    release_memory()
    return report


def weight_bytes(model: nn.Module) -> int:
    """The bytes of weights one decoding step reads: every linear layer's (int4 codes with their
    scales and zeros, int8 codes with their scales, or dense weights), lm_head included; the
    embedding table is not read whole (one row per token) and is left out, as are norms."""
    total = 0
    for module in model.modules():
        if isinstance(module, (Int4Linear, Int8Linear)):
            total += module.nbytes
        elif isinstance(module, nn.Linear):
            total += module.weight.numel() * module.weight.element_size()
            total += 0 if module.bias is None else module.bias.numel() * module.bias.element_size()
    return total
