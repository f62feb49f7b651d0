"""What management changes in a worker at run time: listeners, connectors, sslProfiles,
authServicePlugins, vhosts, log levels, a connection's trace or adminStatus; and the changes
a restarted worker applies again at its start.

A mixin of Worker (worker.py). Must not import router_core, agent or supervisor.
"""
from __future__ import annotations

from typing import Any

from common import ipc, listenfds


class ConfigMixin:
    core: Any
    engine: Any
    index: int
    ipc_dir: str
    listeners: dict
    connectors: dict
    poller: Any
    log_sink: Any
    tls_contexts: dict
    force_closed: set

    def _replay_runtime_changes(self) -> None:
        """Apply what management changed at run time (vhosts, sslProfiles, log levels...), as
        the workers before this one applied it; listeners and connectors came from the broker."""
        try:
            changes = listenfds.runtime_changes(self.ipc_dir)
        except (OSError, ValueError) as exc:
            self._log_server("error", f"runtime configuration changes not recovered: {exc}")
            return
        for change in changes:
            kind = str(change.get("type", "")).rsplit(".", 1)[-1]
            if kind in ("listener", "connector"):
                continue
            try:
                ok, detail = self.apply_config_change(ipc.ConfigChange(
                    0, str(change.get("op")), str(change.get("type")),
                    dict(change.get("attributes") or {})))
            except Exception as exc:  # noqa: BLE001 - one bad entry must not stop the start
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            if not ok:
                self._log_server("error", f"runtime change {change.get('op')} {kind} not "
                                          f"re-applied: {detail}")

    def _config_changes(self, effects: list) -> None:
        for change in effects:
            if type(change) is ipc.LogQuery:  # GET-LOG, logStats: this process's lines
                self.core.send_multipart(ipc.encode_batch(self.index, [
                    ipc.LogReport(change.request_id, self.index, self.log_sink.report())]))
                continue
            if type(change) is not ipc.ConfigChange:
                self.engine.apply(change)
                continue
            status = 0
            try:
                ok, detail = self.apply_config_change(change)
            except NotImplementedError as exc:
                ok, detail, status = False, f"not supported: {exc}", ipc.NOT_SUPPORTED
            except Exception as exc:  # a bad change must not take the worker down: report it
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            self.core.send_multipart(ipc.encode_batch(self.index, [
                ipc.ConfigResult(change.request_id, self.index, ok, detail, status)]))

    def apply_config_change(self, change: ipc.ConfigChange) -> tuple:
        """Apply one management change in this worker; return (ok, detail).

        NotImplementedError: a change this worker cannot make (the agent answers 501).
        """
        kind = ipc.short_type(change.entity_type)
        attrs = change.attributes
        name = attrs.get("name")
        if kind == "authServicePlugin":  # used by the connections accepted from now on
            self.set_auth_plugin(str(name), attrs if change.op == "create" else None)
            return True, ""
        if kind == "sslProfile":  # used by the connections accepted/made from now on
            self.engine.set_ssl_profile(str(name), attrs if change.op == "create" else None)
            self.tls_contexts.clear()  # http listeners' contexts are made again when needed
            return True, ""
        if kind == "listener" and change.op == "create":
            try:
                sock = listenfds.open_lent(self.ipc_dir, attrs)
            except listenfds.ListenerError as exc:
                return False, str(exc)
            except (OSError, ValueError) as exc:
                return False, f"cannot get the listening socket from the supervisor: {exc}"
            self._add_listener(sock, attrs)
            http = " for HTTP" if attrs.get("http") or attrs.get("httpRootDir") else ""
            self._log_server("info", f"Listening{http} on {attrs.get('host')}:"
                                     f"{attrs.get('port')}")
            return True, ""
        if kind == "listener" and change.op == "delete":
            for fd, (sock, settings) in list(self.listeners.items()):
                if settings.get("name") == name:
                    self.poller.unregister(sock)
                    sock.close()
                    del self.listeners[fd]
                    self._log_server("info", f"Stopped listening on {settings.get('host')}:"
                                             f"{settings.get('port')}")
            self._tell_broker({"op": "close", "name": name})
            return True, ""
        if kind == "connector":
            # Every worker gets the change; open_connector keeps it only in the owning worker.
            if change.op == "create" and hasattr(self, "open_connector"):
                owned = self.open_connector(attrs)
                if owned:  # so that this worker, restarted, opens it again
                    self._tell_broker({"op": "connector", "action": "add", "settings": attrs})
                return True, "opened" if owned else "not owned"
            if change.op == "delete" and hasattr(self, "close_connector"):
                if name in self.connectors:
                    self._tell_broker({"op": "connector", "action": "del",
                                       "settings": {"name": name}})
                self.close_connector(str(name))
                return True, ""
            raise NotImplementedError("connectors not supported yet")
        if kind == "log" and change.op == "update":
            self.log_sink.configure(attrs)
            return True, ""
        if kind == "vhost":  # checked by the agent first; refused here only on a conflict
            try:
                self.engine.set_vhost(change.op, attrs)
            except ValueError as exc:  # policy.PolicyError
                return False, str(exc)
            return True, ""
        if kind == "connection" and change.op == "update":
            conn_id = int(attrs.get("connId", 0))
            if conn_id not in self.engine.conns_by_id:
                return False, "not owned"
            if "enableProtocolTrace" in attrs:
                self.engine.trace_connection(conn_id, bool(attrs["enableProtocolTrace"]),
                                             self._trace_frame_always)
            if attrs.get("adminStatus") == "deleted":
                self.engine.apply(ipc.CloseConnection(conn_id, "amqp:connection:forced",
                                                      "Connection closed by management"))
                # as 1.19: the close frame goes out and the socket closes without waiting
                # for the peer's answer (a hung peer is what an operator deletes); the line
                # is 1.19's, and the closed socket is not reported as a failure
                self.engine.conns_by_id[conn_id].close_input()
                self.force_closed.add(conn_id)
                by = attrs.get("byConnId")
                self.log_sink.log("ROUTER_CORE", "info", f"[C{conn_id}] Connection force-closed"
                                  + (f" by request from connection [C{by}]" if by else ""))
                return True, "closed"
            return True, "traced"
        return True, "ignored"

    def _tell_broker(self, message: dict) -> None:
        try:
            listenfds.request(self.ipc_dir, message)
        except (OSError, ValueError) as exc:
            self._log_server("error", f"could not tell the supervisor ({message.get('op')}): {exc}")
