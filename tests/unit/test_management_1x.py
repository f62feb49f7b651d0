"""Management answers as Qpid Dispatch 1.19 gives them (compared against a real 1.19 router):
the management node as an entity, the 29-type catalogue, 1.19's status codes and wording, every
attribute present, allocator entities, the default policy entity. No processes."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, symbol

from agent.management.entities import View
from agent.management.operations import execute
from agent.management.protocol import ManagementError, parse_request
from agent.management.store import ConfigStore

T = "org.apache.qpid.dispatch."
NODE = {"type": "org.amqp.management", "name": "self"}
SPEC = {
    "router_id": "R1", "workers": 1,
    "router": {"id": "R1", "mode": "standalone", "identity": "router/R1", "name": "router/R1"},
    "listeners": [{"host": "127.0.0.1", "port": "5672", "role": "normal",
                   "identity": "listener/127.0.0.1:5672", "name": "l1"}],
    "logs": [],
}
SNAPSHOT = {
    "router": {"id": "R1", "area": "0"},
    "connections": [{"identity": "5", "container": "c", "host": "127.0.0.1:4000", "dir": "in",
                     "role": "normal", "properties": {"product": "x"}}],
    "links": [{"identity": "6", "linkName": "a", "linkDir": "out", "owningAddr": "M0q",
               "connectionId": 5, "deliveryCount": 1, "deliveriesDelayed1Sec": None}],
    "addresses": [{"key": "M0q", "distribution": "closest", "subscriberCount": 1}],
}
# what 1.19's GET-TYPES lists (its qdrouter.json): abstract types included
TYPES_1X = ["entity", "org.amqp.management", "management", "configurationEntity",
            "operationalEntity", "router", "sslProfile", "authServicePlugin", "listener",
            "connector", "log", "logStats", "router.config.address", "router.config.linkRoute",
            "router.config.autoLink", "router.config.exchange", "router.config.binding",
            "router.link", "router.address", "router.node", "connection", "allocator", "console",
            "policy", "vhost", "vhostUserGroupSettings", "vhostStats", "dummy",
            "router.connection.linkRoute"]


def run(props, body=None, in_conn=None):
    """``in_conn``: the connection the request came in on (None: unknown)."""
    msg = Message(properties=props, body=body, reply_to="r", correlation_id=1)
    request = parse_request(msg)
    request.in_conn = in_conn
    return execute(request, View(SNAPSHOT, ConfigStore(SPEC), version="1.19.0", started=0.0))


def refused(props, body=None, in_conn=None) -> ManagementError:
    with pytest.raises(ManagementError) as err:
        run(props, body, in_conn)
    return err.value


def rows(body):
    return [dict(zip(body["attributeNames"], r)) for r in body["results"]]


# --- the management node ----------------------------------------------------------------------
@pytest.mark.parametrize("op", ["GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS",
                                "GET-ANNOTATIONS", "GET-MGMT-NODES", "GET-LOG", "GET-SCHEMA"])
def test_requests_to_the_node_itself_are_answered(op):
    assert run({**NODE, "operation": op}).status == 200


def test_query_of_the_node_without_entity_type_lists_the_python_agents_entities():
    body = run({**NODE, "operation": "QUERY"}, {"attributeNames": ["type", "identity"]}).body
    found = {tuple(r) for r in body["results"]}
    assert (T + "management", "self") in found and (T + "router", "router/R1") in found
    assert (T + "connection", "5") not in found  # 1.19: only its core agent has those


def test_node_type_in_query_entity_type_finds_the_management_entity():
    body = run({"operation": "QUERY", "entityType": "org.amqp.management"},
               {"attributeNames": []}).body
    assert body == {"attributeNames": ["name", "identity", "type"],
                    "results": [["self", "self", T + "management"]]}


def test_get_attributes_through_the_node_names_the_entity_type():
    body = run({**NODE, "operation": "GET-ATTRIBUTES", "entityType": T + "allocator"}).body
    assert body == {T + "allocator": [
        "typeName", "typeSize", "transferBatchSize", "localFreeListMax", "globalFreeListMax",
        "totalAllocFromHeap", "totalFreeToHeap", "heldByThreads", "batchesRebalancedToThreads",
        "batchesRebalancedToGlobal", "name", "identity", "type"]}


def test_unknown_operation_is_501_listing_the_operations():
    err = refused({"operation": "FOO"})
    assert err.status == 501
    assert err.description == (
        "Operation 'FOO' not implemented for 'org.apache.qpid.dispatch.management' "
        "['GET-SCHEMA', 'GET-JSON-SCHEMA', 'GET-LOG', 'PROFILE', 'QUERY', 'GET-TYPES', "
        "'GET-ANNOTATIONS', 'GET-OPERATIONS', 'GET-ATTRIBUTES', 'GET-MGMT-NODES', 'READ']")
    err = refused({"operation": "FOO", "type": T + "log", "name": "log/DEFAULT"})
    assert (err.status, err.description) == (
        501, "Operation 'FOO' not implemented for 'org.apache.qpid.dispatch.log' "
             "['UPDATE', 'READ']")
    err = refused({"operation": "FOO", "type": T + "router"})
    assert (err.status, err.description) == (
        400, "org.apache.qpid.dispatch.router: No name or identity provided")
    err = refused({"operation": "FOO", "type": T + "listener", "name": "x"})
    assert (err.status, err.description) == (404, "No entity with name=x")


# --- catalogue --------------------------------------------------------------------------------
def test_the_catalogue_is_1x_29_types():
    body = run({"operation": "GET-TYPES"}).body
    assert sorted(body) == sorted(T + t for t in TYPES_1X) and len(body) == 29
    assert body[T + "management"] == [T + "org.amqp.management", T + "operationalEntity",
                                      T + "entity"]
    assert body[T + "entity"] == []


def test_operations_as_1x():
    body = run({"operation": "GET-OPERATIONS"}).body
    assert body[T + "sslProfile"] == ["CREATE", "DELETE", "READ"]
    assert body[T + "connection"] == ["READ"]
    assert body[T + "dummy"] == ["CREATE", "READ", "UPDATE", "DELETE", "CALLME"]
    assert body[T + "org.amqp.management"] == [
        "QUERY", "GET-TYPES", "GET-ANNOTATIONS", "GET-OPERATIONS", "GET-ATTRIBUTES",
        "GET-MGMT-NODES", "READ"]


def test_annotations_are_an_empty_map():
    assert run({"operation": "GET-ANNOTATIONS"}).body == {}


def test_missing_attributes_of_the_issue_are_in_the_schema():
    body = run({"operation": "GET-ATTRIBUTES"}).body
    wanted = {"connection": ["protocol"], "router": [
        "allowResumableLinkRoute", "blockedLinkCount", "deliveriesRedirectedToFallback",
        "hostName"], "router.address": ["deliveriesEgressRouteContainer",
                                        "deliveriesIngressRouteContainer"],
        "router.link": ["ingressHistogram"], "vhost": ["aliases"], "vhostStats": ["id"],
        "listener": ["saslPlugin"]}
    for short, names in wanted.items():
        assert set(names) <= set(body[T + short]), short


def test_unknown_type_is_400_as_1x():
    err = refused({"operation": "GET-ATTRIBUTES", "entityType": "nosuch"})
    assert (err.status, err.description) == (400, "No such entity type 'nosuch'")


def test_json_schema_is_json_of_every_type():
    text = run({"operation": "GET-JSON-SCHEMA"}).body
    assert len(json.loads(text)["entityTypes"]) == 29


# --- entity answers ---------------------------------------------------------------------------
def test_missing_entity_is_404_with_1x_wording():
    err = refused({"operation": "READ", "type": T + "listener", "name": "nope"})
    assert (err.status, err.description) == (404, "No entity with name=nope")
    err = refused({"operation": "DELETE", "type": T + "listener", "name": "nope"})
    assert (err.status, err.description) == (404, "No entity with name=nope")
    err = refused({"operation": "READ", "type": T + "listener", "identity": "x"})
    assert (err.status, err.description) == (404, "No entity with identity=x")


def test_read_carries_every_attribute_with_a_value_defaults_included():
    """As 1.19's Python agent answers a READ: the attributes that have a value (a default
    included), none that is null."""
    body = run({"operation": "READ", "type": T + "listener", "name": "l1"}).body
    attrs = run({"operation": "GET-ATTRIBUTES", "entityType": "listener"}).body[T + "listener"]
    assert set(body) <= set(attrs) and None not in body.values()
    assert "saslPlugin" not in body and body["authenticatePeer"] is False
    log = run({"operation": "READ", "type": T + "log", "name": "log/DEFAULT"}).body
    assert log["includeTimestamp"] is True and log["includeSource"] is False


def test_connection_protocol_and_properties():
    body = rows(run({"operation": "QUERY", "entityType": "connection"},
                    {"attributeNames": ["protocol", "properties"]}).body)
    assert body == [{"protocol": "amqp", "properties": {"product": "x"}}]


def test_link_counters_are_numbers_never_null():
    link = rows(run({"operation": "QUERY", "entityType": "router.link"},
                    {"attributeNames": []}).body)[0]
    for name in ("deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck",
                 "zeroCreditSeconds", "settleRate"):
        assert link[name] == 0, name


def test_allocators_count_the_routers_objects():
    pools = {r["identity"]: r for r in rows(run(
        {"operation": "QUERY", "entityType": "allocator"}, {"attributeNames": []}).body)}
    assert pools["allocator/qdr_address_t"]["totalAllocFromHeap"] == 1
    assert pools["allocator/qdr_link_t"]["totalAllocFromHeap"] == 1
    assert pools["allocator/qdr_connection_t"]["typeSize"] > 0
    assert all(v is not None for p in pools.values() for v in p.values())


def router_row(*names: str) -> dict:
    """The router's live attributes (1.19 answers them to a QUERY; its READ is refused)."""
    return rows(run({"operation": "QUERY", "entityType": T + "router"},
                    {"attributeNames": list(names)}).body)[0]


def test_router_memory_usage_is_the_processes_vm_size():
    router = router_row("memoryUsage", "blockedLinkCount", "deliveriesRedirectedToFallback")
    assert isinstance(router["memoryUsage"], int) and router["memoryUsage"] > 0
    assert router["blockedLinkCount"] == 0 and router["deliveriesRedirectedToFallback"] == 0


def test_router_memory_resident_is_an_extension_beside_vm_size():
    """memoryResident (what the console shows): the same processes' VmRSS, below their VmSize;
    asked for by name only, so a QUERY without names answers 1.19's columns."""
    router = router_row("memoryResident", "memoryUsage")
    assert isinstance(router["memoryResident"], int)
    assert 0 < router["memoryResident"] < router["memoryUsage"]
    named = run({"operation": "QUERY", "entityType": "router"},
                {"attributeNames": ["memoryResident"]}).body
    assert isinstance(named["results"][0][0], int) and named["results"][0][0] > 0
    plain = run({"operation": "QUERY", "entityType": "router"}, {"attributeNames": []}).body
    assert "memoryResident" not in plain["attributeNames"]


def test_policy_entity_exists_without_a_policy_section():
    body = rows(run({"operation": "QUERY", "entityType": "policy"}, {"attributeNames": []}).body)
    assert len(body) == 1 and body[0]["identity"] == "policy/None"
    assert body[0]["maxConnections"] == 65535 and body[0]["defaultVhost"] == "$default"
    assert body[0]["policyDir"] == "" and body[0]["connectionsProcessed"] == 0


def test_schema_has_vhost_user_group_settings_for_qdstat():
    schema = run({"operation": "GET-SCHEMA"}).body
    groups = schema["entityTypes"]["vhostUserGroupSettings"]["attributes"]
    assert groups["maxSenders"]["default"] == 2147483647
    assert "configSection" not in schema["entityTypes"]["console"]


# --- validation order and wording -------------------------------------------------------------
@pytest.mark.parametrize("short, role", [("listener", "inter-router"), ("connector", "edge")])
def test_standalone_refuses_router_roles_before_the_port(short, role):
    err = refused({"operation": "CREATE", "type": T + short, "name": "ir"},
                  {"host": "127.0.0.1", "port": "70000", "role": role})
    assert (err.status, err.description) == (
        400, "role='standalone' not allowed to connect to or accept connections from other "
             "routers.")


def test_duplicate_name_wording():
    store = ConfigStore(SPEC)
    etype = store.schema.entity_type("router.config.address")
    store.add(store.validate_create(etype, {"prefix": "a1"}, "a1"))
    with pytest.raises(ManagementError) as err:
        store.validate_create(etype, {"prefix": "a2"}, "a1")
    assert (err.value.status, err.value.description) == (
        400, "Name conflicts with an existing entity")


def test_named_listener_identity_has_the_name():
    store = ConfigStore(SPEC)
    etype = store.schema.entity_type("listener")
    named = store.validate_create(etype, {"host": "127.0.0.1", "port": "5999"}, "a1")
    plain = store.validate_create(etype, {"host": "127.0.0.1", "port": "5998"})
    assert named["identity"] == "listener/127.0.0.1:5999:a1"
    assert plain["identity"] == "listener/127.0.0.1:5998"


def test_unusable_log_file_is_500(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "x.log"
    err = refused({"operation": "UPDATE", "type": T + "log", "name": "log/ROUTER"},
                  {"outputFile": str(path)})
    assert (err.status, err.description) == (
        500, f"CError: Configuration: Failed to open log file '{path}'")


def test_connection_delete_is_forbidden_and_inter_router_close_too():
    for identity in ("5", "no-such"):  # 1.19's core agent refuses it before looking
        reply = run({"operation": "DELETE", "type": T + "connection", "identity": identity})
        assert (reply.status, reply.description, reply.body) == (403, "Forbidden", {})
    SNAPSHOT["connections"].append({"identity": "9", "role": "inter-router", "host": "h",
                                    "container": "R2", "dir": "out"})
    try:
        err = refused({"operation": "UPDATE", "type": T + "connection", "identity": "9"},
                      {"adminStatus": "deleted"}, in_conn=5)
        assert err.status == 403
        closing = run({"operation": "UPDATE", "type": T + "connection", "identity": "5"},
                      {"adminStatus": "deleted"}, in_conn=5)
        assert closing.op == "update" and closing.attributes["connId"] == 5
    finally:
        SNAPSHOT["connections"].pop()


@pytest.mark.parametrize("role, created", [("edge", True), ("inter-router", False)])
def test_connection_link_route_over_an_edge_connection(role, created):
    """1.19's edge link-route proxy creates the edge's routes on its interior over the edge
    connection: allowed there; a request that came from another interior router is not."""
    SNAPSHOT["connections"].append({"identity": "9", "role": role, "host": "h",
                                    "container": "E1", "dir": "in"})
    props = {"operation": "CREATE", "type": T + "router.connection.linkRoute",
             "name": "E1/proxyLinkRoute/Cqueue"}
    body = {"type": T + "router.connection.linkRoute", "pattern": "queue/#",
            "direction": "in", "name": "E1/proxyLinkRoute/Cqueue"}
    try:
        if created:
            change = run(props, body, in_conn=9)
            assert change.op == "create" and change.attributes["connId"] == 9
            assert change.attributes["pattern"] == "queue/#"
        else:
            assert refused(props, body, in_conn=9).status == 400
    finally:
        SNAPSHOT["connections"].pop()


@pytest.mark.parametrize("in_conn", [None, 77])
@pytest.mark.parametrize("status", ["deleted", "enabled"])
def test_admin_status_update_from_an_unknown_or_gone_connection_is_a_bad_request(in_conn, status):
    """1.19 agent_connection.c: the requesting connection must still exist (its policy
    decides), whatever adminStatus asks for."""
    SNAPSHOT["connections"].append({"identity": "9", "role": "normal", "host": "h",
                                    "container": "c9", "dir": "in"})
    try:
        err = refused({"operation": "UPDATE", "type": T + "connection", "identity": "9"},
                      {"adminStatus": status}, in_conn=in_conn)
        assert (err.status, err.description) == (400, "Parent connection no longer exists")
    finally:
        SNAPSHOT["connections"].pop()


# --- large answers ----------------------------------------------------------------------------
def test_a_body_too_large_for_proton_is_still_encoded():
    from agent.management.protocol import encode_message, response
    body = {"attributeNames": ["n"] * 10,
            "results": [[f"name{i}", i, None, True, 1.5] * 2 for i in range(10000)]}
    msg = response("reply", 7, 200, None, body)
    with pytest.raises(Exception):
        msg.encode()  # proton alone cannot: more than 65,535 nodes
    assert len(encode_message(msg)) > 10000 * 10


def test_the_body_encoder_matches_proton():
    from proton import symbol
    from agent.management.protocol import decode, encode_value, response
    body = {"attributeNames": ["a", "b"], "results": [
        [f"name{i}", i, -i * 1000, 2 ** 40, None, True, False, 1.5, "x" * 300, [1, "a"],
         {"k": i}, symbol("s")] for i in range(300)]}
    msg = response("reply", 7, 200, None, None)
    back = decode(msg.encode() + b"\x00\x53\x77" + encode_value(body))
    assert back.body == body and back.properties["statusCode"] == 200
    assert back.correlation_id == 7 and back.address == "reply"
    small = response("r", 1, 200, None, {"a": [1, "b", None, -5, 300]})
    assert encode_value(small.body) == small.encode()[len(response("r", 1, 200).encode()) + 3:]


def test_dummy_entity_and_callme_as_1x():
    store = ConfigStore(SPEC)

    def go(props, body=None):
        msg = Message(properties=props, body=body, reply_to="r", correlation_id=1)
        return execute(parse_request(msg), View(SNAPSHOT, store, version="1.19.0", started=0.0))

    created = go({"operation": "CREATE", "type": T + "dummy", "name": "d1"},
                 {"arg1": "a", "num1": 3})
    assert (created.status, created.body) == (201, {
        "arg1": "a", "num1": 3, "type": T + "dummy", "name": "d1", "identity": "dummy/0"})
    echo = go({"operation": "CALLME", "type": T + "dummy", "name": "d1", "foo": "bar"})
    assert (echo.status, echo.body) == (200, {"operation": "CALLME", "type": T + "dummy",
                                              "name": "d1", "foo": "bar"})
    updated = go({"operation": "UPDATE", "type": T + "dummy", "name": "d1"}, {"arg2": "x"})
    assert updated.status == 200 and updated.body["arg2"] == "x"
    read = go({"operation": "READ", "type": T + "dummy", "name": "d1"})
    assert read.body == {"arg1": "a", "num1": 3, "type": T + "dummy", "name": "d1",
                         "identity": "dummy/0", "arg2": "x"}
    assert go({"operation": "DELETE", "type": T + "dummy", "name": "d1"}).status == 204
    with pytest.raises(ManagementError) as err:
        go({"operation": "READ", "type": T + "dummy", "name": "d1"})
    assert err.value.status == 404


def test_schema_document_has_1x_shape():
    schema = run({"operation": "GET-SCHEMA"}).body
    assert list(schema) == ["prefix", "entityTypes", "qdrouterExtension"]
    log = schema["entityTypes"]["log"]
    assert sorted(log) == ["attributes", "description", "fullyQualifiedType", "operations"]
    assert list(log["attributes"]) == ["module", "enable", "includeTimestamp", "includeSource",
                                       "outputFile", "name", "identity"]
    assert sorted(log["attributes"]["module"]) == ["description", "required", "type"]
    assert "operations" not in schema["entityTypes"]["entity"]
    management = schema["entityTypes"]["management"]
    assert management["singleton"] is True and "PROFILE" in management["operations"]
    keys = {k for t in schema["entityTypes"].values() for a in t["attributes"].values()
            for k in a}
    assert keys <= {"description", "deprecated", "unique", "type", "graph", "required",
                    "default"}


def test_schema_document_is_1_19s_model_with_our_additions_apart():
    """1.19's keys, attributes and facts; what only this router has sits in the extension."""
    schema = run({"operation": "GET-SCHEMA"}).body
    types = schema["entityTypes"]
    assert {"address", "linkRoute", "autoLink", "exchange", "binding"} <= set(types)
    assert not any(k.startswith("router.config.") for k in types)
    assert types["linkRoute"]["fullyQualifiedType"] == T + "router.config.linkRoute"
    listener, connector = types["listener"]["attributes"], types["connector"]["attributes"]
    assert "maxMessageSize" not in listener and "default" not in listener["linkCapacity"]
    assert "default" not in listener["http"]  # false: left out, as 1.19 dumps
    assert listener["openProperties"]["type"] == "properties"
    assert "protocolFamily" in connector and "socketAddressFamily" not in connector
    assert list(connector)[:4] == ["host", "port", "protocolFamily", "role"]
    assert types["router"]["attributes"]["memoryUsage"].get("graph") is True
    assert types["console"].get("deprecated") is True
    assert "unique" not in types["vhost"]["attributes"]["hostname"]
    extension = schema["qdrouterExtension"]["entityTypes"]
    assert {"metricsDir", "deletedOnDetach"} <= set(extension["router"]["attributes"])
    assert set(extension["listener"]["attributes"]) == {"maxMessageSize"}
    assert not set(extension) - set(types)
    # GET-JSON-SCHEMA: the same document; one line unless the request asks for an indent
    text = run({"operation": "GET-JSON-SCHEMA"}).body
    assert "\n" not in text and json.loads(text) == schema
    assert "\n  " in run({"operation": "GET-JSON-SCHEMA", "indent": 2}).body


def test_deprecated_names_beside_the_new_ones_as_1x():
    spec = dict(SPEC, autoLinks=[{"address": "q1", "direction": "in", "connection": "c",
                                  "name": "al1", "identity": "autoLink/1"}],
                linkRoutes=[{"prefix": "q", "direction": "out", "name": "lr1",
                             "identity": "linkRoute/1"}])
    view = View(SNAPSHOT, ConfigStore(spec), version="1.19.0", started=0.0)
    msg = Message(properties={"operation": "READ", "type": T + "router.config.autoLink",
                              "name": "al1"}, reply_to="r")
    body = execute(parse_request(msg), view).body
    assert body["addr"] == body["address"] == "q1" and body["dir"] == "in"
    assert "externalAddr" in body and body["externalAddr"] is None
    msg = Message(properties={"operation": "READ", "type": T + "router.config.linkRoute",
                              "name": "lr1"}, reply_to="r")
    assert execute(parse_request(msg), view).body["dir"] == "out"


@pytest.mark.parametrize("section", ["console", "vhostUserGroupSettings", "dummy",
                                     "allocator"])
def test_types_described_for_1x_tools_are_not_config_sections(section):
    """The catalogue names 1.19 types this router does not implement: a config file naming one
    gets a clear error, not a section silently ignored."""
    from supervisor.config import ConfigError, parse_config
    text = f"router {{\n    mode: standalone\n}}\n{section} {{\n    host: x\n}}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    assert "unknown section" in str(err.value)


# every reply's body is encoded by protocol.encode_value (proton encodes the other sections):
# the bytes are proton's own wherever proton can encode the message
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1),
                  st.floats(allow_nan=False), st.text(max_size=300),
                  st.binary(max_size=300),
                  st.sampled_from([symbol(""), symbol("product"), symbol("s" * 300)]))
_BODY = st.recursive(_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=12), inner, max_size=6)),
    max_leaves=40)


@given(_BODY, st.one_of(st.integers(0, 2 ** 63 - 1), st.text(max_size=40)))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_a_reply_is_the_bytes_proton_writes_for_it(body, correlation_id):
    from agent.management.protocol import encode_message, response
    msg = response("amqp:/_topo/0/R/temp.x", correlation_id, 200, None, body)
    assert encode_message(msg) == msg.encode()
