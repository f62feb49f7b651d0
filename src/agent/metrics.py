"""Throughput metrics from core snapshots: interval records and Prometheus text. Pure, no I/O.

Owns the "router-metrics/1" record shape (read by the Spark jobs in ``pipelines/``) and the
Prometheus exposition (text format 0.0.4, written by ``prometheus_client`` from a custom
collector). Input is a core snapshot as returned by
``router_core.corestate.management_snapshot``: ``{"router": {...}, "links": [...],
"addresses": [...], "connections": [...], "gone": [...], "now": t}`` with Qpid Dispatch
management attribute names; ``gone`` holds the final views of removed addresses, links and
connections (``seq``, ``kind``, ``goneAt`` on the core's clock ``now``).
Writing records to disk is ``agent.metrics_sink``'s job; serving the text is the caller's.

Must not import zmq, proton, sockets, clocks or files: time and uptime are arguments.

Record keys: the "router-metrics/1" schema, documented and defined in common/metrics_schema.py
(its names are re-exported here).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from common.metrics_schema import (  # the record schema, re-exported (noqa: F401)
    SCHEMA, DELTA_PREFIX, ROUTER_COUNTERS, ROUTER_GAUGES, ROUTER_BYTES, ADDRESS_COUNTERS,
    ADDRESS_GAUGES, ADDRESS_ATTRS, ADDRESS_BYTES, LINK_COUNTERS, LINK_GAUGES, LINK_ATTRS,
    LINK_BYTES, COMMON_KEYS, FINAL_KEYS, CONNECTION_ATTRS, KINDS, INTERNAL_KEY)
from common.addrclass import mobile_text


def address_text(key: Optional[str]) -> Optional[str]:
    """``M0orders`` -> ``orders``; keys of other classes (and None) are returned as they are."""
    if key is None:
        return None
    text = mobile_text(key)
    return key if text is None else text


def _delta(value: Any, before: Any) -> Optional[int]:
    if value is None:
        return None
    if before is None or value < before:  # new entity, or a counter reset
        return value
    return value - before


def _record(kind: str, key: str, entity: dict, previous: Optional[dict], had_previous: bool,
            common: dict) -> dict:
    counters, gauges, attrs, byte_counters = KINDS[kind]
    rec = dict(common)
    rec["kind"] = kind
    rec["key"] = key
    if kind == "address":
        rec["address"] = address_text(key)
    elif kind == "link":
        rec["address"] = address_text(entity.get("owningAddr"))
    else:
        rec["address"] = None
    rec["final"] = False
    present_bytes = tuple(name for name in byte_counters if name in entity)
    for name in counters + present_bytes + gauges + attrs:
        rec[name] = entity.get(name)
    before = previous or {}
    for name in counters + present_bytes:
        rec[DELTA_PREFIX + name] = (_delta(entity.get(name), before.get(name))
                                    if had_previous else None)
    return rec


def snapshot_records(snapshot: dict, router_id: str, ts: float, interval_s: float,
                     previous: Optional[dict]) -> list[dict]:
    """One "router-metrics/1" record for the router, then one per address and per link, then
    a final record per address, link or connection removed since ``previous`` (by seq).

    ``previous`` is the snapshot taken ``interval_s`` earlier (``{}``: the counters were all
    zero then; None: unknown, the first sample of a restarted agent); the d_ deltas are taken
    against it. Records are JSON-able dicts (see the module docstring).
    """
    common = {"schema": SCHEMA, "ts": float(ts), "router_id": router_id,
              "interval_s": float(interval_s)}
    had_previous = previous is not None
    prev = previous or {}
    prev_addrs = {a.get("key", a.get("identity")): a for a in prev.get("addresses", ())}
    prev_links = {str(link.get("identity")): link for link in prev.get("links", ())}
    records = [_record("router", router_id, snapshot.get("router", {}), prev.get("router"),
                       had_previous, common)]
    gone = new_gone(snapshot, previous)
    replaced = {(g.get("kind"), _gone_key(g)) for g in gone}  # keys with a new incarnation
    for addr in sorted(snapshot.get("addresses", ()),
                       key=lambda a: a.get("key", a.get("identity"))):
        key = addr.get("key", addr.get("identity"))
        base = None if ("address", key) in replaced else prev_addrs.get(key)
        records.append(_record("address", key, addr, base, had_previous, common))
    for link in sorted(snapshot.get("links", ()), key=lambda lk: _sort_key(lk.get("identity"))):
        key = str(link.get("identity"))
        base = None if ("link", key) in replaced else prev_links.get(key)
        records.append(_record("link", key, link, base, had_previous, common))
    records.extend(final_records(gone, snapshot, ts, {"address": prev_addrs, "link": prev_links},
                                 had_previous, common))
    return records


def _gone_key(entity: dict) -> str:
    if entity.get("kind") == "address":
        return entity.get("key", entity.get("identity"))
    return str(entity.get("identity"))


def _max_seq(snapshot: Optional[dict]) -> int:
    return max((g.get("seq", 0) for g in (snapshot or {}).get("gone", ())), default=0)


def new_gone(snapshot: dict, previous: Optional[dict]) -> list[dict]:
    """The snapshot's gone entries not in ``previous`` (all of them without one), by seq.

    A ring whose newest seq is below the previous one's belongs to a new core process (its
    numbering restarted): all of its entries are new."""
    gone = sorted(snapshot.get("gone", ()), key=lambda g: g.get("seq", 0))
    if previous is None:
        return gone
    last = _max_seq(previous)
    if gone and gone[-1].get("seq", 0) < last:
        last = 0
    return [g for g in gone if g.get("seq", 0) > last]


def final_records(gone: list[dict], snapshot: dict, ts: float, previous_by_kind: dict,
                  had_previous: bool, common: dict) -> list[dict]:
    """A final record (``final: true``) per gone entry, in seq order (see the module docstring
    for their d_ deltas: the first of a key is based on the previous snapshot, the rest on 0)."""
    now = snapshot.get("now")
    used: set = set()
    out = []
    for entity in gone:
        kind = entity.get("kind")
        if kind not in KINDS or kind == "router":
            continue
        key = _gone_key(entity)
        base = None
        if (kind, key) not in used:
            used.add((kind, key))
            base = previous_by_kind.get(kind, {}).get(key)
        rec = _record(kind, key, entity, base, had_previous, common)
        rec["final"] = True
        rec["seq"] = entity.get("seq")
        gone_at = entity.get("goneAt")
        rec["gone_mono"] = gone_at
        rec["gone_ts"] = (float(ts) - max(0.0, now - gone_at)
                          if now is not None and gone_at is not None else None)
        out.append(rec)
    return out


def _sort_key(identity: Any) -> tuple:
    text = str(identity)
    return (0, int(text), text) if text.isdigit() else (1, 0, text)


# ------------------------------------------------------------------------------------------
# Prometheus text exposition format 0.0.4
# ------------------------------------------------------------------------------------------
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

OUTCOMES = (("accepted", "acceptedDeliveries", "acceptedCount"),
            ("rejected", "rejectedDeliveries", "rejectedCount"),
            ("released", "releasedDeliveries", "releasedCount"),
            ("modified", "modifiedDeliveries", "modifiedCount"))

# The families Qpid Dispatch 1.19 exports, under its names and types and without labels (a 1.x
# dashboard reads them unchanged): (metric name, type, router entity attribute).
ONE_X_ROUTER_METRICS = (
    ("qdr_connections_total", "gauge", "connectionCount"),
    ("qdr_links_total", "gauge", "linkCount"),
    ("qdr_addresses_total", "gauge", "addrCount"),
    ("qdr_routers_total", "gauge", "nodeCount"),
    ("qdr_link_routes_total", "gauge", "linkRouteCount"),
    ("qdr_auto_links_total", "gauge", "autoLinkCount"),
    ("qdr_presettled_deliveries_total", "counter", "presettledDeliveries"),
    ("qdr_dropped_presettled_deliveries_total", "counter", "droppedPresettledDeliveries"),
    ("qdr_accepted_deliveries_total", "counter", "acceptedDeliveries"),
    ("qdr_released_deliveries_total", "counter", "releasedDeliveries"),
    ("qdr_rejected_deliveries_total", "counter", "rejectedDeliveries"),
    ("qdr_modified_deliveries_total", "counter", "modifiedDeliveries"),
    ("qdr_deliveries_ingress_total", "counter", "deliveriesIngress"),
    ("qdr_deliveries_egress_total", "counter", "deliveriesEgress"),
    ("qdr_deliveries_transit_total", "counter", "deliveriesTransit"),
    ("qdr_deliveries_ingress_route_container_total", "counter",
     "deliveriesIngressRouteContainer"),
    ("qdr_deliveries_egress_route_container_total", "counter", "deliveriesEgressRouteContainer"),
    ("qdr_deliveries_delayed_1sec_total", "counter", "deliveriesDelayed1Sec"),
    ("qdr_deliveries_delayed_10sec_total", "counter", "deliveriesDelayed10Sec"),
    ("qdr_deliveries_stuck_total", "gauge", "deliveriesStuck"),
    ("qdr_links_blocked_total", "gauge", "linksBlocked"),
    ("qdr_deliveries_redirected_to_fallback_total", "counter", "deliveriesRedirectedToFallback"),
)
# 1.19's allocator families are qdr_allocator_<pool>:<counter>_bytes (gauges; the values are
# object counts whatever the suffix says), one set per pool; this router reports the pools its
# allocator entities report (agent/management/entities.py): the objects of each kind it holds.
ONE_X_ALLOCATOR_FIELDS = ("total_alloc_from_heap", "total_free_to_heap", "held_by_threads",
                          "batches_rebalanced_to_threads", "batches_rebalanced_to_global")
_ALLOCATOR_POOLS = (("qdr_address_t", "addresses"), ("qdr_connection_t", "connections"),
                    ("qdr_link_t", "links"))

# This router's own router-wide families, beside 1.19's: (metric name, type, help, attribute)
_ROUTER_METRICS = (
    ("qdr_deliveries_presettled_total", "counter",
     "Pre-settled deliveries received.", "presettledDeliveries"),
    ("qdr_deliveries_dropped_presettled_total", "counter",
     "Pre-settled deliveries dropped for want of a consumer.", "droppedPresettledDeliveries"),
    ("qdr_connections", "gauge", "Open connections.", "connectionCount"),
    ("qdr_links", "gauge", "Attached links.", "linkCount"),
    ("qdr_addresses", "gauge", "Addresses known to the router.", "addrCount"),
)
_ADDRESS_METRICS = (
    ("qdr_address_deliveries_ingress_total", "counter",
     "Deliveries received for the address.", "deliveriesIngress"),
    ("qdr_address_deliveries_egress_total", "counter",
     "Deliveries sent from the address to receivers.", "deliveriesEgress"),
    ("qdr_address_deliveries_transit_total", "counter",
     "Deliveries for the address forwarded to another router.", "deliveriesTransit"),
    ("qdr_address_subscribers", "gauge", "Local receivers of the address.", "subscriberCount"),
)
_LINK_METRICS = (
    ("qdr_link_deliveries_total", "counter", "Deliveries over the link.", "deliveryCount"),
    ("qdr_link_presettled_total", "counter", "Pre-settled deliveries over the link.",
     "presettledCount"),
    ("qdr_link_dropped_presettled_total", "counter",
     "Pre-settled deliveries dropped on the link.", "droppedPresettledCount"),
    ("qdr_link_undelivered", "gauge", "Deliveries waiting on the link.", "undeliveredCount"),
    ("qdr_link_unsettled", "gauge", "Unsettled deliveries on the link.", "unsettledCount"),
)


class _Families:
    """Samples collected per metric family (each family written once, HELP/TYPE first, in the
    order of its first sample), handed to prometheus_client as a custom collector."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}

    def add(self, name: str, kind: str, help_text: str, labels: list[tuple[str, Any]],
            value: Any) -> None:
        if value is None:
            return
        family = self.families.get(name)
        if family is None:
            # a counter family's name is without _total (OpenMetrics): the text format adds it
            family = self.families[name] = Metric(
                name[:-len("_total")] if kind == "counter" else name, help_text, kind)
        family.add_sample(name, {k: str(v) for k, v in labels}, value)

    def collect(self) -> Iterable[Metric]:
        return self.families.values()


def _one_x_families(exp: _Families, snapshot: dict, router_id: str, counts: dict) -> None:
    """1.19's families (see ONE_X_ROUTER_METRICS); ``counts``: the router entity's counts the
    core does not keep (linkRouteCount, autoLinkCount), missing ones 0."""
    router = dict(snapshot.get("router", {}))
    nodes = snapshot.get("nodes") or []
    router["nodeCount"] = len({str(row.get("id")) for row in nodes} - {router_id})
    for attr in ("linkRouteCount", "autoLinkCount", "deliveriesDelayed1Sec",
                 "deliveriesDelayed10Sec", "deliveriesStuck", "linksBlocked",
                 "deliveriesRedirectedToFallback", "deliveriesIngressRouteContainer",
                 "deliveriesEgressRouteContainer"):
        router.setdefault(attr, counts.get(attr, 0))
    for name, kind, attr in ONE_X_ROUTER_METRICS:
        exp.add(name, kind, f"The router's {attr} (Qpid Dispatch 1.x name).", [],
                router.get(attr))
    for pool, key in _ALLOCATOR_POOLS:
        held = len(snapshot.get(key, ()))
        for field in ONE_X_ALLOCATOR_FIELDS:
            exp.add(f"qdr_allocator_{pool}:{field}_bytes", "gauge",
                    f"Allocator {pool}: {field} (Qpid Dispatch 1.x name; objects held).", [],
                    held if field == "total_alloc_from_heap" else 0)


def prometheus_text(snapshot: dict, router_id: str, uptime_s: float,
                    restarts: Optional[dict] = None, counts: Optional[dict] = None) -> str:
    """The snapshot's counters in the Prometheus text format 0.0.4 (serve it with
    PROMETHEUS_CONTENT_TYPE). Families: router-wide (label ``router``), per address (``router``,
    ``address`` = the address key) and per link (``router``, ``link``, ``address``, ``dir``).
    ``restarts``: how often the supervisor restarted each child process (``worker0``, ...).
    First come 1.19's families, unlabelled, under its names (``counts``: see _one_x_families)."""
    exp = _Families()
    _one_x_families(exp, snapshot, router_id, counts or {})
    router = snapshot.get("router", {})
    rl = [("router", router_id)]
    for process, count in sorted((restarts or {}).items()):
        exp.add("qdr_process_restarts_total", "counter",
                "Times the supervisor restarted a router process after it died.",
                rl + [("process", process)], count)
    for outcome, attr, _ in OUTCOMES:
        exp.add("qdr_deliveries_total", "counter",
                "Settled deliveries from senders, by the outcome returned to them.",
                rl + [("outcome", outcome)], router.get(attr))
    for name, kind, help_text, attr in _ROUTER_METRICS:
        exp.add(name, kind, help_text, rl, router.get(attr))
    exp.add("qdr_uptime_seconds", "gauge", "Seconds since the router started.", rl, uptime_s)
    for addr in sorted(snapshot.get("addresses", ()),
                       key=lambda a: a.get("key", a.get("identity"))):
        al = rl + [("address", addr.get("key", addr.get("identity")))]
        for name, kind, help_text, attr in _ADDRESS_METRICS:
            exp.add(name, kind, help_text, al, addr.get(attr))
    for link in sorted(snapshot.get("links", ()), key=lambda lk: _sort_key(lk.get("identity"))):
        ll = rl + [("link", link.get("identity")), ("address", link.get("owningAddr") or ""),
                   ("dir", link.get("linkDir", ""))]
        for name, kind, help_text, attr in _LINK_METRICS:
            exp.add(name, kind, help_text, ll, link.get(attr))
        for outcome, _, attr in OUTCOMES:
            exp.add("qdr_link_outcomes_total", "counter",
                    "Settled deliveries on the link, by outcome.", ll + [("outcome", outcome)],
                    link.get(attr))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exp)
    return generate_latest(registry).decode()
