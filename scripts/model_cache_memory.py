"""Does the bounded model cache keep memory bounded? Cycle through five target/draft pairs and watch RSS.

Saves five random Llama targets (hidden 256, 4 layers, vocab 8192, 29 MiB in float32) and five
drafts (the same but 2 layers, 23 MiB) with one shared BPE tokenizer to a temporary directory,
limits the cache to ``--pairs`` pairs (default 2: 4 models), then loads each pair in turn the way
the app does (``load_model`` for the target, ``build_drafter`` for the draft), runs one forward of
each, lets go of both and prints the process's resident memory (``VmRSS`` from
``/proc/self/status``) and the cache's own byte count. With the limit the RSS stops growing once
two pairs are loaded; ``--pairs 5`` shows the unbounded growth for comparison. With
``--device cuda`` it also prints the GPU memory PyTorch has allocated and reserved.

    python -m scripts.model_cache_memory              # cache of 2 pairs
    python -m scripts.model_cache_memory --pairs 5    # everything stays cached
    python -m scripts.model_cache_memory --device cuda
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bars

import torch  # noqa: E402

from specviz.models import loading as models  # noqa: E402
from specviz.drafters.registry import build_drafter

N_PAIRS = 5
CORPUS = ["The quick brown fox jumps over the lazy dog; fix the typos in this sentence, please."] * 50


def rss_mib() -> float:
    """Resident set size of this process in MiB (``VmRSS`` of ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (not Linux?)")


def tokenizer():
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(tok_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")


def save_checkpoints(root: Path) -> list[tuple[str, str]]:
    """Five (target, draft) checkpoint directories under ``root``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer()
    pairs = []
    for i in range(N_PAIRS):
        dirs = []
        for role, layers in (("target", 4), ("draft", 2)):
            config = LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=layers,
                                 num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                                 tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
            torch.manual_seed(10 * i + layers)
            path = root / f"{role}{i}"
            LlamaForCausalLM(config).save_pretrained(path)
            tok.save_pretrained(path)
            dirs.append(str(path))
        pairs.append((dirs[0], dirs[1]))
    return pairs


def gpu_mib() -> str:
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return ""
    return f"  GPU {torch.cuda.memory_allocated() / 2**20:.0f} MiB allocated, {torch.cuda.memory_reserved() / 2**20:.0f} reserved"


def use_pair(target_dir: str, draft_dir: str, device: str) -> None:
    """Load a pair as the app does and run one forward of each; every reference dies on return."""
    target = models.load_model(target_dir, device=device, dtype="float32")
    drafter = build_drafter(draft_dir, target, device=device, dtype="float32")
    ids = torch.tensor([target.encode("The quick brown fox jumps over the lazy dog", chat=False)], device=target.device)
    with torch.inference_mode():
        target.model(input_ids=ids)
        drafter.model(input_ids=ids)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="pairs the cache may hold (default: %(default)s)")
    parser.add_argument("--cycles", type=int, default=2, help="passes over the five pairs (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default: %(default)s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="specviz-cache-memory-") as tmp:
        pairs = save_checkpoints(Path(tmp))
        gc.collect()
        models.set_cache_limits(max_models=2 * args.pairs, max_bytes=1 << 40)
        print(f"cache limit {2 * args.pairs} models ({args.pairs} pairs); "
              f"RSS after saving the checkpoints {rss_mib():.0f} MiB")
        use_pair(*pairs[0], args.device)  # the first load imports and initialises transformers' loading code
        models.clear_cache()
        base = rss_mib()
        print(f"baseline after one load and clear_cache: RSS {base:.0f} MiB{gpu_mib()}")
        print("cycle pair  RSS MiB  (+ over baseline)  cached models  cached MiB")
        for cycle in range(args.cycles):
            for i, (target_dir, draft_dir) in enumerate(pairs):
                use_pair(target_dir, draft_dir, args.device)
                info = models.cache_info()
                rss = rss_mib()
                print(f"{cycle:5d} {i:4d}  {rss:7.0f}  ({rss - base:+6.0f})  {info['models']:13d}  "
                      f"{info['bytes'] / 2**20:10.1f}{gpu_mib()}")
        models.clear_cache()
        print(f"after clear_cache: RSS {rss_mib():.0f} MiB ({rss_mib() - base:+.0f}){gpu_mib()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
