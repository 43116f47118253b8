"""Token Recycling: a table of the target's own top-k next tokens, walked as a static tree.

:class:`RecycleDrafter` follows Luo et al. 2025 ("Turning Trash into Treasure: Accelerating
Inference of Large Language Models with Token Recycling", ACL 2025, arXiv 2408.08696). Every verify
pass scores the pending token and every drafted node, and each of those distributions names the
target's most likely next tokens; plain speculative sampling keeps one and throws the rest away.
Token Recycling keeps them: an adjacency table (:class:`RecycleTable`) holds, for every token seen,
the top-k candidates the target gave after it the last time it was scored (Section 3.3: the row is
overwritten, the last occurrence in a pass winning). A draft is a breadth-first walk of that table
from the last committed token along a static tree (Section 3.2, :func:`static_tree`), verified in
one pass with tree attention. No model, no training, no extra pass: the engine hands the table the
verify pass's own top-k ids (``wants_top_ids`` / ``observe_top_ids``).

The table lives in the process (:data:`RECYCLE_TABLE`, emptied by :func:`clear_recycle_table`; the
CLI's and the bench's) or per visitor in the app (:mod:`specviz.ui.serve.visitors`); it is bounded
(:class:`RecycleTable`'s row cap). Its drafts are point masses, like prompt lookup's: each token is
a deterministic function of the run so far (committed tokens and the target's earlier passes),
never of this round's random draws, so the verify walk stays exact
(:func:`specviz.core.sampling.verify_tree`).

A cold table drafts little on a short run: a token gets a row only once a pass has scored it.
:func:`warm_table` gives it the paper's hot start (Section 3.1) from a fixed, bundled text instead
of earlier queries (:func:`warm_text`, :func:`warm_token_ids`; the CLI's and the bench's
``--recycle-warm N``).
"""

from __future__ import annotations

import re
import weakref
from pathlib import Path

import torch

from specviz.core.drafttree import DraftTree, default_tree_nodes
from specviz.core.kvcache import run_pass

__all__ = ["PAPER_TREE", "RECYCLE_TABLE", "RECYCLE_TOP_K", "SESSION_TABLE_MAX_ROWS", "TABLE_MAX_ROWS",
           "WARM_MAX_TOKENS", "WARM_TEXT_EXCLUDES", "WARM_TEXT_FILE", "RecycleDrafter", "RecycleTable",
           "clear_recycle_table", "static_tree", "warm_table", "warm_text", "warm_token_ids"]

#: Candidates kept per token: the paper's k = 8 (Section 4.1).
RECYCLE_TOP_K = 8
#: Rows (tokens) a table keeps at most: the process-wide one (the whole of SmolLM2's 49,152-token
#: vocabulary fits) and one visitor's own. Memory: 44 bytes a row (k = 8) plus up to 8 bytes per
#: vocabulary entry for the token → row index (SmolLM2: about 2.5 MB process-wide, 0.6 MB a visitor).
TABLE_MAX_ROWS = 49_152
SESSION_TABLE_MAX_ROWS = 4_096

#: The paper's static draft tree (Luo et al. 2025, Appendix 8.1; the authors' template "2.2.2"),
#: 80 nodes in 6 levels, each written as its path from the root: digit j at depth d means "the
#: j-th candidate (0 = most likely) of the node above". Earlier candidates get more children and
#: deeper branches: the tree is imbalanced toward the likelier continuations.
_PAPER_LEVELS = (
    "0 1 2 3 4 5 6 7",
    "00 01 02 03 04 05 06 07 10 11 12 13 20 21 22 30 31 40 50 60 70",
    "000 001 002 003 004 005 006 007 010 011 012 020 021 030 040 050 060 070 100 101 110 200 300 400 500",
    "0000 0001 0002 0003 0004 0010 0011 0020 0030 0040 0100 0200 1000 2000 3000",
    "00000 00001 00002 00010 00020 00100 01000 10000",
    "000000 000001 000100",
)
PAPER_TREE: tuple[tuple[int, ...], ...] = tuple(tuple(int(c) for c in path) for level in _PAPER_LEVELS
                                                for path in level.split())


def static_tree(k: int, branches: int, max_nodes: int) -> list[tuple[int, ...]]:
    """The paper's static tree scaled to a verify pass's budget: at most ``max_nodes`` node paths,
    depth ``<= k``, candidate index ``< branches``, parents before children.

    The paper's 80-node tree suits a GPU, where a pass over 80 positions costs about one step; on
    a 2-core CPU a pass over 8–12 positions already costs 5–15% more than a 4-token chain in
    bfloat16 (/work/shared/README.md), so the tree is cut. Its nodes (plus the top-1 spine
    ``0, 00, 000, …`` down to depth ``k``, which the paper's 6 levels may not reach) are taken in
    order of the sum of their candidate indices, then depth, then the paper's order: the top-1
    chain first, then every path that leaves it once for a second choice, and so on. A parent's
    sum and depth are smaller than its children's, so any prefix of that order is a tree.
    ``branches = 1`` gives the top-1 chain, ``k`` deep.

    Args:
        k: the deepest a node may be (K, >= 0).
        branches: B, the most candidates of one node used (>= 1).
        max_nodes: N, the most nodes.

    Returns:
        The node paths (tuples of candidate indices), parents first.
    """
    spine = [(0,) * d for d in range(1, k + 1)]
    candidates = list(dict.fromkeys(spine + [p for p in PAPER_TREE if len(p) <= k and max(p) < branches]))
    order = {path: i for i, path in enumerate(PAPER_TREE)}
    candidates.sort(key=lambda p: (sum(p), len(p), order.get(p, len(order))))
    return candidates[: max(max_nodes, 0)]


class RecycleTable:
    """The adjacency table: for each token, the target's top-k next tokens the last time it was
    scored (Luo et al. 2025, Section 3.1), bounded to ``max_rows`` tokens.

    Stored as the paper's matrix, compactly: a ``(max_rows, k)`` int32 tensor of candidate rows
    (``-1``: empty), allocated at once, each row's token and last update, and a token → row index
    that grows with the largest token id seen; when every row is taken, the row updated longest
    ago is reused. Updating a row
    overwrites it (Section 3.3), so a token's candidates follow the latest context it appeared in.

    Args:
        max_rows: tokens kept at most (>= 1).
        k: candidates per token (>= 1).

    Raises:
        ValueError: if ``max_rows`` or ``k`` is < 1.
    """

    def __init__(self, max_rows: int = TABLE_MAX_ROWS, k: int = RECYCLE_TOP_K) -> None:
        if max_rows < 1 or k < 1:
            raise ValueError(f"need max_rows >= 1 and k >= 1, got {max_rows}, {k}")
        self.max_rows = max_rows
        self.k = k
        self.clear()

    def clear(self) -> None:
        """Forget every row."""
        self._rows = torch.full((self.max_rows, self.k), -1, dtype=torch.int32)
        self._owner = torch.full((self.max_rows,), -1, dtype=torch.int32)  # row → its token
        self._stamp = torch.zeros(self.max_rows, dtype=torch.int64)  # row → its last update
        self._row_of = torch.full((0,), -1, dtype=torch.int32)  # token → its row
        self._used = 0
        self._clock = 0

    def __len__(self) -> int:
        """Tokens with a row."""
        return self._used

    def row(self, token: int) -> list[int]:
        """The candidates after ``token``, most likely first (empty if it has no row)."""
        if not 0 <= token < self._row_of.numel() or int(self._row_of[token]) < 0:
            return []
        return [t for t in self._rows[int(self._row_of[token])].tolist() if t >= 0]

    def update(self, tokens: list[int], top_ids: torch.Tensor) -> None:
        """Overwrite the rows of ``tokens`` with ``top_ids`` (Section 3.3); for a token listed
        twice the later row wins (the paper's "last occurrence", its best-accepted variant).

        Args:
            tokens: ``M`` token ids (>= 0).
            top_ids: ``(M, k')`` int64, row ``i`` the target's most likely next tokens after
                ``tokens[i]``, most likely first (``k'`` may differ from ``k``: extra columns are
                dropped, missing ones are left empty). Any device.

        Raises:
            ValueError: if ``top_ids`` does not have one row per token, or a token is negative.
        """
        if top_ids.dim() != 2 or top_ids.shape[0] != len(tokens):
            raise ValueError(f"need one row of top ids per token: {len(tokens)} tokens, shape {tuple(top_ids.shape)}")
        if any(t < 0 for t in tokens):
            raise ValueError("token ids must be >= 0")
        ids = torch.full((len(tokens), self.k), -1, dtype=torch.int32)
        width = min(self.k, top_ids.shape[1])
        ids[:, :width] = top_ids[:, :width].to("cpu", torch.int32)
        top = max(tokens, default=-1)
        if top >= self._row_of.numel():  # grown by doubling: a few copies over a run, not one per new id
            grown = torch.full((max(top + 1, 2 * self._row_of.numel()),), -1, dtype=torch.int32)
            grown[: self._row_of.numel()] = self._row_of
            self._row_of = grown
        for token, candidates in zip(tokens, ids):
            self._clock += 1
            self._rows[self._slot(token)] = candidates

    def _slot(self, token: int) -> int:
        """The row of ``token``: its own, a free one, or the one updated longest ago (reused)."""
        slot = int(self._row_of[token])
        if slot < 0:
            if self._used < self.max_rows:
                slot, self._used = self._used, self._used + 1
            else:
                slot = int(self._stamp.argmin())
                self._row_of[int(self._owner[slot])] = -1
            self._owner[slot] = token
            self._row_of[token] = slot
        self._stamp[slot] = self._clock
        return slot

    def snapshot(self) -> tuple:
        """A copy of the table's contents, for :meth:`restore` (a warm-up run leaves no trace)."""
        return (self._rows.clone(), self._owner.clone(), self._stamp.clone(), self._row_of.clone(), self._used,
                self._clock)

    def restore(self, snapshot: tuple) -> None:
        """Put back what :meth:`snapshot` copied."""
        rows, owner, stamp, row_of, self._used, self._clock = snapshot
        self._rows, self._owner, self._stamp, self._row_of = rows.clone(), owner.clone(), stamp.clone(), row_of.clone()


#: The warm text's source: the bundled instructions the EAGLE head's teacher data is made from
#: (``python -m specviz train-draft``), one a line, ``#`` comments skipped.
WARM_TEXT_FILE = Path(__file__).resolve().parents[1] / "data" / "draft_prompts.txt"
#: Words whose lines are left out of the warm text (whole words, any case): the topics of the bench
#: prompts (``specviz/data/bench_prompts.json``: a lighthouse keeper's message in a bottle, typo fixing,
#: CSV → JSON, renaming a variable in a Python function) and of their answers, so that no bench
#: measurement drafts from its own prompt or answer.
WARM_TEXT_EXCLUDES = ("lighthouse", "lighthouses", "keeper", "keepers", "bottle", "bottles", "message", "messages",
                      "story", "stories", "typo", "typos", "spelling", "mistake", "mistakes", "paragraph", "fox",
                      "csv", "json", "convert", "rename", "variable", "variables", "python", "function",
                      "functions", "code")
#: The most warm-text tokens used (the bundled text is about 2,000 SmolLM2 tokens, under this cap).
WARM_MAX_TOKENS = 4096
_WARM_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer → the warm text's ids


def warm_text() -> str:
    """The text a table is warmed from: the lines of :data:`WARM_TEXT_FILE` (instructions on
    varied everyday topics, ``#`` comments and blank lines skipped) that contain none of
    :data:`WARM_TEXT_EXCLUDES`, joined by newlines.

    Why this text: it is bundled, fixed and plain English, and it is not any bench prompt nor a
    likely answer to one; the lines touching the bench's topics are left out by word. The bundled
    traces (``specviz/data/traces``) would add little: four of their five prompts are the bench's typo
    and CSV prompts or a lighthouse poem, and the fifth is 32 tokens.
    """
    excluded = re.compile(r"\b(" + "|".join(WARM_TEXT_EXCLUDES) + r")\b", re.IGNORECASE)
    lines = [line.strip() for line in WARM_TEXT_FILE.read_text(encoding="utf-8").splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith("#") and not excluded.search(line))


def warm_token_ids(tokenizer, n_tokens: int = WARM_MAX_TOKENS) -> list[int]:
    """The first ``n_tokens`` ids of :func:`warm_text` under ``tokenizer`` (no special tokens;
    fewer if the text is shorter). The ids are cached per tokenizer object (weakly), not the table.

    Args:
        tokenizer: a transformers tokenizer (a :class:`~specviz.models.loading.LoadedModel`'s).
        n_tokens: how many (>= 0; at most :data:`WARM_MAX_TOKENS`).

    Raises:
        ValueError: if ``n_tokens`` is negative or over :data:`WARM_MAX_TOKENS`.
    """
    if not 0 <= n_tokens <= WARM_MAX_TOKENS:
        raise ValueError(f"warm-text tokens must be in 0..{WARM_MAX_TOKENS}, got {n_tokens}")
    ids = _WARM_IDS.get(tokenizer)
    if ids is None:
        ids = _WARM_IDS[tokenizer] = list(tokenizer(warm_text(), add_special_tokens=False)["input_ids"])[:WARM_MAX_TOKENS]
    return ids[:n_tokens]


def warm_table(target, token_ids: list[int], table: RecycleTable, chunk: int = 512,
               vocab_size: int | None = None) -> int:
    """Fill ``table`` with the target's own top-k next tokens after every token of a fixed text:
    the paper's hot start (Luo et al. 2025, Section 3.1), done from ``token_ids`` instead of from
    earlier queries.

    The target reads ``token_ids`` teacher-forced, in chunks of ``chunk`` tokens, each chunk its
    own sequence (a fresh KV cache, so the cost is linear in the tokens and a chunk's first tokens
    see less context), through the engine's own pass (:func:`specviz.core.kvcache.run_pass`) under
    ``torch.inference_mode``; nothing is sampled. Position ``i``'s logits (cut to ``vocab_size``
    columns, as the engine cuts them) rank the next tokens after ``token_ids[i]``; their top
    ``table.k`` ids are written with :meth:`RecycleTable.update`, exactly the rows a verify pass
    writes, a later occurrence of a token overwriting an earlier one. Cost: one forward pass per
    chunk, ``ceil(len(token_ids) / chunk)`` in all.

    Exactness: the warm rows are a deterministic function of a text that is not this run's, nor of
    any of its random draws; drafts stay point masses verified by
    :func:`specviz.core.sampling.verify_tree`, so the output distribution is the target's, warm or cold.

    Args:
        target: the target: a transformers causal LM, or a :class:`~specviz.models.loading.LoadedModel`.
        token_ids: ``(T,)`` ids of the warm text (:func:`warm_token_ids`), each ``>= 0``.
        table: the table to write (rows already there are kept unless overwritten).
        chunk: tokens per forward pass (>= 1).
        vocab_size: logit columns ranked (default: a LoadedModel's tokenizer size capped at its
            logits width, as :func:`specviz.run.runner.make_generation` does; else every column).

    Returns:
        The forward passes run.

    Raises:
        ValueError: if ``chunk`` < 1 (negative ids: from :meth:`RecycleTable.update`).
    """
    from transformers import DynamicCache

    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    model = target if isinstance(target, torch.nn.Module) else target.model
    if vocab_size is None and not isinstance(target, torch.nn.Module):
        vocab_size = min(target.vocab_size, target.logits_width)
    device = next(model.parameters()).device
    passes = 0
    for start in range(0, len(token_ids), chunk):
        piece = list(token_ids[start : start + chunk])
        with torch.inference_mode():
            logits = run_pass(model, DynamicCache(), torch.tensor(piece, dtype=torch.long, device=device), len(piece))
        logits = logits[:, :vocab_size] if vocab_size else logits
        table.update(piece, logits.topk(min(table.k, logits.shape[-1]), dim=-1).indices)
        passes += 1
    return passes


#: The process-wide table: the default of a :class:`RecycleDrafter` built without one (the CLI,
#: the bench). The app gives each visitor session its own.
RECYCLE_TABLE = RecycleTable()


def clear_recycle_table() -> None:
    """Empty the process-wide table (the bench does this before each measurement, so that no
    method drafts from what an earlier one taught it)."""
    RECYCLE_TABLE.clear()


class RecycleDrafter:
    """Token Recycling (Luo et al. 2025): drafts a static tree from the adjacency table.

    Each round, the tree of :func:`static_tree` (the paper's shape, cut to depth K, B candidates a
    node and N nodes) is filled breadth-first from the last committed token: a node with path
    ``(…, j)`` is the j-th candidate in the table row of its parent's token (Algorithm 1). A node
    whose parent's token has no row (or too short a row) is left out with its subtree, and the
    budget goes to the next nodes in order. ``branches = 1`` walks the top-1 candidates: a chain.
    Siblings are distinct (a row's candidates are), and every node is a point mass.

    The engine calls :meth:`observe_top_ids` after every verify pass with the top-k next tokens of
    each scored position (the pending token and every drafted node, accepted or not), which is
    how the table learns (Section 3.3). The table is not reset between runs (the paper's hot
    start, Section 3.1): the process's, or in the app the visitor's own.

    Args:
        vocab_size: width of the probability rows to return.
        table: the table to draft from and update (default :data:`RECYCLE_TABLE`).
    """

    uses_model = False

    def __init__(self, vocab_size: int, table: RecycleTable | None = None) -> None:
        self.vocab_size = vocab_size
        self.table = table if table is not None else RECYCLE_TABLE
        self.name = "Token Recycling (the target's own top-k candidates)"
        self.device = torch.device("cpu")

    @property
    def wants_top_ids(self) -> int:
        """How many of the target's most likely next tokens the engine should hand over per position."""
        return self.table.k

    def observe_top_ids(self, tokens: list[int], top_ids: torch.Tensor) -> None:
        """The verify pass scored the positions after ``tokens`` (``M``: the last committed token,
        then every drafted node); ``top_ids`` ``(M, k)`` are the target's most likely next tokens
        there, most likely first. They overwrite those tokens' rows."""
        self.table.update(tokens, top_ids)

    def prefill(self, context: list[int]) -> None:
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None) -> DraftTree:
        if k <= 0 or not committed:
            return DraftTree.point_masses([], [], self.vocab_size)
        budget = k if branches <= 1 else (max_nodes or default_tree_nodes(k, branches))
        tokens: list[int] = []
        parents: list[int] = []
        index: dict[tuple[int, ...], int] = {(): -1}
        rows: dict[int, list[int]] = {}
        for path in static_tree(k, max(branches, 1), len(PAPER_TREE) + k):
            if len(tokens) >= budget:
                break
            parent = index.get(path[:-1])
            if parent is None:  # the parent was left out: so is its subtree
                continue
            token = committed[-1] if parent < 0 else tokens[parent]
            row = rows.get(token)
            if row is None:
                row = rows[token] = self.table.row(token)
            if path[-1] < len(row):
                index[path] = len(tokens)
                tokens.append(row[path[-1]])
                parents.append(parent)
        return DraftTree.point_masses(tokens, parents, self.vocab_size)

    def rollback(self, valid: int, path: list[int] | None = None) -> None:
        pass

    def finish(self, prompt: list[int], output: list[int]) -> None:
        pass
