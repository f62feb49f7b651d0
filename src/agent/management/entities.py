"""The management view of one moment: configuration entities plus ONE core snapshot.

Owns the entity adapters: how the core's snapshot (``RouterCore.snapshot()``) and the agent's
configuration store become management entities with Qpid Dispatch 1.x attribute names and
identities (``router/<id>``, ``router.node/<id>``, ``router.address/<key>``, ``log/<MODULE>``,
connections and links by their numeric ids). The router's own internal connections (the agent's)
are not client connections: they and their links are hidden, and their consumers show as
in-process (``inProcess``) on the address, as Qpid shows its embedded agent.

``router.node`` and the list of known routers come from the same core snapshot: its ``nodes``
rows, which the core process's route table renders (``router_core/routetable.py``: next hops,
costs and valid origins are the core's own computation). The core sends them in interior mode
only. As in Qpid Dispatch 1.x, whose routing module does not run outside interior mode, a
snapshot without them has no ``router.node`` entities
(``qdstat -n``: "Router is Standalone - No Router List"), ``nodeCount`` 0 and GET-MGMT-NODES
``[]``. With one, ``router.node`` lists every known router, this router first (``nextHop``
``(self)``), and GET-MGMT-NODES the ``$management`` address of each of them, this router
included (1.x lists every ``router.node``; its qdstat treats fewer than two as "no network").

As 1.19 answers READ and QUERY, every entity carries every attribute of its type (null when
unset; a configuration entity's defaults filled), except ``log`` and ``dummy``, which show their
settings only. Beside the core's objects there are ``allocator`` entities (one per kind of router
object, 1.19's pool names), ``router.memoryUsage`` (VmSize of the router's processes), one
``policy`` entity even without a policy section (``policy/None``), and a connection's
``properties`` are the peer's open properties (from the worker, through the core's snapshot).
``logStats`` (one per log module, 1.19's) count the lines all the router's processes logged
(the snapshot's ``logCounts``, gathered by the agent for requests that show them).

Every answer to one request is computed from one View. Must not import zmq, proton, router_io
or router_core.core.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

from agent.management.loggather import log_stats
from agent.management.protocol import NOT_FOUND, ManagementError
from agent.management.store import ConfigStore
from common.schema import ROUTER_CONFIG_TYPES, EntityType, address_phases

PREFIX = "org.apache.qpid.dispatch."
INTERNAL_ROLE = "internal"


class View:
    """Entities of every type as of one core snapshot."""

    def __init__(self, snapshot: dict, store: ConfigStore, *, version: str, started: float,
                 now: Optional[float] = None, in_conn: Optional[int] = None,
                 worker_processes: int = 0) -> None:
        self.snapshot = snapshot
        self.worker_processes = worker_processes  # started for workerThreads (sizing.py)
        # the connection the request came in on: the connection-scoped entities it sees
        self.in_conn = in_conn
        self.store = store
        self.version = version
        self.started = started
        self.now = time.time() if now is None else now
        # interior mode: the core's router.node rows (routetable.RouteTable.view), this router first
        self.node_rows: Optional[list] = snapshot.get("nodes")
        self.router_id = snapshot.get("router", {}).get("id") or store.of_type(
            PREFIX + "router")[0]["id"]
        self._known: Optional[list[str]] = None
        conns = snapshot.get("connections", [])
        self._internal = {c["identity"] for c in conns if c.get("role") == INTERNAL_ROLE}
        self._cache: dict[str, list[dict]] = {}

    # --- public -------------------------------------------------------------------------------
    def entities(self, etype: EntityType) -> list[dict]:
        """Every entity of one type, attribute maps with ``type``/``name``/``identity``."""
        long = etype.long_name
        if long not in self._cache:
            builder = _BUILDERS.get(etype.short_name)
            if builder is not None:
                found = builder(self)
            else:
                found = [dict(e) for e in self.store.of_type(long)]
            self._cache[long] = [self.present(etype, entity) for entity in found]
        return self._cache[long]

    @staticmethod
    def present(etype: EntityType, entity: dict) -> dict:
        """An entity as 1.19 answers READ, QUERY and CREATE: every attribute of the type present
        (null when unset; a configuration entity's defaults filled), and the deprecated names
        of some types beside the new ones (``dir``, ``addr``, ...)."""
        fill = {n: (a.default if etype.is_configuration else None)
                for n, a in etype.attributes.items()}
        if etype.short_name in ("log", "dummy"):  # 1.19 shows the settings only
            fill = {}
        if etype.short_name in _UNSET_HIDDEN:  # 1.19's agent shows what was set (+ counters)
            fill = {}
            entity = {k: v for k, v in entity.items() if v is not None}
        entity = {**entity, "type": etype.long_name}
        entity.setdefault("name", entity.get("identity"))
        entity = {**fill, **{k: v for k, v in entity.items() if v is not None or k not in fill}}
        if etype.short_name in _ALIASED:
            for old, new in etype.deprecated_names.items():
                entity[old] = entity.get(new)
        return entity

    def find(self, etype: EntityType, name: Optional[str], identity: Optional[str]) -> dict:
        """The entity named by ``identity`` and/or ``name``; 404 if there is none."""
        for entity in self.entities(etype):
            if identity is not None and entity.get("identity") != identity:
                continue
            if name is not None and entity.get("name") != name:
                continue
            return entity
        if etype.short_name in (*ROUTER_CONFIG_TYPES, "router.address"):  # 1.19's core says so
            raise ManagementError(NOT_FOUND, "Not Found")
        raise ManagementError(NOT_FOUND, self.not_found(name, identity))

    @staticmethod
    def not_found(name: Optional[str], identity: Optional[str]) -> str:
        """1.19's 404 description: ``No entity with name=N`` (or ``identity=I``)."""
        if identity is not None:
            return f"No entity with identity={identity}"
        return f"No entity with name={name}"

    def is_internal_connection(self, identity: str) -> bool:
        return identity in self._internal

    def known_routers(self) -> list[str]:
        """Every router id the core's node table knows: this router, then the others by id;
        ``[]`` outside interior mode."""
        if self.node_rows is None:
            return []
        if self._known is None:
            others = {str(row.get("id")) for row in self.node_rows} - {self.router_id}
            self._known = [self.router_id] + sorted(others)
        return self._known

    def management_nodes(self) -> list[str]:
        """GET-MGMT-NODES: the ``$management`` address of every known router (see the module
        docstring: ``[]`` outside interior mode)."""
        area = self._area()
        return [f"amqp:/_topo/{area}/{router}/$management" for router in self.known_routers()]

    def _area(self) -> str:
        area = self.snapshot.get("router", {}).get("area")
        if not area:
            routers = self.store.of_type(PREFIX + "router")
            area = routers[0].get("area") if routers else None
        return str(area or "0")

    # --- builders -----------------------------------------------------------------------------
    def _links(self) -> list[dict]:
        out = []
        for link in self.snapshot.get("links", []):
            if str(link.get("connectionId")) in self._internal:
                continue
            entity = {**link, "peer": None}
            for counter in _LINK_COUNTERS:  # counters are numbers, never null (1.19's qdstat adds)
                if entity.get(counter) is None:
                    entity[counter] = 0
            out.append(entity)
        return out

    def _in_process(self) -> dict:
        """Address key -> (in-process consumers, deliveries to them) from internal links."""
        out: dict[str, list[int]] = {}
        for link in self.snapshot.get("links", []):
            if str(link.get("connectionId")) in self._internal and link.get("linkDir") == "out" \
                    and link.get("owningAddr"):
                entry = out.setdefault(link["owningAddr"], [0, 0])
                entry[0] += 1
                entry[1] += link.get("deliveryCount", 0)
        return out

    def _addresses(self) -> list[dict]:
        in_process = self._in_process()
        out = []
        for addr in self.snapshot.get("addresses", []):
            entity = dict(addr)
            key = addr["key"]
            entity["identity"] = f"router.address/{key}"
            entity["name"] = key
            consumers, delivered = in_process.get(key, (0, 0))
            if consumers:
                entity["inProcess"] = consumers
                entity["subscriberCount"] = max(0, addr.get("subscriberCount", 0) - consumers)
                entity["deliveriesEgress"] = max(0, addr.get("deliveriesEgress", 0) - delivered)
                entity["deliveriesToContainer"] = addr.get("deliveriesToContainer", 0) + delivered
            remote_hosts = [str(r) for r in addr.get("remoteHostRouters") or []]
            entity["remoteHostRouters"] = remote_hosts
            if entity.get("remoteCount") is None:
                entity["remoteCount"] = len(remote_hosts)
            for counter in ("deliveriesRedirectedToFallback", "deliveriesIngressRouteContainer",
                            "deliveriesEgressRouteContainer"):
                entity.setdefault(counter, 0)
            out.append(entity)
        return out

    def _connectors(self) -> list[dict]:
        """Connectors with 1.19's read-only columns: ``connectionStatus`` and
        ``connectionMsg`` from the core (``snapshot["connectors"]``: ``SUCCESS`` and the
        ``Connection Opened`` text while connected, else ``CONNECTING`` and the last failure;
        ``INITIALIZING`` before its worker said anything), ``failoverUrls`` as its worker
        reported them (the address in use first, then the rest of the failover list its peers
        offered), else its own address."""
        status = self.snapshot.get("connectors") or {}
        out = []
        for entity in self.store.of_type(PREFIX + "connector"):
            state = status.get(str(entity.get("name"))) or {}
            scheme = ("amqps" if entity.get("sslProfile") and entity.get("requireSsl")
                      else "amqp")
            out.append({**entity, "failoverUrls": state.get("failoverUrls") or
                        f"{scheme}://{entity.get('host')}:{entity.get('port')}",
                        "connectionStatus": state.get("connectionStatus", "INITIALIZING"),
                        "connectionMsg": state.get("connectionMsg")})
        return out

    def _config_addresses(self) -> list[dict]:
        """Address rules as 1.19's core shows them: the phases it keeps (``address_phases``),
        ``waypoint`` true exactly when they are 0 and 1, and ``enableFallback`` also under the
        core's column name ``fallback``."""
        return [address_columns(e) for e in self.store.of_type(PREFIX + "router.config.address")]

    def _auto_links(self) -> list[dict]:
        """The configured auto-links with the core's view of each (``snapshot["autoLinks"]``
        by identity): operStatus, linkRef, lastError. One the core does not know (yet) is
        inactive."""
        state = {a.get("identity"): a for a in self.snapshot.get("autoLinks", [])}
        out = []
        for entity in self.store.of_type(PREFIX + "router.config.autoLink"):
            core = state.get(entity.get("identity")) or {}
            out.append({**entity, "operStatus": core.get("operStatus", "inactive"),
                        "linkRef": core.get("linkRef"), "lastError": core.get("lastError")})
        return out

    def _connections(self) -> list[dict]:
        out = []
        for conn in self.snapshot.get("connections", []):
            if conn.get("role") == INTERNAL_ROLE:
                continue
            entity = {**conn, "name": f"connection/{conn.get('host')}",
                      "adminStatus": "enabled", "operStatus": "up",
                      "active": conn.get("active", True),
                      "ssl": bool(conn.get("ssl", conn.get("isEncrypted"))),  # has TLS
                      "tenant": None, "protocol": "amqp",
                      "properties": conn.get("properties") or {}}
            entity.pop("allowAdminStatusUpdate", None)  # the policy's, not an attribute
            out.append(entity)
        return out

    def admin_status_update_allowed(self, conn_id: Optional[int]) -> Optional[bool]:
        """Whether management requests from connection ``conn_id`` may change a connection's
        adminStatus (its vhost policy group's allowAdminStatusUpdate; True without policy);
        None when the connection is not there (any more)."""
        for conn in self.snapshot.get("connections", []):
            if str(conn.get("identity")) == str(conn_id):
                return bool(conn.get("allowAdminStatusUpdate", True))
        return None

    def _nodes(self) -> list[dict]:
        """``router.node`` entities from the core's node table, this router first."""
        if self.node_rows is None:
            return []
        mine, others = [], []
        for row in self.node_rows:
            entity = {name: None for name in _NODE_ATTRIBUTES}
            entity.update(row)
            router = str(entity["id"])
            entity["id"] = router
            entity["identity"] = entity["name"] = f"router.node/{router}"
            entity["linkState"] = [str(r) for r in entity["linkState"] or []]
            entity["validOrigins"] = [str(r) for r in entity["validOrigins"] or []]
            if entity["routerLink"] is not None:
                entity["routerLink"] = str(entity["routerLink"])
            (mine if router == self.router_id else others).append(entity)
        return mine + others

    def _router(self) -> list[dict]:
        config = dict(self.store.of_type(PREFIX + "router")[0])
        counters = dict(self.snapshot.get("router", {}))
        counters.pop("mode", None)  # the configured mode is the truth, not the core's default
        config.update(counters)
        store = self.store
        # a scoped answer (router_core/corepage.py "counts") has the numbers, not the rows
        counts = self.snapshot.get("counts") or {
            "addresses": len(self.snapshot.get("addresses", [])),
            "links": len(self._links()), "connections": len(self._connections())}
        config.update({
            "identity": config.get("identity") or f"router/{self.router_id}",
            "version": self.version,
            "uptimeSeconds": int(self.now - self.started),
            "addrCount": counts["addresses"],
            "linkCount": counts["links"],
            "connectionCount": counts["connections"],
            "nodeCount": len(self.known_routers()[1:]),  # other routers; standalone: none
            "linkRouteCount": len(store.of_type(PREFIX + "router.config.linkRoute")),
            "autoLinkCount": len(store.of_type(PREFIX + "router.config.autoLink")),
            "memoryUsage": router_memory(),
            "memoryResident": router_memory("VmRSS"),
            "workerProcesses": self.worker_processes or None,
        })
        for counter in ("deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck",
                        "deletedOnDetach", "deliveriesTransit", "blockedLinkCount",
                        "linksBlocked", "deliveriesRedirectedToFallback"):
            config.setdefault(counter, 0)
        return [config]

    def _link_routes(self) -> list[dict]:
        """The configured link routes with the core's operStatus (``active`` while a route
        container that serves one is connected)."""
        status = self.snapshot.get("linkRoutes") or {}
        return [{**e, "operStatus": status.get(str(e.get("identity")), "inactive")}
                for e in self.store.of_type(PREFIX + "router.config.linkRoute")]

    def _exchanges(self) -> list[dict]:
        """The configured exchanges with the core's counters (1.19's core columns)."""
        rows = self.snapshot.get("exchanges") or {}
        out = []
        for e in self.store.of_type(PREFIX + "router.config.exchange"):
            row = rows.get(str(e.get("identity"))) or {}
            out.append({**e, "bindingCount": row.get("bindingCount", 0),
                        "receivedCount": row.get("receivedCount", 0),
                        "droppedCount": row.get("droppedCount", 0),
                        "forwardedCount": row.get("forwardedCount", 0),
                        "divertedCount": row.get("divertedCount", 0)})
        return out

    def _bindings(self) -> list[dict]:
        """The configured bindings with the core's matchedCount."""
        rows = self.snapshot.get("bindings") or {}
        return [{**e, "matchedCount": (rows.get(str(e.get("identity"))) or {}).get(
                    "matchedCount", 0)}
                for e in self.store.of_type(PREFIX + "router.config.binding")]

    def _conn_link_routes(self) -> list[dict]:
        """router.connection.linkRoute: the routes of the request's own connection only
        (1.19: "only visible to management access that is via the containing connection")."""
        return [{k: v for k, v in r.items() if k != "connId"}
                for r in self.snapshot.get("connLinkRoutes") or []
                if self.in_conn is not None and r.get("connId") == self.in_conn]

    def connection_row(self, conn_id: Optional[int]) -> Optional[dict]:
        """The core's row of connection ``conn_id`` (internal ones included), or None."""
        if conn_id is None:
            return None
        return next((c for c in self.snapshot.get("connections", [])
                     if str(c.get("identity")) == str(conn_id)), None)

    def _logs(self) -> list[dict]:
        """``log``: as 1.19 shows them, a module's own settings only (no nulls, no
        ``default``); DEFAULT with the defaults every module falls back to."""
        out = []
        for entity in self.store.of_type(PREFIX + "log"):
            entity = {k: v for k, v in entity.items()
                      if v is not None and not (k == "enable" and v == "default")}
            if entity.get("module") == "DEFAULT":
                entity = {**_LOG_DEFAULTS, **entity}
            out.append(entity)
        return out

    def _log_stats(self) -> list[dict]:
        """``logStats``: per log module the lines every process logged at each level, as
        gathered for this request (agent/management/loggather.py)."""
        return log_stats(self.snapshot.get("logCounts") or {})

    def _management(self) -> list[dict]:
        return [{"identity": "self", "name": "self"}]

    def _policy(self) -> list[dict]:
        """The policy entity: its configuration plus the core's router-wide counters. As in
        1.19 there is one even without a policy section (its defaults, ``policy/None``)."""
        counters = {k: v for k, v in self.snapshot.get("policy", {}).items() if k != "vhosts"}
        out = []
        configured = self.store.of_type(PREFIX + "policy") or [
            {**self.store.schema.entity_type("policy").defaults(), "identity": "policy/None",
             "name": "policy/None"}]
        for entity in configured:
            entity = dict(entity)
            entity.update({"connectionsProcessed": 0, "connectionsDenied": 0,
                           "connectionsCurrent": 0, "linksDenied": 0,
                           "maxMessageSizeDenied": 0, "totalDenials": 0})
            entity.update(counters)
            out.append(entity)
        return out

    def _vhost_stats(self) -> list[dict]:
        """``vhostStats``: one per configured vhost (as 1.19), counted by the core."""
        counted = {v["hostname"]: v for v in self.snapshot.get("policy", {}).get("vhosts", [])}
        out = []
        for vhost in self.store.of_type(PREFIX + "vhost"):
            name = str(vhost.get("hostname"))
            entity = {"hostname": name, "id": name, "connectionsApproved": 0,
                      "connectionsDenied": 0, "connectionsCurrent": 0, "perUserState": {},
                      "perHostState": {}, "sessionDenied": 0, "senderDenied": 0,
                      "receiverDenied": 0, "maxMessageSizeDenied": 0}
            entity.update(counted.get(name, {}))
            entity["identity"] = entity["name"] = f"vhostStats/{name}"
            out.append(entity)
        return out


    def _allocators(self) -> list[dict]:
        """``allocator``: one per kind of router object, named as 1.19 names its pools, with
        how many of this router's own objects of that kind exist now (``totalAllocFromHeap``)
        and their mean size in bytes as the core reports them (``typeSize``). Nothing is pooled
        here, so the pool counters are 0."""
        kinds = (("qdr_address_t", self.snapshot.get("addresses", [])),
                 ("qdr_connection_t", self.snapshot.get("connections", [])),
                 ("qdr_link_t", self.snapshot.get("links", [])),
                 ("qd_log_entry_t", None))
        out = []
        for type_name, objects in kinds:
            if objects is None:
                continue
            size = (sum(_deep_size(o) for o in objects) // len(objects)) if objects else 0
            out.append({"identity": f"allocator/{type_name}", "name": f"allocator/{type_name}",
                        "typeName": type_name, "typeSize": size, "transferBatchSize": 0,
                        "localFreeListMax": 0, "globalFreeListMax": 0,
                        "totalAllocFromHeap": len(objects), "totalFreeToHeap": 0,
                        "heldByThreads": 0, "batchesRebalancedToThreads": 0,
                        "batchesRebalancedToGlobal": 0})
        return out


def _deep_size(value: Any) -> int:
    """Bytes of a snapshot value (a map of plain values), its contents included."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(sys.getsizeof(k) + _deep_size(v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(_deep_size(v) for v in value)
    return size


def router_memory(field: str = "VmSize") -> Optional[int]:
    """``router.memoryUsage``: bytes of virtual memory (VmSize, as 1.19 reports) of the router's
    processes: the supervisor (this agent's parent) and every process it started; with
    ``field="VmRSS"`` their resident memory (``router.memoryResident``, what the console shows).
    None where /proc is not available."""
    parent = os.getppid()
    total, found = 0, False
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().rsplit(b")", 1)[1].split()
            if int(pid) != parent and int(stat[1]) != parent:
                continue
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1]) * 1024
                        found = True
                        break
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    return total if found else None


def address_columns(entity: dict) -> dict:
    """An address rule with the columns 1.19's core shows (``View._config_addresses``)."""
    ingress, egress = address_phases(entity)
    return {**entity, "ingressPhase": ingress, "egressPhase": egress,
            "waypoint": ingress == 0 and egress == 1,
            "fallback": bool(entity.get("enableFallback"))}


_ALIASED = ("router.config.linkRoute", "router.config.autoLink")
_UNSET_HIDDEN = ("router.config.exchange", "router.config.binding")

_LOG_DEFAULTS = {"enable": "info+", "includeTimestamp": True, "includeSource": False,
                 "outputFile": "stderr"}

_LINK_COUNTERS = ("deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck",
                  "zeroCreditSeconds", "settleRate", "undeliveredCount", "unsettledCount",
                  "deliveryCount", "presettledCount", "droppedPresettledCount", "acceptedCount",
                  "rejectedCount", "releasedCount", "modifiedCount")

_NODE_ATTRIBUTES = ("id", "protocolVersion", "instance", "linkState", "nextHop", "validOrigins",
                    "address", "routerLink", "cost", "index", "lastTopoChange")

_BUILDERS: dict[str, Any] = {
    "router": View._router, "router.link": View._links, "router.address": View._addresses,
    "connection": View._connections, "router.node": View._nodes, "management": View._management,
    "vhostStats": View._vhost_stats, "policy": View._policy, "allocator": View._allocators,
    "log": View._logs, "logStats": View._log_stats, "router.config.autoLink": View._auto_links,
    "router.config.linkRoute": View._link_routes,
    "router.config.address": View._config_addresses, "connector": View._connectors,
    "router.connection.linkRoute": View._conn_link_routes,
    "router.config.exchange": View._exchanges, "router.config.binding": View._bindings,
}
