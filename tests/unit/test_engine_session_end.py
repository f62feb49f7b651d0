"""A peer ends a session while links are open on it (issue 28, item 13d): no detach comes for
them, so the worker reports each one lost (LinkLost) and the core drops it, as 1.19 does with
the links of a session its peer ended. Both engine builds, bytes pumped in memory."""
from __future__ import annotations

import functools

import pytest
from proton import Message

import memrouter
from router_io import engine as engine_py

from conftest import compiled_engine


@pytest.fixture(params=["python", "cython"])
def mem_router(request):
    cls = engine_py.WorkerEngine if request.param == "python" else compiled_engine()
    if cls is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    return functools.partial(memrouter.MemRouter, engine_cls=cls)


def test_links_of_a_session_the_client_ended_are_dropped(mem_router):
    router = mem_router()
    client = router.client("c1")
    rcv = client.receiver("q1", credit=5)
    ssn = client.connection.session()
    ssn.open()
    lost = ssn.sender("lost")
    lost.target.address = "q1"
    lost.open()
    router.run()
    assert len(router.core.links) == 2 and len(router.engine.links) == 2
    ssn.close()
    router.run()
    assert len(router.core.links) == 1 and len(router.engine.links) == 1
    assert not lost.state & lost.REMOTE_CLOSED  # nothing is sent on an ended session
    # the connection and its other session go on
    snd = client.sender("q1")
    router.run()
    client.send(snd, "after")
    router.run()
    assert [m.body for _, m in client.receive_all(rcv)] == ["after"]
