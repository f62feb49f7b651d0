"""System tests of message routing on one router: real proton clients against a launched router.

Covers (issue "Complete message routing on one router"; docs: "Routing patterns", "Message
settlement and reliability", "Configuring address semantics", "Address pattern matching",
"Configuring addresses for prioritized message delivery", "Message routing flow control"):

* distributions: anycast closest (spread over consumers), anycast balanced (fewest unsettled
  wins), multicast (every consumer, presettled and unsettled), ``unavailable`` (links refused,
  anonymous deliveries REJECTED);
* address configuration: prefix matches whole words, ``*`` / ``#`` patterns, most specific rule
  wins, the router's ``defaultDistribution`` for unconfigured addresses;
* anonymous senders routing by ``to``; a link target wins over ``to``;
* dynamic reply-to (request/response through a dynamic receiver);
* multicast outcome aggregation (REJECTED > ACCEPTED > MODIFIED > RELEASED), only after every copy;
* priority: configured address priority overrides the header; header priority orders held messages;
* large messages (1 MB, 5 MB) byte-identical; many messages through credit 1 in order;
* drain: a draining receiver with nothing to get is drained (credit back to 0);
* presettled volume: every one of 20k presettled messages arrives when the receiver keeps up,
  also when the sender closes its connection right after the last send.

Every wait is bounded; every router is stopped by the fixture; every client connection is closed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached

from clients import (BulkSender, CountingReceiver, Loop, body_seq, collect, pump_for, pump_until,
                     seq_body, take)
from conftest import Router, RouterProcess, free_port

TIMEOUT = 10

OUTCOMES = {"accept": Delivery.ACCEPTED, "reject": Delivery.REJECTED,
            "release": Delivery.RELEASED, "modify": Delivery.MODIFIED}


def give_outcome(dlv, outcome: str) -> None:
    if outcome == "modify":
        dlv.local.failed = True
    dlv.update(OUTCOMES[outcome])
    dlv.settle()


def multicast_conf(*prefixes: str) -> str:
    return "".join(f"address {{\n    prefix: {p}\n    distribution: multicast\n}}\n"
                   for p in prefixes)


@pytest.fixture
def conns():
    """BlockingConnections opened by a test; all closed at the end."""
    opened: list = []
    yield opened
    for c in opened:
        try:
            c.close()
        except Exception:
            pass


def connect(router, conns) -> BlockingConnection:
    c = BlockingConnection(router.url, timeout=TIMEOUT)
    conns.append(c)
    return c


@pytest.fixture
def router_with_defaults(tmp_path):
    """Like router_factory, but with attributes added to the ``router`` section itself."""
    started: list = []

    def make(router_attrs: str = "", extra: str = "", router_id: str = "Router.Test") -> Router:
        port = free_port()
        conf = tmp_path / f"qdrouterd-defaults-{len(started)}.conf"
        conf.write_text(textwrap.dedent(f"""\
            router {{
                mode: standalone
                id: {router_id}
                workerThreads: 1
            """) + textwrap.indent(textwrap.dedent(router_attrs), "    ") + textwrap.dedent(f"""\
            }}
            listener {{
                host: 127.0.0.1
                port: {port}
                role: normal
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            """) + textwrap.dedent(extra))
        proc = RouterProcess(conf)
        started.append(proc)
        proc.wait_for_line("Operational")
        return Router(proc, port, router_id)

    yield make
    for proc in started:
        proc.stop()


# ---------------------------------------------------------------------------------------------
# Distributions
# ---------------------------------------------------------------------------------------------

def test_anycast_closest_spreads_over_all_consumers(router_factory, conns):
    router = router_factory(extra="address {\n prefix: near\n distribution: closest\n}\n")
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    receivers = [rconn.create_receiver("near", credit=50, name=f"near-{i}") for i in range(3)]
    snd = sconn.create_sender("near")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0)
    for i in range(30):
        snd.link.send(Message(body=i))
    got = collect([rconn, sconn], receivers, expect=30)
    counts = [len(g) for g in got]
    assert sum(counts) == 30, counts
    assert all(c > 0 for c in counts), f"every closest consumer gets some: {counts}"
    # each message once, and per consumer in sending order
    assert sorted(b for g in got for b in g) == list(range(30))
    assert all(g == sorted(g) for g in got)


def test_anycast_balanced_prefers_the_consumer_that_settles(router_factory, conns):
    """Balanced: each message goes to the consumer with the fewest unsettled deliveries. The
    fast one accepts at once; the slow one has plenty of credit but holds what it gets."""
    router = router_factory(extra="address {\n prefix: work\n distribution: balanced\n}\n")
    fconn = connect(router, conns)
    sconn = connect(router, conns)
    slowconn = connect(router, conns)
    fast = fconn.create_receiver("work", credit=20, name="fast")
    slow = slowconn.create_receiver("work", credit=20, name="slow")
    snd = sconn.create_sender("work")
    everyone = [fconn, sconn, slowconn]
    pump_until(everyone, lambda: snd.link.credit > 0)
    fast_bodies, slow_held = [], []
    n = 40
    for i in range(n):
        # one at a time: each routing decision sees the consumers' current unsettled counts
        snd.link.send(Message(body=i))
        before = len(fast_bodies) + len(slow_held)
        pump_until(everyone, lambda: (fast.fetcher.has_message or slow.fetcher.has_message
                                      or len(fast_bodies) + len(slow_held) > before),
                   what=f"message {i} delivered")
        for msg, dlv in take(fast):
            fast_bodies.append(msg.body)
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
        slow_held += take(slow)
    pump_for(everyone, 0.2)
    slow_held += take(slow)
    assert len(fast_bodies) + len(slow_held) == n
    assert len(fast_bodies) >= n - 3, (
        f"balanced: fast consumer got {len(fast_bodies)}, slow (never settling) got "
        f"{len(slow_held)}")
    for _, dlv in slow_held:
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()


@pytest.mark.parametrize("presettled", [True, False], ids=["presettled", "unsettled"])
def test_multicast_every_consumer_gets_every_message(router_factory, conns, presettled):
    router = router_factory(extra=multicast_conf("news"))
    rconns = [connect(router, conns) for _ in range(3)]
    sconn = connect(router, conns)
    receivers = [c.create_receiver("news", credit=100) for c in rconns]
    snd = sconn.create_sender("news", options=AtMostOnce() if presettled else None)
    everyone = rconns + [sconn]
    pump_until(everyone, lambda: snd.link.credit > 0)
    n = 25
    dlvs = [snd.link.send(Message(body=f"n{i}")) for i in range(n)]
    got = collect(everyone, receivers, expect=3 * n)
    for g in got:
        assert g == [f"n{i}" for i in range(n)]
    if not presettled:
        pump_until(everyone, lambda: all(d.settled for d in dlvs), what="all settled")
        assert {d.remote_state for d in dlvs} == {Delivery.ACCEPTED}


def test_unavailable_distribution_refuses_and_rejects(router_factory, conns):
    """1.19: links to an unavailable address are refused, an anonymous sender's message to it
    REJECTED amqp:not-found (the details: test_attach_semantics.py)."""
    router = router_factory(extra="address {\n prefix: closed\n distribution: unavailable\n}\n")
    sconn = connect(router, conns)
    with pytest.raises(LinkDetached):
        connect(router, conns).create_receiver("closed.door", credit=10)
    anon = sconn.create_sender(None)
    dlv = anon.link.send(Message(address="closed.door", body="knock"))
    pump_until([sconn], lambda: dlv.settled, what="anonymous send settled")
    assert dlv.remote_state == Delivery.REJECTED
    assert dlv.remote.condition.name == "amqp:not-found"
    with pytest.raises(LinkDetached):
        sconn.create_sender("closed.door")


# ---------------------------------------------------------------------------------------------
# Address configuration: prefix / pattern matching, precedence, defaultDistribution
# ---------------------------------------------------------------------------------------------

def _classify(router, conns, addresses) -> dict:
    """Attach two receivers to each address, send one presettled message to each through an
    anonymous sender, and count copies: 2 = multicast, 1 = anycast, 0 = dropped."""
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    pairs = {a: [rconn.create_receiver(a, credit=5, name=f"{a}-{k}") for k in range(2)]
             for a in addresses}
    anon = sconn.create_sender(None, options=AtMostOnce())
    pump_until([sconn], lambda: anon.link.credit > 0)
    for a in addresses:
        anon.send(Message(address=a, body=a))
    flat = [r for a in addresses for r in pairs[a]]
    got = collect([rconn, sconn], flat, idle=0.7)
    result = {}
    for i, a in enumerate(addresses):
        bodies = got[2 * i] + got[2 * i + 1]
        assert all(b == a for b in bodies), (a, bodies)
        result[a] = {2: "multicast", 1: "anycast", 0: "dropped"}.get(len(bodies), len(bodies))
    return result


def test_prefix_matches_whole_words_only(router_factory, conns):
    router = router_factory(extra=multicast_conf("my_address"))
    expected = {"my_address": "multicast", "my_address.1": "multicast",
                "my_address/1": "multicast", "my_address.a.b": "multicast",
                "my_address1": "anycast", "my_addres": "anycast", "other.my_address": "anycast"}
    assert _classify(router, conns, list(expected)) == expected


def test_pattern_wildcards_star_is_one_word_hash_is_zero_or_more(router_factory, conns):
    router = router_factory(extra=textwrap.dedent("""\
        address {
            pattern: news/*/sports
            distribution: multicast
        }
        address {
            pattern: logs.#.error
            distribution: multicast
        }
        """))
    expected = {
        "news/europe/sports": "multicast", "news.asia.sports": "multicast",
        "news/sports": "anycast", "news/europe/uk/sports": "anycast",
        "news/europe/sportsfan": "anycast",
        "logs.error": "multicast", "logs.app.error": "multicast", "logs/a/b/c/error": "multicast",
        "logs.app.warning": "anycast", "logs.errors": "anycast",
    }
    assert _classify(router, conns, list(expected)) == expected


def test_most_specific_address_rule_wins(router_factory, conns):
    router = router_factory(extra=textwrap.dedent("""\
        address {
            prefix: a
            distribution: multicast
        }
        address {
            prefix: a.b
            distribution: balanced
        }
        address {
            pattern: orders.#
            distribution: multicast
        }
        address {
            pattern: orders.*.urgent
            distribution: closest
        }
        address {
            prefix: q.x
            distribution: closest
        }
        address {
            pattern: q.*
            distribution: multicast
        }
        """))
    expected = {
        "a": "multicast", "a.x": "multicast", "a.bc": "multicast",   # only "a" matches
        "a.b": "anycast", "a.b.c": "anycast", "a/b/c": "anycast",     # longer prefix wins
        "orders": "multicast", "orders.eu": "multicast", "orders.eu.normal": "multicast",
        "orders.eu.urgent": "anycast",                                # literal beats '#'
        "q.y": "multicast",
        "q.x": "anycast",                                             # literal beats '*'
    }
    assert _classify(router, conns, list(expected)) == expected


def test_default_distribution_applies_to_unconfigured_addresses(router_with_defaults, conns):
    router = router_with_defaults("defaultDistribution: multicast\n",
                                  extra="address {\n prefix: solo\n distribution: balanced\n}\n")
    expected = {"anything": "multicast", "x.y/z": "multicast", "solo": "anycast",
                "solo.1": "anycast", "solo1": "multicast"}
    assert _classify(router, conns, list(expected)) == expected


# ---------------------------------------------------------------------------------------------
# Anonymous senders and targets
# ---------------------------------------------------------------------------------------------

def test_anonymous_sender_routes_each_message_by_its_to(router, conns):
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    names = ["svc.a", "svc.b", "svc.c"]
    receivers = [rconn.create_receiver(n, credit=20) for n in names]
    anon = sconn.create_sender(None)
    dlvs = []
    for i in range(12):
        dlvs.append(anon.link.send(Message(address=names[i % 3], body=[names[i % 3], i])))
    got = collect([rconn, sconn], receivers, expect=12)
    for k, n in enumerate(names):
        assert got[k] == [[n, i] for i in range(12) if i % 3 == k]
    pump_until([sconn, rconn], lambda: all(d.settled for d in dlvs))
    assert {d.remote_state for d in dlvs} == {Delivery.ACCEPTED}


def test_link_target_wins_over_message_to(router, conns):
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    right = rconn.create_receiver("target.right", credit=10)
    wrong = rconn.create_receiver("target.wrong", credit=10)
    snd = sconn.create_sender("target.right")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0)
    dlv = snd.link.send(Message(address="target.wrong", body="follow the link"))
    got = collect([rconn, sconn], [right, wrong], expect=1)
    assert got == [["follow the link"], []]
    pump_until([sconn, rconn], lambda: dlv.settled)
    assert dlv.remote_state == Delivery.ACCEPTED


# ---------------------------------------------------------------------------------------------
# Dynamic reply-to
# ---------------------------------------------------------------------------------------------

def test_request_response_through_a_dynamic_reply_to(router, conns):
    server = connect(router, conns)
    client = connect(router, conns)
    requests = server.create_receiver("service", credit=10)
    replier = server.create_sender(None)
    replies = client.create_receiver(None, dynamic=True, credit=10)
    reply_to = replies.link.remote_source.address
    assert reply_to and reply_to.startswith(f"amqp:/_topo/0/{router.id}/temp."), reply_to
    asker = client.create_sender("service")
    both = [server, client]
    pump_until(both, lambda: asker.link.credit > 0)
    for i in range(5):
        asker.link.send(Message(body=f"ping {i}", reply_to=reply_to, correlation_id=i))
    answered = 0
    deadline = time.monotonic() + TIMEOUT
    while answered < 5:
        assert time.monotonic() < deadline, f"only {answered} requests answered"
        pump_for(both, 0.02)
        for msg, dlv in take(requests):
            rdlv = replier.link.send(Message(address=msg.reply_to, correlation_id=msg.correlation_id,
                                             body=msg.body.replace("ping", "pong")))
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            answered += 1
    got = collect(both, [replies], expect=5)[0]
    assert sorted(got) == [f"pong {i}" for i in range(5)]


# ---------------------------------------------------------------------------------------------
# Multicast outcome aggregation
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("first,second,expected", [
    ("reject", "accept", Delivery.REJECTED),
    ("accept", "reject", Delivery.REJECTED),
    ("accept", "release", Delivery.ACCEPTED),
    ("release", "accept", Delivery.ACCEPTED),
    ("release", "release", Delivery.RELEASED),
    ("modify", "release", Delivery.MODIFIED),
    ("release", "modify", Delivery.MODIFIED),
    ("modify", "accept", Delivery.ACCEPTED),
    ("reject", "release", Delivery.REJECTED),
])
def test_multicast_outcome_aggregation(router_factory, conns, first, second, expected):
    router = router_factory(extra=multicast_conf("mc"))
    c1, c2, s = connect(router, conns), connect(router, conns), connect(router, conns)
    r1 = c1.create_receiver("mc.outcome", credit=1)
    r2 = c2.create_receiver("mc.outcome", credit=1)
    snd = s.create_sender("mc.outcome")
    everyone = [c1, c2, s]
    pump_until(everyone, lambda: snd.link.credit > 0)
    dlv = snd.link.send(Message(body="fan-out"))
    pump_until(everyone, lambda: r1.fetcher.has_message and r2.fetcher.has_message)
    (m1, d1), = take(r1)
    (m2, d2), = take(r2)
    assert m1.body == m2.body == "fan-out"
    give_outcome(d1, first)
    pump_for(everyone, 0.3)
    assert not dlv.settled, "the sender must not see an outcome before every copy has one"
    give_outcome(d2, second)
    pump_until(everyone, lambda: dlv.settled, what="multicast delivery settled")
    assert dlv.remote_state == expected


# ---------------------------------------------------------------------------------------------
# Priority
# ---------------------------------------------------------------------------------------------

def _held_then_released(router, conns, address, priorities, targeted=False):
    """A consumer with no credit; send one message per priority (in order); grant credit; return
    the priorities in arrival order."""
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    rcv = rconn.create_receiver(address, credit=0)
    snd = sconn.create_sender(address if targeted else None)
    pump_until([sconn, rconn], lambda: snd.link.credit > 0)
    dlvs = [snd.link.send(Message(address=address, priority=p, body=[k, p]))
            for k, p in enumerate(priorities)]
    # let every message reach the router and be held there (no credit anywhere yet)
    pump_for([sconn, rconn], 0.5)
    assert not rcv.fetcher.has_message
    rcv.link.flow(len(priorities))
    got = collect([rconn, sconn], [rcv], expect=len(priorities))[0]
    pump_until([sconn, rconn], lambda: all(d.settled for d in dlvs))
    assert {d.remote_state for d in dlvs} == {Delivery.ACCEPTED}
    assert sorted(got) == [[k, p] for k, p in enumerate(priorities)]
    return [p for _, p in got]


def test_header_priority_orders_held_messages_anonymous_sender(router, conns):
    order = _held_then_released(router, conns, "prio.anon", [1, 1, 2, 8, 8, 9, 0])
    assert order == [9, 8, 8, 2, 1, 1, 0]


def test_header_priority_orders_held_messages_targeted_sender(router, conns):
    # Docs: "You can also control the priority level of individual messages by setting the
    # priority level in the message header" - whatever kind of link carried the message.
    order = _held_then_released(router, conns, "prio.link", [1, 1, 2, 8, 8, 9, 0],
                                targeted=True)
    assert order == [9, 8, 8, 2, 1, 1, 0]


def test_configured_address_priority_overrides_header_priority(router_factory, conns):
    router = router_factory(extra="address {\n prefix: fixedprio\n priority: 3\n}\n")
    # every message to fixedprio has priority 3, whatever its header says: arrival stays FIFO
    order = _held_then_released(router, conns, "fixedprio.x", [1, 9, 5, 0, 8])
    assert order == [1, 9, 5, 0, 8]


# ---------------------------------------------------------------------------------------------
# Large messages, small credit
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1 << 20, 5 << 20], ids=["1MB", "5MB"])
@pytest.mark.parametrize("presettled", [False, True], ids=["unsettled", "presettled"])
def test_large_message_round_trip(router, conns, size, presettled):
    conn = connect(router, conns)  # one connection: one event loop moves both directions
    rcv = conn.create_receiver("big", credit=2)
    snd = conn.create_sender("big", options=AtMostOnce() if presettled else None)
    pump_until([conn], lambda: snd.link.credit > 0)
    payload = os.urandom(size)
    started = time.monotonic()
    dlv = snd.link.send(Message(body=payload, properties={"size": size}))
    pump_until([conn], lambda: rcv.fetcher.has_message, timeout=25,
               what=f"{size}-byte message arrived")
    elapsed = time.monotonic() - started
    (msg, rdlv), = take(rcv)
    assert msg.properties == {"size": size}
    assert len(msg.body) == size
    assert msg.body == payload
    rdlv.update(Delivery.ACCEPTED)
    rdlv.settle()
    if not presettled:
        pump_until([conn], lambda: dlv.settled)
        assert dlv.remote_state == Delivery.ACCEPTED
    print(f"{size} bytes {'presettled' if presettled else 'unsettled'}: {elapsed:.2f}s")


def test_many_messages_through_credit_one_arrive_in_order(router, conns):
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    rcv = rconn.create_receiver("trickle", credit=1)
    snd = sconn.create_sender("trickle")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0)
    n = 300
    dlvs = [snd.link.send(Message(body=i)) for i in range(n)]
    got = collect([rconn, sconn], [rcv], expect=n, timeout=25)[0]
    assert got == list(range(n))
    pump_until([sconn, rconn], lambda: all(d.settled for d in dlvs))
    assert {d.remote_state for d in dlvs} == {Delivery.ACCEPTED}


# ---------------------------------------------------------------------------------------------
# Drain
# ---------------------------------------------------------------------------------------------

def test_drain_with_nothing_queued_returns_credit(router, conns):
    rconn = connect(router, conns)
    rcv = rconn.create_receiver("drain.me", credit=0)
    rcv.link.drain(10)
    pump_until([rconn], lambda: rcv.link.credit == 0 and not rcv.link.draining(),
               what="receiver drained")


def test_drain_after_credit_then_more_credit_still_delivers(router, conns):
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    rcv = rconn.create_receiver("drain.then", credit=0)
    rcv.link.flow(5)
    pump_for([rconn], 0.2)
    rcv.link.drain(0)
    pump_until([rconn], lambda: rcv.link.credit == 0 and not rcv.link.draining(),
               what="receiver drained")
    # The router must not send past the drained credit, and must send again on new credit.
    snd = sconn.create_sender("drain.then")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0)
    dlvs = [snd.link.send(Message(body=i)) for i in range(3)]
    pump_for([sconn, rconn], 0.5)
    assert not rcv.fetcher.has_message, "delivered without credit after a drain"
    rcv.link.flow(3)
    got = collect([rconn, sconn], [rcv], expect=3)[0]
    assert got == [0, 1, 2]
    pump_until([sconn, rconn], lambda: all(d.settled for d in dlvs))


def test_drain_while_messages_are_held_delivers_them(router, conns):
    rconn = connect(router, conns)
    sconn = connect(router, conns)
    rcv = rconn.create_receiver("drain.held", credit=0)
    snd = sconn.create_sender("drain.held")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0)
    dlvs = [snd.link.send(Message(body=i)) for i in range(3)]
    pump_for([sconn, rconn], 0.3)
    rcv.link.drain(5)
    pump_until([rconn, sconn], lambda: rcv.link.credit == 0 and not rcv.link.draining(),
               what="receiver drained")
    got = collect([rconn, sconn], [rcv], expect=3)[0]
    assert got == [0, 1, 2]
    pump_until([sconn, rconn], lambda: all(d.settled for d in dlvs))


# ---------------------------------------------------------------------------------------------
# Presettled volume
# ---------------------------------------------------------------------------------------------

def _missing_report(bodies, n) -> str:
    seen = sorted(body_seq(b) for b in bodies)
    missing = sorted(set(range(n)) - set(seen))
    dups = len(seen) - len(set(seen))
    if not missing and not dups:
        return ""
    runs = []
    for m in missing:
        if runs and runs[-1][1] == m - 1:
            runs[-1][1] = m
        else:
            runs.append([m, m])
    return (f"got {len(seen)}/{n}, {dups} duplicates, {len(missing)} missing in runs "
            f"{runs[:10]}{'...' if len(runs) > 10 else ''}")


def _dropped_presettled(router) -> int:
    """The router's droppedPresettledDeliveries (management)."""
    from test_mixed_1x import _mgmt_query
    rows = _mgmt_query(router, "org.apache.qpid.dispatch.router", ["droppedPresettledDeliveries"])
    return int(rows[0]["droppedPresettledDeliveries"])


@pytest.mark.parametrize("close_when_sent", [False, True], ids=["stays", "closes-at-once"])
def test_presettled_20k_arrive_in_order_or_are_counted_dropped(router, close_when_sent):
    """A pre-settled sender as fast as it can, a receiver with a window of 250. As 1.19, the
    sender's credit comes back for each delivery taken (waiting for the receiver or not), and
    what waits for the receiver is bounded by its link's capacity: the waiting ones beyond it
    are dropped and counted (droppedPresettledDeliveries). Every delivery either arrives, in
    order and once, or is counted."""
    n = 20000
    loop = Loop()
    try:
        rcv = CountingReceiver("volume", prefetch=250)
        loop.connect(router.url, rcv)
        assert loop.run_until(lambda: rcv.opened), "receiver not attached"
        snd = BulkSender("volume", n, lambda i: Message(body=seq_body(i, 100)), presettled=True,
                         close_when_sent=close_when_sent)
        loop.connect(router.url, snd)

        def finished():
            if rcv.count >= n:
                return True
            # sender done and the receiver idle for 3 s: whatever is missing is lost
            return (snd.last_sent_at is not None and rcv.last_at is not None
                    and time.monotonic() - max(rcv.last_at, snd.last_sent_at) > 3.0)
        loop.run_until(finished, timeout=25)
        loop.run_for(0.2)
        assert snd.sent == n
        assert rcv.presettled == rcv.count
        seqs = [body_seq(b) for b in rcv.bodies]
        assert seqs == sorted(set(seqs)), "out of order or twice"
        dropped = _dropped_presettled(router)
        assert len(seqs) + dropped == n, _missing_report(rcv.bodies, n) + f", {dropped} dropped"
    finally:
        loop.close()


LOADGEN = Path(__file__).resolve().parents[2] / "benchmarks" / "loadgen.py"


@pytest.mark.parametrize("run", range(3))
def test_presettled_20k_loadgen_clients(router, tmp_path, run):
    """The load generator: a fast receiver (credit 250) and a presettled sender that closes
    as soon as its transfers are written. What does not arrive was dropped and counted (as
    1.19: see test_presettled_20k_arrive_in_order_or_are_counted_dropped), never lost."""
    ready = tmp_path / "receiver.ready"
    base = [sys.executable, str(LOADGEN)]
    url = f"127.0.0.1:{router.port}"
    recv = subprocess.Popen(base + ["receiver", "--url", url, "--address", f"lg{run}",
                                    "--count", "20000", "--credit", "250", "--idle-timeout", "3",
                                    "--timeout", "25", "--ready-file", str(ready),
                                    "--out", str(tmp_path / "recv.jsonl")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    send = None
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert recv.poll() is None, recv.stderr.read()
            assert time.monotonic() < deadline, "receiver not ready"
            time.sleep(0.02)
        send = subprocess.run(base + ["sender", "--url", url, "--address", f"lg{run}",
                                      "--count", "20000", "--body-size", "100", "--presettled",
                                      "--timeout", "25", "--out", str(tmp_path / "send.jsonl")],
                              capture_output=True, text=True, timeout=30)
        _, err = recv.communicate(timeout=30)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait(5)
    import json
    rrec = json.loads((tmp_path / "recv.jsonl").read_text().splitlines()[-1])
    srec = json.loads((tmp_path / "send.jsonl").read_text().splitlines()[-1])
    assert srec["count"] == 20000 and not srec["error"], srec["error"]
    dropped = _dropped_presettled(router)
    assert rrec["count"] + dropped == 20000, (
        f"receiver got {rrec['count']}/20000, {dropped} dropped: {rrec['error']}; "
        f"sender: {send.stderr.strip()}")


def test_waypoint_address_uses_phases(router_factory):
    """A waypoint address: receivers consume phase 1, senders feed phase 0 (the waypoint's
    side), so a sender stalls while only phase-1 receivers exist — the route to a broker comes
    from autoLinks."""
    r = router_factory(extra="""
        address {
            prefix: queue
            waypoint: yes
        }
        """)
    conn = BlockingConnection(r.url, timeout=TIMEOUT)
    try:
        conn.create_receiver("queue.orders", credit=5)
        snd = conn.create_sender("queue.orders")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            conn.container.process()
            assert snd.link.credit == 0
        out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                              f"127.0.0.1:{r.port}", "-a", "--csv"],
                             capture_output=True, text=True, timeout=30).stdout
        rows = [line.split(",") for line in out.splitlines() if "queue.orders" in line]
        assert sorted(row[2].strip('"') for row in rows) == ["0", "1"], out
    finally:
        conn.close()
