"""A GPU job's records carry only what changed (:mod:`specviz.ui.serve.deltas`): the
decoder rebuilds exactly what the work yielded, across a pickle (ZeroGPU's pipe) and without one
(a job in the server's process), and a record's size follows what changed, not the run's length.
The wrapper's own pipe is measured in tests/test_zerogpu_worker.py."""

from __future__ import annotations

import pickle

import plotly.graph_objects as go
import pytest

from specviz.core.records import PLAIN, EmittedToken, Round
from specviz.ui.serve.deltas import (
    SAME,
    Appended,
    DeltaDecoder,
    DeltaEncoder,
    FieldsDelta,
    Packed,
)
from specviz.ui.serve.state import RunState


def _round(i: int) -> Round:
    token = EmittedToken(id=i, text=f" w{i}", kind=PLAIN, p_target=0.5, round=i,
                         top_source=[[i, f" w{i}", 0.5], [i + 1, f" w{i + 1}", 0.25]])
    return Round(index=i, emitted=[token], elapsed_s=i / 10)


def _grow(state: RunState, rounds: int) -> None:
    for _ in range(rounds):
        state.rounds.append(_round(len(state.rounds)))
        state.html.append(f"<span>w{len(state.html)}</span>")


def _through(encoder, decoder, outputs, pickled: bool):
    packed = encoder.encode(outputs)
    return decoder.decode(pickle.loads(pickle.dumps(packed)) if pickled else packed), packed


@pytest.mark.parametrize("pickled", [True, False], ids=["across-a-pipe", "in-process"])
def test_the_decoder_rebuilds_a_growing_run_state_and_panel_exactly(pickled):
    encoder, decoder = DeltaEncoder(), DeltaDecoder()
    state, panel = RunState(label="pair", k=4, max_new_tokens=64), "<div>"
    for step in range(5):
        _grow(state, 3)
        panel += f"<span>{step}</span>"
        state.meta = {"step": step}
        if step == 3:
            state.meta["busy_note"] = "busy"  # changed in place, after being set: still carried
            state.finished = True
        (got_panel, got_state), _ = _through(encoder, decoder, (panel, state), pickled)
        assert got_panel == panel
        assert got_state is not state  # the main side's own copy, its lists its own
        assert got_state.rounds == state.rounds
        assert got_state.html == state.html and got_state.meta == state.meta
        assert got_state.finished == state.finished and got_state.label == "pair"


def test_a_record_carries_the_new_rounds_and_the_new_part_of_the_panel_only():
    encoder = DeltaEncoder()
    state, panel = RunState(k=4), "<div>" + "x" * 1000
    encoder.encode((panel, state))
    _grow(state, 2)
    packed = encoder.encode((panel + "<b>", state))
    appended, delta = packed.items
    assert appended == Appended("<b>")
    assert isinstance(delta, FieldsDelta) and [r.index for r in delta.tails["rounds"]] == [0, 1]
    assert delta.fields == {}  # nothing else changed
    assert encoder.encode((panel + "<b>", state)).items[0] is SAME


def test_a_records_size_stays_flat_however_long_the_run():
    """The bytes of a record adding 4 rounds, after 16 and after 512 rounds: within 5% (the whole
    state would be 30 times bigger)."""
    sizes = []
    for before in (16, 512):
        encoder, state = DeltaEncoder(), RunState(k=4)
        _grow(state, before)
        encoder.encode(("<div>", state))
        _grow(state, 4)
        sizes.append(len(pickle.dumps(encoder.encode(("<div>" + "<b>", state)))))
    assert sizes[1] < 1.05 * sizes[0]
    assert len(pickle.dumps(state)) > 30 * sizes[1]


def test_rounds_replaced_rather_than_appended_travel_whole():
    encoder, decoder = DeltaEncoder(), DeltaDecoder()
    state = RunState(k=4)
    _grow(state, 3)
    decoder.decode(pickle.loads(pickle.dumps(encoder.encode((state,)))))
    state.rounds = [_round(7)]
    (got,), packed = _through(encoder, decoder, (state,), pickled=True)
    assert "rounds" in packed.items[0].fields and [r.index for r in got.rounds] == [7]


def test_a_figure_yielded_again_travels_as_same_and_a_new_one_whole():
    encoder, decoder = DeltaEncoder(), DeltaDecoder()
    figure = go.Figure(go.Scatter(y=list(range(100))))
    _through(encoder, decoder, ("a", figure), pickled=True)
    (_, again), packed = _through(encoder, decoder, ("a", figure), pickled=True)
    assert packed.items == (SAME, SAME) and again.to_plotly_json() == figure.to_plotly_json()
    other = go.Figure(go.Bar(y=[1]))
    assert encoder.encode(("a", other)).items[1] is other


def test_a_single_value_and_a_list_keep_their_shape():
    encoder, decoder = DeltaEncoder(), DeltaDecoder()
    assert decoder.decode(encoder.encode("only")) == "only"
    assert decoder.decode(encoder.encode("only more")) == "only more"
    assert decoder.decode(encoder.encode(["x", 2])) == ["x", 2]


def test_a_delta_without_a_value_before_it_is_refused():
    with pytest.raises(ValueError, match="before any value"):
        DeltaDecoder().decode(Packed((Appended("b"),), "tuple"))
