"""Management requests and responses: parsing, status codes, reply messages.

Owns the wire shape of AMQP Management (draft 9) as Qpid Dispatch 1.x uses it: application
properties ``operation``, ``type``, ``name``, ``identity``, ``entityType``, ``offset``, ``count``;
responses carry ``statusCode``/``statusDescription`` and the request's ``correlation_id``.
Bad requests become :class:`ManagementError` with the HTTP-like status and a description.

Knows nothing about router state. Must not import zmq, router_io or router_core.core.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from proton import Message

OK, CREATED, NO_CONTENT = 200, 201, 204
BAD_REQUEST, UNAUTHORIZED, FORBIDDEN, NOT_FOUND = 400, 401, 403, 404
INTERNAL_ERROR, NOT_IMPLEMENTED = 500, 501

STATUS_TEXT = {OK: "OK", CREATED: "Created", NO_CONTENT: "No Content", BAD_REQUEST: "Bad Request",
               UNAUTHORIZED: "Unauthorized", FORBIDDEN: "Forbidden", NOT_FOUND: "Not Found",
               INTERNAL_ERROR: "Internal Server Error", NOT_IMPLEMENTED: "Not Implemented"}

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
                               "statusDescription": description or STATUS_TEXT.get(status, "")},
                   body=body)


def error_response(request: Request, exc: ManagementError) -> Message:
    return response(request.reply_to, request.correlation_id, exc.status, exc.description, None)
