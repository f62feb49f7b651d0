"""``qdrouterd -T``: 1.19's test endpoints (``org.apache.qpid.dispatch.router/test/...``).

Run on our router and, when ``QDROUTERD_1X`` names one, on a real 1.x router started with
``-T`` (the same assertions hold for both): sink accepts, discard rejects, deny and the wrong
direction are refused ``qd:forbidden`` with 1.19's texts, source and source_ps send
"Sequence: N" messages (unsettled / pre-settled). Without ``-T`` (ours) none of it exists.
Real clients on loopback, bounded waits.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached, SendException

from conftest import START_TIMEOUT, RouterProcess, free_port
from clients import pump_for
from test_no_path_drain import ONE_X

TIMEOUT = 10.0
TEST = "org.apache.qpid.dispatch.router/test/"


class _Process(RouterProcess):
    """``qdrouterd -c FILE [-T]`` (ours, or the 1.x binary) with its output collected."""

    def __init__(self, argv: list, env: dict) -> None:  # noqa: D107 - RouterProcess's fields
        import threading
        self.lines = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()


def start(tmp_path, kind: str, hooks: bool) -> tuple:
    port = free_port()
    conf = tmp_path / f"r-{port}.conf"
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Router.T
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """))
    flags = ["-T"] if hooks else []
    if kind == "ours":
        argv, env = [sys.executable, "-m", "supervisor.main", "-c", str(conf)], dict(os.environ)
    else:
        if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
            pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")
        from test_mixed_1x import one_x_env
        argv, env = [os.path.join(ONE_X, "sbin", "qdrouterd"), "-c", str(conf)], one_x_env()
    proc = _Process(argv + flags, env)
    proc.wait_for_line("Operational", timeout=START_TIMEOUT)
    return proc, f"amqp://127.0.0.1:{port}"


@pytest.fixture(params=["ours", "1.x"])
def hooked(request, tmp_path):
    proc, url = start(tmp_path, request.param, True)
    conn = BlockingConnection(url, timeout=TIMEOUT)
    yield conn
    conn.close()
    proc.stop()


def refusal(conn, sender: bool, address: str) -> tuple:
    with pytest.raises(LinkDetached) as info:
        if sender:
            conn.create_sender(address)
        else:
            conn.create_receiver(address)
    cond = info.value.link.remote_condition
    return cond.name, cond.description


def test_sink_accepts_discard_rejects(hooked):
    snd = hooked.create_sender(TEST + "sink")
    for i in range(3):
        assert snd.send(Message(body=i), timeout=TIMEOUT).remote_state == Delivery.ACCEPTED
    snd = hooked.create_sender(TEST + "discard")
    with pytest.raises(SendException) as info:
        snd.send(Message(body="x"), timeout=TIMEOUT)
    assert info.value.state == Delivery.REJECTED


def test_refusals(hooked):
    assert refusal(hooked, True, TEST + "deny") == (
        "qd:forbidden", "Connectivity to the deny node is forbidden")
    assert refusal(hooked, False, TEST + "deny") == (
        "qd:forbidden", "Connectivity to the deny node is forbidden")
    assert refusal(hooked, False, TEST + "sink") == (
        "qd:forbidden", "Sink function only accepts incoming links")
    assert refusal(hooked, False, TEST + "discard") == (
        "qd:forbidden", "Discard function only accepts incoming links")
    assert refusal(hooked, True, TEST + "source") == (
        "qd:forbidden", "Source function only accepts outgoing links")


@pytest.mark.parametrize("name, settled", [("source", False), ("source_ps", True)])
def test_sources_send_sequence_messages(hooked, name, settled):
    rcv = hooked.create_receiver(TEST + name, credit=3)
    got = []
    for _ in range(3):
        msg = rcv.receive(timeout=TIMEOUT)
        got.append((msg.body, msg.properties))
        if not settled:
            rcv.accept()
    first = got[0][1]["sequence"]
    assert got == [(f"Sequence: {n}", {"sequence": n}) for n in range(first, first + 3)]


def test_absent_without_the_option(tmp_path):
    proc, url = start(tmp_path, "ours", False)
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        conn.create_receiver(TEST + "deny")  # an ordinary address: attached
        snd = conn.create_sender(TEST + "sink", options=AtMostOnce())
        pump_for([conn], 0.3)
        assert snd.link.credit == 0  # nobody consumes there
    finally:
        conn.close()
        proc.stop()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
@pytest.mark.parametrize("hooks, interval, pool", [(True, 5, 2), (False, 30, 128)])
def test_streaming_link_scrubber_settings_follow_test_hooks(tmp_path, kind, hooks, interval,
                                                            pool):
    """-T shortens the streaming-link scrubber's scan (30 s -> 5 s) and its idle pool per
    connection (128 -> 2 links), as the router says at start-up (the scans themselves:
    tests/unit/test_core_streamlinks.py)."""
    proc, _ = start(tmp_path, kind, hooks)
    try:
        proc.wait_for_line(f"Streaming link scrubber: Scan interval: {interval} seconds, "
                           f"max free pool: {pool} links", timeout=TIMEOUT)
    finally:
        proc.stop()
