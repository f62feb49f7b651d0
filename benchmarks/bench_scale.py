"""Scale: what connections, links, addresses and management cost as their number grows, side by
side with Qpid Dispatch 1.x when an install is named.

A script, not a test. For every size of ``--sizes`` (default 1000,10000) and every case of
``--cases``, it starts a fresh router of each kind (ours, then 1.x with ``--qdrouterd-1x``;
the order swaps at every size so neither always runs on a box warmed by the other), sets up
what the case needs, measures, and stops the router. Results: one ``scale/1`` JSON line per
(case, size, router) appended to ``--out`` (default ``benchmarks/results/scale-<UTC>.jsonl``),
a table on stderr, and with ``--plots DIR`` one PNG per case: its figure against the size, ours
and 1.x, both axes logarithmic (``plot`` redraws them from JSON lines).

    python benchmarks/bench_scale.py --sizes 1000,10000 --qdrouterd-1x /opt/qpid-dispatch-1.19.0
    python benchmarks/bench_scale.py --sizes 1000,10000,100000 --cases qdstat-c --plots docs/scale
    python benchmarks/bench_scale.py plot benchmarks/results/scale-*.jsonl --plots docs/scale

Cases (the registry ``CASES``; ``--list`` prints it):

``qdstat-c`` / ``qdstat-a`` / ``qdstat-l``: the time of one ``qdstat -c`` / ``-a`` / ``-l``
    (``--qdstat 1x``: 1.x's own tool, the default when an install is named, so both routers are
    read by the same client; ``ours``: this project's) with N connections / N addresses / N
    links present; the router's CPU during it and the rows it printed.
``conns-open``: opening N idle connections: wall time, router CPU per open, memory per
    connection, and each process's resident memory after.
``attach``: attaching N receivers on distinct addresses (``--links-per-conn`` on one
    connection): wall time, attaches a second, router CPU per attach, memory per link.
``propagate``: N mobile addresses attached on A, in a chain A -> B -> C of interior routers:
    seconds until C (and B) count them all (``addrCount`` of the router entity, polled every
    0.5 s: a probe that itself costs what a router read costs), router CPU per address per
    router, and inter-router bytes per address (what B's and C's inter-router listeners
    received meanwhile, from the kernel's tcp_info via ``ss``).
``read-conn`` / ``read-addr``: one-row management requests on a router holding N connections /
    N addresses (a receiver each), from one in-process AMQP client: the median wall time of a
    READ by identity and of a QUERY with ``count`` 1, and the router's CPU per request.

The populations the cases share (``POPULATIONS``; built once per size and router for every case
that names it, by :class:`RawClients`):

``conns``: N idle connections, each SASL ANONYMOUS, open and one session (begun).
``receivers``: N receiving links on distinct addresses (``scale.C.I``), at most
    ``--links-per-conn`` (default 10,000) on one connection.

Each population row carries its set-up figures: wall time, router CPU, the client's own CPU
(``client_cpu_s``: a load generator slower than the router would measure itself; the script
warns when it used more CPU than the router), the router's resident memory (every process's
VmRSS) and open file descriptors before and after, and per 1,000 entities.

The client (:class:`RawClients`) writes pre-encoded AMQP frames (SASL ANONYMOUS, open, begin,
attach) on non-blocking sockets from one epoll loop, ``--in-flight`` connections set up at a
time, and reads only as much of the answers as it needs (frame types counted). Source addresses
127.N.0.1, 127.N.1.1, ... (N new for each set-up; ``SOURCES_PER_ADDRESS`` connections each: the ephemeral port range is about
28,000 per pair of addresses). It raises this process's ``RLIMIT_NOFILE`` (soft, and the hard
limit when running as root) to what N connections need, and starts the routers with it (they
inherit it); a router that cannot get the descriptors fails to accept, which the script reports.

Adding a case: write ``def case_x(bench: Bench, kind: str, size: int, pop: Optional[dict]) ->
dict`` returning its figures (plain JSON values), and register it with ``@case("x", metric=...,
population=...)``. ``population=None``: no shared set-up; the case starts what it needs with
``bench.start_router(kind, ...)`` (stopped by the runner after the case) and ``pop`` is None.
``metric`` names the figure the plot draws against the size.

Both routers get the same configuration (standalone, ``workerThreads`` ``--workers``, one
listener on 127.0.0.1, ANONYMOUS, ``idleTimeoutSeconds: 0`` so idle connections need no
heartbeats). Every process started here is stopped here; every wait is bounded; only loopback
addresses are used. Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import errno
import glob
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run_router_bench as rb  # noqa: E402
import side_by_side  # noqa: E402
from fuzz_front_door import frame, performative  # noqa: E402 - the same frame encoders

SCHEMA = "scale/1"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SOURCES_PER_ADDRESS = 20_000
# performative codes (AMQP 1.0 descriptors) the client counts in the router's answers
OPEN, BEGIN, ATTACH, CLOSE, SASL_OUTCOME = 0x10, 0x11, 0x12, 0x18, 0x44


# --------------------------------------------------------------------------- frames


def conn_preamble(container: str) -> bytes:
    """SASL ANONYMOUS, the AMQP header, open and begin (channel 0), pipelined."""
    init = frame(performative(0x41, [lambda d: d.put_symbol("ANONYMOUS"),
                                     lambda d: d.put_binary(b"")]), ftype=1)
    opened = frame(performative(OPEN, [lambda d: d.put_string(container),
                                       lambda d: d.put_string("127.0.0.1")]))
    begun = frame(performative(BEGIN, [lambda d: d.put_null(), lambda d: d.put_uint(0),
                                       lambda d: d.put_uint(2048), lambda d: d.put_uint(2048)]))
    return SASL_HEADER + init + AMQP_HEADER + opened + begun


def attach_receiver(handle: int, address: str) -> bytes:
    """An attach of a receiving link (role receiver) with its source address."""
    source = performative(0x28, [lambda d: d.put_string(address)])
    from proton import Data

    def put_source(d: Any) -> None:
        src = Data()
        src.decode(source)
        d.put_object(src.get_object())

    return frame(performative(ATTACH, [
        lambda d: d.put_string(f"r{handle}"), lambda d: d.put_uint(handle),
        lambda d: d.put_bool(True), lambda d: d.put_ubyte(2), lambda d: d.put_ubyte(0),
        put_source, lambda d: d.put_null()]))


class _Conn:
    __slots__ = ("sock", "out", "buf", "header_seen", "counts", "want", "done", "index")

    def __init__(self, sock: socket.socket, out: bytes, want: dict, index: int) -> None:
        self.sock, self.out, self.buf = sock, out, b""
        self.header_seen = 0  # protocol headers read (SASL, then AMQP)
        self.counts: dict[int, int] = {}
        self.want = want  # performative code -> how many answers mean "set up"
        self.done = False
        self.index = index

    def parse(self) -> None:
        buf, pos = self.buf, 0
        while True:
            if len(buf) - pos >= 8 and buf[pos:pos + 4] == b"AMQP":
                pos += 8
                self.header_seen += 1
                continue
            if len(buf) - pos < 8:
                break
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if len(buf) - pos < size:
                break
            doff = buf[pos + 4] * 4
            body = buf[pos + doff:pos + size]
            if len(body) >= 3 and body[0] == 0 and body[1] == 0x53:
                self.counts[body[2]] = self.counts.get(body[2], 0) + 1
            pos += size
        self.buf = buf[pos:]
        if self.counts.get(CLOSE) or all(self.counts.get(code, 0) >= n for code, n in self.want.items()):
            self.done = True


class RawClients:
    """Many AMQP connections from one epoll loop, each sent a pre-encoded byte stream; kept
    open (and never read again) until :meth:`close`."""

    runs = int(time.time()) % 240  # a different source network for each set-up (below)

    def __init__(self, port: int) -> None:
        self.port = port
        # source addresses of their own (127.<net>.x.1): the TIME_WAIT sockets of the previous
        # run on a source address make bind() search the port range (seconds of kernel CPU)
        self.net = 10 + RawClients.runs % 240
        RawClients.runs += 1
        self.socks: list[socket.socket] = []
        self.closed_by_router = 0

    def open(self, streams: list[tuple[bytes, dict]], in_flight: int, timeout: float) -> None:
        """Set up one connection per (bytes, {code: count wanted}); ``in_flight`` at a time."""
        deadline = time.monotonic() + timeout
        poller = select.epoll()
        active: dict[int, _Conn] = {}
        nxt = 0
        try:
            while nxt < len(streams) or active:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"set-up not done in {timeout:g} s: {len(self.socks)} "
                                       f"of {len(streams)} connections")
                while nxt < len(streams) and len(active) < in_flight:
                    index = len(self.socks) + len(active)
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sock.setblocking(False)
                    sock.bind((f"127.{self.net}.{index // SOURCES_PER_ADDRESS}.1", 0))
                    err = sock.connect_ex(("127.0.0.1", self.port))
                    if err not in (0, errno.EINPROGRESS):
                        sock.close()
                        raise OSError(err, os.strerror(err))
                    out, want = streams[nxt]
                    nxt += 1
                    active[sock.fileno()] = _Conn(sock, out, want, index)
                    poller.register(sock.fileno(), select.EPOLLIN | select.EPOLLOUT)
                for fd, mask in poller.poll(0.1):
                    c = active.get(fd)
                    if c is None:
                        continue
                    if mask & select.EPOLLOUT and c.out:
                        try:
                            sent = c.sock.send(c.out)
                            c.out = c.out[sent:]
                        except (BlockingIOError, InterruptedError):
                            pass
                        if not c.out:
                            poller.modify(fd, select.EPOLLIN)
                    if mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                        try:
                            data = c.sock.recv(1 << 20)
                        except (BlockingIOError, InterruptedError):
                            data = None
                        except OSError:
                            data = b""
                        if data == b"":
                            raise RuntimeError(f"the router closed connection {c.index} "
                                               f"during set-up (answers {c.counts})")
                        if data:
                            c.buf += data
                            c.parse()
                    if c.done and not c.out:
                        if c.counts.get(CLOSE):
                            raise RuntimeError(f"the router closed connection {c.index}: "
                                               f"{c.buf[:200]!r}")
                        poller.unregister(fd)
                        del active[fd]
                        self.socks.append(c.sock)
        finally:
            poller.close()
            for c in active.values():
                c.sock.close()

    def close(self) -> None:
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []


# --------------------------------------------------------------------------- routers
def conf_text(port: int, workers: int) -> str:
    return ("router {\n    mode: standalone\n    id: Scale\n"
            f"    workerThreads: {workers}\n}}\n\n"
            "listener {\n    host: 127.0.0.1\n"
            f"    port: {port}\n    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n"
            "    idleTimeoutSeconds: 0\n}\n")


def tree_rss_kb(root: int) -> int:
    total = 0
    for pid in rb.process_tree(root):
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def tree_rss_by_process(root: int) -> dict:
    """VmRSS (kB) of each process of the router, labelled as RouterCpu labels them."""
    out: dict[str, int] = {}
    for pid in rb.process_tree(root):
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                kb = next((int(x.split()[1]) for x in f if x.startswith("VmRSS:")), 0)
        except OSError:
            continue
        label = rb.proc_label(pid)
        out[label] = out.get(label, 0) + kb
    return out


def tree_fds(root: int) -> int:
    total = 0
    for pid in rb.process_tree(root):
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            pass
    return total


def raise_nofile(need: int) -> int:
    """Raise RLIMIT_NOFILE to ``need`` (the hard limit too when allowed); the soft limit set."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need > hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            return need
        except (ValueError, OSError):
            need = hard
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Case:
    name: str
    fn: Callable[..., dict]
    metric: str          # the figure plotted against the size
    population: Optional[str]
    doc: str


CASES: dict[str, Case] = {}
POPULATIONS: dict[str, Callable[..., dict]] = {}


def case(name: str, metric: str, population: Optional[str] = None) -> Callable:
    def register(fn: Callable[..., dict]) -> Callable[..., dict]:
        CASES[name] = Case(name, fn, metric, population, (fn.__doc__ or "").strip())
        return fn
    return register


def population(name: str) -> Callable:
    def register(fn: Callable[..., dict]) -> Callable[..., dict]:
        POPULATIONS[name] = fn
        return fn
    return register


class Bench:
    """What cases share: the options, the routers started for the current case, helpers."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.routers: list[rb.Router] = []
        self.clients: list[RawClients] = []

    def start_router(self, kind: str, conf: Optional[str] = None, port: int = 0,
                     name: str = "scale") -> rb.Router:
        """A router of ``kind`` ("ours" | "1x") on ``conf`` (default: :func:`conf_text`),
        ready; stopped by :meth:`stop_all`."""
        port = port or rb.free_port()
        if kind == "1x":
            cmd = f"{self.args.qdrouterd_1x / 'sbin' / 'qdrouterd'} -c {{conf}}"
            env = side_by_side.env_1x(self.args.qdrouterd_1x)
        else:
            cmd, env = None, {}
        workdir = self.workdir / f"{name}-{kind}-{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        router = rb.Router(workdir, port, self.args.workers, cmd, env, name=name,
                           conf_text=conf or conf_text(port, self.args.workers),
                           new_session=True)
        self.routers.append(router)
        router.wait_ready()
        if kind == "ours":  # its agent answers management once Operational is logged
            time.sleep(0.5)
        return router

    def stop_all(self) -> None:
        for c in self.clients:
            c.close()
        self.clients = []
        for r in self.routers:
            r.stop()
        self.routers = []

    def qdstat_cmd(self) -> tuple[list[str], dict]:
        if self.args.qdstat == "1x":
            prefix = self.args.qdrouterd_1x
            env = {**os.environ, **side_by_side.env_1x(prefix)}
            python = "/usr/bin/python3"  # with Debian's proton binding, else this one's
            if subprocess.run([python, "-c", "import proton"], env=env,
                              capture_output=True).returncode != 0:
                python = sys.executable
            return [python, str(prefix / "bin" / "qdstat")], env
        return [sys.executable, "-m", "tools.qdstat"], dict(os.environ)

    def qdstat(self, router: rb.Router, *options: str) -> dict:
        """Run qdstat once: wall seconds, the router's CPU seconds meanwhile, rows printed."""
        cmd, env = self.qdstat_cmd()
        cmd = cmd + ["-b", f"127.0.0.1:{router.port}", "-t", str(int(self.args.timeout)),
                     *options]
        meter = rb.RouterCpu(router.proc.pid)
        meter.start()
        t0 = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                  timeout=self.args.timeout + 30)
            wall = time.monotonic() - t0
            ok = done.returncode == 0
            err = (done.stderr.strip() or done.stdout.strip())[-300:]
            lines = done.stdout.splitlines()
        except subprocess.TimeoutExpired:
            wall, ok, err, lines = time.monotonic() - t0, False, "timed out", []
        cpu, _ = meter.stop()
        # rows: the table's lines after its ==== rule
        rule = next((i for i, line in enumerate(lines) if line.strip().startswith("=")), None)
        rows = len([x for x in lines[rule + 1:] if x.strip()]) if rule is not None else 0
        return {"seconds": round(wall, 3), "router_cpu_s": round(cpu, 3), "rows": rows,
                "ok": ok, **({} if ok else {"error": err})}


# --------------------------------------------------------------------------- populations
def _setup(bench: Bench, router: rb.Router, streams: list, size: int, what: str) -> dict:
    rss0, fds0 = tree_rss_kb(router.proc.pid), tree_fds(router.proc.pid)
    clients = RawClients(router.port)
    bench.clients.append(clients)
    meter = rb.RouterCpu(router.proc.pid)
    meter.start()
    cpu0, t0 = self_cpu(), time.monotonic()
    clients.open(streams, bench.args.in_flight, bench.args.setup_timeout)
    wall, client_cpu = time.monotonic() - t0, self_cpu() - cpu0
    router_cpu, _ = meter.stop()
    time.sleep(1.0)  # what the router does right after (deferred work) counts in its memory
    rss1, fds1 = tree_rss_kb(router.proc.pid), tree_fds(router.proc.pid)
    per_k = 1000.0 / size
    fig = {"population": what, "setup_s": round(wall, 3),
           "setup_router_cpu_s": round(router_cpu, 3),
           "setup_client_cpu_s": round(client_cpu, 3),
           "rss_mb_before": round(rss0 / 1024, 1), "rss_mb_after": round(rss1 / 1024, 1),
           "fds_before": fds0, "fds_after": fds1,
           "per_1000": {"rss_mb": round((rss1 - rss0) / 1024 * per_k, 2),
                        "cpu_s": round(router_cpu * per_k, 3),
                        "fds": round((fds1 - fds0) * per_k, 1)}}
    if client_cpu > router_cpu:
        fig["warning"] = (f"the client used more CPU ({client_cpu:.2f} s) than the router "
                          f"({router_cpu:.2f} s): it may be what was measured")
    return fig


@population("conns")
def populate_conns(bench: Bench, router: rb.Router, size: int) -> dict:
    """N idle connections, each open with one session."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if size + 500 > limit:  # the client and the router each hold one descriptor a connection
        raise RuntimeError(f"{size} connections need more than RLIMIT_NOFILE {limit} "
                           "descriptors (raising the hard limit needs CAP_SYS_RESOURCE)")
    tag = uuid.uuid4().hex[:8]
    streams = [(conn_preamble(f"scale-{tag}-{i}"), {BEGIN: 1}) for i in range(size)]
    return _setup(bench, router, streams, size, "conns")


@population("receivers")
def populate_receivers(bench: Bench, router: rb.Router, size: int) -> dict:
    """N receivers on distinct addresses, at most --links-per-conn on one connection."""
    per = bench.args.links_per_conn
    tag = uuid.uuid4().hex[:8]
    streams = []
    for c in range(0, size, per):
        n = min(per, size - c)
        out = conn_preamble(f"scale-{tag}-{c // per}") + b"".join(
            attach_receiver(h, f"scale.{c // per}.{h}") for h in range(n))
        streams.append((out, {ATTACH: n}))
    return _setup(bench, router, streams, size, "receivers")


# --------------------------------------------------------------------------- cases
@case("qdstat-c", metric="seconds", population="conns")
def case_qdstat_c(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """qdstat -c with N connections."""
    return bench.qdstat(pop["router"], "-c")


@case("qdstat-a", metric="seconds", population="receivers")
def case_qdstat_a(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """qdstat -a with N addresses (a receiver each)."""
    return bench.qdstat(pop["router"], "-a")


@case("qdstat-l", metric="seconds", population="receivers")
def case_qdstat_l(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """qdstat -l with N links."""
    return bench.qdstat(pop["router"], "-l")


def one_row_requests(bench: Bench, router: rb.Router, entity_type: str,
                     repeat: int) -> dict:
    """Median wall seconds of a one-row QUERY (count 1) and of a READ by identity of the entity
    it returned, and the router's CPU per request; one client connection for all."""
    from proton import Message
    from proton.utils import BlockingConnection, SyncRequestResponse
    conn = BlockingConnection(f"127.0.0.1:{router.port}", timeout=bench.args.timeout)
    try:
        rr = SyncRequestResponse(conn, "$management")

        def ask(props: dict, body: Any) -> Message:
            return rr.call(Message(properties=props, body=body))

        query = {"operation": "QUERY", "type": "org.amqp.management", "name": "self",
                 "entityType": entity_type, "offset": 0, "count": 1}
        first = ask(query, {"attributeNames": ["identity"]})
        identity = first.body["results"][0][0]
        read = {"operation": "READ", "type": entity_type, "identity": identity}
        figures = {}
        for label, props, body in (("query1", query, {"attributeNames": []}),
                                   ("read", read, {})):
            times = []
            meter = rb.RouterCpu(router.proc.pid)
            meter.start()
            for _ in range(repeat):
                t0 = time.monotonic()
                answer = ask(props, body)
                times.append(time.monotonic() - t0)
                if answer.properties.get("statusCode") != 200:
                    raise RuntimeError(f"{label}: {answer.properties}")
            cpu, _ = meter.stop()
            figures[f"{label}_s"] = round(statistics.median(times), 5)
            figures[f"{label}_router_cpu_ms"] = round(cpu / repeat * 1000, 3)
        return figures
    finally:
        conn.close()


@case("read-conn", metric="read_s", population="conns")
def case_read_conn(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """One-row READ / QUERY of a connection with N connections."""
    return one_row_requests(bench, pop["router"], "org.apache.qpid.dispatch.connection",
                            bench.args.repeat)


@case("read-addr", metric="read_s", population="receivers")
def case_read_addr(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """One-row READ / QUERY of an address with N addresses."""
    return one_row_requests(bench, pop["router"], "org.apache.qpid.dispatch.router.address",
                            bench.args.repeat)


@case("conns-open", metric="seconds", population="conns")
def case_conns_open(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """Opening N idle connections: wall time, router CPU per open, memory per connection."""
    return {"seconds": pop["setup_s"], "router_cpu_s": pop["setup_router_cpu_s"],
            "cpu_us_per_conn": round(pop["setup_router_cpu_s"] / size * 1e6, 1),
            "kb_per_conn": round(pop["per_1000"]["rss_mb"] * 1024 / 1000, 2),
            "rss_by_process_kb": tree_rss_by_process(pop["router"].proc.pid)}


@case("attach", metric="seconds", population="receivers")
def case_attach(bench: Bench, kind: str, size: int, pop: dict) -> dict:
    """Attaching N receivers on distinct addresses (--links-per-conn on one connection)."""
    return {"seconds": pop["setup_s"], "router_cpu_s": pop["setup_router_cpu_s"],
            "attaches_per_s": round(size / pop["setup_s"], 1) if pop["setup_s"] else None,
            "cpu_us_per_attach": round(pop["setup_router_cpu_s"] / size * 1e6, 1),
            "kb_per_link": round(pop["per_1000"]["rss_mb"] * 1024 / 1000, 2)}


def _router_counts(port: int, timeout: float) -> dict:
    """addrCount and nodeCount of the router entity (one READ-like QUERY row)."""
    from proton import Message
    from proton.utils import BlockingConnection, SyncRequestResponse
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=timeout)
    try:
        rr = SyncRequestResponse(conn, "$management")
        answer = rr.call(Message(properties={
            "operation": "QUERY", "type": "org.amqp.management", "name": "self",
            "entityType": "org.apache.qpid.dispatch.router"},
            body={"attributeNames": ["addrCount", "nodeCount"]}))
        addr, nodes = answer.body["results"][0]
        return {"addr": int(addr or 0), "nodes": int(nodes or 0)}
    finally:
        conn.close()


def _tcp_bytes_received(port: int) -> int:
    """Bytes received by the established TCP sockets on local ``port`` (ss's tcp_info)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, timeout=10).stdout
    return sum(int(x.split(":")[1]) for x in out.split() if x.startswith("bytes_received:"))


@case("propagate", metric="seconds")
def case_propagate(bench: Bench, kind: str, size: int, pop: None) -> dict:
    """N mobile addresses (a receiver each, attached on A) known on B and C, in a chain
    A -> B -> C of interior routers: seconds until C counts them all, router CPU per address,
    and the inter-router bytes per address (A to B, B to C: what B's and C's inter-router
    listeners received meanwhile, tcp_info)."""
    import bench_network
    ports = {n: rb.free_port() for n in "ABC"}
    ir = {n: rb.free_port() for n in "ABC"}
    routers = {}
    for name, peer in (("C", None), ("B", "C"), ("A", "B")):  # each connector finds its peer
        connect = [(ir[peer], 1, peer)] if peer else []
        conf = bench_network.interior_conf(f"Router.{name}", ports[name], ir[name],
                                           bench.args.workers, connect)
        # the clients send no heartbeats: idle connections must not time out (conf_text)
        conf = conf.replace("    saslMechanisms: ANONYMOUS\n}\nlistener",
                            "    saslMechanisms: ANONYMOUS\n    idleTimeoutSeconds: 0\n}\n"
                            "listener", 1)
        assert "idleTimeoutSeconds: 0" in conf, conf
        routers[name] = bench.start_router(kind, conf=conf, port=ports[name], name=name)
    deadline = time.monotonic() + 60
    while True:  # the three routers know each other
        counts = {n: _router_counts(ports[n], bench.args.timeout) for n in "BC"}
        if all(c["nodes"] >= 2 for c in counts.values()):  # the other two
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the chain did not form in 60 s: {counts}")
        time.sleep(0.5)
    time.sleep(2.0)  # addresses of the routers themselves settle
    base = {n: _router_counts(ports[n], bench.args.timeout)["addr"] for n in "BC"}
    bytes0 = {n: _tcp_bytes_received(ir[n]) for n in "BC"}
    meter = rb.RouterCpu([r.proc.pid for r in routers.values()], list(routers))
    meter.start()
    t0 = time.monotonic()
    per = bench.args.links_per_conn
    tag = uuid.uuid4().hex[:8]
    streams = []
    for c in range(0, size, per):
        n = min(per, size - c)
        out = conn_preamble(f"prop-{tag}-{c // per}") + b"".join(
            attach_receiver(h, f"prop.{c // per}.{h}") for h in range(n))
        streams.append((out, {ATTACH: n}))
    clients = RawClients(ports["A"])
    bench.clients.append(clients)
    clients.open(streams, bench.args.in_flight, bench.args.setup_timeout)
    attached = time.monotonic() - t0
    seen: dict[str, float] = {}
    deadline = t0 + bench.args.setup_timeout
    while len(seen) < 2:
        for n in "BC":
            if n not in seen and (_router_counts(ports[n], bench.args.timeout)["addr"]
                                  >= base[n] + size):
                seen[n] = time.monotonic() - t0
        if time.monotonic() > deadline:
            raise RuntimeError(f"not propagated in {bench.args.setup_timeout:g} s: {seen}")
        if len(seen) < 2:
            time.sleep(0.5)
    cpu, by_label = meter.stop()
    sent = {n: _tcp_bytes_received(ir[n]) - bytes0[n] for n in "BC"}
    by_router: dict[str, float] = {}
    for label, sec in by_label.items():
        by_router[label.split(":")[0]] = by_router.get(label.split(":")[0], 0.0) + sec
    return {"seconds": round(seen["C"], 3), "known_on_b_s": round(seen["B"], 3),
            "attached_on_a_s": round(attached, 3), "router_cpu_s": round(cpu, 3),
            "cpu_us_per_address": {n: round(v / size * 1e6, 1) for n, v in by_router.items()},
            "bytes_per_address": {"A->B": round(sent["B"] / size, 1),
                                  "B->C": round(sent["C"] / size, 1)},
            "cpu_by_process_s": {k: round(v, 3) for k, v in by_label.items()}}


# --------------------------------------------------------------------------- runner
def kinds_for(args: argparse.Namespace, size_index: int) -> list[str]:
    kinds = ["ours"] + (["1x"] if args.qdrouterd_1x else [])
    return kinds if size_index % 2 == 0 else kinds[::-1]


def run(args: argparse.Namespace) -> list[dict]:
    need = max(args.sizes) * 2 + 1000
    nofile = raise_nofile(need)
    if nofile < need:
        print(f"note: RLIMIT_NOFILE is {nofile}, below the {need} the largest size needs",
              file=sys.stderr)
    selected = [CASES[name] for name in args.cases]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        bench = Bench(args, Path(tmp))
        for si, size in enumerate(args.sizes):
            groups: dict[Optional[str], list[Case]] = {}
            for c in selected:
                groups.setdefault(c.population, []).append(c)
            for pop_name, group in groups.items():
                for kind in kinds_for(args, si):
                    if pop_name is None:
                        for c in group:
                            rows.append(_run_case(bench, c, kind, size, None))
                        continue
                    try:
                        router = bench.start_router(kind)
                        pop = POPULATIONS[pop_name](bench, router, size)
                        pop["router"] = router
                    except Exception as exc:  # noqa: BLE001 - reported, the next one runs
                        bench.stop_all()
                        for c in group:
                            rows.append(_row(c, kind, size, {"ok": False,
                                                             "error": f"set-up: {exc}"}))
                        continue
                    try:
                        for c in group:
                            rows.append(_run_case(bench, c, kind, size, pop, keep=True))
                    finally:
                        bench.stop_all()
    return rows


def _row(c: Case, kind: str, size: int, figures: dict) -> dict:
    row = {"schema": SCHEMA, "case": c.name, "size": size, "router": kind,
           "metric": c.metric, **figures}
    _emit(row)
    return row


def _run_case(bench: Bench, c: Case, kind: str, size: int, pop: Optional[dict],
              keep: bool = False) -> dict:
    try:
        figures = c.fn(bench, kind, size, pop)
    except Exception as exc:  # noqa: BLE001 - one failed case does not end the run
        figures = {"ok": False, "error": repr(exc)[:300]}
    finally:
        if not keep:
            bench.stop_all()
    if pop is not None:
        figures = {**figures, "setup": {k: v for k, v in pop.items() if k != "router"}}
    return _row(c, kind, size, figures)


OUT: Optional[Path] = None


def _emit(row: dict) -> None:
    line = json.dumps(row, sort_keys=True)
    if OUT is not None:
        with OUT.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
    metric = row.get(row["metric"])
    setup = row.get("setup") or {}
    print(f"{row['case']:<10} {row['size']:>7} {row['router']:<4} {row['metric']}="
          f"{metric if metric is not None else row.get('error')}"
          + (f"  (set-up {setup.get('setup_s')} s, router CPU "
             f"{setup.get('setup_router_cpu_s')} s, client CPU "
             f"{setup.get('setup_client_cpu_s')} s)" if setup else ""), file=sys.stderr)


def plot(rows: list[dict], outdir: Path) -> list[Path]:
    """One PNG per case: its metric against size, one line per router, log axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    by_case: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("schema") == SCHEMA:
            by_case.setdefault(row["case"], []).append(row)
    for name, case_rows in sorted(by_case.items()):
        metric = case_rows[0]["metric"]
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for kind, style in (("ours", "o-"), ("1x", "s--")):
            points: dict[int, list[float]] = {}
            for row in case_rows:
                value = row.get(metric)
                if row["router"] == kind and row.get("ok", True) and \
                        isinstance(value, (int, float)) and value > 0:
                    points.setdefault(row["size"], []).append(value)
            if points:
                xs = sorted(points)
                ax.plot(xs, [statistics.median(points[x]) for x in xs], style,
                        label="qdrouter-py" if kind == "ours" else "Qpid Dispatch 1.19")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("size (entities)")
        ax.set_ylabel(metric)
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_lines():
            ax.legend()
        fig.tight_layout()
        path = outdir / f"scale-{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", nargs="?", default="run", choices=("run", "plot"))
    p.add_argument("files", nargs="*", help="plot: scale/1 JSON lines files")
    p.add_argument("--sizes", type=_ints, default=[1000, 10000])
    p.add_argument("--cases", type=lambda s: [x for x in s.split(",") if x],
                   default=["qdstat-c", "qdstat-a", "qdstat-l", "read-conn", "read-addr"])
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("--qdrouterd-1x", type=Path, help="install prefix of a 1.x router")
    p.add_argument("--qdstat", choices=("1x", "ours"),
                   help="whose qdstat (default: 1.x's when an install is named)")
    p.add_argument("--workers", type=int, default=4, help="workerThreads")
    p.add_argument("--links-per-conn", type=int, default=10_000)
    p.add_argument("--in-flight", type=int, default=50, help="connections set up at a time")
    p.add_argument("--repeat", type=int, default=20, help="one-row requests per figure")
    p.add_argument("--timeout", type=float, default=600.0, help="per qdstat / request")
    p.add_argument("--setup-timeout", type=float, default=900.0)
    p.add_argument("--out", type=Path, help="append JSON lines here")
    p.add_argument("--plots", type=Path, help="write a PNG per case into this directory")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    global OUT
    args = build_parser().parse_args(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:<10} [{c.population or '-'}] {c.metric}: {c.doc}")
        return 0
    if args.command == "plot":
        rows = []
        for name in args.files:
            for path in glob.glob(name):
                with open(path, encoding="utf-8") as f:
                    rows += [json.loads(x) for x in f if x.startswith("{")]
        for path in plot(rows, args.plots or HERE / "results"):
            print(path)
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; --list shows them", file=sys.stderr)
        return 2
    if args.qdstat is None:
        args.qdstat = "1x" if args.qdrouterd_1x else "ours"
    if args.qdstat == "1x" and not args.qdrouterd_1x:
        print("--qdstat 1x needs --qdrouterd-1x", file=sys.stderr)
        return 2
    OUT = args.out or HERE / "results" / time.strftime("scale-%Y%m%dT%H%M%SZ.jsonl",
                                                       time.gmtime())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = run(args)
    if args.plots:
        for path in plot(rows, args.plots):
            print(f"plot: {path}", file=sys.stderr)
    print(f"results: {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
