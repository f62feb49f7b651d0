"""multiTenant address spaces: the address a tenant's link or message is routed by.

A connection of a ``multiTenant: yes`` listener lives in its vhost's space (the open's
hostname, or the vhost its policy found): the router routes its addresses as
``<vhost>/<address>``, so two tenants using ``orders`` never meet. As in Qpid Dispatch 1.19,
the router's own address forms stay outside every tenant's space: ``_local/...`` (this
router), ``_topo/...`` (a router or area: a dynamic receiver's reply address is one) and
``_edge/...`` (an edge router) are routed as they are, whichever tenant uses them.

The scheme forms (``amqp://host/x``, ``amqp:/x``, ``/x``) are stripped first, as the core
strips them (``normalize``, which router_core.addressing uses too), so the
space is put in front of what is routed on.

Pure; must not import zmq, proton, router_io, router_core or agent.
"""
from typing import Optional

# the router's own address forms: never in a tenant's space
OUTSIDE_SPACES = ("_local/", "_topo/", "_edge/")


def normalize(address: str) -> str:
    """Strip ``amqp://host/``, ``amqp:/`` and one leading ``/``: what remains is routed on
    (the core's address keys use it too: router_core.addressing)."""
    if address.startswith("amqp:"):
        if address.startswith("amqp://"):
            slash = address.find("/", 7)
            address = "" if slash < 0 else address[slash + 1:]
        else:
            address = address[5:]
    if address.startswith("/"):
        address = address[1:]
    return address


def tenant_address(space: Optional[str], address: Optional[str]) -> Optional[str]:
    """The address routed for ``address`` used in the tenant space ``space`` (a vhost name;
    empty or None: no space, ``address`` as it is)."""
    if not space or address is None:
        return address
    text = normalize(address)
    if text.startswith(OUTSIDE_SPACES):
        return address
    return f"{space}/{text}"
