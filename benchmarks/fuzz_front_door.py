"""Hostile frame streams against a launched router: no byte sequence may take a process down.

A script, not a test: ``python benchmarks/fuzz_front_door.py [--cases N] [--seed S]
[--workers W] [--check-every K] [--out FILE]``.

Starts ``qdrouterd`` (loopback, a free port, SASL ANONYMOUS, ``--workers`` workers), then sends
``--cases`` (default 1200) hostile byte streams, one connection each: the frames a real proton
client sends (SASL ANONYMOUS or PLAIN, or no SASL; open, begin, attach, flow, transfer,
disposition, detach, end, close; captured in memory from the proton client engine), mutated
(flipped bytes, dropped/duplicated/swapped frames, truncation, text fields made invalid UTF-8,
numbers made huge, constructors of the wrong type, bad frame headers, SASL frames out of
order, garbled message sections), plus fixed known-bad streams (e.g. an unsolicited
sasl-response right after the SASL header). Every ``--check-every`` cases a normal client sends
and receives a message through the router. Prints cases, process deaths (must be 0; checked by
the supervisor's exit and the children it logs), how connections ended (the AMQP condition
the router closed with, read from the last frames it sent, or "eof"), client checks passed,
and the time taken; one JSON line to stdout or ``--out``.

The stream generator (``capture_streams``, ``hostile_stream``, ``KNOWN_BAD``) is also used by
``tests/system/test_fuzz_front_door.py`` and ``tests/unit/test_fuzz_engine.py``.
Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import proton
from proton import Data, Message

ROOT = Path(__file__).resolve().parent.parent
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


# --- frames -----------------------------------------------------------------------------------
def split_units(stream: bytes) -> List[bytes]:
    """A client's byte stream as units: protocol headers and whole frames (a torn tail kept)."""
    units, pos = [], 0
    while pos < len(stream):
        if stream[pos:pos + 4] == b"AMQP":
            units.append(stream[pos:pos + 8])
            pos += 8
            continue
        if len(stream) - pos < 8:
            units.append(stream[pos:])
            break
        size = int.from_bytes(stream[pos:pos + 4], "big")
        size = max(8, min(size, len(stream) - pos))
        units.append(stream[pos:pos + size])
        pos += size
    return units


def frame(body: bytes, ftype: int = 0, channel: int = 0, doff: int = 2) -> bytes:
    pad = b"\0" * max(0, doff * 4 - 8)
    return struct.pack(">IBBH", 8 + len(pad) + len(body), doff, ftype, channel) + pad + body


def performative(code: int, fields: List[Callable[[Data], None]]) -> bytes:
    d = Data()
    d.put_described()
    d.enter()
    d.put_ulong(code)
    d.put_list()
    d.enter()
    for put in fields:
        put(d)
    d.exit()
    d.exit()
    return d.encode()


def sasl_frame(code: int, fields: List[Callable[[Data], None]]) -> bytes:
    return frame(performative(code, fields), ftype=1)


PLAIN_INIT = sasl_frame(0x41, [lambda d: d.put_symbol("PLAIN"),
                               lambda d: d.put_binary(b"\0guest\0guest")])
# streams that crashed or stopped a worker before the front door was guarded
KNOWN_BAD: Dict[str, bytes] = {
    # SIGSEGV in proton 0.40: sasl-response before sasl-init (the 31 bytes of issue #9)
    "sasl-response-first": SASL_HEADER + sasl_frame(0x43, [lambda d: d.put_binary(b"x")]),
    "sasl-response-empty": SASL_HEADER + sasl_frame(0x43, []),
    "amqp-frame-then-response": SASL_HEADER + frame(performative(0x10, [
        lambda d: d.put_string("c")])) + sasl_frame(0x43, [lambda d: d.put_binary(b"x")]),
    "bad-init-then-response": SASL_HEADER + sasl_frame(0x41, [lambda d: d.put_ubyte(7)])
    + AMQP_HEADER + sasl_frame(0x43, [lambda d: d.put_binary(b"x")]),
    "sasl-outcome-from-client": SASL_HEADER + sasl_frame(0x44, [lambda d: d.put_ubyte(0)]),
    "sasl-mechanisms-from-client": SASL_HEADER + sasl_frame(0x40, [lambda d: d.put_symbol("X")]),
    "bad-mechanism-utf8": SASL_HEADER + frame(
        performative(0x41, [lambda d: d.put_symbol("ANONYMOUS")]).replace(
            b"ANONYMOUS", b"\xffNONYMOU\xfe"), ftype=1),
    "frame-size-zero": SASL_HEADER + b"\0\0\0\0\x02\x01\0\0",
    "frame-size-huge": SASL_HEADER + b"\x7f\xff\xff\xff\x02\x01\0\0",
    "doff-zero": SASL_HEADER + b"\0\0\0\x10\x00\x01\0\0" + b"\0" * 8,
    "garbage-header": b"GET / HTTP/1.1\r\n\r\n",
    # SIGSEGV in proton 0.40 when it arrives in one piece: a sasl-init with a mechanism the
    # listener does not offer (authentication fails), then the AMQP header, AMQP frames and a
    # SASL frame (found by this script, seed 7, case ~950)
    "failed-init-then-frames": SASL_HEADER + sasl_frame(0x41, [
        lambda d: d.put_symbol("PLAIN"), lambda d: d.put_binary(b"\0guest\0guest")])
    + AMQP_HEADER + frame(performative(0x10, [lambda d: d.put_string("c")]))
    + sasl_frame(0x43, [lambda d: d.put_binary(b"x")]),
}


def _client_stream(mechs: Optional[str], body_size: int = 40) -> bytes:
    """Every byte a proton client engine sends for a short, complete session against the
    in-memory router (tests/memrouter.py): open, begin, attach a receiver and a sender, flow,
    an unsettled and a settled transfer, disposition, detach, end, close."""
    sys.path.insert(0, str(ROOT / "tests"))
    import memrouter  # noqa: E402 - the in-memory harness (engine + core)

    router = memrouter.MemRouter("Router.Capture")
    sent = bytearray()
    transport = proton.Transport()
    if mechs:
        transport.sasl().allowed_mechs(mechs)
    conn = proton.Connection()
    conn.container = "fuzz-client"
    conn.hostname = "localhost"
    transport.bind(conn)
    server = router.engine.new_connection(dict(memrouter.LISTENER), "capture", "in")

    def pump() -> None:
        for _ in range(50):
            moved = False
            n = transport.pending()
            if n > 0:
                out = transport.peek(n)
                transport.pop(len(out))
                sent.extend(out)
                server.push(out, len(out))
                moved = True
            buf = bytearray(65536)
            m = server.output(buf)
            if m > 0:
                server.consumed(m)
                transport.push(bytes(buf[:m]))
                moved = True
            if not router.exchange() and not moved:
                return

    conn.open()
    ssn = conn.session()
    ssn.open()
    rcv = ssn.receiver("fuzz-rcv")
    rcv.source.address = "fuzz/q"
    rcv.open()
    rcv.flow(10)
    snd = ssn.sender("fuzz-snd")
    snd.target.address = "fuzz/q"
    snd.open()
    pump()
    for i, settled in ((1, False), (2, True)):
        dlv = snd.delivery(b"t%d" % i)
        msg = Message(body="x" * body_size, address="fuzz/q", priority=5,
                      properties={"k": "v"}, annotations={"x-opt-qd.to": "fuzz/other"})
        snd.send(msg.encode())
        snd.advance()
        if settled:
            dlv.settle()
    pump()
    while rcv.current is not None:
        d = rcv.current
        rcv.recv(d.pending)
        rcv.advance()
        d.update(proton.Delivery.ACCEPTED)
        d.settle()
    pump()
    snd.close()
    rcv.detach()
    ssn.close()
    conn.close()
    pump()
    return bytes(sent)


def capture_streams() -> Dict[str, List[bytes]]:
    """The captured client streams, as units (headers and frames), by name."""
    anonymous = split_units(_client_stream("ANONYMOUS"))
    streams = {"anonymous": anonymous, "no-sasl": split_units(_client_stream(None))}
    # PLAIN: the same stream with a PLAIN sasl-init (the router offers only ANONYMOUS here,
    # so the exchange is rebuilt, not captured)
    plain = [PLAIN_INIT if len(u) > 8 and u[5] == 1 and b"ANONYMOUS" in u else u
             for u in anonymous]
    streams["plain"] = plain
    return streams


# --- mutations ----------------------------------------------------------------------------------
BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xfe\xff")


def _bad_text(rnd: random.Random, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(BAD_UTF8) if rnd.random() < 0.6 else bytes([rnd.randrange(0x20, 0x7f)])
    out = out[:n]
    if n and all(b < 0x80 for b in out):
        out[rnd.randrange(n)] = 0xff
    return bytes(out)


def _body_offset(u: bytes) -> int:
    return max(8, u[4] * 4) if len(u) >= 8 else len(u)


def _m_flip(rnd, units):
    i = rnd.randrange(len(units))
    u = bytearray(units[i])
    for _ in range(rnd.randint(1, 4)):
        if u:
            u[rnd.randrange(len(u))] = rnd.randrange(256)
    units[i] = bytes(u)


def _m_drop(rnd, units):
    if len(units) > 1:
        del units[rnd.randrange(1, len(units))]


def _m_dup(rnd, units):
    i = rnd.randrange(len(units))
    units.insert(rnd.randrange(1, len(units) + 1), units[i])


def _m_swap(rnd, units):
    if len(units) > 2:
        i, j = rnd.randrange(1, len(units)), rnd.randrange(1, len(units))
        units[i], units[j] = units[j], units[i]


def _m_truncate_frame(rnd, units):
    i = rnd.randrange(len(units))
    units[i] = units[i][:rnd.randrange(len(units[i]) + 1)]


def _string_spans(u: bytes) -> List[tuple]:
    """(start, end) of the data of every str8/sym8 constructor found in a frame body."""
    spans = []
    pos = _body_offset(u)
    while pos + 1 < len(u):
        if u[pos] in (0xa1, 0xa3):
            n = u[pos + 1]
            if 0 < n and pos + 2 + n <= len(u):
                spans.append((pos + 2, pos + 2 + n))
        pos += 1
    return spans


def _m_bad_utf8(rnd, units):
    """A string/symbol in some frame (container-id, link name, address, error description,
    mechanism...) made invalid UTF-8, lengths unchanged so the frame still decodes."""
    candidates = [i for i, u in enumerate(units) if _string_spans(u)]
    if not candidates:
        return
    i = rnd.choice(candidates)
    u = bytearray(units[i])
    spans = _string_spans(bytes(u))
    for start, end in rnd.sample(spans, k=min(len(spans), rnd.randint(1, 3))):
        u[start:end] = _bad_text(rnd, end - start)
    units[i] = bytes(u)


_HUGE = {0x52: b"\xff", 0x70: b"\xff\xff\xff\xff", 0x80: b"\xff" * 8, 0x60: b"\xff\xff",
         0x50: b"\xff", 0x71: b"\x7f\xff\xff\xff", 0x81: b"\x80" + b"\0" * 7}


def _m_huge(rnd, units):
    """Numbers (handle, delivery-id, credit, window, max-frame, channel...) at their limits."""
    i = rnd.randrange(len(units))
    u = bytearray(units[i])
    positions = [p for p in range(_body_offset(bytes(u)), len(u)) if u[p] in _HUGE]
    for p in rnd.sample(positions, k=min(len(positions), rnd.randint(1, 3))):
        value = _HUGE.get(u[p])
        if value is not None and p + 1 + len(value) <= len(u):
            u[p + 1:p + 1 + len(value)] = value if rnd.random() < 0.7 else bytes(len(value))
    if len(u) >= 8 and rnd.random() < 0.3:
        u[6:8] = rnd.choice((b"\xff\xff", b"\x7f\xff", b"\x00\x01"))  # channel
    units[i] = bytes(u)


_SWAPS = {0xa1: (0xa0, 0xa3, 0x52), 0xa3: (0xa1, 0xa0), 0x70: (0x71, 0x72, 0xa0), 0x52: (0x50, 0x54, 0x56),
          0x40: (0x45, 0x41, 0x42), 0x45: (0x40, 0xc0), 0x41: (0x42, 0x40, 0x56), 0x43: (0x44, 0x40),
          0xc0: (0xc1, 0xe0, 0x40), 0xd0: (0xd1, 0xf0), 0x53: (0x50, 0x55), 0xe0: (0xc0,)}


def _m_wrong_type(rnd, units):
    i = rnd.randrange(len(units))
    u = bytearray(units[i])
    positions = [p for p in range(_body_offset(bytes(u)), len(u)) if u[p] in _SWAPS]
    for p in rnd.sample(positions, k=min(len(positions), rnd.randint(1, 2))):
        if u[p] in _SWAPS:
            u[p] = rnd.choice(_SWAPS[u[p]])
    units[i] = bytes(u)


def _m_frame_header(rnd, units):
    i = rnd.randrange(len(units))
    u = bytearray(units[i])
    if len(u) < 8 or u[:4] == b"AMQP":
        return
    k = rnd.randrange(4)
    if k == 0:
        u[0:4] = rnd.choice((0, 7, 8, len(u) - 1, len(u) + 1, 2 ** 31 - 1, 2 ** 32 - 1, 513,
                             0x10000)).to_bytes(4, "big")
    elif k == 1:
        u[4] = rnd.choice((0, 1, 3, 0xff))
    elif k == 2:
        u[5] = rnd.choice((0, 1, 2, 0xff))
    else:
        u[6:8] = os.urandom(2)
    units[i] = bytes(u)


def _m_inject(rnd, units):
    unit = rnd.choice([
        SASL_HEADER, AMQP_HEADER, b"AMQP\x02\x01\x00\x00", b"AMQP\x00\x00\x09\x01",
        sasl_frame(0x43, [lambda d: d.put_binary(b"r")]), sasl_frame(0x41, []),
        sasl_frame(0x41, [lambda d: d.put_symbol("ANONYMOUS")]), PLAIN_INIT,
        sasl_frame(0x44, [lambda d: d.put_ubyte(0)]), sasl_frame(0x42, [lambda d: d.put_binary(b"c")]),
        frame(b""), frame(b"", ftype=1), frame(os.urandom(rnd.randrange(1, 40))),
        frame(performative(rnd.choice((0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x99)),
                           [lambda d: d.put_null()] * rnd.randrange(4))),
        os.urandom(rnd.randrange(1, 64)),
    ])
    units.insert(rnd.randrange(len(units) + 1), unit)


def _m_message(rnd, units):
    """The message bytes of a transfer garbled (the scanner reads header, annotations, to)."""
    candidates = [i for i, u in enumerate(units) if len(u) > 12 and u[5] == 0 and u[8:11] == b"\x00\x53\x14"]
    if not candidates:
        return
    i = rnd.choice(candidates)
    u = bytearray(units[i])
    start = u.find(b"\x00\x53\x70")
    if start < 0:
        start = u.find(b"\x00\x53\x72")
    if start < 0:
        return
    for _ in range(rnd.randint(1, 6)):
        p = rnd.randrange(start, len(u))
        u[p] = rnd.choice((0x00, 0x53, 0x72, 0xa1, 0xb1, 0xc1, 0xd1, 0xff, rnd.randrange(256)))
    if rnd.random() < 0.3:
        s = u.find(b"x-opt-qd.to")
        if s >= 0:
            u[s + 13:s + 16] = b"\xff\xfe\xfd"
    units[i] = bytes(u)


MUTATIONS = [_m_flip, _m_drop, _m_dup, _m_swap, _m_truncate_frame, _m_bad_utf8, _m_bad_utf8,
             _m_huge, _m_wrong_type, _m_frame_header, _m_inject, _m_message, _m_message]


def mutate(rnd: random.Random, units: List[bytes], count: Optional[int] = None) -> bytes:
    units = list(units)
    for _ in range(count if count is not None else rnd.choice((1, 1, 1, 2, 2, 3))):
        rnd.choice(MUTATIONS)(rnd, units)
    return b"".join(units)


def hostile_stream(rnd: random.Random, streams: Dict[str, List[bytes]]) -> tuple:
    """(kind, bytes) of one hostile case."""
    if rnd.random() < 0.05:
        name = rnd.choice(sorted(KNOWN_BAD))
        return name, KNOWN_BAD[name]
    name = rnd.choice(sorted(streams))
    return name, mutate(rnd, streams[name])


# --- against a launched router ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conditions_in(data: bytes) -> List[str]:
    """The amqp:... condition names in the frames the router sent (close/detach/end)."""
    out = []
    pos = 0
    while True:
        pos = data.find(b"amqp:", pos)
        if pos < 0:
            return out
        end = pos
        while end < len(data) and 0x21 <= data[end] < 0x7f:
            end += 1
        out.append(data[pos:end].decode("ascii"))
        pos = end


def send_case(port: int, data: bytes, timeout: float = 2.0, chunk: Optional[int] = None,
              paced: bool = False) -> str:
    """Send one hostile stream on a fresh connection; read what comes back until the router
    closes or ``timeout``; return the outcome: the last condition it sent, else "eof"/"open".

    ``paced``: frame by frame with a short pause, as a client waiting for answers would (a
    replay sent at once gets transfers in before the router's begin: a window violation)."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        try:
            if paced:
                for unit in split_units(data):
                    s.sendall(unit)
                    time.sleep(0.002)
            elif chunk:
                for i in range(0, len(data), chunk):
                    s.sendall(data[i:i + chunk])
            else:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        outcome = "open"
        while time.monotonic() < deadline:
            try:
                got = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                outcome = "reset"
                break
            if not got:
                outcome = "eof"
                break
            received += got
    conds = _conditions_in(bytes(received))
    return conds[-1] if conds else outcome


def client_works(url: str, timeout: float = 5.0) -> bool:
    """A normal client attaches, sends one message and receives it through the router."""
    from proton.utils import BlockingConnection
    try:
        conn = BlockingConnection(url, timeout=timeout)
    except Exception:  # noqa: BLE001
        return False
    try:
        address = f"fuzz-check/{os.getpid()}/{time.monotonic_ns()}"
        rcv = conn.create_receiver(address, credit=1)
        snd = conn.create_sender(address)
        dlv = snd.link.send(Message(body="still alive"))  # not snd.send: it awaits the outcome
        msg = rcv.receive(timeout=timeout)
        rcv.accept()
        conn.wait(lambda: dlv.settled, timeout=timeout)
        return msg.body == "still alive"
    except Exception:  # noqa: BLE001
        return False
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass


class LaunchedRouter:
    """``qdrouterd`` on loopback with its output collected; stop() always ends it."""

    def __init__(self, workers: int = 1, workdir: Optional[str] = None) -> None:
        self.port = _free_port()
        self.dir = workdir or tempfile.mkdtemp(prefix="fuzz-front-door-")
        conf = Path(self.dir) / "qdrouterd.conf"
        conf.write_text(textwrap.dedent(f"""\
            router {{
                mode: standalone
                id: Router.Fuzz
                workerThreads: {workers}
            }}
            listener {{
                host: 127.0.0.1
                port: {self.port}
                role: normal
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
                idleTimeoutSeconds: 2
            }}
            log {{
                module: DEFAULT
                enable: info+
            }}
            """))
        self.lines: List[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.main", "-c", str(conf)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = f"amqp://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_operational(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any("Operational" in line for line in list(self.lines)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("router did not start:\n" + "\n".join(self.lines))

    def deaths(self) -> List[str]:
        """Log lines telling of a process that died (the supervisor logs a critical line for
        each, and restarts it) and the supervisor's own exit."""
        bad = [line for line in list(self.lines) if "(critical)" in line]
        if self.proc.poll() is not None:
            bad.append(f"supervisor exited with {self.proc.returncode}")
        return bad

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode


def run(cases: int, seed: int, workers: int = 1, check_every: int = 100,
        timeout: float = 1.0, progress: bool = False) -> dict:
    rnd = random.Random(seed)
    streams = capture_streams()
    router = LaunchedRouter(workers)
    outcomes: collections.Counter = collections.Counter()
    checks = failed_checks = 0
    died_at = None
    seen = 0
    t0 = time.monotonic()
    try:
        router.wait_operational()
        for i in range(cases):
            kind, data = hostile_stream(rnd, streams)
            chunk = rnd.choice((None, 1, 7, 64))
            try:
                outcome = send_case(router.port, data, timeout=timeout, chunk=chunk,
                                    paced=rnd.random() < 0.7)
            except OSError as exc:
                outcome = f"connect failed: {exc.__class__.__name__}"
            outcomes[outcome] += 1
            if router.proc.poll() is not None:
                died_at = died_at or (i, kind, data.hex())
                break
            new_lines = router.lines[seen:]
            seen += len(new_lines)
            if died_at is None and any("(critical)" in line for line in new_lines):
                died_at = (i, kind, data.hex())  # a child died (the supervisor restarts it)
            if (i + 1) % check_every == 0 or i == cases - 1:
                checks += 1
                if not client_works(router.url):
                    failed_checks += 1
                if progress:
                    print(f"  {i + 1} cases, {dict(outcomes)}", file=sys.stderr)
        elapsed = time.monotonic() - t0
        deaths = router.deaths()
    finally:
        code = router.stop()
    return {"bench": "fuzz_front_door", "cases": sum(outcomes.values()), "seed": seed,
            "workers": workers, "process_deaths": len(deaths), "death_lines": deaths[:10],
            "died_at": died_at, "outcomes": dict(outcomes.most_common()),
            "client_checks": checks, "client_checks_failed": failed_checks,
            "seconds": round(elapsed, 2), "exit_code": code,
            "internal_errors": sum("internal error" in line for line in router.lines),
            "error_lines": [line for line in router.lines if "(error)" in line][:5],
            "crash_stacks": crash_stacks(router.lines)}


def crash_stacks(lines: List[str]) -> List[List[str]]:
    """The Python stacks a crashed child printed (faulthandler, common.procutil)."""
    stacks = []
    for i, line in enumerate(lines):
        if "Fatal Python error" in line:
            stack = [line]
            for more in lines[i + 1:i + 60]:
                if "(critical)" in more:
                    break
                if more.strip():
                    stack.append(more)
            stacks.append(stack)
    return stacks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--check-every", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=1.0, help="per-case read timeout (s)")
    ap.add_argument("--out", help="append the JSON line to this file")
    args = ap.parse_args()
    result = run(args.cases, args.seed, args.workers, args.check_every, args.timeout,
                 progress=True)
    print(f"cases: {result['cases']}  process deaths: {result['process_deaths']}  "
          f"client checks: {result['client_checks'] - result['client_checks_failed']}/"
          f"{result['client_checks']} ok  time: {result['seconds']} s  "
          f"router exit code: {result['exit_code']}")
    print("connections ended with:")
    for outcome, n in result["outcomes"].items():
        print(f"  {n:6d}  {outcome}")
    if result["died_at"]:
        print(f"router died at case {result['died_at'][0]} ({result['died_at'][1]})")
    line = json.dumps(result)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    else:
        print(line)
    ok = result["process_deaths"] == 0 and result["client_checks_failed"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
