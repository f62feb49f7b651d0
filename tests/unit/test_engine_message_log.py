"""MESSAGE trace in the worker engine (issue #28, 25), both builds, bytes pumped in memory: a
connection whose listener has ``messageLoggingComponents`` logs each message received (before
it is routed) and sent (once proton has all of it) while MESSAGE trace is on, and looks at no
message while it is off. The texts themselves: test_message_logging.py."""
from __future__ import annotations

import functools

import pytest
from proton import Message

import memrouter
from router_io import engine as engine_py
from router_io import msgrepr

from conftest import compiled_engine


@pytest.fixture(params=["python", "cython"])
def mem_router(request, monkeypatch):
    cls = engine_py.WorkerEngine if request.param == "python" else compiled_engine()
    if cls is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    monkeypatch.setitem(memrouter.LISTENER, "messageLoggingComponents", "message-id,subject")
    return functools.partial(memrouter.MemRouter, engine_cls=cls)


def _exchange(router, client, messages):
    rcv = client.receiver("q1", credit=len(messages))
    snd = client.sender("q1")
    router.run()
    for m in messages:
        snd.delivery(m.id.encode())
        snd.send(m.encode())
        snd.advance()
    router.run()
    return [m.id for _, m in client.receive_all(rcv)]


def test_engine_logs_received_and_sent_messages(mem_router):
    router = mem_router()
    lines = []
    router.engine.set_message_trace(lambda conn_id, text: lines.append(text))
    client = router.client("c1")
    conn_id = client.server.conn_id
    got = _exchange(router, client, [Message(id="m1", subject="s", properties={"k": 1}),
                                     Message(id="m2", body="no application properties")])
    assert got == ["m1", "m2"]
    snd_name = f"snd-q1-{2}"
    rcv_name = f"rcv-q1-{1}"
    assert lines == [
        f"[C{conn_id}]: Received Message{{message-id=\"m1\", subject=\"s\"}} on link "
        f"'{snd_name}' ( -> q1)",
        f"[C{conn_id}]: Sent Message{{message-id=\"m1\", subject=\"s\"}} on link "
        f"'{rcv_name}' (q1 -> )"]


def test_engine_with_message_trace_off_looks_at_no_message(mem_router, monkeypatch):
    def fail(*args):
        raise AssertionError("a message was formatted with MESSAGE trace off")
    monkeypatch.setattr(msgrepr, "message_repr", fail)
    router = mem_router()
    client = router.client("c1")
    assert client.server.msg_log == 0 and client.server.msg_log_bits
    assert _exchange(router, client, [Message(id="m1", properties={"k": 1})]) == ["m1"]
    # turned on later: the open connection logs from then on
    lines = []
    monkeypatch.undo()
    monkeypatch.setitem(memrouter.LISTENER, "messageLoggingComponents", "message-id,subject")
    router.engine.set_message_trace(lambda conn_id, text: lines.append(text))
    assert _exchange(router, client, [Message(id="m2", properties={"k": 1})]) == ["m2"]
    assert [line.split(" on link")[0].split(": ", 1)[1] for line in lines] == [
        'Received Message{message-id="m2"}', 'Sent Message{message-id="m2"}']
    router.engine.set_message_trace(None)
    assert client.server.msg_log == 0


def test_engine_connection_without_components_logs_nothing(mem_router, monkeypatch):
    monkeypatch.setitem(memrouter.LISTENER, "messageLoggingComponents", "none")
    router = mem_router()
    lines = []
    router.engine.set_message_trace(lambda conn_id, text: lines.append(text))
    client = router.client("c1")
    assert _exchange(router, client, [Message(id="m1", properties={"k": 1})]) == ["m1"]
    assert lines == []


def test_engine_logs_streamed_messages_once_each_way(mem_router):
    """A message large enough to be streamed: received logged when it is routed (its first
    bytes), sent once its last part is in proton; one line each."""
    router = mem_router()
    lines = []
    router.engine.set_message_trace(lambda conn_id, text: lines.append(text))
    client = router.client("c1")
    rcv = client.receiver("q1", credit=1)
    snd = client.sender("q1")
    router.run()
    kinds = set()
    router.on_commands = lambda commands: kinds.update(type(c).__name__ for c in commands)
    snd.delivery(b"big")
    snd.send(Message(id="big", subject="s", properties={"k": 1}, body="x" * 600_000).encode())
    snd.advance()
    got = []
    for _ in range(400):
        router.run()
        got += client.receive_all(rcv)
        if got:
            break
    assert [m.id for _, m in got] == ["big"] and len(got[0][1].body) == 600_000
    assert "StreamTransfer" in kinds and "Transfer" not in kinds  # it was streamed
    assert router.engine.in_streams == {} and router.engine.out_streams == {}
    assert [line.split(" on link")[0].split(": ", 1)[1] for line in lines] == [
        'Received Message{message-id="big", subject="s"}',
        'Sent Message{message-id="big", subject="s"}']
