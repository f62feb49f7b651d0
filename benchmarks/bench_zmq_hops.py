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

``--flood N``: the CPU cost of the hops instead of their latency (an input of docs/scaling.md):
N frames of ``--size`` bytes sent back to back (no high-water mark, as the router's sockets),
relayed, counted; each process measures its own CPU (every thread: libzmq's
I/O thread included) from the first frame to the last, in µs per frame. The relay's figure
(receive one frame, send it on) is one hop's cost on both ends; the sender's and the receiver's
are a hop's two ends apart. Prints one ``zmq-hops-cpu/1`` JSON line.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
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


def _cpu_s() -> float:
    """CPU seconds of this process, every thread (libzmq's I/O thread too)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _unbounded(sock):
    """No high-water mark, as the router's own sockets (worker.py, coreproc.py): a ROUTER
    socket drops what is over it."""
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    return sock


def _flood_relay(endpoint: str, ready, conn) -> None:
    """The core's part in --flood: relay every frame, report CPU from the first to "stop"."""
    ctx = zmq.Context()
    sock = _unbounded(ctx.socket(zmq.ROUTER))
    sock.bind(endpoint)
    ready.set()
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    out_id = None
    cpu0 = None
    relayed = 0
    deadline = time.monotonic() + 120  # bounded: the parent stops us anyway
    while time.monotonic() < deadline:
        poller.poll(1000)
        while zmqcalls.readable(sock):
            ident = zmqcalls.recv(sock)
            frame = zmqcalls.recv(sock)
            if frame == b"hello":
                out_id = ident
                continue
            if frame == b"stop":
                cpu = _cpu_s() - cpu0 if cpu0 is not None else 0.0
                if out_id is not None:
                    zmqcalls.send_routed(sock, out_id, frame)
                conn.send((relayed, cpu))
                ctx.destroy(0)
                return
            if cpu0 is None:
                cpu0 = _cpu_s()
            if out_id is not None:
                zmqcalls.send_routed(sock, out_id, frame)
                relayed += 1
    conn.send((relayed, float("nan")))
    ctx.destroy(0)


def _flood_out(endpoint: str, conn) -> None:
    """The receiving worker's part in --flood: count frames, report CPU from the first."""
    ctx = zmq.Context()
    sock = _unbounded(ctx.socket(zmq.DEALER))
    sock.connect(endpoint)
    zmqcalls.send(sock, b"hello")
    conn.send("ready")
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    got = 0
    cpu0 = None
    deadline = time.monotonic() + 120  # bounded: the parent stops us anyway
    while time.monotonic() < deadline:
        poller.poll(1000)
        while zmqcalls.readable(sock):
            frame = zmqcalls.recv(sock)
            if frame == b"stop":
                conn.send((got, _cpu_s() - cpu0 if cpu0 is not None else 0.0))
                ctx.destroy(0)
                return
            if cpu0 is None:
                cpu0 = _cpu_s()
            got += 1
    conn.send((got, float("nan")))
    ctx.destroy(0)


def flood(frames: int, size: int) -> dict:
    """CPU µs per frame of each of the three processes, frames sent back to back."""
    with tempfile.TemporaryDirectory(prefix="zmqhops-") as tmp:
        endpoint = f"ipc://{os.path.join(tmp, 'core')}"
        ready = mp.Event()
        relay_mine, relay_theirs = mp.Pipe()
        relay = mp.Process(target=_flood_relay, args=(endpoint, ready, relay_theirs),
                           daemon=True)
        relay.start()
        out = None
        try:
            if not ready.wait(10):
                raise RuntimeError("the relay process did not start")
            mine, theirs = mp.Pipe()
            out = mp.Process(target=_flood_out, args=(endpoint, theirs), daemon=True)
            out.start()
            if not mine.poll(10):
                raise RuntimeError("the receiving process did not start")
            mine.recv()
            time.sleep(0.2)  # its hello reached the relay
            ctx = zmq.Context()
            sock = _unbounded(ctx.socket(zmq.DEALER))
            sock.connect(endpoint)
            frame = b"\1" * size
            cpu0 = _cpu_s()
            for _ in range(frames):
                zmqcalls.send(sock, frame)
            zmqcalls.send(sock, b"stop")
            if not (mine.poll(60) and relay_mine.poll(10)):
                raise RuntimeError("no result from the relay or the receiving process")
            sender_cpu = _cpu_s() - cpu0  # its I/O thread has written every frame by now
            got, out_cpu = mine.recv()
            relayed, relay_cpu = relay_mine.recv()
            ctx.destroy(0)
        finally:
            for proc in (out, relay):
                if proc is None:
                    continue
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
    return {"kind": "zmq-hops-cpu/1", "frames": frames, "size": size, "received": got,
            "relayed": relayed, "sender_us_per_frame": round(sender_cpu * 1e6 / frames, 3),
            "relay_us_per_frame": round(relay_cpu * 1e6 / max(relayed, 1), 3),
            "receiver_us_per_frame": round(out_cpu * 1e6 / max(got, 1), 3),
            "cpus": os.cpu_count()}


def paced(rate: float, seconds: float, size: int) -> dict:
    """The two hops' one-way latency, one ``size``-byte frame per message at ``rate`` a second
    for ``seconds``: the ``zmq-hops/1`` row (µs percentiles). RuntimeError when a process of the
    three does not start or does not answer (each wait is bounded)."""
    with tempfile.TemporaryDirectory(prefix="zmqhops-") as tmp:
        endpoint = f"ipc://{os.path.join(tmp, 'core')}"
        ready = mp.Event()
        core = mp.Process(target=_core, args=(endpoint, ready), daemon=True)
        core.start()
        if not ready.wait(10):
            core.kill()
            raise RuntimeError("the relay process did not start")
        mine, theirs = mp.Pipe()
        out = mp.Process(target=_worker_out, args=(endpoint, theirs), daemon=True)
        out.start()
        ctx = None
        try:
            if not mine.poll(10):
                raise RuntimeError("the receiving process did not start")
            mine.recv()
            time.sleep(0.2)  # its hello reached the relay
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.connect(endpoint)
            pad = b"\0" * max(0, size - _STAMP.size)
            interval = 1e9 / rate
            start = time.monotonic_ns()
            end = start + int(seconds * 1e9)
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
                raise RuntimeError("no result from the receiving process")
            lat = sorted(mine.recv())
        finally:
            if ctx is not None:
                ctx.destroy(0)
            for proc in (out, core):
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
    us = [v / 1000.0 for v in lat]
    return {"kind": "zmq-hops/1", "hops": 2, "rate": rate, "sent": n, "received": len(us),
            "p50_us": _percentile(us, 0.50), "p90_us": _percentile(us, 0.90),
            "p99_us": _percentile(us, 0.99), "p999_us": _percentile(us, 0.999),
            "max_us": us[-1] if us else float("nan"), "cpus": os.cpu_count()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=10_000.0, help="frames per second (paced)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--size", type=int, default=200, help="bytes per frame (a small batch)")
    p.add_argument("--flood", type=int, default=0, metavar="N",
                   help="CPU per frame of N frames back to back instead of paced latency")
    args = p.parse_args()
    if args.flood:
        row = flood(args.flood, args.size)
        print(f"two ZeroMQ ipc hops, {args.flood} frames of {args.size} bytes back to back, "
              f"{row['received']} received; CPU µs per frame: sender "
              f"{row['sender_us_per_frame']:.2f}, relay {row['relay_us_per_frame']:.2f}, "
              f"receiver {row['receiver_us_per_frame']:.2f}")
        print(json.dumps(row))
        return 0 if row["received"] == args.flood else 1
    try:
        row = paced(args.rate, args.seconds, args.size)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    n = row["sent"]
    print(f"two ZeroMQ ipc hops (worker -> core -> worker), {args.rate:.0f} frames/s paced, "
          f"{row['received']}/{n} received")
    print("  latency µs  p50 {p50_us:8.1f}  p90 {p90_us:8.1f}  p99 {p99_us:8.1f}  "
          "p99.9 {p999_us:8.1f}  max {max_us:8.1f}".format(**row))
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
