"""HELLO protocol with a fake clock (plain floats). No processes, no sockets.

    A ==L1(cost 2)== B        A and B are the routers; L1/L2 are A's control links
    A ==L2(cost 5)== B        (a parallel connection), C is another router on link L3.
    A ==L3(cost 1)== C
"""
from __future__ import annotations

from agent.routing.effects import Send
from agent.routing.hello import (DuplicateRouterId, HelloEngine, InstanceSeen, NeighbourDown,
                                 NeighbourUp)
from agent.routing.messages import HELLO_ADDRESS, Hello, decode


def sends(events):
    return [e for e in events if isinstance(e, Send)]


def neighbour_events(events):
    return [e for e in events if isinstance(e, (NeighbourUp, NeighbourDown))]


def test_hello_on_every_link_each_interval_seen_lists_heard_routers():
    a = HelloEngine("A", instance=10)
    a.link_up("L1", 2)
    a.link_up("L3", 1)
    assert a.next_deadline() == float("-inf")          # a new link is greeted at once
    out = sends(a.tick(0.0))
    assert [(s.to, s.via_link) for s in out] == [(HELLO_ADDRESS, "L1"), (HELLO_ADDRESS, "L3")]
    assert decode(out[0].opcode, out[0].body) == Hello("A", 1, "0", 10, ())
    a.receive("L1", Hello("B", instance=20, seen=()), 0.5)
    assert a.next_deadline() == 1.0
    assert a.tick(0.9) == []
    out = sends(a.tick(1.0))
    assert decode("HELLO", out[0].body).seen == ("B",)
    assert sends(a.tick(3.4)) and decode("HELLO", sends(a.tick(4.4))[0].body).seen == ()


def test_two_way_hello_makes_a_neighbour_at_the_link_cost():
    a = HelloEngine("A", instance=10)
    a.link_up("L1", 2)
    assert a.receive("L1", Hello("B", instance=20, seen=()), 0.0) == []
    events = a.receive("L1", Hello("B", instance=20, seen=("A",)), 1.0)
    assert events == [NeighbourUp("B", "L1", 2), InstanceSeen("B", 20, 1)]
    assert a.receive("L1", Hello("B", instance=20, seen=("A",)), 2.0) == [InstanceSeen("B", 20, 1)]


def test_neighbour_expires_after_max_age_without_refresh():
    a = HelloEngine("A", instance=10, hello_interval=1.0, hello_max_age=3.0)
    a.link_up("L1", 2)
    a.receive("L1", Hello("B", instance=20, seen=("A",)), 1.0)
    assert neighbour_events(a.tick(3.9)) == []
    assert neighbour_events(a.tick(4.0)) == [NeighbourDown("B")]
    assert a.neighbours == {}


def test_losing_the_link_removes_the_neighbour_at_once():
    a = HelloEngine("A", instance=10)
    a.link_up("L1", 2)
    a.receive("L1", Hello("B", instance=20, seen=("A",)), 1.0)
    assert a.link_down("L1") == [NeighbourDown("B")]
    assert a.receive("L1", Hello("B", instance=20, seen=("A",)), 1.1) == []   # link is gone


def test_parallel_links_prefer_the_cheaper_and_fail_over():
    a = HelloEngine("A", instance=10)
    a.link_up("L1", 2)
    a.link_up("L2", 5)
    assert neighbour_events(a.receive("L2", Hello("B", 0, seen=("A",)), 1.0)) == [
        NeighbourUp("B", "L2", 5)]
    assert neighbour_events(a.receive("L1", Hello("B", 0, seen=("A",)), 1.1)) == [
        NeighbourUp("B", "L1", 2)]
    assert neighbour_events(a.receive("L2", Hello("B", 0, seen=("A",)), 1.2)) == []
    assert a.link_down("L1") == [NeighbourUp("B", "L2", 5)]


def test_duplicate_router_id_is_reported_once_and_ignored():
    a = HelloEngine("A", instance=10)
    a.link_up("L1", 1)
    assert a.receive("L1", Hello("A", instance=10, seen=()), 1.0) == []    # my own echo
    assert a.receive("L1", Hello("A", instance=99, seen=("A",)), 1.0) == [DuplicateRouterId("A", 99)]
    assert a.receive("L1", Hello("A", instance=99, seen=("A",)), 2.0) == []
    assert a.neighbours == {} and a.heard == {}


def test_hello_on_unknown_link_is_ignored():
    a = HelloEngine("A", instance=10)
    assert a.receive("nope", Hello("B", 0, seen=("A",)), 1.0) == []
