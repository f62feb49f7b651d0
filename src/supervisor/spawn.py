"""How the supervisor starts a child process: forked from itself, its modules already imported.

Each child (core, agent, I/O worker) used to be a fresh interpreter (``python -m MODULE``) that
imported pyzmq, proton, the schema, ... again: four copies of the same 15-20 MB. Now the
supervisor imports every child's entry module once (:func:`preload`: the modules a child
imports when it starts, compiled or pure as ``common.builds`` would choose them), moves all of
it out of the cyclic collector's sight (``gc.freeze``: a collection writes to every object it
visits, and a written page is no longer shared) and forks each child from there. The children
share those pages with the supervisor and with each other copy-on-write; what a child holds of
its own is what it allocates or writes after the fork. The entry point is the same as on the
command line: the module's ``main(argv) -> int`` with the argv that ``python -m MODULE`` got,
and the child names itself as that command line (``setproctitle``), so ``ps`` still shows
``python -m router_io.worker --ipc DIR --index N ...``.

A forked child starts like an exec'd one: signals at their defaults (the supervisor's SIGTERM,
SIGINT and SIGHUP handlers are not its own), standard input on /dev/null, no descriptor of the
supervisor's but 0-2 (its listening sockets, ZeroMQ sockets and log files are closed at once),
no ``NOTIFY_SOCKET`` (only the supervisor talks to systemd). It never returns into the
supervisor's code: whatever ``main`` does, it ends with ``os._exit``, so the supervisor's
objects it carries (never used) are neither finalised nor flushed twice.

``QDROUTERD_SPAWN=exec`` (or setproctitle missing) starts the children as separate interpreters
instead (``benchmarks/bench_memory.py --only footprint`` compares the two). The child modules
are named here as strings, as on a command line: the supervisor does not import their
packages' code otherwise.
Must not import router_core, router_io or agent by an import statement.
"""
from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Optional, Union

from common.builds import extensions_enabled

# child kind -> its entry module (``python -m`` name, ``main(argv) -> int``)
ENTRY = {"core": "router_core.coreproc", "agent": "agent.controlplane",
         "worker": "router_io.worker"}
# what the children choose when they start (common.builds.choose), compiled then reference
CHOSEN_AT_START = (("router_core._core", "router_core.core"),
                   ("router_io._engine", "router_io.engine"))
SPAWN_ENV = "QDROUTERD_SPAWN"
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)


def forking() -> bool:
    """Children forked from the pre-imported supervisor (default), not exec'd. Without
    setproctitle (an install not updated) they are exec'd: a forked child could not name
    itself, and ``ps`` would show four supervisors."""
    return os.environ.get(SPAWN_ENV, "fork") != "exec" and can_name_children()


def can_name_children() -> bool:
    try:
        return importlib.util.find_spec("setproctitle") is not None
    except (ImportError, ValueError):  # ValueError: blocked (None in sys.modules)
        return False


def preload() -> None:
    """Import what the children import at start, then freeze it (see the module's text)."""
    for module in ENTRY.values():
        importlib.import_module(module)
    for compiled, reference in CHOSEN_AT_START:
        try:
            importlib.import_module(compiled if extensions_enabled() else reference)
        except ImportError:  # not built: the child falls back to (or fails on) its own
            importlib.import_module(reference)
    import setproctitle  # noqa: F401 - the children name themselves with it
    gc.collect()
    gc.freeze()


def command_line(kind: str, args: list) -> list:
    return [sys.executable, "-m", ENTRY[kind], *args]


class ForkedChild:
    """A forked child, with the part of ``subprocess.Popen`` the supervisor uses."""

    def __init__(self, pid: int, args: list) -> None:
        self.pid = pid
        self.args = args
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL  # reaped elsewhere: gone, cause unknown
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Child = Union[subprocess.Popen, ForkedChild]


def start_child(kind: str, args: list, env: dict) -> Child:
    """Start one child: ``args`` as after ``python -m ENTRY``; ``env`` its environment."""
    cmd = command_line(kind, args)
    if not forking():
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
    module = importlib.import_module(ENTRY[kind])  # preloaded: a dict look-up
    gc.freeze()  # what the supervisor allocated since: no collection in the child touches it
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the child would write the supervisor's buffered lines again
    # no supervisor handler may run in the child: signals wait until it has reset them
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        pid = os.fork()
        if pid == 0:
            _child(module, cmd, args, env)  # never returns
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return ForkedChild(pid, cmd)


def _child(module, cmd: list, args: list, env: dict) -> None:
    code = 1
    try:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        import setproctitle  # first: it finds the title's room by the environment's place
        setproctitle.setproctitle(" ".join(cmd))
        setproctitle.setthreadtitle(os.path.basename(sys.executable))
        os.environ.clear()
        os.environ.update(env)
        code = module.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: B036 - whatever it is, the child ends here, not in our code
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 0)
