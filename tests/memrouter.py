"""An in-memory router for tests: proton client engines <-> WorkerEngine <-> RouterCore.

No sockets and no processes: bytes are pumped between client transports and the worker's
transports, and the worker's commands go to the core (through the real IPC codec) and back.
This is the convention-4 harness: the AMQP engine tested by pumping bytes in memory.
"""
from __future__ import annotations

import itertools
from typing import Optional

import proton
from proton import Message

from common import ipc
from router_core.core_select import get_core_class
from router_io.engine_select import get_engine_class

LISTENER = {"name": "test-listener", "host": "127.0.0.1", "port": "0", "role": "normal",
            "linkCapacity": 250, "saslMechanisms": "ANONYMOUS", "idleTimeoutSeconds": 0}


class Client:
    """A bare proton client engine connected to the in-memory router."""

    def __init__(self, router: "MemRouter", container: str) -> None:
        self.transport = proton.Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = proton.Connection()
        self.connection.container = container
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.server = router.engine.new_connection(dict(LISTENER), f"mem:{container}", "in")
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()
        self._tags = itertools.count(1)

    def sender(self, address: Optional[str], settled: bool = False) -> proton.Sender:
        snd = self.session.sender(f"snd-{address}-{next(self._tags)}")
        snd.target.address = address
        if settled:
            snd.snd_settle_mode = proton.Link.SND_SETTLED
        snd.open()
        return snd

    def receiver(self, address: Optional[str], credit: int = 10, dynamic: bool = False
                 ) -> proton.Receiver:
        rcv = self.session.receiver(f"rcv-{address}-{next(self._tags)}")
        if dynamic:
            rcv.source.dynamic = True
        else:
            rcv.source.address = address
        rcv.open()
        if credit:
            rcv.flow(credit)
        return rcv

    def send(self, snd: proton.Sender, body: str, to: Optional[str] = None) -> proton.Delivery:
        dlv = snd.delivery(str(next(self._tags)).encode())
        snd.send(Message(body=body, address=to).encode())
        snd.advance()
        if snd.snd_settle_mode == proton.Link.SND_SETTLED:
            dlv.settle()
        return dlv

    @staticmethod
    def receive_all(rcv: proton.Receiver) -> list:
        """Read every complete delivery waiting on the receiver: [(delivery, Message)]."""
        out = []
        while rcv.current is not None and not rcv.current.partial and rcv.current.readable:
            dlv = rcv.current
            msg = Message()
            msg.decode(rcv.recv(dlv.pending))
            rcv.advance()
            out.append((dlv, msg))
        return out

    def drain_events(self) -> None:
        while self.collector.peek() is not None:
            self.collector.pop()


class MemRouter:
    def __init__(self, router_id: str = "Router.Mem", engine_cls=None, **core_kwargs) -> None:
        self.engine = (engine_cls or get_engine_class())(router_id, 0, 2)
        self.core = get_core_class()(router_id, **core_kwargs)
        self.clients: list[Client] = []
        self.now = 0.0

    def client(self, container: str = "client") -> Client:
        c = Client(self, container)
        self.clients.append(c)
        self.run()
        return c

    def disconnect(self, client: Client) -> None:
        client.server.close_input()
        client.server.close_output()
        self.clients.remove(client)
        self.engine.process_events()
        self.engine.drop_connection(client.server)
        self.run()

    stalled = None  # a Client whose socket is never read (tests of a slow receiver)
    # as the worker: a connection held by Q2 (Connection.q2_held) takes no more bytes
    honour_q2 = False

    def _pump_once(self) -> bool:
        moved = False
        for c in self.clients:
            size = min(c.transport.pending(), c.server.capacity())
            if self.honour_q2 and c.server.q2_held():
                size = 0
            if size > 0:  # never push more than the server transport can take
                out = c.transport.peek(size)
                c.transport.pop(len(out))
                c.server.push(out, len(out))
                moved = True
            if c is self.stalled:  # a client that never reads what the router writes to it
                continue
            cap = c.transport.capacity()
            buf = bytearray(max(cap, 0))
            n = c.server.output(buf) if cap > 0 else 0
            if n > 0:
                c.server.consumed(n)
                c.transport.push(bytes(buf[:n]))
                moved = True
        return moved

    def on_commands(self, commands: list) -> None:
        """Called with every command batch the engine hands to the core (a hook for tests)."""

    def exchange(self) -> bool:
        """One round of engine events -> core -> effects -> engine; True if anything moved."""
        moved = False
        self.engine.process_events()
        commands = self.engine.take_commands()
        if commands:
            self.on_commands(commands)
            peer, decoded = ipc.decode_batch(ipc.encode_batch(0, commands))
            self.core.handle_batch(peer, decoded, self.now)
            moved = True
        for peer, effects in self.core.take_effects().items():
            _, decoded = ipc.decode_batch(ipc.encode_batch(-1, effects))
            for fx in decoded:
                self.engine.apply(fx)
                moved = True
        return moved

    def run(self, rounds: int = 50) -> None:
        """Pump bytes, events, commands and effects until nothing moves (bounded)."""
        for _ in range(rounds):
            moved = self._pump_once()
            if not self.exchange() and not moved:
                return
