"""Routing control messages: decode accepts every key/integer encoding 1.x sends, encode is typed
as 1.x types it (Python part: string keys, int32; C part: symbol keys, long), round trips hold.
No processes, no sockets."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Data, int32, symbol, ulong, uint

from agent.routing.errors import ProtocolError
from agent.routing.messages import (ABSOLUTE, DIFFERENTIAL, LSR, LSU, MAR, MAU, RA, Hello,
                                    LinkState, application_properties, decode, encode,
                                    router_address, router_ma_address, sender_and_version)


def wire(body):
    """Through proton's codec and back, as a receiving router would see it."""
    data = Data()
    data.put_object(body)
    data.rewind()
    data.next()
    return data.get_object()


def test_hello_with_string_keys_and_int32():
    body = {"id": "R2", "pv": int32(1), "area": "0", "instance": int32(1700000000),
            "seen": ["R1", "R3"]}
    assert decode("HELLO", body) == Hello("R2", 1, "0", 1700000000, ("R1", "R3"))


def test_symbol_keys_and_every_integer_width():
    body = {symbol("id"): "R2", symbol("pv"): ulong(1), symbol("area"): symbol("0"),
            symbol("instance"): 7, symbol("ls_seq"): uint(3), symbol("mobile_seq"): ulong(4)}
    msg = decode(symbol("RA"), body)
    assert msg == RA("R2", 1, "0", 7, 3, 4)
    assert type(msg.ls_seq) is int and type(msg.id) is str


def test_missing_pv_is_version_0_and_defaults():
    assert decode("LSR", {"id": "R9"}) == LSR("R9", 0, "0")
    assert decode("HELLO", {"id": "R9", "seen": []}) == Hello("R9", 0, "0", 0, ())


def test_newer_protocol_version_is_ignored():
    assert decode("RA", {"id": "R2", "pv": 2, "ls_seq": 1, "mobile_seq": 0}) is None
    assert decode("MAU", {symbol("id"): "R2", symbol("pv"): 2}) is None   # not even validated
    assert sender_and_version({"id": "R2", "pv": int32(2)}) == ("R2", 2)


@pytest.mark.parametrize("opcode, body", [
    ("HELLO", {"id": "R1"}),                                     # seen missing
    ("HELLO", {"id": "R1", "seen": "R2"}),                       # seen not a list
    ("HELLO", {"id": 5, "seen": []}),                            # id not a string
    ("RA", {"id": "R1", "ls_seq": 1}),                           # mobile_seq missing
    ("RA", {"id": "R1", "ls_seq": "1", "mobile_seq": 0}),        # not an int
    ("RA", {"id": "R1", "ls_seq": True, "mobile_seq": 0}),       # a bool is not an int
    ("RA", {"id": "R1", "ls_seq": -1, "mobile_seq": 0}),         # negative sequence
    ("LSU", {"id": "R1", "ls_seq": 1}),                          # ls missing
    ("LSU", {"id": "R1", "ls_seq": 1, "ls": {"id": "R1", "ls_seq": 1, "peers": {"R2": 0}}}),
    ("LSU", {"id": "R1", "ls_seq": 1, "ls": {"id": "R1", "ls_seq": 1, "peers": ["R2"]}}),
    ("MAU", {"id": "R1", "mobile_seq": 1, "add": []}),           # del missing
    ("MAU", {"id": "R1", "mobile_seq": 1, "exist": [], "add": [], "del": []}),
    ("MAR", {"id": "R1"}),
    ("BOGUS", {"id": "R1"}),
    ("RA", ["not", "a", "map"]),
    ("RA", {"pv": 1, "ls_seq": 1, "mobile_seq": 1}),             # id missing
])
def test_malformed_raises_protocol_error(opcode, body):
    with pytest.raises(ProtocolError):
        decode(opcode, body)


def test_python_part_encoding_is_string_keys_and_int32():
    opcode, body = encode(LSU("R1", instance=5, ls_seq=3,
                              ls=LinkState("R1", "0", 3, {"R2": 1, "R3": 10})))
    assert opcode == "LSU"
    assert list(body) == ["id", "pv", "area", "instance", "ls_seq", "ls"]
    assert all(type(k) is str for k in body)
    assert type(body["pv"]) is int32 and type(body["ls"]["peers"]["R3"]) is int32
    assert wire(body)["pv"] == 1 and wire(body)["ls"]["peers"] == {"R2": 1, "R3": 10}
    big = encode(Hello("R1", instance=2**40))[1]["instance"]
    assert type(big) is int                       # beyond int32: long, as 1.x writes it
    assert application_properties("LSU") == {"opcode": "LSU"}
    assert type(next(iter(application_properties("LSU")))) is str


def test_c_part_encoding_is_symbol_keys_and_long():
    opcode, body = encode(MAU("R1", mobile_seq=4, add=("M0a",), delete=("M0b",), hints=(3,)))
    assert opcode == "MAU"
    assert list(body) == ["id", "pv", "area", "mobile_seq", "hints", "add", "del"]
    assert all(type(k) is symbol for k in body)
    assert type(body[symbol("mobile_seq")]) is int and type(body[symbol("hints")][0]) is int32
    _, absolute = encode(MAU("R1", mobile_seq=4, kind=ABSOLUTE, exist=("M0a",), hints=(2,)))
    assert list(absolute) == ["id", "pv", "area", "mobile_seq", "exist", "hints"]
    _, mar = encode(MAR("R1", have_seq=3))
    assert list(mar) == ["id", "pv", "area", "have_seq"] and type(mar[symbol("have_seq")]) is int
    assert type(next(iter(application_properties("MAR")))) is symbol


def test_mau_hints_of_the_wrong_length_are_dropped():
    body = {"id": "R1", "mobile_seq": 2, "add": ["M0a", "M0b"], "del": [], "hints": [1]}
    assert decode("MAU", body).hints == ()


def test_addresses():
    assert router_address("R7") == "amqp:/_topo/0/R7/qdrouter"
    assert router_ma_address("R7") == "amqp:/_topo/0/R7/qdrouter.ma"


ids = st.text(alphabet="ABCRxyz0123456789.-_", min_size=1, max_size=8)
seqs = st.integers(min_value=0, max_value=2**40)
keys = st.lists(st.text(alphabet="M0abc/.", min_size=2, max_size=6), max_size=4, unique=True)

messages = st.one_of(
    st.builds(Hello, ids, st.just(1), st.just("0"), seqs, st.lists(ids, max_size=4).map(tuple)),
    st.builds(RA, ids, st.just(1), st.just("0"), seqs, seqs, seqs),
    st.builds(LSR, ids, st.just(1), st.just("0")),
    st.builds(lambda i, inst, seq, peers: LSU(i, 1, "0", inst, seq, LinkState(i, "0", seq, peers)),
              ids, seqs, seqs, st.dictionaries(ids, st.integers(1, 2**31 - 1), max_size=4)),
    st.builds(lambda i, seq, add, dele: MAU(i, 1, "0", seq, DIFFERENTIAL, tuple(add), tuple(dele),
                                            (), tuple(3 for _ in add)), ids, seqs, keys, keys),
    st.builds(lambda i, seq, ex: MAU(i, 1, "0", seq, ABSOLUTE, exist=tuple(ex),
                                     hints=tuple(1 for _ in ex)), ids, seqs, keys),
    st.builds(MAR, ids, st.just(1), st.just("0"), seqs),
)


@settings(max_examples=150, deadline=None)
@given(messages)
def test_round_trip_through_proton(msg):
    opcode, body = encode(msg)
    assert decode(opcode, wire(body)) == msg
