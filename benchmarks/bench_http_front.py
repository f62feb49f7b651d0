"""Many concurrent clients on an http listener's ``/healthz`` and ``/metrics``: answers by status
and latency, our router beside Qpid Dispatch 1.x.

A script, not a test: ``python benchmarks/bench_http_front.py [--clients 500] [--seconds 10]
[--max-requests 100000] [--paths /healthz,/metrics] [--keep-alive] [--workers 2]
[--qdrouterd-1x PREFIX] [--repeat 1] [--out FILE]``.

Starts a router (loopback, a free port, one ``http: yes`` listener), waits until
``/healthz`` answers, then runs ``--clients`` concurrent clients (one asyncio loop, raw
sockets) for ``--seconds`` or until ``--max-requests`` answers, whichever comes first. Each
client asks the paths in turn, a new TCP connection per request (``Connection: close``, as a
probe does) or, with ``--keep-alive``, its requests on one connection. A request that gets no
complete answer within ``--request-timeout`` counts as ``timeout``; one whose connection is
refused or reset as ``error``. Prints, per router: answers by status, requests per second,
p50/p99/max latency in ms; one ``bench-http-front/1`` JSON line each to stdout or ``--out``.
With ``--qdrouterd-1x PREFIX`` (e.g. /opt/qpid-dispatch-1.19.0) the same load runs against
1.x's ``sbin/qdrouterd``, alternating with ours per repeat.

``hammer`` (the load alone, against a port already listening) is also used by
``tests/system/test_http_front.py``. Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _one(port: int, path: str, timeout: float) -> tuple:
    """One request on a new connection: (status or 'timeout'/'error', seconds)."""
    start = time.monotonic()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
                     .encode("ascii"))
        data = await asyncio.wait_for(reader.read(), timeout - (time.monotonic() - start))
        status = _status(data)
    except asyncio.TimeoutError:
        status = "timeout"
    except OSError:
        status = "error"
    finally:
        if writer is not None:
            writer.close()
    return status, time.monotonic() - start


def _status(data: bytes):
    if not data.startswith(b"HTTP/1."):
        return "error"
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return "error"


async def _keep_alive_client(port: int, paths: list, timeout: float, until: float,
                             budget: list, results: list) -> None:
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout)
        i = 0
        while time.monotonic() < until and budget[0] > 0:
            budget[0] -= 1
            path = paths[i % len(paths)]
            i += 1
            start = time.monotonic()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode("ascii"))
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await asyncio.wait_for(reader.readexactly(length), timeout)
                results.append((_status(head), time.monotonic() - start))
            except asyncio.TimeoutError:
                results.append(("timeout", time.monotonic() - start))
                return
            except (OSError, asyncio.IncompleteReadError, ValueError):
                results.append(("error", time.monotonic() - start))
                return
    except (OSError, asyncio.TimeoutError):
        results.append(("error", 0.0))
    finally:
        if writer is not None:
            writer.close()


async def _hammer(port: int, paths: list, clients: int, seconds: float, max_requests: int,
                  timeout: float, keep_alive: bool) -> list:
    until = time.monotonic() + seconds
    budget = [max_requests]
    results: list = []

    async def client(n: int) -> None:
        i = n
        while time.monotonic() < until and budget[0] > 0:
            budget[0] -= 1
            results.append(await _one(port, paths[i % len(paths)], timeout))
            i += 1

    if keep_alive:
        await asyncio.gather(*(_keep_alive_client(port, paths, timeout, until, budget, results)
                               for _ in range(clients)))
    else:
        await asyncio.gather(*(client(n) for n in range(clients)))
    return results


def hammer(port: int, paths=("/healthz",), clients: int = 500, seconds: float = 10.0,
           max_requests: int = 100000, timeout: float = 10.0, keep_alive: bool = False) -> dict:
    """Run the load against ``127.0.0.1:port``; the figures as a dict (see summarize)."""
    start = time.monotonic()
    results = asyncio.run(_hammer(port, list(paths), clients, seconds, max_requests, timeout,
                                  keep_alive))
    return summarize(results, time.monotonic() - start)


def summarize(results: list, elapsed: float) -> dict:
    by_status = collections.Counter(str(status) for status, _ in results)
    latencies = sorted(t for status, t in results if isinstance(status, int))

    def pct(p: float) -> Optional[float]:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 2)

    return {"requests": len(results), "by_status": dict(sorted(by_status.items())),
            "seconds": round(elapsed, 2), "per_second": round(len(results) / elapsed, 1)
            if elapsed else None, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": round(latencies[-1] * 1000, 2) if latencies else None}


# --- routers ----------------------------------------------------------------------------------
def _conf(http_port: int, workers: int) -> str:
    return textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Bench.Http
            workerThreads: {workers}
        }}
        listener {{
            host: 127.0.0.1
            port: {http_port}
            http: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)


def pythonpath_1x(prefix: str) -> str:
    """What a 1.x install needs on PYTHONPATH: its egg (wherever the install put it), its
    internal modules."""
    parts = []
    for pattern in ("lib/python3*/site-packages/*.egg", "local/lib/python3*/dist-packages/*.egg",
                    "lib/python3*/site-packages"):
        parts += sorted(glob.glob(os.path.join(prefix, pattern)))
    parts.append(os.path.join(prefix, "lib", "qpid-dispatch", "python"))
    return os.pathsep.join(p for p in parts if os.path.exists(p))


def start_router(kind: str, prefix: Optional[str], workers: int, tmp: Path) -> tuple:
    port = free_port()
    conf = tmp / f"{kind}-{port}.conf"
    conf.write_text(_conf(port, workers))
    log = open(tmp / f"{kind}-{port}.log", "w")
    if kind == "ours":
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "supervisor.main", "-c", str(conf)]
    else:
        env = {**os.environ, "PYTHONPATH": pythonpath_1x(prefix)}
        cmd = [os.path.join(prefix, "sbin", "qdrouterd"), "-c", str(conf)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} router exited: {(tmp / f'{kind}-{port}.log').read_text()}")
        summary = hammer(port, ("/healthz",), clients=1, seconds=1.0, max_requests=1, timeout=1.0)
        if summary["by_status"].get("200"):
            return proc, port, log
        time.sleep(0.2)
    stop_router(proc, log)
    raise RuntimeError(f"{kind} router: /healthz did not answer 200 within {START_TIMEOUT} s")


def stop_router(proc: subprocess.Popen, log) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    log.close()


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-requests", type=int, default=100000)
    ap.add_argument("--request-timeout", type=float, default=10.0)
    ap.add_argument("--paths", default="/healthz,/metrics")
    ap.add_argument("--keep-alive", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--qdrouterd-1x", default=os.environ.get("QDROUTERD_1X"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    kinds = ["ours"] + (["1x"] if args.qdrouterd_1x else [])
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        for repeat in range(args.repeat):
            for kind in kinds:
                proc, port, log = start_router(kind, args.qdrouterd_1x, args.workers, Path(tmp))
                try:
                    summary = hammer(port, paths, args.clients, args.seconds, args.max_requests,
                                     args.request_timeout, args.keep_alive)
                finally:
                    stop_router(proc, log)
                line = {"schema": "bench-http-front/1", "router": kind, "repeat": repeat,
                        "clients": args.clients, "paths": paths, "keep_alive": args.keep_alive,
                        "workers": args.workers, **summary}
                lines.append(line)
                print(f"{kind:5} repeat {repeat}: {summary['requests']} answers "
                      f"{summary['by_status']} {summary['per_second']}/s "
                      f"p50 {summary['p50_ms']} ms p99 {summary['p99_ms']} ms "
                      f"max {summary['max_ms']} ms", file=sys.stderr)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
