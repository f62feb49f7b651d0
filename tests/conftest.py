"""Shared fixtures: launched routers (real processes on loopback) that always stop.

Every wait here is bounded; every process a test starts is stopped (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from brokers import c_broker, c_broker_binary  # noqa: E402,F401 - fixtures: a real AMQP broker

START_TIMEOUT = 30.0
# Routers the tests start run exactly ``workerThreads`` worker processes, so a test written for
# two workers (a delivery crossing workers, a worker restarted beside another) has two on any
# machine; the default sizing (supervisor/sizing.py) is tested where it is the subject.
os.environ.setdefault("QDROUTERD_WORKER_PROCESSES", "workerThreads")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RouterProcess:
    """A ``qdrouterd -c FILE`` child process whose log lines are collected."""

    def __init__(self, conf_path: Path, env: Optional[dict] = None) -> None:
        self.conf_path = conf_path
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.main", "-c", str(conf_path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, text: str, timeout: float = START_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no log line containing {text!r}; output:\n"
                                         + "\n".join(self.lines))
                self._cond.wait(min(remaining, 0.2))

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode


class Router:
    """A running router with a normal listener on 127.0.0.1:<port>."""

    def __init__(self, proc: RouterProcess, port: int, router_id: str) -> None:
        self.proc = proc
        self.port = port
        self.id = router_id
        self.url = f"amqp://127.0.0.1:{port}"


@pytest.fixture
def router_factory(tmp_path):
    started: list[RouterProcess] = []

    def make(extra: str = "", router_id: str = "Router.Test", workers: int = 1,
             wait: bool = True, mode: str = "standalone", router_attrs: str = "") -> Router:
        """``router_attrs``: more ``name: value`` lines for the router section."""
        port = free_port()
        conf = tmp_path / f"qdrouterd-{len(started)}.conf"
        more = "".join(f"\n                {line.strip()}" for line in router_attrs.splitlines()
                       if line.strip())
        conf.write_text(textwrap.dedent(f"""\
            router {{
                mode: {mode}
                id: {router_id}
                workerThreads: {workers}{more}
            }}
            listener {{
                host: 127.0.0.1
                port: {port}
                role: normal
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            log {{
                module: DEFAULT
                enable: info+
            }}
            """) + textwrap.dedent(extra))
        proc = RouterProcess(conf)
        started.append(proc)
        if wait:
            proc.wait_for_line("Operational")
        return Router(proc, port, router_id)

    yield make
    for proc in started:
        proc.stop()


ONE_X = os.environ.get("QDROUTERD_1X", "")


@pytest.fixture
def router_of_kind(router_factory, tmp_path):
    """``make(kind, extra, **kwargs)``: a fresh router, ours (``router_factory``'s keywords) or
    Qpid Dispatch 1.x (``kind == "1.x"``, a router of ``mode`` and ``router_attrs`` with the
    same normal listener and ``extra``; the test is skipped unless ``QDROUTERD_1X`` names an
    install prefix). Both
    have ``.port``, ``.url`` and ``.proc`` (``wait_for_line``, ``output``); every one stops at
    teardown. For tests that check a behaviour on ours and on 1.19 alike."""
    started: list = []

    def make(kind: str, extra: str = "", **kwargs):
        if kind == "ours":
            return router_factory(extra=extra, **kwargs)
        if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
            pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")
        from test_autolinks_1x import start_1x  # noqa: PLC0415 - tests/system's 1.x launcher
        router = start_1x(tmp_path, f"X{free_port()}", extra,
                          mode=kwargs.get("mode", "standalone"),
                          router_attrs=kwargs.get("router_attrs", ""))
        started.append(router)
        return router

    yield make
    for router in started:
        router.proc.stop()


@pytest.fixture
def router(router_factory) -> Router:
    return router_factory()


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> dict:
    """A test CA with server, client, wrong-name, expired and rogue certificates (tlscerts)."""
    import tlscerts
    return tlscerts.make_pki(tmp_path_factory.mktemp("pki"))


def compiled_engine():
    """The compiled WorkerEngine, or None when router_io._engine is not built."""
    try:
        from router_io import _engine
    except ImportError:
        return None
    return _engine.WorkerEngine


@pytest.fixture(params=["python", "cython"])
def engine_cls(request):
    """The worker engine, both builds: the pure-Python reference and the compiled one."""
    if request.param == "python":
        from router_io import engine
        return engine.WorkerEngine
    cls = compiled_engine()
    if cls is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    return cls


def default_vhost_policy(group: dict, policy: Optional[dict] = None) -> str:
    """qdrouterd.conf text: vhost policy on, with ``policy``'s settings added to its section,
    and the ``$default`` vhost (unknown users allowed) whose ``$default`` user group allows
    every remote host, source and target unless ``group`` says otherwise, plus ``group``'s
    other settings."""
    settings = {"enableVhostPolicy": True, **(policy or {}), "defaultVhost": "$default"}
    lines = "".join(f"    {k}: {json.dumps(v) if not isinstance(v, str) else v}\n"
                    for k, v in settings.items())
    limits = {"remoteHosts": "*", "sources": "*", "targets": "*", **group}
    entries = ",\n".join(f"            {json.dumps(k)}: {json.dumps(v)}" for k, v in limits.items())
    return (f"\npolicy {{\n{lines}}}\nvhost {{\n    hostname: $default\n"
            f"    allowUnknownUser: true\n    groups: {{\n        \"$default\": {{\n"
            f"{entries}\n        }}\n    }}\n}}\n")


@pytest.fixture
def engine_build(engine_cls, monkeypatch):
    """Both worker-engine builds, with tests/memrouter's MemRouter made on the one in use (a test
    module that wants it for every test says ``pytestmark = pytest.mark.usefixtures(...)``)."""
    import memrouter
    monkeypatch.setattr(memrouter, "MemRouter",
                        functools.partial(memrouter.MemRouter, engine_cls=engine_cls))
    return engine_cls


COMPILED_MODULES = ("router_core._core", "router_core._addrmatch", "router_core._pathcomp",
                    "common._amqpscan", "router_io._engine", "common._ipccodec",
                    "common._zmqopt", "router_io._frameguard")


def pytest_sessionstart(session):
    """Under ROUTER_REQUIRE_EXTENSIONS=1 (CI) every compiled module must be importable: the
    dual-build tests skip their compiled half when one is missing, which must not pass as green."""
    if os.environ.get("ROUTER_REQUIRE_EXTENSIONS") != "1":
        return
    import importlib
    missing = []
    for name in COMPILED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        pytest.exit("ROUTER_REQUIRE_EXTENSIONS=1 but not built: " + ", ".join(missing),
                    returncode=3)




@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown (and unused) without it
def pytest_xdist_make_scheduler(config, log):
    """``pytest -n 2 --dist loadfile`` (the README's command): a test file runs whole, in its
    order, on one worker, so its module fixtures start once as in a serial run; and the Spark
    tests (tests/pipelines/) are one unit, so one worker starts the local Spark session that
    all of them share."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/pipelines" if path.startswith("tests/pipelines/") else path

    return FileScheduling(config, log)
