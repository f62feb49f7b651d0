"""Benchmark networks of interior routers: throughput through a chain, convergence after a kill.

Chain (``--chains 1,2,3``): N interior routers in a line, ``R1 -> R2 -> ... -> RN`` (each
connects to the next over an inter-router connector, cost 1; ``workerThreads`` ``--workers``).
The sender attaches to R1, the receiver to RN. Each run starts the receivers, waits (bounded)
until R1's ``qdstat -a`` shows the receiver's address with ``remote`` >= 1, then runs the load
generator exactly as ``run_router_bench.py`` does (its ``run_once``: same clients, same JSON
lines, same summary keys; ``variant`` is ``chainN``). Router CPU is summed over every process of
every router in the chain; ``router_cpu_by_proc`` labels each process ``<router>:<module>``.
A chain of 1 is the single-router figure from the same invocation (an interior router without
neighbours; ``run_router_bench.py`` runs a standalone one).

Convergence (``--convergence``): a triangle ``A --1-> B --1-> C`` plus ``A --10-> C``, receiver on
C, a sender on A paced at ``--convergence-rate`` msg/s (unsettled). After ``--pre`` seconds of
traffic the whole process group of router B is killed with SIGKILL. Measured from the kill:

* ``reroute_s``: until A's ``qdstat -n -v`` shows C as a neighbour (next hop C instead of B);
  the poll that saw it started ``reroute_lo_s`` after the kill (so the change happened between);
* ``flow_s``: until the receiver got the first message that was SENT after the kill (from the
  receiver's ``--arrivals`` file: send and receive time of every message);
* the longest gap between two arrivals, and the sender's outcome counts (messages in flight
  through B come back modified/released; the load generator does not resend them).

Routers use the default timers (helloInterval 1 s, helloMaxAge 3 s). Fresh routers for each
repetition (``--repeat``). ``--failure freeze`` stops B's process group (SIGSTOP) instead: its
sockets stay open, so A can only notice B's silence through the HELLO timers; B is killed once
the sender's time is up (the deliveries it held then come back to the sender).

Every router leads its own process group and is stopped here (SIGTERM, then SIGKILL to the
group), also on Ctrl-C, SIGTERM or an exception; every wait is bounded; only 127.0.0.1 is used.
Router log lines at (error)/(critical) level and tracebacks are reported with each run.

With ``--metrics-dir DIR`` every router of a chain writes its metrics into DIR and with
``--record-trace`` the receivers count the path of every message (x-opt-qd.trace), so
``python -m pipelines.batch_job --metrics-dir DIR --loadgen OUT`` shows the network view and
the messages per hop.

Examples
    python benchmarks/bench_network.py --chains 1,2,3 --count 20000
    python benchmarks/bench_network.py --chains 3 --count 20000 --unsettled \
        --metrics-dir /tmp/qdr-net --record-trace --out /tmp/net.jsonl
    python benchmarks/bench_network.py --chains '' --convergence --repeat 3
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

import loadgen
import run_router_bench as rb

QDSTAT_TIMEOUT = 10.0
ROUTE_TIMEOUT = 30.0
PROBLEM_MARKERS = ("(error)", "(critical)", "Traceback")


# --------------------------------------------------------------------------- management

def qdstat(port: int, *args: str) -> list[list[str]]:
    """``qdstat -b 127.0.0.1:PORT ARGS --csv`` as rows (column header first); [] on failure."""
    try:
        out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                              f"127.0.0.1:{port}", "-t", "5", *args, "--csv"],
                             capture_output=True, text=True, timeout=QDSTAT_TIMEOUT,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return []
    if out.returncode != 0:
        return []
    return [row for row in csv.reader(io.StringIO(out.stdout)) if len(row) > 1]


def table(rows: list[list[str]]) -> list[dict]:
    return [dict(zip(rows[0], row)) for row in rows[1:]] if rows else []


def remote_count(port: int, address: str) -> int:
    for row in table(qdstat(port, "-a")):
        if row.get("addr") == address:
            # a 1.x router's answer may come back typed, e.g. "uint(1)"
            digits = re.sub(r"^\w+\((\d+)\)$", r"\1", row.get("remote") or "0")
            return int(digits) if digits.isdigit() else 0
    return 0


def next_hop(port: int, router_id: str) -> Optional[str]:
    """The next hop toward router_id in ``qdstat -n -v`` (router_id itself for a neighbour)."""
    for row in table(qdstat(port, "-n", "-v")):
        if row.get("router-id") == router_id:
            hop = row.get("next-hop")
            return router_id if hop in ("", "-") else hop
    return None


def wait_until(check, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout}s (last: {last!r})")
        time.sleep(interval)


# --------------------------------------------------------------------------- routers

def interior_conf(router_id: str, port: int, ir_port: int, workers: int,
                  connect_to: list[tuple[int, int, str]], metrics_dir: Optional[str] = None,
                  keep_annotations: bool = False, link_capacity: int = 0) -> str:
    """An interior router: a normal listener, an inter-router listener, connectors
    (ir_port, cost, name) to its peers' inter-router listeners; with ``metrics_dir`` its
    metrics sink writes there every second (every router of a network into the same
    directory); ``keep_annotations``: the normal listener passes x-opt-qd.trace to receivers;
    ``link_capacity``: the normal listener's linkCapacity (0: not set)."""
    sink = (f"    metricsDir: {metrics_dir}\n    metricsIntervalSeconds: 1\n"
            if metrics_dir else "")
    clients = "    stripAnnotations: no\n" if keep_annotations else ""  # the normal listener's
    if link_capacity:
        clients += f"    linkCapacity: {link_capacity}\n"
    text = (f"router {{\n    mode: interior\n    id: {router_id}\n"
            f"    workerThreads: {workers}\n{sink}}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {port}\n    authenticatePeer: no\n"
            f"    saslMechanisms: ANONYMOUS\n{clients}}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {ir_port}\n    role: inter-router\n"
            "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}\n")
    for peer_port, cost, name in connect_to:
        text += (f"connector {{\n    name: to-{name}\n    host: 127.0.0.1\n    port: {peer_port}\n"
                 f"    role: inter-router\n    cost: {cost}\n}}\n")
    return text


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """Cleanup that a second Ctrl-C must not cut short."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class Network:
    """Interior routers ``names`` (ids ``Router.<name>``) with connectors ``links`` (from, to,
    cost). They start one by one (each once the previous is Operational) in reverse order of
    ``names``: with A -> B -> C listed as ("A", "B", "C"), C starts first, then B, then A, so
    every connector finds its peer listening and none has to retry (back-off 1, 2, 4 s)."""

    def __init__(self, workdir: Path, names: list[str], links: list[tuple[str, str, int]],
                 workers: int, router_cmd: Optional[str] = None,
                 metrics_dir: Optional[str] = None, keep_annotations: bool = False,
                 extra_env: Optional[dict[str, str]] = None, link_capacity: int = 0,
                 prefix: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.prefix = tuple(prefix)  # a command prefix for every router (rb.Router)
        self.link_capacity = link_capacity
        self.metrics_dir = metrics_dir
        self.keep_annotations = keep_annotations
        self.extra_env = dict(extra_env or {})   # e.g. a 1.x router's PYTHONPATH
        workdir.mkdir(parents=True, exist_ok=True)
        self.names = list(names)
        self.links = links
        self.workers = workers
        self.router_cmd = router_cmd
        self.ports = {n: rb.free_port() for n in names}
        self.ir_ports = {n: rb.free_port() for n in names}
        self.routers: dict[str, rb.Router] = {}
        self._reported: set[str] = set()

    def start(self) -> None:
        for name in reversed(self.names):
            connect_to = [(self.ir_ports[b], cost, b) for a, b, cost in self.links if a == name]
            conf = interior_conf(f"Router.{name}", self.ports[name], self.ir_ports[name],
                                 self.workers, connect_to, self.metrics_dir,
                                 self.keep_annotations, self.link_capacity)
            # the runtime directory (IPC sockets) inside workdir: a killed router's goes with it
            env = {"RUNTIME_DIRECTORY": str(self.workdir), **self.extra_env}
            router = rb.Router(self.workdir, self.ports[name], self.workers, self.router_cmd, env,
                               conf_text=conf, name=name, new_session=True, prefix=self.prefix)
            self.routers[name] = router
            router.wait_ready()

    def stop(self) -> None:
        with no_interrupts():
            for router in self.routers.values():
                try:
                    router.stop()
                except Exception as e:  # keep stopping the others
                    print(f"stopping router {router.name}: {e}", file=sys.stderr)
                    router.kill_group()

    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.routers.values()]

    def alive(self) -> bool:
        return all(r.alive() for r in self.routers.values())

    def exit_error(self) -> str:
        return "; ".join(f"router {n} exited with {r.proc.returncode}"
                         for n, r in self.routers.items() if not r.alive())

    def cpu_meter(self) -> rb.RouterCpu:
        return rb.RouterCpu(self.pids(), list(self.routers))

    def problems(self) -> list[str]:
        """Log lines at error/critical level (and tracebacks) not reported before."""
        out = []
        for name, router in self.routers.items():
            try:
                lines = router.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for i, line in enumerate(lines):
                key = f"{name}:{i}"
                if key not in self._reported and any(m in line for m in PROBLEM_MARKERS):
                    self._reported.add(key)
                    out.append(f"router {name} log: {line.strip()}")
        return out


class Chain(Network):
    """R1 -> R2 -> ... -> RN, sender on R1, receiver on RN (the interface run_once needs)."""

    def __init__(self, workdir: Path, n: int, workers: int,
                 router_cmd: Optional[str] = None, metrics_dir: Optional[str] = None,
                 keep_annotations: bool = False,
                 extra_env: Optional[dict[str, str]] = None, link_capacity: int = 0,
                 prefix: Sequence[str] = ()) -> None:
        names = [f"R{i}" for i in range(1, n + 1)]
        links = [(names[i], names[i + 1], 1) for i in range(n - 1)]
        super().__init__(workdir, names, links, workers, router_cmd, metrics_dir,
                         keep_annotations, extra_env, link_capacity, prefix)

    def client_urls(self) -> tuple[str, str]:
        return (f"127.0.0.1:{self.ports[self.names[0]]}",
                f"127.0.0.1:{self.ports[self.names[-1]]}")

    def wait_routes(self, addresses: list[str]) -> None:
        if len(self.names) < 2:
            return
        first = self.ports[self.names[0]]
        for address in addresses:
            wait_until(lambda: remote_count(first, address) >= 1, ROUTE_TIMEOUT,
                       f"{self.names[0]} learns {address}", interval=0.2)


def local_count(port: int, address: str) -> int:
    """``address``'s consumers on the router at ``port`` (qdstat -a's ``local``)."""
    for row in table(qdstat(port, "-a")):
        if row.get("addr") == address:
            digits = re.sub(r"^\w+\((\d+)\)$", r"\1", row.get("local") or "0")
            return int(digits) if digits.isdigit() else 0
    return 0


def edge_conf(router_id: str, port: int, workers: int, uplink_port: int,
              link_capacity: int = 0) -> str:
    """An edge router: a normal listener and an edge connector to ``uplink_port``."""
    clients = f"    linkCapacity: {link_capacity}\n" if link_capacity else ""
    return (f"router {{\n    mode: edge\n    id: {router_id}\n    workerThreads: {workers}\n}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {port}\n    authenticatePeer: no\n"
            f"    saslMechanisms: ANONYMOUS\n{clients}}}\n"
            f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {uplink_port}\n"
            "    role: edge\n}\n")


class EdgeLine(Network):
    """E1 ==> I <== E2: edge routers E1 and E2 on interior router I (its ``role: edge``
    listener); sender on E1, receiver on E2 (the interface run_once needs)."""

    def __init__(self, workdir: Path, workers: int, router_cmd: Optional[str] = None,
                 extra_env: Optional[dict[str, str]] = None, link_capacity: int = 0,
                 prefix: Sequence[str] = ()) -> None:
        super().__init__(workdir, ["E1", "I", "E2"], [], workers, router_cmd, None, False,
                         extra_env, link_capacity, prefix)

    def start(self) -> None:
        env = {"RUNTIME_DIRECTORY": str(self.workdir), **self.extra_env}
        edge_port = self.ir_ports["I"]
        conf = interior_conf("Router.I", self.ports["I"], rb.free_port(), self.workers, [],
                             link_capacity=self.link_capacity)
        conf += (f"listener {{\n    host: 127.0.0.1\n    port: {edge_port}\n    role: edge\n"
                 "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}\n")
        for name in ("I", "E2", "E1"):
            if name != "I":
                conf = edge_conf(f"Edge.{name}", self.ports[name], self.workers, edge_port,
                                 self.link_capacity)
            router = rb.Router(self.workdir, self.ports[name], self.workers, self.router_cmd,
                               env, conf_text=conf, name=name, new_session=True,
                               prefix=self.prefix)
            self.routers[name] = router
            router.wait_ready()

    def client_urls(self) -> tuple[str, str]:
        return f"127.0.0.1:{self.ports['E1']}", f"127.0.0.1:{self.ports['E2']}"

    def wait_routes(self, addresses: list[str]) -> None:
        """Until I has E2's proxy of each address and E1 has made its own proxy a consumer
        (the interior told it there is a destination): then E1's sender has credit."""
        for address in addresses:
            wait_until(lambda: local_count(self.ports["I"], address) >= 1, ROUTE_TIMEOUT,
                       f"I learns E2's {address}", interval=0.2)


# --------------------------------------------------------------------------- chain runs

CHAIN_COLUMNS = (("variant", 7), ("mode", 10), ("received", 9), ("msgs_per_s", 9),
                 ("lat_p50_us", 9), ("lat_p99_us", 9), ("router_cpu_us_per_msg", 13))
CHAIN_HEADERS = ("chain", "mode", "received", "msgs/s", "p50 us", "p99 us", "router us/msg")


def per_router(by_proc: dict[str, Optional[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, value in by_proc.items():
        router = label.split(":", 1)[0]
        out[router] = round(out.get(router, 0.0) + (value or 0.0), 2)
    return out


def print_chain_table(rows: list[dict]) -> None:
    print(" ".join(h.rjust(w) for h, (_, w) in zip(CHAIN_HEADERS, CHAIN_COLUMNS))
          + "  per router us/msg")
    for r in rows:
        cells = " ".join(str(r[k] if r[k] is not None else "-").rjust(w)
                         for k, w in CHAIN_COLUMNS)
        split = ", ".join(f"{k} {v}" for k, v in per_router(r["router_cpu_by_proc"]).items())
        print(f"{cells}  {split}")
        for e in r["errors"]:
            print(f"    ! {e}")
    base = {r["mode"]: r for r in rows if r["variant"] == "chain1"}
    for r in rows:
        b = base.get(r["mode"])
        if b is None or r is b or not (r["msgs_per_s"] and b["msgs_per_s"]):
            continue
        cpu = (f", router cpu/msg x{r['router_cpu_us_per_msg'] / b['router_cpu_us_per_msg']:.2f}"
               if r["router_cpu_us_per_msg"] and b["router_cpu_us_per_msg"] else "")
        print(f"  {r['variant']}/{r['mode']} vs chain1: msgs/s x"
              f"{r['msgs_per_s'] / b['msgs_per_s']:.2f}{cpu}")


def run_chains(args: argparse.Namespace, workdir: Path, stamp: str, out: Path) -> list[dict]:
    rows: list[dict] = []
    for n in args.chains:
        chain = Chain(workdir / f"chain{n}", n, args.workers, args.router_cmd,
                      args.metrics_dir, args.record_trace)
        try:
            chain.start()
            idle = rb.idle_cpu_pct(chain.pids(), args.idle_sample)
            for mode in args.modes:
                if not chain.alive():
                    print(f"chain{n}/{mode}: skipped, {chain.exit_error()}", file=sys.stderr)
                    break
                run_id = f"{stamp}-chain{n}-{mode}"
                summary, clients = rb.run_once(args, workdir, chain, run_id,
                                               mode == "presettled", f"chain{n}", idle)
                summary["errors"] += chain.problems()
                rows.append(summary)
                with open(out, "a", encoding="utf-8") as f:
                    for record in clients + [summary]:
                        f.write(json.dumps(record, separators=(",", ":")) + "\n")
                print(f"chain{n}/{mode}: {summary['received']} msgs, {summary['msgs_per_s']} "
                      f"msgs/s, router {summary['router_cpu_us_per_msg']} us/msg",
                      file=sys.stderr)
        except RuntimeError as e:
            print(f"chain{n}: {e}", file=sys.stderr)
            rows.append({"variant": f"chain{n}", "mode": "-", "received": None,
                         "msgs_per_s": None, "lat_p50_us": None, "lat_p99_us": None,
                         "router_cpu_us_per_msg": None, "router_cpu_by_proc": {},
                         "errors": [str(e).splitlines()[0]] + chain.problems()})
        finally:
            chain.stop()
    return rows


# --------------------------------------------------------------------------- convergence

CONVERGENCE_KEYS = (
    "schema", "run_id", "repeat", "failure", "rate", "pre_s", "sent", "received", "accepted",
    "released", "modified", "rejected", "kill_ts", "reroute_s", "reroute_lo_s", "hops_seen",
    "flow_s", "last_pre_kill_arrival_s", "max_gap_s", "gap_from_s", "errors",
)


def analyse_arrivals(arrivals: list[tuple[int, int]], kill_ns: int) -> dict:
    """From (send_ns, recv_ns) per message and the kill time: when the first message sent after
    the kill arrived, the last arrival of one sent before, the longest gap between arrivals."""
    after = [recv for send, recv in arrivals if send >= kill_ns]
    before = [recv for send, recv in arrivals if send < kill_ns]
    recvs = sorted(recv for _, recv in arrivals)
    gap, gap_from = 0, None
    for a, b in zip(recvs, recvs[1:]):
        if b - a > gap:
            gap, gap_from = b - a, a
    return {
        "flow_s": round((min(after) - kill_ns) / 1e9, 3) if after else None,
        "last_pre_kill_arrival_s": round((max(before) - kill_ns) / 1e9, 3) if before else None,
        "max_gap_s": round(gap / 1e9, 3) if gap_from is not None else None,
        "gap_from_s": round((gap_from - kill_ns) / 1e9, 3) if gap_from is not None else None,
    }


def convergence_once(args: argparse.Namespace, workdir: Path, run_id: str,
                     rep: int) -> tuple[dict, list[dict]]:
    """One failover measurement: (its record, the clients' loadgen/1 lines)."""
    net = Network(workdir / f"triangle{rep}", ["A", "B", "C"],
                  [("A", "B", 1), ("B", "C", 1), ("A", "C", 10)], args.workers,
                  args.router_cmd)
    rundir = workdir / run_id
    rundir.mkdir()
    procs: list[subprocess.Popen] = []
    errors: list[str] = []
    record: dict = {k: None for k in CONVERGENCE_KEYS}
    record.update(schema="bench-convergence/1", run_id=run_id, repeat=rep,
                  failure=args.failure, rate=args.convergence_rate, pre_s=args.pre)
    address = f"bench/{run_id}"
    total = int(args.convergence_rate * (args.pre + args.post))
    bound = args.pre + args.post + 60
    try:
        net.start()
        port_a, port_c = net.ports["A"], net.ports["C"]
        wait_until(lambda: next_hop(port_a, "Router.C") == "Router.B", ROUTE_TIMEOUT,
                   "A routes to C through B", interval=0.2)
        common = ["--address", address, "--count", str(total), "--body-size",
                  str(args.body_size), "--timeout", str(bound), "--run-id", run_id]
        ready = rundir / "receiver.ready"
        arrivals = rundir / "arrivals.txt"
        receiver = rb.spawn_client(
            [sys.executable, str(rb.LOADGEN), "receiver", "--url", f"127.0.0.1:{port_c}",
             *common, "--out", str(rundir / "receiver.jsonl"), "--ready-file", str(ready),
             "--credit", str(args.credit), "--idle-timeout", str(bound),
             "--arrivals", str(arrivals), "--stop-on-sigterm"], rundir / "receiver.err")
        procs.append(receiver)
        rb.wait_files([ready], [receiver], rb.READY_TIMEOUT)
        wait_until(lambda: remote_count(port_a, address) >= 1, ROUTE_TIMEOUT,
                   f"A learns {address}", interval=0.2)
        sender = rb.spawn_client(
            [sys.executable, str(rb.LOADGEN), "sender", "--url", f"127.0.0.1:{port_a}",
             *common, "--out", str(rundir / "sender.jsonl"), "--rate",
             str(args.convergence_rate)],
            rundir / "sender.err")
        procs.append(sender)
        sender_t = time.monotonic()
        time.sleep(args.pre)
        if sender.poll() is not None or receiver.poll() is not None:
            raise RuntimeError("a client exited before the kill")

        kill_ns, kill_t = time.time_ns(), time.monotonic()
        record["kill_ts"] = kill_ns / 1e9
        net.routers["B"].kill_group(signal.SIGSTOP if args.failure == "freeze"
                                    else signal.SIGKILL)
        hops: list[Optional[str]] = ["Router.B"]
        poll_start = kill_t
        while True:
            poll_start = time.monotonic()
            hop = next_hop(port_a, "Router.C")
            poll_end = time.monotonic()
            if hop != hops[-1]:
                hops.append(hop)
            if hop == "Router.C":
                record["reroute_s"] = round(poll_end - kill_t, 3)
                record["reroute_lo_s"] = round(poll_start - kill_t, 3)
                break
            if poll_end - kill_t > ROUTE_TIMEOUT:
                errors.append(f"A did not route to C directly within {ROUTE_TIMEOUT}s")
                break
            time.sleep(0.05)
        record["hops_seen"] = hops

        if args.failure == "freeze":
            # a frozen B keeps what A sent it unsettled: kill it once the sender's time is up
            try:
                sender.wait(max(0.5, args.pre + args.post + 1 - (time.monotonic() - sender_t)))
            except subprocess.TimeoutExpired:
                pass
            net.routers["B"].kill_group(signal.SIGKILL)
        try:
            sender.wait(max(1.0, args.pre + args.post + 30 - (time.monotonic() - kill_t)))
        except subprocess.TimeoutExpired:
            errors.append("sender did not finish in time")
        time.sleep(1.0)             # the last messages in flight
        receiver.send_signal(signal.SIGTERM)
        try:
            receiver.wait(10)
        except subprocess.TimeoutExpired:
            errors.append("receiver did not stop on SIGTERM")
    except RuntimeError as e:
        errors.append(str(e).splitlines()[0])
    finally:
        for p in procs:
            rb.stop_process(p, 2)
        errors += net.problems()
        net.stop()

    clients = []
    for role in ("sender", "receiver"):
        path = rundir / f"{role}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            r = json.loads(line)
            clients.append(r)
            if role == "sender":
                record.update(sent=r["count"], accepted=r["accepted"], released=r["released"],
                              modified=r["modified"], rejected=r["rejected"])
                if r["error"]:
                    errors.append(f"sender: {r['error']}")
            else:
                record["received"] = r["count"]
                if r["error"] and not r["error"].startswith("stopped by SIGTERM"):
                    errors.append(f"receiver: {r['error']}")
    for path in sorted(rundir.glob("*.err")):
        text = path.read_text(errors="replace").strip()
        if "Traceback" in text:
            errors.append(f"{path.stem}: {text.splitlines()[-1]}")
    if record["reroute_s"] is not None and (rundir / "arrivals.txt").exists():
        record.update(analyse_arrivals(loadgen.read_arrivals(str(rundir / "arrivals.txt")),
                                       kill_ns))
    record["errors"] = errors
    return record, clients


def print_convergence(records: list[dict]) -> None:
    what = "SIGSTOP" if records[0]["failure"] == "freeze" else "kill -9"
    print(f"convergence after {what} of B's process group (A -1-> B -1-> C, A -10-> C; "
          f"receiver on C, {records[0]['rate']:g} msg/s unsettled from A; seconds after it)")
    print(f"{'run':>3} {'reroute':>8} {'(poll from)':>11} {'flow again':>10} {'max gap':>8} "
          f"{'sent':>6} {'recvd':>6} {'acc':>6} {'rel':>4} {'mod':>4}")
    for r in records:
        cells = [r["repeat"], r["reroute_s"], r["reroute_lo_s"], r["flow_s"], r["max_gap_s"],
                 r["sent"], r["received"], r["accepted"], r["released"], r["modified"]]
        widths = (3, 8, 11, 10, 8, 6, 6, 6, 4, 4)
        print(" ".join(str("-" if c is None else c).rjust(w) for c, w in zip(cells, widths)))
        for e in r["errors"]:
            print(f"    ! {e}")


# --------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chains", default="1,2,3",
                   help="chain lengths to run, comma separated ('' for none)")
    rb.add_load_options(p)
    p.set_defaults(modes=["unsettled", "presettled"])
    p.add_argument("--workers", type=int, default=1, help="workerThreads of every router")
    p.add_argument("--router-cmd", help="another router, e.g. 'qdrouterd -c {conf}'")
    p.add_argument("--timeout", type=float, default=60.0, help="bound per client process")
    p.add_argument("--idle-sample", type=float, default=1.0,
                   help="seconds to sample the idle chain's CPU before its runs (0: skip)")
    p.add_argument("--convergence", action="store_true", help="run the failover measurement")
    p.add_argument("--repeat", type=int, default=3, help="convergence repetitions")
    p.add_argument("--convergence-rate", type=float, default=200.0,
                   help="convergence: sender msg/s (--rate paces the chain runs' senders)")
    p.add_argument("--pre", type=float, default=3.0, help="convergence: seconds before the kill")
    p.add_argument("--failure", choices=["kill", "freeze"], default="kill",
                   help="convergence: SIGKILL B's process group, or SIGSTOP it (silent B)")
    p.add_argument("--post", type=float, default=10.0,
                   help="convergence: seconds the sender keeps going after the kill")
    p.add_argument("--metrics-dir",
                   help="chains: every router writes its metrics (router-metrics/1) here every "
                        "second, for pipelines.batch_job's network view")
    p.add_argument("--out", help="JSON lines file (default benchmarks/results/<UTC time>.jsonl)")
    p.add_argument("--workdir", help="keep configurations, router logs and client files here "
                                     "(default: a temporary directory, removed at the end)")
    # what run_router_bench.run_once/summarize read and this script does not vary
    p.set_defaults(receivers=1, distribution=None, shared_address=False)
    return p


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.chains = [int(n) for n in args.chains.split(",") if n.strip()]
    if any(n < 1 for n in args.chains):
        print("--chains: lengths are >= 1", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)   # run the finally blocks on SIGTERM too
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else rb.HERE / "results" / f"{stamp}-network.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    records: list[dict] = []
    try:
        keep = Path(args.workdir) / stamp if args.workdir else None
        if keep:
            keep.mkdir(parents=True)
        with (contextlib.nullcontext(str(keep)) if keep
              else tempfile.TemporaryDirectory(prefix="router-net-bench-")) as tmp:
            workdir = Path(tmp)
            if args.chains:
                rows = run_chains(args, workdir, stamp, out)
            if args.convergence:
                for rep in range(1, args.repeat + 1):
                    record, clients = convergence_once(args, workdir,
                                                       f"{stamp}-convergence-{rep}", rep)
                    records.append(record)
                    with open(out, "a", encoding="utf-8") as f:
                        for line in clients + [record]:
                            f.write(json.dumps(line, separators=(",", ":")) + "\n")
                    print(f"convergence {rep}: reroute {record['reroute_s']} s, flow again "
                          f"{record['flow_s']} s", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted; every process started here is stopped", file=sys.stderr)
        return 130
    finally:
        if rows:
            print_chain_table(rows)
        if records:
            print_convergence(records)
        print(f"results: {out}")
    bad = any(r["errors"] for r in rows + records)
    return 1 if bad or not (rows or records) else 0


if __name__ == "__main__":
    sys.exit(main())
