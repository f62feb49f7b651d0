"""The sockets of the authServicePlugin relay: a client's SASL goes to the service.

Owns ``AuthMixin``, the part of ``router_io.worker.Worker`` that serves a listener whose
``saslPlugin`` names an authServicePlugin. At accept the connection's engine transport is made
without SASL (engine_conn.py) and a :class:`RelayIO` takes the client's bytes instead: an
``AuthRelay`` (auth_relay.py, sans-I/O) and a non-blocking socket to the service, with TLS
(``ssl.SSLObject`` over memory BIOs) when the plugin names an sslProfile. When the relay is done
the engine gets the user and the grant (``Connection.auth_grant``) and the client's bytes after
its SASL; from then on the connection takes the worker's ordinary ``_read``/``_flush`` path.
When the relay fails, the client gets its outcome and both sockets close. Every wait is bounded
by the relay's deadline (``_tick``).

Log lines are 1.19's: SERVER ``Enabling remote authentication service``, AUTHSERVICE
``authenticated as USER`` and ``Downstream disconnected: ...``.
"""
from __future__ import annotations

import errno
import os
import socket
import ssl
import time
import traceback
from typing import Any, Optional

import cproton
import zmq

from common import security
from router_io.auth_relay import DONE, AuthRelay
from router_io.auth_service import AuthPlugin

POLLIN, POLLOUT = int(zmq.POLLIN), int(zmq.POLLOUT)
_READ = 65536


class RelayIO:
    """One relayed client: its relay, its socket, the socket (and TLS) to the service."""

    __slots__ = ("relay", "conn", "client", "service", "connected", "tls", "tls_in", "tls_out",
                 "handshaken", "plain_out", "service_out", "client_out", "service_eof")

    def __init__(self, relay: AuthRelay, conn: Any, client: socket.socket) -> None:
        self.relay = relay
        self.conn = conn
        self.client = client
        self.service: Optional[socket.socket] = None
        self.connected = False
        self.tls: Optional[ssl.SSLObject] = None
        self.tls_in = ssl.MemoryBIO()
        self.tls_out = ssl.MemoryBIO()
        self.handshaken = False
        self.plain_out = bytearray()    # for the service, before TLS
        self.service_out = bytearray()  # for the service's socket
        self.client_out = bytearray()   # for the client's socket
        self.service_eof = False


def client_tls_context(profile: dict) -> ssl.SSLContext:
    """A client SSLContext for the service from an sslProfile: the service's certificate is
    verified against caCertFile (the system CAs without one), its name is not (as 1.19's
    plugin: VERIFY_PEER); certFile is presented. ValueError with the reason."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    where = f"sslProfile '{profile.get('name')}'"
    try:
        if profile.get("caCertFile"):
            ctx.load_verify_locations(str(profile["caCertFile"]))
        else:
            ctx.load_default_certs()
        if profile.get("certFile"):
            ctx.load_cert_chain(str(profile["certFile"]),
                                str(profile.get("privateKeyFile") or "") or None,
                                security.profile_password(profile))
        security.set_ciphers_and_protocols(ctx, profile)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return ctx


class AuthMixin:
    """Worker methods for relayed listeners (see the module docstring)."""

    def _auth_setup(self, plugins: Optional[list]) -> None:
        self.auth_plugins: dict = {str(p.get("name")): dict(p) for p in plugins or []}
        self.relays: dict = {}        # Connection -> RelayIO
        self.relay_socks: dict = {}   # service socket fd -> RelayIO

    def set_auth_plugin(self, name: str, attributes: Optional[dict]) -> None:
        """An authServicePlugin created (attributes) or deleted (None) by management: used by
        the connections accepted from now on."""
        if attributes is None:
            self.auth_plugins.pop(name, None)
        else:
            self.auth_plugins[name] = dict(attributes)

    def _log_auth(self, level: str, text: str) -> None:
        self.log_sink.log("AUTHSERVICE", level, text)

    # --- accept: the relay starts ---------------------------------------------------------------
    def _relay_accept(self, sock: socket.socket, conn: Any, settings: dict) -> None:
        now = time.monotonic()
        name = str(settings.get("saslPlugin"))
        attrs = self.auth_plugins.get(name)
        plugin = AuthPlugin.from_attributes(attrs or {"name": name})
        mechs = security.mechanisms(settings.get("saslMechanisms"))
        rio = RelayIO(AuthRelay(plugin, now, allowed=mechs), conn, sock)
        self.relays[conn] = rio
        self._log_server("info", f"[C{conn.conn_id}] Enabling remote authentication service "
                                 f"{plugin.address}")
        if attrs is None:
            rio.relay.service_closed(f"authServicePlugin '{name}' does not exist")
            return
        try:
            if plugin.ssl_profile:
                rio.tls = self._relay_tls(plugin.ssl_profile).wrap_bio(
                    rio.tls_in, rio.tls_out, server_hostname=_sni(plugin.host))
            family, kind, proto, _, addr = socket.getaddrinfo(
                plugin.host, plugin.port, type=socket.SOCK_STREAM)[0]
            svc = socket.socket(family, kind, proto)
        except (OSError, ValueError) as exc:
            rio.relay.service_closed(str(exc))
            return
        svc.setblocking(False)
        err = svc.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS):
            svc.close()
            rio.relay.service_closed(f"connect failed: {errno.errorcode.get(err, err)} "
                                     f"({os.strerror(err)})")
            return
        rio.service = svc
        self.relay_socks[svc.fileno()] = rio
        self.poller.register(svc, POLLOUT)  # writable: connected (or failed)

    def _relay_tls(self, name: str) -> ssl.SSLContext:
        profile = self.engine.ssl_profiles.get(name)
        if profile is None:
            raise ValueError(f"sslProfile '{name}' is not configured")
        key = ("authService", name, id(profile))
        ctx = self.tls_contexts.get(key)
        if ctx is None:
            ctx = self.tls_contexts[key] = client_tls_context(profile)
        return ctx

    # --- bytes ----------------------------------------------------------------------------------
    def _relay_client_read(self, sock: socket.socket, conn: Any) -> None:
        rio = self.relays[conn]
        while True:
            try:
                data = sock.recv(_READ)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                rio.relay.client_closed()
                break
            rio.relay.client_data(data)
            if rio.relay.state == DONE or len(data) < _READ:
                break
        self._relay_pump(rio)

    def _relay_service_event(self, fd: int, mask: int) -> None:
        rio = self.relay_socks.get(fd)
        if rio is None or rio.service is None:
            return
        try:
            self._relay_service_io(rio, mask)
        except Exception as exc:  # noqa: BLE001 - this client fails, the worker goes on
            self._relay_failed(rio, exc)

    def _relay_failed(self, rio: RelayIO, exc: BaseException) -> None:
        """An unexpected error in one relay: logged once; its client gets sys-temp if it can,
        and both its sockets close."""
        self._log_server("error", f"[C{rio.conn.conn_id}] internal error in the SASL relay: "
                                  + "".join(traceback.format_exception(exc)).rstrip())
        try:
            rio.relay.service_closed("internal error in the router")
            self._relay_pump(rio)
        except Exception:  # noqa: BLE001 - then it just closes
            self._relay_drop(rio.conn)
            sock = self.sock_of.get(rio.conn)
            if sock is not None:
                self._abort(sock, rio.conn, exc)

    def _relay_service_io(self, rio: RelayIO, mask: int) -> None:
        svc = rio.service
        if not rio.connected and mask & (POLLOUT | POLLIN):
            err = svc.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                rio.relay.service_closed(f"connect failed: {errno.errorcode.get(err, err)} "
                                         f"({os.strerror(err)})")
                self._relay_pump(rio)
                return
            rio.connected = True
            rio.relay.service_connected()
            if rio.tls is not None:
                self._relay_handshake(rio)
        if mask & POLLIN:
            while True:
                try:
                    data = svc.recv(_READ)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    rio.relay.service_closed(f"connection lost: {exc}")
                    rio.service_eof = True
                    break
                if not data:
                    rio.service_eof = True
                    if rio.tls is not None:
                        rio.tls_in.write_eof()
                    else:
                        rio.relay.service_closed("connection closed by the service")
                        break
                if rio.tls is not None:
                    if data:
                        rio.tls_in.write(data)
                    self._relay_tls_read(rio)
                elif data:
                    rio.relay.service_data(data)
                if rio.service_eof or len(data) < _READ:
                    break
        self._relay_pump(rio)

    def _relay_handshake(self, rio: RelayIO) -> None:
        assert rio.tls is not None
        try:
            rio.tls.do_handshake()
            rio.handshaken = True
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            rio.relay.service_closed(f"TLS handshake failed: {exc.reason or exc}")
        rio.service_out += rio.tls_out.read()

    def _relay_tls_read(self, rio: RelayIO) -> None:
        assert rio.tls is not None
        if not rio.handshaken:
            self._relay_handshake(rio)
            if not rio.handshaken:
                if rio.service_eof:
                    rio.relay.service_closed("connection closed during the TLS handshake")
                return
        chunks = []
        while True:
            try:
                chunk = rio.tls.read(_READ)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                rio.service_eof = True
                break
            except ssl.SSLError as exc:
                rio.relay.service_closed(f"TLS error: {exc.reason or exc}")
                return
            if not chunk:
                rio.service_eof = True
                break
            chunks.append(chunk)
        rio.service_out += rio.tls_out.read()
        if chunks:
            rio.relay.service_data(b"".join(chunks))
        if rio.service_eof:
            rio.relay.service_closed("connection closed by the service")

    def _relay_pump(self, rio: RelayIO) -> None:
        """Move what the relay has for either side to its socket; then settle the ends."""
        relay = rio.relay
        rio.client_out += relay.take_client_output()
        out = relay.take_service_output()
        if out:
            rio.plain_out += out
        if rio.plain_out and rio.connected:
            if rio.tls is None:
                rio.service_out += rio.plain_out
                rio.plain_out.clear()
            elif rio.handshaken:
                try:
                    rio.tls.write(bytes(rio.plain_out))
                    rio.plain_out.clear()
                except ssl.SSLError as exc:
                    relay.service_closed(f"TLS error: {exc.reason or exc}")
                rio.service_out += rio.tls_out.read()
                rio.client_out += relay.take_client_output()
        self._relay_send_service(rio)
        self._relay_send_client(rio)
        if relay.ended:
            self._relay_end(rio)

    def _relay_send_service(self, rio: RelayIO) -> None:
        svc = rio.service
        if svc is None or not rio.connected:
            return
        while rio.service_out:
            try:
                sent = svc.send(rio.service_out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                rio.service_out.clear()
                rio.relay.service_closed(f"connection lost: {exc}")
                break
            del rio.service_out[:sent]
        self.poller.modify(svc, POLLIN | (POLLOUT if rio.service_out else 0))

    def _relay_send_client(self, rio: RelayIO) -> None:
        while rio.client_out:
            try:
                sent = rio.client.send(rio.client_out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                rio.client_out.clear()
                rio.relay.client_closed()
                break
            del rio.client_out[:sent]
        fd = rio.client.fileno()
        if fd >= 0 and self.sockets.get(fd, (None, None))[1] is rio.conn:
            self._arm(rio.client, rio.conn, bool(rio.client_out))

    def _relay_end(self, rio: RelayIO) -> None:
        relay, conn = rio.relay, rio.conn
        if rio.service is not None and (relay.service_done or rio.service_eof):
            # what it had for the service (its close) was sent just before, if the socket
            # took it; nothing is waited for from the service once the relay ended
            self._relay_close_service(rio)
        if self.relays.get(conn) is not rio:
            return
        if not relay.client_gone and (rio.client_out or relay.pending_outcome is not None):
            return  # the outcome goes first (POLLOUT, the client's header or the deadline
            # brings us back)
        if relay.state == DONE:
            del self.relays[conn]
            conn.auth_grant = (relay.mechanism, relay.grant)
            self._log_auth("info", f"authenticated as {relay.grant.user}")
            data = relay.leftover
            relay.leftover = b""
            pos = 0
            while pos < len(data):  # what the client sent after its SASL (its AMQP header...)
                cap = conn.capacity()
                if cap <= 0:
                    conn.refuse("amqp:connection:framing-error",
                                "too much input before the SASL outcome")
                    break
                n = min(cap, len(data) - pos)
                conn.push(data[pos:pos + n], n)
                pos += n
            self.engine.dirty.add(conn)
            return
        del self.relays[conn]
        if relay.error.startswith("authentication service"):
            self._log_auth("warning", f"Downstream disconnected: {relay.error}")
        else:
            self._log_auth("info", f"[C{conn.conn_id}] {relay.error}")
        if not relay.client_gone:
            cond = cproton.pn_transport_condition(conn.transport._impl)
            cproton.pn_condition_set_name(cond, "amqp:unauthorized-access")
            cproton.pn_condition_set_description(
                cond, f"Authentication failed [mech={relay.mechanism or 'none'}]")
        conn.close_input()
        conn.close_output()
        sock = self.sock_of.get(conn)
        if sock is not None:
            self._close_socket(sock, conn)

    def _relay_close_service(self, rio: RelayIO) -> None:
        svc = rio.service
        rio.service = None
        if svc is None:
            return
        self.relay_socks.pop(svc.fileno(), None)
        try:
            self.poller.unregister(svc)
        except KeyError:
            pass
        svc.close()

    def _relay_tick(self, now: float) -> float:
        """Deadlines of the relays; returns the earliest still ahead (inf: none)."""
        soonest = float("inf")
        for rio in list(self.relays.values()):
            try:
                soonest = min(soonest, self._relay_tick_one(rio, now))
            except Exception as exc:  # noqa: BLE001 - this client fails, the worker goes on
                self._relay_failed(rio, exc)
        return soonest

    def _relay_tick_one(self, rio: RelayIO, now: float) -> float:
        """One relay's deadline; returns when it wants the next tick (inf: ended)."""
        rio.relay.tick(now)
        if now >= rio.relay.deadline and rio.client_out:  # a client that does not read
            rio.client_out.clear()
            rio.relay.client_closed()
            if rio.relay.state == DONE:  # never handed over without its outcome
                self._relay_drop(rio.conn)
                rio.conn.close_input()
                rio.conn.close_output()
                sock = self.sock_of.get(rio.conn)
                if sock is not None:
                    self._close_socket(sock, rio.conn)
                return float("inf")
        self._relay_pump(rio)
        return rio.relay.deadline if self.relays.get(rio.conn) is rio else float("inf")

    def _relay_drop(self, conn: Any) -> None:
        """The client's socket is closing (any reason): the service's goes too."""
        rio = self.relays.pop(conn, None)
        if rio is not None:
            rio.relay.client_closed()
            self._relay_close_service(rio)


def _sni(host: str) -> Optional[str]:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return None  # an address: no SNI
    except OSError:
        return host or None
