"""Routing-protocol messages exactly as a Qpid Dispatch 1.19 router put them on the wire,
replayed against our routing engine; and ours compared with them type for type.

The frames in tests/data/routing_1_19.json were recorded by scripts/capture_1x_routing.py from a
real 1.19.0 router (``Router.X``) talking to the capture script (``Router.Capture``): HELLO (before
and after it saw us), RA, LSR, LSU, MAR, a differential MAU (a client's receiver appeared on it)
and an absolute MAU (its answer to our MAR), each the raw AMQP message bytes. These tests need
no 1.x binary: they guard the wire format in every run.
"""
from __future__ import annotations

import json
import os

import pytest
from proton import Data

from agent.interior import decode_control, encode_control
from agent.routing import RemoteAddressAdded, RoutingEngine, Send
from agent.routing.effects import Topology
from agent.routing.messages import LSR, LSU, MAR, MAU, RA, Hello, decode, encode

_PATH = os.path.join(os.path.dirname(__file__), os.pardir, "data", "routing_1_19.json")
with open(_PATH, encoding="utf-8") as _f:
    CAPTURE = json.load(_f)
PEER, US = CAPTURE["peer"], CAPTURE["us"]
FRAMES = [(f["opcode"], bytes.fromhex(f["hex"]), f["at"]) for f in CAPTURE["frames"]]
FROM_PEER = [(op, raw, at) for op, raw, at in FRAMES
             if str({str(k): v for k, v in decode_control(raw)[1].items()}.get("id")) == PEER]
TYPES = {"HELLO": Hello, "RA": RA, "LSR": LSR, "LSU": LSU, "MAR": MAR, "MAU": MAU}


def _sections(raw: bytes) -> dict:
    """descriptor code -> a Data holding that section of a message."""
    out = {}
    view = memoryview(raw)
    while view:
        data = Data()
        used = data.decode(bytes(view))
        data.rewind()
        data.next()
        data.enter()
        data.next()
        code = data.get_object()
        data.exit()
        data.rewind()
        out[int(code)] = data
        view = view[used:]
    return out


def _typed(data: Data) -> list:
    """The type tree of what ``data`` holds: [(type, value-or-children), ...] in order."""
    out = []
    while True:
        kind = data.next()
        if kind is None:
            return out
        if kind in (Data.MAP, Data.LIST, Data.ARRAY, Data.DESCRIBED):
            data.enter()
            out.append((kind, _typed(data)))
            data.exit()
        else:
            out.append((kind, data.get_object()))


def _section_types(raw: bytes, code: int) -> list:
    return _typed(_sections(raw)[code])


def test_the_capture_has_every_message_kind():
    kinds = {op for op, _raw, _at in FROM_PEER}
    assert kinds == {"HELLO", "RA", "LSR", "LSU", "MAR", "MAU"}
    bodies = [decode(op, decode_control(raw)[1]) for op, raw, _at in FROM_PEER if op == "MAU"]
    assert {m.kind for m in bodies} == {"differential", "absolute"}


@pytest.mark.parametrize("opcode, raw", [(op, raw) for op, raw, _at in FRAMES])
def test_every_captured_frame_decodes(opcode, raw):
    op, body, _to = decode_control(raw)
    assert op == opcode
    msg = decode(op, body)
    assert isinstance(msg, TYPES[op]) and msg.pv == 1


def _ours(op: str, raw: bytes) -> bytes:
    """Our encoding of the same message (what our agent would hand the core)."""
    _op, body, to = decode_control(raw)
    msg = decode(op, body)
    opcode, ours = encode(msg)
    from agent.routing.messages import application_properties
    return encode_control(to, application_properties(opcode), ours)


@pytest.mark.parametrize("opcode", ["HELLO", "RA", "LSR", "LSU", "MAR", "MAU"])
def test_our_encoding_has_1_19s_types_and_key_order(opcode):
    """amqp-value (0x77) and application-properties (0x74) sections: same AMQP types (int vs
    long, string vs symbol keys), same key order, same values as 1.19's."""
    frames = [raw for op, raw, _at in FROM_PEER if op == opcode]
    assert frames
    for raw in frames:
        ours = _ours(opcode, raw)
        assert _section_types(ours, 0x77) == _section_types(raw, 0x77)
        assert _section_types(ours, 0x74) == _section_types(raw, 0x74)


def test_replayed_conversation_makes_the_1_19_router_a_neighbour_with_its_address():
    engine = RoutingEngine(US, instance=1)
    effects = list(engine.link_up("L1", 1))
    for op, raw, at in FRAMES:
        _op, body, _to = decode_control(raw)
        effects += engine.receive("L1", op, body, 10.0 + at)
        effects += engine.tick(10.0 + at)
    effects += engine.tick(20.0)
    # the topology reported to the core (which computes the routes): 1.19 known with the
    # link state it sent, in which we are its neighbour (two-way: a route to it exists)
    states = {s.router: s for t in effects if isinstance(t, Topology) for s in t.states}
    assert PEER in states and US in states[PEER].peers
    assert PEER in states[US].peers
    assert RemoteAddressAdded("M0capture.address", PEER, 3) in effects
    assert engine.remote_addresses() == {PEER: {"M0capture.address": 3}}
    sent = [e for e in effects if isinstance(e, Send)]
    # 1.19 asked for our link state (LSR): we answered with an LSU to it
    assert any(s.opcode == "LSU" and PEER in s.to for s in sent)
    # our HELLO lists it as seen (two-way)
    hellos = [s for s in sent if s.opcode == "HELLO"]
    assert hellos and PEER in hellos[-1].body["seen"]
