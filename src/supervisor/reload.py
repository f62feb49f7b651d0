"""Configuration reload on SIGHUP, the supervisor's half: what changed in the file.

Two halves, one per process (the agent's, applying the changes, is agent/reload.py; the channel
between them and its two messages are common/reloadmsg.py, so neither imports the other):

* **Supervisor** (:func:`plan_reload`, :func:`apply_changes`): re-read and validate the whole file
  (the same ``load_config`` as at start-up; a bad file changes nothing), then diff the file as it
  was last applied against the file now. The diff is file against file: entities created or
  deleted at run time through management are left alone. What can change at run time:

  =========================  ========================  =====================================
  section                    matched by                change
  =========================  ========================  =====================================
  listener, connector        name (default host:port)  added, removed, or removed + re-added
  address, linkRoute         name if given, else its   added, removed
                             attributes
  autoLink                   name                      added, removed, or removed + re-added
  exchange, binding          name if given, else its   added, removed, or removed + re-added
                             attributes                (a re-added exchange's bindings too)
  log                        module                    UPDATE of the changed attributes
  router, sslProfile,        -                         a warning: restart to apply
  vhost, policy,
  authServicePlugin
  =========================  ========================  =====================================

  The changes go to the agent as ONE request over a dedicated ZeroMQ PAIR socket
  (``reload_endpoint``, bound by the supervisor, connected by the agent), and the agent
  answers on it which changes it applied. The two messages are plain JSON
  (common/reloadmsg.py): ``{"kind": "reload", "id", "changes"}`` and ``{"kind": "result",
  "id", "ok", "applied": [indices], "detail"}``. They are kept out of ``common.ipc``: they
  never touch the core, and only two processes ever speak them.

* **Agent** (agent/reload.py, ``ReloadApplier``): each change becomes a management request run
  by the management agent exactly like one from ``qdmanage``.

Must not import zmq (the callers own the sockets), proton, router_io or agent.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

# the channel's endpoint and messages, used by the supervisor as supervisor.reload.X
from common.reloadmsg import decode_message, encode_message, reload_endpoint  # noqa: F401
from common.schema import load_schema

# short type -> spec key, in the order changes are applied (logs first, listeners last, as the
# configuration file is applied at start-up)
RUNTIME_TYPES = (("log", "logs"), ("router.config.address", "addresses"),
                 ("router.config.linkRoute", "linkRoutes"),
                 ("router.config.autoLink", "autoLinks"),
                 ("router.config.exchange", "exchanges"), ("router.config.binding", "bindings"),
                 ("connector", "connectors"),
                 ("listener", "listeners"))
SPEC_KEY = dict(RUNTIME_TYPES)
# spec key -> what an operator calls it; changes there need a restart
RESTART_ONLY = (("router", "router"), ("sslProfiles", "sslProfile"), ("vhosts", "vhost"),
                ("policy", "policy"), ("authServicePlugins", "authServicePlugin"))
_LOG_ATTRIBUTES = ("enable", "includeTimestamp", "includeSource", "outputFile")


@dataclass
class Plan:
    changes: list = field(default_factory=list)   # the "changes" of a reload message
    warnings: list = field(default_factory=list)  # not applied: needs a restart

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for change in self.changes:
            key = f"{change['op']} {change['type'].rsplit('.', 1)[-1]}"
            counts[key] = counts.get(key, 0) + 1
        return ", ".join(f"{n} x {what}" for what, n in counts.items()) or "no changes"


# --- supervisor side ----------------------------------------------------------------------------
def _without(entity: dict, *keys: str) -> dict:
    return {k: v for k, v in entity.items() if k not in keys}


def _address_key(entity: dict, short: str = "router.config.address") -> str:
    name = str(entity.get("name"))
    if name.startswith(short[len("router.config."):] + "/"):  # address/0, linkRoute/2 (1.19)
        # unnamed: its generated name depends on its position in the file, so match on content
        content = _without(_creatable(short, entity), "name")
        return "attrs:" + json.dumps(content, sort_keys=True, default=str)
    return "name:" + name


def _creatable(short: str, entity: dict) -> dict:
    """The attributes management CREATE accepts (no identity, nothing read-only)."""
    etype = load_schema().entity_type(short)
    out = {}
    for name, value in entity.items():
        attr = etype.attributes.get(name)
        if name == "name" or (attr is not None and attr.create and name != "identity"
                              and name != "type" and value is not None):
            out[name] = value
    return out


def _unique_name(name: str, taken: set) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}:{n}"
    return candidate


def _log_defaults(module: str) -> dict:
    return {"module": module, "enable": "info+" if module == "DEFAULT" else "default"}


def plan_reload(old: dict, new: dict) -> Plan:
    """The changes that turn the running spec ``old`` into the file's spec ``new``."""
    plan = Plan()
    for key, what in RESTART_ONLY:
        if old.get(key) != new.get(key):
            if key == "router":
                changed = sorted(k for k in set(old["router"]) | set(new["router"])
                                 if old["router"].get(k) != new["router"].get(k))
                what = f"router ({', '.join(changed)})"
            plan.warnings.append(f"changes to {what} need a restart; not applied")
    # logs: by module
    old_logs = {str(e.get("module")).upper(): e for e in old.get("logs", [])}
    new_logs = {str(e.get("module")).upper(): e for e in new.get("logs", [])}
    for module in list(new_logs) + [m for m in old_logs if m not in new_logs]:
        before = old_logs.get(module) or _log_defaults(module)
        after = new_logs.get(module) or _log_defaults(module)
        changed = {a: after.get(a) for a in _LOG_ATTRIBUTES
                   if after.get(a) != before.get(a) and after.get(a) is not None}
        if changed:
            plan.changes.append({"op": "update", "type": "log", "name": f"log/{module}",
                                 "attributes": {"module": module, **changed}})
    # addresses, then link routes: deletions, then creations
    for short in ("router.config.address", "router.config.linkRoute"):
        key = SPEC_KEY[short]
        old_addrs = {_address_key(e, short): e for e in old.get(key, [])}
        new_addrs = {_address_key(e, short): e for e in new.get(key, [])}
        kept = {str(e["name"]) for k, e in old_addrs.items() if k in new_addrs}
        for k, entity in old_addrs.items():
            if k not in new_addrs:
                plan.changes.append({"op": "delete", "type": short,
                                     "name": entity["name"], "attributes": {}})
        for k, entity in new_addrs.items():
            if k in old_addrs:
                continue
            name = _unique_name(str(entity["name"]), kept)
            kept.add(name)
            plan.changes.append({"op": "create", "type": short, "name": name,
                                 "attributes": _creatable(short, {**entity, "name": name})})
    _plan_exchanges(plan, old, new)
    # auto-links, connectors and listeners: by name; a changed one is removed and added again
    for short in ("router.config.autoLink", "connector", "listener"):
        key = SPEC_KEY[short]
        before = {str(e["name"]): e for e in old.get(key, [])}
        after = {str(e["name"]): e for e in new.get(key, [])}
        for name, entity in before.items():
            if name not in after or after[name] != entity:
                plan.changes.append({"op": "delete", "type": short, "name": name,
                                     "attributes": {}})
        for name, entity in after.items():
            if name not in before or before[name] != entity:
                plan.changes.append({"op": "create", "type": short, "name": name,
                                     "attributes": _creatable(short, entity)})
    return plan


def _plan_exchanges(plan: Plan, old: dict, new: dict) -> None:
    """Exchanges and bindings: bindings removed first (those of an exchange that goes or
    changes too: deleting an exchange deletes its bindings), then exchanges removed, then
    exchanges added, then bindings added (again those of a re-added exchange)."""
    ex_short, b_short = "router.config.exchange", "router.config.binding"
    before = {_address_key(e, ex_short): e for e in old.get("exchanges", [])}
    after = {_address_key(e, ex_short): e for e in new.get("exchanges", [])}
    gone = {str(e.get("name")) for k, e in before.items()
            if k not in after or _without(after[k], "identity") != _without(e, "identity")}
    b_before = {_address_key(e, b_short): e for e in old.get("bindings", [])}
    b_after = {_address_key(e, b_short): e for e in new.get("bindings", [])}
    def redo(k: str, entity: dict) -> bool:  # gone, changed, or its exchange goes
        return (k not in b_after or str(entity.get("exchangeName")) in gone
                or _without(b_after[k], "identity") != _without(entity, "identity"))

    redone = {k for k, e in b_before.items() if redo(k, e)}
    for k, entity in b_before.items():
        if k in redone:
            plan.changes.append({"op": "delete", "type": b_short, "name": entity["name"],
                                 "attributes": {}})
    for k, entity in before.items():
        if str(entity.get("name")) in gone:
            plan.changes.append({"op": "delete", "type": ex_short, "name": entity["name"],
                                 "attributes": {}})
    for k, entity in after.items():
        if k not in before or str(entity.get("name")) in gone:
            plan.changes.append({"op": "create", "type": ex_short, "name": entity["name"],
                                 "attributes": _creatable(ex_short, entity)})
    kept = {str(e["name"]) for k, e in b_before.items() if k not in redone}
    for k, entity in b_after.items():
        if k in b_before and k not in redone:
            continue
        name = _unique_name(str(entity["name"]), kept)
        kept.add(name)
        plan.changes.append({"op": "create", "type": b_short, "name": name,
                             "attributes": _creatable(b_short, {**entity, "name": name})})


def apply_changes(spec: dict, changes: list) -> dict:
    """The spec after ``changes`` (those the agent applied): the new 'last applied' file state."""
    out = json.loads(json.dumps(spec))
    for change in changes:
        key = SPEC_KEY[change["type"]]
        entities = out.setdefault(key, [])
        if change["op"] == "delete":
            out[key] = [e for e in entities if str(e.get("name")) != str(change["name"])]
        elif change["op"] == "create":
            entities.append(dict(change["attributes"]))
        elif change["op"] == "update":  # log, by module
            module = change["attributes"]["module"]
            for entity in entities:
                if str(entity.get("module")).upper() == module:
                    entity.update(change["attributes"])
                    break
            else:
                entities.append(dict(change["attributes"]))
    return out
