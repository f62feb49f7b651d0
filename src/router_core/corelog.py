"""The ROUTER_CORE lines 1.19 logs for connections and links, and its trace of core actions.

The core (sans-I/O) keeps what happened in ``core.info_logs`` as ``(LOG_*, record, source,
target)`` while ``core.log_info`` is set (ROUTER_CORE info enabled; nothing is kept otherwise);
the core process turns them into 1.19's lines here, once per loop:

    [C5] Connection Opened: dir=in host=127.0.0.1:41834 vhost= encrypted=no auth=ANONYMOUS user=anonymous container_id=c1 props=
    [C5][L7] Link attached: dir=out source={q1 expire:sess} target={<none> expire:sess}
    [C5][L7] Link detached: del=1 presett=0 psdrop=0 acc=1 rej=0 rel=0 mod=0 delay1=0 delay10=0 blocked=no
    [C5][L7] Link closed due to connection loss: del=1 ...   (``Link lost``: it ended in an error)
    [C5] Connection Closed
    [C5][L7] Stuck delivery: At least one delivery on this link has been undelivered/unsettled for more than 10 seconds
    [C5][L7] Link blocked with zero credit for 12 seconds

(``delay1``/``delay10``: the link's deliveriesDelayed1Sec/10Sec; ``blocked``: whether the sweep
found it blocked with zero credit, settlement.scan_blocked.)
The router's own internal connection (the agent's) is not a client connection and is left
out, as 1.19 does not log its in-process agent. With ROUTER_CORE trace on, the core process
also writes ``Core action 'NAME'`` for each command it hands the core (:func:`action_name`:
1.19's names of the same actions).

Runs in the core process, not in the core. Must not import zmq or router_io; proton only to
format AMQP-encoded terminus fields (capabilities, filters...) as 1.19 does (pn_data_format).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from common import ipc
from router_core.records import (
    LINK_CONTROL, LINK_DATA, LOG_CONN_CLOSED, LOG_CONN_OPENED, LOG_LINK_ATTACHED,
    LOG_LINK_BLOCKED, LOG_LINK_DETACHED, LOG_LINK_LOST, LOG_LINK_STUCK, ROLE_INTERNAL)

_DURABLE = {1: " dur:config", 2: " dur:deliveries"}
_EXPIRY = {0: " expire:link", 1: " expire:sess", 2: " expire:conn"}
_DIST = {1: " dist:copy", 2: " dist:move"}
_ENCODED = (("capabilities", "caps"), ("filter", "flt"), ("outcomes", "outcomes"),
            ("properties", "props"))
# a router link whose terminus the worker made itself (the connecting side): its capability
_ROUTER_CAPS = {LINK_CONTROL: ' caps::"qd.router"', LINK_DATA: ' caps::"qd.router-data"'}
_CLOSED_TEXT = {LOG_LINK_DETACHED: "Link detached",
                LOG_LINK_LOST: "Link closed due to connection loss"}

# 1.19's action names (router_core_thread.c "Core action '%s'") of the commands we hand the core
ACTION_NAMES = {
    ipc.ConnOpened: "connection_opened", ipc.ConnClosed: "connection_closed",
    ipc.LinkAttach: "link_first_attach", ipc.LinkAttached: "link_second_attach",
    ipc.LinkDetach: "link_detach", ipc.LinkLost: "link_detach", ipc.LinkFlow: "link_flow",
    ipc.Transfer: "link_deliver",
    ipc.RouterTransfer: "link_deliver", ipc.StreamTransfer: "link_deliver",
    ipc.Disposition: "update_delivery", ipc.SettleIn: "update_delivery",
    ipc.InDrained: "link_flow", ipc.SenderState: "update_delivery",
}


def action_name(cmd: Any) -> Optional[str]:
    return ACTION_NAMES.get(type(cmd))


def lines(entries: Iterable[tuple]) -> list[str]:
    """The ROUTER_CORE info lines of ``core.info_logs`` entries, in order."""
    out = []
    for kind, record, source, target in entries:
        conn = record if kind in (LOG_CONN_OPENED, LOG_CONN_CLOSED) else record.conn
        if conn.role == ROLE_INTERNAL:
            continue
        if kind == LOG_CONN_OPENED:
            out.append(_opened(conn))
        elif kind == LOG_CONN_CLOSED:
            out.append(f"[C{conn.conn_id}] Connection Closed")
        elif kind == LOG_LINK_STUCK:
            out.append(f"[C{conn.conn_id}][L{record.link_id}] Stuck delivery: At least one "
                       "delivery on this link has been undelivered/unsettled for more than "
                       f"{int(source)} seconds")
        elif kind == LOG_LINK_BLOCKED:
            out.append(f"[C{conn.conn_id}][L{record.link_id}] Link blocked with zero credit for "
                       f"{int(source)} seconds")
        elif kind == LOG_LINK_ATTACHED:
            caps = _ROUTER_CAPS.get(record.link_type, "")
            out.append(f"[C{conn.conn_id}][L{record.link_id}] Link attached: "
                       f"dir={'in' if record.direction == ipc.DIR_IN else 'out'} "
                       f"source={terminus_text(source, caps)} "
                       f"target={terminus_text(target, caps)}")
        else:
            link = record
            # closed with its connection: "Link lost" when the connection ended in an error
            what = "Link lost" if kind == LOG_LINK_LOST and source else _CLOSED_TEXT[kind]
            out.append(f"[C{conn.conn_id}][L{link.link_id}] {what}: "
                       f"del={link.delivery_count} presett={link.presettled_count} "
                       f"psdrop={link.dropped_presettled_count} acc={link.accepted} "
                       f"rej={link.rejected} rel={link.released} mod={link.modified} "
                       f"delay1={link.delayed_1sec} delay10={link.delayed_10sec} "
                       f"blocked={'yes' if link.blocked else 'no'}")
    return out


def _opened(conn: Any) -> str:
    info = conn.encrypted if isinstance(conn.encrypted, (list, tuple)) else []
    props = info[6] if len(info) > 6 and isinstance(info[6], dict) else {}
    return f"{opened_text(conn)} props={format_map(props)}"


def opened_text(conn: Any) -> str:
    """1.19's ``Connection Opened`` text without the peer's properties: also what a
    connector's ``connectionMsg`` says while its connection is open."""
    info = conn.encrypted if isinstance(conn.encrypted, (list, tuple)) else []
    encrypted = (info[2] or "yes") if len(info) > 2 and info[1] else "no"
    authenticated = bool(info[5]) if len(info) > 5 else bool(conn.sasl)
    vhost = info[9] if len(info) > 9 and isinstance(info[9], str) else ""  # multiTenant's
    auth = conn.sasl if authenticated and conn.sasl else "no"
    return (f"[C{conn.conn_id}] Connection Opened: dir={conn.direction} host={conn.host} "
            f"vhost={vhost} encrypted={encrypted} auth={auth} "
            f"user={conn.user if conn.direction == 'in' else '(null)'} "  # 1.19: no user out
            f"container_id={conn.container}")


def terminus_text(terminus: Optional[dict], caps: str = "") -> str:
    """1.19's qdr_terminus_format: ``{(dyn)ADDRESS dur:.. expire:.. dist:.. timeout:N caps:..}``,
    ``{<coordinator>}``. None (proton's type "unspecified", as a source with no address
    reads) is proton's default terminus, as 1.19 reads it: ``{<none> expire:sess}`` (with
    ``caps``, the text of the capabilities it has, for a router link the worker made)."""
    if not terminus:  # a router link's, made here, reads as 1.19's own: expiring with the link
        return "{<none> expire:link" + caps + "}" if caps else "{<none> expire:sess}"
    if terminus.get("type") == ipc.TERMINUS_COORDINATOR:
        return "{<coordinator>}"
    text = "(dyn)" if terminus.get("dynamic") else ""
    text += terminus.get("address") or "<none>"
    text += _DURABLE.get(terminus.get("durable"), "")
    text += _EXPIRY.get(terminus.get("expiry"), "")
    text += _DIST.get(terminus.get("distribution_mode"), "")
    if terminus.get("timeout"):
        text += f" timeout:{terminus['timeout']}"
    for field, label in _ENCODED:
        encoded = terminus.get(field)
        if encoded:
            text += f" {label}:{_data_text(bytes(encoded))}"
    return "{" + text + "}"


def _data_text(encoded: bytes) -> str:
    """pn_data_format of AMQP-encoded bytes (as 1.19 writes terminus fields)."""
    try:
        from cproton import pn_data_format
        from proton import Data
        data = Data()
        data.decode(encoded)
        # 1.19's buffer size; proton's Data.format() can cut a text short
        err, text = pn_data_format(data._data, 1000)
        if err < 0:
            return repr(encoded)
        return bytes(text).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a peer's malformed field: shown raw, never fatal
        return repr(encoded)


def format_map(props: dict) -> str:
    """A connection's open properties as pn_data_format writes a map of symbol keys:
    ``{:product="qpid-dispatch-router", :"qd.conn-id"=1}``; empty when there are none."""
    if not props:
        return ""
    return "{" + ", ".join(f"{_symbol(k)}={_value(v)}" for k, v in props.items()) + "}"


def _symbol(key: Any) -> str:
    text = str(key)
    if text.replace("_", "a").replace("-", "a").isalnum() and text[:1].isalpha():
        return ":" + text
    return ':"' + text + '"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, dict):
        return format_map(value) or "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if value is None:
        return "null"
    return str(value)
