"""The agent process: the router's control plane, a peer of the core like the I/O workers.

It reaches the data path through the same IPC as a worker: it opens an *internal* connection in
the core and attaches links on it, so the management agent and the routing-protocol engines send
and receive real AMQP messages through the core. The engines themselves live in their own modules
and are driven from here with the current time (timers are deadlines).

Must not import router_io (the agent owns no client sockets).
"""
from __future__ import annotations

import errno
import os
import sys
import time
from typing import Any, Optional

import msgpack
import zmq

from agent.httpserver import MetricsService
from agent.interior import INPUT_TYPES as ROUTING_INPUTS, InteriorRouting, is_journal, replay
from agent.management.agent import ManagementAgent
from agent.reload import ReloadApplier
from agent.routing import Log
from common import ipc, listenfds, zmqcalls
from common.identity import VERSION
from agent.management.entities import PREFIX as _T
from common.reloadmsg import decode_message, reload_endpoint
from common.log import RouterLog
from common.procutil import (SignalWake, child_start, core_endpoint, run_profiled, status_socket,
                             watch_sigterm)

#: In the router's runtime directory: the routing protocol's state, for a restarted agent
#: (msgpack: written at once after each MAU that changed what the core holds, so with 100,000
#: mobile addresses its cost counts; JSON took ten times as long)
ROUTING_STATE_FILE = "routing-state.msgpack"
LAST_SAMPLE_TIMEOUT = 3.0  # the last metrics sample at shutdown (the supervisor waits 5 s)
DRAIN_BATCHES = 1000  # batches from the core taken before the routing engine ticks, at most


class ControlPlane:
    clock = staticmethod(time.monotonic)

    def __init__(self, spec: dict, index: int, peer_count: int, ipc_dir: str,
                 generation: int = 0) -> None:
        self.spec = spec
        self.index = index
        self.log = RouterLog(spec.get("logs", []))
        # a restarted agent (generation > 0) mints ids its dead predecessor never used
        self.new_id = ipc.id_allocator(index, peer_count, generation)
        self.ctx = zmq.Context()
        self.core = self.ctx.socket(zmq.DEALER)
        self.core.setsockopt(zmq.IDENTITY, b"p%d" % index)
        self.core.setsockopt(zmq.LINGER, 0)
        self.core.connect(core_endpoint(ipc_dir))
        self.status = status_socket(self.ctx, ipc_dir)
        self.outbox: list = []
        self.control: list = []  # management messages: sent in their own batch (coreproc.py)
        self.running = True
        self.wake: Optional[SignalWake] = None  # main(): procutil.watch_sigterm
        self.failed = False
        self.handlers: dict = {}  # effect type -> callable, filled by the engines
        workers = int(spec.get("workers", peer_count - 1))
        self.ipc_dir = ipc_dir
        self.management = ManagementAgent(spec, self.log, self.new_id, self.send,
                                          self.send_control, workers, VERSION,
                                          record=self._record_change)
        if generation > 0:  # what the dead agent had applied at run time
            try:
                self.management.replay(listenfds.runtime_changes(ipc_dir))
            except (OSError, ValueError) as exc:
                self.log.log("AGENT", "error", f"runtime configuration changes not recovered "
                                               f"(management shows the file's only): {exc}")
        self.handlers.update(self.management.handlers())
        # interior mode: the routing protocol (agent/interior.py), fed by the core's
        # RouterLinkUp/Down, ControlIn and LocalAddress; its messages go in the normal outbox
        # The instance is fixed for the router's life (startedAt is the same for every agent
        # generation), so no other router sees a restarted agent as a restarted router.
        instance = spec.get("instance")
        if instance is None:
            instance = int(spec.get("startedAt") or time.time())
        self.interior = InteriorRouting.from_spec(spec, int(instance), self.log.enabled)
        runtime = spec.get("runtime")
        self.routing_state_path = (os.path.join(runtime, ROUTING_STATE_FILE)
                                   if runtime and self.interior is not None else None)
        if self.interior is not None:
            if generation > 0:
                self._restore_routing_state()
            for cls in ROUTING_INPUTS:
                self.handlers[cls] = self._on_routing_input
        # /metrics and /healthz asked by the workers (a Unix socket), and the metrics sink
        self.poller = zmq.Poller()
        self.metrics = MetricsService(spec, self.poller, self.send_control, self._log_http,
                                      self.management.started)
        store = self.management.store
        self.metrics.counts = lambda: {  # as the router entity counts them (management)
            "linkRouteCount": len(store.of_type(_T + "router.config.linkRoute")),
            "autoLinkCount": len(store.of_type(_T + "router.config.autoLink"))}
        self.handlers[ipc.CoreState] = self._on_core_state
        # SIGHUP reloads: the supervisor sends the file's changes here (supervisor/reload.py)
        self.reload_sock = self.ctx.socket(zmq.PAIR)
        self.reload_sock.setsockopt(zmq.LINGER, 1000)
        self.reload_sock.connect(reload_endpoint(ipc_dir))
        self.reloads = ReloadApplier(self.management.submit, self._reload_report,
                                     lambda level, text: self.log.log("AGENT", level, text))

    def _record_change(self, change: dict) -> None:
        """Keep an applied runtime change in the supervisor's journal for restarted children."""
        try:
            reply, _ = listenfds.request(self.ipc_dir, {"op": "record", "change": change})
        except (OSError, ValueError, TypeError) as exc:
            reply = {"ok": False, "error": str(exc)}
        if not reply.get("ok"):
            self.log.log("AGENT", "error", f"runtime change not kept for restarts: "
                                           f"{reply.get('error')}")

    def _log_http(self, level: str, text: str) -> None:
        self.log.log("HTTP", level, text)

    def _on_core_state(self, fx: ipc.CoreState, now: float) -> None:
        if not self.metrics.queries.on_core_state(fx):
            self.management.on_core_state(fx, now)

    def _reload_report(self, data: bytes) -> None:
        try:
            self.reload_sock.send(data, zmq.NOBLOCK)
        except zmq.Again:
            self.log.log("AGENT", "error", "could not report a configuration reload result")

    def _on_reload(self) -> None:
        while True:
            try:
                data = self.reload_sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = decode_message(data)
            except ValueError as exc:
                self.log.log("AGENT", "error", f"bad configuration reload request: {exc}")
                continue
            if msg["kind"] == "reload":
                self.reloads.on_request(msg["id"], msg.get("changes") or [], time.monotonic())

    def _on_routing_input(self, msg: tuple, now: float) -> None:
        self._routing_out(self.interior.handle(msg, now))

    def _routing_out(self, outputs: list) -> None:
        for item in outputs:
            if type(item) is Log:
                self.log.log(item.module, item.level, item.text)
            else:
                self.outbox.append(item)

    def _routing_poll(self, now: float) -> None:
        """Tick the routing engine if it took input since its last tick or is due; save its
        state when due (before the outbox goes: the file is never behind what was sent)."""
        if self.interior is not None:
            self._routing_out(self.interior.poll(now))
            state = self.interior.state_to_save(now)
            if state is not None and self.routing_state_path is not None:
                self._save_routing_state(state)

    def _save_routing_state(self, record: dict) -> None:
        """The whole state replaces the file (a new file moved over it); a journal record is
        appended to it (interior.py: what changed since the last record)."""
        path = self.routing_state_path
        try:
            data = msgpack.packb(record, use_bin_type=True)
            if is_journal(record):
                with open(path, "ab") as f:
                    f.write(data)
                return
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        except (OSError, TypeError, ValueError) as exc:
            self.log.log("ROUTER", "error", f"could not save the routing state: {exc}")

    def _restore_routing_state(self) -> None:
        """A restarted agent carries on with its predecessor's routing state, if it saved one."""
        path = self.routing_state_path
        if path is None or not os.path.exists(path):
            return
        try:
            with open(path, "rb") as f:
                # (the records end before one cut short by a stop while it was appended:
                # what it said never left the agent)
                records = list(msgpack.Unpacker(f, raw=False, strict_map_key=False,
                                                max_buffer_size=0))
            state = replay(records)
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            self.log.log("ROUTER", "warning", f"routing state not restored: {exc}")
            return
        try:
            if not isinstance(state, dict):
                raise ValueError("not a map")
            self._routing_out(self.interior.restore_state(state, time.monotonic()))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.log.log("ROUTER", "warning", f"routing state not restored: {exc!r}")
            self.interior = InteriorRouting.from_spec(self.spec, self.interior.instance,
                                                      self.log.enabled)

    def send(self, *messages: tuple) -> None:
        self.outbox.extend(messages)

    def send_control(self, *messages: tuple) -> None:
        self.control.extend(messages)

    def _flush(self) -> None:
        if self.outbox:
            zmqcalls.send(self.core, ipc.encode_frame(self.index, self.outbox))
            self.outbox = []
        if self.control:
            zmqcalls.send(self.core, ipc.encode_frame(self.index, self.control))
            self.control = []

    def _timeout_ms(self) -> int:
        deadlines = [d for d in (self.management.next_deadline(), self.metrics.next_deadline(),
                                 self.interior.next_deadline() if self.interior else None)
                     if d is not None]
        deadline = min(deadlines) if deadlines else None
        if deadline is None:
            return 1000
        if deadline == float("-inf"):
            return 0
        return max(0, min(1000, int((deadline - time.monotonic()) * 1000) + 1))

    def run(self) -> None:
        self.send(ipc.PeerHello(self.index, "agent", os.getpid()))
        self.management.start()
        # the management links go to the core before we report ready: a client that connects
        # once the router says "Operational" must find $management attached
        self._flush()
        error = self.metrics.start(self.ipc_dir)
        self.status.send_multipart(ipc.encode_batch(self.index, [
            ipc.ChildStatus("agent", self.index, os.getpid(), "failed" if error else "ready",
                            error or "")]))
        if error:
            self.running = False
            self.failed = True
        poller = self.poller
        poller.register(self.core, zmq.POLLIN)
        poller.register(self.reload_sock, zmq.POLLIN)
        wake = self.wake
        if wake is not None:  # registered last, so listed last
            poller.register(wake.sock, zmq.POLLIN)
        while self.running:
            self._flush()
            try:
                ready = poller.poll(self._timeout_ms())
            except zmq.ZMQError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            for target, mask in ready:
                if target is self.core:
                    self._drain()
                elif target is self.reload_sock:
                    self._on_reload()
                elif wake is not None and target is wake.sock:
                    wake.drain()
                elif isinstance(target, int):
                    self.metrics.server.handle(target, mask)
            now = time.monotonic()
            self.management.tick(now)
            self.metrics.tick(now)
            self._routing_poll(now)
        self._last_sample()
        self.metrics.close()
        self.reload_sock.close(0)
        self.core.close(0)
        # a failure report must reach the supervisor before we go: linger 0 would drop it
        self.status.close(2000 if self.failed else 0)
        self.ctx.term()

    def _last_sample(self) -> None:
        """Stopping: one more metrics sample (the sink's, when there is one), so the file has
        the final counts of what went away since the last one. The supervisor stops the core
        only after this process, so the core answers; bounded by LAST_SAMPLE_TIMEOUT."""
        deadline = time.monotonic() + LAST_SAMPLE_TIMEOUT
        started = False
        while time.monotonic() < deadline:
            if not self.metrics.sampling:  # a sample in flight is finished first
                if started or not self.metrics.sample_now():
                    return
                started = True
            self._flush()
            wait_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                if self.core.poll(min(wait_ms, 100), zmq.POLLIN):
                    self._drain()
            except zmq.ZMQError as exc:
                if exc.errno != errno.EINTR:
                    raise
            self.metrics.queries.tick(time.monotonic())
        self.log.log("AGENT", "warning", "last metrics sample not taken: the router core did "
                                         "not answer")

    def _drain(self) -> None:
        """Take the batches waiting from the core (at most DRAIN_BATCHES), then tick the
        routing engine once: after a while busy or without CPU, the neighbours' HELLOs waiting
        behind other batches count before the engine expires the routers that sent them."""
        core, recv, more = self.core, zmqcalls.recv, zmqcalls.more
        for _ in range(DRAIN_BATCHES):
            try:  # (pyzmq's recv_multipart and a zmq.Again raised at the end cost more than
                frame = recv(core, zmqcalls.NOBLOCK)  # a management request's own work)
            except zmq.Again:
                break
            frames = [frame]
            while more(core):  # a batch is one frame: decode_batch says what else is not
                frames.append(recv(core))
            _, effects = ipc.decode_batch(frames)
            now = self.clock()
            for effect in effects:
                handler = self.handlers.get(type(effect))
                if handler is not None:
                    handler(effect, now)
            if not zmqcalls.readable(core):
                break
        self._routing_poll(self.clock())

    def stop(self, *_: Any) -> None:
        self.running = False


def main(argv: Optional[list] = None) -> int:
    args, spec = child_start("qdrouterd-agent", argv)
    plane = ControlPlane(spec, args.index, args.peers, args.ipc, args.generation)
    plane.wake = watch_sigterm(plane.stop)  # SIGTERM ends the poll at once
    run_profiled("agent", plane.run)
    return 1 if plane.failed else 0


if __name__ == "__main__":
    sys.exit(main())
