"""Unit tests of the configuration rules driven by the schema: numeric ranges, references between
sections, clashing listener addresses, non-UTF-8 files, the one log-level grammar
(common.log.parse_enable) and log sections without ``enable``. Hypothesis checks that any
bytes at all give either a configuration or a ConfigError naming FILE:LINE."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config import ConfigError, RouterConfig, decode_config, load_config, parse_config
from common.schema import SchemaError, listen_addresses_clash, load_schema
from supervisor.main import build_spec
from common.log import LEVELS, LogConfigError, RouterLog, parse_enable


def conf(text: str, path: str = "qdrouterd.conf") -> RouterConfig:
    return parse_config(textwrap.dedent(text), path)


def error_of(text: str, path: str = "qdrouterd.conf") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        conf(text, path)
    return info.value


# --------------------------------------------------------------------------------------------
# numeric ranges


@pytest.mark.parametrize("section, attribute, value", [
    ("router", "workerThreads", "0"), ("router", "workerThreads", "-1"),
    ("router", "helloIntervalSeconds", "0"), ("router", "helloMaxAgeSeconds", "0"),
    ("router", "raIntervalSeconds", "0"), ("router", "raIntervalFluxSeconds", "-3"),
    ("router", "remoteLsMaxAgeSeconds", "0"), ("router", "metricsIntervalSeconds", "0"),
    ("router", "metricsKeepFiles", "-1"),
    ("listener", "linkCapacity", "-5"), ("listener", "cost", "0"), ("connector", "cost", "-1"),
    ("listener", "maxFrameSize", "-1"), ("listener", "maxSessions", "-1"),
    ("listener", "idleTimeoutSeconds", "-1"), ("listener", "maxSessionFrames", "-2"),
    ("listener", "maxMessageSize", "-1"), ("listener", "port", "70000"),
    ("listener", "port", "nosuchservice"), ("listener", "linkCapacity", "99999999999999999999999"),
    ("address", "priority", "10"), ("address", "ingressPhase", "10"),
    ("policy", "maxMessageSize", "-1"), ("policy", "maxConnections", "-1"),
    ("vhost", "maxMessageSize", "-1"),
])
def test_out_of_range_values_name_their_line(section: str, attribute: str, value: str) -> None:
    extra = {"address": "    prefix: a\n", "vhost": "    hostname: v\n"}.get(section, "")
    mode = "router {\n    mode: interior\n}\n" if section != "router" else ""
    text = f"{mode}{section} {{\n{extra}    {attribute}: {value}\n}}\n"
    err = error_of(text)
    assert err.line == text.splitlines().index(f"    {attribute}: {value}") + 1
    assert attribute in err.message
    assert re.match(r"qdrouterd\.conf:\d+: ", str(err))


def test_in_range_values_and_1_19_promotions() -> None:
    cfg = conf("""
        router {
            workerThreads: 1
            helloIntervalSeconds: 1
        }
        listener {
            port: 0
            linkCapacity: 0
            maxFrameSize: 100
            maxSessions: 65535
            maxMessageSize: 0
        }
        vhost {
            hostname: v
            maxMessageSize: 1048576
        }
        policy {
            maxMessageSize: 0
        }
    """)
    [listener] = cfg.of_type("listener")
    assert listener.get("linkCapacity") == 250        # 0 means the default, as 1.19
    assert listener.get("maxFrameSize") == 512        # promoted to the AMQP minimum
    assert listener.get("maxSessions") == 32768       # clamped as 1.19 (proton's limit)
    assert listener.get("maxMessageSize") == 0
    spec = build_spec(cfg)
    assert spec["vhosts"][0]["maxMessageSize"] == 1048576
    assert spec["policy"]["maxMessageSize"] == 0
    assert spec["listeners"][0]["maxMessageSize"] == 0


def test_schema_range_is_shared_by_every_caller() -> None:
    attr = load_schema().entity_type("listener").attributes["linkCapacity"]
    with pytest.raises(SchemaError, match="out of range"):
        attr.convert(-5)
    assert attr.convert("7") == 7


@given(st.integers(min_value=-(2 ** 70), max_value=2 ** 70))
def test_integer_attributes_never_pass_out_of_range(value: int) -> None:
    attr = load_schema().entity_type("router").attributes["workerThreads"]
    try:
        converted = attr.convert(str(value))
    except SchemaError:
        assert value < 1 or value >= 2 ** 63
    else:
        assert converted == value and value >= 1


# --------------------------------------------------------------------------------------------
# references and uniqueness


def test_listener_naming_an_unknown_ssl_profile_is_an_error() -> None:
    err = error_of("""
        listener {
            port: 20000
            sslProfile: nope
        }
    """)
    assert "sslProfile 'nope'" in err.message and err.line == 2


def test_listener_and_connector_naming_an_existing_ssl_profile(pki) -> None:
    cfg = conf(f"""
        sslProfile {{
            name: tls
            certFile: {pki["server"]}
            privateKeyFile: {pki["server_key"]}
        }}
        listener {{
            port: 20000
            sslProfile: tls
        }}
        connector {{
            port: 20001
            sslProfile: tls
        }}
    """)
    assert cfg.of_type("listener")[0].get("sslProfile") == "tls"
    err = error_of("""
        sslProfile {
            name: tls
        }
        connector {
            port: 20001
            sslProfile: other
        }
    """)
    assert err.line == 5


def test_duplicate_vhost_hostname_is_an_error() -> None:
    err = error_of("""
        vhost {
            hostname: example.com
        }
        vhost {
            hostname: example.com
        }
    """)
    assert err.line == 5 and "line 2" in err.message


# --------------------------------------------------------------------------------------------
# listener addresses


@pytest.mark.parametrize("first, second", [
    (("", "amqp"), ("0.0.0.0", "5672")), (("127.0.0.1", "5672"), ("127.0.0.1", "amqp")),
    (("0.0.0.0", "6000"), ("127.0.0.1", "6000")), (("::", "6000"), ("", "6000")),
])
def test_two_listeners_on_one_address_name_both_lines(first, second) -> None:
    err = error_of(f"""
        listener {{
            host: {first[0] or '""'}
            port: {first[1]}
        }}
        listener {{
            host: {second[0] or '""'}
            port: {second[1]}
        }}
    """.replace('host: ""', "# any host"))
    assert err.line == 6 and "line 2" in err.message


def test_listeners_on_different_addresses_or_port_0_are_fine() -> None:
    cfg = conf("""
        listener {
            host: 127.0.0.1
            port: 6000
        }
        listener {
            host: 127.0.0.2
            port: 6000
        }
        listener {
            port: 0
        }
        listener {
            port: 0
        }
    """)
    assert len(cfg.of_type("listener")) == 4
    assert not listen_addresses_clash(("127.0.0.1", "6000"), ("127.0.0.1", "6001"))


# --------------------------------------------------------------------------------------------
# encoding


def test_non_utf8_file_is_a_config_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.conf"
    path.write_bytes(b"router {\n    mode: standalone\n}\nlistener {\n    port: 5\xff672\n}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert info.value.line == 5 and str(info.value).startswith(f"{path}:5: ")
    assert "UTF-8" in info.value.message


def test_non_utf8_file_through_the_cli(tmp_path: Path, capsys) -> None:
    from supervisor.main import main
    path = tmp_path / "bad.conf"
    path.write_bytes(b"router {\n    id: R\xe9\n}\n")
    assert main(["-c", str(path)]) == 1
    assert f"qdrouterd: configuration error: {path}:2: " in capsys.readouterr().err


LINE_PREFIX = re.compile(r"^cfg\.conf(:\d+)?: \S")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_give_a_config_or_a_config_error(data: bytes) -> None:
    try:
        parse_config(decode_config(data, "cfg.conf"), "cfg.conf")
    except ConfigError as err:
        assert LINE_PREFIX.match(str(err)), str(err)


_TOKENS = st.sampled_from(["router {", "listener {", "log {", "}", "port: 5672", "port: -1",
                           "linkCapacity: -5", "workerThreads: 0", "module: ROUTER",
                           "enable: info+", "enable: loud", "sslProfile: x", "host: \xff",
                           "openProperties: {", "  a: {", "[[[[", "# c", "", "\t", "\r"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOKENS, max_size=25), st.booleans())
def test_config_like_text_gives_a_config_or_a_line_numbered_error(lines, as_bytes) -> None:
    text = "\n".join(lines)
    data = text.encode("latin-1") if as_bytes else text.encode("utf-8")
    try:
        parse_config(decode_config(data, "cfg.conf"), "cfg.conf")
    except ConfigError as err:
        assert LINE_PREFIX.match(str(err)), str(err)
        assert err.line is not None or "nested" in err.message


def test_deep_json_nesting_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_config("[" * 100000, "cfg.json")


# --------------------------------------------------------------------------------------------
# the log-level grammar


@pytest.mark.parametrize("spec, levels", [
    ("info+", {"info", "notice", "warning", "error", "critical"}),
    ("trace,debug", {"trace", "debug"}), ("trace, debug", {"trace", "debug"}),
    ("Warning+", {"warning", "error", "critical"}), ("none", set()), ("", set()),
    ("critical+", {"critical"}), ("trace+", set(LEVELS)), ("none,error", {"error"}),
    # 1.19 reads a level by its first letters (its example configs say "warn+")
    ("warn+", {"warning", "error", "critical"}), ("inf", {"info"}), ("NOT+", {"notice",
     "warning", "error", "critical"}), ("n", set()), ("tr,err", {"trace", "error"}),
])
def test_parse_enable(spec: str, levels: set) -> None:
    assert parse_enable(spec) == frozenset(levels)


def test_parse_enable_default_means_follow_default() -> None:
    assert parse_enable("default") is None
    assert parse_enable(" DEFAULT ") is None
    assert parse_enable("def") is None and parse_enable("d") is None  # 1.19's first match


@pytest.mark.parametrize("spec", ["loud", "info++", "default,info", "+", "info-", "debug,none+"])
def test_bad_enable_is_refused_everywhere(spec: str) -> None:
    with pytest.raises(LogConfigError):
        parse_enable(spec)
    with pytest.raises(SchemaError):
        load_schema().entity_type("log").attributes["enable"].convert(spec)
    err = error_of(f"log {{\n    module: ROUTER\n    enable: {spec}\n}}\n")
    assert err.line == 3


@given(st.text(max_size=30))
def test_schema_and_logging_agree_on_every_enable_string(spec: str) -> None:
    attr = load_schema().entity_type("log").attributes["enable"]
    try:
        parse_enable(spec)
        grammar_ok = True
    except LogConfigError:
        grammar_ok = False
    try:
        attr.convert(spec)
        schema_ok = True
    except SchemaError:
        schema_ok = False
    assert grammar_ok == schema_ok
    if grammar_ok:
        RouterLog([{"module": "ROUTER", "enable": spec}])  # and logging takes it


def test_log_section_without_enable_keeps_the_default_levels() -> None:
    cfg = conf("""
        log {
            module: ROUTER
            includeSource: yes
        }
        log {
            module: DEFAULT
        }
        log {
            module: AUTHSERVICE
        }
    """)
    log = RouterLog(build_spec(cfg)["logs"])
    assert log.levels("ROUTER") == parse_enable("info+")
    assert log.settings("ROUTER").source
    assert log.levels("DEFAULT") == parse_enable("info+")


def test_module_following_default_follows_later_changes() -> None:
    log = RouterLog([{"module": "ROUTER", "enable": "default"},
                     {"module": "SERVER", "enable": "error+"}])
    log.configure({"module": "DEFAULT", "enable": "trace+"})
    assert log.enabled("ROUTER", "trace") and not log.enabled("SERVER", "warning")
    log.configure({"module": "DEFAULT", "enable": "default"})
    assert log.levels("DEFAULT") == parse_enable("info+")


def test_unopenable_log_file_is_a_log_config_error(tmp_path: Path) -> None:
    with pytest.raises(LogConfigError, match="cannot open log file"):
        RouterLog([{"module": "DEFAULT", "outputFile": str(tmp_path / "no" / "such" / "x.log")}])


# --------------------------------------------------------------------------------------------
# vhost user groups (maxMessageSize per group, as 1.19)


def test_vhost_group_counts_become_integers() -> None:
    cfg = conf("""
        vhost {
            hostname: example.com
            maxMessageSize: 4096
            groups: {
                $default: {
                    users: *
                    maxMessageSize: 2000
                    maxSessions: "5"
                }
            }
        }
    """)
    [vhost] = build_spec(cfg)["vhosts"]
    assert vhost["maxMessageSize"] == 4096
    assert vhost["groups"]["$default"] == {"users": "*", "maxMessageSize": 2000, "maxSessions": 5}


@pytest.mark.parametrize("group", ['{"g": {"maxMessageSize": -1}}', '{"g": {"maxSenders": "x"}}',
                                   '{"g": 5}'])
def test_bad_vhost_groups_are_refused(group: str) -> None:
    err = error_of(f"vhost {{\n    hostname: v\n    groups: {group}\n}}\n")
    assert err.line == 3 and "groups" in err.message


# --------------------------------------------------------------------------------------------
# authServicePlugin (1.19's names, deprecated ones included)


def test_auth_service_plugin_section_and_listener() -> None:
    cfg = conf("""\
        sslProfile {
            name: to-auth
            caCertFile: /etc/ssl/certs/ca-certificates.crt
        }
        authServicePlugin {
            name: auth
            authService: auth.example:5671
            saslInitHostname: my-realm
            authSslProfile: to-auth
        }
        listener {
            port: 5672
            saslPlugin: auth
        }
        """)
    plugin = cfg.of_type("authServicePlugin")[0].attributes
    assert (plugin["authService"], plugin["realm"], plugin["sslProfile"]) == (
        "auth.example:5671", "my-realm", "to-auth")
    assert plugin["identity"] == "authServicePlugin/auth"  # 1.19 identifies it by its name
    spec = build_spec(cfg)
    assert [p["name"] for p in spec["authServicePlugins"]] == ["auth"]
    assert spec["listeners"][0]["saslPlugin"] == "auth"


@pytest.mark.parametrize("body, wanted", [
    ("listener {\n    port: 5672\n    saslPlugin: nope\n}\n",
     "qdrouterd.conf:1: listener attribute 'saslPlugin' names authServicePlugin 'nope'"),
    ("authServicePlugin {\n    name: p\n}\n",
     "qdrouterd.conf:1: authServicePlugin 'p': host (and port) or authService is required"),
    ("authServicePlugin {\n    name: p\n    host: h\n    sslProfile: nope\n}\n",
     "authServicePlugin attribute 'sslProfile' names sslProfile 'nope'"),
])
def test_auth_service_plugin_mistakes(body: str, wanted: str) -> None:
    assert wanted in str(error_of(body))


@pytest.mark.parametrize("listener, wanted", [
    ("requireEncryption: yes", "saslPlugin with TLS on the listener"),
    ("http: yes", "saslPlugin is not supported on an http listener"),
    ("saslMechanisms: EXTERNAL PLAIN", "EXTERNAL cannot be relayed"),
])
def test_what_a_relayed_listener_cannot_enforce_is_refused(listener: str, wanted: str) -> None:
    text = ("authServicePlugin {\n    name: auth\n    host: h\n}\n"
            f"listener {{\n    port: 5672\n    saslPlugin: auth\n    {listener}\n}}\n")
    assert wanted in str(error_of(text))
