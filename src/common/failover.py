"""Failover lists, as Qpid Dispatch 1.19 offers and follows them.

A listener's ``failoverUrls`` ("[scheme://]host[:port], ...") go out in the open it sends, as
the connection property ``failover-server-list``: a list of maps with the symbol keys
``network-host`` and ``port`` (strings; the port is 5672 when the URL gives none) and
``scheme`` when the URL gives one. A connector that receives such a list keeps its own address
first, the address it is connected to, then the new ones (one entry per host:port); when its
connection is lost it goes through them in turn (``FailoverList``), and management shows them
as ``failoverUrls`` starting with the one in use ("scheme://host:port, ...").

Pure Python: parsing, the property's plain value, the list a connector walks. The engine puts
the property in the open (engine_connections.py), the worker's connectors walk the list and
the supervisor checks a listener's list when it reads the configuration.
"""
from __future__ import annotations

from typing import Any, Optional

KEY = "failover-server-list"
DEFAULT_PORT = "5672"

Item = tuple  # (scheme or None, host, port): strings


def parse_urls(text: str) -> list:
    """``failoverUrls`` -> items; whitespace anywhere is ignored and one trailing comma is
    allowed, as 1.19 does. ValueError for an item with no host ("a,,b", ",a", "")."""
    rest: Optional[str] = "".join(ch for ch in str(text) if ch.isprintable()
                                  and not ch.isspace())
    items = []
    while True:
        part, comma, after = rest.partition(",")
        scheme, sep, hostport = part.partition("://")
        if not sep:
            scheme, hostport = None, part
        host, colon, port = hostport.partition(":")
        if not host:
            raise ValueError("No network host in failover item")
        items.append((scheme, host, port if colon else DEFAULT_PORT))
        if not comma or not after:
            return items
        rest = after


def listener_problem(attrs: dict) -> Optional[str]:
    """Why a listener's ``failoverUrls`` cannot be used, in 1.19's words ("Value: No network
    host in failover item"), or None. The supervisor (config file: "Unable to create listener,
    bad failover list: ...") and management (CREATE: 500 "CError: ...", as 1.19 answers)
    refuse such a listener."""
    if not attrs.get("failoverUrls"):
        return None
    try:
        parse_urls(attrs["failoverUrls"])
    except ValueError as exc:
        return f"Value: {exc}"
    return None


def property_value(items: list) -> list:
    """The ``failover-server-list`` value for the open (plain: str keys the engine makes
    symbols)."""
    out = []
    for scheme, host, port in items:
        entry = {"network-host": host, "port": port}
        if scheme:
            entry["scheme"] = scheme
        out.append(entry)
    return out


def from_property(value: Any) -> Optional[list]:
    """The peer's ``failover-server-list`` -> items (scheme defaults to amqp); None when the
    value is not a list (ignored, as 1.19); maps without a host are skipped."""
    if not isinstance(value, (list, tuple)):
        return None
    items = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        fields = {str(k): v for k, v in entry.items()}
        host = fields.get("network-host")
        if not isinstance(host, str) or not host:
            continue
        scheme = fields.get("scheme")
        port = fields.get("port")
        items.append((scheme if isinstance(scheme, str) and scheme else "amqp", host,
                      str(port) if port is not None and str(port) else DEFAULT_PORT))
    return items


class FailoverList:
    """A connector's addresses: its own first, then those its peers offered. ``index`` is the
    one the next attempt goes to; each is tried twice before the next (as 1.19)."""

    def __init__(self, scheme: str, host: str, port: str) -> None:
        self.items: list = [(scheme, host, str(port))]
        self.index = 0
        self.retries = 0

    @property
    def current(self) -> Item:
        return self.items[self.index]

    def has_failover(self) -> bool:
        return len(self.items) > 1

    def opened(self) -> None:
        """A connection to the current address opened."""
        self.retries = 0

    def failed(self) -> None:
        """An attempt failed or a connection was lost: the same address once more, then the
        next one (round robin)."""
        if self.retries == 1:
            self.index = (self.index + 1) % len(self.items)
            self.retries = 0
        else:
            self.retries += 1

    def offered(self, items: list) -> None:
        """The peer of the current address sent ``failover-server-list``: keep the own address
        and the current one, drop what earlier peers offered, add the new ones not listed."""
        keep = [self.items[0]]
        if self.index != 0:
            keep.append(self.items[self.index])
        self.items, self.index = keep, len(keep) - 1
        for scheme, host, port in items:
            # as 1.19: listed already is checked only once the list has more than its own
            if len(self.items) == 1 or all((h, p) != (host, port) for _, h, p in self.items):
                self.items.append((scheme, host, port))

    def urls(self) -> str:
        """Management's ``failoverUrls``: from the current address round the list."""
        n = len(self.items)
        return ", ".join(f"{s}://{h}:{p}" for s, h, p in
                         (self.items[(self.index + i) % n] for i in range(n)))
