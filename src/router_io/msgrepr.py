"""The MESSAGE trace line of a message received or sent, as Qpid Dispatch 1.19 writes it.

``[C3]: Received Message{message-id="m1", subject="s", app-properties={"k"=1}} on link 'L'
( -> q1)``: the properties fields and the application properties a connection's
``messageLoggingComponents`` chose (common/msglog.py), read from a copy of the message's bytes
only when the line is written (the worker calls this only with MESSAGE trace on and bits set;
the forwarded bytes are never decoded or re-encoded).

1.19's rules, kept here:

- A message without an application-properties section, or with a null one (which 1.19
  refuses when it logs), or with sections this reader cannot walk, gets no line at all.
- Fields in the order of :data:`common.msglog.COMPONENTS`; an absent or null field is left out.
  Values are printed by their AMQP type: null ``null``; boolean ``T``/``F``; integers in
  decimal (a 32-bit signed one cut to 9 characters, unsigned to 10, 64-bit ones to 19, as
  1.19's buffers cut them); timestamp ``"%Y-%m-%d %H:%M:%S.mmm %z"`` in local time, nothing
  when 0 or negative; string ``"..."``, symbol ``:"..."``, binary ``b"..."`` with each byte
  that is neither printable ASCII nor white space written ``\\xx``; map ``{k=v, ...}`` and list
  ``[a, ...]`` (nothing when empty); float, double, decimal, char, uuid, arrays and anything
  else print nothing after the ``=``. A field that does not parse (a described value inside,
  a map with an odd count, a value overrunning its container) is left out entirely.
- The ``Message{...}`` text is cut to 2044 characters (then without its closing brace) and
  the whole line to 2047, as 1.19's fixed buffers do.

Must not import proton, zmq or router_core: pure byte reading.
"""
from __future__ import annotations

import time
from typing import List, Optional, Tuple, Union

from common.msglog import COMPONENTS

REPR_MAX = 2044   # characters of "Message{..." 1.19 keeps (2048-byte buffer, "}" reserved)
LINE_MAX = 2047   # characters of a log line's text (1.19's 2048-byte entry)
_PROPERTIES, _APP_PROPERTIES = 0x73, 0x74
_SECTIONS = (0x70, 0x71, 0x72, 0x73, 0x74)
_APP_BIT = 1 << COMPONENTS.index("app-properties")

Buffer = Union[bytes, bytearray, memoryview]
# a parsed value: (tag, payload bytes, children)
Parsed = Tuple[int, bytes, List["Parsed"]]


class _ParseError(Exception):
    pass


def _fixed_size(tag: int) -> int:
    high = tag & 0xF0
    if high == 0x40:
        return 0
    if high == 0x50:
        return 1
    if high == 0x60:
        return 2
    if high == 0x70:
        return 4
    if high == 0x80:
        return 8
    if high == 0x90:
        return 16
    return -1


def _parse_header(buf: bytes, pos: int, end: int) -> Tuple[int, int, int, int]:
    """(tag, element count, offset of the payload, offset after the value) of the value at
    ``pos``, read as 1.19's field parser reads it: a described value (tag 0x00) is an error."""
    if pos >= end:
        raise _ParseError("no tag")
    tag = buf[pos]
    pos += 1
    count = 0
    size = _fixed_size(tag)
    high = tag & 0xF0
    if size < 0:
        if high in (0xA0, 0xC0, 0xE0):
            if pos >= end:
                raise _ParseError("no length")
            size = buf[pos]
            pos += 1
            if high != 0xA0:
                if pos >= end:
                    raise _ParseError("no count")
                count = buf[pos]
                pos += 1
                size -= 1
        elif high in (0xB0, 0xD0, 0xF0):
            if pos + 4 > end:
                raise _ParseError("no length")
            size = int.from_bytes(buf[pos:pos + 4], "big")
            pos += 4
            if high != 0xB0:
                if pos + 4 > end:
                    raise _ParseError("no count")
                count = int.from_bytes(buf[pos:pos + 4], "big")
                pos += 4
                size -= 4
        else:
            raise _ParseError(f"tag 0x{tag:02x} has no length")
        if size < 0:
            raise _ParseError("count beyond length")
    if tag in (0xC1, 0xD1) and count & 1:
        raise _ParseError("odd number of elements in a map")
    stop = pos + size
    if stop > end:
        raise _ParseError("truncated")
    return tag, count, pos, stop


def _parse(buf: bytes, pos: int, end: int) -> Tuple[Parsed, int]:
    """One value at ``pos`` as 1.19's field parser reads it (compound values element by
    element, an array's too), and the offset after it."""
    tag, count, pos, stop = _parse_header(buf, pos, end)
    children: List[Parsed] = []
    cpos = pos
    for _ in range(count):
        child, cpos = _parse(buf, cpos, stop)
        children.append(child)
    return (tag, buf[pos:stop], children), stop


def _quoted(data: bytes) -> str:
    out = []
    for byte in data:
        if 0x20 <= byte < 0x7F or byte in (0x09, 0x0A, 0x0B, 0x0C, 0x0D):
            out.append(chr(byte))
        else:
            out.append("\\%02x" % byte)
    return "".join(out)


def _timestamp(millis: int) -> str:
    try:
        local = time.localtime(millis // 1000)
        return (time.strftime("%Y-%m-%d %H:%M:%S", local) + ".%03d " % (millis % 1000)
                + time.strftime("%z", local))
    except (OverflowError, OSError, ValueError):
        return ""


def _text(value: Parsed) -> str:
    tag, data, children = value
    if tag == 0x40:
        return "null"
    if tag in (0x56, 0x41, 0x42):
        return "T" if (tag == 0x41 or (tag == 0x56 and data[:1] != b"\x00")) else "F"
    if tag in (0x51, 0x61, 0x71, 0x54):   # byte, short, int, smallint: 1.19's 10-byte buffer
        return str(int.from_bytes(data, "big", signed=True))[:9]
    if tag in (0x50, 0x60, 0x70, 0x52, 0x43):  # ubyte, ushort, uint, smalluint, uint0
        return str(int.from_bytes(data, "big"))[:10]
    if tag in (0x80, 0x53, 0x44):         # ulong, smallulong, ulong0
        return str(int.from_bytes(data, "big"))[:19]
    if tag in (0x81, 0x55):               # long, smalllong
        return str(int.from_bytes(data, "big", signed=True))[:19]
    if tag == 0x83:
        millis = int.from_bytes(data, "big", signed=True)
        return '"%s"' % _timestamp(millis) if millis > 0 else ""
    if tag in (0xA0, 0xB0):
        return 'b"%s"' % _quoted(data)
    if tag in (0xA1, 0xB1):
        return '"%s"' % _quoted(data)
    if tag in (0xA3, 0xB3):
        return ':"%s"' % _quoted(data)
    if tag in (0xC1, 0xD1):
        if not children:
            return ""
        pairs = (f"{_text(children[i])}={_text(children[i + 1])}"
                 for i in range(0, len(children), 2))
        return "{" + ", ".join(pairs) + "}"
    if tag in (0x45, 0xC0, 0xD0):
        if not children:
            return ""
        return "[" + ", ".join(_text(c) for c in children) + "]"
    return ""  # float, double, decimals, char, uuid, arrays...: 1.19 prints nothing


def _section(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
    """(section code, offset of its value) of the section at ``pos``; (-1, pos) when what is
    there is not a section this reader knows."""
    if pos + 3 > end or buf[pos] != 0x00:
        return -1, pos
    if buf[pos + 1] == 0x53:
        return buf[pos + 2], pos + 3
    if buf[pos + 1] == 0x80 and pos + 10 <= end:
        code = int.from_bytes(buf[pos + 2:pos + 10], "big")
        return (code if code <= 0xFF else -1), pos + 10
    return -1, pos


def _list_fields(buf: bytes, pos: int, end: int) -> List[Tuple[int, int]]:
    """(start, stop) of each element of the list at ``pos`` (properties)."""
    tag = buf[pos]
    if tag == 0x45:
        return []
    if tag not in (0xC0, 0xD0):
        raise _ParseError("properties is not a list")
    if tag == 0xC0:
        size, count, start = buf[pos + 1], buf[pos + 2], pos + 3
        stop = pos + 2 + size
    else:
        size = int.from_bytes(buf[pos + 1:pos + 5], "big")
        count = int.from_bytes(buf[pos + 5:pos + 9], "big")
        start, stop = pos + 9, pos + 5 + size
    if stop > end:
        raise _ParseError("truncated")
    spans = []
    for _ in range(count):
        after = _skip(buf, start, stop)
        spans.append((start, after))
        start = after
    return spans


def _skip(buf: bytes, pos: int, end: int) -> int:
    """The offset after the value at ``pos`` (described values included), within ``end``."""
    if pos >= end:
        raise _ParseError("no tag")
    if buf[pos] == 0x00:
        return _skip(buf, _skip(buf, pos + 1, end), end)
    return _parse_header(buf, pos, end)[3]


def message_repr(payload: Buffer, bits: int) -> Optional[str]:
    """``Message{...}`` of a message's raw bytes with the components of ``bits`` (an int of
    common.msglog.component_bits), or None when 1.19 would log nothing for it."""
    if not bits:
        return None
    buf = bytes(payload)
    end = len(buf)
    pos = 0
    props: List[Tuple[int, int]] = []
    app: Optional[Tuple[int, int]] = None
    try:
        while pos < end:
            code, value = _section(buf, pos, end)
            if code not in _SECTIONS:
                break
            if code == _PROPERTIES:
                props = _list_fields(buf, value, end)
            pos = _skip(buf, value, end)
            if code == _APP_PROPERTIES:
                app = (value, pos)
                break
    except (_ParseError, IndexError, RecursionError):
        return None
    if app is None or buf[app[0]] == 0x40:  # (1.19 refuses a null one before it logs)
        return None
    parts = []
    for index, name in enumerate(COMPONENTS[:-1]):
        if not bits >> index & 1 or index >= len(props):
            continue
        start, stop = props[index]
        if buf[start] == 0x40:
            continue
        try:
            parts.append(f"{name}={_text(_parse(buf, start, stop)[0])}")
        except (_ParseError, RecursionError):
            continue
    if bits & _APP_BIT:
        try:  # (a value nested thousands deep is left out rather than fail the worker)
            parts.append(f"app-properties={_text(_parse(buf, app[0], app[1])[0])}")
        except (_ParseError, RecursionError):
            pass
    text = "Message{" + ", ".join(parts)
    return text[:REPR_MAX] if len(text) >= REPR_MAX else text + "}"


def log_text(conn_id: int, sent: bool, what: str, link_name: str, source: str,
             target: str) -> str:
    """The MESSAGE trace text (``what``: a ``Message{...}``, or 1.19's "aborted message")."""
    line = (f"[C{conn_id}]: {'Sent' if sent else 'Received'} {what} on link '{link_name}' "
            f"({source} -> {target})")
    return line[:LINE_MAX]
