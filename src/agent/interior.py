"""Interior mode: the adapter between the core's IPC and the routing-protocol engine.

Sans-I/O: :class:`InteriorRouting` takes the core's interior-mode IPC messages and the current
time (``time.monotonic()`` seconds) and returns what must happen next as a list of *outputs*:
IPC messages for the core (:class:`ipc.ControlSend`, :class:`ipc.LinkState` /
:class:`ipc.RouterGone` / :class:`ipc.TopologyReset`, :class:`ipc.RemoteAddress`) and
:class:`agent.routing.Log` lines for the router log. The control plane
(``agent/controlplane.py``) is the thin glue that feeds it from ZeroMQ, puts the IPC messages in
its normal outbox and writes the log lines.

Contract with the core (``common/ipc.py``)::

    core -> agent  RouterLinkUp(conn_id, cost, container)  engine.link_up(conn_id, cost)
                   RouterLinkDown(conn_id)                  engine.link_down(conn_id)
                   ControlIn(conn_id, payload)              engine.receive(conn_id, opcode, body)
                   LocalAddress(key, present, hint)         engine.add_local / remove_local
                   Reachable(routers)                       engine.set_reachable
    agent -> core  ControlSend(conn_id, to, payload)        every Send effect (conn_id: HELLO's
                                                            control link, else -1: routed by to)
                   [TopologyReset,] LinkState..., RouterGone...   every Topology (full: reset)
                   RemoteAddress(key, router, present, hint)  RemoteAddressAdded / Removed

The core process computes the routes from the LinkStates (``router_core/routetable.py``) and
answers Reachable; management reads the node table from the core's snapshot. The engine's link
ids ARE the core's inter-router connection ids, so ``conns`` in this router's LinkState maps
each neighbour router id to the conn_id the core named in RouterLinkUp.

Batch discipline (``agent/routing/engine.py``): :meth:`handle` applies one message and returns
only immediate replies; call :meth:`poll` after each batch of :meth:`handle` calls and whenever
:meth:`next_deadline` has passed: it ticks the engine when it was fed or is due.

Payloads: a control message is encoded exactly as 1.x composes it (no header, no annotations;
the worker adds ``x-opt-qd.ingress``/``trace``): properties ``{to}``, application-properties
``{"opcode": OPCODE}`` with the key typed as :func:`messages.application_properties` types it
(a *symbol* key for MAU/MAR, which proton's ``Message`` would refuse, hence :class:`proton.Data`),
and an amqp-value body holding the map exactly as :func:`messages.encode` typed it.

Resume after an agent restart: :meth:`InteriorRouting.state_to_save` hands the caller a record
of the engine's state when it is worth saving (at once after my ``ls_seq`` or ``mobile_seq``
changed or the core was told a topology report or remote address, else at most every
:data:`SAVE_INTERVAL` seconds, never the same twice), so the saved state is never behind what the
core or the other routers were told once the caller saves before it flushes its outbox. A record
is the whole state, or a journal record (:func:`is_journal`): the state but the other routers'
addresses, and the changes to those since the last record (the remote addresses the core was
told of, added and removed), which the caller appends to what it saved. So a save after a MAU
costs that MAU's addresses, not every address held (100,000 held cost 15 ms a save); the whole
state is written again once the journal has grown as long as the addresses it started from.
:func:`replay` makes the state from the records. A new agent of the same router calls
:meth:`InteriorRouting.restore_state` with it before any input; what it must tell the core (the
restored remote addresses, again) goes out at its first :meth:`poll`, after its PeerHello. The
caller does the file I/O (``agent/controlplane.py``).

Must not import zmq, sockets or clocks.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Hashable, List, Mapping, Optional

from proton import Data, DataException, Message

from agent import amqpvalue
from agent.management.protocol import encode_value

from agent.routing import (Log, RemoteAddressAdded, RemoteAddressRemoved, RoutingEngine, Send,
                           Topology)
from agent.routing.mobile import DEFAULT_HINT
from common import ipc

__all__ = ["InteriorRouting", "encode_control", "decode_control", "topology_messages",
           "INPUT_TYPES", "SAVE_INTERVAL", "is_journal", "replay"]

#: A routing-state snapshot nothing urgent asks for is saved at most this often (seconds).
SAVE_INTERVAL = 1.0
#: A journal of remote-address changes is begun afresh (the whole state saved) once it holds
#: this many changes, or as many as the addresses the whole state it follows held, if more.
JOURNAL_MIN = 10_000
JOURNAL_VERSION = 1


def is_journal(record: Mapping) -> bool:
    """Whether a record of :meth:`InteriorRouting.state_to_save` is a journal record (appended
    to what was saved) rather than the whole state (which replaces it)."""
    return "journal" in record


def replay(records: Any) -> dict:
    """The state the saved records say: the first (the whole state) with each journal record
    after it applied in order (its remote-address changes, then the rest of its state).
    Raises ValueError for records that are not such a sequence."""
    state: Optional[dict] = None
    for record in records:
        if not isinstance(record, dict):
            raise ValueError("a routing-state record is not a map")
        if not is_journal(record):
            state = record
            continue
        if state is None or record.get("journal") != JOURNAL_VERSION:
            raise ValueError("a journal record without the state it follows")
        remote = (state.get("mobile") or {}).get("remote") or {}
        for change in record.get("remote") or ():
            if len(change) == 3:                       # [router, key, hint]: added
                remote.setdefault(change[0], {})[change[1]] = change[2]
            else:                                       # [router, key]: removed
                held = remote.get(change[0])
                if held is not None:
                    held.pop(change[1], None)
                    if not held:
                        del remote[change[0]]
        state = dict(record["state"])
        state["mobile"] = {**(state.get("mobile") or {}), "remote": remote}
    if state is None:
        raise ValueError("no routing state")
    return state

#: The IPC messages :meth:`InteriorRouting.handle` accepts.
INPUT_TYPES = (ipc.RouterLinkUp, ipc.RouterLinkDown, ipc.ControlIn, ipc.LocalAddress,
               ipc.Reachable)

_PROPERTIES = 0x73
_APPLICATION_PROPERTIES = 0x74
_AMQP_VALUE = 0x77

_LOG_MODULE = {"HELLO": "ROUTER_HELLO", "RA": "ROUTER_LS", "LSR": "ROUTER_LS", "LSU": "ROUTER_LS",
               "MAU": "ROUTER_MA", "MAR": "ROUTER_MA"}


def encode_control(to: str, properties: Mapping[Any, Any], body: Any) -> bytes:
    """The raw AMQP message bytes of one control message (properties, app-properties, body).

    proton encodes it, as 1.x's routers expect it; a body proton cannot hold (more than 65,535
    nodes: a MAU or MAR answer of ~65,000 addresses) is encoded by ``encode_value``, and so is
    one of more than ``_PROTON_MAX_ITEMS`` list items, without building proton's nodes first."""
    if isinstance(body, Mapping) and sum(len(v) for v in body.values()
                                         if isinstance(v, list)) > _PROTON_MAX_ITEMS:
        return _encode_control(to, properties, body, body_by_proton=False)
    try:
        return _encode_control(to, properties, body, body_by_proton=True)
    except DataException:
        return _encode_control(to, properties, body, body_by_proton=False)


def _encode_control(to: str, properties: Mapping[Any, Any], body: Any,
                    body_by_proton: bool) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(_PROPERTIES)
    data.put_list()
    data.enter()
    data.put_null()              # message-id
    data.put_null()              # user-id
    data.put_string(to)          # to
    data.exit()
    data.exit()
    data.put_described()
    data.enter()
    data.put_ulong(_APPLICATION_PROPERTIES)
    data.put_object(dict(properties))
    data.exit()
    if not body_by_proton:
        return data.encode() + b"\x00\x53" + bytes([_AMQP_VALUE]) + encode_value(body)
    data.put_described()
    data.enter()
    data.put_ulong(_AMQP_VALUE)
    data.put_object(body)
    data.exit()
    return data.encode()


_PROTON_MAX_ITEMS = 10_000  # list items in a body beyond which proton's Data is not tried
# bodies of more bytes are read by amqpvalue: proton's Data holds 65,535 nodes at most (each
# takes a byte at least) and its Python wrapper costs ~10 us an address list item, 5x amqpvalue
_PROTON_DECODE_BYTES = 16384


def decode_control(payload: Any) -> tuple:
    """``(opcode, body, to)`` of raw control-message bytes; raise ValueError if it is not one.

    The ``opcode`` application property is found by the text of its key (string or symbol)."""
    if len(payload) > _PROTON_DECODE_BYTES:
        # proton holds 65,535 nodes at most and silently drops the rest of a larger body (a
        # MAU or MAR answer of ~65,000 addresses or more), and is slow on large address lists:
        # such bytes are read here instead
        try:
            app_properties, body, to = _decode_large(payload)
        except amqpvalue.AmqpDecodeError as exc:
            raise ValueError(f"not an AMQP message: {exc}") from exc
    else:
        msg = Message()
        try:
            msg.decode(bytes(payload))
        except Exception as exc:  # proton raises several types for garbage bytes
            raise ValueError(f"not an AMQP message: {exc}") from exc
        app_properties, body, to = msg.properties, msg.body, msg.address
    opcode = None
    for key, value in (app_properties or {}).items():
        if isinstance(key, str) and str(key) == "opcode":
            opcode = value
            break
    if not isinstance(opcode, str) or not opcode:
        raise ValueError("no opcode application property")
    return str(opcode), body, to


def _decode_large(payload: Any) -> tuple:
    """(application properties, body, to) read without proton (amqpvalue)."""
    sections = amqpvalue.decode_sections(payload)
    props = sections.get(amqpvalue.MESSAGE_PROPERTIES)
    to = props[2] if isinstance(props, list) and len(props) > 2 else None
    app = sections.get(amqpvalue.APPLICATION_PROPERTIES)
    if not isinstance(app, dict):
        raise amqpvalue.AmqpDecodeError("no application properties")
    return app, sections.get(amqpvalue.AMQP_VALUE), to


def _int_or(value: Any, default: int = -1) -> int:
    return default if value is None else int(value)


def topology_messages(report: Topology, conn_id: Callable[[Any], int] = int) -> List[Any]:
    """The IPC messages of one :class:`Topology` report (they go in one batch, in order);
    ``conn_id`` turns the engine's link ids into the core's conn_ids (they are the same)."""
    out: List[Any] = [ipc.TopologyReset()] if report.full else []
    for st in report.states:
        out.append(ipc.LinkState(str(st.router), _int_or(st.instance), _int_or(st.pv),
                                 int(st.index), int(st.ls_seq),
                                 {str(p): int(c) for p, c in st.peers.items()},
                                 {str(p): conn_id(c) for p, c in st.conns.items()}))
    out.extend(ipc.RouterGone(str(router)) for router in report.gone)
    return out


class InteriorRouting:
    """The routing protocol of one interior router, driven by the core's IPC messages.

    ``log_enabled(module, level)`` (optional) lets the adapter skip building trace lines
    (``SENT:``/``RCVD:``) nobody would see."""

    def __init__(self, router_id: str, instance: int, router_entity: Optional[Mapping] = None,
                 *, area: str = "0",
                 log_enabled: Optional[Callable[[str, str], bool]] = None,
                 engine: Optional[RoutingEngine] = None) -> None:
        self.router_id = router_id
        self.instance = int(instance)
        self.engine = engine or RoutingEngine.from_router_entity(router_id, self.instance,
                                                                 router_entity or {}, area)
        self.log_enabled = log_enabled or (lambda module, level: False)
        self.links: Dict[int, tuple] = {}       # conn_id -> (cost, container)
        self.fed = False                        # the engine took input since the last tick
        self.held: List[Any] = []               # restore outputs for the core: at the next tick
        self.save_urgent = False                # the core was told something since the last save
        self.saved_at = float("-inf")
        self.saved_seqs: tuple = (-1, -1)
        # the state last saved but the remote addresses; the remote-address changes the core
        # was told of since ([router, key, hint] added, [router, key] removed); how many more
        # the journal may take before the whole state is saved again (None: no whole state
        # saved since this agent started or restored: the next save is one)
        self.saved_state: Optional[dict] = None
        self.remote_changes: List[list] = []
        self.journal_room: Optional[int] = None
        # mobile-address traffic, (direction, opcode) -> [messages, addresses listed, bytes]:
        # what a debug line tells for each MAU/MAR (a full re-sync shows as an absolute MAU)
        self.ma_counts: Dict[tuple, List[int]] = {}
        self.dispatch: Dict[type, Callable[[Any, float], List[Any]]] = {
            ipc.RouterLinkUp: self._link_up, ipc.RouterLinkDown: self._link_down,
            ipc.ControlIn: self._control_in, ipc.LocalAddress: self._local_address,
            ipc.Reachable: self._reachable}

    @classmethod
    def from_spec(cls, spec: Mapping, instance: int,
                  log_enabled: Optional[Callable[[str, str], bool]] = None
                  ) -> Optional["InteriorRouting"]:
        """The adapter for a runtime spec (``spec.json``), or ``None`` unless in interior mode."""
        router = spec.get("router") or {}
        if router.get("mode") != "interior":
            return None
        router_id = spec.get("router_id") or router.get("id")
        return cls(router_id, instance, router, log_enabled=log_enabled)

    # ---- inputs --------------------------------------------------------------------------------

    def handle(self, msg: tuple, now: float) -> List[Any]:
        """Apply one IPC message from the core; returns immediate outputs (replies, logs)."""
        handler = self.dispatch.get(type(msg))
        if handler is None:
            raise TypeError(f"not an interior-routing input: {type(msg).__name__}")
        return handler(msg, now)

    def poll(self, now: float) -> List[Any]:
        """Tick the engine if it was fed since the last tick or its deadline has passed."""
        if self.fed or now >= self.engine.next_deadline():
            return self.tick(now)
        return []

    def tick(self, now: float) -> List[Any]:
        self.fed = False
        held, self.held = self.held, []
        return held + self._outputs(self.engine.tick(now))

    def next_deadline(self) -> float:
        """When :meth:`poll` must next run (monotonic seconds; ``-inf`` or past: at once)."""
        if self.fed:
            return float("-inf")
        return self.engine.next_deadline()

    # ---- resume after an agent restart ----------------------------------------------------------

    def restore_state(self, state: Mapping, now: float) -> List[Any]:
        """Carry on from a state saved by an earlier agent of this router (call before any
        input). Returns the log lines; what the core must hear goes out at the next poll."""
        outputs = self._outputs(self.engine.restore_state(state, now))
        self.held.extend(o for o in outputs if not isinstance(o, Log))
        self.save_urgent = False
        self.saved_state = self.engine.snapshot_state(remote=False)
        self.remote_changes, self.journal_room = [], None  # (what was saved: the restored state)
        self.saved_seqs = self._seqs()
        self.saved_at = now
        self.fed = True
        return [o for o in outputs if isinstance(o, Log)]

    def state_to_save(self, now: float) -> Optional[dict]:
        """A record of the engine's state if it should be saved now, else ``None``: the whole
        state, or a journal record to append to what was saved (see the module docstring);
        the caller saves it (and is trusted to) before it flushes its outbox."""
        seqs = self._seqs()
        if not self.save_urgent and seqs == self.saved_seqs and now < self.saved_at + SAVE_INTERVAL:
            return None
        urgent = self.save_urgent or seqs != self.saved_seqs
        self.save_urgent = False
        self.saved_at = now
        self.saved_seqs = seqs
        state = self.engine.snapshot_state(remote=False)
        changes = self.remote_changes
        # a change is known when urgent: no comparison; the remote addresses are never compared
        # (their changes are the journal)
        if not urgent and not changes and state == self.saved_state:
            return None
        self.saved_state = state
        self.remote_changes = []
        if self.journal_room is None or len(changes) > self.journal_room:
            remote = self.engine.mobile.remote_addresses()
            whole = {**state, "mobile": {**state["mobile"], "remote": remote}}
            held = sum(len(keys) for keys in remote.values())
            self.journal_room = max(JOURNAL_MIN, held)
            return whole
        self.journal_room -= len(changes)
        return {"journal": JOURNAL_VERSION, "state": state, "remote": changes}

    def _seqs(self) -> tuple:
        return self.engine.linkstate.ls_seq, self.engine.mobile.mobile_seq

    # ---- views --------------------------------------------------------------------------------

    def neighbours(self) -> Dict[str, Hashable]:
        """Neighbour router id -> the inter-router conn_id it is reached over."""
        return dict(self.engine.neighbours)

    def remote_addresses(self) -> Dict[str, Dict[str, Optional[int]]]:
        return self.engine.remote_addresses()

    # ---- handlers ------------------------------------------------------------------------------

    def _link_up(self, msg: ipc.RouterLinkUp, now: float) -> List[Any]:
        self.links[msg.conn_id] = (msg.cost, msg.container)
        self.fed = True
        out: List[Any] = [Log("debug", "ROUTER", f"Inter-router control link up: connection "
                                                 f"{msg.conn_id} to {msg.container} "
                                                 f"cost {msg.cost}")]
        return out + self._outputs(self.engine.link_up(msg.conn_id, msg.cost))

    def _link_down(self, msg: ipc.RouterLinkDown, now: float) -> List[Any]:
        known = self.links.pop(msg.conn_id, None)
        self.fed = True
        out: List[Any] = []
        if known is not None:
            out.append(Log("debug", "ROUTER", f"Inter-router control link down: connection "
                                              f"{msg.conn_id} to {known[1]}"))
        return out + self._outputs(self.engine.link_down(msg.conn_id))

    def _control_in(self, msg: ipc.ControlIn, now: float) -> List[Any]:
        try:
            opcode, body, _ = decode_control(msg.payload)
        except ValueError as exc:
            return [Log("error", "ROUTER", f"Dropped a control message on connection "
                                           f"{msg.conn_id}: {exc}")]
        out: List[Any] = []
        module = _LOG_MODULE.get(opcode, "ROUTER")
        if self.log_enabled(module, "trace"):
            out.append(Log("trace", module, f"RCVD: {opcode} {body!r} (connection {msg.conn_id})"))
        self.fed = True
        if opcode in ("MAU", "MAR"):
            out.extend(self._count_ma("RCVD", opcode, body, len(msg.payload)))
        return out + self._outputs(self.engine.receive(msg.conn_id, opcode, body, now))

    def _reachable(self, msg: ipc.Reachable, now: float) -> List[Any]:
        self.fed = True
        self.engine.set_reachable(msg.routers)
        return []

    def _local_address(self, msg: ipc.LocalAddress, now: float) -> List[Any]:
        self.fed = True
        if msg.present:
            hint = msg.hint if isinstance(msg.hint, int) and 0 <= msg.hint <= 5 else DEFAULT_HINT
            self.engine.add_local(msg.key, hint)
        else:
            self.engine.remove_local(msg.key)
        return []

    def _count_ma(self, direction: str, opcode: str, body: Any, size: int,
                  to: str = "") -> List[Any]:
        """Count one MAU/MAR in :attr:`ma_counts`; a ROUTER_MA debug line that sums it up."""
        fields = {str(k): v for k, v in body.items()} if isinstance(body, Mapping) else {}

        def count(key: str) -> int:
            value = fields.get(key)
            value = getattr(value, "elements", value)     # proton.Array
            return len(value) if isinstance(value, (list, tuple)) else 0

        listed = count("exist") + count("add") + count("del")
        counts = self.ma_counts.setdefault((direction, opcode), [0, 0, 0])
        counts[0] += 1
        counts[1] += listed
        counts[2] += size
        if not self.log_enabled("ROUTER_MA", "debug"):
            return []
        if opcode == "MAR":
            what = f"have_seq={fields.get('have_seq')}"
        elif "exist" in fields:
            what = f"absolute mobile_seq={fields.get('mobile_seq')} exist={count('exist')}"
        else:
            what = (f"differential mobile_seq={fields.get('mobile_seq')} add={count('add')} "
                    f"del={count('del')}")
        where = f" to {to}" if to else f" from {fields.get('id')}"
        return [Log("debug", "ROUTER_MA", f"{direction} {opcode}{where}: {what}, {size} bytes "
                                          f"(total {counts[0]} messages, {counts[1]} addresses, "
                                          f"{counts[2]} bytes)")]

    # ---- effects -> outputs --------------------------------------------------------------------

    def _outputs(self, effects: List[Any]) -> List[Any]:
        out: List[Any] = []
        for fx in effects:
            if isinstance(fx, Send):
                conn_id = fx.via_link if fx.via_link is not None else -1
                payload = encode_control(fx.to, fx.properties, fx.body)
                out.append(ipc.ControlSend(conn_id, fx.to, payload))
                if fx.opcode in ("MAU", "MAR"):
                    out.extend(self._count_ma("SENT", fx.opcode, fx.body, len(payload), fx.to))
                module = _LOG_MODULE.get(fx.opcode, "ROUTER")
                if self.log_enabled(module, "trace"):
                    out.append(Log("trace", module, f"SENT: {fx.message or fx.body!r} to {fx.to}"
                                   + (f" (connection {conn_id})" if conn_id >= 0 else "")))
            elif isinstance(fx, Topology):
                self.save_urgent = True
                out.extend(topology_messages(fx))
            elif isinstance(fx, RemoteAddressAdded):
                self.save_urgent = True
                self.remote_changes.append([fx.router, fx.key, fx.hint])
                out.append(ipc.RemoteAddress(fx.key, fx.router, True,
                                             -1 if fx.hint is None else int(fx.hint)))
            elif isinstance(fx, RemoteAddressRemoved):
                self.save_urgent = True
                self.remote_changes.append([fx.router, fx.key])
                out.append(ipc.RemoteAddress(fx.key, fx.router, False, -1))
            elif isinstance(fx, Log):
                out.append(fx)
            else:
                out.append(Log("error", "ROUTER", f"unexpected routing effect {fx!r}"))
        return out
