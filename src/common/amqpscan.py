"""Forwarding-path message scanner, pure-Python reference build (also the fallback).

Owns the byte-level rules for reading the few fields the router needs from a raw AMQP 1.0
message (``to``, header priority, the ``x-opt-qd.*`` message annotations, section offsets) and
for replacing only the message-annotations section. ``cython/_amqpscan.pyx`` implements the same
rules and must agree with this module byte for byte; change both together.

Rules both builds follow:

- Sections are described values ``0x00 0x53 <code>`` or ``0x00 0x80 <ulong>``; header (0x70),
  delivery-annotations (0x71), message-annotations (0x72), properties (0x73) and
  application-properties (0x74) must come in that order, each at most once. Scanning stops at
  the first other section (see ``ScanResult.body_start``); the body is never walked. Bytes
  where no section begins stop it the same way (opaque, as 1.19 routes them: ``OPAQUE``);
  a descriptor cut short is an error.
- Header/properties are lists (list0/list8/list32); annotation and application-property sections
  are maps (map8/map32) or null. Every value walked is bounds-checked against its container.
- Router keys are matched when encoded as sym8/sym32 (or, tolerated, str8/str32). A router
  value of the wrong type reads as None; ``to``/priority of the wrong type are format errors.
- Rewriting re-encodes the router keys canonically (str8/str32 strings, the narrowest integer,
  list of strings, map8 when it fits) after the user entries, which are copied unchanged.

Shared by the worker (every delivery) and the core (an exchange reads a message's subject), so
it lives in ``common``. Must not import proton, zmq, the compiled ``_amqpscan`` or any process
package (router_core, router_io, agent, supervisor).
"""
from __future__ import annotations

from typing import List, Optional, Tuple, Union

from common.amqpscan_types import KEEP, MessageFormatError, ScanResult

__all__ = ["scan", "has_annotations", "rewrite_annotations", "subject", "ScanResult", "KEEP",
           "MessageFormatError"]

Buffer = Union[bytes, bytearray, memoryview]

_SIZE1, _SIZE4, _BAD = -1, -4, -9
# Width of every constructor's payload: fixed bytes, or a 1-/4-byte size prefix.
_WIDTH = [_BAD] * 256
for _codes, _w in (((0x40, 0x41, 0x42, 0x43, 0x44, 0x45), 0), ((0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56), 1),
                   ((0x60, 0x61), 2), ((0x70, 0x71, 0x72, 0x73, 0x74), 4),
                   ((0x80, 0x81, 0x82, 0x83, 0x84), 8), ((0x94, 0x98), 16),
                   ((0xa0, 0xa1, 0xa3, 0xc0, 0xc1, 0xe0), _SIZE1),
                   ((0xb0, 0xb1, 0xb3, 0xd0, 0xd1, 0xf0), _SIZE4)):
    for _c in _codes:
        _WIDTH[_c] = _w
del _codes, _w, _c

_STR8 = (0xa1, 0xa3)     # str8-utf8, sym8
_STR32 = (0xb1, 0xb3)    # str32-utf8, sym32
# Integer constructors accepted for x-opt-qd.phase: code -> (width, signed).
_INTS = {0x43: (0, False), 0x44: (0, False), 0x50: (1, False), 0x52: (1, False), 0x53: (1, False),
         0x51: (1, True), 0x54: (1, True), 0x55: (1, True), 0x60: (2, False), 0x61: (2, True),
         0x70: (4, False), 0x71: (4, True), 0x80: (8, False), 0x81: (8, True)}

_HEADER, _DELIVERY_ANN, _MESSAGE_ANN, _PROPERTIES, _APP_PROPERTIES = 0x70, 0x71, 0x72, 0x73, 0x74
# What _section returns where no section begins (a byte other than 0x00, a descriptor other
# than 0x53/0x80, a code outside 0x70-0x78): the bytes from there on are opaque, as a body.
# 1.19 matches each optional section against its descriptor and takes a mismatch for "not
# present", so it routes a message whose bytes are no AMQP sections at all (b"xyz...").
OPAQUE = 0x1FF
_PREFIX = b"x-opt-qd."
_KEY_TO, _KEY_PHASE, _KEY_INGRESS, _KEY_TRACE = (
    b"x-opt-qd.to", b"x-opt-qd.phase", b"x-opt-qd.ingress", b"x-opt-qd.trace")


def _truncated(pos: int) -> MessageFormatError:
    return MessageFormatError(f"message truncated or value overruns its container at offset {pos}")


def _u32(buf: bytes, pos: int, end: int) -> int:
    if pos + 4 > end:
        raise _truncated(pos)
    return int.from_bytes(buf[pos:pos + 4], "big")


def _skip(buf: bytes, pos: int, end: int) -> int:
    """Offset just after the value at ``pos``; it must end by ``end``."""
    pending = 1
    while pending:
        if pos >= end:
            raise _truncated(pos)
        code = buf[pos]
        pos += 1
        if code == 0x00:            # described: a descriptor value, then the value
            pending += 1
            continue
        width = _WIDTH[code]
        if width >= 0:
            pos += width
        elif width == _SIZE1:
            if pos >= end:
                raise _truncated(pos)
            pos += 1 + buf[pos]
        elif width == _SIZE4:
            pos += 4 + _u32(buf, pos, end)
        else:
            raise MessageFormatError(f"invalid constructor 0x{code:02x} at offset {pos - 1}")
        if pos > end:
            raise _truncated(pos)
        pending -= 1
    return pos


def _string_span(buf: bytes, pos: int, end: int) -> Optional[Tuple[int, int, int]]:
    """(data start, data end, value end) of a str8/str32/sym8/sym32 at ``pos``, else None."""
    code = buf[pos]
    if code in _STR8:
        if pos + 2 > end:
            raise _truncated(pos)
        start = pos + 2
        stop = start + buf[pos + 1]
    elif code in _STR32:
        start = pos + 5
        stop = start + _u32(buf, pos + 1, end)
    else:
        return None
    if stop > end:
        raise _truncated(pos)
    return start, stop, stop


def _decode(buf: bytes, start: int, stop: int) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError:
        raise MessageFormatError(f"invalid UTF-8 at offset {start}") from None


def _compound(buf: bytes, pos: int, end: int, c8: int, c32: int) -> Tuple[int, int, int]:
    """(count, first item offset, end) of a list/map at ``pos`` (list0 and null count 0)."""
    code = buf[pos]
    if code == c8:
        if pos + 3 > end:
            raise _truncated(pos)
        size, count, first = buf[pos + 1], buf[pos + 2], pos + 3
        stop = pos + 2 + size
        if size < 1:
            raise MessageFormatError(f"compound size too small at offset {pos}")
    elif code == c32:
        size = _u32(buf, pos + 1, end)
        count = _u32(buf, pos + 5, end)
        first, stop = pos + 9, pos + 5 + size
        if size < 4:
            raise MessageFormatError(f"compound size too small at offset {pos}")
    elif code == (0x45 if c8 == 0xc0 else 0x40):
        return 0, pos + 1, pos + 1
    else:
        kind = "list" if c8 == 0xc0 else "map"
        raise MessageFormatError(f"expected a {kind} at offset {pos}, got 0x{code:02x}")
    if stop > end:
        raise _truncated(pos)
    return count, first, stop


def _list_field(buf: bytes, pos: int, end: int, index: int) -> Tuple[int, int, int]:
    """(offset of field ``index`` or -1 if absent, field container end, list end)."""
    count, item, stop = _compound(buf, pos, end, 0xc0, 0xd0)
    if count <= index:
        return -1, stop, stop
    for _ in range(index):
        item = _skip(buf, item, stop)
    if item >= stop:
        raise _truncated(item)
    return item, stop, stop


def _section(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
    """(section code, value offset) of the section starting at ``pos``; (OPAQUE, pos) when no
    section of a message begins there (see OPAQUE). A descriptor cut short raises."""
    if buf[pos] != 0x00:
        return OPAQUE, pos
    if pos + 2 > end:
        raise _truncated(pos)
    kind = buf[pos + 1]
    if kind == 0x53:
        if pos + 3 > end:
            raise _truncated(pos)
        code, value = buf[pos + 2], pos + 3
    elif kind == 0x80:
        if pos + 10 > end:
            raise _truncated(pos)
        code, value = int.from_bytes(buf[pos + 2:pos + 10], "big"), pos + 10
    else:
        return OPAQUE, pos
    if not _HEADER <= code <= 0x78:
        return OPAQUE, pos
    if value >= end:
        raise _truncated(value)
    return code, value


def _opt_string(buf: bytes, pos: int, end: int) -> Optional[str]:
    span = _string_span(buf, pos, end)
    return None if span is None else _decode(buf, span[0], span[1])


def _opt_int(buf: bytes, pos: int) -> Optional[int]:
    kind = _INTS.get(buf[pos])
    if kind is None:
        return None
    width, signed = kind
    return int.from_bytes(buf[pos + 1:pos + 1 + width], "big", signed=signed)


def _opt_trace(buf: bytes, pos: int, end: int) -> Optional[List[str]]:
    """A list or array of strings/symbols; anything else reads as None. ``pos`` is validated."""
    code = buf[pos]
    if code in (0xe0, 0xf0):                       # array: one constructor for all elements
        count, elem, stop = _array(buf, pos, end)
        if count == 0:
            return []
        ctor = buf[elem]
        if ctor not in _STR8 and ctor not in _STR32:
            return None
        elem += 1
        out = []
        for _ in range(count):
            if ctor in _STR8:
                if elem >= stop:
                    raise _truncated(elem)
                start, elem = elem + 1, elem + 1 + buf[elem]
            else:
                start = elem + 4
                elem = start + _u32(buf, elem, stop)
            if elem > stop:
                raise _truncated(elem)
            out.append(_decode(buf, start, elem))
    elif code in (0x45, 0xc0, 0xd0):
        count, elem, stop = _compound(buf, pos, end, 0xc0, 0xd0)
        out = []
        for _ in range(count):
            if elem >= stop:
                raise _truncated(elem)
            span = _string_span(buf, elem, stop)
            if span is None:
                return None
            out.append(_decode(buf, span[0], span[1]))
            elem = span[2]
    else:
        return None
    if elem != stop:
        raise MessageFormatError(f"trace size does not match its items at offset {pos}")
    return out


def _array(buf: bytes, pos: int, end: int) -> Tuple[int, int, int]:
    """(count, element constructor offset, end) of an array8/array32 at ``pos``."""
    if buf[pos] == 0xe0:
        if pos + 3 > end:
            raise _truncated(pos)
        size, count, first, stop = buf[pos + 1], buf[pos + 2], pos + 3, pos + 2 + buf[pos + 1]
        need = 2
    else:
        size, count = _u32(buf, pos + 1, end), _u32(buf, pos + 5, end)
        first, stop, need = pos + 9, pos + 5 + size, 5
    if size < need or stop > end:
        raise _truncated(pos)
    return count, first, stop


def _ma_entries(buf: bytes, pos: int, end: int):
    """Yield (entry start, key bytes or None, value offset, entry end) of the map at ``pos``,
    which must fill exactly up to ``end``; keys are bytes only when a symbol or string."""
    count, item, stop = _compound(buf, pos, end, 0xc1, 0xd1)
    if count & 1:
        raise MessageFormatError(f"map with an odd item count at offset {pos}")
    if stop != end:
        raise MessageFormatError(f"message-annotations size mismatch at offset {pos}")
    for _ in range(count >> 1):
        if item >= stop:
            raise _truncated(item)
        span = _string_span(buf, item, stop)
        if span is None:
            key, value = None, _skip(buf, item, stop)
        else:
            key, value = buf[span[0]:span[1]], span[2]
        entry_end = _skip(buf, value, stop)
        yield item, key, value, entry_end
        item = entry_end
    if item != stop:
        raise MessageFormatError(f"map size does not match its items at offset {pos}")


def scan(buf: Buffer) -> ScanResult:
    """Find ``to``, priority, the router annotations and the section offsets of one message."""
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf))
    end = len(buf)
    pos, last = 0, _HEADER - 1
    to: Optional[str] = None
    priority = 4
    ma_to = ma_phase = ma_ingress = ma_trace = None
    ma_start = ma_end = -1
    while pos < end:
        code, value = _section(buf, pos, end)
        if code > _APP_PROPERTIES:
            break
        if code <= last:
            raise MessageFormatError(f"section 0x{code:x} out of order at offset {pos}")
        if code > _MESSAGE_ANN and ma_start < 0:
            ma_start = ma_end = pos
        last = code
        if code == _HEADER:
            field, stop, pos = _list_field(buf, value, end, 1)
            if field >= 0 and buf[field] != 0x40:
                if buf[field] != 0x50:
                    raise MessageFormatError(f"header priority is not a ubyte at offset {field}")
                if field + 2 > stop:
                    raise _truncated(field)
                priority = buf[field + 1]
        elif code == _PROPERTIES:
            field, stop, pos = _list_field(buf, value, end, 2)
            if field >= 0 and buf[field] != 0x40:
                span = _string_span(buf, field, stop)
                if span is None:
                    raise MessageFormatError(f"properties.to is not a string at offset {field}")
                to = _decode(buf, span[0], span[1])
        elif code == _MESSAGE_ANN:
            ma_start = pos
            pos = _compound(buf, value, end, 0xc1, 0xd1)[2]
            for _, key, vpos, vend in _ma_entries(buf, value, pos):
                if key is None or not key.startswith(_PREFIX):
                    continue
                if key == _KEY_TO:
                    ma_to = _opt_string(buf, vpos, vend)
                elif key == _KEY_PHASE:
                    ma_phase = _opt_int(buf, vpos)
                elif key == _KEY_INGRESS:
                    ma_ingress = _opt_string(buf, vpos, vend)
                elif key == _KEY_TRACE:
                    ma_trace = _opt_trace(buf, vpos, vend)
            ma_end = pos
        else:
            pos = _compound(buf, value, end, 0xc1, 0xd1)[2]
    if ma_start < 0:
        ma_start = ma_end = pos
    return ScanResult(to, priority, ma_to, ma_phase, ma_ingress, ma_trace, ma_start, ma_end, pos)


def has_annotations(buf: Buffer) -> bool:
    """False only if the message certainly has no message-annotations section: its sections up
    to where that one would be are read in order and the next is a later section, or there is
    none. True if it has one, and whenever that is not certain (a malformed start): the caller
    then scans the message whole, as without this check. Reads nothing past that point."""
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf))
    end = len(buf)
    pos, last = 0, _HEADER - 1
    try:
        while pos < end:
            code, value = _section(buf, pos, end)
            if code <= last:
                return True
            if code >= _MESSAGE_ANN:
                return code == _MESSAGE_ANN
            last = code
            pos = (_compound(buf, value, end, 0xc0, 0xd0) if code == _HEADER
                   else _compound(buf, value, end, 0xc1, 0xd1))[2]
    except MessageFormatError:
        return True
    return False


def subject(buf: Buffer) -> Optional[str]:
    """The ``subject`` property (properties field 3) of one message, for an exchange's
    bindings: None when the message has no properties section or its subject is null, absent
    or not a string/symbol. Reads nothing past the properties section (never the body)."""
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf))
    end = len(buf)
    pos, last = 0, _HEADER - 1
    while pos < end:
        code, value = _section(buf, pos, end)
        if code > _PROPERTIES:
            return None
        if code <= last:
            raise MessageFormatError(f"section 0x{code:x} out of order at offset {pos}")
        last = code
        if code == _PROPERTIES:
            field, stop, _ = _list_field(buf, value, end, 3)
            if field < 0:
                return None
            return _opt_string(buf, field, stop)
        if code == _HEADER:
            pos = _compound(buf, value, end, 0xc0, 0xd0)[2]
        else:
            pos = _compound(buf, value, end, 0xc1, 0xd1)[2]
    return None


def _enc_str(value: str, code8: int = 0xa1) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    data = value.encode("utf-8")
    if len(data) <= 0xff:
        return bytes((code8, len(data))) + data
    return bytes((code8 + 0x10,)) + len(data).to_bytes(4, "big") + data


def _enc_int(value: int) -> bytes:
    if not isinstance(value, int):
        raise TypeError(f"expected int, got {type(value).__name__}")
    if -0x80 <= value < 0x80:
        return b"\x54" + value.to_bytes(1, "big", signed=True)
    if -0x8000_0000 <= value < 0x8000_0000:
        return b"\x71" + value.to_bytes(4, "big", signed=True)
    if -0x8000_0000_0000_0000 <= value < 0x8000_0000_0000_0000:
        return b"\x81" + value.to_bytes(8, "big", signed=True)
    if 0 <= value < 1 << 64:
        return b"\x80" + value.to_bytes(8, "big")
    raise ValueError(f"phase {value} does not fit an AMQP integer")


def _enc_compound(items: bytes, count: int, code8: int, code32: int) -> bytes:
    if len(items) < 0xff and count <= 0xff:
        return bytes((code8, len(items) + 1, count)) + items
    return (bytes((code32,)) + (len(items) + 4).to_bytes(4, "big")
            + count.to_bytes(4, "big") + items)


def _enc_trace(trace: List[str]) -> bytes:
    if not trace:
        return b"\x45"
    return _enc_compound(b"".join(_enc_str(hop) for hop in trace), len(trace), 0xc0, 0xd0)


_SYM_TO, _SYM_INGRESS, _SYM_TRACE, _SYM_PHASE = (
    bytes((0xa3, len(k))) + k for k in (_KEY_TO, _KEY_INGRESS, _KEY_TRACE, _KEY_PHASE))
_KNOWN = frozenset((_KEY_TO, _KEY_PHASE, _KEY_INGRESS, _KEY_TRACE))


def rewrite_annotations(buf: Buffer, scan_result: ScanResult, *, ingress: Optional[str] = None,
                        trace_append: Optional[str] = None, to_override=KEEP, phase=KEEP,
                        strip: bool = False) -> bytes:
    """Return the message with only its message-annotations section replaced.

    ``scan_result`` must be ``scan(buf)``: the router values come from it, the user entries are
    copied from ``buf``. User entries come first, then ``x-opt-qd.to``, ``.ingress``, ``.trace``,
    ``.phase`` (re-encoded), then any other ``x-opt-qd.*`` entries unchanged. ``ingress`` and
    ``trace_append`` replace/extend when not None; ``to_override``/``phase`` set the value, or
    remove it when None, unless KEEP. ``strip`` drops every existing ``x-opt-qd.*`` entry first
    (values given in this call are still written). An empty map omits the section.
    """
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf))
    start, stop = scan_result.ma_start, scan_result.ma_end
    if not 0 <= start <= stop <= len(buf):
        raise MessageFormatError("scan_result offsets do not fit this message")
    user: List[bytes] = []
    others: List[bytes] = []
    if start < stop:
        code, value = _section(buf, start, stop)
        if code != _MESSAGE_ANN:
            raise MessageFormatError("scan_result offsets do not span message-annotations")
        for entry, key, _, entry_end in _ma_entries(buf, value, stop):
            if key is None or not key.startswith(_PREFIX):
                user.append(buf[entry:entry_end])
            elif not strip and key not in _KNOWN:
                others.append(buf[entry:entry_end])
    if strip:
        to = ma_phase = ma_ingress = trace = None
    else:
        to, ma_phase, ma_ingress, trace = (scan_result.ma_to, scan_result.ma_phase,
                                           scan_result.ma_ingress, scan_result.ma_trace)
    if to_override is not KEEP:
        to = to_override
    if phase is not KEEP:
        ma_phase = phase
    if ingress is not None:
        ma_ingress = ingress
    if trace_append is not None:
        _enc_str(trace_append)      # type check before building the list
        trace = list(trace or ()) + [trace_append]
    if to is not None:
        user.append(_SYM_TO + _enc_str(to))
    if ma_ingress is not None:
        user.append(_SYM_INGRESS + _enc_str(ma_ingress))
    if trace is not None:
        user.append(_SYM_TRACE + _enc_trace(trace))
    if ma_phase is not None:
        user.append(_SYM_PHASE + _enc_int(ma_phase))
    user.extend(others)
    if not user:
        return buf[:start] + buf[stop:]
    section = b"\x00\x53\x72" + _enc_compound(b"".join(user), 2 * len(user), 0xc1, 0xd1)
    return b"".join((buf[:start], section, buf[stop:]))


def user_id(buf: Buffer, pos: int) -> Optional[bytes]:
    """The ``user-id`` property (properties field 1) of a message already scanned, its
    properties section starting at ``pos`` (``ScanResult.ma_end``: properties follow the
    message annotations); None when there is no properties section or no (or an empty)
    user-id. Only policed connections that forbid user-id proxying call it (common/policy)."""
    end = len(buf)
    if pos + 3 > end or buf[pos] != 0x00:
        return None
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf)[pos:])
        end, pos = len(buf), 0
    code, value = _section(buf, pos, end)
    if code != _PROPERTIES:
        return None
    field, stop, _ = _list_field(buf, value, end, 1)
    if field < 0:
        return None
    kind = buf[field]
    if kind == 0xa0:
        start = field + 2
        stop_ = start + buf[field + 1]
    elif kind == 0xb0:
        start = field + 5
        stop_ = start + _u32(buf, field + 1, stop)
    elif kind in _STR8 or kind in _STR32:  # lenient: a string user-id compares as its bytes
        span = _string_span(buf, field, stop)
        start, stop_ = span[0], span[1]
    else:
        return None
    if stop_ > stop:
        raise _truncated(field)
    return bytes(buf[start:stop_]) or None
