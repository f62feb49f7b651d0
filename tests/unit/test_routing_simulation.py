"""Whole networks of RoutingEngines wired through an in-memory bus (``routing_sim.Network``) and a
fake clock: they must converge to the routes a global ``compute_routes`` gives on the true
topology, re-converge after a router dies, re-learn a restarted router, and tell a late joiner
every mobile address. No processes, no sockets. See ``routing_sim`` for the bus's
simplifications (floods reach the sender's connected component once per router).
"""
from __future__ import annotations

import random


from routing_sim import Network, random_topology
from router_core.pathcomp_select import get_path_computer

HELLO_MAX_AGE = 3.0
RA_FLUX = 4.0


def build(edges, n=None, **kw) -> Network:
    net = Network(**kw)
    names = sorted({x for a, b, _ in edges for x in (a, b)})
    for i, rid in enumerate(names):
        net.add_router(rid, instance=1000 + i)
    for a, b, cost in edges:
        net.connect(a, b, cost)
    return net


def converge(net: Network, timeout: float) -> float:
    expected = net.expected_routes()
    took = net.run_until(lambda: not net.mismatches(expected), timeout)
    assert took is not None, f"not converged in {timeout}s: {net.mismatches(expected)[:10]}"
    return took


def assert_valid_origins(net: Network) -> None:
    compute = get_path_computer()
    states = net.true_link_states()
    for rid in net.alive:
        assert dict(net.tables[rid].routes.valid_origins) == \
            compute(rid, states).valid_origins, rid


def test_line():
    """A -1- B -2- C -1- D -3- E"""
    net = build([("A", "B", 1), ("B", "C", 2), ("C", "D", 1), ("D", "E", 3)])
    assert converge(net, 15.0) <= 10.0
    assert_valid_origins(net)
    assert net.tables["A"].routes.next_hop == {"B": "B", "C": "B", "D": "B", "E": "B"}
    assert net.tables["A"].routes.cost == {"B": 1, "C": 3, "D": 4, "E": 7}
    view = {row["id"]: row for row in net.tables["A"].view()}
    assert view["E"]["nextHop"] == "B" and view["E"]["cost"] == 7 and view["E"]["linkState"] == ["D"]


def test_ring_and_link_loss():
    """
        R0 - R1 - R2 - R3
        |              |
        R7 - R6 - R5 - R4      all costs 1; then R0-R1 is cut (clean link loss)
    """
    ids = [f"R{i}" for i in range(8)]
    net = build([(ids[i], ids[(i + 1) % 8], 1) for i in range(8)])
    converge(net, 15.0)
    assert_valid_origins(net)
    assert net.tables["R0"].routes.next_hop["R4"] == "R1"   # tie: lower id wins
    net.disconnect("R0", "R1")
    took = converge(net, 15.0)
    assert took <= RA_FLUX + 1.0                   # no HELLO expiry needed: the link went down
    assert net.tables["R0"].routes.next_hop["R1"] == "R7"


def test_random_200_converge_then_reconverge_after_a_router_dies():
    """~200 routers: a random spanning tree plus 200 random links, costs 1..3.

    Routes are recomputed at most once a second (``route_holdoff=1``), as 1.x does in its
    one-second tick; that also keeps this test's CPU modest."""
    rng = random.Random(7)
    net = build(random_topology(200, 200, rng), seed=7, route_holdoff=1.0)
    assert converge(net, 40.0) <= 30.0
    victim = max(net.adjacent, key=lambda r: len(net.adjacent[r]))    # the busiest router
    net.kill(victim)                                # silent: only HELLO expiry notices
    took = converge(net, 30.0)
    assert took <= HELLO_MAX_AGE + 1.0 + 3 * RA_FLUX
    for rid in net.alive:
        assert victim not in net.tables[rid].routes.next_hop


def test_restarted_router_is_relearned():
    """
        A - B - C - D - E - F      (line, costs 1); D restarts with a new instance and its
                    |              address M0d, announced before the restart, is withdrawn
                    G
    """
    net = build([("A", "B", 1), ("B", "C", 1), ("C", "D", 1), ("D", "E", 1), ("E", "F", 1),
                 ("D", "G", 1)])
    net.engines["D"].add_local("M0d", 2)
    converge(net, 15.0)
    net.run(3.0)
    assert all(net.addresses[r].get("M0d") == {"D"} for r in net.alive if r != "D")
    net.kill("D")
    net.run(1.0)                                    # back before HELLO expiry
    net.restart("D", instance=5000)
    converge(net, 15.0)
    net.run(2.0)
    for rid in net.alive - {"D"}:
        rows = {row["id"]: row for row in net.tables[rid].view()}
        assert rows["D"]["instance"] == 5000, rid
        assert "M0d" not in net.addresses[rid], rid
    assert any("Detected Restart of Router Node D" in log.text for _, log in net.logs)


def test_late_joiner_learns_every_mobile_address():
    """
        R000..R011   a random connected graph of 12 routers, each with local addresses;
                      then J joins, attached to R005 only, and must learn them all (MAR ->
                      absolute MAU); an address added after it joined arrives differentially.
    """
    rng = random.Random(3)
    net = build(random_topology(12, 8, rng), seed=3)
    for i, rid in enumerate(sorted(net.engines)):
        for k in range(i % 3 + 1):
            net.engines[rid].add_local(f"M0{rid}.{k}", k)
    converge(net, 20.0)
    net.run(3.0)
    expected = {f"M0{rid}.{k}": {rid} for i, rid in enumerate(sorted(net.engines))
                for k in range(i % 3 + 1)}
    net.add_router("J", instance=9999)
    net.connect("J", "R005", 2)
    converge(net, 20.0)
    took = net.run_until(lambda: net.addresses["J"] == expected, 15.0)
    assert took is not None, (net.addresses["J"], expected)
    net.engines["R000"].add_local("M0late", 1)
    net.run(2.0)
    assert net.addresses["J"]["M0late"] == {"R000"}
    assert net.engines["J"].remote_addresses()["R000"]["M0late"] == 1
    assert all("M0J" not in a for a in net.addresses.values())
