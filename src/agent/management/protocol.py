"""Management requests and responses: parsing, status codes, reply messages.

Owns the wire shape of AMQP Management (draft 9) as Qpid Dispatch 1.x uses it: application
properties ``operation``, ``type``, ``name``, ``identity``, ``entityType``, ``offset``, ``count``;
responses carry ``statusCode``/``statusDescription`` and the request's ``correlation_id``.
Bad requests become :class:`ManagementError` with the HTTP-like status and a description.

Knows nothing about router state. Must not import zmq, router_io or router_core.core.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Optional

from proton import Data, Message, int32, symbol, ulong

OK, CREATED, NO_CONTENT = 200, 201, 204
BAD_REQUEST, UNAUTHORIZED, FORBIDDEN, NOT_FOUND = 400, 401, 403, 404
INTERNAL_ERROR, NOT_IMPLEMENTED = 500, 501



def status_text(status: int) -> str:
    """The standard reason phrase of an HTTP-like status ("Not Found"), "" if none."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


ENTITY_OPERATIONS = ("CREATE", "READ", "UPDATE", "DELETE")
GLOBAL_OPERATIONS = ("QUERY", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-ANNOTATIONS",
                     "GET-MGMT-NODES", "GET-SCHEMA", "GET-JSON-SCHEMA", "GET-LOG")
OPERATIONS = ENTITY_OPERATIONS + GLOBAL_OPERATIONS
# A request whose ``type`` is one of these is addressed to the management node itself (what 1.19's
# own client library sends: type=org.amqp.management, name=self); its entityType names the type
# the operation is about.
MANAGEMENT_NODE_TYPES = frozenset({
    "org.amqp.management", "org.apache.qpid.dispatch.org.amqp.management", "management",
    "org.apache.qpid.dispatch.management"})
# What 1.19's agent in the router core answers itself (the rest goes to its Python agent, which
# logs every failure at AGENT error): these types, named exactly, in entityType (else type),
# with one of these operations, spelled exactly.
_CORE_AGENT_TYPES = frozenset("org.apache.qpid.dispatch." + t for t in (
    "router.address", "router.link", "router.config.address", "router.config.linkRoute",
    "router.config.autoLink", "router", "console", "connection", "router.config.exchange",
    "router.config.binding", "router.connection.linkRoute"))
_CORE_AGENT_OPERATIONS = frozenset(("QUERY", "CREATE", "READ", "UPDATE", "DELETE"))


def answered_by_core_agent(properties: dict) -> bool:
    """Whether 1.19 answers a request with these application properties from its core agent
    (whose failures it does not log) rather than its Python agent."""
    target = properties.get("entityType")
    if target is None:
        target = properties.get("type")
    return target in _CORE_AGENT_TYPES and properties.get("operation") in _CORE_AGENT_OPERATIONS


class ManagementError(Exception):
    """A request that cannot be answered with success; ``status`` is the HTTP-like code."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


@dataclass
class Request:
    """One parsed management request."""

    operation: str
    properties: dict = field(default_factory=dict)
    body: Any = None
    reply_to: Optional[str] = None
    correlation_id: Any = None
    # the router's id of the connection the request came in on (None: not over AMQP, or not
    # known): connection-scoped entities are created on it and shown through it only
    in_conn: Optional[int] = None
    # the unsettled delivery it came in: accepted once answered, as 1.19 settles a request
    # after its agent handled it (a QUERY of links shows its own request unsettled)
    settle_id: Optional[int] = None

    def prop(self, name: str) -> Any:
        return self.properties.get(name)

    @property
    def type(self) -> Optional[str]:
        return self.properties.get("type")

    @property
    def entity_type(self) -> Optional[str]:
        """QUERY and GET-* name the type in ``entityType`` (``type`` accepted too)."""
        if self.properties.get("entityType"):
            return self.properties["entityType"]
        target = self.properties.get("type")
        return None if target in MANAGEMENT_NODE_TYPES else target

    @property
    def to_node(self) -> bool:
        """Addressed to the management node (no type, or the node's own type)."""
        return self.type is None or self.type in MANAGEMENT_NODE_TYPES

    @property
    def name(self) -> Optional[str]:
        return self.properties.get("name")

    @property
    def identity(self) -> Optional[str]:
        return self.properties.get("identity")

    def int_prop(self, name: str, default: Optional[int] = None) -> Optional[int]:
        """A non-negative integer property (``offset``, ``count``, ``limit``), or ``default``."""
        value = self.properties.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ManagementError(BAD_REQUEST, f"'{name}' must be a non-negative integer")
        try:
            number = int(value)
        except ValueError:
            raise ManagementError(BAD_REQUEST,
                                  f"'{name}' must be a non-negative integer") from None
        if number < 0:
            raise ManagementError(BAD_REQUEST, f"'{name}' must be a non-negative integer")
        return number

    def body_map(self, required: bool = False) -> dict:
        """The body as a map (None counts as empty unless ``required``); anything else is a
        bad request."""
        if self.body is None:
            if required:
                raise ManagementError(BAD_REQUEST, f"{self.operation} needs a body: a map of "
                                                   "the entity's attributes")
            return {}
        if not isinstance(self.body, dict):
            raise ManagementError(BAD_REQUEST,
                                  f"request body must be a map, got {type(self.body).__name__}")
        return {str(k): v for k, v in self.body.items()}


def decode(payload: bytes) -> Message:
    msg = Message()
    msg.decode(bytes(payload))
    return msg


def parse_request(msg: Message) -> Request:
    """Turn a decoded message into a Request; raise ManagementError(400) if it is not one."""
    props = msg.properties
    if props is None:
        props = {}
    if not isinstance(props, dict):
        raise ManagementError(BAD_REQUEST, "application properties must be a map")
    props = {str(k): v for k, v in props.items()}
    operation = props.get("operation")
    if operation is None:
        raise ManagementError(BAD_REQUEST, "No operation specified: the 'operation' application "
                                           "property is required")
    if not isinstance(operation, str):
        raise ManagementError(BAD_REQUEST, "the 'operation' property must be a string")
    operation = operation.upper()
    # an operation nobody implements is answered 501 with the operations of its target
    # (agent.management.operations), as 1.19 does
    for key in ("type", "name", "identity", "entityType"):
        if props.get(key) is not None and not isinstance(props[key], str):
            raise ManagementError(BAD_REQUEST, f"the '{key}' property must be a string")
    return Request(operation, props, msg.body, msg.reply_to, msg.correlation_id)


def response(request_reply_to: Optional[str], correlation_id: Any, status: int,
             description: Optional[str] = None, body: Any = None) -> Message:
    """The reply message for a request: status properties, correlation id copied, body."""
    return Message(address=request_reply_to, correlation_id=correlation_id,
                   properties={"statusCode": status,
                               "statusDescription": description or status_text(status)},
                   body=body)


def error_response(request: Request, exc: ManagementError, body: Any = None) -> Message:
    """A failure's answer; its body is None unless 1.19 sends one with that failure."""
    return response(request.reply_to, request.correlation_id, exc.status, exc.description, body)


# --- bodies -----------------------------------------------------------------------------------
# A reply's body is encoded here (AMQP 1.0 types, the encodings proton picks: the same bytes)
# after the message's other sections, which proton encodes. proton's encoder holds a value in a
# tree of at most 65,535 nodes (a QUERY answer of 10,000 rows does not fit) and costs a call
# through cffi for every value: a connection's READ (about 45 attributes) took it 140 µs, 50
# here.
_BODY_SECTION = b"\x00\x53\x77"  # described amqp-value


def encode_message(msg: Message) -> bytes:
    """The message's bytes: proton's encoding of its sections but the body, followed by the
    amqp-value body encoded here (:func:`encode_value`); no body, no body section."""
    body = msg.body
    if body is None:
        return msg.encode()
    msg.body = None
    try:
        return msg.encode() + _BODY_SECTION + encode_value(body)
    finally:
        msg.body = body


def encode_value(value: Any) -> bytes:
    """One AMQP value: null, boolean, long, double, string, binary, symbol, list and map of
    those; anything else (proton's typed numbers, UUIDs...) as proton encodes it."""
    out = bytearray()
    _encode_into(out, value)
    return bytes(out)


def _encode_into(out: bytearray, value: Any) -> None:
    kind = type(value)
    if value is None:
        out += b"\x40"
    elif kind is bool:
        out += b"\x41" if value else b"\x42"
    elif kind is int and -(2 ** 63) <= value < 2 ** 63:
        if -128 <= value <= 127:
            out += struct.pack(">Bb", 0x55, value)
        else:
            out += struct.pack(">Bq", 0x81, value)
    elif kind is float:
        out += struct.pack(">Bd", 0x82, value)
    elif kind is str:
        _variable(out, value.encode("utf-8"), 0xa1, 0xb1)
    elif kind is bytes:
        _variable(out, value, 0xa0, 0xb0)
    elif kind is symbol:        # the types of a MAU's body, as proton encodes them (no Data
        _variable(out, value.encode("ascii"), 0xa3, 0xb3)       # object for each of 100,000)
    elif kind is int32 and -(2 ** 31) <= value < 2 ** 31:
        out += struct.pack(">Bb", 0x54, value) if -128 <= value <= 127 else struct.pack(
            ">Bi", 0x71, value)
    elif kind is ulong and 0 <= value < 2 ** 64:
        out += (b"\x44" if value == 0 else struct.pack(">BB", 0x53, value) if value < 256
                else struct.pack(">BQ", 0x80, value))
    elif kind in (list, tuple) and not value:
        out += b"\x45"                                         # list0, as proton has it
    elif kind in (list, tuple):
        items = bytearray()
        for item in value:
            _encode_into(items, item)
        out += struct.pack(">BII", 0xd0, len(items) + 4, len(value)) + items
    elif kind is dict:
        items = bytearray()
        for key, item in value.items():
            _encode_into(items, key)
            _encode_into(items, item)
        out += struct.pack(">BII", 0xd1, len(items) + 4, 2 * len(value)) + items
    else:  # symbol, int32, ulong, UUID, ...: proton knows these types
        data = Data()
        data.put_object(value)
        out += data.encode()


def _variable(out: bytearray, raw: bytes, short_code: int, long_code: int) -> None:
    if len(raw) < 256:
        out += struct.pack(">BB", short_code, len(raw)) + raw
    else:
        out += struct.pack(">BI", long_code, len(raw)) + raw
