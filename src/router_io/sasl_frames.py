"""SASL frames as bytes, both ways: the protocol header and the five performatives.

The auth-service relay (auth_relay.py) speaks SASL itself, in front of proton's transports (the
Python binding does not expose proton-C's SASL plugin API, which 1.19's relay is built on):
:class:`FrameReader` splits a byte stream into protocol headers and SASL frames and decodes each
performative into a :class:`SaslFrame`; ``encode_*`` make the frames the relay sends. AMQP's
type system is proton's (``proton.Data``); the frame layout (size, doff, type 1, channel) is
AMQP 1.0 part 5.3.

Sans-I/O. Must not import zmq, sockets, ssl or the engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import proton

from router_io.frameguard import (
    AMQP_HEADER, DECODE_ERROR, FRAME_HEADER_SIZE, FRAMING_ERROR, HEADER_SIZE, MAX_SASL_FRAME,
    NAMES, SASL_CHALLENGE, SASL_FRAME, SASL_HEADER, SASL_INIT, SASL_MECHANISMS, SASL_OUTCOME,
    SASL_RESPONSE, FrameError, frame_header)

__all__ = ["AMQP_HEADER", "SASL_HEADER", "SASL_MECHANISMS", "SASL_INIT", "SASL_CHALLENGE",
           "SASL_RESPONSE", "SASL_OUTCOME", "FrameError", "FrameReader", "Header", "SaslFrame",
           "encode_mechanisms", "encode_init", "encode_challenge", "encode_response",
           "encode_outcome", "OK", "AUTH", "SYS", "SYS_PERM", "SYS_TEMP"]

# sasl-outcome codes (AMQP 1.0 5.3.3.6)
OK, AUTH, SYS, SYS_PERM, SYS_TEMP = range(5)

Buffer = Union[bytes, bytearray, memoryview]


@dataclass(frozen=True)
class Header:
    """A protocol header (8 bytes: ``AMQP`` id major minor revision)."""
    raw: bytes


@dataclass(frozen=True)
class SaslFrame:
    """One SASL performative: its code (0x40..0x44) and fields (absent trailing ones None)."""
    code: int
    fields: tuple

    def field(self, index: int) -> object:
        return self.fields[index] if index < len(self.fields) else None

    @property
    def name(self) -> str:
        return NAMES.get(self.code, f"0x{self.code:x}")


class FrameReader:
    """Bytes in, headers and SASL frames out; the bytes after the last unit wait in ``rest``.

    ``stop_after_header`` names a header after which nothing more is parsed (the peer's AMQP
    header once SASL is over: what follows belongs to proton)."""

    def __init__(self, max_frame: int = MAX_SASL_FRAME) -> None:
        self.rest = bytearray()
        self.max_frame = max_frame
        self.stopped = False

    def feed(self, data: Buffer, stop_at: Optional[bytes] = None) -> list:
        """The whole units ``data`` completes, in order. After a header equal to ``stop_at``
        parsing stops (``stopped``) and everything else stays in ``rest``. Bytes that break
        the framing end the list with a :class:`FrameError` (nothing is parsed after it)."""
        self.rest += data
        out: list = []
        try:
            self._parse(out, stop_at)
        except FrameError as exc:
            self.stopped = True
            self.rest.clear()
            out.append(exc)
        return out

    def _parse(self, out: list, stop_at: Optional[bytes]) -> None:
        buf = self.rest
        pos = 0
        while not self.stopped:
            end = len(buf)
            if pos >= end:
                break
            if buf[pos] == 0x41:  # 'A': a header (a frame that big is refused anyway)
                if end - pos < HEADER_SIZE:
                    break
                if buf[pos:pos + 4] != b"AMQP":
                    raise FrameError(FRAMING_ERROR, "bad protocol header "
                                                    f"{bytes(buf[pos:pos + HEADER_SIZE])!r}")
                header = bytes(buf[pos:pos + HEADER_SIZE])
                pos += HEADER_SIZE
                out.append(Header(header))
                if stop_at is not None and header == stop_at:
                    self.stopped = True
                continue
            if end - pos < FRAME_HEADER_SIZE:
                break
            size, doff, ftype = frame_header(buf, pos)
            if ftype != SASL_FRAME:
                raise FrameError(FRAMING_ERROR, f"frame of type {ftype} during SASL")
            if size > self.max_frame:
                raise FrameError(FRAMING_ERROR, f"SASL frame of {size} bytes is too large")
            if end - pos < size:
                break
            frame = decode_body(bytes(buf[pos + doff * 4:pos + size]))
            pos += size
            out.append(frame)
        del buf[:pos]


def decode_body(body: bytes) -> SaslFrame:
    """A SASL frame's body (a described list) as a :class:`SaslFrame`; FrameError if not."""
    data = proton.Data()
    try:
        used = data.decode(body)
        data.rewind()
        data.next()
        value = data.get_object()
    except Exception as exc:  # noqa: BLE001 - any undecodable body is the peer's fault
        raise FrameError(DECODE_ERROR, f"undecodable SASL frame: {exc}") from None
    if used != len(body) or not isinstance(value, proton.Described):
        raise FrameError(DECODE_ERROR, "SASL frame without a described performative")
    code = value.descriptor
    if not isinstance(code, int) or code not in NAMES:
        raise FrameError(DECODE_ERROR, f"unknown SASL performative {code!r}")
    fields = value.value
    if not isinstance(fields, list):
        raise FrameError(DECODE_ERROR, f"{NAMES[code]} whose fields are not a list")
    return SaslFrame(int(code), tuple(bytes(f) if isinstance(f, memoryview) else f
                                      for f in fields))


def _frame(code: int, put_fields) -> bytes:
    data = proton.Data()
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_list()
    data.enter()
    put_fields(data)
    data.exit()
    data.exit()
    body = bytes(data.encode())
    size = FRAME_HEADER_SIZE + len(body)
    return size.to_bytes(4, "big") + bytes((2, SASL_FRAME, 0, 0)) + body


def encode_mechanisms(mechanisms: list) -> bytes:
    def put(data: proton.Data) -> None:
        data.put_array(False, proton.Data.SYMBOL)
        data.enter()
        for mech in mechanisms:
            data.put_symbol(str(mech))
        data.exit()
    return _frame(SASL_MECHANISMS, put)


def encode_init(mechanism: str, response: Optional[bytes], hostname: Optional[str]) -> bytes:
    def put(data: proton.Data) -> None:
        data.put_symbol(mechanism)
        if response is None:
            data.put_null()
        else:
            data.put_binary(bytes(response))
        if hostname:
            data.put_string(hostname)
    return _frame(SASL_INIT, put)


def _binary_frame(code: int, payload: Optional[bytes]) -> bytes:
    def put(data: proton.Data) -> None:
        data.put_binary(bytes(payload or b""))
    return _frame(code, put)


def encode_challenge(challenge: Optional[bytes]) -> bytes:
    return _binary_frame(SASL_CHALLENGE, challenge)


def encode_response(response: Optional[bytes]) -> bytes:
    return _binary_frame(SASL_RESPONSE, response)


def encode_outcome(code: int, additional: Optional[bytes] = None) -> bytes:
    def put(data: proton.Data) -> None:
        data.put_ubyte(code)
        if additional is not None:
            data.put_binary(bytes(additional))
    return _frame(SASL_OUTCOME, put)


def as_bytes(value: object) -> Optional[bytes]:
    """A binary field (None if absent); FrameError if it is something else."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise FrameError(DECODE_ERROR, f"binary expected, got {type(value).__name__}")


def as_symbols(value: object) -> list:
    """sasl-server-mechanisms: one symbol or an array of them, as text."""
    if isinstance(value, proton.Array):
        items = list(value.elements)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif value is None:
        items = []
    else:
        items = [value]
    if not all(isinstance(i, str) for i in items):
        raise FrameError(DECODE_ERROR, "sasl-server-mechanisms are not symbols")
    return [str(i) for i in items]
