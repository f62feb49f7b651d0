"""A poller whose cost per wake-up does not grow with the number of connections.

``zmq.Poller`` hands every registered socket to ``zmq_poll`` (poll(2)) on every call: with
10,000 connections each wake-up of a worker cost about 14 ms, whatever woke it. This class has
``zmq.Poller``'s interface (``register``, ``modify``, ``unregister``, ``poll`` returning
``[(socket, mask)]`` with ``zmq.POLLIN``/``POLLOUT``/``POLLERR``, a plain socket given by its
descriptor number, as ``zmq.Poller`` gives it) but keeps plain sockets (any
object with ``fileno()``) in a level-triggered epoll set, whose descriptor is the one extra
item of a small ``zmq.Poller`` beside the ZeroMQ sockets. A wake-up costs the ready sockets,
not the registered ones.

As ``zmq.Poller``: registering with mask 0 unregisters; registering again changes the mask.
An object is known by identity; a descriptor closed before its object was unregistered (the
kernel dropped it from the set) is forgotten quietly, and never unregisters a newer object that
got the same descriptor number. Must not import router_core, agent or supervisor.
"""
from __future__ import annotations

import select
from typing import Any

import zmq

# ints: an IntFlag's & and | are Python code, run for every ready socket
_IN, _OUT, _ERR = int(zmq.POLLIN), int(zmq.POLLOUT), int(zmq.POLLERR)
_EPOLL_ERR = select.EPOLLERR | select.EPOLLHUP
_EPOLL_IN = select.EPOLLIN


def _epoll_mask(mask: int) -> int:
    return (select.EPOLLIN if mask & _IN else 0) | (select.EPOLLOUT if mask & _OUT else 0)


class SocketPoller:
    def __init__(self) -> None:
        self._zmq = zmq.Poller()
        self._epoll = select.epoll()
        self._zmq.register(self._epoll.fileno(), _IN)
        self._fd_of: dict[int, int] = {}    # id(object) -> its descriptor when registered
        self._by_fd: dict[int, Any] = {}    # descriptor -> the object registered on it

    def register(self, target: Any, mask: int) -> None:
        if isinstance(target, zmq.Socket):
            self._zmq.register(target, mask)
            return
        if not mask:
            self.unregister(target)
            return
        fd = self._fd_of.get(id(target))
        if fd is not None and self._by_fd.get(fd) is target:
            self._epoll.modify(fd, _epoll_mask(mask))
            return
        fd = target.fileno()
        stale = self._by_fd.get(fd)
        if stale is not None:  # its descriptor was closed and reused: the kernel dropped it
            self._fd_of.pop(id(stale), None)
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass
        self._add(target, fd, _epoll_mask(mask))

    modify = register

    def _add(self, target: Any, fd: int, emask: int) -> None:
        self._epoll.register(fd, emask)
        self._fd_of[id(target)] = fd
        self._by_fd[fd] = target

    def register_socket(self, sock: Any) -> None:
        """A new plain socket, polled for input (the worker's accept: register's checks for
        ZeroMQ sockets and a changed mask skipped; a reused descriptor still handled)."""
        fd = sock.fileno()
        if fd in self._by_fd:
            self.register(sock, _IN)
            return
        self._add(sock, fd, _EPOLL_IN)

    def unregister(self, target: Any) -> None:
        if isinstance(target, zmq.Socket):
            self._zmq.unregister(target)
            return
        fd = self._fd_of.pop(id(target), None)
        if fd is None:
            raise KeyError(target)  # as zmq.Poller
        if self._by_fd.get(fd) is target:
            del self._by_fd[fd]
            try:
                self._epoll.unregister(fd)
            except OSError:  # closed already: the kernel removed it
                pass

    def poll(self, timeout: Any = None) -> list:
        """[(ZeroMQ socket or descriptor, mask)] of what is ready, waiting at most ``timeout`` ms (None: forever)."""
        events = []
        epoll_fd = self._epoll.fileno()
        ready = False
        for target, mask in self._zmq.poll(timeout):
            if target == epoll_fd:
                ready = True
            else:
                events.append((target, mask))
        if ready:
            by_fd = self._by_fd
            for fd, emask in self._epoll.poll(0):
                if fd not in by_fd:
                    continue
                mask = (_IN if emask & select.EPOLLIN else 0) | \
                    (_OUT if emask & select.EPOLLOUT else 0) | (_ERR if emask & _EPOLL_ERR else 0)
                events.append((fd, mask))
        return events

    def close(self) -> None:
        self._epoll.close()
