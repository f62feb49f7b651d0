"""Failover lists: a listener offers its ``failoverUrls``, a connector follows them, as 1.19.

What Qpid Dispatch 1.19 does (observed on a real 1.19 router; with ``QDROUTERD_1X`` set these
tests run the 1.19 router in the same places to compare):

- a listener's ``failoverUrls`` go out in the open's properties as ``failover-server-list``: a
  list of maps, ``network-host`` and ``port`` (strings, 5672 when the URL has none) and
  ``scheme`` when the URL has one;
- a connector whose peer sent one shows it in management's ``failoverUrls``: the address it is
  connected to first, then the offered ones ("amqp://host:port, ...");
- when that peer goes away the connector goes through the list and reaches the next address.

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations

import os
import time

import proton
import pytest

from conftest import free_port
from test_max_sessions import RawClient

TIMEOUT = 15.0
ONE_X = os.environ.get("QDROUTERD_1X", "")
URLS = "amqp://127.0.0.1:9999, amqps://otherhost:1234, plainhost"


def _need_1x() -> None:
    if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
        pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")


def _listener(port: int, urls: str) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            failoverUrls: {urls}
        }}
        """


def _connector(port: int) -> str:
    return f"""
        connector {{
            name: peer
            host: 127.0.0.1
            port: {port}
            role: normal
            saslMechanisms: ANONYMOUS
        }}
        """


@pytest.fixture(params=["ours", "1.x"])
def start(request, router_factory, tmp_path):
    """start(body) -> url of a fresh router (ours or 1.19) with ``body`` appended."""
    procs = []

    def make(body: str) -> str:
        if request.param == "ours":
            return router_factory(extra=body, router_id="Router.A").url
        _need_1x()
        from test_autolinks_1x import start_1x
        router = start_1x(tmp_path, "A", body)
        procs.append(router.proc)
        return router.url

    yield make
    for proc in procs:
        proc.stop()


def test_listener_offers_its_failover_urls_in_the_open(start):
    port = free_port()
    start(_listener(port, URLS))
    client = RawClient(port, 0)
    try:
        client.pump(lambda: client.conn.state & proton.Endpoint.REMOTE_ACTIVE)
        props = {str(k): v for k, v in client.conn.remote_properties.items()}
        offered = props["failover-server-list"]
        assert isinstance(offered, list)
        assert [{str(k): v for k, v in entry.items()} for entry in offered] == [
            {"network-host": "127.0.0.1", "port": "9999", "scheme": "amqp"},
            {"network-host": "otherhost", "port": "1234", "scheme": "amqps"},
            {"network-host": "plainhost", "port": "5672"}]
        for entry in offered:  # symbol keys, string values
            assert all(type(k) is proton.symbol for k in entry)
            assert all(type(v) is str for v in entry.values())
    finally:
        client.close()


def test_listener_without_failover_urls_offers_none(start):
    port = free_port()
    start(f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)
    client = RawClient(port, 0)
    try:
        client.pump(lambda: client.conn.state & proton.Endpoint.REMOTE_ACTIVE)
        assert "failover-server-list" not in {str(k) for k in client.conn.remote_properties}
    finally:
        client.close()


def _read_connector(url: str) -> dict:
    from test_management import T, Mgmt
    mgmt = Mgmt(url)
    try:
        status, _, body = mgmt.call({"operation": "READ", "type": T + "connector",
                                     "name": "peer"})
        assert status == 200
        return body
    finally:
        mgmt.close()


def _wait_connector(url: str, until, what: str) -> dict:
    deadline = time.monotonic() + TIMEOUT
    while True:
        body = _read_connector(url)
        if until(body):
            return body
        assert time.monotonic() < deadline, f"{what}: {body}"
        time.sleep(0.2)


def test_connector_shows_and_follows_the_offered_list(start, router_factory):
    """A (ours or 1.19) connects to our B, whose listener offers C's address and one more;
    A's connector shows B first, then them; when B goes, A reaches C."""
    port_b, port_c = free_port(), free_port()
    router_c = router_factory(router_id="Router.C", extra=_listener(port_c, "127.0.0.1:1"))
    router_b = router_factory(router_id="Router.B", extra=_listener(
        port_b, f"amqp://127.0.0.1:{port_c}, amqps://otherhost:1234"))
    url_a = start(_connector(port_b))
    body = _wait_connector(url_a, lambda b: b["connectionStatus"] == "SUCCESS"
                           and "," in (b["failoverUrls"] or ""), "A connected to B")
    assert body["failoverUrls"] == (f"amqp://127.0.0.1:{port_b}, amqp://127.0.0.1:{port_c}, "
                                    "amqps://otherhost:1234")
    router_b.proc.stop()
    # C offered its own list (127.0.0.1:1): A keeps its own address (B), C's and C's offer,
    # and drops what B offered
    _wait_connector(url_a, lambda b: b["connectionStatus"] == "SUCCESS" and b["failoverUrls"]
                    == f"amqp://127.0.0.1:{port_c}, amqp://127.0.0.1:1, amqp://127.0.0.1:{port_b}",
                    "A connected to C")
    # and C really has A's connection
    from test_management import T, Mgmt
    mgmt = Mgmt(router_c.url)
    try:
        status, _, body = mgmt.call({"operation": "QUERY", "entityType": T + "connection"},
                                    {"attributeNames": ["container", "dir"]})
        assert status == 200
        assert ["Router.A", "in"] in body["results"]
    finally:
        mgmt.close()


def test_bad_failover_list_is_refused_at_start(tmp_path):
    """An item with no host: 1.19 does not start ("Unable to create listener, bad failover
    list: Value: No network host in failover item"); ours refuses the file with that text."""
    import subprocess
    import sys
    conf = tmp_path / "bad.conf"
    conf.write_text("router {\n    mode: standalone\n    id: R\n}\n" + _listener(
        free_port(), "amqp://a:1,,b"))
    run = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert ("Unable to create listener, bad failover list: Value: No network host in failover "
            "item" in run.stdout + run.stderr)


def test_bad_failover_list_is_refused_by_management(start):
    """1.19 answers CREATE of such a listener 500 "CError: Value: No network host in failover
    item" and creates none."""
    from test_management import T, Mgmt
    mgmt = Mgmt(start(""))
    try:
        port = free_port()
        status, text, _ = mgmt.call({"operation": "CREATE", "type": T + "listener",
                                     "name": "bad"},
                                    {"host": "127.0.0.1", "port": str(port),
                                     "failoverUrls": "a,,b"})
        assert (status, text) == (500, "CError: Value: No network host in failover item")
        status, _, body = mgmt.call({"operation": "QUERY", "entityType": T + "listener"},
                                    {"attributeNames": ["name"]})
        assert ["bad"] not in body["results"]
    finally:
        mgmt.close()
