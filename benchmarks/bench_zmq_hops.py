"""What the ZeroMQ hops of a routed message cost by themselves, with no router logic.

A script, not a test: ``python benchmarks/bench_zmq_hops.py [--rate 10000] [--seconds 5]``.

A message through our router crosses two ZeroMQ ``ipc://`` hops: the sender's worker (DEALER) to
the core (ROUTER), and the core to the receiver's worker. This script builds exactly that shape
with three processes and nothing else: a "worker in" process sends a small frame stamped with
``time.monotonic_ns()`` (paced at ``--rate`` per second, one frame per message as at low rates),
a "core" process relays each frame to a "worker out" process, which records the one-way latency.
The same sockets, transports and calls as the router's hot path (``common.zmqcalls``).

Figures: latency p50/p90/p99/p99.9/max in µs for the two hops together. They are the floor of
our router's latency at that rate on this box (the router adds its own work on top: proton in
both workers and the core's routing); compare with ``side_by_side.py``'s ``lat-10k`` case for
Qpid Dispatch 1.x, which has no such hops (one process, threads).
Prints one ``zmq-hops/1`` JSON line too. Every process started here is stopped here.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import zmq  # noqa: E402

from common import zmqcalls  # noqa: E402

_STAMP = struct.Struct("<q")


def _core(endpoint: str, ready) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(endpoint)
    ready.set()
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    out_id = None
    while True:
        if not poller.poll(5000):
            break  # the run is over (bounded: the parent stops us anyway)
        while zmqcalls.readable(sock):
            ident = zmqcalls.recv(sock)
            frame = zmqcalls.recv(sock)
            if frame == b"hello":
                out_id = ident
                continue
            if frame == b"stop":
                if out_id is not None:
                    zmqcalls.send_routed(sock, out_id, frame)
                ctx.destroy(0)
                return
            if out_id is not None:
                zmqcalls.send_routed(sock, out_id, frame)


def _worker_out(endpoint: str, conn) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    zmqcalls.send(sock, b"hello")
    conn.send("ready")
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    lat = []
    while True:
        if not poller.poll(10000):
            break
        while zmqcalls.readable(sock):
            frame = zmqcalls.recv(sock)
            if frame == b"stop":
                conn.send(lat)
                ctx.destroy(0)
                return
            lat.append(time.monotonic_ns() - _STAMP.unpack_from(frame)[0])
    conn.send(lat)
    ctx.destroy(0)


def _percentile(sorted_values: list, q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[i]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=10_000.0, help="frames per second (paced)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--size", type=int, default=200, help="bytes per frame (a small batch)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="zmqhops-") as tmp:
        endpoint = f"ipc://{os.path.join(tmp, 'core')}"
        ready = mp.Event()
        core = mp.Process(target=_core, args=(endpoint, ready), daemon=True)
        core.start()
        if not ready.wait(10):
            core.kill()
            print("the relay process did not start", file=sys.stderr)
            return 1
        mine, theirs = mp.Pipe()
        out = mp.Process(target=_worker_out, args=(endpoint, theirs), daemon=True)
        out.start()
        try:
            if not mine.poll(10):
                print("the receiving process did not start", file=sys.stderr)
                return 1
            mine.recv()
            time.sleep(0.2)  # its hello reached the relay
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.connect(endpoint)
            pad = b"\0" * max(0, args.size - _STAMP.size)
            interval = 1e9 / args.rate
            start = time.monotonic_ns()
            end = start + int(args.seconds * 1e9)
            n = 0
            while True:
                due = start + int(n * interval)
                now = time.monotonic_ns()
                if due >= end:
                    break
                if due > now:
                    time.sleep((due - now) / 1e9)
                zmqcalls.send(sock, _STAMP.pack(time.monotonic_ns()) + pad)
                n += 1
            zmqcalls.send(sock, b"stop")
            if not mine.poll(30):
                print("no result from the receiving process", file=sys.stderr)
                return 1
            lat = sorted(mine.recv())
            ctx.destroy(0)
        finally:
            for proc in (out, core):
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
    us = [v / 1000.0 for v in lat]
    row = {"kind": "zmq-hops/1", "hops": 2, "rate": args.rate, "sent": n, "received": len(us),
           "p50_us": _percentile(us, 0.50), "p90_us": _percentile(us, 0.90),
           "p99_us": _percentile(us, 0.99), "p999_us": _percentile(us, 0.999),
           "max_us": us[-1] if us else float("nan"), "cpus": os.cpu_count()}
    print(f"two ZeroMQ ipc hops (worker -> core -> worker), {args.rate:.0f} frames/s paced, "
          f"{len(us)}/{n} received")
    print("  latency µs  p50 {p50_us:8.1f}  p90 {p90_us:8.1f}  p99 {p99_us:8.1f}  "
          "p99.9 {p999_us:8.1f}  max {max_us:8.1f}".format(**row))
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
