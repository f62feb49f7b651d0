"""Unit tests of management requests that are too large, malformed or incomplete: each gets a 4xx
(or 501) status with a description and changes nothing, never a 500. The operations run on a
ConfigStore and a snapshot, the agent's IPC flow on fake effects (as test_management_ops)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Message

from agent.management.entities import View
from agent.management.operations import Change, MAX_ATTRIBUTE_NAMES, Reply, execute
from agent.management.protocol import ManagementError, decode, parse_request
from agent.management.store import ConfigStore
from common import ipc
from test_management_ops import SNAPSHOT, SPEC, FakePlane, deliver

T = "org.apache.qpid.dispatch."
SPEC_TLS = dict(SPEC, sslProfiles=[{"name": "tls", "identity": "sslProfile/1"}])


def run(props, body=None, store=None):
    store = store or ConfigStore(SPEC_TLS)
    msg = Message(properties=props, body=body, reply_to="r", correlation_id=1)
    return execute(parse_request(msg), View(SNAPSHOT, store, version="1.19.0", started=0.0))


def refused(props, body=None, store=None):
    store = store or ConfigStore(SPEC_TLS)
    before = {k: list(v) for k, v in store.entities.items()}
    with pytest.raises(ManagementError) as err:
        run(props, body, store)
    assert err.value.description
    assert 400 <= err.value.status < 500 or err.value.status == 501
    assert store.entities == before  # no side effect
    return err.value


CREATE_LISTENER = {"operation": "CREATE", "type": "listener", "name": "l2"}


@pytest.mark.parametrize("body", [None, [], "port=5999", 5, [["port", "5999"]]])
def test_create_without_a_map_body_is_400(body):
    err = refused(CREATE_LISTENER, body)
    assert err.status == 400


def test_create_listener_needs_an_explicit_port():
    err = refused(CREATE_LISTENER, {})
    assert err.status == 400 and "port" in err.description
    err = refused({"operation": "CREATE", "type": "connector", "name": "c"}, {"host": "h"})
    assert err.status == 400 and "port" in err.description


@pytest.mark.parametrize("body, words", [
    ({"port": "70000"}, "port"), ({"port": "nosuchservice"}, "port"),
    ({"port": "5999", "linkCapacity": -5}, "linkCapacity"),
    ({"port": "5999", "linkCapacity": "many"}, "linkCapacity"),
    ({"port": "5999", "cost": 0}, "cost"), ({"port": "5999", "maxFrameSize": -1}, "maxFrameSize"),
    ({"port": "5999", "role": "boss"}, "role"), ({"port": "5999", "bogus": 1}, "bogus"),
    ({"port": "5999", "sslProfile": "missing"}, "sslProfile"),
    ({"port": "5999", "openProperties": [1]}, "openProperties"),
    ({"port": "5999", "identity": "x"}, "identity"),
    ({"port": {"a": 1}}, "port"),
])
def test_create_listener_with_bad_attributes_is_400(body, words):
    err = refused(CREATE_LISTENER, body)
    assert err.status == 400 and words in err.description


@pytest.mark.parametrize("host, port", [
    ("127.0.0.1", "5672"), ("127.0.0.1", "amqp"), ("", "5672"), ("0.0.0.0", "amqp"),
])
def test_create_listener_on_an_address_in_use_is_400(host, port):
    err = refused(CREATE_LISTENER, {"host": host, "port": port})
    assert err.status == 400 and "listener/127.0.0.1:5672" in err.description


def test_create_listener_with_good_attributes_is_a_change(pki):
    store = ConfigStore(dict(SPEC, sslProfiles=[{
        "name": "tls", "identity": "sslProfile/1", "certFile": pki["server"],
        "privateKeyFile": pki["server_key"]}]))
    change = run(CREATE_LISTENER, {"host": "127.0.0.1", "port": "5999", "sslProfile": "tls",
                                   "linkCapacity": "0", "maxMessageSize": 1000}, store)
    assert isinstance(change, Change)
    assert change.attributes["linkCapacity"] == 250 and change.attributes["sslProfile"] == "tls"
    assert change.attributes["maxMessageSize"] == 1000


def test_query_with_too_many_attribute_names_is_400():
    names = [f"a{i}" for i in range(50000)]
    err = refused({"operation": "QUERY", "entityType": "listener"}, {"attributeNames": names})
    assert err.status == 400 and "attributeNames" in err.description
    reply = run({"operation": "QUERY", "entityType": "listener"},
                {"attributeNames": names[:MAX_ATTRIBUTE_NAMES]})
    assert reply.status == 200
    Message(body=reply.body).encode()  # the largest allowed answer can be sent


@pytest.mark.parametrize("props, body, status", [
    ({"operation": "QUERY"}, {"attributeNames": "name"}, 400),
    ({"operation": "QUERY"}, {"attributeNames": [1, 2]}, 400),
    ({"operation": "QUERY", "entityType": "nosuch"}, None, 400),  # 1.19: No such entity type
    ({"operation": "READ", "type": "listener"}, None, 400),
    ({"operation": "READ", "type": "listener", "name": "nosuch"}, None, 404),
    ({"operation": "DELETE", "type": "router", "name": "router/R1"}, None, 501),
    ({"operation": "UPDATE", "type": "log", "name": "log/ROUTER"}, {"enable": "loud"}, 400),
    ({"operation": "UPDATE", "type": "log", "name": "log/ROUTER"}, {"enable": 5}, 400),
    ({"operation": "UPDATE", "type": "log", "name": "log/ROUTER"}, {"module": "SERVER"}, 400),
    ({"operation": "UPDATE", "type": "log", "name": "log/ROUTER"}, [1], 400),
    ({"operation": "CREATE"}, {"port": "5999"}, 400),
    ({"operation": "CREATE", "type": "address"}, None, 400),
    ({"operation": "CREATE", "type": "address"}, {"prefix": "a", "priority": 10}, 400),
    ({"operation": "GET-LOG", "limit": -1}, None, 400),
])
def test_malformed_requests_are_4xx(props, body, status):
    assert refused(props, body).status == status


def test_log_update_uses_the_one_grammar():
    change = run({"operation": "UPDATE", "type": "log", "name": "log/ROUTER"},
                 {"enable": "Trace, debug"})
    assert change.attributes["enable"] == "Trace, debug"


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 40, 2 ** 40) | st.text(max_size=12)
    | st.sampled_from(["5999", "amqp", "listener", "log/ROUTER", "info+", "127.0.0.1", "0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10)
_ATTRS = st.dictionaries(
    st.sampled_from(["port", "host", "name", "linkCapacity", "enable", "prefix", "role",
                     "sslProfile", "cost", "attributeNames", "type", "module", "adminStatus",
                     "maxMessageSize", "pattern", "distribution", "identity"]) | st.text(max_size=6),
    _VALUES, max_size=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["CREATE", "READ", "UPDATE", "DELETE", "QUERY", "GET-TYPES",
                        "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-LOG", "GET-SCHEMA"]),
       st.dictionaries(st.sampled_from(["type", "entityType", "name", "identity", "offset",
                                        "count", "limit"]),
                       st.sampled_from(["listener", "log", "address", "connection", "router",
                                        "vhost", "log/ROUTER", "5", "l1", "nosuch", "-1"])
                       | st.integers(-3, 3), max_size=4),
       _ATTRS | _VALUES)
def test_no_request_is_answered_500(operation, props, body):
    store = ConfigStore(SPEC_TLS)
    before = {k: list(v) for k, v in store.entities.items()}
    try:
        msg = Message(properties={"operation": operation, **props}, body=body, reply_to="r")
        outcome = execute(parse_request(msg), View(SNAPSHOT, store, version="1.19.0",
                                                   started=0.0))
    except ManagementError as err:
        assert 400 <= err.status < 500 or err.status == 501, err.description
        assert err.description
    else:
        assert isinstance(outcome, (Reply, Change))
        if isinstance(outcome, Reply):
            Message(body=outcome.body).encode()
    assert store.entities == before  # only the agent commits, after every process applied it


# --- through the agent's IPC flow --------------------------------------------------------------
def answer(plane):
    [query] = plane.of(ipc.CoreQuery, plane.control)[-1:]
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    return decode(plane.of(ipc.Transfer)[-1].payload).properties


def test_agent_null_body_create_listener_is_400_and_nothing_is_sent():
    plane = FakePlane()
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, CREATE_LISTENER, None)
    props = answer(plane)
    assert props["statusCode"] == 400 and "body" in props["statusDescription"]
    assert not plane.of(ipc.ConfigChange, plane.control)


def test_agent_huge_query_is_400():
    plane = FakePlane()
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, {"operation": "QUERY", "entityType": "listener"},
            {"attributeNames": [f"x{i}" for i in range(50000)]})
    assert answer(plane)["statusCode"] == 400


def test_agent_bind_failure_is_400_and_taken_back():
    plane = FakePlane(workers=2)
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, CREATE_LISTENER, {"host": "127.0.0.1", "port": "5999"})
    [query] = plane.of(ipc.CoreQuery, plane.control)
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    [change] = plane.of(ipc.ConfigChange, plane.control)
    for peer, ok, detail in ((-1, True, ""), (0, True, ""),
                             (1, False, "cannot listen on 127.0.0.1:5999: Address already in use")):
        plane.agent.on_config_result(ipc.ConfigResult(change.request_id, peer, ok, detail), 0.0)
    props = decode(plane.of(ipc.Transfer)[-1].payload).properties
    assert props["statusCode"] == 400 and "Address already in use" in props["statusDescription"]
    assert plane.of(ipc.ConfigChange, plane.control)[-1].op == "delete"
    assert not any(e.get("name") == "l2" for e in plane.agent.store.of_type(T + "listener"))


def _finish_create_listener(results):
    plane = FakePlane(workers=2)
    plane.agent.on_credit(ipc.LinkCredit(plane.agent.reply_link, 5), 0.0)
    deliver(plane, CREATE_LISTENER, {"host": "127.0.0.1", "port": "5999"})
    [query] = plane.of(ipc.CoreQuery, plane.control)
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.0)
    [change] = plane.of(ipc.ConfigChange, plane.control)
    for peer, ok, detail, status in results:
        plane.agent.on_config_result(
            ipc.ConfigResult(change.request_id, peer, ok, detail, status), 0.0)
    return decode(plane.of(ipc.Transfer)[-1].payload).properties


def test_agent_answers_501_from_the_results_status_not_their_words():
    props = _finish_create_listener([(-1, False, "no", ipc.NOT_SUPPORTED),
                                     (0, False, "cannot", ipc.NOT_SUPPORTED),
                                     (1, False, "cannot", ipc.NOT_SUPPORTED)])
    assert props["statusCode"] == 501
    props = _finish_create_listener([(-1, True, "", 0), (0, True, "", 0),
                                     (1, False, "not supported: it says so", 0)])
    assert props["statusCode"] == 500
