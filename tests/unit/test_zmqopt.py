"""common._zmqopt (libzmq's zmq_getsockopt called directly) answers as common.zmqopt (pyzmq's get)
on real sockets in every state the worker and the core ask about: nothing waiting, a message
waiting, between the frames of a multi-part message, after the last frame, closed."""
import importlib

import pytest
from hypothesis import given, settings, strategies as st
import zmq

from common import builds, zmqcalls, zmqopt

try:
    compiled = importlib.import_module("common._zmqopt")
except ImportError:  # ROUTER_NO_EXTENSIONS=1 hides it; conftest refuses a missing one under
    compiled = None  # ROUTER_REQUIRE_EXTENSIONS=1

BUILDS = [zmqopt] + ([compiled] if compiled is not None else [])


@pytest.fixture
def pair():
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind("inproc://zmqopt")
    dealer.connect("inproc://zmqopt")
    try:
        yield router, dealer
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


def answers(sock):
    """(readable, more) from every build: all must agree."""
    got = {(m.readable(sock), m.more(sock)) for m in BUILDS}
    assert len(got) == 1, got
    return got.pop()


def test_builds_agree_through_a_multipart_message(pair):
    router, dealer = pair
    assert answers(router) == (False, False)
    dealer.send_multipart([b"one", b"two"])
    assert router.poll(5000, zmq.POLLIN)
    assert answers(router) == (True, False)
    identity = zmqcalls.recv(router, zmqcalls.NOBLOCK)  # the peer's identity, then 2 frames
    assert identity and answers(router)[1] is True
    assert zmqcalls.recv(router, zmqcalls.NOBLOCK) == b"one" and answers(router)[1] is True
    assert zmqcalls.recv(router, zmqcalls.NOBLOCK) == b"two"
    assert answers(router) == (False, False)
    dealer.send(b"three")
    assert router.poll(5000, zmq.POLLIN)
    assert answers(router) == (True, False)


@pytest.mark.parametrize("build", BUILDS, ids=lambda m: m.__name__)
def test_a_closed_socket_raises_as_pyzmq_does(build):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.close(0)
    try:
        for ask in (build.readable, build.more):
            with pytest.raises(zmq.ZMQError) as err:
                ask(sock)
            assert err.value.errno == zmq.ENOTSOCK
    finally:
        ctx.term()


def test_zmqcalls_takes_the_build_common_builds_chooses():
    chosen = compiled if compiled is not None and builds.extensions_enabled() else zmqopt
    assert zmqcalls.readable is chosen.readable and zmqcalls.more is chosen.more


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=8), min_size=1, max_size=3), min_size=1, max_size=4))
def test_builds_agree_frame_by_frame(messages):
    """Any messages of 1-3 frames, read frame by frame: after each frame both builds say
    ``more`` exactly while frames of the same message remain, ``readable`` while messages do."""
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    try:
        pull.bind("inproc://zmqopt-frames")
        push.connect("inproc://zmqopt-frames")
        for frames in messages:
            push.send_multipart(frames)
        assert pull.poll(5000, zmq.POLLIN)
        for i, frames in enumerate(messages):
            assert answers(pull)[0] is True
            for j, frame in enumerate(frames):
                assert zmqcalls.recv(pull, zmqcalls.NOBLOCK) == frame
                assert answers(pull)[1] is (j < len(frames) - 1)
            if i == len(messages) - 1:
                assert answers(pull) == (False, False)
    finally:
        pull.close(0)
        push.close(0)
        ctx.term()
