"""Benchmark a router with ``loadgen.py`` clients: msgs/s, latency, router and client CPU per msg.

Launches the router (ours by default: ``python -m supervisor.main -c CONF``; any other binary with
``--router-cmd 'qdrouterd -c {conf}'``) on a generated configuration, waits (bounded) until it is
ready, then for each mode runs PAIRS receiver+sender process pairs (receivers first; one address per
pair unless ``--shared-address``) and collects their JSON lines. Router CPU is the utime+stime
from ``/proc/<pid>/stat`` of the router process and all its descendants (supervisor, core, workers,
agent; threads are included by the kernel), sampled just before the senders start and after all
clients exit, divided by the messages received. ``--direct`` runs the same clients without a
router (the receiver listens), which measures the clients' own cost and the loopback ceiling.

Readiness: our router prints a log line containing "Operational"; with ``--router-cmd`` the script
waits instead until the listener port accepts TCP connections.

Pre-settled messages may be dropped by a router under pressure (1.19 drops them too): a
pre-settled receiver stops 2 s after its last message, and the summary counts the messages it
never got as ``lost`` (not an error; the exit status stays 0).

Output: a table on stdout, and JSON lines appended to ``--out`` (default
``benchmarks/results/<UTC timestamp>.jsonl``): every client's ``loadgen/1`` line (see loadgen.py),
plus one ``bench/1`` summary line per run with the keys of ``SUMMARY_KEYS``. ``run_id`` joins them.

Examples
    python benchmarks/run_router_bench.py --pairs 1 --count 20000 --body-size 100 --both
    python benchmarks/run_router_bench.py --direct --both --count 200000
    python benchmarks/run_router_bench.py --router-cmd '/usr/sbin/qdrouterd -c {conf}' --both
    python benchmarks/run_router_bench.py --both --compare-pure   # ROUTER_NO_EXTENSIONS=1 as well

Every process started here is stopped here (SIGTERM, then SIGKILL), every wait is bounded.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import cloadgen  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve().parent
LOADGEN = HERE / "loadgen.py"
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

SUMMARY_KEYS = (
    "schema", "run_id", "role", "router", "variant", "mode", "pairs", "count", "body_size",
    "credit", "window", "workers", "shared_address", "sent", "received", "lost", "start_ts",
    "end_ts", "wall_s", "msgs_per_s", "lat_p50_us", "lat_p99_us", "router_cpu_s", "router_cpu_us_per_msg",
    "router_cpu_by_proc", "router_idle_cpu_pct", "sender_cpu_us_per_msg",
    "receiver_cpu_us_per_msg", "errors",
)


# --------------------------------------------------------------------------- /proc helpers

def _stat_fields(pid: int) -> Optional[list[str]]:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_trees(roots: Sequence[int]) -> dict[int, int]:
    """{pid: its root} for every root and all its descendants (by scanning /proc once)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields:
                parent[int(entry)] = int(fields[1])
    tree = {root: root for root in roots}
    frontier = list(roots)
    while frontier:
        frontier = [pid for pid, ppid in parent.items() if ppid in frontier and pid not in tree]
        for pid in frontier:
            tree[pid] = tree[parent[pid]]
    return tree


def process_tree(root: int) -> list[int]:
    """root and all its descendants (by scanning /proc once)."""
    return list(process_trees([root]))


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """utime+stime (clock ticks) per pid; pids that are gone are left out."""
    out = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields:  # after ")": state=0 ... utime=11, stime=12
            out[pid] = int(fields[11]) + int(fields[12])
    return out


def proc_label(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return str(pid)
    # a child forked by the supervisor names itself with one string (setproctitle): split it too
    argv = [w for a in argv if a for w in a.decode(errors="replace").split()]
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        return argv[argv.index("-m") + 1]
    return os.path.basename(argv[0]) if argv else str(pid)


class RouterCpu:
    """CPU of one or more process trees between two samples.

    With ``names`` (one per root) every process is labelled ``name:module`` (e.g. ``B:router_core.
    coreproc``), so the trees of several routers are told apart."""

    def __init__(self, root: int | Sequence[int], names: Optional[Sequence[str]] = None) -> None:
        self.roots = [root] if isinstance(root, int) else list(root)
        self.names = dict(zip(self.roots, names)) if names else {}
        self.before: dict[int, int] = {}

    def _label(self, pid: int, root: int) -> str:
        label = proc_label(pid)
        return f"{self.names[root]}:{label}" if root in self.names else label

    def start(self) -> None:
        tree = process_trees(self.roots)
        self.pids = list(tree)
        self.labels = {pid: self._label(pid, root) for pid, root in tree.items()}
        self.before = cpu_ticks(self.pids)

    def stop(self) -> tuple[float, dict[str, float]]:
        tree = process_trees(self.roots)
        after = cpu_ticks(list(tree))
        by_label: dict[str, float] = {}
        for pid, ticks in after.items():
            label = self.labels.get(pid) or self._label(pid, tree[pid])
            by_label[label] = by_label.get(label, 0.0) + (ticks - self.before.get(pid, 0)) / CLK_TCK
        return sum(by_label.values()), by_label


# --------------------------------------------------------------------------- processes

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


METRICS_INTERVAL_S = 1.0  # the sink's sampling interval with --metrics-dir
PRESETTLED_IDLE_S = 2.0   # a pre-settled receiver stops this long after its last message


def stop_process(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def write_conf(path: Path, port: int, workers: int, distribution: Optional[str] = None,
               metrics_dir: Optional[str] = None, keep_annotations: bool = False,
               link_capacity: int = 0) -> None:
    """``link_capacity``: the listener's linkCapacity (0: not set, the router's default)."""
    sink = (f"    metricsDir: {metrics_dir}\n"
            f"    metricsIntervalSeconds: {METRICS_INTERVAL_S:g}\n" if metrics_dir else "")
    text = ("router {\n    mode: standalone\n    id: Bench\n"
            f"    workerThreads: {workers}\n{sink}}}\n\n"
            "listener {\n    host: 127.0.0.1\n"
            f"    port: {port}\n    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n"
            + ("    stripAnnotations: no\n" if keep_annotations else "")
            + (f"    linkCapacity: {link_capacity}\n" if link_capacity else "") + "}\n")
    if distribution:  # every benchmark address starts with "bench"
        text += f"\naddress {{\n    prefix: bench\n    distribution: {distribution}\n}}\n"
    path.write_text(text, encoding="utf-8")


class Router:
    """One router process on a generated configuration (``conf_text``: use that text instead).

    ``new_session``: the router leads its own process group (``kill_group`` kills all of it, and
    Ctrl-C in the terminal reaches only this script, which stops the router itself).
    ``run_once`` uses ``client_urls``, ``wait_routes``, ``cpu_meter`` and ``exit_error``; a
    network of routers (``bench_network.Chain``) offers the same four."""

    def __init__(self, workdir: Path, port: int, workers: int, router_cmd: Optional[str],
                 env: dict[str, str], distribution: Optional[str] = None,
                 metrics_dir: Optional[str] = None, conf_text: Optional[str] = None,
                 name: str = "bench", new_session: bool = False,
                 keep_annotations: bool = False, link_capacity: int = 0,
                 prefix: Sequence[str] = ()) -> None:
        self.port = port
        self.name = name
        self.conf = workdir / f"{name}.conf"
        if conf_text is None:
            write_conf(self.conf, port, workers, distribution, metrics_dir, keep_annotations,
                       link_capacity)
        else:
            self.conf.write_text(conf_text, encoding="utf-8")
        self.log_path = workdir / f"router-{name}-{port}.log"
        if router_cmd:
            cmd = [a.replace("{conf}", str(self.conf)) for a in shlex.split(router_cmd)]
        else:
            cmd = [sys.executable, "-m", "supervisor.main", "-c", str(self.conf)]
        cmd = list(prefix) + cmd  # e.g. taskset -c 0, chrt --batch 0: the router's children inherit
        self.custom = bool(router_cmd)
        self.new_session = new_session
        self.log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**os.environ, **env},
                                     start_new_session=new_session)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"router exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.custom:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                    return
                except OSError:
                    pass
            elif "Operational" in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"router not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_error(self) -> str:
        return f"router exited with {self.proc.returncode}"

    def client_urls(self) -> tuple[str, str]:
        """(url for senders, url for receivers)."""
        url = f"127.0.0.1:{self.port}"
        return url, url

    def wait_routes(self, addresses: list[str]) -> None:
        """Called once the receivers are attached, before the senders start."""

    def cpu_meter(self) -> "RouterCpu":
        return RouterCpu(self.proc.pid)

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal the router's whole process group (only with new_session)."""
        if self.new_session:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        try:
            self.kill_group(signal.SIGCONT)     # a stopped (SIGSTOP) router could not exit
            stop_process(self.proc)
        finally:
            self.kill_group()       # anything of its group left behind (new_session only)
            self.log.close()


def idle_cpu_pct(root: int | Sequence[int], seconds: float) -> Optional[float]:
    if seconds <= 0:
        return None
    meter = RouterCpu(root)
    meter.start()
    time.sleep(seconds)
    total, _ = meter.stop()
    return round(100.0 * total / seconds, 1)


def wait_files(paths: list[Path], procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            tail = getattr(dead[0], "err_path", None)
            text = tail.read_text(errors="replace").strip()[-600:] if tail else ""
            raise RuntimeError(f"client exited early with {dead[0].returncode}: {text}")
        time.sleep(0.02)
    raise RuntimeError(f"clients not ready within {timeout}s")


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """Wait (bounded) for every process; kill stragglers; return error texts."""
    errors = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            errors.append(f"client pid {p.pid} killed after {timeout}s")
            stop_process(p, 2)
    return errors


# --------------------------------------------------------------------------- one run

def client_cmd(role: str, url: str, address: str, args: argparse.Namespace, out: Path,
               ready: Path, run_id: str, presettled: bool, listen: bool = False) -> list[str]:
    compiled = getattr(args, "client", "py") == "c"
    if compiled and getattr(args, "record_trace", False):
        raise SystemExit("--record-trace needs the Python loadgen (--client py)")
    exe = [str(cloadgen.build())] if compiled else [sys.executable, str(LOADGEN)]
    cmd = exe + [role, "--url", url, "--address", address,
           "--count", str(args.count), "--body-size", str(args.body_size),
           "--timeout", str(args.timeout), "--out", str(out), "--run-id", run_id,
           "--ready-file", str(ready)]
    if role == "sender":
        if presettled:
            cmd.append("--presettled")
        if args.window:
            cmd += ["--window", str(args.window)]
        if getattr(args, "rate", 0):
            cmd += ["--rate", str(args.rate)]
    else:
        cmd += ["--credit", str(args.credit)]
        if args.shared_address or (args.receivers > 1 and args.distribution != "multicast"):
            cmd += ["--idle-timeout", "2"]  # anycast shares the messages: stop when idle
        elif getattr(args, "idle_timeout", None):
            cmd += ["--idle-timeout", str(args.idle_timeout)]
        elif presettled:    # a dropped pre-settled message never comes: stop when idle
            cmd += ["--idle-timeout", str(PRESETTLED_IDLE_S)]
        if listen:
            cmd.append("--listen")
        if getattr(args, "record_trace", False):
            cmd.append("--record-trace")
    return cmd


def spawn_client(cmd: list[str], err_path: Path) -> subprocess.Popen:
    """Start a client with stderr to err_path (the child keeps the file; we close ours)."""
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=fd)
    finally:
        os.close(fd)
    proc.err_path = err_path  # type: ignore[attr-defined]
    return proc


def run_once(args: argparse.Namespace, workdir: Path, router: Optional[Router], run_id: str,
             presettled: bool, variant: str, idle_pct: Optional[float]) -> tuple[dict, list[dict]]:
    mode = "presettled" if presettled else "unsettled"
    rundir = workdir / run_id
    rundir.mkdir()
    receivers: list[subprocess.Popen] = []
    senders: list[subprocess.Popen] = []
    errors: list[str] = []
    meter = router.cpu_meter() if router else None
    t0 = time.time()
    try:
        urls, ready = [], []
        for i in range(args.pairs):
            address = "bench/shared" if args.shared_address else f"bench/{run_id}/{i}"
            if router:
                url, rcv_url = router.client_urls()
            else:
                url = rcv_url = f"127.0.0.1:{free_port()}"
            urls.append((url, address))
            for j in range(args.receivers if router else 1):
                ready.append(rundir / f"receiver{i}-{j}.ready")
                receivers.append(spawn_client(
                    client_cmd("receiver", rcv_url, address, args,
                               rundir / f"receiver{i}-{j}.jsonl", ready[-1], run_id, presettled,
                               listen=router is None),
                    rundir / f"receiver{i}-{j}.err"))
        wait_files(ready, receivers, READY_TIMEOUT)
        if router:
            router.wait_routes(sorted({address for _, address in urls}))
        if meter:
            meter.start()
        for i, (url, address) in enumerate(urls):
            senders.append(spawn_client(
                client_cmd("sender", url, address, args, rundir / f"sender{i}.jsonl",
                           rundir / f"sender{i}.ready", run_id, presettled),
                rundir / f"sender{i}.err"))
        errors += wait_all(senders + receivers, args.timeout + 15)
    finally:
        for p in senders + receivers:
            stop_process(p, 2)
    router_cpu, by_proc = meter.stop() if meter else (None, {})
    if router and not router.alive():
        errors.append(router.exit_error())

    clients = []
    for path in sorted(rundir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                clients.append(json.loads(line))
    for path in sorted(rundir.glob("*.err")):
        text = path.read_text(errors="replace").strip()
        if "Traceback" in text:
            errors.append(f"{path.stem}: {text.splitlines()[-1]}")
    shared = args.shared_address or (args.receivers > 1 and args.distribution != "multicast")
    errors += client_errors(clients, presettled, shared)
    return summarize(args, clients, run_id, mode, variant, router, router_cpu, by_proc, idle_pct,
                     errors, t0), clients


def client_errors(clients: list[dict], presettled: bool, shared: bool) -> list[str]:
    """The clients' errors that make a run fail.

    A receiver that stopped because nothing came for a while is not one when the router may have
    dropped messages: pre-settled messages (a router may drop them under pressure, 1.19 does too;
    the summary's ``lost`` counts them), or an address shared by several receivers that stopped
    once every message was received."""
    received = sum(c["count"] or 0 for c in clients if c["role"] == "receiver")
    sent = sum(c["count"] or 0 for c in clients if c["role"] == "sender")
    errors = []
    for c in clients:
        error = c.get("error")
        idle = bool(error) and error.startswith("idle for") and c["role"] == "receiver"
        if idle and (presettled or (shared and received >= sent)):
            continue
        if error:
            errors.append(f"{c['role']} {c['address']}: {error}")
    return errors


def _sum(values) -> float:
    return sum(v for v in values if v is not None)


def summarize(args, clients, run_id, mode, variant, router, router_cpu, by_proc, idle_pct,
              errors, t0) -> dict:
    snd = [c for c in clients if c["role"] == "sender"]
    rcv = [c for c in clients if c["role"] == "receiver"]
    sent = int(_sum(c["count"] for c in snd))
    received = int(_sum(c["count"] for c in rcv))
    starts = [c["start_ts"] for c in rcv if c["start_ts"]]
    ends = [c["end_ts"] for c in rcv if c["end_ts"]]
    span = (max(ends) - min(starts)) if starts and ends else None

    def per_msg(cpu: Optional[float], n: int) -> Optional[float]:
        return round(cpu * 1e6 / n, 2) if n and cpu is not None else None

    def cpu_of(cs: list[dict]) -> float:
        return _sum((c["cpu_user_s"] or 0) + (c["cpu_sys_s"] or 0) for c in cs)
    p50s = [c["lat_p50_us"] for c in rcv if c["lat_p50_us"] is not None]
    p99s = [c["lat_p99_us"] for c in rcv if c["lat_p99_us"] is not None]
    summary = {
        "schema": "bench/1", "run_id": run_id, "role": "bench",
        "router": "direct" if router is None else (args.router_cmd or "supervisor.main"),
        "variant": variant, "mode": mode, "pairs": args.pairs, "count": args.count,
        "body_size": args.body_size, "credit": args.credit, "window": args.window or None,
        "workers": None if router is None else args.workers,
        "shared_address": args.shared_address, "sent": sent, "received": received,
        "lost": max(0, sent - received) if mode == "presettled" else None,
        "start_ts": min(starts) if starts else None, "end_ts": max(ends) if ends else None,
        "wall_s": round(time.time() - t0, 3),
        "msgs_per_s": round(received / span, 1) if span else None,
        "lat_p50_us": max(p50s) if p50s else None,      # worst pair
        "lat_p99_us": max(p99s) if p99s else None,
        "router_cpu_s": round(router_cpu, 3) if router_cpu is not None else None,
        "router_cpu_us_per_msg": per_msg(router_cpu, received or sent),
        "router_cpu_by_proc": {k: per_msg(v, received or sent) for k, v in by_proc.items()},
        "router_idle_cpu_pct": idle_pct,
        "sender_cpu_us_per_msg": per_msg(cpu_of(snd), sent),
        "receiver_cpu_us_per_msg": per_msg(cpu_of(rcv), received),
        "errors": errors,
    }
    assert tuple(summary) == SUMMARY_KEYS
    return summary


# --------------------------------------------------------------------------- table

COLUMNS = (("variant", 9), ("mode", 10), ("pairs", 5), ("received", 9), ("lost", 7),
           ("msgs_per_s", 10),
           ("lat_p50_us", 10), ("lat_p99_us", 10), ("router_cpu_us_per_msg", 12),
           ("sender_cpu_us_per_msg", 11), ("receiver_cpu_us_per_msg", 11))
HEADERS = ("variant", "mode", "pairs", "received", "lost", "msgs/s", "p50 us", "p99 us", "router us/msg",
           "sender us/m", "recv us/m")


def print_table(rows: list[dict]) -> None:
    print(" ".join(h.rjust(w) for h, (_, w) in zip(HEADERS, COLUMNS)))
    for r in rows:
        print(" ".join(str(r[k] if r[k] is not None else "-").rjust(w) for k, w in COLUMNS))
        for e in r["errors"]:
            print(f"    ! {e}")
    if len(rows) > 1 and rows[0]["msgs_per_s"]:
        base = rows[0]
        print(f"ratios vs {base['variant']}/{base['mode']}:")
        for r in rows[1:]:
            tput = r["msgs_per_s"] / base["msgs_per_s"] if r["msgs_per_s"] else None
            cpu = (r["router_cpu_us_per_msg"] / base["router_cpu_us_per_msg"]
                   if r["router_cpu_us_per_msg"] and base["router_cpu_us_per_msg"] else None)
            print(f"  {r['variant']}/{r['mode']}: msgs/s x{tput:.2f}" if tput else
                  f"  {r['variant']}/{r['mode']}: msgs/s -", end="")
            print(f", router cpu/msg x{cpu:.2f}" if cpu else "")
    for r in rows:
        if r["lost"]:
            print(f"{r['variant']}/{r['mode']}: the router dropped {r['lost']} of {r['sent']} "
                  f"pre-settled messages ({100.0 * r['lost'] / r['sent']:.1f}%); a router may "
                  "drop pre-settled messages under pressure (1.19 does too)")
    for r in rows:
        if r["router_cpu_by_proc"]:
            parts = ", ".join(f"{k} {v}" for k, v in r["router_cpu_by_proc"].items())
            print(f"router cpu us/msg by process ({r['variant']}/{r['mode']}): {parts}")


# --------------------------------------------------------------------------- main

def add_load_options(p: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """The load generator's options every router benchmark takes; returns the settlement-mode
    group (``--presettled``/``--unsettled``, into ``modes``) for callers to extend."""
    p.add_argument("--pairs", type=int, default=1)
    p.add_argument("--count", type=int, default=20000, help="messages per sender")
    p.add_argument("--body-size", type=int, default=100)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--presettled", dest="modes", action="store_const", const=["presettled"])
    mode.add_argument("--unsettled", dest="modes", action="store_const", const=["unsettled"])
    p.add_argument("--credit", type=int, default=250, help="receiver credit window")
    p.add_argument("--window", type=int, default=0, help="sender max unsettled (0: credit only)")
    p.add_argument("--rate", type=float, default=0,
                   help="each sender sends at most this many msg/s (0: unpaced; for latency)")
    p.add_argument("--client", choices=["py", "c"], default="py",
                   help="load generator: loadgen.py, or the compiled cloadgen (cloadgen.py "
                        "builds it; never slower than the router)")
    p.add_argument("--record-trace", action="store_true",
                   help="receivers count the routers each message went through (its "
                        "x-opt-qd.trace; the listeners keep annotations: stripAnnotations no)")
    return mode


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = add_load_options(p)
    mode.add_argument("--both", dest="modes", action="store_const",
                      const=["presettled", "unsettled"])
    p.add_argument("--metrics-dir",
                   help="have our router write its metrics (router-metrics/1) here every second")
    p.add_argument("--receivers", type=int, default=1,
                   help="consumers per sender address (with --distribution)")
    p.add_argument("--distribution", choices=["closest", "balanced", "multicast"],
                   help="configure the benchmark addresses with this distribution")
    p.add_argument("--workers", type=int, default=1, help="router workerThreads")
    p.add_argument("--shared-address", action="store_true", help="all pairs use one address")
    p.add_argument("--router-cmd",
                   help="another router, e.g. 'qdrouterd -c {conf}' (ready = port accepts TCP)")
    p.add_argument("--direct", action="store_true",
                   help="no router: senders connect to listening receivers")
    p.add_argument("--compare-pure", action="store_true",
                   help="also run our router with ROUTER_NO_EXTENSIONS=1 and print ratios")
    p.add_argument("--fresh-router", action="store_true",
                   help="start a new router for every mode (default: one per variant)")
    p.add_argument("--port", type=int, default=0, help="router listener port (default: a free one)")
    p.add_argument("--timeout", type=float, default=120.0, help="bound per client process")
    p.add_argument("--idle-sample", type=float, default=1.0,
                   help="seconds to sample the idle router's CPU before the runs (0: skip)")
    p.add_argument("--out", help="JSON lines file (default benchmarks/results/<UTC time>.jsonl)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    modes = args.modes or ["presettled"]
    if args.direct and (args.router_cmd or args.compare_pure):
        print("--direct runs without a router; --router-cmd/--compare-pure do not apply",
              file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else HERE / "results" / f"{stamp}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    variants = [("default", {})]
    if args.compare_pure:
        variants.append(("pure", {"ROUTER_NO_EXTENSIONS": "1"}))
    if args.direct:
        variants = [("direct", {})]

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="router-bench-") as tmp:
        workdir = Path(tmp)
        # one router per variant, or per (variant, mode) with --fresh-router
        groups = [(v, env, [m]) for v, env in variants for m in modes] if args.fresh_router \
            else [(v, env, modes) for v, env in variants]
        for variant, env, group_modes in groups:
            router = None
            try:
                idle = None
                if not args.direct:
                    router = Router(workdir, args.port or free_port(), args.workers,
                                    args.router_cmd, env, args.distribution,
                                    args.metrics_dir, keep_annotations=args.record_trace)
                    router.wait_ready()
                    idle = idle_cpu_pct(router.proc.pid, args.idle_sample)
                for mode in group_modes:
                    if router and not router.alive():
                        print(f"{variant}/{mode}: skipped, router exited with "
                              f"{router.proc.returncode}; log tail:\n{router.log_tail()}",
                              file=sys.stderr)
                        break
                    run_id = f"{stamp}-{variant}-{mode}"
                    summary, clients = run_once(args, workdir, router, run_id,
                                                mode == "presettled", variant, idle)
                    rows.append(summary)
                    with open(out, "a", encoding="utf-8") as f:
                        for record in clients + [summary]:
                            f.write(json.dumps(record, separators=(",", ":")) + "\n")
            except RuntimeError as e:
                print(f"{variant}: {e}", file=sys.stderr)
            finally:
                if router:
                    # no wait for a last metrics sample: the router's agent takes one when it
                    # stops (SIGTERM), so the file ends with every final record
                    router.stop()
    if rows:
        print_table(rows)
    print(f"results: {out}")
    return 0 if rows and not any(r["errors"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
