"""SIGHUP reload planning (file against file) and the agent-side applier, without processes."""
from __future__ import annotations

import textwrap

from agent import reload as agent_reload
from supervisor import reload
from supervisor.config import parse_config
from supervisor.main import build_spec

BASE = """\
router {
    mode: standalone
    id: R
}
listener {
    host: 127.0.0.1
    port: 5672
}
log {
    module: DEFAULT
    enable: info+
}
"""


def spec(extra: str = "", base: str = BASE) -> dict:
    return build_spec(parse_config(base + textwrap.dedent(extra)))


def ops(plan) -> list:
    return [(c["op"], c["type"], c["name"]) for c in plan.changes]


def test_no_changes():
    plan = reload.plan_reload(spec(), spec())
    assert plan.changes == [] and plan.warnings == [] and plan.summary() == "no changes"


def test_added_and_removed_listener():
    old = spec()
    new = spec("listener {\n    host: 127.0.0.1\n    port: 5673\n}\n")
    plan = reload.plan_reload(old, new)
    assert ops(plan) == [("create", "listener", "listener/127.0.0.1:5673")]
    attrs = plan.changes[0]["attributes"]
    assert attrs["port"] == "5673" and "identity" not in attrs
    back = reload.plan_reload(new, old)
    assert ops(back) == [("delete", "listener", "listener/127.0.0.1:5673")]


def test_changed_listener_is_removed_then_added():
    old = spec("listener {\n    name: x\n    host: 127.0.0.1\n    port: 5673\n}\n")
    new = spec("listener {\n    name: x\n    host: 127.0.0.1\n    port: 5673\n"
               "    linkCapacity: 10\n}\n")
    assert ops(reload.plan_reload(old, new)) == [("delete", "listener", "x"),
                                                  ("create", "listener", "x")]


def test_addresses_match_on_content_when_unnamed():
    old = spec("address {\n    prefix: a\n    distribution: closest\n}\n"
               "address {\n    prefix: b\n    distribution: multicast\n}\n")
    new = spec("address {\n    prefix: b\n    distribution: multicast\n}\n"
               "address {\n    prefix: c\n    distribution: balanced\n}\n")
    plan = reload.plan_reload(old, new)
    # a (address/0) goes; b keeps its running name address/1; c must not reuse it
    assert ops(plan) == [("delete", "router.config.address", "address/0"),
                         ("create", "router.config.address", "address/1:2")]
    assert plan.changes[1]["attributes"]["prefix"] == "c"
    running = reload.apply_changes(old, plan.changes)
    assert sorted(a["prefix"] for a in running["addresses"]) == ["b", "c"]
    assert reload.plan_reload(running, new).changes == []


def test_log_changes_and_removed_log_section():
    old = spec("log {\n    module: AGENT\n    enable: debug+\n}\n")
    new = spec("log {\n    module: DEFAULT\n    enable: warning+\n}\n")
    plan = reload.plan_reload(old, new)
    assert ops(plan) == [("update", "log", "log/DEFAULT"), ("update", "log", "log/AGENT")]
    assert plan.changes[0]["attributes"] == {"module": "DEFAULT", "enable": "warning+"}
    assert plan.changes[1]["attributes"] == {"module": "AGENT", "enable": "default"}


def test_restart_only_sections_warn():
    old = spec()
    new = spec("sslProfile {\n    name: s\n    protocols: TLSv1.2\n}\n",
               base=BASE.replace("id: R", "id: R2"))
    plan = reload.plan_reload(old, new)
    assert plan.changes == []
    assert any(w.startswith("changes to router (id,") for w in plan.warnings)
    assert any("sslProfile" in w for w in plan.warnings)


def test_a_changed_auth_service_plugin_needs_a_restart():
    plugin = "authServicePlugin {\n    name: a\n    host: h\n    port: %s\n}\n"
    plan = reload.plan_reload(spec(plugin % "5671"), spec(plugin % "5672"))
    assert plan.changes == []
    assert plan.warnings == ["changes to authServicePlugin need a restart; not applied"]


def test_to_request_shapes():
    req = agent_reload.to_request({"op": "create", "type": "listener", "name": "l",
                             "attributes": {"name": "l", "host": "h", "port": "1"}})
    assert req.operation == "CREATE" and req.name == "l" and req.type == "listener"
    assert req.body == {"host": "h", "port": "1"} and req.reply_to is None
    req = agent_reload.to_request({"op": "update", "type": "log", "name": "log/AGENT",
                             "attributes": {"module": "AGENT", "enable": "debug+"}})
    assert req.identity == "log/AGENT" and req.body == {"enable": "debug+"}


def test_messages_round_trip():
    data = reload.encode_message("result", id=3, ok=False, applied=[0, 2], detail="x")
    assert reload.decode_message(data) == {"kind": "result", "id": 3, "ok": False,
                                           "applied": [0, 2], "detail": "x"}


def test_applier_runs_changes_in_order_and_reports_failures():
    submitted, reports, logs = [], [], []
    applier = agent_reload.ReloadApplier(lambda req, now, cb: submitted.append((req, cb)),
                                   reports.append, lambda lvl, text: logs.append((lvl, text)))
    changes = [{"op": "delete", "type": "listener", "name": "a", "attributes": {}},
               {"op": "create", "type": "listener", "name": "b",
                "attributes": {"host": "h", "port": "1"}}]
    applier.on_request(7, changes, 0.0)
    assert len(submitted) == 1  # one at a time
    submitted[0][1](204, None, {})
    assert len(submitted) == 2 and submitted[1][0].operation == "CREATE"
    submitted[1][1](400, "port in use", None)
    result = reload.decode_message(reports[0])
    assert result == {"kind": "result", "id": 7, "ok": False, "applied": [0],
                      "detail": "create listener b: port in use"}
    assert ("error", "Configuration reload: create listener b failed: port in use") in logs


def test_link_routes_are_added_and_removed_at_run_time():
    route = "linkRoute {\n    prefix: q\n    direction: in\n    connection: broker\n}\n"
    named = "linkRoute {\n    name: lr\n    pattern: a.*\n    direction: out\n    containerId: c\n}\n"
    old = spec(route)
    new = spec(named)
    plan = reload.plan_reload(old, new)
    assert plan.warnings == []
    assert ops(plan) == [("delete", "router.config.linkRoute", "linkRoute/0"),
                         ("create", "router.config.linkRoute", "lr")]
    assert plan.changes[1]["attributes"] == {"name": "lr", "pattern": "a.*", "direction": "out",
                                             "containerId": "c", "distribution": "linkBalanced"}
    assert reload.plan_reload(new, spec(named)).changes == []
    assert reload.apply_changes(old, plan.changes)["linkRoutes"][0]["name"] == "lr"


def test_auto_links_are_added_changed_and_removed_by_name():
    one = "autoLink {\n    name: a\n    address: q\n    direction: out\n    connection: c\n}\n"
    changed = one.replace("direction: out", "direction: in")
    old = spec(one)
    plan = reload.plan_reload(spec(), old)
    assert ops(plan) == [("create", "router.config.autoLink", "a")]
    assert plan.warnings == []
    attrs = plan.changes[0]["attributes"]
    assert attrs["address"] == "q" and attrs["phase"] == 0 and "identity" not in attrs
    assert ops(reload.plan_reload(old, spec(changed))) == [
        ("delete", "router.config.autoLink", "a"), ("create", "router.config.autoLink", "a")]
    assert ops(reload.plan_reload(old, spec())) == [("delete", "router.config.autoLink", "a")]
