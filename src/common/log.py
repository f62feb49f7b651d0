"""Router logging in the reference router's format, shared by every process.

Line format (as Qpid Dispatch 1.x)::

    2026-11-21 20:39:36.123456 +0000 SERVER (notice) Operational, 1 Threads Running (process ID 42)

Modules and levels are configured by ``log`` entities: ``enable`` takes ``info+`` (that level and
above), a comma list (``warning,error``), ``none``, or ``default`` (:func:`parse_enable` is the one
implementation of that grammar); a module without its own levels follows ``DEFAULT``.

Outputs are standard ``logging`` handlers with :class:`QpidFormatter`: a file path (a
``WatchedFileHandler``: a file that logrotate moved away or removed is reopened by every process
at its next line; :meth:`RouterLog.reopen` reopens at once, which the supervisor does on SIGHUP),
``stderr``, ``stdout`` or ``syslog`` (ident ``qdrouterd``, facility daemon). The module filtering
is this module's own: Qpid's per-module level sets are not a threshold.

The sans-I/O core never logs; process loops and the agent do. Must not import zmq or proton.
"""
from __future__ import annotations

import collections
import logging
import logging.handlers
import re
import sys
import time
from typing import Iterable, Optional

LEVELS = ("trace", "debug", "info", "notice", "warning", "error", "critical")
MODULES = ("ROUTER", "ROUTER_CORE", "ROUTER_HELLO", "ROUTER_LS", "ROUTER_MA", "MESSAGE", "SERVER",
           "AGENT", "AUTHSERVICE", "CONTAINER", "ERROR", "POLICY", "HTTP", "CONN_MGR", "PYTHON", "PROTOCOL",
           "DEFAULT")
_SYSLOG_PRIORITY = {"trace": 7, "debug": 7, "info": 6, "notice": 5, "warning": 4, "error": 3,
                    "critical": 2}
# Qpid's levels as ``logging`` levels (trace and notice between the standard ones)
LEVEL_NUMBERS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO, "notice": 25,
                 "warning": logging.WARNING, "error": logging.ERROR,
                 "critical": logging.CRITICAL}


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


class QpidFormatter(logging.Formatter):
    """A record as Qpid Dispatch writes a log line (:func:`format_line`): the record's name is
    the module, ``qd_level`` the level's name; ``qd_timestamp`` and ``qd_source`` (the module's
    includeTimestamp/includeSource) say whether the time and ``(file:line)`` are written."""

    def format(self, record: logging.LogRecord) -> str:
        source = getattr(record, "qd_source", None)
        return format_line(record.name, getattr(record, "qd_level", record.levelname.lower()),
                           record.getMessage(), timestamp=getattr(record, "qd_timestamp", True),
                           source=source, now=record.created)


class _SyslogHandler(logging.Handler):
    """libc syslog(3), ident ``qdrouterd``, facility daemon (as Qpid Dispatch)."""

    def __init__(self) -> None:
        super().__init__()
        import syslog
        syslog.openlog("qdrouterd", 0, syslog.LOG_DAEMON)
        self._syslog = syslog

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._syslog.syslog(_SYSLOG_PRIORITY.get(getattr(record, "qd_level", ""), 6),
                                self.format(record))
        except Exception:  # noqa: BLE001 - logging's own rule: a failed line never raises
            self.handleError(record)


def _handler(target: str) -> logging.Handler:
    """The ``logging`` handler of one output (LogConfigError if a file cannot be opened)."""
    if target == "syslog":
        handler: logging.Handler = _SyslogHandler()
    elif target == "stdout":
        handler = logging.StreamHandler(sys.stdout)
    elif target in ("stderr", ""):
        handler = logging.StreamHandler(sys.stderr)
    else:
        try:
            handler = logging.handlers.WatchedFileHandler(target, "a", encoding="utf-8")
        except OSError as exc:
            raise LogConfigError(f"cannot open log file '{target}': "
                                 f"{exc.strerror or exc}") from None
    handler.setFormatter(QpidFormatter())
    return handler


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
        self._outputs: dict[str, logging.Handler] = {}
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
            self._outputs[output] = _handler(output)
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
        path, _, line = (source or "").partition(":")
        record = logging.LogRecord(module, LEVEL_NUMBERS[level], path, int(line) if
                                   line.isdigit() else 0, text, None, None)
        record.qd_level = level
        record.qd_timestamp = settings.timestamp
        record.qd_source = source if settings.source else None
        self.recent.append([module, level, text, path or None,
                            int(line) if line.isdigit() else None, int(record.created)])
        out = self._outputs.get(settings.output)
        if out is None:
            out = self._outputs[settings.output] = _handler(settings.output)
        out.handle(record)

    def reopen(self) -> None:
        """Reopen every log file now (logrotate's postrotate ``kill -HUP``): later lines go to
        a file of the configured name, whatever happened to the old one."""
        for out in self._outputs.values():
            if isinstance(out, logging.FileHandler):
                out.acquire()
                try:
                    if out.stream is not None:
                        out.stream.close()
                    out.stream = out._open()
                    if isinstance(out, logging.handlers.WatchedFileHandler):
                        out._statstream()
                finally:
                    out.release()
