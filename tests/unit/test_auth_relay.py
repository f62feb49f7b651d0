"""The authServicePlugin SASL relay (router_io/auth_relay.py) in memory: a real proton client
(Cyrus SASL) <-> AuthRelay <-> a real proton server with Cyrus SASL and a sasldb (the service,
tests/authsvc.py's ServiceEngine, in a process of its own: EngineHost), bytes pumped between
them; then the client's AMQP goes to a plain proton server transport (the engine's, made
without SASL).

Also the frame codec (router_io/sasl_frames.py), the reading of the service's open
(router_io/auth_service.py) and every way the relay ends without the service's ok.
"""
from __future__ import annotations

import pytest
import proton
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Array, Data, UNDESCRIBED, symbol

import tlscerts
from common import security
from authsvc import EngineHost, open_properties, transport_output
from router_io import auth_relay as ar
from router_io import auth_service as asv
from router_io import sasl_frames as sf
from router_io.frameguard import FrameError

USERS = {"alice": "wonder-land", "bob": "the-builder"}
GRANTS = {"alice@qdtest": {"orders": ["send", "recv"], "audit": ["recv"],
                           "pub.*": ["send"]}}
PLUGIN = asv.AuthPlugin("auth", "auth.example", "5671", realm="my-realm")

pytestmark = pytest.mark.skipif(not tlscerts.have_saslpasswd2(),
                                reason="saslpasswd2 (sasl2-bin) is not installed")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """The service's engines, in a process whose Cyrus reads this sasldb (EngineHost)."""
    host = EngineHost(str(tlscerts.make_sasldb(tmp_path_factory.mktemp("authsvc"), USERS,
                                               mechs="PLAIN SCRAM-SHA-1 SCRAM-SHA-256")))
    yield host
    host.close()


class Client:
    """A proton client connection (SASL with user and password) in memory."""

    def __init__(self, user: str, password: str, mech: str) -> None:
        self.transport = proton.Transport(proton.Transport.CLIENT)
        sasl = self.transport.sasl()
        sasl.allowed_mechs(mech)
        sasl.allow_insecure_mechs = True
        self.connection = proton.Connection()
        self.connection.user = user
        self.connection.password = password
        self.connection.hostname = "router.example"
        self.transport.bind(self.connection)
        self.connection.open()

    def output(self) -> bytes:
        return transport_output(self.transport)

    def push(self, data: bytes) -> None:
        if data and not self.transport.closed:
            self.transport.push(data)

    def error(self) -> str:
        cond = self.transport.condition
        return f"{cond.name}: {cond.description}" if cond else ""


def relay_run(client: Client, relay: ar.AuthRelay, service, rounds: int = 40) -> None:
    """Pump bytes until nothing moves (or the relay ended and settled)."""
    relay.service_connected()
    for _ in range(rounds):
        moved = False
        data = client.output()
        if data and relay.state != ar.DONE:
            relay.client_data(data)
            moved = True
        elif data:
            relay.leftover += data
        to_service = relay.take_service_output()
        if to_service and service is not None:
            service.push(to_service)
            moved = True
        from_service = service.output() if service is not None else b""
        if from_service:
            relay.service_data(from_service)
            moved = True
        to_client = relay.take_client_output()
        if to_client:
            client.push(to_client)
            moved = True
        if not moved:
            return


def authenticate(services: EngineHost, user: str, password: str, mech: str, **kw):
    client = Client(user, password, mech)
    service = services.new(GRANTS)
    relay = ar.AuthRelay(PLUGIN, now=0.0, **kw)
    relay_run(client, relay, service)
    return client, relay, service


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256"])
def test_right_password_reads_identity_and_grant(services, mech):
    client, relay, service = authenticate(services, "alice@qdtest", USERS["alice"], mech)
    assert relay.state == ar.DONE, relay.error
    assert relay.mechanism == mech
    assert relay.grant == asv.AuthGrant("alice@qdtest", True, ("orders", "pub.*"),
                                        ("orders", "audit"))
    # the router asked for the permissions as 1.19 does
    hostname, caps, props = service.remote_opens[0]
    assert hostname == "auth.example"
    assert [str(c) for c in caps] == ["ADDRESS-AUTHZ"]
    assert str(props[symbol("product")]) == "qpid-dispatch-router"
    # the client is through SASL; its AMQP bytes (header + open) wait for the engine
    assert client.transport.sasl().outcome == proton.SASL.OK
    assert relay.leftover.startswith(sf.AMQP_HEADER)
    engine = proton.Transport(proton.Transport.SERVER)  # without SASL, as the engine's
    conn = proton.Connection()
    engine.bind(conn)
    engine.push(relay.leftover)
    assert conn.state & proton.Endpoint.REMOTE_ACTIVE
    assert conn.remote_hostname == "router.example"


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-1"])
def test_wrong_password_gets_the_services_outcome(services, mech):
    client, relay, service = authenticate(services, "alice@qdtest", "not-it", mech)
    assert relay.state == ar.FAILED and relay.service_done
    assert "refused by the service (outcome 1)" in relay.error
    assert client.transport.sasl().outcome == proton.SASL.AUTH
    assert "unauthorized-access" in client.error()
    assert relay.grant is None and relay.leftover == b""


def test_user_without_grants_is_unrestricted(services):
    _, relay, _ = authenticate(services, "bob@qdtest", USERS["bob"], "PLAIN")
    assert relay.state == ar.DONE
    assert relay.grant == asv.AuthGrant("bob@qdtest", False)
    assert asv.grant_settings(relay.grant) is None


def test_listener_mechanisms_narrow_the_services(services):
    client = Client("alice@qdtest", USERS["alice"], "PLAIN SCRAM-SHA-1")
    relay = ar.AuthRelay(PLUGIN, now=0.0, allowed=["SCRAM-SHA-1"])
    relay_run(client, relay, services.new(GRANTS))
    assert relay.mechanisms == ["SCRAM-SHA-1"] and relay.state == ar.DONE


def test_no_common_mechanism_is_auth(services):
    client = Client("alice@qdtest", USERS["alice"], "PLAIN")
    relay = ar.AuthRelay(PLUGIN, now=0.0, allowed=["GSSAPI"])
    relay_run(client, relay, services.new(GRANTS))
    assert relay.state == ar.FAILED and "none of the listener's" in relay.error
    assert client.transport.sasl().outcome == proton.SASL.AUTH


def test_mechanism_not_offered_is_refused_here(services):
    relay = ar.AuthRelay(PLUGIN, now=0.0, allowed=["PLAIN"])
    service = services.new(GRANTS)
    relay.service_connected()
    service.push(relay.take_service_output())
    relay.service_data(service.output())
    relay.client_data(sf.SASL_HEADER)
    assert relay.state == ar.OFFERED
    relay.client_data(sf.encode_init("SCRAM-SHA-1", b"n,,n=alice,r=abc", None))
    assert relay.state == ar.FAILED and "not offered" in relay.error
    assert relay.take_service_output() == b""  # nothing reached the service


# --- the service unreachable, gone, slow or broken: sys-temp, never a hang -------------------
def client_after_header():
    relay = ar.AuthRelay(PLUGIN, now=100.0)
    relay.client_data(sf.SASL_HEADER)
    assert relay.take_client_output() == sf.SASL_HEADER  # answered at once
    return relay


def outcome_of(data: bytes) -> int:
    reader = sf.FrameReader()
    frames = [u for u in reader.feed(data) if isinstance(u, sf.SaslFrame)]
    assert frames and frames[-1].code == sf.SASL_OUTCOME
    return frames[-1].field(0)


def test_service_unreachable_is_sys_temp():
    relay = client_after_header()
    relay.service_closed("connection refused")
    assert relay.state == ar.FAILED and relay.service_done
    assert outcome_of(relay.take_client_output()) == sf.SYS_TEMP
    assert "auth.example:5671: connection refused" in relay.error


def test_service_silent_until_the_deadline_is_sys_temp():
    relay = client_after_header()
    relay.service_connected()
    relay.tick(100.0 + ar.RELAY_TIMEOUT - 1)
    assert relay.state == ar.CONNECTING
    relay.tick(100.0 + ar.RELAY_TIMEOUT)
    assert relay.state == ar.FAILED
    assert outcome_of(relay.take_client_output()) == sf.SYS_TEMP


def test_service_closing_before_its_open_is_sys_temp(services):
    client = Client("alice@qdtest", USERS["alice"], "PLAIN")
    service = services.new(GRANTS)
    relay = ar.AuthRelay(PLUGIN, now=0.0)
    relay.service_connected()
    for _ in range(10):  # up to the service's ok, not its open (our open never goes out)
        relay.client_data(client.output())
        service.push(relay.take_service_output())
        relay.service_data(service.output())
        if relay.state == ar.OPENING:
            break
        client.push(relay.take_client_output())
    assert relay.state == ar.OPENING
    relay.service_closed()
    assert relay.state == ar.FAILED
    assert outcome_of(relay.take_client_output()) == sf.SYS_TEMP


@pytest.mark.parametrize("garbage", [
    b"HTTP/1.1 200 OK\r\n\r\n",                       # not AMQP at all
    sf.AMQP_HEADER,                                   # AMQP without SASL
    sf.SASL_HEADER + sf.encode_challenge(b"x"),       # a challenge before mechanisms
    sf.SASL_HEADER + b"\x00\x00\x00\x10\x02\x00\x00\x00\x00\x53\x40\xff\xff\xff\xff\xff",
])
def test_service_breaking_the_protocol_is_sys_temp(garbage):
    relay = client_after_header()
    relay.service_connected()
    relay.service_data(garbage)
    assert relay.state == ar.FAILED
    assert outcome_of(relay.take_client_output()) == sf.SYS_TEMP


# --- a client breaking SASL: outcome auth (or just our header), never reaching the service ---
@pytest.mark.parametrize("data, outcome", [
    (sf.AMQP_HEADER, None),                                           # no SASL at all
    (b"GET / HTTP/1.1\r\n\r\n", None),                                # not even AMQP
    (b"AMQX\x03\x01\x00\x00", None),                                  # a bad header
    (sf.SASL_HEADER + sf.encode_response(b"x"), sf.AUTH),             # response first
    (sf.SASL_HEADER + sf.encode_outcome(0), sf.AUTH),                 # a server's frame
    (sf.SASL_HEADER + b"\x00\x00\x00\x08\x02\x00\x00\x00", sf.AUTH),  # AMQP frame in SASL
    (sf.SASL_HEADER + b"\x7f\xff\xff\xff\x02\x01\x00\x00", sf.AUTH),  # huge frame
])
def test_client_breaking_sasl(data, outcome):
    relay = ar.AuthRelay(PLUGIN, now=0.0)
    relay.client_data(data)
    assert relay.state == ar.FAILED and relay.service_done
    assert relay.pending_outcome is None  # nothing more is waited for from this client
    out = relay.take_client_output()
    assert out.startswith(sf.SASL_HEADER)
    if outcome is None:
        assert out == sf.SASL_HEADER
    else:
        assert outcome_of(out) == outcome


def test_client_gone_ends_the_relay():
    relay = client_after_header()
    relay.client_closed()
    assert relay.state == ar.FAILED and relay.service_done


def test_every_transition_ends_in_done_or_failed():
    """From every state of the table, the deadline (sys-temp) or a loss reaches an end."""
    states = {s for s, _ in ar._TRANSITIONS} - {ar.DONE, ar.FAILED}
    for state in states:
        assert (state, ar.SERVICE_LOST) in ar._TRANSITIONS
        assert (state, ar.CLIENT_LOST) in ar._TRANSITIONS
    assert set(ar._TRANSITIONS.values()) <= states | {ar.DONE, ar.FAILED}


# --- the codec and the reading of the open ----------------------------------------------------
def test_frames_round_trip():
    reader = sf.FrameReader()
    data = (sf.SASL_HEADER + sf.encode_mechanisms(["PLAIN", "SCRAM-SHA-1"])
            + sf.encode_init("PLAIN", b"\0u\0p", "realm") + sf.encode_challenge(b"c")
            + sf.encode_response(b"r") + sf.encode_outcome(0))
    units = []
    for i in range(len(data)):  # one byte at a time: torn frames wait
        units += reader.feed(data[i:i + 1])
    assert units[0] == sf.Header(sf.SASL_HEADER)
    assert sf.as_symbols(units[1].field(0)) == ["PLAIN", "SCRAM-SHA-1"]
    assert units[2].fields == ("PLAIN", b"\0u\0p", "realm")
    assert [u.code for u in units[3:]] == [sf.SASL_CHALLENGE, sf.SASL_RESPONSE,
                                           sf.SASL_OUTCOME]


def test_init_carries_the_realm_as_hostname():
    assert sf.decode_body(sf.encode_init("PLAIN", None, "r")[8:]).fields == ("PLAIN", None, "r")
    assert sf.decode_body(sf.encode_init("PLAIN", b"", None)[8:]).fields == ("PLAIN", b"")


def test_undecodable_body_is_a_frame_error():
    with pytest.raises(FrameError):
        sf.decode_body(b"\x00\x53\x41\xc0\xff")


def test_read_grant_as_1x():
    props = open_properties("carol", {"carol": {"a": ["send"], "b": ["recv", "send"],
                                                "c": ["browse"]}})
    assert asv.read_grant(props) == asv.AuthGrant("carol", True, ("a", "b"), ("b",))
    # identity as a plain string (1.19's own test service sends one): no user
    assert asv.read_grant({symbol("authenticated-identity"): "x"}) == asv.AuthGrant("", False)
    # address-authz present but empty: everything named is refused
    empty = asv.read_grant({symbol("address-authz"): {}})
    assert empty == asv.AuthGrant("", True)
    # malformed values grant nothing
    assert asv.read_grant({symbol("address-authz"): {"a": "send", symbol("b"): Array(
        UNDESCRIBED, Data.STRING, "send")}}) == asv.AuthGrant("", True)
    assert asv.read_grant(None) == asv.AuthGrant("", False)


def test_grant_settings_police_links_as_1x():
    grant = asv.AuthGrant("carol", True, ("orders", "pub.*", "${user}.in"), ("audit",))
    settings = asv.grant_settings(grant)
    assert settings.approve_address("carol", "orders", source=False)
    assert settings.approve_address("carol", "pub.news", source=False)
    assert settings.approve_address("carol", "carol.in", source=False)
    assert not settings.approve_address("carol", "audit", source=False)
    assert settings.approve_address("carol", "audit", source=True)
    assert not settings.approve_address("carol", "orders", source=True)
    assert settings.allowDynamicSource and settings.allowAnonymousSender
    assert not settings.allowUserIdProxy and not settings.allowWaypointLinks


def test_plugin_address_as_1x():
    assert asv.AuthPlugin.from_attributes({"name": "p", "host": "h", "port": "99"}).address \
        == "h:99"
    old = asv.AuthPlugin.from_attributes({"name": "p", "host": "", "port": "amqp",
                                          "authService": "svc:5673"})
    assert (old.host, old.port) == ("svc", "5673")
    assert security.auth_plugin_problem({"name": "p", "host": "", "port": "amqp"})
    assert security.auth_plugin_address({"authService": "[::1]:99"}) == ("::1", "99")


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.one_of(
    st.binary(max_size=40),
    st.sampled_from([sf.SASL_HEADER, sf.AMQP_HEADER, sf.encode_init("PLAIN", b"\0a\0b", None),
                     sf.encode_response(b"r"), sf.encode_outcome(0),
                     sf.encode_mechanisms(["PLAIN"])])), max_size=8),
       service_first=st.booleans())
def test_any_client_bytes_end_cleanly(chunks, service_first):
    """Whatever a client sends, the relay never raises, sends the service only a sasl-init or
    sasl-response it relays, and is either still waiting (bounded by its deadline) or ended
    with the client answered by our header (and an outcome once the header was SASL's)."""
    relay = ar.AuthRelay(PLUGIN, now=0.0)
    relay.service_connected()
    if service_first:
        relay.service_data(sf.SASL_HEADER + sf.encode_mechanisms(["PLAIN"]))
    for chunk in chunks:
        relay.client_data(chunk)
    relay.take_service_output()
    relay.tick(ar.RELAY_TIMEOUT)
    assert relay.ended
    out = relay.take_client_output()
    if relay.client_header:
        assert out.startswith(sf.SASL_HEADER)
        if relay.state == ar.FAILED:
            assert outcome_of(out) in (sf.AUTH, sf.SYS_TEMP)


def test_failure_before_the_clients_header_answers_it_when_it_comes():
    relay = ar.AuthRelay(PLUGIN, now=0.0)
    relay.service_closed("connection refused")  # before the client said anything
    assert relay.state == ar.FAILED and relay.take_client_output() == b""
    assert relay.pending_outcome == sf.SYS_TEMP
    relay.client_data(sf.SASL_HEADER)
    out = relay.take_client_output()
    assert out.startswith(sf.SASL_HEADER) and outcome_of(out) == sf.SYS_TEMP
    assert relay.pending_outcome is None
    # a client that never speaks: nothing is waited for past the deadline
    silent = ar.AuthRelay(PLUGIN, now=0.0)
    silent.service_closed("connection refused")
    silent.tick(ar.RELAY_TIMEOUT)
    assert silent.pending_outcome is None and silent.take_client_output() == b""


def test_a_client_that_stops_mid_sasl_gets_auth_at_the_deadline(services):
    relay = ar.AuthRelay(PLUGIN, now=0.0)
    service = services.new(GRANTS)
    relay.service_connected()
    service.push(relay.take_service_output())
    relay.service_data(service.output())
    relay.client_data(sf.SASL_HEADER)
    assert relay.state == ar.OFFERED
    relay.tick(ar.RELAY_TIMEOUT)
    assert relay.state == ar.FAILED and "client did not finish" in relay.error
    assert outcome_of(relay.take_client_output()) == sf.AUTH
