"""The verify cost of a draft tree: one verify pass over N nodes on a cached prefix.

For each N, the target's KV cache holds a ``--prefix``-token prompt but its last token; one verify
pass feeds that pending token plus N draft nodes, exactly as :class:`specviz.core.engine.Generation`
does: a tree of ``--branches`` B chains from the root with the tree attention mask and position
ids of :func:`specviz.core.engine.tree_attention_inputs`, and, for comparison, a chain of N nodes
through the plain causal call. After each pass the cache is cropped back to the prefix. Reported:
the median wall time of a pass (ms) over ``--repeats`` passes after ``--warmup`` untimed ones,
and its ratio to one position (N = 0: the pending token alone, a plain decoding step).

    python -m scripts.tree_verify_cost --dtype bfloat16 --threads 2
    python -m scripts.tree_verify_cost --dtype float32 --nodes 1 4 8 12 16 24 32 --json cost.json

Run it on a quiet machine: it is a timing measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specviz.core.drafttree import crop_cache
from specviz.core.engine import tree_attention_inputs
from specviz.core.kvcache import cache_argument


def tree_parents(n: int, branches: int) -> list[int]:
    """Parents of ``n`` nodes forming ``branches`` chains from the root, filled round-robin by
    depth (so the nodes are listed parents first)."""
    parents: list[int] = []
    last = [-1] * branches  # the deepest node of each branch so far
    for i in range(n):
        b = i % branches
        parents.append(last[b])
        last[b] = i
    return parents


def time_passes(model, prefix: list[int], tokens: list[int], parents: list[int] | None, warmup: int,
                repeats: int) -> list[float]:
    """Milliseconds of each timed verify pass (``parents`` None: the plain causal call)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([prefix[:-1]], device=device), **cache_argument(model, cache), use_cache=True,
              logits_to_keep=1)
        ids = torch.tensor([prefix[-1:] + tokens], device=device)
        extra = {}
        if parents is not None:
            mask, positions = tree_attention_inputs(parents, len(prefix) - 1, 1, model.dtype, device)
            extra = {"attention_mask": mask, "position_ids": positions}
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            model(input_ids=ids, **cache_argument(model, cache), use_cache=True, logits_to_keep=len(tokens) + 1, **extra)
            if device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = (time.perf_counter() - t0) * 1e3
            crop_cache(cache, len(prefix) - 1)
            if i >= warmup:
                times.append(elapsed)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="offline name, directory or hub id")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prefix", type=int, default=100, help="cached prefix length (tokens)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 8, 12, 16], help="tree sizes N")
    parser.add_argument("--branches", type=int, default=4, help="B: chains from the root in the tree")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", default=None, metavar="FILE")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from specviz.models.loading import load_model

    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    model = loaded.model
    generator = torch.Generator().manual_seed(0)
    vocab = min(loaded.vocab_size, loaded.logits_width)
    prefix = torch.randint(0, vocab, (args.prefix,), generator=generator).tolist()
    base = statistics.median(time_passes(model, prefix, [], None, args.warmup, args.repeats))
    rows = [{"nodes": 0, "tree_ms": base, "chain_ms": base, "tree_ratio": 1.0, "chain_ratio": 1.0}]
    for n in args.nodes:
        tokens = torch.randint(0, vocab, (n,), generator=generator).tolist()
        tree = statistics.median(time_passes(model, prefix, tokens, tree_parents(n, args.branches), args.warmup,
                                             args.repeats))
        chain = statistics.median(time_passes(model, prefix, tokens, None, args.warmup, args.repeats))
        rows.append({"nodes": n, "tree_ms": tree, "chain_ms": chain, "tree_ratio": tree / base,
                     "chain_ratio": chain / base})
    print(f"{loaded.name} {args.dtype} on {args.device}, {torch.get_num_threads()} threads, prefix {args.prefix} "
          f"cached tokens, B = {args.branches}, median of {args.repeats} passes (ms; ratio to 1 position)")
    print("| N nodes | tree pass ms | ratio | chain pass ms | ratio |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['nodes']} | {r['tree_ms']:.1f} | {r['tree_ratio']:.2f} | {r['chain_ms']:.1f} | "
              f"{r['chain_ratio']:.2f} |")
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        Path(args.json).write_text(json.dumps({"settings": settings, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
