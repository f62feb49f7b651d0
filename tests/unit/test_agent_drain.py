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
