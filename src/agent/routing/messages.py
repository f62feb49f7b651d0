"""Typed control messages of the Qpid Dispatch 1.x routing protocol (version 1), parsed at the edge.

Owns the frozen message dataclasses (:class:`Hello`, :class:`RA`, :class:`LSR`, :class:`LSU`,
:class:`MAU`, :class:`MAR`, :class:`LinkState`), :func:`decode` (opcode + decoded AMQP body map ->
typed message), :func:`encode` (typed message -> opcode + body map ready for proton) and the
addresses each message is sent to. Every other module of the package sees typed messages only.
May import proton's *data types* (``symbol``, ``int32``); must not import a proton Container or
Messenger, zmq, sockets, clocks or any other module of the router.

Decoding (reference doc, "Control messages"):

* keys may be strings or symbols (``proton.symbol`` is a ``str`` subclass): compared by text, keys
  that are not strings at all are ignored (1.x maps them to ``None``);
* integers may have any AMQP width (``int32``, ``long``, ``ulong``... are ``int`` subclasses); a
  ``bool`` is not an integer here;
* a missing ``pv`` is version 0; ``pv`` > 1 makes :func:`decode` return ``None`` (the caller
  logs it once per router id, see :func:`sender_and_version`); a missing ``instance`` is 0 and a
  missing ``area`` is ``"0"``;
* anything else wrong (missing mandatory field, wrong type, negative sequence, link cost outside
  1..2**31-1, an MAU that is neither differential nor absolute) raises :class:`ProtocolError`;
* an MAU whose ``hints`` list is not exactly as long as its ``add``/``exist`` list has its hints
  dropped (as the 1.x C part does): ``hints == ()`` means "no hints".

Encoding, decided for wire-exactness with 1.x:

* HELLO/RA/LSR/LSU are built by the Python part of 1.x, whose embedded-Python converter writes
  every Python int that fits in 32 bits as an AMQP ``int`` and larger ones as ``long``; so do we:
  string keys, :class:`proton.int32` values (plain ``int`` -> ``long`` only beyond int32, e.g. an
  ``instance`` after 2038). Key order is 1.x's ``to_dict`` order.
* MAU/MAR are built by the C part (``mobile_sync``): symbol keys, ``long`` values (plain Python
  ints, which proton encodes as ``long``) except ``hints``, a list of ``int32`` treatments; key
  order is the C composer's. Application properties: ``{"opcode": ...}`` with a string key for
  the Python-part opcodes and a symbol key for MAU/MAR.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from proton import int32, symbol

from agent.routing.errors import ProtocolError

__all__ = [
    "PROTOCOL_VERSION", "Hello", "RA", "LSR", "LSU", "LinkState", "MAU", "MAR", "Message",
    "DIFFERENTIAL", "ABSOLUTE", "decode", "encode", "sender_and_version", "application_properties",
    "HELLO_ADDRESS", "RA_ADDRESS", "MAU_ALL_ADDRESS", "router_address", "router_ma_address",
    "MAX_LINK_COST",
]

PROTOCOL_VERSION = 1
MAX_LINK_COST = 2**31 - 1

HELLO_ADDRESS = "amqp:/_local/qdhello"
RA_ADDRESS = "amqp:/_topo/0/all/qdrouter"
MAU_ALL_ADDRESS = "amqp:/_topo/0/all/qdrouter.ma"

DIFFERENTIAL = "differential"
ABSOLUTE = "absolute"

_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def router_address(router_id: str, area: str = "0") -> str:
    """Where LSR and LSU to ``router_id`` go (its ``qdrouter`` control address)."""
    return f"amqp:/_topo/{area}/{router_id}/qdrouter"


def router_ma_address(router_id: str, area: str = "0") -> str:
    """Where MAR and absolute MAU to ``router_id`` go (its ``qdrouter.ma`` address)."""
    return f"amqp:/_topo/{area}/{router_id}/qdrouter.ma"


# ---- typed messages ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkState:
    """One router's link state: ``peers`` maps each neighbour id to the cost of the link to it."""

    id: str
    area: str = "0"
    ls_seq: int = 0
    peers: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Hello:
    id: str
    pv: int = PROTOCOL_VERSION
    area: str = "0"
    instance: int = 0
    seen: Tuple[str, ...] = ()


@dataclass(frozen=True)
class RA:
    id: str
    pv: int = PROTOCOL_VERSION
    area: str = "0"
    instance: int = 0
    ls_seq: int = 0
    mobile_seq: int = 0


@dataclass(frozen=True)
class LSR:
    id: str
    pv: int = PROTOCOL_VERSION
    area: str = "0"


@dataclass(frozen=True)
class LSU:
    id: str
    pv: int = PROTOCOL_VERSION
    area: str = "0"
    instance: int = 0
    ls_seq: int = 0
    ls: LinkState = field(default_factory=lambda: LinkState(""))


@dataclass(frozen=True)
class MAU:
    """Mobile address update. ``kind`` is :data:`DIFFERENTIAL` (uses ``add``/``delete``/``hints``)
    or :data:`ABSOLUTE` (uses ``exist``/``hints``); ``hints`` is parallel to ``add``/``exist``."""

    id: str
    pv: int = PROTOCOL_VERSION
    area: str = "0"
    mobile_seq: int = 0
    kind: str = DIFFERENTIAL
    add: Tuple[str, ...] = ()
    delete: Tuple[str, ...] = ()
    exist: Tuple[str, ...] = ()
    hints: Tuple[int, ...] = ()


@dataclass(frozen=True)
class MAR:
    id: str
    pv: int = PROTOCOL_VERSION
    area: str = "0"
    have_seq: int = 0


Message = Union[Hello, RA, LSR, LSU, MAU, MAR]


# ---- decoding ----------------------------------------------------------------------------------

_MISSING = object()


def _text_keys(body: Any, what: str) -> Dict[str, Any]:
    if not isinstance(body, Mapping):
        raise ProtocolError(f"{what}: expected a map, got {type(body).__name__}")
    return {str(k): v for k, v in body.items() if isinstance(k, str)}


def _int(body: Mapping[str, Any], key: str, what: str, default: Any = _MISSING,
         minimum: Optional[int] = 0) -> int:
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise ProtocolError(f"{what}: mandatory field {key!r} missing")
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{what}: field {key!r} is not an integer: {value!r}")
    if minimum is not None and value < minimum:
        raise ProtocolError(f"{what}: field {key!r} below {minimum}: {value!r}")
    return int(value)


def _str(body: Mapping[str, Any], key: str, what: str, default: Any = _MISSING) -> str:
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise ProtocolError(f"{what}: mandatory field {key!r} missing")
        return default
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{what}: field {key!r} is not a non-empty string: {value!r}")
    return str(value)


def _seq(value: Any) -> Optional[list]:
    if isinstance(value, (list, tuple)):
        return list(value)
    elements = getattr(value, "elements", None)     # proton.Array
    return list(elements) if isinstance(elements, (list, tuple)) else None


def _str_list(body: Mapping[str, Any], key: str, what: str,
              default: Any = _MISSING) -> Optional[Tuple[str, ...]]:
    value = body.get(key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise ProtocolError(f"{what}: mandatory field {key!r} missing")
        return default
    items = _seq(value)
    if items is None or not all(isinstance(i, str) and i for i in items):
        raise ProtocolError(f"{what}: field {key!r} is not a list of strings: {value!r}")
    return tuple(str(i) for i in items)


def sender_and_version(body: Any) -> Tuple[str, int]:
    """Best-effort ``(id, pv)`` of a body, for the "ignored: protocol version" log line."""
    try:
        fields = _text_keys(body, "body")
        return _str(fields, "id", "body", "<unknown>"), _int(fields, "pv", "body", 0, None)
    except ProtocolError:
        return "<unknown>", 0


def _link_state(value: Any, what: str) -> LinkState:
    fields = _text_keys(value, what + ".ls")
    raw_peers = fields.get("peers", _MISSING)
    if raw_peers is _MISSING:
        raise ProtocolError(f"{what}.ls: mandatory field 'peers' missing")
    if not isinstance(raw_peers, Mapping):
        raise ProtocolError(f"{what}.ls: field 'peers' is not a map: {raw_peers!r}")
    peers: Dict[str, int] = {}
    for peer, cost in raw_peers.items():
        if not isinstance(peer, str) or not peer:
            raise ProtocolError(f"{what}.ls: peer id is not a string: {peer!r}")
        if not isinstance(cost, int) or isinstance(cost, bool) or not 1 <= cost <= MAX_LINK_COST:
            raise ProtocolError(f"{what}.ls: cost to {peer!r} is not in 1..{MAX_LINK_COST}: {cost!r}")
        peers[str(peer)] = int(cost)
    return LinkState(id=_str(fields, "id", what + ".ls"), area=_str(fields, "area", what, "0"),
                     ls_seq=_int(fields, "ls_seq", what + ".ls"), peers=peers)


def decode(opcode: str, body: Any) -> Optional[Message]:
    """Parse one control message; ``None`` when its ``pv`` is above :data:`PROTOCOL_VERSION`."""
    what = str(opcode)
    fields = _text_keys(body, what)
    pv = _int(fields, "pv", what, 0)
    if pv > PROTOCOL_VERSION:
        return None
    rid = _str(fields, "id", what)
    area = _str(fields, "area", what, "0")
    if what == "HELLO":
        return Hello(rid, pv, area, _int(fields, "instance", what, 0, None),
                     _str_list(fields, "seen", what))
    if what == "RA":
        return RA(rid, pv, area, _int(fields, "instance", what, 0, None),
                  _int(fields, "ls_seq", what), _int(fields, "mobile_seq", what))
    if what == "LSR":
        return LSR(rid, pv, area)
    if what == "LSU":
        ls = fields.get("ls", _MISSING)
        if ls is _MISSING:
            raise ProtocolError("LSU: mandatory field 'ls' missing")
        return LSU(rid, pv, area, _int(fields, "instance", what, 0, None),
                   _int(fields, "ls_seq", what), _link_state(ls, what))
    if what == "MAR":
        return MAR(rid, pv, area, _int(fields, "have_seq", what))
    if what == "MAU":
        return _decode_mau(fields, rid, pv, area)
    raise ProtocolError(f"unknown opcode {opcode!r}")


def _decode_mau(fields: Mapping[str, Any], rid: str, pv: int, area: str) -> MAU:
    seq = _int(fields, "mobile_seq", "MAU")
    exist = _str_list(fields, "exist", "MAU", None)
    add = _str_list(fields, "add", "MAU", None)
    delete = _str_list(fields, "del", "MAU", None)
    if exist is not None and (add is not None or delete is not None):
        raise ProtocolError("MAU: both 'exist' and 'add'/'del'")
    if exist is None and (add is None or delete is None):
        raise ProtocolError("MAU: neither 'exist' nor both 'add' and 'del'")
    raw_hints = _seq(fields.get("hints", ()))
    listed = exist if exist is not None else add
    hints: Tuple[int, ...] = ()
    if (raw_hints is not None and len(raw_hints) == len(listed)
            and all(isinstance(h, int) and not isinstance(h, bool) for h in raw_hints)):
        hints = tuple(int(h) for h in raw_hints)
    if exist is not None:
        return MAU(rid, pv, area, seq, ABSOLUTE, exist=exist, hints=hints)
    return MAU(rid, pv, area, seq, DIFFERENTIAL, add=add, delete=delete, hints=hints)


# ---- encoding ----------------------------------------------------------------------------------

def _py_int(value: int) -> int:
    """How 1.x's embedded Python writes an int: AMQP int when it fits, else long."""
    return int32(value) if _INT32_MIN <= value <= _INT32_MAX else int(value)


def application_properties(opcode: str) -> Dict[str, str]:
    """``{"opcode": opcode}`` with the key typed as the 1.x part sending ``opcode`` types it."""
    return {symbol("opcode") if opcode in ("MAU", "MAR") else "opcode": opcode}


def encode(msg: Message) -> Tuple[str, Dict[Any, Any]]:
    """``(opcode, body)`` for ``msg``, typed for proton as 1.x types it (see module docstring)."""
    if isinstance(msg, Hello):
        return "HELLO", {"id": msg.id, "pv": _py_int(msg.pv), "area": msg.area,
                         "instance": _py_int(msg.instance), "seen": list(msg.seen)}
    if isinstance(msg, RA):
        return "RA", {"id": msg.id, "pv": _py_int(msg.pv), "area": msg.area,
                      "instance": _py_int(msg.instance), "ls_seq": _py_int(msg.ls_seq),
                      "mobile_seq": _py_int(msg.mobile_seq)}
    if isinstance(msg, LSR):
        return "LSR", {"id": msg.id, "pv": _py_int(msg.pv), "area": msg.area}
    if isinstance(msg, LSU):
        ls = msg.ls
        return "LSU", {"id": msg.id, "pv": _py_int(msg.pv), "area": msg.area,
                       "instance": _py_int(msg.instance), "ls_seq": _py_int(msg.ls_seq),
                       "ls": {"id": ls.id, "area": ls.area, "ls_seq": _py_int(ls.ls_seq),
                              "peers": {p: _py_int(c) for p, c in ls.peers.items()}}}
    if isinstance(msg, MAU):
        body: Dict[Any, Any] = {symbol("id"): msg.id, symbol("pv"): int(msg.pv),
                                symbol("area"): msg.area, symbol("mobile_seq"): int(msg.mobile_seq)}
        hints = [int32(h) for h in msg.hints]
        if msg.kind == ABSOLUTE:
            body[symbol("exist")] = list(msg.exist)
            body[symbol("hints")] = hints
        else:
            body[symbol("hints")] = hints
            body[symbol("add")] = list(msg.add)
            body[symbol("del")] = list(msg.delete)
        return "MAU", body
    if isinstance(msg, MAR):
        return "MAR", {symbol("id"): msg.id, symbol("pv"): int(msg.pv), symbol("area"): msg.area,
                       symbol("have_seq"): int(msg.have_seq)}
    raise TypeError(f"not a routing control message: {msg!r}")
