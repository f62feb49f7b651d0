"""Streaming links: extra links toward another router for messages still arriving (1.19's
qd.streaming-links), on inter-router and edge connections.

Owns: the outbound streaming links of each inter-router or edge connection whose peer offered
the ``qd.streaming-links`` connection capability (1.19 routers and this one offer it on every
connection), which link a delivery toward another router (or toward the edge or interior at
the other end of an edge connection) goes on, and which idle streaming links the scrubber
detaches.

Why: a link carries one delivery at a time (the transfers of a delivery are contiguous), so a
1 GB message on its priority's shared data link would keep every message of that priority
toward that router behind it until its last byte. As in 1.19, a message still arriving (its
payload a :class:`streaming.Stream` that is not done) takes an idle streaming link of the
connection instead, or a new one the core attaches itself: ``qdlink.<16 hex digits>``, a sender
with capability ``qd.router-data`` on both termini (the peer sees one more inter-router data
link, as 1.19 attaches them), priority 4. The link is busy from the moment a copy starts on it
until the message's last chunk or abort, or while a copy waits on it for credit; then it is
idle (the pool) and takes the next such message. Whole messages, and a message that completed
while its copy waited elsewhere, keep the data link of their priority.

On an edge connection (either end: the edge toward its interior, the interior toward an edge)
the same holds for the endpoint links there (the edge's proxies of an address and its
anonymous uplink sender, the interior's proxies of an edge's consumers), with 1.19's edge
streaming link instead: an anonymous endpoint sender (no address on either terminus, no
capability), priority 4. The other end routes what arrives on it as from any anonymous
sender: by ``x-opt-qd.to`` (a targeted sender's address: transfer.send) or the message's
``to``.

The scrubber (1.19's streaming_link_scrubber, with its constants): every ``SCRUB_INTERVAL``
seconds each connection keeps at most ``POOL_MAX`` idle streaming links; beyond that the idle
ones with nothing unsettled are detached, at most ``SCRUB_BATCH`` per connection per scan. With
test hooks (``-T``) the core scans every ``TEST_SCRUB_INTERVAL`` seconds and keeps
``TEST_POOL_MAX`` (``core.sl_interval``, ``core.sl_pool_max``).

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from common.ipc import DIR_OUT, TERMINUS_SOURCE, TERMINUS_TARGET, terminus
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import LINK_DATA, ROLE_EDGE, Link
from router_core.streaming import Stream
# --- end core parts ---

# the capability symbol of an inter-router data link, AMQP-encoded (sym8) as termini carry it
ROUTER_DATA_CAPABILITY = b"\xa3\x0eqd.router-data"
STREAM_LINK_PRIORITY = 4  # 1.19's default priority: streaming links and data links past the 10th
POOL_MAX = 128            # idle streaming links a connection keeps (1.19: max_free_pool_size)
SCRUB_INTERVAL = 30.0     # seconds between scrubber scans (1.19: PROD_TIMER_INTERVAL)
SCRUB_BATCH = 10          # idle links detached per connection per scan at most (MAX_FREE_BATCH)
# with test hooks (qdrouterd -T) 1.19 scans every 5 s and keeps 2 idle links per connection
TEST_SCRUB_INTERVAL = 5.0
TEST_POOL_MAX = 2


class StreamLinkOwner:
    """The owner of the links this module attaches (linkends.attached_out asks it): a
    streaming link binds to no address, it carries what the relay puts on it."""

    __slots__ = ()

    def attached(self, core: Any, link: Link) -> bool:
        return True


STREAM_LINK_OWNER = StreamLinkOwner()


def stream_link(core: Any, out: Link, payload: Any) -> Link:
    """The link for a delivery the relay chose the data link ``out`` for (or a forwarder the
    endpoint link ``out`` of an edge connection): ``out`` itself, or for a message still
    arriving toward a peer that takes streaming links, an idle streaming link of the same
    connection (a new one if none is idle)."""
    if type(payload) is not Stream or payload.done or not out.conn.streaming_links:
        return out
    return idle_stream_link(core, out.conn, None)


def idle_stream_link(core: Any, conn: Any, taken: Any) -> Link:
    """An idle streaming link of ``conn`` that is not in ``taken`` (links chosen for other
    copies of the same message; None: none), else a new one."""
    for link in conn.stream_links:
        if not link.stream_busy and not link.queue and not link.closed:
            if taken is None or link not in taken:
                return link
    return open_stream_link(core, conn)


def stream_targets(core: Any, consumers: list, payload: Any, addr: Any) -> list:
    """The links a multicast message still arriving goes to: ``consumers``, with each
    endpoint link on an edge connection whose peer takes streaming links replaced by a
    streaming link of its connection (each copy its own). Whole messages: ``consumers``."""
    if type(payload) is not Stream or payload.done:
        return consumers
    out = None
    for i in range(len(consumers)):
        link = consumers[i]
        if (link.router or not link.conn.streaming_links or link.peer_link is not None
                or link.fallback):
            continue
        if out is None:
            out = list(consumers)
        out[i] = idle_stream_link(core, link.conn, out)
        addr.egress += 1  # (transfer.send counts a streaming link's delivery nowhere)
    return consumers if out is None else out


def open_stream_link(core: Any, conn: Any) -> Link:
    """Attach one more streaming link on the inter-router or edge connection ``conn``.
    Until the peer answers and grants credit, what is put on it waits in its queue."""
    name = "qdlink.%016x" % core._rng.getrandbits(64)
    if conn.role == ROLE_EDGE:
        source = terminus(TERMINUS_SOURCE, None)
        target = terminus(TERMINUS_TARGET, None)
    else:
        source = terminus(TERMINUS_SOURCE, None, False, ROUTER_DATA_CAPABILITY)
        target = terminus(TERMINUS_TARGET, None, False, ROUTER_DATA_CAPABILITY)
    link_id = core.attach_out(conn.conn_id, DIR_OUT, name, None, source, target, [2, 0],
                              STREAM_LINK_OWNER)
    link = core.links[link_id]
    if conn.role != ROLE_EDGE:
        link.router = True
        link.link_type = LINK_DATA
    link.priority = STREAM_LINK_PRIORITY
    link.streaming = True
    conn.stream_links.append(link)
    return link


def forget_stream_link(link: Link) -> None:
    """A streaming link is gone (detached, its connection closed, scrubbed)."""
    links = link.conn.stream_links
    if link in links:
        links.remove(link)


def idle_surplus(core: Any) -> list:
    """The streaming links the scrubber detaches now: per connection, the idle ones (nothing
    on them, nothing unsettled) past the first ``core.sl_pool_max``, at most ``SCRUB_BATCH``."""
    out = []
    pool_max = core.sl_pool_max
    for conn in core.conns.values():
        if len(conn.stream_links) <= pool_max:
            continue
        idle = [link for link in conn.stream_links
                if not (link.stream_busy or link.queue or link.unsettled or link.closed
                        or link.attaching)]
        out.extend(idle[pool_max:pool_max + SCRUB_BATCH])
    return out
