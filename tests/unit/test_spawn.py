"""supervisor/spawn.py: a forked child's exit status reaches the supervisor as an exec'd one's
did (``Popen.returncode``: the code, or minus the signal), waits are bounded, and
``QDROUTERD_SPAWN=exec`` still starts separate interpreters."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import time

import pytest

from supervisor import spawn


@pytest.fixture(autouse=True)
def _unfreeze():
    yield
    gc.unfreeze()  # start_child froze the test process's objects


def test_a_child_that_fails_at_start_reports_its_exit_code(tmp_path):
    # argparse's usage error (no --index) is SystemExit(2) inside main: the child exits 2
    child = spawn.start_child("agent", ["--ipc", str(tmp_path)], dict(os.environ))
    assert isinstance(child, spawn.ForkedChild)
    assert child.wait(30) == 2
    assert child.poll() == 2
    # no spec.json in the runtime directory: the core raises (traceback on stderr), exit 1
    child = spawn.start_child("core", ["--ipc", str(tmp_path / "missing")], dict(os.environ))
    assert child.wait(30) == 1


def test_wait_is_bounded_and_a_killed_child_reports_the_signal():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    child = spawn.ForkedChild(pid, ["sleeper"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.05)
        assert child.poll() is None
    finally:
        child.kill()
    assert child.wait(30) == -signal.SIGKILL
    child.send_signal(signal.SIGTERM)  # gone and reaped: nothing to signal, no error


def test_exec_is_still_there(tmp_path, monkeypatch):
    monkeypatch.setenv(spawn.SPAWN_ENV, "exec")
    child = spawn.start_child("agent", ["--ipc", str(tmp_path)], dict(os.environ))
    assert isinstance(child, subprocess.Popen)
    assert child.wait(30) == 2
