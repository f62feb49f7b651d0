"""1.19's POLICY debug line at the close of a connection under vhost policy.

The worker reports what the connection holds at its close (``PolicyClose``); the core writes
the line with its vhost's denials so far, which it counts router-wide from every worker's
``PolicyEvent`` (router_core/policycount.py): a connection's denials are its vhost's, whichever
worker process the vhost's other connections landed on. Must not import zmq, proton, agent or
supervisor.
"""
from __future__ import annotations

from typing import Any

from common import ipc


def report_policy_close(worker: Any, conn: Any) -> None:
    """Tell the core (before the ConnClosed) that ``conn``, a connection of the worker, closed
    under vhost policy."""
    report = policy_close(conn, worker.conn_count.total())
    if report is not None:
        worker.engine.outbox.append(report)


def policy_close(conn: Any, connections: int) -> ipc.PolicyClose | None:
    """The report for ``conn`` (a connection of a worker's engine) if it was accepted under
    vhost policy, with ``connections`` the router's count of accepted connections after it;
    else None."""
    if conn.policy is None or conn.direction != "in":
        return None
    senders = sum(1 for lk in conn.links.values() if lk.direction == ipc.DIR_IN)
    receivers = sum(1 for lk in conn.links.values() if lk.direction == ipc.DIR_OUT)
    return ipc.PolicyClose(conn.conn_id, conn.policy_vhost, conn.host, conn.n_sessions,
                           senders, receivers, connections)
