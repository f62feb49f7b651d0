"""The worker engine's side of links the router attaches itself (auto-links, link routes) and of
terminus passthrough: AttachOut / LinkAttached, the termini a LinkAttach carries, and LinkOpen
answering with given termini.

The engine runs alone (no core), a bare proton engine at the other end of the connection, bytes
pumped in memory (the Peer of test_engine_router_links); every command goes through the real IPC
codec. Both builds (the ``engine_cls`` fixture).
"""
from __future__ import annotations

import proton
from proton import Data, Message, Terminus, symbol

from common import ipc
from test_engine_router_links import NORMAL_SETTINGS, Peer, _listening_side

SETTLE_UNSETTLED = [0, 0]  # snd-settle-mode unsettled, rcv-settle-mode first


def _encoded(put) -> bytes:
    data = Data()
    put(data)
    return data.encode()


def _route_container(engine_cls):
    return _listening_side(engine_cls, dict(NORMAL_SETTINGS, role="route-container"))


def _peer_link(peer: Peer, name: str):
    """The link the engine attached, as the bare peer sees it (its remote open)."""
    peer.pump()
    for ev in iter(peer.collector.peek, None):
        peer.collector.pop()
        if ev.type == proton.Event.LINK_REMOTE_OPEN and ev.link.name == name:
            ev.link.session.open()  # the router's session: answered as a broker does
            return ev.link
    raise AssertionError(f"no attach for {name}")


def test_client_attach_carries_its_termini(engine_cls):
    engine, peer = _route_container(engine_cls)
    snd = peer.session.sender("snd-termini")
    snd.target.address = "queue.a"
    snd.target.durability = Terminus.DELIVERIES
    snd.target.expiry_policy = Terminus.EXPIRE_NEVER
    snd.target.timeout = 30
    snd.target.capabilities.put_array(False, Data.SYMBOL)
    snd.target.capabilities.enter()
    snd.target.capabilities.put_symbol(symbol("queue"))
    snd.target.capabilities.exit()
    snd.source.address = "me"
    snd.snd_settle_mode = proton.Link.SND_MIXED
    snd.open()
    peer.pump()
    [attach] = peer.take(ipc.LinkAttach)
    assert attach.direction == ipc.DIR_IN and attach.address == "queue.a"
    target = attach.target
    assert target["type"] == ipc.TERMINUS_TARGET and target["address"] == "queue.a"
    assert (target["durable"], target["expiry"], target["timeout"]) == (2, 3, 30)
    caps = Data()
    caps.decode(target["capabilities"])
    caps.next()
    assert [str(c) for c in caps.get_object().elements] == ["queue"]
    assert attach.source["type"] == ipc.TERMINUS_SOURCE and attach.source["address"] == "me"
    assert attach.settle == [proton.Link.SND_MIXED, proton.Link.RCV_FIRST]


def test_coordinator_target_is_kept_as_a_coordinator(engine_cls):
    engine, peer = _route_container(engine_cls)
    snd = peer.session.sender("txn-ctrl")
    snd.target.type = Terminus.COORDINATOR
    snd.open()
    peer.pump()
    [attach] = peer.take(ipc.LinkAttach)
    assert attach.target["type"] == ipc.TERMINUS_COORDINATOR and attach.address is None


def test_attach_out_receiving_link(engine_cls):
    """The router attaches a receiving link (an in auto-link): the peer sees our termini,
    answers with its own; credit and messages then flow as on any link."""
    engine, peer = _route_container(engine_cls)
    def put_filter(data):
        data.put_map()
        data.enter()
        data.put_symbol("f")
        data.put_string("x = 1")
        data.exit()

    filt = _encoded(put_filter)
    source = dict(ipc.terminus(ipc.TERMINUS_SOURCE, "queue.b"), filter=filt, durable=1)
    link_id = ipc.CORE_ID_BASE + 7
    peer.apply(ipc.AttachOut(link_id, peer.conn.conn_id, ipc.DIR_IN, "auto.in", source,
                             ipc.terminus(ipc.TERMINUS_TARGET, "queue.b"), SETTLE_UNSETTLED,
                             250))
    assert not peer.take(ipc.LinkAttach)   # the router's own link: no LinkAttach for it
    plink = _peer_link(peer, "auto.in")
    assert plink.is_sender
    assert plink.remote_source.address == "queue.b" and plink.remote_source.durability == 1
    remote_filter = plink.remote_source.filter
    remote_filter.rewind()
    remote_filter.next()
    assert remote_filter.get_dict() == {symbol("f"): "x = 1"}
    assert plink.remote_target.address == "queue.b"
    plink.source.copy(plink.remote_source)
    plink.target.copy(plink.remote_target)
    plink.open()
    peer.pump()
    [answer] = peer.take(ipc.LinkAttached)
    assert answer.link_id == link_id and answer.source["address"] == "queue.b"
    assert answer.settle == [plink.snd_settle_mode, plink.rcv_settle_mode]  # mixed, first
    peer.apply(ipc.LinkCredit(link_id, 5))
    assert plink.credit == 5
    data = Message(body="from the broker").encode()
    peer.send(plink, data)
    [transfer] = peer.take(ipc.Transfer)
    assert transfer.link_id == link_id and bytes(transfer.payload) == data


def test_attach_out_sending_link(engine_cls):
    """The router attaches a sending link (an out auto-link): the peer's credit comes back as
    LinkFlow only after LinkAttached; a Deliver reaches the peer."""
    engine, peer = _route_container(engine_cls)
    link_id = ipc.CORE_ID_BASE + 8
    peer.apply(ipc.AttachOut(link_id, peer.conn.conn_id, ipc.DIR_OUT, "auto.out",
                             ipc.terminus(ipc.TERMINUS_SOURCE, "queue.c"),
                             ipc.terminus(ipc.TERMINUS_TARGET, "queue.c"), SETTLE_UNSETTLED,
                             250))
    plink = _peer_link(peer, "auto.out")
    assert plink.is_receiver and plink.remote_target.address == "queue.c"
    plink.source.copy(plink.remote_source)
    plink.target.copy(plink.remote_target)
    plink.open()
    plink.flow(3)
    peer.pump()
    commands = peer.take()
    kinds = [type(c) for c in commands]
    assert kinds.index(ipc.LinkAttached) < kinds.index(ipc.LinkFlow)
    assert [c for c in commands if type(c) is ipc.LinkFlow][-1] == ipc.LinkFlow(link_id, 3,
                                                                                 False)
    data = Message(body="to the broker").encode()
    peer.apply(ipc.Deliver(ipc.CORE_ID_BASE + 100, link_id, False, data))
    dlv = plink.current
    assert dlv is not None and plink.recv(dlv.pending) == data


def test_attach_out_refused_by_the_peer(engine_cls):
    engine, peer = _route_container(engine_cls)
    link_id = ipc.CORE_ID_BASE + 9
    peer.apply(ipc.AttachOut(link_id, peer.conn.conn_id, ipc.DIR_OUT, "auto.refused", None,
                             ipc.terminus(ipc.TERMINUS_TARGET, "nowhere"), SETTLE_UNSETTLED,
                             250))
    plink = _peer_link(peer, "auto.refused")
    plink.open()          # a refusal: an attach without the termini asked for ...
    plink.condition = proton.Condition("amqp:not-found", "no such queue")
    plink.close()         # ... then a detach with the error
    peer.pump()
    [answer] = peer.take(ipc.LinkAttached)
    assert answer.link_id == link_id and answer.source is None
    assert (answer.target or {}).get("address") is None
    [detach] = peer.take(ipc.LinkDetach)
    assert detach.link_id == link_id and detach.closed
    assert detach.error == "amqp:not-found: no such queue"


def test_attach_out_on_unknown_connection_is_ignored(engine_cls):
    engine, peer = _route_container(engine_cls)
    peer.apply(ipc.AttachOut(ipc.CORE_ID_BASE + 10, 987654, ipc.DIR_IN, "x", None, None,
                             SETTLE_UNSETTLED, 250))
    assert not peer.take(ipc.LinkAttached) and not peer.take(ipc.LinkDetach)


def test_link_open_with_given_termini_mirrors_the_far_end(engine_cls):
    """A link route answers the client with the far end's termini, not a copy of its own."""
    engine, peer = _route_container(engine_cls)
    rcv = peer.session.receiver("rcv-mirror")
    rcv.source.dynamic = True
    rcv.open()
    peer.pump()
    [attach] = peer.take(ipc.LinkAttach)
    assert attach.source["dynamic"] and attach.source["address"] is None
    far_source = dict(ipc.terminus(ipc.TERMINUS_SOURCE, "broker.tmp.42"),
                      distribution_mode=2)
    peer.apply(ipc.LinkOpen(attach.link_id, None, far_source,
                            ipc.terminus(ipc.TERMINUS_TARGET, None),
                            [proton.Link.SND_SETTLED, proton.Link.RCV_FIRST]))
    assert rcv.remote_source.address == "broker.tmp.42"
    assert rcv.remote_source.distribution_mode == Terminus.DIST_MODE_MOVE
    assert rcv.remote_snd_settle_mode == proton.Link.SND_SETTLED


def test_credit_given_with_the_attach_is_reported_again_once_the_core_opens_the_link(engine_cls):
    """A receiver's credit that came with its attach, before the core answered (the core may
    hold an attach back: an edge router asks its interior first): the core drops a LinkFlow
    for a link it does not know yet, so the engine reports the credit again after LinkOpen,
    though it did not change."""
    engine, peer = _route_container(engine_cls)
    rcv = peer.session.receiver("rcv-early")
    rcv.source.address = "queue.early"
    rcv.open()
    rcv.flow(10)
    peer.pump()
    [attach] = peer.take(ipc.LinkAttach)
    assert [(f.link_id, f.limit) for f in peer.take(ipc.LinkFlow)] == [(attach.link_id, 10)]
    peer.apply(ipc.LinkOpen(attach.link_id, "queue.early"))
    assert [(f.link_id, f.limit) for f in peer.take(ipc.LinkFlow)] == [(attach.link_id, 10)]
