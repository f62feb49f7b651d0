"""The core's lifecycle tables (router_core/lifecycle.py), on both builds, and the core process
surviving commands it cannot handle (router_core/coreproc.py).

* the tables are complete for every state, event, role and link type the IPC schema defines;
* every entry taken out of a table (and every code outside them) is a protocol error on that
  link or connection: refused, detached or closed with amqp:internal-error, kept in
  ``core.errors``, and the core goes on routing;
* a command that raises inside the core (unknown type, malformed field) is logged by the core
  process, closes the connection it concerns, and the rest of the batch and the process go on.
"""
import sys
import threading
import time

import pytest
import zmq

from common import ipc
from router_core import lifecycle
from common.ipc import (
    DIR_IN, DIR_OUT, ChildStatus, CloseConnection, ConnClosed, ConnOpened, Deliver, DetachLink,
    LinkAttach, LinkCredit, LinkDetach, LinkOpen, LinkRefuse, PeerHello)
from router_core.records import LINK_TYPE_CODES, MODE_CODES, ROLE_CODES
from test_core import BUILDS, Harness

PROTOCOL_ERROR = "amqp:internal-error"


def tables(core_cls):
    """The module whose globals hold ``core_cls``'s lifecycle tables (the compiled build is
    one module)."""
    if core_cls.__module__ == "router_core._core":
        return sys.modules["router_core._core"]
    return lifecycle


def assert_survives(h):
    """The core still routes: a new connection's sender reaches a new receiver."""
    h.effects()
    h.conn(500).receiver(501, 500, "alive", credit=5).sender(502, 500, "alive")
    h.send(502)
    effects = h.flat()
    assert any(type(e) is Deliver and e.link_id == 501 for e in effects), effects
    assert any(type(e) is LinkCredit and e.link_id == 502 for e in effects), effects
    h.snap()


@pytest.fixture(params=BUILDS)
def core_cls(request):
    return request.param


# ---- the tables are complete ------------------------------------------------------------------
def test_connection_and_link_tables_are_complete():
    for state in (lifecycle.ABSENT, lifecycle.OPEN):
        for event in (lifecycle.EV_OPENED, lifecycle.EV_CLOSED, lifecycle.EV_ATTACH):
            assert (state, event) in lifecycle.CONN_TRANSITIONS, (state, event)
    for state in (lifecycle.ABSENT, lifecycle.ATTACHED, lifecycle.ATTACHING):
        for event in (lifecycle.EV_ATTACH, lifecycle.EV_DETACH, lifecycle.EV_ATTACHED):
            assert (state, event) in lifecycle.LINK_TRANSITIONS, (state, event)


def test_attach_rules_cover_every_role_link_type_and_mode():
    for role in ROLE_CODES.values():
        for link_type in LINK_TYPE_CODES.values():
            for interior in (False, True):
                assert (role, link_type, interior) in lifecycle.ATTACH_RULES


def test_compiled_build_uses_the_same_tables(core_cls):
    module = tables(core_cls)
    assert module.CONN_TRANSITIONS == lifecycle.CONN_TRANSITIONS
    assert module.LINK_TRANSITIONS == lifecycle.LINK_TRANSITIONS
    assert module.ATTACH_RULES == lifecycle.ATTACH_RULES


# ---- a missing entry is a protocol error, never an exception ---------------------------------
def _conn_scenario(h, state, event):
    """Drive ``h`` so that a connection in ``state`` sees ``event``; the effects expected of
    the protocol error (type, id)."""
    if state == lifecycle.OPEN:
        h.conn(1).receiver(20, 1, "q", credit=5).sender(10, 1, "q")
        h.send(10)  # one unsettled delivery in flight: it must not be lost silently
        h.effects()
    if event == lifecycle.EV_OPENED:
        h.conn(1)
        return CloseConnection, 1
    if event == lifecycle.EV_CLOSED:
        h.do(ConnClosed(1, "gone"))
        return CloseConnection, 1
    h.sender(30, 1, "q")
    return LinkRefuse, 30


@pytest.mark.parametrize("key", sorted(lifecycle.CONN_TRANSITIONS))
def test_missing_connection_entry_is_a_protocol_error(core_cls, monkeypatch, key):
    monkeypatch.delitem(tables(core_cls).CONN_TRANSITIONS, key)
    h = Harness(core_cls)
    kind, obj_id = _conn_scenario(h, *key)
    effects = h.flat()
    errors = [e for e in effects if type(e) is kind and e.condition == PROTOCOL_ERROR]
    assert [e[0] for e in errors] == [obj_id], effects
    assert h.core.take_errors()
    if kind is CloseConnection:
        assert h.snap()["router"]["connectionCount"] == 0
    monkeypatch.undo()  # the table whole again: the core's state is sound
    assert_survives(h)


def _link_scenario(h, state, event):
    """Drive ``h`` so that a link in ``state`` sees ``event``; the expected protocol error's
    effect type and link id."""
    h.conn(1)
    link_id = 10
    if state == lifecycle.ATTACHED:
        h.sender(10, 1, None)
        h.effects()
    elif state == lifecycle.ATTACHING:  # a link the router attached itself, no answer yet
        link_id = h.core.attach_out(1, DIR_IN, "auto", "q", None, ipc.terminus(2, "q"),
                                    [0, 0])
        h.effects()
    if event == lifecycle.EV_ATTACH:
        h.do(LinkAttach(link_id, 1, DIR_IN, "s", None, False, False, 10))
        return LinkRefuse, link_id
    if event == lifecycle.EV_ATTACHED:
        h.do(ipc.LinkAttached(link_id, None, ipc.terminus(2, "q"), [0, 0]))
        return DetachLink, link_id
    h.do(LinkDetach(link_id, True, ""))
    return DetachLink, link_id


@pytest.mark.parametrize("key", sorted(lifecycle.LINK_TRANSITIONS))
def test_missing_link_entry_is_a_protocol_error(core_cls, monkeypatch, key):
    monkeypatch.delitem(tables(core_cls).LINK_TRANSITIONS, key)
    h = Harness(core_cls)
    kind, link_id = _link_scenario(h, *key)
    effects = h.flat()
    errors = [e for e in effects if type(e) is kind and e.condition == PROTOCOL_ERROR]
    assert [e.link_id for e in errors] == [link_id], effects
    assert h.core.take_errors()
    assert h.snap()["router"]["linkCount"] == 0 or key[1] == lifecycle.EV_ATTACH
    monkeypatch.undo()
    assert_survives(h)


ROLE_NAMES = {code: name for name, code in ROLE_CODES.items()}
TYPE_NAMES = {code: name for name, code in LINK_TYPE_CODES.items()}


@pytest.mark.parametrize("key", sorted(lifecycle.ATTACH_RULES))
def test_missing_attach_rule_is_a_protocol_error(core_cls, monkeypatch, key):
    role, link_type, interior = key
    monkeypatch.delitem(tables(core_cls).ATTACH_RULES, key)
    h = Harness(core_cls, mode="interior" if interior else "standalone")
    h.conn(1, role=ROLE_NAMES[role])
    h.do(LinkAttach(10, 1, DIR_OUT, "r", "q", False, False, 10, TYPE_NAMES[link_type]))
    assert h.flat() == [LinkRefuse(10, PROTOCOL_ERROR, h.core.take_errors()[0])]
    assert h.snap()["router"]["linkCount"] == 0
    monkeypatch.undo()
    assert_survives(h)


def test_unknown_role_closes_the_connection(core_cls):
    h = Harness(core_cls)
    h.conn(1, role="spaceship")
    [effect] = h.flat()
    assert type(effect) is CloseConnection and effect.condition == PROTOCOL_ERROR
    assert "spaceship" in effect.description
    assert h.snap()["router"]["connectionCount"] == 0
    h.do(ConnClosed(1, "closed"))  # the worker's answer: nothing left to do
    assert h.flat() == []
    assert_survives(h)


def test_unknown_link_type_refuses_the_link(core_cls):
    h = Harness(core_cls, mode="interior")
    h.conn(1, role="inter-router").sender(10, 1, None, link_type="teleporter")
    [effect] = h.flat()
    assert type(effect) is LinkRefuse and effect.condition == PROTOCOL_ERROR
    assert "teleporter" in effect.description
    assert_survives(h)


def test_unknown_mode_is_refused_at_construction(core_cls):
    with pytest.raises(ValueError):
        core_cls("R1", mode="orbital")


def test_command_failed_closes_the_connection_it_concerns(core_cls):
    h = Harness(core_cls)
    h.conn(1).conn(2).receiver(20, 2, "q", credit=5).sender(10, 1, "q")
    h.send(10)
    h.effects()
    h.core.command_failed(0, LinkCredit(10, 1), "bad")  # names link 10 of connection 1
    effects = h.effects()
    assert CloseConnection(1, PROTOCOL_ERROR, "bad") in effects[0]
    assert h.snap()["router"]["connectionCount"] == 1
    h.core.command_failed(0, ChildStatus("x", 0, 0, "", ""), "no connection named")
    assert h.core.take_errors() == ["bad", "no connection named"]
    assert_survives(h)


# ---- the core process ---------------------------------------------------------------------------
class CoreUnderTest:
    """router_core.coreproc.CoreProcess in a thread, with one DEALER peer (worker 0)."""

    def __init__(self, tmp_path):
        from router_core.coreproc import CoreProcess
        from common.procutil import core_endpoint, supervisor_endpoint
        self.ctx = zmq.Context()
        self.status = self.ctx.socket(zmq.PULL)  # the supervisor's end of the status socket
        self.status.setsockopt(zmq.LINGER, 0)
        self.status.bind(supervisor_endpoint(str(tmp_path)))
        self.proc = CoreProcess({"router_id": "R1", "router": {}, "workers": 1,
                                 "logs": [{"module": "DEFAULT", "enable": "info+",
                                           "outputFile": str(tmp_path / "core.log")}]},
                                str(tmp_path))
        self.thread = threading.Thread(target=self.proc.run, daemon=True)
        self.thread.start()
        self.peer = self.ctx.socket(zmq.DEALER)
        self.peer.setsockopt(zmq.LINGER, 0)
        self.peer.setsockopt(zmq.IDENTITY, b"p0")
        self.peer.connect(core_endpoint(str(tmp_path)))
        self.log_path = tmp_path / "core.log"

    def send(self, *cmds):
        self.peer.send_multipart(ipc.encode_batch(0, list(cmds)))

    def receive(self, until, timeout=10.0):
        """Effects until ``until(effects)`` holds (bounded)."""
        got = []
        deadline = time.monotonic() + timeout
        while not until(got):
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; got {got}"
            if self.peer.poll(int(left * 1000) + 1):
                got.extend(ipc.decode_batch(self.peer.recv_multipart())[1])
        return got

    def close(self):
        self.proc.stop()
        self.thread.join(5)
        assert not self.thread.is_alive()
        self.peer.close(0)
        self.status.close(0)
        self.ctx.term()


@pytest.fixture(params=BUILDS)
def core_process(request, tmp_path, monkeypatch):
    if request.param.__module__ == "router_core._core":
        monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    else:
        monkeypatch.setenv("ROUTER_NO_EXTENSIONS", "1")
    proc = CoreUnderTest(tmp_path)
    assert type(proc.proc.core) is request.param
    yield proc
    proc.close()


def test_core_process_survives_invalid_commands(core_process):
    p = core_process
    p.send(PeerHello(0, "worker", 1))
    # a command the core has no handler for, then a malformed attach (capacity None), each in
    # the middle of a batch: the commands around them are still handled
    p.send(ConnOpened(1, "normal", "in", "h:1", "c1", "l", "u", "", False, 250),
           ChildStatus("worker", 0, 1, "ready", ""),
           LinkAttach(10, 1, DIR_OUT, "r", "q", False, False, 10, "endpoint"),
           LinkAttach(11, 1, DIR_IN, "s", None, False, False, None, "endpoint"),
           ConnOpened(2, "normal", "in", "h:2", "c2", "l", "u", "", False, 250),
           LinkAttach(20, 2, DIR_IN, "s2", None, False, False, 10, "endpoint"))
    effects = p.receive(lambda got: LinkCredit(20, 10) in got)
    assert LinkOpen(10, "q") in effects
    closes = [e for e in effects if type(e) is CloseConnection]
    assert [(c.conn_id, c.condition) for c in closes] == [(1, PROTOCOL_ERROR)]
    assert "LinkAttach" in closes[0].description
    # still alive and routing on the connection that did nothing wrong
    p.send(LinkAttach(21, 2, DIR_OUT, "r2", "z", False, False, 10, "endpoint"))
    assert LinkOpen(21, "z") in p.receive(lambda got: bool(got))
    text = p.log_path.read_text()
    assert "ChildStatus from peer 0 not handled" in text
    assert "LinkAttach from peer 0 not handled" in text
    assert p.thread.is_alive()


def test_core_process_drops_batches_that_are_not_one_frame(core_process):
    """A message of more than one frame, or a frame that is no batch, is dropped and logged;
    the batches after it are read from the right frame boundary and handled."""
    p = core_process
    p.send(PeerHello(0, "worker", 1))
    good = ipc.encode_frame(0, [ConnOpened(1, "normal", "in", "h:1", "c1", "l", "u", "", False,
                                           250)])
    p.peer.send_multipart([good, good])          # two frames: not a batch, not handled at all
    p.peer.send_multipart([b"\x01\x00"])         # one frame, not a batch
    p.send(ConnOpened(2, "normal", "in", "h:2", "c2", "l", "u", "", False, 250),
           LinkAttach(20, 2, DIR_OUT, "r", "q", False, False, 10, "endpoint"))
    assert LinkOpen(20, "q") in p.receive(lambda got: LinkOpen(20, "q") in got)
    assert p.proc.core.snapshot()["router"]["connectionCount"] == 1  # conn 1 never came
    text = p.log_path.read_text()
    assert "dropping a malformed IPC batch: more than one frame" in text
    assert "dropping malformed IPC batch: batch frame shorter than its header length" in text
    assert p.thread.is_alive()
