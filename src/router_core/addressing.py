"""Address normalisation and hash keys, as in Qpid Dispatch 1.x (see inter-router-protocol.md).

Owns: turning a wire address (``amqp://host/x``, ``amqp:/_topo/0/R1/x``, ``/x``...) into the
normalised text and the one-character-class hash key the core, the routing protocol and management
all use (``M0x``, ``Lx``, ``Tx``, ``R<id>``, ``A<area>``), and the dynamic (temporary) addresses.

The key class characters and a mobile key's text are common/addrclass.py's (the agent reads keys
back to text with it). Pure functions only: no state, no caching (the core keeps its own bounded
cache). Must not import zmq, proton, sockets, clocks, logging handlers, router_io, agent or
supervisor.
"""

from common.addrclass import (  # noqa: F401 - the key classes, one definition (the agent's too)
    CLASS_AREA, CLASS_EDGE, CLASS_LOCAL, CLASS_MOBILE, CLASS_ROUTER, CLASS_TOPOLOGICAL, mobile_text)
from common.tenant import normalize  # noqa: F401 - one definition, the tenants' too

LOCAL_PREFIX = "_local/"
TOPO_PREFIX = "_topo/"
EDGE_PREFIX = "_edge/"   # 1.19: an edge router's own addresses (``_edge/<edge id>/...``)
TEMP_TARGET_PREFIX = "_$temp."

# On an edge router, every address that belongs to another router (``_topo/0/<other>/...``,
# ``_edge/<other>/...``, another area) is this one key: the uplink to the interior router
EDGE_UPLINK_KEY = "L_edge"


def address_key(address: str, router_id: str, phase: int = 0, area: str = "0",
                edge: bool = False) -> str:
    """Return the hash key of ``address`` seen from router ``router_id`` in ``area``.

    ``phase`` applies to mobile addresses only (0 by default; waypoints use 1..9). ``edge``:
    the router is an edge router (1.19's edge mode): another router's topological address,
    or another edge's ``_edge/`` address, is :data:`EDGE_UPLINK_KEY`.
    """
    text = normalize(address)
    if text.startswith(LOCAL_PREFIX):
        return CLASS_LOCAL + text[7:]
    if text.startswith(TOPO_PREFIX):
        parts = text.split("/", 3)  # "_topo", area, router, rest
        if len(parts) >= 3 and parts[1] and parts[2]:
            topo_area = parts[1]
            if topo_area != area:
                return EDGE_UPLINK_KEY if edge else CLASS_AREA + topo_area
            router = parts[2]
            rest = parts[3] if len(parts) > 3 else ""
            if router == "all":
                return CLASS_TOPOLOGICAL + rest
            if router == router_id:
                return CLASS_LOCAL + rest
            return EDGE_UPLINK_KEY if edge else CLASS_ROUTER + router
    if text.startswith(EDGE_PREFIX):
        parts = text.split("/", 2)  # "_edge", edge id, rest
        if len(parts) >= 2 and parts[1]:
            if parts[1] == router_id:
                return CLASS_LOCAL + (parts[2] if len(parts) > 2 else "")
            return EDGE_UPLINK_KEY if edge else CLASS_EDGE + parts[1]
    return CLASS_MOBILE + str(phase) + text


def temp_address(router_id: str, rand: str, target: bool = False, edge: bool = False) -> str:
    """A dynamic address: ``amqp:/_topo/0/<router id>/temp.<rand>`` for a dynamic source (a
    receiver's private address, routable back to this router; on an edge router
    ``amqp:/_edge/<router id>/temp.<rand>``, as 1.19), ``amqp:/_$temp.<rand>`` for a dynamic
    target."""
    if target:
        return "amqp:/" + TEMP_TARGET_PREFIX + rand
    if edge:
        return "amqp:/" + EDGE_PREFIX + router_id + "/temp." + rand
    return "amqp:/_topo/0/" + router_id + "/temp." + rand


FALLBACK_CAPABILITY = b"qd.fallback"
EDGE_DOWNLINK_CAPABILITY = b"qd.router-edge-downlink"
HEARTBEAT_ADDRESS = "_$qd.edge_heartbeat"  # 1.19's heartbeat server (every router mode)


def has_capability(encoded: object, name: bytes) -> bool:
    """Whether AMQP-encoded terminus capabilities (a symbol, or an array or list of symbols, as
    ``ipc.TERMINUS_FIELDS`` carries them) name ``name``. Anything else (no capabilities, other
    types, a malformed encoding) is False: read at attach only, never raises."""
    if not isinstance(encoded, (bytes, bytearray, memoryview)):
        return False
    data = bytes(encoded)
    try:
        return name in _symbols(data)
    except (IndexError, ValueError):
        return False


def _symbols(data: bytes) -> list:
    code = data[0]
    if code == 0xa3:
        return [data[2:2 + data[1]]]
    if code == 0xb3:
        return [data[5:5 + int.from_bytes(data[1:5], "big")]]
    if code in (0xe0, 0xf0):  # array: size, count, element constructor, elements
        wide = code == 0xf0
        pos = 9 if wide else 3
        count = int.from_bytes(data[5:9], "big") if wide else data[2]
        elem = data[pos]
        pos += 1
        if elem not in (0xa3, 0xb3):
            return []
        out = []
        for _ in range(count):
            if elem == 0xa3:
                size, pos = data[pos], pos + 1
            else:
                size, pos = int.from_bytes(data[pos:pos + 4], "big"), pos + 4
            out.append(data[pos:pos + size])
            pos += size
        return out
    if code in (0xc0, 0xd0):  # list: size, count, then self-describing elements
        wide = code == 0xd0
        pos = 9 if wide else 3
        count = int.from_bytes(data[5:9], "big") if wide else data[2]
        out = []
        for _ in range(count):
            elem = data[pos]
            if elem == 0xa3:
                size = data[pos + 1]
                out.append(data[pos + 2:pos + 2 + size])
                pos += 2 + size
            elif elem == 0xb3:
                size = int.from_bytes(data[pos + 1:pos + 5], "big")
                out.append(data[pos + 5:pos + 5 + size])
                pos += 5 + size
            else:
                return out  # not a symbol: the rest cannot be walked without a full decoder
        return out
    return []
