"""Mobile-address synchronisation (the MAU/MAR half of the protocol, ``mobile_sync`` in 1.x C).

Owns my mobile sequence number, the add/delete lists of local mobile addresses not yet announced,
the set announced so far, and every other router's mobile addresses with the sequence I hold for
it. Returns :class:`Send` effects (MAU, MAR) and :class:`RemoteAddressAdded` /
:class:`RemoteAddressRemoved` for the core. Time is the ``now`` argument. Must not import proton
(beyond ``messages``), zmq, sockets, clocks, or the other engines.

Rules (reference doc, "Mobile addresses"; ``qcm_mobile_sync_*`` in 1.x):

* an address gaining its first local destination goes on the add list, losing its last goes on
  the delete list; an add cancels a pending delete of the same key and vice versa;
* every ``flush_interval`` (1 s) non-empty lists become one differential MAU with
  ``mobile_seq + 1``, flooded to every router; the caller sends the RA announcing the new seq
  *after* it (:meth:`tick` returns ``(effects, advanced)``);
* a differential MAU is applied only when its seq is exactly the held seq + 1; otherwise a MAR
  (``have_seq`` = held seq) is sent;
* one MAR at a time to a router: while one is unanswered (no absolute MAU from that router
  since) and younger than ``mar_retry`` seconds, neither a gap nor an RA advertising a higher
  seq asks again. The answer lists every address of the router, and each RA it sends while the
  answer is on its way (one a second while its addresses change) would otherwise fetch the whole
  list once more: at 100,000 addresses, megabytes that delay the HELLOs behind them on the
  control link until neighbours are lost and more MAUs with them. An answer can be lost (the
  router had no route back to me yet): still behind the highest seq the router advertised
  (RA or MAU) ``mar_retry`` seconds after asking, I ask again;
* an absolute MAU is applied whatever its seq and replaces the sender's whole set;
* a MAR with ``have_seq`` below my seq is answered with an absolute MAU to the requester whose
  ``exist`` is the set as of my seq (announced; pending adds are not in it, pending deletes are);
* a router that restarted or vanished is flushed: its addresses are removed, its seq goes to 0.

Resume after an agent restart (:meth:`snapshot_state` / :meth:`restore_state`, then
:meth:`resume`): every other router's addresses and seq come back as they were; my seq comes back
two higher (a gap: every router asks a MAR and gets an absolute MAU, which also corrects anything
a lost differential MAU would have said), my announced set as it was. The core announces its
local addresses again when the new agent says hello; an announced address it has not named again
``resync_grace`` seconds after the first tick is gone, and goes out in a differential MAU.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from agent.routing.effects import Log, RemoteAddressAdded, RemoteAddressRemoved, Send
from agent.routing.messages import (ABSOLUTE, MAR, MAU, MAU_ALL_ADDRESS, Message,
                                    application_properties, encode, router_ma_address)

__all__ = ["MobileSync", "MobileEffect", "DEFAULT_HINT"]

#: Treatment hint when the caller gives none: 3, anycast-balanced (1.x's defaultDistribution).
DEFAULT_HINT = 3

#: Seconds an unanswered MAR stops another to the same router; then, if I am still behind the
#: seq that router advertised, I ask again (at the next tick, whatever arrives).
MAR_RETRY = 5.0

MobileEffect = Union[Send, RemoteAddressAdded, RemoteAddressRemoved, Log]


def _send(to: str, msg: Message) -> Send:
    opcode, body = encode(msg)
    return Send(to, opcode, body, properties=application_properties(opcode), message=msg)


class MobileSync:
    def __init__(self, my_id: str, area: str = "0", flush_interval: float = 1.0,
                 resync_grace: float = 2.0, mar_retry: float = MAR_RETRY) -> None:
        self.my_id = my_id
        self.area = area
        self.flush_interval = float(flush_interval)
        self.resync_grace = float(resync_grace)
        self.mar_retry = float(mar_retry)
        self.resyncing = False                  # after resume(): the core names local addresses
        self.resync_at: Optional[float] = None  # set at the first tick after resume()
        self.mobile_seq = 0
        self.local: Dict[str, int] = {}         # key -> hint (treatment), with local destinations
        self.announced: Dict[str, int] = {}     # the set as of mobile_seq
        self.pending_add: Dict[str, int] = {}
        self.pending_del: Dict[str, None] = {}
        self.next_flush_at: Optional[float] = None
        self.remote: Dict[str, Dict[str, Optional[int]]] = {}   # router -> key -> hint
        self.remote_seq: Dict[str, int] = {}
        self.mar_requested: Dict[str, float] = {}    # router -> when my unanswered MAR went
        self.advertised: Dict[str, int] = {}         # router -> highest seq it told (RA, MAU)

    # ---- local addresses -----------------------------------------------------------------------

    def add_local(self, key: str, hint: int = DEFAULT_HINT) -> None:
        if key in self.local:
            return
        self.local[key] = hint
        if key in self.pending_del:
            del self.pending_del[key]           # never un-announced: nothing to tell
        elif key not in self.announced:
            self.pending_add[key] = hint

    def remove_local(self, key: str) -> None:
        if self.local.pop(key, _ABSENT) is _ABSENT:
            return
        if key in self.pending_add:
            del self.pending_add[key]           # never announced: nothing to tell
        elif key in self.announced:
            self.pending_del[key] = None

    def tick(self, now: float) -> Tuple[List[MobileEffect], bool]:
        """Flush the lists once per interval: ``(effects, True)`` when my seq advanced."""
        if self.resyncing:
            if self.resync_at is None:
                self.resync_at = now + self.resync_grace
            if now >= self.resync_at:
                self.resyncing = False
                for key in self.announced:
                    if key not in self.local:
                        self.pending_del[key] = None
                self.next_flush_at = None
        if self.next_flush_at is not None and now < self.next_flush_at:
            return [], False
        self.next_flush_at = now + self.flush_interval
        if not self.pending_add and not self.pending_del:
            return [], False
        self.mobile_seq += 1
        add, delete = tuple(self.pending_add), tuple(self.pending_del)
        hints = tuple(self.pending_add[k] for k in add)
        self.announced.update(self.pending_add)
        for key in delete:
            self.announced.pop(key, None)
        self.pending_add, self.pending_del = {}, {}
        mau = MAU(self.my_id, area=self.area, mobile_seq=self.mobile_seq, add=add, delete=delete,
                  hints=hints)
        return [_send(MAU_ALL_ADDRESS, mau)], True

    def next_deadline(self) -> float:
        if self.next_flush_at is None or (self.resyncing and self.resync_at is None):
            return float("-inf")
        flush = self.next_flush_at if (self.pending_add or self.pending_del) else float("inf")
        return min(flush, self.resync_at) if self.resyncing else flush

    # ---- resume after an agent restart ----------------------------------------------------------

    def snapshot_state(self, remote: bool = True) -> dict:
        """Plain (JSON-able) data: my seq and address lists, other routers' addresses (not
        without ``remote``) and seqs."""
        state = {"mobile_seq": self.mobile_seq, "announced": dict(self.announced),
                 "local": dict(self.local), "pending_add": dict(self.pending_add),
                 "pending_del": list(self.pending_del),
                 "remote_seq": dict(sorted(self.remote_seq.items()))}
        if remote:
            state["remote"] = {router: dict(keys) for router, keys in sorted(self.remote.items())}
        return state

    def restore_state(self, state: dict) -> None:
        """Take back :meth:`snapshot_state` exactly (see :meth:`resume` for what follows)."""
        def hints(value: object) -> Dict[str, int]:
            return {str(k): int(h) for k, h in (value or {}).items()}  # type: ignore[attr-defined]

        self.mobile_seq = int(state.get("mobile_seq", 0))
        self.announced = hints(state.get("announced"))
        self.local = hints(state.get("local"))
        self.pending_add = hints(state.get("pending_add"))
        self.pending_del = {str(k): None for k in state.get("pending_del", ())}
        self.remote = {str(router): {str(k): None if h is None else int(h)
                                     for k, h in keys.items()}
                       for router, keys in (state.get("remote") or {}).items() if keys}
        self.remote_seq = {str(r): int(s) for r, s in (state.get("remote_seq") or {}).items()}
        self.mar_requested = {}
        self.advertised = {}
        self.next_flush_at = None

    def resume(self) -> None:
        """After a restore by a new agent: my seq jumps by 2, the local set is learned again
        from the core (see the module docstring)."""
        self.mobile_seq += 2
        self.local = {}
        self.pending_add, self.pending_del = {}, {}
        self.resyncing, self.resync_at = True, None
        self.next_flush_at = None

    # ---- remote routers ------------------------------------------------------------------------

    def seq_of(self, router: str) -> int:
        return self.remote_seq.get(router, 0)

    def mar_for(self, router: str, now: float) -> Send:
        """My MAR to ``router`` (it counts as unanswered from ``now``)."""
        self.mar_requested[router] = now
        return _send(router_ma_address(router, self.area),
                     MAR(self.my_id, area=self.area, have_seq=self.seq_of(router)))

    def awaiting(self, router: str, now: float) -> bool:
        """True while my MAR to ``router`` is unanswered and younger than ``mar_retry``."""
        asked = self.mar_requested.get(router)
        return asked is not None and now < asked + self.mar_retry

    def advertise(self, router: str, seq: int) -> None:
        """``router`` told (in an RA) that its seq is ``seq``."""
        if seq > self.advertised.get(router, 0):
            self.advertised[router] = seq

    def overdue(self, now: float) -> List[str]:
        """Routers I asked ``mar_retry`` seconds ago or more and am still behind: each is
        counted as asked again now (the caller sends the MAR when the router is reachable)."""
        out = [r for r, asked in self.mar_requested.items()
               if now >= asked + self.mar_retry and self.seq_of(r) < self.advertised.get(r, 0)]
        for router in out:
            self.mar_requested[router] = now
        return sorted(out)

    def next_retry(self) -> float:
        """When :meth:`overdue` may next name a router (``inf``: no MAR unanswered)."""
        times = [asked + self.mar_retry for r, asked in self.mar_requested.items()
                 if self.seq_of(r) < self.advertised.get(r, 0)]
        return min(times) if times else float("inf")

    def handle_mar(self, msg: MAR) -> List[MobileEffect]:
        if msg.have_seq >= self.mobile_seq:
            return []
        exist = tuple(self.announced)
        mau = MAU(self.my_id, area=self.area, mobile_seq=self.mobile_seq, kind=ABSOLUTE,
                  exist=exist, hints=tuple(self.announced[k] for k in exist))
        return [_send(router_ma_address(msg.id, msg.area), mau)]

    def handle_mau(self, msg: MAU, now: float) -> List[MobileEffect]:
        router = msg.id
        self.advertise(router, msg.mobile_seq)
        if msg.kind != ABSOLUTE and self.seq_of(router) != msg.mobile_seq - 1:
            if self.awaiting(router, now):
                return []
            return [self.mar_for(router, now)]
        if msg.kind == ABSOLUTE or msg.mobile_seq >= self.advertised[router]:
            self.mar_requested.pop(router, None)      # answered, or caught up anyway
        self.remote_seq[router] = msg.mobile_seq
        held = self.remote.setdefault(router, {})
        listed = msg.exist if msg.kind == ABSOLUTE else msg.add
        hints: List[Optional[int]] = list(msg.hints) if msg.hints else [None] * len(listed)
        out: List[MobileEffect] = []
        if msg.kind == ABSOLUTE:
            keep = set(listed)
            for key in [k for k in held if k not in keep]:
                del held[key]
                out.append(RemoteAddressRemoved(key, router))
        for key, hint in zip(listed, hints):
            if key not in held:
                held[key] = hint
                out.append(RemoteAddressAdded(key, router, hint))
        for key in msg.delete:
            if held.pop(key, _ABSENT) is not _ABSENT:
                out.append(RemoteAddressRemoved(key, router))
        if not held:
            del self.remote[router]
        return out

    def flush_router(self, router: str) -> List[MobileEffect]:
        """Forget everything about ``router`` (restarted or gone)."""
        self.remote_seq.pop(router, None)
        self.mar_requested.pop(router, None)
        self.advertised.pop(router, None)
        return [RemoteAddressRemoved(key, router) for key in self.remote.pop(router, {})]

    def remote_addresses(self) -> Dict[str, Dict[str, Optional[int]]]:
        return {r: dict(keys) for r, keys in self.remote.items()}


_ABSENT = object()
