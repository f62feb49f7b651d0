"""The schema document of GET-SCHEMA and GET-JSON-SCHEMA: 1.19's, with this router's additions in
an extension beside it.

Owns the shape of the answer. Qpid Dispatch 1.19 answers with ``prefix`` and ``entityTypes``
(keyed by short name; its router.config types by their last part: ``address``, ``linkRoute``,
``autoLink``, ``exchange``, ``binding``), each type with ``attributes`` (its own, then those it
inherits; ``type`` left out), ``operations``, ``description``, ``fullyQualifiedType`` and its
``deprecated``/``singleton`` flags, an attribute with ``type``, ``default``, ``required``,
``unique``, ``deprecated``, ``description`` and ``graph``; a field whose value is false, zero,
empty or null is left out.

The facts (which attributes 1.19 has and in what order, graph and deprecated flags, the few
types and defaults it states differently from our schema, e.g. ``openProperties`` is its
``properties`` type and ``linkCapacity`` has no schema default there) come from
``common/schema/compat119.json``; the descriptions are this router's own
(``common/schema/qdrouterd.json``). What this router has and 1.19 does not (attributes such as
``router.metricsDir`` or ``listener.maxMessageSize``) is never put in 1.19's types: it is under
the top-level key ``qdrouterExtension`` (``entityTypes`` -> type key -> ``attributes``, in the
same attribute shape), so a 1.19 client that reads ``entityTypes`` sees exactly 1.19's model.

Pure functions over :class:`common.schema.Schema`. Must not import zmq, router_io or
router_core.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Optional

from common.schema import SCHEMA_PATH, EntityType, Schema

COMPAT_PATH = SCHEMA_PATH.with_name("compat119.json")
EXTENSION_KEY = "qdrouterExtension"
EXTENSION_ABOUT = ("Attributes this router has beyond the Qpid Dispatch 1.19 model, by entity "
                   "type key; entityTypes holds the 1.19 model alone.")


@lru_cache(maxsize=1)
def compat_facts() -> dict:
    with open(COMPAT_PATH, encoding="utf-8") as f:
        return json.load(f)["entityTypes"]


def _kept(items: list[tuple[str, Any]]) -> dict:
    """1.19's rule for its dump: fields with a false, zero, empty or null value are left out."""
    return {k: v for k, v in items if v}


def _raw_attribute(schema: Schema, etype: EntityType, name: str) -> dict:
    raw_types = schema.document["entityTypes"]
    current: Optional[str] = etype.short_name
    while current:
        attrs = raw_types[current].get("attributes", {})
        if name in attrs:
            return attrs[name]
        current = raw_types[current].get("extends")
    return {}


def _attribute(spec: dict, differs: dict, graph: bool, deprecated: bool) -> dict:
    def fact(key: str) -> Any:
        return differs[key] if key in differs else spec.get(key)
    return _kept([("type", fact("type")), ("default", fact("default")),
                  ("required", fact("required")), ("unique", fact("unique")),
                  ("deprecated", deprecated), ("description", spec.get("description")),
                  ("graph", graph)])


def _own_names(etype: EntityType) -> list[str]:
    """Our attributes of the type: its own, then inherited, nearest first; ``type`` left out."""
    ordered: list[str] = []
    for short in etype.chain:
        ordered += [n for n in etype.own_attributes.get(short, ()) if n not in ordered]
    ordered += [n for n in etype.attributes if n not in ordered]
    return [n for n in ordered if n != "type"]


def get_schema(schema: Schema) -> dict:
    """The GET-SCHEMA answer (see the module docstring)."""
    facts_by_type = compat_facts()
    types: dict[str, dict] = {}
    extension: dict[str, dict] = {}
    for etype in schema.entity_types.values():
        facts = facts_by_type.get(etype.short_name, {})
        key = facts.get("key", etype.short_name)
        differs = facts.get("differs", {})
        graph, deprecated = set(facts.get("graph", ())), set(facts.get("deprecated", ()))
        attributes, used = {}, set()
        for name in facts.get("attributes", ()):
            source = differs.get(name, {}).get("from", name)
            used.add(source)
            attributes[name] = _attribute(_raw_attribute(schema, etype, source),
                                          differs.get(name, {}), name in graph,
                                          name in deprecated)
        extra = {n: _attribute(_raw_attribute(schema, etype, n), {}, False, False)
                 for n in _own_names(etype) if n not in used}
        if extra:
            extension[key] = {"attributes": extra}
        raw = schema.document["entityTypes"][etype.short_name]
        flags = set(facts.get("flags", ()))
        types[key] = _kept([("attributes", attributes), ("operations", list(etype.operations)),
                            ("description", raw.get("description")),
                            ("fullyQualifiedType", etype.long_name),
                            ("deprecated", "deprecated" in flags),
                            ("singleton", "singleton" in flags)])
        types[key].setdefault("attributes", {})  # 1.19 shows an empty map, never none
    return {"prefix": schema.prefix, "entityTypes": types,
            EXTENSION_KEY: {"description": EXTENSION_ABOUT, "entityTypes": extension}}


def get_json_schema(schema: Schema, indent: Optional[int] = None) -> str:
    """GET-JSON-SCHEMA: the same document as JSON text, indented by the request's ``indent``
    property (none: one line), as 1.19 answers it."""
    return json.dumps(get_schema(schema), indent=indent)
