"""The router's processes: start-up, readiness line, clean shutdown, bad config, child death."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import psutil_free as procs  # local helper module in tests/, no third-party dependency

from conftest import RouterProcess, free_port


def test_operational_line_and_clean_sigterm(router_factory):
    r = router_factory(workers=2)
    line = r.proc.wait_for_line("Operational")
    assert re.search(r"SERVER \(notice\) Operational, 2 Threads Running \(process ID \d+\)", line)
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} [+-]\d{4} SERVER", line)
    children = procs.children_of(r.proc.proc.pid)
    assert len(children) == 4  # core, agent, two workers
    assert r.proc.stop() == 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(procs.alive(pid) for pid in children):
        time.sleep(0.05)
    assert not [pid for pid in children if procs.alive(pid)], "children left running"


def test_sigint_is_a_clean_shutdown_too(router_factory):
    r = router_factory()
    r.proc.proc.send_signal(signal.SIGINT)
    assert r.proc.proc.wait(10) == 0


def test_dead_worker_is_restarted_and_a_dead_supervisor_leaves_no_child(router_factory):
    r = router_factory()
    children = procs.children_of(r.proc.proc.pid)
    worker = [pid for pid in children if "router_io.worker" in procs.cmdline(pid)][0]
    os.kill(worker, signal.SIGKILL)
    r.proc.wait_for_line(f"worker0 process {worker} killed by signal SIGKILL (9); restarting it")
    r.proc.wait_for_line("is running again")
    assert r.proc.proc.poll() is None  # supervision, not suicide (tests/system/test_supervision.py)
    children = procs.children_of(r.proc.proc.pid)
    assert worker not in children
    os.kill(r.proc.proc.pid, signal.SIGKILL)  # nothing may outlive the supervisor
    r.proc.proc.wait(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(procs.alive(pid) for pid in children):
        time.sleep(0.05)
    assert not [pid for pid in children if procs.alive(pid)]


def _run_config(tmp_path, text: str) -> subprocess.CompletedProcess:
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    return subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                          capture_output=True, text=True, timeout=30)


def test_bad_config_names_the_line_and_exits_nonzero(tmp_path):
    result = _run_config(tmp_path, "router {\n    mode: standalone\n}\nlistener {\n"
                                   "    host: 127.0.0.1\n    prot: 5672\n}\n")
    assert result.returncode != 0
    assert ":6:" in result.stderr and "prot" in result.stderr
    assert "Operational" not in result.stdout + result.stderr


def test_inter_router_listener_refused_in_standalone_mode(tmp_path):
    result = _run_config(tmp_path, "router {\n    mode: standalone\n}\nlistener {\n"
                                   "    host: 127.0.0.1\n    port: 20001\n"
                                   "    role: inter-router\n}\n")
    assert result.returncode != 0
    assert "interior" in result.stderr.lower()


def test_missing_config_file_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "supervisor.main", "-c",
                             str(tmp_path / "nope.conf")], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode != 0
    assert "nope.conf" in result.stderr


def test_port_in_use_fails_startup(tmp_path):
    import socket
    port = free_port()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen(1)
    try:
        conf = tmp_path / "busy.conf"
        conf.write_text(f"router {{\n    id: Busy\n    workerThreads: 1\n}}\nlistener {{\n"
                        f"    host: 127.0.0.1\n    port: {port}\n}}\n")
        proc = RouterProcess(conf)
        try:
            assert proc.proc.wait(20) == 1
        finally:
            proc.stop()
        assert "Listener error" in proc.output()
    finally:
        blocker.close()


def _sized_router(tmp_path, threads: int, force: str, cpus: set) -> subprocess.Popen:
    conf = tmp_path / "sized.conf"
    conf.write_text(f"router {{\n mode: standalone\n id: Sized\n workerThreads: {threads}\n}}\n"
                    f"listener {{\n host: 127.0.0.1\n port: {free_port()}\n"
                    " authenticatePeer: no\n saslMechanisms: ANONYMOUS\n}\n")
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor.main", "-c", str(conf)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "QDROUTERD_WORKER_PROCESSES": force},
        preexec_fn=lambda: os.sched_setaffinity(0, cpus))


def _lines_until_operational(proc: subprocess.Popen) -> list:
    lines: list = []
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if "Operational" in line:
            return lines
    raise AssertionError("no Operational line:\n" + "\n".join(lines))


@pytest.mark.parametrize("force, workers, says", [
    ("", 1, "1 I/O worker process for workerThreads 4 on 1 usable CPUs"),
    ("3", 3, "3 I/O worker processes (workerThreads 4, 1 usable CPUs, forced by "
             "QDROUTERD_WORKER_PROCESSES)"),
])
def test_worker_processes_sized_to_the_usable_cpus(tmp_path, force, workers, says):
    """workerThreads 4 on a router allowed one CPU (its affinity mask, as taskset or systemd's
    CPUAffinity= sets it) starts one worker process and says so before "Operational", which
    still names workerThreads as 1.19's line does; QDROUTERD_WORKER_PROCESSES forces a number."""
    first_cpu = min(os.sched_getaffinity(0))
    proc = _sized_router(tmp_path, 4, force, {first_cpu})
    try:
        lines = _lines_until_operational(proc)
        assert any(says in line for line in lines), lines
        assert "Operational, 4 Threads Running" in lines[-1]
        children = procs.children_of(proc.pid)
        assert sum("router_io.worker" in procs.cmdline(pid) for pid in children) == workers
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def test_bad_worker_process_count_is_refused(tmp_path):
    proc = _sized_router(tmp_path, 4, "zero", set(os.sched_getaffinity(0)))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "QDROUTERD_WORKER_PROCESSES='zero': expected an integer of at least 1" in out


def test_router_entity_names_its_worker_processes(tmp_path):
    """The router entity's workerProcesses (our extension) is what was started; workerThreads
    stays the configured number, as 1.19 reports it."""
    from proton import Message  # noqa: PLC0415
    from proton.utils import BlockingConnection, SyncRequestResponse  # noqa: PLC0415
    first_cpu = min(os.sched_getaffinity(0))
    proc = _sized_router(tmp_path, 4, "", {first_cpu})
    try:
        lines = _lines_until_operational(proc)
        port = int(re.search(r"port: (\d+)", (tmp_path / "sized.conf").read_text()).group(1))
        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=10)
        try:
            rr = SyncRequestResponse(conn, "$management")
            reply = rr.call(Message(
                properties={"operation": "QUERY",
                            "entityType": "org.apache.qpid.dispatch.router"},
                body={"attributeNames": ["workerThreads", "workerProcesses"]}))
            assert reply.body["results"] == [[4, 1]], lines
        finally:
            conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
