"""Weight-only quantized linear layers for CPU decoding, built from a GGUF file's own blocks.

Decoding one token with a small LM on a CPU is memory-bandwidth bound: every step streams
every linear weight (lm_head included) from DRAM once.  This module replaces the
``nn.Linear`` layers of a transformers Qwen2/Llama-style model with modules that run on
torch's built-in CPU weight-only kernels, so far fewer bytes are read per step:

* ``torch.ops.aten._weight_int4pack_mm_for_cpu`` -- asymmetric int4 with one (scale, zero)
  pair per group of ``group_size`` input features (0.625 byte/weight at group 32);
* ``torch.ops.aten._weight_int8pack_mm`` -- symmetric int8 with one scale per output row
  (1 byte/weight).

GGUF ``Q4_K`` tensors convert *exactly* to the int4 group-32 layout (see
:func:`q4k_to_int4`); every other GGUF type (``Q6_K``, ``Q5_0``, ``Q8_0``, ...) is
dequantized with ``gguf.quants.dequantize`` and requantized (:func:`quantize_int4`,
:func:`quantize_int8`).

Kernel conventions (verified against dense references by ``test_quantized.py``, torch 2.13 CPU):

``_convert_weight_to_int4pack_for_cpu(q, 1)``
    ``q``: int32 ``(N, K)`` holding values in ``[0, 15]``, ``N % 16 == 0``. Returns uint8
    ``(N, K/2)`` in an opaque, ISA-dependent blocked layout (blocks of 64 rows under AVX512):
    never persist it, persist the plain nibbles (:func:`int4_to_nibbles`) and repack at load.
``_weight_int4pack_mm_for_cpu(x, packed, group_size, scales_and_zeros)``
    ``x``: 2-D contiguous ``(M, K)``; ``scales_and_zeros``: ``(K/group_size, N, 2)`` with the
    same dtype as ``x``; ``group_size`` in {32, 64, 128, 256}; returns ``(M, N)`` in x's dtype.
    Effective weight ``W[n, k] = (q[n, k] - 8) * scale[k // g, n] + zero[k // g, n]``.
    bf16 and fp16 activations run a vectorized path; float32 activations are accepted but run a
    scalar path that is ~20-100x slower, so the modules here always compute in bfloat16.
``_weight_int8pack_mm(x, w, scales)``
    ``x``: ``(M, K)``; ``w``: int8 ``(N, K)``; ``scales``: ``(N,)`` same dtype as x;
    ``y = x @ (w * scales[:, None]).T``.  ``K % 16 != 0`` gives wrong results and then a
    segfault (torch 2.13), so :class:`Int8Linear` zero-pads K to a multiple of 16; with M > 1 a
    weight whose address is not 32-byte aligned (a zero-copy safetensors/mmap view) segfaults,
    so the modules always copy their buffers into torch-allocated memory.

Sources: torch ``test/test_linalg.py`` (``_group_quantize_tensor``), ggml's ``Q4_K`` layout
as implemented by ``gguf.quants.Q4_K.dequantize_blocks`` (gguf-py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "Int4Linear",
    "Int8Linear",
    "QuantReport",
    "TensorReport",
    "int4_dequantize",
    "int4_supported",
    "int4_to_nibbles",
    "int8_dequantize",
    "nibbles_to_int4",
    "pack_int4",
    "q4k_to_int4",
    "q4k_to_int4pack",
    "q4k_unpack",
    "quantize_from_gguf",
    "quantize_model",
    "weight_bytes",
    "quantize_int4",
    "quantize_int8",
    "gguf_dequantize",
    "load_quantized",
    "release_memory",
]

#: The weight formats a linear layer can be kept in.
INT4, INT8, DENSE = "int4", "int8", "bf16"
QK_K = 256  #: weights per K-quant super-block
Q4_K_BLOCK_BYTES = 144  #: 2 (d) + 2 (dmin) + 12 (scales) + 128 (4-bit quants)
INT4_GROUP_SIZES = (32, 64, 128, 256)  #: group sizes the CPU int4 kernel accepts
_ROW_CHUNK = 4096  #: rows converted at a time (a multiple of 64 keeps int4 packing identical)
FORMAT = "specviz-quant-v1"


# --------------------------------------------------------------------------------------
# int4 helpers
# --------------------------------------------------------------------------------------


def int4_supported(out_features: int, in_features: int, group_size: int = 32) -> bool:
    """Whether torch's CPU int4 kernel accepts an ``(out_features, in_features)`` weight.

    Requires ``group_size`` in {32, 64, 128, 256}, ``in_features % group_size == 0`` and
    ``out_features % 16 == 0`` (``_convert_weight_to_int4pack_for_cpu`` rejects other N).
    """
    return group_size in INT4_GROUP_SIZES and in_features % group_size == 0 and out_features % 16 == 0


def _check_int4_shape(out_features: int, in_features: int, group_size: int) -> None:
    if not int4_supported(out_features, in_features, group_size):
        raise ValueError(
            f"int4 kernel needs group_size in {INT4_GROUP_SIZES}, in_features % group_size == 0 and "
            f"out_features % 16 == 0; got out={out_features}, in={in_features}, group={group_size}"
        )


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack int4 values for ``_weight_int4pack_mm_for_cpu``.

    Args:
        q: integer tensor ``(N, K)`` with values in ``[0, 15]``; ``N % 16 == 0``, K even.
    Returns:
        uint8 ``(N, K/2)`` in torch's opaque CPU layout (machine/ISA specific: do not persist).
    Packs ``_ROW_CHUNK`` rows at a time (identical to packing at once, as the layout is
    blocked by 64 rows) so the int32 temporary stays small.
    """
    if q.dim() != 2 or q.shape[0] % 16 or q.shape[1] % 2:
        raise ValueError(f"q must be (N, K) with N % 16 == 0 and K even, got {tuple(q.shape)}")
    out = torch.empty(q.shape[0], q.shape[1] // 2, dtype=torch.uint8)
    for r in range(0, q.shape[0], _ROW_CHUNK):
        part = q[r : r + _ROW_CHUNK].to(torch.int32).contiguous()
        out[r : r + part.shape[0]] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(part, 1)
    return out


def int4_to_nibbles(q: torch.Tensor) -> torch.Tensor:
    """Portable int4 storage: uint8 ``(N, K/2)``, low nibble = column 2i, high = column 2i+1."""
    q = q.to(torch.uint8)
    return q[:, 0::2] | (q[:, 1::2] << 4)


def nibbles_to_int4(nib: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`int4_to_nibbles`: uint8 ``(N, K/2)`` -> uint8 ``(N, K)`` in [0, 15]."""
    return torch.stack([nib & 0x0F, nib >> 4], dim=-1).reshape(nib.shape[0], -1)


def int4_dequantize(q: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int = 32) -> torch.Tensor:
    """Dense float32 weight ``(N, K)`` that the int4 kernel multiplies by (its exact convention).

    ``W[n, k] = (q[n, k] - 8) * s[k // g, n] + z[k // g, n]`` where
    ``scales_and_zeros[..., 0] = s`` and ``[..., 1] = z``, shape ``(K/g, N, 2)``.
    """
    s = scales_and_zeros[..., 0].float().t().repeat_interleave(group_size, dim=1)
    z = scales_and_zeros[..., 1].float().t().repeat_interleave(group_size, dim=1)
    return (q.float() - 8.0) * s + z


def quantize_int4(
    w: torch.Tensor, group_size: int = 32, *, refine: int = 2, dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric int4 group quantization of a dense weight, in torch's kernel convention.

    Starts from the per-group min/max grid, then (``refine`` times) refits each group's
    ``w ~ s*q + b`` by least squares for the current codes and re-rounds, keeping per group
    whichever grid had the lowest squared error.  Codes are finally chosen against the
    *stored* (dtype-rounded) scale and zero.

    Args:
        w: ``(N, K)`` float weight, ``K % group_size == 0``.
        group_size: input features per (scale, zero) pair.
        refine: least-squares refinement passes (0 = plain min/max).
        dtype: dtype of ``scales_and_zeros`` (must equal the activation dtype at run time).
    Returns:
        ``(q, scales_and_zeros)``: uint8 ``(N, K)`` in [0, 15] and ``(K/g, N, 2)`` in ``dtype``.
    """
    N, K = w.shape
    if K % group_size:
        raise ValueError(f"in_features {K} not a multiple of group_size {group_size}")
    g = w.float().reshape(N, K // group_size, group_size)
    wmin, wmax = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    s = ((wmax - wmin) / 15).clamp_min(1e-12)
    b = wmin
    best_s, best_b = s, b
    q = ((g - b) / s).round_().clamp_(0, 15)
    best_err = ((q * s + b - g) ** 2).sum(-1, keepdim=True)
    n = float(group_size)
    for _ in range(refine):
        sq, sw = q.sum(-1, keepdim=True), g.sum(-1, keepdim=True)
        sqq, sqw = (q * q).sum(-1, keepdim=True), (q * g).sum(-1, keepdim=True)
        den = n * sqq - sq * sq
        ok = den > 0
        s_new = torch.where(ok, (n * sqw - sq * sw) / torch.where(ok, den, torch.ones_like(den)), s)
        s_new = s_new.clamp_min(1e-12)
        b_new = torch.where(ok, (sw - s_new * sq) / n, b)
        q = ((g - b_new) / s_new).round_().clamp_(0, 15)
        err = ((q * s_new + b_new - g) ** 2).sum(-1, keepdim=True)
        better = err < best_err
        best_s = torch.where(better, s_new, best_s)
        best_b = torch.where(better, b_new, best_b)
        best_err = torch.minimum(err, best_err)
        s, b = s_new, b_new
    s_st = best_s.to(dtype)
    z_st = (best_b + 8 * best_s).to(dtype)
    q = ((g - z_st.float()) / s_st.float() + 8).round_().clamp_(0, 15).to(torch.uint8).reshape(N, K)
    sz = torch.stack([s_st.squeeze(-1), z_st.squeeze(-1)], dim=-1).transpose(0, 1).contiguous()
    return q, sz


# --------------------------------------------------------------------------------------
# int8 helpers
# --------------------------------------------------------------------------------------


def quantize_int8(w: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``w ~ q * scale[:, None]``.

    Args:
        w: ``(N, K)`` float weight.
    Returns:
        ``(q, scales)``: int8 ``(N, K)`` in [-127, 127] and ``(N,)`` in ``dtype``; codes are rounded
        against the stored (dtype-rounded) scale.
    """
    w = w.float()
    s = (w.abs().amax(1) / 127).clamp_min(1e-12).to(dtype)
    q = (w / s.float()[:, None]).round_().clamp_(-127, 127).to(torch.int8)
    return q, s


def int8_dequantize(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Dense float32 ``(N, K)`` weight of an int8 per-channel tensor: ``q * scales[:, None]``."""
    return q.float() * scales.float()[:, None]


# --------------------------------------------------------------------------------------
# GGUF blocks
# --------------------------------------------------------------------------------------


def _q4k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unpack the 12-byte Q4_K scale field of each block into 8 six-bit scales and mins.

    ``scales``: uint8 ``(B, 12)``.  Bytes 0-3 hold sc[0:4] (low 6 bits) and the top 2 bits of
    sc[4:8]; bytes 4-7 hold m[0:4] and the top 2 bits of m[4:8]; bytes 8-11 hold the low 4 bits
    of sc[4:8] (low nibble) and of m[4:8] (high nibble).  Returns two uint8 ``(B, 8)``.
    """
    s = scales.reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def q4k_unpack(raw: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode GGUF ``Q4_K`` blocks into codes, scales and mins.

    Q4_K super-block (144 bytes, 256 weights along a row): ``d`` f16, ``dmin`` f16, 12 bytes of
    packed 6-bit (scale, min) pairs for 8 sub-blocks of 32 (:func:`_q4k_scale_min`), then 128
    bytes of nibbles: byte ``i`` of chunk ``j`` (32 bytes each, j = 0..3) holds weight ``i`` of
    sub-block ``2j`` in its low nibble and of sub-block ``2j+1`` in its high nibble.
    Weight = ``d*sc[j] * q - dmin*m[j]`` (computed in float32 by ggml / gguf-py).

    Args:
        raw: uint8 ``(N, K/256*144)`` (or any array of the same bytes), row-major.
        shape: ``(N, K)`` = (out_features, in_features); ``K % 256 == 0``.
    Returns:
        ``(q, scale, minv)``: uint8 ``(N, K)`` in [0, 15]; float32 ``(N, K/32)`` each, so that the
        GGUF weight is ``scale[n, k//32] * q[n, k] - minv[n, k//32]``.
    Raises:
        ValueError: if the byte count does not match ``shape``.
    """
    N, K = shape
    if K % QK_K:
        raise ValueError(f"Q4_K needs in_features % 256 == 0, got {K}")
    nb = N * K // QK_K
    blocks = np.ascontiguousarray(raw).reshape(-1)
    if blocks.size != nb * Q4_K_BLOCK_BYTES:
        raise ValueError(f"expected {nb * Q4_K_BLOCK_BYTES} bytes for Q4_K {shape}, got {blocks.size}")
    blocks = blocks.reshape(nb, Q4_K_BLOCK_BYTES)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # (B, 1)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, mn = _q4k_scale_min(blocks[:, 4:16])
    qs = blocks[:, 16:].reshape(nb, 4, 1, 32)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(N, K)
    scale = (d * sc.astype(np.float32)).reshape(N, K // 32)
    minv = (dmin * mn.astype(np.float32)).reshape(N, K // 32)
    return q, scale, minv


def q4k_to_int4(
    raw: np.ndarray, shape: tuple[int, int], dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact conversion of GGUF ``Q4_K`` blocks to torch's int4 group-32 convention (unpacked).

    ``d*sc*q - dmin*m == (q - 8)*s + z`` with ``s = d*sc`` and ``z = 8*s - dmin*m``; the codes
    are copied bit for bit, only ``s`` and ``z`` are rounded to ``dtype`` (each from its exact
    float32 value).  Worst-case element error: ``8*|s - s_r| + |z - z_r|`` <= ``(8|s| + |z|) * 2^-8``
    for bf16 (round-to-nearest, 8 significant bits).

    Args:
        raw, shape: as :func:`q4k_unpack`.
        dtype: dtype of ``scales_and_zeros`` (bfloat16 for the bf16 kernel).
    Returns:
        ``(q, scales_and_zeros)``: uint8 ``(N, K)`` and ``(K/32, N, 2)`` in ``dtype``.
    """
    q, scale, minv = q4k_unpack(raw, shape)
    scale_t = torch.from_numpy(scale)
    s = scale_t.to(dtype)
    # zero from the *unrounded* scale: error = (q-8)*ds + dz, |q-8| <= 8 (not q*ds + dz, q <= 15)
    z = (8 * scale_t - torch.from_numpy(minv)).to(dtype)
    sz = torch.stack([s.t(), z.t()], dim=-1).contiguous()
    return torch.from_numpy(q), sz


def q4k_to_int4pack(
    raw: np.ndarray, shape: tuple[int, int], dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``Q4_K`` -> ``(packed, scales_and_zeros)`` ready for ``_weight_int4pack_mm_for_cpu``.

    Returns uint8 ``(N, K/2)`` (torch's CPU layout) and ``(K/32, N, 2)`` in ``dtype``; the kernel
    is then called with ``group_size=32``.  See :func:`q4k_to_int4` for the arithmetic.
    Raises ValueError if ``N % 16 != 0`` (kernel limit) or the bytes do not match ``shape``.
    """
    _check_int4_shape(shape[0], shape[1], 32)
    q, sz = q4k_to_int4(raw, shape, dtype)
    return pack_int4(q), sz


def gguf_dequantize(raw: np.ndarray, qtype, shape: tuple[int, int]) -> torch.Tensor:
    """Dense float32 ``(N, K)`` from raw GGUF rows via ``gguf.quants.dequantize`` (any type)."""
    from gguf import GGMLQuantizationType, dequantize

    if isinstance(qtype, str):
        qtype = GGMLQuantizationType[qtype]
    w = dequantize(np.ascontiguousarray(raw), qtype)
    return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32).reshape(shape))


# --------------------------------------------------------------------------------------
# modules
# --------------------------------------------------------------------------------------


class Int4Linear(nn.Module):
    """``nn.Linear`` replacement running ``torch.ops.aten._weight_int4pack_mm_for_cpu``.

    Buffers: ``weight_packed`` uint8 ``(out, in/2)`` (torch's machine-specific layout),
    ``scales_and_zeros`` bfloat16 ``(in/group, out, 2)``, optional ``bias`` float32 ``(out,)``.

    ``forward`` takes ``(..., in_features)`` of any float dtype and any number of leading
    positions (e.g. ``(1, 1, K)`` decode, ``(1, 5, K)`` verify); computes in bfloat16 (float32
    activations would hit the kernel's ~20x slower scalar path), adds the bias in float32 and
    returns ``(..., out_features)`` in the input's dtype.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, group_size: int = 32):
        super().__init__()
        _check_int4_shape(out_features, in_features, group_size)
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        self.register_buffer("weight_packed", torch.zeros(out_features, in_features // 2, dtype=torch.uint8))
        self.register_buffer(
            "scales_and_zeros", torch.zeros(in_features // group_size, out_features, 2, dtype=torch.bfloat16)
        )
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    @classmethod
    def from_int4(
        cls, q: torch.Tensor, scales_and_zeros: torch.Tensor, bias: torch.Tensor | None = None, group_size: int = 32
    ) -> "Int4Linear":
        """Build from unpacked codes ``q`` ``(N, K)`` in [0, 15] and ``scales_and_zeros`` ``(K/g, N, 2)``."""
        N, K = q.shape
        if tuple(scales_and_zeros.shape) != (K // group_size, N, 2):
            raise ValueError(f"scales_and_zeros shape {tuple(scales_and_zeros.shape)} != {(K // group_size, N, 2)}")
        m = cls(K, N, bias is not None, group_size)
        m.weight_packed = pack_int4(q)
        m.scales_and_zeros = scales_and_zeros.to(torch.bfloat16).clone(memory_format=torch.contiguous_format)
        if bias is not None:
            m.bias = bias.detach().float().clone()
        return m

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, group_size: int = 32, refine: int = 2):
        """Requantize a dense ``(N, K)`` weight with :func:`quantize_int4`."""
        q, sz = quantize_int4(weight, group_size, refine=refine)
        return cls.from_int4(q, sz, bias, group_size)

    @property
    def nbytes(self) -> int:
        """Bytes of weights (+ scales, zeros, bias) read by one forward."""
        b = self.weight_packed.numel() + self.scales_and_zeros.numel() * 2
        return b + (self.bias.numel() * 4 if self.bias is not None else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.bfloat16:
            x2 = x2.to(torch.bfloat16)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x2.contiguous(), self.weight_packed, self.group_size, self.scales_and_zeros
        )
        if self.bias is not None:
            y = torch.add(y.float(), self.bias)
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, group_size={self.group_size}, bias={self.bias is not None}"


class Int8Linear(nn.Module):
    """``nn.Linear`` replacement running ``torch.ops.aten._weight_int8pack_mm``.

    Buffers: ``weight_int8`` int8 ``(out, in_padded)`` (zero-padded to a multiple of 16 input
    features: the kernel returns garbage / segfaults otherwise), ``scales`` bfloat16 ``(out,)``,
    optional ``bias`` float32 ``(out,)``.  Same ``forward`` contract as :class:`Int4Linear`.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.in_padded = -(-in_features // 16) * 16
        self.register_buffer("weight_int8", torch.zeros(out_features, self.in_padded, dtype=torch.int8))
        self.register_buffer("scales", torch.ones(out_features, dtype=torch.bfloat16))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    @classmethod
    def from_int8(cls, q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> "Int8Linear":
        """Build from int8 ``q`` ``(N, K)`` and per-row ``scales`` ``(N,)``."""
        N, K = q.shape
        m = cls(K, N, bias is not None)
        if m.in_padded != K:
            q = F.pad(q, (0, m.in_padded - K))
        # always copy into torch-allocated (64-byte aligned) memory: with M > 1 the kernel segfaults on
        # a weight whose address is not 32-byte aligned (e.g. a zero-copy safetensors mmap tensor)
        m.weight_int8 = q.to(torch.int8).clone(memory_format=torch.contiguous_format)
        m.scales = scales.to(torch.bfloat16).clone(memory_format=torch.contiguous_format)
        if bias is not None:
            m.bias = bias.detach().float().clone()
        return m

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "Int8Linear":
        """Requantize a dense ``(N, K)`` weight with :func:`quantize_int8`."""
        q, s = quantize_int8(weight)
        return cls.from_int8(q, s, bias)

    @property
    def nbytes(self) -> int:
        b = self.weight_int8.numel() + self.scales.numel() * 2
        return b + (self.bias.numel() * 4 if self.bias is not None else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.bfloat16:
            x2 = x2.to(torch.bfloat16)
        if self.in_padded != self.in_features:
            x2 = F.pad(x2, (0, self.in_padded - self.in_features))
        y = torch.ops.aten._weight_int8pack_mm(x2.contiguous(), self.weight_int8, self.scales)
        if self.bias is not None:
            y = torch.add(y.float(), self.bias)
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


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
    for r in range(0, n_rows, _ROW_CHUNK):
        yield r, raw[r : r + _ROW_CHUNK]


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
