"""Connection-scoped link routes (``router.connection.linkRoute``), as Qpid Dispatch 1.19 has them.

A client creates one with management CREATE over its own connection (``pattern``,
``direction``), and so does an edge router over its uplink for its own link routes (1.19's
link-route proxy); that connection becomes the route's one destination, whatever its role, and
the route goes when the connection closes. Only management requests that came in on that
connection see it (READ, QUERY) or delete it. It is never in the configuration file nor in
the runtime journal: it lives in the core, with its connection (router_core/linkroute.py).

The checks and their texts are 1.19's, in its order. Pure: no I/O. Must not import zmq,
router_io or router_core.
"""
from __future__ import annotations

from typing import Any

from agent.management.entities import View
from agent.management.protocol import (
    BAD_REQUEST, CREATED, FORBIDDEN, NO_CONTENT, ManagementError, Request)
from common.linkroutes import normalize
from common.schema import EntityType

SHORT = "router.connection.linkRoute"
# connections a route cannot be made on (the request came from another interior router);
# an edge router makes its link routes on its interior this way (1.19's link-route proxy)
_NOT_CLIENT_ROLES = ("inter-router",)


def create(request: Request, view: View, etype: EntityType, change: Any) -> Any:
    """CREATE over the request's connection: ``change(...)`` builds the Change the agent
    sends to the core (which answers for itself only)."""
    if request.in_conn is None:
        raise ManagementError(BAD_REQUEST, "Can only create via management CREATE")
    conn = view.connection_row(request.in_conn)
    if conn is None:
        raise ManagementError(BAD_REQUEST, "Parent connection no longer exists")
    if request.in_conn in (view.snapshot.get("noDynamicLinkRoutes") or ()):
        raise ManagementError(FORBIDDEN, "Forbidden")  # vhost policy allowDynamicLinkRoutes
    if conn.get("role") in _NOT_CLIENT_ROLES:
        raise ManagementError(BAD_REQUEST, "A connection-scoped link route can only be "
                                           "created over a client's own connection")
    body = request.body
    if not isinstance(body, dict):
        raise ManagementError(BAD_REQUEST, "Body of request must be a map")
    if "pattern" not in body:
        raise ManagementError(BAD_REQUEST, "Pattern field is required")
    pattern, problem = normalize(body["pattern"], False)
    if problem:
        raise ManagementError(BAD_REQUEST, problem)
    direction = body.get("direction")
    if direction is None:
        raise ManagementError(BAD_REQUEST, "Missing value for 'direction'")
    if direction not in ("in", "out"):
        raise ManagementError(BAD_REQUEST, "Invalid value for 'direction'")
    taken = tuple(str(r.get("identity")) for r in view.snapshot.get("connLinkRoutes") or [])
    identity = view.store.next_config_identity(taken)
    name = request.name if request.name is not None else body.get("name")
    attributes = {"identity": identity, "pattern": pattern, "direction": direction,
                  "connId": request.in_conn}
    if name is not None:
        attributes["name"] = str(name)
    answer = {"name": attributes.get("name"), "identity": identity, "type": etype.long_name,
              "pattern": pattern, "direction": direction, "containerId": conn.get("container")}
    return change("create", etype.long_name, attributes, answer, CREATED, answer,
                  workers="none", commit=None,
                  summary=f"Created {SHORT} {attributes.get('name') or identity} on "
                          f"connection {request.in_conn}")


def delete(request: Request, entity: dict, etype: EntityType, change: Any) -> Any:
    """DELETE of a route the request's connection sees (View.find found it: else 404)."""
    attributes = {"identity": entity["identity"], "connId": request.in_conn}
    return change("delete", etype.long_name, attributes, entity, NO_CONTENT, {},
                  workers="none", commit=None,
                  summary=f"Deleted {SHORT} {entity.get('name') or entity['identity']}")
