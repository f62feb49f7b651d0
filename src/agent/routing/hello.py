"""HELLO protocol: which routers are two-way neighbours, over which control link, at what cost.

Owns the control links (id -> cost), the times HELLOs last arrived, the HELLO send timer and the
neighbour table. Returns :class:`Send` effects (one HELLO per control link, ``via_link`` set) and
neighbour events for the facade. Time is the ``now`` argument; timers are deadlines. Must not
import proton, zmq, sockets, clocks, or the other engines of the package.

Rules (reference doc, "Behaviour: HELLO"):

* every ``hello_interval`` a HELLO goes out on every control link; ``seen`` lists every router
  whose HELLO arrived (on any link, as in 1.x) less than ``hello_max_age`` ago. A new link gets
  its first HELLO at the next :meth:`tick`, not a full interval later;
* a HELLO that lists my id in ``seen`` proves two-way connectivity over its link: the sender
  becomes or stays a neighbour over that link at that link's cost;
* a HELLO carrying my own id with another instance is a duplicate router id: reported once
  (:class:`DuplicateRouterId`) and otherwise ignored;
* a neighbour not refreshed for ``hello_max_age`` is removed; losing its link removes it at once.

Neighbour state per router id, as a table (``links`` = links with a fresh two-way HELLO)::

    state      event                            next       event out
    absent     two-way HELLO on link L          neighbour  NeighbourUp(id, L, cost)
    neighbour  two-way HELLO, best link changes neighbour  NeighbourUp(id, L', cost')
    neighbour  last link expires / goes down    absent     NeighbourDown(id)

When a router is two-way over several links (parallel connections) the lowest (cost, link id)
link carries it, so the choice does not flap with HELLO arrival order.

Resume after an agent restart (:meth:`snapshot_state` / :meth:`restore_state`): the neighbour
table, the two-way links and the routers heard are kept, but every time in them becomes the
restore time, so each is *provisional*: a neighbour no HELLO confirms within ``hello_max_age``
expires through the ordinary path (``NeighbourDown``). The control links come back provisional
too: one the core announces again (``link_up``) or a HELLO arrives on is confirmed; one still
unconfirmed ``hello_max_age`` after the restore went away while the agent was down (the core
could not tell a dead agent) and goes as if it went down then.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Hashable, List, Optional, Tuple, Union

from agent.routing.effects import Send
from agent.routing.messages import HELLO_ADDRESS, Hello, application_properties, encode

__all__ = ["HelloEngine", "NeighbourUp", "NeighbourDown", "InstanceSeen", "DuplicateRouterId",
           "HelloEvent"]


@dataclass(frozen=True)
class NeighbourUp:
    """``router`` is (now) a neighbour over ``link`` at ``cost`` (replaces any previous link)."""
    router: str
    link: Hashable
    cost: int


@dataclass(frozen=True)
class NeighbourDown:
    router: str


@dataclass(frozen=True)
class InstanceSeen:
    """A two-way HELLO from ``router`` told its instance and protocol version."""
    router: str
    instance: int
    pv: int


@dataclass(frozen=True)
class DuplicateRouterId:
    """A HELLO carried my router id with another instance (reported once)."""
    router: str
    instance: int


HelloEvent = Union[Send, NeighbourUp, NeighbourDown, InstanceSeen, DuplicateRouterId]


class HelloEngine:
    def __init__(self, my_id: str, instance: int, hello_interval: float = 1.0,
                 hello_max_age: float = 3.0, area: str = "0") -> None:
        self.my_id = my_id
        self.instance = instance
        self.area = area
        self.hello_interval = float(hello_interval)
        self.hello_max_age = float(hello_max_age)
        self.links: Dict[Hashable, int] = {}              # control link -> cost
        self.heard: Dict[str, float] = {}                 # router -> last HELLO (any link)
        self.two_way: Dict[str, Dict[Hashable, float]] = {}   # router -> link -> last two-way
        self.neighbours: Dict[str, Tuple[Hashable, int]] = {}  # router -> (link, cost)
        self.next_hello_at: Optional[float] = None        # None: due at the next tick
        self.duplicate_reported = False
        self.provisional: Dict[Hashable, float] = {}      # restored link -> when it goes

    # ---- inputs --------------------------------------------------------------------------------

    def link_up(self, link: Hashable, cost: int) -> None:
        self.provisional.pop(link, None)
        self.links[link] = int(cost)
        self.next_hello_at = None          # greet the new link at the next tick

    def link_down(self, link: Hashable) -> List[HelloEvent]:
        self.provisional.pop(link, None)
        self.links.pop(link, None)
        touched = [r for r, links in self.two_way.items() if link in links]
        for router in touched:
            del self.two_way[router][link]
        return self._reselect(touched)

    def receive(self, link: Optional[Hashable], msg: Hello, now: float) -> List[HelloEvent]:
        if msg.id == self.my_id:
            if msg.instance != self.instance and not self.duplicate_reported:
                self.duplicate_reported = True
                return [DuplicateRouterId(msg.id, msg.instance)]
            return []
        if link not in self.links:
            return []                      # not a control link we know: no cost, no neighbour
        self.provisional.pop(link, None)   # the core delivered on it: it is there
        self.heard[msg.id] = now
        if self.my_id not in msg.seen:
            return []
        self.two_way.setdefault(msg.id, {})[link] = now
        return [*self._reselect([msg.id]), InstanceSeen(msg.id, msg.instance, msg.pv)]

    def tick(self, now: float) -> List[HelloEvent]:
        out: List[HelloEvent] = []
        for link in [k for k, t in self.provisional.items() if t <= now]:
            out.extend(self.link_down(link))
        age = self.hello_max_age        # expired when t + age <= now: the deadline's own sum
        for router in [r for r, t in self.heard.items() if t + age <= now]:
            del self.heard[router]
        expired = []
        for router, links in self.two_way.items():
            for link in [k for k, t in links.items() if t + age <= now]:
                del links[link]
                expired.append(router)
        out.extend(self._reselect(expired))
        if self.next_hello_at is None or now >= self.next_hello_at:
            self.next_hello_at = now + self.hello_interval
            out.extend(self._hellos())
        return out

    def next_deadline(self) -> float:
        """The earliest time :meth:`tick` has work to do (``-inf``: at once)."""
        if self.next_hello_at is None:
            return float("-inf")
        times = [self.next_hello_at, *self.provisional.values()]
        times.extend(t + self.hello_max_age for t in self.heard.values())
        times.extend(t + self.hello_max_age for links in self.two_way.values() for t in links.values())
        return min(times)

    # ---- resume after an agent restart ----------------------------------------------------------

    def snapshot_state(self) -> dict:
        """Plain (JSON-able) data: control links, routers heard, two-way links, neighbours (no
        times)."""
        return {"links": [[link, cost] for link, cost in self.links.items()],
                "heard": sorted(self.heard),
                "two_way": [[router, link] for router, links in sorted(self.two_way.items())
                            for link in links],
                "neighbours": [[router, link, cost]
                               for router, (link, cost) in sorted(self.neighbours.items())]}

    def restore_state(self, state: dict, now: float) -> None:
        """Take back :meth:`snapshot_state`; every entry is dated ``now`` (provisional)."""
        self.links = {link: int(cost) for link, cost in state.get("links", ())}
        self.provisional = {link: now + self.hello_max_age for link in self.links}
        self.heard = {str(router): now for router in state.get("heard", ())}
        self.two_way = {}
        for router, link in state.get("two_way", ()):
            self.two_way.setdefault(str(router), {})[link] = now
        self.neighbours = {str(router): (link, int(cost))
                           for router, link, cost in state.get("neighbours", ())}
        for router in self.neighbours:     # a neighbour always has a two-way link to expire
            if router not in self.two_way:
                self.two_way[router] = {self.neighbours[router][0]: now}
        self.next_hello_at = None

    # ---- internals -----------------------------------------------------------------------------

    def _hellos(self) -> List[Send]:
        msg = Hello(self.my_id, area=self.area, instance=self.instance,
                    seen=tuple(sorted(self.heard)))
        opcode, _ = encode(msg)
        props = application_properties(opcode)
        # one body per link: the transport may consume (or mutate) what it is handed
        return [Send(HELLO_ADDRESS, opcode, encode(msg)[1], via_link=link, properties=props,
                     message=msg)
                for link in self.links]

    def _reselect(self, routers: List[str]) -> List[HelloEvent]:
        out: List[HelloEvent] = []
        for router in dict.fromkeys(routers):
            links = self.two_way.get(router) or {}
            live = [(self.links[k], repr(k), k) for k in links if k in self.links]
            old = self.neighbours.get(router)
            if not live:
                self.two_way.pop(router, None)
                if old is not None:
                    del self.neighbours[router]
                    out.append(NeighbourDown(router))
                continue
            cost, _, link = min(live)
            if old != (link, cost):
                self.neighbours[router] = (link, cost)
                out.append(NeighbourUp(router, link, cost))
        return out
