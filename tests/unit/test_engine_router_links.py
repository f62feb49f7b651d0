"""The worker engine on inter-router links: RouterTransfer in, RouterDeliver out.

The engine is driven on its own (no core): a bare proton engine stands in for the neighbour
router (or a client), bytes are pumped in memory, the engine's commands are collected through the
real IPC codec and the core's effects are applied by hand. Every test runs against the
pure-Python engine and the Cython-compiled one.
"""
from __future__ import annotations

import proton
import pytest
from proton import Delivery, Message, symbol

import memrouter
from common import ipc
from common import amqpscan
from router_io import engine as engine_py

ROUTER_ID = "Router.A"
ME = f"0/{ROUTER_ID}"
IR_SETTINGS = dict(memrouter.LISTENER, name="ir", role="inter-router")  # stripAnnotations: default
NORMAL_SETTINGS = dict(memrouter.LISTENER)
TO, PHASE, INGRESS, TRACE = (symbol("x-opt-qd.to"), symbol("x-opt-qd.phase"),
                             symbol("x-opt-qd.ingress"), symbol("x-opt-qd.trace"))


class Peer:
    """One engine connection and the bare proton engine at its other end, pumped in memory."""

    def __init__(self, engine, settings: dict, direction: str, container: str = "Router.B"):
        self.engine = engine
        self.conn = engine.new_connection(dict(settings), "mem:peer", direction)
        self.transport = proton.Transport(proton.Transport.SERVER if direction == "out"
                                          else proton.Transport.CLIENT)
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.pc = proton.Connection()
        self.pc.container = container
        self.collector = proton.Collector()
        self.pc.collect(self.collector)
        self.transport.bind(self.pc)
        self.commands: list = []
        self._tags = 0
        if direction == "out":
            self.pump()
        self.pc.open()
        self.session = self.pc.session()
        self.session.open()
        self.pump()

    def pump(self, rounds: int = 100) -> None:
        conn = self.conn
        for _ in range(rounds):
            moved = False
            n = conn.pending()
            if n > 0:
                buf = bytearray(n)
                n = conn.output(buf)
                conn.consumed(n)
                self.transport.push(bytes(buf[:n]))
                moved = True
            size = min(self.transport.pending(), conn.capacity())
            if size > 0:
                data = self.transport.peek(size)
                self.transport.pop(len(data))
                conn.push(data, len(data))
                moved = True
            self.engine.process_events()
            cmds = self.engine.take_commands()
            if cmds:  # through the real codec: everything must be encodable
                self.commands += ipc.decode_batch(ipc.encode_batch(0, cmds))[1]
                moved = True
            if not moved:
                return

    def apply(self, *effects) -> None:
        for fx in ipc.decode_batch(ipc.encode_batch(-1, list(effects)))[1]:
            self.engine.apply(fx)
        self.pump()

    def take(self, kind=None) -> list:
        out = [c for c in self.commands if kind is None or type(c) is kind]
        self.commands = [c for c in self.commands if not (kind is None or type(c) is kind)]
        return out

    def link(self, cap: str | None, is_sender: bool, address: str | None = None):
        """A link attached by the peer, with terminus capability ``cap``."""
        self._tags += 1
        name = f"{'snd' if is_sender else 'rcv'}-{self._tags}"
        lk = self.session.sender(name) if is_sender else self.session.receiver(name)
        for terminus in (lk.source, lk.target):
            if cap:
                terminus.capabilities.put_symbol(symbol(cap))
        if address is not None:
            (lk.target if is_sender else lk.source).address = address
        lk.open()
        self.pump()
        [attach] = [a for a in self.take(ipc.LinkAttach) if a.name == name]
        return lk, attach

    def send(self, snd, data: bytes, settled: bool = False):
        self._tags += 1
        dlv = snd.delivery(str(self._tags).encode())
        snd.send(data)
        snd.advance()
        if settled:
            dlv.settle()
        self.pump()
        return dlv


def _msg(body="hello", to=None, annotations=None, priority=None) -> bytes:
    m = Message(body=body, address=to, annotations=annotations)
    if priority is not None:
        m.priority = priority
    return m.encode()


def _ann(data: bytes) -> dict:
    m = Message()
    m.decode(data)
    return {str(k): v for k, v in (m.annotations or {}).items()}


def _assert_only_annotations_differ(original: bytes, out: bytes) -> None:
    a, b = amqpscan.scan(original), amqpscan.scan(out)
    assert out[:b.ma_start] == original[:a.ma_start]   # header, delivery-annotations
    assert out[b.ma_end:] == original[a.ma_end:]       # properties, app-properties, body


def _listening_side(engine_cls, settings=IR_SETTINGS):
    """The engine accepted the connection; the peer attaches links and the core (by hand)
    opens them and grants credit."""
    engine = engine_cls(ROUTER_ID, 0, 2)
    peer = Peer(engine, settings, "in")
    assert peer.take(ipc.ConnOpened)
    return engine, peer


def _open_in(peer, cap, address=None, credit=20):
    snd, attach = peer.link(cap, True, address)
    peer.apply(ipc.LinkOpen(attach.link_id, address), ipc.LinkCredit(attach.link_id, credit))
    assert snd.credit == credit
    return snd, attach


# --- inbound: RouterTransfer ------------------------------------------------------------------
@pytest.mark.parametrize("cap,link_type", [("qd.router-data", "inter-router"),
                                           ("qd.router", "router-control")])
def test_router_link_delivery_becomes_router_transfer(engine_cls, cap, link_type):
    engine, peer = _listening_side(engine_cls)
    snd, attach = _open_in(peer, cap)
    assert attach.link_type == link_type and attach.address is None
    ann = {TO: "M0orders", PHASE: 1, INGRESS: "0/Router.C",
           TRACE: ["0/Router.C", "0/Router.B"], symbol("user-key"): "kept"}
    data = _msg("payload", to="ignored-properties-to", annotations=ann, priority=7)
    peer.send(snd, data, settled=True)
    [cmd] = peer.take(ipc.RouterTransfer)
    assert not peer.take(ipc.Transfer)
    assert cmd.link_id == attach.link_id and cmd.settled
    assert cmd.to == "M0orders"            # x-opt-qd.to wins over properties.to
    assert cmd.phase == 1 and cmd.priority == 7
    assert cmd.ingress == "0/Router.C"
    assert cmd.trace == ["0/Router.C", "0/Router.B"]
    assert bytes(cmd.payload) == data      # never stripped (default stripAnnotations is both)
    assert not engine.in_dlvs and not engine.in_ids


def test_router_transfer_without_annotations(engine_cls):
    engine, peer = _listening_side(engine_cls)
    snd, attach = _open_in(peer, "qd.router-data")
    data = _msg("plain", to="amqp:/queue")
    peer.send(snd, data, settled=True)
    data2 = _msg("nothing")
    peer.send(snd, data2, settled=True)
    c1, c2 = peer.take(ipc.RouterTransfer)
    assert (c1.to, c1.phase, c1.ingress, c1.trace, c1.priority) == ("amqp:/queue", 0, None, [], 4)
    assert (c2.to, c2.phase, c2.ingress, c2.trace) == (None, 0, None, [])
    assert bytes(c1.payload) == data and bytes(c2.payload) == data2


def test_router_transfer_unsettled_disposition_and_settle_first(engine_cls):
    engine, peer = _listening_side(engine_cls)
    snd, attach = _open_in(peer, "qd.router-data")
    d1 = peer.send(snd, _msg("one", annotations={TO: "M0a"}))
    d2 = peer.send(snd, _msg("two", annotations={TO: "M0a"}))
    c1, c2 = peer.take(ipc.RouterTransfer)
    assert not c1.settled and not c2.settled
    assert set(engine.in_dlvs) == {c1.dlv_id, c2.dlv_id}
    # the core's outcome travels back to the neighbour
    peer.apply(ipc.UpdateIn(c1.dlv_id, ipc.STATE_ACCEPTED, True, None))
    assert d1.remote_state == Delivery.ACCEPTED and d1.settled
    # the neighbour settles first: SettleIn
    d2.settle()
    peer.pump()
    assert peer.take(ipc.SettleIn) == [ipc.SettleIn(c2.dlv_id, 0)]
    assert not engine.in_dlvs and not engine.in_ids


def test_malformed_message_on_router_link_is_rejected(engine_cls):
    engine, peer = _listening_side(engine_cls)
    snd, _ = _open_in(peer, "qd.router-data")
    bad = peer.send(snd, b"\x00\x53\x73\xff\xff")
    assert bad.remote_state == Delivery.REJECTED
    assert not peer.take(ipc.RouterTransfer) and not peer.take(ipc.Transfer)


def test_connector_side_router_links_emit_router_transfer(engine_cls):
    """The links the engine creates itself (connecting side) are router links too."""
    engine = engine_cls(ROUTER_ID, 0, 2)
    peer = Peer(engine, IR_SETTINGS, "out")
    attaches = {a.name: a for a in peer.take(ipc.LinkAttach)}
    assert len(attaches) == 22
    links = []
    while peer.collector.peek() is not None:
        ev = peer.collector.peek()
        if ev.type == proton.Event.LINK_REMOTE_OPEN:
            links.append(ev.link)
        peer.collector.pop()
    links[0].session.open()  # the engine's session, all 22 links on it
    for lk in links:
        lk.source.copy(lk.remote_source)
        lk.target.copy(lk.remote_target)
        lk.open()
    effects = [ipc.LinkOpen(a.link_id, None) for a in attaches.values()]
    effects += [ipc.LinkCredit(a.link_id, 5) for a in attaches.values()
                if a.direction == ipc.DIR_IN]
    peer.apply(*effects)
    data_snd = [lk for lk in links if lk.is_sender][1]  # the peer's priority-0 data sender
    control_snd = [lk for lk in links if lk.is_sender][0]
    assert data_snd.credit == 5
    peer.send(data_snd, _msg("d", annotations={TO: "M0x", TRACE: ["0/Router.B"]}), settled=True)
    peer.send(control_snd, _msg("c", to="_topo/0/Router.A/qdrouter"), settled=True)
    c1, c2 = peer.take(ipc.RouterTransfer)
    assert attaches[data_snd.name].link_type == "inter-router"
    assert attaches[control_snd.name].link_type == "router-control"
    assert (c1.link_id, c1.to, c1.trace) == (attaches[data_snd.name].link_id, "M0x",
                                             ["0/Router.B"])
    assert (c2.link_id, c2.to, c2.trace) == (attaches[control_snd.name].link_id,
                                             "_topo/0/Router.A/qdrouter", [])


# --- endpoint links keep Transfer -------------------------------------------------------------
def test_endpoint_link_still_emits_transfer_and_strips(engine_cls):
    engine, peer = _listening_side(engine_cls, NORMAL_SETTINGS)
    anon, attach = _open_in(peer, None)
    assert attach.link_type == "endpoint"
    data = _msg("e", to="q1", annotations={TO: "elsewhere", TRACE: ["0/X"],
                                           symbol("user-key"): 1})
    peer.send(anon, data, settled=True)
    named, attach2 = _open_in(peer, None, address="q2")
    peer.send(named, data, settled=True)
    assert not peer.take(ipc.RouterTransfer)
    t1, t2 = peer.take(ipc.Transfer)
    assert type(t1) is ipc.Transfer
    assert t1.to == "q1" and t2.to is None    # stripped on the way in: properties.to
    assert _ann(bytes(t1.payload)) == {"user-key": 1}
    _assert_only_annotations_differ(data, bytes(t1.payload))


def test_router_capability_on_a_normal_connection_is_not_a_router_link(engine_cls):
    # the core refuses these; even if opened, nothing on them is treated as inter-router traffic
    engine, peer = _listening_side(engine_cls, NORMAL_SETTINGS)
    snd, attach = _open_in(peer, "qd.router-data")
    assert attach.link_type == "inter-router"
    peer.send(snd, _msg("x", to="q", annotations={TO: "M0y"}), settled=True)
    assert not peer.take(ipc.RouterTransfer)
    [t] = peer.take(ipc.Transfer)
    assert t.to == "q"


def test_endpoint_link_on_inter_router_connection_keeps_transfer_without_stripping(engine_cls):
    engine, peer = _listening_side(engine_cls)
    snd, attach = _open_in(peer, None)
    data = _msg("x", to="q", annotations={TO: "M0y"})
    peer.send(snd, data, settled=True)
    [t] = peer.take(ipc.Transfer)
    assert t.to == "M0y" and bytes(t.payload) == data


# --- outbound: RouterDeliver ------------------------------------------------------------------
def _open_out(peer, cap="qd.router-data", credit=10):
    rcv, attach = peer.link(cap, False)
    rcv.flow(credit)
    peer.apply(ipc.LinkOpen(attach.link_id, None))
    assert peer.take(ipc.LinkFlow)[-1].limit == credit
    return rcv, attach


def _received(rcv) -> list:
    out = []
    while rcv.current is not None and not rcv.current.partial and rcv.current.readable:
        dlv = rcv.current
        out.append((dlv, rcv.recv(dlv.pending)))
        rcv.advance()
    return out


def test_router_deliver_sets_to_and_phase_adds_ingress_appends_trace(engine_cls):
    engine, peer = _listening_side(engine_cls)
    rcv, attach = _open_out(peer)
    plain = _msg("body-1", to="props-to", priority=3)
    annotated = _msg("body-2", annotations={symbol("user-key"): "u", TO: "M0old", PHASE: 0,
                                            INGRESS: "0/Router.C", TRACE: ["0/Router.C"]})
    peer.apply(ipc.RouterDeliver(11, attach.link_id, True, "M1new", 1, plain),
               ipc.RouterDeliver(12, attach.link_id, True, "M1new", 1, annotated))
    (d1, out1), (d2, out2) = _received(rcv)
    tag = d1.tag.encode("latin-1") if isinstance(d1.tag, str) else d1.tag
    assert tag == (11).to_bytes(8, "big") and d1.settled
    assert _ann(out1) == {"x-opt-qd.to": "M1new", "x-opt-qd.phase": 1,
                          "x-opt-qd.ingress": ME, "x-opt-qd.trace": [ME]}
    assert _ann(out2) == {"user-key": "u", "x-opt-qd.to": "M1new", "x-opt-qd.phase": 1,
                          "x-opt-qd.ingress": "0/Router.C",  # kept: it came from there
                          "x-opt-qd.trace": ["0/Router.C", ME]}
    _assert_only_annotations_differ(plain, out1)
    _assert_only_annotations_differ(annotated, out2)
    assert out1.endswith(Message(body="body-1").encode()[-8:])


def test_router_deliver_keeps_to_and_phase(engine_cls):
    engine, peer = _listening_side(engine_cls)
    rcv, attach = _open_out(peer)
    annotated = _msg("b", annotations={TO: "M0keep", PHASE: 2, TRACE: ["0/Router.B"]})
    plain = _msg("p", to="props")
    peer.apply(ipc.RouterDeliver(21, attach.link_id, True, None, -1, annotated),
               ipc.RouterDeliver(22, attach.link_id, True, None, -1, plain))
    (_, out1), (_, out2) = _received(rcv)
    assert _ann(out1) == {"x-opt-qd.to": "M0keep", "x-opt-qd.phase": 2,
                          "x-opt-qd.ingress": ME, "x-opt-qd.trace": ["0/Router.B", ME]}
    assert _ann(out2) == {"x-opt-qd.ingress": ME, "x-opt-qd.trace": [ME]}
    _assert_only_annotations_differ(annotated, out1)
    _assert_only_annotations_differ(plain, out2)
    scan = amqpscan.scan(out2)
    assert scan.to == "props" and scan.ma_to is None and scan.ma_phase is None


def test_router_deliver_unsettled_disposition_and_settle_out(engine_cls):
    engine, peer = _listening_side(engine_cls)
    rcv, attach = _open_out(peer, cap="qd.router")
    peer.apply(ipc.RouterDeliver(31, attach.link_id, False, None, -1, _msg("1")),
               ipc.RouterDeliver(32, attach.link_id, False, "M0z", 0, _msg("2")))
    (d1, _), (d2, out2) = _received(rcv)
    assert not d1.settled and not d2.settled
    assert _ann(out2)["x-opt-qd.phase"] == 0 and _ann(out2)["x-opt-qd.to"] == "M0z"
    assert set(engine.out_dlvs) == {31, 32}
    d1.update(Delivery.ACCEPTED)
    d1.settle()
    peer.pump()
    assert peer.take(ipc.Disposition) == [ipc.Disposition(31, ipc.STATE_ACCEPTED, True, None)]
    peer.apply(ipc.SettleOut(32, ipc.STATE_RELEASED))
    assert d2.settled
    assert not engine.out_dlvs
    assert peer.take(ipc.LinkFlow) == []  # the core counts sends itself; no spurious flow


def test_plain_deliver_on_inter_router_connection_is_not_stripped(engine_cls):
    engine, peer = _listening_side(engine_cls)
    rcv, attach = _open_out(peer)
    data = _msg("x", annotations={TO: "M0q"})
    peer.apply(ipc.Deliver(41, attach.link_id, True, data))
    [(_, out)] = _received(rcv)
    assert _ann(out) == {"x-opt-qd.to": "M0q", "x-opt-qd.ingress": ME, "x-opt-qd.trace": [ME]}


def test_router_deliver_to_a_gone_link_is_ignored(engine_cls):
    engine, peer = _listening_side(engine_cls)
    peer.apply(ipc.RouterDeliver(51, 999_999, False, None, -1, _msg("x")))
    assert not engine.out_dlvs


# --- both builds agree ------------------------------------------------------------------------
def _scenario(cls):
    engine, peer = _listening_side(cls)
    snd, _ = _open_in(peer, "qd.router-data")
    rcv, attach = _open_out(peer)
    msgs = [_msg("a"), _msg("b", to="t", annotations={TO: "M0b", PHASE: 3}),
            _msg("c", annotations={INGRESS: "0/R", TRACE: ["0/R", "0/S"]}, priority=9)]
    for i, m in enumerate(msgs):
        peer.send(snd, m, settled=bool(i % 2))
    transfers = [c._replace(payload=bytes(c.payload)) for c in peer.take(ipc.RouterTransfer)]
    peer.apply(*[ipc.RouterDeliver(100 + i, attach.link_id, False, to, ph, m)
                 for i, (m, to, ph) in enumerate(zip(msgs, (None, "M1x", None), (-1, 1, 0)))])
    received = [(d.tag, d.settled, data) for d, data in _received(rcv)]
    return transfers, received


def test_compiled_and_pure_builds_agree(engine_cls):
    if engine_cls is engine_py.WorkerEngine:
        pytest.skip("compared once, from the compiled build's run")
    assert _scenario(engine_cls) == _scenario(engine_py.WorkerEngine)


# --- an edge router's uplink ------------------------------------------------------------------
@pytest.mark.parametrize("direction, stripped", [("out", True), ("in", False)])
def test_edge_uplink_carries_no_ingress_nor_trace(engine_cls, direction, stripped):
    """1.19's edge routers neither add nor pass on x-opt-qd.ingress and x-opt-qd.trace on
    their uplink (their own ``edge`` connector: the interior takes itself as the ingress, so
    it forwards an edge's multicast by its own valid origins); ``to`` and ``phase`` go as on
    any router link. An interior's accepted edge connection adds them as before."""
    from test_engine_attach_out import _peer_link
    engine = engine_cls(ROUTER_ID, 0, 2)
    peer = Peer(engine, dict(memrouter.LISTENER, name="up", role="edge"), direction)
    link_id = ipc.CORE_ID_BASE + 8
    peer.apply(ipc.AttachOut(link_id, peer.conn.conn_id, ipc.DIR_OUT, "qdlink.up",
                             ipc.terminus(ipc.TERMINUS_SOURCE, None),
                             ipc.terminus(ipc.TERMINUS_TARGET, None), [2, 0], 250))
    plink = _peer_link(peer, "qdlink.up")
    plink.source.copy(plink.remote_source)
    plink.target.copy(plink.remote_target)
    plink.open()
    plink.flow(10)
    peer.pump()
    annotated = _msg("b", annotations={symbol("user-key"): "u", TO: "M0keep", PHASE: 0,
                                       INGRESS: "0/Router.C", TRACE: ["0/Router.C"]})
    peer.apply(ipc.RouterDeliver(ipc.CORE_ID_BASE + 100, link_id, True, "q", -1, annotated),
               ipc.Deliver(ipc.CORE_ID_BASE + 101, link_id, True, annotated))
    (_, out1), (_, out2) = _received(plink)
    if stripped:
        assert _ann(out1) == {"user-key": "u", "x-opt-qd.to": "q", "x-opt-qd.phase": 0}
        assert _ann(out2) == {"user-key": "u", "x-opt-qd.to": "M0keep", "x-opt-qd.phase": 0}
    else:
        assert _ann(out1)["x-opt-qd.trace"] == ["0/Router.C", ME]
        assert _ann(out2)["x-opt-qd.ingress"] == "0/Router.C"
