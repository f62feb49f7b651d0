"""The interior routing protocol of Qpid Dispatch 1.x (protocol version 1), sans-I/O.

Modules, each owning one concern and taking ``now`` as an argument:

* :mod:`~agent.routing.messages` -- typed control messages, decode/encode, addresses;
* :mod:`~agent.routing.hello` -- HELLO protocol, neighbours;
* :mod:`~agent.routing.linkstate` -- own and remote link states, RA/LSR/LSU;
* :mod:`~agent.routing.node` -- known routers, topology reports for the core (which computes
  the routes: ``router_core/routetable.py``);
* :mod:`~agent.routing.mobile` -- mobile-address sync (MAU/MAR);
* :mod:`~agent.routing.engine` -- :class:`RoutingEngine`, the facade the control plane drives;
* :mod:`~agent.routing.effects` / :mod:`~agent.routing.errors` -- what they return / raise.

Nothing in this package imports a proton Container, zmq, sockets or clocks.
"""
from agent.routing.effects import (Effect, Log, RemoteAddressAdded, RemoteAddressRemoved,
                                   RouterState, Send, Topology)
from agent.routing.engine import RoutingEngine
from agent.routing.errors import ProtocolError, RoutingError

__all__ = ["RoutingEngine", "Send", "Topology", "RouterState", "RemoteAddressAdded",
           "RemoteAddressRemoved", "Log", "Effect", "ProtocolError", "RoutingError"]
