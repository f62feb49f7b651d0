"""What a connection's set-up costs the worker, counted (never timed): the per-connection
work removed stays removed.

* proton's tick visits only the connections with an idle timeout (the listener's, or the
  peer's), not every connection, each second (``WorkerEngine.tick_connections``);
* no proton Python wrapper object (Transport, SASL, Connection) is made for an accepted
  connection: its set-up calls proton's C API (engine_conn.py);
* the compiled Connection keeps its attributes in fields, with no per-connection __dict__;
* N opens in one batch are N ConnOpened commands to the core, and nothing else;
* the open the router writes is what proton's Python binding encoded (same bytes).
Both engine builds.
"""
from __future__ import annotations

import gc

import proton
import pytest
from cproton_ffi import ffi, lib
from proton import PropertyDict, SymbolList, symbol

import memrouter
from common import ipc
from common.identity import PRODUCT, VERSION
from router_io import engine as engine_py

pytestmark = pytest.mark.usefixtures("engine_build")


def _opened(router, n: int, idle: float = 0.0) -> list:
    """``n`` clients set up at once (their opens in one batch), each asking the router for
    heartbeats every ``idle`` seconds (0: none)."""
    clients = []
    for i in range(n):
        c = memrouter.Client(router, f"c{i}")
        if idle:
            c.transport.idle_timeout = idle
        router.clients.append(c)
        clients.append(c)
    router.run()
    assert all(c.server.reported_open for c in clients)
    return clients


def _ticked(engine, now_ms: int) -> int:
    """How many connections one tick visited (each one visited is marked dirty)."""
    engine.dirty = set()
    engine.tick_connections(now_ms)
    return len(engine.dirty)


def test_the_tick_visits_only_connections_with_an_idle_timeout():
    r = memrouter.MemRouter()
    quiet = _opened(r, 30)  # the listener's idleTimeoutSeconds 0, no peer asks for heartbeats
    assert _ticked(r.engine, 1_000) == 0
    wanting = _opened(r, 2, idle=4.0)  # these peers want a frame at least every 4 s
    assert r.engine.needs_tick == {c.server for c in wanting}
    assert _ticked(r.engine, 2_000) == 2
    for c in wanting:  # and the tick still does its job: an empty frame within the 4 s
        c.server.output(bytearray(4096))
        c.server.consumed(c.server.pending())
    _ticked(r.engine, 2_000 + 3_000)
    assert all(c.server.pending() > 0 for c in wanting)
    assert all(c.server.pending() <= 0 for c in quiet)
    r.disconnect(wanting[0])
    assert _ticked(r.engine, 6_000) == 1


def test_a_listener_idle_timeout_ticks_its_connections(monkeypatch):
    monkeypatch.setitem(memrouter.LISTENER, "idleTimeoutSeconds", 16)
    r = memrouter.MemRouter()
    clients = _opened(r, 5)
    assert _ticked(r.engine, 1_000) == 5
    assert all(c.server in r.engine.needs_tick for c in clients)


def _address(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def test_accepting_makes_no_proton_wrapper_objects():
    r = memrouter.MemRouter()
    clients = _opened(r, 20)
    gc.collect()
    wrapped = {_address(o._impl) for o in gc.get_objects()
               if type(o) in (proton.Transport, proton.SASL, proton.Connection)}
    assert {_address(c.connection._impl) for c in clients} <= wrapped  # (the count works)
    router_side = {_address(p) for c in clients for p in (c.server.t_ptr, c.server.c_ptr)}
    assert not wrapped & router_side


def test_the_compiled_connection_has_no_dict_after_setup(engine_build):
    if engine_build is engine_py.WorkerEngine:
        pytest.skip("the pure build's Connection is a plain class")
    r = memrouter.MemRouter()
    (c,) = _opened(r, 1)
    assert not getattr(c.server, "__dict__", None)  # every attribute is a field


def test_n_opens_in_a_batch_are_n_conn_opened_commands():
    r = memrouter.MemRouter()
    batches = []
    r.on_commands = batches.append
    _opened(r, 25)
    commands = [cmd for batch in batches for cmd in batch]
    assert [type(cmd) for cmd in commands] == [ipc.ConnOpened] * 25
    assert len(batches) == 1


def test_the_open_is_encoded_as_protons_python_binding_encodes_it():
    r = memrouter.MemRouter()
    (c,) = _opened(r, 1)
    c_ptr = c.server.c_ptr
    props = proton.Data()
    props.put_object(PropertyDict({symbol("product"): PRODUCT, symbol("version"): VERSION,
                                   symbol("qd.conn-id"): c.server.conn_id}))
    caps = proton.Data()
    caps.put_object(SymbolList([symbol("ANONYMOUS-RELAY"),
                                symbol("qd.streaming-links")]).to_array())
    assert proton.Data(lib.pn_connection_properties(c_ptr)).encode() == props.encode()
    for data in (lib.pn_connection_offered_capabilities(c_ptr),
                 lib.pn_connection_desired_capabilities(c_ptr)):
        assert proton.Data(data).encode() == caps.encode()
    assert c.connection.remote_container == "Router.Mem"
