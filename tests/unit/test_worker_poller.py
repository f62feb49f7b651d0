"""The worker's poller (router_io/poller.py): zmq.Poller's answers, at a cost that follows the
descriptors that are ready, not the ones registered (counted: ``Poller.polled``)."""
from __future__ import annotations

import socket

import pytest
import zmq

from router_io.poller import POLLERR, POLLIN, POLLOUT, Poller


@pytest.fixture
def pairs():
    made = []

    def make(n):
        got = [socket.socketpair() for _ in range(n)]
        for a, b in got:
            a.setblocking(False)
            b.setblocking(False)
        made.extend(got)
        return got
    yield make
    for a, b in made:
        a.close()
        b.close()


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def both(pollers, op, *args):
    return [getattr(p, op)(*args) for p in pollers]


def answers(pollers, timeout=0):
    return [sorted(p.poll(timeout), key=lambda x: (not isinstance(x[0], int), str(x[0])))
            for p in pollers]


def test_same_answers_as_zmq_poller(pairs, zctx):
    ours, theirs = Poller(), zmq.Poller()
    pollers = (ours, theirs)
    (a, b), (c, d) = pairs(2)
    both(pollers, "register", a, POLLIN)
    both(pollers, "register", c, POLLIN | POLLOUT)
    mine, yours = answers(pollers)
    assert mine == yours == [(c.fileno(), POLLOUT)]
    b.send(b"x")
    mine, yours = answers(pollers)
    assert mine == yours and (a.fileno(), POLLIN) in mine
    both(pollers, "modify", c, 0)  # a mask of 0: no longer polled
    a.recv(10)
    assert answers(pollers) == [[], []]
    with pytest.raises(KeyError):
        ours.unregister(c)
    with pytest.raises(KeyError):
        theirs.unregister(c)
    d.close()  # the peer hangs up: readable (EOF) for both
    both(pollers, "register", c, POLLIN)
    mine, yours = answers(pollers)
    assert mine == yours and mine[0][0] == c.fileno() and mine[0][1] & POLLIN


def test_zmq_sockets_first_and_only_when_their_events_say_so(pairs, zctx):
    pull = zctx.socket(zmq.PULL)
    push = zctx.socket(zmq.PUSH)
    pull.bind("inproc://p")
    push.connect("inproc://p")
    ours = Poller()
    ours.register(pull, POLLIN)
    (a, b), = pairs(1)
    ours.register(a, POLLIN)
    assert ours.poll(0) == []
    push.send(b"1")
    push.send(b"2")
    b.send(b"x")
    got = ours.poll(1000)
    assert got[0] == (pull, POLLIN) and (a.fileno(), POLLIN) in got
    pull.recv()  # one of two taken: the socket's FD will not signal again, EVENTS still says so
    a.recv(10)
    assert ours.poll(0) == [(pull, POLLIN)]
    pull.recv()
    assert ours.poll(0) == []
    push.send(b"3")  # wakes a wait
    assert ours.poll(2000) == [(pull, POLLIN)]
    ours.unregister(pull)
    assert ours.poll(0) == []
    push.close(0)
    pull.close(0)


def test_a_wait_looks_at_the_ready_descriptors_only(pairs):
    ours = Poller()
    counts = {}
    for n in (10, 1000):
        made = pairs(n)
        for a, _ in made:
            ours.register(a, POLLIN)
        made[n // 2][1].send(b"x")
        got = ours.poll(1000)
        assert got == [(made[n // 2][0].fileno(), POLLIN)]
        counts[n] = ours.polled
        made[n // 2][0].recv(10)
        for a, _ in made:
            ours.unregister(a)
    assert counts[10] == counts[1000] == 1


def test_a_descriptor_closed_then_reused_keeps_the_new_registration(pairs):
    ours = Poller()
    (a, b), = pairs(1)
    fd = a.fileno()
    ours.register(a, POLLIN)
    a.close()  # closed before it is unregistered (its file left the epoll set with it)
    c, d = socket.socketpair()
    try:
        if c.fileno() != fd:  # the kernel handed out another number: nothing to reuse
            c, d = d, c
        ours.register(c, POLLIN)
        ours.unregister(a)
        d.send(b"x")
        assert ours.poll(1000) == [(c.fileno(), POLLIN)]
    finally:
        c.close()
        d.close()


def test_an_error_without_input_is_pollerr(pairs):
    ours = Poller()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    port_holder = socket.socket()
    port_holder.bind(("127.0.0.1", 0))
    port = port_holder.getsockname()[1]
    port_holder.close()  # nothing listens there: the connect fails
    s.connect_ex(("127.0.0.1", port))
    try:
        ours.register(s, POLLOUT)
        got = ours.poll(2000)
        assert got and got[0][0] == s.fileno() and got[0][1] & POLLERR
    finally:
        ours.unregister(s)
        s.close()
