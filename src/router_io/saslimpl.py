"""Which of proton's two SASL implementations serves an accepted connection.

The proton this router runs on is built with Cyrus SASL (PLAIN, SCRAM, DIGEST-MD5 from sasldb,
the auth service's mechanisms...). A Cyrus server context costs each connection about 7 kB and
15-20 µs of Cyrus's own set-up, even when all it offers is ANONYMOUS. proton also carries its
built-in implementation, which serves ANONYMOUS (and EXTERNAL) with no context at all: what
Qpid Dispatch uses on a proton built without Cyrus.

A listener's connections get the built-in one when, for its SASL settings, it cannot be told
apart on the wire: :func:`builtin_serves` sets up one throwaway server transport of each kind
with the same settings, lets an ANONYMOUS client talk to both, and compares what they answer
(the mechanisms offered, the outcome) and the user they authenticate. Once per settings, then
cached. Whatever Cyrus would offer beyond ANONYMOUS (no ``saslMechanisms``, PLAIN, a Cyrus
configuration whose ``mech_list`` leaves ANONYMOUS out) makes the answers differ, and Cyrus
stays. Listeners with an sslProfile keep Cyrus (EXTERNAL comes from the TLS handshake, later
than this choice).

Not part of the compiled engine: called once per accepted connection with a small tuple.
"""

import ctypes
from typing import Optional

import cproton_ffi
from cproton_ffi import ffi, lib

from common import security
from router_io.sasl_frames import AMQP_HEADER, SASL_HEADER, encode_init

# An ANONYMOUS client's bytes after the SASL header: sasl-init (mechanism ANONYMOUS, an empty
# initial response) and the AMQP header
_CLIENT_REST = encode_init("ANONYMOUS", b"", None) + AMQP_HEADER

_builtin: dict = {}  # server settings -> whether the built-in implementation serves them
# id(listener settings) -> (those settings, sasl_config, server settings, built-in?): a
# listener's answer is worked out at its first connection (the settings dict is kept, so its
# id is not reused while the entry lives)
_by_listener: dict = {}
_set_impl = None     # pnx_sasl_set_implementation, called through cffi
_default_impl = None  # &default_sasl_impl


def for_listener(settings: dict, sasl_config: tuple) -> tuple:
    """(:func:`server_settings`, whether the built-in implementation serves them) of an
    accepted connection of the listener with ``settings`` (an sslProfile: never built-in)."""
    known = _by_listener.get(id(settings))
    if known is not None and known[0] is settings and known[1] is sasl_config:
        return known[2], known[3]
    server = server_settings(settings, sasl_config)
    builtin = not settings.get("sslProfile") and builtin_serves(server)
    _by_listener[id(settings)] = (settings, sasl_config, server, builtin)
    return server, builtin


def server_settings(settings: dict, sasl_config: tuple) -> tuple:
    """What a listener's SASL server is set up from: (saslConfigDir, saslConfigName,
    authentication required, encryption required, saslMechanisms), the texts as C strings."""
    mechs = settings.get("saslMechanisms")
    # authenticatePeer: Cyrus offers no ANONYMOUS then, unless saslMechanisms lists it
    # (anonymous access asked for explicitly, as 1.19 lets it in); requireSsl implies
    # requireEncryption
    require_auth = (bool(settings.get("authenticatePeer"))
                    and "ANONYMOUS" not in security.mechanisms(mechs))
    require_encryption = bool(settings.get("requireEncryption") or settings.get("requireSsl"))
    sasl_dir, sasl_name = sasl_config
    return (str(sasl_dir).encode() if sasl_dir else None, str(sasl_name or "qdrouterd").encode(),
            require_auth, require_encryption, str(mechs).encode() if mechs else None)


def apply(t_ptr, sasl, server: tuple) -> None:
    """Set up the SASL server of transport ``t_ptr`` (its pn_sasl_t ``sasl``) from
    :func:`server_settings`."""
    sasl_dir, sasl_name, require_auth, require_encryption, mechs = server
    if sasl_dir:
        lib.pn_sasl_config_path(sasl, sasl_dir)
    lib.pn_sasl_config_name(sasl, sasl_name)
    lib.pn_transport_require_auth(t_ptr, require_auth)
    lib.pn_transport_require_encryption(t_ptr, require_encryption)
    if mechs:
        lib.pn_sasl_allowed_mechs(sasl, mechs)
    lib.pn_sasl_set_allow_insecure_mechs(sasl, True)  # 1.19: PLAIN without TLS


def use_builtin(t_ptr) -> None:
    """Serve transport ``t_ptr``'s SASL with proton's built-in implementation (before any of
    its bytes are processed)."""
    global _set_impl, _default_impl
    if _set_impl is None:  # not in proton's cffi declarations: the library's own symbols
        so = ctypes.CDLL(cproton_ffi.__file__)
        _default_impl = ffi.cast("void *", ctypes.addressof(
            ctypes.c_char.in_dll(so, "default_sasl_impl")))
        _set_impl = ffi.cast("void (*)(pn_transport_t *, void *, void *)", ctypes.cast(
            so.pnx_sasl_set_implementation, ctypes.c_void_p).value)
    _set_impl(t_ptr, _default_impl, ffi.NULL)


def builtin_serves(server: tuple) -> bool:
    """Whether the built-in implementation answers an ANONYMOUS client of a listener set up
    from ``server`` exactly as Cyrus does (probed once per settings)."""
    known = _builtin.get(server)
    if known is None:
        try:
            known = _exchange(server, builtin=True) == _exchange(server, builtin=False)
        except Exception:  # noqa: BLE001 - could not tell: Cyrus, as before
            known = False
        _builtin[server] = known
    return known


def _exchange(server: tuple, builtin: bool) -> tuple:
    """(bytes answered to the SASL header, bytes answered to the rest, SASL outcome, user) of
    a throwaway server transport set up from ``server`` that an ANONYMOUS client talks to."""
    t_ptr = ffi.gc(lib.pn_transport(), lib.pn_decref)
    c_ptr = ffi.gc(lib.pn_connection(), lib.pn_decref)
    lib.pn_transport_set_server(t_ptr)
    sasl = lib.pn_sasl(t_ptr)
    if builtin:
        use_builtin(t_ptr)
    apply(t_ptr, sasl, server)
    lib.pn_transport_bind(t_ptr, c_ptr)
    answers = []
    for part in (SASL_HEADER, _CLIENT_REST):  # the header alone: what the server offers
        lib.pn_transport_push(t_ptr, part, len(part))
        out = b""
        while True:
            pending = lib.pn_transport_pending(t_ptr)
            if pending <= 0:
                break
            buf = ffi.new("char[]", pending)
            lib.pn_transport_peek(t_ptr, buf, pending)
            out += ffi.buffer(buf, pending)[:]
            lib.pn_transport_pop(t_ptr, pending)
        answers.append(out)
    user: Optional[bytes] = None
    if lib.pn_sasl_get_user(sasl) != ffi.NULL:
        user = ffi.string(lib.pn_sasl_get_user(sasl))
    result = (*answers, lib.pn_sasl_outcome(sasl), user)
    lib.pn_transport_unbind(t_ptr)
    return result
