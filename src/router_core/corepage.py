"""Management answers whose cost is proportional to what they return.

A full snapshot (corestate.management_snapshot) renders every connection, link and address; a
management READ or QUERY of one kind needs a page of one kind. :class:`Pager` answers the
agent's scoped CoreQuery forms (``what``):

``page <kind> <offset> <count>``: the rows ``offset .. offset+count`` (count ``-`` = to the end)
    of one kind (``connection``, ``router.link``, ``router.address``), in the order a full
    snapshot lists them, skipping what management hides (the router's internal connections and
    their links), exactly as the agent pages a full snapshot.
``one <kind> <key>``: the entity of that kind with that identity (connection and link: their
    numeric id; address: its key), or none.
``counts``: the router's own entity (``router``) only, with the numbers of visible entities.

Every answer has the snapshot's shape (``router``, ``connections``, ``links``, ``addresses``)
plus ``scope`` (what it holds) and always carries the internal connections (the agent's own:
its View hides them and their links as it does in a full snapshot), and for addresses their
links too (an address's in-process consumers are counted from them).

The order is the core's dictionaries' (insertion order). A page at offset 0 walks from the
start; a later page walks a list of the visible keys taken at the listing's second page (one
pass over the keys, then each page only looks up its own), dropped when a new listing starts
(a page at offset 0) or when the kind's dictionary has a different size than when it was taken
(then the page is the one a snapshot taken at that moment gives, as the old whole-snapshot paging
and 1.19's walk from the head of its list did). An entity removed while the size stayed the same
is skipped and the page filled from the next ones. So a READ touches
one record, a one-row QUERY one (plus the internal ones), and a listing of N rows in pages of P
touches about 2N records, not N²/P.

``TOUCHED["records"]`` counts the records (connections, links, addresses) this module rendered
or visited; tests read it to assert that work is proportional to the answer.

Plain Python in both builds, like corestate. Must not import zmq, router_io or agent.
"""
from __future__ import annotations

from typing import Any, Optional

from router_core.corestate import (
    _active, _address_view, _connection_view, _link_view, control_address_views,
    route_address_views)
from router_core.records import MODE_NAMES, ROLE_INTERNAL

KINDS = ("connection", "router.link", "router.address")
TOUCHED = {"records": 0}


def parse(what: str) -> Optional[tuple]:
    """``("page", kind, offset, count|None)``, ``("one", kind, key)``, ``("counts",)`` or None
    for a ``what`` that is not a scoped query (or is malformed)."""
    parts = what.split(" ", 2)
    if parts[0] == "counts" and len(parts) == 1:
        return ("counts",)
    if len(parts) != 3 or parts[1] not in KINDS:
        return None
    if parts[0] == "one":
        return ("one", parts[1], parts[2])
    if parts[0] == "page":
        offset, _, count = parts[2].partition(" ")
        try:
            return ("page", parts[1], max(0, int(offset)),
                    None if count in ("", "-") else max(0, int(count)))
        except ValueError:
            return None
    return None


def _tracked(core: Any) -> dict:
    """corestate.tracked_deliveries over the links that can carry them: router links, which
    exist only on inter-router connections (core.neighbour_conns)."""
    counts: dict = {}
    for conn in core.neighbour_conns.values():
        for link in conn.links.values():
            if link.router and link.direction == 1 and link.unsettled:
                for out in link.unsettled.values():
                    dlv = out.in_dlv
                    if (dlv is not None and not dlv.settled and dlv.addr is not None
                            and dlv.addr.dist == 1):  # DIST_BALANCED
                        counts[dlv.addr.key] = counts.get(dlv.addr.key, 0) + 1
    return counts


class Pager:
    """The scoped answers of one core; holds the key lists of listings in progress."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self._keys: dict = {}  # kind -> (dict size when taken, [visible keys])

    # --- the sequences of each kind -----------------------------------------------------------
    def _sources(self, kind: str) -> list:
        """The kind's dictionaries in snapshot order, each (dict, visible(record))."""
        core = self.core
        if kind == "connection":
            return [(core.conns, lambda c: c.role != ROLE_INTERNAL)]
        if kind == "router.link":
            return [(core.links, lambda link: link.conn.role != ROLE_INTERNAL)]
        return [(core.addrs, None), (core.lr.addrs, None)]

    def _render(self, kind: str, records: list, tracked: Optional[dict]) -> list:
        core = self.core
        TOUCHED["records"] += len(records)
        if kind == "connection":
            return [_active(core, c, _connection_view(c, core.now)) for c in records]
        if kind == "router.link":
            return [_link_view(link, core.now) for link in records]
        rows = []
        route_addrs = core.lr.addrs
        for addr in records:
            if route_addrs.get(addr.key) is addr:
                rows.extend(route_address_views(_One(addr)))
            else:
                rows.append(_address_view(addr, tracked.get(addr.key, 0) if tracked else 0))
        return rows

    def controls(self) -> list:
        core = self.core
        return control_address_views(core) if MODE_NAMES[core.mode] == "interior" else []

    def page(self, kind: str, offset: int, count: Optional[int]) -> list:
        """The rendered rows offset .. offset+count of ``kind``."""
        want = count
        records: list = []
        sources = self._sources(kind)
        total = sum(len(d) for d, _ in sources)
        if offset == 0:
            self._keys.pop(kind, None)  # a new listing
            for table, visible in sources:
                for rec in table.values():
                    if want is not None and len(records) >= want:
                        break
                    TOUCHED["records"] += 1
                    if visible is None or visible(rec):
                        records.append(rec)
        else:
            taken = self._keys.get(kind)
            if taken is None or taken[0] != total:
                keys = []
                for index, (table, visible) in enumerate(sources):
                    TOUCHED["records"] += len(table)
                    if visible is None:
                        keys.extend((index, k) for k in table)
                    else:
                        keys.extend((index, k) for k, rec in table.items() if visible(rec))
                taken = self._keys[kind] = (total, keys)
            keys = taken[1]
            pos = offset
            while pos < len(keys) and (want is None or len(records) < want):
                index, key = keys[pos]
                pos += 1
                rec = sources[index][0].get(key)
                if rec is not None:
                    records.append(rec)
        tracked = _tracked(self.core) if kind == "router.address" else None
        rows = self._render(kind, records, tracked)
        if kind == "router.address":  # the routing protocol's own (interior), after the others
            controls = self.controls()
            first = max(0, offset - total)
            if want is None:
                rows.extend(controls[first:])
            elif want > len(rows):
                rows.extend(controls[first:first + want - len(rows)])
        return rows

    def one(self, kind: str, key: str) -> list:
        """The rendered row of the ``kind`` entity with ``key`` (none: [])."""
        core = self.core
        if kind == "router.address":
            for table in (core.addrs, core.lr.addrs):
                rec = table.get(key)
                if rec is not None:
                    return self._render(kind, [rec], _tracked(core))
            return [row for row in self.controls() if row["key"] == key]
        try:
            ident = int(key)
        except ValueError:
            return []
        table = core.conns if kind == "connection" else core.links
        rec = table.get(ident)
        return self._render(kind, [rec], None) if rec is not None else []

    # --- answers ------------------------------------------------------------------------------
    def internal(self, links: bool = True) -> tuple[list, list]:
        """The internal connections' rows and, with ``links``, their links' rows (the agent
        hides them; it counts an address's in-process consumers from the links)."""
        conns = list(self.core.internal_conns.values())
        rows = [link for c in conns for link in c.links.values()] if links else []
        return (self._render("connection", conns, None), self._render("router.link", rows, None))

    def answer(self, query: tuple, router: dict) -> dict:
        """The scoped state for a parsed ``query`` (see :func:`parse`); ``router``: the
        snapshot's router section."""
        # (the agent reads the internal links only for addresses: their in-process consumers)
        conns, links = (self.internal(query[1] == "router.address") if query[0] != "counts"
                        else ([], []))
        state = {"router": router, "connections": conns, "links": links, "addresses": [],
                 "scope": list(query)}
        if query[0] == "counts":
            core = self.core
            internal = core.internal_conns.values()
            state["counts"] = {
                "addresses": len(core.addrs) + len(core.lr.addrs) + len(self.controls()),
                "connections": len(core.conns) - len(core.internal_conns),
                "links": len(core.links) - sum(len(c.links) for c in internal)}
            return state
        kind = query[1]
        rows = self.page(kind, query[2], query[3]) if query[0] == "page" else \
            self.one(kind, query[2])
        if kind == "connection":
            state["connections"] = conns + rows
        elif kind == "router.link":
            state["links"] = links + rows
        else:
            state["addresses"] = rows
        return state


class _One:
    """A link-route table of one address, for corestate.route_address_views."""

    def __init__(self, addr: Any) -> None:
        self.addrs = {addr.key: addr}
