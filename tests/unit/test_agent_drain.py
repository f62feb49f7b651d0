"""The agent takes every batch waiting from the core before it ticks the routing engine.

An agent that was busy or starved of CPU for longer than ``helloMaxAgeSeconds`` finds its
neighbours' HELLOs waiting in its queue, behind other batches. Ticking after the first batch
expired those neighbours (a route flap, and the MAUs flooded meanwhile lost, each costing a
full re-sync of the sender's addresses) although their HELLOs were right there. The agent's
``_drain`` with a real ZeroMQ pair and an injected clock; no router processes.
"""
from __future__ import annotations

import zmq

from agent.controlplane import ControlPlane
from agent.interior import INPUT_TYPES, InteriorRouting, encode_control
from agent.routing.messages import HELLO_ADDRESS, Hello, application_properties, encode
from common import ipc
from common.log import RouterLog


def hello_from_a() -> ipc.ControlIn:
    opcode, body = encode(Hello("Router.A", instance=1, seen=("Router.B",)))
    return ipc.ControlIn(7, encode_control(HELLO_ADDRESS, application_properties(opcode), body))


def test_a_hello_queued_behind_other_batches_keeps_its_neighbour():
    b = InteriorRouting("Router.B", 2)
    b.handle(ipc.RouterLinkUp(7, 1, "Router.A"), 100.0)
    b.handle(hello_from_a(), 100.0)
    b.poll(100.0)
    assert "Router.A" in b.neighbours()
    ls_seq = b.engine.linkstate.ls_seq

    ctx = zmq.Context()
    plane = ControlPlane.__new__(ControlPlane)      # only what _drain uses
    plane.core = ctx.socket(zmq.PAIR)
    feeder = ctx.socket(zmq.PAIR)
    try:
        plane.core.bind("inproc://drain")
        feeder.connect("inproc://drain")
        plane.interior, plane.routing_state_path = b, None
        plane.outbox, plane.log = [], RouterLog()
        plane.handlers = {cls: plane._on_routing_input for cls in INPUT_TYPES}
        plane.clock = lambda: 104.5                 # 4.5 s since A's last HELLO was taken
        feeder.send_multipart(ipc.encode_batch(-1, [ipc.LocalAddress("M0q", True, 3)]))
        feeder.send_multipart(ipc.encode_batch(-1, [hello_from_a()]))
        assert plane.core.poll(5000)
        plane._drain()
        assert "Router.A" in b.neighbours()
        assert b.engine.linkstate.ls_seq == ls_seq    # never lost, so never re-announced
        assert b.engine.mobile.local == {"M0q": 3}    # the other batch was taken too
    finally:
        feeder.close(0)
        plane.core.close(0)
        ctx.term()


def test_the_routing_state_saved_for_a_restarted_agent_comes_back(tmp_path):
    """The state file (msgpack: saved after every MAU that changed what the core holds) gives a
    new agent of the router the addresses its predecessor held; a damaged file is a warning."""
    from agent.routing.messages import MAU
    old = InteriorRouting("Router.B", 2)
    old.engine.nodes.learn("Router.A")
    keys = tuple(f"M0k{i}" for i in range(5000))
    old.engine.receive_message(None, MAU("Router.A", mobile_seq=1, add=keys, hints=(2,) * 5000),
                               1.0)
    state = old.state_to_save(1.0)

    def plane_for(interior):
        plane = ControlPlane.__new__(ControlPlane)
        plane.spec, plane.interior, plane.log = {}, interior, RouterLog()
        plane.routing_state_path = str(tmp_path / "routing-state")
        return plane

    plane_for(old)._save_routing_state(state)
    new = InteriorRouting("Router.B", 2)
    plane_for(new)._restore_routing_state()
    assert new.remote_addresses() == {"Router.A": {k: 2 for k in keys}}
    assert new.engine.mobile.seq_of("Router.A") == 1
    (tmp_path / "routing-state").write_bytes(b"\xc1 not msgpack")
    damaged = plane_for(InteriorRouting("Router.B", 2))
    damaged._restore_routing_state()
    assert damaged.interior.remote_addresses() == {}
    assert any("routing state not restored" in entry[2] for entry in damaged.log.recent)


def _plane(tmp_path, interior):
    plane = ControlPlane.__new__(ControlPlane)
    plane.spec, plane.interior, plane.log = {}, interior, RouterLog()
    plane.routing_state_path = str(tmp_path / "routing-state")
    return plane


def _mau(router, seq, add=(), delete=()):
    from agent.routing.messages import MAU
    return MAU(router, mobile_seq=seq, add=tuple(add), delete=tuple(delete),
               hints=(2,) * len(add))


def _records(path) -> list:
    import msgpack
    with open(path, "rb") as f:
        return list(msgpack.Unpacker(f, raw=False, strict_map_key=False))


def test_a_save_after_a_mau_appends_that_maus_addresses_not_every_one_held(tmp_path):
    """Counted, not timed: with 5,000 addresses of Router.A held, a MAU adding 10 and deleting
    2 appends a journal record of those 12 changes; the file gives a new agent exactly the
    addresses held, and once the journal would outgrow the state it follows, the whole state
    is written again (one record)."""
    from agent import interior as interior_mod
    old = InteriorRouting("Router.B", 2)
    old.engine.nodes.learn("Router.A")
    plane = _plane(tmp_path, old)
    keys = [f"M0k{i}" for i in range(5000)]
    old._outputs(old.engine.receive_message(None, _mau("Router.A", 1, add=keys), 1.0))
    plane._save_routing_state(old.state_to_save(1.0))
    assert len(_records(plane.routing_state_path)) == 1       # the whole state first
    added = [f"M0new{i}" for i in range(10)]
    old._outputs(old.engine.receive_message(None, _mau("Router.A", 2, add=added,
                                                          delete=keys[:2]), 2.0))
    record = old.state_to_save(2.0)
    assert interior_mod.is_journal(record) and len(record["remote"]) == 12
    assert "remote" not in record["state"]["mobile"]
    plane._save_routing_state(record)
    assert len(_records(plane.routing_state_path)) == 2
    new = InteriorRouting("Router.B", 2)
    _plane(tmp_path, new)._restore_routing_state()
    assert new.remote_addresses() == old.remote_addresses()
    assert len(new.remote_addresses()["Router.A"]) == 5008
    assert new.engine.mobile.seq_of("Router.A") == 2
    old.journal_room = 11                                      # 12 more would outgrow it
    old._outputs(old.engine.receive_message(None, _mau("Router.A", 3, add=[
        f"M0more{i}" for i in range(12)]), 3.0))
    record = old.state_to_save(3.0)
    assert not interior_mod.is_journal(record)
    plane._save_routing_state(record)
    assert len(_records(plane.routing_state_path)) == 1
    assert old.journal_room == 10_000                          # max(JOURNAL_MIN, 5,020 held)


def test_a_journal_record_cut_short_is_left_out_of_the_restored_state(tmp_path):
    """A stop while a record was appended leaves its start in the file: the state before it is
    restored (the outbox it belongs to was never flushed: the core never heard of it)."""
    old = InteriorRouting("Router.B", 2)
    old.engine.nodes.learn("Router.A")
    plane = _plane(tmp_path, old)
    old._outputs(old.engine.receive_message(None, _mau("Router.A", 1, add=["M0a", "M0b"]), 1.0))
    plane._save_routing_state(old.state_to_save(1.0))
    kept = old.remote_addresses()
    old._outputs(old.engine.receive_message(None, _mau("Router.A", 2, add=["M0c"]), 2.0))
    import msgpack
    data = msgpack.packb(old.state_to_save(2.0), use_bin_type=True)
    with open(plane.routing_state_path, "ab") as f:
        f.write(data[:len(data) // 2])
    new = InteriorRouting("Router.B", 2)
    restored = _plane(tmp_path, new)
    restored._restore_routing_state()
    assert new.remote_addresses() == kept == {"Router.A": {"M0a": 2, "M0b": 2}}
    assert not [e for e in restored.log.recent if "not restored" in e[2]]
