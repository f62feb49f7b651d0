"""The test endpoints of ``qdrouterd -T`` (1.19's core_test_hooks module), run by the agent.

With ``-T`` (spec ``testHooks``) the agent attaches, on its internal connection in the core:

* a receiver on ``org.apache.qpid.dispatch.router/test/sink``, which ACCEPTS every delivery,
  and one on ``.../test/discard``, which REJECTS every delivery (pre-settled ones are
  consumed);
* senders on ``.../test/source`` (unsettled) and ``.../test/source_ps`` (pre-settled) that
  send, as long as the core gives them credit (it does while a client receives there), 1.19's
  test messages: header durable false, properties message-id null, application property
  ``sequence`` (a counter shared by both) and the amqp-value body ``"Sequence: N"``.

The core refuses the attaches 1.19 refuses (``RouterCore(test_hooks=True)``,
``lifecycle.TEST_REFUSALS``: a receiver on sink or discard, a sender on source, anything on
``.../test/deny``: ``qd:forbidden`` with 1.19's texts). Differences from 1.19: a client's sender to sink/discard gets the router's usual
window (1.19 grants one credit at a time), and ``.../test/echo`` is not provided. Without
``-T`` none of these exist.

Must not import router_io or router_core.core.
"""
from __future__ import annotations

from typing import Callable

from proton import Message

from common import ipc

PREFIX = "org.apache.qpid.dispatch.router/test/"
WINDOW = 250


class TestHooks:
    """The test endpoints on the agent's connection ``conn_id``."""

    __test__ = False  # not a pytest class

    def __init__(self, conn_id: int, new_id: Callable[[], int],
                 send: Callable[..., None]) -> None:
        self.conn_id = conn_id
        self.new_id = new_id
        self.send = send
        self.sinks: dict[int, list] = {}    # link id -> [outcome, received, limit]
        self.sources: dict[int, list] = {}  # link id -> [presettled, credit]
        self.sequence = 0

    def start(self) -> None:
        for name, outcome in (("sink", ipc.STATE_ACCEPTED), ("discard", ipc.STATE_REJECTED)):
            link_id = self.new_id()
            self.sinks[link_id] = [outcome, 0, WINDOW]
            self.send(ipc.LinkAttach(link_id, self.conn_id, ipc.DIR_OUT, f"test:{name}",
                                     PREFIX + name, False, False, WINDOW, "endpoint"),
                      ipc.LinkFlow(link_id, WINDOW, False))
        for name, presettled in (("source", False), ("source_ps", True)):
            link_id = self.new_id()
            self.sources[link_id] = [presettled, 0]
            self.send(ipc.LinkAttach(link_id, self.conn_id, ipc.DIR_IN, f"test:{name}",
                                     PREFIX + name, False, presettled, WINDOW, "endpoint"))

    def handles(self, link_id: int) -> bool:
        return link_id in self.sinks or link_id in self.sources

    def on_deliver(self, fx: ipc.Deliver) -> None:
        """A delivery to sink (accepted) or discard (rejected); the window moves on."""
        sink = self.sinks[fx.link_id]
        if not fx.settled:
            self.send(ipc.Disposition(fx.dlv_id, sink[0], True, None))
        sink[1] += 1
        if sink[2] - sink[1] < WINDOW // 2:
            sink[2] = sink[1] + WINDOW
            self.send(ipc.LinkFlow(fx.link_id, sink[2], False))

    def on_credit(self, fx: ipc.LinkCredit) -> None:
        """Credit for a source: as many test messages."""
        source = self.sources[fx.link_id]
        source[1] += fx.credit
        while source[1] > 0:
            source[1] -= 1
            self.send(ipc.Transfer(self.new_id(), fx.link_id, None, source[0], 4,
                                   self._message()))

    def _message(self) -> bytes:
        msg = Message(durable=False, properties={"sequence": self.sequence},
                      body=f"Sequence: {self.sequence}")
        self.sequence += 1
        return msg.encode()
