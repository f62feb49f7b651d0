"""Log lines through the standard logging handlers: Qpid's line format, files reopened after
logrotate (moved away: at the next line; SIGHUP: RouterLog.reopen)."""
from __future__ import annotations

import re

from common.log import RouterLog

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} [+-]\d{4} (\w+) \((\w+)\) (.*)$")


def test_lines_have_qpids_format(tmp_path):
    path = tmp_path / "qdrouterd.log"
    log = RouterLog([{"module": "DEFAULT", "enable": "trace+", "outputFile": str(path)},
                     {"module": "POLICY", "includeSource": True, "includeTimestamp": False}])
    log.log("SERVER", "notice", "Operational, 4 Threads Running (process ID 7)")
    log.log("POLICY", "trace", "ALLOW", source="policy.c:120")
    log.log("ROUTER", "warning", "50% of 100%s")  # no %-formatting of the text
    lines = path.read_text().splitlines()
    assert LINE.match(lines[0]).groups() == ("SERVER", "notice",
                                             "Operational, 4 Threads Running (process ID 7)")
    assert lines[1] == "POLICY (trace) ALLOW (policy.c:120)"
    assert LINE.match(lines[2]).group(3) == "50% of 100%s"
    assert [e[:5] for e in log.recent][1] == ["POLICY", "trace", "ALLOW", "policy.c", 120]


def test_levels_below_the_modules_are_not_written(tmp_path):
    path = tmp_path / "r.log"
    log = RouterLog([{"module": "DEFAULT", "enable": "warning+", "outputFile": str(path)}])
    log.log("SERVER", "info", "quiet")
    log.log("SERVER", "error", "loud")
    assert [LINE.match(x).group(3) for x in path.read_text().splitlines()] == ["loud"]


def test_a_rotated_file_is_reopened_at_the_next_line(tmp_path):
    path = tmp_path / "r.log"
    log = RouterLog([{"module": "DEFAULT", "outputFile": str(path)}])
    log.log("SERVER", "info", "before")
    path.rename(tmp_path / "r.log.1")  # logrotate without copytruncate
    log.log("SERVER", "info", "after")
    assert LINE.match((tmp_path / "r.log.1").read_text()).group(3) == "before"
    assert LINE.match(path.read_text()).group(3) == "after"


def test_reopen_starts_a_new_file_at_once(tmp_path):
    path = tmp_path / "r.log"
    log = RouterLog([{"module": "DEFAULT", "outputFile": str(path)}])
    log.log("SERVER", "info", "before")
    path.rename(tmp_path / "r.log.1")
    log.reopen()  # what the supervisor does on SIGHUP
    assert path.exists() and path.read_text() == ""
    log.log("SERVER", "info", "after")
    assert LINE.match(path.read_text()).group(3) == "after"


def test_stream_lines_are_written_without_a_record_and_name_their_source(tmp_path, monkeypatch):
    # a line per connection opened, in the worker and in the core: a file's or stderr's line
    # is formatted and written by RouterLog itself (no LogRecord, no handler chain), and the
    # source line of a call site is looked up once, not once a line
    import logging

    from common import log as logmod
    made, lookups = [], []
    monkeypatch.setattr(logging.Handler, "handle", lambda self, record: made.append(record))
    real_caller = logmod._caller
    path = tmp_path / "r.log"
    log = RouterLog([{"module": "DEFAULT", "outputFile": str(path), "includeSource": True}])
    monkeypatch.setattr(logmod, "_LINES", _CountingDict(lookups))
    for i in range(50):
        log.log("SERVER", "info", f"[C{i}] Accepted connection")  # one call site
    assert made == []
    lines = path.read_text().splitlines()
    assert len(lines) == 50
    line = lines[0]
    assert LINE.match(line).group(3).startswith("[C0] Accepted connection (")
    source = line.rsplit("(", 1)[1].rstrip(")")
    assert source.endswith(f"test_log_output.py:{log.recent[0][4]}")
    assert lookups == [1]  # the call site's line number looked up once for the 50 lines
    assert real_caller is logmod._caller


class _CountingDict(dict):
    """A dict that counts the keys stored in it (each a look-up that was not cached)."""

    def __init__(self, stored: list) -> None:
        super().__init__()
        self.stored = stored

    def __setitem__(self, key, value) -> None:
        self.stored.append(1)
        super().__setitem__(key, value)


def test_held_lines_leave_in_one_write_at_flush(tmp_path, monkeypatch):
    # a process loop holds its pass's lines (a line per connection opened) and writes them
    # at the end of the pass: one write for the lot, in order, nothing before the flush
    path = tmp_path / "r.log"
    log = RouterLog([{"module": "DEFAULT", "outputFile": str(path)}])
    log.log("SERVER", "info", "before holding")  # written at once
    assert path.read_text().count("\n") == 1
    log.hold_lines()
    writes = []
    stream = log._outputs[str(path)].stream
    real_write = stream.write
    monkeypatch.setattr(stream, "write", lambda text: (writes.append(text), real_write(text))[1])
    for i in range(20):
        log.log("SERVER", "info", f"[C{i}] Accepted connection")
    assert writes == [] and path.read_text().count("\n") == 1
    log.flush()
    assert len(writes) == 1
    lines = path.read_text().splitlines()
    assert [LINE.match(x).group(3) for x in lines[1:]] == [
        f"[C{i}] Accepted connection" for i in range(20)]
    log.flush()  # nothing held: nothing written
    assert len(writes) == 1


def test_a_warning_is_written_at_once_after_the_held_lines(tmp_path):
    # a process that dies right after a warning or an error leaves it in the file, in order
    path = tmp_path / "r.log"
    log = RouterLog([{"module": "DEFAULT", "outputFile": str(path)}])
    log.hold_lines()
    log.log("SERVER", "info", "[C1] Accepted connection")
    assert path.read_text() == ""
    log.log("SERVER", "error", "internal error")
    assert [LINE.match(x).group(3) for x in path.read_text().splitlines()] == [
        "[C1] Accepted connection", "internal error"]
