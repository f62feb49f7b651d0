"""The inter-router protocol seen from outside: a fake router speaking it on the raw links, a
path lost with deliveries in flight, several I/O workers per router, and a duplicate router id.

Every router is a real ``qdrouterd`` process on loopback; clients are real proton clients; every
wait is bounded. The fake router (:class:`FakeRouter`) is a proton ``BlockingConnection`` to a
router's ``role: inter-router`` listener that behaves as the connecting side of an inter-router
connection does (reference: ``inter-router-protocol.md``).
"""
from __future__ import annotations

import textwrap
import time

import pytest
from proton import Delivery, Message, int32, symbol
from proton.utils import BlockingConnection

from clients import collect, pump_for, pump_until, take
from conftest import free_port
from test_interior import _Caps
from test_network import IDLE, Net, nodes, qdstat, remote_seen, transfer, wait_for

TIMEOUT = 15
FAKE = "Router.Fake"
HELLO_TO = "amqp:/_local/qdhello"
RA_TO = "amqp:/_topo/0/all/qdrouter"


def _annotation(msg, key: str):
    for k, v in (msg.annotations or {}).items():
        if str(k) == key:
            return v
    return None


def _text_keys(body) -> dict:
    """A control body with its keys as text (they may be strings or symbols)."""
    return {str(k): v for k, v in body.items()}


def _opcode(msg):
    for k, v in (msg.properties or {}).items():
        if str(k) == "opcode":
            return str(v)
    return None


class FakeRouter:
    """The connecting side of an inter-router connection, driven by hand: OPEN as a router, the
    two control links, then the twenty data links in ascending priority order. Control messages
    the router sends arrive in :attr:`received` as ``(msg, opcode, body)``."""

    def __init__(self, port: int, router_id: str = FAKE) -> None:
        self.id = router_id
        self.instance = int(time.time())
        self.conn = BlockingConnection(
            f"amqp://127.0.0.1:{port}", timeout=TIMEOUT, container_id=router_id,
            offered_capabilities=[symbol("ANONYMOUS-RELAY")],
            desired_capabilities=[symbol("ANONYMOUS-RELAY")],
            properties={symbol("product"): "fake-router", symbol("version"): "1.19.0",
                        symbol("qd.conn-id"): int32(1), symbol("qd.annotations-version"): int32(1)})
        try:
            control = _Caps([symbol("qd.router")])
            data = _Caps([symbol("qd.router-data")])
            self.ctl_in = self.conn.create_receiver(None, name="qdlink.fake-control-in",
                                                    credit=100, options=control)
            self.ctl_out = self.conn.create_sender(None, name="qdlink.fake-control-out",
                                                   options=control)
            self.data = []
            for priority in range(10):
                self.data.append(self.conn.create_receiver(
                    None, name=f"qdlink.fake-data-in-{priority}", credit=10, options=data))
                self.data.append(self.conn.create_sender(
                    None, name=f"qdlink.fake-data-out-{priority}", options=data))
        except Exception:
            self.conn.close()
            raise
        self.received: list = []
        self.ls_seq = 1

    # ---- I/O -----------------------------------------------------------------------------------
    def pump(self, seconds: float = 0.05) -> None:
        pump_for([self.conn], seconds)
        self._drain()

    def _drain(self) -> None:
        for msg, dlv in take(self.ctl_in):
            if not dlv.settled:
                dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            body = _text_keys(msg.body) if isinstance(msg.body, dict) else msg.body
            self.received.append((msg, _opcode(msg), body))
            self._answer(_opcode(msg), body)
        if self.ctl_in.link.credit < 50:
            self.ctl_in.link.flow(100)
        for rcv in self.data[0::2]:      # nothing is expected on them; never let them stall
            for _msg, dlv in take(rcv):
                dlv.update(Delivery.RELEASED)
                dlv.settle()
            if rcv.link.credit < 5:
                rcv.link.flow(10)

    def send(self, opcode: str, to: str, body: dict) -> None:
        """A pre-settled control message on the control link (priority 9)."""
        msg = Message(address=to, properties={"opcode": opcode}, body=body, priority=9)
        dlv = self.ctl_out.link.send(msg)
        dlv.settle()
        pump_for([self.conn], 0.01)

    def hello(self, seen, pv: int = 1) -> None:
        self.send("HELLO", HELLO_TO, {"id": self.id, "pv": pv, "area": "0",
                                      "instance": self.instance, "seen": list(seen)})

    def _answer(self, opcode, body) -> None:
        """Answer the requests a real router answers, so that the router can route to us."""
        if not isinstance(body, dict) or body.get("id") == self.id:
            return
        requester = body.get("id")
        if opcode == "LSR":
            self.send("LSU", f"amqp:/_topo/0/{requester}/qdrouter",
                      {"id": self.id, "pv": 1, "area": "0", "instance": self.instance,
                       "ls_seq": self.ls_seq,
                       "ls": {"id": self.id, "area": "0", "ls_seq": self.ls_seq,
                              "peers": {requester: 1}}})
        elif opcode == "MAR":
            self.send("MAU", f"amqp:/_topo/0/{requester}/qdrouter.ma",
                      {"id": self.id, "pv": 1, "area": "0", "mobile_seq": 0,
                       "exist": [], "hints": []})

    def messages(self, opcode: str) -> list:
        return [(msg, body) for msg, op, body in self.received if op == opcode]

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass


def _ir_listener(port: int) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            role: inter-router
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """


def _healthy(r) -> None:
    """The router process still runs and logged no Python traceback."""
    out = r.proc.output()
    assert r.proc.proc.poll() is None, out
    assert "Traceback" not in out, out


def _spread_connections(r, tag: str, at_least: int = 3, limit: int = 12) -> list:
    """At least ``at_least`` client connections to ``r``, opened until they are served by both of
    its two I/O workers (the kernel spreads accepted sockets across them; a worker of two mints
    odd connection ids, the other even ones: see DESIGN.md)."""
    conns: list = []
    try:
        while True:
            conns.append(BlockingConnection(r.url, timeout=TIMEOUT,
                                            container_id=f"{tag}-{len(conns)}"))
            if len(conns) < at_least:
                continue
            rows = qdstat(r.port, "-c")
            head = rows[0]
            ids = {row[head.index("container")]: int(row[head.index("id")]) for row in rows[1:]}
            parities = {ids[f"{tag}-{i}"] % 2 for i in range(len(conns))}
            if parities == {0, 1}:
                return conns
            assert len(conns) < limit, f"all {len(conns)} connections on one worker: {rows}"
    except BaseException:
        for c in conns:
            c.close()
        raise


@pytest.fixture
def net(router_factory):
    return Net(router_factory)


# --------------------------------------------------------------------------------------------
def test_fake_router_on_raw_links_protocol_version_hello_and_ra(net):
    # helloMaxAge 10 s: losing the link must remove the neighbour long before HELLOs expire
    x = net.add("X", router_attrs="helloMaxAgeSeconds: 10")
    fake = FakeRouter(net.ir_ports["X"])
    try:
        # the router greets us at once on its control link; answer nothing yet
        deadline = time.monotonic() + TIMEOUT
        while not fake.messages("HELLO"):
            assert time.monotonic() < deadline, f"no HELLO from the router: {fake.received}"
            fake.pump(0.1)
        msg, body = fake.messages("HELLO")[0]
        assert set(body) == {"id", "pv", "area", "instance", "seen"}, body
        assert body["id"] == "Router.X" and body["pv"] == 1 and body["area"] == "0"
        assert isinstance(body["instance"], int) and body["instance"] > 0
        assert list(body["seen"]) == []
        assert msg.address == HELLO_TO
        assert _annotation(msg, "x-opt-qd.ingress") == "0/Router.X", msg.annotations
        assert list(_annotation(msg, "x-opt-qd.trace") or []) == ["0/Router.X"], msg.annotations

        # (a) protocol version 2: ignored. A MAR from a router the protocol does not know is
        # an error line (1.19's mobile sync checks the sender before its version); HELLOs at
        # version 2 are logged once for that router id and change nothing
        fake.send("MAR", "amqp:/_topo/0/Router.X/qdrouter.ma",
                  {"id": FAKE, "pv": 2, "area": "0", "have_seq": 0})
        x.proc.wait_for_line(f"Received MAR from an unknown router with router id {FAKE}",
                             timeout=15)
        for _ in range(3):
            fake.hello(["Router.X"], pv=2)
            fake.pump(0.5)
        x.proc.wait_for_line("protocol version 2", timeout=15)
        warnings = [line for line in x.proc.output().splitlines() if "protocol version 2" in line]
        assert len(warnings) == 1, warnings
        assert "(warning)" in warnings[0] and "HELLO" in warnings[0], warnings
        assert FAKE in warnings[0] and "Ignoring" in warnings[0], warnings
        assert x.proc.proc.poll() is None
        assert FAKE not in nodes(x)
        fake.pump(0.2)
        assert all(FAKE not in body["seen"] for _msg, body in fake.messages("HELLO"))

        # (b) protocol version 1, two-way: the router lists us in seen and as a neighbour
        first_v1 = len(fake.received)

        def hello_and_pump(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                fake.hello(["Router.X"])
                fake.pump(0.25)

        deadline = time.monotonic() + TIMEOUT
        while not any(FAKE in body["seen"] for _m, body in fake.messages("HELLO")):
            assert time.monotonic() < deadline, f"router never saw us: {fake.received[-5:]}"
            hello_and_pump(0.5)
        deadline = time.monotonic() + TIMEOUT
        while True:
            hello_and_pump(0.3)
            known = nodes(x)
            if FAKE in known:
                break
            assert time.monotonic() < deadline, f"qdstat -n: {known}"
        hello_and_pump(0.3)
        assert x.proc.proc.poll() is None

        # the RA the router floods after the topology change reaches us too
        deadline = time.monotonic() + TIMEOUT
        while not fake.messages("RA"):
            assert time.monotonic() < deadline, f"no RA: {[op for _m, op, _b in fake.received]}"
            hello_and_pump(0.3)
        msg, body = fake.messages("RA")[0]
        assert msg.address == RA_TO
        assert set(body) == {"id", "pv", "area", "instance", "ls_seq", "mobile_seq"}, body
        assert body["id"] == "Router.X" and body["pv"] == 1 and body["area"] == "0"
        assert all(isinstance(body[k], int) for k in ("instance", "ls_seq", "mobile_seq"))
        assert body["ls_seq"] >= 1
        # every control message from the router carries the router annotations
        for msg, _op, _body in fake.received[first_v1:]:
            assert _annotation(msg, "x-opt-qd.ingress") == "0/Router.X", msg.annotations
            assert list(_annotation(msg, "x-opt-qd.trace") or []) == ["0/Router.X"]
        hello = fake.messages("HELLO")[-1][1]
        assert list(hello["seen"]) == [FAKE] and hello["instance"] == \
            fake.messages("HELLO")[0][1]["instance"]
        # our link state answer (LSU) makes us a full neighbour at cost 1
        row = wait_for(lambda: (hello_and_pump(0.2), nodes(x).get(FAKE))[1], timeout=15)
        assert row["cost"] == "1", row
        lsr_msg, lsr = fake.messages("LSR")[0]
        assert lsr_msg.address == f"amqp:/_topo/0/{FAKE}/qdrouter"
        assert set(lsr) == {"id", "pv", "area"} and lsr["id"] == "Router.X", lsr
        # (c) now a known router: a MAR at version 2 is ignored with one ROUTER_MA warning
        for _ in range(2):
            fake.send("MAR", "amqp:/_topo/0/Router.X/qdrouter.ma",
                      {"id": FAKE, "pv": 2, "area": "0", "have_seq": 0})
            hello_and_pump(0.3)
        x.proc.wait_for_line("Received MAR at protocol version 2", timeout=15)
        hello_and_pump(0.5)
        ma = [line for line in x.proc.output().splitlines()
              if "Received MAR at protocol version 2" in line]
        assert len(ma) == 1 and "ROUTER_MA (warning)" in ma[0] and FAKE in ma[0], ma
        assert x.proc.proc.poll() is None
    finally:
        fake.close()
    # losing the control link removes the neighbour at once (well before helloMaxAge, 10 s)
    wait_for(lambda: nodes(x).get(FAKE, {"cost": ""})["cost"] == "", timeout=6.0,  # no cost
             what="Router.Fake no longer a neighbour")
    _healthy(x)


# --------------------------------------------------------------------------------------------
def test_lost_path_returns_unsettled_deliveries_with_an_outcome(net):
    """A --1-> B; B dies (SIGKILL) while holding three unsettled deliveries from A's sender."""
    net.line("B", "A")
    rc = BlockingConnection(net["B"].url, timeout=TIMEOUT)
    sc = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver("lost.q", credit=10)
        remote_seen(net["A"], "lost.q")
        snd = sc.create_sender("lost.q")
        sent = [snd.link.send(Message(body=f"l{i}")) for i in range(3)]
        pump_until([rc, sc], lambda: len(rcv.fetcher.incoming) == 3, timeout=TIMEOUT,
                   what="the receiver on B holds 3 deliveries")
        assert not any(d.remote_state for d in sent)
        killed = time.monotonic()
        net["B"].proc.proc.kill()
        pump_until([sc], lambda: all(d.remote_state and d.settled for d in sent),
                   timeout=3 + 5, what="outcomes back after B died")
        took = time.monotonic() - killed
        states = [d.remote_state for d in sent]
        assert all(s in (Delivery.MODIFIED, Delivery.RELEASED) for s in states), states
        assert net["A"].proc.proc.poll() is None
        assert took < 3 + 5
        # A routes no more to B (B stays listed, without cost, until its link state ages out)
        wait_for(lambda: nodes(net["A"]).get("Router.B", {"cost": ""})["cost"] == "",
                 timeout=10, what="B unreachable from A")
        # ... and still serves: a local receiver takes over the address
        local = sc.create_receiver("lost.q", credit=10)
        got, outcomes = transfer([sc], snd, ["after"], [local])
        assert got == [["after"]] and outcomes == [Delivery.ACCEPTED]
        _healthy(net["A"])
    finally:
        sc.close()
        rc.timeout = 2          # its router may be dead: do not wait long for a CLOSE
        try:
            rc.close()
        except Exception:
            pass


# --------------------------------------------------------------------------------------------
def test_two_workers_each_anycast_and_multicast_exactly_once(net):
    net.line("B", "A", workers=2)
    conns = {"A": _spread_connections(net["A"], "w2a")}
    try:
        conns["B"] = _spread_connections(net["B"], "w2b")
    except BaseException:
        for c in conns["A"]:
            c.close()
        raise
    every = conns["A"] + conns["B"]
    try:
        # multicast: a receiver on every connection of both routers, senders on both routers
        mc = [c.create_receiver("multicast.w2", credit=100) for c in every]
        remote_seen(net["A"], "multicast.w2")
        remote_seen(net["B"], "multicast.w2")
        snd_a = conns["A"][1].create_sender("multicast.w2")
        snd_b = conns["B"][2].create_sender("multicast.w2")
        bodies = [f"a{i}" for i in range(5)]
        sent = [snd_a.link.send(Message(body=b)) for b in bodies]
        bodies_b = [f"b{i}" for i in range(5)]
        sent += [snd_b.link.send(Message(body=b)) for b in bodies_b]
        got = collect(every, mc, expect=len(mc) * 10, timeout=TIMEOUT, idle=IDLE)
        for g in got:
            assert sorted(g) == sorted(bodies + bodies_b), got
        pump_until(every, lambda: all(d.remote_state for d in sent), what="multicast outcomes")
        assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * 10

        # anycast both ways: receivers on one router's connections, senders on the other's
        for src, dst in (("A", "B"), ("B", "A")):
            address = f"w2.any.{dst}"
            rcvs = [c.create_receiver(address, credit=100) for c in conns[dst]]
            remote_seen(net[src], address)
            senders = [c.create_sender(address) for c in conns[src]]
            sent = []
            for j, s in enumerate(senders):
                sent += [s.link.send(Message(body=f"{src}{j}.{i}")) for i in range(8)]
            got = collect(every, rcvs, expect=len(sent), timeout=TIMEOUT, idle=IDLE)
            flat = [b for g in got for b in g]
            want = [f"{src}{j}.{i}" for j in range(len(senders)) for i in range(8)]
            assert sorted(flat) == sorted(want), got
            pump_until(every, lambda: all(d.remote_state for d in sent), what="anycast outcomes")
            assert {d.remote_state for d in sent} == {Delivery.ACCEPTED}
        for n in "AB":
            _healthy(net[n])
            net[n].proc.wait_for_line("Operational, 2 Threads", timeout=1)
    finally:
        for c in every:
            c.close()


# --------------------------------------------------------------------------------------------
def test_duplicate_router_id_is_logged_critical_and_survived(router_factory):
    port = free_port()
    first = router_factory(router_id="Router.Dup", mode="interior", extra=_ir_listener(port))
    # the instance is the boot time in seconds: make sure the two differ
    now = time.time()
    time.sleep(int(now) + 1.05 - now)
    second = router_factory(router_id="Router.Dup", mode="interior", extra=textwrap.dedent(f"""
        connector {{
            name: to-twin
            host: 127.0.0.1
            port: {port}
            role: inter-router
        }}
        """))
    routers = (first, second)
    deadline = time.monotonic() + 10
    while not any("Duplicate ID" in r.proc.output() for r in routers):
        assert time.monotonic() < deadline, "\n---\n".join(r.proc.output() for r in routers)
        assert all(r.proc.proc.poll() is None for r in routers)
        time.sleep(0.2)
    lines = [line for r in routers for line in r.proc.output().splitlines()
             if "Duplicate ID" in line]
    assert all("(critical)" in line and "Router.Dup" in line for line in lines), lines
    time.sleep(2.5)   # a few more HELLO rounds: still running, logged once per router
    for r in routers:
        _healthy(r)
        assert r.proc.output().count("Duplicate ID") <= 1, r.proc.output()
        assert set(nodes(r)) == {"Router.Dup"}
