"""``qdmanage``: a general AMQP management client of the router, with JSON output.

``qdmanage [options] OPERATION [ATTR=VALUE ...]``; OPERATION is any management operation
(lowercase accepted). The standard operations (QUERY, CREATE, READ, UPDATE, DELETE and the
GET-TYPES family) go to the router upper-cased; any other operation (GET-LOG, GET-SCHEMA, a
router-specific one) goes as typed, as 1.19's qdmanage sends it, and a string result is printed
as it is, not JSON-encoded; an empty result prints nothing. ``--type`` takes long or short names (``link``, ``node``, ``address``,
``linkRoute``, ``autoLink`` expand to the ``router.*`` names). ATTR=VALUE pairs are typed by the
schema; ``type=``, ``name=`` and ``identity=`` select the entity; a bare word names it (as in
``qdmanage update log/DEFAULT enable=debug+``); for QUERY, bare words are attribute names.
For the GET-* operations ATTR=VALUE pairs are request properties (``get-log limit=10``).
READ, UPDATE and DELETE without a name or identity go to the router as 1.19's qdmanage sends
them (it answers with the management entity itself, or 400). ``--stdin`` reads a JSON map, or a list of maps for bulk CREATE/UPDATE. An error status prints
``<Status>: <description>`` on stderr and exits 1. ``-r/--router ROUTER`` sends the requests to
``amqp:/_topo/0/ROUTER/$management`` (that router's agent, through the network) instead of
``$management``, e.g. ``qdmanage -r R2 query --type node`` or ``qdmanage get-mgmt-nodes``.

Must not import zmq, router_io or router_core.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional

from common.identity import VERSION
from common.schema import SchemaError, load_schema
from tools.client import DOCS, ManagementClient, add_connection_options, run_tool

OPERATIONS = ("QUERY", "CREATE", "READ", "UPDATE", "DELETE", "GET-TYPES", "GET-OPERATIONS",
              "GET-ATTRIBUTES", "GET-ANNOTATIONS", "GET-MGMT-NODES", "GET-SCHEMA",
              "GET-JSON-SCHEMA", "GET-LOG")
# the ones 1.19's qdmanage has a method for (sent upper-cased); the rest it sends as typed
STANDARD = ("QUERY", "CREATE", "READ", "UPDATE", "DELETE", "GET-TYPES", "GET-OPERATIONS",
            "GET-ATTRIBUTES", "GET-ANNOTATIONS", "GET-MGMT-NODES")


class UsageError(Exception):
    pass


def long_type(name: Optional[str]) -> Optional[str]:
    """Expand a short type name; unknown names go to the agent as written (it answers 404)."""
    if not name:
        return None
    try:
        return load_schema().long_name(name)
    except SchemaError:
        return name


def typed(entity_type: Optional[str], attribute: str, value: str) -> Any:
    """``value`` converted by the schema type of ``attribute``; as written if unknown/invalid
    (the agent then answers with its own 400 description)."""
    schema = load_schema()
    etype = schema.find(entity_type) if entity_type else None
    attr = etype.attribute(attribute) if etype else None
    if attr is None:
        return value
    try:
        return attr.convert(value)
    except SchemaError:
        return value


def parse_args(argv: Optional[list]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="qdmanage", usage="%(prog)s [options] OPERATION [ATTR=VALUE ...]",
        description="Standard AMQP management operations on a router; JSON output.",
        epilog=DOCS)
    parser.add_argument("operation", metavar="OPERATION",
                        help=f"one of {', '.join(OPERATIONS)} (lowercase accepted)")
    parser.add_argument("args", nargs="*", metavar="ATTR=VALUE")
    parser.add_argument("--type", help="entity type (long or short name)")
    parser.add_argument("--name", help="entity name")
    parser.add_argument("--identity", help="entity identity")
    parser.add_argument("--indent", type=int, default=2,
                        help="pretty-printing indent, -1 for a single line (default 2)")
    parser.add_argument("--stdin", action="store_true",
                        help="read attributes as JSON from stdin (a map, or a list of maps for "
                             "bulk CREATE/UPDATE)")
    parser.add_argument("--body", help="JSON value to use as the request body")
    parser.add_argument("--properties", help="JSON map of extra application properties")
    parser.add_argument("--limit", type=int, default=None, help="QUERY/GET-LOG: at most N")
    parser.add_argument("--version", action="version", version=VERSION)
    add_connection_options(parser)
    return parser.parse_intermixed_args(argv)


def build_requests(opts: argparse.Namespace, stdin_text: Optional[str] = None) -> list[tuple]:
    """The (operation, body, properties) requests a command line stands for."""
    op = opts.operation.upper()
    sent = op if op in STANDARD else opts.operation
    etype, name, identity = long_type(opts.type), opts.name, opts.identity
    attrs: dict[str, Any] = {}
    words: list[str] = []
    for arg in opts.args:
        key, eq, value = arg.partition("=")
        if not eq:
            words.append(arg)
        elif key == "type":
            etype = long_type(value)
        elif key == "name":
            name = value
        elif key == "identity":
            identity = value
        else:
            attrs[key] = value
    attrs = {k: typed(etype, k, v) for k, v in attrs.items()}
    extra = json.loads(opts.properties) if opts.properties else {}
    if not isinstance(extra, dict):
        raise UsageError("--properties must be a JSON map")
    if op == "QUERY":
        body = {"attributeNames": words}
        return [(op, body, {"entityType": etype, "count": opts.limit, **extra})]
    if op.startswith("GET-"):
        if etype is None and words and op != "GET-LOG":  # get-attributes TYPE, as 1.19
            etype = long_type(words[0])
        props = {"entityType": etype}
        if op == "GET-LOG":
            props["limit"] = opts.limit
        # as 1.19's qdmanage: ATTR=VALUE of these operations are request properties
        props.update({k: int(v) if isinstance(v, str) and v.isdigit() else v
                      for k, v in attrs.items()})
        props.update(extra)
        return [(sent, json.loads(opts.body) if opts.body else None, props)]
    if op not in OPERATIONS:  # a custom operation: ATTR=VALUE are request properties
        props = {"type": etype, "name": name, "identity": identity, **attrs, **extra}
        return [(sent, json.loads(opts.body) if opts.body else None, props)]
    if words and name is None and identity is None:
        name = words[0]
    maps: list = [attrs]
    if opts.stdin:
        data = json.loads(stdin_text if stdin_text is not None else sys.stdin.read())
        maps = data if isinstance(data, list) else [data]
        if not all(isinstance(m, dict) for m in maps):
            raise UsageError("--stdin needs a JSON map or a list of maps")
    elif opts.body:
        maps = [json.loads(opts.body)]
    requests = []
    for body in maps:
        body = dict(body) if isinstance(body, dict) else body
        item_type, item_name, item_identity = etype, name, identity
        if isinstance(body, dict):
            item_type = long_type(body.pop("type", None)) or item_type
            item_name = body.get("name", item_name)
            item_identity = body.pop("identity", item_identity)
            if op == "CREATE" and item_name is not None:
                body["name"] = item_name
        if op in ("READ", "DELETE"):
            body = None
        props = {"type": item_type, "name": item_name, "identity": item_identity, **extra}
        requests.append((op, body, props))
    return requests


def result_of(op: str, body: Any) -> Any:
    """What qdmanage prints for an answer: QUERY -> a list of entity maps without their null
    attributes (as 1.19 prints them)."""
    if op == "QUERY" and isinstance(body, dict):
        names = body.get("attributeNames", [])
        return [{n: v for n, v in zip(names, row) if v is not None}
                for row in body.get("results", [])]
    return body


def run_request(client: ManagementClient, op: str, body: Any, props: dict) -> Any:
    """One request's printed result; a QUERY is asked in pages (tools/client.py)."""
    if op == "QUERY" and set(props) <= {"entityType", "count"}:
        rows = client.query(props.get("entityType"), body.get("attributeNames"),
                            count=props.get("count"))
        return [{n: v for n, v in row.items() if v is not None} for row in rows]
    return result_of(op, client.call(op, body, **props))


def main(argv: Optional[list] = None) -> int:
    opts = parse_args(argv)
    usage_errors = (UsageError, ValueError)
    try:
        requests = build_requests(opts)  # before connecting: a usage error needs no router
    except usage_errors as exc:
        print(f"Usage error: {exc}", file=sys.stderr)
        return 2

    def work(client: ManagementClient) -> None:
        results = [run_request(client, op, body, props) for op, body, props in requests]
        output = results if opts.stdin and len(results) > 1 else results[0]
        op = requests[0][0]
        if op not in STANDARD:  # as 1.19 prints an operation it has no method for
            if not output:
                return
            if isinstance(output, str):
                print(output)
                return
        if op != "DELETE":
            indent = None if opts.indent < 0 else opts.indent
            print(json.dumps(output, indent=indent, default=str))

    return run_tool(opts, work, usage_errors)


if __name__ == "__main__":
    sys.exit(main())
