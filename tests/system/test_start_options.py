"""qdrouterd -d/-P (a real SysV daemon, as 1.19) and a connector whose host does not resolve."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from conftest import free_port


def _conf(tmp_path, port: int, extra: str = "") -> str:
    conf = tmp_path / "daemon.conf"
    conf.write_text(f"router {{\n    mode: standalone\n    id: Daemon\n    workerThreads: 1\n}}\n"
                    f"listener {{\n    host: 127.0.0.1\n    port: {port}\n}}\n{extra}")
    return str(conf)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_daemon_detaches_completely_and_writes_the_pid_file(tmp_path):
    port = free_port()
    pidfile = tmp_path / "qdrouterd.pid"
    pid = None
    try:
        # run() waits for EOF on stdout/stderr: it returns only if the daemon let go of them
        try:
            result = subprocess.run([sys.executable, "-m", "supervisor.main", "-d", "-P",
                                     str(pidfile), "-c", _conf(tmp_path, port)],
                                    capture_output=True, text=True, timeout=60,
                                    stdin=subprocess.DEVNULL)
        finally:
            if pidfile.exists() and pidfile.read_text().strip():
                pid = int(pidfile.read_text().strip())
        assert result.returncode == 0, result.stderr
        assert result.stdout == "" and result.stderr == ""
        assert pid is not None
        assert _alive(pid)
        assert os.getsid(pid) != os.getsid(0)          # a session of its own, no terminal
        assert os.getsid(pid) != pid                   # not its leader: can't get one back
        assert os.readlink(f"/proc/{pid}/cwd") == "/"
        for fd in (0, 1, 2):
            assert os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null"
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass                                       # operational before the launcher exited
    finally:
        if pid is not None:
            _stop(pid)
    assert not _alive(pid)


def _stop(pid: int) -> None:
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_daemon_start_failure_is_reported_by_the_launcher(tmp_path):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        result = subprocess.run([sys.executable, "-m", "supervisor.main", "-d", "-c",
                                 _conf(tmp_path, port)], capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL)
    finally:
        blocker.close()
    # 1.19's launcher says "ok" before its listeners are bound (exit 0, the daemon dies later);
    # ours waits until the router is operational, so a start that fails is an exit 1
    assert result.returncode == 1
    assert result.stderr.startswith("qdrouterd: ") and f"127.0.0.1:{port}" in result.stderr


def test_connector_to_an_unresolvable_host_logs_and_retries(router_factory):
    port = free_port()
    router = router_factory(f"""
        connector {{
            name: nowhere
            host: no-such-host.invalid
            port: {port}
        }}
        """)
    text = f"Connection to no-such-host.invalid:{port} failed: proton:io "
    first = router.proc.wait_for_line(text)
    assert first.split(" SERVER (info) [C", 1)[1].split("] ", 1)[1].startswith(text)
    assert first.endswith(f" - connect to  no-such-host.invalid:{port}")
    deadline = time.monotonic() + 30
    while router.proc.output().count(text) < 2:        # it keeps trying
        assert time.monotonic() < deadline, router.proc.output()
        time.sleep(0.2)


def test_deprecated_attribute_name_is_read_and_warned_about(router_factory):
    router = router_factory("""
        log {
            module: ROUTER
            enable: info+
            source: false
        }
        """)
    router.proc.wait_for_line("AGENT (warning) Attribute 'source' of entity 'log' has been "
                              "deprecated. Use 'includeSource' instead")
