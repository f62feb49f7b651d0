"""TLS and SASL settings: what the router enforces, and the refusal of anything it cannot.

Shared by the configuration parser (``supervisor.config``: ``FILE:LINE: problem``), management
CREATE (``agent.management.store``: 400) and the I/O workers (``router_io.engine``, which
builds proton's SSL domains and SASL settings from the same attributes):

* :func:`resolve_password` reads the password forms of Qpid Dispatch 1.19 (``env:VAR``,
  ``file:PATH`` (its first line), ``pass:TEXT``, ``literal:TEXT`` (sslProfile only), or the
  text itself); :func:`profile_password` adds the deprecated ``passwordFile``.
* :func:`ssl_profile_problem` checks what stops an sslProfile from being created, as in
  1.19: a password that cannot be resolved, uidFormat not made of ``c s l o u n 1 2 5``,
  uidNameMappingFile not a JSON map.
* :func:`ssl_files_problem` says why the TLS library will reject a profile's files
  (certificate with its key and password, CA file). As in 1.19 that does not stop the start:
  each connection of a listener or connector using the profile then fails TLS set-up
  (amqp:internal-error, router_io.engine); the configuration logs it as a warning. The same
  holds for ``ciphers`` and ``protocols`` the library rejects.
* :func:`connection_problem` checks a listener's or connector's security attributes against its
  sslProfile: a setting that could not be enforced is refused, never ignored.
* :func:`cert_uid` builds the user id of a client certificate from uidFormat, as 1.19 does
  (fields joined by ``;``).

Must not import proton, zmq, router_io or router_core (the ``ssl`` module only checks files).
"""
from __future__ import annotations

import json
import os
import ssl
from typing import Any, Callable, Optional

UID_FIELDS = "csloun125"
MAX_PASSWORD_LINE = 199  # 1.19 reads at most this many characters of a password file's line


def read_password_file(path: str) -> str:
    """The first line of a password file (ValueError if it cannot be read)."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            line = f.readline(MAX_PASSWORD_LINE + 1)
    except OSError as exc:
        raise ValueError(f"cannot read password file '{path}': "
                         f"{exc.strerror or exc}") from None
    return line.split("\n", 1)[0][:MAX_PASSWORD_LINE]


def resolve_password(value: Any, *, allow_literal: bool = True) -> Optional[str]:
    """The password a configured value stands for (ValueError naming what is missing)."""
    if value is None:
        return None
    text = str(value)
    if text.startswith("env:"):
        var = text[4:].lstrip(" ")
        if var not in os.environ:
            raise ValueError(f"environment variable '{var}' (from 'env:') is not set")
        return os.environ[var]
    if allow_literal and text.startswith("literal:"):
        return text[len("literal:"):]
    if text.startswith("pass:"):
        return text[len("pass:"):]
    if text.startswith("file:"):
        return read_password_file(text[len("file:"):])
    return text


def profile_password(profile: dict) -> Optional[str]:
    """An sslProfile's private key password: ``password`` (any form), else ``passwordFile``."""
    if profile.get("password") is not None:
        return resolve_password(profile["password"], allow_literal=True)
    if profile.get("passwordFile"):
        return read_password_file(str(profile["passwordFile"]))
    return None


def _readable(what: str, path: Any) -> Optional[str]:
    path = str(path)
    if not os.path.isfile(path):
        return f"{what} '{path}' does not exist or is not a file"
    if not os.access(path, os.R_OK):
        return f"{what} '{path}' cannot be read"
    return None


def load_name_mapping(path: str) -> dict:
    """uidNameMappingFile: a JSON object of certificate user id -> display name."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read uidNameMappingFile '{path}': {exc.strerror or exc}") \
            from None
    except ValueError as exc:
        raise ValueError(f"uidNameMappingFile '{path}' is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"uidNameMappingFile '{path}' must hold a JSON object (user id -> name)")
    return {str(k): str(v) for k, v in data.items()}


_TLS_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
                 "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def set_protocols(ctx: ssl.SSLContext, protocols: str) -> None:
    """An sslProfile's ``protocols`` (e.g. ``TLSv1.2 TLSv1.3``) on a Python ``ssl`` context:
    the lowest and highest named version; ValueError when it names none we know."""
    wanted = [_TLS_VERSIONS[v] for v in protocols.split() if v in _TLS_VERSIONS]
    if not wanted:
        raise ValueError(f"no known protocol in '{protocols}'")
    ctx.minimum_version, ctx.maximum_version = min(wanted), max(wanted)


def set_ciphers_and_protocols(ctx: ssl.SSLContext, profile: dict) -> None:
    """An sslProfile's ``ciphers`` and ``protocols``, where set, on a Python ``ssl`` context
    (the http listener's and the auth service client's); ssl.SSLError or ValueError when
    OpenSSL or set_protocols refuses them."""
    if profile.get("ciphers"):
        ctx.set_ciphers(str(profile["ciphers"]))
    if profile.get("protocols"):
        set_protocols(ctx, str(profile["protocols"]))


def ssl_profile_problem(profile: dict) -> Optional[str]:
    """Why an sslProfile cannot be created (1.19 refuses it too), or None."""
    where = f"sslProfile '{profile.get('name')}'"
    if str(profile.get("password") or "").startswith("env:"):
        try:  # 1.19 refuses the profile for an unset variable (a password file it cannot
            # read only fails the connections: ssl_files_problem)
            profile_password(profile)
        except ValueError as exc:
            return f"{where}: password: {exc}"
    uid = profile.get("uidFormat")
    if uid is not None:
        uid = str(uid)
        if not uid or len(uid) > 7 or any(ch not in UID_FIELDS for ch in uid):
            return (f"{where}: uidFormat '{uid}' must be 1 to 7 of the letters "
                    "c, s, l, o, u, n, 1, 2, 5")
    mapping = profile.get("uidNameMappingFile")
    if mapping:
        try:
            load_name_mapping(str(mapping))
        except ValueError as exc:
            return f"{where}: {exc}"
    return None


def ssl_files_problem(profile: dict) -> Optional[str]:
    """Why the TLS library will reject an sslProfile's certificate, key or CA file (every
    connection using the profile then fails), or None."""
    where = f"sslProfile '{profile.get('name')}'"
    cert, key = profile.get("certFile"), profile.get("privateKeyFile")
    if bool(cert) != bool(key):
        return (f"{where}: certFile and privateKeyFile must be given together "
                f"({'privateKeyFile' if cert else 'certFile'} is missing)")
    for attr in ("certFile", "privateKeyFile", "caCertFile", "passwordFile"):
        if profile.get(attr):
            problem = _readable(attr, profile[attr])
            if problem:
                return f"{where}: {problem}"
    try:
        password = profile_password(profile)
    except ValueError as exc:
        return f"{where}: password: {exc}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cert:
        try:  # a callable: an encrypted key never prompts on a terminal
            ctx.load_cert_chain(str(cert), str(key), password=lambda: (password or "").encode())
        except (ssl.SSLError, OSError) as exc:
            return (f"{where}: cannot load certFile '{cert}' with privateKeyFile '{key}' "
                    f"(wrong password, or key and certificate do not match?): {exc}")
    if profile.get("caCertFile"):
        try:
            ctx.load_verify_locations(cafile=str(profile["caCertFile"]))
        except (ssl.SSLError, OSError) as exc:
            return f"{where}: cannot load caCertFile '{profile['caCertFile']}': {exc}"
    return None


def mechanisms(value: Any) -> list[str]:
    """saslMechanisms as a list of upper-case names."""
    return str(value or "").replace(",", " ").upper().split()


def connection_problem(short: str, attrs: dict,
                       profile_of: Callable[[str], Optional[dict]]) -> Optional[str]:
    """Why a listener's or connector's TLS/SASL settings cannot be enforced, or None.

    ``profile_of(name)`` gives an sslProfile's attributes (None if there is none: the
    reference check reports that)."""
    if short not in ("listener", "connector"):
        return None
    where = f"{short} {attrs.get('host') or '*'}:{attrs.get('port')}"
    if attrs.get("trustedCertsFile"):
        return (f"{where}: attribute 'trustedCertsFile' is not supported (Qpid Dispatch 1.19 "
                "ignores it too): use caCertFile in an sslProfile")
    name = attrs.get("sslProfile")
    profile = profile_of(str(name)) if name else None
    mechs = mechanisms(attrs.get("saslMechanisms"))
    if short == "listener" and attrs.get("saslPlugin"):
        problem = _relayed_listener_problem(where, attrs, mechs)
        if problem:
            return problem
    if short == "listener":
        if attrs.get("http") or attrs.get("httpRootDir"):
            # TLS on an http listener wraps the HTTP/WebSocket stream (router_io.httpstream);
            # proton sees plain AMQP inside the WebSocket, so what needs proton's TLS is refused
            if attrs.get("requireEncryption"):
                return (f"{where}: 'requireEncryption' is not supported on an http listener "
                        "(use an sslProfile: every connection to it is then TLS)")
            if attrs.get("requireSsl") and not name:
                return (f"{where}: requireSsl needs an sslProfile (with certFile and "
                        "privateKeyFile)")
            if name and profile is not None and not profile.get("certFile"):
                return (f"{where}: sslProfile '{name}' has no certFile/privateKeyFile, which a "
                        "TLS listener needs")
            if (attrs.get("authenticatePeer") and profile is not None
                    and profile.get("caCertFile") and profile.get("uidFormat")):
                return (f"{where}: sslProfile '{name}' has uidFormat, but the user of an AMQP "
                        "connection over a WebSocket is not taken from its client certificate "
                        "by this router")
            for mech in ("EXTERNAL", "DIGEST-MD5"):
                if mech in mechs:
                    return (f"{where}: saslMechanisms {mech} is not supported on an http "
                            "listener by this router (AMQP over WebSocket sees no TLS client "
                            "certificate or TLS layer)")
            return None
        if attrs.get("requireSsl") and not name:
            return f"{where}: requireSsl needs an sslProfile (with certFile and privateKeyFile)"
        if name and profile is not None and not profile.get("certFile"):
            return (f"{where}: sslProfile '{name}' has no certFile/privateKeyFile, which a TLS "
                    "listener needs")
        if "EXTERNAL" in mechs:
            if not name or profile is None or not profile.get("caCertFile"):
                return (f"{where}: saslMechanisms EXTERNAL needs an sslProfile with caCertFile "
                        "(client certificates are verified against it)")
        if "DIGEST-MD5" in mechs and (not name or not attrs.get("requireSsl")):
            # it works over TLS; without TLS every client fails to authenticate: refuse the
            # configuration rather than start a listener nobody can use
            return (f"{where}: saslMechanisms DIGEST-MD5 is only supported on a listener with "
                    "an sslProfile and requireSsl: yes (use SCRAM-SHA-256 or PLAIN otherwise)")
    else:
        if "EXTERNAL" in mechs:
            if not name or profile is None or not profile.get("certFile"):
                return (f"{where}: saslMechanisms EXTERNAL needs an sslProfile with certFile "
                        "and privateKeyFile (the client certificate to present)")
        try:
            resolve_password(attrs.get("saslPassword"), allow_literal=False)
        except ValueError as exc:
            return f"{where}: saslPassword: {exc}"
    return None


def cert_uid(fmt: str, subfield: Callable[[str], Optional[str]],
             fingerprint: Callable[[str], Optional[str]]) -> Optional[str]:
    """The user id of a client certificate: the uidFormat fields present, joined by ';'.

    ``subfield(letter)`` gives a subject field (c, s, l, o, u, n); ``fingerprint(letter)`` the
    hex fingerprint for 1 (sha1), 2 (sha256), 5 (sha512)."""
    parts = []
    for letter in fmt:
        value = fingerprint(letter) if letter in "125" else subfield(letter)
        if value:
            parts.append(value)
    return ";".join(parts) or None


def _relayed_listener_problem(where: str, attrs: dict, mechs: list) -> Optional[str]:
    """A listener whose saslPlugin names an authServicePlugin: the worker relays the client's
    SASL frames itself, in front of proton's transport (router_io/auth_relay.py), so it must
    see them in the clear; what only proton's TLS or SASL layers could enforce is refused."""
    if attrs.get("http") or attrs.get("httpRootDir"):
        return f"{where}: saslPlugin is not supported on an http listener by this router"
    if attrs.get("sslProfile") or attrs.get("requireSsl") or attrs.get("requireEncryption"):
        return (f"{where}: saslPlugin with TLS on the listener (sslProfile, requireSsl, "
                "requireEncryption) is not supported by this router: the SASL relay to the "
                "authentication service needs the client's SASL frames in the clear (the "
                "connection to the service itself can be TLS: the authServicePlugin's "
                "sslProfile)")
    if "EXTERNAL" in mechs:
        return f"{where}: saslMechanisms EXTERNAL cannot be relayed to an authentication service"
    return None


# --- authServicePlugin ----------------------------------------------------------------------
def auth_plugin_address(attrs: dict) -> tuple:
    """(host, port) of an authServicePlugin: ``host`` and ``port`` when both are set, else
    the deprecated ``authService`` (``host:port``, ``[v6]:port``; port 'amqp' when absent),
    as 1.19 resolves them."""
    host, port = str(attrs.get("host") or ""), str(attrs.get("port") or "")
    if host and port:
        return host, port
    text = str(attrs.get("authService") or "")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") and rest[1:] else "amqp"
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, port or "amqp"
    return text, "amqp"


def auth_plugin_problem(attrs: dict) -> Optional[str]:
    """Why an authServicePlugin cannot be used (start refused, CREATE 400), or None."""
    host, port = auth_plugin_address(attrs)
    if not host:
        return (f"authServicePlugin '{attrs.get('name')}': host (and port) or authService is "
                "required")
    return None
