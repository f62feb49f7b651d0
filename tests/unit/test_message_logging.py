"""MESSAGE trace lines of listeners/connectors with ``messageLoggingComponents`` (issue #28, 25):
the text of a message (router_io/msgrepr.py) and the components value (common/msglog.py).

The expected texts are what Qpid Dispatch 1.19.0 wrote for the same messages (encoded here by
proton, as the clients that sent them to it): field order and names, the printing of each AMQP
type, no line for a message without application properties, the 2044/2047-character cuts.
The worker's use of them: test_engine_message_log.py; whole routers, ours against 1.19:
tests/system/test_message_logging.py.
"""
from __future__ import annotations

import textwrap
import time

import pytest
from proton import Message, symbol, ulong

from common import msglog
from router_io import msgrepr
from router_io.msgrepr import log_text, message_repr
from supervisor.config import ConfigError, parse_config

from message_cases import CASES

ALL = msglog.component_bits("all")
SOME = msglog.component_bits("message-id,subject,to")


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("msg, with_all, with_some", CASES)
def test_message_text_is_1_19s(utc, msg, with_all, with_some):
    data = msg.encode()
    assert message_repr(data, ALL) == with_all
    assert message_repr(memoryview(data), SOME) == with_some


def _edge_cases():
    from proton import (Array, Data, Described, byte, char, decimal32, decimal64, decimal128,
                        float32, int32, short, timestamp, ubyte, uint, ushort)
    body = b"\x00\x53\x77\xa1\x01x"
    return [
        (Message(id="c", properties={"ch": char("a"), "d32": decimal32(5), "d64": decimal64(6),
                                     "d128": decimal128(b"0" * 16), "f32": float32(1.0)}),
         'Message{message-id="c", app-properties={"ch"=, "d32"=, "d64"=, "d128"=, "f32"=}}'),
        # an array's elements have no constructor each: 1.19's parser fails, the field goes
        (Message(id="arr", properties={"a": Array(Data.NULL, Data.INT, 1, 2, 3)}),
         'Message{message-id="arr"}'),
        (Message(id="desc", properties={"d": Described(symbol("x"), "v")}),
         'Message{message-id="desc"}'),
        (Message(id="ts", properties={"t": timestamp(-5000), "t0": timestamp(0),
                                      "t1": timestamp(1)}),
         'Message{message-id="ts", app-properties={"t"=, "t0"=, '
         '"t1"="1970-01-01 00:00:00.001 +0000"}}'),
        (Message(id="ints", properties={"b": byte(-1), "s": short(-2), "u0": uint(0),
                                        "ul0": ulong(0), "ul": ulong(5), "ub": ubyte(7),
                                        "us": ushort(8), "i": int32(100), "l": 7}),
         'Message{message-id="ints", app-properties={"b"=-1, "s"=-2, "u0"=0, "ul0"=0, "ul"=5, '
         '"ub"=7, "us"=8, "i"=100, "l"=7}}'),
        (Message(id="nested", properties={"l": [[], {}, [1, [2, {"k": [3]}]]], "e": ""}),
         'Message{message-id="nested", app-properties={"l"=[, , [1, [2, {"k"=[3]}]]], "e"=""}}'),
        (Message(id="keys", properties={"s": b"\xff\x00 \n"}),
         'Message{message-id="keys", app-properties={"s"=b"\\ff\\00 \n"}}'),
        (Message(id=b"binid\x7f", user_id=b"\x80u", reply_to_group_id="", group_sequence=0,
                 content_type=symbol(""), properties={"x": True, "y": False}),
         'Message{message-id=b"binid\\7f", user-id=b"\\80u", content-type=:"", '
         'reply-to-group-id="", app-properties={"x"=T, "y"=F}}'),
        # application-properties null: 1.19 refuses the message, no line
        (b"\x00\x53\x73\x45\x00\x53\x74\x40" + body, None),
        # a key that is not a string
        (b"\x00\x53\x74\xc1\x05\x02\x54\x05\x41" + body, "Message{app-properties={5=T}}"),
        # a described message-id: left out
        (b"\x00\x53\x73\xc0\x08\x01\x00\xa3\x01d\xa1\x01v\x00\x53\x74\xc1\x01\x00" + body,
         "Message{app-properties=}"),
        # the 32-bit encodings
        (b"\x00\x53\x74\xd1\x00\x00\x00\x1a\x00\x00\x00\x02\xb1\x00\x00\x00\x01k\xd0"
         b"\x00\x00\x00\x0b\x00\x00\x00\x02\xb3\x00\x00\x00\x01s\x40" + body,
         'Message{app-properties={"k"=[:"s", null]}}'),
    ]


def test_edge_cases_are_printed_as_1_19_prints_them(utc):
    for msg, text in _edge_cases():
        data = msg if isinstance(msg, bytes) else msg.encode()
        assert message_repr(data, ALL) == text


def test_long_text_is_cut_as_1_19_cuts_it():
    data = Message(properties={"long": "z" * 3000}).encode()
    text = message_repr(data, ALL)
    assert len(text) == msgrepr.REPR_MAX and not text.endswith("}")
    assert text.startswith('Message{app-properties={"long"="zzz')
    line = log_text(1, False, text, "snd1", "", "q1")
    assert len(line) == msgrepr.LINE_MAX and line.startswith("[C1]: Received Message{")
    short = message_repr(Message(properties={"k": "z" * 2000}).encode(), ALL)
    assert short.endswith('"}}') and len(short) < msgrepr.REPR_MAX


def test_log_line_names_the_link_and_its_termini():
    assert (log_text(3, True, "Message{}", "rcv1", "q1", "") ==
            "[C3]: Sent Message{} on link 'rcv1' (q1 -> )")
    assert (log_text(3, False, "Message{}", "snd1", "", "q1") ==
            "[C3]: Received Message{} on link 'snd1' ( -> q1)")


def test_integers_are_cut_as_1_19s_buffers_cut_them():
    from proton import int32, ubyte, byte, short, ushort, uint
    props = {"i": int32(-2147483648), "j": int32(1234567890), "u": uint(4294967295),
             "l": -9223372036854775808, "b": byte(-128), "s": short(-300), "ub": ubyte(255),
             "us": ushort(65535)}
    text = message_repr(Message(properties=props).encode(), ALL)
    assert text == ('Message{app-properties={"i"=-21474836, "j"=123456789, "u"=4294967295, '
                    '"l"=-922337203685477580, "b"=-128, "s"=-300, "ub"=255, "us"=65535}}')
    ulong_max = Message(id=ulong(2 ** 64 - 1), properties={}).encode()
    assert (message_repr(ulong_max, ALL) ==
            "Message{message-id=1844674407370955161, app-properties=}")


def test_values_that_do_not_parse_are_left_out():
    # app-properties holding a described value: 1.19's parser fails on it, the field goes
    data = bytearray(Message(id="m", properties={"k": "v"}).encode())
    at = data.index(b"\x00\x53\x74")
    # rebuild: properties + app-properties map {"k": described(0, "v")}
    body = b"\xa1\x01k\x00\x53\x00\xa1\x01v"
    app = b"\x00\x53\x74\xc1" + bytes([len(body) + 1, 2]) + body
    data = bytes(data[:at]) + app
    assert message_repr(data, ALL) == 'Message{message-id="m"}'
    # nested thousands deep: left out, never an error
    nested = b"\x45"
    for _ in range(3000):
        nested = b"\xd0" + (len(nested) + 4).to_bytes(4, "big") + b"\x00\x00\x00\x01" + nested
    data = (bytes(data[:at]) + b"\x00\x53\x74\xd1" + (len(nested) + 7).to_bytes(4, "big")
            + b"\x00\x00\x00\x02\xa1\x01k" + nested)
    assert message_repr(data, ALL) == 'Message{message-id="m"}'


def test_garbage_never_raises():
    for data in (b"", b"\x00", b"\x00\x53\x74", b"\x00\x53\x74\xc1\x05\x03",
                 b"\x00\x53\x73\xc0\xff\x01", b"\x00\x80" + b"\xff" * 8, b"\x00\x53\x77\xa1"):
        assert message_repr(data, ALL) is None
    assert message_repr(Message(properties={"k": 1}).encode(), 0) is None


# --- the components value -----------------------------------------------------------------------

def test_component_bits_are_1_19s():
    assert msglog.component_bits(None) == msglog.component_bits("none") == 0
    assert msglog.component_bits("") == 0
    assert msglog.component_bits("all") == 0x7fffffff
    assert msglog.component_bits("message-id,app-properties") == 1 | 1 << 13


@pytest.mark.parametrize("value, fragment", [
    ("bogus", "unknown component 'bogus'"),
    ("message-id, subject", "unknown component ' subject' (no spaces are allowed)"),
    ("all,message-id", "'all' cannot be combined"),
    ("Message-Id", "unknown component 'Message-Id'"),
])
def test_unknown_components_are_refused_with_their_line(value, fragment):
    text = textwrap.dedent(f"""\
        listener {{
            host: 127.0.0.1
            port: 5672
            logMessage: {value}
        }}
        """)
    with pytest.raises(ConfigError) as info:
        parse_config(text, "qdrouterd.conf")
    assert str(info.value).startswith("qdrouterd.conf:4: listener 127.0.0.1:5672: ")
    assert fragment in str(info.value)


def test_known_components_are_accepted():
    for value in ("all", "none", "message-id,subject,to", ",".join(msglog.COMPONENTS)):
        parse_config(f"connector {{\n    host: 127.0.0.1\n    port: 5672\n"
                     f"    messageLoggingComponents: {value}\n}}\n", "q.conf")


@pytest.mark.parametrize("entity_type", ["listener", "connector"])
def test_management_create_refuses_unknown_components(entity_type):
    from agent.management.protocol import ManagementError
    from test_management_ops import run
    for attribute in ("messageLoggingComponents", "logMessage"):
        with pytest.raises(ManagementError) as err:
            run({"operation": "CREATE", "type": entity_type, "name": "x"},
                {"port": "5673", attribute: "to,subjekt"})
        assert err.value.status == 400
        assert "unknown component 'subjekt'" in err.value.description
    created = run({"operation": "CREATE", "type": entity_type, "name": "x"},
                  {"port": "5673", "messageLoggingComponents": "to,subject"})
    assert created.entity["messageLoggingComponents"] == "to,subject"
