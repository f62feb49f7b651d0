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
