"""Link-state protocol: my own link state, the link states of every other router, RA timing.

Owns my link state ``{id, ls_seq, peers{neighbour: cost}}``, the link-state database of remote
routers (with the time each was last refreshed), the flux/stable RA schedule and the building of
RA, LSR and LSU messages. It decides *what* to send; the facade decides *when* (reachability of
LSR targets is the node table's business). Time is the ``now`` argument; timers are deadlines.
Must not import proton (beyond ``messages``), zmq, sockets, clocks, or the other engines.

Rules (reference doc, "Behaviour"):

* every change of my peers bumps ``ls_seq`` (once per batch: :meth:`commit`), triggers a route
  recomputation and an immediate RA;
* RA every ``ra_interval``, or every ``ra_interval_flux`` while the topology changed within the
  last 2 x ``ra_interval_flux``;
* RA received: the sender's link state counts as refreshed; a newer ``ls_seq`` than held asks
  for an LSR (:meth:`handle_ra` returns ``True``);
* LSU received: kept only when its ``ls_seq`` is newer than held;
* LSR received: answered with my LSU, addressed to the requester;
* a restarted router's link state is dropped (``ls_seq`` back to 0, so its new LSUs are newer);
* remote link state not refreshed for ``remote_ls_max_age`` loses its peers (checked by the
  facade's once-a-second housekeeping, as 1.x checks once per tick).

Resume after an agent restart (:meth:`snapshot_state` / :meth:`restore_state`): my ``ls_seq``
and peers and the remote link-state database come back as they were, each remote one refreshed
as of the restore time; the facade then bumps ``ls_seq`` (:meth:`resume`) so the neighbours take
my link state again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Set

from agent.routing.effects import Send
from agent.routing.messages import (LSR, LSU, RA, RA_ADDRESS, LinkState, Message,
                                    application_properties, encode, router_address)

__all__ = ["LinkStateEngine", "RemoteLinkState"]


def _send(to: str, msg: Message) -> Send:
    opcode, body = encode(msg)
    return Send(to, opcode, body, properties=application_properties(opcode), message=msg)


@dataclass
class RemoteLinkState:
    ls_seq: int = 0
    peers: Dict[str, int] = field(default_factory=dict)
    last_seen: float = 0.0


class LinkStateEngine:
    def __init__(self, my_id: str, instance: int, ra_interval: float = 30.0,
                 ra_interval_flux: float = 4.0, remote_ls_max_age: float = 60.0,
                 area: str = "0") -> None:
        self.my_id = my_id
        self.instance = instance
        self.area = area
        self.ra_interval = float(ra_interval)
        self.ra_interval_flux = float(ra_interval_flux)
        self.remote_ls_max_age = float(remote_ls_max_age)
        self.ls_seq = 0
        self.peers: Dict[str, int] = {}
        self.remote: Dict[str, RemoteLinkState] = {}
        self.own_changed = False                 # peers changed since the last commit
        self.last_topology_change: Optional[float] = None
        self.last_ra_at: Optional[float] = None  # None: the first RA goes out at the first tick

    # ---- my link state -------------------------------------------------------------------------

    def set_peer(self, router: str, cost: int) -> None:
        if self.peers.get(router) != cost:
            self.peers[router] = cost
            self.own_changed = True

    def del_peer(self, router: str) -> None:
        if self.peers.pop(router, None) is not None:
            self.own_changed = True

    def commit(self, now: float) -> bool:
        """Bump ``ls_seq`` if my peers changed since the last call; ``True`` if it did."""
        if not self.own_changed:
            return False
        self.own_changed = False
        self.ls_seq += 1
        self.topology_changed(now)
        return True

    def topology_changed(self, now: float) -> None:
        self.last_topology_change = now

    def my_link_state(self) -> LinkState:
        return LinkState(self.my_id, self.area, self.ls_seq, dict(self.peers))

    # ---- RA schedule ---------------------------------------------------------------------------

    def in_flux(self, now: float) -> bool:
        return (self.last_topology_change is not None
                and now - self.last_topology_change <= 2 * self.ra_interval_flux)

    def next_ra_at(self) -> float:
        if self.last_ra_at is None:
            return float("-inf")
        flux_at = self.last_ra_at + self.ra_interval_flux
        if self.in_flux(flux_at):
            return flux_at
        return self.last_ra_at + self.ra_interval

    def ra(self, mobile_seq: int, now: float) -> Send:
        self.last_ra_at = now
        return _send(RA_ADDRESS, RA(self.my_id, area=self.area, instance=self.instance,
                                    ls_seq=self.ls_seq, mobile_seq=mobile_seq))

    # ---- resume after an agent restart ----------------------------------------------------------

    def snapshot_state(self) -> dict:
        """Plain (JSON-able) data: my ``ls_seq`` and peers, every remote ``ls_seq`` and peers."""
        return {"ls_seq": self.ls_seq, "peers": dict(sorted(self.peers.items())),
                "remote": {router: {"ls_seq": held.ls_seq,
                                    "peers": dict(sorted(held.peers.items()))}
                           for router, held in sorted(self.remote.items())}}

    def restore_state(self, state: dict, now: float) -> None:
        """Take back :meth:`snapshot_state`; remote link states count as refreshed at ``now``."""
        self.ls_seq = int(state.get("ls_seq", 0))
        self.peers = {str(p): int(c) for p, c in (state.get("peers") or {}).items()}
        self.remote = {str(router): RemoteLinkState(
                           int(held.get("ls_seq", 0)),
                           {str(p): int(c) for p, c in (held.get("peers") or {}).items()}, now)
                       for router, held in (state.get("remote") or {}).items()}
        self.own_changed = False
        self.last_ra_at = None

    def resume(self, now: float) -> None:
        """After a restore: a new ``ls_seq`` for the same peers (the neighbours may have seen
        one the snapshot missed), announced by an RA at the next tick, in flux."""
        self.ls_seq += 1
        self.last_ra_at = None
        self.topology_changed(now)

    # ---- remote link states --------------------------------------------------------------------

    def handle_ra(self, msg: RA, now: float) -> bool:
        """Note an RA; ``True`` when the sender's link state is newer than the one held."""
        held = self.remote.setdefault(msg.id, RemoteLinkState(last_seen=now))
        held.last_seen = now
        return held.ls_seq < msg.ls_seq

    def handle_lsu(self, msg: LSU, now: float) -> bool:
        """Keep the LSU's link state if newer than held; ``True`` if kept."""
        held = self.remote.setdefault(msg.id, RemoteLinkState(last_seen=now))
        if msg.ls.ls_seq <= held.ls_seq:
            return False
        held.ls_seq = msg.ls.ls_seq
        held.peers = {p: c for p, c in msg.ls.peers.items() if p != msg.id}
        held.last_seen = now
        self.topology_changed(now)
        return True

    def lsu_for(self, requester: str, area: str = "0") -> Send:
        """My LSU, answering an LSR from ``requester``."""
        return _send(router_address(requester, area),
                     LSU(self.my_id, area=self.area, instance=self.instance, ls_seq=self.ls_seq,
                         ls=self.my_link_state()))

    def lsr_for(self, target: str) -> Send:
        return _send(router_address(target, self.area), LSR(self.my_id, area=self.area))

    def drop(self, router: str, now: float) -> bool:
        """Forget ``router``'s link state (restart or deletion); ``True`` if it had peers."""
        held = self.remote.get(router)
        if held is None:
            return False
        had_peers = bool(held.peers)
        held.ls_seq, held.peers = 0, {}
        if had_peers:
            self.topology_changed(now)
        return had_peers

    def forget(self, router: str) -> None:
        self.remote.pop(router, None)

    def expire(self, now: float) -> bool:
        """Clear remote link states older than ``remote_ls_max_age``; ``True`` if any had peers."""
        changed = False
        for router, held in self.remote.items():
            if held.peers and held.last_seen + self.remote_ls_max_age <= now:
                held.ls_seq, held.peers = 0, {}
                changed = True
        if changed:
            self.topology_changed(now)
        return changed

    def with_link_state(self) -> Set[str]:
        return {router for router, held in self.remote.items() if held.peers}

    def named(self) -> Set[str]:
        """Every router some link state (mine included) names as a peer."""
        out = set(self.peers)
        for held in self.remote.values():
            out.update(held.peers)
        return out

    def collection(self) -> Dict[str, Mapping[str, int]]:
        """``{router: peers}`` for the route computation: mine plus every remote one that has
        peers (a router with none is a stand-in if named, else unreachable: same routes)."""
        states: Dict[str, Mapping[str, int]] = {self.my_id: dict(self.peers)}
        for router, held in self.remote.items():
            if held.peers:
                states[router] = held.peers
        return states

    def peers_of(self, router: str) -> List[str]:
        if router == self.my_id:
            return sorted(self.peers)
        held = self.remote.get(router)
        return sorted(held.peers) if held else []
