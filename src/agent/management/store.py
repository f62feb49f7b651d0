"""The configuration entities the management agent answers for, and CREATE/UPDATE validation.

Owns the agent's copy of every configuration entity (from the runtime spec, then changed at run
time by management): router, listener, connector, sslProfile, log, router.config.address,
router.config.linkRoute, router.config.autoLink, router.config.exchange, router.config.binding,
policy, vhost. Each entity is a plain dict of
canonical attribute names with ``name``, ``identity`` and ``type`` (long name) filled.

Validation uses the one schema (``common.schema``): names normalised, values converted, required
attributes checked, defaults filled, identities given as the configuration parser gives them.
Must not import zmq, proton, router_io or router_core.core.
"""
from __future__ import annotations

from typing import Any, Optional

from agent.management.protocol import BAD_REQUEST, INTERNAL_ERROR, ManagementError
from common.schema import (ROUTER_CONFIG_TYPES, EntityType, Schema, SchemaError, address_problem,
                           auto_link_phase, auto_link_problem, listen_addresses_clash, load_schema,
                           reference_problem)
from common.exchanges import METHOD_CODES, binding_problem, exchange_problem
from common.linkroutes import create_problem as link_route_problem
from common import failover
from common import msglog
from common.policy import policy_problem
from common.security import auth_plugin_problem, connection_problem, ssl_profile_problem

# spec key -> short type name, in the order the configuration applies them
SPEC_KEYS = (("sslProfiles", "sslProfile"), ("authServicePlugins", "authServicePlugin"),
             ("addresses", "router.config.address"),
             ("linkRoutes", "router.config.linkRoute"), ("autoLinks", "router.config.autoLink"),
             ("exchanges", "router.config.exchange"), ("bindings", "router.config.binding"),
             ("vhosts", "vhost"), ("connectors", "connector"), ("listeners", "listener"))
_EXCHANGE = "router.config.exchange"
_BINDING = "router.config.binding"
_DEFAULT_LOG_ENABLE = "info+"
# Management CREATE must name these explicitly (a file may rely on the defaults): a listener or
# connector whose port nobody chose is a mistake, not a request for port 5672.
_CREATE_REQUIRES = {"listener": ("port",), "connector": ("port",)}


class ConfigStore:
    """Configuration entities by long type name, in application order."""

    def __init__(self, spec: dict, schema: Optional[Schema] = None) -> None:
        self.schema = schema or load_schema()
        self.mode = spec.get("router", {}).get("mode", "standalone")
        self.entities: dict[str, list[dict]] = {}
        self._serial: dict[str, int] = {}
        self._config_serial = 0  # the last identity next_config_identity gave
        router = dict(spec.get("router") or {})
        router.setdefault("id", spec.get("router_id", "Router"))
        router.setdefault("identity", f"router/{router['id']}")
        router.setdefault("name", router["identity"])
        self._put("router", [router])
        self._put("log", self._logs(spec.get("logs", [])))
        policy = spec.get("policy")
        self._put("policy", [policy] if policy else [])
        for key, short in SPEC_KEYS:
            self._put(short, spec.get(key) or [])
        # the router.config entities of the configuration file, in order: 1.19's Python agent
        # holds these (and not those created by management, which only its core holds)
        self.from_file = {self.schema.long_name(short): [str(e.get("identity"))
                                                         for e in spec.get(key) or []]
                          for key, short in SPEC_KEYS if short in ROUTER_CONFIG_TYPES}

    # --- lookup -------------------------------------------------------------------------------
    def _put(self, short: str, entities: list) -> None:
        etype = self.schema.entity_type(short)
        self.entities[etype.long_name] = [{**e, "type": etype.long_name} for e in entities]
        self._serial[etype.long_name] = len(entities)

    def _logs(self, configured: list) -> list[dict]:
        by_module = {str(e.get("module", "DEFAULT")).upper(): e for e in configured}
        modules = self.schema.entity_type("log").attributes["module"].type
        out = []
        for module in modules:
            entity = dict(by_module.get(module) or {"module": module})
            if "enable" not in entity or (module == "DEFAULT" and entity["enable"] == "default"):
                entity["enable"] = _DEFAULT_LOG_ENABLE if module == "DEFAULT" else "default"
            entity.setdefault("identity", f"log/{module}")
            entity.setdefault("name", entity["identity"])
            out.append(entity)
        return out

    def has_type(self, long_name: str) -> bool:
        return long_name in self.entities

    def of_type(self, long_name: str) -> list[dict]:
        return self.entities.get(long_name, [])

    def all_entities(self) -> list[dict]:
        return [e for entities in self.entities.values() for e in entities]

    # --- changes (the agent calls these only after every process applied the change) ----------
    def add(self, entity: dict) -> None:
        self.entities.setdefault(entity["type"], []).append(entity)

    def remove(self, entity: dict) -> None:
        entities = self.entities.get(entity["type"], [])
        self.entities[entity["type"]] = [e for e in entities if e["identity"] != entity["identity"]]
        if entity["type"].endswith(_EXCHANGE):  # its bindings go with it (the core's do too)
            long = self.schema.long_name(_BINDING)
            self.entities[long] = [b for b in self.entities.get(long, [])
                                   if b.get("exchangeName") != entity.get("name")]

    def replace(self, entity: dict) -> None:
        entities = self.entities.get(entity["type"], [])
        self.entities[entity["type"]] = [entity if e["identity"] == entity["identity"] else e
                                         for e in entities]

    # --- validation ---------------------------------------------------------------------------
    def validate_create(self, etype: EntityType, attributes: dict,
                        name: Optional[str] = None) -> dict:
        """A complete new entity from CREATE attributes; ManagementError(400) if invalid."""
        short = etype.short_name
        if short in (_EXCHANGE, _BINDING):
            return self._create_exchange_entity(etype, attributes, name)
        if short in ("listener", "connector") and self.mode == "standalone":
            # 1.19 refuses this before looking at any other attribute (a bad port included)
            role = attributes.get("role")
            if isinstance(role, str) and role.strip() in ("inter-router", "edge"):
                raise ManagementError(BAD_REQUEST, "role='standalone' not allowed to connect to "
                                                   "or accept connections from other routers.")
        if short == "router.config.linkRoute":
            self._check_link_route(etype, attributes, name)
        if short == "router.config.autoLink":  # 1.19 looks at the name first
            given = name if name is not None else attributes.get("name")
            if given is not None and given in self._names(short):
                raise ManagementError(BAD_REQUEST, "Name conflicts with an existing entity")
        if short == "router.config.address" and "fallback" in attributes:
            # 1.19's core takes its own column name, ``fallback``, in a CREATE
            attributes = {("enableFallback" if k == "fallback" else k): v
                          for k, v in attributes.items()}
        values = self._convert(etype, attributes, for_update=False)
        if short == "router.config.autoLink":
            problem = auto_link_problem(values)
            if problem:
                raise ManagementError(BAD_REQUEST, problem)
        if name is not None:
            if "name" in values and values["name"] != name:
                raise ManagementError(BAD_REQUEST, f"conflicting names '{name}' and "
                                                  f"'{values['name']}'")
            values["name"] = name
        short = etype.short_name
        if short == "vhost" and "hostname" not in values and "name" in values:
            values["hostname"] = values["name"]
        if short == "router.config.address":
            problem = address_problem(values)
            if problem:
                raise ManagementError(BAD_REQUEST, problem)
        for attr_name, attr in etype.attributes.items():
            if attr.required and attr_name != "type" and attr_name not in values:
                raise ManagementError(BAD_REQUEST,
                                      f"missing required attribute '{attr_name}' for {short}")
        for attr_name in _CREATE_REQUIRES.get(short, ()):
            if attr_name not in values:
                raise ManagementError(BAD_REQUEST,
                                      f"missing required attribute '{attr_name}' for {short}")
        entity = {**etype.defaults(), **values}
        if short == "router.config.autoLink":
            entity["phase"] = auto_link_phase(entity)
        problem = reference_problem(etype, entity, self._names)
        if problem:
            raise ManagementError(BAD_REQUEST, problem)
        if short == "vhost":  # vhost policy the router enforces, or 400 (common/policy.py)
            self.check_vhost(entity)
        # TLS/SASL settings the router could not enforce are refused (common/security.py)
        if short == "sslProfile":
            problem = ssl_profile_problem(entity)
        elif short == "authServicePlugin":
            problem = auth_plugin_problem(entity)
        else:
            problem = (connection_problem(short, entity, self.ssl_profile)
                       or msglog.entity_problem(short, entity))
        if problem:
            raise ManagementError(BAD_REQUEST, problem)
        if short in ("listener", "connector"):
            role = entity.get("role", "normal")
            if role == "inter-router" and self.mode != "interior":
                raise ManagementError(BAD_REQUEST, f"{short} with role 'inter-router' is not "
                                                   f"allowed in {self.mode} mode")
            if role == "edge" and self.mode == "standalone":
                raise ManagementError(BAD_REQUEST, f"{short} with role 'edge' is not allowed in "
                                                   "standalone mode")
        if short == "listener":
            problem = failover.listener_problem(entity)
            if problem:  # 1.19's answer (its listener code fails: 500)
                raise ManagementError(INTERNAL_ERROR, "CError: " + problem)
            for other in self.of_type(etype.long_name):
                if listen_addresses_clash((other.get("host"), other.get("port")),
                                          (entity.get("host"), entity.get("port"))):
                    raise ManagementError(BAD_REQUEST, f"a listener on {entity.get('host') or '*'}"
                                                       f":{entity.get('port')} would use the "
                                                       "address of listener "
                                                       f"'{other['name']}' ({other.get('host') or '*'}"
                                                       f":{other.get('port')})")
        entity["identity"] = self._new_identity(etype, entity)
        if short in ROUTER_CONFIG_TYPES:  # 1.19's core keeps these nameless: "name": null
            entity.setdefault("name", None)
        else:
            entity.setdefault("name", entity["identity"])
        entity["type"] = etype.long_name
        if entity["name"] is not None and any(e.get("name") == entity["name"]
                                              for e in self.of_type(etype.long_name)):
            raise ManagementError(BAD_REQUEST, "Name conflicts with an existing entity")
        return entity

    def _check_link_route(self, etype: EntityType, attributes: dict,
                          name: Optional[str]) -> None:
        """1.19's checks of a linkRoute CREATE, in its order and with its texts, on the
        request's own values (common/linkroutes.py)."""
        name = name if name is not None else attributes.get("name")
        if name is not None and any(e.get("name") == name
                                    for e in self.of_type(etype.long_name)):
            raise ManagementError(BAD_REQUEST, "Name conflicts with an existing entity")
        given = {etype.canonical_attribute(str(k)) or str(k): v for k, v in attributes.items()
                 if k != "direction"}
        if "direction" in attributes:  # the new name wins over the deprecated 'dir'
            given["direction"] = attributes["direction"]
        problem = link_route_problem(given)
        if problem:
            raise ManagementError(BAD_REQUEST, problem)

    @staticmethod
    def vhost_warnings(entity: dict) -> list:
        """The ("POLICY", text) warnings 1.19 logs for a (valid) vhost's ignored options."""
        warnings: list = []
        policy_problem([dict(entity)], warnings)
        return warnings

    def _create_exchange_entity(self, etype: EntityType, attributes: dict,
                                name: Optional[str]) -> dict:
        """An exchange or binding CREATE, with the texts of 1.19's core (common/exchanges.py);
        identities ``exchange/N``/``binding/N`` as 1.19's agent gives them, the name the
        identity when none is given."""
        short = etype.short_name
        method = attributes.get("matchMethod")
        if short == _EXCHANGE and method is not None and method not in METHOD_CODES:
            raise ManagementError(BAD_REQUEST,
                                  "Exchange matchMethod must be either 'amqp' or 'mqtt'")
        values = self._convert(etype, attributes, for_update=False)
        if name is not None:
            if "name" in values and values["name"] != name:
                raise ManagementError(BAD_REQUEST, f"conflicting names '{name}' and "
                                                  f"'{values['name']}'")
            values["name"] = name
        entity = {**etype.defaults(), **values}
        exchanges = self.of_type(self.schema.long_name(_EXCHANGE))
        if short == _EXCHANGE:
            # 1.19's core names a management-created exchange by the request alone (the
            # configuration file's get one from its agent)
            problem = "exchange requires a unique name" if entity.get("name") is None \
                else exchange_problem(entity, exchanges)
        else:
            problem = binding_problem(entity, exchanges,
                                      self.of_type(self.schema.long_name(_BINDING)))
        if problem:
            raise ManagementError(BAD_REQUEST, problem)
        kind = short[len("router.config."):]
        taken = {str(e.get("identity")) for e in self.of_type(etype.long_name)}
        serial = self._serial.get(etype.long_name, 0)
        while f"{kind}/{serial}" in taken:
            serial += 1
        self._serial[etype.long_name] = serial + 1
        entity["identity"] = f"{kind}/{serial}"
        entity.setdefault("name", entity["identity"])
        entity["type"] = etype.long_name
        if any(e.get("name") == entity["name"] for e in self.of_type(etype.long_name)):
            raise ManagementError(BAD_REQUEST, "duplicate exchange name" if short == _EXCHANGE
                                  else "Duplicate next hop name")
        return entity

    def check_vhost(self, entity: dict, replacing: Optional[dict] = None) -> None:
        """ManagementError if the vhost conflicts with another vhost's name (400), is invalid,
        conflicts with another's aliases or asks for something this router does not enforce
        (500, as 1.19's policy code fails it)."""
        long = self.schema.long_name("vhost")
        others = [dict(e) for e in self.of_type(long)
                  if replacing is None or e.get("identity") != replacing.get("identity")]
        if replacing is None and any(o.get("hostname") == entity.get("hostname")
                                     for o in others):
            raise ManagementError(BAD_REQUEST, f"vhost '{entity.get('hostname')}' exists")
        policy = self.of_type(self.schema.long_name("policy"))
        patterns = bool(policy and policy[0].get("enableVhostNamePatterns"))
        found = policy_problem(others + [dict(entity)], name_patterns=patterns)
        if found is not None:  # 1.19: its policy code's PolicyError, a 500
            text = found[1]  # worded as 1.19's: "Policy 'H' is invalid: ...", "Policy for ..."
            if not text.startswith("Policy "):
                text = f"Policy '{entity.get('hostname')}' is invalid: {text}"
            raise ManagementError(INTERNAL_ERROR, f"PolicyError: {text}")

    def validate_update(self, etype: EntityType, entity: dict, attributes: dict) -> dict:
        """The changed attributes of an UPDATE (canonical names, converted values)."""
        changes = self._convert(etype, attributes, for_update=True)
        for key in ("name", "identity"):
            if key in changes and changes[key] != entity.get(key):
                raise ManagementError(BAD_REQUEST, f"attribute '{key}' cannot be updated")
            changes.pop(key, None)
        return changes

    def _convert(self, etype: EntityType, attributes: dict, for_update: bool) -> dict:
        values: dict[str, Any] = {}
        for raw_name, raw_value in attributes.items():
            canonical = etype.canonical_attribute(str(raw_name))
            if canonical == "type":
                if raw_value is not None and self.schema.find(str(raw_value)) is not etype:
                    raise ManagementError(BAD_REQUEST, f"type '{raw_value}' does not match "
                                                       f"'{etype.long_name}'")
                continue
            if canonical is None:
                raise ManagementError(BAD_REQUEST, f"Unknown attribute '{raw_name}' for "
                                                   f"{etype.short_name}")
            if canonical == "identity":
                if for_update:
                    values["identity"] = raw_value
                    continue
                raise ManagementError(BAD_REQUEST, "attribute 'identity' is assigned by the "
                                                   "router and cannot be set")
            attr = etype.attributes[canonical]
            if canonical != "name" and not (attr.update if for_update else attr.create):
                verb = "updated" if for_update else "set"
                raise ManagementError(BAD_REQUEST, f"attribute '{canonical}' of "
                                                   f"{etype.short_name} cannot be {verb}")
            if raw_value is None:
                continue
            try:
                values[canonical] = attr.convert(raw_value)
            except SchemaError as exc:
                raise ManagementError(BAD_REQUEST, f"bad value for attribute '{canonical}' "
                                                   f"of {etype.short_name}: {exc}") from None
        return values

    def ssl_profile(self, name: str) -> Optional[dict]:
        return next((e for e in self.of_type(self.schema.long_name("sslProfile"))
                     if e.get("name") == name), None)

    def users_of_ssl_profile(self, name: str) -> list[dict]:
        """Listeners, connectors and authServicePlugins that name sslProfile ``name``."""
        return [e for short in ("listener", "connector", "authServicePlugin")
                for e in self.of_type(self.schema.long_name(short))
                if e.get("sslProfile") == name]

    def users_of_auth_plugin(self, name: str) -> list[dict]:
        """Listeners whose saslPlugin is authServicePlugin ``name``."""
        return [e for e in self.of_type(self.schema.long_name("listener"))
                if e.get("saslPlugin") == name]

    def _names(self, short: str) -> set:
        return {e.get("name") for e in self.of_type(self.schema.long_name(short))}

    def next_config_identity(self, taken: tuple = ()) -> str:
        """The next identity of a router.config address, linkRoute or autoLink or of a
        connection-scoped link route: one counter for all of them, as 1.19's core numbers
        them (the configuration file's took 1, 2, ...: supervisor/config.py). ``taken``:
        identities in use elsewhere (the core's connection-scoped routes)."""
        used = [self._config_serial] + [
            int(e["identity"]) for short in ROUTER_CONFIG_TYPES
            for e in self.of_type(self.schema.long_name(short))
            if str(e.get("identity", "")).isdigit()] + [int(i) for i in taken if str(i).isdigit()]
        self._config_serial = max(used) + 1
        return str(self._config_serial)

    def _new_identity(self, etype: EntityType, entity: dict) -> str:
        short = etype.short_name
        if short in ROUTER_CONFIG_TYPES:
            return self.next_config_identity()
        if short in ("listener", "connector"):  # 1.19: HOST:PORT, then :NAME if named
            base = f"{short}/{entity.get('host')}:{entity.get('port')}"
            if entity.get("name"):
                base = f"{base}:{entity['name']}"
        elif short == "vhost":
            base = f"{short}/{entity.get('hostname')}"
        else:  # numbered from 1 (dummy, 1.19's test entity: from 0, as 1.19 numbers it)
            self._serial[etype.long_name] = self._serial.get(etype.long_name, 0) + 1
            base = f"{short}/{self._serial[etype.long_name] - (short == 'dummy')}"
        taken = {e["identity"] for e in self.all_entities()}
        identity, n = base, 1
        while identity in taken:
            n += 1
            identity = f"{base}:{n}"
        return identity
