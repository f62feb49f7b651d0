"""Mobile addresses cross each hop once, and a lost MAU costs one re-sync, not one per RA.

A router that misses a differential MAU asks the sender for its whole list (MAR -> absolute
MAU). While that answer is on its way, the sender's RAs (one a second while its addresses
change) advertise a seq the asker does not hold yet; asking again for each of them fetched the
whole list again each time: megabytes at 100,000 addresses, queued on the control link before
the HELLOs. Counted here, with a fake clock (no processes, no sockets): MARs sent, absolute MAUs
and addresses carried.

    A ---- B ---- C      A gains addresses in batches; one of its MAUs is lost on the way
"""
from __future__ import annotations

from agent.routing import RoutingEngine, Send
from agent.routing.messages import ABSOLUTE, MAR, MAU, RA, Hello, decode, encode
from agent.routing.mobile import MAR_RETRY
from routing_sim import Network


def sent(effects, cls):
    return [decode(e.opcode, e.body) for e in effects
            if isinstance(e, Send) and isinstance(decode(e.opcode, e.body), cls)]


def neighbour_b():
    """Engine B with A a two-way neighbour over link "L" that announced mobile_seq 1."""
    b = RoutingEngine("B", instance=2)
    b.link_up("L", 1)
    b.tick(0.0)
    b.receive("L", *encode(Hello("A", instance=1, seen=("B",))), 0.1)
    b.set_reachable(["A"])
    b.tick(0.1)
    b.receive(None, *encode(MAU("A", mobile_seq=1, add=("M0a1",), hints=(3,))), 0.2)
    b.receive(None, *encode(RA("A", instance=1, ls_seq=1, mobile_seq=1)), 0.2)
    b.tick(0.2)
    assert b.remote_addresses() == {"A": {"M0a1": 3}}
    return b


def test_an_unanswered_mar_is_not_repeated_for_every_ra():
    b = neighbour_b()
    # MAU 2 is lost: MAU 3 shows the gap and asks once
    out = b.receive(None, *encode(MAU("A", mobile_seq=3, add=("M0a3",), hints=(3,))), 1.0)
    assert sent(out, MAR) == [MAR("B", have_seq=1)]
    t, mars = 1.0, []
    for seq in range(3, 7):                       # A's RAs while the answer travels (4 s)
        t += 1.0
        hello = b.receive("L", *encode(Hello("A", instance=1, seen=("B",))), t)
        mars += sent(hello + b.receive(None, *encode(RA("A", instance=1, ls_seq=1,
                                                       mobile_seq=seq)), t) + b.tick(t), MAR)
        mars += sent(b.receive(None, *encode(MAU("A", mobile_seq=seq + 1, add=(f"M0a{seq + 1}",),
                                                 hints=(3,))), t), MAR)
    assert mars == []
    assert t < 1.0 + MAR_RETRY
    # the answer arrives: the set as of seq 7; the next gap asks again at once
    b.receive(None, *encode(MAU("A", mobile_seq=7, kind=ABSOLUTE, exist=("M0a1", "M0a7"),
                                hints=(3, 3))), t)
    assert b.remote_addresses() == {"A": {"M0a1": 3, "M0a7": 3}}
    out = b.receive(None, *encode(MAU("A", mobile_seq=9, add=("M0a9",), hints=(3,))), t)
    assert sent(out, MAR) == [MAR("B", have_seq=7)]


def test_a_lost_answer_is_asked_again_after_mar_retry_without_waiting_for_an_ra():
    b = neighbour_b()
    t = 1.0
    out = b.receive(None, *encode(RA("A", instance=1, ls_seq=1, mobile_seq=2)), t) + b.tick(t)
    assert sent(out, MAR) == [MAR("B", have_seq=1)]
    t += MAR_RETRY - 0.5
    b.receive("L", *encode(Hello("A", instance=1, seen=("B",))), t)
    assert sent(b.receive(None, *encode(RA("A", instance=1, ls_seq=1, mobile_seq=2)), t)
                + b.tick(t), MAR) == []
    assert b.next_deadline() <= 1.0 + MAR_RETRY
    t = 1.0 + MAR_RETRY                           # nothing arrives: the tick asks again
    b.receive("L", *encode(Hello("A", instance=1, seen=("B",))), t)
    assert sent(b.tick(t), MAR) == [MAR("B", have_seq=1)]
    assert sent(b.tick(t + 1.0), MAR) == []      # once per mar_retry
    b.receive(None, *encode(MAU("A", mobile_seq=2, kind=ABSOLUTE, exist=("M0a1",),
                                hints=(3,))), t + 1.0)
    assert b.next_deadline() > t + 1.0 + MAR_RETRY or sent(b.tick(t + 2 * MAR_RETRY), MAR) == []


def test_a_mar_from_a_router_without_a_route_back_is_answered_once_there_is_one():
    """The answer would be dropped by the core (no route to the asker yet, as at start-up),
    and the asker would wait ``mar_retry`` before asking again: it goes when a route is there."""
    a = RoutingEngine("A", instance=1)
    a.add_local("M0x", 3)
    a.tick(0.0)
    a.tick(1.0)                                   # the MAU of seq 1 (to nobody yet)
    a.receive(None, *encode(RA("C", instance=3, ls_seq=1, mobile_seq=0)), 1.1)
    assert sent(a.receive(None, *encode(MAR("C", have_seq=0)), 1.1) + a.tick(1.1), MAU) == []
    a.set_reachable(["C"])
    (answer,) = sent(a.tick(1.2), MAU)
    assert answer.kind == ABSOLUTE and answer.exist == ("M0x",)
    assert sent(a.tick(1.3), MAU) == []


def test_each_address_crosses_each_hop_once_plus_one_resync_for_a_lost_mau():
    """A gains 20,000 addresses, 500 every 0.25 s, over a slow network (a hop takes 0.5 s, a path
    carries 10,000 listed addresses a second: a MAR's answer takes seconds, over several of A's
    RAs); A's MAU 5 is lost. B and C each fetch A's list once."""
    net = Network(latency=0.5)
    for i, rid in enumerate("ABC"):
        net.add_router(rid, instance=1000 + i)
    net.connect("A", "B")
    net.connect("B", "C")
    net.run(12.0)                                 # neighbours, routes, the first RAs
    net.bandwidth = 10_000.0

    lost = []

    def lose_mau_5(sender, send):
        if (send.opcode == "MAU" and sender == "A" and send.message.mobile_seq == 5
                and send.message.kind != ABSOLUTE):
            lost.append(send.message)
            return True
        return False

    net.drop = lose_mau_5
    a = net.engines["A"]
    total = 20_000
    for batch in range(total // 500):
        for k in range(500):
            a.add_local(f"M0addr.{batch}.{k}", 3)
        net._schedule("A")
        net.run(0.25)
    everything = {f"M0addr.{b}.{k}" for b in range(total // 500) for k in range(500)}
    took = net.run_until(lambda: all(everything <= set(net.addresses[r]) for r in "BC"), 60.0)
    assert took is not None
    assert [m.kind for m in lost] == ["differential"]     # flooded: lost for B and for C
    for r in "BC":
        maus = [s.message for sender, to, s in net.carried
                if sender == "A" and to == r and s.opcode == "MAU"]
        absolute = [m for m in maus if m.kind == ABSOLUTE]
        mars = [s for sender, to, s in net.carried
                if sender == r and to == "A" and s.opcode == "MAR"]
        listed = sum(len(m.add) + len(m.delete) + len(m.exist) for m in maus)
        assert len(mars) == 1 and len(absolute) == 1, (r, len(mars), len(absolute))
        assert listed <= 2 * total, (r, listed)
