"""The front door in memory: no byte sequence from a peer raises out of the worker's engine.

Hostile client streams (captured proton client frames, mutated; hostile field values set
through proton-C's raw setters; known-bad SASL sequences) are pushed into an accepted
connection of the in-memory router (tests/memrouter.py: engine + core), on the pure-Python and
the compiled engine. Nothing may raise out of push/process_events/apply, the connection must
end (or stay consistent), and the same engine must then serve a normal client end to end.
The SASL guard (router_io/frameguard.py) is tested on its own too. Bounded: every stream is
small, every pump loop is bounded, Hypothesis runs a fixed number of examples.
"""
from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import proton
import pytest
from cproton_ffi import lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memrouter
from common import ipc
from router_io import engine as engine_py
from router_io import frameguard, frameguard_select

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_front_door.py"
_spec = importlib.util.spec_from_file_location("bench_fuzz_front_door", _PATH)
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["bench_fuzz_front_door"] = fuzz
_spec.loader.exec_module(fuzz)

STREAMS = fuzz.capture_streams()
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


class Harness:
    """A MemRouter whose engine logs into a list and whose commands are recorded."""

    def __init__(self, engine_cls) -> None:
        self.router = memrouter.MemRouter(engine_cls=engine_cls)
        self.logs: list = []
        self.router.engine.log = lambda level, text: self.logs.append((level, text))
        self.commands: list = []
        self.router.on_commands = self.commands.extend

    def feed(self, data: bytes, chunk: int = 0, close: bool = True):
        """Push ``data`` into a fresh accepted connection in chunks, pumping after each."""
        r = self.router
        conn = r.engine.new_connection(dict(memrouter.LISTENER), "fuzz:1", "in")
        chunk = chunk or max(1, len(data))
        buf = bytearray(65536)
        for i in range(0, len(data), chunk):
            piece = data[i:i + chunk]
            if conn.is_closed() or conn.capacity() < len(piece):
                break
            conn.push(piece, len(piece))
            r.exchange()
            for _ in range(100):
                n = conn.output(buf)
                if n <= 0:
                    break
                conn.consumed(n)
        if close:
            conn.close_input()
            conn.close_output()
            r.exchange()
            r.engine.drop_connection(conn)
            r.exchange()
        return conn

    def errors(self) -> list:
        return [text for level, text in self.logs if level == "error"]

    def assert_usable(self) -> None:
        """A normal client still gets a message through this engine and core."""
        r = self.router
        c = r.client("after-fuzz")
        rcv = c.receiver("check/q", credit=1)
        snd = c.sender("check/q")
        r.run()
        assert snd.credit > 0
        c.send(snd, "still alive")
        r.run()
        got = c.receive_all(rcv)
        assert [m.body for _, m in got] == ["still alive"]
        r.disconnect(c)


# --- the SASL guard on its own -----------------------------------------------------------------
# (each build: the reference frameguard.py and router_io._frameguard, compiled from it)
@pytest.fixture(params=["python", "cython"])
def guard_mod(request):
    if request.param == "python":
        return frameguard
    if frameguard_select.IMPLEMENTATION != "cython":  # conftest stops the run here under
        pytest.skip("router_io._frameguard is not built")  # ROUTER_REQUIRE_EXTENSIONS
    return frameguard_select.guard


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_guard_passes_real_client_streams_unchanged_byte_by_byte(name, guard_mod):
    data = b"".join(STREAMS[name])
    guard = guard_mod.SaslGuard()
    out = bytearray()
    for i in range(len(data)):
        out += guard.feed(data[i:i + 1])
        if guard.done:
            out += data[i + 1:]
            break
    assert guard.done
    assert bytes(out) == data


def test_guard_is_done_at_the_first_amqp_frame_after_sasl(guard_mod):
    units = STREAMS["anonymous"]
    guard = guard_mod.SaslGuard()
    assert guard.feed(b"".join(units[:3])) == b"".join(units[:3])  # header, init, AMQP header
    assert not guard.done
    guard.feed(units[3][:8])  # the open's frame header
    assert guard.done


def test_guard_says_where_each_sasl_frame_ends(guard_mod):
    # the engine pushes up to each SASL frame's end, checks the outcome, and after a
    # successful one pushes the rest (AMQP header, open, begin) in one piece
    units = STREAMS["anonymous"]
    guard = guard_mod.SaslGuard()
    out = guard.feed(b"".join(units))
    assert guard.done and bytes(out) == b"".join(units)
    assert guard.sasl_ends == [len(units[0]) + len(units[1])]  # after the sasl-init
    guard = guard_mod.SaslGuard()
    assert guard.feed(units[0] + units[1][:5]) == units[0]  # the init not whole yet
    assert guard.sasl_ends == []
    assert guard.feed(units[1][5:]) == units[1]  # (offsets in what this feed returned)
    assert guard.sasl_ends == [len(units[1])]


@pytest.mark.parametrize("data,condition", [
    (fuzz.KNOWN_BAD["sasl-response-first"], frameguard.NOT_ALLOWED),
    (fuzz.KNOWN_BAD["sasl-outcome-from-client"], frameguard.NOT_ALLOWED),
    (fuzz.KNOWN_BAD["sasl-mechanisms-from-client"], frameguard.NOT_ALLOWED),
    (fuzz.KNOWN_BAD["amqp-frame-then-response"], frameguard.FRAMING_ERROR),
    (fuzz.KNOWN_BAD["bad-init-then-response"], frameguard.DECODE_ERROR),
    (fuzz.KNOWN_BAD["frame-size-zero"], frameguard.FRAMING_ERROR),
    (fuzz.KNOWN_BAD["frame-size-huge"], frameguard.FRAMING_ERROR),
    (fuzz.KNOWN_BAD["doff-zero"], frameguard.FRAMING_ERROR),
])
def test_guard_refuses_what_a_server_must_not_receive(data, condition, guard_mod):
    guard = guard_mod.SaslGuard()
    with pytest.raises(guard_mod.FrameError) as info:
        for i in range(len(data)):
            guard.feed(data[i:i + 1])
    assert info.value.condition == condition


def test_the_31_bytes_of_issue_9_never_reach_proton(guard_mod):
    data = fuzz.KNOWN_BAD["sasl-response-first"]
    assert len(data) == 31 and data.startswith(b"AMQP\x03\x01\x00\x00")
    guard = guard_mod.SaslGuard()
    assert guard.feed(data[:8]) == data[:8]  # the SASL header itself is fine
    with pytest.raises(guard_mod.FrameError, match="sasl-response before sasl-init"):
        guard.feed(data[8:])


def test_guard_passes_other_headers_to_proton(guard_mod):
    for header in (fuzz.AMQP_HEADER, b"AMQP\x02\x01\x00\x00", b"GET / HT"):
        guard = guard_mod.SaslGuard()
        assert guard.feed(header + b"rest") == header + b"rest"
        assert guard.done


@given(st.binary(max_size=200), st.integers(1, 16))
@FUZZ
def test_guard_never_raises_anything_but_frame_error(guard_mod, data, step):
    guard = guard_mod.SaslGuard()
    passed = bytearray()
    try:
        for i in range(0, len(data), step):
            passed += guard.feed(fuzz.SASL_HEADER + data[i:i + step] if i == 0 else
                                 data[i:i + step])
    except guard_mod.FrameError as exc:
        assert exc.condition.startswith("amqp:")
    assert len(passed) <= len(data) + 8


# --- streams into the engine -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(fuzz.KNOWN_BAD))
def test_known_bad_streams_close_only_their_connection(engine_cls, name):
    h = Harness(engine_cls)
    keep = h.router.client("bystander")  # another connection on the same engine
    rcv = keep.receiver("bystander/q", credit=1)
    h.router.run()
    conn = h.feed(fuzz.KNOWN_BAD[name], close=False)
    h.router.run()
    assert conn.is_closed(), f"{name}: the connection should have been closed"
    assert conn.error_text().startswith("amqp:")
    assert not h.errors()
    snd = keep.sender("bystander/q")
    h.router.run()
    keep.send(snd, "bystander")
    h.router.run()
    assert [m.body for _, m in keep.receive_all(rcv)] == ["bystander"]
    h.assert_usable()


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_captured_streams_work_unmutated(engine_cls, name):
    h = Harness(engine_cls)
    h.feed(b"".join(STREAMS[name]))
    assert not h.errors()
    if name != "plain":  # the in-memory listener offers ANONYMOUS only
        assert any(type(c) is ipc.ConnOpened for c in h.commands)


@given(name=st.sampled_from(sorted(STREAMS)), seed=st.integers(0, 2 ** 32 - 1),
       count=st.integers(1, 4), chunk=st.sampled_from([0, 1, 5, 64]))
@FUZZ
def test_mutated_client_streams_never_escape_the_engine(engine_cls, name, seed, count, chunk):
    h = Harness(engine_cls)
    data = fuzz.mutate(random.Random(seed), STREAMS[name], count)
    h.feed(data, chunk)  # raises if anything escapes
    assert not h.errors(), h.errors()
    opened = {c.conn_id for c in h.commands if type(c) is ipc.ConnOpened}
    closed = {c.conn_id for c in h.commands if type(c) is ipc.ConnClosed}
    assert opened == closed  # the core heard of every end
    assert not h.router.engine.links and not h.router.engine.in_dlvs
    h.assert_usable()


def _bad_text():
    return st.one_of(
        st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b),
        st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"a\x80b", b"\xfe\xff" * 50]),
    )


@given(container=_bad_text(), link_name=_bad_text(), address=_bad_text(),
       description=_bad_text(), body=st.binary(max_size=300), settled=st.booleans())
@FUZZ
def test_hostile_field_values_from_a_real_client(engine_cls, container, link_name, address,
                                                 description, body, settled):
    """Field values a client controls, set raw (proton-C stores bytes as given): container-id,
    link name, target address, detach error description, and message bytes that are not a
    message. Bad text is refused (invalid-field), never raised."""
    h = Harness(engine_cls)
    r = h.router
    c = memrouter.Client(r, "hostile")
    r.clients.append(c)
    lib.pn_connection_set_container(c.connection._impl, container)
    r.run()
    snd_ptr = lib.pn_sender(c.session._impl, link_name)
    lib.pn_terminus_set_address(lib.pn_link_target(snd_ptr), address)
    if settled:
        lib.pn_link_set_snd_settle_mode(snd_ptr, lib.PN_SND_SETTLED)
    lib.pn_link_open(snd_ptr)
    rcv = c.receiver("anon-target", credit=5)
    anon = c.sender(None)
    r.run()
    for link in (proton.Link.wrap(snd_ptr), anon):
        if link.credit > 0:
            dlv = link.delivery(b"t")
            link.send(body)
            link.advance()
            if settled:
                dlv.settle()
    r.run()
    cond = lib.pn_link_condition(snd_ptr)
    lib.pn_condition_set_name(cond, b"amqp:internal-error")
    lib.pn_condition_set_description(cond, description)
    lib.pn_link_close(snd_ptr)
    rcv.close()
    r.run()
    c.connection.close()
    r.run()
    assert not h.errors(), h.errors()
    r.disconnect(c)
    h.assert_usable()


# --- fault isolation ---------------------------------------------------------------------------
def test_an_unexpected_error_closes_only_that_connection(engine_cls):
    h = Harness(engine_cls)
    r = h.router
    engine = r.engine
    bystander = r.client("bystander")
    brcv = bystander.receiver("fine/q", credit=1)
    r.run()
    ref_rare_event = type(engine)._rare_event  # the method of the build under test

    def rare_event(etype, ev):
        if (etype == lib.PN_LINK_REMOTE_OPEN
                and proton.Link.wrap(lib.pn_event_link(ev)).name.startswith("snd-boom")):
            raise RuntimeError("boom")
        return ref_rare_event(engine, etype, ev)

    engine._rare_event = rare_event
    victim = r.client("victim")
    vrcv = victim.receiver("fine/q", credit=5)  # holds a consumer the core must forget
    r.run()
    victim.sender("boom")
    r.run()
    errors = h.errors()
    assert len(errors) == 1 and "RuntimeError: boom" in errors[0] and "Traceback" in errors[0]
    cond = victim.connection.remote_condition
    assert cond is not None and cond.name == "amqp:internal-error"
    assert victim.server.is_closed()  # the transport ends: the socket would close now
    engine.drop_connection(victim.server)
    r.clients.remove(victim)
    r.run()
    closed = [c for c in h.commands if type(c) is ipc.ConnClosed]
    assert [c.conn_id for c in closed] == [victim.server.conn_id]
    assert "internal-error" in closed[0].error
    assert vrcv.state & proton.Endpoint.REMOTE_CLOSED or victim.connection.state & \
        proton.Endpoint.REMOTE_CLOSED
    # the bystander on the same engine is untouched
    bsnd = bystander.sender("fine/q")
    r.run()
    bystander.send(bsnd, "fine")
    r.run()
    assert [m.body for _, m in bystander.receive_all(brcv)] == ["fine"]
    assert len(h.errors()) == 1


def test_an_effect_that_fails_closes_its_connection(engine_cls):
    h = Harness(engine_cls)
    r = h.router
    c = r.client("victim")
    rcv = c.receiver("fx/q", credit=1)
    r.run()
    link_id = next(iter(r.engine.links))

    try:
        r.engine.apply(ipc.LinkCredit(link_id, "not a number"))
    except Exception as exc:  # noqa: BLE001 - what the worker's _drain_core catches
        r.engine.effect_failed(ipc.LinkCredit(link_id, "not a number"), exc)
    r.run()
    assert len(h.errors()) == 1
    assert c.connection.remote_condition.name == "amqp:internal-error"
    assert rcv is not None


def test_units_split_headers_and_frames_and_keep_a_torn_tail():
    data = fuzz.KNOWN_BAD["failed-init-then-frames"]
    parts = frameguard.units(data)
    assert b"".join(parts) == data
    assert parts[0] == fuzz.SASL_HEADER and parts[2] == fuzz.AMQP_HEADER
    assert all(p[:4] == b"AMQP" or int.from_bytes(p[:4], "big") == len(p) for p in parts)
    torn = frameguard.units(data[:-3])
    assert b"".join(torn) == data[:-3] and len(torn) == len(parts)


# --- lifecycle tables (router_io/engine_lifecycle.py) --------------------------------------------
def test_an_attach_before_the_open_closes_that_connection_as_not_allowed(engine_cls):
    """A stream Hypothesis found: proton reports a link's attach on a connection whose open it
    never reported. The connection table has no (opening, attach) entry: the connection is
    closed with amqp:not-allowed and the core never hears of it (no internal error, no
    LinkAttach for a connection it does not know); the engine serves the next client."""
    h = Harness(engine_cls)
    data = fuzz.mutate(random.Random(6364), STREAMS["anonymous"], 3)
    conn = h.feed(data, close=False)
    assert not h.errors(), h.errors()
    warnings = [text for level, text in h.logs if level == "warning"]
    assert any("amqp:not-allowed: attach on a connection that is opening" in t
               for t in warnings), warnings
    assert not [c for c in h.commands if type(c) in (ipc.ConnOpened, ipc.LinkAttach)]
    assert conn.refused
    h.router.engine.drop_connection(conn)
    h.assert_usable()
