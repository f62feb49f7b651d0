"""The management agent's IPC adapter: how requests reach the agent and answers leave it.

Like an I/O worker, the agent is a peer of the core. On start it opens an *internal* connection
in the core and attaches three links on it: receivers (DIR_OUT) on ``$management`` (key
``M0$management``) and ``_local/$management`` (key ``L$management``, which is also where
``amqp:/_topo/0/<router id>/$management`` resolves), whose credit it keeps topped up, and an
anonymous sender (DIR_IN) for the replies, used only while the core has given it credit (a small
bounded queue holds replies otherwise).

A request arrives as a Deliver with the raw message bytes: it is settled (ACCEPTED), parsed, and
answered from ONE core snapshot (CoreQuery -> CoreState): the whole state, or where the answer
needs no more a page or one entity of one kind, or the router's counts
(``operations.core_query``, router_core/corepage.py). In interior mode that snapshot also
carries the core's node table (``nodes``: the core process computes the routes), from which
``router.node``, ``nodeCount`` and GET-MGMT-NODES come; without it (standalone) the router knows
no other router, as in Qpid Dispatch 1.x. A change other processes must apply
goes out as ConfigChange; the core answers for itself (peer -1) and every worker answers too; the
agent answers the client when all have, or after a bounded wait. Management messages travel in
their own IPC batches (see router_core/coreproc.py).

Must not import router_io or router_core.core.
"""
from __future__ import annotations

import collections
import errno
import itertools
import os
import time
import traceback
from typing import Any, Callable, Optional

from agent.management import operations
from agent.management.entities import View
from agent.management.loggather import (
    LogGather, get_log_entries, merge, needs_logs, supervisor_report)
from agent.management.operations import Change, Context, Reply
from agent.management.protocol import (
    BAD_REQUEST, INTERNAL_ERROR, NOT_FOUND, NOT_IMPLEMENTED, ManagementError, Request,
    answered_by_core_agent, decode, encode_message, error_response, parse_request, response)
from agent.management.store import ConfigStore
from agent.testhooks import TestHooks
from common import ipc
from common.log import LogConfigError, RouterLog

# (``_local/$_management_internal``: 1.19's agent address ``L$_management_internal``, which
# answers like the others)
MANAGEMENT_ADDRESSES = ("$management", "_local/$management", "_local/$_management_internal")
LINK_WINDOW = 250
CHANGE_TIMEOUT = 5.0
QUERY_TIMEOUT = 5.0
# the largest management request gathered from a streamed delivery (a 50,000-name QUERY is
# about 600 KB; beyond this a request is rejected instead of held in the agent)
MAX_STREAMED_REQUEST = 64 * 1024 * 1024
MAX_QUEUED_REPLIES = 1000
MAX_ORIGINS = 10000
# A CREATE that failed for one of these reasons failed because of what the request asked for (an
# address in use or not on this host, a port below 1024, a host that does not resolve): 400.
_REQUEST_FAULTS = tuple(os.strerror(e) for e in (errno.EADDRINUSE, errno.EADDRNOTAVAIL,
                                                 errno.EACCES)) + (
    "Name or service not known", "No address associated with hostname",
    "Temporary failure in name resolution")


class _PendingChange:
    __slots__ = ("request", "change", "results", "deadline")

    def __init__(self, request: Request, change: Change, deadline: float) -> None:
        self.request = request
        self.change = change
        self.results: dict[int, tuple] = {}
        self.deadline = deadline


class ManagementAgent:
    def __init__(self, spec: dict, log: RouterLog, new_id: Callable[[], int],
                 send: Callable[..., None], send_control: Callable[..., None],
                 worker_count: int, version: str,
                 record: Optional[Callable[[dict], None]] = None) -> None:
        self.spec = spec
        # keeps every runtime change for processes restarted later (the supervisor's journal,
        # common/listenfds.py); None: not kept (tests without a supervisor)
        self.record = record
        self.log = log
        self.new_id = new_id
        self.send = send
        self.send_control = send_control
        self.workers = worker_count
        self.version = version
        self.store = ConfigStore(spec)
        # the router's start (the supervisor's), not this process's: an agent may be restarted
        self.started = float(spec.get("startedAt") or time.time())
        self.conn_id = 0
        self.in_links: dict[int, list] = {}   # link id -> [received, limit]
        self.reply_link = 0
        self.reply_credit = 0
        self.replies: collections.deque = collections.deque()
        self.queries: dict[int, tuple] = {}   # request id -> (Request, deadline)
        self.changes: dict[int, _PendingChange] = {}
        # GET-LOG and logStats: every process's log lines, gathered before the snapshot
        self.log_gather = LogGather(worker_count + 1)
        self.log_reports: dict[int, dict] = {}  # request id -> merged report
        self._ids = itertools.count(1)
        self.local_answers: dict[int, Callable] = {}  # id(request) -> on_answer (submit)
        # large requests the core streams (StreamDeliver + DeliverChunk): out id ->
        # [StreamDeliver, the bytes so far], handled as one Deliver once complete
        self.streams: dict[int, list] = {}
        # out id -> the connection a request came in on (DeliverOrigin, just before its Deliver)
        self.origins: dict[int, int] = {}
        self.hooks: Optional[TestHooks] = None  # qdrouterd -T (agent/testhooks.py)

    def handlers(self) -> dict:
        return {ipc.Deliver: self.on_deliver, ipc.StreamDeliver: self.on_stream_deliver,
                ipc.DeliverChunk: self.on_deliver_chunk, ipc.LinkCredit: self.on_credit,
                ipc.LinkRefuse: self.on_refuse, ipc.CoreState: self.on_core_state,
                ipc.ConfigResult: self.on_config_result, ipc.LogReport: self.on_log_report,
                ipc.LinkOpen: lambda fx, now: None,
                ipc.UpdateIn: lambda fx, now: None, ipc.DeliverOrigin: self.on_origin,
                ipc.LinkStall: self.on_stall}

    def on_stall(self, fx: ipc.LinkStall, now: float) -> None:
        """A sender of the agent's whose address lost its destination (a test source): the
        agent keeps no credit unused, so the window comes back whole when asked."""
        if not fx.on:
            self.send(ipc.LinkUnstalled(fx.link_id, 0))

    # --- start --------------------------------------------------------------------------------
    def start(self) -> None:
        router_id = self.spec["router_id"]
        self.conn_id = self.new_id()
        self.send(ipc.ConnOpened(self.conn_id, "internal", "in", "", router_id, "", "", "",
                                 False, LINK_WINDOW, 1))
        for address in MANAGEMENT_ADDRESSES:
            link_id = self.new_id()
            self.in_links[link_id] = [0, LINK_WINDOW]
            self.send(ipc.LinkAttach(link_id, self.conn_id, ipc.DIR_OUT, f"mgmt:{address}",
                                     address, False, False, LINK_WINDOW, "endpoint"),
                      ipc.LinkFlow(link_id, LINK_WINDOW, False))
        self.reply_link = self.new_id()
        self.send(ipc.LinkAttach(self.reply_link, self.conn_id, ipc.DIR_IN, "mgmt:replies", None,
                                 False, True, LINK_WINDOW, "endpoint"))
        if self.spec.get("testHooks"):
            self.hooks = TestHooks(self.conn_id, self.new_id, self.send)
            self.hooks.start()
        self.log.log("AGENT", "info", "Management agent started on $management")

    # --- requests -----------------------------------------------------------------------------
    def on_origin(self, fx: ipc.DeliverOrigin, now: float) -> None:
        if len(self.origins) >= MAX_ORIGINS:  # never answered (e.g. lost streams): bounded
            self.origins.pop(next(iter(self.origins)))
        self.origins[fx.dlv_id] = fx.conn_id

    def on_deliver(self, fx: ipc.Deliver, now: float) -> None:
        in_conn = self.origins.pop(fx.dlv_id, None)
        if self.hooks is not None and self.hooks.handles(fx.link_id):
            self.hooks.on_deliver(fx)
            return
        window = self.in_links.get(fx.link_id)
        settle_id = None if fx.settled else fx.dlv_id  # accepted once answered (_answer)
        if window is None:
            self._accept(settle_id)
            return
        window[0] += 1
        if window[1] - window[0] < LINK_WINDOW // 2:
            window[1] = window[0] + LINK_WINDOW
            self.send(ipc.LinkFlow(fx.link_id, window[1], False))
        try:
            msg = decode(fx.payload)
        except Exception as exc:  # proton raises several types for garbage bytes
            self.log.log("AGENT", "warning", f"Dropping a management request that is not an "
                                             f"AMQP message: {exc}")
            self._accept(settle_id)
            return
        try:
            request = parse_request(msg)
        except ManagementError as exc:
            if msg.reply_to:
                self._log_failure(msg.properties or {}, exc.description)
                self._reply(msg.reply_to, response(msg.reply_to, msg.correlation_id, exc.status,
                                                   exc.description))
            self._accept(settle_id)
            return
        if self.log.enabled("AGENT", "debug"):  # the raw request, as 1.19 logs it
            self.log.log("AGENT", "debug", f"Agent request {msg}")
        request.in_conn = in_conn
        request.settle_id = settle_id
        request_id = next(self._ids)
        self.queries[request_id] = (request, now + QUERY_TIMEOUT)
        self._ask(request_id, request, now)

    def _accept(self, dlv_id: Optional[int]) -> None:
        if dlv_id is not None:
            self.send(ipc.Disposition(dlv_id, ipc.STATE_ACCEPTED, True, None))

    def on_stream_deliver(self, fx: ipc.StreamDeliver, now: float) -> None:
        """A request large enough to be streamed by the router (past 128 KB): gathered here,
        each part acknowledged (StreamSent) so the sender's window moves, bounded by
        MAX_STREAMED_REQUEST (a larger one is rejected, the rest of it ignored)."""
        self.streams[fx.dlv_id] = [fx, bytearray(fx.payload)]
        self.send(ipc.StreamSent(fx.dlv_id, len(fx.payload)))

    def on_deliver_chunk(self, fx: ipc.DeliverChunk, now: float) -> None:
        entry = self.streams.get(fx.dlv_id)
        if entry is None:
            return
        if fx.aborted:  # the sender gave up: nothing to answer
            del self.streams[fx.dlv_id]
            self.origins.pop(fx.dlv_id, None)
            return
        start, data = entry
        data += fx.payload
        self.send(ipc.StreamSent(fx.dlv_id, len(fx.payload)))
        if len(data) > MAX_STREAMED_REQUEST:
            del self.streams[fx.dlv_id]
            self.origins.pop(fx.dlv_id, None)
            self.log.log("AGENT", "warning", f"Rejecting a management request of more than "
                                             f"{MAX_STREAMED_REQUEST} bytes")
            if not start.settled:
                self.send(ipc.Disposition(fx.dlv_id, ipc.STATE_REJECTED, True, {
                    "condition": "amqp:link:message-size-exceeded",
                    "description": "management request too large"}))
            return
        if fx.last:
            del self.streams[fx.dlv_id]
            self.on_deliver(ipc.Deliver(start.dlv_id, start.link_id, start.settled,
                                        bytes(data)), now)

    def submit(self, request: Request, now: float,
               on_answer: Optional[Callable[[int, Optional[str], Any], None]] = None) -> None:
        """Run a request that did not arrive over AMQP (a SIGHUP reload: supervisor/reload.py) the
        same way as one that did; ``on_answer(status, description, body)`` gets the outcome."""
        if on_answer is not None:
            self.local_answers[id(request)] = on_answer
        request_id = next(self._ids)
        self.queries[request_id] = (request, now + QUERY_TIMEOUT)
        self._ask(request_id, request, now)

    def _ask(self, request_id: int, request: Request, now: float) -> None:
        """Ask the core for the snapshot a request is answered from; first every process's
        log lines when the answer may show them (loggather.py)."""
        if needs_logs(request.operation, request.entity_type, request.type):
            self.log_gather.start(request_id, now)
            self.send_control(ipc.LogQuery(request_id))
        else:
            self.send_control(ipc.CoreQuery(request_id, operations.core_query(
                request, self.store.schema)))

    def on_log_report(self, fx: ipc.LogReport, now: float) -> None:
        if self.log_gather.add(fx.request_id, fx.peer, fx.report):
            self._logs_gathered(fx.request_id)

    def _logs_gathered(self, request_id: int) -> None:
        reports = self.log_gather.take(request_id)
        reports += [self.log.report(), supervisor_report(self.spec.get("runtime"))]
        if request_id in self.queries:
            self.log_reports[request_id] = merge(reports)
            self.send_control(ipc.CoreQuery(request_id, "snapshot"))

    def on_core_state(self, fx: ipc.CoreState, now: float) -> None:
        entry = self.queries.pop(fx.request_id, None)
        merged = self.log_reports.pop(fx.request_id, None)
        if entry is None:
            return
        request = entry[0]
        state = fx.state
        if merged is not None:
            state = {**state, "logCounts": merged["counts"]}
        try:
            view = View(state, self.store, version=self.version, started=self.started,
                        in_conn=request.in_conn, worker_processes=self.workers)
            outcome = operations.execute(request, view, Context(
                log_entries=get_log_entries(merged) if merged is not None else []))
        except ManagementError as exc:
            self._answer(request, exc.status, exc.description, None)
            return
        except Exception as exc:  # a bug must not take the agent down; the client learns it
            self.log.log("AGENT", "error", f"Management request {request.operation} failed: "
                                           f"{exc!r}\n{traceback.format_exc()}")
            self._answer(request, INTERNAL_ERROR, f"internal error: {exc!r}", None)
            return
        if isinstance(outcome, Reply):
            self._answer(request, outcome.status, outcome.description, outcome.body)
            return
        change_id = next(self._ids)
        self.changes[change_id] = _PendingChange(request, outcome, now + CHANGE_TIMEOUT)
        self.send_control(ipc.ConfigChange(change_id, outcome.op, outcome.entity_type,
                                           outcome.attributes))

    # --- runtime changes ----------------------------------------------------------------------
    def on_config_result(self, fx: ipc.ConfigResult, now: float) -> None:
        pending = self.changes.get(fx.request_id)
        if pending is None:
            return
        pending.results[fx.peer] = (bool(fx.ok), fx.detail, fx.status)
        if len(pending.results) >= self.workers + 1:
            del self.changes[fx.request_id]
            self._finish(pending)

    def _finish(self, pending: _PendingChange) -> None:
        change, results = pending.change, pending.results
        failures = []  # (description, the ConfigResult status, 0 for none)
        core = results.get(-1)
        if core is None:
            failures.append(("the router core did not answer in time", 0))
        elif not core[0]:
            failures.append((core[1], core[2]))
        worker_results = {p: r for p, r in results.items() if p >= 0}
        missing = [str(p) for p in range(self.workers) if p not in worker_results]
        status = INTERNAL_ERROR
        if change.workers == "all":
            failures += [(f"worker {p}: {d}", s) for p, (ok, d, s)
                         in sorted(worker_results.items()) if not ok]
            if missing:
                failures.append((f"worker(s) {', '.join(missing)} did not answer in time", 0))
        elif change.workers == "any" and not failures:
            if not any(ok for ok, _, _ in worker_results.values()):
                status = NOT_FOUND
                failures.append((f"{change.entity_type.rsplit('.', 1)[-1]} "
                                 f"{change.entity.get('identity')} not found in any I/O worker",
                                 0))
        if failures:
            if all(s == ipc.NOT_SUPPORTED for _, s in failures):
                status = NOT_IMPLEMENTED
            elif change.op == "create" and any(fault in f for f, _ in failures
                                               for fault in _REQUEST_FAULTS):
                status = BAD_REQUEST
            failures = [f for f, _ in failures]
            if change.op == "create" and any(ok for ok, _, _ in worker_results.values()):
                # some processes applied it: take it back so the router stays consistent
                self.send_control(ipc.ConfigChange(next(self._ids), "delete", change.entity_type,
                                                   change.attributes))
            description = "; ".join(dict.fromkeys(failures))
            self.log.log("AGENT", "warning", f"{change.summary or change.op} failed: "
                                             f"{description}")
            self._answer(pending.request, status, description, None)
            return
        if change.commit == "add":
            self.store.add(change.entity)
        elif change.commit == "remove":
            self.store.remove(change.entity)
        elif change.commit == "replace":
            self.store.replace(change.entity)
        if change.entity_type.endswith(".log"):
            try:
                self.log.configure(change.attributes)
            except LogConfigError as exc:
                self.log.log("AGENT", "error", f"log update not applied in the agent: {exc}")
        if self.record is not None and (change.commit or change.entity_type.endswith("log")):
            self.record({"op": change.op, "type": change.entity_type,
                         "attributes": change.attributes, "commit": change.commit,
                         "entity": change.entity})
        for module, text in change.warnings:
            self.log.log(module, "warning", text)
        self.log.log("AGENT", "info", change.summary or f"{change.op} {change.entity_type}")
        self._answer(pending.request, change.status, None, change.body)

    def replay(self, changes: list) -> None:
        """A restarted agent: apply to the store what its predecessor had applied at run time
        (the supervisor's journal), so management shows the same entities."""
        for change in changes:
            commit, entity = change.get("commit"), change.get("entity") or {}
            if commit == "add":
                self.store.add(entity)
            elif commit == "remove":
                self.store.remove(entity)
            elif commit == "replace":
                self.store.replace(entity)
            if str(change.get("type", "")).endswith("log"):
                try:
                    self.log.configure(change.get("attributes") or {})
                except LogConfigError:
                    pass

    def tick(self, now: float) -> None:
        for change_id in [i for i, p in self.changes.items() if p.deadline <= now]:
            self._finish(self.changes.pop(change_id))
        for request_id in self.log_gather.due(now):  # answer with the reports that came
            self._logs_gathered(request_id)
        for request_id in [i for i, (_, d) in self.queries.items() if d <= now]:
            request, _ = self.queries.pop(request_id)
            self.log_reports.pop(request_id, None)
            self._answer(request, INTERNAL_ERROR, "the router core did not answer in time", None)

    def next_deadline(self) -> Optional[float]:
        deadlines = [p.deadline for p in self.changes.values()]
        deadlines += [d for _, d in self.queries.values()]
        gather = self.log_gather.next_deadline()
        if gather is not None:
            deadlines.append(gather)
        return min(deadlines) if deadlines else None

    # --- replies ------------------------------------------------------------------------------
    def _answer(self, request: Request, status: int, description: Optional[str],
                body: Any) -> None:
        on_answer = self.local_answers.pop(id(request), None)
        if on_answer is not None:
            on_answer(status, description, body)
            return
        if request.reply_to:
            if status >= 400:
                self._log_failure(request.properties, description or "")
                msg = error_response(request, ManagementError(status, description or ""),
                                     body)
            else:
                msg = response(request.reply_to, request.correlation_id, status, description,
                               body)
            self._reply(request.reply_to, msg)
        self._accept(request.settle_id)  # after the reply, as 1.19
        request.settle_id = None

    def _log_failure(self, properties: dict, description: str) -> None:
        """1.19's Python agent logs each request it fails (its core agent does not)."""
        if not answered_by_core_agent(properties):
            self.log.log("AGENT", "error", f"Error performing {properties.get('operation')}: "
                                           f"{description}")

    def _reply(self, to: str, msg: Any) -> None:
        try:
            payload = encode_message(msg)
        except Exception as exc:  # a body proton cannot encode: say so instead of going silent
            self.log.log("AGENT", "error", f"cannot encode management response: {exc!r}")
            fallback = response(to, msg.correlation_id, INTERNAL_ERROR,
                                f"cannot encode the response: {exc}")
            payload = fallback.encode()
        if len(self.replies) >= MAX_QUEUED_REPLIES:
            self.replies.popleft()
            self.log.log("AGENT", "warning", "management reply queue full: dropped the oldest")
        self.replies.append((to, payload))
        self._send_replies()

    def on_credit(self, fx: ipc.LinkCredit, now: float) -> None:
        if fx.link_id == self.reply_link:
            self.reply_credit += fx.credit
            self._send_replies()
        elif self.hooks is not None and self.hooks.handles(fx.link_id):
            self.hooks.on_credit(fx)

    def _send_replies(self) -> None:
        while self.replies and self.reply_credit > 0:
            to, payload = self.replies.popleft()
            self.reply_credit -= 1
            self.send(ipc.Transfer(self.new_id(), self.reply_link, to, True, 4, payload))

    def on_refuse(self, fx: ipc.LinkRefuse, now: float) -> None:
        self.log.log("AGENT", "error", f"the core refused management link {fx.link_id}: "
                                       f"{fx.condition} {fx.description}")
