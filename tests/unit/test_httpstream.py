"""router_io.httpstream without a router: static files under a root (never outside it), the
default console root's look-up order, and TLS contexts made from sslProfiles."""
from __future__ import annotations

import os
import ssl
import sys

import pytest

from router_io import httpstream


@pytest.fixture
def root(tmp_path):
    www = tmp_path / "www"
    (www / "assets").mkdir(parents=True)
    (www / "index.html").write_text("<h1>hi</h1>")
    (www / "assets" / "app.js").write_text("x()")
    (www / "assets" / "font.woff2").write_bytes(b"\x00\x01")
    (www / "unknown.zzz").write_bytes(b"?")
    (tmp_path / "secret").write_text("no")
    os.symlink(tmp_path / "secret", www / "escape")
    os.symlink(www / "index.html", www / "inside")
    return str(www)


@pytest.mark.parametrize("path,status,ctype,body", [
    ("/", 200, "text/html; charset=utf-8", b"<h1>hi</h1>"),
    ("/index.html", 200, "text/html; charset=utf-8", b"<h1>hi</h1>"),
    ("/assets/app.js", 200, "text/javascript", b"x()"),
    ("/assets/font.woff2", 200, "font/woff2", b"\x00\x01"),
    ("/unknown.zzz", 200, "application/octet-stream", b"?"),
    ("/inside", 200, "text/html; charset=utf-8", b"<h1>hi</h1>"),  # a link inside the root
    ("/assets", 404, None, None),                                # no index.html there
    ("/missing", 404, None, None),
    ("/../secret", 404, None, None),
    ("/assets/../../secret", 404, None, None),
    ("/%2e%2e/secret", 404, None, None),
    ("/%2E%2E%2Fsecret", 404, None, None),
    ("/escape", 404, None, None),                                # a link out of the root
    ("/a%00b", 404, None, None),
    ("/%ff%fe", 404, None, None),
    ("/..\\secret", 404, None, None),
])
def test_static_response(root, path, status, ctype, body):
    got = httpstream.static_response(root, "GET", path)
    assert got[0] == status
    if status == 200:
        assert got[1:3] == (body, ctype)


def test_static_methods_and_no_root(root):
    assert httpstream.static_response(root, "POST", "/")[0] == 405
    assert httpstream.static_response(None, "GET", "/")[0] == 404


def test_default_root_order(tmp_path, monkeypatch):
    env_dir = tmp_path / "from-env"
    env_dir.mkdir()
    monkeypatch.setenv("QDROUTER_CONSOLE_DIR", str(env_dir))
    assert httpstream.default_http_root() == str(env_dir)
    monkeypatch.setenv("QDROUTER_CONSOLE_DIR", str(tmp_path / "not-there"))
    prefix = tmp_path / "prefix"
    (prefix / "share" / "qdrouter-py" / "console").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(prefix))
    assert httpstream.default_http_root() == str(prefix / "share" / "qdrouter-py" / "console")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "empty-prefix"))
    repo_console = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(httpstream.__file__)))), "console", "dist")
    expected = repo_console if os.path.isdir(repo_console) else None
    assert httpstream.default_http_root() == expected
    assert httpstream.http_root({"httpRootDir": "/srv/www"}) == "/srv/www"


def test_tls_context_from_profile(pki):
    profile = {"name": "p", "certFile": pki["server"], "privateKeyFile": pki["server_key"],
               "protocols": "TLSv1.2 TLSv1.3", "ciphers": "ECDHE+AESGCM"}
    ctx = httpstream.tls_context(profile)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    ctx = httpstream.tls_context(dict(profile, caCertFile=pki["ca"]), client_certs=True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ValueError, match="sslProfile 'p'"):
        httpstream.tls_context(dict(profile, certFile="/nonexistent.pem"))
    with pytest.raises(ValueError, match="sslProfile 'p'"):
        httpstream.tls_context(dict(profile, protocols="SSLv2"))
    with pytest.raises(ValueError, match="sslProfile 'p'"):
        httpstream.tls_context(dict(profile, ciphers="NOT-A-CIPHER"))
