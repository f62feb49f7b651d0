"""Routing control messages too large for proton's Data (more than 65,535 nodes: a MAU or a MAR
answer listing ~65,000 mobile addresses or more) are encoded and decoded whole
(agent/interior.py, agent/amqpvalue.py): proton raised on encoding them, which took the agent
down, and silently dropped the end of such a body when decoding it."""
from __future__ import annotations

import pytest
from proton import Data, Described, Message, symbol, ulong

from agent import amqpvalue
from agent.interior import decode_control, encode_control

TO = "_topo/0/Router.B/qdrouter.ma"


def mau(n: int) -> dict:
    return {"id": "Router.A", "area": "0", "mobile_seq": 7, "hints": [0] * n,
            "add": [f"prop.{i // 100}.{i}" for i in range(n)], "del": []}


@pytest.mark.parametrize("n", [3, 5_000, 40_000, 100_000])
def test_a_mobile_address_update_of_any_size_round_trips(n):
    body = mau(n)
    raw = encode_control(TO, {"opcode": "MAU"}, body)
    opcode, got, to = decode_control(raw)
    assert (opcode, to) == ("MAU", TO)
    assert got == body  # every address, none dropped


def test_small_control_messages_keep_protons_encoding():
    body = mau(3)
    raw = encode_control(TO, {"opcode": "MAU"}, body)
    msg = Message()
    msg.decode(raw)
    assert msg.body == body and msg.address == TO and msg.properties == {"opcode": "MAU"}


@pytest.mark.parametrize("n", [900, 2_000, 3_500])
def test_a_mid_size_mau_reads_as_proton_reads_it(n):
    # from 16 KB on, amqpvalue reads the body (faster on address lists): the same values
    from agent.routing.messages import MAU, application_properties, encode
    keys = tuple(f"M0prop.{i // 1000}.{i}" for i in range(n))
    opcode, body = encode(MAU("Router.A", mobile_seq=9, add=keys, hints=(3, -7, 200, 0) * (n // 4)
                              + (1,) * (n % 4), delete=("M0gone",)))
    raw = encode_control(TO, application_properties(opcode), body)
    msg = Message()
    msg.decode(raw)
    assert decode_control(raw) == ("MAU", msg.body, TO)
    assert decode_control(raw)[1] == body


@pytest.mark.parametrize("kind", ["differential", "absolute"])
def test_a_large_mau_is_encoded_byte_for_byte_as_proton_would(kind, monkeypatch):
    # the bodies as messages.encode types them (symbol keys, int32 hints, an empty del list),
    # below proton's limit, where both encoders can: the direct one skips proton's Data above
    # 10,000 items (not a Data object for each address and each hint)
    from agent.interior import _encode_control
    from agent.routing.messages import ABSOLUTE, MAU, application_properties, encode
    keys = tuple(f"M0prop.{i // 1000}.{i}" for i in range(20_000))
    msg = (MAU("Router.A", mobile_seq=2 ** 40, kind=ABSOLUTE, exist=keys, hints=(3,) * 20_000)
           if kind == "absolute" else MAU("Router.A", mobile_seq=5, add=keys,
                                          hints=(-200, 300, 3, 0) * 5_000))
    opcode, body = encode(msg)
    props = application_properties(opcode)
    by_proton = _encode_control(TO, props, body, body_by_proton=True)
    made = []
    from agent.management import protocol

    class CountingData(Data):
        def __init__(self, *args):
            made.append(1)
            super().__init__(*args)

    monkeypatch.setattr(protocol, "Data", CountingData)
    assert _encode_control(TO, props, body, body_by_proton=False) == by_proton
    assert encode_control(TO, props, body) == by_proton
    assert made == []                 # the body's symbols, int32s and ulongs written directly


def test_a_large_body_from_proton_encoded_sections_reads_as_proton_would():
    # a 1.x router's large MAU: map8/list8/str8, small ints, symbols and ulongs inside
    sections = Data()
    sections.put_described()
    sections.enter()
    sections.put_ulong(0x73)
    sections.put_list()
    sections.enter()
    sections.put_null()
    sections.put_null()
    sections.put_string(TO)
    sections.exit()
    sections.exit()
    sections.put_described()
    sections.enter()
    sections.put_ulong(0x74)
    sections.put_object({symbol("opcode"): "MAU"})
    sections.exit()
    head = sections.encode()
    body = {"add": [f"a{i}" for i in range(20_000)], "k": symbol("s"), "u": ulong(2**40),
            "b": True, "f": 1.5, "x": b"\x01"}
    value = Data()
    value.put_object(Described(ulong(0x77), body))
    raw = head + value.encode()
    assert len(raw) > 65535
    opcode, got, to = decode_control(raw)
    assert (opcode, to) == ("MAU", TO) and got == body
    assert isinstance(got["k"], symbol)


@pytest.mark.parametrize("garbage", [b"\x00\x53\x77\xd0\x00\x00\x00\x10" + b"\x00" * 70000,
                                     b"\xff" * 70000, b"\x00\x53\x74\xa1\x01x" * 20000,
                                     b"\x00\x53\x77" + b"\xc0\xff\x01" * 30000])
def test_large_garbage_is_refused_not_misread(garbage):
    with pytest.raises(ValueError):
        decode_control(garbage)


def test_truncated_values_raise_the_decode_error():
    with pytest.raises(amqpvalue.AmqpDecodeError):
        amqpvalue.decode_value(b"\xb1\x00\x00\x01\x00abc")
