"""``qdstat``: show the status of a router through its management agent.

One of ``-g`` (general, default), ``-c`` connections, ``-l`` links, ``-n`` nodes, ``-e`` edge
connections, ``-a``
addresses, ``-m`` memory, ``-p`` policy, ``--autolinks``, ``--linkroutes``, ``--vhosts``,
``--vhoststats``, ``--log``, ``--all-entities``. Output: a timestamp line, the router id, a blank
line, then a titled table whose column headers are those of the Qpid Dispatch documents (``-a``:
class addr phs distrib in-proc local remote cntnr in out thru to-proc from-proc; ``-n``:
router-id next-hop link, plus ver cost neighbors valid-origins with ``-v``).

``-r ROUTER`` sends every request to ``amqp:/_topo/0/ROUTER/$management`` (that router's agent,
reached through the network) instead of ``$management``; ``--all-routers`` shows the view for
every router GET-MGMT-NODES lists.

Each table comes from one QUERY, paged at 500 rows (tools/client.py). Must not import zmq,
router_io or router_core.
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from typing import Callable, Optional

from common.identity import VERSION
from tools.client import DOCS, ManagementClient, add_connection_options, run_tool
from tools.display import commas, format_table, kmg, time_long, time_short

T = "org.apache.qpid.dispatch."
_ADDR_CLASS = {"M": "mobile", "R": "router", "A": "area", "L": "local", "T": "topo",
               "C": "link-in", "E": "link-in", "D": "link-out", "F": "link-out", "H": "edge"}


def addr_class(key: Optional[str]) -> str:
    if not key:
        return ""
    return _ADDR_CLASS.get(key[0], f"unknown: {key[0]}")


def addr_text(key: Optional[str]) -> str:
    if not key:
        return ""
    return key[2:] if key[0] == "M" else key[1:]


def addr_phase(key: Optional[str]) -> str:
    return key[1] if key and key[0] == "M" else ""


class Qdstat:
    def __init__(self, client: ManagementClient, opts: argparse.Namespace) -> None:
        self.client = client
        self.opts = opts
        self.out: list[str] = []

    def print(self, text: str = "") -> None:
        self.out.append(text)

    def table(self, title: str, heads: list, rows: list) -> None:
        self.print(format_table(title, heads, rows, csv=self.opts.csv))

    def query(self, entity_type: str, names: Optional[list] = None) -> list[dict]:
        return self.client.query(T + entity_type, names, count=self.opts.limit)

    def header(self) -> None:
        router = self.client.query(T + "router", ["id"])
        self.print(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC")
        self.print(router[0]["id"] if router else "")
        self.print()

    # --- views --------------------------------------------------------------------------------
    def general(self) -> None:
        r = self.client.query(T + "router")[0]
        rows = [("Version", r.get("version")), ("Mode", r.get("mode")),
                ("Router Id", r.get("id")), ("Worker Threads", r.get("workerThreads")),
                ("Uptime", time_long(r.get("uptimeSeconds")))]
        if r.get("memoryUsage"):
            rows.append(("VmSize", kmg(r["memoryUsage"], 1024)))
        rows += [("Area", r.get("area")), ("Link Routes", r.get("linkRouteCount")),
                 ("Auto Links", r.get("autoLinkCount")), ("Links", r.get("linkCount")),
                 ("Nodes", r.get("nodeCount")), ("Addresses", r.get("addrCount")),
                 ("Connections", r.get("connectionCount")),
                 ("Presettled Count", r.get("presettledDeliveries")),
                 ("Dropped Presettled Count", r.get("droppedPresettledDeliveries")),
                 ("Accepted Count", r.get("acceptedDeliveries")),
                 ("Rejected Count", r.get("rejectedDeliveries")),
                 ("Released Count", r.get("releasedDeliveries")),
                 ("Modified Count", r.get("modifiedDeliveries")),
                 ("Deliveries Delayed > 1sec", r.get("deliveriesDelayed1Sec")),
                 ("Deliveries Delayed > 10sec", r.get("deliveriesDelayed10Sec")),
                 ("Deliveries Stuck > 10sec", r.get("deliveriesStuck")),
                 ("Deliveries to Fallback", r.get("deliveriesRedirectedToFallback"))]
        # 1.19's agent names it linksBlocked; a schema-named QUERY answers blockedLinkCount
        blocked = r.get("linksBlocked", r.get("blockedLinkCount"))
        if blocked is not None:
            rows.append(("Links Blocked", blocked))
        rows += [("Ingress Count", r.get("deliveriesIngress")),
                 ("Egress Count", r.get("deliveriesEgress")),
                 ("Transit Count", r.get("deliveriesTransit")),
                 ("Deliveries from Route Container", r.get("deliveriesIngressRouteContainer")),
                 ("Deliveries to Route Container", r.get("deliveriesEgressRouteContainer"))]
        self.table("Router Statistics", ["attr", "value"], rows)

    def connections(self) -> None:
        rows = []
        found = self.query("connection")
        # the last two columns when the router has them (as 1.19's qdstat decides)
        has_last = bool(found) and "lastDlvSeconds" in found[0]
        has_uptime = bool(found) and "uptimeSeconds" in found[0]
        for c in found:
            security, auth = _security(c), _authentication(c)
            tenant = c.get("tenant") or ""
            row = [c.get("identity"), c.get("host"), c.get("container"), c.get("role"),
                   c.get("protocol", "amqp"), c.get("dir"), security, auth,
                   tenant[:-1] if tenant.endswith("/") else tenant]
            if has_last:
                row.append(time_long(c.get("lastDlvSeconds")))
            if has_uptime:
                row.append(time_long(c.get("uptimeSeconds")))
            rows.append(row)
        heads = ["id", "host", "container", "role", "proto", "dir", "security", "authentication",
                 "tenant"] + ["last dlv"] * has_last + ["uptime"] * has_uptime
        self.table("Connections", heads, rows)

    def edges(self) -> None:
        """``-e``: the edge routers' connections (1.19: nothing after the header when there are
        connections but none from an edge router; "No Edge Router Connections" when there are
        no connections at all)."""
        found = self.query("connection")
        if not found:
            self.print("No Edge Router Connections")
            return
        has_active = "active" in found[0]
        rows = []
        for c in found:
            if c.get("role") != "edge":
                continue
            tenant = c.get("tenant") or ""
            row = [c.get("identity"), c.get("host"), c.get("container"), c.get("role"),
                   c.get("dir"), _security(c), _authentication(c),
                   tenant[:-1] if tenant.endswith("/") else tenant]
            if has_active:
                row.append("yes" if c.get("active") else "no")
            rows.append(row)
        if rows:
            self.table("Connections", ["id", "host", "container", "role", "dir", "security",
                                       "authentication", "tenant"] + ["active"] * has_active,
                       rows)

    def links(self) -> None:
        heads = ["type", "dir", "conn id", "id", "peer", "class", "addr", "phs", "cap", "pri",
                 "undel", "unsett", "deliv", "presett", "psdrop", "acc", "rej", "rel", "mod",
                 "delay", "rate", "stuck", "cred", "blkd"]
        if self.opts.verbose:
            heads += ["admin", "oper", "name"]
        rows = []
        for k in self.query("router.link"):
            owning = k.get("owningAddr")
            row = [k.get("linkType"), k.get("linkDir"), k.get("connectionId"), k.get("identity"),
                   k.get("peer"), addr_class(owning), addr_text(owning), addr_phase(owning),
                   k.get("capacity"), k.get("priority"), k.get("undeliveredCount"),
                   k.get("unsettledCount"), k.get("deliveryCount"), k.get("presettledCount"),
                   k.get("droppedPresettledCount"), k.get("acceptedCount"),
                   k.get("rejectedCount"), k.get("releasedCount"), k.get("modifiedCount"),
                   (k.get("deliveriesDelayed1Sec") or 0) + (k.get("deliveriesDelayed10Sec") or 0),
                   k.get("settleRate"), k.get("deliveriesStuck"), k.get("creditAvailable"),
                   time_short(k["zeroCreditSeconds"]) if (k.get("zeroCreditSeconds") or 0) > 0
                   else "-"]
            if self.opts.verbose:
                row += [k.get("adminStatus"), k.get("operStatus"), k.get("linkName")]
            rows.append(row)
        self.table("Router Links", heads, rows)

    def nodes(self) -> None:
        """``-n``: the routers this router knows, as 1.x qdstat prints them (sorted by id;
        ``-v`` adds ver, cost, neighbors, valid-origins). A router that knows none (standalone:
        no ``router.node`` entities) prints 1.x's "Router is Standalone - No Router List"."""
        heads = ["router-id", "next-hop", "link"]
        if self.opts.verbose:
            heads += ["ver", "cost", "neighbors", "valid-origins"]
        rows = []
        last_change = 0.0
        for n in self.query("router.node"):
            try:
                last_change = max(last_change, float(n.get("lastTopoChange") or 0))
            except (TypeError, ValueError):
                pass
            if n.get("nextHop") is not None:      # (self), or a router reached through another
                hop, link = n["nextHop"], "-"
            else:                                 # a neighbour: the link it is reached over
                hop, link = "-", _dash(n.get("routerLink"))
            row = [n.get("id"), hop, link]
            if self.opts.verbose:
                row += [_dash(n.get("protocolVersion")), n.get("cost") or "",  # 1.x: none, 0: ""
                        repr([str(r) for r in n.get("linkState") or []]),
                        repr([str(r) for r in n.get("validOrigins") or []])]
            rows.append(row)
        if not rows:
            self.print("Router is Standalone - No Router List")
            return
        title = "Routers in the Network"
        if last_change > 1.0:
            title += ("\nLast Topology Change: "
                      + time.strftime("%A %b %d %H:%M:%S %Y", time.gmtime(last_change)) + " GMT")
        rows.sort(key=lambda r: str(r[0]))
        self.table(title, heads, rows)

    def addresses(self) -> None:
        """``-a``: 1.19's columns (``-v`` adds in-proc, to-proc and from-proc)."""
        verbose = self.opts.verbose
        heads = ["class", "addr", "phs", "distrib", "pri"] + ["in-proc"] * verbose + [
            "local", "remote", "in", "out", "thru", "fallback"] + [
            "to-proc", "from-proc"] * verbose
        rows = []
        for a in self.query("router.address"):
            key = a.get("name") or a.get("key") or ""
            priority = a.get("priority")
            local = a.get("containerCount") if key[:1] in ("C", "D", "E", "F") else \
                a.get("subscriberCount")
            row = [addr_class(key), addr_text(key), addr_phase(key), a.get("distribution"),
                   priority if priority is not None and priority >= 0 else "-"]
            if verbose:
                row.append(commas(a.get("inProcess")))
            row += [commas(v) for v in (local, a.get("remoteCount") or 0,
                                        a.get("deliveriesIngress"), a.get("deliveriesEgress"),
                                        a.get("deliveriesTransit"),
                                        a.get("deliveriesRedirectedToFallback"))]
            if verbose:
                row += [commas(a.get("deliveriesToContainer")),
                        commas(a.get("deliveriesFromContainer"))]
            rows.append(row)
        rows.sort(key=lambda r: r[1])
        self.table("Router Addresses", heads, rows)

    def autolinks(self) -> None:
        rows = [[a.get("address"), a.get("direction"), a.get("phase"), a.get("externalAddress"),
                 a.get("linkRef"), a.get("operStatus") or "inactive", a.get("lastError")]
                for a in self.query("router.config.autoLink")]
        if not rows:
            self.print("AutoLinks\nNo AutoLinks found")
            return
        rows.sort(key=lambda r: str(r[0]))
        self.table("AutoLinks", ["addr", "dir", "phs", "extAddr", "link", "status", "lastErr"],
                   rows)

    def linkroutes(self) -> None:
        rows = []
        prefixes = False  # 1.19 adds the external-prefix columns when a route has one
        for r in self.query("router.config.linkRoute"):
            row = [r.get("prefix") or r.get("pattern"), r.get("direction"),
                   r.get("distribution"), r.get("operStatus") or "inactive"]
            if r.get("addExternalPrefix") or r.get("delExternalPrefix"):
                row += [r.get("addExternalPrefix"), r.get("delExternalPrefix")]
                prefixes = True
            rows.append(row)
        if not rows:
            self.print("Link Routes\nNo Link Routes found")
            return
        rows.sort(key=lambda r: str(r[0]))
        heads = ["address", "dir", "distrib", "status"]
        if prefixes:
            heads += ["add-ext-prefix", "del-ext-prefix"]
            rows = [row + [""] * (len(heads) - len(row)) for row in rows]
        self.table("Link Routes", heads, rows)

    def memory(self) -> None:
        """``-m``: the allocator pools, then the router's VmSize and the pooled total."""
        pools = self.query("allocator")
        if not pools or any(p.get("totalAllocFromHeap") is None for p in pools):
            self.print("No memory statistics available")
            return
        rows, pooled = [], 0
        for p in pools:
            identity = str(p.get("identity") or "-")
            rows.append([identity.split("/", 1)[-1], commas(p.get("typeSize")),
                         p.get("transferBatchSize"), commas(p.get("localFreeListMax")),
                         commas(p.get("totalAllocFromHeap")), commas(p.get("heldByThreads")),
                         commas(p.get("batchesRebalancedToThreads")),
                         commas(p.get("batchesRebalancedToGlobal"))])
            pooled += (p.get("typeSize") or 0) * (p.get("totalAllocFromHeap") or 0)
        rows.sort(key=lambda r: r[0])
        self.table("Memory Pools", ["type", "size", "batch", "thread-max", "total",
                                    "in-threads", "rebal-in", "rebal-out"], rows)
        router = self.client.query(T + "router", ["memoryUsage"])
        memory = router[0].get("memoryUsage") if router else None
        self.print()
        self.table("Memory Summary", ["VmSize", "Pooled"],
                   [[kmg(memory, 1024) if memory is not None else "-", kmg(pooled, 1024)]])

    def policy(self) -> None:
        found = self.query("policy")
        p = found[0] if found else {}
        self.table("Policy Configuration", ["attr", "value"], [
            ("Maximum Concurrent Connections", p.get("maxConnections", 65535)),
            ("Maximum Message Size", p.get("maxMessageSize", 0)),
            ("Enable Vhost Policy", p.get("enableVhostPolicy", False)),
            ("Enable Vhost Name Patterns", p.get("enableVhostNamePatterns", False)),
            ("Policy Directory", p.get("policyDir") or "(nil)"),
            ("Default Vhost", p.get("defaultVhost") or "(nil)")])
        self.print()
        self.table("Policy Status", ["attr", "value"], [
            ("Connections Processed", p.get("connectionsProcessed", 0)),
            ("Connections Denied", p.get("connectionsDenied", 0)),
            ("Connections Current", p.get("connectionsCurrent", 0)),
            ("Links Denied", p.get("linksDenied", 0)),
            *([("Maximum Message Size Denied", p["maxMessageSizeDenied"])]
              if "maxMessageSizeDenied" in p else []),
            ("Total Denials", p.get("totalDenials", 0))])

    def vhosts(self) -> None:
        rows = [[v.get("hostname"), v.get("maxConnections"), str(v.get("maxMessageSize")),
                 v.get("maxConnectionsPerUser"), v.get("maxConnectionsPerHost"),
                 str(v.get("allowUnknownUser")), len(v.get("groups") or {})]
                for v in self.query("vhost")]
        if not rows:
            self.print("No Vhosts")
            return
        self.table("Vhosts", ["hostname", "maxConnections", "maxMessageSize",
                              "maxConnectionsPerUser", "maxConnectionsPerHost",
                              "allowUnknownUser", "groups"], rows)

    # vhostUserGroupSettings defaults, as 1.19's qdstat shows a setting a group leaves out
    _GROUP_INTS = ("maxConnectionsPerUser", "maxConnectionsPerHost", "maxMessageSize",
                   "maxFrameSize", "maxSessionWindow", "maxSessions", "maxSenders",
                   "maxReceivers")
    _GROUP_BOOLS = ("allowDynamicSource", "allowAnonymousSender", "allowUserIdProxy",
                    "allowWaypointLinks", "allowDynamicLinkRoutes", "allowAdminStatusUpdate",
                    "allowFallbackLinks")
    _GROUP_DEFAULTS = {"maxSenders": 2147483647, "maxReceivers": 2147483647,
                       "allowDynamicSource": False, "allowAnonymousSender": False,
                       "allowUserIdProxy": False, "allowWaypointLinks": True,
                       "allowDynamicLinkRoutes": True, "allowAdminStatusUpdate": True,
                       "allowFallbackLinks": True}

    def vhostgroups(self) -> None:
        vhosts = self.query("vhost")
        if not vhosts:
            self.print("No Vhosts")
            return
        rows = []
        for v in vhosts:
            for gname, group in (v.get("groups") or {}).items():
                row = [v.get("hostname"), gname]
                for key in self._GROUP_INTS + self._GROUP_BOOLS:
                    value = group.get(key, self._GROUP_DEFAULTS.get(key))
                    row.append("(nil)" if value is None else str(value))
                rows.append(row)
        self.table("Vhost Groups", ["vhost", "group", *self._GROUP_INTS, *self._GROUP_BOOLS],
                   rows)
        for v in vhosts:
            for gname, group in (v.get("groups") or {}).items():
                self.print()
                self.table(f"Vhost '{v.get('hostname')}' UserGroup '{gname}'", ["attr", "value"], [
                    ("vhost", v.get("hostname")), ("group", gname),
                    *[(key, group.get(key) if group.get(key) is not None else "(nil)")
                      for key in ("users", "remoteHosts", "sources", "targets", "sourcePattern",
                                  "targetPattern")]])

    def vhoststats(self) -> None:
        stats = self.query("vhostStats")
        rows = [[v.get("hostname"), v.get("connectionsApproved"), v.get("connectionsDenied"),
                 v.get("connectionsCurrent"), v.get("sessionDenied"), v.get("senderDenied"),
                 v.get("receiverDenied"), v.get("maxMessageSizeDenied")] for v in stats]
        if not rows:
            self.print("No Vhost Stats")
            return
        self.table("Vhost Stats", ["hostname", "connectionsApproved", "connectionsDenied",
                                   "connectionsCurrent", "sessionDenied", "senderDenied",
                                   "receiverDenied", "maxMessageSizeDenied"], rows)
        self.print()
        self.table("Vhost User Stats", ["vhost", "user", "remote hosts"],
                   [[v.get("hostname"), user, str(hosts)] for v in stats
                    for user, hosts in (v.get("perUserState") or {}).items()])

    def log(self) -> None:
        for entry in self.client.call("GET-LOG", None, limit=self.opts.limit or None):
            module, level, text = entry[0], entry[1], entry[2]
            stamp = time.ctime(entry[5]) if len(entry) > 5 and entry[5] else ""
            self.print(f"{stamp} {module} ({level}) {text}")

    def all_entities(self) -> None:
        for view in (self.links, self.addresses, self.connections, self.autolinks,
                     self.linkroutes, self.general, self.memory, self.policy, self.vhosts,
                     self.vhoststats):
            view()
            self.print()

    # --- driver -------------------------------------------------------------------------------
    def show(self, view: Callable[[], None], with_header: bool = True) -> None:
        if with_header and view not in (self.log, self.vhosts, self.vhostgroups,
                                        self.vhoststats):
            self.header()
        view()

    def run(self, view: Callable[[], None]) -> None:
        """One view of the router ``-b``/``-r`` name, or with ``--all-routers`` of every router
        GET-MGMT-NODES lists, each under a ``Router  <id>`` line (1.x's spacing). Fewer than two
        routers (a standalone router lists none) is shown like a plain request, as 1.x does."""
        if self.opts.all_routers:
            nodes = self.client.call("GET-MGMT-NODES") or []
            if len(nodes) >= 2:
                self.print(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC")
                for node in nodes:
                    router_id = node_router_id(node)
                    self.client.set_router(router_id)
                    self.print(f"Router  {router_id}")
                    self.print()
                    view()
                    self.print()
                return
        self.show(view)


def node_router_id(address: str) -> str:
    """``amqp:/_topo/0/R2/$management`` -> ``R2`` (an address of another shape as is)."""
    parts = address.split("/")
    return parts[3] if len(parts) >= 5 and parts[1] == "_topo" else address


def _security(c: dict) -> str:
    """A connection's security as 1.19 summarises it."""
    if not c.get("isEncrypted"):
        return "no-security"
    if c.get("sasl") == "GSSAPI":
        return "Kerberos"
    return f"{c.get('sslProto')}({c.get('sslCipher')})"


def _authentication(c: dict) -> str:
    """A connection's authentication as 1.19 summarises it (EXTERNAL is x.509, GSSAPI
    Kerberos)."""
    if not c.get("isAuthenticated"):
        return "no-auth"
    if c.get("sasl") == "ANONYMOUS":
        return "anonymous-user"
    sasl = {"EXTERNAL": "x.509", "GSSAPI": "Kerberos"}.get(c.get("sasl"), c.get("sasl"))
    return f"{c.get('user')}({sasl})" if c.get("user") else str(sasl)


def _dash(value: object) -> object:
    return "-" if value is None else value


VIEWS = (("-g", "--general", "general", "show general router statistics"),
         ("-c", "--connections", "connections", "show connections"),
         ("-l", "--links", "links", "show router links"),
         ("-n", "--nodes", "nodes", "show router nodes"),
         ("-e", "--edge", "edges", "show edge connections"),
         ("-a", "--address", "addresses", "show router addresses"),
         ("-m", "--memory", "memory", "show memory statistics"),
         ("-p", "--policy", "policy", "show policy statistics"),
         (None, "--autolinks", "autolinks", "show auto links"),
         (None, "--linkroutes", "linkroutes", "show link routes"),
         (None, "--vhosts", "vhosts", "show vhosts"),
         (None, "--vhostgroups", "vhostgroups", "show vhost user groups"),
         (None, "--vhoststats", "vhoststats", "show vhost statistics"),
         (None, "--log", "log", "show recent log entries"),
         (None, "--all-entities", "all_entities", "show all entities"))


def parse_args(argv: Optional[list]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="qdstat", description="Show the status of a router.",
                                     epilog=DOCS)
    views = parser.add_argument_group("Display Options").add_mutually_exclusive_group()
    for short, long, dest, text in VIEWS:
        flags = [f for f in (short, long) if f]
        views.add_argument(*flags, dest="show", action="store_const", const=dest, help=text)
    parser.set_defaults(show="general")
    parser.add_argument("--all-routers", action="store_true",
                        help="show statistics for all routers")
    parser.add_argument("--limit", type=int, default=None, help="limit the number of rows")
    parser.add_argument("--csv", action="store_true", help="comma separated values output")
    parser.add_argument("-v", "--verbose", action="store_true", help="show more columns")
    parser.add_argument("--version", action="version", version=VERSION)
    add_connection_options(parser)
    return parser.parse_args(argv)


def main(argv: Optional[list] = None) -> int:
    opts = parse_args(argv)

    def work(client: ManagementClient) -> None:
        stat = Qdstat(client, opts)
        stat.run(getattr(stat, opts.show))
        print("\n".join(stat.out))

    return run_tool(opts, work)


if __name__ == "__main__":
    sys.exit(main())
