"""The management schema: entity types, attributes, names and value conversion.

Owns the loading of ``schema/qdrouterd.json`` (the single source for config parsing, validation
and the management GET-SCHEMA/GET-ATTRIBUTES/GET-OPERATIONS answers) and the rules that go with
it: long/short entity type names, attribute name normalisation (``sasl-mechanisms`` ->
``saslMechanisms``), deprecated names (``addr`` -> ``address``) and conversion of text or JSON
values to typed values (booleans accept yes/no/true/false/on/off).

Pure Python, no I/O beyond reading the schema file once. Must not import proton, zmq, router_io or
router_core.
"""
from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

SCHEMA_PATH = Path(__file__).with_name("schema") / "qdrouterd.json"

#: Extra short names accepted where an entity type is named (config sections, qdmanage --type).
TYPE_ALIASES: dict[str, str] = {
    "address": "router.config.address",
    "linkRoute": "router.config.linkRoute",
    "autoLink": "router.config.autoLink",
    "link": "router.link",
    "node": "router.node",
}

_TRUE = frozenset({"yes", "true", "on"})
_FALSE = frozenset({"no", "false", "off"})
_LOG_LEVELS = frozenset({"trace", "debug", "info", "notice", "warning", "error", "critical"})
_WELL_KNOWN_PORTS = {"amqp": 5672, "amqps": 5671, "http": 80, "https": 443}
_SEPARATORS = re.compile(r"[-_.]+")


class SchemaError(ValueError):
    """A type name, attribute name or value that the schema does not accept."""


@dataclass(frozen=True)
class AttributeType:
    """One attribute of an entity type, as described in the schema file."""

    name: str
    type: str | tuple[str, ...]  # a type name, or the allowed values of an enum
    description: str = ""
    default: Any = None
    required: bool = False
    create: bool = False
    update: bool = False
    graph: bool = False
    unique: bool = False
    deprecation_name: str | None = None
    format: str | None = None

    @property
    def is_enum(self) -> bool:
        return isinstance(self.type, tuple)

    def convert(self, value: Any) -> Any:
        """Return ``value`` converted to this attribute's type; raise SchemaError if invalid."""
        converted = _convert(self.type, value)
        if self.format == "port":
            _check_port(converted)
        elif self.format == "logLevels":
            _check_log_levels(converted)
        return converted


@dataclass(frozen=True)
class EntityType:
    """An entity type with its own and inherited attributes."""

    long_name: str
    short_name: str
    description: str
    extends: str | None
    operations: tuple[str, ...]
    singleton: bool
    attributes: Mapping[str, AttributeType]
    deprecated_names: Mapping[str, str] = field(default_factory=dict)
    is_configuration: bool = False

    def attribute(self, name: str) -> AttributeType | None:
        """The attribute called ``name`` after normalisation and deprecated-name mapping."""
        canonical = self.canonical_attribute(name)
        return None if canonical is None else self.attributes[canonical]

    def canonical_attribute(self, name: str) -> str | None:
        """Map a written attribute name to its canonical camelCase name, or None if unknown."""
        for candidate in (name, normalize_attribute_name(name)):
            if candidate in self.attributes:
                return candidate
            if candidate in self.deprecated_names:
                return self.deprecated_names[candidate]
        return None

    def defaults(self) -> dict[str, Any]:
        return {n: a.default for n, a in self.attributes.items() if a.default is not None}


def normalize_attribute_name(name: str) -> str:
    """``sasl-mechanisms``, ``sasl_mechanisms`` and ``sasl.mechanisms`` -> ``saslMechanisms``."""
    parts = [p for p in _SEPARATORS.split(name) if p]
    if len(parts) <= 1:
        return name
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


class Schema:
    """All entity types of the schema file, indexed by long and short name."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.prefix: str = document["prefix"]
        self.description: str = document.get("description", "")
        self.document = document
        raw_types: Mapping[str, Any] = document["entityTypes"]
        self.entity_types: dict[str, EntityType] = {}
        for short in raw_types:
            entity_type = self._build(short, raw_types)
            self.entity_types[entity_type.long_name] = entity_type

    def _build(self, short: str, raw_types: Mapping[str, Any]) -> EntityType:
        chain: list[str] = []
        current: str | None = short
        while current is not None:
            chain.append(current)
            current = raw_types[current].get("extends")
        attributes: dict[str, AttributeType] = {}
        for name in reversed(chain):  # base attributes first, as GET-ATTRIBUTES lists them
            for attr_name, spec in raw_types[name].get("attributes", {}).items():
                attributes[attr_name] = _attribute(attr_name, spec)
        raw = raw_types[short]
        return EntityType(
            long_name=f"{self.prefix}.{short}",
            short_name=short,
            description=raw.get("description", ""),
            extends=raw.get("extends"),
            operations=tuple(raw.get("operations", ())),
            singleton=bool(raw.get("singleton", False)),
            attributes=attributes,
            deprecated_names={a.deprecation_name: n for n, a in attributes.items() if a.deprecation_name},
            is_configuration="configurationEntity" in chain[1:],
        )

    def long_name(self, name: str) -> str:
        """Full type name for a long name, short name or alias; raise SchemaError if unknown."""
        name = TYPE_ALIASES.get(name, name)
        long = name if name.startswith(self.prefix + ".") else f"{self.prefix}.{name}"
        if long not in self.entity_types:
            raise SchemaError(f"unknown entity type '{name}'")
        return long

    def short_name(self, name: str) -> str:
        return self.entity_type(name).short_name

    def entity_type(self, name: str) -> EntityType:
        return self.entity_types[self.long_name(name)]

    def find(self, name: str) -> EntityType | None:
        try:
            return self.entity_type(name)
        except SchemaError:
            return None

    def concrete_types(self) -> list[EntityType]:
        """Types that can have instances (not the abstract bases)."""
        bases = {"entity", "configurationEntity", "operationalEntity"}
        return [t for t in self.entity_types.values() if t.short_name not in bases]


@lru_cache(maxsize=1)
def load_schema() -> Schema:
    """The schema, read from SCHEMA_PATH once per process."""
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return Schema(json.load(f))


def _attribute(name: str, spec: Mapping[str, Any]) -> AttributeType:
    raw_type = spec["type"]
    return AttributeType(
        name=name,
        type=tuple(raw_type) if isinstance(raw_type, list) else raw_type,
        description=spec.get("description", ""),
        default=spec.get("default"),
        required=bool(spec.get("required", False)),
        create=bool(spec.get("create", False)),
        update=bool(spec.get("update", False)),
        graph=bool(spec.get("graph", False)),
        unique=bool(spec.get("unique", False)),
        deprecation_name=spec.get("deprecationName"),
        format=spec.get("format"),
    )


def _convert(kind: str | tuple[str, ...], value: Any) -> Any:
    if isinstance(kind, tuple):
        return _convert_enum(kind, value)
    if kind in ("string", "path"):
        if isinstance(value, (dict, list)):
            raise SchemaError(f"expected a {kind}, got {_show(value)}")
        return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    if kind == "integer":
        return convert_integer(value)
    if kind == "boolean":
        return convert_boolean(value)
    if kind == "map":
        return _convert_json(value, dict, "map")
    if kind == "list":
        if isinstance(value, str) and not value.lstrip().startswith("["):
            return [item.strip() for item in value.split(",") if item.strip()]
        return _convert_json(value, list, "list")
    raise SchemaError(f"unknown attribute type '{kind}'")


def convert_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise SchemaError(f"invalid boolean {_show(value)} (use yes/no, true/false or on/off)")


def convert_integer(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
    raise SchemaError(f"invalid integer {_show(value)}")


def _convert_enum(allowed: tuple[str, ...], value: Any) -> str:
    if isinstance(value, str) and value.strip() in allowed:
        return value.strip()
    # Qpid also accepts the index of an enum value.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(allowed):
        return allowed[value]
    raise SchemaError(f"invalid value {_show(value)}, expected one of {', '.join(allowed)}")


def _convert_json(value: Any, expected: type, kind: str) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise SchemaError(f"invalid {kind} (JSON expected): {e}") from None
    if not isinstance(value, expected):
        raise SchemaError(f"expected a {kind}, got {_show(value)}")
    return value


def _check_port(port: str) -> None:
    if port.isdigit():
        if 0 <= int(port) <= 65535:
            return
        raise SchemaError(f"invalid port '{port}' (must be 0-65535)")
    if port in _WELL_KNOWN_PORTS:
        return
    try:
        socket.getservbyname(port)
    except OSError:
        raise SchemaError(f"invalid port '{port}' (not a number or a known service name)") from None


def _check_log_levels(enable: str) -> None:
    text = enable.strip().lower()
    if text in ("none", "default", ""):
        return
    for item in text.split(","):
        level = item.strip().rstrip("+")
        if level not in _LOG_LEVELS:
            raise SchemaError(
                f"invalid log level '{item.strip()}' (levels: {', '.join(sorted(_LOG_LEVELS))}; "
                "a trailing '+' means that level and above)"
            )


def port_number(port: str) -> int:
    """Numeric value of a port attribute (``amqp`` -> 5672); for the I/O layer."""
    if port.isdigit():
        return int(port)
    if port in _WELL_KNOWN_PORTS:
        return _WELL_KNOWN_PORTS[port]
    return socket.getservbyname(port)


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else f"'{value}'"
