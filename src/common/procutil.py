"""Small process helpers shared by the supervisor and its children: endpoints and lifetimes.

Owns the names of the ZeroMQ endpoints in the router's private runtime directory and the
"die with the parent" guarantee that keeps a killed supervisor from leaving orphans.
Must not import router_io or agent.
"""
from __future__ import annotations

import argparse
import ctypes
import faulthandler
import fcntl
import gc
import json
import os
import resource
import signal
import socket
from typing import Any, Optional

import zmq

PR_SET_PDEATHSIG = 1


class SignalWake:
    """Wakes a process's poll loop when a signal arrives.

    Python runs a signal's handler only when the C call it is in returns; pyzmq's poll retries
    after EINTR with the time left, so a SIGTERM used to take effect only when the loop's poll
    timed out (up to 1 s per process, and the supervisor stops its children in three groups).
    ``signal.set_wakeup_fd`` makes the C-level handler write a byte to this socket pair; the loop
    polls ``sock`` (readable at once) and calls ``drain`` when it is ready.
    """

    def __init__(self) -> None:
        self.sock, self._w = socket.socketpair()
        self.sock.setblocking(False)
        self._w.setblocking(False)
        signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)

    def drain(self) -> None:
        try:
            while self.sock.recv(256):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        signal.set_wakeup_fd(-1)
        self.sock.close()
        self._w.close()


def watch_sigterm(stop: Any) -> SignalWake:
    """A child's SIGTERM: ``stop`` ends its loop, the returned wake (to poll) ends its poll."""
    signal.signal(signal.SIGTERM, stop)
    return SignalWake()


def core_endpoint(ipc_dir: str) -> str:
    return f"ipc://{os.path.join(ipc_dir, 'core')}"


def supervisor_endpoint(ipc_dir: str) -> str:
    return f"ipc://{os.path.join(ipc_dir, 'supervisor')}"


def status_socket(ctx: zmq.Context, ipc_dir: str) -> zmq.Socket:
    """A PUSH socket to the supervisor, for ChildStatus reports."""
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(supervisor_endpoint(ipc_dir))
    return sock


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent (the supervisor) dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


# Young-generation threshold of the cyclic GC in the per-message processes (Python's default:
# 700). A delivery allocates a few tuples that reference counting frees at once; with the
# default the collector still ran every few hundred messages (3-4% of a worker's CPU).
GC_GEN0_THRESHOLD = 50_000


def steady_gc() -> None:
    """Before a child's loop: what start-up allocated (modules, configuration) moves out of
    the collector's sight for good (``gc.freeze``), and young collections become rare."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


# The most descriptors presize_fd_table makes room for (the kernel's table: 8 bytes each).
FD_TABLE_CAP = 65536


def presize_fd_table(cap: int = FD_TABLE_CAP) -> int:
    """Grow this process's descriptor table once, now, to what RLIMIT_NOFILE allows (at most
    ``cap``): returns its size (0: left as it is). Linux doubles the table when a new
    descriptor does not fit (64, 128, 256, ...), and in a process with threads (ZeroMQ's) each
    doubling waits for an RCU grace period, 10-20 ms in which accept4() does not return: a
    worker taking thousands of connections paid one stall each time their count doubled. The
    table never shrinks, so one descriptor placed at the top and closed again leaves it
    grown; F_DUPFD takes the lowest free number at or above the top, so no open descriptor
    is touched."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    size = min(soft, cap) if soft != resource.RLIM_INFINITY else cap
    if size <= 64:  # the table a process starts with
        return 0
    fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        top = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, size - 1)
        os.close(top)
    except OSError:  # every number from there on in use: the table is that large already
        return 0
    finally:
        os.close(fd)
    return size


def run_profiled(name: str, func) -> int:
    """Run ``func()``; under ROUTER_PROFILE_DIR=dir, profile it into dir/<name>.prof (dev aid)."""
    target = os.environ.get("ROUTER_PROFILE_DIR")
    if not target:
        return func()
    import cProfile
    profiler = cProfile.Profile()
    try:
        return profiler.runcall(func)
    finally:
        profiler.dump_stats(os.path.join(target, f"{name}.prof"))


def child_start(prog: str, argv: Optional[list], peer: bool = True) -> tuple:
    """Common start of a child process: parse ``--ipc`` (and ``--index``/``--peers`` for peers
    of the core), arrange to die with the supervisor, load the runtime spec.

    Returns ``(args, spec)``. SIGINT is ignored: the supervisor owns Ctrl-C and sends SIGTERM.
    """
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--ipc", required=True)
    if peer:
        parser.add_argument("--index", type=int, required=True)
        parser.add_argument("--peers", type=int, required=True)
        parser.add_argument("--generation", type=int, default=0,
                            help="how many times this child was restarted (0: first start)")
    args = parser.parse_args(argv)
    die_with_parent()
    # a crash in C code (proton, libzmq) leaves the Python stack of every thread on stderr (the
    # router's log), so a restarted child's critical line has a cause next to it
    faulthandler.enable()
    with open(os.path.join(args.ipc, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return args, spec
