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

Every process keeps what 1.19 keeps for management: the recent entries (GET-LOG:
``[module, level, text, file, line, time]``, file and line of the Python code that logged) and
per module a count of the lines logged at each level (``logStats``); :meth:`RouterLog.report`
gives both, the agent gathers them from every process (``agent/management/loggather.py``).
Components whose per-event work depends on a level (the worker's PROTOCOL frame trace, the
core's trace) read a flag they recompute in :attr:`RouterLog.listeners` when the settings
change, never the settings on every event.

The sans-I/O core never logs; process loops and the agent do. Must not import zmq or proton.
"""
from __future__ import annotations

import collections
import json
import logging
import logging.handlers
import os
import re
import sys
import time
from typing import Callable, Iterable, Optional

LEVELS = ("trace", "debug", "info", "notice", "warning", "error", "critical")
MODULES = ("ROUTER", "ROUTER_CORE", "ROUTER_HELLO", "ROUTER_LS", "ROUTER_MA", "MESSAGE", "SERVER",
           "AGENT", "AUTHSERVICE", "CONTAINER", "ERROR", "POLICY", "HTTP", "CONN_MGR", "PYTHON", "PROTOCOL",
           "DEFAULT")
# the log sources 1.19 has a ``logStats`` entity for, in its order (MAIN and DISPLAYNAME exist
# there but cannot be configured by a log section)
STATS_MODULES = ("DEFAULT", "ERROR", "PYTHON", "MESSAGE", "MAIN", "AGENT", "POLICY", "PROTOCOL",
                 "SERVER", "ROUTER_LS", "AUTHSERVICE", "CONN_MGR", "HTTP", "ROUTER",
                 "ROUTER_HELLO", "ROUTER_CORE", "CONTAINER", "ROUTER_MA", "DISPLAYNAME")
LEVEL_INDEX = {level: index for index, level in enumerate(LEVELS)}
_WRITE_AT_ONCE = LEVEL_INDEX["warning"]  # held lines (RouterLog.hold_lines) are below this
# functions that only pass a line on to RouterLog.log: the line's source is their caller
WRAPPERS = {"<lambda>", "_log_server", "_log_http", "_log", "log_line"}
_THIS_FILE = os.path.normcase(__file__)
# in the runtime directory: the supervisor's report (it is no peer of the core to be asked)
SUPERVISOR_REPORT = "supervisor-log.json"
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


def _full_level_name(item: str) -> str:
    """1.19 reads a level by its first letters ("warn+" is "warning+", "inf" is "info"): the
    first of default, none, trace ... critical that starts with them."""
    plus = "+" if item.endswith("+") else ""
    name = item[:-1] if plus else item
    for full in ("default", "none") + tuple(LEVELS):
        if full.startswith(name):
            return full + plus
    return item


def parse_enable(spec: Optional[str]) -> Optional[frozenset]:
    """The ONE grammar of a log ``enable`` value (config, management and logging use it).

    ``info+`` -> {info, notice, warning, error, critical}; ``trace,debug`` -> those two;
    ``none`` or empty -> no levels; ``default`` -> None (the module follows the DEFAULT module).
    Items are separated by commas and/or spaces and are case-insensitive, as in Qpid Dispatch.
    Raises LogConfigError for anything else.
    """
    if spec is not None and not isinstance(spec, str):
        raise LogConfigError(f"log levels must be a string, got {type(spec).__name__}")
    items = [_full_level_name(i) for i in _ENABLE_SEPARATORS.split((spec or "").strip().lower())
             if i]
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


# the date and zone parts of the last second a line was written in: a busy second (accepting
# thousands of connections) formats them once, not twice a line
_second: list = [None, "", ""]


def format_line(module: str, level: str, text: str, *, timestamp: bool = True,
                source: Optional[str] = None, now: Optional[float] = None) -> str:
    line = f"{module} ({level}) {text}"
    if timestamp:
        now = time.time() if now is None else now
        second = int(now)
        if _second[0] != second:
            tm = time.localtime(second)
            _second[:] = [second, time.strftime("%Y-%m-%d %H:%M:%S", tm),
                          time.strftime(" %z", tm)]
        line = f"{_second[1]}.{int((now - second) * 1e6):06d}{_second[2]} {line}"
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


_SKIP: dict = {}   # code object -> whether its frames only pass lines on (see _caller)
_LINES: dict = {}  # (code object, instruction offset) -> its line number


def _caller() -> tuple:
    """(file, line) of the code that logged: the first frame outside this module and the
    WRAPPERS that only pass lines on. Both answers are remembered per code object and
    instruction: a frame's line number is a search of its code's line table."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        skip = _SKIP.get(code)
        if skip is None:
            skip = _SKIP[code] = (code.co_name in WRAPPERS
                                  or os.path.normcase(code.co_filename) == _THIS_FILE)
        if not skip:
            break
        frame = frame.f_back
    if frame is None:
        return "", 0
    key = (code, frame.f_lasti)
    line = _LINES.get(key)
    if line is None:
        line = _LINES[key] = frame.f_lineno
    return code.co_filename, line


class _Record(logging.LogRecord):
    """A log record with what the handlers and QpidFormatter read, made without
    ``LogRecord.__init__``'s look-ups (thread, process and module names, path splitting): a
    router writes a line per connection opened, in the worker and in the core."""

    def __init__(self, name: str, levelno: int, pathname: str, lineno: int, msg: str,
                 created: float) -> None:
        self.name, self.msg, self.args = name, msg, None
        self.levelno, self.levelname = levelno, logging.getLevelName(levelno)
        self.pathname, self.lineno = pathname, lineno
        self.filename = self.module = os.path.basename(pathname)
        self.funcName = self.exc_info = self.exc_text = self.stack_info = None
        self.created = created
        self.msecs = (self.created % 1) * 1000
        self.relativeCreated = (self.created - logging._startTime) * 1000
        self.process, self.processName = _PID[0], "MainProcess"
        self.thread = self.threadName = None

    def getMessage(self) -> str:
        return self.msg


# the handlers whose lines RouterLog.log writes itself (a stream: stderr, stdout, a file)
_STREAM_HANDLERS = (logging.StreamHandler, logging.handlers.WatchedFileHandler)

_PID = [os.getpid()]  # (fork: os.register_at_fork keeps it right in a child)
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def _write(out: logging.StreamHandler, text: str) -> None:
    """Write ``text`` (whole lines) to a stream handler's stream and flush it, as its emit()
    would (a file that logrotate moved away is reopened first)."""
    out.acquire()
    try:
        if type(out) is logging.handlers.WatchedFileHandler:
            out.reopenIfNeeded()
        stream = out.stream
        stream.write(text)
        stream.flush()
    except Exception:  # noqa: BLE001 - logging's own rule: a failed line never raises
        out.handleError(_Record("ERROR", logging.ERROR, "", 0, text.rstrip("\n"),
                                time.time()))
    finally:
        out.release()


class RouterLog:
    """Per-module levels and outputs; keeps the recent entries for GET-LOG."""

    def __init__(self, entities: Iterable[dict] = (), keep: int = 1000) -> None:
        self.modules: dict[str, ModuleSettings] = {
            "DEFAULT": ModuleSettings(parse_enable(DEFAULT_ENABLE), True, False, "stderr")}
        self._outputs: dict[str, logging.Handler] = {}
        # GET-LOG: [module, level, text, file, line, time (float seconds)], oldest first
        self.recent: collections.deque = collections.deque(maxlen=keep)
        self.counts: dict[str, list] = {}  # module -> lines logged per level (LEVELS order)
        # called with no argument after every configure(): components recompute their flags
        self.listeners: list[Callable[[], None]] = []
        self.report_path: Optional[str] = None  # see keep_report_in
        self._held: Optional[dict] = None  # output -> lines not written yet (hold_lines)
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
        for listener in list(self.listeners):
            listener()

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

    def log(self, module: str, level: str, text: str, source: Optional[str] = None,
            force: bool = False) -> None:
        """``force``: written whatever the module's levels (1.19's per-connection protocol
        trace writes its frames at trace "unconditionally")."""
        settings = self.modules.get(module) or self.modules["DEFAULT"]
        if not force:
            enabled = settings.enabled
            if enabled is None:
                enabled = self.modules["DEFAULT"].enabled
            if level not in enabled:
                return
        if source is None:
            path, number = _caller()
        else:
            path, _, line = source.partition(":")
            number = int(line) if line.isdigit() else 0
        now = time.time()
        self.recent.append([module, level, text, path or None, number if path else None, now])
        counts = self.counts.get(module)
        if counts is None:
            counts = self.counts[module] = [0] * len(LEVELS)
        counts[LEVEL_INDEX[level]] += 1
        if self.report_path is not None:
            self._write_report()
        out = self._outputs.get(settings.output)
        if out is None:
            out = self._outputs[settings.output] = _handler(settings.output)
        source_text = f"{path}:{number}" if settings.source and path else None
        if type(out) in _STREAM_HANDLERS:
            # a stream's line written here, as its handler would write it (a line per
            # connection opened, in the worker and in the core: no record, no formatter)
            line_text = format_line(module, level, text, timestamp=settings.timestamp,
                                    source=source_text, now=now) + out.terminator
            held = self._held
            if held is not None and LEVEL_INDEX[level] < _WRITE_AT_ONCE:
                # a process loop's pass: written at its end (flush); a warning or worse goes
                # at once, after what is held (a process that dies next leaves its cause)
                lines = held.get(out)
                if lines is None:
                    lines = held[out] = []
                lines.append(line_text)
                return
            if held:
                self.flush()
            _write(out, line_text)
            return
        record = _Record(module, LEVEL_NUMBERS[level], path, number, text, now)
        record.qd_level = level
        record.qd_timestamp = settings.timestamp
        record.qd_source = source_text
        out.handle(record)

    def hold_lines(self) -> None:
        """From now on, lines for streams (files, stderr, stdout) below warning are kept until
        :meth:`flush`: a process loop calls it before a pass's effects leave and at its end,
        so the lines of a pass (a line per connection opened, thousands a second) leave in
        one write. A warning or worse is written at once, after the lines held before it.
        Lines of other outputs (syslog) are not held."""
        if self._held is None:
            self._held = {}

    def flush(self) -> None:
        """Write the lines held since the last call (:meth:`hold_lines`)."""
        held = self._held
        if held:
            self._held = {}
            for out, lines in held.items():
                _write(out, "".join(lines))

    def report(self) -> dict:
        """What management gathers from this process: ``counts`` (module -> lines per level)
        and ``entries`` (the recent ones, oldest first)."""
        return {"counts": {m: list(c) for m, c in self.counts.items()},
                "entries": [list(e) for e in self.recent]}

    def keep_report_in(self, path: str) -> None:
        """Rewrite :meth:`report` into ``path`` after every line (the supervisor, whose lines
        are few: the agent reads the file for management)."""
        self.report_path = path
        self._write_report()

    def _write_report(self) -> None:
        path = self.report_path
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(self.report(), f)
            os.replace(path + ".tmp", path)
        except (OSError, TypeError, ValueError):
            pass  # management then shows the other processes' lines only

    def reopen(self) -> None:
        """Reopen every log file now (logrotate's postrotate ``kill -HUP``): later lines go to
        a file of the configured name, whatever happened to the old one."""
        self.flush()  # the lines held so far go where the lines before them went
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
