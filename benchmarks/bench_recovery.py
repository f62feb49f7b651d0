"""Recovery after kill -9 of one of the router's processes, with traffic flowing.

For each child kind (``--kinds worker,agent,core``) and repetition, a fresh router is started
(``workerThreads`` ``--workers``, one listener on 127.0.0.1), a receiver and a paced unsettled
sender (``--rate`` msg/s) run for ``--pre`` seconds, then the child is killed with SIGKILL (for
``worker``: the worker holding the receiver's connection, found from /proc, so in-flight
deliveries really go through the dead process). Measured from the kill:

* ``accept_s``: until a NEW client connection opens and attaches a link (a probe thread retries
  every 20 ms with a fresh BlockingConnection);
* ``restart_s``: until the supervisor logs the child running again (core: "Router processes
  restarted");
* the sender's outcome counts: it sends for ``--post`` more seconds, then stops and waits
  (bounded, 10 s) for every outcome: sent, accepted, released, modified, and ``silent``:
  deliveries still without an outcome while the sender's connection is up (must be 0: never a
  silent loss), plus whether the sender's / receiver's connection dropped.

Every router leads its own process group and is stopped (SIGTERM, then SIGKILL to the group);
every wait is bounded; only 127.0.0.1 is used.

    python benchmarks/bench_recovery.py --kinds worker,agent,core --repeat 3
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

ROUTER_START_TIMEOUT = 30.0
SETTLE_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    def __init__(self, workers: int, tmp: Path) -> None:
        self.port = free_port()
        conf = tmp / f"r{self.port}.conf"
        conf.write_text(f"router {{\n    id: Recovery\n    workerThreads: {workers}\n}}\n"
                        f"listener {{\n    host: 127.0.0.1\n    port: {self.port}\n"
                        f"    saslMechanisms: ANONYMOUS\n}}\n")
        self.lines: list = []
        self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_line("Operational", time.monotonic() + ROUTER_START_TIMEOUT)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def wait_line(self, text: str, deadline: float, after: float = 0.0) -> Optional[float]:
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if at >= after and text in line:
                    return at
            time.sleep(0.01)
        return None

    def children(self) -> dict:
        return children(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def children(supervisor_pid: int) -> dict:
    """``{"core": pid, "agent": pid, "worker0": pid, ...}`` of a running router."""
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(supervisor_pid)],
                         capture_output=True, text=True, timeout=10).stdout
    found = {}
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        words = args.split()
        if "router_core.coreproc" in words:
            found["core"] = int(pid)
        elif "agent.controlplane" in words:
            found["agent"] = int(pid)
        elif "router_io.worker" in words:
            found[f"worker{words[words.index('--index') + 1]}"] = int(pid)
    return found


def tcp_rows() -> list:
    """(local port, remote port, state, inode) of every TCP socket (the kernel's tables)."""
    rows = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    p = line.split()
                    rows.append((int(p[1].rsplit(":", 1)[1], 16),
                                 int(p[2].rsplit(":", 1)[1], 16), p[3], p[9]))
        except OSError:
            pass
    return rows


def holder_of_client(router_port: int, pids: dict, client_port: int) -> Optional[str]:
    """The child holding the router's end of the connection from ``client_port`` (/proc)."""
    inodes = {inode for lport, rport, _, inode in tcp_rows()
              if lport == router_port and rport == client_port}
    for name, pid in pids.items():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] in inodes:
                    return name
            except OSError:
                continue
    return None


def client_ports(router_port: int) -> set:
    """Local ports of established client sockets toward the router's port."""
    return {lport for lport, rport, state, _ in tcp_rows()
            if rport == router_port and state == "01"}


class Traffic(MessagingHandler):
    """A receiver connection and a paced unsettled sender connection to one address."""

    def __init__(self, url: str, rate: float) -> None:
        super().__init__()
        self.url, self.interval = url, 1.0 / rate
        self.sent = self.received = 0
        self.outcomes = {"accepted": 0, "released": 0, "modified": 0, "rejected": 0}
        self.sender = None
        self.sender_dropped = self.receiver_dropped = False
        self.ready = False
        self.next_send = 0.0
        self.rconn = self.sconn = None

    def on_start(self, event):
        self.container = event.container
        self.rconn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self.rconn, "recovery.q")

    def on_link_opened(self, event):
        if event.receiver and self.sconn is None:
            self.sconn = event.container.connect(self.url, reconnect=False)
            self.sender = event.container.create_sender(self.sconn, "recovery.q")
        elif event.sender:
            self.ready = True

    def pump(self) -> None:
        now = time.monotonic()
        snd = self.sender
        while (self.ready and not self.sender_dropped and snd is not None and snd.credit > 0
               and now >= self.next_send):
            snd.send(Message(body=b"x" * 100))
            self.sent += 1
            self.next_send = max(self.next_send + self.interval, now - 0.1)

    def on_message(self, event):
        self.received += 1

    def on_settled(self, event):
        state = event.delivery.remote_state
        name = {Delivery.ACCEPTED: "accepted", Delivery.RELEASED: "released",
                Delivery.MODIFIED: "modified", Delivery.REJECTED: "rejected"}.get(state)
        if name:
            self.outcomes[name] += 1

    def on_transport_closed(self, event):
        impl = event.connection._impl if event.connection is not None else None
        if self.sconn is not None and impl == self.sconn._impl:
            self.sender_dropped = True
        elif self.rconn is not None and impl == self.rconn._impl:
            self.receiver_dropped = True

    on_transport_error = on_transport_closed
    on_disconnected = on_transport_closed


def probe_accept(url: str, since: float, deadline: float, result: dict) -> None:
    while time.monotonic() < deadline:
        try:
            conn = BlockingConnection(url, timeout=0.5)
            conn.create_sender("recovery.probe")
            conn.close()
            result["accept_s"] = time.monotonic() - since
            return
        except Exception:
            time.sleep(0.02)


def run_once(kind: str, args: argparse.Namespace, tmp: Path) -> dict:
    router = Router(args.workers, tmp)
    try:
        url = f"amqp://127.0.0.1:{router.port}"
        before = client_ports(router.port)
        traffic = Traffic(url, args.rate)
        container = Container(traffic)
        container.timeout = 0.005
        container.start()
        end_pre = time.monotonic() + args.pre
        while time.monotonic() < end_pre:
            container.process()
            traffic.pump()
        pids = router.children()
        victim = kind
        if kind == "worker":  # the worker that holds the receiver's connection
            ports = sorted(client_ports(router.port) - before)
            victim = holder_of_client(router.port, pids, ports[0]) if ports else "worker0"
        killed_at = time.monotonic()
        os.kill(pids[victim], signal.SIGKILL)
        result: dict = {"kind": kind, "victim": victim}
        probe = threading.Thread(target=probe_accept,
                                 args=(url, killed_at, killed_at + 10, result), daemon=True)
        probe.start()
        # keep sending for a while, then stop and let every outstanding delivery settle
        stop_sending = time.monotonic() + args.post
        while time.monotonic() < stop_sending:
            container.process()
            traffic.pump()
        settle_by = time.monotonic() + SETTLE_TIMEOUT
        while (time.monotonic() < settle_by and not traffic.sender_dropped
               and sum(traffic.outcomes.values()) < traffic.sent):
            container.process()
        probe.join(10)
        marker = "Router processes restarted" if kind == "core" else f"{victim} process"
        text = "" if kind == "core" else "is running again"
        at = None
        for t, line in router.lines:
            if t >= killed_at and marker in line and text in line:
                at = t
                break
        result["restart_s"] = None if at is None else at - killed_at
        settled = sum(traffic.outcomes.values())
        result.update(traffic.outcomes, sent=traffic.sent, received=traffic.received,
                      silent=0 if traffic.sender_dropped else traffic.sent - settled,
                      sender_dropped=traffic.sender_dropped,
                      receiver_dropped=traffic.receiver_dropped)
        container.stop()
        return result
    finally:
        router.stop()


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="worker,agent,core")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--pre", type=float, default=1.5)
    parser.add_argument("--post", type=float, default=3.0)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            for _ in range(args.repeat):
                rows.append(run_once(kind, args, Path(tmp)))
    header = ("kind", "victim", "accept_s", "restart_s", "sent", "accepted", "released",
              "modified", "silent", "sender_dropped", "receiver_dropped")
    print(" ".join(f"{h:>16}" for h in header))
    for row in rows:
        cells = []
        for h in header:
            v = row.get(h)
            cells.append(f"{v:16.3f}" if isinstance(v, float) else f"{str(v):>16}")
        print(" ".join(cells))
    silent = sum(r["silent"] for r in rows)
    print(f"silent losses: {silent}")
    return 1 if silent else 0


if __name__ == "__main__":
    sys.exit(main())
