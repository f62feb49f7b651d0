"""The front door under hostile and heavy traffic: the http listener (HTTP/1.1, WebSocket) and
the AMQP handshake, on real routers on loopback (ours, and Qpid Dispatch 1.x where
``QDROUTERD_1X`` is set and the behaviour is the same).

Every router started here is stopped; every wait is bounded; the assertions count answers and
closes, never times.
"""
from __future__ import annotations

import base64
import importlib.util
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_http_front.py"
_spec = importlib.util.spec_from_file_location("bench_http_front", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_http_front", bench)
_spec.loader.exec_module(bench)

TIMEOUT = 15.0
WS_KEY = base64.b64encode(b"0123456789abcdef").decode()


def http_listener(port: int, more: str = "") -> str:
    return (f"\nlistener {{\n    host: 127.0.0.1\n    port: {port}\n    http: yes\n"
            f"    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n{more}}}\n")


@pytest.fixture
def web(router_of_kind):
    """``make(kind, more="")``: a router (ours or "1.x") with an http listener; returns
    (router, http_port)."""

    def make(kind: str = "ours", more: str = "", **kwargs):
        port = free_port()
        router = router_of_kind(kind, http_listener(port, more), **kwargs)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:  # 1.x binds its http listener after "Operational"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        return router, port

    return make


def _no_deaths(router) -> None:
    out = router.proc.output()
    assert router.proc.proc.poll() is None, out
    assert "(critical)" not in out and "internal error" not in out, out


# --- 1. /healthz and /metrics under many concurrent clients --------------------------------------
def test_healthz_and_metrics_answer_500_concurrent_clients(web):
    """Every request is answered 200 by a healthy router, whatever the number of clients: the
    worker asks the agent once per path at a time and shares the answer (the agent's
    connection cap never decides)."""
    router, port = web(workers=2)
    summary = bench.hammer(port, ("/healthz", "/metrics"), clients=500, seconds=60.0,
                           max_requests=1500, timeout=30.0)
    assert summary["by_status"] == {"200": 1500}, summary
    _no_deaths(router)


def test_healthz_503_for_every_client_while_the_core_is_stopped(web):
    import psutil_free as procs
    router, port = web()
    core = [pid for pid in procs.children_of(router.proc.proc.pid)
            if "router_core.coreproc" in procs.cmdline(pid)][0]
    os.kill(core, signal.SIGSTOP)
    try:
        summary = bench.hammer(port, ("/healthz",), clients=50, seconds=60.0, max_requests=50,
                               timeout=30.0)
    finally:
        os.kill(core, signal.SIGCONT)
    assert summary["by_status"] == {"503": 50}, summary
    summary = bench.hammer(port, ("/healthz",), clients=50, seconds=60.0, max_requests=50,
                           timeout=30.0)
    assert summary["by_status"] == {"200": 50}, summary
