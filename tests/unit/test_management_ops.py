"""Unit tests of the management agent without processes: request parsing, paging, operations,
attribute typing, qdstat tables, and the agent's IPC flow driven with fake effects."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from proton import Message

from agent.management.agent import ManagementAgent
from agent.management.entities import View
from agent.management.operations import Change, Reply, execute, query_rows
from agent.management.protocol import ManagementError, decode, parse_request
from agent.management.store import ConfigStore
from tools import qdmanage
from tools.display import format_table
from common import ipc
from common.log import RouterLog

T = "org.apache.qpid.dispatch."

SPEC = {
    "router_id": "R1", "workers": 2,
    "router": {"id": "R1", "mode": "standalone", "identity": "router/R1", "name": "router/R1",
               "workerThreads": 2},
    "listeners": [{"host": "127.0.0.1", "port": "5672", "role": "normal",
                   "identity": "listener/127.0.0.1:5672", "name": "listener/127.0.0.1:5672"}],
    "addresses": [], "logs": [{"module": "DEFAULT", "enable": "info+", "identity": "log/DEFAULT",
                               "name": "log/DEFAULT"}],
}

SNAPSHOT = {
    "router": {"id": "R1", "area": "0", "mode": "standalone", "addrCount": 3, "linkCount": 3,
               "connectionCount": 2, "acceptedDeliveries": 7},
    "connections": [
        {"identity": "1", "container": "R1", "host": "", "dir": "in", "role": "internal"},
        {"identity": "5", "container": "client", "host": "127.0.0.1:4000", "dir": "in",
         "role": "normal", "isAuthenticated": False, "isEncrypted": False},
    ],
    "links": [
        {"identity": "2", "name": "mgmt", "linkDir": "out", "owningAddr": "M0$management",
         "connectionId": 1, "deliveryCount": 4},
        {"identity": "6", "name": "a", "linkDir": "out", "owningAddr": "M0orders",
         "connectionId": 5, "deliveryCount": 1},
        {"identity": "7", "name": "b", "linkDir": "in", "owningAddr": "M0orders",
         "connectionId": 5, "deliveryCount": 1},
    ],
    "addresses": [
        {"key": "M0$management", "distribution": "closest", "inProcess": 0,
         "subscriberCount": 1, "deliveriesEgress": 4, "deliveriesToContainer": 0},
        {"key": "M0orders", "distribution": "balanced", "inProcess": 0, "subscriberCount": 1},
        {"key": "Ltemp.x", "distribution": "closest", "inProcess": 0, "subscriberCount": 1},
    ],
}


def request(props, body=None, reply_to="amqp:/_topo/0/R1/temp.1"):
    return parse_request(Message(properties=props, body=body, reply_to=reply_to,
                                 correlation_id=42))


def run(props, body=None, store=None, in_conn=None):
    """``in_conn``: the connection the request came in on (None: unknown)."""
    store = store or ConfigStore(SPEC)
    req = request(props, body)
    req.in_conn = in_conn
    return execute(req, View(SNAPSHOT, store, version="1.19.0", started=0.0))


def status_of(props, body=None):
    with pytest.raises(ManagementError) as err:
        run(props, body)
    assert err.value.description
    return err.value.status


# --- parsing ----------------------------------------------------------------------------------
def test_missing_operation_is_a_bad_request():
    with pytest.raises(ManagementError) as err:
        parse_request(Message(body={}))
    assert err.value.status == 400 and "operation" in err.value.description


def test_operation_names_are_case_insensitive_and_unknown_ones_not_implemented():
    assert request({"operation": "query"}).operation == "QUERY"
    # as 1.19: 501 naming the operations of the management node
    with pytest.raises(ManagementError) as err:
        run({"operation": "FROB"})
    assert err.value.status == 501
    assert err.value.description == (
        "Operation 'FROB' not implemented for 'org.apache.qpid.dispatch.management' "
        "['GET-SCHEMA', 'GET-JSON-SCHEMA', 'GET-LOG', 'PROFILE', 'QUERY', 'GET-TYPES', "
        "'GET-ANNOTATIONS', 'GET-OPERATIONS', 'GET-ATTRIBUTES', 'GET-MGMT-NODES', 'READ']")


def test_non_string_type_is_a_bad_request():
    with pytest.raises(ManagementError):
        request({"operation": "READ", "type": 5})


@pytest.mark.parametrize("value", [-1, "x", 1.5, True])
def test_bad_paging_values(value):
    assert status_of({"operation": "QUERY", "entityType": "log", "offset": value}) == 400


def test_non_map_body_is_a_bad_request():
    assert status_of({"operation": "QUERY", "entityType": "log"}, body=[1, 2]) == 400


# --- QUERY ------------------------------------------------------------------------------------
@given(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 30)), st.integers(0, 25))
def test_query_rows_paging(offset, count, n):
    entities = [{"i": i} for i in range(n)]
    rows = query_rows(entities, ["i", "missing"], offset, count)
    expected = list(range(n))[offset:] if count is None else list(range(n))[offset:offset + count]
    assert rows == [[i, None] for i in expected]


def test_query_paging_and_attribute_names():
    reply = run({"operation": "QUERY", "entityType": "log", "offset": 2, "count": 3},
                {"attributeNames": ["identity", "module"]})
    assert reply.status == 200
    assert reply.body["attributeNames"] == ["identity", "module"]
    assert len(reply.body["results"]) == 3


def test_query_all_attributes_uses_schema_order():
    reply = run({"operation": "QUERY", "entityType": "listener"}, {"attributeNames": []})
    # 1.19's order: own attributes first, the base type's (name, identity, type) last
    assert reply.body["attributeNames"][:2] == ["host", "port"]
    assert reply.body["attributeNames"][-3:] == ["name", "identity", "type"]
    row = dict(zip(reply.body["attributeNames"], reply.body["results"][0]))
    assert row["type"] == T + "listener" and row["port"] == "5672"


def test_internal_connection_is_hidden_and_its_consumer_is_in_process():
    conns = run({"operation": "QUERY", "entityType": "connection"},
                {"attributeNames": ["identity"]}).body["results"]
    assert conns == [["5"]]
    links = run({"operation": "QUERY", "entityType": "link"},
                {"attributeNames": ["identity"]}).body["results"]
    assert links == [["6"], ["7"]]
    addrs = run({"operation": "QUERY", "entityType": "router.address"},
                {"attributeNames": ["name", "inProcess", "subscriberCount", "identity",
                                    "deliveriesEgress", "deliveriesToContainer"]}).body["results"]
    assert addrs[0] == ["M0$management", 1, 0, "router.address/M0$management", 0, 4]


def test_query_without_a_type_answers_what_1_19s_python_agent_holds():
    """1.19 answers an untyped QUERY from its Python agent's entities: no connections, links
    or addresses (its core agent has those), and of the router.config types only those of the
    configuration file, under the identities its Python agent gave them (``linkRoute/0``);
    every row has a name."""
    spec = dict(SPEC, linkRoutes=[{"prefix": "lr", "direction": "in", "identity": "1",
                                   "name": "linkRoute/0"},
                                  {"prefix": "lr2", "direction": "out", "identity": "2",
                                   "name": "named"}])
    store = ConfigStore(spec)
    created = run({"operation": "CREATE", "type": "linkRoute"},
                  {"prefix": "x", "direction": "in"}, store=store)
    store.add(created.entity)
    reply = run({"operation": "QUERY"}, {"attributeNames": ["type", "name", "identity"]},
                store=store)
    rows = reply.body["results"]
    types = {r[0] for r in rows}
    assert not types & {T + "connection", T + "router.link", T + "router.address"}
    assert {T + "management", T + "router", T + "listener", T + "log"} <= types
    assert [r[1:] for r in rows if r[0] == T + "router.config.linkRoute"] == [
        ["linkRoute/0", "linkRoute/0"], ["named", "linkRoute/1"]]
    assert all(r[1] for r in rows)


def test_unknown_type_is_a_bad_request_as_in_1x():
    assert status_of({"operation": "QUERY", "entityType": "nosuch"}) == 400


# --- READ / CREATE / UPDATE / DELETE ----------------------------------------------------------
def test_query_router_merges_counters_and_config():
    reply = run({"operation": "QUERY", "entityType": "router"},
                {"attributeNames": ["acceptedDeliveries", "workerThreads", "connectionCount",
                                    "linkCount", "version"]})
    assert reply.body["results"] == [[7, 2, 1, 2, "1.19.0"]]


@pytest.mark.parametrize("props", [
    {"type": "org.apache.qpid.dispatch.router", "name": "router/R1"},
    {"type": "org.apache.qpid.dispatch.router", "identity": "router/R1"},
    {"type": "org.apache.qpid.dispatch.router", "name": "no-such"},
    {"type": "org.apache.qpid.dispatch.router"},
    {"entityType": "org.apache.qpid.dispatch.router", "type": "router", "name": "router/R1"}])
def test_read_of_the_router_named_in_full_is_forbidden_as_in_1_19(props):
    """1.19's core agent refuses a READ of its router type (403, whatever the name or
    identity) before looking; what it does not refuse is served by its Python agent."""
    reply = run({"operation": "READ", **props})
    assert (reply.status, reply.description, reply.body) == (403, "Forbidden", None)


@pytest.mark.parametrize("props, body", [
    ({"operation": "DELETE", "type": "org.apache.qpid.dispatch.router", "name": "x"}, {}),
    ({"operation": "CREATE", "type": "org.apache.qpid.dispatch.router", "name": "x"}, None),
    ({"operation": "DELETE", "type": "org.apache.qpid.dispatch.connection", "identity": "9"},
     {}),
    ({"operation": "QUERY", "entityType": "org.apache.qpid.dispatch.console"},
     {"attributeNames": [], "results": []}),
    ({"operation": "READ", "type": "org.apache.qpid.dispatch.console", "name": "x"}, None)])
def test_core_agent_refusals_as_in_1_19(props, body):
    reply = run(props, {} if props["operation"] in ("CREATE", "QUERY") else None)
    assert (reply.status, reply.description, reply.body) == (403, "Forbidden", body)


def test_read_of_the_router_by_its_short_type_is_the_configured_router():
    """1.19's Python agent answers it: the settings that have a value, counts of 0."""
    for props in ({"type": "router", "name": "router/R1"}, {"identity": "router/R1"},
                  {"type": "org.apache.qpid.dispatch.router", "identity": "router/R1",
                   "entityType": "org.apache.qpid.dispatch.log"}):
        body = run({"operation": "READ", **props}).body
        assert body["workerThreads"] == 2 and body["linkCount"] == 0, props
        assert "acceptedDeliveries" not in body and None not in body.values()


def test_read_without_name_or_identity_is_the_management_entity_as_in_1_19():
    assert run({"operation": "READ"}).body["identity"] == "self"
    assert run({"operation": "READ", "type": "org.amqp.management"}).body["name"] == "self"
    assert error_of({"operation": "READ", "type": "listener"}) == (
        400, "org.apache.qpid.dispatch.listener: No name or identity provided")
    assert error_of({"operation": "DELETE"})[0] == 501  # not an operation of the node


def test_get_log_limit_zero_is_every_entry_as_in_1_19():
    from agent.management.operations import Context
    entries = [["ROUTER", "info", f"line {i}", None, None, 0] for i in range(3)]
    view = View(SNAPSHOT, ConfigStore(SPEC), version="1.19.0", started=0.0)
    for limit, expected in ((0, 3), (2, 2), (None, 3)):
        props = {"operation": "GET-LOG"} if limit is None else {"operation": "GET-LOG",
                                                                  "limit": limit}
        assert len(execute(request(props), view, Context(log_entries=entries)).body) == expected


def test_read_without_type_finds_by_identity_and_404_otherwise():
    assert run({"operation": "READ", "identity": "log/DEFAULT"}).body["module"] == "DEFAULT"
    assert status_of({"operation": "READ", "identity": "nope"}) == 404
    assert status_of({"operation": "READ", "type": "listener"}) == 400


def test_create_listener_validates_and_types_attributes():
    change = run({"operation": "CREATE", "type": "listener", "name": "l2"},
                 {"port": "5673", "linkCapacity": "10", "authenticatePeer": "no"})
    assert isinstance(change, Change) and change.status == 201 and change.workers == "all"
    assert change.entity["linkCapacity"] == 10 and change.entity["authenticatePeer"] is False
    assert change.entity["name"] == "l2"
    assert change.entity["identity"] == "listener/:5673:l2"  # 1.19: HOST:PORT:NAME


@pytest.mark.parametrize("body", [{"port": "99999"}, {"bogus": 1}, {"identity": "x"},
                                  {"port": "5672", "host": "127.0.0.1"}, {"role": "edge"}])
def test_create_listener_bad_requests(body):
    assert status_of({"operation": "CREATE", "type": "listener"}, body) == 400


def test_create_of_unbuilt_feature_is_501_with_description():
    assert status_of({"operation": "UPDATE", "type": "router", "name": "router/R1"}, {}) == 501
    assert status_of({"operation": "DELETE", "type": "log", "name": "log/DEFAULT"}) == 501


def test_address_create_needs_prefix_or_pattern():
    assert status_of({"operation": "CREATE", "type": "address"}, {"distribution": "closest"}) \
        == 400
    change = run({"operation": "CREATE", "type": "address"}, {"prefix": "b"})
    assert change.workers == "none" and change.entity_type == T + "router.config.address"


@pytest.mark.parametrize("body,text", [
    ({"distribution": "closest"}, "Either a 'prefix' or 'pattern' attribute must be provided"),
    ({"prefix": "a", "pattern": "b"}, "Cannot specify both a 'prefix' and a 'pattern' attribute"),
    ({"prefix": "a", "ingressPhase": 3}, "Phase values must be between 0 and 9"),
    ({"prefix": "a", "waypoint": True, "enableFallback": True},
     "Fallback cannot be specified with waypoint or non-zero ingress and egress phases"),
    # 1.19's core column name; the fallback check comes before the pattern's
    ({"egressPhase": 2, "ingressPhase": 0, "fallback": True},
     "Fallback cannot be specified with waypoint or non-zero ingress and egress phases"),
])
def test_address_create_is_refused_with_1_19_texts(body, text):
    with pytest.raises(ManagementError) as err:
        run({"operation": "CREATE", "type": "address"}, body)
    assert (err.value.status, err.value.description) == (400, text)


def test_address_create_answers_with_1_19_columns():
    store = ConfigStore(SPEC)
    change = run({"operation": "CREATE", "type": "address"}, {"prefix": "wp", "waypoint": True},
                 store=store)
    assert {k: change.body[k] for k in ("ingressPhase", "egressPhase", "waypoint", "fallback",
                                        "pattern")} == {
        "ingressPhase": 0, "egressPhase": 1, "waypoint": True, "fallback": False,
        "pattern": None}
    # exactly 1.19's core columns, in its order (fallback, not enableFallback)
    assert list(change.body) == ["name", "identity", "type", "prefix", "distribution",
                                 "waypoint", "ingressPhase", "egressPhase", "pattern",
                                 "priority", "fallback"]
    store.add(change.entity)  # (what the agent does once every process applied it)
    read = run({"operation": "READ", "type": "address", "identity": change.body["identity"]},
               store=store).body
    assert read == change.body
    with pytest.raises(ManagementError) as err:  # 1.19's core's text
        run({"operation": "READ", "type": "address", "name": "nope"}, store=store)
    assert (err.value.status, err.value.description) == (404, "Not Found")
    change = run({"operation": "CREATE", "type": "address"},
                 {"prefix": "f", "fallback": True}, store=store)  # 1.19's core column name
    assert change.entity["enableFallback"] is True and change.body["fallback"] is True
    # explicit phases: a waypoint is what 1.19 shows for phases 0 and 1 only
    change = run({"operation": "CREATE", "type": "address"},
                 {"prefix": "p", "waypoint": True, "ingressPhase": 0, "egressPhase": 2})
    assert (change.body["ingressPhase"], change.body["egressPhase"], change.body["waypoint"]) \
        == (0, 2, False)


def test_core_config_entities_created_without_a_name_stay_nameless_as_in_1_19():
    store = ConfigStore(SPEC)
    for body in ({"prefix": "a"}, {"prefix": "b"}):  # two nameless ones do not conflict
        change = run({"operation": "CREATE", "type": "address"}, body, store=store)
        assert change.body["name"] is None
        store.add(change.entity)
    identity = change.entity["identity"]
    read = run({"operation": "READ", "type": "address", "identity": identity}, store=store)
    assert (read.body["name"], read.body["prefix"]) == (None, "b")
    named = run({"operation": "CREATE", "type": "linkRoute", "name": "lr1"},
                {"prefix": "x", "direction": "in", "connection": "c"}, store=store)
    assert named.body["name"] == "lr1"
    # other types are still named by their identity when no name is given
    listener = run({"operation": "CREATE", "type": "listener"},
                   {"host": "127.0.0.1", "port": "5999"}, store=store)
    assert listener.body["name"] == listener.body["identity"]


def test_auto_link_create_answers_with_every_column():
    change = run({"operation": "CREATE", "type": "autoLink"},
                 {"address": "q1", "direction": "in", "connection": "x"})
    assert {k: change.body[k] for k in ("addr", "dir", "phase", "containerId", "externalAddress",
                                        "externalAddr", "linkRef", "operStatus", "lastError")} \
        == {"addr": "q1", "dir": "in", "phase": 1, "containerId": None, "externalAddress": None,
            "externalAddr": None, "linkRef": None, "operStatus": "inactive", "lastError": None}


def test_query_of_core_config_types_without_names_has_1_19_columns():
    store = ConfigStore(SPEC)
    store.add(run({"operation": "CREATE", "type": "address"}, {"prefix": "f", "fallback": True},
                  store=store).entity)
    body = run({"operation": "QUERY", "type": "address"}, {"attributeNames": []}, store=store).body
    assert body["attributeNames"] == ["name", "identity", "type", "prefix", "distribution",
                                      "waypoint", "ingressPhase", "egressPhase", "pattern",
                                      "priority", "fallback"]
    assert body["results"][0][3:] == ["f", "balanced", False, 0, 0, None, -1, True]
    # GET-ATTRIBUTES stays the schema's
    assert "enableFallback" in run({"operation": "GET-ATTRIBUTES", "entityType": "address"}) \
        .body[T + "router.config.address"]
    body = run({"operation": "QUERY", "type": "autoLink"}, {"attributeNames": []}).body
    assert body["attributeNames"][3:7] == ["address", "addr", "direction", "dir"]
    # the router: 1.19's core columns, linksBlocked (what 1.x's qdstat -g prints) among them
    body = run({"operation": "QUERY", "type": "router"}, {"attributeNames": []}).body
    names = body["attributeNames"]
    assert names[:4] == ["name", "identity", "id", "type"] and names[-4:] == [
        "linksBlocked", "uptimeSeconds", "memoryUsage", "workerThreads"]
    assert "helloIntervalSeconds" not in names and "blockedLinkCount" not in names
    assert body["results"][0][names.index("linksBlocked")] == 0


def test_connector_read_shows_the_cores_status_and_its_url():
    store = ConfigStore(SPEC)
    store.add(run({"operation": "CREATE", "type": "connector"},
                  {"name": "c1", "host": "127.0.0.1", "port": "5673"}, store=store).entity)
    store.add(run({"operation": "CREATE", "type": "connector"},
                  {"name": "c2", "host": "h", "port": "5674"}, store=store).entity)
    snapshot = {**SNAPSHOT, "connectors": {"c1": {"connectionStatus": "SUCCESS",
                                                  "connectionMsg": "[C3] Connection Opened"}}}
    view = View(snapshot, store, version="1.19.0", started=0.0)
    c1 = execute(request({"operation": "READ", "type": "connector", "name": "c1"}), view).body
    assert (c1["connectionStatus"], c1["connectionMsg"], c1["failoverUrls"]) == (
        "SUCCESS", "[C3] Connection Opened", "amqp://127.0.0.1:5673")
    c2 = execute(request({"operation": "READ", "type": "connector", "name": "c2"}), view).body
    assert (c2["connectionStatus"], c2["connectionMsg"]) == ("INITIALIZING", "")


def test_log_update_and_default_resolution():
    change = run({"operation": "UPDATE", "type": "log", "name": "log/SERVER"},
                 {"enable": "default"})
    assert change.attributes["enable"] == "info+" and change.entity["enable"] == "default"
    assert status_of({"operation": "UPDATE", "type": "log", "name": "log/DEFAULT"},
                     {"enable": "loud"}) == 400


def test_connection_delete_goes_to_the_owner_and_internal_is_hidden():
    change = run({"operation": "UPDATE", "type": "connection", "identity": "5"},
                 {"adminStatus": "deleted"}, in_conn=5)
    assert change.workers == "any" and change.attributes["connId"] == 5
    assert status_of({"operation": "UPDATE", "type": "connection", "identity": "1"},
                     {"adminStatus": "deleted"}) == 404


def error_of(props, body=None, store=None):
    with pytest.raises(ManagementError) as err:
        run(props, body, store=store)
    return err.value.status, err.value.description


def test_answers_with_1_19_statuses_and_texts():
    # 1.19's core agent (the type named in full): an UPDATE of a connection it does not have
    # is a bare bad request; named short, its Python agent answers 404
    for key in ("identity", "name"):
        assert error_of({"operation": "UPDATE", "type": T + "connection", key: "999"},
                        {"adminStatus": "deleted"}) == (400, "Bad Request")
    assert error_of({"operation": "UPDATE", "type": "connection", "identity": "999"},
                    {"adminStatus": "deleted"}) == (404, "No entity with identity=999")
    # its log code fails the UPDATE with the C error, as its Python agent words it
    assert error_of({"operation": "UPDATE", "type": "log", "identity": "log/DEFAULT"},
                    {"outputFile": "/nonexistent/dir/f.log"}) == (
        500, "CError: Configuration: Failed to open log file '/nonexistent/dir/f.log'")
    # a vhost its policy code refuses: PolicyError, 500
    assert error_of({"operation": "CREATE", "type": "vhost", "name": "vh1"},
                    {"hostname": "vh1", "groups": {"$default": {"sources": "a",
                                                                "sourcePattern": "b"}}}) == (
        500, "PolicyError: Policy 'vh1' is invalid: Policy vhost 'vh1' user group '$default' "
             "specifies conflicting 'sources' and 'sourcePattern' attributes. Use only one or "
             "the other.")
    # an http listener stays (1.19 with the libwebsockets it ships with)
    spec = dict(SPEC, listeners=SPEC["listeners"] + [{
        "host": "127.0.0.1", "port": "8080", "http": True, "identity": "listener/127.0.0.1:8080",
        "name": "web"}])
    assert error_of({"operation": "DELETE", "type": "listener", "name": "web"},
                    store=ConfigStore(spec)) == (400, "HTTP listeners cannot be deleted")
    assert error_of({"operation": "FROB", "type": "listener",
                     "name": "listener/127.0.0.1:5672"}) == (
        501, "Operation 'FROB' not implemented for 'org.apache.qpid.dispatch.listener' "
             "['CREATE', 'DELETE', 'READ']")


def test_connection_protocol_trace_goes_to_the_owner_and_only_two_attributes_update():
    """1.19: UPDATE of a connection takes adminStatus and enableProtocolTrace; the answer is
    the connection with the new flag; anything else (or nothing) is a bad request."""
    change = run({"operation": "UPDATE", "type": "connection", "identity": "5"},
                 {"enableProtocolTrace": True}, in_conn=5)
    assert change.workers == "any" and change.attributes == {
        "identity": "5", "connId": 5, "enableProtocolTrace": True}
    assert change.body["enableProtocolTrace"] is True and change.body["operStatus"] == "up"
    both = run({"operation": "UPDATE", "type": "connection", "identity": "5"},
               {"enableProtocolTrace": False, "adminStatus": "deleted"}, in_conn=5)
    assert both.attributes["enableProtocolTrace"] is False
    assert both.attributes["adminStatus"] == "deleted" and both.body["operStatus"] == "down"
    for body in ({}, {"role": "normal"}):
        assert status_of({"operation": "UPDATE", "type": "connection", "identity": "5"},
                         body) == 400


def test_schema_operations():
    types = run({"operation": "GET-TYPES", "entityType": "link"}).body
    assert types == {T + "router.link": [T + "operationalEntity", T + "entity"]}
    ops = run({"operation": "GET-OPERATIONS", "entityType": "listener"}).body
    assert set(ops[T + "listener"]) >= {"CREATE", "DELETE"}
    assert "port" in run({"operation": "GET-ATTRIBUTES"}).body[T + "listener"]
    assert run({"operation": "GET-MGMT-NODES"}).body == []  # standalone: no other routers
    assert "listener" in run({"operation": "GET-SCHEMA"}).body["entityTypes"]
    assert isinstance(run({"operation": "GET-JSON-SCHEMA"}).body, str)


# --- qdmanage argument typing -----------------------------------------------------------------
def build(*argv, stdin=None):
    return qdmanage.build_requests(qdmanage.parse_args(list(argv)), stdin)


def test_qdmanage_types_values_by_schema_and_expands_types():
    [(op, body, props)] = build("create", "type=listener", "port=5555", "linkCapacity=5",
                                "authenticatePeer=yes")
    assert op == "CREATE" and props["type"] == T + "listener"
    assert body == {"port": "5555", "linkCapacity": 5, "authenticatePeer": True}
    [(op, body, props)] = build("QUERY", "--type", "link", "linkName")
    assert props["entityType"] == T + "router.link" and body == {"attributeNames": ["linkName"]}


def test_qdmanage_bare_word_names_entity_and_stdin_bulk():
    [(op, body, props)] = build("update", "log/DEFAULT", "enable=debug+")
    assert props["name"] == "log/DEFAULT" and body == {"enable": "debug+"}
    reqs = build("create", "--type", "address", "--stdin",
                 stdin='[{"prefix": "a"}, {"prefix": "b", "name": "n"}]')
    assert [b["prefix"] for _, b, _ in reqs] == ["a", "b"] and reqs[1][2]["name"] == "n"
    # no name: sent, as 1.19's qdmanage sends it (the router answers 400)
    [(op, body, props)] = build("delete", "--type", "listener")
    assert (op, props["name"], props["identity"]) == ("DELETE", None, None)


# --- qdstat table -----------------------------------------------------------------------------
def test_table_matches_the_documented_layout():
    heads = ["class", "addr", "phs", "distrib", "in-proc", "local", "remote", "cntnr", "in",
             "out", "thru", "to-proc", "from-proc"]
    rows = [["local", "$_management_internal", "", "closest", 1, 0, 0, 0, 0, 0, 0, 0, 0],
            ["mobile", "$management", "0", "closest", 1, 0, 0, 0, 1, 0, 0, 1, 0]]
    lines = format_table("Router Addresses", heads, rows).splitlines()
    assert lines[1] == ("  class   addr                   phs  distrib  in-proc  local  remote"
                        "  cntnr  in  out  thru  to-proc  from-proc")
    assert lines[2] == "  " + "=" * 111
    assert lines[4] == ("  mobile  $management            0    closest  1        0      0     "
                        "  0      1   0    0     1        0")


# --- the agent's IPC flow ---------------------------------------------------------------------
class FakePlane:
    def __init__(self, workers=2):
        self.sent, self.control = [], []
        ids = iter(range(1000, 100000))
        self.agent = ManagementAgent(dict(SPEC, workers=workers), RouterLog([]),
                                     lambda: next(ids), lambda *m: self.sent.extend(m),
                                     lambda *m: self.control.extend(m), workers, "1.19.0")
        self.agent.start()

    def of(self, kind, source=None):
        return [m for m in (self.sent if source is None else source) if type(m) is kind]


def deliver(plane, props, body=None, settled=False):
    link = next(iter(plane.agent.in_links))
    payload = Message(properties=props, body=body, reply_to="amqp:/_topo/0/R1/temp.1",
                      correlation_id="c1").encode()
    plane.agent.on_deliver(ipc.Deliver(77, link, settled, payload), 0.0)


def test_agent_attaches_links_and_answers_from_one_snapshot():
    plane = FakePlane()
    attaches = plane.of(ipc.LinkAttach)
    assert [a.address for a in attaches] == ["$management", "_local/$management",
                                             "_local/$_management_internal", None]
    assert plane.of(ipc.ConnOpened)[0].role == "internal"
    deliver(plane, {"operation": "READ", "type": "router", "name": "router/R1"})
    assert not plane.of(ipc.Disposition)  # as 1.19: unsettled while it is being handled
    [query] = plane.of(ipc.CoreQuery, plane.control)
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    assert plane.of(ipc.Disposition)[0] == ipc.Disposition(77, ipc.STATE_ACCEPTED, True, None)
    assert not plane.of(ipc.Transfer)  # no credit yet: the reply waits
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    [transfer] = plane.of(ipc.Transfer)
    assert transfer.to == "amqp:/_topo/0/R1/temp.1" and transfer.settled
    reply = decode(transfer.payload)
    assert reply.correlation_id == "c1" and reply.properties["statusCode"] == 200


def test_agent_garbage_is_dropped_or_answered_400():
    plane = FakePlane()
    link = next(iter(plane.agent.in_links))
    plane.agent.on_deliver(ipc.Deliver(1, link, True, b"\x00garbage"), 0.0)
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, {"type": "router"}, settled=True)
    [transfer] = plane.of(ipc.Transfer)
    assert decode(transfer.payload).properties["statusCode"] == 400


def test_agent_change_waits_for_core_and_every_worker():
    plane = FakePlane(workers=2)
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, {"operation": "CREATE", "type": "listener", "name": "l2"}, {"port": "5999"})
    [query] = plane.of(ipc.CoreQuery, plane.control)
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    [change] = plane.of(ipc.ConfigChange, plane.control)
    for peer in (-1, 0):
        plane.agent.on_config_result(ipc.ConfigResult(change.request_id, peer, True, ""), 0.0)
    assert not plane.of(ipc.Transfer)
    plane.agent.on_config_result(ipc.ConfigResult(change.request_id, 1, True, ""), 0.0)
    [transfer] = plane.of(ipc.Transfer)
    assert decode(transfer.payload).properties["statusCode"] == 201
    assert any(e["name"] == "l2" for e in plane.agent.store.of_type(T + "listener"))


def test_agent_change_failure_and_timeout():
    plane = FakePlane(workers=2)
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, {"operation": "CREATE", "type": "listener"}, {"port": "5999"})
    [query] = plane.of(ipc.CoreQuery, plane.control)
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    [change] = plane.of(ipc.ConfigChange, plane.control)
    plane.agent.on_config_result(ipc.ConfigResult(change.request_id, -1, True, ""), 0.0)
    plane.agent.on_config_result(ipc.ConfigResult(change.request_id, 0, True, ""), 0.0)
    plane.agent.tick(10.0)  # worker 1 never answers
    [transfer] = plane.of(ipc.Transfer)
    reply = decode(transfer.payload)
    assert reply.properties["statusCode"] == 500
    assert "worker(s) 1" in reply.properties["statusDescription"]
    rollback = plane.of(ipc.ConfigChange, plane.control)[-1]
    assert rollback.op == "delete"  # worker 0 opened it: taken back
    assert not any(e["port"] == "5999" for e in plane.agent.store.of_type(T + "listener"))


def test_agent_logs_1_19s_error_line_for_what_its_python_agent_answers():
    """1.19's Python agent logs each failed request at AGENT error; what its core agent
    answers (connections, links, addresses, router.config types: CRUD and QUERY) is not
    logged."""
    plane = FakePlane()
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, {"operation": "CREATE", "type": T + "nosuch", "name": "x1"}, {})
    deliver(plane, {"operation": "UPDATE", "type": T + "connection", "identity": "999"},
            {"adminStatus": "deleted"})
    for query in plane.of(ipc.CoreQuery, plane.control):
        plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    statuses = [decode(t.payload).properties["statusCode"] for t in plane.of(ipc.Transfer)]
    assert statuses == [400, 400]
    errors = [e[2] for e in plane.agent.log.recent if e[0] == "AGENT" and e[1] == "error"]
    assert errors == ["Error performing CREATE: No such entity type "
                      "'org.apache.qpid.dispatch.nosuch'"]


def test_agent_logs_the_raw_request_at_debug_as_1x():
    plane = FakePlane()
    plane.agent.log.configure({"module": "AGENT", "enable": "debug+", "outputFile": "/dev/null"})
    deliver(plane, {"operation": "QUERY", "entityType": "log"}, {"attributeNames": []})
    texts = [e[2] for e in plane.agent.log.recent if e[0] == "AGENT" and e[1] == "debug"]
    assert texts and texts[-1].startswith("Agent request Message(")
    assert "'operation': 'QUERY'" in texts[-1] and "correlation_id='c1'" in texts[-1]


@pytest.mark.parametrize("body, description", [
    ({"prefix": "a", "direction": "in", "connection": "c", "containerId": "d"},
     "Both connection and containerId cannot be specified. Specify only one"),
    ({"prefix": "a"}, "No 'direction' attribute provided - it is mandatory"),
    ({"direction": "in"}, "Either a 'prefix' or 'pattern' attribute must be provided"),
    ({"prefix": "a", "pattern": "b", "dir": "in"},
     "Cannot specify both a 'prefix' and a 'pattern' attribute"),
    ({"prefix": "", "direction": "in"}, "Prefix must be a non-empty string type"),
    ({"pattern": "./", "direction": "in"}, "Pattern invalid - no tokens"),
    ({"prefix": "a", "direction": "up"}, "Invalid value for 'direction'"),
    ({"prefix": "a", "direction": "in", "distribution": "closest"},
     "Invalid value for 'distribution'"),
])
def test_link_route_create_bad_requests_have_1_19_descriptions(body, description):
    view = View(SNAPSHOT, ConfigStore(SPEC), version="1.19.0", started=0.0)
    with pytest.raises(ManagementError) as info:
        execute(request({"operation": "CREATE", "type": "linkRoute"}, body), view)
    assert (info.value.status, info.value.description) == (400, description)


def test_link_route_create_goes_to_the_core_and_reads_back_with_oper_status():
    store = ConfigStore(SPEC)
    view = View(SNAPSHOT, store, version="1.19.0", started=0.0)
    change = execute(request({"operation": "CREATE", "type": "linkRoute", "name": "lr"},
                             {"prefix": "q", "dir": "out", "containerId": "broker"}), view)
    assert isinstance(change, Change) and change.workers == "none"
    assert change.entity_type == T + "router.config.linkRoute"
    assert change.attributes["direction"] == "out"
    assert change.attributes["distribution"] == "linkBalanced"
    assert change.body["dir"] == "out" and change.body["operStatus"] == "inactive"
    store.add(change.entity)
    snapshot = dict(SNAPSHOT, linkRoutes={change.entity["identity"]: "active"})
    view = View(snapshot, store, version="1.19.0", started=0.0)
    reply = execute(request({"operation": "READ", "type": "linkRoute", "name": "lr"}), view)
    assert reply.body["operStatus"] == "active" and reply.body["dir"] == "out"
    with pytest.raises(ManagementError) as info:  # 1.19 checks the name before anything else
        execute(request({"operation": "CREATE", "type": "linkRoute", "name": "lr"},
                        {"prefix": "q"}), view)
    assert info.value.description == "Name conflicts with an existing entity"
    change = execute(request({"operation": "DELETE", "type": "linkRoute", "name": "lr"}), view)
    assert change.op == "delete" and change.workers == "none"


# --- authServicePlugin ------------------------------------------------------------------------
def test_auth_service_plugin_create_goes_to_every_worker_and_delete_waits_for_its_listeners():
    store = ConfigStore({**SPEC, "authServicePlugins": [
        {"name": "auth", "host": "h", "port": "5671", "identity": "authServicePlugin/auth"}],
        "listeners": SPEC["listeners"] + [
            {"name": "relayed", "host": "127.0.0.1", "port": "5673", "role": "normal",
             "saslPlugin": "auth", "identity": "listener/127.0.0.1:5673:relayed"}]})
    change = run({"operation": "CREATE", "type": T + "authServicePlugin", "name": "other"},
                 {"host": "svc.example", "port": "5672"}, store=store)
    assert isinstance(change, Change) and change.workers == "all"
    assert change.attributes["host"] == "svc.example"
    with pytest.raises(ManagementError) as err:  # a plugin without a host is no plugin
        run({"operation": "CREATE", "type": T + "authServicePlugin", "name": "x"}, {},
            store=store)
    assert err.value.status == 400 and "host (and port)" in err.value.description
    with pytest.raises(ManagementError) as err:
        run({"operation": "DELETE", "type": T + "authServicePlugin", "name": "auth"},
            store=store)
    assert err.value.status == 400 and "used by listener 'relayed'" in err.value.description
    with pytest.raises(ManagementError) as err:  # a listener naming a missing plugin
        run({"operation": "CREATE", "type": T + "listener", "name": "l2"},
            {"port": "5674", "saslPlugin": "nope"}, store=store)
    assert err.value.status == 400 and "no authServicePlugin" in err.value.description
    read = run({"operation": "READ", "type": T + "authServicePlugin", "name": "auth"},
               store=store)
    assert read.body["host"] == "h" and read.body["identity"] == "authServicePlugin/auth"
