"""Vhost policy against a launched router with real proton clients (checked against a Qpid
Dispatch 1.19 build: same conditions, same POLICY log lines, same qdstat tables).

Connections are anonymous (user 'anonymous'); the open's hostname selects the vhost.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from proton import Endpoint, Message, symbol
from proton import ConnectionException, Disposition
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached, SendException

from conftest import RouterProcess, default_vhost_policy, free_port

T = 5.0
OPEN_DEFAULT = """
vhost {
    hostname: $default
    allowUnknownUser: true
    groups: {
        "$default": {
            "remoteHosts": "*",
            "sources": "*",
            "targets": "*",
            "allowAnonymousSender": true,
            "allowDynamicSource": true
        }
    }
}
"""
TENANT = """
vhost {
    hostname: tenant.a
    maxConnections: 2
    allowUnknownUser: true
    aliases: alias.a
    groups: {
        "$default": {
            "users": "*",
            "remoteHosts": "*",
            "sources": "public, tmp-${user}, a*",
            "targets": "public",
            "maxSessions": 2,
            "maxFrameSize": 2048,
            "allowDynamicSource": true
        }
    }
}
"""


def policy(max_connections: int = 65535, extra: str = "") -> str:
    return textwrap.dedent(f"""
        policy {{
            maxConnections: {max_connections}
            enableVhostPolicy: true
            defaultVhost: $default{extra}
        }}
        log {{
            module: POLICY
            enable: debug+
        }}
        """)


def connect(port: int, vhost=None):
    """(connection, None) if it stays open, else (None, the close condition text)."""
    try:
        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=T, virtual_host=vhost)
    except ConnectionException as exc:
        return None, str(exc)
    try:
        conn.wait(lambda: conn.conn.state & Endpoint.REMOTE_CLOSED, timeout=0.5)
    except ConnectionException as exc:
        return None, str(exc)
    except Exception:  # noqa: BLE001 - the timeout: still open
        return conn, None
    return None, str(conn.conn.remote_condition)


def cli(tool: str, port: int, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", f"tools.{tool}", "-b",
                           f"127.0.0.1:{port}", "-t", "5", *args],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _logged(router, *texts: str) -> None:
    """Each text is in the router's log, waited for (bounded): the process that decides writes
    its line as it refuses, and the client may hear the refusal before the line is written."""
    for text in texts:
        router.proc.wait_for_line(text, timeout=T)


def test_vhost_limit_by_hostname_and_alias(router_factory):
    router = router_factory(policy() + TENANT + OPEN_DEFAULT, workers=2)
    first, err = connect(router.port, "tenant.a")
    assert err is None
    second, err = connect(router.port, "alias.a")  # the same vhost through its alias
    assert err is None
    for name in ("tenant.a", "alias.a"):
        conn, err = connect(router.port, name)
        assert conn is None and "amqp:resource-limit-exceeded" in err
        assert "connection disallowed by local policy" in err
    other, err = connect(router.port, "elsewhere")  # the default vhost
    assert err is None
    # group settings: frame size and channel max follow the group
    assert first.conn.transport.remote_max_frame_size == 2048
    assert first.conn.transport.remote_channel_max == 1
    stats = cli("qdstat", router.port, "--vhoststats")
    row = next(line.split() for line in stats.splitlines() if line.strip().startswith("tenant.a"))
    assert row[1:4] == ["2", "2", "2"]  # approved, denied, current
    _logged(router, "POLICY (info) DENY AMQP Open for user 'anonymous', rhost '127.0.0.1', vhost "
            "'tenant.a': Connection denied by application connection limit",
            "vhost 'alias.a': proceeds using vhost 'tenant.a' ruleset")
    first.close()
    third = None
    deadline = time.monotonic() + T
    while third is None and time.monotonic() < deadline:  # the count comes back
        third, _ = connect(router.port, "tenant.a")
    assert third is not None
    for c in (second, other, third):
        c.close()


def test_links_by_sources_and_targets(router_factory):
    router = router_factory(policy() + TENANT + OPEN_DEFAULT)
    conn, err = connect(router.port, "tenant.a")
    assert err is None
    for addr in ("public", "tmp-anonymous", "abc"):
        conn.create_receiver(addr)
    conn.create_sender("public")
    conn.create_receiver(None, dynamic=True)
    for make in (lambda: conn.create_receiver("private"), lambda: conn.create_sender("private"),
                 lambda: conn.create_sender(None)):
        with pytest.raises(LinkDetached) as info:
            make()
        assert "amqp:unauthorized-access" in str(info.value)
        assert "link disallowed by local policy" in str(info.value)
    _logged(router, "DENY AMQP Attach receiver link 'private' for user 'anonymous', rhost "
            "'127.0.0.1', vhost 'tenant.a' based on link source name",
            "DENY AMQP Attach anonymous sender for user 'anonymous'")
    conn.close()
    stats = cli("qdstat", router.port, "--vhoststats")
    row = next(line.split() for line in stats.splitlines() if line.strip().startswith("tenant.a"))
    assert row[5:7] == ["2", "1"]  # senderDenied, receiverDenied


def test_policy_lines_name_the_open_hostname_and_multitenant_spaces_the_vhost(router_factory):
    """As 1.19: Begin/Attach/message policy lines say the vhost the client asked for (its
    open's hostname, here an alias), while a multiTenant listener's address space and its
    Connection Opened line use the vhost found (alias -> tenant.a; a listener's policyVhost
    -> tenant.a whatever the hostname)."""
    port = free_port()
    router = router_factory(policy() + TENANT + OPEN_DEFAULT + f"""
listener {{
    host: 127.0.0.1
    port: {port}
    multiTenant: yes
    policyVhost: tenant.a
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}}
log {{
    module: ROUTER_CORE
    enable: info+
}}
""")
    alias, err = connect(router.port, "alias.a")
    assert err is None
    with pytest.raises(LinkDetached):
        alias.create_receiver("private")
    _logged(router, "DENY AMQP Attach receiver link 'private' for user 'anonymous', rhost "
            "'127.0.0.1', vhost 'alias.a' based on link source name")
    spaced, err = connect(port, "whatever")
    assert err is None
    spaced.create_receiver("public")
    _logged(router, "vhost=tenant.a encrypted=no")
    deadline = time.monotonic() + T
    while "tenant.a/public" not in (table := cli("qdstat", router.port, "-a")):
        assert time.monotonic() < deadline, table
        time.sleep(0.1)
    assert "whatever/public" not in table
    for c in (alias, spaced):
        c.close()


def test_global_max_connections(router_factory):
    router = router_factory(policy(max_connections=2) + OPEN_DEFAULT, workers=2)
    kept = [connect(router.port)[0] for _ in range(2)]
    assert all(kept)
    conn, err = connect(router.port)
    # as 1.19: the socket is closed at accept (tests/system/test_policy_accept.py), so the
    # client sees its connection aborted before any protocol header
    assert conn is None and "connection aborted" in err
    _logged(router, "based on global connection count. nConnections= 2")
    for c in kept:
        c.close()


def test_per_host_limit_and_unknown_user(router_factory):
    router = router_factory(policy() + OPEN_DEFAULT + """
vhost {
    hostname: host.limited
    maxConnectionsPerHost: 1
    allowUnknownUser: true
    groups: {
        "$default": {"remoteHosts": "127.0.0.1", "sources": "*", "targets": "*"}
    }
}
vhost {
    hostname: members.only
    groups: {
        "team": {"users": "alice", "remoteHosts": "*"}
    }
}
vhost {
    hostname: elsewhere.only
    allowUnknownUser: true
    groups: {
        "$default": {"remoteHosts": "10.0.0.0-10.0.0.255"}
    }
}
""")
    first, err = connect(router.port, "host.limited")
    assert err is None
    conn, err = connect(router.port, "host.limited")
    assert conn is None and "amqp:resource-limit-exceeded" in err
    conn, err = connect(router.port, "members.only")
    assert conn is None and "amqp:resource-limit-exceeded" in err
    conn, err = connect(router.port, "elsewhere.only")
    assert conn is None and "amqp:resource-limit-exceeded" in err
    _logged(router, "Connection denied by application per host limit",
            "User is not in a user group and unknown users are denied",
            "User is not allowed to connect from this network host")
    first.close()


def test_user_id_proxy_and_anonymous_targets(router_factory):
    router = router_factory(policy() + """
vhost {
    hostname: $default
    allowUnknownUser: true
    groups: {
        "$default": {"remoteHosts": "*", "sources": "*", "targets": "ok.*, $management",
                     "allowAnonymousSender": true, "allowDynamicSource": true}
    }
}
""")
    conn, err = connect(router.port)
    assert err is None
    receiver = conn.create_receiver("ok.1")
    presettled = conn.create_sender(None, options=AtMostOnce())
    presettled.send(Message(address="ok.1", body="fine", user_id=b"anonymous"))
    assert receiver.receive(timeout=T).body == "fine"
    sender = conn.create_sender(None)
    # router annotations (stripped on the way in) must not hide the user-id from the check
    for msg in (Message(address="ok.1", body="x", user_id=b"mallory"),
                Message(address="ok.1", body="x", user_id=b"mallory",
                        annotations={symbol("x-opt-qd.trace"): ["0/Router.X"]}),
                Message(address="forbidden", body="y")):
        with pytest.raises(SendException) as info:
            sender.send(msg)
        assert info.value.state == Disposition.REJECTED
    conn.close()
    _logged(router, "DENY AMQP message to 'forbidden'")


def test_vhost_created_at_run_time_is_enforced(router_factory):
    router = router_factory(policy() + OPEN_DEFAULT)
    new = {"hostname": "runtime.vh", "maxConnections": 1, "allowUnknownUser": True,
           "groups": {"$default": {"remoteHosts": "*", "sources": "in", "targets": "out"}}}
    cli("qdmanage", router.port, "create", "--type=vhost", "--name=runtime.vh",
        f"hostname=runtime.vh", "maxConnections=1", "allowUnknownUser=true",
        "groups=" + json.dumps(new["groups"]))
    first, err = connect(router.port, "runtime.vh")
    assert err is None
    with pytest.raises(LinkDetached):
        first.create_receiver("elsewhere")
    first.create_receiver("in")
    conn, err = connect(router.port, "runtime.vh")
    assert conn is None and "amqp:resource-limit-exceeded" in err
    out = cli("qdstat", router.port, "--vhosts")
    assert "runtime.vh" in out
    # an option 1.19's policy code does not use is logged and ignored, as 1.19 does
    cli("qdmanage", router.port, "create", "--type=vhost", "--name=other.vh",
        "hostname=other.vh", "groups=" + json.dumps(
            {"g": {"users": "u", "remoteHosts": "*", "allowSomethingElse": False}}))
    router.proc.wait_for_line("POLICY (warning) Policy vhost 'other.vh' user group 'g' "
                                 "option 'allowSomethingElse' is ignored.")
    # an invalid value is refused (a PolicyError), as 1.19 refuses it
    bad = subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                          f"127.0.0.1:{router.port}", "-t", "5", "create", "--type=vhost",
                          "--name=bad.vh", "hostname=bad.vh", "groups=" + json.dumps(
                              {"g": {"users": "u", "remoteHosts": "*",
                                     "allowDynamicSource": "maybe"}})],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "illegal boolean value 'maybe'" in bad.stderr + bad.stdout
    cli("qdmanage", router.port, "delete", "--type=vhost", "--name=runtime.vh")
    first.close()


def test_policy_dir(router_factory, tmp_path):
    pdir = tmp_path / "policies"
    pdir.mkdir()
    (pdir / "a.json").write_text("##\n## Comment lines as 1.19's shipped files have\n##\n"
                                 + json.dumps([["vhost", {
                                     "hostname": "from.dir", "maxConnections": 1,
                                     "allowUnknownUser": True,
                                     "groups": {"$default": {"remoteHosts": "*", "sources": "*",
                                                             "targets": "*"}}}]]))
    router = router_factory(policy(extra=f"\n            policyDir: {pdir}") + OPEN_DEFAULT)
    first, err = connect(router.port, "from.dir")
    assert err is None
    conn, err = connect(router.port, "from.dir")
    assert conn is None and "amqp:resource-limit-exceeded" in err
    assert "from.dir" in cli("qdstat", router.port, "--vhosts")
    first.close()


def test_policy_dir_as_1_19_ships_them(router_factory, tmp_path):
    """A policy directory shaped like 1.19's examples ('##' header lines, a vhost named '',
    group options 1.19's policy code does not use, an entity that is not a vhost) loads as in
    1.19: the router starts, logs 1.19's warning for each ignored option and enforces the rest."""
    pdir = tmp_path / "policies"
    pdir.mkdir()
    vhosts = [["vhost", {"hostname": "", "allowUnknownUser": True,
                         "groups": {"$default": {"remoteHosts": "*", "maxConnections": 4}}}],
              ["vhost", {"hostname": "tenant.dir", "allowUnknownUser": True,
                         "groups": {"$default": {"remoteHosts": "*", "sources": "only",
                                                 "targets": "*", "maxConnections": 9}}}],
              ["listener", {"host": "127.0.0.1", "port": 1}]]
    (pdir / "tenants.json").write_text("##\n## Our tenants\n##\n\n" + json.dumps(vhosts,
                                                                                indent=2))
    router = router_factory(policy(extra=f"\n            policyDir: {pdir}") + OPEN_DEFAULT)
    for vhost in ("", "tenant.dir"):
        router.proc.wait_for_line(f"POLICY (warning) Policy vhost '{vhost}' user group "
                                  "'$default' option 'maxConnections' is ignored.")
    conn, err = connect(router.port, "tenant.dir")
    assert err is None
    conn.create_receiver("only")
    with pytest.raises(LinkDetached):
        conn.create_receiver("other")
    conn.close()


def test_connector_policy_vhost(router_factory):
    """connector policyVhost (as 1.19, compared with it): the named vhost's '$connector' group
    polices the links the peer opens on the outgoing connection; a vhost without that group
    gets the connection closed (amqp:resource-limit-exceeded) and 1.19's POLICY error line."""
    import link_opening_peer as lop
    good, bad = free_port(), free_port()
    links = [("send", "allowed.a"), ("send", "denied.a"), ("recv", "allowed.b"),
             ("recv", "denied.b")]
    peers = [lop.run_in_thread(good, links), lop.run_in_thread(bad, [("send", "allowed.a")])]
    try:
        router = router_factory(policy() + textwrap.dedent(f"""
            vhost {{
                hostname: conn.vh
                groups: {{
                    "$connector": {{
                        "sources": "allowed.*",
                        "targets": "allowed.*"
                    }}
                }}
            }}
            vhost {{
                hostname: nogroup.vh
                groups: {{
                    "other": {{
                        "users": "x"
                    }}
                }}
            }}
            connector {{
                name: out1
                host: 127.0.0.1
                port: {good}
                role: normal
                policyVhost: conn.vh
            }}
            connector {{
                name: out2
                host: 127.0.0.1
                port: {bad}
                role: normal
                policyVhost: nogroup.vh
            }}
            """))
        assert peers[0][0].done.wait(T * 3) and peers[1][0].done.wait(T * 3)
        denied = "amqp:unauthorized-access: link disallowed by local policy"
        assert {k: v for k, v in peers[0][0].results.items() if k != "connection"} == {
            "send:allowed.a": "open", "send:denied.a": denied, "recv:allowed.b": "open",
            "recv:denied.b": denied}
        assert peers[1][0].results == {
            "connection": "amqp:resource-limit-exceeded: connection disallowed by local policy"}
        router.proc.wait_for_line("POLICY (error) [C")
        assert "Failed to find policyVhost settings for connection '" in router.proc.output()
        assert "policyVhost: 'nogroup.vh'" in router.proc.output()
    finally:
        for peer in peers:
            lop.stop(*peer)


def test_qdstat_vhost_tables(router_factory):
    router = router_factory(policy() + TENANT + OPEN_DEFAULT)
    out = cli("qdstat", router.port, "--vhosts")
    assert "Vhosts" in out
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("tenant.a"))
    assert row == ["tenant.a", "2", "None", "65535", "65535", "True", "1"]
    out = cli("qdstat", router.port, "--vhostgroups")
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("tenant.a"))
    assert row == ["tenant.a", "$default", "(nil)", "(nil)", "(nil)", "2048", "(nil)", "2",
                   "2147483647", "2147483647", "True", "False", "False", "True", "True", "True",
                   "True"]
    assert "Vhost 'tenant.a' UserGroup '$default'" in out
    out = cli("qdstat", router.port, "--vhoststats")
    assert "Vhost User Stats" in out and "anonymous" in out


@pytest.mark.parametrize("section, text", [
    ("vhost {\n    hostname: x\n    aliases: x\n}\n", "duplicates vhost name"),
    ("vhost {\n    hostname: x\n    groups: {\"g\": {\"users\": \"u\", \"remoteHosts\": \"*\", "
     "\"sources\": \"a\", \"sourcePattern\": \"b\"}}\n}\n", "conflicting"),
])
def test_refused_at_start(tmp_path, section, text):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"router {{\n    id: R\n}}\n{section}")
    done = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert f"{conf}:4" in done.stderr and text in done.stderr


DENIALS_POLICY = default_vhost_policy({"sources": "ok", "targets": "ok"}) + """\
log {
    module: POLICY
    enable: debug+
}
"""


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_close_reports_the_vhosts_denials_as_1_19(router_of_kind, kind):
    """At a policy connection's close, 1.19's POLICY line with what it holds and its vhost's
    denials so far (they add up over the vhost's connections)."""
    import re  # noqa: PLC0415

    router = router_of_kind(kind, DENIALS_POLICY)
    for n in (1, 2):
        conn = BlockingConnection(router.url, timeout=10)
        try:
            conn.create_receiver("ok")
            conn.create_sender("ok")
            for attach in (lambda: conn.create_sender("no"), lambda: conn.create_receiver("no"),
                           lambda: conn.create_receiver("no2")):
                with pytest.raises(LinkDetached):
                    attach()
        finally:
            conn.close()
        line = router.proc.wait_for_line(
            f"sessions_denied=0, senders_denied={n}, receivers_denied={2 * n}", 10)
        assert re.search(r"POLICY \(debug\) \[C\d+\] Connection '127\.0\.0\.1:\d+' closed with "
                         r"resources n_sessions=1, n_senders=1, n_receivers=1, "
                         rf"sessions_denied=0, senders_denied={n}, receivers_denied={2 * n}, "
                         r"max_message_size_denied:0, nConnections= 0\.", line), line


def _deny_one_sender_two_receivers(conn) -> None:
    for attach in (lambda: conn.create_sender("no"), lambda: conn.create_receiver("no"),
                   lambda: conn.create_receiver("no2")):
        with pytest.raises(LinkDetached):
            attach()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_close_reports_the_vhosts_denials_router_wide_as_1_19(router_of_kind, kind):
    """1.19 keeps one set of denial counts per vhost for the whole router. Here two
    connections of the vhost land on different I/O worker processes: the POLICY line at the
    second one's close still reports both connections' denials (as vhostStats counts them)."""
    import os  # noqa: PLC0415
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from bench_recovery import children, client_ports, holder_of_client  # noqa: PLC0415

    router = router_of_kind(kind, DENIALS_POLICY, **({"workers": 2} if kind == "ours" else {}))
    workers = ({k: v for k, v in children(router.proc.proc.pid).items()
                if k.startswith("worker")} if kind == "ours" else {})
    assert kind != "ours" or len(workers) == 2, workers

    def open_on(avoid):
        """A connection (and its client port) not held by worker ``avoid`` (bounded)."""
        for _ in range(40):
            before = client_ports(router.port)
            conn = BlockingConnection(router.url, timeout=10)
            [port] = client_ports(router.port) - before
            owner = holder_of_client(router.port, workers, port) if workers else None
            if avoid is None or owner != avoid:
                return conn, port, owner
            conn.close()
        pytest.fail(f"every connection landed on {avoid}")

    used = None
    for n in (1, 2):
        conn, port, used = open_on(used)
        try:
            _deny_one_sender_two_receivers(conn)
        finally:
            conn.close()
        line = router.proc.wait_for_line(f"Connection '127.0.0.1:{port}' closed with ", 10)
        assert (f"n_sessions=1, n_senders=0, n_receivers=0, sessions_denied=0, "
                f"senders_denied={n}, receivers_denied={2 * n}, max_message_size_denied:0, "
                f"nConnections= 0.") in line, line
