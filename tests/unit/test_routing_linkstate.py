"""Link-state engine: own link state, RA schedule (stable/flux), RA/LSU handling, expiry.
Fake clock (plain floats). No processes, no sockets.

    A -1- B        A is me; B is a neighbour
"""
from __future__ import annotations

from agent.routing.linkstate import LinkStateEngine
from agent.routing.messages import LSU, RA, RA_ADDRESS, LinkState, decode


def engine(**kw):
    return LinkStateEngine("A", instance=7, ra_interval=30.0, ra_interval_flux=4.0,
                           remote_ls_max_age=60.0, **kw)


def test_change_bumps_seq_once_per_commit():
    ls = engine()
    ls.set_peer("B", 1)
    ls.set_peer("C", 2)
    assert ls.commit(5.0) is True and ls.ls_seq == 1
    assert ls.commit(5.1) is False
    ls.set_peer("B", 1)                     # no change
    assert ls.commit(5.2) is False
    ls.del_peer("C")
    assert ls.commit(6.0) is True and ls.ls_seq == 2
    assert ls.my_link_state() == LinkState("A", "0", 2, {"B": 1})


def test_ra_interval_is_flux_after_a_change_then_stable():
    ls = engine()
    assert ls.next_ra_at() == float("-inf")          # first RA at once
    send = ls.ra(mobile_seq=0, now=0.0)
    assert send.to == RA_ADDRESS
    assert decode(send.opcode, send.body) == RA("A", 1, "0", 7, 0, 0)
    assert ls.next_ra_at() == 30.0                   # stable
    ls.set_peer("B", 1)
    ls.commit(1.0)                                   # topology changed at t=1: flux until t=9
    ls.ra(0, 1.0)
    assert ls.next_ra_at() == 5.0
    ls.ra(0, 5.0)
    assert ls.next_ra_at() == 9.0                    # 9 - 1 <= 2 x 4: still flux
    ls.ra(0, 9.0)
    assert ls.next_ra_at() == 39.0                   # 13 - 1 > 8: stable again


def test_ra_asks_for_newer_link_state_only():
    ls = engine()
    assert ls.handle_ra(RA("B", ls_seq=1), 1.0) is True
    assert ls.handle_lsu(LSU("B", ls_seq=1, ls=LinkState("B", "0", 1, {"A": 1})), 1.1) is True
    assert ls.handle_ra(RA("B", ls_seq=1), 2.0) is False
    assert ls.handle_lsu(LSU("B", ls_seq=1, ls=LinkState("B", "0", 1, {})), 2.1) is False
    assert ls.collection() == {"A": {}, "B": {"A": 1}}


def test_lsr_answered_with_my_lsu_to_the_requester():
    ls = engine()
    ls.set_peer("B", 3)
    ls.commit(0.0)
    send = ls.lsu_for("B")
    assert send.to == "amqp:/_topo/0/B/qdrouter"
    assert decode("LSU", send.body) == LSU("A", 1, "0", 7, 1, LinkState("A", "0", 1, {"B": 3}))


def test_remote_link_state_expires_unless_refreshed_by_ra():
    ls = engine()
    ls.handle_lsu(LSU("B", ls_seq=1, ls=LinkState("B", "0", 1, {"C": 1})), 0.0)
    ls.handle_ra(RA("B", ls_seq=1), 30.0)            # refresh
    assert ls.expire(89.0) is False
    assert ls.expire(90.0) is True
    assert ls.collection() == {"A": {}}
    assert ls.handle_ra(RA("B", ls_seq=1), 91.0) is True     # seq back to 0: ask again


def test_restart_drops_link_state():
    ls = engine()
    ls.handle_lsu(LSU("B", ls_seq=9, ls=LinkState("B", "0", 9, {"C": 1})), 0.0)
    assert ls.drop("B", 1.0) is True
    assert ls.handle_lsu(LSU("B", ls_seq=1, ls=LinkState("B", "0", 1, {"D": 1})), 1.1) is True
    assert ls.named() == {"D"}
