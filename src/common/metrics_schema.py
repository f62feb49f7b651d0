"""The "router-metrics/1" record schema: the keys of the metrics records the agent writes.

Owns the record format shared by its writer (``agent.metrics``, which builds the records from
core snapshots, and ``agent.metrics_sink``, which writes them as JSON lines) and its readers
(the Spark jobs in ``pipelines/``): the schema name, the key lists per record kind and the
delta prefix. The readers import this module, not the agent. Plain constants; must not import
anything of the router's packages.

Record keys ("router-metrics/1"; stable: add keys, never rename or drop them)
    Every record:
        schema        "router-metrics/1"
        ts            unix seconds (float), when the snapshot was taken (the END of the interval)
        router_id     the router's id
        kind          "router" | "address" | "link" | "connection" (connection: final only)
        key           router: the router id; address: the address key (``M0orders``);
                      link: the link identity
        address       the address text for mobile keys (``orders``), else the key as it is;
                      link: that of its owningAddr; router: null
        interval_s    seconds the d_ deltas cover (the caller's sampling interval)
        final         false: the entity as it is at ts; true: its FINAL counts, written once
                      when it has gone (address deleted, link detached, connection closed)
                      in the interval ending at ts. Totals per address and link are therefore
                      exact: an entity that came and went between two samples has a final
                      record, one that went after a sample has its last counts in it.
    Final records only (null or absent otherwise):
        seq           the core's sequence number of the removal (increasing, per core
                      process); (router_id, kind, key, seq, gone_mono) identifies it
        gone_ts       unix seconds when it was removed (from the core's clock)
        gone_mono     the core's clock when it was removed (monotonic seconds)
    kind "router":
        counters      deliveriesIngress, deliveriesEgress, deliveriesTransit,
                      deliveriesIngressRouteContainer, deliveriesEgressRouteContainer,
                      acceptedDeliveries, rejectedDeliveries, releasedDeliveries,
                      modifiedDeliveries, presettledDeliveries, droppedPresettledDeliveries
        gauges        addrCount, linkCount, connectionCount
    kind "address":
        counters      deliveriesIngress, deliveriesEgress, deliveriesTransit,
                      deliveriesToContainer, deliveriesFromContainer
        gauges        subscriberCount, remoteCount, containerCount
        attributes    distribution
    kind "link":
        counters      deliveryCount, presettledCount, droppedPresettledCount, acceptedCount,
                      rejectedCount, releasedCount, modifiedCount
        gauges        undeliveredCount, unsettledCount, creditAvailable, capacity
        attributes    linkDir ("in" | "out"), owningAddr, linkName, connectionId
    kind "connection" (final records only; key = the connection identity, address null):
        attributes    container, host, role, dir, uptimeSeconds
    Byte counters (router/address: bytesIngress, bytesEgress; link: bytesCount) appear only when
    the snapshot has them (the core does not count bytes yet).
    Deltas: ``d_<counter>`` for every counter above (bytes included when present) = this
    snapshot's value minus the previous snapshot's, so rate = d_x / interval_s. Rules:
      * no previous snapshot at all (``previous`` None: the first sample after the agent or
        the core was restarted): every d_ is null (unknown: the counters may cover any length
        of time);
      * an empty previous snapshot (``{}``: the router's first sample; its counters started
        at zero when it started, ``interval_s`` before): every d_ is the value;
      * the entity is absent from the previous snapshot (new address or link): d_ = the value
        (it started at zero after the previous snapshot);
      * the value went down (counter reset: link identity reused, router restarted): d_ = the
        value, as Prometheus' rate() does;
      * a key that has a final record in this interval: its first final record takes the
        previous snapshot's value as base (it is the entity seen then); later incarnations
        of the key (further final records, the live entity now) started at zero: d_ = value.
    So sum(d_) over a key's records = its true count since the first sample, whichever
    samples were missed (a missed sample only widens the next interval).
    Values absent from the snapshot are null. Inbound links' outcome counters are the outcomes
    returned to senders, the same ones the router-wide acceptedDeliveries... count.
"""
from __future__ import annotations

SCHEMA = "router-metrics/1"
DELTA_PREFIX = "d_"

ROUTER_COUNTERS = (
    "deliveriesIngress", "deliveriesEgress", "deliveriesTransit",
    "deliveriesIngressRouteContainer", "deliveriesEgressRouteContainer",
    "acceptedDeliveries", "rejectedDeliveries", "releasedDeliveries", "modifiedDeliveries",
    "presettledDeliveries", "droppedPresettledDeliveries")
ROUTER_GAUGES = ("addrCount", "linkCount", "connectionCount")
ROUTER_BYTES = ("bytesIngress", "bytesEgress")

ADDRESS_COUNTERS = ("deliveriesIngress", "deliveriesEgress", "deliveriesTransit",
                    "deliveriesToContainer", "deliveriesFromContainer")
ADDRESS_GAUGES = ("subscriberCount", "remoteCount", "containerCount")
ADDRESS_ATTRS = ("distribution",)
ADDRESS_BYTES = ("bytesIngress", "bytesEgress")

LINK_COUNTERS = ("deliveryCount", "presettledCount", "droppedPresettledCount", "acceptedCount",
                 "rejectedCount", "releasedCount", "modifiedCount")
LINK_GAUGES = ("undeliveredCount", "unsettledCount", "creditAvailable", "capacity")
LINK_ATTRS = ("linkDir", "owningAddr", "linkName", "connectionId")
LINK_BYTES = ("bytesCount",)

COMMON_KEYS = ("schema", "ts", "router_id", "kind", "key", "address", "interval_s", "final")
FINAL_KEYS = ("seq", "gone_ts", "gone_mono")
CONNECTION_ATTRS = ("container", "host", "role", "dir", "uptimeSeconds")

# kind -> (counters, gauges, attributes, optional byte counters)
KINDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "router": (ROUTER_COUNTERS, ROUTER_GAUGES, (), ROUTER_BYTES),
    "address": (ADDRESS_COUNTERS, ADDRESS_GAUGES, ADDRESS_ATTRS, ADDRESS_BYTES),
    "link": (LINK_COUNTERS, LINK_GAUGES, LINK_ATTRS, LINK_BYTES),
    "connection": ((), (), CONNECTION_ATTRS, ()),
}


# The router's own addresses, by hash key (class character, a mobile key's phase, then the
# text): router, topological and area keys, and local or mobile keys of management
# ($management, 1.19's $_management_internal), the routing protocol (qdrouter, qdrouter.ma,
# qdhello) and _$qd.*. The one rule the pipelines (pipelines.transforms.is_internal) and the
# console (console/src/pages/overview.js, same text, checked by a test) hide them by.
INTERNAL_KEY = (r"^([RTA]|(L|M[0-9])(\$management|\$_management|\$qd|_\$qd\.|qdrouter|qdhello"
                r"|_topo/|_local/))")
