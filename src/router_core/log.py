"""Router logging in the reference router's format, shared by every process.

Line format (as Qpid Dispatch 1.x)::

    2026-11-21 20:39:36.123456 +0000 SERVER (notice) Operational, 1 Threads Running (process ID 42)

Modules and levels are configured by ``log`` entities: ``enable`` takes ``info+`` (that level and
above), a comma list (``warning,error``), ``none``, or ``default`` (:func:`parse_enable` is the one
implementation of that grammar); a module without its own levels follows ``DEFAULT``. Outputs: a file path, ``stderr``, ``stdout`` or ``syslog``.

The sans-I/O core never logs; process loops and the agent do. Must not import zmq or proton.
"""
from __future__ import annotations

import collections
import re
import sys
import time
from typing import IO, Iterable, Optional

LEVELS = ("trace", "debug", "info", "notice", "warning", "error", "critical")
MODULES = ("ROUTER", "ROUTER_CORE", "ROUTER_HELLO", "ROUTER_LS", "ROUTER_MA", "MESSAGE", "SERVER",
           "AGENT", "AUTHSERVICE", "CONTAINER", "ERROR", "POLICY", "HTTP", "CONN_MGR", "PYTHON", "PROTOCOL",
           "DEFAULT")
_SYSLOG_PRIORITY = {"trace": 7, "debug": 7, "info": 6, "notice": 5, "warning": 4, "error": 3,
                    "critical": 2}


class LogConfigError(ValueError):
    pass


DEFAULT_ENABLE = "info+"  # the DEFAULT module's levels when nothing configures them
_ENABLE_SEPARATORS = re.compile(r"[,\s]+")


def parse_enable(spec: Optional[str]) -> Optional[frozenset]:
    """The ONE grammar of a log ``enable`` value (config, management and logging use it).

    ``info+`` -> {info, notice, warning, error, critical}; ``trace,debug`` -> those two;
    ``none`` or empty -> no levels; ``default`` -> None (the module follows the DEFAULT module).
    Items are separated by commas and/or spaces and are case-insensitive, as in Qpid Dispatch.
    Raises LogConfigError for anything else.
    """
    if spec is not None and not isinstance(spec, str):
        raise LogConfigError(f"log levels must be a string, got {type(spec).__name__}")
    items = [i for i in _ENABLE_SEPARATORS.split((spec or "").strip().lower()) if i]
    if items == ["default"]:
        return None
    enabled: set = set()
    for item in items:
        plus = item.endswith("+")
        name = item[:-1] if plus else item
        if name == "none" and not plus:
            continue
        if name not in LEVELS:
            if name == "default":
                raise LogConfigError(f"'default' cannot be combined with other levels in "
                                     f"'{spec}'")
            raise LogConfigError(f"invalid log level '{item}' in '{spec}' (levels: none, "
                                 f"default, {', '.join(LEVELS)}; a trailing '+' means that "
                                 "level and above)")
        index = LEVELS.index(name)
        enabled.update(LEVELS[index:] if plus else (name,))
    return frozenset(enabled)


def check_enable(spec: Optional[str]) -> None:
    """Raise LogConfigError if ``spec`` is not a valid ``enable`` value."""
    parse_enable(spec)


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
            try:
                self.stream = open(target, "a", buffering=1, encoding="utf-8")
            except OSError as exc:
                raise LogConfigError(f"cannot open log file '{target}': "
                                     f"{exc.strerror or exc}") from None

    def write(self, level: str, line: str) -> None:
        if self.syslog is not None:
            self.syslog.syslog(_SYSLOG_PRIORITY[level], line)
        else:
            assert self.stream is not None
            self.stream.write(line + "\n")
            self.stream.flush()


class ModuleSettings:
    """One module's settings; ``enabled`` None means "the DEFAULT module's levels"."""
    __slots__ = ("enabled", "timestamp", "source", "output")

    def __init__(self, enabled: Optional[frozenset], timestamp: bool, source: bool,
                 output: str) -> None:
        self.enabled = enabled
        self.timestamp = timestamp
        self.source = source
        self.output = output


class RouterLog:
    """Per-module levels and outputs; keeps the recent entries for GET-LOG."""

    def __init__(self, entities: Iterable[dict] = (), keep: int = 1000) -> None:
        self.modules: dict[str, ModuleSettings] = {
            "DEFAULT": ModuleSettings(parse_enable(DEFAULT_ENABLE), True, False, "stderr")}
        self._outputs: dict[str, _Output] = {}
        self.recent: collections.deque = collections.deque(maxlen=keep)
        for entity in entities:
            self.configure(entity)

    def configure(self, entity: dict) -> None:
        """Apply one ``log`` entity (module, enable, includeTimestamp, includeSource, outputFile).

        Without ``enable`` (or with ``default``) a module keeps following DEFAULT, as in Qpid
        Dispatch 1.19; for DEFAULT itself ``default`` means the built-in ``info+``. Raises
        LogConfigError (and changes nothing) for an unknown module, bad levels or an output
        file that cannot be opened.
        """
        module = str(entity.get("module") or "DEFAULT").upper()
        if module not in MODULES:
            raise LogConfigError(f"unknown log module '{module}'")
        base = self.modules.get(module) or ModuleSettings(None, *self._defaults())
        enabled = base.enabled
        if entity.get("enable") is not None:
            enabled = parse_enable(entity["enable"])
            if enabled is None and module == "DEFAULT":
                enabled = parse_enable(DEFAULT_ENABLE)
        output = str(entity.get("outputFile") or base.output)
        if output not in self._outputs:
            self._outputs[output] = _Output(output)
        timestamp = entity.get("includeTimestamp")
        source = entity.get("includeSource")
        self.modules[module] = ModuleSettings(
            enabled,
            base.timestamp if timestamp is None else bool(timestamp),
            base.source if source is None else bool(source),
            output)

    def _defaults(self) -> tuple:
        default = self.modules["DEFAULT"]
        return default.timestamp, default.source, default.output

    def settings(self, module: str) -> ModuleSettings:
        return self.modules.get(module) or self.modules["DEFAULT"]

    def levels(self, module: str) -> frozenset:
        """The levels ``module`` logs at now (its own, else DEFAULT's)."""
        enabled = self.settings(module).enabled
        return self.modules["DEFAULT"].enabled if enabled is None else enabled

    def enabled(self, module: str, level: str) -> bool:
        return level in self.levels(module)

    def log(self, module: str, level: str, text: str, source: Optional[str] = None) -> None:
        settings = self.settings(module)
        if level not in self.levels(module):
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
