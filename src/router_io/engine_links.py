"""Links and termini at the worker: attach, answer, flow, drain, detach.

A peer's attach becomes LinkAttach (after policy), the core's LinkOpen/LinkRefuse answers it;
links the router attaches itself (inter-router links, AttachOut for auto-links and link
routes); credit both ways (LinkCredit in, LinkFlow out, drains and stalls); a link's end
forgets its deliveries.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

import uuid
from collections import deque
from typing import Any

import proton
from cproton_ffi import lib
from proton import symbol

from common import ipc
from common.ipc import DIR_OUT, LinkFlow
from common.tenant import tenant_address
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import (
    CAP_ROUTER, CAP_ROUTER_DATA, INTER_ROUTER, INVALID_FIELD, LINK_TYPES, LOCAL_UNINIT,
    PRIORITIES, _command, _condition_text, _fields, _key, _pn_link_credit, _pn_link_drained,
    _pn_link_flow, _pn_link_get_drain, _utf8)
from router_io.engine_termini import (
    _capabilities, _read_terminus, _settle_modes, _tenant_dnp, _write_terminus)
from router_io.engine_records import Link
from router_io.engine_conn import Connection
from router_io.engine_lifecycle import (
    CA_IGNORE, CE_ATTACH_OUT, LA_IGNORE, LE_CORE_DETACH,
    LE_OPEN, LE_REFUSE, connection_action, link_action)
# --- end engine parts ---


def _open_router_links(self, conn: Connection) -> None:
    """The connecting side of an inter-router connection creates every link on it, on one
    session: the two control links (capability qd.router, no addresses), then an incoming
    and an outgoing data link (qd.router-data) per priority 0..9, in ascending priority.
    Each is registered like an attached link: the core learns it from a LinkAttach and its
    LinkOpen answer is a no-op here (the link is already open locally)."""
    ssn = conn.connection.session()
    ssn.open()
    plan = [(ipc.DIR_IN, CAP_ROUTER), (ipc.DIR_OUT, CAP_ROUTER)]
    for _priority in range(PRIORITIES):
        plan.append((ipc.DIR_IN, CAP_ROUTER_DATA))
        plan.append((ipc.DIR_OUT, CAP_ROUTER_DATA))
    for direction, cap in plan:
        name = "qdlink." + uuid.uuid4().hex[:16]
        plink = ssn.sender(name) if direction == ipc.DIR_OUT else ssn.receiver(name)
        for terminus in (plink.source, plink.target):
            terminus.capabilities.put_symbol(symbol(cap))
        plink.open()
        l_ptr = plink._impl
        link = Link(self.new_id(), l_ptr, conn, direction,
                    anonymous=direction == ipc.DIR_IN)
        link.local = True
        link.open = True
        link.link_type = LINK_TYPES[cap]
        link.router = True
        link.stream = direction == ipc.DIR_IN and cap == CAP_ROUTER_DATA
        conn.links[l_ptr] = link
        self.links[link.link_id] = link
        self.link_ptrs[link.key] = link
        self.outbox.append(ipc.LinkAttach(link.link_id, conn.conn_id, direction, name, None,
                                          False, False, conn.link_capacity, link.link_type))
    self.dirty.add(conn)


def _on_link_open(self, l_ptr: Any) -> None:
    if not lib.pn_link_state(l_ptr) & LOCAL_UNINIT:
        link = self.link_ptrs.get(_key(l_ptr))
        if link is not None and link.awaiting:
            _on_attach_answer(self, link)
        return
    conn = self.conns.get(lib.pn_session_connection(lib.pn_link_session(l_ptr)))
    if conn is None:
        return
    if conn.failed:
        return
    plink = proton.Link.wrap(l_ptr)
    if plink.is_receiver:  # the client sends to us
        direction, terminus = ipc.DIR_IN, plink.remote_target
    else:
        direction, terminus = ipc.DIR_OUT, plink.remote_source
    what = "link name"
    try:  # peer-controlled text: not UTF-8 -> the attach is refused
        name = _utf8(lib.pn_link_name(l_ptr)) or ""
        what = "address"
        address = _utf8(lib.pn_terminus_get_address(terminus._impl))
        source = _read_terminus(lib.pn_link_remote_source(l_ptr))
        target = _read_terminus(lib.pn_link_remote_target(l_ptr))
    except ValueError as exc:
        _refuse_link(self, l_ptr, conn, INVALID_FIELD, f"{what} {exc}")
        return
    if conn.policy is not None and not _policy_link(self, l_ptr, conn, plink, direction,
                                                    address):
        return
    if conn.tenant and address and not terminus.dynamic:
        # multiTenant: the vhost's address space (not for _local/, _topo/, _edge/)
        address = tenant_address(conn.tenant, address)
    elif conn.tenant and terminus.dynamic:
        term = target if direction == ipc.DIR_IN else source
        if term is not None and term.get("dnp_address"):
            _tenant_dnp(term, tenant_address(conn.tenant, term["dnp_address"]))
    link = Link(self.new_id(), l_ptr, conn, direction,
                anonymous=(direction == ipc.DIR_IN and address is None and not terminus.dynamic))
    if direction == ipc.DIR_IN and (conn.tenant and link.anonymous or conn.policy is not None
                                    and (link.anonymous
                                         or not conn.policy.allowUserIdProxy)):
        link.check = True
    if direction == ipc.DIR_IN and conn.max_message_size:
        link.max_size = conn.max_message_size
        lib.pn_link_set_max_message_size(l_ptr, conn.max_message_size)
    caps = _capabilities(plink.remote_source) | _capabilities(plink.remote_target)
    if caps:  # qd.router -> router-control, qd.router-data -> inter-router
        for cap, link_type in LINK_TYPES.items():
            if cap in caps:
                link.link_type = link_type
                break
        # elsewhere the core refuses router links: they never carry deliveries
        link.router = link.link_type != "endpoint" and conn.role == INTER_ROUTER
    link.stream = (direction == ipc.DIR_IN and not link.check
                   and link.link_type != "router-control")
    conn.links[l_ptr] = link
    self.links[link.link_id] = link
    self.link_ptrs[link.key] = link
    presettled = plink.remote_snd_settle_mode == proton.Link.SND_SETTLED
    link.settle_for_receiver = presettled and direction == DIR_OUT
    self.outbox.append(ipc.LinkAttach(link.link_id, conn.conn_id, direction, name,
                                      address, bool(terminus.dynamic), presettled,
                                      conn.link_capacity, link.link_type, source, target,
                                      _settle_modes(l_ptr)))


def _attach_out(self, fx: ipc.AttachOut) -> None:
    """The core attaches a link on one of our connections (an auto-link, the far side of a
    link route): create it on the connection's router session, open it, and tell the core
    the peer's answer when its attach arrives (LinkAttached)."""
    conn = self.conns_by_id.get(fx.conn_id)
    if connection_action(conn, CE_ATTACH_OUT) == CA_IGNORE:
        # gone before the effect arrived: the core hears of the connection's close
        return
    ssn = conn.router_session
    if ssn is None:
        ssn = conn.router_session = conn.connection.session()
        ssn.open()
    plink = ssn.sender(fx.name) if fx.direction == DIR_OUT else ssn.receiver(fx.name)
    l_ptr = plink._impl
    _write_terminus(lib.pn_link_source(l_ptr), fx.source)
    _write_terminus(lib.pn_link_target(l_ptr), fx.target)
    lib.pn_link_set_snd_settle_mode(l_ptr, fx.settle[0])
    lib.pn_link_set_rcv_settle_mode(l_ptr, fx.settle[1])
    target = fx.target or {}
    link = Link(fx.link_id, l_ptr, conn, fx.direction,
                anonymous=fx.direction != DIR_OUT and target.get("address") is None
                and not target.get("dynamic"))
    link.local = True
    link.awaiting = True
    if conn.role == INTER_ROUTER and CAP_ROUTER_DATA in _capabilities(plink.target):
        link.link_type = LINK_TYPES[CAP_ROUTER_DATA]  # a streaming link (streamlinks.py)
        link.router = True
    # what a broker sends on an auto-link or on a link route's far side is streamed as
    # what a client sends (no policy checks whole messages on links the router attached)
    link.stream = fx.direction != DIR_OUT
    if fx.direction != DIR_OUT and conn.max_message_size:
        link.max_size = conn.max_message_size
        lib.pn_link_set_max_message_size(l_ptr, conn.max_message_size)
    conn.links[l_ptr] = link
    self.links[link.link_id] = link
    self.link_ptrs[link.key] = link
    lib.pn_link_open(l_ptr)
    self.dirty.add(conn)


def _on_attach_answer(self, link: Link) -> None:
    """The peer's attach for a link the core asked for (AttachOut)."""
    link.awaiting = False
    link.open = True
    l_ptr = link.ptr
    try:
        source = _read_terminus(lib.pn_link_remote_source(l_ptr))
        target = _read_terminus(lib.pn_link_remote_target(l_ptr))
    except ValueError as exc:  # a bad address in the answer: detach, the core hears it
        _set_condition(lib.pn_link_condition(l_ptr), INVALID_FIELD, f"address {exc}")
        _on_link_close(self, l_ptr, True)
        return
    self.outbox.append(ipc.LinkAttached(link.link_id, source, target, _settle_modes(l_ptr)))
    if link.direction == DIR_OUT:
        _on_flow(self, link.key)  # credit may have come with the attach


# A link-routed link's detach is answered with what the other end answers (1.19): the peer's
# detach goes to the core and waits for the core's DetachLink (HALF_REMOTE); the core's detach
# keeps the link until the peer answers it, and that answer goes to the core (HALF_LOCAL).
HALF_NONE = 0
HALF_REMOTE = 1
HALF_LOCAL = 2


def _on_link_close(self, l_ptr: Any, closed: bool) -> None:
    link = self.link_ptrs.get(_key(l_ptr))
    if link is None:
        return
    conn = link.conn
    error = _condition_text(lib.pn_link_remote_condition(l_ptr))
    if link.routed and link.half == HALF_NONE:
        link.half = HALF_REMOTE  # answered at the core's DetachLink (_fx_detach_link)
        self.outbox.append(ipc.LinkDetach(link.link_id, closed, error))
        return
    _forget_link(self, link)
    del conn.links[l_ptr]
    self.outbox.append(ipc.LinkDetach(link.link_id, closed, error))
    if link.half == HALF_LOCAL:
        return  # the peer's answer to the router's detach
    if closed:
        lib.pn_link_close(l_ptr)
    else:
        lib.pn_link_detach(l_ptr)


def _session_links_lost(self, conn: Connection, ssn: Any) -> None:
    """The peer ended session ``ssn`` (cffi) of ``conn``: no detach will come for its links,
    so each one still open is lost (LinkLost: the core drops it and detaches a link-routed
    partner with qd:routed-link-lost), and if it was the router's own session the next link
    the core attaches (AttachOut) opens a new one, as 1.19 does."""
    router_ssn = conn.router_session
    if router_ssn is not None and router_ssn._impl == ssn:
        conn.router_session = None
    for l_ptr, link in list(conn.links.items()):
        if lib.pn_link_session(link.ptr) != ssn:
            continue
        _forget_link(self, link)
        del conn.links[l_ptr]
        self.outbox.append(ipc.LinkLost(link.link_id))
    self.dirty.add(conn)


def _refuse_link(self, l_ptr: Any, conn: Connection, condition: str,
                 description: str) -> None:
    """Answer an attach with attach + detach(condition); the core never hears of the link."""
    self.log("warning", f"[C{conn.conn_id}] refusing link: {condition}: {description}")
    _set_condition(lib.pn_link_condition(l_ptr), condition, description)
    lib.pn_link_open(l_ptr)
    lib.pn_link_close(l_ptr)
    self.dirty.add(conn)


def _forget_link(self, link: Link) -> None:
    self.links.pop(link.link_id, None)
    self.link_ptrs.pop(link.key, None)
    if self.in_streams or self.out_streams:
        _forget_streams(self, link)
    for dlv_id in [i for i, (_, lk) in self.in_dlvs.items() if lk is link]:
        ptr, _ = self.in_dlvs.pop(dlv_id)
        self.in_ids.pop(ptr, None)
    for dlv_id in [i for i, (_, lk) in self.out_dlvs.items() if lk is link]:
        ptr, _ = self.out_dlvs.pop(dlv_id)
        if self.tag_ids:
            self.tag_ids.pop(ptr, None)
    if link.queued:  # what waited for the socket: the core fails it (MODIFIED / dropped)
        queue = link.conn.out_queue
        for entry in queue:
            if entry[0] is link:
                self.queued_out.pop(entry[1], None)
                if self.pending_states:
                    self.pending_states.pop(entry[1], None)
        link.conn.out_queue = deque(e for e in queue if e[0] is not link)
        link.queued = 0
    link.open = False


def _on_flow(self, l_ptr: Any) -> None:
    link = self.link_ptrs.get(l_ptr)
    if link is None or link.awaiting:
        return
    if link.direction != DIR_OUT:
        # an inbound link the core asked to drain (LinkDrain, link routes): once the
        # sender has used up its credit the drain is over
        if link.draining and _pn_link_credit(l_ptr) <= 0:
            link.draining = False
            lib.pn_link_set_drain(link.ptr, False)
            self.outbox.append(ipc.InDrained(link.link_id))
        return
    _report_flow(self, link)


def _report_flow(self, link: Link) -> None:
    """LinkFlow(limit, drain) to the core: limit = deliveries sent + the receiver's credit,
    or, while the link is capped, only what the core already gave us (sent + queued)."""
    l_ptr = link.key
    limit = link.sent + _pn_link_credit(l_ptr)
    if link.capped or link.out_stream is not None:
        limit = min(limit, link.sent + link.queued)
    flow = (limit, bool(_pn_link_get_drain(l_ptr)))
    if flow != link.flow:
        link.flow = flow
        self.outbox.append(_command(LinkFlow, (link.link_id, flow[0], flow[1])))


def _fx_link_open(self, fx: ipc.LinkOpen) -> None:
    link = self.links.get(fx.link_id)
    if link_action(link, LE_OPEN) == LA_IGNORE:
        return
    # The core knows the link from now on: what credit the peer gave before (with its
    # attach, while the core waited, e.g. for an edge's address lookup) was not taken by
    # the core then, so it is reported again now, even if unchanged.
    link.flow = (-1, False)
    if link.local:  # created open by this router: nothing to answer
        if fx.settle is not None:  # the far side of a link route (linkroute.routed_attached)
            link.routed = True
            return
        if link.direction == ipc.DIR_OUT:
            _on_flow(self, link.key)
        return
    if fx.settle is not None:  # a link route: the far end's answer, as it gave it
        link.routed = True
        _write_terminus(lib.pn_link_source(link.ptr), fx.source)
        _write_terminus(lib.pn_link_target(link.ptr), fx.target)
        lib.pn_link_set_snd_settle_mode(link.ptr, fx.settle[0])
        lib.pn_link_set_rcv_settle_mode(link.ptr, fx.settle[1])
        lib.pn_link_open(link.ptr)
        link.open = True
        self.dirty.add(link.conn)
        if link.direction == ipc.DIR_OUT:
            _on_flow(self, link.key)
        return
    plink = proton.Link.wrap(link.ptr)
    plink.source.copy(plink.remote_source)
    plink.target.copy(plink.remote_target)
    if link.direction == ipc.DIR_OUT and plink.remote_source.dynamic:
        plink.source.address = fx.address
    elif link.direction == ipc.DIR_IN and plink.remote_target.dynamic:
        plink.target.address = fx.address
    lib.pn_link_set_snd_settle_mode(link.ptr, lib.pn_link_remote_snd_settle_mode(link.ptr))
    lib.pn_link_set_rcv_settle_mode(link.ptr, lib.pn_link_remote_rcv_settle_mode(link.ptr))
    lib.pn_link_open(link.ptr)
    link.open = True
    self.dirty.add(link.conn)
    if link.direction == ipc.DIR_OUT:
        _on_flow(self, link.key)  # credit may have arrived with the attach


def _fx_link_refuse(self, fx: ipc.LinkRefuse) -> None:
    link = self.links.get(fx.link_id)
    if link_action(link, LE_REFUSE) == LA_IGNORE:
        return
    _set_condition(lib.pn_link_condition(link.ptr), fx.condition, fx.description)
    if link.direction == ipc.DIR_IN:  # the answering attach has a null target, as 1.19's
        lib.pn_terminus_set_type(lib.pn_link_target(link.ptr), lib.PN_UNSPECIFIED)
    lib.pn_link_open(link.ptr)
    lib.pn_link_close(link.ptr)
    _forget_link(self, link)
    link.conn.links.pop(link.ptr, None)
    self.dirty.add(link.conn)


def _fx_link_drain(self, fx: ipc.LinkDrain) -> None:
    link = self.links.get(fx.link_id)
    if link is None or link.direction == DIR_OUT:
        return
    if lib.pn_link_credit(link.ptr) <= 0:  # nothing to drain: drained already
        self.outbox.append(ipc.InDrained(link.link_id))
        return
    link.draining = True
    lib.pn_link_drain(link.ptr, 0)  # drain flag on, no more credit: a flow frame goes out
    self.dirty.add(link.conn)


def _fx_link_stall(self, fx: ipc.LinkStall) -> None:
    """The drain flag of an inbound link whose address has no destination (on), cleared
    when it has one again (off: answered with the sender's credit, LinkUnstalled)."""
    link = self.links.get(fx.link_id)
    if link is None or link.direction == DIR_OUT:
        return
    lib.pn_link_set_drain(link.ptr, bool(fx.on))
    if not fx.on:
        self.outbox.append(ipc.LinkUnstalled(
            link.link_id, lib.pn_link_credit(link.ptr) + lib.pn_link_queued(link.ptr)))
    self.dirty.add(link.conn)


def _fx_credit(self, fx: ipc.LinkCredit) -> None:
    link_id, credit = _fields(fx)
    link = self.links.get(link_id)
    if link is not None:
        _pn_link_flow(link.key, credit)
        self.dirty.add(link.conn)


def _fx_drained(self, fx: ipc.Drained) -> None:
    link = self.links.get(_fields(fx)[0])
    if link is not None:
        if link.queued:  # the credit left is for what still waits in the out_queue
            link.drain_after = True
            return
        link.sent += _pn_link_drained(link.key)
        self.dirty.add(link.conn)


def _fx_detach_link(self, fx: ipc.DetachLink) -> None:
    link = self.links.get(fx.link_id)
    if link_action(link, LE_CORE_DETACH) == LA_IGNORE:
        return
    if fx.condition:  # none: an orderly detach (a link route passes one on)
        _set_condition(lib.pn_link_condition(link.ptr), fx.condition, fx.description)
    if fx.closed:
        lib.pn_link_close(link.ptr)
    else:  # a link route's partner detached without closing
        lib.pn_link_detach(link.ptr)
    if link.routed and link.half == HALF_NONE:
        link.half = HALF_LOCAL  # kept until the peer answers (_on_link_close)
        self.dirty.add(link.conn)
        return
    _forget_link(self, link)
    link.conn.links.pop(link.ptr, None)
    self.dirty.add(link.conn)


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_policy import _policy_link
from router_io.engine_dispositions import _set_condition
from router_io.engine_stream_in import _forget_streams
# --- end engine parts ---
