"""Memory of a launched router: connection churn, a stalled receiver, one big message.

Three scenarios, each on a fresh router (``python -m supervisor.main``, 1 worker by default):

1. **churn**: ``--cycles`` cycles (default 10) of opening ``--conns`` connections (default 2000,
   all open at once, each with a session, a receiver and a sender link on one of 10 addresses),
   then closing them all. Prints worker / core / total RSS after every cycle and the ratio of the
   last cycle to the 2nd (a router that reaches a steady state stays near 1.0).
2. **stall**: a receiver grants ``--stall-credit`` credit (default 100000) and then stops reading
   its socket; a sender sends up to ``--stall-count`` (default 100000) unsettled messages of
   ``--stall-size`` bytes (default 1 KiB body) until the router stops giving it credit (its
   backpressure: it holds a bounded amount whatever the receiver's credit). Prints how many the
   router took, RSS while they are held (and bytes held per message above the idle baseline),
   then after the receiver leaves (its deliveries go back to the sender MODIFIED / RELEASED,
   counted).
3. **big**: one message of ``--big-mb`` MB (default 50) to a stalled receiver; prints RSS while
   it is held and after the receiver leaves, relative to the message size, and the peak (VmHWM)
   growth of each process while it went through.

4. **footprint**: an idle router (no clients), every process: RSS, PSS (each page divided by
   the number of processes that map it: the figure that adds up) and USS (pages only it maps),
   from ``/proc/<pid>/smaps_rollup``, and PSS by kind of mapping (Python objects and malloc:
   anonymous memory and the heap; shared libraries; the rest). Side by side: ours as started
   (children forked from the pre-imported supervisor), ours with ``QDROUTERD_SPAWN=exec``
   (each child its own interpreter) and, with ``--qdrouterd-1x PREFIX``, Qpid Dispatch 1.x;
   ``--rounds`` rounds (default 3), the order rotating each round, medians printed.

RSS is VmRSS from ``/proc/<pid>/status`` of every process of the router's tree; "worker" is the
I/O worker process(es), "core" the core process, "total" all of them (supervisor, agent too).
Figures are printed and appended as one JSON line (``bench-memory/1``) to ``--out`` (default
``benchmarks/results/<UTC time>.jsonl``).

    .venv/bin/python benchmarks/bench_memory.py
    .venv/bin/python benchmarks/bench_memory.py --only churn --cycles 10 --conns 2000
    .venv/bin/python benchmarks/bench_memory.py --only footprint --qdrouterd-1x /opt/qpid-dispatch-1.19.0

Every process started here is stopped here; every wait is bounded.
"""
from __future__ import annotations

import argparse
import errno
import statistics
import json
import os
import resource
import select
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import proton
from cproton_ffi import ffi, lib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_router_bench import Router, free_port, proc_label, process_tree  # noqa: E402
import side_by_side  # noqa: E402

SCHEMA = "bench-memory/1"
MB = 1024 * 1024


# --------------------------------------------------------------------------- /proc RSS

def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss(router: Router, key: str = "VmRSS:") -> dict:
    """MB of every router process by role: worker (sum of workers), core, total."""
    out = {"worker": 0.0, "core": 0.0, "total": 0.0}
    for pid in process_tree(router.proc.pid):
        mb = _status_kb(pid, key) / 1024.0
        label = proc_label(pid)
        if "router_io.worker" in label:
            out["worker"] += mb
        elif "router_core.coreproc" in label:
            out["core"] += mb
        out["total"] += mb
    return {k: round(v, 1) for k, v in out.items()}


def settle_rss(router: Router, seconds: float = 1.0, timeout: float = 15.0) -> dict:
    """RSS once it stops moving (two samples ``seconds`` apart within 0.5 MB), bounded."""
    deadline = time.monotonic() + timeout
    last = rss(router)
    while time.monotonic() < deadline:
        time.sleep(seconds)
        now = rss(router)
        if abs(now["total"] - last["total"]) < 0.5:
            return now
        last = now
    return last


# --------------------------------------------------------------------------- a raw AMQP client

class Client:
    """One non-blocking socket + proton engine; driven by :func:`pump` (no threads)."""

    def __init__(self, port: int, container: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        err = self.sock.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, os.strerror(err))
        self.transport = proton.Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.conn = proton.Connection()
        self.conn.container = container
        self.collector = proton.Collector()
        self.conn.collect(self.collector)
        self.transport.bind(self.conn)
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        self.reading = True   # a stalled receiver stops reading its socket
        self.eos = False
        self.events: list = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def io(self, readable: bool) -> bool:
        """Move bytes both ways without blocking; False once the socket is finished."""
        t = self.transport
        if readable and self.reading and not self.eos:
            while True:
                cap = t.capacity()
                if cap <= 0:
                    break
                try:
                    data = self.sock.recv(min(cap, 65536))
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    self.eos = True
                    t.close_tail()
                    break
                t.push(data)
        while True:
            pending = t.pending()
            if pending <= 0:
                break
            try:
                sent = self.sock.send(t.peek(min(pending, 1 << 20)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                t.close_head()
                self.eos = True
                break
            t.pop(sent)
        while self.collector.peek() is not None:
            ev = self.collector.peek()
            self.events.append(ev.type)
            self.collector.pop()
        return not (self.eos and t.pending() <= 0)

    def wants_write(self) -> bool:
        return self.transport.pending() > 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        self.transport.unbind()


def pump(clients: list, until, timeout: float, what: str) -> None:
    """Drive every client's I/O until ``until()`` is true (bounded)."""
    deadline = time.monotonic() + timeout
    poller = select.epoll()
    fds: dict[int, Client] = {}
    try:
        for c in clients:
            fds[c.fileno()] = c
            poller.register(c.fileno(), select.EPOLLIN | select.EPOLLOUT)
        while not until():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            for c in clients:  # flush what the engines produced since the last round
                if c.wants_write():
                    c.io(False)
            for fd, mask in poller.poll(0.05):
                c = fds[fd]
                c.io(bool(mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR)))
                if not c.wants_write():
                    poller.modify(fd, select.EPOLLIN)
                else:
                    poller.modify(fd, select.EPOLLIN | select.EPOLLOUT)
    finally:
        poller.close()


def raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))


# --------------------------------------------------------------------------- scenarios

def start_router(workdir: Path, workers: int, name: str) -> Router:
    port = free_port()
    router = Router(workdir, port, workers, None, {}, name=name)
    router.wait_ready()
    return router


def churn(args: argparse.Namespace, workdir: Path) -> dict:
    raise_nofile(args.conns * 2 + 200)
    router = start_router(workdir, args.workers, "churn")
    try:
        base = settle_rss(router, 0.5)
        print(f"churn: idle            worker {base['worker']:7.1f} MB  core {base['core']:6.1f}"
              f" MB  total {base['total']:7.1f} MB", flush=True)
        cycles = []
        for cycle in range(1, args.cycles + 1):
            t0 = time.monotonic()
            clients = [Client(router.port, f"churn-{cycle}-{i}") for i in range(args.conns)]
            for i, c in enumerate(clients):
                addr = f"churn{i % 10}"
                rcv = c.session.receiver(f"r{i}")
                rcv.source.address = addr
                rcv.open()
                rcv.flow(10)
                snd = c.session.sender(f"s{i}")
                snd.target.address = addr
                snd.open()
                c.links = (rcv, snd)

            def all_attached() -> bool:
                return all(c.links[0].remote_source.address is not None
                           and c.links[1].state & proton.Endpoint.REMOTE_ACTIVE
                           for c in clients)
            pump(clients, all_attached, 120, "attaches")
            for c in clients:
                c.conn.close()

            def all_closed() -> bool:
                return all(c.conn.state & proton.Endpoint.REMOTE_CLOSED or c.eos for c in clients)
            pump(clients, all_closed, 120, "closes")
            for c in clients:
                c.close()
            clients = []
            now = settle_rss(router, 1.5)
            cycles.append(now)
            print(f"churn: cycle {cycle:2d}       worker {now['worker']:7.1f} MB  core "
                  f"{now['core']:6.1f} MB  total {now['total']:7.1f} MB  "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
        ratio = {k: round(cycles[-1][k] / cycles[1][k], 3) for k in cycles[-1]} \
            if len(cycles) >= 2 else {}
        if ratio:
            print(f"churn: cycle {len(cycles)} / cycle 2: worker {ratio['worker']:.3f}  core "
                  f"{ratio['core']:.3f}  total {ratio['total']:.3f}", flush=True)
        return {"idle": base, "cycles": cycles, "last_over_2nd": ratio}
    finally:
        router.stop()


def _sender(port: int, address: str) -> tuple:
    c = Client(port, "mem-sender")
    snd = c.session.sender("mem-snd")
    snd.target.address = address
    snd.open()
    return c, snd


def _stalled_receiver(port: int, address: str, credit: int) -> tuple:
    c = Client(port, "mem-receiver")
    rcv = c.session.receiver("mem-rcv")
    rcv.source.address = address
    rcv.open()
    rcv.flow(credit)
    return c, rcv


def _send_all(c: Client, snd: Any, body: bytes, count: int, timeout: float,
              stalled_after: float = 0.0) -> list:
    """Send ``count`` unsettled copies of one encoded message as the link's credit allows;
    return their deliveries. ``stalled_after`` > 0: stop early once the router has given no
    credit for that long (its backpressure on a receiver that does not read)."""
    msg = proton.Message(body=body).encode()
    dlvs = []
    deadline = time.monotonic() + timeout
    progress_at = time.monotonic()
    while len(dlvs) < count:
        if stalled_after and time.monotonic() - progress_at > stalled_after:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"sent {len(dlvs)} of {count} within {timeout}s")
        while len(dlvs) < count and snd.credit > 0 and c.transport.pending() < (4 << 20):
            dlvs.append(snd.delivery(b"%d" % len(dlvs)))
            snd.send(msg)
            snd.advance()
            progress_at = time.monotonic()
        r, _, _ = select.select([c], [c] if c.wants_write() else [], [], 0.05)
        c.io(bool(r))
    end = time.monotonic() + timeout
    while c.wants_write() and time.monotonic() < end:
        r, _, _ = select.select([c], [c], [], 0.05)
        c.io(bool(r))
    return dlvs


def _outcomes(dlvs: list) -> dict:
    names = {0: "none", proton.Delivery.ACCEPTED: "accepted", proton.Delivery.REJECTED:
             "rejected", proton.Delivery.RELEASED: "released", proton.Delivery.MODIFIED:
             "modified"}
    out: dict = {}
    for d in dlvs:
        name = names.get(d.remote_state, str(d.remote_state))
        out[name] = out.get(name, 0) + 1
    return out


def stall(args: argparse.Namespace, workdir: Path) -> dict:
    router = start_router(workdir, args.workers, "stall")
    address = "stall"
    try:
        base = settle_rss(router, 0.5)
        rc, rcv = _stalled_receiver(router.port, address, args.stall_credit)
        pump([rc], lambda: rcv.remote_source.address is not None and not rc.wants_write(), 20,
             "receiver attach")
        rc.reading = False  # from now on the receiver never reads its socket
        sc, snd = _sender(router.port, address)
        pump([sc], lambda: snd.credit > 0, 20, "sender credit")
        body = b"x" * args.stall_size
        t0 = time.monotonic()
        dlvs = _send_all(sc, snd, body, args.stall_count, 300, stalled_after=3.0)
        taken = len(dlvs)  # the router stops giving credit once it holds a bounded amount
        held = settle_rss(router, 1.0, 60)
        per_msg = {k: round((held[k] - base[k]) * MB / max(1, taken)) for k in held}
        print(f"stall: the router took {taken} of {args.stall_count} messages before the "
              f"sender ran out of credit", flush=True)
        print(f"stall: idle            total {base['total']:7.1f} MB (worker {base['worker']:.1f},"
              f" core {base['core']:.1f})", flush=True)
        print(f"stall: {taken} x {args.stall_size} B held  total {held['total']:7.1f} MB"
              f" (worker {held['worker']:.1f}, core {held['core']:.1f})  = "
              f"{per_msg['total']} B per message held ({per_msg['total'] / args.stall_size:.1f}x;"
              f" {time.monotonic() - t0:.1f} s to send)", flush=True)
        rc.close()  # the receiver leaves (socket closed, unread data and all)
        try:
            pump([sc], lambda: all(d.remote_state for d in dlvs[-100:])
                 and all(d.remote_state for d in dlvs), 60, "outcomes after the receiver left")
        except RuntimeError as exc:
            print(f"stall: {exc}", flush=True)
        outcomes = _outcomes(dlvs)
        del dlvs
        after = settle_rss(router, 1.0, 30)
        print(f"stall: receiver left   total {after['total']:7.1f} MB (worker {after['worker']:.1f},"
              f" core {after['core']:.1f})  outcomes at the sender {outcomes}", flush=True)
        sc.conn.close()
        pump([sc], lambda: bool(sc.conn.state & proton.Endpoint.REMOTE_CLOSED) or sc.eos, 10,
             "sender close")
        sc.close()
        gone = settle_rss(router, 1.0, 30)
        print(f"stall: sender left     total {gone['total']:7.1f} MB (worker {gone['worker']:.1f},"
              f" core {gone['core']:.1f})", flush=True)
        return {"idle": base, "held": held, "bytes_per_msg": per_msg, "after_receiver": after,
                "after_sender": gone, "outcomes": outcomes, "count": args.stall_count,
                "taken": taken,
                "size": args.stall_size}
    finally:
        router.stop()


def big(args: argparse.Namespace, workdir: Path) -> dict:
    router = start_router(workdir, args.workers, "big")
    size = int(args.big_mb * MB)
    try:
        base = settle_rss(router, 0.5)
        hwm0 = rss(router, "VmHWM:")
        rc, rcv = _stalled_receiver(router.port, "big", 1)
        pump([rc], lambda: rcv.remote_source.address is not None and not rc.wants_write(), 20,
             "receiver attach")
        rc.reading = False
        sc, snd = _sender(router.port, "big")
        pump([sc], lambda: snd.credit > 0, 20, "sender credit")
        dlvs = _send_all(sc, snd, b"b" * size, 1, 120)
        held = settle_rss(router, 1.0, 60)
        hwm = rss(router, "VmHWM:")
        cost = {k: round((held[k] - base[k]) * MB / size, 2) for k in held}
        peak = {k: round((hwm[k] - hwm0[k]) * MB / size, 2) for k in hwm}
        print(f"big: {args.big_mb:g} MB held   total {held['total']:7.1f} MB (worker "
              f"{held['worker']:.1f}, core {held['core']:.1f})  = {cost['total']:.2f}x its size "
              f"(worker {cost['worker']:.2f}x, core {cost['core']:.2f}x); peak growth "
              f"{peak['total']:.2f}x", flush=True)
        rc.close()
        pump([sc], lambda: bool(dlvs[0].remote_state), 30, "outcome")
        after = settle_rss(router, 1.0, 30)
        print(f"big: receiver left     total {after['total']:7.1f} MB (worker {after['worker']:.1f},"
              f" core {after['core']:.1f}); idle was {base['total']:.1f} MB", flush=True)
        sc.conn.close()
        pump([sc], lambda: bool(sc.conn.state & proton.Endpoint.REMOTE_CLOSED) or sc.eos, 10,
             "sender close")
        sc.close()
        return {"idle": base, "held": held, "cost_x": cost, "peak_x": peak,
                "after_receiver": after, "size_mb": args.big_mb}
    finally:
        router.stop()


# --------------------------------------------------------------------------- idle footprint

def smaps(pid: int) -> dict:
    """kB of one process: rss, pss, uss, and pss by kind of mapping (python: anonymous memory
    and [heap], i.e. Python objects and malloc; libs: shared objects; other: the rest)."""
    out = {"rss": 0, "pss": 0, "uss": 0, "pss_python": 0, "pss_libs": 0, "pss_other": 0}
    kind = "other"
    try:
        with open(f"/proc/{pid}/smaps", encoding="ascii", errors="replace") as f:
            for line in f:
                head, _, rest = line.partition(" ")
                if "-" in head and not head.endswith(":"):  # a mapping's first line
                    fields = rest.split()
                    path = fields[4] if len(fields) > 4 else ""
                    kind = ("python" if path in ("", "[heap]") else
                            "libs" if ".so" in os.path.basename(path) else "other")
                elif head == "Rss:":
                    out["rss"] += int(rest.split()[0])
                elif head == "Pss:":
                    out["pss"] += int(rest.split()[0])
                    out[f"pss_{kind}"] += int(rest.split()[0])
                elif head in ("Private_Clean:", "Private_Dirty:"):
                    out["uss"] += int(rest.split()[0])
    except OSError:
        pass
    return out


def role(pid: int, root: int) -> str:
    if pid == root:
        return "supervisor" if "supervisor.main" in proc_label(pid) else "qdrouterd"
    label = proc_label(pid)
    return {"router_core.coreproc": "core", "agent.controlplane": "agent",
            "router_io.worker": "worker"}.get(label, label)


def footprint_once(args: argparse.Namespace, workdir: Path, kind: str) -> dict:
    port = free_port()
    if kind == "1x":
        cmd, env = (f"{args.qdrouterd_1x / 'sbin' / 'qdrouterd'} -c {{conf}}",
                    side_by_side.env_1x(args.qdrouterd_1x))
    else:
        cmd, env = None, ({"QDROUTERD_SPAWN": "exec"} if kind == "ours-exec" else {})
    router = Router(workdir, port, args.workers, cmd, env, name=f"footprint-{kind}")
    try:
        router.wait_ready()
        time.sleep(args.idle_s)  # start-up's garbage collected, every process in its loop
        procs: dict[str, dict] = {}
        for pid in process_tree(router.proc.pid):
            name = role(pid, router.proc.pid)
            if name in procs:
                name = f"{name}{sum(1 for k in procs if k.startswith(name))}"
            procs[name] = smaps(pid)
        total = {k: sum(p[k] for p in procs.values()) for k in next(iter(procs.values()))}
        return {"processes": procs, "total": total}
    finally:
        router.stop()


def footprint(args: argparse.Namespace, workdir: Path) -> dict:
    kinds = ["ours", "ours-exec"] + (["1x"] if args.qdrouterd_1x else [])
    runs: dict[str, list] = {k: [] for k in kinds}
    for r in range(args.rounds):
        for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            runs[kind].append(footprint_once(args, workdir, kind))
    out = {}
    print("footprint: idle router, MB (median of %d rounds; PSS by kind: python heap / "
          "shared libraries / other)" % args.rounds)
    for kind, samples in runs.items():
        names = list(samples[0]["processes"])
        med = {name: {k: statistics.median(s["processes"].get(name, {}).get(k, 0)
                                           for s in samples)
                      for k in samples[0]["processes"][name]} for name in names}
        med["total"] = {k: statistics.median(s["total"][k] for s in samples)
                        for k in samples[0]["total"]}
        out[kind] = med
        for name, v in med.items():
            print(f"  {kind:<9} {name:<10} RSS {v['rss'] / 1024:6.1f}  PSS {v['pss'] / 1024:6.1f}"
                  f"  USS {v['uss'] / 1024:6.1f}   PSS python {v['pss_python'] / 1024:5.1f}"
                  f" libs {v['pss_libs'] / 1024:5.1f} other {v['pss_other'] / 1024:5.1f}",
                  flush=True)
    base = out.get("1x", {}).get("total")
    if base:
        for kind in ("ours", "ours-exec"):
            t = out[kind]["total"]
            print(f"  {kind} / 1.x: RSS {t['rss'] / base['rss']:.2f}x, "
                  f"PSS {t['pss'] / base['pss']:.2f}x")
    return out


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["churn", "stall", "big", "footprint"], action="append")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--cycles", type=int, default=10)
    p.add_argument("--conns", type=int, default=2000)
    p.add_argument("--stall-count", type=int, default=100000)
    p.add_argument("--stall-credit", type=int, default=100000)
    p.add_argument("--stall-size", type=int, default=1024)
    p.add_argument("--big-mb", type=float, default=50)
    p.add_argument("--rounds", type=int, default=3, help="footprint: rounds")
    p.add_argument("--idle-s", type=float, default=3.0, help="footprint: wait before reading")
    p.add_argument("--qdrouterd-1x", type=Path, help="footprint: a 1.x install prefix too")
    p.add_argument("--label", default="", help="free text stored with the figures")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    which = args.only or ["churn", "stall", "big", "footprint"]
    result: dict = {"schema": SCHEMA, "ts": time.time(), "label": args.label,
                    "workers": args.workers,
                    "build": "pure" if os.environ.get("ROUTER_NO_EXTENSIONS") else "compiled"}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        workdir = Path(tmp)
        for name in which:
            result[name] = {"churn": churn, "stall": stall, "big": big,
                            "footprint": footprint}[name](args, workdir)
    out = args.out or HERE / "results" / time.strftime("%Y%m%dT%H%M%SZ.jsonl", time.gmtime())
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
