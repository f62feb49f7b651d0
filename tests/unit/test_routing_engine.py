"""The RoutingEngine facade driven by hand with a fake clock. No processes, no sockets.

    A ==L(cost 4)== B         two engines, wired by hand (the simulation test wires many)
"""
from __future__ import annotations

from agent.interior import topology_messages
from agent.routing import Log, RemoteAddressAdded, RoutingEngine, RouterState, Send, Topology
from agent.routing.messages import Hello, encode
from router_core.routetable import RouteTable


def pump(engines, links, until, step=0.05, start=0.0):
    """Tick both engines every ``step`` and deliver every Send at once (by link or by id)."""
    effects = {rid: [] for rid in engines}
    t = start
    while t <= until:
        for rid, eng in engines.items():
            queue = list(eng.tick(t)) if t >= eng.next_deadline() else []
            while queue:
                effect = queue.pop(0)
                effects[rid].append(effect)
                if not isinstance(effect, Send):
                    continue
                for other_id, other in engines.items():
                    if other_id == rid:
                        continue
                    if effect.via_link is not None or f"/{other_id}/" in effect.to or "/all/" in effect.to:
                        link = links[(rid, other_id)] if effect.via_link is not None else None
                        for reply in other.receive(link, effect.opcode, effect.body, t):
                            effects[other_id].append(reply)
                            if isinstance(reply, Send):
                                for back in eng.receive(None, reply.opcode, reply.body, t):
                                    queue.append(back)
        t = round(t + step, 6)
    return effects


def pair(**kw):
    a = RoutingEngine("A", instance=100, **kw)
    b = RoutingEngine("B", instance=200, **kw)
    a.link_up("LA", 4)
    b.link_up("LB", 4)
    return {"A": a, "B": b}, {("A", "B"): "LB", ("B", "A"): "LA"}


def test_two_routers_become_neighbours_and_report_the_topology_the_core_routes_by():
    engines, links = pair()
    effects = pump(engines, links, until=3.0)
    reports = [e for e in effects["A"] if isinstance(e, Topology)]
    assert reports[0].full and [s.router for s in reports[0].states] == ["A"]   # first: full
    assert not any(r.full for r in reports[1:])
    core = RouteTable("A")                        # A's core process
    for report in reports:
        for msg in topology_messages(report, {"LA": 7}.get):
            core.apply(msg)
    update, reachable = core.compute(1_700_000_000.0)
    assert update.next_hop == {"B": "B"} and update.cost == {"B": 4}
    assert update.neighbours == {"B": 7} and reachable.routers == ["B"]
    last = {s.router: s for r in reports for s in r.states}
    assert last["B"] == RouterState("B", 200, 1, 1, last["B"].ls_seq, {"A": 4}, {})
    assert last["A"].conns == {"B": "LA"} and last["A"].peers == {"B": 4}
    view = core.view()
    assert view[0]["nextHop"] == "(self)" and view[0]["linkState"] == ["B"]
    assert view[0]["instance"] == 100 and view[0]["protocolVersion"] == 1
    assert view[1] == {"id": "B", "protocolVersion": 1, "instance": 200, "linkState": ["A"],
                       "nextHop": None, "validOrigins": [], "address": "amqp:/_topo/0/B",
                       "routerLink": "7", "cost": 4, "index": 1,
                       "lastTopoChange": 1_700_000_000}


def test_local_address_reaches_the_other_router():
    engines, links = pair()
    pump(engines, links, until=3.0)
    engines["A"].add_local("M0orders", 3)
    effects = pump(engines, links, until=5.0, start=3.05)
    assert RemoteAddressAdded("M0orders", "A", 3) in effects["B"]
    assert engines["B"].remote_addresses() == {"A": {"M0orders": 3}}


def test_mau_goes_before_the_ra_announcing_its_seq():
    a = RoutingEngine("A", instance=1)
    a.tick(0.0)
    a.add_local("M0x", 2)
    out = [e for e in a.tick(1.0) if isinstance(e, Send)]
    assert [s.opcode for s in out][-2:] == ["MAU", "RA"]
    assert out[-1].body["mobile_seq"] == 1


def test_a_router_that_just_became_reachable_gets_an_ra_before_any_mau():
    """1.19 sends its differential MAU on its own tick, so a router that has just become a
    neighbour has had HELLO and RA first. Here the core floods to the routers it has a route
    to: the first flooded message after a router becomes reachable is an RA (with the seq it
    can ask a MAR for), then the MAU, then the RA announcing the MAU's seq."""
    engines, links = pair()
    pump(engines, links, until=3.0)
    a = engines["A"]
    a.tick(3.1)
    a.set_reachable([])                       # B lost, then back (e.g. a new connection)
    a.add_local("M0x", 2)
    a.set_reachable(["B"])
    assert a.next_deadline() <= 3.1           # the RA it is owed goes at the next tick
    # a tick when the MAU is due too: RA first
    out = [e for e in a.tick(max(a.mobile.next_deadline(), 3.15))
           if isinstance(e, Send) and "/all/" in e.to]
    assert [s.opcode for s in out] == ["RA", "MAU", "RA"]
    assert out[0].body["mobile_seq"] == out[1].body["mobile_seq"] - 1
    # nothing owed once sent: the next MAU goes with just the RA announcing it
    a.add_local("M0y", 2)
    later = [e for e in a.tick(a.next_deadline() + 1.5) if isinstance(e, Send)
             and "/all/" in e.to]
    assert [s.opcode for s in later] == ["MAU", "RA"]


def test_protocol_version_2_is_logged_once_per_router_and_ignored():
    a = RoutingEngine("A", instance=1)
    body = {"id": "Z", "pv": 2, "ls_seq": 1, "mobile_seq": 1}
    first = a.receive(None, "RA", body, 0.0)
    assert len(first) == 1 and first[0].level == "warning" and "Z" in first[0].text
    assert a.receive(None, "RA", body, 1.0) == []
    assert a.nodes.nodes == {}


def test_malformed_message_is_logged_not_raised():
    a = RoutingEngine("A", instance=1)
    (log,) = a.receive(None, "RA", {"id": "Z"}, 0.0)
    assert isinstance(log, Log) and log.level == "error"


def test_duplicate_router_id_is_a_critical_log_line():
    a = RoutingEngine("A", instance=1)
    a.link_up("L", 1)
    (log,) = a.receive("L", *encode(Hello("A", instance=2, seen=("A",))), 0.0)
    assert log.level == "critical" and "Duplicate ID - A" in log.text


def test_neighbour_restart_flushes_its_addresses():
    engines, links = pair()
    pump(engines, links, until=3.0)
    engines["A"].add_local("M0x", 2)
    pump(engines, links, until=5.0, start=3.05)
    assert engines["B"].remote_addresses() == {"A": {"M0x": 2}}
    restarted = RoutingEngine("A", instance=101)
    restarted.link_up("LA", 4)
    engines["A"] = restarted
    effects = pump(engines, links, until=8.0, start=5.05)
    logs = [e.text for e in effects["B"] if isinstance(e, Log)]
    assert any("Detected Restart of Router Node A" in t for t in logs)
    assert engines["B"].remote_addresses() == {}
    assert engines["B"].nodes.nodes["A"].instance == 101


def test_mau_from_unknown_router_is_dropped():
    a = RoutingEngine("A", instance=1)
    (log,) = a.receive(None, "MAU", {"id": "Q", "mobile_seq": 1, "add": ["M0x"], "del": []}, 0.0)
    assert "unknown router" in log.text


def test_next_deadline_is_immediate_after_a_change():
    a = RoutingEngine("A", instance=1)
    a.link_up("L", 1)
    assert a.next_deadline() == float("-inf")
    a.tick(0.0)
    assert 0.0 < a.next_deadline() <= 1.0
    a.receive("L", *encode(Hello("B", instance=2, seen=("A",))), 0.3)
    assert a.next_deadline() <= 0.3


def test_mau_and_mar_at_another_protocol_version_are_ignored_entirely():
    """1.19's mobile_sync drops a MAU/MAR whose pv is above 1 from a known router (one ROUTER_MA
    warning per router, shared by both opcodes) and answers nothing; an unknown sender is the
    usual ROUTER_MA error."""
    from proton import symbol
    engines, links = pair()
    pump(engines, links, until=3.0)
    a = engines["A"]
    a.add_local("M0orders", 3)
    pump(engines, links, until=4.0, start=3.05)
    mar = {symbol("id"): "B", symbol("pv"): 2, symbol("area"): "0", symbol("have_seq"): 0}
    first = a.receive(None, "MAR", mar, 4.1)
    assert [(e.level, e.module, e.text) for e in first] == [
        ("warning", "ROUTER_MA", "Received MAR at protocol version 2 from B.  Ignoring.")]
    mau = {symbol("id"): "B", symbol("pv"): 2, symbol("area"): "0", symbol("mobile_seq"): 9,
           symbol("add"): ["M0x"], symbol("del"): []}
    assert a.receive(None, "MAU", mau, 4.2) == []      # logged once per router, MAU or MAR
    assert a.receive(None, "MAR", mar, 4.3) == []
    assert "B" not in a.remote_addresses() or "M0x" not in a.remote_addresses()["B"]
    # the same MAR at version 1 is answered with an absolute MAU
    answered = a.receive(None, "MAR", dict(mar, **{symbol("pv"): 1}), 4.4)
    assert [e.opcode for e in answered if isinstance(e, Send)] == ["MAU"]
    (log,) = a.receive(None, "MAR", dict(mar, **{symbol("id"): "Q"}), 4.5)
    assert (log.level, log.module) == ("error", "ROUTER_MA")
    assert log.text == "Received MAR from an unknown router with router id Q"
