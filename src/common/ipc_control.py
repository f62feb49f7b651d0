"""IPC messages of the control plane: child processes to the supervisor, and management's
plumbing between the agent, the core process and the workers (queries, config changes, logs,
reloads).

Part of the one IPC schema: their codes are in ``common.ipc.MESSAGE_TYPES``, which re-exports
them.

Must not import proton, zmq or anything from router_io/agent/supervisor/router_core.
"""
from __future__ import annotations

from typing import NamedTuple


# ----------------------------------------------------------------------------------------------
# Child process -> supervisor
# ----------------------------------------------------------------------------------------------
class ChildStatus(NamedTuple):
    """A child process reports "ready" (its sockets are bound) or "failed" (it cannot run)."""
    kind: str     # core | worker | agent
    index: int
    pid: int
    status: str   # ready | failed
    detail: str


SUPERVISOR_PEER = -2  # the peer index of the supervisor's batches to the core (PeerLost)


class PeerLost(NamedTuple):
    """Supervisor -> core: the process behind peer ``peer`` died; drop all it owned.

    Its connections close as if each had dropped: deliveries they had in flight end RELEASED or
    MODIFIED toward their senders. A restarted peer says PeerHello again with a new pid.
    """
    peer: int
    pid: int


# ----------------------------------------------------------------------------------------------
# Management plumbing (agent <-> core process <-> workers); relayed by router_core/coreproc.py
# ----------------------------------------------------------------------------------------------
class CoreQuery(NamedTuple):
    """Agent -> core: ask for a consistent snapshot of the core's state (``what`` = "snapshot")."""
    request_id: int
    what: str


class CoreState(NamedTuple):
    """Core -> agent: the answer to a CoreQuery (plain msgpack-able dicts)."""
    request_id: int
    state: dict


class ConfigChange(NamedTuple):
    """Agent -> core -> every worker (or the owning one): apply a runtime configuration change.

    op: create | delete | update; entity_type: long or short type name (listener, connector,
    log, router.config.address, connection...); attributes: the entity's attributes.
    """
    request_id: int
    op: str
    entity_type: str
    attributes: dict


ENTITY_TYPE_PREFIX = "org.apache.qpid.dispatch."


def short_type(entity_type: str) -> str:
    """A ConfigChange's entity type without the management prefix: ``listener`` for
    ``org.apache.qpid.dispatch.listener`` (a short name is returned as it is)."""
    if entity_type.startswith(ENTITY_TYPE_PREFIX):
        return entity_type[len(ENTITY_TYPE_PREFIX):]
    return entity_type


class ConfigResult(NamedTuple):
    """Worker/core -> agent: the outcome of a ConfigChange on one peer.

    status: of a failure, the management status it calls for: NOT_SUPPORTED (501) when that
    process cannot make such a change, else 0 (an error; the agent answers 500, or 400 when
    the request asked for something impossible)."""
    request_id: int
    peer: int
    ok: bool
    detail: str
    status: int = 0


NOT_SUPPORTED = 501  # ConfigResult.status: the change is not supported (management's 501)


class LogQuery(NamedTuple):
    """Agent -> core -> every worker: send your log report (GET-LOG, ``logStats``)."""
    request_id: int


class ConnectorStatus(NamedTuple):
    """Worker -> core: how the worker running connector ``name`` last found it, for management
    (1.19's connector ``connectionStatus``/``connectionMsg``): ``CONNECTING`` with the text of
    the last failed attempt or lost connection (``[Cn] Connection to HOST:PORT failed: ...``,
    "" before any), or "" once the connector is deleted (forgotten). An open connection of the
    connector is ``SUCCESS``; the core sees that from its ConnOpened. ``failover_urls``: 1.19's
    ``failoverUrls`` (the address in use first, then the others of its failover list)."""
    name: str
    status: str
    message: str
    failover_urls: str = ""


class LogReport(NamedTuple):
    """Core/worker -> agent: one process's ``common.log.RouterLog.report()`` (``counts``:
    module -> lines per level; ``entries``: the recent ones), relayed by the core process.
    peer: the worker's index, -1 for the core."""
    request_id: int
    peer: int
    report: dict


class ReloadRequest(NamedTuple):
    """Supervisor -> agent: apply these configuration changes (from a re-read config file).

    changes: [{"op": create|delete|update, "type": entity type, "name": ..., "attributes": {...}}]
    """
    request_id: int
    changes: list


class ReloadResult(NamedTuple):
    """Agent -> supervisor: how a ReloadRequest went; ``applied`` lists the change indexes done."""
    request_id: int
    ok: bool
    applied: list
    detail: str
