"""What the router asks of an authentication service, and what it makes of the answer.

An ``authServicePlugin`` (1.19) names a remote service that authenticates a listener's clients
over AMQP SASL. Once the service's SASL outcome is ok, the router opens an AMQP connection to it
(no SASL left, so proton's transport is made without its SASL layer) asking for the
``ADDRESS-AUTHZ`` capability, and reads the service's open: its ``authenticated-identity``
(a map whose ``sub`` is the user name) and its ``address-authz`` (a map of address to an array
of permissions, ``send`` and/or ``recv``). :class:`ServiceOpen` is that open exchange,
:func:`read_grant` reads the properties into an :class:`AuthGrant`, and :func:`grant_settings`
turns the grant into the link policy the worker applies (common/policy.py's GroupSettings):

* no ``address-authz`` at all: nothing is restricted;
* with it (even an empty map): a sender's target must be an address granted ``send``, a
  receiver's source one granted ``recv`` (an address ending in ``*`` is a prefix, ``${user}``
  is the user, as in a vhost's ``targets``/``sources``); dynamic sources and anonymous senders
  are allowed, an anonymous sender's messages go only to ``send`` addresses, waypoint and
  fallback capabilities are refused and a message's user-id must be the user (1.19's
  authz-only settings);
* with a vhost policy as well: the user group's settings, with the grant's address lists in
  place of its own (1.19 does not let the vhost override them).

Sans-I/O (the worker owns the socket and TLS). Must not import zmq, sockets, ssl or the engine.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional

import proton
from proton import symbol

from common import security
from common.identity import PRODUCT, VERSION
from common import policy as vpolicy

AUTHZ_CAPABILITY = "ADDRESS-AUTHZ"
AUTHZ_PROPERTY = "address-authz"
IDENTITY_PROPERTY = "authenticated-identity"
SEND, RECV = "send", "recv"


@dataclass(frozen=True)
class AuthPlugin:
    """An authServicePlugin as the worker uses it (host and port, realm, TLS profile)."""
    name: str
    host: str
    port: str
    realm: Optional[str] = None
    ssl_profile: Optional[str] = None

    @classmethod
    def from_attributes(cls, attrs: dict) -> "AuthPlugin":
        """From the entity's attributes (common/security.py: auth_plugin_address)."""
        host, port = security.auth_plugin_address(attrs)
        return cls(str(attrs.get("name") or ""), host, port,
                   str(attrs["realm"]) if attrs.get("realm") else None,
                   str(attrs["sslProfile"]) if attrs.get("sslProfile") else None)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class AuthGrant:
    """What the service's open said: the user and, if it sent address-authz, the addresses
    the client may send to (``targets``) and receive from (``sources``)."""
    user: str
    restricted: bool
    targets: tuple = ()
    sources: tuple = ()


def _key_text(key: Any) -> Optional[str]:
    return str(key) if isinstance(key, str) else None  # symbol and string alike


def read_grant(properties: Any) -> AuthGrant:
    """The service's open properties as an :class:`AuthGrant` (anything malformed in them
    grants nothing: a permission that is not a string, a value that is not an array)."""
    props = properties if isinstance(properties, dict) else {}
    user = ""
    restricted = False
    targets: dict = {}
    sources: dict = {}
    for key, value in props.items():
        name = _key_text(key)
        if name == IDENTITY_PROPERTY and isinstance(value, dict):
            for k, v in value.items():
                if _key_text(k) == "sub" and isinstance(v, str):
                    user = str(v)
        elif name == AUTHZ_PROPERTY:
            restricted = True
            if not isinstance(value, dict):
                continue
            for address, perms in value.items():
                if not isinstance(address, str) or isinstance(address, symbol):
                    continue  # 1.19 reads string keys only
                items = perms.elements if isinstance(perms, proton.Array) else None
                if items is None:
                    continue
                for perm in items:
                    if perm == SEND:
                        targets[str(address)] = True
                    elif perm == RECV:
                        sources[str(address)] = True
    return AuthGrant(user, restricted, tuple(targets), tuple(sources))


def _names(grant_list: tuple, key: str) -> list:
    """The grant's addresses as compiled policy rules; one 1.19 could not compile either (two
    ${user} tokens) grants nothing."""
    rules = []
    for address in grant_list:
        try:
            rules.extend(vpolicy.compile_names("", "", key, address))
        except vpolicy.PolicyError:
            continue
    return rules


def grant_settings(grant: AuthGrant,
                   group: Optional[vpolicy.GroupSettings] = None
                   ) -> Optional[vpolicy.GroupSettings]:
    """The link policy for a connection with ``grant`` (None: nothing restricted), on its own
    or over the vhost user ``group`` the connection also got."""
    if not grant.restricted:
        return group
    if group is None:
        settings = vpolicy.GroupSettings("", "", {
            "allowDynamicSource": True, "allowAnonymousSender": True,
            "allowUserIdProxy": False, "allowWaypointLinks": False,
            "allowFallbackLinks": False, "allowDynamicLinkRoutes": False,
            "allowAdminStatusUpdate": False})
    else:
        settings = copy.copy(group)
        settings.allowDynamicSource = True
        settings.allowAnonymousSender = True
    settings.targets = _names(grant.targets, "targets")
    settings.sources = _names(grant.sources, "sources")
    settings.use_target_pattern = settings.use_source_pattern = False
    settings.authz = True
    return settings


class ServiceOpen:
    """The AMQP open exchange with the service after its SASL outcome: bytes in and out, then
    ``properties`` once the service's open has come (``opened``), or ``error``."""

    def __init__(self, hostname: str) -> None:
        self.transport = proton.Transport(proton.Transport.CLIENT)
        self.connection = proton.Connection()
        self.connection.hostname = hostname
        self.connection.desired_capabilities = proton.Array(
            proton.UNDESCRIBED, proton.Data.SYMBOL, symbol(AUTHZ_CAPABILITY))
        self.connection.properties = {symbol("product"): PRODUCT,
                                      symbol("version"): VERSION}
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.connection.open()
        self.opened = False
        self.properties: Any = None
        self.error = ""

    def feed(self, data: bytes) -> None:
        pos = 0
        while pos < len(data) and not self.transport.closed:
            cap = self.transport.capacity()
            if cap <= 0:
                break
            n = min(cap, len(data) - pos)
            self.transport.push(data[pos:pos + n])
            pos += n
        self._events()

    def eof(self) -> None:
        self.transport.close_tail()
        self._events()

    def output(self) -> bytes:
        out = bytearray()
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                break
            out += self.transport.peek(pending)
            self.transport.pop(pending)
        return bytes(out)

    def close(self) -> None:
        self.connection.close()

    def _events(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                break
            kind = event.type
            self.collector.pop()
            if kind == proton.Event.CONNECTION_REMOTE_OPEN and not self.opened:
                self.opened = True
                try:
                    self.properties = self.connection.remote_properties
                except Exception as exc:  # noqa: BLE001 - undecodable: nothing granted
                    self.error = f"undecodable open properties: {exc}"
            elif kind == proton.Event.CONNECTION_REMOTE_CLOSE and not self.opened:
                cond = self.connection.remote_condition
                self.error = (f"closed by the service: {cond.name} {cond.description or ''}"
                              if cond else "closed by the service")
            elif kind == proton.Event.TRANSPORT_ERROR and not self.opened:
                cond = self.transport.condition
                self.error = f"{cond.name}: {cond.description}" if cond else "transport error"
