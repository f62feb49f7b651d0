"""The IPC schema's common ground: version, error, delivery states, directions, termini, ids.

What every message module of the schema (common/ipc_*.py) and their users share: the wire
version, ``IpcError``, AMQP delivery-state codes, link directions, the terminus dict, the core's
id range and the router-wide id allocator. ``common.ipc`` re-exports every name.

Must not import proton, zmq or anything from router_io/agent/supervisor/router_core.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Optional


IPC_VERSION = 2


class IpcError(Exception):
    """A batch that does not follow this schema (wrong version, unknown code, bad shape)."""


# Delivery states, by their AMQP descriptor codes (0 = no state).
STATE_NONE = 0
STATE_RECEIVED = 0x23
STATE_ACCEPTED = 0x24
STATE_REJECTED = 0x25
STATE_RELEASED = 0x26
STATE_MODIFIED = 0x27
TERMINAL_STATES = (STATE_ACCEPTED, STATE_REJECTED, STATE_RELEASED, STATE_MODIFIED)
STATE_NAMES = {STATE_NONE: "none", STATE_RECEIVED: "received", STATE_ACCEPTED: "accepted",
               STATE_REJECTED: "rejected", STATE_RELEASED: "released",
               STATE_MODIFIED: "modified"}

# Link directions, from the router's point of view.
DIR_IN = 0   # the router receives on this link (the client is a sender)
DIR_OUT = 1  # the router sends on this link (the client is a receiver)

# A terminus (source or target) as it crosses processes: a dict with these keys. ``type``:
# TERMINUS_SOURCE, TERMINUS_TARGET or TERMINUS_COORDINATOR (a transaction coordinator target);
# the last four fields are AMQP-encoded bytes (None: absent), opaque to the core.
TERMINUS_FIELDS = ("type", "address", "dynamic", "durable", "expiry", "timeout",
                   "distribution_mode", "capabilities", "properties", "filter", "outcomes")
TERMINUS_SOURCE = 1
TERMINUS_TARGET = 2
TERMINUS_COORDINATOR = 3


def terminus(kind: int, address: Optional[str], dynamic: bool = False,
             capabilities: Any = None) -> dict:
    """A terminus dict with proton's defaults (not durable, expires with the session)."""
    return {"type": kind, "address": address, "dynamic": dynamic, "durable": 0, "expiry": 1,
            "timeout": 0, "distribution_mode": 0, "capabilities": capabilities,
            "properties": None, "filter": None, "outcomes": None}


# Ids the core mints (links it attaches itself): far above any peer's generations of ids
CORE_ID_BASE = 1 << 60


GENERATION_SPAN = 1 << 40  # ids one incarnation of a peer can mint before the next one's range


def id_allocator(peer_index: int, peer_count: int, generation: int = 0) -> Callable[[], int]:
    """Router-wide unique ids without coordination: peer ``p`` of ``n`` hands out p+1, p+1+n, ...

    A restarted peer (``generation`` g > 0) starts at ``g * GENERATION_SPAN``, so no id of its
    dead predecessor that the core may still name is ever reused. The allocator is the
    ``__next__`` of an ``itertools.count``: a worker mints one per inbound delivery, and a C
    call costs less than a Python method's frame.
    """
    if not 0 <= peer_index < peer_count:
        raise ValueError("peer_index out of range")
    return itertools.count(generation * GENERATION_SPAN + peer_index + 1, peer_count).__next__
