"""The worker's lifecycle tables (router_io/engine_lifecycle.py): what they hold, and that an
event they have no entry for closes only the connection it concerns.

The behaviour along the entries is what the other engine tests and the system tests exercise
(attach, refusal, detach, streaming with Q2); here: the tables themselves, and the misses."""
from __future__ import annotations

import pytest

import memrouter
from common import ipc
from router_io import engine_lifecycle as lc
from router_io.engine_records import InStream, OutStream


def test_the_tables_name_only_known_states_events_and_actions():
    conn_actions = {v for k, v in vars(lc).items() if k.startswith("CA_")}
    for (state, event), action in lc.CONN_TRANSITIONS.items():
        assert state in lc.CONN_STATES and event in lc.CONN_EVENTS and action in conn_actions
    link_actions = {v for k, v in vars(lc).items() if k.startswith("LA_")}
    for (state, event), action in lc.LINK_TRANSITIONS.items():
        assert state in lc.LINK_STATES and event in lc.LINK_EVENTS and action in link_actions
    for (state, event), new in lc.STREAM_TRANSITIONS.items():
        assert {state, new} <= set(lc.STREAM_STATES) and event in lc.STREAM_EVENTS


def test_the_pairs_without_an_entry_are_the_documented_ones():
    """A pair left out is a decision (the module's comments say why): adding or dropping one
    must show up here."""
    conn_missing = {(s, e) for s in lc.CONN_STATES for e in lc.CONN_EVENTS
                    if (s, e) not in lc.CONN_TRANSITIONS}
    assert conn_missing == {(lc.C_OPENING, lc.CE_ATTACH),
                            (lc.C_OPENING, lc.CE_ATTACH_OUT), (lc.C_REFUSED, lc.CE_ATTACH_OUT),
                            (lc.C_OPENING, lc.CE_CLOSE), (lc.C_REFUSED, lc.CE_CLOSE)}
    link_missing = {(s, e) for s in lc.LINK_STATES for e in lc.LINK_EVENTS
                    if (s, e) not in lc.LINK_TRANSITIONS}
    assert link_missing == {(lc.L_PENDING, lc.LE_ATTACH)}


def test_a_streamed_delivery_moves_only_along_the_table():
    rec = InStream(None, None, 1)
    assert rec.stage == lc.S_HEAD
    for event, stage in ((lc.SE_ROUTED, lc.S_FLOWING), (lc.SE_WINDOW_FULL, lc.S_BLOCKED),
                         (lc.SE_ACKED_SOME, lc.S_BLOCKED), (lc.SE_ACKED, lc.S_FLOWING),
                         (lc.SE_END, lc.S_ENDED)):
        lc.stream_to(rec, event)
        assert rec.stage == stage
    with pytest.raises(lc.LifecycleError, match="end on a streamed delivery that is ended"):
        lc.stream_to(rec, lc.SE_END)
    out = OutStream(7, None, False)
    assert out.stage == lc.S_WAITING
    with pytest.raises(lc.LifecycleError, match="last part sent .* waiting for its link"):
        lc.stream_to(out, lc.SE_SENT)
    lc.stream_to(out, lc.SE_GO)
    lc.stream_to(out, lc.SE_ABORT)
    assert out.stage == lc.S_ENDED


def test_a_core_effect_without_an_entry_closes_only_that_connection(engine_cls):
    """An AttachOut for a connection whose open was never reported (the core cannot know it):
    a bug, not the peer's doing: that connection is closed with amqp:internal-error, another
    one is untouched."""
    r = memrouter.MemRouter(engine_cls=engine_cls)
    logs = []
    r.engine.log = lambda level, text: logs.append((level, text))
    bystander = r.client("bystander")
    rcv = bystander.receiver("fine/q", credit=1)
    r.run()
    opening = r.engine.new_connection(dict(memrouter.LISTENER), "peer:2", "in")
    r.engine.apply_all([ipc.AttachOut(10 ** 9, opening.conn_id, ipc.DIR_IN, "al", None,
                                      {"address": "x"}, [0, 0], 10)])
    assert opening.failed and "LifecycleError: AttachOut on a connection that is opening" in (
        " ".join(text for level, text in logs if level == "error"))
    assert not bystander.server.failed
    snd = bystander.sender("fine/q")
    r.run()
    bystander.send(snd, "still here")
    r.run()
    assert [m.body for _, m in bystander.receive_all(rcv)] == ["still here"]
