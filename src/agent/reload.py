"""Configuration reload on SIGHUP, the agent's half: apply the supervisor's changes.

The supervisor (supervisor/reload.py) works out what changed in the configuration file and
sends the changes over the reload channel (common/reloadmsg.py). Here each change becomes a
management request (CREATE, DELETE or UPDATE, no reply-to) run by the management agent exactly
like one from ``qdmanage``: validated against the agent's store, sent as ``ConfigChange`` to the
core and every worker, committed when all have answered. Changes run one at a time, in order (a
listener re-added on the same port needs the removal committed first); a failed one is reported
and the next runs. Existing connections are never touched: removing a listener only closes its
listening socket.

Must not import zmq (the caller owns the socket), proton, router_io or supervisor.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from agent.management.protocol import Request
from common.reloadmsg import encode_message


def to_request(change: dict) -> Request:
    """A management request (no reply-to) for one change of a ReloadRequest."""
    op = change["op"].upper()
    props: dict[str, Any] = {"operation": op, "type": change["type"]}
    body: Any = None
    if op == "CREATE":
        props["name"] = change["name"]
        body = {k: v for k, v in change["attributes"].items() if k != "name"}
    elif op == "DELETE":
        props["name"] = change["name"]
    else:
        props["identity"] = change["name"]
        body = {k: v for k, v in change["attributes"].items() if k != "module"}
    return Request(op, props, body)


class ReloadApplier:
    """Runs the changes of reload requests through the management agent, one at a time.

    ``submit(request, now, on_answer)`` is ManagementAgent.submit; ``report(bytes)`` sends the
    encoded result to the supervisor; ``log(level, text)`` logs under AGENT.
    """

    def __init__(self, submit: Callable[..., None], report: Callable[[bytes], None],
                 log: Callable[[str, str], None]) -> None:
        self.submit = submit
        self.report = report
        self.log = log
        self.queue: list = []      # [(request_id, changes)]
        self.current: Optional[dict] = None

    def on_request(self, request_id: int, changes: list, now: float) -> None:
        self.queue.append((request_id, list(changes)))
        if self.current is None:
            self._next_request(now)

    def _next_request(self, now: float) -> None:
        if not self.queue:
            self.current = None
            return
        request_id, changes = self.queue.pop(0)
        self.current = {"id": request_id, "changes": changes, "index": -1, "applied": [],
                        "failures": []}
        self._next_change(now)

    def _next_change(self, now: float) -> None:
        cur = self.current
        assert cur is not None
        cur["index"] += 1
        if cur["index"] >= len(cur["changes"]):
            ok = not cur["failures"]
            self.report(encode_message("result", id=cur["id"], ok=ok, applied=cur["applied"],
                                       detail="; ".join(cur["failures"])))
            self._next_request(now)
            return
        change = cur["changes"][cur["index"]]
        index = cur["index"]
        try:
            request = to_request(change)
        except Exception as exc:  # a malformed change must not stop the others
            self._answered(index, change, 500, f"bad change: {exc!r}")
            return
        self.submit(request, now,
                    lambda status, description, body: self._answered(index, change, status,
                                                                     description))

    def _answered(self, index: int, change: dict, status: int,
                  description: Optional[str]) -> None:
        cur = self.current
        if cur is None or cur["index"] != index:
            return
        what = f"{change['op']} {change['type']} {change['name']}"
        if status < 300:
            cur["applied"].append(index)
            self.log("debug", f"Configuration reload: {what}")
        else:
            cur["failures"].append(f"{what}: {description or status}")
            self.log("error", f"Configuration reload: {what} failed: {description or status}")
        self._next_change(time.monotonic())
