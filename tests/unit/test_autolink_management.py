"""The autoLink entity: configuration file and management (1.19's checks, texts and defaults),
and what management shows of the core's view (operStatus, linkRef, lastError)."""
from __future__ import annotations

import pytest
from proton import Message

from agent.management.entities import View
from agent.management.operations import Change, execute
from agent.management.protocol import ManagementError, parse_request
from agent.management.store import ConfigStore
from supervisor.config import ConfigError, parse_config

T = "org.apache.qpid.dispatch."
AL = T + "router.config.autoLink"
SPEC = {"router_id": "R1", "workers": 1,
        "router": {"id": "R1", "mode": "standalone", "identity": "router/R1",
                   "name": "router/R1"},
        "autoLinks": [{"address": "q", "direction": "in", "phase": 1, "connection": "broker",
                       "name": "al1", "identity": "autoLink/1", "fallback": False}]}
SNAPSHOT = {"router": {"id": "R1"}, "connections": [], "links": [], "addresses": [],
            "autoLinks": [{"identity": "autoLink/1", "name": "al1", "operStatus": "failed",
                           "linkRef": None, "lastError": "no such queue"}]}


def run(props, body=None, store=None):
    msg = Message(properties=props, body=body, reply_to="r", correlation_id=1)
    return execute(parse_request(msg), View(SNAPSHOT, store or ConfigStore(SPEC),
                                            version="1.19.0", started=0.0))


def create_error(body, name="new"):
    with pytest.raises(ManagementError) as err:
        run({"operation": "CREATE", "type": AL, "name": name}, body)
    return err.value.status, err.value.description


def test_create_is_a_core_change_with_1_19_defaults():
    out = run({"operation": "CREATE", "type": "autoLink", "name": "a2"},
              {"addr": "queue.first", "dir": "in", "connection": "broker3"})
    assert isinstance(out, Change) and out.status == 201 and out.workers == "none"
    assert out.attributes["address"] == "queue.first" and out.attributes["phase"] == 1
    out = run({"operation": "CREATE", "type": "autoLink", "name": "a3"},
              {"address": "q", "direction": "in", "fallback": True, "containerId": "b"})
    assert out.attributes["phase"] == 0  # a fallback in auto-link: phase 0
    out = run({"operation": "CREATE", "type": "autoLink", "name": "a4"},
              {"address": "q", "direction": "out", "connection": "b",
               "externalAddr": "ext"})
    assert out.attributes["phase"] == 0 and out.attributes["externalAddress"] == "ext"


@pytest.mark.parametrize("body, text", [
    ({"address": "q", "direction": "in", "connection": "a", "containerId": "b"},
     "Both connection and containerId cannot be specified. Specify only one"),
    ({"address": "q", "direction": "in", "connection": "a", "phase": 10},
     "autoLink phase must be between 0 and 9"),
    ({"address": "q", "direction": "in", "connection": "a", "phase": -1},
     "autoLink phase must be between 0 and 9"),
])
def test_create_refusals_have_1_19_texts(body, text):
    assert create_error(body) == (400, text)


def test_duplicate_name_conflicts():
    assert create_error({"address": "x", "direction": "in", "connection": "a"}, name="al1") == (
        400, "Name conflicts with an existing entity")


def test_read_and_query_show_the_core_state():
    body = run({"operation": "READ", "type": AL, "name": "al1"}).body
    assert body["operStatus"] == "failed" and body["lastError"] == "no such queue"
    assert body["linkRef"] is None and body["addr"] == "q" and body["dir"] == "in"
    out = run({"operation": "QUERY", "entityType": AL},
              {"attributeNames": ["name", "operStatus", "phase"]}).body
    assert out["results"] == [["al1", "failed", 1]]
    out = run({"operation": "QUERY", "entityType": T + "router"},
              {"attributeNames": ["autoLinkCount"]}).body
    assert out["results"] == [[1]]


def test_delete_is_a_core_change():
    out = run({"operation": "DELETE", "type": AL, "name": "al1"})
    assert isinstance(out, Change) and out.status == 204 and out.workers == "none"
    assert out.attributes["identity"] == "autoLink/1"


@pytest.mark.parametrize("section, text", [
    ("autoLink {\n    address: q\n    direction: in\n    connection: a\n"
     "    containerId: b\n}\n", "Both connection and containerId cannot be specified"),
    ("autoLink {\n    address: q\n    direction: in\n    phase: 12\n}\n",
     "autoLink phase must be between 0 and 9"),
])
def test_config_file_refusals_name_the_line(section, text):
    with pytest.raises(ConfigError) as err:
        parse_config("router {\n    id: R\n}\n" + section)
    assert text in err.value.message and err.value.line == 4


def test_config_file_phase_defaults():
    config = parse_config("router {\n    id: R\n}\n"
                          "autoLink {\n    addr: q\n    dir: in\n    connection: c\n}\n"
                          "autoLink {\n    address: q\n    direction: out\n}\n"
                          "autoLink {\n    address: q\n    direction: in\n    fallback: yes\n}\n")
    assert [a.attributes["phase"] for a in config.of_type("autoLink")] == [1, 0, 0]
