"""TLS and SASL set-up of the worker's connections, and what they tell about the peer.

sslProfiles (proton SSL domains, cached per profile and role), the SASL configuration, the
peer's user name (SASL, or the client certificate for EXTERNAL), the security facts management
shows, the PROTOCOL frame trace and the MESSAGE trace switch. The rules themselves are in
common/security.py.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

from typing import Callable, Optional

import cproton
import proton
from cproton_ffi import lib

from common import security
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import _ssl_ssf, _text
from router_io.engine_conn import Connection
# --- end engine parts ---


# --- TLS and SASL set-up (once per connection; see common/security.py for the rules) -------
def set_security(self, router: Optional[dict], ssl_profiles: Optional[list]) -> None:
    """The router's saslConfigDir/saslConfigName and the configured sslProfiles."""
    router = router or {}
    self.sasl_config = (router.get("saslConfigDir"),
                        router.get("saslConfigName") or "qdrouterd")
    self.ssl_profiles = {str(p.get("name")): dict(p) for p in ssl_profiles or []}
    self._ssl_domains = {}


def set_ssl_profile(self, name: str, attributes: Optional[dict]) -> None:
    """An sslProfile created (attributes) or deleted (None) by management."""
    if attributes is None:
        self.ssl_profiles.pop(name, None)
    else:
        self.ssl_profiles[name] = dict(attributes)
    self._ssl_domains = {k: v for k, v in self._ssl_domains.items() if k[0] != name}


def setup_ssl(self, conn: Connection, settings: dict, direction: str) -> None:
    """Put proton's SSL layer on ``conn``'s transport when its listener/connector names an
    sslProfile. Listeners accept TLS and plaintext alike unless requireSsl (1.19);
    client certificates are demanded when saslMechanisms lists EXTERNAL."""
    name = settings.get("sslProfile")
    if not name:
        return
    profile = settings.get("sslProfileAttributes") or self.ssl_profiles.get(str(name))
    if profile is None:
        raise RuntimeError(f"sslProfile '{name}' is not configured")
    external = "EXTERNAL" in security.mechanisms(settings.get("saslMechanisms"))
    verify_name = direction == "out" and settings.get("verifyHostname", True) is not False
    key = (str(name), direction, external, verify_name, id(profile))
    entry = self._ssl_domains.get(key)
    if entry is None:
        entry = _ssl_domain(profile, direction, external, verify_name)
        self._ssl_domains[key] = entry
    domain, names = entry
    conn.ssl_profile = {**profile, "_names": names}
    conn.ssl = proton.SSL(conn.transport, domain)
    if direction == "out":
        conn.ssl.peer_hostname = str(settings.get("host") or "localhost")


def _ssl_domain(profile: dict, direction: str, external: bool, verify_name: bool) -> tuple:
    mode = proton.SSLDomain.MODE_SERVER if direction == "in" else proton.SSLDomain.MODE_CLIENT
    domain = proton.SSLDomain(mode)
    where = f"sslProfile '{profile.get('name')}'"
    ca = profile.get("caCertFile")
    try:
        if ca:
            domain.set_trusted_ca_db(str(ca))
        if profile.get("certFile"):
            domain.set_credentials(str(profile["certFile"]),
                                   str(profile.get("privateKeyFile") or ""),
                                   security.profile_password(profile))
        if direction == "in":
            if external:  # client certificates verified against caCertFile
                domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER, str(ca))
        else:  # a connector always verifies the server; its name too unless told not to
            domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER_NAME if verify_name
                                           else proton.SSLDomain.VERIFY_PEER,
                                           str(ca) if ca else None)
    except (proton.SSLException, ValueError) as exc:
        raise RuntimeError(f"{where}: {exc}") from None
    if profile.get("ciphers") and cproton.pn_ssl_domain_set_ciphers(
            domain._domain, str(profile["ciphers"])):
        raise RuntimeError(f"{where}: cannot set ciphers '{profile['ciphers']}'")
    if profile.get("protocols") and cproton.pn_ssl_domain_set_protocols(
            domain._domain, str(profile["protocols"])):
        raise RuntimeError(f"{where}: cannot set protocols '{profile['protocols']}'")
    names = None
    if profile.get("uidNameMappingFile"):
        try:
            names = security.load_name_mapping(str(profile["uidNameMappingFile"]))
        except ValueError as exc:
            raise RuntimeError(f"{where}: {exc}") from None
    return domain, names


def _security_info(self, conn: Connection) -> list:
    t_ptr = conn.t_ptr
    info = [conn.ssl is not None, bool(lib.pn_transport_is_encrypted(t_ptr)), None, None, 0,
            conn.auth_grant is not None or bool(lib.pn_transport_is_authenticated(t_ptr))]
    ssl = conn.ssl
    if ssl is not None:
        try:
            info[2] = ssl.protocol_name() or None
            info[3] = ssl.cipher_name() or None
            info[4] = _ssl_ssf(ssl) if info[2] else 0
        except Exception:  # noqa: BLE001 - a plaintext client on a TLS listener
            pass
    return info


def _cert_user(self, conn: Connection) -> str:
    """The user of an EXTERNAL connection: uidFormat over the client certificate (then
    uidNameMappingFile), else proton's (the certificate subject)."""
    profile = conn.ssl_profile or {}
    fmt = profile.get("uidFormat")
    if not fmt:
        return ""
    ssl = conn.ssl
    fields = {"c": proton.SSL.CERT_COUNTRY_NAME, "s": proton.SSL.CERT_STATE_OR_PROVINCE,
              "l": proton.SSL.CERT_CITY_OR_LOCALITY,
              "o": proton.SSL.CERT_ORGANIZATION_NAME,
              "u": proton.SSL.CERT_ORGANIZATION_UNIT, "n": proton.SSL.CERT_COMMON_NAME}
    hashes = {"1": proton.SSL.SHA1, "2": proton.SSL.SHA256, "5": proton.SSL.SHA512}
    uid = security.cert_uid(str(fmt),
                            lambda f: ssl.get_cert_subject_subfield(fields[f]),
                            lambda f: ssl.get_cert_fingerprint(129, hashes[f]))
    names = profile.get("_names")
    if uid and names:
        uid = names.get(uid, uid)
    return uid or ""


def set_frame_trace(self, trace: Optional[Callable[[int, str], None]]) -> None:
    """PROTOCOL trace on (``trace(conn_id, text)`` per frame) or off, for the connections
    open now and those made later (one that management traces stays traced)."""
    self.frame_trace = trace
    for conn in list(self.conns.values()):
        conn.trace_frames(trace or conn.forced_trace)


def set_message_trace(self, trace: Optional[Callable[[int, str], None]]) -> None:
    """MESSAGE trace on (``trace(conn_id, text)`` per message logged) or off: each connection
    keeps its messageLoggingComponents bits where the per-message paths test them, or 0."""
    self.msg_trace = trace
    for conn in list(self.conns.values()):
        conn.msg_log = conn.msg_log_bits if trace is not None else 0


def trace_connection(self, conn_id: int, on: bool,
                     trace: Callable[[int, str], None]) -> None:
    """Management's enableProtocolTrace of one connection: on, its frames go to ``trace``
    whatever PROTOCOL's level; off, none (as 1.19 turns the transport's trace off)."""
    conn = self.conns_by_id.get(conn_id)
    if conn is None:
        return
    conn.forced_trace = trace if on else None
    conn.trace_frames(conn.forced_trace)


def _peer_user(self, conn: Connection) -> tuple:
    """(SASL mechanism or "", user) of an opened connection, as 1.19 names the user:
    the transport's user (the SASL user; "anonymous" for a peer that did no SASL at all),
    the certificate's for EXTERNAL, or the authentication service's (authServicePlugin)."""
    if conn.auth_grant is not None:  # authenticated by an authServicePlugin's service:
        # its authenticated-identity (1.19 takes "sub", "" when the service sent none)
        return conn.auth_grant[0], conn.auth_grant[1].user
    mech = _text(lib.pn_sasl_get_mech(lib.pn_sasl(conn.t_ptr)))
    user = _text(lib.pn_transport_get_user(conn.t_ptr)) or ("anonymous" if mech == "ANONYMOUS"
                                                           else "")
    if mech == "EXTERNAL" and getattr(conn, "ssl", None) is not None:
        user = _cert_user(self, conn) or user
    return mech, user
