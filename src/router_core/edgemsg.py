"""The messages the edge modules exchange, as AMQP bytes: built and read without proton.

Owns: the address-tracking update an interior router sends an edge (1.19's
``_$qd.edge_addr_tracking``: a header section ``[durable=false]`` and an amqp-value body, the
list ``[hash key, has-destination]``), the heartbeat an edge sends (1.19's
``_$qd.edge_heartbeat``: an amqp-value body, a sequence int), the address lookup's request and
answer, the edge's management requests to its interior (the link-route proxy's CREATE and
DELETE) and their answers, and reading each back. The core gets and sends message bytes only
(it never runs proton); these few fixed shapes are all it composes or parses itself.

Pure functions, no state. Must not import zmq, proton, sockets, clocks or logging handlers.
Every reader is total: bytes it cannot read give ``None``, never an exception.
"""
from typing import Optional, Tuple

_HEADER = b"\x00\x53\x70"       # described section: header (0x70)
_AMQP_VALUE = b"\x00\x53\x77"   # described section: amqp-value (0x77)
_NOT_DURABLE_HEADER = _HEADER + b"\xc0\x02\x01\x42"  # list8 [false]


class _Bad(Exception):
    """Bytes that are not the AMQP the reader expected (internal: readers return None)."""


def _str(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) < 256:
        return b"\xa1" + bytes([len(data)]) + data
    return b"\xb1" + len(data).to_bytes(4, "big") + data


def tracking_update(key: str, present: bool) -> bytes:
    """The update telling an edge whether address ``key`` (a hash key, ``M0orders``) has a
    destination beyond that edge, as 1.19's edge_addr_tracking composes it."""
    items = _str(key) + (b"\x41" if present else b"\x42")
    count = 2
    if len(items) + 1 < 256:
        body = b"\xc0" + bytes([len(items) + 1, count]) + items
    else:
        body = b"\xd0" + (len(items) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + items
    return _NOT_DURABLE_HEADER + _AMQP_VALUE + body


def heartbeat(seq: int) -> bytes:
    """An edge heartbeat: an amqp-value int (1.19 counts them from 0)."""
    return _AMQP_VALUE + b"\x71" + (seq & 0xFFFFFFFF).to_bytes(4, "big")


def _skip(data: bytes, pos: int) -> int:
    """The position after the AMQP value at ``pos`` (described values included)."""
    code = data[pos]
    pos += 1
    if code == 0x00:  # described: descriptor, then the value
        return _skip(data, _skip(data, pos))
    width = code >> 4
    if width == 0x4:
        return pos
    if width in (0x5, 0x6, 0x7, 0x8, 0x9):
        return pos + {0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}[width]
    if width in (0xa, 0xc, 0xe):
        return pos + 1 + data[pos]
    if width in (0xb, 0xd, 0xf):
        return pos + 4 + int.from_bytes(data[pos:pos + 4], "big")
    raise _Bad(f"constructor 0x{code:02x}")


def _amqp_value(data: bytes) -> int:
    """The position of the amqp-value body's value, after the sections before it."""
    pos = 0
    while pos < len(data):
        if data[pos:pos + 3] == _AMQP_VALUE:
            return pos + 3
        if data[pos] != 0x00:
            raise _Bad("not a section")
        pos = _skip(data, pos)
    raise _Bad("no amqp-value body")


def _read_text(data: bytes, pos: int) -> str:
    code = data[pos]
    if code in (0xa1, 0xa3):
        size, pos = data[pos + 1], pos + 2
    elif code in (0xb1, 0xb3):
        size, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
    else:
        raise _Bad("not a string")
    if pos + size > len(data):
        raise _Bad("truncated string")
    return bytes(data[pos:pos + size]).decode("utf-8")


def _read_bool(data: bytes, pos: int) -> bool:
    code = data[pos]
    if code == 0x41:
        return True
    if code == 0x42:
        return False
    if code == 0x56:
        return data[pos + 1] != 0
    raise _Bad("not a boolean")


def read_tracking_update(payload: object) -> Optional[Tuple[str, bool]]:
    """``(key, present)`` of a tracking update, None if the message is not one (1.19
    rejects such a message)."""
    try:
        data = bytes(payload)  # type: ignore[call-overload]
        pos = _amqp_value(data)
        code = data[pos]
        if code == 0xc0:
            count, pos = data[pos + 2], pos + 3
        elif code == 0xd0:
            count, pos = int.from_bytes(data[pos + 5:pos + 9], "big"), pos + 9
        else:
            return None
        if count != 2:
            return None
        key = _read_text(data, pos)
        present = _read_bool(data, _skip(data, pos))
        return key, present
    except (_Bad, IndexError, ValueError, TypeError, UnicodeDecodeError):
        return None


# --- 1.19's address lookup (an edge asks its interior whether an address is link-routed) --------
LOOKUP_VERSION = 1
OPCODE_LINK_ROUTE_LOOKUP = 1
LOOKUP_OK = 0
LOOKUP_BAD_VERSION = 1
LOOKUP_BAD_OPCODE = 2
LOOKUP_NOT_FOUND = 3
LOOKUP_INVALID_REQUEST = 4
_PROPERTIES = 0x73
_APP_PROPERTIES = 0x74
_VALUE = 0x77


def _scalar(data: bytes, pos: int) -> object:
    """A simple value at ``pos`` (null, boolean, integer, string, symbol); else _Bad."""
    code = data[pos]
    if code == 0x40:
        return None
    if code in (0x41, 0x42, 0x56):
        return _read_bool(data, pos)
    if code in (0x43, 0x44):
        return 0
    if code in (0x50, 0x52, 0x53):
        return data[pos + 1]
    if code == 0x60:
        return int.from_bytes(data[pos + 1:pos + 3], "big")
    if code == 0x70:
        return int.from_bytes(data[pos + 1:pos + 5], "big")
    if code == 0x80:
        return int.from_bytes(data[pos + 1:pos + 9], "big")
    if code == 0x51:
        return int.from_bytes(data[pos + 1:pos + 2], "big", signed=True)
    if code in (0x54, 0x55):
        return int.from_bytes(data[pos + 1:pos + 2], "big", signed=True)
    if code == 0x81:
        return int.from_bytes(data[pos + 1:pos + 9], "big", signed=True)
    if code == 0x71:
        return int.from_bytes(data[pos + 1:pos + 5], "big", signed=True)
    if code in (0xa1, 0xa3, 0xb1, 0xb3):
        return _read_text(data, pos)
    raise _Bad(f"not a simple value: 0x{code:02x}")


def _compound(data: bytes, pos: int) -> list:
    """The positions of a list's (or map's) items."""
    code = data[pos]
    if code == 0x45:
        return []
    if code in (0xc0, 0xc1):
        count, pos = data[pos + 2], pos + 3
    elif code in (0xd0, 0xd1):
        count, pos = int.from_bytes(data[pos + 5:pos + 9], "big"), pos + 9
    else:
        raise _Bad("not a list or map")
    out = []
    for _ in range(count):
        out.append(pos)
        pos = _skip(data, pos)
    return out


def _sections(data: bytes) -> dict:
    """Section descriptor code -> position of its value."""
    out = {}
    pos = 0
    while pos < len(data):
        if data[pos] != 0x00 or data[pos + 1] != 0x53:
            raise _Bad("not a section")
        out[data[pos + 2]] = pos + 3
        pos = _skip(data, pos)
    return out


def read_lookup_request(payload: object) -> Optional[tuple]:
    """An address lookup request as ``(reply_to, correlation_id, version, opcode, address,
    receiver)``: ``reply_to`` as text, ``correlation_id`` as its AMQP encoding (sent back as
    it came), ``address``/``receiver`` None when the body is not ``[string, bool]``; None
    when the message cannot be read at all."""
    try:
        data = bytes(payload)  # type: ignore[call-overload]
        sections = _sections(data)
        reply_to = cid = None
        if _PROPERTIES in sections:
            items = _compound(data, sections[_PROPERTIES])
            if len(items) > 4 and data[items[4]] != 0x40:
                reply_to = _scalar(data, items[4])
            if len(items) > 5 and data[items[5]] != 0x40:
                cid = data[items[5]:_skip(data, items[5])]
        version = opcode = None
        if _APP_PROPERTIES in sections:
            items = _compound(data, sections[_APP_PROPERTIES])
            props = {}
            for k, v in zip(items[0::2], items[1::2]):
                try:
                    props[_scalar(data, k)] = _scalar(data, v)
                except _Bad:
                    continue
            version, opcode = props.get("version"), props.get("opcode")
        address = receiver = None
        if _VALUE in sections:
            try:
                items = _compound(data, sections[_VALUE])
                if len(items) >= 2:
                    address = _read_text(data, items[0])
                    receiver = _read_bool(data, items[1])
            except _Bad:
                address = receiver = None
        return reply_to, cid, version, opcode, address, receiver
    except (_Bad, IndexError, ValueError, TypeError, UnicodeDecodeError):
        return None


def _list(items: bytes, count: int) -> bytes:
    if len(items) + 1 < 256 and count < 256:
        return b"\xc0" + bytes([len(items) + 1, count]) + items
    return b"\xd0" + (len(items) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + items


def lookup_reply(reply_to: str, correlation_id: bytes, status: int, is_link_route: bool,
                 has_destinations: bool) -> bytes:
    """The answer to a lookup request, as 1.19's address lookup server composes it: to
    ``reply_to``, the request's correlation id, application properties version, opcode and
    status, body ``[is link route, has destinations]``."""
    props = _list(b"\x40\x40" + _str(reply_to) + b"\x40\x40" + correlation_id, 6)
    app = b""
    for name, value in (("version", LOOKUP_VERSION), ("opcode", OPCODE_LINK_ROUTE_LOOKUP),
                        ("status", status)):
        app += _str(name) + b"\x70" + value.to_bytes(4, "big")
    app_map = _list(app, 6)
    app_map = bytes([0xc1]) + app_map[1:] if app_map[0] == 0xc0 else \
        bytes([0xd1]) + app_map[1:]
    body = _list((b"\x41" if is_link_route else b"\x42")
                 + (b"\x41" if has_destinations else b"\x42"), 2)
    return (_NOT_DURABLE_HEADER + b"\x00\x53\x73" + props + b"\x00\x53\x74" + app_map
            + _AMQP_VALUE + body)


def lookup_request(reply_to: str, correlation_id: int, address: str, receiver: bool) -> bytes:
    """An address lookup request, as a 1.19 edge sends it (its reply address, a correlation
    id, application properties version 1 and opcode 1, body ``[address, receiver?]``)."""
    cid = b"\x80" + (correlation_id & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    props = _list(b"\x40\x40\x40\x40" + _str(reply_to) + cid, 6)
    app = b""
    for name, value in (("version", LOOKUP_VERSION), ("opcode", OPCODE_LINK_ROUTE_LOOKUP)):
        app += _str(name) + b"\x70" + value.to_bytes(4, "big")
    app_map = _list(app, 4)
    app_map = bytes([0xc1]) + app_map[1:] if app_map[0] == 0xc0 else \
        bytes([0xd1]) + app_map[1:]
    body = _list(_str(address) + (b"\x41" if receiver else b"\x42"), 2)
    return (_NOT_DURABLE_HEADER + b"\x00\x53\x73" + props + b"\x00\x53\x74" + app_map
            + _AMQP_VALUE + body)


def read_lookup_reply(payload: object) -> Optional[tuple]:
    """A lookup reply as ``(correlation_id, status, is_link_route, has_destinations)``; None
    when it cannot be read (the asker then decides locally, as 1.19 does)."""
    try:
        data = bytes(payload)  # type: ignore[call-overload]
        sections = _sections(data)
        items = _compound(data, sections[_PROPERTIES])
        cid = _scalar(data, items[5]) if len(items) > 5 else None
        status = None
        items = _compound(data, sections[_APP_PROPERTIES])
        for k, v in zip(items[0::2], items[1::2]):
            if _scalar(data, k) == "status":
                status = _scalar(data, v)
        items = _compound(data, sections[_VALUE])
        if len(items) < 2:
            return cid, LOOKUP_INVALID_REQUEST, False, False
        return cid, status, _read_bool(data, items[0]), _read_bool(data, items[1])
    except (_Bad, KeyError, IndexError, ValueError, TypeError, UnicodeDecodeError):
        return None


# --- 1.19's edge management client (the link-route proxy's requests to the interior) -----------
def _map(items: bytes, count: int) -> bytes:
    encoded = _list(items, count)
    return (b"\xc1" if encoded[0] == 0xc0 else b"\xd1") + encoded[1:]


def _text_map(pairs: tuple) -> bytes:
    items = b""
    for name, value in pairs:
        items += _str(name) + _str(value)
    return _map(items, 2 * len(pairs))


def management_request(reply_to: str, correlation_id: str, operation: str, entity_type: str,
                       identity: Optional[str], name: str, body: tuple) -> bytes:
    """A management request as 1.19's edge management client sends it to the interior's
    ``$management``: reply-to and a string correlation id in the properties, the application
    properties ``operation``, ``type``, ``identity`` (when given) and ``name``, and an
    amqp-value body, the map of the text pairs ``body``."""
    props = _list(b"\x40\x40\x40\x40" + _str(reply_to) + _str(correlation_id), 6)
    app = [("operation", operation), ("type", entity_type)]
    if identity is not None:
        app.append(("identity", identity))
    app.append(("name", name))
    return (_NOT_DURABLE_HEADER + b"\x00\x53\x73" + props + b"\x00\x53\x74"
            + _text_map(tuple(app)) + _AMQP_VALUE + _text_map(body))


def read_management_reply(payload: object) -> Optional[tuple]:
    """A management reply as ``(correlation_id, status, description, identity)``:
    ``status`` 500 when the application properties carry no readable ``statusCode`` (as 1.19
    reads a bad reply), ``identity`` the body map's ``identity`` as text (None without one);
    None when the message cannot be read at all."""
    try:
        data = bytes(payload)  # type: ignore[call-overload]
        sections = _sections(data)
        items = _compound(data, sections[_PROPERTIES])
        cid = _scalar(data, items[5]) if len(items) > 5 else None
        status, description, identity = 500, None, None
        if _APP_PROPERTIES in sections:
            items = _compound(data, sections[_APP_PROPERTIES])
            for k, v in zip(items[0::2], items[1::2]):
                try:
                    name, value = _scalar(data, k), _scalar(data, v)
                except _Bad:
                    continue
                if name == "statusCode" and isinstance(value, int) \
                        and not isinstance(value, bool):
                    status = value
                elif name == "statusDescription" and isinstance(value, str):
                    description = value
        if _VALUE in sections and data[sections[_VALUE]] in (0xc1, 0xd1):
            items = _compound(data, sections[_VALUE])
            for k, v in zip(items[0::2], items[1::2]):
                try:
                    if _scalar(data, k) == "identity":
                        value = _scalar(data, v)
                        identity = None if value is None else str(value)
                except _Bad:
                    continue
        return cid, status, description, identity
    except (_Bad, KeyError, IndexError, ValueError, TypeError, UnicodeDecodeError):
        return None
