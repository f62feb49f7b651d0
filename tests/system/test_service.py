"""Running the router as a service: the systemd unit, sd_notify, SIGHUP reload, HTTP metrics and
healthz, the metrics sink, and the unit's hardening (MemoryDenyWriteExecute) on real routers.

Everything is on loopback; every wait is bounded; every process started here is stopped.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.utils import BlockingConnection

from clients import BulkSender, CountingReceiver, Loop

from conftest import RouterProcess, free_port

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0


# --- helpers ------------------------------------------------------------------------------------
def _conf(port: int, extra: str = "", router_extra: str = "", router_id: str = "Router.Svc",
          workers: int = 1) -> str:
    return textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: {router_id}
            workerThreads: {workers}
        {textwrap.indent(textwrap.dedent(router_extra), '    ')}
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        log {{
            module: DEFAULT
            enable: info+
        }}
        """) + textwrap.dedent(extra)


def _listener(port: int, extra: str = "") -> str:
    return (f"listener {{\n    host: 127.0.0.1\n    port: {port}\n    authenticatePeer: no\n"
            f"    saslMechanisms: ANONYMOUS\n{extra}}}\n")


def _http_listener(port: int, extra: str = "") -> str:
    return f"listener {{\n    host: 127.0.0.1\n    port: {port}\n    http: yes\n{extra}}}\n"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _wait(condition, timeout: float = TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _get(url: str) -> tuple:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample whose labels include ``labels``."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name + "{"):
            continue
        head, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    raise AssertionError(f"no sample {name} {labels} in:\n{text}")


@pytest.fixture
def launch(tmp_path):
    started: list[RouterProcess] = []

    def make(text: str, env: dict | None = None, wait: bool = True,
             name: str = "qdrouterd.conf") -> RouterProcess:
        conf = tmp_path / name
        conf.write_text(text)
        proc = RouterProcess(conf, env=env)
        started.append(proc)
        if wait:
            proc.wait_for_line("Operational")
        return proc

    yield make
    for proc in started:
        proc.stop()


# --- 1. the systemd unit --------------------------------------------------------------------------
def test_unit_file_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = (REPO / "conf" / "qdrouterd.service").read_text()
    for needed in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
                   "User=qdrouterd", "RuntimeDirectory=qdrouterd", "MemoryDenyWriteExecute=yes",
                   "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "ProtectSystem=strict",
                   "-c /etc/qpid-dispatch/qdrouterd.conf"):
        assert needed in unit
    # verify checks that ExecStart is executable: point it at this checkout's qdrouterd
    exe = shutil.which("qdrouterd") or str(Path(sys.executable).with_name("qdrouterd"))
    if not os.access(exe, os.X_OK):
        pytest.skip("no qdrouterd executable to point ExecStart at")
    target = tmp_path / "qdrouterd.service"
    target.write_text(unit.replace("/usr/local/bin/qdrouterd", os.path.realpath(exe)))
    result = subprocess.run([analyze, "verify", str(target)], capture_output=True, text=True,
                            timeout=60)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if "qdrouterd.service" in line]
    assert result.returncode == 0 and not problems, result.stdout + result.stderr


def test_install_service_script_into_a_dest_root(tmp_path):
    root = tmp_path / "root"
    result = subprocess.run(["bash", str(REPO / "scripts" / "install-service.sh"),
                             "--dest-root", str(root)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert (root / "etc/systemd/system/qdrouterd.service").read_text() == \
        (REPO / "conf/qdrouterd.service").read_text()
    conf = root / "etc/qpid-dispatch/qdrouterd.conf"
    assert conf.read_text() == (REPO / "conf/qdrouterd.conf").read_text()
    assert os.readlink(root / "usr/local/bin/qdrouterd") == "/opt/qdrouterd/bin/qdrouterd"
    # the documentation the unit's Documentation= lines and the tools' --help point at
    docs = root / "opt/qdrouterd/share/doc/qdrouter-py"
    assert {p.name for p in (REPO / "docs").glob("*.md")} | {"README.md"} <= \
        {p.name for p in docs.iterdir()}
    links = [line.split("=", 1)[1] for line in conf.parent.parent.joinpath(
        "systemd/system/qdrouterd.service").read_text().splitlines()
        if line.startswith("Documentation=")]
    assert links and all((root / link.removeprefix("file:///")).is_file() for link in links)
    assert "0.0.0.0:5672 without authentication" in result.stderr
    conf.write_text("# mine\n")  # an existing configuration is never overwritten
    subprocess.run(["bash", str(REPO / "scripts" / "install-service.sh"), "--dest-root",
                    str(root)], capture_output=True, text=True, timeout=60, check=True)
    assert conf.read_text() == "# mine\n"


def test_install_service_prefix_reaches_the_units_documentation_links(tmp_path):
    root = tmp_path / "root"
    subprocess.run(["bash", str(REPO / "scripts" / "install-service.sh"), "--dest-root",
                    str(root), "--prefix", "/srv/qdr"], capture_output=True, text=True,
                   timeout=60, check=True)
    unit = (root / "etc/systemd/system/qdrouterd.service").read_text()
    links = [line.split("=", 1)[1] for line in unit.splitlines()
             if line.startswith("Documentation=")]
    assert links and all(link.startswith("file:///srv/qdr/share/doc/qdrouter-py/")
                         for link in links)
    assert all((root / link.removeprefix("file:///")).is_file() for link in links)


def test_the_start_up_log_names_this_build(launch):
    """The router logs its own build as it starts (the one thing --version cannot say)."""
    import importlib.metadata
    proc = launch("router {\n    mode: standalone\n    id: R\n}\n")
    line = proc.wait_for_line("compatible with Qpid Dispatch Router 1.19.0")
    assert f"qdrouter-py {importlib.metadata.version('qdrouter-py')}" in line
    assert "SERVER (notice)" in line


# --- 2. sd_notify and the runtime directory -------------------------------------------------------
def _notify_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    return sock


def _recv_until(sock: socket.socket, key: str, timeout: float = 30.0) -> list:
    """Datagrams until one assigns ``key`` (bounded); returns them all."""
    got: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(4096).decode()
        except socket.timeout:
            continue
        fields = dict(line.split("=", 1) for line in data.splitlines() if "=" in line)
        got.append(fields)
        if key in fields:
            return got
    raise AssertionError(f"no {key} notification; got {got}")


def test_sd_notify_ready_reloading_stopping(launch, tmp_path):
    port = free_port()
    run = tmp_path / "run"
    run.mkdir()
    with _notify_socket(tmp_path / "notify.sock") as sock:
        proc = launch(_conf(port), env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
                                        "RUNTIME_DIRECTORY": str(run)}, wait=False)
        got = _recv_until(sock, "READY")
        assert got[-1]["READY"] == "1" and got[-1]["STATUS"].startswith("Operational")
        assert _accepts(port)  # READY means the listener accepts
        proc.wait_for_line("Operational", 5)  # logged just before READY (read by a thread)
        # the ZeroMQ endpoints live under $RUNTIME_DIRECTORY (systemd's RuntimeDirectory)
        runtime = [p for p in run.iterdir() if p.name.startswith("qdrouterd-")]
        assert len(runtime) == 1 and (runtime[0] / "core").exists()
        # reload: RELOADING=1 then READY=1
        proc.proc.send_signal(signal.SIGHUP)
        assert _recv_until(sock, "RELOADING")[-1]["RELOADING"] == "1"
        assert _recv_until(sock, "READY")[-1]["READY"] == "1"
        proc.proc.send_signal(signal.SIGTERM)
        assert _recv_until(sock, "STOPPING")[-1]["STOPPING"] == "1"
        assert proc.proc.wait(TIMEOUT) == 0
    assert not list(run.iterdir()), "runtime directory left behind"


# --- 3. reload on SIGHUP --------------------------------------------------------------------------
class PingPong(MessagingHandler):
    """One connection with a sender and a receiver on the same address: keeps ``window``
    unsettled messages in flight for as long as it runs; records any disconnect."""

    def __init__(self, address: str, window: int = 5) -> None:
        super().__init__(prefetch=50)
        self.address = address
        self.window = window
        self.sent = 0
        self.received = 0
        self.accepted = 0
        self.disconnected = False
        self.sender = None
        self.conn = None

    def on_connection_opened(self, event):
        self.conn = event.connection
        event.container.create_receiver(event.connection, self.address)
        self.sender = event.container.create_sender(event.connection, self.address)

    def on_sendable(self, event):
        self._send()

    def _send(self):
        while self.sender is not None and self.sender.credit > 0 and \
                self.sent - self.accepted < self.window:
            self.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event):
        self.received += 1

    def on_accepted(self, event):
        self.accepted += 1
        self._send()

    def on_disconnected(self, event):
        self.disconnected = True

    def on_transport_error(self, event):
        self.disconnected = True

    def on_connection_remote_close(self, event):
        self.disconnected = True


def test_sighup_adds_a_listener_without_dropping_clients_and_refuses_a_bad_file(launch, tmp_path):
    port, new_port = free_port(), free_port()
    text = _conf(port, workers=2)
    proc = launch(text)
    conf = proc.conf_path
    loop = Loop()
    client = PingPong("reload.q")
    loop.connect(f"amqp://127.0.0.1:{port}", client)
    try:
        def flows(n: int) -> None:
            target = client.accepted + n
            assert loop.run_until(lambda: client.accepted >= target or client.disconnected,
                                  TIMEOUT), f"stalled at {client.accepted}"
            assert not client.disconnected, proc.output()

        flows(20)
        assert not _accepts(new_port)
        conf.write_text(text + _listener(new_port) +
                        "address {\n    prefix: reload.m\n    distribution: multicast\n}\n")
        proc.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + TIMEOUT
        while not _accepts(new_port):  # messages keep flowing while the change is applied
            assert time.monotonic() < deadline, proc.output()
            flows(1)
        proc.wait_for_line("Configuration reloaded")
        flows(20)
        # the new listener is a full AMQP listener
        receiver = CountingReceiver("reload.other")
        sender = BulkSender("reload.other", 3, lambda i: Message(body=i))
        loop.connect(f"amqp://127.0.0.1:{new_port}", receiver)
        assert loop.run_until(lambda: receiver.opened, TIMEOUT)
        loop.connect(f"amqp://127.0.0.1:{new_port}", sender)
        assert loop.run_until(lambda: receiver.count == 3, TIMEOUT)
        flows(5)
        # a broken file: an error line naming the problem, the running configuration stays
        conf.write_text(text + _listener(new_port) + "listener {\n    host: 127.0.0.1\n"
                                                     "    prot: 1\n}\n")
        proc.proc.send_signal(signal.SIGHUP)
        line = proc.wait_for_line("Configuration reload failed")
        assert "(error)" in line and "prot" in line and f"{conf}:" in line
        assert _accepts(new_port) and _accepts(port)
        flows(10)
        # removing the listener again closes it; the first connection still flows
        conf.write_text(text)
        proc.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + TIMEOUT
        while _accepts(new_port):
            assert time.monotonic() < deadline, "the removed listener still accepts"
            flows(1)
        flows(10)
        assert client.received >= client.accepted
    finally:
        loop.close()
    assert proc.stop() == 0


def test_sighup_applies_log_level_changes(launch, tmp_path):
    port = free_port()
    text = _conf(port)
    proc = launch(text)
    proc.conf_path.write_text(text + "log {\n    module: AGENT\n    enable: debug+\n}\n")
    proc.proc.send_signal(signal.SIGHUP)
    proc.wait_for_line("Configuration reloaded")
    # AGENT debug is now on: a management request is logged at debug level
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=TIMEOUT)
    try:
        from proton.utils import SyncRequestResponse
        rr = SyncRequestResponse(conn, "$management")
        reply = rr.call(Message(properties={"operation": "QUERY",
                                            "entityType": "org.apache.qpid.dispatch.listener"},
                                body={"attributeNames": []}))
        assert reply.properties["statusCode"] == 200
    finally:
        conn.close()
    proc.wait_for_line("AGENT (debug) Agent request Message(")  # the raw request, as 1.19


# --- 4. HTTP metrics and healthz ------------------------------------------------------------------
@contextlib.contextmanager
def _traffic(port: int, address: str, count: int):
    """``count`` unsettled messages to ``address``, all received and accepted; the receiver stays
    attached (so the router keeps the address) until the block ends."""
    loop = Loop()
    try:
        receiver = CountingReceiver(address)
        sender = BulkSender(address, count, lambda i: Message(body=i))
        loop.connect(f"amqp://127.0.0.1:{port}", receiver)
        assert loop.run_until(lambda: receiver.opened, TIMEOUT)
        loop.connect(f"amqp://127.0.0.1:{port}", sender)
        assert loop.run_until(lambda: sender.settled == count and receiver.count == count,
                              TIMEOUT), (sender.settled, receiver.count)
        yield loop
    finally:
        loop.close()


def test_http_metrics_and_healthz(launch):
    port, http = free_port(), free_port()
    launch(_conf(port, _http_listener(http), workers=2))
    base = f"http://127.0.0.1:{http}"
    with _traffic(port, "metrics.q", 7):
        status, ctype, text = _get(base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert _sample(text, "qdr_address_deliveries_ingress_total", router="Router.Svc",
                   address="M0metrics.q") == 7
    assert _sample(text, "qdr_address_deliveries_egress_total", address="M0metrics.q") == 7
    assert _sample(text, "qdr_deliveries_total", outcome="accepted") >= 7
    assert _sample(text, "qdr_uptime_seconds") > 0
    assert _get(base + "/healthz")[::2] == (200, "ok\n")
    assert _get(base + "/nothing")[0] == 404
    # the http port is not an AMQP port
    with pytest.raises(Exception):
        BlockingConnection(f"amqp://127.0.0.1:{http}", timeout=3).close()


def test_http_port_in_use_fails_the_start_cleanly(tmp_path):
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        conf = tmp_path / "busy.conf"
        conf.write_text(_conf(port, _http_listener(busy.getsockname()[1])))
        result = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "HTTP listener error" in result.stderr and "critical" in result.stderr


def test_http_endpoints_can_be_switched_off(launch):
    port, http = free_port(), free_port()
    launch(_conf(port, _http_listener(http, "    metrics: no\n")))
    assert _get(f"http://127.0.0.1:{http}/metrics")[0] == 404
    assert _get(f"http://127.0.0.1:{http}/healthz")[0] == 200


def test_healthz_503_when_the_core_does_not_answer(launch):
    import psutil_free as procs
    port, http = free_port(), free_port()
    proc = launch(_conf(port, _http_listener(http)))
    core = [pid for pid in procs.children_of(proc.proc.pid)
            if "router_core.coreproc" in procs.cmdline(pid)][0]
    os.kill(core, signal.SIGSTOP)
    try:
        assert _get(f"http://127.0.0.1:{http}/healthz")[0] == 503
    finally:
        os.kill(core, signal.SIGCONT)
    assert _get(f"http://127.0.0.1:{http}/healthz")[0] == 200


def test_http_listener_added_by_reload(launch):
    port, http = free_port(), free_port()
    text = _conf(port)
    proc = launch(text)
    proc.conf_path.write_text(text + _http_listener(http))
    proc.proc.send_signal(signal.SIGHUP)
    proc.wait_for_line("Configuration reloaded")
    assert _get(f"http://127.0.0.1:{http}/healthz")[0] == 200


def test_metrics_sink_writes_json_lines(launch, tmp_path):
    port = free_port()
    out = tmp_path / "metrics"
    launch(_conf(port, router_extra=f"metricsDir: {out}\nmetricsIntervalSeconds: 1\n"))
    path = out / "router-metrics-Router.Svc.jsonl"

    def records() -> list:
        if not path.exists():
            return []
        # the router may be writing a line right now: only whole (newline-ended) lines count
        whole = path.read_text().split("\n")[:-1]
        return [json.loads(line) for line in whole if line]

    def has_address() -> bool:
        return any(r["kind"] == "address" and r["address"] == "sink.q"
                   and r["deliveriesIngress"] == 5 for r in records())

    with _traffic(port, "sink.q", 5) as loop:
        deadline = time.monotonic() + 15
        while not has_address():
            assert time.monotonic() < deadline, "no address record for sink.q"
            loop.run_for(0.1)
    recs = records()
    assert all(r["schema"] == "router-metrics/1" and r["router_id"] == "Router.Svc"
               for r in recs)
    assert any(r["kind"] == "router" for r in recs)
    _wait(lambda: sum(r["kind"] == "router" for r in records()) >= 2, timeout=10,
          what="a second sample")
    second = [r for r in records() if r["kind"] == "router"][1]
    assert second["d_deliveriesIngress"] is not None


def test_metrics_sink_takes_a_last_sample_when_the_router_stops(launch, tmp_path):
    """No sample falls due (60 s interval): the file is written by the last sample the agent
    takes when the router stops. An address that went away before the stop has its final
    record with its exact counts; one still in use at the stop has its counts too."""
    port, http = free_port(), free_port()
    out = tmp_path / "metrics"
    proc = launch(_conf(port, _http_listener(http),
                        router_extra=f"metricsDir: {out}\nmetricsIntervalSeconds: 60\n"))
    path = out / "router-metrics-Router.Svc.jsonl"
    with _traffic(port, "last.q", 9):
        pass    # both clients detach: the router removes the address
    _wait(lambda: "last.q" not in _get(f"http://127.0.0.1:{http}/metrics")[2],
          what="address last.q removed")
    with _traffic(port, "live.q", 4):
        assert not path.exists()    # no sample yet
        assert proc.stop() == 0
    # the stopped router's file is closed (renamed .1), where the streaming job reads it
    assert not path.exists()
    closed = out / "router-metrics-Router.Svc.jsonl.1"
    recs = [json.loads(line) for line in closed.read_text().splitlines()]
    assert closed.read_text().endswith("\n")
    gone = [r for r in recs if r["kind"] == "address" and r["address"] == "last.q"]
    assert [(r["final"], r["deliveriesIngress"], r["deliveriesEgress"]) for r in gone] == [
        (True, 9, 9)]
    live = [r for r in recs if r["kind"] == "address" and r["address"] == "live.q"]
    assert [(r["deliveriesIngress"], r["deliveriesEgress"]) for r in live] == [(4, 4)]
    router = [r for r in recs if r["kind"] == "router"]
    assert len(router) == 1 and router[0]["deliveriesIngress"] >= 13
    # the router's first sample: counted from zero at its start, so the windows have it all
    assert router[0]["d_deliveriesIngress"] == router[0]["deliveriesIngress"]
    assert [r["d_deliveriesIngress"] for r in live] == [4]
    assert "last metrics sample not taken" not in proc.output()


# --- 5. MemoryDenyWriteExecute ------------------------------------------------------------------
PR_SET_MDWE = 65
PR_GET_MDWE = 66
PR_MDWE_REFUSE_EXEC_GAIN = 1


def _mdwe_supported() -> bool:
    probe = ("import ctypes,sys; libc=ctypes.CDLL(None, use_errno=True); "
             f"sys.exit(0 if libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) == 0"
             " else 1)")
    return subprocess.run([sys.executable, "-c", probe], timeout=30).returncode == 0


def test_router_runs_under_memory_deny_write_execute(tmp_path):
    """systemd implements MemoryDenyWriteExecute with PR_SET_MDWE where the kernel has it (6.3+):
    run the router under it (inherited by its children) and pass traffic."""
    if not _mdwe_supported():
        pytest.skip("the kernel has no PR_SET_MDWE")
    port = free_port()
    conf = tmp_path / "mdwe.conf"
    conf.write_text(_conf(port, workers=2))
    wrapper = (f"import ctypes,os,sys; libc=ctypes.CDLL(None, use_errno=True); "
               f"assert libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) == 0; "
               f"assert libc.prctl({PR_GET_MDWE}, 0, 0, 0, 0) == {PR_MDWE_REFUSE_EXEC_GAIN}; "
               f"os.execv(sys.executable, [sys.executable, '-m', 'supervisor.main', '-c', "
               f"{str(conf)!r}])")
    proc = subprocess.Popen([sys.executable, "-c", wrapper], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        _wait(lambda: _accepts(port) or proc.poll() is not None, timeout=30,
              what="the router under MDWE")
        assert proc.poll() is None
        with _traffic(port, "mdwe.q", 20):
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate(timeout=5)
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "critical" not in out, out
