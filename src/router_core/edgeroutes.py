"""The edge router's link-route proxy (1.19's edge link_route_proxy module): each link-route
address that has a destination on this edge (a route container attached here) is created on
the interior as a connection-scoped link route (``router.connection.linkRoute``) of the uplink,
through management requests to the interior's ``$management``; so the interior, and through it
the whole network, routes matching attaches down the uplink, and this edge hands them to its
route container with its own link route.

A sans-I/O state machine: it is told what changed (:meth:`LinkRouteProxy.added`,
:meth:`~LinkRouteProxy.removed`, :meth:`~LinkRouteProxy.lost`, :meth:`~LinkRouteProxy.reply`,
:meth:`~LinkRouteProxy.expire`) and gives back the request messages to send
(:meth:`~LinkRouteProxy.requests`) and the lines to log; the edge's uplink (edge.py) owns the
links and sends them. Must not import zmq, proton, sockets, clocks, logging handlers,
router_io or agent.

One proxy per route address (key ``Cqueue``: prefix ``queue``, in), named as 1.19 names it
(``<router id>/proxyLinkRoute/<key>``), in one of these states::

    NEW        needs a CREATE            CREATING  CREATE sent, no answer yet
    CREATED    the interior has it       CANCELLED removed while its CREATE was out
    DELETED    needs a DELETE            DELETING  DELETE sent, no answer yet

A failed CREATE (any status but 201) is logged and forgotten; a DELETE answered 204 or 404
is done; a request with no answer within 10 s, or lost with the uplink, is tried again (NEW,
DELETED); the uplink lost means the interior dropped the routes of that connection: CREATING
and CREATED proxies are NEW again, the others forgotten.
"""
from __future__ import annotations

from typing import Optional

from router_core import edgemsg

CONN_LINK_ROUTE_TYPE = "org.apache.qpid.dispatch.router.connection.linkRoute"
REQUEST_TIMEOUT = 10.0  # 1.19's edge management request timeout

NEW, CREATING, CREATED, CANCELLED, DELETED, DELETING = range(6)
# the events
EV_ADDED, EV_REMOVED, EV_LOST, EV_SENT, EV_FAILED, EV_CREATED, EV_DELETED = range(7)
FORGET = -1
# (state, event) -> new state (FORGET: the proxy goes); a pair not in the table changes nothing
TRANSITIONS = {
    (NEW, EV_REMOVED): FORGET,          # never created: nothing to undo
    (NEW, EV_SENT): CREATING,
    (CREATING, EV_REMOVED): CANCELLED,  # undone when the CREATE's answer comes
    (CREATING, EV_LOST): NEW,
    (CREATING, EV_FAILED): NEW,         # no answer: asked again
    (CREATING, EV_CREATED): CREATED,
    (CANCELLED, EV_ADDED): CREATING,    # back while its CREATE was out: kept when answered
    (CANCELLED, EV_CREATED): DELETED,
    (CANCELLED, EV_FAILED): FORGET,
    (CANCELLED, EV_LOST): FORGET,
    (CREATED, EV_REMOVED): DELETED,
    (CREATED, EV_LOST): NEW,
    (DELETED, EV_SENT): DELETING,
    (DELETED, EV_LOST): FORGET,
    (DELETED, EV_ADDED): CREATED,       # back before its DELETE went: still there
    (DELETING, EV_FAILED): DELETED,
    (DELETING, EV_DELETED): FORGET,
    (DELETING, EV_LOST): FORGET,
}


class Proxy:
    __slots__ = ("key", "pattern", "direction", "name", "state", "identity")

    def __init__(self, key: str, router_id: str) -> None:
        self.key = key
        # connection-scoped routes have patterns only: a prefix ``p`` is the pattern ``p/#``
        self.pattern = key[1:] + "/#" if key[:1] in "CD" else key[1:]
        self.direction = "in" if key[:1] in "CE" else "out"
        self.name = f"{router_id}/proxyLinkRoute/{key}"
        self.state = NEW
        self.identity: Optional[str] = None


class LinkRouteProxy:
    """The proxies of one edge router and the requests they have out."""

    def __init__(self, router_id: str) -> None:
        self.router_id = router_id
        self.proxies: dict = {}   # route key -> Proxy (a removed one may wait for its DELETE)
        self.pending: dict = {}   # correlation id -> (Proxy, time the request went)
        self.next_cid = 1
        self.logs: list = []      # (level, text) for the core process's log

    def _move(self, proxy: Proxy, event: int) -> None:
        state = TRANSITIONS.get((proxy.state, event))
        if state is None:
            return
        if state == FORGET:
            if self.proxies.get(proxy.key) is proxy:
                del self.proxies[proxy.key]
            return
        proxy.state = state

    def _log(self, level: str, text: str) -> None:
        if len(self.logs) < 1000:
            self.logs.append((level, text))

    def take_logs(self) -> list:
        logs = self.logs
        self.logs = []
        return logs

    # --- what changed -----------------------------------------------------------------------
    def added(self, key: str) -> None:
        """Route address ``key`` has its first destination on this edge."""
        proxy = self.proxies.get(key)
        if proxy is None or proxy.state == DELETING:
            # (a DELETE still out: a new proxy, whose CREATE the interior gets after it)
            self.proxies[key] = Proxy(key, self.router_id)
        else:
            self._move(proxy, EV_ADDED)

    def removed(self, key: str) -> None:
        """Route address ``key`` lost its last destination on this edge."""
        proxy = self.proxies.get(key)
        if proxy is not None:
            self._move(proxy, EV_REMOVED)

    def lost(self) -> None:
        """The uplink (or its management link) is gone: the interior dropped our routes."""
        self.pending = {}
        for proxy in list(self.proxies.values()):
            self._move(proxy, EV_LOST)
            if proxy.state == NEW:
                proxy.identity = None

    def expire(self, now: float) -> None:
        """Requests unanswered for REQUEST_TIMEOUT are given up (tried again)."""
        for cid, (proxy, sent) in list(self.pending.items()):
            if now - sent > REQUEST_TIMEOUT:
                del self.pending[cid]
                self._log("debug", f"link route proxy {_op(proxy)} failed: Timed out, "
                                   f"address={proxy.pattern} name={proxy.name}")
                self._move(proxy, EV_FAILED)

    def requests(self, reply_to: str, now: float) -> list:
        """The requests to send now (message bytes): a CREATE for each NEW proxy, a DELETE
        for each DELETED one."""
        out = []
        for proxy in list(self.proxies.values()):
            if proxy.state == NEW:
                body = (("type", CONN_LINK_ROUTE_TYPE), ("pattern", proxy.pattern),
                        ("direction", proxy.direction), ("name", proxy.name))
                message = edgemsg.management_request(
                    reply_to, self._cid(proxy, now), "CREATE", CONN_LINK_ROUTE_TYPE, None,
                    proxy.name, body)
            elif proxy.state == DELETED:
                message = edgemsg.management_request(
                    reply_to, self._cid(proxy, now), "DELETE", CONN_LINK_ROUTE_TYPE,
                    proxy.identity, proxy.name, ())
            else:
                continue
            self._move(proxy, EV_SENT)
            out.append(message)
        return out

    def _cid(self, proxy: Proxy, now: float) -> str:
        cid = f"lrp-{self.next_cid}"
        self.next_cid += 1
        self.pending[cid] = (proxy, now)
        return cid

    def owns(self, cid: object) -> bool:
        return cid in self.pending

    def reply(self, cid: object, status: int, description: Optional[str],
              identity: Optional[str]) -> None:
        """The interior answered request ``cid``."""
        entry = self.pending.pop(cid, None)
        if entry is None:
            return  # given up already (timed out, uplink lost)
        proxy = entry[0]
        why = description or "unknown"
        if proxy.state in (CREATING, CANCELLED):
            if status == 201 and identity is not None:
                proxy.identity = identity
                self._move(proxy, EV_CREATED)
                return
            if status == 201:
                self._log("error", "Link route proxy CREATE failed: invalid response message,"
                                   f" address={proxy.pattern} proxy name={proxy.name}")
            else:
                self._log("error", f"link route proxy CREATE failed with error: ({status}) "
                                   f"{why}, address={proxy.pattern} proxy_name={proxy.name})")
            if self.proxies.get(proxy.key) is proxy:
                del self.proxies[proxy.key]
        elif proxy.state == DELETING:
            if status not in (204, 404):
                self._log("error", f"link route proxy DELETE failed with error: ({status}) "
                                   f"{why}, address={proxy.pattern} proxy id={proxy.identity}"
                                   f" proxy name={proxy.name})")
            self._move(proxy, EV_DELETED)


def _op(proxy: Proxy) -> str:
    return "DELETE" if proxy.state in (DELETING, DELETED) else "CREATE"
