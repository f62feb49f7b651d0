"""AMQP over WebSockets versus plain AMQP through one router: msgs/s and router CPU per message.

One router (``workerThreads`` ``--workers``) with a plain AMQP listener and an ``http: yes``
listener. The SAME client runs against each: one connection, a sender and a receiver on one
address, ``--count`` unsettled messages of ``--body-size`` bytes, credit window ``--window``,
every message accepted. The client is proton's engine pumped by hand over a socket; on the http
port its bytes travel in WebSocket binary messages (wsproto), on the AMQP port as they are, so
the difference between the two rows is the WebSocket path (framing, the worker's stream).
Router CPU is every router process's user+system time from /proc, sampled around each run.

Prints a table, the ratios (websocket / plain) and appends ``bench-websocket/1`` JSON lines to
``--out`` (default ``benchmarks/results/websocket-<UTC time>.jsonl``). Loopback only; the router
is stopped at the end; every wait is bounded.

    python benchmarks/bench_websocket.py --count 20000 --body-size 100 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import proton
from proton import Collector, Connection, Delivery, Event, Transport
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, Message, RejectConnection, Request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_recovery import children  # noqa: E402

RUN_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pids) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


class Router:
    def __init__(self, workers: int, tmp: Path) -> None:
        self.amqp, self.http = free_port(), free_port()
        conf = tmp / "ws-bench.conf"
        conf.write_text(
            f"router {{\n    id: WsBench\n    workerThreads: {workers}\n}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {self.amqp}\n"
            f"    saslMechanisms: ANONYMOUS\n    authenticatePeer: no\n}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {self.http}\n    http: yes\n"
            f"    saslMechanisms: ANONYMOUS\n    authenticatePeer: no\n}}\n")
        self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(30):
            self.stop()
            raise SystemExit("the router did not start in 30 s")

    def _read(self) -> None:
        for line in self.proc.stdout:
            if "Operational" in line:
                self.ready.set()

    def pids(self) -> list:
        return [self.proc.pid, *children(self.proc.pid).values()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


class PumpedClient:
    """proton's engine over a socket, optionally inside a WebSocket: sends and receives."""

    def __init__(self, port: int, websocket: bool, address: str, count: int, body: bytes,
                 window: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ws = self._handshake() if websocket else None
        self.sock.setblocking(False)
        self.transport = Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.conn = Connection()
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport.bind(self.conn)
        self.conn.open()
        session = self.conn.session()
        session.open()
        self.snd = session.sender("bench-s")
        self.snd.target.address = address
        self.snd.open()
        self.rcv = session.receiver("bench-r")
        self.rcv.source.address = address
        self.rcv.open()
        self.rcv.flow(window)
        self.window = window
        self.count, self.payload = count, proton.Message(body=body).encode()
        self.sent = self.received = self.acked = 0
        self.pending_in = b""

    def _handshake(self) -> WSConnection:
        ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(ws.send(Request(host="127.0.0.1", target="/", subprotocols=["amqp"])))
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise SystemExit("the router closed the WebSocket handshake")
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return ws
                if isinstance(event, RejectConnection):
                    raise SystemExit(f"WebSocket refused: {event.status_code}")

    def run(self) -> float:
        start = time.monotonic()
        deadline = start + RUN_TIMEOUT
        while self.acked < self.count:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: sent {self.sent} received {self.received} "
                                 f"acked {self.acked}")
            self._events()
            self._send()
            self._write()
            self._read()
        return time.monotonic() - start

    def _send(self) -> None:
        snd = self.snd
        while snd.credit > 0 and self.sent < self.count:
            snd.delivery(str(self.sent).encode())
            snd.send(self.payload)
            snd.advance()
            self.sent += 1

    def _events(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                return
            if event.type == Event.DELIVERY:
                dlv = event.delivery
                if dlv.link.is_receiver:
                    self._receive()
                elif dlv.remote_state:  # its outcome (proton's .settled is the peer's)
                    dlv.settle()  # freed: no further event for it
                    self.acked += 1
            self.collector.pop()

    def _receive(self) -> None:
        """Every complete delivery at the head of the receiver (an event names one delivery;
        the ones behind it become current only as the head is advanced)."""
        rcv = self.rcv
        while True:
            dlv = rcv.current
            if dlv is None or not dlv.readable or dlv.partial:
                break
            rcv.recv(dlv.pending)
            rcv.advance()
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            self.received += 1
        if rcv.credit < self.window // 2:
            rcv.flow(self.window - rcv.credit)

    def _write(self) -> None:
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                return
            data = self.transport.peek(pending)
            self.transport.pop(len(data))
            out = self.ws.send(Message(data=data)) if self.ws is not None else data
            self.sock.setblocking(True)
            self.sock.sendall(out)
            self.sock.setblocking(False)

    def _read(self) -> None:
        if not self.pending_in:
            ready = select.select([self.sock], [], [], 0.01)[0]
            if not ready:
                return
            data = self.sock.recv(1 << 20)
            if not data:
                raise SystemExit("the router closed the connection")
            if self.ws is not None:
                self.ws.receive_data(data)
                data = b"".join(bytes(e.data) for e in self.ws.events()
                                if isinstance(e, BytesMessage))
            self.pending_in = data
        cap = self.transport.capacity()
        if cap > 0 and self.pending_in:
            self.transport.push(self.pending_in[:cap])
            self.pending_in = self.pending_in[cap:]

    def close(self) -> None:
        self.sock.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out or Path(__file__).resolve().parent / "results" /
               f"websocket-{stamp}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    hz = os.sysconf("SC_CLK_TCK")
    rows: dict = {"plain": [], "websocket": []}
    with tempfile.TemporaryDirectory() as tmp:
        router = Router(args.workers, Path(tmp))
        try:
            for rep in range(args.repeat):
                for variant in ("plain", "websocket"):
                    port = router.http if variant == "websocket" else router.amqp
                    client = PumpedClient(port, variant == "websocket", f"bench-{variant}-{rep}",
                                          args.count, b"x" * args.body_size, args.window)
                    before = cpu_ticks(router.pids())
                    try:
                        seconds = client.run()
                    finally:
                        client.close()
                    ticks = cpu_ticks(router.pids()) - before
                    row = {"schema": "bench-websocket/1", "variant": variant, "rep": rep,
                           "count": args.count, "body_size": args.body_size,
                           "window": args.window, "workers": args.workers,
                           "seconds": round(seconds, 4),
                           "msgs_per_s": round(args.count / seconds, 1),
                           "router_cpu_us_per_msg": round(ticks / hz * 1e6 / args.count, 2)}
                    rows[variant].append(row)
                    with out.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(row) + "\n")
        finally:
            router.stop()
    print(f"{'variant':<10} {'msgs/s':>10} {'router CPU us/msg':>18}")
    med = {}
    for variant, runs in rows.items():
        rates = sorted(r["msgs_per_s"] for r in runs)
        cpus = sorted(r["router_cpu_us_per_msg"] for r in runs)
        med[variant] = (rates[len(rates) // 2], cpus[len(cpus) // 2])
        print(f"{variant:<10} {med[variant][0]:>10.0f} {med[variant][1]:>18.1f}   (median of "
              f"{len(runs)})")
    if med["plain"][0] and med["plain"][1]:
        print(f"websocket/plain: msgs/s x{med['websocket'][0] / med['plain'][0]:.2f}, "
              f"router CPU/msg x{med['websocket'][1] / med['plain'][1]:.2f}")
    print(f"JSON lines: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
