"""``qdrouterd``'s command line: 1.19's options, usage text and SysV daemon mode.

Owns what happens before the configuration is read and the child processes exist: parsing the
options exactly as 1.19's ``getopt_long`` does (same error wording, ``-h`` quirk included), the
usage text, and ``-d``/``-P``: the double fork, the pid file and the pipe through which the
daemon tells the process the user started whether it became operational. ``supervisor/main.py``
(the entry point, ``main``) uses it.
"""
from __future__ import annotations

import argparse
import getopt
import os
import sys
from typing import Optional

from common.buildinfo import docs_pointer

DEFAULT_CONFIG = "/etc/qpid-dispatch/qdrouterd.conf"

USAGE = """Usage: qdrouterd [OPTIONS]

  -c, --config=PATH ({config})
                             Load configuration from file at PATH
  -I, --include=PATH ({include})
                             Location of Dispatch's Python library
  -d, --daemon               Run process as a SysV-style daemon
  -P, --pidfile              If daemon, the file for the stored daemon pid
  -U, --user                 If daemon, the username to run as
  -T, --test-hooks           Enable internal system testing features
  -v, --version              Print the version of Qpid Dispatch Router
  -h, --help                 Print this help
      --build-info           Print this build's own version (qdrouter-py), its Python,
                             proton and compiled modules, and where its documentation is

{docs}
"""
_SHORT = "c:I:dP:U:h:vT"   # 1.19's getopt string: '-h' wants an argument, '--help' does not
_LONG = ["config=", "include=", "daemon", "pidfile=", "user=", "help", "version", "test-hooks",
         "build-info"]   # --build-info is ours: 1.19 has no such option


class UsageError(Exception):
    """A bad command line: ``message`` (may be empty) then the usage text, exit 1."""


def usage_text() -> str:
    return USAGE.format(config=DEFAULT_CONFIG, include=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), docs=docs_pointer("configuration.md", "migration.md",
                                                       "troubleshooting.md"))


def _getopt_message(exc: getopt.GetoptError) -> str:
    """glibc's getopt_long wording, which 1.19's qdrouterd prints."""
    opt, msg = exc.opt, exc.msg
    if len(opt) == 1:
        if "requires argument" in msg:
            return f"qdrouterd: option requires an argument -- '{opt}'"
        return f"qdrouterd: invalid option -- '{opt}'"
    if "requires argument" in msg:
        return f"qdrouterd: option '--{opt}' requires an argument"
    if "must not have an argument" in msg:
        return f"qdrouterd: option '--{opt}' doesn't allow an argument"
    if "not a unique prefix" in msg:
        return f"qdrouterd: option '--{opt}' is ambiguous"
    return f"qdrouterd: unrecognized option '--{opt}'"


def parse_args(argv: Optional[list]) -> argparse.Namespace:
    """1.19's command line (getopt_long ``c:I:dP:U:h:vT``); a bad one raises UsageError."""
    args = argparse.Namespace(config=DEFAULT_CONFIG, include=None, daemon=False, pidfile=None,
                              user=None, test_hooks=False, version=False, help=False,
                              build_info=False)
    try:
        opts, rest = getopt.gnu_getopt(list(sys.argv[1:] if argv is None else argv), _SHORT,
                                       _LONG)
    except getopt.GetoptError as exc:
        raise UsageError(_getopt_message(exc)) from None
    for opt, value in opts:
        if opt in ("-c", "--config"):
            args.config = value
        elif opt in ("-I", "--include"):
            args.include = value
        elif opt in ("-d", "--daemon"):
            args.daemon = True
        elif opt in ("-P", "--pidfile"):
            args.pidfile = value
        elif opt in ("-U", "--user"):
            args.user = value
        elif opt in ("-h", "--help"):
            args.help = True
            break                     # 1.19 prints the usage and exits at once
        elif opt in ("-v", "--version"):
            args.version = True
            break
        elif opt == "--build-info":
            args.build_info = True
            break
        elif opt in ("-T", "--test-hooks"):
            args.test_hooks = True
    if rest and not (args.help or args.version or args.build_info):
        raise UsageError("Unexpected arguments: " + " ".join(rest) + "\n")
    return args


class _Daemon:
    """1.19's SysV daemon: fork, setsid, fork again; the grandchild has stdin/stdout/stderr on
    /dev/null, umask 0, cwd "/" and writes the pid file, then reports "ok" (after the
    Operational line) or its start-up error through a pipe; the original process exits 0 on
    "ok", else prints the error and exits 1."""

    def __init__(self) -> None:
        self.fd: Optional[int] = None

    def detach(self, pidfile: Optional[str]) -> None:
        read_fd, write_fd = os.pipe()
        if os.fork() > 0:                               # the process the user started
            os.close(write_fd)
            chunks = []
            while True:
                data = os.read(read_fd, 4096)
                if not data:
                    break
                chunks.append(data)
            result = b"".join(chunks).decode("utf-8", "replace")
            if result == "ok":
                os._exit(0)
            sys.stderr.write(result or "qdrouterd: the daemon exited before it was operational\n")
            sys.stderr.flush()
            os._exit(1)
        os.close(read_fd)
        self.fd = write_fd
        try:
            os.setsid()
        except OSError as exc:
            self._exit(f"Cannot start a new session: {exc.strerror}")
        if os.fork() > 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        if devnull > 2:
            os.close(devnull)
        os.umask(0)
        os.chdir("/")
        if pidfile:
            try:
                with open(pidfile, "w", encoding="ascii") as f:
                    f.write(f"{os.getpid()}\n")
            except OSError as exc:
                self._exit(f"Can't write pidfile {pidfile}: {exc.strerror}")

    def ok(self) -> None:
        self._send("ok")

    def fail(self, message: str) -> None:
        """The start failed: the original process prints ``message`` and exits 1."""
        self._send(f"qdrouterd: {message}\n")

    def _exit(self, message: str) -> None:
        self.fail(message)
        os._exit(1)

    def _send(self, text: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, text.encode("utf-8"))
            os.close(self.fd)
        except OSError:
            pass
        self.fd = None
