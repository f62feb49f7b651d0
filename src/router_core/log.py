"""Router logging in the reference router's format, shared by every process.

Line format (as Qpid Dispatch 1.x)::

    2026-11-21 20:39:36.123456 +0000 SERVER (notice) Operational, 1 Threads Running (process ID 42)

Modules and levels are configured by ``log`` entities: ``enable`` takes ``info+`` (that level and
above), a comma list (``warning,error``), or ``none``; a module without its own entity follows
``DEFAULT``. Outputs: a file path, ``stderr``, ``stdout`` or ``syslog``.

The sans-I/O core never logs; process loops and the agent do. Must not import zmq or proton.
"""
from __future__ import annotations

import collections
import sys
import time
from typing import IO, Iterable, Optional

LEVELS = ("trace", "debug", "info", "notice", "warning", "error", "critical")
MODULES = ("ROUTER", "ROUTER_CORE", "ROUTER_HELLO", "ROUTER_LS", "ROUTER_MA", "MESSAGE", "SERVER",
           "AGENT", "CONTAINER", "ERROR", "POLICY", "HTTP", "CONN_MGR", "PYTHON", "PROTOCOL",
           "DEFAULT")
_SYSLOG_PRIORITY = {"trace": 7, "debug": 7, "info": 6, "notice": 5, "warning": 4, "error": 3,
                    "critical": 2}


class LogConfigError(ValueError):
    pass


def parse_enable(spec: str) -> frozenset:
    """``info+`` -> {info, notice, ...}; ``warning,error`` -> those two; ``none`` -> empty."""
    spec = (spec or "").strip()
    if spec in ("", "none"):
        return frozenset()
    enabled: set = set()
    for part in spec.split(","):
        part = part.strip()
        plus = part.endswith("+")
        name = part[:-1] if plus else part
        if name not in LEVELS:
            raise LogConfigError(f"unknown log level '{name}' in '{spec}' "
                                 f"(levels: {', '.join(LEVELS)})")
        index = LEVELS.index(name)
        enabled.update(LEVELS[index:] if plus else (name,))
    return frozenset(enabled)


def format_line(module: str, level: str, text: str, *, timestamp: bool = True,
                source: Optional[str] = None, now: Optional[float] = None) -> str:
    parts = []
    if timestamp:
        now = time.time() if now is None else now
        tm = time.localtime(now)
        parts.append(time.strftime("%Y-%m-%d %H:%M:%S", tm) + ".%06d" % int((now % 1) * 1e6)
                     + time.strftime(" %z", tm))
    parts.append(f"{module} ({level}) {text}")
    line = " ".join(parts)
    return f"{line} ({source})" if source else line


class _Output:
    def __init__(self, target: str) -> None:
        self.target = target
        self.syslog = None
        self.stream: Optional[IO[str]] = None
        if target == "syslog":
            import syslog
            syslog.openlog("qdrouterd", 0, syslog.LOG_DAEMON)
            self.syslog = syslog
        elif target == "stdout":
            self.stream = sys.stdout
        elif target in ("stderr", ""):
            self.stream = sys.stderr
        else:
            self.stream = open(target, "a", buffering=1, encoding="utf-8")

    def write(self, level: str, line: str) -> None:
        if self.syslog is not None:
            self.syslog.syslog(_SYSLOG_PRIORITY[level], line)
        else:
            assert self.stream is not None
            self.stream.write(line + "\n")
            self.stream.flush()


class ModuleSettings:
    __slots__ = ("enabled", "timestamp", "source", "output")

    def __init__(self, enabled: frozenset, timestamp: bool, source: bool, output: str) -> None:
        self.enabled = enabled
        self.timestamp = timestamp
        self.source = source
        self.output = output


class RouterLog:
    """Per-module levels and outputs; keeps the recent entries for GET-LOG."""

    def __init__(self, entities: Iterable[dict] = (), keep: int = 1000) -> None:
        self.modules: dict[str, ModuleSettings] = {
            "DEFAULT": ModuleSettings(parse_enable("info+"), True, False, "stderr")}
        self._outputs: dict[str, _Output] = {}
        self.recent: collections.deque = collections.deque(maxlen=keep)
        for entity in entities:
            self.configure(entity)

    def configure(self, entity: dict) -> None:
        """Apply one ``log`` entity (module, enable, includeTimestamp, includeSource, outputFile)."""
        module = str(entity.get("module", "DEFAULT")).upper()
        if module not in MODULES:
            raise LogConfigError(f"unknown log module '{module}'")
        base = self.modules.get(module) or self.modules["DEFAULT"]
        enabled = parse_enable(entity["enable"]) if "enable" in entity else base.enabled
        self.modules[module] = ModuleSettings(
            enabled,
            bool(entity.get("includeTimestamp", base.timestamp)),
            bool(entity.get("includeSource", base.source)),
            str(entity.get("outputFile") or base.output))

    def settings(self, module: str) -> ModuleSettings:
        return self.modules.get(module) or self.modules["DEFAULT"]

    def enabled(self, module: str, level: str) -> bool:
        return level in self.settings(module).enabled

    def log(self, module: str, level: str, text: str, source: Optional[str] = None) -> None:
        settings = self.settings(module)
        if level not in settings.enabled:
            return
        now = time.time()
        self.recent.append([module, level, text, source.split(":")[0] if source else None,
                            int(source.split(":")[1]) if source and ":" in source else None,
                            int(now)])
        line = format_line(module, level, text, timestamp=settings.timestamp,
                           source=source if settings.source else None, now=now)
        out = self._outputs.get(settings.output)
        if out is None:
            out = self._outputs[settings.output] = _Output(settings.output)
        out.write(level, line)
