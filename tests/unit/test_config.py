"""Unit tests of common.schema and supervisor.config: qdrouterd.conf syntax, conversion, defaults,
errors that name their line, the .json form, and Hypothesis equivalence of the two forms."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.config import ConfigError, RouterConfig, default_router_id, load_config, parse_config
from common.schema import SchemaError, load_schema, normalize_attribute_name

REPO = Path(__file__).resolve().parents[2]
P = "org.apache.qpid.dispatch"


def conf(text: str, path: str = "qdrouterd.conf") -> RouterConfig:
    return parse_config(textwrap.dedent(text), path)


def error_of(text: str, path: str = "qdrouterd.conf") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        conf(text, path)
    return info.value


# --------------------------------------------------------------------------------------------
# schema


def test_schema_type_names() -> None:
    schema = load_schema()
    assert schema.long_name("router.config.address") == f"{P}.router.config.address"
    assert schema.long_name(f"{P}.router.config.address") == f"{P}.router.config.address"
    for alias, short in [("address", "router.config.address"), ("linkRoute", "router.config.linkRoute"),
                         ("autoLink", "router.config.autoLink"), ("link", "router.link"),
                         ("node", "router.node")]:
        assert schema.short_name(alias) == short
    with pytest.raises(SchemaError):
        schema.long_name("bogus")


def test_schema_has_every_required_type_with_name_identity_type() -> None:
    schema = load_schema()
    for short in ["router", "listener", "connector", "sslProfile", "log", "router.config.address",
                  "router.config.linkRoute", "router.config.autoLink", "router.link", "router.address",
                  "router.node", "connection", "policy", "vhost", "vhostStats", "management"]:
        etype = schema.entity_type(short)
        assert {"name", "identity", "type"} <= set(etype.attributes), short
    assert schema.entity_type("router").singleton
    assert schema.entity_type("router").operations == ("READ",)
    assert schema.entity_type("listener").attributes["linkCapacity"].default == 250
    assert schema.entity_type("router").attributes["linkCount"].graph


@pytest.mark.parametrize("written, canonical", [
    ("sasl-mechanisms", "saslMechanisms"), ("sasl_mechanisms", "saslMechanisms"),
    ("sasl.mechanisms", "saslMechanisms"), ("saslMechanisms", "saslMechanisms"),
    ("idle-timeout-seconds", "idleTimeoutSeconds"),
])
def test_attribute_name_normalisation(written: str, canonical: str) -> None:
    assert normalize_attribute_name(written) == canonical
    assert load_schema().entity_type("listener").canonical_attribute(written) == canonical


@pytest.mark.parametrize("section, old, new", [
    ("router", "helloInterval", "helloIntervalSeconds"), ("router", "hello-max-age", "helloMaxAgeSeconds"),
    ("router", "raInterval", "raIntervalSeconds"), ("router", "routerId", "id"),
    ("autoLink", "addr", "address"), ("autoLink", "dir", "direction"),
    ("autoLink", "externalAddr", "externalAddress"), ("linkRoute", "dir", "direction"),
    ("sslProfile", "keyFile", "privateKeyFile"),
])
def test_deprecated_names(section: str, old: str, new: str) -> None:
    assert load_schema().entity_type(section).canonical_attribute(old) == new


@pytest.mark.parametrize("text, value", [
    ("yes", True), ("YES", True), ("true", True), ("On", True), ("no", False), ("False", False),
    ("off", False), (True, True), (False, False),
])
def test_boolean_conversion(text: Any, value: bool) -> None:
    assert load_schema().entity_type("listener").attributes["authenticatePeer"].convert(text) is value


@pytest.mark.parametrize("attr, value", [
    ("authenticatePeer", "maybe"), ("maxFrameSize", "12k"), ("maxFrameSize", True),
    ("role", "boss"), ("port", "abc"), ("port", "70000"), ("openProperties", "[1]"),
    ("openProperties", "{bad json"),
])
def test_bad_values_rejected(attr: str, value: Any) -> None:
    with pytest.raises(SchemaError):
        load_schema().entity_type("listener").attributes[attr].convert(value)


def test_value_conversion() -> None:
    listener = load_schema().entity_type("listener").attributes
    assert listener["maxFrameSize"].convert(" 4096 ") == 4096
    assert listener["port"].convert(5672) == "5672"
    assert listener["port"].convert("amqps") == "amqps"
    assert listener["role"].convert("inter-router") == "inter-router"
    assert listener["openProperties"].convert('{"a": 1}') == {"a": 1}
    enable = load_schema().entity_type("log").attributes["enable"]
    for ok in ["trace+", "info+", "warning,error", "none", "default", "debug, notice+"]:
        assert enable.convert(ok) == ok
    with pytest.raises(SchemaError):
        enable.convert("verbose+")


# --------------------------------------------------------------------------------------------
# parsing and defaults


def test_defaults_without_router_section() -> None:
    c = conf("listener {\n  port: 20000\n}\n")
    router = c.router
    assert router.line is None
    assert router.attributes["mode"] == "standalone"
    assert router.attributes["id"] == default_router_id()
    assert router.attributes["id"].startswith("Router.")
    for attr, value in [("workerThreads", 4), ("helloIntervalSeconds", 1), ("helloMaxAgeSeconds", 3),
                        ("raIntervalSeconds", 30), ("raIntervalFluxSeconds", 4),
                        ("remoteLsMaxAgeSeconds", 60), ("defaultDistribution", "balanced")]:
        assert router.attributes[attr] == value
    (listener,) = c.of_type("listener")
    assert listener.attributes == listener.attributes | {
        "host": "", "port": "20000", "role": "normal", "cost": 1, "maxFrameSize": 16384,
        "idleTimeoutSeconds": 16, "stripAnnotations": "both", "linkCapacity": 250,
        "authenticatePeer": False, "http": False}
    assert listener.identity == "listener/:20000" and listener.name == listener.identity
    assert listener.type == f"{P}.listener" and listener.short_type == "listener"


def test_named_listener_and_connector_identities_end_with_the_name_as_in_1_19() -> None:
    c = conf("listener {\n  name: front\n  host: 127.0.0.1\n  port: 20000\n}\n"
             "listener {\n  host: 127.0.0.1\n  port: 20001\n}\n"
             "connector {\n  name: up\n  host: 127.0.0.2\n  port: 20002\n}\n")
    first, second = c.of_type("listener")
    assert (first.identity, first.name) == ("listener/127.0.0.1:20000:front", "front")
    assert (second.identity, second.name) == ("listener/127.0.0.1:20001",) * 2
    assert c.of_type("connector")[0].identity == "connector/127.0.0.2:20002:up"


def test_address_defaults_and_comments_and_hash_in_pattern() -> None:
    c = conf("""\
        # leading comment
        address {   # trailing comment on the section line
            pattern: a.#.b   # this comment is dropped, the first '#' is kept
            distribution: multicast # comment
        }
        address {
            prefix: queue
            waypoint: yes
        }
        """)
    first, second = c.of_type("address")
    assert first.attributes["pattern"] == "a.#.b"
    assert first.attributes["distribution"] == "multicast"
    assert first.attributes["priority"] == -1 and first.attributes["enableFallback"] is False
    assert second.attributes == second.attributes | {"prefix": "queue", "waypoint": True,
                                                     "distribution": "balanced"}
    # as 1.19 names and numbers them: address/N from 0, identities from one counter
    assert [first.identity, second.identity] == ["1", "2"]
    assert [first.attributes["name"], second.attributes["name"]] == ["address/0", "address/1"]
    assert first.line == 2 and second.line == 6


def test_dashed_section_names_and_json_comment_lines_as_1_19() -> None:
    """1.19 camelCases section names (ssl-profile is sslProfile) and skips '#' lines in the
    .json form; it starts with both (checked)."""
    c = conf("router {\n    mode: standalone\n}\nssl-profile {\n    name: x\n}\n"
             "link-route {\n    prefix: a\n    direction: in\n}\n")
    assert [e.short_type for e in c.entities if e.short_type in (
        "sslProfile", "router.config.linkRoute")] == ["sslProfile", "router.config.linkRoute"]
    text = ('# comment\n[\n  # another\n  ["router", {"mode": "standalone"}],\n'
            '  ["listener", {"port": 1, "bogus": 2}]\n]\n')
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.json")
    assert err.value.line == 5  # line numbers are the file's
    assert parse_config(text.replace(', "bogus": 2', ""), "c.json").of_type("listener")


def test_dashed_and_deprecated_names_in_file() -> None:
    c = conf("""\
        router {
            mode: interior
            router-id: R9
            helloInterval: 2
            ra_interval: 10
        }
        autoLink {
            addr: queue.first
            externalAddr: broker_queue
            dir: in
            connection: broker
        }
        """)
    assert c.router.attributes["id"] == "R9"
    assert c.router.attributes["helloIntervalSeconds"] == 2
    assert c.router.attributes["raIntervalSeconds"] == 10
    (link,) = c.of_type("autoLink")
    assert link.attributes == link.attributes | {"address": "queue.first", "direction": "in",
                                                 "externalAddress": "broker_queue"}


def test_order_of_application() -> None:
    c = conf("""\
        listener {
            port: 1
        }
        connector {
            name: broker
            port: 2
        }
        vhost {
            hostname: v
        }
        autoLink {
            address: a
            direction: out
        }
        linkRoute {
            prefix: b
            direction: in
        }
        address {
            prefix: c
        }
        sslProfile {
            name: tls
        }
        policy {
            maxConnections: 10
        }
        router {
            id: X
        }
        log {
            module: ROUTER
            enable: trace+
        }
        """)
    assert [e.short_type for e in c.entities] == [
        "log", "router", "policy", "sslProfile", "router.config.address", "router.config.linkRoute",
        "router.config.autoLink", "vhost", "connector", "listener"]
    assert c.of_type("log")[0].identity == "log/ROUTER"
    assert c.of_type("vhost")[0].identity == "vhost/v"
    assert c.of_type("connector")[0].name == "broker"


def test_log_sections_for_one_module_merge() -> None:
    c = conf("log {\n module: DEFAULT\n enable: info+\n}\nlog {\n module: DEFAULT\n includeSource: yes\n}\n")
    (log,) = c.of_type("log")
    assert log.attributes["enable"] == "info+" and log.attributes["includeSource"] is True


def test_open_properties_json_over_several_lines() -> None:
    c = conf("""\
        connector {
            name: c1
            role: route-container
            openProperties: {
                "foo": "bar # not a comment",
                "nested": {"n": 1}
            }
            port: 5673
        }
        """)
    (connector,) = c.of_type("connector")
    assert connector.attributes["openProperties"] == {"foo": "bar # not a comment", "nested": {"n": 1}}
    assert connector.attributes["port"] == "5673"
    assert connector.attributes["host"] == "127.0.0.1"


def test_one_line_json_map() -> None:
    c = conf('listener {\n  openProperties: {"a": [1, 2]}\n}\n')
    assert c.of_type("listener")[0].attributes["openProperties"] == {"a": [1, 2]}


# Policy examples from the "Using Qpid Dispatch" book (callout numbers removed).
POLICY_EXAMPLE = """\
policy {
    maxConnections: 100
}

vhost {
    name: $default
    maxConnectionsPerUser: 10
    allowUnknownUser: true
    groups: {
        $default: {
            remoteHosts: *
            sources: *
            targets: *
        }
    }
}

vhost {
    name: example.com
    allowUnknownUser: true
    groups: {
        admin: {
            users: alice, bob
            remoteHosts: 127.0.0.1, ::1
            sources: *
            targets: *
        },
        $default: {
            remoteHosts: *
            sources: news*, sports*, chat*, tmp_{user}
            targets: chat*
        }
    }
}

vhost {
    name: traders.com
    maxConnectionsPerRemoteHost: 5
    groups: {
        traders: {
            users: trader-1, trader-2
            maxFrameSize: 10000
            maxSessionWindow: 5000000
            maxSessions: 1
        },
        feeds: {
            users: nyse-feed, nasdaq-feed
            maxFrameSize: 60000
            maxSessionWindow: 1200000000
            maxSessions: 3
        }
    }
}
"""


def test_policy_examples_from_the_book() -> None:
    c = conf(POLICY_EXAMPLE)
    assert c.of_type("policy")[0].attributes["maxConnections"] == 100
    default, example, traders = c.of_type("vhost")
    assert default.attributes["hostname"] == "$default"
    assert default.attributes["maxConnectionsPerUser"] == 10
    assert default.attributes["groups"] == {
        "$default": {"remoteHosts": "*", "sources": "*", "targets": "*"}}
    assert example.attributes["groups"]["admin"]["users"] == "alice, bob"
    assert example.attributes["groups"]["admin"]["remoteHosts"] == "127.0.0.1, ::1"
    assert example.attributes["groups"]["$default"]["sources"] == "news*, sports*, chat*, tmp_{user}"
    assert traders.attributes["maxConnectionsPerHost"] == 5
    assert traders.attributes["groups"]["feeds"] == {
        "users": "nyse-feed, nasdaq-feed", "maxFrameSize": 60000,
        "maxSessionWindow": 1200000000, "maxSessions": 3}


# Queue waypoint and link-route examples from the book.
WAYPOINT_EXAMPLE = """\
connector {
    name: broker
    role: route-container
    host: broker.example.com
    port: 61617
    saslMechanisms: ANONYMOUS
}

address {
    prefix: queue
    waypoint: yes
}

autoLink {
    addr: queue.first
    dir: in
    connection: broker
}

autoLink {
    addr: queue.first
    dir: out
    connection: broker
}

linkRoute {
    prefix: b2
    dir: in
    connection: broker
}

linkRoute {
    prefix: b2
    direction: out
    connection: broker
}

listener {
   host: 0.0.0.0
   role: normal
   port: amqp
   saslMechanisms: ANONYMOUS
}
"""


def test_waypoint_and_link_route_examples_from_the_book() -> None:
    c = conf(WAYPOINT_EXAMPLE)
    (connector,) = c.of_type("connector")
    assert connector.name == "broker" and connector.identity == "connector/broker.example.com:61617:broker"
    assert connector.attributes["role"] == "route-container"
    assert [a.attributes["direction"] for a in c.of_type("autoLink")] == ["in", "out"]
    assert [lr.attributes["direction"] for lr in c.of_type("linkRoute")] == ["in", "out"]
    assert all(lr.attributes["connection"] == "broker" for lr in c.of_type("linkRoute"))
    assert c.of_type("listener")[0].attributes["port"] == "amqp"
    assert c.entities[-1].short_type == "listener"


def test_shipped_default_config_parses() -> None:
    c = load_config(str(REPO / "conf" / "qdrouterd.conf"))
    assert c.router.attributes["mode"] == "standalone" and c.router.attributes["id"] == "Router.A"
    (listener,) = c.of_type("listener")
    assert listener.attributes == listener.attributes | {
        "host": "0.0.0.0", "port": "5672", "role": "normal", "authenticatePeer": False,
        "saslMechanisms": "ANONYMOUS"}
    (log,) = c.of_type("log")
    assert log.attributes["module"] == "DEFAULT" and log.attributes["enable"] == "info+"
    assert c.of_type("address") == []


# --------------------------------------------------------------------------------------------
# errors: each names its line


@pytest.mark.parametrize("text, line, fragment", [
    ("listenr {\n  port: 1\n}\n", 1, "No such entity type 'org.apache.qpid.dispatch.listenr'"),
    ("connection {\n}\n", 1, "unknown section 'connection'"),
    ("listener {\n  host: x\n  prot: 1\n}\n", 3, "org.apache.qpid.dispatch.listener: Unknown "
                                                 "attribute 'prot' for "
                                                 "'org.apache.qpid.dispatch.listener'"),
    ("listener {\n  port: abc\n}\n", 2, "invalid port 'abc'"),
    ("router {\n  mode: foo\n}\n", 2, "bad value for attribute 'mode'"),
    ("listener {\n  authenticatePeer: maybe\n}\n", 2, "invalid boolean 'maybe'"),
    ("router {\n  workerThreads: four\n}\n", 2, "invalid integer 'four'"),
    ("log {\n  module: NOPE\n}\n", 2, "bad value for attribute 'module'"),
    ("log {\n  module: ROUTER\n  enable: loud\n}\n", 3, "invalid log level 'loud'"),
    ("listener {\n  port: 1\n", 1, "missing closing brace"),
    ("listener {\n  port: 1\nrouter {\n}\n", 1, "missing closing brace '}' for section 'listener'"),
    ("\nport: 5672\n", 2, "attribute 'port' outside of a section"),
    ("}\n", 1, "unexpected '}'"),
    ("listener {\n  just words\n}\n", 2, "syntax error"),
    ("listener {\n  port:\n}\n", 2, "missing value for attribute 'port'"),
    ("autoLink {\n  address: a\n}\n", 1, "missing required attribute 'direction' in section 'autoLink'"),
    ("log {\n  enable: info+\n}\n", 1, "missing required attribute 'module'"),
    ("address {\n  distribution: closest\n}\n", 1, "Either a 'prefix' or 'pattern' attribute must be provided"),
    ("\naddress {\n  prefix: a\n  waypoint: yes\n  enableFallback: yes\n}\n", 2,
     "Fallback cannot be specified with waypoint or non-zero ingress and egress phases"),
    ("address {\n  prefix: a\n  egressPhase: 2\n}\n", 1, "Phase values must be between 0 and 9"),
    ("linkRoute {\n prefix: a\n pattern: b\n dir: in\n}\n", 1,
     "Cannot specify both a 'prefix' and a 'pattern' attribute"),
    ("\nlinkRoute {\n prefix: a\n direction: in\n connection: c\n containerId: d\n}\n", 2,
     "Both connection and containerId cannot be specified. Specify only one"),
    ("linkRoute {\n prefix: ..\n direction: in\n}\n", 1, "Prefix invalid - no tokens"),
    ("linkRoute {\n direction: in\n}\n", 1,
     "Either a 'prefix' or 'pattern' attribute must be provided"),
    ("router {\n  id: A\n}\n\nrouter {\n  id: B\n}\n", 5, "duplicate section 'router'"),
    ("router {\n  linkCount: 3\n}\n", 2, "read-only"),
    ("connector {\n name: x\n}\nconnector {\n name: x\n port: 2\n}\n", 4, "duplicate name 'x'"),
    ("listener {\n  openProperties: {\n   \"a\": 1\n}\n", 1, "missing closing brace '}' for section"),
    ("listener {\n  openProperties: {\n   \"a\": {\"b\": 1\n}\n", 2,
     "missing closing brace '}' in the value of 'openProperties'"),
])
def test_errors_name_the_line(text: str, line: int, fragment: str) -> None:
    err = error_of(text)
    assert err.line == line, str(err)
    assert err.path == "qdrouterd.conf"
    assert fragment in err.message, str(err)
    assert str(err).startswith(f"qdrouterd.conf:{line}: ")


def test_unknown_attribute_message_format() -> None:
    err = error_of("router {\n  mode: standalone\n}\n\n\n\n\n\n\n\nlistener {\n  prot: 5672\n}\n")
    assert str(err) == ("qdrouterd.conf:12: org.apache.qpid.dispatch.listener: Unknown "
                        "attribute 'prot' for 'org.apache.qpid.dispatch.listener'")


@pytest.mark.parametrize("kind, role", [("listener", "inter-router"), ("connector", "inter-router"),
                                        ("listener", "edge"), ("connector", "edge")])
def test_router_roles_not_allowed_in_standalone_mode(kind: str, role: str) -> None:
    text = f"router {{\n  mode: standalone\n}}\nlistener {{\n  port: 1\n}}\n{kind} {{\n  role: {role}\n  port: 2\n}}\n"
    err = error_of(text)
    assert err.line == 7
    assert "standalone mode" in err.message
    assert f"{role} connections are only allowed in interior" in err.message.lower() or \
        "edge connections are only allowed" in err.message
    # Without a router section the mode is standalone too.
    assert error_of(f"{kind} {{\n  role: {role}\n}}\n").line == 1


def test_router_roles_allowed_in_interior_mode() -> None:
    c = conf("router {\n mode: interior\n id: R\n}\nlistener {\n role: inter-router\n port: 1\n cost: 5\n}\n"
             "listener {\n role: edge\n port: 2\n}\n")
    assert [e.attributes["role"] for e in c.of_type("listener")] == ["inter-router", "edge"]
    assert c.of_type("listener")[0].attributes["cost"] == 5
    edge = conf("router {\n mode: edge\n}\nconnector {\n role: edge\n}\n")
    assert edge.of_type("connector")[0].attributes["role"] == "edge"
    assert error_of("router {\n mode: edge\n}\nconnector {\n role: inter-router\n}\n").line == 4


def test_missing_file() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("/nonexistent/qdrouterd.conf")
    assert info.value.line is None and str(info.value).startswith("/nonexistent/qdrouterd.conf: ")


# --------------------------------------------------------------------------------------------
# JSON form and round trip


def test_json_form(tmp_path: Path) -> None:
    path = tmp_path / "qdrouterd.json"
    path.write_text(json.dumps([
        ["router", {"mode": "interior", "id": "J"}],
        ["listener", {"port": 5672, "role": "inter-router", "authenticatePeer": "no"}],
        [f"{P}.router.config.address", {"prefix": "x", "distribution": "closest"}],
        ["autoLink", {"addr": "q", "dir": "in"}],
    ], indent=1))
    c = load_config(str(path))
    assert c.router.attributes["id"] == "J"
    assert c.of_type("listener")[0].attributes["port"] == "5672"
    assert c.of_type("listener")[0].attributes["authenticatePeer"] is False
    assert c.of_type("address")[0].attributes["distribution"] == "closest"
    assert c.of_type("autoLink")[0].attributes["address"] == "q"


def test_json_form_errors_name_the_entry_line() -> None:
    text = '[\n ["router", {"mode": "interior"}],\n ["listener", {"prot": 1}]\n]\n'
    err = error_of(text, "qdrouterd.json")
    assert err.line == 3 and "Unknown attribute 'prot'" in err.message
    assert error_of('{"router": {}}', "x.json").line == 1
    assert error_of('[\n ["router"]\n]', "x.json").line == 2
    assert error_of('[\n ["router", {}],\n ["log", {]\n]', "x.json").line == 3


def test_round_trip() -> None:
    c = conf(WAYPOINT_EXAMPLE + POLICY_EXAMPLE)
    again = RouterConfig.from_json(c.to_json())
    assert again == c
    assert again.router == c.router
    assert again.of_type("vhost") == c.of_type("vhost")


# --------------------------------------------------------------------------------------------
# Hypothesis: the .conf text and the .json form of one configuration give the same entities

_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_address_name = st.lists(_token, min_size=1, max_size=3).map(".".join)
_host = st.sampled_from(["", "0.0.0.0", "127.0.0.1", "localhost", "::1"])
_bool_word = st.sampled_from(["yes", "no", "true", "false", "on", "off", "YES", "False"])

_listener = st.fixed_dictionaries(
    {"port": st.integers(1, 65535).map(str)},
    optional={"host": _host.filter(bool), "authenticatePeer": _bool_word,
              "maxFrameSize": st.integers(512, 1 << 20).map(str),
              "saslMechanisms": st.sampled_from(["ANONYMOUS", "PLAIN", "ANONYMOUS PLAIN"]),
              "linkCapacity": st.integers(1, 1000).map(str),
              "stripAnnotations": st.sampled_from(["in", "out", "both", "no"])})
_address = st.fixed_dictionaries(
    {"prefix": _address_name},
    optional={"distribution": st.sampled_from(["multicast", "closest", "balanced"]),
              "waypoint": _bool_word, "priority": st.integers(-1, 9).map(str)})
_pattern_address = st.fixed_dictionaries(
    {"pattern": st.lists(st.one_of(_token, st.just("*"), st.just("#")), min_size=1,
                         max_size=4).map(".".join)},
    optional={"distribution": st.sampled_from(["multicast", "closest", "balanced"])})


@st.composite
def _configs(draw: st.DrawFn) -> list[tuple[str, dict[str, str]]]:
    sections: list[tuple[str, dict[str, str]]] = []
    if draw(st.booleans()):
        sections.append(("router", {"mode": draw(st.sampled_from(["standalone", "interior"])),
                                    "id": draw(_token)}))
    listeners = draw(st.lists(_listener, max_size=4, unique_by=lambda d: d["port"]))
    addresses = draw(st.lists(st.one_of(_address, _pattern_address), max_size=5))
    others = [("listener", d) for d in listeners] + [("address", d) for d in addresses]
    sections += draw(st.permutations(others))
    return sections


def _render_conf(sections: list[tuple[str, dict[str, str]]]) -> str:
    out = []
    for name, attrs in sections:
        out.append(f"{name} {{   # a comment")
        out += [f"    {key}: {value}" for key, value in attrs.items()]
        out.append("}\n")
    return "\n".join(out)


@settings(max_examples=60, deadline=None)
@given(_configs())
def test_conf_and_json_forms_agree(sections: list[tuple[str, dict[str, str]]]) -> None:
    from_conf = parse_config(_render_conf(sections), "h.conf")
    from_json = parse_config(json.dumps([[n, a] for n, a in sections]), "h.json")

    def strip_lines(c: RouterConfig) -> list[tuple[str, dict[str, Any]]]:
        return [(e.type, e.attributes) for e in c.entities]

    assert strip_lines(from_conf) == strip_lines(from_json)
    assert len(from_conf.of_type("listener")) == sum(1 for n, _ in sections if n == "listener")
    for entity, (_, attrs) in zip(from_conf.of_type("address"),
                                  [s for s in sections if s[0] == "address"]):
        assert entity.attributes.get("prefix") == attrs.get("prefix")
        assert entity.attributes.get("pattern") == attrs.get("pattern")
    assert RouterConfig.from_json(from_conf.to_json()) == from_conf


def test_router_config_entities_are_named_and_numbered_as_1_19_does():
    """1.19 (checked against its qdmanage): unnamed sections are ``<type>/N`` counting that
    type's sections from 0 (named ones too); identities come from one counter over addresses,
    link routes and auto-links in the order they are applied; management CREATE goes on."""
    from agent.management.store import ConfigStore  # noqa: PLC0415
    from supervisor.children import build_spec  # noqa: PLC0415
    c = conf("""\
        autoLink {
            address: qqq
            direction: in
            connection: broker
        }
        linkRoute {
            prefix: queue
            direction: in
            connection: broker
        }
        linkRoute {
            name: named
            prefix: queue
            direction: out
            connection: broker
        }
        address {
            prefix: foo
        }
        linkRoute {
            pattern: a.*.b
            direction: out
            containerId: xx
        }
        """)
    got = [(e.attributes["name"], e.identity) for short in ("address", "linkRoute", "autoLink")
           for e in c.of_type(short)]
    assert got == [("address/0", "1"), ("linkRoute/0", "2"), ("named", "3"),
                   ("linkRoute/2", "4"), ("autoLink/0", "5")]
    store = ConfigStore(build_spec(c))
    etype = store.schema.entity_type("router.config.linkRoute")
    created = store.validate_create(etype, {"prefix": "x", "direction": "in"}, "mine")
    assert (created["name"], created["identity"]) == ("mine", "6")
