"""Router-wide policy connection counts and the vhostStats / policy counters.

Connections are spread over several I/O worker processes, but the limits are router-wide (the
global ``maxConnections``, a vhost's ``maxConnections``, ``maxConnectionsPerUser``,
``maxConnectionsPerHost``). The core sees every ConnOpened, in one thread, so it counts them
here: the worker resolves the vhost and user group (common/policy.py) and hands the limits
over with the ConnOpened (``ConnOpened.policy``); the core admits or denies (a denied connection
is closed with ``amqp:resource-limit-exceeded`` and never registered, so its links are refused).
Denials a worker decides alone (no vhost, unknown user, remote host, sessions, links, message
size) reach here as ``PolicyEvent`` so the counters are router-wide too.

Plain Python (not compiled): called once per connection open/close, never per message. Log lines
(1.19's POLICY lines) are queued in ``logs`` for the core process to write.
"""
from __future__ import annotations

from typing import Any, Optional

RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
CONNECTION_DISALLOWED = "connection disallowed by local policy"


class VhostStats:
    __slots__ = ("name", "approved", "denied", "current", "per_user", "per_host", "session",
                 "sender", "receiver", "max_size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.approved = self.denied = self.current = 0
        self.per_user: dict = {}  # user -> [connection name]
        self.per_host: dict = {}  # host -> [connection name]
        self.session = self.sender = self.receiver = self.max_size = 0

    def view(self) -> dict:
        return {"hostname": self.name, "id": self.name, "connectionsApproved": self.approved,
                "connectionsDenied": self.denied, "connectionsCurrent": self.current,
                "perUserState": {u: list(c) for u, c in self.per_user.items()},
                "perHostState": {h: list(c) for h, c in self.per_host.items()},
                "sessionDenied": self.session, "senderDenied": self.sender,
                "receiverDenied": self.receiver, "maxMessageSizeDenied": self.max_size}


class PolicyCounts:
    def __init__(self) -> None:
        self.current = 0          # counted inbound connections (the global maxConnections)
        self.processed = 0
        self.denied = 0           # by the global limit
        self.links_denied = 0
        self.max_size_denied = 0
        self.total_denials = 0
        self.max_limit = 65535
        self.vhosts: dict = {}    # name -> VhostStats
        self.conns: dict = {}     # conn id -> (vhost name or None, user, host, conn name)
        self.logs: list = []      # (level, text) for the core process's POLICY log
        # whether POLICY trace is on (the core process sets it when the levels change): the
        # ALLOW line of every connection is made only then
        self.trace = True

    def _stats(self, name: str) -> VhostStats:
        stats = self.vhosts.get(name)
        if stats is None:
            stats = self.vhosts[name] = VhostStats(name)
        return stats

    def admit(self, conn_id: Any, host: str, info: list) -> Optional[str]:
        """A ConnOpened with policy ``info`` = [global max, vhost, user, rhost, vhost max,
        max per user, max per host] (vhost None: not under vhost policy). Counts it and returns
        None, or the reason it is denied (nothing counted then)."""
        global_max, vhost, user, rhost, vmax, umax, hmax = info
        self.max_limit = global_max
        self.processed += 1
        if self.current >= global_max:
            self.denied += 1
            self.total_denials += 1
            self.logs.append(("info", f"DENY Connection '{rhost}' based on global connection "
                                      f"count. nConnections= {self.current}"))
            return CONNECTION_DISALLOWED
        if vhost is not None:
            stats = self._stats(vhost)
            n_user = len(stats.per_user.get(user, ()))
            n_host = len(stats.per_host.get(rhost, ()))
            diags = []
            if stats.current >= vmax:
                diags.append("Connection denied by application connection limit")
            if n_user >= umax:
                diags.append("Connection denied by application per user limit")
            if n_host >= hmax:
                diags.append("Connection denied by application per host limit")
            if diags:
                stats.denied += 1
                for diag in diags:
                    self.logs.append(("info", f"DENY AMQP Open for user '{user}', rhost "
                                              f"'{rhost}', vhost '{vhost}': {diag}"))
                return CONNECTION_DISALLOWED
            stats.approved += 1
            stats.current += 1
            stats.per_user.setdefault(user, []).append(host)
            stats.per_host.setdefault(rhost, []).append(host)
        self.current += 1
        if self.trace:
            self.logs.append(("trace", f"ALLOW Connection '{rhost}' based on global connection "
                                       f"count. nConnections= {self.current}"))
        self.conns[conn_id] = (vhost, user, rhost, host)
        return None

    def release(self, conn_id: Any) -> None:
        facts = self.conns.pop(conn_id, None)
        if facts is None:
            return
        self.current -= 1
        vhost, user, rhost, host = facts
        if vhost is None:
            return
        stats = self._stats(vhost)
        stats.current -= 1
        for table, key in ((stats.per_user, user), (stats.per_host, rhost)):
            names = table.get(key)
            if names and host in names:
                names.remove(host)

    def event(self, vhost: str, kind: str, count: int = 1) -> None:
        """A denial a worker decided: global (the global maxConnections, at accept) |
        connection | session | sender | receiver | maxMessageSize."""
        if kind == "global":
            self.processed += count
            self.denied += count
            self.total_denials += count
            return
        stats = self._stats(vhost) if vhost else None
        if kind == "connection":
            if stats is not None:
                stats.denied += count
            return
        self.total_denials += count
        if kind in ("sender", "receiver"):
            self.links_denied += count
        if kind == "maxMessageSize":
            self.max_size_denied += count
        if stats is not None:
            if kind == "session":
                stats.session += count
            elif kind == "sender":
                stats.sender += count
            elif kind == "receiver":
                stats.receiver += count
            elif kind == "maxMessageSize":
                stats.max_size += count

    def closed(self, conn_id: Any, vhost: str, host: str, n_sessions: int, n_senders: int,
               n_receivers: int, n_connections: int) -> None:
        """1.19's POLICY debug line at the close of a connection under vhost policy: what it
        held and its vhost's denials so far, router-wide (1.19 keeps one set of denial counts
        per vhost, shared by all its connections)."""
        stats = self.vhosts.get(vhost) or VhostStats(vhost)
        self.logs.append(("debug", (
            f"[C{conn_id}] Connection '{host}' closed with resources n_sessions={n_sessions}, "
            f"n_senders={n_senders}, n_receivers={n_receivers}, "
            f"sessions_denied={stats.session}, senders_denied={stats.sender}, "
            f"receivers_denied={stats.receiver}, max_message_size_denied:{stats.max_size}, "
            f"nConnections= {n_connections}.")))

    def take_logs(self) -> list:
        logs, self.logs = self.logs, []
        return logs

    def view(self) -> dict:
        return {"connectionsProcessed": self.processed, "connectionsDenied": self.denied,
                "connectionsCurrent": self.current, "linksDenied": self.links_denied,
                "maxMessageSizeDenied": self.max_size_denied,
                "totalDenials": self.total_denials,
                "vhosts": [s.view() for s in self.vhosts.values()]}
