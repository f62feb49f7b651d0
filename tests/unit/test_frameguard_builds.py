"""The compiled SASL guard (router_io._frameguard) is its reference (router_io/frameguard.py):
for any bytes, cut into any pieces, both let the same bytes through, report the same frame
ends and state, and refuse at the same piece with the same condition and text."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router_io import frameguard, frameguard_select

pytestmark = pytest.mark.skipif(frameguard_select.IMPLEMENTATION != "cython",
                                reason="router_io._frameguard is not built")


def _frame(ftype: int, body: bytes, doff: int = 2) -> bytes:
    return (8 + len(body) + (doff - 2) * 4).to_bytes(4, "big") + bytes([doff, ftype, 0, 0]) \
        + b"\x00" * ((doff - 2) * 4) + body


def _sasl(code: int, fields: bytes = b"\x45") -> bytes:
    return _frame(frameguard.SASL_FRAME, b"\x00\x53" + bytes([code]) + fields)


INIT = _sasl(frameguard.SASL_INIT, b"\xc0\x0b\x01\xa3\x09ANONYMOUS")
INIT32 = _sasl(frameguard.SASL_INIT, b"\xd0\x00\x00\x00\x0e\x00\x00\x00\x01\xa3\x05PLAIN")
INIT_ULONG = _frame(frameguard.SASL_FRAME, b"\x00\x80" + (0x41).to_bytes(8, "big")
                    + b"\xc0\x07\x01\xa3\x05PLAIN")
PIECES = [frameguard.SASL_HEADER, frameguard.AMQP_HEADER, b"AMQP", b"AMQ", INIT, INIT32,
          INIT_ULONG, _sasl(frameguard.SASL_RESPONSE, b"\x45"), _sasl(frameguard.SASL_OUTCOME),
          _sasl(0x7f), _frame(0, b"\x00\x53\x10\x45"), _frame(1, b"", doff=0), _frame(2, b"x"),
          (0xffffffff).to_bytes(4, "big") + b"\x02\x01\x00\x00", b"\x00\x80" + b"\xff" * 8]
STREAMS = st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=24)), max_size=8)


def _run(module, data: bytes, cuts: list) -> list:
    """What a guard of ``module`` says about each piece: (bytes, done, ends, frames), or the
    refusal (condition, text) that ends the stream."""
    guard = module.SaslGuard()
    said, start = [], 0
    for end in sorted(set(cuts)) + [len(data)]:
        if guard.done:
            break
        try:
            out = guard.feed(memoryview(data)[start:end])
        except module.FrameError as exc:
            said.append(("refused", exc.condition, exc.description))
            break
        said.append((bytes(out), guard.done, list(guard.sasl_ends), guard.frames))
        start = end
    return said


@given(STREAMS, st.lists(st.integers(0, 400), max_size=10))
@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_the_compiled_guard_says_what_the_reference_says(pieces, cuts):
    data = b"".join(pieces)
    cuts = [c for c in cuts if c < len(data)]
    assert _run(frameguard_select.guard, data, cuts) == _run(frameguard, data, cuts)


def test_a_whole_anonymous_exchange_passes_both_builds_alike():
    data = frameguard.SASL_HEADER + INIT + frameguard.AMQP_HEADER + _frame(0, b"\x00\x53\x10\x45")
    said = _run(frameguard_select.guard, data, [])
    assert said == [(data, True, [8 + len(INIT)], 1)]
    assert said == _run(frameguard, data, [])
