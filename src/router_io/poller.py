"""The worker's poller: ``zmq.Poller``'s interface over epoll, so a wait costs O(ready), not
O(registered).

``zmq.Poller.poll`` hands its whole list to ``zmq_poll`` on every call: pyzmq walks it in Python
(a ``fileno()`` call per plain socket) and the kernel polls every descriptor, so with N idle
connections each turn of the worker's loop cost O(N), and opening N connections O(N^2) (at
10,000 connections that walk was most of the worker's CPU). Here plain sockets live in an
epoll set (level-triggered, as poll(2)); ZeroMQ sockets, a few, are asked for their
``EVENTS`` before the wait and after it (their ``FD`` is in the set only to wake the wait:
it signals edges, not readiness).

Same answers as ``zmq.Poller``: ``poll(timeout_ms)`` returns ``(target, mask)`` with the ZeroMQ
socket itself for a ZeroMQ socket and the descriptor (an int) for anything else, ZeroMQ
sockets first; masks are ``zmq.POLLIN``/``POLLOUT``, and ``POLLERR`` for any other condition
(hang-up, error), as ``zmq_poll`` maps poll(2)'s; ``register`` with a mask of 0 unregisters;
``unregister`` of an object not registered raises KeyError. A descriptor closed before its
object is unregistered has left the epoll set with its file; a new socket given the same
number meanwhile keeps its own registration.

Must not import router_core, agent or supervisor.
"""
from __future__ import annotations

import select
from typing import Any, Optional

import zmq

POLLIN, POLLOUT, POLLERR = int(zmq.POLLIN), int(zmq.POLLOUT), int(zmq.POLLERR)
_EPOLL_OTHER = ~(select.EPOLLIN | select.EPOLLOUT | select.EPOLLPRI)


def _epoll_mask(mask: int) -> int:
    return (select.EPOLLIN if mask & POLLIN else 0) | (select.EPOLLOUT if mask & POLLOUT else 0)


class Poller:
    """Register sockets (ZeroMQ or anything with ``fileno()``, or an int) and wait for them."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._zmq: dict[Any, int] = {}        # ZeroMQ socket -> mask, in registration order
        self._zmq_fds: dict[int, Any] = {}    # its FD (in the epoll set) -> the socket
        self._fd_of: dict[Any, int] = {}      # registered object -> its descriptor
        self._by_fd: dict[int, Any] = {}      # descriptor -> the object registered on it
        self.polled = 0  # descriptors the last poll looked at (ready ones, and ZeroMQ's)

    def __len__(self) -> int:
        return len(self._zmq) + len(self._fd_of)

    def register(self, obj: Any, mask: int = POLLIN | POLLOUT) -> None:
        if not mask:
            if obj in self._zmq or obj in self._fd_of:
                self.unregister(obj)
            return
        if isinstance(obj, zmq.Socket):
            if obj not in self._zmq:
                fd = obj.getsockopt(zmq.FD)
                self._epoll.register(fd, select.EPOLLIN)
                self._zmq_fds[fd] = obj
            self._zmq[obj] = mask
            return
        fd = self._fd_of.get(obj)
        if fd is not None and self._by_fd.get(fd) is obj:
            self._epoll.modify(fd, _epoll_mask(mask))
            return
        fd = obj if isinstance(obj, int) else obj.fileno()
        self._epoll.register(fd, _epoll_mask(mask))
        self._fd_of[obj] = fd
        self._by_fd[fd] = obj

    modify = register

    def unregister(self, obj: Any) -> None:
        if obj in self._zmq:
            del self._zmq[obj]
            for fd, sock in list(self._zmq_fds.items()):
                if sock is obj:
                    del self._zmq_fds[fd]
                    self._forget(fd)
            return
        fd = self._fd_of.pop(obj)  # KeyError, as zmq.Poller
        if self._by_fd.get(fd) is obj:
            del self._by_fd[fd]
            self._forget(fd)

    def _forget(self, fd: int) -> None:
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):
            pass  # closed already: the kernel dropped it from the set with its file

    def _zmq_ready(self) -> list:
        ready = []
        for sock, mask in self._zmq.items():
            events = sock.getsockopt(zmq.EVENTS) & mask
            if events:
                ready.append((sock, events))
        return ready

    def poll(self, timeout: Optional[int] = None) -> list:
        """``(target, mask)`` of what is ready, waiting at most ``timeout`` ms (None or < 0:
        until something is)."""
        ready = self._zmq_ready()
        if ready:
            wait = 0.0
        elif timeout is None or timeout < 0:
            wait = -1.0
        else:
            wait = timeout / 1000.0
        try:
            events = self._epoll.poll(wait)
        except InterruptedError:
            events = []
        if not ready and self._zmq:
            ready = self._zmq_ready()  # a ZeroMQ socket's FD woke the wait, or another did
        by_fd = self._by_fd
        for fd, ev in events:
            obj = by_fd.get(fd)
            if obj is None:
                continue  # a ZeroMQ socket's FD (asked above), or one unregistered meanwhile
            mask = (POLLIN if ev & select.EPOLLIN else 0) | (POLLOUT if ev & select.EPOLLOUT
                                                             else 0)
            if ev & _EPOLL_OTHER:
                mask |= POLLERR
            ready.append((fd, mask))
        self.polled = len(events) + len(self._zmq)
        return ready

    def close(self) -> None:
        self._epoll.close()
