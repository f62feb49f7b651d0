"""Fast AMQP 1.0 load-generating clients: ``sender`` and ``receiver``, one link each.

Why not proton's Container/MessagingHandler: it tops out near 10k msg/s per process, so it would
measure itself rather than the router. These clients run their own loop over one non-blocking
socket and proton's sans-I/O engine (Transport, Connection, Collector); setup uses the Python
wrappers, every per-message step calls ``cproton_ffi.lib`` directly (a few µs of CPU per message).

Must not import anything from ``src/`` (it benchmarks other routers too, e.g. a real qdrouterd).

Timestamp embedding
    The body is an AMQP binary of BODY_SIZE bytes (minimum 16): zero padding, then the 8-byte
    marker ``TS_MAGIC``, then the send time as a big-endian uint64 of ``time.time_ns()``. The body
    is the last section, so the timestamp is the last 8 bytes of the encoded message. The sender
    encodes one ``proton.Message(body=..., address=ADDRESS)`` once and overwrites those 8 bytes in
    a bytearray per message. The receiver checks the marker at ``len-16`` (O(1)); if a router
    appended something after the body it falls back to searching for the marker. Latency is
    receive ``time_ns()`` minus send time: only meaningful with both clients on one host.

Output: one human summary on stderr and ONE JSON line (appended to ``--out FILE``, else stdout).
Keys are stable (a Spark job joins them with router-side metrics); absent values are ``null``:

    schema            "loadgen/1"
    run_id            --run-id (free text, joins clients of one benchmark run), or null
    role              "sender" | "receiver"
    pid, url, address, listen (bool: receiver accepted the connection itself, --listen)
    count             messages sent (sender) / received (receiver)
    target_count      --count
    body_size         bytes of body (receiver: size of the last encoded message is not reported)
    presettled        sender: --presettled; receiver: whether the deliveries arrived settled
    credit            receiver credit window; null for the sender
    window            sender max unsettled in flight; null when unlimited or for the receiver
    start_ts, end_ts  unix seconds (float) of the first and last message activity
    elapsed_s         end_ts - start_ts
    msgs_per_s        count / elapsed_s
    cpu_user_s, cpu_sys_s   own process CPU from link-ready to done (resource.getrusage)
    cpu_us_per_msg    (cpu_user_s + cpu_sys_s) * 1e6 / count
    lat_p50_us, lat_p90_us, lat_p99_us, lat_max_us    receiver only (nearest-rank percentiles)
    lat_missing       receiver: messages without a readable timestamp
    accepted, released, rejected, modified            sender, unsettled mode only (else null)
    settled           sender: deliveries settled by the peer (unsettled mode); else null
    error             null, or a short text when the run ended abnormally (timeout, peer closed)
    per_second        list of {"t": unix second (int), "sent", "settled", "received",
                      "p50_us", "p99_us"}; counts are ints (0 when not this role's), the
                      percentiles are the receiver's latencies of messages received in that second
                      (null for the sender)
    paths             receiver with --record-trace: list of {"path": [router ids], "count"}, the
                      routers each message went through in order (its ``x-opt-qd.trace``
                      message annotation, ``0/`` prefixes removed); else null

Arrivals file (receiver ``--arrivals FILE``): one line per received message with a timestamp,
``<send time_ns> <receive time_ns>``, in arrival order (written at the end of the run).

Usage
    python benchmarks/loadgen.py receiver --url 127.0.0.1:5672 --address q1 --count 20000
    python benchmarks/loadgen.py sender   --url 127.0.0.1:5672 --address q1 --count 20000 \
        --body-size 100 --presettled
    # a steady 200 msg/s for 10 s; the receiver logs every message's send/receive time and,
    # on SIGTERM, stops and still writes its line (e.g. when messages may be lost)
    python benchmarks/loadgen.py receiver --address q1 --count 2000 --arrivals /tmp/arr.txt \
        --stop-on-sigterm &
    python benchmarks/loadgen.py sender --address q1 --count 2000 --rate 200
    # no router: the receiver listens, the sender connects to it
    python benchmarks/loadgen.py receiver --listen --url 127.0.0.1:5800 --count 20000 &
    python benchmarks/loadgen.py sender --url 127.0.0.1:5800 --count 20000
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from array import array
from typing import Any, Optional, Sequence

SCHEMA = "loadgen/1"
TS_MAGIC = b"\xa5LGTS\x5a\xc3\x01"
TS_TRAILER = len(TS_MAGIC) + 8
MIN_BODY_SIZE = TS_TRAILER
_TS = struct.Struct(">Q")
_TAG = struct.Struct(">Q")

PER_SECOND_KEYS = ("t", "sent", "settled", "received", "p50_us", "p99_us")
RESULT_KEYS = (
    "schema", "run_id", "role", "pid", "url", "address", "listen", "count", "target_count",
    "body_size", "presettled", "credit", "window", "start_ts", "end_ts", "elapsed_s", "msgs_per_s",
    "cpu_user_s", "cpu_sys_s", "cpu_us_per_msg", "lat_p50_us", "lat_p90_us", "lat_p99_us",
    "lat_max_us", "lat_missing", "accepted", "released", "rejected", "modified", "settled",
    "error", "per_second", "paths",
)


# --------------------------------------------------------------------------- pure parts

def percentile(sorted_values: Sequence[int], q: float) -> Optional[int]:
    """Nearest-rank percentile (q in 0..100) of an ascending sequence; None when empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(1, math.ceil(q / 100.0 * n))
    return sorted_values[min(rank, n) - 1]


def make_body(body_size: int, ts_ns: int = 0) -> bytes:
    """The body: zero padding, TS_MAGIC, big-endian uint64 timestamp (exactly body_size bytes)."""
    if body_size < MIN_BODY_SIZE:
        raise ValueError(f"body size must be at least {MIN_BODY_SIZE} bytes")
    return bytes(body_size - TS_TRAILER) + TS_MAGIC + _TS.pack(ts_ns)


def encode_template(address: str, body_size: int) -> tuple[bytearray, int]:
    """Encode one message once; return (buffer, offset of the 8 timestamp bytes)."""
    import proton

    encoded = bytearray(proton.Message(body=make_body(body_size), address=address).encode())
    offset = len(encoded) - 8
    if encoded[offset - len(TS_MAGIC):offset] != TS_MAGIC:  # body is not the last section?
        offset = encoded.rfind(TS_MAGIC) + len(TS_MAGIC)
    return encoded, offset


def embed_timestamp(buf: bytearray, offset: int, ts_ns: int) -> None:
    _TS.pack_into(buf, offset, ts_ns)


def extract_timestamp(buf: bytes | bytearray, n: int) -> Optional[int]:
    """The send time (ns) from an encoded message held in buf[:n], or None if not found."""
    start = n - TS_TRAILER
    if start >= 0 and buf.startswith(TS_MAGIC, start):
        return _TS.unpack_from(buf, n - 8)[0]
    i = buf.find(TS_MAGIC, 0, n)
    if i < 0 or i + TS_TRAILER > n:
        return None
    return _TS.unpack_from(buf, i + len(TS_MAGIC))[0]


class SecondBuckets:
    """Counts per unix second, bucketed without a dict look-up per message."""

    def __init__(self) -> None:
        self.seconds: list[int] = []
        self.counts: list[int] = []
        self._current = -1

    def add(self, now_ns: int, n: int = 1) -> None:
        sec = now_ns // 1_000_000_000
        if sec != self._current:
            self._current = sec
            self.seconds.append(sec)
            self.counts.append(0)
        self.counts[-1] += n

    def as_dict(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for s, c in zip(self.seconds, self.counts):
            out[s] = out.get(s, 0) + c
        return out


def per_second_series(sent: Optional[dict[int, int]] = None,
                      settled: Optional[dict[int, int]] = None,
                      received: Optional[dict[int, int]] = None,
                      latencies_by_second: Optional[dict[int, list[int]]] = None) -> list[dict]:
    """Merge per-second counts into the stable ``per_second`` list (ascending ``t``)."""
    sent, settled, received = sent or {}, settled or {}, received or {}
    lats = latencies_by_second or {}
    seconds = sorted(set(sent) | set(settled) | set(received) | set(lats))
    series = []
    for t in seconds:
        sec_lats = sorted(lats.get(t, ()))
        series.append({"t": t, "sent": sent.get(t, 0), "settled": settled.get(t, 0),
                       "received": received.get(t, 0), "p50_us": percentile(sec_lats, 50),
                       "p99_us": percentile(sec_lats, 99)})
    return series


def result_line(**fields: Any) -> dict:
    """A result record with every key of RESULT_KEYS (unknown keys rejected, missing ones null)."""
    unknown = set(fields) - set(RESULT_KEYS)
    if unknown:
        raise KeyError(f"unknown result keys: {sorted(unknown)}")
    record = {k: fields.get(k) for k in RESULT_KEYS}
    record["schema"] = SCHEMA
    if record["per_second"] is None:
        record["per_second"] = []
    return record


def throughput_fields(count: int, start_ns: Optional[int], end_ns: Optional[int],
                      cpu_user_s: float, cpu_sys_s: float) -> dict:
    elapsed = (end_ns - start_ns) / 1e9 if start_ns is not None and end_ns is not None else None
    return {
        "count": count,
        "start_ts": start_ns / 1e9 if start_ns is not None else None,
        "end_ts": end_ns / 1e9 if end_ns is not None else None,
        "elapsed_s": round(elapsed, 6) if elapsed is not None else None,
        "msgs_per_s": round(count / elapsed, 1) if elapsed and count else None,
        "cpu_user_s": round(cpu_user_s, 6),
        "cpu_sys_s": round(cpu_sys_s, 6),
        "cpu_us_per_msg": round((cpu_user_s + cpu_sys_s) * 1e6 / count, 3) if count else None,
    }


def paced_quota(rate: float, elapsed_s: float, sent: int) -> int:
    """How many more messages a sender paced at ``rate`` msg/s may send ``elapsed_s`` after it
    started, having sent ``sent``: the first goes at once, the k-th (0-based) at k/rate."""
    return max(0, int(elapsed_s * rate) + 1 - sent)


def paced_wait(rate: float, elapsed_s: float, sent: int) -> float:
    """Seconds until the next message of a sender paced at ``rate`` msg/s is due (message
    ``sent``, 0-based, is due ``sent / rate`` after the start), 0 when it is already due."""
    return max(0.0, sent / rate - elapsed_s)


TRACE_KEY = "x-opt-qd.trace"


def trace_path(encoded: bytes) -> Optional[tuple[str, ...]]:
    """The router ids of a message's ``x-opt-qd.trace`` annotation (``0/Router.A`` ->
    ``Router.A``), in order; None when the message has none. Decodes the message (proton):
    only with --record-trace, it costs tens of microseconds."""
    import proton
    msg = proton.Message()
    msg.decode(encoded)
    trace = (msg.annotations or {}).get(TRACE_KEY)
    if not isinstance(trace, (list, tuple)):
        return None
    return tuple(str(hop).split("/", 1)[-1] for hop in trace)


def paths_field(paths: dict) -> list[dict]:
    return [{"path": list(path), "count": n}
            for path, n in sorted(paths.items(), key=lambda item: (-item[1], item[0]))]


def write_arrivals(path: str, stamps: Sequence[int]) -> None:
    """``stamps`` is send, receive, send, receive, ... (ns): one ``send receive`` line each."""
    with open(path, "w", encoding="ascii") as f:
        for i in range(0, len(stamps) - 1, 2):
            f.write(f"{stamps[i]} {stamps[i + 1]}\n")


def read_arrivals(path: str) -> list[tuple[int, int]]:
    """(send time_ns, receive time_ns) per message, as ``write_arrivals`` wrote them."""
    out = []
    with open(path, encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                out.append((int(parts[0]), int(parts[1])))
    return out


def write_result(record: dict, out: Optional[str]) -> None:
    line = json.dumps(record, separators=(",", ":"))
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    else:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def parse_url(url: str) -> tuple[str, int]:
    url = url.split("://", 1)[-1]
    host, sep, port = url.rpartition(":")
    if not sep:
        return url or "127.0.0.1", 5672
    return (host or "127.0.0.1"), int(port or 5672)


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


# --------------------------------------------------------------------------- engine loop

class RunError(Exception):
    pass


class Client:
    """One connection: a non-blocking socket pumped into/out of a proton Transport."""

    IO_CHUNK = 256 * 1024

    def __init__(self, sock: socket.socket, server: bool) -> None:
        import proton
        from cproton_ffi import ffi, lib

        self.ffi, self.lib = ffi, lib
        self.sock = sock
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = proton.Transport(proton.Transport.SERVER if server else None)
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = proton.Connection()
        self.connection.container = f"loadgen-{os.getpid()}"
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.t = self.transport._impl
        self.c = self.collector._impl
        self.inbuf = bytearray(self.IO_CHUNK)
        self.c_inbuf = ffi.from_buffer(self.inbuf)
        self.outbuf = bytearray(self.IO_CHUNK)
        self.c_outbuf = ffi.from_buffer(self.outbuf)
        self.out_view = memoryview(self.outbuf)
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)
        self._want_write = False
        self.eof = False
        self.closed = False
        self.error: Optional[str] = None
        self._next_tick = 0.0

    # I/O -------------------------------------------------------------------
    def read(self) -> int:
        """Read what the socket has into the transport; return bytes read."""
        lib, t = self.lib, self.t
        total = 0
        while not self.eof:
            cap = lib.pn_transport_capacity(t)
            if cap <= 0:
                break
            try:
                n = self.sock.recv_into(self.inbuf, min(cap, self.IO_CHUNK))
            except BlockingIOError:
                break
            except OSError as e:
                self.error = self.error or f"socket: {e}"
                n = 0
            if n == 0:
                self.eof = True
                lib.pn_transport_close_tail(t)
                break
            lib.pn_transport_push(t, self.c_inbuf, n)
            total += n
            if n < self.IO_CHUNK:
                break
        return total

    def write(self) -> int:
        """Write the transport's pending output; return how much is still pending."""
        lib, t = self.lib, self.t
        while True:
            pending = lib.pn_transport_pending(t)
            if pending < 0:
                self.closed = True
                return 0
            if pending == 0:
                return 0
            n = lib.pn_transport_peek(t, self.c_outbuf, min(pending, self.IO_CHUNK))
            if n <= 0:
                return 0
            try:
                sent = self.sock.send(self.out_view[:n])
            except BlockingIOError:
                sent = 0
            except OSError as e:
                self.error = self.error or f"socket: {e}"
                lib.pn_transport_close_head(t)
                self.closed = True
                return 0
            if sent:
                lib.pn_transport_pop(t, sent)
            if sent < n:
                return lib.pn_transport_pending(t)

    def wait(self, timeout_s: float, pending_out: int) -> None:
        want_write = pending_out > 0
        if timeout_s < 0.01:  # a paced sender between two messages: poll() counts whole ms,
            # and rounding 0.1 ms down to 0 made it spin a CPU; select() waits in µs
            select.select((self.sock,), (self.sock,) if want_write else (), (), timeout_s)
            return
        if want_write != self._want_write:
            self._want_write = want_write
            self.poller.modify(self.sock, select.POLLIN | (select.POLLOUT if want_write else 0))
        self.poller.poll(max(0, int(timeout_s * 1000)))

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_tick:
            self.lib.pn_transport_tick(self.t, int(now * 1000))
            self._next_tick = now + 0.5

    # events ----------------------------------------------------------------
    def drain_events(self) -> None:
        """Pop every event; the per-message ones (flow, delivery) skip the generic dispatch."""
        lib, c = self.lib, self.c
        peek, pop, etype = lib.pn_collector_peek, lib.pn_collector_pop, lib.pn_event_type
        on_event, on_delivery = self.on_event, self.on_delivery
        NULL = self.ffi.NULL
        FLOW, DELIVERY = lib.PN_LINK_FLOW, lib.PN_DELIVERY
        while True:
            ev = peek(c)
            if ev == NULL:
                break
            t = etype(ev)
            if t == DELIVERY:
                if on_delivery is not None:
                    on_delivery(ev)
            elif t != FLOW:
                on_event(t, ev)
            pop(c)
        self.after_events()

    on_delivery: Any = None     # a callable(event) in roles that act per delivery event

    def after_events(self) -> None:
        pass

    def on_event(self, etype: int, ev: Any) -> None:
        lib = self.lib
        if etype == lib.PN_CONNECTION_REMOTE_CLOSE or etype == lib.PN_LINK_REMOTE_CLOSE \
                or etype == lib.PN_LINK_REMOTE_DETACH or etype == lib.PN_SESSION_REMOTE_CLOSE:
            if not self.closing:
                name = self.ffi.string(lib.pn_event_type_name(etype)).decode()
                self.error = self.error or f"peer closed ({name})"
                self._condition(etype, ev)
        elif etype == lib.PN_TRANSPORT_ERROR:
            self.error = self.error or "transport error"
            self._condition(etype, ev)
        elif etype == lib.PN_TRANSPORT_CLOSED:
            self.closed = True

    closing = False

    def _condition(self, etype: int, ev: Any) -> None:
        lib, ffi = self.lib, self.ffi
        cond = ffi.NULL
        if etype == lib.PN_TRANSPORT_ERROR:
            cond = lib.pn_transport_condition(lib.pn_event_transport(ev))
        elif etype == lib.PN_CONNECTION_REMOTE_CLOSE:
            cond = lib.pn_connection_remote_condition(lib.pn_event_connection(ev))
        elif etype in (lib.PN_LINK_REMOTE_CLOSE, lib.PN_LINK_REMOTE_DETACH):
            cond = lib.pn_link_remote_condition(lib.pn_event_link(ev))
        if cond != ffi.NULL and lib.pn_condition_is_set(cond):
            name = lib.pn_condition_get_name(cond)
            desc = lib.pn_condition_get_description(cond)
            text = ffi.string(name).decode() if name != ffi.NULL else ""
            if desc != ffi.NULL:
                text += ": " + ffi.string(desc).decode(errors="replace")
            self.error += f" [{text}]"

    # loop ------------------------------------------------------------------
    def pump(self, timeout_s: float) -> None:
        """One round: read, handle events, do role work, write; block up to timeout if idle."""
        got = self.read()
        self.drain_events()
        busy = self.work()
        pending = self.write()
        self.tick()
        if not got and not busy and not self.closed:
            self.wait(min(timeout_s, self.idle_wait), pending)

    idle_wait = float("inf")  # a paced sender's time until its next message (Sender.work)

    def work(self) -> bool:
        """Role work after events; return True if there may be more to do right away."""
        return False

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Close the connection and flush, waiting (bounded) for the peer's close."""
        self.closing = True
        try:
            self.connection.close()
        except Exception:
            pass
        deadline = time.monotonic() + timeout_s
        while not self.closed and not self.eof and time.monotonic() < deadline:
            self.pump(0.05)
        # Our CLOSE is written, but written is not yet received: closing a TCP socket that
        # still has unread input makes the kernel send RST and throw away whatever of our
        # output the peer has not read yet (seen as "lost" messages at the end of a run).
        # So half-close and read until the peer closes too (bounded).
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        while not self.eof and time.monotonic() < deadline:
            self.poller.poll(50)
            try:
                n = self.sock.recv_into(self.inbuf, self.IO_CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                break
            if n == 0:
                self.eof = True
        try:
            self.sock.close()
        except OSError:
            pass


def _connect(url: str, timeout_s: float) -> socket.socket:
    host, port = parse_url(url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=min(2.0, timeout_s))
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _touch(path: Optional[str]) -> None:
    if path:
        with open(path, "w", encoding="ascii") as f:
            f.write(str(os.getpid()))


# --------------------------------------------------------------------------- sender

class Sender(Client):
    def __init__(self, sock: socket.socket, args: argparse.Namespace) -> None:
        super().__init__(sock, server=False)
        import proton

        lib, ffi = self.lib, self.ffi
        self.args = args
        self.count = args.count
        self.presettled = args.presettled
        self.window = args.window if (args.window and not args.presettled) else None
        self.batch = args.batch
        self.rate = args.rate if args.rate and args.rate > 0 else None
        self._paced_from: Optional[float] = None
        self.msg, self.ts_off = encode_template(args.address, args.body_size)
        self.c_msg = ffi.from_buffer(self.msg)
        self.msg_len = len(self.msg)
        self.tagbuf = bytearray(8)
        self.tag = ffi.new("pn_bytes_t *")
        self.tag.size = 8
        self._c_tag = ffi.from_buffer(self.tagbuf)
        self.tag.start = self._c_tag
        self.sent = 0
        self.settled = 0
        self.sent_buckets = SecondBuckets()
        self.settled_buckets = SecondBuckets()
        self.first_ns: Optional[int] = None
        self.last_ns: Optional[int] = None
        self.connection.hostname = parse_url(args.url)[0]
        self.connection.open()
        session = self.connection.session()
        session.open()
        link = session.sender(f"loadgen-sender-{os.getpid()}")
        link.target.address = args.address
        link.source.address = args.address
        if self.presettled:
            link.snd_settle_mode = proton.Link.SND_SETTLED
        else:
            link.snd_settle_mode = proton.Link.SND_UNSETTLED
        link.open()
        self._link_obj = link
        self.link = link._impl
        self.ready = False
        self._outcome_names = {lib.PN_ACCEPTED: "accepted", lib.PN_RELEASED: "released",
                               lib.PN_REJECTED: "rejected", lib.PN_MODIFIED: "modified"}
        if not self.presettled:
            self.on_delivery = self._make_on_delivery()
        else:
            self._settled_cell = [0]

    def _make_on_delivery(self) -> Any:
        """A closure over the C functions: the disposition path runs once per message."""
        lib = self.lib
        event_delivery, local_state, remote_state = (lib.pn_event_delivery,
                                                     lib.pn_delivery_local_state,
                                                     lib.pn_delivery_remote_state)
        remote_settled, update, settle = (lib.pn_delivery_settled, lib.pn_delivery_update,
                                          lib.pn_delivery_settle)
        ACCEPTED = lib.PN_ACCEPTED
        by_state = {lib.PN_ACCEPTED: [0], lib.PN_RELEASED: [0], lib.PN_REJECTED: [0],
                    lib.PN_MODIFIED: [0]}
        self._outcome_cells = {self._outcome_names[k]: v for k, v in by_state.items()}
        settled = self._settled_cell = [0]
        get = by_state.get

        def on_delivery(ev: Any) -> None:
            d = event_delivery(ev)
            if local_state(d):                  # already counted and settled
                return
            state = remote_state(d)
            cell = get(state)
            if cell is None:
                if not remote_settled(d):
                    return                      # e.g. RECEIVED: not an outcome yet
                state = ACCEPTED                # settled without outcome: count as settled only
            else:
                cell[0] += 1
            settled[0] += 1
            update(d, state)                    # marks it handled
            settle(d)
        return on_delivery

    def after_events(self) -> None:
        n = self._settled_cell[0] - self.settled
        if n:
            now = time.time_ns()
            self.settled += n
            self.settled_buckets.add(now, n)
            self.last_ns = now

    def on_event(self, etype: int, ev: Any) -> None:
        if etype == self.lib.PN_LINK_REMOTE_OPEN:
            self.ready = True
        else:
            super().on_event(etype, ev)

    def work(self) -> bool:
        remaining = self.count - self.sent
        if remaining <= 0 or self.error:
            return False
        lib, link = self.lib, self.link
        n = min(lib.pn_link_credit(link), remaining, self.batch)
        if self.window is not None:
            n = min(n, self.window - (self.sent - self.settled))
        if self.rate is not None and n > 0:
            now_mono = time.monotonic()
            if self._paced_from is None:
                self._paced_from = now_mono
            n = min(n, paced_quota(self.rate, now_mono - self._paced_from, self.sent))
            if n <= 0:  # wait (in pump) until the next one is due, not a fixed slice
                self.idle_wait = min(0.2, paced_wait(self.rate, now_mono - self._paced_from,
                                                     self.sent))
        if n <= 0:
            return False
        delivery, send, advance, settle = (lib.pn_delivery, lib.pn_link_send, lib.pn_link_advance,
                                           lib.pn_delivery_settle)
        pack_ts, pack_tag, time_ns = _TS.pack_into, _TAG.pack_into, time.time_ns
        msg, c_msg, msg_len, off = self.msg, self.c_msg, self.msg_len, self.ts_off
        tagbuf, tag = self.tagbuf, self.tag[0]
        presettled = self.presettled
        seq = self.sent
        if self.first_ns is None:
            self.first_ns = time_ns()
        now = 0
        for _ in range(n):
            now = time_ns()
            pack_ts(msg, off, now)
            pack_tag(tagbuf, 0, seq)
            seq += 1
            d = delivery(link, tag)
            send(link, c_msg, msg_len)
            advance(link)
            if presettled:
                settle(d)
        self.sent = seq
        self.sent_buckets.add(now, n)
        self.last_ns = now
        return seq < self.count and lib.pn_link_credit(link) > 0

    def done(self) -> bool:
        if self.sent < self.count:
            return False
        return self.presettled or self.settled >= self.count

    def run(self) -> dict:
        args = self.args
        deadline = time.monotonic() + args.timeout
        while not self.ready and not self.error and time.monotonic() < deadline:
            self.pump(0.1)
        cpu0 = _cpu()
        while not self.error and not self.done() and not self.closed:
            if time.monotonic() >= deadline:
                self.error = f"timeout after {args.timeout}s"
                break
            self.idle_wait = 0.2  # work() shortens it to the next paced message's time
            self.pump(0.2)
        # presettled: make sure the last transfers have left the process before measuring
        flush_deadline = time.monotonic() + 5
        while self.write() > 0 and time.monotonic() < flush_deadline:
            self.wait(0.05, 1)
        cpu1 = _cpu()
        if self.done() and self.error and self.error.startswith("peer closed"):
            self.error = None       # e.g. a --listen receiver closing once it has everything
        error = self.error          # what goes wrong while closing does not spoil the run
        self.shutdown()
        unsettled = not self.presettled
        return result_line(
            run_id=args.run_id, role="sender", pid=os.getpid(), url=args.url, address=args.address,
            listen=False, target_count=self.count, body_size=args.body_size,
            presettled=self.presettled, window=self.window,
            **throughput_fields(self.sent, self.first_ns, self.last_ns,
                                cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]),
            settled=self.settled if unsettled else None,
            **{k: (self._outcome_cells[k][0] if unsettled else None)
               for k in ("accepted", "released", "rejected", "modified")},
            error=error,
            per_second=per_second_series(sent=self.sent_buckets.as_dict(),
                                         settled=self.settled_buckets.as_dict()),
        )


# --------------------------------------------------------------------------- receiver

class Receiver(Client):
    def __init__(self, sock: socket.socket, args: argparse.Namespace, listen: bool) -> None:
        super().__init__(sock, server=listen)
        self.args = args
        self.listen = listen
        self.count = args.count
        self.credit = args.credit
        self.credit_batch = max(1, args.credit_batch or args.credit // 2)
        self.received = 0
        self.missing = 0
        self.latencies = array("q")
        self.bucket_seconds: list[int] = []
        self.bucket_starts: list[int] = []
        self._bucket = -1
        self.saw_presettled: Optional[bool] = None
        self.first_ns: Optional[int] = None
        self.last_ns: Optional[int] = None
        # --arrivals: send and receive time_ns of every message, interleaved
        self.arrivals: Optional[array] = array("q") if args.arrivals else None
        # --record-trace: messages per path through the routers (x-opt-qd.trace)
        self.paths: Optional[dict] = {} if args.record_trace else None
        self.stop_signal: Optional[str] = None
        self.rbuf = bytearray(64 * 1024)
        self.c_rbuf = self.ffi.from_buffer(self.rbuf)
        self.link: Any = None
        self.ready = False
        if not listen:
            self.connection.hostname = parse_url(args.url)[0]
            self.connection.open()
            session = self.connection.session()
            session.open()
            link = session.receiver(f"loadgen-receiver-{os.getpid()}")
            link.source.address = args.address
            link.target.address = args.address
            link.open()
            self._link_obj = link
            self.link = link._impl
            self.lib.pn_link_flow(self.link, self.credit)

    def on_event(self, etype: int, ev: Any) -> None:
        lib = self.lib
        if etype == lib.PN_LINK_REMOTE_OPEN:
            link = lib.pn_event_link(ev)
            if self.listen and lib.pn_link_is_receiver(link) and self.link is None:
                # accept the peer's sender: mirror its terminus, open, grant credit
                lib.pn_terminus_copy(lib.pn_link_source(link), lib.pn_link_remote_source(link))
                lib.pn_terminus_copy(lib.pn_link_target(link), lib.pn_link_remote_target(link))
                lib.pn_link_open(link)
                lib.pn_link_flow(link, self.credit)
                self.link = link
            self.ready = True
        elif self.listen and etype == lib.PN_CONNECTION_REMOTE_OPEN:
            lib.pn_connection_open(lib.pn_event_connection(ev))
        elif self.listen and etype == lib.PN_SESSION_REMOTE_OPEN:
            lib.pn_session_open(lib.pn_event_session(ev))
        else:
            super().on_event(etype, ev)

    def _read_big(self, link: Any, d: Any, have: int) -> int:
        """Grow the receive buffer to hold the whole delivery and read the rest into it."""
        lib = self.lib
        old = self.rbuf
        self.rbuf = bytearray(max(have + lib.pn_delivery_pending(d), 2 * len(old)))
        self.rbuf[:have] = old[:have]
        self.c_rbuf = self.ffi.from_buffer(self.rbuf)
        while True:
            n = lib.pn_link_recv(link, self.c_rbuf + have, len(self.rbuf) - have)
            if n <= 0:          # PN_EOS: the whole delivery is in the buffer
                return have
            have += n

    def work(self) -> bool:
        link = self.link
        if link is None:
            return False
        lib, NULL = self.lib, self.ffi.NULL
        current, partial, pending = (lib.pn_link_current, lib.pn_delivery_partial,
                                     lib.pn_delivery_pending)
        recv, advance = lib.pn_link_recv, lib.pn_link_advance
        remote_settled = lib.pn_delivery_settled
        update, settle, ACCEPTED = lib.pn_delivery_update, lib.pn_delivery_settle, lib.PN_ACCEPTED
        time_ns, lats = time.time_ns, self.latencies
        magic_at, unpack, MAGIC = self.rbuf.startswith, _TS.unpack_from, TS_MAGIC
        rbuf, c_rbuf = self.rbuf, self.c_rbuf
        arrivals = self.arrivals
        got = 0
        presettled = 0
        now = batch_start = time_ns()
        while True:
            d = current(link)
            if d == NULL or partial(d):         # current and complete => readable
                break
            n = recv(link, c_rbuf, len(rbuf))
            if n == len(rbuf) and pending(d) > 0:   # bigger than the buffer: grow, read the rest
                n = self._read_big(link, d, n)
                rbuf, c_rbuf, magic_at = self.rbuf, self.c_rbuf, self.rbuf.startswith
            now = time_ns()
            if n >= TS_TRAILER and magic_at(MAGIC, n - TS_TRAILER):
                ts = unpack(rbuf, n - 8)[0]
                lats.append((now - ts) // 1000)
            else:
                ts = extract_timestamp(rbuf, n) if n > 0 else None
                if ts is None:
                    self.missing += 1
                else:
                    lats.append((now - ts) // 1000)
            if arrivals is not None and ts is not None:
                arrivals.append(ts)
                arrivals.append(now)
            if self.paths is not None and n > 0:
                try:
                    path = trace_path(bytes(rbuf[:n]))
                except Exception:  # noqa: BLE001 - not a whole AMQP message: no path known
                    path = None
                if path is not None:
                    self.paths[path] = self.paths.get(path, 0) + 1
            advance(link)
            presettled = remote_settled(d)
            if not presettled:
                update(d, ACCEPTED)
            settle(d)
            got += 1
        if not got:
            return False
        if self.saw_presettled is None:
            self.saw_presettled = bool(presettled)
            self.first_ns = batch_start
        sec = now // 1_000_000_000
        if sec != self._bucket:   # latencies appended since the previous batch go to this second
            self._bucket = sec
            self.bucket_seconds.append(sec)
            self.bucket_starts.append(self.received)
        self.received += got
        self.last_ns = now
        deficit = min(self.credit, self.count - self.received) - lib.pn_link_credit(link)
        near_end = self.count - self.received <= self.credit
        if deficit >= self.credit_batch or (deficit > 0 and near_end):
            lib.pn_link_flow(link, deficit)
        return False

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_signal = "SIGTERM"

    def _series(self) -> list[dict]:
        """Per-second counts and latency percentiles from the batch boundaries."""
        received: dict[int, int] = {}
        lats: dict[int, list[int]] = {}
        bounds = self.bucket_starts + [self.received]
        n_lat = len(self.latencies)
        for i, sec in enumerate(self.bucket_seconds):
            lo, hi = bounds[i], bounds[i + 1]
            received[sec] = received.get(sec, 0) + hi - lo
            # latencies are aligned with messages unless timestamps were missing (then approximate)
            lats.setdefault(sec, []).extend(self.latencies[min(lo, n_lat):min(hi, n_lat)])
        return per_second_series(received=received, latencies_by_second=lats)

    def run(self, ready_file: Optional[str]) -> dict:
        args = self.args
        start = time.monotonic()
        deadline = start + args.timeout
        while not self.ready and not self.error and time.monotonic() < deadline:
            self.pump(0.1)
        if not self.ready and not self.error:
            self.error = f"link not attached within {args.timeout}s"
        if not self.listen:
            _touch(ready_file)
        cpu0 = _cpu()
        last_progress = time.monotonic()
        if args.stop_on_sigterm:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        while not self.error and self.received < self.count and not self.closed:
            if self.stop_signal:
                self.error = f"stopped by {self.stop_signal} after {self.received} messages"
                break
            before = self.received
            self.pump(0.2)
            now = time.monotonic()
            if self.received != before:
                last_progress = now
            elif self.received and now - last_progress > args.idle_timeout:
                self.error = f"idle for {args.idle_timeout}s after {self.received} messages"
            elif now >= deadline:
                self.error = f"timeout after {args.timeout}s"
        if self.received >= self.count and self.error and self.error.startswith("peer closed"):
            self.error = None
        cpu1 = _cpu()
        error = self.error          # what goes wrong while closing does not spoil the run
        self.shutdown(0.5 if self.stop_signal else 2.0)
        if self.arrivals is not None:
            write_arrivals(args.arrivals, self.arrivals)
        lats = sorted(self.latencies)
        return result_line(
            run_id=args.run_id, role="receiver", pid=os.getpid(), url=args.url,
            address=args.address, listen=self.listen, target_count=self.count,
            body_size=args.body_size, presettled=self.saw_presettled, credit=self.credit,
            **throughput_fields(self.received, self.first_ns, self.last_ns,
                                cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]),
            lat_p50_us=percentile(lats, 50), lat_p90_us=percentile(lats, 90),
            lat_p99_us=percentile(lats, 99), lat_max_us=lats[-1] if lats else None,
            lat_missing=self.missing, error=error, per_second=self._series(),
            paths=paths_field(self.paths) if self.paths is not None else None,
        )


# --------------------------------------------------------------------------- CLI

def summary(record: dict) -> str:
    r = record
    text = (f"{r['role']} {r['address']}: {r['count']}/{r['target_count']} msgs"
            f" in {r['elapsed_s']}s = {r['msgs_per_s']} msg/s,"
            f" cpu {r['cpu_us_per_msg']} us/msg")
    if r["role"] == "receiver":
        text += (f", latency us p50={r['lat_p50_us']} p90={r['lat_p90_us']}"
                 f" p99={r['lat_p99_us']} max={r['lat_max_us']}")
    elif not r["presettled"]:
        text += (f", settled {r['settled']} (accepted {r['accepted']} released {r['released']}"
                 f" rejected {r['rejected']} modified {r['modified']})")
    if r["error"]:
        text += f", ERROR: {r['error']}"
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    for role in ("sender", "receiver"):
        s = sub.add_parser(role)
        s.add_argument("--url", default="127.0.0.1:5672",
                       help="host:port (the address to listen on with --listen)")
        s.add_argument("--address", default="loadgen")
        s.add_argument("--count", type=int, default=100_000)
        s.add_argument("--body-size", type=int, default=100,
                       help=f"body bytes (minimum {MIN_BODY_SIZE}); the last 16 carry the "
                            "timestamp")
        s.add_argument("--timeout", type=float, default=120.0, help="hard bound on the whole run")
        s.add_argument("--out", help="append the JSON line to this file (default: stdout)")
        s.add_argument("--run-id", help="free text copied into the JSON line")
        s.add_argument("--ready-file", help="create this file once ready (for launchers)")
        if role == "sender":
            s.add_argument("--presettled", action="store_true",
                           help="send settled (default unsettled)")
            s.add_argument("--window", type=int, default=0,
                           help="max unsettled in flight (0: credit only)")
            s.add_argument("--batch", type=int, default=128, help="max transfers per I/O round")
            s.add_argument("--rate", type=float, default=0,
                           help="send at most this many messages per second (0: unpaced)")
        else:
            s.add_argument("--credit", type=int, default=250)
            s.add_argument("--credit-batch", type=int, default=0,
                           help="replenish credit once this much is used (default credit/2)")
            s.add_argument("--idle-timeout", type=float, default=10.0,
                           help="stop when nothing arrives for this long after the first message")
            s.add_argument("--listen", action="store_true",
                           help="accept one connection on --url instead of connecting (no router)")
            s.add_argument("--arrivals",
                           help="write '<send time_ns> <receive time_ns>' per message to this file")
            s.add_argument("--stop-on-sigterm", action="store_true",
                           help="on SIGTERM stop receiving and still write the result line")
            s.add_argument("--record-trace", action="store_true",
                           help="count messages per path through the routers (their "
                                "x-opt-qd.trace annotation) into the result line's 'paths'")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.body_size < MIN_BODY_SIZE:
        print(f"loadgen: --body-size must be >= {MIN_BODY_SIZE}", file=sys.stderr)
        return 2
    try:
        record = _run(args)
    except OSError as e:        # no peer / listen failed: still one JSON line, marked failed
        record = result_line(run_id=args.run_id, role=args.role, pid=os.getpid(), url=args.url,
                             address=args.address, listen=getattr(args, "listen", False),
                             count=0, target_count=args.count, body_size=args.body_size,
                             error=f"{type(e).__name__}: {e}")
    print("loadgen: " + summary(record), file=sys.stderr)
    write_result(record, args.out)
    return 1 if record["error"] else 0


def _run(args: argparse.Namespace) -> dict:
    if args.role == "sender":
        sock = _connect(args.url, min(args.timeout, 10.0))
        _touch(args.ready_file)
        record = Sender(sock, args).run()
    else:
        if args.listen:
            host, port = parse_url(args.url)
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind((host, port))
            lsock.listen(1)
            _touch(args.ready_file)
            lsock.settimeout(args.timeout)
            try:
                sock, _ = lsock.accept()
            finally:
                lsock.close()
            record = Receiver(sock, args, listen=True).run(None)
        else:
            sock = _connect(args.url, min(args.timeout, 10.0))
            record = Receiver(sock, args, listen=False).run(args.ready_file)
    return record


if __name__ == "__main__":
    sys.exit(main())
