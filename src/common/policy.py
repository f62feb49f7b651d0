"""Vhost policy as Qpid Dispatch 1.19 applies it, sans I/O: which vhost and user group a
connection gets, and what that group allows.

Owns:

* compiling ``vhost`` entities (and policyDir files) into :class:`Vhost` objects, with 1.19's
  validation messages (``PolicyError``): used at config time, at management CREATE/UPDATE and by
  the workers;
* :class:`PolicyDb`: the vhosts of a router with their aliases, ``defaultVhost`` and (with
  ``enableVhostNamePatterns``) hostname patterns; :meth:`PolicyDb.lookup_user` answers an AMQP
  open with the group settings or the reason for a denial;
* :class:`GroupSettings`: the per-connection limits and the link/message checks (sources,
  targets, ``${user}`` substitution, trailing ``*`` wildcards, sourcePattern/targetPattern
  address patterns, anonymous senders, dynamic sources, waypoint/fallback capabilities).

Connection *counts* (vhost maxConnections, per user, per host, the global maxConnections) are
router-wide and connections are spread over several worker processes, so they are counted in one
place, the core (``router_core/policycount.py``): the worker hands the limits over with the
connection's ConnOpened.

Pure and deterministic apart from resolving host names in ``remoteHosts`` (as 1.19 does); must
not import proton, zmq or sockets other than for that lookup.

Why one module of over 500 lines (issue #10): it has one concern, 1.19's vhost policy, and its
parts are not used apart: the name rules (``compile_names``/``approve_*``, ``HostRange``) serve
GroupSettings' checks, GroupSettings live inside a Vhost, a Vhost is used through PolicyDb, and
validation, compilation and lookup must agree on the same attribute lists and messages. Splitting
it would spread that one table of rules over files that always change together; it is kept
whole, and the per-connection counting, the one truly separate part, already lives in the core
(``router_core/policycount.py``).
"""
from __future__ import annotations

import copy
import ipaddress
import json
import os
import socket
from typing import Any, Iterable, Optional

from common.addrmatch import match_order, normalize_words, split_words

USER_TOKEN = "${user}"
DEFAULT_GROUP = "$default"
CONNECTOR_GROUP = "$connector"
UNLIMITED_LINKS = 2147483647
WAYPOINT_CAPABILITY = "qd.waypoint"
FALLBACK_CAPABILITY = "qd.fallback"
# Delimiters a ${user} substitution must sit next to in a pattern (1.19's address token separators)
_TOKEN_SEPS = "./"

CONNECTION_DISALLOWED = "connection disallowed by local policy"
SESSION_DISALLOWED = "session disallowed by local policy"
LINK_DISALLOWED = "link disallowed by local policy"
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"

VHOST_ATTRIBUTES = ("hostname", "maxConnections", "maxMessageSize", "maxConnectionsPerUser",
                    "maxConnectionsPerHost", "allowUnknownUser", "groups", "aliases")
GROUP_ATTRIBUTES = ("users", "remoteHosts", "maxConnectionsPerUser", "maxConnectionsPerHost",
                    "maxFrameSize", "maxMessageSize", "maxSessionWindow", "maxSessions",
                    "maxSenders", "maxReceivers", "allowDynamicSource", "allowAnonymousSender",
                    "allowUserIdProxy", "allowWaypointLinks", "allowFallbackLinks",
                    "allowDynamicLinkRoutes", "allowAdminStatusUpdate", "sources", "targets",
                    "sourcePattern", "targetPattern")
_GROUP_COUNTS = ("maxConnectionsPerUser", "maxConnectionsPerHost")
_GROUP_SIZES = ("maxFrameSize", "maxMessageSize", "maxSessionWindow", "maxSessions",
                "maxSenders", "maxReceivers")
_GROUP_BOOLS = {"allowDynamicSource": False, "allowAnonymousSender": False,
                "allowUserIdProxy": False, "allowWaypointLinks": True,
                "allowFallbackLinks": True, "allowDynamicLinkRoutes": True,
                "allowAdminStatusUpdate": True}


class PolicyError(ValueError):
    """A vhost definition 1.19 would refuse (the message is 1.19's where it has one)."""


def _check_number(value: Any, what: str, top: Optional[int]) -> None:
    """A vhost/group count: a whole number from 0 (to ``top``), in 1.19's words if not."""
    if value is None:
        return
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PolicyError(f"{what} has error 'Value '{value}' does not resolve to an "
                          "integer.'.") from None
    if number < 0:
        raise PolicyError(f"{what} has error 'Value '{value}' is below minimum '0'.'.")
    if top is not None and number > top:
        raise PolicyError(f"{what} has error 'Value '{value}' is above maximum '{top}'.'.")


def _group_users(value: Any) -> list:
    """A group's ``users`` as 1.19 maps them: comma-separated, blanks trimmed, and an empty
    item (a group without users has one) kept as the user ''. So two groups without users
    clash on user '' and the vhost is refused, as in 1.19."""
    if value is None:
        return [""]
    items = list(value) if isinstance(value, (list, tuple)) else str(value).split(",")
    return list(dict.fromkeys(str(v).strip(" ") for v in items))


def split_list(value: Any) -> list:
    """A CSV string (or a list) as a list of stripped, non-empty items."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        items = [v.strip() for v in str(value).split(",")]
    return [v for v in items if v]


# --- remote hosts ------------------------------------------------------------------------------
def _ip(text: str) -> Any:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(text, 0, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except OSError as exc:
        raise PolicyError(f"HostStruct: '{text}' failed to resolve: '{exc}'") from None
    addrs = {info[4][0] for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)}
    if len(addrs) != 1:
        raise PolicyError(f"HostStruct: '{text}' resolves to multiple IP addresses" if addrs
                          else f"HostStruct: '{text}' did not resolve to an IP address")
    return ipaddress.ip_address(addrs.pop())


class HostRange:
    """One ``remoteHosts`` item: ``*``, an address (or host name) or ``low-high``."""

    __slots__ = ("text", "wildcard", "low", "high")

    def __init__(self, spec: str) -> None:
        self.text = spec.strip()
        self.wildcard = self.text == "*"
        self.low = self.high = None
        if self.wildcard:
            return
        parts = [p.strip() for p in self.text.split("-")] if "-" in self.text else [self.text]
        if len(parts) not in (1, 2) or not all(parts):
            raise PolicyError("hostspec must contain 1 or 2 host names")
        self.low = _ip(parts[0])
        self.high = _ip(parts[1]) if len(parts) == 2 else self.low
        if self.low.version != self.high.version:
            raise PolicyError("mixed IPv4 and IPv6 host specs in range not allowed")
        if self.low > self.high:
            raise PolicyError("host specs in range must have lower numeric address first")

    def matches(self, host: str) -> bool:
        if self.wildcard:
            return True
        try:
            addr = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None \
                and self.low.version == 4:
            addr = addr.ipv4_mapped
        return addr.version == self.low.version and self.low <= addr <= self.high


def remote_ip(host: str) -> str:
    """The numeric address of a peer given as ``ip:port`` / ``[v6]:port``."""
    if host.startswith("["):
        return host[1:host.find("]")]
    if host.count(":") == 1:
        return host.rsplit(":", 1)[0]
    return host


# --- link names --------------------------------------------------------------------------------
def compile_names(vhost: str, group: str, key: str, value: Any) -> list:
    """``sources``/``targets``/``sourcePattern``/``targetPattern`` as (kind, s1, s2) rules:
    kind ``a`` literal, ``p`` ${user} prefix, ``s`` suffix, ``e`` embedded, ``*`` anything."""
    pattern = key.endswith("Pattern")
    rules = []
    for item in dict.fromkeys(split_list(value)):
        count = item.count(USER_TOKEN)
        if count > 1:
            raise PolicyError(f"Policy vhost '{vhost}' user group '{group}' policy key '{key}' "
                              f"item '{item}' contains multiple user subtitution tokens")
        if count == 1:
            before, after = item.split(USER_TOKEN)
            if not before:
                rules.append(("p", "", after))
            elif not after:
                rules.append(("s", before, ""))
            else:
                if pattern:
                    raise PolicyError(
                        f"Policy vhost '{vhost}' user group '{group}' policy key '{key}' item "
                        f"'{item}' may contain match pattern '{USER_TOKEN}' as a prefix or a "
                        "suffix only.")
                rules.append(("e", before, after))
        elif item == "*":
            rules.append(("*", "", ""))
        else:
            rules.append(("a", item, ""))
    return rules


def approve_name(user: str, rules: list, proposed: str) -> bool:
    """A link address against ``sources``/``targets``: an exact name (after ${user}
    substitution) or, for a rule ending in ``*``, a prefix."""
    if not proposed:
        return False
    for kind, s1, s2 in rules:
        if kind == "*":
            return True
        if kind == "a":
            name = s1
        elif kind == "p":
            name = user + s2
        elif kind == "s":
            name = s1 + user
        else:
            name = s1 + user + s2
        if name.endswith("*"):
            if proposed.startswith(name[:-1]):
                return True
        elif proposed == name:
            return True
    return False


def approve_pattern(user: str, rules: list, proposed: str) -> bool:
    """A link address against ``sourcePattern``/``targetPattern``: address patterns (``*`` one
    word, ``#`` any number, words split at ``.`` and ``/``); ``${user}`` as the first or last
    word matches the connection's user."""
    if not proposed:
        return False
    words = split_words(proposed)
    for kind, s1, s2 in rules:
        if kind == "*":
            return True
        if kind == "a":
            candidate, pat = words, s1
        elif kind == "p":
            if not proposed.startswith(user) or (len(proposed) > len(user)
                                                 and proposed[len(user)] not in _TOKEN_SEPS):
                continue
            candidate, pat = split_words(USER_TOKEN + proposed[len(user):]), USER_TOKEN + s2
        elif kind == "s":
            cut = len(proposed) - len(user)
            if cut < 1 or not proposed.endswith(user) or proposed[cut - 1] not in _TOKEN_SEPS:
                continue
            candidate, pat = split_words(proposed[:cut] + USER_TOKEN), s1 + USER_TOKEN
        else:
            continue
        if match_order(candidate, normalize_words(split_words(pat))) is not None:
            return True
    return False


def _has_capability(caps: Iterable[str], name: str, prefix: bool) -> bool:
    return any(c.startswith(name) if prefix else c == name for c in caps)


class GroupSettings:
    """The settings a connection gets from its vhost user group (1.19's defaults filled)."""

    def __init__(self, vhost: str, name: str, attrs: dict) -> None:
        self.vhost = vhost
        self.name = name
        # 1.19 logs an option it does not use at POLICY warning and goes on (its multi-tenancy
        # examples put maxConnections in groups); the loader's caller logs these
        self.warnings = [f"Policy vhost '{vhost}' user group '{name}' option '{k}' is ignored."
                         for k in attrs if k not in GROUP_ATTRIBUTES]
        self.users = _group_users(attrs.get("users"))
        self.remote_hosts = []
        for spec in split_list(attrs.get("remoteHosts")):
            try:
                self.remote_hosts.append(HostRange(spec))
            except PolicyError as exc:
                raise PolicyError(f"Policy vhost '{vhost}' user group '{name}' option "
                                  f"'remoteHosts' connectionOption '{spec}' failed to "
                                  f"translate: '{exc}'.") from None
        for key in _GROUP_COUNTS + _GROUP_SIZES:
            _check_number(attrs.get(key), f"Policy vhost '{vhost}' user group '{name}' option "
                                          f"'{key}'", 65535 if key in _GROUP_COUNTS else None)
        self.max_conn_user = _opt(attrs.get("maxConnectionsPerUser"))
        self.max_conn_host = _opt(attrs.get("maxConnectionsPerHost"))
        self.max_frame = int(attrs.get("maxFrameSize") or 0)
        self.max_session_window = int(attrs.get("maxSessionWindow") or 0)
        self.max_sessions = int(attrs.get("maxSessions") or 0)
        self.max_message_size = _opt(attrs.get("maxMessageSize"))
        self.max_senders = int(attrs.get("maxSenders", UNLIMITED_LINKS))
        self.max_receivers = int(attrs.get("maxReceivers", UNLIMITED_LINKS))
        for key, default in _GROUP_BOOLS.items():
            value = attrs.get(key, default)
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"  # 1.19: only these two words
            if not isinstance(value, bool):
                raise PolicyError(f"Policy vhost '{vhost}' user group '{name}' option '{key}' "
                                  f"has illegal boolean value '{value}'.")
            setattr(self, key, value)
        for plain, pat in (("sources", "sourcePattern"), ("targets", "targetPattern")):
            if attrs.get(plain) is not None and attrs.get(pat) is not None:
                raise PolicyError(f"Policy vhost '{vhost}' user group '{name}' specifies "
                                  f"conflicting '{plain}' and '{pat}' attributes. Use only one "
                                  "or the other.")
        self.sources = compile_names(vhost, name, "sources", attrs.get("sources"))
        self.targets = compile_names(vhost, name, "targets", attrs.get("targets"))
        self.source_pattern = compile_names(vhost, name, "sourcePattern",
                                            attrs.get("sourcePattern"))
        self.target_pattern = compile_names(vhost, name, "targetPattern",
                                            attrs.get("targetPattern"))
        self.use_source_pattern = attrs.get("sourcePattern") is not None
        self.use_target_pattern = attrs.get("targetPattern") is not None

    def host_allowed(self, ip: str) -> bool:
        return any(h.matches(ip) for h in self.remote_hosts)

    def approve_address(self, user: str, address: str, source: bool) -> bool:
        if source:
            if self.use_source_pattern:
                return approve_pattern(user, self.source_pattern, address)
            return approve_name(user, self.sources, address)
        if self.use_target_pattern:
            return approve_pattern(user, self.target_pattern, address)
        return approve_name(user, self.targets, address)

    def check_capabilities(self, caps: Iterable[str]) -> Optional[str]:
        """Why a terminus's capabilities are refused ('Waypoint'/'Fallback'), else None."""
        caps = list(caps)
        if not self.allowWaypointLinks and _has_capability(caps, WAYPOINT_CAPABILITY, True):
            return "Waypoint"
        if not self.allowFallbackLinks and _has_capability(caps, FALLBACK_CAPABILITY, False):
            return "Fallback"
        return None


def _opt(value: Any) -> Optional[int]:
    return None if value is None else int(value)


class Vhost:
    """One compiled vhost; ``warnings`` are the POLICY warning lines 1.19 logs for options it
    ignores. A refusal is a PolicyError worded as 1.19's ("Policy 'NAME' is invalid: ...")."""

    def __init__(self, attrs: dict) -> None:
        if attrs.get("hostname") is not None:  # '' is a name 1.19 accepts
            name = str(attrs["hostname"])
        elif attrs.get("name") is not None or attrs.get("id") is not None:
            name = str(attrs["name"] if attrs.get("name") is not None else attrs["id"])
        else:
            raise PolicyError("vhost needs a 'hostname'")
        self.name = name
        self.attrs = dict(attrs)
        try:
            self._compile(name, attrs)
        except PolicyError as exc:
            raise PolicyError(f"Policy '{name}' is invalid: {exc}") from None

    def _compile(self, name: str, attrs: dict) -> None:
        ignored = ("name", "identity", "type", "id")
        self.warnings = [f"Policy vhost '{name}' option '{k}' is ignored." for k in attrs
                         if k not in VHOST_ATTRIBUTES and k not in ignored]
        for key in ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost",
                    "maxMessageSize"):
            _check_number(attrs.get(key), f"Policy vhost '{name}' option '{key}'",
                          None if key == "maxMessageSize" else 65535)
        self.max_connections = int(attrs.get("maxConnections", 65535))
        self.max_per_user = int(attrs.get("maxConnectionsPerUser", 65535))
        self.max_per_host = int(attrs.get("maxConnectionsPerHost", 65535))
        self.max_message_size = _opt(attrs.get("maxMessageSize"))
        allow = attrs.get("allowUnknownUser", False)
        if isinstance(allow, str) and allow.lower() in ("true", "false", "yes", "no"):
            allow = allow.lower() in ("true", "yes")
        if not isinstance(allow, bool):
            raise PolicyError(f"Policy vhost '{name}' option 'allowUnknownUser' must be of type "
                              f"'bool' but is '{type(allow).__name__}'")
        self.allow_unknown = allow
        self.aliases: list = []
        for alias in split_list(str(attrs.get("aliases") or "").replace(" ", ",")):
            if alias == name:
                raise PolicyError(f"Policy vhost '{name}' option 'aliases' value '{alias}' "
                                  "duplicates vhost name")
            if alias in self.aliases:
                raise PolicyError(f"Policy vhost '{name}' option 'aliases' value '{alias}' is "
                                  "duplicated")
            self.aliases.append(alias)
        groups = attrs.get("groups") or {}
        if isinstance(groups, str):
            try:
                groups = json.loads(groups)
            except ValueError:
                raise PolicyError(f"Policy vhost '{name}' option 'groups' must be of type "
                                  "'dict' but is 'str'") from None
        if not isinstance(groups, dict):
            raise PolicyError(f"Policy vhost '{name}' option 'groups' must be of type 'dict' "
                              f"but is '{type(groups).__name__}'")
        self.groups: dict = {}
        self.user_groups: dict = {}
        for gname, gattrs in groups.items():
            if not isinstance(gattrs, dict):
                raise PolicyError(f"Policy vhost '{name}' user group '{gname}' must be a map")
            group = GroupSettings(name, str(gname), gattrs)
            self.warnings.extend(group.warnings)
            self.groups[str(gname)] = group
            for user in group.users:
                if user in self.user_groups:
                    raise PolicyError(f"Policy vhost '{name}' user '{user}' is in multiple user "
                                      f"groups '{self.user_groups[user]}' and '{gname}'")
                self.user_groups[user] = str(gname)
        if self.allow_unknown and DEFAULT_GROUP not in self.groups:
            raise PolicyError(f"Policy vhost '{name}' allows connections by default but default "
                              "settings are not defined")

    def group_of(self, user: str) -> Optional[str]:
        if user in self.user_groups:
            return self.user_groups[user]
        if "*" in self.user_groups:
            return self.user_groups["*"]
        return DEFAULT_GROUP if self.allow_unknown else None


def _pattern_words(name: str) -> list:
    return normalize_words(name.split("."))


class PolicyDb:
    """The router's policy: the ``policy`` entity and its vhosts (config, policyDir, runtime)."""

    def __init__(self, policy: Optional[dict] = None, vhosts: Iterable[dict] = ()) -> None:
        policy = dict(policy or {})
        self.enabled = bool(policy.get("enableVhostPolicy"))
        self.patterns = bool(policy.get("enableVhostNamePatterns"))
        self.default_vhost = str(policy.get("defaultVhost", DEFAULT_GROUP) or "")
        self.max_connections = int(policy.get("maxConnections", 65535))
        self.max_message_size = int(policy.get("maxMessageSize") or 0)
        self.vhosts: dict = {}
        self.aliases: dict = {}
        for attrs in vhosts:
            self.add(Vhost(attrs))

    def add(self, vhost: Vhost) -> None:
        """Create or replace a vhost; 1.19's alias conflicts raise PolicyError."""
        name = vhost.name
        if name in self.aliases:
            raise PolicyError(f"Policy is creating vhost '{name}' but that name is already an "
                              f"alias for vhost '{self.aliases[name]}'")
        for alias in vhost.aliases:
            if alias in self.vhosts:
                raise PolicyError(f"Policy for vhost '{name}' defines alias '{alias}' which "
                                  f"conflicts with an existing vhost named '{alias}'")
            owner = self.aliases.get(alias)
            if owner is not None and owner != name:
                raise PolicyError(f"Policy for vhost '{name}' alias '{alias}' conflicts with "
                                  f"existing alias for vhost '{owner}'")
        old = self.vhosts.get(name)
        if old is not None:
            for alias in old.aliases:
                self.aliases.pop(alias, None)
        for alias in vhost.aliases:
            self.aliases[alias] = name
        self.vhosts[name] = vhost

    def remove(self, name: str) -> None:
        old = self.vhosts.pop(name, None)
        if old is None:
            raise PolicyError(f"Policy '{name}' does not exist")
        for alias in old.aliases:
            self.aliases.pop(alias, None)

    def _pattern_lookup(self, hostname: str) -> str:
        """enableVhostNamePatterns: the most specific vhost name or alias matching
        ``hostname`` (words split at '.', ``*`` one word, ``#`` any number)."""
        words = hostname.split(".")
        best, best_spec = hostname, None
        for name in list(self.vhosts) + list(self.aliases):
            spec = match_order(words, _pattern_words(name))
            if spec is not None and (best_spec is None or spec < best_spec):
                best, best_spec = name, spec
        return best

    def resolve(self, hostname: str) -> Optional[Vhost]:
        """The vhost an open's hostname selects: by name, alias or pattern, else the default."""
        name = hostname or ""
        if self.patterns and name not in self.vhosts and name not in self.aliases:
            name = self._pattern_lookup(name)
        name = self.aliases.get(name, name)
        vhost = self.vhosts.get(name)
        if vhost is None and self.default_vhost:
            vhost = self.vhosts.get(self.default_vhost)
        return vhost

    def lookup_user(self, user: str, rhost: str, hostname: str) -> tuple:
        """An AMQP open: ``(vhost, group_name, settings, logs)`` when policy lets it in (the
        counts are the core's to check), else ``(None, None, None, logs)``. ``logs`` are the
        POLICY lines 1.19 prints: [(level, text)]."""
        logs: list = []
        vhost = self.resolve(hostname)
        if vhost is None:
            logs.append(("info", f"DENY AMQP Open for user '{user}', rhost '{rhost}', vhost "
                                 f"'{hostname}': No policy defined for vhost"))
            return None, None, None, logs
        if vhost.name != hostname:
            logs.append(("debug", f"AMQP Open for user '{user}', rhost '{rhost}', vhost "
                                  f"'{hostname}': proceeds using vhost '{vhost.name}' ruleset"))
        group = vhost.group_of(user)
        if group is None or group not in vhost.groups:
            logs.append(("info", f"DENY AMQP Open for user '{user}', rhost '{rhost}', vhost "
                                 f"'{vhost.name}': User is not in a user group and unknown users "
                                 "are denied"))
            return vhost, None, None, logs
        settings = vhost.groups[group]
        if not settings.host_allowed(rhost):
            logs.append(("info", f"DENY AMQP Open for user '{user}', rhost '{rhost}', vhost "
                                 f"'{vhost.name}': User is not allowed to connect from this "
                                 "network host"))
            return vhost, None, None, logs
        return vhost, group, settings, logs

    def connector_group(self, policy_vhost: str) -> Optional[tuple]:
        """A connector's ``policyVhost``: ``(vhost, settings)`` of the ``$connector`` user group
        of the vhost it names (by name, alias or pattern, else the default vhost, as 1.19
        looks it up), for the links the peer opens on the outgoing connection; None when there
        is no such group (1.19 then closes the connection). As 1.19, the group's
        maxSessionWindow does not apply to an outgoing connection (its window is the
        connector's)."""
        vhost = self.resolve(policy_vhost)
        if vhost is None or CONNECTOR_GROUP not in vhost.groups:
            return None
        settings = copy.copy(vhost.groups[CONNECTOR_GROUP])
        settings.max_session_window = 0
        return vhost, settings

    def connector_failure(self, conn_id: int, policy_vhost: str) -> str:
        """The POLICY error line 1.19 logs when a connector's policyVhost has no settings."""
        return (f"[C{conn_id}] Failed to find policyVhost settings for connection '{conn_id}', "
                f"policyVhost: '{policy_vhost}'")

    def message_size(self, vhost: Vhost, settings: GroupSettings) -> int:
        """maxMessageSize of a policed connection: the group's, else the vhost's, else the
        policy's (0: no limit)."""
        if settings.max_message_size is not None:
            return settings.max_message_size
        if vhost.max_message_size is not None:
            return vhost.max_message_size
        return self.max_message_size


def policy_problem(vhosts: list, warnings: Optional[list] = None,
                   name_patterns: bool = False) -> Optional[tuple]:
    """The first vhost/policy setting the router would not enforce or 1.19 would refuse, as
    (index in ``vhosts``, message); None when all are usable. The one check of the
    configuration file and policyDir (supervisor) and of management CREATE/UPDATE (agent).
    ``warnings`` receives the ("POLICY", text) lines 1.19 logs for options it ignores.
    ``name_patterns`` (the policy's enableVhostNamePatterns) adds 1.19's pattern-tree check."""
    db = PolicyDb()
    patterns: dict = {}  # pattern as 1.19's tree stores it -> the vhost that holds it
    for index, attrs in enumerate(vhosts):
        try:
            vhost = Vhost({k: v for k, v in attrs.items() if v is not None})
            db.add(vhost)
            if name_patterns:
                _add_patterns(vhost, patterns)
        except PolicyError as exc:
            return index, str(exc)
        if warnings is not None:
            warnings.extend(("POLICY", w) for w in vhost.warnings)
    return None


def _add_patterns(vhost: Vhost, patterns: dict) -> None:
    """With hostname patterns on, 1.19 puts a vhost's name and then each alias into one
    pattern tree, rewritten as its trees rewrite them (``#.#`` -> ``#``, ``#.*`` -> ``*.#``);
    a name that comes out the same as one already there (another vhost's, or this one's own)
    is a PolicyError. A vhost replacing one of the same name gives up the old names first."""
    for key in [k for k, owner in patterns.items() if owner == vhost.name]:
        del patterns[key]
    added = []
    for tname in [vhost.name, *vhost.aliases]:
        key = tuple(normalize_words(tname.split(".")))
        if key in patterns:
            for undo in added:
                del patterns[undo]
            raise PolicyError(f"Policy for vhost '{vhost.name}' alias '{tname}' optimized "
                              f"pattern conflicts with existing pattern")
        patterns[key] = vhost.name
        added.append(key)


def strip_comment_lines(text: str) -> str:
    """A policy file's JSON: 1.19 blanks every line whose first non-blank character is ``#``
    (its files open with ``##`` licence lines); blanking keeps the line numbers of JSON errors."""
    return "\n".join("" if line.lstrip().startswith("#") else line
                     for line in text.split("\n"))


def load_policy_dir(path: str, warnings: Optional[list] = None) -> list:
    """The vhosts of a policyDir: every ``*.json`` file, 1.19's format (a list of
    ``["vhost", {attributes}]``, ``#`` comment lines allowed); sorted by file name. Entries of
    other types are skipped, as 1.19 only loads vhosts from these files. Raises PolicyError
    naming the file; ``warnings`` (if given) receives ``(module, text)`` lines 1.19 logs at
    warning level: the deprecated ``id`` (AGENT) and ignored options (POLICY)."""
    if not os.path.isdir(path):
        raise PolicyError(f"policyDir '{path}' is not a directory")
    out = []
    for fname in sorted(os.listdir(path)):
        if not fname.endswith(".json"):
            continue
        full = os.path.join(path, fname)
        try:
            with open(full, encoding="utf-8") as f:
                data = json.loads(strip_comment_lines(f.read()))
        except (OSError, ValueError) as exc:
            raise PolicyError(f"policy file '{full}': {exc}") from None
        if not isinstance(data, list):
            raise PolicyError(f"policy file '{full}': must be a list of [\"vhost\", {{...}}]")
        for item in data:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], dict)
                    or not isinstance(item[0], str)):
                raise PolicyError(f"policy file '{full}': entries must be "
                                  f"[\"type\", {{attributes}}], got {str(item)[:80]}")
            if item[0].rsplit(".", 1)[-1] != "vhost":
                continue
            attrs = dict(item[1])
            if "id" in attrs:
                if "hostname" in attrs:
                    raise PolicyError(f"policy file '{full}': org.apache.qpid.dispatch.vhost: "
                                      "Both 'id' and 'hostname' cannot be specified for entity "
                                      "'vhost'")
                attrs["hostname"] = attrs.pop("id")
                if warnings is not None:
                    warnings.append(("AGENT", "Attribute 'id' of entity 'vhost' has been "
                                              "deprecated. Use 'hostname' instead"))
            try:
                vhost = Vhost(attrs)
            except PolicyError as exc:
                raise PolicyError(f"policy file '{full}': {exc}") from None
            if warnings is not None:
                warnings.extend(("POLICY", w) for w in vhost.warnings)
            out.append(attrs)
    return out
