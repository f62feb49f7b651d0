"""The worker's deadline for an accepted connection's handshake (TLS, SASL, AMQP open).

A mixin of Worker (worker.py): ``self.handshakes`` maps each accepted connection whose peer has
not sent its AMQP open yet to the time by which it must, and the worker's tick expires them as
1.19 does (``amqp:not-allowed``, its ERROR line, no "failed" line). Must not import
router_core, agent or supervisor.
"""
from __future__ import annotations

import time
from typing import Any

# a listener's initialHandshakeTimeoutSeconds when it is 0 (its default): the seconds from
# accept to the peer's AMQP open (TLS, SASL included); real clients take milliseconds
HANDSHAKE_TIMEOUT = 30
HANDSHAKE_TIMED_OUT = "Timeout waiting for initial handshake"


class HandshakeMixin:
    handshakes: dict
    force_closed: set
    log_sink: Any

    def _handshake_deadline(self, conn: Any, settings: dict) -> None:
        """An accepted connection must send its AMQP open (after its TLS and SASL) within the
        listener's initialHandshakeTimeoutSeconds; 0 (the default) is HANDSHAKE_TIMEOUT here,
        where 1.19 has no limit (a socket that never finishes its handshake would hold a slot
        of maxConnections for ever)."""
        seconds = int(settings.get("initialHandshakeTimeoutSeconds") or 0) or HANDSHAKE_TIMEOUT
        self.handshakes[conn] = time.monotonic() + seconds

    def _expire_handshakes(self, now: float) -> float:
        """Close the connections past their handshake deadline as 1.19 does: amqp:not-allowed,
        its ERROR line, no "failed" line; returns the next deadline."""
        nxt = now + 1.0
        for conn, deadline in list(self.handshakes.items()):
            if conn.reported_open or conn.closed or conn.refused:
                del self.handshakes[conn]
            elif now >= deadline:
                del self.handshakes[conn]
                conn.refuse("amqp:not-allowed", HANDSHAKE_TIMED_OUT, log=False)
                self.force_closed.add(conn.conn_id)  # its line is this one (as 1.19)
                self.log_sink.log("ERROR", "error", f"Run Time: {HANDSHAKE_TIMED_OUT}")
            else:
                nxt = min(nxt, deadline)
        return nxt
