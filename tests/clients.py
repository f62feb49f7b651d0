"""Reusable AMQP client helpers for system tests (real proton clients, bounded waits).

* :func:`pump_until` runs several ``BlockingConnection`` event loops until a condition holds.
* :func:`collect` empties receivers' fetchers while pumping, until nothing new arrives for a while.
* :class:`Loop` drives one proton ``Container`` in the calling thread (``process()`` with a small
  timeout) until a condition holds or a deadline passes; handlers attach connections to it.
  Nothing runs in a background thread, so nothing can be left behind: :meth:`Loop.close` closes
  every connection it made and stops the container.
* :class:`BulkSender` / :class:`CountingReceiver`: MessagingHandlers for volume tests.
"""
from __future__ import annotations

import struct
import time
from typing import Callable, Iterable, Optional

from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container

TIMEOUT = 10.0

_SEQ = struct.Struct(">Q")


def pump_until(conns: Iterable, condition: Callable[[], bool], timeout: float = TIMEOUT,
               what: str = "condition") -> None:
    """Run several BlockingConnections' event loops until condition() holds (bounded)."""
    conns = list(conns)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        for c in conns:
            c.container.timeout = 0.005
            c.container.process()


def pump_for(conns: Iterable, seconds: float) -> None:
    """Run several BlockingConnections' event loops for a fixed (short) time."""
    conns = list(conns)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in conns:
            c.container.timeout = 0.005
            c.container.process()


def take(rcv) -> list:
    """Pop every (message, delivery) the BlockingReceiver's fetcher holds, without settling."""
    out = []
    while rcv.fetcher.incoming:
        out.append(rcv.fetcher.incoming.popleft())
    return out


def collect(conns: Iterable, receivers: list, idle: float = 0.5, timeout: float = TIMEOUT,
            settle: Optional[int] = Delivery.ACCEPTED, expect: Optional[int] = None,
            topup: bool = True) -> list:
    """Pump until no receiver got anything for ``idle`` seconds (or ``expect`` messages in total
    arrived); return one list of message bodies per receiver. Deliveries are given ``settle``
    (and settled) as they arrive unless it is None (then they stay unsettled).

    ``topup``: like ``BlockingReceiver.receive()``, grant one credit to a receiver that has none
    (proton's prefetch window is only refreshed by events that come after the message is read,
    so a fetcher with a window of 1 would otherwise stall after its first messages)."""
    conns = list(conns)
    got: list = [[] for _ in receivers]
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while True:
        progressed = False
        for i, rcv in enumerate(receivers):
            for msg, dlv in take(rcv):
                got[i].append(_body(msg))
                if settle is not None:
                    dlv.update(settle)
                    dlv.settle()
                progressed = True
        now = time.monotonic()
        if progressed:
            last = now
        if expect is not None and sum(len(g) for g in got) >= expect:
            # keep pumping a little: an extra (wrong) copy must have a chance to show up
            pump_for(conns, min(idle, 0.3))
            for i, rcv in enumerate(receivers):
                for msg, dlv in take(rcv):
                    got[i].append(_body(msg))
                    if settle is not None:
                        dlv.update(settle)
                        dlv.settle()
            return got
        if now - last > idle or now > deadline:
            return got
        if topup:
            for rcv in receivers:  # as BlockingReceiver.receive() does: one more when out
                if rcv.link.credit <= 0:
                    rcv.link.flow(1)
        for c in conns:
            c.container.timeout = 0.005
            c.container.process()


def _body(msg):
    body = msg.body
    return bytes(body) if isinstance(body, memoryview) else body


def seq_body(seq: int, size: int = 100) -> bytes:
    """A ``size``-byte binary body whose first 8 bytes are ``seq`` (big-endian)."""
    return _SEQ.pack(seq) + bytes(max(0, size - 8))


def body_seq(body: bytes) -> int:
    return _SEQ.unpack_from(body, 0)[0]


class Loop:
    """One proton Container driven in the calling thread with bounded waits."""

    def __init__(self) -> None:
        self.container = Container()
        self.container.timeout = 0.02
        self.container.start()
        self.connections: list = []

    def connect(self, url: str, handler: MessagingHandler):
        conn = self.container.connect(url, handler=handler)
        self.connections.append(conn)
        return conn

    def run_until(self, condition: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        """Process events until condition() holds (True) or the timeout passes (False)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            self.container.process()
        return True

    def run_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.container.process()

    def close(self, timeout: float = 3.0) -> None:
        for conn in self.connections:
            try:
                if not conn.state & conn.LOCAL_CLOSED:
                    conn.close()
            except Exception:
                pass
        self.run_until(lambda: all(c.state & c.REMOTE_CLOSED or c.transport is None
                                   for c in self.connections), timeout)
        self.container.stop()


class BulkSender(MessagingHandler):
    """Sends ``count`` messages made by ``make(i)`` to ``address`` as credit allows.

    ``presettled``: at-most-once. ``close_when_sent``: close the connection as soon as the last
    message was handed to proton (the tail is then still in proton's / the kernel's buffers).
    """

    def __init__(self, address: str, count: int, make: Callable[[int], Message],
                 presettled: bool = False, close_when_sent: bool = False) -> None:
        super().__init__(auto_settle=True)
        self.address = address
        self.count = count
        self.make = make
        self.presettled = presettled
        self.close_when_sent = close_when_sent
        self.sent = 0
        self.outcomes: dict = {}
        self.settled = 0
        self.sender = None
        self.first_sent_at: Optional[float] = None
        self.last_sent_at: Optional[float] = None

    def on_connection_opened(self, event):
        opts = AtMostOnce() if self.presettled else None
        self.sender = event.container.create_sender(event.connection, self.address, options=opts)

    def on_sendable(self, event):
        snd = event.sender
        while snd.credit > 0 and self.sent < self.count:
            if self.first_sent_at is None:
                self.first_sent_at = time.monotonic()
            snd.send(self.make(self.sent))
            self.sent += 1
        if self.sent == self.count and self.last_sent_at is None:
            self.last_sent_at = time.monotonic()
            if self.close_when_sent:
                event.connection.close()

    def _outcome(self, event, state):
        self.outcomes[state] = self.outcomes.get(state, 0) + 1
        self.settled += 1

    def on_accepted(self, event):
        self._outcome(event, Delivery.ACCEPTED)

    def on_rejected(self, event):
        self._outcome(event, Delivery.REJECTED)

    def on_released(self, event):  # proton reports MODIFIED here too
        self._outcome(event, event.delivery.remote_state)


class CountingReceiver(MessagingHandler):
    """Receives from ``address`` with a credit window of ``prefetch`` and accepts every message
    (proton's auto-accept); keeps the bodies and the arrival times."""

    def __init__(self, address: str, prefetch: int = 250, keep: bool = True) -> None:
        super().__init__(prefetch=prefetch)
        self.address = address
        self.bodies: list = []
        self.count = 0
        self.presettled = 0
        self.opened = False
        self.last_at: Optional[float] = None
        self.keep = keep

    def on_connection_opened(self, event):
        event.container.create_receiver(event.connection, self.address)

    def on_link_opened(self, event):
        self.opened = True

    def on_message(self, event):
        self.count += 1
        if event.delivery.settled:
            self.presettled += 1
        if self.keep:
            body = event.message.body
            # proton hands binary bodies out as memoryviews of a buffer it reuses: copy
            self.bodies.append(bytes(body) if isinstance(body, memoryview) else body)
        self.last_at = time.monotonic()
