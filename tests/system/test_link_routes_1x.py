"""Link routing in a network mixing our routers and a real Qpid Dispatch 1.19 (skipped unless
``QDROUTERD_1X`` names its install prefix, see test_mixed_1x.py), to a real broker
(tests/brokers.py). ``X`` is the 1.19 router, ``A``/``C`` ours::

    client ── A ── X ── broker      (1.19 has the broker: A learns its routes, attaches via X)
    client ── X ── C ── broker      (ours has the broker: 1.19 learns them, attaches via C)
"""
from proton import Message
from proton.utils import BlockingConnection

from test_link_routes import TIMEOUT, Mgmt, route_config, wait_remote
from test_mixed_1x import mixed, pytestmark  # noqa: F401 - fixture and the skip condition


def round_trip(router, address):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        snd = conn.create_sender(address)
        for i in range(3):
            snd.send(Message(body=f"m{i}"))  # the broker's accept comes back
        rcv = conn.create_receiver(address, credit=10)
        return [rcv.receive(timeout=TIMEOUT).body for _ in range(3)]
    finally:
        conn.close()


def test_ours_routes_attaches_to_a_broker_behind_1_19(mixed, c_broker):
    broker = c_broker("broker.1x")
    mixed.add_1x("X", extra=route_config(broker))
    a = mixed.add("A", connect_to=(("X", 1),))
    wait_remote(a)
    assert round_trip(a, "queue.via1x") == ["m0", "m1", "m2"]


def test_1_19_routes_attaches_to_a_broker_behind_ours(mixed, c_broker):
    broker = c_broker("broker.ours")
    mixed.add("C", extra=route_config(broker))
    x = mixed.add_1x("X", connect_to=(("C", 1),))
    wait_remote(x)
    assert round_trip(x, "queue.viaours") == ["m0", "m1", "m2"]


def test_qdstat_linkroutes_and_addresses_as_1_19_shows_them(mixed, c_broker):
    """The same link routes on 1.19 (X) and on ours (A), both connected to the broker: each
    qdstat (1.19's and ours) prints the same --linkroutes table for both routers, and the
    route addresses have the same keys, distribution and containerCount."""
    from test_link_routes import wait_active  # noqa: PLC0415
    from test_mixed_1x import qdstat_1x, qdstat_ours  # noqa: PLC0415
    broker = c_broker("broker.qdstat")
    extra = route_config(broker) + f"""
        linkRoute {{
            pattern: a.*.b
            direction: in
            containerId: {broker.container_id}
            addExternalPrefix: ext.
            delExternalPrefix: a.
        }}
        """
    x = mixed.add_1x("X", extra=extra)
    a = mixed.add("A", extra=extra)
    wait_active(x, count=3)
    wait_active(a, count=3)

    def table(text):  # without the date and router id lines (trailing blanks aside)
        return [line.rstrip() for line in text.splitlines()[2:]]
    expected = table(qdstat_1x(x.port, "--linkroutes"))
    assert "add-ext-prefix" in "\n".join(expected)
    assert table(qdstat_1x(a.port, "--linkroutes")) == expected
    assert table(qdstat_ours(a.port, "--linkroutes")) == expected

    def route_addresses(router):
        client = Mgmt(router.url)
        try:
            return sorted((r["key"], r["distribution"], r["containerCount"])
                          for r in client.query("router.address",
                                                ["key", "distribution", "containerCount"])
                          if r["distribution"] == "linkBalanced")
        finally:
            client.close()
    assert route_addresses(a) == route_addresses(x) == [
        ("Cqueue", "linkBalanced", 1), ("Dqueue", "linkBalanced", 1),
        ("Ea.*.b", "linkBalanced", 1)]
