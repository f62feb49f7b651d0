"""``qdrouterd``: parse and validate the configuration, then run and watch the router's processes.

This module is the entry point (``main``, ``python -m supervisor.main``, the ``qdrouterd``
script): the command line is ``supervisor/cmdline.py``, the child-process table and its supervision
``supervisor/children.py``; their public names are importable from here too.

Processes (see src/router_core/DESIGN.md): one core, ``workerThreads`` I/O workers and one agent
(control plane). The supervisor validates the whole configuration first and starts nothing if it
is bad. Children get a runtime spec (``spec.json`` in a private runtime directory that also holds
the ZeroMQ endpoints) and report readiness over a PUSH socket.

Listening sockets and supervision (restarts, crash loop, orderly shutdown) are described in
``supervisor/children.py``, which implements them.

Service integration: the runtime directory is created under ``$RUNTIME_DIRECTORY`` when systemd
sets it (``RuntimeDirectory=qdrouterd``), else under the temporary directory. systemd is told
READY=1 at the "Operational" line, RELOADING=1/READY=1 around a reload, STOPPING=1 on shutdown
(``supervisor/notify.py``; nothing without ``$NOTIFY_SOCKET``). SIGHUP re-reads the configuration file:
a bad file is logged and changes nothing; otherwise the differences (listeners, connectors,
addresses, log settings) are applied by the agent through management (``supervisor/reload.py``).
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Optional

from supervisor import notify
from supervisor.children import (  # re-exported (__all__)
    CORE_RESTART_GRACE, RELOAD_CONNECT_MS, RELOAD_TIMEOUT, RESTART_LIMIT, RESTART_WINDOW,
    START_TIMEOUT, STOP_TIMEOUT, WATCH_INTERVAL_MS, Supervisor, build_spec, describe_exit,
    runtime_parent)
from supervisor.cmdline import (  # re-exported (__all__)
    DEFAULT_CONFIG, USAGE, UsageError, _Daemon, parse_args, usage_text)
from supervisor.config import ConfigError, load_config
from common.buildinfo import build_info, startup_line
from common.identity import VERSION
from supervisor.sizing import Sizing, SizingError
from common.log import LogConfigError, RouterLog

__all__ = [  # the entry point, and the names callers imported from here before the split
    "main", "VERSION", "DEFAULT_CONFIG", "USAGE", "UsageError", "parse_args", "usage_text",
    "Supervisor", "build_spec", "describe_exit", "runtime_parent", "START_TIMEOUT",
    "STOP_TIMEOUT", "RELOAD_TIMEOUT", "RELOAD_CONNECT_MS", "WATCH_INTERVAL_MS", "RESTART_LIMIT",
    "RESTART_WINDOW", "CORE_RESTART_GRACE"]


def main(argv: Optional[list] = None) -> int:
    try:
        args = parse_args(argv)
    except UsageError as exc:
        if str(exc):
            print(str(exc), file=sys.stderr)
        sys.stdout.write(usage_text())
        return 1
    if args.help:
        sys.stdout.write(usage_text())
        return 0
    if args.version:
        print(VERSION)      # 1.19's tools and scripts read this: the build's own is --build-info
        return 0
    if args.build_info:
        sys.stdout.write(build_info())
        return 0
    try:
        config = load_config(args.config)
        spec = build_spec(config)
        spec["testHooks"] = bool(args.test_hooks)  # -T: 1.19's test endpoints (core, agent)
    except ConfigError as exc:
        if exc.warnings:  # 1.19 logs them (DEFAULT's output: stderr) before it fails
            _log_warnings(RouterLog(), exc.warnings)
        print(f"qdrouterd: configuration error: {exc}", file=sys.stderr)
        return 1
    except SizingError as exc:
        print(f"qdrouterd: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"qdrouterd: cannot read configuration {args.config}: {exc.strerror}",
              file=sys.stderr)
        return 1
    config_path = os.path.abspath(args.config)   # a daemon works from "/"
    daemon = _Daemon()
    if args.daemon:
        daemon.detach(args.pidfile)
    try:
        log = RouterLog(spec["logs"])
    except LogConfigError as exc:
        daemon.fail(f"configuration error: {exc}")
        print(f"qdrouterd: configuration error: {exc}", file=sys.stderr)
        return 1
    log.log("SERVER", "notice", startup_line())
    _log_warnings(log, config.warnings)
    if args.user:
        import pwd
        pw = pwd.getpwnam(args.user)
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    sup = Supervisor(spec, log, config_path)
    signal.signal(signal.SIGTERM, sup.request_stop)
    signal.signal(signal.SIGINT, sup.request_stop)
    signal.signal(signal.SIGHUP, sup.request_reload)
    try:
        error = sup.bind_listeners()
        if error:  # one router per port: as 1.x, a listener that cannot be bound stops the start
            log.log("SERVER", "critical", error)
            daemon.fail(error)
            return 1
        error = sup.start()
        if error:
            log.log("SERVER", "critical", f"Router start-up failed: {error}")
            daemon.fail(f"Router start-up failed: {error}")
            return 1
        log.log("SERVER", "notice", Sizing(**spec["workerSizing"]).describe())
        log.log("SERVER", "notice", f"Operational, {spec['workerSizing']['threads']} Threads Running "
                                    f"(process ID {os.getpid()})")
        notify.ready(sup.status_text())
        daemon.ok()
        code = sup.watch()
        log.log("SERVER", "notice", "Shut Down")
        return code
    finally:
        notify.stopping()
        sup.shutdown()


def _log_warnings(log: RouterLog, warnings: list) -> None:
    """RouterConfig/ConfigError warnings: a str is AGENT's, a (module, text) pair another's."""
    for warning in warnings:
        module, text = warning if isinstance(warning, tuple) else ("AGENT", warning)
        log.log(module, "warning", text)


if __name__ == "__main__":
    sys.exit(main())
