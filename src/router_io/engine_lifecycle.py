"""Lifecycles at the worker, as transition tables: a connection, a link, a streamed delivery.

Owns the states and events of the three objects whose life the worker tracks, and the tables
that say what each event does in each state. The parts look the pair up where the event happens
(connection and link events: engine.py's ``_rare_event`` and the core's effects; a streamed
delivery's: engine_stream_in.py / engine_stream_out.py) and do what the table says.

A (state, event) pair without an entry is a bug or a peer doing what AMQP does not allow:
:func:`connection_action`, :func:`link_action` and :func:`stream_to` raise ``LifecycleError``;
the loop that called the part (``process_events`` or ``apply_all``) closes that one connection
with ``amqp:internal-error`` (``fail_connection``) and the worker goes on. Every table row is
written out, including the events a state ignores, so a missing one is a decision to read.

Connections (states derived from the Connection's flags: :func:`connection_state`)::

    OPENING --remote open--> OPEN (ConnOpened to the core)
    OPENING --remote open, refused (policy, bad container-id)--> REFUSED (core never hears)
    any --internal error--> FAILED (closing; its input ignored)
    any --socket gone (drop)--> GONE (ConnClosed to the core if it was OPEN)

Links (from the Link record: :func:`link_state`)::

    NONE --peer attach--> PENDING (LinkAttach) --core LinkOpen--> OPEN
    NONE --core AttachOut--> ATTACHING --peer attach--> OPEN (LinkAttached)
    PENDING/OPEN/ATTACHING --peer detach, core LinkRefuse or DetachLink--> NONE (forgotten)

Streamed inbound deliveries (``InStream.stage``)::

    HEAD --routed (StreamTransfer)--> FLOWING --window full--> BLOCKED (Q2) --acked--> FLOWING
    HEAD --link closed before routing--> DISCARDING
    any but ENDED --complete, aborted, refused, link gone--> ENDED

Streamed outbound deliveries (``OutStream.stage``)::

    WAITING (behind another on its link) --its turn--> SENDING --last part in proton--> ENDED
    WAITING/SENDING --aborted by the core--> ENDED

Part of the compiled engine (setup.py ENGINE_PARTS). Imports no other part: plain tables and
small functions, so the tests can read the tables without an engine.
"""

from typing import Any


class LifecycleError(Exception):
    """An event the lifecycle tables have no entry for, in the object's state."""


# --- connections -------------------------------------------------------------------------------
C_GONE, C_OPENING, C_OPEN, C_REFUSED, C_FAILED = range(5)
CONN_STATES = {C_GONE: "gone", C_OPENING: "opening", C_OPEN: "open", C_REFUSED: "refused",
               C_FAILED: "failed"}
# events: proton's (the peer's frames) and the core's effects
CE_REMOTE_OPEN, CE_REMOTE_CLOSE, CE_BEGIN, CE_END, CE_ATTACH, CE_DETACH = range(6)
CE_ATTACH_OUT, CE_CLOSE = 6, 7
CONN_EVENTS = {CE_REMOTE_OPEN: "remote open", CE_REMOTE_CLOSE: "remote close",
               CE_BEGIN: "begin", CE_END: "end", CE_ATTACH: "attach", CE_DETACH: "detach",
               CE_ATTACH_OUT: "AttachOut", CE_CLOSE: "CloseConnection"}
# actions
CA_IGNORE = 0        # nothing to do in this state
CA_OPEN = 1          # the peer's open: policy, security facts, ConnOpened (_on_conn_open)
CA_CLOSE_LOCAL = 2   # answer the peer's close with ours
CA_BEGIN = 3         # a session: policy's count and window, then begin (_on_session_open)
CA_END = 4           # a session ends (_on_session_close)
CA_LINK = 5          # go on to the link's table
CA_ATTACH_OUT = 6    # the router attaches a link on it (_attach_out)
CA_CLOSE = 7         # the core closes it (_fx_close_connection)

_ALIVE = (C_OPENING, C_OPEN, C_REFUSED, C_FAILED)
CONN_TRANSITIONS = {
    (C_OPENING, CE_REMOTE_OPEN): CA_OPEN,
    (C_OPEN, CE_REMOTE_OPEN): CA_IGNORE,      # proton reports an open once: never
    (C_REFUSED, CE_REMOTE_OPEN): CA_IGNORE,
    (C_FAILED, CE_REMOTE_OPEN): CA_IGNORE,    # closing after an internal error
    (C_OPENING, CE_BEGIN): CA_BEGIN,          # (proton refuses a begin before the open)
    (C_OPEN, CE_BEGIN): CA_BEGIN,
    (C_REFUSED, CE_BEGIN): CA_IGNORE,         # frames the peer sent behind its refused open
    (C_FAILED, CE_BEGIN): CA_IGNORE,
    (C_OPEN, CE_ATTACH): CA_LINK,
    (C_REFUSED, CE_ATTACH): CA_IGNORE,        # the core never heard of the connection
    (C_FAILED, CE_ATTACH): CA_IGNORE,
    # (C_OPENING, CE_ATTACH): none: an attach before the open was handled is a bug
    (C_OPEN, CE_ATTACH_OUT): CA_ATTACH_OUT,
    (C_FAILED, CE_ATTACH_OUT): CA_IGNORE,     # the core hears of its close soon
    (C_GONE, CE_ATTACH_OUT): CA_IGNORE,
    # (C_OPENING / C_REFUSED, CE_ATTACH_OUT): none: the core cannot know such a connection
    (C_OPEN, CE_CLOSE): CA_CLOSE,
    (C_FAILED, CE_CLOSE): CA_IGNORE,          # closing already, with its own condition
    (C_GONE, CE_CLOSE): CA_IGNORE,
    # (C_OPENING / C_REFUSED, CE_CLOSE): none: as for AttachOut
}
for _state in _ALIVE:
    CONN_TRANSITIONS[(_state, CE_REMOTE_CLOSE)] = CA_CLOSE_LOCAL
    CONN_TRANSITIONS[(_state, CE_END)] = CA_END
    CONN_TRANSITIONS[(_state, CE_DETACH)] = CA_LINK  # the core hears of a link it knew
for _event in (CE_REMOTE_OPEN, CE_BEGIN, CE_END, CE_ATTACH, CE_DETACH):
    CONN_TRANSITIONS[(C_GONE, _event)] = CA_IGNORE  # events of a connection already dropped
CONN_TRANSITIONS[(C_GONE, CE_REMOTE_CLOSE)] = CA_CLOSE_LOCAL


def connection_state(conn: Any) -> int:
    """The state of a Connection (None: one this engine does not know, or no longer)."""
    if conn is None or conn.closed:
        return C_GONE
    if conn.failed:
        return C_FAILED
    if conn.reported_open:
        return C_OPEN
    if conn.refused:
        return C_REFUSED
    return C_OPENING


def connection_action(conn: Any, event: int) -> int:
    """What ``event`` does to ``conn`` (CA_*); LifecycleError if the table has no entry."""
    state = connection_state(conn)
    action = CONN_TRANSITIONS.get((state, event))
    if action is None:
        raise LifecycleError(f"{CONN_EVENTS[event]} on a connection that is "
                             f"{CONN_STATES[state]}")
    return action


# --- links -------------------------------------------------------------------------------------
L_NONE, L_ATTACHING, L_PENDING, L_OPEN = range(4)
LINK_STATES = {L_NONE: "not known", L_ATTACHING: "attaching", L_PENDING: "pending",
               L_OPEN: "open"}
LE_ATTACH, LE_DETACH, LE_OPEN, LE_REFUSE, LE_CORE_DETACH = range(5)
LINK_EVENTS = {LE_ATTACH: "peer attach", LE_DETACH: "peer detach", LE_OPEN: "LinkOpen",
               LE_REFUSE: "LinkRefuse", LE_CORE_DETACH: "DetachLink"}
LA_IGNORE = 0
LA_ATTACH = 1        # a new link: policy, termini, LinkAttach (_on_link_open)
LA_ANSWER = 2        # the peer answered the router's attach: LinkAttached (_on_attach_answer)
LA_DETACH = 3        # forget it, LinkDetach to the core (_on_link_close)
LA_OPEN = 4          # the core accepts it: attach answered, credit reported (_fx_link_open)
LA_REFUSE = 5        # the core refuses it: attach + detach with its condition (_fx_link_refuse)
LA_CORE_DETACH = 6   # the core detaches it (_fx_detach_link)

LINK_TRANSITIONS = {
    (L_NONE, LE_ATTACH): LA_ATTACH,
    (L_ATTACHING, LE_ATTACH): LA_ANSWER,
    (L_OPEN, LE_ATTACH): LA_IGNORE,         # the answer to a link the router opened itself
    # (L_PENDING, LE_ATTACH): none: proton reports a peer's attach once
    (L_NONE, LE_DETACH): LA_IGNORE,         # refused at attach, or forgotten already
    (L_PENDING, LE_OPEN): LA_OPEN,
    (L_OPEN, LE_OPEN): LA_OPEN,             # a router link, created open: credit only
    (L_ATTACHING, LE_OPEN): LA_OPEN,
    (L_NONE, LE_OPEN): LA_IGNORE,           # gone before the answer came (LinkDetach sent)
    (L_NONE, LE_REFUSE): LA_IGNORE,
    (L_NONE, LE_CORE_DETACH): LA_IGNORE,
}
for _state in (L_ATTACHING, L_PENDING, L_OPEN):
    LINK_TRANSITIONS[(_state, LE_DETACH)] = LA_DETACH
    LINK_TRANSITIONS[(_state, LE_REFUSE)] = LA_REFUSE
    LINK_TRANSITIONS[(_state, LE_CORE_DETACH)] = LA_CORE_DETACH


def link_state(link: Any) -> int:
    """The state of a Link record (None: not known)."""
    if link is None:
        return L_NONE
    if link.awaiting:
        return L_ATTACHING
    return L_OPEN if link.open else L_PENDING


def link_action(link: Any, event: int) -> int:
    """What ``event`` does to ``link`` (LA_*); LifecycleError if the table has no entry."""
    state = link_state(link)
    action = LINK_TRANSITIONS.get((state, event))
    if action is None:
        raise LifecycleError(f"{LINK_EVENTS[event]} on a link that is {LINK_STATES[state]}")
    return action


# --- streamed deliveries -----------------------------------------------------------------------
S_HEAD, S_FLOWING, S_BLOCKED, S_DISCARDING, S_ENDED = range(5)
S_WAITING, S_SENDING = 5, 6
STREAM_STATES = {S_HEAD: "reading its routing fields", S_FLOWING: "flowing",
                 S_BLOCKED: "blocked (Q2)", S_DISCARDING: "discarding", S_ENDED: "ended",
                 S_WAITING: "waiting for its link", S_SENDING: "sending"}
SE_ROUTED, SE_WINDOW_FULL, SE_ACKED, SE_ACKED_SOME, SE_DISCARD, SE_END = range(6)
SE_GO, SE_SENT, SE_ABORT = 6, 7, 8
STREAM_EVENTS = {SE_ROUTED: "routed", SE_WINDOW_FULL: "window full", SE_ACKED: "acked",
                 SE_ACKED_SOME: "acked, still over its window", SE_DISCARD: "discard",
                 SE_END: "end", SE_GO: "its turn", SE_SENT: "last part sent",
                 SE_ABORT: "abort"}

# (state, event) -> the new state
STREAM_TRANSITIONS = {
    # inbound (InStream)
    (S_HEAD, SE_ROUTED): S_FLOWING,
    (S_HEAD, SE_DISCARD): S_DISCARDING,     # its link closed before it could be routed
    (S_FLOWING, SE_WINDOW_FULL): S_BLOCKED,
    (S_BLOCKED, SE_ACKED): S_FLOWING,
    (S_FLOWING, SE_ACKED): S_FLOWING,
    (S_BLOCKED, SE_ACKED_SOME): S_BLOCKED,
    # (S_HEAD / S_DISCARDING, SE_ACKED*): none: the core acks what it was given
    (S_HEAD, SE_END): S_ENDED,
    (S_FLOWING, SE_END): S_ENDED,
    (S_BLOCKED, SE_END): S_ENDED,
    (S_DISCARDING, SE_END): S_ENDED,
    # (S_ENDED, SE_END): none: a stream ends once
    # outbound (OutStream)
    (S_WAITING, SE_GO): S_SENDING,
    (S_SENDING, SE_SENT): S_ENDED,
    (S_WAITING, SE_ABORT): S_ENDED,
    (S_SENDING, SE_ABORT): S_ENDED,
}


def stream_to(rec: Any, event: int) -> None:
    """Move a streamed delivery (InStream or OutStream) on by ``event``; LifecycleError if the
    table has no entry for its state."""
    state = STREAM_TRANSITIONS.get((rec.stage, event))
    if state is None:
        raise LifecycleError(f"{STREAM_EVENTS[event]} on a streamed delivery that is "
                             f"{STREAM_STATES[rec.stage]}")
    rec.stage = state
