"""The class of an address hash key, and the text of a mobile key.

Every address the router keeps has a hash key whose first character is its class (``M`` mobile,
``L`` this router, ``T`` topological, ``R`` another router, ``A`` another area, ``H`` an edge
router); a mobile key is ``M<phase><address>``. The core makes the keys
(router_core/addressing.py) and the agent reads them back to address text in its metrics, so the
class characters and :func:`mobile_text` live here, defined once.

Pure; must not import zmq, proton or any process package (router_core, router_io, agent,
supervisor).
"""
from typing import Optional

CLASS_LOCAL = "L"
CLASS_TOPOLOGICAL = "T"
CLASS_ROUTER = "R"
CLASS_AREA = "A"
CLASS_MOBILE = "M"
# 1.19's "edge summary" class: on an interior router every ``_edge/<edge id>/...`` address is
# the key ``H<edge id>``, served by that edge's downlink (and advertised like a mobile key)
CLASS_EDGE = "H"


def mobile_text(key: str) -> Optional[str]:
    """The address text of a mobile key (``M0orders`` -> ``orders``), None for other classes."""
    if len(key) >= 2 and key[0] == CLASS_MOBILE:
        return key[2:]
    return None
