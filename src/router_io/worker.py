"""The I/O worker process: sockets, the poll loop, and the ZeroMQ link to the core.

One loop iteration (batch, then flush):

1. poll the listening sockets, the connection sockets and the core's DEALER socket;
2. accept new connections; read every readable socket into its proton transport;
3. drain every effect batch the core has sent and apply it to the engine;
4. let the engine turn all pending proton events into commands;
5. send those commands to the core as ONE batch, then write every connection's output
   (also after every ``_READ_BATCH`` sockets read, so that many peers setting up at once
   are answered while the rest are read).

Only this module (and ``router_io.httpstream`` for http listeners) touches sockets; the AMQP
logic lives in ``router_io.engine``. A listener with ``http: yes`` speaks HTTP/1.1 (h11): a
WebSocket upgrade (subprotocol ``amqp`` or ``binary``) becomes an AMQP connection of the engine
like any other, ``/metrics`` and ``/healthz`` are asked of the agent (its Unix socket), other
GETs are static files from ``httpRootDir`` (``router_io.httpstream``).
Listeners are bound once, by the supervisor (``common.listenfds``), and lent to every worker:
all workers accept on the same socket, and it stays open while a worker is restarted.
Connectors (attempts, back-off, failure log lines) are router_io/connectors.py's and the http
listeners' requests and WebSocket upgrades router_io/worker_http.py's, the handshake deadline
router_io/handshakes.py's, mixins of Worker;
the per-message path (poll loop, ``_read``, ``_flush``, ``_flush_one``, ``_drain_core``) is here.
Must not import router_core.core (the core runs in its own process).
"""
from __future__ import annotations

import errno
import os
import socket
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Optional

import zmq

from common import ipc, listenfds, zmqcalls
from common.log import RouterLog
from common.procutil import (SignalWake, child_start, core_endpoint, run_profiled, status_socket,
                             presize_fd_table, steady_gc, watch_sigterm)
from router_io.engine_select import get_engine_class
from router_io.connectors import Connector, ConnectorsMixin
from router_io.conncount import SharedConnectionCount
from router_io.handshakes import HandshakeMixin
from router_io.policyclose import report_policy_close
from router_io.httpstream import HttpStream
from router_io.sockpoll import SocketPoller
from router_io.worker_auth import AuthMixin
from router_io.worker_config import ConfigMixin
from router_io.worker_http import HttpMixin

if TYPE_CHECKING:  # the compiled build's worker never imports the pure engine
    from router_io.engine import Connection

POLLIN, POLLOUT = int(zmq.POLLIN), int(zmq.POLLOUT)  # ints: enum flags' & is Python code
_READ_SIZE = 65536
_MAX_BATCHES_PER_LOOP = 256
# Sockets read before their events are processed and their answers written (the rest of a
# wake-up's sockets are read after): many peers setting up at once get their answers while
# the others are read, not all after the last (which made clients wait in lock-step).
_READ_BATCH = 16
# A connection held by Q2 (every streamed delivery of it past its window) is still read this
# much each tick (about a second): its peer's heartbeats must reach proton, or the idle
# time-out closes a connection that only waits for a slow receiver (1.19 never stops reading a
# connection: its Q2 holds the delivery). Bounds what a held connection takes to ~4 KB/s.
_Q2_TRICKLE = 4096
_MANAGEMENT = (ipc.ConfigChange, ipc.LogQuery)


class Worker(ConnectorsMixin, HttpMixin, AuthMixin, HandshakeMixin, ConfigMixin):
    """One I/O worker: the poll loop, connection sockets, the link to the core. Connectors
    are router_io/connectors.py's, http listeners router_io/worker_http.py's, listeners
    relaying SASL to an authServicePlugin router_io/worker_auth.py's, management's changes
    router_io/worker_config.py's (mixins)."""

    def __init__(self, spec: dict, index: int, peer_count: int, ipc_dir: str,
                 generation: int = 0) -> None:
        self.spec = spec
        self.index = index
        self.ipc_dir = ipc_dir
        self.generation = generation
        self.log_sink = RouterLog(spec.get("logs", []))
        self.engine = get_engine_class()(spec["router_id"], index, peer_count, log=self._log_server,
                                          generation=generation)
        self.engine.set_policy(spec.get("policy"), spec.get("vhosts"))  # vhost policy
        self.engine.policy_log = lambda level, text: self.log_sink.log("POLICY", level, text)
        self._log_levels_changed()
        self.log_sink.listeners.append(self._log_levels_changed)
        self.engine.set_security(spec.get("router"), spec.get("sslProfiles"))  # TLS, SASL
        self.ctx = zmq.Context()
        self.core = self.ctx.socket(zmq.DEALER)
        self.core.setsockopt(zmq.IDENTITY, b"p%d" % index)
        self.core.setsockopt(zmq.LINGER, 0)
        self.core.setsockopt(zmq.SNDHWM, 0)
        self.core.setsockopt(zmq.RCVHWM, 0)
        self.core.connect(core_endpoint(ipc_dir))
        self.status = status_socket(self.ctx, ipc_dir)
        self.poller = SocketPoller()  # a wake-up costs the ready sockets (sockpoll.py)
        self.poller.register(self.core, POLLIN)
        self.wake: Optional[SignalWake] = None  # main(): procutil.watch_sigterm
        self.listeners: dict[int, tuple[socket.socket, dict]] = {}
        self.sockets: dict[int, tuple[socket.socket, Connection]] = {}
        self.sock_of: dict[Connection, socket.socket] = {}
        self.want_write: set = set()
        self.held: set = set()  # connections whose socket Q2 holds (_q2_update)
        self.connectors: dict[str, Connector] = {}
        self.connecting: dict[int, Connector] = {}
        self.conn_connector: dict[Connection, Connector] = {}
        self.worker_count = int(spec.get("workers", 1))
        self.running = True
        self.force_closed: set = set()  # ids of connections management closed (adminStatus)
        # the global maxConnections, checked at accept against the router-wide count
        self.max_connections = int((spec.get("policy") or {}).get("maxConnections", 65535))
        self.conn_count = SharedConnectionCount(ipc_dir, index, peer_count)
        self.counted: set = set()  # ids of this worker's connections in conn_count
        # accepted connections whose peer has not sent its AMQP open yet -> the time by which
        # it must (the listener's initialHandshakeTimeoutSeconds; _expire_handshakes)
        self.handshakes: dict[Connection, float] = {}
        self.rbuf = bytearray(_READ_SIZE)
        self.wbuf = bytearray(_READ_SIZE)
        self.next_tick = 0.0
        self.http: dict[int, HttpStream] = {}      # http-listener sockets still speaking HTTP
        self.ws: dict[int, tuple] = {}             # upgraded ones: fd -> (HttpStream, Connection)
        self.fetches: dict[int, Any] = {}          # fd -> AgentFetch (connected to the agent)
        self.agent_fetches: dict[str, Any] = {}    # path -> the AgentFetch under way for it
        self.tls_contexts: dict[tuple, Any] = {}
        self._auth_setup(spec.get("authServicePlugins"))

    def _log_server(self, level: str, text: str) -> None:
        self.log_sink.log("SERVER", level, text)

    def _log_levels_changed(self) -> None:
        """PROTOCOL trace (its own or DEFAULT's) turns proton's frame trace on or off: with it
        off, frames are not even formatted. MESSAGE trace turns the message lines of
        connections with messageLoggingComponents on or off: with it off, no message is
        looked at."""
        on = self.log_sink.enabled("PROTOCOL", "trace")
        if on != (self.engine.frame_trace is not None):
            self.engine.set_frame_trace(self._trace_frame if on else None)
        on = self.log_sink.enabled("MESSAGE", "trace")
        if on != (self.engine.msg_trace is not None):
            self.engine.set_message_trace(self._trace_message if on else None)

    def _trace_frame(self, conn_id: int, text: str) -> None:
        self.log_sink.log("PROTOCOL", "trace", f"[C{conn_id}]:{text}")

    def _trace_message(self, conn_id: int, text: str) -> None:
        self.log_sink.log("MESSAGE", "trace", text)

    def _trace_frame_always(self, conn_id: int, text: str) -> None:
        """A connection management traces (enableProtocolTrace): written at trace whatever
        PROTOCOL's levels, as 1.19."""
        self.log_sink.log("PROTOCOL", "trace", f"[C{conn_id}]:{text}", force=True)

    def report(self, status: str, detail: str = "") -> None:
        self.status.send_multipart(ipc.encode_batch(self.index, [
            ipc.ChildStatus("worker", self.index, os.getpid(), status, detail)]))

    # --- set-up -------------------------------------------------------------------------------
    def start(self) -> bool:
        self.core.send_multipart(ipc.encode_batch(self.index, [
            ipc.PeerHello(self.index, "worker", os.getpid())]))
        # the supervisor bound the listeners (and knows the connectors created since start-up):
        # a restarted worker picks up the same sockets and the current connectors
        try:
            listeners, connectors = listenfds.lent_listeners(self.ipc_dir)
        except (OSError, ValueError) as exc:
            self.report("failed", f"cannot get the listening sockets from the supervisor: {exc}")
            return False
        for sock, settings in listeners:
            self._add_listener(sock, settings)
        for settings in connectors:
            self.open_connector(settings)
        self._replay_runtime_changes()
        self.report("ready")
        return True

    def _add_listener(self, sock, settings: dict) -> None:
        # TCP_NODELAY on the listening socket: Linux gives it to every socket accepted from
        # it, so _accept makes no setsockopt call a connection
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:  # (not TCP): its connections go without it, the worker on
            self._log_server("warning", f"TCP_NODELAY not set on a listening socket: {exc}")
        self.listeners[sock.fileno()] = (sock, settings)
        self.poller.register(sock, POLLIN)

    # --- connectors ---------------------------------------------------------------------------
    # --- loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        # the log lines of a pass (one a connection accepted) leave in one write at its end
        self.log_sink.hold_lines()
        try:
            self._loop()
        finally:
            self.log_sink.flush()

    def _loop(self) -> None:
        engine, sockets_get, flush_log = self.engine, self.sockets.get, self.log_sink.flush
        while self.running:
            try:
                events = self.poller.poll(self._timeout_ms())
            except zmq.ZMQError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            reads = 0
            for target, mask in events:  # a connection's socket first: most events are
                entry = sockets_get(target)
                if entry is not None:
                    if mask & POLLIN:
                        self._read(*entry)
                        reads += 1
                        if reads % _READ_BATCH == 0:
                            self._answer()  # these answered while the rest are read
                    if mask & POLLOUT:
                        engine.dirty.add(entry[1])
                elif target is self.core:
                    self._drain_core()
                elif target in self.listeners:
                    self._accept(target)
                elif target in self.connecting:
                    self._finish_connect(target)
                elif target in self.http:
                    self._http_event(target, mask)
                elif target in self.fetches:
                    self._fetch_event(target)
                elif target in self.relay_socks:
                    self._relay_service_event(target, mask)
                elif self.wake is not None and target is self.wake.sock:
                    self.wake.drain()  # a signal: its handler has run (self.running)
            entry = None  # a connection closed in _flush must not live on in this frame
            if self.ws:
                self._ws_pending_input()
            if time.monotonic() >= self.next_tick:
                self._tick()
            self._answer()
            flush_log()
        self._shutdown()

    def _answer(self) -> None:
        """What was read becomes commands to the core (one batch) and output on the sockets."""
        engine = self.engine
        try:  # each event is isolated in the engine (one connection closes); this is a net
            engine.process_events()
        except Exception as exc:  # noqa: BLE001 - the worker and its other connections go on
            self._log_server("error", "internal error processing events: "
                             + "".join(traceback.format_exception(exc)).rstrip())
        # the lines of what was accepted and processed are written before its effects leave
        # (the core's commands, the peers' bytes)
        self.log_sink.flush()
        commands = engine.take_commands()
        if commands:
            zmqcalls.send(self.core, ipc.encode_frame(self.index, commands))
        if engine.q2_changed:
            self._q2_update()
        self._flush()

    def _q2_update(self) -> None:
        """Connections whose streamed deliveries filled (or freed) their window: stop reading
        their sockets when every one is held, else read them (1.x's Q2;
        engine_stream_in.py, STREAM_WINDOW)."""
        changed = self.engine.q2_changed
        self.engine.q2_changed = set()
        for conn in changed:
            sock = self.sock_of.get(conn)
            if sock is None or conn.closed:
                continue
            held = conn.q2_held()
            if held == conn.q2_armed_held:
                continue
            conn.q2_armed_held = held
            (self.held.add if held else self.held.discard)(conn)  # trickled by _tick
            self._arm(sock, conn, sock.fileno() in self.want_write)
            if not held:
                self._read(sock, conn)  # what arrived meanwhile (the poll may not say again)

    def _arm(self, sock: Any, conn: Connection, write: bool) -> None:
        """Poll ``sock`` for input unless its connection is held by Q2, and for output if
        ``write``."""
        mask = (POLLOUT if write else 0) | (0 if conn.q2_held() else POLLIN)
        self.poller.modify(sock, mask)

    def _timeout_ms(self) -> int:
        if self.ws and any(s.amqp_in and c.capacity() > 0 for s, c in self.ws.values()):
            return 0  # decoded WebSocket input the engine can take now (_ws_pending_input)
        return max(0, min(1000, int((self.next_tick - time.monotonic()) * 1000) + 1))

    def _drain_core(self) -> None:
        """Apply every effect batch the core has sent (the poll said there is one); whether
        another waits is asked with EVENTS, not with a receive that fails (zmqcalls)."""
        apply_all, core, recv = self.engine.apply_all, self.core, zmqcalls.recv
        for _ in range(_MAX_BATCHES_PER_LOOP):
            try:
                frame = recv(core, zmqcalls.NOBLOCK)
            except zmq.Again:
                return
            _, effects = ipc.decode_frame(frame)
            if effects and type(effects[0]) in _MANAGEMENT:
                self._config_changes(effects)  # management batches come alone (coreproc.py)
            else:
                apply_all(effects)  # an effect that raises closes its connection, not the worker
            if not zmqcalls.readable(core):
                return

    def _accept(self, fd: int) -> None:
        """Every connection waiting on listener ``fd``: counted against maxConnections, given
        a connection of the engine, polled. What is the listener's is looked up once a call,
        not once a socket (peers that open many connections at once wake it for many)."""
        lsock, settings = self.listeners[fd]
        accept, family = lsock._accept, lsock.family  # (socket.accept() wraps these)
        http = settings.get("http") or settings.get("httpRootDir")
        where = f"{settings.get('host')}:{settings.get('port')}"
        trace = self.log_sink.enabled("SERVER", "trace")
        sockets, sock_of, register = self.sockets, self.sock_of, self.poller.register_socket
        new_connection, admit = self.engine.new_connection, self.conn_count.admit
        while True:
            try:
                new_fd, addr = accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._log_server("error", f"accept failed: {exc}")
                return
            sock = socket.socket(family, socket.SOCK_STREAM, 0, fileno=new_fd)
            sock.setblocking(False)  # (TCP_NODELAY: from the listener, _add_listener)
            host = f"{addr[0]}:{addr[1]}"
            if http:
                self._http_accept(sock, settings, host)
                continue
            if trace:
                self._log_server("trace", f"Accepting connection on {where}")  # as 1.19
            current = admit(self.max_connections)
            if current >= 0:  # as 1.19: closed at accept, before SASL and open
                sock.close()
                self.log_sink.log("POLICY", "info", f"DENY Connection '{addr[0]}' based on "
                                  f"global connection count. nConnections= {current}")
                self.engine.outbox.append(ipc.PolicyEvent("", "global", 1))
                continue
            conn = new_connection(settings, host, "in")
            self.counted.add(conn.conn_id)
            if trace:
                self._log_server("trace", f"[C{conn.conn_id}]: Accepting incoming connection "
                                          f"to '{where}'")
            sockets[sock.fileno()] = (sock, conn)
            sock_of[conn] = sock
            register(sock)
            self._log_server("info", f"[C{conn.conn_id}] Accepted connection to {where} "
                                     f"from {host}")
            self._handshake_deadline(conn, settings)
            if settings.get("saslPlugin"):  # its SASL goes to the service (worker_auth.py)
                self._relay_accept(sock, conn, settings)

    def _read(self, sock: socket.socket, conn: Connection) -> None:
        try:
            if self.relays and conn in self.relays:  # still in its relayed SASL exchange
                self._relay_client_read(sock, conn)
                return
            self._read_into(sock, conn)
        except Exception as exc:  # noqa: BLE001 - this connection closes, the worker goes on
            self._abort(sock, conn, exc)

    def _trickle(self, sock: socket.socket, conn: Connection) -> None:
        """One read of at most _Q2_TRICKLE bytes from a socket held by Q2 (see there)."""
        try:
            cap = conn.capacity()
            if cap <= 0:
                return
            try:
                n = sock.recv_into(self.rbuf, min(cap, _Q2_TRICKLE))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                n = 0
            if n == 0:
                conn.close_input()
                conn.close_output()
            else:
                conn.push(self.rbuf, n)
            self.engine.dirty.add(conn)
        except Exception as exc:  # noqa: BLE001 - this connection closes, the worker goes on
            self._abort(sock, conn, exc)

    def _abort(self, sock: socket.socket, conn: Connection, exc: BaseException) -> None:
        """An unexpected error on one connection's socket path: log it once (traceback), close
        the connection (amqp:internal-error if proton can still say so) and its socket now;
        the core is told (ConnClosed) and settles what it held for it."""
        try:
            self.engine.fail_connection(conn, exc)
        except Exception:  # noqa: BLE001 - the socket still closes below
            pass
        try:
            self._flush_one(sock, conn)  # best effort: the close frame
        except Exception:  # noqa: BLE001
            pass
        if self.sock_of.get(conn) is sock:
            self._close_socket(sock, conn)

    def _read_into(self, sock: socket.socket, conn: Connection) -> None:
        buf = self.rbuf
        while True:
            cap = conn.capacity()
            if cap <= 0:
                break
            try:
                n = sock.recv_into(buf, min(cap, len(buf)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                conn.close_input()
                conn.close_output()
                break
            if n == 0:
                conn.close_input()
                conn.close_output()
                break
            conn.push(buf, n)
            if n < len(buf):
                break
        self.engine.dirty.add(conn)

    def _flush(self) -> None:
        engine = self.engine
        if not engine.dirty:
            return
        dirty = engine.dirty
        engine.dirty = set()
        for conn in dirty:
            if conn.closed:
                continue
            sock = self.sock_of.get(conn)
            if sock is None:
                continue
            try:
                self._flush_one(sock, conn)
            except Exception as exc:  # noqa: BLE001 - this connection closes, the worker goes on
                self._abort(sock, conn, exc)
        # closing connections can produce commands (ConnClosed)
        commands = engine.take_commands()
        if commands:
            zmqcalls.send(self.core, ipc.encode_frame(self.index, commands))

    def _flush_one(self, sock: socket.socket, conn: Connection) -> None:
        """Write one connection's pending output; close its socket once its transport ends."""
        if self.relays and conn in self.relays:  # its SASL relay's output (worker_auth.py)
            self._relay_pump(self.relays[conn])
            return
        wbuf = self.wbuf
        blocked = False
        while True:
            n = conn.output(wbuf)
            if n <= 0:
                if n < 0 and not conn.reported_open:
                    # proton has said all it will (e.g. after a protocol header it does not
                    # speak, with no header to answer) before any AMQP open: nothing the peer
                    # sends can make a session of it, so its input is closed too and the
                    # socket with it (1.19 closes it at once; proton closed only its output)
                    conn.close_input()
                break
            try:
                sent = sock.send(memoryview(wbuf)[:n])
            except (BlockingIOError, InterruptedError):
                blocked = True
                break
            except OSError:
                conn.close_input()
                conn.close_output()
                break
            conn.consumed(sent)
            if sent < n:
                blocked = True
                break
        if not blocked and type(sock) is HttpStream and not sock.flush():
            blocked = True  # WebSocket frames still queued for the socket
        fd = sock.fileno()
        if blocked and fd not in self.want_write:
            self.want_write.add(fd)
            self._arm(sock, conn, True)
        elif not blocked and fd in self.want_write:
            self.want_write.discard(fd)
            self._arm(sock, conn, False)
        if conn.is_closed():
            self._close_socket(sock, conn)

    def _close_socket(self, sock: socket.socket, conn: Connection) -> None:
        self.handshakes.pop(conn, None)
        self.held.discard(conn)
        if self.relays:
            self._relay_drop(conn)
        fd = sock.fileno()
        self.sockets.pop(fd, None)
        self.ws.pop(fd, None)
        self.sock_of.pop(conn, None)
        self.want_write.discard(fd)
        try:
            self.poller.unregister(sock)
        except KeyError:
            pass
        sock.close()
        if conn.conn_id in self.counted:
            self.counted.discard(conn.conn_id)
            self.conn_count.release()
        report_policy_close(self, conn)  # the core logs 1.19's POLICY line, counts router-wide
        try:
            self.engine.drop_connection(conn)  # tells the core (ConnClosed) first thing
        except Exception as exc:  # noqa: BLE001 - the socket is gone; the worker goes on
            self._log_server("error", f"[C{conn.conn_id}] internal error dropping the "
                             "connection: " + "".join(traceback.format_exception(exc)).rstrip())
        connector = self.conn_connector.pop(conn, None)
        error = conn.error_text()
        if conn.conn_id in self.force_closed:  # closed by management: not a failure
            self.force_closed.discard(conn.conn_id)
            error = ""
        name, _, description = error.partition(": ")  # condition and description, 1.19's words
        if connector is not None and self.connectors.get(connector.name) is connector:
            connector.retry_later(time.monotonic(), (
                f"[C{conn.conn_id}] Connection to {connector.host}:{connector.port} failed: "
                f"{name} {description}") if error else None)
            self.engine.outbox.append(connector.report())
        if conn.direction == "in":  # as 1.19: only a connection that failed, in its words
            if error:
                self._log_server("info", f"[C{conn.conn_id}] Connection from {conn.host} (to "
                                 f"{conn.settings.get('host')}:{conn.settings.get('port')}) "
                                 f"failed: {name} {description}")
        else:
            self._log_server("info", f"[C{conn.conn_id}] Connection to {conn.host} closed"
                             + (f": {error}" if error else ""))

    def _tick(self) -> None:
        now = time.monotonic()
        now_ms = int(now * 1000)
        deadline = now + 1.0
        for conn in [c for c in self.held if c.q2_armed_held and c in self.sock_of]:
            self._trickle(self.sock_of[conn], conn)  # (may close it: the list is a copy)
        # only connections with an idle timeout (a relayed one's SASL has its own deadline)
        nxt = self.engine.tick_connections(now_ms, self.relays)
        if nxt:
            deadline = min(deadline, nxt / 1000.0)
        if self.relays:  # SASL relays to an authentication service: their deadlines
            deadline = min(deadline, self._relay_tick(now))
        if self.handshakes:
            deadline = min(deadline, self._expire_handshakes(now))
        if self.http or self.agent_fetches:
            deadline = min(deadline, self._http_tick(now))
        self.engine.release_memory(now)  # also when idle: process_events looks rarely
        self.next_tick = min(deadline, self._service_connectors(now))

    def _shutdown(self) -> None:
        for sock, _ in self.listeners.values():
            sock.close()
        for fd in list(self.http):
            self._http_close(fd)
        for conn in list(self.relays):
            self._relay_drop(conn)
        for sock, conn in list(self.sockets.values()):
            conn.connection.close()
        self.engine.process_events()
        self._flush()
        for sock, conn in list(self.sockets.values()):
            sock.close()
        self.conn_count.close()
        self.core.close(0)
        self.status.close(0)
        self.ctx.term()

    def stop(self, *_: Any) -> None:
        self.running = False


def main(argv: Optional[list] = None) -> int:
    args, spec = child_start("qdrouterd-worker", argv)
    # accept4 never waits for the descriptor table to grow (procutil.py); grown here, before
    # ZeroMQ's threads exist, it does not even wait for the RCU grace period once
    presize_fd_table()
    worker = Worker(spec, args.index, args.peers, args.ipc, args.generation)
    worker.wake = watch_sigterm(worker.stop)  # SIGTERM ends the poll at once
    worker.poller.register(worker.wake.sock, POLLIN)
    if not worker.start():
        worker.status.close(2000)  # deliver the failure report before exiting
        worker.core.close(0)
        worker.ctx.term()
        return 1
    steady_gc()
    run_profiled(f"worker{args.index}", worker.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
