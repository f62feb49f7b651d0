"""System tests of management: raw AMQP management requests, qdstat and qdmanage as
subprocesses, and runtime changes (listeners, log levels, closing a connection) against launched
routers. Every CLI run and every wait is bounded."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from proton import ConnectionException, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, SyncRequestResponse

from conftest import free_port

TIMEOUT = 10
T = "org.apache.qpid.dispatch."


class Mgmt:
    def __init__(self, url: str, address: str = "$management") -> None:
        self.conn = BlockingConnection(url, timeout=TIMEOUT)
        self.rr = SyncRequestResponse(self.conn, address)

    def call(self, props: dict, body=None) -> tuple:
        reply = self.rr.call(Message(properties=props, body=body))
        return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def mgmt(router):
    client = Mgmt(router.url)
    yield client
    client.close()


def cli(tool: str, router, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"tools.{tool}", "-b",
                           f"127.0.0.1:{router.port}", "-t", "5", *args],
                          capture_output=True, text=True, timeout=30)


def table(output: str, title: str) -> tuple:
    """(header columns, rows as lists of cells) of the titled table in qdstat output."""
    lines = output.splitlines()
    start = lines.index(title)
    heads = lines[start + 1].split()
    assert set(lines[start + 2].strip()) == {"="}
    rows = [line.split() for line in lines[start + 3:] if line.strip()]
    return heads, rows


# --- raw requests -----------------------------------------------------------------------------
def test_read_and_query_with_paging(mgmt, router):
    status, _, body = mgmt.call({"operation": "READ", "type": "router",
                                 "identity": f"router/{router.id}"})
    assert status == 200 and body["id"] == router.id and body["mode"] == "standalone"
    status, _, body = mgmt.call({"operation": "QUERY", "entityType": "log"},
                                {"attributeNames": ["identity"]})
    every = [row[0] for row in body["results"]]
    assert status == 200 and "log/DEFAULT" in every and len(every) > 5
    status, _, body = mgmt.call({"operation": "QUERY", "entityType": "log", "offset": 2,
                                 "count": 3}, {"attributeNames": ["identity"]})
    assert [row[0] for row in body["results"]] == every[2:5]


def test_bad_requests_get_descriptions_and_router_survives(mgmt, router):
    cases = [({"type": "router"}, None, 400),
             ({"operation": "QUERY", "entityType": "log"}, "not a map", 400),
             ({"operation": "QUERY", "entityType": "no.such.type"}, {}, 400),  # as 1.19
             ({"operation": "NO-SUCH-OP"}, None, 501),  # as 1.19
             ({"operation": "READ", "type": "listener", "name": "nope"}, None, 404),
             ({"operation": "CREATE", "type": "listener"}, {"port": "70000"}, 400),
             ({"operation": "UPDATE", "type": "router", "name": f"router/{router.id}"}, {}, 501),
             ({"operation": "CREATE", "type": "autoLink"},
              {"address": "q", "direction": "in", "connection": "c", "containerId": "d"}, 400)]
    for props, body, expected in cases:
        status, description, _ = mgmt.call(props, body)
        assert status == expected, (props, description)
        assert description and description not in ("OK",)
    # a request nobody can answer (no reply-to), and a non-management message
    sender = mgmt.conn.create_sender("$management", name="garbage-sender")
    sender.send(Message(body="garbage"))
    sender.send(Message(properties={"operation": "QUERY"}, body=[1, 2, 3]))
    status, _, _ = mgmt.call({"operation": "GET-MGMT-NODES"})
    assert status == 200
    assert router.proc.proc.poll() is None


def test_topological_management_address(router):
    client = Mgmt(router.url, f"amqp:/_topo/0/{router.id}/$management")
    try:
        status, _, body = client.call({"operation": "GET-MGMT-NODES"})
        # a standalone router is not in a network: no management nodes (as 1.x, which has no
        # router.node entries outside interior mode)
        assert status == 200 and body == []
    finally:
        client.close()


# --- qdstat -----------------------------------------------------------------------------------
def test_qdstat_general_connections_links_addresses(router):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        conn.create_receiver("stat.orders", credit=5)
        out = cli("qdstat", router, "-g")
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[1] == router.id
        heads, rows = table(out.stdout, "Router Statistics")
        assert heads == ["attr", "value"]
        assert ["Router", "Id", router.id] in rows and ["Mode", "standalone"] in rows

        out = cli("qdstat", router, "-a")
        heads, rows = table(out.stdout, "Router Addresses")
        assert heads == ["class", "addr", "phs", "distrib", "pri", "local", "remote", "in",
                         "out", "thru", "fallback"]  # 1.19's columns
        mobile = {r[1]: r for r in rows if r[0] == "mobile"}
        assert mobile["stat.orders"][2] == "0" and mobile["stat.orders"][5] == "1"
        out = cli("qdstat", router, "-a", "-v")
        heads, rows = table(out.stdout, "Router Addresses")
        assert heads == ["class", "addr", "phs", "distrib", "pri", "in-proc", "local", "remote",
                         "in", "out", "thru", "fallback", "to-proc", "from-proc"]
        mobile = {r[1]: r for r in rows if r[0] == "mobile"}
        assert mobile["$management"][5] == "1"  # the agent is in-process

        out = cli("qdstat", router, "-c")
        heads, rows = table(out.stdout, "Connections")
        assert heads[:4] == ["id", "host", "container", "role"]
        assert len(rows) == 2  # the receiver and qdstat itself; not the agent

        out = cli("qdstat", router, "-l")
        heads, rows = table(out.stdout, "Router Links")
        assert heads[:5] == ["type", "dir", "conn", "id", "id"]  # "conn id" splits
        assert any("stat.orders" in r for r in rows)

        out = cli("qdstat", router, "-a", "--csv")
        assert '"class","addr","phs","distrib"' in out.stdout
        for flag in ("-n", "-m", "-p", "--autolinks", "--linkroutes", "--log", "--vhosts"):
            out = cli("qdstat", router, flag)
            assert out.returncode == 0 and out.stdout.strip(), (flag, out.stderr)
    finally:
        conn.close()


def test_qdstat_unreachable_router_fails_cleanly():
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                          f"127.0.0.1:{port}", "-t", "2"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode != 0 and out.stderr


# --- qdmanage and runtime changes -------------------------------------------------------------
def test_qdmanage_create_and_delete_listener(router_factory):
    router = router_factory(workers=2)
    port = free_port()
    out = cli("qdmanage", router, "create", "type=listener", f"port={port}", "host=127.0.0.1",
              "name=extra", "saslMechanisms=ANONYMOUS")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["name"] == "extra"
    for _ in range(4):  # SO_REUSEPORT spreads connections over both workers
        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=TIMEOUT)
        conn.create_receiver("via.new.port")
        conn.close()
    listed = json.loads(cli("qdmanage", router, "query", "--type", "listener", "name").stdout)
    assert {"name": "extra"} in listed
    again = cli("qdmanage", router, "create", "type=listener", f"port={port}",
                "host=127.0.0.1")
    assert again.returncode != 0 and "BadRequestStatus" in again.stderr
    out = cli("qdmanage", router, "delete", "--type", "listener", "--name", "extra")
    assert out.returncode == 0, out.stderr
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    out = cli("qdmanage", router, "read", "--type", "listener", "--name", "extra")
    assert out.returncode != 0 and "NotFoundStatus" in out.stderr


def test_qdmanage_update_log_level(router):
    out = cli("qdmanage", router, "update", "log/DEFAULT", "enable=debug+")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["enable"] == "debug+"
    cli("qdmanage", router, "query", "--type", "router")
    router.proc.wait_for_line("AGENT (debug)", timeout=TIMEOUT)
    out = cli("qdmanage", router, "read", "--type", "log", "--name", "log/DEFAULT")
    assert json.loads(out.stdout)["enable"] == "debug+"
    bad = cli("qdmanage", router, "update", "log/DEFAULT", "enable=loud")
    assert bad.returncode != 0 and "BadRequestStatus" in bad.stderr


def test_connection_admin_status_deleted_closes_client(router, mgmt):
    victim = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        victim.create_receiver("victim.q")
        container = victim.conn.container
        _, _, body = mgmt.call({"operation": "QUERY", "entityType": "connection"},
                               {"attributeNames": ["identity", "container"]})
        [identity] = [row[0] for row in body["results"] if row[1] == container]
        out = cli("qdmanage", router, "update", "--type", "connection", "--identity", identity,
                  "adminStatus=deleted")
        assert out.returncode == 0, out.stderr
        with pytest.raises(ConnectionException):
            victim.wait(lambda: False, timeout=TIMEOUT)
        try:
            victim.close()  # answers the router's close, so the socket goes away
        except ConnectionException:
            pass
        deadline = time.monotonic() + TIMEOUT
        while True:
            _, _, body = mgmt.call({"operation": "QUERY", "entityType": "connection"},
                                   {"attributeNames": ["identity"]})
            if [identity] not in body["results"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert [identity] not in body["results"]
        status, _, _ = mgmt.call({"operation": "UPDATE", "type": "connection",
                                  "identity": identity}, {"adminStatus": "deleted"})
        assert status == 404
    finally:
        try:
            victim.close()
        except ConnectionException:
            pass


def test_create_address_config_at_run_time(router, mgmt):
    status, description, body = mgmt.call({"operation": "CREATE", "type": "address",
                                           "name": "mc"},
                                          {"prefix": "mc", "distribution": "multicast"})
    if status == 501:
        pytest.skip(f"core without runtime address config: {description}")
    assert status == 201 and body["prefix"] == "mc"
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        receivers = [conn.create_receiver("mc.news", credit=5, name=f"r{i}") for i in range(2)]
        sender = conn.create_sender("mc.news", options=AtMostOnce())
        conn.wait(lambda: sender.link.credit > 0, timeout=TIMEOUT)
        sender.send(Message(body="hello"))
        assert [r.receive(timeout=TIMEOUT).body for r in receivers] == ["hello", "hello"]
    finally:
        conn.close()
    status, _, _ = mgmt.call({"operation": "DELETE", "type": "address", "name": "mc"})
    assert status == 204


def test_get_log_returns_recent_entries(mgmt):
    status, _, body = mgmt.call({"operation": "GET-LOG"})
    assert status == 200 and body
    agent = [e for e in body if e[0] == "AGENT"]  # every process's lines (test_log_parity.py)
    module, level, text, _, _, timestamp = agent[0]
    assert level in ("info", "notice") and timestamp > 0


def test_enable_protocol_trace_of_one_connection(router, mgmt):
    """As 1.19: UPDATE of a connection's enableProtocolTrace logs that connection's frames at
    PROTOCOL trace whatever the log levels (here info+), and only its own; READ shows the
    flag; false stops it."""
    T_ = "org.apache.qpid.dispatch."
    client = BlockingConnection(router.url, timeout=TIMEOUT, container_id="traced-one")
    try:
        def identity():
            _, _, body = mgmt.call({"operation": "QUERY", "entityType": T_ + "connection"},
                                   {"attributeNames": ["identity", "container",
                                                       "enableProtocolTrace"]})
            return {row[1]: (row[0], row[2]) for row in body["results"]}

        conn_id, flag = identity()["traced-one"]
        assert flag is False
        status, _, body = mgmt.call({"operation": "UPDATE", "type": T_ + "connection",
                                     "identity": conn_id}, {"enableProtocolTrace": True})
        assert status == 200 and body["enableProtocolTrace"] is True, body
        assert identity()["traced-one"] == (conn_id, True)
        receiver = client.create_receiver("traced.q")
        router.proc.wait_for_line(f"PROTOCOL (trace) [C{conn_id}]:FRAME: 0 <- @attach(18)",
                                  timeout=TIMEOUT)
        traced = [line for line in router.proc.lines if "PROTOCOL (trace)" in line]
        assert traced and all(f"[C{conn_id}]:" in line for line in traced), traced
        status, _, body = mgmt.call({"operation": "UPDATE", "type": T_ + "connection",
                                     "identity": conn_id}, {"enableProtocolTrace": False})
        assert status == 200 and body["enableProtocolTrace"] is False
        before = sum("PROTOCOL (trace)" in line for line in router.proc.lines)
        receiver.close()  # a detach each way, after the worker turned the trace off
        client.create_sender("traced.q").close()
        assert identity()["traced-one"] == (conn_id, False)
        assert sum("PROTOCOL (trace)" in line for line in router.proc.lines) == before
        status, _, _ = mgmt.call({"operation": "UPDATE", "type": T_ + "connection",
                                  "identity": conn_id}, {})
        assert status == 400  # as 1.19: neither attribute is a bad request
    finally:
        client.close()
