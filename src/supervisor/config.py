"""Reading qdrouterd.conf (and its .json form) into a validated, typed RouterConfig.

Owns the meaning of the file: supervisor/confsyntax.py reads its syntax (sections, comments, map
values, the .json form, line numbers) into raw sections; here they are checked against the
schema (unknown sections and attributes, deprecated names and their warnings, types, defaults,
required attributes), then across entities (unique names, references, roles, security, listen
addresses, the policy and its policyDir vhosts). The whole file is validated before anything is
returned; every error is a ConfigError naming FILE:LINE. Entities come back in the order the
router applies them.

Attribute names, types, defaults and conversions come from common.schema only. Must not import
proton, zmq, router_io or router_core.
"""
from __future__ import annotations

import json
import socket
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from supervisor.confsyntax import Problem as _Problem
from supervisor.confsyntax import RawSection as _RawSection
from supervisor.confsyntax import parse_conf as _parse_conf
from supervisor.confsyntax import parse_json as _parse_json
from common.linkroutes import create_problem as link_route_problem
from common.schema import (ROUTER_CONFIG_TYPES, EntityType, SchemaError, address_problem,
                           auto_link_phase, auto_link_problem, listen_addresses_clash, load_schema,
                           normalize_attribute_name, reference_problem)
from common import failover
from common.exchanges import binding_problem, exchange_problem
from common import msglog
from common import policy as vpolicy
from common.policy import policy_problem
from common.security import (auth_plugin_problem, connection_problem, ssl_files_problem,
                             ssl_profile_problem)

__all__ = ["ConfigError", "Entity", "RouterConfig", "load_config", "parse_config",
           "default_router_id", "router_id_problem"]

ROUTER_ID_MAX_LEN = 127

# Order of application: logs, router, policy, sslProfile, authServicePlugin, address, linkRoute,
# autoLink, vhost,
# everything else, then connectors, then listeners last (no traffic is accepted before routes exist).
_APPLY_ORDER = ["log", "router", "policy", "sslProfile", "authServicePlugin",
                "router.config.address",
                "router.config.linkRoute", "router.config.autoLink", "router.config.exchange",
                "router.config.binding", "vhost"]
# named and numbered as 1.19's agent names them: exchange/0, binding/0, ... (identity = name
# when none is given)
_EXCHANGE_TYPES = ("router.config.exchange", "router.config.binding")
_LATE_ORDER = ["connector", "listener"]


class ConfigError(Exception):
    """A configuration that cannot be used; ``line`` is 1-based, or None when not known.
    ``warnings``: what 1.19 would have logged before it met the error (as
    RouterConfig.warnings), for the caller to print first."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 warnings: list | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.warnings = list(warnings or [])
        super().__init__(message)

    def __str__(self) -> str:
        where = self.path or "<config>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Entity:
    """One configured entity: canonical attribute names, converted values, defaults filled."""

    type: str
    short_type: str
    attributes: dict[str, Any]
    line: int | None = None

    @property
    def name(self) -> str:
        return self.attributes["name"]

    @property
    def identity(self) -> str:
        return self.attributes["identity"]

    def get(self, attribute: str, default: Any = None) -> Any:
        return self.attributes.get(attribute, default)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "attributes": self.attributes, "line": self.line}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entity:
        etype = load_schema().entity_type(data["type"])
        return cls(etype.long_name, etype.short_name, dict(data["attributes"]), data.get("line"))


@dataclass(frozen=True)
class RouterConfig:
    """A whole validated configuration; ``entities`` are in order of application."""

    router: Entity
    entities: list[Entity] = field(default_factory=list)
    path: str | None = None
    # what 1.19 logs at warning level while loading: a str is an AGENT line (deprecated
    # attribute names), a (module, text) pair another module's (POLICY: ignored vhost options)
    warnings: list = field(default_factory=list, compare=False)

    def of_type(self, name: str) -> list[Entity]:
        """Entities of one type, named by short name, long name or section alias."""
        long = load_schema().long_name(name)
        return [e for e in self.entities if e.type == long]

    def to_json(self) -> str:
        return json.dumps({"path": self.path, "entities": [e.to_dict() for e in self.entities]})

    @classmethod
    def from_json(cls, text: str) -> RouterConfig:
        data = json.loads(text)
        entities = [Entity.from_dict(d) for d in data["entities"]]
        router = next(e for e in entities if e.short_type == "router")
        return cls(router=router, entities=entities, path=data.get("path"))


def router_id_problem(router_id: str) -> str | None:
    """1.19's start-up check of the router id: at most 127 characters, none of them a control,
    format or white-space character (Unicode categories C* and Z*); its wording, or None."""
    if len(router_id) > ROUTER_ID_MAX_LEN:
        return (f'Router ID "{router_id}" exceeds the maximum allowed length '
                f"({ROUTER_ID_MAX_LEN} characters)")
    for ch in router_id:
        if unicodedata.category(ch)[0] in "CZ":
            # 1.19 raises this one as an AttributeError and prints the exception's name;
            # start-up scripts grep for "AttributeError: Router id attribute".
            return (f"AttributeError: Router id attribute containing character '{ch}' in id "
                    f"'{router_id}' is disallowed.")
    return None


def default_router_id() -> str:
    """The id used when the router section gives none (Qpid generates a ``Router.<x>`` id)."""
    return "Router." + (socket.gethostname().split(".")[0] or "localhost")


def load_config(path: str) -> RouterConfig:
    """Read, parse and validate a configuration file; ``*.json`` files use the JSON form."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read configuration file: {e.strerror or e}", path) from None
    if not data:  # 1.19 refuses a zero-byte file before it parses anything
        raise ConfigError("Configuration file was empty", path)
    return parse_config(decode_config(data, path), path)


def decode_config(data: bytes, path: str = "<config>") -> str:
    """The text of a configuration file, which must be UTF-8; a bad byte is a ConfigError
    naming its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"invalid UTF-8 byte 0x{data[e.start]:02x} (the configuration file "
                          "must be UTF-8 text)", path, line) from None


def parse_config(text: str, path: str = "<config>", *, json_form: bool | None = None) -> RouterConfig:
    """Parse and validate configuration text; the form follows ``path`` unless ``json_form``."""
    if json_form is None:
        json_form = path.endswith(".json")
    warnings: list = []
    try:
        sections = _parse_json(text) if json_form else _parse_conf(text)
        entities = _build(sections, warnings)
    except _Problem as e:
        raise ConfigError(e.message, path, e.line, warnings) from None
    except RecursionError:  # a value nested thousands deep ([[[[...) in JSON
        raise ConfigError("a value is nested too deeply", path) from None
    return RouterConfig(router=next(e for e in entities if e.short_type == "router"),
                        entities=entities, path=path, warnings=warnings)


# ---------------------------------------------------------------------------------------------
# Semantics: raw sections -> entities


def _build(sections: list[_RawSection], warnings: list[str] | None = None) -> list[Entity]:
    schema = load_schema()
    built: list[Entity] = []
    singletons: dict[str, int | None] = {}
    log_index: dict[str, int] = {}
    for section in sections:
        # 1.19 camelCases section names as it does attribute names (ssl-profile: sslProfile)
        etype = schema.find(section.name) or schema.find(normalize_attribute_name(section.name))
        if etype is None:  # 1.19's schema text
            raise _Problem(f"No such entity type 'org.apache.qpid.dispatch.{section.name}' "
                           f"(unknown section '{section.name}')", section.line)
        if not etype.is_configuration:
            raise _Problem(f"unknown section '{section.name}'", section.line)
        if etype.singleton:
            if etype.short_name in singletons:
                raise _Problem(f"duplicate section '{section.name}': only one is allowed "
                               f"(first at line {singletons[etype.short_name]})", section.line)
            singletons[etype.short_name] = section.line
        explicit = _explicit_values(section, etype, warnings)
        if etype.short_name == "router" and explicit.get("id"):
            problem = router_id_problem(str(explicit["id"]))
            if problem:
                raise _Problem(problem, next((a.line for a in section.attributes
                                              if etype.canonical_attribute(a.name) == "id"),
                                             section.line))
        problem = msglog.entity_problem(etype.short_name, explicit)
        if problem:  # 1.19 ignores the names it does not know; refused here (common/msglog.py)
            raise _Problem(problem, next((a.line for a in section.attributes
                                          if etype.canonical_attribute(a.name)
                                          == msglog.ATTRIBUTE), section.line))
        module = explicit.get("module")
        if etype.short_name == "log" and module in log_index:
            # Qpid applies log sections in turn, so a later one for the same module updates it.
            earlier = built[log_index[module]]
            built[log_index[module]] = Entity(earlier.type, earlier.short_type,
                                              {**earlier.attributes, **explicit}, earlier.line)
            continue
        if etype.short_name == "log":
            log_index[module] = len(built)
        attributes = _complete(explicit, etype, section.name, section.line)
        built.append(Entity(etype.long_name, etype.short_name, attributes, section.line))
    if "router" not in singletons:
        router_type = schema.entity_type("router")
        built.append(Entity(router_type.long_name, "router",
                            _complete({}, router_type, "router", None), None))
    router = next(e for e in built if e.short_type == "router")
    _check_roles(router.attributes["mode"], built)
    file_warnings: list = []
    built.extend(_policy_dir_vhosts(built, file_warnings))
    ordered = _apply_order(built)
    _assign_names(ordered)
    _check_unique(ordered)
    _check_references(ordered)
    _check_exchanges(ordered)
    tls_warnings: list = []
    _check_security(ordered, tls_warnings)
    _check_listen_addresses(ordered)
    policy_warnings: list = []
    _check_policy(ordered, policy_warnings)  # the config's vhosts, then the policyDir's
    if warnings is not None:
        warnings.extend(text for module, text in file_warnings if module == "AGENT")
        warnings.extend(policy_warnings)
        warnings.extend(tls_warnings)
    return ordered


def _policy_dir_vhosts(built: list[Entity], warnings: list) -> list[Entity]:
    """The vhosts of the policy's ``policyDir`` (1.19's JSON files), as vhost entities at the
    policy section's line. 1.19 loads them after the configuration's own vhosts, so a clash
    with one of those is theirs to report."""
    policy = next((e for e in built if e.short_type == "policy"), None)
    if policy is None or not policy.attributes.get("policyDir"):
        return []
    try:
        found = vpolicy.load_policy_dir(str(policy.attributes["policyDir"]), warnings)
    except vpolicy.PolicyError as exc:
        raise _Problem(f"policy policyDir: {exc}", policy.line) from None
    etype = load_schema().entity_type("vhost")
    out = []
    for attrs in found:
        values: dict[str, Any] = {}
        for key, value in attrs.items():
            canonical = etype.canonical_attribute(key)
            if canonical is None:  # 1.19's schema check of the file's entities
                raise _Problem(f"policy policyDir: vhost '{attrs.get('hostname')}': "
                               f"{etype.long_name}: Unknown attribute '{key}' for "
                               f"'{etype.long_name}'", policy.line)
            try:
                values[canonical] = etype.attributes[canonical].convert(
                    value if not isinstance(value, bool) else str(value).lower())
            except SchemaError as e:
                raise _Problem(f"policy policyDir: vhost '{attrs.get('hostname')}': bad value "
                               f"for '{key}': {e}", policy.line) from None
        values = _complete(values, etype, "vhost", policy.line)
        out.append(Entity(etype.long_name, "vhost", values, policy.line))
    return out


def _check_policy(entities: list[Entity], warnings: list) -> None:
    """1.19 creates each vhost in turn and refuses to start (exit 1) at the first one its
    policy code raises a PolicyError for, naming that exception."""
    vhosts = [e for e in entities if e.short_type == "vhost"]
    policy = next((e for e in entities if e.short_type == "policy"), None)
    patterns = bool(policy is not None and policy.attributes.get("enableVhostNamePatterns"))
    found = policy_problem([dict(v.attributes) for v in vhosts], warnings, patterns)
    if found is not None:
        index, message = found
        raise _Problem(f"PolicyError: {message}", vhosts[index].line)


def _explicit_values(section: _RawSection, etype: EntityType,
                     warnings: list[str] | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    deprecated: dict[str, str] = {}   # canonical name -> the deprecated name written
    current: set[str] = set()         # canonical names written as such
    entity = etype.short_name.replace("router.config.", "")
    for raw in section.attributes:
        canonical = etype.canonical_attribute(raw.name)
        if canonical == "type":
            continue  # the JSON form may repeat the type inside the map
        if canonical is None:  # 1.19's schema text
            raise _Problem(f"{etype.long_name}: Unknown attribute '{raw.name}' for "
                           f"'{etype.long_name}'", raw.line)
        old = etype.attributes[canonical].deprecation_name
        if old is not None and old in (raw.name, normalize_attribute_name(raw.name)) \
                and canonical not in (raw.name, normalize_attribute_name(raw.name)):
            deprecated[canonical] = old
            if warnings is not None:
                warnings.append(_deprecation_warning(old, entity, canonical))
        else:
            current.add(canonical)
        if canonical in deprecated and canonical in current:  # 1.19's schema error text
            if warnings is not None:  # 1.19 fails on the pair without warning about it
                warnings[:] = [w for w in warnings if w != _deprecation_warning(
                    deprecated[canonical], entity, canonical)]
            raise _Problem(f"{etype.long_name}: Both '{deprecated[canonical]}' and "
                           f"'{canonical}' cannot be specified for entity '{entity}'", raw.line)
        attr = etype.attributes[canonical]
        if not attr.create:
            raise _Problem(f"attribute '{raw.name}' of section '{section.name}' is read-only and "
                           "cannot be configured", raw.line)
        try:
            values[canonical] = attr.convert(raw.value)
        except SchemaError as e:
            raise _Problem(f"bad value for attribute '{raw.name}' in section '{section.name}': {e}",
                           raw.line) from None
    return values


def _deprecation_warning(old: str, entity: str, new: str) -> str:
    return f"Attribute '{old}' of entity '{entity}' has been deprecated. Use '{new}' instead"


def _complete(values: dict[str, Any], etype: EntityType, section: str, line: int | None) -> dict[str, Any]:
    """Apply defaults and per-type rules; check required attributes."""
    short = etype.short_name
    values = dict(values)
    if short == "router" and not values.get("id"):
        values["id"] = default_router_id()
    if short == "vhost" and "hostname" not in values and "name" in values:
        values["hostname"] = values["name"]  # the 0.x policy examples name a vhost with `name`
    if short == "router.config.linkRoute":  # 1.19's checks and texts (common/linkroutes.py)
        problem = link_route_problem(values)
        if problem:
            raise _Problem(f"section '{section}': {problem}", line)
    if short == "router.config.address":
        problem = address_problem(values)
        if problem:
            raise _Problem(f"section '{section}': {problem}", line)
    for attr_name, attr in etype.attributes.items():
        if attr.required and attr_name != "type" and attr_name not in values:
            raise _Problem(f"missing required attribute '{attr_name}' in section '{section}'", line)
    if short == "router.config.autoLink":
        problem = auto_link_problem(values)
        if problem:
            raise _Problem(f"section '{section}': {problem}", line)
        values["phase"] = auto_link_phase(values)
    return {**etype.defaults(), **values}


def _check_roles(mode: str, entities: list[Entity]) -> None:
    for entity in entities:
        if entity.short_type not in ("listener", "connector"):
            continue
        role = entity.attributes["role"]
        if entity.short_type == "listener" and failover.listener_problem(entity.attributes):
            raise _Problem("Unable to create listener, bad failover list: "
                           + failover.listener_problem(entity.attributes), entity.line)
        if role == "inter-router" and mode != "interior":
            raise _Problem(f"{entity.short_type} with role 'inter-router' is not allowed in {mode} "
                           "mode: inter-router connections are only allowed in interior mode",
                           entity.line)
        if role == "edge" and mode == "standalone":
            raise _Problem(f"{entity.short_type} with role 'edge' is not allowed in standalone "
                           "mode: edge connections are only allowed in interior or edge mode",
                           entity.line)


def _apply_order(entities: list[Entity]) -> list[Entity]:
    def rank(entity: Entity) -> int:
        if entity.short_type in _APPLY_ORDER:
            return _APPLY_ORDER.index(entity.short_type)
        if entity.short_type in _LATE_ORDER:
            return len(_APPLY_ORDER) + 1 + _LATE_ORDER.index(entity.short_type)
        return len(_APPLY_ORDER)

    return sorted(entities, key=rank)  # stable: file order within a type


def _identifier(entity: Entity, counters: dict[str, int]) -> str:
    attrs = entity.attributes
    if entity.short_type in ("listener", "connector"):  # 1.19: HOST:PORT, then :NAME if named
        named = f":{attrs['name']}" if attrs.get("name") else ""
        return f"{attrs['host']}:{attrs['port']}{named}"
    if entity.short_type == "log":
        return attrs["module"]
    if entity.short_type == "router":
        return attrs["id"]
    if entity.short_type == "vhost":
        return attrs["hostname"]
    if entity.short_type == "authServicePlugin" and attrs.get("name"):  # 1.19: its name
        return attrs["name"]
    counters[entity.short_type] = counters.get(entity.short_type, 0) + 1
    return str(counters[entity.short_type])


def _assign_names(entities: list[Entity]) -> None:
    """Give every entity a unique identity ``<shortType>/<identifier>``; name defaults to it.
    The router.config types are named and numbered as 1.19 does (common.schema
    ROUTER_CONFIG_TYPES)."""
    counters: dict[str, int] = {}
    identities: set[str] = set()
    names: dict[tuple[str, str], int | None] = {}
    for entity in entities:
        attrs = entity.attributes
        if entity.short_type in ROUTER_CONFIG_TYPES:  # as 1.19: linkRoute/0, identity "3"
            short = entity.short_type[len("router.config."):]
            index = counters.get(short, 0)
            counters[short] = index + 1
            counters["router.config"] = counters.get("router.config", 0) + 1
            attrs["identity"] = str(counters["router.config"])
            attrs.setdefault("name", f"{short}/{index}")
            _check_name(entity, names)
            continue
        if entity.short_type in _EXCHANGE_TYPES:
            short = entity.short_type[len("router.config."):]
            index = counters.get(short, 0)
            counters[short] = index + 1
            attrs["identity"] = f"{short}/{index}"
            attrs.setdefault("name", attrs["identity"])
            identities.add(attrs["identity"])
            _check_name(entity, names)
            continue
        base = f"{entity.short_type}/{_identifier(entity, counters)}"
        identity, n = base, 1
        while identity in identities:
            n += 1
            identity = f"{base}:{n}"
        identities.add(identity)
        attrs["identity"] = identity
        attrs.setdefault("name", identity)
        _check_name(entity, names)


def _check_exchanges(entities: list[Entity]) -> None:
    """Exchanges and bindings as 1.19's core checks them, in file order (common/exchanges.py):
    a refused one stops the start (1.19 would only log it and run without it)."""
    exchanges: list[dict] = []
    bindings: list[dict] = []
    for entity in entities:
        if entity.short_type == "router.config.exchange":
            problem = exchange_problem(entity.attributes, exchanges)
            exchanges.append(entity.attributes)
        elif entity.short_type == "router.config.binding":
            problem = binding_problem(entity.attributes, exchanges, bindings)
            bindings.append(entity.attributes)
        else:
            continue
        if problem:
            raise _Problem(f"section '{entity.short_type[len('router.config.'):]}': {problem}",
                           entity.line)


def _check_name(entity: Entity, names: dict) -> None:
    attrs = entity.attributes
    key = (entity.short_type, attrs["name"])
    if key in names:
        raise _Problem(f"duplicate name '{attrs['name']}' for {entity.short_type} "
                       f"(also used at line {names[key]})", entity.line)
    names[key] = entity.line


def _check_unique(entities: list[Entity]) -> None:
    """Attributes the schema marks unique (vhost ``hostname``) may not repeat within a type."""
    schema = load_schema()
    seen: dict[tuple[str, str, Any], int | None] = {}
    for entity in entities:
        etype = schema.entity_type(entity.type)
        for attr_name, attr in etype.attributes.items():
            if not attr.unique or attr_name in ("name", "identity"):
                continue
            value = entity.attributes.get(attr_name)
            if value is None:
                continue
            key = (entity.short_type, attr_name, json.dumps(value, sort_keys=True))
            if key in seen:
                raise _Problem(f"duplicate {attr_name} '{value}' for {entity.short_type} (also "
                               f"used at line {seen[key]})", entity.line)
            seen[key] = entity.line


def _check_references(entities: list[Entity]) -> None:
    schema = load_schema()
    names: dict[str, set[str]] = {}
    for entity in entities:
        names.setdefault(entity.short_type, set()).add(entity.attributes["name"])
    for entity in entities:
        problem = reference_problem(schema.entity_type(entity.type), entity.attributes,
                                    lambda short: names.get(short, set()))
        if problem:
            raise _Problem(problem, entity.line)


def _check_security(entities: list[Entity], warnings: list) -> None:
    """TLS/SASL settings the router cannot enforce are refused (common.security), never
    ignored: requireSsl without a profile, EXTERNAL without the certificates it needs...
    sslProfile files the TLS library rejects do not stop the start (1.19 starts; each
    connection using the profile fails): ``warnings`` gets a SERVER line for each."""
    profiles = {e.attributes["name"]: e.attributes for e in entities
                if e.short_type == "sslProfile"}
    for entity in entities:
        if entity.short_type == "authServicePlugin":
            problem = auth_plugin_problem(entity.attributes)
        elif entity.short_type == "sslProfile":
            problem = ssl_profile_problem(entity.attributes)
            files = None if problem else ssl_files_problem(entity.attributes)
            if files:
                warnings.append(("SERVER", f"{files}: every connection using this sslProfile "
                                           "will fail TLS set-up"))
        else:
            problem = connection_problem(entity.short_type, entity.attributes, profiles.get)
        if problem:
            raise _Problem(problem, entity.line)


def _check_listen_addresses(entities: list[Entity]) -> None:
    """Two listeners may not bind the same address (``amqp`` is 5672; '' and 0.0.0.0 are one)."""
    listeners = [e for e in entities if e.short_type == "listener"]
    for i, later in enumerate(listeners):
        for earlier in listeners[:i]:
            if listen_addresses_clash((earlier.get("host"), earlier.get("port")),
                                      (later.get("host"), later.get("port"))):
                raise _Problem(f"listener on {later.get('host') or '*'}:{later.get('port')} "
                               f"uses the same address as the listener at line {earlier.line} "
                               f"({earlier.get('host') or '*'}:{earlier.get('port')})",
                               later.line)
