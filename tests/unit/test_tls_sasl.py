"""common.security: password forms, sslProfile and listener/connector checks, certificate uid."""
from __future__ import annotations

import pytest

from common import security
from supervisor.config import ConfigError, parse_config
from agent.management.protocol import ManagementError
from agent.management.store import ConfigStore


def test_password_forms(tmp_path, monkeypatch):
    f = tmp_path / "pw"
    f.write_text("first line\nsecond\n")
    monkeypatch.setenv("QD_PW", "from-env")
    assert security.resolve_password("env:QD_PW") == "from-env"
    assert security.resolve_password("env: QD_PW") == "from-env"
    assert security.resolve_password("pass:p:w") == "p:w"
    assert security.resolve_password("literal:x") == "x"
    assert security.resolve_password("literal:x", allow_literal=False) == "literal:x"
    assert security.resolve_password(f"file:{f}") == "first line"
    assert security.resolve_password("plain") == "plain"
    with pytest.raises(ValueError, match="QD_UNSET_PW"):
        security.resolve_password("env:QD_UNSET_PW")
    with pytest.raises(ValueError, match="cannot read password file"):
        security.resolve_password(f"file:{tmp_path / 'nope'}")
    assert security.profile_password({"passwordFile": str(f)}) == "first line"
    assert security.profile_password({"password": "pass:a", "passwordFile": str(f)}) == "a"


def test_ssl_profile_checks(pki, tmp_path):
    good = {"name": "p", "certFile": pki["server"], "privateKeyFile": pki["server_key"],
            "caCertFile": pki["ca"], "ciphers": "HIGH", "protocols": "TLSv1.2 TLSv1.3",
            "uidFormat": "cou2"}
    assert security.ssl_profile_problem(good) is None
    assert security.ssl_files_problem(good) is None
    # files the TLS library rejects fail the connections, not the profile (as 1.19)
    enc = dict(good, privateKeyFile=pki["server_enc_key"])
    assert security.ssl_profile_problem(enc) is None
    assert "cannot load certFile" in security.ssl_files_problem(enc)
    import tlscerts
    assert security.ssl_files_problem(dict(enc, password=tlscerts.KEY_PASSWORD)) is None
    assert "privateKeyFile is missing" in security.ssl_files_problem(
        {"name": "p", "certFile": pki["server"]})
    assert "do not match" in security.ssl_files_problem(
        dict(good, privateKeyFile=pki["client_key"]))
    assert "caCertFile" in security.ssl_files_problem(dict(good, caCertFile=pki["server_key"]))
    assert "does not exist" in security.ssl_files_problem(dict(good, certFile="/nonexistent"))
    assert security.ssl_profile_problem(dict(good, certFile="/nonexistent")) is None
    # an unset env: password: 1.19 does not create the profile
    assert "QD_NOT_SET" in security.ssl_profile_problem(dict(good, password="env:QD_NOT_SET"))
    assert "uidFormat" in security.ssl_profile_problem(dict(good, uidFormat="cx"))
    # values the TLS library rejects fail the connections, not the start (as 1.19)
    assert security.ssl_profile_problem(dict(good, protocols="SSLv23")) is None
    assert security.ssl_profile_problem(dict(good, ciphers="NOSUCHCIPHER")) is None
    bad_map = tmp_path / "m.json"
    bad_map.write_text("[1]")
    assert "JSON object" in security.ssl_profile_problem(
        dict(good, uidNameMappingFile=str(bad_map)))


def test_connection_checks(pki):
    prof = {"name": "t", "certFile": pki["server"], "privateKeyFile": pki["server_key"],
            "caCertFile": pki["ca"]}
    no_ca = {"name": "n", "certFile": pki["server"], "privateKeyFile": pki["server_key"]}
    profiles = {"t": prof, "n": no_ca, "e": {"name": "e"}}.get
    check = security.connection_problem
    assert check("listener", {"port": 1, "sslProfile": "t", "saslMechanisms": "EXTERNAL"},
                 profiles) is None
    assert "caCertFile" in check("listener", {"port": 1, "sslProfile": "n",
                                              "saslMechanisms": "external"}, profiles)
    assert "requireSsl" in check("listener", {"port": 1, "requireSsl": True}, profiles)
    assert "no certFile" in check("listener", {"port": 1, "sslProfile": "e"}, profiles)
    assert check("connector", {"port": 1, "sslProfile": "e"}, profiles) is None
    assert "certFile" in check("connector", {"port": 1, "sslProfile": "e",
                                             "saslMechanisms": "EXTERNAL"}, profiles)
    assert "trustedCertsFile" in check("listener", {"port": 1, "trustedCertsFile": "/x"},
                                       profiles)
    # an http listener: TLS on the HTTP/WebSocket stream; what needs proton's TLS is refused
    assert check("listener", {"port": 1, "http": True, "sslProfile": "t"}, profiles) is None
    assert check("listener", {"port": 1, "http": True, "sslProfile": "t", "requireSsl": True,
                              "authenticatePeer": True, "saslMechanisms": "PLAIN"},
                 profiles) is None
    assert "no certFile" in check("listener", {"port": 1, "http": True, "sslProfile": "e"},
                                  profiles)
    assert "requireSsl" in check("listener", {"port": 1, "http": True, "requireSsl": True},
                                 profiles)
    uid = {"u": dict(prof, name="u", uidFormat="cn")}
    uid_profiles = lambda n: uid.get(n) or profiles(n)  # noqa: E731
    assert "uidFormat" in check("listener", {"port": 1, "http": True, "sslProfile": "u",
                                             "authenticatePeer": True}, uid_profiles)
    assert check("listener", {"port": 1, "http": True, "sslProfile": "u"}, uid_profiles) is None
    for attrs in ({"requireEncryption": True}, {"sslProfile": "n", "saslMechanisms": "EXTERNAL"},
                  {"sslProfile": "t", "requireSsl": True, "saslMechanisms": "DIGEST-MD5"}):
        assert "http listener" in check("listener", {"port": 1, "http": True, **attrs}, profiles)
    assert "saslPassword" in check("connector", {"port": 1, "saslPassword": "env:QD_NOPE_X"},
                                   profiles)
    # DIGEST-MD5 works over TLS only here: refused elsewhere instead of failing every client
    assert "DIGEST-MD5" in check("listener", {"port": 1, "saslMechanisms": "DIGEST-MD5"},
                                 profiles)
    assert check("listener", {"port": 1, "sslProfile": "t", "requireSsl": True,
                              "saslMechanisms": "DIGEST-MD5 PLAIN"}, profiles) is None


def test_config_refusal_names_the_line():
    text = "router {\n    mode: standalone\n}\nlistener {\n    port: 5999\n    requireSsl: yes\n}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, "x.conf")
    assert err.value.line == 4 and str(err.value).startswith("x.conf:4: listener")


def test_management_create_is_refused_with_400(pki):
    store = ConfigStore({"router": {"id": "R"}})
    etype = store.schema.entity_type("sslProfile")
    with pytest.raises(ManagementError) as err:
        store.validate_create(etype, {"certFile": pki["server"], "privateKeyFile":
                                      pki["server_key"], "uidFormat": "xyz"}, "p")
    assert err.value.status == 400
    # files the TLS library rejects: created, as 1.19 creates it (its connections fail)
    store.validate_create(etype, {"certFile": "/nonexistent", "privateKeyFile": "/x"}, "q")
    made = store.validate_create(etype, {"certFile": pki["server"],
                                         "privateKeyFile": pki["server_key"]}, "p")
    store.add(made)
    listener = store.schema.entity_type("listener")
    with pytest.raises(ManagementError) as err:
        store.validate_create(listener, {"port": "5999", "sslProfile": "p",
                                         "saslMechanisms": "EXTERNAL"}, "l")
    assert err.value.status == 400 and "caCertFile" in err.value.description


def test_cert_uid():
    fields = {"c": "US", "o": "Acme", "u": "QA", "n": "client1"}
    uid = security.cert_uid("cou2", fields.get, lambda f: {"2": "ab12"}[f])
    assert uid == "US;Acme;QA;ab12"
    assert security.cert_uid("s", fields.get, lambda f: None) is None


def test_ssl_profile_protocols_on_a_python_ssl_context():
    """The http listener's and the auth service connection's contexts: an sslProfile's
    ``protocols`` set the lowest and highest version named; none we know is an error."""
    import ssl as pyssl

    from common.security import set_protocols
    ctx = pyssl.SSLContext(pyssl.PROTOCOL_TLS_CLIENT)
    set_protocols(ctx, "TLSv1.3 TLSv1.2 SSLv3")
    assert (ctx.minimum_version, ctx.maximum_version) == (pyssl.TLSVersion.TLSv1_2,
                                                          pyssl.TLSVersion.TLSv1_3)
    with pytest.raises(ValueError, match="no known protocol in 'SSLv23'"):
        set_protocols(ctx, "SSLv23")
