"""Drafted ids are checked once, where a draft enters the loop: a drafter that proposes
−1 (vLLM's placeholder), an id at or past the vocabulary, a float or a bool gets one error naming
the drafter, never a raw IndexError, a RuntimeError, or a wrapped-around id that is emitted."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

from specviz.core.drafttree import DraftTree
from specviz.core.engine import DraftIdError, Generation
from specviz.core.sampling import SamplingConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 64


class FixedDrafter:
    """Proposes the same chain every round, its p_draft a point mass on each token (row 0 for a
    token outside the vocabulary, which no real drafter's row could hold)."""

    name = "fixed test drafter"
    uses_model = False

    def __init__(self, tokens):
        self.tokens = tokens

    def prefill(self, context):
        pass

    def propose(self, committed, k, sampling, generator, branches=1, max_nodes=None):
        rows = torch.zeros(len(self.tokens), VOCAB)
        for i, token in enumerate(self.tokens):
            index = int(token) if 0 <= int(token) < VOCAB else 0
            rows[i, index] = 1.0
        return DraftTree.chain(self.tokens, rows, point_mass=True)

    def rollback(self, valid, path=None):
        pass


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, vocab_size=VOCAB)


def _run(target, tokens):
    return Generation(target, [1, 2, 3], FixedDrafter(tokens), k=len(tokens), sampling=SamplingConfig(temperature=0.0),
                      max_new_tokens=8, vocab_size=VOCAB).run()


@pytest.mark.parametrize("tokens, words", [
    ([5, -1], "token id -1 at draft node 1, outside the vocabulary [0, 64)"),
    ([VOCAB], "token id 64 at draft node 0"),
    ([3, VOCAB + 100], "token id 164"),
    ([2.0], "proposed 2.0 at draft node 0: a token id is a whole number"),
    ([True], "proposed True"),
    ([torch.tensor(1.5)], "proposed 1.5"),
])
def test_an_id_outside_the_vocabulary_or_not_an_integer_is_refused_naming_the_drafter(target, tokens, words):
    with pytest.raises(DraftIdError) as err:
        _run(target, tokens)
    assert "the drafter 'fixed test drafter' proposed" in str(err.value) and words in str(err.value), str(err.value)
    assert isinstance(err.value, ValueError)  # the page and the command line show it as one line


def test_integer_ids_of_any_integer_type_are_accepted(target):
    import numpy as np

    run = _run(target, [np.int64(5), torch.tensor(7), 9])
    assert all(type(t) is int for r in run.rounds for t in [d.id for d in r.drafted])
    assert {d.id for d in run.rounds[0].drafted} == {5, 7, 9}
