"""The SASL relay of a listener whose ``saslPlugin`` names an authServicePlugin (1.19).

The router authenticates such a listener's client by relaying its SASL exchange to the
authentication service: the client is offered the service's mechanisms, its sasl-init and
sasl-responses go to the service, the service's challenges come back, and the outcome the
client gets is the service's. On ok the router opens AMQP to the service to read the user and
the address permissions it grants (auth_service.py), and only then tells the client ok; the
client's AMQP bytes that follow go to the engine's proton transport (made without SASL).

:class:`AuthRelay` is sans-I/O: the worker feeds it the client's and the service's bytes, tells
it when the service's socket connected or closed and what time it is, and writes out what it
gives for either side. Rules, with the table below as the only transitions:

* ``(state, event)`` without an entry is a peer breaking SASL's order: the client gets an
  outcome (auth when it was the client, sys-temp when it was the service) and the relay
  fails; the worker closes both sockets. A failure goes to ``failed`` from any state.
* Every way out of ``connecting``/``offered``/``at_service``/``at_client``/``opening`` ends in
  ``done`` (the client got outcome ok) or ``failed`` (the client got a non-ok outcome, or its
  connection is gone); there is no other end state and ``deadline`` bounds the wait.
* The client gets the service's own failure code (auth, sys, sys-perm, sys-temp); a service
  that cannot be reached, breaks the protocol, closes, or does not answer in time gives
  sys-temp (1.19 gives auth in every case).

Must not import zmq, sockets, ssl or the engine.
"""
from __future__ import annotations

from typing import Optional

from router_io import sasl_frames as sf
from router_io.auth_service import AuthGrant, AuthPlugin, ServiceOpen, read_grant
from router_io.sasl_frames import FrameError, Header, SaslFrame

#: how long a client may take from its first byte to the end of its SASL exchange, and the
#: service to answer (seconds); past it the client gets sys-temp and both sockets close
RELAY_TIMEOUT = 30.0

# states
CONNECTING = "connecting"  # waiting for the service's mechanisms (and the client's header)
OFFERED = "offered"        # the client has the mechanisms; waiting for its sasl-init
AT_SERVICE = "at_service"  # the client's init/response went on; waiting for the service
AT_CLIENT = "at_client"    # the service's challenge went on; waiting for the client
OPENING = "opening"        # the service said ok; waiting for its AMQP open
DONE = "done"
FAILED = "failed"

# events
CLIENT_HEADER = "client_header"
SERVICE_MECHS = "service_mechanisms"
CLIENT_INIT = "client_init"
CLIENT_RESPONSE = "client_response"
SERVICE_CHALLENGE = "service_challenge"
SERVICE_OK = "service_ok"
SERVICE_REFUSED = "service_refused"
SERVICE_OPEN = "service_open"
SERVICE_LOST = "service_lost"  # unreachable, closed, broke the protocol, too slow
CLIENT_LOST = "client_lost"

_TRANSITIONS = {
    (CONNECTING, CLIENT_HEADER): CONNECTING,
    (CONNECTING, SERVICE_MECHS): CONNECTING,  # -> OFFERED once both have come (_offer)
    (CONNECTING, SERVICE_LOST): FAILED,
    (CONNECTING, CLIENT_LOST): FAILED,
    (OFFERED, CLIENT_INIT): AT_SERVICE,
    (OFFERED, SERVICE_LOST): FAILED,
    (OFFERED, CLIENT_LOST): FAILED,
    (AT_SERVICE, SERVICE_CHALLENGE): AT_CLIENT,
    (AT_SERVICE, SERVICE_OK): OPENING,
    (AT_SERVICE, SERVICE_REFUSED): FAILED,
    (AT_SERVICE, SERVICE_LOST): FAILED,
    (AT_SERVICE, CLIENT_LOST): FAILED,
    (AT_CLIENT, CLIENT_RESPONSE): AT_SERVICE,
    (AT_CLIENT, SERVICE_LOST): FAILED,
    (AT_CLIENT, CLIENT_LOST): FAILED,
    (OPENING, SERVICE_OPEN): DONE,
    (OPENING, SERVICE_LOST): FAILED,
    (OPENING, CLIENT_LOST): FAILED,
}
_ENDED = (DONE, FAILED)


class RelayError(Exception):
    """An event the table has no entry for."""


class AuthRelay:
    """One client's SASL exchange relayed to the service (see the module doc)."""

    def __init__(self, plugin: AuthPlugin, now: float, allowed: Optional[list] = None,
                 timeout: float = RELAY_TIMEOUT) -> None:
        self.plugin = plugin
        self.allowed = [m.upper() for m in allowed or []]  # the listener's saslMechanisms
        self.deadline = now + timeout
        self.state = CONNECTING
        self.client_reader = sf.FrameReader()
        self.service_reader = sf.FrameReader()
        self.client_out = bytearray()
        self.service_out = bytearray()
        self.client_header = False
        self.service_header = False
        self.mechanisms: Optional[list] = None  # the service's, as offered to the client
        self.mechanism = ""                     # the client's choice
        self.opening: Optional[ServiceOpen] = None
        self.grant: Optional[AuthGrant] = None
        self.leftover = b""   # the client's bytes after its SASL exchange (the engine's)
        self.error = ""       # why it failed, for the log
        self.service_done = False  # nothing more for or from the service
        self.client_gone = False
        # failed before the client's protocol header came: the outcome waits for it (a
        # client speaks first), until the deadline
        self.pending_outcome: Optional[int] = None

    # --- inputs ---------------------------------------------------------------------------
    def service_connected(self) -> None:
        self.service_out += sf.SASL_HEADER

    def client_data(self, data: bytes) -> None:
        if self.state in _ENDED:
            if self.state == DONE:
                self.leftover += bytes(data)
            elif self.pending_outcome is not None and data:
                self.client_out += sf.SASL_HEADER
                if bytes(data[:len(sf.SASL_HEADER)]) == sf.SASL_HEADER[:len(data)]:
                    self.client_out += sf.encode_outcome(self.pending_outcome)
                self.pending_outcome = None
            return
        units = self.client_reader.feed(data, stop_at=sf.AMQP_HEADER)
        for unit in units:
            if self.state in _ENDED:
                break
            self._client_unit(unit)

    def service_data(self, data: bytes) -> None:
        if self.state in _ENDED:
            return
        if self.state == OPENING and self.opening is not None:
            self._service_amqp(data)
            return
        units = self.service_reader.feed(data)
        for unit in units:
            if self.state in _ENDED:
                return
            self._service_unit(unit)
            if self.state == OPENING:  # what followed the outcome is AMQP (the open)
                rest = bytes(self.service_reader.rest)
                self.service_reader.rest.clear()
                if rest:
                    self._service_amqp(rest)
                return

    def service_closed(self, reason: str = "connection closed") -> None:
        if self.state not in _ENDED:
            if self.state == OPENING and self.opening is not None:
                self.opening.eof()
                if self.opening.error:
                    reason = self.opening.error
            self._service_lost(reason)
        self.service_done = True

    def client_closed(self) -> None:
        self.client_gone = True
        self.pending_outcome = None
        if self.state not in _ENDED:
            self._event(CLIENT_LOST)
            self.error = "client closed the connection during SASL"
            self.service_done = True

    def tick(self, now: float) -> None:
        if self.pending_outcome is not None and now >= self.deadline:
            self.pending_outcome = None  # the client never spoke: it just gets closed
        if self.state not in _ENDED and now >= self.deadline:
            if self.state in (OFFERED, AT_CLIENT) or (self.state == CONNECTING
                                                      and self.mechanisms is not None):
                self._fail("the client did not finish SASL in time", sf.AUTH)
            else:
                self._service_lost("no answer in time")

    # --- outputs --------------------------------------------------------------------------
    def take_client_output(self) -> bytes:
        out = bytes(self.client_out)
        self.client_out.clear()
        return out

    def take_service_output(self) -> bytes:
        if self.opening is not None:
            self.service_out += self.opening.output()
        out = bytes(self.service_out)
        self.service_out.clear()
        return out

    @property
    def ended(self) -> bool:
        return self.state in _ENDED

    # --- the table --------------------------------------------------------------------------
    def _event(self, event: str) -> None:
        new = _TRANSITIONS.get((self.state, event))
        if new is None:
            raise RelayError(f"{event} in state {self.state}")
        self.state = new

    # --- the client's side ------------------------------------------------------------------
    def _client_unit(self, unit: object) -> None:
        if isinstance(unit, FrameError):
            self._client_broke(f"{unit.condition}: {unit.description}")
            return
        if isinstance(unit, Header):
            if self.client_header:
                # the AMQP header after SASL (the reader stopped there; what follows is the
                # engine's): a client may send it before our outcome, once its part is done
                if unit.raw != sf.AMQP_HEADER or self.state not in (AT_SERVICE, OPENING):
                    self._client_broke(f"unexpected protocol header {unit.raw!r}")
                return
            if unit.raw != sf.SASL_HEADER:
                # not SASL where SASL is required: our header, then the connection closes
                self.client_out += sf.SASL_HEADER
                self._fail("client did not start SASL", outcome=None)
                return
            self.client_header = True
            self.client_out += sf.SASL_HEADER
            self._do(CLIENT_HEADER)
            self._offer()
            return
        assert isinstance(unit, SaslFrame)
        if not self.client_header:
            self._client_broke("SASL frame before the protocol header")
        elif unit.code == sf.SASL_INIT:
            mech = unit.field(0)
            if not isinstance(mech, str) or not mech:
                self._client_broke("sasl-init does not name a mechanism")
                return
            self.mechanism = str(mech)
            if self.state == OFFERED and self.mechanism not in (self.mechanisms or []):
                self._fail(f"mechanism {self.mechanism} was not offered", sf.AUTH)
                return
            try:
                response = sf.as_bytes(unit.field(1))
            except FrameError as exc:
                self._client_broke(exc.description)
                return
            if self._do(CLIENT_INIT):
                self.service_out += sf.encode_init(self.mechanism, response, self.plugin.realm)
        elif unit.code == sf.SASL_RESPONSE:
            try:
                response = sf.as_bytes(unit.field(0))
            except FrameError as exc:
                self._client_broke(exc.description)
                return
            if self._do(CLIENT_RESPONSE):
                self.service_out += sf.encode_response(response)
        else:
            self._client_broke(f"{unit.name} from a client")

    def _offer(self) -> None:
        if self.state == CONNECTING and self.client_header and self.mechanisms is not None:
            self.client_out += sf.encode_mechanisms(self.mechanisms)
            self.state = OFFERED

    def _client_broke(self, why: str) -> None:
        if not self.client_header:  # not even SASL's header: ours, then the connection closes
            self.client_out += sf.SASL_HEADER
            self._fail(f"client did not start SASL: {why}", outcome=None)
            return
        self._fail(f"client broke SASL: {why}", sf.AUTH)

    # --- the service's side -----------------------------------------------------------------
    def _service_unit(self, unit: object) -> None:
        if isinstance(unit, FrameError):
            self._service_lost(f"{unit.condition}: {unit.description}")
            return
        if isinstance(unit, Header):
            if unit.raw != sf.SASL_HEADER or self.service_header:
                self._service_lost(f"service answered with protocol header {unit.raw!r}")
                return
            self.service_header = True
            return
        assert isinstance(unit, SaslFrame)
        if not self.service_header:
            self._service_lost("SASL frame from the service before its header")
        elif unit.code == sf.SASL_MECHANISMS:
            try:
                offered = sf.as_symbols(unit.field(0))
            except FrameError as exc:
                self._service_lost(exc.description)
                return
            if self.allowed:  # the listener's saslMechanisms narrow the service's list
                offered = [m for m in offered if m.upper() in self.allowed]
            if self._do(SERVICE_MECHS, lost=True):
                self.mechanisms = offered
                if not offered:
                    self._fail("the service offers none of the listener's saslMechanisms",
                               sf.AUTH)
                    return
                self._offer()
        elif unit.code == sf.SASL_CHALLENGE:
            try:
                challenge = sf.as_bytes(unit.field(0))
            except FrameError as exc:
                self._service_lost(exc.description)
                return
            if self._do(SERVICE_CHALLENGE, lost=True):
                self.client_out += sf.encode_challenge(challenge)
        elif unit.code == sf.SASL_OUTCOME:
            code = unit.field(0)
            if not isinstance(code, int) or not 0 <= code <= sf.SYS_TEMP:
                self._service_lost(f"sasl-outcome code {code!r}")
            elif int(code) == sf.OK:
                if self._do(SERVICE_OK, lost=True):
                    self.opening = ServiceOpen(self.plugin.host)
            else:
                if self._do(SERVICE_REFUSED, lost=True):
                    self.error = ("authentication refused by the service (outcome "
                                  f"{int(code)})")
                    self.client_out += sf.encode_outcome(int(code))
                    self.service_done = True
        else:
            self._service_lost(f"{unit.name} from the service")

    def _service_amqp(self, data: bytes) -> None:
        opening = self.opening
        assert opening is not None
        opening.feed(data)
        if opening.opened and self.state == OPENING:
            self.grant = read_grant(opening.properties)
            self._event(SERVICE_OPEN)
            opening.close()  # the close goes out with take_service_output; then the socket
            self.service_done = True
            self.client_out += sf.encode_outcome(sf.OK)
            self._finish_ok()
        elif opening.error:
            self._service_lost(opening.error)

    def _service_lost(self, why: str) -> None:
        self._fail(f"authentication service {self.plugin.address}: {why}", sf.SYS_TEMP)

    # --- ends ---------------------------------------------------------------------------------
    def _do(self, event: str, lost: bool = False) -> bool:
        """Take ``event``; an event out of order fails the relay (the client's or, with
        ``lost``, the service's fault). True when it was taken."""
        try:
            self._event(event)
        except RelayError as exc:
            if lost:
                self._service_lost(f"out of order: {exc}")
            else:
                self._client_broke(f"out of order: {exc}")
            return False
        return True

    def _fail(self, why: str, outcome: Optional[int]) -> None:
        self.error = why
        if outcome is not None and self.client_header:
            self.client_out += sf.encode_outcome(outcome)
        elif outcome is not None and not self.client_gone:
            self.pending_outcome = outcome
        self.state = FAILED
        self.service_done = True

    def _finish_ok(self) -> None:
        """Done: what the client sent after its SASL frames (its AMQP header if it came
        already, and whatever the reader kept) is the engine's; later bytes too."""
        reader = self.client_reader
        if reader.stopped:
            self.leftover += sf.AMQP_HEADER
        self.leftover += bytes(reader.rest)
        reader.rest.clear()
