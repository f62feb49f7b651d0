"""The core process's route computation step (``CoreProcess.agent_batch``), both core builds.

No sockets: a CoreProcess shell around a real RouterCore and a real RouteTable. The agent's batch
carries its topology report, then a routed control message: the routes must be computed and
applied before that message, so it goes toward its router at once; the agent gets Reachable.

    R1 (this core) ---conn 1--- R2 ---- R3
"""
from router_core.coreproc import CoreProcess
from common.ipc import (ControlSend, LinkFlow, LinkState, PeerHello, Reachable,
                             RouterDeliver, RouteUpdate, TopologyReset)
from router_core.routetable import RouteTable
from tests.unit.test_core import Harness, _inter_router_links, core_cls  # noqa: F401
from tests.unit.test_core_interior import ConnOpenedFor

AGENT = 1


class Log:
    def __init__(self):
        self.lines = []

    def log(self, module, level, text):
        self.lines.append((module, level, text))


def shell(core_cls):
    h = Harness(core_cls, mode="interior")
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    h.do(ConnOpenedFor(1, "R2"))
    _inter_router_links(h, 1, 100)
    for link_id in range(101, 122, 2):          # credit on every outbound router link
        h.do(LinkFlow(link_id, 100, False))
    h.effects()
    proc = CoreProcess.__new__(CoreProcess)      # no sockets: only what agent_batch uses
    proc.core, proc.log, proc.to_agent = h.core, Log(), []
    proc.routes = RouteTable("R1")
    return proc, h


def topology():
    return [TopologyReset(), LinkState("R1", 5, 1, 0, 2, {"R2": 1}, {"R2": 1}),
            LinkState("R2", 6, 1, 1, 3, {"R1": 1, "R3": 1}, {}),
            LinkState("R3", 7, 1, 2, 1, {"R2": 1}, {})]


def test_routes_are_computed_before_the_next_command_of_the_batch(core_cls):
    proc, h = shell(core_cls)
    proc.agent_batch(AGENT, topology() + [ControlSend(-1, "amqp:/_topo/0/R3/qdrouter", b"lsr")],
                     0.0)
    [sent] = [e for e in h.flat() if isinstance(e, RouterDeliver)]
    assert sent.link_id == 101 and bytes(sent.payload) == b"lsr"   # toward R3, via R2
    assert proc.core.routers["R3"].next_hop == "R2" and proc.core.routers["R3"].cost == 2
    assert proc.to_agent == [Reachable(["R2", "R3"])]
    assert proc.routes.published == tuple(RouteUpdate({"R2": "R2", "R3": "R2"},
                                                      {"R2": 1, "R3": 2},
                                                      {"R2": [], "R3": []}, {"R2": 1}))


def test_a_malformed_link_state_is_logged_and_the_rest_applies(core_cls):
    proc, h = shell(core_cls)
    bad = LinkState("R9", 1, 1, 3, 1, {"R1": "cheap"}, {})
    proc.agent_batch(AGENT, topology() + [bad], 0.0)
    assert [(m, lvl) for m, lvl, _ in proc.log.lines] == [("ROUTER_CORE", "error")]
    assert "R9" in proc.log.lines[0][2]
    assert set(proc.core.routers) == {"R2", "R3"}


def test_a_new_agent_with_the_same_topology_changes_no_route(core_cls):
    proc, h = shell(core_cls)
    proc.agent_batch(AGENT, topology(), 0.0)
    routers = dict(proc.core.routers)
    proc.to_agent = []
    proc.agent_batch(AGENT, topology(), 1.0)     # a restarted agent's full report
    assert proc.core.routers == routers          # no RouteUpdate: the same objects
    assert proc.to_agent == [Reachable(["R2", "R3"])]
