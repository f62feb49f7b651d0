"""Sans-I/O check of what a client sends before its SASL exchange is over.

python-qpid-proton 0.40's server transport crashes (SIGSEGV) on some SASL frame sequences a
well-behaved client never sends: a ``sasl-response`` before any ``sasl-init`` (also after an
AMQP frame smuggled into the SASL layer) dereferences state proton has not built yet. One
worker process carries many connections, so such bytes must never reach proton.

:class:`SaslGuard` sits in front of the transport of an accepted connection
(``engine.Connection.push``) from the first byte until the client has finished its side of the
SASL exchange. It checks the protocol header and every SASL frame and lets through only the
sequence a server may receive::

    "AMQP" 3 1 0 0   sasl-init   sasl-response*   "AMQP" 0 1 0 0   <AMQP frame> ...

(a sasl-init must name its mechanism with a symbol; a SASL frame after the AMQP header crashes
proton too when the SASL exchange failed). Frames are let through whole once checked (proton
never sees a frame the guard has not approved); anything else raises :class:`FrameError` with
the AMQP condition to close the connection with. The guard is done (``done``: the caller stops
calling it, so established connections pay nothing) at the first AMQP frame after the SASL
exchange, or at once when the client starts with any header other than SASL's (proton answers
those itself; no crash there).

Must not import proton, zmq or sockets.
"""
from __future__ import annotations

from typing import Union

Buffer = Union[bytes, bytearray, memoryview]

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
HEADER_SIZE = 8
FRAME_HEADER_SIZE = 8
SASL_FRAME = 1
# SASL performatives (descriptor codes, domain 0x00000000)
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = (
    0x40, 0x41, 0x42, 0x43, 0x44)
NAMES = {SASL_MECHANISMS: "sasl-mechanisms", SASL_INIT: "sasl-init",
         SASL_CHALLENGE: "sasl-challenge", SASL_RESPONSE: "sasl-response",
         SASL_OUTCOME: "sasl-outcome"}
MAX_SASL_FRAME = 65536  # far above any real sasl-init/response (GSSAPI tokens are a few KB)

DECODE_ERROR = "amqp:decode-error"
FRAMING_ERROR = "amqp:connection:framing-error"
NOT_ALLOWED = "amqp:not-allowed"

AMQP_FRAME = 0
_HEADER, _INIT, _RESPONSES, _AMQP, _DONE = range(5)


def units(data: bytes) -> list:
    """Split bytes into protocol headers and whole frames (a torn tail is the last unit).

    The guard hands proton one unit at a time around the end of the SASL exchange: fed in one
    piece, a failed sasl-init followed by more frames crashes proton 0.40 (it parses on after
    the failure), fed unit by unit the caller can stop at the failure.
    """
    out = []
    pos, end = 0, len(data)
    while pos < end:
        if data[pos:pos + 4] == b"AMQP":
            size = HEADER_SIZE
        elif end - pos >= FRAME_HEADER_SIZE:
            size = max(FRAME_HEADER_SIZE, int.from_bytes(data[pos:pos + 4], "big"))
        else:
            size = end - pos
        out.append(data[pos:pos + size])
        pos += size
    return out


class FrameError(Exception):
    """The client sent something a server must not receive here; close with ``condition``."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


def frame_header(buf, pos: int) -> tuple:
    """(size, doff, type) of the frame whose 8-byte header starts at ``pos`` (the caller has
    checked those bytes are there); FrameError when its size and data offset cannot be."""
    size = int.from_bytes(buf[pos:pos + 4], "big")
    doff, ftype = buf[pos + 4], buf[pos + 5]
    if doff < 2 or size < doff * 4:
        raise FrameError(FRAMING_ERROR, f"bad frame header (size {size}, doff {doff})")
    return size, doff, ftype


def _u32(buf: bytearray, pos: int) -> int:
    """The big-endian 32-bit unsigned integer at ``pos`` (the caller has checked it is there)."""
    return (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]


def _is_at(buf: bytearray, pos: int, header: bytes) -> bool:
    """Whether the 8 bytes at ``pos`` (there) are ``header``."""
    for i in range(HEADER_SIZE):
        if buf[pos + i] != header[i]:
            return False
    return True


def _amqp_next(buf: bytearray, pos: int, end: int) -> bool:
    """Whether what is left from ``pos`` (up to 4 bytes of it) begins a protocol header."""
    for i in range(min(end - pos, 4)):
        if buf[pos + i] != b"AMQP"[i]:
            return False
    return True


class SaslGuard:
    """Checks a client's bytes up to the end of its SASL exchange (see the module doc)."""

    __slots__ = ("_buf", "_state", "max_frame", "frames", "sasl_ends")

    def __init__(self, max_frame: int = MAX_SASL_FRAME) -> None:
        self._buf = bytearray()
        self._state = _HEADER
        self.max_frame = max_frame
        self.frames = 0  # SASL frames let through
        # where each SASL frame the last feed() let through ends in the bytes it returned
        # (the caller checks the exchange's outcome there)
        self.sasl_ends: list = []

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: Buffer) -> bytes:
        """Take the next bytes from the client; return those proton may now see.

        Bytes of an incomplete header or frame are kept until it is complete and checked.
        Once ``done``, everything kept is returned and later input must bypass the guard.
        Raises :class:`FrameError` on the first byte sequence a server must not receive.
        """
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        ends = self.sasl_ends = []
        while self._state != _DONE:
            if self._state == _HEADER or (self._state == _RESPONSES
                                          and _amqp_next(buf, pos, end)):
                if end - pos < HEADER_SIZE:
                    break
                pos = self._header(buf, pos)
                continue
            if end - pos < FRAME_HEADER_SIZE:
                break
            size = _u32(buf, pos)
            doff = buf[pos + 4]
            if doff < 2 or size < doff * 4:
                frame_header(buf, pos)  # (raises, with the text the header deserves)
            ftype = buf[pos + 5]
            if self._state == _AMQP:
                if ftype != AMQP_FRAME:
                    raise FrameError(FRAMING_ERROR, f"frame of type {ftype} after SASL")
                self._state = _DONE  # proton's AMQP layer is in charge from here
                break
            if ftype != SASL_FRAME:
                raise FrameError(FRAMING_ERROR, f"frame of type {ftype} during SASL")
            if size > self.max_frame:
                raise FrameError(FRAMING_ERROR, f"SASL frame of {size} bytes is too large")
            if end - pos < size:
                break
            self._frame(buf, pos + doff * 4, pos + size)
            pos += size
            ends.append(pos)
        if self._state == _DONE:
            out = bytes(buf)
            self._buf = bytearray()
            return out
        out = bytes(buf[:pos])
        del buf[:pos]
        return out

    def _header(self, buf: bytearray, pos: int) -> int:
        if self._state == _HEADER:
            # Only SASL is inspected; any other header (AMQP, TLS, garbage) is proton's to
            # answer or refuse, and it does so without crashing.
            self._state = _INIT if _is_at(buf, pos, SASL_HEADER) else _DONE
        elif _is_at(buf, pos, AMQP_HEADER):
            self._state = _AMQP  # the client is done with SASL: AMQP frames from here on
        else:
            header = bytes(buf[pos:pos + HEADER_SIZE])
            raise FrameError(FRAMING_ERROR, f"unexpected protocol header {header!r} after SASL")
        return pos + HEADER_SIZE

    def _frame(self, buf: bytearray, body: int, end: int) -> None:
        if body + 3 > end or buf[body] != 0x00:
            raise FrameError(DECODE_ERROR, "SASL frame without a described performative")
        kind = buf[body + 1]
        if kind == 0x53:
            code = buf[body + 2]
        elif kind == 0x80 and body + 10 <= end:
            code = int.from_bytes(buf[body + 2:body + 10], "big")
        else:
            raise FrameError(DECODE_ERROR, "SASL performative without a numeric descriptor")
        name = NAMES.get(code)
        if code == SASL_INIT and self._state == _INIT:
            _check_init(buf, body + (3 if kind == 0x53 else 10), end)
            self._state = _RESPONSES
        elif code == SASL_RESPONSE and self._state == _RESPONSES:
            pass
        elif name is None:
            raise FrameError(DECODE_ERROR, f"unknown SASL performative 0x{code:x}")
        elif code == SASL_RESPONSE:
            raise FrameError(NOT_ALLOWED, "sasl-response before sasl-init")
        elif code == SASL_INIT:
            raise FrameError(NOT_ALLOWED, "second sasl-init")
        else:
            raise FrameError(NOT_ALLOWED, f"{name} from a client")
        self.frames += 1


def _check_init(buf: bytearray, pos: int, end: int) -> None:
    """A sasl-init's fields are a list whose first item, the mechanism, is a symbol."""
    if pos >= end:
        raise FrameError(DECODE_ERROR, "sasl-init without fields")
    code = buf[pos]
    if code == 0xc0:
        first, count = pos + 3, buf[pos + 2] if pos + 3 <= end else 0
    elif code == 0xd0:
        first = pos + 9
        count = _u32(buf, pos + 5) if first <= end else 0
    else:
        count = first = 0
    if count < 1 or first >= end or buf[first] not in (0xa3, 0xb3):
        raise FrameError(DECODE_ERROR, "sasl-init does not name a mechanism (a symbol)")
