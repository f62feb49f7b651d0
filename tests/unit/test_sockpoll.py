"""router_io/sockpoll.py: zmq.Poller's answers, with the work of a wake-up counted by what is
ready, not by what is registered."""
from __future__ import annotations

import socket

import zmq

from router_io.sockpoll import SocketPoller


def test_answers_like_zmq_poller_for_plain_and_zmq_sockets():
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind("inproc://sockpoll")
    push.connect("inproc://sockpoll")
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        ours, theirs = SocketPoller(), zmq.Poller()
        for poller in (ours, theirs):
            poller.register(pull, zmq.POLLIN)
            for a, _ in pairs:
                poller.register(a, zmq.POLLIN)
        assert ours.poll(0) == [] == theirs.poll(0)
        pairs[1][1].send(b"x")
        push.send(b"y")
        assert sorted(ours.poll(100), key=str) == sorted(theirs.poll(100), key=str) == \
            sorted([(pull, zmq.POLLIN), (pairs[1][0].fileno(), zmq.POLLIN)], key=str)
        for poller in (ours, theirs):
            poller.modify(pairs[0][0], zmq.POLLOUT)  # writable at once
            poller.register(pairs[1][0], 0)          # mask 0: unregistered
        assert sorted(ours.poll(0), key=str) == sorted(theirs.poll(0), key=str)
        assert (pairs[0][0].fileno(), zmq.POLLOUT) in ours.poll(0)
        ours.unregister(pairs[0][0])
        assert (pairs[0][0].fileno(), zmq.POLLOUT) not in ours.poll(0)
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        pull.close()
        push.close()
        ctx.term()


def test_a_closed_descriptor_reused_by_a_new_socket_is_the_new_one():
    poller = SocketPoller()
    a, b = socket.socketpair()
    poller.register(a, zmq.POLLIN)
    fd = a.fileno()
    a.close()  # closed before it was unregistered: the kernel drops it from the set
    b.close()
    c, d = socket.socketpair()
    try:
        new = c if c.fileno() == fd else d
        poller.register(new, zmq.POLLIN)
        (d if new is c else c).send(b"z")
        assert poller.poll(100) == [(new.fileno(), zmq.POLLIN)]
    finally:
        c.close()
        d.close()
        poller.close()


def test_a_wake_up_costs_the_ready_sockets_not_the_registered_ones():
    """Counted: the events a wake-up returns (and hands to epoll) with 2,000 idle sockets
    registered are the one that is ready."""
    poller = SocketPoller()
    pairs = [socket.socketpair() for _ in range(1000)]
    try:
        for a, b in pairs:
            poller.register(a, zmq.POLLIN)
            poller.register(b, zmq.POLLIN)
        pairs[500][1].send(b"x")
        assert poller.poll(100) == [(pairs[500][0].fileno(), zmq.POLLIN)]
        assert len(poller._zmq.sockets) == 1  # the epoll descriptor alone goes to zmq_poll
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        poller.close()


def test_register_socket_polls_a_new_socket_for_input_and_replaces_a_stale_one():
    poller = SocketPoller()
    a, b = socket.socketpair()
    try:
        poller.register_socket(a)
        b.send(b"x")
        assert poller.poll(100) == [(a.fileno(), zmq.POLLIN)]
        fd = a.fileno()
        a.close()  # closed without unregistering: the kernel dropped it from the set
        c, d = socket.socketpair()  # the lowest free descriptors: c takes a's number
        assert c.fileno() == fd
        poller.register_socket(c)
        d.send(b"y")
        assert (c.fileno(), zmq.POLLIN) in poller.poll(100)
        poller.unregister(c)
        c.close()
        d.close()
    finally:
        b.close()
        poller.close()
