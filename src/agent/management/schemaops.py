"""Schema queries of the management agent: GET-TYPES, GET-ATTRIBUTES, GET-OPERATIONS and
GET-ANNOTATIONS, answered from ``common/schema/qdrouterd.json`` (GET-SCHEMA and GET-JSON-SCHEMA:
schemadoc.py).

Pure functions over :class:`common.schema.Schema`; no router state. Must not import zmq,
router_io or router_core.
"""
from __future__ import annotations

import json
from typing import Optional

from agent.management.protocol import BAD_REQUEST, ManagementError
from common.schema import ROUTER_CONFIG_TYPES, EntityType, Schema, SchemaError


def resolve_type(schema: Schema, name: str) -> EntityType:
    """The entity type for a long or short name; 400 if the schema has no such type (1.19's
    status and wording)."""
    try:
        return schema.entity_type(name)
    except SchemaError:
        raise ManagementError(BAD_REQUEST, f"No such entity type '{name}'") from None


def _selected(schema: Schema, entity_type: Optional[str]) -> list[EntityType]:
    """The named type, or every type, abstract ones included (as 1.19 answers GET-*)."""
    if entity_type:
        return [resolve_type(schema, entity_type)]
    return list(schema.entity_types.values())


# the columns 1.19's core answers a QUERY without attributeNames of the router and of its own
# configuration types with, in its order (deprecated names beside the new ones, ``fallback``
# for an address's ``enableFallback``); GET-ATTRIBUTES and GET-SCHEMA answer from the schema
CORE_COLUMNS = {
    # the router's counters as 1.19's core agent answers them (linksBlocked, which 1.x's
    # qdstat -g reads, is not in the schema: blockedLinkCount is its schema name)
    "router": ("name", "identity", "id", "type", "mode", "area", "version", "metadata",
               "addrCount", "linkCount", "nodeCount", "linkRouteCount", "autoLinkCount",
               "connectionCount", "presettledDeliveries", "droppedPresettledDeliveries",
               "acceptedDeliveries", "rejectedDeliveries", "releasedDeliveries",
               "modifiedDeliveries", "deliveriesDelayed1Sec", "deliveriesDelayed10Sec",
               "deliveriesStuck", "deliveriesIngress", "deliveriesEgress", "deliveriesTransit",
               "deliveriesIngressRouteContainer", "deliveriesEgressRouteContainer",
               "deliveriesRedirectedToFallback", "linksBlocked", "uptimeSeconds", "memoryUsage",
               "workerThreads"),
    "router.config.address": ("name", "identity", "type", "prefix", "distribution", "waypoint",
                              "ingressPhase", "egressPhase", "pattern", "priority", "fallback"),
    "router.config.linkRoute": ("name", "identity", "type", "prefix", "distribution",
                                "connection", "containerId", "direction", "dir", "operStatus",
                                "pattern", "addExternalPrefix", "delExternalPrefix"),
    "router.config.autoLink": ("name", "identity", "type", "address", "addr", "direction", "dir",
                               "phase", "connection", "containerId", "externalAddress",
                               "externalAddr", "linkRef", "operStatus", "lastError", "fallback"),
}


def core_answer(etype: EntityType, entity: dict) -> dict:
    """A READ or CREATE answer as 1.19's core gives it for its configuration types: its core
    columns, in its order (``dir`` beside ``direction``, ``fallback`` and not
    ``enableFallback``); any other type's entity as it is."""
    if etype.short_name not in ROUTER_CONFIG_TYPES:
        return entity
    return {name: entity.get(name) for name in CORE_COLUMNS[etype.short_name]}


def query_columns(etype: EntityType) -> list[str]:
    """The columns of a QUERY of ``etype`` that names none."""
    return list(CORE_COLUMNS.get(etype.short_name, ())) or attribute_names(etype)


def attribute_names(etype: EntityType) -> list[str]:
    """The type's attributes in 1.19's order: its own first, then those of the types it
    extends, nearest first (``name``, ``identity``, ``type`` last)."""
    raw = list(etype.attributes)
    ordered: list[str] = []
    for short in etype.chain:
        ordered += [n for n in etype.own_attributes.get(short, ()) if n not in ordered]
    return ordered + [n for n in raw if n not in ordered]


def base_types(schema: Schema, etype: EntityType) -> list[str]:
    """Long names of the types ``etype`` extends, nearest first."""
    out = []
    current = etype.extends
    while current:
        base = schema.entity_type(current)
        out.append(base.long_name)
        current = base.extends
    return out


def get_types(schema: Schema, entity_type: Optional[str]) -> dict:
    return {t.long_name: base_types(schema, t) for t in _selected(schema, entity_type)}


def get_attributes(schema: Schema, entity_type: Optional[str]) -> dict:
    return {t.long_name: attribute_names(t) for t in _selected(schema, entity_type)}


def get_operations(schema: Schema, entity_type: Optional[str]) -> dict:
    return {t.long_name: list(t.operations) for t in _selected(schema, entity_type)}


def get_annotations(schema: Schema, entity_type: Optional[str]) -> dict:
    """This schema has no annotations: an empty map (as 1.19 answers); a named type must
    exist."""
    _selected(schema, entity_type)
    return {}
