"""Weight-only int4/int8 linears on torch's own CPU kernels (specviz/models/weight_formats.py, specviz/models/quantized.py).

Small random tensors and a tiny random Qwen2 model (plus a tiny GGUF file written here with gguf's
own writer) cover the kernels' conventions and the conversion; a few tests read real tensors from
the offline Qwen2.5-Coder pair's GGUF files when they are prepared (skipped otherwise). Nothing
here loads a full model.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from specviz.models import quantized as Q
from specviz.models import weight_formats as WF
from specviz.models.offline import cache_dir

GGUF_15B = str(cache_dir() / "models" / "qwen2.5-coder-1.5b-instruct" / "model.gguf")
GGUF_05B = str(cache_dir() / "models" / "qwen2.5-coder-0.5b-instruct" / "model.gguf")

torch.manual_seed(0)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _reader_tensors(path):
    from gguf import GGUFReader

    return {t.name: t for t in GGUFReader(path).tensors}


def _random_q4k(n_rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Valid random Q4_K rows: random codes/6-bit scales, small positive f16 d and dmin."""
    nb = n_rows * k // 256
    b = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
    b[:, 0:2] = (rng.uniform(1e-4, 2e-3, nb).astype(np.float16)).view(np.uint8).reshape(nb, 2)
    b[:, 2:4] = (rng.uniform(1e-4, 2e-3, nb).astype(np.float16)).view(np.uint8).reshape(nb, 2)
    return b.reshape(n_rows, -1)


def _random_q6k(n_rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    nb = n_rows * k // 256
    b = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
    b[:, 208:210] = (rng.uniform(1e-4, 1e-3, nb).astype(np.float16)).view(np.uint8).reshape(nb, 2)
    return b.reshape(n_rows, -1)


# ---------------------------------------------------------------------------------------
# kernel conventions
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("N,K,g", [(16, 32, 32), (64, 256, 32), (128, 896, 32), (48, 256, 64), (32, 512, 128), (16, 512, 256)])
@pytest.mark.parametrize("M", [1, 5, 9])
def test_int4_kernel_convention(N, K, g, M):
    """W = (q - 8) * scale + zero, scales_and_zeros (K/g, N, 2) -- against a dense fp32 reference."""
    q = torch.randint(0, 16, (N, K), dtype=torch.int32)
    sz = (torch.randn(K // g, N, 2) * 0.05).to(torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    W = WF.int4_dequantize(q, sz, g)
    x = torch.randn(M, K).to(torch.bfloat16)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, g, sz)
    assert y.dtype == torch.bfloat16 and y.shape == (M, N)
    assert _rel(y, x.float() @ W.t()) < 1e-2
    # float32 activations are accepted too (slow path) and are exact up to fp32 rounding
    y32 = torch.ops.aten._weight_int4pack_mm_for_cpu(x.float(), packed, g, sz.float())
    assert _rel(y32, x.float() @ W.t()) < 1e-5


def test_int4_kernel_rejects_other_conventions():
    N, K = 64, 256
    q = torch.randint(0, 16, (N, K), dtype=torch.int32)
    sz = torch.randn(K // 32, N, 2).to(torch.bfloat16)
    x = torch.randn(1, K).to(torch.bfloat16)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), 32, sz)
    s = sz[..., 0].float().t().repeat_interleave(32, 1)
    z = sz[..., 1].float().t().repeat_interleave(32, 1)
    assert _rel(y, x.float() @ ((q - 8) * s + z).t()) < 1e-2
    for wrong in (q * s + z, (q - 8) * s - z, (q - z) * s):
        assert _rel(y, x.float() @ wrong.t()) > 0.1


def test_int4_kernel_shape_limits():
    with pytest.raises(RuntimeError, match="dividable by 16"):
        torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.zeros(24, 64, dtype=torch.int32), 1)
    assert not WF.int4_supported(24, 64) and not WF.int4_supported(16, 48) and WF.int4_supported(128, 896)
    with pytest.raises(ValueError):
        WF.Int4Linear(896, 24)


def test_pack_int4_chunked_equals_whole():
    q = torch.randint(0, 16, (WF.ROW_CHUNK + 80, 64), dtype=torch.int32)
    assert torch.equal(WF.pack_int4(q), torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))


@pytest.mark.parametrize("N,K", [(7, 64), (128, 896), (24, 100)])
@pytest.mark.parametrize("M", [1, 5])
def test_int8_linear(N, K, M):
    """y = x @ (q * s[:, None]).T + b; K not a multiple of 16 is zero-padded (the raw kernel segfaults)."""
    w = torch.randn(N, K) * 0.05
    b = torch.randn(N)
    m = WF.Int8Linear.from_float(w, b)
    x = torch.randn(M, K).to(torch.bfloat16)
    ref = x.float() @ WF.int8_dequantize(m.weight_int8[:, :K], m.scales).t() + b
    assert _rel(m(x), ref) < 1e-2
    assert _rel(WF.int8_dequantize(m.weight_int8[:, :K], m.scales), w) < 0.01


# ---------------------------------------------------------------------------------------
# Int4Linear
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (2, 9), (3,)])
def test_int4_linear_matches_dense(shape):
    N, K = 96, 256
    w = torch.randn(N, K) * 0.05
    b = torch.randn(N) * 0.1
    m = WF.Int4Linear.from_float(w, b)
    q, sz = WF.quantize_int4(w)
    W = WF.int4_dequantize(q, sz)
    x = torch.randn(*shape, K).to(torch.bfloat16)
    y = m(x)
    assert y.shape == (*shape, N) and y.dtype == torch.bfloat16
    assert _rel(y, F.linear(x.float(), W, b)) < 1e-2
    # float32 input: computed in bf16, returned in float32
    y32 = m(x.float())
    assert y32.dtype == torch.float32 and _rel(y32, F.linear(x.float(), W, b)) < 1e-2
    # non-contiguous input
    xt = torch.randn(K, 3).to(torch.bfloat16).t()
    assert _rel(m(xt), F.linear(xt.float(), W, b)) < 1e-2


def test_quantize_int4_error_and_refinement():
    w = torch.randn(256, 512) * 0.02
    errs = {}
    for r in (0, 2):
        q, sz = WF.quantize_int4(w, refine=r)
        assert q.dtype == torch.uint8 and int(q.max()) <= 15 and sz.shape == (16, 256, 2)
        errs[r] = float((WF.int4_dequantize(q, sz) - w).norm() / w.norm())
    assert errs[0] < 0.12 and errs[2] <= errs[0] + 1e-6


def test_nibbles_roundtrip():
    q = torch.randint(0, 16, (32, 64), dtype=torch.uint8)
    nib = WF.int4_to_nibbles(q)
    assert nib.shape == (32, 32) and torch.equal(WF.nibbles_to_int4(nib), q)


# ---------------------------------------------------------------------------------------
# Q4_K exact conversion
# ---------------------------------------------------------------------------------------


def _check_q4k_exact(raw, N, K):
    from gguf import GGMLQuantizationType, dequantize

    ref = torch.from_numpy(dequantize(np.ascontiguousarray(raw), GGMLQuantizationType.Q4_K).reshape(N, K))
    q, scale, minv = WF.q4k_unpack(raw, (N, K))
    # codes + fp32 scale/min reproduce gguf's dequantization exactly (same float32 arithmetic)
    s32 = torch.from_numpy(scale).repeat_interleave(32, 1)
    m32 = torch.from_numpy(minv).repeat_interleave(32, 1)
    assert torch.equal(s32 * torch.from_numpy(q).float() - m32, ref)
    # torch convention with bf16 scale/zero: error bounded by the rounding of s and z
    q4, sz = WF.q4k_to_int4(raw, (N, K))
    W = WF.int4_dequantize(q4, sz)
    s = sz[..., 0].float().t().repeat_interleave(32, 1)
    z = sz[..., 1].float().t().repeat_interleave(32, 1)
    bound = (8 * s.abs() + z.abs()) * 2.0**-8 + 1e-12
    assert bool(((W - ref).abs() <= bound).all())
    assert float((W - ref).norm() / ref.norm()) < 0.01
    # and the kernel multiplies by exactly that weight
    packed, sz2 = WF.q4k_to_int4pack(raw, (N, K))
    x = torch.randn(5, K).to(torch.bfloat16)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz2)
    assert _rel(y, x.float() @ W.t()) < 1e-2
    return W, ref


def test_q4k_exact_random_blocks():
    rng = np.random.default_rng(0)
    raw = _random_q4k(32, 512, rng)
    _check_q4k_exact(raw, 32, 512)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(GGUF_15B), reason="python -m specviz prepare qwen2.5-coder-1.5b-instruct")
@pytest.mark.parametrize("name", ["blk.0.attn_k.weight", "blk.3.ffn_gate.weight", "blk.11.ffn_down.weight"])
def test_q4k_exact_real_tensor(name):
    t = _reader_tensors(GGUF_15B)[name]
    assert t.tensor_type.name == "Q4_K"
    K, N = (int(x) for x in t.shape)
    rows = slice(0, min(N, 512))
    raw = np.asarray(t.data)[rows]
    _check_q4k_exact(raw, raw.shape[0], K)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(GGUF_05B), reason="python -m specviz prepare qwen2.5-coder-0.5b-instruct")
@pytest.mark.parametrize("name,kind,tol", [("blk.0.attn_q.weight", "int4", 0.12), ("blk.0.attn_q.weight", "int8", 0.06),
                                           ("blk.0.ffn_down.weight", "int4", 0.12), ("output.weight", "int8", 0.06)])
def test_requantize_real_tensor(name, kind, tol):
    """Q5_0 / Q6_K / Q8_0 tensors requantized: bounded relative error vs gguf's dequantization."""
    t = _reader_tensors(GGUF_05B)[name]
    K, N = (int(x) for x in t.shape)
    raw = np.asarray(t.data)[:256]
    w = WF.gguf_dequantize(raw, t.tensor_type, (raw.shape[0], K))
    if kind == "int4":
        W = WF.int4_dequantize(*WF.quantize_int4(w))
    else:
        W = WF.int8_dequantize(*WF.quantize_int8(w))
    assert float((W - w).norm() / w.norm()) < tol


# ---------------------------------------------------------------------------------------
# inside a real HF forward with a DynamicCache (tiny random Qwen2)
# ---------------------------------------------------------------------------------------


def _tiny_qwen2(hidden=256, inter=512, vocab=256, layers=2):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    # .to() also cast the rotary inv_freq buffer; from_pretrained(dtype=bf16) keeps it float32
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.02)
    return model


def _linear_names(model):
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]


def _swap(model, name, new):
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


def _incremental_logits(model, ids, steps=(8, 1, 1, 1, 5)):
    """Prefill, decode steps and a 5-position verify pass through one DynamicCache."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    out, pos = [], 0
    for n in steps:
        o = model(input_ids=ids[:, pos : pos + n], cache=cache, use_cache=True)
        out.append(o.logits)
        pos += n
    return torch.cat(out, dim=1), cache


@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_hf_forward_with_cache(kind):
    model = _tiny_qwen2()
    dense = _tiny_qwen2()  # same seed: identical weights
    for name in _linear_names(model):
        lin = model.get_submodule(name)
        if kind == "int4":
            q, sz = WF.quantize_int4(lin.weight.detach().float())
            new = WF.Int4Linear.from_int4(q, sz, lin.bias)
            W = WF.int4_dequantize(q, sz)
        else:
            q, s = WF.quantize_int8(lin.weight.detach().float())
            new = WF.Int8Linear.from_int8(q, s, lin.bias)
            W = WF.int8_dequantize(q, s)
        _swap(model, name, new)
        with torch.no_grad():
            dense.get_submodule(name).weight.copy_(W.to(torch.bfloat16))
    ids = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        inc, cache = _incremental_logits(model, ids)
        full = model(input_ids=ids).logits
        ref = dense(input_ids=ids).logits
    assert inc.shape == (1, 16, 256) and cache.get_seq_length() == 16
    assert torch.isfinite(inc).all()
    # incremental (cache) == one full pass, and quantized module == dense effective weight
    assert _rel(inc, full) < 3e-2
    assert _rel(full, ref) < 3e-2
    # cache crop + re-verify (what speculative decoding does after a rejection)
    with torch.no_grad():
        cache.crop(-(cache.get_seq_length() - 11))  # transformers 5.x: negative = tokens to drop
        assert cache.get_seq_length() == 11
        again = model(input_ids=ids[:, 11:16], cache=cache, use_cache=True).logits
    assert _rel(again, full[:, 11:16]) < 3e-2


# ---------------------------------------------------------------------------------------
# quantize_from_gguf on a tiny GGUF written here; persistence
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A tiny qwen2 GGUF: Q4_K q/k/gate/up/o, Q6_K down, Q8_0 v, Q5_0 output; plus the matching HF model."""
    import gguf
    from gguf import GGMLQuantizationType as T

    rng = np.random.default_rng(1)
    model = _tiny_qwen2()
    path = str(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    w = gguf.GGUFWriter(path, "qwen2")
    types = {"attn_q": T.Q4_K, "attn_k": T.Q4_K, "attn_v": T.Q8_0, "attn_output": T.Q4_K,
             "ffn_gate": T.Q4_K, "ffn_up": T.Q4_K, "ffn_down": T.Q6_K}
    sd = {}
    def add(name, mod, qt):
        N, K = mod.out_features, mod.in_features
        if qt == T.Q4_K:
            raw = _random_q4k(N, K, rng)
        elif qt == T.Q6_K:
            raw = _random_q6k(N, K, rng)
        else:
            raw = gguf.quants.quantize(rng.normal(0, 0.02, (N, K)).astype(np.float32), qt)
        w.add_tensor(name, raw, raw_dtype=qt)
        sd[mod] = WF.gguf_dequantize(raw, qt, (N, K))
    for i, layer in enumerate(model.model.layers):
        for leaf, sub in Q._LAYER_MAP.items():
            add(f"blk.{i}.{leaf}.weight", layer.get_submodule(sub), types[leaf])
    add("output.weight", model.lm_head, T.Q5_0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with torch.no_grad():
        for mod, W in sd.items():
            mod.weight.copy_(W.to(torch.bfloat16))
    return path, model


def test_quantize_from_gguf_tiny(tiny_gguf, tmp_path):
    import copy

    path, model0 = tiny_gguf
    model = copy.deepcopy(model0)
    ids = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        ref = model(input_ids=ids).logits.float()
    save = str(tmp_path / "tiny.qsafetensors")
    rep = Q.quantize_from_gguf(model, path, kind="auto", save_path=save)
    methods = {t.module.split(".")[-1] if "layers" in t.module else t.module: t.method for t in rep.tensors}
    assert methods["q_proj"] == "int4-exact" and methods["down_proj"] == "int8-requant"
    assert methods["v_proj"] == "int8-requant" and methods["lm_head"] == "int8-requant"
    assert len(rep.tensors) == 2 * 7 + 1 and rep.bytes_after < rep.bytes_before / 2
    assert max(t.rel_rms_err for t in rep.tensors if t.method == "int4-exact") < 0.01
    assert isinstance(model.model.layers[0].self_attn.q_proj, WF.Int4Linear)
    with torch.no_grad():
        out = model(input_ids=ids).logits.float()
        inc, _ = _incremental_logits(model, ids, steps=(6, 1, 5))
    # random Q6_K blocks (random signed sub-block scales) are a worst case for per-row int8,
    # so this only checks the model is still the same function, roughly
    assert float((out - ref).norm() / ref.norm()) < 0.3
    assert _rel(inc, out) < 3e-2
    # persistence: reload without the GGUF, same logits
    m2, rep2 = Q.load_quantized(save)
    assert rep2.bytes_after == rep.bytes_after
    with torch.no_grad():
        out2 = m2(input_ids=ids).logits.float()
    assert torch.equal(out2, out)

    # kind="int4": every tensor int4 (requantized where not Q4_K); a wrong mapping is caught
    model = copy.deepcopy(model0)
    rep = Q.quantize_from_gguf(model, path, kind="int4")
    assert {t.method for t in rep.tensors} == {"int4-exact", "int4-requant"}
    model = copy.deepcopy(model0)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.copy_(model.model.layers[1].mlp.gate_proj.weight)
    with pytest.raises(RuntimeError, match="up_proj"):
        Q.quantize_from_gguf(model, path, kind="int4")


def test_quantize_from_gguf_policy_dict(tiny_gguf):
    import copy

    path, model0 = tiny_gguf
    model = copy.deepcopy(model0)
    rep = Q.quantize_from_gguf(model, path, kind={"Q4_K": "int4", "lm_head": "bf16", "default": "int4"})
    by = {t.module: t.method for t in rep.tensors}
    assert by["lm_head"] == "bf16" and isinstance(model.lm_head, nn.Linear)
    assert by["model.layers.0.mlp.down_proj"] == "int4-requant"
