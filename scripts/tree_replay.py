"""Replay model-free drafters on greedy outputs: tokens per pass and nodes per pass, no timing.

At temperature 0 a point-mass draft node is accepted exactly when it is the target's argmax, so
the rounds of prompt lookup or suffix lookup on a prompt are fixed by the plain greedy output:
this script generates that output once per bench prompt (float32, where speculative greedy output
equals plain greedy output, no EOS stop, like the bench), then replays each drafter setting over
it: at every round the drafter proposes from the committed tokens, the walk follows the nodes that
match the greedy continuation, and the round emits the accepted path plus one token. It prints
tokens per pass and nodes per pass per prompt and pooled: the counts the engine gets (checked on
fix-typos at K = 8, where ``scripts/suffix_repeat.py`` runs the engine's prompt lookup: 4.00
tokens per pass as a chain, 4.92 as a B = 4 tree, the replay's figures).

With ``--cost FILE`` (the JSON of ``scripts/tree_verify_cost.py``: the ratio of a pass of N
nodes to one position) it also prints a cost-model estimate of the speedup over plain decoding:
tokens ÷ Σ cost(nodes in the pass), drafting and bookkeeping taken as free. That is a guide for
choosing settings, not a measurement: the bench measures.

    python -m scripts.tree_replay -k 4 8
    python -m scripts.tree_replay -k 8 --cost tree_cost_bf16.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specviz.drafters import PromptLookupDrafter, SuffixDrafter, SuffixHistory
from specviz.core.sampling import SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)


def accepted_length(tokens: list[int], parents: list[int], greedy: list[int]) -> int:
    """How many tree nodes the greedy walk accepts: from the root, follow the child whose token is
    the next greedy token."""
    node, n = -1, 0
    while n < len(greedy):
        child = next((i for i, (t, p) in enumerate(zip(tokens, parents)) if p == node and t == greedy[n]), None)
        if child is None:
            return n
        node, n = child, n + 1
    return n


def replay(drafter, prompt: list[int], output: list[int], k: int, branches: int, max_nodes: int | None):
    """``(passes, nodes per pass list)`` of speculative decoding of ``output`` after ``prompt``."""
    i, nodes = 0, []
    while i < len(output):
        k_round = min(k, len(output) - i - 1)  # as the engine: never draft past the length limit
        tree = (drafter.propose(prompt + output[:i], k_round, GREEDY, None, branches=branches, max_nodes=max_nodes)
                if k_round > 0 else None)
        tokens, parents = (tree.tokens, tree.parents) if tree is not None else ([], [])
        i += accepted_length(tokens, parents, output[i:]) + 1
        nodes.append(len(tokens))
    return len(nodes), nodes


def cost_model(path: str | None):
    """A function N nodes → cost of a pass of N nodes plus the pending token, in plain steps."""
    if not path:
        return None
    data = json.loads(Path(path).read_text())
    points = sorted((int(row["nodes"]), float(row["tree_ratio"])) for row in data["rows"])
    points = [(0, 1.0)] + [p for p in points if p[0] > 0]

    def cost(n: int) -> float:
        for (a, ca), (b, cb) in zip(points, points[1:]):
            if n <= b:
                return ca + (cb - ca) * (n - a) / (b - a)
        return points[-1][1]
    return cost


def settings(vocab: int, k: int):
    """The drafter settings compared: name → (drafter, B, N)."""
    deep = 10_000.0  # every branch K deep: the tree before the match-length rule
    return {
        "ngram chain": (PromptLookupDrafter(vocab), 1, None),
        "ngram tree B=4 N=2K": (PromptLookupDrafter(vocab), 4, 2 * k),
        "ngram tree B=4 N=4K, K-deep branches": (PromptLookupDrafter(vocab, depth_factor=deep), 4, 4 * k),
        "ngram tree B=4 N=2K, K-deep branches": (PromptLookupDrafter(vocab, depth_factor=deep), 4, 2 * k),
        "suffix chain": (SuffixDrafter(vocab, history=SuffixHistory()), 1, None),
        "suffix tree B=4 N=2K": (SuffixDrafter(vocab, history=SuffixHistory()), 4, 2 * k),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("-k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--cost", help="verify-cost JSON from scripts/tree_verify_cost.py")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)

    from specviz.run import bench
    from specviz.run import runner

    target, _ = runner.load_pair(args.target, "none", device="cpu", dtype="float32")
    cost = cost_model(args.cost)
    outputs = []
    for p in bench.load_prompts(None):
        ids = target.encode(p.prompt, p.chat)
        sample = bench.time_ours(target, None, ids, 0, GREEDY, args.max_new_tokens, 0)
        outputs.append((p.name, ids, sample.ids))
    vocab = target.model.get_output_embeddings().weight.shape[0]
    rows = []
    for k in args.k:
        for name, (drafter, branches, max_nodes) in settings(vocab, k).items():
            row = {"k": k, "setting": name, "prompts": {}}
            total_tokens = total_passes = total_nodes = 0
            total_cost = 0.0
            for prompt_name, ids, output in outputs:
                passes, nodes = replay(drafter, ids, output, k, branches, max_nodes)
                row["prompts"][prompt_name] = len(output) / passes
                total_tokens, total_passes, total_nodes = (total_tokens + len(output), total_passes + passes,
                                                           total_nodes + sum(nodes))
                if cost:
                    total_cost += sum(cost(n) for n in nodes)
            row.update(tokens_per_pass=total_tokens / total_passes, nodes_per_pass=total_nodes / total_passes,
                       estimated_speedup=total_tokens / total_cost if cost else None)
            rows.append(row)
            per_prompt = "  ".join(f"{p} {v:.2f}" for p, v in row["prompts"].items())
            estimate = f"  est. speedup {row['estimated_speedup']:.3f}" if cost else ""
            print(f"K={k} {name:38s} tokens/pass {row['tokens_per_pass']:.2f}  nodes/pass "
                  f"{row['nodes_per_pass']:.2f}{estimate} | {per_prompt}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    torch.set_num_threads(2)
    raise SystemExit(main())
