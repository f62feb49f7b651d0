"""Address normalisation and hash keys, as in Qpid Dispatch 1.x (see inter-router-protocol.md).

Owns: turning a wire address (``amqp://host/x``, ``amqp:/_topo/0/R1/x``, ``/x``...) into the
normalised text and the one-character-class hash key the core, the routing protocol and management
all use (``M0x``, ``Lx``, ``Tx``, ``R<id>``, ``A<area>``), and the dynamic (temporary) addresses.

Pure functions only: no state, no caching (the core keeps its own bounded cache). Must not import
zmq, proton, sockets, clocks or logging handlers; it is shared by the core and the agent.
"""
from typing import Optional

LOCAL_PREFIX = "_local/"
TOPO_PREFIX = "_topo/"
TEMP_TARGET_PREFIX = "_$temp."

# Key class characters (first character of every hash key).
CLASS_LOCAL = "L"
CLASS_TOPOLOGICAL = "T"
CLASS_ROUTER = "R"
CLASS_AREA = "A"
CLASS_MOBILE = "M"


def normalize(address: str) -> str:
    """Strip ``amqp://host/``, ``amqp:/`` and one leading ``/``: what remains is routed on."""
    if address.startswith("amqp:"):
        if address.startswith("amqp://"):
            slash = address.find("/", 7)
            address = "" if slash < 0 else address[slash + 1:]
        else:
            address = address[5:]
    if address.startswith("/"):
        address = address[1:]
    return address


def address_key(address: str, router_id: str, phase: int = 0, area: str = "0") -> str:
    """Return the hash key of ``address`` seen from router ``router_id`` in ``area``.

    ``phase`` applies to mobile addresses only (0 by default; waypoints use 1..9).
    """
    text = normalize(address)
    if text.startswith(LOCAL_PREFIX):
        return CLASS_LOCAL + text[7:]
    if text.startswith(TOPO_PREFIX):
        parts = text.split("/", 3)  # "_topo", area, router, rest
        if len(parts) >= 3 and parts[1] and parts[2]:
            topo_area = parts[1]
            if topo_area != area:
                return CLASS_AREA + topo_area
            router = parts[2]
            rest = parts[3] if len(parts) > 3 else ""
            if router == "all":
                return CLASS_TOPOLOGICAL + rest
            if router == router_id:
                return CLASS_LOCAL + rest
            return CLASS_ROUTER + router
    return CLASS_MOBILE + str(phase) + text


def mobile_text(key: str) -> Optional[str]:
    """The address text of a mobile key (``M0orders`` -> ``orders``), None for other classes."""
    if len(key) >= 2 and key[0] == CLASS_MOBILE:
        return key[2:]
    return None


def temp_address(router_id: str, rand: str, target: bool = False) -> str:
    """A dynamic address: ``amqp:/_topo/0/<router id>/temp.<rand>`` for a dynamic source (a
    receiver's private address, routable back to this router), ``amqp:/_$temp.<rand>`` for a
    dynamic target."""
    if target:
        return "amqp:/" + TEMP_TARGET_PREFIX + rand
    return "amqp:/_topo/0/" + router_id + "/temp." + rand
