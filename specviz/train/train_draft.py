"""Train an EAGLE-style head for a target: ``python -m specviz train-draft``.

Self-distillation in four steps, each cached in the output directory so a resumed run
(``--resume``) neither regenerates nor re-encodes:

1. **Teacher data** (:func:`generate_answers`): the target's own sampled answers (T = 0.8) to the
   bundled prompts (``specviz/data/draft_prompts.txt``, cycled in a seeded order), by batched
   ``generate()`` with left padding, until ``tokens`` answer tokens. Training on the target's
   own outputs is EAGLE's and Medusa-2's self-distillation (Li et al. 2024, Section 4; Cai et al.
   2024): the head learns the target's distribution on the text it actually writes.
2. **Features** (:func:`teacher_features`): one teacher-forced forward pass per sequence
   (prompt + answer) records the target's last-layer features before the final norm
   (:class:`~specviz.core.drafttree.LastLayerFeatures`), stored in float16.
3. **Vocabulary**: the ``vocab`` most frequent tokens of the answers (draws from the target, so
   their counts estimate its probability mass); the head proposes only those.
4. **Training** (:func:`rollout_loss`): at each position, soft cross-entropy against the target's
   distribution (T = 1) on the head's vocabulary, plus ``feature_weight`` × a smooth-L1
   regression of the predicted feature on the target's (EAGLE's two losses), over ``rollout``
   draft depths: step s feeds the head its own predicted features from step s − 1, and each
   query attends to the target-feature keys up to where drafting would start plus the keys of
   its own earlier draft steps (:func:`rollout_mask`): the "training-time test" of EAGLE-3 (Li et
   al. 2025) and HASS's harmonized context alignment (Zhang et al. 2024), so depths 2..R are
   trained on what drafting feeds them. Options from EAGLE-3's recipe and the LK losses:
   depth weights ``depth_decay^(s−1)`` (EAGLE-3: 0.8 over 7 steps), positions whose target top
   token is outside the head's vocabulary left out of the loss (``mask_outside_vocab``),
   ``tv_weight`` × the total variation 1 − Σ min(p_target, p_draft) beside the cross-entropy
   (LK losses, arXiv 2602.23881: the acceptance itself), AdamW's ``betas`` (EAGLE-3: 0.9, 0.95)
   and the gradient clip (0.5, as EAGLE-3). The validation figures do not depend on them, so runs
   with different options compare on one held-out set.

At the end: validation top-1 and expected acceptance per draft depth (Σ min(p_draft, p_target),
the per-token acceptance probability at T = 1, Leviathan et al. 2023, Section 3.1) printed and
saved to ``training_log.json``; the head to the directory (:func:`specviz.drafters.eagle.save_head`).

Files: the teacher data (:func:`save_teacher_data`) and the optimiser's checkpoint
(:func:`save_state`) are safetensors files whose header's metadata holds a small JSON of what they
are (format, version, the target they were made for, the step, the loss history), never a pickle:
``--data`` and ``--resume`` read files a user hands over, and unpickling one can run any code.
Every file is checked on load before anything is trained on it (:func:`load_teacher_data`,
:func:`load_state`, :func:`specviz.drafters.eagle.load_head`): one line names the file and what is
wrong with it.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specviz.core.drafttree import LastLayerFeatures
from specviz.drafters.eagle import (
    EagleHead,
    check_frequent_ids,
    load_head,
    non_finite_tensors,
    open_safetensors,
    save_head,
    tree_mask,
)
from specviz.train.train_files import check_answers, check_moment, check_param_groups, diverged, json_field

__all__ = ["DATA_FILE", "FILE_VERSION", "PROMPTS_FILE", "STATE_FILE", "TrainConfig", "evaluate", "format_summary",
           "frequent_tokens", "generate_answers", "load_prompts", "load_state", "load_teacher_data", "lr_factor",
           "prepare_data", "rollout_loss", "rollout_mask", "save_state", "save_teacher_data", "teacher_features",
           "train"]

#: The bundled prompts the teacher answers.
PROMPTS_FILE = Path(__file__).resolve().parents[1] / "data" / "draft_prompts.txt"
DATA_FILE = "teacher_data.safetensors"
CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "state.safetensors"
LOG_FILE = "training_log.json"
#: The version of the teacher-data and checkpoint files this code writes and reads.
FILE_VERSION = 1
DATA_FORMAT, STATE_FORMAT = "specviz-teacher-data", "specviz-train-state"
#: What an older specviz wrote with ``torch.save`` (pickles): named in the message, never read.
OLD_FILES = {DATA_FILE: "teacher_data.pt", STATE_FILE: "state.pt"}
#: The teacher data's tensors: every sequence's token ids end to end, where each starts (N + 1
#: offsets), each prompt's length, the target's features of every position end to end (T, H), and
#: the head's frequent-token ids.
DATA_TENSORS = ("ids", "offsets", "prompt_lens", "features", "frequent_ids")


@dataclass
class TrainConfig:
    """Settings of one training run (the command's options).

    Attributes:
        target: the target (offline name, directory or hub id).
        out: the output directory (head, data cache, checkpoints, log).
        tokens: answer tokens of teacher data to generate.
        steps: optimiser steps.
        rollout: draft depths trained (R >= 1).
        batch: sequences per step.
        seed: seed of the data order, the sampling and the initialisation.
        resume: continue from ``out``'s checkpoint (and cached data).
        lr: AdamW's peak learning rate (:func:`lr_factor` gives the schedule).
        vocab: size of the head's frequent-token vocabulary (0 = the whole vocabulary).
        feature_weight: weight of the feature regression term.
        temperature: the teacher's sampling temperature.
        max_new_tokens: longest teacher answer (tokens).
        gen_batch: prompts per ``generate()`` call.
        max_len: longest training sequence (tokens; longer ones are cut).
        val_fraction: share of the sequences held out for validation.
        checkpoint_every: save a checkpoint every this many steps.
        dtype: the target's dtype for the teacher data and training (``"float32"`` or
            ``"bfloat16"``; bfloat16 ran generation 1.9× faster on a 2-core AVX-512-BF16 CPU, and it
            is the dtype the bench runs the target in). The head's weights stay float32.
        data: a ``teacher_data.safetensors`` written by an earlier run to train on instead of
            generating (then ``tokens`` limits how much of it is used: the learning curve's knob).
        head_dtype: the dtype of the written head's weights (``"bfloat16"`` halves the file;
            checkpoints stay float32).
        device: where the target and the head run (``"auto"``: CUDA when available, else the
            CPU; ``"cpu"``; ``"cuda"``). Teacher features are kept on the CPU either way.
        mask_outside_vocab: leave out of the loss the positions whose target top token the head
            cannot propose (EAGLE-3; only with a reduced ``vocab``).
        depth_decay: the loss of draft depth s weighs ``depth_decay^(s − 1)``, normalised to sum
            to 1 (1.0: every depth alike; EAGLE-3: 0.8).
        tv_weight: weight of the total-variation term 1 − Σ min(p_target, p_draft) added to each
            position's cross-entropy (LK losses; 0 = off).
        betas: AdamW's (β1, β2) (EAGLE-3: 0.9, 0.95).
        grad_clip: the gradient norm is clipped to this (> 0).
        warmup: steps of the learning rate's linear warm-up (:func:`lr_factor`; at most a tenth of
            ``steps``).
        init: a head directory (:func:`~specviz.drafters.eagle.load_head`) to start from instead of
            the target's last layer: its weights and its vocabulary (the data's frequent ids are
            then unused). Continues a head whose training stopped early (the learning curve in
            BENCHMARKS.md: the shipped head's validation was still rising at 2,000 steps); with
            ``steps = 0`` it only scores that head on this data's held-out set. With ``resume``,
            a checkpoint in ``out`` wins over it.
    """

    target: str
    out: str
    tokens: int = 200_000
    steps: int = 2_000
    rollout: int = 3
    batch: int = 8
    seed: int = 0
    resume: bool = False
    lr: float = 3e-4
    vocab: int = 8_192
    feature_weight: float = 0.1
    temperature: float = 0.8
    max_new_tokens: int = 192
    gen_batch: int = 32
    max_len: int = 384
    val_fraction: float = 0.05
    checkpoint_every: int = 100
    dtype: str = "float32"
    data: str = ""
    head_dtype: str = "float32"
    device: str = "auto"
    mask_outside_vocab: bool = False
    depth_decay: float = 1.0
    tv_weight: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 0.5
    warmup: int = 50
    init: str = ""

    def check(self) -> None:
        """Raises ValueError for out-of-range settings, and for a ``data`` file that is not
        teacher data for this target (its header read, no tensor; :func:`load_teacher_data`)."""
        for name in ("tokens", "steps", "rollout", "batch", "max_new_tokens", "gen_batch", "checkpoint_every", "max_len"):
            if getattr(self, name) < (0 if name == "steps" and self.init else 1):
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        if self.init and not Path(self.init).expanduser().is_dir():
            raise ValueError(f"--init {self.init}: no such head directory (one written by train-draft)")
        if self.vocab < 0 or not 0 < self.val_fraction < 1 or self.lr <= 0 or self.temperature <= 0:
            raise ValueError("need --vocab >= 0, 0 < val_fraction < 1, lr > 0 and temperature > 0")
        for name in ("dtype", "head_dtype"):
            if getattr(self, name) not in ("float32", "bfloat16"):
                raise ValueError(f"--{name.replace('_', '-')} must be float32 or bfloat16, got {getattr(self, name)!r}")
        if not 0 < self.depth_decay <= 1 or self.tv_weight < 0 or self.grad_clip <= 0:
            raise ValueError(f"need 0 < --depth-decay <= 1, --tv-weight >= 0 and --grad-clip > 0, got "
                             f"{self.depth_decay}, {self.tv_weight}, {self.grad_clip}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"--betas needs two numbers in [0, 1), got {list(self.betas)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        if self.data and not Path(self.data).expanduser().is_file():
            raise ValueError(f"--data {self.data}: no such file (a {DATA_FILE} of an earlier run)")
        if self.data:
            _data_header(Path(self.data).expanduser(), self.target)


def load_prompts(path: str | Path = PROMPTS_FILE) -> list[str]:
    """The prompts of ``path``, one a line (blank lines and ``#`` comments skipped)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _progress(total: int, desc: str):
    """A tqdm bar (tqdm comes with transformers)."""
    return tqdm(total=total, desc=desc, unit="it", dynamic_ncols=True)


def generate_answers(model, tokenizer, prompt_ids: list[list[int]], tokens: int, gen_batch: int,
                     temperature: float, max_new_tokens: int, seed: int) -> list[tuple[list[int], int]]:
    """The target's sampled answers to the prompts, cycled, until ``tokens`` answer tokens.

    Batched ``generate()`` with left padding (a batch of 64 ran about 10× faster than one at a time
    on a 2-core CPU); each answer is cut after its first EOS.

    Args:
        model: the target causal LM; tokenizer: its tokenizer (for the pad and EOS ids).
        prompt_ids: the prompts' token ids (chat template applied), in the order to answer them.
        tokens: answer tokens to collect (at least).
        gen_batch: prompts per ``generate()`` call.
        temperature: sampling temperature (top-k and top-p off).
        max_new_tokens: longest answer (tokens).
        seed: torch's seed for batch i is ``seed + i``.

    Returns:
        ``(prompt + answer ids, prompt length)`` per sequence.
    """
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    device = next(model.parameters()).device
    sequences, collected, start = [], 0, 0
    bar = _progress(tokens, "teacher answers (tokens)")
    while collected < tokens:
        chunk = [prompt_ids[(start + j) % len(prompt_ids)] for j in range(gen_batch)]
        start += gen_batch
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=device)
        torch.manual_seed(seed + start // gen_batch)
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature, top_k=0,
                             top_p=1.0, max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=eos)
        before = collected
        for prompt, row in zip(chunk, out[:, width:].tolist()):
            answer = row[: row.index(eos) + 1] if eos in row else row
            if answer:
                sequences.append((prompt + answer, len(prompt)))
                collected += len(answer)
        bar.update(collected - before)  # once a batch: tqdm's display keeps up with what is done
    bar.close()
    return sequences


@torch.inference_mode()
def teacher_features(model, sequences: list[tuple[list[int], int]], batch: int = 16) -> list[torch.Tensor]:
    """The target's last-layer features (before the final norm) of every position, by
    teacher-forced forward passes over batches of similar-length sequences (right padding, which
    a causal model's real positions never see): ``(T, H)`` float16 each, on the CPU, in the
    order of ``sequences``."""
    recorder = LastLayerFeatures(model)
    device = next(model.parameters()).device
    features: list[torch.Tensor | None] = [None] * len(sequences)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    bar = _progress(len(sequences), "teacher features (sequences)")
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        width = max(len(sequences[i][0]) for i in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, i in enumerate(chunk):
            seq = sequences[i][0]
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        with recorder:
            model(input_ids=ids.to(device), attention_mask=mask.to(device), logits_to_keep=1)
        for row, i in enumerate(chunk):
            features[i] = recorder.features[row, : len(sequences[i][0])].to("cpu", torch.float16).clone()
        bar.update(len(chunk))
    bar.close()
    return features


def frequent_tokens(sequences: list[tuple[list[int], int]], count: int) -> torch.Tensor:
    """The ``count`` most frequent answer tokens (ties: lower id first), ``(F,)`` int64 sorted;
    fewer when the answers hold fewer distinct tokens."""
    counts = Counter(t for ids, prompt_len in sequences for t in ids[prompt_len:])
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:count]
    return torch.tensor(sorted(ranked), dtype=torch.long)


def rollout_mask(length: int, step: int, device=None) -> torch.Tensor:
    """Which keys each query of draft step ``step`` (1-based) may attend to: ``(L, step·L)`` bool.

    The keys are the ``step`` passes' keys side by side (pass r's key at position j in column
    ``(r − 1)·L + j``). A query at position i of step s stands for drafting depth s from the
    last target feature at ``t = i − s + 1``: it sees pass 1 (target features) up to ``t`` and
    pass r's key at position ``t + r − 1`` for r = 2..s, its own earlier draft steps, exactly
    what the head's cache holds while drafting (EAGLE-3's training-time test).
    """
    i = torch.arange(length, device=device).view(-1, 1)
    j = torch.arange(length, device=device).view(1, -1)
    blocks = [j <= i - step + 1] + [j == i - step + r for r in range(2, step + 1)]
    return torch.cat(blocks, dim=1)


def _batch(data: dict, indices: list[int], max_len: int, device) -> dict:
    """Right-padded tensors of the sequences ``indices``: features ``(B, T, H)`` float32, ids
    ``(B, T)``, and ``target_rows`` ``(B, T − 1)`` bool, True where position i's output is
    trained (the target's distribution at i + 1 predicts an answer token at i + 2 or the end)."""
    seqs = [data["sequences"][i] for i in indices]
    feats = [data["features"][i][:max_len] for i in indices]
    width = max(f.shape[0] for f in feats)
    hidden = feats[0].shape[1]
    features = torch.zeros(len(seqs), width, hidden)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    rows = torch.zeros(len(seqs), width - 1, dtype=torch.bool)
    for b, ((seq, prompt_len), feat) in enumerate(zip(seqs, feats)):
        n = feat.shape[0]
        features[b, :n] = feat.float()
        ids[b, :n] = torch.tensor(seq[:n])
        rows[b, max(prompt_len - 2, 0) : n - 1] = True
    return {"features": features.to(device), "ids": ids.to(device), "rows": rows.to(device)}


@torch.no_grad()
def _target_distribution(head: EagleHead, features: torch.Tensor, chunk: int = 256):
    """The target's distribution at T = 1 from its features ``(M, H)``: probabilities on the
    head's vocabulary ``(M, F)`` (not renormalised: mass outside is what the head cannot propose)
    and the argmax over the whole vocabulary ``(M,)`` as a head-vocabulary index (−1 outside)."""
    _, norm, lm_head = head._target
    probs, best = [], []
    ids = head.frequent_ids
    for start in range(0, features.shape[0], chunk):
        logits = lm_head(norm(features[start : start + chunk].to(lm_head.weight.dtype))).float()
        full = torch.softmax(logits, dim=-1)
        probs.append(full.index_select(-1, ids) if ids.numel() else full)
        best.append(full.argmax(dim=-1))
    top = torch.cat(best)
    if ids.numel():
        lookup = torch.full((int(max(ids.max(), top.max())) + 1,), -1, dtype=torch.long, device=top.device)
        lookup[ids] = torch.arange(ids.numel(), device=top.device)
        top = lookup[top]
    return torch.cat(probs), top


def rollout_loss(head: EagleHead, batch: dict, rollout: int, feature_weight: float, *, tv_weight: float = 0.0,
                 mask_outside_vocab: bool = False, depth_decay: float = 1.0) -> tuple[torch.Tensor, list[dict]]:
    """The training loss of one batch over ``rollout`` draft depths, and per-depth figures.

    Step 1 reads the target's features; step s > 1 reads, at position i, the head's step s − 1
    prediction of the feature at i, with :func:`rollout_mask`'s attention. At each trained row
    (``batch["rows"]``, and ``i >= s − 1`` so that a target feature precedes the draft) the loss
    is the soft cross-entropy ``−Σ_F p_target log p_draft``, plus ``tv_weight`` × the total
    variation ``1 − Σ_F min(p_target, p_draft)`` (LK losses, arXiv 2602.23881; ``p_target`` is not
    renormalised on the head's vocabulary F, so this is one minus the acceptance the head can
    reach), plus ``feature_weight`` × smooth-L1 of the predicted feature against the target's.
    With ``mask_outside_vocab`` (EAGLE-3) rows whose target top token is outside F are left out of
    the loss (not of the figures). Depth s weighs ``depth_decay^(s − 1)``; the weights are
    normalised to sum to 1 over the depths that had rows (1.0: the mean over depths).

    Returns:
        ``(weighted loss, [{"loss", "top1", "acceptance", "rows"} per depth])``: top-1 = the head's
        argmax equals the target's; acceptance = Σ min(p_draft, p_target); both over every row.
    """
    from transformers import DynamicCache

    features, ids, rows = batch["features"], batch["ids"], batch["rows"]
    length = features.shape[1] - 1
    positions = torch.arange(length, device=features.device).view(1, -1)
    p_target, top = _target_distribution(head, features[:, 1:][rows])
    next_features = features[:, 1:][rows].float()
    inputs, cache, figures = features[:, :-1], DynamicCache(), []
    total, weights = 0.0, 0.0
    dtype = head.fuse.weight.dtype
    masking = mask_outside_vocab and head.frequent_ids.numel() > 0
    for step in range(1, rollout + 1):
        mask = tree_mask(rollout_mask(length, step, features.device), dtype)
        out = head(inputs, ids[:, 1:], positions, mask, cache=cache)
        inputs = torch.cat([inputs[:, :1], out[:, :-1]], dim=1)
        keep = (positions >= step - 1).expand_as(rows)[rows]
        if not keep.any():
            break
        predicted = out[rows][keep]
        log_q = torch.log_softmax(head.sub_logits(predicted), dim=-1)
        p = p_target[keep]
        q = log_q.exp()
        per_row = -(p * log_q).sum(-1) + feature_weight * torch.nn.functional.smooth_l1_loss(
            predicted.float(), next_features[keep], reduction="none").mean(-1)
        if tv_weight:
            per_row = per_row + tv_weight * (1 - torch.minimum(q, p).sum(-1))
        if masking:  # a top token the head cannot propose teaches it nothing it can use
            per_row = per_row[top[keep] >= 0]
        if per_row.numel():
            total, weights = total + depth_decay ** (step - 1) * per_row.mean(), weights + depth_decay ** (step - 1)
        with torch.no_grad():
            figures.append({"loss": float(per_row.mean()) if per_row.numel() else 0.0,
                            "top1": float((q.argmax(-1) == top[keep]).float().mean()),
                            "acceptance": float(torch.minimum(q, p).sum(-1).mean()), "rows": int(keep.sum())})
    if not weights:  # no row to train on (every top token outside the vocabulary): a loss with no gradient
        return head.fuse.weight.sum() * 0.0, figures
    return total / weights, figures


@torch.no_grad()
def evaluate(head: EagleHead, data: dict, indices: list[int], cfg: TrainConfig, device) -> list[dict]:
    """Validation top-1 and expected acceptance per draft depth over the sequences ``indices``
    (row-weighted means over batches of ``cfg.batch``): ``[{"depth", "top1", "acceptance", "rows"}]``."""
    sums: dict[int, list[float]] = {}
    for start in range(0, len(indices), cfg.batch):
        batch = _batch(data, indices[start : start + cfg.batch], cfg.max_len, device)
        _, figures = rollout_loss(head, batch, cfg.rollout, cfg.feature_weight, tv_weight=cfg.tv_weight,
                                  mask_outside_vocab=cfg.mask_outside_vocab, depth_decay=cfg.depth_decay)
        for depth, f in enumerate(figures, start=1):
            acc = sums.setdefault(depth, [0.0, 0.0, 0])
            acc[0] += f["top1"] * f["rows"]
            acc[1] += f["acceptance"] * f["rows"]
            acc[2] += f["rows"]
    return [{"depth": d, "top1": round(s[0] / s[2], 4), "acceptance": round(s[1] / s[2], 4), "rows": s[2]}
            for d, s in sorted(sums.items()) if s[2]]


# --------------------------------------------------------------------------- files (safetensors, no pickle)
def _write_safetensors(path: Path, tensors: dict, metadata: dict) -> Path:
    """Write through a temporary file and rename it over ``path``, so a run stopped mid-write
    leaves the previous file (or none), never half of one."""
    from safetensors.torch import save_file

    staging = path.with_name(f"{path.name}.{os.getpid()}.part")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(staging), metadata=metadata)
    os.replace(staging, path)
    return path


def _check_header(path: Path, meta: dict, kind: str, what: str, target: str) -> None:
    """The metadata's format, version and target (ValueError naming the file)."""
    if meta.get("format") != kind:
        raise ValueError(f"{path} is not {what} written by specviz train-draft (its format is "
                         f"{meta.get('format')!r}, not {kind!r})")
    if meta.get("version") != str(FILE_VERSION):
        raise ValueError(f"{path} is {what} of version {meta.get('version')!r}; this specviz reads version "
                         f"{FILE_VERSION}")
    if meta.get("target") != target:
        raise ValueError(f"{path} was made for {meta.get('target')!r}, not {target!r}")


def _shapes(header) -> dict[str, tuple[str, tuple[int, ...]]]:
    names = header.keys()  # a safetensors handle, not a dict
    return {name: (header.get_slice(name).get_dtype(), tuple(header.get_slice(name).get_shape())) for name in names}


def _data_header(path: Path, target: str) -> int:
    """Check a teacher-data file's header (format, version, target; the tensors' names, dtypes
    and shapes agree) without reading a tensor; its number of sequences."""
    with open_safetensors(path) as header:
        _check_header(path, header.metadata() or {}, DATA_FORMAT, "teacher data", target)
        shapes = _shapes(header)
    if set(shapes) != set(DATA_TENSORS):
        missing, extra = sorted(set(DATA_TENSORS) - set(shapes)), sorted(set(shapes) - set(DATA_TENSORS))
        raise ValueError(f"{path} holds other tensors than teacher data's (missing {missing}, unknown {extra})")
    (ids, n_ids), (offsets, n_off), (lens, n_lens), (feats, n_feats), (freq, n_freq) = (
        shapes[name] for name in DATA_TENSORS)
    ints = {ids, offsets, lens, freq} == {"I64"}
    if (not ints or feats not in ("F16", "BF16", "F32") or len(n_ids) != 1 or len(n_off) != 1 or len(n_freq) != 1
            or n_lens != (n_off[0] - 1,) or n_off[0] < 2 or len(n_feats) != 2 or n_feats[0] != n_ids[0]):
        raise ValueError(f"{path}: the tensors' shapes do not fit together (ids {list(n_ids)}, offsets "
                         f"{list(n_off)}, prompt_lens {list(n_lens)}, features {list(n_feats)}, "
                         f"frequent_ids {list(n_freq)})")
    return n_lens[0]


def save_teacher_data(data: dict, path: str | Path) -> Path:
    """Write the teacher data (``{"target", "sequences": [(ids, prompt length)], "features":
    [(T, H)], "frequent_ids": (F,)}``) as one safetensors file (:data:`DATA_TENSORS`, metadata:
    format, version, target); returns its path."""
    seqs = data["sequences"]
    lengths = torch.tensor([len(ids) for ids, _ in seqs], dtype=torch.long)
    tensors = {"ids": torch.tensor([t for ids, _ in seqs for t in ids], dtype=torch.long),
               "offsets": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
               "prompt_lens": torch.tensor([n for _, n in seqs], dtype=torch.long),
               "features": torch.cat(data["features"]), "frequent_ids": data["frequent_ids"].to(torch.long)}
    meta = {"format": DATA_FORMAT, "version": str(FILE_VERSION), "target": data["target"]}
    return _write_safetensors(Path(path), tensors, meta)


def load_teacher_data(path: str | Path, target: str) -> dict:
    """Read teacher data written by :func:`save_teacher_data` for ``target``, checked whole: a
    safetensors file (not a pickle, not empty, not cut short) of this format and version, made
    for ``target``, whose tensors fit together (each sequence longer than its prompt, ids ≥ 0,
    finite features). The model-dependent checks (widths, vocabulary) are :func:`prepare_data`'s.

    Raises:
        ValueError: one line naming the file and what is wrong with it.
    """
    path = Path(path).expanduser()
    _data_header(path, target)
    with open_safetensors(path) as f:
        t = {name: f.get_tensor(name) for name in DATA_TENSORS}
    offsets, lens, ids = t["offsets"], t["prompt_lens"], t["ids"]
    lengths = offsets[1:] - offsets[:-1]
    if int(offsets[0]) != 0 or int(offsets[-1]) != ids.numel() or (lengths < 2).any():
        raise ValueError(f"{path}: the sequence offsets do not cover the ids ({ids.numel()}) in order")
    if (lens < 1).any() or (lens >= lengths).any():
        raise ValueError(f"{path}: a prompt length is not between 1 and its sequence's length")
    if (ids < 0).any() or (t["frequent_ids"] < 0).any():
        raise ValueError(f"{path}: holds a negative token id")
    if not torch.isfinite(t["features"]).all():
        raise ValueError(f"{path}: the features hold NaN or infinite values")
    spans = list(itertools.pairwise(offsets.tolist()))
    sequences = [(ids[a:b].tolist(), int(n)) for (a, b), n in zip(spans, lens.tolist())]
    check_answers(sequences, path)
    return {"target": target, "path": str(path), "sequences": sequences,
            "features": [t["features"][a:b] for a, b in spans],
            "frequent_ids": t["frequent_ids"]}


def _check_data_fits(data: dict, loaded) -> None:
    """The data's widths against the target's: the feature width is its hidden size, every id is
    inside its vocabulary (ValueError naming the file)."""
    where = data.get("path", "the teacher data")
    hidden = loaded.model.get_output_embeddings().weight.shape[1]
    width = loaded.model.get_output_embeddings().weight.shape[0]
    if data["features"] and data["features"][0].shape[1] != hidden:
        raise ValueError(f"{where}: features are {data['features'][0].shape[1]} wide, the target's hidden size "
                         f"is {hidden}")
    top = max([max(ids) for ids, _ in data["sequences"]] + data["frequent_ids"].tolist() + [0])
    if top >= width:
        raise ValueError(f"{where}: holds token id {top}, beyond the target's vocabulary of {width}")
    check_frequent_ids(data["frequent_ids"], width, where)


def _refuse_old(path: Path) -> None:
    """A file an older specviz pickled, where this version would look for the safetensors one."""
    old = path.with_name(OLD_FILES[path.name])
    if old.is_file() and not path.is_file():
        raise ValueError(f"{old} is a torch.save pickle from an older specviz, which is not read (unpickling "
                         f"can run code): delete it to start that part again")


def save_state(path: str | Path, optimizer, step: int, history: list, target: str) -> Path:
    """Write the optimiser's state, the step, the loss history and the RNG state as one
    safetensors file: the optimiser's tensors as ``optimizer.<param>.<name>``, the RNG state as
    ``rng``, and in the metadata the format, version, target, step, history and the optimiser's
    parameter groups as JSON; returns its path."""
    state = optimizer.state_dict()
    tensors = {"rng": torch.get_rng_state()}
    for index, values in state["state"].items():
        tensors.update({f"optimizer.{index}.{name}": value for name, value in values.items()})
    meta = {"format": STATE_FORMAT, "version": str(FILE_VERSION), "target": target, "step": str(step),
            "history": json.dumps(history), "param_groups": json.dumps(state["param_groups"])}
    return _write_safetensors(Path(path), tensors, meta)


def load_state(path: str | Path, target: str) -> dict:
    """Read a checkpoint written by :func:`save_state` for ``target``: ``{"step", "history",
    "optimizer": a state dict for ``torch.optim.AdamW.load_state_dict``, "rng"}``, checked: a
    whole safetensors file of this format and version, made for ``target``, a whole step, a
    history list, parameter groups, an RNG state of torch's size. :func:`_start` checks the
    optimiser's tensors against the head's parameters.

    Raises:
        ValueError: one line naming the file and what is wrong with it.
    """
    path = Path(path).expanduser()
    with open_safetensors(path) as f:
        meta = f.metadata() or {}
        _check_header(path, meta, STATE_FORMAT, "a training checkpoint", target)
        names = f.keys()  # a safetensors handle, not a dict
        tensors = {name: f.get_tensor(name) for name in names}
    step = meta.get("step", "")
    if not step.isdigit():
        raise ValueError(f"{path}: its step {step!r} is not a whole number")
    history, groups = json_field(path, meta, "history", list), json_field(path, meta, "param_groups", list)
    check_param_groups(path, groups)
    rng = tensors.pop("rng", None)
    if rng is None or rng.dtype != torch.uint8 or rng.shape != torch.get_rng_state().shape:
        raise ValueError(f"{path}: holds no RNG state of torch's size")
    try:
        torch.Generator().set_state(rng)  # a spare generator: the process's own stays as it is
    except RuntimeError as err:
        raise ValueError(f"{path}: its RNG state is not one torch can use ({' '.join(str(err).split())})") from None
    per_param: dict[int, dict] = {}
    for name, value in tensors.items():
        kind, index, key = (name.split(".", 2) + ["", ""])[:3]
        if kind != "optimizer" or not index.isdigit() or not key:
            raise ValueError(f"{path}: holds a tensor {name!r} that is not the optimiser's")
        check_moment(path, name, key, value)
        per_param.setdefault(int(index), {})[key] = value
    return {"step": int(step), "history": history, "rng": rng, "path": str(path),
            "optimizer": {"state": per_param, "param_groups": groups}}


def _cached_data(cfg: TrainConfig, out: Path) -> dict | None:
    """The teacher data to reuse, read before any model loads: ``cfg.data``, or on ``--resume``
    the output directory's (when made for the same target; another target's is regenerated)."""
    if cfg.data:
        return load_teacher_data(cfg.data, cfg.target)
    path = out / DATA_FILE
    if not cfg.resume:
        return None
    _refuse_old(path)
    if not path.is_file():
        return None
    with open_safetensors(path) as header:
        if (header.metadata() or {}).get("target") != cfg.target:
            return None
    return load_teacher_data(path, cfg.target)


def _checkpoint_state(cfg: TrainConfig, out: Path) -> dict | None:
    """On ``--resume``, the checkpoint's state (:func:`load_state`), read before any model loads."""
    path = out / CHECKPOINT_DIR / STATE_FILE
    if not cfg.resume:
        return None
    _refuse_old(path)
    return load_state(path, cfg.target) if path.is_file() else None


def prepare_data(cfg: TrainConfig, loaded, out: Path, cached: dict | None = None) -> dict:
    """The teacher data (sequences, features, frequent ids): ``cached`` (:func:`_cached_data`:
    ``cfg.data``, or a resumed run's for the same target), else generated and cached in ``out``
    (:data:`DATA_FILE`); checked against the target's widths.

    Raises:
        ValueError: if a data file is not teacher data for this target (one line naming it).
    """
    data = cached if cached is not None else _cached_data(cfg, out)
    if data is not None:
        _check_data_fits(data, loaded)
        tqdm.write(f"teacher data: {len(data['sequences'])} sequences read from {data['path']}")
        return data
    prompts = load_prompts()
    random.Random(cfg.seed).shuffle(prompts)
    prompt_ids = [loaded.encode(p, chat=loaded.has_chat_template) for p in prompts]
    sequences = generate_answers(loaded.model, loaded.tokenizer, prompt_ids, cfg.tokens, cfg.gen_batch,
                                 cfg.temperature, cfg.max_new_tokens, cfg.seed)
    check_answers(sequences, f"the target's answers for {out / DATA_FILE}")  # before features cost minutes
    data = {"target": cfg.target, "sequences": sequences, "features": teacher_features(loaded.model, sequences),
            "frequent_ids": frequent_tokens(sequences, cfg.vocab) if cfg.vocab else torch.empty(0, dtype=torch.long)}
    data["path"] = str(save_teacher_data(data, out / DATA_FILE))
    return data


def _split(sequences: list[tuple[list[int], int]], cfg: TrainConfig) -> tuple[list[int], list[int]]:
    """Training and validation sequence indices. Validation: a seeded ``val_fraction`` of all
    the data's sequences, the same whatever ``tokens`` is (so learning-curve points are compared
    on one held-out set); training: the rest, in the seeded order, until ``cfg.tokens`` answer
    tokens."""
    order = list(range(len(sequences)))
    random.Random(cfg.seed).shuffle(order)
    n_val = max(1, round(len(order) * cfg.val_fraction)) if len(order) > 1 else 0
    val, rest = order[:n_val] or order, order[n_val:] or order
    train_ids, answer_tokens = [], 0
    for i in rest:
        if answer_tokens >= cfg.tokens:
            break
        train_ids.append(i)
        answer_tokens += len(sequences[i][0]) - sequences[i][1]
    return train_ids, val


def _start(cfg: TrainConfig, loaded, data: dict, out: Path, state: dict | None = None):
    """The head, its optimiser and the first step: from ``out``'s checkpoint when ``state`` (its
    :func:`load_state`) is given, its head and optimiser checked against each other."""
    if cfg.init:  # load_head checks it against the target; float32 weights for training, as a checkpoint's
        head = load_head(cfg.init, loaded.model).float()
    else:
        head = EagleHead(loaded.model, data["frequent_ids"].to(loaded.device))
    optimizer = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=0.0)
    checkpoint, step, history = out / CHECKPOINT_DIR, 0, []
    if state is not None:
        head = load_head(checkpoint, loaded.model).float()
        if head.meta.get("step") != state["step"]:
            raise ValueError(f"{checkpoint} holds a head of step {head.meta.get('step')!r} and a state of step "
                             f"{state['step']}: a half-written checkpoint (delete it to start over)")
        optimizer = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=0.0)
        _load_optimizer(optimizer, state)
        step, history = state["step"], state["history"]
        torch.set_rng_state(state["rng"])
        tqdm.write(f"resuming at step {step} from {checkpoint}")
    return head.train(), optimizer, step, history


def _load_optimizer(optimizer, state: dict) -> None:
    """The checkpoint's optimiser state into ``optimizer``, each tensor the shape of its parameter
    (ValueError naming the file: the state and the head are not from one run)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, values in state["optimizer"]["state"].items():
        if index >= len(params) or any(v.dim() and v.shape != params[index].shape for v in values.values()):
            raise ValueError(f"{state['path']}: its optimiser state does not fit the checkpoint's head "
                             f"(parameter {index})")
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise ValueError(f"{state['path']}: its optimiser state cannot be loaded ({err})") from None


def lr_factor(step: int, steps: int, warmup: int = 50) -> float:
    """The learning rate's multiplier at optimiser step ``step`` (0-based) of ``steps``: a linear
    warm-up over ``warmup`` steps (at most a tenth of ``steps``; 0: none), then a cosine decay to
    0.1 (the schedule of most LM training recipes, e.g. EAGLE's and HASS's). A pure function of the step, so a resumed run continues the
    same schedule."""
    import math

    warmup = min(warmup, max(steps // 10, 1)) if warmup else 0
    if step < warmup:
        return (step + 1) / warmup
    progress = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def _autocast(loaded):
    """bfloat16 autocast of the head's matrix products when the target runs in bfloat16 (the
    weights and the optimiser stay float32: mixed-precision training), on the target's device
    type (CPU or CUDA); a no-op otherwise."""
    dtype = next(loaded.model.parameters()).dtype
    return torch.autocast(loaded.device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)


def _checkpoint(head, optimizer, step: int, history: list, cfg: TrainConfig, out: Path) -> None:
    directory = save_head(head, out / CHECKPOINT_DIR, {"target": cfg.target, "step": step})
    save_state(directory / STATE_FILE, optimizer, step, history, cfg.target)


def train(cfg: TrainConfig, loaded=None) -> dict:
    """Run the whole training (module docstring) and return the summary written to
    ``training_log.json``: the settings, the loss history, validation figures per depth, seconds.

    Args:
        cfg: the settings.
        loaded: the target as a :class:`~specviz.models.loading.LoadedModel` (default: loaded from
            ``cfg.target`` in ``cfg.dtype`` on ``cfg.device``).

    Raises:
        ValueError: for out-of-range settings, and for a data or checkpoint file that is not what
            it should be (one line naming it; read before the target loads); ModelLoadError: if
            the target cannot be loaded.
    """
    cfg.check()
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out).expanduser()
    cached, state = _cached_data(cfg, out), _checkpoint_state(cfg, out)
    if loaded is None:
        from specviz.models.loading import load_model

        loaded = load_model(cfg.target, device=cfg.device, dtype=cfg.dtype)
    out.mkdir(parents=True, exist_ok=True)
    data = prepare_data(cfg, loaded, out, cached)
    train_ids, val_ids = _split(data["sequences"], cfg)
    head, optimizer, step, history = _start(cfg, loaded, data, out, state)
    rng = random.Random(cfg.seed * 1_000_003 + step)
    bar = _progress(cfg.steps, "training (steps)")
    bar.update(step)
    while step < cfg.steps:
        batch = _batch(data, rng.sample(train_ids, min(cfg.batch, len(train_ids))), cfg.max_len, loaded.device)
        with _autocast(loaded):
            loss, figures = rollout_loss(head, batch, cfg.rollout, cfg.feature_weight, tv_weight=cfg.tv_weight,
                                         mask_outside_vocab=cfg.mask_outside_vocab, depth_decay=cfg.depth_decay)
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr * lr_factor(step, cfg.steps, cfg.warmup)
            group["betas"] = tuple(cfg.betas)  # read by AdamW at every step, so a resumed run may change them
        optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            diverged(out, step + 1, f"the loss is {loss.item()}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.grad_clip)
        optimizer.step()
        if bad := non_finite_tensors(dict(head.named_parameters())):
            diverged(out, step + 1, f"{', '.join(bad[:3])} turned NaN or infinite")
        step += 1
        history.append({"step": step, "loss": round(loss.item(), 5),
                        "acceptance": [round(f["acceptance"], 4) for f in figures]})
        bar.set_postfix_str(f"loss {history[-1]['loss']:.3f}")
        bar.update(1)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            _checkpoint(head, optimizer, step, history, cfg, out)
    bar.close()
    head.eval()
    validation = evaluate(head, data, val_ids, cfg, loaded.device)
    meta = {"target": cfg.target, "steps": step, "validation": validation}
    save_head(head, out, meta, dtype=getattr(torch, cfg.head_dtype))
    summary = {"config": asdict(cfg), "sequences": len(train_ids), "validation_sequences": len(val_ids),
               "answer_tokens": sum(len(data["sequences"][i][0]) - data["sequences"][i][1] for i in train_ids),
               "vocabulary": int(head.frequent_ids.numel()), "validation": validation, "history": history,
               "seconds": round(time.perf_counter() - t0, 1)}
    (out / LOG_FILE).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def format_summary(summary: dict) -> str:
    """The summary's validation figures as lines of text, one per draft depth."""
    lines = [f"{summary['sequences']} sequences ({summary['answer_tokens']} answer tokens), "
             f"vocabulary {summary['vocabulary'] or 'all'}, {summary['config']['steps']} steps in "
             f"{summary['seconds']} s; final loss {summary['history'][-1]['loss'] if summary['history'] else 'n/a'}",
             "validation (T = 1): depth  top-1  expected acceptance Σ min(p_draft, p_target)"]
    lines += [f"  {v['depth']:>5}  {v['top1']:.3f}  {v['acceptance']:.3f}" for v in summary["validation"]]
    return "\n".join(lines)
