"""AMQP 1.0 values read from bytes without proton's size limit, for routing control messages.

proton's ``Data`` indexes its nodes with 16 bits: a value of more than 65,535 nodes (a mobile
address update or an answer to a MAR that lists ~65,000 addresses or more) can be neither
encoded nor decoded by it (``DataException [-10]``). The agent encodes such bodies with
``management.protocol.encode_value`` and decodes them here, into the Python values proton gives
(str, ``proton.symbol``, int, float, bool, None, bytes, list, dict; a described value other than
a message section as ``proton.Described``).

Must not import zmq, router_io, router_core or supervisor.
"""
from __future__ import annotations

import struct
import uuid
from typing import Any, Callable

from proton import Described, symbol, ulong

_FIXED: dict[int, tuple[int, Callable[[bytes], Any]]] = {
    0x50: (1, lambda b: b[0]),                                  # ubyte
    0x51: (1, lambda b: struct.unpack(">b", b)[0]),             # byte
    0x52: (1, lambda b: b[0]),                                  # smalluint
    0x53: (1, lambda b: ulong(b[0])),                           # smallulong
    0x54: (1, lambda b: struct.unpack(">b", b)[0]),             # smallint
    0x55: (1, lambda b: struct.unpack(">b", b)[0]),             # smalllong
    0x56: (1, lambda b: b[0] != 0),                             # boolean
    0x60: (2, lambda b: struct.unpack(">H", b)[0]),             # ushort
    0x61: (2, lambda b: struct.unpack(">h", b)[0]),             # short
    0x70: (4, lambda b: struct.unpack(">I", b)[0]),             # uint
    0x71: (4, lambda b: struct.unpack(">i", b)[0]),             # int
    0x72: (4, lambda b: struct.unpack(">f", b)[0]),             # float
    0x73: (4, lambda b: chr(struct.unpack(">I", b)[0])),        # char
    0x80: (8, lambda b: ulong(struct.unpack(">Q", b)[0])),      # ulong
    0x81: (8, lambda b: struct.unpack(">q", b)[0]),             # long
    0x82: (8, lambda b: struct.unpack(">d", b)[0]),             # double
    0x83: (8, lambda b: struct.unpack(">q", b)[0]),             # timestamp (ms)
    0x98: (16, lambda b: uuid.UUID(bytes=bytes(b))),            # uuid
}
_EMPTY = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: ulong(0), 0x45: []}


class AmqpDecodeError(ValueError):
    """Bytes that are not a well-formed AMQP value."""


def decode_value(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """The value at ``pos`` and the position after it."""
    try:
        return _value(memoryview(buf), pos)
    except (IndexError, struct.error) as exc:
        raise AmqpDecodeError(f"truncated AMQP value at {pos}") from exc
    except RecursionError as exc:  # values nested thousands deep: no routing message is
        raise AmqpDecodeError("AMQP value nested too deep") from exc


def _take(buf: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    if pos + n > len(buf):
        raise AmqpDecodeError(f"truncated AMQP value at {pos}")
    return buf[pos:pos + n], pos + n


def _value(buf: memoryview, pos: int) -> tuple[Any, int]:
    return _body(buf[pos], buf, pos + 1)


def _body(code: int, buf: memoryview, pos: int) -> tuple[Any, int]:
    """The value of type ``code`` whose encoding (after the constructor) starts at ``pos``."""
    if code == 0x00:  # described: descriptor, value
        descriptor, pos = _value(buf, pos)
        value, pos = _value(buf, pos)
        return Described(descriptor, value), pos
    if code in _EMPTY:
        value = _EMPTY[code]
        return (list(value) if isinstance(value, list) else value), pos
    if code in _FIXED:
        width, read = _FIXED[code]
        raw, pos = _take(buf, pos, width)
        return read(raw), pos
    if code in (0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3):  # binary, string, symbol
        if code & 0x10:
            size = struct.unpack_from(">I", buf, pos)[0]
            pos += 4
        else:
            size = buf[pos]
            pos += 1
        raw, pos = _take(buf, pos, size)
        if code & 0x0f == 0x00:
            return bytes(raw), pos
        text = bytes(raw).decode("utf-8" if code & 0x0f == 0x01 else "ascii")
        return (text if code & 0x0f == 0x01 else symbol(text)), pos
    if code in (0xc0, 0xc1, 0xd0, 0xd1):  # list8, map8, list32, map32
        if code & 0x10:
            size, count = struct.unpack_from(">II", buf, pos)
            pos += 8
            end = pos + size - 4
        else:
            size, count = buf[pos], buf[pos + 1]
            pos += 2
            end = pos + size - 1
        items = []
        size_of_buf = len(buf)
        for _ in range(count):
            item_code = buf[pos]
            if item_code == 0xa1:  # str8 (a MAU's addresses) and smallint (its hints) inline
                start = pos + 2
                pos = start + buf[pos + 1]
                if pos > size_of_buf:
                    raise AmqpDecodeError(f"truncated AMQP value at {start}")
                items.append(str(buf[start:pos], "utf-8"))
            elif item_code == 0x54:
                small = buf[pos + 1]
                items.append(small - 256 if small > 127 else small)
                pos += 2
            else:
                item, pos = _body(item_code, buf, pos + 1)
                items.append(item)
        if pos != end:
            raise AmqpDecodeError(f"compound value's size does not match its items at {pos}")
        if code & 0x01:
            if count % 2:
                raise AmqpDecodeError("a map with an odd number of items")
            return dict(zip(items[0::2], items[1::2])), pos
        return items, pos
    if code in (0xe0, 0xf0):  # array8, array32: one constructor for every element
        if code == 0xf0:
            count = struct.unpack_from(">I", buf, pos + 4)[0]
            pos += 8
        else:
            count = buf[pos + 1]
            pos += 2
        element_code = buf[pos]
        if element_code == 0x00:
            raise AmqpDecodeError("arrays of described values are not read here")
        pos += 1
        items = []
        for _ in range(count):
            item, pos = _body(element_code, buf, pos)
            items.append(item)
        return items, pos
    raise AmqpDecodeError(f"unknown AMQP type code 0x{code:02x} at {pos - 1}")


MESSAGE_PROPERTIES, APPLICATION_PROPERTIES, AMQP_VALUE = 0x73, 0x74, 0x77


def decode_sections(payload: bytes) -> dict[int, Any]:
    """The sections of a message (descriptor code -> value)."""
    sections: dict[int, Any] = {}
    buf = memoryview(bytes(payload))
    pos = 0
    while pos < len(buf):
        value, pos = decode_value(buf, pos)
        if not isinstance(value, Described):
            raise AmqpDecodeError("a message section that is not a described value")
        try:
            sections[int(value.descriptor)] = value.value
        except (TypeError, ValueError) as exc:
            raise AmqpDecodeError("a message section with a symbolic descriptor") from exc
    return sections
