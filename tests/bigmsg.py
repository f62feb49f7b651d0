"""Large-message AMQP clients for tests and benchmarks: proton engines on non-blocking sockets,
all pumped by one loop (bounded waits), so neither side ever holds a whole large message.

A :class:`BigSender` writes one message of ``size`` body bytes a slice at a time as its
transport drains (it can abort half way); a :class:`BigReceiver` reads deliveries as they arrive
and keeps only their length and CRC (it can read slowly). Messages have a properties section
(``to``) and one data section; the body is a repeated 64 KB pattern, so its CRC is known.
``raw=True`` (both): the delivery is the pattern alone, bytes that are no AMQP sections.
"""
from __future__ import annotations

import select
import socket
import time
import zlib
from typing import Callable, Optional

import proton
from proton import Message

from psutil_free import children_of

_BLOCK = bytes(range(256)) * 256  # 64 KB body pattern


def body_crc(size: int) -> int:
    crc = 0
    left = size
    while left:
        n = min(left, len(_BLOCK))
        crc = zlib.crc32(_BLOCK[:n], crc)
        left -= n
    return crc


def message_head(size: int, address: Optional[str] = None, app: Optional[dict] = None) -> bytes:
    """The bytes before the body: properties (``to``, if given) and the data section header."""
    probe = Message(address=address, properties=app, body=b"\0" * 300).encode()
    prefix = probe[:-(300 + 5)]  # the data section: 00 53 75 b0 <u32 length> <bytes>
    return prefix + b"\x00\x53\x75\xb0" + size.to_bytes(4, "big")


class Peer:
    """One AMQP connection (proton engine over a non-blocking socket)."""

    def __init__(self, port: int, container: str = "bigmsg", max_frame: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.transport = proton.Transport()
        if max_frame:
            self.transport.max_frame_size = max_frame
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.conn = proton.Connection()
        self.conn.container = container
        self.transport.bind(self.conn)
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        self.closed = False
        self.read_limit = 1 << 30  # bytes per pump round (a slow reader lowers it)

    def io(self, readable: bool) -> None:
        t = self.transport
        # heartbeats (empty frames) as the router's idle-time-out asks: a receiver of a message
        # that takes longer than that to cross has nothing else to send meanwhile
        t.tick(time.monotonic())
        while t.pending() > 0:
            try:
                n = self.sock.send(t.peek(min(t.pending(), 262144)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                t.close_head()
                break
            t.pop(n)
        if readable and not self.closed:
            budget = self.read_limit
            while budget > 0:
                cap = t.capacity()
                if cap <= 0:
                    break
                try:
                    data = self.sock.recv(min(cap, 65536, budget))
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    t.close_tail()
                    self.closed = True
                    break
                t.push(data)
                budget -= len(data)

    def wants_write(self) -> bool:
        return self.transport.pending() > 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class BigSender:
    """Sends one message of ``size`` body bytes to ``address`` (a slice at a time)."""

    def __init__(self, peer: Peer, address: str, size: int, settled: bool = False,
                 abort_at: Optional[int] = None, name: str = "big-sender",
                 link: Optional[proton.Sender] = None, raw: bool = False,
                 hold_at: Optional[int] = None) -> None:
        """``link``: a sender the peer answers an attach with (a broker's side of a link the
        router attached); else a new one to ``address``. ``raw``: no message sections, the
        ``size`` pattern bytes alone. ``hold_at``: stop after that many bytes (the delivery
        stays partial) until the caller sets ``hold_at`` to None."""
        self.peer = peer
        self.link = link if link is not None else peer.session.sender(name)
        if link is None:
            self.link.target.address = address
        if settled:
            self.link.snd_settle_mode = proton.Link.SND_SETTLED
        self.link.open()
        self.head = b"" if raw else message_head(size)
        self.size = size
        self.total = len(self.head) + size
        self.sent = 0
        self.abort_at = abort_at
        self.hold_at = hold_at
        self.delivery = None
        self.done = False
        self.aborted = False
        self.settled = settled

    def work(self) -> None:
        if self.done or self.link.credit <= 0 and self.delivery is None:
            return
        if self.delivery is None:
            self.delivery = self.link.delivery(b"big")
        # keep a few MB inside proton, no more
        small = self.total <= 65536  # sent at once, even behind another sender's bytes
        while self.sent < self.total and (small or self.link.session.outgoing_bytes < 1 << 20):
            if self.abort_at is not None and self.sent >= self.abort_at:
                self.delivery.abort()
                self.aborted = True
                self.done = True
                return
            if self.hold_at is not None and self.sent >= self.hold_at:
                return
            if self.sent < len(self.head):
                piece = self.head[self.sent:]
            else:
                off = (self.sent - len(self.head)) % len(_BLOCK)
                piece = _BLOCK[off:off + min(len(_BLOCK) - off, self.total - self.sent)]
            self.link.send(piece)
            self.sent += len(piece)
        if self.sent >= self.total:
            self.link.advance()
            if self.settled:
                self.delivery.settle()
            self.done = True

    def outcome(self) -> int:
        return self.delivery.remote_state if self.delivery is not None else 0


class BigReceiver:
    """Receives deliveries on ``address``; keeps (length, crc, aborted) of each."""

    def __init__(self, peer: Peer, address: str, credit: int = 10, name: str = "big-receiver",
                 accept: bool = True, raw: bool = False) -> None:
        """``raw``: every byte of a delivery counts as its body (no sections looked for)."""
        self.peer = peer
        self.link = peer.session.receiver(name)
        self.link.source.address = address
        self.link.open()
        self.link.flow(credit)
        self.messages: list = []   # (body length or -1, crc, aborted, arrival time)
        self.partial = 0           # bytes of the delivery in progress
        self.first_byte_at: Optional[float] = None
        self._head = bytearray()
        self._crc = 0
        self._body = 0
        self.accept = accept
        self.raw = raw
        self._reset()

    def work(self) -> None:
        link = self.link
        while True:
            d = link.current
            if d is None:
                return
            if d.aborted:
                self.messages.append((-1, 0, True, time.monotonic()))
                d.settle()
                self._reset()
                continue
            data = link.recv(1 << 20)
            while data:
                self._take(data)
                data = link.recv(1 << 20)
            if d.partial:
                return
            if self.first_byte_at is None:
                self.first_byte_at = time.monotonic()
            self.messages.append((self._body, self._crc, False, time.monotonic()))
            # advance first: settling the current delivery advances the link itself, and an
            # advance after it would skip the next delivery if its first bytes are already in
            link.advance()
            if self.accept:
                d.update(proton.Delivery.ACCEPTED)
                d.settle()
            link.flow(1)
            self._reset()

    def _reset(self) -> None:
        self._head = None if self.raw else bytearray()
        self._crc = 0
        self._body = 0
        self.partial = 0

    def _take(self, data: bytes) -> None:
        self.partial += len(data)
        if self.first_byte_at is None:
            self.first_byte_at = time.monotonic()
        if self._head is not None:
            self._head += data
            pos = bytes(self._head).find(b"\x00\x53\x75\xb0")
            if pos < 0 or len(self._head) < pos + 8:
                return
            body = bytes(self._head[pos + 8:])
            self._head = None
            data = body
        self._crc = zlib.crc32(data, self._crc)
        self._body += len(data)


def pump(peers: list, until: Callable[[], bool], timeout: float,
         workers: list = (), on_round: Optional[Callable[[], None]] = None) -> None:
    """Run every peer's I/O and every worker's ``work()`` until ``until()`` (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        for w in workers:
            w.work()
        if until():
            return
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        for p in peers:
            p.io(False)
        socks = [p.sock for p in peers if not p.closed]
        wsocks = [p.sock for p in peers if not p.closed and p.wants_write()]
        r, _, _ = select.select(socks, wsocks, [], 0.02)
        rs = set(r)
        for p in peers:
            p.io(p.sock in rs)
        if on_round is not None:
            on_round()


def rss_kb(pid: int) -> int:
    """Resident set size of a process in kB (/proc)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pids(pid: int) -> list:
    """``pid`` and its descendants (/proc)."""
    out = [pid]
    i = 0
    while i < len(out):
        out.extend(children_of(out[i]))
        i += 1
    return out


def tree_rss_kb(pid: int) -> int:
    return sum(rss_kb(p) for p in tree_pids(pid))
