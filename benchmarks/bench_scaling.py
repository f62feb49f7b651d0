"""Inputs of the scaling model (docs/scaling.md): the serial core's ceiling, measured two ways.

A script, not a test. Three sub-commands, each printing a table and ``scaling/1`` JSON lines
(stdout, or appended to ``--out``):

``core``: the core alone, fed synthetic batches in one process (bench_core.py's rounds: one
    sender link, one receiver link, closest; per round the sender worker's batch of B Transfers
    and the receiver worker's batch of credit and B dispositions), with ``ipc.decode_frame`` of
    the inbound frames and ``ipc.encode_frame`` of the outbound ones included, for every batch
    size of ``--batches`` (default 1..256): µs of core CPU per message and the rate that is the
    core process's maximum at that batch size, not counting its ZeroMQ calls (bench_zmq_hops.py
    ``--flood`` measures those per frame; a round is two frames in and two out).

``threads``: a real router under load (``cloadgen`` clients, ``--pairs`` unsettled pairs,
    ``--count`` messages each, receiver credit 1000, 100-byte bodies) and the CPU of every
    thread of every process of the router from ``/proc/PID/task/TID/stat`` between the start of
    the senders and the end of the clients: µs per message per thread, and per thread the share
    of the run's wall time it was on a CPU and its wake-ups per message (voluntary context
    switches, ``/proc/PID/task/TID/status``). Ours: threads labelled ``module:comm`` (the core's
    serial part is ``router_core.coreproc``'s main thread; ``ZMQbg/*`` are libzmq's threads).
    ``--qdrouterd-1x PREFIX``: a Qpid Dispatch 1.x router instead, whose threads all bear the
    process's name. 1.x creates its core thread (``router_core_thread``) while it sets the router
    up and its ``workerThreads - 1`` extra server threads only afterwards, in
    ``qd_server_run``, which then runs the main thread as a server thread too; so, sorted by
    thread id (Linux hands them out in creation order in a fresh process), the first thread after
    the main one is the core: labelled ``core``, the others ``main`` and ``worker-N``. The script
    checks that there are exactly ``workerThreads + 1`` threads (else it labels them ``tid-N``
    and says so), and that at idle the core thread waits in futex (a condition variable) -- the
    wait of 1.x's core thread for actions (``sys_cond_wait``).

``model``: msgs/s against CPU cores from the figures above: with R µs of router CPU per message
    (every process and thread) and S µs per message in the serial part (the core's main thread),
    N cores carry at most min(N * 1e6 / R, 1e6 / S) messages per second (clients elsewhere); the
    serial part saturates from N = R / S cores on.

    python benchmarks/bench_scaling.py core --batches 1,2,4,8,16,32,64,128,256
    python benchmarks/bench_scaling.py threads --pairs 4 --workers 4 --count 200000
    python benchmarks/bench_scaling.py threads --pairs 4 --workers 4 --worker-processes 4
    python benchmarks/bench_scaling.py threads --qdrouterd-1x /opt/qpid-dispatch-1.19.0 --pairs 4
    python benchmarks/bench_scaling.py model --router-us 8.0 --serial-us 2.0 --cores 1,2,4,8,16

Every process started here is stopped here; every wait is bounded; only 127.0.0.1 is used.
Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import bench_core
import run_router_bench as rb
import side_by_side

SYSCALL_FUTEX = 202  # x86_64; /proc/TID/syscall's first field while the thread sleeps


def _task_ticks(pid: int) -> dict[int, int]:
    """utime+stime (clock ticks) of every thread of ``pid``."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = int(fields[11]) + int(fields[12])
    return out


def _wakes(pid: int, tid: int) -> int:
    """Voluntary context switches of a thread so far: how often it went to sleep (to wait
    for input), so one more wake-up each."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _comm(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return str(tid)


def _syscall(pid: int, tid: int) -> Optional[int]:
    """The number of the system call the thread sleeps in (None: running or unreadable)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall", encoding="ascii") as f:
            first = f.read().split()[0]
        return int(first)
    except (OSError, ValueError, IndexError):
        return None


def label_1x_threads(pid: int, workers: int) -> tuple[dict[int, str], list[str]]:
    """{tid: label} for a 1.x router (see the module doc) and notes on the identification."""
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    notes = []
    if len(tids) != workers + 1 or tids[0] != pid:
        notes.append(f"{len(tids)} threads for workerThreads {workers}: not identified")
        return {tid: f"tid-{n}" for n, tid in enumerate(tids)}, notes
    labels = {pid: "main"}
    labels[tids[1]] = "core"
    for n, tid in enumerate(tids[2:], 1):
        labels[tid] = f"worker-{n}"
    if _syscall(pid, tids[1]) != SYSCALL_FUTEX:
        notes.append(f"the core thread's idle syscall is {_syscall(pid, tids[1])}, not futex")
    return labels, notes


class ThreadCpu:
    """CPU of every thread of a router's processes between two samples (the ``cpu_meter``
    interface of run_router_bench.run_once); labels from ``labeller(pid) -> {tid: label}``."""

    def __init__(self, root: int, labeller: Any) -> None:
        self.root = root
        self.labeller = labeller

    def _sample(self) -> dict[tuple[int, int], tuple[int, int]]:
        """{(pid, tid): (CPU ticks, voluntary context switches)}"""
        ticks = {}
        for pid in rb.process_tree(self.root):
            for tid, t in _task_ticks(pid).items():
                ticks[(pid, tid)] = (t, _wakes(pid, tid))
        return ticks

    def start(self) -> None:
        self.labels = {}
        for pid in rb.process_tree(self.root):
            for tid, label in self.labeller(pid).items():
                self.labels[(pid, tid)] = label
        self.t0 = time.monotonic()
        self.before = self._sample()

    def stop(self) -> tuple[float, dict[str, float]]:
        after = self._sample()
        self.wall = time.monotonic() - self.t0
        by_label: dict[str, float] = {}
        self.wakes: dict[str, int] = {}
        for key, (ticks, wakes) in after.items():
            label = self.labels.get(key, f"{rb.proc_label(key[0])}:{_comm(*key)}")
            t0, w0 = self.before.get(key, (0, 0))
            by_label[label] = by_label.get(label, 0.0) + (ticks - t0) / rb.CLK_TCK
            self.wakes[label] = self.wakes.get(label, 0) + wakes - w0
        return sum(by_label.values()), by_label


def ours_labeller(pid: int) -> dict[int, str]:
    module = rb.proc_label(pid)
    if module == "router_io.worker":  # one label per worker process
        module = f"{module}[{pid}]"
    labels = {}
    for tid in _task_ticks(pid):
        comm = "main" if tid == pid else _comm(pid, tid)
        labels[tid] = f"{module}:{comm}"
    return labels


def cmd_threads(args: argparse.Namespace) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        for rep in range(args.repeat):
            workdir = Path(tmp) / f"run{rep}"
            workdir.mkdir()
            if args.qdrouterd_1x:
                cmd = f"{args.qdrouterd_1x / 'sbin' / 'qdrouterd'} -c {{conf}}"
                env = side_by_side.env_1x(args.qdrouterd_1x)
                kind = "1.x"
            else:
                cmd, env, kind = None, {}, "ours"
                if args.worker_processes:  # supervisor/sizing.py: forces the number
                    env = {"QDROUTERD_WORKER_PROCESSES": str(args.worker_processes)}
            router = rb.Router(workdir, rb.free_port(), args.workers, cmd, env, name="scaling",
                               new_session=True)
            notes: list[str] = []
            try:
                router.wait_ready()
                time.sleep(1.0)  # settled into its idle waits
                if args.qdrouterd_1x:
                    labels, notes = label_1x_threads(router.proc.pid, args.workers)
                    labeller = lambda pid, labels=labels: labels  # noqa: E731
                else:
                    labeller = ours_labeller
                meter = ThreadCpu(router.proc.pid, labeller)
                router.cpu_meter = lambda meter=meter: meter  # type: ignore[method-assign]
                load = argparse.Namespace(
                    pairs=args.pairs, count=args.count, body_size=100, credit=1000, window=0,
                    rate=0.0, client="c", shared_address=False, receivers=1, distribution=None,
                    timeout=120.0, router_cmd=cmd, workers=args.workers, idle_timeout=None)
                summary, _ = rb.run_once(load, workdir, router, f"{kind}-{rep}", False,
                                         "scaling", None)
            finally:
                router.stop()
            received = summary["received"] or 1
            cpu_s = summary["router_cpu_s"] or 0.0
            by_thread = {}
            for label, us in summary["router_cpu_by_proc"].items():
                by_thread[label] = {"us_per_msg": us,
                                    "busy": round(us * received / 1e6 / meter.wall, 3),
                                    "wakes_per_msg": round(meter.wakes.get(label, 0)
                                                           / received, 4)}
            rows.append({"schema": "scaling/1", "part": "threads", "router": kind,
                         "repeat": rep, "pairs": args.pairs, "workers": args.workers,
                         "worker_processes": args.worker_processes or None,
                         "count": args.count, "received": summary["received"],
                         "msgs_per_s": summary["msgs_per_s"],
                         "router_us_per_msg": round(cpu_s * 1e6 / received, 2),
                         "threads": by_thread, "notes": notes + summary["errors"]})
            print(f"{kind} run {rep}: {summary['msgs_per_s']} msg/s, router "
                  f"{rows[-1]['router_us_per_msg']} µs/msg", file=sys.stderr)
            for label, fig in sorted(by_thread.items(), key=lambda kv: -kv[1]["us_per_msg"]):
                if fig["us_per_msg"]:
                    print(f"  {label:<40} {fig['us_per_msg']:7.2f} µs/msg  busy "
                          f"{100 * fig['busy']:5.1f}%  wakes/msg {fig['wakes_per_msg']:.3f}",
                          file=sys.stderr)
            for note in rows[-1]["notes"]:
                print(f"  note: {note}", file=sys.stderr)
    return rows


def cmd_core(args: argparse.Namespace) -> list[dict]:
    if args.pure or bench_core.compiled_core is None:
        build, cls = "pure", bench_core.pure_core.RouterCore
    else:
        build, cls = "compiled", bench_core.compiled_core.RouterCore
    rows = []
    print(f"core ({build}) with IPC decode/encode, closest, µs per message (median round)",
          file=sys.stderr)
    print(f"{'batch':>6}{'unsettled µs':>14}{'msgs/s':>10}{'presettled µs':>15}{'msgs/s':>10}",
          file=sys.stderr)
    for batch in args.batches:
        line = f"{batch:>6}"
        for settled in (False, True):
            messages = max(batch * 40, args.messages // batch * batch)
            rounds = [t for _ in range(args.repeat) for t in bench_core.run_one(
                cls, "closest", 1, settled, True, messages, batch)]
            us = statistics.median(rounds) * 1e6
            rows.append({"schema": "scaling/1", "part": "core", "build": build, "batch": batch,
                         "settlement": "presettled" if settled else "unsettled",
                         "us_per_msg": round(us, 3), "msgs_per_s": round(1e6 / us)})
            line += f"{us:>14.3f}{1e6 / us:>10,.0f}" if not settled else \
                f"{us:>15.3f}{1e6 / us:>10,.0f}"
        print(line, file=sys.stderr)
    return rows


def cmd_model(args: argparse.Namespace) -> list[dict]:
    saturate = args.router_us / args.serial_us
    ceiling = 1e6 / args.serial_us
    print(f"router {args.router_us} µs/msg, serial part {args.serial_us} µs/msg: ceiling "
          f"{ceiling:,.0f} msg/s from {saturate:.1f} cores on", file=sys.stderr)
    rows = []
    for n in args.cores:
        rate = min(n * 1e6 / args.router_us, ceiling)
        rows.append({"schema": "scaling/1", "part": "model", "cores": n,
                     "router_us": args.router_us, "serial_us": args.serial_us,
                     "msgs_per_s": round(rate), "core_bound": n >= saturate})
        print(f"  {n:>3} cores {rate:>12,.0f} msg/s{'  (core bound)' if n >= saturate else ''}",
              file=sys.stderr)
    return rows


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", help="append JSON lines to this file instead of stdout")
    sub = p.add_subparsers(dest="part", required=True)
    c = sub.add_parser("core", help="the core alone, synthetic batches", parents=[common])
    c.add_argument("--batches", type=_ints, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    c.add_argument("--messages", type=int, default=20000, help="per run (at least 40 rounds)")
    c.add_argument("--repeat", type=int, default=3)
    c.add_argument("--pure", action="store_true", help="the pure-Python core")
    t = sub.add_parser("threads", help="a real router's threads under load", parents=[common])
    t.add_argument("--qdrouterd-1x", type=Path, help="install prefix of a 1.x router")
    t.add_argument("--pairs", type=int, default=4)
    t.add_argument("--workers", type=int, default=4, help="workerThreads")
    t.add_argument("--count", type=int, default=200_000, help="messages per sender")
    t.add_argument("--repeat", type=int, default=1)
    t.add_argument("--worker-processes", type=int, default=0,
                   help="ours: start exactly this many workers (default: as sized)")
    m = sub.add_parser("model", help="msgs/s against cores", parents=[common])
    m.add_argument("--router-us", type=float, required=True)
    m.add_argument("--serial-us", type=float, required=True)
    m.add_argument("--cores", type=_ints, default=[1, 2, 4, 8, 16, 32])
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    rows = {"core": cmd_core, "threads": cmd_threads, "model": cmd_model}[args.part](args)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
