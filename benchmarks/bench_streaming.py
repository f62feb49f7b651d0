"""Large-message throughput and router memory: MB/s and peak router RSS growth per message size.

A script, not a test::

    python benchmarks/bench_streaming.py [--sizes 1K,64K,1M,100M,1G] [--count-bytes 200M]
                                         [--routers 1] [--qdrouterd-1x PREFIX]

For each size it launches fresh routers (ours; and Qpid Dispatch 1.x's ``qdrouterd`` from
``--qdrouterd-1x PREFIX`` side by side when given: ``PREFIX/sbin/qdrouterd``, its libraries and
Python path from the usual places under PREFIX), in a line of ``--routers`` interior routers
(1: one standalone router), a receiver on the last and a sender on the first (tests/bigmsg.py:
both stream the message a slice at a time, so the clients never hold it whole), then sends
messages of that size until about ``--count-bytes`` have gone (at least one message) and
prints MB/s (body bytes over the wall time until the last one arrived) and each router's peak
RSS growth over its idle RSS (whole process tree, sampled from /proc). One JSON line per figure
(``bench-streaming/1``) follows the table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "src"))

import bigmsg  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests" / "system"))
from test_mixed_1x import one_x_pythonpath  # noqa: E402 - 1.x's Python path under its prefix

UNITS = {"K": 1000, "M": 1000 ** 2, "G": 1000 ** 3}


def parse_size(text: str) -> int:
    text = text.strip().upper()
    if text[-1:] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"router on port {port} did not start")


def config(router_id: str, port: int, ir_port: int, connect_to: int, interior: bool) -> str:
    text = (f"router {{\n    mode: {'interior' if interior else 'standalone'}\n"
            f"    id: {router_id}\n    workerThreads: 1\n}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {port}\n    role: normal\n"
            "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}\n")
    if interior:
        text += (f"listener {{\n    host: 127.0.0.1\n    port: {ir_port}\n"
                 "    role: inter-router\n}\n")
        if connect_to:
            text += (f"connector {{\n    host: 127.0.0.1\n    port: {connect_to}\n"
                     "    role: inter-router\n}\n")
    return text


def start_line(n: int, workdir: Path, prefix_1x: str = "") -> list:
    procs = []
    prev_ir = 0
    for i in range(n):
        port, ir_port = free_port(), free_port()
        conf = workdir / f"r{i}.conf"
        conf.write_text(config(f"R{i}", port, ir_port, prev_ir, n > 1))
        prev_ir = ir_port
        env = dict(os.environ)
        if prefix_1x:
            cmd = [os.path.join(prefix_1x, "sbin", "qdrouterd"), "-c", str(conf)]
            env["LD_LIBRARY_PATH"] = ":".join(
                [os.path.join(prefix_1x, d) for d in ("lib", "lib64")]
                + [env.get("LD_LIBRARY_PATH", "")])
            env["PYTHONPATH"] = one_x_pythonpath(prefix_1x)
        else:
            cmd = [sys.executable, "-m", "supervisor.main", "-c", str(conf)]
            env["PYTHONPATH"] = f"{HERE.parent / 'src'}:{env.get('PYTHONPATH', '')}"
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, env=env)
        procs.append((proc, port))
    for _, port in procs:
        wait_port(port)
    return procs


def stop(procs: list) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, _ in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_one(size: int, count: int, routers: int, prefix_1x: str) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    procs = start_line(routers, workdir, prefix_1x)
    try:
        first, last = procs[0][1], procs[-1][1]
        rp = bigmsg.Peer(last, "bench-receiver")
        rcv = bigmsg.BigReceiver(rp, "bench", credit=50)
        bigmsg.pump([rp], lambda: rcv.link.state & 16, 30)
        sp = bigmsg.Peer(first, "bench-sender")
        probe = sp.session.sender("probe")
        probe.target.address = "bench"
        probe.open()
        bigmsg.pump([rp, sp], lambda: probe.credit > 0, 60)  # routes known
        time.sleep(0.5)
        pids = [p.pid for p, _ in procs]
        base = [bigmsg.tree_rss_kb(p) for p in pids]
        peak = list(base)
        rounds = [0]

        def sample() -> None:
            rounds[0] += 1
            if rounds[0] % 20 == 0:
                for i, pid in enumerate(pids):
                    peak[i] = max(peak[i], bigmsg.tree_rss_kb(pid))

        senders = []
        t0 = time.monotonic()
        for i in range(count):
            snd = bigmsg.BigSender(sp, "bench", size, name=f"s{i}")
            senders.append(snd)
            bigmsg.pump([rp, sp], lambda s=snd: s.done, 3600, [snd, rcv], sample)
            if len(senders) > 8:
                senders.pop(0).link.close()
        bigmsg.pump([rp, sp], lambda: len(rcv.messages) >= count, 3600, [rcv], sample)
        elapsed = time.monotonic() - t0
        for i, pid in enumerate(pids):
            peak[i] = max(peak[i], bigmsg.tree_rss_kb(pid))
        ok = all(m[0] == size and not m[2] for m in rcv.messages)
        rp.close()
        sp.close()
        return {"ok": ok, "seconds": elapsed, "mb_s": size * count / elapsed / 1e6,
                "rss_growth_mb": [round((p - b) / 1024, 1) for p, b in zip(peak, base)]}
    finally:
        stop(procs)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1K,64K,1M,100M")
    ap.add_argument("--count-bytes", default="200M",
                    help="bytes per size (messages = this / size, at least 1, at most 5000)")
    ap.add_argument("--routers", type=int, default=1)
    ap.add_argument("--qdrouterd-1x", default=os.environ.get("QDROUTERD_1X", ""))
    args = ap.parse_args()
    total = parse_size(args.count_bytes)
    variants = [("ours", "")] + ([("1.x", args.qdrouterd_1x)] if args.qdrouterd_1x else [])
    print(f"{'router':6} {'size':>8} {'msgs':>6} {'MB/s':>8} {'seconds':>8}  "
          "peak RSS growth per router (MB)")
    lines = []
    for text in args.sizes.split(","):
        size = parse_size(text)
        count = max(1, min(5000, total // size))
        for name, prefix in variants:
            r = run_one(size, count, args.routers, prefix)
            print(f"{name:6} {text:>8} {count:6} {r['mb_s']:8.1f} {r['seconds']:8.2f}  "
                  f"{r['rss_growth_mb']}{'' if r['ok'] else '  (BAD: lost or aborted)'}")
            lines.append({"format": "bench-streaming/1", "router": name, "size": size,
                          "messages": count, "routers": args.routers, **r})
    for line in lines:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
