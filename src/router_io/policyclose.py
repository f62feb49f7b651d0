"""1.19's POLICY debug line at the close of a connection under vhost policy.

What the connection holds at its close and the denials of its vhost user group so far (the
engine counts them per group: engine_policy.policy_denials). Pure but for the log call.
Must not import zmq, proton, agent or supervisor.
"""
from __future__ import annotations

from typing import Any

from common import ipc


def log_policy_close(worker: Any, conn: Any) -> None:
    """Log the line at POLICY debug when ``conn`` (an accepted connection of the worker) was
    under vhost policy."""
    if conn.policy is not None and conn.direction == "in":
        worker.log_sink.log("POLICY", "debug", policy_close_line(
            worker.engine, conn, worker.conn_count.total()))


def policy_close_line(engine: Any, conn: Any, connections: int) -> str:
    """The line for ``conn`` (a policy-governed connection of ``engine``) with ``connections``
    the router's count of accepted connections after it."""
    denials = getattr(engine, "group_denials", {}).get(
        (conn.policy_vhost, getattr(conn.policy, "name", "")), (0, 0, 0, 0))
    senders = sum(1 for lk in conn.links.values() if lk.direction == ipc.DIR_IN)
    receivers = sum(1 for lk in conn.links.values() if lk.direction == ipc.DIR_OUT)
    return (f"[C{conn.conn_id}] Connection '{conn.host}' closed with resources "
            f"n_sessions={conn.n_sessions}, n_senders={senders}, n_receivers={receivers}, "
            f"sessions_denied={denials[0]}, senders_denied={denials[1]}, "
            f"receivers_denied={denials[2]}, max_message_size_denied:{denials[3]}, "
            f"nConnections= {connections}.")
