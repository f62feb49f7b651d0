"""Supervision and the front door's sockets, against launched routers (kill -9 of real children).

* one router per port: a second router, or any program, on a used port stops the start (exit 1,
  1.x's ``SERVER (critical) Listener error on HOST:PORT: Address already in use``);
* a dead worker is restarted within 1 s while the listener keeps accepting; what was in flight
  through it ends RELEASED/MODIFIED at its senders (never silently lost);
* a dead agent is restarted and management answers again; data connections are untouched;
* a dead core restarts the router's children from a clean slate, the port accepting within 2 s;
* a crash loop (a 6th death of one child within 60 s) makes the router exit 1;
* restarts are counted in /metrics.

Which worker holds a client's connection is read from /proc (the kernel's socket tables), so
the tests kill the right process instead of hoping the kernel spread connections evenly.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.utils import BlockingConnection

from clients import BulkSender, CountingReceiver, Loop
from conftest import RouterProcess, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_recovery import children, client_ports, holder_of_client  # noqa: E402

MODIFIED = Delivery.MODIFIED
RELEASED = Delivery.RELEASED


# --- processes and sockets as the kernel sees them (shared with benchmarks/bench_recovery.py) --
def wait_children(router: RouterProcess, names: set, old: dict, timeout: float = 10.0) -> dict:
    """Wait until every named child runs with a pid other than ``old``'s; return the children."""
    deadline = time.monotonic() + timeout
    while True:
        now = children(router.proc.pid)
        if all(name in now and now[name] != old.get(name) for name in names):
            return now
        assert time.monotonic() < deadline, f"{names} not restarted: {now} (was {old})"
        time.sleep(0.05)


def owner_of(client_port: int, router_port: int, pids: dict) -> str:
    """Which child (name) holds the router's end of the connection from ``client_port``."""
    name = holder_of_client(router_port, pids, client_port)
    assert name is not None, f"no child holds the connection from port {client_port}"
    return name


def connect_tracked(loop: Loop, url: str, handler, port: int, opened) -> int:
    """Connect a handler and return the client's local port (bounded)."""
    before = client_ports(port)
    loop.connect(url, handler)
    assert loop.run_until(opened, 10), "connection did not open"
    new = client_ports(port) - before
    assert len(new) == 1, new
    return new.pop()


def accepts_amqp(url: str, timeout: float) -> float:
    """Seconds until a new AMQP connection opens (raises after ``timeout``)."""
    start = time.monotonic()
    while True:
        try:
            conn = BlockingConnection(url, timeout=max(0.2, timeout - (time.monotonic() - start)))
            conn.close()
            return time.monotonic() - start
        except Exception:
            if time.monotonic() - start > timeout:
                raise
            time.sleep(0.02)


def round_trip(url: str, address: str, count: int = 5) -> list:
    """Send ``count`` messages through the router and return what a receiver got (bounded)."""
    loop = Loop()
    try:
        receiver = CountingReceiver(address)
        loop.connect(url, receiver)
        assert loop.run_until(lambda: receiver.opened, 10)
        sender = BulkSender(address, count, lambda i: Message(body=f"m{i}"))
        loop.connect(url, sender)
        loop.run_until(lambda: receiver.count == count and sender.settled == count, 10)
        return receiver.bodies
    finally:
        loop.close()


class HoldingReceiver(MessagingHandler):
    """Takes ``credit`` deliveries and never settles them (they stay in flight)."""

    def __init__(self, address: str, credit: int) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.credit = credit
        self.address = address
        self.received = 0
        self.opened = False
        self.closed = False

    def on_connection_opened(self, event):
        event.container.create_receiver(event.connection, self.address)

    def on_link_opened(self, event):
        self.opened = True
        self.link = event.receiver

    def grant(self) -> None:
        self.link.flow(self.credit)  # once: no more credit, the rest waits in the router

    def on_message(self, event):
        self.received += 1

    def on_transport_closed(self, event):
        self.closed = True

    def on_transport_error(self, event):
        self.closed = True


class TrackedSender(BulkSender):
    """A BulkSender that waits for :meth:`go` before it sends anything."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.opened = False
        self.closed = False
        self.holding = True

    def on_sendable(self, event):
        if not self.holding:
            super().on_sendable(event)

    def go(self) -> None:
        self.holding = False
        super().on_sendable(SimpleNamespace(sender=self.sender,
                                            connection=self.sender.connection))

    def on_link_opened(self, event):
        self.opened = True

    def on_transport_closed(self, event):
        self.closed = True

    def on_transport_error(self, event):
        self.closed = True


def conf(port: int, workers: int = 1, extra: str = "") -> str:
    return f"""router {{
    mode: standalone
    id: Sup.Test
    workerThreads: {workers}
}}
listener {{
    host: 127.0.0.1
    port: {port}
    saslMechanisms: ANONYMOUS
}}
{extra}"""


@pytest.fixture
def launch(tmp_path):
    started: list = []

    def make(text: str, wait: bool = True) -> RouterProcess:
        path = tmp_path / f"r{len(started)}.conf"
        path.write_text(text)
        proc = RouterProcess(path)
        started.append(proc)
        if wait:
            proc.wait_for_line("Operational")
        return proc

    yield make
    for proc in started:
        proc.stop()


def exit_code(proc: RouterProcess, timeout: float = 20.0) -> int:
    return proc.proc.wait(timeout)


# --- one router per port ----------------------------------------------------------------------
def test_second_router_on_the_same_port_exits_1(launch):
    port = free_port()
    first = launch(conf(port))
    second = launch(conf(port), wait=False)
    assert exit_code(second) == 1
    # the two lines Qpid Dispatch 1.19 logs for it
    second.wait_for_line(f"SERVER (error) Listener error on 127.0.0.1:{port}: Address already "
                         f"in use - listen on 127.0.0.1:{port} (proton:io)")
    second.wait_for_line(f"SERVER (critical) Shutting down, required listener failed "
                         f"127.0.0.1:{port}")
    assert "Operational" not in second.output()
    assert round_trip(f"amqp://127.0.0.1:{port}", "still.first") == [f"m{i}" for i in range(5)]
    assert first.proc.poll() is None


def test_port_held_by_another_program_stops_the_start(launch):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        proc = launch(conf(port, workers=2), wait=False)
        assert exit_code(proc) == 1
        proc.wait_for_line(f"Listener error on 127.0.0.1:{port}: Address already in use")
    # nothing of it is left running
    assert children(proc.proc.pid) == {}


def test_runtime_listener_on_a_used_port_is_refused_and_binds_nothing(launch):
    port = free_port()
    proc = launch(conf(port, workers=2))

    def create(listen_port: int, name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                               f"127.0.0.1:{port}", "create", "type=listener", "host=127.0.0.1",
                               f"port={listen_port}", f"name={name}"],
                              capture_output=True, text=True, timeout=30)

    out = create(port, "same")  # the router's own listener's port
    assert out.returncode != 0 and "BadRequestStatus" in out.stderr, out.stderr
    with socket.socket() as other:  # a port some other program listens on
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        out = create(other.getsockname()[1], "taken")
        assert out.returncode != 0
        assert "Address already in use" in out.stderr, out.stderr
    listed = subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                             f"127.0.0.1:{port}", "query", "--type", "listener", "name"],
                            capture_output=True, text=True, timeout=30)
    assert "taken" not in listed.stdout and "same" not in listed.stdout, listed.stdout
    assert proc.proc.poll() is None


# --- a dead worker ------------------------------------------------------------------------------
def test_killed_worker_restarts_and_its_deliveries_come_back_to_their_senders(launch):
    port = free_port()
    router = launch(conf(port, workers=2))
    url = f"amqp://127.0.0.1:{port}"
    pids = children(router.proc.pid)
    workers = {k: v for k, v in pids.items() if k.startswith("worker")}
    loop = Loop()
    try:
        # the sender first: with no consumer yet it gets no credit and sends nothing
        sender = TrackedSender("sup.q", 300, lambda i: Message(body=f"s{i}"))
        sport = connect_tracked(loop, url, sender, port, lambda: sender.opened)
        survivor = owner_of(sport, port, workers)
        # then a receiver on the other worker (workers race to accept: retry, bounded)
        for _ in range(30):
            receiver = HoldingReceiver("sup.q", credit=40)
            rport = connect_tracked(loop, url, receiver, port, lambda: receiver.opened)
            victim = owner_of(rport, port, workers)
            if victim != survivor:
                break
            loop.connections[-1].close()
            loop.run_until(lambda: receiver.closed, 5)
        else:
            pytest.fail("every receiver connection landed on the sender's worker")
        receiver.grant()
        sender.go()
        assert loop.run_until(lambda: receiver.received == 40 and sender.sent > 40, 10), \
            (receiver.received, sender.sent, sender.opened)

        os.kill(workers[victim], signal.SIGKILL)
        killed_at = time.monotonic()
        assert accepts_amqp(url, 1.0) <= 1.0  # the listener never stopped accepting
        # every delivery the sender sent ends with an outcome: none is lost silently
        assert loop.run_until(lambda: sender.settled == sender.sent, 10), \
            (sender.sent, sender.settled, sender.outcomes)
        assert not sender.closed
        assert set(sender.outcomes) <= {MODIFIED, RELEASED}, sender.outcomes
        assert sender.outcomes.get(MODIFIED, 0) >= 40  # the receiver had those, unsettled
        assert loop.run_until(lambda: receiver.closed, 5)
        now = wait_children(router, {victim}, pids, timeout=max(0.1, 1.0 - (
            time.monotonic() - killed_at)) + 0.5)
        assert now[victim] != pids[victim]
        other = next(name for name in workers if name != victim)
        assert now[other] == pids[other] and now["core"] == pids["core"]
    finally:
        loop.close()
    router.wait_for_line(f"SERVER (critical) {victim} process {pids[victim]} killed by signal "
                         "SIGKILL (9); restarting it")
    router.wait_for_line(f"{victim} process {now[victim]} is running again")
    assert round_trip(url, "after.restart") == [f"m{i}" for i in range(5)]


def test_restarted_worker_gets_listeners_created_at_run_time(launch):
    port, extra = free_port(), free_port()
    router = launch(conf(port))
    out = subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b", f"127.0.0.1:{port}",
                          "create", "type=listener", "host=127.0.0.1", f"port={extra}",
                          "name=later", "saslMechanisms=ANONYMOUS"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    pids = children(router.proc.pid)
    os.kill(pids["worker0"], signal.SIGKILL)
    wait_children(router, {"worker0"}, pids)
    router.wait_for_line("worker0 process")
    assert round_trip(f"amqp://127.0.0.1:{extra}", "via.later") == [f"m{i}" for i in range(5)]


# --- a dead agent, a dead core ---------------------------------------------------------------------
def test_killed_agent_restarts_and_management_answers_again(launch):
    port = free_port()
    router = launch(conf(port))
    url = f"amqp://127.0.0.1:{port}"
    loop = Loop()
    try:
        receiver = CountingReceiver("agent.kill")
        loop.connect(url, receiver)
        assert loop.run_until(lambda: receiver.opened, 10)
        before = BulkSender("agent.kill", 1, lambda i: Message(body="before"))
        loop.connect(url, before)
        assert loop.run_until(lambda: receiver.count == 1, 10)
        pids = children(router.proc.pid)
        os.kill(pids["agent"], signal.SIGKILL)
        now = wait_children(router, {"agent"}, pids)
        assert now["worker0"] == pids["worker0"]
        router.wait_for_line("agent process")
        deadline = time.monotonic() + 10
        while True:
            out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                                  f"127.0.0.1:{port}", "-g"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert out.returncode == 0, out.stderr
        assert "Sup.Test" in out.stdout
        after = BulkSender("agent.kill", 1, lambda i: Message(body="after"))
        loop.connect(url, after)
        # the receiver's connection, older than the new agent, carries on
        assert loop.run_until(lambda: receiver.count == 2 and after.settled == 1, 10)
        assert receiver.bodies == ["before", "after"]
    finally:
        loop.close()


def test_killed_core_restarts_the_router_with_its_listeners_open(launch):
    port = free_port()
    router = launch(conf(port, workers=2))
    url = f"amqp://127.0.0.1:{port}"
    pids = children(router.proc.pid)
    loop = Loop()
    try:
        receiver = HoldingReceiver("core.kill", credit=10)
        loop.connect(url, receiver)
        assert loop.run_until(lambda: receiver.opened, 10)
        os.kill(pids["core"], signal.SIGKILL)
        killed_at = time.monotonic()
        router.wait_for_line("Router processes restarted", timeout=10)
        # bench_recovery.py measures it (about 1 s on an idle box); here room for a busy CI box
        assert time.monotonic() - killed_at < 5.0
        assert accepts_amqp(url, 3.0) <= 3.0
        # the old clients' connections are closed, not left hanging
        assert loop.run_until(lambda: receiver.closed, 5)
    finally:
        loop.close()
    now = children(router.proc.pid)
    assert all(now.get(name) not in (None, pids[name]) for name in pids), (pids, now)
    router.wait_for_line("SERVER (critical) core process")
    assert round_trip(url, "after.core") == [f"m{i}" for i in range(5)]


def test_crash_loop_exits_1(launch):
    port = free_port()
    router = launch(conf(port))
    pids = children(router.proc.pid)
    for _ in range(5):
        os.kill(pids["worker0"], signal.SIGKILL)
        pids = wait_children(router, {"worker0"}, pids)
    os.kill(pids["worker0"], signal.SIGKILL)
    assert exit_code(router) == 1
    router.wait_for_line("it was restarted 5 times in the last 60 s, shutting the router down")


def test_restarts_are_counted_in_metrics(launch):
    port, http = free_port(), free_port()
    router = launch(conf(port, extra=f"""listener {{
    host: 127.0.0.1
    port: {http}
    http: yes
}}
"""))
    pids = children(router.proc.pid)
    os.kill(pids["worker0"], signal.SIGKILL)
    wait_children(router, {"worker0"}, pids)
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'qdr_process_restarts_total{process="worker0",router="Sup.Test"} 1.0' in text


def _qdmanage(port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                           f"127.0.0.1:{port}", *args], capture_output=True, text=True, timeout=30)


def _multicast_reaches_both(url: str) -> bool:
    loop = Loop()
    try:
        receivers = [CountingReceiver("mc.news") for _ in range(2)]
        for rcv in receivers:
            loop.connect(url, rcv)
        assert loop.run_until(lambda: all(r.opened for r in receivers), 10)
        sender = BulkSender("mc.news", 1, lambda i: Message(body="extra"), presettled=True)
        loop.connect(url, sender)
        return loop.run_until(lambda: all(r.count == 1 for r in receivers), 5)
    finally:
        loop.close()


def test_runtime_changes_survive_agent_and_core_restarts(launch):
    port = free_port()
    router = launch(conf(port))
    url = f"amqp://127.0.0.1:{port}"
    out = _qdmanage(port, "create", "type=router.config.address", "name=mc", "prefix=mc",
                    "distribution=multicast")
    assert out.returncode == 0, out.stderr
    assert _multicast_reaches_both(url)
    pids = children(router.proc.pid)
    os.kill(pids["agent"], signal.SIGKILL)  # management must still show what was created
    pids = wait_children(router, {"agent"}, pids)
    router.wait_for_line("agent process")
    deadline = time.monotonic() + 10
    while True:
        listed = _qdmanage(port, "query", "--type", "router.config.address", "name")
        if listed.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert '"mc"' in listed.stdout, listed.stdout + listed.stderr
    os.kill(pids["core"], signal.SIGKILL)  # a clean slate: the file's config plus the changes
    wait_children(router, {"core", "agent", "worker0"}, pids)
    router.wait_for_line("Router processes restarted")
    assert accepts_amqp(url, 5.0) <= 5.0
    assert _multicast_reaches_both(url)  # still multicast: the new core has the address rule
