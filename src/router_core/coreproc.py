"""The core process loop: the only place the core meets ZeroMQ and the clock.

Binds one ROUTER socket; every worker and the agent connect a DEALER with identity ``p<index>``.
Each iteration drains every batch that is ready, feeds it to the sans-I/O core with the current
time, then flushes the effects once: one batch per peer per iteration (batch, then flush).
Payload frames pass from the inbound peer's batch to the outbound peer's batch untouched.

Management plumbing (CoreQuery, CoreState, ConfigChange, ConfigResult) is handled here, never by
RouterCore.handle: CoreQuery is answered with ``core.snapshot()`` taken between batches (one
consistent view); a ConfigChange is applied to the core where it concerns the core
(``router.config.address`` -> ``core.set_address_config``, ``log`` -> this process's log),
answered for the core as ConfigResult(peer=-1), and relayed to every worker, whose
ConfigResults are relayed back to the agent. Contract: management messages travel in their own
batches (the agent and the workers send them apart from data-path commands), so the hot path
only looks at the first message of a batch.

A command the core cannot handle (an unknown type, a malformed field) is logged and the
connection it concerns closed (``RouterCore.command_failed``); the rest of its batch is handled
and the process goes on. Protocol errors the core detected itself (``core.errors``, see
lifecycle.py, linkends.py) are logged once per loop.

Route computation (interior mode) happens here too, off the hot path: the agent's batches (one
peer index, so one integer comparison per batch) are scanned for its topology messages
(``LinkState``, ``RouterGone``, ``TopologyReset``), which go to the process's
:class:`router_core.routetable.RouteTable`, never to RouterCore.handle. Before the next other
command of that batch, and at its end, the table computes the routes (compiled pathcomp) and the
core gets the ``RouteUpdate`` it handles as it always has; the agent gets ``Reachable`` back.
A snapshot (CoreQuery) carries the table's ``router.node`` rows as ``nodes`` (interior only).
"""
from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from typing import Any, Optional

import zmq

from common import ipc, listenfds, zmqcalls
from common.log import RouterLog
from router_core import corelog, corepage
from router_core.corestate import router_view
from common.procutil import (SignalWake, child_start, core_endpoint, run_profiled, status_socket,
                             steady_gc, watch_sigterm)
from router_core.core_select import get_core_class
from router_core.routetable import TOPOLOGY_TYPES, RouteTable

_MAX_BATCHES_PER_LOOP = 512
_MANAGEMENT = (ipc.CoreQuery, ipc.ConfigChange, ipc.ConfigResult, ipc.PeerLost, ipc.LogQuery,
               ipc.LogReport)
NOT_SUPPORTED = "not supported"
# exchange/binding entity types (long, short and file names) -> is it the binding
_EXCHANGE_TYPES = {"router.config.exchange": False, "exchange": False,
                   "router.config.binding": True, "binding": True}


class _NotSupported(Exception):
    """A ConfigChange this core cannot make: ConfigResult status NOT_SUPPORTED (501)."""
GONE_QUERY = "snapshot+gone>"  # CoreQuery.what: a snapshot with the removed entities after N


class CoreProcess:
    def __init__(self, spec: dict, ipc_dir: str) -> None:
        router = spec["router"]
        self.log = RouterLog(spec.get("logs", []))
        core_cls = get_core_class()
        self.core = core_cls(spec["router_id"],
                             default_distribution=router.get("defaultDistribution", "balanced"),
                             addresses=spec.get("addresses", []),
                             link_routes=spec.get("linkRoutes", []),
                             exchanges=spec.get("exchanges", []),
                             bindings=spec.get("bindings", []),
                             mode=router.get("mode", "standalone"),
                             test_hooks=bool(spec.get("testHooks")),
                             allow_resumable_link_route=router.get("allowResumableLinkRoute",
                                                                   True) is not False)
        self.pager = corepage.Pager(self.core)  # scoped management answers
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        # a restarted peer connects again with the identity of the one that died
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.sock.bind(core_endpoint(ipc_dir))
        self.status = status_socket(self.ctx, ipc_dir)
        self.identities: dict[int, bytes] = {}
        self.worker_count = int(spec.get("workers", 1))
        self.agent_peer = self.worker_count  # workers are peers 0..n-1, the agent is peer n
        self.address_config: list = [dict(a) for a in spec.get("addresses", [])]
        for attrs in spec.get("autoLinks", []):  # validated by the supervisor
            self.core.add_auto_link(dict(attrs))
        self.routes: Optional[RouteTable] = None  # interior mode: topology and route computation
        if router.get("mode") == "interior":
            self.routes = RouteTable(spec["router_id"], str(router.get("area") or "0"))
        self.to_agent: list = []  # Reachable answers, sent after the core's own effects
        self.traced: dict[int, bool] = {}  # connection id -> enableProtocolTrace set by management
        self.running = True
        self.wake: Optional[SignalWake] = None  # main(): procutil.watch_sigterm
        self.trace_actions = False  # ROUTER_CORE trace: "Core action 'NAME'" per command
        self._log_levels_changed()
        self.log.listeners.append(self._log_levels_changed)
        self.log.log("ROUTER_CORE", "info",
                     f"Router core started ({core_cls.__module__}), router id {spec['router_id']}")
        self.log.log("ROUTER_CORE", "info",  # as 1.19's stuck delivery detection module
                     f"Stuck delivery detection: Scan interval: {int(self.core.stuck_interval)} "
                     f"seconds, Delivery age threshold: {int(self.core.stuck_age)} seconds")
        self.log.log("ROUTER_CORE", "info",  # as 1.19's streaming link scrubber module
                     f"Streaming link scrubber: Scan interval: {int(self.core.sl_interval)} "
                     f"seconds, max free pool: {self.core.sl_pool_max} links")

    def _log_levels_changed(self) -> None:
        """What the core and this loop log depends on the levels: recomputed here, read as one
        flag per batch (trace) or per connection/link event (info), never per message."""
        self.core.log_info = self.log.enabled("ROUTER_CORE", "info")
        if not self.core.log_info:
            self.core.info_logs = []
        self.trace_actions = self.log.enabled("ROUTER_CORE", "trace")
        self.core.policy_counts.trace = self.log.enabled("POLICY", "trace")

    def _trace(self, commands: list) -> None:
        for cmd in commands:
            name = corelog.action_name(cmd)
            if name is not None:
                self.log.log("ROUTER_CORE", "trace", f"Core action '{name}'")

    def replay_runtime_changes(self, ipc_dir: str) -> None:
        """A core started after the first (a restart from a clean slate): the addresses and log
        levels management changed at run time, before any peer connects."""
        try:
            changes = listenfds.runtime_changes(ipc_dir)
        except (OSError, ValueError) as exc:
            self.log.log("ROUTER_CORE", "error", f"runtime changes not recovered: {exc}")
            return
        for change in changes:
            entity_type = ipc.short_type(str(change.get("type", "")))
            attributes = dict(change.get("attributes") or {})
            try:
                if entity_type in ("router.config.address", "address"):
                    self._change_addresses(str(change.get("op")), attributes)
                elif entity_type in ("router.config.linkRoute", "linkRoute"):
                    self._change_link_routes(str(change.get("op")), attributes)
                elif entity_type in ("router.config.autoLink", "autoLink"):
                    self._change_auto_links(str(change.get("op")), attributes)
                elif entity_type in _EXCHANGE_TYPES:
                    self._change_exchanges(entity_type, str(change.get("op")), attributes)
                elif entity_type == "log" and change.get("op") == "update":
                    self.log.configure(attributes)
            except Exception as exc:  # noqa: BLE001 - the core must start all the same
                self.log.log("ROUTER_CORE", "error", f"runtime change not re-applied: {exc}")

    def run(self) -> None:
        self.status.send_multipart(ipc.encode_batch(-1, [
            ipc.ChildStatus("core", 0, os.getpid(), "ready", "")]))
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        wake = self.wake
        if wake is not None:  # registered last, so listed last
            poller.register(wake.sock, zmq.POLLIN)
        # the log lines of a pass (one a connection opened) leave in one write at its end
        self.log.hold_lines()
        try:
            self._loop(poller, wake)
        finally:
            self.log.flush()
        self.sock.close(0)
        self.status.close(0)
        self.ctx.term()

    def _loop(self, poller: zmq.Poller, wake: Any) -> None:
        sock, core = self.sock, self.core
        recv, more, readable = zmqcalls.recv, zmqcalls.more, zmqcalls.readable
        NOBLOCK = zmqcalls.NOBLOCK
        frame = commands = None
        while self.running:
            try:
                ready = poller.poll(1000)
            except zmq.ZMQError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if wake is not None and ready and ready[-1][0] is wake.sock:
                wake.drain()
            now = time.monotonic()
            for _ in range(_MAX_BATCHES_PER_LOOP if ready else 0):
                try:  # [identity, batch frame]: a ROUTER socket gives both parts or none
                    identity = recv(sock, NOBLOCK)
                    frame = recv(sock, NOBLOCK)
                except zmq.Again:
                    break
                if more(sock):  # not a batch (ipc.py): drop the whole message
                    while more(sock):
                        recv(sock, NOBLOCK)
                    self.log.log("ROUTER_CORE", "error", "dropping a malformed IPC batch: more "
                                                         "than one frame")
                    continue
                try:
                    peer, commands = ipc.decode_frame(frame)
                except ipc.IpcError as exc:
                    self.log.log("ROUTER_CORE", "error", f"dropping malformed IPC batch: {exc}")
                    continue
                if peer != ipc.SUPERVISOR_PEER:
                    self.identities[peer] = identity
                if commands and type(commands[0]) in _MANAGEMENT:
                    self.management_batch(peer, commands, now)
                elif peer == self.agent_peer and self.routes is not None:
                    self.agent_batch(peer, commands, now)
                else:
                    if self.trace_actions:
                        self._trace(commands)
                    try:
                        core.handle_batch(peer, commands, now)
                    except Exception as exc:  # noqa: BLE001 - the core outlives a bad command
                        self._batch_failed(peer, commands, now, exc)
                if not readable(sock):  # asked, not found by a failing receive (zmqcalls)
                    break
            # the last batch's frames (a big message's bytes) must not live on in this frame
            # until the next batch arrives: the core keeps only what it holds on purpose
            frame = commands = None
            core.tick(now)
            if core.info_logs:  # connections and links opened and closed (corelog.py)
                entries, core.info_logs = core.info_logs, []
                for text in corelog.lines(entries):
                    self.log.log("ROUTER_CORE", "info", text)
            if core.errors:  # peers' protocol errors (router_core/linkends.py)
                for text in core.take_errors():
                    self.log.log("ROUTER_CORE", "error", f"protocol error: {text}")
            if core.lr.logs:  # link routes (de)activated (linkroute.py)
                for level, text in core.lr.take_logs():
                    self.log.log("ROUTER_CORE", level, text)
            if core.al_logs:  # auto-links activated, failed, deactivated (autolinks.py)
                logs, core.al_logs = core.al_logs, []
                for text in logs:
                    self.log.log("ROUTER_CORE", "info", text)
            if core.policy_counts.logs:  # the router-wide policy decisions (policycount.py)
                for level, text in core.policy_counts.take_logs():
                    self.log.log("POLICY", level, text)
            self.log.flush()  # the pass's lines are written before its effects leave
            self.flush()

    def flush(self) -> None:
        for peer, effects in self.core.take_effects().items():
            identity = self.identities.get(peer)
            if identity is None or not effects:
                continue
            zmqcalls.send_routed(self.sock, identity, ipc.encode_frame(-1, effects))
        if self.to_agent:
            answers, self.to_agent = self.to_agent, []
            identity = self.identities.get(self.agent_peer)
            if identity is not None:
                zmqcalls.send_routed(self.sock, identity, ipc.encode_frame(-1, answers))

    # --- route computation (interior mode; the agent's batches only) ------------------------------
    def agent_batch(self, peer: int, commands: list, now: float) -> None:
        """The agent's batch: topology messages go to the route table, whose routes reach the
        core before the next other command (see the module docstring)."""
        routes, core = self.routes, self.core
        pending = False
        for cmd in commands:
            if type(cmd) in TOPOLOGY_TYPES:
                try:
                    routes.apply(cmd)
                except ValueError as exc:
                    self.log.log("ROUTER_CORE", "error", f"topology message dropped: {exc}")
                pending = True
                continue
            if pending:
                self._compute_routes(peer, now)
                pending = False
            try:
                core.handle(peer, cmd, now)
            except Exception as exc:  # noqa: BLE001 - the core outlives a bad command
                text = f"{type(cmd).__name__} from peer {peer} not handled: {exc!r}"
                self.log.log("ROUTER_CORE", "error", text)
                try:
                    core.command_failed(peer, cmd, text)
                except Exception as exc2:  # noqa: BLE001
                    self.log.log("ROUTER_CORE", "error", f"closing after {text}: {exc2!r}")
        if pending:
            self._compute_routes(peer, now)

    def _compute_routes(self, peer: int, now: float) -> None:
        try:
            update, reachable = self.routes.compute(time.time())
        except (TypeError, ValueError) as exc:  # validated on apply: never expected
            self.log.log("ROUTER_CORE", "error", f"route computation failed: {exc}")
            return
        if update is not None:
            self.core.handle(peer, update, now)
        if reachable is not None:
            self.to_agent.append(reachable)

    def _batch_failed(self, peer: int, commands: list, now: float, exc: Exception) -> None:
        """A command of ``peer``'s batch raised ``exc``: log it, close the connection it
        concerns (the core's ``command_failed``) and handle the rest of the batch. Never
        raises: no peer input may stop the core process."""
        core = self.core
        while True:
            pos = core.batch_pos
            cmd = commands[pos]
            text = f"{type(cmd).__name__} from peer {peer} not handled: {exc!r}"
            self.log.log("ROUTER_CORE", "error", text)
            self.log.log("ROUTER_CORE", "debug", "".join(traceback.format_exception(exc)))
            try:
                core.command_failed(peer, cmd, text)
            except Exception as exc2:  # noqa: BLE001
                self.log.log("ROUTER_CORE", "error", f"closing after {text}: {exc2!r}")
            commands = commands[pos + 1:]
            try:
                core.handle_batch(peer, commands, now)
                return
            except Exception as next_exc:  # noqa: BLE001 - the next bad one, same treatment
                exc = next_exc

    # --- management plumbing (off the hot path) --------------------------------------------------
    def management_batch(self, peer: int, commands: list, now: float) -> None:
        for cmd in commands:
            kind = type(cmd)
            if kind is ipc.CoreQuery:
                self._send_alone(peer, ipc.CoreState(cmd.request_id, self._query(cmd.what)))
            elif kind is ipc.ConfigChange:
                self._config_change(peer, cmd)
            elif kind is ipc.ConfigResult or kind is ipc.LogReport:
                self._send_alone(self.agent_peer, cmd)
            elif kind is ipc.LogQuery:  # this process's report, then every worker's
                self._send_alone(peer, ipc.LogReport(cmd.request_id, -1, self.log.report()))
                for worker in range(self.worker_count):
                    self._send_alone(worker, cmd)
            elif kind is ipc.PeerLost:
                self._peer_lost(cmd)
            else:
                try:
                    self.core.handle_batch(peer, [cmd], now)
                except Exception as exc:  # noqa: BLE001 - the core outlives a bad command
                    self._batch_failed(peer, [cmd], now, exc)

    def _peer_lost(self, cmd: ipc.PeerLost) -> None:
        """A dead peer's connections close now, so its in-flight deliveries settle at once.

        Effects still queued for it may reach its successor (same ZeroMQ identity): they name
        ids of the dead process, which a restarted one never mints (ipc.id_allocator
        generations), so it ignores them.
        """
        self.core.peer_lost(cmd.peer)
        self.log.log("ROUTER_CORE", "info", f"peer {cmd.peer} (process {cmd.pid}) lost: its "
                                            "connections are closed")

    def _query(self, what: str) -> dict:
        if what == "snapshot":
            return self._completed(self.core.snapshot())
        scoped = corepage.parse(what) if isinstance(what, str) else None
        if scoped is not None:  # a page or one entity of one kind (corepage.py)
            pager = self.pager
            state = pager.answer(scoped, router_view(self.core, len(pager.controls())))
            return self._completed(state, full=False)
        if what.startswith(GONE_QUERY):  # the metrics sink: removed entities it has not seen
            try:
                return self._completed(self.core.snapshot(int(what[len(GONE_QUERY):])))
            except ValueError:
                pass
        return {"error": f"unknown query '{what}'"}

    def _completed(self, state: dict, full: bool = True) -> dict:
        """The route table's ``router.node`` rows as ``nodes`` (interior mode only), and the
        connections' enableProtocolTrace as management last set it (``full``: the state has
        every connection, so the closed ones are forgotten)."""
        if self.routes is not None:
            state["nodes"] = self.routes.view()
        traced = self.traced
        if traced:
            open_ids = set()
            for conn in state.get("connections", ()):
                conn_id = int(conn.get("identity") or 0)
                open_ids.add(conn_id)
                conn["enableProtocolTrace"] = traced.get(conn_id, False)
            for conn_id in [c for c in traced if full and c not in open_ids]:
                del traced[conn_id]  # closed since: forgotten
        return state

    def _config_change(self, peer: int, change: ipc.ConfigChange) -> None:
        entity_type = ipc.short_type(change.entity_type)
        ok, detail, status = True, "", 0
        try:
            if entity_type in ("router.config.address", "address"):
                ok, detail = self._change_addresses(change.op, change.attributes)
            elif entity_type in ("router.config.linkRoute", "linkRoute"):
                ok, detail = self._change_link_routes(change.op, change.attributes)
            elif entity_type in ("router.config.autoLink", "autoLink"):
                ok, detail = self._change_auto_links(change.op, change.attributes)
            elif entity_type == "router.connection.linkRoute":
                ok, detail = self._change_conn_link_routes(change.op, change.attributes)
            elif entity_type in _EXCHANGE_TYPES:
                ok, detail = self._change_exchanges(entity_type, change.op, change.attributes)
            elif entity_type == "log" and change.op == "update":
                self.log.configure(change.attributes)
            elif (entity_type == "connection" and change.op == "update"
                  and "enableProtocolTrace" in change.attributes):
                # the owning worker traces it; the core shows it (1.19: the core's flag)
                self.traced[int(change.attributes.get("connId") or 0)] = bool(
                    change.attributes["enableProtocolTrace"])
        except _NotSupported as exc:
            ok, detail, status = False, str(exc), ipc.NOT_SUPPORTED
        except Exception as exc:  # the core process must survive a bad change: report it
            ok, detail = False, f"core: {exc}"
        self.flush()  # effects of the change go before the relayed message
        for worker in range(self.worker_count):
            self._send_alone(worker, change)
        self._send_alone(peer, ipc.ConfigResult(change.request_id, -1, ok, detail, status))

    def _change_addresses(self, op: str, attributes: dict) -> tuple:
        identity = attributes.get("identity")
        if op == "create":
            new = self.address_config + [dict(attributes)]
        elif op == "delete":
            new = [a for a in self.address_config if a.get("identity") != identity]
        else:
            raise _NotSupported(f"{NOT_SUPPORTED}: {op} of router.config.address")
        setter = getattr(self.core, "set_address_config", None)
        if setter is None:
            raise _NotSupported(f"{NOT_SUPPORTED}: this core cannot change addresses at run time")
        setter(new)
        self.address_config = new
        return True, ""

    def _change_link_routes(self, op: str, attributes: dict) -> tuple:
        """A linkRoute created or deleted by management (validated by the agent)."""
        if op == "create":
            self.core.create_link_route(attributes)
        elif op == "delete":
            if not self.core.delete_link_route(str(attributes.get("identity"))):
                return False, f"no link route {attributes.get('identity')}"
        else:
            raise _NotSupported(f"{NOT_SUPPORTED}: {op} of router.config.linkRoute")
        return True, ""

    def _change_exchanges(self, entity_type: str, op: str, attributes: dict) -> tuple:
        """An exchange or binding created or deleted by management or reload (validated by
        the agent: common/exchanges.py); deleting an exchange deletes its bindings."""
        binding = _EXCHANGE_TYPES[entity_type]
        if op == "create":
            if binding:
                self.core.create_binding(attributes)
            else:
                self.core.create_exchange(attributes)
        elif op == "delete":
            identity = str(attributes.get("identity"))
            found = (self.core.delete_binding(identity) if binding
                     else self.core.delete_exchange(identity))
            if not found:
                return False, f"no {'binding' if binding else 'exchange'} {identity}"
        else:
            raise _NotSupported(f"{NOT_SUPPORTED}: {op} of {entity_type}")
        return True, ""

    def _change_conn_link_routes(self, op: str, attributes: dict) -> tuple:
        """A connection-scoped link route created or deleted over its own connection (never
        journaled: it lives and dies with that connection)."""
        if op == "create":
            problem = self.core.create_conn_link_route(attributes)
            return not problem, problem
        if op == "delete":
            if not self.core.delete_conn_link_route(attributes.get("connId"),
                                                    str(attributes.get("identity"))):
                return False, f"no link route {attributes.get('identity')}"
            return True, ""
        raise _NotSupported(f"{NOT_SUPPORTED}: {op} of router.connection.linkRoute")

    def _change_auto_links(self, op: str, attributes: dict) -> tuple:
        """An auto-link created or deleted by management (attached or detached at once)."""
        if op == "create":
            self.core.add_auto_link(dict(attributes))
        elif op == "delete":
            if not self.core.delete_auto_link(str(attributes.get("identity"))):
                return False, f"core: no autoLink {attributes.get('identity')}"
        else:
            raise _NotSupported(f"{NOT_SUPPORTED}: {op} of router.config.autoLink")
        return True, ""

    def _send_alone(self, peer: int, message: tuple) -> None:
        identity = self.identities.get(peer)
        if identity is not None:
            zmqcalls.send_routed(self.sock, identity, ipc.encode_frame(-1, [message]))

    def stop(self, *_: Any) -> None:
        self.running = False


def main(argv: Optional[list] = None) -> int:
    args, spec = child_start("qdrouterd-core", argv, peer=False)
    proc = CoreProcess(spec, args.ipc)
    proc.replay_runtime_changes(args.ipc)
    proc.wake = watch_sigterm(proc.stop)  # SIGTERM ends the poll at once
    steady_gc()
    run_profiled("core", proc.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
