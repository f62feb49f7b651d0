"""Hostile HTTP and WebSocket streams against a launched router's http listener: no process may
die, every connection must end within a bound.

A script, not a test: ``python benchmarks/fuzz_http_front.py [--cases N] [--seed S]
[--parallel P] [--bound SECONDS] [--out FILE]``.

Starts ``qdrouterd`` (loopback, a free port, an ``http: yes`` listener with
``initialHandshakeTimeoutSeconds: 3``, two workers), then sends ``--cases`` (default 600) byte
streams, one connection each, ``--parallel`` at a time: requests a client sends (GET of
/healthz, /metrics, a file, a WebSocket upgrade followed by frames carrying AMQP bytes), mutated
(flipped and inserted bytes, truncation, repeated or dropped header lines, huge numbers in
Content-Length, chunk sizes and frame lengths, control characters and invalid UTF-8 in the
target, text/ping/close frames, unmasked frames, bytes after a close...). A case either ends
its sending side after its bytes (the router must answer what it can and close) or holds it
open (the router must close it: request deadline, handshake time-out, a protocol error; or
answer it and keep the connection alive, ``kept-alive``, which only the idle time-out ends);
either way the connection must end, or be answered, within ``--bound`` seconds. Prints cases,
how connections ended (``eof``, ``reset``, ``kept-alive``, ``open`` = still open at the bound
with no answer: must be 0), the first status line
or WebSocket close code seen, process deaths (must be 0) and the time taken; one
``fuzz-http-front/1`` JSON line to stdout or ``--out``.

``hostile_case`` and ``run_case`` are also used by ``tests/system/test_fuzz_http_front.py``.
Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
KEY = base64.b64encode(b"fuzz-key-16bytes").decode()
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- streams ----------------------------------------------------------------------------------
def ws_frame(payload: bytes, opcode: int = 2, fin: bool = True, masked: bool = True,
             declared: Optional[int] = None) -> bytes:
    length = len(payload) if declared is None else declared
    head = bytes([(0x80 if fin else 0) | opcode])
    bit = 0x80 if masked else 0
    if length < 126:
        head += bytes([bit | length])
    elif length < 1 << 16:
        head += bytes([bit | 126]) + length.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + (length % (1 << 64)).to_bytes(8, "big")
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def request_lines(rng: random.Random) -> list:
    path = rng.choice(["/healthz", "/metrics", "/", "/index.html", "/nothing", "/a/../b"])
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
    if rng.random() < 0.5:
        lines += ["Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {KEY}",
                  "Sec-WebSocket-Version: 13",
                  f"Sec-WebSocket-Protocol: {rng.choice(['amqp', 'binary', 'amqp, mqtt'])}"]
    return lines


def _mutate_lines(rng: random.Random, lines: list) -> list:
    kind = rng.randrange(10)
    lines = list(lines)
    if kind == 0 and len(lines) > 1:
        del lines[rng.randrange(1, len(lines))]
    elif kind == 1:
        lines.insert(rng.randrange(1, len(lines) + 1), rng.choice(lines[1:] or lines))
    elif kind == 2:
        lines.append(f"Content-Length: {rng.choice([0, 5, 1 << 40, 1 << 64, -1, '1,2', 'x'])}")
    elif kind == 3:
        lines.append("Transfer-Encoding: " + rng.choice(["chunked", "gzip, chunked", "x"]))
    elif kind == 4:
        lines[0] = rng.choice(["GET index.html HTTP/1.1", "GET * HTTP/1.1", "POST / HTTP/1.1",
                               "GET /\xff\xfe HTTP/1.1", "GET /%00%2e%2e/ HTTP/1.1",
                               "GET / HTTP/2.0", "GET / HTTP/1.1 extra", "get / http/1.1",
                               "GET http://evil/healthz HTTP/1.1", "GET / HTTP/0.9"])
    elif kind == 5:
        lines.append("X-Long: " + "a" * rng.choice([100, 20000, 70000]))
    elif kind == 6:
        lines.append(rng.choice(["Bad Header: x", "X-Ctl: a\x01b", ": empty", "X-Fold:\r\n x",
                                 "Sec-WebSocket-Key: " + rng.choice(["", "abc", KEY + "=="]),
                                 "Sec-WebSocket-Version: " + rng.choice(["8", "", "13, 8"])]))
    elif kind == 7:
        lines = [line.replace("websocket", rng.choice(["WebSocket", "ws", ""])) for line in lines]
    return lines


def _frames_after_upgrade(rng: random.Random) -> bytes:
    out = b""
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(9)
        if kind == 0:
            out += ws_frame(SASL_HEADER)
        elif kind == 1:
            out += ws_frame(AMQP_HEADER + os.urandom(rng.randrange(0, 40)))
        elif kind == 2:
            out += ws_frame(b"AMQP", declared=rng.choice([1 << 62, 1 << 40, 70000, 200]))
        elif kind == 3:
            out += ws_frame(b"text!", opcode=1)
        elif kind == 4:
            out += ws_frame(b"ping", opcode=9) + ws_frame(b"x" * 200, opcode=9)
        elif kind == 5:
            out += ws_frame(b"\x03\xe8bye", opcode=8) + ws_frame(SASL_HEADER)
        elif kind == 6:
            out += ws_frame(SASL_HEADER, masked=False)
        elif kind == 7:
            out += ws_frame(b"AM", fin=False) + ws_frame(b"QP", opcode=rng.choice([0, 2]))
        else:
            out += os.urandom(rng.randrange(1, 30))
    return out


def hostile_case(rng: random.Random) -> tuple:
    """``(bytes, hold)``: a hostile stream and whether the client keeps its side open after it
    (then only the router can end the connection)."""
    lines = request_lines(rng)
    for _ in range(rng.randrange(0, 3)):
        lines = _mutate_lines(rng, lines)
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    data = head
    if "Upgrade: websocket" in head.decode("latin-1"):
        data += _frames_after_upgrade(rng)
    elif rng.random() < 0.3:  # pipelined requests behind it
        data += head * rng.randrange(1, 50)
    choice = rng.randrange(6)
    if choice == 0 and len(data) > 2:
        data = data[:rng.randrange(1, len(data))]  # truncated
    elif choice == 1:
        buf = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        data = bytes(buf)
    elif choice == 2:
        data = os.urandom(rng.randrange(1, 200))
    return data, rng.random() < 0.5


def run_case(port: int, data: bytes, hold: bool, bound: float) -> tuple:
    """Send one case; ``(ending, first status line or close code)``, ending "eof", "reset",
    "refused" or "open" (still open at the bound)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=bound)
    except OSError:
        return "refused", ""
    with sock:
        try:
            sock.sendall(data)
            if not hold:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            return "reset", ""
        got = b""
        deadline = time.monotonic() + bound
        sock.settimeout(0.5)
        how = "open"
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                how = "reset"
                break
            if not chunk:
                how = "eof"
                break
            if len(got) < 4096:
                got += chunk[:4096]
        return how, _first_answer(got)


def server_frames(data: bytes):
    """``(opcode, payload)`` of each WebSocket frame a server sent (unmasked) in ``data``; the
    last payload may be cut short where ``data`` ends."""
    pos = 0
    while pos + 2 <= len(data):
        opcode, length = data[pos] & 0x0F, data[pos + 1] & 0x7F
        pos += 2
        if length == 126:
            length, pos = int.from_bytes(data[pos:pos + 2], "big"), pos + 2
        elif length == 127:
            length, pos = int.from_bytes(data[pos:pos + 8], "big"), pos + 8
        yield opcode, data[pos:pos + length]
        pos += length


def _first_answer(got: bytes) -> str:
    if got.startswith(b"HTTP/1.1 101"):
        for opcode, payload in server_frames(got.split(b"\r\n\r\n", 1)[-1]):
            if opcode == 8:
                return f"ws-close {int.from_bytes(payload[:2], 'big')}"
        return "101"
    return got.split(b"\r\n", 1)[0][:20].decode("latin-1") if got else ""


def run_cases(port: int, count: int, seed: int, parallel: int, bound: float) -> dict:
    rng = random.Random(seed)
    cases = [hostile_case(rng) for _ in range(count)]
    endings: collections.Counter = collections.Counter()
    answers: collections.Counter = collections.Counter()
    still_open = []
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(lambda case: run_case(port, case[0], case[1], bound), cases))
    for (data, hold), (how, answer) in zip(cases, results):
        endings[how] += 1
        answers[answer.split(" ", 2)[1] if answer.startswith("HTTP/") and " " in answer
                else answer or "-"] += 1
        if how == "open" and answer.startswith("HTTP/"):
            endings["open"] -= 1  # answered and kept alive: its idle time-out (30 s) ends it
            endings["kept-alive"] += 1
        elif how == "open":
            still_open.append((data[:200], hold))
    return {"cases": count, "endings": {k: v for k, v in endings.items() if v}, "answers": dict(answers),
            "still_open": still_open}


# --- the router -------------------------------------------------------------------------------
def start_router(tmp: Path, workers: int = 2) -> tuple:
    port = free_port()
    conf = tmp / "fuzz-http.conf"
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Fuzz.Http
            workerThreads: {workers}
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            http: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            initialHandshakeTimeoutSeconds: 3
        }}
        """))
    log = open(tmp / "fuzz-http.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "Operational" in (tmp / "fuzz-http.log").read_text():
            return proc, port, log
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop_router(proc, log)
    raise RuntimeError("the router did not start: " + (tmp / "fuzz-http.log").read_text())


def stop_router(proc: subprocess.Popen, log) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    log.close()


def deaths(log_text: str) -> int:
    """Children logged as dead (the supervisor logs each at critical) and internal errors."""
    return sum(1 for line in log_text.splitlines()
               if "(critical)" in line or "internal error" in line or "Traceback" in line)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=40)
    ap.add_argument("--bound", type=float, default=20.0)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fuzz-http-") as tmp:
        proc, port, log = start_router(Path(tmp))
        start = time.monotonic()
        try:
            result = run_cases(port, args.cases, args.seed, args.parallel, args.bound)
            alive = proc.poll() is None
        finally:
            stop_router(proc, log)
        text = (Path(tmp) / "fuzz-http.log").read_text()
    line = {"schema": "fuzz-http-front/1", "seed": args.seed, "cases": result["cases"],
            "endings": result["endings"], "answers": result["answers"],
            "still_open": len(result["still_open"]), "router_alive": alive,
            "deaths": deaths(text), "seconds": round(time.monotonic() - start, 1)}
    print(json.dumps(line), file=open(args.out, "a") if args.out else sys.stdout)
    for data, hold in result["still_open"][:5]:
        print(f"still open (hold={hold}): {data!r}", file=sys.stderr)
    return 0 if alive and not line["deaths"] and not result["still_open"] else 1


if __name__ == "__main__":
    sys.exit(main())
