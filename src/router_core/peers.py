"""The core's peers other than the workers' connections: who said hello, policy events, connectors.

Owns: ``PeerHello`` (a peer names itself; when the agent comes, or comes back, it is told what
happened before it: router links up, the mobile addresses and link-route destinations this
interior router announces), ``PolicyEvent`` and ``PolicyClose`` (policy counters kept by the
core, and the POLICY line of a closing connection that reports them) and
``ConnectorStatus`` (what management shows of a connector without an open connection).

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from common.ipc import RouterLinkUp
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.linkends import check_router_up
from router_core.linkroute import announce_all
from router_core.records import KEY_EDGE, KEY_MOBILE, MODE_INTERIOR
from router_core.relay import announce
# --- end core parts ---


def on_hello(core: Any, peer: Any, cmd: Any) -> None:
    core.peers[peer] = cmd[1]
    if cmd[1] == "agent":
        core.agent_peer = peer
        # what happened before the agent was there (workers may start first), and for a
        # restarted agent the router links its predecessor had been told of
        for conn in core.conns.values():
            if conn.router_up:
                core._emit(peer, RouterLinkUp(conn.conn_id, conn.cost, conn.container))
            else:
                check_router_up(core, conn)
        if core.mode == MODE_INTERIOR:
            for addr in core.addrs.values():
                if ((addr.consumers or addr.exchange is not None)
                        and (addr.cls == KEY_MOBILE or addr.cls == KEY_EDGE)):
                    announce(core, addr, True)
            announce_all(core)  # link-route destinations


def on_policy_event(core: Any, peer: Any, cmd: Any) -> None:
    core.policy_counts.event(cmd[0], cmd[1], cmd[2])


def on_policy_close(core: Any, peer: Any, cmd: Any) -> None:
    core.policy_counts.closed(cmd[0], cmd[1], cmd[2], cmd[3], cmd[4], cmd[5], cmd[6])


def on_connector_status(core: Any, peer: Any, cmd: Any) -> None:
    """ConnectorStatus: what management shows of a connector while it has no open connection
    (corestate.connector_views); an empty status forgets a deleted connector, an empty message
    keeps the one shown (a connection that closed in order leaves its Connection Opened text)."""
    name, status, message = str(cmd[0]), cmd[1], cmd[2]
    if status:
        if not message and name in core.connector_status:
            message = core.connector_status[name][1]
        core.connector_status[name] = (str(status), str(message), str(cmd[3] or ""))
    else:
        core.connector_status.pop(name, None)
