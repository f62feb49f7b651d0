"""Which SASL implementation serves an accepted connection (router_io/saslimpl.py): proton's
built-in one only where an ANONYMOUS client cannot tell it from Cyrus, Cyrus everywhere else.
Counted per connection made (both engine builds) and probed against real Cyrus settings."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import proton
import pytest

import memrouter
from cproton_ffi import ffi
from router_io import saslimpl

pytestmark = pytest.mark.usefixtures("engine_build")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _server(tmp_path=None, **listener) -> tuple:
    config = (str(tmp_path), "qdrouterd") if tmp_path else (None, "qdrouterd")
    return saslimpl.server_settings(listener, config)


@pytest.mark.parametrize("listener, builtin", [
    ({"saslMechanisms": "ANONYMOUS"}, True),
    ({"saslMechanisms": "anonymous"}, True),
    ({"saslMechanisms": "ANONYMOUS", "authenticatePeer": True}, True),  # asked for explicitly
    ({}, False),                                           # Cyrus offers all its mechanisms
    ({"saslMechanisms": "ANONYMOUS PLAIN"}, False),
    ({"saslMechanisms": "PLAIN", "authenticatePeer": True}, False),
    ({"saslMechanisms": "SCRAM-SHA-256"}, False),
])
def test_the_builtin_serves_only_what_cyrus_answers_alike(listener, builtin):
    assert saslimpl.builtin_serves(_server(**listener)) is builtin


def test_a_cyrus_configuration_without_anonymous_keeps_cyrus(tmp_path):
    # saslMechanisms lists ANONYMOUS, but the Cyrus configuration leaves it out: Cyrus offers
    # nothing, the built-in one would let the client in; the probe sees the difference. (In a
    # process of its own: Cyrus reads its configuration directory once a process.)
    (tmp_path / "qdrouterd.conf").write_text("mech_list: PLAIN\n")
    probe = ("from router_io import saslimpl as s\n"
             f"k = s.server_settings({{'saslMechanisms': 'ANONYMOUS'}}, ({str(tmp_path)!r}, 'qdrouterd'))\n"
             "print(s._exchange(k, False)[2], s._exchange(k, True)[2], s.builtin_serves(k))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": SRC})
    assert done.returncode == 0, done.stderr
    # Cyrus fails the ANONYMOUS client (outcome 1), the built-in one would let it in (0)
    assert done.stdout.split() == ["1", "0", "False"]


def _address(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def _made(monkeypatch, listener: dict, n: int) -> int:
    """How many of ``n`` accepted connections of ``listener`` got the built-in SASL."""
    used, probes = [], []
    real, probe = saslimpl.use_builtin, saslimpl._exchange
    monkeypatch.setattr(saslimpl, "use_builtin", lambda t: (used.append(t), real(t)))
    monkeypatch.setattr(saslimpl, "_exchange", lambda *a, **k: (probes.append(1), probe(*a, **k))[1])
    monkeypatch.setattr(saslimpl, "_builtin", {})
    monkeypatch.setattr(saslimpl, "_by_listener", {})
    for key, value in listener.items():
        monkeypatch.setitem(memrouter.LISTENER, key, value)
    r = memrouter.MemRouter()
    for i in range(n):
        c = memrouter.Client(r, f"c{i}")
        r.clients.append(c)
    r.run()
    assert all(c.server.reported_open for c in r.clients)  # and they all got in
    assert {c.transport.sasl().outcome for c in r.clients} == {proton.SASL.OK}
    assert len(probes) == 2  # the listener probed once (one transport of each kind)
    return len({_address(t) for t in used} & {_address(c.server.t_ptr) for c in r.clients})


def test_anonymous_only_listener_connections_get_the_builtin(monkeypatch):
    assert _made(monkeypatch, {"saslMechanisms": "ANONYMOUS"}, 5) == 5


def test_a_listener_offering_more_keeps_cyrus(monkeypatch):
    assert _made(monkeypatch, {"saslMechanisms": "ANONYMOUS PLAIN"}, 5) == 0
