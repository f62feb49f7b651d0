"""``messageLoggingComponents`` on a listener: the MESSAGE trace lines of launched routers.

The same configuration and the same messages go to our router and, with ``QDROUTERD_1X``
naming a Qpid Dispatch 1.x install, to 1.19 (skipped otherwise); both must write the same
lines (connection numbers aside): ``[C1]: Received Message{...} on link 'snd1' ( -> q1)``
before each message is routed and ``[C1]: Sent Message{...} on link 'rcv1' (q1 -> )`` after
it was sent, none for a message without application properties. The texts themselves are
checked field by field in tests/unit/test_message_logging.py (tests/message_cases.py: the
messages and 1.19's texts for them).
"""
from __future__ import annotations

import re
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection

from clients import collect, pump_for, pump_until
from conftest import free_port
from message_cases import CASES  # the messages and the lines 1.19 wrote for them

TIMEOUT = 10
LINE = re.compile(r"MESSAGE \(trace\) (\[C\d+\]: .*?)(?: \(/[^()]*:\d+\))?$")


def logging_config(all_port: int, some_port: int, message_level: str = "trace+") -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {all_port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            messageLoggingComponents: all
        }}
        listener {{
            host: 127.0.0.1
            port: {some_port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            logMessage: message-id,subject,to
        }}
        log {{
            module: MESSAGE
            enable: {message_level}
        }}
        """


def exchange(url: str) -> None:
    """Receiver rcv1 and sender snd1 on q1, one connection; every message of CASES sent
    unsettled and received (accepted)."""
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("q1", name="rcv1", credit=len(CASES))
        snd = conn.create_sender("q1", name="snd1")
        for i, (msg, _, _) in enumerate(CASES):
            snd.link.delivery(str(i).encode())
            snd.link.send(msg.encode())
            snd.link.advance()
        got = collect([conn], [rcv], expect=len(CASES), timeout=TIMEOUT)
        assert len(got[0]) == len(CASES)
    finally:
        conn.close()


def message_lines(proc, count: int) -> list:
    """The MESSAGE trace texts logged so far, connection numbers made [C], once there are
    ``count`` of them (bounded wait)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        lines = [re.sub(r"^\[C\d+\]", "[C]", m.group(1))
                 for m in map(LINE.search, list(proc.lines)) if m]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def expected(column: int) -> tuple:
    """1.19's received and sent lines for CASES with the components of ``column`` (1: all,
    2: message-id,subject,to)."""
    texts = [case[column] for case in CASES if case[column] is not None]
    return ([f"[C]: Received {t} on link 'snd1' ( -> q1)" for t in texts],
            [f"[C]: Sent {t} on link 'rcv1' (q1 -> )" for t in texts])


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the routers print timestamps in their local time


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_received_and_sent_lines_are_1_19s(router_of_kind, utc, kind):
    all_port, some_port = free_port(), free_port()
    router = router_of_kind(kind, logging_config(all_port, some_port))
    exchange(f"amqp://127.0.0.1:{all_port}")
    exchange(f"amqp://127.0.0.1:{some_port}")  # after the first: its lines come after
    groups = [expected(1), expected(2)]
    sizes = [len(received) + len(sent) for received, sent in groups]
    lines = message_lines(router.proc, sum(sizes))
    assert len(lines) == sum(sizes), lines
    for (received, sent), part in zip(groups, (lines[:sizes[0]], lines[sizes[0]:])):
        # each message is logged received before it is sent; the two sequences interleave
        assert [x for x in part if " Received " in x] == received
        assert [x for x in part if " Sent " in x] == sent


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_no_lines_without_message_trace(router_of_kind, kind):
    all_port, some_port = free_port(), free_port()
    router = router_of_kind(kind, logging_config(all_port, some_port, "debug+"))
    exchange(f"amqp://127.0.0.1:{all_port}")
    exchange(router.url)  # the listener without messageLoggingComponents
    time.sleep(0.3)  # lines that should not come would be written by now
    assert not [line for line in router.proc.lines if "MESSAGE (trace)" in line]


def test_management_turns_message_trace_on_for_open_connections(router_factory, utc):
    """MESSAGE trace switched on by a management UPDATE applies to a connection opened
    before it (each worker recomputes its connections' switch when the levels change)."""
    from test_log_parity import T, mgmt_call
    all_port, some_port = free_port(), free_port()
    router = router_factory(logging_config(all_port, some_port, "info+"))
    conn = BlockingConnection(f"amqp://127.0.0.1:{some_port}", timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("q1", name="rcv1", credit=5)
        snd = conn.create_sender("q1", name="snd1")
        msg, _, text = CASES[0]
        for tag in (b"before", b"after"):
            if tag == b"after":
                status, _ = mgmt_call(router.url, {"operation": "UPDATE", "type": T + "log",
                                                   "name": "log/MESSAGE"},
                                      {"enable": "trace+"})
                assert status == 200
            snd.link.delivery(tag)
            snd.link.send(msg.encode())
            snd.link.advance()
            assert collect([conn], [rcv], expect=1, timeout=TIMEOUT) == [[msg.body]]
    finally:
        conn.close()
    assert message_lines(router.proc, 2) == [
        f"[C]: Received {text} on link 'snd1' ( -> q1)",
        f"[C]: Sent {text} on link 'rcv1' (q1 -> )"]


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_an_aborted_send_is_logged_whatever_the_components(router_of_kind, kind):
    """1.19 writes "Sent aborted message" for a streamed message its sender aborted, on a
    listener without messageLoggingComponents too (MESSAGE trace is enough)."""
    router = router_of_kind(kind, """
        log {
            module: MESSAGE
            enable: trace+
        }
        """)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        conn.create_receiver("q1", name="rcv1", credit=5)
        snd = conn.create_sender("q1", name="snd1")
        data = Message(id="big", properties={"k": 1}, body="x" * 1_000_000).encode()
        dlv = snd.link.delivery(b"t")
        snd.link.send(data[:400_000])  # enough to be forwarded while it arrives
        pump_until([conn], lambda: any("MESSAGE (trace)" in line for line in router.proc.lines)
                   or snd.link.session.outgoing_bytes == 0, what="the first bytes sent")
        pump_for([conn], 0.5)  # the receiver's side of the router starts its copy
        dlv.abort()
        pump_until([conn], lambda: any("aborted message" in line for line in router.proc.lines),
                   what="the aborted send's line")
    finally:
        conn.close()
    lines = [m.group(1) for m in map(LINE.search, list(router.proc.lines)) if m]
    assert [re.sub(r"^\[C\d+\]", "[C]", x) for x in lines] == [
        "[C]: Sent aborted message on link 'rcv1' (q1 -> )"]


def test_a_listener_naming_an_unknown_component_is_refused(router_factory):
    router = router_factory("""
        listener {
            host: 127.0.0.1
            port: 0
            messageLoggingComponents: message-id,bogus
        }
        """, wait=False)
    line = router.proc.wait_for_line("unknown component", timeout=TIMEOUT)
    assert re.search(r"qdrouterd-\d+\.conf:\d+: listener 127\.0\.0\.1:0: "
                     r"messageLoggingComponents 'message-id,bogus': unknown component 'bogus'",
                     line), line
    assert router.proc.proc.wait(TIMEOUT) != 0
