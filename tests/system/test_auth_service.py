"""authServicePlugin (1.19): a listener's clients are authenticated by a remote service.

A real service (tests/authsvc.py: proton with Cyrus SASL over a sasldb the test makes with
saslpasswd2) answers the router's open with ``authenticated-identity`` and ``address-authz``;
real routers (ours, and Qpid Dispatch 1.19 when QDROUTERD_1X names it) relay the clients' SASL
to it and police their links with the addresses it grants. Users are ``alice@qdtest`` (grants
below) and ``bob@qdtest`` (no address-authz: unrestricted).
"""
from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import proton
import pytest
from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached, SendException

import tlscerts
from conftest import free_port

TIMEOUT = 10
USERS = {"alice": "wonder-land", "bob": "the-builder"}
GRANTS = {"alice@qdtest": {"orders": ["send", "recv"], "audit": ["recv"], "pub.*": ["send"]}}
AUTHSVC = Path(__file__).resolve().parent.parent / "authsvc.py"
pytestmark = pytest.mark.skipif(not tlscerts.have_saslpasswd2(),
                                reason="saslpasswd2 (sasl2-bin) is not installed")


@pytest.fixture(scope="module")
def sasl_dir(tmp_path_factory):
    return tlscerts.make_sasldb(tmp_path_factory.mktemp("authsvc"), USERS,
                                mechs="PLAIN SCRAM-SHA-1 SCRAM-SHA-256")


class Service:
    def __init__(self, sasl_dir: Path, opens: Path, cert: str = "", key: str = "") -> None:
        self.port = free_port()
        self.opens = opens
        args = [sys.executable, str(AUTHSVC), "--port", str(self.port), "--sasl-dir",
                str(sasl_dir), "--grants", json.dumps(GRANTS), "--opens", str(opens)]
        if cert:
            args += ["--cert", cert, "--key", key]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, stdin=subprocess.DEVNULL)
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)  # bounded wait
        if not ready:
            self.stop()
            pytest.fail("the auth service did not start")
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + (self.proc.stdout.read() or "")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def opens_seen(self) -> list:
        if not self.opens.exists():
            return []
        return [json.loads(line) for line in self.opens.read_text().splitlines()]


@pytest.fixture
def service_factory(sasl_dir, tmp_path):
    started = []

    def make(**kw) -> Service:
        svc = Service(sasl_dir, tmp_path / f"opens-{len(started)}.jsonl", **kw)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


@pytest.fixture
def service(service_factory) -> Service:
    return service_factory()


def plugin_config(port: int, svc_port: int, mechs: str = "PLAIN SCRAM-SHA-1",
                  plugin_extra: str = "", extra: str = "") -> str:
    return f"""
authServicePlugin {{
    name: auth
    host: 127.0.0.1
    port: {svc_port}
{plugin_extra}}}
listener {{
    host: 127.0.0.1
    port: {port}
    saslPlugin: auth
    saslMechanisms: {mechs}
}}
{extra}"""


def connect(port: int, user: str, password: str, mech: str = "PLAIN"):
    try:
        return BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=TIMEOUT,
                                  allowed_mechs=mech, user=user, password=password,
                                  allow_insecure_mechs=True), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


def attach_error(fn) -> str:
    try:
        link = fn()
    except LinkDetached as exc:
        return str(exc)
    link.close()
    return ""


@pytest.mark.parametrize("kind", ["ours", "1.x"])
@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-1"])
def test_right_and_wrong_password(router_of_kind, service, kind, mech):
    port = free_port()
    router_of_kind(kind, plugin_config(port, service.port))
    good, err = connect(port, "alice@qdtest", USERS["alice"], mech)
    assert good is not None, err
    good.close()
    bad, err = connect(port, "alice@qdtest", "not-it", mech)
    assert bad is None and "unauthorized-access" in err and "Authentication failed" in err
    # what the router asked the service for (1.19's open: ADDRESS-AUTHZ, its product)
    seen = service.opens_seen()
    assert seen and seen[0]["capabilities"] == ["ADDRESS-AUTHZ"]
    assert seen[0]["hostname"] == "127.0.0.1" and seen[0]["user"] == "alice@qdtest"
    assert seen[0]["properties"]["product"] == "qpid-dispatch-router"


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_granted_and_forbidden_addresses(router_of_kind, service, kind):
    port = free_port()
    router_of_kind(kind, plugin_config(port, service.port))
    conn, err = connect(port, "alice@qdtest", USERS["alice"])
    assert conn is not None, err
    try:
        # granted: send and receive on orders, send on pub.* (a prefix), receive on audit
        receiver = conn.create_receiver("orders")
        sender = conn.create_sender("orders", options=AtMostOnce())  # (no wait for accept)
        sender.send(Message(body="granted"))
        assert receiver.receive(timeout=TIMEOUT).body == "granted"  # (pre-settled)
        assert attach_error(lambda: conn.create_sender("pub.news")) == ""
        assert attach_error(lambda: conn.create_receiver("audit")) == ""
        # forbidden: what was not granted, each direction on its own
        for make in (lambda: conn.create_sender("audit"),
                     lambda: conn.create_receiver("pub.news"),
                     lambda: conn.create_sender("elsewhere"),
                     lambda: conn.create_receiver("elsewhere")):
            err = attach_error(make)
            assert "amqp:unauthorized-access" in err
            assert "link disallowed by local policy" in err
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_anonymous_sender_only_to_granted_targets(router_of_kind, service, kind):
    """Dynamic sources and anonymous senders are allowed; a message to an address the grant
    lacks is rejected (amqp:unauthorized-access), one to a granted address goes through."""
    port = free_port()
    router_of_kind(kind, plugin_config(port, service.port))
    conn, err = connect(port, "alice@qdtest", USERS["alice"])
    assert conn is not None, err
    try:
        receiver = conn.create_receiver("orders")
        dynamic = conn.create_receiver(None, dynamic=True)
        presettled = conn.create_sender(None, options=AtMostOnce())
        presettled.send(Message(address="orders", body="ok"))
        assert receiver.receive(timeout=TIMEOUT).body == "ok"  # (pre-settled)
        anonymous = conn.create_sender(None)  # unsettled: the router's outcome comes back
        with pytest.raises(SendException) as exc:
            anonymous.send(Message(address=dynamic.remote_source.address, body="no"))
        assert exc.value.state == proton.Delivery.REJECTED
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_user_without_grant_is_unrestricted(router_of_kind, service, kind):
    port = free_port()
    router_of_kind(kind, plugin_config(port, service.port))
    conn, err = connect(port, "bob@qdtest", USERS["bob"], "SCRAM-SHA-1")
    assert conn is not None, err
    try:
        assert attach_error(lambda: conn.create_sender("anything")) == ""
        assert attach_error(lambda: conn.create_receiver("anything")) == ""
    finally:
        conn.close()


def connection_rows(port: int) -> list:
    out = subprocess.run([sys.executable, "-m", "tools.qdmanage", "query", "--type",
                          "connection", "-b", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_management_shows_the_services_identity(router_factory, service):
    port = free_port()
    r = router_factory(plugin_config(port, service.port))
    conn, err = connect(port, "alice@qdtest", USERS["alice"], "SCRAM-SHA-1")
    assert conn is not None, err
    try:
        row = next(c for c in connection_rows(r.port) if c.get("user") == "alice@qdtest")
        assert row["sasl"] == "SCRAM-SHA-1" and row["isAuthenticated"] is True
        r.proc.wait_for_line("authenticated as alice@qdtest")
        r.proc.wait_for_line("Enabling remote authentication service 127.0.0.1:")
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_service_unreachable(router_of_kind, kind):
    """No service: the client is refused, never left hanging. Ours answers the SASL header
    and a sys-temp outcome (proton reports unauthorized-access); 1.19 sends its auth outcome
    without the SASL header before it, which the client reports as a framing error."""
    port = free_port()
    r = router_of_kind(kind, plugin_config(port, free_port()))
    wanted = "unauthorized-access" if kind == "ours" else "ConnectionException"
    for _ in range(2):  # the router goes on: the next client is answered the same way
        conn, err = connect(port, "alice@qdtest", USERS["alice"])  # (a hang: Timeout)
        assert conn is None and wanted in err, err
    if kind == "ours":
        r.proc.wait_for_line("Downstream disconnected: authentication service 127.0.0.1:")


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_service_over_tls(router_of_kind, service_factory, pki, kind):
    svc = service_factory(cert=pki["server"], key=pki["server_key"])
    port = free_port()
    router_of_kind(kind, plugin_config(
        port, svc.port, plugin_extra="    sslProfile: to-auth\n",
        extra=f"sslProfile {{\n    name: to-auth\n    caCertFile: {pki['ca']}\n}}\n"))
    conn, err = connect(port, "alice@qdtest", USERS["alice"])
    assert conn is not None, err
    try:
        assert attach_error(lambda: conn.create_sender("audit")) != ""  # the grant applies
    finally:
        conn.close()


def test_service_with_an_untrusted_certificate_is_refused(router_factory, service_factory,
                                                           pki):
    svc = service_factory(cert=pki["server"], key=pki["server_key"])
    port = free_port()
    r = router_factory(plugin_config(
        port, svc.port, plugin_extra="    sslProfile: to-auth\n",
        extra=f"sslProfile {{\n    name: to-auth\n    caCertFile: {pki['other_ca']}\n}}\n"))
    conn, err = connect(port, "alice@qdtest", USERS["alice"])
    assert conn is None and "unauthorized-access" in err, err
    r.proc.wait_for_line("TLS handshake failed")
    assert not svc.opens_seen()


def start_refused(tmp_path, text: str) -> str:
    conf = tmp_path / "bad.conf"
    conf.write_text("router {\n    mode: standalone\n}\n" + text)
    out = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_settings_that_cannot_be_enforced_are_refused_at_start(tmp_path, pki):
    # a listener naming a plugin that does not exist
    text = start_refused(tmp_path, "listener {\n    port: %d\n    saslPlugin: nope\n}\n"
                         % free_port())
    assert "bad.conf:4:" in text and "authServicePlugin 'nope'" in text
    # TLS on the listener itself: the relay needs the client's SASL in the clear
    text = start_refused(tmp_path, plugin_config(free_port(), free_port(), extra=(
        f"sslProfile {{\n    name: srv\n    certFile: {pki['server']}\n"
        f"    privateKeyFile: {pki['server_key']}\n}}\n")).replace(
        "    saslPlugin: auth\n", "    saslPlugin: auth\n    sslProfile: srv\n"))
    assert "saslPlugin with TLS on the listener" in text
    # a plugin without a host
    text = start_refused(tmp_path, "authServicePlugin {\n    name: p\n}\n")
    assert "host (and port) or authService is required" in text


def qdmanage(port: int, *args: str):
    return subprocess.run([sys.executable, "-m", "tools.qdmanage", *args, "-b",
                           f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)


def test_qdmanage_create_and_delete(router_factory, service):
    r = router_factory()
    out = qdmanage(r.port, "create", "--type", "authServicePlugin", "name=auth",
                   "host=127.0.0.1", f"port={service.port}")
    assert out.returncode == 0, out.stderr
    port = free_port()
    out = qdmanage(r.port, "create", "--type", "listener", "name=relayed", "host=127.0.0.1",
                   f"port={port}", "saslPlugin=auth", "saslMechanisms=PLAIN")
    assert out.returncode == 0, out.stderr
    r.proc.wait_for_line(f"Listening on 127.0.0.1:{port}")
    conn, err = connect(port, "alice@qdtest", USERS["alice"])
    assert conn is not None, err
    conn.close()
    out = qdmanage(r.port, "delete", "--type", "authServicePlugin", "--name", "auth")
    assert out.returncode != 0 and "used by listener 'relayed'" in out.stderr
    assert qdmanage(r.port, "delete", "--type", "listener", "--name",
                    "relayed").returncode == 0
    out = qdmanage(r.port, "delete", "--type", "authServicePlugin", "--name", "auth")
    assert out.returncode == 0, out.stderr
    out = qdmanage(r.port, "create", "--type", "listener", "host=127.0.0.1",
                   f"port={free_port()}", "saslPlugin=auth")
    assert out.returncode != 0 and "no authServicePlugin with that name" in out.stderr


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\n\r\n",                                        # not AMQP
    b"AMQP\x00\x01\x00\x00" + b"\x00" * 40,                            # AMQP without SASL
    b"AMQP\x03\x01\x00\x00\x00\x00\x00\x0c\x02\x01\x00\x00\x00\x53\x43\x45",  # undecodable
    b"AMQP\x03\x01\x00\x00\xff\xff\xff\xff\x02\x01\x00\x00",           # a 4 GB frame
])
def test_hostile_client_bytes_close_that_connection_only(router_factory, service, garbage):
    """Whatever a client sends a relayed listener, it gets at most our SASL header and an
    outcome, then its connection closes; the service is not bothered and the next client
    authenticates."""
    import socket
    port = free_port()
    router_factory(plugin_config(port, service.port))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(garbage)
        answer = b""
        while True:  # until the router closes (bounded by the socket timeout)
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"AMQP\x03\x01\x00\x00")
    assert not service.opens_seen()
    conn, err = connect(port, "alice@qdtest", USERS["alice"])
    assert conn is not None, err
    conn.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_deprecated_names(router_of_kind, service_factory, pki, kind):
    """authService (host:port) and authSslProfile, as 1.19's own deprecated-names test."""
    svc = service_factory(cert=pki["server"], key=pki["server_key"])
    port = free_port()
    router_of_kind(kind, f"""
sslProfile {{
    name: to-auth
    caCertFile: {pki['ca']}
}}
authServicePlugin {{
    name: auth
    authService: 127.0.0.1:{svc.port}
    authSslProfile: to-auth
}}
listener {{
    host: 127.0.0.1
    port: {port}
    saslPlugin: auth
    saslMechanisms: SCRAM-SHA-1 PLAIN
}}
""")
    conn, err = connect(port, "alice@qdtest", USERS["alice"], "SCRAM-SHA-1")
    assert conn is not None, err
    conn.close()
    assert svc.opens_seen()[0]["user"] == "alice@qdtest"


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_listener_mechanisms_narrow_the_services(router_of_kind, service, kind):
    """The service offers PLAIN, SCRAM-SHA-1 and SCRAM-SHA-256; a listener with
    saslMechanisms SCRAM-SHA-1 offers only that (1.19 too), so a PLAIN-only client finds
    nothing it can use, and a SCRAM-SHA-1 one gets in."""
    port = free_port()
    router_of_kind(kind, plugin_config(port, service.port, mechs="SCRAM-SHA-1"))
    conn, err = connect(port, "alice@qdtest", USERS["alice"], "PLAIN")
    assert conn is None and "Authentication failed [mech=none]" in err, err
    conn, err = connect(port, "alice@qdtest", USERS["alice"], "SCRAM-SHA-1")
    assert conn is not None, err
    conn.close()
