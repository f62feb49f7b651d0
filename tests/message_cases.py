"""Messages and the MESSAGE trace texts Qpid Dispatch 1.19.0 wrote for them (issue #28, 25).

Each case is (message, its text with ``messageLoggingComponents: all``, its text with
``message-id,subject,to``); None: 1.19 wrote no line (no application properties). The messages
are encoded by proton as the clients that sent them to 1.19 encoded them; the timestamps are
printed in UTC (the routers ran with TZ=UTC). Used by tests/unit/test_message_logging.py and
tests/system/test_message_log_lines.py.
"""
from __future__ import annotations

import uuid

from proton import Message, symbol, ulong


def full_message() -> Message:
    return Message(
        id="mid-1", subject="subj", body="hello", user_id=b"anonymous", reply_to="rt",
        correlation_id=ulong(7), content_type="text/plain", content_encoding="enc",
        expiry_time=0, creation_time=0, group_id="g", group_sequence=3, reply_to_group_id="rtg",
        annotations={symbol("ma"): "x"}, instructions={symbol("da"): 1},
        properties={"a": 1, "s": "x", "b": True, "f": 1.5, "l": [1, "two"], "m2": {"k": "v"},
                    "n": None, "bin": b"\x01ab", "sym": symbol("sy"), "neg": -5, "big": 2 ** 40,
                    "u": uuid.UUID(int=5)})


# 1.19.0's texts for these messages, with "all" and with "message-id,subject,to"
CASES = [
    (full_message(),
     'Message{message-id="mid-1", user-id=b"anonymous", subject="subj", reply-to="rt", '
     'correlation-id=7, content-type=:"text/plain", content-encoding=:"enc", group-id="g", '
     'group-sequence=3, reply-to-group-id="rtg", app-properties={"a"=1, "s"="x", "b"=T, '
     '"f"=, "l"=[1, "two"], "m2"={"k"="v"}, "n"=null, "bin"=b"\\01ab", "sym"=:"sy", '
     '"neg"=-5, "big"=1099511627776, "u"=}}',
     'Message{message-id="mid-1", subject="subj"}'),
    (Message(id="no-props", body="x"), None, None),
    (Message(id=uuid.UUID(int=1), correlation_id=b"bin\x00id", subject="s2", properties={},
             creation_time=1700000000.123, expiry_time=1700000001.5, body="y"),
     'Message{message-id=, subject="s2", correlation-id=b"bin\\00id", '
     'absolute-expiry-time="2023-11-14 22:13:21.500 +0000", '
     'creation-time="2023-11-14 22:13:20.123 +0000", app-properties=}',
     'Message{message-id=, subject="s2"}'),
    (Message(id=ulong(42), properties={"k": "v"}, address="q1"),
     'Message{message-id=42, to="q1", app-properties={"k"="v"}}',
     'Message{message-id=42, to="q1"}'),
    (Message(id=symbol("symid"), properties={"e": "tab\there\x01ctrl\u00e9"}),
     'Message{message-id="symid", app-properties={"e"="tab\there\\01ctrl\\c3\\a9"}}',
     'Message{message-id="symid"}'),
    (Message(id="d", properties={"x": -2 ** 35, "i": -7}),
     'Message{message-id="d", app-properties={"x"=-34359738368, "i"=-7}}',
     'Message{message-id="d"}'),
    (Message(properties={"x": 2}), 'Message{app-properties={"x"=2}}', "Message{}"),
]
