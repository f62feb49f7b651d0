"""Log lines of every router process for management: GET-LOG and ``logStats``.

Qpid Dispatch 1.19 is one process, so its GET-LOG answers the last 1000 lines the router logged
and ``logStats`` counts per log module the lines logged at each level. Here the lines are
logged by the workers, the core, the agent and the supervisor, each keeping its own
(``common.log.RouterLog.report``). A request that needs them (:func:`needs_logs`) first sends
``LogQuery`` to the core, which answers for itself and relays it to every worker
(``router_core/coreproc.py``); :class:`LogGather` collects the ``LogReport`` answers until every
process answered or a short deadline passed (a worker being restarted does not hold the answer
up), then :func:`merge` adds the agent's and the supervisor's own report (the supervisor's
comes from a file in the runtime directory, ``common.log.SUPERVISOR_REPORT``) and gives one
answer: counts summed per module and level, entries in time order, the newest 1000.

Must not import zmq or router_core.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional

from proton import int32

from common.log import LEVELS, STATS_MODULES, SUPERVISOR_REPORT

KEEP = 1000           # entries in a GET-LOG answer at most, as 1.19 keeps
GATHER_TIMEOUT = 1.0  # seconds to wait for the reports of the core and the workers
_LOG_TYPES = ("logStats", "entity", "operationalEntity")


def needs_logs(operation: str, entity_type: Optional[str], read_type: Optional[str]) -> bool:
    """Whether a request's answer may hold log lines or ``logStats`` entities: GET-LOG, a QUERY
    of logStats (or of a type it extends, or of every type), a READ without a type or of one."""
    if operation == "GET-LOG":
        return True
    if operation == "QUERY":
        wanted = entity_type
    elif operation == "READ":
        wanted = read_type
    else:
        return False
    return wanted is None or wanted.rsplit(".", 1)[-1] in _LOG_TYPES


class LogGather:
    """The LogReports of requests still gathering: request id -> {peer: report}."""

    def __init__(self, expected: int) -> None:
        self.expected = expected  # the core plus every worker
        self.pending: dict[int, tuple] = {}  # request id -> (reports by peer, deadline)

    def start(self, request_id: int, now: float) -> None:
        self.pending[request_id] = ({}, now + GATHER_TIMEOUT)

    def add(self, request_id: int, peer: int, report: dict) -> bool:
        """Record one answer; True when that request now has every process's."""
        entry = self.pending.get(request_id)
        if entry is None:
            return False
        entry[0][peer] = report if isinstance(report, dict) else {}
        return len(entry[0]) >= self.expected

    def take(self, request_id: int) -> list:
        entry = self.pending.pop(request_id, None)
        return list(entry[0].values()) if entry else []

    def due(self, now: float) -> list:
        """Requests whose deadline passed: answered with the reports that came."""
        return [i for i, (_, deadline) in self.pending.items() if deadline <= now]

    def next_deadline(self) -> Optional[float]:
        return min((d for _, d in self.pending.values()), default=None)


def supervisor_report(runtime: Optional[str]) -> dict:
    """The supervisor's own report (empty when it has none or it cannot be read)."""
    if not runtime:
        return {}
    try:
        with open(os.path.join(runtime, SUPERVISOR_REPORT), encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def merge(reports: Iterable[dict], keep: int = KEEP) -> dict:
    """One report from several processes' (malformed parts are skipped)."""
    counts: dict[str, list] = {}
    entries: list = []
    for report in reports:
        for module, levels in (report.get("counts") or {}).items():
            if not isinstance(levels, list) or len(levels) != len(LEVELS):
                continue
            total = counts.setdefault(str(module), [0] * len(LEVELS))
            for index, value in enumerate(levels):
                if isinstance(value, int):
                    total[index] += value
        entries.extend(e for e in report.get("entries") or ()
                       if isinstance(e, list) and len(e) == 6
                       and isinstance(e[5], (int, float)))
    entries.sort(key=lambda e: e[5])  # stable: one process's lines keep their order
    return {"counts": counts, "entries": entries[-keep:] if keep else []}


def get_log_entries(merged: dict) -> list:
    """GET-LOG's entries: ``[module, level, text, file, line, time]`` with 1.19's integer
    seconds; line and time travel as AMQP ``int`` as 1.19's (Python ints that fit in 32 bits)."""
    return [[m, level, text, path, _amqp_int(line), _amqp_int(int(t))]
            for m, level, text, path, line, t in merged.get("entries", [])]


def _amqp_int(value):
    if isinstance(value, int) and -2 ** 31 <= value < 2 ** 31:
        return int32(value)
    return value


def log_stats(counts: dict) -> list[dict]:
    """``logStats`` entities: one per log module, 1.19's modules first in its order."""
    modules = list(STATS_MODULES) + sorted(m for m in counts if m not in STATS_MODULES)
    out = []
    for module in modules:
        levels = counts.get(module) or [0] * len(LEVELS)
        entity = {f"{level}Count": levels[index] for index, level in enumerate(LEVELS)}
        entity.update({"name": module, "identity": f"logStats/{module}"})
        out.append(entity)
    return out
