"""The management schema: entity types, attributes, names and value conversion.

Owns the loading of ``schema/qdrouterd.json`` (the single source for config parsing, validation
and the management GET-SCHEMA/GET-ATTRIBUTES/GET-OPERATIONS answers) and the rules that go with
it: long/short entity type names, attribute name normalisation (``sasl-mechanisms`` ->
``saslMechanisms``), deprecated names (``addr`` -> ``address``) and conversion of text or JSON
values to typed values (booleans accept yes/no/true/false/on/off).

Numeric attributes carry their range in the schema file (``minimum``/``maximum``: outside is an
error; ``atLeast``/``atMost``: silently raised/lowered to, as Qpid Dispatch 1.19 promotes
maxFrameSize and clamps maxSessions; ``zeroMeansDefault``: 0 becomes the default, as 1.19 treats
linkCapacity 0); ``references`` names the entity type whose ``name`` a value must be (checked by
the callers, which know the other entities). Config files and management CREATE/UPDATE both
convert through :meth:`AttributeType.convert`, so they accept exactly the same values.

The catalogue is Qpid Dispatch 1.19's: its 29 types, abstract ones included (``entity``,
``configurationEntity``, ``operationalEntity``, ``org.amqp.management``); a type's operations are
its own then its bases' (as 1.19's GET-OPERATIONS lists them). A type marked
``"configSection": false`` is described for 1.x tools only: no configuration section accepts it
(the router does not implement it), so a config file naming it gets a clear error.

Pure Python, no I/O beyond reading the schema file once. Must not import proton, zmq, router_io or
router_core, except common.log for the one log-level grammar (``parse_enable``).
"""
from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from common.linkroutes import BOTH_PATTERNS, NO_PATTERN
from common.log import LogConfigError, parse_enable

SCHEMA_PATH = Path(__file__).with_name("schema") / "qdrouterd.json"

#: Extra short names accepted where an entity type is named (config sections, qdmanage --type).
TYPE_ALIASES: dict[str, str] = {
    "address": "router.config.address",
    "linkRoute": "router.config.linkRoute",
    "autoLink": "router.config.autoLink",
    "exchange": "router.config.exchange",
    "binding": "router.config.binding",
    "link": "router.link",
    "node": "router.node",
}

#: Types that have no instances of their own (bases of the others), as in Qpid Dispatch 1.19.
# The router.config types 1.19 names ``<type>/<N>`` when unnamed (N counting that type's
# configuration sections from 0) and identifies by one counter shared among them and the
# connection-scoped link routes (its core's), from 1 in the order the file is applied.
ROUTER_CONFIG_TYPES = ("router.config.address", "router.config.linkRoute",
                       "router.config.autoLink")
ABSTRACT_TYPES = frozenset({"entity", "configurationEntity", "operationalEntity",
                            "org.amqp.management"})

_TRUE = frozenset({"yes", "true", "on"})
_FALSE = frozenset({"no", "false", "off"})
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
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
    minimum: int | None = None
    maximum: int | None = None
    at_least: int | None = None
    at_most: int | None = None
    zero_means_default: bool = False
    references: str | None = None

    @property
    def is_enum(self) -> bool:
        return isinstance(self.type, tuple)

    def convert(self, value: Any) -> Any:
        """Return ``value`` converted to this attribute's type; raise SchemaError if invalid."""
        converted = _convert(self.type, value)
        if self.type == "integer":
            converted = self._check_range(converted)
        if self.format == "port":
            _check_port(converted)
        elif self.format == "logLevels":
            _check_log_levels(converted)
        elif self.format == "vhostGroups":
            converted = _check_vhost_groups(converted)
        return converted

    def _check_range(self, number: int) -> int:
        low = _INT64_MIN if self.minimum is None else self.minimum
        high = _INT64_MAX if self.maximum is None else self.maximum
        if not low <= number <= high:
            if self.minimum is not None and self.maximum is not None:
                rule = f"must be {self.minimum}..{self.maximum}"
            elif self.minimum is not None:
                rule = f"must be >= {self.minimum}" + (
                    f" and <= {_INT64_MAX}" if number > _INT64_MAX else "")
            elif self.maximum is not None:
                rule = f"must be <= {self.maximum}"
            else:
                rule = "does not fit in 64 bits"
            shown = str(number) if len(str(number)) <= 30 else f"{str(number)[:27]}..."
            raise SchemaError(f"{shown} is out of range ({rule})")
        if number == 0 and self.zero_means_default and isinstance(self.default, int):
            return self.default
        if self.at_least is not None and number < self.at_least:
            return self.at_least
        if self.at_most is not None and number > self.at_most:
            return self.at_most
        return number


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
    chain: tuple[str, ...] = ()  # short names: this type, then the types it extends
    own_attributes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # by chain type

    def extends_type(self, short: str) -> bool:
        """Whether this type is ``short`` or extends it (directly or not)."""
        return short in self.chain

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
        operations: list[str] = []  # own first, then inherited (as 1.19's GET-OPERATIONS)
        for name in chain:
            operations += [op for op in raw_types[name].get("operations", ())
                           if op not in operations]
        return EntityType(
            long_name=f"{self.prefix}.{short}",
            short_name=short,
            description=raw.get("description", ""),
            extends=raw.get("extends"),
            operations=tuple(operations),
            singleton=bool(raw.get("singleton", False)),
            attributes=attributes,
            deprecated_names={a.deprecation_name: n for n, a in attributes.items() if a.deprecation_name},
            # configSection false: a 1.19 type this router only describes (no config section)
            is_configuration="configurationEntity" in chain[1:] and raw.get("configSection", True),
            chain=tuple(chain),
            own_attributes={name: tuple(raw_types[name].get("attributes", {}))
                            for name in chain},
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
        bases = ABSTRACT_TYPES
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
        minimum=spec.get("minimum"),
        maximum=spec.get("maximum"),
        at_least=spec.get("atLeast"),
        at_most=spec.get("atMost"),
        zero_means_default=bool(spec.get("zeroMeansDefault", False)),
        references=spec.get("references"),
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
    try:
        parse_enable(enable)
    except LogConfigError as exc:
        raise SchemaError(str(exc)) from None


# Settings of a vhost user group (Qpid Dispatch 1.19 vhostUserGroupSettings) that are counts.
VHOST_GROUP_INTEGERS = ("maxConnectionsPerUser", "maxConnectionsPerHost", "maxFrameSize",
                        "maxSessionWindow", "maxSessions", "maxSenders", "maxReceivers",
                        "maxMessageSize")


def _check_vhost_groups(groups: dict) -> dict:
    """vhost ``groups``: a map of group name -> map of settings; the count settings (e.g.
    ``maxMessageSize``) become non-negative integers."""
    out = {}
    for group, group_settings in groups.items():
        if not isinstance(group_settings, dict):
            raise SchemaError(f"group '{group}' must be a map of settings, got "
                              f"{_show(group_settings)}")
        checked = dict(group_settings)
        for key in VHOST_GROUP_INTEGERS:
            if key in checked:
                try:
                    number = convert_integer(checked[key])
                except SchemaError as exc:
                    raise SchemaError(f"group '{group}' {key}: {exc}") from None
                if not 0 <= number <= _INT64_MAX:
                    raise SchemaError(f"group '{group}' {key}: {number} is out of range "
                                      "(must be >= 0)")
                checked[key] = number
        out[group] = checked
    return out


def port_number(port: str) -> int:
    """Numeric value of a port attribute (``amqp`` -> 5672); for the I/O layer."""
    if port.isdigit():
        return int(port)
    if port in _WELL_KNOWN_PORTS:
        return _WELL_KNOWN_PORTS[port]
    return socket.getservbyname(port)


def reference_problem(etype: EntityType, attributes: dict[str, Any],
                      names_of: Callable[[str], Any]) -> str | None:
    """The first attribute that names a missing entity (schema ``references``), as a message;
    ``names_of(short_type)`` gives the names that exist. Shared with management CREATE."""
    for attr_name, attr in etype.attributes.items():
        value = attributes.get(attr_name)
        if attr.references is None or value in (None, ""):
            continue
        if value not in names_of(attr.references):
            return (f"{etype.short_name} attribute '{attr_name}' names {attr.references} "
                    f"'{value}', but there is no {attr.references} with that name")
    return None


AUTO_LINK_BOTH_IDS = "Both connection and containerId cannot be specified. Specify only one"
AUTO_LINK_PHASE_RANGE = "autoLink phase must be between 0 and 9"


def auto_link_problem(attributes: dict[str, Any]) -> str | None:
    """What 1.19 refuses in an ``autoLink`` (canonical attribute names), with its texts: both
    ``connection`` and ``containerId``, a phase outside 0..9. Shared by the configuration file
    and management CREATE."""
    if attributes.get("connection") is not None and attributes.get("containerId") is not None:
        return AUTO_LINK_BOTH_IDS
    phase = attributes.get("phase")
    if phase is not None and not (isinstance(phase, int) and 0 <= phase <= 9):
        return AUTO_LINK_PHASE_RANGE
    return None


ADDRESS_FALLBACK = ("Fallback cannot be specified with waypoint or non-zero ingress and egress "
                    "phases")
ADDRESS_PHASES = "Phase values must be between 0 and 9"


def address_problem(attributes: dict[str, Any]) -> str | None:
    """What 1.19 refuses in an ``address`` (canonical attribute names, values converted), with
    its texts: no or both of ``prefix`` and ``pattern``; ``enableFallback`` with a waypoint or a
    non-zero phase (1.19 reports this one first); one of ``ingressPhase``/``egressPhase``
    without the other (1.19 takes the missing one as -1, out of range). Shared by the
    configuration file and management CREATE."""
    ingress, egress = attributes.get("ingressPhase"), attributes.get("egressPhase")
    if attributes.get("enableFallback") and (attributes.get("waypoint") or (ingress or 0) > 0
                                             or (egress or 0) > 0):
        return ADDRESS_FALLBACK
    has_prefix, has_pattern = (attributes.get(k) is not None for k in ("prefix", "pattern"))
    if not has_prefix and not has_pattern:
        return NO_PATTERN
    if has_prefix and has_pattern:
        return BOTH_PATTERNS
    if (ingress is None) != (egress is None):
        return ADDRESS_PHASES
    return None


def address_phases(attributes: dict[str, Any]) -> tuple[int, int]:
    """(ingress, egress) phase of an ``address`` as 1.19 keeps them: the configured ones, else 0
    and (1 for a waypoint, else 0)."""
    ingress, egress = attributes.get("ingressPhase"), attributes.get("egressPhase")
    if ingress is None and egress is None:
        return 0, 1 if attributes.get("waypoint") else 0
    return int(ingress or 0), int(egress or 0)


def auto_link_phase(attributes: dict[str, Any]) -> int:
    """An autoLink's phase: the configured one, else 1.19's default (0 for ``out`` and for a
    fallback auto-link, 1 for ``in``)."""
    phase = attributes.get("phase")
    if phase is not None:
        return int(phase)
    return 0 if attributes.get("direction") == "out" or attributes.get("fallback") else 1


_ANY_HOST = frozenset({"", "0.0.0.0", "::", "[::]", "*"})


def listen_address(host: Any, port: Any) -> tuple[str, int | str]:
    """The socket address a listener binds, for telling whether two listeners clash: a port
    service name becomes its number (``amqp`` -> 5672) and every wildcard host ('', 0.0.0.0,
    ::) is the same. Port 0 (any free port) never clashes: callers skip it."""
    text = "" if host is None else str(host).strip().lower()
    text = "" if text in _ANY_HOST else text
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if text == "localhost":
        text = "127.0.0.1"
    try:
        number: int | str = port_number(str(port))
    except (OSError, ValueError):
        number = str(port)
    return text, number


def listen_addresses_clash(first: tuple[Any, Any], second: tuple[Any, Any]) -> bool:
    """Whether two listeners' (host, port) would bind the same socket address: same port (not
    0) and the same host, or either host a wildcard (it takes the port on every address)."""
    host1, port1 = listen_address(*first)
    host2, port2 = listen_address(*second)
    if port1 != port2 or port1 in (0, "0"):
        return False
    return host1 == host2 or host1 == "" or host2 == ""


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else f"'{value}'"
