"""procutil.SignalWake: a SIGTERM ends a child's poll loop at once, not when its poll times out."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

# a process shaped like the router's children: a flag set by the SIGTERM handler, a loop around
# a zmq poll with a long timeout (30 s), the wake socket registered last
CHILD = textwrap.dedent("""
    import signal, sys, time, zmq
    from common.procutil import SignalWake
    running = True
    def stop(*_):
        global running
        running = False
    signal.signal(signal.SIGTERM, stop)
    ctx = zmq.Context()
    idle = ctx.socket(zmq.PULL)
    idle.bind("inproc://idle")
    poller = zmq.Poller()
    poller.register(idle, zmq.POLLIN)
    wake = SignalWake() if sys.argv[1] == "wake" else None
    if wake:
        poller.register(wake.sock, zmq.POLLIN)
    print("polling", flush=True)
    while running:
        ready = poller.poll(30000)
        if wake and ready and ready[-1][0] is wake.sock:
            wake.drain()
    print("stopped", flush=True)
    if wake:
        wake.close()
    idle.close(0)
    ctx.term()
""")


def _stop_after_poll(mode: str) -> tuple[float, str]:
    """Start the child, SIGTERM it while it polls; (seconds until it exited, its output)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": SRC})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "the child did not start polling"
        assert proc.stdout.readline().strip() == "polling"
        time.sleep(0.2)  # inside zmq_poll
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            return float("inf"), ""
        return time.monotonic() - start, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()


def test_sigterm_wakes_the_poll_loop():
    took, out = _stop_after_poll("wake")
    assert out.strip() == "stopped"
    assert took < 10  # the poll's own timeout is 30 s: woken by the signal, not by the timeout

