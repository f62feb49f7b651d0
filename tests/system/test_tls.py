"""TLS on listeners and connectors (issue #14), against launched routers with certificates the
tests make (tests/tlscerts.py). Expectations checked against Qpid Dispatch 1.19:

* a listener with an sslProfile accepts TLS and plaintext clients (``ssl: true`` on both,
  ``isEncrypted`` only on TLS) unless ``requireSsl: yes``, where proton refuses plaintext;
* clients verify the router's certificate (wrong CA, wrong name, expired: refused);
* ``saslMechanisms: EXTERNAL`` demands a client certificate signed by ``caCertFile``; the user
  is the certificate subject, or the ``uidFormat`` fields joined by ``;``;
* a setting that cannot be enforced stops the start with ``FILE:LINE: problem``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from proton import SSLDomain
from proton.utils import BlockingConnection

import tlscerts
from conftest import RouterProcess, free_port

TIMEOUT = 10


def domain(pki: dict, ca: str = "ca", cert: str | None = None,
           verify: int = SSLDomain.VERIFY_PEER_NAME) -> SSLDomain:
    d = SSLDomain(SSLDomain.MODE_CLIENT)
    d.set_trusted_ca_db(pki[ca])
    d.set_peer_authentication(verify)
    if cert:
        d.set_credentials(pki[cert], pki[cert + "_key"], None)
    return d


def connect(url: str, **kw):
    """(connection, None) or (None, error text)."""
    try:
        return BlockingConnection(url, timeout=TIMEOUT, **kw), None
    except Exception as exc:  # noqa: BLE001 - the test looks at the text
        return None, f"{type(exc).__name__}: {exc}"


def qdstat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.qdstat", *args],
                          capture_output=True, text=True, timeout=60)


def qdmanage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.qdmanage", *args],
                          capture_output=True, text=True, timeout=60)


def connections(router) -> list[dict]:
    out = qdmanage("query", "--type", "connection", "-b", f"127.0.0.1:{router.port}")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def profile(pki: dict, name: str = "tls", cert: str = "server", **more: str) -> str:
    lines = [f"name: {name}", f"certFile: {pki[cert]}", f"privateKeyFile: {pki[cert + '_key']}",
             f"caCertFile: {pki['ca']}"] + [f"{k}: {v}" for k, v in more.items()]
    return "sslProfile {\n" + "".join(f"    {line}\n" for line in lines) + "}\n"


def listener(port: int, **attrs: str) -> str:
    lines = ["host: 127.0.0.1", f"port: {port}"] + [f"{k}: {v}" for k, v in attrs.items()]
    return "listener {\n" + "".join(f"    {line}\n" for line in lines) + "}\n"


def test_tls_and_plaintext_on_one_listener_and_require_ssl(router_factory, pki):
    both, strict = free_port(), free_port()
    r = router_factory(profile(pki) + listener(both, sslProfile="tls",
                                               saslMechanisms="ANONYMOUS")
                       + listener(strict, sslProfile="tls", requireSsl="yes",
                                  saslMechanisms="ANONYMOUS"))
    tls, err = connect(f"amqps://localhost:{both}", ssl_domain=domain(pki),
                       allowed_mechs="ANONYMOUS")
    assert tls, err
    plain, err = connect(f"amqp://127.0.0.1:{both}", allowed_mechs="ANONYMOUS")
    assert plain, err
    strict_tls, err = connect(f"amqps://localhost:{strict}", ssl_domain=domain(pki),
                              allowed_mechs="ANONYMOUS")
    assert strict_tls, err
    refused, err = connect(f"amqp://127.0.0.1:{strict}", allowed_mechs="ANONYMOUS")
    assert refused is None and "protocol header" in err  # proton's answer, as in 1.19
    try:
        rows = [c for c in connections(r) if c["host"].startswith("127.0.0.1")
                and c.get("ssl")]
        encrypted = [c for c in rows if c["isEncrypted"]]
        assert len(encrypted) == 2 and len(rows) == 3  # both TLS ones + the plaintext one
        for c in encrypted:
            assert c["sslProto"].startswith("TLSv1") and c["sslCipher"] and c["sslSsf"] >= 128
            assert c["isAuthenticated"] is True and c["user"] == "anonymous"
        plain_row = next(c for c in rows if not c["isEncrypted"])
        # qdmanage leaves null attributes out, as 1.19 does
        assert plain_row.get("sslProto") is None and plain_row["sslSsf"] == 0
    finally:
        for c in (tls, plain, strict_tls):
            c.close()


@pytest.mark.parametrize("case", ["wrong-ca", "wrong-name", "expired"])
def test_client_refuses_a_router_it_cannot_verify(router_factory, pki, case):
    port = free_port()
    cert = {"wrong-ca": "server", "wrong-name": "wrongname", "expired": "expired"}[case]
    router_factory(profile(pki, cert=cert) + listener(port, sslProfile="tls",
                                                      saslMechanisms="ANONYMOUS"))
    conn, err = connect(f"amqps://localhost:{port}", allowed_mechs="ANONYMOUS",
                        ssl_domain=domain(pki, ca="other_ca" if case == "wrong-ca" else "ca"))
    assert conn is None and "certificate verify failed" in err


def test_external_with_client_certificates_and_uid_format(router_factory, pki, tmp_path):
    plain_uid, mapped = free_port(), free_port()
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"Acme;QA": "qa-team"}))
    r = router_factory(
        profile(pki, "subject") + profile(pki, "mapped", uidFormat="ou",
                                          uidNameMappingFile=str(names))
        + listener(plain_uid, sslProfile="subject", authenticatePeer="yes",
                   saslMechanisms="EXTERNAL")
        + listener(mapped, sslProfile="mapped", authenticatePeer="yes",
                   saslMechanisms="EXTERNAL"))
    a, err = connect(f"amqps://localhost:{plain_uid}", allowed_mechs="EXTERNAL",
                     ssl_domain=domain(pki, cert="client"))
    assert a, err
    b, err = connect(f"amqps://localhost:{mapped}", allowed_mechs="EXTERNAL",
                     ssl_domain=domain(pki, cert="client"))
    assert b, err
    for cert in (None, "rogue"):  # no certificate, or one from another CA: refused
        conn, err = connect(f"amqps://localhost:{plain_uid}", allowed_mechs="EXTERNAL",
                            ssl_domain=domain(pki, cert=cert))
        assert conn is None and "SSL Failure" in err
    conn, err = connect(f"amqp://127.0.0.1:{plain_uid}", allowed_mechs="ANONYMOUS")
    assert conn is None
    try:
        users = {c["user"]: c for c in connections(r) if c.get("sasl") == "EXTERNAL"}
        assert set(users) == {"CN=client1,OU=QA,O=Acme,L=Columbus,ST=Ohio,C=US", "qa-team"}
        assert all(c["isAuthenticated"] and c["isEncrypted"] for c in users.values())
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("form", ["pass", "env", "file", "passwordFile", "plain"])
def test_private_key_password_forms(router_factory, pki, tmp_path, monkeypatch, form):
    pw_file = tmp_path / "pw.txt"
    pw_file.write_text(tlscerts.KEY_PASSWORD + "\nsecond line ignored\n")
    monkeypatch.setenv("QD_TEST_KEY_PW", tlscerts.KEY_PASSWORD)
    attr = {"pass": f"password: pass:{tlscerts.KEY_PASSWORD}",
            "env": "password: env:QD_TEST_KEY_PW",
            "file": f"password: file:{pw_file}",
            "passwordFile": f"passwordFile: {pw_file}",
            "plain": f"password: {tlscerts.KEY_PASSWORD}"}[form]
    port = free_port()
    router_factory(f"""
sslProfile {{
    name: enc
    certFile: {pki['server']}
    privateKeyFile: {pki['server_enc_key']}
    {attr}
}}
""" + listener(port, sslProfile="enc", saslMechanisms="ANONYMOUS"))
    conn, err = connect(f"amqps://localhost:{port}", ssl_domain=domain(pki),
                        allowed_mechs="ANONYMOUS")
    assert conn, err
    conn.close()


def _refused(tmp_path: Path, body: str) -> str:
    conf = tmp_path / "bad.conf"
    conf.write_text("router {\n    mode: standalone\n    id: Bad\n}\n" + body)
    proc = RouterProcess(conf)
    try:
        assert proc.proc.wait(30) == 1
    finally:
        proc.stop()
    return proc.output()


@pytest.mark.parametrize("case, expect", [
    ("requireSsl", "requireSsl needs an sslProfile"),
    ("missingEnv", "environment variable 'QD_NOT_SET_ANYWHERE'"),
    ("externalNoCa", "EXTERNAL needs an sslProfile with caCertFile"),
    ("trustedCerts", "trustedCertsFile"),
    ("uidFormat", "uidFormat 'xyz'"),
    ("listenerNoCert", "has no certFile"),
    ("connectorExternalNoCert", "EXTERNAL needs an sslProfile with certFile"),
])
def test_unenforceable_settings_are_refused_at_start(tmp_path, pki, case, expect):
    ok = profile(pki)
    bodies = {
        "requireSsl": listener(5999, requireSsl="yes"),
        "missingEnv": ok.replace("}\n", "    password: env:QD_NOT_SET_ANYWHERE\n}\n"),
        "externalNoCa": ok.replace(f"    caCertFile: {pki['ca']}\n", "")
        + listener(5999, sslProfile="tls", saslMechanisms="EXTERNAL"),
        "trustedCerts": listener(5999, trustedCertsFile=pki["ca"]),
        "uidFormat": ok.replace("}\n", "    uidFormat: xyz\n}\n"),
        "listenerNoCert": f"sslProfile {{\n    name: tls\n    caCertFile: {pki['ca']}\n}}\n"
        + listener(5999, sslProfile="tls"),
        "connectorExternalNoCert": f"sslProfile {{\n    name: tls\n    caCertFile: {pki['ca']}"
        "\n}\nconnector {\n    host: 127.0.0.1\n    port: 5999\n    sslProfile: tls\n"
        "    saslMechanisms: EXTERNAL\n}\n",
    }
    output = _refused(tmp_path, bodies[case])
    assert "bad.conf:" in output and expect in output, output
    line = next(ln for ln in output.splitlines() if "bad.conf:" in ln)
    assert line.split("bad.conf:")[1].split(":")[0].isdigit()  # FILE:LINE:


@pytest.mark.parametrize("setting", ["protocols: SSLv23", "ciphers: NOSUCHCIPHER",
                                     "certFile: /nonexistent/cert.pem",
                                     "caCertFile: /nonexistent/ca.pem"])
def test_profile_the_tls_library_rejects_fails_its_connections_only(router_factory, pki,
                                                                     setting):
    """As 1.19: the router starts; every connection to the listener whose sslProfile has
    protocols, ciphers or files the TLS library rejects fails (amqp:internal-error); the
    other listeners work. Files that will not load are named in a warning at start."""
    bad = free_port()
    name, value = setting.split(": ")
    files = {"certFile": pki["server"], "caCertFile": pki["ca"]}
    body = (profile(pki, name="bad").replace(files[name], value) if name in files
            else profile(pki, name="bad", **{name: value}))
    r = router_factory(body
                       + listener(bad, sslProfile="bad", saslMechanisms="ANONYMOUS"))
    conn, err = connect(f"amqps://localhost:{bad}", ssl_domain=domain(pki),
                        allowed_mechs="ANONYMOUS")
    assert conn is None, "a TLS connection was accepted with a profile the library rejects"
    if name in files:
        r.proc.wait_for_line(f"SERVER (warning) sslProfile 'bad': ")
    r.proc.wait_for_line(f"amqp:internal-error TLS set-up failed: sslProfile 'bad'")
    ok, err = connect(r.url)
    assert ok, err
    ok.close()


def test_ssl_profile_through_management_and_qdstat_over_tls(router_factory, pki):
    tls_port = free_port()
    r = router_factory(profile(pki) + listener(tls_port, sslProfile="tls", requireSsl="yes",
                                               authenticatePeer="yes",
                                               saslMechanisms="EXTERNAL"))
    mgmt = ["-b", f"amqps://localhost:{tls_port}", "--ssl-trustfile", pki["ca"],
            "--ssl-certificate", pki["client"], "--ssl-key", pki["client_key"],
            "--sasl-mechanisms", "EXTERNAL"]
    out = qdstat("-c", *mgmt)
    assert out.returncode == 0, out.stderr
    assert "TLSv1" in out.stdout and "x.509" in out.stdout
    # without a client certificate the router refuses management over this port
    out = qdstat("-c", "-b", f"amqps://localhost:{tls_port}", "--ssl-trustfile", pki["ca"])
    assert out.returncode == 1
    # run-time sslProfile: CREATE, a listener using it, DELETE refused while used
    bad = qdmanage("create", "--type", "sslProfile", "--name", "bad", *mgmt,
                   f"certFile={pki['server']}", f"privateKeyFile={pki['server_key']}",
                   "uidFormat=xyz")
    assert bad.returncode == 1 and "uidFormat 'xyz'" in bad.stderr
    made = qdmanage("create", "--type", "sslProfile", "--name", "rt", *mgmt,
                    f"certFile={pki['server']}", f"privateKeyFile={pki['server_key']}",
                    f"caCertFile={pki['ca']}")
    assert made.returncode == 0, made.stderr
    read = qdmanage("read", "--type", "sslProfile", "--name", "rt", *mgmt)
    assert read.returncode == 0 and json.loads(read.stdout)["certFile"] == pki["server"]
    new_port = free_port()
    made = qdmanage("create", "--type", "listener", "--name", "rtl", *mgmt, "host=127.0.0.1",
                    f"port={new_port}", "sslProfile=rt", "requireSsl=yes",
                    "saslMechanisms=ANONYMOUS")
    assert made.returncode == 0, made.stderr
    conn, err = connect(f"amqps://localhost:{new_port}", ssl_domain=domain(pki),
                        allowed_mechs="ANONYMOUS")
    assert conn, err
    conn.close()
    refused, err = connect(f"amqp://127.0.0.1:{new_port}", allowed_mechs="ANONYMOUS")
    assert refused is None
    busy = qdmanage("delete", "--type", "sslProfile", "--name", "rt", *mgmt)
    assert busy.returncode == 1 and "used by" in busy.stderr
    assert qdmanage("delete", "--type", "listener", "--name", "rtl", *mgmt).returncode == 0
    assert qdmanage("delete", "--type", "sslProfile", "--name", "rt", *mgmt).returncode == 0
    assert r.proc.proc.poll() is None


def test_inter_router_connection_over_tls_with_external(router_factory, pki):
    port = free_port()
    a = router_factory(profile(pki) + listener(port, role="inter-router", sslProfile="tls",
                                               requireSsl="yes", authenticatePeer="yes",
                                               saslMechanisms="EXTERNAL"),
                       router_id="Router.A", mode="interior")
    router_factory(profile(pki, cert="client") + textwrap.dedent(f"""
        connector {{
            host: localhost
            port: {port}
            role: inter-router
            sslProfile: tls
            saslMechanisms: EXTERNAL
        }}
        """), router_id="Router.B", mode="interior")
    import time
    deadline = time.monotonic() + 20
    while True:
        rows = [c for c in connections(a) if c["role"] == "inter-router"]
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert rows, "no inter-router connection"
    c = rows[0]
    assert c["isEncrypted"] and c["sasl"] == "EXTERNAL" and c["isAuthenticated"]
    assert c["container"] == "Router.B" and c["sslProto"].startswith("TLSv1")
    assert "CN=client1" in c["user"]


def test_connector_verifies_the_peer_name(router_factory, pki):
    """A connector to 127.0.0.1 while the certificate names only elsewhere.example fails
    (verifyHostname, the default); verifyHostname: no connects."""
    port = free_port()
    a = router_factory(profile(pki, cert="wrongname") + listener(
        port, sslProfile="tls", requireSsl="yes", saslMechanisms="ANONYMOUS"))
    b = router_factory(profile(pki, name="c", cert="client") + textwrap.dedent(f"""
        connector {{
            name: strict
            host: 127.0.0.1
            port: {port}
            sslProfile: c
            saslMechanisms: ANONYMOUS
        }}
        connector {{
            name: lax
            host: 127.0.0.1
            port: {port}
            sslProfile: c
            verifyHostname: no
            saslMechanisms: ANONYMOUS
        }}
        """), router_id="Router.B")
    import time
    deadline = time.monotonic() + 15
    rows: list = []
    while time.monotonic() < deadline:
        rows = [c for c in connections(a) if c.get("container") == "Router.B"]
        if rows:
            break
        time.sleep(0.3)
    time.sleep(1.0)
    rows = [c for c in connections(a) if c.get("container") == "Router.B"]
    assert len(rows) == 1 and rows[0]["isEncrypted"]  # only the lax one got through
    assert b.proc.proc.poll() is None


def test_sasl_frames_out_of_order_inside_tls_crash_nothing(router_factory, pki):
    """Inside TLS the worker's SASL guard cannot see the bytes (proton decrypts them itself):
    the patched proton (scripts/patches/) must refuse them without dying."""
    import socket
    import ssl
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import fuzz_front_door as fuzz
    port = free_port()
    r = router_factory(profile(pki) + listener(port, sslProfile="tls",
                                               saslMechanisms="ANONYMOUS"))
    ctx = ssl.create_default_context(cafile=pki["ca"])
    for name in ("failed-init-then-frames", "sasl-response-first", "amqp-frame-then-response",
                 "bad-init-then-response"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(fuzz.KNOWN_BAD[name])  # one TLS record: proton gets it at once
                try:
                    while tls.recv(4096):  # until the router closes (bounded by the timeout)
                        pass
                except (OSError, ssl.SSLError):
                    pass
    ok, err = connect(f"amqps://localhost:{port}", ssl_domain=domain(pki),
                      allowed_mechs="ANONYMOUS")
    assert ok, err
    ok.close()
    assert "(critical)" not in r.proc.output(), r.proc.output()
