"""The weight formats of :mod:`specviz.models.quantized`: int4 and int8 blocks, GGUF Q4_K unpacked, and the
linear layers that run on torch's CPU weight-only kernels.

Decoding one token with a small LM on a CPU is memory-bandwidth bound: every step streams
every linear weight (lm_head included) from DRAM once.  The modules here run
on torch's built-in CPU weight-only kernels, so far fewer bytes are read per step
(:mod:`specviz.models.quantized` puts them into a transformers model):

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

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "DENSE",
    "INT4",
    "INT4_GROUP_SIZES",
    "INT8",
    "Int4Linear",
    "Int8Linear",
    "Q4_K_BLOCK_BYTES",
    "QK_K",
    "ROW_CHUNK",
    "gguf_dequantize",
    "int4_dequantize",
    "int4_supported",
    "int4_to_nibbles",
    "int8_dequantize",
    "nibbles_to_int4",
    "pack_int4",
    "q4k_to_int4",
    "q4k_to_int4pack",
    "q4k_unpack",
    "quantize_int4",
    "quantize_int8",
]

#: The weight formats a linear layer can be kept in.
INT4, INT8, DENSE = "int4", "int8", "bf16"
QK_K = 256  #: weights per K-quant super-block
Q4_K_BLOCK_BYTES = 144  #: 2 (d) + 2 (dmin) + 12 (scales) + 128 (4-bit quants)
INT4_GROUP_SIZES = (32, 64, 128, 256)  #: group sizes the CPU int4 kernel accepts
ROW_CHUNK = 4096  #: rows converted at a time (a multiple of 64 keeps int4 packing identical)


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
    Packs ``ROW_CHUNK`` rows at a time (identical to packing at once, as the layout is
    blocked by 64 rows) so the int32 temporary stays small.
    """
    if q.dim() != 2 or q.shape[0] % 16 or q.shape[1] % 2:
        raise ValueError(f"q must be (N, K) with N % 16 == 0 and K even, got {tuple(q.shape)}")
    out = torch.empty(q.shape[0], q.shape[1] // 2, dtype=torch.uint8)
    for r in range(0, q.shape[0], ROW_CHUNK):
        part = q[r : r + ROW_CHUNK].to(torch.int32).contiguous()
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


def _bf16_rows(x: torch.Tensor, in_features: int) -> torch.Tensor:
    """A kernel-backed linear's input: ``x`` ``(..., in_features)`` as contiguous bfloat16 rows
    ``(M, in_features)``, the layout both CPU kernels take."""
    rows = x.reshape(-1, in_features)
    if rows.dtype != torch.bfloat16:
        rows = rows.to(torch.bfloat16)
    return rows.contiguous()


def _back_to_input(y: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, out_features: int) -> torch.Tensor:
    """A kernel's ``(M, out_features)`` result plus the float32 ``bias`` (if any), in ``x``'s dtype
    and leading shape."""
    if bias is not None:
        y = torch.add(y.float(), bias)
    return y.to(x.dtype).reshape(*x.shape[:-1], out_features)


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
        rows = _bf16_rows(x, self.in_features)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.weight_packed, self.group_size, self.scales_and_zeros)
        return _back_to_input(y, self.bias, x, self.out_features)

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
        rows = _bf16_rows(x, self.in_features)
        if self.in_padded != self.in_features:
            rows = F.pad(rows, (0, self.in_padded - self.in_features))
        y = torch.ops.aten._weight_int8pack_mm(rows, self.weight_int8, self.scales)
        return _back_to_input(y, self.bias, x, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
