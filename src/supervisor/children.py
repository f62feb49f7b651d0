"""The router's child processes: start them, watch them, restart them, stop them.

Owns the ``Supervisor`` object that ``supervisor/main.py`` (the ``qdrouterd`` entry point) builds
once the configuration is valid: the runtime spec every child reads (``build_spec``), the private
runtime directory (``spec.json``, the ZeroMQ endpoints, ``restarts.json``), the child-process
table, the readiness reports, the listening sockets (bound here through
``common.listenfds.SocketBroker`` and lent to the workers) and the SIGHUP reload exchange
with the agent (``supervisor/reload.py``).

Processes (see src/router_core/DESIGN.md): one core, I/O workers (``workerThreads`` bounded by the
usable CPUs, ``supervisor.sizing``) and one agent
(control plane). Children get a runtime spec (``spec.json`` in a private runtime directory that
also holds the ZeroMQ endpoints) and report readiness over a PUSH socket. They are forked from
this process after it imported their modules once (``supervisor/spawn.py``), so those pages
are shared; each is handled as a ``subprocess.Popen`` was (poll, wait, signal).

Listening sockets: the supervisor binds every AMQP listener once, exclusively, before any child
starts (a port in use stops the start with 1.x's ``Listener error on HOST:PORT: ...`` and exit 1)
and lends them to the workers (``common.listenfds``); listeners created at run time are bound
here too, at a worker's request.

Supervision: a dead worker or agent is restarted in place (a new generation of the same peer
index) after the core is told (``ipc.PeerLost``) so the dead peer's connections close and their
deliveries settle at once; the listeners stay open meanwhile. A dead core takes the others with
it and all start again from a clean slate, listeners still open. Every restart is logged at
critical and counted (``restarts.json``, exported by the agent as metrics). More than
RESTART_LIMIT restarts of one child within RESTART_WINDOW seconds is a crash loop: exit 1 and
systemd (``Restart=on-failure``) takes over. Shutdown: workers, then the agent, then the core.

The runtime directory is created under ``$RUNTIME_DIRECTORY`` when systemd sets it
(``RuntimeDirectory=qdrouterd``), else under the temporary directory. A SIGHUP re-reads the
configuration file: a bad file is logged and changes nothing; otherwise the differences
(listeners, connectors, addresses, log settings) are applied by the agent through management.
"""
from __future__ import annotations

import collections
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

from supervisor import notify
from supervisor import reload
from supervisor import spawn
from supervisor.sizing import Sizing, size_for_machine
from supervisor.config import ConfigError, load_config
from common import ipc
from common.listenfds import ListenerError, SocketBroker
from common.log import SUPERVISOR_REPORT, LogConfigError, RouterLog
from common.procutil import core_endpoint, supervisor_endpoint

START_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0
RELOAD_TIMEOUT = 60.0  # the agent applies changes one by one, each bounded by its own timeout
RELOAD_CONNECT_MS = 5000  # how long a reload waits for the agent's end of the reload pipe
WATCH_INTERVAL_MS = 50    # how soon a dead child is noticed (restart within 1 s)
RESTART_LIMIT = 5         # restarts of one child within RESTART_WINDOW seconds before
RESTART_WINDOW = 60.0     # the supervisor calls it a crash loop and exits 1 (systemd takes over)
CORE_RESTART_GRACE = 0.5  # how long the other children get to close their connections


def runtime_parent() -> Optional[str]:
    """Where to create the private runtime directory: systemd's RuntimeDirectory if given."""
    value = os.environ.get("RUNTIME_DIRECTORY", "")
    first = value.split(":")[0]
    return first if first and os.path.isdir(first) else None


def build_spec(config, sizing: Optional[Sizing] = None) -> dict:
    """The runtime spec every child reads: plain JSON, no config-module objects. ``sizing``
    (default: this machine's, ``supervisor.sizing``) says how many worker processes to start."""
    router = dict(config.router.attributes)
    entities = lambda short: [dict(e.attributes) for e in config.of_type(short)]  # noqa: E731
    if sizing is None:
        sizing = size_for_machine(int(router.get("workerThreads") or 1))
    return {
        "router_id": router["id"],
        "router": router,
        "workers": sizing.workers,
        "workerSizing": sizing._asdict(),
        "listeners": entities("listener"),
        "connectors": entities("connector"),
        "addresses": entities("address"),
        "linkRoutes": entities("linkRoute"),
        "autoLinks": entities("autoLink"),
        "exchanges": entities("router.config.exchange"),
        "bindings": entities("router.config.binding"),
        "logs": entities("log"),
        "sslProfiles": entities("sslProfile"),
        "authServicePlugins": entities("authServicePlugin"),
        "policy": next(iter(entities("policy")), None),
        "vhosts": entities("vhost"),
    }


def describe_exit(code: int) -> str:
    """``exited with code N`` or ``killed by signal SIGKILL (9)``, for the critical log line."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "signal"
        return f"killed by signal {name} ({-code})"
    return f"exited with code {code}"


class Supervisor:
    def __init__(self, spec: dict, log: RouterLog, config_path: Optional[str] = None) -> None:
        self.spec = spec
        self.log = log
        self.config_path = config_path
        self.runtime = tempfile.mkdtemp(prefix="qdrouterd-", dir=runtime_parent())
        # what children need beyond the configuration: where restarts are counted, and when
        # the router started (a restarted agent still reports the router's uptime)
        spec.setdefault("runtime", self.runtime)
        spec.setdefault("startedAt", time.time())
        with open(os.path.join(self.runtime, "spec.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f)
        log.keep_report_in(os.path.join(self.runtime, SUPERVISOR_REPORT))  # for GET-LOG
        self.ctx = zmq.Context()
        self.status = self.ctx.socket(zmq.PULL)
        self.status.setsockopt(zmq.LINGER, 0)
        self.status.bind(supervisor_endpoint(self.runtime))
        self.reload_sock = self.ctx.socket(zmq.PAIR)
        self.reload_sock.setsockopt(zmq.LINGER, 0)
        self.reload_sock.bind(reload.reload_endpoint(self.runtime))
        # tells the core that a peer died (ipc.PeerLost), so its deliveries settle at once
        self.core_link = self.ctx.socket(zmq.DEALER)
        self.core_link.setsockopt(zmq.LINGER, 0)
        self.core_link.setsockopt(zmq.IDENTITY, b"supervisor")
        self.core_link.connect(core_endpoint(self.runtime))
        self.broker = SocketBroker(self.runtime)  # owns the listening sockets
        self.poller = zmq.Poller()
        for sock in (self.status, self.reload_sock, self.broker.fileno()):
            self.poller.register(sock, zmq.POLLIN)  # pyzmq reports a plain socket by its fd
        self.children: dict[str, spawn.Child] = {}
        self.generations: dict[str, int] = {}
        self.restart_times: dict[str, collections.deque] = {}
        self.restart_counts: dict[str, int] = {}
        self.stopping = False
        self.reload_requested = False
        self.reload_pending: Optional[dict] = None
        self._reload_ids = 0
        self.spawn_prepared = False

    @property
    def worker_names(self) -> list:
        return [f"worker{i}" for i in range(self.spec["workers"])]

    def peer_index(self, name: str) -> int:
        """Workers are peers 0..n-1 of the core, the agent is peer n."""
        return self.spec["workers"] if name == "agent" else int(name[len("worker"):])

    def _spawn(self, name: str) -> None:
        """Start one child (``supervisor.spawn``: forked from this pre-imported process)."""
        peers = str(self.spec["workers"] + 1)
        kind = name if name in ("core", "agent") else "worker"
        args = ["--ipc", self.runtime]
        if name != "core":
            args += ["--index", str(self.peer_index(name)), "--peers", peers,
                     "--generation", str(self.generations.get(name, 0))]
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}  # only we notify
        self.children[name] = spawn.start_child(kind, args, env)

    def _poll(self, timeout_ms: int) -> dict:
        """Wait for the supervisor's sockets; listener requests from workers are served here."""
        try:
            ready = dict(self.poller.poll(timeout_ms))
        except zmq.ZMQError:  # EINTR: a signal arrived
            return {}
        if self.broker.fileno() in ready:
            self.broker.serve()
        return ready

    def _await_ready(self, names: set) -> Optional[str]:
        """Wait (bounded) until every named child reports ready; return an error text if not."""
        deadline = time.monotonic() + START_TIMEOUT
        waiting = set(names)
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"timed out waiting for {', '.join(sorted(waiting))} to start"
            if self.status in self._poll(int(min(remaining, 0.2) * 1000)):
                error = self._status_reports(waiting)
                if error:
                    return error
            dead = self._dead_child()
            if dead:
                # a child that failed reports why just before it exits: prefer its words
                while self.status.poll(200):
                    error = self._status_reports(waiting)
                    if error:
                        return error
                return dead
        return None

    def _status_reports(self, waiting: set) -> Optional[str]:
        _, messages = ipc.decode_batch(self.status.recv_multipart())
        for msg in messages:
            name = msg.kind if msg.kind != "worker" else f"worker{msg.index}"
            if msg.status == "failed":
                return msg.detail or f"{name} failed to start"
            waiting.discard(name)
        return None

    def _dead_child(self) -> Optional[str]:
        for name, proc in self.children.items():
            code = proc.poll()
            if code is not None:
                return f"{name} process {proc.pid} {describe_exit(code)}"
        return None

    def bind_listeners(self) -> Optional[str]:
        """Bind every AMQP listener once, exclusively, before any child starts.

        A listener that cannot be bound is logged as 1.19 does (``SERVER (error) Listener error
        on HOST:PORT: REASON - listen on HOST:PORT (proton:io)``); the text returned is 1.19's
        critical line, ``Shutting down, required listener failed HOST:PORT``.
        HTTP listeners (``http: yes``) are bound here too and served by the workers
        (router_io/httpstream.py: WebSocket, static files; /metrics and /healthz via the agent).
        """
        for settings in self.spec.get("listeners", []):
            try:
                self.broker.open(settings)
            except ListenerError as exc:
                # the two lines 1.19 logs (it logs them after "Operational"; we never get there)
                where = f"{settings.get('host') or ''}:{settings.get('port', 'amqp')}"
                if settings.get("http") or settings.get("httpRootDir"):
                    self.log.log("SERVER", "error", f"HTTP l{str(exc)[1:]}")
                    self.log.log("SERVER", "notice", f"Error listening for HTTP on {where}")
                else:
                    self.log.log("SERVER", "error", f"{exc} - listen on {where} (proton:io)")
                return f"Shutting down, required listener failed {where}"
            if settings.get("http") or settings.get("httpRootDir"):
                self.log.log("SERVER", "notice", "Listening for HTTP on "
                             f"{settings.get('host') or ''}:{settings.get('port', 'amqp')}")
        for settings in self.spec.get("connectors", []):
            self.broker.add_connector(settings)
        return None

    def start(self) -> Optional[str]:
        error = self._prepare_spawn()
        if error:
            return error
        self._spawn("core")
        error = self._await_ready({"core"})
        if error:
            return error
        self._spawn("agent")
        for name in self.worker_names:
            self._spawn(name)
        return self._await_ready({"agent", *self.worker_names})

    def _prepare_spawn(self) -> Optional[str]:
        """Once, before the first child: import what the children will be forked from."""
        if self.spawn_prepared:
            return None
        self.spawn_prepared = True
        if not spawn.can_name_children():
            self.log.log("SERVER", "warning", "setproctitle is not installed: the router's "
                         "processes start as separate interpreters (more memory)")
        elif spawn.forking():
            try:
                spawn.preload()
            except Exception as exc:  # noqa: BLE001 - a broken install: say what, exit 1
                return f"cannot load the router's modules: {type(exc).__name__}: {exc}"
        return None

    def watch(self) -> int:
        """Run until a signal (exit 0) or a crash loop (exit 1); restart children that die."""
        while not self.stopping:
            if self.reload_requested and self.reload_pending is None:
                self.reload_requested = False
                self._start_reload()
            ready = self._poll(WATCH_INTERVAL_MS)
            if self.status in ready:
                self._late_reports()
            if self.reload_sock in ready:
                self._reload_answer()
            if self.reload_pending and time.monotonic() > self.reload_pending["deadline"]:
                self.log.log("SERVER", "error", "Configuration reload: the agent did not answer "
                                                "in time; the file's changes may be partly applied")
                self.reload_pending = None
                notify.ready(self.status_text())
            for name, proc in list(self.children.items()):
                code = proc.poll()
                if code is not None and not self.stopping and self.children.get(name) is proc:
                    if not self._restart(name, proc, code):
                        return 1
        return 0

    def _late_reports(self) -> None:
        """Reports of restarted children: "ready" is logged, "failed" too (its exit follows)."""
        while True:
            try:
                frames = self.status.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                _, messages = ipc.decode_batch(frames)
            except ipc.IpcError:
                continue
            for msg in messages:
                name = msg.kind if msg.kind != "worker" else f"worker{msg.index}"
                if msg.status == "ready":
                    self.log.log("SERVER", "notice", f"{name} process {msg.pid} is running again")
                else:
                    self.log.log("SERVER", "error", f"{name} process {msg.pid} failed to start: "
                                                    f"{msg.detail}")

    # --- supervision: a dead child is restarted in place (see DESIGN.md) ------------------------
    def _restart(self, name: str, proc: spawn.Child, code: int) -> bool:
        """Restart a dead child; False when it is crash-looping (the router then exits 1)."""
        now = time.monotonic()
        history = self.restart_times.setdefault(name, collections.deque())
        while history and now - history[0] > RESTART_WINDOW:
            history.popleft()
        what = f"{name} process {proc.pid} {describe_exit(code)}"
        if len(history) >= RESTART_LIMIT:
            self.log.log("SERVER", "critical",
                         f"{what}; it was restarted {len(history)} times in the last "
                         f"{RESTART_WINDOW:.0f} s, shutting the router down")
            return False
        history.append(now)
        self.restart_counts[name] = self.restart_counts.get(name, 0) + 1
        self._write_restart_counts()
        if name == "core":
            self.log.log("SERVER", "critical", f"{what}; restarting the router's processes "
                                               "(listening sockets stay open)")
            error = self._restart_all()
            if error:
                self.log.log("SERVER", "critical", f"Router restart failed: {error}")
                return False
            self.log.log("SERVER", "notice", "Router processes restarted, "
                                             f"{self.spec['workers']} Threads Running")
            return True
        self.log.log("SERVER", "critical", f"{what}; restarting it")
        try:
            self.core_link.send_multipart(ipc.encode_batch(
                ipc.SUPERVISOR_PEER, [ipc.PeerLost(self.peer_index(name), proc.pid)]), zmq.NOBLOCK)
        except zmq.Again:
            pass  # the core is gone too: its own restart follows
        self.generations[name] = self.generations.get(name, 0) + 1
        self._spawn(name)
        return True

    def _restart_all(self) -> Optional[str]:
        """The core died: every other child goes too (their state names the dead core's), then
        all start again from a clean slate. The supervisor keeps the listening sockets."""
        others = [proc for name, proc in self.children.items() if name != "core"]
        for proc in others:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # workers close their clients' connections
        deadline = time.monotonic() + CORE_RESTART_GRACE
        for proc in others:
            try:
                proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2)
        while self.status.poll(0):  # whatever they reported while going is stale
            self.status.recv_multipart()
        for name in self.children:
            self.generations[name] = self.generations.get(name, 0) + 1
        self.children = {}
        return self.start()

    def _write_restart_counts(self) -> None:
        """restarts.json in the runtime directory: the agent exports it as metrics."""
        path = os.path.join(self.runtime, "restarts.json")
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(self.restart_counts, f)
            os.replace(path + ".tmp", path)
        except OSError:
            pass

    def status_text(self) -> str:
        return f"Operational, {self.spec['workerSizing']['threads']} Threads Running"

    def request_stop(self, *_: object) -> None:
        self.stopping = True

    def request_reload(self, *_: object) -> None:
        self.reload_requested = True

    # --- SIGHUP: reload the configuration file (supervisor/reload.py) --------------------------------
    def _start_reload(self) -> None:
        notify.reloading()
        self.log.reopen()  # logrotate's postrotate SIGHUP (the other processes notice by stat)
        path = self.config_path
        self.log.log("SERVER", "notice", f"Reloading configuration from {path}")
        try:
            if path is None:
                raise ConfigError("no configuration file to reload")
            new_spec = build_spec(load_config(path))
            RouterLog(new_spec["logs"])  # validates the log sections
        except (ConfigError, LogConfigError) as exc:
            self.log.log("SERVER", "error", f"Configuration reload failed, the running "
                                            f"configuration is unchanged: {exc}")
            notify.ready(self.status_text())
            return
        plan = reload.plan_reload(self.spec, new_spec)
        for warning in plan.warnings:
            self.log.log("SERVER", "warning", f"Configuration reload: {warning}")
        if not plan.changes:
            self.log.log("SERVER", "notice", "Configuration reloaded: nothing to change")
            notify.ready(self.status_text())
            return
        self._reload_ids += 1
        try:
            # the agent connects its end asynchronously: right after start-up (a SIGHUP just
            # after "Operational") the pipe may not be up yet, so wait a little for it
            if not self.reload_sock.poll(RELOAD_CONNECT_MS, zmq.POLLOUT):
                raise zmq.Again()
            self.reload_sock.send(reload.encode_message("reload", id=self._reload_ids,
                                                        changes=plan.changes), zmq.NOBLOCK)
        except zmq.Again:
            self.log.log("SERVER", "error", "Configuration reload failed: the agent is not "
                                            "listening; the running configuration is unchanged")
            notify.ready(self.status_text())
            return
        self.reload_pending = {"id": self._reload_ids, "plan": plan,
                               "deadline": time.monotonic() + RELOAD_TIMEOUT}

    def _reload_answer(self) -> None:
        try:
            msg = reload.decode_message(self.reload_sock.recv(zmq.NOBLOCK))
        except (zmq.Again, ValueError):
            return
        pending = self.reload_pending
        if msg.get("kind") != "result" or pending is None or msg.get("id") != pending["id"]:
            return
        self.reload_pending = None
        plan = pending["plan"]
        applied = [plan.changes[i] for i in msg.get("applied", []) if 0 <= i < len(plan.changes)]
        self.spec = reload.apply_changes(self.spec, applied)
        for change in applied:
            if change["type"] == "log":
                self._configure_own_log(change["attributes"])
        if msg.get("ok"):
            self.log.log("SERVER", "notice", f"Configuration reloaded: {plan.summary()}")
        else:
            self.log.log("SERVER", "error", f"Configuration reload partly failed "
                                            f"({len(applied)} of {len(plan.changes)} changes "
                                            f"applied): {msg.get('detail')}")
        notify.ready(self.status_text())

    def _configure_own_log(self, attributes: dict) -> None:
        attrs = dict(attributes)
        if attrs.get("enable") == "default":
            default = next((e for e in self.spec["logs"]
                            if str(e.get("module")).upper() == "DEFAULT"), {})
            attrs["enable"] = default.get("enable") or "info+"
        try:
            self.log.configure(attrs)
        except LogConfigError as exc:
            self.log.log("SERVER", "error", f"log settings not applied in the supervisor: {exc}")

    def shutdown(self) -> None:
        """Stop the children in order, each group bounded by STOP_TIMEOUT: the workers first
        (no more traffic), then the agent (its metrics sink takes a last sample from the core,
        so the file ends with every count), then the core."""
        workers = [p for n, p in self.children.items() if n not in ("agent", "core")]
        for group in (workers, [self.children.get("agent")], [self.children.get("core")]):
            group = [proc for proc in group if proc is not None]
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            for proc in group:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(2)
        self.status.close(0)
        self.reload_sock.close(0)
        self.core_link.close(0)
        self.ctx.term()
        self.broker.close_all()
        shutil.rmtree(self.runtime, ignore_errors=True)
