"""Management operations: one request and one View in, a reply or a runtime change out.

Owns the semantics of CREATE, READ, UPDATE, DELETE, QUERY (attributeNames, offset/count paging),
GET-TYPES, GET-ATTRIBUTES, GET-OPERATIONS, GET-ANNOTATIONS, GET-MGMT-NODES, GET-SCHEMA,
GET-JSON-SCHEMA and GET-LOG, and which status answers what, with 1.19's wording (200, 201, 204,
400 with a description, 403, 404 ``No entity with name=N``, 501 naming the target's operations for
an operation it does not have, or a feature not built yet). A request whose ``type`` is
``org.amqp.management`` (name ``self``) is addressed to the management node itself, as 1.19's
client library sends them.

Changes that other processes must apply (listeners, connectors, addresses, log levels,
closing a connection) are returned as :class:`Change`; the agent sends them and answers when
every process has. Pure: no I/O. Must not import zmq, router_io or router_core.core.
"""
from __future__ import annotations

import functools
import socket
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from agent.management import connroutes, schemadoc, schemaops
from agent.management.entities import View, address_columns
from agent.management.protocol import (
    BAD_REQUEST, CREATED, ENTITY_OPERATIONS, FORBIDDEN, GLOBAL_OPERATIONS, INTERNAL_ERROR,
    MANAGEMENT_NODE_TYPES, NO_CONTENT, NOT_FOUND, NOT_IMPLEMENTED, OK, ManagementError, Request,
    answered_by_core_agent)
from common.schema import ROUTER_CONFIG_TYPES, EntityType
from common.log import MODULES as LOG_MODULES

# Mutations of these types need a feature the router does not have yet: answer 501, clearly.
NOT_BUILT = {
    "policy": "policy changes are not supported by this router yet",
    "router.link": "changing a link's adminStatus is not supported by this router yet",
}
# A QUERY names at most this many attributes (the widest type has under 100; proton cannot
# encode a reply with tens of thousands of columns): more is a bad request, not a 500.
MAX_ATTRIBUTE_NAMES = 1000
# Types whose CREATE/DELETE go to processes; how many workers must succeed.
_RUNTIME = {"listener": "all", "connector": "all", "router.config.address": "none",
            "router.config.linkRoute": "none", "router.config.autoLink": "none",
            "router.config.exchange": "none", "router.config.binding": "none",
            "sslProfile": "all", "vhost": "all", "authServicePlugin": "all"}


@dataclass
class Reply:
    status: int
    body: Any = None
    description: Optional[str] = None


@dataclass
class Change:
    """A change every process must apply before the agent answers ``status`` with ``body``.

    ``workers``: "all" (every worker must succeed), "any" (the owner, e.g. of a connection) or
    "none" (only the core's result counts). ``commit``: what the agent's store does on success.
    """
    op: str
    entity_type: str
    attributes: dict
    entity: dict
    status: int
    body: Any
    workers: str = "all"
    commit: Optional[str] = None  # add | remove | replace | None
    summary: str = ""
    # (module, text) lines 1.19 logs at warning when the change is applied (a vhost's options
    # its policy code ignores)
    warnings: list = field(default_factory=list)


Outcome = Union[Reply, Change]


@dataclass
class Context:
    """What the operations need besides the view: the log entries for GET-LOG."""
    log_entries: list = field(default_factory=list)


def execute(request: Request, view: View, ctx: Optional[Context] = None) -> Outcome:
    ctx = ctx or Context()
    op = request.operation
    if _refused_by_core_agent(request):  # with the body 1.19's core agent composes
        body = {"QUERY": {"attributeNames": [], "results": []}, "DELETE": {}}.get(op)
        return Reply(FORBIDDEN, body, "Forbidden")
    if op in ENTITY_OPERATIONS:
        return _entity_operation(request, view)
    schema = view.store.schema
    if op not in GLOBAL_OPERATIONS:
        return _unknown_operation(request, view)
    if op == "QUERY":
        return _query(request, view)
    if op == "GET-TYPES":
        return Reply(OK, schemaops.get_types(schema, request.entity_type))
    if op == "GET-ATTRIBUTES":
        return Reply(OK, schemaops.get_attributes(schema, request.entity_type))
    if op == "GET-OPERATIONS":
        return Reply(OK, schemaops.get_operations(schema, request.entity_type))
    if op == "GET-ANNOTATIONS":
        return Reply(OK, schemaops.get_annotations(schema, request.entity_type))
    if op == "GET-MGMT-NODES":
        return Reply(OK, view.management_nodes())
    if op == "GET-SCHEMA":
        return Reply(OK, schemadoc.get_schema(schema))
    if op == "GET-JSON-SCHEMA":
        return Reply(OK, schemadoc.get_json_schema(schema, request.int_prop("indent")))
    if op == "GET-LOG":
        return _get_log(request, ctx)
    raise ManagementError(NOT_IMPLEMENTED, f"Operation '{op}' not implemented")  # pragma: no cover


_T = "org.apache.qpid.dispatch."
# What 1.19's core agent refuses outright (403, before looking for the entity): the router
# entity's READ, CREATE and DELETE, a connection's DELETE (it is closed by UPDATE), and the
# console type whatever the operation. Its Python agent serves the short names, so a READ
# of type ``router`` (or of no type) by the router's name or identity is answered.
_CORE_REFUSED = {_T + "router": ("READ", "CREATE", "DELETE"),
                 _T + "connection": ("DELETE",),
                 _T + "console": ("QUERY", "READ", "CREATE", "UPDATE", "DELETE")}


def _refused_by_core_agent(request: Request) -> bool:
    if not answered_by_core_agent(request.properties):
        return False
    target = request.properties.get("entityType")
    if target is None:
        target = request.properties.get("type")
    return request.operation in _CORE_REFUSED.get(target, ())


def _unknown_operation(request: Request, view: View) -> Reply:
    """An operation neither the node nor the named entity has: 501 naming its operations (after
    the checks 1.19 makes first: the type exists, a name or identity is given, the entity
    exists)."""
    schema = view.store.schema
    if request.to_node:
        etype = schema.entity_type("management")
    else:
        etype = schemaops.resolve_type(schema, request.type)
        if request.name is None and request.identity is None:
            raise ManagementError(BAD_REQUEST, f"{etype.long_name}: No name or identity "
                                               "provided")
        view.find(etype, request.name, request.identity)
        if etype.short_name == "dummy" and request.operation == "CALLME":
            return Reply(OK, dict(request.properties))  # 1.19's test operation: an echo
    raise ManagementError(NOT_IMPLEMENTED, _not_implemented(request.operation, etype))


def _not_implemented(op: str, etype: EntityType) -> str:
    return f"Operation '{op}' not implemented for '{etype.long_name}' {list(etype.operations)}"


# --- what to ask the core ---------------------------------------------------------------------
_SCOPED = ("connection", "router.link", "router.address")


def core_query(request: Request, schema: Any) -> str:
    """The CoreQuery ``what`` a request is answered from: a page or one entity of one kind
    (router_core/corepage.py) where the answer needs no more, so its cost follows what it
    returns; the router's own entity from counts; else the whole ``snapshot``."""
    op = request.operation
    try:
        if op == "QUERY" and request.entity_type:
            etype = schemaops.resolve_type(schema, request.entity_type)
            if etype.short_name == "router":
                return "counts"
            if etype.short_name in _SCOPED and [t for t in schema.concrete_types()
                                                if t.extends_type(etype.short_name)] == [etype]:
                offset = request.int_prop("offset", 0) or 0
                count = request.int_prop("count")
                return f"page {etype.short_name} {offset} {'-' if count is None else count}"
        elif op == "READ" and request.type and request.type not in MANAGEMENT_NODE_TYPES:
            etype = schemaops.resolve_type(schema, request.type)
            short = etype.short_name
            if short == "router":
                return "counts"
            identity = request.identity
            if short == "router.address":
                if identity is not None and str(identity).startswith("router.address/"):
                    return f"one {short} {str(identity)[len('router.address/'):]}"
                if identity is None and request.name is not None:
                    return f"one {short} {request.name}"
            elif short in _SCOPED and identity is not None and str(identity).isdigit():
                return f"one {short} {identity}"
    except ManagementError:  # answered (with its error) from the whole snapshot
        pass
    return "snapshot"


# --- QUERY ------------------------------------------------------------------------------------
def query_rows(entities: list[dict], names: list[str], offset: int,
               count: Optional[int]) -> list[list]:
    """Rows of ``names`` values (None where an entity lacks one), paged by offset/count."""
    selected = entities[offset:] if count is None else entities[offset:offset + count]
    return [[entity.get(name) for name in names] for entity in selected]


def _query(request: Request, view: View) -> Reply:
    body = request.body_map()
    names = body.get("attributeNames") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ManagementError(BAD_REQUEST, "attributeNames must be a list of strings")
    if len(names) > MAX_ATTRIBUTE_NAMES:
        raise ManagementError(BAD_REQUEST, f"too many attributeNames ({len(names)}; at most "
                                           f"{MAX_ATTRIBUTE_NAMES})")
    offset = request.int_prop("offset", 0) or 0
    count = request.int_prop("count")
    schema = view.store.schema
    if request.entity_type:  # every type that is or extends it (org.amqp.management: the node)
        base = schemaops.resolve_type(schema, request.entity_type)
        types = [t for t in schema.concrete_types() if t.extends_type(base.short_name)]
        entities = [e for etype in types for e in view.entities(etype)]
        if base.short_name == "router" and answered_by_core_agent(request.properties):
            # 1.19's core agent: its one router is identity "1", named by the router's id
            entities = [{**e, "identity": "1", "name": e.get("id")} for e in entities]
    else:
        types = [t for t in schema.concrete_types() if t.short_name not in _CORE_AGENT_ONLY]
        entities = [e for etype in types for e in _python_agent_entities(etype, view)]
    if not names:
        names = []
        for etype in types:
            columns = schemaops.query_columns(etype)
            if etype.short_name == "router" and not request.entity_type:  # as configured
                columns = [n for n in schemaops.attribute_names(etype)
                           if n not in _ROUTER_NOT_IN_1_19]
            names.extend(n for n in columns if n not in names)
    scope = view.snapshot.get("scope")
    if scope and scope[0] == "page":  # the core paged already (core_query)
        offset = 0
    return Reply(OK, {"attributeNames": names,
                      "results": query_rows(entities, names, offset, count)})


# 1.19 answers a QUERY without a type from its Python agent's entities: these types are only in
# its core agent (and of the router.config types, only the configuration file's are in both)
_CORE_AGENT_ONLY = frozenset(("connection", "router.link", "router.address",
                              "router.connection.linkRoute"))


def _python_agent_entities(etype: EntityType, view: View) -> list[dict]:
    """The entities of one type as 1.19's Python agent lists them: the router.config ones of
    the configuration file only, under the identity it gave them (``linkRoute/0``...)."""
    if etype.short_name == "router":
        return [_router_as_configured(etype, view)]
    entities = view.entities(etype)
    if etype.short_name not in ROUTER_CONFIG_TYPES:
        return entities
    from_file = view.store.from_file.get(etype.long_name, [])
    short = etype.short_name[len("router.config."):]
    out = []
    for entity in entities:
        if str(entity.get("identity")) in from_file:
            index = from_file.index(str(entity["identity"]))
            out.append({**entity, "identity": f"{short}/{index}"})
    return out


# the router's settings 1.19's schema does not have (its Python agent cannot list them; the
# type named in full still shows them), and the ones it has without a default (1.19 lists them
# only when configured; here, where the configuration is read with its defaults filled in, when
# set to other than this router's default)
_ROUTER_NOT_IN_1_19 = frozenset(("metricsDir", "metricsIntervalSeconds", "metricsMaxBytes",
                                 "metricsKeepFiles"))
_ROUTER_NO_DEFAULT_IN_1_19 = frozenset(("timestampsInUTC",))


@functools.lru_cache(maxsize=1)
def _host_name() -> str:
    """The name 1.19 gives its router entity's hostName: the host's own name looked up by
    address, "" when that fails."""
    try:
        return socket.gethostbyaddr(socket.gethostname())[0]
    except OSError:
        return ""


def _router_as_configured(etype: EntityType, view: View) -> dict:
    """1.19's Python agent holds the router entity as configured: its settings and defaults,
    none of the core's counters, and the counts it was created with (0); ``area`` is its
    placeholder "0" whatever the configuration says, ``hostName`` the host's name."""
    [live] = view.entities(etype)
    settings = {n: a for n, a in etype.attributes.items()
                if not a.graph and n not in _ROUTER_NOT_IN_1_19}
    configured = view.store.of_type(etype.long_name)[0]
    entity = {n: a.default for n, a in settings.items()}
    entity.update({n: v for n, v in configured.items() if n in settings and v is not None})
    entity.update({n: None for n in _ROUTER_NO_DEFAULT_IN_1_19
                   if entity.get(n) == settings[n].default})
    entity.update({"type": etype.long_name, "name": live["identity"],
                   "identity": live["identity"], "version": None, "linkCount": 0,
                   "addrCount": 0, "nodeCount": 0, "area": "0", "hostName": _host_name()})
    return entity


# --- GET-LOG ----------------------------------------------------------------------------------
def _get_log(request: Request, ctx: Context) -> Reply:
    module = request.prop("module")
    limit = request.int_prop("limit")
    entries = [list(e) for e in ctx.log_entries if module is None or e[0] == module]
    if limit:  # (1.19: 0 is no limit)
        entries = entries[-limit:]
    return Reply(OK, entries)


# --- CREATE / READ / UPDATE / DELETE ----------------------------------------------------------
def _target_type(request: Request, view: View) -> Optional[EntityType]:
    name = request.type
    if name in MANAGEMENT_NODE_TYPES:  # the node itself: its one entity, management/self
        name = "management"
    body = request.body if isinstance(request.body, dict) else {}
    if name is None and request.operation == "CREATE" and isinstance(body.get("type"), str):
        name = body["type"]
    if name is None:
        return None
    return schemaops.resolve_type(view.store.schema, name)


def _locate(request: Request, view: View, etype: Optional[EntityType]) -> tuple:
    if request.name is None and request.identity is None:
        # 1.19: with no type (or the node's own) the request is for the management node
        if etype is None or etype.short_name == "management":
            management = view.store.schema.entity_type("management")
            return management, view.find(management, None, "self")
        raise ManagementError(*_no_name_answer(etype, request.operation))
    if etype is not None and etype.short_name == "connection" and request.identity is None \
            and request.operation == "READ":
        raise ManagementError(BAD_REQUEST, "Name not supported. Identity required")  # 1.19's core
    if etype is not None:
        try:
            return etype, view.find(etype, request.name, request.identity)
        except ManagementError as exc:
            if exc.status == NOT_FOUND and etype.short_name not in (*_CORE_AGENT_TYPES, "router"):
                _refuse_other_type(request, view, etype)
            raise
    for candidate in view.store.schema.concrete_types():
        try:
            return candidate, view.find(candidate, request.name, request.identity)
        except ManagementError:
            continue
    # no type given and nothing found: report it like a typed lookup would
    raise ManagementError(NOT_FOUND, View.not_found(request.name, request.identity))


# the types 1.19's core agent answers for by itself (the others its Python agent finds by name or
# identity among all its entities, then checks the type)
_CORE_AGENT_TYPES = frozenset((*ROUTER_CONFIG_TYPES, "router.config.exchange",
                               "router.config.binding", "connection", "router.link",
                               "router.address", "router.connection.linkRoute"))


def _no_name_answer(etype: EntityType, operation: str) -> tuple:
    """1.19's status and text for a request of a type with neither name nor identity: its core
    agent's own words for the types it serves, else the type-prefixed text."""
    if etype.short_name == "router.config.binding":
        return BAD_REQUEST, "No binding name or identity provided"
    if etype.short_name == "connection" and operation == "READ":
        return BAD_REQUEST, "Name not supported. Identity required"
    if etype.short_name == "router.address":
        return NOT_FOUND, "Not Found"
    if etype.short_name in _CORE_AGENT_TYPES and etype.short_name not in ("router.link",
                                                                          "connection"):
        return BAD_REQUEST, "No name or identity provided"
    return BAD_REQUEST, f"{etype.long_name}: No name or identity provided"


def _read_answer(etype: EntityType, entity: dict, view: View) -> dict:
    """A READ's body: 1.19's core agent answers its types with its columns; its Python agent
    (every other type, and the router named other than in full) with the attributes that
    have a value, the router as it was configured."""
    if etype.short_name in _CORE_AGENT_TYPES:
        return schemaops.core_answer(etype, entity)
    if etype.short_name == "router":
        entity = _router_as_configured(etype, view)
    if etype.short_name == "connector":  # 1.19 refreshes these two as strings, "" for none
        entity.update({k: "" for k in ("connectionMsg", "failoverUrls") if entity.get(k) is None})
    return {name: value for name, value in entity.items() if value is not None}


def _refuse_other_type(request: Request, view: View, etype: EntityType) -> None:
    """The entity named exists with another type: 1.19's 400 (it looks by the name, else the
    identity, among all the entities its Python agent holds)."""
    key, value = ("name", request.name) if request.name is not None else (
        "identity", request.identity)
    for other in view.store.schema.concrete_types():
        if other is etype or other.short_name in _CORE_AGENT_TYPES:
            continue
        if any(e.get(key) == value for e in view.entities(other)):
            raise ManagementError(BAD_REQUEST, f"Entity type '{other.long_name}' does not "
                                               f"extend requested type '{etype.long_name}'")


def _entity_operation(request: Request, view: View) -> Outcome:
    op = request.operation
    etype = _target_type(request, view)
    if op == "CREATE":
        if etype is None:
            raise ManagementError(BAD_REQUEST, "CREATE needs a 'type'")
        _check_operation(etype, op)
        if etype.short_name == connroutes.SHORT:
            return connroutes.create(request, view, etype, Change)
        return _create(request, view, etype)
    try:
        etype, entity = _locate(request, view, etype)
    except ManagementError as exc:
        if exc.status == NOT_FOUND and op == "UPDATE" and etype is not None \
                and etype.short_name == "connection" \
                and answered_by_core_agent(request.properties):  # 1.19's core agent: a bare 400
            raise ManagementError(BAD_REQUEST, "Bad Request") from None
        raise
    if etype.short_name == "connection" and op == "DELETE":  # 1.19: close one with UPDATE
        raise ManagementError(FORBIDDEN, "Forbidden")
    if op != "READ" or etype.short_name != connroutes.SHORT:  # 1.19 reads those too
        _check_operation(etype, op)
    if op == "READ":
        return Reply(OK, _read_answer(etype, dict(entity), view))
    if etype.short_name == connroutes.SHORT and op == "DELETE":
        return connroutes.delete(request, entity, etype, Change)
    if op == "UPDATE":
        return _update(request, view, etype, entity)
    return _delete(etype, entity, view)


def _check_operation(etype: EntityType, op: str) -> None:
    # 1.19's schema lists only READ for a connection, yet its agent closes one on UPDATE
    if op not in etype.operations and not (etype.short_name == "connection" and op == "UPDATE"):
        raise ManagementError(NOT_IMPLEMENTED, _not_implemented(op, etype))
    if op != "READ" and etype.short_name in NOT_BUILT:
        raise ManagementError(NOT_IMPLEMENTED, NOT_BUILT[etype.short_name])


def _create(request: Request, view: View, etype: EntityType) -> Outcome:
    # A CREATE without a map body is refused before anything else: a listener made of
    # defaults alone would listen on every interface.
    entity = view.store.validate_create(etype, request.body_map(required=True), request.name)
    if etype.short_name == "dummy":  # 1.19's test entity: kept by the agent alone
        view.store.add(entity)
        return Reply(CREATED, {k: v for k, v in entity.items() if v is not None})
    mode = _RUNTIME.get(etype.short_name)
    if mode is None:  # pragma: no cover - every creatable type is runtime or NOT_BUILT
        raise ManagementError(NOT_IMPLEMENTED, f"CREATE of {etype.short_name} is not supported")
    attributes = _plain(entity)
    if etype.short_name in ("listener", "connector") and entity.get("sslProfile"):
        # the profile travels with it: a restarted worker gets it back with the listener
        profile = view.store.ssl_profile(str(entity["sslProfile"]))
        if profile is not None:
            attributes["sslProfileAttributes"] = _plain(profile)
    body = dict(entity)
    if etype.short_name == "router.config.address":
        body = address_columns(entity)
    if etype.short_name == "router.config.autoLink":  # the core has not looked at it yet
        body.update({"operStatus": "inactive", "linkRef": None, "lastError": None})
    if etype.short_name == "router.config.linkRoute":
        body["operStatus"] = "active" if any(
            c.get("role") == "route-container"
            and ((entity.get("connection") is not None
                  and c.get("listener") == entity.get("connection"))
                 or (entity.get("containerId") is not None
                     and c.get("container") == entity.get("containerId")))
            for c in view.snapshot.get("connections", [])) else "inactive"
    if etype.short_name in ROUTER_CONFIG_TYPES:  # 1.19's core answers with every column, as READ
        body = schemaops.core_answer(etype, View.present(etype, body))
    if etype.short_name == "router.config.exchange":  # the counters of a new exchange
        body = View.present(etype, {**body, "bindingCount": 0, "receivedCount": 0,
                                    "droppedCount": 0, "forwardedCount": 0, "divertedCount": 0})
    if etype.short_name == "router.config.binding":
        body = View.present(etype, {**body, "matchedCount": 0})
    return Change("create", etype.long_name, attributes, entity, CREATED, body,
                  workers=mode, commit="add",
                  summary=f"Created {etype.short_name} {entity['name'] or entity['identity']}",
                  warnings=(view.store.vhost_warnings(entity)
                            if etype.short_name == "vhost" else []))


def _delete(etype: EntityType, entity: dict, view: View) -> Outcome:
    if etype.short_name == "sslProfile":
        users = view.store.users_of_ssl_profile(str(entity.get("name")))
        if users:
            raise ManagementError(BAD_REQUEST, f"sslProfile '{entity.get('name')}' is used by "
                                               + ", ".join(f"{u['type'].rsplit('.', 1)[-1]} "
                                                           f"'{u['name']}'" for u in users)
                                               + ": delete those first")
    if etype.short_name == "authServicePlugin":  # its listeners ask it at every accept
        users = view.store.users_of_auth_plugin(str(entity.get("name")))
        if users:
            raise ManagementError(BAD_REQUEST, f"authServicePlugin '{entity.get('name')}' is "
                                               "used by " + ", ".join(
                                                   f"listener '{u['name']}'" for u in users)
                                               + ": delete those first")
    if etype.short_name == "listener" and entity.get("http"):
        # 1.19 with the libwebsockets it is built with (4.0 to 4.1) cannot close one
        raise ManagementError(BAD_REQUEST, "HTTP listeners cannot be deleted")
    if etype.short_name == "dummy":
        view.store.remove(entity)
        return Reply(NO_CONTENT, {})
    mode = _RUNTIME.get(etype.short_name)
    if mode is None:  # pragma: no cover
        raise ManagementError(NOT_IMPLEMENTED, f"DELETE of {etype.short_name} is not supported")
    return Change("delete", etype.long_name, _plain(entity), entity, NO_CONTENT, {},
                  workers=mode, commit="remove",
                  summary=f"Deleted {etype.short_name} {entity['name'] or entity['identity']}")


def _update(request: Request, view: View, etype: EntityType, entity: dict) -> Outcome:
    changes = view.store.validate_update(etype, entity, request.body_map())
    short = etype.short_name
    if short == "log":
        return _update_log(view, etype, entity, changes)
    if short == "dummy":
        updated = {k: v for k, v in {**entity, **changes}.items() if v is not None}
        view.store.replace(updated)
        return Reply(OK, updated)
    if short == "connection":
        if "adminStatus" in changes:  # 1.19 asks the requesting connection's policy first
            allowed = view.admin_status_update_allowed(request.in_conn)
            if allowed is None:  # 1.19: the requesting connection is unknown or gone
                raise ManagementError(BAD_REQUEST, "Parent connection no longer exists")
            if allowed is False:
                raise ManagementError(FORBIDDEN,
                                      "You are not allowed to perform this operation.")
        status = changes.pop("adminStatus", None)
        trace = changes.pop("enableProtocolTrace", None)
        if changes or (status is None and trace is None):  # 1.19: a bad request
            raise ManagementError(BAD_REQUEST, "only adminStatus and enableProtocolTrace can "
                                               "be updated on a connection")
        if status == "deleted":
            if view.is_internal_connection(entity["identity"]):
                raise ManagementError(FORBIDDEN,
                                      "the router's internal connection cannot be closed")
            if entity.get("role") == "inter-router":  # as 1.19: the network's links stay
                raise ManagementError(FORBIDDEN, "Forbidden")
        else:
            status = None  # "enabled": nothing to do
        if status is None and trace is None:
            return Reply(OK, dict(entity))
        after = dict(entity)
        attrs = {"identity": entity["identity"], "connId": int(entity["identity"])}
        if trace is not None:  # its frames logged at PROTOCOL trace whatever the log levels
            attrs["enableProtocolTrace"] = after["enableProtocolTrace"] = bool(trace)
        if status == "deleted":
            attrs["adminStatus"] = "deleted"
            attrs["byConnId"] = request.in_conn  # for 1.19's "force-closed by request" line
            after.update(adminStatus="deleted", operStatus="down")
        what = "Closed" if status else ("Traced" if trace else "Stopped tracing")
        return Change("update", etype.long_name, attrs, after, OK, after, workers="any",
                      summary=f"{what} connection {entity['identity']} by management")
    if short == "vhost":  # every worker replaces its compiled vhost (store.check_vhost)
        updated = {**entity, **changes}
        view.store.check_vhost(updated, replacing=entity)
        return Change("update", etype.long_name, _plain(updated), updated, OK, dict(updated),
                      workers="all", commit="replace",
                      summary=f"Updated vhost {updated.get('hostname')}",
                      warnings=view.store.vhost_warnings(updated))
    raise ManagementError(NOT_IMPLEMENTED, f"UPDATE of {short} is not supported")


def _update_log(view: View, etype: EntityType, entity: dict, changes: dict) -> Change:
    updated = {**entity, **changes}
    output = changes.get("outputFile")
    if output is not None and output not in ("stderr", "stdout", "syslog"):  # '' too
        try:  # the agent runs as the router, on its host: a file it cannot open, none can
            with open(output, "a", encoding="utf-8"):
                pass
        except OSError:
            raise ManagementError(INTERNAL_ERROR, "CError: Configuration: Failed to open log "
                                                  f"file '{output}'") from None
    if updated["module"] not in LOG_MODULES:
        raise ManagementError(NOT_IMPLEMENTED, f"log module '{updated['module']}' is not used by "
                                               "this router")
    effective = dict(_plain(updated))
    if effective.get("enable") == "default":
        if updated["module"] == "DEFAULT":
            raise ManagementError(BAD_REQUEST, "the DEFAULT log module cannot be set to "
                                               "'default'")
        default = next(e for e in view.store.of_type(etype.long_name) if e["module"] == "DEFAULT")
        effective["enable"] = default.get("enable", "info+")
    return Change("update", etype.long_name, effective, updated, OK, dict(updated),
                  workers="all", commit="replace",
                  summary=f"Log {updated['module']} set to {changes}")


def _plain(entity: dict) -> dict:
    """Attributes to send to other processes: no None values (they mean 'unset')."""
    return {k: v for k, v in entity.items() if v is not None}
