"""One interior router with many edge routers attached: what each edge costs the interior.

Real edge routers are four processes each (supervisor, core, agent, worker), far too many for
hundreds on one machine, and the interior cannot tell them from a client that speaks their
protocol. So each edge here is simulated by one proton connection in this process that does
what an edge does on its uplink (DESIGN.md "Edge routers"): container id ``Edge.<n>``, an
anonymous sender, the downlink (source ``Edge.<n>``, capability ``qd.router-edge-downlink``),
the address-tracking receiver, the heartbeat sender (one heartbeat every 2 s, else the
interior closes the connection after 8 s), and one proxy receiver for ``edge.<n>.inbox`` (a
consumer on that edge). Then a client on the interior's normal listener sends one message to
every ``edge.<n>.inbox`` and each edge accepts it.

Printed (and one ``edge-scale/1`` JSON line appended to ``--out``): the interior's RSS
(every process of it, from /proc) before and after the edges attached, the growth per edge,
what 1,000 edges would cost at that rate, how many messages reached their edge, and the
interior's CPU seconds spent while the edges attached.

    python benchmarks/edge_scale.py --edges 200
    python benchmarks/edge_scale.py --edges 200 --qdrouterd-1x /opt/qpid-dispatch-1.19.0

Every process started here is stopped here; every wait is bounded; only 127.0.0.1 is used.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from proton import Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container

import bench_network as bn
import run_router_bench as rb

HERE = Path(__file__).resolve().parent
DOWNLINK = symbol("qd.router-edge-downlink")
TRACKING = "_$qd.edge_addr_tracking"
HEARTBEAT = "_$qd.edge_heartbeat"


def tree_pids(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kb(root: int) -> int:
    return sum(_status_kb(p, "VmRSS") for p in tree_pids(root))


def tree_cpu_s(root: int) -> float:
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return total


class Edges(MessagingHandler):
    """``n`` simulated edges on ``edge_url``; then one message to each edge's inbox from a
    client on ``client_url``."""

    def __init__(self, edge_url: str, client_url: str, n: int, timeout: float,
                 on_attached) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.edge_url, self.client_url, self.n, self.timeout = edge_url, client_url, n, timeout
        self.on_attached = on_attached
        self.expected_links = 5 * n
        self.active = 0
        self.beats: dict = {}    # heartbeat sender -> next sequence number
        self.received = 0
        self.accepted = 0
        self.sent = 0
        self.error: Optional[str] = None
        self.phase = "attach"

    def on_start(self, event) -> None:
        self.container = event.container
        self.deadline = time.monotonic() + self.timeout
        for i in range(self.n):
            conn = event.container.connect(self.edge_url, reconnect=False)
            conn.container = f"Edge.{i}"
            self._links(event.container, conn, i)
        event.container.schedule(2.0, self)
        event.container.schedule(1.0, self)

    def _links(self, container, conn, i: int) -> None:
        container.create_sender(conn, None, name=f"anon-{i}")
        down = container.create_receiver(conn, f"Edge.{i}", name=f"down-{i}")
        down.source.capabilities.put_object(DOWNLINK)
        down.target.capabilities.put_object(DOWNLINK)
        down.flow(10)
        container.create_receiver(conn, TRACKING, name=f"track-{i}").flow(32)
        beat = container.create_sender(conn, HEARTBEAT, name=f"beat-{i}")
        self.beats[beat] = 0
        container.create_receiver(conn, f"edge.{i}.inbox", name=f"inbox-{i}").flow(5)

    def on_link_opened(self, event) -> None:
        if event.connection.container.startswith("Edge."):
            self.active += 1
            if self.active == self.expected_links and self.phase == "attach":
                self.phase = "settle"
                self.on_attached()
                client = event.container.connect(self.client_url, reconnect=False)
                self.client = event.container.create_sender(client, None, name="client")

    def on_sendable(self, event) -> None:
        if event.link.name == "client":
            while event.sender.credit and self.sent < self.n:
                event.sender.send(Message(address=f"edge.{self.sent}.inbox",
                                          body=self.sent))
                self.sent += 1

    def on_message(self, event) -> None:
        if event.receiver.name.startswith("inbox-"):
            self.received += 1
            self.accept(event.delivery)
        elif event.receiver.name.startswith("track-"):
            self.accept(event.delivery)

    def on_accepted(self, event) -> None:
        if event.link.name == "client":
            self.accepted += 1
            if self.accepted == self.n:
                self.phase = "done"
                event.container.stop()

    def on_released(self, event) -> None:
        if event.link.name == "client":
            self.error = self.error or "a message found no edge (released)"

    def on_timer_task(self, event) -> None:
        if self.phase == "done":
            return
        if time.monotonic() > self.deadline:
            self.error = (f"timed out in phase {self.phase}: sent {self.sent} received {self.received}, {self.active}/"
                          f"{self.expected_links} links, {self.accepted}/{self.n} accepted")
            self.container.stop()
            return
        for beat, seq in list(self.beats.items()):
            if beat.credit:
                beat.send(Message(body=seq), tag=str(seq)).settle()
                self.beats[beat] = seq + 1
        self.container.schedule(2.0, self)

    def on_transport_error(self, event) -> None:
        cond = event.transport.condition
        self.error = self.error or f"transport error: {cond.name if cond else '?'}"


def interior_conf(port: int, edge_port: int, workers: int) -> str:
    conf = bn.interior_conf("Router.I", port, rb.free_port(), workers, [])
    return conf + (f"listener {{\n    host: 127.0.0.1\n    port: {edge_port}\n    role: edge\n"
                   "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}\n")


def run(args: argparse.Namespace) -> dict:
    kind = "1.x" if args.qdrouterd_1x else "ours"
    cmd = f"{args.qdrouterd_1x / 'sbin' / 'qdrouterd'} -c {{conf}}" if args.qdrouterd_1x \
        else None
    env = {}
    if args.qdrouterd_1x:
        import side_by_side
        env = side_by_side.env_1x(args.qdrouterd_1x)
    with tempfile.TemporaryDirectory(prefix="edge-scale-") as tmp:
        port, edge_port = rb.free_port(), rb.free_port()
        router = rb.Router(Path(tmp), port, args.workers, cmd, env,
                           conf_text=interior_conf(port, edge_port, args.workers), name="I",
                           new_session=True)
        try:
            router.wait_ready()
            time.sleep(1.0)
            pid = router.proc.pid
            base_kb, cpu0 = tree_rss_kb(pid), tree_cpu_s(pid)
            marks: dict = {}

            def attached() -> None:
                marks["t"] = time.monotonic()

            t0 = time.monotonic()
            edges = Edges(f"127.0.0.1:{edge_port}", f"127.0.0.1:{port}", args.edges,
                          args.timeout, attached)
            Container(edges).run()
            attach_s = marks.get("t", time.monotonic()) - t0
            after_kb, cpu1 = tree_rss_kb(pid), tree_cpu_s(pid)
            try:  # edges the interior dropped for missing heartbeats (this process too slow)
                log = router.log_path.read_text(errors="replace")
                lost = log.count("Lost heartbeat")
            except OSError:
                lost = None
        finally:
            router.stop()
    per_edge_kb = (after_kb - base_kb) / args.edges
    return {
        "schema": "edge-scale/1", "router": kind, "edges": args.edges, "workers": args.workers,
        "rss_before_mb": round(base_kb / 1024, 1), "rss_after_mb": round(after_kb / 1024, 1),
        "per_edge_kb": round(per_edge_kb, 1),
        "thousand_edges_mb": round((base_kb + per_edge_kb * 1000) / 1024, 1),
        "attach_s": round(attach_s, 2), "interior_cpu_s": round(cpu1 - cpu0, 2),
        "delivered": edges.accepted, "error": edges.error, "lost_heartbeats": lost,
        "heartbeats_sent": sum(edges.beats.values()),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--edges", type=int, default=200)
    p.add_argument("--workers", type=int, default=1, help="the interior's workerThreads")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--qdrouterd-1x", type=Path, default=None,
                   help="a Qpid Dispatch 1.x install prefix: measure its interior instead")
    p.add_argument("--out", type=Path, default=HERE / "results" / "edge-scale.jsonl")
    args = p.parse_args(argv)
    row = run(args)
    print(f"{row['router']}: {row['edges']} edges attached in {row['attach_s']} s "
          f"(interior CPU {row['interior_cpu_s']} s); interior RSS {row['rss_before_mb']} MB -> "
          f"{row['rss_after_mb']} MB: {row['per_edge_kb']} kB per edge, about "
          f"{row['thousand_edges_mb']} MB with 1,000 edges; {row['delivered']}/{row['edges']} "
          f"messages reached their edge; {row['lost_heartbeats']} edges closed for lost "
          "heartbeats" + (f"; ERROR {row['error']}" if row["error"] else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write(json.dumps(row) + "\n")
    return 1 if row["error"] or row["delivered"] != row["edges"] else 0


if __name__ == "__main__":
    sys.exit(main())
