"""Interior-mode management without processes: ``router.node``, GET-MGMT-NODES, ``nodeCount``
and the remote counts of ``router.address`` from the core's snapshot (its ``nodes`` rows: fake
ones, and a real core RouteTable fed by real RoutingEngines in an in-memory network), and how qdstat prints them (``-n``, ``-a``, ``-r``,
``--all-routers``), its management requests answered by the real operations."""
from __future__ import annotations

import argparse
import time

import pytest
from proton import Message

from agent.management.agent import ManagementAgent
from agent.management.entities import View
from agent.management.operations import execute
from agent.management.protocol import ManagementError, decode, parse_request
from agent.management.store import ConfigStore
from tools import qdmanage, qdstat
from tools.client import StatusError, management_address
from common import ipc
from common.log import RouterLog
from routing_sim import Network

T = "org.apache.qpid.dispatch."
NODE_ATTRIBUTES = ["id", "protocolVersion", "instance", "linkState", "nextHop", "validOrigins",
                   "address", "routerLink", "cost", "index", "lastTopoChange"]
TOPO_CHANGE = 1_700_000_000  # Tue Nov 14 22:13:20 2023 GMT


def spec(router_id="R1", mode="interior"):
    return {"router_id": router_id, "workers": 1,
            "router": {"id": router_id, "mode": mode, "identity": f"router/{router_id}",
                       "name": f"router/{router_id}", "workerThreads": 1},
            "listeners": [], "addresses": [],
            "logs": [{"module": "DEFAULT", "enable": "info+", "identity": "log/DEFAULT",
                      "name": "log/DEFAULT"}]}


def snapshot(router_id="R1", addresses=(), nodes=None):
    state = {"router": {"id": router_id, "area": "0", "mode": "interior"}, "connections": [],
             "links": [], "addresses": list(addresses)}
    if nodes is not None:                        # interior mode: the core's node table
        state["nodes"] = nodes
    return state


class FakeRouting:
    """A line R1 -- R2 -- R3 as R1's core shows it (rows as RouteTable.view)."""

    def __init__(self, ids=("R1", "R2", "R3")):
        self.ids = list(ids)

    def node_view(self):
        me, *others = self.ids
        rows = [{"id": me, "protocolVersion": 1, "instance": 100, "linkState": others[:1],
                 "nextHop": "(self)", "validOrigins": [], "address": f"amqp:/_topo/0/{me}",
                 "routerLink": None, "cost": None, "index": 0, "lastTopoChange": TOPO_CHANGE}]
        for i, router in enumerate(others, 1):
            neighbour = i == 1
            rows.append({"id": router, "protocolVersion": 1, "instance": 100 + i,
                         "linkState": [me] if neighbour else [others[0]],
                         "nextHop": None if neighbour else others[0],
                         "validOrigins": () if neighbour else {me},
                         "address": f"amqp:/_topo/0/{router}",
                         "routerLink": 7 if neighbour else None, "cost": i, "index": i,
                         "lastTopoChange": TOPO_CHANGE})
        return rows



def view(routing=None, router_id="R1", addresses=()):
    """A View of a snapshot whose ``nodes`` are ``routing.node_view()`` (none: standalone)."""
    return View(snapshot(router_id, addresses, None if routing is None else routing.node_view()),
                ConfigStore(spec(router_id, "interior" if routing else "standalone")),
                version="1.19.0", started=0.0)


def req(props, body=None):
    return parse_request(Message(properties=props, body=body, reply_to="amqp:/_topo/0/R1/t",
                                 correlation_id=1))


def run(v, props, body=None):
    return execute(req(props, body), v)


def query(v, entity_type, names=()):
    body = run(v, {"operation": "QUERY", "entityType": entity_type},
               {"attributeNames": list(names)}).body
    return [dict(zip(body["attributeNames"], row)) for row in body["results"]]


# --- standalone ---------------------------------------------------------------------------------
def test_standalone_router_knows_no_nodes_like_1x():
    v = view()
    assert query(v, "router.node") == []
    assert run(v, {"operation": "GET-MGMT-NODES"}).body == []
    assert query(v, "router", ["nodeCount"]) == [{"nodeCount": 0}]
    with pytest.raises(ManagementError) as err:
        run(v, {"operation": "READ", "type": "router.node", "identity": "router.node/R1"})
    assert err.value.status == 404


# --- router.node ------------------------------------------------------------------------------
def test_query_router_node_all_attributes_in_schema_order_this_router_first():
    body = run(view(FakeRouting()), {"operation": "QUERY", "entityType": T + "router.node"}).body
    # 1.19's order: the type's own attributes, then the base type's (name, identity, type)
    assert body["attributeNames"] == NODE_ATTRIBUTES + ["name", "identity", "type"]
    rows = [dict(zip(body["attributeNames"], r)) for r in body["results"]]
    assert [r["id"] for r in rows] == ["R1", "R2", "R3"]
    me, r2, r3 = rows
    assert me["identity"] == me["name"] == "router.node/R1" and me["type"] == T + "router.node"
    assert me["nextHop"] == "(self)" and me["index"] == 0 and me["linkState"] == ["R2"]
    assert r2["nextHop"] is None and r2["routerLink"] == "7" and r2["cost"] == 1
    assert r3["nextHop"] == "R2" and r3["validOrigins"] == ["R1"] and r3["routerLink"] is None
    assert r3["address"] == "amqp:/_topo/0/R3" and r3["lastTopoChange"] == TOPO_CHANGE


def test_read_router_node_by_identity_name_and_short_type():
    v = view(FakeRouting())
    by_identity = run(v, {"operation": "READ", "type": "router.node",
                          "identity": "router.node/R3"}).body
    assert by_identity["id"] == "R3" and set(by_identity) <= set(NODE_ATTRIBUTES) | {
        "name", "identity", "type"} and None not in by_identity.values()
    assert run(v, {"operation": "READ", "type": "node", "name": "router.node/R2"}).body["id"] \
        == "R2"
    assert run(v, {"operation": "READ", "identity": "router.node/R1"}).body["nextHop"] \
        == "(self)"
    with pytest.raises(ManagementError) as err:
        run(v, {"operation": "READ", "type": "router.node", "identity": "router.node/R9"})
    assert err.value.status == 404


def test_router_node_paging_and_selected_attributes():
    v = view(FakeRouting())
    body = run(v, {"operation": "QUERY", "entityType": "router.node", "offset": 1, "count": 1},
               {"attributeNames": ["id", "nextHop", "routerLink"]}).body
    assert body == {"attributeNames": ["id", "nextHop", "routerLink"],
                    "results": [["R2", None, "7"]]}


def test_gaps_in_a_provider_row_read_as_none():
    class Sparse:
        def node_view(self):
            return [{"id": "R1", "nextHop": "(self)"}]

        def router_ids(self):
            return ["R1"]

    [row] = query(view(Sparse()), "router.node")
    assert row["cost"] is None and row["linkState"] == [] and row["validOrigins"] == []


def test_get_mgmt_nodes_lists_every_known_router_this_one_first():
    v = view(FakeRouting())
    assert run(v, {"operation": "GET-MGMT-NODES"}).body == [
        "amqp:/_topo/0/R1/$management", "amqp:/_topo/0/R2/$management",
        "amqp:/_topo/0/R3/$management"]
    assert query(v, "router", ["nodeCount"]) == [{"nodeCount": 2}]


def test_known_routers_are_the_snapshot_node_rows_this_router_first():
    rows = list(reversed(FakeRouting().node_view()))   # row order must not matter
    v = View(snapshot(nodes=rows), ConfigStore(spec()), version="1.19.0", started=0.0)
    assert v.known_routers() == ["R1", "R2", "R3"]
    assert query(v, "router", ["nodeCount"]) == [{"nodeCount": 2}]
    assert query(v, "router.node", ["id"])[0] == {"id": "R1"}


def test_schema_operations_list_router_node():
    v = view(FakeRouting())
    assert run(v, {"operation": "GET-TYPES", "entityType": "node"}).body == {
        T + "router.node": [T + "operationalEntity", T + "entity"]}
    attrs = run(v, {"operation": "GET-ATTRIBUTES", "entityType": "router.node"}).body
    assert attrs[T + "router.node"][:-3] == NODE_ATTRIBUTES
    assert "router.node" in run(v, {"operation": "GET-SCHEMA"}).body["entityTypes"]
    assert T + "router.node" in run(v, {"operation": "GET-TYPES"}).body


# --- router.address remote counts -------------------------------------------------------------
def test_address_remote_counts_from_the_snapshot_or_zero():
    addresses = [
        {"key": "M0local", "distribution": "balanced", "subscriberCount": 1},
        {"key": "M0both", "distribution": "closest", "subscriberCount": 1, "remoteCount": 2,
         "remoteHostRouters": ["R2", "R3"]},
        {"key": "M0hosts", "distribution": "closest", "subscriberCount": 0,
         "remoteHostRouters": ("R3",)},
    ]
    rows = {r["key"]: r for r in query(view(FakeRouting(), addresses=addresses),
                                       "router.address",
                                       ["key", "remoteCount", "remoteHostRouters"])}
    assert rows["M0local"] == {"key": "M0local", "remoteCount": 0, "remoteHostRouters": []}
    assert rows["M0both"]["remoteCount"] == 2 and rows["M0both"]["remoteHostRouters"] == \
        ["R2", "R3"]
    assert rows["M0hosts"]["remoteCount"] == 1 and rows["M0hosts"]["remoteHostRouters"] == ["R3"]


# --- the agent ----------------------------------------------------------------------------------
def started_agent():
    """(agent, its $management link, what it sent the core, its control messages), its reply
    link with credit."""
    sent, control = [], []
    ids = iter(range(1000, 100000))
    agent = ManagementAgent(spec(), RouterLog([]), lambda: next(ids), lambda *m: sent.extend(m),
                            lambda *m: control.extend(m), 1, "1.19.0")
    agent.start()
    agent.on_credit(ipc.LinkCredit(agent.reply_link, 10), 0.0)
    return agent, next(iter(agent.in_links)), sent, control


def test_agent_answers_router_node_from_the_core_snapshot():
    agent, link, sent, control = started_agent()
    for n, props in enumerate(({"operation": "QUERY", "entityType": "router.node"},
                               {"operation": "GET-MGMT-NODES"})):
        payload = Message(properties=props, body={"attributeNames": ["id"]} if n == 0 else None,
                          reply_to="amqp:/_topo/0/R1/temp.1", correlation_id=n).encode()
        agent.on_deliver(ipc.Deliver(70 + n, link, True, payload), 0.0)
    for q in [m for m in control if type(m) is ipc.CoreQuery]:
        agent.on_core_state(ipc.CoreState(q.request_id,
                                          snapshot(nodes=FakeRouting().node_view())), 0.0)
    replies = [decode(m.payload) for m in sent if type(m) is ipc.Transfer]
    assert [r.properties["statusCode"] for r in replies] == [200, 200]
    assert replies[0].body["results"] == [["R1"], ["R2"], ["R3"]]
    assert len(replies[1].body) == 3


# --- a real core route table, fed by real routing engines ----------------------------------------
class CoreRows:
    """The rows a core's snapshot carries: its RouteTable's view."""

    def __init__(self, table):
        self.table = table

    def node_view(self):
        return self.table.view()


def test_router_node_from_a_real_core_route_table():
    net = Network()
    for rid in ("A", "B", "C"):
        net.add_router(rid)
    net.connect("A", "B", cost=2)
    net.connect("B", "C", cost=3)
    net.run(10.0)
    v = view(CoreRows(net.tables["A"]), router_id="A")
    rows = {r["id"]: r for r in query(v, "router.node")}
    assert list(rows) == ["A", "B", "C"]
    assert rows["A"]["nextHop"] == "(self)" and rows["A"]["linkState"] == ["B"]
    assert rows["B"]["nextHop"] is None and rows["B"]["routerLink"] is not None
    assert rows["B"]["cost"] == 2 and rows["C"]["cost"] == 5 and rows["C"]["nextHop"] == "B"
    assert sorted(rows["B"]["linkState"]) == ["A", "C"]
    assert rows["C"]["identity"] == "router.node/C"
    assert run(v, {"operation": "GET-MGMT-NODES"}).body == [
        f"amqp:/_topo/0/{r}/$management" for r in ("A", "B", "C")]


# --- qdstat -----------------------------------------------------------------------------------
class AgentClient:
    """qdstat's ManagementClient, answered by the real operations over per-router views."""

    def __init__(self, views, router=None):
        self.views = views
        self.router = router or next(iter(views))
        self.targets = []

    def set_router(self, router):
        self.targets.append(router)
        self.router = router

    def call(self, operation, body=None, **props):
        props = {"operation": operation, **{k: v for k, v in props.items() if v is not None}}
        try:
            reply = execute(req(props, body), self.views[self.router])
        except ManagementError as exc:
            raise StatusError(exc.status, exc.description) from None
        return reply.body

    def query(self, entity_type, attribute_names=None, count=None):
        body = self.call("QUERY", {"attributeNames": attribute_names or []},
                         entityType=entity_type, count=count)
        return [dict(zip(body["attributeNames"], row)) for row in body["results"]]


def stat(client, *argv):
    opts = qdstat.parse_args(list(argv))
    tool = qdstat.Qdstat(client, opts)
    tool.run(getattr(tool, opts.show))
    return tool.out


def test_qdstat_nodes_standalone():
    out = stat(AgentClient({"R1": view()}), "-n")
    assert out[1] == "R1" and out[3] == "Router is Standalone - No Router List"


def test_qdstat_nodes_table_like_1x():
    out = stat(AgentClient({"R1": view(FakeRouting())}), "-n")
    text = "\n".join(out[3:]).splitlines()
    assert text[0] == "Routers in the Network"
    assert text[1] == "Last Topology Change: " + time.strftime(
        "%A %b %d %H:%M:%S %Y", time.gmtime(TOPO_CHANGE)) + " GMT"
    assert text[2:] == ["  router-id  next-hop  link",
                        "  " + "=" * 27,
                        "  R1         (self)    -",
                        "  R2         -         7",
                        "  R3         R2        -"]


def test_qdstat_nodes_verbose_and_csv():
    client = AgentClient({"R1": view(FakeRouting())})
    text = "\n".join(stat(client, "-n", "-v")).splitlines()
    assert text[5].split() == ["router-id", "next-hop", "link", "ver", "cost", "neighbors",
                               "valid-origins"]
    assert text[7].split() == ["R1", "(self)", "-", "1", "['R2']", "[]"]  # no cost, as 1.19
    assert text[9].split() == ["R3", "R2", "-", "1", "2", "['R2']", "['R1']"]
    csv = "\n".join(stat(client, "-n", "--csv")).splitlines()
    assert csv[-4:] == ['"router-id","next-hop","link"', '"R1","(self)","-"', '"R2","-","7"',
                        '"R3","R2","-"']


def test_qdstat_nodes_sorted_by_router_id_and_no_topology_line_without_a_change():
    class Unsorted(FakeRouting):
        def node_view(self):
            rows = super().node_view()
            for row in rows:
                row["lastTopoChange"] = 0
            return rows

    out = stat(AgentClient({"B": view(Unsorted(["B", "C", "A"]), router_id="B")}), "-n")
    text = "\n".join(out[3:]).splitlines()
    assert text[0] == "Routers in the Network" and text[1].split()[0] == "router-id"
    assert [line.split()[0] for line in text[3:]] == ["A", "B", "C"]


def test_qdstat_addresses_show_remote_counts():
    addresses = [{"key": "M0orders", "distribution": "balanced", "inProcess": 0,
                  "subscriberCount": 1, "remoteCount": 2, "remoteHostRouters": ["R2", "R3"],
                  "containerCount": 0, "deliveriesIngress": 5, "deliveriesEgress": 3}]
    out = stat(AgentClient({"R1": view(FakeRouting(), addresses=addresses)}), "-a")
    lines = "\n".join(out[3:]).splitlines()
    assert lines[1].split() == ["class", "addr", "phs", "distrib", "pri", "local", "remote",
                                "in", "out", "thru", "fallback"]  # 1.19's columns
    assert lines[3].split()[:9] == ["mobile", "orders", "0", "balanced", "-", "1", "2", "5",
                                    "3"]


def test_qdstat_all_routers_visits_every_management_node():
    views = {r: view(FakeRouting([r] + [o for o in ("R1", "R2", "R3") if o != r]), router_id=r)
             for r in ("R1", "R2", "R3")}
    client = AgentClient(views)
    out = stat(client, "-g", "--all-routers")
    assert client.targets == ["R1", "R2", "R3"]
    assert out[0].endswith(" UTC")
    assert [line for line in out if line.startswith("Router  ")] == \
        ["Router  R1", "Router  R2", "Router  R3"]
    text = "\n".join(out)
    assert text.count("Router Statistics") == 3
    assert [line.split()[2] for line in text.splitlines()
            if line.split()[:2] == ["Router", "Id"]] == \
        ["R1", "R2", "R3"]


def test_qdstat_all_routers_on_a_standalone_router_is_a_plain_view():
    client = AgentClient({"R1": view()})
    out = stat(client, "-n", "--all-routers")
    assert client.targets == []
    assert out[1] == "R1" and out[3] == "Router is Standalone - No Router List"


def test_node_router_id():
    assert qdstat.node_router_id("amqp:/_topo/0/R2/$management") == "R2"
    assert qdstat.node_router_id("odd") == "odd"


# --- -r / --router ----------------------------------------------------------------------------
def test_router_option_targets_that_routers_agent():
    for opts in (qdstat.parse_args(["-n", "-r", "R2"]),
                 qdstat.parse_args(["--router", "R2"]),
                 qdmanage.parse_args(["query", "--type", "node", "-r", "R2"]),
                 qdmanage.parse_args(["-r", "R2", "GET-MGMT-NODES"])):
        assert isinstance(opts, argparse.Namespace) and opts.router == "R2"
        assert management_address(opts.router) == "amqp:/_topo/0/R2/$management"
    assert management_address(qdstat.parse_args(["-n"]).router) == "$management"
    [(op, body, props)] = qdmanage.build_requests(
        qdmanage.parse_args(["query", "--type", "node", "-r", "R2", "id", "nextHop"]))
    assert op == "QUERY" and props["entityType"] == T + "router.node"
    assert body == {"attributeNames": ["id", "nextHop"]}


def test_agent_accepts_a_request_once_it_has_answered_it():
    """As 1.19, a request stays unsettled while the agent handles it (so a QUERY of links
    counts it among their unsettled deliveries) and is accepted after its reply; one it cannot
    read is accepted at once."""
    agent, link, sent, control = started_agent()
    payload = Message(properties={"operation": "GET-MGMT-NODES"},
                      reply_to="amqp:/_topo/0/R1/temp.1", correlation_id=1).encode()
    sent.clear()
    agent.on_deliver(ipc.Deliver(80, link, False, payload), 0.0)
    assert not [m for m in sent if type(m) is ipc.Disposition]  # not yet: being handled
    [q] = [m for m in control if type(m) is ipc.CoreQuery]
    agent.on_core_state(ipc.CoreState(q.request_id, snapshot(nodes=FakeRouting().node_view())),
                        0.0)
    kinds = [type(m) for m in sent]
    assert ipc.Transfer in kinds and kinds[-1] is ipc.Disposition
    assert kinds.index(ipc.Transfer) < kinds.index(ipc.Disposition)  # the reply first
    assert sent[-1] == ipc.Disposition(80, ipc.STATE_ACCEPTED, True, None)
    sent.clear()
    agent.on_deliver(ipc.Deliver(81, link, False, b"not AMQP"), 0.0)
    assert sent == [ipc.Disposition(81, ipc.STATE_ACCEPTED, True, None)]
