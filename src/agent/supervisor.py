"""``qdrouterd``: parse and validate the configuration, then run and watch the router's processes.

Processes (see src/router_core/DESIGN.md): one core, ``workerThreads`` I/O workers and one agent
(control plane). The supervisor validates the whole configuration first and starts nothing if it
is bad. Children get a runtime spec (``spec.json`` in a private runtime directory that also holds
the ZeroMQ endpoints) and report readiness over a PUSH socket.

Failure policy: if any child dies, the supervisor logs it as critical, stops the others and exits
non-zero; restarting is left to systemd (``Restart=on-failure``), which starts from a clean slate
instead of a half-router. SIGTERM/SIGINT: orderly shutdown, exit 0.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import zmq

from agent.config import ConfigError, load_config
from router_core import ipc
from router_core.log import LogConfigError, RouterLog
from router_core.procutil import supervisor_endpoint

VERSION = "1.19.0"
DEFAULT_CONFIG = "/etc/qpid-dispatch/qdrouterd.conf"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0


def build_spec(config) -> dict:
    """The runtime spec every child reads: plain JSON, no config-module objects."""
    router = dict(config.router.attributes)
    entities = lambda short: [dict(e.attributes) for e in config.of_type(short)]  # noqa: E731
    return {
        "router_id": router["id"],
        "router": router,
        "workers": max(1, int(router.get("workerThreads") or 1)),
        "listeners": entities("listener"),
        "connectors": entities("connector"),
        "addresses": entities("address"),
        "linkRoutes": entities("linkRoute"),
        "autoLinks": entities("autoLink"),
        "logs": entities("log"),
        "sslProfiles": entities("sslProfile"),
        "policy": next(iter(entities("policy")), None),
        "vhosts": entities("vhost"),
    }


class Supervisor:
    def __init__(self, spec: dict, log: RouterLog) -> None:
        self.spec = spec
        self.log = log
        self.runtime = tempfile.mkdtemp(prefix="qdrouterd-")
        with open(os.path.join(self.runtime, "spec.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f)
        self.ctx = zmq.Context()
        self.status = self.ctx.socket(zmq.PULL)
        self.status.setsockopt(zmq.LINGER, 0)
        self.status.bind(supervisor_endpoint(self.runtime))
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping = False

    def _spawn(self, name: str, module: str, *args: str) -> None:
        cmd = [sys.executable, "-m", module, "--ipc", self.runtime, *args]
        self.children[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def _await_ready(self, names: set) -> Optional[str]:
        """Wait (bounded) until every named child reports ready; return an error text if not."""
        deadline = time.monotonic() + START_TIMEOUT
        waiting = set(names)
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"timed out waiting for {', '.join(sorted(waiting))} to start"
            if self.status.poll(int(min(remaining, 0.2) * 1000)):
                _, messages = ipc.decode_batch(self.status.recv_multipart())
                for msg in messages:
                    name = msg.kind if msg.kind != "worker" else f"worker{msg.index}"
                    if msg.status == "failed":
                        return msg.detail or f"{name} failed to start"
                    waiting.discard(name)
            dead = self._dead_child()
            if dead:
                return dead
        return None

    def _dead_child(self) -> Optional[str]:
        for name, proc in self.children.items():
            code = proc.poll()
            if code is not None:
                return f"{name} process {proc.pid} exited with code {code}"
        return None

    def start(self) -> Optional[str]:
        nworkers = self.spec["workers"]
        peers = str(nworkers + 1)  # workers are peers 0..n-1, the agent is peer n
        self._spawn("core", "router_core.coreproc")
        error = self._await_ready({"core"})
        if error:
            return error
        self._spawn("agent", "agent.controlplane", "--index", str(nworkers), "--peers", peers)
        for i in range(nworkers):
            self._spawn(f"worker{i}", "router_io.worker", "--index", str(i), "--peers", peers)
        return self._await_ready({"agent", *(f"worker{i}" for i in range(nworkers))})

    def watch(self) -> int:
        """Run until a signal (exit 0) or a child dies (exit 1)."""
        while not self.stopping:
            if self.status.poll(200):
                self.status.recv_multipart()  # late reports carry nothing we act on
            dead = self._dead_child()
            if dead and not self.stopping:
                self.log.log("SERVER", "critical", f"{dead}; shutting the router down")
                return 1
        return 0

    def request_stop(self, *_: object) -> None:
        self.stopping = True

    def shutdown(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in self.children.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2)
        self.status.close(0)
        self.ctx.term()
        shutil.rmtree(self.runtime, ignore_errors=True)


def parse_args(argv: Optional[list]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="qdrouterd", description="AMQP 1.0 message router")
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG, help="configuration file")
    parser.add_argument("-I", "--include", help="accepted for compatibility; unused")
    parser.add_argument("-d", "--daemon", action="store_true", help="run in the background")
    parser.add_argument("-P", "--pidfile", help="write the process id to this file")
    parser.add_argument("-U", "--user", help="run as this user")
    parser.add_argument("-T", "--test-hooks", action="store_true", help="enable test hooks")
    parser.add_argument("-v", "--version", action="store_true", help="print the version")
    return parser.parse_args(argv)


def _daemonize() -> None:
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    if args.version:
        print(VERSION)
        return 0
    try:
        config = load_config(args.config)
        spec = build_spec(config)
        log = RouterLog(spec["logs"])
    except (ConfigError, LogConfigError) as exc:
        print(f"qdrouterd: configuration error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"qdrouterd: cannot read configuration {args.config}: {exc.strerror}",
              file=sys.stderr)
        return 1
    if args.user:
        import pwd
        pw = pwd.getpwnam(args.user)
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    if args.daemon:
        _daemonize()
    if args.pidfile:
        with open(args.pidfile, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    sup = Supervisor(spec, log)
    signal.signal(signal.SIGTERM, sup.request_stop)
    signal.signal(signal.SIGINT, sup.request_stop)
    try:
        error = sup.start()
        if error:
            log.log("SERVER", "critical", f"Router start-up failed: {error}")
            return 1
        log.log("SERVER", "notice", f"Operational, {spec['workers']} Threads Running "
                                    f"(process ID {os.getpid()})")
        code = sup.watch()
        log.log("SERVER", "notice", "Shut Down")
        return code
    finally:
        sup.shutdown()
        if args.pidfile:
            try:
                os.unlink(args.pidfile)
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main())
