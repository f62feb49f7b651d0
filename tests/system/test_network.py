"""Networks of interior routers on loopback: forwarding, failover and management across routers.

Every router here is a real ``qdrouterd`` process; clients are real proton clients. Topologies
are drawn in each test; ``--cost->`` is a connector with that cost (the arrow points at the
router that listens).
"""
from __future__ import annotations

import csv
import io
import subprocess
import sys
import time

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from clients import collect, pump_until
from conftest import free_port

TIMEOUT = 30
# collect() stops early after this long without a new message; it returns at once when the
# expected count arrived, so a generous value only costs time when something is missing
IDLE = 5.0


# the address rules of every router these tests start (multicast.*, closest.*; else balanced)
ADDRESS_RULES = """
    address {
        prefix: multicast
        distribution: multicast
    }
    address {
        prefix: closest
        distribution: closest
    }
    """


class Net:
    """Builds interior routers with an inter-router listener each; ``link(a, b, cost)`` makes
    ``a`` connect to ``b``."""

    def __init__(self, router_factory) -> None:
        self.factory = router_factory
        self.routers: dict = {}
        self.ir_ports: dict = {}
        self.links: dict = {}

    def add(self, name: str, connect_to: tuple = (), extra: str = "", **kwargs):
        """Start router ``name`` (id Router.<name>); connect_to: ((peer, cost), ...)."""
        port = self.ir_ports.setdefault(name, free_port())
        conf = f"""
            listener {{
                host: 127.0.0.1
                port: {port}
                role: inter-router
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            """
        conf += ADDRESS_RULES
        for peer, cost in connect_to:
            conf += f"""
            connector {{
                name: to-{peer}
                host: 127.0.0.1
                port: {self.ir_ports[peer]}
                role: inter-router
                cost: {cost}
            }}
            """
        r = self.factory(router_id=f"Router.{name}", mode="interior", extra=conf + extra,
                         **kwargs)
        self.routers[name] = r
        return r

    def __getitem__(self, name: str):
        return self.routers[name]

    def line(self, *names: str, **kwargs) -> None:
        """Routers in a line, each connecting to the one before it at cost 1 (``line("B",
        "A")``: A --1-> B), and wait until every one knows every other; ``kwargs`` go to
        every :meth:`add`."""
        self.add(names[0], **kwargs)
        for before, name in zip(names, names[1:]):
            self.add(name, connect_to=((before, 1),), **kwargs)
        converged(self, names)


def qdstat(port: int, *args: str) -> list:
    """qdstat's table as rows, its column header first (the title lines dropped)."""
    out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                          f"127.0.0.1:{port}", *args, "--csv"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = [row for row in csv.reader(io.StringIO(out.stdout)) if len(row) > 1]
    return rows


def nodes(r) -> dict:
    """router id -> its qdstat -n -v row as a dict."""
    rows = qdstat(r.port, "-n", "-v")
    if not rows:
        return {}
    head = rows[0]
    return {row[0]: dict(zip(head, row)) for row in rows[1:]}


def wait_for(check, timeout: float = TIMEOUT, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s (last: {last!r})")
        time.sleep(0.25)


def known_routers(r) -> set:
    """Router ids in ``r``'s router.node table (qdstat -n)."""
    return set(nodes(r))


def converged(net: Net, names) -> None:
    want = {f"Router.{n}" for n in names}
    for name in names:
        wait_for(lambda name=name: want <= known_routers(net[name]), what=f"{name} knows {want}")


def remote_seen(r, address: str, count: int = 1, phase: str | None = None) -> None:
    """Wait until router ``r`` knows ``count`` remote routers with a destination for ``address``
    (in ``phase`` if given, e.g. "1" for a waypoint's way back; else its first row)."""
    wait_for(lambda: _remote_count(r, address, phase) >= count,
             what=f"{r.id} learns {address} from {count} routers")


def valid_origin(r, origin: str, dest: str) -> None:
    """Wait until router ``r`` takes balanced deliveries that entered the network at router id
    ``origin`` on toward router id ``dest`` (``origin`` in its valid origins for ``dest``). A
    transit router releases them until its own core has computed that from the link states,
    which its neighbours may have done before it (each router's agent and core run apart)."""
    wait_for(lambda: f"'{origin}'" in nodes(r).get(dest, {}).get("valid-origins", ""),
             what=f"{origin} a valid origin toward {dest} at {r.id}")


def _remote_count(r, address: str, phase: str | None = None) -> int:
    rows = qdstat(r.port, "-a")
    head = rows[0]
    col = head.index("remote")
    addr_col, phase_col = head.index("addr"), head.index("phs")
    for row in rows[1:]:
        if row[addr_col] == address and phase in (None, row[phase_col]):
            return int(row[col] or 0)
    return 0


def transfer(conns, snd, bodies, receivers, expect=None):
    """Send ``bodies`` on ``snd`` without blocking, collect what ``receivers`` get (accepting
    it), then wait until every sent delivery has its outcome back; return (got, outcomes)."""
    sent = [snd.link.send(Message(body=body)) for body in bodies]
    got = collect(conns, receivers, expect=len(bodies) if expect is None else expect,
                  idle=IDLE)
    pump_until(conns, lambda: all(d.remote_state for d in sent), what="outcomes back")
    return got, [d.remote_state for d in sent]


@pytest.fixture
def net(router_factory):
    return Net(router_factory)


# --------------------------------------------------------------------------------------------
def test_two_routers_anycast_unsettled_and_settled_end_to_end(net):
    """A --1-> B: a receiver on B, a sender on A."""
    net.line("B", "A")
    rc = BlockingConnection(net["B"].url, timeout=TIMEOUT)
    sc = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver("orders", credit=50)
        remote_seen(net["A"], "orders")
        snd = sc.create_sender("orders")
        got, outcomes = transfer([rc, sc], snd, [f"m{i}" for i in range(20)], [rcv])
        assert got[0] == [f"m{i}" for i in range(20)]
        assert outcomes == [Delivery.ACCEPTED] * 20  # the receiver's outcome, across the hop
        # pre-settled too
        snd = sc.create_sender("orders", name="presettled", options=AtMostOnce())
        for i in range(10):
            snd.link.send(Message(body=f"p{i}")).settle()
        assert collect([rc, sc], [rcv], expect=10, idle=IDLE) == [[f"p{i}" for i in range(10)]]
    finally:
        sc.close()
        rc.close()


def test_request_reply_through_a_dynamic_address_across_routers(net):
    net.line("B", "A")
    service = BlockingConnection(net["B"].url, timeout=TIMEOUT)
    client = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        requests = service.create_receiver("svc", credit=10)
        replies_out = service.create_sender(None)
        remote_seen(net["A"], "svc")
        reply_rcv = client.create_receiver(None, dynamic=True, credit=10)
        reply_to = reply_rcv.remote_source.address
        assert reply_to.startswith("amqp:/_topo/0/Router.A/temp.")
        client.create_sender("svc").link.send(Message(body="ping", reply_to=reply_to))
        pump_until([client, service], lambda: requests.fetcher.incoming, what="request")
        request = requests.receive(timeout=TIMEOUT)
        requests.accept()
        replies_out.link.send(Message(address=request.reply_to, body="pong"))
        pump_until([client, service], lambda: reply_rcv.fetcher.incoming, what="reply")
        assert reply_rcv.receive(timeout=TIMEOUT).body == "pong"
        reply_rcv.accept()
    finally:
        client.close()
        service.close()


def test_line_of_three_multicast_closest_and_balanced(net):
    """A --1-> B --1-> C"""
    net.line("C", "B", "A")
    conns = {n: BlockingConnection(net[n].url, timeout=TIMEOUT) for n in "ABC"}
    try:
        # multicast: exactly one copy for each receiver, wherever it is
        mc = [conns[n].create_receiver("multicast.news", credit=50) for n in "ABC"]
        remote_seen(net["A"], "multicast.news", 2)
        # and B, which forwards A's copy on to C: a MAU is flooded by the cores, so A's agent
        # can take C's before B's does, and B does not send C a copy of what comes before
        remote_seen(net["B"], "multicast.news", 2)
        snd = conns["A"].create_sender("multicast.news")
        got, outcomes = transfer(conns.values(), snd, [f"n{i}" for i in range(5)], mc, expect=15)
        assert all(g == [f"n{i}" for i in range(5)] for g in got), got
        assert outcomes == [Delivery.ACCEPTED] * 5
        # closest: B's receiver is nearer to A than C's; when it goes, C's takes over
        near = conns["B"].create_receiver("closest.work", credit=50)
        far = conns["C"].create_receiver("closest.work", credit=50)
        remote_seen(net["A"], "closest.work", 2)
        snd = conns["A"].create_sender("closest.work")
        got, _ = transfer(conns.values(), snd, [f"c{i}" for i in range(6)], [near, far])
        assert got == [[f"c{i}" for i in range(6)], []]
        near.close()
        wait_for(lambda: _remote_count(net["A"], "closest.work") == 1,
                 what="A forgets B's receiver")
        remote_seen(net["B"], "closest.work")  # B, the transit router, knows C's receiver
        got, _ = transfer(conns.values(), snd, [f"d{i}" for i in range(3)], [far])
        assert got == [[f"d{i}" for i in range(3)]]
        # balanced (the default): both remote consumers get a share
        r1 = conns["B"].create_receiver("work", credit=100)
        r2 = conns["C"].create_receiver("work", credit=100)
        remote_seen(net["A"], "work", 2)
        remote_seen(net["B"], "work")  # B forwards C's share: until it knows r2 it releases it
        valid_origin(net["B"], "Router.A", "Router.C")
        snd = conns["A"].create_sender("work")
        got, _ = transfer(conns.values(), snd, list(range(40)), [r1, r2])
        assert sorted(got[0] + got[1]) == list(range(40))
        assert got[0] and got[1], got
    finally:
        for c in conns.values():
            c.close()


def test_triangle_failover_when_a_router_dies_and_rejoin(net, router_factory):
    """A --1-> B --1-> C and A --10-> C: traffic from A to C goes through B until B dies."""
    net.add("C")
    net.add("B", connect_to=(("C", 1),))
    net.add("A", connect_to=(("B", 1), ("C", 10)))
    converged(net, "ABC")
    rc = BlockingConnection(net["C"].url, timeout=TIMEOUT)
    sc = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver("fail.q", credit=100)
        remote_seen(net["A"], "fail.q")
        remote_seen(net["B"], "fail.q")  # the transit router too (it releases until then)
        valid_origin(net["B"], "Router.A", "Router.C")
        assert _next_hop(net["A"], "Router.C") == "Router.B"
        snd = sc.create_sender("fail.q")
        assert transfer([rc, sc], snd, ["before"], [rcv])[0] == [["before"]]
        killed_at = time.monotonic()
        net["B"].proc.proc.kill()
        wait_for(lambda: _next_hop(net["A"], "Router.C") == "Router.C", timeout=15,
                 what="A routes to C directly")
        reroute = time.monotonic() - killed_at
        assert reroute < 15
        assert transfer([rc, sc], snd, ["after"], [rcv])[0] == [["after"]]
        # B comes back (a new instance): A and C learn it again and route through it
        net.routers.pop("B").proc.stop()
        net.add("B", connect_to=(("C", 1),))
        wait_for(lambda: _next_hop(net["A"], "Router.C") == "Router.B", timeout=TIMEOUT,
                 what="A routes through the restarted B")
        # until the new B has C's mobile addresses it releases what A sends it (as 1.19 does)
        remote_seen(net["B"], "fail.q")
        # and takes what comes from A toward C once its own core has A's new link state (A may
        # route through B before B's core has computed that: B releases A's deliveries until then)
        valid_origin(net["B"], "Router.A", "Router.C")
        assert transfer([rc, sc], snd, ["again"], [rcv])[0] == [["again"]]
    finally:
        sc.close()
        rc.close()


def _next_hop(r, router_id: str):
    """The next hop toward ``router_id`` (itself for a neighbour), None if unknown."""
    node = nodes(r).get(router_id)
    if node is None:
        return None
    hop = node["next-hop"]
    return router_id if hop in ("", "-") else hop


def test_late_joiner_learns_every_address(net):
    net.add("B")
    rc = BlockingConnection(net["B"].url, timeout=TIMEOUT)
    try:
        receivers = [rc.create_receiver(f"late.{i}", credit=10) for i in range(5)]
        time.sleep(1.5)  # the addresses exist before anyone else joins
        net.add("A", connect_to=(("B", 1),))
        converged(net, "AB")
        for i in range(5):
            remote_seen(net["A"], f"late.{i}")
        sc = BlockingConnection(net["A"].url, timeout=TIMEOUT)
        try:
            for i in range(5):
                sc.create_sender(f"late.{i}").link.send(Message(body=i))
            got = collect([rc, sc], receivers, expect=5, idle=IDLE)
            assert got == [[i] for i in range(5)]
        finally:
            sc.close()
    finally:
        rc.close()


def test_management_of_the_network(net):
    net.line("B", "A")
    rows = qdstat(net["A"].port, "-n")
    ids = [row[0] for row in rows[1:]]
    assert sorted(ids) == ["Router.A", "Router.B"]
    # a remote router's management through A: qdstat -r
    remote = qdstat(net["A"].port, "-r", "Router.B", "-g")
    assert any("Router.B" in row for row in remote), remote
    # GET-MGMT-NODES lists B's management address
    conn = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        reply = conn.create_receiver(None, dynamic=True)
        snd = conn.create_sender("$management")
        snd.send(Message(reply_to=reply.remote_source.address,
                         properties={"operation": "GET-MGMT-NODES", "type": "org.amqp.management",
                                     "name": "self"}, body={}), timeout=TIMEOUT)
        answer = reply.receive(timeout=TIMEOUT)
        assert answer.properties["statusCode"] == 200
        assert "amqp:/_topo/0/Router.B/$management" in answer.body
    finally:
        conn.close()


def _qdmanage(r, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                          f"127.0.0.1:{r.port}", *args], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


def test_mesh_of_four_follows_costs(net):
    """A --1-> B --1-> D, A --5-> C --1-> D: A reaches D through B (cost 2) until A's
    connector to B is deleted, then through C (cost 6); a new connector to B at cost 10 (path
    cost 11) does not win it back, one at cost 2 (path cost 3) does."""
    net.add("D")
    net.add("B", connect_to=(("D", 1),))
    net.add("C", connect_to=(("D", 1),))
    net.add("A", connect_to=(("B", 1), ("C", 5)))
    converged(net, "ABCD")
    assert _next_hop(net["A"], "Router.D") == "Router.B"
    assert _cost(net["A"], "Router.D") == 2
    _qdmanage(net["A"], "delete", "--type=connector", "--name=to-B")
    wait_for(lambda: _next_hop(net["A"], "Router.D") == "Router.C", timeout=TIMEOUT,
             what="A routes to D through C")
    assert _cost(net["A"], "Router.D") == 6
    # C (the transit router) must know A's new link state too: until then A is not a valid
    # origin for D at C and balanced traffic from A would be released there
    wait_for(lambda: "Router.B" not in nodes(net["C"])["Router.A"]["neighbors"],
             what="C learns A's new link state")
    rc = BlockingConnection(net["D"].url, timeout=TIMEOUT)
    sc = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver("mesh.q", credit=10)
        remote_seen(net["A"], "mesh.q")
        # C forwards A's message to D: A can learn D's address (flooded through C's core)
        # before C's own agent does, and C releases what comes before that
        remote_seen(net["C"], "mesh.q")
        snd = sc.create_sender("mesh.q")
        got, outcomes = transfer([rc, sc], snd, ["via C"], [rcv])
        assert got == [["via C"]] and outcomes == [Delivery.ACCEPTED], (outcomes, nodes(net["C"]))
    finally:
        sc.close()
        rc.close()
    # costs at run time: a dear link to B is used for B only, a cheap one for D again
    b_port = net.ir_ports["B"]
    _qdmanage(net["A"], "create", "--type=connector", "name=to-B-dear", "host=127.0.0.1",
              f"port={b_port}", "role=inter-router", "cost=10")
    wait_for(lambda: _cost(net["A"], "Router.B") == 7, what="A reaches B at cost 7 (via C, D)")
    assert _next_hop(net["A"], "Router.D") == "Router.C"
    _qdmanage(net["A"], "delete", "--type=connector", "--name=to-B-dear")
    _qdmanage(net["A"], "create", "--type=connector", "name=to-B-cheap", "host=127.0.0.1",
              f"port={b_port}", "role=inter-router", "cost=2")
    wait_for(lambda: _next_hop(net["A"], "Router.D") == "Router.B", timeout=TIMEOUT,
             what="A routes to D through B again")
    assert _cost(net["A"], "Router.D") == 3


def _cost(r, router_id: str):
    node = nodes(r).get(router_id)
    return None if node is None else int(node["cost"])


def test_node_table_next_hops_costs_and_origins_come_from_the_core(net):
    """A --2-> B --3-> C (a line): ``qdstat -n -v`` on each router shows the next hops, path
    costs and valid origins the core process computed from the agents' link states
    (router_core/routetable.py), and the core routes a message A -> C with them."""
    net.add("C")
    net.add("B", connect_to=(("C", 3),))
    net.add("A", connect_to=(("B", 2),))
    converged(net, "ABC")
    wait_for(lambda: nodes(net["A"]).get("Router.C", {}).get("cost") == "5",
             what="A's core has a path to C")
    wait_for(lambda: nodes(net["C"]).get("Router.A", {}).get("cost") == "5",
             what="C's core has a path to A")
    # B's core computes its valid origins from the same link states, on its own time: A's and
    # C's paths do not say B's table is done
    valid_origin(net["B"], "Router.A", "Router.C")
    valid_origin(net["B"], "Router.C", "Router.A")
    a, b, c = nodes(net["A"]), nodes(net["B"]), nodes(net["C"])
    assert a["Router.A"]["next-hop"] == "(self)"
    assert a["Router.B"]["next-hop"] == "-" and a["Router.B"]["link"] not in ("", "-")
    assert a["Router.B"]["cost"] == "2" and a["Router.B"]["neighbors"] == "['Router.A', 'Router.C']"
    assert a["Router.C"]["next-hop"] == "Router.B" and a["Router.C"]["link"] == "-"
    assert a["Router.C"]["cost"] == "5" and a["Router.C"]["valid-origins"] == "[]"
    assert b["Router.A"]["cost"] == "2" and b["Router.C"]["cost"] == "3"
    assert b["Router.A"]["next-hop"] == b["Router.C"]["next-hop"] == "-"
    # balanced toward C from B accepts what came in at A (A's tree reaches C through B)
    assert b["Router.C"]["valid-origins"] == "['Router.A']"
    assert b["Router.A"]["valid-origins"] == "['Router.C']"
    assert c["Router.A"]["next-hop"] == "Router.B" and c["Router.A"]["cost"] == "5"
    rc = BlockingConnection(net["C"].url, timeout=TIMEOUT)
    sc = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver("line.end", credit=10)
        remote_seen(net["A"], "line.end")
        remote_seen(net["B"], "line.end")  # the transit router too (it releases until then)
        snd = sc.create_sender("line.end")
        got, outcomes = transfer([rc, sc], snd, ["over two hops"], [rcv])
        assert got[0] == ["over two hops"] and outcomes == [Delivery.ACCEPTED]
    finally:
        sc.close()
        rc.close()
