"""The front door against a launched router: hostile bytes close a connection, never a process.

Loopback only, every wait bounded, every router stopped by the fixtures. The bounded fuzz sends
FUZZ_FRONT_DOOR_CASES (default 300, ten connections at a time) mutated client streams from
benchmarks/fuzz_front_door.py; run that script for 1000+ cases.
"""
from __future__ import annotations

import importlib.util
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_front_door.py"
_spec = importlib.util.spec_from_file_location("bench_fuzz_front_door", _PATH)
fuzz = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_fuzz_front_door", fuzz)
_spec.loader.exec_module(fuzz)

CASES = int(os.environ.get("FUZZ_FRONT_DOOR_CASES", "300"))
CHECK_EVERY = 50
PARALLEL = 10


def _no_deaths(router) -> None:
    out = router.proc.output()
    assert router.proc.proc.poll() is None, out
    assert "(critical)" not in out, out  # a dead child is logged critical (and restarted)
    assert "internal error" not in out, out


def test_the_31_bytes_of_issue_9_leave_the_router_up(router):
    data = fuzz.KNOWN_BAD["sasl-response-first"]
    assert len(data) == 31
    outcome = fuzz.send_case(router.port, data, timeout=5.0)
    assert outcome in ("eof", "reset", "amqp:not-allowed"), outcome
    router.proc.wait_for_line("sasl-response before sasl-init", timeout=5)
    _no_deaths(router)
    assert fuzz.client_works(router.url)
    _no_deaths(router)


def test_the_31_bytes_byte_by_byte_then_a_client(router):
    data = fuzz.KNOWN_BAD["sasl-response-first"]
    fuzz.send_case(router.port, data, timeout=5.0, chunk=1)
    assert fuzz.client_works(router.url)
    _no_deaths(router)


def _with_bad_string(units, marker: bytes) -> bytes:
    """The captured stream with the str8/sym8 value ``marker`` made invalid UTF-8."""
    data = b"".join(units)
    assert marker in data
    return data.replace(marker, b"\xff" + marker[1:-1] + b"\xfe")


def test_invalid_utf8_container_id_refuses_the_connection(router):
    data = _with_bad_string(fuzz.capture_streams()["anonymous"], b"fuzz-client")
    outcome = fuzz.send_case(router.port, data, timeout=5.0, paced=True)
    # the close frame says amqp:invalid-field, unless the socket was reset before it was read
    assert outcome in ("amqp:invalid-field", "reset"), outcome
    router.proc.wait_for_line("container-id not valid UTF-8", timeout=5)
    assert fuzz.client_works(router.url)
    _no_deaths(router)


def test_invalid_utf8_link_name_and_address_refuse_the_link(router):
    units = fuzz.capture_streams()["anonymous"]
    for marker, log in ((b"fuzz-snd", "link name not valid UTF-8"),
                        (b"fuzz/q", "address not valid UTF-8")):
        outcome = fuzz.send_case(router.port, _with_bad_string(units, marker), timeout=5.0,
                                 paced=True)
        assert outcome != "open"
        router.proc.wait_for_line(log, timeout=5)
    assert fuzz.client_works(router.url)
    _no_deaths(router)


def test_bounded_fuzz_of_the_front_door(router_factory):
    """CASES hostile streams at a two-worker router, PARALLEL connections at a time (a case
    the router leaves open waits its whole time-out); a normal client checked after every
    CHECK_EVERY cases; no process may die and no handler may fail."""
    router = router_factory(workers=2)
    streams = fuzz.capture_streams()
    rnd = random.Random(9)
    cases = []
    for i in range(CASES):
        kind, data = fuzz.hostile_stream(rnd, streams)
        cases.append((i, kind, data, rnd.choice((None, 1, 64)), rnd.random() < 0.7))

    def send(case) -> None:
        i, kind, data, chunk, paced = case
        try:
            fuzz.send_case(router.port, data, timeout=1.0, chunk=chunk, paced=paced)
        except OSError as exc:  # the router must always accept
            raise AssertionError(f"case {i} ({kind}): {exc}\n{router.proc.output()}")

    with ThreadPoolExecutor(PARALLEL) as pool:
        for start in range(0, CASES, CHECK_EVERY):
            batch = cases[start:start + CHECK_EVERY]
            list(pool.map(send, batch))
            sent = ", ".join(f"{i} ({kind})" for i, kind, *_ in batch)
            assert router.proc.proc.poll() is None, f"after cases {sent}\n{router.proc.output()}"
            assert fuzz.client_works(router.url), f"after cases {sent}\n{router.proc.output()}"
            _no_deaths(router)
    assert fuzz.client_works(router.url)
    _no_deaths(router)
