"""SASL through Cyrus (issue #14): a sasldb the test makes with saslpasswd2, and the router's
``saslConfigDir`` naming the directory of its ``qdrouterd.conf`` (``pwcheck_method: auxprop``,
``auxprop_plugin: sasldb``, ``sasldb_path``, ``mech_list``) as the 1.19 docs describe.

Users are ``alice@qdtest`` (the realm saslpasswd2 -u gave). Checked: PLAIN (allowed without
TLS, as 1.19 hard-wires) and SCRAM-SHA-1/256 with right and wrong passwords,
ANONYMOUS refused by ``authenticatePeer: yes``, ``requireEncryption``, connectors with
saslUsername/saslPassword (``env:``/``file:``/``pass:``), qdstat with --sasl-* options.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from proton import SSLDomain
from proton.utils import BlockingConnection

import tlscerts
from conftest import free_port

TIMEOUT = 10
USERS = {"alice": "wonder-land", "bob": "the-builder"}
pytestmark = pytest.mark.skipif(not tlscerts.have_saslpasswd2(),
                                reason="saslpasswd2 (sasl2-bin) is not installed")


@pytest.fixture(scope="module")
def sasl_dir(tmp_path_factory):
    # ANONYMOUS stays in mech_list for the fixtures' management listener
    return tlscerts.make_sasldb(tmp_path_factory.mktemp("sasl"), USERS,
                                mechs="PLAIN SCRAM-SHA-1 SCRAM-SHA-256 DIGEST-MD5 ANONYMOUS "
                                      "EXTERNAL")


def connect(url: str, **kw):
    try:
        return BlockingConnection(url, timeout=TIMEOUT, **kw), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


def connections(port: int) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "tools.qdmanage", "query", "--type",
                          "connection", "-b", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def listener(port: int, **attrs: str) -> str:
    lines = ["host: 127.0.0.1", f"port: {port}"] + [f"{k}: {v}" for k, v in attrs.items()]
    return "listener {\n" + "".join(f"    {line}\n" for line in lines) + "}\n"


@pytest.fixture
def sasl_router(router_factory, sasl_dir):
    def make(extra: str, **kw):
        return router_factory(extra, router_attrs=f"saslConfigDir: {sasl_dir}", **kw)
    return make


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256"])
def test_password_mechanisms_right_and_wrong(sasl_router, mech):
    port = free_port()
    r = sasl_router(listener(port, authenticatePeer="yes", saslMechanisms=mech))
    good, err = connect(f"amqp://127.0.0.1:{port}", allowed_mechs=mech, user="alice@qdtest",
                        password=USERS["alice"], allow_insecure_mechs=True)
    assert good, err
    bad, err = connect(f"amqp://127.0.0.1:{port}", allowed_mechs=mech, user="alice@qdtest",
                       password="not-it", allow_insecure_mechs=True)
    assert bad is None and "unauthorized-access" in err and "Authentication failed" in err
    try:
        row = next(c for c in connections(r.port) if c.get("sasl") == mech)
        assert row["user"].startswith("alice") and row["isAuthenticated"] is True
    finally:
        good.close()


def test_authenticate_peer_refuses_anonymous(sasl_router):
    listed, default = free_port(), free_port()
    sasl_router(listener(listed, authenticatePeer="yes", saslMechanisms="PLAIN")
                + listener(default, authenticatePeer="yes"))
    for port in (listed, default):
        conn, err = connect(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS")
        assert conn is None and "unauthorized-access" in err
    # without saslMechanisms the listener offers the Cyrus mech_list (not ANONYMOUS)
    conn, err = connect(f"amqp://127.0.0.1:{default}", user="bob@qdtest",
                        password=USERS["bob"], allow_insecure_mechs=True)
    assert conn, err
    conn.close()


def test_require_encryption_refuses_plaintext(sasl_router, pki):
    plain, tls = free_port(), free_port()
    sasl_router(f"""
sslProfile {{
    name: tls
    certFile: {pki['server']}
    privateKeyFile: {pki['server_key']}
}}
""" + listener(plain, authenticatePeer="yes", saslMechanisms="PLAIN", requireEncryption="yes")
                + listener(tls, authenticatePeer="yes", saslMechanisms="PLAIN",
                           requireEncryption="yes", sslProfile="tls"))
    conn, err = connect(f"amqp://127.0.0.1:{plain}", allowed_mechs="PLAIN", user="bob@qdtest",
                        password=USERS["bob"], allow_insecure_mechs=True)
    assert conn is None
    conn, err = connect(f"amqp://127.0.0.1:{tls}", allowed_mechs="PLAIN", user="bob@qdtest",
                        password=USERS["bob"], allow_insecure_mechs=True)
    assert conn is None  # plaintext to the TLS port: refused too
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(pki["ca"])
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    conn, err = connect(f"amqps://localhost:{tls}", allowed_mechs="PLAIN", user="bob@qdtest",
                        password=USERS["bob"], ssl_domain=domain)
    assert conn, err
    conn.close()


@pytest.mark.parametrize("form", ["pass", "env", "file", "plain"])
def test_connector_credentials(sasl_router, router_factory, tmp_path, monkeypatch, form):
    port = free_port()
    target = sasl_router(listener(port, authenticatePeer="yes", saslMechanisms="PLAIN"),
                         router_id="Router.Target")
    pw_file = tmp_path / "pw"
    pw_file.write_text(USERS["alice"] + "\n")
    monkeypatch.setenv("QD_TEST_SASL_PW", USERS["alice"])
    password = {"pass": f"pass:{USERS['alice']}", "env": "env:QD_TEST_SASL_PW",
                "file": f"file:{pw_file}", "plain": USERS["alice"]}[form]
    router_factory(textwrap.dedent(f"""
        connector {{
            host: 127.0.0.1
            port: {port}
            saslMechanisms: PLAIN
            saslUsername: alice@qdtest
            saslPassword: {password}
        }}
        """), router_id="Router.Client")
    deadline = time.monotonic() + 15
    rows: list = []
    while time.monotonic() < deadline and not rows:
        rows = [c for c in connections(target.port) if c.get("container") == "Router.Client"]
        time.sleep(0.2)
    assert rows and rows[0]["sasl"] == "PLAIN" and rows[0]["user"].startswith("alice")


def test_qdstat_with_sasl_options(sasl_router, tmp_path):
    port = free_port()
    sasl_router(listener(port, authenticatePeer="yes", saslMechanisms="SCRAM-SHA-256 PLAIN"))
    pw = tmp_path / "pw"
    pw.write_text(USERS["bob"] + "\n")
    base = [sys.executable, "-m", "tools.qdstat", "-c", "-b", f"127.0.0.1:{port}",
            "--sasl-mechanisms", "SCRAM-SHA-256", "--sasl-username", "bob@qdtest"]
    ok = subprocess.run(base + ["--sasl-password", USERS["bob"]], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and "(SCRAM-SHA-256)" in ok.stdout, ok.stderr
    ok = subprocess.run(base + ["--sasl-password-file", str(pw)], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(base + ["--sasl-password", "wrong"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 1 and "unauthorized" in bad.stderr
